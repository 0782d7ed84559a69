"""One hpod per data dir and per port (issue 12, item 7): a second hpod on
a data dir in use exits with "data dir DIR in use by pid N" (two hpods on
one database trained a trial twice); a second hpod on a port in use exits
too (the port was shared through SO_REUSEPORT), and so does one on another
data dir whose hpo.db is a link to the live one's (it took the first's
running trials for a dead run's). The lock goes with its
process, however it ends: a kill -9 does not leave a stale one. A
--data-dir too long for the paths under it is refused at start with a clear
error (issue 13), before anything is created."""
import os
import subprocess
import tempfile

from hpod import Checks, Hpod, parse_args


def second(args, data_dir, port=0, extra=()):
    """Runs a second hpod; returns (exit code or None if it kept running, stderr)."""
    p = subprocess.Popen([args.hpod, "--port", str(port), "--data-dir", data_dir] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=15)
        return p.returncode, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, err


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        rc, err = second(args, hp.data_dir)
        c.check(rc not in (None, 0) and ("in use by pid %d" % hp.proc.pid) in err,
                "a second hpod on the data dir exits naming pid %d (rc %s: %s)" % (hp.proc.pid, rc, err.strip()[-200:]))
        other = tempfile.mkdtemp(prefix="hpo-test-")
        rc, err = second(args, other, hp.port)
        c.check(rc not in (None, 0) and str(hp.port) in err and "in use" in err,
                "a second hpod on port %d exits (rc %s: %s)" % (hp.port, rc, err.strip()[-200:]))
        # another data dir whose hpo.db links to this one's: refused too
        linked = tempfile.mkdtemp(prefix="hpo-test-")
        os.symlink(os.path.join(hp.data_dir, "hpo.db"), os.path.join(linked, "hpo.db"))
        rc, err = second(args, linked)
        c.check(rc not in (None, 0) and "database" in err and ("in use by pid %d" % hp.proc.pid) in err,
                "a data dir whose hpo.db links to a live one's exits naming pid %d (rc %s: %s)"
                % (hp.proc.pid, rc, err.strip()[-200:]))
        subprocess.run(["rm", "-rf", linked])
        c.check(hp.request("GET", "/healthz")[0] == 200, "the first hpod still serves")
        hp.kill9()
        hp2 = Hpod(args.hpod, data_dir=hp.data_dir).start()
        c.check(hp2.request("GET", "/healthz")[0] == 200, "after a kill -9 the data dir is free again")
        hp2.stop()
        subprocess.run(["rm", "-rf", other])
        long_dir = os.path.join(tempfile.gettempdir(), "hpo-" + "d" * 4000)
        rc, err = second(args, long_dir)
        c.check(rc == 2 and "--data-dir" in err and "at most 3840" in err and not os.path.exists(long_dir),
                "a --data-dir of %d bytes is refused at start, nothing created (rc %s: %s)"
                % (len(long_dir), rc, err.strip()[-200:]))
        # GPU slots on a GPU that is not there: a clear refusal, never CPU
        # training under a GPU's name (a machine without one says so; one
        # with GPUs counts them), a slot spanning GPUs too
        gpu_dir = os.path.join(tempfile.gettempdir(), "hpo-gpu-%d" % os.getpid())
        rc, err = second(args, gpu_dir, extra=["--devices", "cuda:63x2"])
        c.check(rc == 2 and ("no CUDA device: " in err or "names GPU 63" in err) and not os.path.exists(gpu_dir),
                "--devices cuda:63x2 exits 2 with the reason (%s: %s)" % (rc, err.strip()[-200:]))
        rc, err = second(args, gpu_dir, extra=["--devices", "cpu:1,cuda:0+1"])
        c.check(rc == 2 and ("no CUDA device: " in err or "names GPU 1" in err) and not os.path.exists(gpu_dir),
                "--devices cuda:0+1 without two GPUs exits 2 with the reason (%s: %s)" % (rc, err.strip()[-200:]))
        rc, err = second(args, gpu_dir, extra=["--devices", "cuda:0+0"])
        c.check(rc == 2 and "cuda:G+H" in err, "--devices cuda:0+0 is a usage error (%s: %s)" % (rc, err.strip()[-120:]))
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
