/* test_metrics.c - GET /metrics is valid Prometheus text (exposition format
 * 0.0.4): every line a comment (# HELP / # TYPE) or a sample with a
 * well-formed name, labels and value; every sample of a family typed once,
 * before it; no series twice; histogram buckets ascending in le, cumulative,
 * ending at +Inf equal to _count. And the series the api feeds move: requests
 * and their latency by route, slots, busy slots, epochs and samples/s per
 * slot, each slot's device and busy time (GPU memory only where the GPU
 * answers), event streams, queued jobs, build info, process figures, and
 * the jobs' back-off on a full disk or failing files (before, nothing in
 * /metrics told a monitor that hpod's disk was full: a storage-fault
 * audit's F6). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_internal.h"
#include "backend.h"
#include "gpu.h"

static api_ctx *ctx;
static sto_db *db;

static int setup(void **state) {
    if (sto_open(":memory:", STO_SYNC_NORMAL, &db)) return -1;
    return api_ctx_new(db, NULL, &ctx);
}

static int teardown(void **state) {
    api_ctx_free(ctx);
    sto_close(db);
    return 0;
}

#define MAX_SAMPLES 2048
typedef struct sample {
    char name[128];
    char labels[512]; /* canonical: name="value",... as written, le removed */
    char le[32];      /* the le label of a bucket, "" if none */
    double value;
} sample;

typedef struct family {
    char name[128];
    char type[16];
} family;

typedef struct parsed {
    sample s[MAX_SAMPLES];
    size_t n;
    family f[256];
    size_t nf;
} parsed;

static int is_name(const char *s, size_t n, int colon) {
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || (colon && s[0] == ':'))) return 0;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || (colon && s[i] == ':'))) return 0;
    return 1;
}

static const family *family_of(const parsed *p, const char *name) {
    for (size_t i = 0; i < p->nf; i++) {
        size_t n = strlen(p->f[i].name);
        if (strcmp(p->f[i].name, name) == 0) return &p->f[i];
        if (strcmp(p->f[i].type, "histogram") == 0 && strncmp(name, p->f[i].name, n) == 0 &&
            (strcmp(name + n, "_bucket") == 0 || strcmp(name + n, "_sum") == 0 || strcmp(name + n, "_count") == 0))
            return &p->f[i];
    }
    return NULL;
}

/* Parses one sample line into s; fails the test on a malformed one. */
static void parse_sample(const char *line, sample *s) {
    const char *p = line;
    size_t n = strcspn(p, "{ ");
    assert_true(n < sizeof s->name);
    if (!is_name(p, n, 1)) fail_msg("bad metric name in: %s", line);
    memcpy(s->name, p, n);
    s->name[n] = '\0';
    p += n;
    s->labels[0] = s->le[0] = '\0';
    size_t ll = 0;
    if (*p == '{') {
        p++;
        while (*p != '}') {
            size_t k = strcspn(p, "=");
            if (!is_name(p, k, 0) || p[k] != '=' || p[k + 1] != '"') fail_msg("bad label in: %s", line);
            char key[64];
            assert_true(k < sizeof key);
            memcpy(key, p, k);
            key[k] = '\0';
            p += k + 2;
            char val[256];
            size_t vl = 0;
            while (*p != '"') {
                if (!*p || *p == '\n') fail_msg("unterminated label value in: %s", line);
                if (*p == '\\') {
                    p++;
                    if (*p != '\\' && *p != '"' && *p != 'n') fail_msg("bad escape in: %s", line);
                }
                assert_true(vl + 1 < sizeof val);
                val[vl++] = *p++;
            }
            val[vl] = '\0';
            p++;
            if (strcmp(key, "le") == 0) {
                assert_true(vl < sizeof s->le);
                memcpy(s->le, val, vl + 1);
            } else {
                int w = snprintf(s->labels + ll, sizeof s->labels - ll, "%s%s=\"%s\"", ll ? "," : "", key, val);
                assert_true(w > 0 && (size_t)w < sizeof s->labels - ll);
                ll += (size_t)w;
            }
            if (*p == ',') p++;
            else if (*p != '}') fail_msg("expected , or } in: %s", line);
        }
        p++;
    }
    if (*p != ' ') fail_msg("no space before the value in: %s", line);
    p++;
    char *end;
    if (strcmp(p, "+Inf") == 0) s->value = INFINITY;
    else if (strcmp(p, "-Inf") == 0) s->value = -INFINITY;
    else if (strcmp(p, "NaN") == 0) s->value = NAN;
    else {
        s->value = strtod(p, &end);
        if (end == p || *end) fail_msg("bad value in: %s", line);
    }
}

static void parse(const char *text, parsed *out) {
    memset(out, 0, sizeof *out);
    const char *p = text;
    assert_true(strlen(text) > 0 && text[strlen(text) - 1] == '\n');
    while (*p) {
        size_t n = strcspn(p, "\n");
        char line[1024];
        assert_true(n < sizeof line);
        memcpy(line, p, n);
        line[n] = '\0';
        p += n + 1;
        assert_true(n > 0);
        if (line[0] == '#') {
            char kind[8], name[128], rest[512];
            if (sscanf(line, "# %7s %127s %511[^\n]", kind, name, rest) != 3) fail_msg("bad comment: %s", line);
            if (!is_name(name, strlen(name), 1)) fail_msg("bad name in: %s", line);
            if (strcmp(kind, "TYPE") == 0) {
                static const char *types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
                int ok = 0;
                for (size_t i = 0; i < 5; i++) ok |= strcmp(rest, types[i]) == 0;
                if (!ok) fail_msg("bad type: %s", line);
                for (size_t i = 0; i < out->nf; i++)
                    if (strcmp(out->f[i].name, name) == 0) fail_msg("typed twice: %s", name);
                for (size_t i = 0; i < out->n; i++)
                    if (strcmp(out->s[i].name, name) == 0) fail_msg("typed after its samples: %s", name);
                assert_true(out->nf < 256);
                snprintf(out->f[out->nf].name, sizeof out->f[0].name, "%s", name);
                memcpy(out->f[out->nf].type, rest, strlen(rest) + 1); /* one of the types above */
                out->nf++;
            } else if (strcmp(kind, "HELP") != 0) {
                fail_msg("a comment that is neither HELP nor TYPE: %s", line);
            }
            continue;
        }
        assert_true(out->n < MAX_SAMPLES);
        sample *s = &out->s[out->n];
        parse_sample(line, s);
        const family *f = family_of(out, s->name);
        if (!f) fail_msg("sample of an untyped family: %s", line);
        if (strcmp(f->type, "counter") == 0 && !(s->value >= 0)) fail_msg("negative counter: %s", line);
        int bucket = strcmp(f->type, "histogram") == 0 && strstr(s->name, "_bucket");
        if (bucket != (s->le[0] != '\0')) fail_msg("le on a non-bucket or a bucket without le: %s", line);
        for (size_t i = 0; i < out->n; i++)
            if (strcmp(out->s[i].name, s->name) == 0 && strcmp(out->s[i].labels, s->labels) == 0 &&
                strcmp(out->s[i].le, s->le) == 0)
                fail_msg("series twice: %s", line);
        out->n++;
    }
}

/* Every histogram series: le ascending, counts non-decreasing, +Inf last and
 * equal to _count. */
static void check_histograms(const parsed *p) {
    for (size_t fi = 0; fi < p->nf; fi++) {
        if (strcmp(p->f[fi].type, "histogram") != 0) continue;
        char bucket[160], count[160];
        snprintf(bucket, sizeof bucket, "%s_bucket", p->f[fi].name);
        snprintf(count, sizeof count, "%s_count", p->f[fi].name);
        for (size_t c = 0; c < p->n; c++) {
            if (strcmp(p->s[c].name, count) != 0) continue;
            double last_le = -INFINITY, last = -1;
            int n_buckets = 0, inf_seen = 0;
            for (size_t b = 0; b < p->n; b++) {
                if (strcmp(p->s[b].name, bucket) != 0 || strcmp(p->s[b].labels, p->s[c].labels) != 0) continue;
                assert_false(inf_seen); /* +Inf is the last bucket */
                double le = strcmp(p->s[b].le, "+Inf") == 0 ? INFINITY : strtod(p->s[b].le, NULL);
                if (isinf(le)) inf_seen = 1;
                assert_true(le > last_le);
                assert_true(p->s[b].value >= last);
                last_le = le;
                last = p->s[b].value;
                n_buckets++;
            }
            assert_true(n_buckets >= 2);
            assert_true(inf_seen);
            assert_true(last == p->s[c].value);
        }
    }
}

static const sample *find(const parsed *p, const char *name, const char *labels) {
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->s[i].name, name) == 0 && strcmp(p->s[i].labels, labels) == 0 && !p->s[i].le[0])
            return &p->s[i];
    return NULL;
}

static double value_of(const parsed *p, const char *name, const char *labels) {
    const sample *s = find(p, name, labels);
    if (!s) fail_msg("no series %s{%s}", name, labels);
    return s->value;
}

static parsed *scrape(void) {
    size_t len;
    char *text = api_metrics_render(ctx, &len);
    assert_int_equal(strlen(text), len);
    parsed *p = malloc(sizeof *p);
    parse(text, p);
    check_histograms(p);
    free(text);
    return p;
}

static void test_format_and_series(void **state) {
    parsed *p = scrape();
    assert_true(value_of(p, "hpo_slots", "") == 0);
    assert_true(value_of(p, "hpo_event_streams", "") == 0);
    assert_true(value_of(p, "hpo_jobs_queued", "") == 0);
    assert_true(value_of(p, "process_resident_memory_bytes", "") > 0);
    assert_true(value_of(p, "process_open_fds", "") > 0);
    assert_true(value_of(p, "process_cpu_seconds_total", "") >= 0);
    assert_true(value_of(p, "process_start_time_seconds", "") > 1e9);
    int build = 0;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->s[i].name, "hpo_build_info") == 0) {
            build++;
            assert_true(p->s[i].value == 1);
            assert_non_null(strstr(p->s[i].labels, "version=\"" HPO_VERSION "\""));
            assert_non_null(strstr(p->s[i].labels, "blas_core=\""));
            assert_non_null(strstr(p->s[i].labels, eng_backend_cpu()->gemm_bf16 ? "cpu_bf16=\"yes\"" : "cpu_bf16=\"no\""));
        }
    assert_int_equal(build, 1);
    free(p);

    /* which kinds of slot there are: none named yet, any; then CPU only */
    assert_true(api_have_slot_for(ctx, API_DEVICE_CUDA) && api_have_slot_for(ctx, API_DEVICE_CPU));
    /* a slot name with the characters labels escape */
    const char *slots[] = {"cpu:0", "odd\"slot\\"};
    api_metrics_slots(ctx, slots, 2);
    assert_true(api_have_slot_for(ctx, API_DEVICE_CPU) && api_have_slot_for(ctx, API_DEVICE_ANY));
    assert_false(api_have_slot_for(ctx, API_DEVICE_CUDA));
    api_metrics_observe_request(ctx, "studies.create", 201, 0.0003);
    api_metrics_observe_request(ctx, "studies.create", 400, 0.02);
    api_metrics_observe_request(ctx, "studies.create", 201, 30.0); /* over every bound: only +Inf */
    api_metrics_observe_request(ctx, NULL, 404, 0.001);
    api_metrics_observe_request(ctx, "healthz", 408, -1); /* counted, no latency */
    api_metrics_observe_op(ctx, API_OP_TELL, 0.002);
    api_metrics_job(ctx, +1);
    api_metrics_epoch(ctx, "odd\"slot\\", 1234.5);
    api_metrics_epoch(ctx, "odd\"slot\\", 2000);
    api_metrics_epoch(ctx, "gpu:9", 1); /* not a slot: not counted */
    api_metrics_stream(ctx, +1);
    api_metrics_stream(ctx, +1);
    api_metrics_stream(ctx, -1);

    p = scrape();
    assert_true(value_of(p, "hpo_slots", "") == 2);
    assert_true(value_of(p, "hpo_slots_busy", "") == 1);
    assert_true(value_of(p, "hpo_event_streams", "") == 1);
    assert_true(value_of(p, "hpo_epochs_total", "slot=\"cpu:0\"") == 0);
    assert_true(value_of(p, "hpo_epochs_total", "slot=\"odd\"slot\\\"") == 2);
    assert_true(value_of(p, "hpo_samples_per_second", "slot=\"odd\"slot\\\"") == 2000);
    assert_null(find(p, "hpo_epochs_total", "slot=\"gpu:9\""));
    assert_true(value_of(p, "hpo_http_requests_total", "route=\"studies.create\",status=\"201\"") == 2);
    assert_true(value_of(p, "hpo_http_requests_total", "route=\"unmatched\",status=\"404\"") == 1);
    assert_true(value_of(p, "hpo_http_requests_total", "route=\"healthz\",status=\"408\"") == 1);
    assert_true(value_of(p, "hpo_http_request_duration_seconds_count", "route=\"studies.create\"") == 3);
    assert_true(value_of(p, "hpo_http_request_duration_seconds_count", "route=\"unmatched\"") == 1);
    assert_null(find(p, "hpo_http_request_duration_seconds_count", "route=\"healthz\""));
    assert_true(value_of(p, "hpo_ask_tell_seconds_count", "op=\"tell\"") == 1);
    /* the 30 s request is only in +Inf; the 0.3 ms one in every bucket */
    int seen = 0;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->s[i].name, "hpo_http_request_duration_seconds_bucket") == 0 &&
            strcmp(p->s[i].labels, "route=\"studies.create\"") == 0) {
            if (strcmp(p->s[i].le, "+Inf") == 0) assert_true(p->s[i].value == 3);
            else if (strcmp(p->s[i].le, "10") == 0) assert_true(p->s[i].value == 2);
            else if (strcmp(p->s[i].le, "0.0005") == 0) assert_true(p->s[i].value == 1);
            seen++;
        }
    assert_true(seen > 3);
    /* every slot names its device; no GPU series without a cuda slot */
    assert_true(value_of(p, "hpo_slot_info", "slot=\"cpu:0\",device=\"cpu\"") == 1);
    assert_true(value_of(p, "hpo_slot_busy_seconds_total", "slot=\"cpu:0\"") == 0);
    for (size_t i = 0; i < p->n; i++) assert_null(strstr(p->s[i].name, "hpo_gpu_"));
    api_metrics_job(ctx, -1);
    api_metrics_stream(ctx, -1);
    free(p);
    p = scrape();
    assert_true(value_of(p, "hpo_slots_busy", "") == 0);
    assert_true(value_of(p, "hpo_event_streams", "") == 0);
    free(p);
}

/* hpo_disk_full / hpo_files_failing: 1 from a job's finding the disk full
 * (its files failing) until a job stores progress again, the waits between
 * tries included; the last finding's reason */
static void test_disk_backoff_gauges(void **state) {
    parsed *p = scrape();
    assert_true(value_of(p, "hpo_disk_full", "") == 0);
    assert_true(value_of(p, "hpo_files_failing", "") == 0);
    free(p);
    api_disk_full(ctx);
    p = scrape();
    assert_true(value_of(p, "hpo_disk_full", "") == 1);
    assert_true(value_of(p, "hpo_files_failing", "") == 0);
    free(p);
    usleep(1100 * 1000); /* the wait is over; no job stored progress yet */
    assert_true(api_disk_wait(ctx) == 0);
    p = scrape();
    assert_true(value_of(p, "hpo_disk_full", "") == 1);
    free(p);
    api_files_failed(ctx, "Input/output error");
    p = scrape();
    assert_true(value_of(p, "hpo_disk_full", "") == 0);
    assert_true(value_of(p, "hpo_files_failing", "") == 1);
    free(p);
    api_disk_ok(ctx);
    p = scrape();
    assert_true(value_of(p, "hpo_disk_full", "") == 0);
    assert_true(value_of(p, "hpo_files_failing", "") == 0);
    free(p);
}

/* hpo_jobs_queued: queued trials of running studies and queued model jobs,
 * not the trials of a paused study; hpo_trials by state. */
/* each slot's device and busy time; GPU memory only where the GPU answers;
 * whether a GPU is lost */
static void test_slot_devices_and_busy(void **state) {
    const char *slots[] = {"cpu:0", "cuda:0/0", "cuda:1+2/3"};
    api_metrics_slots(ctx, slots, 3);
    assert_true(api_have_slot_for(ctx, API_DEVICE_CUDA) && api_have_slot_for(ctx, API_DEVICE_CPU));
    api_metrics_slot_busy(ctx, "cpu:0", 1);
    usleep(30000);
    api_metrics_slot_busy(ctx, "cpu:0", 0);
    api_metrics_slot_busy(ctx, "cuda:0/0", 1); /* still running: its time so far counts */
    api_metrics_slot_busy(ctx, "nope", 1);     /* not a slot: ignored */
    usleep(10000);
    parsed *p = scrape();
    assert_true(value_of(p, "hpo_slot_info", "slot=\"cpu:0\",device=\"cpu\"") == 1);
    assert_true(value_of(p, "hpo_slot_info", "slot=\"cuda:0/0\",device=\"cuda:0\"") == 1);
    assert_true(value_of(p, "hpo_slot_info", "slot=\"cuda:1+2/3\",device=\"cuda:1+2\"") == 1);
    double idle = value_of(p, "hpo_slot_busy_seconds_total", "slot=\"cpu:0\""),
           running = value_of(p, "hpo_slot_busy_seconds_total", "slot=\"cuda:0/0\"");
    printf("  busy: cpu:0 %.3f s (slept 0.030), cuda:0/0 %.3f s so far (slept 0.010)\n", idle, running);
    assert_true(idle >= 0.03 && running >= 0.01);
    assert_true(value_of(p, "hpo_slot_busy_seconds_total", "slot=\"cuda:1+2/3\"") == 0);
    assert_null(find(p, "hpo_slot_busy_seconds_total", "slot=\"nope\""));
    for (int g = 0; g < 3; g++) { /* the GPUs of the cuda slots, where this machine has them */
        char lab[16];
        size_t used, total;
        hpo_error err;
        snprintf(lab, sizeof lab, "gpu=\"%d\"", g);
        if (eng_gpu_memory(g, &used, &total, &err) == 0)
            assert_true(value_of(p, "hpo_gpu_memory_total_bytes", lab) > 0);
        else
            assert_null(find(p, "hpo_gpu_memory_used_bytes", lab));
        assert_true(value_of(p, "hpo_gpu_lost", lab) == 0);
    }
    free(p);
    eng_gpu_mark_lost(2); /* a device fault on GPU 2: said, GPU 0 and 1 unchanged */
    p = scrape();
    assert_true(value_of(p, "hpo_gpu_lost", "gpu=\"2\"") == 1);
    assert_true(value_of(p, "hpo_gpu_lost", "gpu=\"0\"") == 0 && value_of(p, "hpo_gpu_lost", "gpu=\"1\"") == 0);
    free(p);
    api_metrics_slot_busy(ctx, "cuda:0/0", 0);
    p = scrape();
    double ended = value_of(p, "hpo_slot_busy_seconds_total", "slot=\"cuda:0/0\"");
    assert_true(ended >= running);
    free(p);
}

static void test_jobs_queued(void **state) {
    int64_t sid;
    assert_int_equal(sto_study_create(db, "q", "{}", &sid), 0);
    for (int i = 0; i < 3; i++) { /* created running, queued as by a pause or a restart */
        int64_t tid;
        assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, NULL), 0);
        assert_int_equal(sto_trial_requeue(db, tid), 0);
    }
    int64_t mid;
    assert_int_equal(sto_model_create(db, sid, 0, STO_MODEL_ENSEMBLE, "{}", 0, &mid), 0);
    parsed *p = scrape();
    assert_true(value_of(p, "hpo_jobs_queued", "") == 4);
    assert_true(value_of(p, "hpo_trials", "state=\"queued\"") == 3);
    free(p);
    assert_int_equal(sto_study_set_state(db, sid, STO_STUDY_PAUSED), 0);
    p = scrape();
    assert_true(value_of(p, "hpo_jobs_queued", "") == 1); /* the model job still waits */
    assert_true(value_of(p, "hpo_trials", "state=\"queued\"") == 3);
    free(p);
}

/* hpo_trials: a count is reused for 20 times what it cost, 5 s at most
 * (the clock is the test's: each reading advances it by `step`). */
static double fake_now, fake_step;
static double fake_clock(void) {
    double t = fake_now;
    fake_now += fake_step;
    return t;
}

static double queued_now(void) {
    parsed *p = scrape();
    double v = value_of(p, "hpo_trials", "state=\"queued\"");
    free(p);
    return v;
}

static void add_queued(int64_t sid) {
    int64_t tid;
    assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, NULL), 0);
    assert_int_equal(sto_trial_requeue(db, tid), 0);
}

static void test_trial_counts_reused(void **state) {
    int64_t sid;
    assert_int_equal(sto_study_create(db, "c", "{}", &sid), 0);
    api_metrics_set_clock(ctx, fake_clock);
    fake_now = 100, fake_step = 0; /* a count that cost nothing is never reused */
    assert_true(queued_now() == 0);
    add_queued(sid);
    assert_true(queued_now() == 1);

    fake_step = 0.1; /* a count of 0.1 s: reused for 2 s */
    assert_true(queued_now() == 1); /* counted at 100.1 */
    add_queued(sid);
    assert_true(queued_now() == 1); /* read at 100.1: reused */
    fake_now = 101.9;
    assert_true(queued_now() == 1); /* 1.8 s on */
    fake_now = 102.2;
    assert_true(queued_now() == 2); /* past 2 s: counted anew */

    fake_step = 1; /* a count of 1 s: reused for 5 s, not 20 */
    fake_now = 200;
    assert_true(queued_now() == 2); /* counted at 201 */
    add_queued(sid);
    fake_now = 205.5;
    assert_true(queued_now() == 2);
    fake_now = 206;
    assert_true(queued_now() == 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_format_and_series, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jobs_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slot_devices_and_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trial_counts_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_backoff_gauges, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
