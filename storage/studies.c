/* studies.c - studies: create (and get-or-create by name), read, list,
 * state changes, user attributes and notes, and cascading delete (see
 * storage.h). */
#include "db_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const study_state_names[STO_STUDY_N_STATES] = {
    [STO_STUDY_RUNNING] = "running",
    [STO_STUDY_PAUSED] = "paused",
    [STO_STUDY_COMPLETE] = "complete",
    [STO_STUDY_CANCELLED] = "cancelled",
};

const char *sto_study_state_name(sto_study_state s) {
    return (unsigned)s < STO_STUDY_N_STATES ? study_state_names[s] : "unknown";
}

static void read_study(sto_stmt *s, void *out) {
    sto_study *st = out;
    memset(st, 0, sizeof *st);
    st->id = sto_col_int64(s, 0);
    st->name = sto_col_text(s, 1);
    st->spec = sto_col_text(s, 2);
    st->state = (sto_study_state)sto_col_int(s, 3);
    st->created = sto_col_double(s, 4);
    st->updated = sto_col_double(s, 5);
    st->user_attrs = sto_col_text(s, 6);
    st->note = sto_col_text(s, 7);
}

void sto_study_clear(sto_study *s) {
    if (!s) return;
    free(s->name);
    free(s->spec);
    free(s->user_attrs);
    free(s->note);
    memset(s, 0, sizeof *s);
}

static void clear_study(void *s) { sto_study_clear(s); }

void sto_study_list_free(sto_study *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) sto_study_clear(&list[i]);
    free(list);
}

int sto_study_create(sto_db *db, const char *name, const char *spec, int64_t *id_out) {
    return sto_study_create_ev(db, name, spec, NULL, id_out);
}

int sto_study_create_ev(sto_db *db, const char *name, const char *spec, const sto_event_in *ev,
                        int64_t *id_out) {
    sto_study_new in = {.name = name, .spec = spec};
    return sto_study_create_with(db, &in, ev, id_out, NULL);
}

/* In the caller's transaction: the oldest study named name (0 if none),
 * looked up under the name's lock (PostgreSQL: nodes creating one name
 * take turns, so the second finds the first's study). */
static int find_by_name(sto_db *db, const char *name, int64_t *id_out) {
    sto_stmt *lock = db->q[STO_Q_STUDY_NAME_LOCK]; /* held to the commit */
    sto_bind_text(lock, 1, name);
    int lrc = sto_step(lock);
    int rc = lrc == STO_ROW || lrc == STO_DONE ? 0 : sto_db_error(db, "study name lock");
    sto_db_done(lock);
    if (rc) return rc;
    sto_stmt *s = db->q[STO_Q_STUDY_BY_NAME];
    sto_bind_text(s, 1, name);
    int src = sto_step(s);
    *id_out = src == STO_ROW ? sto_col_int64(s, 0) : 0;
    if (src != STO_ROW && src != STO_DONE) rc = sto_db_error(db, "study by name");
    sto_db_done(s);
    return rc;
}

/* In the caller's transaction: binds and steps STO_Q_STUDY_ANNOTATE or
 * STO_Q_TRIAL_ANNOTATE (?4 now for studies); HPO_ENOTFOUND if no row. */
int sto_db_annotate_in_tx(sto_db *db, int q, int64_t id, const char *user_attrs, const char *note, double now) {
    sto_stmt *s = db->q[q];
    sto_bind_int64(s, 1, id);
    sto_bind_text(s, 2, user_attrs);
    sto_bind_text(s, 3, note);
    if (q == STO_Q_STUDY_ANNOTATE) sto_bind_real(s, 4, now);
    int rc = sto_step(s) == STO_DONE ? 0 : sto_db_error(db, "annotate");
    sto_db_done(s);
    if (rc == 0 && sto_sql_changes(db->conn) == 0) rc = HPO_ENOTFOUND;
    return rc;
}

int sto_study_create_with(sto_db *db, const sto_study_new *in, const sto_event_in *ev, int64_t *id_out,
                          int *created_out) {
    if (!db || !in || !in->name || !in->spec || (ev && !ev->type) ||
        (in->state != STO_STUDY_RUNNING && in->state != STO_STUDY_PAUSED))
        return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_STUDY_INSERT];
    double now = hpo_now();
    int64_t id = 0;
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    if (in->load_if_exists) {
        rc = find_by_name(db, in->name, &id);
        if (rc) goto fail;
        if (id > 0) { /* it exists: nothing to write */
            sto_db_rollback(db);
            sto_db_unlock(db);
            if (id_out) *id_out = id;
            if (created_out) *created_out = 0;
            return 0;
        }
    }
    if ((rc = sto_db_hold_dataset(db, in->dataset_id))) goto fail;
    sto_bind_text(s, 1, in->name);
    sto_bind_text(s, 2, in->spec);
    sto_bind_real(s, 3, now);
    sto_bind_int64(s, 4, in->state);
    if ((rc = sto_db_insert(db, s, "study create", &id, NULL))) goto fail;
    if (in->on_insert && (rc = in->on_insert(in->on_insert_arg, id))) goto fail;
    if ((rc = sto_db_study_changed(db, id))) goto fail;
    if (in->user_attrs || in->note) {
        rc = sto_db_annotate_in_tx(db, STO_Q_STUDY_ANNOTATE, id, in->user_attrs, in->note, now);
        if (rc) goto fail;
    }
    if (ev) {
        char data[48];
        snprintf(data, sizeof data, "{\"id\":%lld}", (long long)id);
        sto_event_in e = {ev->type, ev->data ? ev->data : data};
        rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_STUDY, id, &e);
        if (rc) goto fail;
    }
    rc = sto_db_commit(db);
    if (rc) goto fail;
    sto_db_unlock(db);
    if (id_out) *id_out = id;
    if (created_out) *created_out = 1;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_db_merge_attrs_in_tx(sto_db *db, int q_read, int64_t id, sto_attrs_fn merge, void *arg, char **out) {
    *out = NULL;
    sto_stmt *s = db->q[q_read];
    sto_bind_int64(s, 1, id);
    int src = sto_step(s);
    char *stored = src == STO_ROW ? sto_col_text(s, 0) : NULL;
    int rc = src == STO_ROW ? 0 : src == STO_DONE ? HPO_ENOTFOUND : sto_db_error(db, "user_attrs");
    sto_db_done(s);
    if (rc == 0 && merge) rc = merge(arg, stored ? stored : "{}", out);
    free(stored);
    return rc;
}

int sto_db_annotate(sto_db *db, int q, int64_t id, sto_attrs_fn merge, void *arg, const char *note,
                    const sto_event_in *ev) {
    if (!db || (ev && !ev->type)) return HPO_EINVAL;
    int study = q == STO_Q_STUDY_ANNOTATE;
    char *attrs = NULL;
    double now = hpo_now();
    sto_db_lock(db);
    int rc = sto_db_begin(db);
    /* the read locks the row on PostgreSQL (another node's merge waits);
     * a trial's row before its study's, as a report or a tell takes them */
    if (rc == 0) rc = sto_db_merge_attrs_in_tx(db, study ? STO_Q_STUDY_ATTRS : STO_Q_TRIAL_ATTRS, id, merge, arg, &attrs);
    if (rc == 0) rc = sto_db_annotate_in_tx(db, q, id, attrs, note, now);
    if (rc == 0 && !study) rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, id, now);
    if (rc == 0) rc = sto_db_event_in_tx(db, study ? STO_Q_EVENT_OF_STUDY : STO_Q_EVENT_OF_TRIAL, id, ev);
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    free(attrs);
    return rc;
}

int sto_study_annotate(sto_db *db, int64_t id, sto_attrs_fn merge, void *arg, const char *note,
                       const sto_event_in *ev) {
    return sto_db_annotate(db, STO_Q_STUDY_ANNOTATE, id, merge, arg, note, ev);
}

int sto_study_get(sto_db *db, int64_t id, sto_study *out) {
    if (!db || !out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_STUDY_GET];
    sto_bind_int64(s, 1, id);
    int rc = sto_db_row(db, s, read_study, out, "study get");
    sto_db_unlock(db);
    return rc;
}

int sto_study_list(sto_db *db, sto_study **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    int rc = sto_db_rows(db, db->q[STO_Q_STUDY_LIST], sizeof **out, read_study, clear_study, "study list",
                         (void **)out, n_out);
    sto_db_unlock(db);
    return rc;
}

int sto_study_set_state(sto_db *db, int64_t id, sto_study_state state) {
    return sto_study_set_state_ev(db, id, state, NULL);
}

int sto_study_set_state_ev(sto_db *db, int64_t id, sto_study_state state, const sto_event_in *ev) {
    return sto_study_transition_ev(db, id, ~0u, state, ev);
}

int sto_study_transition_ev(sto_db *db, int64_t id, unsigned from_mask, sto_study_state state,
                            const sto_event_in *ev) {
    if (!db || (unsigned)state >= STO_STUDY_N_STATES) return HPO_EINVAL;
    sto_db_lock(db);
    /* any state: the plain statement (it prepares on every schema) */
    int any = (from_mask & ((1u << STO_STUDY_N_STATES) - 1)) == (1u << STO_STUDY_N_STATES) - 1;
    sto_stmt *s = db->q[any ? STO_Q_STUDY_SET_STATE : STO_Q_STUDY_TRANSITION];
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    sto_bind_int64(s, 1, id);
    sto_bind_int64(s, 2, (int)state);
    sto_bind_real(s, 3, hpo_now());
    if (!any) sto_bind_int64(s, 4, from_mask);
    if (sto_step(s) != STO_DONE) {
        rc = sto_db_error(db, "study set state");
        goto fail;
    }
    sto_db_done(s);
    if (sto_sql_changes(db->conn) == 0) {
        rc = any ? HPO_ENOTFOUND : sto_db_exists(db, STO_Q_STUDY_EXISTS, id);
        if (rc == 0) rc = HPO_ECONFLICT;
        goto fail;
    }
    if ((rc = sto_db_study_changed(db, id))) goto fail;
    rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_STUDY, id, ev);
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

/* The counter (lock held). */
static int changes_seq(sto_db *db, int64_t *seq) {
    sto_stmt *c = db->q[STO_Q_STUDY_CHANGES_SEQ];
    int src = sto_step(c);
    int rc = src == STO_ROW ? 0 : sto_db_error(db, "study changes");
    if (rc == 0) *seq = sto_col_int64(c, 0);
    sto_db_done(c);
    return rc;
}

int sto_study_changes_seq(sto_db *db, int64_t *seq) {
    if (!db || !seq) return HPO_EINVAL;
    sto_db_lock(db);
    int rc = changes_seq(db, seq);
    sto_db_unlock(db);
    return rc;
}

int sto_studies_changed(sto_db *db, int64_t *since, sto_study **out, size_t *n_out) {
    if (!db || !since || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    /* the counter first: every change up to it has committed (its row is
     * held to the commit), so the list read next holds them all */
    int64_t seq = 0;
    int rc = changes_seq(db, &seq);
    if (rc == 0) {
        sto_stmt *s = db->q[STO_Q_STUDIES_CHANGED];
        sto_bind_int64(s, 1, *since);
        rc = sto_db_rows(db, s, sizeof **out, read_study, clear_study, "studies changed", (void **)out, n_out);
    }
    sto_db_unlock(db);
    if (rc == 0 && seq > *since) *since = seq;
    return rc;
}

int sto_study_delete(sto_db *db, int64_t id) {
    if (!db) return HPO_EINVAL;
    /* Trials, their intermediate values, events and models go by ON DELETE CASCADE. */
    return sto_db_exec_id(db, STO_Q_STUDY_DELETE, id, "study delete");
}
