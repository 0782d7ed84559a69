/*
 * sto_testutil.h - helpers shared by the storage tests: a scratch directory
 * under /tmp (mkdtemp) that is removed with everything in it, and a db path
 * inside it, and the integer answer of a query (sto_test_int). Header-only
 * (static inline) so each test stays one executable.
 */
#ifndef STO_TESTUTIL_H
#define STO_TESTUTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sto_tmp {
    char dir[64];
    char db[128];
} sto_tmp;

/* Creates /tmp/hpo-sto-XXXXXX; db = <dir>/hpo.db. Returns 0 on success. */
static inline int sto_tmp_init(sto_tmp *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/hpo-sto-XXXXXX");
    if (!mkdtemp(t->dir)) return -1;
    snprintf(t->db, sizeof t->db, "%s/hpo.db", t->dir);
    return 0;
}

static inline int sto_tmp_rm_one(const char *path, const struct stat *sb, int flag,
                                 struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes the directory and everything in it (db, -wal, -shm). */
static inline void sto_tmp_close(sto_tmp *t) {
    if (t->dir[0]) nftw(t->dir, sto_tmp_rm_one, 8, FTW_DEPTH | FTW_PHYS);
    t->dir[0] = 0;
}

/* The single integer answer of a query on a raw connection (the test
 * fails otherwise); for files that include sqlite3.h and cmocka.h first. */
#if defined(SQLITE_OK) && defined(assert_int_equal)
static inline int64_t sto_test_int(sqlite3 *c, const char *sql) {
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(c, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}
#endif

#endif
