/* test_api.c - the api in-process (no HTTP): validation, ask/report/tell,
 * best, lease expiry, and replay of a study's history by a fresh context
 * (what a restarted hpod does). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "jobs.h"
#include "api/api_testutil.h"

static json_t *call(api_ctx *ctx, const char *method, const char *path, const char *body, int *status) {
    return api_test_call(ctx, method, path, body, status);
}

static const char *STUDY =
    "{\"name\": \"t\", \"objective\": {\"direction\": \"maximize\"}, \"space\": {"
    "\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1},"
    "\"opt\": {\"type\": \"choice\", \"values\": [\"a\", \"b\"]},"
    "\"k\": {\"type\": \"int\", \"low\": 1, \"high\": 9, \"condition\": {\"opt\": [\"b\"]}}},"
    "\"tuner\": {\"algorithm\": \"random\", \"seed\": 5, \"lease_seconds\": 30}}";

static void test_validation_errors_name_fields(void **state) {
    sto_db *db;
    api_ctx *ctx;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(api_ctx_new(db, NULL, &ctx), 0);
    static const struct {
        const char *body, *field;
        int status;
    } cases[] = {
        {"{\"space\": {\"lr\": {\"type\": \"float\", \"low\": 2, \"high\": 1}}}", "space.lr.low", 400},
        {"{\"space\": {\"b\": {\"type\": \"bool\"}}, \"tuner\": {\"algorithm\": \"nope\"}}", "tuner.algorithm", 400},
        {"{\"space\": {\"b\": {\"type\": \"bool\"}}, \"objective\": {\"direction\": 1}}", "objective.direction", 400},
        {"{\"name\": \"\", \"space\": {\"b\": {\"type\": \"bool\"}}}", "name", 400},
        {"{\"space\": {\"b\": {\"type\": \"bool\"}}, \"model\": {}}", "dataset", 400},
        {"not json", "", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status;
        json_t *j = call(ctx, "POST", "/api/v1/studies", cases[i].body, &status);
        const char *field = json_string_value(json_object_get(json_object_get(j, "error"), "field"));
        printf("%-70.70s -> %d %s\n", cases[i].body, status, field ? field : "(null)");
        assert_int_equal(status, cases[i].status);
        assert_non_null(field);
        assert_string_equal(field, cases[i].field);
        json_decref(j);
    }
    api_ctx_free(ctx);
    sto_close(db);
}

/* Found by fuzz_http: an error message quoting client bytes that are not
 * UTF-8 (a path, a method) could not be encoded, and the answer was a 500. */
static void test_client_bytes_in_errors(void **state) {
    sto_db *db;
    api_ctx *ctx;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(api_ctx_new(db, NULL, &ctx), 0);
    static const struct {
        const char *method, *path;
        int status;
    } cases[] = {
        {"GET", "/metr\xff\xfe" "cs", 404},
        {"POST", "/api/v1/datasets\xfe\xff\x0f", 404},
        {"G\xc3T", "/api/v1/studies", 405},
        {"GET", "/api/v1/studies/1/\xe2\x82", 404},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status;
        json_t *j = call(ctx, cases[i].method, cases[i].path, NULL, &status);
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        printf("%s %s -> %d %s\n", cases[i].method, cases[i].path, status, msg ? msg : "(null)");
        assert_int_equal(status, cases[i].status);
        assert_non_null(msg);
        json_decref(j);
    }
    api_ctx_free(ctx);
    sto_close(db);
}

static void test_ask_tell_best_and_leases(void **state) {
    sto_db *db;
    api_ctx *ctx;
    int status;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(api_ctx_new(db, NULL, &ctx), 0);
    json_t *s = call(ctx, "POST", "/api/v1/studies", STUDY, &status);
    assert_int_equal(status, 201);
    long long sid = json_integer_value(json_object_get(s, "id"));
    json_decref(s);
    char path[128], body[128];
    double best = -1;
    long long ids[10];
    for (int i = 0; i < 10; i++) {
        snprintf(path, sizeof path, "/api/v1/studies/%lld/ask", sid);
        json_t *t = call(ctx, "POST", path, NULL, &status);
        assert_int_equal(status, 200);
        assert_int_equal(json_integer_value(json_object_get(t, "number")), i);
        ids[i] = json_integer_value(json_object_get(t, "trial_id"));
        json_t *p = json_object_get(t, "params");
        const char *opt = json_string_value(json_object_get(p, "opt"));
        assert_int_equal(json_object_get(p, "k") != NULL, strcmp(opt, "b") == 0);
        double x = json_number_value(json_object_get(p, "x"));
        json_decref(t);
        if (i >= 8) continue; /* two stay running */
        snprintf(path, sizeof path, "/api/v1/trials/%lld/report", ids[i]);
        json_t *r = call(ctx, "POST", path, "{\"step\": 0, \"value\": 0.1}", &status);
        assert_int_equal(status, 200);
        assert_true(json_is_false(json_object_get(r, "prune")));
        json_decref(r);
        snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", ids[i]);
        snprintf(body, sizeof body, "{\"repeats\": [%.17g, %.17g]}", x, x + 0.01);
        json_decref(call(ctx, "POST", path, body, &status));
        assert_int_equal(status, 200);
        if (x + 0.005 > best) best = x + 0.005;
    }
    snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", ids[0]);
    json_decref(call(ctx, "POST", path, "{\"value\": 1}", &status));
    assert_int_equal(status, 409);

    snprintf(path, sizeof path, "/api/v1/studies/%lld/best", sid);
    json_t *b = call(ctx, "GET", path, NULL, &status);
    assert_int_equal(status, 200);
    json_t *top = json_array_get(json_object_get(b, "trials"), 0);
    printf("best %.6f (expected %.6f), std %.6f over %lld executions\n",
           json_number_value(json_object_get(top, "value")), best,
           json_number_value(json_object_get(top, "value_std")),
           json_integer_value(json_object_get(top, "value_n")));
    assert_true(fabs(json_number_value(json_object_get(top, "value")) - best) < 1e-12);
    assert_int_equal(json_integer_value(json_object_get(top, "value_n")), 2);
    json_decref(b);

    /* Leases: nothing expires now; 60 s later the two running trials fail. */
    assert_int_equal(api_expire_leases(ctx, hpo_now()), 0);
    assert_int_equal(api_expire_leases(ctx, hpo_now() + 60), 2);
    /* asked here (asked.c: the tell does not read the trial first), so
     * the finish's guard finds it failed, and the tell reads it then */
    snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", ids[9]);
    json_t *refused = call(ctx, "POST", path, "{\"value\": 1}", &status);
    assert_int_equal(status, 409);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(refused, "error"), "message")),
                           "is already failed"));
    json_decref(refused);
    snprintf(path, sizeof path, "/api/v1/trials/%lld", ids[9]);
    json_t *t = call(ctx, "GET", path, NULL, &status);
    assert_string_equal(json_string_value(json_object_get(t, "state")), "failed");
    assert_string_equal(json_string_value(json_object_get(t, "error")), "lease expired");
    json_decref(t);
    api_ctx_free(ctx);
    sto_close(db);
}

/* Two databases fed the same calls give the same suggestions, and a fresh
 * context over a database (a restart) continues exactly where the old one
 * would have. */
static void test_replay_is_deterministic(void **state) {
    char dir[] = "/tmp/hpo-api-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path_db[256];
    snprintf(path_db, sizeof path_db, "%s/a.db", dir);
    sto_db *a, *b;
    api_ctx *ca, *cb;
    int status;
    assert_int_equal(sto_open(path_db, STO_SYNC_NORMAL, &a), 0);
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &b), 0);
    assert_int_equal(api_ctx_new(a, NULL, &ca), 0);
    assert_int_equal(api_ctx_new(b, NULL, &cb), 0);
    json_decref(call(ca, "POST", "/api/v1/studies", STUDY, &status));
    json_decref(call(cb, "POST", "/api/v1/studies", STUDY, &status));
    for (int i = 0; i < 6; i++) {
        json_t *ta = call(ca, "POST", "/api/v1/studies/1/ask", NULL, &status);
        json_t *tb = call(cb, "POST", "/api/v1/studies/1/ask", NULL, &status);
        assert_true(json_equal(json_object_get(ta, "params"), json_object_get(tb, "params")));
        char path[64];
        snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", json_integer_value(json_object_get(ta, "trial_id")));
        json_decref(call(ca, "POST", path, "{\"value\": 0.5}", &status));
        json_decref(call(cb, "POST", path, "{\"value\": 0.5}", &status));
        json_decref(ta);
        json_decref(tb);
    }
    /* "restart" a: a new context over the same file replays the history */
    api_ctx_free(ca);
    sto_close(a);
    assert_int_equal(sto_open(path_db, STO_SYNC_NORMAL, &a), 0);
    assert_int_equal(api_ctx_new(a, NULL, &ca), 0);
    json_t *ta = call(ca, "POST", "/api/v1/studies/1/ask", NULL, &status);
    json_t *tb = call(cb, "POST", "/api/v1/studies/1/ask", NULL, &status);
    assert_int_equal(json_integer_value(json_object_get(ta, "number")), 6);
    assert_true(json_equal(json_object_get(ta, "params"), json_object_get(tb, "params")));
    json_decref(ta);
    json_decref(tb);
    api_ctx_free(ca);
    api_ctx_free(cb);
    sto_close(a);
    sto_close(b);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation_errors_name_fields),
        cmocka_unit_test(test_client_bytes_in_errors),
        cmocka_unit_test(test_ask_tell_best_and_leases),
        cmocka_unit_test(test_replay_is_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
