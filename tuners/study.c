/*
 * study.c - a tuner's view of a study: the trial history (indexed by trial
 * number), the sign convention (every algorithm minimises) and the dispatch
 * to the sampler and the pruner the config names.
 *
 * Every suggestion draws from hpo_rng_derive(seed, number, 0), so it depends
 * only on the seed, the number and the history, never on call order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"

int tun_study_new_mo(const tun_space *space, const tun_config *cfg, int m, const int *maximize,
                     tun_study **out) {
    if (!space || !cfg || !out || !maximize || space->n <= 0 || m < 1 || m > TUN_MAX_OBJECTIVES)
        return HPO_EINVAL;
    tun_study *t = hpo_xcalloc(1, sizeof *t);
    t->space = space;
    t->cfg = *cfg;
    t->n_obj = m;
    for (int k = 0; k < m; k++) t->obj_max[k] = maximize[k] ? 1 : 0;
    t->maximize = t->obj_max[0];
    *out = t;
    return 0;
}

int tun_study_new(const tun_space *space, const tun_config *cfg, int maximize, tun_study **out) {
    return tun_study_new_mo(space, cfg, 1, &maximize, out);
}

int tun_study_n_objectives(const tun_study *t) { return t ? t->n_obj : 0; }

int64_t tun_study_n_trials(const tun_study *t) { return t ? t->n_present - t->n_prior : 0; }

void tun_study_free(tun_study *t) {
    if (!t) return;
    for (int64_t i = 0; i < t->cap; i++) {
        tun_trial_rec *r = &t->trials[i];
        free(r->x);
        free(r->values);
        free(r->cons);
        free(r->steps);
        free(r->step_values);
        free(r->step_vecs);
        free(r->step_late);
    }
    free(t->trials);
    tun_cmaes_state_free(t->cmaes);
    tun_tpe_index_free(t->tpe);
    free(t);
}

static tun_trial_rec *find(const tun_study *t, int64_t number) {
    int64_t i = number + t->n_prior;
    if (number < 0 || i >= t->cap || !t->trials[i].present) return NULL;
    return &t->trials[i];
}

int tun_study_trial(const tun_study *t, int64_t number, tun_trial_state *state, int64_t *last_step) {
    const tun_trial_rec *r = t ? find(t, number) : NULL;
    if (!r) return HPO_ENOTFOUND;
    if (state) *state = r->state;
    if (last_step) *last_step = r->n_steps > 0 ? r->steps[r->n_steps - 1] : -1;
    return 0;
}

int tun_study_same_point(const tun_study *t, int64_t number, const double *x) {
    const tun_trial_rec *r = t && x ? find(t, number) : NULL;
    if (!r) return 0;
    for (int i = 0; i < t->space->n; i++)
        if (!(r->x[i] == x[i] || (isnan(r->x[i]) && isnan(x[i])))) return 0;
    return 1;
}

/* Room for index i in the history (i < TUN_MAX_TRIAL_NUMBER + TUN_MAX_PRIORS). */
static void reserve(tun_study *t, int64_t i) {
    if (i < t->cap) return;
    int64_t cap = t->cap ? t->cap : 16, max = TUN_MAX_TRIAL_NUMBER + TUN_MAX_PRIORS;
    while (cap <= i) cap *= 2;
    if (cap > max) cap = max;
    t->trials = hpo_xrealloc(t->trials, (size_t)cap * sizeof *t->trials);
    memset(t->trials + t->cap, 0, (size_t)(cap - t->cap) * sizeof *t->trials);
    t->cap = cap;
}

/* Whether v holds n_obj finite values. */
static int finite_values(const tun_study *t, const double *v) {
    if (!v) return 0;
    for (int k = 0; k < t->n_obj; k++)
        if (!isfinite(v[k])) return 0;
    return 1;
}

/* Sets r's outcome: values (n_obj, the study's signs) when COMPLETE, with
 * its violation, or its n_cons constraint values (the violation their sum
 * of positive parts). */
static void set_outcome(tun_study *t, tun_trial_rec *r, tun_trial_state state, const double *v,
                        double violation, int n_cons, const double *cons) {
    r->state = state;
    free(r->values);
    free(r->cons);
    r->values = NULL;
    r->cons = NULL;
    r->value = NAN;
    r->violation = NAN;
    if (state != TUN_TRIAL_COMPLETE) return;
    r->values = hpo_xmalloc((size_t)t->n_obj * sizeof *r->values);
    for (int k = 0; k < t->n_obj; k++) r->values[k] = t->obj_max[k] ? -v[k] : v[k];
    r->value = r->values[0];
    if (n_cons > 0) {
        r->cons = hpo_xmalloc((size_t)n_cons * sizeof *r->cons);
        memcpy(r->cons, cons, (size_t)n_cons * sizeof *r->cons);
        violation = 0;
        for (int i = 0; i < n_cons; i++) violation += cons[i] > 0 ? cons[i] : 0.0;
        t->n_cons = n_cons;
    }
    r->violation = isnan(violation) ? NAN : violation > 0 ? violation : 0.0;
    if (!isnan(violation)) t->constrained = 1;
}

int tun_study_suggest(tun_study *t, int64_t number, double *x) {
    double tmp[64];
    hpo_rng rng;
    int rc;
    if (!t || !x || number < 0 || number >= TUN_MAX_TRIAL_NUMBER) return HPO_EINVAL;
    if (t->space->n > (int)HPO_ARRAY_LEN(tmp)) return HPO_EINTERNAL;
    hpo_rng_derive(&rng, t->cfg.seed, (uint64_t)number, 0);
    switch (t->cfg.algorithm) {
    case TUN_RANDOM: rc = tun_random_suggest(t, number, &rng, tmp); break;
    case TUN_GRID: rc = tun_grid_suggest(t, number, &rng, tmp); break;
    case TUN_TPE: rc = tun_tpe_suggest(t, number, &rng, tmp); break;
    case TUN_BAYESIAN: /* several objectives or constraints: EHVI (gp_mo.c) */
        rc = t->n_obj > 1 || t->constrained ? tun_gp_mo_suggest(t, number, &rng, tmp)
                                            : tun_gp_suggest(t, number, &rng, tmp);
        break;
    case TUN_CMAES: rc = tun_cmaes_suggest(t, number, &rng, tmp); break;
    case TUN_EVOLUTION: rc = tun_evolution_suggest(t, number, &rng, tmp); break;
    case TUN_NSGA2: rc = tun_nsga2_suggest(t, number, &rng, tmp); break;
    case TUN_BOHB: rc = tun_bohb_suggest(t, number, &rng, tmp); break;
    /* pbt samples its first population at random; later members are bred
     * from others (tun_pbt_explore) */
    case TUN_PBT: rc = tun_random_suggest(t, number, &rng, tmp); break;
    default: return HPO_EINVAL;
    }
    if (rc) return rc;
    memcpy(x, tmp, (size_t)t->space->n * sizeof *x);
    return 0;
}

static int finished_state(tun_trial_state s) {
    return s == TUN_TRIAL_COMPLETE || s == TUN_TRIAL_PRUNED || s == TUN_TRIAL_FAILED;
}

int tun_study_add(tun_study *t, int64_t number, const double *x, tun_trial_state state,
                  double value) {
    if (!t || !x || number < 0 || number >= TUN_MAX_TRIAL_NUMBER) return HPO_EINVAL;
    if (state != TUN_TRIAL_RUNNING && !finished_state(state)) return HPO_EINVAL;
    if (state == TUN_TRIAL_COMPLETE && (!isfinite(value) || t->n_obj != 1)) return HPO_EINVAL;
    if (find(t, number)) return HPO_ECONFLICT;
    reserve(t, number + t->n_prior);
    tun_trial_rec *r = &t->trials[number + t->n_prior];
    memset(r, 0, sizeof *r);
    r->present = 1;
    r->number = number;
    r->state = state;
    r->x = hpo_xmalloc((size_t)t->space->n * sizeof *r->x);
    memcpy(r->x, x, (size_t)t->space->n * sizeof *r->x);
    set_outcome(t, r, state, &value, NAN, 0, NULL);
    r->bracket = t->cfg.pruner.kind == TUN_PRUNER_HYPERBAND ? tun_hyperband_bracket_of(t, number) : 0;
    t->n_present++;
    tun_tpe_index_note(t, number + t->n_prior, -1);
    return 0;
}

int tun_study_add_prior(tun_study *t, const double *x, double value) {
    if (!t || !x || !isfinite(value) || t->n_obj != 1) return HPO_EINVAL;
    if (t->n_present > t->n_prior) return HPO_ECONFLICT; /* a trial came first */
    if (t->n_prior >= TUN_MAX_PRIORS) return HPO_ETOOLARGE;
    reserve(t, t->n_prior);
    tun_trial_rec *r = &t->trials[t->n_prior];
    memset(r, 0, sizeof *r);
    r->present = 1;
    r->prior = 1;
    r->state = TUN_TRIAL_COMPLETE;
    r->x = hpo_xmalloc((size_t)t->space->n * sizeof *r->x);
    memcpy(r->x, x, (size_t)t->space->n * sizeof *r->x);
    set_outcome(t, r, TUN_TRIAL_COMPLETE, &value, NAN, 0, NULL);
    /* negative, increasing: oldest first (TPE breaks ties by number) */
    r->number = t->n_prior - TUN_MAX_PRIORS;
    t->n_prior++;
    t->n_present++;
    tun_tpe_index_note(t, t->n_prior - 1, -1);
    return 0;
}

int tun_study_suggest_fixed(tun_study *t, int64_t number, const double *fixed, double *x) {
    const tun_space *s = t ? t->space : NULL;
    if (!t || !fixed || !x || number < 0 || number >= TUN_MAX_TRIAL_NUMBER) return HPO_EINVAL;
    if (s->n > 64) return HPO_EINTERNAL;
    double sug[64];
    int rc = tun_study_suggest(t, number, sug);
    if (rc == HPO_EEXHAUSTED) { /* a full grid: the fixed values still make a trial */
        for (int i = 0; i < s->n; i++) sug[i] = NAN;
    } else if (rc) {
        return rc;
    }
    hpo_rng rng;
    hpo_rng_derive(&rng, t->cfg.seed, (uint64_t)number, 5);
    /* parents come before their children: each activity is decided by the
     * values already merged */
    for (int i = 0; i < s->n; i++) {
        if (!tun_space_is_active(s, x, i))
            x[i] = NAN;
        else if (!isnan(fixed[i]))
            x[i] = fixed[i];
        else if (!isnan(sug[i]))
            x[i] = sug[i];
        else /* the suggestion left it inactive under other parents */
            x[i] = tun_param_sample(&s->params[i], &rng);
    }
    return 0;
}

/* Records (step, values) in r's sorted steps; late < 0: derived (a higher
 * step came first), else as given (a replay). 0 if the step was there
 * already: a repeated step keeps its first value and its first answer, as
 * in Optuna (a resumed worker re-reporting an epoch is not judged twice). */
static int record_step(tun_study *t, tun_trial_rec *r, int64_t step, const double *values, int late) {
    int m = t->n_obj;
    /* keep steps sorted */
    int lo = 0, hi = r->n_steps;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r->steps[mid] < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < r->n_steps && r->steps[lo] == step) return 0;
    if (r->n_steps == r->cap_steps) {
        r->cap_steps = r->cap_steps ? 2 * r->cap_steps : 16;
        r->steps = hpo_xrealloc(r->steps, (size_t)r->cap_steps * sizeof *r->steps);
        r->step_values = hpo_xrealloc(r->step_values, (size_t)r->cap_steps * sizeof *r->step_values);
        r->step_late = hpo_xrealloc(r->step_late, (size_t)r->cap_steps * sizeof *r->step_late);
        if (m > 1) r->step_vecs = hpo_xrealloc(r->step_vecs, (size_t)r->cap_steps * m * sizeof *r->step_vecs);
    }
    memmove(r->steps + lo + 1, r->steps + lo, (size_t)(r->n_steps - lo) * sizeof *r->steps);
    memmove(r->step_values + lo + 1, r->step_values + lo,
            (size_t)(r->n_steps - lo) * sizeof *r->step_values);
    memmove(r->step_late + lo + 1, r->step_late + lo, (size_t)(r->n_steps - lo) * sizeof *r->step_late);
    r->steps[lo] = step;
    r->step_values[lo] = t->obj_max[0] ? -values[0] : values[0];
    r->step_late[lo] = late < 0 ? lo < r->n_steps : late != 0;
    if (m > 1) {
        memmove(r->step_vecs + (size_t)(lo + 1) * m, r->step_vecs + (size_t)lo * m,
                (size_t)(r->n_steps - lo) * m * sizeof *r->step_vecs);
        for (int k = 0; k < m; k++) r->step_vecs[(size_t)lo * m + k] = t->obj_max[k] ? -values[k] : values[k];
    }
    r->n_steps++;
    tun_tpe_index_note(t, r - t->trials, (int)r->state);
    return 1;
}

int tun_study_report_mo(tun_study *t, int64_t number, int64_t step, const double *values, int *prune) {
    if (!t || !values || step < 0) return HPO_EINVAL;
    tun_trial_rec *r = find(t, number);
    if (!r) return HPO_ENOTFOUND;
    if (!record_step(t, r, step, values, -1)) {
        /* a step reported again keeps its first value. The median rule
         * decides again, at the trial's highest step, as Optuna's
         * should_prune does (other trials may have completed since); a rung
         * is judged once, at the report that reached it */
        if (prune && r->state == TUN_TRIAL_RUNNING && !r->prune_said && t->cfg.pruner.kind == TUN_PRUNER_MEDIAN) {
            int p = 0, rung;
            int rc = tun_pruner_decide(t, r, r->steps[r->n_steps - 1], &p, &rung);
            if (rc) return rc;
            r->prune_said = p;
        }
        if (prune) *prune = r->state == TUN_TRIAL_RUNNING && r->prune_said;
        return 0;
    }
    /* without *prune (a replay) nobody asks: skip the O(trials) decision */
    if (prune && r->state == TUN_TRIAL_RUNNING && !r->prune_said) {
        int p = 0, rung;
        int rc = tun_pruner_decide(t, r, step, &p, &rung);
        if (rc) return rc;
        r->prune_said = p;
        if (p) r->said_at_rung = rung + 1;
    }
    if (prune) *prune = r->state == TUN_TRIAL_RUNNING && r->prune_said;
    return 0;
}

int tun_study_replay_report(tun_study *t, int64_t number, int64_t step, const double *values, int late,
                            int pruned, int rung) {
    if (!t || !values || step < 0) return HPO_EINVAL;
    tun_trial_rec *r = find(t, number);
    if (!r) return HPO_ENOTFOUND;
    record_step(t, r, step, values, late != 0);
    if (pruned && !r->prune_said) {
        r->prune_said = 1;
        r->said_at_rung = rung >= 0 ? rung + 1 : 0;
    }
    return 0;
}

int tun_study_prune_rung(const tun_study *t, int64_t number) {
    const tun_trial_rec *r = t ? find(t, number) : NULL;
    return r && r->prune_said ? r->said_at_rung - 1 : -1;
}

int tun_study_report(tun_study *t, int64_t number, int64_t step, double value, int *prune) {
    if (!t) return HPO_EINVAL;
    double v[TUN_MAX_OBJECTIVES];
    v[0] = value;
    for (int k = 1; k < t->n_obj; k++) v[k] = NAN;
    return tun_study_report_mo(t, number, step, v, prune);
}

static int finish(tun_study *t, int64_t number, tun_trial_state state, const double *values, double violation,
                  int n_cons, const double *cons) {
    if (!t || !finished_state(state)) return HPO_EINVAL;
    tun_trial_rec *r = find(t, number);
    if (!r) return HPO_ENOTFOUND;
    if (r->state != TUN_TRIAL_RUNNING) return HPO_ECONFLICT;
    if (state == TUN_TRIAL_COMPLETE && !finite_values(t, values)) return HPO_EINVAL;
    if (!isnan(violation) && violation < 0) return HPO_EINVAL;
    if (state != TUN_TRIAL_COMPLETE) n_cons = 0;
    if (n_cons < 0 || n_cons > TUN_MAX_CONSTRAINTS || (n_cons > 0 && !cons)) return HPO_EINVAL;
    if (n_cons > 0 && t->n_cons > 0 && n_cons != t->n_cons) return HPO_EINVAL;
    for (int i = 0; i < n_cons; i++)
        if (!isfinite(cons[i])) return HPO_EINVAL;
    set_outcome(t, r, state, values, violation, n_cons, cons);
    tun_tpe_index_note(t, r - t->trials, TUN_TRIAL_RUNNING);
    return 0;
}

int tun_study_finish_mo(tun_study *t, int64_t number, tun_trial_state state, const double *values,
                        double violation) {
    return finish(t, number, state, values, violation, 0, NULL);
}

int tun_study_finish_cons(tun_study *t, int64_t number, tun_trial_state state, const double *values, int n_cons,
                          const double *cons) {
    return finish(t, number, state, values, NAN, n_cons, cons);
}

int tun_study_finish(tun_study *t, int64_t number, tun_trial_state state, double value) {
    if (t && state == TUN_TRIAL_COMPLETE && t->n_obj != 1) return HPO_EINVAL;
    return tun_study_finish_mo(t, number, state, &value, NAN);
}
