/* metrics.c - Prometheus text metrics (exposition format 0.0.4) and the
 * small system handlers (/healthz, /metrics, /api/v1/openapi.yaml).
 *
 * Series (every label set bounded: routes come from the static route table
 * plus "unmatched", slots are named once at start, ops are three):
 *   hpo_build_info{version,blas_core,cpu_bf16} 1   cpu_bf16: "yes" where the CPU slots can train
 *                                                  mixed_bf16 (oneDNN's bf16 kernels run here)
 *   hpo_http_requests_total{route,status}          counter
 *   hpo_http_request_duration_seconds{route}       histogram, request line to response queued
 *   hpo_ask_tell_seconds{op}                       histogram of ask/report/tell's own work
 *   hpo_trials{state}                              gauge, over all studies; a count may be reused
 *                                                  for 20 times what it cost, 5 s at most
 *                                                  (trial_counts below)
 *   hpo_slots, hpo_slots_busy                      gauges: worker slots, those running a job
 *   hpo_jobs_queued                                gauge: queued trials of running studies + queued model jobs
 *   hpo_disk_full, hpo_files_failing               gauges: 1 while the jobs back off because one found the
 *                                                  data disk full, or its files failing on the file
 *                                                  system (api_disk_backoff_why); 0 once a job stores
 *                                                  progress again or the file system has room (jobs.h)
 *   hpo_epochs_total{slot}                         counter: trial epochs trained on the slot
 *   hpo_samples_per_second{slot}                   gauge: the slot's last trial epoch (0 before one)
 *   hpo_slot_info{slot,device} 1                   the device a slot trains on: "cpu", "cuda:G" ("cuda:G+H")
 *   hpo_slot_busy_seconds_total{slot}              counter: time the slot's worker spent in jobs
 *   hpo_gpu_lost{gpu}                              gauge, per GPU of a cuda slot: 1 once the process
 *                                                  lost its context there (gpu.h, eng_gpu_lost)
 *   hpo_gpu_memory_used_bytes{gpu}, hpo_gpu_memory_total_bytes{gpu}
 *                                                  gauges, per GPU of a cuda slot, only where the GPU
 *                                                  answers (cudaMemGetInfo, outside the mutex)
 *   hpo_event_streams                              gauge: open SSE clients
 *   hpo_datasets_in_memory                         gauge: datasets decoded in the engine's cache (a
 *                                                  deleted upload's leave it: data.h)
 *   hpo_studies_in_memory                          gauge: studies in the study cache (study_cache.c)
 *   hpo_uptime_seconds                             gauge
 *   process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
 *   process_open_fds, process_max_fds, process_start_time_seconds
 *                                                  the Prometheus client convention, from /proc/self
 * Everything counted here is under one mutex, a leaf of the lock order;
 * storage is read (trial counts, queue depth) before it is taken. The
 * trial counts have a mutex of their own, held while storage counts. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api_internal.h"
#include "backend.h"
#include "blas_select.h"
#include "data.h"
#include "gpu.h"

static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                 0.01,   0.025,   0.05,   0.1,   0.25,   1.0};
#define N_BUCKETS (sizeof buckets / sizeof buckets[0])
/* request latency: a dataset upload or a predict may take seconds */
static const double http_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,    0.25,  0.5,    1.0,   2.5,  5.0,  10.0};
#define N_HTTP_BUCKETS (sizeof http_buckets / sizeof http_buckets[0])
static const char *op_names[API_N_OPS] = {"ask", "report", "tell"};
#define MAX_SLOTS 256

typedef struct request_count {
    const char *route; /* static string from the route table */
    int status;
    uint64_t count;
} request_count;

typedef struct route_latency {
    const char *route; /* static string from the route table */
    uint64_t buckets[N_HTTP_BUCKETS + 1]; /* last: +Inf; not cumulative */
    double sum;
    uint64_t count;
} route_latency;

typedef struct slot_stats {
    char name[32];
    uint64_t epochs;
    double samples_per_s; /* the last epoch's */
    double busy_s;        /* jobs ended */
    double busy_since;    /* the running job's start (monotonic), 0 when idle */
} slot_stats;

struct api_metrics {
    pthread_mutex_t lock;
    request_count *requests;
    size_t n_requests, cap_requests;
    route_latency *latency;
    size_t n_latency, cap_latency;
    uint64_t op_buckets[API_N_OPS][N_BUCKETS + 1]; /* last: +Inf */
    double op_sum[API_N_OPS];
    uint64_t op_count[API_N_OPS];
    slot_stats *slots;
    size_t n_slots;
    int busy;    /* jobs running (api_jobs_run) */
    int streams; /* open event streams */
    double started;
    /* the last count of trials by state (trial_counts) */
    pthread_mutex_t counts_lock;
    int64_t counts[STO_TRIAL_N_STATES];
    double counted_at, count_cost; /* on clock; counted_at < 0: none yet */
    double (*clock)(void);
};

int api_metrics_new(api_metrics **out) {
    api_metrics *m = hpo_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->counts_lock, NULL);
    m->started = hpo_now();
    m->counted_at = -1;
    m->clock = hpo_monotonic;
    *out = m;
    return 0;
}

void api_metrics_free(api_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->counts_lock);
    free(m->requests);
    free(m->latency);
    free(m->slots);
    free(m);
}

/* The bucket of v: the first bound >= v, or n (+Inf). */
static size_t bucket_of(const double *bounds, size_t n, double v) {
    size_t b = 0;
    while (b < n && v > bounds[b]) b++;
    return b;
}

void api_metrics_observe_request(api_ctx *ctx, const char *route, int status, double seconds) {
    api_metrics *m = ctx->metrics;
    if (!route) route = "unmatched";
    pthread_mutex_lock(&m->lock);
    size_t i = 0;
    while (i < m->n_requests && !(m->requests[i].status == status &&
                                  strcmp(m->requests[i].route, route) == 0))
        i++;
    if (i == m->n_requests) {
        if (m->n_requests == m->cap_requests) {
            m->cap_requests = m->cap_requests ? 2 * m->cap_requests : 32;
            m->requests = hpo_xrealloc(m->requests, m->cap_requests * sizeof *m->requests);
        }
        m->requests[m->n_requests++] = (request_count){route, status, 0};
    }
    m->requests[i].count++;
    if (seconds >= 0) {
        size_t j = 0;
        while (j < m->n_latency && strcmp(m->latency[j].route, route) != 0) j++;
        if (j == m->n_latency) {
            if (m->n_latency == m->cap_latency) {
                m->cap_latency = m->cap_latency ? 2 * m->cap_latency : 16;
                m->latency = hpo_xrealloc(m->latency, m->cap_latency * sizeof *m->latency);
            }
            memset(&m->latency[j], 0, sizeof m->latency[j]);
            m->latency[j].route = route;
            m->n_latency++;
        }
        m->latency[j].buckets[bucket_of(http_buckets, N_HTTP_BUCKETS, seconds)]++;
        m->latency[j].sum += seconds;
        m->latency[j].count++;
    }
    pthread_mutex_unlock(&m->lock);
}

void api_metrics_observe_op(api_ctx *ctx, int op, double seconds) {
    api_metrics *m = ctx->metrics;
    size_t b = bucket_of(buckets, N_BUCKETS, seconds);
    pthread_mutex_lock(&m->lock);
    m->op_buckets[op][b]++;
    m->op_sum[op] += seconds;
    m->op_count[op]++;
    pthread_mutex_unlock(&m->lock);
}

void api_metrics_slots(api_ctx *ctx, const char *const *names, size_t n) {
    api_metrics *m = ctx->metrics;
    if (n > MAX_SLOTS) n = MAX_SLOTS;
    pthread_mutex_lock(&m->lock);
    free(m->slots);
    m->slots = n ? hpo_xcalloc(n, sizeof *m->slots) : NULL;
    for (size_t i = 0; i < n; i++) snprintf(m->slots[i].name, sizeof m->slots[i].name, "%s", names[i]);
    m->n_slots = n;
    pthread_mutex_unlock(&m->lock);
}

int api_have_slot_for(api_ctx *ctx, int device) {
    api_metrics *m = ctx->metrics;
    pthread_mutex_lock(&m->lock);
    int fits = m->n_slots == 0;
    for (size_t i = 0; i < m->n_slots && !fits; i++) fits = api_device_fits(device, m->slots[i].name);
    pthread_mutex_unlock(&m->lock);
    return fits;
}

void api_metrics_slot_busy(api_ctx *ctx, const char *slot, int busy) {
    api_metrics *m = ctx->metrics;
    double now = hpo_monotonic();
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_slots; i++) {
        slot_stats *s = &m->slots[i];
        if (strcmp(s->name, slot) != 0) continue;
        if (busy && s->busy_since == 0) s->busy_since = now;
        if (!busy && s->busy_since > 0) s->busy_s += now - s->busy_since, s->busy_since = 0;
        break;
    }
    pthread_mutex_unlock(&m->lock);
}

/* The device of a slot by its name (server/workers.h): "cuda:G[+H]" of
 * "cuda:G[+H]/K", else "cpu". */
static void slot_device(const char *name, char *out, size_t n) {
    const char *slash = strchr(name, '/');
    if (strncmp(name, "cuda:", 5) == 0 && slash) snprintf(out, n, "%.*s", (int)(slash - name), name);
    else snprintf(out, n, "cpu");
}

/* The GPU numbers of the cuda slots, each once (at most n). */
static size_t slot_gpus(const api_metrics *m, int *gpus, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < m->n_slots; i++) {
        const char *p = m->slots[i].name;
        if (strncmp(p, "cuda:", 5) != 0) continue;
        for (p += 5; *p >= '0' && *p <= '9';) {
            char *end;
            int g = (int)strtol(p, &end, 10);
            size_t j = 0;
            while (j < k && gpus[j] != g) j++;
            if (j == k && k < n) gpus[k++] = g;
            p = *end == '+' ? end + 1 : end;
        }
    }
    return k;
}

void api_metrics_job(api_ctx *ctx, int delta) {
    api_metrics *m = ctx->metrics;
    pthread_mutex_lock(&m->lock);
    m->busy += delta;
    pthread_mutex_unlock(&m->lock);
}

void api_metrics_epoch(api_ctx *ctx, const char *slot, double samples_per_s) {
    api_metrics *m = ctx->metrics;
    if (!slot) return;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_slots; i++)
        if (strcmp(m->slots[i].name, slot) == 0) {
            m->slots[i].epochs++;
            m->slots[i].samples_per_s = samples_per_s;
            break;
        }
    pthread_mutex_unlock(&m->lock);
}

void api_metrics_stream(api_ctx *ctx, int delta) {
    api_metrics *m = ctx->metrics;
    pthread_mutex_lock(&m->lock);
    m->streams += delta;
    pthread_mutex_unlock(&m->lock);
}

/* A growing text buffer for the exposition format. */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = 2 * t->cap + (size_t)(n > 0 ? n : 0) + 256;
        t->s = hpo_xrealloc(t->s, t->cap);
    }
}

/* A label value with \\, " and newline escaped, as the format asks. */
static void put_label(text *t, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            put(t, "\\%c", *v);
        else if (*v == '\n')
            put(t, "\\n");
        else
            put(t, "%c", *v);
    }
}

/* A histogram's lines; counts[n] is +Inf; label="value" selects the series. */
static void put_histogram(text *t, const char *name, const char *label, const char *value, const double *bounds,
                          size_t n, const uint64_t *counts, double sum, uint64_t count) {
    uint64_t cum = 0;
    for (size_t b = 0; b <= n; b++) {
        cum += counts[b];
        put(t, "%s_bucket{%s=\"", name, label);
        put_label(t, value);
        if (b < n)
            put(t, "\",le=\"%g\"} %llu\n", bounds[b], (unsigned long long)cum);
        else
            put(t, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    put(t, "%s_sum{%s=\"", name, label);
    put_label(t, value);
    put(t, "\"} %.9f\n%s_count{%s=\"", sum, name, label);
    put_label(t, value);
    put(t, "\"} %llu\n", (unsigned long long)count);
}

/* The process's own figures (/proc/self), in the Prometheus client
 * libraries' names; a figure that cannot be read is left out. */
static void put_process(text *t) {
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    /* after the command name (in parentheses, may hold spaces): field 3 on */
    const char *p = strrchr(buf, ')');
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
    long long rss = 0;
    int ok = p && tick > 0 &&
             sscanf(p + 2,
                    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu %llu %lld",
                    &utime, &stime, &start, &vsize, &rss) == 5;
    double boot = -1;
    if ((f = fopen("/proc/stat", "r"))) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "btime ", 6) == 0) boot = strtod(line + 6, NULL);
        fclose(f);
    }
    if (ok) {
        put(t, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
               "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.2f\n",
            (double)(utime + stime) / (double)tick);
        put(t, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
               "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n",
            rss * (long long)page);
        put(t, "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
               "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n", vsize);
        if (boot >= 0)
            put(t, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                   "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
                boot + (double)start / (double)tick);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long fds = 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') fds++;
        closedir(d);
        put(t, "# HELP process_open_fds Number of open file descriptors.\n"
               "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n", fds - 1); /* not the one reading */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        put(t, "# HELP process_max_fds Maximum number of open file descriptors.\n"
               "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
}

void api_metrics_set_clock(api_ctx *ctx, double (*clock)(void)) {
    ctx->metrics->clock = clock;
}

/* The trials by state over all studies. Counting reads every trial (5.7 ms
 * at 40,000 on a 2-core machine, a soak audit) and /metrics needs no token,
 * so a count is reused for 20 times what it cost, 5 s at most: scrapes at
 * any rate spend at most a twentieth of one core on it, and a scrape every
 * few seconds, as Prometheus does, counts anew each time. Scrapes at once
 * wait for one count instead of each starting its own. */
static int trial_counts(api_ctx *ctx, int64_t counts[STO_TRIAL_N_STATES]) {
    api_metrics *m = ctx->metrics;
    pthread_mutex_lock(&m->counts_lock);
    double now = m->clock();
    double reuse = m->count_cost * 20 < 5 ? m->count_cost * 20 : 5;
    int rc = 0;
    if (m->counted_at < 0 || now - m->counted_at >= reuse) {
        int64_t fresh[STO_TRIAL_N_STATES] = {0};
        rc = sto_trial_counts(ctx->db, -1, fresh);
        double after = m->clock();
        if (rc == 0) {
            memcpy(m->counts, fresh, sizeof fresh);
            m->counted_at = after, m->count_cost = after - now;
        }
    }
    if (rc == 0) memcpy(counts, m->counts, sizeof m->counts);
    pthread_mutex_unlock(&m->counts_lock);
    return rc;
}

char *api_metrics_render(api_ctx *ctx, size_t *len_out) {
    api_metrics *m = ctx->metrics;
    text t = {hpo_xmalloc(4096), 0, 4096};
    t.s[0] = '\0';
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    int have_counts = trial_counts(ctx, counts) == 0;
    int64_t q_trials = 0, q_models = 0;
    int have_queued = sto_jobs_queued(ctx->db, &q_trials, &q_models) == 0;

    put(&t, "# HELP hpo_build_info hpod's version, the OpenBLAS kernel it runs, and whether its CPU slots can train "
            "mixed_bf16.\n"
            "# TYPE hpo_build_info gauge\nhpo_build_info{version=\"");
    put_label(&t, HPO_VERSION);
    put(&t, "\",blas_core=\"");
    put_label(&t, eng_blas_corename());
    put(&t, "\",cpu_bf16=\"%s\"} 1\n", eng_backend_cpu()->gemm_bf16 ? "yes" : "no");

    pthread_mutex_lock(&m->lock);
    put(&t, "# HELP hpo_http_requests_total HTTP requests by route and status.\n"
            "# TYPE hpo_http_requests_total counter\n");
    for (size_t i = 0; i < m->n_requests; i++)
        put(&t, "hpo_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n", m->requests[i].route,
            m->requests[i].status, (unsigned long long)m->requests[i].count);
    put(&t, "# HELP hpo_http_request_duration_seconds Time from a request's first line to its response, by route.\n"
            "# TYPE hpo_http_request_duration_seconds histogram\n");
    for (size_t i = 0; i < m->n_latency; i++)
        put_histogram(&t, "hpo_http_request_duration_seconds", "route", m->latency[i].route, http_buckets,
                      N_HTTP_BUCKETS, m->latency[i].buckets, m->latency[i].sum, m->latency[i].count);
    put(&t, "# HELP hpo_ask_tell_seconds Latency of ask, report and tell, in seconds.\n"
            "# TYPE hpo_ask_tell_seconds histogram\n");
    for (int op = 0; op < API_N_OPS; op++)
        put_histogram(&t, "hpo_ask_tell_seconds", "op", op_names[op], buckets, N_BUCKETS, m->op_buckets[op],
                      m->op_sum[op], m->op_count[op]);
    put(&t, "# HELP hpo_slots Worker slots (--devices).\n# TYPE hpo_slots gauge\nhpo_slots %zu\n"
            "# HELP hpo_slots_busy Worker slots running a job.\n# TYPE hpo_slots_busy gauge\nhpo_slots_busy %d\n",
        m->n_slots, m->busy);
    put(&t, "# HELP hpo_epochs_total Trial epochs trained, by slot.\n# TYPE hpo_epochs_total counter\n");
    for (size_t i = 0; i < m->n_slots; i++) {
        put(&t, "hpo_epochs_total{slot=\"");
        put_label(&t, m->slots[i].name);
        put(&t, "\"} %llu\n", (unsigned long long)m->slots[i].epochs);
    }
    put(&t, "# HELP hpo_samples_per_second Training samples per second of the last trial epoch, by slot.\n"
            "# TYPE hpo_samples_per_second gauge\n");
    for (size_t i = 0; i < m->n_slots; i++) {
        put(&t, "hpo_samples_per_second{slot=\"");
        put_label(&t, m->slots[i].name);
        put(&t, "\"} %.3f\n", m->slots[i].samples_per_s);
    }
    put(&t, "# HELP hpo_slot_info The device each slot trains on.\n# TYPE hpo_slot_info gauge\n");
    for (size_t i = 0; i < m->n_slots; i++) {
        char dev[32];
        slot_device(m->slots[i].name, dev, sizeof dev);
        put(&t, "hpo_slot_info{slot=\"");
        put_label(&t, m->slots[i].name);
        put(&t, "\",device=\"");
        put_label(&t, dev);
        put(&t, "\"} 1\n");
    }
    put(&t, "# HELP hpo_slot_busy_seconds_total Time each slot's worker spent running jobs.\n"
            "# TYPE hpo_slot_busy_seconds_total counter\n");
    double now = hpo_monotonic();
    for (size_t i = 0; i < m->n_slots; i++) {
        const slot_stats *s = &m->slots[i];
        put(&t, "hpo_slot_busy_seconds_total{slot=\"");
        put_label(&t, s->name);
        put(&t, "\"} %.3f\n", s->busy_s + (s->busy_since > 0 ? now - s->busy_since : 0));
    }
    put(&t, "# HELP hpo_event_streams Open event streams (SSE clients).\n# TYPE hpo_event_streams gauge\n"
            "hpo_event_streams %d\n", m->streams);
    put(&t, "# HELP hpo_datasets_in_memory Datasets the engine's cache holds decoded.\n"
            "# TYPE hpo_datasets_in_memory gauge\nhpo_datasets_in_memory %zu\n", eng_dataset_cache_size());
    put(&t, "# HELP hpo_studies_in_memory Studies whose tuner state hpod holds (at most 256 idle ones).\n"
            "# TYPE hpo_studies_in_memory gauge\nhpo_studies_in_memory %zu\n", api_cache_count(ctx));
    double uptime = hpo_now() - m->started;
    int gpus[16];
    size_t n_gpus = slot_gpus(m, gpus, 16);
    pthread_mutex_unlock(&m->lock);

    if (n_gpus)
        put(&t, "# HELP hpo_gpu_lost 1 once hpod lost its context on the GPU (a device fault): its slots take "
                "no more jobs until hpod restarts.\n# TYPE hpo_gpu_lost gauge\n");
    for (size_t i = 0; i < n_gpus; i++) put(&t, "hpo_gpu_lost{gpu=\"%d\"} %d\n", gpus[i], eng_gpu_lost(gpus[i]));
    size_t used[16], total[16], answered = 0; /* outside the lock: device queries */
    for (size_t i = 0; i < n_gpus; i++) {
        hpo_error gerr;
        if (eng_gpu_memory(gpus[i], &used[answered], &total[answered], &gerr) == 0) gpus[answered++] = gpus[i];
    }
    if (answered)
        put(&t, "# HELP hpo_gpu_memory_used_bytes Memory in use on the GPU, by every process.\n"
                "# TYPE hpo_gpu_memory_used_bytes gauge\n");
    for (size_t i = 0; i < answered; i++) put(&t, "hpo_gpu_memory_used_bytes{gpu=\"%d\"} %zu\n", gpus[i], used[i]);
    if (answered)
        put(&t, "# HELP hpo_gpu_memory_total_bytes The GPU's memory.\n# TYPE hpo_gpu_memory_total_bytes gauge\n");
    for (size_t i = 0; i < answered; i++) put(&t, "hpo_gpu_memory_total_bytes{gpu=\"%d\"} %zu\n", gpus[i], total[i]);
    if (have_queued)
        put(&t, "# HELP hpo_jobs_queued Jobs waiting for a slot: queued trials of running studies and queued "
                "model jobs.\n# TYPE hpo_jobs_queued gauge\nhpo_jobs_queued %lld\n",
            (long long)(q_trials + q_models));
    if (have_counts) {
        put(&t, "# HELP hpo_trials Trials by state, over all studies.\n# TYPE hpo_trials gauge\n");
        for (int s = 0; s < STO_TRIAL_N_STATES; s++)
            put(&t, "hpo_trials{state=\"%s\"} %lld\n", sto_trial_state_name(s), (long long)counts[s]);
    }
    int why = api_disk_backoff_why(ctx);
    put(&t, "# HELP hpo_disk_full 1 while jobs back off because one found the data disk full, until a job stores "
            "progress again or 16 MiB are free.\n# TYPE hpo_disk_full gauge\nhpo_disk_full %d\n"
            "# HELP hpo_files_failing 1 while jobs back off because hpod's files failed on the file system "
            "(permissions, read-only, I/O errors), until a job stores progress again or a probe file can be written.\n"
            "# TYPE hpo_files_failing gauge\nhpo_files_failing %d\n",
        why == API_BACKOFF_DISK_FULL, why == API_BACKOFF_FILES_FAILED || why == API_BACKOFF_STORE_FAILED);
    put(&t, "# HELP hpo_uptime_seconds Seconds since hpod started.\n# TYPE hpo_uptime_seconds gauge\n"
            "hpo_uptime_seconds %.3f\n", uptime);
    put_process(&t);
    *len_out = t.len;
    return t.s;
}

void api_h_metrics(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    size_t len;
    char *body = api_metrics_render(ctx, &len);
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = body;
    resp->body_len = len;
}

void api_h_healthz(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    api_reply_json(resp, 200, json_pack("{s:s, s:s, s:i}", "status", "ok", "version", HPO_VERSION,
                                        "schema_version", sto_schema_version()));
}

void api_h_openapi(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    api_reply_text(resp, 200, "application/yaml", (const char *)api_openapi_yaml,
                   (size_t)api_openapi_yaml_len);
}
