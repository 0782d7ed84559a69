"""Server behaviour: health, metrics, the served contract, bearer token,
graceful shutdown (SIGTERM, and SIGHUP: the terminal closing; it killed
hpod without its shutdown), flags."""
import signal
import subprocess

from hpod import Checks, Hpod, parse_args


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--token", "s3cret"]).start()
    try:
        status, h = hp.request("GET", "/healthz")
        c.check(status == 200 and h["status"] == "ok" and h["version"], "healthz")
        status, yaml = hp.request("GET", "/api/v1/openapi.yaml")
        c.check(status == 200 and "openapi: 3" in yaml and "/api/v1/studies/{id}/ask" in yaml, "openapi served")

        study = {"name": "auth", "space": {"b": {"type": "bool"}}}
        status, out = hp.request("POST", "/api/v1/studies", study)
        c.check(status == 401 and out["error"]["code"] == "unauthorized", "mutating call without token is 401")
        status, out = hp.request("POST", "/api/v1/studies", study, headers={"Authorization": "Bearer wrong"})
        c.check(status == 401, "wrong token is 401")
        auth = {"Authorization": "Bearer s3cret"}
        status, out = hp.request("POST", "/api/v1/studies", study, headers=auth)
        c.check(status == 201 and out["id"] >= 1, "right token creates the study")
        sid = out["id"]
        status, _ = hp.request("GET", "/api/v1/studies/%d" % sid)
        c.check(status == 200, "reads need no token")
        status, t = hp.request("POST", "/api/v1/studies/%d/ask" % sid, headers=auth)
        c.check(status == 200 and isinstance(t["params"]["b"], bool), "ask with token; bool param is a JSON bool")
        status, _ = hp.request("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": 1}, headers=auth)
        c.check(status == 200, "tell with token")
        status, _ = hp.request("DELETE", "/api/v1/studies/%d" % sid)
        c.check(status == 401, "delete without token is 401")

        status, m = hp.request("GET", "/metrics")
        c.check(status == 200 and 'hpo_http_requests_total{route="studies.create",status="401"}' in m,
                "metrics count requests by route and status")
        c.check('hpo_trials{state="complete"} 1' in m, "metrics count trials by state")
        c.check('hpo_ask_tell_seconds_count{op="ask"} 1' in m and 'hpo_ask_tell_seconds_bucket{op="tell",le="+Inf"} 1' in m,
                "metrics have the ask/tell latency histogram")

        status, _ = hp.request("DELETE", "/api/v1/studies/%d" % sid, headers=auth)
        c.check(status == 204, "delete with token")
        status, _ = hp.request("GET", "/api/v1/studies/%d" % sid)
        c.check(status == 404, "deleted study is gone")
        status, _ = hp.request("GET", "/api/v1/trials/%d" % t["trial_id"])
        c.check(status == 404, "its trials are gone")
        c.check(hp.stop() == 0, "SIGTERM: graceful exit 0")
    finally:
        hp.cleanup()

    hp = Hpod(args.hpod).start()
    try:
        sid = hp.ok("POST", "/api/v1/studies", {"name": "hup", "space": {"b": {"type": "bool"}}})["id"]
        hp.proc.send_signal(signal.SIGHUP)
        try:
            rc = hp.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
        c.check(rc == 0 and "received SIGHUP: shutting down" in hp.log_tail(5),
                "SIGHUP: graceful exit 0 (%s: %s)" % (rc, hp.log_tail(3)))
        hp.start()
        c.check(hp.ok("GET", "/api/v1/studies/%d" % sid)["name"] == "hup", "the study is there after it")
        c.check(hp.stop() == 0, "SIGTERM: graceful exit 0")
    finally:
        hp.cleanup()

    r = subprocess.run([args.hpod, "--version"], capture_output=True, text=True, timeout=10)
    c.check(r.returncode == 0 and r.stdout.startswith("hpod "), "--version")
    r = subprocess.run([args.hpod, "--help"], capture_output=True, text=True, timeout=10)
    c.check(r.returncode == 0 and "--data-dir" in r.stdout and "--token" in r.stdout, "--help lists the flags")
    r = subprocess.run([args.hpod, "--port", "99999"], capture_output=True, text=True, timeout=10)
    c.check(r.returncode == 2 and "--port" in r.stderr, "a bad flag is refused with exit 2")
    r = subprocess.run([args.hpod, "--bind", "not-an-ip", "--port", "0", "--data-dir", "/tmp/hpo-bind-test"],
                       capture_output=True, text=True, timeout=10)
    c.check(r.returncode != 0 and "bind" in r.stderr, "a bad --bind is refused")
    c.finish()


if __name__ == "__main__":
    main()
