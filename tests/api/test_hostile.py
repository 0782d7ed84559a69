"""Hostile clients (issue 12, acceptance): 500 idle sockets and 200 event
streams stay open while 4 clients run ask/tell; every call is answered and
the latency percentiles are reported. The idle sockets and the streams come
from other loopback addresses (127.0.0.2-15: Linux routes all of 127/8 to
lo), so the default per-client cap applies to them as it would to other
hosts; the 4 clients use 127.0.0.1. Bounded: about 10 s here, and a server
that locks the clients out fails it within a minute."""
import http.client
import json
import resource
import selectors
import sys
import threading
import time

from hpod import Checks, Hpod, parse_args
from rawhttp import connect

N_IDLE, N_STREAMS, N_CLIENTS, ROUNDS = 500, 200, 4, 150
IDLE_ADDRS = ["127.0.0.%d" % i for i in range(2, 12)]      # 50 sockets each
STREAM_ADDRS = ["127.0.0.%d" % i for i in range(12, 16)]   # 50 streams each
STUDY = {"name": "hostile", "space": {"x": {"type": "float", "low": -5, "high": 5}},
         "tuner": {"algorithm": "random", "seed": 3}}


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        print("SKIP: the hard descriptor limit (%d) is under the %d this test needs" % (hard, need))
        sys.exit(77)
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else need, hard))


def open_streams(port, sid, deadline_s=20):
    """Opens N_STREAMS event streams; returns the sockets whose stream
    started (200 and its retry line) before the deadline, and the rest."""
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(N_STREAMS):
        s = connect(port, STREAM_ADDRS[i % len(STREAM_ADDRS)])
        s.setblocking(False)
        s.send(("GET /api/v1/studies/%d/events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (sid, port)).encode())
        sel.register(s, selectors.EVENT_READ, [s, b""])
        socks.append(s)
    started = []
    deadline = time.time() + deadline_s
    while len(started) < N_STREAMS and time.time() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s, got = key.data
            try:
                b = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                b = b""
            key.data[1] = got = got + b
            if not b or (got.startswith(b"HTTP/1.1 200") and b"retry:" in got):
                sel.unregister(s)
                if b:
                    started.append(s)
    sel.close()
    return started, socks


def still_open(s):
    """The server has not closed s (nothing to read, or stream bytes)."""
    s.setblocking(False)
    try:
        return s.recv(65536) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def client(port, sid, lat, failures):
    conn = None
    for _ in range(ROUNDS):
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            t0 = time.perf_counter()
            conn.request("POST", "/api/v1/studies/%d/ask" % sid)
            r = conn.getresponse()
            t = json.loads(r.read())
            lat["ask"].append(time.perf_counter() - t0)
            if r.status != 200:
                failures.append("ask %d %s" % (r.status, t))
                return
            body = json.dumps({"value": t["params"]["x"] ** 2}).encode()
            t0 = time.perf_counter()
            conn.request("POST", "/api/v1/trials/%d/tell" % t["trial_id"], body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            out = r.read()
            lat["tell"].append(time.perf_counter() - t0)
            if r.status != 200:
                failures.append("tell %d %s" % (r.status, out[:200]))
                return
        except (OSError, http.client.HTTPException, ValueError) as e:
            failures.append("%s: %s" % (type(e).__name__, e))
            return  # a locked-out client stops; the check below fails


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3 if xs else float("nan")


def main():
    args = parse_args()
    raise_nofile(N_IDLE + N_STREAMS + 200)
    c = Checks()
    # The default limits; only the header deadline is longer than the test,
    # so that the idle sockets stay open through it (test_limits cuts them).
    hp = Hpod(args.hpod, args=["--header-timeout", "120"]).start()
    idle, streams = [], []
    try:
        port = hp.port
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        t0 = time.time()
        for i in range(N_IDLE):
            idle.append(connect(port, IDLE_ADDRS[i % len(IDLE_ADDRS)]))
        started, streams = open_streams(port, sid)
        print("%d idle sockets and %d/%d event streams open in %.1f s"
              % (len(idle), len(started), N_STREAMS, time.time() - t0), flush=True)
        c.check(len(started) == N_STREAMS, "all %d event streams started (%d)" % (N_STREAMS, len(started)))

        lat = {"ask": [], "tell": []}
        failures = []
        t0 = time.time()
        threads = [threading.Thread(target=client, args=(port, sid, lat, failures)) for _ in range(N_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        took = time.time() - t0
        n = N_CLIENTS * ROUNDS
        c.check(not failures, "every ask/tell answered (%d failures: %s)" % (len(failures), failures[:3]))
        c.check(len(lat["ask"]) == n and len(lat["tell"]) == n,
                "%d asks and %d tells done (%d, %d)" % (n, n, len(lat["ask"]), len(lat["tell"])))
        both = lat["ask"] + lat["tell"]
        print("ask/tell under %d idle sockets + %d streams, %d clients x %d rounds in %.1f s: "
              "ask p50 %.2f ms p99 %.2f ms; tell p50 %.2f ms p99 %.2f ms; all p99 %.2f ms max %.2f ms"
              % (N_IDLE, N_STREAMS, N_CLIENTS, ROUNDS, took, pct(lat["ask"], 0.5), pct(lat["ask"], 0.99),
                 pct(lat["tell"], 0.5), pct(lat["tell"], 0.99), pct(both, 0.99), pct(both, 1.0)), flush=True)

        # the load was real: the sockets and streams were open all along
        n_idle = sum(still_open(s) for s in idle)
        n_streams = sum(still_open(s) for s in started)
        c.check(n_idle == N_IDLE, "the %d idle sockets are still open (%d)" % (N_IDLE, n_idle))
        c.check(n_streams == len(started), "the streams are still open (%d of %d)" % (n_streams, len(started)))
        study = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(study["trials_by_state"].get("complete") == n, "%d trials complete (%s)"
                % (n, study["trials_by_state"]))
        c.check(hp.proc.poll() is None, "hpod alive")
        c.check(hp.stop() == 0, "hpod exits 0 on SIGTERM with the sockets and streams open (%s)" % hp.log_tail(3))
    finally:
        for s in idle + streams:
            s.close()
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
