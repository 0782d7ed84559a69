"""A model job that takes hpod down is not run forever: killed (-9) three
times in a row while a refit runs, with no epoch of it finished in between,
hpod fails the refit at the next start with the reason (a model_failed
event, reason crash_loop), as it fails such a trial, and serves on.

Before the guard the refit was queued again at every start; model jobs are
taken first, so an hpod restarted by systemd after each death (an out of
memory killer, say) would crash-loop for good."""
import os
import time

from hpod import Checks, Hpod, parse_args, read_events, wait_for

STUDY = {"name": "refit-crash", "objective": {"metric": "val_accuracy"},
         "model": {"template": "mlp"},
         # the refit's dataset loads after its count is written and an
         # epoch of 20,000 rows takes far longer than the test's 10 ms poll
         "dataset": {"name": "fashion-mnist", "limit": 20000, "validation_split": 2000},
         "training": {"max_epochs": 1, "batch_size": 100},
         "tuner": {"algorithm": "random", "seed": 3, "max_trials": 1}}


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
        # a long refit: 10 epochs (epochs_factor x best epoch 1)
        refit = hp.ok("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 1, "epochs_factor": 10})["refits"][0]
        counter = os.path.join(hp.data_dir, "checkpoints", "model-%d.training" % refit["id"])

        def count():
            try:
                with open(counter) as f:
                    return int(f.read().strip() or 0)
            except (OSError, ValueError):
                return 0
        for kill in range(1, 4):
            # killed once this start's run of the job has begun (its count
            # is one more) and before a refit epoch ends (an epoch is
            # progress: the count starts again)
            try:
                wait_for(lambda: count() >= kill, 60, step=0.01)
            except AssertionError:
                c.check(False, "kill %d: the refit began (%s holds %d)" % (kill, counter, count()))
                break
            hp.kill9()
            print("  kill %d: the refit's crash count %d" % (kill, count()), flush=True)
            hp = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:1"]).start()
        m = wait_for(lambda: (lambda m: m if m["state"] in ("failed", "complete") else None)(
            hp.ok("GET", "/api/v1/models/%d" % refit["id"])), 60)
        print("  after the third kill: %s: %s" % (m["state"], m.get("error")))
        c.check(m["state"] == "failed" and "hpod stopped 3 times in a row" in (m.get("error") or ""),
                "the refit fails with the reason: %s %s" % (m["state"], m.get("error")))
        time.sleep(1)
        ev = [d for _, t, d in read_events(hp.url, sid, idle=1) if t == "model_failed"]
        c.check(any(d.get("reason") == "crash_loop" and d["model_id"] == refit["id"] for d in ev),
                "a model_failed event with reason crash_loop: %s" % ev)
        c.check(not os.path.exists(counter), "its crash counter is gone")
        c.check(hp.request("GET", "/healthz")[0] == 200, "hpod serves on")
        c.check(hp.stop() == 0, "graceful stop")
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
