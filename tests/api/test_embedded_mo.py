"""Embedded multi-objective studies: objectives and constraints on the
metrics hpod supplies (epoch metrics at the best epoch, params, flops,
latency_ms, train_seconds) on a tiny Fashion-MNIST subset.

- Bad metric names are 400s naming objectives[i].metric / constraints[i].metric;
  the median pruner on several objectives names tuner.pruner.
- A TPE study of 6 trials completes; each complete trial stores its values
  and metrics, params and flops equal the count by hand for its width,
  infeasible trials (params over the bound) are data, /best answers the
  front of the feasible ones (checked against a naive front here).
- The study is created through the Python client (objectives pass through).
- Refits and ensembles of a study with several objectives need chosen
  trials: top_n is a 400 naming trials that lists the front; "trials" with a
  front member is accepted.
- 14 trials: every member of the front keeps its checkpoint (not only the
  8 best by the first objective), and a model is made from the smallest.
- With executions_per_trial 2, a trial whose first objective is an epoch
  metric says value_n 2 and the executions' spread (before: 1 and null).
- The figures (params, flops, latency) are measured on a model of their
  own before the trial's model exists: hpod's peak memory with two
  objectives and a pruner is that of one objective (before: a second full
  model beside the trial's, outside --max-model-bytes: 1.6x the peak).
"""
import os
import sys

from hpod import Checks, Hpod, parse_args, wait_for
from test_dataset_limits import sanitized

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import hpo_client as hpo  # noqa: E402

DATA = {"name": "fashion-mnist", "limit": 600, "validation_split": 200}
MODEL = {"layers": [{"flatten": {}}, {"dense": {"units": "$units", "activation": "relu"}}, {"dense": {"units": 10}}]}
OBJECTIVES = [{"metric": "val_accuracy", "direction": "maximize"}, {"metric": "flops", "direction": "minimize"}]
BOUND = 795 * 24 + 10  # params of a width of 24: wider is infeasible
STUDY = {"name": "emb-mo", "model": MODEL, "dataset": DATA,
         "space": {"units": {"type": "int", "low": 4, "high": 64}},
         "objectives": OBJECTIVES, "constraints": [{"metric": "params", "max": BOUND}],
         "training": {"max_epochs": 2, "batch_size": 64},
         "tuner": {"algorithm": "tpe", "seed": 5, "n_startup_trials": 3, "max_trials": 6}}


def expect_400(c, hp, path, body, field, what):
    status, out = hp.request("POST", path, body)
    got = out.get("error", {}).get("field") if isinstance(out, dict) else None
    c.check(status == 400 and got == field, "%s: 400 naming %s (got %d %s)" % (what, field, status, out))
    return out


def peak_rss(args, extra):
    """hpod's peak resident memory (VmHWM, MiB) over one trial of a model of
    12.8 million parameters (weights, gradients and Adam's state: 200 MiB)."""
    big = {"layers": [{"flatten": {}}, {"dense": {"units": 16384, "activation": "relu"}}, {"dense": {"units": 10}}]}
    spec = {"name": "mem", "model": big, "dataset": {"name": "fashion-mnist", "limit": 256, "validation_split": 100},
            "space": {"lr": {"type": "float", "low": 1e-3, "high": 2e-3}},
            "training": {"max_epochs": 1, "batch_size": 32}, "tuner": {"seed": 1, "max_trials": 1}}
    spec.update(extra)
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", spec)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 300)
        with open("/proc/%d/status" % hp.proc.pid) as f:
            hwm = [int(line.split()[1]) for line in f if line.startswith("VmHWM:")][0] / 1024
        t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
        return hwm, t["state"]
    finally:
        hp.stop(strict=False)
        hp.cleanup()


def check_figures_memory(args, c):
    if sanitized(args.hpod):  # ASan's quarantine and TSan's shadow keep freed memory resident
        print("  the peak-memory check runs on plain builds only")
        return
    one, s1 = peak_rss(args, {"objective": {"metric": "val_accuracy"}})
    two, s2 = peak_rss(args, {"objectives": [{"metric": "val_accuracy", "direction": "maximize"},
                                             {"metric": "params"}],
                              "tuner": {"seed": 1, "max_trials": 1, "pruner": {"algorithm": "asha"}}})
    print("  peak memory: one objective %.0f MiB, two objectives and a pruner %.0f MiB" % (one, two))
    c.check(s1 == "complete" and s2 == "complete" and two < 1.25 * one,
            "the figures' model is not beside the trial's: %.0f MiB against %.0f" % (two, one))


def check_front_checkpoints(args, c):
    """14 trials on two objectives: every front member keeps its checkpoint
    (hpod keeps the 8 best by the first objective, and the front), and a
    model is made from the one with the fewest params."""
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", {
            "name": "front-kept", "model": MODEL, "dataset": {"name": "fashion-mnist", "limit": 300,
                                                              "validation_split": 100},
            "space": {"units": {"type": "int", "low": 1, "high": 64, "log": True}},
            "objectives": [{"metric": "val_accuracy", "direction": "maximize"},
                           {"metric": "params", "direction": "minimize"}],
            "training": {"max_epochs": 1, "batch_size": 64},
            "tuner": {"algorithm": "random", "seed": 5, "max_trials": 14}})["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 180)
        front = hp.ok("GET", "/api/v1/studies/%d/best" % sid)["trials"]
        root = os.path.join(hp.data_dir, "checkpoints")
        kept = sorted(int(d.split("-")[1]) for d in os.listdir(root) if d.startswith("trial-"))
        lost = [t["trial_id"] for t in front if t["trial_id"] not in kept]
        c.check(front and not lost, "every front member keeps its checkpoint (front %s, kept %s)"
                % ([t["trial_id"] for t in front], kept))
        c.check(len(kept) <= 8 + len(front), "the others are pruned: %d kept" % len(kept))
        if front:
            small = min(front, key=lambda t: t["values"][1])
            m = hp.ok("POST", "/api/v1/trials/%d/model" % small["trial_id"])
            wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % m["id"])["state"] in ("complete", "failed"), 60)
            got = hp.ok("GET", "/api/v1/models/%d" % m["id"])
            c.check(got["state"] == "complete", "a model of the smallest front member: %s %s"
                    % (got["state"], got.get("error")))
    finally:
        hp.stop()
        hp.cleanup()


def check_executions(c, hp):
    """With executions_per_trial 2 the first objective (an epoch metric) is
    the mean of the executions': the trial says so with value_n 2 and their
    spread, as a one-objective trial does; an engine figure first (one
    measurement) says value_n 1."""
    base = {"model": MODEL, "space": {"units": {"type": "int", "low": 8, "high": 8}},
            "dataset": {"name": "fashion-mnist", "limit": 300, "validation_split": 200},
            "training": {"max_epochs": 1, "batch_size": 64},
            "tuner": {"algorithm": "random", "seed": 2, "max_trials": 1, "executions_per_trial": 2}}
    got = {}
    for name, objectives in (("acc-first", OBJECTIVES), ("flops-first", OBJECTIVES[::-1])):
        sid = hp.ok("POST", "/api/v1/studies", dict(base, name=name, objectives=objectives))["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
        tid = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]["id"]
        got[name] = hp.ok("GET", "/api/v1/trials/%d" % tid)
    t = got["acc-first"]
    accs = [p["metrics"]["val_accuracy"] for p in t["curves"] if p["epoch"] == t["best_epoch"]]
    mean = sum(accs) / len(accs) if accs else None
    std = (sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) ** 0.5 if len(accs) == 2 else None
    print("2 executions, val_accuracy first: %s -> value %s value_n %s value_std %s"
          % (accs, t["value"], t["value_n"], t["value_std"]))
    c.check(t["state"] == "complete" and t["value_n"] == 2 and len(accs) == 2 and abs(t["value"] - mean) < 1e-12
            and abs(t["value_std"] - std) < 1e-12,
            "an objective averaged over 2 executions says value_n 2 and their spread (%s %s, by hand %s %s)"
            % (t["value_n"], t["value_std"], mean, std))
    f = got["flops-first"]
    c.check(f["state"] == "complete" and f["value_n"] == 1 and f["value_std"] is None,
            "flops first (one measurement): value_n 1, no spread (%s %s)" % (f["value_n"], f["value_std"]))


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        for extra, field in [({"objectives": [{"metric": "val_acc"}]}, "objectives[0].metric"),
                             ({"constraints": [{"metric": "bogus", "max": 1}]}, "constraints[0].metric"),
                             ({"tuner": {"algorithm": "tpe", "pruner": {"algorithm": "median"}}}, "tuner.pruner"),
                             ({"tuner": {"algorithm": "cmaes"}}, "tuner.algorithm")]:
            expect_400(c, hp, "/api/v1/studies", dict(STUDY, **extra), field, "definition %s" % extra)

        # created through the Python client: the objectives and constraints pass through
        client = hpo.Client(hp.url)
        study = client.create_study(STUDY["name"], STUDY["space"], model=MODEL, dataset=DATA,
                                    training=STUDY["training"], tuner=STUDY["tuner"], objectives=OBJECTIVES,
                                    constraints=STUDY["constraints"])
        sid = study.id
        s = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(s["objectives"] == OBJECTIVES, "the summary names the objectives: %s" % s["objectives"])
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 180)
        trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
        done = [t for t in trials if t["state"] == "complete"]
        c.check(len(done) == 6, "6 trials complete: %s" % [(t["state"], t.get("error")) for t in trials])
        for t in done:
            u, m = t["params"]["units"], t["metrics"]
            want = {"params": 795 * u + 10, "flops": 2.0 * (784 * u + 10 * u)}
            c.check(m["params"] == want["params"] and m["flops"] == want["flops"],
                    "trial %d (units %d): params %s flops %s, by hand %s" % (t["number"], u, m["params"], m["flops"],
                                                                            want))
            c.check(t["values"] == [m["val_accuracy"], m["flops"]], "values are the objectives' metrics: %s" % t["values"])
            c.check(m["latency_ms"] > 0 and m["train_seconds"] > 0 and "val_loss" in m,
                    "engine metrics and epoch metrics stored: %s" % sorted(m))
        best = hp.ok("GET", "/api/v1/studies/%d/best" % sid)
        feas = [t for t in done if t["metrics"]["params"] <= BOUND]
        naive = sorted(a["id"] for a in feas if not any(
            b["values"][0] >= a["values"][0] and b["values"][1] <= a["values"][1] and b["values"] != a["values"]
            for b in feas))
        got = sorted(t["trial_id"] for t in best["trials"])
        c.check(all(t["violation"] == 0 and t["params"]["units"] <= 24 for t in best["trials"]),
                "front members are feasible (params <= %d)" % BOUND)
        print("trials (units, params, val_accuracy, flops): %s" % [(t["params"]["units"], t["metrics"]["params"],
                                                                   round(t["values"][0], 4), t["values"][1])
                                                                  for t in done])
        c.check(got == naive and (best["hypervolume"] > 0 or len(got) <= 1),
                "/best is the feasible front: %s vs %s, hypervolume %s" % (got, naive, best["hypervolume"]))

        # refits and ensembles choose among the front
        out = expect_400(c, hp, "/api/v1/studies/%d/refits" % sid, {"top_n": 2}, "trials", "refit top_n on 2 objectives")
        c.check("Pareto front has %d members" % len(got) in out["error"]["message"],
                "the 400 lists the front: %s" % out["error"]["message"])
        expect_400(c, hp, "/api/v1/studies/%d/ensembles" % sid, {}, "trials", "an ensemble without chosen trials")
        if got:
            r = hp.ok("POST", "/api/v1/studies/%d/refits" % sid, {"trials": [got[0]]})["refits"]
            c.check(len(r) == 1 and r[0]["trial_id"] == got[0], "a front member is refitted: %s" % r)
            e = study.ensemble(trials=got[:2])
            c.check(e.info["kind"] == "ensemble", "an ensemble of chosen front members is queued: %s" % e.info)
        check_executions(c, hp)
    finally:
        hp.stop()
        hp.cleanup()
    check_figures_memory(args, c)
    check_front_checkpoints(args, c)
    c.finish()


if __name__ == "__main__":
    main()
