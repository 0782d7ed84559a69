/*
 * cma.c - CMA-ES with active weights, margin and stopping rules (cma.h).
 * The equations are numbered as in Hansen's tutorial (arXiv:1604.00772).
 */
#include "cma.h"
#include "keyed_sort.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EIG_EPS 1e-8
#define SIGMA_MAX 1e32
#define TOLFUN 1e-12
#define TOLXUP 1e4
#define TOLCOND 1e14

/* ---- the normal distribution -------------------------------------------- */

static double norm_cdf(double x) { return 0.5 * erfc(-x / M_SQRT2); }

/* Acklam's rational approximation (relative error 1.2e-9), then one Halley
 * step on erfc, which brings it to double precision. */
double tun_norm_quantile(double p) {
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                               -2.759285104469687e+02, 1.383577518672690e+02,
                               -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                               -1.556989798598866e+02, 6.680131188771972e+01,
                               -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                               -2.400758277161838e+00, -2.549732539343734e+00,
                               4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                               2.445134137142996e+00, 3.754408661907416e+00};
    const double p_low = 0.02425;
    double x, q, r;
    if (!(p > 0 && p < 1)) return p <= 0 ? -INFINITY : INFINITY;
    if (p < p_low || p > 1 - p_low) {
        q = sqrt(-2 * log(p < p_low ? p : 1 - p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
        if (p > 1 - p_low) x = -x;
    } else {
        q = p - 0.5;
        r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    double e = norm_cdf(x) - p;
    double u = e * sqrt(2 * M_PI) * exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}

/* ---- bins of discrete coordinates ----------------------------------------- */

double tun_cma_dim_edge(const tun_cma_dim *d, int64_t j) {
    int64_t k = d->n_values;
    if (j <= 0) return 0.0;
    if (j >= k) return 1.0;
    if (!d->log) return (double)j / (double)k;
    double a = log(d->low - 0.5), b = log(d->low + (double)k - 0.5);
    return (log(d->low + (double)j - 0.5) - a) / (b - a);
}

int64_t tun_cma_dim_bin(const tun_cma_dim *d, double u) {
    int64_t k = d->n_values, j;
    if (k <= 1 || !(u > 0)) return 0; /* NaN and u <= 0: the first bin */
    if (u >= 1) return k - 1;
    if (!d->log) {
        j = (int64_t)floor(u * (double)k);
    } else {
        double a = log(d->low - 0.5), b = log(d->low + (double)k - 0.5);
        j = (int64_t)floor(exp(a + u * (b - a)) + 0.5 - d->low);
        /* exp/log rounding at an edge: settle on the bin whose edges hold u */
        if (j > 0 && u < tun_cma_dim_edge(d, j)) j--;
        else if (j < k - 1 && u >= tun_cma_dim_edge(d, j + 1)) j++;
    }
    return j < 0 ? 0 : j >= k ? k - 1 : j;
}

static int discrete(const tun_cma *c, int i) { return c->dims && c->dims[i].n_values > 0; }

int64_t tun_cma_bin(const tun_cma *c, int i, double xi) {
    if (!discrete(c, i)) return -1;
    return tun_cma_dim_bin(&c->dims[i], c->m[i] + c->A[i] * (xi - c->m[i]));
}

static double norm_pdf(double x) { return exp(-0.5 * x * x) / sqrt(2 * M_PI); }

double tun_cma_bin_point(const tun_cma *c, int i, int64_t j) {
    double m = c->m[i];
    if (!discrete(c, i)) return m;
    const tun_cma_dim *d = &c->dims[i];
    int64_t k = d->n_values;
    double s = c->sigma * sqrt(c->C[i * c->n + i]), A = c->A[i];
    double a = j <= 0 ? -INFINITY : m + (tun_cma_dim_edge(d, j) - m) / A;
    double b = j >= k - 1 ? INFINITY : m + (tun_cma_dim_edge(d, j + 1) - m) / A;
    if (!(s > 0) || !(A > 0)) return fmin(fmax(m, a), b);
    double al = (a - m) / s, be = (b - m) / s, z, num;
    /* the probability of [al, be], from the tail nearer to it (no cancellation) */
    if (al > 0) z = 0.5 * (erfc(al / M_SQRT2) - erfc(be / M_SQRT2));
    else if (be < 0) z = 0.5 * (erfc(-be / M_SQRT2) - erfc(-al / M_SQRT2));
    else z = 1 - 0.5 * erfc(-al / M_SQRT2) - 0.5 * erfc(be / M_SQRT2);
    num = (isfinite(al) ? norm_pdf(al) : 0) - (isfinite(be) ? norm_pdf(be) : 0);
    if (!(z > 1e-300)) return al > 0 ? a : be < 0 ? b : m;
    double x = m + s * num / z;
    return fmin(fmax(x, a), b);
}

/* ---- set-up ---------------------------------------------------------------- */

int tun_cma_default_lambda(int n) { return 4 + (int)floor(3 * log((double)n)); }

/* B, D from C (dsyev, row-major); C is symmetrised and rebuilt as B D^2 B^T. */
static int eigen(tun_cma *c) {
    int n = c->n;
    double *a = hpo_xmalloc((size_t)n * n * sizeof *a), *ev = hpo_xmalloc((size_t)n * sizeof *ev);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) a[i * n + j] = 0.5 * (c->C[i * n + j] + c->C[j * n + i]);
    int rc = LAPACKE_dsyev(LAPACK_ROW_MAJOR, 'V', 'U', n, a, n, ev) == 0 ? 0 : HPO_EINTERNAL;
    if (rc == 0) {
        memcpy(c->B, a, (size_t)n * n * sizeof *a);
        for (int i = 0; i < n; i++) c->D[i] = sqrt(ev[i] < 0 ? EIG_EPS : ev[i]);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int k = 0; k < n; k++)
                    s += c->B[i * n + k] * c->D[k] * c->D[k] * c->B[j * n + k];
                c->C[i * n + j] = s;
            }
    }
    free(a);
    free(ev);
    return rc;
}

int tun_cma_init(tun_cma *c, int n, int lambda, const double *m0, double sigma0,
                 const tun_cma_dim *dims) {
    if (n < 1 || lambda < 2 || lambda > TUN_CMA_MAX_LAMBDA || !(sigma0 > 0) || !m0)
        return HPO_EINVAL;
    memset(c, 0, sizeof *c);
    c->n = n;
    c->lambda = lambda;
    c->mu = lambda / 2;
    c->w = hpo_xmalloc((size_t)lambda * sizeof *c->w);
    /* weights (49)-(53): w'_i = ln((lambda+1)/2) - ln i */
    double spos = 0, sneg = 0, spos2 = 0, sneg2 = 0;
    for (int i = 0; i < lambda; i++) {
        double wp = log((lambda + 1) / 2.0) - log(i + 1.0);
        c->w[i] = wp;
        if (i < c->mu) {
            spos += wp;
            spos2 += wp * wp;
        } else {
            sneg += wp;
            sneg2 += wp * wp;
        }
    }
    c->mu_eff = spos * spos / spos2;
    double mu_eff_neg = sneg2 > 0 ? sneg * sneg / sneg2 : 0;
    double N = n;
    c->c1 = 2 / ((N + 1.3) * (N + 1.3) + c->mu_eff);
    c->cmu = fmin(1 - c->c1 - 1e-8,
                  2 * (c->mu_eff - 2 + 1 / c->mu_eff) / ((N + 2) * (N + 2) + c->mu_eff));
    if (c->cmu < 0) c->cmu = 0;
    double alpha = 1 + 2 * mu_eff_neg / (c->mu_eff + 2); /* alpha_mu_eff^- */
    if (c->cmu > 0) {
        alpha = fmin(alpha, 1 + c->c1 / c->cmu);               /* alpha_mu^- */
        alpha = fmin(alpha, (1 - c->c1 - c->cmu) / (N * c->cmu)); /* alpha_posdef^- */
    }
    double pos_sum = 0, neg_sum = 0;
    for (int i = 0; i < lambda; i++) {
        if (c->w[i] >= 0) pos_sum += c->w[i];
        else neg_sum -= c->w[i];
    }
    for (int i = 0; i < lambda; i++)
        c->w[i] = c->w[i] >= 0 ? c->w[i] / pos_sum : alpha * c->w[i] / neg_sum;
    c->cs = (c->mu_eff + 2) / (N + c->mu_eff + 5);
    c->ds = 1 + 2 * fmax(0, sqrt((c->mu_eff - 1) / (N + 1)) - 1) + c->cs;
    c->cc = (4 + c->mu_eff / N) / (N + 4 + 2 * c->mu_eff / N);
    c->chi_n = sqrt(N) * (1 - 1 / (4 * N) + 1 / (21 * N * N));
    c->sigma = c->sigma0 = sigma0;
    c->m = hpo_xmalloc((size_t)n * sizeof *c->m);
    memcpy(c->m, m0, (size_t)n * sizeof *c->m);
    c->C = hpo_xcalloc((size_t)n * n, sizeof *c->C);
    c->B = hpo_xcalloc((size_t)n * n, sizeof *c->B);
    c->D = hpo_xmalloc((size_t)n * sizeof *c->D);
    for (int i = 0; i < n; i++) {
        c->C[i * n + i] = c->B[i * n + i] = 1;
        c->D[i] = 1;
    }
    c->ps = hpo_xcalloc((size_t)n, sizeof *c->ps);
    c->pc = hpo_xcalloc((size_t)n, sizeof *c->pc);
    c->A = hpo_xmalloc((size_t)n * sizeof *c->A);
    for (int i = 0; i < n; i++) c->A[i] = 1;
    if (dims) {
        c->dims = hpo_xmalloc((size_t)n * sizeof *c->dims);
        memcpy(c->dims, dims, (size_t)n * sizeof *c->dims);
    }
    c->margin = 1 / (N * lambda);
    c->funhist_term = 10 + (int)ceil(30 * N / lambda);
    c->funhist = hpo_xcalloc((size_t)2 * c->funhist_term, sizeof *c->funhist);
    c->tolx = 1e-12 * sigma0;
    return 0;
}

void tun_cma_clear(tun_cma *c) {
    if (!c) return;
    free(c->w);
    free(c->m);
    free(c->C);
    free(c->B);
    free(c->D);
    free(c->ps);
    free(c->pc);
    free(c->A);
    free(c->dims);
    free(c->funhist);
    memset(c, 0, sizeof *c);
}

/* ---- sampling ---------------------------------------------------------------- */

static void draw(const tun_cma *c, hpo_rng *rng, double *z, double *x) {
    int n = c->n;
    for (int i = 0; i < n; i++) z[i] = c->D[i] * hpo_rng_normal(rng);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < n; k++) s += c->B[i * n + k] * z[k];
        x[i] = c->m[i] + c->sigma * s;
    }
}

static int feasible(const tun_cma *c, const double *x) {
    for (int i = 0; i < c->n; i++)
        if (!discrete(c, i) && !(x[i] >= 0 && x[i] <= 1)) return 0;
    return 1;
}

void tun_cma_sample(const tun_cma *c, hpo_rng *rng, double *x) {
    double z[64], *zz = c->n <= 64 ? z : hpo_xmalloc((size_t)c->n * sizeof *zz);
    int tries = 10 * c->n;
    draw(c, rng, zz, x);
    while (!feasible(c, x) && tries-- > 0) draw(c, rng, zz, x);
    for (int i = 0; i < c->n; i++)
        if (!discrete(c, i)) x[i] = fmin(fmax(x[i], 0.0), 1.0);
    if (zz != z) free(zz);
}

/* ---- the update ----------------------------------------------------------------- */

/* The margin on discrete coordinate i (Hamano et al. 2022, as cma.h says). */
static void margin(tun_cma *c, int i) {
    const tun_cma_dim *d = &c->dims[i];
    int64_t k = d->n_values;
    if (k < 2) return;
    double a = c->margin, m = c->m[i], sd_c = c->sigma * sqrt(c->C[i * c->n + i]);
    double s = c->A[i] * sd_c;
    int64_t j = tun_cma_dim_bin(d, m);
    double lo = tun_cma_dim_edge(d, j), up = tun_cma_dim_edge(d, j + 1);
    if (!(s > 0)) return;
    if (j == 0 || j == k - 1) {
        /* an end bin: one threshold; move the mean toward it */
        double thr = j == 0 ? up : lo;
        if (norm_cdf(-fabs(thr - m) / s) < a)
            c->m[i] = thr + (m < thr ? -1 : 1) * s * tun_norm_quantile(1 - a);
        return;
    }
    double pl = norm_cdf((lo - m) / s), pu = 1 - norm_cdf((up - m) / s);
    double pm = 1 - pl - pu;
    pl = fmax(pl, a / 2);
    pu = fmax(pu, a / 2);
    /* the floors added mass: take it back from each part in proportion to
     * what it holds above a/2 */
    double excess = pl + pm + pu - 1, room = pl + pm + pu - 3 * a / 2;
    double ql = pl - excess * (pl - a / 2) / room, qu = pu - excess * (pu - a / 2) / room;
    ql = fmin(fmax(ql, 1e-10), 0.5 - 1e-10);
    qu = fmin(fmax(qu, 1e-10), 0.5 - 1e-10);
    double zl = tun_norm_quantile(1 - ql), zu = tun_norm_quantile(1 - qu);
    double s_new = (up - lo) / (zl + zu);
    c->A[i] = s_new / sd_c;
    c->m[i] = (lo * zu + up * zl) / (zl + zu);
}

int tun_cma_tell(tun_cma *c, const double *X, const double *f) {
    int n = c->n, lam = c->lambda, rc = 0;
    for (int k = 0; k < lam; k++)
        if (!isfinite(f[k])) return HPO_EINVAL;
    tun_keyed *r = hpo_xmalloc((size_t)lam * sizeof *r);
    double *y = hpo_xmalloc((size_t)lam * n * sizeof *y), *yw = hpo_xcalloc((size_t)n, sizeof *yw);
    double *cy = hpo_xmalloc((size_t)n * sizeof *cy);
    double *Cinv = hpo_xmalloc((size_t)n * n * sizeof *Cinv);
    double *saved = hpo_xmalloc((size_t)n * (n + 4) * sizeof *saved);
    /* keep what eigen() may fail on, to leave the state as it was */
    memcpy(saved, c->C, (size_t)n * n * sizeof *saved);
    memcpy(saved + n * n, c->m, (size_t)n * sizeof *saved);
    memcpy(saved + n * n + n, c->ps, (size_t)n * sizeof *saved);
    memcpy(saved + n * n + 2 * n, c->pc, (size_t)n * sizeof *saved);
    memcpy(saved + n * n + 3 * n, c->A, (size_t)n * sizeof *saved);
    double sigma_before = c->sigma;

    for (int k = 0; k < lam; k++) r[k] = (tun_keyed){f[k], k};
    tun_keyed_sort(r, (size_t)lam);
    c->g++;
    int h = 2 * (c->g % c->funhist_term);
    c->funhist[h] = r[0].v;
    c->funhist[h + 1] = r[lam - 1].v;

    /* y_k = (x_k:lambda - m) / sigma (38); y_w = sum_i<=mu w_i y_i (41) */
    for (int k = 0; k < lam; k++)
        for (int i = 0; i < n; i++) y[k * n + i] = (X[r[k].i * n + i] - c->m[i]) / c->sigma;
    for (int k = 0; k < c->mu; k++)
        for (int i = 0; i < n; i++) yw[i] += c->w[k] * y[k * n + i];
    /* C^-1/2 = B D^-1 B^T */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += c->B[i * n + k] * c->B[j * n + k] / c->D[k];
            Cinv[i * n + j] = s;
        }
    /* mean (42), c_m = 1 */
    for (int i = 0; i < n; i++) c->m[i] += c->sigma * yw[i];
    /* step-size path (43) and step size (44) */
    double a = sqrt(c->cs * (2 - c->cs) * c->mu_eff), norm = 0;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += Cinv[i * n + j] * yw[j];
        c->ps[i] = (1 - c->cs) * c->ps[i] + a * s;
        norm += c->ps[i] * c->ps[i];
    }
    norm = sqrt(norm);
    c->sigma *= exp(c->cs / c->ds * (norm / c->chi_n - 1));
    if (c->sigma > SIGMA_MAX) c->sigma = SIGMA_MAX;
    /* h_sigma and the covariance path (45) */
    double hs_left = norm / sqrt(1 - pow(1 - c->cs, 2.0 * (c->g + 1)));
    double hs = hs_left < (1.4 + 2.0 / (n + 1)) * c->chi_n ? 1.0 : 0.0;
    double b = hs * sqrt(c->cc * (2 - c->cc) * c->mu_eff);
    for (int i = 0; i < n; i++) c->pc[i] = (1 - c->cc) * c->pc[i] + b * yw[i];
    /* covariance (47) with the active weights w°_i (46) */
    double wsum = 0;
    for (int k = 0; k < lam; k++) wsum += c->w[k];
    double dh = (1 - hs) * c->cc * (2 - c->cc);
    double keep = 1 + c->c1 * dh - c->c1 - c->cmu * wsum;
    for (int i = 0; i < n * n; i++) c->C[i] *= keep;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) c->C[i * n + j] += c->c1 * c->pc[i] * c->pc[j];
    for (int k = 0; k < lam; k++) {
        double wk = c->w[k];
        const double *yk = y + k * n;
        if (wk < 0) {
            double q = 0;
            for (int i = 0; i < n; i++) {
                double s = 0;
                for (int j = 0; j < n; j++) s += Cinv[i * n + j] * yk[j];
                cy[i] = s;
                q += s * s;
            }
            wk *= n / (q + 1e-8);
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) c->C[i * n + j] += c->cmu * wk * yk[i] * yk[j];
    }
    if (c->dims)
        for (int i = 0; i < n; i++) margin(c, i);
    if ((rc = eigen(c)) != 0) {
        memcpy(c->C, saved, (size_t)n * n * sizeof *saved);
        memcpy(c->m, saved + n * n, (size_t)n * sizeof *saved);
        memcpy(c->ps, saved + n * n + n, (size_t)n * sizeof *saved);
        memcpy(c->pc, saved + n * n + 2 * n, (size_t)n * sizeof *saved);
        memcpy(c->A, saved + n * n + 3 * n, (size_t)n * sizeof *saved);
        c->sigma = sigma_before;
        c->g--;
    }
    free(r);
    free(y);
    free(yw);
    free(cy);
    free(Cinv);
    free(saved);
    return rc;
}

int tun_cma_should_stop(const tun_cma *c) {
    int n = c->n;
    /* a state that overflowed cannot recover: restart */
    if (!isfinite(c->sigma) || !(c->sigma > 0)) return 1;
    for (int i = 0; i < n; i++)
        if (!isfinite(c->m[i]) || !isfinite(c->D[i]) || !isfinite(c->A[i])) return 1;
    if (c->g > c->funhist_term) {
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < 2 * c->funhist_term; i++) {
            lo = fmin(lo, c->funhist[i]);
            hi = fmax(hi, c->funhist[i]);
        }
        if (hi - lo < TOLFUN) return 1;
    }
    int small = 1;
    for (int i = 0; i < n && small; i++)
        small = c->sigma * c->C[i * n + i] < c->tolx && c->sigma * fabs(c->pc[i]) < c->tolx;
    if (small) return 1;
    double dmax = 0, dmin = INFINITY;
    for (int i = 0; i < n; i++) {
        dmax = fmax(dmax, c->D[i]);
        dmin = fmin(dmin, c->D[i]);
    }
    if (c->sigma * dmax > TOLXUP) return 1;
    for (int i = 0; i < n; i++)
        if (c->m[i] == c->m[i] + 0.2 * c->sigma * sqrt(c->C[i * n + i])) return 1;
    int ax = c->g % n, same = 1;
    for (int i = 0; i < n && same; i++)
        same = c->m[i] == c->m[i] + 0.1 * c->sigma * c->D[ax] * c->B[i * n + ax];
    if (same) return 1;
    if (dmax * dmax > TOLCOND * dmin * dmin) return 1; /* cond(C) = (max D / min D)^2 */
    return 0;
}
