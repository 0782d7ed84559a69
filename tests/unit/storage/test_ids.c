/* test_ids.c - storage: ids are never reused (create, delete the newest,
 * create again -> a new id, for every id-bearing table, also across a
 * reopen); an event written with its change (_ev calls) is stored together
 * with it or not at all; a full database (SQLITE_FULL, made here with
 * PRAGMA max_page_count) answers HPO_ENOSPACE and stores nothing partial. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

static int64_t raw_int(sto_db *db, const char *sql) { return sto_test_int(db, sql); }

static int64_t n_events(sto_db *db, int64_t study) {
    sto_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(sto_event_list(db, study, 0, 0, &ev, &n), 0);
    sto_event_list_free(ev, n);
    return (int64_t)n;
}

/* A study with one trial (with an epoch and an intermediate value), one
 * model and one event: every kind of id a study owns. */
struct owned {
    int64_t study, trial, model, event;
};

static void make_study(sto_db *db, const char *name, struct owned *o) {
    assert_int_equal(sto_study_create(db, name, "{}", &o->study), 0);
    assert_int_equal(sto_trial_create(db, o->study, "{}", 0, &o->trial, NULL), 0);
    assert_int_equal(sto_trial_report(db, o->trial, 1, 0.5, 0, 0), 0);
    assert_int_equal(sto_epoch_put(db, o->trial, 0, 1, "{}"), 0);
    assert_int_equal(sto_model_create(db, o->study, o->trial, STO_MODEL_REFIT, "{}", 0, &o->model), 0);
    assert_int_equal(sto_event_append(db, o->study, o->trial, "x", "{}", &o->event), 0);
}

static void test_ids_never_reused(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    struct owned a, b, c, d;
    make_study(db, "a", &a);
    make_study(db, "b", &b);
    /* delete the newest: before schema v5 the next study got b's id again,
     * and its first trial b's trial id */
    assert_int_equal(sto_study_delete(db, b.study), 0);
    make_study(db, "c", &c);
    assert_true(c.study > b.study);
    assert_true(c.trial > b.trial);
    assert_true(c.model > b.model);
    assert_true(c.event > b.event);
    /* the old ids name nothing, for every call that takes them */
    sto_trial t;
    assert_int_equal(sto_trial_get(db, b.trial, &t), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_report(db, b.trial, 2, 0.25, 0, 0), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_finish(db, b.trial, STO_TRIAL_COMPLETE, 1, NAN, 1, NULL), HPO_ENOTFOUND);
    assert_int_equal(sto_epoch_put(db, b.trial, 0, 2, "{}"), HPO_ENOTFOUND);
    assert_int_equal(sto_event_append(db, b.study, 0, "x", "{}", NULL), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_create(db, b.study, "{}", 0, NULL, NULL), HPO_ENOTFOUND);
    sto_model m;
    assert_int_equal(sto_model_get(db, b.model, &m), HPO_ENOTFOUND);

    /* across a reopen (a restart of hpod), after deleting every study */
    assert_int_equal(sto_study_delete(db, c.study), 0);
    assert_int_equal(sto_study_delete(db, a.study), 0);
    sto_close(db);
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    make_study(db, "d", &d);
    assert_true(d.study > c.study && d.trial > c.trial && d.model > c.model && d.event > c.event);

    /* datasets: AUTOINCREMENT since v3 */
    int64_t ds1, ds2;
    assert_int_equal(sto_dataset_create(db, "d1", "csv", "f", NULL, 1, 1, &ds1), 0);
    assert_int_equal(sto_dataset_delete(db, ds1), 0);
    assert_int_equal(sto_dataset_create(db, "d1", "csv", "f", NULL, 1, 1, &ds2), 0);
    assert_true(ds2 > ds1);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static void test_events_with_their_change(void **state) {
    (void)state;
    sto_db *db = NULL;
    assert_int_equal(sto_test_open(&db), 0);
    sto_event_in created = {"study_created", NULL};
    int64_t sid, tid;
    assert_int_equal(sto_study_create_ev(db, "s", "{}", &created, &sid), 0);
    sto_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(sto_event_list(db, sid, 0, 0, &ev, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(ev[0].type, "study_created");
    char want[64];
    snprintf(want, sizeof want, "{\"id\":%lld}", (long long)sid);
    assert_string_equal(ev[0].data, want);
    assert_int_equal(ev[0].trial_id, 0);
    sto_event_list_free(ev, n);

    assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, NULL), 0);
    sto_event_in started = {"trial_started", "{\"slot\":\"cpu:0\"}"};
    assert_int_equal(sto_trial_start_ev(db, tid, "cpu:0", &started), 0);
    sto_event_in epoch = {"epoch", "{\"epoch\":1}"};
    assert_int_equal(sto_epoch_put_ev(db, tid, 0, 1, "{}", &epoch), 0);
    sto_event_in requeued = {"trial_requeued", NULL};
    assert_int_equal(sto_trial_requeue_ev(db, tid, &requeued), 0);
    /* a change refused: no event either */
    assert_int_equal(sto_trial_requeue_ev(db, tid, &requeued), HPO_ECONFLICT);
    assert_int_equal(sto_trial_start_ev(db, tid, "cpu:1", &started), 0);
    sto_event_in done = {"trial_complete", "{\"value\":1}"};
    assert_int_equal(sto_trial_finish_ev(db, tid, STO_TRIAL_COMPLETE, 1, NAN, 1, NULL, &done), 0);
    assert_int_equal(sto_trial_finish_ev(db, tid, STO_TRIAL_FAILED, NAN, NAN, 0, "x", &done), HPO_ECONFLICT);
    sto_event_in paused = {"study_paused", NULL};
    assert_int_equal(sto_study_set_state_ev(db, sid, STO_STUDY_PAUSED, &paused), 0);
    int64_t mid;
    assert_int_equal(sto_model_create(db, sid, tid, STO_MODEL_TRIAL, "{}", 0, &mid), 0);
    sto_event_in mstart = {"model_started", NULL}, mdone = {"model_complete", NULL};
    assert_int_equal(sto_model_start_ev(db, mid, &mstart), 0);
    assert_int_equal(sto_model_requeue(db, mid), 0);
    assert_int_equal(sto_model_requeue(db, mid), HPO_ECONFLICT);
    assert_int_equal(sto_model_start_ev(db, mid, &mstart), 0);
    assert_int_equal(sto_model_finish_ev(db, mid, STO_MODEL_COMPLETE, "{}", NULL, NULL, &mdone), 0);
    assert_int_equal(sto_model_finish_ev(db, mid, STO_MODEL_FAILED, NULL, NULL, "x", &mdone), HPO_ECONFLICT);

    static const char *const types[] = {"study_created", "trial_started", "epoch",         "trial_requeued",
                                        "trial_started", "trial_complete", "study_paused", "model_started",
                                        "model_started", "model_complete"};
    assert_int_equal(sto_event_list(db, sid, 0, 0, &ev, &n), 0);
    assert_int_equal(n, HPO_ARRAY_LEN(types));
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(ev[i].type, types[i]);
        assert_int_equal(ev[i].study_id, sid);
        if (i >= 1 && i <= 5) assert_int_equal(ev[i].trial_id, tid);
        if (i >= 7) assert_int_equal(ev[i].trial_id, tid); /* the model's origin trial */
    }
    assert_string_equal(ev[1].data, "{\"slot\":\"cpu:0\"}");
    assert_string_equal(ev[3].data, "{}");
    sto_event_list_free(ev, n);

    /* an event about a row that is gone: nothing stored */
    assert_int_equal(sto_study_delete(db, sid), 0);
    assert_int_equal(sto_trial_finish_ev(db, tid, STO_TRIAL_FAILED, NAN, NAN, 0, NULL, &done), HPO_ENOTFOUND);
    assert_int_equal(raw_int(db, "SELECT COUNT(*) FROM events"), 0);
    sto_close(db);
}

/* SQLITE_FULL (what SQLite answers when a write hits ENOSPC; here the page
 * limit of PRAGMA max_page_count) -> HPO_ENOSPACE, nothing half-stored. */
static void test_full_database(void **state) {
    (void)state;
    if (sto_test_pg()) skip(); /* SQLite's max_page_count fills the "disk" */
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    sto_event_in created = {"study_created", NULL};
    int64_t sid, tid;
    assert_int_equal(sto_study_create_ev(db, "s", "{}", &created, &sid), 0);
    assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, NULL), 0);
    int64_t pages = raw_int(db, "PRAGMA page_count");
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", (long long)pages);
    raw_int(db, sql);
    /* a spec of many pages cannot fit */
    size_t big_n = 256 * 1024;
    char *big = malloc(big_n + 1);
    memset(big, 'x', big_n);
    big[big_n] = 0;
    int64_t other = 0;
    assert_int_equal(sto_study_create_ev(db, "big", big, &created, &other), HPO_ENOSPACE);
    sto_event_in epoch = {"epoch", big};
    assert_int_equal(sto_epoch_put_ev(db, tid, 0, 1, "{}", &epoch), HPO_ENOSPACE);
    /* nothing partial: one study, its one event, no epoch row */
    assert_int_equal(raw_int(db, "SELECT COUNT(*) FROM studies"), 1);
    assert_int_equal(n_events(db, sid), 1);
    assert_int_equal(raw_int(db, "SELECT COUNT(*) FROM epochs"), 0);
    /* space again: the same calls work, and the failed create used no id
     * that a client could have seen */
    raw_int(db, "PRAGMA max_page_count = 1073741823");
    assert_int_equal(sto_study_create_ev(db, "big", big, &created, &other), 0);
    assert_true(other > sid);
    assert_int_equal(n_events(db, other), 1);
    assert_int_equal(sto_epoch_put_ev(db, tid, 0, 1, "{}", &epoch), 0);
    assert_int_equal(n_events(db, sid), 2);
    free(big);
    sto_close(db);
    sto_tmp_close(&tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_never_reused),
        cmocka_unit_test(test_events_with_their_change),
        cmocka_unit_test(test_full_database),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
