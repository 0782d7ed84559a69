"""The README's shell training loops, run as they are written (issue 17:
the curl loop needs jq, which `make deps` installs): "Your training loop,
three ways" gives study.json inline, a loop with curl and jq, and one with
the `hpo` client. Both shell blocks are taken from README.md, pointed at a
real hpod (localhost:8080 -> its port; 6 trials of 4 epochs instead of 20 of 10, in
study.json and the loops, for time), and run by bash with a ./train.sh
that prints a validation loss for (lr, epoch); hpo is the built one, on
PATH. Each must leave a complete study of its finished trials (some may be
pruned by the median pruner) whose values are what train.sh printed after
the last epoch, and print the best three trials. A missing jq, curl or a README that drifted from the
API fails here."""
import json
import math
import os
import re
import shutil
import subprocess
import tempfile

from hpod import Checks, Hpod, parse_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
TRIALS, EPOCHS = 6, 4  # the README's 20 and 10, fewer for time: the loops are otherwise as written
TRAIN_SH = """#!/bin/sh
# a validation loss for lr=$1 after epoch $2: best near lr=0.01, falling with the epochs
# (LC_ALL=C: mawk prints "2,86" under a German locale, as a training script in Python would not)
LC_ALL=C awk -v lr="$1" -v e="$2" 'BEGIN { l = log(lr) / log(10) + 2; printf "%.6f\\n", l * l + 1 / (e + 1) }'
"""


def readme_parts():
    """study.json and the two shell blocks of "Your training loop, three ways"."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Your training loop, three ways"):]
    section = section[:section.index("\n## ", 1)]
    study = re.search(r"\(`study\.json`: `(.*?)`\)", section, re.S).group(1)
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    curl = next(b for b in blocks if "jq" in b)
    cli = next(b for b in blocks if "hpo ask" in b)
    return json.loads(" ".join(study.split())), curl, cli


def run_loop(c, hp, hpo_bin, name, script, study_json):
    work = tempfile.mkdtemp(prefix="hpo-readme-")
    try:
        with open(os.path.join(work, "study.json"), "w") as f:
            json.dump(study_json, f)
        with open(os.path.join(work, "train.sh"), "w") as f:
            f.write(TRAIN_SH)
        os.chmod(os.path.join(work, "train.sh"), 0o755)
        bindir = os.path.join(work, "bin")
        os.mkdir(bindir)
        os.symlink(os.path.abspath(hpo_bin), os.path.join(bindir, "hpo"))
        script = script.replace("localhost:8080", "127.0.0.1:%d" % hp.port)  # the hpo loop reads HPO_URL
        for old, new in (("$(seq 20)", "$(seq %d)" % TRIALS), ("$(seq 0 9)", "$(seq 0 %d)" % (EPOCHS - 1))):
            c.check(old in script, "%s: the README's loop has %s" % (name, old))
            script = script.replace(old, new)
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), HPO_URL=hp.url)
        before = {s["id"] for s in hp.ok("GET", "/api/v1/studies")["studies"]}
        r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        new = [s for s in hp.ok("GET", "/api/v1/studies")["studies"] if s["id"] not in before]
        c.check(r.returncode == 0 and len(new) == 1, "%s: the README's loop runs (rc %d, %d new study; stderr %r)"
                % (name, r.returncode, len(new), r.stderr[-600:]))
        if len(new) != 1:
            return
        sid = new[0]["id"]
        study = hp.ok("GET", "/api/v1/studies/%d" % sid)
        trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100" % sid)["trials"]
        by = study["trials_by_state"]
        print("%s: study %d %s, %s" % (name, sid, study["state"], by))
        c.check(study["state"] == "complete" and len(trials) == TRIALS and by.get("complete", 0) > 0 and
                by.get("complete", 0) + by.get("pruned", 0) == TRIALS,
                "%s: %d trials finished, the study complete (%s %s)" % (name, TRIALS, study["state"], by))

        def loss(t, epoch):
            return (math.log10(t["params"]["lr"]) + 2) ** 2 + 1 / (epoch + 1)
        told = all(abs(t["value"] - loss(t, EPOCHS - 1)) < 2e-6 for t in trials if t["state"] == "complete")
        c.check(told, "%s: each complete trial's value is train.sh's loss after epoch 9" % name)
        best = [t["trial_id"] for t in hp.ok("GET", "/api/v1/studies/%d/best?top_n=3" % sid)["trials"]]
        lines = r.stdout.strip().splitlines()
        if name.startswith("curl"):  # the answer of GET best, as JSON
            try:
                shown = [t["trial_id"] for t in json.loads(lines[-1])["trials"]]
            except (IndexError, ValueError, KeyError, TypeError):
                shown = lines[-1:]
        else:  # hpo best's table: RANK TRIAL NUMBER VALUE PARAMS
            head = max((i for i, l in enumerate(lines) if l.startswith("RANK")), default=len(lines))
            shown = [int(l.split()[1]) for l in lines[head + 1:]]
        c.check(shown == best, "%s: the loop prints the best three trials (%s, want %s)" % (name, shown, best))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    args = parse_args()
    c = Checks()
    for tool in ("curl", "jq"):
        c.check(shutil.which(tool) is not None, "%s is installed (scripts/deps.sh, `make deps`)" % tool)
    study_json, curl, cli = readme_parts()
    c.check(study_json["tuner"]["max_trials"] == 20, "the README's study.json: %s" % study_json)
    study_json["tuner"]["max_trials"] = TRIALS
    hp = Hpod(args.hpod).start()
    try:
        run_loop(c, hp, args.hpo, "curl + jq", curl, study_json)
        run_loop(c, hp, args.hpo, "hpo client", cli, study_json)
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
