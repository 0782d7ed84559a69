/*
 * db_internal.h - what the files of storage/ share and nothing outside uses
 * (tests excepted): the connection struct, the prepared-statement cache, the
 * transaction helpers and the NaN<->NULL column conventions.
 *
 * Design notes
 * - db.c owns the connection: it opens it, sets the pragmas, runs the
 *   migrations and prepares every statement of the layer once, into
 *   db->q[STO_Q_*]. The SQL of every statement lives in one table in db.c so
 *   the schema and all queries against it can be read (and reviewed for
 *   index use) in one place; studies.c, trials.c and events.c only bind,
 *   step and read columns.
 * - Locking discipline: a public function takes db->mu with sto_db_lock()
 *   before touching any statement and releases it before returning. A
 *   mutating function runs sto_db_begin() (BEGIN IMMEDIATE) ... sto_db_commit()
 *   under the lock; on any error it calls sto_db_rollback(), which is a no-op
 *   outside a transaction. Because one connection is shared, a statement
 *   must be reset (sto_db_done) before the lock is released, or the next
 *   caller would find it mid-step.
 * - Columns: NaN is stored as NULL (SQLite turns a NaN REAL into NULL anyway,
 *   we make it explicit) and NULL is read back as NaN; text columns are
 *   copied with hpo_strdup (NULL stays NULL).
 * - sto_db_open_at() opens a database migrated only up to a given version:
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
#include <sqlite3.h>

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
    STO_Q_STUDY_ANNOTATE, /* schema v6 */
    STO_Q_STUDY_ATTRS,    /* schema v6 */

    STO_Q_TRIAL_INSERT,
    STO_Q_TRIAL_GET,
    STO_Q_TRIAL_STATE,
    /* 8 list variants: + 4 * (state filter) + 2 * (order by value) + (descending) */
    STO_Q_TRIAL_LIST,
    STO_Q_TRIAL_LIST_LAST = STO_Q_TRIAL_LIST + 7,
    STO_Q_TRIAL_COUNTS_STUDY,
    STO_Q_TRIAL_COUNTS_ALL,
    STO_Q_JOBS_QUEUED,
    STO_Q_TRIAL_REPORT,
    STO_Q_INTERMEDIATE_PUT,
    STO_Q_INTERMEDIATES_TRIAL,
    STO_Q_INTERMEDIATES_STUDY,
    STO_Q_TRIAL_FINISH,
    STO_Q_TRIAL_EXPIRE,
    /* trials a client brings (trials_in.c) */
    STO_Q_TRIAL_ENQUEUE,
    STO_Q_TRIAL_HAND_OUT,
    STO_Q_TRIAL_ADD,
    STO_Q_TRIAL_SET_VALUES,
    /* schema v3: queueing, training facts, per-epoch curves, datasets */
    STO_Q_TRIAL_REQUEUE,
    STO_Q_TRIALS_REQUEUE_RUNNING,
    STO_Q_TRIAL_START,
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

    STO_Q_MODEL_INSERT,
    STO_Q_MODEL_GET,
    STO_Q_MODEL_LIST,
    STO_Q_MODEL_NEXT_QUEUED,
    STO_Q_MODEL_START,
    STO_Q_MODEL_FINISH,
    STO_Q_MODELS_REQUEUE,
    STO_Q_MODEL_REQUEUE,

    STO_Q_EVENT_INSERT,
    STO_Q_EVENT_OF_STUDY,
    STO_Q_EVENT_OF_TRIAL,
    STO_Q_EVENT_OF_MODEL,
    STO_Q_EVENT_LIST,
    STO_Q_EVENT_LAST,

    STO_Q_N
};

/* Column list of a trial row, in the order sto_db_read_trial() reads it. */
#define STO_TRIAL_COLS                                                                 \
    "id, study_id, number, state, params, value, value_std, value_n, last_step, "     \
    "last_value, created, started, finished, lease_expires, error, best_epoch, slot, "  \
    "train_seconds, user_attrs, note, values_json, metrics_json"

/* Column list of a study row, in the order studies.c reads it. */
#define STO_STUDY_COLS "id, name, spec, state, created, updated, user_attrs, note"

/* Column list of a model row, in the order models.c reads it. */
#define STO_MODEL_COLS "id, study_id, trial_id, kind, state, spec, result, path, error, created, started, finished"

struct sto_db {
    sqlite3 *conn;
    pthread_mutex_t mu;
    sqlite3_stmt *q[STO_Q_N];
};

/* Opens and migrates to target_version (1 .. sto_schema_version()). */
int sto_db_open_at(const char *path, sto_sync sync, int target_version, sto_db **out);

void sto_db_lock(sto_db *db);
void sto_db_unlock(sto_db *db);
/* BEGIN IMMEDIATE / COMMIT; 0 or HPO_ESTORAGE. */
int sto_db_begin(sto_db *db);
int sto_db_commit(sto_db *db);
/* Rolls back the open transaction, if any. */
void sto_db_rollback(sto_db *db);
/* Logs "storage: <what>: <sqlite3 message>" and returns HPO_ESTORAGE. */
int sto_db_error(sto_db *db, const char *what);
/* The SQLite extended code is a foreign-key failure (a parent row is missing). */
int sto_db_is_fk_error(sto_db *db);
/* 0 if a row with that id exists (q is an "exists" statement with ?1 = id),
 * HPO_ENOTFOUND if not, HPO_ESTORAGE on failure. */
int sto_db_exists(sto_db *db, int q, int64_t id);
/* Fills t (a sto_trial) from the current row of a statement selecting
 * STO_TRIAL_COLS; a sto_db_row_fn. */
void sto_db_read_trial(sqlite3_stmt *s, void *t);

/* Inside the caller's transaction (lock held): stores ev (if not NULL)
 * about the study, trial or model `id`, q being STO_Q_EVENT_OF_STUDY,
 * _TRIAL or _MODEL. HPO_ENOTFOUND when that row does not exist, so the
 * caller rolls back and neither the change nor its event is stored. */
int sto_db_event_in_tx(sto_db *db, int q, int64_t id, const sto_event_in *ev);

/* Inside the caller's transaction (lock held): moves the updated time of
 * a study to now (never back), q being STO_Q_STUDY_TOUCH (id: the study)
 * or STO_Q_STUDY_TOUCH_BY_TRIAL (id: one of its trials). Every call that
 * changes a trial does it, so a study's updated follows its trials. */
int sto_db_touch_study(sto_db *db, int q, int64_t id, double now);

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
typedef void (*sto_db_row_fn)(sqlite3_stmt *s, void *out);
/* Steps a bound statement once: the row is read into out with read;
 * HPO_ENOTFOUND when there is none, HPO_ESTORAGE on failure (logged with
 * what). Resets the statement. Caller holds the lock. */
int sto_db_row(sto_db *db, sqlite3_stmt *s, sto_db_row_fn read, void *out, const char *what);
/* Steps a bound statement to its end, reading every row with read into a
 * growing array of elements of elem_size bytes (*out malloc'd, *n_out rows;
 * zero rows give NULL and 0). On failure every element read so far is
 * cleared with clear, the array freed and HPO_ESTORAGE returned. Resets the
 * statement. Caller holds the lock. */
int sto_db_rows(sto_db *db, sqlite3_stmt *s, size_t elem_size, sto_db_row_fn read, void (*clear)(void *),
                const char *what, void **out, size_t *n_out);
/* After an UPDATE ... WHERE id = ? AND state ... changed nothing: was the
 * trial missing (HPO_ENOTFOUND) or in the wrong state (HPO_ECONFLICT)? */
int sto_db_trial_conflict(sto_db *db, int64_t trial_id);

/* Resets a statement and clears its bindings, ready for the next caller. */
static inline void sto_db_done(sqlite3_stmt *s) {
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

static inline int sto_bind_real(sqlite3_stmt *s, int i, double v) {
    return isnan(v) ? sqlite3_bind_null(s, i) : sqlite3_bind_double(s, i, v);
}

static inline int sto_bind_text(sqlite3_stmt *s, int i, const char *v) {
    return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i);
}

static inline double sto_col_real(sqlite3_stmt *s, int i) {
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

static inline char *sto_col_text(sqlite3_stmt *s, int i) {
    return hpo_strdup((const char *)sqlite3_column_text(s, i));
}

#endif
