/* gp_model.c - Matern-5/2 GP: kernel, marginal likelihood, fit, posterior,
 * log EI (see gp_model.h). */
#include "gp_model.h"

#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <nlopt.h>
#include <stdlib.h>
#include <string.h>

#define SQRT5 2.23606797749978969640
#define LOG_2PI 1.83787706640934548356
#define NOISE_RATE 200.0 /* Gamma(1.1, NOISE_RATE) prior on the noise variance */

/* ---- kernel ------------------------------------------------------------ */

static double m52(double r) { return (1.0 + SQRT5 * r + (5.0 / 3.0) * r * r) * exp(-SQRT5 * r); }

/* (5/3)(1 + sqrt5 r) exp(-sqrt5 r): -dm52/dr / r, finite at r = 0. */
static double m52_dr_over_r(double r) { return (5.0 / 3.0) * (1.0 + SQRT5 * r) * exp(-SQRT5 * r); }

/* Squared scaled distance with inverse squared lengthscales il2. */
static double dist2(int d, const double *il2, const double *a, const double *b) {
    double s = 0.0;
    for (int k = 0; k < d; k++) {
        double t = a[k] - b[k];
        s += t * t * il2[k];
    }
    return s;
}

double tun_gp_kernel(int d, const double *theta, const double *a, const double *b) {
    double s = 0.0;
    for (int k = 0; k < d; k++) {
        double t = (a[k] - b[k]) / exp(theta[k]);
        s += t * t;
    }
    return exp(theta[d]) * m52(sqrt(s));
}

static void inv_l2(int d, const double *theta, double *il2) {
    for (int k = 0; k < d; k++) il2[k] = exp(-2.0 * theta[k]);
}

void tun_gp_kernel_matrix(int n, int d, const double *X, const double *theta, double *K) {
    double *il2 = hpo_xmalloc((size_t)(d > 0 ? d : 1) * sizeof(double)); /* d may be large: not on the stack */
    inv_l2(d, theta, il2);
    double s2 = exp(theta[d]);
    for (int j = 0; j < n; j++) {
        K[(size_t)j * n + j] = s2;
        for (int i = j + 1; i < n; i++) {
            double r = sqrt(dist2(d, il2, X + (size_t)i * d, X + (size_t)j * d));
            double v = s2 * m52(r);
            K[(size_t)j * n + i] = v;
            K[(size_t)i * n + j] = v;
        }
    }
    free(il2);
}

/* K + (noise + jitter) I factorised into A (lower); tries growing jitter.
 * Rows from n_data on are fantasies (kriging believer): they get a noise of
 * 1e-8 s2 only, so the posterior variance at a pending point collapses and
 * a parallel asker is steered elsewhere, whatever the fitted noise. */
static int factorise(int n, int n_data, int d, const double *X, const double *theta, double *A) {
    double noise = exp(theta[d + 1]), s2 = exp(theta[d]);
    static const double jitter[] = {0.0, 1e-10, 1e-8, 1e-6, 1e-4};
    for (size_t t = 0; t < HPO_ARRAY_LEN(jitter); t++) {
        tun_gp_kernel_matrix(n, d, X, theta, A);
        for (int i = 0; i < n; i++)
            A[(size_t)i * n + i] += (i < n_data ? noise : 1e-8 * s2) + jitter[t] * s2;
        if (LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', n, A, n) == 0) return 0;
    }
    return HPO_EINVAL;
}

/* ---- init -------------------------------------------------------------- */

int tun_gp_init(tun_gp *gp, int n, int d, const double *X, const double *y) {
    if (n < 1 || d < 1 || !X || !y) return HPO_EINVAL;
    memset(gp, 0, sizeof *gp);
    gp->n = gp->n_data = n;
    gp->d = d;
    gp->X = malloc((size_t)n * d * sizeof(double));
    gp->y = malloc((size_t)n * sizeof(double));
    gp->theta = malloc((size_t)(d + 2) * sizeof(double));
    gp->L = malloc((size_t)n * n * sizeof(double));
    gp->alpha = malloc((size_t)n * sizeof(double));
    if (!gp->X || !gp->y || !gp->theta || !gp->L || !gp->alpha) {
        tun_gp_clear(gp);
        return HPO_ENOMEM;
    }
    memcpy(gp->X, X, (size_t)n * d * sizeof(double));
    memcpy(gp->y, y, (size_t)n * sizeof(double));
    gp->y_best = INFINITY;
    for (int i = 0; i < n; i++)
        if (y[i] < gp->y_best) gp->y_best = y[i];
    for (int k = 0; k < d; k++) gp->theta[k] = log(0.5);
    gp->theta[d] = 0.0;
    gp->theta[d + 1] = log(1e-4);
    return 0;
}

void tun_gp_clear(tun_gp *gp) {
    if (!gp) return;
    free(gp->X);
    free(gp->y);
    free(gp->theta);
    free(gp->L);
    free(gp->alpha);
    memset(gp, 0, sizeof *gp);
}

void tun_gp_standardise(double *v, int n, double *mean, double *std) {
    /* values beyond 2^500 (told values near DBL_MAX) are scaled down by a
     * power of two first, exactly, so that neither the sum nor the squares
     * overflow; the standardised values are the same, mean and std are
     * given back in the values' units (std may then be inf) */
    double big = 0.0;
    for (int i = 0; i < n; i++) big = fmax(big, fabs(v[i]));
    int e = 0;
    if (big > 0x1p500) frexp(big, &e);
    double m = 0.0, s = 0.0;
    for (int i = 0; i < n; i++) m += ldexp(v[i], -e);
    m = n > 0 ? m / n : 0.0;
    for (int i = 0; i < n; i++) s += (ldexp(v[i], -e) - m) * (ldexp(v[i], -e) - m);
    s = n > 1 ? sqrt(s / (n - 1)) : 0.0;
    if (!(s > 1e-12 * (fabs(m) + 1.0))) s = 1.0;
    for (int i = 0; i < n; i++) v[i] = (ldexp(v[i], -e) - m) / s;
    if (mean) *mean = ldexp(m, e);
    if (std) *std = ldexp(s, e);
}

/* ---- marginal likelihood ---------------------------------------------- */

/* Log prior and its gradient (added into grad). */
static double log_prior(int d, const double *theta, double *grad) {
    double lp = 0.0;
    for (int k = 0; k < d; k++) {
        double lam = exp(-2.0 * theta[k]);
        lp -= 0.1 / lam + 0.1 * lam;
        if (grad) grad[k] += -0.2 / lam + 0.2 * lam;
    }
    double s2 = exp(theta[d]), nv = exp(theta[d + 1]);
    lp += (2.0 - 1.0) * theta[d] - 1.0 * s2; /* Gamma(2, 1) */
    lp += (1.1 - 1.0) * theta[d + 1] - NOISE_RATE * nv;
    if (grad) {
        grad[d] += 1.0 - s2;
        grad[d + 1] += 0.1 - NOISE_RATE * nv;
    }
    return lp;
}

int tun_gp_lml(const tun_gp *gp, const double *theta, int with_prior, double *lml,
               double *grad) {
    int n = gp->n, d = gp->d, rc = 0;
    const double *X = gp->X;
    size_t n_pairs = (size_t)n * (n - 1) / 2;
    double *il2 = malloc((size_t)(d > 0 ? d : 1) * sizeof(double));
    double *A = malloc((size_t)n * n * sizeof(double));
    double *al = malloc((size_t)n * sizeof(double));
    double *pr = malloc((n_pairs > 0 ? n_pairs : 1) * 2 * sizeof(double)); /* r, exp(-sqrt5 r) */
    if (!il2 || !A || !al || !pr) {
        rc = HPO_ENOMEM;
        goto fail;
    }
    inv_l2(d, theta, il2);
    double s2 = exp(theta[d]), nv = exp(theta[d + 1]);
    {
        size_t q = 0;
        for (int j = 0; j < n; j++)
            for (int i = j + 1; i < n; i++, q++) {
                double r = sqrt(dist2(d, il2, X + (size_t)i * d, X + (size_t)j * d));
                pr[2 * q] = r;
                pr[2 * q + 1] = exp(-SQRT5 * r);
            }
    }
    static const double jitter[] = {0.0, 1e-10, 1e-8, 1e-6, 1e-4};
    int ok = 0;
    for (size_t t = 0; t < HPO_ARRAY_LEN(jitter) && !ok; t++) {
        size_t q = 0;
        for (int j = 0; j < n; j++) {
            A[(size_t)j * n + j] = s2 + nv + jitter[t] * s2;
            for (int i = j + 1; i < n; i++, q++) {
                double r = pr[2 * q];
                A[(size_t)j * n + i] = s2 * (1.0 + SQRT5 * r + (5.0 / 3.0) * r * r) * pr[2 * q + 1];
            }
        }
        ok = LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', n, A, n) == 0;
    }
    if (!ok) {
        rc = HPO_EINVAL;
        goto fail;
    }
    memcpy(al, gp->y, (size_t)n * sizeof(double));
    if (LAPACKE_dpotrs_work(LAPACK_COL_MAJOR, 'L', n, 1, A, n, al, n) != 0) {
        rc = HPO_EINTERNAL;
        goto fail;
    }
    double quad = 0.0, logdet = 0.0;
    for (int i = 0; i < n; i++) {
        quad += gp->y[i] * al[i];
        logdet += log(A[(size_t)i * n + i]);
    }
    double v = -0.5 * quad - logdet - 0.5 * n * LOG_2PI;
    if (grad) {
        /* W = alpha alpha^T - K^-1 (lower triangle from dpotri);
         * d lml / d theta_p = 1/2 sum_ij W_ij dK_ij / d theta_p */
        if (LAPACKE_dpotri_work(LAPACK_COL_MAJOR, 'L', n, A, n) != 0) {
            rc = HPO_EINTERNAL;
            goto fail;
        }
        for (int k = 0; k < d + 2; k++) grad[k] = 0.0;
        double diag = 0.0;
        size_t q = 0;
        for (int j = 0; j < n; j++) {
            diag += al[j] * al[j] - A[(size_t)j * n + j];
            const double *xj = X + (size_t)j * d;
            for (int i = j + 1; i < n; i++, q++) {
                const double *xi = X + (size_t)i * d;
                double w = al[i] * al[j] - A[(size_t)j * n + i];
                double r = pr[2 * q], e = pr[2 * q + 1];
                grad[d] += w * s2 * (1.0 + SQRT5 * r + (5.0 / 3.0) * r * r) * e;
                double g = w * s2 * (5.0 / 3.0) * (1.0 + SQRT5 * r) * e;
                for (int k = 0; k < d; k++) {
                    double t = xi[k] - xj[k];
                    grad[k] += g * t * t * il2[k];
                }
            }
        }
        grad[d] += 0.5 * s2 * diag;
        grad[d + 1] = 0.5 * nv * diag;
    }
    if (with_prior) v += log_prior(d, theta, grad);
    *lml = v;
fail:
    free(il2);
    free(A);
    free(al);
    free(pr);
    return rc;
}

/* ---- fit --------------------------------------------------------------- */

typedef struct fit_ctx {
    const tun_gp *gp;
    int failed;
    double *full, *gfull; /* d + 2: theta with the fixed noise put back */
} fit_ctx;

/* The optimiser sees d + 2 parameters, or d + 1 when the noise is fixed. */
static double fit_objective(unsigned nth, const double *th, double *grad, void *data) {
    fit_ctx *c = data;
    int d = c->gp->d;
    double v;
    memcpy(c->full, th, nth * sizeof(double));
    if (c->gp->fixed_noise > 0) c->full[d + 1] = log(c->gp->fixed_noise);
    if (tun_gp_lml(c->gp, c->full, 1, &v, grad ? c->gfull : NULL) < 0 || !isfinite(v)) {
        c->failed++;
        if (grad)
            for (unsigned k = 0; k < nth; k++) grad[k] = 0.0;
        return -1e300;
    }
    if (grad) memcpy(grad, c->gfull, nth * sizeof(double));
    return v;
}

int tun_gp_set_theta(tun_gp *gp, const double *theta) {
    int n = gp->n, d = gp->d;
    if (theta != gp->theta) memcpy(gp->theta, theta, (size_t)(d + 2) * sizeof(double));
    int rc = factorise(n, gp->n_data, d, gp->X, gp->theta, gp->L);
    if (rc < 0) return rc;
    memcpy(gp->alpha, gp->y, (size_t)n * sizeof(double));
    if (LAPACKE_dpotrs_work(LAPACK_COL_MAJOR, 'L', n, 1, gp->L, n, gp->alpha, n) != 0)
        return HPO_EINTERNAL;
    return 0;
}

int tun_gp_fit(tun_gp *gp, hpo_rng *rng, int n_restarts, int max_eval) {
    int d = gp->d, fixed = gp->fixed_noise > 0, np = fixed ? d + 1 : d + 2, rc = 0;
    size_t bytes = (size_t)(d + 2) * sizeof(double);
    double *lb = malloc(6 * bytes); /* d may be large: not on the stack */
    if (!lb) return HPO_ENOMEM;
    double *ub = lb + (d + 2), *th = ub + (d + 2), *best = th + (d + 2), *full = best + (d + 2), *gfull = full + (d + 2);
    for (int k = 0; k < d; k++) {
        lb[k] = TUN_GP_LOG_LS_MIN;
        ub[k] = TUN_GP_LOG_LS_MAX;
    }
    lb[d] = TUN_GP_LOG_S2_MIN;
    ub[d] = TUN_GP_LOG_S2_MAX;
    lb[d + 1] = TUN_GP_LOG_NOISE_MIN;
    ub[d + 1] = TUN_GP_LOG_NOISE_MAX;
    if (fixed) gp->theta[d + 1] = log(gp->fixed_noise);
    double best_v = -INFINITY;
    memcpy(best, gp->theta, bytes);
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, (unsigned)np);
    if (!opt) {
        free(lb);
        return HPO_ENOMEM;
    }
    nlopt_set_lower_bounds(opt, lb);
    nlopt_set_upper_bounds(opt, ub);
    nlopt_set_maxeval(opt, max_eval);
    nlopt_set_ftol_rel(opt, 1e-7);
    nlopt_set_xtol_rel(opt, 1e-5);
    fit_ctx ctx = {gp, 0, full, gfull};
    nlopt_set_max_objective(opt, fit_objective, &ctx);
    for (int r = 0; r <= n_restarts; r++) {
        if (r == 0) {
            memcpy(th, gp->theta, bytes);
        } else {
            for (int k = 0; k < d; k++) th[k] = -2.5 + 3.0 * hpo_rng_uniform(rng);
            th[d] = -1.0 + 2.0 * hpo_rng_uniform(rng);
            th[d + 1] = -12.0 + 8.0 * hpo_rng_uniform(rng);
        }
        if (fixed) th[d + 1] = log(gp->fixed_noise);
        for (int k = 0; k < d + 2; k++) th[k] = fmin(ub[k], fmax(lb[k], th[k]));
        double v = -INFINITY;
        nlopt_result res = nlopt_optimize(opt, th, &v);
        if (res < 0 && res != NLOPT_ROUNDOFF_LIMITED) {
            /* keep whatever point it reached if it evaluates */
            if (tun_gp_lml(gp, th, 1, &v, NULL) < 0) v = -INFINITY;
        }
        if (isfinite(v) && v > best_v) {
            best_v = v;
            memcpy(best, th, bytes);
        }
    }
    nlopt_destroy(opt);
    rc = tun_gp_set_theta(gp, best);
    free(lb);
    return rc;
}

/* ---- posterior --------------------------------------------------------- */

int tun_gp_condition(tun_gp *gp, int m, const double *Xp) {
    if (m <= 0) return 0;
    int n = gp->n, d = gp->d, n2 = n + m, rc = 0;
    double *mu = malloc((size_t)m * sizeof(double));
    double *X = malloc((size_t)n2 * d * sizeof(double));
    double *y = malloc((size_t)n2 * sizeof(double));
    double *L = malloc((size_t)n2 * n2 * sizeof(double));
    double *alpha = malloc((size_t)n2 * sizeof(double));
    if (!mu || !X || !y || !L || !alpha) {
        rc = HPO_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < m; i++) tun_gp_predict(gp, Xp + (size_t)i * d, &mu[i], NULL, NULL, NULL);
    memcpy(X, gp->X, (size_t)n * d * sizeof(double));
    memcpy(X + (size_t)n * d, Xp, (size_t)m * d * sizeof(double));
    memcpy(y, gp->y, (size_t)n * sizeof(double));
    memcpy(y + n, mu, (size_t)m * sizeof(double));
    free(gp->X);
    free(gp->y);
    free(gp->L);
    free(gp->alpha);
    gp->X = X;
    gp->y = y;
    gp->L = L;
    gp->alpha = alpha;
    gp->n = n2;
    X = y = L = alpha = NULL;
    rc = tun_gp_set_theta(gp, gp->theta);
fail:
    free(mu);
    free(X);
    free(y);
    free(L);
    free(alpha);
    return rc;
}

void tun_gp_predict(const tun_gp *gp, const double *x, double *mu, double *var, double *dmu,
                    double *dvar) {
    int n = gp->n, d = gp->d;
    double *il2 = hpo_xmalloc((size_t)(d > 0 ? d : 1) * sizeof(double));
    inv_l2(d, gp->theta, il2);
    double s2 = exp(gp->theta[d]);
    double *k = hpo_xmalloc((size_t)n * 2 * sizeof(double));
    double *w = k + n;
    double m = 0.0;
    for (int i = 0; i < n; i++) {
        double r = sqrt(dist2(d, il2, x, gp->X + (size_t)i * d));
        k[i] = s2 * m52(r);
        m += k[i] * gp->alpha[i];
    }
    if (var || dvar) {
        memcpy(w, k, (size_t)n * sizeof(double));
        LAPACKE_dpotrs_work(LAPACK_COL_MAJOR, 'L', n, 1, gp->L, n, w, n);
    }
    if (var) {
        double q = 0.0;
        for (int i = 0; i < n; i++) q += k[i] * w[i];
        double v = s2 - q;
        *var = v > 1e-12 * s2 ? v : 1e-12 * s2;
    }
    if (dmu || dvar) {
        if (dmu) memset(dmu, 0, (size_t)d * sizeof(double));
        if (dvar) memset(dvar, 0, (size_t)d * sizeof(double));
        for (int i = 0; i < n; i++) {
            const double *xi = gp->X + (size_t)i * d;
            double r = sqrt(dist2(d, il2, x, xi));
            double g = -s2 * m52_dr_over_r(r); /* dk/dx_j = g * (x_j - xi_j) * il2_j */
            double ca = dmu ? g * gp->alpha[i] : 0.0;
            double cw = dvar ? -2.0 * g * w[i] : 0.0;
            for (int j = 0; j < d; j++) {
                double t = (x[j] - xi[j]) * il2[j];
                if (dmu) dmu[j] += ca * t;
                if (dvar) dvar[j] += cw * t;
            }
        }
    }
    if (mu) *mu = m;
    free(k);
    free(il2);
}

int tun_gp_predict_batch(const tun_gp *gp, int m, const double *Xs, double *mu, double *var) {
    int n = gp->n, d = gp->d;
    double *il2 = malloc((size_t)(d > 0 ? d : 1) * sizeof(double));
    double *B = malloc((size_t)n * m * sizeof(double));
    if (!il2 || !B) {
        free(il2);
        free(B);
        return HPO_ENOMEM;
    }
    inv_l2(d, gp->theta, il2);
    double s2 = exp(gp->theta[d]);
    for (int j = 0; j < m; j++) {
        const double *x = Xs + (size_t)j * d;
        double *col = B + (size_t)j * n, s = 0.0;
        for (int i = 0; i < n; i++) {
            col[i] = s2 * m52(sqrt(dist2(d, il2, x, gp->X + (size_t)i * d)));
            s += col[i] * gp->alpha[i];
        }
        mu[j] = s;
    }
    if (var) {
        if (LAPACKE_dtrtrs_work(LAPACK_COL_MAJOR, 'L', 'N', 'N', n, m, gp->L, n, B, n) != 0) {
            free(B);
            free(il2);
            return HPO_EINTERNAL;
        }
        for (int j = 0; j < m; j++) {
            const double *col = B + (size_t)j * n;
            double q = 0.0;
            for (int i = 0; i < n; i++) q += col[i] * col[i];
            double v = s2 - q;
            var[j] = v > 1e-12 * s2 ? v : 1e-12 * s2;
        }
    }
    free(B);
    free(il2);
    return 0;
}

/* ---- log expected improvement ------------------------------------------ */

/* erfcx(x) = exp(x^2) erfc(x) for x >= 0. */
static double erfcx_pos(double x) {
    if (x < 25.0) return exp(x * x) * erfc(x);
    double t = 0.0; /* continued fraction, evaluated from the tail */
    for (int k = 60; k >= 1; k--) t = (0.5 * k) / (x + t);
    return 1.0 / (1.7724538509055160273 * (x + t));
}

/* log(1 - exp(a)) for a < 0 */
static double log1mexp(double a) { return a > -0.6931471805599453 ? log(-expm1(a)) : log1p(-exp(a)); }

double tun_log_h(double z, double *dlogh) {
    static const double c1 = 0.91893853320467274178; /* log(2 pi) / 2 */
    static const double c2 = 0.22579135264472743236; /* log(pi / 2) / 2 */
    if (z > -1.0) {
        double phi = exp(-0.5 * z * z) / 2.5066282746310005024;
        double Phi = 0.5 * erfc(-z / 1.4142135623730950488);
        double h = phi + z * Phi;
        if (dlogh) *dlogh = Phi / h;
        return log(h);
    }
    if (z > -1.0 / sqrt(DBL_EPSILON)) {
        double ex = erfcx_pos(-z / 1.4142135623730950488);
        double l1 = log1mexp(log(ex * -z) + c2);
        /* Phi/phi = sqrt(pi/2) erfcx, h/phi = exp(l1) */
        if (dlogh) *dlogh = 1.2533141373155002512 * ex / exp(l1);
        return -0.5 * z * z - c1 + l1;
    }
    if (dlogh) *dlogh = -z - 2.0 / z;
    return -0.5 * z * z - c1 - 2.0 * log(-z);
}

double tun_log_ei(double mu, double var, double best, double *dmu, double *dvar) {
    double s = sqrt(var), z = (best - mu) / s, dl;
    double v = log(s) + tun_log_h(z, &dl);
    if (dmu) *dmu = -dl / s;
    if (dvar) *dvar = 0.5 / var - dl * z / (2.0 * var);
    return v;
}
