/* test_event_order.c - a study's events seen through a cursor, with
 * several connections writing (several hpod nodes on one PostgreSQL; each
 * thread opens its OWN sto_db on the same file or URL):
 * - two writers append events to one study, each inside a transaction that
 *   stays open a little after its event is stored (as sto_trial_pbt_breed_ev
 *   and other calls do more work after theirs), while a reader follows with
 *   sto_event_list(after = the last id it read): it sees every event
 *   exactly once, in id order. On PostgreSQL this fails without the study
 *   row lock the event insert takes (db.c): an id drawn first could commit
 *   after a later one, and the reader's position would already be past it.
 * - a watch (LISTEN hpo_events) on one connection hears an event another
 *   connection commits, and sto_watch_interrupt ends a wait; on SQLite
 *   there is no watch (HPO_EUNSUPPORTED).
 * Runs on SQLite (a file) and, as pg.storage.test_event_order, on
 * PostgreSQL. Timing is never asserted: waits are bounded and generous. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

enum { N_WRITERS = 2, PER_WRITER = 150, N_ALL = N_WRITERS * PER_WRITER };

typedef struct {
    const char *target;
    int64_t study;
    int index, failures;
} writer;

typedef struct {
    const char *target;
    int64_t study;
    atomic_int *writers_done;
    int64_t seen[N_ALL + 16];
    int n_seen, failures, out_of_order;
} reader;

/* One event in its own transaction, left open for up to ~0.5 ms after the
 * id was drawn; every third one through sto_event_append instead. */
static int write_one(sto_db *db, int64_t study, int k, unsigned *seed) {
    char data[64];
    snprintf(data, sizeof data, "{\"k\":%d}", k);
    if (k % 3 == 2) return sto_event_append(db, study, 0, "appended", data, NULL);
    sto_event_in ev = {"in_tx", data};
    sto_db_lock(db);
    int rc = sto_db_begin(db);
    if (rc == 0) rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_STUDY, study, &ev);
    if (rc == 0) {
        usleep((useconds_t)(rand_r(seed) % 500));
        rc = sto_db_commit(db);
    }
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

static void *write_events(void *arg) {
    writer *w = arg;
    sto_db *db = NULL;
    if (sto_open(w->target, STO_SYNC_NORMAL, &db)) {
        w->failures++;
        return NULL;
    }
    unsigned seed = 7u + (unsigned)w->index;
    for (int k = 0; k < PER_WRITER; k++)
        if (write_one(db, w->study, w->index * PER_WRITER + k, &seed)) w->failures++;
    sto_close(db);
    return NULL;
}

/* Reads after its position until the writers are done and one more read
 * finds nothing. */
static void *follow_events(void *arg) {
    reader *r = arg;
    sto_db *db = NULL;
    if (sto_open(r->target, STO_SYNC_NORMAL, &db)) {
        r->failures++;
        return NULL;
    }
    int64_t last = 0;
    for (;;) {
        int done = atomic_load(r->writers_done); /* before the read: a read after it sees all */
        sto_event *ev = NULL;
        size_t n = 0;
        if (sto_event_list(db, r->study, last, 64, &ev, &n)) {
            r->failures++;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (ev[i].id <= last) r->out_of_order++;
            if (r->n_seen < (int)HPO_ARRAY_LEN(r->seen)) r->seen[r->n_seen++] = ev[i].id;
            last = ev[i].id;
        }
        sto_event_list_free(ev, n);
        if (n == 0 && done) break;
        if (n == 0) usleep(50);
    }
    sto_close(db);
    return NULL;
}

static void test_cursor_sees_every_event_once(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t study, other;
    assert_int_equal(sto_study_create(db, "followed", "{}", &study), 0);
    assert_int_equal(sto_study_create(db, "other", "{}", &other), 0);

    atomic_int done = 0;
    reader r = {.target = tmp.db, .study = study, .writers_done = &done};
    writer w[N_WRITERS];
    pthread_t rt, wt[N_WRITERS];
    assert_int_equal(pthread_create(&rt, NULL, follow_events, &r), 0);
    for (int i = 0; i < N_WRITERS; i++) {
        w[i] = (writer){.target = tmp.db, .study = study, .index = i};
        assert_int_equal(pthread_create(&wt[i], NULL, write_events, &w[i]), 0);
    }
    /* meanwhile another study's events draw ids in between */
    for (int k = 0; k < 40; k++) assert_int_equal(sto_event_append(db, other, 0, "noise", NULL, NULL), 0);
    for (int i = 0; i < N_WRITERS; i++) assert_int_equal(pthread_join(wt[i], NULL), 0);
    atomic_store(&done, 1);
    assert_int_equal(pthread_join(rt, NULL), 0);
    for (int i = 0; i < N_WRITERS; i++) assert_int_equal(w[i].failures, 0);
    assert_int_equal(r.failures, 0);

    /* what is stored, in id order */
    sto_event *all = NULL;
    size_t n = 0;
    assert_int_equal(sto_event_list(db, study, 0, 0, &all, &n), 0);
    assert_int_equal(n, N_ALL);
    int missed = 0;
    for (size_t i = 0, j = 0; i < n; i++) {
        if (j < (size_t)r.n_seen && r.seen[j] == all[i].id)
            j++;
        else
            missed++;
    }
    print_message("events: %d stored by %d connections, the cursor saw %d, missed %d, out of order %d\n", N_ALL,
                  N_WRITERS, r.n_seen, missed, r.out_of_order);
    assert_int_equal(r.out_of_order, 0);
    assert_int_equal(missed, 0);
    assert_int_equal(r.n_seen, N_ALL); /* and nothing twice */
    sto_event_list_free(all, n);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static void test_watch_hears_other_connections(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *a = NULL, *b = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &a), 0);
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &b), 0);
    sto_watch *w = NULL;
    if (!sto_test_pg()) {
        assert_int_equal(sto_shared(a), 0);
        assert_int_equal(sto_watch_open(a, &w), HPO_EUNSUPPORTED);
        print_message("SQLite: no watch (one hpod per database)\n");
        goto out;
    }
    assert_int_equal(sto_shared(a), 1);
    assert_int_equal(sto_watch_open(a, &w), 0);
    int64_t study;
    assert_int_equal(sto_study_create(b, "watched", "{}", &study), 0); /* no event: nothing to hear */
    assert_int_equal(sto_event_append(b, study, 0, "hello", NULL, NULL), 0);
    int heard = 0;
    for (int i = 0; i < 20 && !heard; i++) heard = sto_watch_wait(w, 1000) == 1; /* up to 20 s */
    assert_true(heard);
    /* an event stored with its change (sto_*_ev), on the other connection */
    int64_t trial;
    assert_int_equal(sto_trial_create(b, study, "{}", 0, &trial, NULL), 0);
    sto_event_in ev = {"trial_started", NULL};
    assert_int_equal(sto_trial_start_ev(b, trial, "cpu:0", &ev), 0);
    heard = 0;
    for (int i = 0; i < 20 && !heard; i++) heard = sto_watch_wait(w, 1000) == 1;
    assert_true(heard);
    /* an interrupt ends a wait that would last a minute */
    sto_watch_interrupt(w);
    assert_int_equal(sto_watch_wait(w, 60000), 0);
out:
    sto_watch_close(w);
    sto_close(a);
    sto_close(b);
    sto_tmp_close(&tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cursor_sees_every_event_once),
        cmocka_unit_test(test_watch_hears_other_connections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
