"""Models too large for memory, and templates that can never build
(issue 12, defects 2 and 3).

- A dense layer of 1,048,576 units (about 16 GiB to train) is a 400 at
  creation naming model.layers[1].dense.units with "model needs ...,
  budget ..."; before, it got 201 and hpod aborted allocating it, again
  at every restart.
- The same size as one value of a choice ([16, 1048576]) is accepted: the
  trial that draws it fails with the reason, the other completes, hpod
  stays up; kill -9 and a restart leave the failed trial failed (it is not
  requeued) and hpod up.
- --max-model-bytes sets the budget: a model of ~1 GiB is refused under
  --max-model-bytes 512M; a stored study accepted under a larger budget
  still loads after such a restart, and its trial fails with the reason.
- dense directly on images (no flatten) is a 400 naming the dense layer,
  fixed or with its units a parameter; before, every trial failed.
- A study whose huge value is drawn while hpod is killed and restarted
  still completes with exactly max_trials trials.
"""
from hpod import Checks, Hpod, parse_args, wait_for

DATA = {"name": "fashion-mnist", "limit": 300, "validation_split": 100}
TRAINING = {"max_epochs": 1, "batch_size": 50}


def mlp(units):
    return {"layers": [{"flatten": {}}, {"dense": {"units": units, "activation": "relu"}},
                       {"dense": {"units": 10, "activation": "softmax"}}],
            "optimizer": {"name": "adam", "learning_rate": "$lr"}}


def study(name, model, space, max_trials=2, algorithm="grid"):
    return {"name": name, "objective": {"metric": "val_accuracy"}, "model": model,
            "space": dict(space), "dataset": DATA, "training": TRAINING,
            "tuner": {"algorithm": algorithm, "seed": 4, "max_trials": max_trials}}


LR = {"lr": {"type": "choice", "values": [0.001]}}


def done(hp, sid):
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    return s if s["state"] == "complete" else None


def check_refused(hp, c, what, body, field, text):
    st, out = hp.request("POST", "/api/v1/studies", body)
    err = (out or {}).get("error", {}) if isinstance(out, dict) else {}
    c.check(st == 400 and err.get("field") == field and text in err.get("message", ""),
            "%s -> 400 naming %s (got %d %s)" % (what, field, st, str(out)[:300]))


def check_choice_study(hp, c, sid):
    s = wait_for(lambda: done(hp, sid), 120)
    trials = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
    by = {t["params"]["units"]: t for t in trials}
    c.check(s["n_trials"] == 2 and set(by) == {16, 1048576}, "both values ran: %s" % sorted(by))
    big = by.get(1048576, {})
    err = big.get("error") or ""
    c.check(big.get("state") == "failed" and "model needs" in err and "budget" in err
            and "model.layers[1].dense.units" in err, "the huge trial fails with the reason: %s" % err)
    c.check(by.get(16, {}).get("state") == "complete", "the small trial completes")
    return big


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        # 2. a fixed size over the (default, at most 4 GiB) budget
        check_refused(hp, c, "dense of 1,048,576 units", study("huge", mlp(1048576), LR),
                      "model.layers[1].dense.units", "model needs ")
        # 3. dense on images without flatten, fixed and with a parameter
        noflat = {"layers": [{"dense": {"units": 32, "activation": "relu"}},
                             {"dense": {"units": 10, "activation": "softmax"}}]}
        check_refused(hp, c, "dense on images, no flatten", study("noflat", noflat, LR),
                      "model.layers[0].dense", "flatten")
        noflat_p = {"layers": [{"repeat": {"count": "$n", "layers": [{"dense": {"units": "$units"}}]}},
                               {"dense": {"units": 10, "activation": "softmax"}}]}
        check_refused(hp, c, "dense on images, depth and units as parameters",
                      study("noflat2", noflat_p, {"n": {"type": "int", "low": 0, "high": 3},
                                                  "units": {"type": "int", "low": 8, "high": 64}}, 3, "random"),
                      "model.layers[0].dense", "flatten")
        # a template that builds at some points is accepted (its failing points are failed trials)
        st, out = hp.request("POST", "/api/v1/studies", study(
            "kernel", {"layers": [{"conv2d": {"filters": 4, "kernel": "$k"}}, {"flatten": {}},
                                  {"dense": {"units": 10, "activation": "softmax"}}]},
            {"k": {"type": "int", "low": 3, "high": 40}}, 1, "random"))
        c.check(st == 201, "a kernel that fits at some points is accepted (%d %s)" % (st, str(out)[:200]))

        # 2. the size as a choice value: accepted, the trial that draws it fails
        sid = hp.ok("POST", "/api/v1/studies", study(
            "choice", mlp("$units"), dict(LR, units={"type": "choice", "values": [16, 1048576]})))["id"]
        big = check_choice_study(hp, c, sid)
        c.check(hp.request("GET", "/healthz")[0] == 200, "hpod is up after the huge trial")

        # a study of ~600 MiB models, accepted under the default budget; kill -9
        # at once and restart with a smaller budget: the failed trial stays
        # failed, and the stored study still loads (it is not refused again),
        # its trial failing over the new budget
        mid = hp.ok("POST", "/api/v1/studies", study("mid", mlp(40000), LR, 1))["id"]
        hp.kill9()
        hp = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:2", "--max-model-bytes", "512M"]).start()
        again = hp.ok("GET", "/api/v1/trials/%d" % big["id"])
        c.check(again["state"] == "failed" and again["error"] == big["error"], "after a restart the trial is "
                "still failed with its reason")
        wait_for(lambda: done(hp, mid), 120)
        t = hp.ok("GET", "/api/v1/studies/%d/trials" % mid)["trials"]
        c.check(len(t) == 1 and t[0]["state"] == "failed" and "budget 512.0 MiB" in (t[0]["error"] or ""),
                "a stored study over the new budget loads; its trial fails with the reason: %s" % t)
        check_refused(hp, c, "dense of 65,536 units under --max-model-bytes 512M", study("big", mlp(65536), LR),
                      "model.layers[1].dense.units", "budget 512.0 MiB")

        # kill -9 while such a study runs, restart: hpod comes up and the study completes
        sid2 = hp.ok("POST", "/api/v1/studies", study(
            "choice2", mlp("$units"), dict(LR, units={"type": "choice", "values": [16, 1048576]})))["id"]
        hp.kill9()
        hp = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:2"]).start()
        check_choice_study(hp, c, sid2)
        hp.kill9()
        hp = Hpod(args.hpod, data_dir=hp.data_dir, args=["--devices", "cpu:2"]).start()
        s = hp.ok("GET", "/api/v1/studies/%d" % sid2)
        c.check(s["state"] == "complete" and s["trials_by_state"]["failed"] == 1,
                "a second restart changes nothing: %s" % s["trials_by_state"])
        rc = hp.stop()
        c.check(rc == 0, "hpod shuts down cleanly (exit %s)\n%s" % (rc, hp.log_tail(15)))
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
