/* trials.c - trials: numbering, listing, intermediate values, finishing and
 * lease expiry (see storage.h). Each change also moves its study's updated
 * time, in the same transaction. */
#include "db_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const trial_state_names[STO_TRIAL_N_STATES] = {
    [STO_TRIAL_RUNNING] = "running",     [STO_TRIAL_COMPLETE] = "complete",
    [STO_TRIAL_PRUNED] = "pruned",       [STO_TRIAL_FAILED] = "failed",
    [STO_TRIAL_CANCELLED] = "cancelled", [STO_TRIAL_QUEUED] = "queued",
};

const char *sto_trial_state_name(sto_trial_state s) {
    return (unsigned)s < STO_TRIAL_N_STATES ? trial_state_names[s] : "unknown";
}

int sto_trial_state_parse(const char *name) {
    for (int i = 0; name && i < STO_TRIAL_N_STATES; i++)
        if (strcmp(name, trial_state_names[i]) == 0) return i;
    return -1;
}

void sto_trial_clear(sto_trial *t) {
    if (!t) return;
    free(t->params);
    free(t->error);
    free(t->slot);
    free(t->user_attrs);
    free(t->note);
    free(t->values_json);
    free(t->metrics_json);
    free(t->lineage);
    memset(t, 0, sizeof *t);
}

void sto_trial_list_free(sto_trial *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) sto_trial_clear(&list[i]);
    free(list);
}

static void clear_trial(void *t) { sto_trial_clear(t); }

/* Every row (STO_TRIAL_COLS) of a bound statement, as a new list. */
static int collect_trials(sto_db *db, sto_stmt *s, const char *what, sto_trial **out,
                          size_t *n_out) {
    return sto_db_rows(db, s, sizeof **out, sto_db_read_trial, clear_trial, what, (void **)out, n_out);
}

int sto_trial_create(sto_db *db, int64_t study_id, const char *params, double lease_expires,
                     int64_t *trial_id_out, int64_t *number_out) {
    sto_trial_run r = {.params = params, .lease_expires = lease_expires};
    return sto_trial_create_with(db, study_id, &r, trial_id_out, number_out);
}

int sto_db_run_limits(sto_db *db, int64_t study_id, const sto_trial_run *r) {
    if (r->max_trials <= 0 && r->parallel <= 0) return 0;
    sto_stmt *s = db->q[STO_Q_TRIAL_RUN_COUNTS];
    sto_bind_int64(s, 1, study_id);
    int src = sto_step(s), rc = src == STO_ROW ? 0 : sto_db_error(db, "trial counts");
    if (rc == 0 && r->max_trials > 0 && sto_col_int64(s, 0) >= r->max_trials) rc = HPO_EEXHAUSTED;
    if (rc == 0 && r->parallel > 0 && sto_col_int64(s, 1) >= r->parallel) rc = HPO_ECONFLICT;
    sto_db_done(s);
    return rc;
}

int sto_trial_create_with(sto_db *db, int64_t study_id, const sto_trial_run *r, int64_t *trial_id_out,
                          int64_t *number_out) {
    if (!db || !r || (r->exact_number && r->number < 0)) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[r->exact_number ? STO_Q_TRIAL_INSERT_RUN_AT : STO_Q_TRIAL_INSERT_RUN];
    int with_node = s != NULL;
    if (!with_node) /* a schema before v9 (tests): no slot, no node */
        s = db->q[r->exact_number ? STO_Q_TRIAL_INSERT_AT : STO_Q_TRIAL_INSERT];
    double now = hpo_now();
    int64_t id = 0, number = 0;
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    /* the limits and the insert under the study's row lock: every node
     * counts what the last one committed */
    if ((rc = sto_db_lock_touch_study(db, study_id, now))) goto fail;
    if ((rc = sto_db_run_limits(db, study_id, r))) goto fail;
    if (r->slot && with_node && (rc = sto_db_node_live(db))) goto fail;
    int64_t at = r->number;
    const char *params = r->params;
    if (r->exact_number && r->catch_up && (rc = r->catch_up(r->catch_up_arg, &at, &params))) goto fail;
    sto_bind_int64(s, 1, study_id);
    sto_bind_text(s, 2, params ? params : "{}");
    sto_bind_real(s, 3, now);
    sto_bind_real(s, 4, r->lease_expires > 0 ? r->lease_expires : 0);
    if (with_node) {
        sto_bind_text(s, 5, r->slot);
        sto_bind_id(s, 6, r->slot ? db->node_id : 0);
    }
    if (r->exact_number) sto_bind_int64(s, with_node ? 7 : 5, at);
    /* the insert is the last statement without an event: if it finds its
     * number taken, only the lock's touch is stored, which changes nothing */
    if (!r->ev_type) sto_db_commit_with_next(db);
    rc = sto_db_insert(db, s, "trial create", &id, &number);
    /* no row, the study there (locked): another connection numbered a trial */
    if (rc == HPO_ENOTFOUND && r->exact_number) rc = HPO_ESTALE;
    if (rc) goto fail;
    if (r->ev_type) {
        char *text = r->ev_data ? r->ev_data(r->ev_arg, id, number) : NULL;
        sto_event_in ev = {r->ev_type, text};
        rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_TRIAL, id, &ev);
        free(text);
        if (rc) goto fail;
    }
    if ((rc = sto_db_commit(db))) goto fail;
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

int sto_trial_create_at(sto_db *db, int64_t study_id, int64_t number, const char *params, double lease_expires,
                        int64_t *trial_id_out) {
    sto_trial_run r = {.params = params, .lease_expires = lease_expires, .exact_number = 1, .number = number};
    return sto_trial_create_with(db, study_id, &r, trial_id_out, NULL);
}

static int by_number(const void *a, const void *b) {
    int64_t x = ((const sto_trial *)a)->number, y = ((const sto_trial *)b)->number;
    return x < y ? -1 : x > y;
}

int sto_trials_changed(sto_db *db, int64_t study_id, int64_t after, sto_trial **out, size_t *n_out,
                       int64_t *seq_out, sto_study_state *state_out) {
    if (!db || !out || !n_out || !seq_out) return HPO_EINVAL;
    sto_trial *list = NULL;
    size_t n = 0, cap = 0;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIALS_CHANGED];
    sto_bind_int64(s, 1, study_id);
    sto_bind_int64(s, 2, after);
    int src, rc = HPO_ENOTFOUND, state = 0;
    while ((src = sto_step(s)) == STO_ROW) {
        rc = 0; /* the study is there */
        state = sto_col_int(s, STO_TRIAL_N_COLS);
        if (sto_col_is_null(s, 0)) continue; /* its row alone: nothing changed */
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            list = hpo_xrealloc(list, cap * sizeof *list);
        }
        list[n] = (sto_trial){0};
        sto_db_read_trial(s, &list[n++]);
    }
    if (src != STO_DONE) rc = sto_db_error(db, "trials changed");
    sto_db_done(s);
    sto_db_unlock(db);
    if (rc) {
        sto_trial_list_free(list, n);
        return rc;
    }
    if (state_out) *state_out = (sto_study_state)state;
    int64_t seq = n ? list[n - 1].seq : after; /* read in seq order */
    if (n > 1) qsort(list, n, sizeof *list, by_number);
    *out = list;
    *n_out = n;
    *seq_out = seq;
    return 0;
}

int sto_trial_annotate(sto_db *db, int64_t trial_id, sto_attrs_fn merge, void *arg, const char *note,
                       const sto_event_in *ev) {
    return sto_db_annotate(db, STO_Q_TRIAL_ANNOTATE, trial_id, merge, arg, note, ev);
}

int sto_trial_get(sto_db *db, int64_t trial_id, sto_trial *out) {
    if (!db || !out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_GET];
    sto_bind_int64(s, 1, trial_id);
    int rc = sto_db_row(db, s, sto_db_read_trial, out, "trial get");
    sto_db_unlock(db);
    return rc;
}

int sto_trial_list(sto_db *db, int64_t study_id, const sto_trial_filter *f, sto_trial **out,
                   size_t *n_out) {
    static const sto_trial_filter all = {.state = -1, .order = STO_ORDER_NUMBER};
    if (!db || !out || !n_out) return HPO_EINVAL;
    if (!f) f = &all;
    if (f->state < -1 || f->state >= STO_TRIAL_N_STATES ||
        (f->order != STO_ORDER_NUMBER && f->order != STO_ORDER_VALUE) || f->offset < 0)
        return HPO_EINVAL;
    int variant = (f->state >= 0) * 4 + (f->order == STO_ORDER_VALUE) * 2 + (f->descending != 0);
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_LIST + variant];
    int rc = sto_db_exists(db, STO_Q_STUDY_EXISTS, study_id);
    if (rc) goto done;
    sto_bind_int64(s, 1, study_id);
    if (f->state >= 0) sto_bind_int64(s, 2, f->state);
    sto_bind_int64(s, 3, f->limit > 0 ? f->limit : INT64_MAX); /* none */
    sto_bind_int64(s, 4, f->offset);
    rc = collect_trials(db, s, "trial list", out, n_out);
done:
    sto_db_done(s);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_outcomes(sto_db *db, int64_t study_id, int state, sto_trial **out, size_t *n_out) {
    if (!db || !out || !n_out || state < -1 || state >= STO_TRIAL_N_STATES) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[state >= 0 ? STO_Q_TRIAL_OUTCOMES_STATE : STO_Q_TRIAL_OUTCOMES];
    int rc = sto_db_exists(db, STO_Q_STUDY_EXISTS, study_id);
    if (rc) goto done;
    sto_bind_int64(s, 1, study_id);
    if (state >= 0) sto_bind_int64(s, 2, state);
    rc = collect_trials(db, s, "trial outcomes", out, n_out);
done:
    sto_db_done(s);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_counts(sto_db *db, int64_t study_id, int64_t counts[STO_TRIAL_N_STATES]) {
    if (!db || !counts) return HPO_EINVAL;
    int64_t c[STO_TRIAL_N_STATES] = {0};
    sto_db_lock(db);
    sto_stmt *s = db->q[study_id < 0 ? STO_Q_TRIAL_COUNTS_ALL : STO_Q_TRIAL_COUNTS_STUDY];
    int rc = 0, src;
    if (study_id >= 0) {
        rc = sto_db_exists(db, STO_Q_STUDY_EXISTS, study_id);
        if (rc) goto done;
        sto_bind_int64(s, 1, study_id);
    }
    while ((src = sto_step(s)) == STO_ROW) {
        int state = sto_col_int(s, 0);
        if (state >= 0 && state < STO_TRIAL_N_STATES) c[state] = sto_col_int64(s, 1);
    }
    if (src != STO_DONE) rc = sto_db_error(db, "trial counts");
done:
    sto_db_done(s);
    sto_db_unlock(db);
    if (rc == 0) memcpy(counts, c, sizeof c);
    return rc;
}

int sto_jobs_queued(sto_db *db, int64_t *trials, int64_t *models) {
    if (!db || !trials || !models) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_JOBS_QUEUED];
    sto_bind_int64(s, 1, STO_TRIAL_QUEUED);
    sto_bind_int64(s, 2, STO_STUDY_RUNNING);
    sto_bind_int64(s, 3, STO_MODEL_QUEUED);
    int rc = 0;
    if (sto_step(s) == STO_ROW) {
        *trials = sto_col_int64(s, 0);
        *models = sto_col_int64(s, 1);
    } else {
        rc = sto_db_error(db, "jobs queued");
    }
    sto_db_done(s);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_report(sto_db *db, int64_t trial_id, int64_t step, double value,
                     double lease_expires, int pruned) {
    if (!db || step < 0 || pruned < 0) return HPO_EINVAL;
    sto_db_lock(db);
    /* a trial running on another node is not ours to report */
    sto_stmt *up = sto_db_node_stmt(db, STO_Q_TRIAL_REPORT_NODE, STO_Q_TRIAL_REPORT, 5, db->node_id);
    sto_stmt *put = sto_db_stmt_since(db, STO_Q_INTERMEDIATE_PUT_FLAGS, STO_Q_INTERMEDIATE_PUT);
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    sto_bind_int64(up, 1, trial_id);
    sto_bind_int64(up, 2, step);
    sto_bind_real(up, 3, value);
    sto_bind_real(up, 4, lease_expires);
    if (sto_step(up) != STO_DONE) {
        rc = sto_db_error(db, "trial report");
        goto fail;
    }
    if (sto_sql_changes(db->conn) == 0) {
        rc = sto_db_trial_conflict(db, trial_id);
        goto fail;
    }
    sto_bind_int64(put, 1, trial_id);
    sto_bind_int64(put, 2, step);
    sto_bind_real(put, 3, value);
    if (sto_step(put) != STO_DONE) {
        rc = sto_db_error(db, "trial report: intermediate");
        goto fail;
    }
    sto_db_done(up);
    sto_db_done(put);
    sto_stmt *said = db->q[STO_Q_INTERMEDIATE_PRUNED]; /* NULL before schema v11 (tests) */
    if (pruned && said) {
        sto_bind_int64(said, 1, trial_id);
        sto_bind_int64(said, 2, step);
        sto_bind_int64(said, 3, pruned);
        if (sto_step(said) != STO_DONE) rc = sto_db_error(db, "trial report: prune answer");
        sto_db_done(said);
        if (rc) goto fail;
    }
    rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, trial_id, hpo_now());
    if (rc) goto fail;
    rc = sto_db_commit(db);
    if (rc) goto fail;
    sto_db_unlock(db);
    return 0;
fail:
    sto_db_done(up);
    sto_db_done(put);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

/* A report read by STO_Q_INTERMEDIATES_TRIAL / _STUDY from column col on:
 * step, value, late, pruned. */
static sto_intermediate read_intermediate(sto_stmt *s, int col) {
    sto_intermediate r = {0, sto_col_int64(s, col), sto_col_real(s, col + 1), 0, -1};
    int64_t pruned = sto_col_int64(s, col + 3); /* 1, or 2 + the rung (sto_trial_report) */
    if (sto_col_int64(s, col + 2)) r.flags |= STO_STEP_LATE;
    if (pruned) r.flags |= STO_STEP_PRUNED;
    if (pruned >= 2 && pruned - 2 < 64) r.rung = (int)(pruned - 2);
    return r;
}

int sto_trial_intermediates(sto_db *db, int64_t trial_id, int64_t **steps_out,
                            double **values_out, size_t *n_out) {
    if (!db || !steps_out || !values_out || !n_out) return HPO_EINVAL;
    sto_intermediate *rows = NULL;
    size_t n = 0;
    int rc = sto_trial_intermediates_after(db, trial_id, -1, &rows, &n);
    if (rc) return rc;
    int64_t *steps = hpo_xcalloc(n ? n : 1, sizeof *steps);
    double *values = hpo_xcalloc(n ? n : 1, sizeof *values);
    for (size_t i = 0; i < n; i++) {
        steps[i] = rows[i].step;
        values[i] = rows[i].value;
    }
    free(rows);
    *steps_out = steps;
    *values_out = values;
    *n_out = n;
    return 0;
}

int sto_trial_intermediates_after(sto_db *db, int64_t trial_id, int64_t after_step, sto_intermediate **out,
                                  size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_intermediate *rows = NULL;
    size_t n = 0, cap = 0;
    int src;
    sto_db_lock(db);
    sto_stmt *s = sto_db_stmt_since(db, STO_Q_INTERMEDIATES_TRIAL_FLAGS, STO_Q_INTERMEDIATES_TRIAL);
    int rc = sto_db_exists(db, STO_Q_TRIAL_STATE, trial_id);
    if (rc) goto done;
    sto_bind_int64(s, 1, trial_id);
    sto_bind_int64(s, 2, after_step);
    while ((src = sto_step(s)) == STO_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            rows = hpo_xrealloc(rows, cap * sizeof *rows);
        }
        rows[n++] = read_intermediate(s, 0);
    }
    if (src != STO_DONE) rc = sto_db_error(db, "trial intermediates");
done:
    sto_db_done(s);
    sto_db_unlock(db);
    if (rc) {
        free(rows);
        return rc;
    }
    *out = rows;
    *n_out = n;
    return 0;
}

int sto_study_intermediates(sto_db *db, int64_t study_id, void (*fn)(void *ctx, const sto_intermediate *row),
                            void *ctx) {
    if (!db || !fn) return HPO_EINVAL;
    /* Rows are copied out under the lock and fn is called after it is
     * released, so fn may itself call into storage. */
    sto_intermediate *rows = NULL;
    size_t n = 0, cap = 0;
    int src;
    sto_db_lock(db);
    sto_stmt *s = sto_db_stmt_since(db, STO_Q_INTERMEDIATES_STUDY_FLAGS, STO_Q_INTERMEDIATES_STUDY);
    int rc = sto_db_exists(db, STO_Q_STUDY_EXISTS, study_id);
    if (rc) goto done;
    sto_bind_int64(s, 1, study_id);
    while ((src = sto_step(s)) == STO_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            rows = hpo_xrealloc(rows, cap * sizeof *rows);
        }
        rows[n] = read_intermediate(s, 1);
        rows[n++].number = sto_col_int64(s, 0);
    }
    if (src != STO_DONE) rc = sto_db_error(db, "study intermediates");
done:
    sto_db_done(s);
    sto_db_unlock(db);
    for (size_t i = 0; rc == 0 && i < n; i++) fn(ctx, &rows[i]);
    free(rows);
    return rc;
}

int sto_trial_finish(sto_db *db, int64_t trial_id, sto_trial_state state, double value,
                     double value_std, int value_n, const char *error) {
    return sto_trial_finish_ev(db, trial_id, state, value, value_std, value_n, error, NULL);
}

int sto_trial_finish_ev(sto_db *db, int64_t trial_id, sto_trial_state state, double value,
                        double value_std, int value_n, const char *error, const sto_event_in *ev) {
    sto_outcome o = {.state = state, .value = value, .value_std = value_std, .value_n = value_n,
                     .error = error};
    return sto_trial_finish_outcome(db, trial_id, &o, ev);
}

int sto_trial_finish_outcome(sto_db *db, int64_t trial_id, const sto_outcome *o, const sto_event_in *ev) {
    if (!o) return HPO_EINVAL;
    sto_trial_state state = o->state;
    if (!db || (state != STO_TRIAL_COMPLETE && state != STO_TRIAL_PRUNED &&
                state != STO_TRIAL_FAILED && state != STO_TRIAL_CANCELLED))
        return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = sto_db_node_stmt(db, STO_Q_TRIAL_FINISH_NODE, STO_Q_TRIAL_FINISH, 8, db->node_id); /* as reports */
    double now = hpo_now();
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    sto_bind_int64(s, 1, trial_id);
    sto_bind_int64(s, 2, (int)state);
    sto_bind_real(s, 3, o->value);
    sto_bind_real(s, 4, o->value_std);
    sto_bind_int64(s, 5, o->value_n);
    sto_bind_text(s, 6, o->error);
    sto_bind_real(s, 7, now);
    if (sto_step(s) != STO_DONE) {
        rc = sto_db_error(db, "trial finish");
        goto fail;
    }
    if (sto_sql_changes(db->conn) == 0) {
        rc = sto_db_trial_conflict(db, trial_id);
        goto fail;
    }
    sto_db_done(s);
    rc = sto_db_set_values(db, trial_id, o->values_json, o->metrics_json);
    if (rc) goto fail;
    if (!ev) sto_db_commit_with_next(db); /* the touch is the last statement */
    rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, trial_id, now);
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

int sto_trials_expire(sto_db *db, double now, sto_trial **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_trial *list = NULL;
    size_t n = 0;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_EXPIRE];
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    sto_bind_real(s, 1, now);
    rc = collect_trials(db, s, "trials expire", &list, &n);
    if (rc) goto fail;
    sto_db_done(s);
    for (size_t i = 0; i < n; i++)
        if ((rc = sto_db_touch_trial(db, list[i].study_id, list[i].id, now))) goto fail;
    rc = sto_db_commit(db);
    if (rc) goto fail;
    sto_db_unlock(db);
    if (n) HPO_INFO("storage: %zu trial(s) failed: lease expired", n);
    *out = list;
    *n_out = n;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    sto_trial_list_free(list, n);
    return rc;
}
