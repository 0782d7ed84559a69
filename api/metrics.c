/* metrics.c - Prometheus text metrics: requests by route and status,
 * trials by state, ask/report/tell latency histograms; and the small system
 * handlers (/healthz, /metrics, /api/v1/openapi.yaml). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                 0.01,   0.025,   0.05,   0.1,   0.25,   1.0};
#define N_BUCKETS (sizeof buckets / sizeof buckets[0])
static const char *op_names[API_N_OPS] = {"ask", "report", "tell"};

typedef struct request_count {
    const char *route; /* static string from the route table */
    int status;
    uint64_t count;
} request_count;

struct api_metrics {
    pthread_mutex_t lock;
    request_count *requests;
    size_t n_requests, cap_requests;
    uint64_t op_buckets[API_N_OPS][N_BUCKETS + 1]; /* last: +Inf */
    double op_sum[API_N_OPS];
    uint64_t op_count[API_N_OPS];
    double started;
};

int api_metrics_new(api_metrics **out) {
    api_metrics *m = hpo_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    m->started = hpo_now();
    *out = m;
    return 0;
}

void api_metrics_free(api_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m->requests);
    free(m);
}

void api_metrics_observe_request(api_ctx *ctx, const char *route, int status) {
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
    pthread_mutex_unlock(&m->lock);
}

void api_metrics_observe_op(api_ctx *ctx, int op, double seconds) {
    api_metrics *m = ctx->metrics;
    size_t b = 0;
    while (b < N_BUCKETS && seconds > buckets[b]) b++;
    pthread_mutex_lock(&m->lock);
    m->op_buckets[op][b]++;
    m->op_sum[op] += seconds;
    m->op_count[op]++;
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

char *api_metrics_render(api_ctx *ctx, size_t *len_out) {
    api_metrics *m = ctx->metrics;
    text t = {hpo_xmalloc(4096), 0, 4096};
    t.s[0] = '\0';
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    int have_counts = sto_trial_counts(ctx->db, -1, counts) == 0;

    pthread_mutex_lock(&m->lock);
    put(&t, "# HELP hpo_http_requests_total HTTP requests by route and status.\n"
            "# TYPE hpo_http_requests_total counter\n");
    for (size_t i = 0; i < m->n_requests; i++)
        put(&t, "hpo_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n", m->requests[i].route,
            m->requests[i].status, (unsigned long long)m->requests[i].count);
    put(&t, "# HELP hpo_ask_tell_seconds Latency of ask, report and tell, in seconds.\n"
            "# TYPE hpo_ask_tell_seconds histogram\n");
    for (int op = 0; op < API_N_OPS; op++) {
        uint64_t cum = 0;
        for (size_t b = 0; b < N_BUCKETS; b++) {
            cum += m->op_buckets[op][b];
            put(&t, "hpo_ask_tell_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n", op_names[op],
                buckets[b], (unsigned long long)cum);
        }
        cum += m->op_buckets[op][N_BUCKETS];
        put(&t, "hpo_ask_tell_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", op_names[op],
            (unsigned long long)cum);
        put(&t, "hpo_ask_tell_seconds_sum{op=\"%s\"} %.9f\n", op_names[op], m->op_sum[op]);
        put(&t, "hpo_ask_tell_seconds_count{op=\"%s\"} %llu\n", op_names[op],
            (unsigned long long)m->op_count[op]);
    }
    double uptime = hpo_now() - m->started;
    pthread_mutex_unlock(&m->lock);

    if (have_counts) {
        put(&t, "# HELP hpo_trials Trials by state, over all studies.\n# TYPE hpo_trials gauge\n");
        for (int s = 0; s < STO_TRIAL_N_STATES; s++)
            put(&t, "hpo_trials{state=\"%s\"} %lld\n", sto_trial_state_name(s), (long long)counts[s]);
    }
    put(&t, "# HELP hpo_uptime_seconds Seconds since hpod started.\n# TYPE hpo_uptime_seconds gauge\n"
            "hpo_uptime_seconds %.3f\n", uptime);
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
