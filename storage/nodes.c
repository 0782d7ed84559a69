/* nodes.c - the hpod nodes sharing a database (schema v9): registration,
 * heartbeats, the end of a node (stopped, or found dead) and the reclaim
 * of the jobs a dead node left running (see storage.h: nodes).
 *
 * Exactly once, whatever the number of nodes looking at the same moment:
 * a node is ended by the UPDATE whose test (ended = 0) still holds under
 * its row lock, and a trial is reclaimed by the UPDATE whose test (still
 * running on that node) still holds; the losers change no row. */
#include "db_internal.h"

#include <stdlib.h>
#include <string.h>

void sto_node_clear(sto_node *n) {
    if (!n) return;
    free(n->ident);
    free(n->name);
    free(n->end_reason);
    memset(n, 0, sizeof *n);
}

static void clear_node(void *n) { sto_node_clear(n); }

void sto_node_list_free(sto_node *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) sto_node_clear(&list[i]);
    free(list);
}

/* A row of NODE_COLS (and, for the list, the database's now). */
static void read_node(sto_stmt *s, void *out) {
    sto_node *n = out;
    memset(n, 0, sizeof *n);
    n->id = sto_col_int64(s, 0);
    n->ident = sto_col_text(s, 1);
    n->name = sto_col_text(s, 2);
    n->started = sto_col_double(s, 3);
    n->heartbeat = sto_col_double(s, 4);
    n->ended = sto_col_double(s, 5);
    n->end_reason = sto_col_text(s, 6);
}

static void read_listed_node(sto_stmt *s, void *out) {
    read_node(s, out);
    ((sto_node *)out)->now = sto_col_double(s, 7);
}

int sto_node_register(sto_db *db, const char *ident, const char *name, int64_t *id_out) {
    if (!db || !ident || !name) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_NODE_INSERT];
    int64_t id = 0;
    int rc = sto_db_begin(db);
    if (rc == 0) {
        sto_bind_text(s, 1, ident);
        sto_bind_text(s, 2, name);
        sto_bind_real(s, 3, hpo_now()); /* SQLite's clock; PostgreSQL reads its own */
        rc = sto_db_insert(db, s, "node register", &id, NULL);
    }
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    if (rc == 0) db->node_id = id;
    sto_db_unlock(db);
    if (rc == 0 && id_out) *id_out = id;
    return rc;
}

int64_t sto_node_current(sto_db *db) {
    sto_db_lock(db);
    int64_t id = db->node_id;
    sto_db_unlock(db);
    return id;
}

/* One UPDATE of a node in its own transaction; HPO_ECONFLICT when it
 * changed no row and the node exists, HPO_ENOTFOUND when it does not. */
static int node_update(sto_db *db, sto_stmt *s, int64_t id, const char *what) {
    int rc = sto_db_begin(db);
    if (rc == 0 && sto_step(s) != STO_DONE) rc = sto_db_error(db, what);
    int64_t changed = rc == 0 ? sto_sql_changes(db->conn) : 0;
    sto_db_done(s);
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    if (rc == 0 && changed == 0) {
        rc = sto_db_exists(db, STO_Q_NODE_EXISTS, id);
        if (rc == 0) rc = HPO_ECONFLICT;
    }
    return rc;
}

int sto_node_rename(sto_db *db, int64_t id, const char *name) {
    if (!db || !name) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_NODE_RENAME];
    sto_bind_int64(s, 1, id);
    sto_bind_text(s, 2, name);
    int rc = node_update(db, s, id, "node rename");
    sto_db_unlock(db);
    return rc == HPO_ECONFLICT ? 0 : rc; /* the same name again */
}

int sto_node_beat(sto_db *db, int64_t id) {
    if (!db) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_NODE_BEAT];
    sto_bind_int64(s, 1, id);
    sto_bind_real(s, 2, hpo_now());
    int rc = node_update(db, s, id, "node beat");
    sto_db_unlock(db);
    return rc;
}

int sto_node_end(sto_db *db, int64_t id, const char *reason) {
    if (!db || !reason) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_NODE_END];
    sto_bind_int64(s, 1, id);
    sto_bind_real(s, 2, hpo_now());
    sto_bind_text(s, 3, reason);
    int rc = node_update(db, s, id, "node end");
    sto_db_unlock(db);
    return rc;
}

int sto_nodes_end_stale(sto_db *db, double timeout, const char *ident, int all_others, sto_node **out,
                        size_t *n_out) {
    if (!db || !(timeout >= 0)) return HPO_EINVAL;
    sto_node *list = NULL;
    size_t n = 0;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_NODES_END_STALE];
    int rc = sto_db_begin(db);
    if (rc == 0) {
        sto_bind_real(s, 1, hpo_now());
        sto_bind_int64(s, 2, db->node_id);
        sto_bind_real(s, 3, timeout);
        sto_bind_text(s, 4, ident ? ident : "");
        sto_bind_int64(s, 5, all_others != 0);
        rc = sto_db_rows(db, s, sizeof *list, read_node, clear_node, "nodes end", (void **)&list, &n);
    }
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    if (rc) {
        sto_node_list_free(list, n);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        HPO_INFO("storage: node %lld (%s) ended: %s", (long long)list[i].id, list[i].name, list[i].end_reason);
    if (out) {
        *out = list;
        *n_out = n;
    } else {
        sto_node_list_free(list, n);
        if (n_out) *n_out = n;
    }
    return 0;
}

int sto_node_list(sto_db *db, int64_t limit, sto_node **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_NODE_LIST];
    sto_bind_real(s, 1, hpo_now());
    sto_bind_int64(s, 2, limit > 0 ? limit : INT64_MAX);
    int rc = sto_db_rows(db, s, sizeof **out, read_listed_node, clear_node, "node list", (void **)out, n_out);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_owner(sto_db *db, int64_t trial_id, sto_trial_state *state, int64_t *node_id) {
    if (!db || !state || !node_id) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIAL_OWNER];
    sto_bind_int64(s, 1, trial_id);
    int src = sto_step(s), rc = src == STO_ROW ? 0 : src == STO_DONE ? HPO_ENOTFOUND : sto_db_error(db, "trial owner");
    if (rc == 0) {
        *state = (sto_trial_state)sto_col_int(s, 0);
        *node_id = sto_col_int64(s, 1);
    }
    sto_db_done(s);
    sto_db_unlock(db);
    return rc;
}

static void clear_trial(void *t) { sto_trial_clear(t); }

int sto_trials_orphaned(sto_db *db, int unowned, sto_trial **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_TRIALS_ORPHANED];
    sto_bind_int64(s, 1, unowned != 0);
    int rc = sto_db_rows(db, s, sizeof **out, sto_db_read_trial, clear_trial, "trials orphaned", (void **)out, n_out);
    sto_db_unlock(db);
    return rc;
}

int sto_trial_reclaim_ev(sto_db *db, int64_t trial_id, int64_t node_id, const char *fail_error,
                         const sto_event_in *ev) {
    if (!db) return HPO_EINVAL;
    sto_db_lock(db);
    double now = hpo_now();
    sto_stmt *s = db->q[fail_error ? STO_Q_TRIAL_RECLAIM_FAIL : STO_Q_TRIAL_RECLAIM];
    int rc = sto_db_begin(db);
    if (rc == 0) {
        sto_bind_int64(s, 1, trial_id);
        sto_bind_int64(s, 2, node_id > 0 ? node_id : 0);
        if (fail_error) {
            sto_bind_text(s, 3, fail_error);
            sto_bind_real(s, 4, now);
        }
        if (sto_step(s) != STO_DONE) rc = sto_db_error(db, "trial reclaim");
    }
    sto_db_done(s);
    if (rc == 0 && sto_sql_changes(db->conn) == 0) rc = sto_db_trial_conflict(db, trial_id);
    if (rc == 0) rc = sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, trial_id, now);
    if (rc == 0) rc = sto_db_event_in_tx(db, STO_Q_EVENT_OF_TRIAL, trial_id, ev);
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

int sto_models_reclaim(sto_db *db, int unowned, int64_t *n_out) {
    if (!db) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_MODELS_RECLAIM];
    int rc = sto_db_begin(db);
    if (rc == 0) {
        sto_bind_int64(s, 1, unowned != 0);
        if (sto_step(s) != STO_DONE) rc = sto_db_error(db, "models reclaim");
    }
    int64_t n = rc == 0 ? sto_sql_changes(db->conn) : 0;
    sto_db_done(s);
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    if (rc == 0 && n_out) *n_out = n;
    return rc;
}
