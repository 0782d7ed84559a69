"""The end of the workflow through the API on Fashion-MNIST: a study, refits
of the top 4 (on train+validation for ceil(1.2 x best epoch) epochs,
evaluated on the test split), a weighted ensemble of them whose test
accuracy is reported beside each member's and is at least the best
member's; the weights file parses; predict answers for raw pixels."""
import gzip
import json
import math
import os
import struct

from hpod import Checks, Hpod, parse_args, read_events, wait_for

STUDY = {"name": "refit-ensemble", "objective": {"metric": "val_accuracy"},
         "model": {"template": "mlp"},
         "space": {"optimizer": {"type": "choice", "values": ["adam"]},
                   "lr": {"type": "float", "low": 5e-4, "high": 5e-3, "log": True}},
         "dataset": {"name": "fashion-mnist", "limit": 12000, "validation_split": 6000},
         "training": {"max_epochs": 6, "batch_size": 64},
         "tuner": {"algorithm": "tpe", "seed": 2, "max_trials": 8}}


def test_rows(n):
    """The first n images of the Fashion-MNIST test set as raw pixel rows, and their labels."""
    d = os.environ.get("HPO_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    with gzip.open(os.path.join(d, "t10k-images-idx3-ubyte.gz")) as f:
        f.read(16)
        pix = f.read(784 * n)
    with gzip.open(os.path.join(d, "t10k-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = list(f.read(n))
    return [list(pix[i * 784:(i + 1) * 784]) for i in range(n)], labels


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:2"]).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 300)
        refits = hp.ok("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 4})["refits"]
        c.check(len(refits) == 4, "4 refits queued")
        for r in refits:
            t = hp.ok("GET", "/api/v1/trials/%d" % r["trial_id"])
            c.check(r["how"]["epochs"] == math.ceil(1.2 * t["best_epoch"]),
                    "refit epochs = ceil(1.2 x best_epoch %d) = %d" % (t["best_epoch"], r["how"]["epochs"]))
        wait_for(lambda: all(hp.ok("GET", "/api/v1/models/%d" % r["id"])["state"] == "complete" for r in refits), 300)
        listed = hp.ok("GET", "/api/v1/studies/%d/refits" % sid)["refits"]
        c.check(sorted(m["id"] for m in listed) == sorted(r["id"] for r in refits), "GET refits lists them")
        ens = hp.ok("POST", "/api/v1/studies/%d/ensembles" % sid,
                    {"members": [r["id"] for r in refits], "method": "weighted"})
        wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % ens["id"])["state"] in ("complete", "failed"), 300)
        e = hp.ok("GET", "/api/v1/models/%d" % ens["id"])
        c.check(e["state"] == "complete", "the ensemble is built: %s" % e["error"])
        res = e["result"]
        print("| model | weight | val acc (search-phase) | test acc |\n|---|---|---|---|")
        for m in res["members"]:
            print("| refit %d (trial %d) | %.3f | %.4f | %.4f |" % (m["model_id"], m["trial_id"], m["weight"],
                                                                  m["val"]["accuracy"], m["test"]["accuracy"]))
        print("| weighted ensemble | | %.4f | %.4f |" % (res["val"]["accuracy"], res["test"]["accuracy"]))
        best_member = max(m["test"]["accuracy"] for m in res["members"])
        c.check(res["test"]["accuracy"] >= best_member,
                "ensemble test accuracy %.4f >= best member's %.4f" % (res["test"]["accuracy"], best_member))
        c.check(abs(sum(m["weight"] for m in res["members"]) - 1) < 1e-9, "weights on the simplex")

        status, raw, disposition = 0, None, ""
        import urllib.request
        with urllib.request.urlopen(hp.url + "/api/v1/models/%d/weights" % refits[0]["id"], timeout=30) as r:
            status, raw, disposition = r.status, r.read(), r.headers.get("Content-Disposition", "")
        c.check(disposition == 'attachment; filename="model-%d.safetensors"' % refits[0]["id"],
                "weights: Content-Disposition names the file (%r)" % disposition)
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        meta = header.pop("__metadata__")
        c.check(status == 200 and meta["format"] == "hpo-model-1" and json.loads(meta["input_shape"]) == [28, 28, 1],
                "weights: a safetensors file with its metadata")
        total = 0
        for name, t in header.items():
            size = 4
            for d in t["shape"]:
                size *= d
            c.check(t["dtype"] == "F32" and t["data_offsets"][1] - t["data_offsets"][0] == size, "tensor %s" % name)
            total = max(total, t["data_offsets"][1])
        c.check(8 + n + total == len(raw), "the data section holds exactly the tensors")

        rows, labels = test_rows(200)
        p = hp.ok("POST", "/api/v1/models/%d/predict" % ens["id"], {"inputs": rows})
        acc = sum(int(a == b) for a, b in zip(p["classes"], labels)) / len(labels)
        c.check(len(p["predictions"]) == 200 and abs(sum(p["predictions"][0]) - 1) < 1e-5,
                "ensemble predict: 200 probability rows")
        c.check(acc > 0.7, "ensemble predict accuracy on 200 test images: %.3f" % acc)
        status, out = hp.request("POST", "/api/v1/models/%d/predict" % refits[0]["id"], {"inputs": [[1, 2, 3]]})
        c.check(status == 400 and out["error"]["field"] == "inputs", "a row of the wrong size is 400 naming inputs")
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
