"""One hpod per data dir and per port (issue 12, item 7): a second hpod on
a data dir in use exits with "data dir DIR in use by pid N" (two hpods on
one database trained a trial twice); a second hpod on a port in use exits
too (the port was shared through SO_REUSEPORT), and so does one on another
data dir whose hpo.db is a link to the live one's (it took the first's
running trials for a dead run's). The lock goes with its
process, however it ends: a kill -9 does not leave a stale one. A
--data-dir too long for the paths under it is refused at start with a clear
error (issue 13), before anything is created; so is one SQLite cannot
open its database in (over 497 bytes as an absolute path with links
resolved: a storage-fault audit's F5, before it failed with "storage
error" from 498 bytes on), and the folder hpod made for it is removed.

A damaged SQLite database is refused at start (exit 1) naming the file,
SQLite's quick_check complaint and the remedy (a storage-fault audit's F4:
hpod started and answered /healthz ok, then 500s on some routes and 200s
with no trials on others): a page of the trials table overwritten, and a
backup copied back over hpo.db while a kill -9's stale hpo.db-wal stays
beside it; once that -wal and -shm are removed, as the message says, the
backup's studies are served."""
import os
import shutil
import sqlite3
import subprocess
import tempfile

from hpod import Checks, Hpod, parse_args


def second(args, data_dir, port=0, extra=()):
    """Runs a second hpod; returns (exit code or None if it kept running, stderr)."""
    p = subprocess.Popen([args.hpod, "--port", str(port), "--data-dir", data_dir] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=15)
        return p.returncode, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, err


EXTERNAL = {"name": "ext", "space": {"x": {"type": "float", "low": 0, "high": 1}}}


def tell_n(hp, sid, n):
    for i in range(n):
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
        hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": float(i)})


def check_damaged_database(c, args):
    # A. one page of the trials table overwritten (a bad sector, a bad copy)
    hp = Hpod(args.hpod).start()
    try:
        tell_n(hp, hp.ok("POST", "/api/v1/studies", EXTERNAL)["id"], 60)
        hp.stop()
        db = os.path.join(hp.data_dir, "hpo.db")
        con = sqlite3.connect(db)
        page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'trials'").fetchone()[0]
        size = con.execute("PRAGMA page_size").fetchone()[0]
        con.close()
        with open(db, "r+b") as f:
            f.seek((page - 1) * size + 8)
            f.write(b"\xff" * 64)
        rc, err = second(args, hp.data_dir)
        c.check(rc == 1 and ("the database %s is damaged" % db) in err and "quick_check" in err and
                "restore it from a backup" in err and "hpo.db-wal" in err and "hpo.db-shm" in err,
                "a damaged page: hpod refuses to start naming the file, SQLite's complaint and the remedy "
                "(rc %s: %s)" % (rc, err.strip()[-400:]))
    finally:
        hp.cleanup()
    # B. a backup copied back over hpo.db while a kill -9's -wal stays beside it
    hp = Hpod(args.hpod).start()
    backup = tempfile.mktemp(prefix="hpo-backup-")
    try:
        tell_n(hp, hp.ok("POST", "/api/v1/studies", EXTERNAL)["id"], 20)
        hp.stop()
        db = os.path.join(hp.data_dir, "hpo.db")
        shutil.copy(db, backup)
        hp = Hpod(args.hpod, data_dir=hp.data_dir).start()
        for k in range(3):
            tell_n(hp, hp.ok("POST", "/api/v1/studies", dict(EXTERNAL, name="later%d" % k))["id"], 200)
        hp.kill9()
        c.check(os.path.exists(db + "-wal"), "the kill -9 left hpo.db-wal")
        shutil.copy(backup, db)
        rc, err = second(args, hp.data_dir)
        c.check(rc == 1 and ("the database %s is damaged" % db) in err,
                "a backup restored beside a stale -wal: hpod refuses to start (rc %s: %s)"
                % (rc, err.strip()[-400:]))
        for f in (db + "-wal", db + "-shm"):
            if os.path.exists(f):
                os.unlink(f)
        hp = Hpod(args.hpod, data_dir=hp.data_dir).start()
        studies = hp.ok("GET", "/api/v1/studies")["studies"]
        c.check([(s["name"], s["n_trials"]) for s in studies] == [("ext", 20)],
                "without them (the remedy), hpod serves the backup's study: %s"
                % [(s["name"], s["n_trials"]) for s in studies])
        hp.stop()
    finally:
        hp.cleanup()
        if os.path.exists(backup):
            os.unlink(backup)


def dir_of_length(base, n):
    """A path of n bytes under base whose parents exist (hpod makes the last
    folder), and base's own real path is what its links resolve to."""
    path = os.path.realpath(base)
    while n - len(path) - 1 > 200:
        path = os.path.join(path, "p" * 199)
        os.makedirs(path, exist_ok=True)
    return os.path.join(path, "d" * (n - len(path) - 1))


def check_sqlite_path_limit(c, args):
    base = tempfile.mkdtemp(prefix="hpo-test-")
    try:
        longest = dir_of_length(base, 497)
        os.mkdir(longest)  # the harness keeps hpod's log in it
        hp = Hpod(args.hpod, data_dir=longest).start()
        c.check(hp.request("GET", "/healthz")[0] == 200, "a --data-dir of 497 bytes works")
        hp.stop()
        for n in (498, 2000):
            d = dir_of_length(base, n)
            rc, err = second(args, d)
            c.check(rc == 2 and "--data-dir" in err and "at most 497" in err and "SQLite" in err
                    and not os.path.exists(d),
                    "a --data-dir of %d bytes is refused at start naming SQLite's limit, the folder it made "
                    "removed (rc %s: %s)" % (n, rc, err.strip()[-300:]))
        # relative, short, but long once absolute: what SQLite sees
        rel = "r" * 40
        cwd = dir_of_length(base, 470)
        os.mkdir(cwd)
        p = subprocess.run([os.path.abspath(args.hpod), "--port", "0", "--data-dir", rel], cwd=cwd, capture_output=True, text=True,
                           timeout=15)
        c.check(p.returncode == 2 and "at most 497" in p.stderr and not os.path.exists(os.path.join(cwd, rel)),
                "a short relative --data-dir under a long working folder is refused too (rc %s: %s)"
                % (p.returncode, p.stderr.strip()[-200:]))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    args = parse_args()
    c = Checks()
    check_damaged_database(c, args)
    check_sqlite_path_limit(c, args)
    hp = Hpod(args.hpod).start()
    try:
        rc, err = second(args, hp.data_dir)
        c.check(rc not in (None, 0) and ("in use by pid %d" % hp.proc.pid) in err,
                "a second hpod on the data dir exits naming pid %d (rc %s: %s)" % (hp.proc.pid, rc, err.strip()[-200:]))
        other = tempfile.mkdtemp(prefix="hpo-test-")
        rc, err = second(args, other, hp.port)
        c.check(rc not in (None, 0) and str(hp.port) in err and "in use" in err,
                "a second hpod on port %d exits (rc %s: %s)" % (hp.port, rc, err.strip()[-200:]))
        # another data dir whose hpo.db links to this one's: refused too
        linked = tempfile.mkdtemp(prefix="hpo-test-")
        os.symlink(os.path.join(hp.data_dir, "hpo.db"), os.path.join(linked, "hpo.db"))
        rc, err = second(args, linked)
        c.check(rc not in (None, 0) and "database" in err and ("in use by pid %d" % hp.proc.pid) in err,
                "a data dir whose hpo.db links to a live one's exits naming pid %d (rc %s: %s)"
                % (hp.proc.pid, rc, err.strip()[-200:]))
        subprocess.run(["rm", "-rf", linked])
        c.check(hp.request("GET", "/healthz")[0] == 200, "the first hpod still serves")
        hp.kill9()
        hp2 = Hpod(args.hpod, data_dir=hp.data_dir).start()
        c.check(hp2.request("GET", "/healthz")[0] == 200, "after a kill -9 the data dir is free again")
        hp2.stop()
        subprocess.run(["rm", "-rf", other])
        long_dir = os.path.join(tempfile.gettempdir(), "hpo-" + "d" * 4000)
        rc, err = second(args, long_dir)
        c.check(rc == 2 and "--data-dir" in err and "at most 3840" in err and not os.path.exists(long_dir),
                "a --data-dir of %d bytes is refused at start, nothing created (rc %s: %s)"
                % (len(long_dir), rc, err.strip()[-200:]))
        # GPU slots on a GPU that is not there: a clear refusal, never CPU
        # training under a GPU's name (a machine without one says so; one
        # with GPUs counts them), a slot spanning GPUs too
        gpu_dir = os.path.join(tempfile.gettempdir(), "hpo-gpu-%d" % os.getpid())
        rc, err = second(args, gpu_dir, extra=["--devices", "cuda:63x2"])
        c.check(rc == 2 and ("no CUDA device: " in err or "names GPU 63" in err) and not os.path.exists(gpu_dir),
                "--devices cuda:63x2 exits 2 with the reason (%s: %s)" % (rc, err.strip()[-200:]))
        rc, err = second(args, gpu_dir, extra=["--devices", "cpu:1,cuda:0+1"])
        c.check(rc == 2 and ("no CUDA device: " in err or "names GPU 1" in err) and not os.path.exists(gpu_dir),
                "--devices cuda:0+1 without two GPUs exits 2 with the reason (%s: %s)" % (rc, err.strip()[-200:]))
        rc, err = second(args, gpu_dir, extra=["--devices", "cuda:0+0"])
        c.check(rc == 2 and "cuda:G+H" in err, "--devices cuda:0+0 is a usage error (%s: %s)" % (rc, err.strip()[-120:]))
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
