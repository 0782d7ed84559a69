"""Randomised robustness: thousands of mutated requests (seeded, bounded)
against every route of a real hpod. Each must get an answer below 500 (a
4xx carries the JSON error model), hpod must keep serving, and the data it
acknowledged before must still be there. Under the sanitizer build (CI) a
memory error anywhere on these paths aborts hpod and fails the test."""
import json
import random
import time

from hpod import Checks, Hpod, parse_args

SEED = 20261122
N_REQUESTS = 2500
SECONDS = 60

VALID = {
    "study": {"name": "fz", "objective": {"direction": "maximize"},
              "space": {"x": {"type": "float", "low": 0, "high": 1},
                        "k": {"type": "int", "low": 1, "high": 8, "step": 1},
                        "opt": {"type": "choice", "values": ["a", "b", 3, True]},
                        "m": {"type": "float", "low": 0.1, "high": 1, "log": True, "condition": {"opt": ["a"]}}},
              "tuner": {"algorithm": "tpe", "seed": 1, "max_trials": 50,
                        "pruner": {"algorithm": "asha", "eta": 3, "min_resource": 1}}},
    "embedded": {"name": "fe", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
                 "dataset": {"name": "fashion-mnist", "limit": 200, "validation_split": 100},
                 "training": {"max_epochs": 1}, "tuner": {"max_trials": 1}},
    "report": {"step": 1, "value": 0.5},
    "tell": {"value": 0.5},
    "refits": {"top_n": 1, "epochs_factor": 1.2},
    "ensembles": {"top_n": 2, "method": "weighted"},
    "predict": {"inputs": [[0] * 784]},
}
WEIRD = [None, True, False, 0, -1, 1e308, -1e308, 2 ** 63, -2 ** 63 - 1, 0.5, "", "x" * 300, "$x",
         "\u00e9\u4e2d\U0001f600", "'; DROP TABLE studies;--", "../../etc/passwd", [], [1, 2], {}, {"a": {"b": {}}},
         [[[[[[[[]]]]]]]], "NaN", "-Infinity", "1e999"]


def mutate(rng, v, depth=0):
    """A random edit of a JSON value: drop or add keys, swap types, recurse."""
    r = rng.random()
    if depth > 6 or r < 0.1:
        return rng.choice(WEIRD)
    if isinstance(v, dict):
        v = dict(v)
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            if v and op < 0.3:
                del v[rng.choice(list(v))]
            elif v and op < 0.8:
                k = rng.choice(list(v))
                v[k] = mutate(rng, v[k], depth + 1)
            else:
                v[rng.choice(["extra", "name", "space", "type", "low", "values", "condition", "x" * 70])] = \
                    rng.choice(WEIRD)
        return v
    if isinstance(v, list):
        v = list(v)
        if v and rng.random() < 0.5:
            i = rng.randrange(len(v))
            v[i] = mutate(rng, v[i], depth + 1)
        else:
            v.append(rng.choice(WEIRD))
        return v
    return rng.choice(WEIRD)


def raw_body(rng, body):
    """The body as bytes, sometimes broken as text."""
    text = json.dumps(body).encode()
    r = rng.random()
    if r < 0.05 and text:
        return text[: rng.randrange(len(text))]  # truncated
    if r < 0.08:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))  # noise
    if r < 0.10:
        return b"[" * rng.randint(1, 5000)
    return text


def main():
    args = parse_args()
    c = Checks()
    rng = random.Random(SEED)
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", VALID["study"])["id"]
        eid = hp.ok("POST", "/api/v1/studies", VALID["embedded"])["id"]
        told = {}
        for _ in range(5):
            t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": t["number"] / 10})
            told[t["trial_id"]] = t["number"] / 10
        open_trial = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)["trial_id"]
        ids = [sid, eid, open_trial, 1, 2, 3, 0, 999999, 2 ** 40]
        routes = [("POST", "/api/v1/studies", "study"), ("POST", "/api/v1/studies", "embedded"),
                  ("POST", "/api/v1/studies/%d/ask", None), ("POST", "/api/v1/trials/%d/report", "report"),
                  ("POST", "/api/v1/trials/%d/tell", "tell"), ("GET", "/api/v1/studies/%d/trials", None),
                  ("GET", "/api/v1/studies/%d/best", None), ("GET", "/api/v1/trials/%d", None),
                  ("POST", "/api/v1/studies/%d/pause", None), ("POST", "/api/v1/studies/%d/resume", None),
                  ("POST", "/api/v1/studies/%d/refits", "refits"), ("POST", "/api/v1/studies/%d/ensembles", "ensembles"),
                  ("POST", "/api/v1/models/%d/predict", "predict"), ("GET", "/api/v1/models/%d", None),
                  ("GET", "/api/v1/studies/%d/importance", None), ("GET", "/api/v1/datasets/%d", None),
                  ("POST", "/api/v1/trials/%d/model", None), ("GET", "/api/v1/studies/%d/models", None)]
        queries = ["", "?state=complete", "?order=value&desc=true", "?limit=0", "?limit=abc", "?top_n=-3",
                   "?offset=99999999999999999999", "?state=%00", "?after=-1"]
        bad = []
        deadline = time.time() + SECONDS
        n = 0
        while n < N_REQUESTS and time.time() < deadline:
            method, pattern, kind = rng.choice(routes)
            path = pattern % rng.choice(ids) if "%d" in pattern else pattern
            if method == "GET":
                path += rng.choice(queries)
            body = None
            if kind:
                body = raw_body(rng, mutate(rng, VALID[kind]) if rng.random() < 0.9 else VALID[kind])
            status, out = hp.request(method, path, raw=body)
            n += 1
            if status >= 500 or (status >= 400 and not (isinstance(out, dict) and out.get("error", {}).get("code"))):
                bad.append((method, path, status, (body or b"")[:120], str(out)[:160]))
            if hp.proc.poll() is not None:
                break
        print("%d randomised requests" % n)
        for b in bad[:10]:
            print("BAD:", b)
        c.check(hp.proc.poll() is None, "hpod survives every request")
        c.check(not bad, "every answer is below 500, and every 4xx is a JSON error (%d bad)" % len(bad))
        c.check(n >= 500, "enough requests ran (%d)" % n)
        status, h = hp.request("GET", "/healthz")
        c.check(status == 200, "still healthy")
        trials = {t["id"]: t for t in hp.ok("GET", "/api/v1/studies/%d/trials?limit=1000" % sid)["trials"]} \
            if hp.request("GET", "/api/v1/studies/%d" % sid)[0] == 200 else None
        if trials is not None:  # the fuzz may have deleted nothing: DELETE is not in the routes
            c.check(all(trials[k]["value"] == v for k, v in told.items()), "acknowledged values intact")
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
