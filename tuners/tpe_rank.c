/*
 * tpe_rank.c - TPE's ranking of the trials it models, best first (the rules
 * are told at the top of tpe.c): the common budget of the multi-fidelity
 * rule, one trial's sort key (tun_tpe_key_of), the full ranking
 * (tun_tpe_rank_all, O(n log n)) and the gamma split size. tpe.c uses the
 * full ranking on its reference path; tpe_index.c keeps the best few keys
 * incrementally with the same key and comparison, so both rank alike.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"

int tun_tpe_key_cmp(const tun_tpe_key *x, const tun_tpe_key *y) {
    if (x->cls != y->cls) return x->cls - y->cls;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    /* the history's index order is the trial-number order (priors first) */
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_key(const void *pa, const void *pb) { return tun_tpe_key_cmp(pa, pb); }

int tun_tpe_n_below(const tun_config *cfg, int64_t n) {
    int64_t b;
    if (cfg->tpe_gamma > 0 && cfg->tpe_gamma < 1) {
        b = (int64_t)ceil(cfg->tpe_gamma * (double)n);
    } else {
        b = (int64_t)ceil(0.1 * (double)n);
        if (b > 25) b = 25;
    }
    if (b < 1 && n > 0) b = 1;
    return (int)(b > n ? n : b);
}

int tun_tpe_is_finished(const tun_trial_rec *rec) {
    return rec->state == TUN_TRIAL_COMPLETE || rec->state == TUN_TRIAL_PRUNED;
}

int64_t tun_tpe_budget_push(int64_t *top, int *k, int n_min, int64_t s) {
    if (*k == n_min && s <= top[n_min - 1]) return *k < n_min ? -1 : top[n_min - 1];
    int j = *k < n_min ? (*k)++ : n_min - 1;
    while (j > 0 && top[j - 1] < s) {
        top[j] = top[j - 1];
        j--;
    }
    top[j] = s;
    return *k < n_min ? -1 : top[n_min - 1];
}

int tun_tpe_multi_fidelity(const tun_study *t) {
    return t->cfg.tpe_multi_fidelity &&
           (t->cfg.pruner.kind == TUN_PRUNER_ASHA || t->cfg.pruner.kind == TUN_PRUNER_HYPERBAND);
}

int64_t tun_tpe_budget(const tun_study *t) {
    if (!tun_tpe_multi_fidelity(t)) return -1;
    int n_min = t->space->n + 2, k = 0;
    int64_t top[TUN_TPE_BUDGET_MAX] = {0}, b = -1;
    if (n_min > TUN_TPE_BUDGET_MAX) return -1; /* spaces have at most 64 parameters */
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *rec = &t->trials[i];
        if (!rec->present || !tun_tpe_is_finished(rec) || rec->n_steps == 0) continue;
        b = tun_tpe_budget_push(top, &k, n_min, rec->steps[rec->n_steps - 1]);
    }
    return b;
}

/* The best (smallest) intermediate value of rec at steps <= b, NaN ones
 * skipped (+inf if none); a trial whose first report is past b (steps with
 * gaps) has no value at b, and its first reported value stands in. */
static double best_up_to(const tun_trial_rec *rec, int64_t b) {
    double best = INFINITY;
    int i = 0;
    for (; i < rec->n_steps && rec->steps[i] <= b; i++)
        if (rec->step_values[i] < best) best = rec->step_values[i];
    if (i == 0 && rec->n_steps > 0 && !isnan(rec->step_values[0])) best = rec->step_values[0];
    return best;
}

void tun_tpe_key_of(const tun_study *t, int64_t idx, int64_t budget, tun_tpe_key *out) {
    const tun_trial_rec *rec = &t->trials[idx];
    tun_tpe_key e = {idx, TUN_TPE_COMPLETE, 0.0, 0.0};
    if (!tun_tpe_is_finished(rec)) {
        e.cls = TUN_TPE_RUNNING;
    } else if (budget >= 0 && rec->n_steps > 0 && rec->steps[rec->n_steps - 1] >= budget) {
        e.cls = TUN_TPE_AT_BUDGET;
        e.a = best_up_to(rec, budget);
    } else if (rec->state == TUN_TRIAL_COMPLETE && (budget < 0 || rec->n_steps == 0)) {
        e.cls = budget < 0 ? TUN_TPE_COMPLETE : TUN_TPE_COMPLETE_BARE;
        e.a = rec->value;
    } else if (rec->n_steps > 0) {
        /* Optuna's pruned rule; with a budget, also a complete trial that
         * stopped before it */
        e.cls = TUN_TPE_REPORTED;
        e.a = -(double)rec->steps[rec->n_steps - 1];
        e.b = rec->step_values[rec->n_steps - 1];
        if (isnan(e.b)) e.b = INFINITY;
    } else {
        e.cls = TUN_TPE_PRUNED_BARE;
    }
    if (isnan(e.a)) e.a = INFINITY;
    *out = e;
}

int tun_tpe_rank_all(const tun_study *t, tun_tpe_key **out, int *m_out, int *n_finished_out,
                     int64_t *budget_out) {
    tun_tpe_key *r = malloc((size_t)(t->n_present > 0 ? t->n_present : 1) * sizeof *r);
    if (!r) return HPO_ENOMEM;
    int64_t budget = tun_tpe_budget(t);
    int m = 0, n_finished = 0;
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *rec = &t->trials[i];
        if (!rec->present || rec->state == TUN_TRIAL_FAILED) continue;
        tun_tpe_key_of(t, i, budget, &r[m]);
        if (r[m].cls != TUN_TPE_RUNNING) n_finished++;
        m++;
    }
    qsort(r, (size_t)m, sizeof *r, cmp_key);
    *out = r;
    *m_out = m;
    *n_finished_out = n_finished;
    *budget_out = budget;
    return 0;
}

int tun_tpe_rank(const tun_study *t, int64_t *order, int *n_ranked, int *n_finished,
                 int64_t *budget) {
    tun_tpe_key *r = NULL;
    int m = 0, nf = 0, rc;
    int64_t b = -1;
    if ((rc = tun_tpe_rank_all(t, &r, &m, &nf, &b)) < 0) return rc;
    for (int i = 0; i < m; i++) order[i] = t->trials[r[i].idx].number;
    free(r);
    *n_ranked = m;
    if (n_finished) *n_finished = nf;
    if (budget) *budget = b;
    return 0;
}
