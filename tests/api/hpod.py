"""Test harness: runs a real hpod on 127.0.0.1 and talks to it over HTTP.

Standard library only. Every test gets a fresh data directory; hpod is
started with --port 0 and the port is read from its first stdout line.
"""
import argparse
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--hpod", required=True, help="path to the hpod binary")
    p.add_argument("--hpo", help="path to the hpo client (default: beside hpod)")
    args = p.parse_args()
    if not args.hpo:
        args.hpo = os.path.join(os.path.dirname(os.path.abspath(args.hpod)), "hpo")
    return args


# The data dirs the harness made. A test that restarts hpod on the same dir
# (Hpod(binary, data_dir=hp.data_dir)) often drops the object that made it,
# so cleanup() of the last one does not own it: they are removed at exit
# too (up to 24 MB each; CI's disk is not large).
_made_dirs = []


@atexit.register
def _remove_made_dirs():
    for d in _made_dirs:
        shutil.rmtree(d, ignore_errors=True)


class Hpod:
    def __init__(self, binary, data_dir=None, args=()):
        self.binary = binary
        self.own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="hpo-test-")
        if self.own_dir:
            _made_dirs.append(self.data_dir)
        self.args = list(args)
        self.proc = None
        self.port = None
        self.log_path = os.path.join(self.data_dir, "hpod.log")

    def start(self, timeout=20):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--port", "0", "--data-dir", self.data_dir] + self.args,
            stdout=subprocess.PIPE, stderr=log)
        log.close()
        deadline = time.time() + timeout
        line = b""
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if line or self.proc.poll() is not None:
                break
        if not line.startswith(b"hpod listening on http://"):
            raise RuntimeError("hpod did not start: %r\n%s" % (line, self.log_tail()))
        self.port = int(line.strip().rsplit(b":", 1)[1])
        self.url = "http://127.0.0.1:%d" % self.port
        return self

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc.stdout.close()

    def stop(self, timeout=None, strict=True):
        """SIGTERM and wait: a graceful shutdown must exit 0. One that exits
        otherwise prints the log's tail and raises (returns the code when
        not strict); one that hangs past `timeout` (default 60 s;
        HPO_TEST_STOP_TIMEOUT) prints every thread's stack and the log's
        tail, is killed, and raises. So a shutdown's sanitizer report fails
        the test even from a finally clause. The default is generous: a
        stop takes well under a second, but the sanitizer suites share two
        cores and a disk with PostgreSQL, and the closing checkpoint syncs."""
        if self.proc and self.proc.poll() is None:
            timeout = timeout or float(os.environ.get("HPO_TEST_STOP_TIMEOUT", "60"))
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print("hpod (pid %d) did not stop %g s after SIGTERM; its threads:\n%s\nits log's tail:\n%s"
                      % (self.proc.pid, timeout, self.thread_stacks(), self.log_tail(60)), flush=True)
                self.proc.kill()
                self.proc.wait()
                self.proc.stdout.close()
                raise
            self.proc.stdout.close()
            if rc != 0:  # a sanitizer's report, a crash in the shutdown: the log says
                print("hpod exited %d after SIGTERM; its log's tail:\n%s" % (rc, self.log_tail(60)), flush=True)
                if strict:
                    raise AssertionError("hpod exited %d after SIGTERM (a graceful shutdown exits 0)" % rc)
            return rc
        return self.proc.returncode if self.proc else 0

    def thread_stacks(self):
        """Every thread's backtrace, read with gdb (bounded: 60 s)."""
        gdb = shutil.which("gdb")
        if not gdb:
            return "(gdb not found)"
        try:
            out = subprocess.run([gdb, "-p", str(self.proc.pid), "-batch", "-nx", "-ex", "set pagination off",
                                  "-ex", "thread apply all bt"], capture_output=True, timeout=60)
            return out.stdout.decode(errors="replace")[-20000:]
        except (OSError, subprocess.TimeoutExpired) as e:
            return "(gdb failed: %s)" % e

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def request(self, method, path, body=None, raw=None, headers=None, timeout=30):
        """Returns (status, parsed JSON or text or None)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, text, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        if not text:
            return status, None
        if ctype.startswith("application/json"):
            return status, json.loads(text)
        return status, text.decode()

    def ok(self, method, path, body=None, expect=(200, 201, 204)):
        status, out = self.request(method, path, body)
        if status not in expect:
            raise AssertionError("%s %s -> %d %s" % (method, path, status, out))
        return out


class Checks:
    """Counts checks and prints the plain closing line ctest output shows."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what, flush=True)
        return cond

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


def expect_400(c, hp, path, body, field, what):
    """POSTs body to path and checks the answer is a 400 naming field."""
    status, out = hp.request("POST", path, body)
    got = out.get("error", {}).get("field") if isinstance(out, dict) else None
    c.check(status == 400 and got == field, "%s: 400 naming %s (got %d %s)" % (what, field, status, str(out)[:160]))
    return out


def read_events(url, study_id, last_event_id=None, timeout=300, idle=None):
    """Reads a study's server-sent events until the stream ends (or, with
    idle, until no line came for idle seconds: the events so far of a study
    that still runs); returns a list of (id, type, data)."""
    req = urllib.request.Request("%s/api/v1/studies/%d/events" % (url, study_id))
    if last_event_id is not None:
        req.add_header("Last-Event-ID", str(last_event_id))
    events = []
    with urllib.request.urlopen(req, timeout=idle or timeout) as r:
        cur = {}
        try:
            for raw in r:
                line = raw.decode().rstrip("\n")
                if not line:
                    if "data" in cur:
                        events.append((int(cur["id"]), cur["event"], json.loads(cur["data"])))
                    cur = {}
                elif line.startswith(":"):
                    continue
                else:
                    k, _, v = line.partition(": ")
                    cur[k] = v
        except (TimeoutError, socket.timeout):
            if idle is None:
                raise
    return events


def pg_base():
    """The base URL of the PostgreSQL server of the ctest fixture
    (tests/pg/pg_server.sh, its folder in $HPO_TEST_PG_DIR); exits 77 (the
    test is skipped) without it."""
    state = os.environ.get("HPO_TEST_PG_DIR")
    if not state or not os.path.exists(os.path.join(state, "url")):
        print("no PostgreSQL fixture (HPO_TEST_PG_DIR): run through ctest")
        sys.exit(77)
    return open(os.path.join(state, "url")).read().strip()


def psql(base, db, sql):
    """Runs sql on database db of the server at base; its output."""
    out = subprocess.run(["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "%s/%s" % (base, db), "-c", sql],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("psql %s: %s" % (sql, out.stderr))
    return out.stdout.strip()


def pg_create(base, name):
    """A fresh database on the server at base; its URL."""
    psql(base, "postgres", "CREATE DATABASE %s" % name)
    return "%s/%s" % (base, name)


def pg_drop(base, name):
    """Drops a database made by pg_create (whoever is still connected);
    a failure is printed, not raised: it is a test's cleanup."""
    try:
        psql(base, "postgres", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
    except RuntimeError as e:
        print("cleanup:", e)


def wait_for(fn, timeout, step=0.2):
    """Polls fn() until it returns something true, or raises after timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("condition not met within %.0f s" % timeout)
