/* test_log_format.c - hpod's log lines (common/log.c): --log-format json
 * gives one valid JSON object per line with ts, level, msg and the fields,
 * whatever bytes the message holds (control characters, quotes, bytes that
 * are not UTF-8) and however long it or a field is (cut and marked "...",
 * still valid, the fields kept); the text format quotes field values that
 * need it; in both, control characters a client may send (ASCII, C1,
 * U+2028/U+2029) are escaped. */
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

#include "hpo.h"

static json_t *json_line(const char *msg, const hpo_log_field *f, size_t n, size_t cap, char *buf) {
    size_t len = hpo_log_format_line(buf, cap, HPO_LOG_JSON, 1700000000.25, HPO_LOG_INFO, f, n, msg);
    assert_int_equal(len, strlen(buf));
    assert_true(len < cap);
    assert_null(strchr(buf, '\n'));
    json_error_t err;
    json_t *j = json_loads(buf, 0, &err);
    if (!j) fail_msg("not JSON (%s): %s", err.text, buf);
    return j;
}

static void test_json_fields(void **state) {
    char buf[HPO_LOG_LINE_MAX];
    hpo_log_field f[] = {HPO_LOG_STR("route", "studies.create"), HPO_LOG_NUM("status", 400),
                         HPO_LOG_NUM("ms", 0.25), HPO_LOG_STR("field", "space.lr.low"),
                         HPO_LOG_STR("error", "low \"must\" be < high\n\tand\\ \x01 \xc3\xa9 \xff\xfe \xed\xa0\x80"),
                         HPO_LOG_STR("none", NULL), HPO_LOG_NUM("nan", NAN)};
    json_t *j = json_line("POST /api/v1/studies 400", f, sizeof f / sizeof f[0], sizeof buf, buf);
    assert_string_equal(json_string_value(json_object_get(j, "ts")), "2023-11-14T22:13:20.250Z");
    assert_string_equal(json_string_value(json_object_get(j, "level")), "info");
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "POST /api/v1/studies 400");
    assert_string_equal(json_string_value(json_object_get(j, "route")), "studies.create");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 400);
    assert_true(json_real_value(json_object_get(j, "ms")) == 0.25);
    assert_string_equal(json_string_value(json_object_get(j, "field")), "space.lr.low");
    /* é kept, \xff \xfe and the surrogate's bytes each U+FFFD */
    assert_string_equal(json_string_value(json_object_get(j, "error")),
                        "low \"must\" be < high\n\tand\\ \x01 \xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd "
                        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    assert_string_equal(json_string_value(json_object_get(j, "none")), "");
    assert_true(json_is_null(json_object_get(j, "nan")));
    json_decref(j);
}

static void test_json_cut(void **state) {
    char big[HPO_LOG_LINE_MAX * 2];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = i % 7 == 0 ? '"' : (char)('a' + i % 26);
    big[sizeof big - 1] = '\0';
    hpo_log_field f[] = {HPO_LOG_STR("route", "x"), HPO_LOG_STR("error", big)};
    for (size_t cap = 128; cap <= HPO_LOG_LINE_MAX; cap = cap * 3 + 1) {
        char *buf = malloc(cap);
        json_t *j = json_line(big, f, 2, cap, buf); /* cut inside the message */
        assert_non_null(json_object_get(j, "msg"));
        json_decref(j);
        /* a field too long is cut, or left out whole where even that does
         * not fit; the short one before it stays */
        j = json_line("short", f, 2, cap, buf);
        assert_string_equal(json_string_value(json_object_get(j, "msg")), "short");
        assert_string_equal(json_string_value(json_object_get(j, "route")), "x");
        const char *error = json_string_value(json_object_get(j, "error"));
        if (cap < 1024) assert_null(error);
        if (error) {
            assert_true(strlen(error) < 1024);
            assert_string_equal(error + strlen(error) - 3, "...");
            assert_memory_equal(error, big, strlen(error) - 3);
        }
        json_decref(j);
        free(buf);
    }
}

/* A message that escapes to more than the line (a request path of control
 * bytes or bytes that are not UTF-8: six bytes each in JSON) is cut, marked
 * "...", and the fields after it stay; so does a short field after a huge
 * one. */
static void test_long_message_keeps_fields(void **state) {
    char msg[2048], big[HPO_LOG_LINE_MAX * 2], buf[HPO_LOG_LINE_MAX];
    memcpy(msg, "GET /x", 6);
    memset(msg + 6, 1, sizeof msg - 7);
    msg[sizeof msg - 1] = '\0';
    memset(big, 0xff, sizeof big - 1);
    big[sizeof big - 1] = '\0';
    hpo_log_field f[] = {HPO_LOG_STR("route", "unmatched"), HPO_LOG_NUM("status", 404), HPO_LOG_NUM("bytes_in", 0),
                         HPO_LOG_NUM("ms", 0.5), HPO_LOG_STR("code", "not_found"), HPO_LOG_STR("field", big),
                         HPO_LOG_STR("error", big), HPO_LOG_STR("after", "kept")};
    size_t nf = sizeof f / sizeof f[0];
    json_t *j = json_line(msg, f, nf, sizeof buf, buf);
    const char *m = json_string_value(json_object_get(j, "msg"));
    assert_memory_equal(m, "GET /x\x01\x01", 8);
    assert_string_equal(m + strlen(m) - 3, "...");
    assert_string_equal(json_string_value(json_object_get(j, "route")), "unmatched");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 404);
    assert_non_null(json_object_get(j, "bytes_in"));
    assert_non_null(json_object_get(j, "ms"));
    assert_string_equal(json_string_value(json_object_get(j, "code")), "not_found");
    const char *field = json_string_value(json_object_get(j, "field"));
    assert_non_null(field);
    assert_string_equal(field + strlen(field) - 3, "...");
    assert_non_null(json_object_get(j, "error"));
    assert_string_equal(json_string_value(json_object_get(j, "after")), "kept");
    json_decref(j);

    /* the text format: each control byte four bytes */
    size_t len = hpo_log_format_line(buf, sizeof buf, HPO_LOG_TEXT, 1700000000.0, HPO_LOG_INFO, f, nf, msg);
    assert_int_equal(len, strlen(buf));
    assert_non_null(strstr(buf, " INFO  GET /x\\x01\\x01"));
    assert_non_null(strstr(buf, "\\x01... route=unmatched status=404 bytes_in=0 ms=0.5 code=not_found field=\""));
    assert_non_null(strstr(buf, "...\" after=kept"));
}

static void test_text(void **state) {
    char buf[512];
    hpo_log_field f[] = {HPO_LOG_STR("route", "trials.tell"), HPO_LOG_NUM("status", 409),
                         HPO_LOG_STR("field", ""), HPO_LOG_STR("error", "trial 3 is \"complete\"")};
    hpo_log_format_line(buf, sizeof buf, HPO_LOG_TEXT, 1700000000.0, HPO_LOG_WARN, f, 4, "POST /x 409");
    assert_string_equal(buf, "2023-11-14T22:13:20.000Z WARN  POST /x 409 route=trials.tell status=409 field=\"\" "
                             "error=\"trial 3 is \\\"complete\\\"\"");
    /* a request path that would forge a line, or move the terminal's cursor:
     * its control bytes escaped; quotes in a message stay as they are */
    hpo_log_format_line(buf, sizeof buf, HPO_LOG_TEXT, 1700000000.0, HPO_LOG_INFO, NULL, 0,
                        "GET /x\n2023-01-01T00:00:00.000Z ERROR forged\r\x1b[31m \"q\" 404");
    assert_string_equal(buf, "2023-11-14T22:13:20.000Z INFO  GET /x\\n2023-01-01T00:00:00.000Z ERROR forged"
                             "\\r\\x1b[31m \"q\" 404");
    /* nor can the C1 controls (NEL, CSI) or U+2028/U+2029, which line
     * splitters and terminals also obey; other characters stay */
    hpo_log_field g[] = {HPO_LOG_STR("error", "a\xc2\x85" "b\xe2\x80\xa9" "c\xc2\xa0" "d")};
    hpo_log_format_line(buf, sizeof buf, HPO_LOG_TEXT, 1700000000.0, HPO_LOG_INFO, g, 1,
                        "GET /a\xc2\x85" "b\xe2\x80\xa8" "c\xc2\x9b" "2J\xc2\x80\xc2\x9f \xc3\xa9\xe2\x80\xa7 404");
    assert_string_equal(buf, "2023-11-14T22:13:20.000Z INFO  GET /a\\u0085b\\u2028c\\u009b2J\\u0080\\u009f "
                             "\xc3\xa9\xe2\x80\xa7 404 error=\"a\\u0085b\\u2029c\xc2\xa0" "d\"");
    char jbuf[512];
    json_t *j = json_line("GET /a\xc2\x85" "b\xe2\x80\xa8", g, 1, sizeof jbuf, jbuf);
    assert_null(strstr(jbuf, "\xc2\x85"));
    assert_null(strstr(jbuf, "\xe2\x80\xa8"));
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "GET /a\xc2\x85" "b\xe2\x80\xa8");
    assert_string_equal(json_string_value(json_object_get(j, "error")), "a\xc2\x85" "b\xe2\x80\xa9" "c\xc2\xa0" "d");
    json_decref(j);
    /* a message that could read as fields is quoted as a value is: the
     * line's status is the field's, not the path's */
    hpo_log_field h[] = {HPO_LOG_NUM("status", 404)};
    hpo_log_format_line(buf, sizeof buf, HPO_LOG_TEXT, 1700000000.0, HPO_LOG_INFO, h, 1,
                        "GET /x status=200 route=\"a\" 404");
    assert_string_equal(buf, "2023-11-14T22:13:20.000Z INFO  \"GET /x status=200 route=\\\"a\\\" 404\" status=404");
    hpo_log_format_line(buf, sizeof buf, HPO_LOG_TEXT, 1700000000.0, HPO_LOG_INFO, NULL, 0, "\"q\" x");
    assert_string_equal(buf, "2023-11-14T22:13:20.000Z INFO  \"\\\"q\\\" x\"");
    /* cut inside a quoted message: the quote still closes it */
    char small[96];
    char long_msg[400];
    memset(long_msg, 'a', sizeof long_msg - 1);
    long_msg[sizeof long_msg - 1] = 0;
    long_msg[5] = '=';
    hpo_log_format_line(small, sizeof small, HPO_LOG_TEXT, 1700000000.0, HPO_LOG_INFO, h, 1, long_msg);
    printf("cut quoted message: %s\n", small);
    assert_true(strlen(small) > 30 && small[strlen(small) - 1] == '"');
    assert_int_equal(hpo_log_format_parse("json"), HPO_LOG_JSON);
    assert_int_equal(hpo_log_format_parse("text"), HPO_LOG_TEXT);
    assert_int_equal(hpo_log_format_parse("xml"), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_fields),
        cmocka_unit_test(test_json_cut),
        cmocka_unit_test(test_long_message_keeps_fields),
        cmocka_unit_test(test_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
