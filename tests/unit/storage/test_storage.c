/* test_storage.c - storage: opening (pragmas), studies (create, get, list,
 * state, delete with cascade) and events (append, list after_id/limit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

static int64_t pragma_int(sto_db *db, const char *sql) { return sto_test_int(db, sql); }

/* Rows of a table matching "WHERE <where>" (raw SQL, test only). */
static int64_t count_rows(sto_db *db, const char *table, const char *where) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE %s", table, where);
    return pragma_int(db, sql);
}

/* PostgreSQL's held BEGIN (sql_pg.c): the transaction is open before
 * anything is sent, one that ends before any statement sends nothing, a
 * first statement that fails leaves a transaction for the rollback, and
 * what a committed one did is there. */
static void held_begin(sto_db *db) {
    sto_db_lock(db);
    assert_int_equal(sto_db_begin(db), 0);
    assert_true(sto_sql_in_tx(db->conn));
    assert_int_equal(sto_db_commit(db), 0);
    assert_false(sto_sql_in_tx(db->conn));
    assert_int_equal(sto_db_begin(db), 0);
    sto_db_rollback(db);
    assert_false(sto_sql_in_tx(db->conn));
    sto_stmt *bad = NULL, *insert = NULL;
    assert_int_equal(sto_sql_prepare(db->conn, "SELECT 1 / (?1 - ?1)", &bad), 0);
    assert_int_equal(sto_sql_prepare(db->conn, "INSERT INTO studies (name, spec, state, created, updated) "
                                               "VALUES (?1, '{}', 0, 0, 0)", &insert), 0);
    for (int round = 0; round < 2; round++) { /* prepared with the BEGIN, then prepared already */
        assert_int_equal(sto_db_begin(db), 0);
        sto_bind_int64(bad, 1, 1);
        assert_true(sto_step(bad) < 0); /* division by zero */
        print_message("a failed first statement: %s\n", sto_sql_errmsg(db->conn));
        assert_non_null(strstr(sto_sql_errmsg(db->conn), "division by zero")); /* not "already exists" */
        assert_true(sto_sql_in_tx(db->conn));
        sto_stmt_reset(bad);
        sto_db_rollback(db);
        assert_false(sto_sql_in_tx(db->conn));
        assert_int_equal(sto_db_begin(db), 0);
        sto_bind_text(insert, 1, round ? "held-1" : "held-0");
        assert_int_equal(sto_step(insert), STO_DONE);
        sto_stmt_reset(insert);
        assert_int_equal(sto_db_commit(db), 0);
    }
    sto_stmt_finalize(bad);
    sto_stmt_finalize(insert);
    sto_db_unlock(db);
    assert_int_equal(pragma_int(db, "SELECT COUNT(*) FROM studies WHERE name LIKE 'held-%'"), 2);
}

static int64_t names_like(sto_db *db, const char *prefix) {
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM studies WHERE name LIKE '%s%%'", prefix);
    return pragma_int(db, sql);
}

/* PostgreSQL's COMMIT sent with a transaction's last statement
 * (sto_db_commit_with_next): once that statement returns, the transaction
 * has committed (another connection sees all of it) and the caller's
 * COMMIT sends nothing; a last statement that fails commits nothing, not
 * even the statements before it; the first statement can carry both the
 * held BEGIN and the COMMIT; the next transaction commits as usual. */
static void commit_with_next(sto_db *db, const char *target) {
    sto_db *other = NULL;
    assert_int_equal(sto_open(target, STO_SYNC_NORMAL, &other), 0);
    sto_stmt *bad = NULL, *insert = NULL;
    assert_int_equal(sto_sql_prepare(db->conn, "SELECT 1 / (?1 - ?1)", &bad), 0);
    assert_int_equal(sto_sql_prepare(db->conn, "INSERT INTO studies (name, spec, state, created, updated) "
                                               "VALUES (?1, '{}', 0, 0, 0)", &insert), 0);
    const char *names[] = {"cwn-a0", "cwn-a1", "cwn-b0", "cwn-c0", "cwn-d0"};
    sto_db_lock(db);
    assert_int_equal(sto_db_begin(db), 0);
    for (int i = 0; i < 2; i++) {
        if (i == 1) sto_db_commit_with_next(db);
        sto_bind_text(insert, 1, names[i]);
        assert_int_equal(sto_step(insert), STO_DONE);
        sto_stmt_reset(insert);
    }
    assert_false(sto_sql_in_tx(db->conn)); /* committed with the second insert */
    assert_int_equal(names_like(other, "cwn-a"), 2);
    assert_int_equal(sto_db_commit(db), 0);
    /* the last statement fails: the insert before it is not stored */
    assert_int_equal(sto_db_begin(db), 0);
    sto_bind_text(insert, 1, names[2]);
    assert_int_equal(sto_step(insert), STO_DONE);
    sto_stmt_reset(insert);
    sto_db_commit_with_next(db);
    sto_bind_int64(bad, 1, 1);
    assert_true(sto_step(bad) < 0);
    sto_stmt_reset(bad);
    assert_true(sto_sql_in_tx(db->conn));
    sto_db_rollback(db);
    assert_false(sto_sql_in_tx(db->conn));
    assert_int_equal(names_like(other, "cwn-b"), 0);
    /* BEGIN and COMMIT with the one statement; then a plain transaction */
    for (int i = 3; i < 5; i++) {
        assert_int_equal(sto_db_begin(db), 0);
        if (i == 3) sto_db_commit_with_next(db);
        sto_bind_text(insert, 1, names[i]);
        assert_int_equal(sto_step(insert), STO_DONE);
        sto_stmt_reset(insert);
        assert_int_equal(sto_sql_in_tx(db->conn), i == 4);
        assert_int_equal(sto_db_commit(db), 0);
        assert_false(sto_sql_in_tx(db->conn));
    }
    sto_stmt_finalize(bad);
    sto_stmt_finalize(insert);
    sto_db_unlock(db);
    assert_int_equal(names_like(other, "cwn-c"), 1);
    assert_int_equal(names_like(other, "cwn-d"), 1);
    sto_close(other);
    sto_test_exec(db, "DELETE FROM studies WHERE name LIKE 'cwn-%'");
}

/* PostgreSQL: the schema version is stored, a second connection finds the
 * schema current, and a server that is not there fails cleanly. */
static void open_pg(void) {
    sto_tmp t;
    assert_int_equal(sto_tmp_init(&t), 0);
    sto_db *db = NULL, *db2 = NULL;
    assert_int_equal(sto_open(t.db, STO_SYNC_NORMAL, &db), 0);
    assert_true(sto_db_is_pg(db));
    assert_int_equal(pragma_int(db, "SELECT version FROM hpo_schema"), sto_schema_version());
    assert_int_equal(sto_open(t.db, STO_SYNC_FULL, &db2), 0);
    assert_int_equal(pragma_int(db2, "SELECT COUNT(*) FROM hpo_schema"), 1);
    sto_close(db2);
    commit_with_next(db, t.db);
    /* a newer schema is refused, untouched */
    sto_test_exec(db, "UPDATE hpo_schema SET version = version + 1");
    db2 = (sto_db *)&t;
    assert_int_equal(sto_open(t.db, STO_SYNC_NORMAL, &db2), HPO_ESTORAGE);
    assert_ptr_equal(db2, (sto_db *)&t);
    /* the server ends the session (a restart does that too): the next
     * call runs on a new connection, the statements prepared again */
    int64_t sid;
    assert_int_equal(sto_study_create(db, "before", "{}", &sid), 0);
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s' AND pid <> pg_backend_pid()",
             t.pg_db);
    sto_test_pg_admin(sql);
    sto_study st;
    assert_int_equal(sto_study_get(db, sid, &st), 0);
    assert_string_equal(st.name, "before");
    sto_study_clear(&st);
    assert_int_equal(sto_study_create(db, "after", "{}", NULL), 0);
    /* again, the next call a transaction: its held BEGIN goes with its
     * first statement, and both go again on a new connection */
    sto_test_pg_admin(sql);
    assert_int_equal(sto_study_create(db, "after-tx", "{}", NULL), 0);
    assert_int_equal(pragma_int(db, "SELECT COUNT(*) FROM studies"), 3);
    held_begin(db);
    sto_close(db);
    /* port 1 on loopback: nothing listens there */
    assert_int_equal(sto_open("postgresql://postgres@127.0.0.1:1/x", STO_SYNC_NORMAL, &db2), HPO_ESTORAGE);
    assert_int_equal(sto_open("postgres://nobody@127.0.0.1:1/x?connect_timeout=2", STO_SYNC_NORMAL, &db2),
                     HPO_ESTORAGE);
    assert_ptr_equal(db2, (sto_db *)&t);
    sto_tmp_close(&t);
}

static void test_open_pragmas(void **state) {
    (void)state;
    if (sto_test_pg()) {
        open_pg();
        return;
    }
    sto_tmp t;
    assert_int_equal(sto_tmp_init(&t), 0);

    sto_db *db = NULL;
    assert_int_equal(sto_open(t.db, STO_SYNC_NORMAL, &db), 0);
    assert_non_null(db);
    assert_false(sto_db_is_pg(db));
    assert_int_equal(pragma_int(db, "SELECT journal_mode = 'wal' FROM pragma_journal_mode()"), 1);
    assert_int_equal(pragma_int(db, "PRAGMA synchronous"), 1); /* NORMAL */
    assert_int_equal(pragma_int(db, "PRAGMA foreign_keys"), 1);
    assert_true(pragma_int(db, "PRAGMA busy_timeout") >= 1000);
    assert_int_equal(pragma_int(db, "PRAGMA user_version"), sto_schema_version());
    sto_close(db);

    db = NULL;
    assert_int_equal(sto_open(t.db, STO_SYNC_FULL, &db), 0);
    assert_int_equal(pragma_int(db, "PRAGMA synchronous"), 2); /* FULL */
    sto_close(db);

    /* A path that cannot be opened fails cleanly and leaves out alone. */
    sto_db *sentinel = (sto_db *)&t;
    db = sentinel;
    assert_int_equal(sto_open("/nonexistent-dir/x/hpo.db", STO_SYNC_NORMAL, &db), HPO_ESTORAGE);
    assert_ptr_equal(db, sentinel);
    assert_int_equal(sto_open(NULL, STO_SYNC_NORMAL, &db), HPO_EINVAL);

    /* In-memory databases work (for tests) even without WAL. */
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(pragma_int(db, "PRAGMA user_version"), sto_schema_version());
    sto_close(db);
    sto_close(NULL);
    sto_tmp_close(&t);
}

static void test_study_crud(void **state) {
    (void)state;
    sto_db *db = NULL;
    assert_int_equal(sto_test_open(&db), 0);

    double t0 = hpo_now();
    int64_t a = -1, b = -1;
    assert_int_equal(sto_study_create(db, "alpha", "{\"x\":1}", &a), 0);
    assert_int_equal(sto_study_create(db, "beta", "{\"y\":[1,2]}", &b), 0);
    assert_true(a > 0 && b > a);
    assert_int_equal(sto_study_create(db, NULL, "{}", NULL), HPO_EINVAL);
    assert_int_equal(sto_study_create(db, "x", NULL, NULL), HPO_EINVAL);

    sto_study s;
    assert_int_equal(sto_study_get(db, a, &s), 0);
    assert_int_equal(s.id, a);
    assert_string_equal(s.name, "alpha");
    assert_string_equal(s.spec, "{\"x\":1}");
    assert_int_equal(s.state, STO_STUDY_RUNNING);
    assert_true(s.created >= t0 - 1 && s.created <= hpo_now() + 1);
    assert_true(s.updated == s.created);
    double created = s.created;
    sto_study_clear(&s);
    assert_null(s.name);

    /* Unknown ids: not found, out untouched. */
    memset(&s, 0x5a, sizeof s);
    assert_int_equal(sto_study_get(db, 999, &s), HPO_ENOTFOUND);
    assert_int_equal(s.id, (int64_t)0x5a5a5a5a5a5a5a5aLL);
    assert_int_equal(sto_study_set_state(db, 999, STO_STUDY_PAUSED), HPO_ENOTFOUND);
    assert_int_equal(sto_study_delete(db, 999), HPO_ENOTFOUND);

    /* List: newest first. */
    sto_study *list = NULL;
    size_t n = 0;
    assert_int_equal(sto_study_list(db, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, b);
    assert_string_equal(list[0].name, "beta");
    assert_string_equal(list[0].spec, "{\"y\":[1,2]}");
    assert_int_equal(list[1].id, a);
    sto_study_list_free(list, n);

    /* State changes, and updated moves. */
    assert_int_equal(sto_study_set_state(db, a, STO_STUDY_PAUSED), 0);
    assert_int_equal(sto_study_get(db, a, &s), 0);
    assert_int_equal(s.state, STO_STUDY_PAUSED);
    assert_true(s.updated >= created);
    assert_true(s.created == created);
    sto_study_clear(&s);
    assert_int_equal(sto_study_set_state(db, a, STO_STUDY_COMPLETE), 0);
    assert_int_equal(sto_study_get(db, a, &s), 0);
    assert_int_equal(s.state, STO_STUDY_COMPLETE);
    sto_study_clear(&s);
    assert_int_equal(sto_study_set_state(db, a, STO_STUDY_N_STATES), HPO_EINVAL);
    assert_int_equal(sto_study_set_state(db, a, (sto_study_state)-1), HPO_EINVAL);
    assert_int_equal(sto_study_get(db, b, &s), 0);
    assert_int_equal(s.state, STO_STUDY_RUNNING); /* the other study is untouched */
    sto_study_clear(&s);

    /* Delete. */
    assert_int_equal(sto_study_delete(db, a), 0);
    assert_int_equal(sto_study_get(db, a, &s), HPO_ENOTFOUND);
    assert_int_equal(sto_study_delete(db, a), HPO_ENOTFOUND);
    assert_int_equal(sto_study_list(db, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].id, b);
    sto_study_list_free(list, n);
    assert_int_equal(sto_study_delete(db, b), 0);
    list = (sto_study *)db;
    assert_int_equal(sto_study_list(db, &list, &n), 0);
    assert_int_equal(n, 0);
    sto_study_list_free(list, n);

    assert_string_equal(sto_study_state_name(STO_STUDY_RUNNING), "running");
    assert_string_equal(sto_study_state_name(STO_STUDY_CANCELLED), "cancelled");
    assert_string_equal(sto_study_state_name(STO_STUDY_N_STATES), "unknown");
    sto_close(db);
}

static void test_study_delete_cascades(void **state) {
    (void)state;
    sto_db *db = NULL;
    assert_int_equal(sto_test_open(&db), 0);
    int64_t victim, keep, tid, kid;
    assert_int_equal(sto_study_create(db, "victim", "{}", &victim), 0);
    assert_int_equal(sto_study_create(db, "keep", "{}", &keep), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sto_trial_create(db, victim, "{\"i\":1}", 0, &tid, NULL), 0);
        assert_int_equal(sto_trial_report(db, tid, 0, 0.5, 0, 0), 0);
        assert_int_equal(sto_trial_report(db, tid, 1, 0.6, 0, 0), 0);
        assert_int_equal(sto_event_append(db, victim, tid, "trial_started", "{}", NULL), 0);
        assert_int_equal(sto_trial_create(db, keep, "{}", 0, &kid, NULL), 0);
        assert_int_equal(sto_trial_report(db, kid, 0, 0.1, 0, 0), 0);
        assert_int_equal(sto_event_append(db, keep, kid, "trial_started", "{}", NULL), 0);
    }
    assert_int_equal(sto_event_append(db, victim, 0, "study_created", "{}", NULL), 0);
    char where[64];
    snprintf(where, sizeof where, "study_id = %lld", (long long)victim);
    assert_int_equal(count_rows(db, "trials", where), 5);
    assert_int_equal(count_rows(db, "events", where), 6);
    assert_int_equal(count_rows(db, "intermediates", "TRUE"), 15);

    assert_int_equal(sto_study_delete(db, victim), 0);
    assert_int_equal(count_rows(db, "trials", where), 0);
    assert_int_equal(count_rows(db, "events", where), 0);
    assert_int_equal(count_rows(db, "intermediates",
                                "trial_id NOT IN (SELECT id FROM trials)"), 0);
    /* The other study keeps everything. */
    snprintf(where, sizeof where, "study_id = %lld", (long long)keep);
    assert_int_equal(count_rows(db, "trials", where), 5);
    assert_int_equal(count_rows(db, "events", where), 5);
    assert_int_equal(count_rows(db, "intermediates", "TRUE"), 5);
    sto_trial tr;
    assert_int_equal(sto_trial_get(db, tid, &tr), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_get(db, kid, &tr), 0);
    sto_trial_clear(&tr);
    sto_close(db);
}

static void test_events(void **state) {
    (void)state;
    sto_db *db = NULL;
    assert_int_equal(sto_test_open(&db), 0);
    int64_t s1, s2, id = -7;
    assert_int_equal(sto_study_create(db, "s1", "{}", &s1), 0);
    assert_int_equal(sto_study_create(db, "s2", "{}", &s2), 0);

    assert_int_equal(sto_event_append(db, 12345, 0, "x", "{}", &id), HPO_ENOTFOUND);
    assert_int_equal(id, -7);
    assert_int_equal(sto_event_append(db, s1, 0, NULL, "{}", &id), HPO_EINVAL);

    int64_t ids[10];
    for (int i = 0; i < 10; i++) {
        char data[32];
        snprintf(data, sizeof data, "{\"i\":%d}", i);
        assert_int_equal(sto_event_append(db, s1, i % 2 ? 0 : 100 + i, "tick", data, &ids[i]), 0);
        if (i) assert_true(ids[i] > ids[i - 1]);
        int64_t other;
        assert_int_equal(sto_event_append(db, s2, 0, "other", NULL, &other), 0);
        assert_true(other > ids[i]);
    }

    sto_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(sto_event_list(db, s1, 0, 0, &ev, &n), 0);
    assert_int_equal(n, 10);
    for (int i = 0; i < 10; i++) {
        char data[32];
        snprintf(data, sizeof data, "{\"i\":%d}", i);
        assert_int_equal(ev[i].id, ids[i]);
        assert_int_equal(ev[i].study_id, s1);
        assert_int_equal(ev[i].trial_id, i % 2 ? 0 : 100 + i);
        assert_string_equal(ev[i].type, "tick");
        assert_string_equal(ev[i].data, data);
        assert_true(ev[i].created > 0);
    }
    sto_event_list_free(ev, n);

    /* after_id and limit. */
    assert_int_equal(sto_event_list(db, s1, ids[4], 3, &ev, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ev[0].id, ids[5]);
    assert_int_equal(ev[1].id, ids[6]);
    assert_int_equal(ev[2].id, ids[7]);
    sto_event_list_free(ev, n);
    assert_int_equal(sto_event_list(db, s1, ids[8], 100, &ev, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].id, ids[9]);
    sto_event_list_free(ev, n);
    assert_int_equal(sto_event_list(db, s1, ids[9], 0, &ev, &n), 0);
    assert_int_equal(n, 0);
    sto_event_list_free(ev, n);

    /* NULL data is stored as "{}"; the other study's stream is separate. */
    assert_int_equal(sto_event_list(db, s2, 0, 0, &ev, &n), 0);
    assert_int_equal(n, 10);
    assert_string_equal(ev[3].data, "{}");
    assert_string_equal(ev[3].type, "other");
    sto_event_list_free(ev, n);

    ev = (sto_event *)db;
    assert_int_equal(sto_event_list(db, 4242, 0, 0, &ev, &n), HPO_ENOTFOUND);
    assert_ptr_equal(ev, (sto_event *)db);
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_pragmas),
        cmocka_unit_test(test_study_crud),
        cmocka_unit_test(test_study_delete_cascades),
        cmocka_unit_test(test_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
