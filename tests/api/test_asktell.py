"""200 ask/tell trials from 4 concurrent clients on a 3-parameter study with a
conditional parameter: unique trial numbers, everything persisted, best is the
true best, and a restarted hpod on the same data dir still has it all."""
import math
import threading

from hpod import Checks, Hpod, parse_args

STUDY = {
    "name": "asktell-concurrent",
    "objective": {"direction": "minimize"},
    "space": {
        "x": {"type": "float", "low": -5.0, "high": 5.0},
        "kind": {"type": "choice", "values": ["quad", "abs"]},
        "scale": {"type": "float", "low": 0.1, "high": 10.0, "log": True,
                  "condition": {"kind": ["abs"]}},
    },
    "tuner": {"algorithm": "random", "seed": 3, "max_trials": 200},
}


def objective(p):
    if p["kind"] == "quad":
        return (p["x"] - 1.0) ** 2
    return p["scale"] * abs(p["x"] - 1.0)


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        told = {}  # trial_id -> (number, value, params)
        lock = threading.Lock()
        errors = []

        def client(k):
            try:
                for _ in range(50):
                    t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
                    v = objective(t["params"])
                    hp.ok("POST", "/api/v1/trials/%d/report" % t["trial_id"], {"step": 0, "value": v + 1})
                    hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": v})
                    with lock:
                        told[t["trial_id"]] = (t["number"], v, t["params"])
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        c.check(not errors, "clients failed: %s" % errors[:3])
        c.check(len(told) == 200, "200 trials told, got %d" % len(told))
        numbers = sorted(n for n, _, _ in told.values())
        c.check(numbers == list(range(200)), "trial numbers are exactly 0..199")
        for n, v, p in told.values():
            active = "scale" in p
            c.check(active == (p["kind"] == "abs"), "scale present iff kind == abs: %s" % p)
        status, _ = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
        c.check(status == 409, "ask past max_trials is 409, got %d" % status)

        def verify(hp_, when):
            trials = hp_.ok("GET", "/api/v1/studies/%d/trials?limit=1000" % sid)
            c.check(trials["total"] == 200, "%s: 200 trials stored, got %d" % (when, trials["total"]))
            stored = {t["id"]: t for t in trials["trials"]}
            bad = [tid for tid, (n, v, p) in told.items()
                   if tid not in stored or stored[tid]["state"] != "complete"
                   or not math.isclose(stored[tid]["value"], v, rel_tol=1e-12, abs_tol=1e-12)
                   or stored[tid]["params"] != p or stored[tid]["number"] != n]
            c.check(not bad, "%s: every told value stored as told (%d differ)" % (when, len(bad)))
            best = hp_.ok("GET", "/api/v1/studies/%d/best?top_n=3" % sid)
            true_best = min(v for _, v, _ in told.values())
            c.check(math.isclose(best["trials"][0]["value"], true_best, abs_tol=1e-15),
                    "%s: best is the true best (%g vs %g)" % (when, best["trials"][0]["value"], true_best))
            vals = [t["value"] for t in best["trials"]]
            c.check(vals == sorted(vals) and len(vals) == 3, "%s: top 3 sorted best first" % when)
            one = hp_.ok("GET", "/api/v1/trials/%d" % best["trials"][0]["trial_id"])
            c.check(len(one["intermediate"]) == 1 and one["intermediate"][0]["step"] == 0,
                    "%s: intermediate value stored" % when)
            study = hp_.ok("GET", "/api/v1/studies/%d" % sid)
            c.check(study["trials_by_state"]["complete"] == 200, "%s: study counts 200 complete" % when)
            c.check(study["definition"]["space"] == STUDY["space"], "%s: definition stored" % when)

        verify(hp, "before restart")
        c.check(hp.stop() == 0, "SIGTERM shuts hpod down with exit code 0")
        hp2 = Hpod(args.hpod, data_dir=hp.data_dir).start()
        try:
            verify(hp2, "after restart")
            # the tuner state is rebuilt: asking continues numbering (but max_trials holds)
            status, _ = hp2.request("POST", "/api/v1/studies/%d/ask" % sid)
            c.check(status == 409, "after restart max_trials still holds")
        finally:
            hp2.stop()
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
