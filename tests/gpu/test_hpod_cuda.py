"""GPU slots end to end (ctest label gpu): a real hpod on 127.0.0.1 trains on a GPU.

- hpod --devices cuda:0x2,cpu:1 (two slots on GPU 0 beside a CPU slot) runs
  an embedded study (the mlp template with dropout and Adam on 12,000
  Fashion-MNIST rows, mixed_bf16 (mixed_fp16 where the CPU slot cannot
  train bf16), steps_per_execution 4, 6 random trials)
  to the end: every
  trial completes, the GPU slots ran trials and those learn (val_accuracy
  > 0.75), and /metrics names each slot's device and the GPU's memory.
- hpod --devices cuda:0: a CNN (conv2d, maxpool2d; then with batchnorm,
  then with a residual block) trains on the GPU and learns, and so does
  the CNN in mixed_fp16 (dynamic loss scaling on the device); a refit of
  the fp16 study's trial (train + validation, 1.2x its best epoch) trains
  on the GPU (the hpod's only slot) and scores on the test set.
- hpod --devices cpu:1,cuda:0 (the CPU slot first): a study with
  training.device "cuda" runs on the GPU slot, one with "cpu" on the CPU
  slot, both to the end (the scheduler fills every idle slot, not only
  the first one: a slot that has no job of the studies' kinds leaves the
  next one its turn), and each study's refit trains on a slot of its kind;
  a study of any device, one trial at a time, trains on the GPU slot.
- hpod --devices cuda:all,cuda:0 is refused at start: two slots named
  cuda:0/0.
Without a usable GPU hpod must refuse --devices cuda:0x2 at start with
"no CUDA device: ..." (exit 2); that is checked, then the test is skipped
(exit 77). tests/gpu/run-on-device.sh runs it on a device machine with the
bundle's hpod.
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from hpod import Checks, Hpod, parse_args, wait_for  # noqa: E402

DATA = {"name": "fashion-mnist", "limit": 12000, "validation_split": 2000}


def start_or_skip(args, devices):
    hp = Hpod(args.hpod, args=["--devices", devices])
    try:
        return hp.start(timeout=60)
    except RuntimeError as e:
        hp.cleanup()
        if "no CUDA device: " in str(e):
            print("skipped: %s" % str(e).strip().splitlines()[-1])
            sys.exit(77)
        raise


def check_study(hp, c):
    # mixed_bf16 wherever the CPU slot can train it too (hpo_build_info's
    # cpu_bf16: oneDNN's bf16 kernels need AVX-512), else mixed_fp16
    text = hp.request("GET", "/metrics")[1]
    precision = "mixed_fp16" if 'cpu_bf16="no"' in text else "mixed_bf16"
    print("  the study trains in %s" % precision)
    study = {"name": "gpu-mlp", "objective": {"metric": "val_accuracy"},
             "model": {"template": "mlp"}, "dataset": DATA,
             "space": {"layers": {"type": "int", "low": 1, "high": 2},
                       "units": {"type": "choice", "values": [128, 256]},
                       "dropout": {"type": "float", "low": 0.0, "high": 0.3},
                       "lr": {"type": "choice", "values": [0.001, 0.003]},
                       "optimizer": {"type": "choice", "values": ["adam"]}},
             "training": {"max_epochs": 3, "batch_size": 128, "precision": precision,
                          "steps_per_execution": 4},
             "tuner": {"algorithm": "random", "seed": 5, "max_trials": 6}}
    t0 = time.time()
    sid = hp.ok("POST", "/api/v1/studies", study)["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 240)
    trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
    print("  study of 6 trials in %.1f s; slots %s" % (time.time() - t0, sorted({t["slot"] for t in trials})))
    c.check(len(trials) == 6 and all(t["state"] == "complete" for t in trials),
            "every trial completes: %s" % [(t["slot"], t["state"], t.get("error")) for t in trials])
    on_gpu = [t for t in trials if (t["slot"] or "").startswith("cuda:0/")]
    c.check(len(on_gpu) >= 2, "the GPU slots ran trials (%d of 6)" % len(on_gpu))
    for t in on_gpu:
        print("  %s: val_accuracy %.4f" % (t["slot"], t["value"] or 0))
    c.check(all((t["value"] or 0) > 0.75 for t in on_gpu), "trials on the GPU learn (val_accuracy > 0.75)")
    status, text = hp.request("GET", "/metrics")
    c.check(status == 200 and 'hpo_slot_info{slot="cuda:0/0",device="cuda:0"} 1' in text
            and 'hpo_slot_info{slot="cuda:0/1",device="cuda:0"} 1' in text,
            "/metrics names the GPU slots' device")
    c.check('hpo_gpu_memory_total_bytes{gpu="0"}' in text, "/metrics has the GPU's memory")


def cnn_study(name, extra_layers, precision="fp32"):
    return {"name": name, "objective": {"metric": "val_accuracy"},
            "model": {"layers": [{"conv2d": {"filters": 16, "kernel": 3, "activation": "relu"}},
                                 {"maxpool2d": {"pool": 2}}] + extra_layers +
                                [{"flatten": {}}, {"dense": {"units": 10, "activation": "softmax"}}],
                      "loss": "sparse_categorical_crossentropy",
                      "optimizer": {"name": "adam", "learning_rate": "$lr"}},
            "space": {"lr": {"type": "choice", "values": [0.002]}},
            "dataset": {"name": "fashion-mnist", "limit": 6000, "validation_split": 1000},
            "training": {"max_epochs": 2, "batch_size": 128, "precision": precision},
            "tuner": {"algorithm": "random", "seed": 1, "max_trials": 1}}


def check_cnn(args, c):
    hp = start_or_skip(args, "cuda:0")
    try:
        residual = {"residual": {"layers": [{"conv2d": {"filters": 16, "kernel": 3, "padding": "same"}}]}}
        for name, extra in (("gpu-cnn", []), ("gpu-cnn-bn", [{"batchnorm": {}}]), ("gpu-cnn-res", [residual])):
            sid = hp.ok("POST", "/api/v1/studies", cnn_study(name, extra))["id"]
            wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
            t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
            print("  %s on cuda:0: %s, val_accuracy %s" % (name, t["state"], t.get("value")))
            c.check(t["state"] == "complete" and (t.get("value") or 0) > 0.7,
                    "%s trains on the GPU slot and learns: %s %s %s" % (name, t["state"], t.get("value"), t.get("error")))
        sid = hp.ok("POST", "/api/v1/studies", cnn_study("gpu-cnn-fp16", [], "mixed_fp16"))["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
        t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
        print("  gpu-cnn-fp16 on cuda:0: %s, val_accuracy %s" % (t["state"], t.get("value")))
        c.check(t["state"] == "complete" and (t.get("value") or 0) > 0.7,
                "mixed_fp16 trains on the GPU slot and learns: %s %s %s" % (t["state"], t.get("value"), t.get("error")))
        refit = hp.ok("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 1})["refits"][0]
        wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % refit["id"])["state"] in ("complete", "failed"), 120)
        m = hp.ok("GET", "/api/v1/models/%d" % refit["id"])
        acc = ((m.get("result") or {}).get("test") or {}).get("accuracy") or 0
        print("  refit %d on cuda:0: %s, test accuracy %.4f, %s" % (refit["id"], m["state"], acc, m.get("error")))
        c.check(m["state"] == "complete" and acc > 0.7, "a refit trains on the GPU slot: %s %s" % (m["state"], acc))
        c.check(hp.request("GET", "/healthz")[0] == 200, "hpod keeps serving")
        c.check(hp.stop() == 0, "graceful shutdown")
    finally:
        hp.cleanup()


def check_device_kinds(args, c):
    hp = start_or_skip(args, "cpu:1,cuda:0")
    try:
        ids = {}
        # a study of any device, one trial at a time: the GPU slot, free, is
        # offered first (the CPU slot is named first)
        anyd = {"name": "on-any", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
                "dataset": {"name": "fashion-mnist", "limit": 2000, "validation_split": 500},
                "space": {"units": {"type": "choice", "values": [32]}},
                "training": {"max_epochs": 1, "batch_size": 100},
                "tuner": {"algorithm": "random", "seed": 3, "max_trials": 2, "parallel_trials": 1}}
        aid = hp.ok("POST", "/api/v1/studies", anyd)["id"]
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % aid)["state"] == "complete", 120)
        slots = [t["slot"] for t in hp.ok("GET", "/api/v1/studies/%d/trials" % aid)["trials"]]
        c.check(slots == ["cuda:0/0", "cuda:0/0"], "a study of any device trains on the free GPU slot: %s" % slots)
        for device in ("cuda", "cpu"):
            study = {"name": "on-" + device, "objective": {"metric": "val_accuracy"},
                     "model": {"template": "mlp"},
                     "dataset": {"name": "fashion-mnist", "limit": 2000, "validation_split": 500},
                     "space": {"layers": {"type": "int", "low": 1, "high": 1},
                               "units": {"type": "choice", "values": [32]},
                               "lr": {"type": "choice", "values": [0.003]}},
                     "training": {"max_epochs": 1, "batch_size": 100, "device": device},
                     "tuner": {"algorithm": "random", "seed": 3, "max_trials": 2}}
            ids[device] = hp.ok("POST", "/api/v1/studies", study)["id"]
        try:
            wait_for(lambda: all(hp.ok("GET", "/api/v1/studies/%d" % i)["state"] == "complete"
                                 for i in ids.values()), 120)
            done = True
        except AssertionError:
            done = False
        c.check(done, "a study asking for cuda and one asking for cpu both finish on cpu:1,cuda:0")
        for device, sid in ids.items():
            trials = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"]
            slots = sorted({t["slot"] or "" for t in trials})
            print("  training.device %s: trials %s on %s" % (device, [t["state"] for t in trials], slots))
            c.check(len(trials) == 2 and all(t["state"] == "complete" for t in trials)
                    and all(s.startswith(device + ":") for s in slots),
                    "training.device %s: both trials complete on %s slots: %s" % (device, device, slots))
        # a refit trains where its study's trials do (the model job's slot
        # is in the log: "model M (study S) starts on SLOT")
        for device, sid in ids.items():
            refit = hp.ok("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 1})["refits"][0]
            wait_for(lambda: hp.ok("GET", "/api/v1/models/%d" % refit["id"])["state"] in ("complete", "failed"), 120)
            m = hp.ok("GET", "/api/v1/models/%d" % refit["id"])
            with open(hp.log_path) as f:
                started = re.findall(r"model %d \(study %d\) starts on (\S+)" % (refit["id"], sid), f.read())
            print("  refit of the %s study: %s on %s" % (device, m["state"], started))
            c.check(m["state"] == "complete" and started and all(s.startswith(device + ":") for s in started),
                    "the %s study's refit trains on a %s slot: %s %s %s" % (device, device, m["state"], started,
                                                                             m.get("error")))
        c.check(hp.stop() == 0, "graceful shutdown")
    finally:
        hp.cleanup()


def check_duplicate_slot(args, c):
    # cuda:all names cuda:0/0 too: two slots of one name are refused at start
    hp = Hpod(args.hpod, args=["--devices", "cuda:all,cuda:0"])
    try:
        hp.start(timeout=30)
        why = "it started"
    except RuntimeError as e:
        why = str(e)
    finally:
        hp.cleanup()
    c.check("names slot cuda:0/0 twice" in why, "--devices cuda:all,cuda:0 is refused: %s" % why.strip()[-200:])


def main():
    args = parse_args()
    c = Checks()
    hp = start_or_skip(args, "cuda:0x2,cpu:1")
    try:
        check_study(hp, c)
        c.check(hp.stop() == 0, "graceful shutdown")
    finally:
        print(hp.log_tail(8))
        hp.cleanup()
    check_cnn(args, c)
    check_device_kinds(args, c)
    check_duplicate_slot(args, c)
    c.finish()


if __name__ == "__main__":
    main()
