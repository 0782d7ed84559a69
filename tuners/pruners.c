/*
 * pruners.c - whether a running trial that just reported (step, value)
 * should stop: Optuna's median rule, asynchronous successive halving (ASHA)
 * and Hyperband (brackets of ASHA), all computed from the history alone.
 *
 * Design notes
 * - Stateless: Optuna keeps per-trial "rung" attributes; here a trial's value
 *   at a rung is its intermediate value at the first reported step >= the
 *   rung's step, and a rung is judged at the report that first reaches it.
 *   A report that reaches several rungs (steps that skip some) is judged at
 *   each in turn, and one stopped at a rung has no value at the higher ones
 *   it reached (tun_trial_rec.said_at_rung), as Optuna records them. With
 *   that, these are the decisions Optuna makes, and a history replayed after
 *   a restart gives the same answers (storage keeps the rung with the
 *   report the pruner said stop at).
 * - A late report, of a step below the trial's highest (out of order):
 *   Optuna judges at trial.last_step, the highest step. ASHA and Hyperband
 *   recorded the rungs up to it when that step came, so the late report
 *   answers "continue" and is no rung's value (rung_index skips the steps
 *   marked late, tun_trial_rec.step_late: a trial's value at a rung stays
 *   the one other trials were compared with). The median rule judges at
 *   the highest step, with the best value over all steps, as Optuna's
 *   does. Storage keeps the mark with the step (and the report the pruner
 *   said stop at), so a replay after a restart decides as the live run
 *   (tun_study_replay_report).
 * - Median (Optuna's MedianPruner = 50th percentile): no pruning before
 *   warmup_steps, nor before n_startup_trials trials are COMPLETE; then prune
 *   when the trial's best intermediate value so far is worse than the median
 *   (linear interpolation, NaNs ignored) of the COMPLETE trials' values at
 *   this very step. No such values: continue. A NaN best: prune.
 * - ASHA (Optuna's SuccessiveHalvingPruner, min_early_stopping_rate r0):
 *   rungs at min_resource * eta^(r0 + k). Reaching a rung, the trial
 *   continues iff its value is <= the (floor(m / eta))-th smallest (at least
 *   the first) of the m values recorded at that rung by every present trial
 *   (any state), itself included. A NaN value prunes. The value at the
 *   rung's step, as Optuna's; the best value so far (the embedded trainer's
 *   objective is the best epoch) was measured on the tabular benchmark
 *   (issue 16) and not kept: bohb's mean regret fell about 9% on the MLP
 *   half and rose 2% to 6% on the CNN half, tpe+hyperband's likewise.
 * - Hyperband (Optuna's HyperbandPruner): brackets from tun_hyperband_brackets;
 *   trial k goes to bracket b with probability n_b / sum(n) by a hash of
 *   (seed, k); bracket b runs ASHA with r0 = b, against its own trials only.
 * - Several objectives (MO-ASHA, Schmucker et al. 2021, with NSGA-II's
 *   order): ASHA and Hyperband rank the vectors at a rung (tun_study_report_mo)
 *   by non-domination front, then crowding distance within the front (larger
 *   first), then trial number (earlier first), and keep the first
 *   max(1, floor(m / eta)) of the m there, itself included. A NaN in the
 *   trial's vector prunes; another trial's vector with a NaN is left out.
 *   The median pruner takes one objective only (HPO_EINVAL).
 * - Values are in the minimisation sign (study.c negates for maximise).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"

#define DEFAULT_MAX_RESOURCE 81

/* ---- Hyperband's bracket table (Li et al. 2018, Algorithm 1) ---- */

static double ipow(double b, int e) {
    double r = 1;
    for (int i = 0; i < e; i++) r *= b;
    return r;
}

int tun_hyperband_brackets(double eta, int64_t min_r, int64_t max_r, tun_hb_bracket *out,
                           int max_out) {
    if (!out || !isfinite(eta) || eta <= 1 || min_r < 1 || max_r < min_r) return HPO_EINVAL;
    int s_max = 0;
    while ((double)min_r * ipow(eta, s_max + 1) <= (double)max_r * (1 + 1e-12)) s_max++;
    if (s_max + 1 > TUN_HB_MAX_ROUNDS || s_max + 1 > max_out) return HPO_ETOOLARGE;
    for (int b = 0; b <= s_max; b++) {
        int s = s_max - b;
        tun_hb_bracket *br = &out[b];
        memset(br, 0, sizeof *br);
        br->s = s;
        br->n_rounds = s + 1;
        double n = ceil((double)(s_max + 1) * ipow(eta, s) / (double)(s + 1) - 1e-9);
        for (int i = 0; i <= s; i++) {
            br->n[i] = (int64_t)floor(n / ipow(eta, i) + 1e-9);
            if (br->n[i] < 1) br->n[i] = 1;
            br->r[i] = (int64_t)llround((double)min_r * ipow(eta, s_max - s + i));
        }
        br->r[s] = max_r; /* the last round trains to the full budget */
    }
    return s_max + 1;
}

/* ---- helpers ---- */

/* Index of the first reported step >= s, or -1. */
static int first_at_or_after(const tun_trial_rec *r, int64_t s) {
    int lo = 0, hi = r->n_steps;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r->steps[mid] < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_steps ? lo : -1;
}

/* Index of the trial's value at the rung of step s: the first reported step
 * >= s that was not reported late (the report that first reached the
 * rung), or -1. */
static int rung_index(const tun_trial_rec *r, int64_t s) {
    int i = first_at_or_after(r, s);
    if (i < 0 || !r->step_late) return i;
    while (i < r->n_steps && r->step_late[i]) i++;
    return i < r->n_steps ? i : -1;
}

/* The k-th smallest of v[0..n) (0-based), rearranging v so that v[0..k) <=
 * v[k] <= v[k+1..n) (Hoare's selection; values are not NaN). */
static double select_kth(double *v, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i <= j) {
                double tmp = v[i];
                v[i] = v[j];
                v[j] = tmp;
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return v[k];
}

static int64_t rung_step(const tun_pruner_config *pc, int e) {
    double v = (double)pc->min_resource * ipow(pc->eta, e);
    if (v > 9e15) return INT64_MAX;
    return (int64_t)ceil(v - 1e-9);
}

/* Index of another trial's value at rung ka (its step rs), as rung_index,
 * or -1 when the report that reached it was stopped at a lower rung: such
 * a trial has no value there (Optuna records a rung's value only on the
 * way up). */
static int rung_value_index(const tun_study *t, const tun_trial_rec *o, int ka, int64_t rs) {
    int f = rung_index(o, rs);
    int stopped = o->said_at_rung - 1;
    if (f < 0 || stopped < 0 || ka <= stopped) return f;
    return f == rung_index(o, rung_step(&t->cfg.pruner, stopped)) ? -1 : f;
}

int64_t tun_hyperband_max_resource(const tun_pruner_config *pc) {
    int64_t m = pc->max_resource > 0 ? pc->max_resource : DEFAULT_MAX_RESOURCE;
    return m < pc->min_resource ? pc->min_resource : m;
}

int tun_hyperband_bracket_of(const tun_study *t, int64_t number) {
    tun_hb_bracket br[TUN_HB_MAX_ROUNDS];
    const tun_pruner_config *pc = &t->cfg.pruner;
    int nb = tun_hyperband_brackets(pc->eta, pc->min_resource, tun_hyperband_max_resource(pc), br,
                                    TUN_HB_MAX_ROUNDS);
    if (nb <= 1) return 0;
    uint64_t total = 0;
    for (int b = 0; b < nb; b++) total += (uint64_t)br[b].n[0];
    hpo_rng rng;
    hpo_rng_derive(&rng, t->cfg.seed, (uint64_t)number, 2);
    uint64_t h = hpo_rng_below(&rng, total);
    for (int b = 0; b < nb; b++) {
        if (h < (uint64_t)br[b].n[0]) return b;
        h -= (uint64_t)br[b].n[0];
    }
    return nb - 1;
}

/* ---- ASHA within a bracket (bracket -1: every trial competes) ---- */

/* Whether the vector at row 0 of V (M rows of m values at one rung, the
 * trial's own first) falls outside the best keep: ordered by
 * non-domination front (tun_nondominated_sort), then within a front by
 * crowding distance (larger first), then trial number (numbers[]). */
static int mo_outside(const double *V, const int64_t *numbers, size_t M, int m, int64_t keep) {
    int *rank = hpo_xmalloc(M * sizeof *rank);
    size_t *members = hpo_xmalloc(M * sizeof *members), k = 0;
    tun_nondominated_sort(V, NULL, M, m, rank);
    int64_t ahead = 0;
    for (size_t i = 0; i < M; i++) {
        if (rank[i] < rank[0]) ahead++;
        else if (rank[i] == rank[0]) members[k++] = i; /* members[0] is the trial */
    }
    if (ahead < keep) {
        double *cd = hpo_xmalloc(k * sizeof *cd);
        tun_crowding_distance(V, m, members, k, cd);
        for (size_t a = 1; a < k; a++)
            if (cd[a] > cd[0] || (cd[a] == cd[0] && numbers[members[a]] < numbers[0])) ahead++;
        free(cd);
    }
    free(members);
    free(rank);
    return ahead >= keep;
}

/* The trial's vector at a step index (several objectives). */
static const double *vec_at(const tun_study *t, const tun_trial_rec *r, int i) {
    return r->step_vecs + (size_t)i * (size_t)t->n_obj;
}

static int has_nan(const double *v, int m) {
    for (int k = 0; k < m; k++)
        if (isnan(v[k])) return 1;
    return 0;
}

/* MO-ASHA's decision at the rung of step rs, first = rec's index of its
 * value there. */
static int mo_rung(const tun_study *t, const tun_trial_rec *rec, int ka, int64_t rs, int first, int bracket,
                   int *prune) {
    int m = t->n_obj;
    const tun_pruner_config *pc = &t->cfg.pruner;
    if (has_nan(vec_at(t, rec, first), m)) {
        *prune = 1;
        return 0;
    }
    size_t M = 1, cap = 64;
    double *V = hpo_xmalloc(cap * (size_t)m * sizeof *V);
    int64_t *numbers = hpo_xmalloc(cap * sizeof *numbers);
    memcpy(V, vec_at(t, rec, first), (size_t)m * sizeof *V);
    numbers[0] = rec->number;
    for (int64_t j = 0; j < t->cap; j++) {
        const tun_trial_rec *o = &t->trials[j];
        if (!o->present || o->prior || o == rec || !o->step_vecs) continue;
        if (bracket >= 0 && o->bracket != bracket) continue;
        int f = rung_value_index(t, o, ka, rs);
        if (f < 0 || has_nan(vec_at(t, o, f), m)) continue;
        if (M == cap) {
            cap *= 2;
            V = hpo_xrealloc(V, cap * (size_t)m * sizeof *V);
            numbers = hpo_xrealloc(numbers, cap * sizeof *numbers);
        }
        memcpy(V + M * (size_t)m, vec_at(t, o, f), (size_t)m * sizeof *V);
        numbers[M++] = o->number;
    }
    int64_t keep = (int64_t)floor((double)M / pc->eta);
    if (keep < 1) keep = 1;
    *prune = mo_outside(V, numbers, M, m, keep);
    free(numbers);
    free(V);
    return 0;
}

/* "value <= the k-th smallest of the m rung values (itself included)" holds
 * exactly when fewer than k of them are strictly smaller: a count, O(m),
 * instead of a sort. Several objectives: mo_rung. */
static int asha_decide(const tun_study *t, const tun_trial_rec *rec, int64_t step, int r0,
                       int bracket, int *prune, int *rung) {
    const tun_pruner_config *pc = &t->cfg.pruner;
    *prune = 0;
    /* the last rung is the one at INT64_MAX, where rung_step saturates: a
     * report at that step would otherwise meet it forever */
    for (int k = 0, last = 0; !last; k++) {
        int64_t rs = rung_step(pc, r0 + k);
        if (rs > step) break;
        last = rs == INT64_MAX;
        int first = rung_index(rec, rs);
        if (first < 0 || rec->steps[first] != step) continue; /* judged at an earlier report */
        if (t->n_obj > 1) {
            int rc = mo_rung(t, rec, r0 + k, rs, first, bracket, prune);
            if (*prune) *rung = r0 + k;
            if (rc || *prune) return rc;
            continue;
        }
        double value = rec->step_values[first];
        if (isnan(value)) {
            *prune = 1, *rung = r0 + k;
            return 0;
        }
        int64_t m = 1, smaller = 0;
        for (int64_t j = 0; j < t->cap; j++) {
            const tun_trial_rec *o = &t->trials[j];
            if (!o->present || o->prior || o == rec) continue;
            if (bracket >= 0 && o->bracket != bracket) continue;
            int f = rung_value_index(t, o, r0 + k, rs);
            if (f < 0 || isnan(o->step_values[f])) continue;
            m++;
            if (o->step_values[f] < value) smaller++;
        }
        int64_t keep = (int64_t)floor((double)m / pc->eta);
        if (keep < 1) keep = 1;
        if (smaller >= keep) {
            *prune = 1, *rung = r0 + k;
            return 0;
        }
    }
    return 0;
}

/* ---- median ---- */

static int median_decide(const tun_study *t, const tun_trial_rec *rec, int64_t step, int *prune) {
    const tun_pruner_config *pc = &t->cfg.pruner;
    *prune = 0;
    if (step < pc->warmup_steps) return 0;
    int64_t n_complete = 0;
    for (int64_t j = 0; j < t->cap; j++)
        if (t->trials[j].present && !t->trials[j].prior && t->trials[j].state == TUN_TRIAL_COMPLETE) n_complete++;
    if (n_complete == 0 || n_complete < pc->n_startup_trials) return 0;

    double best = NAN;
    for (int i = 0; i < rec->n_steps && rec->steps[i] <= step; i++)
        if (!isnan(rec->step_values[i]) && (isnan(best) || rec->step_values[i] < best))
            best = rec->step_values[i];
    if (isnan(best)) {
        *prune = 1;
        return 0;
    }
    double *vals = hpo_xmalloc((size_t)n_complete * sizeof *vals);
    int m = 0;
    for (int64_t j = 0; j < t->cap; j++) {
        const tun_trial_rec *o = &t->trials[j];
        if (!o->present || o->prior || o->state != TUN_TRIAL_COMPLETE) continue;
        int f = first_at_or_after(o, step);
        if (f < 0 || o->steps[f] != step || isnan(o->step_values[f])) continue;
        vals[m++] = o->step_values[f];
    }
    if (m > 0) {
        /* the 50th percentile with linear interpolation (numpy's default) */
        int lo = (m - 1) / 2, hi = m / 2;
        double a = select_kth(vals, m, lo), b = a;
        if (hi != lo) { /* the next order statistic: the least of the upper part */
            b = vals[hi];
            for (int i = hi + 1; i < m; i++)
                if (vals[i] < b) b = vals[i];
        }
        /* numpy's lerp on the values as the client gave them (Optuna's
         * nanpercentile): b - (b - a) / 2 for an even count, which in the
         * minimisation sign of a maximised objective is a + (b - a) / 2
         * (they differ in the last bit, which decides at a tie) */
        double median = hi == lo ? a : t->obj_max[0] ? a + (b - a) * 0.5 : b - (b - a) * 0.5;
        *prune = best > median;
    }
    free(vals);
    return 0;
}

int tun_pruner_decide(const tun_study *t, const tun_trial_rec *rec, int64_t step, int *prune, int *rung) {
    *rung = -1;
    /* a late report (a step below the highest): judged at the highest step,
     * as Optuna judges at trial.last_step (the design notes) */
    int64_t last = rec->n_steps > 0 && rec->steps[rec->n_steps - 1] > step ? rec->steps[rec->n_steps - 1] : step;
    switch (t->cfg.pruner.kind) {
    case TUN_PRUNER_NONE: *prune = 0; return 0;
    case TUN_PRUNER_MEDIAN:
        if (t->n_obj > 1) return HPO_EINVAL; /* a median of vectors: undefined (the api refuses it) */
        return median_decide(t, rec, last, prune);
    case TUN_PRUNER_ASHA:
        if (!(t->cfg.pruner.eta > 1) || t->cfg.pruner.min_resource < 1) return HPO_EINVAL;
        *prune = 0;
        /* the rungs up to the highest step were judged when it came */
        return last > step ? 0 : asha_decide(t, rec, step, 0, -1, prune, rung);
    case TUN_PRUNER_HYPERBAND: {
        if (!(t->cfg.pruner.eta > 1) || t->cfg.pruner.min_resource < 1) return HPO_EINVAL;
        int b = rec->bracket;
        *prune = 0;
        return last > step ? 0 : asha_decide(t, rec, step, b, b, prune, rung);
    }
    }
    return HPO_EINVAL;
}
