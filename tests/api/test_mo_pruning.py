"""Several objectives with a pruner (MO-ASHA) and the bayesian tuner (a GP
per objective and constraint, log EHVI) against a real hpod.

- External: a report takes "values" (one number per objective); "value"
  alone on a study with several objectives and a pruner is a 400 naming
  values, as is a vector of the wrong length; the median pruner is a 400
  naming tuner.pruner. ASHA (eta 2) ranks the vectors at a rung by Pareto
  front then crowding: a vector that four trade-offs dominate is pruned, one
  that dominates them goes on; a step reported again keeps its first vector
  (curve point and answer). The vectors are the trials' curve points;
  after a kill -9 the replayed history gives the same decisions; `hpo report
  TRIAL STEP V1 V2` sends values.
- Bayesian with a constraint: 12 asked and told trials, every suggestion in
  the space and most of those after the random start-up feasible; /best is
  the feasible front.
- Embedded with Hyperband: every epoch of a trial reports val_accuracy and
  flops (its curve points keep params, flops, latency_ms, train_seconds),
  and the study completes with some trials pruned at a rung.
"""
import subprocess

from hpod import Checks, Hpod, expect_400, parse_args, wait_for

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "float", "low": 0.0, "high": 1.0}}
OBJECTIVES = [{"metric": "error", "direction": "minimize"}, {"metric": "speed", "direction": "maximize"}]


def report(hp, tid, step, values):
    return hp.ok("POST", "/api/v1/trials/%d/report" % tid, {"step": step, "values": values})["prune"]


def external_asha(c, hp, hpo):
    base = {"name": "mo-asha", "space": SPACE, "objectives": OBJECTIVES,
            "tuner": {"algorithm": "random", "seed": 1, "pruner": {"algorithm": "asha", "eta": 2}}}
    expect_400(c, hp, "/api/v1/studies", dict(base, tuner={"pruner": {"algorithm": "median"}}), "tuner.pruner",
               "the median pruner on two objectives")
    sid = hp.ok("POST", "/api/v1/studies", base)["id"]
    tids = [hp.ok("POST", "/api/v1/studies/%d/ask" % sid)["trial_id"] for _ in range(6)]
    expect_400(c, hp, "/api/v1/trials/%d/report" % tids[0], {"step": 1, "value": 0.5}, "values",
               "value alone with a pruner on two objectives")
    expect_400(c, hp, "/api/v1/trials/%d/report" % tids[0], {"step": 1, "values": [0.5]}, "values",
               "a vector of one number on two objectives")
    # four trade-offs (error down, speed up) at the first rung
    for k in range(4):
        report(hp, tids[k], 1, [k + 1.0, k + 1.0])
    c.check(report(hp, tids[4], 1, [3.5, 2.5]), "a vector (3, 3) dominates is pruned at the rung")
    c.check(not report(hp, tids[5], 1, [0.5, 5.0]), "a vector that dominates them goes on")
    t = hp.ok("GET", "/api/v1/trials/%d" % tids[5])
    c.check(t["curves"] == [{"execution": 0, "epoch": 1, "metrics": {"error": 0.5, "speed": 5.0}}]
            and t["intermediate"] == [{"step": 1, "value": 0.5}],
            "the vector is the trial's curve point, the first objective its intermediate value: %s %s"
            % (t["curves"], t["intermediate"]))
    # a step reported again keeps its first vector, live and stored (what a restart replays)
    c.check(not report(hp, tids[5], 1, [9.0, 0.1]), "a step reported again keeps its first answer")
    t = hp.ok("GET", "/api/v1/trials/%d" % tids[5])
    c.check(t["curves"] == [{"execution": 0, "epoch": 1, "metrics": {"error": 0.5, "speed": 5.0}}]
            and t["intermediate"] == [{"step": 1, "value": 0.5}],
            "and its first vector as its curve point: %s %s" % (t["curves"], t["intermediate"]))
    # a restart replays the vectors: the same kinds of report get the same answers
    hp.kill9()
    hp.start()
    a = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)["trial_id"]
    b = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)["trial_id"]
    c.check(report(hp, a, 1, [3.6, 2.4]), "after kill -9: a dominated vector is still pruned (vectors replayed)")
    c.check(not report(hp, b, 1, [0.4, 6.0]), "after kill -9: a dominating vector goes on")
    # the CLI reports one value per objective
    cli = subprocess.run([hpo, "--url", hp.url, "report", str(b), "3", "0.3", "7"], capture_output=True, text=True,
                         timeout=30)
    c.check(cli.returncode == 0 and cli.stdout.strip() == "continue"
            and hp.ok("GET", "/api/v1/trials/%d" % b)["curves"][-1]["metrics"] == {"error": 0.3, "speed": 7.0},
            "hpo report TRIAL STEP V1 V2 sends values: %d %r" % (cli.returncode, cli.stdout + cli.stderr))


def external_bayesian(c, hp):
    d = {"name": "mo-gp", "space": SPACE, "objectives": OBJECTIVES, "constraints": [{"metric": "cost", "max": 0.3}],
         "tuner": {"algorithm": "bayesian", "seed": 3, "n_startup_trials": 5, "max_trials": 12}}
    expect_400(c, hp, "/api/v1/studies", dict(d, tuner={"algorithm": "bayesian", "acquisition": "ucb"}),
               "tuner.acquisition", "UCB on two objectives")
    sid = hp.ok("POST", "/api/v1/studies", d)["id"]
    feasible_late = 0
    for k in range(12):
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
        x, y = t["params"]["x"], t["params"]["y"]
        c.check(0 <= x <= 1 and 0 <= y <= 1, "suggestion %d in the space: %s" % (k, t["params"]))
        if k >= 5:
            feasible_late += x <= 0.3
        hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"],
              {"values": [(1 - x) + y, 1 - y + x * 0.1], "metrics": {"cost": x}})
    c.check(feasible_late >= 4, "the constraint (x <= 0.3) draws the suggestions after start-up: %d of 7 feasible"
            % feasible_late)
    best = hp.ok("GET", "/api/v1/studies/%d/best" % sid)
    c.check(best["trials"] and all(t["metrics"]["cost"] <= 0.3 for t in best["trials"]),
            "/best is the feasible front: %s" % [t["metrics"] for t in best["trials"]])
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    c.check(s["state"] == "complete" and s["algorithm"] == "bayesian", "the study completes: %s" % s["state"])


def embedded_hyperband(c, hp):
    d = {"name": "emb-mo-hb", "dataset": {"name": "fashion-mnist", "limit": 600, "validation_split": 200},
         "model": {"layers": [{"flatten": {}}, {"dense": {"units": "$units", "activation": "relu"}},
                              {"dense": {"units": 10}}]},
         "space": {"units": {"type": "int", "low": 4, "high": 48},
                   "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
         "objectives": [{"metric": "val_accuracy", "direction": "maximize"}, {"metric": "flops"}],
         "training": {"max_epochs": 3, "batch_size": 64},
         "tuner": {"algorithm": "tpe", "seed": 2, "max_trials": 8,
                   "pruner": {"algorithm": "hyperband", "eta": 3, "min_resource": 1}}}
    sid = hp.ok("POST", "/api/v1/studies", d)["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 240)
    trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
    states = sorted(t["state"] for t in trials)
    c.check(len(trials) == 8 and "failed" not in states and "pruned" in states,
            "8 trials, some pruned at a rung, none failed: %s" % states)
    t = hp.ok("GET", "/api/v1/trials/%d" % trials[0]["trial_id"])
    first = [p["metrics"] for p in t["curves"] if p["execution"] == 0]
    keys = {"params", "flops", "latency_ms", "train_seconds", "val_accuracy"}
    c.check(first and all(keys <= set(m) for m in first)
            and all(m["flops"] == first[0]["flops"] for m in first)
            and all(b["train_seconds"] > a["train_seconds"] for a, b in zip(first, first[1:])),
            "each epoch's curve point keeps the reported objectives and engine figures: %s" % first)


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        external_asha(c, hp, args.hpo)
        external_bayesian(c, hp)
        embedded_hyperband(c, hp)
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
