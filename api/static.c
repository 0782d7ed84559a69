/* static.c - the dashboard: GET / and GET /assets/{file}, served from the
 * table web/CMakeLists.txt embeds into hpod (web_assets.h).
 *
 * Caching: index.html is revalidated on every load ("no-cache"); it names
 * its assets with ?v=<build id>, and an asset asked for with the current
 * build id may be kept for a year ("immutable"). Without the id (a hand-typed
 * URL) an asset is "no-cache" too, so a stale copy is never pinned. */
#include <string.h>

#include "api_internal.h"
#include "web_assets.h"

static const hpo_web_asset *find(const char *path) {
    size_t lo = 0, hi = hpo_web_assets_count; /* the table is sorted by path */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(hpo_web_assets[mid].path, path);
        if (c == 0) return &hpo_web_assets[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void serve(const hpo_web_asset *a, const char *cache_control, api_response *resp) {
    api_reply_text(resp, 200, a->content_type, (const char *)a->data, a->len);
    resp->cache_control = cache_control;
}

void api_h_static_index(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    const hpo_web_asset *a = find("/index.html");
    if (!a) {
        api_fail(resp, 404, "not_found", "", "this hpod was built without its dashboard");
        return;
    }
    serve(a, "no-cache", resp);
}

void api_h_static_asset(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    const hpo_web_asset *a = strncmp(req->path, "/assets/", 8) == 0 ? find(req->path) : NULL;
    if (!a) {
        api_fail(resp, 404, "not_found", "path", "no asset %.200s", req->path);
        return;
    }
    const char *v = req->query ? req->query(req->query_arg, "v") : NULL;
    serve(a, v && strcmp(v, hpo_web_build_id) == 0 ? "public, max-age=31536000, immutable" : "no-cache",
          resp);
}
