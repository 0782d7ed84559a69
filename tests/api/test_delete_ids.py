"""Ids are never reused, and DELETE leaves nothing that can write into another
study: a study deleted while hpod trains one of its trials, then a new study
asked for a trial at once; the deleted study's worker must not write one
epoch, report or event into the new study (before schema v5 the new study
and trial got the deleted ones' ids, and the old worker wrote into them);
calls naming the old trial get 404 naming it; the old worker stops and
removes its files; ids stay unique across delete + create and across a
restart of hpod."""
import json
import os
import socket
import time
import urllib.request

from hpod import Checks, Hpod, parse_args, wait_for

SLOW = {"name": "to-delete", "objective": {"metric": "val_accuracy"},
        "model": {"template": "mlp"},
        "dataset": {"name": "fashion-mnist", "limit": 2000, "validation_split": 500},
        "training": {"max_epochs": 60, "batch_size": 16},
        "tuner": {"algorithm": "random", "seed": 3, "max_trials": 1}}
QUICK = {"name": "after", "objective": {"metric": "val_accuracy"},
         "model": {"template": "mlp"},
         "dataset": {"name": "fashion-mnist", "limit": 500, "validation_split": 100},
         "training": {"max_epochs": 1, "batch_size": 64},
         "tuner": {"algorithm": "random", "seed": 4, "max_trials": 1}}
EXTERNAL = {"name": "external", "space": {"x": {"type": "float", "low": 0, "high": 1}},
            "tuner": {"algorithm": "random", "seed": 5}}


def stored_events(url, sid, quiet=1.5):
    """The events of a study stored so far: its stream read until it has
    been quiet for `quiet` seconds (a running study's stream never ends)."""
    req = urllib.request.Request("%s/api/v1/studies/%d/events" % (url, sid))
    events, cur = [], {}
    try:
        with urllib.request.urlopen(req, timeout=quiet) as r:
            for raw in r:
                line = raw.decode().rstrip("\n")
                if not line:
                    if "data" in cur:
                        events.append((int(cur["id"]), cur["event"], json.loads(cur["data"])))
                    cur = {}
                elif not line.startswith(":"):
                    k, _, v = line.partition(": ")
                    cur[k] = v
    except (socket.timeout, TimeoutError):
        pass
    return events


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    try:
        old_sid = hp.ok("POST", "/api/v1/studies", SLOW)["id"]

        def running():
            ts = hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % old_sid)["trials"]
            return ts[0] if ts and ts[0]["last_step"] is not None and ts[0]["last_step"] >= 2 else None

        old = wait_for(running, 120, step=0.05)
        old_tid = old["id"]
        ckpt = os.path.join(hp.data_dir, "checkpoints", "trial-%d" % old_tid)
        status, _ = hp.request("DELETE", "/api/v1/studies/%d" % old_sid)
        c.check(status == 204, "DELETE answers 204 (%d)" % status)
        # at once, while the deleted study's worker is mid-epoch
        new_sid = hp.ok("POST", "/api/v1/studies", EXTERNAL)["id"]
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % new_sid)
        new_tid = t["trial_id"]
        print("deleted study %d (trial %d running); new study %d, trial %d" % (old_sid, old_tid, new_sid, new_tid))
        c.check(new_sid != old_sid, "a new study does not get the deleted study's id (%d)" % new_sid)
        c.check(new_tid != old_tid, "a new trial does not get the deleted trial's id (%d)" % new_tid)

        # the old worker goes on for an epoch at most: it must write nothing here
        time.sleep(2.0)
        mine = hp.ok("GET", "/api/v1/trials/%d" % new_tid)
        c.check(mine["state"] == "running" and mine["last_step"] is None and not mine["intermediate"]
                and not mine["curves"],
                "the new study's trial got nothing from the deleted study's worker: %s"
                % {k: mine[k] for k in ("state", "last_step", "intermediate", "curves")})
        trials = hp.ok("GET", "/api/v1/studies/%d/trials" % new_sid)["trials"]
        c.check(len(trials) == 1, "the new study has only its own trial (%d)" % len(trials))
        types = [e[1] for e in stored_events(hp.url, new_sid)]
        c.check(types == ["study_created"], "the new study's events are its own: %s" % types)

        # calls naming the deleted study's trial: 404 naming it, never another study's trial
        for method, path, body in (("GET", "/api/v1/trials/%d" % old_tid, None),
                                   ("POST", "/api/v1/trials/%d/tell" % old_tid, {"value": 0.5}),
                                   ("POST", "/api/v1/trials/%d/report" % old_tid, {"step": 1, "value": 0.5})):
            status, out = hp.request(method, path, body)
            err = out.get("error") if isinstance(out, dict) else None
            msg = err.get("message", "") if isinstance(err, dict) else ""
            c.check(status == 404 and ("trial %d" % old_tid) in msg,
                    "%s %s -> 404 naming the trial (%d %s)" % (method, path, status, out))
        status, _ = hp.request("GET", "/api/v1/studies/%d" % old_sid)
        c.check(status == 404, "the deleted study is 404 (%d)" % status)
        # the tell of the new trial works and lands on it
        status, told = hp.request("POST", "/api/v1/trials/%d/tell" % new_tid, {"value": 0.25})
        c.check(status == 200 and told["trial_id"] == new_tid and told["value"] == 0.25,
                "the new trial's own tell lands on it: %d %s" % (status, told))

        # the deleted study's job was stopped: its files go, and the single
        # slot runs the next study
        try:
            wait_for(lambda: not os.path.exists(ckpt), 60)
            gone = True
        except AssertionError:
            gone = False
        c.check(gone, "the deleted trial's checkpoint folder is removed")
        qid = hp.ok("POST", "/api/v1/studies", QUICK)["id"]
        try:
            wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % qid)["state"] == "complete", 120)
            done = True
        except AssertionError:
            done = False
        c.check(done, "the slot is free again: a new embedded study completes")

        # ids never reused: delete the newest, create again; and across a restart
        seen_sids = {old_sid, new_sid, qid}
        seen_tids = {old_tid, new_tid}
        seen_tids.update(t["id"] for t in hp.ok("GET", "/api/v1/studies/%d/trials" % qid)["trials"])
        for round_ in range(2):
            sid = hp.ok("POST", "/api/v1/studies", EXTERNAL)["id"]
            tid = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)["trial_id"]
            c.check(sid not in seen_sids and tid not in seen_tids,
                    "round %d: new ids %d/%d were never used before" % (round_, sid, tid))
            seen_sids.add(sid)
            seen_tids.add(tid)
            status, _ = hp.request("DELETE", "/api/v1/studies/%d" % sid)
            c.check(status == 204, "round %d: delete the newest study" % round_)
            c.check(hp.stop() == 0, "round %d: hpod stops cleanly" % round_)
            hp = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:1"]).start()
            status, out = hp.request("POST", "/api/v1/trials/%d/tell" % tid, {"value": 1.0})
            c.check(status == 404, "round %d: after the restart the deleted trial is 404 (%d)" % (round_, status))
        sid = hp.ok("POST", "/api/v1/studies", EXTERNAL)["id"]
        tid = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)["trial_id"]
        c.check(sid > max(seen_sids) and tid > max(seen_tids),
                "after restarts, ids continue past every one used (%d > %d, %d > %d)"
                % (sid, max(seen_sids), tid, max(seen_tids)))
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
