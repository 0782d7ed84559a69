/* test_concurrency.c - several connections on one database, the way
 * several hpod nodes share one PostgreSQL (each thread here opens its OWN
 * sto_db on the same file or URL): trial numbers stay unique and dense per
 * study, a queued model job is claimed by one connection only, and a
 * requeued trial is resumed by one only; a dataset deleted while a study
 * is created on it is either in use (the delete refused) or gone (the
 * create refused), never both done. Runs on SQLite (a file) and, as
 * pg.storage.test_concurrency, on PostgreSQL. */
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
#include <unistd.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

enum { N_THREADS = 4, PER_THREAD = 24, N_MODELS = 40, N_TRIALS = 24 };

typedef struct {
    const char *target;
    int64_t study;
    int index;
    int failures;
    int64_t got[N_MODELS + N_TRIALS]; /* ids claimed, or numbers made */
    int n_got;
} worker;

/* Each thread's own connection. */
static sto_db *open_own(const char *target) {
    sto_db *db = NULL;
    return sto_open(target, STO_SYNC_NORMAL, &db) == 0 ? db : NULL;
}

/* Makes PER_THREAD trials in the study, by all three ways of numbering. */
static void *make_trials(void *arg) {
    worker *w = arg;
    sto_db *db = open_own(w->target);
    if (!db) {
        w->failures++;
        return NULL;
    }
    for (int i = 0; i < PER_THREAD; i++) {
        int64_t id = 0, number = -1;
        int rc;
        if (i % 3 == 0) {
            rc = sto_trial_create(db, w->study, "{}", 0, &id, &number);
        } else if (i % 3 == 1) {
            rc = sto_trial_enqueue_ev(db, w->study, "{}", NULL, &id, &number);
        } else {
            sto_trial_in in = {.state = STO_TRIAL_COMPLETE, .params = "{}", .value = i, .value_std = NAN};
            rc = sto_trial_add_ev(db, w->study, &in, NULL, &id, &number);
        }
        if (rc)
            w->failures++;
        else
            w->got[w->n_got++] = number;
    }
    sto_close(db);
    return NULL;
}

static void run_threads(void *(*fn)(void *), worker *w, const char *target, int64_t study) {
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){.target = target, .study = study, .index = i};
        assert_int_equal(pthread_create(&th[i], NULL, fn, &w[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(w[i].failures, 0);
}

static void test_numbers_unique_and_dense(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t study, other;
    assert_int_equal(sto_study_create(db, "shared", "{}", &study), 0);
    assert_int_equal(sto_study_create(db, "other", "{}", &other), 0);
    assert_int_equal(sto_trial_create(db, other, "{}", 0, NULL, NULL), 0);

    worker w[N_THREADS];
    run_threads(make_trials, w, tmp.db, study);
    /* every number 0 .. N-1 handed out once */
    int seen[N_THREADS * PER_THREAD] = {0};
    for (int i = 0; i < N_THREADS; i++)
        for (int k = 0; k < w[i].n_got; k++) {
            int64_t n = w[i].got[k];
            assert_true(n >= 0 && n < N_THREADS * PER_THREAD);
            seen[n]++;
        }
    for (int n = 0; n < N_THREADS * PER_THREAD; n++) assert_int_equal(seen[n], 1);
    /* and stored so */
    sto_trial *t = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_list(db, study, NULL, &t, &n), 0);
    assert_int_equal(n, N_THREADS * PER_THREAD);
    for (size_t i = 0; i < n; i++) assert_int_equal(t[i].number, (int64_t)i);
    sto_trial_list_free(t, n);
    /* the other study's numbering is its own */
    int64_t number = -1;
    assert_int_equal(sto_trial_create(db, other, "{}", 0, NULL, &number), 0);
    assert_int_equal(number, 1);
    sto_close(db);
    sto_tmp_close(&tmp);
}

static char *claim_data(void *arg, int64_t id) {
    char *s = malloc(64);
    snprintf(s, 64, "{\"model_id\":%lld,\"by\":%d}", (long long)id, *(int *)arg);
    return s;
}

static void *claim_models(void *arg) {
    worker *w = arg;
    sto_db *db = open_own(w->target);
    if (!db) {
        w->failures++;
        return NULL;
    }
    for (;;) {
        sto_model m;
        int rc = sto_model_claim_ev(db, "model_started", claim_data, &w->index, &m);
        if (rc == HPO_ENOTFOUND) break;
        if (rc || m.state != STO_MODEL_RUNNING || w->n_got == N_MODELS) {
            w->failures++;
            if (rc == 0) sto_model_clear(&m);
            break;
        }
        w->got[w->n_got++] = m.id;
        sto_model_clear(&m);
    }
    sto_close(db);
    return NULL;
}

static void test_models_claimed_once(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t study, first = 0;
    assert_int_equal(sto_study_create(db, "models", "{}", &study), 0);
    for (int i = 0; i < N_MODELS; i++) {
        int64_t id;
        assert_int_equal(sto_model_create(db, study, 0, STO_MODEL_REFIT, "{}", 0, &id), 0);
        if (i == 0) first = id;
    }
    worker w[N_THREADS];
    run_threads(claim_models, w, tmp.db, study);
    int claimed[N_MODELS] = {0}, total = 0;
    for (int i = 0; i < N_THREADS; i++)
        for (int k = 0; k < w[i].n_got; k++) {
            int64_t j = w[i].got[k] - first;
            assert_true(j >= 0 && j < N_MODELS);
            claimed[j]++;
            total++;
        }
    /* a claim that found every queued row locked by the others' claims
     * stops early: what is left is claimed here, once too */
    sto_model m;
    int me = 99;
    while (sto_model_claim_ev(db, "model_started", claim_data, &me, &m) == 0) {
        claimed[m.id - first]++;
        total++;
        sto_model_clear(&m);
    }
    assert_int_equal(total, N_MODELS);
    for (int i = 0; i < N_MODELS; i++) assert_int_equal(claimed[i], 1);
    /* one model_started event each, stored with its claim */
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM events WHERE type = 'model_started'"), N_MODELS);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM models WHERE state = 1 AND started > 0"), N_MODELS);
    assert_int_equal(sto_model_claim_ev(db, NULL, NULL, NULL, &m), HPO_ENOTFOUND);
    sto_close(db);
    sto_tmp_close(&tmp);
}

/* Every thread tries to resume every requeued trial of the study. */
static void *resume_trials(void *arg) {
    worker *w = arg;
    sto_db *db = open_own(w->target);
    if (!db) {
        w->failures++;
        return NULL;
    }
    sto_trial *t = NULL;
    size_t n = 0;
    if (sto_trial_list(db, w->study, NULL, &t, &n)) w->failures++;
    for (size_t i = 0; i < n; i++) {
        size_t k = (i + (size_t)w->index * 5) % n; /* each thread from elsewhere */
        char slot[16];
        snprintf(slot, sizeof slot, "cpu:%d", w->index);
        int rc = sto_trial_resume_ev(db, t[k].id, slot, NULL);
        if (rc == 0)
            w->got[w->n_got++] = t[k].id;
        else if (rc != HPO_ECONFLICT)
            w->failures++;
    }
    sto_trial_list_free(t, n);
    sto_close(db);
    return NULL;
}

static void test_requeued_trials_resumed_once(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t study;
    assert_int_equal(sto_study_create(db, "resume", "{}", &study), 0);
    for (int i = 0; i < N_TRIALS; i++) assert_int_equal(sto_trial_create(db, study, "{}", 0, NULL, NULL), 0);
    int64_t n_requeued = 0;
    assert_int_equal(sto_trials_requeue_running(db, study, &n_requeued), 0);
    assert_int_equal(n_requeued, N_TRIALS);
    worker w[N_THREADS];
    run_threads(resume_trials, w, tmp.db, study);
    int total = 0;
    for (int i = 0; i < N_THREADS; i++) total += w[i].n_got;
    assert_int_equal(total, N_TRIALS);
    int64_t c[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, study, c), 0);
    assert_int_equal(c[STO_TRIAL_RUNNING], N_TRIALS);
    /* an enqueued trial (never started) is not resumed: it is handed out */
    int64_t id;
    assert_int_equal(sto_trial_enqueue_ev(db, study, "{}", NULL, &id, NULL), 0);
    assert_int_equal(sto_trial_resume_ev(db, id, "cpu:0", NULL), HPO_ECONFLICT);
    assert_int_equal(sto_trial_resume_ev(db, 999999, "cpu:0", NULL), HPO_ENOTFOUND);
    sto_close(db);
    sto_tmp_close(&tmp);
}


/* ---- a dataset delete racing with a study created on it ---- */

typedef struct {
    const char *target;
    int64_t dataset;
    int rc;
    int done; /* atomic */
} creator;

static void *create_on_dataset(void *arg) {
    creator *c = arg;
    sto_db *db = open_own(c->target);
    sto_study_new in = {.name = "on-data", .spec = "{}", .dataset_id = c->dataset};
    c->rc = db ? sto_study_create_with(db, &in, NULL, NULL, NULL) : HPO_ESTORAGE;
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    if (db) sto_close(db);
    return NULL;
}

typedef struct {
    creator *create;
    pthread_t th;
    int create_waited;
} racing_delete;

/* The delete's in_use, inside its transaction with the dataset's row
 * locked: a create starts on another connection and must wait for the
 * delete to end. Nothing uses the dataset. */
static int create_meanwhile(void *arg) {
    racing_delete *d = arg;
    assert_int_equal(pthread_create(&d->th, NULL, create_on_dataset, d->create), 0);
    usleep(300 * 1000);
    d->create_waited = !__atomic_load_n(&d->create->done, __ATOMIC_ACQUIRE);
    return 0;
}

typedef struct {
    const char *target;
    int64_t dataset;
    sto_db *db; /* the thread's own connection */
    int rc;
    int done; /* atomic */
} deleter;

/* The delete's in_use: any study at all, read in its transaction. */
static int any_study(void *arg) {
    deleter *d = arg;
    sto_study *list = NULL;
    size_t n = 0;
    int rc = sto_study_list(d->db, &list, &n);
    sto_study_list_free(list, n);
    return rc ? rc : n > 0;
}

static void *delete_dataset(void *arg) {
    deleter *d = arg;
    d->db = open_own(d->target);
    d->rc = d->db ? sto_dataset_delete_unused(d->db, d->dataset, any_study, d) : HPO_ESTORAGE;
    __atomic_store_n(&d->done, 1, __ATOMIC_RELEASE);
    if (d->db) sto_close(d->db);
    return NULL;
}

static void test_dataset_delete_races_create(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db = NULL;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t ds;
    assert_int_equal(sto_dataset_create(db, "raced", "csv", "d.csv", NULL, 10, 100, &ds), 0);
    /* the delete first: the create waits for it, then finds the row gone */
    creator c = {.target = tmp.db, .dataset = ds};
    racing_delete del = {.create = &c};
    assert_int_equal(sto_dataset_delete_unused(db, ds, create_meanwhile, &del), 0);
    assert_int_equal(pthread_join(del.th, NULL), 0);
    assert_true(del.create_waited);
    assert_int_equal(c.rc, HPO_ESTALE);
    assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM studies"), 0);
    int64_t id;
    assert_int_equal(sto_model_create(db, 1, 0, STO_MODEL_REFIT, "{}", ds, &id), HPO_ESTALE);
    /* the create first: its transaction holds the row, the delete waits
     * for its commit, then reads the new study and refuses */
    assert_int_equal(sto_dataset_create(db, "held", "csv", "d.csv", NULL, 10, 100, &ds), 0);
    sto_db_lock(db);
    assert_int_equal(sto_db_begin(db), 0);
    assert_int_equal(sto_db_hold_dataset(db, ds), 0);
    sto_test_exec(db, "INSERT INTO studies (name, spec, state, created, updated) VALUES ('user', '{}', 0, 1, 1)");
    deleter d = {.target = tmp.db, .dataset = ds};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, delete_dataset, &d), 0);
    usleep(300 * 1000);
    int delete_waited = !__atomic_load_n(&d.done, __ATOMIC_ACQUIRE);
    assert_int_equal(sto_db_commit(db), 0);
    sto_db_unlock(db);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(delete_waited);
    assert_int_equal(d.rc, HPO_ECONFLICT);
    sto_dataset got;
    assert_int_equal(sto_dataset_get(db, ds, &got), 0);
    sto_dataset_clear(&got);
    /* unused, it goes; an unknown one is not found */
    sto_test_exec(db, "DELETE FROM studies");
    d = (deleter){.target = tmp.db, .dataset = ds};
    delete_dataset(&d);
    assert_int_equal(d.rc, 0);
    assert_int_equal(sto_dataset_get(db, ds, &got), HPO_ENOTFOUND);
    deleter same = {.db = db};
    assert_int_equal(sto_dataset_delete_unused(db, ds, any_study, &same), HPO_ENOTFOUND);
    sto_close(db);
    sto_tmp_close(&tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers_unique_and_dense),
        cmocka_unit_test(test_models_claimed_once),
        cmocka_unit_test(test_requeued_trials_resumed_once),
        cmocka_unit_test(test_dataset_delete_races_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
