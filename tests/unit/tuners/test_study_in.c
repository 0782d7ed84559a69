/* test_study_in.c - what a client brings to a tuner: a partial
 * configuration (an enqueued trial's fixed parameters) checked and completed
 * (tun_space_from_json_partial, tun_study_suggest_fixed), and prior
 * observations (warm start, tun_study_add_prior) that move TPE's and the
 * GP's suggestions while the pruners ignore them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "sampler_util.h"
#include "tuners_internal.h"

static json_t *js(const char *text) { return json_loads(text, 0, NULL); }

static void test_partial_checks(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    double x[16];
    hpo_error err;
    static const struct {
        const char *params, *field;
    } bad[] = {
        {"{\"nope\": 1}", "params.nope"},
        {"{\"units\": 17}", "params.units"},       /* off the step */
        {"{\"units\": 512}", "params.units"},      /* out of range */
        {"{\"opt\": \"adagrad\"}", "params.opt"},  /* not a choice */
        {"{\"bn\": 1}", "params.bn"},              /* wrong type */
        {"{\"momentum\": 0.5}", "params.momentum"},                 /* parent not given */
        {"{\"opt\": \"adam\", \"momentum\": 0.5}", "params.momentum"}, /* parent disables it */
    };
    for (size_t i = 0; i < HPO_ARRAY_LEN(bad); i++) {
        json_t *p = js(bad[i].params);
        memset(&err, 0, sizeof err);
        assert_int_equal(tun_space_from_json_partial(s, p, x, &err), HPO_EINVAL);
        assert_string_equal(err.field, bad[i].field);
        json_decref(p);
    }
    json_t *p = js("{\"opt\": \"sgd\", \"momentum\": 0.5, \"units\": 32}");
    assert_int_equal(tun_space_from_json_partial(s, p, x, &err), 0);
    json_decref(p);
    int n_given = 0;
    for (int i = 0; i < s->n; i++) n_given += !isnan(x[i]);
    assert_int_equal(n_given, 3);
    assert_true(x[tun_space_index(s, "momentum")] == 0.5);
    tun_space_free(s);
}

static void test_suggest_fixed(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.seed = 9;
    for (int alg = TUN_RANDOM; alg <= TUN_BAYESIAN; alg++) {
        cfg.algorithm = (tun_algorithm)alg;
        if (alg == TUN_GRID) continue; /* the mixed space has a continuous float */
        tun_study *t = NULL;
        assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
        double fixed[16], x[16], y[16];
        hpo_error err;
        for (int k = 0; k < 30; k++) {
            /* every third trial fixes sgd and a momentum; the tuner draws the rest */
            json_t *p = js(k % 3 ? "{\"units\": 48}" : "{\"opt\": \"sgd\", \"momentum\": 0.25}");
            assert_int_equal(tun_space_from_json_partial(s, p, fixed, &err), 0);
            json_decref(p);
            assert_int_equal(tun_study_suggest_fixed(t, k, fixed, x), 0);
            assert_true(config_valid(s, x));
            for (int i = 0; i < s->n; i++)
                if (!isnan(fixed[i])) assert_true(x[i] == fixed[i]);
            assert_int_equal(tun_study_suggest_fixed(t, k, fixed, y), 0); /* deterministic */
            assert_memory_equal(x, y, (size_t)s->n * sizeof *x);
            assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_COMPLETE, mixed_objective(s, x)), 0);
        }
        tun_study_free(t);
    }
    tun_space_free(s);
}

/* (x - 0.3)^2 on [0, 1]: with 30 priors around the optimum, the first
 * suggestions of TPE and the GP are near 0.3; without, they are random. */
static double mean_first_error(tun_algorithm alg, int with_priors) {
    tun_space *s = parse_space("{\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}}");
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = alg;
    cfg.seed = 5;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    if (with_priors)
        for (int i = 0; i < 30; i++) {
            double x = (i + 0.5) / 30.0;
            assert_int_equal(tun_study_add_prior(t, &x, (x - 0.3) * (x - 0.3)), 0);
        }
    double err = 0;
    for (int k = 0; k < 5; k++) {
        double x;
        assert_int_equal(tun_study_suggest(t, k, &x), 0);
        err += fabs(x - 0.3) / 5;
        assert_int_equal(tun_study_add(t, k, &x, TUN_TRIAL_COMPLETE, (x - 0.3) * (x - 0.3)), 0);
    }
    double prior = 0.5;
    assert_int_equal(tun_study_add_prior(t, &prior, 1.0), HPO_ECONFLICT); /* priors come first */
    tun_study_free(t);
    tun_space_free(s);
    return err;
}

static void test_priors_move_suggestions(void **state) {
    (void)state;
    for (int alg = TUN_TPE; alg <= TUN_BAYESIAN; alg++) {
        double cold = mean_first_error((tun_algorithm)alg, 0), warm = mean_first_error((tun_algorithm)alg, 1);
        print_message("%s: mean |x - 0.3| of the first 5 suggestions: %.3f cold, %.3f warm\n",
                      tun_algorithm_name((tun_algorithm)alg), cold, warm);
        assert_true(warm < 0.1);
        assert_true(warm < 0.5 * cold);
    }
}

static void test_priors_ignored_by_pruners(void **state) {
    (void)state;
    tun_space *s = parse_space("{\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}}");
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.pruner.kind = TUN_PRUNER_MEDIAN;
    cfg.pruner.n_startup_trials = 1;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    double x = 0.5;
    for (int i = 0; i < 5; i++) assert_int_equal(tun_study_add_prior(t, &x, 0.0), 0);
    /* no complete trial of this study yet: the median pruner does not start */
    assert_int_equal(tun_study_add(t, 0, &x, TUN_TRIAL_RUNNING, NAN), 0);
    int prune = -1;
    assert_int_equal(tun_study_report(t, 0, 1, 100.0, &prune), 0);
    assert_int_equal(prune, 0);
    tun_study_free(t);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_checks),
        cmocka_unit_test(test_suggest_fixed),
        cmocka_unit_test(test_priors_move_suggestions),
        cmocka_unit_test(test_priors_ignored_by_pruners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
