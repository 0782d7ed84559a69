/* test_study_view.c - what a history tells of its trials, which the api
 * reads to fold other hpod nodes' trials into a cached tuner
 * (api/study_sync.c): tun_study_trial (known?, state, highest step
 * reported), tun_study_n_trials (priors not counted), tun_study_same_point
 * (inactive parameters NaN on both sides), and that a trial added out of
 * number order (another node's, with a number past this node's last)
 * holds its point for the grid like any running trial. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "sampler_util.h"
#include "tuners_internal.h"

static void test_trial_view(void **state) {
    (void)state;
    tun_space *s = parse_space(MIXED_SPACE);
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_RANDOM;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    double x[16], y[16];
    assert_int_equal(tun_study_suggest(t, 0, x), 0);
    assert_int_equal(tun_study_add_prior(t, x, 1.0), 0);
    assert_int_equal(tun_study_n_trials(t), 0); /* a prior is no trial */
    tun_trial_state ts = TUN_TRIAL_FAILED;
    int64_t last = 99;
    assert_int_equal(tun_study_trial(t, 0, &ts, &last), HPO_ENOTFOUND);
    assert_int_equal(tun_study_add(t, 3, x, TUN_TRIAL_RUNNING, NAN), 0); /* numbers 0..2 not known here */
    assert_int_equal(tun_study_n_trials(t), 1);
    assert_int_equal(tun_study_trial(t, 3, &ts, &last), 0);
    assert_int_equal(ts, TUN_TRIAL_RUNNING);
    assert_int_equal(last, -1);
    assert_int_equal(tun_study_trial(t, 2, NULL, NULL), HPO_ENOTFOUND);
    assert_int_equal(tun_study_report(t, 3, 7, 0.5, NULL), 0);
    assert_int_equal(tun_study_report(t, 3, 2, 0.7, NULL), 0); /* an earlier step later */
    assert_int_equal(tun_study_trial(t, 3, NULL, &last), 0);
    assert_int_equal(last, 7);
    assert_int_equal(tun_study_finish(t, 3, TUN_TRIAL_COMPLETE, 0.4), 0);
    assert_int_equal(tun_study_trial(t, 3, &ts, NULL), 0);
    assert_int_equal(ts, TUN_TRIAL_COMPLETE);
    /* the same point, bit for bit, NaN for NaN */
    assert_true(tun_study_same_point(t, 3, x));
    memcpy(y, x, sizeof y);
    int active = -1;
    for (int i = 0; i < s->n && active < 0; i++)
        if (!isnan(x[i]) && s->params[i].type == TUN_FLOAT) active = i;
    assert_true(active >= 0);
    y[active] = nextafter(y[active], INFINITY);
    assert_false(tun_study_same_point(t, 3, y));
    assert_false(tun_study_same_point(t, 4, x)); /* not known */
    tun_study_free(t);
    tun_space_free(s);
}

static void test_grid_holds_other_trials(void **state) {
    (void)state;
    json_t *js = json_loads("{\"a\": {\"type\": \"int\", \"low\": 0, \"high\": 2}}", 0, NULL);
    tun_space *s = NULL;
    hpo_error err;
    assert_int_equal(tun_space_parse(js, &s, &err), 0);
    json_decref(js);
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_GRID;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    double x[1];
    assert_int_equal(tun_study_suggest(t, 0, x), 0);
    double first = x[0];
    /* another node took that point as trial 0 and another one as trial 1 */
    assert_int_equal(tun_study_add(t, 0, x, TUN_TRIAL_RUNNING, NAN), 0);
    double other = first == 0 ? 1 : 0;
    assert_int_equal(tun_study_add(t, 1, &other, TUN_TRIAL_RUNNING, NAN), 0);
    assert_int_equal(tun_study_suggest(t, 2, x), 0);
    assert_true(x[0] != first && x[0] != other);
    assert_int_equal(tun_study_add(t, 2, x, TUN_TRIAL_RUNNING, NAN), 0);
    assert_int_equal(tun_study_suggest(t, 3, x), HPO_EEXHAUSTED);
    tun_study_free(t);
    tun_space_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trial_view),
        cmocka_unit_test(test_grid_holds_other_trials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
