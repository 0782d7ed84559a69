#!/usr/bin/python3
"""Sample efficiency of Optuna samplers on standard synthetic minimisation problems.

Samplers (all default settings, seed = s): RandomSampler, TPESampler, CmaEsSampler
(optuna 3.1 has CmaEsSampler via python3-cmaes; it has no GPSampler).
Functions:  Branin 2D (x1 in [-5,10], x2 in [0,15], f* = 0.397887)
            Hartmann6 6D ([0,1]^6, f* = -3.32237)
            Rosenbrock 4D ([-5,10]^4, f* = 0)
            Ackley 5D ([-32.768,32.768]^5, f* = 0)
Every study runs 100 trials; simple regret (best-so-far - f*) is read at
budgets 25/50/100 (the samplers do not know the budget, so one 100-trial
trajectory gives all three). Median and IQR (Q1..Q3) over --seeds seeds.

Re-run:  /usr/bin/python3 tests/bench/peers/optuna_quality.py [--seeds 10] [--csv out.csv]
"""
import argparse
import math
import time
import warnings

import numpy as np
import optuna

# ---- test functions -----------------------------------------------------------


def branin(x):
    x1, x2 = x
    a, b, c = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi
    r, s, t = 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


H6_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
H6_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(x):
    x = np.asarray(x)
    return float(-np.sum(H6_ALPHA * np.exp(-np.sum(H6_A * (x - H6_P) ** 2, axis=1))))


def rosenbrock(x):
    x = np.asarray(x)
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def ackley(x):
    x = np.asarray(x)
    d = len(x)
    return float(-20 * math.exp(-0.2 * math.sqrt(np.sum(x ** 2) / d))
                 - math.exp(np.sum(np.cos(2 * math.pi * x)) / d) + 20 + math.e)


PROBLEMS = {  # name: (f, bounds, f*)
    "branin2": (branin, [(-5, 10), (0, 15)], 0.397887),
    "hartmann6": (hartmann6, [(0, 1)] * 6, -3.32237),
    "rosenbrock4": (rosenbrock, [(-5, 10)] * 4, 0.0),
    "ackley5": (ackley, [(-32.768, 32.768)] * 5, 0.0),
}


def make_sampler(name, seed):
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    raise ValueError(name)


def run_study(problem, sampler_name, seed, n_trials):
    f, bounds, fstar = PROBLEMS[problem]
    study = optuna.create_study(sampler=make_sampler(sampler_name, seed))
    best, traj = math.inf, []
    for _ in range(n_trials):
        trial = study.ask()
        x = [trial.suggest_float(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(bounds)]
        y = f(x)
        study.tell(trial, y)
        best = min(best, y)
        traj.append(best - fstar)
    return traj


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--budgets", default="25,50,100")
    p.add_argument("--samplers", default="random,tpe,cmaes")
    p.add_argument("--problems", default=",".join(PROBLEMS))
    p.add_argument("--csv", default=None, help="write per-seed regrets here")
    args = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    budgets = [int(b) for b in args.budgets.split(",")]
    samplers = args.samplers.split(",")
    n_trials = max(budgets)
    # sanity check of the optima
    assert abs(branin([-math.pi, 12.275]) - 0.397887) < 1e-5
    assert abs(hartmann6([0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573]) + 3.32237) < 1e-4
    assert rosenbrock([1.0] * 4) == 0.0 and abs(ackley([0.0] * 5)) < 1e-12

    print(f"optuna {optuna.__version__}; seeds 0..{args.seeds - 1}; simple regret median [Q1..Q3]")
    rows = []
    t_all = time.perf_counter()
    for prob in args.problems.split(","):
        print(f"\n{prob}  (f* = {PROBLEMS[prob][2]})")
        print(f"  {'sampler':8s}" + "".join(f"{'n=' + str(b):>30s}" for b in budgets) + "   wall s")
        for s_name in samplers:
            t0 = time.perf_counter()
            trajs = [run_study(prob, s_name, seed, n_trials) for seed in range(args.seeds)]
            wall = time.perf_counter() - t0
            cells = []
            for b in budgets:
                r = np.array([t[b - 1] for t in trajs])
                q1, med, q3 = np.percentile(r, [25, 50, 75])
                cells.append(f"{med:.3g} [{q1:.3g}..{q3:.3g}]")
                rows += [(prob, s_name, b, seed, t[b - 1]) for seed, t in enumerate(trajs)]
            print(f"  {s_name:8s}" + "".join(f"{c:>30s}" for c in cells) + f"   {wall:6.1f}", flush=True)
    print(f"\ntotal wall {time.perf_counter() - t_all:.1f} s")
    if args.csv:
        with open(args.csv, "w") as fh:
            fh.write("problem,sampler,budget,seed,regret\n")
            for r in rows:
                fh.write(",".join(map(str, r)) + "\n")


if __name__ == "__main__":
    main()
