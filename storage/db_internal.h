/*
 * db_internal.h - what the files of storage/ share and nothing outside uses
 * (tests excepted): the connection struct, the prepared-statement cache, the
 * transaction helpers and the NaN<->NULL column conventions.
 *
 * Design notes
 * - db.c owns the connection (sql.h: a SQLite file or a PostgreSQL URL,
 *   one code path above it): it opens it, runs the migrations (SQLite's
 *   here, PostgreSQL's in schema_pg.c) and prepares every statement of the
 *   layer once, into db->q[STO_Q_*]. The SQL of every statement lives in
 *   one table in db.c (with a PostgreSQL variant only where the dialects
 *   differ) so the schema and all queries against it can be read (and
 *   reviewed for index use) in one place; studies.c, trials.c and events.c
 *   only bind, step and read columns.
 * - Locking discipline: a public function takes db->mu with sto_db_lock()
 *   before touching any statement and releases it before returning. A
 *   mutating function runs sto_db_begin() ... sto_db_commit() under the
 *   lock; on any error it calls sto_db_rollback(), which is a no-op
 *   outside a transaction. Because one connection is shared, a statement
 *   must be reset (sto_db_done) before the lock is released, or the next
 *   caller would find it mid-step.
 * - Concurrency between connections (two hpod on one PostgreSQL): SQLite's
 *   BEGIN IMMEDIATE serialises writers; on PostgreSQL (READ COMMITTED) a
 *   statement's WHERE clause on the row's state decides a race (the second
 *   UPDATE finds the state changed and changes no row), trial numbers are
 *   drawn under the study's row lock (sto_db_lock_touch_study), and a claim of a
 *   queued job skips rows another transaction holds (FOR UPDATE SKIP LOCKED).
 *   A trial started on a slot carries its node (db->node_id, schema v9):
 *   the writes of its runner (report, finish, requeue, epochs) are kept to
 *   that node in their WHERE clause (NODE_OWNS below), so once a dead
 *   node's trial went to another node, nothing the first one still tries
 *   lands. Limits that hold across nodes (max_trials, parallel_trials) are
 *   counted under the study's row lock in the transaction that starts the
 *   trial. A study's state changes take the one row of study_changes
 *   (UPDATE ... seq + 1), so they commit in the order of that counter and
 *   a node that polls "changed > what I saw" misses none.
 * - Order across connections (PostgreSQL): an id drawn from a sequence
 *   commits whenever its transaction does, so ids can become visible out
 *   of order. What a reader follows with a cursor is therefore drawn
 *   under the study's row lock, held to the commit, so a study's values
 *   commit in their order: an event's id (its insert locks the study's
 *   row first, FOR NO KEY UPDATE, in the same statement) and a trial's
 *   change number seq (the study's seq + 1, drawn by the touch that
 *   updates the study's row: the touch by trial, or the lock of a new
 *   trial's transaction, whose inserts stamp what it drew;
 *   sto_trials_changed). The event insert also
 *   sends NOTIFY hpo_events (payload: the study id), delivered to
 *   listeners at the commit (sto_watch).
 * - Columns: NaN is stored as NULL (SQLite turns a NaN REAL into NULL anyway,
 *   we make it explicit) and NULL is read back as NaN; text columns are
 *   copied with hpo_strdup (NULL stays NULL).
 * - sto_db_open_at() opens a SQLite database migrated only up to a given version:
 *   tests use it to build an "old" database and check that sto_open
 *   migrates it. Statements that do not prepare against that old schema
 *   (they name later columns or tables: every read of a trial row since
 *   v3, of a study row since v6) are left NULL, so such a handle supports
 *   only the calls the tests use to write old data: study/trial create
 *   (without user_attrs, note or load_if_exists), report, finish, events.
 */
#ifndef HPO_STORAGE_DB_INTERNAL_H
#define HPO_STORAGE_DB_INTERNAL_H

#include <math.h>
#include <pthread.h>

#include "sql.h"
#include "storage.h"

/* The statements of the layer; the SQL text is in db.c (stmt_sql[]). */
enum {
    STO_Q_BEGIN = 0,
    STO_Q_COMMIT,
    STO_Q_ROLLBACK,

    STO_Q_STUDY_INSERT,
    STO_Q_STUDY_GET,
    STO_Q_STUDY_EXISTS,
    STO_Q_STUDY_LIST,
    STO_Q_STUDY_DELETE,
    STO_Q_STUDY_SET_STATE,
    STO_Q_STUDY_TOUCH,
    STO_Q_STUDY_TOUCH_BY_TRIAL,
    STO_Q_STUDY_BY_NAME,  /* schema v6 */
    STO_Q_STUDY_NAME_LOCK,
    STO_Q_STUDY_ANNOTATE, /* schema v6 */
    STO_Q_STUDY_ATTRS,    /* schema v6 */
    STO_Q_STUDY_LOCK,
    STO_Q_STUDY_LOCK_TOUCH,

    STO_Q_TRIAL_INSERT,
    STO_Q_TRIAL_INSERT_AT,
    STO_Q_TRIALS_CHANGED, /* schema v10 */
    STO_Q_TRIAL_GET,
    STO_Q_TRIAL_STATE,
    /* 8 list variants: + 4 * (state filter) + 2 * (order by value) + (descending) */
    STO_Q_TRIAL_LIST,
    STO_Q_TRIAL_LIST_LAST = STO_Q_TRIAL_LIST + 7,
    STO_Q_TRIAL_OUTCOMES,
    STO_Q_TRIAL_OUTCOMES_STATE,
    STO_Q_TRIAL_COUNTS_STUDY,
    STO_Q_TRIAL_COUNTS_ALL,
    STO_Q_JOBS_QUEUED,
    STO_Q_TRIAL_REPORT,
    STO_Q_INTERMEDIATE_PUT,
    STO_Q_INTERMEDIATE_PUT_FLAGS,
    STO_Q_INTERMEDIATE_PRUNED,
    STO_Q_INTERMEDIATE_FLAGS,
    STO_Q_INTERMEDIATES_TRIAL,
    STO_Q_INTERMEDIATES_TRIAL_FLAGS,
    STO_Q_INTERMEDIATES_STUDY,
    STO_Q_INTERMEDIATES_STUDY_FLAGS,
    STO_Q_TRIAL_FINISH,
    STO_Q_TRIAL_EXPIRE,
    /* trials a client brings (trials_in.c) */
    STO_Q_TRIAL_ENQUEUE,
    STO_Q_TRIAL_PBT_RANKED,
    STO_Q_TRIAL_PBT_REPLACED,
    STO_Q_TRIAL_PBT_BREED,
    STO_Q_TRIAL_HAND_OUT,
    STO_Q_TRIAL_ADD,
    STO_Q_TRIAL_SET_VALUES,
    /* schema v3: queueing, training facts, per-epoch curves, datasets */
    STO_Q_TRIAL_REQUEUE,
    STO_Q_TRIALS_REQUEUE_RUNNING,
    STO_Q_TRIAL_START,
    STO_Q_TRIAL_RESUME,
    STO_Q_TRIAL_SET_TRAINING,
    STO_Q_TRIAL_ANNOTATE, /* schema v6 */
    STO_Q_TRIAL_ATTRS,    /* schema v6 */
    STO_Q_EPOCH_PUT,
    STO_Q_EPOCHS_TRIAL,
    STO_Q_DATASET_INSERT,
    STO_Q_DATASET_GET,
    STO_Q_DATASET_GET_BY_NAME,
    STO_Q_DATASET_LIST,
    STO_Q_DATASET_DELETE,
    STO_Q_DATASET_HOLD,  /* in a study's or model's insert: the dataset it trains on */
    STO_Q_DATASET_CLAIM, /* in a delete: the dataset row, before its users are read */

    STO_Q_MODEL_INSERT,
    STO_Q_MODEL_GET,
    STO_Q_MODEL_LIST,
    STO_Q_MODEL_NEXT_QUEUED,
    STO_Q_MODEL_START,
    STO_Q_MODEL_CLAIM,
    STO_Q_MODEL_FINISH,
    STO_Q_MODELS_REQUEUE,
    STO_Q_MODEL_REQUEUE,

    STO_Q_EVENT_INSERT,
    STO_Q_EVENT_OF_STUDY,
    STO_Q_EVENT_OF_TRIAL,
    STO_Q_EVENT_OF_MODEL,
    STO_Q_EVENT_LIST,
    STO_Q_EVENT_LAST,

    /* schema v9: nodes (nodes.c), the node running a trial or a model job,
     * the studies' change counter */
    STO_Q_NODE_INSERT,
    STO_Q_NODE_RENAME,
    STO_Q_NODE_EXISTS,
    STO_Q_NODE_LIVE,
    STO_Q_NODE_BEAT,
    STO_Q_NODE_END,
    STO_Q_NODES_END_STALE,
    STO_Q_NODE_LIST,
    /* the writes of STO_Q_TRIAL_FINISH, _REPORT, _START and STO_Q_EPOCH_PUT
     * with the node: the plain ones serve the schemas before v9 (tests) */
    STO_Q_TRIAL_FINISH_NODE,
    STO_Q_TRIAL_REPORT_NODE,
    STO_Q_TRIAL_START_NODE,
    STO_Q_EPOCH_PUT_NODE,
    STO_Q_EPOCH_PUT_FIRST_NODE,
    STO_Q_TRIAL_OWNER,
    STO_Q_TRIAL_RUN_COUNTS,
    STO_Q_TRIAL_INSERT_RUN,
    STO_Q_TRIAL_INSERT_RUN_AT,
    STO_Q_TRIALS_ORPHANED,
    STO_Q_TRIAL_RECLAIM,
    STO_Q_TRIAL_RECLAIM_FAIL,
    STO_Q_MODELS_RECLAIM,
    STO_Q_MODELS_ORPHANED,
    STO_Q_STUDY_CHANGES_BUMP,
    STO_Q_STUDY_CHANGED,
    STO_Q_STUDY_CHANGES_SEQ,
    STO_Q_STUDIES_CHANGED,
    STO_Q_STUDY_TRANSITION,

    STO_Q_N
};

/* Column list of a trial row, in the order sto_db_read_trial() reads it. */
#define STO_TRIAL_COLS                                                                 \
    "id, study_id, number, state, params, value, value_std, value_n, last_step, "     \
    "last_value, created, started, finished, lease_expires, error, best_epoch, slot, "  \
    "train_seconds, user_attrs, note, values_json, metrics_json, lineage, pbt_epoch, node_id, seq"
#define STO_TRIAL_N_COLS 26 /* the columns of STO_TRIAL_COLS */
/* The same columns with error, user_attrs and note read as NULL: the
 * rows sto_trial_outcomes lists (a client can make those large). */
#define STO_TRIAL_COLS_LEAN                                                            \
    "id, study_id, number, state, params, value, value_std, value_n, last_step, "     \
    "last_value, created, started, finished, lease_expires, NULL, best_epoch, slot, "   \
    "train_seconds, NULL, NULL, values_json, metrics_json, lineage, pbt_epoch, node_id, seq"

/* Column list of a study row, in the order studies.c reads it. */
#define STO_STUDY_COLS "id, name, spec, state, created, updated, user_attrs, note"

/* Column list of a model row, in the order models.c reads it. */
#define STO_MODEL_COLS \
    "id, study_id, trial_id, kind, state, spec, result, path, error, created, started, finished, node_id"

struct sto_db {
    sto_sql *conn;
    pthread_mutex_t mu; /* recursive: a sto_trial_run's catch_up calls storage under it */
    sto_stmt *q[STO_Q_N];
    char *target;    /* what it was opened with (sto_reopen; sto_watch connects there too) */
    int64_t node_id; /* the node this connection works for (sto_node_register); 0: none. Under mu. */
};

/* PostgreSQL's schema (schema_pg.c): creates or migrates the database at
 * c to version latest, under an advisory lock so that nodes starting
 * together migrate one at a time. */
int sto_pg_migrate(sto_sql *c, int latest);

/* Opens and migrates to target_version (1 .. sto_schema_version(); a
 * PostgreSQL URL only to the latest). */
int sto_db_open_at(const char *path, sto_sync sync, int target_version, sto_db **out);

void sto_db_lock(sto_db *db);
void sto_db_unlock(sto_db *db);
/* BEGIN IMMEDIATE (SQLite) or BEGIN (PostgreSQL, READ COMMITTED) / COMMIT;
 * 0 or HPO_ESTORAGE. */
int sto_db_begin(sto_db *db);
int sto_db_commit(sto_db *db);
/* Rolls back the open transaction, if any. */
void sto_db_rollback(sto_db *db);
/* Logs "storage: <what>: <the database's message>" and returns HPO_ESTORAGE
 * (HPO_ENOSPACE for a full disk). */
int sto_db_error(sto_db *db, const char *what);
/* The last failure was a foreign key (a parent row is missing). */
int sto_db_is_fk_error(sto_db *db);
/* Steps a bound INSERT ... RETURNING id[, number] once and resets it: *id
 * (and *number when not NULL) from its row. A missing parent row (foreign
 * key) is HPO_ENOTFOUND, a unique constraint HPO_ECONFLICT. */
int sto_db_insert(sto_db *db, sto_stmt *s, const char *what, int64_t *id, int64_t *number);
/* Inside the caller's transaction: locks the study's row until the
 * transaction ends (PostgreSQL: FOR UPDATE; SQLite's IMMEDIATE transaction
 * holds the whole database already), so the trial numbers of one study are
 * handed out one transaction at a time by every connection, and each reads
 * the numbers the last one committed. HPO_ENOTFOUND if there is no study. */
int sto_db_lock_study(sto_db *db, int64_t study_id);
/* The same lock taken by the touch of a new trial's transaction: the
 * study's updated time moved to now (never back) and, on PostgreSQL, its
 * next change number drawn (seq + 1, which the transaction's inserts stamp
 * on their trials: LOCKED_SEQ in db.c). One statement where a lock, then
 * a touch after the insert, took two round trips. HPO_ENOTFOUND if there
 * is no study. */
int sto_db_lock_touch_study(sto_db *db, int64_t study_id, double now);
/* The transaction's COMMIT goes with its next statement, its last (sql.h:
 * sto_sql_pg_commit_with_next); sto_db_commit follows as usual. */
void sto_db_commit_with_next(sto_db *db);
/* 0 if a row with that id exists (q is an "exists" statement with ?1 = id),
 * HPO_ENOTFOUND if not, HPO_ESTORAGE on failure. */
int sto_db_exists(sto_db *db, int q, int64_t id);
/* Inside the caller's transaction: holds the uploaded dataset an insert
 * trains on (STO_Q_DATASET_HOLD) to the commit. 0 (also for id 0: none),
 * HPO_ESTALE if it is gone, HPO_ESTORAGE on failure. */
int sto_db_hold_dataset(sto_db *db, int64_t dataset_id);
/* Fills t (a sto_trial) from the current row of a statement selecting
 * STO_TRIAL_COLS; a sto_db_row_fn. */
void sto_db_read_trial(sto_stmt *s, void *t);

/* Inside the caller's transaction (lock held): stores ev (if not NULL)
 * about the study, trial or model `id`, q being STO_Q_EVENT_OF_STUDY,
 * _TRIAL or _MODEL. HPO_ENOTFOUND when that row does not exist, so the
 * caller rolls back and neither the change nor its event is stored. */
int sto_db_event_in_tx(sto_db *db, int q, int64_t id, const sto_event_in *ev);

/* Inside the caller's transaction (lock held): moves the updated time of
 * a study to now (never back), q being STO_Q_STUDY_TOUCH (id: the study)
 * or STO_Q_STUDY_TOUCH_BY_TRIAL (id: one of its trials). Every call that
 * changes a trial does it, so a study's updated follows its trials. On
 * PostgreSQL the touch by trial also stamps the trial with the study's
 * next change number (seq, schema v10; see sto_trials_changed). */
int sto_db_touch_study(sto_db *db, int q, int64_t id, double now);
/* The touch after trial_id (of study_id) changed in a call that names its
 * study: by trial on PostgreSQL (the stamp), by study on SQLite (where
 * nothing reads seq). A new trial is stamped by its insert instead (db.c),
 * and the touch by study that follows moves the study's seq to it. */
int sto_db_touch_trial(sto_db *db, int64_t study_id, int64_t trial_id, double now);

/* Inside the caller's transaction, before it starts a job on this
 * connection's node: HPO_ECONFLICT when the node has ended (another node
 * found it dead: it must register again before it starts anything), else
 * 0, the node's row held (shared) to the commit, so that a node ending it
 * meanwhile waits and then finds the job among its orphans. 0 without a
 * node. */
int sto_db_node_live(sto_db *db);

/* Statement q_node (a write of schema v9 kept to, or recording, a node)
 * with its parameter param bound to node (0: NULL, no node); q_plain, the
 * same write without it, on a schema before v9 (tests' old handles).
 * Caller holds the lock. */
sto_stmt *sto_db_node_stmt(sto_db *db, int q_node, int q_plain, int param, int64_t node);
/* Statement q_new when the schema has what it uses (it was prepared), else
 * q_old, its form for an older schema (tests' old handles). */
sto_stmt *sto_db_stmt_since(sto_db *db, int q_new, int q_old);

/* Inside the caller's transaction, the study's row locked: HPO_EEXHAUSTED
 * when the study has r->max_trials trials, HPO_ECONFLICT when r->parallel
 * of them run (each limit <= 0: none), else 0. */
int sto_db_run_limits(sto_db *db, int64_t study_id, const sto_trial_run *r);

/* Inside the caller's transaction (lock held): a study was created or its
 * state changed: the study change counter moves (its row stays locked to
 * the commit) and the study records it (schema v9; nothing before). */
int sto_db_study_changed(sto_db *db, int64_t id);

/* Inside the caller's transaction (lock held): stores a trial's
 * values_json and metrics_json (schema v7) unless both are NULL. */
int sto_db_set_values(sto_db *db, int64_t trial_id, const char *values_json, const char *metrics_json);

/* Inside the caller's transaction (lock held): sets user_attrs and note
 * (NULL keeps either) of a study (q STO_Q_STUDY_ANNOTATE, which also moves
 * its updated to now) or a trial (STO_Q_TRIAL_ANNOTATE); HPO_ENOTFOUND
 * when the row does not exist. */
int sto_db_annotate_in_tx(sto_db *db, int q, int64_t id, const char *user_attrs, const char *note, double now);
/* Inside the caller's transaction: the new user_attrs of the study or trial
 * `id` (q_read STO_Q_STUDY_ATTRS or STO_Q_TRIAL_ATTRS) from merge, in *out
 * (NULL when merge is NULL); HPO_ENOTFOUND when the row does not exist. */
int sto_db_merge_attrs_in_tx(sto_db *db, int q_read, int64_t id, sto_attrs_fn merge, void *arg, char **out);
/* sto_study_annotate / sto_trial_annotate (q: STO_Q_STUDY_ANNOTATE or
 * STO_Q_TRIAL_ANNOTATE). */
int sto_db_annotate(sto_db *db, int q, int64_t id, sto_attrs_fn merge, void *arg, const char *note,
                    const sto_event_in *ev);

/* Runs statement q with ?1 = id in its own transaction (a delete by id);
 * HPO_ENOTFOUND when it changed no row. Takes the lock itself. */
int sto_db_exec_id(sto_db *db, int q, int64_t id, const char *what);

/* Reads the current row of a statement into *out (one element). */
typedef void (*sto_db_row_fn)(sto_stmt *s, void *out);
/* Steps a bound statement once: the row is read into out with read;
 * HPO_ENOTFOUND when there is none, HPO_ESTORAGE on failure (logged with
 * what). Resets the statement. Caller holds the lock. */
int sto_db_row(sto_db *db, sto_stmt *s, sto_db_row_fn read, void *out, const char *what);
/* Steps a bound statement to its end, reading every row with read into a
 * growing array of elements of elem_size bytes (*out malloc'd, *n_out rows;
 * zero rows give NULL and 0). On failure every element read so far is
 * cleared with clear, the array freed and HPO_ESTORAGE returned. Resets the
 * statement. Caller holds the lock. */
int sto_db_rows(sto_db *db, sto_stmt *s, size_t elem_size, sto_db_row_fn read, void (*clear)(void *),
                const char *what, void **out, size_t *n_out);
/* After an UPDATE ... WHERE id = ? AND state ... changed nothing: was the
 * trial missing (HPO_ENOTFOUND) or in the wrong state (HPO_ECONFLICT)? */
int sto_db_trial_conflict(sto_db *db, int64_t trial_id);

/* Resets a statement and clears its bindings, ready for the next caller. */
static inline void sto_db_done(sto_stmt *s) { sto_stmt_reset(s); }

/* For tests: runs SQL text without parameters (one statement or a script),
 * and the single integer answer of a query (HPO_ENOTFOUND if no row);
 * both take the lock. The SQL must suit the database's dialect. */
int sto_db_exec_sql(sto_db *db, const char *sql);
int sto_db_query_int(sto_db *db, const char *sql, int64_t *out);
/* The database is PostgreSQL (else SQLite). */
int sto_db_is_pg(const sto_db *db);

#endif
