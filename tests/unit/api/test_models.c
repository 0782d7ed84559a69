/* test_models.c - refits, models and ensembles in-process: an embedded
 * study's jobs run on this thread (api_jobs_next + api_jobs_run, what a
 * worker does), then refits (epochs = ceil(1.2 x best_epoch)), a model from
 * a trial, a weighted ensemble, the weights download (the stored file, byte
 * for byte, loads back), and predict over the api equal to the engine's own
 * predictions on the same rows (max difference printed). */
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
#include <unistd.h>
#include <sys/stat.h>

#include "data.h"
#include "ensemble.h"
#include "api_internal.h"
#include "weights.h"
#include "api/api_testutil.h"

static char dir[64];
static sto_db *db;
static api_ctx *ctx;

static json_t *call(const char *method, const char *path, const char *body, int *status, api_response *keep) {
    return api_test_call_keep(ctx, method, path, body, status, keep);
}

/* Runs every queued job on this thread, as a worker would. */
static int run_jobs(void) {
    static const atomic_int no_stop = API_STOP_NONE;
    int n = 0;
    api_job job;
    while (api_jobs_next(ctx, "cpu:0", &job) == 0) {
        assert_int_equal(api_jobs_run(ctx, &job, "cpu:0", 1, &no_stop), 0);
        n++;
    }
    api_jobs_settle(ctx);
    return n;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) { return remove(path); }

static void test_refit_ensemble_predict(void **state) {
    int status;
    snprintf(dir, sizeof dir, "/tmp/hpo-apimodels-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);

    json_decref(call("POST", "/api/v1/studies",
                     "{\"name\": \"m\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
                     " \"space\": {\"layers\": {\"type\": \"int\", \"low\": 1, \"high\": 1}},"
                     " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 600, \"validation_split\": 300},"
                     " \"training\": {\"max_epochs\": 3, \"batch_size\": 50},"
                     " \"tuner\": {\"algorithm\": \"random\", \"seed\": 4, \"max_trials\": 3}}",
                     &status, NULL));
    assert_int_equal(status, 201);
    assert_int_equal(run_jobs(), 3);
    json_t *s = call("GET", "/api/v1/studies/1", NULL, &status, NULL);
    assert_string_equal(json_string_value(json_object_get(s, "state")), "complete");
    json_decref(s);

    /* refits: epochs = ceil(1.2 x best_epoch) */
    json_t *r = call("POST", "/api/v1/studies/1/refits", "{\"top_n\": 2, \"epochs_factor\": 1.2}", &status, NULL);
    assert_int_equal(status, 201);
    json_t *refits = json_object_get(r, "refits");
    assert_int_equal(json_array_size(refits), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *m = json_array_get(refits, i);
        char path[64];
        snprintf(path, sizeof path, "/api/v1/trials/%lld", json_integer_value(json_object_get(m, "trial_id")));
        json_t *t = call("GET", path, NULL, &status, NULL);
        long long best = json_integer_value(json_object_get(t, "best_epoch"));
        long long epochs = json_integer_value(json_object_get(json_object_get(m, "how"), "epochs"));
        printf("trial %lld: best_epoch %lld -> refit epochs %lld\n", json_integer_value(json_object_get(t, "id")), best,
               epochs);
        assert_true(best >= 1 && best <= 3);
        assert_int_equal(epochs, (long long)ceil(1.2 * (double)best));
        json_decref(t);
    }
    long long refit_id = json_integer_value(json_object_get(json_array_get(refits, 0), "id"));
    long long best_trial = json_integer_value(json_object_get(json_array_get(refits, 0), "trial_id"));
    json_decref(r);

    char path[128], body[256];
    snprintf(path, sizeof path, "/api/v1/trials/%lld/model", best_trial);
    json_t *tm = call("POST", path, NULL, &status, NULL);
    assert_int_equal(status, 201);
    long long trial_model = json_integer_value(json_object_get(tm, "id"));
    json_decref(tm);
    /* a model job that completes ends a disk-full back-off (a workload of
     * model jobs only would otherwise wait through every back-off) */
    static const atomic_int no_stop = API_STOP_NONE;
    api_job job, job_waits;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job), 0);
    api_disk_full(ctx);
    assert_true(api_disk_wait(ctx) > 0);
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &job_waits), HPO_ENOTFOUND);
    assert_int_equal(api_jobs_run(ctx, &job, "cpu:0", 1, &no_stop), 0);
    assert_true(api_disk_wait(ctx) == 0);
    assert_int_equal(run_jobs(), 2);

    snprintf(path, sizeof path, "/api/v1/models/%lld", refit_id);
    json_t *m = call("GET", path, NULL, &status, NULL);
    assert_string_equal(json_string_value(json_object_get(m, "state")), "complete");
    json_t *test = json_object_get(json_object_get(m, "result"), "test");
    printf("refit %lld: test accuracy %.4f over %lld rows\n", refit_id,
           json_number_value(json_object_get(test, "accuracy")),
           json_integer_value(json_object_get(json_object_get(m, "result"), "test_rows")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "result"), "test_rows")), 10000);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "result"), "train_rows")), 900);
    json_decref(m);

    /* weights: the download is the stored file (sent from disk, whole),
     * and it loads back */
    api_response keep;
    snprintf(path, sizeof path, "/api/v1/models/%lld/weights", refit_id);
    json_decref(call("GET", path, NULL, &status, &keep));
    assert_int_equal(status, 200);
    assert_true(keep.has_file);
    char file[256];
    snprintf(file, sizeof file, "%s/models/model-%lld.safetensors", dir, refit_id);
    FILE *f = fopen(file, "rb");
    assert_non_null(f);
    char *disk = malloc(keep.file_len + 1), *sent = malloc(keep.file_len + 1);
    assert_int_equal(fread(disk, 1, keep.file_len + 1, f), keep.file_len);
    fclose(f);
    assert_int_equal(pread(keep.file_fd, sent, keep.file_len + 1, 0), (ssize_t)keep.file_len);
    assert_memory_equal(disk, sent, keep.file_len);
    free(disk);
    free(sent);
    api_response_clear(&keep);
    eng_model *engine = NULL;
    hpo_error err;
    assert_int_equal(eng_model_new_from_weights(file, &engine, NULL, &err), 0);

    /* predict over the api == the engine's own predictions, on 7 test rows */
    eng_dataset *ds;
    assert_int_equal(eng_dataset_cache_get("fashion-mnist", "test", &ds, &err), 0);
    eng_split rows;
    assert_int_equal(eng_split_all(ds, &rows), 0);
    rows.n = 7;
    float want[7 * 10];
    assert_int_equal(eng_predict_split(engine, &rows, 7, want, &err), 0);
    json_t *inputs = json_array();
    for (int i = 0; i < 7; i++) {
        json_t *row = json_array();
        for (size_t k = 0; k < ds->sample_size; k++)
            json_array_append_new(row, json_integer(((const uint8_t *)ds->x)[(size_t)i * ds->sample_size + k]));
        json_array_append_new(inputs, row);
    }
    json_t *reqj = json_pack("{s:o}", "inputs", inputs);
    char *req = json_dumps(reqj, JSON_COMPACT);
    json_decref(reqj);
    snprintf(path, sizeof path, "/api/v1/models/%lld/predict", refit_id);
    json_t *p = call("POST", path, req, &status, NULL);
    assert_int_equal(status, 200);
    double maxdiff = 0;
    for (int i = 0; i < 7; i++)
        for (int k = 0; k < 10; k++) {
            double got = json_number_value(json_array_get(json_array_get(json_object_get(p, "predictions"), i), k));
            maxdiff = fmax(maxdiff, fabs(got - want[i * 10 + k]));
        }
    printf("predict over the api vs the engine: max |diff| = %g over 7 x 10 probabilities\n", maxdiff);
    assert_true(maxdiff == 0);
    json_decref(p);

    /* a weighted ensemble of the two refits and the trial model */
    snprintf(body, sizeof body, "{\"members\": [%lld, %lld, %lld], \"method\": \"weighted\"}", refit_id, refit_id + 1,
             trial_model);
    json_t *e = call("POST", "/api/v1/studies/1/ensembles", body, &status, NULL);
    assert_int_equal(status, 201);
    long long ens = json_integer_value(json_object_get(e, "id"));
    json_decref(e);
    assert_int_equal(run_jobs(), 1);
    snprintf(path, sizeof path, "/api/v1/models/%lld", ens);
    e = call("GET", path, NULL, &status, NULL);
    json_t *res = json_object_get(e, "result");
    assert_string_equal(json_string_value(json_object_get(e, "state")), "complete");
    double wsum = 0;
    size_t i;
    json_t *mem;
    json_array_foreach(json_object_get(res, "members"), i, mem) {
        double w = json_number_value(json_object_get(mem, "weight"));
        printf("member %zu: weight %.4f, val acc %.4f, test acc %.4f\n", i, w,
               json_number_value(json_object_get(json_object_get(mem, "val"), "accuracy")),
               json_number_value(json_object_get(json_object_get(mem, "test"), "accuracy")));
        assert_true(w >= 0);
        wsum += w;
    }
    printf("ensemble: val acc %.4f, test acc %.4f\n",
           json_number_value(json_object_get(json_object_get(res, "val"), "accuracy")),
           json_number_value(json_object_get(json_object_get(res, "test"), "accuracy")));
    assert_true(fabs(wsum - 1) < 1e-9);
    /* the ensemble predicts the weighted sum of its members */
    snprintf(path, sizeof path, "/api/v1/models/%lld/predict", ens);
    p = call("POST", path, req, &status, NULL);
    assert_int_equal(status, 200);
    assert_int_equal(json_array_size(json_object_get(p, "predictions")), 7);
    json_decref(p);
    snprintf(path, sizeof path, "/api/v1/models/%lld/weights", ens);
    json_decref(call("GET", path, NULL, &status, NULL));
    assert_int_equal(status, 409);
    json_decref(e);
    free(req);

    eng_split_clear(&rows);
    eng_dataset_release(ds);
    eng_model_free(engine);
    api_ctx_free(ctx);
    sto_close(db);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_refit_ensemble_predict)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
