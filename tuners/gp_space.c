/* gp_space.c - the pieces both "bayesian" samplers use (gp_space.h): the
 * unit-cube encoding, candidates, the local optimiser and the
 * hyperparameter fit on a subset. */
#include <math.h>
#include <nlopt.h>
#include <stdlib.h>
#include <string.h>

#include "gp_space.h"

/* ---- unit-cube encoding ------------------------------------------------ */

int tun_gp_is_numeric(const tun_param *p) { return p->type == TUN_INT || p->type == TUN_FLOAT; }

/* a parameter's columns: a number's one, a choice's one-hot */
static int width(const tun_param *p) { return tun_gp_is_numeric(p) ? 1 : p->type == TUN_BOOL ? 2 : p->n_choices; }

int tun_gp_columns(const tun_space *s) {
    int d = 0;
    for (int i = 0; i < s->n; i++) d += width(&s->params[i]);
    return d;
}

int tun_gp_enc_init(tun_gp_enc *e, const tun_space *s) {
    e->col = malloc((size_t)s->n * sizeof(int));
    e->lo = malloc((size_t)s->n * sizeof(double));
    e->hi = malloc((size_t)s->n * sizeof(double));
    if (!e->col || !e->lo || !e->hi) {
        free(e->col);
        free(e->lo);
        free(e->hi);
        return HPO_ENOMEM;
    }
    int d = 0;
    for (int i = 0; i < s->n; i++) {
        const tun_param *p = &s->params[i];
        e->col[i] = d;
        if (tun_gp_is_numeric(p)) {
            double half = p->step > 0 ? 0.5 * p->step : 0.0;
            double lo = p->low - half, hi = p->high + half;
            if (p->log) {
                lo = log(lo > 0 ? lo : p->low);
                hi = log(hi);
            }
            e->lo[i] = lo;
            e->hi[i] = hi > lo ? hi : lo + 1.0;
        } else {
            e->lo[i] = e->hi[i] = 0.0;
        }
        d += width(p);
    }
    e->d = d;
    return 0;
}

void tun_gp_enc_clear(tun_gp_enc *e) {
    free(e->col);
    free(e->lo);
    free(e->hi);
}

void tun_gp_encode(const tun_gp_enc *e, const tun_space *s, const double *x, double *u) {
    for (int i = 0; i < s->n; i++) {
        const tun_param *p = &s->params[i];
        double *c = u + e->col[i];
        if (tun_gp_is_numeric(p)) {
            if (isnan(x[i])) {
                c[0] = 0.5;
            } else {
                double v = p->log ? log(x[i]) : x[i];
                double t = (v - e->lo[i]) / (e->hi[i] - e->lo[i]);
                c[0] = t < 0 ? 0 : t > 1 ? 1 : t;
            }
        } else {
            int k = p->type == TUN_BOOL ? 2 : p->n_choices;
            for (int j = 0; j < k; j++) c[j] = 0.0;
            if (!isnan(x[i]) && x[i] >= 0 && x[i] < k) c[(int)x[i]] = 1.0;
        }
    }
}

void tun_gp_decode(const tun_gp_enc *e, const tun_space *s, const double *u, double *x) {
    for (int i = 0; i < s->n; i++) {
        const tun_param *p = &s->params[i];
        if (!tun_space_is_active(s, x, i)) {
            x[i] = NAN;
            continue;
        }
        const double *c = u + e->col[i];
        if (tun_gp_is_numeric(p)) {
            double v = e->lo[i] + c[0] * (e->hi[i] - e->lo[i]);
            x[i] = tun_space_snap(s, i, p->log ? exp(v) : v);
        } else {
            int k = p->type == TUN_BOOL ? 2 : p->n_choices, best = 0;
            for (int j = 1; j < k; j++)
                if (c[j] > c[best]) best = j;
            x[i] = (double)best;
        }
    }
}

static int same_config(const tun_space *s, const double *a, const double *b) {
    for (int i = 0; i < s->n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return 0;
        if (!isnan(a[i]) && a[i] != b[i]) return 0;
    }
    return 1;
}

int tun_gp_already_tried(const tun_study *t, const double *x) {
    for (int64_t i = 0; i < t->cap; i++)
        if (t->trials[i].present && same_config(t->space, t->trials[i].x, x)) return 1;
    return 0;
}

/* ---- candidates -------------------------------------------------------- */

int tun_gp_candidates(const tun_gp_enc *e, const tun_space *s, hpo_rng *rng, int n_random,
                      const double *const *base, int n_base, int n_each, double *C) {
    int d = e->d;
    double xs[TUN_MAX_PARAMS], xb[TUN_MAX_PARAMS];
    for (int j = 0; j < n_random; j++) {
        tun_space_sample(s, rng, xs);
        tun_gp_encode(e, s, xs, C + (size_t)j * d);
    }
    static const double sigmas[] = {0.005, 0.02, 0.05, 0.15};
    int j = n_random;
    for (int a = 0; a < n_base; a++) {
        tun_gp_decode(e, s, base[a], xb);
        for (int k = 0; k < n_each; k++, j++) {
            double *c = C + (size_t)j * d, sg = sigmas[k % HPO_ARRAY_LEN(sigmas)];
            memcpy(c, base[a], (size_t)d * sizeof(double));
            for (int i = 0; i < s->n; i++) {
                if (!tun_gp_is_numeric(&s->params[i]) || isnan(xb[i])) continue;
                double v = c[e->col[i]] + sg * hpo_rng_normal(rng);
                c[e->col[i]] = v < 0 ? 0 : v > 1 ? 1 : v;
            }
        }
    }
    return j;
}

/* ---- local optimisation ------------------------------------------------ */

typedef struct local_ctx {
    tun_gp_acq_fn f;
    void *data;
    double *u;       /* full point; free columns overwritten */
    const int *free_cols;
    double *grad;    /* d: the gradient in every column */
} local_ctx;

static double local_objective(unsigned n, const double *z, double *grad, void *data) {
    local_ctx *c = data;
    for (unsigned j = 0; j < n; j++) c->u[c->free_cols[j]] = z[j];
    double v = c->f(c->data, c->u, grad ? c->grad : NULL);
    if (grad)
        for (unsigned j = 0; j < n; j++) grad[j] = c->grad[c->free_cols[j]];
    return isfinite(v) ? v : -1e300;
}

int tun_gp_cmp_cand(const void *a, const void *b) {
    const tun_gp_cand *x = a, *y = b;
    if (x->acq != y->acq) return x->acq < y->acq ? 1 : -1; /* descending */
    return (x->idx > y->idx) - (x->idx < y->idx);
}

double tun_gp_local_opt(tun_gp_acq_fn f, void *data, const tun_gp_enc *e, const tun_space *s, double *u,
                        double start_value, int max_eval) {
    int d = e->d, nf = 0;
    int free_cols[TUN_MAX_PARAMS]; /* the numeric parameters' columns */
    double x[TUN_MAX_PARAMS];
    tun_gp_decode(e, s, u, x);
    for (int i = 0; i < s->n; i++)
        if (tun_gp_is_numeric(&s->params[i]) && !isnan(x[i])) free_cols[nf++] = e->col[i];
    if (nf == 0) return start_value;
    double z[TUN_MAX_PARAMS], lb[TUN_MAX_PARAMS], ub[TUN_MAX_PARAMS];
    for (int j = 0; j < nf; j++) {
        z[j] = u[free_cols[j]];
        lb[j] = 0.0;
        ub[j] = 1.0;
    }
    double *work = malloc((size_t)d * sizeof(double)); /* d may be large: not on the stack */
    if (!work) return start_value;
    local_ctx c = {f, data, u, free_cols, work};
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, (unsigned)nf);
    if (!opt) {
        free(work);
        return start_value;
    }
    nlopt_set_lower_bounds(opt, lb);
    nlopt_set_upper_bounds(opt, ub);
    nlopt_set_maxeval(opt, max_eval);
    nlopt_set_ftol_abs(opt, 1e-9);
    nlopt_set_xtol_rel(opt, 1e-6);
    nlopt_set_max_objective(opt, local_objective, &c);
    double z0[TUN_MAX_PARAMS], v = -INFINITY;
    memcpy(z0, z, (size_t)nf * sizeof(double));
    nlopt_result res = nlopt_optimize(opt, z, &v);
    nlopt_destroy(opt);
    free(work);
    if ((res < 0 && res != NLOPT_ROUNDOFF_LIMITED) || !(v > start_value)) {
        for (int j = 0; j < nf; j++) u[free_cols[j]] = z0[j];
        return start_value;
    }
    for (int j = 0; j < nf; j++) u[free_cols[j]] = z[j];
    return v;
}

/* ---- hyperparameters ------------------------------------------------- */

/* The fit costs O(n^3) per evaluation and a few hundred points pin the
 * lengthscales no better than a hundred; the posterior then uses every
 * observation with that theta. */
int tun_gp_fit_subset(tun_gp *gp, hpo_rng *rng, double fixed_noise, int max_points, int restarts, int max_eval) {
    int n = gp->n, d = gp->d, rc;
    gp->fixed_noise = fixed_noise;
    if (n <= max_points) return tun_gp_fit(gp, rng, restarts, max_eval);
    int *order = malloc((size_t)n * sizeof(int));
    char *take = calloc((size_t)n, 1);
    double *Xs = malloc((size_t)max_points * d * sizeof(double));
    double *ys = malloc((size_t)max_points * sizeof(double));
    tun_gp sub;
    int sub_ready = 0;
    if (!order || !take || !Xs || !ys) {
        rc = HPO_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    int n_best = max_points / 2;
    for (int a = 0; a < n_best; a++) /* partial selection sort */
        for (int b = a + 1; b < n; b++)
            if (gp->y[order[b]] < gp->y[order[a]] ||
                (gp->y[order[b]] == gp->y[order[a]] && order[b] < order[a])) {
                int t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    for (int a = 0; a < n_best; a++) take[order[a]] = 1;
    int rest = n - n_best, want = max_points - n_best, seen = 0, got = 0;
    for (int i = 0; i < n && got < want; i++) {
        if (take[i]) continue;
        /* the rest, evenly: take when the running quota crosses an integer */
        if ((long)(seen + 1) * want / rest > got) {
            take[i] = 1;
            got++;
        }
        seen++;
    }
    int m = 0;
    for (int i = 0; i < n && m < max_points; i++)
        if (take[i]) {
            memcpy(Xs + (size_t)m * d, gp->X + (size_t)i * d, (size_t)d * sizeof(double));
            ys[m++] = gp->y[i];
        }
    if ((rc = tun_gp_init(&sub, m, d, Xs, ys)) < 0) goto fail;
    sub_ready = 1;
    sub.fixed_noise = fixed_noise;
    if ((rc = tun_gp_fit(&sub, rng, restarts, max_eval)) < 0) goto fail;
    rc = tun_gp_set_theta(gp, sub.theta);
fail:
    if (sub_ready) tun_gp_clear(&sub);
    free(order);
    free(take);
    free(Xs);
    free(ys);
    return rc;
}

