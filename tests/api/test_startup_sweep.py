"""The start-up sweep of the data dir (api/sweep.c, api_dir_sweep).

1. A partial upload a kill -9 left (datasets/.upload-*) is removed at the
   next start.
2. Entries whose ids have no row in the database (a deleted study's files a
   crash left behind, or another database's after hpo.db was replaced) are
   moved, not deleted, to <data-dir>/orphaned/<UTC time>/ under their
   relative paths, with one WARN line saying how many and where; the
   entries that have rows stay. A dataset upload whose id lands on an old
   folder of that id then succeeds (it answered 500 before).
3. hpo.db removed ("reset the database") while the files stay: the new
   trials of the new database reuse the old ids, and they train (before,
   run_execution took the old trials' exec-0.done.json for their own and
   they "completed" at once with the old values, without an epoch).
4. A finished execution's result file that is not the trial's own (written
   before the trial existed, as another database's would be) is ignored:
   the trial trains (api/job_trial.c).
5. The temporary files of checkpoint and weights writes a kill -9 cut short
   (<file>.tmp.<pid>.<n>, engine/safetensors.c, and data_dir.c's
   <file>.tmp-XXXXXX) are deleted at the next start, under entries that
   have rows too (before: they stayed for ever, each as large as a
   checkpoint); names that only look alike stay."""
import json
import os
import socket
import time

from hpod import Checks, Hpod, parse_args, wait_for
from test_datasets import make_csv, multipart, upload

STUDY = {"objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
         "space": {"units": {"type": "int", "low": 4, "high": 8},
                   "lr": {"type": "float", "low": 1e-3, "high": 2e-2, "log": True}},
         "dataset": {"name": "blobs", "validation_split": 0.2},
         "training": {"max_epochs": 2, "batch_size": 32},
         "tuner": {"algorithm": "random", "seed": 3, "max_trials": 3}}


def upload_blobs(hp, name="blobs"):
    return upload(hp, [("name", name, None), ("format", "csv", None), ("label_column", "species", None),
                       ("file", make_csv(), name + ".csv")])


def run_study(hp, name, max_trials=3, dataset="blobs"):
    sd = dict(STUDY, name=name, tuner=dict(STUDY["tuner"], max_trials=max_trials),
              dataset=dict(STUDY["dataset"], name=dataset))
    sid = hp.ok("POST", "/api/v1/studies", sd)["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 40)
    return sid, hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]


def plant(root, rel, text="x"):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def kill_mid_upload(hp):
    """Sends half of a large upload, then kill -9s hpod: a .upload-* stays."""
    body, ctype = multipart([("name", "big", None), ("format", "csv", None), ("label_column", "species", None),
                             ("file", make_csv(rows=40000), "big.csv")])
    s = socket.create_connection(("127.0.0.1", hp.port), timeout=10)
    s.sendall(("POST /api/v1/datasets HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
               % (ctype, len(body))).encode() + body[: len(body) // 2])
    root = os.path.join(hp.data_dir, "datasets")
    wait_for(lambda: any(e.startswith(".upload-") and os.listdir(os.path.join(root, e))
                         for e in os.listdir(root)), 10, 0.05)
    hp.kill9()
    s.close()


def sweep_warns(hp):
    with open(hp.log_path, errors="replace") as f:
        return [l for l in f if "start-up sweep" in l and "WARN" in l.upper()]


def check_sweep(c, binary):
    hp = Hpod(binary).start()
    d = hp.data_dir
    try:
        st, out = upload_blobs(hp)
        c.check(st == 201 and out["id"] == 1, "upload blobs -> 201 id 1 (%s %s)" % (st, out))
        sid, trials = run_study(hp, "kept")
        tids = [t["id"] for t in trials]
        had = [t for t in tids if os.path.isdir(os.path.join(d, "checkpoints", "trial-%d" % t))]
        c.check(bool(had), "the study's trials have checkpoint folders: %s" % had)
        kill_mid_upload(hp)
        c.check(any(e.startswith(".upload-") for e in os.listdir(os.path.join(d, "datasets"))),
                "the kill left a partial upload")
        # what a crash or another database leaves: ids without rows
        orphans = ["datasets/2-blobs2/data.csv",            # the next dataset id, another name
                   "datasets/1-other/data.csv",             # id 1 is a dataset of another name
                   "checkpoints/trial-99/exec-0.done.json",
                   "checkpoints/model-42/refit.safetensors",
                   "checkpoints/model-42.training",
                   "models/model-42.safetensors",
                   "studies/study-55/tensorboard/trial-0/events",
                   "studies/study-%d/tensorboard/trial-77/events" % sid,
                   "studies/study-%d/tensorboard/refit-model-42/events" % sid]
        kept = ["studies/study-%d/tensorboard/trial-0/events" % sid]
        live = "checkpoints/trial-%d/" % (had[0] if had else tids[0])
        temporaries = [live + "exec-0.safetensors.tmp.424242.7",  # a killed checkpoint write
                       live + "exec-0.done.json.tmp-Ab12Cd",       # a killed api_dir_write_atomic
                       "models/model-42.safetensors.tmp.424243.2"]  # deleted, not moved aside
        kept += [live + "notes.tmp.txt", live + "exec-0.safetensors.tmp.1.x"]  # not of those forms
        for rel in orphans + kept + temporaries:
            plant(d, rel)
        hp = Hpod(binary, data_dir=d).start()
        c.check(not [e for e in os.listdir(os.path.join(d, "datasets")) if e.startswith(".upload-")],
                "the partial upload is removed at start: %s" % os.listdir(os.path.join(d, "datasets")))
        warns = sweep_warns(hp)
        c.check(len(warns) == 1 and " 9 file" in warns[0] and "orphaned" in warns[0],
                "one WARN line names 9 entries and the folder: %s" % warns)
        top = os.path.join(d, "orphaned")
        stamps = os.listdir(top) if os.path.isdir(top) else []
        c.check(len(stamps) == 1, "one orphaned/<time> folder: %s" % stamps)
        for rel in temporaries:
            c.check(not os.path.exists(os.path.join(d, rel)) and
                    not (stamps and os.path.exists(os.path.join(top, stamps[0], rel))),
                    "the killed write's temporary %s is deleted" % rel)
        with open(hp.log_path, errors="replace") as f:
            removed = [l for l in f if "removed 3 temporary file(s)" in l]
        c.check(len(removed) == 1, "one INFO line says 3 temporaries were removed: %s" % removed)
        for rel in orphans:
            c.check(not os.path.exists(os.path.join(d, rel)), "%s moved away" % rel)
            c.check(bool(stamps) and os.path.isfile(os.path.join(top, stamps[0], rel)),
                    "%s kept under orphaned/<time>/" % rel)
        for rel in kept + ["datasets/1-blobs/data.csv"]:
            c.check(os.path.isfile(os.path.join(d, rel)), "%s (it has a row) stays" % rel)
        for tid in tids:
            if tid in had:
                c.check(os.path.isdir(os.path.join(d, "checkpoints", "trial-%d" % tid)),
                        "trial %d's folder (it has a row) stays" % tid)
        st, out = upload_blobs(hp, "blobs2")
        c.check(st == 201 and out.get("id") == 2, "an upload whose id had an old folder -> 201 (%s %s)" % (st, out))
        hp.stop()
        # a second start finds nothing more to move (the log is appended to)
        before = len(sweep_warns(hp))
        hp = Hpod(binary, data_dir=d).start()
        c.check(len(sweep_warns(hp)) == before, "a clean restart moves nothing")
        hp.stop()
    finally:
        hp.cleanup()


def check_reset_database(c, binary):
    hp = Hpod(binary).start()
    d = hp.data_dir
    try:
        c.check(upload_blobs(hp)[0] == 201, "upload")
        _, old = run_study(hp, "old")
        hp.stop()
        for f in ("hpo.db", "hpo.db-wal", "hpo.db-shm"):
            if os.path.exists(os.path.join(d, f)):
                os.unlink(os.path.join(d, f))
        # the old folders, forged to look finished with a value no training gives
        for t in old:
            plant(d, "checkpoints/trial-%d/exec-0.done.json" % t["id"], json.dumps({"best": 0.123, "best_epoch": 9,
                                                                               "epochs": 9}))
        hp = Hpod(binary, data_dir=d).start()
        st, out = upload_blobs(hp, "blobs-new")  # another name: no old folder in its way (checked above)
        c.check(st == 201, "upload into the reset database -> 201 (%s %s)" % (st, out))
        _, new = run_study(hp, "new", dataset="blobs-new")
        for t in new:
            one = hp.ok("GET", "/api/v1/trials/%d" % t["id"])
            eps = [p for p in one.get("curves", []) if p.get("execution", 0) == 0]
            c.check(t["state"] == "complete" and len(eps) == 2 and t["value"] != 0.123,
                    "new trial %d (an old id) trained: %s, %d epochs, value %s"
                    % (t["id"], t["state"], len(eps), t["value"]))
        hp.stop()
    finally:
        hp.cleanup()


def check_foreign_done_file(c, binary):
    hp = Hpod(binary).start()
    d = hp.data_dir
    try:
        c.check(upload_blobs(hp)[0] == 201, "upload")
        # written while hpod runs (so no sweep sees it): trial 1 does not exist yet
        plant(d, "checkpoints/trial-1/exec-0.done.json", json.dumps({"best": 0.123, "best_epoch": 9, "epochs": 9,
                                                                     "study_id": 1, "number": 0,
                                                                     "trial_created": 1.5}))
        plant(d, "checkpoints/trial-1/exec-0.safetensors", "not a checkpoint")
        _, trials = run_study(hp, "fresh", max_trials=1)
        t = trials[0] if trials else {}
        one = hp.ok("GET", "/api/v1/trials/%d" % t["id"]) if t else {}
        eps = [p for p in one.get("curves", []) if p.get("execution", 0) == 0]
        c.check(t.get("id") == 1 and t.get("state") == "complete" and len(eps) == 2 and t.get("value") != 0.123,
                "a result file the trial did not write is ignored: %s, %d epochs" % (t, len(eps)))
        with open(os.path.join(d, "checkpoints", "trial-1", "exec-0.done.json")) as f:
            done = json.load(f)
        c.check(done.get("study_id") == 1 and done.get("number") == 0 and done.get("trial_created") != 1.5,
                "the trial's own result file is stamped: %s" % done)
        hp.stop()
    finally:
        hp.cleanup()


def main():
    args = parse_args()
    c = Checks()
    t0 = time.time()
    for check in (check_sweep, check_reset_database, check_foreign_done_file):
        try:
            check(c, args.hpod)
        except Exception as e:  # the next part still runs
            c.check(False, "%s: %r" % (check.__name__, e))
    print("%.1f s" % (time.time() - t0))
    c.finish()


if __name__ == "__main__":
    main()
