/*
 * tpe_mo.c - TPE's split of the history into "below" and "above" when a
 * study has several objectives or constraints, as Optuna 3.1's TPESampler
 * does (samplers/_tpe/sampler.py: _get_observation_pairs,
 * _split_observation_pairs, _solve_hssp,
 * _calculate_weights_below_for_multi_objective). tpe.c samples from it.
 *
 * - The trials modelled are the complete ones (priors included); pruned,
 *   running and failed trials are left out, as Optuna leaves them out of a
 *   multi-objective study (a constrained one-objective study here too: its
 *   pruned trials carry no violation). n = their count, gamma(n) as for one
 *   objective (tun_tpe_n_below).
 * - Constraints (a violation told by any complete trial; none told counts
 *   as infinite): trials ordered by violation (stable, trial order); when
 *   the gamma(n) best of that order reach an infeasible trial, they are the
 *   below set; otherwise the feasible trials are split by their values and
 *   the infeasible ones join "above".
 * - Split by values: one objective, the gamma(n) smallest (ties by trial
 *   order). Several: whole non-domination fronts in order while they fit,
 *   then the rest from the next front by greedy hypervolume subset
 *   selection (the point adding the most hypervolume to those chosen, ties
 *   to the earlier trial; reference max(1.1 w, 0.9 w) of that front's
 *   worst point w, 0 made 1e-12): Optuna's _solve_hssp, which updates the
 *   contributions incrementally to the same values.
 * - Weights of the below set (several objectives): each feasible member's
 *   hypervolume contribution to the feasible below set (reference from
 *   their worst point as above), + 1e-12, divided by the largest, clipped to
 *   [0, 1]; infeasible members 1e-12; a single feasible member 1. The above
 *   set, and the below set of one objective, keep Optuna's ramp (tpe.c).
 * Cost per suggestion: O(n log n) for the ordering, O(m n^2) for the
 * non-dominated sort, and the subset selection's hypervolumes over at most
 * gamma(n) points: exact within a budget (at most 3 objectives, or few
 * points for their objectives), past it estimated by Monte Carlo (see
 * EXACT_BUDGET; Optuna computes them exactly, which with 8 objectives
 * takes seconds to minutes an ask). Deterministic: a function of the
 * history.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "keyed_sort.h"
#include "tuners_internal.h"

#define EPS 1e-12

int tun_tpe_uses_split(const tun_study *t) { return t->n_obj > 1 || t->constrained; }

void tun_tpe_split_clear(tun_tpe_split *s) {
    free(s->below);
    free(s->above);
    free(s->w_below);
    memset(s, 0, sizeof *s);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The reference point of a set of points: max(1.1 w, 0.9 w) of their
 * componentwise worst w, 0 made EPS. */
static void reference_of(const double *F, size_t n, int m, double *ref) {
    for (int k = 0; k < m; k++) {
        double w = -INFINITY;
        for (size_t i = 0; i < n; i++) w = fmax(w, F[i * (size_t)m + (size_t)k]);
        ref[k] = fmax(1.1 * w, 0.9 * w);
        if (ref[k] == 0) ref[k] = EPS;
    }
}

/* Exact hypervolumes where a suggestion can afford them: k n of them for
 * the subset selection, of at most k points each (exact_cost(k, m) n), n
 * + 1 of n points for the weights. Past that (many objectives: 8
 * objectives took 10 s an ask at 1,000 trials, holding the study) the
 * Monte Carlo figures of pareto_mc.c, with MC_SAMPLES points and a fixed
 * seed (still a function of the history). */
#define EXACT_BUDGET 1e7
#define MC_SAMPLES 16384
#define MC_SEED 0x7470656d6fULL
static double exact_cost(size_t n, int m) { return m <= 3 ? (double)n : pow((double)n, m - 2); }

/* Greedy hypervolume subset selection: k of the n points of F (one
 * front), their positions written to out. */
static void solve_hssp(const double *F, size_t n, int m, size_t k, size_t *out) {
    double ref[TUN_MAX_OBJECTIVES];
    reference_of(F, n, m, ref);
    if (exact_cost(k, m) * (double)n <= EXACT_BUDGET)
        tun_hv_greedy(F, n, m, ref, k, out);
    else
        tun_hv_greedy_mc(F, n, m, ref, k, MC_SAMPLES, MC_SEED, out);
}

/* Chooses k of the n trials pos[] (positions into the complete trials'
 * value rows V) by their values; writes the chosen positions to out. */
static void select_by_values(const double *V, int m, const int64_t *pos, size_t n, size_t k, int64_t *out) {
    if (k == 0) return;
    if (m == 1) {
        tun_keyed *o = hpo_xmalloc(n * sizeof *o);
        for (size_t i = 0; i < n; i++) o[i] = (tun_keyed){V[pos[i]], pos[i]};
        tun_keyed_sort(o, n);
        for (size_t i = 0; i < k; i++) out[i] = o[i].i;
        free(o);
        return;
    }
    double *F = hpo_xmalloc(n * (size_t)m * sizeof *F);
    int *rank = hpo_xmalloc(n * sizeof *rank);
    size_t *front = hpo_xmalloc(n * sizeof *front), *sel = hpo_xmalloc(n * sizeof *sel);
    for (size_t i = 0; i < n; i++) memcpy(F + i * (size_t)m, V + pos[i] * m, (size_t)m * sizeof *F);
    int n_fronts = tun_nondominated_sort(F, NULL, n, m, rank);
    size_t got = 0;
    for (int r = 0; r < n_fronts && got < k; r++) {
        size_t nf = 0;
        for (size_t i = 0; i < n; i++)
            if (rank[i] == r) front[nf++] = i;
        if (got + nf <= k) {
            for (size_t i = 0; i < nf; i++) out[got++] = pos[front[i]];
            continue;
        }
        double *G = hpo_xmalloc(nf * (size_t)m * sizeof *G);
        for (size_t i = 0; i < nf; i++) memcpy(G + i * (size_t)m, F + front[i] * (size_t)m, (size_t)m * sizeof *G);
        solve_hssp(G, nf, m, k - got, sel);
        for (size_t i = 0; got < k; i++) out[got++] = pos[front[sel[i]]];
        free(G);
    }
    free(sel);
    free(front);
    free(rank);
    free(F);
}

/* The below set's weights: hypervolume contributions of its feasible
 * members (V rows of the positions below[]), EPS for the infeasible. */
static void weights_below(const double *V, int m, const double *viol, const int64_t *below, size_t nb,
                          double *w) {
    size_t nf = 0;
    double *F = hpo_xmalloc((nb ? nb : 1) * (size_t)m * sizeof *F);
    size_t *at = hpo_xmalloc((nb ? nb : 1) * sizeof *at);
    for (size_t i = 0; i < nb; i++) {
        w[i] = EPS;
        if (viol && viol[below[i]] != 0) continue;
        memcpy(F + nf * (size_t)m, V + below[i] * m, (size_t)m * sizeof *F);
        at[nf++] = i;
    }
    if (nf == 1) w[at[0]] = 1.0;
    if (nf > 1) {
        double ref[TUN_MAX_OBJECTIVES], cmax = 0;
        double *c = hpo_xmalloc(nf * sizeof *c);
        reference_of(F, nf, m, ref);
        if (exact_cost(nf, m) * (double)(nf + 1) <= EXACT_BUDGET)
            tun_hv_contributions(F, nf, m, ref, c);
        else
            tun_hv_contributions_mc(F, nf, m, ref, MC_SAMPLES, MC_SEED, c);
        for (size_t j = 0; j < nf; j++) {
            c[j] += EPS;
            cmax = fmax(cmax, c[j]);
        }
        for (size_t j = 0; j < nf; j++) w[at[j]] = fmin(1.0, fmax(0.0, c[j] / cmax));
        free(c);
    }
    free(at);
    free(F);
}

int tun_tpe_split_compute(const tun_study *t, tun_tpe_split *out) {
    int m = t->n_obj, constrained = 0;
    int64_t n = 0;
    memset(out, 0, sizeof *out);
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *r = &t->trials[i];
        if (!r->present || r->state != TUN_TRIAL_COMPLETE || !r->values) continue;
        n++;
        if (!isnan(r->violation)) constrained = 1;
    }
    int64_t *idx = hpo_xmalloc((size_t)(n ? n : 1) * sizeof *idx);
    double *V = hpo_xmalloc((size_t)(n ? n : 1) * (size_t)m * sizeof *V);
    double *viol = constrained ? hpo_xmalloc((size_t)(n ? n : 1) * sizeof *viol) : NULL;
    int64_t k = 0;
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *r = &t->trials[i];
        if (!r->present || r->state != TUN_TRIAL_COMPLETE || !r->values) continue;
        memcpy(V + k * m, r->values, (size_t)m * sizeof *V);
        if (viol) viol[k] = isnan(r->violation) ? INFINITY : r->violation;
        idx[k++] = i;
    }
    int64_t nb = tun_tpe_n_below(&t->cfg, n);
    int64_t *pos = hpo_xmalloc((size_t)(n ? n : 1) * sizeof *pos);
    int64_t *below = hpo_xmalloc((size_t)(nb ? nb : 1) * sizeof *below);
    char *is_below = hpo_xmalloc((size_t)(n ? n : 1));
    memset(is_below, 0, (size_t)(n ? n : 1));
    if (viol) {
        tun_keyed *o = hpo_xmalloc((size_t)(n ? n : 1) * sizeof *o);
        for (int64_t i = 0; i < n; i++) o[i] = (tun_keyed){viol[i], i};
        tun_keyed_sort(o, (size_t)n);
        if (nb >= n || o[nb].v > 0) {
            for (int64_t i = 0; i < nb; i++) below[i] = o[i].i;
        } else {
            int64_t nf = 0;
            for (int64_t i = 0; i < n; i++)
                if (viol[i] == 0) pos[nf++] = i;
            select_by_values(V, m, pos, (size_t)nf, (size_t)nb, below);
        }
        free(o);
    } else {
        for (int64_t i = 0; i < n; i++) pos[i] = i;
        select_by_values(V, m, pos, (size_t)n, (size_t)nb, below);
    }
    qsort(below, (size_t)nb, sizeof *below, cmp_i64);
    if (m > 1) {
        out->w_below = hpo_xmalloc((size_t)(nb ? nb : 1) * sizeof *out->w_below);
        weights_below(V, m, viol, below, (size_t)nb, out->w_below);
    }
    out->below = hpo_xmalloc((size_t)(nb ? nb : 1) * sizeof *out->below);
    out->above = hpo_xmalloc((size_t)(n - nb > 0 ? n - nb : 1) * sizeof *out->above);
    for (int64_t i = 0; i < nb; i++) {
        is_below[below[i]] = 1;
        out->below[i] = idx[below[i]];
    }
    for (int64_t i = 0; i < n; i++)
        if (!is_below[i]) out->above[out->na++] = idx[i];
    out->nb = nb;
    out->n = n;
    free(is_below);
    free(below);
    free(pos);
    free(viol);
    free(V);
    free(idx);
    return 0;
}
