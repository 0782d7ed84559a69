/* importance.c - hyperparameter importance (see tuners.h): permutation
 * importance on the out-of-bag samples of a small random forest.
 *
 * Why this method: it needs nothing but the finished trials, works for every
 * parameter type (a choice is its index, a split can isolate one value in two
 * cuts), is cheap (about 60 ms for 10,000 trials) and its figure has a plain
 * meaning: how much worse the forest predicts the objective when a
 * parameter's values are shuffled among the trials it did not train on.
 * fANOVA would give marginal variances instead; with trees already built it
 * could follow, behind the same function.
 *
 * Forest: TREES regression trees, each on a bootstrap of at most MAX_BOOT
 * trials, grown to MAX_DEPTH or MIN_LEAF trials, splitting on the cut that
 * reduces the squared error most among a random subset of the parameters.
 * Under TUN_IMPORTANCE_OOB_FROM trials a bootstrap leaves too few out of
 * the bag to measure anything (every share read 0 with 5 trials): each
 * tree is grown on all of them to leaves of one, and the shuffles are
 * measured on the same trials (in-sample), as Optuna's evaluators, which
 * answer from 2 trials on, fit theirs.
 * An inactive (NaN) value is mapped below every real value, so "inactive"
 * is a side of a split like any other. Conditional parameters: permuting a
 * parent moves its children with it, a child is permuted only where it is
 * active (see shuffle_group), else a child's activity, a copy of its
 * parent's value, would take the parent's credit. Everything is drawn from
 * hpo_rng_derive(seed, tree, ...): same input and seed, same answer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tuners.h"

enum { TREES = 32, MAX_DEPTH = 12, MIN_LEAF = 3, MAX_BOOT = 512, MAX_OOB = 512 };
#define INACTIVE (-1e300)

typedef struct node {
    int feature;      /* -1 for a leaf */
    double threshold; /* x[feature] <= threshold goes left */
    int left, right;
    double value;     /* mean of the leaf's targets */
} node;

typedef struct tree {
    node *nodes;
    int n, cap;
} tree;

typedef struct pair {
    double x, y;
} pair;

typedef struct forest_ctx {
    const double *X; /* n rows of d, NaN already mapped to INACTIVE */
    const double *y;
    int d;
    int min_leaf;    /* MIN_LEAF, or 1 for a handful of trials */
    pair *scratch;   /* room for MAX_BOOT pairs */
    int *features;   /* d */
    hpo_rng rng;
} forest_ctx;

static int cmp_pair(const void *a, const void *b) {
    double u = ((const pair *)a)->x, v = ((const pair *)b)->x;
    return (u > v) - (u < v);
}

static int tree_push(tree *t) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->nodes = hpo_xrealloc(t->nodes, (size_t)t->cap * sizeof *t->nodes);
    }
    memset(&t->nodes[t->n], 0, sizeof t->nodes[t->n]);
    t->nodes[t->n].feature = -1;
    return t->n++;
}

/* Best cut of feature f over rows idx[0..m): fills *gain (reduction of the
 * sum of squared errors) and *thr; *gain stays 0 when no cut separates two
 * leaves of c->min_leaf rows. */
static void best_cut(forest_ctx *c, const int *idx, int m, int f, double *gain, double *thr) {
    pair *p = c->scratch;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < m; i++) {
        p[i].x = c->X[(size_t)idx[i] * (size_t)c->d + (size_t)f];
        p[i].y = c->y[idx[i]];
        sum += p[i].y;
        sum2 += p[i].y * p[i].y;
    }
    *gain = 0;
    qsort(p, (size_t)m, sizeof *p, cmp_pair);
    double base = sum2 - sum * sum / m, ls = 0, ls2 = 0;
    for (int i = 0; i < m - 1; i++) {
        ls += p[i].y;
        ls2 += p[i].y * p[i].y;
        int nl = i + 1, nr = m - nl;
        if (nl < c->min_leaf || nr < c->min_leaf || p[i].x == p[i + 1].x) continue;
        double rs = sum - ls, rs2 = sum2 - ls2;
        double sse = (ls2 - ls * ls / nl) + (rs2 - rs * rs / nr);
        double g = base - sse;
        if (g > *gain + 1e-12 * fabs(base)) {
            *gain = g;
            /* the midpoint, except next to INACTIVE where it would overflow */
            *thr = p[i].x == INACTIVE ? INACTIVE : 0.5 * (p[i].x + p[i + 1].x);
        }
    }
}

static int grow(forest_ctx *c, tree *t, int *idx, int m, int depth) {
    int id = tree_push(t);
    double mean = 0;
    for (int i = 0; i < m; i++) mean += c->y[idx[i]];
    mean /= m;
    t->nodes[id].value = mean;
    if (depth >= MAX_DEPTH || m < 2 * c->min_leaf) return id;
    /* a random subset of about half the parameters (all of them when d <= 3) */
    int k = c->d <= 3 ? c->d : (c->d + 1) / 2;
    for (int i = 0; i < c->d; i++) c->features[i] = i;
    for (int i = 0; i < k; i++) {
        int j = i + (int)hpo_rng_below(&c->rng, (uint64_t)(c->d - i));
        int tmp = c->features[i];
        c->features[i] = c->features[j];
        c->features[j] = tmp;
    }
    int best_f = -1;
    double best_gain = 0, best_thr = 0;
    for (int i = 0; i < k; i++) {
        double g, thr = 0;
        best_cut(c, idx, m, c->features[i], &g, &thr);
        if (g > best_gain) {
            best_gain = g;
            best_thr = thr;
            best_f = c->features[i];
        }
    }
    if (best_f < 0) return id;
    /* partition idx in place: <= threshold first */
    int lo = 0;
    for (int i = 0; i < m; i++) {
        if (c->X[(size_t)idx[i] * (size_t)c->d + (size_t)best_f] <= best_thr) {
            int tmp = idx[lo];
            idx[lo++] = idx[i];
            idx[i] = tmp;
        }
    }
    if (lo == 0 || lo == m) return id;
    int left = grow(c, t, idx, lo, depth + 1);
    int right = grow(c, t, idx + lo, m - lo, depth + 1);
    t->nodes[id].feature = best_f;
    t->nodes[id].threshold = best_thr;
    t->nodes[id].left = left;
    t->nodes[id].right = right;
    return id;
}

static double predict(const tree *t, const double *x) {
    int i = 0;
    while (t->nodes[i].feature >= 0)
        i = x[t->nodes[i].feature] <= t->nodes[i].threshold ? t->nodes[i].left : t->nodes[i].right;
    return t->nodes[i].value;
}

/* Mean squared error of t over the rows oob[0..m) of X (row stride d). */
static double oob_mse(const tree *t, const double *X, int d, const double *y, const int *oob, int m) {
    double s = 0;
    for (int i = 0; i < m; i++) {
        double e = predict(t, X + (size_t)oob[i] * (size_t)d) - y[oob[i]];
        s += e * e;
    }
    return s / m;
}

/* Whether parameter i is f or lies below it in the condition tree. */
static int in_group(const tun_space *s, int f, int i) {
    for (int depth = 0; i >= 0 && depth <= s->n; depth++, i = s->params[i].parent)
        if (i == f) return 1;
    return 0;
}

/* Shuffles parameter f among the m rows of Xp where it is active, moving
 * the parameters conditional on it along (they exist only through it): so
 * a parent is credited with what its children's activity explains, and a
 * child only with what its own value explains where it exists. */
static void shuffle_group(const tun_space *s, int f, double *Xp, int d, int m, int *rows,
                          hpo_rng *rng) {
    int k = 0;
    for (int i = 0; i < m; i++)
        if (Xp[(size_t)i * (size_t)d + (size_t)f] != INACTIVE) rows[k++] = i;
    for (int i = k - 1; i > 0; i--) { /* Fisher-Yates over the active rows */
        int j = (int)hpo_rng_below(rng, (uint64_t)i + 1);
        double *a = Xp + (size_t)rows[i] * (size_t)d, *b = Xp + (size_t)rows[j] * (size_t)d;
        for (int g = 0; g < d; g++) {
            if (!in_group(s, f, g)) continue;
            double tmp = a[g];
            a[g] = b[g];
            b[g] = tmp;
        }
    }
}

int tun_importance(const tun_space *s, const double *X, const double *y, size_t n, uint64_t seed,
                   double *out) {
    if (!s || !X || !y || !out || s->n < 1 || n < 2 || n > 100000000) return HPO_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(y[i])) return HPO_EINVAL;
    int d = s->n, rc = 0;
    size_t nn = n;
    double *Xc = hpo_xmalloc(nn * (size_t)d * sizeof *Xc);
    double *Xp = hpo_xmalloc((size_t)MAX_OOB * (size_t)d * sizeof *Xp);
    double *imp = hpo_xcalloc((size_t)d, sizeof *imp);
    double *yo = hpo_xmalloc((size_t)MAX_OOB * sizeof *yo);
    int *boot = hpo_xmalloc((size_t)MAX_BOOT * sizeof *boot);
    int *oob = hpo_xmalloc((size_t)MAX_OOB * sizeof *oob);
    int *seq = hpo_xmalloc((size_t)MAX_OOB * sizeof *seq);
    int *rows = hpo_xmalloc((size_t)MAX_OOB * sizeof *rows);
    unsigned char *in_bag = hpo_xmalloc(nn);
    /* values beyond 2^500 scaled down by a power of two (exactly): their
     * squared errors would overflow, and every importance read 0; the
     * shares are the same at any scale */
    double big = 0;
    for (size_t i = 0; i < nn; i++) big = fmax(big, fabs(y[i]));
    int e = 0;
    if (big > 0x1p500) frexp(big, &e);
    double *ys = hpo_xmalloc(nn * sizeof *ys);
    for (size_t i = 0; i < nn; i++) ys[i] = ldexp(y[i], -e);
    y = ys;
    int in_sample = nn < TUN_IMPORTANCE_OOB_FROM;
    forest_ctx c = {.X = Xc, .y = y, .d = d, .min_leaf = in_sample ? 1 : MIN_LEAF};
    c.scratch = hpo_xmalloc((size_t)MAX_BOOT * sizeof *c.scratch);
    c.features = hpo_xmalloc((size_t)d * sizeof *c.features);
    for (size_t i = 0; i < nn * (size_t)d; i++) Xc[i] = isnan(X[i]) ? INACTIVE : X[i];

    double mean = 0, var = 0;
    for (size_t i = 0; i < nn; i++) mean += y[i];
    mean /= (double)nn;
    for (size_t i = 0; i < nn; i++) var += (y[i] - mean) * (y[i] - mean);
    int trees_used = 0;
    if (var > 0) {
        int m_boot = nn < MAX_BOOT ? (int)nn : MAX_BOOT;
        for (int k = 0; k < TREES; k++) {
            hpo_rng_derive(&c.rng, seed, 0x1b9f0a11u, (uint64_t)k);
            memset(in_bag, 0, nn);
            for (int i = 0; i < m_boot; i++) {
                boot[i] = in_sample ? i : (int)hpo_rng_below(&c.rng, nn);
                in_bag[boot[i]] = !in_sample; /* in-sample: every trial is measured too */
            }
            /* out-of-bag rows: all of them, or MAX_OOB drawn by reservoir */
            int m_oob = 0;
            size_t seen = 0;
            for (size_t i = 0; i < nn; i++) {
                if (in_bag[i]) continue;
                seen++;
                if (m_oob < MAX_OOB) {
                    oob[m_oob++] = (int)i;
                } else {
                    uint64_t r = hpo_rng_below(&c.rng, seen);
                    if (r < MAX_OOB) oob[r] = (int)i;
                }
            }
            if (m_oob < 2) continue;
            tree t = {0};
            grow(&c, &t, boot, m_boot, 0);
            /* the OOB rows, compacted, so a column can be shuffled in place */
            for (int i = 0; i < m_oob; i++) {
                memcpy(Xp + (size_t)i * (size_t)d, Xc + (size_t)oob[i] * (size_t)d,
                       (size_t)d * sizeof *Xp);
                yo[i] = y[oob[i]];
                seq[i] = i;
            }
            double base = oob_mse(&t, Xp, d, yo, seq, m_oob);
            for (int f = 0; f < d; f++) {
                shuffle_group(s, f, Xp, d, m_oob, rows, &c.rng);
                imp[f] += oob_mse(&t, Xp, d, yo, seq, m_oob) - base;
                for (int i = 0; i < m_oob; i++) /* restore the rows */
                    memcpy(Xp + (size_t)i * (size_t)d, Xc + (size_t)oob[i] * (size_t)d,
                           (size_t)d * sizeof *Xp);
            }
            free(t.nodes);
            trees_used++;
        }
    }
    double total = 0;
    for (int f = 0; f < d; f++) {
        imp[f] = trees_used && imp[f] > 0 ? imp[f] / trees_used : 0;
        total += imp[f];
    }
    for (int f = 0; f < d; f++) out[f] = total > 0 ? imp[f] / total : 0;
    free(ys);
    free(Xc);
    free(Xp);
    free(imp);
    free(yo);
    free(boot);
    free(oob);
    free(seq);
    free(rows);
    free(in_bag);
    free(c.scratch);
    free(c.features);
    return rc;
}
