"""Real responses of every operation of api/openapi.yaml against its schemas.

hpod runs with --token; the test calls every route of the contract it serves
(GET /api/v1/openapi.yaml, resolved to JSON by tests/web/openapi.mjs with the
pinned swagger-parser) with valid inputs: an external study (ask, report,
tell, pause, resume, cancel; user_attrs, notes and get-or-create on
another), an embedded template-only study on a slice of
Fashion-MNIST (200 rows, 1 epoch, 2 trials) with a refit, a trial model, an
ensemble and predictions, two dataset uploads (csv with class labels by
name, npy) and a one-trial study on the csv whose model predicts labels, the
event streams (with Last-Event-ID, and its 204); and a few wrong ones. Each
answer must have a status the operation documents, a Content-Type it lists,
and a JSON body that its schema accepts (checked here: the subset of JSON
Schema the file uses; a keyword the checker does not know is a failure, so
nothing is skipped silently); a valid input must fit its request schema. Object
fields missing from a schema's "properties" are failures too (undocumented
fields), as are SSE events whose type or data x-events does not describe.
Every operation that needs the token is first called without it (401), every
GET without any. At the end every operation must have had a 2xx answer.

Skips (77) only when web/node_modules lacks the validators (`make deps`).
"""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from hpod import Checks, Hpod, parse_args, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "conformance-token"

# ---- a checker for the JSON Schema subset of OpenAPI 3.0 -------------------
ANNOTATIONS = {"description", "example", "default", "title", "format", "readOnly", "writeOnly", "deprecated"}
KEYWORDS = ANNOTATIONS | {"type", "nullable", "enum", "properties", "required", "additionalProperties", "items",
                          "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
                          "minProperties", "maxProperties",
                          "allOf", "anyOf", "oneOf"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def schema_errors(schema, value, where="$"):
    """The list of ways value breaks schema (empty: it conforms)."""
    errs = []
    unknown = set(schema) - KEYWORDS
    if unknown:
        return ["%s: the checker does not know %s" % (where, sorted(unknown))]
    for k in ("allOf", "anyOf", "oneOf"):
        if k in schema:
            fits = [not schema_errors(s, value, where) for s in schema[k]]
            if k == "allOf" and not all(fits):
                errs += [e for s in schema[k] for e in schema_errors(s, value, where)]
            if k == "anyOf" and not any(fits):
                errs.append("%s: matches none of anyOf: %s" % (where, [schema_errors(s, value, where) for s in schema[k]]))
            if k == "oneOf" and sum(fits) != 1:
                errs.append("%s: matches %d of oneOf, not 1" % (where, sum(fits)))
    if value is None:
        if "type" in schema and not schema.get("nullable"):
            errs.append("%s: null, but not nullable" % where)
        return errs
    t = schema.get("type")
    if t and not TYPES[t](value):
        return errs + ["%s: %s is not of type %s" % (where, json.dumps(value)[:80], t)]
    if "enum" in schema and value not in schema["enum"]:
        errs.append("%s: %r is not one of %s" % (where, value, schema["enum"]))
    if TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append("%s: %r < minimum %r" % (where, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            errs.append("%s: %r > maximum %r" % (where, value, schema["maximum"]))
        if schema.get("exclusiveMinimum") and value == schema.get("minimum"):
            errs.append("%s: %r is the exclusive minimum" % (where, value))
        if schema.get("exclusiveMaximum") and value == schema.get("maximum"):
            errs.append("%s: %r is the exclusive maximum" % (where, value))
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
            errs.append("%s: length %d outside [%s, %s]" % (where, len(value), schema.get("minLength"),
                                                            schema.get("maxLength")))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append("%s: %r does not match %s" % (where, value, schema["pattern"]))
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errs.append("%s: %d items outside [%s, %s]" % (where, len(value), schema.get("minItems"),
                                                           schema.get("maxItems")))
        if "items" in schema:
            for i, v in enumerate(value):
                errs += schema_errors(schema["items"], v, "%s[%d]" % (where, i))
    if isinstance(value, dict):
        if len(value) < schema.get("minProperties", 0) or len(value) > schema.get("maxProperties", len(value)):
            errs.append("%s: %d fields outside [%s, %s]" % (where, len(value), schema.get("minProperties"),
                                                            schema.get("maxProperties")))
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                errs.append("%s: required field %s is missing" % (where, k))
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if k in props:
                errs += schema_errors(props[k], v, "%s.%s" % (where, k))
            elif isinstance(extra, dict):
                errs += schema_errors(extra, v, "%s.%s" % (where, k))
            elif extra is False:
                errs.append("%s: field %s is not allowed" % (where, k))
            elif t == "object" and props:  # no additionalProperties: the fields are all listed
                errs.append("%s: field %s is not documented" % (where, k))
    return errs


# ---- the contract hpod serves, resolved ------------------------------------
def load_contract(hp):
    """The served openapi.yaml as a dict with $refs resolved, or None (skip)."""
    with urllib.request.urlopen(hp.url + "/api/v1/openapi.yaml", timeout=10) as r:
        text = r.read()
    node = shutil.which("node")
    if not node:
        raise RuntimeError("node is missing (`make deps` installs it)")
    with tempfile.NamedTemporaryFile(suffix=".yaml") as f:
        f.write(text)
        f.flush()
        p = subprocess.run([node, os.path.join(ROOT, "tests", "web", "openapi.mjs"), "json",
                            os.path.join(ROOT, "web"), f.name], capture_output=True, timeout=60)
    if p.returncode == 77:
        print(p.stdout.decode().strip())
        return None
    if p.returncode != 0:
        raise RuntimeError("openapi.mjs json failed: %s %s" % (p.stdout.decode(), p.stderr.decode()))
    return json.loads(p.stdout)


class Client:
    """Calls hpod and checks every answer against the contract."""

    def __init__(self, hp, doc, c):
        self.hp, self.doc, self.c = hp, doc, c
        self.seen = {}       # (METHOD, pattern) -> set of statuses
        self.tried_401 = set()

    def op(self, method, pattern):
        return self.doc["paths"][pattern][method.lower()]

    def raw(self, method, path, data, ctype, token):
        """(status, Content-Type, body bytes) of one request."""
        req = urllib.request.Request(self.hp.url + path, data=data, method=method)
        if ctype:
            req.add_header("Content-Type", ctype)
        if token:
            req.add_header("Authorization", "Bearer " + TOKEN)
        try:
            r = urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as e:
            r = e
        with r:
            return r.getcode(), r.headers.get("Content-Type", ""), r.read()

    def call(self, method, pattern, expect, body=None, raw=None, ctype=None, query="", **ids):
        """One call; checks the answer; returns the parsed JSON (or bytes)."""
        path = pattern.format(**ids) + query
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None and ctype is None:
            ctype = "application/json"
        op = self.op(method, pattern)
        if body is not None and expect < 400:  # a valid input is valid by the contract too
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            errs = schema_errors(schema, body)
            self.c.check(not errs, "%s %s: the request body breaks the schema: %s" % (method, pattern, errs))
        secured = op.get("security", self.doc.get("security")) not in (None, [])
        key = (method, pattern)
        if secured and key not in self.tried_401:  # without the token first
            self.tried_401.add(key)
            st, rtype, out = self.raw(method, path, data, ctype, token=False)
            self.verify(method, pattern, st, rtype, out)
            self.c.check(st == 401, "%s %s without the token -> 401 (%d)" % (method, pattern, st))
        st, rtype, out = self.raw(method, path, data, ctype, token=secured)
        parsed = self.verify(method, pattern, st, rtype, out)
        self.c.check(st == expect, "%s %s -> %d (expected %d): %s" % (method, path, st, expect, out[:300]))
        return parsed

    def verify(self, method, pattern, status, rtype, body):
        self.seen.setdefault((method, pattern), set()).add(status)
        what = "%s %s %d" % (method, pattern, status)
        resp = self.op(method, pattern)["responses"].get(str(status))
        if not self.c.check(resp is not None, "%s: status not documented" % what):
            return None
        content = resp.get("content")
        if not content:
            self.c.check(not body, "%s: a body, where the contract has none: %r" % (what, body[:100]))
            return None
        mtype = rtype.split(";")[0].strip()
        if not self.c.check(mtype in content, "%s: Content-Type %s not among %s" % (what, mtype, list(content))):
            return None
        if mtype != "application/json":
            return body
        parsed = json.loads(body)
        errs = schema_errors(content[mtype]["schema"], parsed)
        self.c.check(not errs, "%s: the body breaks the schema:\n  %s\n  body: %s" % (
            what, "\n  ".join(errs[:12]), body[:600]))
        return parsed

    def events(self, sid, after=None):
        """Reads the study's stream to its end; checks each event's data
        against the schema x-events gives for its type; [(id, type)]."""
        pattern = "/api/v1/studies/{id}/events"
        req = urllib.request.Request(self.hp.url + pattern.format(id=sid))
        if after is not None:
            req.add_header("Last-Event-ID", str(after))
        out = []
        with urllib.request.urlopen(req, timeout=60) as r:
            self.verify("GET", pattern, r.status, r.headers.get("Content-Type", ""), b"")
            kinds = self.op("GET", pattern)["responses"]["200"]["content"]["text/event-stream"]["x-events"]
            cur = {}
            for line in r:
                line = line.decode().rstrip("\n")
                if line:
                    if not line.startswith(":"):
                        k, _, v = line.partition(": ")
                        cur[k] = v
                    continue
                if "event" in cur:
                    typ, data = cur["event"], json.loads(cur["data"])
                    out.append((int(cur["id"]), typ))
                    if self.c.check(typ in kinds, "event %s is documented in x-events" % typ):
                        errs = schema_errors(kinds[typ], data)
                        self.c.check(not errs, "event %s: the data breaks its schema: %s\n  data: %s" % (
                            typ, errs[:8], cur["data"][:400]))
                cur = {}
        return out


# ---- inputs ----------------------------------------------------------------
def multipart(fields):
    boundary = "hpoconf%08x" % random.getrandbits(32)
    out = []
    for name, value, filename in fields:
        value = value.encode() if isinstance(value, str) else value
        head = '--%s\r\nContent-Disposition: form-data; name="%s"' % (boundary, name)
        if filename is not None:
            head += '; filename="%s"\r\nContent-Type: application/octet-stream' % filename
        out.append(head.encode() + b"\r\n\r\n" + value + b"\r\n")
    out.append(("--%s--\r\n" % boundary).encode())
    return b"".join(out), "multipart/form-data; boundary=" + boundary


def npy(descr, shape, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % s for s in shape) if len(shape) > 1 else "%d," % shape[0])
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


CSV = "a,b,label\n" + "".join("%d.5,%d,%s\n" % (i, i % 5, ("setosa", "versicolor", "virginica")[i % 3])
                               for i in range(60))  # class labels by name
EXTERNAL = {"name": "conformance-external", "description": "ask/tell",
            "objective": {"direction": "minimize"},
            "space": {"x": {"type": "float", "low": -1, "high": 1},
                      "k": {"type": "choice", "values": ["a", "b"]}},
            "tuner": {"algorithm": "random", "seed": 3, "max_trials": 10}}
EMBEDDED = {"name": "conformance-embedded", "model": {"template": "mlp"},  # a template's own space
            "dataset": {"name": "fashion-mnist", "limit": 200},
            "training": {"max_epochs": 1, "batch_size": 50},
            "tuner": {"seed": 4, "max_trials": 2}}


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--devices", "cpu:1", "--token", TOKEN]).start()
    try:
        doc = load_contract(hp)
        if doc is None:
            sys.exit(77)
        cl = Client(hp, doc, c)
        S, T, M, D = "/api/v1/studies", "/api/v1/trials", "/api/v1/models", "/api/v1/datasets"
        t0 = time.time()

        # the embedded study first: it trains while the rest runs
        emb = cl.call("POST", S, 201, EMBEDDED)
        eid = emb["id"]

        cl.call("GET", "/healthz", 200)
        cl.call("GET", "/metrics", 200)
        cl.call("GET", "/api/v1/openapi.yaml", 200)
        cl.call("GET", "/", 200)
        cl.call("GET", "/assets/{file}", 200, file="app.js")
        cl.call("GET", "/assets/{file}", 404, file="nothing.js")
        cl.call("GET", "/api/v1/nodes", 200)  # this node, on SQLite
        cl.call("GET", "/api/v1/nodes", 400, query="?limit=0")

        # datasets
        body, ctype = multipart([("name", "conf-csv", None), ("format", "csv", None),
                                 ("label_column", "label", None), ("file", CSV, "tiny.csv")])
        csv_id = cl.call("POST", D, 201, raw=body, ctype=ctype)["id"]
        # a second embedded study, on the csv: a model that predicts labels by name
        cid = cl.call("POST", S, 201, {"name": "conformance-csv", "model": {"template": "mlp"},
                                       "dataset": {"id": csv_id}, "training": {"max_epochs": 1, "batch_size": 16},
                                       "tuner": {"seed": 5, "max_trials": 1}})["id"]
        cl.call("POST", D, 409, raw=body, ctype=ctype)
        n, f = 40, 6
        x = npy("|u1", (n, f), bytes((i * 37) % 256 for i in range(n * f)))
        y = npy("<i4", (n,), struct.pack("<%di" % n, *[i % 2 for i in range(n)]))
        body, ctype = multipart([("name", "conf-npy", None), ("format", "npy", None),
                                 ("x", x, "x.npy"), ("y", y, "y.npy")])
        npy_id = cl.call("POST", D, 201, raw=body, ctype=ctype)["id"]
        body, ctype = multipart([("name", "conf-bad", None), ("format", "csv", None),
                                 ("label_column", "nope", None), ("file", CSV, "tiny.csv")])
        cl.call("POST", D, 400, raw=body, ctype=ctype)
        listed = cl.call("GET", D, 200)
        c.check(len(listed["datasets"]) == 3, "3 datasets listed (builtin + 2)")
        cl.call("GET", D + "/{id}", 200, id=csv_id)
        cl.call("GET", D + "/{id}", 200, id=npy_id)
        cl.call("DELETE", D + "/{id}", 204, id=npy_id)
        cl.call("GET", D + "/{id}", 404, id=npy_id)
        cl.call("DELETE", D + "/{id}", 404, id=npy_id)

        # an external study: ask / report / tell
        cl.call("POST", S, 400, {"space": {"x": {"type": "float", "low": 1, "high": 0}}})
        sid = cl.call("POST", S, 201, EXTERNAL)["id"]
        cl.call("GET", S + "/{id}", 200, id=sid)
        cl.call("GET", S + "/{id}", 404, id=sid + 1000)
        trials = []
        for i in range(4):
            a = cl.call("POST", S + "/{id}/ask", 200, body={} if i == 0 else None, id=sid)
            trials.append(a["trial_id"])
        cl.call("POST", S + "/{id}/ask", 400, {"n": 2}, id=sid)
        cl.call("POST", T + "/{id}/report", 200, {"step": 1, "value": 0.5}, id=trials[0])
        cl.call("POST", T + "/{id}/report", 400, {"step": -1, "value": 0.5}, id=trials[0])
        cl.call("POST", T + "/{id}/tell", 200, {"value": 0.25}, id=trials[0])
        cl.call("POST", T + "/{id}/tell", 409, {"value": 0.25}, id=trials[0])
        cl.call("POST", T + "/{id}/tell", 200, {"repeats": [0.5, 0.7]}, id=trials[1])
        cl.call("POST", T + "/{id}/tell", 200, {"state": "failed", "error": "boom"}, id=trials[2])
        cl.call("GET", T + "/{id}", 200, id=trials[0])
        cl.call("GET", T + "/{id}", 200, id=trials[3])
        cl.call("GET", T + "/{id}", 404, id=trials[3] + 1000)
        cl.call("GET", S + "/{id}/trials", 200, id=sid)
        cl.call("GET", S + "/{id}/trials", 200, query="?state=complete&order=value&desc=true&limit=2", id=sid)
        cl.call("GET", S + "/{id}/trials", 400, query="?state=nope", id=sid)
        cl.call("GET", S + "/{id}/best", 200, query="?top_n=3", id=sid)
        cl.call("GET", S + "/{id}/best", 400, query="?top_n=0", id=sid)
        cl.call("GET", S + "/{id}/importance", 200, id=sid)
        cl.call("POST", S + "/{id}/refits", 409, id=sid)  # an external study has no models
        cl.call("POST", S + "/{id}/pause", 200, id=sid)
        cl.call("POST", S + "/{id}/ask", 409, id=sid)
        cl.call("POST", S + "/{id}/pause", 409, id=sid)
        cl.call("POST", S + "/{id}/resume", 400, {"now": True}, id=sid)
        cl.call("POST", S + "/{id}/resume", 200, id=sid)
        cl.call("POST", S + "/{id}/cancel", 200, {}, id=sid)
        cl.call("POST", T + "/{id}/report", 409, {"step": 2, "value": 0.5}, id=trials[3])
        cl.call("GET", S, 200)
        ext_events = cl.events(sid)
        # the trial in flight is cancelled with the study, with its event
        c.check([t for _, t in ext_events] == ["study_created", "study_paused", "study_resumed", "study_cancelled",
                                              "trial_cancelled"],
                "the external study's events: %s" % ext_events)

        # user_attrs and notes, get-or-create by name (a study of its own: the
        # external study's events above stay as they are)
        ann = dict(EXTERNAL, name="conformance-annotated", user_attrs={"team": "a"}, note="n")
        aid = cl.call("POST", S, 201, dict(ann, load_if_exists=True))["id"]
        c.check(cl.call("POST", S, 200, dict(ann, load_if_exists=True))["id"] == aid, "load_if_exists: the same study")
        cl.call("POST", S, 409, dict(ann, load_if_exists=True, tuner=dict(EXTERNAL["tuner"], max_trials=11)))
        cl.call("PATCH", S + "/{id}", 200, {"user_attrs": {"team": None, "k": [1, 2]}, "note": "changed"}, id=aid)
        cl.call("PATCH", S + "/{id}", 400, {"nope": 1}, id=aid)
        cl.call("PATCH", S + "/{id}", 413, {"note": "x" * 65537}, id=aid)
        cl.call("PATCH", S + "/{id}", 404, {"note": "x"}, id=aid + 1000)
        at = cl.call("POST", S + "/{id}/ask", 200, id=aid)["trial_id"]
        cl.call("PATCH", T + "/{id}", 200, {"user_attrs": {"host": "h"}, "note": None}, id=at)
        cl.call("PATCH", T + "/{id}", 400, {"user_attrs": []}, id=at)
        cl.call("PATCH", T + "/{id}", 413, {"user_attrs": {"x": "y" * 70000}}, id=at)
        cl.call("PATCH", T + "/{id}", 404, {"note": "x"}, id=at + 1000)
        cl.call("POST", T + "/{id}/report", 200, {"step": 0, "value": 1.0, "user_attrs": {"s": 1}}, id=at)
        cl.call("POST", T + "/{id}/tell", 200, {"value": 1.0, "user_attrs": {"t": True}}, id=at)
        cl.call("GET", T + "/{id}", 200, id=at)
        cl.call("GET", S + "/{id}/trials", 200, id=aid)
        cl.call("POST", S + "/{id}/cancel", 200, id=aid)
        types = [t for _, t in cl.events(aid)]
        c.check(types.count("study_updated") == 1 and types.count("trial_updated") == 3,
                "the annotated study's events: %s" % types)

        # several objectives with a constraint, the bayesian tuner and MO-ASHA: reports with values
        mo = cl.call("POST", S, 201, {"name": "conformance-mo", "space": EXTERNAL["space"],
                                      "objectives": [{"metric": "err"}, {"metric": "size", "direction": "maximize"}],
                                      "constraints": [{"metric": "cost", "max": 1}],
                                      "tuner": {"algorithm": "bayesian", "seed": 2, "n_startup_trials": 1,
                                                "pruner": {"algorithm": "asha"}}})["id"]
        for i in range(3):
            mt = cl.call("POST", S + "/{id}/ask", 200, id=mo)["trial_id"]
            cl.call("POST", T + "/{id}/report", 200, {"step": 1, "values": [0.5 + i, 2.0 - i]}, id=mt)
            cl.call("POST", T + "/{id}/report", 400, {"step": 2, "value": 0.5}, id=mt)
            cl.call("POST", T + "/{id}/tell", 200, {"values": [0.4 + i, 2.0 - i], "metrics": {"cost": 0.5 * i}}, id=mt)
        cl.call("GET", T + "/{id}", 200, id=mt)
        cl.call("GET", S + "/{id}/best", 200, id=mo)
        mo_doc = cl.call("GET", S + "/{id}/export", 200, id=mo)  # its trials' reports hold vectors
        c.check(all("values" in t.get("reports", {}).get("1", {}) for t in mo_doc["trials"]),
                "the export's reports hold the vectors: %s" % [t.get("reports") for t in mo_doc["trials"]])
        cl.call("POST", S + "/{id}/cancel", 200, id=mo)

        # study management: enqueue, add a finished trial (then cancel: its stream ends)
        mid = cl.call("POST", S, 201, dict(EXTERNAL, name="conformance-manage"))["id"]
        q = cl.call("POST", S + "/{id}/enqueue", 201, {"params": {"x": 0.5}}, id=mid)
        cl.call("POST", S + "/{id}/enqueue", 400, {"params": {"x": 5}}, id=mid)
        cl.call("POST", S + "/{id}/trials", 201, {"params": {"x": 0.1, "k": "a"}, "value": 0.3,
                                                  "intermediate_values": {"1": 0.4}}, id=mid)
        cl.call("POST", S + "/{id}/trials", 400, {"params": {"x": 0.1}, "value": 0.3}, id=mid)
        a = cl.call("POST", S + "/{id}/ask", 200, id=mid)
        c.check(a["trial_id"] == q["id"] and a["params"]["x"] == 0.5, "the ask hands out the enqueued trial: %s" % a)
        cl.call("POST", S + "/{id}/cancel", 200, id=mid)
        cl.call("POST", S + "/{id}/enqueue", 409, {"params": {}}, id=mid)
        mev = [t for _, t in cl.events(mid)]
        c.check(mev == ["study_created", "trial_enqueued", "trial_added", "study_cancelled", "trial_cancelled"],
                "the managed study's events: %s" % mev)
        # export, import, copy; a warm start from the managed study
        exported = cl.call("GET", S + "/{id}/export", 200, id=mid)
        cl.call("GET", S + "/{id}/export", 404, id=mid + 1000)
        imp = cl.call("POST", S + "/import", 201, dict(exported, name="conformance-imported"))
        c.check(imp["imported"] == 2 and imp["skipped"] == 0 and imp["study"]["n_trials"] == 2,
                "the import holds the 2 finished trials: %s" % imp)
        cl.call("POST", S + "/import", 400, {"format": "nope", "study": {}, "trials": []})
        cl.call("POST", S + "/{id}/copy", 201, {"name": "conformance-copy"}, id=mid)
        cl.call("POST", S + "/{id}/copy", 404, id=mid + 1000)
        warm = cl.call("POST", S, 201, dict(EXTERNAL, name="conformance-warm", tuner={"algorithm": "tpe", "seed": 1},
                                            warm_start={"study_ids": [mid]}))
        c.check(warm.get("warm_start") == {"study_ids": [mid], "trials_used": 1, "trials_skipped": 0},
                "the warm start used the 1 complete trial: %s" % warm.get("warm_start"))
        cl.call("GET", S + "/{id}", 200, id=warm["id"])
        cl.call("POST", S, 400, dict(EXTERNAL, tuner={"algorithm": "tpe"}, warm_start={"study_ids": [mid + 1000]}))

        # the embedded study: trials, a refit, a trial model, an ensemble, predictions
        cl.call("POST", S + "/{id}/ask", 409, id=eid)
        wait_for(lambda: hp.ok("GET", S + "/%d" % eid)["state"] == "complete", 120)
        got = cl.call("GET", S + "/{id}", 200, id=eid)
        c.check(got["n_trials"] == 2 and got["best"] is not None, "the embedded study ran its 2 trials")
        trial_params = set(cl.call("GET", S + "/{id}/trials", 200, id=eid)["trials"][0]["params"])
        c.check("space" not in got["definition"] and set(got.get("space", {})) >= trial_params and trial_params,
                "a template-only study shows the space its tuner searches (%s)" % sorted(got.get("space", {})))
        ets = cl.call("GET", S + "/{id}/trials", 200, id=eid)["trials"]
        cl.call("GET", T + "/{id}", 200, id=ets[0]["id"])
        cl.call("GET", S + "/{id}/best", 200, id=eid)
        cl.call("GET", S + "/{id}/importance", 200, id=eid)
        best = min((t for t in ets if t["state"] == "complete"), key=lambda t: t["value"])
        refit = cl.call("POST", S + "/{id}/refits", 201, {"top_n": 1, "epochs_factor": 1.0}, id=eid)["refits"][0]
        cl.call("POST", S + "/{id}/refits", 400, {"top_n": 0}, id=eid)
        tm = cl.call("POST", T + "/{id}/model", 201, id=best["id"])
        cl.call("POST", T + "/{id}/model", 404, id=ets[-1]["id"] + 1000)
        for m in (refit, tm):
            wait_for(lambda: hp.ok("GET", M + "/%d" % m["id"])["state"] in ("complete", "failed"), 120)
            c.check(cl.call("GET", M + "/{id}", 200, id=m["id"])["state"] == "complete", "model %d built" % m["id"])
        ens = cl.call("POST", S + "/{id}/ensembles", 201, {"members": [refit["id"], tm["id"]], "method": "mean"},
                      id=eid)
        cl.call("POST", S + "/{id}/ensembles", 400, {"method": "vote"}, id=eid)
        wait_for(lambda: hp.ok("GET", M + "/%d" % ens["id"])["state"] in ("complete", "failed"), 120)
        c.check(cl.call("GET", M + "/{id}", 200, id=ens["id"])["state"] == "complete", "the ensemble is built")
        cl.call("GET", M + "/{id}", 404, id=ens["id"] + 1000)
        cl.call("GET", S + "/{id}/refits", 200, id=eid)
        cl.call("GET", S + "/{id}/models", 200, id=eid)
        cl.call("GET", S + "/{id}/ensembles", 200, id=eid)
        w = cl.call("GET", M + "/{id}/weights", 200, id=refit["id"])
        c.check(isinstance(w, bytes) and len(w) > 8, "weights: %d bytes" % len(w or b""))
        rows = [[(i * 13 + k) % 256 for k in range(784)] for i in range(3)]
        for m in (refit, ens):
            p = cl.call("POST", M + "/{id}/predict", 200, {"inputs": rows}, id=m["id"])
            c.check(len(p["predictions"]) == 3 and len(p["classes"]) == 3, "3 predictions of model %d" % m["id"])
        cl.call("POST", M + "/{id}/predict", 400, {"inputs": [[1, 2]]}, id=refit["id"])
        cl.call("GET", M + "/{id}/weights", 409, id=ens["id"])  # an ensemble has no weights of its own
        types = [t for _, t in cl.events(eid)]  # the search and the models made after it
        c.check({"study_created", "trial_started", "epoch", "trial_complete", "study_complete", "model_queued",
                 "model_started", "model_epoch", "model_complete"} <= set(types), "the embedded study's events: %s" % types)
        c.check(cl.events(sid, after=ext_events[0][0]) == ext_events[1:], "Last-Event-ID: the later events only")
        c.check(cl.events(sid, after=ext_events[-1][0]) == [] and 204 in cl.seen[("GET", S + "/{id}/events")],
                "Last-Event-ID of a finished study's last event: 204")

        wait_for(lambda: hp.ok("GET", S + "/%d" % cid)["state"] == "complete", 120)
        ct = cl.call("GET", S + "/{id}/trials", 200, id=cid)["trials"][0]
        cm = cl.call("POST", T + "/{id}/model", 201, {}, id=ct["id"])
        wait_for(lambda: hp.ok("GET", M + "/%d" % cm["id"])["state"] in ("complete", "failed"), 120)
        p = cl.call("POST", M + "/{id}/predict", 200, {"inputs": [[1.5, 1], [40.5, 0]]}, id=cm["id"])
        c.check(set(p.get("labels", [])) <= {"setosa", "versicolor", "virginica"} and len(p.get("labels", [])) == 2,
                "predictions name their classes: %s" % p.get("labels"))

        # deletion last
        cl.call("DELETE", S + "/{id}", 204, id=sid)
        cl.call("DELETE", S + "/{id}", 404, id=sid)
        cl.call("GET", S + "/{id}/events", 404, id=sid)

        # every operation answered with a 2xx at least once
        for path, item in doc["paths"].items():
            for method in item:
                if method in ("get", "post", "put", "patch", "delete"):
                    ok = {s for s in cl.seen.get((method.upper(), path), ()) if 200 <= s < 300}
                    c.check(ok, "%s %s was called with a 2xx answer (saw %s)" % (
                        method.upper(), path, sorted(cl.seen.get((method.upper(), path), ()))))
        print("%d operations, %d answers checked in %.1f s" % (len(cl.seen), c.passed + c.failed, time.time() - t0))
        c.check(hp.stop() == 0, "hpod stops cleanly")
    finally:
        if c.failed:
            print(hp.log_tail(30))
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
