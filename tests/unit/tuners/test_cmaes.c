/* tuners: the "cmaes" sampler and its CMA-ES core (cma.h) - one generation's
 * update against a plain reference of the tutorial's equations, convergence
 * on a sphere and an ellipsoid, the margin keeping discrete values moving,
 * IPOP restarts, reproducibility per seed, parallel asks before tells,
 * failed members replaced, the state rebuilt from a replayed history, the
 * fallback for choices and conditions, and the options. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"
#include "tuners/sampler_util.h"
#include "tuners_internal.h"

static tun_study *new_study(const tun_space *s, uint64_t seed) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_CMAES;
    cfg.seed = seed;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    return t;
}

/* ---- the reference: the tutorial's equations, written plainly ---------- */

/* Cyclic Jacobi eigendecomposition of a symmetric n x n matrix (row-major):
 * V's columns are the eigenvectors, ev the eigenvalues. */
static void jacobi(const double *S, int n, double *V, double *ev) {
    double a[16 * 16];
    memcpy(a, S, (size_t)n * n * sizeof *a);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) V[i * n + j] = i == j;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) off += a[i * n + j] * a[i * n + j];
        if (off < 1e-30) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (fabs(a[p * n + q]) < 1e-300) continue;
                double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* a = J^T a J */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) {
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < n; k++) {
                    double vkp = V[k * n + p], vkq = V[k * n + q];
                    V[k * n + p] = c * vkp - s * vkq;
                    V[k * n + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < n; i++) ev[i] = a[i * n + i];
}

typedef struct ref_state {
    int n, lambda;
    double m[16], sigma, C[256], ps[16], pc[16];
    int g;
} ref_state;

/* One generation of (mu/mu_w, lambda)-CMA-ES with active weights, from the
 * tutorial (arXiv:1604.00772, eqs. 38-47, 49-53), every constant derived
 * here again. */
static void ref_tell(ref_state *s, const double *X, const double *f) {
    int n = s->n, lam = s->lambda, mu = lam / 2;
    double N = n;
    /* sort indices by f */
    int ord[64];
    for (int i = 0; i < lam; i++) ord[i] = i;
    for (int i = 1; i < lam; i++)
        for (int j = i; j > 0 && f[ord[j]] < f[ord[j - 1]]; j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    double wp[64], w[64], sp = 0, sp2 = 0, sn = 0, sn2 = 0;
    for (int i = 0; i < lam; i++) {
        wp[i] = log((lam + 1) / 2.0) - log(i + 1.0);
        if (i < mu) sp += wp[i], sp2 += wp[i] * wp[i];
        else sn += wp[i], sn2 += wp[i] * wp[i];
    }
    double mueff = sp * sp / sp2, mueffm = sn * sn / sn2;
    double c1 = 2 / ((N + 1.3) * (N + 1.3) + mueff);
    double cmu = 2 * (mueff - 2 + 1 / mueff) / ((N + 2) * (N + 2) + mueff);
    if (cmu > 1 - c1) cmu = 1 - c1;
    double amu = 1 + c1 / cmu, aeff = 1 + 2 * mueffm / (mueff + 2),
           apos = (1 - c1 - cmu) / (N * cmu);
    double amin = fmin(amu, fmin(aeff, apos)), pos = 0, neg = 0;
    for (int i = 0; i < lam; i++) {
        if (wp[i] >= 0) pos += wp[i];
        else neg += -wp[i];
    }
    for (int i = 0; i < lam; i++) w[i] = wp[i] >= 0 ? wp[i] / pos : amin * wp[i] / neg;
    double cs = (mueff + 2) / (N + mueff + 5);
    double ds = 1 + 2 * fmax(0, sqrt((mueff - 1) / (N + 1)) - 1) + cs;
    double cc = (4 + mueff / N) / (N + 4 + 2 * mueff / N);
    double chin = sqrt(N) * (1 - 1 / (4 * N) + 1 / (21 * N * N));

    /* C^-1/2 by Jacobi */
    double V[256], ev[16], Ci[256];
    jacobi(s->C, n, V, ev);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            Ci[i * n + j] = 0;
            for (int k = 0; k < n; k++) Ci[i * n + j] += V[i * n + k] * V[j * n + k] / sqrt(ev[k]);
        }
    s->g++;
    double y[64][16], yw[16] = {0};
    for (int k = 0; k < lam; k++)
        for (int i = 0; i < n; i++) y[k][i] = (X[ord[k] * n + i] - s->m[i]) / s->sigma;
    for (int k = 0; k < mu; k++)
        for (int i = 0; i < n; i++) yw[i] += w[k] * y[k][i];
    for (int i = 0; i < n; i++) s->m[i] += s->sigma * yw[i];
    double nps = 0;
    for (int i = 0; i < n; i++) {
        double v = 0;
        for (int j = 0; j < n; j++) v += Ci[i * n + j] * yw[j];
        s->ps[i] = (1 - cs) * s->ps[i] + sqrt(cs * (2 - cs) * mueff) * v;
        nps += s->ps[i] * s->ps[i];
    }
    nps = sqrt(nps);
    s->sigma *= exp(cs / ds * (nps / chin - 1));
    int hs = nps / sqrt(1 - pow(1 - cs, 2.0 * (s->g + 1))) < (1.4 + 2 / (N + 1)) * chin;
    for (int i = 0; i < n; i++) s->pc[i] = (1 - cc) * s->pc[i] + hs * sqrt(cc * (2 - cc) * mueff) * yw[i];
    double wsum = 0;
    for (int k = 0; k < lam; k++) wsum += w[k];
    double dh = (1 - hs) * cc * (2 - cc);
    double Cn[256];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double v = (1 + c1 * dh - c1 - cmu * wsum) * s->C[i * n + j] + c1 * s->pc[i] * s->pc[j];
            for (int k = 0; k < lam; k++) {
                double wk = w[k];
                if (wk < 0) {
                    double q = 0;
                    for (int a = 0; a < n; a++) {
                        double t = 0;
                        for (int b = 0; b < n; b++) t += Ci[a * n + b] * y[k][b];
                        q += t * t;
                    }
                    wk *= N / (q + 1e-8);
                }
                v += cmu * wk * y[k][i] * y[k][j];
            }
            Cn[i * n + j] = v;
        }
    memcpy(s->C, Cn, sizeof Cn);
}

static double maxdiff(const double *a, const double *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

static void test_generation_matches_reference(void **state) {
    (void)state;
    enum { N = 4, LAM = 9 };
    double m0[N] = {0.5, 0.4, 0.6, 0.5}, X[LAM * N], f[LAM];
    tun_cma c;
    assert_int_equal(tun_cma_init(&c, N, LAM, m0, 0.2, NULL), 0);
    hpo_rng rng;
    hpo_rng_seed(&rng, 5);
    double worst = 0;
    for (int gen = 0; gen < 6; gen++) {
        /* a rotated ellipsoid: C leaves the identity after a few generations */
        for (int k = 0; k < LAM; k++) {
            tun_cma_sample(&c, &rng, X + k * N);
            double u = X[k * N] + X[k * N + 1] - 1, v = X[k * N + 2] - 0.3, w2 = X[k * N + 3];
            f[k] = 100 * u * u + v * v + 10 * w2 * w2;
        }
        ref_state r = {.n = N, .lambda = LAM, .sigma = c.sigma, .g = c.g};
        memcpy(r.m, c.m, sizeof(double) * N);
        memcpy(r.C, c.C, sizeof(double) * N * N);
        memcpy(r.ps, c.ps, sizeof(double) * N);
        memcpy(r.pc, c.pc, sizeof(double) * N);
        ref_tell(&r, X, f);
        assert_int_equal(tun_cma_tell(&c, X, f), 0);
        double dm = maxdiff(r.m, c.m, N), dC = maxdiff(r.C, c.C, N * N);
        double dp = fmax(maxdiff(r.ps, c.ps, N), maxdiff(r.pc, c.pc, N));
        double ds = fabs(r.sigma - c.sigma) / r.sigma;
        printf("generation %d: max |diff| mean %.3g, sigma (relative) %.3g, C %.3g, paths %.3g\n",
               gen + 1, dm, ds, dC, dp);
        worst = fmax(worst, fmax(fmax(dm, ds), fmax(dC, dp)));
        assert_true(dm < 1e-12 && ds < 1e-12 && dC < 1e-10 && dp < 1e-10);
        assert_int_equal(c.g, r.g);
    }
    printf("max difference over 6 generations: %.3g\n", worst);
    /* the off-diagonal x0-x1 correlation was learned (negative: u = x0 + x1) */
    assert_true(c.C[0 * N + 1] < 0);
    tun_cma_clear(&c);
}

static void test_norm_quantile(void **state) {
    (void)state;
    const double p[] = {1e-12, 1e-5, 0.01, 0.02425, 0.3, 0.5, 0.9, 0.999999};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) {
        double x = tun_norm_quantile(p[i]);
        double back = 0.5 * erfc(-x / M_SQRT2);
        assert_true(fabs(back - p[i]) <= 1e-13 * fmax(p[i], 1e-3));
    }
    assert_true(fabs(tun_norm_quantile(0.975) - 1.959963984540054) < 1e-12);
}

/* ---- through tun_study -------------------------------------------------- */

static double sphere_obj(const tun_space *s, const double *x) {
    (void)s;
    double f = 0;
    for (int i = 0; i < s->n; i++) f += (x[i] - 1.2) * (x[i] - 1.2);
    return f;
}

static double ellipsoid_obj(const tun_space *s, const double *x) {
    double f = 0;
    for (int i = 0; i < s->n; i++) f += pow(1000.0, (double)i / (s->n - 1)) * (x[i] - 1.2) * (x[i] - 1.2);
    return f;
}

/* Sequential ask/tell for `count` trials; returns the best value. */
static double run(tun_study *t, int count, double (*obj)(const tun_space *, const double *),
                  double *xs) {
    double best = INFINITY, x[64];
    for (int k = 0; k < count; k++) {
        double *p = xs ? xs + (size_t)k * t->space->n : x;
        assert_int_equal(tun_study_suggest(t, k, p), 0);
        assert_true(config_valid(t->space, p));
        assert_int_equal(tun_study_add(t, k, p, TUN_TRIAL_RUNNING, NAN), 0);
        double v = obj(t->space, p);
        assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, v), 0);
        best = fmin(best, v);
    }
    return best;
}

static const char SPHERE4[] =
    "{\"a\":{\"type\":\"float\",\"low\":-5,\"high\":5},\"b\":{\"type\":\"float\",\"low\":-5,\"high\":5},"
    "\"c\":{\"type\":\"float\",\"low\":-5,\"high\":5},\"d\":{\"type\":\"float\",\"low\":-5,\"high\":5}}";

static void test_converges_on_quadratics(void **state) {
    (void)state;
    tun_space *s = parse_space(SPHERE4);
    assert_non_null(s);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        tun_study *t = new_study(s, seed);
        double best = run(t, 600, sphere_obj, NULL);
        printf("sphere 4-D, seed %llu: best %.3g after 600 trials (%d generations, sigma %.3g)\n",
               (unsigned long long)seed, best, t->cmaes->cma.g, t->cmaes->cma.sigma);
        assert_true(best < 1e-6);
        tun_study_free(t);
        t = new_study(s, seed);
        best = run(t, 800, ellipsoid_obj, NULL);
        printf("ellipsoid 4-D (condition 1e3), seed %llu: best %.3g after 800 trials\n",
               (unsigned long long)seed, best);
        assert_true(best < 1e-5);
        tun_study_free(t);
    }
    /* random search on the same budget is far from that */
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.seed = 1;
    tun_study *r = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &r), 0);
    double rb = run(r, 400, sphere_obj, NULL);
    printf("random on the sphere: best %.3g after 400 trials\n", rb);
    assert_true(rb > 1e-2);
    tun_study_free(r);
    tun_space_free(s);
}

static void test_reproducible_per_seed(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    enum { T = 80 };
    int n = s->n;
    double *a = malloc(sizeof(double) * T * n), *b = malloc(sizeof(double) * T * n),
           *c = malloc(sizeof(double) * T * n);
    tun_study *ta = new_study(s, 11), *tb = new_study(s, 11), *tc = new_study(s, 12);
    run(ta, T, mixed_objective, a);
    run(tb, T, mixed_objective, b);
    run(tc, T, mixed_objective, c);
    assert_true(same_bits(a, b, T * n));
    assert_false(same_bits(a, c, T * n));
    tun_study_free(ta);
    tun_study_free(tb);
    tun_study_free(tc);
    free(a);
    free(b);
    free(c);
    tun_space_free(s);
}

/* The first trial of every generation is the mean: sequentially (lambda =
 * 8 on SPHERE4), trial k with k % 8 == 0 is the state's m decoded, exactly
 * (the first is the centre of the box), and the others are samples. */
static void test_generation_starts_at_the_mean(void **state) {
    (void)state;
    tun_space *s = parse_space(SPHERE4);
    assert_non_null(s);
    tun_study *t = new_study(s, 5);
    double x[4], worst = 0.0;
    int means = 0, samples_off = 0;
    for (int k = 0; k < 96; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        const struct tun_cmaes_state *cs = t->cmaes;
        assert_int_equal(cs->cma.lambda, 8);
        double d = 0.0;
        for (int i = 0; i < 4; i++)
            d = fmax(d, fabs(x[i] - tun_unit_decode(&s->params[i], cs->cma.m[i])));
        if (k % 8 == 0) {
            worst = fmax(worst, d);
            means++;
            if (k == 0)
                for (int i = 0; i < 4; i++) assert_true(x[i] == 0.0);
        } else {
            samples_off += d > 1e-9;
        }
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, sphere_obj(s, x)), 0);
    }
    printf("%d generation starts: max |x - m| %.3g; %d of %d other trials away from m\n", means,
           worst, samples_off, 96 - means);
    assert_int_equal(means, 12);
    assert_true(worst == 0.0);
    assert_int_equal(samples_off, 96 - means);
    tun_study_free(t);
    tun_space_free(s);
}

/* The fallback: choices, bools and conditional parameters are drawn at
 * random where active; the unconditional numbers come from CMA-ES. */
static void test_fallback_respects_conditions(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    tun_study *t = new_study(s, 3);
    int iopt = tun_space_index(s, "opt"), imom = tun_space_index(s, "momentum");
    int seen[3] = {0}, mom_active = 0;
    double xs[300 * 16];
    run(t, 300, mixed_objective, xs);
    for (int k = 200; k < 300; k++) {
        double *x = xs + k * s->n;
        seen[(int)x[iopt]]++;
        mom_active += !isnan(x[imom]);
        assert_int_equal(!isnan(x[imom]), x[iopt] == 0);
    }
    /* random: every choice keeps coming, even late */
    assert_true(seen[0] > 10 && seen[1] > 10 && seen[2] > 10);
    assert_true(mom_active > 10);
    tun_study_free(t);
    tun_space_free(s);
}

static const char INTS[] =
    "{\"a\":{\"type\":\"int\",\"low\":0,\"high\":20},"
    "\"b\":{\"type\":\"int\",\"low\":1,\"high\":1000,\"log\":true},"
    "\"c\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
    "\"d\":{\"type\":\"float\",\"low\":0,\"high\":1,\"step\":0.25}}";

static double ints_obj(const tun_space *s, const double *x) {
    (void)s;
    return (x[0] - 7) * (x[0] - 7) + pow(log(x[1] / 50), 2) + 100 * x[2] * x[2] +
           (x[3] - 0.5) * (x[3] - 0.5);
}

/* The margin keeps sampling the neighbours of a discrete optimum after the
 * continuous coordinate has converged: without it the integer coordinates
 * freeze on one value (sigma shrinks for the float). */
static void test_margin_keeps_discrete_params_moving(void **state) {
    (void)state;
    tun_space *s = parse_space(INTS);
    assert_non_null(s);
    enum { T = 600, TAIL = 150 };
    double *xs = malloc(sizeof(double) * T * s->n);
    tun_study *t = new_study(s, 4);
    double best = run(t, T, ints_obj, xs);
    int ia = tun_space_index(s, "a"), ib = tun_space_index(s, "b"), ic = tun_space_index(s, "c");
    int id = tun_space_index(s, "d");
    int other_a = 0, other_b = 0, other_d = 0, restarts_seen = 0;
    double cmin = INFINITY, cmax = -INFINITY;
    for (int k = T - TAIL; k < T; k++) {
        const double *x = xs + k * s->n;
        other_a += x[ia] != 7;
        other_b += x[ib] != 50;
        other_d += x[id] != 0.5;
        cmin = fmin(cmin, x[ic]);
        cmax = fmax(cmax, x[ic]);
    }
    restarts_seen = t->cmaes->restarts;
    printf("restarts %d, lambda %d, g %d; ", restarts_seen, t->cmaes->cma.lambda, t->cmaes->cma.g);
    printf("best %.3g; last %d trials: a != 7 in %d, b != 50 in %d, d != 0.5 in %d, c spread %.3g\n",
           best, TAIL, other_a, other_b, other_d, cmax - cmin);
    assert_true(best < 1e-3);
    assert_true(cmax - cmin < 0.05); /* the float has converged ... */
    assert_true(other_a > 0 && other_b > 0 && other_d > 0); /* ... the ints still move */

    /* the core's guarantee, generation by generation: the probability of
     * leaving the mean's bin stays at least alpha/2 on each side of an inner
     * bin, alpha toward the one neighbour of an end bin */
    tun_cma *c = &t->cmaes->cma;
    for (int i = 0; i < c->n; i++) {
        if (!c->dims || c->dims[i].n_values < 2) continue;
        double s_i = c->sigma * c->A[i] * sqrt(c->C[i * c->n + i]);
        int64_t j = tun_cma_dim_bin(&c->dims[i], c->m[i]);
        double lo = tun_cma_dim_edge(&c->dims[i], j), up = tun_cma_dim_edge(&c->dims[i], j + 1);
        double pl = 0.5 * erfc(-(lo - c->m[i]) / s_i / M_SQRT2);
        double pu = 0.5 * erfc((up - c->m[i]) / s_i / M_SQRT2);
        printf("coordinate %d: bin %lld of %lld, P(below) %.3g, P(above) %.3g, alpha %.3g\n", i,
               (long long)j, (long long)c->dims[i].n_values, pl, pu, c->margin);
        if (j == 0) assert_true(pu >= c->margin * (1 - 1e-6));
        else if (j == c->dims[i].n_values - 1) assert_true(pl >= c->margin * (1 - 1e-6));
        else assert_true(pl >= c->margin / 2 * (1 - 1e-6) && pu >= c->margin / 2 * (1 - 1e-6));
    }
    tun_study_free(t);
    free(xs);
    tun_space_free(s);
}

/* Rebuilds a study from a history the way the api's cache does: every
 * trial added RUNNING, then the finished ones finished. */
static tun_study *replay(const tun_study *live, uint64_t seed) {
    tun_study *t = new_study(live->space, seed);
    for (int64_t k = 0; k < live->cap; k++)
        if (live->trials[k].present)
            assert_int_equal(tun_study_add(t, k, live->trials[k].x, TUN_TRIAL_RUNNING, NAN), 0);
    for (int64_t k = 0; k < live->cap; k++) {
        const tun_trial_rec *r = &live->trials[k];
        if (r->present && r->state != TUN_TRIAL_RUNNING)
            assert_int_equal(tun_study_finish(t, k, r->state, r->value), 0);
    }
    return t;
}

/* Several workers: 2 lambda asks before any tell, tells in a shuffled order,
 * some members failing or pruned, a restart replaying the history. */
static void test_parallel_asks_and_replay(void **state) {
    (void)state;
    tun_space *s = parse_space(SPHERE4);
    tun_study *t = new_study(s, 9);
    enum { W = 16, ROUNDS = 20 };
    double xs[W][4];
    int64_t next = 0;
    hpo_rng rng;
    hpo_rng_seed(&rng, 77);
    double best = INFINITY;
    for (int round = 0; round < ROUNDS; round++) {
        int64_t first = next;
        for (int w = 0; w < W; w++, next++) {
            assert_int_equal(tun_study_suggest(t, next, xs[w]), 0);
            assert_int_equal(tun_study_add(t, next, xs[w], TUN_TRIAL_RUNNING, NAN), 0);
        }
        /* the asks of one round are distinct samples */
        for (int a = 0; a < W; a++)
            for (int b = a + 1; b < W; b++) assert_false(same_bits(xs[a], xs[b], 4));
        uint32_t order[W];
        for (uint32_t w = 0; w < W; w++) order[w] = w;
        hpo_rng_shuffle_u32(&rng, order, W);
        for (int w = 0; w < W; w++) {
            int64_t num = first + order[w];
            const double *x = xs[order[w]];
            int fate = (int)hpo_rng_below(&rng, 10);
            if (fate == 0) assert_int_equal(tun_study_finish(t, num, TUN_TRIAL_FAILED, NAN), 0);
            else if (fate == 1) assert_int_equal(tun_study_finish(t, num, TUN_TRIAL_PRUNED, NAN), 0);
            else {
                double v = sphere_obj(s, x);
                best = fmin(best, v);
                assert_int_equal(tun_study_finish(t, num, TUN_TRIAL_COMPLETE, v), 0);
            }
        }
        if (round == ROUNDS / 2) {
            /* a restart mid-study: the replayed state suggests bit for bit
             * what the live one does, for the next asks */
            tun_study *r = replay(t, 9);
            for (int64_t k = next; k < next + 3; k++) {
                double a[4], b[4];
                assert_int_equal(tun_study_suggest(t, k, a), 0);
                assert_int_equal(tun_study_suggest(r, k, b), 0);
                assert_true(same_bits(a, b, 4));
            }
            assert_int_equal(r->cmaes->cma.g, t->cmaes->cma.g);
            tun_study_free(r);
        }
    }
    printf("parallel (16 asks per round, 20%% failed or pruned): best %.3g after %lld trials, "
           "%d generations\n", best, (long long)next, t->cmaes->cma.g);
    /* 320 trials, ~256 complete, lambda 8: about 30 generations were told */
    assert_true(t->cmaes->cma.g >= 25);
    assert_true(best < 1e-2);
    /* a trial left running holds its generation open: later tells do not
     * advance the state past it */
    double x[4];
    assert_int_equal(tun_study_suggest(t, next, x), 0);
    int g = t->cmaes->cma.g;
    assert_int_equal(tun_study_add(t, next, x, TUN_TRIAL_RUNNING, NAN), 0);
    for (int64_t k = next + 1; k < next + 40; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, sphere_obj(s, x)), 0);
    }
    assert_int_equal(tun_study_suggest(t, next + 40, x), 0);
    assert_int_equal(t->cmaes->cma.g, g);
    assert_int_equal(tun_study_finish(t, next, TUN_TRIAL_COMPLETE, sphere_obj(s, xs[0])), 0);
    assert_int_equal(tun_study_suggest(t, next + 40, x), 0);
    assert_true(t->cmaes->cma.g >= g + 4);
    tun_study_free(t);
    tun_space_free(s);
}

/* A flat objective stagnates: IPOP restarts with twice the population. */
static void test_ipop_restart_doubles_population(void **state) {
    (void)state;
    tun_space *s = parse_space(SPHERE4);
    tun_study *t = new_study(s, 2);
    double x[4];
    int64_t k = 0;
    for (; k < 400; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, 1.0), 0);
    }
    assert_int_equal(tun_study_suggest(t, k, x), 0);
    printf("flat objective: %d restarts, lambda now %d\n", t->cmaes->restarts, t->cmaes->cma.lambda);
    assert_true(t->cmaes->restarts >= 1);
    assert_int_equal(t->cmaes->cma.lambda, 8 << t->cmaes->restarts);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_options(void **state) {
    (void)state;
    tun_space *s = parse_space(SPHERE4);
    struct {
        const char *json, *field;
    } bad[] = {
        {"{\"algorithm\":\"cmaes\",\"popsize\":3}", "tuner.popsize"},
        {"{\"algorithm\":\"cmaes\",\"popsize\":5000}", "tuner.popsize"},
        {"{\"algorithm\":\"cmaes\",\"popsize\":8.5}", "tuner.popsize"},
        {"{\"algorithm\":\"cmaes\",\"sigma0\":0}", "tuner.sigma0"},
        {"{\"algorithm\":\"cmaes\",\"sigma0\":1.5}", "tuner.sigma0"},
        {"{\"algorithm\":\"cma\"}", "tuner.algorithm"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *j = json_loads(bad[i].json, 0, NULL);
        tun_config cfg;
        hpo_error err = {{0}, {0}};
        assert_int_equal(tun_config_parse(j, s, &cfg, &err), HPO_EINVAL);
        assert_string_equal(err.field, bad[i].field);
        json_decref(j);
    }
    json_t *j = json_loads("{\"algorithm\":\"cmaes\",\"popsize\":12,\"sigma0\":0.3}", 0, NULL);
    tun_config cfg;
    hpo_error err = {{0}, {0}};
    assert_int_equal(tun_config_parse(j, s, &cfg, &err), 0);
    json_decref(j);
    assert_int_equal(cfg.algorithm, TUN_CMAES);
    assert_string_equal(tun_algorithm_name(TUN_CMAES), "cmaes");
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    double x[4];
    assert_int_equal(tun_study_suggest(t, 0, x), 0);
    assert_int_equal(t->cmaes->cma.lambda, 12);
    assert_true(t->cmaes->cma.sigma == 0.3);
    tun_study_free(t);
    tun_space_free(s);
}

/* Maximising: the sampler sees the negated values and climbs. */
static void test_maximize(void **state) {
    (void)state;
    tun_space *s = parse_space(SPHERE4);
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_CMAES;
    cfg.seed = 5;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 1, &t), 0);
    double x[4], best = -INFINITY;
    for (int k = 0; k < 300; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        double v = -sphere_obj(s, x);
        best = fmax(best, v);
        assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, v), 0);
    }
    printf("maximising -sphere: best %.3g after 300 trials\n", best);
    assert_true(best > -1e-3);
    tun_study_free(t);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generation_matches_reference),
        cmocka_unit_test(test_norm_quantile),
        cmocka_unit_test(test_converges_on_quadratics),
        cmocka_unit_test(test_reproducible_per_seed),
        cmocka_unit_test(test_generation_starts_at_the_mean),
        cmocka_unit_test(test_fallback_respects_conditions),
        cmocka_unit_test(test_margin_keeps_discrete_params_moving),
        cmocka_unit_test(test_parallel_asks_and_replay),
        cmocka_unit_test(test_ipop_restart_doubles_population),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_maximize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
