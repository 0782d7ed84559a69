#!/usr/bin/python3
"""crash_soak.py - crash-safety soak: kill -9 hpod at random moments and
check that nothing it acknowledged is lost. A program, not a timed test
(about two minutes on 2 cores): `BENCH=crash_soak make bench`, or
  /usr/bin/python3 tests/bench/crash_soak.py --hpod build/hpod [--kills 20] [--seed 1]

Phase 1, an embedded study (a tiny slice of Fashion-MNIST so trials are
quick, 2 worker slots): a reader follows the study's event stream and
counts as acknowledged every epoch hpod reported ("epoch" events: the
curve point is stored with its event) and every trial it reported
finished; hpod is killed at a random moment while trials train, restarted
on the same data dir, and every acknowledged epoch must still be in its
trial's curves and every finished trial still finished with its value.

Phase 2, 4 concurrent ask/tell clients on an external study: every report
and tell answered 2xx is acknowledged; after each kill and restart every
acknowledged tell's trial is complete with its value and every
acknowledged report's intermediate value is there.

Prints the kills, the acknowledged results and the lost ones (must be 0);
exits 1 if anything was lost (or hpod could not restart), else 0.
Standard library only; uses tests/api/hpod.py."""
import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from hpod import Hpod  # noqa: E402

EMBEDDED = {"name": "soak-embedded", "objective": {"metric": "val_accuracy"},
            "model": {"template": "mlp"},
            "dataset": {"name": "fashion-mnist", "limit": 800, "validation_split": 200},
            "training": {"max_epochs": 4, "batch_size": 32},
            "tuner": {"algorithm": "random", "seed": 17, "max_trials": 100000}}
EXTERNAL = {"name": "soak-asktell", "space": {"x": {"type": "float", "low": -1, "high": 1},
                                               "n": {"type": "int", "low": 1, "high": 64, "log": True}},
            "tuner": {"algorithm": "random", "seed": 19, "lease_seconds": 600}}


class Follower(threading.Thread):
    """Follows a study's event stream (resuming with Last-Event-ID across
    restarts) and records what hpod reported."""

    def __init__(self, study_id):
        super().__init__(daemon=True)
        self.study_id = study_id
        self.url = None
        self.last_id = 0
        self.lock = threading.Lock()
        self.epochs = set()    # (trial_id, execution, epoch) reported
        self.finished = {}     # trial_id -> (state, value) reported
        self.stop = threading.Event()
        self.seen = threading.Event()  # an epoch arrived since the last clear()

    def run(self):
        while not self.stop.is_set():
            url = self.url
            if not url:
                time.sleep(0.05)
                continue
            req = urllib.request.Request("%s/api/v1/studies/%d/events" % (url, self.study_id))
            req.add_header("Last-Event-ID", str(self.last_id))
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    cur = {}
                    for raw in r:
                        line = raw.decode().rstrip("\n")
                        if line:
                            if not line.startswith(":"):
                                k, _, v = line.partition(": ")
                                cur[k] = v
                            continue
                        if "data" in cur:
                            self.record(int(cur["id"]), cur["event"], json.loads(cur["data"]))
                        cur = {}
            except Exception:
                time.sleep(0.05)  # hpod was killed, or is restarting

    def record(self, eid, kind, d):
        with self.lock:
            self.last_id = eid
            if kind == "epoch":
                self.epochs.add((d["trial_id"], d["execution"], d["epoch"]))
                self.seen.set()
            elif kind in ("trial_complete", "trial_pruned", "trial_failed"):
                self.finished[d["trial_id"]] = (d["state"], d.get("value"))

    def snapshot(self):
        with self.lock:
            return set(self.epochs), dict(self.finished)


def get(hp, path):
    status, out = hp.request("GET", path, timeout=60)
    if status != 200:
        raise RuntimeError("GET %s -> %d %s" % (path, status, out))
    return out


def check_embedded(hp, epochs, finished):
    """Acknowledged epochs and outcomes missing after a restart."""
    by_trial = {}
    for tid, ex, ep in epochs:
        by_trial.setdefault(tid, set()).add((ex, ep))
    for tid in finished:
        by_trial.setdefault(tid, set())
    lost = []
    for tid, points in by_trial.items():
        status, t = hp.request("GET", "/api/v1/trials/%d" % tid, timeout=60)
        if status != 200:
            lost += [("epoch", tid, ex, ep) for ex, ep in points]
            if tid in finished:
                lost.append(("finished", tid))
            continue
        have = {(p["execution"], p["epoch"]) for p in t["curves"]}
        lost += [("epoch", tid, ex, ep) for ex, ep in sorted(points - have)]
        if tid in finished:
            state, value = finished[tid]
            if t["state"] != state or (value is not None and t["value"] != value):
                lost.append(("finished", tid, state, value, t["state"], t["value"]))
    return lost


def soak_embedded(args, rng, data_dir):
    os.makedirs(data_dir)
    hp = Hpod(args.hpod, data_dir=data_dir, args=["--devices", "cpu:2"]).start()
    sid = hp.ok("POST", "/api/v1/studies", EMBEDDED)["id"]
    f = Follower(sid)
    f.url = hp.url
    f.start()
    kills, lost = 0, []
    try:
        for k in range(args.kills):
            f.seen.clear()
            f.seen.wait(60)  # trials are training
            time.sleep(rng.uniform(0.0, 0.8))
            hp.kill9()
            kills += 1
            f.url = None
            time.sleep(0.3)  # let the follower drain what it had read
            epochs, finished = f.snapshot()
            hp = Hpod(args.hpod, data_dir=data_dir, args=["--devices", "cpu:2"]).start()
            missing = check_embedded(hp, epochs, finished)
            lost += missing
            f.url = hp.url
            print("embedded kill %2d: %4d epochs and %3d trial outcomes acknowledged so far, %d lost"
                  % (k + 1, len(epochs), len(finished), len(missing)), flush=True)
            for m in missing[:5]:
                print("  LOST %s" % (m,), flush=True)
        epochs, finished = f.snapshot()
    finally:
        f.stop.set()
        hp.stop()
    return kills, len(epochs) + len(finished), lost


def soak_asktell(args, rng, data_dir):
    os.makedirs(data_dir)
    hp = Hpod(args.hpod, data_dir=data_dir).start()
    sid = hp.ok("POST", "/api/v1/studies", EXTERNAL)["id"]
    told = {}       # trial_id -> value (tell answered 2xx)
    values_checked = set()
    reported = {}   # trial_id -> value at step 0 (report answered 2xx)
    lock = threading.Lock()
    kills, lost = 0, []

    def client(h, stop, seed):
        r = random.Random(seed)
        while not stop.is_set():
            try:
                status, t = h.request("POST", "/api/v1/studies/%d/ask" % sid, timeout=10)
                if status != 200:
                    return
                tid = t["trial_id"]
                v0 = r.random()
                status, _ = h.request("POST", "/api/v1/trials/%d/report" % tid, {"step": 0, "value": v0}, timeout=10)
                if status != 200:
                    return
                with lock:
                    reported[tid] = v0
                v = t["params"]["x"] ** 2 + t["params"]["n"]
                status, _ = h.request("POST", "/api/v1/trials/%d/tell" % tid, {"value": v}, timeout=10)
                if status != 200:
                    return
                with lock:
                    told[tid] = v
            except Exception:
                return  # hpod was killed mid-request: that answer was never acknowledged

    try:
        for k in range(args.kills):
            stop = threading.Event()
            threads = [threading.Thread(target=client, args=(hp, stop, rng.random())) for _ in range(4)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.2, 1.2))
            hp.kill9()
            kills += 1
            stop.set()
            for t in threads:
                t.join(30)
            hp = Hpod(args.hpod, data_dir=data_dir).start()
            trials = {t["id"]: t for t in get(hp, "/api/v1/studies/%d/trials?limit=100000" % sid)["trials"]}
            with lock:
                acked_tells, acked_reports = dict(told), dict(reported)
            missing = [("tell", tid, v) for tid, v in acked_tells.items()
                       if tid not in trials or trials[tid]["state"] != "complete" or trials[tid]["value"] != v]
            # every acknowledged report is there (its step) after every
            # restart; its value is read back once, after the first kill
            # that followed it
            for tid, v0 in acked_reports.items():
                t = trials.get(tid)
                if t is None or t["last_step"] != 0:
                    missing.append(("report", tid, v0))
                elif tid not in values_checked:
                    one = get(hp, "/api/v1/trials/%d" % tid)
                    if [(i["step"], i["value"]) for i in one["intermediate"]] != [(0, v0)]:
                        missing.append(("report value", tid, v0, one["intermediate"]))
                    values_checked.add(tid)
            lost += missing
            print("ask/tell kill %2d: %5d tells and %5d reports acknowledged so far, %d lost"
                  % (k + 1, len(acked_tells), len(acked_reports), len(missing)), flush=True)
            for m in missing[:5]:
                print("  LOST %s" % (m,), flush=True)
        with lock:
            n = len(told) + len(reported)
    finally:
        hp.stop()
    return kills, n, lost


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hpod", default=os.environ.get("HPO_HPOD", "build/hpod"))
    p.add_argument("--hpo", help="unused (the api tests' harness takes it)")
    p.add_argument("--kills", type=int, default=20, help="kill -9 per phase (default 20)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    import shutil
    import tempfile
    data_dir = tempfile.mkdtemp(prefix="hpo-soak-")
    t0 = time.time()
    try:
        k1, a1, l1 = soak_embedded(args, rng, os.path.join(data_dir, "embedded"))
        k2, a2, l2 = soak_asktell(args, rng, os.path.join(data_dir, "asktell"))
    except Exception as e:
        print("soak failed: %s" % e, flush=True)
        shutil.rmtree(data_dir, ignore_errors=True)
        return 1
    shutil.rmtree(data_dir, ignore_errors=True)
    print("embedded study : kills %d, acknowledged %d (epochs + trial outcomes), lost %d" % (k1, a1, len(l1)))
    print("ask/tell x4    : kills %d, acknowledged %d (tells + reports), lost %d" % (k2, a2, len(l2)))
    print("total          : kills %d, acknowledged %d, lost %d  (%.0f s)"
          % (k1 + k2, a1 + a2, len(l1) + len(l2), time.time() - t0))
    return 1 if l1 or l2 else 0


if __name__ == "__main__":
    sys.exit(main())
