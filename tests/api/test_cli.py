"""The `hpo` command-line client against a real hpod: every subcommand, its
output and exit code (0 ok, 1 usage, 2 HTTP 4xx with the JSON error on
stderr, 3 prune, 4 unreachable, 6 failed job, 130 Ctrl-C), HPO_URL/HPO_TOKEN
and --url/--token, `study watch` both on a pipe (plain lines) and on a
terminal (a line redrawn in place), ask --field (--params-only refused),
and refit/ensemble/models/predict/weights on a tiny embedded study
(Fashion-MNIST, 3,000 rows, 2 epochs). The other commands, --help and the
bash completion: test_cli_commands.py."""
import gzip
import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from hpod import Checks, Hpod, parse_args
import webdata

TOKEN = "cli-s3cret"
TINY = {"name": "cli-embedded", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
        "space": {"optimizer": {"type": "choice", "values": ["adam"]},
                  "lr": {"type": "float", "low": 5e-4, "high": 5e-3, "log": True}},
        "dataset": {"name": "fashion-mnist", "limit": 3000, "validation_split": 1000},
        "training": {"max_epochs": 2, "batch_size": 64},
        "tuner": {"algorithm": "random", "seed": 2, "max_trials": 3}}


class CuttingProxy:
    """A TCP proxy to hpod that closes every event stream cut_after seconds
    after it opened, noting each one's Last-Event-ID header (None if none)."""

    def __init__(self, port, cut_after):
        self.upstream, self.cut_after = port, cut_after
        self.last_event_ids = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.open = True
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while self.open:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.relay, args=(client,), daemon=True).start()

    def relay(self, client):
        up = socket.create_connection(("127.0.0.1", self.upstream))

        def cut():
            for x in (client, up):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def pump(a, b, requests):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    if requests and b" /api/v1/studies/" in data and b"/events" in data.split(b"\r\n", 1)[0]:
                        # a stream opens on this connection (maybe a reused one)
                        lei = [l.split(b":", 1)[1].strip() for l in data.split(b"\r\n")
                               if l.lower().startswith(b"last-event-id:")]
                        self.last_event_ids.append(int(lei[0]) if lei else None)
                        threading.Timer(self.cut_after, cut).start()
                    b.sendall(data)
            except OSError:
                pass
            cut()
        threading.Thread(target=pump, args=(client, up, True), daemon=True).start()
        threading.Thread(target=pump, args=(up, client, False), daemon=True).start()

    def close(self):
        self.open = False
        self.sock.close()


def test_rows(n):
    d = os.environ.get("HPO_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    with gzip.open(os.path.join(d, "t10k-images-idx3-ubyte.gz")) as f:
        f.read(16)
        pix = f.read(784 * n)
    return [list(pix[i * 784:(i + 1) * 784]) for i in range(n)]


def main():
    args = parse_args()
    if not os.access(args.hpo, os.X_OK):
        print("SKIP: no hpo client at %s" % args.hpo)
        sys.exit(77)
    c = Checks()
    hp = Hpod(args.hpod, args=["--token", TOKEN]).start()
    tmp = tempfile.mkdtemp(prefix="hpo-cli-")
    env = dict(os.environ, HPO_URL=hp.url, HPO_TOKEN=TOKEN)

    def hpo(*argv, stdin=None, env_=None, timeout=60, cwd_=None):
        r = subprocess.run([args.hpo] + list(argv), input=stdin, capture_output=True, text=True,
                           env=env_ or env, timeout=timeout, cwd=cwd_)
        return r.returncode, r.stdout, r.stderr

    try:
        # ---- help, usage, version
        rc, out, _ = hpo("--help")
        c.check(rc == 0 and "Exit codes:" in out and "130" in out and "HPO_TOKEN" in out and "study watch" in out,
                "--help documents commands, environment and exit codes")
        rc, out, _ = hpo("--version")
        c.check(rc == 0 and out.startswith("hpo "), "--version")
        for argv in [(), ("frobnicate",), ("study",), ("study", "get"), ("study", "get", "x"), ("ask",),
                     ("report", "1", "2"), ("report", "1", "-1", "0.5"), ("tell", "1"), ("tell", "1", "nan"),
                     ("best", "1", "--top", "0"), ("trials", "1", "--limit", "x"), ("--bogus", "study", "list")]:
            rc, _, err = hpo(*argv)
            c.check(rc == 1 and "hpo" in err, "usage error -> 1: hpo %s" % " ".join(argv))
        for argv in [("refit",), ("refit", "1", "--top"), ("refit", "1", "--trials", "3,x"),
                     ("refit", "1", "--epochs-factor", "0"), ("ensemble", "1", "--members", ""),
                     ("ensemble", "1", "--rounds", "0"), ("models",), ("predict",), ("predict", "x", "-")]:
            rc, _, err = hpo(*argv)
            c.check(rc == 1 and "hpo" in err, "usage error -> 1: hpo %s" % " ".join(argv))

        # ---- study create / list / get
        path = os.path.join(tmp, "study.json")
        with open(path, "w") as f:
            json.dump({"name": "cli-study", "objective": {"direction": "minimize"}, "space": webdata.SPACE,
                       "tuner": {"algorithm": "random", "seed": 1, "max_trials": 8,
                                 "pruner": {"algorithm": "median", "n_startup_trials": 2}}}, f)
        rc, out, err = hpo("study", "create", path)
        c.check(rc == 0 and out.strip().isdigit(), "study create prints the id (%r %r)" % (out, err))
        sid = int(out)
        rc, out, _ = hpo("study", "create", "-", "--json",
                         stdin=json.dumps({"name": "from-stdin", "space": {"b": {"type": "bool"}}}))
        c.check(rc == 0 and json.loads(out)["name"] == "from-stdin", "study create - reads stdin; --json prints the study")
        other = json.loads(out)["id"]
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        rc, _, err = hpo("study", "create", bad)
        c.check(rc == 1 and "bad.json" in err, "a file that is not JSON is a usage error")
        rc, _, err = hpo("study", "create", "-", stdin=json.dumps({"space": {"x": {"type": "float", "low": 2, "high": 1}}}))
        e = json.loads(err)["error"]
        c.check(rc == 2 and e["code"] == "invalid_argument" and e["field"].startswith("space.x"),
                "an invalid definition -> 2 with the JSON error (%s)" % e["field"])
        rc, out, _ = hpo("study", "list")
        c.check(rc == 0 and "cli-study" in out and "0/8" in out and out.startswith("ID"), "study list: a table")
        rc, out, _ = hpo("study", "list", "--json")
        c.check(rc == 0 and {s["id"] for s in json.loads(out)["studies"]} >= {sid, other} and out.count("\n") == 1,
                "study list --json: the answer on one line")
        rc, out, _ = hpo("study", "get", str(sid))
        c.check(rc == 0 and json.loads(out)["definition"]["tuner"]["max_trials"] == 8, "study get: the JSON")
        rc, out, err = hpo("study", "get", "99999")
        c.check(rc == 2 and out == "" and json.loads(err)["error"]["code"] == "not_found",
                "study get of an unknown id -> 2, JSON error on stderr")

        # ---- ask / report / tell: a training loop in shell terms
        def train(losses, expect_prune_at=None):
            rc, out, _ = hpo("ask", str(sid))
            t = json.loads(out)
            assert rc == 0, out
            for step, v in enumerate(losses):
                rc, out, _ = hpo("report", str(t["trial_id"]), str(step), repr(v))
                if rc == 3:
                    return t, step, out.strip()
                assert rc == 0 and out.strip() == "continue", (rc, out)
            return t, None, "continue"

        t1, _, _ = train([1.0, 0.5, 0.3])
        rc, out, _ = hpo("tell", str(t1["trial_id"]), "0.3")
        told = json.loads(out)
        c.check(rc == 0 and told["state"] == "complete" and told["value"] == 0.3, "tell TRIAL VALUE")
        t2, _, _ = train([1.1, 0.6, 0.35])
        rc, out, _ = hpo("tell", str(t2["trial_id"]), "0.35", "0.37", "0.33", "--repeats")
        c.check(rc == 0 and abs(json.loads(out)["value"] - 0.35) < 1e-9, "tell with one value per execution (mean)")
        t3, at, word = train([5.0, 5.0, 5.0])
        c.check(at is not None and word == "prune", "report -> exit 3 and 'prune' when the pruner stops the trial")
        rc, out, _ = hpo("tell", str(t3["trial_id"]), "--state", "pruned")
        c.check(rc == 0 and json.loads(out)["state"] == "pruned", "tell --state pruned")
        rc, out, err = hpo("ask", str(sid), "--params-only")
        c.check(rc == 1 and out == "" and "--field" in err, "ask --params-only is gone: a usage error naming --field")
        rc, out, _ = hpo("ask", str(sid), "--field", "trial_id", "--field", "params.lr", "--field", "params.nope")
        lines = out.splitlines()
        c.check(rc == 0 and len(lines) == 3 and lines[0].isdigit() and 1e-5 < float(lines[1]) < 1 and lines[2] == "null",
                "ask --field trial_id --field params.lr: one value a line, null when absent (%r)" % out)
        rc, out, _ = hpo("trial", lines[0], "--field", "state")
        c.check(rc == 0 and out == "running\n", "--field prints a string bare")
        rc, out, _ = hpo("trials", str(sid), "--state", "running", "--json")
        t4 = json.loads(out)["trials"][0]
        rc, out, _ = hpo("tell", str(t4["trial_id"]), "--state", "failed", "--error", "CUDA out of memory")
        c.check(rc == 0 and json.loads(out)["state"] == "failed", "tell --state failed --error")
        rc, _, err = hpo("tell", str(t4["trial_id"]), "1.0")
        c.check(rc == 2 and json.loads(err)["error"]["code"], "a second tell -> 2 (409) with the JSON error")
        rc, _, _ = hpo("tell", str(t4["trial_id"]), "--state", "failed", "1.0")
        c.check(rc == 1, "--state failed with a value is a usage error")

        # ---- trials / best
        rc, out, _ = hpo("trials", str(sid))
        lines = out.strip().splitlines()
        c.check(rc == 0 and lines[0].startswith("TRIAL") and len(lines) == 5, "trials: a table of the 4 trials")
        head = lines[0].split()
        row1 = next((l.split() for l in lines[1:] if l.split()[0] == str(t1["trial_id"])), [])
        c.check("LAST_STEP" in head and len(row1) > head.index("LAST_STEP")
                and row1[head.index("LAST_STEP")] == "2",
                "trials: LAST_STEP is the last step reported (2 after steps 0, 1, 2), not one more (%r)" % row1)
        rc, out, _ = hpo("trials", str(sid), "--state", "pruned")
        c.check(rc == 0 and len(out.strip().splitlines()) == 2 and "pruned" in out, "trials --state pruned")
        rc, out, _ = hpo("trials", str(sid), "--order", "value", "--limit", "1", "--json")
        j = json.loads(out)
        c.check(rc == 0 and j["total"] == 4 and len(j["trials"]) == 1, "trials --order --limit --json")
        rc, _, err = hpo("trials", str(sid), "--state", "sleeping")
        c.check(rc == 2 and json.loads(err)["error"]["field"] == "state", "trials with a bad state -> 2")
        rc, out, _ = hpo("best", str(sid), "--top", "2")
        lines = out.strip().splitlines()
        c.check(rc == 0 and lines[0].startswith("RANK") and lines[1].split()[1] == str(t1["trial_id"])
                and "±" in lines[2] and "lr=" in lines[1], "best --top 2: the best first, with std and params")
        rc, out, _ = hpo("best", str(sid), "--json")
        c.check(rc == 0 and json.loads(out)["trials"][0]["value"] == 0.3, "best --json")

        # ---- auth, URL and connection failures
        noauth = dict(env)
        noauth.pop("HPO_TOKEN")
        rc, _, err = hpo("ask", str(sid), env_=noauth)
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "unauthorized", "no token -> 2 (401)")
        rc, out, _ = hpo("--token", TOKEN, "ask", str(other), env_=noauth)
        c.check(rc == 0 and "trial_id" in json.loads(out), "--token")
        rc, out, _ = hpo("--url", hp.url + "/", "study", "get", str(sid), env_=dict(env, HPO_URL="http://127.0.0.1:1"))
        c.check(rc == 0, "--url overrides HPO_URL (a trailing / is fine)")
        rc, _, err = hpo("study", "list", env_=dict(env, HPO_URL="http://127.0.0.1:1"))
        c.check(rc == 4 and "cannot reach" in err, "unreachable hpod -> 4")

        # ---- watch on a pipe: plain lines, exits when max_trials trials are finished
        watch = subprocess.Popen([args.hpo, "study", "watch", str(sid), "--interval", "0.1"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        cl = webdata.Client(hp.port, token=TOKEN)
        left = 8 - 4
        for _ in range(left):  # the running one (asked above) counts; finish it and the rest
            rs = cl.call("GET", "/api/v1/studies/%d/trials?state=running" % sid)["trials"]
            t = rs[0] if rs else cl.call("POST", "/api/v1/studies/%d/ask" % sid)
            cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": 0.9})
            time.sleep(0.25)
        out, err = watch.communicate(timeout=30)
        lines = out.strip().splitlines()
        c.check(watch.returncode == 0, "watch exits 0 when max_trials trials are finished (%d %s)" % (watch.returncode, err))
        c.check(len(lines) >= 3 and "\r" not in out and "\033" not in out, "watch on a pipe: plain lines (%d)" % len(lines))
        c.check("[##############################] 8/8 100%" in out and "best 0.3" in out and "finished" in lines[-1],
                "watch: the bar, the counts and the best so far")
        c.check(any("ETA" in l and "4/8" not in l for l in lines), "watch prints an ETA")

        # ---- watch on a terminal: redrawn in place; Ctrl-C -> 130
        sid2 = int(hpo("study", "create", "-", stdin=json.dumps(
            {"name": "watch-tty", "space": {"x": {"type": "float", "low": 0, "high": 1}},
             "tuner": {"max_trials": 100}}))[1])
        for _ in range(3):
            t = cl.call("POST", "/api/v1/studies/%d/ask" % sid2)
            cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": t["params"]["x"]})
        master, slave = pty.openpty()
        w = subprocess.Popen([args.hpo, "study", "watch", str(sid2), "--interval", "0.1"], env=env,
                             stdout=slave, stderr=subprocess.PIPE, text=True)
        os.close(slave)
        buf = b""
        deadline = time.time() + 3
        while time.time() < deadline:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    buf += os.read(master, 4096)
                except OSError:
                    break
            if buf.count(b"\r\033[K") >= 3:
                break
        w.send_signal(signal.SIGINT)
        w.wait(timeout=10)
        os.close(master)
        c.check(buf.count(b"\r\033[K") >= 3 and b"3/100" in buf, "watch on a terminal redraws one line in place")
        c.check(w.returncode == 130, "watch: Ctrl-C -> 130 (%d)" % w.returncode)
        cl.close()

        # ---- watch follows the event stream: with --interval 3600 (no polling
        # to speak of) events alone drive it; a proxy cuts every stream after
        # 0.4 s, so it must reconnect with Last-Event-ID; the study's
        # study_cancelled event ends it
        sid3 = int(hpo("study", "create", "-", stdin=json.dumps(
            {"name": "watch-stream", "space": {"x": {"type": "float", "low": 0, "high": 1}},
             "tuner": {"max_trials": 50}}))[1])
        first_event = cl.call("GET", "/api/v1/studies/%d" % sid3)["last_event_id"]
        proxy = CuttingProxy(hp.port, cut_after=0.4)
        w = subprocess.Popen([args.hpo, "--url", "http://127.0.0.1:%d" % proxy.port, "study", "watch", str(sid3),
                              "--interval", "3600"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.6)
        for k in range(2):
            t = cl.call("POST", "/api/v1/studies/%d/ask" % sid3)
            cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": 0.5 - 0.1 * k})
            cl.call("PATCH", "/api/v1/trials/%d" % t["trial_id"], {"note": "seen"})  # an event
            time.sleep(1.2)  # past a cut and a reconnect
        cl.call("POST", "/api/v1/studies/%d/cancel" % sid3)
        try:
            out, err = w.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            w.kill()
            out, err = w.communicate()
        proxy.close()
        lines = out.strip().splitlines()
        c.check(w.returncode == 0 and "1/50" in out and "2/50" in out and "best 0.4" in out
                and "finished" in lines[-1], "watch over the stream: a line per change, ends at study_cancelled "
                "(%s %r %r)" % (w.returncode, out[-300:], err[-300:]))
        ids = [h for h in proxy.last_event_ids if h is not None]
        c.check(len(proxy.last_event_ids) >= 3 and ids and ids[0] == first_event and max(ids) > first_event,
                "watch reconnects with Last-Event-ID, later ids as events come (%s, from %d)"
                % (proxy.last_event_ids, first_event))
        c.check("polling" not in err, "no fallback while the stream works (%r)" % err[-200:])

        # a stream refused (hpod --max-streams 1, taken): it says so and polls
        hp2 = Hpod(args.hpod, args=["--max-streams", "1"]).start()
        try:
            cl2 = webdata.Client(hp2.port)
            sid4 = cl2.call("POST", "/api/v1/studies", {"name": "poll", "tuner": {"max_trials": 2},
                                                        "space": {"x": {"type": "float", "low": 0, "high": 1}}})["id"]
            held = urllib.request.urlopen(hp2.url + "/api/v1/studies/%d/events" % sid4, timeout=30)
            w = subprocess.Popen([args.hpo, "--url", hp2.url, "study", "watch", str(sid4), "--interval", "0.1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            for _ in range(2):
                t = cl2.call("POST", "/api/v1/studies/%d/ask" % sid4)
                cl2.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": 1.0})
            out, err = w.communicate(timeout=20)
            held.close()
            cl2.close()
            c.check(w.returncode == 0 and "2/2" in out and "polling every 0.1 s" in err,
                    "watch without a stream (503): the reason, then polling to the end (%d %r %r)"
                    % (w.returncode, out[-200:], err[-300:]))
        finally:
            hp2.cleanup()

        # ---- models of an embedded study: refit, ensemble, models, predict
        rc, out, _ = hpo("study", "create", "-", stdin=json.dumps(TINY))
        emb = int(out)
        rc, out, _ = hpo("study", "watch", str(emb), "--interval", "0.2", timeout=300)
        c.check(rc == 0 and "3/3" in out, "watch follows an embedded study to complete")
        rc, out, _ = hpo("refit", str(emb), "--top", "2", "--wait", timeout=300)
        lines = out.strip().splitlines()
        c.check(rc == 0 and lines[0].startswith("MODEL") and len(lines) == 3
                and all("refit" in l and "complete" in l and "accuracy" in l for l in lines[1:]),
                "refit --top 2 --wait: two refits with test metrics")
        refit_ids = [int(l.split()[0]) for l in lines[1:]]
        rc, out, _ = hpo("refit", str(emb), "--json")
        c.check(rc == 0 and json.loads(out)["refits"][0]["how"]["epochs_factor"] == 1.2, "refit --json (queued)")
        rc, out, _ = hpo("ensemble", str(emb), "--members", ",".join(map(str, refit_ids)), "--method", "weighted",
                         "--wait", timeout=300)
        c.check(rc == 0 and "ensemble" in out and "weighted" in out and out.count("accuracy") >= 6,
                "ensemble --wait: members' weights and the ensemble's val/test metrics")
        rc, out, _ = hpo("ensemble", str(emb), "--top", "1", "--method", "mean")
        c.check(rc == 0 and out.strip().isdigit(), "ensemble without --wait prints its id")
        rc, _, err = hpo("ensemble", str(emb), "--members", "99999", "--wait")
        c.check(rc == 2 and json.loads(err)["error"]["field"] == "members", "ensemble of unknown members -> 2")
        rc, _, err = hpo("ensemble", str(emb), "--members", str(refit_ids[0]), "--method", "median")
        c.check(rc == 2 and json.loads(err)["error"]["field"] == "method", "an unknown method -> 2")
        rc, out, _ = hpo("models", str(emb))
        kinds = [l.split()[1] for l in out.strip().splitlines()[1:]]
        c.check(rc == 0 and kinds.count("refit") == 3 and kinds.count("ensemble") == 2, "models lists refits and ensembles")
        rc, out, _ = hpo("models", str(emb), "--json")
        models = json.loads(out)["models"]
        c.check(rc == 0 and len(models) == 5, "models --json")
        rows = test_rows(3)
        rc, out, _ = hpo("predict", str(refit_ids[0]), "-", stdin=json.dumps(rows))
        p = json.loads(out)
        c.check(rc == 0 and len(p["classes"]) == 3 and len(p["predictions"][0]) == 10, "predict: bare rows on stdin")
        path = os.path.join(tmp, "inputs.json")
        with open(path, "w") as f:
            json.dump({"inputs": rows[:1]}, f)
        rc, out, _ = hpo("predict", str(refit_ids[0]), path)
        c.check(rc == 0 and json.loads(out)["classes"] == p["classes"][:1], "predict: {\"inputs\"} from a file")
        rc, _, err = hpo("predict", str(refit_ids[0]), "-", stdin=json.dumps([[1, 2, 3]]))
        c.check(rc == 2 and json.loads(err)["error"]["code"], "predict with a wrong row size -> 2")

        # ---- weights: the safetensors file, as hpod serves it
        with urllib.request.urlopen(hp.url + "/api/v1/models/%d/weights" % refit_ids[0], timeout=60) as r:
            st, raw = r.status, r.read()
        wpath = os.path.join(tmp, "w.safetensors")
        rc, out, err = hpo("weights", str(refit_ids[0]), "-o", wpath)
        with open(wpath, "rb") as f:
            got = f.read()
        c.check(rc == 0 and st == 200 and got == raw and wpath in out and str(len(raw)) in out,
                "weights -o FILE: the same bytes as GET .../weights (%d bytes)" % len(got))
        c.check(not os.path.exists(wpath + ".part"), "weights leaves no partial file")
        rc, out, _ = hpo("weights", str(refit_ids[0]), "-o", wpath, "--json")
        c.check(rc == 0 and json.loads(out) == {"model_id": refit_ids[0], "file": wpath, "bytes": len(raw)},
                "weights --json")
        r = subprocess.run([args.hpo, "weights", str(refit_ids[0]), "-o", "-"], capture_output=True, env=env, timeout=60)
        c.check(r.returncode == 0 and r.stdout == raw, "weights -o - writes the file to stdout")
        rc, out, _ = hpo("weights", str(refit_ids[0]), cwd_=tmp)
        c.check(rc == 0 and os.path.getsize(os.path.join(tmp, "model-%d.safetensors" % refit_ids[0])) == len(raw),
                "weights without -o: model-ID.safetensors")
        missing = os.path.join(tmp, "none.safetensors")
        rc, out, err = hpo("weights", "99999", "-o", missing)
        c.check(rc == 2 and json.loads(err)["error"]["code"] == "not_found" and not os.path.exists(missing)
                and not os.path.exists(missing + ".part"), "weights of an unknown model -> 2, no file")
        rc, _, err = hpo("weights", str(refit_ids[0]), "-o", os.path.join(tmp, "no-such-dir", "w"))
        c.check(rc == 1 and "cannot write" in err, "weights into a folder that does not exist -> 1")

        # ---- delete
        rc, out, _ = hpo("study", "delete", str(other))
        c.check(rc == 0 and out == "", "study delete")
        rc, _, _ = hpo("study", "get", str(other))
        c.check(rc == 2, "a deleted study is gone")
        rc, _, _ = hpo("study", "delete", str(other))
        c.check(rc == 2, "deleting it again -> 2")
    finally:
        hp.cleanup()
        subprocess.run(["rm", "-rf", tmp])
    c.finish()


if __name__ == "__main__":
    main()
