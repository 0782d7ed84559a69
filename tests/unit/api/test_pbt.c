/* test_pbt.c - population-based training in the job layer (api/pbt.c),
 * in-process on one slot (api_jobs_next, api_jobs_run as a worker calls
 * them): the population is sampled first, members stop at each boundary
 * and wait, a member is ranked only once every live one reported the
 * epoch, the bottom member is replaced by a trial whose starting
 * checkpoint is the donor's at that boundary bit for bit (the file and
 * the weights, optimiser state, batch-norm statistics and generator it
 * loads into a model built with the new params), the donor's later
 * epochs leave that copy alone, the lineage is stored and served, the
 * bred trial's curve starts after the boundary, tuner.mutable's default
 * comes from the template's shapes, and the study completes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "data_dir.h"
#include "jobs_internal.h"
#include "model.h"
#include "train.h"
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
    snprintf(dir, sizeof dir, "/tmp/hpo-pbt-XXXXXX");
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

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* The model of trial_id (its params) with the checkpoint at path loaded. */
static eng_model *load(api_study *st, int64_t trial_id, const char *path) {
    sto_trial t;
    json_t *params = NULL, *model = NULL;
    hpo_error err;
    assert_int_equal(api_trial_template(ctx, st, trial_id, &t, &params, &model, &err), 0);
    eng_model *m = NULL;
    const api_embedded *e = &st->def.emb;
    assert_int_equal(eng_model_new(model, params, e->in_rank, e->in_shape, e->n_classes, 99, &m, &err), 0);
    eng_train_state ts;
    assert_int_equal(eng_checkpoint_load(m, path, &ts, NULL, NULL, &err), 0);
    sto_trial_clear(&t);
    json_decref(params);
    json_decref(model);
    return m;
}

/* Checks that bred trial `t` starts from its parent's checkpoint at the
 * boundary, bit for bit; returns the bytes of its starting checkpoint. */
static char *check_copy(api_study *st, const sto_trial *t, int64_t *parent, int64_t *epoch, size_t *n) {
    json_t *lin = json_loads(t->lineage, 0, NULL);
    assert_non_null(lin);
    *parent = json_integer_value(json_object_get(lin, "parent_trial_id"));
    *epoch = json_integer_value(json_object_get(lin, "parent_epoch"));
    assert_int_equal(*epoch, t->pbt_epoch);
    /* the parent's checkpoint at the boundary: its copy when it went on, or
     * its checkpoint while it waits there */
    char src[API_PATH_MAX], dst[API_PATH_MAX], name[64];
    snprintf(name, sizeof name, "pbt-%lld.safetensors", (long long)*epoch);
    assert_int_equal(api_dir_trial_file(src, dir, *parent, name), 0);
    FILE *f = fopen(src, "rb");
    if (f) fclose(f);
    else assert_int_equal(api_dir_trial_file(src, dir, *parent, "exec-0.safetensors"), 0);
    assert_int_equal(api_dir_trial_file(dst, dir, t->id, "exec-0.safetensors"), 0);
    size_t na, nb;
    char *a = slurp(src, &na), *b = slurp(dst, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    eng_model *ma = load(st, *parent, src), *mb = load(st, t->id, dst);
    assert_int_equal(ma->nparams, mb->nparams);
    assert_memory_equal(ma->params, mb->params, ma->nparams * sizeof(float));
    assert_memory_equal(ma->opt_state, mb->opt_state, ma->nstate * sizeof(float));
    assert_memory_equal(ma->rng.s, mb->rng.s, sizeof ma->rng.s);
    /* the params differ only in the mutable ones (lr, dropout) */
    json_t *before = json_object_get(lin, "params_before"), *after = json_object_get(lin, "params_after");
    assert_true(json_equal(json_object_get(before, "units"), json_object_get(after, "units")));
    assert_true(json_equal(json_object_get(before, "layers"), json_object_get(after, "layers")));
    assert_true(json_equal(json_object_get(before, "optimizer"), json_object_get(after, "optimizer")));
    assert_false(json_equal(before, after));
    printf("  trial %lld bred from trial %lld at epoch %lld: lr %g -> %g, %zu-byte checkpoint identical\n",
           (long long)t->id, (long long)*parent, (long long)*epoch,
           json_number_value(json_object_get(before, "lr")), json_number_value(json_object_get(after, "lr")), na);
    eng_model_free(ma);
    eng_model_free(mb);
    free(a);
    json_decref(lin);
    *n = nb;
    return b;
}

static void test_pbt_population(void **state) {
    (void)state;
    const char *body =
        "{\"name\": \"pbt\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
        " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 300, \"validation_split\": 100},"
        " \"training\": {\"max_epochs\": 4, \"batch_size\": 50},"
        " \"tuner\": {\"algorithm\": \"pbt\", \"seed\": 3, \"max_trials\": 12, \"population_size\": 4,"
        " \"perturbation_interval\": 1, \"quantile\": 0.25, \"resample_probability\": 0.25}}";
    int64_t sid = api_test_create_study(ctx, body);
    int status;
    /* the default mutable parameters: the ones that keep the shapes */
    char url[128];
    snprintf(url, sizeof url, "/api/v1/studies/%lld", (long long)sid);
    json_t *s = call("GET", url, NULL, &status);
    json_t *mut = json_object_get(json_object_get(json_object_get(s, "definition"), "tuner"), "mutable");
    char *text = json_dumps(mut, JSON_COMPACT | JSON_ENCODE_ANY);
    assert_non_null(text);
    printf("  tuner.mutable: %s\n", text);
    assert_string_equal(text, "[\"dropout\",\"lr\"]");
    free(text);
    json_decref(s);
    api_study *st = NULL;
    assert_int_equal(api_study_acquire(ctx, sid, &st), 0);

    atomic_int stop = 0;
    api_job job;
    int runs = 0, bred = 0, started_new = 0, went_on = 0;
    char *copy = NULL;
    size_t copy_n = 0;
    int64_t copy_trial = 0, parent = 0, epoch = 0;
    while (api_jobs_next(ctx, "cpu:0", &job) == 0) {
        assert_true(++runs < 200);
        sto_trial t;
        assert_int_equal(sto_trial_get(db, job.trial_id, &t), 0);
        if (!job.resumed) {
            started_new++;
        } else if (t.lineage && t.last_step < 0) { /* bred, not trained yet */
            bred++;
            if (!copy) {
                copy = check_copy(st, &t, &parent, &epoch, &copy_n);
                copy_trial = t.id;
            }
        }
        /* nothing passes a boundary before the population is complete */
        if (job.resumed) assert_int_equal(started_new, 4);
        /* trial_timeout counts the earlier runs: the scheduler's backstop
         * gets the member's training time so far (a bred trial's: 0) */
        assert_true(job.trained == t.train_seconds);
        if (job.trained > 0) went_on++;
        sto_trial_clear(&t);
        assert_int_equal(api_jobs_run(ctx, &job, "cpu:0", 1, &stop), 0);
        api_jobs_settle(ctx);
    }
    printf("  %d runs, %d trials bred, %d went on from a boundary with their training time\n", runs, bred, went_on);
    assert_true(went_on >= 1);
    assert_int_equal(started_new, 4);
    assert_true(bred >= 1);
    assert_non_null(copy);

    /* the donor's boundary checkpoint is kept and equals the copy (its
     * later epochs replaced its exec-0, not the copy) */
    char path[API_PATH_MAX], name[64];
    snprintf(name, sizeof name, "pbt-%lld.safetensors", (long long)epoch);
    assert_int_equal(api_dir_trial_file(path, dir, parent, name), 0);
    FILE *f = fopen(path, "rb");
    if (f) { /* not pruned yet: the same bytes */
        fclose(f);
        size_t n;
        char *kept = slurp(path, &n);
        assert_int_equal(n, copy_n);
        assert_memory_equal(kept, copy, n);
        free(kept);
    }
    free(copy);

    /* the study completes; the lineage is served; curves start after the boundary */
    snprintf(url, sizeof url, "/api/v1/studies/%lld", (long long)sid);
    s = call("GET", url, NULL, &status);
    assert_string_equal(json_string_value(json_object_get(s, "state")), "complete");
    json_decref(s);
    snprintf(url, sizeof url, "/api/v1/trials/%lld", (long long)copy_trial);
    json_t *tj = call("GET", url, NULL, &status);
    assert_int_equal(status, 200);
    json_t *lin = json_object_get(tj, "lineage");
    assert_true(json_is_object(lin));
    assert_int_equal(json_integer_value(json_object_get(lin, "parent_trial_id")), parent);
    assert_int_equal(json_integer_value(json_object_get(lin, "parent_epoch")), epoch);
    json_t *curves = json_object_get(tj, "curves");
    assert_true(json_array_size(curves) > 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(curves, 0), "epoch")), epoch + 1);
    int64_t replaced = json_integer_value(json_object_get(lin, "replaced_trial_id"));
    json_decref(tj);
    snprintf(url, sizeof url, "/api/v1/trials/%lld", (long long)replaced);
    tj = call("GET", url, NULL, &status);
    assert_string_equal(json_string_value(json_object_get(tj, "state")), "pruned");
    assert_int_equal(json_integer_value(json_object_get(tj, "last_step")), epoch);
    json_decref(tj);
    /* every member trained to max_epochs through its lineage: a complete
     * trial reached epoch 4 */
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    assert_int_equal(sto_trial_counts(db, sid, counts), 0);
    assert_int_equal(counts[STO_TRIAL_COMPLETE], 4);
    assert_int_equal(counts[STO_TRIAL_PRUNED], bred);
    api_study_release(ctx, st);
}

static void test_pbt_definition_errors(void **state) {
    (void)state;
    const char *bad[][2] = {
        {"\"tuner\": {\"algorithm\": \"pbt\", \"max_trials\": 4, \"perturbation_interval\": 4}",
         "tuner.perturbation_interval"},
        {"\"tuner\": {\"algorithm\": \"pbt\", \"max_trials\": 4, \"executions_per_trial\": 2}",
         "tuner.executions_per_trial"},
        {"\"tuner\": {\"algorithm\": \"pbt\", \"max_trials\": 4, \"mutable\": [\"momentum\"]}", "tuner.mutable"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"name\": \"bad\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
                 " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 300, \"validation_split\": 100},"
                 " \"training\": {\"max_epochs\": 4}, %s}",
                 bad[i][0]);
        int status;
        json_t *r = call("POST", "/api/v1/studies", body, &status);
        assert_int_equal(status, 400);
        assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"), "field")), bad[i][1]);
        json_decref(r);
    }
    /* an ask/tell study cannot be pbt */
    int status;
    json_t *r = call("POST", "/api/v1/studies",
                     "{\"name\": \"ext\", \"space\": {\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}},"
                     " \"tuner\": {\"algorithm\": \"pbt\"}}",
                     &status);
    assert_int_equal(status, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"), "field")), "tuner.algorithm");
    json_decref(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pbt_population, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pbt_definition_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
