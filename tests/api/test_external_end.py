"""External (ask/tell) studies end, against a real hpod: max_trials asked and
all told makes the study complete with a study_complete event (the event
stream ends with it), an idle study past its max_seconds completes by itself
(also when the deadline passed while hpod was down), an ask past max_seconds
gets 409 exhausted naming tuner.max_seconds, `updated` moves with the trials,
an unseeded study shows the seed it drew, and a Last-Event-ID on a finished
study with nothing after it answers 204 (EventSource clients stop)."""
import time
import urllib.request

from hpod import Checks, Hpod, parse_args, read_events

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}


def events_status(url, sid, last_event_id):
    """GET events with a Last-Event-ID: (status, body bytes)."""
    req = urllib.request.Request("%s/api/v1/studies/%d/events" % (url, sid))
    req.add_header("Last-Event-ID", str(last_event_id))
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()


def eventually(fn, timeout, step=0.2):
    """Polls fn() until it is true (True) or timeout seconds pass (False)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return True
        time.sleep(step)
    return False


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod).start()
    try:
        # max_trials asked and all told
        s = hp.ok("POST", "/api/v1/studies",
                  {"name": "mt", "space": SPACE, "tuner": {"max_trials": 3, "seed": 4}})
        sid = s["id"]
        c.check(s.get("seed") == 4 and "max_seconds" in s and s["max_seconds"] is None, "the given seed is shown: %s" % s)
        trials = [hp.ok("POST", "/api/v1/studies/%d/ask" % sid) for _ in range(3)]
        status, err = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
        c.check(status == 409 and err["error"]["field"] == "tuner.max_trials", "a 4th ask: 409 %s" % err)
        for t in trials[:2]:
            hp.ok("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": t["params"]["x"]})
        c.check(hp.ok("GET", "/api/v1/studies/%d" % sid)["state"] == "running", "running while a trial is out")
        hp.ok("POST", "/api/v1/trials/%d/tell" % trials[2]["trial_id"], {"state": "failed"})
        st = hp.ok("GET", "/api/v1/studies/%d" % sid)
        c.check(st["state"] == "complete", "complete once all 3 are told: %s" % st["state"])
        ev = read_events(hp.url, sid, timeout=30) if st["state"] == "complete" else []  # ends after study_complete
        c.check(ev and ev[-1][1] == "study_complete", "the stream ends with study_complete: %s" % ev[-1:])
        if ev:
            data = ev[-1][2]
            c.check(data.get("reason") == "tuner.max_trials" and data.get("complete") == 2 and data.get("failed") == 1,
                    "study_complete tells the counts and the reason: %s" % data)
        status, err = hp.request("POST", "/api/v1/studies/%d/ask" % sid)
        c.check(status == 409 and err["error"]["code"] == "exhausted", "an ask after the end: 409 %s" % err)

        # SSE: a finished study with nothing after Last-Event-ID answers 204
        last = st["last_event_id"]
        status, body = events_status(hp.url, sid, last) if st["state"] == "complete" else (None, None)
        c.check(status == 204 and body == b"", "Last-Event-ID %d on a complete study: %s %r" % (last, status, body))
        ev = read_events(hp.url, sid, last_event_id=last - 1, timeout=30) if status == 204 else []
        c.check([e[1] for e in ev] == ["study_complete"], "an earlier Last-Event-ID still streams: %s" % ev)
        cancelled = hp.ok("POST", "/api/v1/studies", {"name": "c", "space": SPACE})["id"]
        hp.ok("POST", "/api/v1/studies/%d/cancel" % cancelled)
        last_c = hp.ok("GET", "/api/v1/studies/%d" % cancelled)["last_event_id"]
        c.check(events_status(hp.url, cancelled, last_c)[0] == 204, "a cancelled study: 204 too")

        # an unseeded study draws a seed, stores it and shows it
        s = hp.ok("POST", "/api/v1/studies", {"name": "unseeded", "space": SPACE})
        got = hp.ok("GET", "/api/v1/studies/%d" % s["id"])
        c.check(isinstance(s.get("seed"), int) and 0 <= s["seed"] < 2 ** 31, "a drawn seed is shown: %s" % s.get("seed"))
        c.check(got["definition"].get("tuner", {}).get("seed") == s.get("seed") == got.get("seed") is not None,
                "and stored in the definition")

        # updated moves with the trials
        t = hp.ok("POST", "/api/v1/studies/%d/ask" % s["id"])
        trial = hp.ok("GET", "/api/v1/trials/%d" % t["trial_id"])
        got = hp.ok("GET", "/api/v1/studies/%d" % s["id"])
        c.check(got["updated"] == trial["created"] and got["updated"] >= got["created"],
                "updated is the ask's time: %s vs %s" % (got["updated"], trial["created"]))

        # max_seconds: an idle study completes by itself; then an ask names the budget
        idle = hp.ok("POST", "/api/v1/studies",
                     {"name": "idle", "space": SPACE, "tuner": {"max_seconds": 1}})
        c.check(idle.get("max_seconds") == 1, "max_seconds is shown")
        done = eventually(lambda: hp.ok("GET", "/api/v1/studies/%d" % idle["id"])["state"] == "complete", 20)
        c.check(done, "an idle study completes at its max_seconds")
        status, err = hp.request("POST", "/api/v1/studies/%d/ask" % idle["id"])
        c.check(status == 409 and err["error"]["code"] == "exhausted" and err["error"]["field"] == "tuner.max_seconds",
                "an ask past max_seconds: 409 exhausted tuner.max_seconds: %s" % err)
        if done:  # else the stream would wait for an end that does not come
            ev = read_events(hp.url, idle["id"], timeout=30)
            c.check(ev[-1][1] == "study_complete" and ev[-1][2].get("reason") == "tuner.max_seconds",
                    "study_complete names tuner.max_seconds: %s" % ev[-1:])

        # a deadline that passes while hpod is down
        later = hp.ok("POST", "/api/v1/studies",
                      {"name": "restart", "space": SPACE, "tuner": {"max_seconds": 2}})
        c.check(hp.stop() == 0, "hpod stops")
        time.sleep(max(0.0, later["created"] + 2.1 - time.time()))
        hp2 = Hpod(args.hpod, data_dir=hp.data_dir).start()
        try:
            done = eventually(lambda: hp2.ok("GET", "/api/v1/studies/%d" % later["id"])["state"] == "complete", 20)
            c.check(done, "a deadline passed while hpod was down: complete after the restart")
        finally:
            hp2.stop()
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
