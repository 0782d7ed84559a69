"""A dataset upload on a full data disk answers 507 insufficient_storage
(openapi.yaml: a call that would store something on a full data disk
answers 507), not 500, and leaves no partial upload; once there is room
the same upload is stored. The data dir is a small tmpfs in a private
mount namespace (as tests/api/test_disk_full.py; exit 77 where none can be
made)."""
import os
import shutil
import subprocess
import tempfile

from hpod import Checks, Hpod, parse_args
from test_datasets import leftovers, make_csv, upload
from test_disk_full import enter_namespace, fill, free_bytes, skip

SIZE_MB = 8
LEAVE = 64 << 10  # room for SQLite's page writes, not for the upload


def main():
    args = parse_args()
    enter_namespace()
    c = Checks()
    mnt = tempfile.mkdtemp(prefix="hpo-upfull-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % SIZE_MB, "tmpfs", mnt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        os.rmdir(mnt)
        skip("cannot mount a tmpfs: %s" % r.stdout.decode(errors="replace").strip())
    logdir = tempfile.mkdtemp(prefix="hpo-upfull-log-")
    hp = Hpod(args.hpod, data_dir=mnt)
    hp.log_path = os.path.join(logdir, "hpod.log")  # the log must not need the full disk
    try:
        hp.start()
        csv = make_csv(rows=20000)  # ~0.6 MB
        fields = [("name", "big", None), ("format", "csv", None), ("label_column", "species", None),
                  ("file", csv, "big.csv")]
        fill(mnt, "filler", LEAVE)
        st, out = upload(hp, fields)
        err = out.get("error", {}) if isinstance(out, dict) else {}
        c.check(st == 507 and err.get("code") == "insufficient_storage",
                "an upload on a full disk -> 507 insufficient_storage (%s %s)" % (st, out))
        c.check(not leftovers(mnt), "no partial upload left: %s" % leftovers(mnt))
        os.unlink(os.path.join(mnt, "filler"))
        st, out = upload(hp, fields)
        c.check(st == 201, "the same upload once there is room -> 201 (%s %s; %d bytes free)"
                % (st, out, free_bytes(mnt)))
        hp.stop()
    finally:
        hp.cleanup()
        if c.failed:
            print(hp.log_tail(20))
        subprocess.run(["umount", mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(mnt, ignore_errors=True)
        shutil.rmtree(logdir, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
