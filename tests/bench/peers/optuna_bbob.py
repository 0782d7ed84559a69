#!/usr/bin/python3
"""Optuna 3.1's samplers on the 24 noiseless BBOB functions, the peer of
`bench_tuner_regret --suite bbob`.

The functions are NOT transcribed here: this script loads libhpo_bbob.so
(tests/bench/lib/bbob.c, built with hpo) with ctypes, the same code hpo's
tuners are judged on, so both sides see identical functions and instances.
Seed s (0..N-1) runs instance s+1 of every function on [-5, 5]^D and seeds
the sampler (RandomSampler, TPESampler, CmaEsSampler; default settings).
One run of max(budgets) trials gives every budget as a prefix; the CSV gets
fid,dim,sampler,budget,seed,regret (simple regret = best so far - f_opt).

Re-run:  /usr/bin/python3 tests/bench/peers/optuna_bbob.py --lib build/tests/bench/libhpo_bbob.so \
             [--dims 2,5,10] [--seeds 5] [--budgets 25,50,100] [--samplers random,tpe,cmaes] \
             [--functions 1,...,24] [--csv out.csv]
         ... --lib LIB --check POINTS   (the points file of `--suite bbob --check-peer`:
                                         "fid dim instance f x1..xD" per line; exit 1 unless
                                         every value here equals the C one)
"""
import argparse
import ctypes
import math
import sys
import time
import warnings


class Bbob:
    """One function instance of libhpo_bbob.so (lib/bbob.h)."""

    lib = None

    @classmethod
    def load(cls, path):
        lib = ctypes.CDLL(path)
        lib.bench_bbob_new.restype = ctypes.c_void_p
        lib.bench_bbob_new.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong]
        lib.bench_bbob_free.argtypes = [ctypes.c_void_p]
        lib.bench_bbob_eval.restype = ctypes.c_double
        lib.bench_bbob_eval.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
        lib.bench_bbob_fopt.restype = ctypes.c_double
        lib.bench_bbob_fopt.argtypes = [ctypes.c_void_p]
        lib.bench_bbob_name.restype = ctypes.c_char_p
        lib.bench_bbob_name.argtypes = [ctypes.c_int]
        cls.lib = lib

    def __init__(self, fid, dim, instance):
        self.dim = dim
        self.h = self.lib.bench_bbob_new(fid, dim, instance)
        if not self.h:
            raise ValueError(f"no BBOB function f{fid} in {dim} dimensions")
        self.fopt = self.lib.bench_bbob_fopt(self.h)
        self.buf = (ctypes.c_double * dim)()

    def __call__(self, x):
        for i, v in enumerate(x):
            self.buf[i] = v
        return self.lib.bench_bbob_eval(self.h, self.buf)

    def close(self):
        self.lib.bench_bbob_free(self.h)
        self.h = None


def check(path):
    """max |C value - value through ctypes| over the points file"""
    worst, n, cache = 0.0, 0, {}
    with open(path) as fh:
        for line in fh:
            t = line.split()
            fid, dim, inst, want = int(t[0]), int(t[1]), int(t[2]), float(t[3])
            x = [float(v) for v in t[4:]]
            assert len(x) == dim, line
            key = (fid, dim, inst)
            if key not in cache:
                cache[key] = Bbob(fid, dim, inst)
            got = cache[key](x)
            d = abs(got - want) if math.isfinite(got) else math.inf
            worst = max(worst, d)
            n += 1
    for f in cache.values():
        f.close()
    print(f"bbob peer check: max |C - Python(ctypes)| = {worst:.3g} over {n} points")
    return 0 if n > 0 and worst == 0.0 else 1


def run_study(optuna, sampler_name, fid, dim, seed, n_trials):
    f = Bbob(fid, dim, seed + 1)
    samplers = {"random": optuna.samplers.RandomSampler, "tpe": optuna.samplers.TPESampler,
                "cmaes": optuna.samplers.CmaEsSampler}
    study = optuna.create_study(sampler=samplers[sampler_name](seed=seed))
    best, traj = math.inf, []
    for _ in range(n_trials):
        trial = study.ask()
        x = [trial.suggest_float(f"x{i}", -5.0, 5.0) for i in range(dim)]
        y = f(x)
        study.tell(trial, y)
        best = min(best, y)
        traj.append(best - f.fopt)
    f.close()
    return traj


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True, help="libhpo_bbob.so")
    p.add_argument("--check", default=None, help="points file: compare and exit")
    p.add_argument("--dims", default="2,5,10")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budgets", default="25,50,100")
    p.add_argument("--samplers", default="random,tpe,cmaes")
    p.add_argument("--functions", default=",".join(str(i) for i in range(1, 25)))
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    Bbob.load(args.lib)
    if args.check:
        return check(args.check)

    import optuna  # only the benchmark needs it, not --check

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    budgets = [int(b) for b in args.budgets.split(",")]
    n_trials = max(budgets)
    rows = []
    t_all = time.perf_counter()
    for s_name in args.samplers.split(","):
        t0 = time.perf_counter()
        for fid in (int(v) for v in args.functions.split(",")):
            for dim in (int(v) for v in args.dims.split(",")):
                for seed in range(args.seeds):
                    traj = run_study(optuna, s_name, fid, dim, seed, n_trials)
                    rows += [(fid, dim, s_name, b, seed, traj[b - 1]) for b in budgets]
        print(f"  done optuna {s_name} ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"  optuna {optuna.__version__}: total wall {time.perf_counter() - t_all:.1f} s", flush=True)
    if args.csv:
        with open(args.csv, "w") as fh:
            fh.write("fid,dim,sampler,budget,seed,regret\n")
            for r in rows:
                fh.write(",".join(str(v) if not isinstance(v, float) else repr(v) for v in r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
