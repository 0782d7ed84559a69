/* test_conns.c - the connection books: per-client and total caps, eviction
 * of idle keep-alive connections only, the header deadline (which a busy
 * connection never meets), the body deadline, stale hand-offs and the
 * address table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conns.h"

static int cut_fds[64];
static int n_cut;

static void fake_cut(int fd) {
    if (n_cut < 64) cut_fds[n_cut] = fd;
    n_cut++;
}

static srv_addr ip4(unsigned last) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | last)};
    srv_addr a;
    srv_addr_from((struct sockaddr *)&sa, &a);
    return a;
}

static srv_conns *books(unsigned max_handed, unsigned per_client, double timeout) {
    srv_conns_opts o = {.max_handed = max_handed, .per_client = per_client, .max_pending = 16,
                        .header_timeout = timeout, .cut = fake_cut};
    srv_conns *c = NULL;
    assert_int_equal(srv_conns_new(&o, &c), 0);
    n_cut = 0;
    return c;
}

/* k got a request head at now, and its body (if any) at once: it serves. */
static int serve(srv_conns *c, srv_conn *k, double now) {
    int rc = srv_conns_busy(c, k, now);
    if (rc == 0) srv_conns_body_done(c, k);
    return rc;
}

/* Admits fd from a and lets libmicrohttpd start it. */
static srv_conn *open_conn(srv_conns *c, const srv_addr *a, int fd, double now) {
    assert_int_equal(srv_conns_admit(c, a, fd, now), SRV_ADMIT_OK);
    return srv_conns_started(c, fd, a, now);
}

static void test_addresses(void **state) {
    srv_addr a = ip4(1);
    char text[64];
    srv_addr_format(&a, text, sizeof text);
    assert_string_equal(text, "127.0.0.1");
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    srv_addr b;
    srv_addr_from((struct sockaddr *)&s6, &b);
    srv_addr_format(&b, text, sizeof text);
    assert_string_equal(text, "::1");
}

static void test_per_client_cap(void **state) {
    srv_conns *c = books(100, 2, 10);
    srv_addr a = ip4(1), b = ip4(2);
    srv_conn *k1 = open_conn(c, &a, 10, 0), *k2 = open_conn(c, &a, 11, 0);
    assert_int_equal(serve(c, k1, 0), 0);
    assert_int_equal(serve(c, k2, 0), 0);
    assert_int_equal(srv_conns_admit(c, &a, 12, 1), SRV_ADMIT_CLIENT_CAP); /* both busy: none to cut */
    assert_int_equal(srv_conns_admit(c, &b, 13, 1), SRV_ADMIT_OK);         /* another client is not held up */
    assert_int_equal(n_cut, 0);
    /* k1 answered its request and idles on keep-alive: it makes room */
    srv_conns_idle(c, k1, 2);
    assert_int_equal(srv_conns_admit(c, &a, 12, 3), SRV_ADMIT_OK);
    assert_int_equal(n_cut, 1);
    assert_int_equal(cut_fds[0], 10);
    assert_true(srv_conns_was_cut(c, k1));
    assert_false(srv_conns_was_cut(c, k2));
    srv_conns_closed(c, k1);
    srv_conns_closed(c, k2);
    srv_conns_stats st;
    srv_conns_stats_get(c, &st);
    assert_int_equal(st.handed, 2); /* fd 12 of a, fd 13 of b (handing) */
    assert_int_equal(st.cut_evicted, 1);
    srv_conns_free(c);
}

static void test_soft_total_cap(void **state) {
    srv_conns *c = books(3, 0, 10);
    srv_conn *k[3];
    for (int i = 0; i < 3; i++) {
        srv_addr a = ip4(10 + (unsigned)i);
        k[i] = open_conn(c, &a, 20 + i, 0);
        serve(c, k[i], 0);
    }
    srv_addr d = ip4(50);
    assert_int_equal(srv_conns_admit(c, &d, 30, 1), SRV_ADMIT_BUSY);
    /* the idle one that waited longest goes first */
    srv_conns_idle(c, k[2], 2);
    srv_conns_idle(c, k[1], 3);
    assert_int_equal(srv_conns_admit(c, &d, 30, 4), SRV_ADMIT_OK);
    assert_int_equal(n_cut, 1);
    assert_int_equal(cut_fds[0], 22);
    for (int i = 0; i < 3; i++) srv_conns_closed(c, k[i]);
    srv_conns_free(c);
}

/* A connection whose first head is still on its way is not idle. */
static void test_fresh_not_evicted(void **state) {
    srv_conns *c = books(1, 0, 10);
    srv_addr a = ip4(1), b = ip4(2);
    srv_conn *k = open_conn(c, &a, 5, 0);
    assert_int_equal(srv_conns_admit(c, &b, 6, 0.1), SRV_ADMIT_BUSY);
    assert_int_equal(n_cut, 0);
    srv_conns_closed(c, k);
    assert_int_equal(srv_conns_admit(c, &b, 6, 0.2), SRV_ADMIT_OK);
    srv_conns_free(c);
}

static void test_header_deadline(void **state) {
    srv_conns *c = books(100, 0, 10);
    srv_addr a = ip4(1);
    srv_conn *slow = open_conn(c, &a, 40, 0);   /* never gets its head through */
    srv_conn *busy = open_conn(c, &a, 41, 0);   /* an event stream: busy for good */
    srv_conn *kept = open_conn(c, &a, 42, 0);   /* keep-alive, idle after one request */
    serve(c, busy, 0);
    serve(c, kept, 0);
    srv_conns_idle(c, kept, 6);
    assert_int_equal(srv_conns_reap(c, 9.9), 0);
    assert_int_equal(srv_conns_reap(c, 10.0), 1);
    assert_int_equal(cut_fds[0], 40);
    assert_true(srv_conns_was_cut(c, slow));
    assert_int_equal(srv_conns_reap(c, 15.9), 0);
    assert_int_equal(srv_conns_reap(c, 16.0), 1);
    assert_int_equal(cut_fds[1], 42);
    assert_int_equal(srv_conns_reap(c, 1000), 0); /* the stream is never cut */
    assert_false(srv_conns_was_cut(c, busy));
    srv_conns_stats st;
    srv_conns_stats_get(c, &st);
    assert_int_equal(st.handed, 1);
    assert_int_equal(st.cut_deadline, 2);
    /* a cut connection does not come back to life, nor serve a request */
    assert_int_equal(srv_conns_busy(c, slow, 1000), -1);
    srv_conns_idle(c, slow, 1001);
    assert_int_equal(srv_conns_reap(c, 2000), 0);
    srv_conns_closed(c, slow);
    srv_conns_closed(c, busy);
    srv_conns_closed(c, kept);
    srv_conns_stats_get(c, &st);
    assert_int_equal(st.handed, 0);
    srv_conns_free(c);
}

/* A request body has header_timeout seconds from its head, plus a second
 * for every SRV_BODY_MIN_RATE bytes that arrived; a complete body stops
 * the clock, and the next head's deadline runs from the response. */
static void test_body_deadline(void **state) {
    srv_conns *c = books(100, 0, 10);
    srv_addr a = ip4(1);
    srv_conn *trickle = open_conn(c, &a, 50, 0); /* a byte now and then */
    srv_conn *upload = open_conn(c, &a, 51, 0);  /* a large body at a usable speed */
    srv_conn *served = open_conn(c, &a, 52, 0);  /* its body came: served for long */
    assert_int_equal(srv_conns_busy(c, trickle, 1), 0);
    assert_int_equal(srv_conns_busy(c, upload, 1), 0);
    assert_int_equal(serve(c, served, 1), 0);
    srv_conns_body(c, trickle, 1);
    srv_conns_body(c, upload, 100000); /* 200 s more */
    assert_int_equal(srv_conns_reap(c, 10.9), 0);
    assert_int_equal(srv_conns_reap(c, 11.01), 1); /* 10 s + 1/500 s after its head */
    assert_int_equal(cut_fds[0], 50);
    assert_true(srv_conns_was_cut(c, trickle));
    assert_int_equal(srv_conns_reap(c, 210), 0);
    srv_conns_body(c, upload, 100000);
    srv_conns_body_done(c, upload); /* complete: it serves */
    assert_int_equal(srv_conns_reap(c, 10000), 0);
    assert_false(srv_conns_was_cut(c, upload) || srv_conns_was_cut(c, served));
    /* answered: the next head has header_timeout from the response */
    srv_conns_idle(c, upload, 10000);
    assert_int_equal(srv_conns_reap(c, 10010), 1);
    assert_int_equal(cut_fds[1], 51);
    srv_conns_stats st;
    srv_conns_stats_get(c, &st);
    assert_int_equal(st.cut_deadline, 2);
    srv_conns_closed(c, trickle);
    srv_conns_closed(c, upload);
    srv_conns_closed(c, served);
    srv_conns_free(c);
}

static void test_stale_handoff(void **state) {
    srv_conns *c = books(2, 0, 10);
    srv_addr a = ip4(1);
    assert_int_equal(srv_conns_admit(c, &a, 7, 0), SRV_ADMIT_OK);
    assert_int_equal(srv_conns_admit(c, &a, 8, 0), SRV_ADMIT_OK);
    assert_int_equal(srv_conns_admit(c, &a, 9, 0), SRV_ADMIT_BUSY);
    /* fd 7 is accepted again: the old one was dropped by libmicrohttpd */
    assert_int_equal(srv_conns_admit(c, &a, 7, 1), SRV_ADMIT_OK);
    srv_conns_handoff_failed(c, 8);
    srv_conns_stats st;
    srv_conns_stats_get(c, &st);
    assert_int_equal(st.handed, 1);
    srv_conns_reap(c, 100); /* never started: dropped */
    srv_conns_stats_get(c, &st);
    assert_int_equal(st.handed, 0);
    assert_int_equal(n_cut, 0); /* a handing record's descriptor is never cut */
    srv_conns_free(c);
}

/* Many addresses in and out of the table, in a scrambled order: counts stay
 * exact (backward-shift deletion keeps every probe chain whole). */
static void test_address_table(void **state) {
    srv_conns *c = books(100, 0, 10);
    enum { N = 300 };
    for (unsigned i = 0; i < N; i++) {
        srv_addr a = ip4(i * 7919u % 65536u);
        assert_int_equal(srv_conns_pending_add(c, &a), 1);
        assert_int_equal(srv_conns_pending_add(c, &a), 2);
    }
    for (unsigned i = 0; i < N; i += 2) {
        srv_addr a = ip4(i * 7919u % 65536u);
        srv_conns_pending_del(c, &a);
        srv_conns_pending_del(c, &a);
    }
    for (unsigned i = 0; i < N; i++) {
        srv_addr a = ip4(i * 7919u % 65536u);
        assert_int_equal(srv_conns_pending_add(c, &a), i % 2 ? 3 : 1);
    }
    srv_conns_stats st;
    srv_conns_stats_get(c, &st);
    assert_int_equal(st.pending, N / 2 * 3 + N / 2);
    srv_conns_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addresses),       cmocka_unit_test(test_per_client_cap),
        cmocka_unit_test(test_soft_total_cap),  cmocka_unit_test(test_fresh_not_evicted),
        cmocka_unit_test(test_header_deadline), cmocka_unit_test(test_body_deadline),
        cmocka_unit_test(test_stale_handoff),
        cmocka_unit_test(test_address_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
