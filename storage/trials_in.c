/* trials_in.c - trials a client brings rather than a tuner (see storage.h):
 * enqueued with fixed parameters, handed out later (queued -> running with
 * the completed parameters), and finished trials added whole with their
 * intermediate values (add_trial, an imported study); the members of a
 * population-based study ranked at a boundary, replaced, and bred from
 * another's checkpoint (storage.h). Numbering is the one
 * of sto_trial_create: the study's row locked (sto_db_lock_touch_study), then
 * the next number of the study inside one statement. Each change moves the study's updated time
 * and stores its event, in the same transaction. */
#include "db_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The end of a new trial's transaction (the study touched by its lock):
 * the event (ev's data, or {"trial_id", "number", "state"} when it has
 * none) and the commit. */
static int commit_new(sto_db *db, int64_t id, int64_t number, sto_trial_state state, const sto_event_in *ev) {
    int rc = 0;
    if (ev) {
        char data[160];
        snprintf(data, sizeof data, "{\"trial_id\":%lld,\"number\":%lld,\"state\":\"%s\"}", (long long)id,
                 (long long)number, sto_trial_state_name(state));
        sto_event_in e = {ev->type, ev->data ? ev->data : data};
        rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_TRIAL, id, &e);
    }
    return rc ? rc : sto_db_commit(db);
}

int sto_trial_enqueue_ev(sto_db *db, int64_t study_id, const char *params, const sto_event_in *ev,
                         int64_t *trial_id_out, int64_t *number_out) {
    if (!db) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_ENQUEUE];
    double now = hpo_now();
    int64_t id = 0, number = 0;
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    if ((rc = sto_db_lock_touch_study(db, study_id, now))) goto fail;
    sto_bind_int64(s, 1, study_id);
    sto_bind_text(s, 2, params ? params : "{}");
    sto_bind_real(s, 3, now);
    if ((rc = sto_db_insert(db, s, "trial enqueue", &id, &number))) goto fail;
    if ((rc = commit_new(db, id, number, STO_TRIAL_QUEUED, ev))) goto fail;
    sto_db_unlock(db);
    if (trial_id_out) *trial_id_out = id;
    if (number_out) *number_out = number;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_hand_out_ev(sto_db *db, int64_t trial_id, const char *params, double lease_expires,
                          const char *slot, const sto_event_in *ev) {
    if (!params) return HPO_EINVAL;
    sto_trial_run r = {.params = params, .lease_expires = lease_expires, .slot = slot};
    return sto_trial_claim_ev(db, trial_id, &r, ev); /* training.c */
}

/* An added trial's steps' flags and curve points, as its document gives
 * them (sto_trial_in), in the add's transaction. */
static int put_step_details(sto_db *db, int64_t id, const sto_trial_in *in) {
    sto_stmt *flags = db->q[STO_Q_INTERMEDIATE_FLAGS], *curve = db->q[STO_Q_EPOCH_PUT];
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < in->n_steps; i++) {
        if (in->step_flags && flags) { /* NULL before schema v11 (tests) */
            int rung = in->step_rungs ? in->step_rungs[i] : -1;
            sto_bind_int64(flags, 1, id);
            sto_bind_int64(flags, 2, in->steps[i]);
            sto_bind_int64(flags, 3, (in->step_flags[i] & STO_STEP_LATE) != 0);
            sto_bind_int64(flags, 4, !(in->step_flags[i] & STO_STEP_PRUNED) ? 0 : rung >= 0 ? 2 + rung : 1);
            if (sto_step(flags) != STO_DONE) rc = sto_db_error(db, "trial add: report flags");
            sto_db_done(flags);
        }
        if (rc == 0 && in->step_curves && in->step_curves[i]) {
            sto_bind_int64(curve, 1, id);
            sto_bind_int64(curve, 2, 0);
            sto_bind_int64(curve, 3, in->steps[i]);
            sto_bind_text(curve, 4, in->step_curves[i]);
            if (sto_step(curve) != STO_DONE) rc = sto_db_error(db, "trial add: curve point");
            sto_db_done(curve);
        }
    }
    return rc;
}

int sto_trial_add_ev(sto_db *db, int64_t study_id, const sto_trial_in *in, const sto_event_in *ev,
                     int64_t *trial_id_out, int64_t *number_out) {
    if (!db || !in || (in->state != STO_TRIAL_COMPLETE && in->state != STO_TRIAL_PRUNED &&
                       in->state != STO_TRIAL_FAILED && in->state != STO_TRIAL_CANCELLED))
        return HPO_EINVAL;
    for (size_t i = 0; i < in->n_steps; i++)
        if (in->steps[i] < 0) return HPO_EINVAL;
    /* the highest step's value is last_value; a pruned trial without a
     * value keeps it as its value (as sto_trial_finish does) */
    int64_t last_step = -1;
    double last_value = NAN;
    for (size_t i = 0; i < in->n_steps; i++)
        if (in->steps[i] >= last_step) {
            last_step = in->steps[i];
            last_value = in->step_values[i];
        }
    double value = in->value;
    if (isnan(value) && in->state == STO_TRIAL_PRUNED) value = last_value;
    int value_n = isnan(value) ? 0 : in->value_n < 1 ? 1 : in->value_n;
    double now = hpo_now();
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_ADD], *put = sto_db_stmt_since(db, STO_Q_INTERMEDIATE_PUT_FLAGS, STO_Q_INTERMEDIATE_PUT);
    int64_t id = 0, number = 0;
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    if ((rc = sto_db_lock_touch_study(db, study_id, now))) goto fail;
    sto_bind_int64(s, 1, study_id);
    sto_bind_int64(s, 2, (int)in->state);
    sto_bind_text(s, 3, in->params ? in->params : "{}");
    sto_bind_real(s, 4, value);
    sto_bind_real(s, 5, in->value_std);
    sto_bind_int64(s, 6, value_n);
    sto_bind_int64(s, 7, last_step);
    sto_bind_real(s, 8, last_value);
    sto_bind_real(s, 9, now);
    sto_bind_real(s, 10, in->started > 0 ? in->started : in->finished > 0 ? in->finished : now); /* never after its end */
    sto_bind_real(s, 11, in->finished > 0 ? in->finished : now);
    sto_bind_text(s, 12, in->error);
    sto_bind_text(s, 13, in->user_attrs);
    sto_bind_text(s, 14, in->note);
    if ((rc = sto_db_insert(db, s, "trial add", &id, &number))) goto fail;
    if ((rc = sto_db_set_values(db, id, in->values_json, in->metrics_json))) goto fail;
    for (size_t i = 0; i < in->n_steps; i++) {
        sto_bind_int64(put, 1, id);
        sto_bind_int64(put, 2, in->steps[i]);
        sto_bind_real(put, 3, in->step_values[i]);
        if (sto_step(put) != STO_DONE) {
            rc = sto_db_error(db, "trial add: intermediate");
            goto fail;
        }
        sto_db_done(put);
    }
    if ((rc = put_step_details(db, id, in))) goto fail;
    if ((rc = commit_new(db, id, number, in->state, ev))) goto fail;
    sto_db_unlock(db);
    if (trial_id_out) *trial_id_out = id;
    if (number_out) *number_out = number;
    return 0;
fail:
    sto_db_done(s);
    sto_db_done(put);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_pbt_ranked(sto_db *db, int64_t trial_id, int64_t epoch) {
    if (!db || epoch < 0) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_PBT_RANKED];
    sto_bind_int64(s, 1, trial_id);
    sto_bind_int64(s, 2, epoch);
    int rc = sto_step(s) == STO_DONE ? 0 : sto_db_error(db, "trial pbt ranked");
    sto_db_done(s);
    if (rc == 0 && sto_sql_changes(db->conn) == 0) rc = sto_db_trial_conflict(db, trial_id);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_pbt_breed_ev(sto_db *db, int64_t study_id, const sto_pbt_breed *b, const sto_event_in *ev_end,
                           const sto_event_in *ev_new, int64_t *trial_id_out, int64_t *number_out) {
    if (!db || !b || !b->params || !b->lineage || b->epoch < 0) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *end = db->q[STO_Q_TRIAL_PBT_REPLACED], *s = db->q[STO_Q_TRIAL_PBT_BREED];
    double now = hpo_now();
    int64_t id = 0, number = 0;
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    if ((rc = sto_db_lock_touch_study(db, study_id, now))) goto fail;
    sto_trial_run limits = {.max_trials = b->max_trials};
    if ((rc = sto_db_run_limits(db, study_id, &limits))) goto fail;
    sto_bind_int64(end, 1, b->replaced_id);
    sto_bind_real(end, 2, now);
    if (sto_step(end) != STO_DONE) {
        rc = sto_db_error(db, "trial pbt replaced");
        goto fail;
    }
    sto_db_done(end);
    if (sto_sql_changes(db->conn) == 0) {
        rc = sto_db_trial_conflict(db, b->replaced_id);
        goto fail;
    }
    if ((rc = sto_db_touch_trial(db, study_id, b->replaced_id, now))) goto fail;
    if ((rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_TRIAL, b->replaced_id, ev_end))) goto fail;
    sto_bind_int64(s, 1, study_id);
    sto_bind_text(s, 2, b->params);
    sto_bind_real(s, 3, now);
    sto_bind_text(s, 4, b->lineage);
    sto_bind_int64(s, 5, b->epoch);
    if ((rc = sto_db_insert(db, s, "trial pbt breed", &id, &number))) goto fail;
    if ((rc = commit_new(db, id, number, STO_TRIAL_QUEUED, ev_new))) goto fail;
    sto_db_unlock(db);
    if (trial_id_out) *trial_id_out = id;
    if (number_out) *number_out = number;
    return 0;
fail:
    sto_db_done(end);
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}
