/* test_nodes.c - several hpod nodes on one database (storage.h: nodes):
 * registration, heartbeats, the end of a node (stopped; found dead by its
 * heartbeat's age, or an earlier run of the same data dir) exactly once
 * when several connections look at the same moment, the jobs a dead node
 * left running reclaimed exactly once (trials, with their events; model
 * jobs), a running trial written only by its own node, max_trials and
 * parallel_trials held across connections, a study's state changed by one
 * of several nodes at once, and the study change counter that nodes poll.
 * Each thread opens its OWN connection on the same file or URL, as nodes
 * do. Runs on SQLite (a file) and, as pg.storage.test_nodes, on
 * PostgreSQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

enum { N_THREADS = 4, N_DEAD = 12, N_ORPHANS = 30, MAX_TRIALS = 50, PARALLEL = 3 };

static sto_db *open_db(const char *target) {
    sto_db *db = NULL;
    assert_int_equal(sto_open(target, STO_SYNC_NORMAL, &db), 0);
    return db;
}

/* A node registered on its own connection. */
static sto_db *node_db(const char *target, const char *ident, int64_t *id) {
    sto_db *db = open_db(target);
    assert_int_equal(sto_node_register(db, ident, ident, id), 0);
    assert_int_equal(sto_node_current(db), *id);
    return db;
}

/* The node's last beat seconds ago (its clock moved back by hand). */
static void age_node(sto_db *db, int64_t id, double seconds) {
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE nodes SET heartbeat = heartbeat - %g WHERE id = %lld", seconds, (long long)id);
    sto_test_exec(db, sql);
}

static void test_register_beat_end(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    int64_t a, b;
    sto_db *da = node_db(tmp.db, "ident-a", &a), *db = node_db(tmp.db, "ident-b", &b);
    assert_true(b > a);
    assert_int_equal(sto_node_rename(da, a, "host:8080"), 0);
    assert_int_equal(sto_node_beat(da, a), 0);
    assert_int_equal(sto_node_beat(da, 999999), HPO_ENOTFOUND);
    sto_node *list = NULL;
    size_t n = 0;
    assert_int_equal(sto_node_list(db, 0, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, b); /* newest first */
    assert_string_equal(list[1].name, "host:8080");
    assert_true(list[1].ended == 0 && list[1].end_reason == NULL && list[1].heartbeat >= list[1].started);
    assert_true(list[1].now >= list[1].heartbeat - 1);
    sto_node_list_free(list, n);
    /* a stopped node beats no more */
    assert_int_equal(sto_node_end(da, a, "stopped"), 0);
    assert_int_equal(sto_node_end(db, a, "stopped"), HPO_ECONFLICT);
    assert_int_equal(sto_node_beat(da, a), HPO_ECONFLICT);
    assert_int_equal(sto_node_list(db, 1, &list, &n), 0);
    assert_int_equal(n, 1); /* the limit */
    sto_node_list_free(list, n);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM nodes WHERE end_reason = 'stopped' AND ended > 0"), 1);
    sto_close(da);
    sto_close(db);
    sto_tmp_close(&tmp);
}

typedef struct {
    const char *target;
    int64_t node;    /* this thread's node */
    int64_t study;
    int index;
    int failures;
    int64_t got[N_DEAD + N_ORPHANS + MAX_TRIALS];
    int n_got;
    pthread_barrier_t *start;
} worker;

static void run_threads(void *(*fn)(void *), worker *w, int64_t *nodes, const char *target, int64_t study) {
    pthread_t th[N_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){.target = target, .node = nodes ? nodes[i] : 0, .study = study, .index = i, .start = &start};
        assert_int_equal(pthread_create(&th[i], NULL, fn, &w[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(w[i].failures, 0);
}

/* A connection working for an already registered node (as its process
 * does after sto_node_register). */
static sto_db *as_node(const char *target, int64_t node) {
    sto_db *db = NULL;
    if (sto_open(target, STO_SYNC_NORMAL, &db)) return NULL;
    db->node_id = node;
    return db;
}

static void *end_stale(void *arg) {
    worker *w = arg;
    sto_db *db = as_node(w->target, w->node);
    pthread_barrier_wait(w->start);
    sto_node *ended = NULL;
    size_t n = 0;
    if (!db || sto_nodes_end_stale(db, 10, NULL, 0, &ended, &n)) w->failures++;
    for (size_t i = 0; i < n; i++) w->got[w->n_got++] = ended[i].id;
    sto_node_list_free(ended, n);
    sto_close(db);
    return NULL;
}

/* Dead nodes (silent for 100 s) are ended once, whichever of the live ones
 * looking together gets there; the live ones are not ended. */
static void test_dead_nodes_ended_once(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = open_db(tmp.db);
    int64_t live[N_THREADS], dead[N_DEAD];
    for (int i = 0; i < N_THREADS; i++) {
        char ident[16];
        snprintf(ident, sizeof ident, "live-%d", i);
        assert_int_equal(sto_node_register(db, ident, ident, &live[i]), 0);
    }
    for (int i = 0; i < N_DEAD; i++) {
        char ident[16];
        snprintf(ident, sizeof ident, "dead-%d", i);
        assert_int_equal(sto_node_register(db, ident, ident, &dead[i]), 0);
        age_node(db, dead[i], 100);
    }
    worker w[N_THREADS];
    run_threads(end_stale, w, live, tmp.db, 0);
    int seen[N_DEAD] = {0}, total = 0;
    for (int i = 0; i < N_THREADS; i++)
        for (int k = 0; k < w[i].n_got; k++) {
            int64_t j = w[i].got[k] - dead[0];
            assert_true(j >= 0 && j < N_DEAD);
            seen[j]++;
            total++;
        }
    printf("  %d dead nodes ended by %d threads: %d, %d, %d, %d each\n", N_DEAD, N_THREADS, w[0].n_got, w[1].n_got,
           w[2].n_got, w[3].n_got);
    assert_int_equal(total, N_DEAD);
    for (int i = 0; i < N_DEAD; i++) assert_int_equal(seen[i], 1);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM nodes WHERE ended > 0 AND end_reason = 'no heartbeat'"),
                     N_DEAD);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM nodes WHERE ended = 0"), N_THREADS);
    /* a dead node that beats learns it was ended */
    assert_int_equal(sto_node_beat(db, dead[0]), HPO_ECONFLICT);
    sto_close(db);
    sto_tmp_close(&tmp);
}

/* A restart: the data dir's earlier run ends at once (not after a
 * timeout), another node's run does not; one node per database (SQLite)
 * ends every other one. */
static void test_own_earlier_run_ended(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    int64_t old, other, now;
    sto_db *d_old = node_db(tmp.db, "dir-x", &old), *d_other = node_db(tmp.db, "dir-y", &other);
    sto_db *d_new = node_db(tmp.db, "dir-x", &now);
    sto_node *ended = NULL;
    size_t n = 0;
    assert_int_equal(sto_nodes_end_stale(d_new, 3600, "dir-x", 0, &ended, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ended[0].id, old);
    assert_string_equal(ended[0].end_reason, "restarted");
    sto_node_list_free(ended, n);
    assert_int_equal(sto_node_beat(d_new, now), 0);
    assert_int_equal(sto_node_beat(d_other, other), 0);
    /* every other node: d_other too */
    assert_int_equal(sto_nodes_end_stale(d_new, 3600, NULL, 1, NULL, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sto_node_beat(d_other, other), HPO_ECONFLICT);
    assert_int_equal(sto_node_beat(d_new, now), 0);
    sto_close(d_old);
    sto_close(d_other);
    sto_close(d_new);
    sto_tmp_close(&tmp);
}

static void *reclaim(void *arg) {
    worker *w = arg;
    sto_db *db = as_node(w->target, w->node);
    pthread_barrier_wait(w->start);
    sto_trial *t = NULL;
    size_t n = 0;
    if (!db || sto_nodes_end_stale(db, 10, NULL, 0, NULL, NULL) || sto_trials_orphaned(db, 0, &t, &n)) w->failures++;
    for (size_t i = 0; i < n; i++) {
        size_t k = (i + (size_t)w->index * 7) % n; /* each thread from elsewhere */
        char data[64];
        snprintf(data, sizeof data, "{\"by\":%d}", w->index);
        sto_event_in ev = {"trial_requeued", data};
        int rc = sto_trial_reclaim_ev(db, t[k].id, t[k].node_id, NULL, &ev);
        if (rc == 0)
            w->got[w->n_got++] = t[k].id;
        else if (rc != HPO_ECONFLICT)
            w->failures++;
    }
    sto_trial_list_free(t, n);
    sto_close(db);
    return NULL;
}

/* A dead node's running trials: each reclaimed (queued again, its node
 * cleared, one trial_requeued event) by one of the nodes looking at once;
 * the live nodes' trials and the clients' (external) ones stay running. */
static void test_orphans_reclaimed_once(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    int64_t dead, live[N_THREADS], study;
    sto_db *dd = node_db(tmp.db, "dead", &dead);
    assert_int_equal(sto_study_create(dd, "orphans", "{}", &study), 0);
    int64_t first = 0;
    for (int i = 0; i < N_ORPHANS; i++) {
        sto_trial_run r = {.params = "{}", .slot = "cpu:0"};
        int64_t id;
        assert_int_equal(sto_trial_create_with(dd, study, &r, &id, NULL), 0);
        if (i == 0) first = id;
    }
    sto_db *db = open_db(tmp.db);
    for (int i = 0; i < N_THREADS; i++) {
        char ident[16];
        snprintf(ident, sizeof ident, "live-%d", i);
        assert_int_equal(sto_node_register(db, ident, ident, &live[i]), 0);
    }
    /* a live node's trial, and a client's */
    sto_db *dl = as_node(tmp.db, live[0]);
    sto_trial_run mine = {.params = "{}", .slot = "cpu:1"}, client = {.params = "{}", .lease_expires = hpo_now() + 600};
    int64_t live_trial, client_trial;
    assert_int_equal(sto_trial_create_with(dl, study, &mine, &live_trial, NULL), 0);
    assert_int_equal(sto_trial_create_with(dl, study, &client, &client_trial, NULL), 0);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, live_trial, &t), 0);
    assert_int_equal(t.node_id, live[0]);
    assert_string_equal(t.slot, "cpu:1");
    sto_trial_clear(&t);
    assert_int_equal(sto_trial_get(db, client_trial, &t), 0);
    assert_int_equal(t.node_id, 0);
    sto_trial_clear(&t);
    /* nothing is orphaned while the node beats */
    sto_trial *list = NULL;
    size_t n = 0;
    assert_int_equal(sto_trials_orphaned(db, 0, &list, &n), 0);
    assert_int_equal(n, 0);
    age_node(db, dead, 100);
    worker w[N_THREADS];
    run_threads(reclaim, w, live, tmp.db, study);
    int seen[N_ORPHANS] = {0}, total = 0;
    for (int i = 0; i < N_THREADS; i++)
        for (int k = 0; k < w[i].n_got; k++) {
            int64_t j = w[i].got[k] - first;
            assert_true(j >= 0 && j < N_ORPHANS);
            seen[j]++;
            total++;
        }
    printf("  %d orphaned trials reclaimed by %d nodes: %d, %d, %d, %d each\n", N_ORPHANS, N_THREADS, w[0].n_got,
           w[1].n_got, w[2].n_got, w[3].n_got);
    assert_int_equal(total, N_ORPHANS);
    for (int i = 0; i < N_ORPHANS; i++) assert_int_equal(seen[i], 1);
    int64_t c[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, study, c), 0);
    assert_int_equal(c[STO_TRIAL_QUEUED], N_ORPHANS);
    assert_int_equal(c[STO_TRIAL_RUNNING], 2);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM events WHERE type = 'trial_requeued'"), N_ORPHANS);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(DISTINCT trial_id) FROM events WHERE type = 'trial_requeued'"),
                     N_ORPHANS);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM trials WHERE state = 5 AND node_id IS NULL"), N_ORPHANS);
    /* a reclaimed trial resumes on a live node; the dead one writes nothing
     * into it, before (its epochs are its runner's) and after */
    assert_int_equal(sto_epoch_put(dd, first, 0, 1, "{}"), HPO_ECONFLICT);
    assert_int_equal(sto_trial_resume_ev(dl, first, "cpu:0", NULL), 0);
    assert_int_equal(sto_epoch_put(dd, first, 0, 1, "{}"), HPO_ECONFLICT);
    assert_int_equal(sto_epoch_put(dl, first, 0, 1, "{\"loss\":1}"), 0);
    /* the crash-loop guard's end: failed, by one caller */
    assert_int_equal(sto_trial_reclaim_ev(db, first, live[1], "crash loop", NULL), HPO_ECONFLICT);
    assert_int_equal(sto_trial_reclaim_ev(db, first, live[0], "crash loop", NULL), 0);
    assert_int_equal(sto_trial_get(db, first, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_FAILED);
    assert_string_equal(t.error, "crash loop");
    assert_true(t.finished > 0);
    sto_trial_clear(&t);
    assert_int_equal(sto_trial_reclaim_ev(db, 999999, 0, NULL, NULL), HPO_ENOTFOUND);
    sto_close(dd);
    sto_close(dl);
    sto_close(db);
    sto_tmp_close(&tmp);
}

/* A running trial is written by its own node only (report, finish,
 * requeue, epochs); a client's trial (no node) by any. An ended node
 * starts no trial or model job until it registers again. */
static void test_writes_kept_to_the_node(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    int64_t a, b, study, ta, tc;
    sto_db *da = node_db(tmp.db, "a", &a), *db = node_db(tmp.db, "b", &b);
    assert_int_equal(sto_study_create(da, "fence", "{}", &study), 0);
    sto_trial_run on_a = {.params = "{}", .slot = "cpu:0"}, client = {.params = "{}"};
    assert_int_equal(sto_trial_create_with(da, study, &on_a, &ta, NULL), 0);
    assert_int_equal(sto_trial_create_with(da, study, &client, &tc, NULL), 0);
    assert_int_equal(sto_trial_report(db, ta, 1, 0.5, 0, 0), HPO_ECONFLICT);
    assert_int_equal(sto_epoch_put(db, ta, 0, 1, "{}"), HPO_ECONFLICT);
    assert_int_equal(sto_trial_requeue(db, ta), HPO_ECONFLICT);
    assert_int_equal(sto_trial_finish(db, ta, STO_TRIAL_COMPLETE, 1, NAN, 1, NULL), HPO_ECONFLICT);
    assert_int_equal(sto_epoch_put(db, 999999, 0, 1, "{}"), HPO_ENOTFOUND);
    assert_int_equal(sto_trial_report(da, ta, 1, 0.5, 0, 0), 0);
    assert_int_equal(sto_epoch_put(da, ta, 0, 1, "{}"), 0);
    assert_int_equal(sto_trial_report(db, tc, 1, 0.5, 0, 0), 0);
    assert_int_equal(sto_epoch_put(db, tc, 0, 1, "{\"error\":0.5}"), 0); /* a client's curve point (MO reports) */
    assert_int_equal(sto_trial_finish(db, tc, STO_TRIAL_COMPLETE, 1, NAN, 1, NULL), 0);
    /* requeued by its node: no node any more; resumed on b: b's */
    assert_int_equal(sto_trial_requeue(da, ta), 0);
    assert_int_equal(sto_epoch_put(da, ta, 0, 2, "{}"), HPO_ECONFLICT); /* queued: no node writes its epochs */
    assert_int_equal(sto_trial_resume_ev(db, ta, "cpu:3", NULL), 0);
    sto_trial_state st;
    int64_t owner;
    assert_int_equal(sto_trial_owner(da, ta, &st, &owner), 0);
    assert_int_equal(st, STO_TRIAL_RUNNING);
    assert_int_equal(owner, b);
    assert_int_equal(sto_trial_finish(da, ta, STO_TRIAL_COMPLETE, 1, NAN, 1, NULL), HPO_ECONFLICT);
    assert_int_equal(sto_trial_finish(db, ta, STO_TRIAL_COMPLETE, 1, NAN, 1, NULL), 0);
    assert_int_equal(sto_trial_owner(da, 999999, &st, &owner), HPO_ENOTFOUND);
    /* model jobs: claimed with the node, finished or requeued by it only */
    int64_t m;
    assert_int_equal(sto_model_create(da, study, ta, STO_MODEL_REFIT, "{}", 0, &m), 0);
    sto_model got;
    assert_int_equal(sto_model_claim_ev(da, NULL, NULL, NULL, &got), 0);
    assert_int_equal(got.node_id, a);
    sto_model_clear(&got);
    assert_int_equal(sto_model_requeue(db, m), HPO_ECONFLICT);
    assert_int_equal(sto_model_finish(db, m, STO_MODEL_COMPLETE, "{}", NULL, NULL), HPO_ECONFLICT);
    /* a's end: its model job goes back to the queue, once */
    assert_int_equal(sto_node_end(da, a, "stopped"), 0);
    sto_model *orphans = NULL;
    size_t n_orphans = 0; /* what the reclaim will queue again, listed first (the crash-loop guard's) */
    assert_int_equal(sto_models_orphaned(db, 0, &orphans, &n_orphans), 0);
    assert_true(n_orphans == 1 && orphans[0].id == m && orphans[0].state == STO_MODEL_RUNNING);
    sto_model_list_free(orphans, n_orphans);
    int64_t k = 0;
    assert_int_equal(sto_models_reclaim(db, 0, &k), 0);
    assert_int_equal(k, 1);
    assert_int_equal(sto_models_orphaned(db, 0, &orphans, &n_orphans), 0);
    assert_int_equal(n_orphans, 0);
    sto_model_list_free(orphans, n_orphans);
    assert_int_equal(sto_models_reclaim(db, 0, &k), 0);
    assert_int_equal(k, 0);
    assert_int_equal(sto_model_get(db, m, &got), 0);
    assert_int_equal(got.state, STO_MODEL_QUEUED);
    assert_int_equal(got.node_id, 0);
    sto_model_clear(&got);
    /* an ended node starts nothing more (it must register again) */
    assert_int_equal(sto_model_claim_ev(da, NULL, NULL, NULL, &got), HPO_ECONFLICT);
    assert_int_equal(sto_trial_create_with(da, study, &on_a, NULL, NULL), HPO_ECONFLICT);
    int64_t q;
    assert_int_equal(sto_trial_enqueue_ev(db, study, "{}", NULL, &q, NULL), 0);
    sto_trial_run hand = {.params = "{}", .slot = "cpu:0"};
    assert_int_equal(sto_trial_claim_ev(da, q, &hand, NULL), HPO_ECONFLICT);
    assert_int_equal(sto_trial_create_with(da, study, &client, NULL, NULL), 0); /* a client's: no node */
    int64_t a2;
    assert_int_equal(sto_node_register(da, "a", "a", &a2), 0);
    assert_int_equal(sto_trial_claim_ev(da, q, &hand, NULL), 0);
    assert_int_equal(sto_model_claim_ev(da, NULL, NULL, NULL, &got), 0);
    assert_int_equal(got.node_id, a2);
    sto_model_clear(&got);
    sto_close(da);
    sto_close(db);
    sto_tmp_close(&tmp);
}

/* Creates running trials on its node until max_trials; keeps at most
 * PARALLEL running by finishing its own before the next. */
static void *create_capped(void *arg) {
    worker *w = arg;
    sto_db *db = as_node(w->target, w->node);
    pthread_barrier_wait(w->start);
    for (int i = 0; db && i < 10 * MAX_TRIALS; i++) {
        char slot[16];
        snprintf(slot, sizeof slot, "cpu:%d", w->index);
        sto_trial_run r = {.params = "{}", .slot = slot, .max_trials = MAX_TRIALS, .parallel = PARALLEL};
        int64_t id, number;
        int rc = sto_trial_create_with(db, w->study, &r, &id, &number);
        if (rc == HPO_EEXHAUSTED) break;
        if (rc == HPO_ECONFLICT) continue; /* PARALLEL run: another thread finishes one */
        if (rc) {
            w->failures++;
            break;
        }
        int64_t c[STO_TRIAL_N_STATES];
        if (sto_trial_counts(db, w->study, c) || c[STO_TRIAL_RUNNING] > PARALLEL) w->failures++;
        w->got[w->n_got++] = number;
        if (sto_trial_finish(db, id, STO_TRIAL_COMPLETE, (double)number, NAN, 1, NULL)) w->failures++;
    }
    sto_close(db);
    return NULL;
}

/* max_trials and parallel_trials hold whatever the number of nodes
 * creating at once: exactly MAX_TRIALS trials, numbers 0..MAX_TRIALS-1, never
 * more than PARALLEL running. */
static void test_limits_across_nodes(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = open_db(tmp.db);
    int64_t nodes[N_THREADS], study;
    for (int i = 0; i < N_THREADS; i++) {
        char ident[16];
        snprintf(ident, sizeof ident, "n-%d", i);
        assert_int_equal(sto_node_register(db, ident, ident, &nodes[i]), 0);
    }
    assert_int_equal(sto_study_create(db, "limits", "{}", &study), 0);
    worker w[N_THREADS];
    run_threads(create_capped, w, nodes, tmp.db, study);
    int seen[MAX_TRIALS] = {0}, total = 0;
    for (int i = 0; i < N_THREADS; i++)
        for (int k = 0; k < w[i].n_got; k++) {
            assert_true(w[i].got[k] >= 0 && w[i].got[k] < MAX_TRIALS);
            seen[w[i].got[k]]++;
            total++;
        }
    printf("  %d trials made by %d nodes: %d, %d, %d, %d each\n", total, N_THREADS, w[0].n_got, w[1].n_got,
           w[2].n_got, w[3].n_got);
    assert_int_equal(total, MAX_TRIALS);
    for (int i = 0; i < MAX_TRIALS; i++) assert_int_equal(seen[i], 1);
    /* a queued trial is claimed within parallel_trials too */
    int64_t q;
    sto_db *d0 = as_node(tmp.db, nodes[0]);
    assert_int_equal(sto_trial_enqueue_ev(db, study, "{}", NULL, &q, NULL), 0);
    sto_trial_run one = {.slot = "cpu:0", .parallel = 1, .params = "{\"x\":1}"};
    int64_t running;
    sto_trial_run r = {.params = "{}", .slot = "cpu:1"};
    assert_int_equal(sto_trial_create_with(d0, study, &r, &running, NULL), 0);
    assert_int_equal(sto_trial_claim_ev(d0, q, &one, NULL), HPO_ECONFLICT); /* one runs */
    one.parallel = 2;
    assert_int_equal(sto_trial_claim_ev(d0, q, &one, NULL), 0);
    assert_int_equal(sto_trial_claim_ev(d0, q, &one, NULL), HPO_ECONFLICT); /* taken */
    sto_trial t;
    assert_int_equal(sto_trial_get(db, q, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_RUNNING);
    assert_string_equal(t.params, "{\"x\":1}");
    assert_int_equal(t.node_id, nodes[0]);
    sto_trial_clear(&t);
    sto_trial_run nope = {.slot = "cpu:0"};
    assert_int_equal(sto_trial_create_with(db, 999999, &nope, NULL, NULL), HPO_ENOTFOUND);
    sto_close(d0);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static void *complete_study(void *arg) {
    worker *w = arg;
    sto_db *db = as_node(w->target, w->node);
    pthread_barrier_wait(w->start);
    char data[32];
    snprintf(data, sizeof data, "{\"by\":%d}", w->index);
    sto_event_in ev = {"study_complete", data};
    int rc = db ? sto_study_transition_ev(db, w->study, 1u << STO_STUDY_RUNNING, STO_STUDY_COMPLETE, &ev) : -1;
    if (rc == 0)
        w->got[w->n_got++] = 1;
    else if (rc != HPO_ECONFLICT)
        w->failures++;
    sto_close(db);
    return NULL;
}

/* A study's end by one of the nodes settling it at once (one event); the
 * change counter lists created and changed studies once each, in order. */
static void test_study_changes(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = open_db(tmp.db), *other = open_db(tmp.db);
    int64_t since = -1;
    assert_int_equal(sto_study_changes_seq(other, &since), 0);
    int64_t s1, s2;
    assert_int_equal(sto_study_create(db, "one", "{\"a\":1}", &s1), 0);
    assert_int_equal(sto_study_create(db, "two", "{}", &s2), 0);
    sto_study *list = NULL;
    size_t n = 0;
    assert_int_equal(sto_studies_changed(other, &since, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, s1);
    assert_string_equal(list[0].spec, "{\"a\":1}");
    assert_int_equal(list[1].id, s2);
    sto_study_list_free(list, n);
    assert_int_equal(sto_studies_changed(other, &since, &list, &n), 0);
    assert_int_equal(n, 0);
    sto_study_list_free(list, n);
    assert_int_equal(sto_study_set_state(db, s1, STO_STUDY_PAUSED), 0);
    assert_int_equal(sto_study_transition_ev(db, s1, 1u << STO_STUDY_RUNNING, STO_STUDY_COMPLETE, NULL), HPO_ECONFLICT);
    assert_int_equal(sto_study_transition_ev(db, 999999, 1u << STO_STUDY_RUNNING, STO_STUDY_COMPLETE, NULL),
                     HPO_ENOTFOUND);
    assert_int_equal(sto_studies_changed(other, &since, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].id, s1);
    assert_int_equal(list[0].state, STO_STUDY_PAUSED);
    sto_study_list_free(list, n);
    /* the nodes that settle s2 at once: one ends it */
    int64_t nodes[N_THREADS] = {0};
    worker w[N_THREADS];
    run_threads(complete_study, w, nodes, tmp.db, s2);
    int winners = 0;
    for (int i = 0; i < N_THREADS; i++) winners += w[i].n_got;
    assert_int_equal(winners, 1);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM events WHERE type = 'study_complete'"), 1);
    assert_int_equal(sto_studies_changed(other, &since, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].state, STO_STUDY_COMPLETE);
    sto_study_list_free(list, n);
    sto_close(db);
    sto_close(other);
    sto_tmp_close(&tmp);
}

int main(void) {
    hpo_log_level = HPO_LOG_WARN;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_beat_end),
        cmocka_unit_test(test_dead_nodes_ended_once),
        cmocka_unit_test(test_own_earlier_run_ended),
        cmocka_unit_test(test_orphans_reclaimed_once),
        cmocka_unit_test(test_writes_kept_to_the_node),
        cmocka_unit_test(test_limits_across_nodes),
        cmocka_unit_test(test_study_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
