/* test_v3.c - storage, schema v3: queueing state rules (requeue only from
 * running, start from queued or running and never from a finished trial,
 * started set once, slot recorded, finish of a queued trial only as failed
 * or cancelled), requeue_running touches only running trials of its study,
 * training facts, per-epoch curves (put, replace, order, unknown trial,
 * cascade on study delete) and datasets (create, get, by name, list,
 * delete, duplicate name). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static int64_t new_trial(sto_db *db, int64_t study) {
    int64_t id;
    assert_int_equal(sto_trial_create(db, study, "{}", 0, &id, NULL), 0);
    return id;
}

static sto_trial_state state_of(sto_db *db, int64_t trial) {
    sto_trial t;
    assert_int_equal(sto_trial_get(db, trial, &t), 0);
    sto_trial_state s = t.state;
    sto_trial_clear(&t);
    return s;
}

static void test_requeue_and_start(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s");
    int64_t t = new_trial(db, s);
    sto_trial tr;
    assert_int_equal(sto_trial_get(db, t, &tr), 0);
    assert_int_equal(tr.best_epoch, 0);
    assert_null(tr.slot);
    assert_true(tr.train_seconds == 0);
    double started = tr.started;
    assert_true(started > 0);
    sto_trial_clear(&tr);

    /* running -> queued, once. */
    assert_int_equal(sto_trial_requeue(db, t), 0);
    assert_int_equal(state_of(db, t), STO_TRIAL_QUEUED);
    assert_int_equal(sto_trial_requeue(db, t), HPO_ECONFLICT);
    /* A queued trial takes no reports. */
    assert_int_equal(sto_trial_report(db, t, 0, 1.0, 0, 0), HPO_ECONFLICT);

    /* queued -> running on a slot; started is kept (set once). */
    usleep(2000);
    assert_int_equal(sto_trial_start(db, t, "cpu:0"), 0);
    assert_int_equal(sto_trial_get(db, t, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_RUNNING);
    assert_string_equal(tr.slot, "cpu:0");
    assert_true(tr.started == started);
    sto_trial_clear(&tr);
    /* running -> running on another slot: the slot follows. */
    assert_int_equal(sto_trial_start(db, t, "cuda:1"), 0);
    assert_int_equal(sto_trial_get(db, t, &tr), 0);
    assert_string_equal(tr.slot, "cuda:1");
    assert_true(tr.started == started);
    sto_trial_clear(&tr);

    /* Training facts: best epoch replaced (or kept with < 0), time adds up. */
    assert_int_equal(sto_trial_set_training(db, t, 4, 1.5), 0);
    assert_int_equal(sto_trial_set_training(db, t, -1, 2.25), 0);
    assert_int_equal(sto_trial_set_training(db, t, 7, 0), 0);
    assert_int_equal(sto_trial_set_training(db, t, 7, -1), HPO_EINVAL);
    assert_int_equal(sto_trial_set_training(db, t, 7, NAN), HPO_EINVAL);
    assert_int_equal(sto_trial_set_training(db, 9999, 1, 1), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_get(db, t, &tr), 0);
    assert_int_equal(tr.best_epoch, 7);
    assert_true(tr.train_seconds == 3.75);
    sto_trial_clear(&tr);

    /* Finished: no requeue, no start; facts may still be recorded. */
    assert_int_equal(sto_trial_finish(db, t, STO_TRIAL_COMPLETE, 0.5, NAN, 1, NULL), 0);
    assert_int_equal(sto_trial_requeue(db, t), HPO_ECONFLICT);
    assert_int_equal(sto_trial_start(db, t, "cpu:0"), HPO_ECONFLICT);
    assert_int_equal(state_of(db, t), STO_TRIAL_COMPLETE);
    assert_int_equal(sto_trial_set_training(db, t, 8, 0.25), 0);

    /* Unknown trials. */
    assert_int_equal(sto_trial_requeue(db, 9999), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_start(db, 9999, "cpu:0"), HPO_ENOTFOUND);

    /* A queued trial can be cancelled or failed, not completed or pruned. */
    int64_t q = new_trial(db, s);
    assert_int_equal(sto_trial_requeue(db, q), 0);
    assert_int_equal(sto_trial_finish(db, q, STO_TRIAL_COMPLETE, 0.5, NAN, 1, NULL),
                     HPO_ECONFLICT);
    assert_int_equal(sto_trial_finish(db, q, STO_TRIAL_PRUNED, NAN, NAN, 0, NULL),
                     HPO_ECONFLICT);
    assert_int_equal(state_of(db, q), STO_TRIAL_QUEUED);
    assert_int_equal(sto_trial_finish(db, q, STO_TRIAL_CANCELLED, NAN, NAN, 0, "study cancelled"),
                     0);
    assert_int_equal(sto_trial_get(db, q, &tr), 0);
    assert_int_equal(tr.state, STO_TRIAL_CANCELLED);
    assert_string_equal(tr.error, "study cancelled");
    assert_true(tr.finished > 0);
    sto_trial_clear(&tr);
    assert_int_equal(sto_trial_start(db, q, "cpu:0"), HPO_ECONFLICT);
    sto_close(db);
}

static void test_requeue_running(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t a = new_study(db, "a"), b = new_study(db, "b");
    int64_t a_run1 = new_trial(db, a), a_done = new_trial(db, a), a_run2 = new_trial(db, a);
    int64_t a_queued = new_trial(db, a), b_run = new_trial(db, b);
    /* A lease on a running trial is dropped by the requeue. */
    int64_t a_leased;
    assert_int_equal(sto_trial_create(db, a, "{}", hpo_now() + 60, &a_leased, NULL), 0);
    assert_int_equal(sto_trial_finish(db, a_done, STO_TRIAL_PRUNED, 0.1, NAN, 1, NULL), 0);
    assert_int_equal(sto_trial_requeue(db, a_queued), 0);

    int64_t n = -1;
    assert_int_equal(sto_trials_requeue_running(db, a, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(state_of(db, a_run1), STO_TRIAL_QUEUED);
    assert_int_equal(state_of(db, a_run2), STO_TRIAL_QUEUED);
    assert_int_equal(state_of(db, a_leased), STO_TRIAL_QUEUED);
    assert_int_equal(state_of(db, a_queued), STO_TRIAL_QUEUED);
    assert_int_equal(state_of(db, a_done), STO_TRIAL_PRUNED);
    assert_int_equal(state_of(db, b_run), STO_TRIAL_RUNNING); /* other study untouched */
    sto_trial tr;
    assert_int_equal(sto_trial_get(db, a_leased, &tr), 0);
    assert_true(tr.lease_expires == 0);
    sto_trial_clear(&tr);
    /* A queued trial is not failed by the lease scan. */
    sto_trial *expired;
    size_t ne;
    assert_int_equal(sto_trials_expire(db, hpo_now() + 3600, &expired, &ne), 0);
    assert_int_equal(ne, 0);
    sto_trial_list_free(expired, ne);

    int64_t c[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, a, c), 0);
    assert_int_equal(c[STO_TRIAL_QUEUED], 4);
    assert_int_equal(c[STO_TRIAL_RUNNING], 0);
    /* Again: nothing left to requeue; n_out may be NULL. */
    assert_int_equal(sto_trials_requeue_running(db, a, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(sto_trials_requeue_running(db, b, NULL), 0);
    assert_int_equal(state_of(db, b_run), STO_TRIAL_QUEUED);
    n = -7;
    assert_int_equal(sto_trials_requeue_running(db, 9999, &n), HPO_ENOTFOUND);
    assert_int_equal(n, -7);
    /* Filtered listing finds the queued ones. */
    sto_trial_filter f = {.state = STO_TRIAL_QUEUED, .order = STO_ORDER_NUMBER};
    sto_trial *list;
    size_t nl;
    assert_int_equal(sto_trial_list(db, a, &f, &list, &nl), 0);
    assert_int_equal(nl, 4);
    sto_trial_list_free(list, nl);
    sto_close(db);
}

static void test_epochs(void **state) {
    (void)state;
    sto_db *db = open_mem();
    int64_t s = new_study(db, "s"), other = new_study(db, "o");
    int64_t t = new_trial(db, s), u = new_trial(db, other);
    /* Written out of order, over two executions. */
    const int ex[] = {1, 0, 0, 1, 0};
    const int64_t ep[] = {1, 2, 1, 2, 3};
    for (size_t i = 0; i < HPO_ARRAY_LEN(ex); i++) {
        char m[64];
        snprintf(m, sizeof m, "{\"val_loss\":%d.%lld}", ex[i], (long long)ep[i]);
        assert_int_equal(sto_epoch_put(db, t, ex[i], ep[i], m), 0);
    }
    assert_int_equal(sto_epoch_put(db, t, 0, 2, "{\"val_loss\":9}"), 0); /* replaces */
    assert_int_equal(sto_epoch_put(db, t, 1, 3, NULL), 0);
    assert_int_equal(sto_epoch_put(db, u, 0, 1, "{\"u\":1}"), 0);
    assert_int_equal(sto_epoch_put(db, 9999, 0, 1, "{}"), HPO_ENOTFOUND);
    assert_int_equal(sto_epoch_put(db, t, -1, 1, "{}"), HPO_EINVAL);
    assert_int_equal(sto_epoch_put(db, t, 0, -1, "{}"), HPO_EINVAL);

    sto_epoch *e = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_epochs(db, t, &e, &n), 0);
    assert_int_equal(n, 6);
    const int want_ex[] = {0, 0, 0, 1, 1, 1};
    const int64_t want_ep[] = {1, 2, 3, 1, 2, 3};
    const char *want_m[] = {"{\"val_loss\":0.1}", "{\"val_loss\":9}", "{\"val_loss\":0.3}",
                            "{\"val_loss\":1.1}", "{\"val_loss\":1.2}", "{}"};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(e[i].execution, want_ex[i]);
        assert_int_equal(e[i].epoch, want_ep[i]);
        assert_string_equal(e[i].metrics, want_m[i]);
    }
    sto_epoch_list_free(e, n);

    /* A trial without curves: empty list; unknown trial: not found. */
    int64_t empty = new_trial(db, s);
    e = (sto_epoch *)&n;
    assert_int_equal(sto_trial_epochs(db, empty, &e, &n), 0);
    assert_int_equal(n, 0);
    sto_epoch_list_free(e, n);
    sto_epoch *keep = (sto_epoch *)&db;
    assert_int_equal(sto_trial_epochs(db, 9999, &keep, &n), HPO_ENOTFOUND);
    assert_ptr_equal(keep, (sto_epoch *)&db);

    /* Deleting the study deletes the trials and their curves (cascade). */
    assert_int_equal(sto_study_delete(db, s), 0);
    assert_int_equal(sto_trial_epochs(db, t, &e, &n), HPO_ENOTFOUND);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM epochs"), 1); /* only the other study's */
    assert_int_equal(sto_test_int(db, "SELECT MIN(trial_id) FROM epochs"), u);
    assert_int_equal(sto_trial_epochs(db, u, &e, &n), 0);
    assert_int_equal(n, 1);
    sto_epoch_list_free(e, n);
    sto_close(db);
}

/* place: what it was told, and what it answers */
typedef struct placed {
    int64_t id;
    int rc;
} placed;

static int place_files(void *arg, int64_t id) {
    placed *p = arg;
    p->id = id;
    return p->rc;
}

/* sto_dataset_create_placed: the files are placed inside the insert's
 * transaction, with the row's id; a failed placing stores no row. */
static void test_dataset_placed(void **state) {
    (void)state;
    sto_db *db = open_mem();
    placed p = {.rc = HPO_EIO};
    int64_t id = -1;
    assert_int_equal(sto_dataset_create_placed(db, "a", "csv", "data.csv", NULL, 1, 1, place_files, &p, &id), HPO_EIO);
    assert_true(p.id > 0);
    sto_dataset d;
    assert_int_equal(sto_dataset_get_by_name(db, "a", &d), HPO_ENOTFOUND);
    p = (placed){.rc = 0};
    assert_int_equal(sto_dataset_create_placed(db, "a", "csv", "data.csv", NULL, 1, 1, place_files, &p, &id), 0);
    assert_int_equal(id, p.id);
    assert_int_equal(sto_dataset_get(db, id, &d), 0);
    sto_dataset_clear(&d);
    sto_close(db);
}

static void test_datasets(void **state) {
    (void)state;
    sto_db *db = open_mem();
    sto_dataset *list = NULL;
    size_t n = 9;
    assert_int_equal(sto_dataset_list(db, &list, &n), 0);
    assert_int_equal(n, 0);
    sto_dataset_list_free(list, n);

    int64_t iris = 0, digits = 0, id = -3;
    double before = hpo_now();
    assert_int_equal(sto_dataset_create(db, "iris", "csv", "datasets/1-iris/data.csv",
                                        "{\"shape\":[4],\"n_classes\":3}", 150, 4551, &iris),
                     0);
    assert_int_equal(sto_dataset_create(db, "digits", "npy",
                                        "[\"datasets/2-digits/x.npy\",\"datasets/2-digits/y.npy\"]",
                                        NULL, 200, 4096, &digits),
                     0);
    assert_true(iris > 0 && digits > iris);
    /* Duplicate name: conflict, nothing written, id untouched. */
    assert_int_equal(sto_dataset_create(db, "iris", "npy", "x", "{}", 1, 1, &id), HPO_ECONFLICT);
    assert_int_equal(id, -3);
    assert_int_equal(sto_dataset_create(db, NULL, "csv", "x", "{}", 1, 1, &id), HPO_EINVAL);
    assert_int_equal(sto_dataset_create(db, "", "csv", "x", "{}", 1, 1, &id), HPO_EINVAL);
    assert_int_equal(sto_dataset_create(db, "x", NULL, "x", "{}", 1, 1, &id), HPO_EINVAL);
    assert_int_equal(sto_dataset_create(db, "x", "csv", NULL, "{}", 1, 1, &id), HPO_EINVAL);
    assert_int_equal(id, -3);

    sto_dataset d;
    assert_int_equal(sto_dataset_get(db, iris, &d), 0);
    assert_int_equal(d.id, iris);
    assert_string_equal(d.name, "iris");
    assert_string_equal(d.format, "csv");
    assert_string_equal(d.path, "datasets/1-iris/data.csv");
    assert_string_equal(d.meta, "{\"shape\":[4],\"n_classes\":3}");
    assert_int_equal(d.n_rows, 150);
    assert_int_equal(d.bytes, 4551);
    assert_true(d.created >= before && d.created <= hpo_now());
    sto_dataset_clear(&d);
    assert_int_equal(sto_dataset_get_by_name(db, "digits", &d), 0);
    assert_int_equal(d.id, digits);
    assert_string_equal(d.format, "npy");
    assert_string_equal(d.meta, "{}");
    assert_int_equal(d.n_rows, 200);
    sto_dataset_clear(&d);
    assert_int_equal(sto_dataset_get(db, 9999, &d), HPO_ENOTFOUND);
    assert_int_equal(sto_dataset_get_by_name(db, "nope", &d), HPO_ENOTFOUND);
    assert_int_equal(sto_dataset_get_by_name(db, "IRIS", &d), HPO_ENOTFOUND); /* exact */

    assert_int_equal(sto_dataset_list(db, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "iris"); /* oldest first */
    assert_string_equal(list[1].name, "digits");
    assert_string_equal(list[1].path, "[\"datasets/2-digits/x.npy\",\"datasets/2-digits/y.npy\"]");
    sto_dataset_list_free(list, n);

    assert_int_equal(sto_dataset_delete(db, iris), 0);
    assert_int_equal(sto_dataset_delete(db, iris), HPO_ENOTFOUND);
    assert_int_equal(sto_dataset_get(db, iris, &d), HPO_ENOTFOUND);
    /* The name is free again; ids are never reused, even the newest's. */
    assert_int_equal(sto_dataset_create(db, "iris", "csv", "p", "{}", 1, 1, &id), 0);
    assert_true(id > digits);
    int64_t last = id;
    assert_int_equal(sto_dataset_delete(db, last), 0);
    assert_int_equal(sto_dataset_create(db, "iris", "csv", "p", "{}", 1, 1, &id), 0);
    assert_true(id > last);
    assert_int_equal(sto_dataset_list(db, &list, &n), 0);
    assert_int_equal(n, 2);
    sto_dataset_list_free(list, n);
    sto_dataset_clear(NULL);
    sto_dataset_list_free(NULL, 0);
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requeue_and_start),
        cmocka_unit_test(test_requeue_running),
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_datasets),
        cmocka_unit_test(test_dataset_placed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
