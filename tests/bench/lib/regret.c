/*
 * regret.c - one tuner run on a box-bounded function and the statistics of
 * the regret benchmarks (regret.h has the design notes).
 */
#include "regret.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpo.h"

int regret_tpe_max_components = 0;
json_t *regret_tuner = NULL;

int regret_run_space(json_t *space_js, regret_space_fn f, void *ctx, double fstar,
                     tun_algorithm algo, uint64_t seed, int startup, int deterministic, int n,
                     double *traj, double *sec) {
    tun_space *space = NULL;
    tun_study *st = NULL;
    hpo_error err = {{0}, {0}};
    double *x = NULL;
    int rc = tun_space_parse(space_js, &space, &err);
    if (rc) {
        fprintf(stderr, "space: %s %s\n", err.field, err.message);
        return rc;
    }
    tun_config cfg;
    tun_config_default(&cfg);
    if (regret_tuner && (rc = tun_config_parse(regret_tuner, space, &cfg, &err))) {
        fprintf(stderr, "--tuner: %s %s\n", err.field, err.message);
        goto fail;
    }
    cfg.algorithm = algo;
    cfg.seed = seed;
    if (startup >= 0) cfg.n_startup_trials = startup;
    cfg.deterministic = deterministic;
    cfg.tpe_max_components = regret_tpe_max_components;
    if ((rc = tun_study_new(space, &cfg, 0, &st)) < 0) goto fail;
    rc = HPO_ENOMEM;
    if (!(x = calloc((size_t)space->n, sizeof *x))) goto fail;
    double best = INFINITY, best_truth = INFINITY, t_sug = 0.0;
    for (int k = 0; k < n; k++) {
        double t0 = hpo_monotonic(), truth;
        if ((rc = tun_study_suggest(st, k, x)) < 0) goto fail;
        t_sug += hpo_monotonic() - t0;
        if ((rc = tun_study_add(st, k, x, TUN_TRIAL_RUNNING, 0.0)) < 0) goto fail;
        double y = f(ctx, space, x, k, &truth);
        if ((rc = tun_study_finish(st, k, TUN_TRIAL_COMPLETE, y)) < 0) goto fail;
        if (y < best) best = y, best_truth = truth;
        traj[k] = best_truth - fstar;
    }
    *sec = t_sug;
    rc = 0;
fail:
    free(x);
    tun_study_free(st);
    tun_space_free(space);
    return rc;
}

/* regret_run's function over x0..x{d-1} */
typedef struct box_fn {
    regret_fn f;
    void *ctx;
    int d;
} box_fn;

static double eval_box(void *ctx, const tun_space *space, const double *x, int k, double *truth) {
    const box_fn *b = ctx;
    double v[REGRET_MAX_DIM];
    (void)k;
    for (int i = 0; i < b->d; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        v[i] = x[tun_space_index(space, name)];
    }
    return *truth = b->f(b->ctx, v);
}

int regret_run(regret_fn f, void *ctx, int d, const double *lo, const double *hi, double fstar,
               tun_algorithm algo, uint64_t seed, int startup, int deterministic, int n,
               double *traj, double *sec) {
    if (d < 1 || d > REGRET_MAX_DIM) return HPO_EINVAL;
    json_t *js = json_object();
    for (int i = 0; i < d; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        json_object_set_new(js, name, json_pack("{s:s, s:f, s:f}", "type", "float", "low", lo[i],
                                                "high", hi[i]));
    }
    box_fn b = {f, ctx, d};
    int rc = regret_run_space(js, eval_box, &b, fstar, algo, seed, startup, deterministic, n,
                              traj, sec);
    json_decref(js);
    return rc;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double regret_percentile(const double *v, int n, double q) {
    double local[REGRET_MAX_SEEDS], *s = n <= REGRET_MAX_SEEDS ? local : malloc((size_t)n * sizeof *s);
    if (!s) return NAN;
    memcpy(s, v, (size_t)n * sizeof(double));
    qsort(s, (size_t)n, sizeof(double), cmp_d);
    double pos = q / 100.0 * (n - 1);
    int i = (int)floor(pos);
    double r = i >= n - 1 ? s[n - 1] : s[i] + (pos - i) * (s[i + 1] - s[i]);
    if (s != local) free(s);
    return r;
}

void regret_cell(char *buf, size_t len, const double *v, int n) {
    if (n <= 0) {
        snprintf(buf, len, "n/a");
        return;
    }
    snprintf(buf, len, "%.3g [%.3g..%.3g]", regret_percentile(v, n, 50),
             regret_percentile(v, n, 25), regret_percentile(v, n, 75));
}

int regret_has(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}
