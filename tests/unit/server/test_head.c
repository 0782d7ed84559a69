/* test_head.c - the gate's check of a request head: good heads complete at
 * their blank line (and every prefix asks for more), every malformed head
 * libmicrohttpd would answer in HTML gets our status, code and field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head.h"

static int check(const char *s, srv_head *h) { return srv_head_check(s, strlen(s), NULL, h); }

static void expect_refused(const char *s, int status, const char *field) {
    srv_head h;
    int rc = check(s, &h);
    if (rc != SRV_HEAD_DONE || h.status != status || strcmp(h.field, field) != 0)
        fail_msg("head %.60s: want %d field %s, got rc %d status %d field %s (%s)", s, status, field, rc, h.status,
                 h.field ? h.field : "-", h.message);
    assert_true(h.message[0] != '\0');
    assert_true(h.code[0] != '\0');
}

static void test_good_heads(void **state) {
    static const char *good[] = {
        "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET /api/v1/studies?limit=5&offset=2 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\n\r\n",
        "POST /api/v1/studies HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n",
        "POST /x HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n\r\n",
        "GET / HTTP/1.1\nHost: x\n\n",                 /* bare LF, as libmicrohttpd allows */
        "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",         /* a stray blank line first */
        "GET / HTTP/1.1\r\nX-Empty:\r\nX-Tab: a\tb\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n",
        "DELETE /api/v1/studies/1 HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        srv_head h;
        assert_int_equal(check(good[i], &h), SRV_HEAD_DONE);
        if (h.status) fail_msg("%s: refused %d %s", good[i], h.status, h.message);
        assert_int_equal(h.len, strlen(good[i]));
    }
    srv_head h;
    check(good[1], &h);
    assert_string_equal(h.method, "GET");
    assert_string_equal(h.target, "/api/v1/studies?limit=5&offset=2");
}

/* Every prefix of a good head is "more", whatever follows it is the body. */
static void test_prefixes_ask_for_more(void **state) {
    const char *head = "POST /api/v1/studies/12/ask?x=1 HTTP/1.1\r\nHost: localhost:8080\r\n"
                       "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%s{}", head);
    for (size_t n = 0; n < strlen(head); n++) {
        srv_head h;
        int rc = srv_head_check(buf, n, NULL, &h);
        if (rc != SRV_HEAD_MORE) fail_msg("prefix of %zu bytes: rc %d status %d %s", n, rc, h.status, h.message);
    }
    srv_head h;
    assert_int_equal(srv_head_check(buf, strlen(buf), NULL, &h), SRV_HEAD_DONE);
    assert_int_equal(h.status, 0);
    assert_int_equal(h.len, strlen(head));
}

static void test_bad_request_lines(void **state) {
    expect_refused("GET /\r\n\r\n", 400, "request_line");
    expect_refused("GET  / HTTP/1.1\r\n\r\n", 400, "request_line");
    expect_refused("GET / HTTP/1.1 \r\n\r\n", 400, "request_line");
    expect_refused("GET / http/1.1\r\n\r\n", 400, "request_line");
    expect_refused("GET / HTTP/1.10\r\n\r\n", 400, "request_line");
    expect_refused("GET /a\x01 HTTP/1.1\r\n\r\n", 400, "request_line");
    expect_refused("G(T / HTTP/1.1\r\n\r\n", 400, "request_line");
    expect_refused("\r\r\n", 400, "request_line");
    expect_refused("GET / HTTP/2.0\r\n\r\n", 505, "request_line");
    expect_refused("GET / HTTP/0.9\r\n\r\n", 505, "request_line");
    expect_refused("PRI * HTTP/2.0\r\n\r\n", 505, "request_line");
    /* garbage (a TLS hello) is refused before any line end arrives */
    srv_head h;
    const char tls[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    assert_int_equal(srv_head_check(tls, sizeof tls - 1, NULL, &h), SRV_HEAD_DONE);
    assert_int_equal(h.status, 400);
}

static void test_sizes(void **state) {
    size_t big = 9000;
    char *s = malloc(big + 64);
    memcpy(s, "GET /", 5);
    memset(s + 5, 'a', big);
    s[5 + big] = '\0';
    expect_refused(s, 414, "request_line"); /* no line end yet */
    strcat(s, " HTTP/1.1\r\n\r\n");
    expect_refused(s, 414, "request_line");
    free(s);

    char q[1024] = "GET /x?a=1";
    for (int i = 0; i < 100; i++) strcat(q, "&b=2");
    strcat(q, " HTTP/1.1\r\n\r\n");
    expect_refused(q, 414, "query");

    char *many = malloc(4096);
    strcpy(many, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 101; i++) strcat(many, "X-A: b\r\n");
    strcat(many, "\r\n");
    expect_refused(many, 431, "headers");
    free(many);

    char *long_head = malloc(20000);
    strcpy(long_head, "GET / HTTP/1.1\r\nX-Big: ");
    size_t n = strlen(long_head);
    memset(long_head + n, 'v', 17000);
    long_head[n + 17000] = '\0';
    expect_refused(long_head, 431, "headers"); /* still arriving */
    strcat(long_head, "\r\n\r\n");
    expect_refused(long_head, 431, "headers");
    free(long_head);

    /* limits of the caller's choosing */
    srv_head_limits lim = {.max_line = 16};
    srv_head h;
    const char *line = "GET /0123456789abcdef HTTP/1.1\r\n\r\n";
    assert_int_equal(srv_head_check(line, strlen(line), &lim, &h), SRV_HEAD_DONE);
    assert_int_equal(h.status, 414);
    assert_string_equal(h.method, "GET");
}

static void test_bad_header_lines(void **state) {
    expect_refused("GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400, "headers");
    expect_refused("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "headers");
    expect_refused("GET / HTTP/1.1\r\n: x\r\n\r\n", 400, "headers");
    expect_refused("GET / HTTP/1.1\r\nX-A: b\r\n folded\r\n\r\n", 400, "headers");
    expect_refused("GET / HTTP/1.1\r\nX-A: b\rc\r\n\r\n", 400, "headers");
    srv_head h;
    const char nul[] = "GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n";
    assert_int_equal(srv_head_check(nul, sizeof nul - 1, NULL, &h), SRV_HEAD_DONE);
    assert_int_equal(h.status, 400);
}

static void test_framing(void **state) {
    expect_refused("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", 400, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n", 400, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n", 413, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413, "Content-Length");
    expect_refused("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Transfer-Encoding");
    expect_refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
                   "Transfer-Encoding");
    expect_refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400,
                   "Content-Length");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_heads),       cmocka_unit_test(test_prefixes_ask_for_more),
        cmocka_unit_test(test_bad_request_lines), cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_bad_header_lines), cmocka_unit_test(test_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
