#!/usr/bin/python3
"""The Optuna side of bench_asktell: ask+tell round trips per second with
Optuna 3.1, RDB storage on an SQLite file, RandomSampler, N threads sharing
one study (Optuna's ask/tell overhead with a trivial objective, x^2 + y^2,
made concurrent).

Prints one JSON line: {"trials": N, "seconds": S, "trials_per_s": R}.
Run with Debian's /usr/bin/python3 (python3-optuna).
"""
import argparse
import json
import os
import tempfile
import threading
import time
import warnings

import optuna


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--trials", type=int, default=400, help="total over all threads")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    d = tempfile.mkdtemp(prefix="optuna-bench-")
    path = os.path.join(d, "optuna.db")
    storage = optuna.storages.RDBStorage("sqlite:///" + path)
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=a.seed),
                                direction="minimize", study_name="bench")
    per = a.trials // a.threads

    def client():
        for _ in range(per):
            trial = study.ask()
            x = trial.suggest_float("x", -10, 10)
            y = trial.suggest_float("y", -10, 10)
            study.tell(trial, x * x + y * y)

    threads = [threading.Thread(target=client) for _ in range(a.threads)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = time.perf_counter() - t0
    n = per * a.threads
    print(json.dumps({"trials": n, "seconds": s, "trials_per_s": n / s}))
    os.unlink(path)
    os.rmdir(d)


if __name__ == "__main__":
    main()
