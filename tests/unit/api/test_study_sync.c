/* test_study_sync.c - two hpod nodes on one PostgreSQL, in-process: two api
 * contexts, each with its own connection (sto_open on the same URL), the
 * way two hpod processes share a database (api_internal.h: study_sync.c).
 * - a grid asked alternately through A and B, then by two threads at once
 *   (one per node), never hands out a point twice and is exhausted
 *   exactly; trials asked through one node are told through the other,
 *   and the study ends with one study_complete event;
 * - TPE asked and told through both: each node's tuner history holds
 *   every trial of the database;
 * - MO-ASHA on node B ranks the vectors reported through node A;
 * - the refresh is incremental: after a node has loaded a study of 300
 *   trials, each ask reads only the trials changed since its last one;
 * - a node's own reports and tells are read back at most once each;
 * - enqueued trials: an ask on PostgreSQL looks for one in storage only
 *   when its syncs (or the study's load) read one waiting, and a trial
 *   enqueued through one node is handed out by an ask on the other, once.
 * On SQLite (one hpod per database) there is nothing to refresh: an ask
 * reads no trial back (the cost is none), and the two-node tests print
 * that they were left out. pg.api.test_study_sync runs them on the fixture's
 * PostgreSQL (tests/pg/pg_server.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "storage/sto_testutil.h"
#include "api/api_testutil.h"

typedef struct node {
    sto_db *db;
    api_ctx *ctx;
    sto_tmp dir; /* its data dir */
} node;

typedef struct nodes {
    node n[2];
    char url[320], pg_db[64];
} nodes;

static int setup(void **state) {
    nodes *ns = hpo_xcalloc(1, sizeof *ns);
    if (sto_test_pg()) sto_test_pg_create(ns->pg_db, ns->url, sizeof ns->url);
    for (int i = 0; i < 2; i++) {
        node *n = &ns->n[i];
        if (sto_tmp_init(&n->dir)) return -1;
        /* PostgreSQL: both on the one database; SQLite: node A alone */
        const char *target = sto_test_pg() ? ns->url : n->dir.db;
        if (sto_open(target, STO_SYNC_NORMAL, &n->db)) return -1;
        api_options opt = {.data_dir = n->dir.dir};
        if (api_ctx_new(n->db, &opt, &n->ctx)) return -1;
    }
    *state = ns;
    return 0;
}

static int teardown(void **state) {
    nodes *ns = *state;
    for (int i = 0; i < 2; i++) {
        api_ctx_free(ns->n[i].ctx);
        sto_close(ns->n[i].db);
        sto_tmp_close(&ns->n[i].dir);
    }
    sto_test_pg_drop(ns->pg_db);
    free(ns);
    return 0;
}

static json_t *call(api_ctx *ctx, const char *method, const char *path, const char *body, int *status) {
    return api_test_call(ctx, method, path, body, status);
}

static json_t *must(api_ctx *ctx, const char *method, const char *path, const char *body, int want) {
    int status;
    json_t *j = call(ctx, method, path, body, &status);
    if (status != want) {
        char *text = j ? json_dumps(j, 0) : NULL;
        fprintf(stderr, "%s %s -> %d (want %d): %s\n", method, path, status, want, text ? text : "");
        free(text);
    }
    assert_int_equal(status, want);
    return j;
}

static int64_t create(api_ctx *ctx, const char *body) {
    json_t *j = must(ctx, "POST", "/api/v1/studies", body, 201);
    int64_t id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    return id;
}

/* An ask: 200 (the trial id, its params as compact JSON in key when not
 * NULL) or, with want 409, the refusal (0). */
static int64_t ask(api_ctx *ctx, int64_t sid, char *key, size_t cap, int *status) {
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/ask", (long long)sid);
    json_t *j = call(ctx, "POST", path, NULL, status);
    int64_t id = json_integer_value(json_object_get(j, "trial_id"));
    if (key && *status == 200) {
        char *text = json_dumps(json_object_get(j, "params"), JSON_COMPACT | JSON_SORT_KEYS);
        snprintf(key, cap, "%s", text);
        free(text);
    }
    json_decref(j);
    return id;
}

static void tell(api_ctx *ctx, int64_t tid, double value) {
    char path[64], body[64];
    snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", (long long)tid);
    snprintf(body, sizeof body, "{\"value\": %.17g}", value);
    json_decref(must(ctx, "POST", path, body, 200));
}

/* The tuner's history size and the rows its syncs read, on that node. */
static void tuner_view(api_ctx *ctx, int64_t sid, int64_t *n_trials, int64_t *synced) {
    api_study *st = NULL;
    assert_int_equal(api_study_acquire(ctx, sid, &st), 0);
    pthread_mutex_lock(&st->lock);
    if (n_trials) *n_trials = tun_study_n_trials(st->tuner);
    if (synced) *synced = st->synced;
    pthread_mutex_unlock(&st->lock);
    api_study_release(ctx, st);
}

static int64_t stored_trials(api_ctx *ctx, int64_t sid) {
    int64_t counts[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(api_ctx_db(ctx), sid, counts), 0);
    int64_t n = 0;
    for (int s = 0; s < STO_TRIAL_N_STATES; s++) n += counts[s];
    return n;
}

static int pg_only(void) {
    if (sto_test_pg()) return 1;
    print_message("left out: two nodes share PostgreSQL only (pg.api.test_study_sync runs it)\n");
    return 0;
}

#define GRID_SPACE                                                                                  \
    "\"space\": {\"a\": {\"type\": \"int\", \"low\": 0, \"high\": 4}, \"b\": {\"type\": \"choice\", " \
    "\"values\": [\"x\", \"y\", \"z\"]}}"
enum { GRID_POINTS = 15 };

static int find_key(char keys[][96], int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return 1;
    return 0;
}

static void test_grid_alternating(void **state) {
    nodes *ns = *state;
    if (!pg_only()) return;
    api_ctx *a = ns->n[0].ctx, *b = ns->n[1].ctx;
    int64_t sid = create(a, "{\"name\": \"grid\", \"objective\": {\"direction\": \"minimize\"}, " GRID_SPACE
                            ", \"tuner\": {\"algorithm\": \"grid\"}}");
    char keys[GRID_POINTS][96];
    int64_t tids[GRID_POINTS];
    int status;
    for (int i = 0; i < GRID_POINTS; i++) {
        tids[i] = ask(i % 2 ? b : a, sid, keys[i], sizeof keys[i], &status);
        assert_int_equal(status, 200);
        assert_false(find_key(keys, i, keys[i])); /* never a point twice */
    }
    ask(b, sid, NULL, 0, &status);
    assert_int_equal(status, 409); /* exhausted on either node */
    ask(a, sid, NULL, 0, &status);
    assert_int_equal(status, 409);
    /* each trial told through the node that did not hand it out */
    for (int i = 0; i < GRID_POINTS; i++) tell(i % 2 ? a : b, tids[i], i);
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld", (long long)sid);
    json_t *st = must(b, "GET", path, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "complete");
    json_decref(st);
    sto_event *ev = NULL;
    size_t n = 0;
    int finals = 0;
    assert_int_equal(sto_event_list(api_ctx_db(a), sid, 0, 0, &ev, &n), 0);
    for (size_t i = 0; i < n; i++) finals += strcmp(ev[i].type, "study_complete") == 0;
    sto_event_list_free(ev, n);
    assert_int_equal(finals, 1);
    int64_t na, nb;
    tuner_view(a, sid, &na, NULL);
    tuner_view(b, sid, &nb, NULL);
    assert_int_equal(na, GRID_POINTS);
    assert_int_equal(nb, GRID_POINTS);
}

enum { RACE_POINTS = 40, RACE_EACH = RACE_POINTS / 2 };

typedef struct racer {
    api_ctx *ctx;
    int64_t sid;
    char keys[RACE_EACH][96];
    int n, failures;
} racer;

static void *race_asks(void *arg) {
    racer *r = arg;
    for (int i = 0; i < RACE_EACH; i++) {
        int status;
        ask(r->ctx, r->sid, r->keys[r->n], sizeof r->keys[r->n], &status);
        if (status == 200)
            r->n++;
        else
            r->failures++;
    }
    return NULL;
}

static void test_grid_racing(void **state) {
    nodes *ns = *state;
    if (!pg_only()) return;
    api_ctx *a = ns->n[0].ctx, *b = ns->n[1].ctx;
    /* 40 points: a in 0..7 x b in 5 choices */
    int64_t sid = create(b, "{\"name\": \"race\", \"objective\": {\"direction\": \"minimize\"}, \"space\": "
                            "{\"a\": {\"type\": \"int\", \"low\": 0, \"high\": 7}, \"b\": {\"type\": \"choice\", "
                            "\"values\": [1, 2, 3, 4, 5]}}, \"tuner\": {\"algorithm\": \"grid\"}}");
    racer r[2] = {{.ctx = a, .sid = sid}, {.ctx = b, .sid = sid}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, race_asks, &r[i]), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    char all[RACE_POINTS][96];
    int n = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].failures, 0);
        for (int k = 0; k < r[i].n; k++) {
            assert_false(find_key(all, n, r[i].keys[k]));
            snprintf(all[n++], sizeof all[0], "%s", r[i].keys[k]);
        }
    }
    assert_int_equal(n, RACE_POINTS);
    int status;
    ask(a, sid, NULL, 0, &status);
    assert_int_equal(status, 409);
    print_message("grid of %d points asked by two nodes at once: %d distinct points, then exhausted\n", RACE_POINTS,
                  n);
}

static double quad(const char *params) {
    json_t *p = json_loads(params, 0, NULL);
    double x = json_number_value(json_object_get(p, "x"));
    json_decref(p);
    return (x - 0.3) * (x - 0.3);
}

static void test_tpe_history_is_the_database(void **state) {
    nodes *ns = *state;
    if (!pg_only()) return;
    api_ctx *a = ns->n[0].ctx, *b = ns->n[1].ctx;
    int64_t sid = create(a, "{\"name\": \"tpe\", \"objective\": {\"direction\": \"minimize\"}, \"space\": {\"x\": "
                            "{\"type\": \"float\", \"low\": 0, \"high\": 1}}, \"tuner\": {\"algorithm\": \"tpe\", "
                            "\"seed\": 3, \"n_startup_trials\": 5}}");
    int status;
    for (int i = 0; i < 30; i++) {
        char key[96];
        api_ctx *on = i % 3 ? a : b, *teller = i % 2 ? a : b;
        int64_t tid = ask(on, sid, key, sizeof key, &status);
        assert_int_equal(status, 200);
        tell(teller, tid, quad(key));
    }
    /* one left running on a, seen as pending on b */
    ask(a, sid, NULL, 0, &status);
    assert_int_equal(status, 200);
    ask(b, sid, NULL, 0, &status); /* b syncs before it suggests */
    assert_int_equal(status, 200);
    int64_t na, nb, stored = stored_trials(a, sid);
    tuner_view(a, sid, &na, NULL);
    tuner_view(b, sid, &nb, NULL);
    print_message("tpe over two nodes: %lld trials stored; node A's tuner holds %lld, node B's %lld\n",
                  (long long)stored, (long long)na, (long long)nb);
    assert_int_equal(stored, 32);
    assert_int_equal(nb, stored);
    assert_true(na == stored - 1 || na == stored); /* a has not asked since b's last one */
}

/* A report of several objectives (MO-ASHA); its prune answer. */
static int report_vector(api_ctx *ctx, int64_t tid, double error, double speed) {
    char path[64], body[96];
    snprintf(path, sizeof path, "/api/v1/trials/%lld/report", (long long)tid);
    snprintf(body, sizeof body, "{\"step\": 1, \"values\": [%.17g, %.17g]}", error, speed);
    json_t *j = must(ctx, "POST", path, body, 200);
    int prune = json_is_true(json_object_get(j, "prune"));
    json_decref(j);
    return prune;
}

/* MO-ASHA across nodes: the vectors reported through node A reach node
 * B's pruner (B syncs them from the trials' curve points), so B prunes a
 * vector A's four trade-offs dominate at the rung, and keeps one that
 * dominates them; told as scalars, B would rank its trial alone. */
static void test_mo_asha_sees_other_nodes_vectors(void **state) {
    nodes *ns = *state;
    if (!pg_only()) return;
    api_ctx *a = ns->n[0].ctx, *b = ns->n[1].ctx;
    int64_t sid = create(a, "{\"name\": \"mo-asha\", \"objectives\": [{\"metric\": \"error\"}, {\"metric\": "
                            "\"speed\", \"direction\": \"maximize\"}], \"space\": {\"x\": {\"type\": \"float\", "
                            "\"low\": 0, \"high\": 1}}, \"tuner\": {\"algorithm\": \"random\", \"seed\": 1, "
                            "\"pruner\": {\"algorithm\": \"asha\", \"eta\": 2}}}");
    int status;
    /* B loads the study (its two trials) before A's reports: it learns them by syncing */
    int64_t dominated = ask(b, sid, NULL, 0, &status), dominating = ask(b, sid, NULL, 0, &status);
    assert_int_equal(status, 200);
    for (int k = 0; k < 4; k++) { /* four trade-offs at the first rung, through A */
        int64_t tid = ask(a, sid, NULL, 0, &status);
        assert_int_equal(status, 200);
        report_vector(a, tid, k + 1.0, k + 1.0);
    }
    int pruned = report_vector(b, dominated, 3.5, 2.5), kept = !report_vector(b, dominating, 0.5, 5.0);
    print_message("mo-asha on node B after A's four reports: (3.5, 2.5) %s, (0.5, 5) %s\n",
                  pruned ? "pruned" : "kept", kept ? "kept" : "pruned");
    assert_true(pruned);
    assert_true(kept);
}

static void test_refresh_is_incremental(void **state) {
    nodes *ns = *state;
    if (!pg_only()) return;
    api_ctx *a = ns->n[0].ctx, *b = ns->n[1].ctx;
    int64_t sid = create(a, "{\"name\": \"big\", \"objective\": {\"direction\": \"minimize\"}, \"space\": {\"x\": "
                            "{\"type\": \"float\", \"low\": 0, \"high\": 1}}, \"tuner\": {\"algorithm\": \"tpe\", "
                            "\"seed\": 4}}");
    enum { LOADED = 300, ROUNDS = 20 };
    for (int i = 0; i < LOADED; i++) {
        char params[48];
        snprintf(params, sizeof params, "{\"x\": %.6f}", (i * 0.618034) - floor(i * 0.618034));
        sto_trial_in in = {.params = params, .state = STO_TRIAL_COMPLETE, .value = quad(params), .value_std = NAN};
        assert_int_equal(sto_trial_add_ev(api_ctx_db(a), sid, &in, NULL, NULL, NULL), 0);
    }
    int status;
    ask(b, sid, NULL, 0, &status); /* b loads the study (300 trials), then asks */
    assert_int_equal(status, 200);
    int64_t synced0, synced, nb;
    tuner_view(b, sid, NULL, &synced0);
    for (int i = 0; i < ROUNDS; i++) {
        char key[96];
        int64_t tid = ask(a, sid, key, sizeof key, &status);
        assert_int_equal(status, 200);
        tell(a, tid, quad(key));
        ask(b, sid, NULL, 0, &status);
        assert_int_equal(status, 200);
    }
    tuner_view(b, sid, &nb, &synced);
    print_message("a node with %d trials loaded, then %d rounds (ask+tell on A, ask on B): B's syncs read %lld "
                  "rows (a reload per ask would read %d)\n",
                  LOADED, ROUNDS, (long long)(synced - synced0), LOADED * ROUNDS);
    /* per round: A's trial, and B's own previous one read back once */
    assert_true(synced - synced0 <= 2 * ROUNDS + 2);
    assert_true(synced - synced0 >= ROUNDS); /* it did read A's */
    assert_int_equal(nb, stored_trials(b, sid));
}

static void enqueue(api_ctx *ctx, int64_t sid, const char *params) {
    char path[64], body[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/enqueue", (long long)sid);
    snprintf(body, sizeof body, "{\"params\": %s}", params);
    json_decref(must(ctx, "POST", path, body, 201));
}

static size_t n_waiting(api_ctx *ctx, int64_t sid) {
    api_study *st = NULL;
    assert_int_equal(api_study_acquire(ctx, sid, &st), 0);
    pthread_mutex_lock(&st->lock);
    size_t n = st->n_waiting;
    pthread_mutex_unlock(&st->lock);
    api_study_release(ctx, st);
    return n;
}

static void test_enqueued_across_nodes(void **state) {
    nodes *ns = *state;
    if (!pg_only()) return;
    api_ctx *a = ns->n[0].ctx, *b = ns->n[1].ctx;
    const char *def = "{\"name\": \"q\", \"objective\": {\"direction\": \"minimize\"}, \"space\": {\"x\": "
                      "{\"type\": \"float\", \"low\": 0, \"high\": 1}}, \"tuner\": {\"algorithm\": \"random\"}}";
    int64_t sid = create(a, def);
    char key[96];
    int status;
    ask(b, sid, key, sizeof key, &status); /* B has the study: nothing waits */
    assert_int_equal(status, 200);
    assert_int_equal(n_waiting(b, sid), 0);
    enqueue(a, sid, "{\"x\": 0.25}");
    ask(b, sid, key, sizeof key, &status); /* B's sync reads it: B hands it out */
    assert_int_equal(status, 200);
    assert_string_equal(key, "{\"x\":0.25}");
    enqueue(a, sid, "{\"x\": 0.75}");
    ask(a, sid, key, sizeof key, &status);
    assert_string_equal(key, "{\"x\":0.75}");
    ask(b, sid, key, sizeof key, &status); /* handed out by A: B draws a new point */
    assert_int_equal(status, 200);
    assert_string_not_equal(key, "{\"x\":0.75}");
    assert_int_equal(n_waiting(b, sid), 0);
    assert_int_equal(stored_trials(a, sid), 4);
    /* a study B loads while a trial waits */
    int64_t sid2 = create(a, def);
    enqueue(a, sid2, "{\"x\": 0.5}");
    ask(b, sid2, key, sizeof key, &status);
    assert_int_equal(status, 200);
    assert_string_equal(key, "{\"x\":0.5}");
    ask(a, sid2, key, sizeof key, &status);
    assert_string_not_equal(key, "{\"x\":0.5}");
}

static void test_sqlite_syncs_nothing(void **state) {
    nodes *ns = *state;
    if (sto_test_pg()) return;
    api_ctx *a = ns->n[0].ctx;
    int64_t sid = create(a, "{\"name\": \"one\", \"objective\": {\"direction\": \"minimize\"}, \"space\": {\"x\": "
                            "{\"type\": \"float\", \"low\": 0, \"high\": 1}}, \"tuner\": {\"algorithm\": \"random\"}}");
    int status;
    for (int i = 0; i < 10; i++) {
        char key[96];
        int64_t tid = ask(a, sid, key, sizeof key, &status);
        assert_int_equal(status, 200);
        tell(a, tid, quad(key));
    }
    int64_t n, synced;
    tuner_view(a, sid, &n, &synced);
    assert_int_equal(n, 10);
    assert_int_equal(synced, 0); /* no query: one hpod per SQLite database */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_grid_alternating, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grid_racing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tpe_history_is_the_database, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mo_asha_sees_other_nodes_vectors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refresh_is_incremental, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enqueued_across_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_syncs_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
