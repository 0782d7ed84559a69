#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<target>/):
small valid and nearly valid inputs in each harness's input format (see the
header comment of fuzz_<target>.c). Deterministic; run it again after
changing a format:  python3 tests/fuzz/make_seeds.py
"""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def two_files(flags, x, y):
    """The loader harnesses' format: flags, u16 LE length of x, x, y."""
    assert len(x) < 65536
    return bytes([flags]) + struct.pack("<H", len(x)) + x + y


# ---- IDX ----
def idx(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def idx_seeds():
    n, h, w = 6, 4, 3
    images = idx(0x08, [n, h, w], bytes((i * 37) % 256 for i in range(n * h * w)))
    labels = idx(0x08, [n], bytes(i % 3 for i in range(n)))
    put("idx", "u8_plain", two_files(0, images, labels))
    put("idx", "u8_gz_here", two_files(3, images, labels))
    put("idx", "u8_gz_in_input", two_files(0, gzip.compress(images, 9, mtime=0),
                                           gzip.compress(labels, 9, mtime=0)))
    vec = idx(0x0D, [n, 5], struct.pack(">%df" % (n * 5), *[i * 0.5 - 3 for i in range(n * 5)]))
    put("idx", "f32_rank2", two_files(1, vec, idx(0x0C, [n], struct.pack(">%di" % n, *range(n)))))
    put("idx", "f64_rank4", two_files(0, idx(0x0E, [2, 2, 2, 1], struct.pack(">8d", *range(8))),
                                      idx(0x0B, [2], struct.pack(">2h", 1, 0))))
    put("idx", "i8_i16", two_files(2, idx(0x09, [3, 2], bytes([0x80, 1, 2, 0xff, 4, 5])),
                                   idx(0x09, [3], bytes([0, 1, 2]))))
    put("idx", "truncated", two_files(0, images[:-5], labels))
    put("idx", "trailing", two_files(0, images + b"\0", labels))
    put("idx", "count_mismatch", two_files(0, images, idx(0x08, [n - 1], bytes(n - 1))))
    put("idx", "huge_dims", two_files(1, idx(0x08, [60000000, 28, 28], b"\0" * 64), labels))
    put("idx", "bad_label", two_files(0, images, idx(0x0C, [n], struct.pack(">%di" % n, *([-1] * n)))))


# ---- NPY ----
def npy(descr, shape, payload, version=1, header=None):
    if header is None:
        sh = "(%s)" % ("".join("%d, " % s for s in shape) if len(shape) != 1 else "%d," % shape[0])
        header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, sh)
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(header)) + header.encode() + payload


def npy_seeds():
    n, f = 5, 3
    xs = {
        "u1": npy("|u1", (n, f), bytes(range(n * f))),
        "f4": npy("<f4", (n, f), struct.pack("<%df" % (n * f), *[i / 3 for i in range(n * f)])),
        "f8": npy("<f8", (n, 2, 2, 1), struct.pack("<%dd" % (n * 4), *range(n * 4))),
        "i4": npy("<i4", (n,), struct.pack("<%di" % n, *range(n))),
        "i8": npy("<i8", (n, f), struct.pack("<%dq" % (n * f), *range(n * f)), version=2),
    }
    ys = {
        "i4": npy("<i4", (n,), struct.pack("<%di" % n, *[i % 2 for i in range(n)])),
        "u1": npy("|u1", (n,), bytes(i % 4 for i in range(n)), version=3),
        "f4": npy("<f4", (n,), struct.pack("<%df" % n, *[i * 1.5 for i in range(n)])),
        "f8k": npy("<f8", (n, 2), struct.pack("<%dd" % (n * 2), *range(n * 2))),
    }
    k = 0
    for xn, x in xs.items():
        for yn, y in ys.items():
            if (k % 2 == 0) or xn in ("u1", "f4"):
                put("npy", "x_%s_y_%s" % (xn, yn), two_files(k % 4, x, y))
            k += 1
    put("npy", "fortran", two_files(0, npy("<f4", (2,), b"\0" * 8,
                                           header="{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }"),
                                    ys["i4"]))
    put("npy", "big_endian", two_files(0, npy(">f4", (2,), b"\0" * 8), ys["i4"]))
    put("npy", "huge_shape", two_files(0, npy("<f8", (1 << 40, 2), b"\0" * 16), ys["i4"]))
    put("npy", "truncated", two_files(0, xs["f4"][:-7], ys["i4"]))
    put("npy", "zero_dim", two_files(0, npy("<f4", (n, 0), b""), ys["i4"]))


# ---- CSV ----
def csv_seeds():
    put("csv", "classes", b"\x03" + b"a,b,label\n1,2,0\n3.5,-4e2,1\n\n5,6,2\n")
    put("csv", "regression_first_col", b"\x00" + b"y,x1,x2\r\n0.5,1,2\r\n1.5,inf,nan\r\n")
    put("csv", "quoted", b"\x01" + b'"label", "f1" ,f2\n"1", 2 , "3"\n0,4,5\n')
    put("csv", "short_row", b"\x03" + b"a,label\n1,0\n2\n")
    put("csv", "not_a_number", b"\x03" + b"a,label\n1,0\nx,1\n")
    put("csv", "fraction_label", b"\x03" + b"a,label\n1,0.5\n")
    put("csv", "no_rows", b"\x03" + b"a,label\n\n\n")
    put("csv", "label_only", b"\x03" + b"label\n1\n")
    put("csv", "wide", b"\x02" + b",".join(b"c%d" % i for i in range(200)) + b",label\n" +
        b",".join(b"%d" % i for i in range(200)) + b",3\n")


# ---- safetensors ----
def safetensors(tensors, meta=None):
    header, data = {}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    w = struct.pack("<6f", *[0.5 * i for i in range(6)])
    put("safetensors", "two_tensors", safetensors([("dense.w", "F32", [2, 3], w),
                                                   ("dense.b", "BF16", [2], b"\x80\x3f\x00\x40")],
                                                  {"format": "pt", "epoch": "3"}))
    put("safetensors", "all_dtypes", safetensors([
        ("a", "F64", [1], b"\0" * 8), ("b", "F16", [1], b"\0" * 2), ("c", "I32", [1], b"\0" * 4),
        ("d", "I64", [1], b"\0" * 8), ("e", "U8", [3], b"abc"), ("f", "U64", [], b"\0" * 8),
        ("g", "I8", [2, 1], b"\x01\xff"), ("h", "BOOL", [0], b"")]))
    put("safetensors", "empty", safetensors([]))
    put("safetensors", "overlap", struct.pack("<Q", 96) + json.dumps(
        {"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
         "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}).encode().ljust(96) + b"xyz")


# ---- tuner space ----
def tuner_space_seeds():
    space = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
             "layers": {"type": "int", "low": 1, "high": 4},
             "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
             "momentum": {"type": "float", "low": 0.0, "high": 0.99, "condition": {"optimizer": ["sgd"]}}}
    docs = {
        "readme": {"space": space, "tuner": {"algorithm": "tpe", "seed": 7, "max_trials": 50,
                                             "pruner": {"algorithm": "asha", "eta": 3, "min_resource": 1}}},
        "grid": {"space": {"a": {"type": "int", "low": 0, "high": 3, "step": 1}, "b": {"type": "bool"}},
                 "tuner": {"algorithm": "grid"}, "params": {"a": 2, "b": True}},
        "median": {"space": {"x": {"type": "float", "low": -1, "high": 1, "step": 0.25}},
                   "tuner": {"algorithm": "random", "pruner": {"algorithm": "median"}}, "params": {"x": 5}},
        "hyperband": {"space": space, "tuner": {"algorithm": "bayesian",
                                                "pruner": {"algorithm": "hyperband", "eta": 3}}},
    }
    for name, doc in docs.items():
        put("tuner_space", name, json.dumps(doc).encode())


# ---- HTTP ----
def http(method, path, body=b"", headers=(), flags=0):
    if isinstance(body, str):
        body = body.encode()
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (method, path)
    for h in headers:
        head += h + "\r\n"
    if body or method in ("POST", "PUT"):
        head += "Content-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + body


def multipart(fields, boundary="fuzzb"):
    out = b""
    for name, value, filename in fields:
        if isinstance(value, str):
            value = value.encode()
        disp = 'Content-Disposition: form-data; name="%s"' % name
        if filename:
            disp += '; filename="%s"\r\nContent-Type: application/octet-stream' % filename
        out += b"--" + boundary.encode() + b"\r\n" + disp.encode() + b"\r\n\r\n" + value + b"\r\n"
    out += b"--" + boundary.encode() + b"--\r\n"
    return out


def upload(fields, flags=0):
    body = multipart(fields)
    return http("POST", "/api/v1/datasets", body, ["Content-Type: multipart/form-data; boundary=fuzzb"])


def http_seeds():
    J = "Content-Type: application/json"
    ext = {"name": "quickstart", "objective": {"direction": "minimize"},
           "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                     "layers": {"type": "int", "low": 1, "high": 4},
                     "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
                     "momentum": {"type": "float", "low": 0.0, "high": 0.99,
                                  "condition": {"optimizer": ["sgd"]}}},
           "tuner": {"algorithm": "tpe", "seed": 7, "max_trials": 50,
                     "pruner": {"algorithm": "asha", "eta": 3, "min_resource": 1}}}
    emb = {"name": "fmnist-mlp", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
           "dataset": {"name": "fashion-mnist", "validation_split": 20},
           "training": {"max_epochs": 2, "precision": "fp32", "batch_size": 16,
                        "early_stopping": {"patience": 3}},
           "tuner": {"algorithm": "random", "max_trials": 4, "executions_per_trial": 1,
                     "pruner": {"algorithm": "hyperband", "eta": 3, "min_resource": 1}}}
    custom = {"name": "custom", "objective": {"metric": "val_loss", "direction": "minimize"},
              "model": {"layers": [{"conv2d": {"filters": "$f", "kernel": 3, "activation": "relu"}},
                                   {"maxpool2d": {"pool": 2}}, {"batchnorm": {}},
                                   {"residual": {"enabled": "$r", "layers": [{"conv2d": {"filters": "$f", "kernel": 3, "padding": "same"}}]}},
                                   {"global_avg_pool": {}},
                                   {"repeat": {"count": "$n", "layers": [{"dense": {"units": 8, "activation": "relu"}}]}},
                                   {"dropout": {"rate": 0.1}}, {"dense": {"units": 10, "activation": "softmax"}}],
                        "loss": "sparse_categorical_crossentropy",
                        "optimizer": {"name": "sgd", "learning_rate": "$lr", "momentum": 0.9},
                        "schedule": {"name": "cosine"}},
              "space": {"f": {"type": "int", "low": 2, "high": 4}, "n": {"type": "int", "low": 1, "high": 2},
                        "r": {"type": "bool"}, "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True}},
              "dataset": {"name": "fashion-mnist", "validation_split": 0.2, "limit": 50},
              "tuner": {"algorithm": "tpe", "max_trials": 2, "seed": 3}}
    seeds = {
        "healthz": http("GET", "/healthz"),
        "list_studies": http("GET", "/api/v1/studies?limit=5&offset=0"),
        "metrics": http("GET", "/metrics"),
        "openapi": http("HEAD", "/api/v1/openapi.yaml"),
        "create_external": http("POST", "/api/v1/studies", json.dumps(ext), [J]),
        "create_embedded": http("POST", "/api/v1/studies", json.dumps(emb), [J]),
        "create_custom_model": http("POST", "/api/v1/studies", json.dumps(custom), [J]),
        "ask_tell": http("POST", "/api/v1/studies", json.dumps(ext), [J]) +
        http("POST", "/api/v1/studies/1/ask") +
        http("POST", "/api/v1/trials/1/report", '{"step": 1, "value": 0.42}', [J]) +
        http("POST", "/api/v1/trials/1/tell", '{"value": 0.37}', [J]) +
        http("GET", "/api/v1/studies/1/best?top_n=3") +
        http("GET", "/api/v1/studies/1/trials?state=complete&order=value&limit=20") +
        http("GET", "/api/v1/trials/1"),
        "enqueue_pause": http("POST", "/api/v1/studies", json.dumps(ext), [J]) +
        http("POST", "/api/v1/studies/1/trials", '{"params": {"lr": 0.01, "layers": 2, "optimizer": "adam"}}', [J]) +
        http("POST", "/api/v1/studies/1/pause") + http("POST", "/api/v1/studies/1/resume") +
        http("POST", "/api/v1/studies/1/cancel") + http("DELETE", "/api/v1/studies/1"),
        "upload_csv": upload([("name", "iris", None), ("format", "csv", None), ("label_column", "species", None),
                              ("file", "a,b,species\n1,2,0\n3,4,1\n5,6,2\n7,8,0\n", "iris.csv")]),
        "upload_idx": upload([("name", "tiny", None), ("format", "idx", None),
                              ("x", gzip.compress(idx(0x08, [4, 2, 2], bytes(range(16))), 9, mtime=0), "x.gz"),
                              ("y", idx(0x08, [4], bytes([0, 1, 0, 1])), "y.idx")]),
        "upload_npy_then_study": upload([("name", "vec", None), ("format", "npy", None), ("task", "regression", None),
                                         ("x", npy("<f4", (30, 2), struct.pack("<60f", *range(60))), "x.npy"),
                                         ("y", npy("<f4", (30,), struct.pack("<30f", *range(30))), "y.npy")]) +
        http("POST", "/api/v1/studies", json.dumps(
            {"name": "reg", "objective": {"metric": "val_loss"}, "model": {"template": "mlp"},
             "dataset": {"name": "vec", "validation_split": 5}, "tuner": {"max_trials": 1}}), [J]) +
        http("GET", "/api/v1/datasets") + http("GET", "/api/v1/datasets/1") + http("DELETE", "/api/v1/datasets/1"),
        "models": http("POST", "/api/v1/studies", json.dumps(emb), [J]) +
        http("POST", "/api/v1/studies/1/refits", '{"top_n": 2, "epochs_factor": 1.2}', [J]) +
        http("POST", "/api/v1/studies/1/ensembles", '{"top_n": 2, "method": "weighted"}', [J]) +
        http("POST", "/api/v1/trials/1/model") + http("GET", "/api/v1/studies/1/models") +
        http("POST", "/api/v1/models/1/predict", '{"inputs": [[0, 1, 2]]}', [J]) +
        http("GET", "/api/v1/models/1/weights") + http("GET", "/api/v1/studies/1/importance"),
        "events": http("POST", "/api/v1/studies", json.dumps(ext), [J]) +
        http("GET", "/api/v1/studies/1/events?after=0", headers=["Last-Event-ID: 0"]),
    }
    # the first byte: pieces of (byte + 1) bytes
    for name, data in seeds.items():
        put("http", name, b"\xff" + data)
    put("http", "upload_csv_in_7_byte_pieces", b"\x06" + seeds["upload_csv"])
    put("http", "create_in_1_byte_pieces", b"\x00" + http("POST", "/api/v1/studies", json.dumps(ext), [J]))
    put("http", "chunked", b"\x03" + b"POST /api/v1/studies HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\n{\"na\r\n0\r\n\r\n")


if __name__ == "__main__":
    idx_seeds()
    npy_seeds()
    csv_seeds()
    safetensors_seeds()
    tuner_space_seeds()
    http_seeds()
