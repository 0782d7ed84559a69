/* test_heavy.c - the bound on trials held by whole-study reads (heavy.c):
 * reads run together while their trials fit API_HEAVY_TRIALS; one that does
 * not fit waits, and gets 503 with Retry-After once opt.upload_wait_seconds
 * passed; one larger than the bound runs alone; a release lets a waiter in;
 * a read under API_HEAVY_FROM trials never waits. And hpo_deadline, which
 * its wait (and the event streams' and the dataset load slots') uses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "api_internal.h"

static api_ctx *ctx;
static sto_db *db;

static int setup(void **state) {
    (void)state;
    if (sto_open(":memory:", STO_SYNC_NORMAL, &db)) return -1;
    api_options opt = {.upload_wait_seconds = 0.2};
    return api_ctx_new(db, &opt, &ctx);
}

static int teardown(void **state) {
    (void)state;
    api_ctx_free(ctx);
    sto_close(db);
    return 0;
}

static void expect_busy(int64_t trials) {
    api_response resp = {0};
    double t0 = hpo_monotonic();
    assert_int_equal(api_heavy_acquire(ctx, trials, &resp), -1);
    double waited = hpo_monotonic() - t0;
    printf("  %lld trials: %d after %.2f s, Retry-After %d\n", (long long)trials, resp.status, waited,
           resp.retry_after);
    assert_int_equal(resp.status, 503);
    assert_int_equal(resp.retry_after, 5);
    assert_true(waited >= 0.15);
    api_response_clear(&resp);
}

static void *late_reader(void *arg) {
    api_response resp = {0};
    *(int *)arg = api_heavy_acquire(ctx, 40000, &resp);
    api_response_clear(&resp);
    return NULL;
}

static void test_bound(void **state) {
    (void)state;
    api_response resp = {0};
    assert_int_equal(api_heavy_acquire(ctx, 30000, &resp), 0);
    assert_int_equal(api_heavy_acquire(ctx, 20000, &resp), 0); /* 50,000: fits */
    expect_busy(API_HEAVY_FROM);
    /* a small read (a dashboard's poll of 100 trials) never waits */
    assert_int_equal(api_heavy_acquire(ctx, 100, &resp), 0);
    api_heavy_release(ctx, 100);
    api_heavy_release(ctx, 20000);
    assert_int_equal(api_heavy_acquire(ctx, 5000, &resp), 0);
    expect_busy(API_HEAVY_TRIALS); /* larger than what is left */
    api_heavy_release(ctx, 5000);
    api_heavy_release(ctx, 30000);
    /* larger than the bound: alone, and nothing beside it */
    assert_int_equal(api_heavy_acquire(ctx, 3 * API_HEAVY_TRIALS, &resp), 0);
    expect_busy(API_HEAVY_FROM);
    api_heavy_release(ctx, 3 * API_HEAVY_TRIALS);
    /* a waiter starts when a release makes room */
    assert_int_equal(api_heavy_acquire(ctx, 30000, &resp), 0);
    int rc = 1;
    pthread_t th;
    pthread_create(&th, NULL, late_reader, &rc);
    usleep(50 * 1000);
    api_heavy_release(ctx, 30000);
    pthread_join(th, NULL);
    assert_int_equal(rc, 0);
    api_heavy_release(ctx, 40000);
    assert_int_equal(ctx->heavy_in_use, 0);
    assert_int_equal(resp.status, 0); /* the successful acquires wrote nothing */
}

/* hpo_deadline, the wait's deadline: seconds from now on the clock asked,
 * its nanoseconds normalised (the fraction carried into seconds). */
static void test_deadline(void **state) {
    (void)state;
    for (double s = 0; s < 3; s += 0.37) {
        double before = hpo_now();
        struct timespec d = hpo_deadline(CLOCK_REALTIME, s);
        double at = (double)d.tv_sec + (double)d.tv_nsec * 1e-9;
        assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
        assert_true(at >= before + s - 1e-6 && at <= hpo_now() + s + 1e-6);
    }
    struct timespec m = hpo_deadline(CLOCK_MONOTONIC, 0.5);
    double at = (double)m.tv_sec + (double)m.tv_nsec * 1e-9;
    assert_true(fabs(at - (hpo_monotonic() + 0.5)) < 0.05);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bound), cmocka_unit_test(test_deadline)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
