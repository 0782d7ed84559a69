"""kill -9 hpod three times during an embedded study: after each restart the
study continues, running trials resume from their last epoch checkpoint, and
at the end there are exactly max_trials finished trials, none lost or
duplicated."""
import random
import time

from hpod import Checks, Hpod, parse_args, read_events, wait_for

MAX_TRIALS = 10
STUDY = {"name": "crash", "objective": {"metric": "val_accuracy"},
         "model": {"template": "mlp"},
         "dataset": {"name": "fashion-mnist", "limit": 4000, "validation_split": 1000},
         "training": {"max_epochs": 5, "batch_size": 32},
         "tuner": {"algorithm": "tpe", "seed": 21, "max_trials": MAX_TRIALS,
                   "pruner": {"algorithm": "hyperband", "eta": 3, "min_resource": 1}}}


def steps(hp, sid):
    """trial id -> its last step, for every trial of the study."""
    return {t["id"]: t["last_step"] for t in hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]}


def running_with_progress(hp, sid, before):
    """A running trial that has finished an epoch in this hpod (its last step
    moved past what it was at the restart, `before`): a kill now interrupts
    it after a checkpoint, and a resumed one has said so. On a slow build
    (sanitizers) the stored last step of a resumed trial is not progress:
    killing before it trains again would count towards its crash loop."""
    for t in hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["trials"]:
        if t["last_step"] is not None and t["last_step"] >= 1 and t["last_step"] > (before.get(t["id"]) or 0):
            return t
    return None


def resumed_from_checkpoint(hp, sid):
    """Whether a trial has resumed from an epoch > 0 (waits a few seconds for
    the restarted hpod to start the queued trials again)."""
    def seen():
        return any(t == "execution_resumed" and d["from_epoch"] >= 1 for _, t, d in read_events(hp.url, sid, idle=1))
    try:
        wait_for(seen, 10, step=0.1)
        return True
    except AssertionError:
        return False


def main():
    args = parse_args()
    c = Checks()
    rng = random.Random(5)
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        # three kills at random moments after a checkpoint; on a loaded
        # machine a trial may end (or be pruned) in the moment before the
        # kill, so up to three more kills, at once, until one trial has
        # resumed from a checkpoint (bounded: 6 rounds at most)
        round_ = 0
        while round_ < 3 or (round_ < 6 and not resumed_from_checkpoint(hp, sid)):
            before = steps(hp, sid)
            try:
                wait_for(lambda: running_with_progress(hp, sid, before), 120, step=0.05)
            except AssertionError:
                pass  # the study may have finished: the kill still tests a restart
            time.sleep(rng.uniform(0.0, 0.4) if round_ < 3 else 0.0)
            hp.kill9()
            hp = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:2"]).start()
            s = hp.ok("GET", "/api/v1/studies/%d" % sid)
            print("round %d: killed and restarted; %s" % (round_, s["trials_by_state"]), flush=True)
            c.check(s["n_trials"] <= MAX_TRIALS, "round %d: never more than max_trials trials" % round_)
            round_ += 1
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 300)
        s = hp.ok("GET", "/api/v1/studies/%d" % sid)
        by = s["trials_by_state"]
        finished = by["complete"] + by["pruned"] + by["failed"]
        c.check(finished == MAX_TRIALS and s["n_trials"] == MAX_TRIALS,
                "exactly max_trials finished trials: %s" % by)
        trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
        c.check(sorted(t["number"] for t in trials) == list(range(MAX_TRIALS)), "numbers 0..9, no duplicate")
        events = read_events(hp.url, sid)
        resumed = [d for _, t, d in events if t == "execution_resumed"]
        print("resumed from checkpoints: %s" % [(d["number"], d["from_epoch"]) for d in resumed])
        c.check(any(d["from_epoch"] >= 1 for d in resumed), "at least one trial resumed from an epoch > 0")
        for t in trials:
            if t["state"] != "complete":
                continue
            one = hp.ok("GET", "/api/v1/trials/%d" % t["id"])
            epochs = [p["epoch"] for p in one["curves"] if p["execution"] == 0]
            c.check(epochs == list(range(1, len(epochs) + 1)), "trial %d: one curve point per epoch, no gap or repeat"
                    % t["number"])
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
