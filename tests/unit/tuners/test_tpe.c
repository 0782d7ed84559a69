/* test_tpe.c - the "tpe" sampler through tun_study: reproducibility,
 * conditional parameters, domains, convergence on a quadratic, and the
 * constant liar with pending trials. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tuners/sampler_util.h"

static tun_study *new_study(const tun_space *s, uint64_t seed) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_TPE;
    cfg.seed = seed;
    tun_study *st = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &st), 0);
    return st;
}

/* n ask/tell rounds of the mixed objective, checking every suggestion;
 * sgd_bonus is subtracted when opt is sgd (so its children are active). */
static void run_mixed(tun_study *st, const tun_space *s, int from, int n, double *last,
                      double sgd_bonus) {
    double x[16];
    int io = tun_space_index(s, "opt");
    for (int k = from; k < from + n; k++) {
        assert_int_equal(tun_study_suggest(st, k, x), 0);
        assert_true(config_valid(s, x));
        assert_int_equal(tun_study_add(st, k, x, TUN_TRIAL_RUNNING, 0.0), 0);
        double f = mixed_objective(s, x) - (x[io] == 0 ? sgd_bonus : 0.0);
        assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_COMPLETE, f), 0);
        if (last) memcpy(last, x, (size_t)s->n * sizeof(double));
    }
}

static void test_mixed_valid_and_reproducible(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    tun_study *a = new_study(s, 7), *b = new_study(s, 7);
    double la[16], lb[16];
    /* 60 trials: every suggestion has exactly its active parameters, on the domain */
    run_mixed(a, s, 0, 60, la, 0.0);
    run_mixed(b, s, 0, 60, lb, 0.0);
    assert_true(same_bits(la, lb, s->n));
    /* same history, same number: the same suggestion, whatever was asked before */
    double x1[16], x2[16];
    assert_int_equal(tun_study_suggest(a, 60, x1), 0);
    assert_int_equal(tun_study_suggest(a, 61, x2), 0);
    assert_int_equal(tun_study_suggest(b, 60, x2), 0);
    assert_true(same_bits(x1, x2, s->n));
    /* study a learnt that adam is best, study c (sgd given a bonus) that sgd
     * is: their suggestions have sgd's children (momentum, nesterov) active
     * exactly when opt is sgd */
    tun_study *c = new_study(s, 9);
    run_mixed(c, s, 0, 40, NULL, 1.0);
    int im = tun_space_index(s, "momentum"), io = tun_space_index(s, "opt");
    int active = 0, inactive = 0;
    for (int k = 0; k < 60; k++) {
        double y[16];
        assert_int_equal(tun_study_suggest(k % 2 ? a : c, 100 + k, y), 0);
        assert_true(config_valid(s, y));
        if (y[io] == 0) active += !isnan(y[im]);
        else inactive += isnan(y[im]);
    }
    printf("momentum active in %d suggestions with sgd, absent in %d others\n", active, inactive);
    assert_int_equal(active + inactive, 60);
    assert_true(active > 0 && inactive > 0);
    tun_study_free(a);
    tun_study_free(b);
    tun_study_free(c);
    tun_space_free(s);
}

/* (x-3)^2 on [-10,10]: after 30 trials (10 random, 20 TPE) the next
 * suggestions lie much closer to 3 than uniform ones (mean distance 5.45). */
static void test_quadratic_concentrates(void **state) {
    (void)state;
    tun_space *s = parse_space("{\"x\":{\"type\":\"float\",\"low\":-10,\"high\":10}}");
    assert_non_null(s);
    double sum = 0.0;
    int near = 0, count = 0;
    for (uint64_t seed = 0; seed < 10; seed++) {
        tun_study *st = new_study(s, seed);
        double x;
        for (int k = 0; k < 30; k++) {
            assert_int_equal(tun_study_suggest(st, k, &x), 0);
            assert_int_equal(tun_study_add(st, k, &x, TUN_TRIAL_COMPLETE, (x - 3) * (x - 3)), 0);
        }
        for (int k = 0; k < 20; k++) {
            assert_int_equal(tun_study_suggest(st, 30 + k, &x), 0);
            sum += fabs(x - 3);
            near += fabs(x - 3) < 2.0;
            count++;
        }
        tun_study_free(st);
    }
    printf("after 30 trials of (x-3)^2 on [-10,10], 10 seeds x 20 suggestions: mean |x-3| %.2f "
           "(uniform 5.45), %d%% within 2 (uniform 20%%)\n", sum / count, 100 * near / count);
    assert_true(sum / count < 2.5);
    assert_true(near > count / 2);
    tun_space_free(s);
}

static void test_constant_liar(void **state) {
    (void)state;
    /* a small discrete space, where a sampler without a liar repeats itself */
    tun_space *s = parse_space("{\"a\":{\"type\":\"int\",\"low\":0,\"high\":20},"
                               "\"b\":{\"type\":\"choice\",\"values\":[1,2,3,4]}}");
    assert_non_null(s);
    tun_study *st = new_study(s, 11);
    double x[2];
    for (int k = 0; k < 30; k++) {
        assert_int_equal(tun_study_suggest(st, k, x), 0);
        double f = (x[0] - 12) * (x[0] - 12) + (x[1] == 2 ? 0 : 5);
        assert_int_equal(tun_study_add(st, k, x, TUN_TRIAL_COMPLETE, f), 0);
    }
    double p[4][2];
    for (int k = 0; k < 4; k++) {
        assert_int_equal(tun_study_suggest(st, 30 + k, p[k]), 0);
        assert_true(config_valid(s, p[k]));
        assert_int_equal(tun_study_add(st, 30 + k, p[k], TUN_TRIAL_RUNNING, 0.0), 0);
    }
    printf("4 suggestions with pending trials: (%g,%g) (%g,%g) (%g,%g) (%g,%g)\n", p[0][0], p[0][1],
           p[1][0], p[1][1], p[2][0], p[2][1], p[3][0], p[3][1]);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) assert_false(same_bits(p[i], p[j], 2));
    tun_study_free(st);
    tun_space_free(s);
}

static void test_pruned_and_failed(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    tun_study *st = new_study(s, 5);
    double x[16];
    for (int k = 0; k < 40; k++) {
        assert_int_equal(tun_study_suggest(st, k, x), 0);
        assert_true(config_valid(s, x));
        assert_int_equal(tun_study_add(st, k, x, TUN_TRIAL_RUNNING, 0.0), 0);
        double f = mixed_objective(s, x);
        if (k % 5 == 1) {
            assert_int_equal(tun_study_report(st, k, 1, f + 1.0, NULL), 0);
            assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_PRUNED, 0.0), 0);
        } else if (k % 7 == 3) {
            assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_FAILED, 0.0), 0);
        } else {
            assert_int_equal(tun_study_finish(st, k, TUN_TRIAL_COMPLETE, f), 0);
        }
    }
    tun_study_free(st);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_valid_and_reproducible),
        cmocka_unit_test(test_quadratic_concentrates),
        cmocka_unit_test(test_constant_liar),
        cmocka_unit_test(test_pruned_and_failed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
