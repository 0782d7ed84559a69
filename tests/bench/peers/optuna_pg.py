#!/usr/bin/python3
"""The Optuna side of bench_pg_nodes: Optuna 3.1 with its RDB storage on a
PostgreSQL server (SQLAlchemy + psycopg2), beside hpod nodes on the same
server. The space is hpod's side's: x and y floats in [-10, 10], the
objective x^2 + y^2 (minimize).

  optuna_pg.py throughput --url postgresql+psycopg2://... --sampler tpe|random
                          [--workers 4] [--trials N] [--seed 0]
      N ask+tell round trips on one study by W worker processes (each its
      own RDBStorage, as Optuna's distributed optimisation runs), N / W
      each; the clock runs from a barrier all workers wait at (after
      import and load_study) until the last one ends. "ask" is study.ask()
      with its two suggest_float calls (hpod's ask returns the parameters),
      "tell" is study.tell(). Prints one JSON line: {"sampler", "trials",
      "seconds", "trials_per_s", "ask_p50_ms", "ask_p99_ms", "tell_p50_ms",
      "tell_p99_ms"}.
  optuna_pg.py latency --url ... --sizes 100,1000 [--asks 10] [--seed 0]
      per size S: a TPESampler study holding S complete trials, filled in
      one transaction through Optuna's own ORM models (study.add_trials
      checks every new parameter against all earlier trials' distributions:
      minutes for a few thousand trials), then one ask in a fresh process
      state (it reads the whole history into Optuna's cache) and --asks
      ask+tell rounds, the ask timed. Prints one JSON line per size:
      {"size", "fill_s", "first_ms", "ask_p50_ms", "ask_p99_ms", "asks"}.

Run with Debian's /usr/bin/python3 (python3-optuna, python3-psycopg2).
"""
import argparse
import datetime
import json
import multiprocessing
import random
import time
import warnings

import optuna
from optuna.distributions import FloatDistribution, distribution_to_json
from optuna.storages._rdb import models
from optuna.trial import TrialState

SPACE = {"x": FloatDistribution(-10, 10), "y": FloatDistribution(-10, 10)}


def quiet():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")


def sampler_of(name, seed):
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def pct(v, q):
    v = sorted(v)
    if not v:
        return float("nan")
    pos = q * (len(v) - 1)
    i = int(pos)
    if i >= len(v) - 1:
        return v[-1]
    return v[i] + (pos - i) * (v[i + 1] - v[i])


def worker(url, name, sampler, seed, n, barrier, out):
    quiet()
    study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(url),
                              sampler=sampler_of(sampler, seed))
    asks, tells = [], []
    barrier.wait()
    for _ in range(n):
        t0 = time.perf_counter()
        trial = study.ask()
        x = trial.suggest_float("x", -10, 10)
        y = trial.suggest_float("y", -10, 10)
        t1 = time.perf_counter()
        study.tell(trial, x * x + y * y)
        t2 = time.perf_counter()
        asks.append(t1 - t0)
        tells.append(t2 - t1)
    out.put((asks, tells))


def throughput(a):
    name = "throughput-%s-%d" % (a.sampler, time.time_ns())
    storage = optuna.storages.RDBStorage(a.url)
    optuna.create_study(storage=storage, study_name=name, direction="minimize")
    storage.engine.dispose()  # no connection crosses the fork
    ctx = multiprocessing.get_context("fork")  # the workers start with Optuna imported
    barrier = ctx.Barrier(a.workers + 1)
    out = ctx.Queue()
    per = a.trials // a.workers
    procs = [ctx.Process(target=worker, args=(a.url, name, a.sampler, a.seed + i, per, barrier, out))
             for i in range(a.workers)]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    t0 = time.perf_counter()
    asks, tells = [], []
    for _ in procs:
        x, y = out.get()
        asks += x
        tells += y
    s = time.perf_counter() - t0
    for p in procs:
        p.join()
    n = per * a.workers
    ms = 1000.0
    print(json.dumps({"sampler": a.sampler, "trials": n, "seconds": s, "trials_per_s": n / s,
                      "ask_p50_ms": ms * pct(asks, 0.5), "ask_p99_ms": ms * pct(asks, 0.99),
                      "tell_p50_ms": ms * pct(tells, 0.5), "tell_p99_ms": ms * pct(tells, 0.99)}), flush=True)


def fill(storage, study_id, size, seed):
    """size complete trials in one transaction, the rows study.add_trials would write."""
    rng = random.Random(seed)
    dist = {k: distribution_to_json(d) for k, d in SPACE.items()}
    now = datetime.datetime.now()
    session = storage.scoped_session()
    try:
        for i in range(size):
            x, y = rng.uniform(-10, 10), rng.uniform(-10, 10)
            t = models.TrialModel(number=i, study_id=study_id, state=TrialState.COMPLETE,
                                  datetime_start=now, datetime_complete=now)
            t.params = [models.TrialParamModel(param_name=k, param_value=v, distribution_json=dist[k])
                        for k, v in (("x", x), ("y", y))]
            t.values = [models.TrialValueModel(objective=0, value=x * x + y * y,
                                               value_type=models.TrialValueModel.TrialValueType.FINITE)]
            session.add(t)
        session.commit()
    finally:
        session.close()


def latency(a):
    for size in [int(s) for s in a.sizes.split(",") if s]:
        name = "latency-%d-%d" % (size, time.time_ns())
        storage = optuna.storages.RDBStorage(a.url)
        study = optuna.create_study(storage=storage, study_name=name, direction="minimize")
        t0 = time.perf_counter()
        fill(storage, study._study_id, size, a.seed)
        fill_s = time.perf_counter() - t0
        storage.engine.dispose()
        # a fresh storage: its cache starts empty, as a new worker's does
        study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(a.url),
                                  sampler=sampler_of("tpe", a.seed))
        times = []
        for i in range(a.asks + 1):
            t0 = time.perf_counter()
            trial = study.ask(SPACE)
            times.append(time.perf_counter() - t0)
            p = trial.params
            study.tell(trial, p["x"] ** 2 + p["y"] ** 2)
        rest = times[1:]
        print(json.dumps({"size": size, "fill_s": fill_s, "first_ms": 1000.0 * times[0],
                          "ask_p50_ms": 1000.0 * pct(rest, 0.5), "ask_p99_ms": 1000.0 * pct(rest, 0.99),
                          "asks": len(rest)}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["throughput", "latency"])
    p.add_argument("--url", required=True, help="postgresql+psycopg2://user@host:port/db")
    p.add_argument("--sampler", choices=["tpe", "random"], default="tpe")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--trials", type=int, default=400, help="total over all workers")
    p.add_argument("--sizes", default="100,1000")
    p.add_argument("--asks", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    quiet()
    if a.mode == "throughput":
        throughput(a)
    else:
        latency(a)


if __name__ == "__main__":
    main()
