/* tuners: random search through tun_study - reproducible per seed and
 * history, independent of call order, log scale / steps / conditions
 * respected in the samples. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tuners_internal.h"
#include "tuners.h"

static tun_space *parse_ok(const char *text) {
    json_t *j = json_loads(text, 0, NULL);
    if (!j) fail_msg("bad test JSON %s", text);
    tun_space *s = NULL;
    hpo_error err = {0};
    if (tun_space_parse(j, &s, &err)) fail_msg("parse: %s: %s", err.field, err.message);
    json_decref(j);
    return s;
}

static tun_study *new_study(const tun_space *s, uint64_t seed, int maximize) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_RANDOM;
    cfg.seed = seed;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, maximize, &t), 0);
    return t;
}

static int same(const double *a, const double *b, int n) {
    for (int i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return 0;
        if (!isnan(a[i]) && a[i] != b[i]) return 0;
    }
    return 1;
}

static const char *space_text =
    "{\"optimizer\": {\"type\": \"choice\", \"values\": [\"adam\", \"rmsprop\", \"sgd\"]},"
    " \"momentum\": {\"type\": \"float\", \"low\": 0.0, \"high\": 0.99,"
    "              \"condition\": {\"optimizer\": [\"sgd\", \"rmsprop\"]}},"
    " \"nesterov\": {\"type\": \"bool\", \"condition\": {\"optimizer\": [\"sgd\"]}},"
    " \"k\": {\"type\": \"int\", \"low\": 2, \"high\": 5, \"condition\": {\"nesterov\": [true]}},"
    " \"units\": {\"type\": \"int\", \"low\": 16, \"high\": 500, \"step\": 16},"
    " \"width\": {\"type\": \"int\", \"low\": 1, \"high\": 1000, \"log\": true},"
    " \"lr\": {\"type\": \"float\", \"low\": 1e-4, \"high\": 1e-2, \"log\": true},"
    " \"drop\": {\"type\": \"float\", \"low\": 0.1, \"high\": 0.5, \"step\": 0.1},"
    " \"dice\": {\"type\": \"int\", \"low\": 1, \"high\": 6}}";

/* Drives a study as an asker would: suggest, add RUNNING, finish. */
static void run_trials(tun_study *t, int n_params, int count, double *xs) {
    for (int k = 0; k < count; k++) {
        double *x = xs + (size_t)k * n_params;
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, 0), 0);
        assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, (double)(k % 7)), 0);
    }
}

static void test_reproducible_per_seed(void **state) {
    (void)state;
    tun_space *s = parse_ok(space_text);
    int n = s->n;
    enum { T = 50 };
    double a[T * 16], b[T * 16], c[T * 16];
    tun_study *ta = new_study(s, 7, 0), *tb = new_study(s, 7, 0), *tc = new_study(s, 8, 0);
    run_trials(ta, n, T, a);
    run_trials(tb, n, T, b);
    run_trials(tc, n, T, c);
    int differ = 0;
    for (int k = 0; k < T; k++) {
        assert_true(same(a + k * n, b + k * n, n));
        if (!same(a + k * n, c + k * n, n)) differ++;
    }
    assert_true(differ >= T - 1); /* another seed: other suggestions */
    /* suggestions do not depend on the order of calls: asking trial 30 of a
     * fresh study (no history) gives what the replayed one got */
    tun_study *td = new_study(s, 7, 0);
    double x[16];
    assert_int_equal(tun_study_suggest(td, 30, x), 0);
    assert_true(same(x, a + 30 * n, n));
    assert_int_equal(tun_study_suggest(td, 30, x), 0);
    assert_true(same(x, a + 30 * n, n));
    /* trials of the same study differ from each other */
    assert_false(same(a, a + n, n));
    tun_study_free(ta);
    tun_study_free(tb);
    tun_study_free(tc);
    tun_study_free(td);
    tun_space_free(s);
}

static void test_samples_respect_the_space(void **state) {
    (void)state;
    tun_space *s = parse_ok(space_text);
    tun_study *t = new_study(s, 1, 1);
    int iopt = tun_space_index(s, "optimizer"), imom = tun_space_index(s, "momentum");
    int inest = tun_space_index(s, "nesterov"), ik = tun_space_index(s, "k");
    int iunits = tun_space_index(s, "units"), iw = tun_space_index(s, "width");
    int ilr = tun_space_index(s, "lr"), idrop = tun_space_index(s, "drop");
    int idice = tun_space_index(s, "dice");
    enum { N = 20000, BINS = 8 };
    int lr_bins[BINS] = {0}, width_bins[4] = {0}, dice[7] = {0}, units_seen[32] = {0};
    int drop_seen[5] = {0}, opt_seen[3] = {0};
    int lr_above_1e3 = 0;
    for (int k = 0; k < N; k++) {
        double x[16];
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        /* conditional parameters are NaN exactly when their parent disables them */
        double o = x[iopt];
        assert_true(o == 0 || o == 1 || o == 2);
        opt_seen[(int)o]++;
        assert_int_equal(isnan(x[imom]), !(o == 1 || o == 2));
        assert_int_equal(isnan(x[inest]), o != 2);
        assert_int_equal(isnan(x[ik]), !(o == 2 && x[inest] == 1));
        if (!isnan(x[imom])) assert_true(x[imom] >= 0 && x[imom] <= 0.99);
        if (!isnan(x[ik])) assert_true(x[ik] == floor(x[ik]) && x[ik] >= 2 && x[ik] <= 5);
        /* steps: on the grid; units 16..496 by 16 */
        double u = x[iunits];
        assert_true(u == floor(u) && u >= 16 && u <= 496 && fmod(u - 16, 16) == 0);
        units_seen[(int)(u - 16) / 16]++;
        int dk = (int)llround((x[idrop] - 0.1) / 0.1);
        assert_true(dk >= 0 && dk < 5 && x[idrop] == tun_param_value_at(&s->params[idrop], dk));
        drop_seen[dk]++;
        /* log scale: uniform in log10 over [-4, -2] */
        double lr = x[ilr];
        assert_true(lr >= 1e-4 && lr <= 1e-2);
        int bin = (int)((log10(lr) + 4) / 2 * BINS);
        if (bin == BINS) bin--;
        lr_bins[bin]++;
        if (lr > 1e-3) lr_above_1e3++;
        double w = x[iw];
        assert_true(w == floor(w) && w >= 1 && w <= 1000);
        int wb = w < 10 ? 0 : w < 100 ? 1 : w < 1000 ? 2 : 3;
        width_bins[wb]++;
        double d = x[idice];
        assert_true(d == floor(d) && d >= 1 && d <= 6);
        dice[(int)d]++;
    }
    /* counts within ~5 binomial standard deviations of their expectation */
    for (int b = 0; b < BINS; b++) {
        double e = (double)N / BINS, sd = sqrt(e * (1 - 1.0 / BINS));
        if (fabs(lr_bins[b] - e) > 5 * sd) fail_msg("lr log bin %d has %d, expected %.0f", b, lr_bins[b], e);
    }
    /* linear-uniform would put 90% above 1e-3; log-uniform puts half */
    assert_true(fabs(lr_above_1e3 - N / 2.0) < 5 * sqrt(N / 4.0));
    /* log int over 1..1000: about a third per decade (rounding skews the first) */
    for (int b = 0; b < 3; b++) assert_true(width_bins[b] > N / 4 && width_bins[b] < N * 0.42);
    for (int f = 1; f <= 6; f++) assert_true(fabs(dice[f] - N / 6.0) < 5 * sqrt(N / 6.0));
    for (int i = 0; i < 31; i++) assert_true(units_seen[i] > 0);
    assert_int_equal(units_seen[31], 0);
    for (int i = 0; i < 5; i++) assert_true(fabs(drop_seen[i] - N / 5.0) < 5 * sqrt(N / 5.0));
    for (int i = 0; i < 3; i++) assert_true(fabs(opt_seen[i] - N / 3.0) < 5 * sqrt(N / 3.0));
    tun_study_free(t);
    tun_space_free(s);
}

static void test_small_space_avoids_repeats(void **state) {
    (void)state;
    /* 6 configurations; 4 parallel askers get 4 different ones */
    tun_space *s = parse_ok("{\"c\": {\"type\": \"choice\", \"values\": [1, 2, 3]},"
                            " \"b\": {\"type\": \"bool\"}}");
    for (uint64_t seed = 0; seed < 20; seed++) {
        tun_study *t = new_study(s, seed, 0);
        double xs[4][2];
        for (int k = 0; k < 4; k++) {
            assert_int_equal(tun_study_suggest(t, k, xs[k]), 0);
            for (int j = 0; j < k; j++) assert_false(same(xs[j], xs[k], 2));
            assert_int_equal(tun_study_add(t, k, xs[k], TUN_TRIAL_RUNNING, 0), 0);
        }
        tun_study_free(t);
    }
    tun_space_free(s);
}

static void test_study_history_rules(void **state) {
    (void)state;
    tun_space *s = parse_ok(space_text);
    tun_study *t = new_study(s, 3, 1);
    double x[16];
    int prune = 7;
    assert_int_equal(tun_study_suggest(t, -1, x), HPO_EINVAL);
    assert_int_equal(tun_study_suggest(t, TUN_MAX_TRIAL_NUMBER, x), HPO_EINVAL);
    assert_int_equal(tun_study_suggest(t, 0, x), 0);
    assert_int_equal(tun_study_report(t, 0, 1, 0.5, &prune), HPO_ENOTFOUND);
    assert_int_equal(tun_study_finish(t, 0, TUN_TRIAL_COMPLETE, 1), HPO_ENOTFOUND);
    assert_int_equal(tun_study_add(t, 0, x, TUN_TRIAL_COMPLETE, NAN), HPO_EINVAL);
    assert_int_equal(tun_study_add(t, 0, x, TUN_TRIAL_RUNNING, 0), 0);
    assert_int_equal(tun_study_add(t, 0, x, TUN_TRIAL_RUNNING, 0), HPO_ECONFLICT);
    /* reports are kept sorted by step, in the minimisation sign; a repeated step keeps the first */
    assert_int_equal(tun_study_report(t, 0, 3, 0.3, &prune), 0);
    assert_int_equal(prune, 0);
    assert_int_equal(tun_study_report(t, 0, 1, 0.1, NULL), 0);
    assert_int_equal(tun_study_report(t, 0, 2, 0.2, NULL), 0);
    assert_int_equal(tun_study_report(t, 0, 2, 0.25, NULL), 0);
    assert_int_equal(tun_study_report(t, 0, -1, 0.25, NULL), HPO_EINVAL);
    const tun_trial_rec *r = &t->trials[0];
    assert_int_equal(r->n_steps, 3);
    assert_true(r->steps[0] == 1 && r->steps[1] == 2 && r->steps[2] == 3);
    assert_true(r->step_values[0] == -0.1 && r->step_values[1] == -0.2 && r->step_values[2] == -0.3);
    assert_int_equal(tun_study_finish(t, 0, TUN_TRIAL_COMPLETE, INFINITY), HPO_EINVAL);
    assert_int_equal(tun_study_finish(t, 0, TUN_TRIAL_RUNNING, 1), HPO_EINVAL);
    assert_int_equal(tun_study_finish(t, 0, TUN_TRIAL_COMPLETE, 0.75), 0);
    assert_true(t->trials[0].value == -0.75); /* maximised: negated */
    assert_int_equal(tun_study_finish(t, 0, TUN_TRIAL_COMPLETE, 0.75), HPO_ECONFLICT);
    /* a finished trial still records replayed reports, and is never pruned */
    assert_int_equal(tun_study_report(t, 0, 4, 0.4, &prune), 0);
    assert_int_equal(prune, 0);
    /* sparse numbers grow the history */
    assert_int_equal(tun_study_add(t, 1000, x, TUN_TRIAL_FAILED, NAN), 0);
    assert_int_equal(t->n_present, 2);
    assert_true(isnan(t->trials[1000].value));
    assert_false(t->trials[999].present);
    tun_study_free(t);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reproducible_per_seed),
        cmocka_unit_test(test_samples_respect_the_space),
        cmocka_unit_test(test_small_space_avoids_repeats),
        cmocka_unit_test(test_study_history_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
