"""A full disk during an embedded study, on a real (small tmpfs) filesystem:
hpod's data dir is a tmpfs mounted in a private mount namespace (unshare -m
as root, unshare -rm otherwise; exit 77 if neither works). While the disk
is full a trial whose checkpoint (or epoch row, SQLITE_FULL) cannot be
written goes back to the queue, it is never failed; creating a study on a
completely full disk (the study paused, so no trial writes meanwhile)
answers 507 with a JSON error and stores nothing. Once space is freed (and
the study resumed) the trials resume from their last good checkpoint, the study
ends with every trial complete, and the event stream replayed from 0 tells
everything: study_created first, a trial_complete per trial, study_complete
last."""
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from hpod import Checks, Hpod, parse_args, read_events, wait_for

NS_ENV = "HPO_TEST_DISK_FULL_NS"
SIZE_MB = 64
MARGIN = 1 << 20  # free bytes left while "nearly full": room for SQLite, not for a 3 MB checkpoint
MAX_TRIALS = 6
STUDY = {"name": "disk-full", "objective": {"metric": "val_accuracy"},
         # 784 x 256 dense: ~0.8 MB of weights, a checkpoint of ~3 MB (adam state, best weights)
         "model": {"layers": [{"flatten": {}}, {"dense": {"units": 256, "activation": "relu"}},
                              {"dense": {"units": 10, "activation": "softmax"}}],
                   "loss": "sparse_categorical_crossentropy",
                   "optimizer": {"name": "adam", "learning_rate": "$lr"}},
         "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
         "dataset": {"name": "fashion-mnist", "limit": 3000, "validation_split": 500},
         "training": {"max_epochs": 6, "batch_size": 64},
         "tuner": {"algorithm": "random", "seed": 9, "max_trials": MAX_TRIALS}}
DISK_FULL = "disk full"
NO_WORKER = "no worker runs it (its outcome could not be stored)"  # the reap's requeue
EXTERNAL = {"name": "on-a-full-disk", "space": {"x": {"type": "float", "low": 0, "high": 1}}}



def disk_full_gauge(hp):
    """/metrics' hpo_disk_full (None: not there)."""
    for line in hp.request("GET", "/metrics")[1].splitlines():
        if line.startswith("hpo_disk_full "):
            return int(float(line.split()[1]))
    return None

def skip(msg):
    print("SKIP: %s" % msg, flush=True)
    sys.exit(77)


def enter_namespace():
    """Re-runs this test in a private mount namespace (the tmpfs vanishes
    with it, whatever happens); returns only inside it."""
    if os.environ.get(NS_ENV) == "1":
        return
    cmd = ["unshare", "-m", "--propagation", "private"] if os.geteuid() == 0 else ["unshare", "-rm"]
    try:
        ok = subprocess.run(cmd + ["true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except FileNotFoundError:
        ok = False
    if not ok:
        skip("cannot make a private mount namespace (%s): no way to mount a small filesystem" % " ".join(cmd))
    env = dict(os.environ, **{NS_ENV: "1"})
    sys.exit(subprocess.call(cmd + [sys.executable] + sys.argv, env=env))


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path, name, leave):
    """Writes path/name until at most `leave` bytes stay free."""
    chunk = b"\0" * (256 << 10)
    with open(os.path.join(path, name), "ab") as f:
        while True:
            room = free_bytes(path) - leave
            if room <= 0:
                break
            try:
                f.write(chunk[:min(len(chunk), room)])
                f.flush()
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break


def make_room(path, name, leave):
    """Shrinks path/name until at least `leave` bytes are free again (the
    running trials' writes eat into the margin fill left)."""
    short = leave - free_bytes(path)
    if short > 0:
        f = os.path.join(path, name)
        os.truncate(f, max(0, os.path.getsize(f) - short))


def pause(hp, sid, mnt):
    """Pauses the study on the nearly full disk. The pause is itself a write:
    when what the trials wrote since left SQLite no room, hpod answers 507
    (correctly); the margin is made again and the pause retried."""
    for _ in range(5):
        make_room(mnt, "filler", MARGIN)
        status, out = hp.request("POST", "/api/v1/studies/%d/pause" % sid)
        if status != 507:
            return status, out
    return status, out


def stored_events(url, sid, quiet=1.0):
    """The events stored so far (the stream read until quiet for `quiet` s)."""
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
    enter_namespace()
    c = Checks()
    mnt = tempfile.mkdtemp(prefix="hpo-full-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % SIZE_MB, "tmpfs", mnt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        os.rmdir(mnt)
        skip("cannot mount a tmpfs: %s" % r.stdout.decode(errors="replace").strip())
    logdir = tempfile.mkdtemp(prefix="hpo-full-log-")
    hp = Hpod(args.hpod, data_dir=mnt, args=["--devices", "cpu:2"])
    hp.log_path = os.path.join(logdir, "hpod.log")  # the log must not need the full disk
    try:
        hp.start()
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]

        def progressed():
            """A running trial has stored epoch 2, so its epoch 1 checkpoint
            is written (an epoch is stored before its checkpoint): once the
            disk is full it is requeued and resumes from a checkpoint > 0."""
            ts = hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["trials"]
            return any(t["last_step"] is not None and t["last_step"] >= 2 for t in ts)

        wait_for(progressed, 120, step=0.05)

        # nearly full: SQLite has room, a checkpoint does not
        fill(mnt, "filler", MARGIN)
        print("disk nearly full: %d bytes free" % free_bytes(mnt), flush=True)
        # The trials' writes can leave SQLite no room either (an epoch row, a
        # WAL checkpoint that must grow the database): the requeue is then
        # not stored, the trial stays "running" with no worker, and hpod's
        # reap queues it again once a write goes through. The margin is
        # kept, so either requeue is stored.
        deadline = time.time() + 60
        requeued = []
        while time.time() < deadline and not requeued:
            make_room(mnt, "filler", MARGIN)
            requeued = [d for _, t, d in stored_events(hp.url, sid, 0.5)
                        if t == "trial_requeued" and d.get("reason") in (DISK_FULL, NO_WORKER)]
        c.check(requeued, "a trial whose checkpoint hit ENOSPC went back to the queue (trial_requeued: %s)"
                % sorted({d["reason"] for d in requeued}))
        time.sleep(3)  # a few back-off rounds on the full disk
        by = hp.ok("GET", "/api/v1/studies/%d" % sid)["trials_by_state"]
        print("while nearly full: %s" % by, flush=True)
        c.check(by["failed"] == 0, "no trial failed on the full disk: %s" % by)
        c.check(hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "running", "the study goes on")

        # completely full: creating a study fails cleanly, storing nothing.
        # The study is paused first, so no trial frees or takes space meanwhile.
        status, out = pause(hp, sid, mnt)
        c.check(status == 200, "the study pauses on the nearly full disk (%d %s)" % (status, out))
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["trials_by_state"]["running"] == 0, 60)
        fill(mnt, "filler", 0)
        before = hp.ok("GET", "/api/v1/studies")["studies"]
        status, out = hp.request("POST", "/api/v1/studies", EXTERNAL)
        print("POST /studies on a full disk: %d %s" % (status, out), flush=True)
        err = out.get("error", {}) if isinstance(out, dict) else {}
        c.check(status == 507 and err.get("code") == "insufficient_storage" and "full" in err.get("message", ""),
                "a study created on a full disk: 507 with a JSON error (%d %s)" % (status, out))
        after = hp.ok("GET", "/api/v1/studies")["studies"]
        c.check([s["id"] for s in after] == [s["id"] for s in before], "nothing of it was stored")
        by = hp.ok("GET", "/api/v1/studies/%d" % sid)["trials_by_state"]
        c.check(by["failed"] == 0, "still no trial failed: %s" % by)

        # space again: the trials resume and the study completes
        os.unlink(os.path.join(mnt, "filler"))
        print("space freed: %d bytes free" % free_bytes(mnt), flush=True)
        # the study is still paused, so no job stores progress to end the
        # back-off: hpod's probe of the disk finds the room
        full = disk_full_gauge(hp)
        t0 = time.time()
        while disk_full_gauge(hp) != 0 and time.time() < t0 + 40:
            time.sleep(0.25)
        print("hpo_disk_full %s when space was freed, 0 after %.1f s with no job running"
              % (full, time.time() - t0), flush=True)
        c.check(full == 1 and disk_full_gauge(hp) == 0,
                "hpo_disk_full drops to 0 once the disk has room, no job running (%s)" % full)
        hp.ok("POST", "/api/v1/studies/%d/resume" % sid)
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 240, step=0.5)
        s = hp.ok("GET", "/api/v1/studies/%d" % sid)
        by = s["trials_by_state"]
        print("final: %s" % by, flush=True)
        c.check(by["complete"] == MAX_TRIALS and s["n_trials"] == MAX_TRIALS,
                "every trial completed once the disk had room: %s" % by)
        trials = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
        for t in trials:
            one = hp.ok("GET", "/api/v1/trials/%d" % t["id"])
            epochs = [p["epoch"] for p in one["curves"] if p["execution"] == 0]
            c.check(epochs == list(range(1, 7)), "trial %d: one curve point per epoch, no gap (%s)"
                    % (t["number"], epochs))
        events = read_events(hp.url, sid, last_event_id=0, timeout=60)
        types = [t for _, t, _ in events]
        c.check(types and types[0] == "study_created", "the replay from 0 starts with study_created")
        c.check(types and types[-1] == "study_complete", "... and ends with study_complete")
        done = sorted(d["trial_id"] for _, t, d in events if t == "trial_complete")
        c.check(done == sorted(t["id"] for t in trials), "a trial_complete event for every trial")
        # A trial requeued after 2 epochs of its run had checkpointed one
        # (the checkpoint of epoch k is written as epoch k + 1 starts); one
        # requeued at its first checkpoint has none and starts over. Which
        # trials the full disk catches depends on timing.
        epochs_run, checkpointed = {}, set()
        for _, t, d in events:
            if t in ("trial_started", "trial_resumed"):
                epochs_run[d["trial_id"]] = 0
            elif t == "epoch":
                epochs_run[d["trial_id"]] = epochs_run.get(d["trial_id"], 0) + 1
            elif t == "trial_requeued" and epochs_run.get(d["trial_id"], 0) >= 2:
                checkpointed.add(d["trial_id"])
        resumed = {d["trial_id"]: d["from_epoch"] for _, t, d in events if t == "execution_resumed"}
        if checkpointed:
            c.check(all(resumed.get(i, 0) >= 1 for i in checkpointed),
                    "a trial requeued after its checkpoint resumed from it: requeued %s, resumed %s"
                    % (sorted(checkpointed), resumed))
        else:
            print("every requeued trial was caught before its first checkpoint: their resumes start over "
                  "(resumed %s)" % resumed, flush=True)
        c.check(hp.stop() == 0, "hpod stops cleanly")
    finally:
        if c.failed:
            print(hp.log_tail(40))
        hp.cleanup()
        subprocess.run(["umount", "-l", mnt])
        shutil.rmtree(mnt, ignore_errors=True)
        shutil.rmtree(logdir, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
