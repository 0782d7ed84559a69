/*
 * pareto.c - multi-objective geometry: domination (plain and constrained),
 * non-dominated sorting (ENS-BS), crowding distance and the exact hypervolume.
 * Everything minimises; points are rows of m doubles.
 *
 * Hypervolume: only points strictly better than the reference point in
 * every objective count. m = 1 is a length, m = 2 a sweep over the points
 * sorted by the first objective (O(n log n)), m = 3 slices along the third
 * objective with a 2-D sweep per slice (O(n^2 log n)), m >= 4 WFG (While,
 * Bradstreet and Barone 2012): the sum of each point's exclusive volume,
 * its box less the volume of the later points limited to it, recursing
 * down to the 3-D case. tun_hypervolume_ref counts the cells of the grid the
 * points' coordinates draw (exact, O(n^(m+1))): the tests' naive reference.
 */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "keyed_sort.h"
#include "tuners_internal.h"

int tun_dominates(const double *a, const double *b, int m) {
    int better = 0;
    for (int k = 0; k < m; k++) {
        if (a[k] > b[k]) return 0;
        if (a[k] < b[k]) better = 1;
    }
    return better;
}

/* A missing violation (NaN) is the worst: as infinitely infeasible. */
static double viol_of(const double *viol, size_t i) {
    if (!viol) return 0.0;
    return isnan(viol[i]) ? INFINITY : viol[i];
}

int tun_dominates_constrained(const double *a, double va, const double *b, double vb, int m) {
    if (isnan(va)) va = INFINITY;
    if (isnan(vb)) vb = INFINITY;
    if (va <= 0 && vb <= 0) return tun_dominates(a, b, m);
    if (va <= 0) return 1;  /* feasible over infeasible */
    if (vb <= 0) return 0;
    return va < vb;         /* both infeasible: the smaller violation */
}

static int dom(const double *F, const double *viol, int m, size_t i, size_t j) {
    if (!viol) return tun_dominates(F + i * (size_t)m, F + j * (size_t)m, m);
    return tun_dominates_constrained(F + i * (size_t)m, viol_of(viol, i), F + j * (size_t)m,
                                     viol_of(viol, j), m);
}

/* A point in the order ENS visits them: by violation (constrained), then
 * lexicographically by its values, then by index. A point can only be
 * dominated by points before it in this order. */
typedef struct ens_key {
    double viol;
    const double *row;
    int m;
    size_t i;
} ens_key;

static int cmp_ens(const void *a, const void *b) {
    const ens_key *x = a, *y = b;
    if (x->viol != y->viol) return x->viol < y->viol ? -1 : 1;
    for (int k = 0; k < x->m; k++)
        if (x->row[k] != y->row[k]) return x->row[k] < y->row[k] ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

int tun_nondominated_sort(const double *F, const double *viol, size_t n, int m, int *rank) {
    if (n == 0) return 0;
    /* ENS-BS (Zhang et al. 2015): in that order, each point joins the first
     * front none of whose members dominates it, found by binary search: a
     * point dominated by a member of front k is dominated by a member of
     * every front before k. O(n) memory. With 2 objectives (no
     * violations) the members of a front, in that order, have f2 falling:
     * a point comes after them (f1 no smaller), so only the last, of the
     * smallest f2, can dominate it, and the sort is O(n log n) (a rung of
     * MO-ASHA sorted at each report: 40 ms at 5,000 trials before). */
    ens_key *key = hpo_xmalloc(n * sizeof *key);
    size_t *head = hpo_xmalloc(n * sizeof *head), *next = hpo_xmalloc(n * sizeof *next);
    for (size_t i = 0; i < n; i++) key[i] = (ens_key){viol_of(viol, i), F + i * (size_t)m, m, i};
    qsort(key, n, sizeof *key, cmp_ens);
    size_t n_fronts = 0;
    for (size_t a = 0; a < n; a++) {
        size_t p = key[a].i, lo = 0, hi = n_fronts;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2, q = head[mid];
            int beaten = 0;
            if (m == 2 && !viol) /* the front's last member has its smallest f2: it alone can dominate p */
                beaten = q != SIZE_MAX && dom(F, viol, m, q, p);
            else
                for (; q != SIZE_MAX && !beaten; q = next[q]) beaten = dom(F, viol, m, q, p);
            if (beaten)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == n_fronts) head[n_fronts++] = SIZE_MAX;
        rank[p] = (int)lo;
        next[p] = head[lo];
        head[lo] = p;
    }
    free(key);
    free(head);
    free(next);
    return (int)n_fronts;
}

int tun_nondominated_sort_ref(const double *F, const double *viol, size_t n, int m, int *rank) {
    /* peel: a point is on the current front when no point left dominates it */
    size_t left = n;
    for (size_t i = 0; i < n; i++) rank[i] = -1;
    int r = 0;
    while (left > 0) {
        int *mark = hpo_xcalloc(n, sizeof *mark);
        for (size_t i = 0; i < n; i++) {
            if (rank[i] >= 0) continue;
            int beaten = 0;
            for (size_t j = 0; j < n && !beaten; j++)
                if (j != i && rank[j] < 0 && dom(F, viol, m, j, i)) beaten = 1;
            mark[i] = !beaten;
        }
        for (size_t i = 0; i < n; i++)
            if (mark[i]) {
                rank[i] = r;
                left--;
            }
        free(mark);
        r++;
    }
    return r;
}

void tun_crowding_distance(const double *F, int m, const size_t *idx, size_t k, double *out) {
    for (size_t a = 0; a < k; a++) out[a] = 0.0;
    if (k <= 2) {
        for (size_t a = 0; a < k; a++) out[a] = INFINITY;
        return;
    }
    tun_keyed *key = hpo_xmalloc(k * sizeof *key);
    for (int o = 0; o < m; o++) {
        for (size_t a = 0; a < k; a++) {
            key[a].v = F[idx[a] * (size_t)m + (size_t)o];
            key[a].i = (int64_t)a;
        }
        tun_keyed_sort(key, k);
        double range = key[k - 1].v - key[0].v;
        if (!(range > 0)) continue; /* all equal here: no ends (Optuna's rule), nothing to add */
        out[key[0].i] = INFINITY;
        out[key[k - 1].i] = INFINITY;
        if (!isfinite(range)) continue;
        for (size_t a = 1; a + 1 < k; a++)
            out[key[a].i] += (key[a + 1].v - key[a - 1].v) / range;
    }
    free(key);
}

/* ---- hypervolume ---- */

static int cmp_first(const void *a, const void *b) {
    const double *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* 2-D: P holds n rows of 2 (sorted in place by the first objective). */
static double hv2(double *P, size_t n, const double *ref) {
    qsort(P, n, 2 * sizeof *P, cmp_first);
    double v = 0.0, y = ref[1];
    for (size_t i = 0; i < n; i++) {
        if (P[2 * i + 1] < y) {
            v += (ref[0] - P[2 * i]) * (y - P[2 * i + 1]);
            y = P[2 * i + 1];
        }
    }
    return v;
}

static int cmp_third(const void *a, const void *b) {
    const double *x = a, *y = b;
    return (x[2] > y[2]) - (x[2] < y[2]);
}

/* 3-D: slices along the third objective. P holds n rows of 3 (sorted in place). */
static double hv3(double *P, size_t n, const double *ref) {
    if (n == 0) return 0.0;
    qsort(P, n, 3 * sizeof *P, cmp_third);
    double *Q = hpo_xmalloc(2 * n * sizeof *Q), v = 0.0;
    for (size_t k = 0; k < n; k++) {
        double z1 = k + 1 < n ? P[3 * (k + 1) + 2] : ref[2];
        if (z1 <= P[3 * k + 2]) continue; /* an empty slice: equal z */
        for (size_t i = 0; i <= k; i++) {
            Q[2 * i] = P[3 * i];
            Q[2 * i + 1] = P[3 * i + 1];
        }
        v += hv2(Q, k + 1, ref) * (z1 - P[3 * k + 2]);
    }
    free(Q);
    return v;
}

static double box(const double *p, const double *ref, int m) {
    double v = 1.0;
    for (int k = 0; k < m; k++) v *= ref[k] - p[k];
    return v;
}

/* Keeps the non-dominated rows of P (n rows of m; duplicates kept once). */
static size_t nondominated(double *P, size_t n, int m) {
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        const double *p = P + i * (size_t)m;
        int drop = 0;
        for (size_t j = 0; j < n && !drop; j++) {
            if (j == i) continue;
            const double *q = P + j * (size_t)m;
            if (tun_dominates(q, p, m) || (j < i && memcmp(q, p, (size_t)m * sizeof *p) == 0)) drop = 1;
        }
        if (!drop) memmove(P + out++ * (size_t)m, p, (size_t)m * sizeof *p);
    }
    return out;
}

static double wfg(double *P, size_t n, int m, const double *ref);

/* The volume only P[i] dominates among P[i..n). */
static double exclusive(const double *P, size_t n, size_t i, int m, const double *ref) {
    const double *p = P + i * (size_t)m;
    size_t k = n - i - 1;
    double v = box(p, ref, m);
    if (k == 0) return v;
    double *L = hpo_xmalloc(k * (size_t)m * sizeof *L);
    for (size_t j = 0; j < k; j++)
        for (int o = 0; o < m; o++) {
            double q = P[(i + 1 + j) * (size_t)m + (size_t)o];
            L[j * (size_t)m + (size_t)o] = q > p[o] ? q : p[o];
        }
    size_t kl = nondominated(L, k, m);
    v -= wfg(L, kl, m, ref);
    free(L);
    return v;
}

/* P: n rows of m, every row strictly better than ref (modified in place). */
static double wfg(double *P, size_t n, int m, const double *ref) {
    if (n == 0) return 0.0;
    if (m == 1) {
        double best = P[0];
        for (size_t i = 1; i < n; i++) best = P[i] < best ? P[i] : best;
        return ref[0] - best;
    }
    if (m == 2) return hv2(P, n, ref);
    if (m == 3) return hv3(P, n, ref);
    /* worst first in the last objective: the limited sets stay small */
    tun_keyed_sort_rows(P, n, m, m - 1, 1);
    double v = 0.0;
    for (size_t i = 0; i < n; i++) v += exclusive(P, n, i, m, ref);
    return v;
}

/* Copies the rows of F strictly better than ref in every objective. */
static size_t inside(const double *F, size_t n, int m, const double *ref, double *P) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const double *p = F + i * (size_t)m;
        int in = 1;
        for (int o = 0; o < m && in; o++) in = p[o] < ref[o];
        if (in) memcpy(P + k++ * (size_t)m, p, (size_t)m * sizeof *P);
    }
    return k;
}

double tun_hypervolume(const double *F, size_t n, int m, const double *ref) {
    if (n == 0 || m < 1) return 0.0;
    double *P = hpo_xmalloc(n * (size_t)m * sizeof *P);
    size_t k = inside(F, n, m, ref, P);
    if (m >= 4) k = nondominated(P, k, m);
    double v = wfg(P, k, m, ref);
    free(P);
    return v;
}

double tun_hypervolume_ref(const double *F, size_t n, int m, const double *ref) {
    if (m > TUN_MAX_OBJECTIVES) return NAN;
    if (n == 0 || m < 1) return 0.0;
    double *P = hpo_xmalloc(n * (size_t)m * sizeof *P);
    size_t k = inside(F, n, m, ref, P);
    if (k == 0) {
        free(P);
        return 0.0;
    }
    /* the grid: per objective the sorted coordinates of the points and ref */
    double *g = hpo_xmalloc((size_t)m * (k + 1) * sizeof *g);
    for (int o = 0; o < m; o++) {
        double *c = g + (size_t)o * (k + 1);
        for (size_t i = 0; i < k; i++) c[i] = P[i * (size_t)m + (size_t)o];
        c[k] = ref[o];
        for (size_t a = 1; a <= k; a++) /* insertion sort: k is small here */
            for (size_t b = a; b > 0 && c[b - 1] > c[b]; b--) {
                double t = c[b];
                c[b] = c[b - 1];
                c[b - 1] = t;
            }
    }
    size_t cell[TUN_MAX_OBJECTIVES] = {0};
    double v = 0.0;
    for (;;) {
        /* the cell [g[cell], g[cell + 1]) is dominated when a point lies below its corner */
        double vol = 1.0, corner[TUN_MAX_OBJECTIVES];
        for (int o = 0; o < m; o++) {
            const double *c = g + (size_t)o * (k + 1);
            corner[o] = c[cell[o]];
            vol *= c[cell[o] + 1] - c[cell[o]];
        }
        if (vol > 0) {
            for (size_t i = 0; i < k; i++) {
                int below = 1;
                for (int o = 0; o < m && below; o++) below = P[i * (size_t)m + (size_t)o] <= corner[o];
                if (below) {
                    v += vol;
                    break;
                }
            }
        }
        int o = 0;
        while (o < m && ++cell[o] == k) cell[o++] = 0;
        if (o == m) break;
    }
    free(g);
    free(P);
    return v;
}

int tun_hv_contributions_affordable(size_t n, int m) { return pow((double)n, m) <= 1e7; }

int tun_hypervolume_affordable(size_t n, int m) { return m <= 3 || pow((double)n, m - 2) <= 1e7; }

void tun_hv_greedy(const double *F, size_t n, int m, const double *ref, size_t k, size_t *out) {
    char *taken = hpo_xcalloc(n ? n : 1, 1);
    double *S = hpo_xmalloc((k ? k : 1) * (size_t)m * sizeof *S), hv_sel = 0;
    for (size_t s = 0; s < k && s < n; s++) {
        size_t best = n;
        double best_gain = 0.0;
        for (size_t i = 0; i < n; i++) {
            if (taken[i]) continue;
            memcpy(S + s * (size_t)m, F + i * (size_t)m, (size_t)m * sizeof *S);
            double gain = tun_hypervolume(S, s + 1, m, ref) - hv_sel;
            if (best == n || gain > best_gain) best = i, best_gain = gain;
        }
        taken[best] = 1;
        memcpy(S + s * (size_t)m, F + best * (size_t)m, (size_t)m * sizeof *S);
        hv_sel = tun_hypervolume(S, s + 1, m, ref);
        out[s] = best;
    }
    free(S);
    free(taken);
}

void tun_hv_contributions(const double *F, size_t n, int m, const double *ref, double *out) {
    double total = tun_hypervolume(F, n, m, ref);
    double *G = hpo_xmalloc((n ? n : 1) * (size_t)m * sizeof *G);
    for (size_t j = 0; j < n; j++) {
        size_t g = 0;
        for (size_t i = 0; i < n; i++)
            if (i != j) memcpy(G + g++ * (size_t)m, F + i * (size_t)m, (size_t)m * sizeof *G);
        out[j] = total - tun_hypervolume(G, n - 1, m, ref);
    }
    free(G);
}
