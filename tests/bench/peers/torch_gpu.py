#!/usr/bin/python3
"""The PyTorch side of bench_gpu_engine: hpo's model templates trained by
PyTorch on one device at its best, samples/s over a timed epoch after a
warm-up one, one JSON line per (row, mode) on stdout as each finishes.

The model is built from hpo's own template (engine/models/*.json: flatten,
dense, conv2d, maxpool2d, dropout, activation layers), with the template's
optimiser (Adam: learning rate, betas, epsilon, hpo's defaults otherwise) and
schedule (constant or cosine over the run's steps, warm-up included) and
softmax + cross-entropy fused as CrossEntropyLoss on the logits, so both
sides train the same network with the same recipe. Fashion-MNIST
($HPO_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist) is put on the
device once as float32 in [0, 1]; each epoch draws a random order on the
device and gathers its batches there (the last one partial, as hpo does);
the loss and correct-count sums stay on the device until the epoch ends.
mixed_bf16 is torch.autocast(dtype=torch.bfloat16) around the forward pass
(f32 weights, loss in f32); the CNN runs channels-last.

Modes (each row is trained afresh in every mode asked for):
  eager    plain PyTorch, fused Adam (on CUDA)
  graph    the whole training step (forward, backward, fused capturable Adam
           with the learning rate in a device tensor, the metric sums)
           captured once in a CUDA graph per batch shape and replayed; the
           batch gather runs before each replay (CUDA only)
  compile  torch.compile(model, mode=--compile-mode, dynamic=False) (default
           "max-autotune": Triton GEMM autotuning and CUDA graphs), fused
           Adam; its compile time is in the warm-up epoch (reported)
Every eager and graph row runs first; compile rows follow in the order given
while --time-limit allows (each is stopped with SIGALRM at the limit); a row
not run or failed is a JSON line with "error" saying why, never a missing
line. --gemm-peak N: also the bf16 N^3 matmul rate on random data (median
of 10 timed products after 3 warm-ups, device events).

  torch_gpu.py --model mlp=engine/models/mlp.json [--model NAME=PATH ...]
               [--batches 128,512] [--precisions fp32,mixed_bf16]
               [--modes eager,graph,compile] [--compile-mode max-autotune]
               [--device cuda|cpu] [--epochs 2] [--limit N rows] [--max-batches N]
               [--time-limit S] [--gemm-peak 8192] [--seed 0]
On the CPU (Debian's torch 1.13, no torch.compile, no CUDA graphs) only
eager runs; the others answer with an error line. tests/bench/peers/
test_torch_gpu.py runs it so for a few batches and checks the lines.
"""
import argparse
import gzip
import json
import math
import os
import signal
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # the benchmark reports it and skips (77)
    print(json.dumps({"error": "no PyTorch here: %s (Debian: python3-torch)" % e}), flush=True)
    sys.exit(77)

FMNIST_DIR = os.environ.get("HPO_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
HPO_ADAM = {"learning_rate": 1e-3, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}  # engine/optim.c defaults


def read_idx(path):
    """an IDX file, gzipped (Debian's) or not (tests/gpu/bundle.sh's copy)"""
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rb") as f:
            data = f.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, limit, device):
    x = read_idx(os.path.join(FMNIST_DIR, "%s-images-idx3-ubyte" % split))
    y = read_idx(os.path.join(FMNIST_DIR, "%s-labels-idx1-ubyte" % split))
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.astype(np.float32) / 255.0).reshape(len(x), 28, 28, 1)
    return x.to(device), torch.from_numpy(y.astype(np.int64)).to(device)


# ---- the model of an hpo template ----

ACTS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": lambda: nn.GELU(approximate="tanh"),
        "elu": nn.ELU, "selu": nn.SELU, "swish": nn.SiLU, "silu": nn.SiLU, "leaky_relu": lambda: nn.LeakyReLU(0.2)}


def act_layer(name):
    if name in (None, "linear", "none", "softmax"):  # softmax: fused into the loss (the last layer only)
        return None
    if name not in ACTS:
        raise ValueError("activation %r has no PyTorch counterpart here" % name)
    return ACTS[name]()


def build(template):
    """(nn.Sequential taking [N, 28, 28, 1] images, parameter count, uses conv)"""
    layers, shape, conv = [], (28, 28, 1), False  # hpo's HWC
    specs = template["layers"]
    for i, spec in enumerate(specs):
        (kind, p), = spec.items()
        last = i == len(specs) - 1
        act = p.get("activation")
        if act == "softmax" and not last:
            raise ValueError("softmax is supported on the last layer only")
        if kind == "flatten":
            layers.append(nn.Flatten())
            shape = (int(np.prod(shape)),)
        elif kind == "dense":
            layers.append(nn.Linear(shape[-1], p["units"]))
            shape = shape[:-1] + (p["units"],)
        elif kind == "conv2d":
            conv = True
            k, s = p.get("kernel", 3), p.get("stride", 1)
            k = (k, k) if isinstance(k, int) else tuple(k)
            s = (s, s) if isinstance(s, int) else tuple(s)
            pad = p.get("padding", "valid")
            if pad == "same" and s != (1, 1):
                raise ValueError("padding 'same' with a stride is not mapped to PyTorch here")
            layers.append(nn.Conv2d(shape[2], p["filters"], k, stride=s, padding=pad))
            h = shape[0] if pad == "same" else (shape[0] - k[0]) // s[0] + 1
            w = shape[1] if pad == "same" else (shape[1] - k[1]) // s[1] + 1
            shape = (h, w, p["filters"])
        elif kind == "maxpool2d":
            q = p.get("pool", 2)
            layers.append(nn.MaxPool2d(q))
            shape = (shape[0] // q, shape[1] // q, shape[2])
        elif kind == "dropout":
            layers.append(nn.Dropout(p.get("rate", 0.5)))
        elif kind == "activation":
            act = p.get("activation", p.get("name"))
        else:
            raise ValueError("layer kind %r is not mapped to PyTorch here" % kind)
        a = act_layer(act) if kind != "flatten" else None
        if a is not None:
            layers.append(a)
    if conv:  # the batch comes as hpo's NHWC; the convolutions take it as NCHW in channels-last memory
        layers.insert(0, Permute())
    m = nn.Sequential(*layers)
    return m, sum(t.numel() for t in m.parameters()), conv


class Permute(nn.Module):
    def forward(self, x):
        return x.permute(0, 3, 1, 2)


def lr_at(template, step, spe, total):
    """engine/optim.c eng_schedule_lr for constant and cosine (with warm-up)"""
    opt = template.get("optimizer", {})
    base = (opt.get("learning_rate", HPO_ADAM["learning_rate"]) if isinstance(opt, dict)
            else HPO_ADAM["learning_rate"])
    s = template.get("schedule", "constant")
    s = {"name": s} if isinstance(s, str) else s
    lr = base
    if s.get("name") == "cosine":
        T = s.get("cosine_steps") or max(total, 1)
        t = min(step, T)
        a = s.get("alpha", 0.0)
        lr = base * (a + (1 - a) * 0.5 * (1 + math.cos(math.pi * t / T)))
    elif s.get("name", "constant") != "constant":
        raise ValueError("schedule %r is not mapped to PyTorch here" % s.get("name"))
    w = s.get("warmup_steps") or s.get("warmup_epochs", 0) * spe
    if w > 0 and step < w:
        lr *= (step + 1.0) / w
    return lr


def adam_args(template):
    o = template.get("optimizer", "adam")
    o = {"name": o} if isinstance(o, str) else o
    if o.get("name", "adam") != "adam":
        raise ValueError("optimizer %r is not mapped to PyTorch here" % o.get("name"))
    get = lambda k: o.get(k, HPO_ADAM[k])
    return {"betas": (get("beta_1"), get("beta_2")), "eps": get("epsilon")}


# ---- one row in one mode ----

class WithLoss(nn.Module):
    """(mean cross-entropy in f32, logits) of a batch: what is compiled or captured"""

    def __init__(self, model, bf16, cache):
        super().__init__()
        self.model, self.bf16, self.cache = model, bf16, cache
        self.lossf = nn.CrossEntropyLoss()

    def forward(self, x, y):
        if self.bf16:
            with torch.autocast(x.device.type, dtype=torch.bfloat16, cache_enabled=self.cache):
                z = self.model(x)
        else:
            z = self.model(x)
        z = z.float()
        return self.lossf(z, y), z


class Run:
    def __init__(self, a, name, template, batch, prec, mode, data):
        self.a, self.name, self.t, self.bs, self.prec, self.mode = a, name, template, batch, prec, mode
        self.dev = torch.device(a.device)
        self.xtr, self.ytr, self.xte, self.yte = data
        torch.manual_seed(a.seed)
        self.model, self.nparams, self.conv = build(template)
        self.model.to(self.dev)
        if self.conv:  # the images' NHWC storage is already channels-last: Permute makes no copy
            self.model.to(memory_format=torch.channels_last)
        self.n = len(self.xtr)
        self.spe = (self.n + batch - 1) // batch
        self.steps_per_epoch = min(self.spe, a.max_batches) if a.max_batches else self.spe
        self.total = self.spe * a.epochs
        self.step = 0
        cuda = self.dev.type == "cuda"
        # autocast's weight cache must be off under graph capture (PyTorch's CUDA graph notes)
        self.loss_of = WithLoss(self.model, prec == "mixed_bf16", mode != "graph")
        kw = adam_args(template)
        lr0 = lr_at(template, 0, self.spe, self.total)
        params = list(self.model.parameters())
        if mode == "graph":  # the learning rate lives on the device, read by the captured step
            self.lr = torch.tensor(lr0, device=self.dev)
            try:
                self.opt = torch.optim.Adam(params, lr=self.lr, fused=True, capturable=True, **kw)
                self.opt_desc = "Adam(fused, capturable, tensor lr)"
            except (RuntimeError, ValueError, TypeError) as e:
                self.opt = torch.optim.Adam(params, lr=self.lr, foreach=True, capturable=True, **kw)
                self.opt_desc = "Adam(foreach, capturable, tensor lr; fused refused: %s)" % e
        elif cuda:
            self.opt = torch.optim.Adam(params, lr=lr0, fused=True, **kw)
            self.opt_desc = "Adam(fused)"
        else:
            self.opt = torch.optim.Adam(params, lr=lr0, **kw)
            self.opt_desc = "Adam"
        self.step_loss = self.loss_of
        if mode == "compile":  # a fresh start per row: dynamo's cache of 8 graphs per function would
            torch._dynamo.reset()  # otherwise fill up over the rows and later rows run eagerly, silently
            self.graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            self.step_loss = torch.compile(self.loss_of, mode=a.compile_mode, dynamic=False)
        self.mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None) \
            if mode == "compile" else None
        self.sums = torch.zeros(2, device=self.dev)  # loss sum, correct count
        self.graphs = {}

    def batch(self, order, i):
        idx = order[i * self.bs:(i + 1) * self.bs]
        return self.xtr.index_select(0, idx), self.ytr.index_select(0, idx)

    def train_step(self, x, y):
        """one eager (or compiled) step, its sums added on the device"""
        self.opt.zero_grad(set_to_none=True)
        if self.mark_step:
            self.mark_step()
        loss, z = self.step_loss(x, y)
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            self.sums[0] += loss.detach() * len(y)
            self.sums[1] += (z.detach().argmax(1) == y).sum()

    def eager_step(self, x, y):
        for g in self.opt.param_groups:
            g["lr"] = lr_at(self.t, self.step, self.spe, self.total)
        self.train_step(x, y)

    def graph_step(self, x, y):
        """replays the captured step of this batch shape; the first step of a
        shape trains eagerly on a side stream (which also creates the
        optimiser state outside the graph) and then captures the next ones"""
        B = len(y)
        self.lr.fill_(lr_at(self.t, self.step, self.spe, self.total))
        if B in self.graphs:
            g, sx, sy = self.graphs[B]
            sx.copy_(x)
            sy.copy_(y)
            g.replay()
            return
        sx, sy = x.clone(), y.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            self.train_step(sx, sy)
            self.opt.zero_grad(set_to_none=True)  # the captured backward writes fresh gradients
            with torch.cuda.graph(g):
                self.train_step(sx, sy)
        torch.cuda.current_stream().wait_stream(s)
        self.graphs[B] = (g, sx, sy)

    def epoch(self, ep):
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(self.a.seed * 1000 + ep)
        order = torch.randperm(self.n, device=self.dev, generator=gen)
        self.sums.zero_()
        step = self.graph_step if self.mode == "graph" else self.eager_step
        self.model.train()
        self.sync()
        t0 = time.perf_counter()
        rows = 0
        for i in range(self.steps_per_epoch):
            x, y = self.batch(order, i)
            step(x, y)
            self.step += 1
            rows += len(y)
        self.sync()
        secs = time.perf_counter() - t0
        loss, correct = self.sums.tolist()
        return secs, rows, loss / rows, correct / rows

    def sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize()

    def test_accuracy(self):
        """on the uncompiled module (eval mode would be another compile)"""
        self.model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(self.xte), 1000):
                _, z = self.loss_of(self.xte[i:i + 1000], self.yte[i:i + 1000])
                correct += (z.argmax(1) == self.yte[i:i + 1000]).sum().item()
        return correct / len(self.xte)

    def run(self):
        out = {"row": self.name, "batch": self.bs, "precision": self.prec, "mode": self.mode,
               "params": self.nparams, "optimizer": self.opt_desc}
        if self.mode == "compile":
            out["compile_mode"] = self.a.compile_mode
        epochs = [self.epoch(ep) for ep in range(self.a.epochs)]
        timed = epochs[1:] or epochs
        secs = sum(e[0] for e in timed)
        rows = sum(e[1] for e in timed)
        out.update({"samples_per_s": rows / secs, "warmup_s": epochs[0][0], "epoch_s": [e[0] for e in epochs],
                    "train_loss": [e[2] for e in epochs], "train_acc": epochs[-1][3],
                    "test_acc": self.test_accuracy(), "steps_per_epoch": self.steps_per_epoch})
        if self.mode == "compile":  # graphs dynamo compiled for this row (0 would mean it ran eagerly)
            out["compiled_graphs"] = torch._dynamo.utils.counters["stats"]["unique_graphs"] - self.graphs_before
        if self.mode == "graph":
            out["cuda_graphs"] = len(self.graphs)
        return out


# ---- the driver ----

class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout()


def gemm_peak(n, device):
    """bf16 n^3 matmul rate (TFLOP/s), random inputs, median of 10"""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    if device == "cpu":
        times = []
        for r in range(4):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            if r:
                times.append(time.perf_counter() - t0)
    else:
        for _ in range(3):
            torch.matmul(a, b)
        times = []
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.matmul(a, b)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
    times.sort()
    return 2.0 * n ** 3 / times[len(times) // 2] / 1e12


def bf16_unsupported(device):
    """why PyTorch cannot multiply bf16 matrices here (its oneDNN capped below
    AVX-512 by ONEDNN_MAX_CPU_ISA, say), or None"""
    try:
        x = torch.ones(128, 128, device=device, dtype=torch.bfloat16)  # small ones skip oneDNN
        torch.matmul(x, x)
        return None
    except RuntimeError as e:
        return "unsupported: PyTorch %s cannot multiply bf16 on this %s (%s)" % (
            torch.__version__, device, str(e).splitlines()[0] if str(e) else type(e).__name__)


def emit(d):
    print(json.dumps(d), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True, help="NAME=PATH of an hpo model template")
    p.add_argument("--batches", default="128,512")
    p.add_argument("--precisions", default="fp32,mixed_bf16")
    p.add_argument("--modes", default=None, help="default: eager,graph,compile on cuda, eager on cpu")
    p.add_argument("--compile-mode", default="max-autotune")
    p.add_argument("--device", default="cuda")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="first N training (and test) rows only")
    p.add_argument("--max-batches", type=int, default=0, help="at most N steps per epoch")
    p.add_argument("--time-limit", type=float, default=0, help="seconds; 0: none")
    p.add_argument("--gemm-peak", type=int, default=0, help="also the bf16 N^3 matmul rate")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    start = time.monotonic()
    if a.device == "cuda" and not torch.cuda.is_available():
        emit({"error": "no CUDA device visible to PyTorch %s" % torch.__version__})
        return 77
    info = {"torch": torch.__version__, "device": a.device, "python": sys.version.split()[0]}
    if a.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as on hpo's side (no TF32)
        torch.backends.cudnn.allow_tf32 = False
    emit({"info": info})
    no_bf16 = bf16_unsupported(a.device)
    if a.gemm_peak and no_bf16:
        emit({"gemm_bf16_n": a.gemm_peak, "error": no_bf16})
    elif a.gemm_peak:
        emit({"gemm_bf16_n": a.gemm_peak, "gemm_bf16_tflops": gemm_peak(a.gemm_peak, a.device)})
    modes = (a.modes or ("eager,graph,compile" if a.device == "cuda" else "eager")).split(",")
    templates = []
    for spec in a.model:
        name, _, path = spec.partition("=")
        with open(path) as f:
            templates.append((name, json.load(f)))
    xtr, ytr = load("train", a.limit, a.device)
    xte, yte = load("t10k", a.limit, a.device)
    data = (xtr, ytr, xte, yte)
    rows = [(n, t, int(b), pr) for n, t in templates for b in a.batches.split(",") for pr in a.precisions.split(",")]
    order = [m for m in ("eager", "graph") if m in modes] + [m for m in modes if m not in ("eager", "graph")]
    signal.signal(signal.SIGALRM, on_alarm)
    for mode in order:
        for name, t, b, pr in rows:
            head = {"row": name, "batch": b, "precision": pr, "mode": mode}
            left = a.time_limit - (time.monotonic() - start) if a.time_limit else 0
            if a.time_limit and left < 1:
                emit(dict(head, error="not run: the peer's time limit (%g s) was reached" % a.time_limit))
                continue
            if mode not in ("eager", "graph", "compile"):
                emit(dict(head, error="unknown mode"))
                continue
            if mode == "graph" and a.device != "cuda":
                emit(dict(head, error="CUDA graphs need a CUDA device"))
                continue
            if pr == "mixed_bf16" and no_bf16:
                emit(dict(head, error=no_bf16))
                continue
            if mode == "compile" and not hasattr(torch, "compile"):
                emit(dict(head, error="torch %s has no torch.compile" % torch.__version__))
                continue
            if left:
                signal.alarm(max(1, int(left)))
            try:
                emit(Run(a, name, t, b, pr, mode, data).run())
            except Timeout:
                emit(dict(head, error="stopped at the peer's time limit (%g s)" % a.time_limit))
            except Exception as e:  # a failed row is reported, the others still run
                emit(dict(head, error="%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")))
            finally:
                signal.alarm(0)
                if a.device == "cuda":
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # no wait for torch.compile's worker pools (one stopped at the time limit may still be busy)
