/* pbt_study.c - benchmark: population-based training against TPE with
 * Hyperband on the CNN template (cnn_template.h) and Fashion-MNIST, at the
 * same epoch budget, through hpod's API. TPE + Hyperband runs first with
 * --trials trials of at most --epochs epochs; the epochs it trained (the
 * sum of its trials' last epochs) set PBT's population: budget / epochs
 * members (at least 2), each line training --epochs epochs, ranked every
 * --interval epochs. Prints each study's best validation accuracy, epochs
 * trained and wall time side by side. No early stopping in either (a
 * member stopping early would end its line).
 *
 *   bench_pbt_study [--trials N] [--epochs E] [--interval I] [--devices SPEC]
 *                   [--precision fp32|mixed_bf16] [--limit L] [--val V] [--seed S]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_hpod.h"
#include "cnn_template.h"
#include "hpo.h"

typedef struct outcome {
    double best, seconds;
    long epochs, trials, bred;
} outcome;

/* Runs one study (tuner: its tuner block, a new reference) to its end. */
static int run(bench_http *c, json_t *tuner, int epochs, const char *precision, int limit, int val, outcome *out) {
    json_t *study = json_pack("{s:s, s:{s:s}, s:o, s:o, s:{s:s, s:i}, s:{s:i, s:i, s:s}, s:o}", "name", "bench-pbt",
                              "objective", "metric", "val_accuracy", "model", json_loads(TEMPLATE, 0, NULL), "space",
                              json_loads(SPACE, 0, NULL), "dataset", "name", "fashion-mnist", "validation_split", val,
                              "training", "max_epochs", epochs, "batch_size", 128, "precision", precision, "tuner",
                              tuner);
    if (limit > 0) json_object_set_new(json_object_get(study, "dataset"), "limit", json_integer(limit));
    char *body = json_dumps(study, JSON_COMPACT), path[128];
    json_decref(study);
    double t0 = hpo_monotonic();
    json_t *j = NULL;
    if (bench_http_post(c, "/api/v1/studies", body, &j) != 201) {
        fprintf(stderr, "bench: study refused: %s\n", bench_http_body(c));
        free(body);
        return 1;
    }
    free(body);
    long id = (long)json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    snprintf(path, sizeof path, "/api/v1/studies/%ld", id);
    for (;;) {
        if (bench_http_get(c, path, &j) != 200) return 1;
        int done = strcmp(json_string_value(json_object_get(j, "state")), "running") != 0;
        json_decref(j);
        if (done) break;
        sleep(1);
    }
    out->seconds = hpo_monotonic() - t0;
    snprintf(path, sizeof path, "/api/v1/studies/%ld/trials?limit=10000", id);
    if (bench_http_get(c, path, &j) != 200) return 1;
    out->best = 0;
    out->epochs = out->trials = out->bred = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(j, "trials"), i, t) {
        json_t *lin = json_object_get(t, "lineage");
        long last = (long)json_integer_value(json_object_get(t, "last_step"));
        long from = json_is_object(lin) ? (long)json_integer_value(json_object_get(lin, "parent_epoch")) : 0;
        out->epochs += last > from ? last - from : 0; /* a bred trial trained from its copy on */
        out->trials++;
        out->bred += json_is_object(lin);
        /* the best epoch's accuracy a trial reached: its value, or for a
         * replaced pbt member its last one (what it was ranked on) */
        double v = json_number_value(json_object_get(t, "value"));
        if (v > out->best) out->best = v;
    }
    json_decref(j);
    return 0;
}

int main(int argc, char **argv) {
    int trials = 8, epochs = 6, interval = 2, limit = 6000, val = 2000, seed = 1;
    const char *devices = "cpu:2", *precision = "mixed_bf16";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--trials")) trials = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs")) epochs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--interval")) interval = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--devices")) devices = argv[i + 1];
        else if (!strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else if (!strcmp(argv[i], "--limit")) limit = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--val")) val = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--trials N] [--epochs E] [--interval I] [--devices SPEC] [--precision P] "
                            "[--limit L] [--val V] [--seed S]\n", argv[0]);
            return 2;
        }
    }
    bench_hpod h;
    const char *extra[] = {"--devices", devices, NULL};
    if (bench_hpod_start(bench_hpod_path(), extra, &h)) return 1;
    bench_http *c = bench_http_new(h.base);
    printf("CNN template, Fashion-MNIST (%d training rows, %d validation), <= %d epochs, %s, slots %s\n", limit,
           val, epochs, precision, devices);
    fflush(stdout);
    outcome tpe, pbt;
    int rc = run(c,
                 json_pack("{s:s, s:i, s:i, s:{s:s, s:i, s:i}}", "algorithm", "tpe", "seed", seed, "max_trials", trials,
                           "pruner", "algorithm", "hyperband", "eta", 3, "min_resource", 1),
                 epochs, precision, limit, val, &tpe);
    int population = rc ? 0 : (int)((tpe.epochs + epochs / 2) / epochs);
    if (population < 2) population = 2;
    if (rc == 0) {
        printf("TPE + Hyperband: %ld trials, %ld epochs, %.0f s; PBT gets a population of %d (%d epochs)\n", tpe.trials,
               tpe.epochs, tpe.seconds, population, population * epochs);
        fflush(stdout);
        rc = run(c,
                 json_pack("{s:s, s:i, s:i, s:i, s:i, s:f}", "algorithm", "pbt", "seed", seed, "max_trials", 1000,
                           "population_size", population, "perturbation_interval", interval, "quantile", 0.25),
                 epochs, precision, limit, val, &pbt);
    }
    if (rc == 0) {
        printf("\n| study | trials | epochs trained | best val accuracy | wall time |\n|---|---|---|---|---|\n");
        printf("| TPE + Hyperband (eta 3) | %ld | %ld | %.4f | %.0f s |\n", tpe.trials, tpe.epochs, tpe.best, tpe.seconds);
        printf("| PBT (population %d, every %d epochs) | %ld (%ld bred) | %ld | %.4f | %.0f s |\n\n", population, interval,
               pbt.trials, pbt.bred, pbt.epochs, pbt.best, pbt.seconds);
        printf("PBT %s TPE + Hyperband's best validation accuracy at %.2fx its epochs\n",
               pbt.best >= tpe.best ? "reaches" : "falls short of", tpe.epochs ? (double)pbt.epochs / tpe.epochs : 0);
    }
    bench_http_free(c);
    bench_hpod_stop(&h);
    return rc;
}
