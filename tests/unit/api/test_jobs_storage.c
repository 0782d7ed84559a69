/* test_jobs_storage.c - the job layer when storage says no, in-process (the
 * jobs run on this thread, as a worker would run them):
 * - a full database (SQLITE_FULL, made with PRAGMA max_page_count) in the
 *   middle of a trial: the trial is not failed; it stops without
 *   checkpointing the epoch it could not store, the scheduler backs off,
 *   api_jobs_reap queues it again once space is back (its requeue could not
 *   be stored either), and it resumes from its last good checkpoint: every
 *   epoch is stored exactly once and the event stream tells it all;
 * - an epoch whose curve point cannot be stored for another reason (a
 *   trigger aborts its insert, as a lost connection would): no checkpoint
 *   of it, the trial is queued again and resumes from the epoch before, so
 *   the curve has no gap (seen once in api.test_nodes: a stalled node's
 *   epoch not stored, its checkpoint written, the resume past it);
 * - api_jobs_reap queues again what no busy slot runs, nothing else, and
 *   loads no finished study (its dataset) to find out;
 * - a study deleted while a worker trains its trial (and a new study at
 *   once): the worker stores nothing more, anywhere (ids are never reused),
 *   and leaves no files;
 * - training.device: a study asking for cuda gives no job to a cpu slot and
 *   one to a cuda slot (by name: no GPU is used), one asking for cpu the
 *   other way round; a job trains on a cuda slot's GPU only where its
 *   study lets it (api_slot_train_opts);
 * - fair share: a slot goes to the study running the fewest trials;
 * - the disk-full back-off does not double for each job in it;
 * - an import's study starts no trial before its history is in;
 * - a trial's or a refit's run flagged lost stores nothing more;
 * - an epoch that can never be stored: the trial is requeued with the
 *   back-off, and fails the third time in a row, with the reason;
 * - a trial whose end finds the database failing (its row cannot be read
 *   back, as when PostgreSQL goes away) leaves its checkpoints alone and
 *   the worker goes on (it freed an uninitialised row: SIGSEGV). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db_internal.h"
#include "api_internal.h"
#include "data_dir.h"
#include "jobs_internal.h"
#include "train.h"
#include "api/api_testutil.h"

static char dir[64];
static sto_db *db;
static api_ctx *ctx;

static json_t *call(const char *method, const char *path, const char *body, int *status) {
    return api_test_call(ctx, method, path, body, status);
}

/* One value read straight from the database (sto_db_query_int takes the
 * storage lock as every sto_* function does: a worker thread may be using
 * the connection while test_deleted_study_job_stores_nothing polls). */
static int64_t raw_int(const char *sql) {
    int64_t v = 0;
    assert_int_equal(sto_db_query_int(db, sql, &v), 0);
    return v;
}

static const atomic_int no_stop = API_STOP_NONE;

static int run_jobs(void) {
    int n = 0;
    api_job job;
    while (api_jobs_next(ctx, "cpu:0", &job) == 0) {
        api_jobs_run(ctx, &job, "cpu:0", 1, &no_stop);
        n++;
    }
    api_jobs_settle(ctx);
    return n;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/hpo-apijobs-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);
}

static void teardown(void) {
    api_ctx_free(ctx);
    sto_close(db);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

#define EPOCHS 30
static const char *study_json =
    "{\"name\": \"j\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
    " \"space\": {\"layers\": {\"type\": \"int\", \"low\": 1, \"high\": 1},"
    "            \"units\": {\"type\": \"int\", \"low\": 16, \"high\": 16}},"
    " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 300, \"validation_split\": 100},"
    " \"training\": {\"max_epochs\": 30, \"batch_size\": 100},"
    " \"tuner\": {\"algorithm\": \"random\", \"seed\": 2, \"max_trials\": 1}}";

static void test_full_database_mid_trial(void **state) {
    (void)state;
    setup();
    int status;
    json_decref(call("POST", "/api/v1/studies", study_json, &status));
    assert_int_equal(status, 201);
    /* from now on the database cannot grow: the events' pages fill up
     * within the trial's 30 epochs, and that epoch cannot be stored */
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", (long long)raw_int("PRAGMA page_count"));
    raw_int(sql);
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    assert_int_equal(api_jobs_run(ctx, &job, "cpu:0", 1, &no_stop), 0);
    int64_t stored = raw_int("SELECT COUNT(*) FROM epochs");
    printf("the database filled up after %lld epochs\n", (long long)stored);
    assert_true(stored >= 2 && stored < EPOCHS);
    /* not failed: queued again, or, when even its requeue found no room,
     * still "running" without a worker */
    int64_t left = raw_int("SELECT state FROM trials");
    printf("its requeue was %s\n", left == STO_TRIAL_QUEUED ? "stored" : "not stored either");
    assert_true(left == STO_TRIAL_QUEUED || left == STO_TRIAL_RUNNING);
    /* the scheduler backs off, and so does the reaper */
    assert_true(api_disk_wait(ctx) > 0);
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), HPO_ENOTFOUND);
    assert_int_equal(api_jobs_reap(ctx, NULL, 0), 0);
    /* space again (the back-off is ended by hand instead of waited for) */
    raw_int("PRAGMA max_page_count = 1073741823");
    api_disk_ok(ctx);
    assert_int_equal(api_jobs_reap(ctx, NULL, 0), left == STO_TRIAL_RUNNING); /* no slot runs it: queued */
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_QUEUED);
    assert_int_equal(run_jobs(), 1);
    json_t *s = call("GET", "/api/v1/studies/1", NULL, &status);
    assert_string_equal(json_string_value(json_object_get(s, "state")), "complete");
    json_decref(s);
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_COMPLETE);
    /* every epoch stored once; the resume started after the last epoch stored */
    assert_int_equal(raw_int("SELECT COUNT(*) FROM epochs"), EPOCHS);
    assert_int_equal(raw_int("SELECT COUNT(DISTINCT epoch) FROM epochs"), EPOCHS);
    /* the stream: every state change, in order, and an epoch event per epoch */
    sto_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(sto_event_list(db, 1, 0, 0, &ev, &n), 0);
    const char *want[] = {"study_created", "trial_started", "trial_requeued", "trial_resumed", "execution_resumed",
                          "trial_complete", "study_complete"}; /* (requeued: by the runner, or by the reaper) */
    size_t w = 0;
    int epoch_events = 0, from_epoch = -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].type, "epoch") == 0) {
            epoch_events++;
            continue;
        }
        printf("event %s %s\n", ev[i].type, ev[i].data);
        assert_true(w < HPO_ARRAY_LEN(want));
        assert_string_equal(ev[i].type, want[w++]);
        if (strcmp(ev[i].type, "execution_resumed") == 0) {
            json_t *d = json_loads(ev[i].data, 0, NULL);
            from_epoch = (int)json_integer_value(json_object_get(d, "from_epoch"));
            json_decref(d);
        }
    }
    assert_int_equal(w, HPO_ARRAY_LEN(want));
    assert_int_equal(epoch_events, EPOCHS); /* the epoch that failed left no event either */
    assert_int_equal(from_epoch, (int)stored);   /* its last good checkpoint */
    sto_event_list_free(ev, n);
    teardown();
}

/* setup() with the study of study_json, whose epoch 3 cannot be stored (a
 * trigger aborts its insert, as a lost connection or a damaged page would). */
static void setup_refusing_epoch_3(void) {
    setup();
    int status;
    json_decref(call("POST", "/api/v1/studies", study_json, &status));
    assert_int_equal(status, 201);
    assert_int_equal(sto_db_exec_sql(db, "CREATE TRIGGER no_epoch_3 BEFORE INSERT ON epochs WHEN NEW.epoch = 3"
                                         " BEGIN SELECT RAISE(ABORT, 'refused'); END"),
                     0);
}

static void test_epoch_not_stored_no_gap(void **state) {
    (void)state;
    setup_refusing_epoch_3();
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    api_jobs_run(ctx, &job, "cpu:0", 1, &no_stop);
    assert_int_equal(raw_int("SELECT MAX(epoch) FROM epochs"), 2);
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_QUEUED);
    assert_true(api_disk_wait(ctx) > 0); /* the scheduler backs off */
    assert_int_equal(sto_db_exec_sql(db, "DROP TRIGGER no_epoch_3"), 0);
    api_disk_ok(ctx); /* as when the back-off has passed */
    assert_int_equal(run_jobs(), 1);
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_COMPLETE);
    /* epochs 1..EPOCHS once each: the resume redid epoch 3 */
    assert_int_equal(raw_int("SELECT COUNT(*) FROM epochs"), EPOCHS);
    assert_int_equal(raw_int("SELECT COUNT(DISTINCT epoch) FROM epochs"), EPOCHS);
    assert_int_equal(raw_int("SELECT MAX(epoch) FROM epochs"), EPOCHS);
    teardown();
}

/* An epoch that can never be stored (a trigger refuses epoch 3 for good,
 * as a damaged database page does): each run requeues the trial with the
 * back-off, and the third in a row fails it with the reason (before: it
 * was restarted at once, about 100 times a second, forever). A stored
 * epoch in between starts the count again. */
static void test_epoch_never_stored(void **state) {
    (void)state;
    setup_refusing_epoch_3();
    api_epoch_not_stored(ctx, 1, "an earlier run's"); /* counted ... */
    api_epoch_stored(ctx, 1);                        /* ... and started again by a stored epoch */
    api_disk_ok(ctx);
    api_job job;
    for (int run = 1; run <= API_MAX_STORE_FAILURES; run++) {
        assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
        api_jobs_run(ctx, &job, "cpu:0", 1, &no_stop);
        assert_true(api_disk_wait(ctx) > 0);
        assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), HPO_ENOTFOUND); /* nothing starts in the back-off */
        api_disk_ok(ctx);
        assert_int_equal(raw_int("SELECT state FROM trials"),
                         run < API_MAX_STORE_FAILURES ? STO_TRIAL_QUEUED : STO_TRIAL_FAILED);
    }
    sto_trial t;
    assert_int_equal(sto_trial_get(db, 1, &t), 0);
    printf("the trial failed: %s\n", t.error);
    assert_non_null(strstr(t.error, "could not be stored 3 times in a row"));
    sto_trial_clear(&t);
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), HPO_ENOTFOUND);
    teardown();
}

/* From epoch 2 on, reading a trial's row fails (json() of malformed text is
 * an error at step, as a lost connection's read would be), and epoch 3
 * cannot be stored: the run ends requeued, then reads its row back to
 * prune checkpoints, and that read fails. */
static void test_row_unreadable_at_the_end(void **state) {
    (void)state;
    setup();
    int status;
    json_decref(call("POST", "/api/v1/studies", study_json, &status));
    assert_int_equal(status, 201);
    assert_int_equal(sto_db_exec_sql(db, "CREATE TABLE fail_reads (x);"
                                         "CREATE TRIGGER reads_fail AFTER INSERT ON epochs WHEN NEW.epoch = 2"
                                         " BEGIN INSERT INTO fail_reads VALUES (1); END;"
                                         "CREATE TRIGGER no_epoch_3 BEFORE INSERT ON epochs WHEN NEW.epoch = 3"
                                         " BEGIN SELECT RAISE(ABORT, 'refused'); END"),
                     0);
    sto_stmt *failing = NULL, *kept = db->q[STO_Q_TRIAL_GET];
    assert_int_equal(sto_sql_prepare(db->conn,
                                     "SELECT " STO_TRIAL_COLS " FROM trials WHERE id = ?1 AND"
                                     " CASE WHEN EXISTS (SELECT 1 FROM fail_reads) THEN json('not json') ELSE 1 END",
                                     &failing),
                     0);
    db->q[STO_Q_TRIAL_GET] = failing;
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    api_jobs_run(ctx, &job, "cpu:0", 1, &no_stop); /* crashed here */
    db->q[STO_Q_TRIAL_GET] = kept;
    sto_stmt_finalize(failing);
    assert_int_equal(raw_int("SELECT MAX(epoch) FROM epochs"), 2);
    assert_int_equal(sto_db_exec_sql(db, "DROP TRIGGER no_epoch_3; DROP TRIGGER reads_fail; DELETE FROM fail_reads"),
                     0);
    /* the database is back: the trial is queued again (by its run, or by the reaper) and completes */
    api_jobs_reap(ctx, NULL, 0);
    api_disk_ok(ctx); /* the back-off has passed */
    assert_int_equal(run_jobs(), 1);
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_COMPLETE);
    assert_int_equal(raw_int("SELECT COUNT(DISTINCT epoch) FROM epochs"), EPOCHS);
    teardown();
}

/* api_jobs_reap queues again a trial stored as running that no busy slot
 * runs, and leaves a busy slot's alone. */
static void test_reap(void **state) {
    (void)state;
    setup();
    int status;
    json_decref(call("POST", "/api/v1/studies", study_json, &status));
    assert_int_equal(status, 201);
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0); /* running, on no thread */
    assert_int_equal(api_jobs_reap(ctx, &job, 1), 0);
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_RUNNING);
    assert_int_equal(api_jobs_reap(ctx, NULL, 0), 1);
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_QUEUED);
    assert_int_equal(raw_int("SELECT COUNT(*) FROM events WHERE type = 'trial_requeued'"), 1);
    assert_int_equal(api_jobs_reap(ctx, NULL, 0), 0);
    teardown();
}

/* After a restart, the reap reads the finished studies from storage
 * without loading them: a load parses the definition, which decodes the
 * study's dataset (once on the scheduler's thread before hpod answered
 * anything, SIGTERM included). */
static void test_reap_loads_no_finished_study(void **state) {
    (void)state;
    setup();
    int status;
    json_decref(call("POST", "/api/v1/studies", study_json, &status));
    assert_int_equal(status, 201);
    assert_int_equal(run_jobs(), 1);
    assert_int_equal(raw_int("SELECT state FROM studies"), STO_STUDY_COMPLETE);
    api_ctx_free(ctx); /* the restart: a new api on the same database */
    eng_dataset_cache_clear();
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);
    assert_int_equal(api_jobs_reap(ctx, NULL, 0), 0);
    printf("datasets decoded by the reap of a finished study: %zu\n", eng_dataset_cache_size());
    assert_int_equal(eng_dataset_cache_size(), 0);
    teardown();
}

typedef struct job_thread {
    api_job job;
    int rc;
} job_thread;

static void *run_one(void *arg) {
    job_thread *j = arg;
    j->rc = api_jobs_run(ctx, &j->job, "cpu:0", 1, &no_stop);
    return NULL;
}

static const char *slow_json =
    "{\"name\": \"slow\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
    " \"space\": {\"layers\": {\"type\": \"int\", \"low\": 1, \"high\": 1},"
    "            \"units\": {\"type\": \"int\", \"low\": 64, \"high\": 64}},"
    " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 5000, \"validation_split\": 500},"
    " \"training\": {\"max_epochs\": 40, \"batch_size\": 50},"
    " \"tuner\": {\"algorithm\": \"random\", \"seed\": 2, \"max_trials\": 1}}";

/* DELETE while a worker trains one of the study's trials, and a new study
 * at once: the worker stores nothing more (not in the new study either),
 * stops at the first epoch it cannot store and removes its files. */
static void test_deleted_study_job_stores_nothing(void **state) {
    (void)state;
    setup();
    int status;
    json_decref(call("POST", "/api/v1/studies", slow_json, &status));
    assert_int_equal(status, 201);
    job_thread j = {.rc = -100};
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &j.job), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_one, &j), 0);
    while (raw_int("SELECT COUNT(*) FROM epochs") < 1) usleep(1000);
    json_decref(call("DELETE", "/api/v1/studies/1", NULL, &status));
    assert_int_equal(status, 204);
    json_t *other = call("POST", "/api/v1/studies",
                         "{\"name\": \"x\", \"space\": {\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}}}", &status);
    assert_int_equal(status, 201);
    assert_int_equal(json_integer_value(json_object_get(other, "id")), 2);
    json_decref(other);
    json_t *asked = call("POST", "/api/v1/studies/2/ask", NULL, &status);
    assert_int_equal(status, 200);
    assert_true(json_integer_value(json_object_get(asked, "trial_id")) > j.job.trial_id);
    json_decref(asked);
    assert_int_equal(api_jobs_stop_reason(ctx, &j.job), API_STOP_CANCEL); /* what the scheduler would ask */
    pthread_join(th, NULL);
    assert_int_equal(j.rc, 0);
    assert_int_equal(raw_int("SELECT COUNT(*) FROM epochs"), 0);
    assert_int_equal(raw_int("SELECT COUNT(*) FROM intermediates"), 0);
    assert_int_equal(raw_int("SELECT COUNT(*) FROM events WHERE study_id <> 2 OR type <> 'study_created'"), 0);
    assert_int_equal(raw_int("SELECT state FROM trials"), STO_TRIAL_RUNNING); /* study 2's, untouched */
    char path[API_PATH_MAX];
    assert_int_equal(api_dir_trial(path, dir, j.job.trial_id), 0);
    assert_int_equal(access(path, F_OK), -1);
    char url[64];
    snprintf(url, sizeof url, "/api/v1/trials/%lld/tell", (long long)j.job.trial_id);
    json_decref(call("POST", url, "{\"value\": 1}", &status));
    assert_int_equal(status, 404);
    teardown();
}

static void test_device_kind(void **state) {
    (void)state;
    setup();
    int status;
    json_t *j = json_loads(study_json, 0, NULL);
    json_object_set_new(json_object_get(j, "training"), "device", json_string("cuda"));
    char *body = json_dumps(j, 0);
    json_decref(call("POST", "/api/v1/studies", body, &status));
    assert_int_equal(status, 201);
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), HPO_ENOTFOUND);
    assert_int_equal(api_jobs_next(ctx, "cuda:0/0", &job), 0);
    assert_int_equal(job.study_id, 1);
    free(body);
    json_object_set_new(json_object_get(j, "training"), "device", json_string("cpu"));
    body = json_dumps(j, 0);
    json_decref(call("POST", "/api/v1/studies", body, &status));
    assert_int_equal(status, 201);
    assert_int_equal(api_jobs_next(ctx, "cuda:0/1", &job), HPO_ENOTFOUND);
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    assert_int_equal(job.study_id, 2);
    free(body);
    json_decref(j);
    teardown();
}

/* a slot serves the studies that can use its kind only before those that
 * take any device, oldest first in each: an older "any" study leaves a
 * GPU slot to a newer "cuda" one and takes a CPU slot */
static void test_device_kind_first(void **state) {
    (void)state;
    setup();
    int status;
    json_t *j = json_loads(study_json, 0, NULL);
    for (int k = 0; k < 3; k++) { /* 1: any, 2: cuda, 3: cpu */
        json_object_set_new(json_object_get(j, "training"), "device", json_string(k == 0 ? "any" : k == 1 ? "cuda" : "cpu"));
        char *body = json_dumps(j, 0);
        json_decref(call("POST", "/api/v1/studies", body, &status));
        assert_int_equal(status, 201);
        free(body);
    }
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cuda:0/0", &job), 0);
    assert_int_equal(job.study_id, 2);
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    assert_int_equal(job.study_id, 3);
    json_decref(j);
    teardown();
}

/* a run flagged lost (this node found dead, the trial taken from it)
 * stores nothing more: no epoch (after a rejoin its writes would pass as
 * the new node's, which may resume the trial on another slot), and it
 * leaves the crash counter to the run that has the trial now (before: the
 * epoch in progress was stored, and the counter removed) */
/* Runs the next job as a worker whose run is flagged lost from the start;
 * counter_fmt names its crash counter under the data dir (%lld: its id). */
static api_job run_lost(const char *counter_fmt) {
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    const atomic_int lost = API_STOP_LOST;
    api_jobs_run(ctx, &job, "cpu:0", 1, &lost);
    char rel[96], counter[API_PATH_MAX];
    snprintf(rel, sizeof rel, counter_fmt, (long long)(job.kind == API_JOB_MODEL ? job.model_id : job.trial_id));
    snprintf(counter, sizeof counter, "%s/%s", dir, rel);
    assert_int_equal(access(counter, F_OK), 0); /* left to the run that has the job now */
    return job;
}

static void test_lost_run_stores_nothing(void **state) {
    (void)state;
    setup();
    api_test_create_study(ctx, study_json);
    run_lost("checkpoints/trial-%lld/training");
    assert_int_equal(raw_int("SELECT COUNT(*) FROM epochs"), 0);
    teardown();
}

/* the same for a refit flagged lost: no model_epoch event, and its crash
 * counter is left to the run that has the job now (before: an event per
 * epoch until the stop, the counter removed) */
static void test_lost_refit_stores_nothing(void **state) {
    (void)state;
    setup();
    api_test_create_study(ctx, study_json);
    assert_int_equal(run_jobs(), 1);
    int status;
    json_decref(call("POST", "/api/v1/studies/1/refits", "{\"top_n\": 1}", &status));
    assert_int_equal(status, 201);
    assert_int_equal(run_lost("checkpoints/model-%lld.training").kind, API_JOB_MODEL);
    assert_int_equal(raw_int("SELECT COUNT(*) FROM events WHERE type = 'model_epoch'"), 0);
    teardown();
}

/* an import's hold (api_study_create with hold, then its trials added):
 * the study is stored paused, so the scheduler's tick that learns of it
 * (api_queue_sync) starts no trial #0 before the imported history is in
 * (before: it was learnt as running, and a trial started) */
static void test_import_hold(void **state) {
    (void)state;
    setup();
    json_t *def = json_loads(study_json, 0, NULL);
    int64_t id = 0;
    hpo_error err;
    assert_int_equal(api_study_create(ctx, def, 1, NULL, &id, NULL, &err), 0);
    api_queue_sync(ctx); /* the tick, between the creation and the import's trials */
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), HPO_ENOTFOUND);
    sto_study s;
    assert_int_equal(sto_study_get(db, id, &s), 0);
    assert_int_equal(s.state, STO_STUDY_PAUSED);
    sto_study_clear(&s);
    /* the import made it run: now it starts */
    assert_int_equal(sto_study_transition_ev(db, id, 1u << STO_STUDY_PAUSED, STO_STUDY_RUNNING, NULL), 0);
    api_queue_set(ctx, id, STO_STUDY_RUNNING);
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    assert_int_equal(job.study_id, id);
    json_decref(def);
    teardown();
}

/* the disk-full back-off: the jobs that find the disk full during one are
 * in it already (before: 3 at once made it 4 s); one that finds it full
 * after it doubles it; a stored epoch ends it */
static void test_disk_backoff(void **state) {
    (void)state;
    setup();
    assert_true(api_disk_wait(ctx) == 0);
    for (int k = 0; k < 3; k++) api_disk_full(ctx);
    double w = api_disk_wait(ctx);
    printf("three jobs found the disk full at once: the back-off is %.2f s\n", w);
    assert_true(w > 0 && w <= 1.0);
    usleep(1100 * 1000);
    assert_true(api_disk_wait(ctx) == 0);
    api_disk_full(ctx);
    w = api_disk_wait(ctx);
    printf("again after it: %.2f s\n", w);
    assert_true(w > 1.0 && w <= 2.0);
    api_disk_ok(ctx);
    assert_true(api_disk_wait(ctx) == 0);
    api_disk_full(ctx);
    assert_true(api_disk_wait(ctx) <= 1.0);
    teardown();
}

/* fair share: each slot goes to the study running the fewest trials, the
 * oldest among equals; a study without parallel_trials does not hold every
 * slot from a newer one (before: 1, 1, 1, 1) */
static void test_fair_share(void **state) {
    (void)state;
    setup();
    json_t *j = json_loads(study_json, 0, NULL);
    json_object_set_new(json_object_get(j, "tuner"), "max_trials", json_integer(10));
    char *body = json_dumps(j, 0);
    for (int k = 0; k < 2; k++) api_test_create_study(ctx, body);
    const char *slots[] = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"};
    const int64_t want[] = {1, 2, 1, 2};
    api_job job;
    for (int k = 0; k < 4; k++) {
        assert_int_equal(api_jobs_next(ctx, slots[k], &job), 0);
        assert_int_equal(job.study_id, want[k]);
    }
    /* a third study, newer: the next slot is its own */
    api_test_create_study(ctx, body);
    assert_int_equal(api_jobs_next(ctx, "cpu:4", &job), 0);
    assert_int_equal(job.study_id, 3);
    free(body);
    json_decref(j);
    teardown();
}

/* where a job trains: a CUDA slot's GPU when the study's training.device
 * lets it (a spanning slot: a replica on each of its GPUs), else the CPU */
static void test_slot_train_opts(void **state) {
    (void)state;
    struct {
        const char *slot;
        int device, cuda, gpu, replicas, gpus[3];
    } cases[] = {
        {"cpu:0", API_DEVICE_ANY, 0, 0, 0, {0}},
        {"cuda:2/1", API_DEVICE_ANY, 1, 2, 0, {0}},
        {"cuda:0/0", API_DEVICE_CUDA, 1, 0, 0, {0}},
        {"cuda:1+3/0", API_DEVICE_ANY, 1, 1, 2, {1, 3}},
        {"cuda:4+0+12/7", API_DEVICE_CUDA, 1, 4, 3, {4, 0, 12}},
        {"cuda:1/0", API_DEVICE_CPU, 0, 0, 0, {0}},
        {"cuda:1+2/0", API_DEVICE_CPU, 0, 0, 0, {0}},
        {NULL, API_DEVICE_ANY, 0, 0, 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_embedded e;
        memset(&e, 0, sizeof e);
        e.device = cases[i].device;
        eng_train_opts o;
        eng_train_opts_init(&o);
        api_slot_train_opts(cases[i].slot, &e, &o);
        assert_int_equal(o.cuda, cases[i].cuda);
        assert_int_equal(o.cuda_device, cases[i].gpu);
        assert_int_equal(o.cuda_replicas, cases[i].replicas);
        for (int k = 0; k < cases[i].replicas; k++) assert_int_equal(o.cuda_devices[k], cases[i].gpus[k]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_database_mid_trial),
        cmocka_unit_test(test_epoch_not_stored_no_gap),
        cmocka_unit_test(test_epoch_never_stored),
        cmocka_unit_test(test_row_unreadable_at_the_end),
        cmocka_unit_test(test_reap),
        cmocka_unit_test(test_reap_loads_no_finished_study),
        cmocka_unit_test(test_deleted_study_job_stores_nothing),
        cmocka_unit_test(test_device_kind),
        cmocka_unit_test(test_device_kind_first),
        cmocka_unit_test(test_fair_share),
        cmocka_unit_test(test_disk_backoff),
        cmocka_unit_test(test_import_hold),
        cmocka_unit_test(test_lost_run_stores_nothing),
        cmocka_unit_test(test_lost_refit_stores_nothing),
        cmocka_unit_test(test_slot_train_opts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
