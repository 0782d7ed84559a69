"""Study management against a real hpod: user_attrs and notes of studies and
trials (set at creation, by PATCH /studies/{id} and /trials/{id} with
merge and null-deletes, by tell and report; shown in GET and the lists;
their limits with 4xx naming the field; updated moves; study_updated and
trial_updated events; kept across a restart), and get-or-create by name
(POST /studies with load_if_exists: 201 then 200, 409 naming the first
differing field, the oldest of several studies of one name, 16 threads
racing with one name make one study). External studies, and one tiny
embedded study (60 csv rows, 1 epoch) whose dataset is deleted: notes need
no tuner state. Seconds."""
import json
import threading
import time

from hpod import Checks, Hpod, parse_args, read_events, wait_for
from test_datasets import make_csv, upload

S, T = "/api/v1/studies", "/api/v1/trials"
SPACE = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
         "layers": {"type": "int", "low": 1, "high": 4}}


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        # ---- user_attrs and note at creation
        st, s = hp.request("POST", S, {"name": "attrs", "space": SPACE, "tuner": {"seed": 1, "max_trials": 10},
                                       "user_attrs": {"team": "vision", "budget": 3, "drop": None},
                                       "note": "first try"})
        c.check(st == 201 and s["user_attrs"] == {"team": "vision", "budget": 3}, "created with user_attrs (%s)" % s)
        sid = s["id"]
        got = hp.ok("GET", S + "/%d" % sid)
        c.check(got["user_attrs"] == {"team": "vision", "budget": 3} and got["note"] == "first try",
                "GET shows user_attrs and the note")
        c.check("user_attrs" not in got["definition"] and "note" not in got["definition"],
                "user_attrs and note are not part of the definition")
        listed = [x for x in hp.ok("GET", S)["studies"] if x["id"] == sid][0]
        c.check(listed["user_attrs"] == {"team": "vision", "budget": 3} and "note" not in listed,
                "the list shows user_attrs (the note only in GET)")

        # ---- PATCH a study: merge, null deletes, updated moves, an event
        before = got["updated"]
        time.sleep(0.02)
        st, p = hp.request("PATCH", S + "/%d" % sid, {"user_attrs": {"budget": None, "seed_sweep": [1, 2, {"a": True}]}})
        c.check(st == 200 and p["user_attrs"] == {"team": "vision", "seed_sweep": [1, 2, {"a": True}]},
                "PATCH merges, null deletes a key (%d %s)" % (st, p))
        c.check(p["updated"] > before and p["note"] == "first try", "PATCH moves updated, keeps the note")
        st, p = hp.request("PATCH", S + "/%d" % sid, {"note": "second try ✓\nwith lines"})
        c.check(st == 200 and p["note"] == "second try ✓\nwith lines" and p["user_attrs"]["team"] == "vision",
                "PATCH sets the note (UTF-8), keeps user_attrs")
        u = p["updated"]
        st, p = hp.request("PATCH", S + "/%d" % sid, {})
        c.check(st == 200 and p["updated"] == u, "PATCH {} changes nothing")
        for body, status, field in [({"user_atrs": {}}, 400, "user_atrs"), ({"user_attrs": [1]}, 400, "user_attrs"),
                                    ({"user_attrs": "x"}, 400, "user_attrs"), ({"note": 5}, 400, "note"),
                                    ({"user_attrs": {"k" * 257: 1}}, 400, "user_attrs"),
                                    ({"user_attrs": {"": 1}}, 400, "user_attrs"),
                                    ({"user_attrs": {"big": "x" * 70000}}, 413, "user_attrs"),
                                    ({"note": "n" * 65537}, 413, "note")]:
            st, e = hp.request("PATCH", S + "/%d" % sid, body)
            c.check(st == status and e["error"]["field"] == field,
                    "PATCH %s -> %d naming %s (%d %s)" % (json.dumps(body)[:40], status, field, st, e))
        st, _ = hp.request("PATCH", S + "/%d" % sid, {"user_attrs": {"k" * 256: 1}, "note": "n" * 65536})
        c.check(st == 200, "a 256-byte key and a 64 KiB note are accepted")
        hp.ok("PATCH", S + "/%d" % sid, {"user_attrs": {"k" * 256: None}, "note": None})
        # the 64 KiB bound is on the merged object: two halves that fit apart do not fit together
        hp.ok("PATCH", S + "/%d" % sid, {"user_attrs": {"half1": "y" * 40000}})
        st, e = hp.request("PATCH", S + "/%d" % sid, {"user_attrs": {"half2": "y" * 40000}})
        c.check(st == 413 and e["error"]["field"] == "user_attrs", "the merged user_attrs over 64 KiB -> 413")
        cur = hp.ok("GET", S + "/%d" % sid)
        c.check("half2" not in cur["user_attrs"] and cur["note"] == "", "a refused PATCH stores nothing; null cleared the note")
        hp.ok("PATCH", S + "/%d" % sid, {"user_attrs": {"half1": None}})
        st, e = hp.request("PATCH", S + "/%d" % (sid + 1000), {"note": "x"})
        c.check(st == 404 and e["error"]["field"] == "id", "PATCH an unknown study -> 404")
        st, e = hp.request("PATCH", S + "/%d" % sid, raw=b"[1]")
        c.check(st == 400, "PATCH with a non-object body -> 400")

        # ---- trials: PATCH, tell and report carry user_attrs
        a = hp.ok("POST", S + "/%d/ask" % sid)
        tid = a["trial_id"]
        st, t = hp.request("PATCH", T + "/%d" % tid, {"user_attrs": {"host": "gpu-3"}, "note": "watch this one"})
        c.check(st == 200 and t["user_attrs"] == {"host": "gpu-3"} and t["note"] == "watch this one"
                and t["state"] == "running", "PATCH a running trial (%d %s)" % (st, t))
        r = hp.ok("POST", T + "/%d/report" % tid, {"step": 0, "value": 0.5, "user_attrs": {"epoch_s": 1.5}})
        c.check(r == {"prune": False}, "report with user_attrs answers as before")
        st, e = hp.request("POST", T + "/%d/tell" % tid, {"value": 0.4, "user_attrs": {"k" * 300: 1}})
        c.check(st == 400 and e["error"]["field"] == "user_attrs", "tell with a bad key -> 400 user_attrs")
        st, e = hp.request("POST", T + "/%d/tell" % tid, {"value": 0.4, "user_attrs": {"huge": "z" * 70000}})
        c.check(st == 413 and e["error"]["field"] == "user_attrs", "tell with user_attrs over 64 KiB -> 413")
        c.check(hp.ok("GET", T + "/%d" % tid)["state"] == "running", "a refused tell leaves the trial running")
        told = hp.ok("POST", T + "/%d/tell" % tid, {"value": 0.4, "user_attrs": {"host": None, "acc": 0.91}})
        c.check(told["state"] == "complete", "tell with user_attrs")
        t = hp.ok("GET", T + "/%d" % tid)
        c.check(t["user_attrs"] == {"epoch_s": 1.5, "acc": 0.91} and t["note"] == "watch this one",
                "tell and report merged into the trial's user_attrs (%s)" % t["user_attrs"])
        st, t = hp.request("PATCH", T + "/%d" % tid, {"note": "done: good"})
        c.check(st == 200 and t["note"] == "done: good" and t["state"] == "complete", "PATCH a finished trial")
        lt = hp.ok("GET", S + "/%d/trials" % sid)["trials"][0]
        c.check(lt["user_attrs"] == {"epoch_s": 1.5, "acc": 0.91} and "note" not in lt,
                "the trial list shows user_attrs (the note only in GET)")
        for body, status, field in [({"state": "x"}, 400, "state"), ({"user_attrs": 1}, 400, "user_attrs"),
                                    ({"note": "n" * 65537}, 413, "note")]:
            st, e = hp.request("PATCH", T + "/%d" % tid, body)
            c.check(st == status and e["error"]["field"] == field, "PATCH trial %s -> %d %s" % (body.keys(), status, field))
        st, _ = hp.request("PATCH", T + "/%d" % (tid + 1000), {"note": "x"})
        c.check(st == 404, "PATCH an unknown trial -> 404")

        # ---- events: study_updated, trial_updated (a cancelled study's stream ends)
        hp.ok("POST", S + "/%d/cancel" % sid)
        evs = read_events(hp.url, sid, timeout=30)
        ups = [(e[1], e[2]) for e in evs if e[1] in ("study_updated", "trial_updated")]
        c.check(("study_updated", {"fields": ["user_attrs"]}) in ups and ("study_updated", {"fields": ["note"]}) in ups,
                "study_updated events name what changed")
        c.check(("trial_updated", {"trial_id": tid, "number": 0, "fields": ["user_attrs", "note"]}) in ups,
                "trial_updated events (%s)" % ups[-3:])
        c.check(sum(1 for e in ups if e[0] == "trial_updated") == 4, "one trial_updated per change (PATCH x2, report, tell)")
        st, p = hp.request("PATCH", S + "/%d" % sid, {"note": "post mortem"})
        c.check(st == 200 and p["state"] == "cancelled", "PATCH a cancelled study")

        # ---- get-or-create by name
        base = {"name": "goc", "space": SPACE, "objective": {"direction": "maximize"}, "tuner": {"algorithm": "tpe"}}
        st, g1 = hp.request("POST", S, dict(base, load_if_exists=True))
        c.check(st == 201, "load_if_exists, no such name -> 201")
        st, g2 = hp.request("POST", S, dict(base, load_if_exists=True, user_attrs={"ignored": 1}))
        c.check(st == 200 and g2["id"] == g1["id"] and g2["user_attrs"] == {}, "load_if_exists, same definition -> 200, the same study")
        for change, field in [({"space": dict(SPACE, lr=dict(SPACE["lr"], high=0.2))}, "space.lr.high"),
                              ({"tuner": {"algorithm": "random"}}, "tuner.algorithm"),
                              ({"objective": {"direction": "minimize"}}, "objective.direction"),
                              ({"space": {"lr": SPACE["lr"]}}, "space.layers"),
                              ({"description": "other"}, "description"),
                              ({"tuner": {"algorithm": "tpe", "seed": g1["seed"] + 1}}, "tuner.seed")]:
            st, e = hp.request("POST", S, dict(base, load_if_exists=True, **change))
            c.check(st == 409 and e["error"]["field"] == field,
                    "load_if_exists with another definition -> 409 naming %s (%d %s)" % (field, st, e))
        st, g3 = hp.request("POST", S, dict(base, load_if_exists=True, tuner={"algorithm": "tpe", "seed": g1["seed"]},
                                            space=dict(SPACE, layers={"type": "int", "low": 1.0, "high": 4})))
        c.check(st == 200 and g3["id"] == g1["id"], "its own seed, and 1.0 for 1: the same definition -> 200")
        # a tuner key written at the default its sampler works out from the space (2 parameters
        # here) is the same search (each was a 409 before); lease_seconds is the daemon's
        # --default-lease when left out, so written out it is another definition
        for algorithm, keys in (("cmaes", {"popsize": 6}), ("nsga2", {"population_size": 50, "mutation_prob": 0.5}),
                                ("bohb", {"min_points_in_model": 4, "gamma": 0.05})):
            goc = dict(base, name="goc-" + algorithm, tuner={"algorithm": algorithm, "seed": 4})
            st, first = hp.request("POST", S, dict(goc, load_if_exists=True))
            st, again = hp.request("POST", S, dict(goc, load_if_exists=True, tuner=dict(goc["tuner"], **keys)))
            c.check(st == 200 and again["id"] == first["id"],
                    "%s with %s, its defaults here -> 200, the same study (%d)" % (algorithm, keys, st))
        st, e = hp.request("POST", S, dict(base, load_if_exists=True, tuner={"algorithm": "tpe", "seed": g1["seed"],
                                                                           "lease_seconds": 600}))
        c.check(st == 409 and e["error"]["field"] == "tuner.lease_seconds", "lease_seconds 600 written out -> 409")
        st, dup = hp.request("POST", S, base)  # names are not unique without load_if_exists
        c.check(st == 201 and dup["id"] != g1["id"], "a plain create with the name makes another study")
        st, g4 = hp.request("POST", S, dict(base, load_if_exists=True))
        c.check(st == 200 and g4["id"] == g1["id"], "several of one name: the oldest is found")
        st, e = hp.request("POST", S, dict(base, load_if_exists="yes"))
        c.check(st == 400 and e["error"]["field"] == "load_if_exists", "load_if_exists must be a boolean")
        st, e = hp.request("POST", S, dict(base, name="bad", load_if_exists=True, space={"x": {"type": "float"}}))
        c.check(st == 400, "an invalid definition is refused before the lookup")

        # 16 threads get-or-create one new name at once: one study
        results = []
        lock = threading.Lock()

        def goc():
            r = hp.request("POST", S, {"name": "raced", "space": SPACE, "tuner": {"seed": 7}, "load_if_exists": True})
            with lock:
                results.append(r)
        threads = [threading.Thread(target=goc) for _ in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        ids = {r[1]["id"] for r in results if r[0] in (200, 201)}
        c.check(len(results) == 16 and len(ids) == 1 and sorted(r[0] for r in results).count(201) == 1,
                "16 racing get-or-creates: one study, one 201 (%s)" % sorted(r[0] for r in results))
        c.check(len([x for x in hp.ok("GET", S)["studies"] if x["name"] == "raced"]) == 1, "one study named raced")

        # an embedded study whose dataset is deleted once it is complete (its
        # tuner state cannot be loaded after a restart: notes do not need it)
        st, ds = upload(hp, [("name", "tiny", None), ("format", "csv", None), ("label_column", "species", None),
                             ("file", make_csv(60), "tiny.csv")])
        eid = hp.ok("POST", S, {"name": "emb", "model": {"template": "mlp"}, "dataset": {"id": ds["id"]},
                                "training": {"max_epochs": 1, "batch_size": 16},
                                "tuner": {"seed": 1, "max_trials": 1}})["id"]
        wait_for(lambda: hp.ok("GET", S + "/%d" % eid)["state"] == "complete", 120)
        etid = hp.ok("GET", S + "/%d/trials" % eid)["trials"][0]["id"]
        hp.ok("DELETE", "/api/v1/datasets/%d" % ds["id"])

        # ---- kept across a restart
        c.check(hp.stop() == 0, "hpod stops")
        hp.start()
        got = hp.ok("GET", S + "/%d" % sid)
        t = hp.ok("GET", T + "/%d" % tid)
        c.check(got["note"] == "post mortem" and got["user_attrs"]["team"] == "vision"
                and t["user_attrs"] == {"epoch_s": 1.5, "acc": 0.91} and t["note"] == "done: good",
                "user_attrs and notes survive a restart")
        st, p = hp.request("PATCH", S + "/%d" % eid, {"note": "its dataset is gone", "user_attrs": {"archived": True}})
        st2, t2 = hp.request("PATCH", T + "/%d" % etid, {"note": "kept"})
        c.check(st == 200 and p["note"] == "its dataset is gone" and st2 == 200 and t2["note"] == "kept",
                "an embedded study whose dataset is gone takes notes after a restart (%d %s, %d)" % (st, p, st2))
        st, g5 = hp.request("POST", S, dict(base, load_if_exists=True))
        c.check(st == 200 and g5["id"] == g1["id"], "get-or-create after a restart")
        hp.ok("DELETE", S + "/%d" % g1["id"])
        st, e = hp.request("PATCH", S + "/%d" % g1["id"], {"note": "x"})
        c.check(st == 404, "PATCH a deleted study -> 404")
        st, g6 = hp.request("POST", S, dict(base, load_if_exists=True))
        c.check(st == 200 and g6["id"] == dup["id"], "the oldest deleted: the next of the name is found")
        c.check(hp.stop() == 0, "hpod stops cleanly")
    finally:
        if c.failed:
            print(hp.log_tail(30))
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
