/* front.c - GET /studies/{id}/best of a study with objectives or
 * constraints: its Pareto front and the hypervolume it dominates.
 *
 * - The front: the complete, feasible trials (violation 0; every trial when
 *   the study has no constraints) that no other such trial dominates,
 *   ordered by the first objective (best first), then number.
 * - The hypervolume (pareto.c) of the front against the reference point,
 *   exact where tun_hypervolume_affordable says so (at most 3 objectives,
 *   or a front small for its objectives), else a Monte Carlo estimate
 *   with a fixed seed (the same front gives the same figure) and its
 *   standard error ("hypervolume_exact", "hypervolume_std_error"): the
 *   exact figure is exponential in the objectives (8 objectives and 160
 *   trials on the front took 15 s). The reference point:
 *   objectives[i].reference where the definition gives it, else the worst
 *   value of objective i among all the feasible complete trials, moved
 *   away by 10% of their range in it (10% of max(|worst|, 1) when the
 *   range is 0). A new trial only ever moves that point outward, so the
 *   exact figure never drops as a study goes on (taken from the front alone,
 *   a trial dominating part of it could lower it: 0.21 -> 0.16 in an
 *   audit). Optuna 3.1 reports no hypervolume; give a reference to compare
 *   studies. Reported with its reference point, in the objectives' own
 *   signs.
 * - Every complete trial's outcome is read (without the columns a client
 *   can make large: sto_trial_outcomes), counted as a whole-study read
 *   (api_heavy_acquire).
 * - The best trials (api_best_trials): by the first objective's value, and
 *   with constraints the feasible ones only, as the front ranks them; the
 *   study's "best", top_n and the checkpoints kept read them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

typedef struct ranked {
    size_t i;
    double first;
    int64_t number;
} ranked;

static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return (x->number > y->number) - (x->number < y->number);
}

static json_t *front_json(const api_study_def *d, const sto_trial *t, const double *v, double viol) {
    json_t *params = json_loads(t->params, 0, NULL), *values = json_array();
    for (int k = 0; k < d->n_obj; k++) json_array_append_new(values, api_json_real(v[k]));
    json_t *metrics = t->metrics_json ? json_loads(t->metrics_json, 0, NULL) : NULL;
    return json_pack("{s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "trial_id", (json_int_t)t->id, "number",
                     (json_int_t)t->number, "params", params ? params : json_null(), "values", values, "value",
                     api_json_real(v[0]), "metrics", metrics ? metrics : json_null(), "violation",
                     api_json_real(viol));
}

/* The front of a study: its complete trials, the feasible ones' values
 * (raw: the objectives' signs; F: minimisation sign), and the front's
 * members ordered (front[0 .. nf), P their rows of F). */
typedef struct front {
    sto_trial *trials;
    size_t n, k, nf;
    double *F, *raw, *viol, *P;
    size_t *of;
    int *rank;
    ranked *front;
    int64_t n_feasible;
} front;

static void front_clear(front *fr) {
    free(fr->F);
    free(fr->raw);
    free(fr->viol);
    free(fr->of);
    free(fr->rank);
    free(fr->front);
    free(fr->P);
    sto_trial_list_free(fr->trials, fr->n);
    memset(fr, 0, sizeof *fr);
}

static int front_build(api_ctx *ctx, const api_study_def *d, int64_t id, front *fr) {
    int m = d->n_obj;
    memset(fr, 0, sizeof *fr);
    int rc = sto_trial_outcomes(ctx->db, id, STO_TRIAL_COMPLETE, &fr->trials, &fr->n);
    if (rc) return rc;
    size_t n = fr->n, k = 0;
    /* the feasible complete trials, minimisation sign */
    fr->F = hpo_xmalloc((n + 1) * (size_t)m * sizeof *fr->F);
    fr->raw = hpo_xmalloc((n + 1) * (size_t)m * sizeof *fr->raw);
    fr->viol = hpo_xmalloc((n + 1) * sizeof *fr->viol);
    fr->of = hpo_xmalloc((n + 1) * sizeof *fr->of);
    for (size_t i = 0; i < n; i++) {
        double v[TUN_MAX_OBJECTIVES], vi = NAN;
        if (api_trial_objectives(d, &fr->trials[i], v, &vi, NULL)) continue;
        if (d->n_cons > 0 && !(vi <= 0)) continue;
        fr->n_feasible++;
        for (int o = 0; o < m; o++) {
            fr->raw[k * (size_t)m + (size_t)o] = v[o];
            fr->F[k * (size_t)m + (size_t)o] = d->obj[o].maximize ? -v[o] : v[o];
        }
        fr->viol[k] = vi;
        fr->of[k++] = i;
    }
    fr->k = k;
    fr->rank = hpo_xmalloc((k + 1) * sizeof *fr->rank);
    tun_nondominated_sort(fr->F, NULL, k, m, fr->rank);
    fr->front = hpo_xmalloc((k + 1) * sizeof *fr->front);
    fr->P = hpo_xmalloc((k + 1) * (size_t)m * sizeof *fr->P);
    for (size_t i = 0; i < k; i++)
        if (fr->rank[i] == 0) {
            memcpy(fr->P + fr->nf * (size_t)m, fr->F + i * (size_t)m, (size_t)m * sizeof *fr->P);
            fr->front[fr->nf++] = (ranked){i, fr->F[i * (size_t)m], fr->trials[fr->of[i]].number};
        }
    qsort(fr->front, fr->nf, sizeof *fr->front, cmp_ranked);
    return 0;
}

json_t *api_front_trial_ids(api_ctx *ctx, const api_study_def *d, int64_t id) {
    front fr;
    json_t *ids = json_array();
    if (front_build(ctx, d, id, &fr) == 0)
        for (size_t a = 0; a < fr.nf; a++)
            json_array_append_new(ids, json_integer(fr.trials[fr.of[fr.front[a].i]].id));
    front_clear(&fr);
    return ids;
}

int api_best_trials(api_ctx *ctx, const api_study_def *d, int64_t id, size_t k, sto_trial **out, size_t *n) {
    sto_trial_filter f = {.state = STO_TRIAL_COMPLETE, .order = STO_ORDER_VALUE, .descending = d->maximize,
                          .limit = d->n_cons > 0 ? 0 : (int64_t)k};
    int rc = sto_trial_list(ctx->db, id, &f, out, n);
    if (rc || d->n_cons == 0) return rc;
    sto_trial *t = *out;
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        double v[TUN_MAX_OBJECTIVES], violation = NAN;
        int feasible = kept < k && api_trial_objectives(d, &t[i], v, &violation, NULL) == 0 && violation <= 0;
        if (!feasible) {
            sto_trial_clear(&t[i]);
            continue;
        }
        if (kept != i) t[kept] = t[i];
        kept++;
    }
    *n = kept;
    return 0;
}

/* The samples of an estimated hypervolume: about 2 10^8 point
 * comparisons at most (a fraction of a second), from 4,096 (a standard
 * error under 1.6% of the box) to 131,072 (under 0.14%). */
static size_t front_hv_samples(size_t nf, int m) {
    double s = 2e8 / ((double)nf * m);
    return s < 4096 ? 4096 : s > 131072 ? 131072 : (size_t)s;
}

void api_reply_front(api_ctx *ctx, int64_t id, api_response *resp) {
    api_study *st = NULL;
    front fr;
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    int rc = sto_trial_counts(ctx->db, id, counts);
    int64_t held = counts[STO_TRIAL_COMPLETE]; /* every complete trial is read (their outcomes) */
    if (api_heavy_acquire(ctx, held, resp)) return;
    if (rc == 0) rc = api_study_acquire(ctx, id, &st);
    if (rc) {
        api_fail_study_acquire(resp, rc, id);
        api_heavy_release(ctx, held);
        return;
    }
    const api_study_def *d = &st->def;
    int m = d->n_obj;
    if ((rc = front_build(ctx, d, id, &fr))) {
        front_clear(&fr);
        api_fail_rc(resp, rc, NULL);
        api_study_release(ctx, st);
        api_heavy_release(ctx, held);
        return;
    }
    size_t nf = fr.nf;
    const double *P = fr.P;
    /* the reference point (minimisation sign) */
    double ref[TUN_MAX_OBJECTIVES];
    json_t *jref = json_array(), *dirs = json_array();
    for (int o = 0; o < m; o++) {
        double lo = INFINITY, hi = -INFINITY; /* over every feasible complete trial */
        for (size_t i = 0; i < fr.k; i++) {
            double v = fr.F[i * (size_t)m + (size_t)o];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        if (!isnan(d->obj[o].reference))
            ref[o] = d->obj[o].maximize ? -d->obj[o].reference : d->obj[o].reference;
        else if (nf == 0)
            ref[o] = NAN;
        else
            ref[o] = hi + 0.1 * (hi > lo ? hi - lo : fmax(fabs(hi), 1.0));
        json_array_append_new(jref, api_json_real(d->obj[o].maximize ? -ref[o] : ref[o]));
        json_array_append_new(dirs, json_string(d->obj[o].maximize ? "maximize" : "minimize"));
    }
    /* exact where affordable, else estimated (front_hv_samples) */
    int exact = nf == 0 || tun_hypervolume_affordable(nf, m);
    double se = 0.0, hv = nf == 0 ? 0.0
                         : exact ? tun_hypervolume(P, nf, m, ref)
                                 : tun_hypervolume_mc(P, nf, m, ref, front_hv_samples(nf, m), 1, &se);
    json_t *arr = json_array();
    for (size_t a = 0; a < nf; a++) {
        size_t i = fr.front[a].i;
        json_array_append_new(arr, front_json(d, &fr.trials[fr.of[i]], fr.raw + i * (size_t)m, fr.viol[i]));
    }
    json_t *objectives = api_objectives_json(st->spec);
    api_reply_json(resp, 200,
                   json_pack("{s:o, s:s, s:o, s:o, s:o, s:b, s:f, s:o, s:I, s:I, s:o}", "trials", arr, "direction",
                             d->maximize ? "maximize" : "minimize", "directions", dirs, "objectives", objectives,
                             "hypervolume", api_json_real(hv), "hypervolume_exact", exact, "hypervolume_std_error",
                             se, "reference_point", jref, "n_complete", (json_int_t)fr.n, "n_feasible",
                             (json_int_t)fr.n_feasible, "p_value_top2", json_null()));
    front_clear(&fr);
    api_study_release(ctx, st);
    api_heavy_release(ctx, held);
}
