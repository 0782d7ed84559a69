/*
 * evolution.c - the "evolution" sampler: regularized (aging) evolution
 * (Real et al. 2019, "Regularized Evolution for Image Classifier
 * Architecture Search").
 *
 * - The population is the P ("population", default 20) most recent
 *   complete trials: recent by trial number, i.e. by birth, so the oldest
 *   member dies whatever its value (aging). Running, failed and pruned
 *   trials are not members. Until P trials are complete, random search.
 * - Tournament: S ("sample_size", default min(5, P)) members drawn
 *   uniformly with replacement; the best (lowest value in the minimisation
 *   sign, the earliest drawn on a tie) is the parent.
 * - One mutation: one of the parent's active parameters that has another
 *   value, chosen uniformly. A choice or bool takes another of its values,
 *   uniformly. An int or float moves by a Gaussian step of sd 0.1 in the
 *   unit encoding (unit_scale.c: log scale where asked), reflected at the
 *   ends of [0, 1] and decoded onto the domain (bounds and steps); a
 *   discrete step that lands on the same value goes to the neighbouring
 *   value instead, so the child always differs.
 * - Conditions: after the change, every parameter is checked in the space's
 *   order (parents first): one that becomes inactive is cleared (NaN), one
 *   that becomes active is drawn fresh at random, one active before and
 *   after keeps the parent's value.
 * - Parallel asks: each trial has its own generator (seed, number), so
 *   concurrent asks draw different tournaments and mutations; a child equal
 *   to a present trial (running or finished) is mutated again, up to 32
 *   times. Deterministic given the seed, the number and the history.
 */
#include <math.h>
#include <stdlib.h>

#include "tuners_internal.h"

#define MUTATION_SD 0.1
#define MAX_RETRIES 32

static int has_other_value(const tun_param *p) {
    int64_t k = tun_param_n_values(p);
    if (p->type == TUN_FLOAT && k == 0) return p->high > p->low;
    return k >= 2;
}

static double mutate_number(const tun_param *p, double v, hpo_rng *rng) {
    double u = tun_unit_encode(p, v);
    double step = MUTATION_SD * hpo_rng_normal(rng);
    double w = u + step;
    if (w > 1) w = 2 - w;
    if (w < 0) w = -w;
    double out = tun_unit_decode(p, w);
    int64_t k = tun_param_n_values(p);
    if (k > 0 && out == v) {
        int64_t j = tun_param_index_of(p, v), dir = step >= 0 ? 1 : -1;
        if (j < 0) return out;
        if (j + dir < 0 || j + dir >= k) dir = -dir;
        out = tun_param_value_at(p, j + dir);
    }
    return out;
}

/* child = parent with one parameter changed and the conditions redone. */
static void mutate(const tun_space *s, const double *parent, hpo_rng *rng, double *child) {
    int cand[64], n_cand = 0;
    for (int i = 0; i < s->n; i++)
        if (!isnan(parent[i]) && has_other_value(&s->params[i])) cand[n_cand++] = i;
    if (n_cand == 0) {
        tun_space_sample(s, rng, child);
        return;
    }
    int j = cand[hpo_rng_below(rng, (uint64_t)n_cand)];
    const tun_param *p = &s->params[j];
    for (int i = 0; i < s->n; i++) child[i] = parent[i];
    if (p->type == TUN_CHOICE || p->type == TUN_BOOL) {
        double r = (double)hpo_rng_below(rng, (uint64_t)(tun_param_n_values(p) - 1));
        child[j] = r >= parent[j] ? r + 1 : r;
    } else {
        child[j] = mutate_number(p, parent[j], rng);
    }
    for (int i = 0; i < s->n; i++) {
        if (!tun_space_is_active(s, child, i)) child[i] = NAN;
        else if (isnan(child[i])) child[i] = tun_param_sample(&s->params[i], rng);
    }
}

int tun_evolution_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x) {
    int P = t->cfg.evo_population, S = t->cfg.evo_sample_size, n = 0;
    if (S < 1) S = 1;
    if (P < 1) P = 1;
    const tun_trial_rec **pop = hpo_xmalloc((size_t)P * sizeof *pop);
    for (int64_t k = t->cap - 1; k >= 0 && n < P; k--) {
        const tun_trial_rec *r = &t->trials[k];
        if (r->present && k - t->n_prior != number && r->state == TUN_TRIAL_COMPLETE) pop[n++] = r;
    }
    if (n < P) {
        free(pop);
        return tun_random_suggest(t, number, rng, x);
    }
    const tun_trial_rec *best = NULL;
    for (int i = 0; i < S; i++) {
        const tun_trial_rec *r = pop[hpo_rng_below(rng, (uint64_t)P)];
        if (!best || r->value < best->value) best = r;
    }
    mutate(t->space, best->x, rng, x);
    for (int tries = 0; tries < MAX_RETRIES && tun_study_has_config(t, number, x); tries++)
        mutate(t->space, best->x, rng, x);
    free(pop);
    return 0;
}
