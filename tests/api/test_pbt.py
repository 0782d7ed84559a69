"""Population-based training (tuner.algorithm "pbt") through hpod on two
slots: a population of 4 with a boundary every 2 epochs; hpod is killed
(kill -9) once members wait at a boundary and restarted on the same data
dir. The study completes; every bred trial's lineage is stored and served
(parent, epoch of the copy, params before and after, the member it
replaced, pruned at that epoch), only the mutable parameters changed, its
curve starts after the copy, trial_bred events match, each final member's
line goes back to a sampled one through earlier copies, and no trial is
lost or failed."""
import os
import random
import subprocess
import sys
import time

from hpod import Checks, Hpod, parse_args, read_events, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "clients", "python"))
import hpo_client as hpo  # noqa: E402

POP, EVERY, EPOCHS = 4, 2, 6
STUDY = {"name": "pbt", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
         "dataset": {"name": "fashion-mnist", "limit": 600, "validation_split": 200},
         "training": {"max_epochs": EPOCHS, "batch_size": 50},
         "tuner": {"algorithm": "pbt", "seed": 7, "max_trials": 40, "population_size": POP,
                   "perturbation_interval": EVERY, "quantile": 0.25, "resample_probability": 0.25}}


def trials(hp, sid):
    return hp.ok("GET", "/api/v1/studies/%d/trials?limit=200" % sid)["trials"]


def waiting_at_boundary(hp, sid):
    return any(t["state"] == "queued" and t["last_step"] == EVERY for t in trials(hp, sid))


def main():
    args = parse_args()
    c = Checks()
    rng = random.Random(3)
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        study = hp.ok("GET", "/api/v1/studies/%d" % sid)
        mutable = study["definition"]["tuner"]["mutable"]
        c.check(sorted(mutable) == ["dropout", "lr"], "default tuner.mutable keeps the shapes: %s" % mutable)
        # its members are sampled or bred: no added (or enqueued) trial, which
        # would have no weights to copy and count as a member only after a reload
        for path, body in (("trials", {"params": {}, "value": 0.5}), ("enqueue", {"params": {}})):
            status, out = hp.request("POST", "/api/v1/studies/%d/%s" % (sid, path), body)
            c.check(status == 400 and out["error"]["field"] == "tuner.algorithm",
                    "POST /studies/{id}/%s on a pbt study -> 400 naming tuner.algorithm: %s %s" % (path, status, out))
        # kill -9 while members wait at the first boundary (bounded: 120 s)
        try:
            wait_for(lambda: waiting_at_boundary(hp, sid), 120, step=0.05)
        except AssertionError:
            pass  # a slow machine: the kill still tests a restart mid-study
        time.sleep(rng.uniform(0.0, 0.3))
        before = {t["id"]: t["state"] for t in trials(hp, sid)}
        hp.kill9()
        hp = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:2"]).start()
        print("killed with %s; restarted" % sorted(before.values()), flush=True)
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 180)

        ts = trials(hp, sid)
        by_id = {t["id"]: t for t in ts}
        sampled = [t for t in ts if t["lineage"] is None]
        bred = [t for t in ts if t["lineage"] is not None]
        print("%d sampled, %d bred: %s" % (len(sampled), len(bred), sorted(
            (t["lineage"]["parent_number"], t["lineage"]["parent_epoch"], t["number"]) for t in bred)), flush=True)
        c.check(len(sampled) == POP, "the population was sampled once: %d" % len(sampled))
        c.check(len(bred) >= 1, "members were bred")
        states = sorted(t["state"] for t in ts)
        c.check(states.count("complete") == POP, "one complete member per line at the end: %s" % states)
        c.check(states.count("pruned") == len(bred), "one replaced member per bred trial: %s" % states)
        c.check("failed" not in states and "queued" not in states, "nothing failed or left: %s" % states)
        for t in bred:
            lin = t["lineage"]
            parent, replaced = by_id.get(lin["parent_trial_id"]), by_id.get(lin["replaced_trial_id"])
            ok = parent is not None and replaced is not None
            c.check(ok, "trial %d: its parent and the member it replaced are stored" % t["id"])
            if not ok:
                continue
            c.check(lin["parent_epoch"] % EVERY == 0 and 0 < lin["parent_epoch"] < EPOCHS,
                    "trial %d: copied at a boundary (%d)" % (t["id"], lin["parent_epoch"]))
            c.check(lin["params_before"] == parent["params"], "trial %d: params_before are its parent's" % t["id"])
            c.check(lin["params_after"] == t["params"], "trial %d: params_after are its own" % t["id"])
            changed = {k for k in t["params"] if t["params"][k] != parent["params"].get(k)}
            c.check(changed <= set(mutable), "trial %d: only mutable params changed: %s" % (t["id"], changed))
            c.check(replaced["state"] == "pruned" and replaced["last_step"] == lin["parent_epoch"],
                    "trial %d: the member it replaced ended pruned at the boundary" % t["id"])
            c.check(parent["last_step"] >= lin["parent_epoch"], "trial %d: its parent reached the boundary" % t["id"])
            curves = hp.ok("GET", "/api/v1/trials/%d" % t["id"])["curves"]
            first = min((p["epoch"] for p in curves), default=None)
            c.check(first == lin["parent_epoch"] + 1, "trial %d: its curve starts after the copy (%s)" % (t["id"], first))
            c.check(t["last_step"] in (EPOCHS, lin["parent_epoch"] + EVERY) or t["state"] == "pruned",
                    "trial %d: trained on to a boundary or the end" % t["id"])
        # each complete member's line: back through copies to a sampled member
        for t in ts:
            if t["state"] != "complete":
                continue
            c.check(t["last_step"] == EPOCHS, "trial %d: complete at max_epochs" % t["id"])
            cur, hops, epochs = t, 0, []
            while cur["lineage"] is not None and hops < 50:
                epochs.append(cur["lineage"]["parent_epoch"])
                cur, hops = by_id[cur["lineage"]["parent_trial_id"]], hops + 1
            c.check(cur["lineage"] is None and epochs == sorted(epochs, reverse=True) and len(set(epochs)) == len(epochs),
                    "trial %d: its line goes back to a sampled member through earlier copies %s" % (t["id"], epochs))
        events = read_events(hp.url, sid)
        bred_events = sorted(d["trial_id"] for _, e, d in events if e == "trial_bred")
        c.check(bred_events == sorted(t["id"] for t in bred), "a trial_bred event per bred trial")
        # the Python client shows the same lineage
        cl = hpo.Client(hp.url)
        got = {t.id: t.lineage for t in cl.get_study(sid).trials}
        c.check(got == {t["id"]: t["lineage"] for t in ts}, "Trial.lineage of the Python client")
        # and the CLI's trials table
        out = subprocess.run([args.hpo, "--url", hp.url, "trials", str(sid)], capture_output=True, text=True,
                             timeout=60).stdout
        want = ["bred from #%d at epoch %d" % (t["lineage"]["parent_number"], t["lineage"]["parent_epoch"]) for t in bred]
        c.check(out.count("bred from #") == len(bred) and all(w in out for w in want),
                "hpo trials shows where each bred trial comes from")
        done = [d for _, e, d in events if e == "study_complete"]
        c.check(len(done) == 1 and done[0]["reason"] == "tuner.population_size",
                "the study completes once the population is done: %s" % done)
    finally:
        print(hp.log_tail(8))
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
