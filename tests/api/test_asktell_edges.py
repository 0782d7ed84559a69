"""Ask/tell at its edges, against a real hpod (each check failed before its
fix):

- a tell whose repeats' mean overflows a double, or whose constraint
  violation does, is a 400 naming repeats / metrics.m with nothing stored
  (the trial still runs), and so is such an added trial; a stored trial
  the tuner refuses (a value of inf written into the database) is failed
  for the tuner after a restart, and the study goes on (it could not be
  loaded: every ask answered 400);
- a report at step 2^63-1 on an asha study is answered (it held the
  study's lock forever);
- bayesian with two objectives goes on suggesting after values near
  DBL_MAX (every ask from the GP phase on was a field-less 400);
- a step reported twice keeps its first value in storage, as the pruner
  does;
- a restart (kill -9) decides as the live run: a trial told to stop is
  told so again when it reports its step again (it was told to go on),
  and a step reported late (below the trial's highest) stays out of its
  rung (it counted there again, so a trial the live run prunes went on);
- a report that reaches two rungs and is stopped at the first is no value
  at the second, live and after a restart (Optuna records rungs on the way
  up; it counted there, and pruned a trial Optuna keeps);
- a report of "nan", "inf" or "-inf" (a diverged run) reaches the pruner,
  as in Optuna (the Python client answered prune without sending it);
- an enqueued trial still waiting at max_seconds is cancelled and the
  study completes (it ran on for good; an ask after the deadline got it);
- get-or-create of a warm-started study still finds it after the source
  study gained a trial (409 naming warm_start.trials_used);
- get-or-create finds a study posted again with keys written at their
  default ("log": false, "step": 1, "n_startup_trials": 10, the pruner's
  "eta": 3; each was a 409 naming it), and still refuses one that differs
  (409 naming the field);
- a grid over stepped floats that need 16 digits hands out each point
  once, then 409 naming space (it handed out 1e15 forever);
- parameter importance of values near DBL_MAX is not all zero;
- export, import and copy keep a repeated value's spread and count (they
  came back as null and 1)."""
import math
import os
import sqlite3
import time

from hpod import Checks, Hpod, parse_args, wait_for

X = {"x": {"type": "float", "low": 0, "high": 1}}


def create(hp, spec):
    return hp.ok("POST", "/api/v1/studies", spec)["id"]


def ask(hp, sid):
    return hp.ok("POST", "/api/v1/studies/%d/ask" % sid)


def check_overflowing_outcomes(hp, c):
    sid = create(hp, {"name": "overflow", "space": X, "tuner": {"algorithm": "tpe", "seed": 1, "max_trials": 20}})
    a = ask(hp, sid)
    st, out = hp.request("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"repeats": [1.5e308, 1.5e308]})
    c.check(st == 400 and out["error"]["field"] == "repeats", "repeats whose mean overflows -> 400 naming repeats: %s %s"
            % (st, out))
    c.check(hp.ok("GET", "/api/v1/trials/%d" % a["trial_id"])["state"] == "running", "nothing stored: still running")
    st, out = hp.request("POST", "/api/v1/studies/%d/trials" % sid,
                         {"params": {"x": 0.5}, "repeats": [1.7e308, 1.7e308]})
    c.check(st == 400 and out["error"]["field"] == "repeats", "an added trial the same: %s %s" % (st, out))
    hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"value": 0.25})
    mo = create(hp, {"name": "cons", "space": X, "tuner": {"algorithm": "tpe", "seed": 1},
                     "objectives": [{"metric": "a"}, {"metric": "b"}], "constraints": [{"metric": "m", "max": -1e308}]})
    b = ask(hp, mo)
    st, out = hp.request("POST", "/api/v1/trials/%d/tell" % b["trial_id"],
                         {"values": [1, 2], "metrics": {"m": 1.7e308}})
    c.check(st == 400 and out["error"]["field"] == "metrics.m",
            "a constraint violation that overflows -> 400 naming metrics.m: %s %s" % (st, out))
    return sid


def check_refused_stored_trial(args, hp, c, sid):
    """Writes inf as a complete trial's value (what the checks above now keep
    out), restarts: the study loads, and asks go on."""
    c.check(hp.stop() == 0, "graceful stop")
    db = sqlite3.connect(os.path.join(hp.data_dir, "hpo.db"))
    db.execute("UPDATE trials SET value = ? WHERE study_id = ? AND state = 1", (math.inf, sid))
    db.commit()
    db.close()
    hp2 = Hpod(args.hpod, data_dir=hp.data_dir).start()
    try:
        st, out = hp2.request("POST", "/api/v1/studies/%d/ask" % sid)
        c.check(st == 200, "a stored trial the tuner refuses does not keep the study from loading: %s %s" % (st, out))
    finally:
        hp2.stop(strict=False)
        hp2.cleanup()


def check_report_at_the_last_step(hp, c):
    sid = create(hp, {"name": "last-step", "space": X,
                      "tuner": {"algorithm": "random", "seed": 1, "pruner": {"algorithm": "asha"}}})
    a = ask(hp, sid)
    t0 = time.time()
    st, out = hp.request("POST", "/api/v1/trials/%d/report" % a["trial_id"],
                         {"step": 2 ** 63 - 1, "value": 0.5}, timeout=10)
    c.check(st == 200 and "prune" in out, "a report at step 2^63-1 is answered (%.2f s): %s %s"
            % (time.time() - t0, st, out))
    st, _ = hp.request("POST", "/api/v1/studies/%d/ask" % sid, timeout=10)
    c.check(st == 200, "the study's next ask is answered: %s" % st)


def check_bayesian_mo_huge(hp, c):
    sid = create(hp, {"name": "mo-huge", "space": X, "objectives": [{"metric": "a"}, {"metric": "b"}],
                      "tuner": {"algorithm": "bayesian", "seed": 1, "max_trials": 16}})
    bad = []
    for i in range(16):
        st, a = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
        if st != 200:
            bad.append((i, st, a))
            break
        vals = [-1.7e308, 0] if i % 2 == 0 else [1.7e308, -1.7e308]
        hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"values": vals})
    c.check(not bad, "bayesian on two objectives suggests on after values near DBL_MAX: %s" % bad)


def check_repeated_step(hp, c):
    sid = create(hp, {"name": "rep", "space": X, "tuner": {"algorithm": "random", "seed": 1,
                      "pruner": {"algorithm": "median", "n_startup_trials": 1, "warmup_steps": 0}}})
    a = ask(hp, sid)
    hp.ok("POST", "/api/v1/trials/%d/report" % a["trial_id"], {"step": 1, "value": 10.0})
    hp.ok("POST", "/api/v1/trials/%d/report" % a["trial_id"], {"step": 1, "value": 0.0})
    t = hp.ok("GET", "/api/v1/trials/%d" % a["trial_id"])
    c.check(t["intermediate"] == [{"step": 1, "value": 10.0}],
            "a step reported twice keeps its first value, as the pruner: %s" % t["intermediate"])


def prune_answers(hp, restart):
    """ASHA (eta 2, rungs at steps 1, 2, 4, ...): three complete flat curves
    1, 2, 3; trial 3 reports step 4 (0.5), then steps 1 and 2 late (9, 8);
    trial 4 is pruned at step 1 (100); restart or not, trial 4 reports step
    1 again and trial 5 reports 2.5 at step 1 (ranked 4th of 6 at the rung
    with trial 3's 0.5 there: pruned; 3rd with its late 9: goes on)."""
    sid = create(hp, {"name": "prune-restart", "space": X, "tuner": {
        "algorithm": "random", "seed": 1, "pruner": {"algorithm": "asha", "eta": 2, "min_resource": 1}}})
    ids = [ask(hp, sid)["trial_id"] for _ in range(6)]

    def report(i, step, v):
        return hp.ok("POST", "/api/v1/trials/%d/report" % ids[i], {"step": step, "value": v})["prune"]
    for i in range(3):
        for step in range(1, 5):
            report(i, step, 1.0 + i)
        hp.ok("POST", "/api/v1/trials/%d/tell" % ids[i], {"value": 1.0 + i})
    live = [report(3, 4, 0.5), report(3, 1, 9.0), report(3, 2, 8.0), report(4, 1, 100.0)]
    if restart:
        hp.kill9()
        hp.start()
    return live + [report(4, 1, 100.0), report(5, 1, 2.5)]


def check_prune_answers_survive_restart(hp, c):
    live = prune_answers(hp, False)
    c.check(live == [False, False, False, True, True, True], "the live answers: %s" % live)
    after = prune_answers(hp, True)
    c.check(after == live, "after kill -9 the same answers (stopped trial told again; late steps out of the "
            "rung): %s, live %s" % (after, live))


def skipped_rung_answers(hp, restart, name):
    """ASHA (eta 2, rungs at steps 1, 2, 4): trial 0 reports 0.1 at step 1 and 0.5
    at step 2; trial 1 reports step 2 first (0.3): stopped at rung 0 ([.1 .3]),
    so its 0.3 is no value at rung 1 (Optuna records rungs on the way up);
    restart or not, trial 2's 0.05 at step 1 goes on, and its 0.4 at step 2
    races trial 0's 0.5 alone: it goes on (with trial 1's 0.3 there it was
    pruned; after a restart the stored answer keeps the rung)."""
    sid = create(hp, {"name": name, "space": X, "tuner": {
        "algorithm": "random", "seed": 1, "pruner": {"algorithm": "asha", "eta": 2, "min_resource": 1}}})
    ids = [ask(hp, sid)["trial_id"] for _ in range(3)]

    def report(i, step, v):
        return hp.ok("POST", "/api/v1/trials/%d/report" % ids[i], {"step": step, "value": v})["prune"]
    live = [report(0, 1, 0.1), report(0, 2, 0.5), report(1, 2, 0.3)]
    if restart:
        hp.kill9()
        hp.start()
    return live + [report(2, 1, 0.05), report(2, 2, 0.4)]


def check_skipped_rungs(hp, c):
    for restart in (False, True):
        got = skipped_rung_answers(hp, restart, "skipped-rungs-%d" % restart)
        c.check(got == [False, False, True, False, False],
                "a report stopped at a lower rung is no value at the higher ones it reached%s: %s" %
                (" (after kill -9)" if restart else "", got))


def check_non_finite_reports(hp, c):
    """A diverged run reports "nan", "inf" or "-inf" (JSON has none) and the pruner decides
    as Optuna's: without one the trial goes on; asha stops a NaN at a rung; the report is
    stored (read back as null). Another string is a 400 naming value."""
    for pruner, want in (({"algorithm": "none"}, False), ({"algorithm": "asha", "eta": 2}, True)):
        sid = create(hp, {"name": "nan-" + pruner["algorithm"], "space": X, "tuner": {"pruner": pruner}})
        tid = ask(hp, sid)["trial_id"]
        got = [hp.ok("POST", "/api/v1/trials/%d/report" % tid, {"step": k, "value": v})["prune"]
               for k, v in ((0, 0.5), (1, "nan"), (2, "-Infinity"))]
        c.check(got == [False, want, want], "%s: reports of 0.5, nan, -inf: %s" % (pruner["algorithm"], got))
        inter = hp.ok("GET", "/api/v1/trials/%d" % tid)["intermediate"]
        c.check([e["value"] for e in inter] == [0.5, None, None], "the non-finite reports stored: %s" % inter)
        st, out = hp.request("POST", "/api/v1/trials/%d/report" % tid, {"step": 3, "value": "nope"})
        c.check(st == 400 and out["error"]["field"] == "value", "a report of \"nope\": %s %s" % (st, out))


def check_enqueued_at_deadline(hp, c):
    sid = create(hp, {"name": "deadline", "space": X, "tuner": {"algorithm": "random", "seed": 1, "max_seconds": 1}})
    hp.ok("POST", "/api/v1/studies/%d/enqueue" % sid, {"params": {"x": 0.5}})
    try:
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 10)
        done = True
    except AssertionError:
        done = False
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    c.check(done and s["trials_by_state"]["cancelled"] == 1,
            "an enqueued trial waiting at max_seconds is cancelled, the study completes: %s %s"
            % (s["state"], s["trials_by_state"]))
    st, out = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
    c.check(st == 409 and out["error"]["field"] == "tuner.max_seconds", "an ask after it: 409: %s %s" % (st, out))


def check_get_or_create_warm(hp, c):
    src = create(hp, {"name": "src", "space": X, "tuner": {"algorithm": "random", "seed": 1}})
    for _ in range(3):
        a = ask(hp, src)
        hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"value": a["params"]["x"] ** 2})
    d = {"name": "warm", "space": X, "tuner": {"algorithm": "tpe", "seed": 5}, "warm_start": {"study_ids": [src]},
         "load_if_exists": True}
    first = hp.ok("POST", "/api/v1/studies", d)["id"]
    a = ask(hp, src)
    hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"value": 0.5})
    st, out = hp.request("POST", "/api/v1/studies", d)
    c.check(st == 200 and out["id"] == first,
            "get-or-create finds the warm-started study after its source gained a trial: %s %s" % (st, out))


def check_get_or_create_defaults(hp, c):
    space = {"x": {"type": "float", "low": 0, "high": 1}, "k": {"type": "int", "low": 1, "high": 5},
             "o": {"type": "choice", "values": [1, 2]}}
    base = {"name": "defaults", "space": space,
            "tuner": {"algorithm": "tpe", "seed": 2, "max_trials": 9, "pruner": {"algorithm": "asha"}}}
    first = create(hp, base)
    written = {"name": "defaults", "load_if_exists": True,
               "space": {"x": {"type": "float", "low": 0, "high": 1, "log": False},
                         "k": {"type": "int", "low": 1, "high": 5, "step": 1, "log": False},
                         "o": {"type": "choice", "values": [1.0, 2.0]}},
               "tuner": {"algorithm": "tpe", "seed": 2, "max_trials": 9, "n_startup_trials": 10,
                         "pruner": {"algorithm": "asha", "eta": 3}}}
    st, out = hp.request("POST", "/api/v1/studies", written)
    c.check(st == 200 and out.get("id") == first, "get-or-create with defaults written out: %s %s" % (st, out))
    for field, tuner in (("tuner.n_startup_trials", dict(written["tuner"], n_startup_trials=5)),
                         ("tuner.pruner.eta", dict(written["tuner"], pruner={"algorithm": "asha", "eta": 4})),
                         ("tuner.max_trials", dict(written["tuner"], max_trials=10))):
        st, out = hp.request("POST", "/api/v1/studies", dict(written, tuner=tuner))
        c.check(st == 409 and out["error"]["field"] == field, "get-or-create, %s differs -> 409: %s %s"
                % (field, st, out))
    log = dict(written, space=dict(written["space"], x={"type": "float", "low": 0.1, "high": 1, "log": True}))
    st, out = hp.request("POST", "/api/v1/studies", log)
    c.check(st == 409 and out["error"]["field"].startswith("space.x"), "get-or-create, log scale -> 409: %s %s"
            % (st, out))


def check_grid_16_digits(hp, c):
    sid = create(hp, {"name": "grid16", "space": {"t": {"type": "float", "low": 1e15, "high": 1e15 + 4, "step": 1}},
                      "tuner": {"algorithm": "grid", "seed": 1}})
    seen = []
    for _ in range(7):
        st, a = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
        if st != 200:
            break
        seen.append(a["params"]["t"])
        hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"value": 1.0})
    c.check(sorted(seen) == [1e15 + k for k in range(5)] and st == 409 and a["error"]["field"] == "space",
            "a grid of 16-digit points: each once, then 409 naming space: %s %s" % (seen, st))


def check_importance_huge(hp, c):
    sid = create(hp, {"name": "imp", "space": {"x": X["x"], "n": {"type": "int", "low": 1, "high": 9}},
                      "tuner": {"algorithm": "random", "seed": 2, "max_trials": 30}})
    for _ in range(30):
        a = ask(hp, sid)
        hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"value": 1e308 * a["params"]["x"]})
    imp = hp.ok("GET", "/api/v1/studies/%d/importance" % sid)
    x = [e["importance"] for e in imp["importance"] if e["param"] == "x"]
    c.check(x and x[0] > 0.5, "importance of values near DBL_MAX is not all zero (x decides): %s" % imp["importance"])


def check_repeats_round_trip(hp, c):
    sid = create(hp, {"name": "repeats", "space": X, "tuner": {"algorithm": "random", "seed": 1}})
    a = ask(hp, sid)
    hp.ok("POST", "/api/v1/trials/%d/tell" % a["trial_id"], {"repeats": [1.0, 2.0, 3.0]})
    doc = hp.ok("GET", "/api/v1/studies/%d/export" % sid)
    c.check(doc["trials"][0].get("value_std") == 1.0 and doc["trials"][0].get("value_n") == 3,
            "export carries a repeated value's spread and count: %s" % doc["trials"][0])
    for new in (hp.ok("POST", "/api/v1/studies/import", doc)["study"]["id"],
                hp.ok("POST", "/api/v1/studies/%d/copy" % sid, {"name": "repeats-copy"})["study"]["id"]):
        t = hp.ok("GET", "/api/v1/studies/%d/trials" % new)["trials"][0]
        c.check(t["value"] == 2.0 and t["value_std"] == 1.0 and t["value_n"] == 3,
                "import and copy keep them: %s %s %s" % (t["value"], t["value_std"], t["value_n"]))


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        check_report_at_the_last_step(hp, c)
        check_bayesian_mo_huge(hp, c)
        check_repeated_step(hp, c)
        check_prune_answers_survive_restart(hp, c)
        check_skipped_rungs(hp, c)
        check_non_finite_reports(hp, c)
        check_enqueued_at_deadline(hp, c)
        check_get_or_create_warm(hp, c)
        check_get_or_create_defaults(hp, c)
        check_grid_16_digits(hp, c)
        check_importance_huge(hp, c)
        check_repeats_round_trip(hp, c)
        sid = check_overflowing_outcomes(hp, c)
        check_refused_stored_trial(args, hp, c, sid)
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
