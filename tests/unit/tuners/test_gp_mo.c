/* tuners: the "bayesian" sampler on several objectives and constraints
 * (gp_mo.c): reproducible per seed, valid on a mixed conditional space,
 * better hypervolume than random search on a two-objective problem, and
 * drawn to the feasible region when a constraint cuts most of the box
 * (per-constraint values, and the violation alone). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rng.h"
#include "tuners/sampler_util.h"

static const char BOX3[] = "{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                           "\"b\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                           "\"c\":{\"type\":\"float\",\"low\":0,\"high\":1}}";

/* ZDT1 on 3 variables (in the space's order a, b, c). */
static void zdt1(const double *x, double *f) {
    double g = 1 + 9 * (x[1] + x[2]) / 2;
    f[0] = x[0];
    f[1] = g * (1 - sqrt(x[0] / g));
}

static tun_study *mo_study(const tun_space *s, tun_algorithm alg, uint64_t seed) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = alg;
    cfg.seed = seed;
    cfg.deterministic = 1;
    int maxi[2] = {0, 0};
    tun_study *t = NULL;
    assert_int_equal(tun_study_new_mo(s, &cfg, 2, maxi, &t), 0);
    return t;
}

/* n trials of ZDT1; returns the hypervolume to (1.1, 11); X gets the
 * configurations when not NULL. */
static double run_zdt1(const tun_space *s, tun_algorithm alg, uint64_t seed, int n, double *X) {
    tun_study *t = mo_study(s, alg, seed);
    double F[64 * 2], x[3], ref[2] = {1.1, 11};
    for (int k = 0; k < n; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_true(config_valid(s, x));
        if (X) memcpy(X + k * 3, x, sizeof x);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        zdt1(x, F + 2 * k);
        assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, F + 2 * k, NAN), 0);
    }
    tun_study_free(t);
    return tun_hypervolume(F, (size_t)n, 2, ref);
}

static void test_reproducible(void **state) {
    (void)state;
    tun_space *s = parse_space(BOX3);
    double A[16 * 3], B[16 * 3], C[16 * 3];
    run_zdt1(s, TUN_BAYESIAN, 7, 16, A);
    run_zdt1(s, TUN_BAYESIAN, 7, 16, B);
    run_zdt1(s, TUN_BAYESIAN, 8, 16, C);
    assert_true(same_bits(A, B, 16 * 3));
    assert_false(same_bits(A + 12 * 3, C + 12 * 3, 3)); /* past the random start-up, seeds differ */
    tun_space_free(s);
}

static void test_mixed_space(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    tun_study *t = mo_study(s, TUN_BAYESIAN, 3);
    double x[16];
    for (int k = 0; k < 16; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_true(config_valid(s, x));
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        double f[2] = {mixed_objective(s, x), isnan(x[5]) ? 1.0 : fabs(x[5] - 0.9)};
        if (k % 5 == 4) /* pruned and failed trials carry no vector */
            assert_int_equal(tun_study_finish_mo(t, k, k % 2 ? TUN_TRIAL_PRUNED : TUN_TRIAL_FAILED, NULL, NAN), 0);
        else
            assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, f, NAN), 0);
    }
    /* with trials still running (kriging believers), suggestions stay valid
     * and distinct */
    double y[16];
    assert_int_equal(tun_study_suggest(t, 16, x), 0);
    assert_int_equal(tun_study_add(t, 16, x, TUN_TRIAL_RUNNING, NAN), 0);
    assert_int_equal(tun_study_suggest(t, 17, y), 0);
    assert_true(config_valid(s, y));
    assert_false(same_bits(x, y, s->n));
    tun_study_free(t);
    tun_space_free(s);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_beats_random(void **state) {
    (void)state;
    tun_space *s = parse_space(BOX3);
    enum { SEEDS = 3, N = 30 };
    double gp[SEEDS], rnd[SEEDS];
    for (int k = 0; k < SEEDS; k++) {
        gp[k] = run_zdt1(s, TUN_BAYESIAN, 100 + k, N, NULL);
        rnd[k] = run_zdt1(s, TUN_RANDOM, 100 + k, N, NULL);
    }
    qsort(gp, SEEDS, sizeof *gp, cmp_double);
    qsort(rnd, SEEDS, sizeof *rnd, cmp_double);
    printf("ZDT1 (3 variables), hypervolume to (1.1, 11) after %d trials, median of %d seeds: bayesian (EHVI) %.4f,"
           " random %.4f\n",
           N, SEEDS, gp[SEEDS / 2], rnd[SEEDS / 2]);
    assert_true(gp[SEEDS / 2] > rnd[SEEDS / 2]);
    tun_space_free(s);
}

/* Objectives pull towards a = 1, b = 0 and b = 1; the constraint a <= 0.25
 * leaves a quarter of the box feasible. Returns the share of feasible
 * suggestions after the random start-up. */
static double feasible_share(int per_constraint, uint64_t seed) {
    tun_space *s = parse_space(BOX3);
    tun_study *t = mo_study(s, TUN_BAYESIAN, seed);
    enum { N = 30, STARTUP = 10 };
    int feasible = 0;
    double x[3];
    for (int k = 0; k < N; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        double f[2] = {(1 - x[0]) + x[1], (1 - x[1]) + x[2]}, c = x[0] - 0.25;
        if (k >= STARTUP) feasible += c <= 0;
        if (per_constraint)
            assert_int_equal(tun_study_finish_cons(t, k, TUN_TRIAL_COMPLETE, f, 1, &c), 0);
        else
            assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, f, c > 0 ? c : 0), 0);
    }
    tun_study_free(t);
    tun_space_free(s);
    return (double)feasible / (N - STARTUP);
}

static void test_prefers_feasible(void **state) {
    (void)state;
    double a = feasible_share(1, 1), b = feasible_share(1, 2), v = feasible_share(0, 1);
    printf("feasible share of the suggestions after start-up (a quarter of the box is feasible): a GP per"
           " constraint %.2f, %.2f (seeds 1, 2); the violation alone %.2f\n",
           a, b, v);
    assert_true(a >= 0.6 && b >= 0.6);
    assert_true(v >= 0.5);
    /* constraint values: finite, and as many for every trial */
    tun_space *s = parse_space(BOX3);
    tun_study *t = mo_study(s, TUN_BAYESIAN, 1);
    double x[3] = {0.1, 0.1, 0.1}, f[2] = {1, 1}, c2[2] = {0, -1}, bad = NAN;
    for (int k = 0; k < 3; k++) assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
    assert_int_equal(tun_study_finish_cons(t, 0, TUN_TRIAL_COMPLETE, f, 1, &bad), HPO_EINVAL);
    assert_int_equal(tun_study_finish_cons(t, 0, TUN_TRIAL_COMPLETE, f, 2, c2), 0);
    assert_int_equal(tun_study_finish_cons(t, 1, TUN_TRIAL_COMPLETE, f, 1, c2), HPO_EINVAL);
    assert_int_equal(tun_study_finish_cons(t, 1, TUN_TRIAL_COMPLETE, f, TUN_MAX_CONSTRAINTS + 1, c2), HPO_EINVAL);
    tun_study_free(t);
    tun_space_free(s);
}

/* 8 objectives, 150 random complete trials (most on the front): a
 * suggestion in bounded time (before: the front's exclusive hypervolume
 * contributions and the boxes' count took hours; an ask never answered).
 * alarm: a hang fails in 2 minutes (it takes under a second). */
static void test_eight_objectives_wide_front(void **state) {
    (void)state;
    enum { M = 8, N = 150 };
    tun_space *s = parse_space(BOX3);
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_BAYESIAN;
    cfg.seed = 2;
    int maxi[M] = {0};
    tun_study *t = NULL;
    assert_int_equal(tun_study_new_mo(s, &cfg, M, maxi, &t), 0);
    hpo_rng rng;
    hpo_rng_seed(&rng, 4);
    double x[3], f[M];
    for (int k = 0; k < N; k++) {
        for (int j = 0; j < 3; j++) x[j] = hpo_rng_uniform(&rng);
        for (int o = 0; o < M; o++) f[o] = hpo_rng_uniform(&rng);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, f, NAN), 0);
    }
    alarm(120);
    assert_int_equal(tun_study_suggest(t, N, x), 0);
    alarm(0);
    assert_true(config_valid(s, x));
    tun_study_free(t);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_mixed_space),
        cmocka_unit_test(test_beats_random),
        cmocka_unit_test(test_prefers_feasible),
        cmocka_unit_test(test_eight_objectives_wide_front),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
