/* ehvi.c - expected hypervolume improvement over a box decomposition of
 * the non-dominated region (gp_model.h).
 *
 * The region below the reference point that no point of the front
 * dominates is cut into disjoint boxes by slicing along the last objective:
 * between two consecutive values of it, the points at or below the slice
 * leave the (m-1)-D non-dominated region of their projection, cut the same
 * way down to 1-D (one interval). A box's lower bound may be -inf.
 *
 * For a point y the improvement is sum over boxes B of prod_k
 * max(0, u_k - max(l_k, y_k)), and max(0, u - max(l, y)) = [u - y]+ -
 * [l - y]+. With independent Gaussian objectives Y_k ~ N(mu_k, s_k^2) each
 * factor's expectation is g(u) - g(l), g(c) = E[c - Y]+ = s h((c - mu)/s)
 * (h(z) = phi(z) + z Phi(z), EI's h), so the expectation is exact for any m
 * (Yang et al. 2019). It is computed as its log: log g from tun_log_h,
 * log(g(u) - g(l)) = log g(u) + log(1 - exp(log g(l) - log g(u))), and a
 * log-sum-exp over the boxes, so it stays finite and smooth far from the
 * front. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"
#include "keyed_sort.h"
#include "tuners_internal.h"

#define MAX_BOXES 50000 /* a larger decomposition thins the front (tun_ehvi_init) */

/* ---- the decomposition ------------------------------------------------- */

typedef struct box_list {
    int m;
    size_t n, cap;
    double *lo, *hi; /* n rows of m */
} box_list;

static void push_box(box_list *b, const double *lo, const double *hi) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->lo = hpo_xrealloc(b->lo, b->cap * (size_t)b->m * sizeof *b->lo);
        b->hi = hpo_xrealloc(b->hi, b->cap * (size_t)b->m * sizeof *b->hi);
    }
    memcpy(b->lo + b->n * (size_t)b->m, lo, (size_t)b->m * sizeof *lo);
    memcpy(b->hi + b->n * (size_t)b->m, hi, (size_t)b->m * sizeof *hi);
    b->n++;
}

/* Whether a is at least as good as b in the first d coordinates. */
static int covers(const double *a, const double *b, int d) {
    for (int k = 0; k < d; k++)
        if (a[k] > b[k]) return 0;
    return 1;
}

/* Keeps the rows of P (n rows of stride m) that no other row covers in the
 * first d coordinates (equal rows kept once); returns how many. */
static size_t reduce(double *P, size_t n, int m, int d) {
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        const double *p = P + i * (size_t)m;
        int drop = 0;
        for (size_t j = 0; j < n && !drop; j++) {
            if (j == i) continue;
            const double *q = P + j * (size_t)m;
            if (covers(q, p, d) && (!covers(p, q, d) || j < i)) drop = 1;
        }
        if (!drop) memmove(P + out++ * (size_t)m, p, (size_t)m * sizeof *p);
    }
    return out;
}

/* The region of the first d coordinates below upper that no row of P
 * covers, as boxes; lo and hi hold the bounds of coordinates d .. m-1
 * already fixed. out NULL: only counted into *count, and only until it
 * passes limit (the count grows as n^(d-1): 8 objectives and 300 points
 * would count for hours). P is reordered. */
static void decompose(double *P, size_t n, int m, int d, const double *upper, double *lo, double *hi,
                      box_list *out, size_t *count, size_t limit) {
    if (*count > limit) return;
    if (d == 1) {
        double top = upper[0];
        for (size_t i = 0; i < n; i++) top = fmin(top, P[i * (size_t)m]);
        lo[0] = -INFINITY;
        hi[0] = top;
        if (out) push_box(out, lo, hi);
        (*count)++;
        return;
    }
    n = reduce(P, n, m, d);
    tun_keyed_sort_rows(P, n, m, d - 1, 0);
    double *Q = hpo_xmalloc((n ? n : 1) * (size_t)m * sizeof *Q);
    for (size_t j = 0; j <= n && *count <= limit; j++) { /* slice j: the first j rows lie at or below it */
        double a = j == 0 ? -INFINITY : P[(j - 1) * (size_t)m + (size_t)(d - 1)];
        double b = j == n ? upper[d - 1] : P[j * (size_t)m + (size_t)(d - 1)];
        if (!(b > a)) continue;
        memcpy(Q, P, j * (size_t)m * sizeof *Q);
        lo[d - 1] = a;
        hi[d - 1] = b;
        decompose(Q, j, m, d - 1, upper, lo, hi, out, count, limit);
    }
    free(Q);
}

/* The rows of F strictly below ref in every objective, non-dominated. */
static size_t front_inside(const double *F, size_t n, int m, const double *ref, double *P) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const double *p = F + i * (size_t)m;
        int in = 1;
        for (int o = 0; o < m && in; o++) in = p[o] < ref[o];
        if (in) memcpy(P + k++ * (size_t)m, p, (size_t)m * sizeof *P);
    }
    return reduce(P, k, m, m);
}

/* The boxes of P's decomposition, counted up to limit + 1 */
static size_t count_boxes(const double *P, size_t n, int m, const double *ref, size_t limit) {
    double *Q = hpo_xmalloc((n ? n : 1) * (size_t)m * sizeof *Q), lo[TUN_MAX_OBJECTIVES], hi[TUN_MAX_OBJECTIVES];
    memcpy(Q, P, n * (size_t)m * sizeof *Q);
    size_t c = 0;
    decompose(Q, n, m, m, ref, lo, hi, NULL, &c, limit);
    free(Q);
    return c;
}

/* Keeps k points of P (n rows), in their order, chosen greedily by the
 * hypervolume each adds (tun_hv_greedy: the points' exclusive
 * contributions among all n cost hours with 8 objectives and 300 points,
 * an ask never answered). */
static size_t keep_largest(double *P, size_t n, int m, const double *ref, size_t k) {
    size_t *pick = hpo_xmalloc((k ? k : 1) * sizeof *pick);
    char *keep = hpo_xcalloc(n ? n : 1, 1);
    tun_hv_greedy(P, n, m, ref, k, pick);
    for (size_t s = 0; s < k; s++) keep[pick[s]] = 1;
    size_t out = 0;
    for (size_t i = 0; i < n; i++)
        if (keep[i]) memmove(P + out++ * (size_t)m, P + i * (size_t)m, (size_t)m * sizeof *P);
    free(keep);
    free(pick);
    return out;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The position of v in the sorted grid g[0..n) (v is one of them). */
static int grid_index(const double *g, int n, double v) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (g[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int tun_ehvi_init(tun_ehvi *e, const double *F, size_t n, int m, const double *ref) {
    memset(e, 0, sizeof *e);
    if (m < 1 || m > TUN_MAX_OBJECTIVES || (n > 0 && !F) || !ref) return HPO_EINVAL;
    for (int k = 0; k < m; k++)
        if (!isfinite(ref[k])) return HPO_EINVAL;
    e->m = m;
    memcpy(e->ref, ref, (size_t)m * sizeof *ref);
    double *P = hpo_xmalloc((n ? n : 1) * (size_t)m * sizeof *P);
    size_t np = front_inside(F, n, m, ref, P);
    if (count_boxes(P, np, m, ref, MAX_BOXES) > MAX_BOXES) {
        /* (np + 1)^(m - 1) bounds the count: thin the front to fit it */
        size_t k = (size_t)floor(pow((double)MAX_BOXES, 1.0 / (m - 1))) - 1;
        np = keep_largest(P, np, m, ref, k < np ? k : np);
    }
    e->n_front = np;
    e->front = P;
    box_list b = {m, 0, 0, NULL, NULL};
    double *Q = hpo_xmalloc((np ? np : 1) * (size_t)m * sizeof *Q), lo[TUN_MAX_OBJECTIVES], hi[TUN_MAX_OBJECTIVES];
    memcpy(Q, P, np * (size_t)m * sizeof *Q);
    size_t count = 0;
    decompose(Q, np, m, m, ref, lo, hi, &b, &count, SIZE_MAX);
    free(Q);
    e->n_boxes = (int)b.n;
    e->lo = b.lo;
    e->hi = b.hi;
    /* per objective, the finite bounds' sorted values, and each box's
     * bounds as indices into them (-1: -inf) */
    e->box = hpo_xmalloc(b.n * 2 * (size_t)m * sizeof *e->box);
    for (int k = 0; k < m; k++) {
        double *g = hpo_xmalloc((2 * b.n + 1) * sizeof *g);
        int ng = 0;
        for (size_t i = 0; i < b.n; i++) {
            if (isfinite(b.lo[i * (size_t)m + (size_t)k])) g[ng++] = b.lo[i * (size_t)m + (size_t)k];
            g[ng++] = b.hi[i * (size_t)m + (size_t)k];
        }
        qsort(g, (size_t)ng, sizeof *g, cmp_double);
        int u = 0;
        for (int i = 0; i < ng; i++)
            if (u == 0 || g[i] != g[u - 1]) g[u++] = g[i];
        e->grid[k] = g;
        e->n_grid[k] = u;
        for (size_t i = 0; i < b.n; i++) {
            double l = b.lo[i * (size_t)m + (size_t)k], h = b.hi[i * (size_t)m + (size_t)k];
            e->box[(i * (size_t)m + (size_t)k) * 2] = isfinite(l) ? grid_index(g, u, l) : -1;
            e->box[(i * (size_t)m + (size_t)k) * 2 + 1] = grid_index(g, u, h);
        }
        e->lg[k] = hpo_xmalloc((size_t)u * sizeof *e->lg[k]);
        e->dlm[k] = hpo_xmalloc((size_t)u * sizeof *e->dlm[k]);
        e->dls[k] = hpo_xmalloc((size_t)u * sizeof *e->dls[k]);
    }
    e->term = hpo_xmalloc((b.n ? b.n : 1) * sizeof *e->term);
    return 0;
}

void tun_ehvi_clear(tun_ehvi *e) {
    if (!e) return;
    for (int k = 0; k < TUN_MAX_OBJECTIVES; k++) {
        free(e->grid[k]);
        free(e->lg[k]);
        free(e->dlm[k]);
        free(e->dls[k]);
    }
    free(e->front);
    free(e->lo);
    free(e->hi);
    free(e->box);
    free(e->term);
    memset(e, 0, sizeof *e);
}

/* ---- the expectation --------------------------------------------------- */

/* log(1 - exp(x)) for x < 0 (Maechler 2012). */
static double log1mexp_neg(double x) { return x > -0.6931471805599453 ? log(-expm1(x)) : log1p(-exp(x)); }

#define MIN_VAR 1e-12

double tun_ehvi_log(tun_ehvi *e, const double *mu, const double *var, double *dmu, double *dvar) {
    int m = e->m;
    double s[TUN_MAX_OBJECTIVES];
    /* log g(c) = log s + log h((c - mu)/s) at every bound, with its
     * derivatives in mu and in s */
    for (int k = 0; k < m; k++) {
        s[k] = sqrt(var[k] > MIN_VAR ? var[k] : MIN_VAR);
        for (int j = 0; j < e->n_grid[k]; j++) {
            double z = (e->grid[k][j] - mu[k]) / s[k], dl;
            e->lg[k][j] = log(s[k]) + tun_log_h(z, &dl);
            e->dlm[k][j] = -dl / s[k];
            e->dls[k][j] = (1.0 - z * dl) / s[k];
        }
    }
    /* per box, the sum over objectives of log(g(u) - g(l)) */
    double top = -INFINITY;
    for (int i = 0; i < e->n_boxes; i++) {
        double t = 0;
        for (int k = 0; k < m; k++) {
            const int *b = e->box + ((size_t)i * (size_t)m + (size_t)k) * 2;
            double lu = e->lg[k][b[1]];
            t += b[0] < 0 ? lu : lu + log1mexp_neg(e->lg[k][b[0]] - lu);
        }
        e->term[i] = t;
        top = fmax(top, t);
    }
    if (!isfinite(top)) { /* no box with volume: nothing to gain anywhere */
        if (dmu) memset(dmu, 0, (size_t)m * sizeof *dmu);
        if (dvar) memset(dvar, 0, (size_t)m * sizeof *dvar);
        return -INFINITY;
    }
    double sum = 0;
    for (int i = 0; i < e->n_boxes; i++) sum += exp(e->term[i] - top);
    double v = top + log(sum);
    if (!dmu && !dvar) return v;
    double gm[TUN_MAX_OBJECTIVES] = {0}, gs[TUN_MAX_OBJECTIVES] = {0};
    for (int i = 0; i < e->n_boxes; i++) {
        double w = exp(e->term[i] - v); /* the box's share of the expectation */
        if (w == 0) continue;
        for (int k = 0; k < m; k++) {
            const int *b = e->box + ((size_t)i * (size_t)m + (size_t)k) * 2;
            double am = e->dlm[k][b[1]], as = e->dls[k][b[1]];
            if (b[0] >= 0) { /* d log(g_u - g_l) = (d log g_u - r d log g_l) / (1 - r), r = g_l / g_u */
                double r = exp(e->lg[k][b[0]] - e->lg[k][b[1]]);
                am = (am - r * e->dlm[k][b[0]]) / (1 - r);
                as = (as - r * e->dls[k][b[0]]) / (1 - r);
            }
            gm[k] += w * am;
            gs[k] += w * as;
        }
    }
    for (int k = 0; k < m; k++) {
        if (dmu) dmu[k] = gm[k];
        if (dvar) dvar[k] = var[k] > MIN_VAR ? gs[k] / (2 * s[k]) : 0.0;
    }
    return v;
}

double tun_ehvi_mc_ref(const double *F, size_t n, int m, const double *ref, const double *mu, const double *var,
                       int n_samples, hpo_rng *rng, double *std_err) {
    double *P = hpo_xmalloc((n + 1) * (size_t)m * sizeof *P);
    if (n) memcpy(P, F, n * (size_t)m * sizeof *P);
    double base = tun_hypervolume(F, n, m, ref), sum = 0, sum2 = 0;
    for (int i = 0; i < n_samples; i++) {
        for (int k = 0; k < m; k++) P[n * (size_t)m + (size_t)k] = mu[k] + sqrt(var[k]) * hpo_rng_normal(rng);
        double d = tun_hypervolume(P, n + 1, m, ref) - base;
        sum += d;
        sum2 += d * d;
    }
    free(P);
    double mean = sum / n_samples;
    if (std_err) *std_err = sqrt(fmax(0.0, sum2 / n_samples - mean * mean) / n_samples);
    return mean;
}
