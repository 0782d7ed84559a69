/*
 * gp_trend.c - the bayesian sampler's prior mean: a quadratic trend, convex
 * along every column, fitted by ridge least squares (gp_model.h).
 */
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"

/* Feature f at u: 0 the intercept, 1 + k the column u_k - 1/2, 1 + d + k
 * its square; *g (may be NULL) gets its derivative in u_k_grad. */
static double feature(int f, int d, const double *u, int k_grad, double *g) {
    if (f == 0) {
        if (g) *g = 0.0;
        return 1.0;
    }
    int k = f <= d ? f - 1 : f - 1 - d;
    double c = u[k] - 0.5;
    if (f <= d) {
        if (g) *g = k == k_grad;
        return c;
    }
    if (g) *g = k == k_grad ? 2.0 * c : 0.0;
    return c * c;
}

double tun_gp_trend_eval(const tun_gp_trend *tr, const double *u, double *grad) {
    double s = 0.0;
    if (grad)
        for (int k = 0; k < tr->d; k++) grad[k] = 0.0;
    if (!tr->on) return 0.0;
    for (int j = 0; j < tr->p; j++) {
        int f = tr->feat[j];
        s += tr->beta[j] * feature(f, tr->d, u, -1, NULL);
        if (grad && f > 0) {
            int k = f <= tr->d ? f - 1 : f - 1 - tr->d;
            double g;
            feature(f, tr->d, u, k, &g);
            grad[k] += tr->beta[j] * g;
        }
    }
    return s;
}

/* beta = argmin sum_i (y_i - f(u_i) . beta)^2 + TUN_GP_TREND_RIDGE n
 * |beta without the intercept|^2, over the features tr->feat[0..p); -1
 * when the normal equations are singular. */
static int solve(tun_gp_trend *tr, int n, const double *U, const double *y, double *A, double *f) {
    int p = tr->p, d = tr->d;
    memset(A, 0, (size_t)p * p * sizeof(double));
    memset(tr->beta, 0, (size_t)p * sizeof(double));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < p; j++) f[j] = feature(tr->feat[j], d, U + (size_t)i * d, -1, NULL);
        for (int a = 0; a < p; a++) {
            tr->beta[a] += f[a] * y[i];
            for (int c = 0; c <= a; c++) A[(size_t)a * p + c] += f[a] * f[c];
        }
    }
    for (int a = 0; a < p; a++)
        if (tr->feat[a] != 0) A[(size_t)a * p + a] += TUN_GP_TREND_RIDGE * n;
    return LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', p, 1, A, p, tr->beta, 1) == 0 ? 0 : -1;
}

int tun_gp_trend_fit(tun_gp_trend *tr, int n, int d, const double *U, const unsigned char *quad, double *y) {
    memset(tr, 0, sizeof *tr);
    tr->d = d;
    int p = 1 + d;
    for (int k = 0; k < d; k++) p += quad[k] != 0;
    if (n < TUN_GP_TREND_POINTS_PER_FEATURE * p) return 0;
    tr->feat = malloc((size_t)p * sizeof(int));
    tr->beta = malloc((size_t)p * sizeof(double));
    double *A = malloc((size_t)p * p * sizeof(double)), *f = malloc((size_t)p * sizeof(double));
    if (!tr->feat || !tr->beta || !A || !f) {
        free(A);
        free(f);
        tun_gp_trend_clear(tr);
        return HPO_ENOMEM;
    }
    tr->p = 0;
    for (int j = 0; j < 1 + d; j++) tr->feat[tr->p++] = j;
    for (int k = 0; k < d; k++)
        if (quad[k]) tr->feat[tr->p++] = 1 + d + k;
    /* active set: drop the most negative square and refit, until none is */
    int ok;
    for (;;) {
        ok = solve(tr, n, U, y, A, f) == 0;
        if (!ok) break;
        int worst = -1;
        for (int j = 0; j < tr->p; j++)
            if (tr->feat[j] > d && tr->beta[j] < 0 && (worst < 0 || tr->beta[j] < tr->beta[worst])) worst = j;
        if (worst < 0) break;
        tr->feat[worst] = tr->feat[--tr->p];
    }
    free(A);
    free(f);
    if (!ok) {
        tun_gp_trend_clear(tr);
        return 0;
    }
    tr->on = 1;
    double ss = 0.0;
    for (int i = 0; i < n; i++) {
        y[i] -= tun_gp_trend_eval(tr, U + (size_t)i * d, NULL);
        ss += y[i] * y[i];
    }
    tr->scale = sqrt(ss / n);
    if (!(tr->scale > 1e-12)) tr->scale = 1e-12;
    for (int i = 0; i < n; i++) y[i] /= tr->scale;
    return 0;
}

void tun_gp_trend_apply(const tun_gp_trend *tr, const double *u, double *mu, double *var, double *dmu,
                        double *dvar) {
    if (!tr->on) return;
    double sc = tr->scale, *g = dmu ? hpo_xmalloc((size_t)tr->d * sizeof(double)) : NULL; /* d may be large */
    *mu = tun_gp_trend_eval(tr, u, g) + sc * *mu;
    *var *= sc * sc;
    for (int k = 0; dmu && k < tr->d; k++) dmu[k] = g[k] + sc * dmu[k];
    for (int k = 0; dvar && k < tr->d; k++) dvar[k] *= sc * sc;
    free(g);
}

void tun_gp_trend_clear(tun_gp_trend *tr) {
    free(tr->feat);
    free(tr->beta);
    memset(tr, 0, sizeof *tr);
}
