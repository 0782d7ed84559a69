"""A model's weights used outside hpod (issue 17): the safetensors file of
GET /models/{id}/weights holds everything needed to reproduce POST
/models/{id}/predict elsewhere: the expanded template (layers), the tensors
(dense weights [in, out]), "input_scale" (what a raw input is multiplied
by first) and "classes" (class k's name).

Two models trained by a real hpod: an MLP on Fashion-MNIST (raw 0..255
pixels, input_scale 1/255; predicted on 32 images of the test file) and an
MLP on a CSV of named classes (input_scale 1; predicted with labels). Each
is rebuilt from its file alone by a forward pass written here with the
standard library (always), and by PyTorch (torch.nn.Sequential of Linear
and activations, when torch can be imported; deps.sh --bench installs it),
and must give /predict's probabilities (within 1e-4, max difference
printed), classes and labels; fed the raw pixels without input_scale, the
image model's probabilities are far from /predict's (the scaling is needed,
and stated)."""
import gzip
import json
import math
import struct
import urllib.request

from hpod import Checks, Hpod, parse_args, wait_for
from test_datasets import upload
from test_named_classes import SPECIES, iris_like

FMNIST_TEST = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
S = "/api/v1/studies"


# ---- the file --------------------------------------------------------------
def read_safetensors(raw):
    """(metadata dict, {name: (shape, flat list of floats)}) of a safetensors file."""
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", t
        lo, hi = t["data_offsets"]
        tensors[name] = (t["shape"], list(struct.unpack("<%df" % ((hi - lo) // 4), data[lo:hi])))
    return meta, tensors


def layers_of(meta):
    """The expanded template's layers as (path, kind, options), repeats unrolled
    as the engine names them (layers[i] in order)."""
    out = []
    for i, layer in enumerate(json.loads(meta["template"])["layers"]):
        (kind, opts), = layer.items()
        out.append(("layers[%d]" % i, kind, opts))
    return out


# ---- a forward pass with the standard library ------------------------------
def activate(row, name):
    if name in (None, "linear", "none"):
        return row
    if name == "relu":
        return [max(0.0, v) for v in row]
    if name == "tanh":
        return [math.tanh(v) for v in row]
    if name == "sigmoid":
        return [1 / (1 + math.exp(-v)) for v in row]
    if name == "softmax":
        m = max(row)
        e = [math.exp(v - m) for v in row]
        return [v / sum(e) for v in e]
    raise ValueError("activation %r: not written here" % name)


def forward_stdlib(meta, tensors, rows, scale):
    out = []
    for x in rows:
        x = [v * scale for v in x]
        for path, kind, opts in layers_of(meta):
            if kind == "dense":
                (n_in, n_out), w = tensors[path + ".dense.weight"]
                b = tensors[path + ".dense.bias"][1]
                x = activate([b[j] + sum(x[i] * w[i * n_out + j] for i in range(n_in)) for j in range(n_out)],
                             opts.get("activation"))
            elif kind == "activation":
                x = activate(x, opts if isinstance(opts, str) else opts.get("name"))
            elif kind not in ("flatten", "dropout"):  # eval mode: dropout passes through
                raise ValueError("layer %r: not written here" % kind)
        out.append(x)
    return out


# ---- the same with PyTorch -------------------------------------------------
def forward_torch(torch, meta, tensors, rows, scale):
    acts = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid,
            "softmax": lambda: torch.nn.Softmax(dim=1)}
    mods = []
    for path, kind, opts in layers_of(meta):
        if kind == "dense":
            (n_in, n_out), w = tensors[path + ".dense.weight"]
            lin = torch.nn.Linear(n_in, n_out)
            with torch.no_grad():  # the file is [in, out] (y = x W + b); torch keeps [out, in]
                lin.weight.copy_(torch.tensor(w, dtype=torch.float32).reshape(n_in, n_out).t())
                lin.bias.copy_(torch.tensor(tensors[path + ".dense.bias"][1], dtype=torch.float32))
            mods.append(lin)
            if opts.get("activation") not in (None, "linear", "none"):
                mods.append(acts[opts["activation"]]())
        elif kind == "dropout":
            mods.append(torch.nn.Dropout(opts["rate"]))
        elif kind == "flatten":
            mods.append(torch.nn.Flatten())
        else:
            raise ValueError("layer %r: not written here" % kind)
    net = torch.nn.Sequential(*mods).eval()
    with torch.no_grad():
        return net(torch.tensor(rows, dtype=torch.float32) * scale).tolist()


# ---- hpod ------------------------------------------------------------------
def train_model(hp, spec):
    """Runs a one-trial study and makes a model of its trial: (model id, its weights file)."""
    sid = hp.ok("POST", S, spec)["id"]
    wait_for(lambda: hp.ok("GET", S + "/%d" % sid)["state"] == "complete", 180)
    trial = hp.ok("GET", S + "/%d/trials" % sid)["trials"][0]
    mid = hp.ok("POST", "/api/v1/trials/%d/model" % trial["id"], {})["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % mid)["state"] in ("complete", "failed"), 120)
    assert hp.ok("GET", "/api/v1/models/%d" % mid)["state"] == "complete"
    with urllib.request.urlopen(hp.url + "/api/v1/models/%d/weights" % mid, timeout=60) as r:
        return mid, r.read()


def fmnist_rows(n):
    with gzip.open(FMNIST_TEST, "rb") as f:
        magic, count, h, w = struct.unpack(">IIII", f.read(16))
        assert magic == 2051 and count >= n
        return [list(f.read(h * w)) for _ in range(n)]


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)


def compare(c, what, got, predicted):
    diff = max(abs(a - b) for g, p in zip(got, predicted) for a, b in zip(g, p))
    same = [argmax(g) for g in got] == [argmax(p) for p in predicted]
    print("%s: max |difference| from /predict %.3g over %d rows" % (what, diff, len(got)))
    c.check(len(got) == len(predicted) and diff < 1e-4 and same,
            "%s reproduces /predict (max difference %.3g, classes equal: %s)" % (what, diff, same))


def check_model(c, hp, name, mid, raw, rows, want_scale, want_classes):
    meta, tensors = read_safetensors(raw)
    scale = float(meta["input_scale"])
    c.check(abs(scale - want_scale) < 1e-9 and json.loads(meta.get("classes", "null")) == want_classes,
            "%s: the file states input_scale %s and classes %s" % (name, meta["input_scale"], meta.get("classes")))
    pred = hp.ok("POST", "/api/v1/models/%d/predict" % mid, {"inputs": rows})
    compare(c, "%s, standard library" % name, forward_stdlib(meta, tensors, rows, scale), pred["predictions"])
    if want_classes:
        labels = [json.loads(meta["classes"])[argmax(p)] for p in forward_stdlib(meta, tensors, rows, scale)]
        c.check(labels == pred["labels"], "%s: the file's classes name /predict's labels (%s)" % (name, labels[:3]))
    try:
        import torch
    except ImportError as e:
        print("SKIP (PyTorch): torch cannot be imported (%s); the standard-library pass stands" % e)
        return meta, tensors, pred
    compare(c, "%s, PyTorch %s" % (name, torch.__version__), forward_torch(torch, meta, tensors, rows, scale),
            pred["predictions"])
    return meta, tensors, pred


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        mlp = {"model": {"template": "mlp"}, "objective": {"metric": "val_accuracy"},
               "space": {"layers": {"type": "int", "low": 2, "high": 2}},
               "tuner": {"algorithm": "random", "seed": 4, "max_trials": 1}}
        mid, raw = train_model(hp, dict(mlp, name="fmnist-weights",
                                        dataset={"name": "fashion-mnist", "limit": 1200, "validation_split": 300},
                                        training={"max_epochs": 2, "batch_size": 64}))
        rows = fmnist_rows(32)
        meta, tensors, pred = check_model(c, hp, "Fashion-MNIST MLP", mid, raw, rows, 1 / 255, None)
        unscaled = forward_stdlib(meta, tensors, rows, 1.0)
        off = max(abs(a - b) for u, p in zip(unscaled, pred["predictions"]) for a, b in zip(u, p))
        wrong = sum(argmax(u) != k for u, k in zip(unscaled, pred["classes"]))
        print("without input_scale: max |difference| from /predict %.3g, %d of %d classes differ" % (off, wrong, len(rows)))
        c.check(off > 0.1, "raw pixels without input_scale do not reproduce /predict (max difference %.3g)" % off)

        st, ds = upload(hp, [("name", "iris", None), ("format", "csv", None), ("label_column", "species", None),
                             ("file", iris_like(), "iris.csv")])
        c.check(st == 201, "the CSV of named classes uploads (%s)" % st)
        mid, raw = train_model(hp, dict(mlp, name="iris-weights", dataset={"name": "iris", "validation_split": 0.2},
                                        training={"max_epochs": 10, "batch_size": 16}))
        rows = [[0.0, 0.1, 0.0, -0.1], [2.0, 2.1, 1.9, 2.0], [4.1, 3.9, 4.0, 4.0], [1.0, 1.0, 1.0, 1.0]]
        check_model(c, hp, "iris MLP", mid, raw, rows, 1.0, SPECIES)
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
