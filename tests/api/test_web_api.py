"""The dashboard's server side: GET / and /assets/{file} from the table
embedded in hpod (content types, caching, 404s), and
GET /api/v1/studies/{id}/importance on a study where lr matters most and
dropout not at all."""
import re
import urllib.request

from hpod import Checks, Hpod, parse_args
import webdata


def get_raw(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def main():
    args = parse_args()
    c = Checks()
    hp = Hpod(args.hpod, args=["--token", "t0k"]).start()
    try:
        status, headers, body = get_raw(hp.url + "/")
        c.check(status == 200 and headers["Content-Type"].startswith("text/html"), "GET / is the dashboard page")
        c.check(headers.get("Cache-Control") == "no-cache", "the page is revalidated (Cache-Control: no-cache)")
        page = body.decode()
        c.check("__HPO_BUILD__" not in page, "the build id is stamped into the page")
        assets = re.findall(r'(?:src|href)="(/assets/[^"?]+)\?v=([0-9a-f]{16})"', page)
        c.check(len(assets) >= 4, "the page names its assets with ?v=<build id>: %s" % assets)
        types = {".js": "text/javascript", ".css": "text/css"}
        for path, v in assets:
            status, headers, body = get_raw(hp.url + path + "?v=" + v)
            ext = path[path.rfind("."):]
            c.check(status == 200 and headers["Content-Type"].startswith(types[ext]) and len(body) > 100,
                    "%s served as %s" % (path, types[ext]))
            c.check(headers.get("Cache-Control") == "public, max-age=31536000, immutable",
                    "%s with the build id is cached for a year" % path)
            status, headers, _ = get_raw(hp.url + path)
            c.check(status == 200 and headers.get("Cache-Control") == "no-cache", "%s without the id: no-cache" % path)
        status, headers, body = get_raw(hp.url + "/assets/echarts.min.js")
        if status == 404:
            print("note: this hpod was built without web/node_modules: no echarts.min.js")
        else:
            c.check(status == 200 and len(body) > 500000, "ECharts is embedded")
        for bad in ["/assets/nope.js", "/assets/.hidden", "/assets/", "/assets/a/b.js", "/index.htm"]:
            status, out = hp.request("GET", bad)
            c.check(status == 404 and out["error"]["code"] == "not_found", "GET %s is a JSON 404" % bad)
        status, out = hp.request("POST", "/")
        c.check(status in (401, 405), "POST / is refused (%d)" % status)

        # importance: lr matters, dropout does not
        auth = "t0k"
        cl = webdata.Client(hp.port, token=auth)
        sid = cl.call("POST", "/api/v1/studies", {"name": "imp", "space": webdata.SPACE,
                                                  "tuner": {"algorithm": "random", "seed": 5}})["id"]
        status, out = hp.request("GET", "/api/v1/studies/%d/importance" % sid)
        c.check(status == 200 and out["n_trials"] == 0 and len(out["importance"]) == 5
                and all(i["importance"] is None for i in out["importance"]),
                "importance without trials: every parameter listed, null figures")
        for _ in range(150):
            t = cl.call("POST", "/api/v1/studies/%d/ask" % sid)
            cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": webdata.final_loss(t["params"])})
        t = cl.call("POST", "/api/v1/studies/%d/ask" % sid)  # a running one is left out
        cl.close()
        status, out = hp.request("GET", "/api/v1/studies/%d/importance" % sid)
        imp = {i["param"]: i["importance"] for i in out["importance"]}
        print("importance:", {k: round(v, 3) for k, v in imp.items()}, "in %.1f ms" % (out["seconds"] * 1e3))
        c.check(status == 200 and out["n_trials"] == 150, "importance over the 150 complete trials")
        c.check(abs(sum(imp.values()) - 1) < 1e-6, "shares sum to 1")
        c.check(out["importance"][0]["param"] == "lr" and imp["lr"] > 0.6, "lr matters most")
        c.check(imp["dropout"] < 0.05, "dropout does not matter")
        status, again = hp.request("GET", "/api/v1/studies/%d/importance" % sid)
        c.check([i["importance"] for i in again["importance"]] == [i["importance"] for i in out["importance"]],
                "the same trials give the same figures")
        status, out = hp.request("GET", "/api/v1/studies/99999/importance")
        c.check(status == 404 and out["error"]["field"] == "id", "importance of an unknown study is 404")
        status, m = hp.request("GET", "/metrics")
        c.check('route="static.asset"' in m and 'route="studies.importance"' in m, "metrics label the new routes")
    finally:
        hp.cleanup()
    c.finish()


if __name__ == "__main__":
    main()
