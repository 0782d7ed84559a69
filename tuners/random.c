/*
 * random.c - random search: each trial an independent draw from the space
 * (log-scale parameters uniform in log space, steps and ints uniform over
 * their values, inactive conditional parameters NaN).
 *
 * The generator is derived from (seed, number), so trial k's draw does not
 * depend on how many draws came before. One concession to parallel askers:
 * in a small discrete space, a draw identical to the configuration of a
 * present trial (running or finished) is redrawn, up to MAX_REDRAWS times,
 * which keeps the result a deterministic function of seed, number and history.
 */
#include <math.h>

#include "tuners_internal.h"

#define MAX_REDRAWS 32

static int same_config(const tun_space *s, const double *a, const double *b) {
    for (int i = 0; i < s->n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return 0;
        if (!isnan(a[i]) && a[i] != b[i]) return 0;
    }
    return 1;
}

int tun_study_has_config(const tun_study *t, int64_t number, const double *x) {
    for (int64_t k = 0; k < t->cap; k++) {
        const tun_trial_rec *r = &t->trials[k];
        if (r->present && r->number != number && same_config(t->space, r->x, x)) return 1;
    }
    return 0;
}

/* Whether every parameter is discrete, the only case where repeats are likely. */
static int all_discrete(const tun_space *s) {
    for (int i = 0; i < s->n; i++)
        if (s->params[i].type == TUN_FLOAT && s->params[i].step <= 0) return 0;
    return 1;
}

int tun_random_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x) {
    tun_space_sample(t->space, rng, x);
    if (!all_discrete(t->space)) return 0;
    for (int tries = 0; tries < MAX_REDRAWS && tun_study_has_config(t, number, x); tries++)
        tun_space_sample(t->space, rng, x);
    return 0;
}
