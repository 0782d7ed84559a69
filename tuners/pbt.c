/*
 * pbt.c - population-based training's decisions over a study's history
 * (tuners.h): ranking a member at a perturbation boundary among the
 * trials that reported the same epoch (Ray Tune's quantiles), choosing the
 * donor it exploits, and exploring from the donor's configuration. The
 * job layer (api/pbt.c) stops members at boundaries, copies checkpoints
 * and stores the lineage.
 *
 * Random streams: hpo_rng_derive(seed, number, PBT_DONOR + epoch) for the
 * donor, (seed, number, PBT_EXPLORE + epoch) for the exploration; number
 * is the replaced member's, so a decision replayed after a restart draws
 * the same.
 */
#include <math.h>
#include <stdlib.h>

#include "tuners_internal.h"

#define PBT_DONOR ((uint64_t)1 << 40)
#define PBT_EXPLORE ((uint64_t)2 << 40)

/* The value trial rec reported at step, or NaN (steps are sorted). */
static double value_at(const tun_trial_rec *rec, int64_t step) {
    int lo = 0, hi = rec->n_steps - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (rec->steps[mid] == step) return rec->step_values[mid];
        if (rec->steps[mid] < step)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NAN;
}

typedef struct ranked {
    int64_t number;
    double value; /* minimisation sign */
} ranked;

static int by_value(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->value != y->value) return x->value < y->value ? -1 : 1;
    return x->number < y->number ? -1 : x->number > y->number;
}

int tun_pbt_rank(const tun_study *t, int64_t number, int64_t epoch, int64_t *donor) {
    if (!t || !donor || epoch < 0) return HPO_EINVAL;
    ranked *r = hpo_xcalloc((size_t)t->n_present + 1, sizeof *r);
    int n = 0, self = -1;
    for (int64_t i = t->n_prior; i < t->cap; i++) {
        const tun_trial_rec *rec = &t->trials[i];
        if (!rec->present || rec->prior) continue;
        double v = value_at(rec, epoch);
        if (!isfinite(v)) continue;
        r[n++] = (ranked){rec->number, v};
    }
    qsort(r, (size_t)n, sizeof *r, by_value);
    for (int k = 0; k < n; k++)
        if (r[k].number == number) self = k;
    int rc = 0;
    if (self < 0) {
        rc = HPO_ENOTFOUND;
    } else if (n >= 2) {
        int q = (int)ceil(n * t->cfg.pbt_quantile);
        if (q > n / 2) q = n / 2;
        if (q > 0 && self >= n - q) {
            hpo_rng rng;
            hpo_rng_derive(&rng, t->cfg.seed, (uint64_t)number, PBT_DONOR + (uint64_t)epoch);
            *donor = r[hpo_rng_below(&rng, (uint64_t)q)].number;
            rc = 1;
        }
    }
    free(r);
    return rc;
}

void tun_pbt_explore(const tun_study *t, int64_t number, int64_t epoch, const double *donor_x, double *x) {
    const tun_space *s = t->space;
    hpo_rng rng;
    hpo_rng_derive(&rng, t->cfg.seed, (uint64_t)number, PBT_EXPLORE + (uint64_t)epoch);
    for (int i = 0; i < s->n; i++) {
        const tun_param *p = &s->params[i];
        x[i] = donor_x[i];
        if (i >= 64 || !(t->cfg.pbt_mutable >> i & 1) || isnan(donor_x[i])) continue;
        /* both draws always taken, so one parameter's branch does not
         * shift the next one's stream */
        double u = hpo_rng_uniform(&rng), up = hpo_rng_uniform(&rng);
        if (u < t->cfg.pbt_resample) {
            x[i] = tun_param_sample(p, &rng);
        } else if (p->type == TUN_INT || p->type == TUN_FLOAT) {
            double v = donor_x[i] * (up < 0.5 ? 0.8 : 1.2);
            x[i] = tun_space_snap(s, i, v < p->low ? p->low : v > p->high ? p->high : v);
            /* on a grid (an int, a stepped float) a small value snaps back
             * to itself (2 x 0.8 and 2 x 1.2 are both 2): it moves one step
             * that way instead, within the bounds, so exploring explores */
            int64_t k = tun_param_index_of(p, x[i]), n = tun_param_n_values(p);
            if (x[i] == donor_x[i] && v != donor_x[i] && k >= 0 && n > 1) {
                k += v > donor_x[i] ? 1 : -1;
                if (k >= 0 && k < n) x[i] = tun_param_value_at(p, k);
            }
        } else { /* a choice or a bool: a neighbouring value, kept at an edge (Ray Tune's rule) */
            int64_t n = p->type == TUN_BOOL ? 2 : p->n_choices, k = (int64_t)donor_x[i] + (up < 0.5 ? -1 : 1);
            if (k < 0) k = 0;
            if (k >= n) k = n - 1;
            x[i] = (double)k;
        }
    }
}
