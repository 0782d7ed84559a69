"""HTTP protocol edges (issue 12, item 9), each answered once, in the JSON
error model: an encoded NUL in the path or query, the heads libmicrohttpd
used to answer in HTML (413, 414, 431, 505, a malformed request line), a
malformed Content-Length (which used to get its headers twice), a 405's
Allow header, a Host, Origin, Content-Type or Authorization given twice,
a Content-Encoding, an absolute-form target, integers in the query and
Last-Event-ID given with a sign, a space or in hex, pause /
resume / cancel with a body that is not {}, HEAD on GET routes, the bearer
scheme in any case, and without a token: Host (DNS rebinding), Origin and
Content-Type (cross-site requests)."""
import http.client
import json
import os
import subprocess

from hpod import Checks, Hpod, parse_args
from rawhttp import exchange, json_error

STUDY = {"name": "proto", "space": {"x": {"type": "float", "low": 0, "high": 1}},
         "tuner": {"algorithm": "random", "seed": 1}}


def head(port, host="127.0.0.1"):
    return "Host: %s:%d\r\n" % (host, port)


def one_json_error(c, data, status, what, field=None):
    """The bytes are exactly one response: status, our JSON error (naming
    field when given)."""
    got, err, headers, n = json_error(data)
    ok = got == status and n == 1 and err is not None and err.get("code") and err.get("message")
    if ok and field is not None:
        ok = err.get("field") == field
    c.check(ok, "%s: want one %d JSON error (field %r), got %d x%d %r" % (what, status, field, got, n, data[:300]))


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        port = hp.port
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        H = head(port)

        # ---- an encoded NUL (%00) is refused, not cut short ----
        for what, target, field in [("path", "/api/v1/studies/%d%%00/trials" % sid, "path"),
                                    ("path of an unknown route", "/healthz%00x", "path"),
                                    ("query", "/api/v1/studies/%d/trials?state=complete%%00x" % sid, "query"),
                                    ("query key", "/api/v1/studies?li%00mit=1", "query")]:
            one_json_error(c, exchange(port, ("GET %s HTTP/1.1\r\n%s\r\n" % (target, H)).encode()), 400,
                           "%%00 in the %s" % what, field)
        # ---- an absolute-form target is the path it names (RFC 9112 3.2.2) ----
        for target in ("http://127.0.0.1:%d/api/v1/studies/%d" % (port, sid),
                       "HTTP://localhost/api/v1/studies/%d" % sid):
            data = exchange(port, ("GET %s HTTP/1.1\r\n%s\r\n" % (target, H)).encode())
            c.check(data.startswith(b"HTTP/1.1 200") and b'"proto"' in data, "GET %s -> the study (%r)"
                    % (target, data[:120]))
        # ---- integers in the query and Last-Event-ID are decimal digits, nothing around them ----
        for arg in ("+1", "%201", "1%20", "0x10", ""):
            target = "/api/v1/studies/%d/trials?limit=%s" % (sid, arg)
            one_json_error(c, exchange(port, ("GET %s HTTP/1.1\r\n%s\r\n" % (target, H)).encode()), 400,
                           "?limit=%s" % arg, "limit")
        one_json_error(c, exchange(port, ("GET /api/v1/studies/%d/events HTTP/1.1\r\n%sLast-Event-ID: +0\r\n\r\n"
                                          % (sid, H)).encode()), 400, "Last-Event-ID: +0", "Last-Event-ID")
        # ... also on the second request of a keep-alive connection
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        r.read()
        conn.request("GET", "/api/v1/studies/%d%%00" % sid)
        r = conn.getresponse()
        body = json.loads(r.read())
        c.check(r.status == 400 and body["error"]["field"] == "path", "%%00 on a keep-alive request -> 400 (%d %s)"
                % (r.status, body))
        conn.close()

        # ---- heads libmicrohttpd answered in HTML ----
        one_json_error(c, exchange(port, b"GET / HTTP/2.0\r\n\r\n"), 505, "HTTP/2.0", "request_line")
        one_json_error(c, exchange(port, b"GET / HTTP/0.9\r\n\r\n"), 505, "HTTP/0.9", "request_line")
        one_json_error(c, exchange(port, b"GET /\r\n\r\n"), 400, "no HTTP version", "request_line")
        one_json_error(c, exchange(port, b"GET /healthz HTTP/1.1\r\nno colon\r\n\r\n"), 400, "header without colon")
        one_json_error(c, exchange(port, ("GET /%s HTTP/1.1\r\n%s\r\n" % ("a" * 40000, H)).encode()), 414,
                       "a 40 kB target", "request_line")
        one_json_error(c, exchange(port, ("GET /healthz?%s HTTP/1.1\r\n%s\r\n" % ("&".join(["a"] * 500), H)).encode()),
                       414, "500 query arguments", "query")
        one_json_error(c, exchange(port, ("GET /healthz HTTP/1.1\r\n%sX-Big: %s\r\n\r\n" % (H, "v" * 40000)).encode()),
                       431, "a 40 kB header", "headers")
        one_json_error(c, exchange(port, ("GET /healthz HTTP/1.1\r\n%s%s\r\n" % (H, "X-A: b\r\n" * 300)).encode()),
                       431, "300 headers", "headers")
        one_json_error(c, exchange(port, ("POST /api/v1/studies HTTP/1.1\r\n%sContent-Type: application/json\r\n"
                                          "Content-Length: 99999999999999999999999\r\n\r\n{}" % H).encode()),
                       413, "Content-Length over 2^64", "Content-Length")
        one_json_error(c, exchange(port, ("POST /api/v1/studies HTTP/1.1\r\n%sTransfer-Encoding: gzip\r\n\r\n" % H)
                                   .encode()), 501, "Transfer-Encoding gzip", "Transfer-Encoding")
        one_json_error(c, exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n"), 400, "HTTP/1.1 without Host", "Host")

        # ---- a head at the limits (16 KiB, 100 headers, 100 query arguments) is served ----
        target = "/api/v1/studies?" + "&".join("a%d=1" % i for i in range(100))
        line = "GET %s HTTP/1.1\r\n" % target
        fields = [H.strip()] + ["X-H%02d: %s" % (i, "v" * 140) for i in range(99)]
        big = line + "".join(f + "\r\n" for f in fields[:-1])
        fields[-1] = "X-Pad: " + "p" * (16384 - len(big) - 2 - len("X-Pad: \r\n"))
        big = (line + "".join(f + "\r\n" for f in fields) + "\r\n").encode()
        for conn_what, prefix in [("first", b""), ("keep-alive", b"GET /healthz HTTP/1.1\r\n" + H.encode() + b"\r\n")]:
            data = exchange(port, prefix + big)
            last = data[data.rfind(b"HTTP/1.1 "):]
            c.check(len(big) == 16384 and last.startswith(b"HTTP/1.1 200") and b'"studies"' in last,
                    "a %d-byte head of 100 headers and 100 arguments (%s request) -> 200 (%r)"
                    % (len(big), conn_what, last[:120]))
        one_json_error(c, exchange(port, big[:-2] + b"X: \r\n\r\n"), 431, "a head over 16 KiB", "headers")

        # ---- malformed Content-Length: one clean 400 ----
        for what, cl in [("abc", "Content-Length: abc\r\n"), ("-1", "Content-Length: -1\r\n"),
                         ("empty", "Content-Length: \r\n"), ("two values", "Content-Length: 2, 2\r\n"),
                         ("given twice", "Content-Length: 2\r\nContent-Length: 2\r\n"),
                         ("twice, different", "Content-Length: 2\r\nContent-Length: 7\r\n"),
                         ("beside chunked", "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n")]:
            data = exchange(port, ("POST /api/v1/studies HTTP/1.1\r\n%sContent-Type: application/json\r\n%s\r\n{}"
                                   % (H, cl)).encode())
            one_json_error(c, data, 400, "Content-Length %s" % what, "Content-Length")
        c.check(len(hp.ok("GET", "/api/v1/studies")["studies"]) == 1, "no study was created by a malformed request")

        # ---- pause / resume / cancel take no options ----
        for op in ("pause", "resume", "cancel"):
            for what, raw in [("garbage", b"garbage"), ("an array", b"[1]"), ("a key", b'{"force": true}'),
                              ("a string", b'"x"')]:
                st, out = hp.request("POST", "/api/v1/studies/%d/%s" % (sid, op), raw=raw)
                c.check(st == 400 and out["error"]["code"] in ("invalid_json", "invalid_argument"),
                        "%s with %s -> 400 (%s %s)" % (op, what, st, out))
        c.check(hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "running", "the refused calls changed nothing")
        st, out = hp.request("POST", "/api/v1/studies/%d/pause" % sid, raw=b"{}")
        c.check(st == 200 and out["state"] == "paused", "pause with {} -> 200 (%s %s)" % (st, out))
        st, out = hp.request("POST", "/api/v1/studies/%d/resume" % sid)
        c.check(st == 200 and out["state"] == "running", "resume without a body -> 200 (%s %s)" % (st, out))

        # ---- HEAD is GET without the body ----
        for path in ("/healthz", "/api/v1/studies", "/api/v1/studies/%d" % sid, "/api/v1/openapi.yaml", "/",
                     "/api/v1/studies/999999", "/api/v1/studies/%d/events" % sid):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path)
            g = conn.getresponse()
            gbody = g.read() if "events" not in path else b""
            gtype = g.getheader("Content-Type")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("HEAD", path)
            h = conn.getresponse()
            hbody = h.read()
            ok = h.status == g.status and h.getheader("Content-Type") == gtype and hbody == b""
            if "events" not in path:
                ok = ok and h.getheader("Content-Length") == str(len(gbody))
            else:  # a stream has no length: GET's framing, not "Content-Length: 0"
                ok = ok and h.getheader("Content-Length") is None and h.getheader("Transfer-Encoding") == \
                    g.getheader("Transfer-Encoding")
            c.check(ok, "HEAD %s: %d %s len %s vs GET %d %s len %d" % (path, h.status, h.getheader("Content-Type"),
                                                                     h.getheader("Content-Length"), g.status, gtype,
                                                                     len(gbody)))
            conn.close()
        st, _ = hp.request("HEAD", "/api/v1/studies/%d/ask" % sid)
        c.check(st == 405, "HEAD on a POST-only route -> 405 (%s)" % st)
        for method, path, allow in (("PUT", "/api/v1/studies", "GET, HEAD, POST"),
                                    ("POST", "/api/v1/studies/%d" % sid, "GET, HEAD, DELETE, PATCH"),
                                    ("GET", "/api/v1/studies/%d/ask" % sid, "POST")):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(method, path, body=b"{}" if method != "GET" else None,
                         headers={"Content-Type": "application/json"} if method != "GET" else {})
            r = conn.getresponse()
            r.read()
            got = sorted(m.strip() for m in (r.getheader("Allow") or "").split(","))
            c.check(r.status == 405 and got == sorted(allow.split(", ")),
                    "%s %s -> 405 with Allow: %s (%s %r)" % (method, path, allow, r.status, r.getheader("Allow")))
            conn.close()

        # ---- a header that must come once, twice (a proxy may read the other one) ----
        body = json.dumps(STUDY)
        for extra, field in (("Host: evil.example\r\n", "Host"), ("Origin: http://127.0.0.1:%d\r\nOrigin: "
                             "http://evil.example\r\n" % port, "Origin"),
                             ("Content-Type: text/plain\r\n", "Content-Type")):
            data = exchange(port, ("POST /api/v1/studies HTTP/1.1\r\n%sContent-Type: application/json\r\n%s"
                                   "Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                                   % (head(port), extra, len(body), body)).encode())
            one_json_error(c, data, 400, "%s given twice" % field, field)
        data = exchange(port, ("POST /api/v1/studies HTTP/1.1\r\n%sContent-Type: application/json\r\n"
                               "Content-Encoding: gzip\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                               % (head(port), len(body), body)).encode())
        one_json_error(c, data, 415, "Content-Encoding: gzip", "Content-Encoding")

        # ---- without a token: Host, Origin, Content-Type ----
        for host in ("evil.example", "evil.example:%d" % port, "127.0.0.2:%d" % port, "[::2]", "localhost.evil.example"):
            data = exchange(port, ("GET /api/v1/studies HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode())
            one_json_error(c, data, 421, "Host %s" % host, "Host")
        # any port: a published container port may not be the one hpod listens on
        for host in ("localhost", "localhost:%d" % port, "LOCALHOST:%d" % port, "127.0.0.1", "[::1]:%d" % port,
                     "localhost:9999"):
            data = exchange(port, ("GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
            c.check(data.startswith(b"HTTP/1.1 200"), "Host %s -> 200 (%r)" % (host, data[:60]))
        data = exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n")
        c.check(data.startswith(b"HTTP/1.1 200"), "HTTP/1.0 without Host -> 200 (%r)" % data[:60])

        ask = "/api/v1/studies/%d/ask" % sid
        for what, headers, status in [
                ("text/plain JSON", {"Content-Type": "text/plain"}, 415),
                ("a form", {"Content-Type": "application/x-www-form-urlencoded"}, 415),
                ("multipart to a non-upload", {"Content-Type": "multipart/form-data; boundary=x"}, 415),
                ("json; charset", {"Content-Type": "application/json; charset=utf-8"}, 200),
                ("Origin of another site", {"Origin": "http://evil.example"}, 403),
                ("Origin null", {"Origin": "null"}, 403),
                ("Origin of another local site", {"Origin": "http://localhost"}, 403),
                ("Origin on another port", {"Origin": "http://127.0.0.1:1"}, 403),
                ("Origin of this server", {"Origin": "http://127.0.0.1:%d" % port}, 200),
                ("Host of another site", {"Host": "evil.example"}, 421)]:
            st, out = hp.request("POST", ask, raw=b"{}", headers=headers)
            c.check(st == status and (status == 200 or out["error"]["field"] in ("Content-Type", "Origin", "Host")),
                    "ask with %s -> %d (%s %s)" % (what, status, st, out))
            if st == 200:
                hp.ok("POST", "/api/v1/trials/%d/tell" % out["trial_id"], {"value": 0.5})
        data = exchange(port, ("POST %s HTTP/1.1\r\n%sContent-Length: 2\r\n\r\n{}" % (ask, H)).encode())
        one_json_error(c, data, 415, "a body without Content-Type", "Content-Type")
        data = exchange(port, ("POST %s HTTP/1.1\r\n%sConnection: close\r\nContent-Length: 0\r\n\r\n" % (ask, H)).encode())
        c.check(data.startswith(b"HTTP/1.1 200"), "an empty POST without Content-Type -> 200 (%r)" % data[:80])
        # the hpo client follows the rules: a call without a body sends no Content-Type
        r = subprocess.run([args.hpo, "ask", str(sid)], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, HPO_URL=hp.url, HPO_TOKEN=""))
        c.check(r.returncode == 0 and "trial_id" in r.stdout, "hpo ask without a token (rc %d: %s)"
                % (r.returncode, r.stderr.strip()[:200]))
        c.check(hp.proc.poll() is None, "hpod alive")
        c.check(hp.stop() == 0, "hpod exits 0 on SIGTERM (%s)" % hp.log_tail(3))
    finally:
        hp.stop()
        hp.cleanup()

    # ---- with a token: the scheme in any case; Content-Type free; Host
    # still checked on a loopback address (reads need no token: a
    # DNS-rebinding page read every study) ----
    hp = Hpod(args.hpod, args=["--token", "s3cret"]).start()
    try:
        for scheme, status in [("Bearer", 201), ("bearer", 201), ("BEARER", 201), ("Bearer ", 201),
                               ("Basic", 401), ("Bearerx", 401)]:
            st, out = hp.request("POST", "/api/v1/studies", STUDY, headers={"Authorization": scheme + " s3cret"})
            c.check(st == status, "Authorization: %s s3cret -> %d (%s %s)" % (scheme, status, st, out))
        st, _ = hp.request("POST", "/api/v1/studies", raw=json.dumps(STUDY).encode(),
                           headers={"Authorization": "Bearer s3cret", "Content-Type": "text/plain"})
        c.check(st == 201, "with the token, any Content-Type (%s)" % st)
        for method, path in (("GET", "/api/v1/studies"), ("GET", "/api/v1/studies/1/export"),
                             ("POST", "/api/v1/studies")):
            data = exchange(hp.port, ("%s %s HTTP/1.1\r\nHost: attacker.example\r\nOrigin: http://attacker.example"
                                      "\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n"
                                      % (method, path)).encode())
            one_json_error(c, data, 421, "with a token on 127.0.0.1, %s %s from Host attacker.example"
                           % (method, path), "Host")
        c.check(hp.stop() == 0, "hpod exits 0 on SIGTERM (%s)" % hp.log_tail(3))
    finally:
        hp.stop()
        hp.cleanup()

    # ---- --allowed-host names more hosts ----
    hp = Hpod(args.hpod, args=["--allowed-host", "HPO.example"]).start()
    try:
        for host, status in [("hpo.example", 200), ("hpo.example:443", 200), ("other.example", 421)]:
            data = exchange(hp.port, ("GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
            c.check(data.startswith(b"HTTP/1.1 %d" % status), "--allowed-host: Host %s -> %d (%r)"
                    % (host, status, data[:60]))
        st, _ = hp.request("POST", "/api/v1/studies", STUDY, headers={"Origin": "https://hpo.example"})
        c.check(st == 201, "--allowed-host: Origin https://hpo.example -> 201 (%s)" % st)
        c.check(hp.stop() == 0, "hpod exits 0 on SIGTERM (%s)" % hp.log_tail(3))
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
