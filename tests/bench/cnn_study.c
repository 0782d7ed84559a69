/* cnn_study.c - benchmark: the whole KerasTuner workflow on Fashion-MNIST
 * with a CNN, through hpod's API, timed: a search over a conv template
 * (filters, units, dropout, learning rate as hyperparameters; TPE with
 * Hyperband), best-epoch refits of the top N on train+validation, and a
 * weighted ensemble of the refits. Prints every member's and the ensemble's
 * test accuracy and the wall time of each phase (goal: >= 91.5% test
 * accuracy within 30 minutes on 2 cores).
 *
 *   bench_cnn_study [--trials N] [--epochs E] [--top N] [--devices SPEC]
 *                   [--precision fp32|mixed_bf16] [--limit L] [--seed S]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_hpod.h"
#include "cnn_template.h"
#include "hpo.h"

/* Polls GET path until its "state" is not one of the running ones. */
static json_t *wait_state(bench_http *c, const char *path) {
    for (;;) {
        json_t *j = NULL;
        if (bench_http_get(c, path, &j) != 200) return NULL;
        const char *s = json_string_value(json_object_get(j, "state"));
        if (s && strcmp(s, "running") && strcmp(s, "queued")) return j;
        json_decref(j);
        sleep(1);
    }
}

int main(int argc, char **argv) {
    int trials = 8, epochs = 10, top = 4, limit = 0, seed = 0;
    const char *devices = "cpu:2", *precision = "mixed_bf16";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--trials")) trials = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs")) epochs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--top")) top = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--devices")) devices = argv[i + 1];
        else if (!strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else if (!strcmp(argv[i], "--limit")) limit = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--trials N] [--epochs E] [--top N] [--devices SPEC] [--precision P] "
                            "[--limit L] [--seed S]\n", argv[0]);
            return 2;
        }
    }
    bench_hpod h;
    const char *extra[] = {"--devices", devices, NULL};
    if (bench_hpod_start(bench_hpod_path(), extra, &h)) return 1;
    bench_http *c = bench_http_new(h.base);
    json_t *study = json_pack("{s:s, s:{s:s}, s:o, s:o, s:{s:s, s:i}, s:{s:i, s:i, s:s, s:{s:s, s:i}},"
                              " s:{s:s, s:i, s:i, s:{s:s, s:i, s:i}}}",
                              "name", "bench-cnn", "objective", "metric", "val_accuracy", "model",
                              json_loads(TEMPLATE, 0, NULL), "space", json_loads(SPACE, 0, NULL), "dataset", "name",
                              "fashion-mnist", "validation_split", 10000, "training", "max_epochs", epochs,
                              "batch_size", 128, "precision", precision, "early_stopping", "monitor", "val_accuracy",
                              "patience", 3, "tuner", "algorithm", "tpe", "seed", seed, "max_trials", trials, "pruner",
                              "algorithm", "hyperband", "eta", 3, "min_resource", 1);
    if (limit > 0) json_object_set_new(json_object_get(study, "dataset"), "limit", json_integer(limit));
    char *body = json_dumps(study, JSON_COMPACT);
    json_decref(study);
    printf("CNN workflow: %d trials, <= %d epochs, TPE + Hyperband, %s, slots %s, refit top %d, weighted ensemble\n",
           trials, epochs, precision, devices, top);
    fflush(stdout);
    double t0 = hpo_monotonic();
    json_t *j = NULL;
    if (bench_http_post(c, "/api/v1/studies", body, &j) != 201) {
        fprintf(stderr, "bench: study refused: %s\n", bench_http_body(c));
        return 1;
    }
    free(body);
    long id = (long)json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/api/v1/studies/%ld", id);
    json_decref(wait_state(c, path));
    double t_search = hpo_monotonic() - t0;
    snprintf(path, sizeof path, "/api/v1/studies/%ld/best?top_n=1", id);
    bench_http_get(c, path, &j);
    json_t *b = json_array_get(json_object_get(j, "trials"), 0);
    printf("search: %.0f s, best val acc %.4f, params %s\n", t_search, json_number_value(json_object_get(b, "value")),
           json_dumps(json_object_get(b, "params"), JSON_COMPACT | JSON_REAL_PRECISION(3)));
    json_decref(j);
    fflush(stdout);

    char req[64];
    snprintf(req, sizeof req, "{\"top_n\": %d}", top);
    snprintf(path, sizeof path, "/api/v1/studies/%ld/refits", id);
    if (bench_http_post(c, path, req, &j) != 201) {
        fprintf(stderr, "bench: refits refused: %s\n", bench_http_body(c));
        return 1;
    }
    json_t *members = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(j, "refits"), i, r) {
        json_array_append_new(members, json_incref(json_object_get(r, "id")));
        snprintf(path, sizeof path, "/api/v1/models/%lld", json_integer_value(json_object_get(r, "id")));
        json_decref(wait_state(c, path));
    }
    json_decref(j);
    double t_refit = hpo_monotonic() - t0 - t_search;
    printf("refits: %.0f s\n", t_refit);
    char *ens = json_dumps(json_pack("{s:o, s:s}", "members", members, "method", "weighted"), JSON_COMPACT);
    snprintf(path, sizeof path, "/api/v1/studies/%ld/ensembles", id);
    if (bench_http_post(c, path, ens, &j) != 201) {
        fprintf(stderr, "bench: ensemble refused: %s\n", bench_http_body(c));
        return 1;
    }
    snprintf(path, sizeof path, "/api/v1/models/%lld", json_integer_value(json_object_get(j, "id")));
    json_decref(j);
    json_t *e = wait_state(c, path);
    double total = hpo_monotonic() - t0;
    json_t *res = json_object_get(e, "result");
    printf("\n| model | weight | val acc (search-phase) | test acc |\n|---|---|---|---|\n");
    json_array_foreach(json_object_get(res, "members"), i, r) {
        printf("| refit %lld (trial %lld) | %.3f | %.4f | %.4f |\n", json_integer_value(json_object_get(r, "model_id")),
               json_integer_value(json_object_get(r, "trial_id")), json_number_value(json_object_get(r, "weight")),
               json_number_value(json_object_get(json_object_get(r, "val"), "accuracy")),
               json_number_value(json_object_get(json_object_get(r, "test"), "accuracy")));
    }
    double acc = json_number_value(json_object_get(json_object_get(res, "test"), "accuracy"));
    printf("| weighted ensemble | | %.4f | %.4f |\n\n", json_number_value(json_object_get(json_object_get(res, "val"), "accuracy")),
           acc);
    printf("total %.0f s (search %.0f, refits %.0f, ensemble %.0f): ensemble test accuracy %.4f "
           "(goal: >= 0.915 within 1800 s)\n", total, t_search, t_refit, total - t_search - t_refit, acc);
    json_decref(e);
    free(ens);
    bench_http_free(c);
    bench_hpod_stop(&h);
    return 0;
}
