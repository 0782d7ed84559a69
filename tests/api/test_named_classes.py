"""Class labels by name (issue 17): a CSV whose label column holds names
(iris.csv's species, as in the README's example) uploads, trains and
predicts. The dataset lists its classes (sorted names, class k the k-th);
the exported weights carry the label mapping ("classes") and the input
scaling ("input_scale") in their safetensors metadata, so they can be used
outside hpod; predict answers each row's label beside its class number.
The study (the mlp template with "layers" overridden) shows its effective
space: the template's, with the override."""
import json
import random
import struct
import time
import urllib.request

from hpod import Checks, Hpod, parse_args, wait_for
from test_datasets import upload

SPECIES = ["setosa", "versicolor", "virginica"]


def iris_like(rows=150):
    """Three separable blobs named like iris.csv's species, quoted as some files do."""
    rng = random.Random(3)
    lines = ["sepal_length,sepal_width,petal_length,petal_width,species"]
    for i in range(rows):
        k = i % 3
        feats = ["%.2f" % (2 * k + rng.gauss(0, 0.2)) for _ in range(4)]
        lines.append(",".join(feats + ['"%s"' % SPECIES[k]]))
    return ("\n".join(lines) + "\n").encode()


def weights_metadata(hp, model_id):
    with urllib.request.urlopen(hp.url + "/api/v1/models/%d/weights" % model_id, timeout=30) as r:
        raw = r.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n])["__metadata__"]


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        st, out = upload(hp, [("name", "iris", None), ("format", "csv", None),
                              ("label_column", "species", None), ("file", iris_like(), "iris.csv")])
        c.check(st == 201 and out.get("classes") == SPECIES and out.get("n_classes") == 3,
                "a CSV of species names uploads as 3 named classes (%s %s)" % (st, out))
        spec = {"name": "iris", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
                "dataset": {"name": "iris", "validation_split": 0.2},
                "space": {"layers": {"type": "int", "low": 1, "high": 1}},
                "training": {"max_epochs": 15, "batch_size": 16},
                "tuner": {"algorithm": "random", "seed": 1, "max_trials": 1}}
        sid = hp.ok("POST", "/api/v1/studies", spec)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
        # the effective space: the mlp template's own, with the definition's override of layers
        study = hp.ok("GET", "/api/v1/studies/%d" % sid)
        space = study.get("space", {})
        c.check(study["definition"]["space"] == spec["space"] and space.get("layers") == spec["space"]["layers"] and
                set(space) == {"layers", "units", "dropout", "lr", "optimizer", "momentum"} and
                space["momentum"].get("condition") == {"optimizer": ["sgd"]},
                "the study shows the template's space with the override (%s)" % space)
        trial = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
        c.check(trial["state"] == "complete", "the study trains on it (%s)" % trial["state"])
        model = hp.ok("POST", "/api/v1/trials/%d/model" % trial["id"], {})
        wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % model["id"])["state"] in ("complete", "failed"), 60)
        model = hp.ok("GET", "/api/v1/models/%d" % model["id"])
        c.check(model["state"] == "complete", "a model from the trial (%s)" % model.get("error"))
        meta = weights_metadata(hp, model["id"])
        c.check(json.loads(meta.get("classes", "null")) == SPECIES,
                "the weights' metadata maps class k to its name (%r)" % meta.get("classes"))
        c.check(float(meta.get("input_scale", "nan")) == 1.0,
                "the weights' metadata gives the input scaling (%r)" % meta.get("input_scale"))
        rows = [[0.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0], [4.0, 4.0, 4.0, 4.0]]
        p = hp.ok("POST", "/api/v1/models/%d/predict" % model["id"], {"inputs": rows})
        c.check(p.get("labels") == [SPECIES[k] for k in p["classes"]] and len(p["labels"]) == 3,
                "predict answers each row's label beside its class (%s)" % p)
        c.check(p["labels"] == SPECIES, "and the blobs get their species (%s)" % p["labels"])
        # fashion-mnist: uint8 pixels scaled by 1/255 before the first layer
        fm = {"name": "fm", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
              "dataset": {"name": "fashion-mnist", "limit": 200, "validation_split": 50},
              "space": {"layers": {"type": "int", "low": 1, "high": 1}},
              "training": {"max_epochs": 1, "batch_size": 50},
              "tuner": {"algorithm": "random", "seed": 1, "max_trials": 1}}
        fid = hp.ok("POST", "/api/v1/studies", fm)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % fid)["state"] == "complete", 120)
        ft = hp.ok("GET", "/api/v1/studies/%d/trials" % fid)["trials"][0]
        fmodel = hp.ok("POST", "/api/v1/trials/%d/model" % ft["id"], {})
        wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % fmodel["id"])["state"] in ("complete", "failed"), 60)
        fmeta = weights_metadata(hp, fmodel["id"])
        c.check(abs(float(fmeta.get("input_scale", "nan")) - 1 / 255) < 1e-9 and "classes" not in fmeta,
                "image weights say their inputs are scaled by 1/255 (%r)" % fmeta.get("input_scale"))
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
