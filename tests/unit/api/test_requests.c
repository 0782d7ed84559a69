/* test_requests.c - request rules of the api in-process: HEAD goes to the
 * GET route, pause/resume/cancel take no body but {}, an event stream
 * ends within a second of its client leaving (api_request.client_gone),
 * and a 500 from the database says what failed in the database's words. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "db_internal.h"

static api_ctx *ctx;
static sto_db *db;

static int setup(void **state) {
    if (sto_open(":memory:", STO_SYNC_NORMAL, &db)) return -1;
    return api_ctx_new(db, NULL, &ctx);
}

static int teardown(void **state) {
    api_ctx_free(ctx);
    sto_close(db);
    return 0;
}

static int call(const char *method, const char *path, const char *body, api_response *resp) {
    api_request req = {.method = method, .path = path, .body = body, .body_len = body ? strlen(body) : 0};
    api_handle(ctx, &req, resp);
    return resp->status;
}

static int status_of(const char *method, const char *path, const char *body) {
    api_response resp;
    int st = call(method, path, body, &resp);
    api_response_clear(&resp);
    return st;
}

static void test_head_is_get(void **state) {
    api_response g, h;
    assert_int_equal(call("GET", "/healthz", NULL, &g), 200);
    assert_int_equal(call("HEAD", "/healthz", NULL, &h), 200);
    assert_int_equal(g.body_len, h.body_len); /* the server drops the body, not the api */
    assert_string_equal(h.route, "healthz");
    api_response_clear(&g);
    api_response_clear(&h);
    assert_string_equal(api_route_name("HEAD", "/api/v1/studies"), "studies.list");
    assert_int_equal(status_of("HEAD", "/api/v1/studies/1/ask", NULL), 405);
    assert_int_equal(status_of("HEAD", "/nope", NULL), 404);
}

static void test_control_bodies(void **state) {
    assert_int_equal(status_of("POST", "/api/v1/studies",
                               "{\"name\": \"c\", \"space\": {\"b\": {\"type\": \"bool\"}}}"), 201);
    static const char *bad[] = {"garbage", "[1]", "\"x\"", "{\"force\": true}", "{"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(status_of("POST", "/api/v1/studies/1/pause", bad[i]), 400);
        assert_int_equal(status_of("POST", "/api/v1/studies/1/cancel", bad[i]), 400);
    }
    assert_int_equal(status_of("POST", "/api/v1/studies/1/pause", "{}"), 200);
    assert_int_equal(status_of("POST", "/api/v1/studies/1/resume", "garbage"), 400);
    assert_int_equal(status_of("POST", "/api/v1/studies/1/resume", NULL), 200);
}

static int gone_asked;
static int client_gone(void *arg) {
    gone_asked++;
    return 1;
}

static void test_stream_ends_when_client_leaves(void **state) {
    assert_int_equal(status_of("POST", "/api/v1/studies",
                               "{\"name\": \"s\", \"space\": {\"b\": {\"type\": \"bool\"}}}"), 201);
    api_request req = {.method = "GET", .path = "/api/v1/studies/2/events", .client_gone = client_gone};
    api_response resp;
    api_handle(ctx, &req, &resp);
    assert_int_equal(resp.status, 200);
    assert_non_null(resp.stream);
    char buf[4096];
    long n = resp.stream(resp.stream_arg, buf, sizeof buf - 1);
    assert_true(n > 0); /* "retry: ..." */
    n = resp.stream(resp.stream_arg, buf, sizeof buf - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "event: study_created"));
    assert_int_equal(gone_asked, 0);
    /* no more events: the stream waits, asks whether its client is there
     * and ends (it used to wait 10 s and send a keep-alive comment) */
    n = resp.stream(resp.stream_arg, buf, sizeof buf - 1);
    assert_int_equal(n, -1);
    assert_int_equal(gone_asked, 1);
    resp.stream_free(resp.stream_arg);
}

static void test_storage_error_says_why(void **state) {
    assert_int_equal(status_of("POST", "/api/v1/studies", "{\"name\": \"w\", \"space\": {\"b\": {\"type\": \"bool\"}}}"),
                     201);
    assert_int_equal(sto_db_exec_sql(db, "CREATE TRIGGER no_trials BEFORE INSERT ON trials"
                                         " BEGIN SELECT RAISE(ABORT, 'injected fault'); END"), 0);
    api_response resp;
    int st = call("POST", "/api/v1/studies/1/ask", "{}", &resp);
    char body[512] = {0};
    memcpy(body, resp.body, resp.body_len < sizeof body - 1 ? resp.body_len : sizeof body - 1);
    printf("ask with trials refused by the database: %d %s\n", st, body);
    assert_int_equal(st, 500);
    assert_non_null(strstr(body, "injected fault"));
    api_response_clear(&resp);
    /* the next request does not inherit the reason */
    assert_int_equal(call("GET", "/api/v1/studies/9", NULL, &resp), 404);
    assert_null(strstr(resp.body, "injected"));
    api_response_clear(&resp);
    assert_int_equal(sto_db_exec_sql(db, "DROP TRIGGER no_trials"), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_is_get),
        cmocka_unit_test(test_control_bodies),
        cmocka_unit_test(test_stream_ends_when_client_leaves),
        cmocka_unit_test(test_storage_error_says_why),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
