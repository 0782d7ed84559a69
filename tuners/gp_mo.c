/*
 * gp_mo.c - the "bayesian" sampler on a study with several objectives or
 * constraints (tun_gp_mo_suggest; study.c sends it there).
 *
 * - Observations: the complete trials (priors included); pruned, failed
 *   and running trials carry no objective vector and are left out of the
 *   fits (running ones are pending, below). Past TUN_GP_MAX_GP_POINTS, the best
 *   non-domination fronts first, then the most recent.
 * - One GP per objective (gp_model.c: Matern-5/2 ARD, MAP fit, the
 *   hyperparameters on at most TUN_GP_FIT_MAX_POINTS of the observations), on
 *   standardised values without the one-objective sampler's warp: the
 *   acquisition measures hypervolume, which a nonlinear warp would change.
 *   Infeasible trials are data for the objective GPs, as in Optuna's
 *   GPSampler.
 * - Constraints, as Optuna's GPSampler with constraints_func (Gardner et
 *   al. 2014): one GP per constraint on its values (met when <= 0,
 *   tun_study_finish_cons), standardised, and the acquisition adds
 *   sum_i log P(c_i <= 0) under them. A study told only violations (the sum
 *   of the positive parts) models that sum as one constraint.
 * - Acquisition: log EHVI (ehvi.c: exact over a box decomposition) with
 *   respect to the front of the feasible observations and the reference
 *   point worst + 10% of the range of each standardised objective over the
 *   feasible observations (all of them while none is feasible). Pending
 *   trials are kriging believers: every GP is conditioned on them at its
 *   posterior mean (their variance collapses) and their predicted vectors
 *   join the front, so parallel askers spread out.
 * - Candidates as the one-objective sampler's (gp_space.c): random
 *   configurations and perturbations of the TUN_GP_N_TOP_PERTURBED front members
 *   of largest exclusive hypervolume (or, with no feasible trial yet, of
 *   the least violating ones); the best few polished by L-BFGS on the
 *   acquisition's analytic gradient; a decoded point equal to an earlier
 *   trial gives way to the next.
 * - The first n_startup_trials complete or pruned trials (and until two
 *   are complete) are random. Deterministic given the rng and the history.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gp_space.h"

typedef struct obs {
    int n, n_pending, m, n_cons;
    double *U;      /* (n + n_pending) x d: observations, then pending */
    double *Y;      /* n x m, minimisation sign, standardised per objective */
    double *C;      /* n x n_cons constraint values, standardised per constraint */
    double *thr;    /* n_cons: where 0 lies after standardisation */
    char *feasible; /* n */
    const tun_trial_rec **rec; /* n */
} obs;

static void obs_clear(obs *o) {
    free(o->U);
    free(o->Y);
    free(o->C);
    free(o->thr);
    free(o->feasible);
    free(o->rec);
}

typedef struct ranked {
    int rank;
    int64_t number;
    int64_t i; /* position among the complete trials */
} ranked;

static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (x->number < y->number) - (x->number > y->number); /* the most recent first */
}

/* The complete trials to model, in trial order: all of them, or past
 * TUN_GP_MAX_GP_POINTS the best fronts first, then the most recent. */
static const tun_trial_rec **choose(const tun_study *t, int *n_out) {
    int64_t n = 0;
    for (int64_t i = 0; i < t->cap; i++)
        if (t->trials[i].present && t->trials[i].state == TUN_TRIAL_COMPLETE && t->trials[i].values) n++;
    const tun_trial_rec **all = hpo_xmalloc((size_t)(n ? n : 1) * sizeof *all);
    int64_t k = 0;
    for (int64_t i = 0; i < t->cap; i++)
        if (t->trials[i].present && t->trials[i].state == TUN_TRIAL_COMPLETE && t->trials[i].values)
            all[k++] = &t->trials[i];
    if (n <= TUN_GP_MAX_GP_POINTS) {
        *n_out = (int)n;
        return all;
    }
    int m = t->n_obj;
    double *F = hpo_xmalloc((size_t)n * m * sizeof *F), *viol = hpo_xmalloc((size_t)n * sizeof *viol);
    int *rank = hpo_xmalloc((size_t)n * sizeof *rank);
    ranked *rk = hpo_xmalloc((size_t)n * sizeof *rk);
    char *keep = hpo_xcalloc((size_t)n, 1);
    for (int64_t i = 0; i < n; i++) {
        memcpy(F + i * m, all[i]->values, (size_t)m * sizeof *F);
        viol[i] = all[i]->violation;
    }
    tun_nondominated_sort(F, t->constrained ? viol : NULL, (size_t)n, m, rank);
    for (int64_t i = 0; i < n; i++) rk[i] = (ranked){rank[i], all[i]->number, i};
    qsort(rk, (size_t)n, sizeof *rk, cmp_ranked);
    for (int j = 0; j < TUN_GP_MAX_GP_POINTS; j++) keep[rk[j].i] = 1;
    k = 0;
    for (int64_t i = 0; i < n; i++)
        if (keep[i]) all[k++] = all[i];
    free(keep);
    free(rk);
    free(rank);
    free(viol);
    free(F);
    *n_out = (int)k;
    return all;
}

/* Column j of the n x w matrix A, standardised in place; *mean, *std. */
static void standardise_column(double *A, int n, int w, int j, double *mean, double *std) {
    double *v = hpo_xmalloc((size_t)(n ? n : 1) * sizeof *v);
    for (int i = 0; i < n; i++) v[i] = A[(size_t)i * w + j];
    tun_gp_standardise(v, n, mean, std);
    for (int i = 0; i < n; i++) A[(size_t)i * w + j] = v[i];
    free(v);
}

/* The observations, pending points and constraint values of t. */
static void collect(const tun_study *t, const tun_gp_enc *e, obs *o) {
    int n, d = e->d, m = t->n_obj;
    const tun_trial_rec **rec = choose(t, &n);
    int n_pending = 0;
    for (int64_t i = 0; i < t->cap; i++)
        if (t->trials[i].present && t->trials[i].state == TUN_TRIAL_RUNNING) n_pending++;
    /* each constraint's values when every observation told them, else the
     * violation as one constraint (none told: the largest told, or 1) */
    int all_cons = t->n_cons > 0;
    for (int i = 0; i < n && all_cons; i++) all_cons = rec[i]->cons != NULL;
    int nc = all_cons ? t->n_cons : t->constrained ? 1 : 0;
    double worst_viol = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(rec[i]->violation)) worst_viol = fmax(worst_viol, rec[i]->violation);
    memset(o, 0, sizeof *o);
    o->n = n;
    o->n_pending = n_pending;
    o->m = m;
    o->n_cons = nc;
    o->rec = rec;
    o->U = hpo_xmalloc((size_t)(n + n_pending) * d * sizeof *o->U);
    o->Y = hpo_xmalloc((size_t)n * m * sizeof *o->Y);
    o->C = hpo_xmalloc((size_t)(n * nc > 0 ? n * nc : 1) * sizeof *o->C);
    o->thr = hpo_xmalloc((size_t)(nc ? nc : 1) * sizeof *o->thr);
    o->feasible = hpo_xmalloc((size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        const tun_trial_rec *r = rec[i];
        tun_gp_encode(e, t->space, r->x, o->U + (size_t)i * d);
        memcpy(o->Y + (size_t)i * m, r->values, (size_t)m * sizeof *o->Y);
        o->feasible[i] = !t->constrained || r->violation == 0;
        for (int c = 0; c < nc; c++)
            o->C[(size_t)i * nc + c] = all_cons ? r->cons[c]
                                                : isnan(r->violation) ? (worst_viol > 0 ? worst_viol : 1.0)
                                                                      : r->violation;
    }
    int p = n;
    for (int64_t i = 0; i < t->cap; i++)
        if (t->trials[i].present && t->trials[i].state == TUN_TRIAL_RUNNING)
            tun_gp_encode(e, t->space, t->trials[i].x, o->U + (size_t)p++ * d);
    double mean, std;
    for (int k = 0; k < m; k++) standardise_column(o->Y, n, m, k, &mean, &std);
    for (int c = 0; c < nc; c++) {
        standardise_column(o->C, n, nc, c, &mean, &std);
        o->thr[c] = (0.0 - mean) / std;
    }
}

/* ---- the acquisition --------------------------------------------------- */

/* log Phi(z) from log h (Phi = h dlogh), with its derivative phi / Phi. */
static double log_ndtr(double z, double *dz) {
    double dl, lh = tun_log_h(z, &dl);
    if (dz) *dz = 1.0 / dl - z;
    return lh + log(dl);
}

typedef struct mo_ctx {
    int m, n_cons, d;
    const tun_gp *gp; /* m objective GPs, then n_cons constraint GPs */
    const double *thr;
    tun_ehvi *ehvi;
    double *dmu, *dvar; /* work: (m + n_cons) x d each */
} mo_ctx;

/* log EHVI + the log probability that every constraint is met, from the
 * GPs' means and variances at a point; gmu, gvar (may be NULL) its
 * derivatives in each. */
static double acq_value(const mo_ctx *c, const double *mu, const double *var, double *gmu, double *gvar) {
    double v = tun_ehvi_log(c->ehvi, mu, var, gmu, gvar);
    for (int i = 0; i < c->n_cons; i++) {
        int j = c->m + i;
        double s = sqrt(var[j] > 1e-12 ? var[j] : 1e-12), z = (c->thr[i] - mu[j]) / s, dz;
        v += log_ndtr(z, gmu ? &dz : NULL);
        if (gmu) {
            gmu[j] = -dz / s;
            gvar[j] = var[j] > 1e-12 ? -dz * z / (2 * var[j]) : 0.0;
        }
    }
    return v;
}

/* The acquisition at an encoded point (tun_gp_acq_fn). */
static double acq_at(void *data, const double *u, double *grad) {
    mo_ctx *c = data;
    int w = c->m + c->n_cons, d = c->d;
    double mu[TUN_MAX_OBJECTIVES + TUN_MAX_CONSTRAINTS] = {0}, var[TUN_MAX_OBJECTIVES + TUN_MAX_CONSTRAINTS] = {0};
    double gmu[TUN_MAX_OBJECTIVES + TUN_MAX_CONSTRAINTS], gvar[TUN_MAX_OBJECTIVES + TUN_MAX_CONSTRAINTS];
    for (int j = 0; j < w; j++)
        tun_gp_predict(&c->gp[j], u, &mu[j], &var[j], grad ? c->dmu + (size_t)j * d : NULL,
                       grad ? c->dvar + (size_t)j * d : NULL);
    double v = acq_value(c, mu, var, grad ? gmu : NULL, grad ? gvar : NULL);
    if (grad) {
        memset(grad, 0, (size_t)d * sizeof *grad);
        for (int j = 0; j < w; j++)
            for (int k = 0; k < d; k++)
                grad[k] += gmu[j] * c->dmu[(size_t)j * d + k] + gvar[j] * c->dvar[(size_t)j * d + k];
    }
    return v;
}

/* ---- the sampler ------------------------------------------------------- */

/* The reference point: per objective, the worst of the rows of Y marked
 * in use plus 10% of their range (1 when they agree). */
static void reference_point(const obs *o, const char *use, double *ref) {
    for (int k = 0; k < o->m; k++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < o->n; i++)
            if (use[i]) {
                lo = fmin(lo, o->Y[(size_t)i * o->m + k]);
                hi = fmax(hi, o->Y[(size_t)i * o->m + k]);
            }
        ref[k] = hi > lo ? hi + 0.1 * (hi - lo) : hi + 1.0;
    }
}

/* The rows whose neighbourhoods seed candidates: the feasible front's
 * members of largest exclusive hypervolume (on a front too large for
 * those, tun_hv_greedy's first picks), or with nothing feasible the least
 * violating observations; at most TUN_GP_N_TOP_PERTURBED. */
static int perturbation_bases(const obs *o, const double *ref, int any_feasible, int *out) {
    int n = o->n, m = o->m, k = 0;
    double *score = hpo_xmalloc((size_t)n * sizeof *score);
    if (any_feasible) {
        double *F = hpo_xmalloc((size_t)n * m * sizeof *F);
        int *at = hpo_xmalloc((size_t)n * sizeof *at), nf = 0;
        for (int i = 0; i < n; i++)
            if (o->feasible[i]) {
                memcpy(F + (size_t)nf * m, o->Y + (size_t)i * m, (size_t)m * sizeof *F);
                at[nf++] = i;
            }
        for (int i = 0; i < n; i++) score[i] = -INFINITY;
        if (tun_hv_contributions_affordable((size_t)nf, m)) {
            double *c = hpo_xmalloc((size_t)(nf ? nf : 1) * sizeof *c);
            tun_hv_contributions(F, (size_t)nf, m, ref, c);
            for (int j = 0; j < nf; j++)
                if (c[j] > 0) score[at[j]] = c[j];
            free(c);
        } else {
            size_t pick[TUN_GP_N_TOP_PERTURBED], kk = nf < TUN_GP_N_TOP_PERTURBED ? (size_t)nf : TUN_GP_N_TOP_PERTURBED;
            tun_hv_greedy(F, (size_t)nf, m, ref, kk, pick);
            for (size_t j = 0; j < kk; j++) score[at[pick[j]]] = (double)(kk - j); /* the first pick first */
        }
        free(at);
        free(F);
    } else {
        for (int i = 0; i < n; i++) score[i] = -o->rec[i]->violation;
    }
    char *taken = hpo_xcalloc((size_t)n, 1);
    for (; k < TUN_GP_N_TOP_PERTURBED && k < n; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!taken[i] && score[i] > -INFINITY && (best < 0 || score[i] > score[best])) best = i;
        if (best < 0) break;
        taken[best] = 1;
        out[k] = best;
    }
    free(taken);
    free(score);
    return k;
}

int tun_gp_mo_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x) {
    (void)number;
    const tun_space *s = t->space;
    int64_t n_done = 0, n_complete = 0;
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *r = &t->trials[i];
        if (!r->present) continue;
        if (r->state == TUN_TRIAL_COMPLETE && r->values) n_complete++;
        if (r->state == TUN_TRIAL_COMPLETE || r->state == TUN_TRIAL_PRUNED) n_done++;
    }
    int n_startup = t->cfg.n_startup_trials > 0 ? t->cfg.n_startup_trials : 1;
    if (n_done < n_startup || n_complete < 2) {
        tun_space_sample(s, rng, x);
        return 0;
    }
    tun_gp_enc e;
    int rc = tun_gp_enc_init(&e, s);
    if (rc) return rc;
    int d = e.d, m = t->n_obj;
    obs o;
    collect(t, &e, &o);
    int n = o.n, nc = o.n_cons, w = m + nc, n_ready = 0;
    tun_gp *gp = hpo_xcalloc((size_t)w, sizeof *gp);
    tun_ehvi ehvi;
    int ehvi_ready = 0;
    double *col = hpo_xmalloc((size_t)n * sizeof *col);
    double *front = hpo_xmalloc((size_t)(n + o.n_pending) * m * sizeof *front);
    double *C = NULL, *MU = NULL, *VAR = NULL, *work = NULL, *xs = hpo_xmalloc((size_t)s->n * sizeof *xs);
    tun_gp_cand *cands = NULL;
    /* the GPs: objectives (conditioned on the pending points), then constraints */
    for (int j = 0; j < w; j++) {
        for (int i = 0; i < n; i++) col[i] = j < m ? o.Y[(size_t)i * m + j] : o.C[(size_t)i * nc + (j - m)];
        if ((rc = tun_gp_init(&gp[j], n, d, o.U, col)) < 0) goto done;
        n_ready++;
        if ((rc = tun_gp_fit_subset(&gp[j], rng, t->cfg.deterministic ? 1e-6 : 0.0, TUN_GP_FIT_MAX_POINTS,
                                    TUN_GP_FIT_RESTARTS, TUN_GP_FIT_MAX_EVAL)) < 0)
            goto done;
    }
    /* the front: feasible observations, then the pending points at their
     * predicted means (kriging believers) */
    char *use = hpo_xmalloc((size_t)(n ? n : 1));
    int nf = 0, any_feasible = 0;
    for (int i = 0; i < n; i++) any_feasible |= o.feasible[i];
    for (int i = 0; i < n; i++) {
        use[i] = any_feasible ? o.feasible[i] : 1;
        if (o.feasible[i]) memcpy(front + (size_t)nf++ * m, o.Y + (size_t)i * m, (size_t)m * sizeof *front);
    }
    double ref[TUN_MAX_OBJECTIVES];
    reference_point(&o, use, ref);
    free(use);
    for (int p = 0; p < o.n_pending; p++, nf++)
        for (int k = 0; k < m; k++) {
            double v;
            tun_gp_predict(&gp[k], o.U + (size_t)(n + p) * d, &front[(size_t)nf * m + k], &v, NULL, NULL);
        }
    for (int k = 0; k < m && o.n_pending > 0; k++)
        if ((rc = tun_gp_condition(&gp[k], o.n_pending, o.U + (size_t)n * d)) < 0) goto done;
    if ((rc = tun_ehvi_init(&ehvi, front, (size_t)nf, m, ref)) < 0) goto done;
    ehvi_ready = 1;

    /* candidates, scored */
    int bases[TUN_GP_N_TOP_PERTURBED];
    int n_base = perturbation_bases(&o, ref, any_feasible, bases);
    const double *base[TUN_GP_N_TOP_PERTURBED];
    for (int a = 0; a < n_base; a++) base[a] = o.U + (size_t)bases[a] * d;
    int n_cand = TUN_GP_N_RANDOM_CANDIDATES + n_base * TUN_GP_N_PERTURB_EACH;
    C = hpo_xmalloc((size_t)n_cand * d * sizeof *C);
    MU = hpo_xmalloc((size_t)n_cand * w * sizeof *MU);
    VAR = hpo_xmalloc((size_t)n_cand * w * sizeof *VAR);
    cands = hpo_xmalloc((size_t)n_cand * sizeof *cands);
    tun_gp_candidates(&e, s, rng, TUN_GP_N_RANDOM_CANDIDATES, base, n_base, TUN_GP_N_PERTURB_EACH, C);
    for (int j = 0; j < w; j++)
        if ((rc = tun_gp_predict_batch(&gp[j], n_cand, C, MU + (size_t)j * n_cand, VAR + (size_t)j * n_cand)) < 0)
            goto done;
    work = hpo_xmalloc((size_t)2 * w * d * sizeof *work);
    mo_ctx ctx = {m, nc, d, gp, o.thr, &ehvi, work, work + (size_t)w * d};
    for (int c = 0; c < n_cand; c++) {
        double mu[TUN_MAX_OBJECTIVES + TUN_MAX_CONSTRAINTS], var[TUN_MAX_OBJECTIVES + TUN_MAX_CONSTRAINTS];
        for (int j = 0; j < w; j++) {
            mu[j] = MU[(size_t)j * n_cand + c];
            var[j] = VAR[(size_t)j * n_cand + c];
        }
        cands[c].acq = acq_value(&ctx, mu, var, NULL, NULL);
        if (!isfinite(cands[c].acq)) cands[c].acq = -1e300;
        cands[c].idx = c;
    }
    qsort(cands, (size_t)n_cand, sizeof *cands, tun_gp_cmp_cand);
    int n_local = n_cand < TUN_GP_N_LOCAL_STARTS ? n_cand : TUN_GP_N_LOCAL_STARTS;
    for (int a = 0; a < n_local; a++)
        cands[a].acq = tun_gp_local_opt(acq_at, &ctx, &e, s, C + (size_t)cands[a].idx * d, cands[a].acq,
                                        TUN_GP_LOCAL_MAX_EVAL);
    qsort(cands, (size_t)n_local, sizeof *cands, tun_gp_cmp_cand);
    int found = 0;
    for (int a = 0; a < n_cand && !found; a++) {
        tun_gp_decode(&e, s, C + (size_t)cands[a].idx * d, xs);
        found = !tun_gp_already_tried(t, xs);
    }
    if (!found) tun_space_sample(s, rng, xs);
    memcpy(x, xs, (size_t)s->n * sizeof *x);
done:
    if (ehvi_ready) tun_ehvi_clear(&ehvi);
    for (int j = 0; j < n_ready; j++) tun_gp_clear(&gp[j]);
    free(gp);
    free(col);
    free(front);
    free(C);
    free(MU);
    free(VAR);
    free(work);
    free(cands);
    free(xs);
    obs_clear(&o);
    tun_gp_enc_clear(&e);
    return rc;
}
