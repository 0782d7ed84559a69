"""Two hpod nodes on one PostgreSQL (the server of the ctest fixture
tests/pg/pg_server.sh) with one shared --artifacts-dir, surviving one
another (README: "Several nodes on PostgreSQL"; api/jobs.h: nodes).

- Ask/tell: 4 clients, 2 on each node, ask and tell in one study until it
  refuses (409, max_trials 400): exactly 400 trials, numbered 0..399 once
  each, /best on either node the true best of the told values.
- kill -9 one node while it trains a trial of an embedded study made on
  the other: the survivor finds it silent (--node-timeout 3), ends it and
  resumes its trial from its last checkpoint (execution_resumed from an
  epoch >= 1, trial_requeued "node gone" naming the dead node); exactly
  max_trials trials finish, numbers 0..N-1, none trained twice at once
  (each start or resume follows the trial's previous run's end or requeue),
  one curve point per epoch, no gap, no repeat.
- The killed node restarted joins again (a new node; GET /api/v1/nodes:
  the old one ended, both alive) and takes work: a study created on the
  other node after it is trained by both nodes' slots.
- Refits of the first study (model jobs, claimed by any node) are served
  alike by both nodes (their weights are in the shared artifacts dir).
- A node stalled (SIGSTOP) past the timeout while it trains: the other
  takes its trial over; once it runs again it learns it was found dead,
  stores nothing more of that trial (its writes are kept to the trial's
  node) and joins again as a new node; the study ends as above.
Skipped (77) without the fixture (run it through ctest)."""
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.request

from hpod import Checks, Hpod, parse_args, pg_base, pg_create, pg_drop, psql, read_events, wait_for

MAX_ASKS = 400
ASKTELL = {"name": "nodes-asktell", "objective": {"direction": "minimize"},
           "space": {"x": {"type": "float", "low": -5.0, "high": 5.0},
                     "y": {"type": "float", "low": -5.0, "high": 5.0}},
           "tuner": {"algorithm": "random", "seed": 9, "max_trials": MAX_ASKS}}
MAX_TRIALS = 6
EMBEDDED = {"name": "nodes-embedded", "objective": {"metric": "val_accuracy"},
            "model": {"template": "mlp"},
            "dataset": {"name": "fashion-mnist", "limit": 16000, "validation_split": 2000},
            "space": {"layers": {"type": "int", "low": 1, "high": 2}},
            "training": {"max_epochs": 6, "batch_size": 32},
            "tuner": {"algorithm": "random", "seed": 4, "max_trials": MAX_TRIALS}}
SECOND = dict(EMBEDDED, name="nodes-second", training={"max_epochs": 4, "batch_size": 32},
              tuner={"algorithm": "random", "seed": 5, "max_trials": 6})


def ask_tell(hp, sid, told, errors):
    """Asks and tells until the study refuses; (number, trial id, value) into told."""
    try:
        while True:
            status, t = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
            if status == 409:
                return
            if status != 200:
                raise AssertionError("ask -> %d %s" % (status, t))
            p = t["params"]
            v = (p["x"] - 1.0) ** 2 + (p["y"] + 2.0) ** 2
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": v})
            told.append((t["number"], t["trial_id"], v))
    except Exception as e:  # noqa: BLE001 - reported as a check
        errors.append(repr(e))


def weights(hp, model_id):
    """A model's weights file, as a node serves it."""
    with urllib.request.urlopen("%s/api/v1/models/%d/weights" % (hp.url, model_id), timeout=60) as r:
        return r.read()


def node_id(hp):
    return [n for n in hp.ok("GET", "/api/v1/nodes")["nodes"] if n["self"]][0]["id"]


def trials(hp, sid):
    return hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]


def runs_overlap(events):
    """The trials (numbers) started or resumed while a run of theirs was
    going on: a start must follow the trial's previous end or requeue."""
    running, bad = {}, set()
    for _, typ, d in events:
        if "trial_id" not in d:
            continue
        tid = d["trial_id"]
        if typ in ("trial_started", "trial_resumed"):
            if running.get(tid):
                bad.add(d["number"])
            running[tid] = True
        elif typ in ("trial_requeued", "trial_complete", "trial_pruned", "trial_failed", "trial_cancelled"):
            running[tid] = False
    return bad


def finished(c, hp, events_from, sid, n, what):
    """Waits for the study's end; checks exactly n trials finished, numbered
    0..n-1, no run of a trial overlapping another of it, one curve point per
    epoch; returns (trials, events)."""
    wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "complete", 300)
    s = hp.ok("GET", "/api/v1/studies/%d" % sid)
    by = s["trials_by_state"]
    c.check(s["n_trials"] == n and by["complete"] + by["pruned"] + by["failed"] == n,
            "%s: exactly max_trials trials finished: %s" % (what, by))
    ts = trials(hp, sid)
    c.check(sorted(t["number"] for t in ts) == list(range(n)), "%s: numbers 0..%d once each" % (what, n - 1))
    events = read_events(events_from.url, sid, timeout=120)
    c.check(not runs_overlap(events), "%s: no trial trained twice at once: %s" % (what, runs_overlap(events)))
    for t in ts:
        if t["state"] != "complete":
            continue
        curves = hp.ok("GET", "/api/v1/trials/%d" % t["id"])["curves"]
        epochs = [p["epoch"] for p in curves if p["execution"] == 0]
        c.check(epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 1,
                "%s, trial #%d: one curve point per epoch, no gap or repeat (%s)" % (what, t["number"], epochs))
    print("%s: trials by node: %s" % (what, sorted((t["number"], t["node_id"]) for t in ts)), flush=True)
    return ts, events


def main():
    args = parse_args()
    base = pg_base()
    c = Checks()
    help_text = subprocess.run([args.hpod, "--help"], capture_output=True, text=True, timeout=30).stdout
    c.check("--artifacts-dir DIR" in help_text and "--node-timeout S" in help_text, "--help documents the node flags")

    db = "t_nodes_%d" % os.getpid()
    url = pg_create(base, db)
    shared = tempfile.mkdtemp(prefix="hpo-artifacts-")
    flags = ["--database", url, "--artifacts-dir", shared, "--devices", "cpu:1",
             "--node-timeout", "3"]
    a = Hpod(args.hpod, args=flags).start(timeout=60)
    b = Hpod(args.hpod, args=flags).start(timeout=60)
    a2 = None
    try:
        a_id, b_id = node_id(a), node_id(b)
        nodes = b.ok("GET", "/api/v1/nodes")["nodes"]
        c.check(a_id != b_id and sorted(n["id"] for n in nodes if n["state"] == "alive") == sorted([a_id, b_id]),
                "two nodes registered and alive: %s" % nodes)

        # ---- ask/tell through both nodes ----
        sid = a.ok("POST", "/api/v1/studies", ASKTELL)["id"]
        told, errors, threads = [], [], []
        for hp in (a, a, b, b):
            th = threading.Thread(target=ask_tell, args=(hp, sid, told, errors))
            th.start()
            threads.append(th)
        for th in threads:
            th.join(timeout=300)
        c.check(not errors, "ask/tell through both nodes succeeds: %s" % errors[:2])
        c.check(len(told) == MAX_ASKS and sorted(n for n, _, _ in told) == list(range(MAX_ASKS)),
                "%d asks, numbered 0..%d once each (%d told)" % (MAX_ASKS, MAX_ASKS - 1, len(told)))
        true_best = min(told, key=lambda x: x[2])
        for hp, name in ((a, "a"), (b, "b")):
            best = hp.ok("GET", "/api/v1/studies/%d/best" % sid)["trials"][0]
            c.check(best["trial_id"] == true_best[1] and best["value"] == true_best[2],
                    "node %s: /best is the true best (%s, want %s)" % (name, (best["trial_id"], best["value"]),
                                                                        true_best[1:]))
        s = b.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(s["n_trials"] == MAX_ASKS and s["trials_by_state"]["complete"] == MAX_ASKS,
                "the study has exactly %d trials (%s)" % (MAX_ASKS, s["trials_by_state"]))

        # ---- an embedded study made on b; kill -9 a while it trains one ----
        eid = b.ok("POST", "/api/v1/studies", EMBEDDED)["id"]

        def a_trains_with_progress():
            for t in trials(b, eid):
                if t["state"] == "running" and t["node_id"] == a_id and (t["last_step"] or 0) >= 2:
                    return t
            return None
        victim = wait_for(a_trains_with_progress, 240, step=0.05)
        a.kill9()
        print("killed node %d while it trained trial %d (#%d) at epoch %d" %
              (a_id, victim["id"], victim["number"], victim["last_step"]), flush=True)

        def resumed_on_b():
            t = b.ok("GET", "/api/v1/trials/%d" % victim["id"])
            return t if t["node_id"] == b_id or t["state"] != "running" else None
        wait_for(resumed_on_b, 60, step=0.2)
        ended = [n for n in b.ok("GET", "/api/v1/nodes")["nodes"] if n["id"] == a_id][0]
        c.check(ended["state"] == "ended" and ended["end_reason"] == "no heartbeat",
                "the killed node is ended: no heartbeat (%s)" % ended)

        # ---- a restarted: a new node, takes work ----
        a2 = Hpod(args.hpod, data_dir=a.data_dir, args=flags).start(timeout=60)
        a2_id = node_id(a2)
        alive = sorted(n["id"] for n in a2.ok("GET", "/api/v1/nodes")["nodes"] if n["state"] == "alive")
        c.check(a2_id not in (a_id, b_id) and alive == sorted([a2_id, b_id]),
                "the restarted node joins again as node %d (alive: %s)" % (a2_id, alive))
        ts, events = finished(c, a2, b, eid, MAX_TRIALS, "the first embedded study")
        requeued = [d for _, t, d in events if t == "trial_requeued" and d["trial_id"] == victim["id"]]
        c.check(any(d["reason"] == "node gone" and d.get("node_id") == a_id for d in requeued),
                "the victim was requeued: node gone, node %d (%s)" % (a_id, requeued))
        resumed = [d for _, t, d in events if t == "execution_resumed" and d["trial_id"] == victim["id"]]
        c.check(any(d["from_epoch"] >= 1 for d in resumed),
                "the victim resumed from its checkpoint on another node (%s)" % resumed)
        starts = [d for _, t, d in events if t in ("trial_started", "trial_resumed") and d["trial_id"] == victim["id"]]
        c.check(len(starts) >= 2 and starts[0]["node_id"] == a_id and starts[-1]["node_id"] != a_id,
                "the victim started on the killed node and went on elsewhere (%s)" % starts)

        # ---- a study made on b, trained by a2's slot too; a2 stalls (SIGSTOP) past the timeout ----
        sid2 = b.ok("POST", "/api/v1/studies", SECOND)["id"]

        def a2_trains():
            for t in trials(b, sid2):
                if t["state"] == "running" and t["node_id"] == a2_id and 1 <= (t["last_step"] or 0) < 4:
                    return t
            return None
        stalled = wait_for(a2_trains, 240, step=0.05)
        a2.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: b.ok("GET", "/api/v1/trials/%d" % stalled["id"])["node_id"] != a2_id, 60, step=0.2)
        finally:
            a2.proc.send_signal(signal.SIGCONT)
        print("stalled node %d while it trained trial %d (#%d) at epoch %d" %
              (a2_id, stalled["id"], stalled["number"], stalled["last_step"]), flush=True)
        a3_id = wait_for(lambda: node_id(a2) if node_id(a2) != a2_id else None, 30)
        ts2, events2 = finished(c, b, b, sid2, 6, "the second embedded study")
        nodes = {n["id"]: n for n in b.ok("GET", "/api/v1/nodes")["nodes"]}
        c.check(nodes[a2_id]["end_reason"] == "no heartbeat" and nodes[a3_id]["state"] == "alive" and
                nodes[a3_id]["name"] == nodes[a2_id]["name"],
                "the stalled node was found dead and joined again as node %d: %s" % (a3_id, nodes))
        c.check("found dead by another node" in a2.log_tail(400), "the stalled node says it was found dead")
        # who started or resumed its trials (a trial's node_id is the last one's: the
        # stalled trial ends on b, and b may finish the rest before a3 joins)
        by_node = sorted((d["number"], d["node_id"]) for _, t, d in events2 if t in ("trial_started", "trial_resumed"))
        c.check(any(n in (a2_id, a3_id) for _, n in by_node) and any(n == b_id for _, n in by_node),
                "a study created on node b is trained by both nodes' slots: %s" % by_node)
        runs = [d.get("node_id") for _, t, d in events2
                if t in ("trial_started", "trial_resumed") and d["trial_id"] == stalled["id"]]
        c.check(runs[:1] == [a2_id] and runs[-1] != a2_id,
                "the stalled node's trial went on elsewhere, and it stored nothing more of it (%s)" % runs)

        # ---- refits (model jobs) run on any node; their weights are every node's ----
        refits = b.ok("POST", "/api/v1/studies/%d/refits" % eid, {"top_n": 2})["refits"]
        wait_for(lambda: all(a2.ok("GET", "/api/v1/models/%d" % r["id"])["state"] in ("complete", "failed")
                             for r in refits), 300)
        events = read_events(b.url, eid, last_event_id=0, timeout=120)
        ran_on = {d["model_id"]: d.get("node_id") for _, t, d in events if t == "model_started"}
        for r in refits:
            c.check(a2.ok("GET", "/api/v1/models/%d" % r["id"])["state"] == "complete", "refit %d complete" % r["id"])
            got = [weights(hp, r["id"]) for hp in (a2, b)]
            c.check(got[0] == got[1] and len(got[0]) > 1000,
                    "refit %d (run on node %s): its weights served alike by both nodes (%d, %d bytes)" %
                    (r["id"], ran_on.get(r["id"]), len(got[0]), len(got[1])))
        c.check(a2.stop() == 0 and b.stop() == 0, "both nodes stop cleanly")
        c.check(psql(base, db, "SELECT COUNT(*) FROM nodes WHERE ended > 0 AND end_reason = 'stopped'") == "2",
                "a stopped node ends its row")
    finally:
        for hp in (a2, b, a):
            if hp:
                hp.cleanup()
        shutil.rmtree(shared, ignore_errors=True)
        pg_drop(base, db)
    c.finish()


if __name__ == "__main__":
    main()
