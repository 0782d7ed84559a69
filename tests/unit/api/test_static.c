/* test_static.c - the dashboard's files in-process: the embedded table is
 * sorted (static.c searches it by halves) and typed, GET / and
 * GET /assets/{file} answer with the right type and caching, and anything
 * else under /assets is a JSON 404. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "web_assets.h"

static const char *query_v(void *arg, const char *key) { return strcmp(key, "v") == 0 ? arg : NULL; }

static void get(api_ctx *ctx, const char *path, const char *v, api_response *resp) {
    api_request req = {.method = "GET", .path = path, .query = query_v, .query_arg = (void *)v};
    api_handle(ctx, &req, resp);
}

static void test_table(void **state) {
    printf("%lu assets, build %s\n", hpo_web_assets_count, hpo_web_build_id);
    assert_true(hpo_web_assets_count >= 5); /* index.html, style.css, api.js, charts.js, app.js */
    assert_int_equal(strlen(hpo_web_build_id), 16);
    for (unsigned long i = 0; i < hpo_web_assets_count; i++) {
        const hpo_web_asset *a = &hpo_web_assets[i];
        printf("  %-28s %-32s %lu bytes\n", a->path, a->content_type, a->len);
        if (i) assert_true(strcmp(hpo_web_assets[i - 1].path, a->path) < 0);
        assert_true(a->len > 0 && a->data && strchr(a->content_type, '/'));
        assert_null(strstr((const char *)a->data, "__HPO_BUILD__"));
    }
}

static void test_serving(void **state) {
    sto_db *db;
    api_ctx *ctx;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(api_ctx_new(db, NULL, &ctx), 0);
    api_response r;

    get(ctx, "/", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/html; charset=utf-8");
    assert_string_equal(r.cache_control, "no-cache");
    assert_non_null(strstr(r.body, hpo_web_build_id)); /* assets named with ?v=<build id> */
    assert_string_equal(r.route, "static.index");
    api_response_clear(&r);

    get(ctx, "/assets/app.js", hpo_web_build_id, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/javascript; charset=utf-8");
    assert_string_equal(r.cache_control, "public, max-age=31536000, immutable");
    api_response_clear(&r);
    get(ctx, "/assets/style.css", "0123456789abcdef", &r); /* another build's id */
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/css; charset=utf-8");
    assert_string_equal(r.cache_control, "no-cache");
    api_response_clear(&r);

    static const char *missing[] = {"/assets/nope.js", "/assets/.hidden", "/assets/", "/assets/a/b.js",
                                    "/assets/app.js/", "/assets/%2e%2e"};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        get(ctx, missing[i], NULL, &r);
        printf("GET %-20s -> %d %s\n", missing[i], r.status, r.body);
        assert_int_equal(r.status, 404);
        assert_string_equal(r.content_type, "application/json");
        assert_null(r.cache_control); /* errors stay no-store */
        assert_non_null(strstr(r.body, "\"not_found\""));
        api_response_clear(&r);
    }
    api_ctx_free(ctx);
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_serving),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
