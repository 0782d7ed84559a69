#!/usr/bin/python3
"""The peer side of bench_e2e: Optuna 3.1 (TPE + HyperbandPruner) tuning a
PyTorch 1.13 MLP on Fashion-MNIST, the same search hpod runs in the same
benchmark:

  layers int 1..3, units int 32..512 (log), lr 1e-4..1e-2 (log), dropout 0..0.5;
  Adam, batch 128, at most --epochs epochs (resource = epoch, validation
  accuracy reported after each), HyperbandPruner(min 1, max --epochs, eta 3),
  TPESampler(seed), --trials trials, --threads threads.

Data, identical to hpod's {"name": "fashion-mnist", "limit": L,
"validation_split": V}: validation = the last V rows of the 60,000 training
images, training = the first L rows. Inputs /255.

PyTorch at its best here (the settings bench_engine gives its PyTorch rows;
without PASSIVE, libgomp's spin-waiting threads fight OpenBLAS's on 2 cores):
run with OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE; flush-to-zero is
set below. --device cuda: the model and both splits on the GPU (the
batches indexed there), as hpod's cuda: slots keep them.
The IDX files are read gzipped (Debian's) or raw (a device bundle's).
Prints one JSON line.
"""
import argparse
import gzip
import json
import os
import time
import warnings

import numpy as np
import optuna
import torch
import torch.nn as nn

FMNIST_DIR = os.environ.get("HPO_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    if not os.path.exists(path) and path.endswith(".gz"):
        with open(path[:-3], "rb") as f:
            data = f.read()
    else:
        with gzip.open(path, "rb") as f:
            data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--epochs", type=int, default=9)
    p.add_argument("--limit", type=int, default=10000)
    p.add_argument("--validation", type=int, default=5000)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    t_begin = time.perf_counter()
    x = read_idx(os.path.join(FMNIST_DIR, "train-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255.0
    y = read_idx(os.path.join(FMNIST_DIR, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    n = len(x)
    dev = torch.device(a.device)
    xt, yt = torch.from_numpy(x[:a.limit].copy()).to(dev), torch.from_numpy(y[:a.limit].copy()).to(dev)
    xv, yv = torch.from_numpy(x[n - a.validation:].copy()).to(dev), torch.from_numpy(y[n - a.validation:].copy()).to(dev)
    epochs_trained = [0]

    def objective(trial):
        layers = trial.suggest_int("layers", 1, 3)
        units = trial.suggest_int("units", 32, 512, log=True)
        lr = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
        dropout = trial.suggest_float("dropout", 0.0, 0.5)
        torch.manual_seed(a.seed * 1000 + trial.number)
        mods, width = [], 784
        for _ in range(layers):
            mods += [nn.Linear(width, units), nn.ReLU(), nn.Dropout(dropout)]
            width = units
        model = nn.Sequential(*mods, nn.Linear(width, 10)).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        lossf = nn.CrossEntropyLoss()
        gen = torch.Generator().manual_seed(a.seed * 1000 + trial.number)
        best = 0.0
        for ep in range(1, a.epochs + 1):
            model.train()
            order = torch.randperm(len(xt), generator=gen).to(dev)
            for i in range(0, len(xt), 128):
                idx = order[i:i + 128]
                opt.zero_grad(set_to_none=True)
                lossf(model(xt[idx]), yt[idx]).backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                acc = (model(xv).argmax(1) == yv).float().mean().item()
            epochs_trained[0] += 1
            best = max(best, acc)
            trial.report(acc, ep)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return best

    study = optuna.create_study(study_name="e2e-seed%d" % a.seed, direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=a.seed),
                                pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=a.epochs,
                                                                      reduction_factor=3))
    t0 = time.perf_counter()
    study.optimize(objective, n_trials=a.trials)
    wall = time.perf_counter() - t0
    states = [t.state.name for t in study.trials]
    print(json.dumps({"wall_s": wall, "wall_with_load_s": time.perf_counter() - t_begin,
                      "best_val_acc": study.best_value, "best_params": study.best_params,
                      "epochs": epochs_trained[0], "complete": states.count("COMPLETE"),
                      "pruned": states.count("PRUNED"), "threads": a.threads, "device": a.device,
                      "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
                      "torch": torch.__version__, "optuna": optuna.__version__}))


if __name__ == "__main__":
    main()
