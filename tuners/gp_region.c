/* gp_region.c - the bayesian sampler's trust-region step (gp_region.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gp_region.h"
#include "keyed_sort.h"

int tun_gp_region_turn(int64_t number, int n_obs, int n_startup) {
    return n_obs >= TUN_GP_REGION_FROM_STARTUPS * n_startup && number % 2 == 1;
}

double tun_gp_region_side(const double *y, int n, int n_startup, int d) {
    double side = TUN_GP_REGION_SIDE_INIT, best = INFINITY;
    int successes = 0, failures = 0, failure_limit = d > 4 ? d : 4;
    for (int i = 0; i < n; i++) {
        if (i >= n_startup) {
            if (y[i] < best - 1e-3 * fabs(best)) {
                successes++;
                failures = 0;
            } else {
                failures++;
                successes = 0;
            }
            if (successes == TUN_GP_REGION_SUCCESSES) {
                side = fmin(2 * side, TUN_GP_REGION_SIDE_MAX);
                successes = 0;
            }
            if (failures == failure_limit) {
                side /= 2;
                failures = 0;
            }
            if (side < TUN_GP_REGION_SIDE_MIN) side = TUN_GP_REGION_SIDE_INIT;
        }
        if (y[i] < best) best = y[i];
    }
    return side;
}

int tun_gp_region_box(const tun_gp_enc *e, const tun_space *s, const double *center, const double *theta,
                      double side, double *lo, double *hi) {
    double x[TUN_MAX_PARAMS], log_sum = 0.0;
    int n_free = 0;
    tun_gp_decode(e, s, center, x);
    for (int k = 0; k < e->d; k++) lo[k] = hi[k] = center[k];
    for (int i = 0; i < s->n; i++)
        if (tun_gp_is_numeric(&s->params[i]) && !isnan(x[i])) {
            log_sum += theta[e->col[i]];
            n_free++;
        }
    if (n_free == 0) return 0;
    double log_mean = log_sum / n_free;
    for (int i = 0; i < s->n; i++) {
        if (!tun_gp_is_numeric(&s->params[i]) || isnan(x[i])) continue;
        int k = e->col[i];
        double half = 0.5 * side * exp(theta[k] - log_mean);
        lo[k] = fmax(0.0, center[k] - half);
        hi[k] = fmin(1.0, center[k] + half);
    }
    return n_free;
}

/* ---- the local model ----------------------------------------------------- */

/* The distance of u from the center in units of the box's half-sides (1 on
 * its border); a point off the center in a held column is never inside. */
static double box_distance(int d, const double *u, const double *center, const double *lo, const double *hi) {
    double dist = 0.0;
    for (int k = 0; k < d; k++) {
        double a = fabs(u[k] - center[k]);
        if (hi[k] > lo[k])
            dist = fmax(dist, a / (0.5 * (hi[k] - lo[k])));
        else if (a > 1e-12)
            dist = fmax(dist, 1e9);
    }
    return dist;
}

/* Fits the local GP on the residuals of the trials in the box (at least the
 * nearest TUN_GP_REGION_POINTS_PER_DIM (d + 1)), conditions it on the
 * running trials; *mean and *std undo its standardisation. */
static int fit_local(const tun_gp_region_in *in, const double *center, const double *lo, const double *hi,
                     hpo_rng *rng, tun_gp *gp, double *mean, double *std) {
    int d = in->e->d, n = in->n_obs, rc = HPO_ENOMEM;
    tun_keyed *order = malloc((size_t)n * sizeof *order);
    double *X = malloc((size_t)n * d * sizeof(double)), *v = malloc((size_t)n * sizeof(double));
    if (!order || !X || !v) goto out;
    int inside = 0;
    for (int i = 0; i < n; i++) {
        order[i] = (tun_keyed){box_distance(d, in->U + (size_t)i * d, center, lo, hi), i};
        inside += order[i].v <= 1.0;
    }
    tun_keyed_sort(order, (size_t)n);
    int m = TUN_GP_REGION_POINTS_PER_DIM * (d + 1);
    if (inside > m) m = inside;
    if (m > n) m = n;
    for (int a = 0; a < m; a++) {
        memcpy(X + (size_t)a * d, in->U + (size_t)order[a].i * d, (size_t)d * sizeof(double));
        v[a] = in->resid[order[a].i];
    }
    tun_gp_standardise(v, m, mean, std);
    if ((rc = tun_gp_init(gp, m, d, X, v)) < 0) goto out;
    double fixed_noise = in->t->cfg.deterministic ? 1e-6 : 0.0;
    if ((rc = tun_gp_fit_subset(gp, rng, fixed_noise, TUN_GP_FIT_MAX_POINTS, TUN_GP_FIT_RESTARTS,
                                TUN_GP_FIT_MAX_EVAL)) < 0 ||
        (in->n_pending > 0 && (rc = tun_gp_condition(gp, in->n_pending, in->U + (size_t)n * d)) < 0)) {
        tun_gp_clear(gp);
        goto out;
    }
    rc = 0;
out:
    free(order);
    free(X);
    free(v);
    return rc;
}

/* ---- the step ------------------------------------------------------------ */

int tun_gp_region_suggest(const tun_gp_region_in *in, hpo_rng *rng, double *x) {
    const tun_space *s = in->t->space;
    int d = in->e->d, n = in->n_obs, best = 0, rc;
    if (n < 1) return 0;
    for (int i = 1; i < n; i++)
        if (in->y[i] < in->y[best]) best = i;
    const double *center = in->U + (size_t)best * d;
    double *lo = malloc(2 * (size_t)d * sizeof(double)), *hi = lo ? lo + d : NULL; /* d may be large */
    if (!lo) return HPO_ENOMEM;
    double side = tun_gp_region_side(in->y, n, in->n_startup, d);
    if (!tun_gp_region_box(in->e, s, center, in->theta, side, lo, hi)) {
        free(lo);
        return 0;
    }

    int m = TUN_GP_REGION_CANDIDATES, gp_ready = 0;
    tun_gp gp;
    double mean, std;
    double *C = malloc((size_t)m * d * sizeof(double)), *mu = malloc((size_t)m * sizeof(double)),
           *var = malloc((size_t)m * sizeof(double));
    tun_gp_cand *cands = malloc((size_t)m * sizeof(tun_gp_cand));
    rc = HPO_ENOMEM;
    if (!C || !mu || !var || !cands) goto out;
    for (int j = 0; j < m; j++) {
        double *c = C + (size_t)j * d;
        for (int k = 0; k < d; k++) c[k] = hi[k] > lo[k] ? lo[k] + (hi[k] - lo[k]) * hpo_rng_uniform(rng) : center[k];
    }
    if ((rc = fit_local(in, center, lo, hi, rng, &gp, &mean, &std)) < 0) goto out;
    gp_ready = 1;
    if ((rc = tun_gp_predict_batch(&gp, m, C, mu, var)) < 0) goto out;
    for (int j = 0; j < m; j++) {
        mu[j] = mean + std * mu[j];
        var[j] *= std * std;
        tun_gp_trend_apply(in->tr, C + (size_t)j * d, &mu[j], &var[j], NULL, NULL);
        cands[j].acq = tun_log_ei(mu[j], var[j], in->y[best], NULL, NULL);
        if (!isfinite(cands[j].acq)) cands[j].acq = -1e300;
        cands[j].idx = j;
    }
    qsort(cands, (size_t)m, sizeof(tun_gp_cand), tun_gp_cmp_cand);
    rc = 0;
    for (int a = 0; a < m && !rc; a++) {
        tun_gp_decode(in->e, s, C + (size_t)cands[a].idx * d, x);
        rc = !tun_gp_already_tried(in->t, x);
    }
out:
    if (gp_ready) tun_gp_clear(&gp);
    free(lo);
    free(C);
    free(mu);
    free(var);
    free(cands);
    return rc;
}
