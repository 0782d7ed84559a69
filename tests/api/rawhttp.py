"""Raw HTTP/1.1 over a socket, for tests that send what urllib will not
(malformed heads, trickled bytes, idle sockets, other source addresses).
Standard library only; every call is bounded by a timeout."""
import json
import re
import socket
import time


def connect(port, src=None, timeout=10):
    """A TCP connection to 127.0.0.1:port, from source address src (any
    of 127.0.0.0/8 works on Linux: all of it is routed to lo)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if src:
        s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_response(s, timeout=10, head_only=False):
    """Reads one response: through Content-Length bytes of body (with
    head_only, none after a 200: a stream's head), or to the end of the
    stream. Returns the raw bytes (b"" when the
    server closed without a word); stops at the timeout."""
    s.settimeout(timeout)
    data = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            head = data[:end].decode("latin-1").lower()
            want = None
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip() == "content-length":
                    want = int(v.strip())
            if head_only and head.startswith("http/1.1 200"):
                want = 0  # a stream: the body never ends
            if want is not None and len(data) >= end + 4 + want:
                return data
        try:
            b = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not b:
            break
        data += b
    return data


def exchange(port, raw, timeout=10, src=None):
    """Sends raw bytes on a new connection and reads what the server sends
    until it closes, or until one whole response and then 0.3 s of
    silence (anything sent after a response shows), or the timeout."""
    s = connect(port, src, timeout)
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it was all sent: read the answer
        out = read_response(s, timeout)
        deadline = time.time() + 0.3
        while out and time.time() < deadline:
            s.settimeout(max(0.01, deadline - time.time()))
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def parse(data):
    """(status, headers {lower-case name: value}, body bytes, number of
    status lines in data) of one response; status 0 when there is none."""
    statuses = len(re.findall(rb"(?:^|\r\n)HTTP/1\.[01] \d{3} ", data))
    end = data.find(b"\r\n\r\n")
    if not data.startswith(b"HTTP/") or end < 0:
        return 0, {}, b"", statuses
    lines = data[:end].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, data[end + 4:], statuses


def json_error(data):
    """(status, error object or None, headers, status lines) of a response
    that should carry our JSON error model."""
    status, headers, body, n = parse(data)
    err = None
    if headers.get("content-type", "").startswith("application/json"):
        try:
            err = json.loads(body.decode()).get("error")
        except ValueError:
            err = None
    return status, err, headers, n


def closed_within(s, seconds):
    """Waits until the server ends the connection (EOF or reset); returns
    the seconds it took and the bytes it sent meanwhile, or (None, bytes)
    if it was still open after `seconds`."""
    t0 = time.time()
    got = b""
    s.settimeout(0.2)
    while time.time() - t0 < seconds:
        try:
            b = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.time() - t0, got
        if not b:
            return time.time() - t0, got
        got += b
    return None, got
