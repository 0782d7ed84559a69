/* test_recovery.c - crash loops (jobs.h, api_jobs_recover; data_dir.h,
 * api_training_*): a trial found running at start is queued again to resume
 * from its checkpoint, but one whose training hpod died in API_MAX_CRASHES
 * times in a row with no epoch finished in between (it is what takes hpod
 * down) fails with the reason, the tuner is told, and the study completes.
 * A death before training starts (the dataset loading) does not count; an
 * epoch, or training that returns, starts the count again. Runs in-process:
 * api_jobs_next is what a free worker slot calls, api_training_begin what
 * the runner does before it allocates the model (a "crash" is not calling
 * api_training_end), api_jobs_recover what a start does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "data_dir.h"
#include "api/api_testutil.h"

static char dir[64];
static sto_db *db;
static api_ctx *ctx;

static json_t *call(const char *method, const char *path, const char *body, int *status) {
    return api_test_call(ctx, method, path, body, status);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hpo-recovery-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    api_ctx_free(ctx);
    sto_close(db);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* trial_timeout 0: none */
static int64_t create_study_timeout(int max_epochs, double trial_timeout) {
    char body[700], timeout[48] = "";
    if (trial_timeout > 0) snprintf(timeout, sizeof timeout, ", \"trial_timeout\": %.17g", trial_timeout);
    snprintf(body, sizeof body,
             "{\"name\": \"r\", \"objective\": {\"metric\": \"val_accuracy\"},"
             " \"model\": {\"layers\": [{\"flatten\": {}}, {\"dense\": {\"units\": 8, \"activation\": \"relu\"}},"
             " {\"dense\": {\"units\": 10, \"activation\": \"softmax\"}}], \"optimizer\": {\"name\": \"adam\", "
             "\"learning_rate\": \"$lr\"}}, \"space\": {\"lr\": {\"type\": \"float\", \"low\": 0.001, \"high\": 0.01}},"
             " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 200, \"validation_split\": 100},"
             " \"training\": {\"max_epochs\": %d, \"batch_size\": 50},"
             " \"tuner\": {\"algorithm\": \"random\", \"seed\": 2, \"max_trials\": 1%s}}",
             max_epochs, timeout);
    return api_test_create_study(ctx, body);
}

static int64_t create_study(int max_epochs) { return create_study_timeout(max_epochs, 0); }

static sto_trial trial_of(int64_t study) {
    sto_trial_filter f = {.state = -1, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_list(db, study, &f, &t, &n), 0);
    assert_int_equal(n, 1);
    sto_trial one = t[0];
    memset(&t[0], 0, sizeof t[0]); /* keep its strings */
    sto_trial_list_free(t, n);
    return one;
}

static void test_crash_loop_fails_the_trial(void **state) {
    (void)state;
    int64_t sid = create_study(1);
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    /* killed twice before it trained (loading its data): not counted */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(api_jobs_recover(ctx), 1);
        assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    }
    for (int crash = 1; crash <= API_MAX_CRASHES; crash++) {
        assert_int_equal(api_training_begin(dir, job.trial_id), crash); /* dies while training */
        int requeued = api_jobs_recover(ctx);
        sto_trial t = trial_of(sid);
        printf("  start after crash %d in training: trial %s%s%s\n", crash, sto_trial_state_name(t.state),
               t.error ? ": " : "", t.error ? t.error : "");
        if (crash < API_MAX_CRASHES) {
            assert_int_equal(requeued, 1);
            assert_int_equal(t.state, STO_TRIAL_QUEUED);
            assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0); /* resumed: running again */
            assert_true(job.resumed);
        } else {
            assert_int_equal(requeued, 0);
            assert_int_equal(t.state, STO_TRIAL_FAILED);
            assert_non_null(strstr(t.error, "hpod stopped 3 times in a row while training this trial"));
        }
        sto_trial_clear(&t);
    }
    /* the tuner was told: nothing is left to run and the study completes */
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), HPO_ENOTFOUND);
    api_jobs_settle(ctx);
    int status;
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld", (long long)sid);
    json_t *s = call("GET", path, NULL, &status);
    assert_string_equal(json_string_value(json_object_get(s, "state")), "complete");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(s, "trials_by_state"), "failed")), 1);
    json_decref(s);
}

static void test_progress_resets_the_count(void **state) {
    (void)state;
    int64_t sid = create_study(3);
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    for (int i = 0; i < API_MAX_CRASHES - 1; i++) { /* two crashes in training */
        api_training_begin(dir, job.trial_id);
        assert_int_equal(api_jobs_recover(ctx), 1);
        assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    }
    assert_int_equal(api_training_crashes(dir, job.trial_id), API_MAX_CRASHES - 1);
    /* an epoch: this run made progress, a death from now on is not one
     * "before it finished an epoch" (the count starts again from 0) */
    api_training_epoch(dir, job.trial_id);
    assert_int_equal(api_training_crashes(dir, job.trial_id), 0);
    /* the real runner: one epoch, then a clean shutdown (requeued); training
     * returned, so nothing is counted */
    static const atomic_int shutdown = API_STOP_SHUTDOWN;
    assert_int_equal(api_jobs_run(ctx, &job, "cpu:0", 1, &shutdown), 0);
    sto_trial t = trial_of(sid);
    assert_int_equal(t.state, STO_TRIAL_QUEUED);
    assert_int_equal(api_training_crashes(dir, t.id), 0);
    for (int i = 0; i < API_MAX_CRASHES - 1; i++) { /* two more crashes: still resumed */
        assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
        api_training_begin(dir, job.trial_id);
        assert_int_equal(api_jobs_recover(ctx), 1);
    }
    sto_trial_clear(&t);
    t = trial_of(sid);
    assert_int_equal(t.state, STO_TRIAL_QUEUED);
    printf("  after progress and two more crashes: trial %s, count %d\n", sto_trial_state_name(t.state),
           api_training_crashes(dir, t.id));
    sto_trial_clear(&t);
}

/* trial_timeout counts the training of a trial's earlier runs (paused,
 * shut down, a pbt segment): a resumed trial's job carries what they
 * trained, and the runner stops it at its first epoch once the sum is past
 * the limit. Deterministic: the earlier runs are given 5 s against 1. */
static void test_timeout_counts_earlier_runs(void **state) {
    (void)state;
    int64_t sid = create_study_timeout(5, 1.0);
    api_job job;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    assert_true(job.timeout == 1.0 && job.trained == 0.0);
    static const atomic_int shutdown = API_STOP_SHUTDOWN, go_on = API_STOP_NONE;
    assert_int_equal(api_jobs_run(ctx, &job, "cpu:0", 1, &shutdown), 0); /* one epoch, requeued */
    sto_trial t = trial_of(sid);
    assert_int_equal(t.state, STO_TRIAL_QUEUED);
    assert_int_equal(sto_trial_set_training(db, t.id, 0, 5.0), 0); /* as if it had trained 5 s more */
    sto_trial_clear(&t);
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    printf("  resumed: trained %.3f s before, trial_timeout %.1f s\n", job.trained, job.timeout);
    assert_true(job.resumed && job.trained >= 5.0 && job.timeout == 1.0);
    assert_int_equal(api_jobs_run(ctx, &job, "cpu:0", 1, &go_on), 0);
    t = trial_of(sid);
    printf("  then: %s: %s\n", sto_trial_state_name(t.state), t.error ? t.error : "");
    assert_int_equal(t.state, STO_TRIAL_FAILED);
    assert_non_null(strstr(t.error, "timed out"));
    sto_trial_clear(&t);
}

int main(void) {
    hpo_log_level = HPO_LOG_WARN;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_crash_loop_fails_the_trial, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_resets_the_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_counts_earlier_runs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
