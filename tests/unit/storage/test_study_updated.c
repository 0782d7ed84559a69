/* test_study_updated.c - storage: a study's `updated` moves with its trials
 * (created, started, reported, an epoch stored, requeued, finished, failed
 * by lease expiry), in the transaction of the change: a call that fails
 * leaves it where it was, and other studies keep theirs.
 *
 * Each step first sets every study's updated to 1 (a time long past), so
 * the test reads whether the call moved it, not how fast the clock runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

static sto_db *db;

static void set_updated_long_ago(void) {
    sto_test_exec(db, "UPDATE studies SET updated = 1");
}

static double updated_of(int64_t study) {
    sto_study s;
    assert_int_equal(sto_study_get(db, study, &s), 0);
    double u = s.updated;
    sto_study_clear(&s);
    return u;
}

static sto_trial trial(int64_t id) {
    sto_trial t;
    assert_int_equal(sto_trial_get(db, id, &t), 0);
    return t;
}

static void test_updated_moves_with_trials(void **state) {
    (void)state;
    assert_int_equal(sto_test_open(&db), 0);
    int64_t a, b, t1, t2;
    assert_int_equal(sto_study_create(db, "a", "{}", &a), 0);
    assert_int_equal(sto_study_create(db, "b", "{}", &b), 0);

    /* created: updated is the trial's creation time */
    set_updated_long_ago();
    assert_int_equal(sto_trial_create(db, a, "{}", hpo_now() + 600, &t1, NULL), 0);
    sto_trial t = trial(t1);
    printf("create:  updated %.6f, trial created %.6f\n", updated_of(a), t.created);
    assert_true(updated_of(a) == t.created);
    assert_true(updated_of(b) == 1); /* the other study is untouched */
    sto_trial_clear(&t);

    /* reported */
    set_updated_long_ago();
    assert_int_equal(sto_trial_report(db, t1, 0, 0.5, 0, 0), 0);
    printf("report:  updated %.6f\n", updated_of(a));
    assert_true(updated_of(a) > 1);
    assert_true(updated_of(b) == 1);

    /* finished: updated is the trial's finish time */
    set_updated_long_ago();
    assert_int_equal(sto_trial_finish(db, t1, STO_TRIAL_COMPLETE, 0.25, NAN, 1, NULL), 0);
    t = trial(t1);
    printf("finish:  updated %.6f, trial finished %.6f\n", updated_of(a), t.finished);
    assert_true(updated_of(a) == t.finished);
    sto_trial_clear(&t);

    /* a call that fails (a report after the end) stores nothing, updated included */
    set_updated_long_ago();
    assert_int_equal(sto_trial_report(db, t1, 1, 0.4, 0, 0), HPO_ECONFLICT);
    assert_int_equal(sto_trial_finish(db, t1, STO_TRIAL_FAILED, NAN, NAN, 0, "x"), HPO_ECONFLICT);
    assert_true(updated_of(a) == 1);

    /* failed by lease expiry: updated is the expiry's time */
    assert_int_equal(sto_trial_create(db, b, "{}", hpo_now() + 1, &t2, NULL), 0);
    set_updated_long_ago();
    double later = hpo_now() + 3600;
    sto_trial *expired = NULL;
    size_t n = 0;
    assert_int_equal(sto_trials_expire(db, later, &expired, &n), 0);
    assert_int_equal(n, 1);
    sto_trial_list_free(expired, n);
    printf("expire:  updated %.6f (expiry at %.6f)\n", updated_of(b), later);
    assert_true(updated_of(b) == later);
    assert_true(updated_of(a) == 1);

    /* embedded trials: started, an epoch, requeued, requeued by recovery */
    int64_t t3;
    assert_int_equal(sto_trial_create(db, a, "{}", 0, &t3, NULL), 0);
    set_updated_long_ago();
    assert_int_equal(sto_trial_requeue(db, t3), 0);
    assert_true(updated_of(a) > 1);
    set_updated_long_ago();
    assert_int_equal(sto_trial_start(db, t3, "cpu:0"), 0);
    assert_true(updated_of(a) > 1);
    set_updated_long_ago();
    assert_int_equal(sto_epoch_put(db, t3, 0, 1, "{\"loss\":1}"), 0);
    assert_true(updated_of(a) > 1);
    set_updated_long_ago();
    int64_t k = 0;
    assert_int_equal(sto_trials_requeue_running(db, a, &k), 0);
    assert_int_equal(k, 1);
    assert_true(updated_of(a) > 1);
    assert_true(updated_of(b) == 1);

    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_updated_moves_with_trials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
