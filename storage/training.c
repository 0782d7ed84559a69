/* training.c - embedded trials (schema v3): queueing (requeue, start on a
 * slot), training facts (best epoch, training time) and the per-epoch
 * learning curves of every execution (see storage.h).
 *
 * State rules live in the WHERE clauses of the statements (db.c): a call
 * that changes no row was either about an unknown trial (HPO_ENOTFOUND) or
 * one in the wrong state (HPO_ECONFLICT), told apart afterwards by
 * sto_db_trial_conflict() inside the same transaction. Each change also
 * moves its study's updated time, in that transaction. */
#include "db_internal.h"

#include <stdlib.h>
#include <string.h>

/* Steps a one-row UPDATE on a trial (already bound) in its own transaction;
 * no changed row -> sto_db_trial_conflict() (or HPO_ENOTFOUND if
 * conflict_possible is 0). */
static int trial_update(sto_db *db, sto_stmt *s, int64_t trial_id, int conflict_possible,
                        const sto_event_in *ev, const char *what) {
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    if (sto_step(s) != STO_DONE) {
        rc = sto_db_error(db, what);
        goto fail;
    }
    sto_db_done(s);
    if (sto_sql_changes(db->conn) == 0) {
        rc = conflict_possible ? sto_db_trial_conflict(db, trial_id) : HPO_ENOTFOUND;
        goto fail;
    }
    rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, trial_id, hpo_now());
    if (rc) goto fail;
    rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_TRIAL, trial_id, ev);
    if (rc) goto fail;
    rc = sto_db_commit(db);
    if (rc) goto fail;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    return rc;
}

int sto_trial_requeue(sto_db *db, int64_t trial_id) { return sto_trial_requeue_ev(db, trial_id, NULL); }

int sto_trial_requeue_ev(sto_db *db, int64_t trial_id, const sto_event_in *ev) {
    if (!db) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_REQUEUE];
    sto_bind_int64(s, 1, trial_id);
    sto_bind_int64(s, 2, db->node_id); /* running on another node: not ours to requeue */
    int rc = trial_update(db, s, trial_id, 1, ev, "trial requeue");
    sto_db_unlock(db);
    return rc;
}

int sto_trials_requeue_running(sto_db *db, int64_t study_id, int64_t *n_out) {
    if (!db) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIALS_REQUEUE_RUNNING];
    int64_t n = 0;
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    rc = sto_db_exists(db, STO_Q_STUDY_EXISTS, study_id);
    if (rc) goto fail;
    sto_bind_int64(s, 1, study_id);
    if (sto_step(s) != STO_DONE) {
        rc = sto_db_error(db, "trials requeue running");
        goto fail;
    }
    n = sto_sql_changes(db->conn);
    sto_db_done(s);
    if (n > 0 && (rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH, study_id, hpo_now()))) goto fail;
    rc = sto_db_commit(db);
    if (rc) goto fail;
    sto_db_unlock(db);
    if (n) HPO_INFO("storage: study %lld: %lld running trial(s) requeued", (long long)study_id,
                    (long long)n);
    if (n_out) *n_out = n;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_start(sto_db *db, int64_t trial_id, const char *slot) {
    return sto_trial_start_ev(db, trial_id, slot, NULL);
}

int sto_trial_start_ev(sto_db *db, int64_t trial_id, const char *slot, const sto_event_in *ev) {
    if (!db) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = sto_db_node_stmt(db, STO_Q_TRIAL_START_NODE, STO_Q_TRIAL_START, 4, slot ? db->node_id : 0);
    sto_bind_int64(s, 1, trial_id);
    sto_bind_text(s, 2, slot);
    sto_bind_real(s, 3, hpo_now());
    int rc = trial_update(db, s, trial_id, 1, ev, "trial start");
    sto_db_unlock(db);
    return rc;
}

int sto_trial_resume_ev(sto_db *db, int64_t trial_id, const char *slot, const sto_event_in *ev) {
    sto_trial_run r = {.slot = slot};
    return sto_trial_claim_ev(db, trial_id, &r, ev);
}

int sto_trial_claim_ev(sto_db *db, int64_t trial_id, const sto_trial_run *r, const sto_event_in *ev) {
    if (!db || !r) return HPO_EINVAL;
    sto_db_lock(db);
    double now = hpo_now();
    int hand_out = r->params != NULL; /* an enqueued trial (never started), else a requeued one */
    sto_stmt *s = db->q[hand_out ? STO_Q_TRIAL_HAND_OUT : STO_Q_TRIAL_RESUME];
    int rc = sto_db_begin(db);
    if (rc == 0 && r->parallel > 0) {
        /* parallel_trials across nodes: counted under the study's row lock */
        sto_stmt *g = db->q[STO_Q_TRIAL_GET];
        sto_bind_int64(g, 1, trial_id);
        sto_trial t;
        rc = sto_db_row(db, g, sto_db_read_trial, &t, "trial claim");
        int64_t study_id = rc == 0 ? t.study_id : 0;
        if (rc == 0) sto_trial_clear(&t);
        if (rc == 0) rc = sto_db_lock_study(db, study_id);
        if (rc == 0) rc = sto_db_run_limits(db, study_id, &(sto_trial_run){.parallel = r->parallel});
    }
    if (rc == 0 && r->slot) rc = sto_db_node_live(db);
    sto_bind_int64(s, 1, trial_id);
    if (hand_out) {
        sto_bind_text(s, 2, r->params);
        sto_bind_real(s, 3, now);
        sto_bind_real(s, 4, r->lease_expires > 0 ? r->lease_expires : 0);
        sto_bind_text(s, 5, r->slot);
        sto_bind_id(s, 6, r->slot ? db->node_id : 0);
    } else {
        sto_bind_text(s, 2, r->slot);
        sto_bind_id(s, 3, r->slot ? db->node_id : 0);
    }
    if (rc == 0 && sto_step(s) != STO_DONE) rc = sto_db_error(db, "trial claim");
    sto_db_done(s);
    if (rc == 0 && sto_sql_changes(db->conn) == 0) rc = sto_db_trial_conflict(db, trial_id);
    if (rc == 0) rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, trial_id, now);
    if (rc == 0) rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_TRIAL, trial_id, ev);
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_set_training(sto_db *db, int64_t trial_id, int64_t best_epoch, double add_seconds) {
    if (!db || !(add_seconds >= 0)) return HPO_EINVAL; /* also refuses NaN */
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_SET_TRAINING];
    sto_bind_int64(s, 1, trial_id);
    sto_bind_int64(s, 2, best_epoch);
    sto_bind_real(s, 3, add_seconds);
    int rc = trial_update(db, s, trial_id, 0, NULL, "trial set training");
    sto_db_unlock(db);
    return rc;
}

static int epoch_put(sto_db *db, int q, int64_t trial_id, int execution, int64_t epoch, const char *metrics,
                     const sto_event_in *ev);

int sto_epoch_put(sto_db *db, int64_t trial_id, int execution, int64_t epoch,
                  const char *metrics) {
    return sto_epoch_put_ev(db, trial_id, execution, epoch, metrics, NULL);
}

int sto_epoch_put_ev(sto_db *db, int64_t trial_id, int execution, int64_t epoch, const char *metrics,
                     const sto_event_in *ev) {
    return epoch_put(db, STO_Q_EPOCH_PUT_NODE, trial_id, execution, epoch, metrics, ev);
}

int sto_epoch_put_report(sto_db *db, int64_t trial_id, int64_t step, const char *metrics) {
    return epoch_put(db, STO_Q_EPOCH_PUT_FIRST_NODE, trial_id, 0, step, metrics, NULL);
}

/* q: STO_Q_EPOCH_PUT_NODE or _FIRST_NODE (the plain put before schema v9) */
static int epoch_put(sto_db *db, int q, int64_t trial_id, int execution, int64_t epoch, const char *metrics,
                     const sto_event_in *ev) {
    if (!db || execution < 0 || epoch < 0) return HPO_EINVAL;
    sto_db_lock(db);
    /* a trial that left this node takes none of its epochs */
    sto_stmt *s = db->q[q];
    if (s)
        sto_bind_int64(s, 5, db->node_id);
    else
        s = db->q[STO_Q_EPOCH_PUT]; /* a schema before v9 (tests) */
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    sto_bind_int64(s, 1, trial_id);
    sto_bind_int64(s, 2, execution);
    sto_bind_int64(s, 3, epoch);
    sto_bind_text(s, 4, metrics ? metrics : "{}");
    if (sto_step(s) != STO_DONE) {
        rc = sto_db_is_fk_error(db) ? HPO_ENOTFOUND : sto_db_error(db, "epoch put");
        goto fail;
    }
    sto_db_done(s);
    if (sto_sql_changes(db->conn) == 0) { /* no such trial, or another node's */
        rc = sto_db_trial_conflict(db, trial_id);
        goto fail;
    }
    rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, trial_id, hpo_now());
    if (rc) goto fail;
    rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_TRIAL, trial_id, ev);
    if (rc) goto fail;
    rc = sto_db_commit(db);
    if (rc) goto fail;
    sto_db_unlock(db);
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

static void clear_epoch(void *e) { free(((sto_epoch *)e)->metrics); }

void sto_epoch_list_free(sto_epoch *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) clear_epoch(&list[i]);
    free(list);
}

static void read_epoch(sto_stmt *s, void *out) {
    sto_epoch *e = out;
    e->execution = sto_col_int(s, 0);
    e->epoch = sto_col_int64(s, 1);
    e->metrics = sto_col_text(s, 2);
}

int sto_trial_epochs(sto_db *db, int64_t trial_id, sto_epoch **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_EPOCHS_TRIAL];
    int rc = sto_db_exists(db, STO_Q_TRIAL_STATE, trial_id);
    if (rc == 0) {
        sto_bind_int64(s, 1, trial_id);
        rc = sto_db_rows(db, s, sizeof **out, read_epoch, clear_epoch, "trial epochs", (void **)out, n_out);
    }
    sto_db_unlock(db);
    return rc;
}
