#!/usr/bin/python3
"""PyTorch CPU training-throughput baseline on Fashion-MNIST.

Models (batch 128, Adam lr 1e-3, float32, CrossEntropy):
  mlp: 784-256-256-10 ReLU
  cnn: Conv2d(1->32,3x3)+ReLU -> MaxPool2x2 -> Flatten -> Dense(64)+ReLU -> Dense(10)

Epoch 1 is the warm-up epoch; samples/s is the median over epochs 2..E of
60000 / (training-loop wall time of that epoch); evaluation is excluded from
timing. Test accuracy (10k test set) is printed after every epoch.

Threads: torch.set_num_threads(T) controls ATen/OpenMP only. This Debian torch
calls OpenBLAS (pthreads build) for Linear layers, and OpenBLAS keeps its own
thread count (default = nproc), so the script also limits OpenBLAS to
--blas-threads (default = T) via threadpoolctl. --blas-threads 0 = leave as-is.

Re-run (3 fresh processes, median + range):
  /usr/bin/python3 tests/bench/peers/torch_mlp.py --model mlp --threads 2 --epochs 5 --runs 3
  /usr/bin/python3 tests/bench/peers/torch_mlp.py --model mlp --threads 1 --epochs 3 --runs 3
  /usr/bin/python3 tests/bench/peers/torch_mlp.py --model cnn --threads 2 --epochs 2 --runs 3
  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 ... (force OpenBLAS kernel)
  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 ...    (stop libgomp spin-waiting, which fights OpenBLAS)
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENV_KEYS = ("OPENBLAS_CORETYPE", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS",
            "OPENBLAS_NUM_THREADS")


def vmrss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def one_run(args):
    import numpy as np
    import threadpoolctl
    import torch
    import torch.nn as nn

    sys.path.insert(0, HERE)
    import fmnist

    rss_import = vmrss_mib()
    torch.set_num_threads(args.threads)
    if args.blas_threads:
        threadpoolctl.threadpool_limits(limits=args.blas_threads, user_api="blas")
    pools = {d["internal_api"]: (d["num_threads"], d.get("architecture"))
             for d in threadpoolctl.threadpool_info()}
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    if args.flush_denormal:
        torch.set_flush_denormal(True)

    xtr, ytr, xte, yte = fmnist.load_float()
    xtr, ytr = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xte, yte = torch.from_numpy(xte), torch.from_numpy(yte)
    if args.model == "cnn":
        xtr, xte = xtr.view(-1, 1, 28, 28), xte.view(-1, 1, 28, 28)
        model = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))
    else:
        model = nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 10))
    rss_data = vmrss_mib()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)
    n, bs = len(xtr), args.batch

    def evaluate():
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(xte), 1000):
                correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
        model.train()
        return correct / len(xte)

    epoch_times, accs, losses = [], [], []
    for ep in range(args.epochs):
        perm = torch.randperm(n, generator=gen)
        t0 = time.perf_counter()
        tot = 0.0
        for i in range(0, n, bs):
            idx = perm[i:i + bs]
            xb, yb = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
        epoch_times.append(time.perf_counter() - t0)
        losses.append(tot / n)
        accs.append(evaluate())
        if not args.quiet:
            print(f"  epoch {ep + 1}: {epoch_times[-1]:.2f}s  {n / epoch_times[-1]:.0f} samples/s"
                  f"  train_loss {losses[-1]:.4f}  test_acc {accs[-1]:.4f}", file=sys.stderr)
    timed = epoch_times[1:] if len(epoch_times) > 1 else epoch_times
    return {
        "model": args.model, "threads": args.threads, "blas_threads": args.blas_threads,
        "pools": pools, "torch": torch.__version__,
        "flush_denormal": args.flush_denormal,
        "env": {k: os.environ.get(k, "<unset>") for k in ENV_KEYS},
        "epoch_s": epoch_times, "test_acc": accs, "train_loss": losses,
        "samples_per_s": n / statistics.median(timed),
        "rss_after_import_mib": rss_import, "rss_after_data_mib": rss_data,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def fmt_range(v, f="{:.0f}"):
    return f"{f.format(statistics.median(v))} [{f.format(min(v))}..{f.format(max(v))}]"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--blas-threads", type=int, default=None,
                   help="OpenBLAS threads (default = --threads; 0 = leave as-is)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", type=int, default=1, help="fresh processes; seed i for run i")
    p.add_argument("--json", default=None, help="append per-run JSON lines here")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--flush-denormal", action="store_true",
                   help="torch.set_flush_denormal(True) (FTZ/DAZ)")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.blas_threads is None:
        args.blas_threads = args.threads

    if args._child:
        print(json.dumps(one_run(args)))
        return

    results = []
    for r in range(args.runs):
        cmd = [sys.executable, os.path.abspath(__file__), "--_child",
               "--model", args.model, "--threads", str(args.threads),
               "--blas-threads", str(args.blas_threads), "--epochs", str(args.epochs),
               "--batch", str(args.batch), "--seed", str(args.seed + r)]
        if args.quiet:
            cmd.append("--quiet")
        if args.flush_denormal:
            cmd.append("--flush-denormal")
        print(f"run {r + 1}/{args.runs}: seed {args.seed + r}", file=sys.stderr)
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        results.append(res)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(res) + "\n")

    r0 = results[0]
    print(f"model={args.model} torch={r0['torch']} threads(torch)={args.threads} "
          f"pools={r0['pools']} flush_denormal={args.flush_denormal} runs={args.runs}")
    print("  env:", " ".join(f"{k}={v}" for k, v in r0["env"].items()))
    print("  samples/s (median over epochs 2..E, per run):",
          " ".join(f"{x['samples_per_s']:.0f}" for x in results))
    print("  samples/s median [min..max] over runs:", fmt_range([x["samples_per_s"] for x in results]))
    allep = [60000 / t for x in results for t in x["epoch_s"][1:]]
    if allep:
        print("  samples/s all timed epochs median [min..max]:", fmt_range(allep))
    print("  warm-up epoch samples/s:", fmt_range([60000 / x["epoch_s"][0] for x in results]))
    for e in range(args.epochs):
        print(f"  test_acc after epoch {e + 1}:", fmt_range([x["test_acc"][e] for x in results], "{:.4f}"))
    print("  RSS MiB after import / after data+model / peak:",
          fmt_range([x["rss_after_import_mib"] for x in results]), "/",
          fmt_range([x["rss_after_data_mib"] for x in results]), "/",
          fmt_range([x["peak_rss_mib"] for x in results]))


if __name__ == "__main__":
    main()
