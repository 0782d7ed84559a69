"""hpo_client - a Python client for hpod's REST API (api/openapi.yaml),
standard library only, in the style of Optuna.

    import hpo_client as hpo

    client = hpo.Client("http://127.0.0.1:8080", token=None)
    study = client.create_study("quad", {"x": {"type": "float", "low": -5, "high": 5}},
                                tuner={"algorithm": "tpe", "seed": 1}, load_if_exists=True)
    study.optimize(lambda trial: (trial.params["x"] - 2) ** 2, n_trials=30)
    print(study.best_params, study.best_value)

Objects: Client (studies, trials, models, datasets, import_study,
copy_study), Study (ask, tell, optimize, enqueue_trial, add_trial, export,
best_*, trials, pause/resume/cancel/delete, wait, events, refit, ensemble,
user_attrs, note), Trial (params, report, should_prune, tell, model,
user_attrs, note, lineage), Model (wait,
predict, weights). A Study, Trial or Model keeps the JSON hpod last sent
about it in `.info`; `refresh()` reads it again.

Design:
- Errors: every 4xx/5xx answer raises an HpoError subclass chosen by the
  status (InvalidArgument 400, Unauthorized 401, Forbidden 403, NotFound
  404, Conflict 409 and Exhausted for code "exhausted", PayloadTooLarge
  413, Unavailable 503, InsufficientStorage 507, ServerError other 5xx)
  with hpod's `code`, `message` and `field` (the offending input, e.g.
  "space.x.low"). No answer at all raises ConnectionFailed (status None);
  a refit or ensemble that ends failed raises JobFailed from Model.wait.
- Retries: only a 503 that carries Retry-After, and only for idempotent
  methods (GET, HEAD, PUT, DELETE), up to `retries` times, waiting what
  Retry-After says (capped by `max_retry_wait`). A POST (ask, report,
  tell, create) is never sent twice: a 503 raises Unavailable with
  `retry_after`.
- Connections: one keep-alive connection per thread, closed when the
  thread ends; a process forked from one that used the Client opens its
  own (the inherited one stays the parent's). hpod closes a
  connection idle for 10 s (--header-timeout), so one idle for more than
  5 s, or that the server has closed (readable while idle), is replaced
  before a request; a reused connection that fails before an answer is
  replaced and the request sent again only where that cannot do it twice
  (the request could not be written, or the method is idempotent). A
  request interrupted (KeyboardInterrupt, a signal handler's exception)
  closes its connection: the next call opens a new one.
- JSON: values with .tolist() (numpy arrays and scalars) are converted;
  NaN and infinities are refused before sending (JSON has none), except
  where Optuna takes them: a trial told one fails (its error names the
  value), a report of one is not sent and says prune (with a warning), and
  an Optuna intermediate value goes as null.
- load_if_exists: hpod's get-or-create (POST /studies with
  "load_if_exists"): the study of that name when its definition is the
  one given (the oldest, if several share the name), Conflict naming the
  first differing field (err.field, e.g. "space.lr.high") when it is not;
  two clients racing with one name get one study. Without a space or a
  model (Optuna's load_if_exists with a define-by-run objective) the
  client looks the name up (the oldest study of it, as hpod would).
- User attributes and notes: Study.user_attrs / set_user_attr /
  set_user_attrs / note, Trial.user_attrs / set_user_attr / note (PATCH:
  merged, None deletes a key); tell and report take user_attrs too.
- Study.wait and Model.wait poll GET every 0.1 s to 1 s; Study.events
  follows the server-sent events stream for those who want each event
  (ConnectionFailed when it breaks before the study's final event).
- best_trial, best_value and best_params are a one-objective study's; on
  several objectives they raise RuntimeError, as Optuna's do: best_trials
  is the Pareto front.
- Study.optimize follows Optuna: fn(trial) returns the objective (a
  number; on a study of several objectives a list or 1-d array of one
  number per objective; for one number per execution the objective calls
  trial.tell(repeats=[...]) itself, and the trial is then not told again);
  raising TrialPruned (or any exception class named TrialPruned,
  so optuna.TrialPruned works) tells the trial pruned; any other exception
  tells it failed with the exception's text, and is raised again unless it
  is one of `catch`; None or a non-finite result fails the trial (with a
  warning in the "hpo_client" log). It stops when n_trials were run, after
  `timeout` seconds, or when hpod has no more trials to give (max_trials
  reached: 409 exhausted, or the study complete or cancelled). Ctrl-C
  stops its threads too (each after its current trial). A trial hpod no
  longer runs when it is told (its lease ran out) is logged and read again,
  so the callbacks see its state.
- Trial.report(step, value): hpod's order (step first), unlike Optuna's
  report(value, step); a step that is not an integer raises TypeError.
- Study management follows Optuna: enqueue_trial(params) (a partial set:
  hpod's tuner draws the rest when the trial is handed out), add_trial
  (a finished trial: params and value, or an optuna FrozenTrial),
  create_study(warm_start=[studies]) (their complete trials seed the
  tuner), export() / Client.import_study / Client.copy_study (the
  "hpo.study/1" document, which Optuna can load: see the README), and
  Client.import_optuna(optuna_study) (optuna_document: the document of an
  Optuna study, its space from the trials' distributions).
"""
import email.utils
import http.client
import io
import json
import logging
import math
import os
import select
import threading
import time
import urllib.parse
import uuid
import warnings
import weakref

__all__ = [
    "Client", "Study", "Trial", "Model", "TrialState", "TrialPruned",
    "HpoError", "InvalidArgument", "Unauthorized", "Forbidden", "NotFound", "Conflict", "Exhausted",
    "PayloadTooLarge", "Unavailable", "InsufficientStorage", "ServerError", "ConnectionFailed", "JobFailed",
]
__version__ = "0.1.0"

log = logging.getLogger("hpo_client")

IDEMPOTENT = frozenset(("GET", "HEAD", "PUT", "DELETE"))
IDLE_REUSE_SECONDS = 5.0  # hpod closes idle keep-alive connections after 10 s
_sleep = time.sleep  # tests replace it to watch the retries


# ---- errors -----------------------------------------------------------------

class HpoError(Exception):
    """An error answer of hpod ({"error": {"code", "message", "field"}}), or
    none at all (ConnectionFailed, status None). retry_after: the seconds a
    503 asked to wait, else None."""

    def __init__(self, status, code, message, field="", retry_after=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field or ""
        self.retry_after = retry_after

    def __str__(self):
        where = " (%s)" % self.field if self.field else ""
        status = "%s " % self.status if self.status is not None else ""
        return "%s%s%s: %s" % (status, self.code, where, self.message)


class InvalidArgument(HpoError):
    """400: the request is wrong; `field` names the input at fault."""


class Unauthorized(HpoError):
    """401: hpod runs with --token and the call has no or a wrong token."""


class Forbidden(HpoError):
    """403: the Origin is neither the site addressed nor an allowed host."""


class NotFound(HpoError):
    """404: no such study, trial, model or dataset (ids are never reused)."""


class Conflict(HpoError):
    """409: the state forbids the call (a finished trial told again, an
    ask on a paused study, a model that is not complete yet...)."""


class Exhausted(Conflict):
    """409 exhausted: max_trials reached, or every grid point asked."""


class PayloadTooLarge(HpoError):
    """413: a body or dataset over hpod's limits."""


class Unavailable(HpoError):
    """503: hpod is over a connection cap or busy; retry after retry_after s."""


class InsufficientStorage(HpoError):
    """507: hpod's data disk is full; nothing was stored."""


class ServerError(HpoError):
    """Another 5xx: hpod failed."""


class ConnectionFailed(HpoError):
    """No answer: hpod unreachable, the connection dropped, or a timeout."""


class JobFailed(HpoError):
    """A refit, trial model or ensemble ended failed (Model.wait)."""


class TrialPruned(Exception):
    """Raise it in an objective to stop the trial as pruned (Optuna's)."""


_BY_STATUS = {400: InvalidArgument, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
              413: PayloadTooLarge, 503: Unavailable, 507: InsufficientStorage}


def _retry_after(headers):
    """Retry-After in seconds (delta-seconds or an HTTP date), or None."""
    v = headers.get("Retry-After") if headers is not None else None
    if not v:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error(status, headers, raw):
    code, message, field = "http_%d" % status, "", ""
    try:
        e = json.loads(raw.decode("utf-8"))["error"]
        code, message, field = e.get("code") or code, e.get("message") or "", e.get("field") or ""
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        message = raw.decode("utf-8", "replace").strip()[:500] or http.client.responses.get(status, "")
    cls = _BY_STATUS.get(status)
    if cls is Conflict and code == "exhausted":
        cls = Exhausted
    if cls is None:
        cls = ServerError if status >= 500 else HpoError
    return cls(status, code, message, field, _retry_after(headers))


# ---- JSON --------------------------------------------------------------------

def _jsonable(o):
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return o.tolist()
    if hasattr(o, "__index__"):
        return o.__index__()
    if hasattr(o, "__float__"):
        return float(o)
    raise TypeError("%s is not JSON serialisable" % type(o).__name__)


def _dumps(body):
    try:
        return json.dumps(body, default=_jsonable, allow_nan=False).encode()
    except ValueError as e:
        raise ValueError("the request holds NaN or an infinity, which JSON cannot carry: %s" % e) from None


# ---- transport ---------------------------------------------------------------

def _read(resp, sink):
    """The response's body: bytes, or None once copied into sink."""
    if sink is None:
        return resp.read()
    while True:
        chunk = resp.read(1 << 16)
        if not chunk:
            return None
        sink.write(chunk)


class _Held:
    """One thread's keep-alive connection, with the process that opened it
    (a child forked later must not use it) and when it last answered. The
    connection is closed when the holder goes, i.e. when its thread ends."""

    def __init__(self, conn):
        self.conn = conn
        self.pid = os.getpid()
        self.last = time.monotonic()
        weakref.finalize(self, conn.close)


class _Transport:
    """HTTP/1.1 to one hpod: a keep-alive connection per thread, the retry
    rule, the error model. Paths are relative to the base URL."""

    def __init__(self, url, token, timeout, retries, max_retry_wait):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url must be http(s)://host[:port][/prefix], got %r" % url)
        self.scheme, self.host, self.port = u.scheme, u.hostname, u.port
        prefix = u.path.rstrip("/")
        if prefix.endswith("/api/v1"):
            prefix = prefix[:-len("/api/v1")]
        self.prefix = prefix
        self.url = "%s://%s%s" % (u.scheme, u.netloc, prefix)
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self._local = threading.local()
        self._all = weakref.WeakSet()  # the live threads' holders, for close()
        self._lock = threading.Lock()

    def _new_conn(self, timeout=None):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout if timeout is None else timeout)

    def _conn(self):
        """(holder, reused): this thread's connection, replaced when it
        idled too long or the server closed it, and made anew in a child
        process: the one it inherited through a fork is the parent's, which
        is left to the parent (forgetting it only closes this process's
        copy of the descriptor, not the parent's connection)."""
        h = getattr(self._local, "held", None)
        if h is not None and h.pid != os.getpid():
            h = None
        if h is not None and h.conn.sock is not None:
            idle = time.monotonic() - h.last
            try:
                closed = bool(select.select([h.conn.sock], [], [], 0)[0])
            except (OSError, ValueError):
                closed = True
            if idle <= IDLE_REUSE_SECONDS and not closed:
                return h, True
            h.conn.close()
        if h is None:
            h = self._local.held = _Held(self._new_conn())
            with self._lock:
                self._all.add(h)
        return h, False  # http.client connects on the first request

    def close(self):
        with self._lock:
            held = list(self._all)
        for h in held:
            h.conn.close()

    def headers(self, extra=None):
        h = {"User-Agent": "hpo-client-python/" + __version__, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(extra or {})
        return h

    def _once(self, method, target, payload, headers, sink):
        """One exchange: (status, headers, body bytes or None when sent to
        sink). Replaces a dead reused connection once where safe. Anything
        raised mid-exchange (also KeyboardInterrupt, or a signal handler's
        exception) leaves the connection closed for the next call."""
        where = "%s %s%s" % (method, self.url, target[len(self.prefix):])
        for attempt in (0, 1):
            h, reused = self._conn()
            written = False
            try:
                try:
                    h.conn.request(method, target, body=payload, headers=headers)
                    written = True
                except (BrokenPipeError, ConnectionResetError) as e:
                    # hpod answers a body over --max-body with 413 before it has
                    # read it all, then closes: read that answer if it came
                    try:
                        resp = h.conn.getresponse()
                    except (OSError, http.client.HTTPException):
                        raise e from None
                    raw = resp.read()
                    h.conn.close()
                    return resp.status, resp.headers, raw
                resp = h.conn.getresponse()
                raw = _read(resp, sink if 200 <= resp.status < 300 else None)
            except (OSError, http.client.HTTPException) as e:
                h.conn.close()
                if reused and attempt == 0 and isinstance(e, ConnectionError) and \
                        (not written or (method in IDEMPOTENT and sink is None)):
                    continue  # the server had closed it; sent again only where that cannot do it twice
                raise ConnectionFailed(None, "connection_failed",
                                       ("%s: no answer (%s)" if written else "%s: %s") % (where, e)) from e
            except BaseException:
                h.conn.close()
                raise
            h.last = time.monotonic()
            return resp.status, resp.headers, raw
        raise AssertionError("unreachable")

    def call(self, method, path, body=None, query=None, raw_body=None, content_type=None, sink=None,
             want="json"):
        """Sends a request; returns the parsed JSON (want="json"), the raw
        bytes ("bytes") or None (sink given); raises HpoError."""
        target = self.prefix + path
        if query:
            target += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        extra = {}
        payload = None
        if body is not None:
            payload, extra["Content-Type"] = _dumps(body), "application/json"
        elif raw_body is not None:
            payload, extra["Content-Type"] = raw_body, content_type
        headers = self.headers(extra)
        tries = 0
        while True:
            status, rh, raw = self._once(method, target, payload, headers, sink)
            if status == 503 and method in IDEMPOTENT and tries < self.retries:
                wait = _retry_after(rh)
                if wait is not None:
                    tries += 1
                    log.info("%s %s: 503, retrying in %.1f s (%d/%d)", method, path, wait, tries, self.retries)
                    _sleep(min(wait, self.max_retry_wait))
                    continue
            break
        if status >= 400:
            raise _error(status, rh, raw or b"")
        if sink is not None:
            return None
        if want == "bytes":
            return raw
        if not raw:
            return None
        return json.loads(raw.decode("utf-8"))

    def stream(self, path, headers, timeout):
        """Opens a streaming GET on its own connection (server-sent events):
        (connection, response), or None for 204; 503 retried as in call."""
        tries = 0
        while True:
            conn = self._new_conn(timeout)
            try:
                conn.request("GET", self.prefix + path, headers=self.headers(headers))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise ConnectionFailed(None, "connection_failed", "GET %s%s: %s" % (self.url, path, e)) from e
            if resp.status == 503 and tries < self.retries and _retry_after(resp.headers) is not None:
                wait = _retry_after(resp.headers)
                resp.read()
                conn.close()
                tries += 1
                log.info("GET %s: 503, retrying in %.1f s (%d/%d)", path, wait, tries, self.retries)
                _sleep(min(wait, self.max_retry_wait))
                continue
            if resp.status >= 400:
                raw = resp.read()
                conn.close()
                raise _error(resp.status, resp.headers, raw)
            if resp.status == 204:
                conn.close()
                return None
            return conn, resp


# ---- multipart ---------------------------------------------------------------

def _multipart(fields, files):
    """(content type, length, body iterable) for multipart/form-data; files
    are (field, filename, source) with source bytes, a path or a binary
    file object, streamed, never read whole unless it cannot be measured."""
    boundary = "hpo-" + uuid.uuid4().hex
    pieces = []  # bytes, or (path) / (file object, size)
    for k, v in fields:
        pieces.append(('--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                       % (boundary, k, v)).encode())
    for k, filename, src in files:
        pieces.append(('--%s\r\nContent-Disposition: form-data; name="%s"; filename="%s"\r\n'
                       'Content-Type: application/octet-stream\r\n\r\n'
                       % (boundary, k, filename.replace('"', "_").replace("\r", "_").replace("\n", "_"))).encode())
        if isinstance(src, (bytes, bytearray, memoryview)):
            pieces.append(bytes(src))
        elif isinstance(src, (str, os.PathLike)):
            pieces.append((os.fspath(src), os.path.getsize(src)))
        else:
            try:
                pos = src.tell()
                size = src.seek(0, io.SEEK_END) - pos
                src.seek(pos)
                pieces.append((src, size))
            except (AttributeError, OSError, io.UnsupportedOperation):
                pieces.append(src.read())
        pieces.append(b"\r\n")
    pieces.append(("--%s--\r\n" % boundary).encode())
    length = sum(len(p) if isinstance(p, bytes) else p[1] for p in pieces)

    def body():
        for p in pieces:
            if isinstance(p, bytes):
                yield p
                continue
            src, size = p
            f = open(src, "rb") if isinstance(src, str) else src
            try:
                left = size
                while left > 0:
                    chunk = f.read(min(left, 1 << 16))
                    if not chunk:
                        raise ValueError("a dataset file shrank while it was sent")
                    left -= len(chunk)
                    yield chunk
            finally:
                if isinstance(src, str):
                    f.close()

    return "multipart/form-data; boundary=" + boundary, length, body()


def _file_name(src, default):
    if isinstance(src, (str, os.PathLike)):
        return os.path.basename(os.fspath(src))
    name = getattr(src, "name", None)
    return os.path.basename(name) if isinstance(name, str) else default


# ---- helpers -----------------------------------------------------------------

class TrialState:
    """Trial states as hpod names them."""
    RUNNING = "running"
    COMPLETE = "complete"
    PRUNED = "pruned"
    FAILED = "failed"
    CANCELLED = "cancelled"
    QUEUED = "queued"


def _state_name(state):
    """A state as a string: "pruned", TrialState.PRUNED or an enum such as
    optuna.trial.TrialState.PRUNED (by its name)."""
    if isinstance(state, str):
        return state.lower()
    name = getattr(state, "name", None)
    if isinstance(name, str):
        return {"fail": "failed"}.get(name.lower(), name.lower())
    raise TypeError("state must be a string such as \"pruned\", got %r" % (state,))


def _poll(fetch, done, timeout, what):
    """Calls fetch() until done(info); returns that info or raises
    TimeoutError after timeout seconds (None: no limit)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    interval = 0.1
    while True:
        info = fetch()
        if done(info):
            return info
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError("%s: still %s after %g s" % (what, info.get("state"), timeout))
        pause = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
        time.sleep(pause)
        interval = min(interval * 1.5, 1.0)


def _is_seq(value):
    """A list of numbers (a list, a tuple, a 1-d array), not one number (nor
    a 0-d array, which has __len__ too)."""
    return not isinstance(value, (str, bytes)) and hasattr(value, "__len__") and getattr(value, "ndim", 1) != 0


def _non_finite(value):
    """Whether value (a number or a list of them) holds a NaN or an infinity."""
    for v in (value if _is_seq(value) else [value]):
        try:
            if not math.isfinite(float(v)):
                return True
        except (TypeError, ValueError, OverflowError):
            pass
    return False


def _or_null(v):
    """An intermediate value as hpod stores it: a NaN or an infinity (a
    diverged report in Optuna) as null."""
    return None if v is not None and _non_finite(v) else v


def _reported(v):
    """A reported number as hpod takes it: NaN and the infinities as
    "nan", "inf", "-inf" (JSON has none); anything else as given."""
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return v
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return v


def _short(x):
    """repr(x), cut to 80 characters (an error text, a log line)."""
    r = repr(x)
    return r if len(r) <= 80 else r[:77] + "..."


def _is_pruned(exc):
    return isinstance(exc, TrialPruned) or any(c.__name__ == "TrialPruned" for c in type(exc).__mro__)


def _ids(items, what):
    out = []
    for x in items:
        i = getattr(x, "id", x)
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError("%s must be ids or objects with an id, got %r" % (what, x))
        out.append(i)
    return out


# ---- the client ----------------------------------------------------------------

class Client:
    """A connection to one hpod. url: "http://host:port" (a prefix path is
    kept, a trailing /api/v1 dropped; default $HPO_URL, else
    http://127.0.0.1:8080); token: hpod's --token (default $HPO_TOKEN);
    timeout: seconds to wait for an answer; retries: how often an
    idempotent call answered 503 with Retry-After is tried again. Safe to
    share between threads (one connection per thread)."""

    def __init__(self, url=None, token=None, timeout=60.0, retries=3, max_retry_wait=60.0):
        url = url or os.environ.get("HPO_URL") or "http://127.0.0.1:8080"
        if token is None:
            token = os.environ.get("HPO_TOKEN") or None
        self._t = _Transport(url, token, timeout, retries, max_retry_wait)
        self.url = self._t.url

    def __repr__(self):
        return "Client(%r)" % self.url

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes the keep-alive connections (a later call opens new ones)."""
        self._t.close()

    def _call(self, method, path, body=None, **kw):
        return self._t.call(method, path, body, **kw)

    # -- server
    def health(self):
        """GET /healthz: {"status", "version", "schema_version"}."""
        return self._call("GET", "/healthz")

    # -- studies
    def create_study(self, name=None, space=None, direction=None, tuner=None, *, pruner=None, model=None,
                     dataset=None, training=None, metric=None, description=None, load_if_exists=False,
                     user_attrs=None, note=None, warm_start=None, directions=None, objectives=None,
                     constraints=None, **definition):
        """Creates a study and returns it.

        space: {"x": {"type": "float", "low": 0, "high": 1}, ...} (optional
        for a premade model template); direction: "minimize" | "maximize";
        tuner: an algorithm name ("tpe") or the tuner object ({"algorithm",
        "seed", "max_trials", ...}); pruner: a name ("median") or object,
        put into tuner.pruner. Embedded studies (hpod trains): model (a
        template name such as "mlp", or the template object), dataset (a
        name such as "fashion-mnist", an uploaded dataset's id, or the
        object), training, metric (objective.metric). Other keyword
        arguments go into the definition as they are. user_attrs (a dict)
        and note (a text) are stored with a new study. warm_start: studies
        (or ids) whose complete trials seed the tuner (tpe, bayesian; see
        Study.warm_start). Multi-objective studies: objectives
        ([{"metric", "direction", "reference"}, ...], 1 to 8) or directions
        (Optuna's: ["maximize", "minimize"], metrics named objective_0,
        objective_1, ...), and constraints ([{"metric", "max", "min"}]);
        tell them values=[...] (one per objective) and metrics={...}; best
        answers the Pareto front (Study.pareto_front, Study.best_trials).
        An embedded study's objectives and constraints name metrics hpod
        supplies (val_accuracy, val_loss, ..., params, flops, latency_ms,
        train_seconds); its refits and ensembles take trials= (front
        members).
        load_if_exists: when a study of this name
        exists, return it (hpod's get-or-create; the oldest of the name):
        Conflict naming the first differing field when its definition is
        not this one; with neither space nor model the name is only looked
        up."""
        if load_if_exists:
            if not name:
                raise ValueError("load_if_exists needs a name")
            if space is None and model is None and "space" not in definition and "model" not in definition:
                named = self._named_studies(name)
                if named:
                    return Study(self, min(named, key=lambda s: s["id"]))
        d = dict(definition)
        if name is not None:
            d["name"] = name
        if space is not None:
            d["space"] = space
        if description is not None:
            d["description"] = description
        if direction is not None or metric is not None:
            obj = dict(d.get("objective") or {})
            if direction is not None:
                obj["direction"] = direction
            if metric is not None:
                obj["metric"] = metric
            d["objective"] = obj
        if directions is not None and objectives is None:
            objectives = [{"metric": "objective_%d" % i, "direction": dr} for i, dr in enumerate(directions)]
        if objectives is not None:
            d["objectives"] = [dict(o) for o in objectives]
        if constraints is not None:
            d["constraints"] = [dict(k) for k in constraints]
        if tuner is not None or pruner is not None:
            t = dict(d.get("tuner") or {})
            if isinstance(tuner, str):
                t["algorithm"] = tuner
            elif tuner is not None:
                t.update(tuner)
            if pruner is not None:
                t["pruner"] = {"algorithm": pruner} if isinstance(pruner, str) else dict(pruner)
            d["tuner"] = t
        if model is not None:
            d["model"] = {"template": model} if isinstance(model, str) else model
        if dataset is not None:
            if isinstance(dataset, str):
                dataset = {"name": dataset}
            elif isinstance(dataset, int) and not isinstance(dataset, bool):
                dataset = {"id": dataset}
            d["dataset"] = dataset
        if training is not None:
            d["training"] = training
        if user_attrs is not None:
            d["user_attrs"] = dict(user_attrs)
        if note is not None:
            d["note"] = str(note)
        if load_if_exists:
            d["load_if_exists"] = True
        if warm_start is not None:
            d["warm_start"] = {"study_ids": _ids(warm_start, "warm_start")}
        return Study(self, self._call("POST", "/api/v1/studies", d))

    def import_study(self, doc, name=None):
        """A new study from an exported document (a dict, or the path of a
        JSON file Study.export wrote): the study, with `imported` and
        `skipped` (running and queued trials left out) set."""
        if isinstance(doc, (str, os.PathLike)):
            with open(doc, "r", encoding="utf-8") as f:
                doc = json.load(f)
        body = dict(doc)
        if name is not None:
            body["name"] = name
        return _imported(self, self._call("POST", "/api/v1/studies/import", body))

    def import_optuna(self, optuna_study, name=None, space=None):
        """A new study holding an Optuna study's finished trials (complete,
        pruned, failed; running and waiting ones are skipped and counted):
        its direction(s), params, values, intermediate values, times and
        user_attrs, through POST /studies/import (see optuna_document). The
        study, with `imported` and `skipped` set."""
        return _imported(self, self._call("POST", "/api/v1/studies/import",
                                          optuna_document(optuna_study, name=name, space=space)))

    def copy_study(self, study, name=None):
        """A copy of a study (a Study or its id) with its finished trials
        (Optuna's copy_study); an embedded study's weights are not copied."""
        body = {} if name is None else {"name": name}
        return _imported(self, self._call("POST", "/api/v1/studies/%d/copy" % _one_id(study), body))

    def get_study(self, study_id):
        """The study with this id (NotFound if there is none)."""
        return Study(self, self._call("GET", "/api/v1/studies/%d" % _one_id(study_id)))

    def studies(self):
        """Every study, newest first."""
        return [Study(self, s) for s in self._call("GET", "/api/v1/studies")["studies"]]

    def find_study(self, name):
        """The newest study with this name, or None."""
        for s in self._named_studies(name):
            return Study(self, s)
        return None

    def _named_studies(self, name):
        """The studies of this name, newest first (hpod filters them: ?name=)."""
        listed = self._call("GET", "/api/v1/studies?name=" + urllib.parse.quote(name, safe=""))["studies"]
        return [s for s in listed if s.get("name") == name]

    def delete_study(self, study_id):
        self._call("DELETE", "/api/v1/studies/%d" % _one_id(study_id))

    # -- trials and models
    def trial(self, trial_id):
        """A trial with its intermediate values (and an embedded trial's curves)."""
        return Trial(self, self._call("GET", "/api/v1/trials/%d" % _one_id(trial_id)))

    def model(self, model_id):
        """A model (refit, trial model or ensemble)."""
        return Model(self, self._call("GET", "/api/v1/models/%d" % _one_id(model_id)))

    # -- datasets
    def upload_dataset(self, name, format, *, file=None, x=None, y=None, task=None, label_column=None):
        """Uploads a dataset (multipart/form-data, streamed): format "csv"
        with file (and label_column), or "idx"/"npy" with x and y. A file
        is a path, bytes or a binary file object. Returns the dataset."""
        fields = [("name", name), ("format", format)]
        if task is not None:
            fields.append(("task", task))
        if label_column is not None:
            fields.append(("label_column", label_column))
        files = [(k, _file_name(v, k), v) for k, v in (("file", file), ("x", x), ("y", y)) if v is not None]
        ctype, length, body = _multipart(fields, files)
        # A POST: never sent twice, so it goes on its own fresh connection.
        t = self._t
        conn = t._new_conn()
        try:
            conn.request("POST", t.prefix + "/api/v1/datasets", body=body,
                         headers=t.headers({"Content-Type": ctype, "Content-Length": str(length)}))
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed(None, "connection_failed", "POST %s/api/v1/datasets: %s" % (t.url, e)) from e
        finally:
            conn.close()
        if resp.status >= 400:
            raise _error(resp.status, resp.headers, raw)
        return json.loads(raw.decode("utf-8"))

    def datasets(self):
        """The builtin and uploaded datasets."""
        return self._call("GET", "/api/v1/datasets")["datasets"]

    def dataset(self, dataset_id):
        return self._call("GET", "/api/v1/datasets/%d" % _one_id(dataset_id))

    def delete_dataset(self, dataset_id):
        self._call("DELETE", "/api/v1/datasets/%d" % _one_id(dataset_id))


def _one_id(x):
    return _ids([x], "id")[0]


def _outcome(body, value, values, state, error, repeats=None, metrics=None):
    """body with a trial's outcome (tell, add_trial): value (one objective),
    values (one per objective), repeats (one per execution), metrics."""
    if value is not None:
        body["value"] = value
    if values is not None:
        body["values"] = list(values)
    if repeats is not None:
        body["repeats"] = list(repeats)
    if metrics is not None:
        body["metrics"] = dict(metrics)
    if state is not None:
        body["state"] = _state_name(state)
    if error is not None:
        body["error"] = str(error)
    return body


def _optuna_param(dist):
    """hpo's definition of one Optuna distribution (FloatDistribution,
    IntDistribution, CategoricalDistribution, or the older Uniform,
    LogUniform, DiscreteUniform and IntUniform ones), read by attribute."""
    if hasattr(dist, "choices"):
        return {"type": "choice", "values": list(dist.choices)}
    kind = "int" if "Int" in type(dist).__name__ else "float"
    out = {"type": kind, "low": dist.low, "high": dist.high}
    log = getattr(dist, "log", False) or type(dist).__name__.startswith(("LogUniform", "IntLogUniform"))
    step = getattr(dist, "step", None) or getattr(dist, "q", None)
    if log:
        out["log"] = True
    elif step is not None and not (kind == "int" and step == 1):
        out["step"] = step
    return out


def optuna_document(optuna_study, name=None, space=None):
    """The "hpo.study/1" document (Client.import_study's) of an Optuna study,
    read by attribute, so optuna is not imported here: its name (or name),
    direction(s), user_attrs and trials (state, params, value or values,
    intermediate_values, datetime_start/complete, user_attrs). The space is
    built from the trials' distributions; a parameter that some finished
    trials lack is conditional in Optuna's define-by-run space, which hpo
    cannot guess: ValueError naming it, unless space= (hpo's definition of
    the space, with its conditions) is given."""
    states = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running",
              "WAITING": "queued"}
    trials = list(optuna_study.trials)
    if space is None:
        space, seen = {}, []
        finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED", "FAIL")]
        for t in finished:
            for k, d in t.distributions.items():
                p = _optuna_param(d)
                if space.setdefault(k, p) != p:
                    raise ValueError("parameter %r has two distributions (%s, %s): pass space=" % (k, space[k], p))
        for k in space:
            missing = [t.number for t in finished if k not in t.params]
            if missing:
                raise ValueError("parameter %r is missing from trials %s (conditional): pass space= with its "
                                 "condition" % (k, missing[:5]))
    directions = [d.name.lower() for d in optuna_study.directions]
    definition = {"name": name or optuna_study.study_name, "space": dict(space)}
    if len(directions) == 1:
        definition["objective"] = {"direction": directions[0]}
    else:
        definition["objectives"] = [{"metric": "objective_%d" % i, "direction": d} for i, d in enumerate(directions)]

    def when(dt):  # Optuna's times are naive local times
        return dt.astimezone().isoformat() if dt is not None else None

    docs = []
    for t in trials:
        doc = {"number": t.number, "state": states.get(t.state.name, t.state.name.lower()), "params": dict(t.params),
               "intermediate_values": {str(k): _or_null(v) for k, v in t.intermediate_values.items()},
               "datetime_start": when(t.datetime_start), "datetime_complete": when(t.datetime_complete),
               "user_attrs": dict(t.user_attrs)}
        if t.values is not None and len(directions) > 1:
            doc["values"] = list(t.values)
        elif t.values is not None:
            doc["value"] = t.values[0]
        docs.append(doc)
    return {"format": "hpo.study/1",
            "study": {"name": definition["name"], "definition": definition,
                      "user_attrs": dict(optuna_study.user_attrs)},
            "trials": docs}


def _imported(client, out):
    study = Study(client, out["study"])
    study.imported, study.skipped = out["imported"], out["skipped"]
    return study



class Study:
    """A study. id, name, direction, kind ("external" | "embedded") come
    from the study's JSON (`info`); `state` and the best_* properties ask
    hpod each time."""

    FINAL = ("complete", "cancelled")

    def __init__(self, client, info):
        self._client = client
        self.info = info
        self.id = info["id"]

    def __repr__(self):
        return "Study(id=%d, name=%r)" % (self.id, self.info.get("name"))

    def __eq__(self, other):
        return isinstance(other, Study) and other.id == self.id and other._client is self._client

    def __hash__(self):
        return hash(self.id)

    def _call(self, method, path, body=None, **kw):
        return self._client._call(method, "/api/v1/studies/%d%s" % (self.id, path), body, **kw)

    def refresh(self):
        """Reads the study again (with its definition); returns the JSON."""
        self.info = self._call("GET", "")
        return self.info

    @property
    def name(self):
        return self.info.get("name")

    @property
    def direction(self):
        return self.info.get("direction")

    @property
    def kind(self):
        return self.info.get("kind")

    @property
    def state(self):
        return self.refresh()["state"]

    # -- user attributes and the note (Optuna's study.user_attrs)
    @property
    def user_attrs(self):
        """The study's user attributes (read from hpod each time)."""
        return dict(self.refresh().get("user_attrs") or {})

    def set_user_attr(self, key, value):
        """Sets one user attribute (value: anything JSON; None deletes it)."""
        self.set_user_attrs({key: value})

    def set_user_attrs(self, attrs):
        """Merges a dict of user attributes (None values delete keys)."""
        self.info = self._call("PATCH", "", {"user_attrs": dict(attrs)})

    @property
    def note(self):
        """The study's note (Optuna Dashboard's), "" when none."""
        return self.refresh().get("note", "")

    @note.setter
    def note(self, text):
        self.info = self._call("PATCH", "", {"note": None if text is None else str(text)})

    # -- ask / tell
    def ask(self):
        """A new running trial with hpod's suggested params."""
        return Trial(self._client, self._call("POST", "/ask"), study=self)

    def tell(self, trial, value=None, state=None, *, values=None, error=None, skip_if_finished=False,
             user_attrs=None, repeats=None, metrics=None):
        """Finishes a trial (a Trial or its id): tell(trial, 0.37);
        tell(trial, [0.37, 12]) or values=[...] for one value per objective
        (Optuna's multi-objective tell); repeats=[...] for one value per
        execution (their mean, std and count); metrics={"params": 1.2e5}:
        the metrics the study's constraints read; state="pruned" (value optional: hpod keeps the last
        reported one) or state="failed" (with error, a text). Returns hpod's
        answer {"trial_id", "number", "state", "value", "values"}. A NaN or
        an infinity (which JSON cannot carry) fails the trial, naming it in
        its error, as Optuna does. skip_if_finished:
        a trial that is no longer running is left alone (None). user_attrs:
        merged into the trial's first."""
        if value is not None and _is_seq(value):
            if values is not None:
                raise ValueError("give either value or values")
            value, values = None, value
        given = next((v for v in (value, values, repeats) if v is not None), None)
        if given is not None and _non_finite(given):
            # Optuna's rule: JSON (and hpod) has no NaN; such a trial fails
            value = values = repeats = None
            if state is None or _state_name(state) == TrialState.COMPLETE:
                state, error = TrialState.FAILED, "the value %s is not a finite number" % _short(given)
                log.warning("trial %s failed: %s", getattr(trial, "number", trial), error)
        body = _outcome({}, value, values, state, error, repeats, metrics)
        if user_attrs is not None:
            body["user_attrs"] = dict(user_attrs)
        tid = _one_id(trial)
        try:
            out = self._client._call("POST", "/api/v1/trials/%d/tell" % tid, body)
        except Conflict:
            if skip_if_finished:
                return None
            raise
        if isinstance(trial, Trial):
            trial._told(out)
        return out

    def optimize(self, func, n_trials=None, timeout=None, n_jobs=1, catch=(), callbacks=None):
        """Runs func(trial) on asked trials and tells each result (see the
        module's notes). n_jobs > 1 runs that many threads (-1: one per
        CPU); callbacks are called as cb(study, trial) after each trial."""
        catch = (catch,) if isinstance(catch, type) else tuple(catch)
        callbacks = list(callbacks or ())
        if n_jobs == -1:
            n_jobs = os.cpu_count() or 1
        if n_jobs < 1:
            raise ValueError("n_jobs must be >= 1 or -1")
        deadline = None if timeout is None else time.monotonic() + timeout
        lock = threading.Lock()
        run = {"started": 0, "stop": False, "error": None}

        def claim():
            with lock:
                if run["stop"] or (n_trials is not None and run["started"] >= n_trials) or \
                        (deadline is not None and time.monotonic() >= deadline):
                    return False
                run["started"] += 1
                return True

        def worker():
            try:
                while claim():
                    if not self._run_trial(func, catch, callbacks):
                        with lock:
                            run["stop"] = True
            except BaseException as e:  # noqa: B902 - re-raised by optimize
                with lock:
                    run["stop"] = True
                    if run["error"] is None:
                        run["error"] = e
                if n_jobs == 1:
                    raise

        if n_jobs == 1:
            worker()
            return
        threads = [threading.Thread(target=worker, name="hpo-optimize-%d" % i, daemon=True) for i in range(n_jobs)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except BaseException:  # Ctrl-C: the workers stop after their current trial
            with lock:
                run["stop"] = True
            raise
        if run["error"] is not None:
            raise run["error"]

    def _no_more_trials(self, err):
        if isinstance(err, Exhausted):
            return True
        try:
            return self.state in self.FINAL
        except HpoError:
            return False

    def _tell_quietly(self, trial, **kw):
        """Tells in optimize; a trial hpod no longer runs (its lease ran
        out, the study was cancelled) is logged, not raised."""
        if trial._finished:
            return
        try:
            self.tell(trial, **kw)
        except Conflict as e:
            log.warning("trial %d (number %d) could not be told: %s", trial.id, trial.number, e)
            try:
                trial.refresh()  # so that the callbacks see the state hpod gave it
            except HpoError:
                pass

    def _run_trial(self, func, catch, callbacks):
        try:
            trial = self.ask()
        except Conflict as e:
            if self._no_more_trials(e):
                return False
            raise
        try:
            result = func(trial)
        except BaseException as e:  # noqa: B902 - told, then raised unless caught
            if _is_pruned(e):
                self._tell_quietly(trial, state=TrialState.PRUNED)
            else:
                self._tell_quietly(trial, state=TrialState.FAILED, error=("%s: %s" % (type(e).__name__, e))[:4000])
                if not (isinstance(e, Exception) and catch and isinstance(e, catch)):
                    raise
                log.warning("trial %d failed: %s: %s", trial.number, type(e).__name__, e)
        else:
            self._tell_result(trial, result)
        for cb in callbacks:
            cb(self, trial)
        return True

    def _tell_result(self, trial, result):
        if trial._finished:  # the objective told it itself
            return
        reason = None
        values = None
        several = _is_seq(result)
        if several:
            values = list(result)
        elif result is None:
            reason = "the objective returned None"
        else:
            values = [result]
        if values is not None:
            try:
                nums = [float(v) for v in values]
            except (TypeError, ValueError, OverflowError):
                nums = None
            n_obj = self._n_objectives()
            if not nums:
                reason = "the objective returned %s, not a finite number" % _short(result)
            elif not all(math.isfinite(v) for v in nums):
                reason = "the objective returned %s" % _short(result)
            elif len(nums) != n_obj:
                reason = "the objective returned %d values for %d objective(s)" % (len(nums), n_obj)
        if reason:
            log.warning("trial %d failed: %s", trial.number, reason)
            self._tell_quietly(trial, state=TrialState.FAILED, error=reason)
        elif several:
            self._tell_quietly(trial, values=nums)
        else:
            self._tell_quietly(trial, value=nums[0])

    def _n_objectives(self):
        if "objectives" not in self.info:
            self.refresh()
        return len(self.info.get("objectives") or [None])

    # -- trials a client brings
    def enqueue_trial(self, params, user_attrs=None, skip_if_exists=False):
        """Enqueues a trial with these params fixed (Optuna's enqueue_trial;
        a partial set is fine: the tuner draws the others when the trial is
        handed out), with user_attrs stored on it. Enqueued trials come
        first, oldest first; each counts toward max_trials. skip_if_exists:
        when a trial of the study (in any state) has exactly these params,
        nothing is enqueued and that trial is returned. The queued trial."""
        body = {"params": dict(params)}
        if user_attrs is not None:
            body["user_attrs"] = dict(user_attrs)
        if skip_if_exists:
            body["skip_if_exists"] = True
        return Trial(self._client, self._call("POST", "/enqueue", body), study=self)

    def add_trial(self, params, value=None, state=None, *, values=None, intermediate_values=None, error=None,
                  user_attrs=None, note=None, repeats=None, metrics=None):
        """Adds a finished trial (Optuna's add_trial): params (every active
        parameter) and value; state "complete" (default), "pruned" or
        "failed"; values: one per objective; repeats: one per execution;
        metrics: those the study's constraints read; intermediate_values: {step:
        value} (a NaN, a diverged report, is stored as null); user_attrs (a
        dict) and note (a text) stored with it. params may also be an optuna
        FrozenTrial (its params, state, value or values, intermediate values,
        user_attrs and times are taken). The stored trial."""
        if hasattr(params, "params") and hasattr(params, "distributions"):  # an optuna FrozenTrial
            ft = params
            params = ft.params
            if value is None and values is None:  # Optuna's ft.value raises on several objectives
                several = getattr(ft, "values", None)
                if several is not None and len(several) > 1:
                    values = several
                else:
                    value = ft.value
            state = state or ft.state
            if intermediate_values is None:
                intermediate_values = ft.intermediate_values
            if user_attrs is None and ft.user_attrs:
                user_attrs = ft.user_attrs
            times = {k: getattr(ft, k, None) for k in ("datetime_start", "datetime_complete")}
        else:
            times = {}
        body = _outcome({"params": dict(params)}, value, values, state, error, repeats, metrics)
        for k, t in times.items():  # a naive datetime is UTC, as Optuna writes them
            if t is not None:
                body[k] = t.isoformat()
        if intermediate_values:
            body["intermediate_values"] = {str(int(k)): _or_null(v) for k, v in dict(intermediate_values).items()}
        if user_attrs is not None:
            body["user_attrs"] = dict(user_attrs)
        if note is not None:
            body["note"] = str(note)
        return Trial(self._client, self._call("POST", "/trials", body), study=self)

    def export(self, path=None):
        """The study and its trials as a document ("hpo.study/1"; Optuna
        can load it, see the README): a dict, or written to path as JSON
        (returns path)."""
        doc = self._call("GET", "/export")
        if path is None:
            return doc
        tmp = "%s.part-%s" % (path, uuid.uuid4().hex[:8])
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
        return path

    @property
    def warm_start(self):
        """{"study_ids", "trials_used", "trials_skipped"} of a warm-started
        study, else None."""
        return self.info.get("warm_start")

    # -- results
    def best(self, top_n=1):
        """The top_n best complete trials, best first (each with value_std
        and value_n over executions)."""
        out = self._call("GET", "/best", query={"top_n": top_n})
        return [Trial(self._client, dict(t, state="complete", study_id=self.id), study=self) for t in out["trials"]]

    def pareto_front(self):
        """A multi-objective study's GET /best: {"trials" (the Pareto front
        of the feasible complete trials, each with "values"), "directions",
        "objectives", "hypervolume", "reference_point", ...}."""
        return self._call("GET", "/best")

    @property
    def best_trials(self):
        """The Pareto front as Trials (Optuna's best_trials)."""
        out = self.pareto_front()
        return [Trial(self._client, dict(t, state="complete", study_id=self.id), study=self) for t in out["trials"]]

    @property
    def best_trial(self):
        """The best complete trial of a study of one objective (best_trials,
        the Pareto front, for several: RuntimeError, as in Optuna)."""
        n = self._n_objectives()
        if n > 1:
            raise RuntimeError("study %d has %d objectives, so no single best trial: use best_trials "
                               "(the Pareto front)" % (self.id, n))
        top = self.best(1)
        if not top:
            raise ValueError("study %d has no complete trial yet" % self.id)
        return top[0]

    @property
    def best_params(self):
        return self.best_trial.params

    @property
    def best_value(self):
        return self.best_trial.value

    def get_trials(self, states=None, order="number", desc=False):
        """The study's trials (all of them, read in pages of 1,000), by
        order ("number" or "value"; desc: reversed); states: a state or
        several ("complete", ("complete", "pruned"))."""
        if states is None or isinstance(states, str) or not hasattr(states, "__iter__"):
            states = [states]
        names = None if any(st is None for st in states) else {_state_name(st) for st in states}
        # one state: hpod filters; several: every trial in hpod's order, filtered here
        one = next(iter(names)) if names is not None and len(names) == 1 else None
        out = []
        offset = 0
        while True:
            page = self._call("GET", "/trials", query={
                "state": one, "order": order, "desc": "true" if desc else None, "limit": 1000, "offset": offset})
            out.extend(Trial(self._client, t, study=self) for t in page["trials"]
                       if names is None or t.get("state") in names)
            offset += len(page["trials"])
            if not page["trials"] or offset >= page["total"]:
                break
        return out

    @property
    def trials(self):
        """Every trial, by number."""
        return self.get_trials()

    def importance(self):
        """Hyperparameter importance: {"param": share, ...}, most important first."""
        out = self._call("GET", "/importance")
        return {e["param"]: e["importance"] for e in out["importance"]}

    # -- control
    def pause(self):
        self.info = self._call("POST", "/pause")
        return self

    def resume(self):
        self.info = self._call("POST", "/resume")
        return self

    def cancel(self):
        self.info = self._call("POST", "/cancel")
        return self

    def delete(self):
        self._call("DELETE", "")

    def wait(self, timeout=None):
        """Waits until the study is complete or cancelled (polling); returns
        the study; TimeoutError after timeout seconds."""
        self.info = _poll(lambda: self._call("GET", ""), lambda s: s["state"] in self.FINAL, timeout,
                          "study %d" % self.id)
        return self

    def events(self, after=0, timeout=60.0):
        """Yields the study's events as (id, type, data) tuples, from the
        one after `after`, as they happen; ends where hpod ends the stream
        (after study_complete or study_cancelled). timeout: the longest
        silence to wait for (hpod sends a keep-alive every 10 s). A stream
        that breaks, ends before the study's final event or stays silent
        past timeout raises ConnectionFailed (resume with after=the last
        id seen)."""
        path = "/api/v1/studies/%d/events" % self.id
        opened = self._client._t.stream(path, {"Accept": "text/event-stream", "Last-Event-ID": str(int(after or 0))},
                                        timeout)
        if opened is None:
            return
        conn, resp = opened
        try:
            cur = {}
            data = []
            last = None
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise ConnectionFailed(None, "connection_failed", "GET %s%s: the event stream broke (%s)"
                                           % (self._client.url, path, e)) from e
                if not line:
                    if last in ("study_complete", "study_cancelled"):
                        return
                    raise ConnectionFailed(None, "connection_failed", "GET %s%s: the event stream ended before "
                                           "the study's final event" % (self._client.url, path))
                line = line.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data:
                        last = cur.get("event", "message")
                        yield (int(cur.get("id", 0)), last, json.loads("\n".join(data)))
                    cur, data = {}, []
                elif line.startswith(":"):
                    continue
                else:
                    k, _, v = line.partition(":")
                    v = v[1:] if v.startswith(" ") else v
                    if k == "data":
                        data.append(v)
                    else:
                        cur[k] = v
        finally:
            conn.close()

    # -- embedded studies: models
    def refit(self, top_n=None, trials=None, epochs_factor=None):
        """Retrains the top_n best trials (or the given trials: a study of
        several objectives takes only these, e.g. front members) on
        train+validation and evaluates them on the test split: the queued
        models (Model.wait for their end)."""
        body = {}
        if top_n is not None:
            body["top_n"] = top_n
        if trials is not None:
            body["trials"] = _ids(trials, "trials")
        if epochs_factor is not None:
            body["epochs_factor"] = epochs_factor
        return [Model(self._client, m) for m in self._call("POST", "/refits", body)["refits"]]

    def ensemble(self, members=None, top_n=None, method="mean", rounds=None, trials=None):
        """An ensemble of models (members: Models or ids), of the top_n
        best trials, or of chosen trials (trials: Trials or ids, e.g. members
        of a multi-objective study's Pareto front, which has no top_n);
        method "mean", "weighted" or "greedy". The queued model."""
        body = {"method": method}
        if members is not None:
            body["members"] = _ids(members, "members")
        if top_n is not None:
            body["top_n"] = top_n
        if trials is not None:
            body["trials"] = _ids(trials, "trials")
        if rounds is not None:
            body["rounds"] = rounds
        return Model(self._client, self._call("POST", "/ensembles", body))

    def models(self):
        return [Model(self._client, m) for m in self._call("GET", "/models")["models"]]

    def refits(self):
        return [Model(self._client, m) for m in self._call("GET", "/refits")["refits"]]

    def ensembles(self):
        return [Model(self._client, m) for m in self._call("GET", "/ensembles")["ensembles"]]


class Trial:
    """A trial: id (hpod's trial id), number (0, 1, ... in its study),
    params, and for read trials state, value, intermediate. An asked trial
    reports and is told through it."""

    def __init__(self, client, info, study=None):
        self._client = client
        self.info = info
        self.id = info.get("trial_id", info.get("id"))
        self._study = study
        self._prune = False
        self._finished = info.get("state", "running") != "running"

    def __repr__(self):
        return "Trial(id=%r, number=%r, state=%r, params=%r)" % (self.id, self.number, self.state, self.params)

    @property
    def number(self):
        return self.info.get("number")

    @property
    def params(self):
        return self.info.get("params") or {}

    @property
    def state(self):
        return self.info.get("state", "running")

    @property
    def value(self):
        return self.info.get("value")

    @property
    def values(self):
        """The objective values (one per objective), None when none."""
        return self.info.get("values")

    @property
    def lineage(self):
        """A trial a pbt study bred from another's checkpoint: {"parent_trial_id",
        "parent_number", "parent_epoch", "replaced_trial_id", "replaced_number",
        "params_before", "params_after"}; None for a sampled trial."""
        return self.info.get("lineage")

    @property
    def user_attrs(self):
        """The trial's user attributes as last read (refresh() reads them again)."""
        return dict(self.info.get("user_attrs") or {})

    def set_user_attr(self, key, value):
        """Sets one user attribute (value: anything JSON; None deletes it),
        in any state of the trial."""
        self.info = self._client._call("PATCH", "/api/v1/trials/%d" % self.id, {"user_attrs": {key: value}})

    @property
    def note(self):
        """The trial's note, "" when none (read from hpod each time)."""
        return self.refresh().get("note", "")

    @note.setter
    def note(self, text):
        self.info = self._client._call("PATCH", "/api/v1/trials/%d" % self.id,
                                       {"note": None if text is None else str(text)})

    @property
    def intermediate(self):
        """{step: value} of the reports (read from hpod when this trial's
        JSON has none: trials of a list, best(), an asked trial)."""
        if "intermediate" not in self.info and self.id is not None:
            self.info["intermediate"] = self._client._call("GET", "/api/v1/trials/%d" % self.id).get("intermediate")
        return {e["step"]: e["value"] for e in self.info.get("intermediate") or ()}

    @property
    def study(self):
        if self._study is None:
            self._study = self._client.get_study(self.info["study_id"])
        return self._study

    def refresh(self):
        """Reads the trial again, with its intermediate values and curves."""
        self.info = self._client._call("GET", "/api/v1/trials/%d" % self.id)
        self._finished = self.state != "running"
        return self.info

    def report(self, step, value, user_attrs=None):
        """Reports an intermediate value at step (an int >= 0; note: hpod's
        order, Optuna's is report(value, step)); renews the lease. On a study
        with several objectives, value may be a list of one number per
        objective (sent as "values"; needed with a pruner: MO-ASHA). Returns
        True when the pruner says to stop the trial. A NaN or an infinity
        (a diverged run) is sent as "nan", "inf" or "-inf" (JSON has none),
        and the pruner decides on it as Optuna's does: none never stops a
        trial, the median rule takes the best value so far, asha and
        hyperband stop a NaN at a rung."""
        if isinstance(step, bool) or not hasattr(step, "__index__"):
            raise TypeError("report(step, value): step must be an integer, got %r "
                            "(the order is step first, unlike Optuna's report(value, step))" % (step,))
        self.info.pop("intermediate", None)  # read again when asked for
        body = {"step": step.__index__()}
        if _is_seq(value):
            body["values"] = [_reported(v) for v in value]
        else:
            body["value"] = _reported(value)
        if user_attrs is not None:
            body["user_attrs"] = dict(user_attrs)
        out = self._client._call("POST", "/api/v1/trials/%d/report" % self.id, body)
        self._prune = bool(out.get("prune"))
        return self._prune

    def should_prune(self):
        """The pruner's answer to the latest report (False before any)."""
        return self._prune

    def tell(self, value=None, state=None, **kw):
        """Study.tell for this trial."""
        study = self._study or Study(self._client, {"id": self.info["study_id"]})
        return study.tell(self, value, state, **kw)

    def _told(self, out):
        self._finished = True
        self.info = dict(self.info, **out)

    def model(self):
        """A model from this complete trial's best-epoch checkpoint
        (embedded studies; no refit). The queued model."""
        return Model(self._client, self._client._call("POST", "/api/v1/trials/%d/model" % self.id))

    # Optuna's define-by-run calls, for objectives written for Optuna: the
    # value comes from hpod's space; a name it does not hold is a KeyError.
    def _param(self, name):
        if name not in self.params:
            raise KeyError("parameter %r is not in this trial's params %s (the study's space decides them)"
                           % (name, sorted(self.params)))
        return self.params[name]

    def suggest_float(self, name, low=None, high=None, **_):
        return float(self._param(name))

    def suggest_int(self, name, low=None, high=None, **_):
        return int(self._param(name))

    def suggest_categorical(self, name, choices=None):
        return self._param(name)


class Model:
    """A model of an embedded study: a refit, a trial model or an ensemble."""

    FINAL = ("complete", "failed")

    def __init__(self, client, info):
        self._client = client
        self.info = info
        self.id = info["id"]

    def __repr__(self):
        return "Model(id=%d, kind=%r, state=%r)" % (self.id, self.kind, self.state)

    @property
    def kind(self):
        return self.info.get("kind")

    @property
    def state(self):
        return self.info.get("state")

    @property
    def result(self):
        """Metrics (train/val/test; an ensemble's members and weights)."""
        return self.info.get("result")

    def refresh(self):
        self.info = self._client._call("GET", "/api/v1/models/%d" % self.id)
        return self.info

    def wait(self, timeout=None):
        """Waits until the model is complete (returns it) or failed (raises
        JobFailed with hpod's reason); TimeoutError after timeout seconds."""
        self.info = _poll(lambda: self._client._call("GET", "/api/v1/models/%d" % self.id),
                          lambda m: m["state"] in self.FINAL, timeout, "model %d" % self.id)
        if self.state == "failed":
            raise JobFailed(None, "job_failed", "model %d failed: %s" % (self.id, self.info.get("error")))
        return self

    def predict(self, inputs):
        """Predictions for a batch of rows, each one sample's values in the
        dataset's own units (raw 0..255 pixels for fashion-mnist; a numpy
        array of samples is flattened per row). Returns {"predictions":
        [[class probabilities] or [values]], "classes": [argmax]}."""
        if hasattr(inputs, "reshape") and hasattr(inputs, "ndim") and inputs.ndim > 2:
            inputs = inputs.reshape(len(inputs), -1)
        return self._client._call("POST", "/api/v1/models/%d/predict" % self.id, {"inputs": inputs})

    def weights(self, path=None):
        """The weights as safetensors: bytes, or written to path (streamed;
        returns path)."""
        url = "/api/v1/models/%d/weights" % self.id
        if path is None:
            return self._client._call("GET", url, want="bytes")
        tmp = "%s.part-%s" % (path, uuid.uuid4().hex[:8])
        try:
            with open(tmp, "wb") as f:
                self._client._call("GET", url, sink=f)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path
