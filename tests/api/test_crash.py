"""kill -9 hpod while 4 clients ask and tell, three times: after each restart
no acknowledged value is missing, and trials that were asked but never told
do not stay running: their lease (lease_seconds) expires and they fail."""
import random
import threading
import time

from hpod import Checks, Hpod, parse_args

STUDY = {"name": "crash", "space": {"x": {"type": "float", "low": -1, "high": 1},
                                    "n": {"type": "int", "low": 1, "high": 64, "log": True}},
         "tuner": {"algorithm": "random", "seed": 11, "lease_seconds": 2}}


def main():
    args = parse_args()
    c = Checks()
    rng = random.Random(7)
    hp = Hpod(args.hpod).start()
    acked = {}      # trial_id -> value (tell acknowledged)
    asked = set()   # trial ids whose ask was acknowledged
    lock = threading.Lock()
    try:
        sid = hp.ok("POST", "/api/v1/studies", STUDY)["id"]
        for round_ in range(3):
            stop = threading.Event()

            def client(hp_):
                while not stop.is_set():
                    try:
                        t = hp_.ok("POST", "/api/v1/studies/%d/ask" % sid)
                        with lock:
                            asked.add(t["trial_id"])
                        v = t["params"]["x"] ** 2 + t["params"]["n"]
                        hp_.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": v})
                        with lock:
                            acked[t["trial_id"]] = v
                    except Exception:
                        return  # hpod was killed mid-request: that answer was never acknowledged

            threads = [threading.Thread(target=client, args=(hp,)) for _ in range(4)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.3, 1.5))
            hp.kill9()
            stop.set()
            for t in threads:
                t.join(30)
            print("round %d: killed after %d acknowledged tells" % (round_, len(acked)), flush=True)
            hp = Hpod(args.hpod, data_dir=hp.data_dir).start()
            trials = hp.ok("GET", "/api/v1/studies/%d/trials?limit=100000" % sid)["trials"]
            stored = {t["id"]: t for t in trials}
            missing = [tid for tid, v in acked.items()
                       if tid not in stored or stored[tid]["state"] != "complete" or stored[tid]["value"] != v]
            c.check(not missing, "round %d: every acknowledged tell survives kill -9 (%d missing)" % (round_, len(missing)))
            c.check(all(tid in stored for tid in asked), "round %d: every acknowledged ask survives" % round_)
            numbers = sorted(t["number"] for t in trials)
            c.check(numbers == list(range(len(trials))), "round %d: trial numbers dense and unique" % round_)

        # Asked-but-never-told trials: leased for 2 s, then failed by the reaper.
        deadline = time.time() + 10
        running = None
        while time.time() < deadline:
            running = hp.ok("GET", "/api/v1/studies/%d/trials?state=running" % sid)["total"]
            if running == 0:
                break
            time.sleep(0.5)
        c.check(running == 0, "no trial stays running after its lease expires (running: %s)" % running)
        failed = hp.ok("GET", "/api/v1/studies/%d/trials?state=failed&limit=1000" % sid)["trials"]
        c.check(all(t["error"] == "lease expired" for t in failed), "expired trials say why")
        print("%d trials failed by lease expiry" % len(failed))
        total = hp.ok("GET", "/api/v1/studies/%d/trials" % sid)["total"]
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % sid)
        c.check(t["number"] == total, "asking continues the numbering after the crashes (%d, want %d)"
                % (t["number"], total))
    finally:
        hp.stop()
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
