#!/usr/bin/python3
"""Optuna 3.1's samplers on the 24 BBOB functions, the peer of
`bench_tuner_regret --suite bbob`, with its variants (--variant): noisy-gauss,
noisy-uniform and noisy-cauchy tell the sampler noisy values and score the
noiseless value of the best-told trial; mixed searches the mixed space of
lib/bbob.h (bench_mixed_coord) instead of the box.

The functions are NOT transcribed here: this script loads libhpo_bbob.so
(tests/bench/lib/bbob.c, built with hpo) with ctypes, the same code hpo's
tuners are judged on, so both sides see identical functions and instances.
Seed s (seed0..seed0+N-1; --seed0, default 0) runs instance s+1 of every
function on [-5, 5]^D and seeds the sampler (RandomSampler, TPESampler, CmaEsSampler; default settings).
One run of max(budgets) trials gives every budget as a prefix; the CSV gets
fid,dim,sampler,budget,seed,regret (simple regret = best so far - f_opt).

--jobs N runs the studies in N processes (each study is one process's, start
to end, so the figures do not depend on N).

Re-run:  /usr/bin/python3 tests/bench/peers/optuna_bbob.py --lib build/tests/bench/libhpo_bbob.so \
             [--dims 2,5,10] [--seeds 5] [--seed0 0] [--budgets 25,50,100] [--samplers random,tpe,cmaes] \
             [--functions 1,...,24] [--variant noiseless] [--jobs 1] [--csv out.csv]
         ... --lib LIB --check POINTS   (the points file of `--suite bbob --check-peer`:
                                         "fid dim instance model k f x1..xD" per line; exit 1
                                         unless every value here equals the C one)
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
        lib.bench_bbob_eval_noisy.restype = ctypes.c_double
        lib.bench_bbob_eval_noisy.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.c_int, ctypes.c_ulonglong,
            ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_double)]
        lib.bench_mixed_coord.restype = ctypes.c_double
        lib.bench_mixed_coord.argtypes = [ctypes.c_int, ctypes.c_double]
        cls.lib = lib

    def __init__(self, fid, dim, instance):
        self.dim = dim
        self.instance = instance
        self.h = self.lib.bench_bbob_new(fid, dim, instance)
        if not self.h:
            raise ValueError(f"no BBOB function f{fid} in {dim} dimensions")
        self.fopt = self.lib.bench_bbob_fopt(self.h)
        self.buf = (ctypes.c_double * dim)()

    def __call__(self, x):
        for i, v in enumerate(x):
            self.buf[i] = v
        return self.lib.bench_bbob_eval(self.h, self.buf)

    def noisy(self, x, model, k):
        """(told value, noiseless value) of evaluation k under noise model `model`"""
        for i, v in enumerate(x):
            self.buf[i] = v
        truth = ctypes.c_double()
        y = self.lib.bench_bbob_eval_noisy(self.h, self.buf, model, self.instance, k,
                                           ctypes.byref(truth))
        return y, truth.value

    def close(self):
        self.lib.bench_bbob_free(self.h)
        self.h = None


def check(path):
    """max |C value - value through ctypes| over the points file"""
    worst, n, cache = 0.0, 0, {}
    with open(path) as fh:
        for line in fh:
            t = line.split()
            fid, dim, inst, model, k = (int(v) for v in t[:5])
            want = float(t[5])
            x = [float(v) for v in t[6:]]
            assert len(x) == dim, line
            key = (fid, dim, inst)
            if key not in cache:
                cache[key] = Bbob(fid, dim, inst)
            got = cache[key].noisy(x, model, k)[0]
            d = abs(got - want) if math.isfinite(got) else math.inf
            worst = max(worst, d)
            n += 1
    for f in cache.values():
        f.close()
    print(f"bbob peer check: max |C - Python(ctypes)| = {worst:.3g} over {n} points")
    return 0 if n > 0 and worst == 0.0 else 1


NOISE_MODELS = {"noiseless": 0, "noisy-gauss": 1, "noisy-uniform": 2, "noisy-cauchy": 3}


def suggest_x(trial, dim, mixed, lib):
    """the point of [-5, 5]^dim the trial asks for: the box, or the mixed
    space of lib/bbob.h (decoded by the library's bench_mixed_coord)"""
    if not mixed:
        return [trial.suggest_float(f"x{i}", -5.0, 5.0) for i in range(dim)]
    x = []
    for i in range(dim):
        kind = i % 4
        if kind == 0:
            v = trial.suggest_int(f"x{i}", -5, 5)
        elif kind == 1:
            v = trial.suggest_float(f"x{i}", 1e-3, 1e2, log=True)
        elif kind == 2:
            v = trial.suggest_categorical(f"x{i}", list(range(-5, 6)))
        elif trial.suggest_categorical(f"m{i}", ["fine", "coarse"]) == "fine":
            v = trial.suggest_float(f"x{i}f", -5.0, 5.0)
        else:
            v = trial.suggest_int(f"x{i}c", -4, 4, step=2)
        x.append(lib.bench_mixed_coord(i, float(v)))
    return x


def run_study(optuna, sampler_name, fid, dim, seed, n_trials, variant):
    f = Bbob(fid, dim, seed + 1)
    samplers = {"random": optuna.samplers.RandomSampler, "tpe": optuna.samplers.TPESampler,
                "cmaes": optuna.samplers.CmaEsSampler}
    study = optuna.create_study(sampler=samplers[sampler_name](seed=seed))
    model = NOISE_MODELS.get(variant, 0)
    best, best_truth, traj = math.inf, math.inf, []
    for k in range(n_trials):
        trial = study.ask()
        x = suggest_x(trial, dim, variant == "mixed", Bbob.lib)
        y, truth = f.noisy(x, model, k)
        study.tell(trial, y)
        if y < best:
            best, best_truth = y, truth
        traj.append(best_truth - f.fopt)
    f.close()
    return traj


def worker_init(lib_path):
    """a --jobs process: the library and a quiet optuna, once"""
    import optuna

    Bbob.load(lib_path)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")


def run_task(task):
    """one study of a --jobs pool: (sampler, fid, dim, seed, n_trials, variant) -> its trajectory"""
    import optuna

    return run_study(optuna, *task)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True, help="libhpo_bbob.so")
    p.add_argument("--check", default=None, help="points file: compare and exit")
    p.add_argument("--dims", default="2,5,10")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--budgets", default="25,50,100")
    p.add_argument("--samplers", default="random,tpe,cmaes")
    p.add_argument("--functions", default=",".join(str(i) for i in range(1, 25)))
    p.add_argument("--variant", default="noiseless",
                   choices=sorted(list(NOISE_MODELS) + ["mixed"]))
    p.add_argument("--jobs", type=int, default=1, help="processes running the studies")
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
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
    pool = None
    if args.jobs > 1:
        import multiprocessing

        pool = multiprocessing.Pool(args.jobs, initializer=worker_init, initargs=(args.lib,))
    for s_name in args.samplers.split(","):
        t0 = time.perf_counter()
        tasks = [(s_name, fid, dim, seed, n_trials, args.variant)
                 for fid in (int(v) for v in args.functions.split(","))
                 for dim in (int(v) for v in args.dims.split(","))
                 for seed in range(args.seed0, args.seed0 + args.seeds)]
        trajs = pool.map(run_task, tasks) if pool else (run_task(t) for t in tasks)
        for (_, fid, dim, seed, _, _), traj in zip(tasks, trajs):
            rows += [(fid, dim, s_name, b, seed, traj[b - 1]) for b in budgets]
        print(f"  done optuna {s_name} ({time.perf_counter() - t0:.1f} s)", flush=True)
    if pool:
        pool.close()
        pool.join()
    print(f"  optuna {optuna.__version__}: total wall {time.perf_counter() - t_all:.1f} s", flush=True)
    if args.csv:
        with open(args.csv, "w") as fh:
            fh.write("fid,dim,sampler,budget,seed,regret\n")
            for r in rows:
                fh.write(",".join(str(v) if not isinstance(v, float) else repr(v) for v in r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
