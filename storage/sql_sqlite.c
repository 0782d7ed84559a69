/* sql_sqlite.c - the SQLite driver of sql.h: a thin layer over sqlite3_stmt,
 * and the connection's settings (WAL, synchronous, foreign keys). */
#include "sql.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    sto_sql base;
    sqlite3 *db;
    int untouched; /* sto_sql_sqlite_leave_untouched: the close writes nothing */
} lite_conn;

typedef struct {
    sto_stmt base;
    sqlite3_stmt *s;
} lite_stmt;

static sqlite3 *db_of(sto_sql *c) { return ((lite_conn *)c)->db; }
static sqlite3_stmt *st(sto_stmt *s) { return ((lite_stmt *)s)->s; }

/* Records SQLite's last error on the connection; the HPO code for it. */
static int fail(sto_sql *c) {
    sqlite3 *db = db_of(c);
    int code = sqlite3_extended_errcode(db), sys = sqlite3_system_errno(db);
    sto_sql_errkind kind = STO_SQL_EOTHER;
    if (code == SQLITE_CONSTRAINT_FOREIGNKEY)
        kind = STO_SQL_EFK;
    else if (code == SQLITE_CONSTRAINT_UNIQUE || code == SQLITE_CONSTRAINT_PRIMARYKEY)
        kind = STO_SQL_EUNIQUE;
    /* SQLite reports a write that hit ENOSPC as SQLITE_FULL */
    else if ((code & 0xff) == SQLITE_FULL || sys == ENOSPC || sys == EDQUOT)
        kind = STO_SQL_EFULL;
    else if ((code & 0xff) == SQLITE_CORRUPT || (code & 0xff) == SQLITE_NOTADB)
        kind = STO_SQL_ECORRUPT;
    sto_sql_set_error(c, kind, "%s (%d)", sqlite3_errmsg(db), code);
    return kind == STO_SQL_EFULL ? HPO_ENOSPACE : HPO_ESTORAGE;
}

static int lite_prepare(sto_sql *c, const char *sql, sto_stmt **out) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v3(db_of(c), sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK) return fail(c);
    lite_stmt *ls = hpo_xcalloc(1, sizeof *ls);
    ls->base.conn = c;
    ls->s = s;
    *out = &ls->base;
    return 0;
}

static int lite_exec(sto_sql *c, const char *sql) {
    char *msg = NULL;
    if (sqlite3_exec(db_of(c), sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
    int rc = fail(c);
    if (msg) sto_sql_set_error(c, c->errkind, "%s", msg);
    sqlite3_free(msg);
    return rc;
}

static int lite_in_tx(sto_sql *c) { return !sqlite3_get_autocommit(db_of(c)); }

static void lite_close(sto_sql *c) {
    sqlite3 *db = db_of(c);
    if (db) {
        /* Lets SQLite refresh its planner statistics where they are stale
         * (cheap; recommended before closing a long-lived connection). */
        if (!((lite_conn *)c)->untouched) sqlite3_exec(db, "PRAGMA optimize", NULL, NULL, NULL);
        if (sqlite3_close(db) != SQLITE_OK) HPO_ERROR("storage: close: %s", sqlite3_errmsg(db));
    }
    free(c);
}

static void lite_bind(sto_stmt *s, int i, sto_type t, int is_null, int64_t iv, double dv, const char *tv) {
    if (is_null)
        sqlite3_bind_null(st(s), i);
    else if (t == STO_T_INT)
        sqlite3_bind_int64(st(s), i, iv);
    else if (t == STO_T_REAL)
        sqlite3_bind_double(st(s), i, dv);
    else
        sqlite3_bind_text(st(s), i, tv, -1, SQLITE_STATIC);
}

static int lite_step(sto_stmt *s) {
    int rc = sqlite3_step(st(s));
    if (rc == SQLITE_ROW) return STO_ROW;
    if (rc == SQLITE_DONE) {
        s->conn->changes = sqlite3_changes64(db_of(s->conn));
        return STO_DONE;
    }
    return fail(s->conn);
}

static int lite_is_null(sto_stmt *s, int col) { return sqlite3_column_type(st(s), col) == SQLITE_NULL; }
static int64_t lite_col_int64(sto_stmt *s, int col) { return sqlite3_column_int64(st(s), col); }
static double lite_col_double(sto_stmt *s, int col) { return sqlite3_column_double(st(s), col); }
static const char *lite_col_text(sto_stmt *s, int col) { return (const char *)sqlite3_column_text(st(s), col); }

static void lite_reset(sto_stmt *s) {
    sqlite3_reset(st(s));
    sqlite3_clear_bindings(st(s));
}

static void lite_finalize(sto_stmt *s) {
    sqlite3_finalize(st(s));
    free(s);
}

static const sto_sql_ops lite_ops = {
    .prepare = lite_prepare,
    .exec = lite_exec,
    .in_tx = lite_in_tx,
    .close = lite_close,
    .bind = lite_bind,
    .step = lite_step,
    .is_null = lite_is_null,
    .col_int64 = lite_col_int64,
    .col_double = lite_col_double,
    .col_text = lite_col_text,
    .reset = lite_reset,
    .finalize = lite_finalize,
};

/* The single-value text answer of a pragma. */
static int pragma_text(sto_sql *c, const char *sql, char *out, size_t cap) {
    sqlite3_stmt *s = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(db_of(c), sql, -1, &s, NULL) != SQLITE_OK || sqlite3_step(s) != SQLITE_ROW) {
        rc = fail(c);
        HPO_ERROR("storage: %s: %s", sql, c->errmsg);
    } else {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        snprintf(out, cap, "%s", t ? t : "");
    }
    sqlite3_finalize(s);
    return rc;
}

static int setting(sto_sql *c, const char *sql) {
    int rc = lite_exec(c, sql);
    if (rc) HPO_ERROR("storage: %s: %s", sql, c->errmsg);
    return rc;
}

static int configure(sto_sql *c, const char *path, int sync) {
    sqlite3 *db = db_of(c);
    sqlite3_extended_result_codes(db, 1);
    if (sqlite3_busy_timeout(db, 5000) != SQLITE_OK) {
        HPO_ERROR("storage: busy_timeout: %s", sqlite3_errmsg(db));
        return HPO_ESTORAGE;
    }
    char mode[32];
    int rc = pragma_text(c, "PRAGMA journal_mode = WAL", mode, sizeof mode);
    if (rc) return rc;
    /* An in-memory database answers "memory": WAL only applies to files. */
    if (strcmp(mode, "wal") != 0 && strcmp(path, ":memory:") != 0) {
        HPO_ERROR("storage: %s: cannot enable WAL (journal_mode is %s)", path, mode);
        return HPO_ESTORAGE;
    }
    if ((rc = setting(c, sync ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL"))) return rc;
    /* After a burst the WAL file is truncated back to 64 MiB at checkpoints. */
    if ((rc = setting(c, "PRAGMA journal_size_limit = 67108864"))) return rc;
    if ((rc = setting(c, "PRAGMA foreign_keys = ON"))) return rc;
    char fk[8];
    if ((rc = pragma_text(c, "PRAGMA foreign_keys", fk, sizeof fk))) return rc;
    if (strcmp(fk, "1") != 0) {
        HPO_ERROR("storage: this SQLite has no foreign key support");
        return HPO_ESTORAGE;
    }
    return 0;
}

int sto_sql_open_sqlite(const char *path, int sync, sto_sql **out) {
    if (!sqlite3_threadsafe()) {
        HPO_ERROR("storage: SQLite was built without thread support");
        return HPO_ESTORAGE;
    }
    lite_conn *c = hpo_xcalloc(1, sizeof *c);
    c->base.ops = &lite_ops;
    c->base.dialect = STO_SQL_SQLITE;
    /* NOMUTEX: the caller serialises every use of the connection (sql.h). */
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int rc = HPO_ESTORAGE;
    if (sqlite3_open_v2(path, &c->db, flags, NULL) != SQLITE_OK) {
        HPO_ERROR("storage: cannot open %s: %s", path, c->db ? sqlite3_errmsg(c->db) : "out of memory");
        goto fail;
    }
    if ((rc = configure(&c->base, path, sync))) goto fail;
    *out = &c->base;
    return 0;
fail:
    if (c->db) sqlite3_close(c->db);
    free(c);
    return rc;
}

void sto_sql_sqlite_leave_untouched(sto_sql *c) {
    if (!c || c->ops != &lite_ops) return;
    sqlite3_db_config(db_of(c), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    ((lite_conn *)c)->untouched = 1;
}

/* The pager refuses a database whose absolute path leaves no room for
 * "-journal" under the VFS's mxPathname (512 on unix): SQLITE_CANTOPEN. */
size_t sto_sql_sqlite_path_max(void) {
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    int max = vfs ? vfs->mxPathname : 512;
    return max > 8 ? (size_t)(max - 8) : 0;
}

sqlite3 *sto_sql_sqlite(sto_sql *c) { return c && c->ops == &lite_ops ? db_of(c) : NULL; }

sqlite3_stmt *sto_stmt_sqlite(sto_stmt *s) { return s && s->conn->ops == &lite_ops ? st(s) : NULL; }
