/* test_gp_region.c - the bayesian sampler's trust-region step
 * (tuners/gp_region.c): TuRBO's side rule against a naive replay, the box,
 * and the step itself (inside the box, off the running trials,
 * deterministic). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_region.h"
#include "rng.h"
#include "tuners/sampler_util.h"

/* The rule written out as TuRBO states it, with explicit counters per step. */
static double naive_side(const double *y, int n, int n_startup, int d) {
    double side = 0.8, best = y[0];
    int succ = 0, fail = 0, tol = d > 4 ? d : 4;
    for (int i = 1; i < n; i++) {
        if (i >= n_startup) {
            int improved = y[i] < best - 1e-3 * fabs(best);
            succ = improved ? succ + 1 : 0;
            fail = improved ? 0 : fail + 1;
            if (succ == 3) side = side * 2 > 1.6 ? 1.6 : side * 2, succ = 0;
            if (fail == tol) side /= 2, fail = 0;
            if (side < pow(0.5, 7)) side = 0.8;
        }
        if (y[i] < best) best = y[i];
    }
    return side;
}

static void test_side(void **state) {
    (void)state;
    /* three improvements in a row double it; 4 misses halve it (d = 2) */
    const double down[] = {5, 4, 3, 2, 1};
    assert_true(tun_gp_region_side(down, 5, 2, 2) == 1.6);
    const double flat[] = {1, 1, 1, 1, 1, 1};
    assert_true(tun_gp_region_side(flat, 6, 2, 2) == 0.4);
    /* in 6-D it takes 6 misses */
    assert_true(tun_gp_region_side(flat, 6, 2, 6) == 0.8);
    /* 7 halvings (28 misses) reach 0.00625 < 0.5^7: back to 0.8 */
    double longflat[2 + 28];
    for (int i = 0; i < 30; i++) longflat[i] = 1.0;
    assert_true(tun_gp_region_side(longflat, 2 + 27, 2, 2) == 0.8 / 64);
    assert_true(tun_gp_region_side(longflat, 2 + 28, 2, 2) == 0.8);
    /* random walks against the naive replay */
    hpo_rng r;
    hpo_rng_seed(&r, 11);
    for (int t = 0; t < 200; t++) {
        int n = 1 + (int)(hpo_rng_uniform(&r) * 120), d = 1 + (int)(hpo_rng_uniform(&r) * 8);
        int n_startup = 1 + (int)(hpo_rng_uniform(&r) * 12);
        double y[120];
        for (int i = 0; i < n; i++) y[i] = hpo_rng_normal(&r) - 0.02 * i;
        assert_true(tun_gp_region_side(y, n, n_startup, d) == naive_side(y, n, n_startup, d));
    }
}

static const char BOX_SPACE[] = "{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                                "\"b\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                                "\"c\":{\"type\":\"choice\",\"values\":[\"x\",\"y\",\"z\"]}}";

static void test_box(void **state) {
    (void)state;
    tun_space *s = parse_space(BOX_SPACE);
    assert_non_null(s);
    tun_gp_enc e;
    assert_int_equal(tun_gp_enc_init(&e, s), 0);
    assert_int_equal(e.d, 5);
    int ca = e.col[tun_space_index(s, "a")], cb = e.col[tun_space_index(s, "b")];
    double center[5] = {0}, theta[7] = {0}, lo[5], hi[5];
    center[ca] = 0.5;
    center[cb] = 0.9;
    center[e.col[tun_space_index(s, "c")] + 1] = 1.0;
    for (int k = 0; k < 5; k++) theta[k] = log(0.2);
    theta[ca] = log(0.1); /* geometric mean 0.2 over a and b: weights 0.5 and 2 */
    theta[cb] = log(0.4);
    assert_int_equal(tun_gp_region_box(&e, s, center, theta, 0.4, lo, hi), 2);
    printf("box: a [%.3f, %.3f], b [%.3f, %.3f]\n", lo[ca], hi[ca], lo[cb], hi[cb]);
    assert_true(fabs(lo[ca] - 0.4) < 1e-12 && fabs(hi[ca] - 0.6) < 1e-12);
    assert_true(fabs(lo[cb] - 0.5) < 1e-12 && hi[cb] == 1.0); /* clipped at the cube */
    for (int k = 0; k < 5; k++)
        if (k != ca && k != cb) assert_true(lo[k] == center[k] && hi[k] == center[k]);
    tun_gp_enc_clear(&e);
    tun_space_free(s);
}

/* A 2-D Rastrigin-like function on [0, 1]^2 with its minimum at (0.62, 0.37). */
static double rippled(const double *x) {
    double f = 0.0, opt[2] = {0.62, 0.37};
    for (int k = 0; k < 2; k++) {
        double z = 10.0 * (x[k] - opt[k]);
        f += z * z + 3.0 * (1.0 - cos(2 * M_PI * z));
    }
    return f;
}

static tun_study *region_study(const tun_space *s, int n, double *U, double *y, tun_gp_enc *e) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_RANDOM;
    cfg.seed = 3;
    tun_study *st = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &st), 0);
    double x[2];
    for (int i = 0; i < n; i++) {
        assert_int_equal(tun_study_suggest(st, i, x), 0);
        y[i] = rippled(x);
        assert_int_equal(tun_study_add(st, i, x, TUN_TRIAL_COMPLETE, y[i]), 0);
        tun_gp_encode(e, s, x, U + 2 * i);
    }
    return st;
}

static void test_step(void **state) {
    (void)state;
    tun_space *s = parse_space("{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                               "\"b\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
    assert_non_null(s);
    tun_gp_enc e;
    assert_int_equal(tun_gp_enc_init(&e, s), 0);
    enum { N = 40 };
    double U[2 * (N + 1)], y[N], z[N], theta[4] = {log(0.3), log(0.3), 0.0, log(1e-4)};
    tun_study *st = region_study(s, N, U, y, &e);
    memcpy(z, y, sizeof z);
    tun_gp_standardise(z, N, NULL, NULL);
    tun_gp_trend off = {0};
    tun_gp_region_in in = {st, &e, N, 0, U, z, z, &off, theta, N - 4};
    int best = 0;
    for (int i = 1; i < N; i++)
        if (z[i] < z[best]) best = i;
    double lo[2], hi[2], x1[2], x2[2], u[2];
    double side = tun_gp_region_side(z, N, N - 4, 2);
    assert_int_equal(tun_gp_region_box(&e, s, U + 2 * best, theta, side, lo, hi), 2);
    hpo_rng r1, r2;
    hpo_rng_seed(&r1, 5);
    hpo_rng_seed(&r2, 5);
    assert_int_equal(tun_gp_region_suggest(&in, &r1, x1), 1);
    assert_int_equal(tun_gp_region_suggest(&in, &r2, x2), 1);
    assert_true(same_bits(x1, x2, 2));
    tun_gp_encode(&e, s, x1, u);
    printf("side %.3f, box [%.3f, %.3f] x [%.3f, %.3f], incumbent f = %.3f, step (%.3f, %.3f) f = %.3f\n", side,
           lo[0], hi[0], lo[1], hi[1], y[best], u[0], u[1], rippled(x1));
    for (int k = 0; k < 2; k++) assert_true(u[k] >= lo[k] - 1e-12 && u[k] <= hi[k] + 1e-12);
    assert_false(tun_gp_already_tried(st, x1));
    /* the step running: the next one is elsewhere (kriging believer) */
    assert_int_equal(tun_study_add(st, N, x1, TUN_TRIAL_RUNNING, 0.0), 0);
    memcpy(U + 2 * N, u, sizeof u);
    in.n_pending = 1;
    assert_int_equal(tun_gp_region_suggest(&in, &r1, x2), 1);
    printf("with it running: (%.4f, %.4f) vs (%.4f, %.4f)\n", x2[0], x2[1], x1[0], x1[1]);
    assert_false(same_bits(x1, x2, 2));
    tun_study_free(st);
    tun_gp_enc_clear(&e);
    tun_space_free(s);
}

/* Through the sampler, on the rippled function: the region steps (odd
 * numbers from 2 x n_startup_trials on) land nearer the incumbent than the
 * global ones. */
static void test_sampler_alternates(void **state) {
    (void)state;
    tun_space *s = parse_space("{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                               "\"b\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
    assert_non_null(s);
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_BAYESIAN;
    cfg.seed = 8;
    tun_study *st = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &st), 0);
    double x[2], best = INFINITY, xb[2] = {0, 0}, dist[2] = {0, 0};
    int count[2] = {0, 0};
    for (int k = 0; k < 60; k++) {
        assert_int_equal(tun_study_suggest(st, k, x), 0);
        if (k >= 2 * cfg.n_startup_trials) {
            dist[k % 2] += fmax(fabs(x[0] - xb[0]), fabs(x[1] - xb[1]));
            count[k % 2]++;
        }
        double f = rippled(x);
        if (f < best) best = f, xb[0] = x[0], xb[1] = x[1];
        assert_int_equal(tun_study_add(st, k, x, TUN_TRIAL_COMPLETE, f), 0);
    }
    printf("rippled, 60 trials: best %.4f at (%.3f, %.3f); mean max-norm distance from the incumbent: "
           "region steps %.4f, global %.4f\n", best, xb[0], xb[1], dist[1] / count[1], dist[0] / count[0]);
    assert_true(dist[1] / count[1] < dist[0] / count[0]);
    assert_true(best < 3.0);
    tun_study_free(st);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_side),
        cmocka_unit_test(test_box),
        cmocka_unit_test(test_step),
        cmocka_unit_test(test_sampler_alternates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
