/*
 * pareto_mc.c - Monte Carlo hypervolume figures (tuners.h), for fronts
 * whose exact figures (pareto.c: WFG, exponential in the objectives) a
 * request or a suggestion cannot afford: the hypervolume with its standard
 * error, each point's exclusive contribution, and the greedy subset
 * selection. All three count, among points drawn uniformly in the box from
 * the points' best values to ref, those each point dominates (a sample x
 * is dominated by p when p <= x in every objective; a point not better
 * than ref in every objective dominates none, as in the exact figures).
 * The rng is seeded by the caller: the same input, the same figure.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"

/* samples draws in the box [lo, ref) of the points of F inside ref (rows
 * of m; malloc'd, NULL when none is inside); *vol the box's volume. */
static double *draw(const double *F, size_t n, int m, const double *ref, size_t samples, uint64_t seed, double *vol) {
    double lo[TUN_MAX_OBJECTIVES];
    int any = 0;
    for (int o = 0; o < m; o++) lo[o] = INFINITY;
    for (size_t i = 0; i < n; i++) {
        const double *p = F + i * (size_t)m;
        int in = 1;
        for (int o = 0; o < m && in; o++) in = p[o] < ref[o];
        if (!in) continue;
        any = 1;
        for (int o = 0; o < m; o++) lo[o] = fmin(lo[o], p[o]);
    }
    *vol = 0.0;
    if (!any || samples == 0) return NULL;
    *vol = 1.0;
    for (int o = 0; o < m; o++) *vol *= ref[o] - lo[o];
    double *X = hpo_xmalloc(samples * (size_t)m * sizeof *X);
    hpo_rng rng;
    hpo_rng_seed(&rng, seed);
    for (size_t s = 0; s < samples; s++)
        for (int o = 0; o < m; o++) X[s * (size_t)m + (size_t)o] = lo[o] + hpo_rng_uniform(&rng) * (ref[o] - lo[o]);
    return X;
}

static int dominates(const double *p, const double *x, int m) {
    int o = 0;
    while (o < m && p[o] <= x[o]) o++;
    return o == m;
}

double tun_hypervolume_mc(const double *F, size_t n, int m, const double *ref, size_t samples, uint64_t seed,
                          double *std_error) {
    double vol;
    *std_error = 0.0;
    double *X = m >= 1 ? draw(F, n, m, ref, samples, seed, &vol) : NULL;
    if (!X) return 0.0;
    size_t hits = 0;
    for (size_t s = 0; s < samples; s++)
        for (size_t i = 0; i < n; i++)
            if (dominates(F + i * (size_t)m, X + s * (size_t)m, m)) {
                hits++;
                break;
            }
    free(X);
    double frac = (double)hits / (double)samples;
    *std_error = vol * sqrt(frac * (1.0 - frac) / (double)samples);
    return vol * frac;
}

void tun_hv_contributions_mc(const double *F, size_t n, int m, const double *ref, size_t samples, uint64_t seed,
                             double *out) {
    double vol;
    for (size_t i = 0; i < n; i++) out[i] = 0.0;
    double *X = m >= 1 ? draw(F, n, m, ref, samples, seed, &vol) : NULL;
    if (!X) return;
    for (size_t s = 0; s < samples; s++) { /* a sample only one point dominates is that point's alone */
        size_t who = n, count = 0;
        for (size_t i = 0; i < n && count < 2; i++)
            if (dominates(F + i * (size_t)m, X + s * (size_t)m, m)) who = i, count++;
        if (count == 1) out[who] += vol / (double)samples;
    }
    free(X);
}

void tun_hv_greedy_mc(const double *F, size_t n, int m, const double *ref, size_t k, size_t samples, uint64_t seed,
                      size_t *out) {
    double vol;
    double *X = m >= 1 ? draw(F, n, m, ref, samples, seed, &vol) : NULL;
    size_t words = X ? (samples + 63) / 64 : 1;
    /* dom: per point, the samples it dominates (bits); covered: those of the chosen */
    uint64_t *dom = hpo_xcalloc((n ? n : 1) * words, sizeof *dom), *covered = hpo_xcalloc(words, sizeof *covered);
    for (size_t i = 0; X && i < n; i++)
        for (size_t s = 0; s < samples; s++)
            if (dominates(F + i * (size_t)m, X + s * (size_t)m, m)) dom[i * words + s / 64] |= UINT64_C(1) << (s % 64);
    char *taken = hpo_xcalloc(n ? n : 1, 1);
    for (size_t pick = 0; pick < k && pick < n; pick++) {
        size_t best = n, best_gain = 0;
        for (size_t i = 0; i < n; i++) { /* ties to the earlier point */
            if (taken[i]) continue;
            size_t gain = 0;
            for (size_t w = 0; w < words; w++) gain += (size_t)__builtin_popcountll(dom[i * words + w] & ~covered[w]);
            if (best == n || gain > best_gain) best = i, best_gain = gain;
        }
        taken[best] = 1;
        out[pick] = best;
        for (size_t w = 0; w < words; w++) covered[w] |= dom[best * words + w];
    }
    free(taken);
    free(covered);
    free(dom);
    free(X);
}
