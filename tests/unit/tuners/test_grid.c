/* tuners: grid search enumerates exactly the (conditional) product, in a
 * seed-keyed order, skips points used by present trials, then reports
 * HPO_EEXHAUSTED; and the config layer's grid checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"
#include "tuners.h"

#define MAXP 16

static tun_space *parse_ok(const char *text) {
    json_t *j = json_loads(text, 0, NULL);
    if (!j) fail_msg("bad test JSON %s", text);
    tun_space *s = NULL;
    hpo_error err = {0};
    if (tun_space_parse(j, &s, &err)) fail_msg("parse: %s: %s", err.field, err.message);
    json_decref(j);
    return s;
}

static tun_study *grid_study(const tun_space *s, uint64_t seed) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = TUN_GRID;
    cfg.seed = seed;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    return t;
}

/* NaN sorts first; a total order on configurations. */
static int n_cmp;
static int cmp_config(const void *pa, const void *pb) {
    const double *a = pa, *b = pb;
    for (int i = 0; i < n_cmp; i++) {
        int na = isnan(a[i]), nb = isnan(b[i]);
        if (na != nb) return na ? -1 : 1;
        if (!na && a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    }
    return 0;
}

/* Independent enumeration: every combination of (values or NaN) in which a
 * parameter is NaN exactly when it is inactive. */
static void brute(const tun_space *s, int i, double *x, double *out, int *count, int cap) {
    if (i == s->n) {
        if (*count < cap) memcpy(out + (size_t)*count * MAXP, x, sizeof(double) * MAXP);
        (*count)++;
        return;
    }
    if (!tun_space_is_active(s, x, i)) {
        x[i] = NAN;
        brute(s, i + 1, x, out, count, cap);
        return;
    }
    int64_t n = tun_param_n_values(&s->params[i]);
    for (int64_t k = 0; k < n; k++) {
        x[i] = tun_param_value_at(&s->params[i], k);
        brute(s, i + 1, x, out, count, cap);
    }
}

/* Runs the grid to exhaustion; returns the number of points and fills pts. */
static int exhaust(const tun_space *s, uint64_t seed, double *pts, int cap) {
    tun_study *t = grid_study(s, seed);
    int k = 0;
    for (;; k++) {
        double x[MAXP];
        for (int i = 0; i < MAXP; i++) x[i] = 0;
        int rc = tun_study_suggest(t, k, x);
        if (rc == HPO_EEXHAUSTED) break;
        assert_int_equal(rc, 0);
        assert_true(k < cap);
        memcpy(pts + (size_t)k * MAXP, x, sizeof x);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, 0), 0);
        if (k % 3 == 0) assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, k), 0);
        if (k % 3 == 1) assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_FAILED, 0), 0);
    }
    /* still exhausted on the next ask */
    double x[MAXP];
    assert_int_equal(tun_study_suggest(t, k + 1, x), HPO_EEXHAUSTED);
    tun_study_free(t);
    return k;
}

static void check_exact_product(const char *space_text, int expected) {
    tun_space *s = parse_ok(space_text);
    assert_true(s->n <= MAXP);
    int cap = expected + 8;
    double *want = calloc((size_t)cap * MAXP, sizeof(double));
    double *got = calloc((size_t)cap * MAXP, sizeof(double));
    double x[MAXP] = {0};
    int nwant = 0;
    brute(s, 0, x, want, &nwant, cap);
    assert_int_equal(nwant, expected);
    assert_int_equal((int)tun_grid_size(s), expected);
    int ngot = exhaust(s, 11, got, cap);
    assert_int_equal(ngot, expected);
    n_cmp = s->n;
    qsort(want, (size_t)nwant, sizeof(double) * MAXP, cmp_config);
    qsort(got, (size_t)ngot, sizeof(double) * MAXP, cmp_config);
    for (int i = 0; i < ngot; i++) {
        if (i > 0) assert_true(cmp_config(got + (i - 1) * MAXP, got + i * MAXP) < 0); /* unique */
        assert_int_equal(cmp_config(got + i * MAXP, want + i * MAXP), 0);            /* the same set */
    }
    free(want);
    free(got);
    tun_space_free(s);
}

static void test_plain_product(void **state) {
    (void)state;
    /* 3 x 2 x 4 (1,4,7,10) x 5 (0..1 by 0.25) = 120 */
    check_exact_product("{\"a\": {\"type\": \"choice\", \"values\": [\"x\", \"y\", \"z\"]},"
                        " \"b\": {\"type\": \"bool\"},"
                        " \"c\": {\"type\": \"int\", \"low\": 1, \"high\": 11, \"step\": 3},"
                        " \"d\": {\"type\": \"float\", \"low\": 0, \"high\": 1, \"step\": 0.25}}",
                        120);
    check_exact_product("{\"only\": {\"type\": \"int\", \"low\": -3, \"high\": 3}}", 7);
}

static const char *cond_space =
    "{\"lr\": {\"type\": \"choice\", \"values\": [0.1, 0.01]},"
    " \"opt\": {\"type\": \"choice\", \"values\": [\"adam\", \"sgd\", \"rmsprop\"]},"
    " \"momentum\": {\"type\": \"float\", \"low\": 0, \"high\": 0.9, \"step\": 0.3,"
    "               \"condition\": {\"opt\": [\"sgd\"]}},"
    " \"nesterov\": {\"type\": \"bool\", \"condition\": {\"opt\": [\"sgd\"]}},"
    " \"k\": {\"type\": \"int\", \"low\": 1, \"high\": 2, \"condition\": {\"nesterov\": [true]}},"
    " \"beta\": {\"type\": \"int\", \"low\": 1, \"high\": 3, \"condition\": {\"opt\": [\"adam\", \"rmsprop\"]}},"
    " \"units\": {\"type\": \"int\", \"low\": 10, \"high\": 1000000, \"step\": 10,"
    "            \"condition\": {\"beta\": [2]}}}";

static void test_conditional_product(void **state) {
    (void)state;
    /* opt=adam: beta 1,3 + beta 2 x 100000 units; sgd: momentum 4 x (nesterov
     * false + true x k 2) = 12; rmsprop like adam. Too big; so first a small
     * variant without units: lr 2 x (adam 3 + sgd 12 + rmsprop 3) = 36 */
    char small[2048];
    snprintf(small, sizeof small, "%s", cond_space);
    char *u = strstr(small, ", \"units\"");
    strcpy(u, "}");
    check_exact_product(small, 36);
    /* an inactive child does not multiply: parents that disable it count once */
    check_exact_product("{\"a\": {\"type\": \"int\", \"low\": 0, \"high\": 9},"
                        " \"b\": {\"type\": \"int\", \"low\": 0, \"high\": 9, \"condition\": {\"a\": [3]}},"
                        " \"c\": {\"type\": \"bool\", \"condition\": {\"b\": [0, 9]}},"
                        " \"d\": {\"type\": \"bool\", \"condition\": {\"a\": [3, 4]}}}",
                        /* a=3: b (8 + 2x2) x d 2 = 24; a=4: d 2; others 8 */ 34);
    tun_space *s = parse_ok(cond_space);
    /* lr 2 x (adam (2 + 100000) + sgd 12 + rmsprop (2 + 100000)) */
    assert_int_equal((int)tun_grid_size(s), 2 * (100002 + 12 + 100002));
    tun_space_free(s);
}

static void test_big_conditional_grid_is_walked_lazily(void **state) {
    (void)state;
    tun_space *s = parse_ok(cond_space);
    tun_study *t = grid_study(s, 5);
    int ib = tun_space_index(s, "beta"), iu = tun_space_index(s, "units");
    int on_units = 0;
    for (int k = 0; k < 300; k++) {
        double x[MAXP];
        assert_int_equal(tun_study_suggest(t, k, x), 0);
        for (int i = 0; i < s->n; i++)
            assert_int_equal(isnan(x[i]), !tun_space_is_active(s, x, i));
        if (!isnan(x[iu])) {
            on_units++;
            assert_true(x[ib] == 2 && fmod(x[iu], 10) == 0 && x[iu] >= 10 && x[iu] <= 1000000);
        }
        for (int j = 0; j < k; j++) {
            /* never a repeat: re-suggesting j's point would collide with trial j */
            const double *y = t->trials[j].x;
            int eq = 1;
            for (int i = 0; i < s->n; i++)
                if (isnan(x[i]) != isnan(y[i]) || (!isnan(x[i]) && x[i] != y[i])) eq = 0;
            assert_false(eq);
        }
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_RUNNING, 0), 0);
    }
    /* most points have units (200004 of 200032): a shuffled order, not a scan */
    assert_true(on_units > 250);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_order_is_seeded_and_deterministic(void **state) {
    (void)state;
    const char *text = "{\"a\": {\"type\": \"int\", \"low\": 0, \"high\": 19},"
                       " \"b\": {\"type\": \"choice\", \"values\": [\"p\", \"q\", \"r\"]}}";
    tun_space *s = parse_ok(text);
    double a1[60 * MAXP], a2[60 * MAXP], b1[60 * MAXP];
    assert_int_equal(exhaust(s, 1, a1, 60), 60);
    assert_int_equal(exhaust(s, 1, a2, 60), 60);
    assert_int_equal(exhaust(s, 2, b1, 60), 60);
    n_cmp = s->n;
    int diff = 0, in_scan_order = 1;
    for (int k = 0; k < 60; k++) {
        assert_int_equal(cmp_config(a1 + k * MAXP, a2 + k * MAXP), 0);
        if (cmp_config(a1 + k * MAXP, b1 + k * MAXP) != 0) diff++;
        if (k > 0 && cmp_config(a1 + (k - 1) * MAXP, a1 + k * MAXP) > 0) in_scan_order = 0;
    }
    assert_true(diff > 40);
    assert_false(in_scan_order);
    tun_space_free(s);
}

static void test_present_trials_are_skipped(void **state) {
    (void)state;
    tun_space *s = parse_ok("{\"a\": {\"type\": \"int\", \"low\": 0, \"high\": 3},"
                            " \"f\": {\"type\": \"float\", \"low\": 0, \"high\": 1, \"step\": 0.5}}");
    tun_study *t = grid_study(s, 3);
    double x0[2], x1[2], y[2];
    /* the first point in the order goes to trial 0, and to trial 1 while 0 is unknown */
    assert_int_equal(tun_study_suggest(t, 0, x0), 0);
    assert_int_equal(tun_study_suggest(t, 1, x1), 0);
    assert_true(x0[0] == x1[0] && x0[1] == x1[1]);
    /* once trial 0 runs, trial 1 gets another point */
    assert_int_equal(tun_study_add(t, 0, x0, TUN_TRIAL_RUNNING, 0), 0);
    assert_int_equal(tun_study_suggest(t, 1, x1), 0);
    assert_false(x0[0] == x1[0] && x0[1] == x1[1]);
    /* re-asking for a present number ignores its own point */
    assert_int_equal(tun_study_suggest(t, 0, y), 0);
    assert_true(y[0] == x0[0] && y[1] == x0[1]);
    /* a configuration off the grid (replayed from another sampler) uses no point */
    double off[2] = {1, 0.3};
    assert_int_equal(tun_study_add(t, 1, off, TUN_TRIAL_COMPLETE, 1.0), 0);
    int k = 2;
    for (;; k++) {
        double x[2];
        int rc = tun_study_suggest(t, k, x);
        if (rc == HPO_EEXHAUSTED) break;
        assert_int_equal(rc, 0);
        assert_int_equal(tun_study_add(t, k, x, TUN_TRIAL_PRUNED, 0), 0);
    }
    assert_int_equal(k - 1, 12); /* 12 points: trial 0 and 11 more */
    tun_study_free(t);
    tun_space_free(s);
}

static void test_config_checks_for_grid(void **state) {
    (void)state;
    json_t *tuner = json_loads("{\"algorithm\": \"grid\", \"seed\": 3}", 0, NULL);
    tun_config cfg;
    hpo_error err = {0};
    tun_space *s = parse_ok("{\"u\": {\"type\": \"int\", \"low\": 1, \"high\": 4},"
                            " \"lr\": {\"type\": \"float\", \"low\": 0, \"high\": 1}}");
    assert_int_equal(tun_config_parse(tuner, s, &cfg, &err), HPO_EINVAL);
    assert_string_equal(err.field, "space.lr");
    assert_non_null(strstr(err.message, "step"));
    tun_study *t = grid_study(s, 0);
    double x[2];
    assert_int_equal(tun_study_suggest(t, 0, x), HPO_EINVAL);
    tun_study_free(t);
    tun_space_free(s);

    s = parse_ok("{\"a\": {\"type\": \"int\", \"low\": 1, \"high\": 1000},"
                 " \"b\": {\"type\": \"int\", \"low\": 1, \"high\": 1001}}");
    assert_int_equal(tun_config_parse(tuner, s, &cfg, &err), HPO_EINVAL);
    assert_string_equal(err.field, "space");
    t = grid_study(s, 0);
    assert_int_equal(tun_study_suggest(t, 0, x), HPO_ETOOLARGE);
    tun_study_free(t);
    tun_space_free(s);

    /* 10^6 exactly is allowed */
    s = parse_ok("{\"a\": {\"type\": \"int\", \"low\": 1, \"high\": 1000},"
                 " \"b\": {\"type\": \"int\", \"low\": 1, \"high\": 1000}}");
    assert_int_equal(tun_config_parse(tuner, s, &cfg, &err), 0);
    assert_int_equal(cfg.algorithm, TUN_GRID);
    assert_int_equal(cfg.seed, 3);
    t = grid_study(s, 0);
    assert_int_equal(tun_study_suggest(t, 0, x), 0);
    assert_true(x[0] >= 1 && x[0] <= 1000 && x[1] >= 1 && x[1] <= 1000);
    tun_study_free(t);
    tun_space_free(s);
    json_decref(tuner);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_product),
        cmocka_unit_test(test_conditional_product),
        cmocka_unit_test(test_big_conditional_grid_is_walked_lazily),
        cmocka_unit_test(test_order_is_seeded_and_deterministic),
        cmocka_unit_test(test_present_trials_are_skipped),
        cmocka_unit_test(test_config_checks_for_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
