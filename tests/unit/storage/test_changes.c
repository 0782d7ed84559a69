/* test_changes.c - what several connections (hpod nodes) need to stay in
 * step on one database:
 * - sto_trials_changed: every change of a trial stamps it with its
 *   study's next change number, so a reader with a cursor gets exactly
 *   the trials changed since (PostgreSQL; on SQLite, one hpod per
 *   database, seq stays 0 and nothing is reported after the load);
 * - the same with two writers whose transactions stay open after the
 *   stamp while a reader follows: it ends with every trial's last change;
 * - sto_trial_create_at: a trial stored at the number the caller expects,
 *   HPO_ESTALE (nothing stored) once another connection took it;
 * - a create's catch_up runs under the study's lock and may read storage:
 *   the number and params it sets are the ones stored, a create on
 *   another connection waits for the commit (PostgreSQL), and its failure
 *   stores nothing;
 * - sto_study_transition_ev: of two connections ending one study, one
 *   stores the change and its event.
 * Runs on SQLite (a file) and, as pg.storage.test_changes, on PostgreSQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

/* The trials changed after *cursor (moved on); their count. */
static size_t changed(sto_db *db, int64_t study, int64_t *cursor, sto_trial **out) {
    size_t n = 99;
    assert_int_equal(sto_trials_changed(db, study, *cursor, out, &n, cursor, NULL), 0);
    return n;
}

/* Two connections (two nodes) on a fresh database, and a study made on
 * the first: its id. */
typedef struct two_nodes {
    sto_tmp tmp;
    sto_db *a, *b;
} two_nodes;

static int64_t two_nodes_open(two_nodes *n) {
    int64_t study = 0;
    assert_int_equal(sto_tmp_init(&n->tmp), 0);
    assert_int_equal(sto_open(n->tmp.db, STO_SYNC_NORMAL, &n->a), 0);
    assert_int_equal(sto_open(n->tmp.db, STO_SYNC_NORMAL, &n->b), 0);
    assert_int_equal(sto_study_create(n->a, "s", "{}", &study), 0);
    return study;
}

static void two_nodes_close(two_nodes *n) {
    sto_close(n->a);
    sto_close(n->b);
    sto_tmp_close(&n->tmp);
}

static void test_changed_since_cursor(void **state) {
    (void)state;
    two_nodes nodes;
    int64_t study = two_nodes_open(&nodes), t0, t1, cursor = 0;
    sto_db *a = nodes.a, *b = nodes.b;
    sto_trial *t = NULL;
    assert_int_equal(changed(b, study, &cursor, &t), 0);
    assert_int_equal(sto_trials_changed(b, 999999, 0, &t, &(size_t){0}, &cursor, NULL), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_create(a, study, "{\"x\":1}", 0, &t0, NULL), 0);
    if (!sto_test_pg()) { /* SQLite: nothing stamps (nothing else writes its database) */
        assert_int_equal(changed(b, study, &cursor, &t), 0);
        assert_int_equal(cursor, 0);
        print_message("SQLite: seq stays 0\n");
        goto out;
    }
    /* created on a: b sees it */
    assert_int_equal(changed(b, study, &cursor, &t), 1);
    assert_int_equal(t[0].id, t0);
    assert_int_equal(t[0].state, STO_TRIAL_RUNNING);
    assert_int_equal(t[0].seq, cursor);
    sto_trial_list_free(t, 1);
    assert_int_equal(changed(b, study, &cursor, &t), 0); /* nothing since */
    /* a report, then another trial, then the first one's end */
    assert_int_equal(sto_trial_report(a, t0, 3, 0.5, 0, 0), 0);
    assert_int_equal(changed(b, study, &cursor, &t), 1);
    assert_int_equal(t[0].last_step, 3);
    sto_trial_list_free(t, 1);
    assert_int_equal(sto_trial_create(b, study, "{\"x\":2}", 0, &t1, NULL), 0);
    assert_int_equal(sto_trial_finish(a, t0, STO_TRIAL_COMPLETE, 1.5, NAN, 1, NULL), 0);
    assert_int_equal(changed(b, study, &cursor, &t), 2); /* by number */
    assert_int_equal(t[0].id, t0);
    assert_int_equal(t[0].state, STO_TRIAL_COMPLETE);
    assert_true(t[0].value == 1.5);
    assert_int_equal(t[1].id, t1);
    sto_trial_list_free(t, 2);
    /* added, enqueued and handed out, expired: each one is a change */
    sto_trial_in in = {.params = "{}", .state = STO_TRIAL_PRUNED, .value = NAN, .value_std = NAN};
    assert_int_equal(sto_trial_add_ev(a, study, &in, NULL, NULL, NULL), 0);
    int64_t q;
    assert_int_equal(sto_trial_enqueue_ev(a, study, "{}", NULL, &q, NULL), 0);
    assert_int_equal(changed(b, study, &cursor, &t), 2);
    sto_trial_list_free(t, 2);
    assert_int_equal(sto_trial_hand_out_ev(a, q, "{\"x\":3}", hpo_now() - 1, NULL, NULL), 0);
    sto_trial *expired = NULL;
    size_t n_expired = 0;
    assert_int_equal(sto_trials_expire(a, hpo_now(), &expired, &n_expired), 0);
    assert_int_equal(n_expired, 1);
    sto_trial_list_free(expired, n_expired);
    assert_int_equal(changed(b, study, &cursor, &t), 1);
    assert_int_equal(t[0].id, q);
    assert_int_equal(t[0].state, STO_TRIAL_FAILED);
    sto_trial_list_free(t, 1);
    /* the study's own changes stamp no trial; another study's are its own */
    int64_t other;
    assert_int_equal(sto_study_create(a, "o", "{}", &other), 0);
    assert_int_equal(sto_trial_create(a, other, "{}", 0, NULL, NULL), 0);
    assert_int_equal(sto_study_set_state(a, study, STO_STUDY_PAUSED), 0);
    assert_int_equal(changed(b, study, &cursor, &t), 0);
out:
    two_nodes_close(&nodes);
}

enum { N_WRITERS = 2, PER_WRITER = 40 };

typedef struct {
    const char *target;
    int64_t study;
    int index, failures;
    atomic_int *done; /* writers finished */
    int64_t ids[PER_WRITER];
} writer;

/* Creates trials, then stamps each of them a few times in transactions
 * left open for up to ~0.5 ms after the stamp. */
static void *write_changes(void *arg) {
    writer *w = arg;
    sto_db *db = NULL;
    if (sto_open(w->target, STO_SYNC_NORMAL, &db)) {
        w->failures++;
        return NULL;
    }
    unsigned seed = 11u + (unsigned)w->index;
    for (int k = 0; k < PER_WRITER; k++)
        if (sto_trial_create(db, w->study, "{}", 0, &w->ids[k], NULL)) w->failures++;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < PER_WRITER; k++) {
            sto_db_lock(db);
            int rc = sto_db_begin(db);
            if (rc == 0) rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, w->ids[k], hpo_now());
            if (rc == 0) {
                usleep((useconds_t)(rand_r(&seed) % 500));
                rc = sto_db_commit(db);
            }
            if (rc) {
                sto_db_rollback(db);
                w->failures++;
            }
            sto_db_unlock(db);
        }
    sto_close(db);
    atomic_fetch_add(w->done, 1);
    return NULL;
}

static void test_follower_misses_no_change(void **state) {
    (void)state;
    if (!sto_test_pg()) {
        print_message("SQLite: seq is kept on PostgreSQL only\n");
        return;
    }
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t study, cursor = 0;
    assert_int_equal(sto_study_create(db, "s", "{}", &study), 0);
    writer w[N_WRITERS];
    pthread_t th[N_WRITERS];
    atomic_int done = 0;
    for (int i = 0; i < N_WRITERS; i++) {
        w[i] = (writer){.target = tmp.db, .study = study, .index = i, .done = &done};
        assert_int_equal(pthread_create(&th[i], NULL, write_changes, &w[i]), 0);
    }
    /* the follower: each trial's seq as last read */
    int64_t last_read[N_WRITERS * PER_WRITER + 1] = {0};
    int reads = 0;
    for (int all_done = 0; !all_done;) {
        all_done = atomic_load(&done) == N_WRITERS; /* before the read: that read sees everything */
        sto_trial *t = NULL;
        size_t n = changed(db, study, &cursor, &t);
        for (size_t k = 0; k < n; k++) {
            assert_true(t[k].number < N_WRITERS * PER_WRITER);
            last_read[t[k].number] = t[k].seq;
        }
        sto_trial_list_free(t, n);
        reads++;
        usleep(200);
    }
    for (int i = 0; i < N_WRITERS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N_WRITERS; i++) assert_int_equal(w[i].failures, 0);
    /* the follower's view is the database's */
    sto_trial *all = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_list(db, study, NULL, &all, &n), 0);
    assert_int_equal(n, N_WRITERS * PER_WRITER);
    int stale = 0;
    for (size_t k = 0; k < n; k++) stale += last_read[all[k].number] != all[k].seq;
    print_message("changes: %zu trials, %d stamps each, followed in %d reads, %d stale\n", n, 4, reads, stale);
    assert_int_equal(stale, 0);
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT seq FROM studies WHERE id = %lld", (long long)study);
    assert_int_equal(cursor, sto_test_int(db, sql));
    sto_trial_list_free(all, n);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static void test_create_at_expected_number(void **state) {
    (void)state;
    two_nodes nodes;
    int64_t study = two_nodes_open(&nodes), id = 0, number = -1;
    sto_db *a = nodes.a, *b = nodes.b;
    assert_int_equal(sto_trial_create_at(a, study, 0, "{\"x\":1}", 0, &id), 0);
    assert_true(id > 0);
    /* b expects 1 too, but a takes it first */
    assert_int_equal(sto_trial_create_at(a, study, 1, "{}", 0, NULL), 0);
    assert_int_equal(sto_trial_create_at(b, study, 1, "{}", 0, &id), HPO_ESTALE);
    assert_int_equal(sto_trial_create_at(b, study, 5, "{}", 0, &id), HPO_ESTALE); /* not the next either */
    assert_int_equal(sto_trial_create_at(b, study, 2, "{\"x\":2}", 0, &id), 0);
    assert_int_equal(sto_trial_create_at(b, 999999, 0, "{}", 0, &id), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_create_at(b, study, -1, "{}", 0, &id), HPO_EINVAL);
    sto_trial t;
    assert_int_equal(sto_trial_get(a, id, &t), 0);
    assert_int_equal(t.number, 2);
    assert_string_equal(t.params, "{\"x\":2}");
    sto_trial_clear(&t);
    assert_int_equal(sto_trial_create(b, study, "{}", 0, NULL, &number), 0);
    assert_int_equal(number, 3); /* three stored before it, none in between */
    two_nodes_close(&nodes);
}

/* The catch_up of test_catch_up_under_the_lock: reads the study through
 * the same connection (storage under its own lock), lets another
 * connection try to create meanwhile, and answers the next number. */
typedef struct racer {
    sto_db *db;
    int64_t study, number;
    atomic_int done;
    int rc;
} racer;

static void *race_create(void *arg) {
    racer *r = arg;
    r->rc = sto_trial_create(r->db, r->study, "{}", 0, NULL, &r->number);
    atomic_store(&r->done, 1);
    return NULL;
}

typedef struct catch_up_probe {
    sto_db *db;
    int64_t study;
    int answer; /* 0: the next number; else returned */
    racer *other; /* NULL: none started */
    pthread_t thread;
    int other_waited; /* the other create had not finished when the catch-up ended */
    int calls;
} catch_up_probe;

static int probe_catch_up(void *arg, int64_t *number, const char **params) {
    catch_up_probe *p = arg;
    p->calls++;
    *params = "{\"x\":2}"; /* suggested again */
    if (p->answer) return p->answer;
    if (p->other) {
        assert_int_equal(pthread_create(&p->thread, NULL, race_create, p->other), 0);
        usleep(200 * 1000); /* long enough for it to be stored, were it not waiting */
        p->other_waited = !atomic_load(&p->other->done);
    }
    sto_trial *t = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_list(p->db, p->study, NULL, &t, &n), 0);
    *number = n ? t[n - 1].number + 1 : 0;
    sto_trial_list_free(t, n);
    return 0;
}

static void test_catch_up_under_the_lock(void **state) {
    (void)state;
    two_nodes nodes;
    int64_t study = two_nodes_open(&nodes), id = 0, number = -1;
    sto_db *a = nodes.a, *b = nodes.b;
    assert_int_equal(sto_trial_create(b, study, "{}", 0, NULL, NULL), 0); /* 0, unknown to a's caller */
    catch_up_probe p = {.db = a, .study = study};
    /* a expects 0; its catch-up reads that 0 is taken and answers 1 */
    sto_trial_run r = {.params = "{\"x\":1}", .exact_number = 1, .number = 0, .catch_up = probe_catch_up,
                       .catch_up_arg = &p};
    assert_int_equal(sto_trial_create_with(a, study, &r, &id, &number), 0);
    assert_int_equal(p.calls, 1);
    assert_int_equal(number, 1);
    sto_trial t;
    assert_int_equal(sto_trial_get(b, id, &t), 0);
    assert_string_equal(t.params, "{\"x\":2}"); /* the catch-up's params */
    sto_trial_clear(&t);
    /* it fails: nothing stored, its code returned */
    p.answer = HPO_ESTALE;
    assert_int_equal(sto_trial_create_with(a, study, &r, &id, &number), HPO_ESTALE);
    p.answer = HPO_ESTORAGE;
    assert_int_equal(sto_trial_create_with(a, study, &r, &id, &number), HPO_ESTORAGE);
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    assert_int_equal(sto_trial_counts(b, study, counts), 0);
    assert_int_equal(counts[STO_TRIAL_RUNNING], 2);
    if (sto_test_pg()) { /* another connection creating meanwhile waits for the commit */
        racer other = {.db = b, .study = study};
        p.answer = 0;
        p.other = &other;
        assert_int_equal(sto_trial_create_with(a, study, &r, &id, &number), 0);
        assert_int_equal(pthread_join(p.thread, NULL), 0);
        print_message("PostgreSQL: the other connection's create %s the catch-up\n",
                      p.other_waited ? "waited for" : "did not wait for");
        assert_true(p.other_waited);
        assert_int_equal(other.rc, 0);
        assert_int_equal(number, 2);
        assert_int_equal(other.number, 3);
    }
    two_nodes_close(&nodes);
}

static void test_one_final_event(void **state) {
    (void)state;
    two_nodes nodes;
    int64_t study = two_nodes_open(&nodes), last = 0;
    sto_db *a = nodes.a, *b = nodes.b;
    sto_event_in ev = {"study_complete", NULL};
    assert_int_equal(sto_study_transition_ev(a, study, 1u << STO_STUDY_RUNNING, STO_STUDY_COMPLETE, &ev), 0);
    assert_int_equal(sto_study_transition_ev(b, study, 1u << STO_STUDY_RUNNING, STO_STUDY_COMPLETE, &ev),
                     HPO_ECONFLICT);
    assert_int_equal(sto_study_transition_ev(b, 999999, 1u << STO_STUDY_RUNNING, STO_STUDY_COMPLETE, &ev),
                     HPO_ENOTFOUND);
    sto_event *e = NULL;
    size_t n = 0;
    assert_int_equal(sto_event_list(b, study, 0, 0, &e, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].type, "study_complete");
    sto_event_list_free(e, n);
    assert_int_equal(sto_event_last_id(b, study, &last), 0);
    assert_true(last > 0);
    sto_study s;
    assert_int_equal(sto_study_get(b, study, &s), 0);
    assert_int_equal(s.state, STO_STUDY_COMPLETE);
    sto_study_clear(&s);
    two_nodes_close(&nodes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_changed_since_cursor),
        cmocka_unit_test(test_follower_misses_no_change),
        cmocka_unit_test(test_create_at_expected_number),
        cmocka_unit_test(test_catch_up_under_the_lock),
        cmocka_unit_test(test_one_final_event),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
