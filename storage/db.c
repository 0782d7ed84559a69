/* db.c - the connection: open, pragmas, schema migrations, the prepared
 * statement cache and transaction helpers (see storage.h, db_internal.h).
 * PostgreSQL's schema is schema_pg.c's. */
#include "db_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema ----------------------------------------------------------------
 * migrations[i] brings a database from user_version i to i + 1. Append only:
 * a released step is never edited, a change is a new step. All missing steps
 * run in one BEGIN IMMEDIATE transaction together with the user_version
 * update, so a database is always at exactly one version.
 *
 * Conventions: NULL in a REAL column means "no value" (NaN in C); times are
 * wall-clock seconds (REAL); states are the integer values of the sto_*_state
 * enums, which are therefore append-only too. */
static const char *const migrations[] = {
    /* 0 -> 1: tables. Every foreign key is the first column of a primary
     * key or unique index, so cascades and "by parent" lookups are indexed. */
    "CREATE TABLE studies ("
    "  id      INTEGER PRIMARY KEY,"
    "  name    TEXT NOT NULL,"
    "  spec    TEXT NOT NULL,"
    "  state   INTEGER NOT NULL DEFAULT 0,"
    "  created REAL NOT NULL,"
    "  updated REAL NOT NULL"
    ");"
    "CREATE TABLE trials ("
    "  id            INTEGER PRIMARY KEY,"
    "  study_id      INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,"
    "  number        INTEGER NOT NULL,"
    "  state         INTEGER NOT NULL,"
    "  params        TEXT NOT NULL,"
    "  value         REAL,"
    "  value_std     REAL,"
    "  value_n       INTEGER NOT NULL DEFAULT 0,"
    "  last_step     INTEGER NOT NULL DEFAULT -1,"
    "  last_value    REAL,"
    "  created       REAL NOT NULL,"
    "  started       REAL NOT NULL DEFAULT 0,"
    "  finished      REAL NOT NULL DEFAULT 0,"
    "  lease_expires REAL NOT NULL DEFAULT 0,"
    "  error         TEXT,"
    "  UNIQUE (study_id, number)"
    ");"
    "CREATE TABLE intermediates ("
    "  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,"
    "  step     INTEGER NOT NULL,"
    "  value    REAL,"
    "  PRIMARY KEY (trial_id, step)"
    ") WITHOUT ROWID;"
    "CREATE TABLE events ("
    "  id       INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  study_id INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,"
    "  trial_id INTEGER,"
    "  type     TEXT NOT NULL,"
    "  data     TEXT NOT NULL,"
    "  created  REAL NOT NULL"
    ");"
    "CREATE INDEX events_study_id ON events (study_id, id);",

    /* 1 -> 2: indexes for the hot queries: counts and state filters, best
     * values, and the lease scan (a partial index holding only running trials
     * with a lease, so the periodic expiry scan reads nothing else; the
     * expire statement repeats its WHERE terms literally so it can be used). */
    "CREATE INDEX trials_study_state ON trials (study_id, state);"
    "CREATE INDEX trials_study_value ON trials (study_id, value);"
    "CREATE INDEX trials_lease ON trials (lease_expires)"
    "  WHERE state = 0 AND lease_expires > 0;",

    /* 2 -> 3: embedded training. Trials get the best epoch, the worker slot
     * that last ran them and their accumulated training time; epochs holds a
     * learning curve point per (trial, execution, epoch) as JSON text;
     * datasets are the files uploaded to hpod (path relative to the data
     * dir, or a JSON array of paths; meta is JSON text); their ids are
     * AUTOINCREMENT so a study naming a deleted dataset by id never finds a
     * newer one, and a folder named after an id is never reused. ADD COLUMN with a
     * constant default does not rewrite the table, so this is instant. */
    "ALTER TABLE trials ADD COLUMN best_epoch INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE trials ADD COLUMN slot TEXT;"
    "ALTER TABLE trials ADD COLUMN train_seconds REAL NOT NULL DEFAULT 0;"
    "CREATE TABLE epochs ("
    "  trial_id  INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,"
    "  execution INTEGER NOT NULL,"
    "  epoch     INTEGER NOT NULL,"
    "  metrics   TEXT NOT NULL,"
    "  PRIMARY KEY (trial_id, execution, epoch)"
    ") WITHOUT ROWID;"
    "CREATE TABLE datasets ("
    "  id      INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name    TEXT NOT NULL UNIQUE,"
    "  format  TEXT NOT NULL,"
    "  path    TEXT NOT NULL,"
    "  meta    TEXT NOT NULL,"
    "  n_rows  INTEGER NOT NULL,"
    "  bytes   INTEGER NOT NULL,"
    "  created REAL NOT NULL"
    ");",

    /* 3 -> 4: models (refits, models taken from a trial's checkpoint,
     * ensembles) made from a study's trials, built by jobs on the worker
     * pool; AUTOINCREMENT so a weights file named after an id is never
     * reused. */
    "CREATE TABLE models ("
    "  id       INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  study_id INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,"
    "  trial_id INTEGER,"
    "  kind     INTEGER NOT NULL,"
    "  state    INTEGER NOT NULL DEFAULT 0,"
    "  spec     TEXT NOT NULL,"
    "  result   TEXT,"
    "  path     TEXT,"
    "  error    TEXT,"
    "  created  REAL NOT NULL,"
    "  started  REAL NOT NULL DEFAULT 0,"
    "  finished REAL NOT NULL DEFAULT 0"
    ");"
    "CREATE INDEX models_study ON models (study_id, kind);"
    "CREATE INDEX models_state ON models (state, id);",

    /* 4 -> 5: study and trial ids are never reused. Without AUTOINCREMENT
     * SQLite hands out max(id) + 1, so deleting the newest study gave its id
     * (and its trials' ids) to the next one: an old client's tell, or a
     * deleted study's worker, landed in an unrelated new study. Both tables
     * are rebuilt with AUTOINCREMENT (SQLite's create-copy-drop-rename
     * procedure; migrate() runs steps with foreign keys off, so dropping the
     * old table cascades nothing, and the other tables' REFERENCES name the
     * new one after the rename), their indexes are recreated, and
     * sqlite_sequence is seeded with the highest id still known anywhere:
     * the rows themselves and every column that refers to them (a row
     * deleted earlier is remembered only there). */
    "CREATE TABLE new_studies ("
    "  id      INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name    TEXT NOT NULL,"
    "  spec    TEXT NOT NULL,"
    "  state   INTEGER NOT NULL DEFAULT 0,"
    "  created REAL NOT NULL,"
    "  updated REAL NOT NULL"
    ");"
    "INSERT INTO new_studies (id, name, spec, state, created, updated)"
    "  SELECT id, name, spec, state, created, updated FROM studies;"
    "DROP TABLE studies;"
    "ALTER TABLE new_studies RENAME TO studies;"
    "CREATE TABLE new_trials ("
    "  id            INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  study_id      INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,"
    "  number        INTEGER NOT NULL,"
    "  state         INTEGER NOT NULL,"
    "  params        TEXT NOT NULL,"
    "  value         REAL,"
    "  value_std     REAL,"
    "  value_n       INTEGER NOT NULL DEFAULT 0,"
    "  last_step     INTEGER NOT NULL DEFAULT -1,"
    "  last_value    REAL,"
    "  created       REAL NOT NULL,"
    "  started       REAL NOT NULL DEFAULT 0,"
    "  finished      REAL NOT NULL DEFAULT 0,"
    "  lease_expires REAL NOT NULL DEFAULT 0,"
    "  error         TEXT,"
    "  best_epoch    INTEGER NOT NULL DEFAULT 0,"
    "  slot          TEXT,"
    "  train_seconds REAL NOT NULL DEFAULT 0,"
    "  UNIQUE (study_id, number)"
    ");"
    "INSERT INTO new_trials (id, study_id, number, state, params, value, value_std, value_n, last_step,"
    "  last_value, created, started, finished, lease_expires, error, best_epoch, slot, train_seconds)"
    "  SELECT id, study_id, number, state, params, value, value_std, value_n, last_step,"
    "  last_value, created, started, finished, lease_expires, error, best_epoch, slot, train_seconds"
    "  FROM trials;"
    "DROP TABLE trials;"
    "ALTER TABLE new_trials RENAME TO trials;"
    "CREATE INDEX trials_study_state ON trials (study_id, state);"
    "CREATE INDEX trials_study_value ON trials (study_id, value);"
    "CREATE INDEX trials_lease ON trials (lease_expires)"
    "  WHERE state = 0 AND lease_expires > 0;"
    "DELETE FROM sqlite_sequence WHERE name IN ('studies', 'trials', 'new_studies', 'new_trials');"
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'studies', MAX("
    "  (SELECT COALESCE(MAX(id), 0) FROM studies),"
    "  (SELECT COALESCE(MAX(study_id), 0) FROM trials),"
    "  (SELECT COALESCE(MAX(study_id), 0) FROM events),"
    "  (SELECT COALESCE(MAX(study_id), 0) FROM models));"
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'trials', MAX("
    "  (SELECT COALESCE(MAX(id), 0) FROM trials),"
    "  (SELECT COALESCE(MAX(trial_id), 0) FROM intermediates),"
    "  (SELECT COALESCE(MAX(trial_id), 0) FROM epochs),"
    "  (SELECT COALESCE(MAX(trial_id), 0) FROM events),"
    "  (SELECT COALESCE(MAX(trial_id), 0) FROM models));",

    /* 5 -> 6: user attributes and notes (Optuna's set_user_attr, Optuna
     * Dashboard's notes) on studies and trials: user_attrs is a JSON object
     * text, note plain UTF-8 text; the api checks and merges them. ADD
     * COLUMN with a constant default rewrites nothing. studies_name serves
     * the get-or-create lookup by name (POST /studies with load_if_exists). */
    "ALTER TABLE studies ADD COLUMN user_attrs TEXT NOT NULL DEFAULT '{}';"
    "ALTER TABLE studies ADD COLUMN note TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE trials ADD COLUMN user_attrs TEXT NOT NULL DEFAULT '{}';"
    "ALTER TABLE trials ADD COLUMN note TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX studies_name ON studies (name, id);",

    /* 6 -> 7: multi-objective studies: a complete trial's objective values
     * (a JSON array text, one number per objective; value keeps the first)
     * and the metrics it told with them (a JSON object text: the values its
     * study's constraints read). NULL for a one-objective trial. */
    "ALTER TABLE trials ADD COLUMN values_json TEXT;"
    "ALTER TABLE trials ADD COLUMN metrics_json TEXT;",

    /* 7 -> 8: population-based training (tuner "pbt"): a trial bred from
     * another's checkpoint carries its lineage (a JSON object text:
     * parent_trial_id, parent_epoch, replaced_trial_id, params_before,
     * params_after; NULL for a trial the tuner sampled), and pbt_epoch is
     * the last perturbation boundary the trial was ranked at (its start
     * epoch for a bred one, 0 otherwise). */
    "ALTER TABLE trials ADD COLUMN lineage TEXT;"
    "ALTER TABLE trials ADD COLUMN pbt_epoch INTEGER NOT NULL DEFAULT 0;",

    /* 8 -> 9: several hpod nodes on one database (storage.h: nodes). A
     * node is one run of an hpod process: ident names its data dir across
     * runs, heartbeat is the database's clock at its last beat, ended when
     * it stopped or was found dead (0 while it lives) and why. A trial or
     * model job running on a slot records its node (NULL: none, e.g. an
     * external trial a client runs); the partial indexes hold running ones
     * only, for the reclaim of a dead node's jobs. studies.changed is the
     * study_changes counter at its last creation or state change, which
     * other nodes poll (studies_changed). */
    "CREATE TABLE nodes ("
    "  id         INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  ident      TEXT NOT NULL,"
    "  name       TEXT NOT NULL,"
    "  started    REAL NOT NULL,"
    "  heartbeat  REAL NOT NULL,"
    "  ended      REAL NOT NULL DEFAULT 0,"
    "  end_reason TEXT"
    ");"
    "CREATE INDEX nodes_live ON nodes (heartbeat) WHERE ended = 0;"
    "CREATE INDEX nodes_ident ON nodes (ident, id);"
    "ALTER TABLE trials ADD COLUMN node_id INTEGER;"
    "ALTER TABLE models ADD COLUMN node_id INTEGER;"
    "CREATE INDEX trials_node ON trials (node_id) WHERE state = 0;"
    "CREATE INDEX models_node ON models (node_id) WHERE state = 1;"
    "ALTER TABLE studies ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX studies_changed ON studies (changed);"
    "CREATE TABLE study_changes (seq INTEGER NOT NULL);"
    "INSERT INTO study_changes (seq) VALUES (0);",

    /* 9 -> 10: a study's change counter (seq) and each trial's stamp of it
     * (the seq of the study at the trial's latest change), which
     * sto_trials_changed follows. Kept on PostgreSQL, where several hpod
     * nodes write one database; a SQLite database has one hpod (the data
     * dir's lock), so both stay 0 there and no index is needed. */
    "ALTER TABLE studies ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE trials ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;",

    /* 10 -> 11: what the pruner's history needs beyond the values, so that
     * a restart decides as the live run did (tuners/pruners.c): late, a
     * step reported after a higher one (no rung's value); pruned, the
     * pruner said stop at this report (it says so at every later one).
     * Rows stored before are neither, as their replay took them. */
    "ALTER TABLE intermediates ADD COLUMN late INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE intermediates ADD COLUMN pruned INTEGER NOT NULL DEFAULT 0;",

    /* 11 -> 12: a study's trials of one state in number order come from
     * one index range: an ask's look for enqueued trials walked the whole
     * study through (study_id, number) once ANALYZE found every trial of
     * it complete (3 ms at 15,000 trials, 0.01 ms now). */
    "DROP INDEX trials_study_state;"
    "CREATE INDEX trials_study_state ON trials (study_id, state, number);",
};

int sto_schema_version(void) { return (int)HPO_ARRAY_LEN(migrations); }

/* ---- statements ------------------------------------------------------------
 * Indexed by STO_Q_*; prepared once at open with SQLITE_PREPARE_PERSISTENT
 * (PostgreSQL: at first use, once per connection, see sql_pg.c). Written
 * in the SQL both dialects share (?N placeholders, RETURNING, ON CONFLICT,
 * NULLS LAST, CASE rather than the two-argument max()); stmt_sql_pg below
 * holds the few that must differ. Trial states in SQL: 0 running, 2
 * pruned, 3 failed (sto_trial_state). */
/* The larger of two reals (SQLite's max(a, b) is PostgreSQL's greatest). */
#define GREATEST(a, b) "CASE WHEN " a " > " b " THEN " a " ELSE " b " END"
/* No limit is ?3 = INT64_MAX (SQLite's LIMIT -1 is an error in PostgreSQL). */
#define TRIAL_LIST(filter, order)                                                      \
    "SELECT " STO_TRIAL_COLS " FROM trials WHERE study_id = ?1" filter " ORDER BY " order \
    " LIMIT ?3 OFFSET ?4"
#define BY_STATE " AND state = ?2"
#define DATASET_COLS "id, name, format, path, meta, n_rows, bytes, created"
/* The inserts of a trial with the study's next number (after
 * sto_db_lock_touch_study). col and val add columns: PostgreSQL's variants
 * stamp the new trial with the change number the lock drew (LOCKED_SEQ). */
#define LOCKED_SEQ ", (SELECT seq FROM studies WHERE id = ?1)"
#define NEXT_NUMBER " COALESCE(MAX(number) + 1, 0)"
#define TRIAL_INSERT(col, val)                                                            \
    "INSERT INTO trials (study_id, number, state, params, created, started, lease_expires" col ")" \
    " SELECT ?1," NEXT_NUMBER ", 0, ?2, ?3, ?3, ?4" val " FROM trials WHERE study_id = ?1 RETURNING id, number"
/* with the number the caller expects (?5): no row when the study's next
 * number is another */
#define TRIAL_INSERT_AT(col, val)                                                         \
    "INSERT INTO trials (study_id, number, state, params, created, started, lease_expires" col ")" \
    " SELECT ?1, ?5, 0, ?2, ?3, ?3, ?4" val                                                 \
    " WHERE (SELECT" NEXT_NUMBER " FROM trials WHERE study_id = ?1) = ?5 RETURNING id, number"
/* The same created running on a slot of a node (schema v9): ?5 slot, ?6
 * node (NULL: none); with the number the caller expects (?7). */
#define TRIAL_INSERT_RUN(col, val)                                                                      \
    "INSERT INTO trials (study_id, number, state, params, created, started, lease_expires, slot, node_id" col \
    ") SELECT ?1," NEXT_NUMBER ", 0, ?2, ?3, ?3, ?4, ?5, ?6" val " FROM trials WHERE study_id = ?1 RETURNING id, number"
#define TRIAL_INSERT_RUN_AT(col, val)                                                                   \
    "INSERT INTO trials (study_id, number, state, params, created, started, lease_expires, slot, node_id" col \
    ") SELECT ?1, ?7, 0, ?2, ?3, ?3, ?4, ?5, ?6" val                                                     \
    " WHERE (SELECT" NEXT_NUMBER " FROM trials WHERE study_id = ?1) = ?7 RETURNING id, number"
#define TRIAL_ENQUEUE(col, val)                                                           \
    "INSERT INTO trials (study_id, number, state, params, created, started, lease_expires" col ")" \
    " SELECT ?1," NEXT_NUMBER ", 5, ?2, ?3, 0, 0" val " FROM trials WHERE study_id = ?1 RETURNING id, number"
#define TRIAL_PBT_BREED(col, val)                                                         \
    "INSERT INTO trials (study_id, number, state, params, created, started, lease_expires, lineage, pbt_epoch" col \
    ") SELECT ?1," NEXT_NUMBER ", 5, ?2, ?3, ?3, 0, ?4, ?5" val " FROM trials WHERE study_id = ?1 RETURNING id, number"
#define TRIAL_ADD(col, val)                                                               \
    "INSERT INTO trials (study_id, number, state, params, value, value_std, value_n, last_step,"      \
    " last_value, created, started, finished, error, user_attrs, note" col ")"                         \
    " SELECT ?1," NEXT_NUMBER ", ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"                       \
    " COALESCE(?13, '{}'), COALESCE(?14, '')" val " FROM trials WHERE study_id = ?1 RETURNING id, number"
/* A trial (or model) running on a node is written by that node only
 * (schema v9): node is the writer's parameter, 0 when it is no node. */
#define NODE_OWNS(node) "(node_id IS NULL OR node_id = " node ")"
#define INTERMEDIATES_TRIAL(flags) \
    "SELECT step, value, " flags " FROM intermediates WHERE trial_id = ?1 AND step > ?2 ORDER BY step"
#define INTERMEDIATES_STUDY(flags)                                                   \
    "SELECT t.number, i.step, i.value, " flags " FROM trials t JOIN intermediates i" \
    " ON i.trial_id = t.id WHERE t.study_id = ?1 ORDER BY t.number, i.step"
#define TRIAL_REPORT(owns)                                                 \
    "UPDATE trials SET"                                                    \
    " last_value = CASE WHEN ?2 > last_step THEN ?3 ELSE last_value END,"  \
    " last_step = " GREATEST("last_step", "?2") ","                       \
    " lease_expires = CASE WHEN ?4 > 0 THEN ?4 ELSE lease_expires END"     \
    " WHERE id = ?1 AND state = 0" owns
#define TRIAL_FINISH(owns)                                                                \
    "UPDATE trials SET state = ?2,"                                                       \
    " value = CASE WHEN ?3 IS NULL AND ?2 = 2 THEN last_value ELSE ?3 END,"               \
    " value_std = ?4,"                                                                    \
    " value_n = CASE WHEN (CASE WHEN ?3 IS NULL AND ?2 = 2 THEN last_value ELSE ?3 END)" \
    "   IS NULL THEN 0 WHEN ?5 < 1 THEN 1 ELSE ?5 END,"                                   \
    " error = ?6, finished = ?7, lease_expires = 0"                                       \
    " WHERE id = ?1 AND (state = 0 OR (state = 5 AND ?2 IN (3, 4)))" owns
#define TRIAL_START(node)                                      \
    "UPDATE trials SET state = 0, slot = ?2," node             \
    " started = CASE WHEN started > 0 THEN started ELSE ?3 END" \
    " WHERE id = ?1 AND state IN (0, 5)"
#define MODEL_CLAIM(lock)                                                                 \
    "UPDATE models SET state = 1, started = ?1, node_id = ?2"                             \
    " WHERE id = (SELECT id FROM models WHERE state = 0 ORDER BY id LIMIT 1" lock ")" \
    " AND state = 0 RETURNING " STO_MODEL_COLS
/* Nodes (schema v9). Their times are the database's clock where there is
 * one for every node (PostgreSQL: PG_NOW); SQLite (one node) binds now. */
#define PG_NOW "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
#define NODE_COLS "id, ident, name, started, heartbeat, ended, end_reason"
/* ?1 ident, ?2 name, ?3 now */
#define NODE_INSERT(now) \
    "INSERT INTO nodes (ident, name, started, heartbeat) VALUES (?1, ?2, " now ", " now ") RETURNING id"
/* a node found dead (ended) beats no more: it learns so (no row changed) */
#define NODE_BEAT(now) "UPDATE nodes SET heartbeat = " now " WHERE id = ?1 AND ended = 0"
/* ?2 now, ?3 why */
#define NODE_END(now) "UPDATE nodes SET ended = " now ", end_reason = ?3 WHERE id = ?1 AND ended = 0"
/* ?1 now, ?2 the caller's node (spared), ?3 the heartbeat timeout in
 * seconds, ?4 the caller's ident (its earlier runs end), ?5 nonzero: every
 * other node ends (one node per database: SQLite). Each row is ended by
 * one caller: the UPDATE's test (ended = 0) is re-read under its lock. */
#define NODES_END_STALE(now)                                                                        \
    "UPDATE nodes SET ended = " now ","                                                             \
    " end_reason = CASE WHEN ident = ?4 OR ?5 <> 0 THEN 'restarted' ELSE 'no heartbeat' END"        \
    " WHERE ended = 0 AND id <> ?2 AND (heartbeat < " now " - ?3 OR ident = ?4 OR ?5 <> 0)"          \
    " RETURNING " NODE_COLS
/* newest first, with the database's now (?1) to age their heartbeats; ?2 limit */
#define NODE_LIST(now) "SELECT " NODE_COLS ", " now " FROM nodes ORDER BY id DESC LIMIT ?2"

static const char *const stmt_sql[STO_Q_N] = {
    [STO_Q_BEGIN] = "BEGIN IMMEDIATE",
    [STO_Q_COMMIT] = "COMMIT",
    [STO_Q_ROLLBACK] = "ROLLBACK",

    [STO_Q_STUDY_INSERT] =
        "INSERT INTO studies (name, spec, state, created, updated) VALUES (?1, ?2, ?4, ?3, ?3) RETURNING id",
    [STO_Q_STUDY_GET] = "SELECT " STO_STUDY_COLS " FROM studies WHERE id = ?1",
    [STO_Q_STUDY_EXISTS] = "SELECT 1 FROM studies WHERE id = ?1",
    [STO_Q_STUDY_LIST] = "SELECT " STO_STUDY_COLS " FROM studies ORDER BY id DESC",
    /* get-or-create: the oldest study of that name */
    [STO_Q_STUDY_BY_NAME] = "SELECT id FROM studies WHERE name = ?1 ORDER BY id LIMIT 1",
    /* SQLite's BEGIN IMMEDIATE already excludes every other writer */
    [STO_Q_STUDY_NAME_LOCK] = "SELECT ?1 IS NULL",
    [STO_Q_STUDY_ATTRS] = "SELECT user_attrs FROM studies WHERE id = ?1",
    /* ?2 user_attrs, ?3 note (NULL keeps either), ?4 now */
    [STO_Q_STUDY_ANNOTATE] =
        "UPDATE studies SET user_attrs = COALESCE(?2, user_attrs), note = COALESCE(?3, note),"
        " updated = " GREATEST("updated", "?4") " WHERE id = ?1",
    [STO_Q_STUDY_DELETE] = "DELETE FROM studies WHERE id = ?1",
    [STO_Q_STUDY_SET_STATE] = "UPDATE studies SET state = ?2, updated = ?3 WHERE id = ?1",
    /* only from state ?4: of two connections ending a study, one does */
    /* A trial changed (?2 now): the study's updated follows, never back. */
    [STO_Q_STUDY_TOUCH] = "UPDATE studies SET updated = " GREATEST("updated", "?2") " WHERE id = ?1",
    [STO_Q_STUDY_TOUCH_BY_TRIAL] =
        "UPDATE studies SET updated = " GREATEST("updated", "?2")
        " WHERE id = (SELECT study_id FROM trials WHERE id = ?1)",
    /* sto_db_lock_study; PostgreSQL's variant locks the row */
    [STO_Q_STUDY_LOCK] = "SELECT 1 FROM studies WHERE id = ?1",
    /* sto_db_lock_touch_study (?2 now); PostgreSQL's draws the next seq */
    [STO_Q_STUDY_LOCK_TOUCH] = "UPDATE studies SET updated = " GREATEST("updated", "?2") " WHERE id = ?1 RETURNING 1",

    /* The next number is read and used inside one statement, through the
     * (study_id, number) unique index, after sto_db_lock_study in the same
     * transaction (an IMMEDIATE one on SQLite). */
    [STO_Q_TRIAL_INSERT] = TRIAL_INSERT("", ""),
    [STO_Q_TRIAL_INSERT_AT] = TRIAL_INSERT_AT("", ""),
    /* schema v10: the trials changed after seq ?2, in seq order: one range
     * of trials_study_seq whatever the plan (ordered by number, a generic
     * plan may walk the study's (study_id, number) index instead, every
     * trial of the study; trials.c sorts by number). Each row ends with the
     * study's state; the study's row alone (the trial's columns NULL) when
     * nothing changed, no row when there is no such study: one round trip
     * answers all three. */
    [STO_Q_TRIALS_CHANGED] =
        "SELECT c.*, s.state FROM studies s LEFT JOIN (SELECT " STO_TRIAL_COLS
        " FROM trials WHERE study_id = ?1 AND seq > ?2) c ON 1 = 1 WHERE s.id = ?1 ORDER BY c.seq",
    [STO_Q_TRIAL_GET] = "SELECT " STO_TRIAL_COLS " FROM trials WHERE id = ?1",
    [STO_Q_TRIAL_STATE] = "SELECT state FROM trials WHERE id = ?1",
    [STO_Q_TRIAL_LIST + 0] = TRIAL_LIST("", "number ASC"),
    [STO_Q_TRIAL_LIST + 1] = TRIAL_LIST("", "number DESC"),
    [STO_Q_TRIAL_LIST + 2] = TRIAL_LIST("", "value ASC NULLS LAST, number ASC"),
    [STO_Q_TRIAL_LIST + 3] = TRIAL_LIST("", "value DESC NULLS LAST, number ASC"),
    [STO_Q_TRIAL_LIST + 4] = TRIAL_LIST(BY_STATE, "number ASC"),
    [STO_Q_TRIAL_LIST + 5] = TRIAL_LIST(BY_STATE, "number DESC"),
    [STO_Q_TRIAL_LIST + 6] = TRIAL_LIST(BY_STATE, "value ASC NULLS LAST, number ASC"),
    [STO_Q_TRIAL_LIST + 7] = TRIAL_LIST(BY_STATE, "value DESC NULLS LAST, number ASC"),
    [STO_Q_TRIAL_OUTCOMES] = "SELECT " STO_TRIAL_COLS_LEAN " FROM trials WHERE study_id = ?1 ORDER BY number",
    [STO_Q_TRIAL_OUTCOMES_STATE] =
        "SELECT " STO_TRIAL_COLS_LEAN " FROM trials WHERE study_id = ?1 AND state = ?2 ORDER BY number",
    [STO_Q_TRIAL_COUNTS_STUDY] =
        "SELECT state, COUNT(*) FROM trials WHERE study_id = ?1 GROUP BY state",
    [STO_Q_TRIAL_COUNTS_ALL] = "SELECT state, COUNT(*) FROM trials GROUP BY state",
    [STO_Q_JOBS_QUEUED] =
        "SELECT (SELECT COUNT(*) FROM studies s JOIN trials t ON t.study_id = s.id AND t.state = ?1"
        " WHERE s.state = ?2), (SELECT COUNT(*) FROM models WHERE state = ?3)",
    /* Right-hand sides see the old row: last_value follows the highest step.
     * The _NODE variant (schema v9, ?5 the node) is the one used once the
     * schema has nodes; the plain one serves older schemas (tests). */
    [STO_Q_TRIAL_REPORT] = TRIAL_REPORT(""),
    [STO_Q_TRIAL_REPORT_NODE] = TRIAL_REPORT(" AND " NODE_OWNS("?5")),
    /* a step reported again keeps its first value, as the pruner does
     * (tuners/study.c, Optuna's rule): a replay decides as the live run.
     * late: a higher step of the trial was stored before. The _FLAGS
     * variants (schema v11, late and pruned) are the ones used once the
     * schema has them; the plain ones serve older schemas (tests). */
    [STO_Q_INTERMEDIATE_PUT_FLAGS] =
        "INSERT INTO intermediates (trial_id, step, value, late) VALUES (?1, ?2, ?3,"
        " CASE WHEN ?2 < (SELECT MAX(step) FROM intermediates WHERE trial_id = ?1) THEN 1 ELSE 0 END)"
        " ON CONFLICT (trial_id, step) DO NOTHING",
    [STO_Q_INTERMEDIATE_PUT] =
        "INSERT INTO intermediates (trial_id, step, value) VALUES (?1, ?2, ?3)"
        " ON CONFLICT (trial_id, step) DO NOTHING",
    /* pruned: 1, or 2 + the rung the answer was given at (storage.h) */
    [STO_Q_INTERMEDIATE_PRUNED] = "UPDATE intermediates SET pruned = ?3 WHERE trial_id = ?1 AND step = ?2",
    /* an added trial's report as its document gives it (late 0/1, pruned as above) */
    [STO_Q_INTERMEDIATE_FLAGS] = "UPDATE intermediates SET late = ?3, pruned = ?4 WHERE trial_id = ?1 AND step = ?2",
    [STO_Q_INTERMEDIATES_TRIAL_FLAGS] = INTERMEDIATES_TRIAL("late, pruned"),
    [STO_Q_INTERMEDIATES_TRIAL] = INTERMEDIATES_TRIAL("0, 0"),
    [STO_Q_INTERMEDIATES_STUDY_FLAGS] = INTERMEDIATES_STUDY("i.late, i.pruned"),
    [STO_Q_INTERMEDIATES_STUDY] = INTERMEDIATES_STUDY("0, 0"),
    /* ?2 state, ?3 value (NULL = NaN), ?4 std, ?5 n, ?6 error, ?7 now (?8
     * the node of the _NODE variant, as for reports). A pruned trial
     * without a value keeps its last intermediate value. */
    [STO_Q_TRIAL_FINISH] = TRIAL_FINISH(""),
    [STO_Q_TRIAL_FINISH_NODE] = TRIAL_FINISH(" AND " NODE_OWNS("?8")),
    [STO_Q_TRIAL_EXPIRE] =
        "UPDATE trials SET state = 3, error = 'lease expired', finished = ?1"
        " WHERE state = 0 AND lease_expires > 0 AND lease_expires < ?1"
        " RETURNING " STO_TRIAL_COLS,
    /* Trials a client brings (trials_in.c): enqueued (state 5, never
     * started: started = 0 tells it from a requeued one), handed out once
     * (its parameters completed), or added finished. */
    [STO_Q_TRIAL_ENQUEUE] = TRIAL_ENQUEUE("", ""),
    /* Population-based training (schema v8): a queued member ranked at a
     * boundary that goes on (?2 the boundary); a queued member replaced
     * at its boundary ends pruned with its last value (?2 now); a member
     * bred from another's checkpoint is queued as a requeued trial
     * (started = now: it resumes from that checkpoint), ?4 its lineage,
     * ?5 its start epoch. */
    [STO_Q_TRIAL_PBT_RANKED] = "UPDATE trials SET pbt_epoch = ?2 WHERE id = ?1 AND state = 5",
    [STO_Q_TRIAL_PBT_REPLACED] =
        "UPDATE trials SET state = 2, value = last_value,"
        " value_n = CASE WHEN last_value IS NULL THEN 0 ELSE 1 END, finished = ?2, lease_expires = 0"
        " WHERE id = ?1 AND state = 5",
    [STO_Q_TRIAL_PBT_BREED] = TRIAL_PBT_BREED("", ""),
    [STO_Q_TRIAL_HAND_OUT] =
        "UPDATE trials SET state = 0, params = ?2, started = ?3, lease_expires = ?4, slot = ?5, node_id = ?6"
        " WHERE id = ?1 AND state = 5 AND started = 0",
    [STO_Q_TRIAL_ADD] = TRIAL_ADD("", ""),
    /* A multi-objective trial's values and metrics (schema v7), in the
     * transaction of its finish or add. */
    [STO_Q_TRIAL_SET_VALUES] = "UPDATE trials SET values_json = ?2, metrics_json = ?3 WHERE id = ?1",
    /* Queueing (state 5 = queued): a requeued trial drops its lease and its
     * node; ?2 the node asking (its runner's, schema v9). */
    [STO_Q_TRIAL_REQUEUE] =
        "UPDATE trials SET state = 5, lease_expires = 0, node_id = NULL"
        " WHERE id = ?1 AND state = 0 AND " NODE_OWNS("?2"),
    [STO_Q_TRIALS_REQUEUE_RUNNING] =
        "UPDATE trials SET state = 5, lease_expires = 0, node_id = NULL WHERE study_id = ?1 AND state = 0",
    /* ?2 slot, ?3 now (?4 the node of the _NODE variant, NULL: none);
     * started is kept once set. */
    [STO_Q_TRIAL_START] = TRIAL_START(""),
    [STO_Q_TRIAL_START_NODE] = TRIAL_START(" node_id = ?4,"),
    /* ?2 slot, ?3 node: a requeued trial only (started before), so one caller wins */
    [STO_Q_TRIAL_RESUME] =
        "UPDATE trials SET state = 0, slot = ?2, node_id = ?3 WHERE id = ?1 AND state = 5 AND started > 0",
    [STO_Q_TRIAL_ATTRS] = "SELECT user_attrs FROM trials WHERE id = ?1",
    /* ?2 user_attrs, ?3 note (NULL keeps either); any state */
    [STO_Q_TRIAL_ANNOTATE] =
        "UPDATE trials SET user_attrs = COALESCE(?2, user_attrs), note = COALESCE(?3, note) WHERE id = ?1",
    /* ?2 best epoch (< 0 keeps it), ?3 seconds to add. */
    [STO_Q_TRIAL_SET_TRAINING] =
        "UPDATE trials SET best_epoch = CASE WHEN ?2 >= 0 THEN ?2 ELSE best_epoch END,"
        " train_seconds = train_seconds + ?3 WHERE id = ?1",
    /* _NODE: ?5 the node writing (0: none): only runners write epochs, so
     * none lands once the trial left the node, even before another took it */
    [STO_Q_EPOCH_PUT] =
        "INSERT INTO epochs (trial_id, execution, epoch, metrics) VALUES (?1, ?2, ?3, ?4)"
        " ON CONFLICT (trial_id, execution, epoch) DO UPDATE SET metrics = excluded.metrics",
    [STO_Q_EPOCH_PUT_NODE] =
        "INSERT INTO epochs (trial_id, execution, epoch, metrics)"
        /* a trial of no node takes them from a node while it runs (an
         * external trial's reported vectors), not once requeued; the WHERE
         * also keeps SQLite's upsert unambiguous */
        " SELECT ?1, ?2, ?3, ?4 FROM trials WHERE id = ?1 AND"
        " (node_id = ?5 OR (node_id IS NULL AND (?5 = 0 OR state = 0)))"
        " ON CONFLICT (trial_id, execution, epoch) DO UPDATE SET metrics = excluded.metrics",
    /* a reported vector: the first one of a step stays, as its intermediate
     * value does (the no-op update still counts as the row written) */
    [STO_Q_EPOCH_PUT_FIRST_NODE] =
        "INSERT INTO epochs (trial_id, execution, epoch, metrics)"
        " SELECT ?1, ?2, ?3, ?4 FROM trials WHERE id = ?1 AND"
        " (node_id = ?5 OR (node_id IS NULL AND (?5 = 0 OR state = 0)))"
        " ON CONFLICT (trial_id, execution, epoch) DO UPDATE SET metrics = epochs.metrics",
    [STO_Q_EPOCHS_TRIAL] =
        "SELECT execution, epoch, metrics FROM epochs WHERE trial_id = ?1"
        " ORDER BY execution, epoch",
    [STO_Q_DATASET_INSERT] =
        "INSERT INTO datasets (name, format, path, meta, n_rows, bytes, created)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
    [STO_Q_DATASET_GET] = "SELECT " DATASET_COLS " FROM datasets WHERE id = ?1",
    [STO_Q_DATASET_GET_BY_NAME] = "SELECT " DATASET_COLS " FROM datasets WHERE name = ?1",
    [STO_Q_DATASET_LIST] = "SELECT " DATASET_COLS " FROM datasets ORDER BY id",
    [STO_Q_DATASET_DELETE] = "DELETE FROM datasets WHERE id = ?1",
    /* SQLite: the IMMEDIATE transaction already excludes every other writer */
    [STO_Q_DATASET_HOLD] = "SELECT 1 FROM datasets WHERE id = ?1",
    [STO_Q_DATASET_CLAIM] = "SELECT 1 FROM datasets WHERE id = ?1",

    [STO_Q_MODEL_INSERT] =
        "INSERT INTO models (study_id, trial_id, kind, state, spec, created) VALUES (?1, ?2, ?3, 0, ?4, ?5)"
        " RETURNING id",
    [STO_Q_MODEL_GET] = "SELECT " STO_MODEL_COLS " FROM models WHERE id = ?1",
    [STO_Q_MODEL_LIST] = "SELECT " STO_MODEL_COLS " FROM models WHERE study_id = ?1 AND (?2 < 0 OR kind = ?2)"
                         " ORDER BY id",
    [STO_Q_MODEL_NEXT_QUEUED] = "SELECT " STO_MODEL_COLS " FROM models WHERE state = 0 ORDER BY id LIMIT 1",
    /* ?3, ?7, ?2 (requeue): the node (schema v9), as for trials */
    [STO_Q_MODEL_START] =
        "UPDATE models SET state = 1, started = ?2, node_id = ?3 WHERE id = ?1 AND state IN (0, 1)",
    [STO_Q_MODEL_FINISH] = "UPDATE models SET state = ?2, result = ?3, path = ?4, error = ?5, finished = ?6"
                           " WHERE id = ?1 AND state IN (0, 1) AND " NODE_OWNS("?7"),
    /* ?1 now, ?2 the node. The outer state test repeats the inner one: on
     * PostgreSQL the row is re-read once its lock is ours. */
    [STO_Q_MODEL_CLAIM] = MODEL_CLAIM(""),
    [STO_Q_MODELS_REQUEUE] = "UPDATE models SET state = 0, node_id = NULL WHERE state = 1",
    [STO_Q_MODEL_REQUEUE] =
        "UPDATE models SET state = 0, node_id = NULL WHERE id = ?1 AND state = 1 AND " NODE_OWNS("?2"),

    [STO_Q_EVENT_LAST] = "SELECT COALESCE(MAX(id), 0) FROM events WHERE study_id = ?1",
    [STO_Q_EVENT_INSERT] =
        "INSERT INTO events (study_id, trial_id, type, data, created)"
        " VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
    /* An event written inside the transaction of the change it describes
     * (?1 study / trial / model id, ?2 type, ?3 data, ?4 now); the study (and
     * trial) come from the row, so an event about a row that is gone is not
     * stored (no row inserted). */
    [STO_Q_EVENT_OF_STUDY] =
        "INSERT INTO events (study_id, trial_id, type, data, created)"
        " SELECT id, NULL, ?2, ?3, ?4 FROM studies WHERE id = ?1 RETURNING study_id",
    [STO_Q_EVENT_OF_TRIAL] =
        "INSERT INTO events (study_id, trial_id, type, data, created)"
        " SELECT study_id, id, ?2, ?3, ?4 FROM trials WHERE id = ?1 RETURNING study_id",
    [STO_Q_EVENT_OF_MODEL] =
        "INSERT INTO events (study_id, trial_id, type, data, created)"
        " SELECT study_id, CASE WHEN trial_id > 0 THEN trial_id END, ?2, ?3, ?4 FROM models WHERE id = ?1"
        " RETURNING study_id",
    [STO_Q_EVENT_LIST] =
        "SELECT id, study_id, trial_id, type, data, created FROM events"
        " WHERE study_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3",

    /* ---- schema v9: nodes, the node of a running job, study changes ---- */
    [STO_Q_NODE_INSERT] = NODE_INSERT("?3"),
    [STO_Q_NODE_RENAME] = "UPDATE nodes SET name = ?2 WHERE id = ?1",
    [STO_Q_NODE_EXISTS] = "SELECT 1 FROM nodes WHERE id = ?1",
    [STO_Q_NODE_LIVE] = "SELECT 1 FROM nodes WHERE id = ?1 AND ended = 0",
    [STO_Q_NODE_BEAT] = NODE_BEAT("?2"),
    [STO_Q_NODE_END] = NODE_END("?2"),
    [STO_Q_NODES_END_STALE] = NODES_END_STALE("?1"),
    [STO_Q_NODE_LIST] = NODE_LIST("?1"),
    /* a running job's runner asks whether the trial is still its node's */
    [STO_Q_TRIAL_OWNER] = "SELECT state, COALESCE(node_id, 0) FROM trials WHERE id = ?1",
    /* Under the study's row lock: its next number and its running trials
     * (two indexed lookups), for max_trials and parallel_trials. */
    [STO_Q_TRIAL_RUN_COUNTS] =
        "SELECT (SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE study_id = ?1),"
        " (SELECT COUNT(*) FROM trials WHERE study_id = ?1 AND state = 0)",
    /* a trial created running: ?4 lease (0 none), ?5 slot, ?6 node (NULL none) */
    [STO_Q_TRIAL_INSERT_RUN] = TRIAL_INSERT_RUN("", ""),
    [STO_Q_TRIAL_INSERT_RUN_AT] = TRIAL_INSERT_RUN_AT("", ""),
    /* Running trials whose node ended (found dead, or stopped), through the
     * partial index of running trials; ?1 nonzero adds those of no node
     * and no lease (a schema before v9 ran them: start-up only). */
    [STO_Q_TRIALS_ORPHANED] =
        "SELECT " STO_TRIAL_COLS " FROM trials t WHERE t.state = 0 AND"
        " (EXISTS (SELECT 1 FROM nodes n WHERE n.id = t.node_id AND n.ended > 0)"
        " OR (?1 <> 0 AND t.node_id IS NULL AND t.lease_expires = 0))"
        " ORDER BY t.study_id, t.number",
    /* ?2 the node it ran on (0: none): only while it still runs there, so
     * among nodes reclaiming together one does it */
    [STO_Q_TRIAL_RECLAIM] =
        "UPDATE trials SET state = 5, lease_expires = 0, node_id = NULL"
        " WHERE id = ?1 AND state = 0 AND COALESCE(node_id, 0) = ?2",
    /* ?3 error, ?4 now */
    [STO_Q_TRIAL_RECLAIM_FAIL] =
        "UPDATE trials SET state = 3, error = ?3, finished = ?4, lease_expires = 0"
        " WHERE id = ?1 AND state = 0 AND COALESCE(node_id, 0) = ?2",
    [STO_Q_MODELS_RECLAIM] =
        "UPDATE models SET state = 0, node_id = NULL WHERE state = 1 AND"
        " (EXISTS (SELECT 1 FROM nodes n WHERE n.id = models.node_id AND n.ended > 0)"
        " OR (?1 <> 0 AND node_id IS NULL))",
    /* the models MODELS_RECLAIM would queue again, by id */
    [STO_Q_MODELS_ORPHANED] =
        "SELECT " STO_MODEL_COLS " FROM models WHERE state = 1 AND"
        " (EXISTS (SELECT 1 FROM nodes n WHERE n.id = models.node_id AND n.ended > 0)"
        " OR (?1 <> 0 AND node_id IS NULL)) ORDER BY id",
    /* A study's creation or state change takes the counter's row (held
     * to the commit: changes commit in counter order) and records it. */
    [STO_Q_STUDY_CHANGES_BUMP] = "UPDATE study_changes SET seq = seq + 1",
    [STO_Q_STUDY_CHANGED] = "UPDATE studies SET changed = (SELECT seq FROM study_changes) WHERE id = ?1",
    [STO_Q_STUDY_CHANGES_SEQ] = "SELECT seq FROM study_changes",
    [STO_Q_STUDIES_CHANGED] = "SELECT " STO_STUDY_COLS " FROM studies WHERE changed > ?1 ORDER BY changed",
    /* ?4 the states it may leave, a bit mask (1 << state) */
    [STO_Q_STUDY_TRANSITION] =
        "UPDATE studies SET state = ?2, updated = ?3 WHERE id = ?1 AND ((?4 >> CAST(state AS INTEGER)) & 1) = 1",
};

/* PostgreSQL's text where it differs from stmt_sql (NULL: the same). */
/* pg_advisory_xact_lock's first key for a study name's lock (the second
 * is the name's hash): any constant of our own, apart from schema_pg.c's
 * one-key migration lock */
#define NAME_LOCK_CLASS "6844016"

static const char *const stmt_sql_pg[STO_Q_N] = {
    /* READ COMMITTED: each statement sees what committed before it began;
     * races are decided by row locks and the statements' WHERE clauses */
    [STO_Q_BEGIN] = "BEGIN",
    [STO_Q_STUDY_LOCK] = "SELECT 1 FROM studies WHERE id = ?1 FOR UPDATE",
    /* user_attrs are read, merged and written back in one transaction: the
     * read locks the row, so two nodes' merges of one study or trial run
     * one after the other and neither loses the other's keys */
    [STO_Q_STUDY_ATTRS] = "SELECT user_attrs FROM studies WHERE id = ?1 FOR NO KEY UPDATE",
    [STO_Q_TRIAL_ATTRS] = "SELECT user_attrs FROM trials WHERE id = ?1 FOR NO KEY UPDATE",
    /* get-or-create: nodes creating one name take its lock in turn, so the
     * second finds the first's study (the lookup is the next statement: a
     * statement sees what committed before it began) */
    [STO_Q_STUDY_NAME_LOCK] = "SELECT pg_advisory_xact_lock(" NAME_LOCK_CLASS ", hashtext(?1::text))",
    /* The UPDATE's row lock (FOR NO KEY UPDATE) excludes every other
     * locker and event insert of the study as FOR UPDATE did. */
    [STO_Q_STUDY_LOCK_TOUCH] =
        "UPDATE studies SET updated = " GREATEST("updated", "?2") ", seq = seq + 1 WHERE id = ?1 RETURNING 1",
    /* A new trial is stamped by its insert with the seq its transaction's
     * sto_db_lock_touch_study drew. */
    [STO_Q_TRIAL_INSERT] = TRIAL_INSERT(", seq", LOCKED_SEQ),
    [STO_Q_TRIAL_INSERT_AT] = TRIAL_INSERT_AT(", seq", LOCKED_SEQ),
    [STO_Q_TRIAL_INSERT_RUN] = TRIAL_INSERT_RUN(", seq", LOCKED_SEQ),
    [STO_Q_TRIAL_INSERT_RUN_AT] = TRIAL_INSERT_RUN_AT(", seq", LOCKED_SEQ),
    [STO_Q_TRIAL_ENQUEUE] = TRIAL_ENQUEUE(", seq", LOCKED_SEQ),
    [STO_Q_TRIAL_PBT_BREED] = TRIAL_PBT_BREED(", seq", LOCKED_SEQ),
    [STO_Q_TRIAL_ADD] = TRIAL_ADD(", seq", LOCKED_SEQ),
    [STO_Q_STUDY_TOUCH] = "UPDATE studies SET updated = " GREATEST("updated", "?2") ", seq = seq + 1 WHERE id = ?1",
    /* A touch by trial draws the study's next change number under its
     * row lock and stamps the trial with it (schema v10). */
    [STO_Q_STUDY_TOUCH_BY_TRIAL] =
        "WITH s AS (UPDATE studies SET updated = " GREATEST("updated", "?2") ", seq = seq + 1"
        " WHERE id = (SELECT study_id FROM trials WHERE id = ?1) RETURNING seq)"
        " UPDATE trials SET seq = s.seq FROM s WHERE trials.id = ?1",
    /* Events: the study's row is locked before the id is drawn (a study's
     * event ids commit in order) and NOTIFY hpo_events tells listeners at
     * the commit (db_internal.h). No row: the study (trial, model) is gone. */
    [STO_Q_EVENT_INSERT] =
        "WITH e AS (INSERT INTO events (study_id, trial_id, type, data, created)"
        " SELECT id, ?2, ?3, ?4, ?5 FROM studies WHERE id = ?1 FOR NO KEY UPDATE RETURNING id, study_id)"
        " SELECT id, pg_notify('hpo_events', study_id::text) FROM e",
    [STO_Q_EVENT_OF_STUDY] =
        "WITH e AS (INSERT INTO events (study_id, trial_id, type, data, created)"
        " SELECT id, NULL, ?2, ?3, ?4 FROM studies WHERE id = ?1 FOR NO KEY UPDATE RETURNING study_id)"
        " SELECT pg_notify('hpo_events', study_id::text) FROM e",
    [STO_Q_EVENT_OF_TRIAL] =
        "WITH e AS (INSERT INTO events (study_id, trial_id, type, data, created)"
        " SELECT s.id, t.id, ?2, ?3, ?4 FROM trials t JOIN studies s ON s.id = t.study_id WHERE t.id = ?1"
        " FOR NO KEY UPDATE OF s RETURNING study_id)"
        " SELECT pg_notify('hpo_events', study_id::text) FROM e",
    [STO_Q_EVENT_OF_MODEL] =
        "WITH e AS (INSERT INTO events (study_id, trial_id, type, data, created)"
        " SELECT s.id, CASE WHEN m.trial_id > 0 THEN m.trial_id END, ?2, ?3, ?4"
        " FROM models m JOIN studies s ON s.id = m.study_id WHERE m.id = ?1"
        " FOR NO KEY UPDATE OF s RETURNING study_id)"
        " SELECT pg_notify('hpo_events', study_id::text) FROM e",
    /* a model another node is claiming is skipped, not waited for */
    [STO_Q_MODEL_CLAIM] = MODEL_CLAIM(" FOR UPDATE SKIP LOCKED"),
    /* a node starting a job holds its row (shared) to the commit: another
     * node ending it waits, and then sees the job among its orphans */
    [STO_Q_NODE_LIVE] = "SELECT 1 FROM nodes WHERE id = ?1 AND ended = 0 FOR SHARE",
    /* A study or model inserted on a dataset holds its row (shared) to the
     * commit; a delete takes it exclusively before it reads who uses the
     * dataset: whichever locks second sees what the first committed (the
     * insert finds no row, the delete finds the new user). */
    [STO_Q_DATASET_HOLD] = "SELECT 1 FROM datasets WHERE id = ?1 FOR SHARE",
    [STO_Q_DATASET_CLAIM] = "SELECT 1 FROM datasets WHERE id = ?1 FOR UPDATE",
    /* the nodes' times are the server's clock, the same for every node */
    [STO_Q_NODE_INSERT] = NODE_INSERT(PG_NOW),
    [STO_Q_NODE_BEAT] = NODE_BEAT(PG_NOW),
    [STO_Q_NODE_END] = NODE_END(PG_NOW),
    [STO_Q_NODES_END_STALE] = NODES_END_STALE(PG_NOW),
    [STO_Q_NODE_LIST] = NODE_LIST(PG_NOW),
};

/* ---- helpers shared by the layer ---- */

void sto_db_lock(sto_db *db) { pthread_mutex_lock(&db->mu); }
void sto_db_unlock(sto_db *db) { pthread_mutex_unlock(&db->mu); }

int sto_db_is_pg(const sto_db *db) { return db->conn->dialect == STO_SQL_PG; }

static _Thread_local char error_reason[240];

const char *sto_error_reason(void) { return error_reason; }
void sto_error_reason_clear(void) { error_reason[0] = 0; }

int sto_db_error(sto_db *db, const char *what) {
    const char *why = sto_sql_errmsg(db->conn);
    HPO_ERROR("storage: %s: %s", what, why);
    snprintf(error_reason, sizeof error_reason, "%.60s: %.170s", what, why);
    for (char *c = error_reason; *c; c++) /* PostgreSQL's come in lines */
        if (*c == '\n' || *c == '\r' || *c == '\t') *c = ' ';
    size_t n = strlen(error_reason);
    while (n > 0 && error_reason[n - 1] == ' ') error_reason[--n] = 0;
    return sto_sql_errkind_of(db->conn) == STO_SQL_EFULL ? HPO_ENOSPACE : HPO_ESTORAGE;
}

int sto_db_is_fk_error(sto_db *db) { return sto_sql_errkind_of(db->conn) == STO_SQL_EFK; }

static int run_simple(sto_db *db, int q, const char *what) {
    sto_stmt *s = db->q[q];
    int rc = sto_step(s) == STO_DONE ? 0 : sto_db_error(db, what);
    sto_db_done(s);
    return rc;
}

int sto_db_begin(sto_db *db) { return run_simple(db, STO_Q_BEGIN, "begin"); }

int sto_db_commit(sto_db *db) { return run_simple(db, STO_Q_COMMIT, "commit"); }

void sto_db_commit_with_next(sto_db *db) { sto_sql_pg_commit_with_next(db->conn); }

void sto_db_rollback(sto_db *db) {
    if (!sto_sql_in_tx(db->conn)) return; /* no transaction open */
    run_simple(db, STO_Q_ROLLBACK, "rollback");
}

/* The first step of s, bound by the caller: 0 with a row, HPO_ENOTFOUND
 * without, else the error (what names it); s is done after. */
static int first_row(sto_db *db, sto_stmt *s, const char *what) {
    int src = sto_step(s);
    int rc = src == STO_ROW ? 0 : src == STO_DONE ? HPO_ENOTFOUND : sto_db_error(db, what);
    sto_db_done(s);
    return rc;
}

int sto_db_exists(sto_db *db, int q, int64_t id) {
    sto_stmt *s = db->q[q];
    sto_bind_int64(s, 1, id);
    return first_row(db, s, "exists");
}

int sto_db_hold_dataset(sto_db *db, int64_t dataset_id) {
    if (dataset_id <= 0) return 0;
    int rc = sto_db_exists(db, STO_Q_DATASET_HOLD, dataset_id);
    return rc == HPO_ENOTFOUND ? HPO_ESTALE : rc;
}

int sto_db_lock_study(sto_db *db, int64_t study_id) { return sto_db_exists(db, STO_Q_STUDY_LOCK, study_id); }

int sto_db_lock_touch_study(sto_db *db, int64_t study_id, double now) {
    sto_stmt *s = db->q[STO_Q_STUDY_LOCK_TOUCH];
    sto_bind_int64(s, 1, study_id);
    sto_bind_real(s, 2, now);
    return first_row(db, s, "study lock");
}

int sto_db_insert(sto_db *db, sto_stmt *s, const char *what, int64_t *id, int64_t *number) {
    int src = sto_step(s), rc = 0;
    if (src == STO_ROW) {
        *id = sto_col_int64(s, 0);
        if (number) *number = sto_col_int64(s, 1);
    } else {
        sto_sql_errkind k = sto_sql_errkind_of(db->conn);
        rc = src == STO_DONE         ? HPO_ENOTFOUND /* INSERT ... SELECT found no parent */
             : k == STO_SQL_EFK     ? HPO_ENOTFOUND
             : k == STO_SQL_EUNIQUE ? HPO_ECONFLICT
                                    : sto_db_error(db, what);
    }
    sto_db_done(s);
    return rc;
}

void sto_db_read_trial(sto_stmt *s, void *out) {
    sto_trial *t = out;
    memset(t, 0, sizeof *t);
    t->id = sto_col_int64(s, 0);
    t->study_id = sto_col_int64(s, 1);
    t->number = sto_col_int64(s, 2);
    t->state = (sto_trial_state)sto_col_int(s, 3);
    t->params = sto_col_text(s, 4);
    t->value = sto_col_real(s, 5);
    t->value_std = sto_col_real(s, 6);
    t->value_n = sto_col_int(s, 7);
    t->last_step = sto_col_int64(s, 8);
    t->last_value = sto_col_real(s, 9);
    t->created = sto_col_double(s, 10);
    t->started = sto_col_double(s, 11);
    t->finished = sto_col_double(s, 12);
    t->lease_expires = sto_col_double(s, 13);
    t->error = sto_col_text(s, 14);
    t->best_epoch = sto_col_int64(s, 15);
    t->slot = sto_col_text(s, 16);
    t->train_seconds = sto_col_double(s, 17);
    t->user_attrs = sto_col_text(s, 18);
    t->note = sto_col_text(s, 19);
    t->values_json = sto_col_text(s, 20);
    t->metrics_json = sto_col_text(s, 21);
    t->lineage = sto_col_text(s, 22);
    t->pbt_epoch = sto_col_int64(s, 23);
    t->node_id = sto_col_int64(s, 24); /* NULL reads as 0 */
    t->seq = sto_col_int64(s, 25);
}

int sto_db_trial_conflict(sto_db *db, int64_t trial_id) {
    int rc = sto_db_exists(db, STO_Q_TRIAL_STATE, trial_id);
    return rc == 0 ? HPO_ECONFLICT : rc;
}

int sto_db_set_values(sto_db *db, int64_t trial_id, const char *values_json, const char *metrics_json) {
    if (!values_json && !metrics_json) return 0;
    sto_stmt *s = db->q[STO_Q_TRIAL_SET_VALUES];
    sto_bind_int64(s, 1, trial_id);
    sto_bind_text(s, 2, values_json);
    sto_bind_text(s, 3, metrics_json);
    int rc = sto_step(s) == STO_DONE ? 0 : sto_db_error(db, "trial values");
    sto_db_done(s);
    return rc;
}

int sto_db_node_live(sto_db *db) {
    if (db->node_id <= 0) return 0; /* no node: nothing to hold */
    int rc = sto_db_exists(db, STO_Q_NODE_LIVE, db->node_id);
    return rc == HPO_ENOTFOUND ? HPO_ECONFLICT : rc;
}

sto_stmt *sto_db_node_stmt(sto_db *db, int q_node, int q_plain, int param, int64_t node) {
    sto_stmt *s = db->q[q_node];
    if (!s) return db->q[q_plain];
    sto_bind_id(s, param, node);
    return s;
}

sto_stmt *sto_db_stmt_since(sto_db *db, int q_new, int q_old) { return db->q[q_new] ? db->q[q_new] : db->q[q_old]; }

int sto_db_study_changed(sto_db *db, int64_t id) {
    if (!db->q[STO_Q_STUDY_CHANGED]) return 0; /* a schema before v9 (tests): no counter */
    int rc = run_simple(db, STO_Q_STUDY_CHANGES_BUMP, "study changes");
    if (rc) return rc;
    sto_stmt *s = db->q[STO_Q_STUDY_CHANGED];
    sto_bind_int64(s, 1, id);
    rc = sto_step(s) == STO_DONE ? 0 : sto_db_error(db, "study changed");
    sto_db_done(s);
    return rc;
}

int sto_db_touch_study(sto_db *db, int q, int64_t id, double now) {
    sto_stmt *s = db->q[q];
    sto_bind_int64(s, 1, id);
    sto_bind_real(s, 2, now);
    int rc = sto_step(s) == STO_DONE ? 0 : sto_db_error(db, "study updated");
    sto_db_done(s);
    return rc;
}

int sto_db_touch_trial(sto_db *db, int64_t study_id, int64_t trial_id, double now) {
    return sto_db_is_pg(db) ? sto_db_touch_study(db, STO_Q_STUDY_TOUCH_BY_TRIAL, trial_id, now)
                            : sto_db_touch_study(db, STO_Q_STUDY_TOUCH, study_id, now);
}

int sto_shared(const sto_db *db) { return db && sto_db_is_pg(db); }

int sto_db_exec_id(sto_db *db, int q, int64_t id, const char *what) {
    sto_db_lock(db);
    sto_stmt *s = db->q[q];
    int rc = sto_db_begin(db);
    if (rc == 0) {
        sto_bind_int64(s, 1, id);
        if (sto_step(s) != STO_DONE) rc = sto_db_error(db, what);
        else if (sto_sql_changes(db->conn) == 0) rc = HPO_ENOTFOUND;
    }
    sto_db_done(s);
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

/* ---- reading rows ---- */

int sto_db_row(sto_db *db, sto_stmt *s, sto_db_row_fn read, void *out, const char *what) {
    int src = sto_step(s), rc = 0;
    if (src == STO_ROW)
        read(s, out);
    else
        rc = src == STO_DONE ? HPO_ENOTFOUND : sto_db_error(db, what);
    sto_db_done(s);
    return rc;
}

int sto_db_rows(sto_db *db, sto_stmt *s, size_t elem_size, sto_db_row_fn read, void (*clear)(void *),
                const char *what, void **out, size_t *n_out) {
    char *list = NULL;
    size_t n = 0, cap = 0;
    int src, rc = 0;
    while ((src = sto_step(s)) == STO_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            list = hpo_xrealloc(list, cap * elem_size);
        }
        memset(list + n * elem_size, 0, elem_size);
        read(s, list + n++ * elem_size);
    }
    if (src != STO_DONE) rc = sto_db_error(db, what);
    sto_db_done(s);
    if (rc) {
        for (size_t i = 0; i < n; i++) clear(list + i * elem_size);
        free(list);
        return rc;
    }
    *out = list;
    *n_out = n;
    return 0;
}

/* ---- SQL text without parameters (migrations, tests) ---- */

static int exec(sto_db *db, const char *sql, const char *what) {
    int rc = sto_sql_exec(db->conn, sql);
    if (rc) HPO_ERROR("storage: %s: %s", what, sto_sql_errmsg(db->conn));
    return rc;
}

/* The single integer answer of a query; HPO_ENOTFOUND without a row. */
static int query_int(sto_db *db, const char *sql, int64_t *out) {
    sto_stmt *s = NULL;
    int rc = sto_sql_prepare(db->conn, sql, &s);
    if (rc == 0) {
        int src = sto_step(s);
        if (src == STO_ROW)
            *out = sto_col_int64(s, 0);
        else
            rc = src == STO_DONE ? HPO_ENOTFOUND : src;
    }
    if (rc && rc != HPO_ENOTFOUND) HPO_ERROR("storage: %s: %s", sql, sto_sql_errmsg(db->conn));
    sto_stmt_finalize(s);
    return rc;
}

int sto_db_exec_sql(sto_db *db, const char *sql) {
    sto_db_lock(db);
    int rc = exec(db, sql, "exec");
    sto_db_unlock(db);
    return rc;
}

int sto_db_query_int(sto_db *db, const char *sql, int64_t *out) {
    sto_db_lock(db);
    int rc = query_int(db, sql, out);
    sto_db_unlock(db);
    return rc;
}

/* ---- open / migrate / close ---- */

/* Runs the missing steps. Foreign keys are off meanwhile (the pragma is a
 * no-op inside a transaction, so it is set around it): a step that rebuilds
 * a table drops the old one, and with foreign keys on that DROP would
 * delete every row referring to it (ON DELETE CASCADE). */
static int migrate_steps(sto_db *db, const char *path, int target);

static int migrate(sto_db *db, const char *path, int target) {
    int rc = exec(db, "PRAGMA foreign_keys = OFF", "migrate: foreign_keys off");
    if (rc) return rc;
    rc = migrate_steps(db, path, target);
    int on = exec(db, "PRAGMA foreign_keys = ON", "migrate: foreign_keys on");
    return rc ? rc : on;
}

static int migrate_steps(sto_db *db, const char *path, int target) {
    int rc = exec(db, "BEGIN IMMEDIATE", "migrate: begin");
    if (rc) return rc;
    int64_t version = 0;
    rc = query_int(db, "PRAGMA user_version", &version);
    if (rc) goto fail;
    if (version > sto_schema_version()) {
        HPO_ERROR("storage: %s has schema version %lld, newer than this build's %d; "
                  "refusing to open it",
                  path, (long long)version, sto_schema_version());
        rc = HPO_ESTORAGE;
        goto fail;
    }
    for (int64_t v = version; v < target; v++) {
        rc = exec(db, migrations[v], "migrate");
        if (rc) goto fail;
    }
    if (version < target) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", target);
        rc = exec(db, sql, "migrate: user_version");
        if (rc) goto fail;
    }
    rc = exec(db, "COMMIT", "migrate: commit");
    if (rc) goto fail;
    if (version == 0)
        HPO_DEBUG("storage: %s: created schema version %d", path, target);
    else if (version < target)
        HPO_INFO("storage: %s migrated from schema version %lld to %d", path, (long long)version,
                 target);
    return 0;
fail:
    if (sto_sql_in_tx(db->conn)) exec(db, "ROLLBACK", "migrate: rollback");
    return rc;
}

static void db_free(sto_db *db) {
    if (db->conn) db->conn->closing = 1; /* the statements go with the connection */
    for (int i = 0; i < STO_Q_N; i++) sto_stmt_finalize(db->q[i]);
    sto_sql_close(db->conn);
    pthread_mutex_destroy(&db->mu);
    free(db->target);
    free(db);
}

/* SQLite's PRAGMA quick_check (every page and record well-formed; not the
 * slower cross-check of indexes against their tables): 0 when it says ok;
 * HPO_EFORMAT for a damaged file (a bad sector or copy, a stale -wal file
 * replayed over a restored backup), err holding SQLite's first complaint;
 * another storage error as it is. Before the migration, which would write
 * to a damaged file, and the damaged file is closed without a write (a
 * checkpoint at close would merge a stale -wal into a restored backup).
 * It reads the whole file: ~20 ms per MB on the dev VM (0.1-0.3 s for
 * 10,000 imported trials with 20 intermediate values each, 7 MB). */
static int quick_check(sto_db *db, const char *path, hpo_error *err) {
    sto_stmt *s = NULL;
    char first[256] = "";
    int rc = sto_sql_prepare(db->conn, "PRAGMA quick_check(1)", &s);
    if (rc == 0) {
        int src = sto_step(s);
        if (src == STO_ROW) {
            const char *t = sto_col_text_ref(s, 0);
            snprintf(first, sizeof first, "%s", t ? t : "");
        } else if (src != STO_DONE) {
            rc = src;
        }
    }
    if (rc && sto_sql_errkind_of(db->conn) == STO_SQL_ECORRUPT) { /* too damaged to check */
        snprintf(first, sizeof first, "%.200s", sto_sql_errmsg(db->conn));
        rc = 0;
    }
    sto_stmt_finalize(s);
    if (rc) {
        HPO_ERROR("storage: %s: quick_check: %s", path, sto_sql_errmsg(db->conn));
        return rc;
    }
    if (!first[0] || strcmp(first, "ok") == 0) return 0;
    for (char *c = first; *c; c++)
        if (*c == '\n' || *c == '\t') *c = ' '; /* its lines ("*** in database main ***", then the page) */
    HPO_ERROR("storage: %s is damaged: SQLite's quick_check says: %s", path, first);
    sto_sql_sqlite_leave_untouched(db->conn); /* the close must not merge a stale -wal into it */
    return hpo_fail(err, HPO_EFORMAT, "", "SQLite's quick_check says: %s", first);
}

static int open_at(const char *path, sto_sync sync, int target_version, sto_db **out, hpo_error *err) {
    if (!path || !out || target_version < 1 || target_version > sto_schema_version())
        return HPO_EINVAL;
    int pg = sto_sql_is_pg_url(path);
    if (pg && target_version != sto_schema_version()) return HPO_EINVAL; /* old schemas: SQLite only */
    int rc;
    sto_db *db = hpo_xcalloc(1, sizeof *db);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&db->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    db->target = hpo_strdup(path);
    rc = pg ? sto_sql_open_pg(path, &db->conn) : sto_sql_open_sqlite(path, sync == STO_SYNC_FULL, &db->conn);
    if (rc) goto fail;
    if (!pg && (rc = quick_check(db, path, err))) goto fail;
    rc = pg ? sto_pg_migrate(db->conn, sto_schema_version()) : migrate(db, path, target_version);
    if (rc) goto fail;
    for (int i = 0; i < STO_Q_N; i++) {
        const char *sql = pg && stmt_sql_pg[i] ? stmt_sql_pg[i] : stmt_sql[i];
        if (!sql) { /* a STO_Q_* added without its SQL */
            HPO_ERROR("storage: statement #%d has no SQL", i);
            rc = HPO_EINTERNAL;
            goto fail;
        }
        if (sto_sql_prepare(db->conn, sql, &db->q[i])) {
            if (target_version < sto_schema_version()) {
                /* An old schema (tests only): statements about columns or
                 * tables of later steps stay NULL, see db_internal.h. */
                HPO_DEBUG("storage: v%d: statement #%d left out: %s", target_version, i,
                          sto_sql_errmsg(db->conn));
                continue;
            }
            HPO_ERROR("storage: prepare #%d: %s", i, sto_sql_errmsg(db->conn));
            rc = HPO_ESTORAGE;
            goto fail;
        }
    }
    *out = db;
    return 0;
fail:
    db_free(db);
    return rc;
}

int sto_db_open_at(const char *path, sto_sync sync, int target_version, sto_db **out) {
    return open_at(path, sync, target_version, out, NULL);
}

int sto_is_database_url(const char *path) { return sto_sql_is_pg_url(path); }

size_t sto_sqlite_path_max(void) { return sto_sql_sqlite_path_max(); }

int sto_set_stall_timeout(sto_db *db, double seconds) {
    if (!db || !(seconds >= 0) || seconds > 86400) return HPO_EINVAL;
    sto_db_lock(db);
    int rc = sto_sql_pg_set_idle_timeout(db->conn, (int)(seconds * 1000));
    if (rc) HPO_ERROR("storage: idle transaction timeout: %s", sto_sql_errmsg(db->conn));
    sto_db_unlock(db);
    return rc;
}

int sto_reopen(sto_db *db, sto_db **out) {
    if (!db || !out) return HPO_EINVAL;
    return sto_open(db->target, STO_SYNC_NORMAL, out);
}

int sto_open(const char *path, sto_sync sync, sto_db **out) { return sto_open_why(path, sync, out, NULL); }

int sto_open_why(const char *path, sto_sync sync, sto_db **out, hpo_error *err) {
    return open_at(path, sync, sto_schema_version(), out, err);
}

void sto_close(sto_db *db) {
    if (db) db_free(db);
}
