/* test_tick_cost.c - the scheduler's pass costs the same with 1,000
 * external (ask/tell) studies as with none (jobs.h: the run queue). One
 * embedded study runs a trial at its parallel_trials limit, so every pass
 * looks at it in full (stop reason, reap, settle, next) and starts nothing;
 * the pass is the one server/scheduler.c makes on every tick: lease expiry
 * (and the external studies' max_seconds deadlines), the other nodes (this
 * node's heartbeat, the studies changed since the last tick: none in a
 * steady state; the tick after the 1,000 were created read them once, and
 * runs before the measure), stop reasons of the busy jobs, reap, settle,
 * next. A third of the external studies have a max_seconds deadline, not
 * yet due.
 *
 * The cost is counted, not timed: SQLite's trace hook counts the
 * statements the pass runs and the rows they return. Both must be equal
 * before and after the 1,000 external studies are created (the old pass
 * listed every stored study, spec text included, three times per tick: its
 * row count grew by 3,000). The time per pass is printed beside them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "api_internal.h"
#include "db_internal.h"

#define EXTERNAL 1000
#define PASSES 20

static char dir[64];
static sto_db *db;
static api_ctx *ctx;
static long statements, rows;

static int on_trace(unsigned type, void *arg, void *p, void *x) {
    (void)arg, (void)p, (void)x;
    if (type == SQLITE_TRACE_STMT) statements++;
    if (type == SQLITE_TRACE_ROW) rows++;
    return 0;
}

static void post(const char *path, const char *body, int want) {
    api_request req = {.method = "POST", .path = path, .body = body, .body_len = strlen(body)};
    api_response resp;
    api_handle(ctx, &req, &resp);
    if (resp.status != want) fprintf(stderr, "%s -> %d: %.*s\n", path, resp.status, (int)resp.body_len, resp.body);
    assert_int_equal(resp.status, want);
    api_response_clear(&resp);
}

/* One scheduler pass with busy running; returns its cost. */
static void pass(const api_job *busy, long *n_statements, long *n_rows) {
    statements = rows = 0;
    assert_true(api_expire_leases(ctx, hpo_now()) >= 0);
    assert_int_equal(api_nodes_tick(ctx), 0);
    assert_int_equal(api_jobs_stop_reason(ctx, busy), API_STOP_NONE);
    assert_int_equal(api_jobs_reap(ctx, busy, 1), 0);
    api_jobs_settle(ctx);
    api_job next;
    assert_int_equal(api_jobs_next(ctx, "cpu:1", &next), HPO_ENOTFOUND); /* parallel_trials: 1 */
    *n_statements = statements;
    *n_rows = rows;
}

/* PASSES passes: their cost (equal in every pass) and mean time. */
static double measure(const api_job *busy, long *n_statements, long *n_rows) {
    double t0 = hpo_monotonic();
    for (int i = 0; i < PASSES; i++) {
        long s, r;
        pass(busy, &s, &r);
        if (i > 0) {
            assert_int_equal(s, *n_statements);
            assert_int_equal(r, *n_rows);
        }
        *n_statements = s;
        *n_rows = r;
    }
    return (hpo_monotonic() - t0) / PASSES;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void test_tick_cost_flat_in_external_studies(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hpo-tick-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);
    api_node_options node = {.ident = "tick-cost", .name = "tick-cost"};
    assert_int_equal(api_node_start(ctx, &node), 0);
    post("/api/v1/studies",
         "{\"name\": \"embedded\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
         " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 200, \"validation_split\": 50},"
         " \"training\": {\"max_epochs\": 1, \"batch_size\": 50},"
         " \"tuner\": {\"algorithm\": \"random\", \"seed\": 1, \"max_trials\": 10, \"parallel_trials\": 1}}",
         201);
    api_job busy;
    assert_int_equal(api_jobs_next(ctx, "cpu:0", &busy), 0); /* running, never run: the slot is busy */
    assert_int_equal(busy.kind, API_JOB_TRIAL);
    api_nodes_tick(ctx); /* learns of the study it made itself: once */
    sqlite3_trace_v2(sto_sql_sqlite(db->conn), SQLITE_TRACE_STMT | SQLITE_TRACE_ROW, on_trace, NULL);

    long s0 = 0, r0 = 0, s1 = 0, r1 = 0;
    double t0 = measure(&busy, &s0, &r0);
    sqlite3_trace_v2(sto_sql_sqlite(db->conn), 0, NULL, NULL);
    char body[256];
    for (int i = 0; i < EXTERNAL; i++) {
        /* a third with a max_seconds deadline (not due: deadlines.c keeps them in a heap) */
        snprintf(body, sizeof body,
                 "{\"name\": \"ext-%d\", \"space\": {\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}},"
                 " \"tuner\": {\"algorithm\": \"random\", \"seed\": %d%s}}",
                 i, i, i % 3 == 0 ? ", \"max_seconds\": 86400" : "");
        post("/api/v1/studies", body, 201);
        if (i % 10 == 0) { /* some with a trial in flight, as ask/tell clients leave them */
            char path[64];
            snprintf(path, sizeof path, "/api/v1/studies/%d/ask", i + 2);
            post(path, "{}", 200);
        }
    }
    api_nodes_tick(ctx); /* the tick after the creations reads them, once */
    sqlite3_trace_v2(sto_sql_sqlite(db->conn), SQLITE_TRACE_STMT | SQLITE_TRACE_ROW, on_trace, NULL);
    double t1 = measure(&busy, &s1, &r1);
    sqlite3_trace_v2(sto_sql_sqlite(db->conn), 0, NULL, NULL);

    printf("scheduler pass, 1 embedded study running:\n");
    printf("  %5d external studies: %3ld statements, %3ld rows, %8.1f us\n", 0, s0, r0, t0 * 1e6);
    printf("  %5d external studies: %3ld statements, %3ld rows, %8.1f us (%.2fx)\n", EXTERNAL, s1, r1, t1 * 1e6,
           t1 / t0);
    assert_true(s0 > 0 && r0 > 0); /* the trace saw the pass */
    assert_int_equal(s1, s0);
    assert_int_equal(r1, r0);

    api_node_stop(ctx);
    api_ctx_free(ctx);
    sto_close(db);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tick_cost_flat_in_external_studies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
