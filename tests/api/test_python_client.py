"""The Python client (clients/python/hpo_client.py) against a real hpod:
optimize() on a quadratic (best near the optimum, stops at max_trials),
pruning through report(), tell's forms (values, failed, pruned, twice),
load_if_exists (hpod's get-or-create), user attributes and notes, typed errors (404, 400 naming the field, 401 with a wrong
or no token, 409 exhausted, no hpod), pause/resume/cancel/delete, dataset
uploads, an embedded study (fashion-mnist, 200 rows, 1 epoch, 2 trials)
waited on and followed through its events, then a refit, a trial model and
an ensemble that predict and give their weights; the retry rule (a GET
answered 503 + Retry-After is sent again, a POST never) on an hpod with
--max-connections-per-client 1; connections across fork(), ended threads,
a Ctrl-C or a signal handler's exception mid-request, event streams that
drop or stall, a body refused early (413); NaN as Optuna takes it (a
report is sent and the pruner decides, tell fails the trial, imported
reports are null), numpy arrays,
Optuna's FrozenTrial of several objectives, best_* on several objectives,
fields a Trial keeps, get_trials' order, a lease that runs out; and `pip
install` of clients/python into a venv, offline."""
import datetime
import enum
import gzip
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
import warnings

from hpod import Checks, Hpod, parse_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT_DIR = os.path.join(ROOT, "clients", "python")
sys.path.insert(0, CLIENT_DIR)
import hpo_client as hpo  # noqa: E402

TOKEN = "s3cret"
QUAD_SPACE = {"x": {"type": "float", "low": -5, "high": 5},
              "n": {"type": "int", "low": 0, "high": 6},
              "c": {"type": "choice", "values": ["a", "b"]}}


def quadratic(trial):
    p = trial.params
    return (p["x"] - 2) ** 2 + (p["n"] - 3) ** 2 + (0 if p["c"] == "a" else 0.5)


def raises(cls, fn, *a, **kw):
    """The exception fn raised if it is a cls, else None."""
    try:
        fn(*a, **kw)
    except cls as e:
        return e
    except Exception as e:  # noqa: BLE001 - reported as the wrong error
        print("  (raised %s: %s, wanted %s)" % (type(e).__name__, e, cls.__name__))
        return None
    return None


def test_rows(n):
    """The first n Fashion-MNIST test images as raw pixel rows."""
    d = os.environ.get("HPO_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    with gzip.open(os.path.join(d, "t10k-images-idx3-ubyte.gz")) as f:
        f.read(16)
        pix = f.read(784 * n)
    return [list(pix[i * 784:(i + 1) * 784]) for i in range(n)]


def csv_bytes(rows=60):
    lines = ["a,b,species"]
    for i in range(rows):
        k = i % 3
        lines.append("%.2f,%.2f,%d" % (k + (i % 7) * 0.05, k * 2 - (i % 5) * 0.05, k))
    return ("\n".join(lines) + "\n").encode()


def section_optimize(c, client):
    study = client.create_study("quad", QUAD_SPACE, direction="minimize",
                                tuner={"algorithm": "tpe", "seed": 1, "max_trials": 40})
    seen = []
    study.optimize(quadratic, n_trials=60, callbacks=[lambda s, t: seen.append((t.number, t.state, t.value))])
    trials = study.trials
    c.check(len(trials) == 40 and len(seen) == 40,
            "optimize(n_trials=60) stops quietly at max_trials 40: %d trials, %d callbacks" % (len(trials), len(seen)))
    c.check([t.number for t in trials] == list(range(40)), "trials by number 0..39")
    c.check(all(t.state == "complete" for t in trials), "every trial complete")
    c.check(all(st == "complete" and v is not None for _, st, v in seen), "callbacks see told trials")
    vals = {t.number: quadratic(t) for t in trials}
    c.check(all(abs(t.value - vals[t.number]) < 1e-9 for t in trials), "stored values are the objective's")
    best = study.best_trial
    c.check(abs(best.value - min(vals.values())) < 1e-12 and study.best_value == best.value,
            "best_trial is the minimum: %.4f" % best.value)
    c.check(study.best_params == best.params and set(best.params) == {"x", "n", "c"}, "best_params")
    c.check(best.value < 1.0 and best.params["n"] == 3 and best.params["c"] == "a" and abs(best.params["x"] - 2) < 1,
            "best near the optimum (x=2, n=3, c=a): %s -> %.4f" % (best.params, best.value))
    study.optimize(quadratic, n_trials=5)
    c.check(len(study.trials) == 40, "optimize on an exhausted study adds nothing")

    # load_if_exists: hpod's get-or-create (the same definition), the oldest of the name
    again = client.create_study("quad", QUAD_SPACE, direction="minimize",
                                tuner={"algorithm": "tpe", "max_trials": 40}, load_if_exists=True)
    c.check(again.id == study.id and again.name == "quad", "load_if_exists returns the existing study")
    try:
        client.create_study("quad", QUAD_SPACE, tuner={"algorithm": "random", "max_trials": 40}, load_if_exists=True)
        c.check(False, "load_if_exists with another definition raises Conflict")
    except hpo.Conflict as e:
        c.check(e.field == "tuner.algorithm", "load_if_exists with another definition: Conflict naming %s" % e.field)
    other = client.create_study("quad-2", QUAD_SPACE, load_if_exists=True, user_attrs={"owner": "me"}, note="n")
    c.check(other.id != study.id and other.name == "quad-2" and other.user_attrs == {"owner": "me"}
            and other.note == "n", "load_if_exists creates a missing one (with user_attrs and note)")
    dup = client.create_study("quad", QUAD_SPACE)
    c.check(dup.id not in (study.id, other.id), "without load_if_exists a new study is made")
    c.check(client.create_study("quad", load_if_exists=True).id == study.id,
            "load_if_exists without a space looks the name up: the oldest")

    # user attributes and notes (Optuna's set_user_attr, the dashboard's notes)
    other.set_user_attr("lr_hint", 0.01)
    other.set_user_attrs({"owner": None, "tags": ["a", "b"]})
    c.check(other.user_attrs == {"lr_hint": 0.01, "tags": ["a", "b"]}, "Study.set_user_attr(s): merged, None deletes")
    other.note = "tried the wide space"
    c.check(client.get_study(other.id).note == "tried the wide space", "Study.note")
    t = other.ask()
    t.set_user_attr("host", "gpu-1")
    t.report(0, 1.5, user_attrs={"step_s": 0.2})
    other.tell(t, 1.25, user_attrs={"host": None})
    t.note = "fine"
    t.refresh()
    c.check(t.user_attrs == {"step_s": 0.2} and t.note == "fine" and t.state == "complete",
            "Trial.set_user_attr, report/tell user_attrs, Trial.note (%s)" % t.user_attrs)
    try:
        t.set_user_attr("x" * 300, 1)
        c.check(False, "a long key raises InvalidArgument")
    except hpo.InvalidArgument as e:
        c.check(e.field == "user_attrs", "a long key: InvalidArgument naming user_attrs")
    c.check(client.find_study("no-such-name") is None, "find_study: None for an unknown name")
    c.check(client.get_study(study.id).name == "quad" and study in client.studies(), "get_study, studies")


def section_pruning(c, client):
    study = client.create_study("prune", {"x": {"type": "float", "low": 0, "high": 1}},
                                tuner={"algorithm": "random", "seed": 3, "max_trials": 24},
                                pruner={"algorithm": "median", "n_startup_trials": 2})
    record = {}

    def objective(trial):
        x = trial.params["x"]
        v = None
        for step in range(5):
            v = x + 1.0 / (step + 1)
            prune = trial.report(step, v)
            if prune != trial.should_prune():
                record["mismatch"] = True
            if prune:
                record[trial.number] = ("pruned", v)
                raise hpo.TrialPruned()
        record[trial.number] = ("complete", v)
        return v

    study.optimize(objective, n_trials=24)
    trials = study.trials
    pruned = [t for t in trials if t.state == "pruned"]
    c.check(len(trials) == 24, "24 trials")
    c.check(len(pruned) > 0 and len(pruned) < 22, "the median pruner stopped some trials: %d pruned" % len(pruned))
    c.check(all(record[t.number][0] == t.state for t in trials), "stored states follow report's answers")
    c.check(all(abs(t.value - record[t.number][1]) < 1e-12 for t in trials),
            "a pruned trial keeps its last reported value")
    c.check("mismatch" not in record, "should_prune() repeats the last report's answer")
    xs_pruned = [t.params["x"] for t in pruned]
    xs_complete = sorted(t.params["x"] for t in trials if t.state == "complete")
    c.check(min(xs_pruned) > xs_complete[0], "the best x was never pruned")
    full = client.trial(pruned[0].id)
    c.check(sorted(full.intermediate) == list(range(len(full.intermediate))) and len(full.intermediate) >= 1,
            "trial(id) has the intermediate values: %s" % full.intermediate)


def section_tell_forms(c, client):
    study = client.create_study("forms", {"x": {"type": "float", "low": 0, "high": 1}},
                                tuner={"algorithm": "random", "seed": 5, "max_trials": 12})
    t = study.ask()
    c.check(isinstance(t.id, int) and t.number == 0 and 0 <= t.params["x"] <= 1 and t.state == "running",
            "ask: id, number, params")
    c.check(t.report(0, 0.5) is False and t.should_prune() is False, "report without a pruner: False")
    e = raises(TypeError, t.report, 0.5, 1)
    c.check(e is not None and "step" in str(e), "report(value, step) in Optuna's order: TypeError")
    e = raises(hpo.InvalidArgument, study.tell, t, [0.2, 0.4])
    c.check(e is not None and e.field == "values" and "repeats" in str(e),
            "a list of two on one objective: 400 naming values, pointing to repeats: %s" % e)
    out = study.tell(t, repeats=[0.2, 0.4])
    c.check(out["state"] == "complete" and abs(out["value"] - 0.3) < 1e-12 and t.state == "complete",
            "tell with one value per execution (repeats): the mean %s" % out)
    got = client.trial(t.id)
    c.check(got.info["value_n"] == 2 and got.info["value_std"] is not None, "value_n, value_std stored")
    e = raises(hpo.Conflict, study.tell, t, 1.0)
    c.check(e is not None and e.status == 409 and e.field == "id", "a second tell: Conflict 409 naming id")
    c.check(study.tell(t, 1.0, skip_if_finished=True) is None, "skip_if_finished")
    c.check(raises(hpo.Conflict, t.report, 1, 0.1) is not None, "report on a finished trial: Conflict")

    t2 = study.ask()
    out = t2.tell(state="failed", error="out of memory")
    c.check(out["state"] == "failed" and client.trial(t2.id).info["error"] == "out of memory",
            "tell failed with an error text")
    t3 = study.ask()
    t3.report(3, 0.7)
    out = study.tell(t3.id, state=hpo.TrialState.PRUNED)
    c.check(out["state"] == "pruned" and out["value"] == 0.7, "tell pruned by id: the last report is its value")
    e = raises(hpo.InvalidArgument, study.tell, study.ask(), state="complete")
    c.check(e is not None and e.field == "value", "complete without a value: 400 naming value")

    # optimize: exceptions, catch, NaN, a list of values
    n0 = len(study.trials)
    study.optimize(lambda tr: float("nan"), n_trials=1)

    def boom(tr):
        raise ValueError("diverged")

    study.optimize(boom, n_trials=2, catch=(ValueError,))
    e = raises(KeyError, study.optimize, lambda tr: {}["missing"], n_trials=3)
    c.check(e is not None, "an exception not caught leaves optimize")
    study.optimize(lambda tr: [1.0], n_trials=1)
    new = study.trials[n0:]
    c.check([x.state for x in new] == ["failed"] * 4 + ["complete"],
            "nan, 2 caught ValueErrors, 1 KeyError: failed; a list: complete (%s)" % [x.state for x in new])
    errors = [client.trial(x.id).info["error"] or "" for x in new[:4]]
    c.check("nan" in errors[0] and errors[1].startswith("ValueError: diverged") and errors[3].startswith("KeyError"),
            "failed trials carry the reason: %s" % errors)
    c.check([x.state for x in study.trials[-1:]] == ["complete"], "a list result of one value")
    study.optimize(lambda tr: [1.0, 3.0], n_trials=1)
    c.check(study.trials[-1].state == "failed" and "2 values for 1 objective" in (study.trials[-1].info["error"] or ""),
            "two values on one objective: failed with the reason")
    # a multi-objective study (Optuna's directions), the Pareto front
    mo = client.create_study("mo-client", {"x": {"type": "float", "low": 0, "high": 1}},
                             directions=["minimize", "minimize"], tuner={"algorithm": "nsga2", "seed": 1},
                             constraints=[{"metric": "lat", "max": 0.9}])
    for _ in range(6):
        t = mo.ask()
        x = t.params["x"]
        mo.tell(t, [x, 1 - x], metrics={"lat": x})
    mo.optimize(lambda tr: None if tr.tell([0.0, 0.0], metrics={"lat": 2.0}) else None, n_trials=1)
    front = mo.best_trials
    c.check(front and all(len(t.values) == 2 and t.values[0] <= 0.9 for t in front),
            "best_trials: the feasible front with its values (%d)" % len(front))
    pf = mo.pareto_front()
    c.check(pf["hypervolume"] > 0 and len(pf["reference_point"]) == 2, "pareto_front: hypervolume %s" % pf["hypervolume"])
    c.check(mo.trials[-1].info["metrics"] == {"lat": 2.0} and all(t.number != mo.trials[-1].number for t in front),
            "an infeasible trial (metrics told) is off the front")
    # the objective may tell the trial itself
    study.optimize(lambda tr: tr.tell(0.25) and None, n_trials=1)
    c.check(study.trials[-1].state == "complete" and study.trials[-1].value == 0.25,
            "a trial the objective told is not told again")


def section_errors(c, client, url):
    e = raises(hpo.NotFound, client.get_study, 10 ** 9)
    c.check(e is not None and e.status == 404 and e.code == "not_found" and e.field == "id",
            "a missing study: NotFound 404 not_found (id): %s" % e)
    c.check(raises(hpo.NotFound, client.trial, 10 ** 9) is not None, "a missing trial: NotFound")
    c.check(raises(hpo.NotFound, client.model, 10 ** 9) is not None, "a missing model: NotFound")
    e = raises(hpo.InvalidArgument, client.create_study, "bad", {"x": {"type": "float", "low": 1, "high": 0}})
    c.check(e is not None and e.status == 400 and e.code == "invalid_argument" and e.field.startswith("space.x"),
            "a bad space: InvalidArgument 400 naming the field: %s" % e)
    e = raises(hpo.InvalidArgument, client.create_study, "bad", {"x": {"type": "float", "low": 0, "high": 1}},
               tuner="annealing")
    c.check(e is not None and e.field.startswith("tuner"), "a bad tuner: 400 naming tuner: %s" % e)
    wrong = hpo.Client(url, token="wrong")
    e = raises(hpo.Unauthorized, wrong.create_study, "x", {"x": {"type": "float", "low": 0, "high": 1}})
    c.check(e is not None and e.status == 401 and e.code == "unauthorized", "a wrong token: Unauthorized 401: %s" % e)
    none = hpo.Client(url, token="")
    c.check(raises(hpo.Unauthorized, none.create_study, "x", {}) is not None, "no token: Unauthorized")
    c.check(len(none.studies()) > 0, "reads need no token")
    c.check(isinstance(e, hpo.HpoError), "every error is an HpoError")

    small = client.create_study("small", {"x": {"type": "float", "low": 0, "high": 1}}, tuner={"max_trials": 1})
    small.tell(small.ask(), 0.5)
    e = raises(hpo.Exhausted, small.ask)
    c.check(e is not None and isinstance(e, hpo.Conflict) and e.status == 409 and e.code == "exhausted",
            "ask past max_trials: Exhausted (a Conflict) 409: %s" % e)

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    e = raises(hpo.ConnectionFailed, hpo.Client("http://127.0.0.1:%d" % port).health)
    c.check(e is not None and e.status is None, "no hpod: ConnectionFailed, status None")
    e = raises(ValueError, client.create_study, "nan", {"x": {"type": "float", "low": 0, "high": float("nan")}})
    c.check(e is not None and "NaN" in str(e), "NaN refused before sending")


def section_control(c, client):
    study = client.create_study("control", {"x": {"type": "float", "low": 0, "high": 1}},
                                tuner={"max_trials": 10})
    study.optimize(lambda t: t.params["x"], n_trials=2)
    c.check(study.pause().info["state"] == "paused" and study.state == "paused", "pause")
    e = raises(hpo.Conflict, study.optimize, lambda t: 0.0, n_trials=1)
    c.check(e is not None and e.field == "state", "optimize on a paused study raises its Conflict: %s" % e)
    c.check(study.resume().info["state"] == "running", "resume")
    study.optimize(lambda t: t.params["x"], n_trials=1)
    c.check(study.cancel().info["state"] == "cancelled", "cancel")
    study.optimize(lambda t: 0.0, n_trials=3)
    c.check(len(study.trials) == 3, "optimize on a cancelled study stops quietly")
    c.check(study.wait(timeout=5) is study, "wait returns at once on a cancelled study")
    study.delete()
    c.check(raises(hpo.NotFound, client.get_study, study.id) is not None, "delete: then NotFound")
    running = client.create_study("running", {"x": {"type": "float", "low": 0, "high": 1}})
    c.check(raises(TimeoutError, running.wait, timeout=0.3) is not None, "wait: TimeoutError on a running study")


def section_datasets(c, client):
    data = csv_bytes()
    d = client.upload_dataset("tiny", "csv", file=data, label_column="species")
    c.check(d["name"] == "tiny" and d["n_rows"] == 60 and d["n_classes"] == 3 and d["bytes"] == len(data),
            "upload_dataset from bytes: %s" % d)
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        f.write(data)
        f.flush()
        d2 = client.upload_dataset("tiny-path", "csv", file=f.name, label_column="species")
        c.check(d2["n_rows"] == 60 and list(d2["files"].values()) == [os.path.basename(f.name)],
                "upload_dataset from a path, its file name kept: %s" % d2["files"])
        with open(f.name, "rb") as fo:
            d3 = client.upload_dataset("tiny-file", "csv", file=fo, label_column="species")
        c.check(d3["n_rows"] == 60, "upload_dataset from a file object")
    e = raises(hpo.Conflict, client.upload_dataset, "tiny", "csv", file=data, label_column="species")
    c.check(e is not None and e.status == 409, "a taken name: Conflict")
    e = raises(hpo.InvalidArgument, client.upload_dataset, "xls", "xls", file=data)
    c.check(e is not None and e.field == "format", "a bad format: 400 naming format: %s" % e)
    names = [x["name"] for x in client.datasets()]
    c.check("fashion-mnist" in names and "tiny" in names, "datasets() lists builtin and uploaded")
    client.delete_dataset(d3["id"])
    c.check(raises(hpo.NotFound, client.dataset, d3["id"]) is not None, "delete_dataset")
    return d


def section_embedded(c, client):
    study = client.create_study("tiny-fmnist", model="mlp", metric="val_accuracy",
                                dataset={"name": "fashion-mnist", "limit": 200, "validation_split": 50},
                                training={"max_epochs": 1, "batch_size": 32},
                                tuner={"algorithm": "random", "seed": 4, "max_trials": 2})
    c.check(study.kind == "embedded" and study.direction == "maximize", "an embedded study, maximizing accuracy")
    study.wait(timeout=240)
    c.check(study.info["state"] == "complete", "wait: the study is complete")
    trials = study.trials
    c.check(len(trials) == 2 and all(t.state == "complete" for t in trials),
            "2 trials complete: %s" % [(t.state, t.info.get("error")) for t in trials])
    events = list(study.events())
    types = [e[1] for e in events]
    c.check(types[:1] == ["study_created"] and types[-1:] == ["study_complete"] and types.count("trial_complete") == 2,
            "events: study_created ... 2 trial_complete ... study_complete (%d events)" % len(types))
    c.check([e[0] for e in events] == sorted(e[0] for e in events), "event ids increase")
    later = list(study.events(after=events[-2][0]))
    c.check([e[1] for e in later] == ["study_complete"], "events(after=id) resumes: %s" % [e[1] for e in later])

    refits = study.refit(top_n=1)
    c.check(len(refits) == 1 and refits[0].kind == "refit", "refit(top_n=1): one model queued")
    m = refits[0].wait(timeout=240)
    c.check(m.state == "complete" and "test" in (m.result or {}), "the refit completes with test metrics")
    rows = test_rows(20)
    p = client.model(m.id).predict(rows)
    c.check(len(p["predictions"]) == 20 and all(len(r) == 10 and abs(sum(r) - 1) < 1e-4 for r in p["predictions"]),
            "predict: 20 rows of 10 probabilities")
    c.check(len(p["classes"]) == 20 and all(0 <= k < 10 for k in p["classes"]), "predict: classes")
    e = raises(hpo.InvalidArgument, m.predict, [[1, 2, 3]])
    c.check(e is not None and e.field == "inputs", "a row of the wrong size: 400 naming inputs")
    raw = m.weights()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    c.check(header["__metadata__"]["format"] == "hpo-model-1", "weights(): safetensors bytes (%d)" % len(raw))
    with tempfile.TemporaryDirectory() as d:
        path = m.weights(os.path.join(d, "m.safetensors"))
        with open(path, "rb") as f:
            c.check(f.read() == raw and os.listdir(d) == ["m.safetensors"], "weights(path) streams the same file")

    tm = study.best_trial.model().wait(timeout=240)
    c.check(tm.kind == "trial" and tm.state == "complete", "best_trial.model(): a trial model")
    ens = study.ensemble(members=[m, tm], method="mean").wait(timeout=240)
    c.check(ens.kind == "ensemble" and ens.state == "complete", "ensemble of the refit and the trial model")
    pe = ens.predict(rows)
    c.check(len(pe["predictions"]) == 20, "the ensemble predicts")
    ids = sorted(x.id for x in study.models())
    c.check(ids == sorted([m.id, tm.id, ens.id]) and [x.id for x in study.refits()] == [m.id]
            and [x.id for x in study.ensembles()] == [ens.id], "models(), refits(), ensembles()")
    ext = client.create_study("ext", {"x": {"type": "float", "low": 0, "high": 1}})
    e = raises(hpo.Conflict, ext.refit)
    c.check(e is not None and e.field == "id", "refit of an external study: Conflict")


# ---- the client's promises under fork, threads, signals and odd values ----------

LINE = {"x": {"type": "float", "low": 0, "high": 1}}


def stand_in_server(handle):
    """A stand-in for hpod (an HTTP/1.1 server in a thread) whose GETs
    handle(request handler) answers, for what a real hpod cannot be made to
    do on cue (stall an answer, drop an event stream): (server, url)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            try:
                handle(self)
            except OSError:  # the client left
                pass

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, "http://127.0.0.1:%d" % srv.server_address[1]


def send(h, body, ctype="application/json", close=False):
    h.send_response(200)
    h.send_header("Content-Type", ctype)
    if close:  # the body ends where the connection does (an event stream)
        h.send_header("Connection", "close")
        h.close_connection = True
    else:
        h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


class Alarm(Exception):
    """What a SIGALRM time limit raises in an objective."""


def interrupted(fn, seconds, exc=Alarm):
    """Runs fn() while a SIGALRM handler raises exc after seconds (as Ctrl-C
    raises KeyboardInterrupt): True when it was raised."""
    def on_alarm(*_):
        raise exc()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        fn()
        return False
    except exc:
        return True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def ask_tell(study, start, n=100):
    """n asks and tells on study from time start: how many answers were not
    the study's own (or failed)."""
    time.sleep(max(0.0, start - time.monotonic()))
    wrong = 0
    for _ in range(n):
        try:
            t = study.ask()
            wrong += t.info.get("study_id") != study.id
            study.tell(t, 0.5)
        except Exception:  # noqa: BLE001 - counted
            wrong += 1
    return wrong


def section_processes(c, client):
    """fork(), threads and signals: connections are per process and per
    live thread, and survive an interrupted request."""
    fc = hpo.Client(client.url, token=TOKEN, timeout=2)  # answers lost to the other process cost 2 s
    a = fc.create_study("fork-a", LINE, tuner="random")
    b = fc.create_study("fork-b", LINE, tuner="random")
    fc.health()  # this thread's connection is open when the process forks
    r, w = os.pipe()
    start = time.monotonic() + 0.3
    pid = os.fork()
    if pid == 0:  # the child never returns into the test
        code = 1
        try:
            os.write(w, b"%d" % ask_tell(a, start))
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    wrong = ask_tell(b, start)
    os.waitpid(pid, 0)
    child = os.read(r, 32)
    os.close(r)
    c.check(wrong == 0 and child == b"0", "a Client used before fork(): parent and child both asking at once get "
            "their own answers (parent %d, child %s wrong)" % (wrong, child))

    def nfds():
        return len(os.listdir("/proc/self/fd"))

    study = client.create_study("fds", LINE, tuner="random")
    before = nfds()
    for _ in range(10):
        study.optimize(lambda t: t.params["x"], n_trials=4, n_jobs=4)
    for _ in range(10):
        th = threading.Thread(target=client.health)
        th.start()
        th.join()
    c.check(nfds() <= before + 2, "a finished thread's connection is closed: %d fds, then %d after 10 "
            "optimize(n_jobs=4) and 10 threads" % (before, nfds()))

    study = client.create_study("ctrl-c", LINE, tuner={"algorithm": "random", "max_trials": 5000})

    def slow(t):
        time.sleep(0.01)
        return t.params["x"]

    hit = interrupted(lambda: study.optimize(slow, n_jobs=3), 0.3, KeyboardInterrupt)
    deadline = time.monotonic() + 2
    while any(th.name.startswith("hpo-optimize") for th in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [th.name for th in threading.enumerate() if th.name.startswith("hpo-optimize")]
    c.check(hit and not alive, "Ctrl-C in optimize(n_jobs=3) stops its threads too (alive: %s)" % alive)
    study.cancel()

    # an exception from a signal handler mid-request (a stand-in that stalls)
    def handle(h):
        if h.path == "/slow":
            time.sleep(0.6)
        send(h, b'{"status": "ok"}')

    srv, url = stand_in_server(handle)
    try:
        for first in (True, False):
            cl = hpo.Client(url)
            if not first:
                cl.health()
            hit = interrupted(lambda: cl._call("GET", "/slow"), 0.2)
            try:
                after = [cl.health()["status"] for _ in range(2)]
            except Exception as e:  # noqa: BLE001 - reported
                after = "%s: %s" % (type(e).__name__, e)
            c.check(hit and after == ["ok", "ok"], "an exception raised by a signal handler during %s: the next "
                    "calls work (%s)" % ("a thread's first request" if first else "a later request", after))
            cl.close()
    finally:
        srv.shutdown()
        srv.server_close()


def section_streams(c, client):
    """Event streams that break or stall, a body over hpod's limit, the
    request named when there is no answer."""
    def handle(h):
        final = h.path == "/api/v1/studies/2/events"
        send(h, b"id: 5\nevent: trial_complete\ndata: {}\n\n" +
             (b"id: 6\nevent: study_complete\ndata: {}\n\n" if final else b""), "text/event-stream", close=True)

    srv, url = stand_in_server(handle)
    try:
        cl = hpo.Client(url)
        got = []
        e = raises(hpo.ConnectionFailed, lambda: got.extend(hpo.Study(cl, {"id": 1}).events()))
        c.check(e is not None and [x[1] for x in got] == ["trial_complete"] and "/events" in str(e),
                "events(): a stream that drops before the study's final event raises ConnectionFailed: %s" % e)
        c.check([x[1] for x in hpo.Study(cl, {"id": 2}).events()] == ["trial_complete", "study_complete"],
                "events(): a stream that ends after study_complete ends quietly")
    finally:
        srv.shutdown()
        srv.server_close()
    quiet = client.create_study("quiet", LINE)
    e = raises(hpo.ConnectionFailed, lambda: list(quiet.events(timeout=0.5)))
    c.check(e is not None, "events(timeout=0.5): a silent stream raises ConnectionFailed, not TimeoutError")

    # hpod answers a body over --max-body with 413 before it has read it, and
    # closes within a second: a stand-in that closes at once
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer_413():
        s, _ = listener.accept()
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(65536)
        body = b'{"error": {"code": "too_large", "message": "over --max-body", "field": ""}}'
        s.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        time.sleep(0.2)
        s.close()

    th = threading.Thread(target=answer_413, daemon=True)
    th.start()
    cl = hpo.Client("http://127.0.0.1:%d" % listener.getsockname()[1])
    e = raises(hpo.PayloadTooLarge, cl._call, "PATCH", "/api/v1/trials/1", {"user_attrs": {"blob": "x" * (8 << 20)}})
    c.check(e is not None and e.status == 413, "a body hpod refuses early (then closes): PayloadTooLarge, not a "
            "broken pipe: %s" % e)
    th.join(5)
    listener.close()

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    e = raises(hpo.ConnectionFailed, hpo.Client("http://127.0.0.1:%d" % port).get_study, 3)
    c.check(e is not None and "GET http://127.0.0.1:%d/api/v1/studies/3:" % port in str(e),
            "ConnectionFailed names the request: %s" % e)


class OptunaEnum(enum.Enum):
    """Names as optuna's TrialState and StudyDirection have them."""
    COMPLETE = 1
    PRUNED = 2
    MINIMIZE = 3


class FloatDistribution:
    def __init__(self, low, high):
        self.low, self.high, self.log, self.step = low, high, False, None


class FrozenTrial:
    """What hpo_client reads of optuna.trial.FrozenTrial (Optuna is not
    installed here): its value raises RuntimeError on several objectives."""

    def __init__(self, number, state, values, params, intermediate_values=None):
        self.number, self.state, self.values, self.params = number, state, values, params
        self.distributions = {k: FloatDistribution(0, 1) for k in params}
        self.intermediate_values = intermediate_values or {}
        self.user_attrs = {}
        self.datetime_start = self.datetime_complete = datetime.datetime(2024, 1, 1)

    @property
    def value(self):
        if self.values is not None and len(self.values) > 1:
            raise RuntimeError("This attribute is not available during multi-objective optimization.")
        return None if self.values is None else self.values[0]


class ArrayStandIn:
    """numpy.array as hpo_client meets it, where numpy is missing: a 0-d
    array has a __len__ that raises TypeError."""

    def __init__(self, v):
        self.v, self.ndim = v, 1 if isinstance(v, list) else 0

    def __len__(self):
        if not self.ndim:
            raise TypeError("len() of unsized object")
        return len(self.v)

    def __iter__(self):
        if not self.ndim:
            raise TypeError("iteration over a 0-d array")
        return iter(self.v)

    def __float__(self):
        if self.ndim:
            raise TypeError("only size-1 arrays can be converted")
        return float(self.v)

    def tolist(self):
        return self.v


def section_values(c, client):
    """NaN and other values as Optuna takes them, fields a Trial keeps,
    several objectives, a lease that runs out."""
    study = client.create_study("nan", LINE, tuner={"algorithm": "random", "seed": 1, "max_trials": 20})

    def diverging(t):
        for step in range(3):
            v = float("nan") if t.number % 2 and step == 1 else t.params["x"]
            if t.report(step, v):
                raise hpo.TrialPruned()
        return v

    # the pruner decides on a NaN as Optuna's do: none goes on, asha stops it at a rung
    e = raises(Exception, study.optimize, diverging, n_trials=6)
    states = [t.state for t in study.trials]
    c.check(e is None and states == ["complete"] * 6,
            "report(step, nan) is sent as \"nan\"; without a pruner the trials go on: %s" % states)
    c.check(study.trials[1].intermediate.get(1, "absent") is None,
            "the NaN report is stored, read back as null: %s" % study.trials[1].intermediate)
    asha = client.create_study("nan-asha", LINE, tuner={"algorithm": "random", "seed": 1, "max_trials": 6,
                                                        "pruner": {"algorithm": "asha", "eta": 2}})
    e = raises(Exception, asha.optimize, diverging, n_trials=6)
    states = [t.state for t in asha.trials]
    c.check(e is None and len(states) == 6 and states[1::2] == ["pruned"] * 3,
            "with asha, a NaN at a rung stops the trial; the search goes on: %s" % states)
    t = study.ask()
    try:
        out = study.tell(t, float("nan"))
    except Exception as e:  # noqa: BLE001 - reported
        out = {"state": repr(e)}
    got = client.trial(t.id)
    c.check(out["state"] == "failed" and t.state == "failed" and "nan" in (got.info["error"] or ""),
            "tell(trial, nan) fails the trial, naming the value: %s %s" % (out["state"], got.info["error"]))
    e = raises(Exception, study.optimize, lambda t: 10 ** 400, n_trials=1)
    c.check(e is None and study.trials[-1].state == "failed", "an objective returning 10**400 fails its trial")
    c.check("repeats=[...]" in hpo.__doc__ and "one per execution, hpod stores" not in hpo.__doc__.replace("\n  ", " "),
            "the module's docs: a list result is one value per objective; repeats go through tell(repeats=)")

    mo = client.create_study("mo-values", LINE, directions=["minimize", "maximize"], tuner="random")
    t = mo.ask()
    mo.tell(t, [0.25, 0.75])
    seen = []
    mo.optimize(lambda tr: [tr.params["x"], 1 - tr.params["x"]], n_trials=2,
                callbacks=[lambda s, tr: seen.append(tr.values)])
    c.check(t.values == [0.25, 0.75] and len(seen) == 2 and all(v and len(v) == 2 for v in seen),
            "trial.values after tell on two objectives, also in callbacks: %s %s" % (t.values, seen))
    for name in ("best_trial", "best_value", "best_params"):
        e = raises(RuntimeError, getattr, mo, name)
        c.check(e is not None and "best_trials" in str(e),
                "%s on two objectives: RuntimeError naming best_trials" % name)
    c.check(len(mo.best_trials) >= 1, "best_trials: the front")
    ft = FrozenTrial(0, OptunaEnum.COMPLETE, [0.1, 0.2], {"x": 0.5})
    try:
        got = mo.add_trial(ft).values
    except Exception as e:  # noqa: BLE001 - reported
        got = repr(e)
    c.check(got == [0.1, 0.2], "add_trial of a FrozenTrial of two objectives takes its values: %s" % got)
    array = ArrayStandIn
    try:
        import numpy
        array = numpy.array
    except ImportError:
        pass
    t = study.ask()
    try:
        out = study.tell(t, array(0.3))
    except Exception as e:  # noqa: BLE001 - reported
        out = {"state": repr(e)}
    c.check(out["state"] == "complete" and out["value"] == 0.3, "tell(trial, a 0-d array): %s" % out["state"])
    asha = client.create_study("mo-asha", LINE, directions=["minimize", "minimize"], tuner="random", pruner="asha")
    t = asha.ask()
    e = raises(Exception, t.report, 0, array([0.1, 0.2]))
    c.check(e is None and asha.tell(t, array([0.1, 0.2]))["values"] == [0.1, 0.2],
            "report and tell take a 1-d array on two objectives")

    # Optuna trials that reported NaN (a diverged run): stored as null
    nan_trial = FrozenTrial(1, OptunaEnum.PRUNED, None, {"x": 0.9}, {0: 0.7, 1: float("nan")})
    ostudy = types.SimpleNamespace(study_name="from-optuna-nan", directions=[OptunaEnum.MINIMIZE], user_attrs={},
                                   trials=[FrozenTrial(0, OptunaEnum.COMPLETE, [0.3], {"x": 0.2}, {0: 0.5}), nan_trial])
    try:
        imported = client.import_optuna(ostudy)
        got = (imported.imported, imported.trials[1].intermediate)
    except Exception as e:  # noqa: BLE001 - reported
        got = repr(e)
    c.check(got == (2, {0: 0.7, 1: None}), "import_optuna: a NaN intermediate value comes as null: %s" % (got,))
    one = client.create_study("optuna-nan", LINE)
    try:
        got = one.add_trial(nan_trial).intermediate
    except Exception as e:  # noqa: BLE001 - reported
        got = repr(e)
    c.check(got == {0: 0.7, 1: None}, "add_trial(a FrozenTrial with a NaN report): null: %s" % (got,))

    # listed trials read their reports when asked; several states keep the order
    def reporting(tr):
        for step in range(3):
            tr.report(step, step + 0.5)
        return tr.params["x"]

    rep = client.create_study("listed", LINE, tuner="random")
    rep.optimize(reporting, n_trials=2)
    c.check(rep.trials[0].intermediate == {0: 0.5, 1: 1.5, 2: 2.5} and len(rep.best_trial.intermediate) == 3,
            "study.trials and best_trial have the intermediate values: %s" % rep.trials[0].intermediate)
    ordered = client.create_study("order", LINE, tuner="random")
    for v, st in ((0.9, "complete"), (0.1, "pruned"), (0.5, "complete"), (0.3, "pruned"), (0.2, "failed")):
        ordered.add_trial({"x": 0.5}, value=v if st != "failed" else None, state=st)
    both = ("complete", "pruned")
    got = [[t.value for t in ordered.get_trials(states=both, order="value", desc=d)] for d in (False, True)]
    c.check(got == [[0.1, 0.3, 0.5, 0.9], [0.9, 0.5, 0.3, 0.1]], "get_trials(two states, order=value, desc): %s" % got)
    got = [t.number for t in ordered.get_trials(states=both, desc=True)]
    c.check(got == [3, 2, 1, 0], "get_trials(two states, desc=True): by number, reversed: %s" % got)

    # a lease that runs out while the objective runs: the callbacks see what hpod has
    lease = client.create_study("lease", LINE, tuner={"algorithm": "random", "lease_seconds": 0.2})

    def outlives_lease(t):  # hpod looks at leases every second
        deadline = time.monotonic() + 3
        while client.trial(t.id).state == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        return 0.5

    seen = []
    lease.optimize(outlives_lease, n_trials=1, callbacks=[lambda s, t: seen.append((t.state, t.info.get("error")))])
    c.check(seen == [("failed", "lease expired")],
            "a lease that ran out: the callback sees the trial failed: %s" % seen)


def section_retry(c, args):
    """hpod with --max-connections-per-client 1: while an event stream holds
    this client's one connection, every other request gets 503 with
    Retry-After 1 from the connection gate."""
    hp = Hpod(args.hpod, args=["--max-connections-per-client", "1"]).start()
    held = None
    real_sleep = hpo._sleep
    try:
        client = hpo.Client(hp.url, retries=0)
        sid = client.create_study("held", {"x": {"type": "float", "low": 0, "high": 1}}).id
        client.close()
        # hpod counts a connection its client just closed for a moment (and
        # may answer 503 meanwhile): open the stream until it is served, then
        # wait until a probe is refused, so that it is the one counted.
        deadline = time.monotonic() + 20
        while True:
            held = http.client.HTTPConnection("127.0.0.1", hp.port, timeout=30)
            try:
                held.request("GET", "/api/v1/studies/%d/events" % sid)
                resp = held.getresponse()
                status = resp.status
            except (OSError, http.client.HTTPException) as e:  # hpod may drop it in that moment
                status = repr(e)
            if status == 200 or time.monotonic() > deadline:
                break
            held.close()
            time.sleep(0.2)
        if not c.check(status == 200, "an event stream holds the one connection: %s" % status):
            return
        resp.readline()
        while time.monotonic() < deadline:
            probe = http.client.HTTPConnection("127.0.0.1", hp.port, timeout=10)
            try:
                probe.request("GET", "/healthz")
                if probe.getresponse().status == 503:
                    break
            except (OSError, http.client.HTTPException):
                pass
            finally:
                probe.close()
            time.sleep(0.2)

        e = raises(hpo.Unavailable, client.get_study, sid)
        c.check(e is not None and e.status == 503 and e.retry_after == 1.0,
                "retries=0: Unavailable 503 with retry_after 1: %s" % e)
        waits = []

        def fake_sleep(s):
            waits.append(s)
            real_sleep(s)

        hpo._sleep = fake_sleep
        retrying = hpo.Client(hp.url, retries=8)
        e = raises(hpo.Unavailable, retrying.create_study, "post", {"x": {"type": "float", "low": 0, "high": 1}})
        c.check(e is not None and waits == [], "a POST answered 503 is not sent again")

        def release_then_sleep(s):
            waits.append(s)
            if held.sock is not None:
                held.close()  # hpod frees the connection within a second or so
            real_sleep(s)

        hpo._sleep = release_then_sleep
        got = retrying.get_study(sid)
        c.check(got.id == sid and len(waits) >= 1 and waits[0] == 1.0,
                "a GET answered 503 + Retry-After is retried until it succeeds (waited %s)" % waits)
    finally:
        hpo._sleep = real_sleep
        if held is not None:
            held.close()
        c.check(hp.stop() == 0, "the second hpod exits 0")
        hp.cleanup()


def section_pip(c, url):
    """pip installs clients/python offline into a venv (a copy, so the
    source tree gets no build/ folder); the installed module talks to hpod."""
    work = tempfile.mkdtemp(prefix="hpo-pyclient-")
    try:
        src = os.path.join(work, "src")
        shutil.copytree(CLIENT_DIR, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        venv = os.path.join(work, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv],
                       check=True, timeout=120)
        py = os.path.join(venv, "bin", "python")
        r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                            "--disable-pip-version-check", "-q", src],
                           capture_output=True, text=True, timeout=300)
        c.check(r.returncode == 0, "pip install --no-build-isolation clients/python: rc %d %s"
                % (r.returncode, r.stderr[-2000:]))
        code = ("import hpo_client, sys\n"
                "c = hpo_client.Client(sys.argv[1], token=sys.argv[2])\n"
                "s = c.create_study('pip', {'x': {'type': 'int', 'low': 0, 'high': 9}}, tuner={'max_trials': 3})\n"
                "s.optimize(lambda t: t.params['x'], n_trials=3)\n"
                "print(hpo_client.__file__, len(s.trials))\n")
        r = subprocess.run([py, "-c", code, url, TOKEN], capture_output=True, text=True, timeout=120, cwd=work,
                           env=dict(os.environ, PYTHONPATH=""))
        out = r.stdout.split()
        c.check(r.returncode == 0 and len(out) == 2 and out[0].startswith(venv) and out[1] == "3",
                "the installed module (from the venv) runs a study: %s %s" % (r.stdout.strip(), r.stderr[-1000:]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--token", TOKEN, "--devices", "cpu:2"]).start()
    try:
        client = hpo.Client(hp.url, token=TOKEN)
        c.check(client.health()["status"] == "ok", "health")
        for name, fn, extra in (("optimize", section_optimize, ()), ("pruning", section_pruning, ()),
                                ("tell", section_tell_forms, ()), ("errors", section_errors, (hp.url,)),
                                ("control", section_control, ()), ("processes", section_processes, ()),
                                ("streams", section_streams, ()), ("values", section_values, ()),
                                ("datasets", section_datasets, ()),
                                ("embedded", section_embedded, ()), ("pip", section_pip, None)):
            t0 = time.monotonic()
            if extra is None:
                fn(c, hp.url)
            else:
                fn(c, client, *extra)
            print("section %s: %.1f s" % (name, time.monotonic() - t0), flush=True)
        client.close()
    finally:
        rc = hp.stop()
        if rc != 0:
            print(hp.log_tail())
        c.check(rc == 0, "hpod exits 0 after the client's calls")
        hp.cleanup()
    t0 = time.monotonic()
    section_retry(c, args)
    print("section retry: %.1f s" % (time.monotonic() - t0))
    c.finish()


if __name__ == "__main__":
    main()
