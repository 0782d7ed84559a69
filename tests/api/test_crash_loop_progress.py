"""The crash-loop guard counts what its message says: the deaths of hpod
while training a trial "before it finished an epoch". hpod is killed (-9)
once after the trial finished an epoch (that run made progress: it does not
count), then twice while the resumed trial trains, before it finishes an
epoch: the trial is still resumed (2 deaths without progress, not 3). A
third kill before an epoch fails it at the next start, "hpod stopped 3 times
in a row ...". The kills land between the crash counter's write at the
start of training (checkpoints/trial-<id>/training) and the next epoch; the
test checks that no epoch finished in between (the trial's last step)."""
import os
import time

from hpod import Checks, Hpod, parse_args, wait_for

STUDY = {"name": "crash-loop", "objective": {"metric": "val_accuracy"},
         # slow epochs (~1 s or more): the kills land well inside one
         "model": {"layers": [{"flatten": {}}, {"dense": {"units": 512, "activation": "relu"}},
                              {"dense": {"units": 512, "activation": "relu"}},
                              {"dense": {"units": 10, "activation": "softmax"}}],
                   "loss": "sparse_categorical_crossentropy", "optimizer": {"name": "adam", "learning_rate": 1e-3}},
         "space": {"x": {"type": "float", "low": 0, "high": 1}},
         "dataset": {"name": "fashion-mnist", "limit": 12000, "validation_split": 500},
         "training": {"max_epochs": 50, "batch_size": 64},
         "tuner": {"algorithm": "random", "seed": 4, "max_trials": 1}}
ARGS = ["--devices", "cpu:1"]


def counter_stat(path):
    try:
        st = os.stat(path)
        return (st.st_ino, st.st_mtime_ns)
    except FileNotFoundError:
        return None


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=ARGS).start()
    data_dir = hp.data_dir
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]

        def running():
            ts = hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["trials"]
            return ts[0] if ts else None

        t = wait_for(lambda: (lambda r: r if r and (r["last_step"] or 0) >= 1 else None)(running()), 120, step=0.02)
        tid = t["id"]
        counter = os.path.join(data_dir, "checkpoints", "trial-%d" % tid, "training")
        hp.kill9()  # after an epoch of this run: progress, not a crash loop
        steps = None

        def restart():
            h = Hpod(args.hpod, data_dir=data_dir, args=ARGS)
            return h.start()

        def trial(h):
            return h.ok("GET", "/api/v1/trials/%d" % tid)

        for kill in (2, 3, 4):
            before = counter_stat(counter)
            hp = restart()
            got = trial(hp)
            if kill == 4 and not c.check(got["state"] != "failed",
                                         "after 1 kill past an epoch and 2 before one, the trial is resumed, "
                                         "not failed (%s: %s)" % (got["state"], got.get("error"))):
                hp.stop()
                c.finish()
            if steps is None:
                steps = got["last_step"]
            # the training run has started (its crash counter written): kill before its epoch ends
            wait_for(lambda: counter_stat(counter) not in (None, before), 60, step=0.005)
            hp.kill9()
        hp = restart()
        got = trial(hp)
        c.check(got["last_step"] == steps, "no epoch finished between the kills (last step %s, then %s)"
                % (steps, got["last_step"]))
        c.check(got["state"] == "failed" and "3 times" in (got.get("error") or ""),
                "3 deaths before an epoch fail it: %s %s" % (got["state"], got.get("error")))
        c.check(hp.stop() == 0, "hpod stops cleanly")
    finally:
        if c.failed:
            print(hp.log_tail(40))
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
