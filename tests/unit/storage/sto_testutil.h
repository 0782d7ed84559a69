/*
 * sto_testutil.h - helpers shared by the storage tests: a database for a
 * test on either backend, a scratch directory under /tmp (mkdtemp) that is
 * removed with everything in it, and the integer answer of a query
 * (sto_test_int). Header-only (static inline) so each test stays one
 * executable.
 *
 * Backends: each test runs twice under ctest, as unit.storage.<name> on
 * SQLite and as pg.storage.<name> on PostgreSQL. The pg entries get
 * HPO_TEST_PG_DIR, the folder where tests/pg/pg_server.sh (the ctest
 * fixture) wrote the server's base URL (file "url",
 * postgresql://postgres@127.0.0.1:PORT); then sto_tmp_init and
 * sto_test_open create a fresh database on that server for the test
 * (t_<pid>_<n>), dropped again by sto_tmp_close or at exit. Parts of a
 * test that look at SQLite itself (pragmas, its files, old schema
 * versions) check sto_test_pg() and skip.
 */
#ifndef STO_TESTUTIL_H
#define STO_TESTUTIL_H

#include <ftw.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sto_tmp {
    char dir[64];
    char db[320];    /* what to pass to sto_open: a file path or a PostgreSQL URL */
    char pg_db[64];  /* the PostgreSQL database made for it, or "" */
} sto_tmp;

/* The server's base URL ("" on SQLite), read once. */
static inline const char *sto_test_pg_base(void) {
    static char base[256];
    static int read_once;
    if (!read_once) {
        read_once = 1;
        const char *dir = getenv("HPO_TEST_PG_DIR");
        if (dir && *dir) {
            char path[512];
            snprintf(path, sizeof path, "%s/url", dir);
            FILE *f = fopen(path, "r");
            if (!f || !fgets(base, sizeof base, f)) {
                fprintf(stderr, "sto_testutil: HPO_TEST_PG_DIR is set but %s cannot be read\n", path);
                exit(1);
            }
            fclose(f);
            base[strcspn(base, "\r\n")] = 0;
        }
    }
    return base;
}

/* The test runs on PostgreSQL. */
static inline int sto_test_pg(void) { return sto_test_pg_base()[0] != 0; }

/* Runs one SQL command on the server's postgres database (exit on failure). */
static inline void sto_test_pg_admin(const char *sql) {
    char url[320];
    snprintf(url, sizeof url, "%s/postgres", sto_test_pg_base());
    PGconn *c = PQconnectdb(url);
    PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
    if (!r || (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)) {
        fprintf(stderr, "sto_testutil: %s: %s\n", sql, PQerrorMessage(c));
        exit(1);
    }
    PQclear(r);
    PQfinish(c);
}

/* Databases made by this process and not dropped yet (dropped at exit). */
static char sto_test_pg_made[64][64];

static inline void sto_test_pg_drop(char *name) {
    if (!name[0]) return;
    char sql[128];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %.63s WITH (FORCE)", name);
    sto_test_pg_admin(sql);
    for (int i = 0; i < 64; i++)
        if (strcmp(sto_test_pg_made[i], name) == 0) sto_test_pg_made[i][0] = 0;
    name[0] = 0;
}

static inline void sto_test_pg_drop_all(void) {
    for (int i = 0; i < 64; i++) sto_test_pg_drop(sto_test_pg_made[i]);
}

/* A fresh database: its name in name (cap 64), its URL in url. */
static inline void sto_test_pg_create(char *name, char *url, size_t url_cap) {
    static int n, registered;
    if (!registered) {
        registered = 1;
        atexit(sto_test_pg_drop_all);
    }
    snprintf(name, 64, "t_%ld_%d", (long)getpid(), n++);
    char sql[128];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    sto_test_pg_admin(sql);
    snprintf(url, url_cap, "%.255s/%.63s", sto_test_pg_base(), name);
    for (int i = 0; i < 64; i++)
        if (!sto_test_pg_made[i][0]) {
            snprintf(sto_test_pg_made[i], 64, "%s", name);
            break;
        }
}

/* Creates /tmp/hpo-sto-XXXXXX; db = <dir>/hpo.db, or on PostgreSQL the URL
 * of a fresh database. Returns 0 on success. */
static inline int sto_tmp_init(sto_tmp *t) {
    t->pg_db[0] = 0;
    snprintf(t->dir, sizeof t->dir, "/tmp/hpo-sto-XXXXXX");
    if (!mkdtemp(t->dir)) return -1;
    if (sto_test_pg())
        sto_test_pg_create(t->pg_db, t->db, sizeof t->db);
    else
        snprintf(t->db, sizeof t->db, "%s/hpo.db", t->dir);
    return 0;
}

static inline int sto_tmp_rm_one(const char *path, const struct stat *sb, int flag,
                                 struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes the directory and everything in it (db, -wal, -shm), and drops
 * the PostgreSQL database (close its sto_db first). */
static inline void sto_tmp_close(sto_tmp *t) {
    if (t->dir[0]) nftw(t->dir, sto_tmp_rm_one, 8, FTW_DEPTH | FTW_PHYS);
    t->dir[0] = 0;
    sto_test_pg_drop(t->pg_db);
}

#ifdef HPO_STORAGE_H
/* Opens a scratch database: SQLite in memory, or a fresh PostgreSQL one
 * (dropped at exit). */
static inline int sto_test_open(sto_db **out) {
    if (!sto_test_pg()) return sto_open(":memory:", STO_SYNC_NORMAL, out);
    char name[64], url[320];
    sto_test_pg_create(name, url, sizeof url);
    return sto_open(url, STO_SYNC_NORMAL, out);
}
#endif

/* The single integer answer of a query (the test fails otherwise); for
 * files that include db_internal.h and cmocka.h first. */
#if defined(HPO_STORAGE_DB_INTERNAL_H) && defined(assert_int_equal)
static inline int64_t sto_test_int(sto_db *db, const char *sql) {
    int64_t v = 0;
    assert_int_equal(sto_db_query_int(db, sql, &v), 0);
    return v;
}

/* Runs SQL text (the test fails otherwise). */
static inline void sto_test_exec(sto_db *db, const char *sql) { assert_int_equal(sto_db_exec_sql(db, sql), 0); }
#endif

#endif
