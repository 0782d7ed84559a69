/* tuners: the "evolution" sampler (regularized evolution) - random until the
 * population is complete, then one mutation of a tournament winner that
 * respects bounds, steps and conditions; reproducible per seed; parallel
 * asks before tells; better than random on a known function; options. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuners/sampler_util.h"
#include "tuners_internal.h"

static tun_study *new_study(const tun_space *s, tun_algorithm algo, uint64_t seed, int pop,
                            int sample) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = algo;
    cfg.seed = seed;
    if (pop) cfg.evo_population = pop;
    if (sample) cfg.evo_sample_size = sample;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    return t;
}

static double run(tun_study *t, int count, double *xs) {
    double best = INFINITY;
    for (int k = 0; k < count; k++) {
        double *x = xs + (size_t)k * t->space->n;
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_true(config_valid(t->space, x));
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN), 0);
        double v = mixed_objective(t->space, x);
        assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, v), 0);
        best = fmin(best, v);
    }
    return best;
}

/* Whether j is i or one of i's ancestors' descendants: i depends on j. */
static int depends_on(const tun_space *s, int i, int j) {
    for (int guard = 0; i >= 0 && guard <= s->n; guard++) {
        if (i == j) return 1;
        i = s->params[i].parent;
    }
    return 0;
}

/* The child differs from the parent in exactly one parameter j and in
 * parameters conditional on j (directly or not). */
static int one_mutation_of(const tun_space *s, const double *parent, const double *child) {
    int changed[64], n = 0;
    for (int i = 0; i < s->n; i++) {
        int same = (isnan(parent[i]) && isnan(child[i])) || parent[i] == child[i];
        if (!same) changed[n++] = i;
    }
    if (n == 0) return 0;
    for (int a = 0; a < n; a++) {
        int all = 1;
        for (int b = 0; b < n && all; b++) all = depends_on(s, changed[b], changed[a]);
        if (all && !isnan(parent[changed[a]]) && !isnan(child[changed[a]])) return 1;
    }
    return 0;
}

static void test_random_until_population_then_mutations(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    assert_non_null(s);
    enum { T = 300, P = 12 };
    int n = s->n;
    double *xe = malloc(sizeof(double) * T * n), *xr = malloc(sizeof(double) * T * n);
    tun_study *te = new_study(s, TUN_EVOLUTION, 5, P, 4), *tr = new_study(s, TUN_RANDOM, 5, 0, 0);
    run(te, T, xe);
    run(tr, P, xr);
    /* the first P trials are random search's, draw for draw */
    assert_true(same_bits(xe, xr, P * n));
    /* every later one is one mutation of one of the P complete trials
     * before it (every trial completes at once here) */
    int cond_changes = 0, iopt = tun_space_index(s, "opt"), imom = tun_space_index(s, "momentum");
    for (int k = P; k < T; k++) {
        const double *child = xe + k * n;
        int found = 0;
        for (int p = k - P; p < k && !found; p++) found = one_mutation_of(s, xe + p * n, child);
        assert_true(found);
        /* momentum follows its condition: present exactly for sgd */
        assert_int_equal(!isnan(child[imom]), child[iopt] == 0);
        if (!isnan(child[imom]) != !isnan(xe[(k - 1) * n + imom])) cond_changes++;
    }
    assert_true(cond_changes > 0);
    tun_study_free(te);
    tun_study_free(tr);
    free(xe);
    free(xr);
    tun_space_free(s);
}

/* A condition switched on draws the child's new parameter fresh; switched
 * off clears it; the parameter itself moves on its domain. */
static void test_conditions_bounds_steps(void **state) {
    (void)state;
    static const char SPACE[] =
        "{\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\"]},"
        "\"mom\":{\"type\":\"float\",\"low\":0.5,\"high\":0.99,\"condition\":{\"opt\":[\"sgd\"]}},"
        "\"nest\":{\"type\":\"bool\",\"condition\":{\"opt\":[\"sgd\"]}},"
        "\"k\":{\"type\":\"int\",\"low\":2,\"high\":5,\"condition\":{\"nest\":[true]}},"
        "\"units\":{\"type\":\"int\",\"low\":16,\"high\":256,\"step\":16},"
        "\"width\":{\"type\":\"int\",\"low\":1,\"high\":1000,\"log\":true},"
        "\"drop\":{\"type\":\"float\",\"low\":0.1,\"high\":0.5,\"step\":0.1},"
        "\"lr\":{\"type\":\"float\",\"low\":1e-5,\"high\":1e-1,\"log\":true}}";
    tun_space *s = parse_space(SPACE);
    assert_non_null(s);
    enum { T = 600 };
    double *xs = malloc(sizeof(double) * T * s->n);
    tun_study *t = new_study(s, TUN_EVOLUTION, 3, 10, 3);
    run(t, T, xs); /* config_valid on every suggestion: activity, bounds, steps */
    int ik = tun_space_index(s, "k"), iw = tun_space_index(s, "width");
    int k_seen[6] = {0}, w_moves = 0;
    for (int k = 10; k < T; k++) {
        const double *x = xs + k * s->n;
        if (!isnan(x[ik])) k_seen[(int)x[ik]]++;
        if (x[iw] != xs[(k - 1) * s->n + iw]) w_moves++;
    }
    for (int v = 2; v <= 5; v++) assert_true(k_seen[v] > 0);
    assert_true(w_moves > 0);
    tun_study_free(t);
    free(xs);
    tun_space_free(s);
}

static void test_reproducible_per_seed(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    enum { T = 120 };
    int n = s->n;
    double *a = malloc(sizeof(double) * T * n), *b = malloc(sizeof(double) * T * n),
           *c = malloc(sizeof(double) * T * n);
    tun_study *ta = new_study(s, TUN_EVOLUTION, 21, 0, 0), *tb = new_study(s, TUN_EVOLUTION, 21, 0, 0),
              *tc = new_study(s, TUN_EVOLUTION, 22, 0, 0);
    run(ta, T, a);
    run(tb, T, b);
    run(tc, T, c);
    assert_true(same_bits(a, b, T * n));
    assert_false(same_bits(a + 60 * n, c + 60 * n, 60 * n));
    /* the history decides, not the order of calls: asking trial 100 again
     * after everything gives what it got */
    double x[16];
    tun_study *td = new_study(s, TUN_EVOLUTION, 21, 0, 0);
    for (int k = 0; k < 100; k++) {
        assert_int_equal(tun_study_add(td, k, a + k * n, TUN_TRIAL_RUNNING, NAN), 0);
        assert_int_equal(tun_study_finish(td, k, TUN_TRIAL_COMPLETE, mixed_objective(s, a + k * n)), 0);
    }
    assert_int_equal(tun_study_suggest(td, 100, x), 0);
    assert_true(same_bits(x, a + 100 * n, n));
    tun_study_free(ta);
    tun_study_free(tb);
    tun_study_free(tc);
    tun_study_free(td);
    free(a);
    free(b);
    free(c);
    tun_space_free(s);
}

/* Workers asking before anyone tells get distinct children. */
static void test_parallel_asks(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    int n = s->n;
    tun_study *t = new_study(s, TUN_EVOLUTION, 8, 10, 3);
    double xs[80 * 16];
    run(t, 10, xs);
    for (int k = 10; k < 40; k++) {
        assert_int_equal(tun_study_suggest(t, k, xs + k * n), 0);
        assert_true(config_valid(s, xs + k * n));
        assert_int_equal(tun_study_add(t, k, xs + k * n, TUN_TRIAL_RUNNING, NAN), 0);
    }
    for (int a = 0; a < 40; a++)
        for (int b = a + 1; b < 40; b++) assert_false(same_bits(xs + a * n, xs + b * n, n));
    /* failed and pruned trials are not members: the population is still the
     * first 10, and the next child mutates one of them */
    for (int k = 10; k < 40; k++)
        assert_int_equal(tun_study_finish(t, k, k % 2 ? TUN_TRIAL_FAILED : TUN_TRIAL_PRUNED, NAN), 0);
    double x[16];
    assert_int_equal(tun_study_suggest(t, 40, x), 0);
    int found = 0;
    for (int p = 0; p < 10 && !found; p++) found = one_mutation_of(s, xs + p * n, x);
    assert_true(found);
    tun_study_free(t);
    tun_space_free(s);
}

/* Tournament selection pays off: over seeds, the best value after 150
 * trials beats random search's on the mixed objective. */
static void test_beats_random(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    enum { T = 150, SEEDS = 10 };
    double *xs = malloc(sizeof(double) * T * s->n), se = 0, sr = 0;
    for (uint64_t seed = 0; seed < SEEDS; seed++) {
        tun_study *te = new_study(s, TUN_EVOLUTION, seed, 0, 0);
        tun_study *tr = new_study(s, TUN_RANDOM, seed, 0, 0);
        se += log10(run(te, T, xs) + 1e-12);
        sr += log10(run(tr, T, xs) + 1e-12);
        tun_study_free(te);
        tun_study_free(tr);
    }
    printf("mean log10 best after %d trials over %d seeds: evolution %.2f, random %.2f\n", T,
           SEEDS, se / SEEDS, sr / SEEDS);
    assert_true(se < sr - 0.3);
    free(xs);
    tun_space_free(s);
}

static void test_options(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    struct {
        const char *json, *field;
    } bad[] = {
        {"{\"algorithm\":\"evolution\",\"population\":1}", "tuner.population"},
        {"{\"algorithm\":\"evolution\",\"population\":\"ten\"}", "tuner.population"},
        {"{\"algorithm\":\"evolution\",\"population\":100001}", "tuner.population"},
        {"{\"algorithm\":\"evolution\",\"sample_size\":0}", "tuner.sample_size"},
        {"{\"algorithm\":\"evolution\",\"population\":8,\"sample_size\":9}", "tuner.sample_size"},
        {"{\"algorithm\":\"evolution\",\"sample_size\":21}", "tuner.sample_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *j = json_loads(bad[i].json, 0, NULL);
        tun_config cfg;
        hpo_error err = {{0}, {0}};
        assert_int_equal(tun_config_parse(j, s, &cfg, &err), HPO_EINVAL);
        assert_string_equal(err.field, bad[i].field);
        json_decref(j);
    }
    struct {
        const char *json;
        int pop, sample;
    } good[] = {
        {"{\"algorithm\":\"evolution\"}", 20, 5},
        {"{\"algorithm\":\"evolution\",\"population\":3}", 3, 3},
        {"{\"algorithm\":\"evolution\",\"population\":50,\"sample_size\":50}", 50, 50},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        json_t *j = json_loads(good[i].json, 0, NULL);
        tun_config cfg;
        hpo_error err = {{0}, {0}};
        assert_int_equal(tun_config_parse(j, s, &cfg, &err), 0);
        assert_int_equal(cfg.algorithm, TUN_EVOLUTION);
        assert_int_equal(cfg.evo_population, good[i].pop);
        assert_int_equal(cfg.evo_sample_size, good[i].sample);
        json_decref(j);
    }
    assert_string_equal(tun_algorithm_name(TUN_EVOLUTION), "evolution");
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_until_population_then_mutations),
        cmocka_unit_test(test_conditions_bounds_steps),
        cmocka_unit_test(test_reproducible_per_seed),
        cmocka_unit_test(test_parallel_asks),
        cmocka_unit_test(test_beats_random),
        cmocka_unit_test(test_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
