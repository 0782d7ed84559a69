"""Two hpod nodes on one PostgreSQL (the server of the ctest fixture
tests/pg/pg_server.sh, its base URL in $HPO_TEST_PG_DIR/url), each with its
own data dir and port, and one shared --artifacts-dir:

- an embedded study created on node A is trained by A; an event stream
  opened on node B from the start follows it live and gets every event the
  database holds for it, in id order, exactly once, ending with
  study_complete; a stream resumed on B with Last-Event-ID gets exactly
  the rest;
- a grid study asked alternately through A and B never hands out a point
  twice and is exhausted exactly (409 on both nodes after the last
  point); each trial is told through the node that did not hand it out;
  the study ends complete with one study_complete event, which a stream
  on the other node ends with;
- both nodes paused past --node-timeout at once (as when the database is
  away from both): neither finds the other dead once they run again;
- 16 clients, half on each node, get-or-create one new name at once, in
  several rounds: one study per name, every client handed its id;
- 16 clients, half on each node, PATCH distinct user_attrs keys of one
  study and one of its trials while reports go to that trial: every key
  is kept (each merge reads the row under its lock);
- a dataset deleted on node A while node B creates a study on it: the
  delete refused (409, the study uses it) or the create (400, the dataset
  gone), never both done (dataset_race.py).
Skipped (77) without the fixture (run it through ctest)."""
import os
import shutil
import signal
import tempfile
import threading
import time

from dataset_race import check_delete_races_create
from hpod import Checks, Hpod, parse_args, pg_base, pg_create, pg_drop, psql, read_events

EMBEDDED = {"name": "nodes-embedded", "objective": {"metric": "val_accuracy"},
            "model": {"template": "mlp"},
            "dataset": {"name": "fashion-mnist", "limit": 300, "validation_split": 100},
            "space": {"layers": {"type": "int", "low": 1, "high": 2}},
            "training": {"max_epochs": 2, "batch_size": 64},
            "tuner": {"algorithm": "random", "seed": 2, "max_trials": 2}}
GRID = {"name": "nodes-grid", "objective": {"direction": "minimize"},
        "space": {"a": {"type": "int", "low": 0, "high": 3},
                  "b": {"type": "choice", "values": ["x", "y", "z"]}},
        "tuner": {"algorithm": "grid"}}
GRID_POINTS = 12
TIMEOUT = 3  # --node-timeout


def both_paused(c, a, b):
    """Both nodes silent past the timeout at once (their host paused; the
    database away from both is the same silence): once they run again,
    neither finds the other dead, each waits a timeout for the other to
    beat again."""
    ids = sorted(n["id"] for n in a.ok("GET", "/api/v1/nodes")["nodes"] if n["state"] == "alive")
    for node in (a, b):
        os.kill(node.proc.pid, signal.SIGSTOP)
    time.sleep(TIMEOUT + 2)
    for node in (b, a):
        os.kill(node.proc.pid, signal.SIGCONT)
    time.sleep(2 * TIMEOUT + 1)
    nodes = a.ok("GET", "/api/v1/nodes")["nodes"]
    c.check(sorted(n["id"] for n in nodes if n["state"] == "alive") == ids,
            "both nodes paused past the timeout: both still alive after (%s)"
            % [(n["id"], n["state"], n["end_reason"]) for n in nodes])


def racing(n, go):
    """go(k) in n threads started at once behind a barrier."""
    bar = threading.Barrier(n)

    def run(k):
        bar.wait(30)
        go(k)
    ths = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(120)


def racing_get_or_create(c, nodes):
    """Get-or-create of one new name from both nodes at once: one study."""
    space = {"x": {"type": "float", "low": 0, "high": 1}}
    for rnd in range(6):
        name = "raced-%d" % rnd
        got, lock = [], threading.Lock()

        def go(k):
            status, out = nodes[k % 2].request("POST", "/api/v1/studies",
                                               {"name": name, "space": space, "load_if_exists": True})
            with lock:
                got.append((status, out.get("id")))
        racing(16, go)
        listed = nodes[0].ok("GET", "/api/v1/studies?name=" + name)["total"]
        ids = {i for status, i in got if status in (200, 201)}
        c.check(listed == 1 and len(ids) == 1 and len(got) == 16 and sum(s == 201 for s, _ in got) == 1,
                "round %d: 16 racing get-or-creates on two nodes: one study (%d listed, ids %s, statuses %s)"
                % (rnd, listed, sorted(ids), sorted(s for s, _ in got)))


def racing_user_attrs(c, nodes):
    """Distinct user_attrs keys PATCHed from both nodes at once, with
    reports to the trial beside them: no key lost, no PATCH refused."""
    a = nodes[0]
    sid = a.ok("POST", "/api/v1/studies", {"name": "raced-attrs",
                                          "space": {"x": {"type": "float", "low": 0, "high": 1}}})["id"]
    tid = a.ok("POST", "/api/v1/studies/%d/ask" % sid)["trial_id"]
    errors = []

    def go(k):
        node = nodes[k % 2]
        for j in range(10):
            for path in ("/api/v1/studies/%d" % sid, "/api/v1/trials/%d" % tid):
                status, out = node.request("PATCH", path, {"user_attrs": {"k%d_%d" % (k, j): j}})
                if status != 200:
                    errors.append((status, out))
            status, out = node.request("POST", "/api/v1/trials/%d/report" % tid, {"step": k * 10 + j, "value": j})
            if status != 200:
                errors.append((status, out))
    racing(16, go)
    study = len(a.ok("GET", "/api/v1/studies/%d" % sid)["user_attrs"])
    trial = len(a.ok("GET", "/api/v1/trials/%d" % tid)["user_attrs"])
    c.check(not errors and study == 160 and trial == 160,
            "16 clients on two nodes PATCH 160 distinct keys: the study keeps %d, the trial %d (errors %s)"
            % (study, trial, errors[:2]))


def stored_events(base, db, sid):
    rows = psql(base, db, "SELECT id, type FROM events WHERE study_id = %d ORDER BY id" % sid)
    return [(int(r.split("|")[0]), r.split("|")[1]) for r in rows.splitlines() if r]


def follow(url, sid, out):
    """An event stream from the start, in a thread: its events into out."""
    try:
        out.extend(read_events(url, sid, timeout=120))
    except Exception as e:  # noqa: BLE001 - reported as a check
        out.append(("error", repr(e), None))


def main():
    args = parse_args()
    base = pg_base()
    c = Checks()
    db = "t_nodes_sync_%d" % os.getpid()
    url = pg_create(base, db)
    shared = tempfile.mkdtemp(prefix="hpo-artifacts-")
    flags = ["--database", url, "--artifacts-dir", shared, "--devices", "cpu:1", "--node-timeout", str(TIMEOUT)]
    a = Hpod(args.hpod, args=flags)
    b = Hpod(args.hpod, args=flags)
    try:
        a.start(timeout=60)
        b.start(timeout=60)

        # an embedded study trained by A, followed on B
        eid = a.ok("POST", "/api/v1/studies", EMBEDDED)["id"]
        seen = []
        th = threading.Thread(target=follow, args=(b.url, eid, seen))
        th.start()
        th.join(timeout=150)
        c.check(not th.is_alive(), "the stream on node B ends")
        stored = stored_events(base, db, eid)
        got = [(e[0], e[1]) for e in seen]
        c.check(got == stored, "node B's stream = the database's events, in id order, once each (%d streamed, %d "
                "stored; first difference at %s)" % (len(got), len(stored),
                                                     next((i for i, (x, y) in enumerate(zip(got, stored)) if x != y),
                                                          min(len(got), len(stored)))))
        types = [e[1] for e in got]
        c.check(types and types[-1] == "study_complete", "it ends with study_complete (%s)" % types[-3:])
        c.check(types.count("trial_complete") == 2 and types.count("epoch") >= 4,
                "it holds A's trials and epochs (%s)" % sorted(set(types)))
        emb = b.ok("GET", "/api/v1/studies/%d" % eid)
        c.check(emb["state"] == "complete", "node B reads the study complete")
        if len(got) > 3:
            rest = read_events(b.url, eid, last_event_id=got[2][0], timeout=60)
            c.check([(e[0], e[1]) for e in rest] == got[3:], "a stream resumed on B gets exactly the rest")

        # a grid asked alternately through both nodes
        gid = a.ok("POST", "/api/v1/studies", GRID)["id"]
        grid_seen = []
        gth = threading.Thread(target=follow, args=(a.url, gid, grid_seen))
        gth.start()
        points, trials = set(), []
        for i in range(GRID_POINTS):
            t = (b if i % 2 else a).ok("POST", "/api/v1/studies/%d/ask" % gid)
            key = (t["params"]["a"], t["params"]["b"])
            c.check(key not in points, "ask %d on node %s: a new point %s" % (i, "B" if i % 2 else "A", key))
            points.add(key)
            trials.append(t)
        c.check(len(points) == GRID_POINTS, "the %d points of the grid, each once" % GRID_POINTS)
        for node, name in ((a, "A"), (b, "B")):
            status, out = node.request("POST", "/api/v1/studies/%d/ask" % gid)
            c.check(status == 409 and out["error"]["field"] == "space",
                    "then an ask on node %s: 409 exhausted naming space (%d %s)" % (name, status, out))
        for i, t in enumerate(trials):  # told through the other node
            (a if i % 2 else b).ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"],
                                   {"value": float(t["params"]["a"])})
        gth.join(timeout=60)
        c.check(not gth.is_alive(), "the grid's stream on node A ends")
        grid = b.ok("GET", "/api/v1/studies/%d" % gid)
        c.check(grid["state"] == "complete" and grid["trials_by_state"]["complete"] == GRID_POINTS,
                "the grid study is complete with %d trials (%s %s)" % (GRID_POINTS, grid["state"],
                                                                      grid["trials_by_state"]))
        gtypes = [e[1] for e in stored_events(base, db, gid)]
        c.check(gtypes.count("study_complete") == 1, "one study_complete stored (%s)" % gtypes)
        c.check(grid_seen and grid_seen[-1][1] == "study_complete",
                "the stream on node A ends with it (%s)" % grid_seen[-2:])
        both_paused(c, a, b)

        racing_get_or_create(c, (a, b))
        racing_user_attrs(c, (a, b))

        # a dataset deleted on A while B creates a study on it
        check_delete_races_create(c, a, b, label="nodes: ")
        c.check(a.stop() == 0 and b.stop() == 0, "both nodes stop cleanly")
    finally:
        for node in (a, b):
            if node.proc and node.proc.poll() not in (None, 0):
                print("node log:\n" + node.log_tail())
            node.cleanup()
        pg_drop(base, db)
        shutil.rmtree(shared, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
