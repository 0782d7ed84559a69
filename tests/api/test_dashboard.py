"""The dashboard in a real browser: Debian's headless Chromium driven by
playwright-core (web/node_modules) through tests/web/dashboard.mjs, against
a real hpod with a finished study (60 trials, learning curves, pruned and
failed ones), a running one (trials still open), an imported 10,000-trial
one and an
embedded one (trained by hpod, with refits and an ensemble), a template-only
embedded one, small ones for the study actions, and a second hpod started
with --token. Checks that every chart has data, the trials table sorts,
filters and pages, a trial opens, the page follows a trial finishing, the
refits and ensemble show with their test metrics, the large study is
interactive, and the analysis views (contour, slice, EDF, timeline,
compare), the CSV/JSON downloads, the study actions with and without a
token and the dark theme (tests/web/views.mjs), and study and trial notes
edited through the page and their user_attrs (tests/web/notes.mjs), and
what an audit found (tests/web/regressions.mjs): client strings in chart
tooltips shown as text, a study deleted while its page is open, the
importance chart catching up, the trial store's refreshes with an early
trial left running, the learning curves' ticks, exports of a study with
several objectives and of formula-like strings, a chart disposed mid-paint;
refits started from the page shown and followed (views.mjs).
Screenshots go to
<build>/screenshots/.
Skips (77) when /usr/bin/chromium, node or web/node_modules is missing
(`make deps` installs them)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from hpod import Checks, Hpod, parse_args
import webdata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WEB = os.path.join(ROOT, "web")
CHROMIUM = os.environ.get("HPO_CHROMIUM", "/usr/bin/chromium")
TOKEN = "dash-test-token"


def skip_reason():
    if not os.access(CHROMIUM, os.X_OK):
        return "%s is missing (Debian package chromium; `make deps` installs it)" % CHROMIUM
    if not shutil.which("node"):
        return "node is missing (Debian package nodejs; `make deps` installs it)"
    if not os.path.isdir(os.path.join(WEB, "node_modules", "playwright-core")):
        return "web/node_modules is missing (`make deps` runs `npm ci` in web/)"
    return None


def main():
    args = parse_args()
    reason = skip_reason()
    if reason:
        print("SKIP: browser test not run: " + reason)
        sys.exit(77)
    c = Checks()
    out_dir = os.path.join(os.path.dirname(os.path.abspath(args.hpod)), "screenshots")
    os.makedirs(out_dir, exist_ok=True)
    hp = Hpod(args.hpod, args=["--max-body", str(16 << 20)]).start()  # the 10,000-trial import
    hp_tok = None
    tmp = tempfile.mkdtemp(prefix="hpo-dash-")
    started = time.time()
    try:
        t0 = time.time()
        big = webdata.big_study(hp.port, n=10000)
        print("imported the 10,000-trial study in %.1f s" % (time.time() - t0))
        t0 = time.time()
        embedded, refits, ensemble = webdata.embedded_study(hp.port)
        print("hpod trained the embedded study, 2 refits and an ensemble in %.1f s" % (time.time() - t0))
        running, open_trials = webdata.running_study(hp.port)
        finished, states = webdata.finished_study(hp.port, n=60)
        t0 = time.time()
        template = webdata.template_study(hp.port)
        print("hpod trained the template-only study in %.1f s" % (time.time() - t0))
        t0 = time.time()
        pbt = webdata.pbt_study(hp.port)
        print("hpod trained the pbt study in %.1f s" % (time.time() - t0))
        pareto2, pareto3 = webdata.mo_study(hp.port, 2), webdata.mo_study(hp.port, 3)
        to_pause = webdata.small_study(hp.port, "actions: pause, resume, cancel")
        to_delete = webdata.small_study(hp.port, "actions: delete")
        hp_tok = Hpod(args.hpod, args=["--token", TOKEN]).start()
        tok_study = webdata.small_study(hp_tok.port, "actions behind a token", token=TOKEN)
        print("finished study:", states)
        c.check(states["pruned"] > 0 and states["complete"] > 0, "the finished study has complete and pruned trials")
        cfg = {
            "url": hp.url, "web_dir": WEB, "chromium": CHROMIUM, "out_dir": out_dir,
            "finished": finished, "running": running, "big": big, "embedded": embedded,
            "template": template, "pbt": pbt, "to_pause": to_pause, "to_delete": to_delete,
            "pareto2": pareto2, "pareto3": pareto3,
            "token": {"url": hp_tok.url, "token": TOKEN, "study": tok_study},
            "counts": {"studies": len(hp.ok("GET", "/api/v1/studies")["studies"]),
                       "complete": states["complete"], "pruned": states["pruned"],
                       "finished_done": 60, "finished_max": 60,
                       "running_done": 12, "running_max": 40, "running_open": len(open_trials)},
        }
        cfg_path = os.path.join(tmp, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        node = subprocess.Popen(["node", os.path.join(ROOT, "tests", "web", "dashboard.mjs"), cfg_path],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        figures = {}
        for line in node.stdout:
            line = line.rstrip("\n")
            print("  browser:", line, flush=True)
            if line == "wait-live":
                cl = webdata.Client(hp.port)
                cl.call("POST", "/api/v1/trials/%d/tell" % open_trials[0]["trial_id"], {"value": 0.5})
                cl.close()
                node.stdin.write("told\n")
                node.stdin.flush()
            elif line.startswith("ok "):
                c.check(True, line[3:])
            elif line.startswith("FAIL"):
                c.check(False, line[5:])
            elif line.startswith("figure "):
                _, name, value = line.split()
                figures[name] = float(value)
        rc = node.wait(timeout=300)
        c.check(rc == 0, "the browser script exits 0 (%d)" % rc)
        if "big_all_charts_s" in figures:
            print("10,000-trial study page: table in %.2f s, interactive (table + history) in %.2f s, "
                  "all charts in %.2f s, next page in %.2f s"
                  % (figures["big_table_s"], figures["big_interactive_s"], figures["big_all_charts_s"],
                     figures["big_next_page_s"]))
        shots = sorted(f for f in os.listdir(out_dir)
                       if f.endswith(".png") and os.path.getmtime(os.path.join(out_dir, f)) >= started - 1)
        print("screenshots in %s: %s" % (out_dir, ", ".join(shots)))
        c.check(len(shots) >= 21, "twenty-one screenshots saved by this run (%d)" % len(shots))
    finally:
        if hp_tok:
            hp_tok.cleanup()
        hp.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
