"""hpod --database: the database in PostgreSQL (the server of the ctest
fixture tests/pg/pg_server.sh, its base URL in $HPO_TEST_PG_DIR/url).

- A URL of another scheme and a server that is not there exit 2 with the
  reason; --help documents the flag.
- An ask/tell study (4 concurrent clients: unique trial numbers) and a
  tiny embedded study run to the end on a fresh database; no hpo.db is
  made in the data dir, the rows are in PostgreSQL.
- A restarted hpod (a new process and connection) finds everything, and
  a study made before the restart goes on.
Skipped (77) without the fixture (run it through ctest)."""
import os
import shutil
import subprocess
import tempfile
import threading

from hpod import Checks, Hpod, parse_args, pg_base, pg_create, pg_drop, psql, read_events

STUDY = {
    "name": "pg-asktell",
    "objective": {"direction": "minimize"},
    "space": {"x": {"type": "float", "low": -5.0, "high": 5.0},
              "kind": {"type": "choice", "values": ["a", "b"]}},
    "tuner": {"algorithm": "tpe", "seed": 5, "max_trials": 40},
}
EMBEDDED = {"name": "pg-embedded", "objective": {"metric": "val_accuracy"},
            "model": {"template": "mlp"},
            "dataset": {"name": "fashion-mnist", "limit": 600, "validation_split": 200},
            "space": {"layers": {"type": "int", "low": 1, "high": 2}},
            "training": {"max_epochs": 2, "batch_size": 64},
            "tuner": {"algorithm": "random", "seed": 1, "max_trials": 3}}


def refused(hpod, args):
    """Runs hpod with args on a scratch data dir; (exit code, stderr)."""
    d = tempfile.mkdtemp(prefix="hpo-test-")
    try:
        p = subprocess.run([hpod, "--port", "0", "--data-dir", d] + args, capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return p.returncode, p.stderr


def ask_tell(hp, sid, n, numbers, errors):
    try:
        for _ in range(n):
            t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
            p = t["params"]
            v = (p["x"] - 1.0) ** 2 + (0.5 if p["kind"] == "b" else 0.0)
            hp.ok("POST", "/api/v1/trials/%d/report" % t["trial_id"], {"step": 0, "value": v + 1})
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": v})
            numbers.append(t["number"])
    except Exception as e:  # noqa: BLE001 - reported as a check
        errors.append(repr(e))


def main():
    args = parse_args()
    base = pg_base()
    c = Checks()

    help_text = subprocess.run([args.hpod, "--help"], capture_output=True, text=True, timeout=30).stdout
    c.check("--database URL" in help_text and "postgresql://" in help_text, "--help documents --database")
    rc, err = refused(args.hpod, ["--database", "mysql://x/y"])
    c.check(rc == 2 and "postgresql://" in err, "another scheme exits 2 with the reason (%d %r)" % (rc, err))
    rc, err = refused(args.hpod, ["--database", "postgresql://postgres@127.0.0.1:1/none"])
    c.check(rc == 2 and "database" in err, "a server that is not there exits 2 (%d %r)" % (rc, err))
    for url in ("postgresql://postgres:s3cret@127.0.0.1:1/none",
                "postgresql://postgres@127.0.0.1:1/none?sslmode=disable&password=s3cret&connect_timeout=2"):
        rc, err = refused(args.hpod, ["--database", url])
        c.check(rc == 2 and "s3cret" not in err and "127.0.0.1:1" in err,
                "a password in the URL is not logged (%d %r)" % (rc, err))

    db = "t_api_%d" % os.getpid()
    url = pg_create(base, db)
    hp = Hpod(args.hpod, args=["--database", url, "--devices", "cpu:1"]).start(timeout=60)
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        numbers, errors, threads = [], [], []
        for _ in range(4):
            th = threading.Thread(target=ask_tell, args=(hp, sid, 10, numbers, errors))
            th.start()
            threads.append(th)
        for th in threads:
            th.join(timeout=120)
        c.check(not errors, "ask/tell calls succeed: %s" % errors[:2])
        c.check(sorted(numbers) == list(range(40)), "40 unique trial numbers 0..39")
        study = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(study["state"] == "complete", "the ask/tell study completes at max_trials (%s)" % study["state"])
        best = hp.ok("GET", "/api/v1/studies/%d/best" % sid)["trials"][0]

        eid = hp.ok("POST", "/api/v1/studies", EMBEDDED)["id"]
        events = read_events(hp.url, eid, timeout=300)
        emb = hp.ok("GET", "/api/v1/studies/%d" % eid)
        c.check(emb["state"] == "complete" and emb["trials_by_state"]["complete"] == 3,
                "the embedded study trains 3 trials (%s %s)" % (emb["state"], emb["trials_by_state"]))
        c.check(events and events[-1][1] == "study_complete", "its event stream ends with study_complete")
        curves = hp.ok("GET", "/api/v1/trials/%d" % hp.ok("GET", "/api/v1/studies/%d/best" % eid)["trials"][0]
                       ["trial_id"])["curves"]
        c.check(len(curves) == 2, "curves of 2 epochs stored (%d)" % len(curves))
        paused = hp.ok("POST", "/api/v1/studies", dict(STUDY, name="pg-later"))["id"]
        hp.ok("POST", "/api/v1/studies/%d/ask" % paused)

        c.check(not os.path.exists(os.path.join(hp.data_dir, "hpo.db")), "no SQLite file in the data dir")
        c.check(psql(base, db, "SELECT COUNT(*) FROM trials") == "44", "the trials are rows in PostgreSQL")
        c.check(psql(base, db, "SELECT version FROM hpo_schema") != "", "the schema version is stored")
        c.check(hp.stop() == 0, "hpod stops cleanly")

        hp.start(timeout=60)
        again = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(again["state"] == "complete" and again["trials_by_state"]["complete"] == 40,
                "after a restart the ask/tell study is all there")
        best2 = hp.ok("GET", "/api/v1/studies/%d/best" % sid)["trials"][0]
        c.check(best2["trial_id"] == best["trial_id"] and best2["value"] == best["value"],
                "the best trial and its value read back exactly")
        c.check(hp.ok("GET", "/api/v1/studies/%d" % eid)["trials_by_state"]["complete"] == 3,
                "after a restart the embedded study is all there")
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % paused)
        c.check(t["number"] == 1, "a study goes on after the restart (trial number %s)" % t.get("number"))
        c.check(hp.stop() == 0, "hpod stops cleanly again")
    finally:
        hp.cleanup()
        pg_drop(base, db)
    c.finish()


if __name__ == "__main__":
    main()
