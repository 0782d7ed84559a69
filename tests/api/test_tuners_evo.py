"""The cmaes and evolution tuners through the API: an ask/tell study with each
runs to completion with several asks before tells (and failed trials), a
cmaes and an evolution study suggest the same trials across an hpod restart
as a twin study that ran without one (their state is replayed from the
stored trials), an embedded study with each trains to completion, and bad
options are 400s naming the field. Seconds."""
import json
import math

from hpod import Checks, Hpod, expect_400, parse_args, read_events

SPACE = {
    "x": {"type": "float", "low": -5.0, "high": 5.0},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "units": {"type": "int", "low": 8, "high": 128, "step": 8},
    "opt": {"type": "choice", "values": ["sgd", "adam"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "condition": {"opt": ["sgd"]}},
}


def objective(p):
    v = (p["x"] - 1.0) ** 2 + (math.log10(p["lr"]) + 2.5) ** 2 + ((p["units"] - 64) / 64.0) ** 2
    if p["opt"] == "sgd":
        v += (p["momentum"] - 0.9) ** 2
    return v


def definition(name, algorithm, seed, max_trials, extra=None):
    tuner = {"algorithm": algorithm, "seed": seed, "max_trials": max_trials}
    tuner.update(extra or {})
    return {"name": name, "objective": {"direction": "minimize"}, "space": SPACE, "tuner": tuner}


def valid(p):
    ok = -5 <= p["x"] <= 5 and 1e-4 <= p["lr"] <= 1e-1 and p["units"] % 8 == 0
    ok = ok and 8 <= p["units"] <= 128 and p["opt"] in ("sgd", "adam")
    return ok and (("momentum" in p) == (p["opt"] == "sgd"))


def drive(hp, sid, batches, batch, c, what, fail_every=0):
    """Asks `batch` trials, then tells them in reverse order; returns the
    asked params in trial-number order."""
    asked = []
    for b in range(batches):
        got = [hp.ok("POST", "/api/v1/studies/%d/ask" % sid) for _ in range(batch)]
        for t in reversed(got):
            if fail_every and t["number"] % fail_every == fail_every - 1:
                hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"state": "failed"})
            else:
                hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": objective(t["params"])})
        asked += sorted(((t["number"], t["params"]) for t in got), key=lambda nt: nt[0])
    c.check(all(valid(p) for _, p in asked), "%s: every suggestion is on the space" % what)
    return asked


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    hp2 = None
    try:
        # 1. each algorithm runs to completion with parallel asks and failures
        for algo, extra in (("cmaes", {"popsize": 6}), ("evolution", {"population": 8, "sample_size": 3})):
            sid = hp.ok("POST", "/api/v1/studies", definition(algo + "-run", algo, 7, 48, extra))["id"]
            drive(hp, sid, 12, 4, c, algo, fail_every=7)
            status, _ = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
            c.check(status == 409, "%s: ask past max_trials is 409, got %d" % (algo, status))
            study = hp.ok("GET", "/api/v1/studies/%d" % sid)
            c.check(study["state"] == "complete", "%s: study completes (%s)" % (algo, study["state"]))
            counts = study["trials_by_state"]
            c.check(counts["complete"] + counts["failed"] == 48 and counts["failed"] >= 6,
                    "%s: 48 trials told: %s" % (algo, counts))
            c.check(study["definition"]["tuner"]["algorithm"] == algo, "%s: algorithm stored" % algo)

        # 2. the twin without a restart ...
        twins = {}
        for algo, extra in (("cmaes", {"popsize": 5}), ("evolution", {"population": 6})):
            sid = hp.ok("POST", "/api/v1/studies", definition(algo + "-twin", algo, 11, 40, extra))["id"]
            twins[algo] = (extra, drive(hp, sid, 10, 4, c, algo + " twin", fail_every=9))
        # ... and the study that is restarted halfway
        restarted = {}
        for algo, (extra, _) in twins.items():
            sid = hp.ok("POST", "/api/v1/studies", definition(algo + "-restarted", algo, 11, 40, extra))["id"]
            restarted[algo] = (sid, drive(hp, sid, 5, 4, c, algo + " before restart", fail_every=9))
        c.check(hp.stop() == 0, "hpod stops cleanly")
        hp2 = Hpod(args.hpod, data_dir=hp.data_dir).start()
        for algo, (sid, first) in restarted.items():
            rest = drive(hp2, sid, 5, 4, c, algo + " after restart", fail_every=9)
            twin = twins[algo][1]
            c.check([n for n, _ in first + rest] == list(range(40)), "%s: numbers 0..39" % algo)
            same = sum(1 for (_, a), (_, b) in zip(first + rest, twin) if a == b)
            c.check(same == 40, "%s: the restarted study suggests what its twin did (%d of 40 equal)"
                    % (algo, same))
            distinct = len({json.dumps(p, sort_keys=True) for _, p in twin})
            c.check(distinct == 40, "%s: 40 distinct suggestions, got %d" % (algo, distinct))

        # 3. embedded: hpod's own workers train the trials each suggests
        for algo, extra in (("cmaes", {"popsize": 4}), ("evolution", {"population": 3})):
            tuner = {"algorithm": algo, "seed": 3, "max_trials": 6}
            tuner.update(extra)
            body = {"name": "embedded-" + algo, "objective": {"metric": "val_accuracy"},
                    "model": {"template": "mlp"},
                    "dataset": {"name": "fashion-mnist", "limit": 1000, "validation_split": 300},
                    "space": {"layers": {"type": "int", "low": 1, "high": 2},
                              "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
                    "training": {"max_epochs": 1, "batch_size": 64}, "tuner": tuner}
            sid = hp2.ok("POST", "/api/v1/studies", body)["id"]
            read_events(hp2.url, sid, timeout=240)
            study = hp2.ok("GET", "/api/v1/studies/%d" % sid)
            c.check(study["state"] == "complete" and study["trials_by_state"]["complete"] == 6,
                    "embedded %s: 6 trials complete (%s %s)" % (algo, study["state"], study["trials_by_state"]))

        # 4. bad options are 400s naming the field
        cases = [
            ({"algorithm": "evolution", "population": 4, "sample_size": 5}, "tuner.sample_size"),
            ({"algorithm": "evolution", "population": 1}, "tuner.population"),
            ({"algorithm": "cmaes", "popsize": 2}, "tuner.popsize"),
            ({"algorithm": "cmaes", "sigma0": 0}, "tuner.sigma0"),
            ({"algorithm": "cma-es"}, "tuner.algorithm"),
        ]
        for tuner, field in cases:
            body = {"name": "bad", "objective": {"direction": "minimize"}, "space": SPACE, "tuner": tuner}
            expect_400(c, hp2, "/api/v1/studies", body, field, str(tuner))
    finally:
        for h in (hp2, hp):
            if h:
                h.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
