/* test_migrations.c - storage schema: a fresh database reaches
 * sto_schema_version(), reopening keeps data, an old database (first
 * migration only, or v2 before the embedded-training step) is migrated with
 * its data, v4 is rebuilt with AUTOINCREMENT ids (v5) keeping every row and
 * foreign key, v5 gains user_attrs and notes (v6) with their defaults on
 * old rows, a newer one is refused, and the hot queries use their
 * indexes (EXPLAIN QUERY PLAN). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include <sqlite3.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

/* A raw connection's single integer answer. */
static int64_t raw_int(sqlite3 *c, const char *sql) {
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(c, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

static int has_object(sqlite3 *c, const char *type, const char *name) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM sqlite_master WHERE type = '%s' AND name = '%s'",
             type, name);
    return (int)raw_int(c, sql);
}

static const char *const tables[] = {"studies", "trials",   "intermediates",
                                     "events",  "epochs",   "datasets"};
static const char *const indexes[] = {"events_study_id", "trials_study_state",
                                      "trials_study_value", "trials_lease"};

/* Data written through the API, checked after each reopen. */
struct fixture {
    int64_t study, trial, pruned, event;
};

static void write_data(sto_db *db, struct fixture *f) {
    assert_int_equal(sto_study_create(db, "kept", "{\"spec\":true}", &f->study), 0);
    assert_int_equal(sto_trial_create(db, f->study, "{\"a\":1}", 0, &f->trial, NULL), 0);
    assert_int_equal(sto_trial_report(db, f->trial, 0, 0.25, 0, 0), 0);
    assert_int_equal(sto_trial_finish(db, f->trial, STO_TRIAL_COMPLETE, 0.75, 0.05, 2, NULL), 0);
    assert_int_equal(sto_trial_create(db, f->study, "{\"a\":2}", 0, &f->pruned, NULL), 0);
    assert_int_equal(sto_trial_report(db, f->pruned, 3, 0.125, 0, 0), 0);
    assert_int_equal(sto_trial_finish(db, f->pruned, STO_TRIAL_PRUNED, NAN, NAN, 0, NULL), 0);
    assert_int_equal(sto_event_append(db, f->study, f->trial, "trial_complete", "{\"v\":0.75}",
                                      &f->event),
                     0);
}

static void check_data(sto_db *db, const struct fixture *f, int64_t next_number) {
    sto_study s;
    assert_int_equal(sto_study_get(db, f->study, &s), 0);
    assert_string_equal(s.name, "kept");
    assert_string_equal(s.spec, "{\"spec\":true}");
    sto_study_clear(&s);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, f->trial, &t), 0);
    assert_int_equal(t.number, 0);
    assert_int_equal(t.state, STO_TRIAL_COMPLETE);
    assert_true(t.value == 0.75 && t.value_std == 0.05 && t.value_n == 2);
    assert_string_equal(t.params, "{\"a\":1}");
    sto_trial_clear(&t);
    assert_int_equal(sto_trial_get(db, f->pruned, &t), 0);
    assert_int_equal(t.number, 1);
    assert_int_equal(t.state, STO_TRIAL_PRUNED);
    assert_true(t.value == 0.125);
    assert_int_equal(t.last_step, 3);
    sto_trial_clear(&t);
    sto_event *ev;
    size_t n;
    assert_int_equal(sto_event_list(db, f->study, 0, 0, &ev, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].id, f->event);
    assert_string_equal(ev[0].data, "{\"v\":0.75}");
    sto_event_list_free(ev, n);
    /* Numbering continues after a reopen. */
    int64_t id, number;
    assert_int_equal(sto_trial_create(db, f->study, "{}", 0, &id, &number), 0);
    assert_int_equal(number, next_number);
    assert_int_equal(sto_trial_finish(db, id, STO_TRIAL_CANCELLED, NAN, NAN, 0, NULL), 0);
    assert_int_equal(sto_study_set_state(db, f->study, STO_STUDY_RUNNING), 0);
}

static void test_fresh_and_reopen(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    assert_true(sto_schema_version() >= 2);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "PRAGMA user_version"), sto_schema_version());
    for (size_t i = 0; i < HPO_ARRAY_LEN(tables); i++)
        assert_int_equal(has_object(sto_sql_sqlite(db->conn), "table", tables[i]), 1);
    for (size_t i = 0; i < HPO_ARRAY_LEN(indexes); i++)
        assert_int_equal(has_object(sto_sql_sqlite(db->conn), "index", indexes[i]), 1);
    struct fixture f;
    write_data(db, &f);
    sto_close(db);

    for (int round = 0; round < 2; round++) {
        assert_int_equal(sto_open(tmp.db, round ? STO_SYNC_FULL : STO_SYNC_NORMAL, &db), 0);
        assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "PRAGMA user_version"), sto_schema_version());
        check_data(db, &f, 2 + round); /* each round adds one cancelled trial */
        int64_t c[STO_TRIAL_N_STATES];
        assert_int_equal(sto_trial_counts(db, f.study, c), 0);
        assert_int_equal(c[STO_TRIAL_CANCELLED], 1 + round);
        assert_int_equal(c[STO_TRIAL_COMPLETE], 1);
        assert_int_equal(c[STO_TRIAL_PRUNED], 1);
        sto_close(db);
    }
    sto_tmp_close(&tmp);
}

static void test_old_version_is_migrated(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_db_open_at(tmp.db, STO_SYNC_NORMAL, 0, &db), HPO_EINVAL);
    assert_int_equal(sto_db_open_at(tmp.db, STO_SYNC_NORMAL, sto_schema_version() + 1, &db),
                     HPO_EINVAL);
    /* Version 1 only: the tables, without the query indexes of step 2. */
    assert_int_equal(sto_db_open_at(tmp.db, STO_SYNC_NORMAL, 1, &db), 0);
    struct fixture f;
    write_data(db, &f);
    sto_close(db);

    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(tmp.db, &raw), SQLITE_OK);
    assert_int_equal(raw_int(raw, "PRAGMA user_version"), 1);
    assert_int_equal(has_object(raw, "table", "trials"), 1);
    assert_int_equal(has_object(raw, "index", "trials_lease"), 0);
    assert_int_equal(has_object(raw, "index", "trials_study_state"), 0);
    sqlite3_close(raw);

    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "PRAGMA user_version"), sto_schema_version());
    for (size_t i = 0; i < HPO_ARRAY_LEN(indexes); i++)
        assert_int_equal(has_object(sto_sql_sqlite(db->conn), "index", indexes[i]), 1);
    check_data(db, &f, 2);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM pragma_integrity_check"
                                       " WHERE integrity_check <> 'ok'"),
                     0);
    sto_close(db);
    sto_tmp_close(&tmp);
}

/* v2 -> v3: trials gain best_epoch/slot/train_seconds (defaults for old
 * rows), epochs and datasets appear, and the new calls work on old rows. */
static void test_v2_is_migrated_to_v3(void **state) {
    (void)state;
    assert_true(sto_schema_version() >= 3);
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_db_open_at(tmp.db, STO_SYNC_NORMAL, 2, &db), 0);
    struct fixture f;
    write_data(db, &f);
    int64_t running;
    assert_int_equal(sto_trial_create(db, f.study, "{\"a\":3}", 0, &running, NULL), 0);
    sto_close(db);

    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(tmp.db, &raw), SQLITE_OK);
    assert_int_equal(raw_int(raw, "PRAGMA user_version"), 2);
    assert_int_equal(has_object(raw, "table", "epochs"), 0);
    assert_int_equal(has_object(raw, "table", "datasets"), 0);
    assert_int_equal(raw_int(raw, "SELECT COUNT(*) FROM pragma_table_info('trials')"
                                  " WHERE name = 'best_epoch'"),
                     0);
    sqlite3_close(raw);

    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "PRAGMA user_version"), sto_schema_version());
    for (size_t i = 0; i < HPO_ARRAY_LEN(tables); i++)
        assert_int_equal(has_object(sto_sql_sqlite(db->conn), "table", tables[i]), 1);
    for (size_t i = 0; i < HPO_ARRAY_LEN(indexes); i++)
        assert_int_equal(has_object(sto_sql_sqlite(db->conn), "index", indexes[i]), 1);
    /* Old rows read with the defaults of the new columns. */
    sto_trial t;
    assert_int_equal(sto_trial_get(db, f.trial, &t), 0);
    assert_int_equal(t.best_epoch, 0);
    assert_null(t.slot);
    assert_true(t.train_seconds == 0);
    sto_trial_clear(&t);
    check_data(db, &f, 3);
    /* The v3 calls on a trial written at v2. */
    assert_int_equal(sto_trials_requeue_running(db, f.study, NULL), 0);
    assert_int_equal(sto_trial_start(db, running, "cpu:1"), 0);
    assert_int_equal(sto_trial_set_training(db, running, 2, 0.5), 0);
    assert_int_equal(sto_epoch_put(db, running, 0, 1, "{\"loss\":1}"), 0);
    assert_int_equal(sto_trial_get(db, running, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_RUNNING);
    assert_string_equal(t.slot, "cpu:1");
    assert_int_equal(t.best_epoch, 2);
    sto_trial_clear(&t);
    int64_t ds;
    assert_int_equal(sto_dataset_create(db, "d", "csv", "p", "{}", 1, 2, &ds), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM pragma_integrity_check"
                                       " WHERE integrity_check <> 'ok'"),
                     0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM pragma_foreign_key_check"), 0);
    sto_close(db);
    /* Reopening a v3 database runs no step and keeps everything. */
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    sto_dataset d;
    assert_int_equal(sto_dataset_get(db, ds, &d), 0);
    assert_string_equal(d.name, "d");
    sto_dataset_clear(&d);
    sto_epoch *e;
    size_t n;
    assert_int_equal(sto_trial_epochs(db, running, &e, &n), 0);
    assert_int_equal(n, 1);
    sto_epoch_list_free(e, n);
    sto_close(db);
    sto_tmp_close(&tmp);
}

/* The SQL of a table as stored, for checks on its definition. */
static int table_sql_has(sqlite3 *c, const char *table, const char *what) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '%s' AND sql LIKE '%%%s%%'",
             table, what);
    return (int)raw_int(c, sql);
}

/* v4 -> v5: studies and trials are rebuilt with AUTOINCREMENT; every row,
 * column and foreign key survives (cascades included), and sqlite_sequence
 * is seeded past every id still known, so no id is handed out again. */
static void test_v4_is_migrated_to_v5(void **state) {
    (void)state;
    assert_true(sto_schema_version() >= 5);
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_db_open_at(tmp.db, STO_SYNC_NORMAL, 4, &db), 0);
    struct fixture f;
    write_data(db, &f);
    /* v3/v4 data: a running embedded trial with training facts and an
     * epoch, a model, a dataset */
    int64_t running, model, ds;
    assert_int_equal(sto_trial_create(db, f.study, "{\"a\":3}", 0, &running, NULL), 0);
    assert_int_equal(sto_trial_start(db, running, "cpu:1"), 0);
    assert_int_equal(sto_trial_set_training(db, running, 2, 0.5), 0);
    assert_int_equal(sto_epoch_put(db, running, 0, 1, "{\"loss\":1}"), 0);
    assert_int_equal(sto_model_create(db, f.study, f.trial, STO_MODEL_REFIT, "{\"epochs\":3}", 0, &model), 0);
    assert_int_equal(sto_dataset_create(db, "d", "csv", "p", "{}", 1, 2, &ds), 0);
    /* a second study with a trial, then deleted: the newest ids */
    int64_t gone, gone_trial;
    assert_int_equal(sto_study_create(db, "gone", "{}", &gone), 0);
    assert_int_equal(sto_trial_create(db, gone, "{}", 0, &gone_trial, NULL), 0);
    /* an id known only from a reference (models.trial_id has no foreign
     * key): the seed must pass it too */
    int64_t ref_trial = gone_trial + 40, ref_model;
    assert_int_equal(sto_model_create(db, f.study, ref_trial, STO_MODEL_TRIAL, "{}", 0, &ref_model), 0);
    /* the old schema hands a deleted newest id out again */
    assert_int_equal(sto_study_delete(db, gone), 0);
    int64_t again;
    assert_int_equal(sto_study_create(db, "again", "{}", &again), 0);
    assert_int_equal(again, gone);
    assert_int_equal(sto_study_delete(db, again), 0);
    sto_close(db);

    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(tmp.db, &raw), SQLITE_OK);
    assert_int_equal(raw_int(raw, "PRAGMA user_version"), 4);
    assert_int_equal(table_sql_has(raw, "studies", "AUTOINCREMENT"), 0);
    assert_int_equal(table_sql_has(raw, "trials", "AUTOINCREMENT"), 0);
    sqlite3_close(raw);

    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "PRAGMA user_version"), sto_schema_version());
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "PRAGMA foreign_keys"), 1); /* back on after the rebuild */
    assert_int_equal(table_sql_has(sto_sql_sqlite(db->conn), "studies", "AUTOINCREMENT"), 1);
    assert_int_equal(table_sql_has(sto_sql_sqlite(db->conn), "trials", "AUTOINCREMENT"), 1);
    assert_int_equal(has_object(sto_sql_sqlite(db->conn), "table", "new_studies"), 0);
    assert_int_equal(has_object(sto_sql_sqlite(db->conn), "table", "new_trials"), 0);
    for (size_t i = 0; i < HPO_ARRAY_LEN(tables); i++)
        assert_int_equal(has_object(sto_sql_sqlite(db->conn), "table", tables[i]), 1);
    for (size_t i = 0; i < HPO_ARRAY_LEN(indexes); i++)
        assert_int_equal(has_object(sto_sql_sqlite(db->conn), "index", indexes[i]), 1);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM pragma_integrity_check"
                                       " WHERE integrity_check <> 'ok'"),
                     0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM pragma_foreign_key_check"), 0);
    /* the sequence starts past every known id */
    assert_true(raw_int(sto_sql_sqlite(db->conn), "SELECT seq FROM sqlite_sequence WHERE name = 'studies'") >= f.study);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT seq FROM sqlite_sequence WHERE name = 'trials'"), ref_trial);
    /* rows with every column */
    sto_trial t;
    assert_int_equal(sto_trial_get(db, running, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_RUNNING);
    assert_string_equal(t.slot, "cpu:1");
    assert_int_equal(t.best_epoch, 2);
    assert_true(t.train_seconds == 0.5);
    assert_string_equal(t.params, "{\"a\":3}");
    sto_trial_clear(&t);
    sto_epoch *e;
    size_t n;
    assert_int_equal(sto_trial_epochs(db, running, &e, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].metrics, "{\"loss\":1}");
    sto_epoch_list_free(e, n);
    sto_model m;
    assert_int_equal(sto_model_get(db, model, &m), 0);
    assert_int_equal(m.study_id, f.study);
    assert_string_equal(m.spec, "{\"epochs\":3}");
    sto_model_clear(&m);
    assert_int_equal(sto_model_get(db, ref_model, &m), 0);
    assert_int_equal(m.trial_id, ref_trial);
    sto_model_clear(&m);
    check_data(db, &f, 3);
    /* new ids are past every one used before */
    int64_t sid, tid;
    assert_int_equal(sto_study_create(db, "new", "{}", &sid), 0);
    /* (the deleted "gone" left no trace in the v4 database to learn its id
     * from: that is what v5 fixes from now on) */
    assert_true(sid > f.study);
    assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, NULL), 0);
    assert_true(tid > ref_trial);
    /* the foreign keys point at the rebuilt tables: a delete still cascades */
    assert_int_equal(sto_study_delete(db, f.study), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM trials"), 1);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM intermediates"), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM epochs"), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM events"), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM models"), 0);
    assert_int_equal(sto_epoch_put(db, running, 0, 2, "{}"), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_create(db, f.study, "{}", 0, NULL, NULL), HPO_ENOTFOUND);
    sto_dataset d;
    assert_int_equal(sto_dataset_get(db, ds, &d), 0);
    sto_dataset_clear(&d);
    /* deleting the newest and creating again: a new id */
    assert_int_equal(sto_study_delete(db, sid), 0);
    int64_t sid2, tid2;
    assert_int_equal(sto_study_create(db, "newer", "{}", &sid2), 0);
    assert_true(sid2 > sid);
    assert_int_equal(sto_trial_create(db, sid2, "{}", 0, &tid2, NULL), 0);
    assert_true(tid2 > tid);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static int set_attrs(void *arg, const char *stored, char **out) {
    assert_string_equal(stored, "{}");
    *out = strdup(arg);
    return 0;
}

/* v5 -> v6: user_attrs and note on studies and trials, with their
 * defaults on every old row; the name index of get-or-create. */
static void test_v5_is_migrated_to_v6(void **state) {
    (void)state;
    assert_true(sto_schema_version() >= 6);
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_db_open_at(tmp.db, STO_SYNC_NORMAL, 5, &db), 0);
    assert_null(db->q[STO_Q_STUDY_ANNOTATE]); /* v6 statements are left out */
    struct fixture f;
    write_data(db, &f);
    sto_close(db);

    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "PRAGMA user_version"), sto_schema_version());
    assert_int_equal(has_object(sto_sql_sqlite(db->conn), "index", "studies_name"), 1);
    check_data(db, &f, 2);
    sto_study s;
    assert_int_equal(sto_study_get(db, f.study, &s), 0);
    assert_string_equal(s.user_attrs, "{}");
    assert_string_equal(s.note, "");
    sto_study_clear(&s);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, f.pruned, &t), 0);
    assert_string_equal(t.user_attrs, "{}");
    assert_string_equal(t.note, "");
    sto_trial_clear(&t);
    /* the new columns take values */
    assert_int_equal(sto_trial_annotate(db, f.trial, set_attrs, "{\"a\":[1,2]}", "n", NULL), 0);
    assert_int_equal(sto_trial_get(db, f.trial, &t), 0);
    assert_string_equal(t.user_attrs, "{\"a\":[1,2]}");
    sto_trial_clear(&t);
    assert_int_equal(raw_int(sto_sql_sqlite(db->conn), "SELECT COUNT(*) FROM pragma_integrity_check"
                                       " WHERE integrity_check <> 'ok'"),
                     0);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static void test_newer_version_is_refused(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(tmp.db, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "CREATE TABLE future (x); PRAGMA user_version = 99",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(raw);
    sto_db *db = (sto_db *)&tmp;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), HPO_ESTORAGE);
    assert_ptr_equal(db, (sto_db *)&tmp);
    assert_int_equal(sqlite3_open(tmp.db, &raw), SQLITE_OK);
    assert_int_equal(raw_int(raw, "PRAGMA user_version"), 99); /* untouched */
    assert_int_equal(has_object(raw, "table", "studies"), 0);
    sqlite3_close(raw);
    sto_tmp_close(&tmp);
}

/* The plan of one cached statement names the index it should use. */
static void assert_plan_uses(sto_db *db, int q, const char *index) {
    char sql[2048];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", sqlite3_sql(sto_stmt_sqlite(db->q[q])));
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(sto_sql_sqlite(db->conn), sql, -1, &s, NULL), SQLITE_OK);
    char plan[1024] = "";
    int found = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(s, 3);
        strncat(plan, detail, sizeof plan - strlen(plan) - 2);
        strcat(plan, ";");
        if (strstr(detail, index)) found = 1;
    }
    sqlite3_finalize(s);
    if (!found) fail_msg("statement %d does not use %s: %s", q, index, plan);
}

static void test_query_plans(void **state) {
    (void)state;
    sto_db *db = NULL;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_plan_uses(db, STO_Q_TRIAL_EXPIRE, "trials_lease");
    assert_plan_uses(db, STO_Q_TRIAL_COUNTS_STUDY, "trials_study_state");
    assert_plan_uses(db, STO_Q_EVENT_LIST, "events_study_id");
    assert_plan_uses(db, STO_Q_TRIAL_INSERT, "sqlite_autoindex_trials_1"); /* (study, number) */
    assert_plan_uses(db, STO_Q_TRIAL_LIST + 0, "sqlite_autoindex_trials_1");
    assert_plan_uses(db, STO_Q_INTERMEDIATES_TRIAL, "PRIMARY KEY");
    assert_plan_uses(db, STO_Q_EPOCHS_TRIAL, "PRIMARY KEY");
    assert_plan_uses(db, STO_Q_TRIALS_REQUEUE_RUNNING, "trials_study_state");
    assert_plan_uses(db, STO_Q_DATASET_GET_BY_NAME, "sqlite_autoindex_datasets_1");
    assert_plan_uses(db, STO_Q_STUDY_BY_NAME, "studies_name");
    sto_close(db);
}

/* A study's trials of one state in number order (an ask's look for an
 * enqueued trial) come from trials_study_state (study_id, state, number),
 * without statistics and once ANALYZE has found every trial of the study
 * in one state: before v12 the index ended at state, and SQLite walked
 * the whole study in number order instead (3 ms an ask at 15,000 trials). */
static void test_plan_of_one_state(void **state) {
    (void)state;
    sto_db *db = NULL;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    int64_t sid = 0, tid = 0;
    assert_int_equal(sto_study_create(db, "s", "{}", &sid), 0);
    for (int i = 0; i < 300; i++) {
        assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, NULL), 0);
        assert_int_equal(sto_trial_finish(db, tid, STO_TRIAL_COMPLETE, i, NAN, 1, NULL), 0);
    }
    sqlite3 *c = sto_sql_sqlite(db->conn);
    for (int analyzed = 0; analyzed < 2; analyzed++) {
        if (analyzed) assert_int_equal(sqlite3_exec(c, "ANALYZE", NULL, NULL, NULL), SQLITE_OK);
        char sql[2048];
        snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", sqlite3_sql(sto_stmt_sqlite(db->q[STO_Q_TRIAL_LIST + 4])));
        sqlite3_stmt *s = NULL;
        assert_int_equal(sqlite3_prepare_v2(c, sql, -1, &s, NULL), SQLITE_OK);
        sqlite3_bind_int64(s, 1, sid), sqlite3_bind_int(s, 2, STO_TRIAL_QUEUED); /* as an ask binds them */
        sqlite3_bind_int(s, 3, -1), sqlite3_bind_int(s, 4, 0);
        char plan[1024] = "";
        while (sqlite3_step(s) == SQLITE_ROW) {
            strncat(plan, (const char *)sqlite3_column_text(s, 3), 400);
            strcat(plan, "; ");
        }
        sqlite3_finalize(s);
        printf("  queued trials of a study, in number order (%s): %s\n", analyzed ? "after ANALYZE" : "no statistics",
               plan);
        assert_non_null(strstr(plan, "trials_study_state (study_id=? AND state=?)"));
        assert_null(strstr(plan, "TEMP B-TREE")); /* no sort: the index gives the order */
    }
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_and_reopen),
        cmocka_unit_test(test_old_version_is_migrated),
        cmocka_unit_test(test_v2_is_migrated_to_v3),
        cmocka_unit_test(test_v4_is_migrated_to_v5),
        cmocka_unit_test(test_v5_is_migrated_to_v6),
        cmocka_unit_test(test_newer_version_is_refused),
        cmocka_unit_test(test_query_plans),
        cmocka_unit_test(test_plan_of_one_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
