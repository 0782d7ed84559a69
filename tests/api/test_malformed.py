"""30+ malformed inputs each get a 4xx JSON error naming the problem, and
hpod keeps serving (and keeps its data)."""
import json

from hpod import Checks, Hpod, parse_args

GOOD = {"name": "good", "space": {"x": {"type": "float", "low": 0, "high": 1}},
        "tuner": {"algorithm": "random", "seed": 1}}


def with_(**kw):
    d = json.loads(json.dumps(GOOD))
    d.update(kw)
    return d


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", GOOD)["id"]
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
        hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": 0.5})
        pruned = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
        hp.ok("POST", "/api/v1/trials/%d/tell" % pruned["trial_id"], {"state": "pruned"})
        running = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)

        S = "/api/v1/studies"
        T = "/api/v1/trials/%d" % running["trial_id"]
        cases = [
            # (what, method, path, body or raw bytes, expected status, expected field or None)
            ("bad JSON", "POST", S, b"{", 400, ""),
            ("JSON array body", "POST", S, b"[1,2]", 400, ""),
            ("empty body", "POST", S, b"", 400, ""),
            ("duplicate keys", "POST", S, b'{"space": {}, "space": {}}', 400, ""),
            ("NaN literal", "POST", S, b'{"space": {"x": {"type": "float", "low": NaN, "high": 1}}}', 400, ""),
            ("deep nesting", "POST", S, b"[" * 100000, 400, ""),
            ("missing space", "POST", S, {"name": "x"}, 400, "space"),
            ("unknown top-level key", "POST", S, with_(spaec={}), 400, None),
            ("name not a string", "POST", S, with_(name=5), 400, "name"),
            ("name with NUL (refused by the JSON parser)", "POST", S, with_(name="a\u0000b"), 400, ""),
            ("unknown param type", "POST", S, with_(space={"x": {"type": "complex"}}), 400, "space.x.type"),
            ("low > high", "POST", S, with_(space={"lr": {"type": "float", "low": 1, "high": 0}}), 400, "space.lr.low"),
            ("log with low <= 0", "POST", S, with_(space={"lr": {"type": "float", "low": 0, "high": 1, "log": True}}), 400, "space.lr"),
            ("empty choice", "POST", S, with_(space={"opt": {"type": "choice", "values": []}}), 400, "space.opt.values"),
            ("low is a string", "POST", S, with_(space={"x": {"type": "float", "low": "0", "high": 1}}), 400, "space.x.low"),
            ("param name with quotes", "POST", S, with_(space={"x\"; DROP TABLE trials;--": {"type": "bool"}}), 400, "space"),
            ("condition on unknown parent", "POST", S, with_(space={"x": {"type": "float", "low": 0, "high": 1, "condition": {"nope": [1]}}}), 400, "space.x.condition"),
            ("unknown algorithm", "POST", S, with_(tuner={"algorithm": "magic"}), 400, "tuner.algorithm"),
            ("negative seed", "POST", S, with_(tuner={"seed": -1}), 400, "tuner.seed"),
            ("grid over a continuous float", "POST", S, with_(tuner={"algorithm": "grid"}), 400, "space.x"),
            ("bad direction", "POST", S, with_(objective={"direction": "up"}), 400, "objective.direction"),
            ("oversized body", "POST", S, b'{"name": "' + b"x" * (2 << 20) + b'"}', 413, ""),
            ("unknown study", "GET", S + "/999999", None, 404, "id"),
            ("unknown trial", "GET", "/api/v1/trials/999999", None, 404, "id"),
            ("ask unknown study", "POST", S + "/999999/ask", None, 404, "id"),
            ("ask with unknown option", "POST", S + "/%d/ask" % sid, {"bogus": 1}, 400, "bogus"),
            ("tell twice", "POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": 1.0}, 409, "id"),
            ("tell after prune", "POST", "/api/v1/trials/%d/tell" % pruned["trial_id"], {"value": 1.0}, 409, "id"),
            ("report after tell", "POST", "/api/v1/trials/%d/report" % t["trial_id"], {"step": 1, "value": 1.0}, 409, "id"),
            ("tell value not a number", "POST", T + "/tell", {"value": "0.5"}, 400, "value"),
            ("tell without value", "POST", T + "/tell", {}, 400, "value"),
            ("tell bad state", "POST", T + "/tell", {"state": "bogus"}, 400, "state"),
            ("tell empty values", "POST", T + "/tell", {"values": []}, 400, "values"),
            ("tell failed with value", "POST", T + "/tell", {"state": "failed", "value": 1}, 400, "value"),
            ("report negative step", "POST", T + "/report", {"step": -1, "value": 1.0}, 400, "step"),
            ("report without value", "POST", T + "/report", {"step": 1}, 400, "value"),
            ("path traversal", "GET", "/api/v1/studies/%d/../../../etc/passwd" % sid, None, 404, ""),
            ("encoded traversal", "GET", "/api/v1/studies/%2e%2e/trials", None, 404, ""),
            ("negative id", "GET", S + "/-1", None, 404, ""),
            ("id not a number", "GET", S + "/abc", None, 404, ""),
            ("id overflow", "GET", S + "/99999999999999999999999", None, 404, ""),
            ("wrong method", "PUT", S, {"x": 1}, 405, ""),
            ("bad state filter", "GET", S + "/%d/trials?state=bogus" % sid, None, 400, "state"),
            ("bad limit", "GET", S + "/%d/trials?limit=-5" % sid, None, 400, "limit"),
            ("bad top_n", "GET", S + "/%d/best?top_n=0" % sid, None, 400, "top_n"),
        ]
        for what, method, path, body, status, field in cases:
            raw = body if isinstance(body, bytes) else None
            js = None if isinstance(body, bytes) else body
            got, out = hp.request(method, path, body=js, raw=raw)
            ok = got == status and isinstance(out, dict) and "error" in out \
                and out["error"].get("code") and out["error"].get("message")
            if ok and field is not None and field != "":
                ok = out["error"].get("field", "").startswith(field)
            c.check(ok, "%s: want %d field %r, got %d %s" % (what, status, field, got, str(out)[:200]))
        print("%d malformed inputs checked" % len(cases))

        # A name full of SQL meta-characters is data, stored verbatim.
        evil = "Robert'); DROP TABLE studies;-- \"quoted\" \\ %s"
        eid = hp.ok("POST", S, with_(name=evil))["id"]
        c.check(hp.ok("GET", S + "/%d" % eid)["name"] == evil, "a name with SQL meta-characters round-trips")
        status, health = hp.request("GET", "/healthz")
        c.check(status == 200 and health["status"] == "ok", "hpod still serving after all of it")
        c.check(hp.ok("GET", S + "/%d" % sid)["n_trials"] == 3, "earlier data intact")
        c.check(hp.proc.poll() is None, "hpod process alive")
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
