/* tuners: NSGA-II (nsga2.c) through tun_study - reproducible per seed and
 * history, every suggestion valid in a mixed conditional space, better
 * hypervolume than random search on ZDT1, constraints steering it to the
 * feasible region, and the multi-objective history's checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "sampler_util.h"
#include "tuners.h"

static tun_study *mo_study(const tun_space *s, tun_algorithm alg, uint64_t seed, int m, int pop,
                           tun_crossover xo) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = alg;
    cfg.seed = seed;
    cfg.nsga_population = pop;
    cfg.nsga_crossover = xo;
    int maxi[TUN_MAX_OBJECTIVES] = {0};
    tun_study *t = NULL;
    assert_int_equal(tun_study_new_mo(s, &cfg, m, maxi, &t), 0);
    return t;
}

/* ZDT1 on the space's n floats in [0, 1]. */
static void zdt1(const double *x, int n, double *f) {
    double g = 0;
    for (int i = 1; i < n; i++) g += x[i];
    g = 1 + 9 * g / (n - 1);
    f[0] = x[0];
    f[1] = g * (1 - sqrt(x[0] / g));
}

static const char ZDT_SPACE[] =
    "{\"x0\":{\"type\":\"float\",\"low\":0,\"high\":1},\"x1\":{\"type\":\"float\",\"low\":0,\"high\":1},"
    "\"x2\":{\"type\":\"float\",\"low\":0,\"high\":1},\"x3\":{\"type\":\"float\",\"low\":0,\"high\":1},"
    "\"x4\":{\"type\":\"float\",\"low\":0,\"high\":1},\"x5\":{\"type\":\"float\",\"low\":0,\"high\":1}}";

/* Runs n trials of ZDT1 and returns the hypervolume against (1.1, 11). */
static double run_zdt1(tun_algorithm alg, uint64_t seed, int n, tun_crossover xo) {
    tun_space *s = parse_space(ZDT_SPACE);
    tun_study *t = mo_study(s, alg, seed, 2, 20, xo);
    double *F = malloc((size_t)n * 2 * sizeof *F), x[6];
    for (int k = 0; k < n; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        zdt1(x, 6, F + 2 * k);
        assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, F + 2 * k, NAN), 0);
    }
    double ref[] = {1.1, 11};
    double hv = tun_hypervolume(F, (size_t)n, 2, ref);
    free(F);
    tun_study_free(t);
    tun_space_free(s);
    return hv;
}

static void test_beats_random(void **state) {
    (void)state;
    double sum[3] = {0};
    int wins = 0;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        double r = run_zdt1(TUN_RANDOM, seed, 200, TUN_XOVER_SBX);
        double a = run_zdt1(TUN_NSGA2, seed, 200, TUN_XOVER_SBX);
        double b = run_zdt1(TUN_NSGA2, seed, 200, TUN_XOVER_UNIFORM);
        sum[0] += r;
        sum[1] += a;
        sum[2] += b;
        wins += a > r;
    }
    printf("ZDT1 (6 dims, 200 trials, population 20), mean hypervolume over 10 seeds: random %.4f, "
           "nsga2 sbx %.4f, nsga2 uniform %.4f; sbx beat random on %d seeds\n",
           sum[0] / 10, sum[1] / 10, sum[2] / 10, wins);
    assert_true(sum[1] > sum[0]);
    assert_true(sum[2] > sum[0]);
    assert_true(wins >= 8);
}

static void test_reproducible_and_valid(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    double xa[64], xb[64];
    int differ = 0;
    for (int xo = 0; xo < 2; xo++) {
        tun_study *a = mo_study(s, TUN_NSGA2, 5, 2, 8, (tun_crossover)xo);
        tun_study *b = mo_study(s, TUN_NSGA2, 5, 2, 8, (tun_crossover)xo);
        tun_study *c = mo_study(s, TUN_NSGA2, 6, 2, 8, (tun_crossover)xo);
        for (int k = 0; k < 60; k++) {
            double xc[64];
            assert_int_equal(tun_study_suggest(a, k, xa), 0);
            assert_int_equal(tun_study_suggest(b, k, xb), 0);
            assert_int_equal(tun_study_suggest(c, k, xc), 0);
            assert_true(same_bits(xa, xb, s->n));
            assert_true(config_valid(s, xa));
            differ += !same_bits(xa, xc, s->n);
            double f[2] = {mixed_objective(s, xa), isnan(xa[0]) ? 0 : xa[0]};
            double fc[2] = {mixed_objective(s, xc), isnan(xc[0]) ? 0 : xc[0]};
            assert_int_equal(tun_study_add(a, k, xa, TUN_TRIAL_RUNNING, NAN), 0);
            assert_int_equal(tun_study_add(b, k, xb, TUN_TRIAL_RUNNING, NAN), 0);
            assert_int_equal(tun_study_add(c, k, xc, TUN_TRIAL_RUNNING, NAN), 0);
            /* one in five fails: failed trials are not parents */
            tun_trial_state st = k % 5 == 4 ? TUN_TRIAL_FAILED : TUN_TRIAL_COMPLETE;
            assert_int_equal(tun_study_finish_mo(a, k, st, f, NAN), 0);
            assert_int_equal(tun_study_finish_mo(b, k, st, f, NAN), 0);
            assert_int_equal(tun_study_finish_mo(c, k, st, fc, NAN), 0);
        }
        /* the same question asked again gets the same answer (no hidden state) */
        assert_int_equal(tun_study_suggest(a, 60, xa), 0);
        assert_int_equal(tun_study_suggest(a, 60, xb), 0);
        assert_true(same_bits(xa, xb, s->n));
        tun_study_free(a);
        tun_study_free(b);
        tun_study_free(c);
    }
    assert_true(differ > 50);
    tun_space_free(s);
}

/* Constraint x0 + x1 <= 0.5 on a 2-objective problem whose unconstrained
 * front lies mostly outside it: NSGA-II's later generations stay feasible
 * far more often than random search. */
static double feasible_share(tun_algorithm alg, uint64_t seed) {
    tun_space *s = parse_space(ZDT_SPACE);
    tun_study *t = mo_study(s, alg, seed, 2, 20, TUN_XOVER_SBX);
    double x[6], f[2];
    int feasible = 0;
    for (int k = 0; k < 200; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        zdt1(x, 6, f);
        double c = x[0] + x[1] - 0.5;
        assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, f, c > 0 ? c : 0), 0);
        if (k >= 100) feasible += c <= 0;
    }
    tun_study_free(t);
    tun_space_free(s);
    return feasible / 100.0;
}

static void test_constraints(void **state) {
    (void)state;
    double r = 0, g = 0;
    for (uint64_t seed = 1; seed <= 5; seed++) {
        r += feasible_share(TUN_RANDOM, seed) / 5;
        g += feasible_share(TUN_NSGA2, seed) / 5;
    }
    printf("share of feasible trials 100..199 (x0 + x1 <= 0.5): random %.2f, nsga2 %.2f\n", r, g);
    assert_true(g > r + 0.3);
}

static void test_mo_history_checks(void **state) {
    (void)state;
    tun_space *s = parse_space(ZDT_SPACE);
    tun_study *t = mo_study(s, TUN_NSGA2, 1, 3, 10, TUN_XOVER_SBX);
    assert_int_equal(tun_study_n_objectives(t), 3);
    double x[6], v[3] = {1, 2, NAN};
    assert_int_equal(tun_study_suggest(t, 0, x), 0);
    assert_int_equal(tun_study_add(t, 0, x, TUN_TRIAL_RUNNING, NAN), 0);
    /* a one-value finish or a non-finite value is refused; a negative violation too */
    assert_int_equal(tun_study_finish(t, 0, TUN_TRIAL_COMPLETE, 1.0), HPO_EINVAL);
    assert_int_equal(tun_study_finish_mo(t, 0, TUN_TRIAL_COMPLETE, v, NAN), HPO_EINVAL);
    v[2] = 3;
    assert_int_equal(tun_study_finish_mo(t, 0, TUN_TRIAL_COMPLETE, v, -1), HPO_EINVAL);
    assert_int_equal(tun_study_finish_mo(t, 0, TUN_TRIAL_COMPLETE, v, 0), 0);
    assert_int_equal(tun_study_finish_mo(t, 0, TUN_TRIAL_COMPLETE, v, 0), HPO_ECONFLICT);
    /* a failed trial needs no values */
    assert_int_equal(tun_study_add(t, 1, x, TUN_TRIAL_FAILED, NAN), 0);
    int maxi[9] = {0};
    tun_config cfg;
    tun_config_default(&cfg);
    tun_study *bad = NULL;
    assert_int_equal(tun_study_new_mo(s, &cfg, 9, maxi, &bad), HPO_EINVAL);
    assert_int_equal(tun_study_new_mo(s, &cfg, 0, maxi, &bad), HPO_EINVAL);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_config(void **state) {
    (void)state;
    tun_space *s = parse_space(ZDT_SPACE);
    tun_config cfg;
    hpo_error err = {{0}, {0}};
    json_t *j = json_pack("{s:s, s:i, s:s, s:f, s:f}", "algorithm", "nsga2", "population_size", 30,
                          "crossover", "uniform", "swapping_prob", 0.3, "mutation_prob", 0.2);
    assert_int_equal(tun_config_parse(j, s, &cfg, &err), 0);
    assert_int_equal(cfg.algorithm, TUN_NSGA2);
    assert_int_equal(cfg.nsga_population, 30);
    assert_int_equal(cfg.nsga_crossover, TUN_XOVER_UNIFORM);
    assert_float_equal(cfg.nsga_swapping_prob, 0.3, 0);
    json_decref(j);
    j = json_pack("{s:s, s:i}", "algorithm", "nsga2", "population_size", 1);
    assert_int_equal(tun_config_parse(j, s, &cfg, &err), HPO_EINVAL);
    assert_string_equal(err.field, "tuner.population_size");
    json_decref(j);
    j = json_pack("{s:s, s:f}", "algorithm", "nsga2", "mutation_prob", 0.0); /* none, as Optuna takes it */
    assert_int_equal(tun_config_parse(j, s, &cfg, &err), 0);
    assert_true(cfg.nsga_mutation_prob == 0);
    json_decref(j);
    j = json_pack("{s:s, s:f}", "algorithm", "nsga2", "mutation_prob", -0.1);
    assert_int_equal(tun_config_parse(j, s, &cfg, &err), HPO_EINVAL);
    assert_string_equal(err.field, "tuner.mutation_prob");
    json_decref(j);
    j = json_pack("{s:s, s:s}", "algorithm", "nsga2", "crossover", "blx");
    assert_int_equal(tun_config_parse(j, s, &cfg, &err), HPO_EINVAL);
    assert_string_equal(err.field, "tuner.crossover");
    json_decref(j);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reproducible_and_valid),
        cmocka_unit_test(test_beats_random),
        cmocka_unit_test(test_constraints),
        cmocka_unit_test(test_mo_history_checks),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
