"""Datasets over REST against a real hpod: multipart uploads of CSV, NPY and
IDX files made here (validated by hpod with the engine's loaders), list, get
and delete; malformed uploads get a 400 naming the form field (CSV: the
line), taken names 409, an upload over --max-upload 413; no temporary
folder survives a failure or a dropped connection; a delete racing with a
study created on the dataset never lets both succeed (dataset_race.py);
hpod stays up, and the datasets are still there after a restart. An
uploaded dataset whose stored file was damaged since (garbage, empty,
deleted, a folder in its place) makes a study on it answer 409 naming the
dataset and its damaged file (a storage-fault audit's F7e: before, 400
bad_format, 404 or 500, as if the request were wrong)."""
import gzip
import json
import os
import random
import re
import socket
import struct
import time

from hpod import Checks, Hpod, parse_args


def check_delete_races_create(c, deleting, creating):
    import dataset_race  # it imports this module's upload helpers
    dataset_race.check_delete_races_create(c, deleting, creating)

D = "/api/v1/datasets"


# ---- multipart/form-data by hand (the standard library has no encoder) ----
def multipart(fields):
    """fields: list of (name, value bytes/str, filename or None)."""
    boundary = "hpoboundary%08x" % random.getrandbits(32)
    out = []
    for name, value, filename in fields:
        if isinstance(value, str):
            value = value.encode()
        disp = 'form-data; name="%s"' % name
        head = "--%s\r\nContent-Disposition: %s" % (boundary, disp)
        if filename is not None:
            head += '; filename="%s"\r\nContent-Type: application/octet-stream' % filename
        out.append(head.encode() + b"\r\n\r\n" + value + b"\r\n")
    out.append(("--%s--\r\n" % boundary).encode())
    return b"".join(out), "multipart/form-data; boundary=" + boundary


def upload(hp, fields):
    body, ctype = multipart(fields)
    return hp.request("POST", D, raw=body, headers={"Content-Type": ctype}, timeout=60)


# ---- files made here ----
def make_csv(rows=300, bad_line=None, bad_value="abc"):
    rng = random.Random(1)
    lines = ["a,b,c,d,species"]
    for i in range(rows):
        k = i % 3
        feats = ["%.4f" % (k + rng.gauss(0, 0.3)) for _ in range(4)]
        lines.append(",".join(feats + [str(k)]))
    if bad_line is not None:  # 1-based line number in the file (header = 1)
        cells = lines[bad_line - 1].split(",")
        cells[2] = bad_value
        lines[bad_line - 1] = ",".join(cells)
    return ("\n".join(lines) + "\n").encode()


def make_regression_csv(rows=120):
    lines = ["x1,x2,target"]
    for i in range(rows):
        lines.append("%d,%d,%.3f" % (i, i % 7, 0.5 * i + 0.25))
    return ("\n".join(lines) + "\n").encode()


def npy(descr, shape, payload, header_override=None):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % s for s in shape) if len(shape) > 1 else "%d," % shape[0])
    if header_override is not None:
        header = header_override
    hlen = len(header) + 1
    pad = (64 - (10 + hlen) % 64) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def make_npy(n=200, f=5, classes=4, float_y=False):
    rng = random.Random(2)
    x = struct.pack("<%df" % (n * f), *[rng.uniform(-1, 1) for _ in range(n * f)])
    if float_y:
        y = npy("<f4", (n,), struct.pack("<%df" % n, *[rng.uniform(0, 1) for _ in range(n)]))
    else:
        y = npy("<i4", (n,), struct.pack("<%di" % n, *[i % classes for i in range(n)]))
    return npy("<f4", (n, f), x), y


def make_idx(n=50, h=8, w=8, n_labels=None):
    images = struct.pack(">IIII", 0x0803, n, h, w) + bytes((i * 7) % 256 for i in range(n * h * w))
    nl = n if n_labels is None else n_labels
    labels = struct.pack(">II", 0x0801, nl) + bytes(i % 10 for i in range(nl))
    return gzip.compress(images), gzip.compress(labels)


def in_memory(hp):
    """The datasets hpod holds decoded (/metrics' hpo_datasets_in_memory)."""
    st, text = hp.request("GET", "/metrics")
    m = re.search(r"^hpo_datasets_in_memory (\d+)$", text if st == 200 else "", re.M)
    return int(m.group(1)) if m else None


def leftovers(data_dir):
    root = os.path.join(data_dir, "datasets")
    if not os.path.isdir(root):
        return []
    return sorted(e for e in os.listdir(root) if e.startswith(".upload-"))


def drop_mid_upload(hp):
    """Sends half of a multipart body and closes the connection."""
    body, ctype = multipart([("name", "dropped", None), ("format", "csv", None),
                             ("label_column", "species", None), ("file", make_csv(), "d.csv")])
    s = socket.create_connection(("127.0.0.1", hp.port), timeout=10)
    head = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (D, ctype, len(body)))
    s.sendall(head.encode() + body[: len(body) // 2])
    time.sleep(0.3)
    s.close()


def check_damaged_stored_file(c, binary):
    hp = Hpod(binary).start()
    try:
        st, out = upload(hp, [("name", "kept", None), ("format", "csv", None), ("label_column", "species", None),
                              ("file", make_csv(), "kept.csv")])
        c.check(st == 201, "upload kept (%s %s)" % (st, out))
        folder = os.path.join(hp.data_dir, "datasets", "%d-kept" % out.get("id", 0))
        stored = [os.path.join(folder, f) for f in os.listdir(folder)] if os.path.isdir(folder) else []
        c.check(len(stored) == 1, "one stored file: %s" % stored)
        if len(stored) != 1:
            return
        path = stored[0]
        good = open(path, "rb").read()
        spec = {"objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
                "dataset": {"name": "kept", "validation_split": 0.2},
                "space": {"layers": {"type": "int", "low": 1, "high": 2}},
                "training": {"max_epochs": 1, "batch_size": 8},
                "tuner": {"algorithm": "random", "seed": 1, "max_trials": 1}}

        def garbage():
            with open(path, "wb") as f:
                f.write(bytes(random.Random(2).getrandbits(8) for _ in range(5000)))

        def empty():
            open(path, "wb").close()

        def folder_instead():
            os.unlink(path)
            os.mkdir(path)

        for how, damage in (("garbage", garbage), ("empty", empty), ("deleted", lambda: os.unlink(path)),
                            ("a folder", folder_instead)):
            damage()
            st, out = hp.request("POST", "/api/v1/studies", dict(spec, name="on-" + how.replace(" ", "-")))
            err = out.get("error", {}) if isinstance(out, dict) else {}
            c.check(st == 409 and err.get("field") == "dataset" and "uploaded dataset kept is damaged" in
                    err.get("message", ""),
                    "a stored file %s: a study on it -> 409 naming the dataset (%s %s)" % (how, st, out))
            if os.path.isdir(path):
                os.rmdir(path)
            with open(path, "wb") as f:
                f.write(good)
        st, out = hp.request("POST", "/api/v1/studies", dict(spec, name="on-restored"))
        c.check(st == 201, "the file restored: a study on it -> 201 (%s %s)" % (st, out))
        c.check(hp.stop() == 0, "graceful stop")
    finally:
        hp.cleanup()


def main():
    args = parse_args()
    c = Checks()
    check_damaged_stored_file(c, args.hpod)
    hp = Hpod(args.hpod).start()
    small = None
    try:
        # ---- good uploads ----
        csv = make_csv()
        st, out = upload(hp, [("name", "blobs", None), ("format", "csv", None),
                              ("label_column", "species", None), ("file", csv, "blobs.csv")])
        c.check(st == 201, "csv upload -> 201 (%s %s)" % (st, out))
        csv_id = out.get("id") if st == 201 else None
        if st == 201:
            c.check(out["name"] == "blobs" and out["format"] == "csv" and out["builtin"] is False,
                    "csv dataset fields: %s" % out)
            c.check(out["n_rows"] == 300 and out["shape"] == [4] and out["n_classes"] == 3,
                    "csv rows/shape/classes: %s" % out)
            c.check(out["task"] == "classification" and out["label_column"] == "species",
                    "csv task/label: %s" % out)
            c.check(out["bytes"] == len(csv), "csv bytes %s == %d" % (out.get("bytes"), len(csv)))
            c.check(os.path.isfile(os.path.join(hp.data_dir, "datasets", "%d-blobs" % csv_id,
                                                "data.csv")),
                    "csv stored under datasets/<id>-blobs/data.csv")

        x, y = make_npy()
        st, out = upload(hp, [("name", "vec5", None), ("format", "npy", None),
                              ("x", x, "x.npy"), ("y", y, "y.npy")])
        c.check(st == 201, "npy upload -> 201 (%s %s)" % (st, out))
        npy_id = out.get("id") if st == 201 else None
        if st == 201:
            c.check(out["n_rows"] == 200 and out["shape"] == [5] and out["n_classes"] == 4 and
                    out["x_dtype"] == "float32", "npy fields: %s" % out)

        xf, yf = make_npy(n=64, f=3, float_y=True)
        st, out = upload(hp, [("name", "vec-reg", None), ("format", "npy", None),
                              ("task", "regression", None), ("x", xf, "x.npy"), ("y", yf, "y.npy")])
        c.check(st == 201 and out.get("task") == "regression" and out.get("y_dim") == 1,
                "npy regression upload (%s %s)" % (st, out))

        images, labels = make_idx()
        st, out = upload(hp, [("name", "tiny.img_8", None), ("format", "idx", None),
                              ("x", images, "images.idx.gz"), ("y", labels, "labels.idx.gz")])
        c.check(st == 201, "idx upload -> 201 (%s %s)" % (st, out))
        if st == 201:
            c.check(out["n_rows"] == 50 and out["shape"] == [8, 8, 1] and out["n_classes"] == 10 and
                    out["x_dtype"] == "uint8", "idx fields: %s" % out)
            c.check(out.get("files") == {"x": "images.idx.gz", "y": "labels.idx.gz"},
                    "idx client file names kept: %s" % out.get("files"))

        st, out = upload(hp, [("name", "lines", None), ("format", "csv", None),
                              ("task", "regression", None), ("label_column", "target", None),
                              ("file", make_regression_csv(), "lines.csv")])
        c.check(st == 201 and out.get("task") == "regression" and out.get("y_dim") == 1 and
                out.get("shape") == [2], "csv regression upload (%s %s)" % (st, out))

        # ---- list and get ----
        st, out = hp.request("GET", D)
        names = [d["name"] for d in out["datasets"]] if st == 200 else []
        c.check(st == 200 and names == ["fashion-mnist", "blobs", "vec5", "vec-reg", "tiny.img_8",
                                        "lines"], "list: builtin first, then uploads in order: %s" % names)
        if st == 200:
            fm = out["datasets"][0]
            c.check(fm["builtin"] is True and fm["id"] is None and fm["shape"] == [28, 28, 1] and
                    fm["n_classes"] == 10 and fm["n_rows"] == 60000, "builtin entry: %s" % fm)
        if csv_id:
            st, out = hp.request("GET", "%s/%d" % (D, csv_id))
            c.check(st == 200 and out["name"] == "blobs" and out["n_rows"] == 300, "get csv: %s" % out)
        if npy_id:
            st, out = hp.request("GET", "%s/%d" % (D, npy_id))
            c.check(st == 200 and out["name"] == "vec5", "get npy: %s" % out)
        st, out = hp.request("GET", D + "/999999")
        c.check(st == 404 and out["error"]["field"] == "id", "get unknown -> 404 (%s)" % st)

        # ---- malformed uploads: 400/409 naming the field ----
        good_x, good_y = make_npy(n=10, f=2)
        imgs, labs = make_idx()
        trunc = gzip.compress(gzip.decompress(imgs)[:-100])
        bad_header = npy("<f4", (10, 2), b"\0" * 80, header_override="{'descr': '<f4', 'shape': oops}")
        bad_magic = b"NOTNUMPY" + good_y[8:]
        base_csv = [("format", "csv", None), ("label_column", "species", None)]
        cases = [
            # (what, fields, status, field, text expected in the message or None)
            ("csv with a non-numeric cell", [("name", "bad1", None)] + base_csv +
             [("file", make_csv(bad_line=17), "cells.csv")], 400, "file", "line 17"),
            ("csv with a nan cell", [("name", "bad1n", None)] + base_csv +
             [("file", make_csv(bad_line=23, bad_value="nan"), "nan.csv")], 400, "file", "line 23"),
            ("npy x with an inf", [("name", "bad8i", None), ("format", "npy", None),
                                   ("x", npy("<f4", (10, 2), struct.pack("<20f", *([1.0] * 7 + [float("inf")] +
                                                                                   [1.0] * 12))), "ix.npy"),
                                   ("y", good_y, "y.npy")], 400, "x", "sample 3"),
            ("csv with an empty class label", [("name", "bad1e", None)] + base_csv +
             [("file", b"a,b,c,d,species\n1,2,3,4,\n1,2,3,4,0\n", "el.csv")], 400, "file",
             "line 2, column 5: the label is empty"),
            ("csv of one class", [("name", "bad1c", None)] + base_csv +
             [("file", b"a,b,c,d,species\n1,2,3,4,setosa\n5,6,7,8,setosa\n", "one.csv")], 400, "file",
             "every row has class 'setosa': a classifier needs two classes"),
            ("npy of one class", [("name", "bad8c", None), ("format", "npy", None), ("x", good_x, "x.npy"),
                                  ("y", npy("<i4", (10,), struct.pack("<10i", *([3] * 10))), "y.npy")], 400, "y",
             "every row has class 3"),
            ("csv with a C hex float cell", [("name", "bad1h", None)] + base_csv +
             [("file", make_csv(bad_line=5, bad_value="0x10"), "hex.csv")], 400, "file", "line 5, column 3"),
            ("idx f32 images with a nan", [("name", "bad6n", None), ("format", "idx", None),
                                           ("x", gzip.compress(struct.pack(">IIII", 0x0D03, 50, 2, 2) +
                                                               struct.pack(">200f", *([0.5] * 21 + [float("nan")] +
                                                                                      [0.5] * 178))), "f.gz"),
                                           ("y", labs, "l.gz")], 400, "x", "sample 5"),
            ("csv without the label column", [("name", "bad2", None), ("format", "csv", None),
                                              ("label_column", "nope", None),
                                              ("file", make_csv(), "b.csv")], 400, "label_column", "nope"),
            ("csv without label_column", [("name", "bad3", None), ("format", "csv", None),
                                          ("file", make_csv(), "b.csv")], 400, "label_column", None),
            ("csv classification with fractional labels",
             [("name", "bad4", None), ("format", "csv", None), ("label_column", "target", None),
              ("file", make_regression_csv(), "r.csv")], 400, "file", "task=regression"),
            ("empty csv", [("name", "bad5", None)] + base_csv + [("file", b"", "e.csv")], 400, "file", None),
            ("truncated idx images", [("name", "bad6", None), ("format", "idx", None),
                                      ("x", trunc, "i.gz"), ("y", labs, "l.gz")], 400, "x", None),
            ("idx labels count mismatch", [("name", "bad7", None), ("format", "idx", None),
                                           ("x", imgs, "i.gz"), ("y", make_idx(n_labels=49)[1], "l.gz")],
             400, None, "49"),
            ("npy x with a bad header", [("name", "bad8", None), ("format", "npy", None),
                                         ("x", bad_header, "hx.npy"), ("y", good_y, "y.npy")], 400, "x", "hx.npy"),
            ("npy y with a bad magic", [("name", "bad9", None), ("format", "npy", None),
                                        ("x", good_x, "x.npy"), ("y", bad_magic, "my.npy")], 400, "y", "my.npy"),
            ("npy y of the wrong length", [("name", "bad10", None), ("format", "npy", None),
                                           ("x", good_x, "x.npy"), ("y", make_npy(n=11, f=2)[1], "y.npy")],
             400, "y", None),
            ("npy classification with float targets", [("name", "bad11", None), ("format", "npy", None),
                                                       ("task", "classification", None),
                                                       ("x", xf, "x.npy"), ("y", yf, "y.npy")], 400, "y", None),
            ("npy without y", [("name", "bad12", None), ("format", "npy", None), ("x", good_x, "x.npy")],
             400, "y", None),
            ("csv with an x file", [("name", "bad13", None)] + base_csv +
             [("file", make_csv(), "a.csv"), ("x", good_x, "x.npy")], 400, "x", None),
            ("unknown format", [("name", "bad14", None), ("format", "parquet", None),
                                ("file", make_csv(), "a.csv")], 400, "format", None),
            ("no format", [("name", "bad15", None), ("file", make_csv(), "a.csv")], 400, "format", None),
            ("unknown task", [("name", "bad16", None), ("task", "clustering", None)] + base_csv +
             [("file", make_csv(), "a.csv")], 400, "task", None),
            ("idx regression", [("name", "bad17", None), ("format", "idx", None), ("task", "regression", None),
                                ("x", imgs, "i.gz"), ("y", labs, "l.gz")], 400, "task", None),
            ("no name", base_csv + [("file", make_csv(), "a.csv")], 400, "name", None),
            ("name with a slash", [("name", "../etc", None)] + base_csv + [("file", make_csv(), "a.csv")],
             400, "name", None),
            ("name too long", [("name", "n" * 65, None)] + base_csv + [("file", make_csv(), "a.csv")],
             400, "name", None),
            ("name with non-ASCII bytes", [("name", b"caf\xc3\xa9\xff", None)] + base_csv +
             [("file", make_csv(), "a.csv")], 400, "name", None),
            ("unknown form field", [("name", "bad18", None), ("color", "red", None)] + base_csv +
             [("file", make_csv(), "a.csv")], 400, "color", None),
            ("name given twice", [("name", "bad19", None), ("name", "bad20", None)] + base_csv +
             [("file", make_csv(), "a.csv")], 400, "name", None),
            ("duplicate name", [("name", "blobs", None)] + base_csv + [("file", make_csv(), "a.csv")],
             409, "name", None),
            ("builtin name", [("name", "fashion-mnist", None)] + base_csv + [("file", make_csv(), "a.csv")],
             409, "name", None),
        ]
        for what, fields, status, field, text in cases:
            st, out = upload(hp, fields)
            err = out.get("error", {}) if isinstance(out, dict) else {}
            ok = st == status and err.get("code") and (field is None or err.get("field") == field)
            ok = ok and (text is None or text in err.get("message", ""))
            ok = ok and ".upload-" not in err.get("message", "")  # no temporary paths leak
            c.check(ok, "%s -> %d field %r %r (got %s %s)" % (what, status, field, text, st, out))
            c.check(leftovers(hp.data_dir) == [], "no temporary folder after: %s" % what)

        st, out = hp.request("POST", D, body={"name": "x"})
        c.check(st == 400 and "multipart" in out["error"]["message"], "JSON body -> 400 (%s %s)" % (st, out))
        st, out = hp.request("POST", D, raw=b"name=x&format=csv",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
        c.check(st == 415 and out["error"]["field"] == "Content-Type",
                "urlencoded body (a cross-site form's) -> 415 (%s %s)" % (st, out))
        c.check(leftovers(hp.data_dir) == [], "no temporary folder after the non-multipart posts")

        # A client that goes away mid-upload leaves nothing behind.
        drop_mid_upload(hp)
        deadline = time.time() + 5
        while leftovers(hp.data_dir) and time.time() < deadline:
            time.sleep(0.1)
        c.check(leftovers(hp.data_dir) == [], "no temporary folder after a dropped connection")
        st, out = hp.request("GET", D)
        c.check(st == 200 and "dropped" not in [d["name"] for d in out["datasets"]],
                "a dropped upload is not stored")

        # ---- delete ----
        st, out = upload(hp, [("name", "doomed", None)] + base_csv + [("file", make_csv(rows=200), "d.csv")])
        c.check(st == 201, "upload doomed (%s %s)" % (st, out))
        doomed = out.get("id", 0) if st == 201 else 0
        folder = os.path.join(hp.data_dir, "datasets", "%d-doomed" % doomed)
        c.check(os.path.isdir(folder), "doomed folder exists")
        # A running or paused study that trains on it keeps it; a cancelled one does not.
        spec = {"name": "uses-doomed", "objective": {"metric": "val_accuracy"},
                "model": {"template": "mlp"}, "dataset": {"name": "doomed", "validation_split": 0.2},
                "space": {"layers": {"type": "int", "low": 1, "high": 2}},
                "training": {"max_epochs": 30, "batch_size": 8},
                "tuner": {"algorithm": "random", "seed": 1, "max_trials": 200}}
        st, out = hp.request("POST", "/api/v1/studies", spec)
        c.check(st == 201, "an embedded study trains on an uploaded dataset (%s %s)" % (st, out))
        if st == 201:
            sid = out["id"]
            deadline = time.time() + 30  # until an epoch has been trained
            while time.time() < deadline:
                ts = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
                if ts and hp.ok("GET", "/api/v1/trials/%d" % ts[0]["id"]).get("curves"):
                    break
                time.sleep(0.1)
            st2, out2 = hp.request("DELETE", "%s/%d" % (D, doomed))
            c.check(st2 == 409 and out2["error"]["field"] == "id",
                    "delete of a dataset a running study uses -> 409 (%s %s)" % (st2, out2))
            hp.ok("POST", "/api/v1/studies/%d/pause" % sid)
            st2, out2 = hp.request("DELETE", "%s/%d" % (D, doomed))
            c.check(st2 == 409 and "paused" in out2["error"]["message"],
                    "delete of a dataset a paused study uses -> 409 (%s %s)" % (st2, out2))
            hp.ok("POST", "/api/v1/studies/%d/cancel" % sid)
            trials = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
            epochs = sum(len(hp.ok("GET", "/api/v1/trials/%d" % t["id"]).get("curves", [])) for t in trials)
            c.check(epochs >= 1, "the study trained epochs on the uploaded data (%d)" % epochs)
        held = in_memory(hp)
        st, _ = hp.request("DELETE", "%s/%d" % (D, doomed))
        c.check(st == 204, "delete -> 204 (%s)" % st)
        c.check(held and in_memory(hp) == held - 1,
                "the deleted dataset leaves memory: hpo_datasets_in_memory %s -> %s" % (held, in_memory(hp)))
        c.check(not os.path.exists(folder), "delete removes the files")
        st, _ = hp.request("GET", "%s/%d" % (D, doomed))
        c.check(st == 404, "deleted dataset -> 404")
        st, _ = hp.request("DELETE", "%s/%d" % (D, doomed))
        c.check(st == 404, "delete twice -> 404")
        st, out = upload(hp, [("name", "doomed", None)] + base_csv + [("file", make_csv(rows=30), "d.csv")])
        c.check(st == 201 and out["id"] > doomed, "a deleted name can be reused, with a new id (%s)" % out)

        # ---- a delete racing with a study created on the dataset ----
        check_delete_races_create(c, hp, hp)

        c.check(hp.request("GET", "/healthz")[0] == 200, "hpod alive after the uploads")

        # ---- restart: everything is still there ----
        c.check(hp.stop() == 0, "graceful stop")
        hp.start()
        st, out = hp.request("GET", D)
        names = [d["name"] for d in out["datasets"]] if st == 200 else []
        c.check(names == ["fashion-mnist", "blobs", "vec5", "vec-reg", "tiny.img_8", "lines", "doomed"],
                "datasets listed after a restart: %s" % names)
        if csv_id:
            st, out = hp.request("GET", "%s/%d" % (D, csv_id))
            c.check(st == 200 and out["shape"] == [4], "get after restart: %s" % out)
        st, out = upload(hp, [("name", "blobs", None)] + base_csv + [("file", make_csv(), "a.csv")])
        c.check(st == 409, "name still taken after a restart (%s)" % st)

        # ---- the size limit ----
        small = Hpod(args.hpod, args=["--max-upload", "65536"]).start()
        big = make_csv(rows=3000)  # ~ 130 KB
        c.check(len(big) > 65536, "the big CSV is over the limit")
        st, out = upload(small, [("name", "big", None)] + base_csv + [("file", big, "big.csv")])
        c.check(st == 413 and out["error"]["code"] == "too_large", "over --max-upload -> 413 (%s %s)" % (st, out))
        c.check(leftovers(small.data_dir) == [], "no temporary folder after a 413")
        st, out = upload(small, [("name", "fits", None)] + base_csv + [("file", make_csv(rows=100), "s.csv")])
        c.check(st == 201, "an upload under the limit still works (%s %s)" % (st, out))
        c.check(small.request("GET", "/healthz")[0] == 200, "small hpod alive")
        c.check(small.stop() == 0, "small hpod graceful stop")
    finally:
        hp.cleanup()
        if small:
            small.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
