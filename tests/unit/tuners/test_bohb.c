/* tuners: the bohb sampler (bohb.c) - reproducible per seed and after a
 * replay of the history, its model fitted at the largest budget with enough
 * observations (falling back to lower ones), the random fraction honoured,
 * the bandwidth factor widening the model's draws,
 * valid configurations of conditional and choice spaces, and the "tuner"
 * keys (bohb implies the hyperband pruner). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sampler_util.h"
#include "tuners_internal.h"

static const char XY_SPACE[] =
    "{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1},\"y\":{\"type\":\"float\",\"low\":0,\"high\":1}}";

static void bohb_config(tun_config *cfg, uint64_t seed, double random_fraction) {
    tun_config_default(cfg);
    cfg->algorithm = TUN_BOHB;
    cfg->seed = seed;
    cfg->bohb_random_fraction = random_fraction;
    cfg->pruner.kind = TUN_PRUNER_HYPERBAND;
    cfg->pruner.max_resource = 27; /* budgets 1, 3, 9, 27 */
}

/* A learning curve: the loss at epoch e of configuration x. */
static double curve(const tun_space *s, const double *x, int64_t e) {
    return mixed_objective(s, x) + 1.0 / (double)e;
}

/* An ask/tell study of n trials that report epochs 1..27 to the pruner
 * (stopping when told) and complete with their last loss; the suggestions
 * go to xs (n rows). */
static void run_study(tun_study *t, const tun_space *s, int n, double *xs) {
    for (int k = 0; k < n; k++) {
        double *x = xs + (size_t)k * (size_t)s->n;
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_true(config_valid(s, x));
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        int prune = 0;
        int64_t e;
        for (e = 1; e <= 27 && !prune; e++)
            assert_int_equal(tun_study_report(t, k, e, curve(s, x, e), &prune), 0);
        tun_trial_state st = prune ? TUN_TRIAL_PRUNED : TUN_TRIAL_COMPLETE;
        assert_int_equal(tun_study_finish(t, k, st, curve(s, x, e - 1)), 0);
    }
}

/* Same seed, same suggestions; a study rebuilt from the history (reports
 * replayed without asking the pruner) suggests what the live one does; and
 * the model is used: a different seed gives different ones. */
static void test_reproducible(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    enum { N = 60 };
    double a[N * 8], b[N * 8], c[N * 8];
    tun_config cfg;
    tun_study *ta = NULL, *tb = NULL, *tc = NULL, *tr = NULL;
    bohb_config(&cfg, 11, 1.0 / 3);
    assert_int_equal(tun_study_new(s, &cfg, 0, &ta), 0);
    assert_int_equal(tun_study_new(s, &cfg, 0, &tb), 0);
    run_study(ta, s, N, a);
    run_study(tb, s, N, b);
    assert_memory_equal(a, b, sizeof a);
    bohb_config(&cfg, 12, 1.0 / 3);
    assert_int_equal(tun_study_new(s, &cfg, 0, &tc), 0);
    run_study(tc, s, N, c);
    assert_memory_not_equal(a, c, sizeof a);

    /* the replay: every trial added finished, then its reports */
    bohb_config(&cfg, 11, 1.0 / 3);
    assert_int_equal(tun_study_new(s, &cfg, 0, &tr), 0);
    for (int k = 0; k < N; k++) {
        const tun_trial_rec *rec = &ta->trials[k];
        double v = rec->state == TUN_TRIAL_COMPLETE ? rec->value : NAN;
        assert_int_equal(tun_study_add(tr, k, rec->x, rec->state, v), 0);
        for (int i = 0; i < rec->n_steps; i++)
            assert_int_equal(tun_study_report(tr, k, rec->steps[i], rec->step_values[i], NULL), 0);
    }
    double live[8], replayed[8];
    for (int64_t k = N; k < N + 10; k++) {
        assert_int_equal(tun_study_suggest(ta, k, live), 0);
        assert_int_equal(tun_study_suggest(tr, k, replayed), 0);
        assert_memory_equal(live, replayed, (size_t)s->n * sizeof *live);
    }
    tun_study_free(ta);
    tun_study_free(tb);
    tun_study_free(tc);
    tun_study_free(tr);
    tun_space_free(s);
}

/* A pruned trial at (x, y) with a loss per step: la at steps 1..3 and lb at
 * steps >= 4, reported up to `last`. */
static void add_trial(tun_study *t, int64_t k, double x, double y, int64_t last, double la, double lb) {
    double v[2] = {x, y};
    assert_int_equal(tun_study_add(t, k, v, TUN_TRIAL_RUNNING, NAN), 0);
    for (int64_t e = 1; e <= last; e++) assert_int_equal(tun_study_report(t, k, e, e <= 3 ? la : lb, NULL), 0);
    assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_PRUNED, NAN), 0);
}

/* The constructed history: 20 trials. At budget 1 (and 3) region B (x near
 * 0.85) is better; 6 of them reached budget 9, where region A (x near 0.15)
 * is better. Returns the share of 60 suggestions with x < 0.5. */
static double share_in_a(int min_points) {
    tun_space *s = parse_space(XY_SPACE);
    assert_non_null(s);
    tun_config cfg;
    bohb_config(&cfg, 5, 0.0);
    cfg.bohb_min_points = min_points;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    int64_t k = 0;
    for (int i = 0; i < 10; i++) {
        double off = 0.01 * i, y = 0.05 + 0.09 * i;
        /* three of each region reach step 9: A's loss there is low */
        add_trial(t, k++, 0.10 + off, y, i < 3 ? 9 : 1, 1.0 + off, 0.1 + off);
        add_trial(t, k++, 0.80 + off, y, i < 3 ? 9 : 1, 0.2 + off, 0.9 + off);
    }
    int in_a = 0;
    for (int j = 0; j < 60; j++) {
        double x[2];
        assert_int_equal(tun_study_suggest(t, k + j, x), 0);
        in_a += x[0] < 0.5;
    }
    tun_study_free(t);
    tun_space_free(s);
    return in_a / 60.0;
}

static void test_highest_rung_with_enough_points(void **state) {
    (void)state;
    /* d + 2 = 4 <= 6 observations at budget 9: its model, region A */
    assert_true(share_in_a(0) >= 0.8);
    /* needing 7, budget 9 has too few: the model falls back to budget 3
     * (20 observations), where B is better */
    assert_true(share_in_a(7) <= 0.2);
}

/* random_fraction: a random trial is exactly random search's suggestion
 * (same seed, number and history); 1 makes every trial one, 0 none, 1/3
 * about a third. */
static void test_random_fraction(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    enum { N = 40, M = 300 };
    double xs[N * 8];
    static const double fractions[] = {1.0, 0.0, 1.0 / 3};
    for (int f = 0; f < 3; f++) {
        tun_config cfg, rcfg;
        bohb_config(&cfg, 21, fractions[f]);
        rcfg = cfg;
        rcfg.algorithm = TUN_RANDOM;
        tun_study *t = NULL, *r = NULL;
        assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
        run_study(t, s, N, xs);
        /* the same history for random search */
        assert_int_equal(tun_study_new(s, &rcfg, 0, &r), 0);
        for (int k = 0; k < N; k++) {
            const tun_trial_rec *rec = &t->trials[k];
            assert_int_equal(tun_study_add(r, k, rec->x, rec->state, rec->value), 0);
        }
        int same = 0;
        for (int64_t k = N; k < N + M; k++) {
            double a[8], b[8];
            assert_int_equal(tun_study_suggest(t, k, a), 0);
            assert_int_equal(tun_study_suggest(r, k, b), 0);
            assert_true(config_valid(s, a));
            same += memcmp(a, b, (size_t)s->n * sizeof *a) == 0;
        }
        if (f == 0) assert_int_equal(same, M);
        if (f == 1) assert_true(same <= 3); /* a model's pick may coincide on a discrete axis only */
        if (f == 2) assert_true(same >= 70 && same <= 130); /* 100 expected, sd 8.2 */
        tun_study_free(t);
        tun_study_free(r);
    }
    tun_space_free(s);
}

/* bandwidth_factor: the model's candidates are drawn from l with its
 * numeric bandwidths times the factor (BOHB's b_w) and scored with the
 * bandwidths themselves, so a larger factor spreads the suggestions further
 * around the good trials, with one candidate (the draw is the suggestion)
 * and with the default 24 (the best l / g of them) alike; the same factor,
 * the same suggestions. The history: 20 trials in a small cluster around
 * (0.3, 0.6), the below set (gamma 0.25; their bandwidths the magic clip's
 * 1/22), and 60 random ones. Returns the mean distance of 200 suggestions
 * from the cluster's centre. */
static double spread_with(double factor, int n_candidates) {
    tun_space *s = parse_space(XY_SPACE);
    assert_non_null(s);
    tun_config cfg;
    bohb_config(&cfg, 8, 0.0);
    cfg.bohb_bandwidth_factor = factor;
    cfg.tpe_n_candidates = n_candidates;
    cfg.tpe_gamma = 0.25;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    hpo_rng rng;
    hpo_rng_seed(&rng, 99);
    enum { H = 80, M = 200 };
    for (int k = 0; k < H; k++) { /* complete trials without reports: observations at every budget */
        double x[2] = {hpo_rng_uniform(&rng), hpo_rng_uniform(&rng)};
        if (k % 4 == 0) {
            x[0] = 0.3 + 0.04 * (x[0] - 0.5);
            x[1] = 0.6 + 0.04 * (x[1] - 0.5);
        }
        double v = hypot(x[0] - 0.3, x[1] - 0.6);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_COMPLETE, v), 0);
    }
    double sum = 0;
    for (int j = 0; j < M; j++) {
        double x[2], again[2];
        assert_int_equal(tun_study_suggest(t, H + j, x), 0);
        assert_int_equal(tun_study_suggest(t, H + j, again), 0);
        assert_memory_equal(x, again, sizeof x);
        assert_true(config_valid(s, x));
        sum += hypot(x[0] - 0.3, x[1] - 0.6);
    }
    tun_study_free(t);
    tun_space_free(s);
    return sum / M;
}

static void test_bandwidth_factor(void **state) {
    (void)state;
    double o1 = spread_with(1, 1), o3 = spread_with(3, 1), c1 = spread_with(1, 24), c3 = spread_with(3, 24);
    printf("mean distance from the centre, factor 1 / 3: one candidate %.4f / %.4f, 24 %.4f / %.4f\n", o1, o3,
           c1, c3);
    assert_true(o3 > 1.6 * o1);
    assert_true(c3 > 1.6 * c1 && c3 < o3);
}

/* Conditional and choice parameters: every suggestion valid, and a plain
 * ask/tell study without reports (complete trials only: observations at
 * the largest budget) uses the model too. */
static void test_conditional_and_plain(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    tun_config cfg;
    bohb_config(&cfg, 3, 0.0);
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    double x[8], best = INFINITY, first10 = INFINITY;
    for (int k = 0; k < 80; k++) {
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_true(config_valid(s, x));
        double v = mixed_objective(s, x);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_COMPLETE, v), 0);
        if (v < best) best = v;
        if (k == 9) first10 = best;
    }
    assert_true(best < first10); /* the model found better than the random start */
    tun_study_free(t);
    tun_space_free(s);
}

static void test_config_keys(void **state) {
    (void)state;
    tun_space *s = parse_space(XY_SPACE);
    struct {
        const char *json, *field; /* field NULL: accepted */
    } cases[] = {
        {"{\"algorithm\":\"bohb\"}", NULL},
        {"{\"algorithm\":\"bohb\",\"random_fraction\":0.5,\"min_points_in_model\":3,\"gamma\":0.2}", NULL},
        {"{\"algorithm\":\"bohb\",\"pruner\":{\"algorithm\":\"hyperband\",\"max_resource\":9}}", NULL},
        {"{\"algorithm\":\"bohb\",\"pruner\":{\"algorithm\":\"asha\"}}", "tuner.pruner.algorithm"},
        {"{\"pruner\":{\"algorithm\":\"median\"},\"algorithm\":\"bohb\"}", "tuner.pruner.algorithm"},
        {"{\"algorithm\":\"bohb\",\"random_fraction\":1.5}", "tuner.random_fraction"},
        {"{\"algorithm\":\"bohb\",\"random_fraction\":-0.1}", "tuner.random_fraction"},
        {"{\"algorithm\":\"bohb\",\"min_points_in_model\":0}", "tuner.min_points_in_model"},
        {"{\"algorithm\":\"bohb\",\"bandwidth_factor\":0}", "tuner.bandwidth_factor"},
        {"{\"algorithm\":\"bohb\",\"bandwidth_factor\":-2}", "tuner.bandwidth_factor"},
        {"{\"algorithm\":\"bohb\",\"bandwidth_factor\":101}", "tuner.bandwidth_factor"},
        {"{\"algorithm\":\"bohb\",\"bandwidth_factor\":\"3\"}", "tuner.bandwidth_factor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = json_loads(cases[i].json, 0, NULL);
        tun_config cfg;
        hpo_error err;
        memset(&err, 0, sizeof err);
        int rc = tun_config_parse(j, s, &cfg, &err);
        json_decref(j);
        if (!cases[i].field) {
            if (rc) fail_msg("%s: %s %s", cases[i].json, err.field, err.message);
            assert_int_equal(cfg.algorithm, TUN_BOHB);
            assert_int_equal(cfg.pruner.kind, TUN_PRUNER_HYPERBAND);
        } else {
            assert_int_equal(rc, HPO_EINVAL);
            assert_string_equal(err.field, cases[i].field);
        }
    }
    assert_string_equal(tun_algorithm_name(TUN_BOHB), "bohb");
    /* the defaults are the paper's rho and b_w; the key sets the factor */
    tun_config def;
    tun_config_default(&def);
    assert_true(fabs(def.bohb_random_fraction - 1.0 / 3) < 1e-12 && def.bohb_bandwidth_factor == 3);
    json_t *j = json_loads("{\"algorithm\":\"bohb\",\"bandwidth_factor\":1.5}", 0, NULL);
    tun_config cfg;
    hpo_error err;
    assert_int_equal(tun_config_parse(j, s, &cfg, &err), 0);
    assert_true(cfg.bohb_bandwidth_factor == 1.5);
    json_decref(j);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_highest_rung_with_enough_points),
        cmocka_unit_test(test_random_fraction),
        cmocka_unit_test(test_bandwidth_factor),
        cmocka_unit_test(test_conditional_and_plain),
        cmocka_unit_test(test_config_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
