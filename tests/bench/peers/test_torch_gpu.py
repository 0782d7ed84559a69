#!/usr/bin/python3
"""ctest bench.torch_gpu_peer_cpu: tests/bench/peers/torch_gpu.py on the CPU
(Debian's torch, a few batches of Fashion-MNIST) and the JSON lines it
prints: one per row and mode, the model it built from hpo's template has the
template's parameter count (counted here from the template, independently),
the figures are finite and positive, two epochs of Adam lower the training
loss and lift the test accuracy above chance; a mode the CPU lacks (CUDA
graphs), bf16 where PyTorch cannot run it here ("unsupported"), a template it cannot map (an SGD optimiser) and rows past the time
limit each give an error line while the other rows still run; the schedule
matches engine/optim.c's cosine with warm-up. Exit 77 (skipped) without
PyTorch."""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PEER = os.path.join(HERE, "torch_gpu.py")
BATCH, LIMIT, STEPS = 64, 512, 4


def template_params(t):
    """parameters of an hpo template on 28x28x1 inputs (dense, conv2d 'valid', maxpool2d, flatten)"""
    shape, n = (28, 28, 1), 0
    for spec in t["layers"]:
        (kind, p), = spec.items()
        if kind == "flatten":
            shape = (shape[0] * shape[1] * shape[2],) if len(shape) == 3 else shape
        elif kind == "dense":
            n += shape[-1] * p["units"] + p["units"]
            shape = (p["units"],)
        elif kind == "conv2d":
            k = p.get("kernel", 3)
            n += k * k * shape[2] * p["filters"] + p["filters"]
            shape = (shape[0] - k + 1, shape[1] - k + 1, p["filters"])
        elif kind == "maxpool2d":
            q = p.get("pool", 2)
            shape = (shape[0] // q, shape[1] // q, shape[2])
    return n


def run(args):
    r = subprocess.run([sys.executable, PEER, "--device", "cpu"] + args, stdout=subprocess.PIPE, text=True,
                       timeout=240)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    return r.returncode, lines


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        check.failed = True


check.failed = False


def main():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("skipped: no PyTorch (%s)" % e)
        return 77
    sys.path.insert(0, HERE)
    import torch_gpu

    # the schedule: engine/optim.c eng_schedule_lr, cosine over T steps with a linear warm-up
    t = {"optimizer": {"learning_rate": 0.01}, "schedule": {"name": "cosine", "warmup_steps": 4}}
    for step, want in ((0, 0.01 * 0.25), (3, 0.01 * 0.5 * (1 + math.cos(math.pi * 3 / 100))),
                       (50, 0.005), (100, 0.0), (150, 0.0)):
        got = torch_gpu.lr_at(t, step, 10, 100)
        check(abs(got - want) < 1e-12, "lr_at step %d = %.6g (want %.6g)" % (step, got, want))

    models = {n: os.path.join(ROOT, "engine", "models", n + ".json") for n in ("mlp", "cnn")}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"layers": [{"flatten": {}}, {"dense": {"units": 10, "activation": "softmax"}}],
                   "optimizer": {"name": "sgd"}}, f)
        models["sgd"] = f.name
    try:
        rc, lines = run(sum((["--model", "%s=%s" % (n, p)] for n, p in models.items()), []) +
                        ["--batches", str(BATCH), "--precisions", "fp32,mixed_bf16", "--modes", "eager,graph",
                         "--limit", str(LIMIT), "--max-batches", str(STEPS), "--gemm-peak", "128"])
    finally:
        os.unlink(models["sgd"])
    check(rc == 0, "the peer exits 0 (got %d)" % rc)
    info = [x["info"] for x in lines if "info" in x]
    check(len(info) == 1 and info[0]["device"] == "cpu" and info[0]["torch"], "one info line: %s" % info)
    peak = [x for x in lines if "gemm_bf16_n" in x]
    # where PyTorch cannot multiply bf16 on this CPU (its oneDNN capped
    # below AVX-512), the rate and the mixed_bf16 rows say "unsupported"
    no_bf16 = len(peak) == 1 and peak[0].get("error", "").startswith("unsupported")
    if no_bf16:
        print("note: %s" % peak[0]["error"])
    check(len(peak) == 1 and (no_bf16 or peak[0].get("gemm_bf16_tflops", 0) > 0), "the bf16 matmul rate: %s" % peak)
    rows = {(x["row"], x["precision"], x["mode"]): x for x in lines if "row" in x}
    check(len(rows) == 12 and len([x for x in lines if "row" in x]) == 12,
          "one line per row and mode: %d" % len(rows))
    for (name, prec, mode), x in sorted(rows.items()):
        what = "%s %s %s" % (name, prec, mode)
        if mode == "graph" or name == "sgd":
            check("error" in x and "samples_per_s" not in x, "%s: an error line: %s" % (what, x.get("error")))
            continue
        if prec == "mixed_bf16" and no_bf16:
            check(x.get("error", "").startswith("unsupported"), "%s: unsupported here: %s" % (what, x.get("error")))
            continue
        with open(models[name]) as f:
            want = template_params(json.load(f))
        check("error" not in x, "%s: no error (%s)" % (what, x.get("error")))
        if "error" in x:
            continue
        check(x["params"] == want, "%s: %d parameters, the template's %d" % (what, x["params"], want))
        check(x["batch"] == BATCH and x["steps_per_epoch"] == STEPS, "%s: batch %d, %d steps an epoch" %
              (what, x["batch"], x["steps_per_epoch"]))
        check(math.isfinite(x["samples_per_s"]) and x["samples_per_s"] > 0 and len(x["epoch_s"]) == 2 and
              all(s > 0 for s in x["epoch_s"]), "%s: %.0f samples/s, epochs %s s" %
              (what, x["samples_per_s"], x["epoch_s"]))
        l0, l1 = x["train_loss"]
        check(math.isfinite(l0) and l1 < l0, "%s: training loss %.4f -> %.4f" % (what, l0, l1))
        check(0.2 < x["test_acc"] <= 1 and 0 <= x["train_acc"] <= 1,
              "%s: test accuracy %.3f (chance 0.1), train %.3f" % (what, x["test_acc"], x["train_acc"]))

    rc, lines = run(["--model", "mlp=" + models["mlp"], "--batches", "32,64", "--precisions", "fp32",
                     "--time-limit", "0.001", "--limit", str(LIMIT)])
    rows = [x for x in lines if "row" in x]
    check(rc == 0 and len(rows) == 2 and all("time limit" in x.get("error", "") for x in rows),
          "past the time limit every row says so: %s" % [x.get("error") for x in rows])
    print("FAILED" if check.failed else "all checks passed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
