/*
 * grid.c - grid search over the cartesian product of the discrete values of
 * every parameter (choices, bools, ints low..high by step, stepped floats),
 * respecting conditions.
 *
 * Design notes
 * - Conditions make the grid a forest rather than a box: a parameter's
 *   children only multiply the product for the parent values that enable
 *   them. For a node p, count(p) = sum over p's values v of the product of
 *   count(c) over the children c active at v (1 when none is). The space is
 *   the product of its roots' counts. A value that enables some child is
 *   "special" (weight w(v) = that product); every other value weighs 1, so a
 *   node costs O(#special values), not O(#values), which matters for an int
 *   with a million values.
 * - Grid points are numbered 0 .. N-1 by a mixed-radix code over that tree
 *   (decode/encode are inverses), so a configuration maps to its point in
 *   O(depth * specials) without enumerating the grid.
 * - Order: a pseudo-random permutation of 0 .. N-1 keyed by the seed (a
 *   4-round Feistel network with cycle walking; O(1) per position, no
 *   allocation of N entries). A trial gets the first point in that order not
 *   used by another present trial (running or finished), so the result
 *   depends only on seed and history, and parallel askers never collide.
 *   A present trial whose configuration is not a grid point (replayed from
 *   another sampler) uses none.
 * - Grids over TUN_GRID_MAX points are refused (HPO_ETOOLARGE); a float
 *   without a step cannot be gridded (HPO_EINVAL; tun_config_parse reports
 *   both with the field name first).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"

#define CAP ((uint64_t)TUN_GRID_MAX + 1)

typedef struct gnode {
    int64_t nvals;
    uint64_t count;
    int nchild;
    int *child;
    int nspec;
    int64_t *spec_k; /* sorted, unique value numbers that enable a child */
    uint64_t *spec_w;
} gnode;

typedef struct grid {
    const tun_space *s;
    gnode *nodes;
    int nroots;
    int roots[64];
    uint64_t total; /* saturated at CAP; 0 when a float has no step */
} grid;

static uint64_t mul_sat(uint64_t a, uint64_t b) {
    if (a == 0 || b == 0) return 0;
    if (a >= CAP || b >= CAP || a > CAP / b) return CAP;
    return a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b) {
    uint64_t c = a + b;
    return (c >= CAP || c < a) ? CAP : c;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Whether child c is enabled by value number k of its parent. */
static int enables(const tun_space *s, int c, int64_t k) {
    const tun_param *cp = &s->params[c];
    const tun_param *pp = &s->params[cp->parent];
    for (int j = 0; j < cp->n_parent_values; j++)
        if (tun_param_index_of(pp, cp->parent_values[j]) == k) return 1;
    return 0;
}

static void grid_close(grid *g) {
    if (!g->nodes) return;
    for (int i = 0; i < g->s->n; i++) {
        free(g->nodes[i].child);
        free(g->nodes[i].spec_k);
        free(g->nodes[i].spec_w);
    }
    free(g->nodes);
    g->nodes = NULL;
}

static void grid_init(grid *g, const tun_space *s) {
    int n = s->n;
    memset(g, 0, sizeof *g);
    g->s = s;
    g->nodes = hpo_xcalloc((size_t)n, sizeof *g->nodes);
    for (int i = 0; i < n; i++) {
        const tun_param *p = &s->params[i];
        g->nodes[i].nvals = tun_param_n_values(p);
        if (p->parent < 0) {
            g->roots[g->nroots++] = i;
        } else {
            gnode *pn = &g->nodes[p->parent];
            pn->child = hpo_xrealloc(pn->child, (size_t)(pn->nchild + 1) * sizeof(int));
            pn->child[pn->nchild++] = i;
            pn->spec_k = hpo_xrealloc(pn->spec_k, (size_t)(pn->nspec + p->n_parent_values) *
                                                      sizeof(int64_t));
            for (int j = 0; j < p->n_parent_values; j++)
                pn->spec_k[pn->nspec++] =
                    tun_param_index_of(&s->params[p->parent], p->parent_values[j]);
        }
    }
    /* children have larger indices than their parents: fill counts backwards */
    for (int i = n - 1; i >= 0; i--) {
        gnode *nd = &g->nodes[i];
        if (nd->nspec > 0) {
            qsort(nd->spec_k, (size_t)nd->nspec, sizeof(int64_t), cmp_i64);
            int u = 0;
            for (int j = 0; j < nd->nspec; j++)
                if (u == 0 || nd->spec_k[u - 1] != nd->spec_k[j]) nd->spec_k[u++] = nd->spec_k[j];
            nd->nspec = u;
            nd->spec_w = hpo_xmalloc((size_t)u * sizeof(uint64_t));
        }
        uint64_t count = nd->nvals > 0 ? (uint64_t)(nd->nvals - nd->nspec) : 0;
        if (count >= CAP) count = CAP;
        for (int j = 0; j < nd->nspec; j++) {
            uint64_t w = 1;
            for (int c = 0; c < nd->nchild; c++)
                if (enables(s, nd->child[c], nd->spec_k[j]))
                    w = mul_sat(w, g->nodes[nd->child[c]].count);
            nd->spec_w[j] = w;
            count = add_sat(count, w);
        }
        if (nd->nvals <= 0) count = 0;
        nd->count = count;
    }
    uint64_t total = 1;
    for (int r = 0; r < g->nroots; r++) total = mul_sat(total, g->nodes[g->roots[r]].count);
    /* a continuous float anywhere (even under a condition) makes the space no grid */
    for (int i = 0; i < n; i++)
        if (g->nodes[i].nvals <= 0) total = 0;
    g->total = total;
}

uint64_t tun_grid_size(const tun_space *s) {
    grid g;
    grid_init(&g, s);
    uint64_t total = g.total;
    grid_close(&g);
    return total;
}

static void decode_node(const grid *g, int p, uint64_t r, double *x) {
    const gnode *nd = &g->nodes[p];
    int64_t prev = 0, k = -1;
    uint64_t rest = 0;
    int special = 0;
    for (int j = 0; j < nd->nspec; j++) {
        uint64_t plain = (uint64_t)(nd->spec_k[j] - prev);
        if (r < plain) {
            k = prev + (int64_t)r;
            break;
        }
        r -= plain;
        if (r < nd->spec_w[j]) {
            k = nd->spec_k[j];
            rest = r;
            special = 1;
            break;
        }
        r -= nd->spec_w[j];
        prev = nd->spec_k[j] + 1;
    }
    if (k < 0) k = prev + (int64_t)r;
    x[p] = tun_param_value_at(&g->s->params[p], k);
    if (!special) return;
    for (int c = 0; c < nd->nchild; c++) {
        int ch = nd->child[c];
        if (!enables(g->s, ch, k)) continue;
        uint64_t cc = g->nodes[ch].count;
        decode_node(g, ch, rest % cc, x);
        rest /= cc;
    }
}

static void grid_decode(const grid *g, uint64_t idx, double *x) {
    for (int i = 0; i < g->s->n; i++) x[i] = NAN;
    for (int r = 0; r < g->nroots; r++) {
        uint64_t cc = g->nodes[g->roots[r]].count;
        decode_node(g, g->roots[r], idx % cc, x);
        idx /= cc;
    }
}

/* The point number of node p's subtree in x, -1 when x is off the grid. */
static int64_t encode_node(const grid *g, int p, const double *x) {
    const gnode *nd = &g->nodes[p];
    int64_t k = tun_param_index_of(&g->s->params[p], x[p]);
    if (k < 0) return -1;
    uint64_t off = (uint64_t)k;
    int special = 0;
    for (int j = 0; j < nd->nspec && nd->spec_k[j] <= k; j++) {
        if (nd->spec_k[j] == k)
            special = 1;
        else
            off += nd->spec_w[j] - 1;
    }
    if (!special) return (int64_t)off;
    uint64_t sub = 0, m = 1;
    for (int c = 0; c < nd->nchild; c++) {
        int ch = nd->child[c];
        if (!enables(g->s, ch, k)) continue;
        int64_t e = encode_node(g, ch, x);
        if (e < 0) return -1;
        sub += (uint64_t)e * m;
        m *= g->nodes[ch].count;
    }
    return (int64_t)(off + sub);
}

static int64_t grid_encode(const grid *g, const double *x) {
    uint64_t idx = 0, m = 1;
    for (int r = 0; r < g->nroots; r++) {
        int64_t e = encode_node(g, g->roots[r], x);
        if (e < 0) return -1;
        idx += (uint64_t)e * m;
        m *= g->nodes[g->roots[r]].count;
    }
    return (int64_t)idx;
}

/* ---- a keyed permutation of 0 .. n-1 ---- */

typedef struct perm {
    uint64_t n;
    int half;        /* bits per Feistel half */
    uint64_t key[4]; /* one per round */
} perm;

static void perm_init(perm *pm, uint64_t n, uint64_t seed) {
    hpo_rng rng;
    int bits = 2;
    while (bits < 62 && (1ULL << bits) < n) bits++;
    bits += bits & 1;
    pm->n = n;
    pm->half = bits / 2;
    hpo_rng_derive(&rng, seed, 0x67726964ULL /* "grid" */, 1);
    for (int i = 0; i < 4; i++) pm->key[i] = hpo_rng_u64(&rng);
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t perm_at(const perm *pm, uint64_t i) {
    uint64_t mask = (1ULL << pm->half) - 1;
    do {
        uint64_t l = i >> pm->half, r = i & mask;
        for (int k = 0; k < 4; k++) {
            uint64_t nl = r;
            r = l ^ (mix64(r ^ pm->key[k]) & mask);
            l = nl;
        }
        i = (l << pm->half) | r;
    } while (i >= pm->n); /* cycle walking stays inside 0 .. n-1 */
    return i;
}

static int in_sorted(const int64_t *a, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo] == v;
}

int tun_grid_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x) {
    grid g;
    int64_t *used = NULL, n_used = 0;
    perm pm;
    int rc;
    (void)rng; /* the order is keyed by the seed alone, not by the trial */

    grid_init(&g, t->space);
    if (g.total == 0) {
        rc = HPO_EINVAL;
        goto fail;
    }
    if (g.total > TUN_GRID_MAX) {
        rc = HPO_ETOOLARGE;
        goto fail;
    }
    used = hpo_xmalloc((size_t)(t->n_present + 1) * sizeof *used);
    for (int64_t k = 0; k < t->cap; k++) {
        const tun_trial_rec *r = &t->trials[k];
        if (!r->present || r->number == number) continue;
        int64_t e = grid_encode(&g, r->x);
        if (e >= 0) used[n_used++] = e;
    }
    qsort(used, (size_t)n_used, sizeof *used, cmp_i64);
    {
        int64_t u = 0;
        for (int64_t j = 0; j < n_used; j++)
            if (u == 0 || used[u - 1] != used[j]) used[u++] = used[j];
        n_used = u;
    }
    if ((uint64_t)n_used >= g.total) {
        rc = HPO_EEXHAUSTED;
        goto fail;
    }
    perm_init(&pm, g.total, t->cfg.seed);
    for (uint64_t i = 0; i < g.total; i++) {
        uint64_t idx = perm_at(&pm, i);
        if (in_sorted(used, n_used, (int64_t)idx)) continue;
        grid_decode(&g, idx, x);
        free(used);
        grid_close(&g);
        return 0;
    }
    rc = HPO_EINTERNAL; /* unreachable: fewer used points than grid points */
fail:
    free(used);
    grid_close(&g);
    return rc;
}
