#!/usr/bin/python3
"""optuna_tabular.py - the Optuna 3.1 side of the tabular HPO benchmark
(tests/bench/tabular_hpo.c, which starts it; the table and its grid are
described in tests/bench/lib/tabular.h).

The same surrogate studies as hpo's: a suggestion snaps to the nearest grid
point (log scale on log axes), training it reads its curve epoch by epoch,
each epoch's val_accuracy is reported (step = epoch, 1-based) and charged as
one epoch; a trial that trains every epoch returns the best epoch's
val_accuracy; a configuration whose training diverged fails after its
recorded epochs. Trials run one at a time until the epoch budget is spent.

Methods: tpe+hyperband (TPESampler(seed=seed) + HyperbandPruner(min_resource=1,
max_resource=max_epochs, reduction_factor=3)), tpe (no pruner), random
(RandomSampler(seed), no pruner), random+hyperband (RandomSampler(seed) and
the same pruner: the pruners compared without the samplers).

Prints nothing on stdout but a summary; writes one CSV line per trial to --csv:
method,task,seed,trial,state,cum_epochs,value,config
"""
import argparse
import json
import math
import sys

import optuna


def load_table(path):
    curves = {}
    max_epochs = 0
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            task, cid, _params, ep, acc, _loss, _sec = line.split(",")
            acc = [float(v) for v in acc.split(" ")]
            assert len(acc) == int(ep)
            curves[(task, int(cid))] = acc
            max_epochs = max(max_epochs, int(ep))
    return curves, max_epochs


def snap(axis, v):
    kind, values = axis["kind"], axis["values"]
    if kind == "choice":
        return values.index(v)
    lg = kind in ("int_log", "float_log")
    key = (lambda g: abs(math.log(v) - math.log(g))) if lg else (lambda g: abs(v - g))
    best, bd = 0, math.inf
    for i, g in enumerate(values):
        d = key(g)
        if d < bd:  # the first of equals, as tab_snap
            best, bd = i, d
    return best


def suggest(trial, name, spec):
    t = spec["type"]
    if t == "int":
        return trial.suggest_int(name, spec["low"], spec["high"], log=spec.get("log", False))
    if t == "float":
        if "step" in spec:
            return trial.suggest_float(name, spec["low"], spec["high"], step=spec["step"])
        return trial.suggest_float(name, spec["low"], spec["high"], log=spec.get("log", False))
    return trial.suggest_categorical(name, spec["values"])


def run(method, task, seed, curves, max_epochs, space, budget, out):
    axes, sp = space["axes"], space["space"]
    if method == "tpe+hyperband":
        sampler = optuna.samplers.TPESampler(seed=seed)
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_epochs, reduction_factor=3)
    elif method == "random+hyperband":
        sampler = optuna.samplers.RandomSampler(seed=seed)
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_epochs, reduction_factor=3)
    elif method == "tpe":
        sampler, pruner = optuna.samplers.TPESampler(seed=seed), optuna.pruners.NopPruner()
    elif method == "random":
        sampler, pruner = optuna.samplers.RandomSampler(seed=seed), optuna.pruners.NopPruner()
    else:
        raise SystemExit(f"optuna_tabular: unknown method {method}")
    # named: HyperbandPruner assigns brackets by a hash of the study's name and
    # the trial number, so a fixed name makes the run reproducible
    study = optuna.create_study(study_name=f"tabular-{task}-{method}-{seed}", direction="maximize",
                                sampler=sampler, pruner=pruner)
    spent = [0]
    ids = {}

    def objective(trial):
        cid = 0
        for ax in axes:
            cid = cid * len(ax["values"]) + snap(ax, suggest(trial, ax["name"], sp[ax["name"]]))
        ids[trial.number] = cid
        acc = curves[(task, cid)]
        best = -math.inf
        for e in range(1, max_epochs + 1):
            spent[0] += 1
            if e > len(acc):
                return float("nan")  # diverged in this epoch: Optuna fails the trial
            best = max(best, acc[e - 1])
            trial.report(acc[e - 1], e)
            if e < max_epochs and trial.should_prune():
                raise optuna.TrialPruned()
        return best

    def done(st, ft):
        state = ft.state.name
        value = ft.value if state == "COMPLETE" else float("nan")
        out.write(f"{method},{task},{seed},{ft.number},{state},{spent[0]},{value!r},{ids[ft.number]}\n")
        if spent[0] >= budget:
            st.stop()

    study.optimize(objective, callbacks=[done])
    return len(study.trials)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--space", required=True)
    ap.add_argument("--tasks", default="mlp,cnn")
    ap.add_argument("--methods", default="tpe+hyperband")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed0", type=int, default=100)
    ap.add_argument("--budget", type=int, default=1350)
    ap.add_argument("--csv", required=True)
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    curves, max_epochs = load_table(a.table)
    with open(a.space) as f:
        spaces = json.load(f)
    with open(a.csv, "w") as out:
        for task in a.tasks.split(","):
            for method in a.methods.split(","):
                n = 0
                for s in range(a.seeds):
                    n += run(method, task, a.seed0 + s, curves, max_epochs, spaces[task], a.budget, out)
                print(f"optuna {method} on {task}: {n} trials over {a.seeds} seeds", file=sys.stderr)


if __name__ == "__main__":
    main()
