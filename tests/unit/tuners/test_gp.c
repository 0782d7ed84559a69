/* test_gp.c - the GP math of tuners/gp_model.c against naive references and
 * finite differences, and the "bayesian" sampler through tun_study. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_model.h"
#include "rng.h"
#include "tuners/sampler_util.h"

static void random_data(hpo_rng *r, int n, int d, double *X, double *y) {
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int k = 0; k < d; k++) {
            X[i * d + k] = hpo_rng_uniform(r);
            s += sin(3.0 * X[i * d + k] + k);
        }
        y[i] = s + 0.01 * hpo_rng_normal(r);
    }
}

/* Naive Matern-5/2, written from the formula. */
static double naive_k(int d, const double *theta, const double *a, const double *b) {
    double r2 = 0.0;
    for (int k = 0; k < d; k++) r2 += pow((a[k] - b[k]) / exp(theta[k]), 2);
    double r = sqrt(r2);
    return exp(theta[d]) * (1 + sqrt(5.0) * r + 5.0 * r2 / 3.0) * exp(-sqrt(5.0) * r);
}

static void test_kernel_matrix(void **state) {
    (void)state;
    enum { N = 17, D = 3 };
    hpo_rng r;
    hpo_rng_seed(&r, 1);
    double X[N * D], y[N], K[N * N], theta[D + 2] = {log(0.3), log(0.7), log(1.9), log(1.7), -5};
    random_data(&r, N, D, X, y);
    tun_gp_kernel_matrix(N, D, X, theta, K);
    double maxd = 0.0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double ref = naive_k(D, theta, X + i * D, X + j * D);
            maxd = fmax(maxd, fabs(K[j * N + i] - ref));
            assert_true(fabs(tun_gp_kernel(D, theta, X + i * D, X + j * D) - ref) < 1e-13);
        }
    printf("kernel matrix vs naive: max abs diff %.3g\n", maxd);
    assert_true(maxd < 1e-13);
}

static void test_lml_gradient(void **state) {
    (void)state;
    enum { N = 30, D = 4 };
    hpo_rng r;
    hpo_rng_seed(&r, 2);
    double X[N * D], y[N];
    random_data(&r, N, D, X, y);
    tun_gp_standardise(y, N, NULL, NULL);
    tun_gp gp;
    assert_int_equal(tun_gp_init(&gp, N, D, X, y), 0);
    double theta[D + 2] = {log(0.4), log(0.9), log(0.2), log(2.0), log(1.3), log(1e-2)};
    for (int prior = 0; prior <= 1; prior++) {
        double v, g[D + 2], maxrel = 0.0;
        assert_int_equal(tun_gp_lml(&gp, theta, prior, &v, g), 0);
        for (int k = 0; k < D + 2; k++) {
            double h = 1e-5, tp[D + 2], tm[D + 2], vp, vm;
            memcpy(tp, theta, sizeof tp);
            memcpy(tm, theta, sizeof tm);
            tp[k] += h;
            tm[k] -= h;
            assert_int_equal(tun_gp_lml(&gp, tp, prior, &vp, NULL), 0);
            assert_int_equal(tun_gp_lml(&gp, tm, prior, &vm, NULL), 0);
            double fd = (vp - vm) / (2 * h);
            double rel = fabs(fd - g[k]) / fmax(1e-3, fabs(fd));
            maxrel = fmax(maxrel, rel);
        }
        printf("lml gradient (prior %d) vs central differences: max rel err %.3g\n", prior, maxrel);
        assert_true(maxrel < 1e-5);
    }
    tun_gp_clear(&gp);
}

/* Naive log EI where it is accurate: integrate directly. */
static double naive_log_ei(double mu, double var, double best) {
    double s = sqrt(var), z = (best - mu) / s;
    double ei = s * (exp(-0.5 * z * z) / sqrt(2 * M_PI) + z * 0.5 * erfc(-z / sqrt(2.0)));
    return log(ei);
}

static void test_log_ei(void **state) {
    (void)state;
    double maxd = 0.0;
    for (double z = -5.0; z <= 5.0; z += 0.01) {
        double a = tun_log_ei(-z * 0.7, 0.49, 0.0, NULL, NULL);
        double b = naive_log_ei(-z * 0.7, 0.49, 0.0);
        maxd = fmax(maxd, fabs(a - b) / fmax(1.0, fabs(b)));
    }
    printf("logEI vs naive log(EI) on z in [-5,5]: max rel diff %.3g\n", maxd);
    assert_true(maxd < 1e-9);
    /* where naive underflows, logEI stays finite, decreasing, close to the asymptote */
    double prev = 0.0;
    for (double z = -10.0; z >= -1e10; z *= 1.7) {
        double d;
        double v = tun_log_h(z, &d);
        assert_true(isfinite(v) && isfinite(d));
        assert_true(v < prev);
        prev = v;
        double asym = -0.5 * z * z - 0.5 * log(2 * M_PI) - 2.0 * log(-z);
        assert_true(fabs(v - asym) <= fabs(asym) * 1e-2 + 3.0 / (z * z));
    }
    assert_true(isinf(naive_log_ei(50.0, 1.0, 0.0)));
    assert_true(isfinite(tun_log_ei(50.0, 1.0, 0.0, NULL, NULL)));
    printf("log h(-40) = %.10g (naive: %g)\n", tun_log_h(-40.0, NULL), naive_log_ei(40.0, 1.0, 0.0));
    /* derivative of log h vs central differences, across the branches */
    double maxrel = 0.0;
    for (double z = -60.0; z < 8.0; z += 0.37) {
        double d, h = 1e-6 * fmax(1.0, fabs(z));
        tun_log_h(z, &d);
        double fd = (tun_log_h(z + h, NULL) - tun_log_h(z - h, NULL)) / (2 * h);
        maxrel = fmax(maxrel, fabs(fd - d) / fmax(1e-6, fabs(fd)));
    }
    printf("d log h / dz vs central differences: max rel err %.3g\n", maxrel);
    assert_true(maxrel < 1e-5);
}

/* The posterior at x: the GP's, plus the trend when tr. */
static void posterior(const tun_gp *gp, const tun_gp_trend *tr, const double *x, double *mu, double *var,
                      double *dmu, double *dvar) {
    tun_gp_predict(gp, x, mu, var, dmu, dvar);
    if (tr) tun_gp_trend_apply(tr, x, mu, var, dmu, dvar);
}

/* Input gradients of the posterior mean, variance and log EI (against best)
 * at 20 random points against central differences: max relative errors. */
static void posterior_gradient_errors(const tun_gp *gp, const tun_gp_trend *tr, double best, hpo_rng *r,
                                      double *maxrel_mu, double *maxrel_var, double *maxrel_ei) {
    enum { D_MAX = 8 };
    int d = gp->d;
    *maxrel_mu = *maxrel_var = *maxrel_ei = 0.0;
    for (int t = 0; t < 20; t++) {
        double x[D_MAX], dmu[D_MAX], dvar[D_MAX], mu, var;
        for (int k = 0; k < d; k++) x[k] = hpo_rng_uniform(r);
        posterior(gp, tr, x, &mu, &var, dmu, dvar);
        double dm, dv;
        tun_log_ei(mu, var, best, &dm, &dv);
        for (int k = 0; k < d; k++) {
            double h = 1e-6, xp[D_MAX], xm[D_MAX], mp, vp, mm, vm;
            memcpy(xp, x, sizeof xp);
            memcpy(xm, x, sizeof xm);
            xp[k] += h;
            xm[k] -= h;
            posterior(gp, tr, xp, &mp, &vp, NULL, NULL);
            posterior(gp, tr, xm, &mm, &vm, NULL, NULL);
            double fmu = (mp - mm) / (2 * h), fvar = (vp - vm) / (2 * h);
            double fei = (tun_log_ei(mp, vp, best, NULL, NULL) - tun_log_ei(mm, vm, best, NULL, NULL)) / (2 * h);
            double aei = dm * dmu[k] + dv * dvar[k];
            *maxrel_mu = fmax(*maxrel_mu, fabs(fmu - dmu[k]) / fmax(1e-3, fabs(fmu)));
            *maxrel_var = fmax(*maxrel_var, fabs(fvar - dvar[k]) / fmax(1e-3, fabs(fvar)));
            *maxrel_ei = fmax(*maxrel_ei, fabs(fei - aei) / fmax(1e-3, fabs(fei)));
        }
    }
}

static void test_acquisition_gradient(void **state) {
    (void)state;
    enum { N = 25, D = 3 };
    hpo_rng r;
    hpo_rng_seed(&r, 3);
    double X[N * D], y[N];
    random_data(&r, N, D, X, y);
    tun_gp_standardise(y, N, NULL, NULL);
    tun_gp gp;
    assert_int_equal(tun_gp_init(&gp, N, D, X, y), 0);
    double theta[D + 2] = {log(0.3), log(0.5), log(0.8), 0.2, log(1e-3)};
    assert_int_equal(tun_gp_set_theta(&gp, theta), 0);
    double maxrel_mu, maxrel_var, maxrel_ei;
    posterior_gradient_errors(&gp, NULL, gp.y_best, &r, &maxrel_mu, &maxrel_var, &maxrel_ei);
    printf("posterior/logEI input gradients vs central differences: max rel err mu %.3g var %.3g "
           "logEI %.3g\n", maxrel_mu, maxrel_var, maxrel_ei);
    assert_true(maxrel_mu < 1e-5 && maxrel_var < 1e-4 && maxrel_ei < 1e-4);
    /* batch prediction agrees with the single one */
    double Xs[5 * D], mb[5], vb[5];
    for (int i = 0; i < 5 * D; i++) Xs[i] = hpo_rng_uniform(&r);
    assert_int_equal(tun_gp_predict_batch(&gp, 5, Xs, mb, vb), 0);
    for (int i = 0; i < 5; i++) {
        double m, v;
        tun_gp_predict(&gp, Xs + i * D, &m, &v, NULL, NULL);
        assert_true(fabs(m - mb[i]) < 1e-10 && fabs(v - vb[i]) < 1e-10);
    }
    tun_gp_clear(&gp);
}

/* ---- the quadratic trend (gp_trend.c) ---- */

/* A bowl in columns 0 and 2, concave in column 1, linear in all three. */
static double bowl(const double *u) {
    double a = u[0] - 0.5, b = u[1] - 0.5, c = u[2] - 0.5;
    return 2.0 + 1.5 * a - 0.7 * b + 0.3 * c + 4.0 * a * a - 3.0 * b * b + 2.5 * c * c;
}

/* Naive reference: Gaussian elimination with partial pivoting on the ridge
 * normal equations of the features phi (rows of p). */
static void naive_ridge(int n, int p, const double *phi, const double *y, double ridge, double *beta) {
    double A[16 * 17];
    for (int a = 0; a < p; a++) {
        for (int c = 0; c <= p; c++) A[a * (p + 1) + c] = 0.0;
        for (int i = 0; i < n; i++) {
            for (int c = 0; c < p; c++) A[a * (p + 1) + c] += phi[i * p + a] * phi[i * p + c];
            A[a * (p + 1) + p] += phi[i * p + a] * y[i];
        }
        if (a > 0) A[a * (p + 1) + a] += ridge * n;
    }
    for (int c = 0; c < p; c++) {
        int piv = c;
        for (int a = c + 1; a < p; a++)
            if (fabs(A[a * (p + 1) + c]) > fabs(A[piv * (p + 1) + c])) piv = a;
        for (int k = 0; k <= p; k++) {
            double t = A[c * (p + 1) + k];
            A[c * (p + 1) + k] = A[piv * (p + 1) + k];
            A[piv * (p + 1) + k] = t;
        }
        for (int a = 0; a < p; a++) {
            if (a == c) continue;
            double f = A[a * (p + 1) + c] / A[c * (p + 1) + c];
            for (int k = c; k <= p; k++) A[a * (p + 1) + k] -= f * A[c * (p + 1) + k];
        }
    }
    for (int a = 0; a < p; a++) beta[a] = A[a * (p + 1) + p] / A[a * (p + 1) + a];
}

static void test_trend_fit(void **state) {
    (void)state;
    enum { N = 40, D = 3, P = 6 }; /* intercept, 3 linear, squares of columns 0 and 2 */
    hpo_rng r;
    hpo_rng_seed(&r, 11);
    double U[N * D], y[N], y0[N], phi[N * P];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < D; k++) U[i * D + k] = hpo_rng_uniform(&r);
        y[i] = y0[i] = bowl(U + i * D) + 0.05 * hpo_rng_normal(&r);
        const double *u = U + i * D;
        double row[P] = {1, u[0] - .5, u[1] - .5, u[2] - .5, (u[0] - .5) * (u[0] - .5), (u[2] - .5) * (u[2] - .5)};
        memcpy(phi + i * P, row, sizeof row);
    }
    unsigned char quad[D] = {1, 1, 1};
    tun_gp_trend tr;
    assert_int_equal(tun_gp_trend_fit(&tr, N, D, U, quad, y), 0);
    assert_true(tr.on);
    assert_int_equal(tr.p, P); /* the concave square was dropped */
    double beta[P];
    naive_ridge(N, P, phi, y0, TUN_GP_TREND_RIDGE, beta);
    double max_ref = 0.0, max_resid = 0.0, max_fd = 0.0;
    for (int i = 0; i < N; i++) {
        double ref = 0.0;
        for (int a = 0; a < P; a++) ref += beta[a] * phi[i * P + a];
        double t = tun_gp_trend_eval(&tr, U + i * D, NULL);
        max_ref = fmax(max_ref, fabs(t - ref));
        max_resid = fmax(max_resid, fabs(t + tr.scale * y[i] - y0[i]));
    }
    for (int t = 0; t < 20; t++) {
        double u[D], g[D];
        for (int k = 0; k < D; k++) u[k] = hpo_rng_uniform(&r);
        tun_gp_trend_eval(&tr, u, g);
        for (int k = 0; k < D; k++) {
            double h = 1e-6, up[D], um[D];
            memcpy(up, u, sizeof up);
            memcpy(um, u, sizeof um);
            up[k] += h;
            um[k] -= h;
            double fd = (tun_gp_trend_eval(&tr, up, NULL) - tun_gp_trend_eval(&tr, um, NULL)) / (2 * h);
            max_fd = fmax(max_fd, fabs(fd - g[k]));
        }
    }
    printf("trend vs naive ridge: max abs diff %.3g; residuals rebuild y to %.3g; gradient vs central "
           "differences: max abs diff %.3g\n", max_ref, max_resid, max_fd);
    assert_true(max_ref < 1e-9 && max_resid < 1e-12 && max_fd < 1e-7);
    /* the fit is near the truth (the ridge shrinks it a little), linear in column 1 */
    double u[D] = {0.8, 0.1, 0.3}, lo[D] = {0.8, 0.0, 0.3}, mid[D] = {0.8, 0.5, 0.3}, hi[D] = {0.8, 1.0, 0.3};
    assert_true(fabs(tun_gp_trend_eval(&tr, u, NULL) - (bowl(u) + 3.0 * 0.16)) < 0.5);
    assert_true(fabs(tun_gp_trend_eval(&tr, lo, NULL) + tun_gp_trend_eval(&tr, hi, NULL) -
                     2.0 * tun_gp_trend_eval(&tr, mid, NULL)) < 1e-12);
    /* a standardised residual */
    double ss = 0.0;
    for (int i = 0; i < N; i++) ss += y[i] * y[i];
    assert_true(fabs(ss / N - 1.0) < 1e-12);
    tun_gp_trend_clear(&tr);
}

/* Too few points: no trend, y and predictions untouched. */
static void test_trend_off(void **state) {
    (void)state;
    enum { D = 3, N = 2 * (1 + 2 * D) - 1 };
    hpo_rng r;
    hpo_rng_seed(&r, 12);
    double U[N * D], y[N], y0[N];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < D; k++) U[i * D + k] = hpo_rng_uniform(&r);
        y[i] = y0[i] = bowl(U + i * D);
    }
    unsigned char quad[D] = {1, 1, 1};
    tun_gp_trend tr;
    assert_int_equal(tun_gp_trend_fit(&tr, N, D, U, quad, y), 0);
    assert_false(tr.on);
    assert_memory_equal(y, y0, sizeof y);
    double mu = 0.25, var = 0.5, dmu[D] = {1, 2, 3}, dvar[D] = {4, 5, 6};
    tun_gp_trend_apply(&tr, U, &mu, &var, dmu, dvar);
    assert_true(mu == 0.25 && var == 0.5 && dmu[2] == 3 && dvar[0] == 4);
    tun_gp_trend_clear(&tr);
}

/* The posterior of f = trend + scale g, as the sampler uses it: its input
 * gradients against central differences. */
static void test_trend_posterior_gradient(void **state) {
    (void)state;
    enum { N = 30, D = 3 };
    hpo_rng r;
    hpo_rng_seed(&r, 13);
    double U[N * D], y[N];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < D; k++) U[i * D + k] = hpo_rng_uniform(&r);
        y[i] = bowl(U + i * D) + sin(7.0 * U[i * D]);
    }
    unsigned char quad[D] = {1, 0, 1};
    tun_gp_trend tr;
    assert_int_equal(tun_gp_trend_fit(&tr, N, D, U, quad, y), 0);
    assert_true(tr.on);
    tun_gp gp;
    assert_int_equal(tun_gp_init(&gp, N, D, U, y), 0);
    double theta[D + 2] = {log(0.2), log(0.5), log(0.4), 0.0, log(1e-3)};
    assert_int_equal(tun_gp_set_theta(&gp, theta), 0);
    double best = INFINITY, max_mu, max_var, max_ei;
    for (int i = 0; i < N; i++) best = fmin(best, tun_gp_trend_eval(&tr, U + i * D, NULL) + tr.scale * y[i]);
    posterior_gradient_errors(&gp, &tr, best, &r, &max_mu, &max_var, &max_ei);
    printf("trend + GP posterior/logEI input gradients vs central differences: max rel err mu %.3g var %.3g "
           "logEI %.3g\n", max_mu, max_var, max_ei);
    assert_true(max_mu < 1e-5 && max_var < 1e-4 && max_ei < 1e-4);
    tun_gp_clear(&gp);
    tun_gp_trend_clear(&tr);
}

static void test_interpolates(void **state) {
    (void)state;
    enum { N = 20, D = 2 };
    hpo_rng r;
    hpo_rng_seed(&r, 4);
    double X[N * D], y[N];
    for (int i = 0; i < N; i++) {
        X[i * D] = hpo_rng_uniform(&r);
        X[i * D + 1] = hpo_rng_uniform(&r);
        y[i] = sin(4 * X[i * D]) + cos(3 * X[i * D + 1]);
    }
    tun_gp_standardise(y, N, NULL, NULL);
    tun_gp gp;
    assert_int_equal(tun_gp_init(&gp, N, D, X, y), 0);
    hpo_rng fr;
    hpo_rng_seed(&fr, 9);
    assert_int_equal(tun_gp_fit(&gp, &fr, 2, 200), 0);
    printf("fitted: ls %.3g %.3g s2 %.3g noise %.3g\n", exp(gp.theta[0]), exp(gp.theta[1]),
           exp(gp.theta[2]), exp(gp.theta[3]));
    double maxd = 0.0, maxv = 0.0;
    for (int i = 0; i < N; i++) {
        double m, v;
        tun_gp_predict(&gp, X + i * D, &m, &v, NULL, NULL);
        maxd = fmax(maxd, fabs(m - y[i]));
        maxv = fmax(maxv, v);
    }
    printf("noiseless data: max |mu - y| %.3g, max var %.3g at the data\n", maxd, maxv);
    assert_true(maxd < 1e-2 && maxv < 1e-2);
    /* a kriging believer fantasy keeps the mean and shrinks the variance */
    double xp[D] = {0.5, 0.5}, m0, v0, m1, v1;
    tun_gp_predict(&gp, xp, &m0, &v0, NULL, NULL);
    assert_int_equal(tun_gp_condition(&gp, 1, xp), 0);
    tun_gp_predict(&gp, xp, &m1, &v1, NULL, NULL);
    printf("fantasy at (0.5,0.5): mean %.6g -> %.6g, var %.3g -> %.3g\n", m0, m1, v0, v1);
    assert_true(fabs(m0 - m1) < 1e-6 && v1 < 0.1 * v0 + 1e-5);
    tun_gp_clear(&gp);
}

/* With noisy data the near-noiseless prior still lets the fit raise the
 * noise: 60 points of sin + N(0, 0.3^2), standardised. */
static void test_noisy_fit(void **state) {
    (void)state;
    enum { N = 60, D = 2 };
    hpo_rng r;
    hpo_rng_seed(&r, 5);
    double X[N * D], y[N], y_clean[N];
    for (int i = 0; i < N; i++) {
        X[i * D] = hpo_rng_uniform(&r);
        X[i * D + 1] = hpo_rng_uniform(&r);
        y_clean[i] = sin(4 * X[i * D]) + 0.5 * X[i * D + 1];
        y[i] = y_clean[i] + 0.3 * hpo_rng_normal(&r);
    }
    double mean, sd;
    tun_gp_standardise(y, N, &mean, &sd);
    tun_gp gp;
    assert_int_equal(tun_gp_init(&gp, N, D, X, y), 0);
    hpo_rng fr;
    hpo_rng_seed(&fr, 6);
    assert_int_equal(tun_gp_fit(&gp, &fr, 2, 200), 0);
    double nv = exp(gp.theta[D + 1]) * sd * sd, err = 0.0;
    for (int i = 0; i < N; i++) {
        double m;
        tun_gp_predict(&gp, X + i * D, &m, NULL, NULL, NULL);
        err += pow(m * sd + mean - y_clean[i], 2);
    }
    printf("noisy data (noise var 0.09): fitted noise var %.3g, rms error of the mean vs the "
           "clean function %.3g\n", nv, sqrt(err / N));
    assert_true(nv > 0.01);
    assert_true(sqrt(err / N) < 0.25);
    /* cfg.deterministic: the noise stays where it is put */
    gp.fixed_noise = 1e-6;
    assert_int_equal(tun_gp_fit(&gp, &fr, 1, 100), 0);
    assert_true(gp.theta[D + 1] == log(1e-6));
    tun_gp_clear(&gp);
}

/* ---- the sampler through tun_study ---------------------------------- */

static tun_study *new_gp_study(const tun_space *s, uint64_t seed, tun_acquisition acq) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_BAYESIAN;
    cfg.seed = seed;
    cfg.acquisition = acq;
    tun_study *st = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &st), 0);
    return st;
}

static void gp_run(tun_study *st, const tun_space *s, int from, int n, double *last) {
    double x[16];
    for (int k = from; k < from + n; k++) {
        assert_int_equal(tun_study_suggest(st, k, x), 0);
        assert_true(config_valid(s, x));
        assert_int_equal(tun_study_add(st, k, x, TUN_TRIAL_RUNNING, 0.0), 0);
        assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_COMPLETE, mixed_objective(s, x)), 0);
        if (last) memcpy(last, x, (size_t)s->n * sizeof(double));
    }
}

/* Standardising against a naive two-pass reference: the same bits for
 * ordinary values; finite results for values near DBL_MAX, where the
 * naive sum and squares overflow (before: NaN, and bayesian with several
 * objectives answered no suggestion once such values were told). */
static void test_standardise_extremes(void **state) {
    (void)state;
    double v[5] = {3.5, -1.25, 8.0, 0.5, 2.0}, ref[5];
    double m = 0, s2 = 0;
    for (int i = 0; i < 5; i++) m += v[i];
    m /= 5;
    for (int i = 0; i < 5; i++) s2 += (v[i] - m) * (v[i] - m);
    double sd = sqrt(s2 / 4);
    for (int i = 0; i < 5; i++) ref[i] = (v[i] - m) / sd;
    double mean, std;
    tun_gp_standardise(v, 5, &mean, &std);
    for (int i = 0; i < 5; i++) assert_true(v[i] == ref[i]);
    assert_true(mean == m && std == sd);
    double big[4] = {1.7e308, -1.7e308, 0.0, 1.7e308};
    tun_gp_standardise(big, 4, &mean, &std);
    printf("  [1.7e308, -1.7e308, 0, 1.7e308] -> [%g, %g, %g, %g], mean %g, std %g\n", big[0], big[1], big[2], big[3],
           mean, std);
    for (int i = 0; i < 4; i++) assert_true(isfinite(big[i]));
    assert_true(big[0] == big[3] && big[0] > 0 && big[1] < big[2] && big[2] < big[0]);
    assert_true(isfinite(mean));
}

static void test_sampler_mixed(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    for (int acq = TUN_ACQ_LOG_EI; acq <= TUN_ACQ_UCB; acq++) {
        tun_study *a = new_gp_study(s, 4, (tun_acquisition)acq);
        tun_study *b = new_gp_study(s, 4, (tun_acquisition)acq);
        double la[16], lb[16], x1[16], x2[16];
        /* 25 trials: every suggestion has exactly its active parameters, on the domain */
        gp_run(a, s, 0, 25, la);
        gp_run(b, s, 0, 25, lb);
        assert_true(same_bits(la, lb, s->n));
        /* same seed, history and number: the same suggestion, whatever came before */
        assert_int_equal(tun_study_suggest(a, 25, x1), 0);
        assert_int_equal(tun_study_suggest(a, 26, x2), 0);
        assert_int_equal(tun_study_suggest(b, 25, x2), 0);
        assert_true(same_bits(x1, x2, s->n));
        tun_study_free(a);
        tun_study_free(b);
    }
    tun_space_free(s);
}

static void test_sampler_pending(void **state) {
    (void)state;
    /* Branin-like 2-D problem: with 4 trials running, the 4 suggestions are
     * distinct and apart (kriging believer), and the best so far is good */
    tun_space *s = parse_space("{\"a\":{\"type\":\"float\",\"low\":-5,\"high\":10},"
                               "\"b\":{\"type\":\"float\",\"low\":0,\"high\":15}}");
    assert_non_null(s);
    tun_study *st = new_gp_study(s, 2, TUN_ACQ_LOG_EI);
    double x[2], best = INFINITY;
    int ia = tun_space_index(s, "a"), ib = tun_space_index(s, "b");
    for (int k = 0; k < 30; k++) {
        assert_int_equal(tun_study_suggest(st, k, x), 0);
        double u = x[ib] - 5.1 / (4 * M_PI * M_PI) * x[ia] * x[ia] + 5 / M_PI * x[ia] - 6;
        double f = u * u + 10 * (1 - 1 / (8 * M_PI)) * cos(x[ia]) + 10;
        best = fmin(best, f);
        assert_int_equal(tun_study_add(st, k, x, TUN_TRIAL_COMPLETE, f), 0);
    }
    printf("Branin after 30 trials: best %.4f (optimum 0.3979)\n", best);
    assert_true(best < 0.45);
    double p[4][2];
    for (int k = 0; k < 4; k++) {
        assert_int_equal(tun_study_suggest(st, 30 + k, p[k]), 0);
        assert_true(config_valid(s, p[k]));
        assert_int_equal(tun_study_add(st, 30 + k, p[k], TUN_TRIAL_RUNNING, 0.0), 0);
    }
    double mind = INFINITY;
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            mind = fmin(mind, hypot((p[i][0] - p[j][0]) / 15, (p[i][1] - p[j][1]) / 15));
    printf("4 suggestions with pending trials: min distance %.3g of the unit square\n", mind);
    assert_true(mind > 1e-3);
    tun_study_free(st);
    tun_space_free(s);
}

/* Pruned trials (taken as the worst complete value) and failed ones
 * (ignored) mixed into the history: suggestions stay valid. */
static void test_sampler_pruned_failed(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    tun_study *st = new_gp_study(s, 8, TUN_ACQ_LOG_EI);
    double x[16];
    for (int k = 0; k < 25; k++) {
        assert_int_equal(tun_study_suggest(st, k, x), 0);
        assert_true(config_valid(s, x));
        assert_int_equal(tun_study_add(st, k, x, TUN_TRIAL_RUNNING, 0.0), 0);
        double f = mixed_objective(s, x);
        if (k % 4 == 1) {
            assert_int_equal(tun_study_report(st, k, 1, f + 1.0, NULL), 0);
            assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_PRUNED, 0.0), 0);
        } else if (k % 6 == 3) {
            assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_FAILED, 0.0), 0);
        } else {
            assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_COMPLETE, f), 0);
        }
    }
    tun_study_free(st);
    tun_space_free(s);
}

/* A wide one-hot space (6 choices of 4096 values and a float: 24,577
 * columns) on a thread with a 512 KiB stack: the GP's buffers sized by the
 * columns are on the heap (before: arrays on the stack, 1.4 MB of them in
 * the fit; 40 such choices overflowed hpod's 8 MB connection threads). A
 * stored study this wide still suggests; hpod refuses new ones over
 * TUN_GP_MAX_COLUMNS (api.test_definition_edges). */
static void *wide_run(void *arg) {
    const tun_space *s = arg;
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_BAYESIAN;
    cfg.seed = 3;
    cfg.n_startup_trials = 2;
    tun_study *st = NULL;
    if (tun_study_new(s, &cfg, 0, &st)) return "tun_study_new failed";
    double x[8];
    const char *why = NULL;
    for (int k = 0; k < 4 && !why; k++) {
        if (tun_study_suggest(st, k, x) || !config_valid(s, x)) why = "no valid suggestion";
        else if (tun_study_add(st, k, x, TUN_TRIAL_RUNNING, 0.0) ||
                 tun_study_finish(st, k, TUN_TRIAL_COMPLETE, x[0] + x[6] * 0.01))
            why = "the trial was not recorded";
    }
    tun_study_free(st);
    return (void *)why;
}

static void test_wide_space_small_stack(void **state) {
    (void)state;
    char text[200000];
    int len = snprintf(text, sizeof text, "{\"f\": {\"type\": \"float\", \"low\": 0, \"high\": 1}");
    for (int c = 0; c < 6; c++) {
        len += snprintf(text + len, sizeof text - (size_t)len, ", \"c%d\": {\"type\": \"choice\", \"values\": [", c);
        for (int v = 0; v < 4096; v++) len += snprintf(text + len, sizeof text - (size_t)len, "%s%d", v ? "," : "", v);
        len += snprintf(text + len, sizeof text - (size_t)len, "]}");
    }
    snprintf(text + len, sizeof text - (size_t)len, "}");
    tun_space *s = parse_space(text);
    assert_non_null(s);
    printf("  %d columns\n", tun_gp_columns(s));
    assert_int_equal(tun_gp_columns(s), 6 * 4096 + 1);
    pthread_attr_t at;
    pthread_attr_init(&at);
    assert_int_equal(pthread_attr_setstacksize(&at, 512 * 1024), 0);
    pthread_t th;
    void *why = NULL;
    assert_int_equal(pthread_create(&th, &at, wide_run, s), 0);
    pthread_join(th, &why);
    pthread_attr_destroy(&at);
    if (why) printf("  %s\n", (const char *)why);
    assert_null(why);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_matrix),
        cmocka_unit_test(test_lml_gradient),
        cmocka_unit_test(test_log_ei),
        cmocka_unit_test(test_acquisition_gradient),
        cmocka_unit_test(test_trend_fit),
        cmocka_unit_test(test_trend_off),
        cmocka_unit_test(test_trend_posterior_gradient),
        cmocka_unit_test(test_interpolates),
        cmocka_unit_test(test_noisy_fit),
        cmocka_unit_test(test_standardise_extremes),
        cmocka_unit_test(test_sampler_mixed),
        cmocka_unit_test(test_sampler_pending),
        cmocka_unit_test(test_sampler_pruned_failed),
        cmocka_unit_test(test_wide_space_small_stack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
