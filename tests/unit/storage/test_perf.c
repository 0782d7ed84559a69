/* test_perf.c - storage: latency of the ask/tell hot path on a real file.
 *
 * Single thread: N trials each created, reported once and finished (each a
 * committed transaction), timed per call, for synchronous NORMAL and FULL;
 * prints mean / p50 / p99 / max in microseconds. Then 4 threads doing the
 * same round trips on one study: round trips per second. Then events: an
 * append and a finish with its event, timed, and 4 connections appending
 * to one study (events/s).
 * Asserts what must hold on any machine: every call succeeds and every
 * round trip of the 4 threads is counted (no lost or duplicated trial).
 * The latencies are printed, never asserted: a test must not depend on the
 * machine's speed or load (tests/bench/asktell is the benchmark of the
 * hot path, beside Optuna). HPO_STO_BENCH_N=<n> changes N (default 2000
 * for NORMAL, N/5 for FULL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"
#include "storage/sto_testutil.h"

enum { CALL_CREATE, CALL_REPORT, CALL_FINISH, N_CALLS };
static const char *const call_names[N_CALLS] = {"create", "report", "finish"};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t bench_n(void) {
    const char *env = getenv("HPO_STO_BENCH_N");
    long dflt = sto_test_pg() ? 400 : 2000; /* PostgreSQL: each call is a few network round trips */
    long n = env ? strtol(env, NULL, 10) : dflt;
    return n > 0 ? (size_t)n : (size_t)dflt;
}

/* Prints the mean/p50/p99/max latency (us) of the three calls. */
static void single_thread(const char *path, sto_sync sync, size_t n) {
    sto_db *db = NULL;
    assert_int_equal(sto_open(path, sync, &db), 0);
    int64_t study;
    assert_int_equal(sto_study_create(db, "bench", "{\"space\":{}}", &study), 0);
    double *lat[N_CALLS];
    for (int c = 0; c < N_CALLS; c++) lat[c] = hpo_xmalloc(n * sizeof(double));
    const char *params = "{\"lr\":0.0031622776601683794,\"units\":128,\"optimizer\":\"adam\"}";
    double t_all = hpo_monotonic();
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        double t0 = hpo_monotonic();
        assert_int_equal(sto_trial_create(db, study, params, hpo_now() + 60, &id, NULL), 0);
        double t1 = hpo_monotonic();
        assert_int_equal(sto_trial_report(db, id, 0, 0.5, hpo_now() + 60, 0), 0);
        double t2 = hpo_monotonic();
        assert_int_equal(sto_trial_finish(db, id, STO_TRIAL_COMPLETE, 0.9, NAN, 1, NULL), 0);
        double t3 = hpo_monotonic();
        lat[CALL_CREATE][i] = (t1 - t0) * 1e6;
        lat[CALL_REPORT][i] = (t2 - t1) * 1e6;
        lat[CALL_FINISH][i] = (t3 - t2) * 1e6;
    }
    t_all = hpo_monotonic() - t_all;
    print_message("%s, %zu trials, %.0f round trips/s single-threaded:\n",
                  sync == STO_SYNC_FULL ? "synchronous=FULL" : "synchronous=NORMAL", n,
                  (double)n / t_all);
    for (int c = 0; c < N_CALLS; c++) {
        double sum = 0;
        for (size_t i = 0; i < n; i++) sum += lat[c][i];
        qsort(lat[c], n, sizeof(double), cmp_double);
        double mean = sum / (double)n;
        print_message("  %-6s mean %7.1f us  p50 %7.1f  p99 %7.1f  max %8.1f\n", call_names[c],
                      mean, lat[c][n / 2], lat[c][n * 99 / 100], lat[c][n - 1]);
        free(lat[c]);
    }
    int64_t counts[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, study, counts), 0);
    assert_int_equal(counts[STO_TRIAL_COMPLETE], (int64_t)n);
    sto_close(db);
}

struct client {
    sto_db *db;
    int64_t study;
    size_t n;
    int failures;
};

static void *client_main(void *arg) {
    struct client *c = arg;
    for (size_t i = 0; i < c->n; i++) {
        int64_t id;
        if (sto_trial_create(c->db, c->study, "{\"x\":1}", hpo_now() + 60, &id, NULL) ||
            sto_trial_report(c->db, id, 0, 0.5, hpo_now() + 60, 0) ||
            sto_trial_finish(c->db, id, STO_TRIAL_COMPLETE, 0.9, NAN, 1, NULL))
            c->failures++;
    }
    return NULL;
}

static void four_threads(const char *path, size_t per_thread) {
    sto_db *db = NULL;
    assert_int_equal(sto_open(path, STO_SYNC_NORMAL, &db), 0);
    int64_t study;
    assert_int_equal(sto_study_create(db, "bench4", "{}", &study), 0);
    struct client cl[4];
    pthread_t th[4];
    double t0 = hpo_monotonic();
    for (int i = 0; i < 4; i++) {
        cl[i] = (struct client){db, study, per_thread, 0};
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &cl[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    double dt = hpo_monotonic() - t0;
    for (int i = 0; i < 4; i++) assert_int_equal(cl[i].failures, 0);
    int64_t counts[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, study, counts), 0);
    assert_int_equal(counts[STO_TRIAL_COMPLETE], (int64_t)(4 * per_thread));
    sto_close(db);
    double rate = (double)(4 * per_thread) / dt;
    print_message("4 threads, synchronous=NORMAL: %zu round trips (create+report+finish) in "
                  "%.2f s = %.0f round trips/s\n",
                  4 * per_thread, dt, rate);
}

/* Events, the way several hpod nodes store them: n calls each of
 * sto_event_append and sto_trial_finish_ev (an event with the change)
 * timed on one connection, then 4 connections of their own appending to
 * one study together: events/s. On PostgreSQL each event insert locks its
 * study's row (a study's events commit in id order) and sends NOTIFY. */
struct appender {
    const char *path;
    int64_t study;
    size_t n;
    int failures;
};

static void *append_main(void *arg) {
    struct appender *a = arg;
    sto_db *db = NULL;
    if (sto_open(a->path, STO_SYNC_NORMAL, &db)) {
        a->failures++;
        return NULL;
    }
    for (size_t i = 0; i < a->n; i++)
        if (sto_event_append(db, a->study, 0, "progress", "{\"k\":1}", NULL)) a->failures++;
    sto_close(db);
    return NULL;
}

static void events(const char *path, size_t n) {
    sto_db *db = NULL;
    assert_int_equal(sto_open(path, STO_SYNC_NORMAL, &db), 0);
    int64_t study;
    assert_int_equal(sto_study_create(db, "events", "{}", &study), 0);
    double *lat[2] = {hpo_xmalloc(n * sizeof(double)), hpo_xmalloc(n * sizeof(double))};
    sto_event_in ev = {"trial_complete", "{\"value\":0.9}"};
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        assert_int_equal(sto_trial_create(db, study, "{}", 0, &id, NULL), 0);
        double t0 = hpo_monotonic();
        assert_int_equal(sto_event_append(db, study, id, "progress", "{\"k\":1}", NULL), 0);
        double t1 = hpo_monotonic();
        assert_int_equal(sto_trial_finish_ev(db, id, STO_TRIAL_COMPLETE, 0.9, NAN, 1, NULL, &ev), 0);
        double t2 = hpo_monotonic();
        lat[0][i] = (t1 - t0) * 1e6;
        lat[1][i] = (t2 - t1) * 1e6;
    }
    print_message("events, %zu each, one connection:\n", n);
    const char *names[2] = {"append", "finish+event"};
    for (int c = 0; c < 2; c++) {
        double sum = 0;
        for (size_t i = 0; i < n; i++) sum += lat[c][i];
        qsort(lat[c], n, sizeof(double), cmp_double);
        print_message("  %-12s mean %7.1f us  p50 %7.1f  p99 %7.1f\n", names[c], sum / (double)n, lat[c][n / 2],
                      lat[c][n * 99 / 100]);
        free(lat[c]);
    }
    struct appender ap[4];
    pthread_t th[4];
    double t0 = hpo_monotonic();
    for (int i = 0; i < 4; i++) {
        ap[i] = (struct appender){path, study, n, 0};
        assert_int_equal(pthread_create(&th[i], NULL, append_main, &ap[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    double dt = hpo_monotonic() - t0;
    for (int i = 0; i < 4; i++) assert_int_equal(ap[i].failures, 0);
    int64_t last = 0;
    assert_int_equal(sto_event_last_id(db, study, &last), 0);
    assert_true(last > 0);
    print_message("4 connections appending to one study: %zu events in %.2f s = %.0f events/s\n", 4 * n, dt,
                  (double)(4 * n) / dt);
    sto_close(db);
}

static void test_hot_path_latency(void **state) {
    (void)state;
    size_t n = bench_n();
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    single_thread(tmp.db, STO_SYNC_NORMAL, n);
    sto_tmp_close(&tmp);
    assert_int_equal(sto_tmp_init(&tmp), 0);
    single_thread(tmp.db, STO_SYNC_FULL, n / 5 > 0 ? n / 5 : 1);
    sto_tmp_close(&tmp);
    assert_int_equal(sto_tmp_init(&tmp), 0);
    four_threads(tmp.db, n / 4 > 0 ? n / 4 : 1);
    sto_tmp_close(&tmp);
    assert_int_equal(sto_tmp_init(&tmp), 0);
    events(tmp.db, n / 2 > 0 ? n / 2 : 1);
    sto_tmp_close(&tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hot_path_latency),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
