"""A CPU whose oneDNN cannot run bf16 (an AVX2 CPU; simulated here with
ONEDNN_MAX_CPU_ISA=AVX2, which caps oneDNN below AVX-512 on any CPU):
hpod says so in /metrics (hpo_build_info's cpu_bf16="no"); a mixed_bf16
trial on its CPU slot fails with the reason, naming training.precision,
and is data (the study goes on, hpod keeps serving); an fp32 study on the
same hpod completes; mixed_fp16 (f32 GEMMs on the CPU) completes too."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hpod import Checks, Hpod, parse_args, wait_for  # noqa: E402


def study(name, precision):
    return {"name": name, "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
            "dataset": {"name": "fashion-mnist", "limit": 600, "validation_split": 100},
            "space": {"lr": {"type": "choice", "values": [0.003]}},
            "training": {"max_epochs": 1, "batch_size": 64, "precision": precision},
            "tuner": {"algorithm": "random", "seed": 1, "max_trials": 1}}


def run(hp, name, precision):
    sid = hp.ok("POST", "/api/v1/studies", study(name, precision))["id"]
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 120)
    t = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["trials"][0]
    print("  %s: %s %s %s" % (precision, t["state"], t.get("value"), t.get("error")))
    return t


def main():
    args = parse_args()
    c = Checks()
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    try:
        text = hp.request("GET", "/metrics")[1]
        c.check('cpu_bf16="no"' in text, "/metrics: hpo_build_info says cpu_bf16=\"no\"")
        t = run(hp, "bf16-here", "mixed_bf16")
        err = t.get("error") or ""
        c.check(t["state"] == "failed" and "training.precision" in err and "AVX-512" in err,
                "a mixed_bf16 trial fails with the reason and the field: %r" % err)
        for precision in ("fp32", "mixed_fp16"):
            t = run(hp, "then-" + precision, precision)
            c.check(t["state"] == "complete" and (t.get("value") or 0) > 0.3,
                    "%s trains on the same hpod: %s %s" % (precision, t["state"], t.get("value")))
        c.check(hp.request("GET", "/healthz")[0] == 200, "hpod keeps serving")
        c.check(hp.stop() == 0, "graceful shutdown")
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
