/* sql_pg.c - the PostgreSQL driver of sql.h, on libpq.
 *
 * A statement's SQL is written with SQLite's ?N placeholders; prepare()
 * rewrites them to $N (outside quoted literals and identifiers) and keeps
 * the text. The server-side statement is made (PQprepare, named "hpo_<n>")
 * at the first step with the parameter types bound then (int8, float8,
 * text), because PostgreSQL infers an untyped parameter from its first use
 * (`?4 > 0` would make a time an integer). Each step after that executes
 * it (PQexecPrepared, parameters as text, results as text) once and walks
 * the rows of its result. Floats travel as text with 17 significant digits
 * (exact) and come back in PostgreSQL's shortest exact form
 * (extra_float_digits 1, the default since PostgreSQL 12).
 *
 * A connection that breaks (the server restarted, the session was ended)
 * is reset by the next statement outside a transaction, which then runs
 * on the new one; its statements are prepared again (a generation counter
 * tells which are stale) and its session settings made again (UTF-8; the
 * idle transaction timeout of a node, sto_sql_pg_set_idle_timeout). A transaction under way when it broke fails
 * with HPO_ESTORAGE, like any failed call, and the next call reconnects.
 *
 * BEGIN is held back and sent with the transaction's first statement, in
 * one round trip (libpq's pipeline mode: BEGIN, the statement, one Sync),
 * and a transaction that ends before any statement sends neither: on a
 * busy node that is a round trip less per transaction (a new trial, a
 * tell). The connection reports itself in a transaction meanwhile.
 * Likewise a caller may send the COMMIT with the transaction's last
 * statement (sto_sql_pg_commit_with_next): BEGIN (if still held), the
 * statement, COMMIT, one Sync; a failed statement aborts the pipeline, so
 * the COMMIT does not run and the caller's rollback ends the transaction;
 * the caller's own COMMIT then sends nothing. */
#include "sql.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#define PG_MAX_PARAMS 16
/* PostgreSQL's type oids (catalog/pg_type.h is a server header). */
#define INT8_OID 20
#define TEXT_OID 25
#define FLOAT8_OID 701

typedef struct {
    sto_sql base;
    PGconn *pg;
    int64_t next_name;  /* names hpo_<n> of server-side statements */
    int64_t generation; /* bumped when the connection is reset */
    int idle_ms;        /* idle_in_transaction_session_timeout (0: the server's) */
    int begin_held;     /* BEGIN asked for, not sent yet: it goes with the next statement */
    int commit_next;    /* the transaction's COMMIT goes with the next statement */
    int committed;      /* ... it went: the caller's COMMIT sends nothing */
} pg_conn;

/* What a statement is to the held BEGIN. */
typedef enum { STMT_OTHER = 0, STMT_BEGIN, STMT_END } stmt_kind;

typedef struct {
    sto_stmt base;
    char *sql; /* with $N */
    char name[32];
    int64_t prepared_gen; /* generation it was prepared in; 0: not yet */
    int n_params;         /* highest parameter bound */
    Oid types[PG_MAX_PARAMS];
    const char *values[PG_MAX_PARAMS];
    char num[PG_MAX_PARAMS][32];
    int bad_param; /* a bind beyond PG_MAX_PARAMS */
    PGresult *res; /* NULL until the first step */
    int row, n_rows;
    stmt_kind kind;
} pg_stmt;

static pg_conn *pc(sto_sql *c) { return (pg_conn *)c; }
static pg_stmt *ps(sto_stmt *s) { return (pg_stmt *)s; }

static void quiet_notice(void *arg, const char *message) {
    (void)arg;
    HPO_DEBUG("storage: postgresql: %s", message);
}

/* Records the error of res (or of the connection when res is NULL). */
static int fail(sto_sql *c, const PGresult *res) {
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(pc(c)->pg);
    sto_sql_errkind kind = STO_SQL_EOTHER;
    if (state && strcmp(state, "23503") == 0)
        kind = STO_SQL_EFK;
    else if (state && strcmp(state, "23505") == 0)
        kind = STO_SQL_EUNIQUE;
    else if (state && strcmp(state, "53100") == 0) /* disk_full */
        kind = STO_SQL_EFULL;
    char text[400];
    snprintf(text, sizeof text, "%s", msg && *msg ? msg : "(no message)");
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = 0;
    sto_sql_set_error(c, kind, "%s (%s)", text, state ? state : "connection");
    return kind == STO_SQL_EFULL ? HPO_ENOSPACE : HPO_ESTORAGE;
}

/* ?N -> $N outside '...' and "...". */
static char *translate(const char *sql) {
    size_t n = strlen(sql);
    char *out = hpo_xmalloc(n + 1), *o = out;
    char quote = 0;
    for (const char *p = sql; *p; p++) {
        if (quote) {
            if (*p == quote) quote = 0;
        } else if (*p == '\'' || *p == '"') {
            quote = *p;
        } else if (*p == '?' && p[1] >= '0' && p[1] <= '9') {
            *o++ = '$';
            continue;
        }
        *o++ = *p;
    }
    *o = 0;
    return out;
}

static int pg_prepare(sto_sql *c, const char *sql, sto_stmt **out) {
    pg_stmt *s = hpo_xcalloc(1, sizeof *s);
    s->base.conn = c;
    s->sql = translate(sql);
    snprintf(s->name, sizeof s->name, "hpo_%lld", (long long)++pc(c)->next_name);
    s->kind = strcmp(s->sql, "BEGIN") == 0                                      ? STMT_BEGIN
              : strcmp(s->sql, "COMMIT") == 0 || strcmp(s->sql, "ROLLBACK") == 0 ? STMT_END
                                                                                 : STMT_OTHER;
    *out = &s->base;
    return 0;
}

/* One SET on the connection (no reset: the caller's). */
static int set_once(sto_sql *c, const char *sql) {
    PGresult *res = PQexec(pc(c)->pg, sql);
    int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : fail(c, res);
    PQclear(res);
    return rc;
}

/* The session's settings, at open and again on a reset connection: text
 * travels as UTF-8, whatever the server's default; and a transaction left
 * idle (its process stalled: stopped, swapped out) ends after idle_ms, so
 * its row locks do not hold the other nodes up for longer. */
static int session_setup(sto_sql *c) {
    int rc = set_once(c, "SET client_encoding = 'UTF8'");
    if (rc == 0 && pc(c)->idle_ms > 0) {
        char sql[96];
        snprintf(sql, sizeof sql, "SET idle_in_transaction_session_timeout = %d", pc(c)->idle_ms);
        rc = set_once(c, sql);
    }
    return rc;
}

/* A broken connection is reset (outside a transaction: inside one, the
 * transaction is lost anyway and the caller's rollback ends it). */
static int ensure_connected(sto_sql *c) {
    pg_conn *p = pc(c);
    if (PQstatus(p->pg) == CONNECTION_OK) return 0;
    HPO_WARN("storage: postgresql: the connection broke; reconnecting");
    PQreset(p->pg);
    p->generation++;
    if (PQstatus(p->pg) != CONNECTION_OK) return fail(c, NULL);
    return session_setup(c);
}

int sto_sql_pg_set_idle_timeout(sto_sql *c, int ms) {
    if (c->dialect != STO_SQL_PG) return 0;
    pc(c)->idle_ms = ms > 0 ? ms : 0;
    int rc = ensure_connected(c);
    return rc ? rc : session_setup(c);
}

static int pg_exec(sto_sql *c, const char *sql) {
    int rc = ensure_connected(c);
    if (rc) return rc;
    if (pc(c)->begin_held) { /* SQL text goes alone: the BEGIN first */
        pc(c)->begin_held = 0;
        if ((rc = set_once(c, "BEGIN"))) return rc;
    }
    PGresult *res = PQexec(pc(c)->pg, sql);
    ExecStatusType st = PQresultStatus(res);
    rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : fail(c, res);
    PQclear(res);
    return rc;
}

static int pg_in_tx(sto_sql *c) {
    if (pc(c)->begin_held) return 1;
    PGTransactionStatusType t = PQtransactionStatus(pc(c)->pg);
    return t == PQTRANS_INTRANS || t == PQTRANS_INERROR || t == PQTRANS_ACTIVE;
}

void sto_sql_pg_commit_with_next(sto_sql *c) {
    if (c->dialect == STO_SQL_PG && pg_in_tx(c)) pc(c)->commit_next = 1;
}

static void pg_close(sto_sql *c) {
    PQfinish(pc(c)->pg);
    free(c);
}

static void pg_bind(sto_stmt *st, int i, sto_type t, int is_null, int64_t iv, double dv, const char *tv) {
    pg_stmt *s = ps(st);
    if (i < 1 || i > PG_MAX_PARAMS) {
        s->bad_param = i;
        return;
    }
    int k = i - 1;
    if (i > s->n_params) {
        for (int j = s->n_params; j < k; j++) s->types[j] = TEXT_OID, s->values[j] = NULL; /* unbound: NULL */
        s->n_params = i;
    }
    s->types[k] = t == STO_T_INT ? INT8_OID : t == STO_T_REAL ? FLOAT8_OID : TEXT_OID;
    if (is_null)
        s->values[k] = NULL;
    else if (t == STO_T_TEXT)
        s->values[k] = tv;
    else {
        if (t == STO_T_INT)
            snprintf(s->num[k], sizeof s->num[k], "%lld", (long long)iv);
        else if (isinf(dv))
            snprintf(s->num[k], sizeof s->num[k], "%s", dv > 0 ? "Infinity" : "-Infinity");
        else
            snprintf(s->num[k], sizeof s->num[k], "%.17g", dv);
        s->values[k] = s->num[k];
    }
}

/* A command that changes rows (its status is "INSERT 0 n", "UPDATE n", ...). */
static int changes_rows(const PGresult *res) {
    const char *st = PQcmdStatus((PGresult *)res);
    return strncmp(st, "INSERT", 6) == 0 || strncmp(st, "UPDATE", 6) == 0 || strncmp(st, "DELETE", 6) == 0;
}

/* Prepares (once per connection) and executes the statement; 0 or the
 * error, recorded. */
static int run_once(pg_stmt *s, sto_sql *c, PGresult **out) {
    pg_conn *p = pc(c);
    if (s->prepared_gen != p->generation + 1) {
        PGresult *r = PQprepare(p->pg, s->name, s->sql, s->n_params, s->types);
        int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : fail(c, r);
        PQclear(r);
        if (rc) return rc;
        s->prepared_gen = p->generation + 1;
    }
    PGresult *res = PQexecPrepared(p->pg, s->name, s->n_params, s->values, NULL, NULL, 0);
    ExecStatusType status = PQresultStatus(res);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
        int rc = fail(c, res);
        PQclear(res);
        return rc;
    }
    *out = res;
    return 0;
}

/* [BEGIN,] the statement [and COMMIT] in one round trip (pipeline mode),
 * preparing it too where this connection has not; its result, or the
 * first error (a COMMIT that fails is one: nothing was stored). */
static int run_pipelined(pg_stmt *s, sto_sql *c, int with_begin, int with_commit, PGresult **out) {
    pg_conn *p = pc(c);
    PGconn *pg = p->pg;
    int prepare = s->prepared_gen != p->generation + 1;
    int sent = PQenterPipelineMode(pg) &&
               (!with_begin || PQsendQueryParams(pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0)) &&
               (!prepare || PQsendPrepare(pg, s->name, s->sql, s->n_params, s->types)) &&
               PQsendQueryPrepared(pg, s->name, s->n_params, s->values, NULL, NULL, 0) &&
               (!with_commit || PQsendQueryParams(pg, "COMMIT", 0, NULL, NULL, NULL, NULL, 0)) &&
               PQpipelineSync(pg);
    int rc = sent ? 0 : fail(c, NULL);
    PGresult *mine = NULL, *r;
    int q_prepare = with_begin ? 1 : 0, q_mine = q_prepare + prepare, n_queries = q_mine + 1 + with_commit;
    /* each query's results end with NULL; after a failure the rest are
     * PGRES_PIPELINE_ABORTED; then the Sync's result */
    for (int q = 0; sent && q < n_queries && PQstatus(pg) == CONNECTION_OK; q++) {
        while ((r = PQgetResult(pg))) {
            ExecStatusType st = PQresultStatus(r);
            if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
                if (q == q_mine && !mine) {
                    mine = r;
                    continue;
                }
                if (prepare && q == q_prepare) s->prepared_gen = p->generation + 1; /* even if it then fails */
            } else if (st != PGRES_PIPELINE_ABORTED && rc == 0) {
                rc = fail(c, r);
            }
            PQclear(r);
        }
    }
    if (sent && PQstatus(pg) == CONNECTION_OK && (r = PQgetResult(pg))) {
        if (PQresultStatus(r) != PGRES_PIPELINE_SYNC && rc == 0) rc = fail(c, r);
        PQclear(r);
    }
    PQexitPipelineMode(pg); /* refused only on a broken connection, which the reset ends */
    if (rc == 0 && !mine) rc = fail(c, NULL);
    if (rc) {
        PQclear(mine);
        return rc;
    }
    *out = mine;
    return 0;
}

/* A held BEGIN's own step, or the end of a transaction that sent nothing:
 * an empty result, no round trip. */
static int run_held(pg_stmt *s, sto_sql *c) {
    s->res = PQmakeEmptyPGresult(pc(c)->pg, PGRES_COMMAND_OK);
    if (!s->res) return HPO_ENOMEM;
    s->row = -1;
    s->n_rows = 0;
    return 0;
}

/* Outside a transaction a statement that finds the connection broken (the
 * server restarted, the session was ended) runs once more on a new one:
 * nothing of the caller's was under way there. */
static int run(sto_stmt *st) {
    pg_stmt *s = ps(st);
    sto_sql *c = st->conn;
    if (s->bad_param) {
        sto_sql_set_error(c, STO_SQL_EOTHER, "parameter %d: at most %d", s->bad_param, PG_MAX_PARAMS);
        return HPO_EINTERNAL;
    }
    pg_conn *p = pc(c);
    int committed = p->committed, with_commit = p->commit_next && s->kind == STMT_OTHER;
    p->committed = p->commit_next = 0;
    if (s->kind == STMT_BEGIN && !pg_in_tx(c)) {
        p->begin_held = 1;
        return run_held(s, c);
    }
    if (s->kind == STMT_END && (p->begin_held || committed)) {
        p->begin_held = 0;
        return run_held(s, c);
    }
    int with_begin = p->begin_held; /* nothing under way on the server yet */
    p->begin_held = 0;
    int idle = with_begin || !pg_in_tx(c), rc = 0;
    PGresult *res = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (idle && (rc = ensure_connected(c))) return rc;
        rc = with_begin || with_commit ? run_pipelined(s, c, with_begin, with_commit, &res) : run_once(s, c, &res);
        if (rc == 0 || !idle || PQstatus(pc(c)->pg) == CONNECTION_OK) break;
    }
    if (rc) return rc;
    p->committed = with_commit;
    s->res = res;
    s->row = -1;
    s->n_rows = PQresultStatus(res) == PGRES_TUPLES_OK ? PQntuples(res) : 0;
    return 0;
}

static int pg_step(sto_stmt *st) {
    pg_stmt *s = ps(st);
    if (!s->res) {
        int rc = run(st);
        if (rc) return rc;
    }
    if (s->row + 1 < s->n_rows) {
        s->row++;
        return STO_ROW;
    }
    if (s->row < s->n_rows) { /* the end, once */
        s->row = s->n_rows;
        if (changes_rows(s->res)) st->conn->changes = strtoll(PQcmdTuples(s->res), NULL, 10);
    }
    return STO_DONE;
}

static int pg_is_null(sto_stmt *st, int col) {
    pg_stmt *s = ps(st);
    return PQgetisnull(s->res, s->row, col);
}

static int64_t pg_col_int64(sto_stmt *st, int col) {
    pg_stmt *s = ps(st);
    return strtoll(PQgetvalue(s->res, s->row, col), NULL, 10); /* NULL is "": 0 */
}

static double pg_col_double(sto_stmt *st, int col) {
    pg_stmt *s = ps(st);
    return strtod(PQgetvalue(s->res, s->row, col), NULL); /* "Infinity", "NaN" too */
}

static const char *pg_col_text(sto_stmt *st, int col) {
    pg_stmt *s = ps(st);
    return PQgetisnull(s->res, s->row, col) ? NULL : PQgetvalue(s->res, s->row, col);
}

static void pg_reset(sto_stmt *st) {
    pg_stmt *s = ps(st);
    PQclear(s->res);
    s->res = NULL;
    s->n_params = 0;
    s->bad_param = 0;
}

static void pg_finalize(sto_stmt *st) {
    pg_stmt *s = ps(st);
    pg_conn *p = pc(st->conn);
    pg_reset(st);
    if (!st->conn->closing && s->prepared_gen == p->generation + 1 && PQstatus(p->pg) == CONNECTION_OK) {
        char sql[64];
        snprintf(sql, sizeof sql, "DEALLOCATE %s", s->name);
        PQclear(PQexec(p->pg, sql));
    }
    free(s->sql);
    free(s);
}

static const sto_sql_ops pg_ops = {
    .prepare = pg_prepare,
    .exec = pg_exec,
    .in_tx = pg_in_tx,
    .close = pg_close,
    .bind = pg_bind,
    .step = pg_step,
    .is_null = pg_is_null,
    .col_int64 = pg_col_int64,
    .col_double = pg_col_double,
    .col_text = pg_col_text,
    .reset = pg_reset,
    .finalize = pg_finalize,
};

/* The URL without its password (user:password@, or ?password=...), for
 * messages. */
static void url_for_log(const char *url, char *out, size_t cap) {
    snprintf(out, cap, "%s", url);
    char *query = strchr(out, '?');
    for (char *p = query; p; p = strchr(p + 1, '&')) {
        if (strncmp(p + 1, "password=", 9) != 0) continue;
        char *value = p + 10, *end = value + strcspn(value, "&");
        if (cap - (size_t)(value - out) > 3) { /* "***" in place of the value */
            memmove(value + 3, end, strlen(end) + 1);
            memcpy(value, "***", 3);
        }
    }
    char *scheme = strstr(out, "://"), *host_end = scheme ? scheme + 3 + strcspn(scheme + 3, "/?") : NULL;
    char *at = NULL;
    for (char *p = scheme ? scheme + 3 : NULL; p && p < host_end; p++)
        if (*p == '@') at = p;
    if (!at) return;
    char *colon = memchr(scheme + 3, ':', (size_t)(at - (scheme + 3)));
    if (colon) memmove(colon, at, strlen(at) + 1);
}

int sto_sql_open_pg(const char *url, sto_sql **out) {
    char shown[512];
    url_for_log(url, shown, sizeof shown);
    if (!PQisthreadsafe()) {
        HPO_ERROR("storage: this libpq was built without thread support");
        return HPO_ESTORAGE;
    }
    /* connect_timeout first: a value in the URL wins (later keywords do) */
    const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
    const char *vals[] = {"10", "hpod", url, NULL};
    pg_conn *c = hpo_xcalloc(1, sizeof *c);
    c->base.ops = &pg_ops;
    c->base.dialect = STO_SQL_PG;
    c->pg = PQconnectdbParams(keys, vals, 1);
    int rc = HPO_ESTORAGE;
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", c->pg ? PQerrorMessage(c->pg) : "out of memory");
        size_t n = strlen(msg);
        while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) msg[--n] = 0;
        HPO_ERROR("storage: cannot connect to %s: %s", shown, msg);
        goto fail;
    }
    if (PQserverVersion(c->pg) < 120000) {
        HPO_ERROR("storage: %s: PostgreSQL %d.%d is too old (12 or newer needed)", shown,
                  PQserverVersion(c->pg) / 10000, PQserverVersion(c->pg) % 10000);
        goto fail;
    }
    PQsetNoticeProcessor(c->pg, quiet_notice, NULL);
    if ((rc = session_setup(&c->base))) {
        HPO_ERROR("storage: %s: %s", shown, c->base.errmsg);
        goto fail;
    }
    *out = &c->base;
    return 0;
fail:
    PQfinish(c->pg);
    free(c);
    return rc;
}
