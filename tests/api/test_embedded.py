"""Embedded studies: hpod trains the models itself on its worker slots.

- A small study (Fashion-MNIST subset, 12 trials, ASHA, 2 slots) completes;
  curves, best epoch and best params are queryable; the event stream delivers
  every trial's events in order, and resumes with Last-Event-ID.
- Failures are data: a template that does not fit some params and a
  diverging learning rate fail those trials with the reason; the study ends.
- Pause, resume, cancel and per-trial timeouts; a client's report or tell
  on a running trial is a 409 (hpod trains it and records its end).
- training.steps_per_execution (graph replay on CUDA slots): a count from 1
  to 10000, and training.allow_tf32: a boolean, or 400 naming the field; a
  CPU slot accepts and ignores both.
- training.device: "cuda" on an hpod without a cuda slot is a 409 naming
  the field (the study would wait forever), "cpu" completes on the CPU
  slots, anything but any, cpu or cuda is a 400 naming the field.
- Two studies share the slots (fair share): the newer one starts at the
  first slot the older one frees.
- A slot of two threads (--devices cpu:1x2) trains data-parallel
  (engine/replicas.h): a study on it completes, and a paused trial resumes
  from its checkpoint.
"""
import os
import threading
import time

from hpod import Checks, Hpod, parse_args, read_events, wait_for

DATA = {"name": "fashion-mnist", "limit": 2000, "validation_split": 500}


def study_small():
    return {"name": "asha-mlp", "objective": {"metric": "val_accuracy"},
            "model": {"template": "mlp"}, "dataset": DATA,
            "space": {"layers": {"type": "int", "low": 1, "high": 2}},
            "training": {"max_epochs": 3, "batch_size": 64},
            "tuner": {"algorithm": "tpe", "seed": 3, "max_trials": 12,
                      "pruner": {"algorithm": "asha", "eta": 3, "min_resource": 1}}}


def check_small(hp, c):
    sid = hp.ok("POST", "/api/v1/studies", study_small())["id"]
    events = read_events(hp.url, sid)
    study = hp.ok("GET", "/api/v1/studies/%d" % sid)
    c.check(study["state"] == "complete", "study completes (state %s)" % study["state"])
    c.check(study["direction"] == "maximize", "val_accuracy is maximised")
    counts = study["trials_by_state"]
    c.check(counts["complete"] + counts["pruned"] == 12 and counts["complete"] >= 1,
            "12 trials finished: %s" % counts)
    trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
    c.check(sorted(t["number"] for t in trials) == list(range(12)), "trial numbers 0..11")
    c.check(len({t["slot"] for t in trials}) == 2, "both slots ran trials")

    best = hp.ok("GET", "/api/v1/studies/%d/best?top_n=2" % sid)["trials"]
    c.check(best and "layers" in best[0]["params"] and 0.5 < best[0]["value"] <= 1.0,
            "best params and value: %s" % (best[:1],))
    top = hp.ok("GET", "/api/v1/trials/%d" % best[0]["trial_id"])
    curve = [p for p in top["curves"] if p["execution"] == 0]
    c.check([p["epoch"] for p in curve] == [1, 2, 3], "a complete trial has 3 epochs of curves")
    c.check(all("val_accuracy" in p["metrics"] and "loss" in p["metrics"] for p in curve), "curves hold the metrics")
    accs = [p["metrics"]["val_accuracy"] for p in curve]
    c.check(top["best_epoch"] == 1 + accs.index(max(accs)), "best epoch is the epoch of the best val_accuracy")
    c.check(abs(top["value"] - max(accs)) < 1e-12, "the value is the best epoch's val_accuracy")
    pruned = [hp.ok("GET", "/api/v1/trials/%d" % t["id"]) for t in trials if t["state"] == "pruned"]
    c.check(not pruned or min(len(p["curves"]) for p in pruned) < 3, "pruned trials' curves are cut short")

    # events: ids increase; per trial: started, epochs 1..k in order, one end event
    ids = [e[0] for e in events]
    c.check(ids == sorted(ids) and len(set(ids)) == len(ids), "event ids increase")
    c.check(events[-1][1] == "study_complete", "the stream ends with study_complete")
    per_trial = {}
    for _, typ, data in events:
        if "trial_id" in data:
            per_trial.setdefault(data["trial_id"], []).append((typ, data))
    c.check(len(per_trial) == 12, "events for every trial (%d)" % len(per_trial))
    ok = True
    for tid, evs in per_trial.items():
        types = [t for t, _ in evs]
        epochs = [d["epoch"] for t, d in evs if t == "epoch"]
        stored = [t for t in trials if t["id"] == tid][0]
        ok &= types[0] == "trial_started" and types[-1] == "trial_" + stored["state"]
        ok &= epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 1
        ok &= sum(t in ("trial_complete", "trial_pruned") for t in types) == 1
    c.check(ok, "every trial: started, epochs in order, exactly one end event matching its state")
    ckdir = os.path.join(hp.data_dir, "checkpoints")
    kept = sorted(int(d.split("-")[1]) for d in os.listdir(ckdir) if d.startswith("trial-"))
    complete = sorted(t["id"] for t in trials if t["state"] == "complete")
    c.check(len(kept) <= 8 and set(kept) <= set(complete),
            "only the best complete trials keep checkpoints (%d kept of %d trials)" % (len(kept), len(trials)))
    mid = events[len(events) // 2][0]
    again = read_events(hp.url, sid, last_event_id=mid)
    c.check(again == [e for e in events if e[0] > mid], "Last-Event-ID resumes the stream exactly")


def check_failures(hp, c):
    study = {"name": "failures", "objective": {"metric": "val_loss"},
             "model": {"layers": [{"conv2d": {"filters": 4, "kernel": "$k", "padding": "valid"}},
                                  {"flatten": {}}, {"dense": {"units": 10, "activation": "softmax"}}],
                       "loss": "sparse_categorical_crossentropy",
                       "optimizer": {"name": "sgd", "learning_rate": "$lr"}},
             "space": {"k": {"type": "choice", "values": [3, 40]},
                       "lr": {"type": "choice", "values": [0.01, 1e6]}},
             "dataset": DATA, "training": {"max_epochs": 2},
             "tuner": {"algorithm": "grid", "seed": 1, "max_trials": 4}}
    sid = hp.ok("POST", "/api/v1/studies", study)["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
    trials = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
    by = {(t["params"]["k"], t["params"]["lr"]): t for t in trials}
    c.check(len(by) == 4, "grid: all 4 combinations ran")
    c.check(by[(3, 0.01)]["state"] == "complete", "the good combination completes")
    c.check(all(by[(40, lr)]["state"] == "failed" and "kernel" in (by[(40, lr)]["error"] or "")
                for lr in (0.01, 1e6)), "a kernel larger than the image fails the trial, naming it: %s"
            % by[(40, 0.01)]["error"])
    err = by[(3, 1e6)]["error"] or ""
    c.check(by[(3, 1e6)]["state"] == "failed" and ("NaN" in err or "Inf" in err),
            "a diverging learning rate fails the trial: %s" % err)


def check_steps_per_execution(hp, c):
    for bad in (0, 10001, "4", 2.5):
        study = study_small()
        study["training"]["steps_per_execution"] = bad
        status, out = hp.request("POST", "/api/v1/studies", study)
        c.check(status == 400 and out["error"]["field"] == "training.steps_per_execution",
                "steps_per_execution %r -> 400 naming the field: %s %s" % (bad, status, out))
    study = study_small()
    study["training"]["allow_tf32"] = "yes"
    status, out = hp.request("POST", "/api/v1/studies", study)
    c.check(status == 400 and out["error"]["field"] == "training.allow_tf32",
            "allow_tf32 must be a boolean: %s %s" % (status, out))


def check_device(hp, c):
    study = study_small()
    study["training"]["device"] = "gpu"
    status, out = hp.request("POST", "/api/v1/studies", study)
    c.check(status == 400 and out["error"]["field"] == "training.device", "device 'gpu' -> 400: %s %s" % (status, out))
    # this hpod (cpu:2, its own database) has no cuda slot: such a study would
    # wait forever, so it is refused (where several hpods share a database,
    # another may have one: accepted there; tests/gpu/test_hpod_cuda.py runs
    # cuda and cpu studies on a mixed pool)
    on_gpu = study_small()
    on_gpu.update(name="on-gpu")
    on_gpu["training"]["device"] = "cuda"
    status, out = hp.request("POST", "/api/v1/studies", on_gpu)
    c.check(status == 409 and out["error"]["field"] == "training.device" and "no cuda slot" in out["error"]["message"],
            "device 'cuda' without a cuda slot -> 409 naming training.device: %s %s" % (status, out))
    on_cpu = study_small()
    on_cpu.update(name="on-cpu", tuner={"algorithm": "random", "seed": 4, "max_trials": 2})
    on_cpu["training"]["device"] = "cpu"
    cid = hp.ok("POST", "/api/v1/studies", on_cpu)["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % cid)["state"] == "complete", 120)
    ts = hp.ok("GET", "/api/v1/studies/%d/trials" % cid)["trials"]
    c.check(len(ts) == 2 and all(t["state"] == "complete" and t["slot"].startswith("cpu:") for t in ts),
            "a cpu study completes on the cpu slots: %s" % [(t["state"], t["slot"]) for t in ts])
    hp.ok("DELETE", "/api/v1/studies/%d" % cid)


def check_fair_share(hp, c):
    """Two studies without parallel_trials on 2 slots: the newer one starts
    at the first slot the older one frees, not after its whole budget."""
    sids = []
    for k in range(2):
        study = study_small()
        study.update(name="share-%d" % k, tuner={"algorithm": "random", "seed": 5 + k, "max_trials": 6})
        sids.append(hp.ok("POST", "/api/v1/studies", study)["id"])
    for sid in sids:
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 180)
    # event ids are global: they order the two studies' starts
    starts = [[e[0] for e in read_events(hp.url, sid) if e[1] == "trial_started"] for sid in sids]
    c.check(len(starts[0]) == 6 and len(starts[1]) == 6 and starts[1][0] < starts[0][2],
            "fair share: the newer study's first trial starts before the older one's third (%s)" % starts)
    for sid in sids:
        hp.ok("DELETE", "/api/v1/studies/%d" % sid)


def check_executions(hp, c):
    study = study_small()
    study.update(name="executions", tuner={"algorithm": "random", "seed": 9, "max_trials": 3,
                                           "executions_per_trial": 2})
    study["training"] = {"max_epochs": 2, "batch_size": 64, "steps_per_execution": 8, "allow_tf32": True}
    sid = hp.ok("POST", "/api/v1/studies", study)["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
    best = hp.ok("GET", "/api/v1/studies/%d/best?top_n=3" % sid)
    top = best["trials"]
    c.check(len(top) == 3 and all(t["value_n"] == 2 and t["value_std"] is not None for t in top),
            "executions_per_trial 2: value is a mean over 2 executions, with std")
    c.check(isinstance(best["p_value_top2"], float) and 0 <= best["p_value_top2"] <= 1,
            "best reports a Welch p-value for #1 vs #2: %s" % best["p_value_top2"])
    one = hp.ok("GET", "/api/v1/trials/%d" % top[0]["trial_id"])
    execs = sorted({p["execution"] for p in one["curves"]})
    c.check(execs == [0, 1], "every execution's curve is kept")
    bests = []
    for e in (0, 1):
        accs = [p["metrics"]["val_accuracy"] for p in one["curves"] if p["execution"] == e]
        bests.append(max(accs))
    c.check(abs(one["value"] - sum(bests) / 2) < 1e-12, "value = mean of the executions' best val_accuracy")
    c.check(bests[0] != bests[1], "executions use different seeds")


def wait_running_then_pause(hp, sid):
    """Waits for a running trial, pauses the study and waits until none runs."""
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["total"] > 0, 60, step=0.05)
    hp.ok("POST", "/api/v1/studies/%d/pause" % sid)
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["total"] == 0, 60)


def resumed_events(hp, sid):
    """The execution_resumed events of a study's stream."""
    return [d for _, t, d in read_events(hp.url, sid) if t == "execution_resumed"]


def check_control(hp, c):
    study = study_small()
    study.update(name="control", tuner={"algorithm": "random", "seed": 5, "max_trials": 4})
    study["training"] = {"max_epochs": 40, "batch_size": 32}  # long enough to pause mid-trial
    sid = hp.ok("POST", "/api/v1/studies", study)["id"]
    wait_running_then_pause(hp, sid)
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    c.check(s["state"] == "paused", "paused")
    queued = s["trials_by_state"]["queued"]
    c.check(queued >= 1, "pausing queues the running trials (%d queued)" % queued)
    status, _ = hp.request("POST", "/api/v1/studies/%d/pause" % sid)
    c.check(status == 409, "pausing twice is 409")
    time.sleep(1.5)
    c.check(hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["total"] == 0, "nothing runs while paused")
    hp.ok("POST", "/api/v1/studies/%d/resume" % sid)
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 180)
    resumed = resumed_events(hp, sid)
    c.check(len(resumed) >= 1 and all(d["from_epoch"] >= 1 for d in resumed),
            "resumed trials continue from their checkpoint epoch: %s" % resumed[:2])
    c.check(hp.ok("GET", "/api/v1/studies/%d" % sid)["trials_by_state"]["complete"] == 4, "all 4 complete after resume")

    study.update(name="cancel", tuner={"algorithm": "random", "seed": 6, "max_trials": 20})
    sid = hp.ok("POST", "/api/v1/studies", study)["id"]
    running = wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["trials"], 60, step=0.05)
    # hpod trains it and records its reports and its end: a client's report
    # (which would give it a lease to expire) or tell is a 409
    tid = running[0]["id"]
    for op, body in (("report", {"step": 0, "value": 0.1}), ("tell", {"value": 0.999})):
        status, out = hp.request("POST", "/api/v1/trials/%d/%s" % (tid, op), body)
        c.check(status == 409 and out["error"]["field"] == "id" and "embedded" in out["error"]["message"],
                "%s on an embedded study's running trial -> 409: %s %s" % (op, status, out))
    t = hp.ok("GET", "/api/v1/trials/%d" % tid)
    c.check(t["state"] == "running" and t["lease_expires"] is None and t["value"] != 0.999,
            "the trial runs on untouched: %s %s %s" % (t["state"], t["lease_expires"], t["value"]))
    hp.ok("POST", "/api/v1/studies/%d/cancel" % sid)
    events = read_events(hp.url, sid, timeout=60)
    c.check(events[-1][1] == "study_cancelled" or any(t == "study_cancelled" for _, t, _ in events),
            "cancel ends the event stream")
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["total"] == 0, 60)
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    c.check(s["state"] == "cancelled" and s["trials_by_state"]["cancelled"] >= 1 and s["n_trials"] < 20,
            "cancelled study: no new trials, running ones cancelled: %s" % s["trials_by_state"])

    # cancelled while paused: its queued trials end cancelled, each with its
    # trial_cancelled event (the dashboard follows the stream)
    study.update(name="pause-cancel", tuner={"algorithm": "random", "seed": 8, "max_trials": 20})
    sid = hp.ok("POST", "/api/v1/studies", study)["id"]
    wait_running_then_pause(hp, sid)
    hp.ok("POST", "/api/v1/studies/%d/cancel" % sid)
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=queued" % sid)["total"] == 0, 60)
    ts = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
    cancelled = sorted(t["id"] for t in ts if t["state"] == "cancelled")
    told = sorted(d["trial_id"] for _, typ, d in read_events(hp.url, sid, timeout=60) if typ == "trial_cancelled")
    c.check(cancelled and told == cancelled,
            "a study cancelled while paused: its queued trials cancelled with their events: %s %s" % (cancelled, told))

    study.update(name="timeout", tuner={"algorithm": "random", "seed": 7, "max_trials": 1, "trial_timeout": 0.3})
    study["training"] = {"max_epochs": 500, "batch_size": 16}
    sid = hp.ok("POST", "/api/v1/studies", study)["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
    t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
    c.check(t["state"] == "failed" and "timed out" in (t["error"] or ""), "trial_timeout fails the trial: %s" % t["error"])


def check_data_parallel(args, c):
    hp = Hpod(args.hpod, args=["--devices", "cpu:1x2"]).start()
    try:
        study = study_small()
        study.update(name="data-parallel", tuner={"algorithm": "random", "seed": 8, "max_trials": 3})
        study["training"] = {"max_epochs": 30, "batch_size": 32}  # long enough to pause mid-trial
        sid = hp.ok("POST", "/api/v1/studies", study)["id"]
        wait_running_then_pause(hp, sid)
        hp.ok("POST", "/api/v1/studies/%d/resume" % sid)
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 180)
        s = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(s["trials_by_state"]["complete"] == 3, "cpu:1x2: 3 trials complete: %s" % s["trials_by_state"])
        trials = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
        c.check({t["slot"] for t in trials} == {"cpu:0"}, "one slot ran them all")
        c.check(s["best"]["value"] > 0.6, "the data-parallel slot learns (best val_accuracy %.3f)" % s["best"]["value"])
        resumed = resumed_events(hp, sid)
        c.check(len(resumed) >= 1 and all(d["from_epoch"] >= 1 for d in resumed),
                "a paused data-parallel trial resumes from its checkpoint: %s" % resumed[:1])
        c.check(hp.stop() == 0, "graceful shutdown (cpu:1x2)")
    finally:
        hp.cleanup()


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        check_small(hp, c)
        check_failures(hp, c)
        check_steps_per_execution(hp, c)
        check_device(hp, c)
        check_executions(hp, c)
        check_fair_share(hp, c)
        check_control(hp, c)
        status, out = hp.request("POST", "/api/v1/studies/1/ask")
        c.check(status == 409, "ask on an embedded study is 409")
        ckdir = os.path.join(hp.data_dir, "checkpoints")
        before = len(os.listdir(ckdir))
        study1 = [t["id"] for t in hp.ok("GET", "/api/v1/studies/1/trials?limit=100")["trials"]]
        hp.ok("DELETE", "/api/v1/studies/1")
        left = [d for d in os.listdir(ckdir) if d.startswith("trial-") and int(d.split("-")[1]) in study1]
        c.check(not left and len(os.listdir(ckdir)) < before, "deleting a study removes its checkpoints")
        c.check(hp.stop() == 0, "graceful shutdown")
    finally:
        hp.cleanup()
    check_data_parallel(args, c)
    c.finish()


if __name__ == "__main__":
    main()
