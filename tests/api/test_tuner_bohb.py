"""The bohb tuner through the API: an external ask/tell study that reports
intermediate values runs to completion under the hyperband pruner bohb
brings (some trials pruned, the model past its random start), a bohb study
suggests the same trials across an hpod restart as a twin that ran without
one (its model is rebuilt from the stored trials and intermediate values),
an embedded bohb study trains to completion, and bad options are 400s
naming the field. Seconds."""
import json
import math

from hpod import Checks, Hpod, expect_400, parse_args, read_events

SPACE = {
    "x": {"type": "float", "low": -5.0, "high": 5.0},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "opt": {"type": "choice", "values": ["sgd", "adam"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "condition": {"opt": ["sgd"]}},
}
MAX_STEP = 9


def loss(p, step):
    v = (p["x"] - 1.0) ** 2 + (math.log10(p["lr"]) + 2.5) ** 2
    if p["opt"] == "sgd":
        v += (p["momentum"] - 0.9) ** 2
    return v + 1.0 / step


def definition(name, seed, max_trials):
    return {"name": name, "objective": {"direction": "minimize"}, "space": SPACE,
            "tuner": {"algorithm": "bohb", "seed": seed, "max_trials": max_trials,
                      "pruner": {"algorithm": "hyperband", "max_resource": MAX_STEP}}}


def valid(p):
    ok = -5 <= p["x"] <= 5 and 1e-4 <= p["lr"] <= 1e-1 and p["opt"] in ("sgd", "adam")
    return ok and (("momentum" in p) == (p["opt"] == "sgd"))


def drive(hp, sid, batches, batch, c, what):
    """Asks `batch` trials, then runs each (reports steps 1..MAX_STEP until
    told to prune) and tells it; returns the asked params in trial-number
    order and how many were pruned."""
    asked, pruned = [], 0
    for _ in range(batches):
        got = [hp.ok("POST", "/api/v1/studies/%d/ask" % sid) for _ in range(batch)]
        for t in got:
            stop = False
            for step in range(1, MAX_STEP + 1):
                out = hp.ok("POST", "/api/v1/trials/%d/report" % t["trial_id"],
                            {"step": step, "value": loss(t["params"], step)})
                if out["prune"]:
                    stop = True
                    break
            if stop:
                hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"state": "pruned"})
                pruned += 1
            else:
                hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": loss(t["params"], MAX_STEP)})
        asked += sorted(((t["number"], t["params"]) for t in got), key=lambda nt: nt[0])
    c.check(all(valid(p) for _, p in asked), "%s: every suggestion is on the space" % what)
    return asked, pruned


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    hp2 = None
    try:
        # 1. an external study runs to completion; the pruner prunes
        sid = hp.ok("POST", "/api/v1/studies", definition("bohb-run", 7, 36))["id"]
        asked, pruned = drive(hp, sid, 12, 3, c, "bohb")
        status, _ = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
        c.check(status == 409, "ask past max_trials is 409, got %d" % status)
        study = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(study["state"] == "complete", "the study completes (%s)" % study["state"])
        counts = study["trials_by_state"]
        c.check(counts["complete"] + counts["pruned"] == 36 and counts["pruned"] == pruned and pruned > 0,
                "36 trials told, some pruned by hyperband: %s" % counts)
        c.check(study["definition"]["tuner"]["algorithm"] == "bohb", "algorithm stored")
        c.check(len({json.dumps(p, sort_keys=True) for _, p in asked}) == 36, "36 distinct suggestions")

        # 2. a twin without a restart, and the same study restarted halfway
        twin, _ = drive(hp, hp.ok("POST", "/api/v1/studies", definition("bohb-twin", 11, 30))["id"], 10, 3, c,
                        "twin")
        rsid = hp.ok("POST", "/api/v1/studies", definition("bohb-restarted", 11, 30))["id"]
        first, _ = drive(hp, rsid, 5, 3, c, "before restart")
        c.check(hp.stop() == 0, "hpod stops cleanly")
        hp2 = Hpod(args.hpod, data_dir=hp.data_dir).start()
        rest, _ = drive(hp2, rsid, 5, 3, c, "after restart")
        c.check([n for n, _ in first + rest] == list(range(30)), "numbers 0..29")
        same = sum(1 for (_, a), (_, b) in zip(first + rest, twin) if a == b)
        c.check(same == 30, "the restarted study suggests what its twin did (%d of 30 equal)" % same)

        # 3. embedded: hpod's workers train what bohb suggests, hyperband stops them
        body = {"name": "embedded-bohb", "objective": {"metric": "val_accuracy"},
                "model": {"template": "mlp"},
                "dataset": {"name": "fashion-mnist", "limit": 600, "validation_split": 200},
                "space": {"layers": {"type": "int", "low": 1, "high": 2},
                          "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
                "training": {"max_epochs": 3, "batch_size": 64},
                "tuner": {"algorithm": "bohb", "seed": 3, "max_trials": 8}}
        sid = hp2.ok("POST", "/api/v1/studies", body)["id"]
        read_events(hp2.url, sid, timeout=240)
        study = hp2.ok("GET", "/api/v1/studies/%d" % sid)
        counts = study["trials_by_state"]
        c.check(study["state"] == "complete" and counts["complete"] + counts["pruned"] == 8
                and counts["complete"] >= 1,
                "embedded bohb: 8 trials finish (%s %s)" % (study["state"], counts))

        # 4. bad options are 400s naming the field
        cases = [
            ({"algorithm": "bohb", "pruner": {"algorithm": "asha"}}, "tuner.pruner.algorithm"),
            ({"algorithm": "bohb", "pruner": {"algorithm": "none"}}, "tuner.pruner.algorithm"),
            ({"algorithm": "bohb", "random_fraction": 2}, "tuner.random_fraction"),
            ({"algorithm": "bohb", "min_points_in_model": 0}, "tuner.min_points_in_model"),
            ({"algorithm": "bohb", "bandwidth_factor": 0}, "tuner.bandwidth_factor"),
            ({"algorithm": "bohb", "bandwidth_factor": "wide"}, "tuner.bandwidth_factor"),
        ]
        for tuner, field in cases:
            bad = {"name": "bad", "objective": {"direction": "minimize"}, "space": SPACE, "tuner": tuner}
            expect_400(c, hp2, "/api/v1/studies", bad, field, str(tuner))
    finally:
        for h in (hp2, hp):
            if h:
                h.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
