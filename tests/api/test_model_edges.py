"""Trained models at their edges, against a real hpod (one CPU slot):

- predict after the study's dataset was deleted and uploaded again under
  its name with another number of features: a 409 naming id, never a read
  past the rows (before: garbage for one row, SIGSEGV for 4096); with the
  same shape but uint8 values (scaled by 1/255): a 409 too, the study is
  pinned to the dataset it was created on (dataset.id in its definition;
  before: 200 with the new scale applied, every answer changed), also
  after a restart, and a get-or-create of its definition is a 409 naming
  dataset.id; an import finds its dataset by name; a study stored before
  that pinning (no dataset.id) reads the dataset of its name only if it
  was uploaded before the study was created; export, importance,
  the front and the trials' endpoints of a study that can no longer be
  loaded answer 409 naming id (before: 400 naming nothing);
- inputs that overflow a float once scaled: a 400 naming inputs; outputs
  that are not finite: null, every row keeps its K values, its class null
  (before: the values were dropped from the row, the class 0);
- a binary model with one sigmoid output: class 1 where p >= 0.5, with its
  label (before: always class 0);
- an ensemble of trials made while its study runs: the trials' checkpoints
  are kept for it when later trials prune the others, so it still predicts
  (before: 404 naming trial_id once the study went on);
- an ensemble over members whose validation predictions are not finite:
  each skipped with the reason, the job failed saying none could be used
  (before: "complete" with uninitialised metrics, or "invalid argument");
- deleting a dataset while a model job of a complete study that uses it
  is queued: a 409 naming id (before: 204, the weights lost their
  metadata); a study that can no longer be loaded (its dataset deleted,
  then a restart): model endpoints answer 409 naming id with the reason
  (before: 400 "invalid argument", no field);
- a trial's model is the epoch of its value: the objective's best when
  early stopping watches another metric, with that epoch's batch-norm
  statistics (before: the monitor's epoch, and the last epoch's
  statistics);
- the weights download is the stored file, sent whole with its length;
  one damaged on disk (missing, a directory, empty, truncated, a 1 TiB
  sparse file) is a 409 naming id (before: hpod aborted, "out of memory",
  on the directory and the sparse file);
- datasets of classes list no y_dim; a body over --max-body is a 413
  naming the limit."""
import json
import os
import random
import sqlite3
import time
import urllib.error
import urllib.request

from hpod import Checks, Hpod, parse_args, wait_for
from test_datasets import make_csv, make_npy, upload

SLOT = ["--devices", "cpu:1"]


def csv_rows(header, rows):
    return ("\n".join([header] + rows) + "\n").encode()


def wait_state(hp, path, states, timeout=120):
    return wait_for(lambda: (lambda x: x if x["state"] in states else None)(hp.ok("GET", path)), timeout, 0.2)


def one_trial_study(hp, name, dataset, model, metric="val_loss", direction="minimize", trials=1, space=None):
    spec = {"name": name, "objective": {"metric": metric, "direction": direction}, "model": model,
            "space": space or {"lr": {"type": "float", "low": 1e-2, "high": 3e-2, "log": True}},
            "dataset": dataset, "training": {"max_epochs": 2, "batch_size": 16},
            "tuner": {"algorithm": "random", "seed": 1, "max_trials": trials}}
    sid = hp.ok("POST", "/api/v1/studies", spec)["id"]
    wait_state(hp, "/api/v1/studies/%d" % sid, ("complete",))
    return sid


def trial_model(hp, sid):
    t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
    m = hp.ok("POST", "/api/v1/trials/%d/model" % t["id"])
    return wait_state(hp, "/api/v1/models/%d" % m["id"], ("complete", "failed"))


def check_dataset_swap(hp, c):
    x, y = make_npy(n=60, f=400, classes=3)
    st, ds = upload(hp, [("name", "swap", None), ("format", "npy", None), ("x", x, "x.npy"), ("y", y, "y.npy")])
    c.check(st == 201, "upload swap: %s" % st)
    sid = one_trial_study(hp, "swap", {"name": "swap", "validation_split": 20},
                          {"layers": [{"dense": {"units": 8, "activation": "relu"}}, {"dense": {"units": 3}}]})
    m = trial_model(hp, sid)
    st, out = hp.request("POST", "/api/v1/models/%d/predict" % m["id"], {"inputs": [[0.1] * 400]})
    c.check(st == 200, "predict before the swap: %s" % st)
    hp.ok("DELETE", "/api/v1/datasets/%d" % ds["id"])
    x, y = make_npy(n=60, f=2, classes=3)
    st, _ = upload(hp, [("name", "swap", None), ("format", "npy", None), ("x", x, "x.npy"), ("y", y, "y.npy")])
    for rows in (1, 4096):
        st, out = hp.request("POST", "/api/v1/models/%d/predict" % m["id"], {"inputs": [[0.5, 0.5]] * rows})
        c.check(st == 409 and out["error"]["field"] == "id" and "dataset" in out["error"]["message"],
                "predict %d row(s) of the replaced dataset -> 409 naming id: %s %s" % (rows, st, out))
    c.check(hp.proc.poll() is None, "hpod is up")


def npy_u8_or_f32(n, f, dtype):
    """x of values 0..255 as uint8 (hpod scales it by 1/255) or float32 (as is)."""
    import numpy as np
    import io
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, size=(n, f)).astype(dtype)
    y = (x[:, 0] > 127).astype("<i8")
    out = []
    for a in (x, y):
        b = io.BytesIO()
        np.save(b, a)
        out.append(b.getvalue())
    return out


def check_dataset_swap_same_shape(hp, c):
    x, y = npy_u8_or_f32(60, 6, "<f4")
    st, ds = upload(hp, [("name", "pix", None), ("format", "npy", None), ("x", x, "x.npy"), ("y", y, "y.npy")])
    sid = one_trial_study(hp, "pix", {"name": "pix", "validation_split": 20}, {"layers": [{"dense": {"units": 2}}]})
    spec = hp.ok("GET", "/api/v1/studies/%d" % sid)["definition"]
    c.check(spec["dataset"] == {"name": "pix", "id": ds["id"], "validation_split": 20},
            "the definition pins the dataset it names: %s" % spec["dataset"])
    m = trial_model(hp, sid)
    rows = {"inputs": [[200.0, 3.0, 90.0, 10.0, 250.0, 7.0]]}
    before = hp.ok("POST", "/api/v1/models/%d/predict" % m["id"], rows)["predictions"]
    doc = hp.ok("GET", "/api/v1/studies/%d/export" % sid)
    hp.ok("DELETE", "/api/v1/datasets/%d" % ds["id"])
    x, y = npy_u8_or_f32(60, 6, "u1")
    st, ds2 = upload(hp, [("name", "pix", None), ("format", "npy", None), ("x", x, "x.npy"), ("y", y, "y.npy")])
    c.check(st == 201 and ds2.get("scale_u8") is True, "pix uploaded again as uint8: %s %s" % (st, ds2))
    for when in ("now", "after a restart"):
        st, out = hp.request("POST", "/api/v1/models/%d/predict" % m["id"], rows)
        c.check(st == 409 and out["error"]["field"] == "id" and "dataset" in out["error"]["message"],
                "%s: predict of a model whose dataset was replaced (same shape, uint8) -> 409 naming id, not other "
                "answers (trained: %s): %s %s" % (when, before, st, out))
        st, out = hp.request("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 1})
        c.check(st == 409, "%s: a refit -> 409: %s %s" % (when, st, out))
        if when == "now":
            hp.stop()
            hp.start()
    again = dict(spec, load_if_exists=True)
    again["dataset"] = {"name": "pix", "validation_split": 20}
    st, out = hp.request("POST", "/api/v1/studies", again)
    c.check(st == 409 and out["error"]["field"] == "dataset.id",
            "get-or-create of its definition on the replaced dataset -> 409 naming dataset.id: %s %s" % (st, out))
    st, out = hp.request("GET", "/api/v1/studies/%d/export" % sid)
    c.check(st == 409 and out["error"]["field"] == "id",
            "export of the study that can no longer be loaded -> 409 naming id (was a 400 naming nothing): %s %s"
            % (st, out))
    # an export names the dataset by name for the hpod it goes to: its id there is another's
    st, out = hp.request("POST", "/api/v1/studies/import", dict(doc, name="pix-imported"))
    got = hp.ok("GET", "/api/v1/studies/%d" % out["study"]["id"])["definition"]["dataset"] if st == 201 else None
    c.check(got == {"name": "pix", "id": ds2["id"], "validation_split": 20},
            "an import finds the dataset by its name, and pins that one: %s %s" % (st, got if got else out))


def check_unpinned_study(hp, c):
    """A study stored before definitions pinned their dataset (no dataset.id: the test strips it from the
    row) reads the dataset of its name only when that one was uploaded before the study was created."""
    x, y = npy_u8_or_f32(60, 6, "<f4")
    st, ds = upload(hp, [("name", "old", None), ("format", "npy", None), ("x", x, "x.npy"), ("y", y, "y.npy")])
    sid = one_trial_study(hp, "old", {"name": "old", "validation_split": 20}, {"layers": [{"dense": {"units": 2}}]})
    m = trial_model(hp, sid)
    hp.stop()
    db = sqlite3.connect(os.path.join(hp.data_dir, "hpo.db"))
    db.execute("UPDATE studies SET spec = json_remove(spec, '$.dataset.id') WHERE id = ?", (sid,))
    db.commit()
    db.close()
    hp.start()
    rows = {"inputs": [[200.0, 3.0, 90.0, 10.0, 250.0, 7.0]]}
    st, out = hp.request("POST", "/api/v1/models/%d/predict" % m["id"], rows)
    c.check(st == 200, "an unpinned study on the dataset it was created on still predicts: %s %s" % (st, out))
    hp.ok("DELETE", "/api/v1/datasets/%d" % ds["id"])
    x, y = npy_u8_or_f32(60, 6, "u1")
    upload(hp, [("name", "old", None), ("format", "npy", None), ("x", x, "x.npy"), ("y", y, "y.npy")])
    st, out = hp.request("POST", "/api/v1/models/%d/predict" % m["id"], rows)
    c.check(st == 409 and out["error"]["field"] == "id",
            "an unpinned study never reads a dataset of its name uploaded after it was created: %s %s" % (st, out))


def check_non_finite(hp, c):
    rng = random.Random(1)
    rows = ["%s,%d" % (",".join("%.3f" % (k + rng.gauss(0, .3)) for _ in range(4)), k) for k in [i % 3 for i in range(120)]]
    st, _ = upload(hp, [("name", "lin", None), ("format", "csv", None), ("label_column", "label", None),
                        ("file", csv_rows("a,b,c,d,label", rows), "l.csv")])
    sid = one_trial_study(hp, "lin", {"name": "lin", "validation_split": 30}, {"layers": [{"dense": {"units": 3}}]})
    m = trial_model(hp, sid)
    url = "/api/v1/models/%d/predict" % m["id"]
    st, out = hp.request("POST", url, {"inputs": [[1e300] * 4]})
    c.check(st == 400 and out["error"]["field"] == "inputs" and "float range" in out["error"]["message"],
            "an input beyond a float -> 400 naming inputs: %s %s" % (st, out))
    st, out = hp.request("POST", url, {"inputs": [[3e38, -3e38, 3e38, -3e38], [0.5] * 4]})
    preds = out.get("predictions", [])
    c.check(st == 200 and [len(p) for p in preds] == [3, 3] and None in preds[0] and None not in preds[1]
            and out["classes"][0] is None and isinstance(out["classes"][1], int),
            "outputs that are not finite are null, rows keep 3 values, the class null: %s %s" % (st, out))
    hp.ok("DELETE", "/api/v1/studies/%d" % sid)


def check_binary(hp, c):
    rng = random.Random(3)
    rows = ["%.3f,%.3f,%s" % (3 * k + rng.gauss(0, .3), -3 * k + rng.gauss(0, .3), ["no", "yes"][k])
            for k in [i % 2 for i in range(300)]]
    upload(hp, [("name", "bin", None), ("format", "csv", None), ("label_column", "label", None),
                ("file", csv_rows("a,b,label", rows), "b.csv")])
    sid = one_trial_study(hp, "bin", {"name": "bin", "validation_split": 100},
                          {"loss": "binary_crossentropy", "layers": [{"dense": {"units": 8, "activation": "relu"}},
                                                                     {"dense": {"units": 1, "activation": "sigmoid"}}]},
                          metric="val_accuracy", direction="maximize")
    m = trial_model(hp, sid)
    st, out = hp.request("POST", "/api/v1/models/%d/predict" % m["id"], {"inputs": [[0, 0], [3, -3], [-3, 3]]})
    ok = st == 200 and all((p[0] >= 0.5) == (k == 1) and lab == ["no", "yes"][k]
                           for p, k, lab in zip(out["predictions"], out["classes"], out["labels"]))
    c.check(ok and out["classes"][1] == 1, "one sigmoid output: class 1 (yes) where p >= 0.5: %s %s" % (st, out))
    hp.ok("DELETE", "/api/v1/studies/%d" % sid)


def check_ensemble_keeps_members(hp, c):
    spec = {"name": "keep", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
            "space": {"lr": {"type": "float", "low": 1e-7, "high": 1e-2, "log": True}},
            "dataset": {"name": "fashion-mnist", "limit": 3000, "validation_split": 500},
            "training": {"max_epochs": 3, "batch_size": 32},
            "tuner": {"algorithm": "random", "seed": 3, "max_trials": 12}}
    sid = hp.ok("POST", "/api/v1/studies", spec)["id"]
    # the worst trial there can be: it does not stay among the best 8; the
    # ensemble is asked for while it still is (trials of ~0.1 s or more,
    # and no 8 of them end between its end and the request)
    weak = hp.ok("POST", "/api/v1/studies/%d/enqueue" % sid, {"params": {"lr": 1e-7}})["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/trials/%d" % weak)["state"] == "complete", 120, 0.01)
    e = hp.ok("POST", "/api/v1/studies/%d/ensembles" % sid, {"trials": [weak]})
    e = wait_state(hp, "/api/v1/models/%d" % e["id"], ("complete", "failed"))
    c.check(e["state"] == "complete", "an ensemble of one trial, made while its study runs: %s" % e)
    wait_state(hp, "/api/v1/studies/%d" % sid, ("complete",), 300)
    st, out = hp.request("POST", "/api/v1/models/%d/predict" % e["id"], {"inputs": [[0] * 784]})
    c.check(st == 200, "the ensemble of a trial outside the best 8 still predicts after the study: %s %s" % (st, out))
    hp.ok("DELETE", "/api/v1/studies/%d" % sid)


def check_ensemble_non_finite(hp, c):
    # the last row, a validation one, has features at float32's largest
    # value (a dataset holds finite numbers only): the logits of the class
    # whose weights sum past 1 overflow, and the softmax there is NaN
    rng = random.Random(1)
    rows = ["%s,%d" % (",".join("%.3f" % (k + rng.gauss(0, .3)) for _ in range(4)), k) for k in [i % 3 for i in range(200)]]
    rows[-1] = ",".join(["3.4e38"] * 4) + rows[-1][rows[-1].rindex(","):]
    upload(hp, [("name", "nanval", None), ("format", "csv", None), ("label_column", "label", None),
                ("file", csv_rows("a,b,c,d,label", rows), "n.csv")])
    sid = one_trial_study(hp, "nanval", {"name": "nanval", "validation_split": 50},
                          {"layers": [{"dense": {"units": 3}}]}, metric="val_accuracy", direction="maximize", trials=2)
    tids = [t["id"] for t in hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]]
    for method in ("mean", "greedy"):
        e = hp.ok("POST", "/api/v1/studies/%d/ensembles" % sid, {"trials": tids, "method": method})
        e = wait_state(hp, "/api/v1/models/%d" % e["id"], ("complete", "failed"))
        members = (e.get("result") or {}).get("members", [])
        c.check(e["state"] == "failed" and "no member could be used" in (e.get("error") or "")
                and all("not finite" in (mb.get("skipped") or "") for mb in members),
                "%s over non-finite validation predictions: failed, each member skipped with the reason: %s"
                % (method, e))
    hp.ok("DELETE", "/api/v1/studies/%d" % sid)


def check_dataset_in_use(hp, c):
    st, ds = upload(hp, [("name", "used", None), ("format", "csv", None), ("label_column", "species", None),
                         ("file", make_csv(rows=600), "u.csv")])
    sid = one_trial_study(hp, "used", {"name": "used", "validation_split": 100},
                          {"layers": [{"dense": {"units": 16, "activation": "relu"}}, {"dense": {"units": 3}}]},
                          trials=2)
    # the slot is busy with a long study, so the refit stays queued
    busy = hp.ok("POST", "/api/v1/studies", {"name": "busy", "model": {"template": "mlp"},
                                             "dataset": {"name": "fashion-mnist", "limit": 2000},
                                             "training": {"max_epochs": 10000}, "tuner": {"max_trials": 1}})["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % busy)["total"] > 0, 60)
    refit = hp.ok("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 1})["refits"][0]["id"]
    st, out = hp.request("DELETE", "/api/v1/datasets/%d" % ds["id"])
    c.check(st == 409 and out["error"]["field"] == "id" and "model %d" % refit in out["error"]["message"],
            "deleting a dataset a queued refit needs -> 409 naming id: %s %s" % (st, out))
    hp.ok("POST", "/api/v1/studies/%d/cancel" % busy)
    wait_state(hp, "/api/v1/models/%d" % refit, ("complete", "failed"))
    st, _ = hp.request("DELETE", "/api/v1/datasets/%d" % ds["id"])
    c.check(st == 204, "deleted once the refit ended: %s" % st)
    return sid, refit


def check_unloadable(args, hp, c, sid, refit):
    c.check(hp.stop() == 0, "graceful stop")
    hp2 = Hpod(args.hpod, data_dir=hp.data_dir, args=SLOT).start()
    try:
        for method, path, body in (("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 1}),
                                   ("POST", "/api/v1/studies/%d/ensembles" % sid, {"top_n": 1}),
                                   ("POST", "/api/v1/models/%d/predict" % refit, {"inputs": [[0, 0, 0, 0]]})):
            st, out = hp2.request(method, path, body)
            c.check(st == 409 and out["error"]["field"] == "id" and "dataset" in out["error"]["message"],
                    "%s on a study that can no longer be loaded -> 409 naming id with the reason: %s %s"
                    % (path, st, out))
        c.check(hp2.stop() == 0, "graceful stop")
    finally:
        hp2.cleanup()


def check_datasets_and_body(hp, c):
    x, y = make_npy(n=40, f=3, classes=2)
    st, ds = upload(hp, [("name", "cls", None), ("format", "npy", None), ("x", x, "x.npy"), ("y", y, "y.npy")])
    c.check(st == 201 and ds["task"] == "classification" and "y_dim" not in ds,
            "a dataset of classes lists no y_dim: %s" % ds)
    st, out = hp.request("POST", "/api/v1/models/1/predict", {"inputs": [[0.0] * 1000] * 300})
    c.check(st == 413 and "1048576 bytes" in out["error"]["message"] and "--max-body" in out["error"]["message"],
            "a body over --max-body -> 413 naming the limit: %s %s" % (st, out))


def check_model_is_the_value_epoch(hp, c):
    """A trial's model is the epoch its value comes from: the objective's
    best (val_accuracy) when early stopping watches val_loss, and with
    batch normalisation its running statistics of that epoch too."""
    bn = [{"batchnorm": {"momentum": 0.9}}]
    for name, extra in (("monitor", []), ("batchnorm", bn)):
        layers = [{"flatten": {}}, {"dense": {"units": 128}}] + extra + [{"activation": "relu"}, {"dense": {"units": 10}}]
        spec = {"name": "value-epoch-" + name, "objective": {"metric": "val_accuracy"},
                "model": {"layers": layers, "optimizer": {"name": "adam", "learning_rate": 0.02}},
                "space": {"u": {"type": "int", "low": 1, "high": 2}},
                "dataset": {"name": "fashion-mnist", "limit": 3000, "validation_split": 1500},
                "training": {"max_epochs": 12, "batch_size": 64,
                             "early_stopping": {"patience": 100, "monitor": "val_loss"}},
                "tuner": {"algorithm": "random", "seed": 3, "max_trials": 1}}
        sid = hp.ok("POST", "/api/v1/studies", spec)["id"]
        wait_state(hp, "/api/v1/studies/%d" % sid, ("complete",))
        t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
        m = trial_model(hp, sid)
        got = ((m.get("result") or {}).get("val") or {}).get("accuracy")
        print("  %s: value %.4f at epoch %s, model %s" % (name, t["value"], t.get("best_epoch"), got))
        c.check(m["state"] == "complete" and got is not None and abs(got - t["value"]) < 1e-6,
                "%s: the trial model's val accuracy %s is the trial's value %s (best epoch %s)"
                % (name, got, t["value"], t.get("best_epoch")))


def download(hp, path):
    """(status, body bytes, headers) of a GET."""
    try:
        with urllib.request.urlopen(hp.url + path, timeout=60) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def check_damaged_weights(hp, c):
    """The weights download sends the stored file from disk, whole, with
    its length; a weights file damaged on disk is a 409 saying so, and
    hpod stays up (before: a directory or a 1 TiB sparse file in its place
    aborted hpod, "out of memory"; an empty one was a 200 with no body; a
    missing one a 500)."""
    sid = one_trial_study(hp, "weights-files", {"name": "fashion-mnist", "limit": 300, "validation_split": 100},
                          {"template": "mlp"})
    m = trial_model(hp, sid)
    path = os.path.join(hp.data_dir, "models", "model-%d.safetensors" % m["id"])
    weights = "/api/v1/models/%d/weights" % m["id"]
    stored = open(path, "rb").read()
    status, body, headers = download(hp, weights)
    c.check(status == 200 and body == stored and headers.get("Content-Length") == str(len(stored)),
            "the weights download is the stored file (%d, %d of %d bytes, Content-Length %s)"
            % (status, len(body), len(stored), headers.get("Content-Length")))
    os.rename(path, path + ".kept")
    damages = (("missing", lambda: None, "is missing"),
               ("a directory", lambda: os.mkdir(path), "damaged"),
               ("empty", lambda: open(path, "wb").close(), "damaged"),
               ("truncated", lambda: open(path, "wb").write(stored[:len(stored) // 2]), "damaged"),
               ("1 TiB sparse", lambda: (open(path, "wb").write(stored), os.truncate(path, 1 << 40)), "damaged"))
    for name, damage, said in damages:
        damage()
        status, body, _ = download(hp, weights)
        err = json.loads(body)["error"] if status == 409 else body[:200]
        c.check(status == 409 and said in err["message"] and err["field"] == "id",
                "weights file %s: 409 naming id, \"%s\" (%d %s)" % (name, said, status, err))
        if os.path.isdir(path):
            os.rmdir(path)
        elif os.path.exists(path):
            os.remove(path)
    os.rename(path + ".kept", path)
    c.check(hp.ok("GET", "/healthz") is not None and download(hp, weights)[1] == stored,
            "hpod is up, and the restored file downloads again")


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=SLOT).start()
    try:
        t0 = time.time()
        check_dataset_swap(hp, c)
        check_dataset_swap_same_shape(hp, c)
        check_unpinned_study(hp, c)
        check_model_is_the_value_epoch(hp, c)
        check_non_finite(hp, c)
        check_binary(hp, c)
        check_ensemble_keeps_members(hp, c)
        check_ensemble_non_finite(hp, c)
        check_datasets_and_body(hp, c)
        check_damaged_weights(hp, c)
        sid, refit = check_dataset_in_use(hp, c)
        print("  %.0f s" % (time.time() - t0))
        check_unloadable(args, hp, c, sid, refit)
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
