"""Observability (issue 17): /metrics and --log-format json on a real hpod.

- /metrics parses as Prometheus text (every line HELP, TYPE or a sample with
  a well-formed name, labels and value; histogram buckets cumulative) and
  has hpo_build_info, the process_* series, hpo_slots, the request latency
  histogram of every route that answered.
- A tiny embedded study (fashion-mnist, limit 200, 1 epoch, 2 trials) moves
  hpo_epochs_total and hpo_samples_per_second of the slots it ran on; an
  open event stream shows in hpo_event_streams and leaves it when closed.
- hpod --log-format json: every stderr line is a JSON object with ts, level
  and msg; a 400 gets one INFO line with its route, status, code, field and
  message; a successful tell is not logged at INFO (DEBUG only). A long
  path does not push the fields off its line; the gate's own 4xx lines
  carry code, field and error too; failures to start are JSON lines.
- The text log escapes C1 controls and U+2028/U+2029 of a path.
No timing value is asserted.
"""
import json
import math
import re
import socket
import subprocess
import tempfile
import time

import rawhttp
from hpod import Checks, Hpod, parse_args, wait_for

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')


def parse_metrics(text, c):
    """{(name, frozenset(labels without le), le): value}, checking the format."""
    types, series, ok = {}, {}, True
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("#"):
            parts = line.split(" ", 3)
            good = len(parts) == 4 and parts[1] in ("HELP", "TYPE") and NAME.match(parts[2])
            if good and parts[1] == "TYPE":
                good = parts[3] in ("counter", "gauge", "histogram", "summary", "untyped") and parts[2] not in types
                types[parts[2]] = parts[3]
            ok = bool(c.check(good, "comment line: %r" % line)) and ok
            continue
        m = re.match(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$", line)
        if not c.check(m and NAME.match(m.group(1)), "sample line: %r" % line):
            ok = False
            continue
        name, labels_text, value = m.groups()
        labels = {}
        rest = labels_text or ""
        while rest:
            lm = LABEL.match(rest)
            if not c.check(lm, "labels of %r" % line):
                ok = False
                break
            labels[lm.group(1)] = lm.group(2)
            rest = rest[lm.end():]
        try:
            v = float(value)
        except ValueError:
            v = None
        ok = bool(c.check(v is not None, "value of %r" % line)) and ok
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        ok = bool(c.check(name in types or (types.get(base) == "histogram"), "typed: %r" % line)) and ok
        le = labels.pop("le", None)
        key = (name, frozenset(labels.items()), le)
        ok = bool(c.check(key not in series, "series once: %r" % line)) and ok
        series[key] = v
    for (name, labels, le), v in series.items():  # histograms: cumulative, +Inf == _count
        if not name.endswith("_count") or types.get(name[:-6]) != "histogram":
            continue
        base = name[:-6]
        buckets = sorted(((float(b_le), bv) for (n, l, b_le), bv in series.items()
                          if n == base + "_bucket" and l == labels), key=lambda x: x[0])
        counts = [bv for _, bv in buckets]
        ok = bool(c.check(buckets and math.isinf(buckets[-1][0]) and counts == sorted(counts) and counts[-1] == v,
                          "%s{%s}: cumulative buckets ending at +Inf == count" % (base, dict(labels)))) and ok
    c.check(ok, "/metrics is valid exposition text")
    return series


def get(series, name, **labels):
    return series.get((name, frozenset(labels.items()), None))


def scrape(hp, c):
    st, text = hp.request("GET", "/metrics")
    c.check(st == 200, "GET /metrics -> 200")
    return parse_metrics(text, c)


def open_stream(hp, sid):
    s = socket.create_connection(("127.0.0.1", hp.port), timeout=10)
    s.sendall(b"GET /api/v1/studies/%d/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % sid)
    s.recv(4096)  # the head and the first bytes: the stream is open
    return s


def check_streams_left_while_events_flow(hp, c, sid):
    """Streams whose clients left end within seconds while another study's events keep coming (5 a second):
    each event used to restart the wait after which a stream asks whether its client is there, so they lived
    on (and counted against their client's connections: 503s) until hpod was quiet for a second."""
    streams = [open_stream(hp, sid) for _ in range(5)]
    m = scrape(hp, c)
    c.check(get(m, "hpo_event_streams") == 5, "5 open streams (%s)" % get(m, "hpo_event_streams"))
    for s in streams:
        s.close()
    busy = hp.ok("POST", "/api/v1/studies", {"space": {"x": {"type": "float", "low": 0, "high": 1}}})["id"]
    left, t0 = None, time.time()
    for i in range(40):  # 8 s at most
        hp.ok("PATCH", "/api/v1/studies/%d" % busy, {"user_attrs": {"i": i}})  # a study_updated event
        if get(scrape(hp, c), "hpo_event_streams") == 0:
            left = time.time() - t0
            break
        time.sleep(0.2)
    c.check(left is not None and left < 5, "closed streams end while events flow: after %s s" % left)


FOUR_XX_KEYS = ("route", "status", "bytes_in", "ms", "code", "field", "error")


def json_log(hp, c):
    with open(hp.log_path, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    objs = []
    for line in filter(None, lines):
        try:
            objs.append(json.loads(line))
        except ValueError:
            c.check(False, "a JSON log line: %r" % line[:200])
    return objs


def check_long_paths_keep_fields(args, c):
    """--log-format json: a path that escapes to more than the line (1,500 control bytes or bytes that are
    not UTF-8, six bytes each in JSON) keeps route, status, bytes_in, ms, code, field and error on its 404
    line, its message cut and ending with "..."; so does a 2,500-byte path (cut before the line is built)."""
    hp = Hpod(args.hpod, args=["--log-format", "json", "--devices", "cpu:1"]).start()
    paths = {"ctl": "/x" + "%01" * 1500, "bad_utf8": "/y" + "%FF" * 1500, "long": "/w" + "%01" * 2500}
    try:
        for name, path in paths.items():
            st, _ = hp.request("GET", path)
            c.check(st == 404, "%s: GET -> %d" % (name, st))
    finally:
        hp.stop()
        objs = json_log(hp, c)
        hp.cleanup()
    for name, mark in (("ctl", "GET /x\x01"), ("bad_utf8", "GET /y\ufffd"), ("long", "GET /w\x01")):
        mine = [o for o in objs if o.get("msg", "").startswith(mark)]
        c.check(len(mine) == 1, "%s: one log line for the request (%d)" % (name, len(mine)))
        for o in mine:
            missing = [k for k in FOUR_XX_KEYS if k not in o]
            c.check(not missing and o["status"] == 404 and o["code"] == "not_found" and o["msg"].endswith("..."),
                    "%s: the 404 line keeps its fields, its message cut: lacks %s; %s" % (name, missing, sorted(o)))


def check_gate_4xx_lines(args, c):
    """--log-format json: a 4xx the connection gate answers itself (a control byte in the target, a malformed
    request line, a head over 16 KiB, headers that time out) logs what every 4xx logs: code, field and error
    as the client got them, bytes_in and ms; the 408 names the request line that arrived."""
    hp = Hpod(args.hpod, args=["--log-format", "json", "--devices", "cpu:1", "--header-timeout", "1"]).start()
    gate = {"control byte": b"GET /c\x1b[0m HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            "bad line": b"GET  /b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            "head too large": b"GET /h HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * 20000 + b"\r\n\r\n",
            "timeout": b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n"}
    errors = {}
    try:
        for name, raw in gate.items():
            st, err, _, _ = rawhttp.json_error(rawhttp.exchange(hp.port, raw, timeout=5))
            c.check(st in (400, 408, 431) and err, "%s: the gate answers %d %s" % (name, st, err))
            errors[name] = (st, err or {})
    finally:
        hp.stop()
        objs = json_log(hp, c)
        hp.cleanup()
    for name, (st, err) in errors.items():
        mine = [o for o in objs if o.get("status") == st and o.get("error") == err.get("message")]
        c.check(len(mine) == 1, "%s: one log line for the %d (%d)" % (name, st, len(mine)))
        for o in mine:
            c.check(all(k in o for k in FOUR_XX_KEYS) and o["code"] == err.get("code")
                    and o["field"] == err.get("field"), "%s: the %d line as every 4xx's: %s" % (name, st, o))
            if name == "timeout":
                c.check(o["msg"].startswith("GET /slow 408"), "the 408 names its request line: %r" % o["msg"])


def check_start_failures_json(args, c):
    """--log-format json: the lines that say why hpod does not start (its port in use, --devices gpu:9) are
    JSON lines too, at level error."""
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    try:
        for why, extra in (("port in use", ["--port", str(hp.port)]), ("no such GPU", ["--devices", "gpu:9"])):
            with tempfile.TemporaryDirectory(prefix="hpo-test-") as d:
                cmd = [args.hpod, "--port", "0", "--data-dir", d, "--log-format", "json"] + extra
                r = subprocess.run(cmd, capture_output=True, timeout=60)
            lines = [line for line in r.stderr.decode(errors="replace").split("\n") if line]
            objs = []
            for line in lines:
                try:
                    objs.append(json.loads(line))
                except ValueError:
                    c.check(False, "%s: hpod exits %d with a line that is not JSON: %r" % (why, r.returncode, line))
            c.check(r.returncode != 0 and any(o.get("level") == "error" for o in objs),
                    "%s: hpod exits %d, why in an error line: %s" % (why, r.returncode, lines))
    finally:
        hp.stop()
        hp.cleanup()


def check_text_log_controls(args, c):
    """The text log: a path holding C1 controls (NEL, CSI) or U+2028/U+2029 stays one line for any line
    splitter, those characters escaped as \\u0085 (as the ASCII controls are)."""
    hp = Hpod(args.hpod, args=["--devices", "cpu:1"]).start()
    paths = ["/a%C2%85forged", "/b%E2%80%A8forged", "/c%E2%80%A9forged", "/d%C2%9B2J%C2%9BHcleared"]
    try:
        for path in paths:
            st, _ = hp.request("GET", path)
            c.check(st == 404, "GET %s -> %d" % (path, st))
    finally:
        hp.stop()
        with open(hp.log_path, "rb") as f:
            data = f.read()
        hp.cleanup()
    lines = data.split(b"\n")
    for path, escaped in zip(paths, ("/a\\u0085forged", "/b\\u2028forged", "/c\\u2029forged",
                                     "/d\\u009b2J\\u009bHcleared")):
        mine = [line.decode("utf-8") for line in lines if b" GET " + path[:2].encode() in line]
        c.check(len(mine) == 1 and len(mine[0].splitlines()) == 1 and ("GET " + escaped + " 404") in mine[0],
                "%s: one line, escaped: %r" % (path, mine))


def main():
    args = parse_args()
    c = Checks()
    check_long_paths_keep_fields(args, c)
    check_gate_4xx_lines(args, c)
    check_start_failures_json(args, c)
    check_text_log_controls(args, c)
    hp = Hpod(args.hpod, args=["--log-format", "json", "--devices", "cpu:2"]).start()
    try:
        m = scrape(hp, c)
        builds = [k for k in m if k[0] == "hpo_build_info"]
        c.check(len(builds) == 1 and m[builds[0]] == 1 and {"version", "blas_core"} <= dict(builds[0][1]).keys()
                and dict(builds[0][1]).get("cpu_bf16") in ("yes", "no"),
                "hpo_build_info{version,blas_core,cpu_bf16} 1: %s" % builds)
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                     "process_start_time_seconds"):
            c.check((get(m, name) or 0) > 0 or name == "process_cpu_seconds_total" and get(m, name) == 0,
                    "%s present: %s" % (name, get(m, name)))
        c.check(get(m, "hpo_slots") == 2 and get(m, "hpo_slots_busy") == 0, "2 slots, none busy")
        c.check(get(m, "hpo_event_streams") == 0 and get(m, "hpo_jobs_queued") == 0, "no streams, nothing queued")

        # a 4xx, and an ask/tell round whose tell must not be an INFO line
        bad = {"space": {"lr": {"type": "float", "low": 2, "high": 1}}}
        st, out = hp.request("POST", "/api/v1/studies", bad)
        c.check(st == 400, "bad space -> 400")
        field = (out or {}).get("error", {}).get("field")
        sid = hp.ok("POST", "/api/v1/studies", {"space": {"x": {"type": "float", "low": 0, "high": 1}}})["id"]
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid, {})
        hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": 0.5})

        study = {"name": "obs", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
                 "dataset": {"name": "fashion-mnist", "limit": 200, "validation_split": 50},
                 "space": {"layers": {"type": "int", "low": 1, "high": 2}},
                 "training": {"max_epochs": 1, "batch_size": 50},
                 "tuner": {"algorithm": "random", "seed": 1, "max_trials": 2}}
        eid = hp.ok("POST", "/api/v1/studies", study)["id"]
        stream = open_stream(hp, eid)
        m = scrape(hp, c)
        c.check(get(m, "hpo_event_streams") == 1, "an open stream: hpo_event_streams 1 (%s)" % get(m, "hpo_event_streams"))
        wait_for(lambda: hp.ok("GET", "/api/v1/studies/%d" % eid)["state"] == "complete", 120)
        trials = hp.ok("GET", "/api/v1/studies/%d/trials" % eid)["trials"]
        slots = [t.get("slot") for t in trials]
        stream.close()
        m = wait_for(lambda: (lambda s: s if get(s, "hpo_event_streams") == 0 else None)(scrape(hp, c)), 10)
        c.check(get(m, "hpo_event_streams") == 0, "the closed stream left hpo_event_streams")
        epochs = {dict(k[1])["slot"]: v for k, v in m.items() if k[0] == "hpo_epochs_total"}
        rates = {dict(k[1])["slot"]: v for k, v in m.items() if k[0] == "hpo_samples_per_second"}
        c.check(set(epochs) == {"cpu:0", "cpu:1"} and sum(epochs.values()) == 2,
                "hpo_epochs_total: 2 epochs over the slots: %s (trials on %s)" % (epochs, slots))
        c.check(all(rates[s] > 0 for s in epochs if epochs[s] > 0),
                "hpo_samples_per_second > 0 on the slots that trained: %s" % rates)
        c.check(get(m, "hpo_slots_busy") == 0 and get(m, "hpo_jobs_queued") == 0, "all done: none busy, none queued")
        check_streams_left_while_events_flow(hp, c, sid)
        for route in ("studies.create", "studies.ask", "trials.tell", "studies.events", "metrics"):
            n = get(m, "hpo_http_request_duration_seconds_count", route=route)
            c.check(n and n >= 1, "latency histogram of %s: count %s" % (route, n))
        c.check(get(m, "hpo_http_requests_total", route="studies.create", status="400") == 1,
                "the 400 is counted by route and status")
    finally:
        rc = hp.stop()
        c.check(rc == 0, "hpod exits 0")
        with open(hp.log_path, "rb") as f:
            lines = f.read().decode("utf-8").splitlines()
        hp.cleanup()
    objs = []
    for line in lines:
        try:
            o = json.loads(line)
        except ValueError:
            o = None
        c.check(isinstance(o, dict) and {"ts", "level", "msg"} <= o.keys(), "a JSON log line: %r" % line[:200])
        objs.append(o or {})
    c.check(any(o.get("msg", "").startswith("hpod ") and "listening" in o["msg"] for o in objs), "the start line")
    four = [o for o in objs if o.get("status") == 400]
    c.check(len(four) == 1 and four[0].get("level") == "info" and four[0].get("route") == "studies.create"
            and four[0].get("code") == "invalid_argument" and four[0].get("field") == field
            and four[0].get("error"), "one INFO line for the 400 with its reason: %s" % four)
    c.check(not [o for o in objs if o.get("route") == "trials.tell"], "a successful tell is not logged at INFO")
    c.check([o for o in objs if o.get("route") == "studies.ask"], "an ask is (INFO)")
    c.finish()


if __name__ == "__main__":
    main()
