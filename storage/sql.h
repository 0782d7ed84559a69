/*
 * sql.h - the statement driver under storage/: one connection to SQLite or
 * to PostgreSQL (libpq), prepared statements with bound parameters, rows
 * read column by column. storage/ runs ONE code path (studies.c, trials.c,
 * ...) over it for both backends; only the SQL text differs where the
 * dialects do (db.c's statement table).
 *
 * Design notes
 * - Two implementations behind a small table of functions (sto_sql_ops):
 *   sql_sqlite.c, a thin layer over sqlite3_stmt, and sql_pg.c over libpq.
 *   db.c chooses by the target (sto_sql_is_pg_url): "postgresql://" or "postgres://"
 *   opens PostgreSQL, anything else is a SQLite file (":memory:" too).
 * - Placeholders are SQLite's ?N in every statement; the PostgreSQL driver
 *   rewrites them to $N when it prepares (outside quoted literals).
 * - Binding follows sqlite3_bind_* with SQLITE_STATIC text: a bound text
 *   pointer must stay valid until the statement is stepped (the PostgreSQL
 *   driver sends the parameters at the first step). Each bind carries its
 *   type (int64, double, text) even when the value is NULL, because
 *   PostgreSQL prepares a statement with typed parameters: the driver
 *   prepares it (PQprepare, once per connection) at its first step with
 *   the types bound then. NaN doubles are bound as NULL (and NULL reads
 *   back as NaN through sto_col_real), so both backends agree.
 * - Stepping: STO_ROW while there is a row, then STO_DONE; a failure
 *   returns a negative HPO_* code and leaves the connection's last error
 *   (sto_sql_errmsg, sto_sql_errkind) for the caller to log. The PostgreSQL
 *   driver runs the statement at the first step and walks its result.
 * - sto_sql_changes(): rows changed by the last INSERT/UPDATE/DELETE run to
 *   completion on the connection (sqlite3_changes' meaning).
 * - Not thread-safe: the caller serialises every use of one connection
 *   (db->mu in db.c). Two sto_db on the same PostgreSQL database are two
 *   connections, the way two hpod nodes share one database.
 */
#ifndef HPO_STORAGE_SQL_H
#define HPO_STORAGE_SQL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hpo.h"

typedef struct sto_sql sto_sql;
typedef struct sto_stmt sto_stmt;

typedef enum { STO_SQL_SQLITE = 0, STO_SQL_PG = 1 } sto_dialect;

enum { STO_DONE = 0, STO_ROW = 1 };

/* What the last failure was, as far as storage cares. */
typedef enum {
    STO_SQL_EOTHER = 0,
    STO_SQL_EFK,     /* a foreign key: the parent row is missing */
    STO_SQL_EUNIQUE, /* a unique constraint */
    STO_SQL_EFULL,   /* the disk (or quota) is full */
    STO_SQL_ECORRUPT, /* SQLite: the file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB) */
} sto_sql_errkind;

typedef enum { STO_T_INT = 1, STO_T_REAL, STO_T_TEXT } sto_type;

typedef struct sto_sql_ops {
    int (*prepare)(sto_sql *c, const char *sql, sto_stmt **out);
    /* Runs SQL text without parameters (one or more statements). */
    int (*exec)(sto_sql *c, const char *sql);
    int (*in_tx)(sto_sql *c);
    void (*close)(sto_sql *c);
    /* Parameter i (1-based) of type t: NULL if is_null, else iv, dv or tv. */
    void (*bind)(sto_stmt *s, int i, sto_type t, int is_null, int64_t iv, double dv, const char *tv);
    int (*step)(sto_stmt *s);
    int (*is_null)(sto_stmt *s, int col);
    int64_t (*col_int64)(sto_stmt *s, int col);
    double (*col_double)(sto_stmt *s, int col);
    const char *(*col_text)(sto_stmt *s, int col);
    void (*reset)(sto_stmt *s);
    void (*finalize)(sto_stmt *s);
} sto_sql_ops;

/* The first member of each driver's connection and statement structs. */
struct sto_sql {
    const sto_sql_ops *ops;
    sto_dialect dialect;
    int64_t changes;
    sto_sql_errkind errkind;
    char errmsg[512];
    int closing; /* set before the statements are finalized at close */
};

struct sto_stmt {
    sto_sql *conn;
};

/* The target names PostgreSQL (postgresql:// or postgres://). */
static inline int sto_sql_is_pg_url(const char *target) {
    return target && (strncmp(target, "postgresql://", 13) == 0 || strncmp(target, "postgres://", 11) == 0);
}

/* Opens a connection (db.c chooses by sto_sql_is_pg_url): a SQLite path,
 * created if missing, with WAL, foreign keys on and synchronous by sync
 * (0 NORMAL, 1 FULL); or a PostgreSQL URL. HPO_ESTORAGE with the reason
 * logged. */
int sto_sql_open_sqlite(const char *path, int sync, sto_sql **out);
int sto_sql_open_pg(const char *url, sto_sql **out);

/* SQLite's own handles, for tests that look at SQLite itself (pragmas,
 * query plans, traces); NULL on PostgreSQL. */
struct sqlite3;
struct sqlite3_stmt;
struct sqlite3 *sto_sql_sqlite(sto_sql *c);
struct sqlite3_stmt *sto_stmt_sqlite(sto_stmt *s);
/* PostgreSQL: a transaction left idle ms milliseconds (its process stalled)
 * is ended by the server, now and after every reconnection (0: the
 * server's setting); nothing on SQLite. */
int sto_sql_pg_set_idle_timeout(sto_sql *c, int ms);
/* PostgreSQL, inside a transaction: its COMMIT goes with the next statement
 * in one round trip, and the COMMIT step that follows sends nothing. If
 * that statement fails, nothing is committed (the caller rolls back as
 * usual); if it succeeds, the transaction has committed, so the caller
 * must not need its result to decide to roll back. Nothing on SQLite. */
void sto_sql_pg_commit_with_next(sto_sql *c);

/* Records the last failure of c (a driver helper): kind and message. */
__attribute__((format(printf, 3, 4))) static inline void sto_sql_set_error(sto_sql *c, sto_sql_errkind kind,
                                                                           const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->errkind = kind;
}

static inline int sto_sql_prepare(sto_sql *c, const char *sql, sto_stmt **out) {
    return c->ops->prepare(c, sql, out);
}
static inline int sto_sql_exec(sto_sql *c, const char *sql) { return c->ops->exec(c, sql); }
static inline int sto_sql_in_tx(sto_sql *c) { return c->ops->in_tx(c); }
static inline void sto_sql_close(sto_sql *c) {
    if (c) c->ops->close(c);
}
static inline int64_t sto_sql_changes(sto_sql *c) { return c->changes; }
static inline const char *sto_sql_errmsg(sto_sql *c) { return c->errmsg; }
static inline sto_sql_errkind sto_sql_errkind_of(sto_sql *c) { return c->errkind; }
/* Closing c (SQLite) will write nothing to its file: no checkpoint of the
 * -wal file into it (the last connection's close does one), no planner
 * statistics. For a file found damaged: a restored backup beside a stale
 * -wal stays the backup, good again once the -wal and -shm are removed. */
void sto_sql_sqlite_leave_untouched(sto_sql *c);
/* The longest database path SQLite opens (sto_sqlite_path_max). */
size_t sto_sql_sqlite_path_max(void);

/* ---- statements ---- */

static inline void sto_bind_int64(sto_stmt *s, int i, int64_t v) {
    s->conn->ops->bind(s, i, STO_T_INT, 0, v, 0, NULL);
}
/* NaN binds NULL. */
static inline void sto_bind_real(sto_stmt *s, int i, double v) {
    s->conn->ops->bind(s, i, STO_T_REAL, isnan(v), 0, v, NULL);
}
/* NULL binds NULL. */
static inline void sto_bind_text(sto_stmt *s, int i, const char *v) {
    s->conn->ops->bind(s, i, STO_T_TEXT, v == NULL, 0, 0, v);
}
/* An optional reference: v <= 0 binds NULL. */
static inline void sto_bind_id(sto_stmt *s, int i, int64_t v) { s->conn->ops->bind(s, i, STO_T_INT, v <= 0, v, 0, NULL); }
static inline int sto_step(sto_stmt *s) { return s->conn->ops->step(s); }
static inline int sto_col_is_null(sto_stmt *s, int col) { return s->conn->ops->is_null(s, col); }
static inline int64_t sto_col_int64(sto_stmt *s, int col) { return s->conn->ops->col_int64(s, col); }
static inline int sto_col_int(sto_stmt *s, int col) { return (int)s->conn->ops->col_int64(s, col); }
/* A NOT NULL real column (NULL reads as 0). */
static inline double sto_col_double(sto_stmt *s, int col) { return s->conn->ops->col_double(s, col); }
/* A nullable real column: NULL reads as NaN. */
static inline double sto_col_real(sto_stmt *s, int col) {
    return sto_col_is_null(s, col) ? NAN : s->conn->ops->col_double(s, col);
}
/* A copy of a text column (NULL stays NULL); free() it. */
static inline char *sto_col_text(sto_stmt *s, int col) { return hpo_strdup(s->conn->ops->col_text(s, col)); }
/* Borrowed text of a column, valid until the next step or reset. */
static inline const char *sto_col_text_ref(sto_stmt *s, int col) { return s->conn->ops->col_text(s, col); }
/* Ends the statement's run and clears its bindings. */
static inline void sto_stmt_reset(sto_stmt *s) { s->conn->ops->reset(s); }
static inline void sto_stmt_finalize(sto_stmt *s) {
    if (s) s->conn->ops->finalize(s);
}

#endif
