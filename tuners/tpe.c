/*
 * tpe.c - the "tpe" sampler: tree-structured Parzen estimator (Bergstra et
 * al. 2011) as Optuna 3.x builds it (tun_tpe_suggest).
 *
 * - The first n_startup_trials (complete + pruned) are random.
 * - Trials are ranked: complete by value; then pruned, by their last
 *   reported step (later is better) and value there (Optuna's rule); pruned
 *   without reports; running trials last (constant liar: a pending trial
 *   counts as the worst, so it lands in the "above" set and its region is
 *   less likely to be proposed again by a parallel asker). Failed trials are
 *   ignored. The best gamma(n) = min(ceil(0.1 n), 25) (or ceil(cfg.tpe_gamma
 *   n)) form "below" (l), the rest "above" (g).
 * - Each set is a Parzen mixture: one kernel per trial plus a prior kernel
 *   (weight 1). Numeric parameters: Gaussians truncated to the domain, in the
 *   log domain where asked, ints and stepped floats widened by step/2 and
 *   scored by the mass of their bin; Optuna's bandwidths (distance to the
 *   neighbours, magic clip to [range / min(100, 1 + n_kernels), range]);
 *   prior N(mid, range). Choices and bools: each kernel is the smoothed
 *   one-hot (count + 1/k, normalised), the prior uniform. Trial weights:
 *   Optuna's default ramp (flat for the newest 25, linear below 1 for older).
 * - Candidates (cfg.tpe_n_candidates, default 24) are drawn from l; the one
 *   with the largest log l(x) - log g(x) wins.
 * - Multivariate (Optuna's multivariate=True, the default here): the
 *   unconditional parameters are modelled jointly, one mixture component per
 *   trial across all of them (Scott-rule bandwidth 0.2 n^(-1/(d+4)) range);
 *   this captures interactions and beats the univariate form on Branin,
 *   Hartmann6 and Rosenbrock. Conditional parameters are then sampled one by
 *   one (univariate), each from the trials where it is active, only when
 *   active given the parameters chosen before it.
 * Deterministic: only the rng (derived from seed and number) and the history.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifndef TPE_MULTIVARIATE
#define TPE_MULTIVARIATE 1
#endif
#define PRIOR_WEIGHT 1.0
#ifndef TPE_SIGMA0
#define TPE_SIGMA0 0.2
#endif
#define LOG_SQRT_2PI 0.91893853320467274178

/* ---- parameter domains --------------------------------------------------- */

typedef struct domain {
    int categorical; /* choice or bool */
    int n_cat;
    double low, high; /* internal (log where asked, widened by step/2) */
    double step;      /* internal bin width for linear stepped params, else 0 */
} domain;

static domain param_domain(const tun_param *p) {
    domain d = {0, 0, 0, 0, 0};
    if (p->type == TUN_CHOICE || p->type == TUN_BOOL) {
        d.categorical = 1;
        d.n_cat = p->type == TUN_BOOL ? 2 : p->n_choices;
        return d;
    }
    double half = p->step > 0 ? 0.5 * p->step : 0.0;
    d.low = p->low - half;
    d.high = p->high + half;
    if (p->log) {
        d.low = log(d.low > 0 ? d.low : p->low);
        d.high = log(d.high);
    } else {
        d.step = p->step > 0 ? p->step : 0.0;
    }
    if (!(d.high > d.low)) d.high = d.low + 1e-12;
    return d;
}

static double to_internal(const tun_param *p, double v) { return p->log ? log(v) : v; }

/* ---- one parameter's kernels ------------------------------------------- */

typedef struct kernels {
    int n;          /* kernels: observations then the prior */
    domain dom;
    double *mu, *sigma, *logz; /* numeric: logz = log of the mass inside the domain */
    double *logp;   /* categorical: n x n_cat log probabilities */
} kernels;

static void kernels_free(kernels *k) {
    free(k->mu);
    free(k->sigma);
    free(k->logz);
    free(k->logp);
    memset(k, 0, sizeof *k);
}

static double norm_cdf(double z) { return 0.5 * erfc(-z * 0.70710678118654752440); }

static int cmp_idx_by(const void *a, const void *b, const double *v) {
    double x = v[*(const int *)a], y = v[*(const int *)b];
    if (x != y) return x < y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* qsort has no context argument; a small insertion/merge sort keeps this pure. */
static void sort_idx(int *idx, int n, const double *v) {
    for (int i = 1; i < n; i++) {
        int t = idx[i], j = i - 1;
        while (j >= 0 && cmp_idx_by(&idx[j], &t, v) > 0) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = t;
    }
}

static void sort_idx_fast(int *idx, int n, const double *v, int *tmp) {
    if (n <= 32) {
        sort_idx(idx, n, v);
        return;
    }
    int h = n / 2;
    sort_idx_fast(idx, h, v, tmp);
    sort_idx_fast(idx + h, n - h, v, tmp);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_idx_by(&idx[i], &idx[j], v) <= 0 ? idx[i++] : idx[j++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof(int));
}

/* Builds the kernels of n observations z (internal values, or category
 * indices) plus the prior. Bandwidths: Optuna's neighbour rule, or the
 * multivariate Scott rule with d_joint parameters. */
static int kernels_build(kernels *k, domain dom, const double *z, int n, int multivariate,
                         int d_joint) {
    memset(k, 0, sizeof *k);
    k->n = n + 1;
    k->dom = dom;
    int nk = n + 1;
    if (dom.categorical) {
        int c = dom.n_cat;
        k->logp = malloc((size_t)nk * c * sizeof(double));
        if (!k->logp) return HPO_ENOMEM;
        /* Optuna 3.1: every cell gets prior_weight / (n + 1), the observed
         * category 1 more, each row normalised; the prior row is uniform */
        double base = PRIOR_WEIGHT / (n + 1);
        for (int i = 0; i < nk; i++) {
            double *lp = k->logp + (size_t)i * c;
            int obs = i < n ? (int)z[i] : -1;
            double tot = base * c + (obs >= 0 ? 1.0 : 0.0);
            for (int j = 0; j < c; j++) lp[j] = log((base + (j == obs ? 1.0 : 0.0)) / tot);
        }
        return 0;
    }
    k->mu = malloc((size_t)nk * sizeof(double));
    k->sigma = malloc((size_t)nk * sizeof(double));
    k->logz = malloc((size_t)nk * sizeof(double));
    int *idx = malloc((size_t)nk * 2 * sizeof(int));
    if (!k->mu || !k->sigma || !k->logz || !idx) {
        free(idx);
        kernels_free(k);
        return HPO_ENOMEM;
    }
    double low = dom.low, high = dom.high, range = high - low;
    for (int i = 0; i < n; i++) k->mu[i] = z[i];
    k->mu[n] = 0.5 * (low + high);
#ifndef TPE_MV_NEIGHBOUR_BW
#define TPE_MV_NEIGHBOUR_BW 1
#endif
    if (multivariate && !TPE_MV_NEIGHBOUR_BW) {
        double sg = TPE_SIGMA0 * pow(n > 1 ? n : 1, -1.0 / (d_joint + 4)) * range;
        for (int i = 0; i < n; i++) k->sigma[i] = sg;
    } else {
        /* distance to the farther neighbour among the sorted means (prior
         * included), the domain ends as outer neighbours; the two extreme
         * kernels use their inner gap only (consider_endpoints=False) */
        for (int i = 0; i < nk; i++) idx[i] = i;
        sort_idx_fast(idx, nk, k->mu, idx + nk);
        for (int r = 0; r < nk; r++) {
            double left = r > 0 ? k->mu[idx[r - 1]] : low;
            double right = r < nk - 1 ? k->mu[idx[r + 1]] : high;
            double m = k->mu[idx[r]];
            double s = fmax(m - left, right - m);
            if (nk >= 2) {
                if (r == 0) s = k->mu[idx[1]] - m;
                if (r == nk - 1) s = m - k->mu[idx[nk - 2]];
            }
            k->sigma[idx[r]] = s;
        }
    }
    double minsigma = range / fmin(100.0, 1.0 + nk), maxsigma = range;
    for (int i = 0; i < n; i++) k->sigma[i] = fmin(maxsigma, fmax(minsigma, k->sigma[i]));
    k->sigma[n] = range;
    for (int i = 0; i < nk; i++) {
        double a = (low - k->mu[i]) / k->sigma[i], b = (high - k->mu[i]) / k->sigma[i];
        double mass = norm_cdf(b) - norm_cdf(a);
        k->logz[i] = log(mass > 1e-300 ? mass : 1e-300);
    }
    free(idx);
    return 0;
}

/* log density (or bin mass) of kernel i at internal value z */
static double kernel_logpdf(const kernels *k, int i, double z) {
    if (k->dom.categorical) return k->logp[(size_t)i * k->dom.n_cat + (int)z];
    double mu = k->mu[i], s = k->sigma[i];
    if (k->dom.step > 0) {
        double hi = fmin(z + 0.5 * k->dom.step, k->dom.high);
        double lo = fmax(z - 0.5 * k->dom.step, k->dom.low);
        double m = norm_cdf((hi - mu) / s) - norm_cdf((lo - mu) / s);
        return log(m > 1e-300 ? m : 1e-300) - k->logz[i];
    }
    double t = (z - mu) / s;
#ifndef TPE_SIGMA_WEIGHTED
#define TPE_SIGMA_WEIGHTED 1
#endif
    return -0.5 * t * t - LOG_SQRT_2PI - (TPE_SIGMA_WEIGHTED ? 0.0 : log(s)) - k->logz[i];
}

/* A draw from kernel i, in internal units (category index for choices). */
static double kernel_sample(const kernels *k, int i, hpo_rng *rng) {
    if (k->dom.categorical) {
        double u = hpo_rng_uniform(rng), acc = 0.0;
        const double *lp = k->logp + (size_t)i * k->dom.n_cat;
        for (int j = 0; j < k->dom.n_cat; j++) {
            acc += exp(lp[j]);
            if (u < acc) return (double)j;
        }
        return (double)(k->dom.n_cat - 1);
    }
    for (int t = 0; t < 100; t++) {
        double v = k->mu[i] + k->sigma[i] * hpo_rng_normal(rng);
        if (v >= k->dom.low && v <= k->dom.high) return v;
    }
    return k->dom.low + hpo_rng_uniform(rng) * (k->dom.high - k->dom.low);
}

/* ---- trial ranking and weights ----------------------------------------- */

typedef struct ranked {
    const tun_trial_rec *rec;
    int cls;       /* 0 complete, 1 pruned with reports, 2 pruned without, 3 running */
    double a, b;   /* the sort keys within the class */
} ranked;

static int cmp_ranked(const void *pa, const void *pb) {
    const ranked *x = pa, *y = pb;
    if (x->cls != y->cls) return x->cls - y->cls;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    return (x->rec->number > y->rec->number) - (x->rec->number < y->rec->number);
}

static int cmp_number(const void *pa, const void *pb) {
    const ranked *x = pa, *y = pb;
    return (x->rec->number > y->rec->number) - (x->rec->number < y->rec->number);
}

static int n_below_of(const tun_config *cfg, int n) {
    int b;
    if (cfg->tpe_gamma > 0 && cfg->tpe_gamma < 1) {
        b = (int)ceil(cfg->tpe_gamma * n);
    } else {
        b = (int)ceil(0.1 * n);
        if (b > 25) b = 25;
    }
    if (b < 1 && n > 0) b = 1;
    return b > n ? n : b;
}

/* Optuna's default_weights(n) followed by the prior, normalised, as logs. */
static void log_weights(int n, double *lw) {
    double tot = PRIOR_WEIGHT;
    for (int i = 0; i < n; i++) {
        double w = 1.0;
        if (n >= 25 && i < n - 25) w = 1.0 / n + (1.0 - 1.0 / n) * (n - 25 > 1 ? (double)i / (n - 26) : 0.0);
        lw[i] = w;
        tot += w;
    }
    lw[n] = PRIOR_WEIGHT;
    for (int i = 0; i <= n; i++) lw[i] = log(lw[i] / tot);
}

static double logsumexp(const double *v, int n) {
    double m = -INFINITY, s = 0.0;
    for (int i = 0; i < n; i++)
        if (v[i] > m) m = v[i];
    if (!isfinite(m)) return m;
    for (int i = 0; i < n; i++) s += exp(v[i] - m);
    return m + log(s);
}

/* Ranks every complete, pruned and running trial (Optuna's order), splits
 * them with gamma(n) (n: the complete and pruned ones), then keeps on each
 * side the trials in which every parameter of `params` is present.
 * below/above get them in trial-number order; free(*below) releases both. */
static int split_trials(const tun_study *t, const int *params, int n_params, ranked **below,
                        int *n_below, ranked **above, int *n_above) {
    int64_t n = 0;
    for (int64_t i = 0; i < t->cap; i++)
        if (t->trials[i].present) n++;
    ranked *r = malloc((size_t)(n > 0 ? n : 1) * sizeof(ranked));
    if (!r) return HPO_ENOMEM;
    int m = 0, n_finished = 0;
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *rec = &t->trials[i];
        if (!rec->present || rec->state == TUN_TRIAL_FAILED) continue;
        ranked e = {rec, 0, 0.0, 0.0};
        if (rec->state == TUN_TRIAL_COMPLETE) {
            e.a = rec->value;
        } else if (rec->state == TUN_TRIAL_PRUNED) {
            if (rec->n_steps > 0) {
                e.cls = 1;
                e.a = -(double)rec->steps[rec->n_steps - 1];
                e.b = rec->step_values[rec->n_steps - 1];
                if (isnan(e.b)) e.b = INFINITY;
            } else {
                e.cls = 2;
            }
        } else {
            e.cls = 3;
        }
        if (e.cls < 3) n_finished++;
        if (isnan(e.a)) e.a = INFINITY;
        r[m++] = e;
    }
    qsort(r, (size_t)m, sizeof(ranked), cmp_ranked);
    int nb = n_below_of(&t->cfg, n_finished);
    /* keep the trials where the group is present, on each side */
    int kb = 0, ka = 0;
    for (int i = 0; i < m; i++) {
        int ok = 1;
        for (int j = 0; j < n_params && ok; j++)
            if (isnan(r[i].rec->x[params[j]])) ok = 0;
        if (!ok) continue;
        if (i < nb)
            r[kb++] = r[i];
        else
            r[nb + ka++] = r[i];
    }
    memmove(r + kb, r + nb, (size_t)ka * sizeof(ranked));
    qsort(r, (size_t)kb, sizeof(ranked), cmp_number);
    qsort(r + kb, (size_t)ka, sizeof(ranked), cmp_number);
    *below = r;
    *n_below = kb;
    *above = r + kb;
    *n_above = ka;
    return 0;
}

/* ---- one mixture per side: kernels of every parameter of a group ------ */

typedef struct mixture {
    int n;          /* components (trials + prior) */
    double *logw;
    kernels *k;     /* one per parameter of the group */
} mixture;

static void mixture_free(mixture *mx, int n_params) {
    if (mx->k)
        for (int j = 0; j < n_params; j++) kernels_free(&mx->k[j]);
    free(mx->k);
    free(mx->logw);
    memset(mx, 0, sizeof *mx);
}

static int mixture_build(mixture *mx, const tun_space *s, const int *params, int n_params,
                         const ranked *tr, int n, int multivariate) {
    int rc = 0;
    memset(mx, 0, sizeof *mx);
    mx->n = n + 1;
    mx->logw = malloc((size_t)(n + 1) * sizeof(double));
    mx->k = calloc((size_t)n_params, sizeof(kernels));
    double *z = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!mx->logw || !mx->k || !z) {
        rc = HPO_ENOMEM;
        goto fail;
    }
    log_weights(n, mx->logw);
    for (int j = 0; j < n_params; j++) {
        const tun_param *p = &s->params[params[j]];
        domain dom = param_domain(p);
        for (int i = 0; i < n; i++) {
            double v = tr[i].rec->x[params[j]];
            z[i] = dom.categorical ? v : to_internal(p, v);
        }
        if ((rc = kernels_build(&mx->k[j], dom, z, n, multivariate, n_params)) < 0) goto fail;
    }
    free(z);
    return 0;
fail:
    free(z);
    mixture_free(mx, n_params);
    return rc;
}

/* log density of the mixture at the internal point zc (n_params values) */
static double mixture_logpdf(const mixture *mx, int n_params, const double *zc, double *buf) {
    for (int i = 0; i < mx->n; i++) {
        double v = mx->logw[i];
        for (int j = 0; j < n_params; j++) v += kernel_logpdf(&mx->k[j], i, zc[j]);
        buf[i] = v;
    }
    return logsumexp(buf, mx->n);
}

static int pick_component(const mixture *mx, hpo_rng *rng) {
    double u = hpo_rng_uniform(rng), acc = 0.0;
    for (int i = 0; i < mx->n; i++) {
        acc += exp(mx->logw[i]);
        if (u < acc) return i;
    }
    return mx->n - 1;
}

/* Internal value -> the parameter's value, snapped to its domain. */
static double from_internal(const tun_space *s, int i, double z) {
    const tun_param *p = &s->params[i];
    if (p->type == TUN_CHOICE || p->type == TUN_BOOL) return z;
    return tun_space_snap(s, i, p->log ? exp(z) : z);
}

/* Samples the group `params` jointly (n_params == 1: univariate) into x. */
static int sample_group(const tun_study *t, const int *params, int n_params, int multivariate,
                        hpo_rng *rng, double *x) {
    const tun_space *s = t->space;
    ranked *below = NULL, *above = NULL;
    int nb = 0, na = 0, rc;
    mixture l = {0}, g = {0};
    double *buf = NULL;
    double best = -INFINITY, zc[n_params], xv[n_params], xc[n_params];
    if ((rc = split_trials(t, params, n_params, &below, &nb, &above, &na)) < 0) return rc;
    if ((rc = mixture_build(&l, s, params, n_params, below, nb, multivariate)) < 0) goto fail;
    if ((rc = mixture_build(&g, s, params, n_params, above, na, multivariate)) < 0) goto fail;
    buf = malloc((size_t)(nb + na + 2) * sizeof(double));
    if (!buf) {
        rc = HPO_ENOMEM;
        goto fail;
    }
    int n_cand = t->cfg.tpe_n_candidates > 0 ? t->cfg.tpe_n_candidates : 24;
    for (int c = 0; c < n_cand; c++) {
        int comp = pick_component(&l, rng);
        for (int j = 0; j < n_params; j++) {
            double z = kernel_sample(&l.k[j], comp, rng);
            xc[j] = from_internal(s, params[j], z);
            const tun_param *p = &s->params[params[j]];
            zc[j] = l.k[j].dom.categorical ? xc[j] : to_internal(p, xc[j]);
        }
        double score = mixture_logpdf(&l, n_params, zc, buf) - mixture_logpdf(&g, n_params, zc, buf);
        if (c == 0 || score > best) {
            best = score;
            memcpy(xv, xc, sizeof xv);
        }
    }
    for (int j = 0; j < n_params; j++) x[params[j]] = xv[j];
fail:
    free(buf);
    mixture_free(&l, n_params);
    mixture_free(&g, n_params);
    (void)above;
    free(below);
    return rc;
}

int tun_tpe_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x) {
    const tun_space *s = t->space;
    int64_t n_done = 0;
    for (int64_t i = 0; i < t->cap; i++)
        if (t->trials[i].present && (t->trials[i].state == TUN_TRIAL_COMPLETE ||
                                     t->trials[i].state == TUN_TRIAL_PRUNED))
            n_done++;
    if (n_done < t->cfg.n_startup_trials || n_done == 0) {
        tun_space_sample(s, rng, x);
        return 0;
    }
    int rc = 0, n_joint = 0;
    int joint[s->n];
    for (int i = 0; i < s->n; i++) x[i] = NAN;
    if (TPE_MULTIVARIATE) {
        for (int i = 0; i < s->n; i++)
            if (s->params[i].parent < 0) joint[n_joint++] = i;
        if (n_joint > 1 && (rc = sample_group(t, joint, n_joint, 1, rng, x)) < 0) return rc;
        if (n_joint == 1) n_joint = 0; /* a single one is sampled the univariate way */
    }
    for (int i = 0; i < s->n; i++) {
        if (n_joint > 0 && s->params[i].parent < 0) continue;
        if (!tun_space_is_active(s, x, i)) continue;
        if ((rc = sample_group(t, &i, 1, 0, rng, x)) < 0) return rc;
    }
    return 0;
}
#ifdef TPE_DEBUG
#include <stdio.h>
void tpe_debug_grid(const tun_study *t);
void tpe_debug_grid(const tun_study *t) {
    int p0 = 0;
    ranked *below, *above;
    int nb, na;
    mixture l, g;
    split_trials(t, &p0, 1, &below, &nb, &above, &na);
    mixture_build(&l, t->space, &p0, 1, below, nb, 0);
    mixture_build(&g, t->space, &p0, 1, above, na, 0);
    double buf[1000];
    for (int i = 0; i <= 40; i++) {
        double z = -10 + 0.5 * i;
        printf("%.1f %.3f ", z, mixture_logpdf(&l, 1, &z, buf) - mixture_logpdf(&g, 1, &z, buf));
    }
    printf("\ngsig"); for (int i = 0; i < g.n; i++) printf(" %.3f@%.2f/%.3f", g.k[0].sigma[i], g.k[0].mu[i], exp(g.logw[i]));
    printf("\nsig");
    for (int i = 0; i < l.n; i++) printf(" %g@%g", l.k[0].sigma[i], l.k[0].mu[i]);
    printf("\n");
}
#endif
