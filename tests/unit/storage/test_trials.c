/* test_trials.c - storage: trial numbering (also under 4 threads), state
 * rules (finish/report only while running), unknown ids, list filters and
 * order, counts, intermediate values, pruned-keeps-last, NaN round trips and
 * lease expiry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

static sto_db *open_mem(void) {
    sto_db *db = NULL;
    assert_int_equal(sto_test_open(&db), 0);
    return db;
}

static int64_t new_study(sto_db *db, const char *name) {
    int64_t id;
    assert_int_equal(sto_study_create(db, name, "{}", &id), 0);
    return id;
}

static int64_t new_trial(sto_db *db, int64_t study, int64_t *number) {
    int64_t id;
    assert_int_equal(sto_trial_create(db, study, "{\"lr\":0.01}", 0, &id, number), 0);
    return id;
}

static void test_numbers(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t a = new_study(db, "a"), b = new_study(db, "b");
    for (int64_t i = 0; i < 20; i++) {
        int64_t na, nb;
        int64_t ta = new_trial(db, a, &na);
        new_trial(db, b, &nb);
        assert_int_equal(na, i); /* numbering is per study */
        assert_int_equal(nb, i);
        sto_trial t;
        assert_int_equal(sto_trial_get(db, ta, &t), 0);
        assert_int_equal(t.id, ta);
        assert_int_equal(t.study_id, a);
        assert_int_equal(t.number, i);
        assert_int_equal(t.state, STO_TRIAL_RUNNING);
        assert_string_equal(t.params, "{\"lr\":0.01}");
        assert_true(isnan(t.value) && isnan(t.value_std) && isnan(t.last_value));
        assert_int_equal(t.value_n, 0);
        assert_int_equal(t.last_step, -1);
        assert_true(t.created > 0 && t.started == t.created && t.finished == 0);
        assert_true(t.lease_expires == 0);
        assert_null(t.error);
        sto_trial_clear(&t);
    }
    /* Unknown study: not found, outs untouched. */
    int64_t id = -5, num = -6;
    assert_int_equal(sto_trial_create(db, 777, "{}", 0, &id, &num), HPO_ENOTFOUND);
    assert_int_equal(id, -5);
    assert_int_equal(num, -6);
    /* NULL params are stored as an empty object. */
    assert_int_equal(sto_trial_create(db, a, NULL, 0, &id, &num), 0);
    assert_int_equal(num, 20);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, id, &t), 0);
    assert_string_equal(t.params, "{}");
    sto_trial_clear(&t);
    /* After a delete the study is gone for trials too. */
    assert_int_equal(sto_study_delete(db, b), 0);
    assert_int_equal(sto_trial_create(db, b, "{}", 0, &id, &num), HPO_ENOTFOUND);
    sto_close(db);
}

enum { N_THREADS = 4, PER_THREAD = 250 };

struct worker {
    sto_db *db;
    int64_t study;
    int64_t numbers[PER_THREAD];
    int failures;
};

static void *create_many(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        int64_t id;
        if (sto_trial_create(w->db, w->study, "{}", 0, &id, &w->numbers[i]) != 0) w->failures++;
    }
    return NULL;
}

static void test_concurrent_numbers(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t study = new_study(db, "race");
    struct worker w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].db = db;
        w[i].study = study;
        assert_int_equal(pthread_create(&th[i], NULL, create_many, &w[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    unsigned char seen[N_THREADS * PER_THREAD] = {0};
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(w[i].failures, 0);
        for (int j = 0; j < PER_THREAD; j++) {
            int64_t n = w[i].numbers[j];
            assert_true(n >= 0 && n < N_THREADS * PER_THREAD);
            assert_int_equal(seen[n], 0); /* distinct */
            seen[n] = 1;
            if (j) assert_true(n > w[i].numbers[j - 1]); /* increasing per thread */
        }
    }
    int64_t counts[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, study, counts), 0);
    assert_int_equal(counts[STO_TRIAL_RUNNING], N_THREADS * PER_THREAD);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static void test_state_rules(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s");
    int64_t t = new_trial(db, s, NULL);

    assert_int_equal(sto_trial_report(db, t, 0, 0.5, 0, 0), 0);
    assert_int_equal(sto_trial_finish(db, t, STO_TRIAL_COMPLETE, 0.9, 0.01, 2, NULL), 0);
    assert_int_equal(sto_trial_finish(db, t, STO_TRIAL_COMPLETE, 0.1, NAN, 1, NULL),
                     HPO_ECONFLICT);
    assert_int_equal(sto_trial_finish(db, t, STO_TRIAL_FAILED, NAN, NAN, 0, "x"), HPO_ECONFLICT);
    assert_int_equal(sto_trial_report(db, t, 1, 0.7, 0, 0), HPO_ECONFLICT);
    /* The rejected calls changed nothing. */
    sto_trial tr;
    assert_int_equal(sto_trial_get(db, t, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_COMPLETE);
    assert_true(tr.value == 0.9);
    assert_true(tr.value_std == 0.01);
    assert_int_equal(tr.value_n, 2);
    assert_int_equal(tr.last_step, 0);
    assert_true(tr.finished >= tr.started);
    assert_null(tr.error);
    sto_trial_clear(&tr);
    int64_t *steps;
    double *values;
    size_t n;
    assert_int_equal(sto_trial_intermediates(db, t, &steps, &values, &n), 0);
    assert_int_equal(n, 1);
    free(steps);
    free(values);

    /* Unknown trials. */
    assert_int_equal(sto_trial_get(db, 9999, &tr), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_report(db, 9999, 0, 1.0, 0, 0), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_finish(db, 9999, STO_TRIAL_COMPLETE, 1.0, NAN, 1, NULL),
                     HPO_ENOTFOUND);
    assert_int_equal(sto_trial_intermediates(db, 9999, &steps, &values, &n), HPO_ENOTFOUND);

    /* Invalid arguments. */
    int64_t u = new_trial(db, s, NULL);
    assert_int_equal(sto_trial_finish(db, u, STO_TRIAL_RUNNING, 1.0, NAN, 1, NULL), HPO_EINVAL);
    assert_int_equal(sto_trial_finish(db, u, STO_TRIAL_QUEUED, 1.0, NAN, 1, NULL), HPO_EINVAL);
    assert_int_equal(sto_trial_report(db, u, -1, 1.0, 0, 0), HPO_EINVAL);

    /* Failed with error text; cancelled without. */
    assert_int_equal(sto_trial_finish(db, u, STO_TRIAL_FAILED, NAN, NAN, 0, "diverged: NaN loss"),
                     0);
    assert_int_equal(sto_trial_get(db, u, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_FAILED);
    assert_string_equal(tr.error, "diverged: NaN loss");
    assert_true(isnan(tr.value));
    assert_int_equal(tr.value_n, 0);
    sto_trial_clear(&tr);
    int64_t v = new_trial(db, s, NULL);
    assert_int_equal(sto_trial_finish(db, v, STO_TRIAL_CANCELLED, NAN, NAN, 0, NULL), 0);
    assert_int_equal(sto_trial_report(db, v, 0, 1.0, 0, 0), HPO_ECONFLICT);

    assert_string_equal(sto_trial_state_name(STO_TRIAL_PRUNED), "pruned");
    assert_int_equal(sto_trial_state_parse("complete"), STO_TRIAL_COMPLETE);
    assert_int_equal(sto_trial_state_parse("queued"), STO_TRIAL_QUEUED);
    assert_int_equal(sto_trial_state_parse("nope"), -1);
    assert_int_equal(sto_trial_state_parse(NULL), -1);
    sto_close(db);
}

/* Study with 10 trials: numbers 0..9; values (by number) below, NaN = none. */
static const double list_values[10] = {0.5, NAN, 0.9, 0.1, NAN, 0.7, 0.3, 0.9, 0.2, NAN};
static const sto_trial_state list_states[10] = {
    STO_TRIAL_COMPLETE, STO_TRIAL_FAILED,  STO_TRIAL_COMPLETE, STO_TRIAL_PRUNED,
    STO_TRIAL_RUNNING,  STO_TRIAL_COMPLETE, STO_TRIAL_COMPLETE, STO_TRIAL_COMPLETE,
    STO_TRIAL_PRUNED,   STO_TRIAL_COMPLETE};

static void check_numbers(sto_db *db, int64_t study, sto_trial_filter f, const int *expect,
                          size_t n_expect) {
    sto_trial *list = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_list(db, study, &f, &list, &n), 0);
    if (n != n_expect) fail_msg("got %zu trials, expected %zu", n, n_expect);
    for (size_t i = 0; i < n; i++) {
        if (list[i].number != expect[i])
            fail_msg("position %zu: number %lld, expected %d", i, (long long)list[i].number,
                     expect[i]);
        assert_int_equal(list[i].study_id, study);
        int k = expect[i];
        if (isnan(list_values[k]))
            assert_true(isnan(list[i].value));
        else
            assert_true(list[i].value == list_values[k]);
        assert_int_equal(list[i].state, list_states[k]);
    }
    sto_trial_list_free(list, n);
}

static void test_list_and_counts(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s"), other = new_study(db, "other");
    for (int i = 0; i < 10; i++) {
        int64_t t = new_trial(db, s, NULL);
        new_trial(db, other, NULL); /* interleaved rows of another study */
        if (list_states[i] != STO_TRIAL_RUNNING)
            assert_int_equal(sto_trial_finish(db, t, list_states[i], list_values[i], NAN, 1,
                                              list_states[i] == STO_TRIAL_FAILED ? "x" : NULL),
                             0);
    }
    sto_trial_filter f = {.state = -1, .order = STO_ORDER_NUMBER};
    check_numbers(db, s, f, (const int[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10);
    f.descending = 1;
    check_numbers(db, s, f, (const int[]){9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, 10);
    /* By value: NULLs last in both directions; ties by number. */
    f.order = STO_ORDER_VALUE;
    f.descending = 0;
    check_numbers(db, s, f, (const int[]){3, 8, 6, 0, 5, 2, 7, 1, 4, 9}, 10);
    f.descending = 1;
    check_numbers(db, s, f, (const int[]){2, 7, 5, 0, 6, 8, 3, 1, 4, 9}, 10);
    /* Limit and offset. */
    f.limit = 3;
    f.offset = 1;
    check_numbers(db, s, f, (const int[]){7, 5, 0}, 3);
    f.offset = 9;
    check_numbers(db, s, f, (const int[]){9}, 1);
    f.offset = 10;
    check_numbers(db, s, f, NULL, 0);
    /* State filter. */
    f = (sto_trial_filter){.state = STO_TRIAL_COMPLETE, .order = STO_ORDER_VALUE};
    check_numbers(db, s, f, (const int[]){6, 0, 5, 2, 7, 9}, 6);
    f.limit = 2;
    f.offset = 1;
    f.descending = 1;
    check_numbers(db, s, f, (const int[]){7, 5}, 2);
    f = (sto_trial_filter){.state = STO_TRIAL_PRUNED, .order = STO_ORDER_NUMBER, .descending = 1};
    check_numbers(db, s, f, (const int[]){8, 3}, 2);
    f = (sto_trial_filter){.state = STO_TRIAL_QUEUED};
    check_numbers(db, s, f, NULL, 0);
    /* NULL filter = all by number. */
    sto_trial *list = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_list(db, s, NULL, &list, &n), 0);
    assert_int_equal(n, 10);
    assert_int_equal(list[9].number, 9);
    sto_trial_list_free(list, n);
    /* Bad filter / unknown study. */
    f = (sto_trial_filter){.state = STO_TRIAL_N_STATES};
    assert_int_equal(sto_trial_list(db, s, &f, &list, &n), HPO_EINVAL);
    f = (sto_trial_filter){.state = -1, .order = 7};
    assert_int_equal(sto_trial_list(db, s, &f, &list, &n), HPO_EINVAL);
    assert_int_equal(sto_trial_list(db, 4242, NULL, &list, &n), HPO_ENOTFOUND);

    /* Counts. */
    int64_t c[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, s, c), 0);
    assert_int_equal(c[STO_TRIAL_RUNNING], 1);
    assert_int_equal(c[STO_TRIAL_COMPLETE], 6);
    assert_int_equal(c[STO_TRIAL_PRUNED], 2);
    assert_int_equal(c[STO_TRIAL_FAILED], 1);
    assert_int_equal(c[STO_TRIAL_CANCELLED], 0);
    assert_int_equal(c[STO_TRIAL_QUEUED], 0);
    assert_int_equal(sto_trial_counts(db, -1, c), 0);
    assert_int_equal(c[STO_TRIAL_RUNNING], 11); /* + the other study's 10 */
    assert_int_equal(c[STO_TRIAL_COMPLETE], 6);
    c[0] = 1234;
    assert_int_equal(sto_trial_counts(db, 4242, c), HPO_ENOTFOUND);
    assert_int_equal(c[0], 1234);
    sto_close(db);
}

struct collected {
    int64_t number[16], step[16];
    double value[16];
    int flags[16];
    int n;
};

static void collect(void *ctx, const sto_intermediate *row) {
    struct collected *c = ctx;
    if (c->n < 16) {
        c->number[c->n] = row->number;
        c->step[c->n] = row->step;
        c->value[c->n] = row->value;
        c->flags[c->n] = row->flags;
    }
    c->n++;
}

/* A reported vector (an external trial's curve point at a step) keeps
 * the first one of the step, as the step's intermediate value does; an
 * epoch the trainer writes again replaces the earlier one. */
static void test_reported_vector_keeps_first(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s");
    int64_t t = new_trial(db, s, NULL);
    assert_int_equal(sto_epoch_put_report(db, t, 1, "{\"a\":0}"), 0);
    assert_int_equal(sto_epoch_put_report(db, t, 1, "{\"a\":10}"), 0); /* kept {"a":0} */
    assert_int_equal(sto_epoch_put(db, t, 0, 2, "{\"a\":1}"), 0);
    assert_int_equal(sto_epoch_put(db, t, 0, 2, "{\"a\":2}"), 0); /* replaced */
    assert_int_equal(sto_epoch_put_report(db, 9999, 1, "{}"), HPO_ENOTFOUND);
    sto_epoch *e = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_epochs(db, t, &e, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(e[0].metrics, "{\"a\":0}");
    assert_string_equal(e[1].metrics, "{\"a\":2}");
    sto_epoch_list_free(e, n);
    sto_close(db);
}

static void test_intermediates_and_pruning(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s");
    int64_t t0 = new_trial(db, s, NULL), t1 = new_trial(db, s, NULL);

    /* Out of order steps, one reported again (its first value stays, as
     * the pruner keeps it), one lower after a higher. */
    assert_int_equal(sto_trial_report(db, t0, 2, 0.30, 0, 0), 0);
    assert_int_equal(sto_trial_report(db, t0, 0, 0.10, 0, 0), 0);
    assert_int_equal(sto_trial_report(db, t0, 1, 0.20, 0, 0), 0);
    assert_int_equal(sto_trial_report(db, t0, 2, 0.35, 0, 0), 0); /* step 2 again: kept 0.30 */
    assert_int_equal(sto_trial_report(db, t1, 0, 0.5, 0, 0), 0);
    sto_trial tr;
    assert_int_equal(sto_trial_get(db, t0, &tr), 0);
    assert_int_equal(tr.last_step, 2);
    assert_true(tr.last_value == 0.30);
    sto_trial_clear(&tr);

    int64_t *steps;
    double *values;
    size_t n;
    assert_int_equal(sto_trial_intermediates(db, t0, &steps, &values, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(steps[0], 0);
    assert_int_equal(steps[1], 1);
    assert_int_equal(steps[2], 2);
    assert_true(values[0] == 0.10 && values[1] == 0.20 && values[2] == 0.30);
    free(steps);
    free(values);

    /* the pruner's answer is stored with its report: a new step (t1's
     * step 1) has it at once, as another node reads it; a step reported
     * again gains it and keeps its first value (t0's step 1, twice) */
    assert_int_equal(sto_trial_report(db, t1, 1, 0.6, 0, 2 + 3), 0); /* said at rung 3 */
    sto_intermediate *said = NULL;
    assert_int_equal(sto_trial_intermediates_after(db, t1, 0, &said, &n), 0);
    assert_int_equal(n, 1);
    assert_true(said[0].step == 1 && said[0].value == 0.6 && said[0].flags == STO_STEP_PRUNED && said[0].rung == 3);
    free(said);
    assert_int_equal(sto_trial_report(db, t1, 2, 0.6, 0, -1), HPO_EINVAL);
    assert_int_equal(sto_trial_report(db, t0, 1, 0.25, 0, 1), 0);
    assert_int_equal(sto_trial_report(db, t0, 1, 0.25, 0, 1), 0);
    assert_int_equal(sto_trial_report(db, t1, -1, 0.5, 0, 1), HPO_EINVAL);

    struct collected c = {0};
    assert_int_equal(sto_study_intermediates(db, s, collect, &c), 0);
    assert_int_equal(c.n, 5);
    assert_int_equal(c.number[0], 0);
    assert_int_equal(c.step[2], 2);
    assert_true(c.value[2] == 0.30);
    assert_int_equal(c.number[3], 1);
    assert_true(c.value[3] == 0.5);
    /* steps 0 and 1 of t0 came after its step 2: late; the repeated step 2
     * kept its first (not late) row */
    assert_int_equal(c.flags[0], STO_STEP_LATE);
    assert_int_equal(c.flags[1], STO_STEP_LATE | STO_STEP_PRUNED);
    assert_int_equal(c.flags[2], 0);
    assert_int_equal(c.flags[3], 0);
    assert_int_equal(c.number[4], 1);
    assert_int_equal(c.flags[4], STO_STEP_PRUNED);

    sto_intermediate *rows = NULL;
    assert_int_equal(sto_trial_intermediates_after(db, t0, 0, &rows, &n), 0);
    assert_int_equal(n, 2);
    assert_true(rows[0].step == 1 && rows[0].value == 0.20 && rows[0].flags == (STO_STEP_LATE | STO_STEP_PRUNED) &&
                rows[0].rung == -1);
    assert_true(rows[1].step == 2 && rows[1].value == 0.30 && rows[1].flags == 0);
    free(rows);
    assert_int_equal(sto_study_intermediates(db, 4242, collect, &c), HPO_ENOTFOUND);

    /* Pruned with NaN keeps the last (highest step) intermediate value. */
    assert_int_equal(sto_trial_finish(db, t0, STO_TRIAL_PRUNED, NAN, NAN, 0, NULL), 0);
    assert_int_equal(sto_trial_get(db, t0, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_PRUNED);
    assert_true(tr.value == 0.30);
    assert_int_equal(tr.value_n, 1);
    sto_trial_clear(&tr);
    /* Pruned with an explicit value keeps that value. */
    assert_int_equal(sto_trial_finish(db, t1, STO_TRIAL_PRUNED, 0.42, NAN, 1, NULL), 0);
    assert_int_equal(sto_trial_get(db, t1, &tr), 0);
    assert_true(tr.value == 0.42);
    sto_trial_clear(&tr);
    /* Pruned before any report: no value. */
    int64_t t2 = new_trial(db, s, NULL);
    assert_int_equal(sto_trial_finish(db, t2, STO_TRIAL_PRUNED, NAN, NAN, 0, NULL), 0);
    assert_int_equal(sto_trial_get(db, t2, &tr), 0);
    assert_true(isnan(tr.value));
    assert_int_equal(tr.value_n, 0);
    sto_trial_clear(&tr);
    /* A completed trial with NaN does not take the intermediate value. */
    int64_t t3 = new_trial(db, s, NULL);
    assert_int_equal(sto_trial_report(db, t3, 0, 0.8, 0, 0), 0);
    assert_int_equal(sto_trial_finish(db, t3, STO_TRIAL_COMPLETE, NAN, NAN, 0, NULL), 0);
    assert_int_equal(sto_trial_get(db, t3, &tr), 0);
    assert_true(isnan(tr.value));
    sto_trial_clear(&tr);
    sto_close(db);
}

static void test_nan_roundtrip(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s");
    int64_t t = new_trial(db, s, NULL);
    assert_int_equal(sto_trial_report(db, t, 0, NAN, 0, 0), 0);
    assert_int_equal(sto_trial_report(db, t, 1, INFINITY, 0, 0), 0);
    assert_int_equal(sto_trial_report(db, t, 2, -0.0, 0, 0), 0);
    int64_t *steps;
    double *values;
    size_t n;
    assert_int_equal(sto_trial_intermediates(db, t, &steps, &values, &n), 0);
    assert_int_equal(n, 3);
    assert_true(isnan(values[0]));
    assert_true(isinf(values[1]) && values[1] > 0);
    assert_true(values[2] == 0.0);
    free(steps);
    free(values);
    assert_int_equal(sto_trial_finish(db, t, STO_TRIAL_COMPLETE, NAN, NAN, 3, NULL), 0);
    sto_trial tr;
    assert_int_equal(sto_trial_get(db, t, &tr), 0);
    assert_true(isnan(tr.value));
    assert_true(isnan(tr.value_std));
    assert_int_equal(tr.value_n, 0); /* no value, no executions behind it */
    sto_trial_clear(&tr);
    /* Stored as NULL, not as some REAL. */
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM trials WHERE id = %lld AND value IS NULL AND value_std IS NULL",
             (long long)t);
    assert_int_equal(sto_test_int(db, sql), 1);
    /* A finite value with NaN std round-trips exactly. */
    int64_t u = new_trial(db, s, NULL);
    assert_int_equal(sto_trial_finish(db, u, STO_TRIAL_COMPLETE, 0.1 + 0.2, NAN, 1, NULL), 0);
    assert_int_equal(sto_trial_get(db, u, &tr), 0);
    assert_true(tr.value == 0.1 + 0.2);
    assert_true(isnan(tr.value_std));
    assert_int_equal(tr.value_n, 1);
    sto_trial_clear(&tr);
    sto_close(db);
}

static void test_expiry(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s");
    double now = hpo_now();
    int64_t past, future, none, done, renewed, past2;
    assert_int_equal(sto_trial_create(db, s, "{}", now - 10, &past, NULL), 0);
    assert_int_equal(sto_trial_create(db, s, "{}", now + 100, &future, NULL), 0);
    assert_int_equal(sto_trial_create(db, s, "{}", 0, &none, NULL), 0);
    assert_int_equal(sto_trial_create(db, s, "{}", now - 10, &done, NULL), 0);
    assert_int_equal(sto_trial_create(db, s, "{}", now - 10, &renewed, NULL), 0);
    assert_int_equal(sto_trial_create(db, s, "{}", now - 0.5, &past2, NULL), 0);
    assert_int_equal(sto_trial_finish(db, done, STO_TRIAL_COMPLETE, 1.0, NAN, 1, NULL), 0);
    assert_int_equal(sto_trial_report(db, renewed, 0, 0.5, now + 100, 0), 0); /* extends */
    assert_int_equal(sto_trial_report(db, past2, 0, 0.5, 0, 0), 0);          /* 0: keeps */

    sto_trial *list = NULL;
    size_t n = 0;
    assert_int_equal(sto_trials_expire(db, now, &list, &n), 0);
    assert_int_equal(n, 2);
    int64_t got[2] = {list[0].id, list[1].id};
    assert_true((got[0] == past && got[1] == past2) || (got[0] == past2 && got[1] == past));
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(list[i].state, STO_TRIAL_FAILED);
        assert_string_equal(list[i].error, "lease expired");
        assert_true(list[i].finished > 0);
    }
    sto_trial_list_free(list, n);

    sto_trial tr;
    assert_int_equal(sto_trial_get(db, past, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_FAILED);
    assert_string_equal(tr.error, "lease expired");
    sto_trial_clear(&tr);
    assert_int_equal(sto_trial_finish(db, past, STO_TRIAL_COMPLETE, 1.0, NAN, 1, NULL),
                     HPO_ECONFLICT); /* a late tell is refused */
    int64_t untouched[] = {future, none, renewed};
    for (size_t i = 0; i < HPO_ARRAY_LEN(untouched); i++) {
        assert_int_equal(sto_trial_get(db, untouched[i], &tr), 0);
        assert_int_equal(tr.state, STO_TRIAL_RUNNING);
        assert_null(tr.error);
        sto_trial_clear(&tr);
    }
    assert_int_equal(sto_trial_get(db, done, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_COMPLETE);
    assert_true(tr.value == 1.0);
    assert_null(tr.error);
    sto_trial_clear(&tr);

    /* Nothing left to expire now; later the future lease goes too. */
    assert_int_equal(sto_trials_expire(db, now, &list, &n), 0);
    assert_int_equal(n, 0);
    sto_trial_list_free(list, n);
    assert_int_equal(sto_trials_expire(db, now + 1000, &list, &n), 0);
    assert_int_equal(n, 2); /* future and renewed; never the lease-less one */
    sto_trial_list_free(list, n);
    assert_int_equal(sto_trial_get(db, none, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_RUNNING);
    sto_trial_clear(&tr);
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_concurrent_numbers),
        cmocka_unit_test(test_state_rules),
        cmocka_unit_test(test_list_and_counts),
        cmocka_unit_test(test_intermediates_and_pruning),
        cmocka_unit_test(test_reported_vector_keeps_first),
        cmocka_unit_test(test_nan_roundtrip),
        cmocka_unit_test(test_expiry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
