/* test_trials_in.c - trials a client brings (storage/trials_in.c): an
 * enqueued trial is queued and never started, takes the next number and is
 * handed out once (a requeued trial cannot be); a finished trial is added
 * whole with its intermediate values and last step (and, from a study
 * document, each report's flags, rung and curve point); both store their event
 * in their transaction and move the study's updated time. A pbt member
 * queued at a boundary is ranked (pbt_epoch) or replaced: it ends pruned
 * with its last value and a bred trial with the next number, its lineage
 * and start epoch is queued as started, with both events, in one
 * transaction; neither applies to a trial that is not queued. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"
#include "storage/sto_testutil.h"

static sto_db *open_db(int64_t *sid) {
    sto_db *db = NULL;
    assert_int_equal(sto_test_open(&db), 0);
    assert_int_equal(sto_study_create(db, "s", "{}", sid), 0);
    return db;
}

static int64_t n_events(sto_db *db, int64_t sid, const char *type) {
    sto_event *ev = NULL;
    size_t n = 0;
    int64_t k = 0;
    assert_int_equal(sto_event_list(db, sid, 0, 0, &ev, &n), 0);
    for (size_t i = 0; i < n; i++) k += strcmp(ev[i].type, type) == 0;
    sto_event_list_free(ev, n);
    return k;
}

static void test_enqueue_and_hand_out(void **state) {
    (void)state;
    int64_t sid, a, na, b, nb, c, nc;
    sto_db *db = open_db(&sid);
    assert_int_equal(sto_trial_create(db, sid, "{\"x\":1}", 0, &a, &na), 0);
    sto_event_in ev = {"trial_enqueued", NULL};
    assert_int_equal(sto_trial_enqueue_ev(db, sid, "{\"x\":2}", &ev, &b, &nb), 0);
    assert_int_equal(sto_trial_enqueue_ev(db, sid + 99, "{}", &ev, &c, &nc), HPO_ENOTFOUND);
    assert_int_equal(na, 0);
    assert_int_equal(nb, 1);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, b, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_QUEUED);
    assert_true(t.started == 0);
    sto_trial_clear(&t);
    assert_int_equal(n_events(db, sid, "trial_enqueued"), 1);
    /* handed out once, with the full params and a lease */
    assert_int_equal(sto_trial_hand_out_ev(db, b, "{\"x\":2,\"y\":3}", 1e12, NULL, NULL), 0);
    assert_int_equal(sto_trial_hand_out_ev(db, b, "{\"x\":2,\"y\":3}", 1e12, NULL, NULL), HPO_ECONFLICT);
    assert_int_equal(sto_trial_get(db, b, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_RUNNING);
    assert_true(t.started > 0 && t.lease_expires == 1e12);
    assert_string_equal(t.params, "{\"x\":2,\"y\":3}");
    sto_trial_clear(&t);
    /* a requeued trial (started before) is not an enqueued one */
    assert_int_equal(sto_trial_requeue(db, a), 0);
    assert_int_equal(sto_trial_hand_out_ev(db, a, "{}", 0, NULL, NULL), HPO_ECONFLICT);
    assert_int_equal(sto_trial_hand_out_ev(db, a + 1000, "{}", 0, NULL, NULL), HPO_ENOTFOUND);
    sto_close(db);
}

static void test_add_finished(void **state) {
    (void)state;
    int64_t sid, id, number;
    sto_db *db = open_db(&sid);
    sto_study before;
    assert_int_equal(sto_study_get(db, sid, &before), 0);
    int64_t steps[] = {3, 1, 2};
    double values[] = {0.3, 0.9, NAN};
    sto_trial_in in = {.params = "{\"x\":1}", .state = STO_TRIAL_PRUNED, .value = NAN, .value_std = NAN,
                       .started = 100.0, .finished = 200.0, .steps = steps, .step_values = values, .n_steps = 3};
    sto_event_in ev = {"trial_added", NULL};
    assert_int_equal(sto_trial_add_ev(db, sid, &in, &ev, &id, &number), 0);
    assert_int_equal(number, 0);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, id, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_PRUNED);
    assert_int_equal(t.last_step, 3);
    assert_true(t.value == 0.3 && t.value_n == 1); /* a pruned trial keeps its last value */
    assert_true(t.started == 100.0 && t.finished == 200.0);
    assert_string_equal(t.user_attrs, "{}"); /* none given: the defaults */
    assert_string_equal(t.note, "");
    sto_trial_clear(&t);
    int64_t *s = NULL;
    double *v = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_intermediates(db, id, &s, &v, &n), 0);
    assert_int_equal(n, 3);
    assert_true(s[0] == 1 && s[2] == 3 && isnan(v[1]));
    free(s);
    free(v);
    in.state = STO_TRIAL_COMPLETE;
    in.value = 0.5;
    in.n_steps = 0;
    in.user_attrs = "{\"source\":\"import\"}";
    in.note = "brought in";
    assert_int_equal(sto_trial_add_ev(db, sid, &in, &ev, &id, &number), 0);
    assert_int_equal(number, 1);
    assert_int_equal(sto_trial_get(db, id, &t), 0); /* user_attrs and note stored with it */
    assert_string_equal(t.user_attrs, "{\"source\":\"import\"}");
    assert_string_equal(t.note, "brought in");
    sto_trial_clear(&t);
    in.user_attrs = in.note = NULL;
    in.state = STO_TRIAL_RUNNING;
    assert_int_equal(sto_trial_add_ev(db, sid, &in, &ev, &id, &number), HPO_EINVAL);
    in.state = STO_TRIAL_COMPLETE;
    assert_int_equal(sto_trial_add_ev(db, sid + 5, &in, &ev, &id, &number), HPO_ENOTFOUND);
    assert_int_equal(n_events(db, sid, "trial_added"), 2);
    sto_study after;
    assert_int_equal(sto_study_get(db, sid, &after), 0);
    assert_true(after.updated >= before.updated);
    sto_study_clear(&before);
    sto_study_clear(&after);
    sto_close(db);
}

/* A document's report details (sto_trial_in.step_flags, step_rungs,
 * step_curves) are stored as given, whatever the steps' order says. */
static void test_add_step_details(void **state) {
    (void)state;
    int64_t sid, id, number;
    sto_db *db = open_db(&sid);
    int64_t steps[] = {1, 2, 3};
    double values[] = {0.5, 0.4, 0.3};
    int flags[] = {STO_STEP_LATE, STO_STEP_PRUNED, STO_STEP_PRUNED};
    int rungs[] = {-1, 1, -1};
    const char *curves[] = {"{\"a\":0.5,\"b\":2}", NULL, NULL};
    sto_trial_in in = {.params = "{}", .state = STO_TRIAL_PRUNED, .value = NAN, .value_std = NAN,
                       .steps = steps, .step_values = values, .n_steps = 3, .step_flags = flags,
                       .step_rungs = rungs, .step_curves = curves};
    assert_int_equal(sto_trial_add_ev(db, sid, &in, NULL, &id, &number), 0);
    sto_intermediate *rows = NULL;
    size_t n = 0;
    assert_int_equal(sto_trial_intermediates_after(db, id, -1, &rows, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(rows[0].flags, STO_STEP_LATE);
    assert_int_equal(rows[1].flags, STO_STEP_PRUNED);
    assert_int_equal(rows[1].rung, 1);
    assert_int_equal(rows[2].flags, STO_STEP_PRUNED);
    assert_int_equal(rows[2].rung, -1);
    free(rows);
    sto_epoch *eps = NULL;
    size_t n_eps = 0;
    assert_int_equal(sto_trial_epochs(db, id, &eps, &n_eps), 0);
    assert_int_equal(n_eps, 1);
    assert_true(eps[0].execution == 0 && eps[0].epoch == 1);
    assert_string_equal(eps[0].metrics, "{\"a\":0.5,\"b\":2}");
    sto_epoch_list_free(eps, n_eps);
    sto_close(db);
}

static void test_pbt_rank_and_breed(void **state) {
    (void)state;
    int64_t sid, a, na, b, nb;
    sto_db *db = open_db(&sid);
    assert_int_equal(sto_trial_create(db, sid, "{\"lr\":0.1}", 0, &a, &na), 0);
    assert_int_equal(sto_trial_report(db, a, 1, 0.5, 0, 0), 0);
    assert_int_equal(sto_trial_report(db, a, 2, 0.6, 0, 0), 0);
    assert_int_equal(sto_trial_pbt_ranked(db, a, 2), HPO_ECONFLICT); /* running */
    assert_int_equal(sto_trial_requeue(db, a), 0);
    assert_int_equal(sto_trial_pbt_ranked(db, a, 2), 0);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, a, &t), 0);
    assert_int_equal(t.pbt_epoch, 2);
    assert_null(t.lineage);
    sto_trial_clear(&t);
    sto_pbt_breed in = {.replaced_id = a, .params = "{\"lr\":0.12}",
                        .lineage = "{\"parent_epoch\":2,\"parent_trial_id\":7}", .epoch = 2};
    sto_event_in end = {"trial_pruned", NULL}, bred = {"trial_bred", NULL};
    /* max_trials reached (other nodes bred up to it): nothing stored, the member goes on */
    in.max_trials = 1;
    assert_int_equal(sto_trial_pbt_breed_ev(db, sid, &in, &end, &bred, &b, &nb), HPO_EEXHAUSTED);
    assert_int_equal(sto_trial_get(db, a, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_QUEUED);
    sto_trial_clear(&t);
    assert_int_equal(n_events(db, sid, "trial_pruned") + n_events(db, sid, "trial_bred"), 0);
    in.max_trials = 2;
    assert_int_equal(sto_trial_pbt_breed_ev(db, sid, &in, &end, &bred, &b, &nb), 0);
    assert_int_equal(nb, 1);
    assert_int_equal(sto_trial_get(db, a, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_PRUNED);
    assert_true(t.value == 0.6 && t.value_n == 1 && t.finished > 0);
    sto_trial_clear(&t);
    assert_int_equal(sto_trial_get(db, b, &t), 0);
    assert_int_equal(t.state, STO_TRIAL_QUEUED);
    assert_true(t.started > 0); /* resumes from the checkpoint the caller put there */
    assert_int_equal(t.pbt_epoch, 2);
    assert_string_equal(t.lineage, "{\"parent_epoch\":2,\"parent_trial_id\":7}");
    assert_string_equal(t.params, "{\"lr\":0.12}");
    sto_trial_clear(&t);
    assert_int_equal(n_events(db, sid, "trial_pruned"), 1);
    assert_int_equal(n_events(db, sid, "trial_bred"), 1);
    /* the replaced one is over: no second replacement, nothing stored */
    in.max_trials = 0;
    assert_int_equal(sto_trial_pbt_breed_ev(db, sid, &in, &end, &bred, NULL, NULL), HPO_ECONFLICT);
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    assert_int_equal(sto_trial_counts(db, sid, counts), 0);
    assert_int_equal(counts[STO_TRIAL_QUEUED] + counts[STO_TRIAL_PRUNED], 2);
    assert_int_equal(n_events(db, sid, "trial_bred"), 1);
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enqueue_and_hand_out),
        cmocka_unit_test(test_add_finished),
        cmocka_unit_test(test_add_step_details),
        cmocka_unit_test(test_pbt_rank_and_breed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
