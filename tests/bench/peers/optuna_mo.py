#!/usr/bin/python3
"""Optuna 3.1's multi-objective samplers on ZDT1, ZDT2, ZDT3 (30 dims) and
DTLZ2 (12 dims, 3 objectives), the peer of `bench_mo_hypervolume`.

Prints one line per trial, "problem sampler seed trial f1 f2 [f3]", and
nothing else on stdout: the C program computes every hypervolume (its own
runs' and these) with the same code and reference points. Samplers, with
Optuna's defaults and seed = the run's seed: NSGAIISampler (population 50,
uniform crossover) and TPESampler (multi-objective: MOTPE's split).

The functions (the same formulas as tests/bench/mo_hypervolume.c, whose
--selftest checks them on their known fronts):
  ZDT: g = 1 + 9 sum(x[1:]) / (n - 1); f1 = x0; ZDT1 f2 = g (1 - sqrt(f1/g)),
  ZDT2 f2 = g (1 - (f1/g)^2), ZDT3 f2 = g (1 - sqrt(f1/g) - f1/g sin(10 pi f1)).
  DTLZ2: g = sum((x[2:] - 0.5)^2); f = (1+g) (cos a cos b, cos a sin b, sin a),
  a = x0 pi/2, b = x1 pi/2.

Re-run:  /usr/bin/python3 tests/bench/peers/optuna_mo.py [--seeds 10] [--trials 100] [--samplers nsga2,tpe]
"""
import argparse
import math
import sys
import warnings

import optuna

DIMS = {"zdt1": 30, "zdt2": 30, "zdt3": 30, "dtlz2": 12}


def evaluate(problem, x):
    if problem == "dtlz2":
        g = sum((v - 0.5) ** 2 for v in x[2:])
        a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
        return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]
    g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
    r = x[0] / g
    if problem == "zdt1":
        f2 = g * (1 - math.sqrt(r))
    elif problem == "zdt2":
        f2 = g * (1 - r * r)
    else:
        f2 = g * (1 - math.sqrt(r) - r * math.sin(10 * math.pi * x[0]))
    return [x[0], f2]


def sampler_of(name, seed):
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    raise SystemExit("unknown sampler %s" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--samplers", default="nsga2,tpe")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    for problem, n in DIMS.items():
        m = 3 if problem == "dtlz2" else 2
        for name in args.samplers.split(","):
            for seed in range(args.seeds):
                study = optuna.create_study(directions=["minimize"] * m, sampler=sampler_of(name, seed))

                def objective(trial):
                    return evaluate(problem, [trial.suggest_float("x%02d" % i, 0, 1) for i in range(n)])

                study.optimize(objective, n_trials=args.trials)
                for t in study.trials:
                    if t.values:
                        print(problem, name, seed, t.number, " ".join(repr(v) for v in t.values))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
