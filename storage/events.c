/* events.c - a study's progress stream: append, read after an id, and the
 * event written inside another call's transaction (sto_db_event_in_tx, see
 * storage.h). Ids come from AUTOINCREMENT (an identity on PostgreSQL), so
 * they only ever grow, even across deletes: a client resuming with
 * after_id never sees an id twice. On PostgreSQL a study's events also
 * commit in id order (the insert locks the study's row first, db.c), so
 * such a client never skips one that committed late either. */
#include "db_internal.h"

#include <stdlib.h>
#include <string.h>

static void clear_event(void *p) {
    sto_event *e = p;
    free(e->type);
    free(e->data);
}

void sto_event_list_free(sto_event *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) clear_event(&list[i]);
    free(list);
}

int sto_event_append(sto_db *db, int64_t study_id, int64_t trial_id, const char *type,
                     const char *data, int64_t *id_out) {
    if (!db || !type) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_EVENT_INSERT];
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    sto_bind_int64(s, 1, study_id);
    sto_bind_id(s, 2, trial_id);
    sto_bind_text(s, 3, type);
    sto_bind_text(s, 4, data ? data : "{}");
    sto_bind_real(s, 5, hpo_now());
    int64_t id = 0;
    if ((rc = sto_db_insert(db, s, "event append", &id, NULL))) goto fail;
    rc = sto_db_commit(db);
    if (rc) goto fail;
    sto_db_unlock(db);
    if (id_out) *id_out = id;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_db_event_in_tx(sto_db *db, int q, int64_t id, const sto_event_in *ev) {
    if (!ev) return 0;
    if (!ev->type) return HPO_EINVAL;
    sto_stmt *s = db->q[q];
    sto_bind_int64(s, 1, id);
    sto_bind_text(s, 2, ev->type);
    sto_bind_text(s, 3, ev->data ? ev->data : "{}");
    sto_bind_real(s, 4, hpo_now());
    /* one row per event stored (RETURNING), none when the row it is about is gone */
    int src = sto_step(s);
    int rc = src == STO_ROW ? 0 : src == STO_DONE ? HPO_ENOTFOUND : sto_db_error(db, "event");
    sto_db_done(s);
    return rc;
}

static void read_event(sto_stmt *s, void *out) {
    sto_event *e = out;
    e->id = sto_col_int64(s, 0);
    e->study_id = sto_col_int64(s, 1);
    e->trial_id = sto_col_int64(s, 2); /* NULL reads as 0 */
    e->type = sto_col_text(s, 3);
    e->data = sto_col_text(s, 4);
    e->created = sto_col_double(s, 5);
}

int sto_event_list(sto_db *db, int64_t study_id, int64_t after_id, int64_t limit,
                   sto_event **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_EVENT_LIST];
    int rc = sto_db_exists(db, STO_Q_STUDY_EXISTS, study_id);
    if (rc == 0) {
        sto_bind_int64(s, 1, study_id);
        sto_bind_int64(s, 2, after_id);
        sto_bind_int64(s, 3, limit > 0 ? limit : INT64_MAX);
        rc = sto_db_rows(db, s, sizeof **out, read_event, clear_event, "event list", (void **)out, n_out);
    }
    sto_db_unlock(db);
    return rc;
}

int sto_event_last_id(sto_db *db, int64_t study_id, int64_t *id_out) {
    if (!db || !id_out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_EVENT_LAST];
    sto_bind_int64(s, 1, study_id);
    int rc = 0;
    if (sto_step(s) == STO_ROW)
        *id_out = sto_col_int64(s, 0);
    else
        rc = sto_db_error(db, "event last id");
    sto_db_done(s);
    sto_db_unlock(db);
    return rc;
}
