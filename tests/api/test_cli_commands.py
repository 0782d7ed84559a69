"""The `hpo` commands beyond the ask/tell loop against a real hpod (with a
token): `CMD --help` for every command (exit 0, no server needed), the bash
completion (cli/hpo-completion.bash offers each command's flags as its
--help states them), --json/--field/--quiet, study pause/resume/cancel,
study create --load-if-exists, study/trial attr and note,
trial, importance, events (JSON lines; --after, --timeout, the end of the
study, Ctrl-C -> 130), dataset list/get/upload (multipart: csv, npy, idx)/
delete; usage errors exit 1, refused calls 2 with the JSON error on
stderr. External studies only: a few seconds."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from hpod import Checks, Hpod, parse_args
from test_datasets import make_csv, make_idx, make_npy

TOKEN = "cli-s3cret"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPLETION = os.path.join(ROOT, "cli", "hpo-completion.bash")


def real_tokens(text):
    """The reals of a JSON text (numbers with a fraction or an exponent, outside strings)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    return [m for m in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", bare) if re.search(r"[.eE]", m)]


def complete(words):
    """What the completion offers for `words` (the last one being typed)."""
    script = ('source "%s"; COMP_WORDS=(%s); COMP_CWORD=%d; COMP_LINE="${COMP_WORDS[*]}"; _hpo; '
              'printf "%%s\\n" "${COMPREPLY[@]}"' % (COMPLETION, " ".join("'%s'" % w for w in words), len(words) - 1))
    r = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, timeout=10)
    return set(r.stdout.split())


def main():
    args = parse_args()
    if not os.access(args.hpo, os.X_OK):
        print("SKIP: no hpo client at %s" % args.hpo)
        sys.exit(77)
    c = Checks()
    tmp = tempfile.mkdtemp(prefix="hpo-cli-cmd-")
    offline = dict(os.environ, HPO_URL="http://127.0.0.1:1", HPO_TOKEN=TOKEN)

    def hpo(*argv, stdin=None, env_=None, timeout=60):
        r = subprocess.run([args.hpo] + list(argv), input=stdin, capture_output=True, text=True,
                           env=env_ or env, timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    env = offline
    # ---- every command's --help, without a server; the completion agrees
    rc, top, _ = hpo("--help")
    cmds = [l[2:].split(" [")[0] for l in top.split("Commands:\n")[1].split("\n\n")[0].splitlines()
            if l.startswith("  ") and not l.startswith("   ")]
    names = [" ".join(w for w in cmd.split() if re.fullmatch(r"[a-z]+(-[a-z]+)*", w)) for cmd in cmds]
    c.check(rc == 0 and len(names) >= 25 and "study pause" in names and "dataset upload" in names
            and "events" in names and "weights" in names, "hpo --help lists the commands (%d)" % len(names))
    r = subprocess.run(["bash", "--norc", "-c", 'source "%s" && complete -p hpo' % COMPLETION],
                       capture_output=True, text=True, timeout=10)
    c.check(r.returncode == 0 and "-F _hpo hpo" in r.stdout, "the completion file registers _hpo for hpo")
    c.check(complete(["hpo", ""]) >= {n.split()[0] for n in names}, "completion: every command")
    c.check(complete(["hpo", "study", ""]) == {n.split()[1] for n in names if n.startswith("study ")},
            "completion: study's subcommands")
    c.check(complete(["hpo", "dataset", "up"]) == {"upload"}, "completion: a prefix")
    c.check(complete(["hpo", "trials", "1", "--state", "pr"]) == {"pruned"}, "completion: a flag's values")
    for name in names:
        rc, out, err = hpo(*name.split(), "--help")
        usage = out.splitlines()[0] if out else ""
        ok = rc == 0 and usage.startswith("usage: hpo %s" % name) and "--quiet" in out and "Exit codes" in out
        c.check(ok, "hpo %s --help: its usage, exit 0 (%d %r)" % (name, rc, err))
        flags = set(re.findall(r"--[a-z][a-z-]*", usage.split(" [--json|")[0]))
        offered = {w for w in complete(["hpo"] + name.split() + ["--"])}
        c.check(offered == flags | {"--json", "--field", "--quiet", "--help"},
                "completion of `hpo %s --`: %s" % (name, sorted(offered ^ (flags | {"--json", "--field", "--quiet", "--help"}))))
    rc, out, _ = hpo("study", "--help")
    c.check(rc == 0 and "study pause ID" in out and "study cancel ID" in out, "hpo study --help lists its subcommands")
    rc, out, _ = hpo("-h", "ask")
    c.check(rc == 0 and "--field" in out, "hpo -h: the general help")
    rc, out, _ = hpo("ask", "--help", "--json")
    c.check(rc == 0 and out.startswith("usage: hpo ask ID"), "--help wins over the other flags")

    # ---- usage errors: exit 1, before any call
    for argv in [("study", "pause"), ("study", "resume", "x"), ("study", "cancel", "1", "2"), ("study", "frob"),
                 ("trial",), ("trial", "0"), ("importance",), ("events",), ("events", "1", "--after", "-1"),
                 ("events", "1", "--timeout", "0"), ("events", "1", "--after"), ("weights",), ("weights", "1", "-o"),
                 ("dataset",), ("dataset", "frob"), ("dataset", "list", "x"), ("dataset", "get"),
                 ("dataset", "upload"), ("dataset", "upload", "n"), ("dataset", "upload", "n", "a.csv", "--format", "bmp"),
                 ("dataset", "upload", "n", "a", "b", "--format", "csv"), ("dataset", "upload", "n", "a", "b", "c"),
                 ("dataset", "upload", "n", os.path.join(tmp, "missing.csv")), ("dataset", "upload", "n", "f", "--bogus"),
                 ("ask", "1", "--params-only"), ("ask", "1", "--field"), ("study", "list", "--quiet", "--json"),
                 ("best", "1", "--quiet", "--field", "trials")]:
        rc, out, err = hpo(*argv)
        c.check(rc == 1 and out == "" and err.startswith("hpo: "), "usage error -> 1: hpo %s (%d %r)" % (" ".join(argv), rc, err))

    hp = Hpod(args.hpod, args=["--token", TOKEN]).start()
    env = dict(os.environ, HPO_URL=hp.url, HPO_TOKEN=TOKEN)
    try:
        # ---- an external study: ask/tell with --field and --quiet
        rc, sid, _ = hpo("study", "create", "-", stdin=json.dumps(
            {"name": "cli-cmds", "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
                                           "width": {"type": "int", "low": 1, "high": 64}},
             "tuner": {"algorithm": "random", "seed": 3, "max_trials": 30,
                       "pruner": {"algorithm": "median", "n_startup_trials": 1}}}))
        sid = sid.strip()
        c.check(rc == 0 and sid.isdigit(), "study create")
        rc, out, _ = hpo("--field", "id", "study", "get", sid)
        c.check(rc == 0 and out == sid + "\n", "output flags before the command")
        trials = []
        for k in range(4):
            rc, out, _ = hpo("ask", sid, "--field", "trial_id", "--field", "params.width")
            tid, width = out.split()
            trials.append(tid)
            rc2, out2, _ = hpo("report", tid, "0", "1.0", "--quiet")
            rc3, out3, _ = hpo("tell", tid, str(float(width)), "-q")
            c.check(rc == 0 and rc2 == 0 and rc3 == 0 and out2 == "" and out3 == "", "ask --field, report/tell --quiet")
        rc, out, _ = hpo("ask", sid, "--quiet")
        c.check(rc == 0 and out == "", "ask --quiet prints nothing")
        rc, out, _ = hpo("trials", sid, "--state", "running", "--field", "trials.0.trial_id")
        quiet_trial = out.strip()
        c.check(rc == 0 and quiet_trial.isdigit(), "--field with an array index")
        rc, out, _ = hpo("report", quiet_trial, "0", "1000", "--quiet")
        c.check(rc == 3 and out == "", "report --quiet: exit 3 says prune")
        rc, out, _ = hpo("report", quiet_trial, "1", "1000", "--json")
        c.check(rc == 3 and json.loads(out) == {"prune": True}, "report --json: the answer, exit 3")
        hpo("tell", quiet_trial, "--state", "pruned")

        # ---- trial, importance
        rc, out, _ = hpo("trial", trials[0])
        t = json.loads(out)
        c.check(rc == 0 and t["trial_id"] == int(trials[0]) and t["state"] == "complete" and len(t["intermediate"]) == 1
                and out.count("\n") > 3, "trial ID: the trial as indented JSON")
        rc, out, _ = hpo("trial", trials[0], "--json")
        c.check(rc == 0 and out.count("\n") == 1 and json.loads(out) == t, "trial --json: one line")
        # reals as hpod sends them, in their shortest round-trip form (jansson alone writes lr as %.17g)
        rc2, lr_text, _ = hpo("trial", trials[0], "--field", "params.lr")
        export = os.path.join(tmp, "export.json")
        rc3, _, _ = hpo("study", "export", sid, "-o", export)
        with open(export) as f:
            export_text = f.read()
        noisy = [x for text in (out, lr_text, export_text) for x in real_tokens(text) if len(x) > len(repr(float(x)))]
        c.check(rc2 == 0 and rc3 == 0 and float(lr_text) == t["params"]["lr"] and lr_text.strip() == repr(t["params"]["lr"])
                and not noisy and real_tokens(export_text),
                "--json, --field and study export -o write reals in shortest form (%s; longer than needed: %s)"
                % (lr_text.strip(), noisy[:3]))
        rc, _, err = hpo("trial", "99999")
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "not_found", "trial of an unknown id -> 2, JSON error")
        rc, out, _ = hpo("importance", sid)
        lines = out.splitlines()
        c.check(rc == 0 and lines[0].split() == ["PARAM", "IMPORTANCE"] and {l.split()[0] for l in lines[1:3]} == {"lr", "width"}
                and "4 complete trials" in lines[-1], "importance: a table, most important first (%r)" % out)
        rc, out, _ = hpo("importance", sid, "--json")
        imp = json.loads(out)
        c.check(rc == 0 and imp["n_trials"] == 4 and len(imp["importance"]) == 2, "importance --json")
        c.check(lines[1].split()[0] == imp["importance"][0]["param"], "importance: the order of the answer")
        rc, _, err = hpo("importance", "99999")
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "not_found", "importance of an unknown study -> 2")

        # ---- study create --load-if-exists; study/trial attr and note (a study of their own)
        spec = json.dumps({"name": "cli-attrs", "space": {"x": {"type": "float", "low": 0, "high": 1}},
                           "tuner": {"seed": 4}})
        rc, aid, _ = hpo("study", "create", "-", "--load-if-exists", stdin=spec)
        rc2, again, _ = hpo("study", "create", "--load-if-exists", "-", stdin=spec)
        c.check(rc == 0 and rc2 == 0 and aid.strip().isdigit() and again == aid, "study create --load-if-exists: the same id")
        aid = aid.strip()
        rc, out, err = hpo("study", "create", "-", "--load-if-exists",
                           stdin=spec.replace('"high": 1', '"high": 2'))
        c.check(rc == 2 and out == "" and json.loads(err)["error"]["field"] == "space.x.high",
                "--load-if-exists with another definition -> 2 naming the field (%r)" % err)
        rc, out, _ = hpo("study", "attr", aid, "team=vision", "budget=3", "tags=[1,2]", 'quoted="7"')
        c.check(rc == 0 and json.loads(out) == {"team": "vision", "budget": 3, "tags": [1, 2], "quoted": "7"},
                "study attr KEY=VALUE: JSON when it parses, else a string (%r)" % out)
        rc, out, _ = hpo("study", "attr", aid, "budget=null")
        c.check(rc == 0 and json.loads(out) == {"team": "vision", "tags": [1, 2], "quoted": "7"}, "study attr k=null deletes")
        rc, out, _ = hpo("study", "attr", aid, "--field", "user_attrs.team")
        c.check(rc == 0 and out == "vision\n", "study attr ID: the current ones (--field)")
        rc, out, _ = hpo("study", "note", aid, "a first note")
        c.check(rc == 0 and out == "a first note\n", "study note ID TEXT")
        rc, out, _ = hpo("study", "note", aid, "-", stdin="from stdin\nline 2\n")
        rc2, out2, _ = hpo("study", "note", aid)
        c.check(rc == 0 and rc2 == 0 and out2 == "from stdin\nline 2\n", "study note ID - reads stdin; ID prints it")
        rc, out, _ = hpo("study", "note", aid, "x", "--json")
        c.check(rc == 0 and json.loads(out)["note"] == "x" and json.loads(out)["id"] == int(aid), "study note --json: the study")
        rc, _, err = hpo("study", "note", aid, "-", stdin="n" * 70000)
        c.check(rc == 1 and "64" in err, "a note over 64 KiB on stdin -> 1")
        rc, _, err = hpo("study", "attr", aid, "k" * 300 + "=1")
        c.check(rc == 2 and json.loads(err)["error"]["field"] == "user_attrs", "study attr with a long key -> 2")
        rc, out, _ = hpo("ask", aid, "--field", "trial_id")
        atid = out.strip()
        rc, out, _ = hpo("trial", "attr", atid, "host=gpu-1")
        c.check(rc == 0 and json.loads(out) == {"host": "gpu-1"}, "trial attr")
        rc, out, _ = hpo("trial", "note", atid, "looks good")
        rc2, out2, _ = hpo("trial", atid, "--field", "note", "--field", "user_attrs.host")
        c.check(rc == 0 and out == "looks good\n" and out2 == "looks good\ngpu-1\n", "trial note; trial shows both")
        rc, _, err = hpo("trial", "attr", "99999", "a=1")
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "not_found", "trial attr of an unknown trial -> 2")
        for argv in [("study", "attr"), ("study", "attr", "x"), ("study", "attr", aid, "novalue"), ("study", "attr", aid, "=1"),
                     ("study", "note"), ("study", "note", aid, "a", "b"), ("trial", "attr"), ("trial", "note", "0", "t"),
                     ("study", "create", "-", "--load")]:
            rc, out, err = hpo(*argv)
            c.check(rc == 1 and out == "" and err.startswith("hpo: "), "usage error -> 1: hpo %s (%d %r)" % (" ".join(argv), rc, err))
        c.check(complete(["hpo", "trial", ""]) == {"attr", "note"} and complete(["hpo", "trial", "attr", "--"]) >= {"--json"},
                "completion: trial's attr and note")

        # ---- pause / resume and the events they make
        rc, out, _ = hpo("study", "pause", sid)
        c.check(rc == 0 and out == "study %s: paused\n" % sid, "study pause")
        rc, _, err = hpo("ask", sid)
        c.check(rc == 2 and json.loads(err)["error"]["field"] == "state", "ask on a paused study -> 2 (409)")
        rc, _, err = hpo("study", "pause", sid)
        c.check(rc == 2 and json.loads(err)["error"]["code"], "pausing a paused study -> 2")
        rc, out, _ = hpo("study", "resume", sid, "--json")
        c.check(rc == 0 and json.loads(out)["state"] == "running" and out.count("\n") == 1, "study resume --json")
        rc, _, err = hpo("study", "resume", "99999")
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "not_found", "resume of an unknown study -> 2")
        t0 = time.time()
        rc, out, err = hpo("events", sid, "--timeout", "1")
        took = time.time() - t0
        evs = [json.loads(l) for l in out.splitlines()]
        kinds = [e["event"] for e in evs]  # an external study's trials make no events
        c.check(rc == 0 and kinds == ["study_created", "study_paused", "study_resumed"],
                "events --timeout 1: the study's events as JSON lines, exit 0 (%d %s %r)" % (rc, kinds, err))
        c.check(all(set(e) == {"id", "event", "data"} and isinstance(e["data"], dict) for e in evs)
                and [e["id"] for e in evs] == sorted({e["id"] for e in evs}), "events: {id, event, data}, ids increasing")
        c.check(0.9 <= took < 30, "events --timeout 1 ends after the timeout (%.1f s)" % took)
        mid = evs[len(evs) // 2]["id"]
        rc, out, _ = hpo("events", sid, "--after", str(mid), "--timeout", "0.5")
        c.check(rc == 0 and [json.loads(l)["id"] for l in out.splitlines()] == [e["id"] for e in evs if e["id"] > mid],
                "events --after N: only the later ones")
        rc, out, _ = hpo("events", sid, "--timeout", "0.5", "--field", "event")
        c.check(rc == 0 and out.splitlines() == kinds, "events --field event: one value a line")
        rc, _, err = hpo("events", "99999", "--timeout", "5")
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "not_found", "events of an unknown study -> 2")

        # ---- events follows a live study until it is cancelled; Ctrl-C -> 130
        ev = subprocess.Popen([args.hpo, "events", sid, "--after", str(evs[-1]["id"])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sig = subprocess.Popen([args.hpo, "events", sid, "--after", str(evs[-1]["id"])], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        hpo("study", "pause", sid, "--quiet")
        time.sleep(0.3)
        sig.send_signal(signal.SIGINT)
        out_s, err_s = sig.communicate(timeout=15)
        c.check(sig.returncode == 130 and "interrupted" in err_s and "study_paused" in out_s,
                "events: the live event, then Ctrl-C -> 130 (%d %r)" % (sig.returncode, err_s))
        rc, out, _ = hpo("study", "cancel", sid)
        c.check(rc == 0 and out == "study %s: cancelled\n" % sid, "study cancel")
        out, err = ev.communicate(timeout=15)
        live = [json.loads(l)["event"] for l in out.splitlines()]
        c.check(ev.returncode == 0 and live == ["study_paused", "study_cancelled"],
                "events without --timeout: live events, ends with the study (%d %s %r)" % (ev.returncode, live, err))
        rc, _, err = hpo("study", "cancel", sid)
        c.check(rc == 2 and json.loads(err)["error"]["code"], "cancelling a cancelled study -> 2")
        rc, out, _ = hpo("study", "resume", sid, "--quiet")
        c.check(rc == 2 and out == "", "--quiet: a refused call still exits 2")

        # ---- events of a study deleted while it is followed: the stream ends
        # at once, and without the study's final event that is no success
        gone = hpo("study", "create", "-", stdin=json.dumps(
            {"name": "to-delete", "space": {"x": {"type": "float", "low": 0, "high": 1}}}))[1].strip()
        ev = subprocess.Popen([args.hpo, "events", str(gone)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        hpo("study", "delete", str(gone), "--quiet")
        t0 = time.time()
        _, err = ev.communicate(timeout=15)
        c.check(ev.returncode == 2 and "not_found" in err and time.time() - t0 < 5,
                "events of a study deleted meanwhile: exit 2 within seconds (%d %.1f s %r)"
                % (ev.returncode, time.time() - t0, err))
        # best on two objectives: the front, each trial's vector, and --top
        # said not to apply (it was ignored without a word, one value shown)
        mo = hpo("study", "create", "-", stdin=json.dumps(
            {"name": "cli-mo", "space": {"x": {"type": "float", "low": 0, "high": 1}},
             "objectives": [{"metric": "a"}, {"metric": "b"}], "tuner": {"seed": 1}}))[1].strip()
        for k in range(3):
            tid = hpo("ask", mo, "--field", "trial_id")[1].strip()
            hpo("tell", tid, str(k), str(2 - k), "--quiet")
        rc, out, err = hpo("best", mo, "--top", "2")
        c.check(rc == 0 and "the Pareto front: 3 trial(s) (--top does not apply)" in out and "0,2" in out
                and "2,0" in out, "best on two objectives prints the front with its vectors (%d %r %r)" % (rc, out, err))
        rc, _, err = hpo("trials", sid, "--limit", "0" * 600 + "5")
        c.check(rc == 1 and "18 digits" in err, "trials --limit of 601 digits -> usage error (%d %r)" % (rc, err))

        # ---- datasets: multipart uploads of csv, npy (X Y) and idx (X Y)
        csv = os.path.join(tmp, "blobs.csv")
        with open(csv, "wb") as f:
            f.write(make_csv())
        rc, out, err = hpo("dataset", "upload", "blobs", csv, "--label-column", "species", "--task", "classification")
        c.check(rc == 0 and out.strip().isdigit(), "dataset upload NAME FILE.csv prints the id (%r)" % err)
        did = out.strip()
        x, y = make_npy()
        xp, yp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
        for p, b in ((xp, x), (yp, y)):
            with open(p, "wb") as f:
                f.write(b)
        rc, out, err = hpo("dataset", "upload", "arrays", xp, yp, "--json")
        d = json.loads(out) if rc == 0 else {}
        c.check(rc == 0 and d.get("format") == "npy" and d.get("n_rows") == 200 and d.get("files") == {"x": "x.npy", "y": "y.npy"},
                "dataset upload NAME X.npy Y.npy: npy by the suffix (%r)" % err)
        xi, yi = make_idx()
        xp, yp = os.path.join(tmp, "images.gz"), os.path.join(tmp, "labels.gz")
        for p, b in ((xp, xi), (yp, yi)):
            with open(p, "wb") as f:
                f.write(b)
        rc, out, err = hpo("dataset", "upload", "digits", xp, yp, "--field", "format", "--field", "n_rows")
        c.check(rc == 0 and out.split() == ["idx", "50"], "dataset upload NAME X Y: idx otherwise (%r %r)" % (out, err))
        rc, out, _ = hpo("dataset", "list")
        lines = out.splitlines()
        c.check(rc == 0 and lines[0].split()[:3] == ["ID", "NAME", "FORMAT"] and any("fashion-mnist" in l and "builtin" in l for l in lines)
                and any(l.split()[:3] == [did, "blobs", "csv"] for l in lines), "dataset list: a table (%r)" % out)
        rc, out, _ = hpo("dataset", "list", "--json")
        c.check(rc == 0 and {"blobs", "arrays", "digits"} <= {d["name"] for d in json.loads(out)["datasets"]},
                "dataset list --json")
        rc, out, _ = hpo("dataset", "get", did)
        c.check(rc == 0 and json.loads(out)["label_column"] == "species", "dataset get")
        rc, _, err = hpo("dataset", "upload", "blobs", csv, "--label-column", "species")
        c.check(rc == 2 and json.loads(err)["error"]["field"] == "name", "a taken name -> 2 naming the field")
        bad = os.path.join(tmp, "bad.csv")
        with open(bad, "wb") as f:
            f.write(make_csv(bad_line=7))
        rc, _, err = hpo("dataset", "upload", "bad", bad, "--label-column", "species")
        e = json.loads(err)["error"]
        c.check(rc == 2 and e["field"] == "file" and "7" in e["message"], "a malformed CSV -> 2, the line in the message")
        noauth = dict(env)
        noauth.pop("HPO_TOKEN")
        rc, _, err = hpo("dataset", "upload", "anon", csv, "--label-column", "species", env_=noauth)
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "unauthorized", "an upload without the token -> 2 (401)")
        rc, out, _ = hpo("dataset", "delete", did)
        c.check(rc == 0 and out == "", "dataset delete")
        rc, _, err = hpo("dataset", "get", did)
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "not_found", "a deleted dataset is gone")
        rc, _, _ = hpo("dataset", "delete", did, "--quiet")
        c.check(rc == 2, "deleting it again -> 2")
    finally:
        hp.cleanup()
        subprocess.run(["rm", "-rf", tmp])
    c.finish()


if __name__ == "__main__":
    main()
