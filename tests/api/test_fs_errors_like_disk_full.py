"""hpod's artifacts folders become read-only for a while (chmod a-w: EACCES,
as an --artifacts-dir on a network file system that hiccups gives EIO,
ESTALE or EROFS) while an embedded study trains; the database, in the data
dir, stays writable. A trial whose checkpoint or folder cannot be written
is not failed: it goes back to the queue (trial_requeued, reason "file
system error", its "error" naming the errno text) with the full disk's
back-off, and the study is not charged for it. A trial model (its weights
cannot be exported) is queued again, not failed. Once the folders are
writable again the study completes with every trial, and the model too.
Root ignores permissions: as root hpod runs as nobody (setpriv), on folders
nobody owns; exit 77 where that is impossible."""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

from hpod import Checks, Hpod, parse_args, read_events, wait_for

MAX_TRIALS = 4
EPOCHS = 4
STUDY = {"name": "read-only", "objective": {"metric": "val_accuracy"},
         "model": {"layers": [{"flatten": {}}, {"dense": {"units": 128, "activation": "relu"}},
                              {"dense": {"units": 10, "activation": "softmax"}}],
                   "loss": "sparse_categorical_crossentropy",
                   "optimizer": {"name": "adam", "learning_rate": "$lr"}},
         "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
         "dataset": {"name": "fashion-mnist", "limit": 3000, "validation_split": 500},
         "training": {"max_epochs": EPOCHS, "batch_size": 64},
         "tuner": {"algorithm": "random", "seed": 3, "max_trials": MAX_TRIALS}}


def skip(msg):
    print("SKIP: %s" % msg, flush=True)
    sys.exit(77)


def chmod_dirs(root, mode):
    for dp, _, _ in os.walk(root):
        os.chmod(dp, mode)


def runs_as(prefix, argv):
    try:
        return subprocess.run(prefix + argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def events_of(hp, sid):
    return read_events(hp.url, sid, last_event_id=0, idle=0.5)


def main():
    args = parse_args()
    hpod = os.path.abspath(args.hpod)
    work = tempfile.mkdtemp(prefix="hpo-ro-")
    os.chmod(work, 0o755)
    data, arts = os.path.join(work, "data"), os.path.join(work, "artifacts")
    os.mkdir(data)
    os.mkdir(arts)
    prefix = []
    if os.geteuid() == 0:
        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            shutil.rmtree(work)
            skip("running as root, and there is no user nobody to run hpod as")
        prefix = ["setpriv", "--reuid", str(nobody.pw_uid), "--regid", str(nobody.pw_gid), "--clear-groups"]
        for d in (data, arts):
            os.chown(d, nobody.pw_uid, nobody.pw_gid)
        if not runs_as(prefix, ["test", "-x", hpod]):
            shutil.rmtree(work)
            skip("running as root, and hpod cannot run as nobody (no setpriv, or %s is not reachable for nobody)"
                 % hpod)
    # hpod through a wrapper that drops root (the harness starts a binary)
    wrapper = os.path.join(work, "hpod-as-user")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec %s \"$@\"\n" % " ".join(prefix + [hpod]))
    os.chmod(wrapper, 0o755)
    # does a read-only folder stop hpod's user? (not with CAP_DAC_OVERRIDE)
    probe = os.path.join(arts, "probe")
    os.mkdir(probe)
    if prefix:
        os.chown(probe, int(prefix[2]), int(prefix[4]))
    os.chmod(probe, 0o555)
    blocked = not runs_as(prefix, ["sh", "-c", "touch %s/x" % probe])
    os.chmod(probe, 0o755)
    shutil.rmtree(probe)
    if not blocked:
        shutil.rmtree(work)
        skip("a read-only folder does not stop hpod's user (CAP_DAC_OVERRIDE?)")

    c = Checks()
    hp = Hpod(wrapper, data_dir=data, args=["--devices", "cpu:2", "--artifacts-dir", arts])
    hp.log_path = os.path.join(work, "hpod.log")
    try:
        hp.start()
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]

        def progressed():
            ts = hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["trials"]
            return any(t["last_step"] is not None and t["last_step"] >= 1 for t in ts)

        wait_for(progressed, 60, step=0.05)
        chmod_dirs(arts, 0o555)
        print("artifacts read-only", flush=True)
        requeued = []
        deadline = time.time() + 20
        while time.time() < deadline and not requeued:
            requeued = [d for _, t, d in events_of(hp, sid)
                        if t == "trial_requeued" and d.get("reason") == "file system error"]
        c.check(requeued, "a trial whose files could not be written went back to the queue "
                          "(trial_requeued, reason file system error)")
        c.check(requeued and "Permission denied" in requeued[0].get("error", ""),
                "the event names the errno text: %s" % (requeued[:1],))
        time.sleep(3)  # a few back-off rounds on the read-only folders
        s = hp.ok("GET", "/api/v1/studies/%d" % sid)
        print("while read-only: %s %s" % (s["state"], s["trials_by_state"]), flush=True)
        c.check(s["trials_by_state"]["failed"] == 0, "no trial failed: %s" % s["trials_by_state"])
        c.check(s["state"] == "running", "the study goes on (%s)" % s["state"])
        with open(hp.log_path, errors="replace") as f:
            log = f.read()
        c.check("Permission denied" in log, "the log names the errno text")
        c.check("disk is full" not in log, "the log does not call it a full disk")

        chmod_dirs(arts, 0o755)
        print("artifacts writable again", flush=True)
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 60, step=0.5)
        s = hp.ok("GET", "/api/v1/studies/%d" % sid)
        print("final: %s" % s["trials_by_state"], flush=True)
        c.check(s["trials_by_state"]["complete"] == MAX_TRIALS and s["n_trials"] == MAX_TRIALS,
                "every trial completed once the folders were writable: %s" % s["trials_by_state"])
        trials = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
        for t in trials:
            one = hp.ok("GET", "/api/v1/trials/%d" % t["id"])
            epochs = [p["epoch"] for p in one["curves"] if p["execution"] == 0]
            c.check(epochs == list(range(1, EPOCHS + 1)), "trial %d: one curve point per epoch, no gap (%s)"
                    % (t["number"], epochs))

        # a model job: its weights cannot be exported while read-only
        done = [t for t in trials if t["state"] == "complete"]
        if not done:
            c.finish()
        chmod_dirs(arts, 0o555)
        mid = hp.ok("POST", "/api/v1/trials/%d/model" % done[0]["id"])["id"]
        time.sleep(2.5)
        m = hp.ok("GET", "/api/v1/models/%d" % mid)
        c.check(m["state"] in ("queued", "running"), "the model job waits while read-only (%s %s)"
                % (m["state"], m.get("error")))
        chmod_dirs(arts, 0o755)
        wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % mid)["state"] in ("complete", "failed"), 60, step=0.25)
        m = hp.ok("GET", "/api/v1/models/%d" % mid)
        c.check(m["state"] == "complete", "the model completes once writable (%s %s)" % (m["state"], m.get("error")))
        c.check(hp.stop() == 0, "hpod stops cleanly")
    finally:
        if c.failed:
            print(hp.log_tail(40))
        hp.cleanup()
        chmod_dirs(arts, 0o755)
        shutil.rmtree(work, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
