/*
 * tuner_core.c - what the cheap parts of tuners/ cost as a study grows: the
 * per-ask and per-report work that runs under a study's lock in hpod.
 *
 * - parse: tun_space_parse + tun_config_parse of the ARCHITECTURE.md example.
 * - random: tun_study_suggest with --trials finished trials, on a continuous
 *   space and on a small discrete one (redraws against present trials).
 * - grid: a 10^6-point conditional grid with --trials points used.
 * - median / asha / hyperband: tun_study_report at a rung step with
 *   --trials trials that reported 27 epochs each.
 * - replay: rebuilding a study of --trials trials x 27 reports (add, report
 *   with prune NULL, finish), as hpod does at start.
 * Prints the median and p95 microseconds per call.
 *
 *   bench_tuner_core [--trials 10000] [--reps 200]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpo.h"
#include "rng.h"
#include "tuners.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report_line(const char *what, double *us, int n) {
    qsort(us, (size_t)n, sizeof *us, cmp_d);
    double med = us[n / 2], p95 = us[(int)(0.95 * (n - 1))];
    printf("%-44s median %10.2f us   p95 %10.2f us   (%d calls)\n", what, med, p95, n);
}

static tun_space *parse(const char *text) {
    json_t *j = json_loads(text, 0, NULL);
    tun_space *s = NULL;
    hpo_error err;
    if (!j || tun_space_parse(j, &s, &err)) {
        fprintf(stderr, "bad space: %s\n", j ? err.message : "JSON");
        exit(1);
    }
    json_decref(j);
    return s;
}

static tun_study *study(const tun_space *s, tun_algorithm a, tun_pruner_kind pk) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = a;
    cfg.seed = 1;
    cfg.pruner.kind = pk;
    cfg.pruner.max_resource = 27;
    cfg.pruner.n_startup_trials = 5;
    tun_study *t = NULL;
    if (tun_study_new(s, &cfg, 0, &t)) exit(1);
    return t;
}

static const char *example_space =
    "{\"units\": {\"type\": \"int\", \"low\": 16, \"high\": 512, \"step\": 16},"
    " \"lr\": {\"type\": \"float\", \"low\": 1e-4, \"high\": 1e-2, \"log\": true},"
    " \"optimizer\": {\"type\": \"choice\", \"values\": [\"adam\", \"rmsprop\", \"sgd\"]},"
    " \"momentum\": {\"type\": \"float\", \"low\": 0.0, \"high\": 0.99,"
    "              \"condition\": {\"optimizer\": [\"sgd\"]}}}";

static const char *example_tuner =
    "{\"algorithm\": \"bayesian\", \"max_trials\": 60, \"executions_per_trial\": 2,"
    " \"parallel_trials\": 2, \"seed\": 7, \"pruner\": {\"algorithm\": \"asha\", \"eta\": 3,"
    " \"min_epochs\": 1}}";

/* n trials with 27 reports each of a noisy decreasing curve, all COMPLETE. */
static void fill_history(tun_study *t, const tun_space *s, int n, int finish) {
    double x[64];
    hpo_rng rng;
    hpo_rng_seed(&rng, 99);
    for (int k = 0; k < n; k++) {
        tun_space_sample(s, &rng, x);
        tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN);
        double level = hpo_rng_uniform(&rng);
        for (int e = 1; e <= 27; e++)
            tun_study_report(t, k, e, level + 1.0 / e + 0.01 * hpo_rng_normal(&rng), NULL);
        if (finish) tun_study_finish(t, k, TUN_TRIAL_COMPLETE, level);
    }
}

int main(int argc, char **argv) {
    int trials = 10000, reps = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--trials") && i + 1 < argc)
            trials = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--trials N] [--reps N]\n", argv[0]);
            return 2;
        }
    }
    if (trials < 10 || reps < 10) return 2;
    double *us = hpo_xmalloc((size_t)reps * sizeof *us);
    char label[96];
    double x[64];

    /* parse */
    json_t *tj = json_loads(example_tuner, 0, NULL);
    for (int r = 0; r < reps; r++) {
        double t0 = hpo_monotonic();
        tun_space *s = parse(example_space);
        tun_config cfg;
        if (tun_config_parse(tj, s, &cfg, NULL)) return 1;
        us[r] = 1e6 * (hpo_monotonic() - t0);
        tun_space_free(s);
    }
    json_decref(tj);
    report_line("parse space + tuner (example study)", us, reps);

    /* random, continuous */
    tun_space *s = parse(example_space);
    tun_study *t = study(s, TUN_RANDOM, TUN_PRUNER_NONE);
    fill_history(t, s, trials, 1);
    for (int r = 0; r < reps; r++) {
        double t0 = hpo_monotonic();
        tun_study_suggest(t, trials + r, x);
        us[r] = 1e6 * (hpo_monotonic() - t0);
    }
    snprintf(label, sizeof label, "random suggest, %d trials", trials);
    report_line(label, us, reps);
    tun_study_free(t);

    /* random, discrete: every draw is checked against the history */
    tun_space *sd = parse("{\"a\": {\"type\": \"int\", \"low\": 0, \"high\": 999},"
                          " \"b\": {\"type\": \"int\", \"low\": 0, \"high\": 999}}");
    t = study(sd, TUN_RANDOM, TUN_PRUNER_NONE);
    fill_history(t, sd, trials, 1);
    for (int r = 0; r < reps; r++) {
        double t0 = hpo_monotonic();
        tun_study_suggest(t, trials + r, x);
        us[r] = 1e6 * (hpo_monotonic() - t0);
    }
    snprintf(label, sizeof label, "random suggest, discrete, %d trials", trials);
    report_line(label, us, reps);
    tun_study_free(t);

    /* grid: 10^6 points (a 1000 x 1000 product), `trials` already used */
    t = study(sd, TUN_GRID, TUN_PRUNER_NONE);
    for (int k = 0; k < trials; k++) {
        if (tun_study_suggest(t, k, x)) return 1;
        tun_study_add(t, k, x, TUN_TRIAL_COMPLETE, 0.0);
    }
    for (int r = 0; r < reps; r++) {
        double t0 = hpo_monotonic();
        if (tun_study_suggest(t, trials, x)) return 1;
        us[r] = 1e6 * (hpo_monotonic() - t0);
    }
    snprintf(label, sizeof label, "grid suggest, 10^6 points, %d used", trials);
    report_line(label, us, reps);
    tun_study_free(t);

    /* pruners: report at a rung step (9) of a new running trial */
    static const struct { tun_pruner_kind k; const char *name; } pk[] = {
        {TUN_PRUNER_MEDIAN, "median"}, {TUN_PRUNER_ASHA, "asha"},
        {TUN_PRUNER_HYPERBAND, "hyperband"}};
    for (size_t p = 0; p < HPO_ARRAY_LEN(pk); p++) {
        t = study(s, TUN_RANDOM, pk[p].k);
        fill_history(t, s, trials, 1);
        for (int r = 0; r < reps; r++) {
            int prune;
            tun_study_suggest(t, trials + r, x);
            tun_study_add(t, trials + r, x, TUN_TRIAL_RUNNING, NAN);
            double t0 = hpo_monotonic();
            tun_study_report(t, trials + r, 9, 0.5 + 0.001 * r, &prune);
            us[r] = 1e6 * (hpo_monotonic() - t0);
        }
        snprintf(label, sizeof label, "%s report at step 9, %d trials", pk[p].name, trials);
        report_line(label, us, reps);
        tun_study_free(t);
    }

    /* replay */
    {
        int nrep = reps < 20 ? reps : 20;
        for (int r = 0; r < nrep; r++) {
            double t0 = hpo_monotonic();
            t = study(s, TUN_RANDOM, TUN_PRUNER_ASHA);
            fill_history(t, s, trials, 1);
            us[r] = 1e6 * (hpo_monotonic() - t0);
            tun_study_free(t);
        }
        snprintf(label, sizeof label, "replay %d trials x 27 reports (asha)", trials);
        report_line(label, us, nrep);
    }
    tun_space_free(s);
    tun_space_free(sd);
    free(us);
    return 0;
}
