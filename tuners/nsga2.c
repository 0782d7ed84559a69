/*
 * nsga2.c - the "nsga2" sampler: NSGA-II (Deb, Pratap, Agarwal and
 * Meyarivan 2002) for any number of objectives, with Optuna's constraint
 * semantics.
 *
 * - Generations by trial number: trial k belongs to generation k / P
 *   (P = "population_size", default 50). Generation 0 is random search.
 *   The parents of generation g are an elite of P trials chosen from the
 *   parents of generation g - 1 and the complete trials of generation
 *   g - 1 (warm-start priors join generation 0): whole non-domination
 *   fronts in order, the last one cut by crowding distance (larger first,
 *   then the smaller number). So the parents depend only on the history,
 *   and parallel askers of one generation share them. A generation whose
 *   predecessor has nothing complete yet (parallel workers still on it)
 *   uses what is complete; with no parent at all, random search.
 * - Constraints: when any complete trial told a violation, domination is
 *   Optuna's constrained domination (tun_dominates_constrained: feasible
 *   first, infeasible ones by the smaller violation, none told = infinite).
 * - A child: two binary tournaments (the lower rank wins, then the larger
 *   crowding distance, then the first drawn) give two parents; with
 *   "crossover_prob" (0.9) they cross, else the child is the first. Then
 *   every parameter, in the space's order (parents first), is set:
 *   inactive under the child's values so far -> NaN; otherwise the crossed
 *   value, or the value of whichever parent has one, or a random draw.
 *   Crossover "sbx" (the default): int and float parameters by simulated
 *   binary crossover (eta 15, each parameter crossed with probability 1/2)
 *   in the unit encoding (unit_scale.c: log where asked, bins for discrete
 *   values), choices and bools by uniform crossover; "uniform" (Optuna's
 *   default): every parameter from the second parent with
 *   "swapping_prob" (0.5), else the first.
 * - Mutation, per active parameter with "mutation_prob" (1 / the number of
 *   parameters, Optuna's default): with "sbx", ints and floats by
 *   polynomial mutation (eta 20) in the unit encoding; otherwise, and for
 *   choices and bools, a fresh random value (Optuna's mutation).
 * - A child equal to a present trial is drawn again (up to 32 times).
 *   Deterministic given the seed, the number and the history.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"

#define SBX_ETA 15.0
#define PM_ETA 20.0
#define MAX_RETRIES 32

typedef struct member {
    const tun_trial_rec *r;
    int rank;
    double crowd;
} member;

typedef struct by_crowd {
    double crowd;
    int64_t number;
    size_t i;
} by_crowd;

static int cmp_crowd(const void *a, const void *b) {
    const by_crowd *x = a, *y = b;
    if (x->crowd != y->crowd) return x->crowd > y->crowd ? -1 : 1;
    return (x->number > y->number) - (x->number < y->number);
}

/* Keeps the elite of pool[0..n) (at most P) in out, with ranks and
 * crowding distances; returns how many. */
static size_t elite(const tun_study *t, const tun_trial_rec **pool, size_t n, int P, member *out) {
    int m = t->n_obj, constrained = 0;
    if (n == 0) return 0;
    double *F = hpo_xmalloc(n * (size_t)m * sizeof *F), *viol = hpo_xmalloc(n * sizeof *viol);
    int *rank = hpo_xmalloc(n * sizeof *rank);
    for (size_t i = 0; i < n; i++) {
        memcpy(F + i * (size_t)m, pool[i]->values, (size_t)m * sizeof *F);
        viol[i] = pool[i]->violation;
        if (!isnan(viol[i])) constrained = 1;
    }
    int n_fronts = tun_nondominated_sort(F, constrained ? viol : NULL, n, m, rank);
    size_t *idx = hpo_xmalloc(n * sizeof *idx), n_out = 0;
    double *cd = hpo_xmalloc(n * sizeof *cd);
    by_crowd *key = hpo_xmalloc(n * sizeof *key);
    for (int f = 0; f < n_fronts && n_out < (size_t)P; f++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (rank[i] == f) idx[k++] = i;
        tun_crowding_distance(F, m, idx, k, cd);
        for (size_t a = 0; a < k; a++) key[a] = (by_crowd){cd[a], pool[idx[a]]->number, idx[a]};
        qsort(key, k, sizeof *key, cmp_crowd); /* whole fronts too: a stable order */
        for (size_t a = 0; a < k && n_out < (size_t)P; a++)
            out[n_out++] = (member){pool[key[a].i], f, key[a].crowd};
    }
    free(F);
    free(viol);
    free(rank);
    free(idx);
    free(cd);
    free(key);
    return n_out;
}

/* The generation a trial of the table counts in for `number`'s parents,
 * or -1: a complete trial other than `number` (priors join generation 0) */
static int64_t generation_of(const tun_trial_rec *r, int P, int64_t number) {
    if (!r->present || r->state != TUN_TRIAL_COMPLETE || r->number == number) return -1;
    return r->prior ? 0 : r->number / P;
}

/* The parents of generation g (room for P in par); returns how many. The
 * complete trials are grouped by generation in one pass over the table
 * (in its order), not one pass per generation: an ask at 8,000 trials of
 * population_size 2 scanned the table 4,000 times. */
static size_t parents_of(const tun_study *t, int P, int64_t g, int64_t number, member *par) {
    size_t *start = hpo_xcalloc((size_t)g + 2, sizeof *start), n_par = 0; /* generation h: [start[h], start[h+1]) */
    for (int64_t k = 0; k < t->cap; k++) {
        int64_t h = generation_of(&t->trials[k], P, number);
        if (h >= 0 && h < g) start[h + 2]++;
    }
    for (int64_t h = 0; h < g; h++) start[h + 2] += start[h + 1];
    const tun_trial_rec **by_gen = hpo_xmalloc((start[g + 1] ? start[g + 1] : 1) * sizeof *by_gen);
    for (int64_t k = 0; k < t->cap; k++) { /* start[h + 1] runs from generation h's start to its end */
        int64_t h = generation_of(&t->trials[k], P, number);
        if (h >= 0 && h < g) by_gen[start[h + 1]++] = &t->trials[k];
    }
    const tun_trial_rec **pool = hpo_xmalloc(((size_t)P + start[g + 1] + 1) * sizeof *pool);
    for (int64_t h = 0; h < g; h++) {
        size_t n = 0;
        for (size_t i = 0; i < n_par; i++) pool[n++] = par[i].r;
        for (size_t i = start[h]; i < start[h + 1]; i++) pool[n++] = by_gen[i];
        n_par = elite(t, pool, n, P, par);
    }
    free(pool);
    free(by_gen);
    free(start);
    return n_par;
}

static const member *tournament(const member *par, size_t n, hpo_rng *rng) {
    const member *a = &par[hpo_rng_below(rng, n)], *b = &par[hpo_rng_below(rng, n)];
    if (b->rank < a->rank || (b->rank == a->rank && b->crowd > a->crowd)) return b;
    return a;
}

static int numeric(const tun_param *p) { return p->type == TUN_INT || p->type == TUN_FLOAT; }

/* Simulated binary crossover of y1, y2 in [0, 1] (Deb and Agrawal 1995,
 * the bounded form of Deb's NSGA-II code): one of the two children. */
static double sbx(double y1, double y2, hpo_rng *rng) {
    if (fabs(y1 - y2) < 1e-14) return y1;
    if (y1 > y2) {
        double tmp = y1;
        y1 = y2;
        y2 = tmp;
    }
    double u = hpo_rng_uniform(rng), e = 1.0 / (SBX_ETA + 1), d = y2 - y1;
    double beta = 1 + 2 * y1 / d, alpha = 2 - pow(beta, -(SBX_ETA + 1));
    double bq = u <= 1 / alpha ? pow(u * alpha, e) : pow(1 / (2 - u * alpha), e);
    double c1 = 0.5 * ((y1 + y2) - bq * d);
    beta = 1 + 2 * (1 - y2) / d;
    alpha = 2 - pow(beta, -(SBX_ETA + 1));
    bq = u <= 1 / alpha ? pow(u * alpha, e) : pow(1 / (2 - u * alpha), e);
    double c2 = 0.5 * ((y1 + y2) + bq * d);
    double c = hpo_rng_uniform(rng) < 0.5 ? c1 : c2;
    return c < 0 ? 0 : c > 1 ? 1 : c;
}

/* Polynomial mutation of y in [0, 1] (Deb's bounded form). */
static double poly_mutate(double y, hpo_rng *rng) {
    double u = hpo_rng_uniform(rng), p = 1.0 / (PM_ETA + 1), dq;
    if (u < 0.5) {
        double v = 2 * u + (1 - 2 * u) * pow(1 - y, PM_ETA + 1);
        dq = pow(v, p) - 1;
    } else {
        double v = 2 * (1 - u) + 2 * (u - 0.5) * pow(y, PM_ETA + 1);
        dq = 1 - pow(v, p);
    }
    y += dq;
    return y < 0 ? 0 : y > 1 ? 1 : y;
}

/* The crossed value of parameter i (NaN when neither parent has one). */
static double cross(const tun_study *t, int i, const double *a, const double *b, hpo_rng *rng) {
    const tun_param *p = &t->space->params[i];
    if (isnan(a[i]) || isnan(b[i])) return isnan(a[i]) ? b[i] : a[i];
    if (t->cfg.nsga_crossover == TUN_XOVER_SBX && numeric(p)) {
        if (hpo_rng_uniform(rng) >= 0.5) return a[i];
        return tun_unit_decode(p, sbx(tun_unit_encode(p, a[i]), tun_unit_encode(p, b[i]), rng));
    }
    return hpo_rng_uniform(rng) < t->cfg.nsga_swapping_prob ? b[i] : a[i];
}

static void child_of(const tun_study *t, const double *a, const double *b, hpo_rng *rng, double *x) {
    const tun_space *s = t->space;
    int crossing = hpo_rng_uniform(rng) < t->cfg.nsga_crossover_prob;
    double mut = t->cfg.nsga_mutation_prob >= 0 ? t->cfg.nsga_mutation_prob : 1.0 / s->n;
    for (int i = 0; i < s->n; i++) {
        const tun_param *p = &s->params[i];
        /* every draw is made, active or not: the stream stays aligned */
        double v = crossing ? cross(t, i, a, b, rng) : (isnan(a[i]) ? b[i] : a[i]);
        int mutate = hpo_rng_uniform(rng) < mut;
        x[i] = NAN;
        if (!tun_space_is_active(s, x, i)) continue;
        if (isnan(v) || (mutate && !(t->cfg.nsga_crossover == TUN_XOVER_SBX && numeric(p))))
            v = tun_param_sample(p, rng);
        else if (mutate)
            v = tun_unit_decode(p, poly_mutate(tun_unit_encode(p, v), rng));
        x[i] = v;
    }
}

int tun_nsga2_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x) {
    int P = t->cfg.nsga_population > 0 ? t->cfg.nsga_population : 50;
    int64_t g = number / P;
    if (g == 0) return tun_random_suggest(t, number, rng, x);
    member *par = hpo_xmalloc((size_t)P * sizeof *par);
    size_t n = parents_of(t, P, g, number, par);
    if (n == 0) {
        free(par);
        return tun_random_suggest(t, number, rng, x);
    }
    for (int tries = 0; tries <= MAX_RETRIES; tries++) {
        const member *a = tournament(par, n, rng), *b = tournament(par, n, rng);
        child_of(t, a->r->x, b->r->x, rng, x);
        if (!tun_study_has_config(t, number, x)) break;
    }
    free(par);
    return 0;
}
