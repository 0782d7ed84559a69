#!/usr/bin/python3
"""The PyTorch side of bench_engine's mixed_bf16 rows: the same models and
recipe as torch_mlp.py (Fashion-MNIST, batch 128, Adam 1e-3,
randperm each epoch, samples/s of the epochs after the first), trained under
torch.autocast("cpu", dtype=torch.bfloat16) - PyTorch's own mixed precision
on CPU (bf16 matmuls and convolutions through oneDNN, fp32 weights).

  OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 tests/bench/peers/torch_bf16.py \
      --model mlp|cnn --threads T [--epochs 2] [--flush-denormal]

Prints "samples/s median [min..max] over runs: X" like torch_mlp.py, and the
test accuracy after the last epoch.
"""
import argparse
import gzip
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn

FMNIST_DIR = os.environ.get("HPO_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split):
    x = read_idx(os.path.join(FMNIST_DIR, "%s-images-idx3-ubyte.gz" % split)).astype(np.float32) / 255.0
    y = read_idx(os.path.join(FMNIST_DIR, "%s-labels-idx1-ubyte.gz" % split)).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def model_of(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 13 * 13, 64),
                         nn.ReLU(), nn.Linear(64, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.flush_denormal:
        torch.set_flush_denormal(True)
    torch.manual_seed(0)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    if a.model == "cnn":
        xtr, xte = xtr.unsqueeze(1), xte.unsqueeze(1)
    m = model_of(a.model)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    rates = []
    for ep in range(a.epochs):
        m.train()
        order = torch.randperm(len(xtr))
        t0 = time.perf_counter()
        for i in range(0, len(xtr), 128):
            idx = order[i:i + 128]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = m(xtr[idx])
            lossf(out.float(), ytr[idx]).backward()
            opt.step()
        if ep > 0:
            rates.append(len(xtr) / (time.perf_counter() - t0))
    m.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        acc = (m(xte).float().argmax(1) == yte).float().mean().item()
    r = rates or [float("nan")]
    print("samples/s median [min..max] over runs: %.1f [%.1f..%.1f]" % (statistics.median(r), min(r), max(r)))
    print("test accuracy after %d epochs: %.4f" % (a.epochs, acc))


if __name__ == "__main__":
    main()
