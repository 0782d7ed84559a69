"""Study management (Optuna's enqueue_trial, add_trial, copy_study and warm
starts) against a real hpod:

- enqueue: each given param is checked against the space (400 naming
  params.<name>: unknown, out of range, not a choice, wrong type, off the
  step, a conditional one without its parent); a partial set is completed by
  the tuner at hand-out; enqueued trials go first, oldest first (an external
  study's asks; an embedded study's scheduler, which trains the fixed
  params); they count toward max_trials; 409 on a cancelled study and once
  the budget is spent; cancelling cancels those still waiting.
- add_trial: a finished trial (complete with value or values, pruned
  keeping its last intermediate, failed) moves best, updated and the events
  (trial_added); the tuner learns from it (TPE's next suggestions crowd
  around the optimum of 30 added trials); it counts toward max_trials and
  an external study whose budget it spends completes.
- export / import / copy: the document round-trips (imported = finished
  trials, skipped = running and queued), a bad trial refuses the whole
  import (400 naming trials[i].params.<name>, no study left behind); with
  Optuna 3.1 (skipped with a message when it cannot be imported): an export
  loaded through json_to_distribution + create_trial + add_trials has hpo's
  best_value and best_params, and an Optuna study written in the format is
  imported with Optuna's best.
- warm start: 30 trials of a 1-D quadratic make TPE's first suggestions
  close to the optimum (a cold study's are not); used/skipped counts; an
  unknown id is a 400 naming warm_start.study_ids[i]; the tuner state
  survives a restart with the source deleted (a twin study asked after the
  restart suggests exactly what the original did before it).
- the Python client's and the CLI's commands for all of it;
- the edges a study-management audit found: a failed trial's error kept by
  export, copy and import; a copy of a study whose partial enqueued trial
  was cancelled (skipped: it never started); times to the microsecond;
  imports contradicting themselves (a failed trial's value, values against
  value, repeats without spread, steps "1" and "01", unreal or far dates,
  an end before the start, duplicate numbers) refused naming the field;
  definition errors named (an unknown key; import's say
  study.definition.*); get-or-create needs a name; names count characters;
  user_attrs nest at most 64 deep; a warm start names a study once;
  enqueue's user_attrs and skip_if_exists; add_trial's times."""
import json
import os
import subprocess
import sys
import tempfile
import time

from hpod import Checks, Hpod, parse_args, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import hpo_client as hpo  # noqa: E402

S = "/api/v1/studies"
T = "/api/v1/trials"
MIXED = {"x": {"type": "float", "low": -2, "high": 2},
         "n": {"type": "int", "low": 1, "high": 9, "step": 2},
         "lr": {"type": "float", "low": 1e-4, "high": 1, "log": True},
         "q": {"type": "float", "low": 0, "high": 1, "step": 0.25},
         "opt": {"type": "choice", "values": ["sgd", "adam", 3]},
         "b": {"type": "bool"},
         "m": {"type": "float", "low": 0, "high": 1, "condition": {"opt": ["sgd"]}}}
LINE = {"x": {"type": "float", "low": 0, "high": 1}}


def quad(x):
    return (x - 0.3) ** 2


def enqueue_checks(c, hp):
    sid = hp.ok("POST", S, {"name": "enq", "space": MIXED, "tuner": {"seed": 1, "max_trials": 4}})["id"]
    bad = [({"nope": 1}, "params.nope"), ({"x": 3}, "params.x"), ({"opt": "adagrad"}, "params.opt"),
           ({"b": 1}, "params.b"), ({"n": 4}, "params.n"), ({"q": 0.3}, "params.q"), ({"n": "3"}, "params.n"),
           ({"m": 0.5}, "params.m"), ({"opt": "adam", "m": 0.5}, "params.m")]
    for params, field in bad:
        st, out = hp.request("POST", S + "/%d/enqueue" % sid, {"params": params})
        c.check(st == 400 and out["error"]["field"] == field, "enqueue %s: 400 naming %s (%s %s)" % (params, field, st, out))
    st, out = hp.request("POST", S + "/%d/enqueue" % sid, {"params": [1]})
    c.check(st == 400 and out["error"]["field"] == "params", "params must be an object: %s" % out)
    st, out = hp.request("POST", S + "/%d/enqueue" % (sid + 1000), {"params": {}})
    c.check(st == 404, "enqueue on an unknown study: 404 (%d)" % st)
    a = hp.ok("POST", S + "/%d/enqueue" % sid, {"params": {"x": 0.5, "opt": "sgd", "m": 0.25}})
    b = hp.ok("POST", S + "/%d/enqueue" % sid, {"params": {"n": 7}})
    c.check(a["state"] == "queued" and a["params"] == {"x": 0.5, "opt": "sgd", "m": 0.25} and a["number"] == 0,
            "the enqueued trial is queued with its fixed params: %s" % a)
    got = [hp.ok("POST", S + "/%d/ask" % sid) for _ in range(3)]
    c.check([g["trial_id"] for g in got[:2]] == [a["id"], b["id"]], "asks hand out the enqueued trials first, FIFO")
    c.check(got[0]["params"]["x"] == 0.5 and got[0]["params"]["m"] == 0.25 and set(got[0]["params"]) == set(MIXED),
            "the fixed params are kept, the others drawn: %s" % got[0]["params"])
    c.check(got[1]["params"]["n"] == 7 and len(got[1]["params"]) >= 6, "a partial set completed: %s" % got[1]["params"])
    c.check(got[2]["number"] == 2, "then a new trial: %s" % got[2])
    t = hp.ok("GET", "/api/v1/trials/%d" % a["id"])
    c.check(t["state"] == "running" and t["started"] > 0 and t["lease_expires"], "the handed-out trial runs with a lease")
    # max_trials counts enqueued trials: one more fits, then 409
    hp.ok("POST", S + "/%d/enqueue" % sid, {"params": {}})
    st, out = hp.request("POST", S + "/%d/enqueue" % sid, {"params": {}})
    c.check(st == 409 and out["error"]["field"] == "tuner.max_trials", "enqueue past max_trials: 409 %s" % out)
    last = hp.ok("POST", S + "/%d/ask" % sid)
    c.check(last["number"] == 3, "the 4th trial (enqueued) is still handed out at max_trials: %s" % last)
    st, out = hp.request("POST", S + "/%d/ask" % sid)
    c.check(st == 409 and out["error"]["code"] == "exhausted", "then asks are refused: %s" % out)
    # cancel: an enqueued trial still waiting is cancelled; a cancelled study takes none
    sid2 = hp.ok("POST", S, {"name": "enq2", "space": LINE})["id"]
    w = hp.ok("POST", S + "/%d/enqueue" % sid2, {"params": {"x": 0.1}})
    hp.ok("POST", S + "/%d/cancel" % sid2)
    c.check(hp.ok("GET", "/api/v1/trials/%d" % w["id"])["state"] == "cancelled", "cancel cancels the waiting trial")
    st, out = hp.request("POST", S + "/%d/enqueue" % sid2, {"params": {"x": 0.1}})
    c.check(st == 409 and out["error"]["field"] == "state", "enqueue on a cancelled study: 409 %s" % out)
    return sid


def embedded_enqueue_checks(c, hp):
    """An embedded study trains an enqueued trial's fixed params before any trial drawn after it."""
    study = {"name": "emb-enq", "model": {"template": "mlp"},
             "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
                       "units": {"type": "int", "low": 8, "high": 32}},
             "dataset": {"name": "fashion-mnist", "limit": 300, "validation_split": 100},
             "training": {"max_epochs": 1, "batch_size": 64},
             "tuner": {"algorithm": "random", "seed": 3, "max_trials": 3, "parallel_trials": 1}}
    sid = hp.ok("POST", S, study)["id"]
    q = hp.ok("POST", S + "/%d/enqueue" % sid, {"params": {"units": 17}})
    wait_for(lambda: hp.ok("GET", S + "/%d" % sid)["state"] == "complete", 120)
    trials = {t["id"]: t for t in hp.ok("GET", S + "/%d/trials" % sid)["trials"]}
    mine = trials[q["id"]]
    c.check(mine["state"] == "complete" and mine["params"]["units"] == 17 and "lr" in mine["params"],
            "the embedded study trained the enqueued params, lr drawn: %s" % mine["params"])
    later = [t for t in trials.values() if t["number"] > mine["number"]]
    c.check(len(trials) == 3 and all(t["started"] >= mine["started"] for t in later),
            "the enqueued trial was trained before the trials drawn after it (%d trials)" % len(trials))


def add_trial_checks(c, hp):
    sid = hp.ok("POST", S, {"name": "add", "space": LINE,
                            "tuner": {"algorithm": "tpe", "seed": 4, "n_startup_trials": 5}})["id"]
    before = hp.ok("GET", S + "/%d" % sid)
    time.sleep(0.01)
    t = hp.ok("POST", S + "/%d/trials" % sid, {"params": {"x": 0.5}, "value": 0.04,
                                               "intermediate_values": {"1": 0.2, "2": 0.1}})
    c.check(t["state"] == "complete" and t["value"] == 0.04 and t["number"] == 0 and t["last_step"] == 2 and
            [i["step"] for i in t["intermediate"]] == [1, 2], "an added complete trial: %s" % t)
    after = hp.ok("GET", S + "/%d" % sid)
    c.check(after["best"] and after["best"]["trial_id"] == t["id"] and after["updated"] > before["updated"] and
            after["last_event_id"] > before["last_event_id"], "best, updated and the events move")
    p = hp.ok("POST", S + "/%d/trials" % sid, {"params": {"x": 0.9}, "state": "pruned",
                                               "intermediate_values": {"3": 0.7, "1": 0.9}})
    c.check(p["state"] == "pruned" and p["value"] == 0.7, "a pruned trial keeps its last intermediate: %s" % p)
    f = hp.ok("POST", S + "/%d/trials" % sid, {"params": {"x": 0.1}, "state": "failed", "error": "oom"})
    c.check(f["state"] == "failed" and f["value"] is None and f["error"] == "oom", "a failed trial: %s" % f)
    v = hp.ok("POST", S + "/%d/trials" % sid, {"params": {"x": 0.2}, "repeats": [0.5, 0.7],
                                               "user_attrs": {"source": "notebook"}, "note": "by hand"})
    c.check(abs(v["value"] - 0.6) < 1e-12 and v["value_n"] == 2, "values: their mean: %s" % v)
    vt = hp.ok("GET", "/api/v1/trials/%d" % v["id"])
    c.check(vt["user_attrs"] == {"source": "notebook"} and vt["note"] == "by hand",
            "an added trial keeps its user_attrs and note: %s %r" % (vt["user_attrs"], vt["note"]))
    bad = [({"value": 1}, "params"), ({"params": {"x": 2}, "value": 1}, "params.x"), ({"params": {}, "value": 1}, "params.x"),
           ({"params": {"x": 0.5}}, "value"), ({"params": {"x": 0.5}, "value": "1"}, "value"),
           ({"params": {"x": 0.5}, "value": 1, "intermediate_values": {"-1": 0.5}}, "intermediate_values"),
           ({"params": {"x": 0.5}, "value": 1, "intermediate_values": {"1": "a"}}, "intermediate_values"),
           ({"params": {"x": 0.5}, "state": "failed", "value": 1}, "value"),
           ({"params": {"x": 0.5}, "value": 1, "extra": 1}, "extra"),
           ({"params": {"x": 0.5}, "value": 1, "user_attrs": [1]}, "user_attrs"),
           ({"params": {"x": 0.5}, "value": 1, "note": 3}, "note")]
    for body, field in bad:
        st, out = hp.request("POST", S + "/%d/trials" % sid, body)
        c.check(st == 400 and out["error"]["field"] == field, "add %s: 400 naming %s (%s)" % (body, field, out))
    ev = [e for e in hp.ok("GET", S + "/%d/trials?state=complete" % sid)["trials"]]
    c.check(len(ev) == 2, "only the valid trials were stored (%d complete)" % len(ev))
    # the tuner learns from added trials like told ones
    for i in range(30):
        x = (i + 0.5) / 30
        hp.ok("POST", S + "/%d/trials" % sid, {"params": {"x": x}, "value": quad(x)})
    xs = [hp.ok("POST", S + "/%d/ask" % sid)["params"]["x"] for _ in range(5)]
    err = sum(abs(x - 0.3) for x in xs) / len(xs)
    c.check(err < 0.1, "TPE's suggestions after 30 added trials are near the optimum: mean |x-0.3| = %.3f %s" % (err, xs))
    # max_trials: added trials count; an external study whose budget they spend completes
    sid2 = hp.ok("POST", S, {"name": "add2", "space": LINE, "tuner": {"max_trials": 2}})["id"]
    hp.ok("POST", S + "/%d/trials" % sid2, {"params": {"x": 0.5}, "value": 1})
    hp.ok("POST", S + "/%d/trials" % sid2, {"params": {"x": 0.6}, "value": 2})
    got = hp.ok("GET", S + "/%d" % sid2)
    c.check(got["state"] == "complete" and got["n_trials"] == 2, "2 added trials spend max_trials 2: %s" % got["state"])
    st, out = hp.request("POST", S + "/%d/trials" % sid2, {"params": {"x": 0.5}, "value": 1})
    c.check(st == 409, "adding to a complete study: 409 (%s)" % out)
    return sid


def export_checks(c, hp, tmp):
    """A mixed-space study with every kind of trial: export, import, copy."""
    sid = hp.ok("POST", S, {"name": "exp", "space": MIXED, "tuner": {"algorithm": "tpe", "seed": 1}})["id"]
    for i in range(12):
        t = hp.ok("POST", S + "/%d/ask" % sid)
        hp.ok("POST", "/api/v1/trials/%d/report" % t["trial_id"], {"step": 1, "value": 5.0 + i})
        if i % 5 == 4:
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"state": "pruned"})
        elif i == 7:
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"state": "failed"})
        else:
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": t["params"]["x"] ** 2 + i * 1e-3})
    hp.ok("POST", S + "/%d/ask" % sid)  # running: skipped
    hp.ok("POST", S + "/%d/enqueue" % sid, {"params": {"x": 1}})  # queued: skipped
    # user_attrs and notes travel with the study and its trials
    hp.ok("PATCH", S + "/%d" % sid, {"user_attrs": {"team": "vision", "grid": [1, 2]}, "note": "the study's note"})
    t2 = hp.ok("GET", S + "/%d/trials" % sid)["trials"][2]
    hp.ok("PATCH", "/api/v1/trials/%d" % t2["id"], {"user_attrs": {"host": "n1"}, "note": "looked at"})
    doc = hp.ok("GET", S + "/%d/export" % sid)
    c.check(doc["study"]["user_attrs"] == {"team": "vision", "grid": [1, 2]} and
            doc["study"]["note"] == "the study's note" and doc["trials"][2]["user_attrs"] == {"host": "n1"} and
            doc["trials"][2]["note"] == "looked at" and doc["trials"][0]["user_attrs"] == {} and
            doc["trials"][0]["note"] == "", "the export holds user_attrs and notes: %s %s" % (doc["study"], doc["trials"][2]))
    c.check(doc["format"] == "hpo.study/1" and len(doc["trials"]) == 14 and doc["study"]["definition"]["space"] == MIXED,
            "the export holds the 14 trials and the definition")
    t0 = doc["trials"][0]
    c.check(t0["intermediate_values"] == {"1": 5.0} and t0["datetime_start"].endswith("+00:00") and
            t0["distributions"]["n"] == {"name": "IntDistribution", "attributes": {"low": 1, "high": 9, "log": False, "step": 2}} and
            t0["distributions"]["q"]["attributes"]["step"] == 0.25 and t0["distributions"]["lr"]["attributes"]["log"] is True,
            "a trial's intermediate values, times and distributions: %s" % t0)
    imp = hp.ok("POST", S + "/import", dict(doc, name="imported"))
    c.check(imp["imported"] == 12 and imp["skipped"] == 2 and imp["study"]["name"] == "imported" and
            imp["study"]["trials_by_state"]["pruned"] == 2 and imp["study"]["trials_by_state"]["failed"] == 1,
            "import: 12 finished trials, running + queued skipped: %s" % imp)
    best = hp.ok("GET", S + "/%d/best" % sid)["trials"][0]
    ibest = hp.ok("GET", S + "/%d/best" % imp["study"]["id"])["trials"][0]
    c.check(best["value"] == ibest["value"] and best["params"] == ibest["params"], "the import's best is the original's")
    itr = hp.ok("GET", S + "/%d/trials" % imp["study"]["id"])["trials"]
    c.check([t["number"] for t in itr] == list(range(12)) and
            abs(itr[0]["started"] - hp.ok("GET", S + "/%d/trials" % sid)["trials"][0]["started"]) < 1e-3,
            "imported trials are renumbered and keep their times")
    cp = hp.ok("POST", S + "/%d/copy" % sid, {"name": "copied"})
    c.check(cp["imported"] == 12 and cp["study"]["name"] == "copied" and cp["study"]["best"]["value"] == best["value"],
            "copy: the finished trials and the best: %s" % cp["study"]["best"])
    for new_id, what in ((imp["study"]["id"], "import"), (cp["study"]["id"], "copy")):
        got = hp.ok("GET", S + "/%d" % new_id)
        tr2 = hp.ok("GET", "/api/v1/trials/%d" % hp.ok("GET", S + "/%d/trials" % new_id)["trials"][2]["id"])
        c.check(got["user_attrs"] == {"team": "vision", "grid": [1, 2]} and got["note"] == "the study's note" and
                tr2["user_attrs"] == {"host": "n1"} and tr2["note"] == "looked at",
                "%s keeps the user_attrs and notes: %s %s" % (what, got["user_attrs"], tr2["user_attrs"]))
    # a bad trial refuses the whole import
    n_before = len(hp.ok("GET", S)["studies"])
    bad = json.loads(json.dumps(doc))
    bad["trials"][3]["params"]["x"] = 7
    st, out = hp.request("POST", S + "/import", bad)
    c.check(st == 400 and out["error"]["field"] == "trials[3].params.x", "a bad trial: 400 naming it: %s" % out)
    bad = json.loads(json.dumps(doc))
    del bad["trials"][0]["value"]
    st, out = hp.request("POST", S + "/import", bad)
    c.check(st == 400 and out["error"]["field"] == "trials[0].value", "a complete trial without a value: %s" % out)
    bad = json.loads(json.dumps(doc))
    bad["trials"][1]["user_attrs"] = ["not", "an", "object"]
    st, out = hp.request("POST", S + "/import", bad)
    c.check(st == 400 and out["error"]["field"] == "trials[1].user_attrs", "a trial's bad user_attrs: %s" % out)
    bad = json.loads(json.dumps(doc))
    bad["study"]["note"] = "x" * 65537
    st, out = hp.request("POST", S + "/import", bad)
    c.check(st == 413 and out["error"]["field"] == "study.note", "a study note over 64 KiB: %s" % out)
    st, out = hp.request("POST", S + "/import", dict(doc, format="other"))
    c.check(st == 400 and out["error"]["field"] == "format", "another format: 400 %s" % out)
    c.check(len(hp.ok("GET", S)["studies"]) == n_before, "refused imports leave no study")
    path = os.path.join(tmp, "export.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return sid, doc, best


def optuna_checks(c, hp, doc, best):
    try:
        import optuna
        from optuna.distributions import json_to_distribution
    except Exception as e:  # noqa: BLE001
        print("SKIP (optuna interop): optuna cannot be imported: %s" % e)
        return
    import datetime
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    states = {"complete": optuna.trial.TrialState.COMPLETE, "pruned": optuna.trial.TrialState.PRUNED,
              "failed": optuna.trial.TrialState.FAIL}
    # hpo -> Optuna
    study = optuna.create_study(direction=doc["study"]["direction"])
    trials = []
    for t in doc["trials"]:
        if t["state"] not in states:
            continue
        trials.append(optuna.trial.create_trial(
            state=states[t["state"]], params=t["params"],
            value=t["value"] if t["state"] == "complete" else None,
            distributions={k: json_to_distribution(json.dumps(v)) for k, v in t["distributions"].items()},
            intermediate_values={int(k): v for k, v in t["intermediate_values"].items()},
            user_attrs=t["user_attrs"]))
        trials[-1].datetime_start = datetime.datetime.fromisoformat(t["datetime_start"])
    study.add_trials(trials)
    c.check(study.best_value == best["value"] and study.best_params == best["params"],
            "Optuna loads the export: best %s %s" % (study.best_value, study.best_params))
    c.check(study.trials[2].user_attrs == {"host": "n1"}, "Optuna reads a trial's user_attrs: %s" % study.trials[2].user_attrs)
    # Optuna -> hpo: an Optuna study written in the format
    space = {"u": {"type": "float", "low": -3, "high": 3}, "k": {"type": "int", "low": 0, "high": 4},
             "act": {"type": "choice", "values": ["relu", "tanh"]}}

    def objective(trial):
        u = trial.suggest_float("u", -3, 3)
        k = trial.suggest_int("k", 0, 4)
        act = trial.suggest_categorical("act", ["relu", "tanh"])
        trial.report(u * u, 0)
        if k == 4:
            raise optuna.TrialPruned()
        return (u - 1) ** 2 + k + (0.5 if act == "tanh" else 0)

    ostudy = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=2))
    ostudy.optimize(objective, n_trials=25)
    ostudy.ask()  # left running: skipped
    name = {optuna.trial.TrialState.COMPLETE: "complete", optuna.trial.TrialState.PRUNED: "pruned",
            optuna.trial.TrialState.FAIL: "failed", optuna.trial.TrialState.RUNNING: "running"}
    odoc = {"format": "hpo.study/1",
            "study": {"name": "from-optuna", "definition": {"name": "from-optuna", "space": space,
                                                            "objective": {"direction": "minimize"}}},
            "trials": [{"number": t.number, "state": name[t.state], "params": t.params, "value": t.value,
                        "intermediate_values": {str(k): v for k, v in t.intermediate_values.items()},
                        "datetime_start": t.datetime_start.isoformat() if t.datetime_start else None,
                        "datetime_complete": t.datetime_complete.isoformat() if t.datetime_complete else None}
                       for t in ostudy.trials]}
    imp = hp.ok("POST", S + "/import", odoc)
    hbest = hp.ok("GET", S + "/%d/best" % imp["study"]["id"])["trials"][0]
    c.check(imp["skipped"] == 1 and imp["imported"] == 25 and hbest["value"] == ostudy.best_value and
            hbest["params"] == ostudy.best_params,
            "hpo imports an Optuna study: best %s %s (%s)" % (hbest["value"], hbest["params"], imp))
    optuna_converter_checks(c, hp, optuna)


def optuna_converter_checks(c, hp, optuna):
    """Client.import_optuna: an Optuna study as Optuna holds it, its space
    read from the trials' distributions."""
    import math
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the failing trials' tracebacks
    cl = hpo.Client(hp.url)

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        n = trial.suggest_int("n", 2, 10, step=2)
        q = trial.suggest_float("q", 0, 1, step=0.25)
        act = trial.suggest_categorical("act", ["relu", "tanh", 3])
        trial.set_user_attr("twice_n", 2 * n)
        trial.report(lr, 0)
        if n == 10:
            raise optuna.TrialPruned()
        if q == 1.0 and act == "tanh":
            raise ValueError("this corner fails")
        return (math.log10(lr) + 2) ** 2 + n + q

    ost = optuna.create_study(study_name="optuna-native", sampler=optuna.samplers.TPESampler(seed=3))
    ost.set_user_attr("origin", "optuna")
    ost.optimize(objective, n_trials=30, catch=(ValueError,))
    ost.ask()  # running: skipped
    got = cl.import_optuna(ost)
    space = hp.ok("GET", S + "/%d" % got.id)["definition"]["space"]
    htrials = got.trials
    by_number = {t.number: t for t in htrials}
    states = {s: sum(t.state.name == s for t in ost.trials) for s in ("COMPLETE", "PRUNED", "FAIL")}
    c.check(space == {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                      "n": {"type": "int", "low": 2, "high": 10, "step": 2},
                      "q": {"type": "float", "low": 0, "high": 1, "step": 0.25},
                      "act": {"type": "choice", "values": ["relu", "tanh", 3]}},
            "import_optuna: the space from Optuna's distributions: %s" % space)
    c.check(got.imported == 30 and got.skipped == 1 and got.name == "optuna-native" and
            got.best_value == ost.best_value and got.best_params == ost.best_params and
            got.user_attrs == {"origin": "optuna"},
            "import_optuna: 30 trials (%s), 1 running skipped, Optuna's best %s %s, the study's user_attrs"
            % (states, got.best_value, got.best_params))
    c.check(all(by_number[i].params == t.params and by_number[i].user_attrs == t.user_attrs and
                by_number[i].state == {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed"}[t.state.name]
                for i, t in enumerate(ost.trials[:30])),
            "import_optuna: each trial's params, state and user_attrs")

    mo = optuna.create_study(directions=["minimize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=1))
    mo.optimize(lambda t: (t.suggest_float("x", 0, 1), math.sqrt(t.suggest_float("y", 0, 1))), n_trials=15)
    hmo = cl.import_optuna(mo, name="optuna-mo")
    front = sorted(tuple(t.values) for t in hmo.best_trials)
    c.check(front == sorted(tuple(t.values) for t in mo.best_trials),
            "import_optuna of a two-objective study: Optuna's Pareto front (%d trials)" % len(front))

    cond = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))

    def conditional(t):
        opt = t.suggest_categorical("opt", ["sgd", "adam"])
        m = t.suggest_float("m", 0, 0.9) if opt == "sgd" else 0
        return m + (opt == "adam")
    cond.optimize(conditional, n_trials=12)
    try:
        cl.import_optuna(cond)
        c.check(False, "a conditional parameter without space=: ValueError")
    except ValueError as e:
        c.check("'m'" in str(e), "a conditional parameter without space=: ValueError naming it (%s)" % e)
    given = {"opt": {"type": "choice", "values": ["sgd", "adam"]},
             "m": {"type": "float", "low": 0, "high": 0.9, "condition": {"opt": ["sgd"]}}}
    hc = cl.import_optuna(cond, name="optuna-cond", space=given)
    c.check(hc.imported == 12 and hc.best_value == cond.best_value, "with space= and its condition: imported (%s)"
            % hc.best_value)


def warm_start_checks(c, hp, hpod_bin, data_dir, after_restart):
    src = hp.ok("POST", S, {"name": "src", "space": LINE})["id"]
    for i in range(30):
        x = (i + 0.5) / 30
        hp.ok("POST", S + "/%d/trials" % src, {"params": {"x": x}, "value": quad(x)})
    other = hp.ok("POST", S, {"name": "other", "space": {"y": {"type": "float", "low": 0, "high": 1}}})["id"]
    hp.ok("POST", S + "/%d/trials" % other, {"params": {"y": 0.5}, "value": 0.0})
    tuner = {"algorithm": "tpe", "seed": 11}
    st, out = hp.request("POST", S, {"space": LINE, "tuner": tuner, "warm_start": {"study_ids": [src, src + 9999]}})
    c.check(st == 400 and out["error"]["field"] == "warm_start.study_ids[1]", "an unknown id: 400 %s" % out)
    st, out = hp.request("POST", S, {"space": LINE, "warm_start": {"study_ids": [src]}})
    c.check(st == 400 and out["error"]["field"] == "warm_start", "random learns nothing: 400 %s" % out)
    warm = hp.ok("POST", S, {"name": "warm", "space": LINE, "tuner": dict(tuner, max_trials=10),
                             "warm_start": {"study_ids": [src, other]}})
    twin = hp.ok("POST", S, {"name": "twin", "space": LINE, "tuner": dict(tuner, max_trials=10),
                             "warm_start": {"study_ids": [src, other]}})
    cold = hp.ok("POST", S, {"name": "cold", "space": LINE, "tuner": tuner})
    c.check(warm["warm_start"] == {"study_ids": [src, other], "trials_used": 30, "trials_skipped": 1},
            "30 trials used, 1 outside the space: %s" % warm["warm_start"])
    got = hp.ok("GET", S + "/%d" % warm["id"])
    c.check(got["definition"]["warm_start"] == {"study_ids": [src, other]} and got["n_trials"] == 0,
            "the definition shows the ids; the priors are no trials of the study")

    def first(sid, n=5):
        xs = []
        for _ in range(n):
            t = hp.ok("POST", S + "/%d/ask" % sid)
            xs.append(t["params"]["x"])
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": quad(t["params"]["x"])})
        return xs

    wx, cx = first(warm["id"]), first(cold["id"])
    werr, cerr = (sum(abs(x - 0.3) for x in xs) / len(xs) for xs in (wx, cx))
    print("warm start (TPE, 30 trials of (x-0.3)^2): mean |x-0.3| of the first 5 suggestions %.3f warm, %.3f cold"
          % (werr, cerr))
    c.check(werr < 0.1 and cerr > 2 * werr,
            "warm-started TPE starts near the optimum: mean |x-0.3| %.3f warm, %.3f cold" % (werr, cerr))
    c.check(len(hp.ok("GET", S + "/%d/trials" % warm["id"])["trials"]) == 5, "max_trials counts only its own trials")
    # restart with the source deleted: the twin's first suggestion is the warm study's first
    hp.ok("DELETE", S + "/%d" % src)
    hp.stop()
    hp2 = Hpod(hpod_bin, data_dir=data_dir).start()
    try:
        tx = hp2.ok("POST", S + "/%d/ask" % twin["id"])["params"]["x"]
        c.check(tx == wx[0], "after a restart (source deleted) the twin suggests what the warm study did: %r %r" % (tx, wx[0]))
        nxt = hp2.ok("POST", S + "/%d/ask" % warm["id"])
        c.check(nxt["number"] == 5 and abs(nxt["params"]["x"] - 0.3) < 0.3, "the warm study goes on: %s" % nxt["params"])
        after_restart(hp2)
    finally:
        hp2.stop()


def client_checks(c, hp):
    cl = hpo.Client(hp.url)
    st = cl.create_study("pc", LINE, tuner={"algorithm": "tpe", "seed": 5, "max_trials": 20})
    q = st.enqueue_trial({"x": 0.25})
    c.check(q.state == "queued" and q.params == {"x": 0.25}, "Study.enqueue_trial: %r" % q)
    t = st.ask()
    c.check(t.id == q.id and t.params["x"] == 0.25, "the next ask is the enqueued trial")
    t.tell(quad(0.25))
    a = st.add_trial({"x": 0.3}, 0.0, intermediate_values={1: 0.5}, user_attrs={"from": "paper"}, note="table 2")
    c.check(a.state == "complete" and st.best_value == 0.0 and a.intermediate == {1: 0.5}, "Study.add_trial: %r" % a)
    c.check(a.user_attrs == {"from": "paper"} and a.note == "table 2",
            "Study.add_trial keeps user_attrs and note: %r %r" % (a.user_attrs, a.note))
    with tempfile.TemporaryDirectory() as d:
        path = st.export(os.path.join(d, "s.json"))
        s2 = cl.import_study(path, name="pc-imported")
    c.check(s2.imported == 2 and s2.skipped == 0 and s2.best_value == 0.0, "Client.import_study: %r" % s2)
    s3 = cl.copy_study(st, name="pc-copy")
    c.check(s3.name == "pc-copy" and s3.imported == 2, "Client.copy_study: %r" % s3)
    w = cl.create_study("pc-warm", LINE, tuner="tpe", warm_start=[st, s3.id])
    c.check(w.warm_start == {"study_ids": [st.id, s3.id], "trials_used": 4, "trials_skipped": 0},
            "create_study(warm_start=): %s" % w.warm_start)
    try:
        import optuna
        ft = optuna.trial.create_trial(params={"x": 0.4}, distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
                                       value=0.01, user_attrs={"run": "optuna"})
        b = st.add_trial(ft)
        c.check(b.user_attrs == {"run": "optuna"}, "a FrozenTrial's user_attrs come along: %r" % b.user_attrs)
        c.check(b.value == 0.01 and b.params == {"x": 0.4}, "add_trial takes an optuna FrozenTrial: %r" % b)
    except ImportError:
        pass
    try:
        st.enqueue_trial({"x": 5})
        c.check(False, "a bad enqueue raises")
    except hpo.InvalidArgument as e:
        c.check(e.field == "params.x", "InvalidArgument naming params.x: %s" % e)


def cli_checks(c, hp, hpo_bin, tmp):
    env = dict(os.environ, HPO_URL=hp.url)

    def run(*argv):
        r = subprocess.run([hpo_bin] + list(argv), capture_output=True, text=True, env=env, timeout=30)
        return r.returncode, r.stdout, r.stderr

    sid = hp.ok("POST", S, {"name": "cli", "space": MIXED, "tuner": {"seed": 3}})["id"]
    rc, out, err = run("study", "enqueue", str(sid), "--param", "opt=sgd", "--param", "m=0.5", "--param", "n=3", "--json")
    q = json.loads(out) if rc == 0 else {}
    c.check(q.get("params") == {"opt": "sgd", "m": 0.5, "n": 3} and q.get("state") == "queued",
            "hpo study enqueue --param: %d %s %s" % (rc, out, err))
    rc, out, err = run("study", "enqueue", str(sid), "--param", "n=4")
    c.check(rc == 2 and "params.n" in err, "a bad param: exit 2 naming it (%d %s)" % (rc, err))
    rc, out, err = run("study", "add-trial", str(sid), "--param", "x=0.5", "--param", "n=1", "--param", "lr=0.01",
                       "--param", "q=0.5", "--param", "opt=3", "--param", "b=true", "--value", "0.2",
                       "--intermediate", "1=0.4")
    c.check(rc == 0 and out.startswith("trial ") and "complete 0.2" in out, "hpo study add-trial: %d %s %s" % (rc, out, err))
    rc, out, err = run("study", "add-trial", str(sid), "--param", "x=0.5")
    c.check(rc == 1, "add-trial without a value: usage error (%d)" % rc)
    path = os.path.join(tmp, "cli-export.json")
    rc, out, err = run("study", "export", str(sid), "-o", path)
    doc = json.load(open(path)) if rc == 0 else {}
    c.check(rc == 0 and doc.get("format") == "hpo.study/1" and len(doc.get("trials", [])) == 2,
            "hpo study export -o: %d %s" % (rc, out))
    rc, out, err = run("study", "import", path, "--name", "cli-imported")
    new = int(out) if rc == 0 and out.strip().isdigit() else 0
    c.check(new and hp.ok("GET", S + "/%d" % new)["name"] == "cli-imported" and "1 trials imported, 1 skipped" in err,
            "hpo study import: %d %r %r" % (rc, out, err))
    rc, out, err = run("study", "copy", str(sid), "--name", "cli-copy", "--json")
    c.check(rc == 0 and json.loads(out)["study"]["name"] == "cli-copy", "hpo study copy --json: %d %s" % (rc, err))
    for cmd in ("enqueue", "add-trial", "export", "import", "copy"):
        rc, out, _ = run("study", cmd, "--help")
        c.check(rc == 0 and out.startswith("usage: hpo study %s" % cmd), "hpo study %s --help" % cmd)


def list_checks(c, hp):
    """GET /api/v1/studies: newest first; ?name= filters, ?limit= and ?offset= page (total counts the matches)."""
    space = {"x": {"type": "float", "low": 0, "high": 1}}
    made = [hp.ok("POST", "/api/v1/studies", {"name": "page-%d" % (i % 2), "space": space})["id"] for i in range(5)]
    out = hp.ok("GET", "/api/v1/studies")
    everything = [s["id"] for s in out["studies"]]
    c.check(everything == sorted(everything, reverse=True) and set(made) <= set(everything)
            and out["total"] == len(everything) and out["offset"] == 0,
            "the whole list, newest first, total and offset: %s %s" % (everything, out["total"]))
    out = hp.ok("GET", "/api/v1/studies?name=page-0&limit=2")
    c.check([s["id"] for s in out["studies"]] == [made[4], made[2]] and out["total"] == 3,
            "name page-0, first page of 2: %s total %s" % ([s["id"] for s in out["studies"]], out["total"]))
    out = hp.ok("GET", "/api/v1/studies?name=page-0&limit=2&offset=2")
    c.check([s["id"] for s in out["studies"]] == [made[0]] and out["offset"] == 2,
            "name page-0, second page: %s" % [s["id"] for s in out["studies"]])
    out = hp.ok("GET", "/api/v1/studies?name=nobody")
    c.check(out["studies"] == [] and out["total"] == 0, "an unknown name lists nothing: %s" % out)
    for query, field in (("limit=0", "limit"), ("offset=-1", "offset"), ("limit=x", "limit")):
        st, out = hp.request("GET", "/api/v1/studies?" + query)
        c.check(st == 400 and out["error"]["field"] == field, "?%s -> 400 naming %s: %s %s" % (query, field, st, out))
    for sid in made:
        hp.ok("DELETE", "/api/v1/studies/%d" % sid)


def field(out):
    return (out or {}).get("error", {}).get("field") if isinstance(out, dict) else None


def document_edge_checks(c, hp):
    """What export, import, copy, enqueue and add_trial once got wrong (a
    study-management audit; each check failed before its fix)."""
    sid = hp.ok("POST", S, {"name": "edges", "space": {"x": {"type": "float", "low": 0, "high": 1},
                                                      "y": {"type": "int", "low": 0, "high": 10}},
                            "tuner": {"seed": 1}})["id"]
    a = hp.ok("POST", S + "/%d/ask" % sid)
    hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"value": 0.5})
    f = hp.ok("POST", S + "/%d/ask" % sid)
    hp.ok("POST", "/api/v1/trials/%d/tell" % f["trial_id"], {"state": "failed", "error": "CUDA out of memory"})
    # enqueue: user_attrs kept; skip_if_exists finds the waiting one (200, nothing new)
    q = hp.ok("POST", S + "/%d/enqueue" % sid, {"params": {"x": 0.25}, "user_attrs": {"why": "baseline"}})
    c.check(q["user_attrs"] == {"why": "baseline"}, "enqueue stores user_attrs (%s)" % q.get("user_attrs"))
    status, again = hp.request("POST", S + "/%d/enqueue" % sid, {"params": {"x": 0.25}, "skip_if_exists": True})
    queued = hp.ok("GET", S + "/%d" % sid)["trials_by_state"]["queued"]
    c.check(status == 200 and again["id"] == q["id"] and queued == 1,
            "enqueue skip_if_exists of waiting params: 200 with that trial, still 1 queued (%d, %d)" % (status, queued))
    hp.ok("POST", S + "/%d/cancel" % sid)  # cancels the partial enqueued trial while it waits
    doc = hp.ok("GET", S + "/%d/export" % sid)
    failed = [t for t in doc["trials"] if t["state"] == "failed"]
    c.check(failed and failed[0].get("error") == "CUDA out of memory", "the export keeps a failed trial's error")
    status, out = hp.request("POST", S + "/%d/copy" % sid, {"name": "edges-copy"})
    c.check(status == 201 and out["imported"] == 2 and out["skipped"] == 1,
            "copy of a study whose partial enqueued trial was cancelled: 201, 2 imported, the never-started one "
            "skipped (%d %s)" % (status, out if status != 201 else ""))
    if status == 201:
        got = hp.ok("GET", S + "/%d/trials" % out["study"]["id"])["trials"]
        c.check([t.get("error") for t in got] == [None, "CUDA out of memory"], "the copy keeps the error")
        again = hp.ok("GET", S + "/%d/export" % out["study"]["id"])
        c.check([(t["datetime_start"], t["datetime_complete"]) for t in again["trials"]] ==
                [(t["datetime_start"], t["datetime_complete"]) for t in doc["trials"] if t["datetime_start"]],
                "export -> copy -> export keeps every time to the microsecond")
    # import: a document contradicting itself is refused, naming the field
    base = {"format": "hpo.study/1", "study": {"definition": {"space": {"x": {"type": "float", "low": 0, "high": 1}}}}}
    good = {"number": 0, "state": "complete", "params": {"x": 0.5}, "value": 1.0}
    for trial, want in (({"state": "failed", "value": 7}, "trials[0].value"),
                        ({"values": [5]}, "trials[0].values"),
                        ({"value_n": 5}, "trials[0].value_std"),
                        ({"state": "failed", "value": None, "value_n": 5}, "trials[0].value_n"),
                        ({"error": "why"}, "trials[0].error"),
                        ({"intermediate_values": {"1": 1, "01": 2}}, "trials[0].intermediate_values"),
                        ({"datetime_start": "2024-13-45T99:99:00"}, "trials[0].datetime_start"),
                        ({"datetime_start": 1e12}, "trials[0].datetime_start"),
                        ({"datetime_start": "2024-01-02T00:00:00", "datetime_complete": "2024-01-01T00:00:00"},
                         "trials[0].datetime_complete")):
        status, out = hp.request("POST", S + "/import", dict(base, trials=[dict(good, **trial)]))
        c.check(status == 400 and field(out) == want, "import of a trial %s: 400 naming %s (%d %s)"
                % (trial, want, status, field(out)))
    status, out = hp.request("POST", S + "/import", dict(base, trials=[good, dict(good)]))
    c.check(status == 400 and field(out) == "trials[1].number", "duplicate numbers: 400 naming trials[1].number")
    bad_def = {"format": "hpo.study/1", "study": {"definition": {"space": {"x": {"type": "float", "low": 2,
                                                                                 "high": 1}}}}}
    status, out = hp.request("POST", S + "/import", bad_def)
    c.check(status == 400 and field(out) == "study.definition.space.x.low",
            "import's definition errors say where they are (%s)" % field(out))
    status, out = hp.request("POST", S, {"space": LINE, "bogus": 1})
    c.check(status == 400 and field(out) == "bogus", "an unknown definition key is named (%s)" % field(out))
    # get-or-create needs a name; names count characters; attrs nest at most 64 deep
    status, out = hp.request("POST", S, {"space": LINE, "load_if_exists": True})
    c.check(status == 400 and field(out) == "name", "get-or-create without a name: 400 naming name")
    status, out = hp.request("POST", S, {"name": "\u00e9" * 128, "space": LINE})
    c.check(status == 201, "a name of 128 two-byte characters is accepted (%d)" % status)
    deep = 1
    for _ in range(70):
        deep = [deep]
    status, out = hp.request("PATCH", S + "/%d" % sid, {"user_attrs": {"deep": deep}})
    c.check(status == 400 and field(out) == "user_attrs.deep", "user_attrs nested 71 deep: 400 naming it (%d %s)"
            % (status, field(out)))
    status, out = hp.request("POST", S, {"space": LINE, "tuner": {"algorithm": "tpe"},
                                         "warm_start": {"study_ids": [sid, sid]}})
    c.check(status == 400 and field(out) == "warm_start.study_ids[1]",
            "a warm start naming a study twice: 400 naming warm_start.study_ids[1] (%s)" % field(out))
    # add_trial keeps a FrozenTrial's times
    t = hp.ok("POST", S + "/%d/trials" % hp.ok("POST", S, {"space": LINE})["id"],
              {"params": {"x": 0.3}, "value": 1, "datetime_start": "2020-01-01T12:00:00",
               "datetime_complete": "2020-01-01T13:00:00Z"})
    c.check(t["started"] == 1577880000 and t["finished"] == 1577883600, "add_trial keeps datetime_start/complete")


def pruner_history_checks(c, hp):
    """A copy's or an import's pruner answers as the original's: the export
    keeps what the pruner knew of each report besides its value ("reports":
    MO-ASHA's vectors, late and pruned reports with their rung). Returns a
    check to run after a restart, which replays the stored reports."""
    line = {"x": {"type": "float", "low": 0, "high": 1}}
    asha = {"algorithm": "asha", "eta": 2, "min_resource": 1}
    mo = hp.ok("POST", S, {"name": "mo-asha", "space": line, "objectives": [{"metric": "a"}, {"metric": "b"}],
                           "tuner": {"algorithm": "random", "seed": 1, "pruner": asha}})["id"]
    for i in range(4):
        tid = hp.ok("POST", S + "/%d/ask" % mo)["trial_id"]
        hp.ok("POST", T + "/%d/report" % tid, {"step": 1, "values": [1.0 + i, 1.0 + i]})
        hp.ok("POST", T + "/%d/tell" % tid, {"values": [1.0 + i, 1.0 + i]})
    doc = hp.ok("GET", S + "/%d/export" % mo)
    vectors = [t.get("reports", {}).get("1", {}).get("values") for t in doc["trials"]]
    c.check(vectors == [[1.0 + i, 1.0 + i] for i in range(4)], "the export keeps each report's vector: %s" % vectors)
    mo_copy = hp.ok("POST", S + "/%d/copy" % mo, {"name": "mo-asha-copy"})["study"]["id"]
    mo_import = hp.ok("POST", S + "/import", dict(doc, name="mo-asha-import"))["study"]["id"]

    def dominated(sid, server):
        tid = server.ok("POST", S + "/%d/ask" % sid)["trial_id"]
        return server.ok("POST", T + "/%d/report" % tid, {"step": 1, "values": [9.0, 9.0]})["prune"]

    answers = [dominated(s, hp) for s in (mo, mo_copy, mo_import)]
    c.check(answers == [True, True, True], "a report dominated at the rung by all 4 is pruned in the original, its "
            "copy and its import: %s" % answers)
    # one objective: a trial stopped at rung 0 by a report at step 2 holds no
    # value at rung 1; a late report is no rung's value
    one = hp.ok("POST", S, {"name": "rungs", "space": line, "tuner": {"algorithm": "random", "seed": 1,
                                                                     "pruner": asha}})["id"]
    a, b = [hp.ok("POST", S + "/%d/ask" % one)["trial_id"] for _ in range(2)]

    def rep(server, tid, step, v):
        return server.ok("POST", T + "/%d/report" % tid, {"step": step, "value": v})["prune"]

    rep(hp, a, 1, 0.1), rep(hp, a, 2, 0.5), rep(hp, b, 2, 0.3), rep(hp, b, 1, 0.2)
    hp.ok("POST", T + "/%d/tell" % a, {"value": 0.5})
    hp.ok("POST", T + "/%d/tell" % b, {"state": "pruned"})
    reports = [t.get("reports") for t in hp.ok("GET", S + "/%d/export" % one)["trials"]]
    c.check(reports[0] is None and reports[1]["2"] == {"pruned": True, "rung": 0} and reports[1]["1"].get("late"),
            "the export keeps the pruned report's rung and the late one: %s" % reports)
    one_copy = hp.ok("POST", S + "/%d/copy" % one, {"name": "rungs-copy"})["study"]["id"]
    copied = [t.get("reports") for t in hp.ok("GET", S + "/%d/export" % one_copy)["trials"]]
    c.check(copied == reports, "a copy's export says the same of its reports: %s" % copied)

    def rungs(server):
        got = []
        for sid in (one, one_copy):
            tid = server.ok("POST", S + "/%d/ask" % sid)["trial_id"]
            got.append((rep(server, tid, 1, 0.05), rep(server, tid, 2, 0.4)))
        return got

    got = rungs(hp)
    c.check(got[0] == got[1], "one objective: the copy's pruner answers as the original's: %s" % got)
    # what the document says of reports is checked
    base = {"format": "hpo.study/1", "study": {"definition": {"space": line}}}
    good = {"number": 0, "state": "pruned", "params": {"x": 0.5}, "intermediate_values": {"1": 0.5, "2": 0.4}}
    mo_base = {"format": "hpo.study/1", "study": {"definition": {
        "space": line, "objectives": [{"metric": "a"}, {"metric": "b"}],
        "tuner": {"algorithm": "random", "pruner": asha}}}}
    for b_, reports_, want in ((base, {"3": {"late": True}}, "trials[0].reports.3"),
                               (base, {"1": {"bogus": 1}}, "trials[0].reports.1.bogus"),
                               (base, {"1": {"rung": 0}}, "trials[0].reports.1.rung"),
                               (base, {"2": {"pruned": 1}}, "trials[0].reports.2.pruned"),
                               (base, {"1": {"values": [0.5, 1]}}, "trials[0].reports.1.values"),
                               (mo_base, {"1": {"values": [0.6, 1]}}, "trials[0].reports.1.values"),
                               (mo_base, {"1": {"values": [0.5]}}, "trials[0].reports.1.values")):
        status, out = hp.request("POST", S + "/import", dict(b_, trials=[dict(good, reports=reports_)]))
        c.check(status == 400 and field(out) == want, "import of reports %s: 400 naming %s (%d %s)"
                % (reports_, want, status, field(out)))
    status, out = hp.request("POST", S + "/import", dict(mo_base, trials=[dict(
        good, reports={"1": {"values": [0.5, None], "late": True}, "2": {"pruned": True, "rung": 1}})]))
    c.check(status == 201, "a document's reports are imported (%d %s)" % (status, field(out)))

    def after_restart(server):
        again = [dominated(s, server) for s in (mo_copy, mo_import)]
        c.check(again == [True, True], "after a restart the copy and the import still prune it: %s" % again)
        got = rungs(server)
        c.check(got[0] == got[1], "after a restart the copy's rungs answer as the original's: %s" % got)

    return after_restart


def main():
    args = parse_args()
    c = Checks()
    tmp = tempfile.mkdtemp(prefix="hpo-manage-")
    data_dir = os.path.join(tmp, "data")
    os.mkdir(data_dir)
    hp = Hpod(args.hpod, data_dir=data_dir, args=["--devices", "cpu:1"]).start()
    t0 = time.time()
    try:
        list_checks(c, hp)
        enqueue_checks(c, hp)
        embedded_enqueue_checks(c, hp)
        add_trial_checks(c, hp)
        _, doc, best = export_checks(c, hp, tmp)
        optuna_checks(c, hp, doc, best)
        client_checks(c, hp)
        cli_checks(c, hp, args.hpo, tmp)
        document_edge_checks(c, hp)
        after_restart = pruner_history_checks(c, hp)
        warm_start_checks(c, hp, args.hpod, data_dir, after_restart)  # restarts hpod: last
    except Exception:
        print(hp.log_tail())
        raise
    finally:
        hp.cleanup()
        subprocess.run(["rm", "-rf", tmp])
    print("%.1f s" % (time.time() - t0))
    c.finish()


if __name__ == "__main__":
    main()
