"""Studies that can no longer be loaded (their uploaded dataset deleted
once they ended, then a restart) cost nothing after they are found out.

hpod on one CPU slot: study A trains on an uploaded CSV and completes;
study C on the same CSV is cancelled while it trains; a long trial of study
B holds the slot while a refit of A is queued behind it; deleting the
dataset is refused (the refit needs it), so it is lost outside hpod (its
row deleted while hpod is stopped) and hpod restarts: A and C cannot be
loaded any more.
- The refit must fail with a message naming its study, start once (before
  the fix it was claimed, left running, reaped and claimed again on every
  pass, thousands of times a second, and B's trial never got the slot
  back), and B's trial must run again.
- C leaves the run queue at the first pass, said once: before, every pass
  (each second) loaded it again and logged the failure.
- D, running, whose stored definition this version refuses: loaded once,
  then not again for a minute (before: at every pass, logged each time);
  cancelling it makes it leave the queue at once."""
import json
import os
import re
import sqlite3
import time

from hpod import Checks, Hpod, parse_args, wait_for
from test_datasets import make_csv, upload


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    hp2 = None
    try:
        st, ds = upload(hp, [("name", "blobs", None), ("format", "csv", None), ("label_column", "species", None),
                             ("file", make_csv(), "blobs.csv")])
        c.check(st == 201, "upload -> 201: %s %s" % (st, ds))
        a = hp.ok("POST", "/api/v1/studies", {"name": "A", "model": {"template": "mlp"}, "dataset": {"id": ds["id"]},
                                              "training": {"max_epochs": 2, "batch_size": 16},
                                              "tuner": {"seed": 5, "max_trials": 1}})["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % a)["state"] == "complete", 60)
        cid = hp.ok("POST", "/api/v1/studies", {"name": "C", "model": {"template": "mlp"},
                                                "dataset": {"id": ds["id"]},
                                                "training": {"max_epochs": 100000, "batch_size": 16},
                                                "tuner": {"seed": 6, "max_trials": 1}})["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % cid)["total"] > 0, 60)
        hp.ok("POST", "/api/v1/studies/%d/cancel" % cid)
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % cid)["total"] == 0, 60)
        b = hp.ok("POST", "/api/v1/studies", {"name": "B", "model": {"template": "mlp"},
                                              "dataset": {"name": "fashion-mnist", "limit": 20000,
                                                          "validation_split": 2000},
                                              "training": {"max_epochs": 300, "batch_size": 32},
                                              "tuner": {"seed": 1, "max_trials": 1}})["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % b)["total"] > 0, 60)
        refit = hp.ok("POST", "/api/v1/studies/%d/refits" % a, {"top_n": 1})["refits"][0]
        c.check(hp.ok("GET", "/api/v1/models/%d" % refit["id"])["state"] == "queued", "the refit waits for the slot")
        st, out = hp.request("DELETE", "/api/v1/datasets/%d" % ds["id"])
        c.check(st == 409 and out["error"]["field"] == "id" and "model %d" % refit["id"] in out["error"]["message"],
                "the dataset the queued refit needs cannot be deleted: %s %s" % (st, out))
        c.check(hp.stop() == 0, "graceful stop (B's trial is queued to resume)")
        # the dataset is lost all the same: its row gone outside hpod (an
        # older copy of the database restored, say); A and C cannot load
        db = sqlite3.connect(os.path.join(hp.data_dir, "hpo.db"))
        db.execute("DELETE FROM datasets WHERE id = ?", (ds["id"],))
        db.commit()
        db.close()

        hp2 = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:1"]).start()
        m = wait_for(lambda: (lambda m: m if m["state"] != "queued" and m["state"] != "running" else None)(
            hp2.ok("GET", "/api/v1/models/%d" % refit["id"])), 30)
        print("  the refit: %s: %s" % (m["state"], m.get("error")))
        c.check(m["state"] == "failed" and "study %d" % a in (m.get("error") or ""),
                "the refit fails naming its study: %s %s" % (m["state"], m.get("error")))
        ok = True
        try:
            wait_for(lambda: hp2.ok("GET", "/api/v1/studies/%d/trials?state=running" % b)["total"] > 0, 30)
        except AssertionError:
            ok = False
        c.check(ok, "B's trial gets the slot back and runs")
        time.sleep(1)
        with open(hp2.log_path) as f:
            log = f.read()
        starts = len(re.findall(r"model %d \(study %d\) starts on" % (refit["id"], a), log))
        c.check(starts == 1, "the refit started once after the restart, not in a loop (%d starts)" % starts)
        time.sleep(2.5)  # more than two of the scheduler's one-second passes
        with open(hp2.log_path) as f:
            log = f.read()
        loads = len(re.findall(r"study %d: stored definition no longer valid" % cid, log))
        left = len(re.findall(r"study %d: cancelled, and it cannot be loaded" % cid, log))
        print("  the cancelled study C: %d failed load(s), %d line(s) saying it leaves the queue" % (loads, left))
        c.check(loads == 1 and left == 1, "C is loaded once, then leaves the run queue: %d loads, %d" % (loads, left))

        # D, running, waits for the slot B holds; its stored definition is
        # then one this version refuses (as after a downgrade)
        d = hp2.ok("POST", "/api/v1/studies", {"name": "D", "model": {"template": "mlp"},
                                               "dataset": {"name": "fashion-mnist", "limit": 300,
                                                           "validation_split": 100},
                                               "training": {"max_epochs": 1, "batch_size": 32},
                                               "tuner": {"seed": 2, "max_trials": 1}})["id"]
        c.check(hp2.stop() == 0, "graceful stop")
        db = sqlite3.connect(os.path.join(hp.data_dir, "hpo.db"))
        spec = json.loads(db.execute("SELECT spec FROM studies WHERE id = ?", (d,)).fetchone()[0])
        spec["tuner"]["algorithm"] = "no-such-tuner"
        db.execute("UPDATE studies SET spec = ? WHERE id = ?", (json.dumps(spec), d))
        db.commit()
        db.close()
        hp3 = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:1"]).start()
        try:
            time.sleep(3.5)  # three of the scheduler's one-second passes, and more
            with open(hp3.log_path) as f:
                log = f.read()
            loads = len(re.findall(r"study %d: stored definition no longer valid" % d, log))
            held = len(re.findall(r"study %d: running, and it cannot be loaded" % d, log))
            print("  the running study D: %d failed load(s), %d line(s) saying it is tried again later" % (loads, held))
            c.check(loads == 1 and held == 1,
                    "D is loaded once, then held (not loaded and logged at every pass): %d loads, %d" % (loads, held))
            c.check(hp3.ok("GET", "/api/v1/studies/%d/trials?state=running" % b)["total"] == 1, "B runs on")
            # cancelling D is a new state: it is tried at once, and leaves the queue
            st, _ = hp3.request("POST", "/api/v1/studies/%d/cancel" % d)
            c.check(st == 200, "D cancelled: %s" % st)
            try:
                wait_for(lambda: "study %d: cancelled, and it cannot be loaded" % d in open(hp3.log_path).read(), 10)
                gone = True
            except AssertionError:
                gone = False
            c.check(gone, "the cancelled D leaves the run queue without waiting out its hold")
            c.check(hp3.stop() == 0, "graceful stop")
        finally:
            hp3.cleanup()
    finally:
        if hp2:
            hp2.cleanup()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
