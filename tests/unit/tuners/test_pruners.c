/* tuners: Hyperband's bracket table, and the pruning decisions of the median
 * rule, ASHA and Hyperband on scripted sequences of reports; MO-ASHA (ASHA
 * and Hyperband on several objectives) against a naive full ranking. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tuners_internal.h"
#include "optuna_golden.h"
#include "tuners.h"

static tun_space *one_param_space(void) {
    json_t *j = json_loads("{\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}}", 0, NULL);
    tun_space *s = NULL;
    assert_int_equal(tun_space_parse(j, &s, NULL), 0);
    json_decref(j);
    return s;
}

/* the default pruner config of a kind */
static tun_pruner_config pruner_of(tun_pruner_kind kind) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.pruner.kind = kind;
    return cfg.pruner;
}

/* a study with the default tuner and pruner pc */
static tun_study *study_with(const tun_space *s, tun_pruner_config pc, int maximize) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.pruner = pc;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, maximize, &t), 0);
    return t;
}

static tun_study *pruned_study(const tun_space *s, tun_pruner_kind kind, int maximize) {
    return study_with(s, pruner_of(kind), maximize);
}

/* asha with eta and min_resource; the median rule with its startup and
 * warm-up */
static tun_study *asha_study(const tun_space *s, double eta, int64_t min_resource) {
    tun_pruner_config pc = pruner_of(TUN_PRUNER_ASHA);
    pc.eta = eta;
    pc.min_resource = min_resource;
    return study_with(s, pc, 0);
}

static tun_study *median_study(const tun_space *s, int n_startup, int64_t warmup, int maximize) {
    tun_pruner_config pc = pruner_of(TUN_PRUNER_MEDIAN);
    pc.n_startup_trials = n_startup;
    pc.warmup_steps = warmup;
    return study_with(s, pc, maximize);
}

static void start(tun_study *t, int64_t number) {
    double x = 0.5;
    assert_int_equal(tun_study_add(t, number, &x, TUN_TRIAL_RUNNING, 0), 0);
}

/* Reports and checks the decision; sign -1 flips the value for maximising. */
static void expect(tun_study *t, int64_t number, int64_t step, double value, int want, int line) {
    int prune = -1;
    int rc = tun_study_report(t, number, step, value, &prune);
    if (rc || prune != want)
        fail_msg("line %d: trial %lld step %lld value %g: rc %d prune %d, expected %d", line,
                 (long long)number, (long long)step, value, rc, prune, want);
}
#define EXPECT(t, n, step, v, want) expect(t, n, step, v, want, __LINE__)

/* ---- Hyperband table ---- */

static void test_hyperband_table_paper(void **state) {
    (void)state;
    tun_hb_bracket br[TUN_HB_MAX_ROUNDS];
    /* Li et al. 2018, Table 1: eta = 3, R = 81 */
    static const int64_t want_n[5][5] = {
        {81, 27, 9, 3, 1}, {34, 11, 3, 1}, {15, 5, 1}, {8, 2}, {5}};
    static const int64_t want_r[5][5] = {
        {1, 3, 9, 27, 81}, {3, 9, 27, 81}, {9, 27, 81}, {27, 81}, {81}};
    int nb = tun_hyperband_brackets(3, 1, 81, br, TUN_HB_MAX_ROUNDS);
    assert_int_equal(nb, 5);
    for (int b = 0; b < 5; b++) {
        assert_int_equal(br[b].s, 4 - b);
        assert_int_equal(br[b].n_rounds, 5 - b);
        for (int i = 0; i < br[b].n_rounds; i++) {
            if (br[b].n[i] != want_n[b][i] || br[b].r[i] != want_r[b][i])
                fail_msg("bracket s=%d round %d: %lld@%lld, expected %lld@%lld", br[b].s, i,
                         (long long)br[b].n[i], (long long)br[b].r[i], (long long)want_n[b][i],
                         (long long)want_r[b][i]);
        }
    }
    /* in units: min 2 epochs, max 162 scales r, keeps n */
    assert_int_equal(tun_hyperband_brackets(3, 2, 162, br, TUN_HB_MAX_ROUNDS), 5);
    assert_true(br[0].r[0] == 2 && br[0].r[4] == 162 && br[1].n[0] == 34 && br[1].r[0] == 6);
    /* eta = 2, R = 8: s_max 3; n = ceil(4 * 2^s / (s+1)) = 8, 6, 4, 4 */
    assert_int_equal(tun_hyperband_brackets(2, 1, 8, br, TUN_HB_MAX_ROUNDS), 4);
    assert_true(br[0].n[0] == 8 && br[0].n[3] == 1 && br[0].r[3] == 8);
    assert_true(br[1].n[0] == 6 && br[1].n[1] == 3 && br[1].n[2] == 1 && br[1].r[0] == 2);
    assert_true(br[2].n[0] == 4 && br[2].r[0] == 4 && br[3].n[0] == 4 && br[3].r[0] == 8);
    /* R not a power of eta: the last round still trains to R */
    assert_int_equal(tun_hyperband_brackets(3, 1, 100, br, TUN_HB_MAX_ROUNDS), 5);
    assert_true(br[0].r[3] == 27 && br[0].r[4] == 100 && br[4].r[0] == 100);
    /* one bracket when R < eta * min */
    assert_int_equal(tun_hyperband_brackets(3, 5, 10, br, TUN_HB_MAX_ROUNDS), 1);
    assert_true(br[0].n[0] == 1 && br[0].r[0] == 10);
    /* errors */
    assert_int_equal(tun_hyperband_brackets(1, 1, 81, br, 5), HPO_EINVAL);
    assert_int_equal(tun_hyperband_brackets(3, 0, 81, br, 5), HPO_EINVAL);
    assert_int_equal(tun_hyperband_brackets(3, 9, 3, br, 5), HPO_EINVAL);
    assert_int_equal(tun_hyperband_brackets(3, 1, 81, br, 4), HPO_ETOOLARGE);
    assert_int_equal(tun_hyperband_brackets(2, 1, INT64_C(1) << 40, br, TUN_HB_MAX_ROUNDS),
                     HPO_ETOOLARGE);
}

/* ---- ASHA ---- */

static void asha_script(int maximize) {
    tun_space *s = one_param_space();
    tun_study *t = pruned_study(s, TUN_PRUNER_ASHA, maximize);
    double sg = maximize ? -1 : 1; /* the same race, seen from the other side */
    /* eta 3, min 1: rungs at steps 1, 3, 9 */
    for (int k = 0; k < 9; k++) start(t, k);
    /* rung 0 (step 1): continue iff value <= the floor(m/3)-th smallest (>= 1st) */
    EXPECT(t, 0, 1, sg * 0.50, 0); /* [.5] */
    EXPECT(t, 1, 1, sg * 0.70, 1); /* [.5 .7] keep 1 */
    EXPECT(t, 2, 1, sg * 0.30, 0); /* [.3 .5 .7] keep 1 */
    EXPECT(t, 3, 1, sg * 0.40, 1);
    EXPECT(t, 4, 1, sg * 0.20, 0);
    EXPECT(t, 5, 1, sg * 0.35, 1); /* m=6 keep 2: [.2 .3 ...] */
    EXPECT(t, 6, 1, sg * 0.25, 0); /* m=7 keep 2: [.2 .25 ...] */
    assert_int_equal(tun_study_finish(t, 1, TUN_TRIAL_PRUNED, 0), 0);
    assert_int_equal(tun_study_finish(t, 3, TUN_TRIAL_PRUNED, 0), 0);
    /* between rungs nothing is judged, however bad */
    EXPECT(t, 0, 2, sg * 9.0, 0);
    /* rung 1 (step 3) */
    EXPECT(t, 0, 3, sg * 0.45, 0); /* [.45] */
    EXPECT(t, 2, 2, sg * 0.20, 0);
    EXPECT(t, 2, 3, sg * 0.10, 0); /* [.1 .45] keep 1: .1 */
    EXPECT(t, 4, 3, sg * 0.50, 1); /* [.1 .45 .5] keep 1 */
    EXPECT(t, 6, 3, sg * 0.05, 0);
    /* a repeated report keeps the first value (.45) and answer */
    EXPECT(t, 0, 3, sg * 0.99, 0);
    EXPECT(t, 4, 3, sg * 0.01, 1);
    /* trial 7 jumps straight to step 4: rungs 0 and 1 are judged in one report;
     * rung 0 (m=8, keep 2 -> .22): .22 passes; rung 1 ([.05 .1 .22 .45 .5], keep 1) fails */
    EXPECT(t, 7, 4, sg * 0.22, 1);
    /* NaN prunes at a rung */
    EXPECT(t, 8, 1, NAN, 1);
    /* a finished trial still counts: trial 2 completes, trial 6 races at rung 2 */
    assert_int_equal(tun_study_report(t, 2, 9, sg * 0.01, NULL), 0);
    assert_int_equal(tun_study_finish(t, 2, TUN_TRIAL_COMPLETE, sg * 0.01), 0);
    EXPECT(t, 6, 9, sg * 0.02, 1); /* [.01 .02] keep 1 */
    EXPECT(t, 0, 9, sg * 0.005, 0);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_asha_minimise(void **state) { (void)state; asha_script(0); }
static void test_asha_maximise(void **state) { (void)state; asha_script(1); }

static void test_asha_eta_and_min_resource(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    tun_study *t = asha_study(s, 2, 2); /* rungs at 2, 4, 8 */
    for (int k = 0; k < 4; k++) start(t, k);
    EXPECT(t, 0, 1, 5.0, 0); /* before the first rung */
    EXPECT(t, 0, 2, 0.4, 0);
    EXPECT(t, 1, 2, 0.6, 1); /* m=2, keep 1 */
    EXPECT(t, 2, 2, 0.5, 1); /* m=3, keep floor(3/2)=1 -> .4; .5 > .4 */
    EXPECT(t, 3, 2, 0.3, 0); /* m=4, keep 2 -> [.3 .4] */
    EXPECT(t, 0, 4, 0.35, 0); /* rung 1 alone */
    EXPECT(t, 3, 4, 0.36, 1); /* [.35 .36] keep 1 */
    EXPECT(t, 3, 5, 0.01, 1); /* once told to stop, always told */
    tun_study_free(t);
    tun_space_free(s);
}

/* A report that reaches several rungs and is stopped at one gives no
 * value at the higher ones, as Optuna records them (a pruner audit's case:
 * reports every 2nd epoch with eta 2). eta 2, min 1: rungs at 1, 2, 4.
 * Trial 1 reports step 2 first: rung 0 ([.1 .3], keep 1) stops it, so its
 * .3 is no value at rung 1, and trial 2's .4 there races trial 0's .5
 * alone (it was pruned against [.3 .4 .5]). The same after a replay that
 * knows the rung; a replay that does not (a report stored before it was
 * kept) counts the value, as before. */
static void skipped_rungs(int replay, int rung_known, int want) {
    tun_space *s = one_param_space();
    tun_study *t = asha_study(s, 2, 1);
    for (int k = 0; k < 3; k++) start(t, k);
    EXPECT(t, 0, 1, 0.1, 0);
    EXPECT(t, 0, 2, 0.5, 0);
    if (!replay) {
        EXPECT(t, 1, 2, 0.3, 1);
        assert_int_equal(tun_study_prune_rung(t, 1), 0);
    } else {
        double v = 0.3;
        assert_int_equal(tun_study_replay_report(t, 1, 2, &v, 0, 1, rung_known ? 0 : -1), 0);
        assert_int_equal(tun_study_prune_rung(t, 1), rung_known ? 0 : -1);
    }
    EXPECT(t, 2, 1, 0.05, 0);
    EXPECT(t, 2, 2, 0.4, want);
    assert_int_equal(tun_study_prune_rung(t, 0), -1);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_skipped_rungs(void **state) {
    (void)state;
    skipped_rungs(0, 1, 0);
    skipped_rungs(1, 1, 0);
    skipped_rungs(1, 0, 1);
}

/* ---- median ---- */

static void complete_curve(tun_study *t, int64_t number, const double *v, int n) {
    start(t, number);
    for (int i = 0; i < n; i++) assert_int_equal(tun_study_report(t, number, i, v[i], NULL), 0);
    assert_int_equal(tun_study_finish(t, number, TUN_TRIAL_COMPLETE, v[n - 1]), 0);
}

static void test_median_rule(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    tun_study *t = median_study(s, 2, 1, 0);
    static const double c0[] = {1.0, 0.8, 0.6, 0.5}, c1[] = {1.2, 0.9, 0.7, 0.6},
                        c2[] = {0.9, 0.7, 0.5, 0.4};
    complete_curve(t, 0, c0, 4);
    /* one COMPLETE trial < n_startup_trials: never prune */
    start(t, 1);
    EXPECT(t, 1, 1, 50.0, 0);
    assert_int_equal(tun_study_finish(t, 1, TUN_TRIAL_FAILED, 0), 0);
    /* a PRUNED trial does not count toward startup nor toward the median */
    start(t, 2);
    EXPECT(t, 2, 1, -100.0, 0);
    assert_int_equal(tun_study_finish(t, 2, TUN_TRIAL_PRUNED, 0), 0);
    complete_curve(t, 3, c1, 4);
    complete_curve(t, 4, c2, 4);
    /* medians at steps 1, 2: .8 and .6 */
    start(t, 5);
    EXPECT(t, 5, 0, 5.0, 0);  /* warmup: step 0 < 1 */
    EXPECT(t, 5, 1, 0.75, 0); /* best .75 <= .8 */
    EXPECT(t, 5, 2, 0.65, 1); /* best .65 > .6 */
    start(t, 6);
    EXPECT(t, 6, 1, 0.85, 1);
    start(t, 7);
    EXPECT(t, 7, 1, 0.8, 0);  /* equal to the median: not worse */
    EXPECT(t, 7, 2, 0.9, 1);  /* best so far .8 > .6 */
    start(t, 8);
    EXPECT(t, 8, 1, 0.5, 0);
    EXPECT(t, 8, 2, 0.99, 0); /* worse now, but its best (.5) beats .6: Optuna's rule */
    EXPECT(t, 8, 17, 9.0, 0); /* no COMPLETE trial reported step 17 */
    start(t, 9);
    EXPECT(t, 9, 1, NAN, 1);
    /* an even count interpolates: add a 4th curve, step-1 values .7 .8 .9 1.0 -> .85 */
    static const double c3[] = {1.0, 1.0, 1.0, 1.0};
    complete_curve(t, 10, c3, 4);
    start(t, 11);
    EXPECT(t, 11, 1, 0.85, 0);
    start(t, 12);
    EXPECT(t, 12, 1, 0.851, 1);
    tun_study_free(t);
    tun_space_free(s);
}

/* An even count's median is numpy's b - (b - a) / 2 on the client's
 * values: completed 0.04 and 0.84 give 0.44 exactly (a + (b - a) / 2 gave
 * 0.43999999999999995 and pruned a report of 0.44, which Optuna keeps);
 * maximising, 0.2 and 0.72 give 0.46 (a pruner audit's cases). A step
 * reported again is decided again by the median rule, at the highest step,
 * as Optuna's should_prune: a trial completed since may change it. */
static void test_median_ties_and_repeats(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    for (int maxi = 0; maxi < 2; maxi++) {
        tun_study *t = median_study(s, 1, 0, maxi);
        const double a = maxi ? 0.2 : 0.04, b = maxi ? 0.72 : 0.84, tie = maxi ? 0.46 : 0.44;
        complete_curve(t, 0, &a, 1);
        complete_curve(t, 1, &b, 1);
        start(t, 2);
        EXPECT(t, 2, 0, tie, 0); /* equal to the median: kept */
        /* step 0 again: the first value stays; a third complete trial moves
         * the median past it, and the repeat is decided again */
        const double c = maxi ? 0.9 : 0.01;
        complete_curve(t, 3, &c, 1); /* median now a (0.04 / 0.72): worse */
        EXPECT(t, 2, 0, maxi ? 0.99 : 0.0, 1);
        EXPECT(t, 2, 1, maxi ? 0.99 : 0.0, 1); /* said once, said again */
        tun_study_free(t);
    }
    tun_space_free(s);
}

/* ---- Hyperband ---- */

static void test_hyperband_brackets_assignment(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.pruner.kind = TUN_PRUNER_HYPERBAND;
    cfg.pruner.max_resource = 81;
    cfg.seed = 4;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    /* in proportion to n_0: 81 34 15 8 5 of 143 */
    static const double share[5] = {81, 34, 15, 8, 5};
    int count[5] = {0};
    enum { N = 143 * 200 };
    for (int k = 0; k < N; k++) {
        int b = tun_hyperband_bracket_of(t, k);
        assert_true(b >= 0 && b < 5);
        assert_int_equal(b, tun_hyperband_bracket_of(t, k)); /* deterministic */
        count[b]++;
    }
    for (int b = 0; b < 5; b++) {
        double p = share[b] / 143, e = N * p, sd = sqrt(N * p * (1 - p));
        printf("bracket %d: %d trials, expected %.0f\n", b, count[b], e);
        assert_true(fabs(count[b] - e) < 5 * sd);
    }
    tun_study_free(t);
    tun_space_free(s);
}

static void test_hyperband_brackets_do_not_compete(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    tun_pruner_config pc = pruner_of(TUN_PRUNER_HYPERBAND);
    pc.max_resource = 81;
    tun_study *t = study_with(s, pc, 0);
    /* pick trial numbers of brackets 0 and 1 */
    int64_t b0[4], b1[3];
    int n0 = 0, n1 = 0;
    for (int64_t k = 0; n0 < 4 || n1 < 3; k++) {
        int b = tun_hyperband_bracket_of(t, k);
        if (b == 0 && n0 < 4) b0[n0++] = k;
        if (b == 1 && n1 < 3) b1[n1++] = k;
    }
    for (int i = 0; i < 4; i++) start(t, b0[i]);
    for (int i = 0; i < 3; i++) start(t, b1[i]);
    /* bracket 0: rungs at 1, 3, 9, 27; bracket 1: rungs at 3, 9, 27 */
    EXPECT(t, b0[0], 1, 0.1, 0);
    EXPECT(t, b0[1], 1, 0.9, 1);  /* [.1 .9] */
    EXPECT(t, b1[0], 1, 0.95, 0); /* no rung at 1 in bracket 1, and never vs bracket 0 */
    EXPECT(t, b0[0], 3, 0.05, 0);
    EXPECT(t, b1[0], 3, 0.95, 0); /* alone in bracket 1's first rung, though worse than .05 */
    EXPECT(t, b1[1], 3, 0.99, 1); /* [.95 .99] */
    EXPECT(t, b1[2], 3, 0.90, 0); /* [.9 .95 .99] keep 1 */
    /* bracket 0 trial first reporting at step 3: rung 0 [.1 .9 2] fails */
    EXPECT(t, b0[2], 3, 2.0, 1);
    EXPECT(t, b0[3], 1, 0.05, 0);
    tun_study_free(t);
    tun_space_free(s);
}

/* ---- the fast decisions against a naive reference on random histories ---- */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* value of trial rec at the first step >= s, or NaN */
/* Optuna's SuccessiveHalvingPruner as it is written, with its state: each
 * trial's values recorded rung by rung on the way up (a report that
 * reaches several rungs records each until one stops it); eta 3, min 1. */
enum { NAIVE_TRIALS = 256, NAIVE_RUNGS = 16 };
static double naive_rung[NAIVE_TRIALS][NAIVE_RUNGS];
static int naive_recorded[NAIVE_TRIALS];

static void naive_asha_reset(void) { memset(naive_recorded, 0, sizeof naive_recorded); }

static int naive_asha(const tun_study *t, int64_t number, int64_t step, double v) {
    double vals[4096];
    for (int rung = naive_recorded[number];; rung++) {
        int64_t rs = (int64_t)llround(pow(3, rung));
        if (step < rs) return 0;
        if (isnan(v)) return 1;
        naive_rung[number][rung] = v;
        naive_recorded[number] = rung + 1;
        int m = 0;
        for (int64_t j = 0; j < t->cap && j < NAIVE_TRIALS; j++)
            if (naive_recorded[j] > rung && !isnan(naive_rung[j][rung])) vals[m++] = naive_rung[j][rung];
        qsort(vals, (size_t)m, sizeof *vals, cmp_d);
        int idx = m / 3 - 1;
        if (idx < 0) idx = 0;
        if (v > vals[idx]) return 1;
    }
}

static int naive_median(const tun_study *t, int64_t number, int64_t step, double v) {
    const tun_trial_rec *rec = &t->trials[number];
    int complete = 0;
    double vals[4096];
    for (int64_t j = 0; j < t->cap; j++)
        if (t->trials[j].present && t->trials[j].state == TUN_TRIAL_COMPLETE) complete++;
    if (complete < 2 || step < 1) return 0;
    double best = v;
    for (int i = 0; i < rec->n_steps; i++)
        if (rec->steps[i] <= step && (isnan(best) || rec->step_values[i] < best))
            best = rec->step_values[i];
    if (isnan(best)) return 1;
    int m = 0;
    for (int64_t j = 0; j < t->cap; j++) {
        const tun_trial_rec *o = &t->trials[j];
        if (!o->present || o->state != TUN_TRIAL_COMPLETE) continue;
        for (int i = 0; i < o->n_steps; i++)
            if (o->steps[i] == step && !isnan(o->step_values[i])) vals[m++] = o->step_values[i];
    }
    if (m == 0) return 0;
    /* numpy's nanpercentile on the values as the client gave them, as
     * Optuna computes it (the tuner keeps them negated for maximising) */
    int maxi = t->obj_max[0];
    for (int i = 0; i < m; i++) vals[i] = maxi ? -vals[i] : vals[i];
    qsort(vals, (size_t)m, sizeof *vals, cmp_d);
    double pos = 0.5 * (m - 1), lo = floor(pos), hi = ceil(pos), f = pos - lo;
    double a = vals[(int)lo], b = vals[(int)hi];
    double med = f < 0.5 ? a + (b - a) * f : b - (b - a) * (1 - f);
    return maxi ? -best < med : best > med;
}

static void random_race(tun_pruner_kind kind, uint64_t seed) {
    tun_space *s = one_param_space();
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.pruner.kind = kind;
    cfg.pruner.n_startup_trials = 2;
    cfg.pruner.warmup_steps = 1;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &t), 0);
    hpo_rng rng;
    hpo_rng_seed(&rng, seed);
    naive_asha_reset();
    enum { TRIALS = 150 };
    int64_t next_step[TRIALS];
    int alive[TRIALS], started = 0, decisions = 0, prunes = 0;
    for (int e = 0; e < 3000; e++) {
        /* start a trial, or let a random live one report its next step */
        int k, n_alive = 0, live[TRIALS];
        for (int i = 0; i < started; i++)
            if (alive[i]) live[n_alive++] = i;
        if (started < TRIALS && (n_alive < 3 || hpo_rng_uniform(&rng) < 0.1)) {
            k = started++;
            start(t, k);
            alive[k] = 1;
            next_step[k] = (int64_t)hpo_rng_below(&rng, 3); /* some start late */
        } else if (n_alive > 0) {
            k = live[hpo_rng_below(&rng, (uint64_t)n_alive)];
        } else {
            break;
        }
        int64_t step = next_step[k];
        /* some skip a step, a few skip several (a report past two rungs) */
        next_step[k] += 1 + (int64_t)(hpo_rng_uniform(&rng) < 0.2) + 6 * (int64_t)(hpo_rng_uniform(&rng) < 0.05);
        double v = hpo_rng_uniform(&rng) < 0.01 ? NAN : hpo_rng_uniform(&rng) + 1.0 / (1 + step);
        int want = kind == TUN_PRUNER_ASHA ? naive_asha(t, k, step, v) : naive_median(t, k, step, v);
        int got = -1;
        assert_int_equal(tun_study_report(t, k, step, v, &got), 0);
        if (got != want)
            fail_msg("seed %llu event %d: trial %d step %lld value %g: got %d, naive %d",
                     (unsigned long long)seed, e, k, (long long)step, v, got, want);
        decisions++;
        if (got) {
            prunes++;
            alive[k] = 0;
            assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_PRUNED, 0), 0);
        } else if (step >= 30 || hpo_rng_uniform(&rng) < 0.03) {
            alive[k] = 0;
            assert_int_equal(tun_study_finish(t, k, TUN_TRIAL_COMPLETE, v == v ? v : 1), 0);
        }
    }
    printf("%s seed %llu: %d decisions, %d prunes\n", kind == TUN_PRUNER_ASHA ? "asha" : "median", (unsigned long long)seed, decisions, prunes);
    assert_true(decisions > 300 && prunes > 20 && prunes < decisions);

    /* a study rebuilt from the history, as hpod does at start (add RUNNING,
     * report without asking, finish), answers new reports as the live one */
    tun_study *r = NULL;
    assert_int_equal(tun_study_new(s, &cfg, 0, &r), 0);
    for (int64_t j = 0; j < t->cap; j++) {
        const tun_trial_rec *o = &t->trials[j];
        if (!o->present) continue;
        assert_int_equal(tun_study_add(r, j, o->x, TUN_TRIAL_RUNNING, NAN), 0);
        for (int i = 0; i < o->n_steps; i++)
            assert_int_equal(tun_study_report(r, j, o->steps[i], o->step_values[i], NULL), 0);
        if (o->prune_said) { /* storage keeps the answer, and its rung, with the step */
            int64_t last = o->steps[o->n_steps - 1];
            double lv = o->step_values[o->n_steps - 1];
            assert_int_equal(tun_study_replay_report(r, j, last, &lv, 0, 1, tun_study_prune_rung(t, j)), 0);
        }
        if (o->state != TUN_TRIAL_RUNNING)
            assert_int_equal(tun_study_finish(r, j, o->state, o->value), 0);
    }
    int same_answers = 0;
    for (int k = 0; k < 40; k++) {
        int64_t num = TRIALS + k;
        start(t, num);
        double x = 0.5;
        assert_int_equal(tun_study_add(r, num, &x, TUN_TRIAL_RUNNING, NAN), 0);
        for (int64_t step = 0; step < 12; step++) {
            double v = hpo_rng_uniform(&rng) + 1.0 / (1 + step);
            int a = -1, b = -2;
            assert_int_equal(tun_study_report(t, num, step, v, &a), 0);
            assert_int_equal(tun_study_report(r, num, step, v, &b), 0);
            assert_int_equal(a, b);
            same_answers++;
        }
    }
    assert_int_equal(same_answers, 480);
    tun_study_free(r);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_asha_matches_naive(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 10; seed++) random_race(TUN_PRUNER_ASHA, seed);
}

static void test_median_matches_naive(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 10; seed++) random_race(TUN_PRUNER_MEDIAN, seed);
}

/* ---- Optuna's own decisions (optuna_golden.py) ---- */

static void replay_golden(const golden_event *ev, size_t n, tun_pruner_kind kind, int maximize,
                          const char *name) {
    tun_space *s = one_param_space();
    tun_pruner_config pc = pruner_of(kind);
    pc.n_startup_trials = 2;
    pc.warmup_steps = 1;
    tun_study *t = study_with(s, pc, maximize);
    int prunes = 0;
    for (size_t i = 0; i < n; i++) {
        const golden_event *e = &ev[i];
        if (e->trial >= t->cap || !t->trials[e->trial].present) start(t, e->trial);
        int prune = -1;
        assert_int_equal(tun_study_report(t, e->trial, e->step, e->value, &prune), 0);
        if (prune != e->prune)
            fail_msg("%s event %zu: trial %d step %d value %g: prune %d, Optuna %d", name, i,
                     e->trial, e->step, e->value, prune, e->prune);
        prunes += prune;
        if (e->finish == 1)
            assert_int_equal(tun_study_finish(t, e->trial, TUN_TRIAL_COMPLETE, e->value), 0);
        if (e->finish == 2)
            assert_int_equal(tun_study_finish(t, e->trial, TUN_TRIAL_PRUNED, NAN), 0);
    }
    printf("%s: %zu reports, %d pruned, all as Optuna decided\n", name, n, prunes);
    assert_true(prunes > 5 && n > 100);
    tun_study_free(t);
    tun_space_free(s);
}

#define GOLDEN(arr, kind, max) replay_golden(arr, HPO_ARRAY_LEN(arr), kind, max, #arr)

/* ---- MO-ASHA: several objectives ranked at a rung ---- */

static tun_study *mo_study(const tun_space *s, tun_pruner_kind kind, int m, const int *maxi, double eta) {
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.pruner.kind = kind;
    cfg.pruner.eta = eta;
    cfg.pruner.max_resource = 27;
    tun_study *t = NULL;
    assert_int_equal(tun_study_new_mo(s, &cfg, m, maxi, &t), 0);
    return t;
}

static int report_vec(tun_study *t, int64_t number, int64_t step, const double *v) {
    int prune = -1;
    assert_int_equal(tun_study_report_mo(t, number, step, v, &prune), 0);
    return prune;
}

static void test_mo_asha_scripted(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    int maxi[2] = {0, 1}; /* minimise the first, maximise the second */
    tun_study *t = mo_study(s, TUN_PRUNER_ASHA, 2, maxi, 2);
    /* four trade-offs at rung 1 (step 1): one front */
    for (int k = 0; k < 4; k++) {
        start(t, k);
        double v[2] = {k + 1, k + 1};
        (void)report_vec(t, k, 1, v);
    }
    /* a fifth, dominated by (3, 3): 5 at the rung keep 2, four ahead */
    start(t, 4);
    double bad[2] = {3.5, 2.5};
    assert_int_equal(report_vec(t, 4, 1, bad), 1);
    /* a sixth that dominates them all is alone on the first front */
    start(t, 5);
    double good[2] = {0.5, 5};
    assert_int_equal(report_vec(t, 5, 1, good), 0);
    /* a seventh between (2, 2) and (3, 3) on the second front: the sixth,
     * the extremes (infinite crowding) and the two of wider spread come
     * before it; 7 at the rung keep 3 */
    start(t, 6);
    double mid[2] = {2.5, 2.5};
    assert_int_equal(report_vec(t, 6, 1, mid), 1);
    /* a NaN objective prunes; a scalar report on this study has NaN in the
     * second objective */
    start(t, 7);
    double nan_v[2] = {0.1, NAN};
    assert_int_equal(report_vec(t, 7, 1, nan_v), 1);
    start(t, 8);
    int prune = -1;
    assert_int_equal(tun_study_report(t, 8, 1, 0.1, &prune), 0);
    assert_int_equal(prune, 1);
    tun_study_free(t);
    /* the median pruner has no rule for vectors */
    t = mo_study(s, TUN_PRUNER_MEDIAN, 2, maxi, 3);
    start(t, 0);
    double v[2] = {1, 1};
    assert_int_equal(tun_study_report_mo(t, 0, 1, v, &prune), HPO_EINVAL);
    tun_study_free(t);
    tun_space_free(s);
}

typedef struct mo_key {
    int rank;
    double cd;
    int64_t number;
    int self;
} mo_key;

static int cmp_mo_key(const void *a, const void *b) {
    const mo_key *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->cd != y->cd) return x->cd > y->cd ? -1 : 1;
    return (x->number > y->number) - (x->number < y->number);
}

/* The naive MO-ASHA decision before trial `number` reports v at step:
 * at each rung the report reaches first, every trial's vector there
 * (minimisation sign), fully ranked by the naive peeling sort, crowding
 * per front, then number; pruned when it is not among the first keep. */
static int naive_mo_asha(const tun_study *t, int64_t number, int64_t step, const double *v_in, int r0, int bracket) {
    const tun_trial_rec *rec = &t->trials[number];
    int m = t->n_obj;
    static double V[4096 * 3];
    static int64_t num[4096];
    static int rank[4096];
    static double cd[4096];
    static size_t idx[4096];
    static mo_key key[4096];
    double v[3];
    for (int k = 0; k < m; k++) v[k] = t->obj_max[k] ? -v_in[k] : v_in[k];
    for (int k = r0;; k++) {
        int64_t rs = (int64_t)llround(pow(3, k));
        if (rs > step) return 0;
        int reached_before = 0;
        for (int i = 0; i < rec->n_steps; i++)
            if (rec->steps[i] >= rs) reached_before = 1;
        if (reached_before) continue;
        for (int o = 0; o < m; o++)
            if (isnan(v[o])) return 1;
        size_t M = 0;
        memcpy(V, v, (size_t)m * sizeof *V);
        num[M++] = number;
        for (int64_t j = 0; j < t->cap; j++) {
            const tun_trial_rec *o = &t->trials[j];
            if (!o->present || j == number || (bracket >= 0 && o->bracket != bracket)) continue;
            int f = -1;
            for (int i = 0; i < o->n_steps && f < 0; i++)
                if (o->steps[i] >= rs) f = i;
            if (f < 0) continue;
            int ok = 1;
            for (int q = 0; q < m; q++) ok &= !isnan(o->step_vecs[f * m + q]);
            if (!ok) continue;
            memcpy(V + M * (size_t)m, o->step_vecs + f * m, (size_t)m * sizeof *V);
            num[M++] = o->number;
        }
        int n_fronts = tun_nondominated_sort_ref(V, NULL, M, m, rank);
        for (int r = 0; r < n_fronts; r++) {
            size_t nf = 0;
            for (size_t i = 0; i < M; i++)
                if (rank[i] == r) idx[nf++] = i;
            double c[4096];
            tun_crowding_distance(V, m, idx, nf, c);
            for (size_t a = 0; a < nf; a++) cd[idx[a]] = c[a];
        }
        for (size_t i = 0; i < M; i++) key[i] = (mo_key){rank[i], cd[i], num[i], i == 0};
        qsort(key, M, sizeof *key, cmp_mo_key);
        int64_t keep = (int64_t)floor((double)M / 3);
        if (keep < 1) keep = 1;
        size_t pos = 0;
        while (!key[pos].self) pos++;
        if ((int64_t)pos >= keep) return 1;
    }
}

static void mo_race(tun_pruner_kind kind, int m, uint64_t seed) {
    tun_space *s = one_param_space();
    int maxi[3] = {0, 1, 0};
    tun_study *t = mo_study(s, kind, m, maxi, 3);
    hpo_rng rng;
    hpo_rng_seed(&rng, seed);
    enum { TRIALS = 120 };
    int64_t next_step[TRIALS];
    int alive[TRIALS], started = 0, decisions = 0, prunes = 0;
    for (int e = 0; e < 2500; e++) {
        int k, n_alive = 0, live[TRIALS];
        for (int i = 0; i < started; i++)
            if (alive[i]) live[n_alive++] = i;
        if (started < TRIALS && (n_alive < 3 || hpo_rng_uniform(&rng) < 0.1)) {
            k = started++;
            start(t, k);
            alive[k] = 1;
            next_step[k] = 1 + (int64_t)hpo_rng_below(&rng, 2);
        } else if (n_alive > 0) {
            k = live[hpo_rng_below(&rng, (uint64_t)n_alive)];
        } else {
            break;
        }
        int64_t step = next_step[k];
        next_step[k] += 1 + (int64_t)(hpo_rng_uniform(&rng) < 0.2);
        double v[3];
        for (int q = 0; q < m; q++) /* coarse values: ties and equal vectors happen */
            v[q] = hpo_rng_uniform(&rng) < 0.005 ? NAN : (double)hpo_rng_below(&rng, 8) + 3.0 / (double)step;
        int r0 = kind == TUN_PRUNER_HYPERBAND ? t->trials[k].bracket : 0;
        int bracket = kind == TUN_PRUNER_HYPERBAND ? t->trials[k].bracket : -1;
        int want = naive_mo_asha(t, k, step, v, r0, bracket);
        int got = report_vec(t, k, step, v);
        if (got != want)
            fail_msg("%s m=%d seed %llu event %d: trial %d step %lld: got %d, naive %d",
                     kind == TUN_PRUNER_ASHA ? "asha" : "hyperband", m, (unsigned long long)seed, e, k,
                     (long long)step, got, want);
        decisions++;
        if (got) {
            prunes++;
            alive[k] = 0;
            assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_PRUNED, NULL, NAN), 0);
        } else if (step >= 27 || hpo_rng_uniform(&rng) < 0.03) {
            alive[k] = 0;
            double f[3] = {1, 1, 1};
            assert_int_equal(tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, f, NAN), 0);
        }
    }
    printf("mo-%s m=%d seed %llu: %d decisions, %d prunes, all as the naive ranking\n",
           kind == TUN_PRUNER_ASHA ? "asha" : "hyperband", m, (unsigned long long)seed, decisions, prunes);
    assert_true(decisions > 150 && prunes > 20 && prunes < decisions);
    /* rebuilt from the history (reports without asking), it answers alike */
    tun_study *r = mo_study(s, kind, m, maxi, 3);
    for (int64_t j = 0; j < t->cap; j++) {
        const tun_trial_rec *o = &t->trials[j];
        if (!o->present) continue;
        assert_int_equal(tun_study_add(r, j, o->x, TUN_TRIAL_RUNNING, NAN), 0);
        for (int i = 0; i < o->n_steps; i++) {
            double v[3];
            for (int q = 0; q < m; q++) v[q] = maxi[q] ? -o->step_vecs[i * m + q] : o->step_vecs[i * m + q];
            assert_int_equal(tun_study_report_mo(r, j, o->steps[i], v, NULL), 0);
        }
        if (o->state != TUN_TRIAL_RUNNING) {
            double f[3] = {1, 1, 1};
            assert_int_equal(tun_study_finish_mo(r, j, o->state, o->state == TUN_TRIAL_COMPLETE ? f : NULL, NAN), 0);
        }
    }
    for (int k = 0; k < 20; k++) {
        int64_t num = TRIALS + k;
        start(t, num);
        double x = 0.5;
        assert_int_equal(tun_study_add(r, num, &x, TUN_TRIAL_RUNNING, NAN), 0);
        for (int64_t step = 1; step < 10; step++) {
            double v[3];
            for (int q = 0; q < m; q++) v[q] = (double)hpo_rng_below(&rng, 8) + 3.0 / (double)step;
            assert_int_equal(report_vec(t, num, step, v), report_vec(r, num, step, v));
        }
    }
    tun_study_free(r);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_mo_asha_matches_naive(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        mo_race(TUN_PRUNER_ASHA, 2, seed);
        mo_race(TUN_PRUNER_ASHA, 3, seed);
        mo_race(TUN_PRUNER_HYPERBAND, 2, seed);
    }
}

static void test_same_decisions_as_optuna(void **state) {
    (void)state;
    GOLDEN(golden_median_minimize, TUN_PRUNER_MEDIAN, 0);
    GOLDEN(golden_median_maximize, TUN_PRUNER_MEDIAN, 1);
    GOLDEN(golden_asha_minimize, TUN_PRUNER_ASHA, 0);
    GOLDEN(golden_asha_maximize, TUN_PRUNER_ASHA, 1);
}

/* ---- the pruner block of the config ---- */

/* A report at the largest step there is (INT64_MAX, where the rungs'
 * steps saturate) is judged and answered, for asha and hyperband, with a
 * worse trial pruned there; before, the rung loop never ended (a request
 * held its study's lock forever). */
static void test_report_at_the_last_step(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    tun_pruner_kind kinds[] = {TUN_PRUNER_ASHA, TUN_PRUNER_HYPERBAND};
    for (size_t k = 0; k < 2; k++) {
        tun_study *t = pruned_study(s, kinds[k], 0);
        start(t, 0);
        start(t, 1);
        start(t, 2);
        int prune = -1;
        assert_int_equal(tun_study_report(t, 0, INT64_MAX, 0.1, &prune), 0);
        assert_int_equal(prune, 0);
        assert_int_equal(tun_study_report(t, 1, INT64_MAX, 0.2, &prune), 0);
        assert_int_equal(tun_study_report(t, 2, INT64_MAX, 0.9, &prune), 0);
        printf("  %s: a report at step INT64_MAX answered (prune %d)\n", k ? "hyperband" : "asha", prune);
        tun_study_free(t);
    }
    tun_space_free(s);
}

/* A late report of an EARLIER step (out of order, finding 5 of audit 38):
 * Optuna 3.1 judges at trial.last_step, the highest step. ASHA's rungs up
 * to it were recorded when that step was reported (value there), so a late
 * lower step neither prunes nor changes the trial's value at those rungs
 * for the trials that come later; the median rule compares the best value
 * over every step with the median at the highest step. The expected
 * answers are Optuna 3.1's (SuccessiveHalvingPruner(min_resource=1,
 * reduction_factor=2), MedianPruner(n_startup_trials=1)) on this script. */
static void late_lower_step(tun_pruner_kind kind, int maximize, int ask_late) {
    tun_space *s = one_param_space();
    tun_pruner_config pc = pruner_of(kind);
    pc.eta = 2;
    pc.min_resource = 1;
    pc.n_startup_trials = 1;
    tun_study *t = study_with(s, pc, maximize);
    double sg = maximize ? -1 : 1; /* a maximised study sees every value negated */
    for (int i = 0; i < 3; i++) { /* complete, flat curves 1, 2, 3 (answers ignored) */
        start(t, i);
        for (int st = 1; st <= 4; st++) {
            int p = 0;
            assert_int_equal(tun_study_report(t, i, st, sg * (1.0 + i), &p), 0);
        }
        assert_int_equal(tun_study_finish(t, i, TUN_TRIAL_COMPLETE, sg * (1.0 + i)), 0);
    }
    start(t, 3);
    EXPECT(t, 3, 4, sg * 0.5, 0); /* the best so far at step 4 */
    if (ask_late) {
        EXPECT(t, 3, 1, sg * 9.0, 0); /* late step 1: its rungs were passed at step 4 */
        EXPECT(t, 3, 2, sg * 8.0, 0);
    } else { /* the same reports, the answer not asked */
        assert_int_equal(tun_study_report(t, 3, 1, sg * 9.0, NULL), 0);
        assert_int_equal(tun_study_report(t, 3, 2, sg * 8.0, NULL), 0);
    }
    /* trial 3's value at rung 1 (step 1) stays 0.5, the value it had when
     * it reached that rung: 1.5 is third of five there (keep 2) */
    start(t, 4);
    EXPECT(t, 4, 1, sg * 1.5, kind == TUN_PRUNER_ASHA);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_late_lower_step(void **state) {
    (void)state;
    for (int maximize = 0; maximize <= 1; maximize++) {
        for (int ask_late = 0; ask_late <= 1; ask_late++) {
            late_lower_step(TUN_PRUNER_ASHA, maximize, ask_late);
            late_lower_step(TUN_PRUNER_MEDIAN, maximize, ask_late);
        }
    }
}

/* The median rule on a late lower step still judges, at the highest step,
 * with the best value over every step (Optuna 3.1's MedianPruner(
 * n_startup_trials=3) answers the same on this script): not by the late
 * value at the late step. */
static void test_late_lower_step_median_judges_highest(void **state) {
    (void)state;
    tun_space *s = one_param_space();
    tun_study *t = pruned_study(s, TUN_PRUNER_MEDIAN, 0);
    t->cfg.pruner.n_startup_trials = 3;
    start(t, 9);
    EXPECT(t, 9, 4, 2.5, 0); /* no complete trial yet */
    for (int i = 0; i < 3; i++) {
        start(t, i);
        for (int st = 1; st <= 4; st++) EXPECT(t, i, st, 1.0 + i, 0);
        assert_int_equal(tun_study_finish(t, i, TUN_TRIAL_COMPLETE, 1.0 + i), 0);
    }
    start(t, 3);
    EXPECT(t, 3, 4, 2.5, 1); /* worse than the median 2 at step 4 */
    start(t, 4);
    EXPECT(t, 4, 4, 1.5, 0);
    EXPECT(t, 4, 2, 0.1, 0);
    start(t, 5);
    EXPECT(t, 5, 3, 1.9, 0);
    EXPECT(t, 5, 1, 2.5, 0); /* judged at step 3 with its best, 1.9: continue */
    EXPECT(t, 9, 1, 2.6, 1); /* judged at step 4 with its best, 2.5: prune */
    tun_study_free(t);
    tun_space_free(s);
}

/* A history replayed from storage (steps in increasing order, with the
 * flags storage kept) decides as the live run did: late_lower_step's
 * trial 3 (step 4, then late steps 1 and 2) keeps 0.5 at rung 1, so
 * trial 4's 1.5 is pruned there; replayed as if on time it would have 9.0
 * there and 1.5 would go on. A trial told to stop is told so again at a
 * repeated step and at every later one. */
static void replay_late(int late_flags, int want) {
    tun_space *s = one_param_space();
    tun_study *t = asha_study(s, 2, 1);
    for (int i = 0; i < 3; i++) {
        start(t, i);
        for (int st = 1; st <= 4; st++) {
            double v = 1.0 + i;
            assert_int_equal(tun_study_replay_report(t, i, st, &v, 0, 0, -1), 0);
        }
        assert_int_equal(tun_study_finish(t, i, TUN_TRIAL_COMPLETE, 1.0 + i), 0);
    }
    start(t, 3);
    const double v3[] = {9.0, 8.0, 0.5};
    const int64_t s3[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) assert_int_equal(tun_study_replay_report(t, 3, s3[k], &v3[k], late_flags && k < 2, 0, -1), 0);
    start(t, 4);
    EXPECT(t, 4, 1, 1.5, want);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_replay_keeps_late_and_prune_answer(void **state) {
    (void)state;
    replay_late(1, 1);
    replay_late(0, 0);

    tun_space *s = one_param_space();
    tun_study *t = pruned_study(s, TUN_PRUNER_MEDIAN, 0);
    start(t, 0);
    double v = 5.0;
    assert_int_equal(tun_study_replay_report(t, 0, 1, &v, 0, 0, -1), 0);
    assert_int_equal(tun_study_replay_report(t, 0, 2, &v, 0, 1, -1), 0);
    EXPECT(t, 0, 2, 0.1, 1); /* the repeated step: its first answer */
    EXPECT(t, 0, 3, 0.1, 1); /* and every later one */
    start(t, 1);
    assert_int_equal(tun_study_replay_report(t, 1, 2, &v, 0, 0, -1), 0);
    EXPECT(t, 1, 2, 9.0, 0); /* no complete trial: nothing prunes */
    assert_int_equal(tun_study_replay_report(t, 7, 2, &v, 0, 0, -1), HPO_ENOTFOUND);
    assert_int_equal(tun_study_replay_report(t, 1, -1, &v, 0, 0, -1), HPO_EINVAL);
    tun_study_free(t);
    tun_space_free(s);
}

static void test_pruner_config(void **state) {
    (void)state;
    tun_config cfg;
    hpo_error err = {0};
    json_t *j = json_loads("{\"algorithm\": \"tpe\", \"seed\": 9, \"max_trials\": 60,"
                           " \"executions_per_trial\": 2, \"parallel_trials\": 2,"
                           " \"max_seconds\": 3600, \"trial_timeout\": 600.5, \"lease_seconds\": 30,"
                           " \"n_startup_trials\": 4, \"acquisition\": \"ucb\", \"deterministic\": true,"
                           " \"pruner\": {\"algorithm\": \"hyperband\", \"eta\": 3,"
                           "             \"min_epochs\": 1, \"max_epochs\": 27}}",
                           0, NULL);
    assert_int_equal(tun_config_parse(j, NULL, &cfg, &err), 0);
    assert_int_equal(cfg.algorithm, TUN_TPE);
    assert_int_equal(cfg.seed, 9);
    assert_int_equal(cfg.n_startup_trials, 4);
    assert_int_equal(cfg.acquisition, TUN_ACQ_UCB);
    assert_int_equal(cfg.deterministic, 1);
    assert_int_equal(cfg.pruner.kind, TUN_PRUNER_HYPERBAND);
    assert_true(cfg.pruner.eta == 3 && cfg.pruner.min_resource == 1 && cfg.pruner.max_resource == 27);
    json_decref(j);
    assert_int_equal(tun_config_parse(NULL, NULL, &cfg, &err), 0);
    assert_int_equal(cfg.algorithm, TUN_RANDOM);
    assert_int_equal(cfg.pruner.kind, TUN_PRUNER_NONE);
    assert_int_equal(cfg.pruner.n_startup_trials, 5);
    assert_string_equal(tun_algorithm_name(TUN_BAYESIAN), "bayesian");

    static const struct { const char *json, *field; } bad[] = {
        {"{\"algorithm\": \"annealing\"}", "tuner.algorithm"},
        {"{\"algorithm\": 1}", "tuner.algorithm"},
        {"{\"seed\": -1}", "tuner.seed"},
        {"{\"seed\": 1.5}", "tuner.seed"},
        {"{\"max_trials\": 0}", "tuner.max_trials"},
        {"{\"max_trials\": 60.0}", "tuner.max_trials"}, /* read as an integer elsewhere */
        {"{\"executions_per_trial\": \"2\"}", "tuner.executions_per_trial"},
        {"{\"parallel_trials\": 1.5}", "tuner.parallel_trials"},
        {"{\"max_seconds\": 0}", "tuner.max_seconds"},
        {"{\"trial_timeout\": -3}", "tuner.trial_timeout"},
        {"{\"lease_seconds\": null}", "tuner.lease_seconds"},
        {"{\"n_startup_trials\": -1}", "tuner.n_startup_trials"},
        {"{\"acquisition\": \"pi\"}", "tuner.acquisition"},
        {"{\"gamma\": 1.5}", "tuner.gamma"},
        {"{\"deterministic\": 1}", "tuner.deterministic"},
        {"{\"colour\": 1}", "tuner.colour"},
        {"[]", "tuner"},
        {"{\"pruner\": \"asha\"}", "tuner.pruner"},
        {"{\"pruner\": {}}", "tuner.pruner.algorithm"},
        {"{\"pruner\": {\"algorithm\": \"percentile\"}}", "tuner.pruner.algorithm"},
        {"{\"pruner\": {\"algorithm\": \"asha\", \"eta\": 1}}", "tuner.pruner.eta"},
        {"{\"pruner\": {\"algorithm\": \"asha\", \"min_epochs\": 0}}", "tuner.pruner.min_epochs"},
        {"{\"pruner\": {\"algorithm\": \"asha\", \"min_epochs\": 2, \"min_resource\": 2}}",
         "tuner.pruner.min_resource"},
        {"{\"pruner\": {\"algorithm\": \"hyperband\", \"min_resource\": 9, \"max_resource\": 3}}",
         "tuner.pruner.max_resource"},
        {"{\"pruner\": {\"algorithm\": \"median\", \"warmup_steps\": -1}}",
         "tuner.pruner.warmup_steps"},
        {"{\"pruner\": {\"algorithm\": \"median\", \"n_startup_trials\": \"5\"}}",
         "tuner.pruner.n_startup_trials"},
        {"{\"pruner\": {\"algorithm\": \"median\", \"patience\": 3}}", "tuner.pruner.patience"},
    };
    for (size_t i = 0; i < HPO_ARRAY_LEN(bad); i++) {
        j = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
        tun_config before;
        memset(&before, 0x5a, sizeof before);
        cfg = before;
        memset(&err, 0, sizeof err);
        int rc = tun_config_parse(j, NULL, &cfg, &err);
        if (rc != HPO_EINVAL || strcmp(err.field, bad[i].field) != 0)
            fail_msg("case %zu %s: rc %d field '%s', expected '%s'", i, bad[i].json, rc,
                     err.field, bad[i].field);
        assert_memory_equal(&cfg, &before, sizeof cfg); /* untouched */
        json_decref(j);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hyperband_table_paper),
        cmocka_unit_test(test_median_ties_and_repeats),
        cmocka_unit_test(test_skipped_rungs),
        cmocka_unit_test(test_late_lower_step),
        cmocka_unit_test(test_late_lower_step_median_judges_highest),
        cmocka_unit_test(test_replay_keeps_late_and_prune_answer),
        cmocka_unit_test(test_asha_minimise),
        cmocka_unit_test(test_asha_maximise),
        cmocka_unit_test(test_asha_eta_and_min_resource),
        cmocka_unit_test(test_median_rule),
        cmocka_unit_test(test_hyperband_brackets_assignment),
        cmocka_unit_test(test_hyperband_brackets_do_not_compete),
        cmocka_unit_test(test_asha_matches_naive),
        cmocka_unit_test(test_median_matches_naive),
        cmocka_unit_test(test_mo_asha_scripted),
        cmocka_unit_test(test_mo_asha_matches_naive),
        cmocka_unit_test(test_same_decisions_as_optuna),
        cmocka_unit_test(test_pruner_config),
        cmocka_unit_test(test_report_at_the_last_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
