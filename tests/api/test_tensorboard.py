"""training.tensorboard: an embedded study's trials write TensorBoard event
files under <data-dir>/studies/study-<id>/tensorboard/, one run folder per
trial execution (trial-<n>, trial-<n>-exec-<k>) and per refit
(refit-model-<id>). Read back with tests/api/tfevents.py (a reader of the
format written apart from hpod's writer, checking both CRCs of every
record), each run's scalars equal the epochs hpod stores (GET
/trials/{id} curves), float32 for float32. A trial paused after its first
epoch and resumed starts a second file in its run folder, and the two hold
every epoch once. The option is validated and shown in the definition; off,
no folder is made; a logdir that cannot be made is logged once per trial
and the trials still complete; deleting the study removes its folder."""
import os
import shutil
import struct
import tempfile

import tfevents
from hpod import Checks, Hpod, parse_args, read_events, wait_for

DATA = {"name": "fashion-mnist", "limit": 600, "validation_split": 200}


def study(name, **training):
    tr = {"max_epochs": 3, "batch_size": 64, "tensorboard": True}
    tr.update(training)
    return {"name": name, "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
            "dataset": DATA, "space": {"layers": {"type": "int", "low": 1, "high": 2}},
            "training": tr, "tuner": {"algorithm": "random", "seed": 11, "max_trials": 2}}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def logdir(hp, sid):
    return os.path.join(hp.data_dir, "studies", "study-%d" % sid, "tensorboard")


def run_scalars(run_dir):
    """{step: {tag: value}} of a run folder (later files win, as in
    TensorBoard), and the files' step lists; every file starts with its
    file_version event."""
    merged, per_file = {}, []
    for path in tfevents.event_files(run_dir):
        evs = tfevents.read_file(path)
        if not evs or evs[0]["file_version"] != "brain.Event:2":
            raise ValueError("%s does not start with brain.Event:2" % path)
        steps = []
        for ev in evs[1:]:
            merged[ev["step"]] = ev["values"]
            steps.append(ev["step"])
        per_file.append(steps)
    return merged, per_file


# stored metric -> tag (classification: the dataset has classes)
TAGS = {"loss": "train/loss", "accuracy": "train/accuracy", "val_loss": "val/loss",
        "val_accuracy": "val/accuracy", "lr": "train/learning_rate", "seconds": "perf/epoch_seconds",
        "samples_per_s": "perf/samples_per_s"}


def check_equal(c, what, scalars, curves):
    """The run's scalars are the stored epochs' metrics, epoch for epoch."""
    c.check(sorted(scalars) == sorted(p["epoch"] for p in curves),
            "%s: steps %s = stored epochs %s" % (what, sorted(scalars), sorted(p["epoch"] for p in curves)))
    bad = []
    for p in curves:
        got = scalars.get(p["epoch"], {})
        want = {TAGS[k]: f32(v) for k, v in p["metrics"].items() if k in TAGS and v is not None}
        if got != want:
            bad.append((p["epoch"], got, want))
    c.check(not bad, "%s: every scalar equals the stored metric: %s" % (what, bad[:1]))


def check_trials(hp, c, sid, executions):
    trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
    runs = sorted(os.listdir(logdir(hp, sid)))
    want = sorted("trial-%d" % t["number"] + ("-exec-%d" % e if e else "")
                  for t in trials for e in range(executions))
    c.check(runs == want, "one run folder per trial execution: %s" % runs)
    for t in trials:
        one = hp.ok("GET", "/api/v1/trials/%d" % t["id"])
        for e in range(executions):
            name = "trial-%d" % t["number"] + ("-exec-%d" % e if e else "")
            scalars, _ = run_scalars(os.path.join(logdir(hp, sid), name))
            check_equal(c, name, scalars, [p for p in one["curves"] if p["execution"] == e])


def check_definition(hp, c):
    status, out = hp.request("POST", "/api/v1/studies", study("bad", tensorboard="yes"))
    c.check(status == 400 and out["error"]["field"] == "training.tensorboard",
            "tensorboard must be a boolean: %s" % out)
    off = study("off")
    del off["training"]["tensorboard"]
    off["tuner"]["max_trials"] = 1
    sid = hp.ok("POST", "/api/v1/studies", off)["id"]
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    c.check(s["definition"]["training"]["tensorboard"] is False, "the definition shows tensorboard: false")
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
    c.check(not os.path.exists(logdir(hp, sid)), "off: no tensorboard folder")


def check_runs_and_refit(hp, c):
    s = study("tb")
    s["tuner"]["executions_per_trial"] = 2
    sid = hp.ok("POST", "/api/v1/studies", s)["id"]
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    c.check(s["definition"]["training"]["tensorboard"] is True, "the definition shows tensorboard: true")
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
    check_trials(hp, c, sid, 2)

    refit = hp.ok("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 1})["refits"][0]
    wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % refit["id"])["state"] in ("complete", "failed"), 120)
    losses = {d["epoch"]: d["loss"] for _, t, d in read_events(hp.url, sid, timeout=60)
              if t == "model_epoch" and d["model_id"] == refit["id"]}
    scalars, _ = run_scalars(os.path.join(logdir(hp, sid), "refit-model-%d" % refit["id"]))
    c.check(sorted(scalars) == list(range(1, refit["how"]["epochs"] + 1)),
            "refit run: one step per epoch (%s)" % sorted(scalars))
    c.check(all(scalars[e].get("train/loss") == f32(l) for e, l in losses.items()) and len(losses) == len(scalars),
            "refit run: train/loss = the model_epoch events' loss")
    c.check(not any(k.startswith("val/") for v in scalars.values() for k in v),
            "refit run: no val/ scalars (trained on train + validation)")

    try:  # TensorBoard itself, where it is installed (Debian does not package it)
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("tensorboard is not installed: read with tests/api/tfevents.py only")
    else:
        acc = event_accumulator.EventAccumulator(os.path.join(logdir(hp, sid), "trial-0"))
        acc.Reload()
        mine, _ = run_scalars(os.path.join(logdir(hp, sid), "trial-0"))
        c.check([e.value for e in acc.Scalars("val/loss")] == [mine[k]["val/loss"] for k in sorted(mine)],
                "TensorBoard reads the same val/loss")

    hp.ok("DELETE", "/api/v1/studies/%d" % sid)
    c.check(not os.path.exists(os.path.join(hp.data_dir, "studies", "study-%d" % sid)),
            "deleting the study removes its folder")


def check_resume(hp, c):
    s = study("resume", max_epochs=40, batch_size=32)
    s["dataset"] = {"name": "fashion-mnist", "limit": 2000, "validation_split": 500}
    s["tuner"]["max_trials"] = 1
    sid = hp.ok("POST", "/api/v1/studies", s)["id"]
    tid = wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"], 60, step=0.02)[0]["id"]
    wait_for(lambda: len(hp.ok("GET", "/api/v1/trials/%d" % tid)["curves"]) >= 1, 60, step=0.02)
    hp.ok("POST", "/api/v1/studies/%d/pause" % sid)
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["total"] == 0, 60)
    hp.ok("POST", "/api/v1/studies/%d/resume" % sid)
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 180)
    resumed = [d for _, t, d in read_events(hp.url, sid) if t == "execution_resumed"]
    c.check(len(resumed) == 1, "the trial was paused mid-way and resumed: %s" % resumed)
    scalars, per_file = run_scalars(os.path.join(logdir(hp, sid), "trial-0"))
    c.check(len(per_file) == 2, "the resumed trial started a second file in its run folder (%d files)" % len(per_file))
    if resumed and len(per_file) == 2:
        k = resumed[0]["from_epoch"]
        c.check(per_file[0] == list(range(1, k + 1)) and per_file[1] == list(range(k + 1, 41)),
                "the files hold epochs 1..%d and %d..40, each once" % (k, k + 1))
    curves = hp.ok("GET", "/api/v1/trials/%d" % tid)["curves"]
    check_equal(c, "resumed trial-0", scalars, curves)


def check_unwritable(args, c):
    """A logdir that cannot be made: logged once per trial; trials complete."""
    d = tempfile.mkdtemp(prefix="hpo-test-")
    with open(os.path.join(d, "studies"), "w") as f:
        f.write("not a folder\n")
    hp = Hpod(args.hpod, data_dir=d, args=["--devices", "cpu:2"]).start()
    try:
        s = study("unwritable")
        s["tuner"]["executions_per_trial"] = 2
        sid = hp.ok("POST", "/api/v1/studies", s)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
        st = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(st["trials_by_state"]["complete"] == 2, "trials complete without their events: %s"
                % st["trials_by_state"])
        with open(hp.log_path, errors="replace") as f:
            warnings = [l for l in f if "TensorBoard events are off" in l]
        c.check(len(warnings) == 2, "logged once per trial (%d lines): %s" % (len(warnings), warnings[:1]))
        c.check(hp.stop() == 0, "graceful shutdown")
    finally:
        hp.cleanup()
        shutil.rmtree(d, ignore_errors=True)


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        check_definition(hp, c)
        check_runs_and_refit(hp, c)
        check_resume(hp, c)
        c.check(hp.stop() == 0, "graceful shutdown")
    finally:
        hp.cleanup()
    check_unwritable(args, c)
    c.finish()


if __name__ == "__main__":
    main()
