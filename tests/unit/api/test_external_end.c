/* test_external_end.c - external (ask/tell) studies end (api.h: budgets),
 * in-process: a study whose budget is spent (tuner.max_trials asked and all
 * told, a lease expiry counting; a grid with every point asked and told;
 * tuner.max_seconds passed) and with nothing running becomes complete with
 * one study_complete event, at a tell, a lease expiry, a refused ask, a
 * resume, or (max_seconds with idle clients) the scheduler's lease pass;
 * an ask past max_seconds gets 409 exhausted naming tuner.max_seconds;
 * `updated` moves with the trials; an unseeded study gets a seed that is
 * stored and shown, and reproduces its trials; the event stream of a
 * finished study answers 204 to a Last-Event-ID with nothing after it.
 *
 * max_seconds is real time: the tests wait until the deadline has passed
 * (a fraction of a second) and assert only what follows from that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "jobs.h"
#include "api/api_testutil.h"

static json_t *call(api_ctx *ctx, const char *method, const char *path, const char *body, int *status) {
    return api_test_call(ctx, method, path, body, status);
}

/* A call that must answer want; returns its JSON. */
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

static json_t *study(api_ctx *ctx, int64_t id) {
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld", (long long)id);
    return must(ctx, "GET", path, NULL, 200);
}

static const char *state_of(api_ctx *ctx, int64_t id) {
    static char buf[32];
    json_t *j = study(ctx, id);
    snprintf(buf, sizeof buf, "%s", json_string_value(json_object_get(j, "state")));
    json_decref(j);
    return buf;
}

/* Asks a trial: its id (and params in *params when not NULL). */
static int64_t ask(api_ctx *ctx, int64_t sid, json_t **params) {
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/ask", (long long)sid);
    json_t *j = must(ctx, "POST", path, NULL, 200);
    int64_t id = json_integer_value(json_object_get(j, "trial_id"));
    if (params) *params = json_incref(json_object_get(j, "params"));
    json_decref(j);
    return id;
}

/* An ask that is refused: 409 with that code and field. */
static void ask_refused(api_ctx *ctx, int64_t sid, const char *code, const char *field) {
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/ask", (long long)sid);
    json_t *j = must(ctx, "POST", path, NULL, 409);
    json_t *e = json_object_get(j, "error");
    printf("ask study %lld -> 409 %s %s: %s\n", (long long)sid, json_string_value(json_object_get(e, "code")),
           json_string_value(json_object_get(e, "field")), json_string_value(json_object_get(e, "message")));
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    assert_string_equal(json_string_value(json_object_get(e, "field")), field);
    json_decref(j);
}

static void tell(api_ctx *ctx, int64_t tid, const char *body) {
    char path[64];
    snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", (long long)tid);
    json_decref(must(ctx, "POST", path, body, 200));
}

/* How many study_complete events the study has, and the last one's data
 * (a new reference, or NULL). The last event must be it when there is one. */
static int completions(api_ctx *ctx, int64_t sid, json_t **data) {
    sto_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(sto_event_list(api_ctx_db(ctx), sid, 0, 0, &ev, &n), 0);
    int k = 0;
    if (data) *data = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].type, "study_complete") != 0) continue;
        k++;
        if (data) {
            json_decref(*data);
            *data = json_loads(ev[i].data, 0, NULL);
        }
    }
    if (k) assert_string_equal(ev[n - 1].type, "study_complete");
    sto_event_list_free(ev, n);
    return k;
}

static void assert_completed(api_ctx *ctx, int64_t sid, const char *reason, int complete, int pruned, int failed) {
    json_t *data;
    assert_string_equal(state_of(ctx, sid), "complete");
    assert_int_equal(completions(ctx, sid, &data), 1);
    char *text = json_dumps(data, JSON_COMPACT);
    printf("study %lld complete: %s\n", (long long)sid, text);
    free(text);
    assert_string_equal(json_string_value(json_object_get(data, "reason")), reason);
    assert_int_equal(json_integer_value(json_object_get(data, "complete")), complete);
    assert_int_equal(json_integer_value(json_object_get(data, "pruned")), pruned);
    assert_int_equal(json_integer_value(json_object_get(data, "failed")), failed);
    json_decref(data);
}

static void assert_running(api_ctx *ctx, int64_t sid) {
    assert_string_equal(state_of(ctx, sid), "running");
    assert_int_equal(completions(ctx, sid, NULL), 0);
}

/* Waits until the study's max_seconds have passed (by the clock hpod uses). */
static void wait_past(api_ctx *ctx, int64_t sid, double max_seconds) {
    json_t *j = study(ctx, sid);
    double deadline = json_number_value(json_object_get(j, "created")) + max_seconds;
    json_decref(j);
    while (hpo_now() <= deadline + 0.01) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static char dir[64];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/hpo-ext-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    sto_db *db;
    api_ctx *ctx;
    if (sto_open(":memory:", STO_SYNC_NORMAL, &db)) return -1;
    api_options opt = {.data_dir = dir};
    if (api_ctx_new(db, &opt, &ctx)) return -1;
    *state = ctx;
    return 0;
}

static int teardown(void **state) {
    api_ctx *ctx = *state;
    sto_db *db = api_ctx_db(ctx);
    api_ctx_free(ctx);
    sto_close(db);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}

#define SPACE "\"space\": {\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}}"

/* max_trials asked and all told: the last tell ends it; a lease expiry
 * counts as told; an ask past max_trials is refused (and ends nothing while
 * a trial runs). */
static void test_max_trials(void **state) {
    api_ctx *ctx = *state;
    int64_t a = create(ctx, "{\"name\": \"a\", " SPACE ", \"tuner\": {\"seed\": 1, \"max_trials\": 2}}");
    int64_t t0 = ask(ctx, a, NULL), t1 = ask(ctx, a, NULL);
    ask_refused(ctx, a, "exhausted", "tuner.max_trials");
    assert_running(ctx, a);
    tell(ctx, t0, "{\"state\": \"failed\"}");
    assert_running(ctx, a);
    tell(ctx, t1, "{\"value\": 0.5}");
    assert_completed(ctx, a, "tuner.max_trials", 1, 0, 1);
    ask_refused(ctx, a, "exhausted", "tuner.max_trials"); /* a complete study still names its budget */
    assert_int_equal(completions(ctx, a, NULL), 1);

    /* the last trial's lease runs out: the expiry ends the study */
    int64_t b = create(ctx, "{\"name\": \"b\", " SPACE ", \"tuner\": {\"seed\": 2, \"max_trials\": 3, "
                            "\"lease_seconds\": 30}}");
    int64_t u0 = ask(ctx, b, NULL), u1 = ask(ctx, b, NULL);
    ask(ctx, b, NULL);
    tell(ctx, u0, "{\"value\": 1}");
    tell(ctx, u1, "{\"state\": \"pruned\"}");
    assert_running(ctx, b);
    assert_int_equal(api_expire_leases(ctx, hpo_now()), 0);
    assert_running(ctx, b);
    assert_int_equal(api_expire_leases(ctx, hpo_now() + 60), 1);
    assert_completed(ctx, b, "tuner.max_trials", 1, 1, 1);
    assert_int_equal(api_expire_leases(ctx, hpo_now() + 120), 0);
    assert_int_equal(completions(ctx, b, NULL), 1);
}

/* A grid ends when every point was asked and told, without another ask. */
static void test_grid_exhausted(void **state) {
    api_ctx *ctx = *state;
    int64_t g = create(ctx, "{\"name\": \"g\", \"space\": {\"c\": {\"type\": \"choice\", \"values\": [\"a\", \"b\", \"c\"]}},"
                            " \"tuner\": {\"algorithm\": \"grid\", \"seed\": 3}}");
    int64_t t[3];
    for (int i = 0; i < 3; i++) t[i] = ask(ctx, g, NULL);
    ask_refused(ctx, g, "exhausted", "space");
    tell(ctx, t[0], "{\"value\": 1}");
    tell(ctx, t[1], "{\"value\": 2}");
    assert_running(ctx, g);
    tell(ctx, t[2], "{\"value\": 3}");
    assert_completed(ctx, g, "space", 3, 0, 0);
    ask_refused(ctx, g, "exhausted", "space");
}

/* max_seconds: an ask after the deadline is refused naming it and ends an
 * idle study; a study idle at its deadline ends at the scheduler's next
 * lease pass; one with a trial running ends when that trial is told; one
 * paused ends when resumed. */
static void test_max_seconds(void **state) {
    api_ctx *ctx = *state;
    /* first: its ask must come well inside its 2 s, on a loaded machine too */
    int64_t r = create(ctx, "{\"name\": \"busy\", " SPACE ", \"tuner\": {\"seed\": 1, \"max_seconds\": 2}}");
    int64_t tr = ask(ctx, r, NULL);
    int64_t a = create(ctx, "{\"name\": \"ask\", " SPACE ", \"tuner\": {\"seed\": 1, \"max_seconds\": 0.2}}");
    int64_t i = create(ctx, "{\"name\": \"idle\", " SPACE ", \"tuner\": {\"seed\": 1, \"max_seconds\": 0.2}}");
    int64_t p = create(ctx, "{\"name\": \"paused\", " SPACE ", \"tuner\": {\"seed\": 1, \"max_seconds\": 0.2}}");
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/pause", (long long)p);
    json_decref(must(ctx, "POST", path, NULL, 200));
    wait_past(ctx, a, 0.2);

    ask_refused(ctx, a, "exhausted", "tuner.max_seconds");
    assert_completed(ctx, a, "tuner.max_seconds", 0, 0, 0);
    ask_refused(ctx, a, "exhausted", "tuner.max_seconds");

    assert_running(ctx, i);
    assert_int_equal(api_expire_leases(ctx, hpo_now()), 0); /* what the scheduler calls every second */
    assert_completed(ctx, i, "tuner.max_seconds", 0, 0, 0);

    assert_string_equal(state_of(ctx, p), "paused");
    snprintf(path, sizeof path, "/api/v1/studies/%lld/resume", (long long)p);
    json_decref(must(ctx, "POST", path, NULL, 200));
    assert_completed(ctx, p, "tuner.max_seconds", 0, 0, 0);

    wait_past(ctx, r, 2);
    assert_int_equal(api_expire_leases(ctx, hpo_now()), 0);
    assert_running(ctx, r); /* its trial is still out */
    ask_refused(ctx, r, "exhausted", "tuner.max_seconds");
    assert_running(ctx, r);
    tell(ctx, tr, "{\"value\": 0.1}");
    assert_completed(ctx, r, "tuner.max_seconds", 1, 0, 0);
}

/* A deadline that passed while hpod was down ends the study at the first
 * pass of the next process (a fresh context on the same database). */
static void test_max_seconds_after_restart(void **state) {
    api_ctx *ctx = *state;
    sto_db *db = api_ctx_db(ctx);
    int64_t s = create(ctx, "{\"name\": \"restart\", " SPACE ", \"tuner\": {\"max_seconds\": 0.2}}");
    wait_past(ctx, s, 0.2);
    api_ctx_free(ctx);
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);
    *state = ctx;
    assert_running(ctx, s);
    assert_int_equal(api_expire_leases(ctx, hpo_now()), 0);
    assert_completed(ctx, s, "tuner.max_seconds", 0, 0, 0);
}

/* updated is the time of the study's latest change, its trials' included. */
static void test_updated_follows_trials(void **state) {
    api_ctx *ctx = *state;
    int64_t s = create(ctx, "{\"name\": \"u\", " SPACE ", \"tuner\": {\"seed\": 1, \"lease_seconds\": 30}}");
    json_t *j = study(ctx, s);
    double created = json_number_value(json_object_get(j, "created"));
    json_decref(j);
    while (hpo_now() <= created) {
    } /* the clock moved past the creation */
    int64_t t = ask(ctx, s, NULL);
    char path[64];
    snprintf(path, sizeof path, "/api/v1/trials/%lld", (long long)t);
    j = must(ctx, "GET", path, NULL, 200);
    double trial_created = json_number_value(json_object_get(j, "created"));
    json_decref(j);
    j = study(ctx, s);
    printf("study created %.6f, updated %.6f after an ask (trial created %.6f)\n", created,
           json_number_value(json_object_get(j, "updated")), trial_created);
    assert_true(json_number_value(json_object_get(j, "updated")) == trial_created);
    json_decref(j);
    tell(ctx, t, "{\"value\": 0.5}");
    j = must(ctx, "GET", path, NULL, 200);
    double finished = json_number_value(json_object_get(j, "finished"));
    json_decref(j);
    j = study(ctx, s);
    assert_true(json_number_value(json_object_get(j, "updated")) == finished);
    json_decref(j);
}

/* The seed: drawn for an unseeded study, stored in its definition, shown,
 * and a study created with it asks the same trials. A given seed is kept. */
static void test_seed_drawn_stored_shown(void **state) {
    api_ctx *ctx = *state;
    const char *unseeded = "{\"name\": \"s\", \"space\": {\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1},"
                           " \"k\": {\"type\": \"int\", \"low\": 1, \"high\": 1000}}, \"tuner\": {\"algorithm\": \"tpe\","
                           " \"n_startup_trials\": 2}}";
    json_t *created = must(ctx, "POST", "/api/v1/studies", unseeded, 201);
    int64_t s1 = json_integer_value(json_object_get(created, "id"));
    json_t *seed = json_object_get(created, "seed");
    assert_true(json_is_integer(seed));
    json_int_t v = json_integer_value(seed);
    printf("drawn seed %lld\n", (long long)v);
    assert_true(v >= 0 && v < (json_int_t)1 << 31);
    json_t *j = study(ctx, s1);
    assert_int_equal(json_integer_value(json_object_get(j, "seed")), v);
    json_t *def_seed = json_object_get(json_object_get(json_object_get(j, "definition"), "tuner"), "seed");
    assert_true(json_is_integer(def_seed));
    assert_int_equal(json_integer_value(def_seed), v);
    json_decref(j);

    /* another unseeded study draws its own (equal by chance once in 2^31) */
    int64_t s2 = create(ctx, unseeded), s3 = create(ctx, unseeded);
    json_t *j2 = study(ctx, s2), *j3 = study(ctx, s3);
    json_int_t v2 = json_integer_value(json_object_get(j2, "seed")), v3 = json_integer_value(json_object_get(j3, "seed"));
    json_decref(j2);
    json_decref(j3);
    assert_false(v == v2 && v == v3);

    /* reproducible: the same definition with the seed read back asks the same trials */
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\": \"s\", \"space\": {\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1},"
             " \"k\": {\"type\": \"int\", \"low\": 1, \"high\": 1000}}, \"tuner\": {\"algorithm\": \"tpe\","
             " \"n_startup_trials\": 2, \"seed\": %lld}}",
             (long long)v);
    int64_t copy = create(ctx, body);
    j = study(ctx, copy);
    assert_int_equal(json_integer_value(json_object_get(j, "seed")), v); /* a given seed is kept */
    json_decref(j);
    for (int i = 0; i < 5; i++) {
        json_t *p1, *p2;
        int64_t a = ask(ctx, s1, &p1), b = ask(ctx, copy, &p2);
        assert_true(json_equal(p1, p2));
        snprintf(body, sizeof body, "{\"value\": %.17g}", json_number_value(json_object_get(p1, "x")));
        tell(ctx, a, body);
        tell(ctx, b, body);
        json_decref(p1);
        json_decref(p2);
    }
    json_decref(created);

    /* an embedded study too */
    created = must(ctx, "POST", "/api/v1/studies",
                   "{\"name\": \"emb\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
                   " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 200, \"validation_split\": 50},"
                   " \"training\": {\"max_epochs\": 1, \"batch_size\": 50}, \"tuner\": {\"max_trials\": 1}}",
                   201);
    assert_true(json_is_integer(json_object_get(created, "seed")));
    j = study(ctx, json_integer_value(json_object_get(created, "id")));
    def_seed = json_object_get(json_object_get(json_object_get(j, "definition"), "tuner"), "seed");
    assert_int_equal(json_integer_value(def_seed), json_integer_value(json_object_get(created, "seed")));
    json_decref(j);
    json_decref(created);
}

/* GET events with Last-Event-ID on a finished study. */
static int events_status(api_ctx *ctx, int64_t sid, long long last_id, int *has_stream) {
    char path[64], last[32];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/events", (long long)sid);
    snprintf(last, sizeof last, "%lld", last_id);
    api_request req = {.method = "GET", .path = path, .last_event_id = last};
    api_response resp;
    api_handle(ctx, &req, &resp);
    *has_stream = resp.stream != NULL;
    if (resp.stream_free) resp.stream_free(resp.stream_arg);
    int status = resp.status;
    printf("events of study %lld after %lld -> %d, %zu bytes%s\n", (long long)sid, last_id, status, resp.body_len,
           *has_stream ? ", a stream" : "");
    if (status == 204) assert_int_equal(resp.body_len, 0);
    api_response_clear(&resp);
    return status;
}

static long long last_event(api_ctx *ctx, int64_t sid) {
    json_t *j = study(ctx, sid);
    long long id = json_integer_value(json_object_get(j, "last_event_id"));
    json_decref(j);
    return id;
}

static void test_events_204_when_finished(void **state) {
    api_ctx *ctx = *state;
    int stream;
    int64_t s = create(ctx, "{\"name\": \"e\", " SPACE ", \"tuner\": {\"seed\": 1, \"max_trials\": 1}}");
    int64_t t = ask(ctx, s, NULL);
    long long before = last_event(ctx, s);
    assert_int_equal(events_status(ctx, s, before, &stream), 200); /* running: the stream waits */
    assert_true(stream);
    tell(ctx, t, "{\"value\": 1}");
    assert_string_equal(state_of(ctx, s), "complete");
    long long last = last_event(ctx, s);
    assert_int_equal(events_status(ctx, s, last, &stream), 204);
    assert_false(stream);
    assert_int_equal(events_status(ctx, s, last + 5, &stream), 204);
    assert_int_equal(events_status(ctx, s, before, &stream), 200); /* events after it remain */
    assert_true(stream);

    int64_t c = create(ctx, "{\"name\": \"c\", " SPACE "}");
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/cancel", (long long)c);
    json_decref(must(ctx, "POST", path, NULL, 200));
    assert_int_equal(events_status(ctx, c, last_event(ctx, c), &stream), 204);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_max_trials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grid_exhausted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_seconds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_seconds_after_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_updated_follows_trials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed_drawn_stored_shown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events_204_when_finished, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
