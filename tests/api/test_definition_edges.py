"""Embedded study definitions at their edges, against a real hpod: each is
refused at creation with a 400 naming the field (each was accepted
before, and trained something else than it said, or blew hpod's memory):

- nested repeats past 4096 layers (four levels of 64: 16.8 million layers
  from a 500-byte definition, and hpod aborted out of memory);
- a key a layer, the optimizer, the schedule or the model does not read
  (Keras's "strides", "lr" for "learning_rate", "optimiser"): it was
  ignored, so a searched "lr" changed nothing;
- binary_crossentropy with one output on a dataset of 10 classes (the
  loss fell without bound while val_accuracy read 0.9);
- the objective "val_acc" (accepted, and minimised);
- an accuracy objective on a regression dataset;
- executions_per_trial over 16 (16 ran);
- the builtin dataset with an id (ignored);
- a float parameter where the model needs an integer (dense units from a
  float in 16..64: the check built it at 40, and most trials failed);
- and on an external (ask/tell) study, the tuner keys only the scheduler
  reads: parallel_trials, trial_timeout, executions_per_trial (ignored);
- bayesian over a space of more than 4096 encoded columns (40 choices of
  4096 values crashed hpod);
- a tuner key another algorithm reads (cmaes + n_startup_trials, evolution
  + nsga2's population_size: ignored).
A definition inside every limit is still accepted and trains."""
from hpod import Checks, Hpod, parse_args, wait_for
from test_datasets import make_regression_csv, upload

DATA = {"name": "fashion-mnist", "limit": 300, "validation_split": 100}


def study(**over):
    s = {"name": "edge", "objective": {"metric": "val_accuracy"},
         "model": {"layers": [{"flatten": {}}, {"dense": {"units": 8, "activation": "relu"}},
                              {"dense": {"units": 10}}]},
         "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
         "dataset": dict(DATA), "training": {"max_epochs": 1, "batch_size": 50},
         "tuner": {"algorithm": "random", "seed": 1, "max_trials": 1}}
    s.update(over)
    return s


def refused(hp, c, what, spec, field, words=""):
    st, out = hp.request("POST", "/api/v1/studies", spec, timeout=60)
    err = out.get("error", {}) if isinstance(out, dict) else {}
    c.check(st == 400 and err.get("field") == field and words in err.get("message", ""),
            "%s -> 400 naming %s: %s %s" % (what, field, st, out))


def check_split(hp, c):
    """dataset.split: "tail" (Keras' validation_split, the default) or "shuffle" (seeded by split_seed).
    On a CSV sorted by class (iris as distributed) the tail holds a class no training row has."""
    rows = ["%d,%.2f,%.2f" % (k, k + 0.1 * (i % 5), -k + 0.1 * (i % 3)) for k in range(3)
            for i in range(30 if k < 2 else 15)]  # 75 rows: the last fifth is all of class 2
    upload(hp, [("name", "sorted", None), ("format", "csv", None), ("label_column", "y", None),
                ("file", ("y,a,b\n" + "\n".join(rows) + "\n").encode(), "sorted.csv")])
    base = study(name="split", objective={"metric": "val_accuracy"},
                 model={"layers": [{"dense": {"units": 3}}], "optimizer": {"name": "adam", "learning_rate": 0.1}},
                 space={"u": {"type": "int", "low": 1, "high": 2}}, training={"max_epochs": 40, "batch_size": 10})
    accuracy = {}
    for how in ("tail", "shuffle"):
        ds = {"name": "sorted", "validation_split": 0.2, "split": how}
        if how == "shuffle":
            ds["split_seed"] = 3
        sid = hp.ok("POST", "/api/v1/studies", dict(base, name="split-" + how, dataset=ds))["id"]
        s = wait_for(lambda: (lambda s: s if s["state"] == "complete" else None)(
            hp.ok("GET", "/api/v1/studies/%d" % sid)), 120)
        accuracy[how] = s["best"]["value"] if s and s["best"] else None
    c.check(accuracy["tail"] == 0 and accuracy["shuffle"] is not None and accuracy["shuffle"] > 0.9,
            "a sorted CSV: the tail validates on a class never trained on, a shuffled split does not: %s" % accuracy)
    for ds, field in (({"name": "sorted", "split": "random"}, "dataset.split"),
                      ({"name": "sorted", "split": "shuffle", "split_seed": -1}, "dataset.split_seed"),
                      ({"name": "sorted", "split_seed": 3}, "dataset.split_seed")):
        refused(hp, c, "dataset %s" % ds, dict(base, dataset=ds), field)


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    try:
        layer = {"activation": "relu"}
        for _ in range(4):
            layer = {"repeat": {"count": 64, "layers": [layer]}}
        refused(hp, c, "four nested repeats of 64", study(model={"layers": [{"flatten": {}}, layer,
                                                                            {"dense": {"units": 10}}]}),
                "model.layers[1].repeat.layers[0].repeat.layers[0].repeat.layers[0].repeat.layers[0]",
                "more than 4096 layers")
        c.check(hp.proc.poll() is None, "hpod is up")
        conv = {"layers": [{"conv2d": {"filters": 4, "kernel": 3, "strides": 2}}, {"flatten": {}},
                           {"dense": {"units": 10}}]}
        refused(hp, c, "conv2d strides", study(model=conv), "model.layers[0].conv2d.strides", "unknown key")
        typo = {"layers": [{"flatten": {}}, {"dense": {"units": 10, "activaton": "softmax"}}]}
        refused(hp, c, "dense activaton", study(model=typo), "model.layers[1].dense.activaton", "unknown key")
        lr = dict(study()["model"], optimizer={"name": "sgd", "lr": "$lr"})
        refused(hp, c, "optimizer lr", study(model=lr), "model.optimizer.lr", "learning_rate")
        brit = dict(study()["model"], optimiser={"name": "sgd"})
        refused(hp, c, "model optimiser", study(model=brit), "model.optimiser", "unknown key")
        sched = dict(study()["model"], schedule={"name": "cosine", "steps": 10})
        refused(hp, c, "schedule steps", study(model=sched), "model.schedule.steps", "unknown key")
        bce = {"loss": "binary_crossentropy",
               "layers": [{"flatten": {}}, {"dense": {"units": 1, "activation": "sigmoid"}}]}
        refused(hp, c, "binary_crossentropy, one output, 10 classes", study(model=bce), "model.loss", "10 classes")
        refused(hp, c, "val_acc", study(objective={"metric": "val_acc"}), "objective.metric", "val_accuracy")
        refused(hp, c, "executions_per_trial 20",
                study(tuner={"algorithm": "random", "seed": 1, "max_trials": 1, "executions_per_trial": 20}),
                "tuner.executions_per_trial", "16")
        refused(hp, c, "the builtin dataset with an id", study(dataset=dict(DATA, id=999)), "dataset.id", "built in")
        # a float where the model needs an integer: whole at the middle of
        # 16..64 (so it built there), fractional at most trials
        units = {"layers": [{"flatten": {}}, {"dense": {"units": "$u", "activation": "relu"}}, {"dense": {"units": 10}}]}
        refused(hp, c, "dense units from a float parameter",
                study(model=units, space={"u": {"type": "float", "low": 16, "high": 64}}),
                "model.layers[1].dense.units", "float parameter")
        whole = study(name="whole", model=units, space={"u": {"type": "float", "low": 16, "high": 64, "step": 8}})
        st, out = hp.request("POST", "/api/v1/studies", whole, timeout=60)
        c.check(st == 201, "a float parameter whole at every step is accepted there: %s %s" % (st, out))
        if st == 201:
            hp.ok("DELETE", "/api/v1/studies/%d" % out["id"])
        for key, value in (("parallel_trials", 2), ("trial_timeout", 60), ("executions_per_trial", 3)):
            ext = {"name": "ext", "space": {"x": {"type": "float", "low": 0, "high": 1}},
                   "tuner": {"algorithm": "tpe", key: value}}
            refused(hp, c, "%s on an external study" % key, ext, "tuner." + key, "embedded studies")
        st, _ = upload(hp, [("name", "lines", None), ("format", "csv", None), ("task", "regression", None),
                            ("label_column", "target", None), ("file", make_regression_csv(), "lines.csv")])
        reg = study(dataset={"name": "lines", "validation_split": 20},
                    model={"loss": "mse", "layers": [{"dense": {"units": 1}}]})
        refused(hp, c, "val_accuracy on a regression dataset", reg, "objective.metric", "regression")
        # a fraction counted as the split counts it (Keras' split_at: 10 - int(10 * 0.1) = 10 of 10
        # rows; the check's floor(0.9 * 10) = 9 let it through, and every trial failed)
        upload(hp, [("name", "ten", None), ("format", "csv", None), ("task", "regression", None),
                    ("label_column", "target", None), ("file", make_regression_csv(rows=10), "ten.csv")])
        for f in (0.9, 0.95):
            refused(hp, c, "validation_split %g of 10 rows" % f,
                    dict(reg, objective={"metric": "val_loss"}, dataset={"name": "ten", "validation_split": f}),
                    "dataset.validation_split", "leaves no training")
        check_split(hp, c)
        # a key the optimizer or schedule does not read: a tuned momentum given to adam
        # would be searched for nothing (it was accepted and ignored)
        refused(hp, c, "momentum for adam",
                study(model=dict(units, optimizer={"name": "adam", "momentum": "$m"}),
                      space={"u": {"type": "int", "low": 16, "high": 64}, "m": {"type": "float", "low": 0, "high": 0.99}}),
                "model.optimizer.momentum", "adam takes")
        refused(hp, c, "gamma for a cosine schedule",
                study(model=dict(units, schedule={"name": "cosine", "gamma": 0.5}),
                      space={"u": {"type": "int", "low": 16, "high": 64}}),
                "model.schedule.gamma", "cosine takes")
        # with "name": "$optimizer", a momentum without a condition reaches adam's trials
        choice = {"u": {"type": "int", "low": 16, "high": 64},
                  "opt": {"type": "choice", "values": ["sgd", "adam"]},
                  "m": {"type": "float", "low": 0, "high": 0.99}}
        refused(hp, c, "an unconditional momentum for a chosen optimizer",
                study(model=dict(units, optimizer={"name": "$opt", "momentum": "$m"}), space=choice),
                "model.optimizer.momentum", "condition")
        cond = dict(choice, m=dict(choice["m"], condition={"opt": ["sgd"]}))
        st, out = hp.request("POST", "/api/v1/studies", study(name="cond", model=dict(
            units, optimizer={"name": "$opt", "momentum": "$m"}), space=cond), timeout=60)
        c.check(st == 201, "a momentum conditional on the optimizer being sgd is accepted: %s %s" % (st, out))
        if st == 201:
            hp.ok("DELETE", "/api/v1/studies/%d" % out["id"])
        # pbt counts its bred members toward max_trials: a budget of the population alone
        # never exploits (it ran as random search, without a word)
        refused(hp, c, "pbt with max_trials = population_size",
                study(tuner={"algorithm": "pbt", "max_trials": 4, "population_size": 4, "seed": 1},
                      training={"max_epochs": 4, "batch_size": 50}),
                "tuner.max_trials", "breed")
        # a pruner key the chosen pruner does not read (asha took warmup_steps and ignored it)
        ext = {"name": "ext", "space": {"x": {"type": "float", "low": 0, "high": 1}}}
        for pruner, key in (({"algorithm": "asha", "warmup_steps": 100}, "warmup_steps"),
                            ({"algorithm": "hyperband", "n_startup_trials": 5}, "n_startup_trials"),
                            ({"algorithm": "asha", "max_resource": 27}, "max_resource"),
                            ({"algorithm": "median", "eta": 3}, "eta"),
                            ({"algorithm": "none", "min_resource": 2}, "min_resource")):
            refused(hp, c, "%s with %s" % (pruner["algorithm"], key), dict(ext, tuner={"pruner": pruner}),
                    "tuner.pruner." + key, "does not read it")
        for pruner in ({"algorithm": "hyperband", "eta": 3, "min_resource": 1, "max_resource": 27},
                       {"algorithm": "median", "warmup_steps": 2, "n_startup_trials": 3}):
            st, out = hp.request("POST", "/api/v1/studies", dict(ext, tuner={"pruner": pruner}))
            c.check(st == 201, "%s with the keys it reads: %s %s" % (pruner["algorithm"], st, out))
            if st == 201:
                hp.ok("DELETE", "/api/v1/studies/%d" % out["id"])
        # a tuner key of another algorithm (cmaes took n_startup_trials and sampled no random
        # trials first; evolution took population_size, nsga2's, for its population)
        for tuner, key in (({"algorithm": "cmaes", "n_startup_trials": 5}, "n_startup_trials"),
                           ({"algorithm": "evolution", "population_size": 8}, "population_size"),
                           ({"algorithm": "random", "gamma": 0.2}, "gamma"),
                           ({"algorithm": "tpe", "sigma0": 0.3}, "sigma0"),
                           ({"algorithm": "bayesian", "n_ei_candidates": 48}, "n_ei_candidates")):
            refused(hp, c, "%s with %s" % (tuner["algorithm"], key), dict(ext, tuner=tuner),
                    "tuner." + key, "does not read it")
        for tuner in ({"algorithm": "cmaes", "popsize": 8, "sigma0": 0.2, "max_trials": 5, "seed": 1},
                      {"algorithm": "bohb", "gamma": 0.2, "n_ei_candidates": 30, "min_points_in_model": 4},
                      {"algorithm": "evolution", "population": 8, "sample_size": 3, "lease_seconds": 60}):
            st, out = hp.request("POST", "/api/v1/studies", dict(ext, tuner=tuner))
            c.check(st == 201, "%s with the keys it reads: %s %s" % (tuner["algorithm"], st, out))
        # bayesian over a space it encodes in more than 4096 columns (40 choices of 4096
        # values killed hpod: its GP's arrays overflowed a thread's stack); tpe takes it
        wide = {"name": "wide", "space": {"c%d" % i: {"type": "choice", "values": list(range(4096))}
                                          for i in range(2)}}
        refused(hp, c, "bayesian over 8192 one-hot columns", dict(wide, tuner={"algorithm": "bayesian"}),
                "tuner.algorithm", "8192 columns")
        st, out = hp.request("POST", "/api/v1/studies", dict(wide, tuner={"algorithm": "tpe"}))
        c.check(st == 201, "tpe over the same space: %s" % st)
        # inside every limit: accepted, and it trains
        ok = study(model={"layers": [{"flatten": {}}, {"repeat": {"count": 2, "layers": [
            {"dense": {"units": 8, "activation": "relu"}}]}}, {"dense": {"units": 10}}],
            "optimizer": {"name": "sgd", "learning_rate": "$lr", "momentum": 0.9}})
        sid = hp.ok("POST", "/api/v1/studies", ok)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
        t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
        c.check(t["state"] == "complete", "a definition inside every limit trains: %s" % t["state"])
        c.check(hp.stop() == 0, "graceful stop")
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
