/* models.c - models made from a study's trials (schema v4): refits, models
 * from a trial's checkpoint, ensembles (see storage.h). Storage records the
 * job's state, its spec and result JSON and where the weights file is; the
 * files are the api's business. */
#include "db_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"refit", "trial", "ensemble"};
static const char *const state_names[] = {"queued", "running", "complete", "failed"};

const char *sto_model_kind_name(sto_model_kind k) {
    return (unsigned)k < HPO_ARRAY_LEN(kind_names) ? kind_names[k] : "unknown";
}

const char *sto_model_state_name(sto_model_state s) {
    return (unsigned)s < HPO_ARRAY_LEN(state_names) ? state_names[s] : "unknown";
}

static void read_model(sto_stmt *s, void *out) {
    sto_model *m = out;
    memset(m, 0, sizeof *m);
    m->id = sto_col_int64(s, 0);
    m->study_id = sto_col_int64(s, 1);
    m->trial_id = sto_col_int64(s, 2); /* NULL reads as 0 */
    m->kind = (sto_model_kind)sto_col_int(s, 3);
    m->state = (sto_model_state)sto_col_int(s, 4);
    m->spec = sto_col_text(s, 5);
    m->result = sto_col_text(s, 6);
    m->path = sto_col_text(s, 7);
    m->error = sto_col_text(s, 8);
    m->created = sto_col_double(s, 9);
    m->started = sto_col_double(s, 10);
    m->finished = sto_col_double(s, 11);
    m->node_id = sto_col_int64(s, 12); /* NULL reads as 0 */
}

void sto_model_clear(sto_model *m) {
    if (!m) return;
    free(m->spec);
    free(m->result);
    free(m->path);
    free(m->error);
    memset(m, 0, sizeof *m);
}

static void clear_model(void *m) { sto_model_clear(m); }

void sto_model_list_free(sto_model *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) sto_model_clear(&list[i]);
    free(list);
}

int sto_model_create(sto_db *db, int64_t study_id, int64_t trial_id, sto_model_kind kind, const char *spec,
                     int64_t dataset_id, int64_t *id_out) {
    if (!db || (unsigned)kind > STO_MODEL_ENSEMBLE) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODEL_INSERT];
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    if ((rc = sto_db_hold_dataset(db, dataset_id))) goto fail;
    sto_bind_int64(s, 1, study_id);
    sto_bind_id(s, 2, trial_id);
    sto_bind_int64(s, 3, (int)kind);
    sto_bind_text(s, 4, spec ? spec : "{}");
    sto_bind_real(s, 5, hpo_now());
    int64_t id = 0;
    if ((rc = sto_db_insert(db, s, "model create", &id, NULL))) goto fail;
    if ((rc = sto_db_commit(db))) goto fail;
    sto_db_unlock(db);
    if (id_out) *id_out = id;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_model_get(sto_db *db, int64_t id, sto_model *out) {
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODEL_GET];
    sto_bind_int64(s, 1, id);
    int rc = sto_db_row(db, s, read_model, out, "model get");
    sto_db_unlock(db);
    return rc;
}

int sto_model_next_queued(sto_db *db, sto_model *out) {
    sto_db_lock(db);
    int rc = sto_db_row(db, db->q[STO_Q_MODEL_NEXT_QUEUED], read_model, out, "model next");
    sto_db_unlock(db);
    return rc;
}

int sto_model_claim_ev(sto_db *db, const char *ev_type, sto_event_data_fn data, void *arg, sto_model *out) {
    if (!db || !out) return HPO_EINVAL;
    sto_model m = {0};
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODEL_CLAIM];
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    if ((rc = sto_db_node_live(db))) goto fail; /* an ended node starts nothing */
    sto_bind_real(s, 1, hpo_now());
    sto_bind_id(s, 2, db->node_id);
    if ((rc = sto_db_row(db, s, read_model, &m, "model claim"))) goto fail;
    if (ev_type) {
        char *text = data ? data(arg, m.id) : NULL;
        sto_event_in ev = {ev_type, text};
        rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_MODEL, m.id, &ev);
        free(text);
        if (rc) goto fail;
    }
    if ((rc = sto_db_commit(db))) goto fail;
    sto_db_unlock(db);
    *out = m;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    sto_model_clear(&m);
    return rc;
}

int sto_model_list(sto_db *db, int64_t study_id, int kind, sto_model **out, size_t *n_out) {
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODEL_LIST];
    sto_bind_int64(s, 1, study_id);
    sto_bind_int64(s, 2, kind);
    int rc = sto_db_rows(db, s, sizeof **out, read_model, clear_model, "model list", (void **)out, n_out);
    sto_db_unlock(db);
    return rc;
}

int sto_models_orphaned(sto_db *db, int unowned, sto_model **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODELS_ORPHANED];
    sto_bind_int64(s, 1, unowned != 0);
    int rc = sto_db_rows(db, s, sizeof **out, read_model, clear_model, "models orphaned", (void **)out, n_out);
    sto_db_unlock(db);
    return rc;
}

/* Runs an UPDATE of one model that is allowed only in some states: HPO_ECONFLICT
 * if it changed nothing and the model exists, HPO_ENOTFOUND if it does not.
 * The statement is bound; caller holds the lock. */
static int update_one(sto_db *db, sto_stmt *s, int64_t id, const sto_event_in *ev, const char *what) {
    int rc = sto_db_begin(db);
    if (rc == 0 && sto_step(s) != STO_DONE) rc = sto_db_error(db, what);
    int changed = rc == 0 ? sto_sql_changes(db->conn) : 0;
    sto_db_done(s);
    if (rc == 0 && changed) rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_MODEL, id, ev);
    if (rc == 0 && changed == 0) {
        sto_stmt *g = db->q[STO_Q_MODEL_GET];
        sto_bind_int64(g, 1, id);
        int src = sto_step(g);
        rc = src == STO_ROW ? HPO_ECONFLICT : src == STO_DONE ? HPO_ENOTFOUND : sto_db_error(db, what);
        sto_db_done(g);
    }
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    return rc;
}

int sto_model_start(sto_db *db, int64_t id) { return sto_model_start_ev(db, id, NULL); }

int sto_model_start_ev(sto_db *db, int64_t id, const sto_event_in *ev) {
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODEL_START];
    sto_bind_int64(s, 1, id);
    sto_bind_real(s, 2, hpo_now());
    sto_bind_id(s, 3, db->node_id);
    int rc = update_one(db, s, id, ev, "model start");
    sto_db_unlock(db);
    return rc;
}

int sto_model_requeue(sto_db *db, int64_t id) {
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODEL_REQUEUE];
    sto_bind_int64(s, 1, id);
    sto_bind_int64(s, 2, db->node_id); /* running on another node: not ours */
    int rc = update_one(db, s, id, NULL, "model requeue");
    sto_db_unlock(db);
    return rc;
}

int sto_model_finish(sto_db *db, int64_t id, sto_model_state state, const char *result, const char *path,
                     const char *error) {
    return sto_model_finish_ev(db, id, state, result, path, error, NULL);
}

int sto_model_finish_ev(sto_db *db, int64_t id, sto_model_state state, const char *result, const char *path,
                        const char *error, const sto_event_in *ev) {
    if (state != STO_MODEL_COMPLETE && state != STO_MODEL_FAILED) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODEL_FINISH];
    sto_bind_int64(s, 1, id);
    sto_bind_int64(s, 2, (int)state);
    sto_bind_text(s, 3, result);
    sto_bind_text(s, 4, path);
    sto_bind_text(s, 5, error);
    sto_bind_real(s, 6, hpo_now());
    sto_bind_int64(s, 7, db->node_id); /* as for requeue */
    int rc = update_one(db, s, id, ev, "model finish");
    sto_db_unlock(db);
    return rc;
}

int sto_models_requeue_running(sto_db *db, int64_t *n_out) {
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODELS_REQUEUE];
    int rc = sto_db_begin(db);
    if (rc == 0 && sto_step(s) != STO_DONE) rc = sto_db_error(db, "models requeue");
    int64_t n = rc == 0 ? sto_sql_changes(db->conn) : 0;
    sto_db_done(s);
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    if (rc == 0 && n_out) *n_out = n;
    return rc;
}
