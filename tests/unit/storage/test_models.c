/* test_models.c - models (schema v4): create/get/list by kind, the state
 * rules of start and finish, the queue order, crash requeue, cascade on
 * study delete, unknown study. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "storage.h"
#include "sto_testutil.h"

static void test_model_life_cycle(void **state) {
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    int64_t sid, other, tid, num, m1, m2, m3;
    assert_int_equal(sto_study_create(db, "s", "{}", &sid), 0);
    assert_int_equal(sto_study_create(db, "o", "{}", &other), 0);
    assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, &num), 0);
    assert_int_equal(sto_model_create(db, sid, tid, STO_MODEL_REFIT, "{\"epochs\": 6}", 0, &m1), 0);
    assert_int_equal(sto_model_create(db, sid, tid, STO_MODEL_TRIAL, NULL, 0, &m2), 0);
    assert_int_equal(sto_model_create(db, sid, 0, STO_MODEL_ENSEMBLE, "{\"method\": \"mean\"}", 0, &m3), 0);
    assert_int_equal(sto_model_create(db, 999, 0, STO_MODEL_REFIT, "{}", 0, NULL), HPO_ENOTFOUND);

    sto_model m;
    assert_int_equal(sto_model_get(db, m1, &m), 0);
    assert_int_equal(m.kind, STO_MODEL_REFIT);
    assert_int_equal(m.state, STO_MODEL_QUEUED);
    assert_int_equal(m.trial_id, tid);
    assert_string_equal(m.spec, "{\"epochs\": 6}");
    assert_null(m.result);
    sto_model_clear(&m);
    assert_int_equal(sto_model_get(db, m3, &m), 0);
    assert_int_equal(m.trial_id, 0);
    sto_model_clear(&m);

    sto_model *list;
    size_t n;
    assert_int_equal(sto_model_list(db, sid, -1, &list, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(list[0].id, m1);
    sto_model_list_free(list, n);
    assert_int_equal(sto_model_list(db, sid, STO_MODEL_ENSEMBLE, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].id, m3);
    sto_model_list_free(list, n);

    /* queue: oldest first; start; finish once */
    assert_int_equal(sto_model_next_queued(db, &m), 0);
    assert_int_equal(m.id, m1);
    sto_model_clear(&m);
    assert_int_equal(sto_model_start(db, m1), 0);
    assert_int_equal(sto_model_next_queued(db, &m), 0);
    assert_int_equal(m.id, m2);
    sto_model_clear(&m);
    assert_int_equal(sto_model_finish(db, m1, STO_MODEL_COMPLETE, "{\"test_accuracy\": 0.9}", "models/1.st", NULL), 0);
    assert_int_equal(sto_model_finish(db, m1, STO_MODEL_FAILED, NULL, NULL, "again"), HPO_ECONFLICT);
    assert_int_equal(sto_model_start(db, m1), HPO_ECONFLICT);
    assert_int_equal(sto_model_start(db, 12345), HPO_ENOTFOUND);
    assert_int_equal(sto_model_finish(db, m1, STO_MODEL_RUNNING, NULL, NULL, NULL), HPO_EINVAL);
    assert_int_equal(sto_model_get(db, m1, &m), 0);
    assert_int_equal(m.state, STO_MODEL_COMPLETE);
    assert_string_equal(m.path, "models/1.st");
    assert_true(m.finished >= m.started && m.started >= m.created);
    sto_model_clear(&m);

    /* crash: running -> queued, finished untouched */
    assert_int_equal(sto_model_start(db, m2), 0);
    int64_t k = -1;
    assert_int_equal(sto_models_requeue_running(db, &k), 0);
    assert_int_equal(k, 1);
    assert_int_equal(sto_model_get(db, m2, &m), 0);
    assert_int_equal(m.state, STO_MODEL_QUEUED);
    sto_model_clear(&m);
    assert_int_equal(sto_model_finish(db, m2, STO_MODEL_FAILED, NULL, NULL, "no checkpoint"), 0);
    assert_int_equal(sto_model_finish(db, m3, STO_MODEL_COMPLETE, "{}", NULL, NULL), 0);
    assert_int_equal(sto_model_next_queued(db, &m), HPO_ENOTFOUND);

    /* cascade */
    assert_int_equal(sto_study_delete(db, sid), 0);
    assert_int_equal(sto_model_get(db, m1, &m), HPO_ENOTFOUND);
    assert_int_equal(sto_model_list(db, other, -1, &list, &n), 0);
    assert_int_equal(n, 0);
    sto_model_list_free(list, n);
    sto_close(db);
    sto_tmp_close(&tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_model_life_cycle)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
