/*
 * tuner_latency.c - how long one suggestion takes, through tun_study_suggest.
 *
 * - "bayesian": 10 float dimensions (two on a log scale), a history of 200
 *   finished trials (random configurations, a smooth multimodal objective),
 *   then --reps suggestions for the next trial numbers (the history does not
 *   change, so each one refits the GP and maximises the acquisition anew);
 *   once more with 4 of the trials still running (kriging believer).
 * - "tpe": a mixed 8-parameter space (floats, a log float, ints, a stepped
 *   int, a choice, a bool and a float conditional on the choice), histories
 *   of --tpe-trials finished trials (a list: 100,1000,10000,100000), as an
 *   ask/tell loop of --reps rounds: suggest, record the trial running
 *   (tun_study_add), tell it complete (tun_study_finish); once more with 4
 *   trials running throughout (the constant liar). Beside the suggestion
 *   it prints the add and the tell in microseconds, the load of the study
 *   from the stored history (the N adds hpod does when it opens a study)
 *   and the first suggestion after the load (what a sampler builds once),
 *   those two in CPU time. The same on the 10 floats of "bayesian" (a
 *   space of continuous floats: tpe's joint model with EI weights).
 * Prints median, p95 and p99 milliseconds per suggestion, wall clock, and
 * the median and p99 CPU time of this process (the machines are shared and
 * noisy: CPU time is what a suggestion costs when they are). BLAS
 * threads are whatever the environment says: run with OPENBLAS_NUM_THREADS=1
 * (the GP's matrices are at most a few hundred rows).
 *
 *   bench_tuner_latency [--reps 30] [--gp-trials 200 | --no-gp]
 *                       [--tpe-trials 1000[,10000,...]]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpo.h"
#include "rng.h"
#include "tuners.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    double pos = q * (n - 1);
    int i = (int)floor(pos);
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* any numeric value of an active parameter, NaN ignored */
static double objective(const tun_space *s, const double *x) {
    double f = 0.0;
    for (int i = 0; i < s->n; i++) {
        if (isnan(x[i])) continue;
        const tun_param *p = &s->params[i];
        double u = p->type == TUN_CHOICE || p->type == TUN_BOOL
                       ? x[i] / (p->n_choices > 1 ? p->n_choices - 1 : 1)
                       : (x[i] - p->low) / (p->high - p->low);
        f += sin(5.0 * u + i) + (u - 0.3) * (u - 0.3);
    }
    return f;
}

static int load_space(const char *label, const char *space_json, tun_space **s) {
    json_error_t jerr;
    hpo_error err = {{0}, {0}};
    json_t *js = json_loads(space_json, 0, &jerr);
    int rc = js ? tun_space_parse(js, s, &err) : HPO_EINVAL;
    json_decref(js);
    if (rc < 0) fprintf(stderr, "%s: space: %s %s\n", label, err.field, err.message);
    return rc;
}

/* A study with n_hist finished trials (random configurations, the
 * objective above) and n_pending running ones, added as hpod replays a
 * stored history; *load_ms: how long the adds took. */
static int history(const tun_space *s, tun_algorithm algo, int n_hist, int n_pending,
                   tun_study **out, double *load_ms) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = algo;
    cfg.seed = 1;
    tun_study *st = NULL;
    int rc = tun_study_new(s, &cfg, 0, &st);
    if (rc < 0) return rc;
    double x[64];
    hpo_rng r;
    hpo_rng_seed(&r, 42);
    double t0 = cpu_seconds();
    for (int k = 0; k < n_hist + n_pending; k++) {
        tun_space_sample(s, &r, x);
        int running = k >= n_hist;
        if ((rc = tun_study_add(st, k, x, running ? TUN_TRIAL_RUNNING : TUN_TRIAL_COMPLETE,
                                objective(s, x))) < 0) {
            tun_study_free(st);
            return rc;
        }
    }
    if (load_ms) *load_ms = 1e3 * (cpu_seconds() - t0);
    *out = st;
    return 0;
}

/* The GP: --reps suggestions for the next trial numbers on an unchanged
 * history (each refits the GP and maximises the acquisition anew). */
static int measure(const char *label, const char *space_json, tun_algorithm algo,
                   int n_hist, int n_pending, int reps) {
    tun_space *s = NULL;
    tun_study *st = NULL;
    double *ms = calloc((size_t)reps, sizeof(double));
    double *cpu = calloc((size_t)reps, sizeof(double));
    int rc = load_space(label, space_json, &s);
    if (rc < 0 || !ms || !cpu) goto fail;
    if ((rc = history(s, algo, n_hist, n_pending, &st, NULL)) < 0) goto fail;
    double x[64];
    for (int k = 0; k < reps; k++) {
        double t0 = hpo_monotonic(), c0 = cpu_seconds();
        if ((rc = tun_study_suggest(st, n_hist + n_pending + k, x)) < 0) goto fail;
        ms[k] = 1e3 * (hpo_monotonic() - t0);
        cpu[k] = 1e3 * (cpu_seconds() - c0);
    }
    double med = quantile(ms, reps, 0.5), p95 = quantile(ms, reps, 0.95),
           p99 = quantile(ms, reps, 0.99);
    double cmed = quantile(cpu, reps, 0.5), cp99 = quantile(cpu, reps, 0.99);
    printf("  %-44s %8.2f %8.2f %8.2f   %8.2f %8.2f   %d\n", label, med, p95, p99, cmed, cp99,
           reps);
fail:
    if (rc < 0) fprintf(stderr, "%s: %s\n", label, hpo_strerror(rc));
    tun_study_free(st);
    tun_space_free(s);
    free(ms);
    free(cpu);
    return rc;
}

/* TPE as an ask/tell loop on a history of n_hist finished trials (and
 * n_pending running ones that stay running): each round suggests (timed),
 * records the trial running (tun_study_add, the ask's record) and tells it
 * complete (tun_study_finish, timed), so every suggestion sees a history
 * one trial longer, as in a live study. Also prints the cost of building
 * the study from the stored history (the adds) and of the first suggestion
 * after it (whatever the sampler builds once). */
static int measure_tpe(const char *what, const char *space_json, int n_hist, int n_pending,
                       int reps) {
    char label[96];
    snprintf(label, sizeof label, "tpe, %s, %d finished%s", what, n_hist,
             n_pending ? " + 4 running" : "");
    tun_space *s = NULL;
    tun_study *st = NULL;
    double *ms = calloc((size_t)reps, sizeof(double));
    double *cpu = calloc((size_t)reps, sizeof(double));
    double *tell = calloc((size_t)reps, sizeof(double));
    double *add = calloc((size_t)reps, sizeof(double));
    double load_ms = 0.0, first_ms = 0.0, x[64];
    int rc = load_space(label, space_json, &s);
    if (rc < 0 || !ms || !cpu || !tell || !add) goto fail;
    if ((rc = history(s, TUN_TPE, n_hist, n_pending, &st, &load_ms)) < 0) goto fail;
    int64_t next = n_hist + n_pending;
    double t0 = cpu_seconds();
    if ((rc = tun_study_suggest(st, next, x)) < 0) goto fail;
    first_ms = 1e3 * (cpu_seconds() - t0);
    for (int k = 0; k < reps; k++, next++) {
        double c0 = cpu_seconds();
        t0 = hpo_monotonic();
        if ((rc = tun_study_suggest(st, next, x)) < 0) goto fail;
        ms[k] = 1e3 * (hpo_monotonic() - t0);
        cpu[k] = 1e3 * (cpu_seconds() - c0);
        t0 = hpo_monotonic();
        if ((rc = tun_study_add(st, next, x, TUN_TRIAL_RUNNING, 0.0)) < 0) goto fail;
        add[k] = 1e6 * (hpo_monotonic() - t0);
        t0 = hpo_monotonic();
        if ((rc = tun_study_finish(st, next, TUN_TRIAL_COMPLETE, objective(s, x))) < 0) goto fail;
        tell[k] = 1e6 * (hpo_monotonic() - t0);
    }
    printf("  %-44s %8.2f %8.2f %8.2f   %8.2f %8.2f   %d\n", label, quantile(ms, reps, 0.5),
           quantile(ms, reps, 0.95), quantile(ms, reps, 0.99), quantile(cpu, reps, 0.5),
           quantile(cpu, reps, 0.99), reps);
    if (!n_pending)
        printf("  %-44s add %.2f/%.2f us, finish %.2f/%.2f us (median/p99); cpu: load %d trials"
               " %.1f ms, first suggestion %.1f ms\n", "", quantile(add, reps, 0.5),
               quantile(add, reps, 0.99), quantile(tell, reps, 0.5), quantile(tell, reps, 0.99),
               n_hist, load_ms, first_ms);
fail:
    if (rc < 0) fprintf(stderr, "%s: %s\n", label, hpo_strerror(rc));
    tun_study_free(st);
    tun_space_free(s);
    free(ms);
    free(cpu);
    free(tell);
    free(add);
    return rc;
}

static const char *gp_space =
    "{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
    "\"b\":{\"type\":\"float\",\"low\":-5,\"high\":5},"
    "\"c\":{\"type\":\"float\",\"low\":1e-5,\"high\":1,\"log\":true},"
    "\"d\":{\"type\":\"float\",\"low\":0,\"high\":10},"
    "\"e\":{\"type\":\"float\",\"low\":1,\"high\":1000,\"log\":true},"
    "\"f\":{\"type\":\"float\",\"low\":0,\"high\":1},"
    "\"g\":{\"type\":\"float\",\"low\":0,\"high\":1},"
    "\"h\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
    "\"i\":{\"type\":\"float\",\"low\":0,\"high\":100},"
    "\"j\":{\"type\":\"float\",\"low\":0,\"high\":1}}";

static const char *tpe_space =
    "{\"lr\":{\"type\":\"float\",\"low\":1e-5,\"high\":1e-1,\"log\":true},"
    "\"dropout\":{\"type\":\"float\",\"low\":0,\"high\":0.5},"
    "\"wd\":{\"type\":\"float\",\"low\":0,\"high\":0.1},"
    "\"layers\":{\"type\":\"int\",\"low\":1,\"high\":6},"
    "\"units\":{\"type\":\"int\",\"low\":16,\"high\":512,\"step\":16},"
    "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\",\"rmsprop\",\"adagrad\"]},"
    "\"bn\":{\"type\":\"bool\"},"
    "\"momentum\":{\"type\":\"float\",\"low\":0,\"high\":0.99,"
    "\"condition\":{\"opt\":[\"sgd\"]}}}";

int main(int argc, char **argv) {
    int reps = 30, gp_trials = 200, n_tpe = 0, tpe_trials[16];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--gp-trials") && i + 1 < argc) {
            gp_trials = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--tpe-trials") && i + 1 < argc) {
            /* a comma-separated list of history sizes */
            for (char *p = argv[++i], *end; *p && n_tpe < 16; p = *end ? end + 1 : end) {
                long v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > 5000000 || (*end && *end != ',')) {
                    fprintf(stderr, "--tpe-trials: a list of sizes 1..5000000 (100,1000)\n");
                    return 2;
                }
                tpe_trials[n_tpe++] = (int)v;
            }
        } else if (!strcmp(argv[i], "--no-gp")) {
            gp_trials = 0;
        } else {
            fprintf(stderr, "usage: %s [--reps N] [--gp-trials N] [--no-gp] "
                            "[--tpe-trials N[,N...]]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (!n_tpe) tpe_trials[n_tpe++] = 1000;
    const char *bt = getenv("OPENBLAS_NUM_THREADS");
    printf("suggestion latency in ms (OPENBLAS_NUM_THREADS=%s); wall clock, and this\n"
           "process's CPU time (what a suggestion costs when the machine is shared)\n",
           bt ? bt : "unset");
    printf("  %-44s %8s %8s %8s   %8s %8s   %s\n", "", "median", "p95", "p99", "cpu med",
           "cpu p99", "n");
    char label[96];
    if (gp_trials > 0) {
        snprintf(label, sizeof label, "bayesian, 10 dims, %d finished", gp_trials);
        if (measure(label, gp_space, TUN_BAYESIAN, gp_trials, 0, reps) < 0) return 1;
        snprintf(label, sizeof label, "bayesian, 10 dims, %d finished + 4 running", gp_trials);
        if (measure(label, gp_space, TUN_BAYESIAN, gp_trials, 4, reps) < 0) return 1;
    }
    for (int i = 0; i < n_tpe; i++) {
        if (measure_tpe("8 mixed params", tpe_space, tpe_trials[i], 0, reps) < 0) return 1;
        if (measure_tpe("8 mixed params", tpe_space, tpe_trials[i], 4, reps) < 0) return 1;
        /* all floats: the joint model with EI weights (tpe.c's other regime) */
        if (measure_tpe("10 floats", gp_space, tpe_trials[i], 0, reps) < 0) return 1;
        if (measure_tpe("10 floats", gp_space, tpe_trials[i], 4, reps) < 0) return 1;
    }
    return 0;
}
