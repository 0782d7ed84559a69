/* schema_pg.c - PostgreSQL's schema and its migrations (see db_internal.h).
 *
 * The same schema versions as SQLite's (db.c, sto_schema_version), so a
 * change is one step appended to both lists; PostgreSQL's list starts at
 * version 6, the first it was supported at, as one step that creates the
 * v6 schema whole (SQLite's history has nothing to replay here). The
 * version is the one row of hpo_schema. Append only, like SQLite's.
 *
 * Types: BIGINT for every integer (SQLite's INTEGER is 64-bit), DOUBLE
 * PRECISION for REAL (NULL means NaN), TEXT for JSON text. Ids are
 * GENERATED ALWAYS AS IDENTITY: a sequence never hands out a number twice,
 * which is the promise AUTOINCREMENT keeps on SQLite (ids never reused).
 *
 * All missing steps run in one transaction, after pg_advisory_xact_lock:
 * nodes starting together wait for the first one's migration, then find
 * the schema current. */
#include "db_internal.h"

#include <stdio.h>

typedef struct {
    int version; /* the step brings the database to this version */
    const char *sql;
} pg_step;

static const pg_step steps[] = {
    {6,
     "CREATE TABLE studies ("
     "  id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
     "  name       TEXT NOT NULL,"
     "  spec       TEXT NOT NULL,"
     "  state      BIGINT NOT NULL DEFAULT 0,"
     "  created    DOUBLE PRECISION NOT NULL,"
     "  updated    DOUBLE PRECISION NOT NULL,"
     "  user_attrs TEXT NOT NULL DEFAULT '{}',"
     "  note       TEXT NOT NULL DEFAULT ''"
     ");"
     "CREATE INDEX studies_name ON studies (name, id);"
     "CREATE TABLE trials ("
     "  id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
     "  study_id      BIGINT NOT NULL REFERENCES studies(id) ON DELETE CASCADE,"
     "  number        BIGINT NOT NULL,"
     "  state         BIGINT NOT NULL,"
     "  params        TEXT NOT NULL,"
     "  value         DOUBLE PRECISION,"
     "  value_std     DOUBLE PRECISION,"
     "  value_n       BIGINT NOT NULL DEFAULT 0,"
     "  last_step     BIGINT NOT NULL DEFAULT -1,"
     "  last_value    DOUBLE PRECISION,"
     "  created       DOUBLE PRECISION NOT NULL,"
     "  started       DOUBLE PRECISION NOT NULL DEFAULT 0,"
     "  finished      DOUBLE PRECISION NOT NULL DEFAULT 0,"
     "  lease_expires DOUBLE PRECISION NOT NULL DEFAULT 0,"
     "  error         TEXT,"
     "  best_epoch    BIGINT NOT NULL DEFAULT 0,"
     "  slot          TEXT,"
     "  train_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,"
     "  user_attrs    TEXT NOT NULL DEFAULT '{}',"
     "  note          TEXT NOT NULL DEFAULT '',"
     "  UNIQUE (study_id, number)"
     ");"
     "CREATE INDEX trials_study_state ON trials (study_id, state);"
     "CREATE INDEX trials_study_value ON trials (study_id, value);"
     "CREATE INDEX trials_lease ON trials (lease_expires) WHERE state = 0 AND lease_expires > 0;"
     "CREATE TABLE intermediates ("
     "  trial_id BIGINT NOT NULL REFERENCES trials(id) ON DELETE CASCADE,"
     "  step     BIGINT NOT NULL,"
     "  value    DOUBLE PRECISION,"
     "  PRIMARY KEY (trial_id, step)"
     ");"
     "CREATE TABLE events ("
     "  id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
     "  study_id BIGINT NOT NULL REFERENCES studies(id) ON DELETE CASCADE,"
     "  trial_id BIGINT,"
     "  type     TEXT NOT NULL,"
     "  data     TEXT NOT NULL,"
     "  created  DOUBLE PRECISION NOT NULL"
     ");"
     "CREATE INDEX events_study_id ON events (study_id, id);"
     "CREATE TABLE epochs ("
     "  trial_id  BIGINT NOT NULL REFERENCES trials(id) ON DELETE CASCADE,"
     "  execution BIGINT NOT NULL,"
     "  epoch     BIGINT NOT NULL,"
     "  metrics   TEXT NOT NULL,"
     "  PRIMARY KEY (trial_id, execution, epoch)"
     ");"
     "CREATE TABLE datasets ("
     "  id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
     "  name    TEXT NOT NULL UNIQUE,"
     "  format  TEXT NOT NULL,"
     "  path    TEXT NOT NULL,"
     "  meta    TEXT NOT NULL,"
     "  n_rows  BIGINT NOT NULL,"
     "  bytes   BIGINT NOT NULL,"
     "  created DOUBLE PRECISION NOT NULL"
     ");"
     "CREATE TABLE models ("
     "  id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
     "  study_id BIGINT NOT NULL REFERENCES studies(id) ON DELETE CASCADE,"
     "  trial_id BIGINT,"
     "  kind     BIGINT NOT NULL,"
     "  state    BIGINT NOT NULL DEFAULT 0,"
     "  spec     TEXT NOT NULL,"
     "  result   TEXT,"
     "  path     TEXT,"
     "  error    TEXT,"
     "  created  DOUBLE PRECISION NOT NULL,"
     "  started  DOUBLE PRECISION NOT NULL DEFAULT 0,"
     "  finished DOUBLE PRECISION NOT NULL DEFAULT 0"
     ");"
     "CREATE INDEX models_study ON models (study_id, kind);"
     "CREATE INDEX models_state ON models (state, id);"},
    /* v7: a multi-objective trial's values and constraint metrics (JSON) */
    {7,
     "ALTER TABLE trials ADD COLUMN values_json TEXT;"
     "ALTER TABLE trials ADD COLUMN metrics_json TEXT;"},
    /* v8: population-based training: a bred trial's lineage (JSON) and the
     * last boundary a member was ranked at */
    {8,
     "ALTER TABLE trials ADD COLUMN lineage TEXT;"
     "ALTER TABLE trials ADD COLUMN pbt_epoch BIGINT NOT NULL DEFAULT 0;"},
    /* v9: the nodes sharing the database, the node running a trial or a
     * model job, the studies' change counter (db.c's step 8 -> 9 says more) */
    {9,
     "CREATE TABLE nodes ("
     "  id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
     "  ident      TEXT NOT NULL,"
     "  name       TEXT NOT NULL,"
     "  started    DOUBLE PRECISION NOT NULL,"
     "  heartbeat  DOUBLE PRECISION NOT NULL,"
     "  ended      DOUBLE PRECISION NOT NULL DEFAULT 0,"
     "  end_reason TEXT"
     ");"
     "CREATE INDEX nodes_live ON nodes (heartbeat) WHERE ended = 0;"
     "CREATE INDEX nodes_ident ON nodes (ident, id);"
     "ALTER TABLE trials ADD COLUMN node_id BIGINT;"
     "ALTER TABLE models ADD COLUMN node_id BIGINT;"
     "CREATE INDEX trials_node ON trials (node_id) WHERE state = 0;"
     "CREATE INDEX models_node ON models (node_id) WHERE state = 1;"
     "ALTER TABLE studies ADD COLUMN changed BIGINT NOT NULL DEFAULT 0;"
     "CREATE INDEX studies_changed ON studies (changed);"
     "CREATE TABLE study_changes (seq BIGINT NOT NULL);"
     "INSERT INTO study_changes (seq) VALUES (0);"},
    /* v10: a study's change counter and each trial's stamp of it, drawn
     * under the study's row lock by every change of the trial (db.c's
     * touch by trial), so a study's trials changed after a seq are one
     * index range (sto_trials_changed) */
    {10,
     "ALTER TABLE studies ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;"
     "ALTER TABLE trials ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;"
     "CREATE INDEX trials_study_seq ON trials (study_id, seq);"},
    /* v11: a step reported late, and the report the pruner said stop at */
    {11,
     "ALTER TABLE intermediates ADD COLUMN late BIGINT NOT NULL DEFAULT 0;"
     "ALTER TABLE intermediates ADD COLUMN pruned BIGINT NOT NULL DEFAULT 0;"},
    /* v12: a study's trials of one state in number order, one index range */
    {12,
     "DROP INDEX trials_study_state;"
     "CREATE INDEX trials_study_state ON trials (study_id, state, number);"},
};

/* pg_advisory_xact_lock's key: "hpo" + 1, any constant of our own */
#define MIGRATE_LOCK "6844015"

static int run(sto_sql *c, const char *sql, const char *what) {
    int rc = sto_sql_exec(c, sql);
    if (rc) HPO_ERROR("storage: postgresql: %s: %s", what, sto_sql_errmsg(c));
    return rc;
}

static int read_version(sto_sql *c, int64_t *out) {
    sto_stmt *s = NULL;
    int rc = sto_sql_prepare(c, "SELECT COALESCE(MAX(version), 0) FROM hpo_schema", &s);
    if (rc == 0) {
        int src = sto_step(s);
        if (src == STO_ROW)
            *out = sto_col_int64(s, 0);
        else
            rc = src < 0 ? src : HPO_ESTORAGE;
    }
    if (rc) HPO_ERROR("storage: postgresql: schema version: %s", sto_sql_errmsg(c));
    sto_stmt_finalize(s);
    return rc;
}

int sto_pg_migrate(sto_sql *c, int latest) {
    if (steps[HPO_ARRAY_LEN(steps) - 1].version != latest) { /* a step appended to db.c only */
        HPO_ERROR("storage: postgresql: no migration step to schema version %d", latest);
        return HPO_EINTERNAL;
    }
    int64_t version = 0;
    int rc = run(c, "BEGIN", "migrate: begin");
    if (rc) return rc;
    if ((rc = run(c,
                  "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ");"
                  "CREATE TABLE IF NOT EXISTS hpo_schema (version BIGINT NOT NULL)",
                  "migrate: lock")))
        goto fail;
    if ((rc = read_version(c, &version))) goto fail;
    if (version > latest) {
        HPO_ERROR("storage: the database has schema version %lld, newer than this build's %d; "
                  "refusing to open it",
                  (long long)version, latest);
        rc = HPO_ESTORAGE;
        goto fail;
    }
    for (size_t i = 0; i < HPO_ARRAY_LEN(steps); i++) {
        if (steps[i].version <= version || steps[i].version > latest) continue;
        if ((rc = run(c, steps[i].sql, "migrate"))) goto fail;
    }
    if (version < latest) {
        char sql[96];
        snprintf(sql, sizeof sql, "DELETE FROM hpo_schema; INSERT INTO hpo_schema (version) VALUES (%d)", latest);
        if ((rc = run(c, sql, "migrate: version"))) goto fail;
    }
    if ((rc = run(c, "COMMIT", "migrate: commit"))) goto fail;
    if (version == 0)
        HPO_DEBUG("storage: postgresql: created schema version %d", latest);
    else if (version < latest)
        HPO_INFO("storage: postgresql: migrated from schema version %lld to %d", (long long)version, latest);
    return 0;
fail:
    if (sto_sql_in_tx(c)) sto_sql_exec(c, "ROLLBACK");
    return rc;
}
