/* api.c - the api context: storage handle, study cache, run queue, deadlines, trials asked, metrics. */
#include <stdlib.h>

#include "jobs_internal.h"

int api_ctx_new(sto_db *db, const api_options *opt, api_ctx **out) {
    const char *root = opt && opt->data_dir ? opt->data_dir : ".";
    hpo_error err = {{0}, {0}};
    int rc = api_dir_check_root(root, "data_dir", &err);
    if (rc) {
        HPO_ERROR("api: %s", err.message);
        return rc;
    }
    api_ctx *ctx = hpo_xcalloc(1, sizeof *ctx);
    ctx->db = db;
    if (opt) ctx->opt = *opt;
    if (ctx->opt.default_lease_seconds <= 0) ctx->opt.default_lease_seconds = 600;
    ctx->opt.data_dir = hpo_strdup(root);
    if (ctx->opt.max_upload_bytes == 0) ctx->opt.max_upload_bytes = UINT64_C(1) << 30;
    if (ctx->opt.max_model_bytes == 0) ctx->opt.max_model_bytes = API_DEFAULT_MAX_MODEL_BYTES;
    if (!(ctx->opt.upload_wait_seconds > 0)) ctx->opt.upload_wait_seconds = 30;
    api_cache_new(ctx);
    pthread_mutex_init(&ctx->event_mu, NULL);
    for (int b = 0; b < API_EVENT_BUCKETS; b++) pthread_cond_init(&ctx->event_cond[b], NULL);
    pthread_mutex_init(&ctx->disk_mu, NULL);
    pthread_mutex_init(&ctx->heavy_mu, NULL);
    pthread_cond_init(&ctx->heavy_cond, NULL);
    api_metrics_new(&ctx->metrics);
    api_deadlines_new(ctx);
    api_asked_new(ctx);
    if ((rc = api_queue_new(ctx)) || (rc = api_events_watch_start(ctx))) {
        api_ctx_free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

void api_ctx_free(api_ctx *ctx) {
    if (!ctx) return;
    api_events_watch_stop(ctx);
    api_queue_free(ctx);
    api_deadlines_free(ctx);
    api_asked_free(ctx);
    api_cache_free(ctx);
    pthread_mutex_destroy(&ctx->event_mu);
    for (int b = 0; b < API_EVENT_BUCKETS; b++) pthread_cond_destroy(&ctx->event_cond[b]);
    pthread_mutex_destroy(&ctx->disk_mu);
    pthread_mutex_destroy(&ctx->heavy_mu);
    pthread_cond_destroy(&ctx->heavy_cond);
    api_metrics_free(ctx->metrics);
    free((char *)ctx->opt.data_dir);
    free(ctx);
}

sto_db *api_ctx_db(api_ctx *ctx) { return ctx->db; }

void api_ctx_shutdown(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->event_mu);
    ctx->stopping = 1;
    pthread_mutex_unlock(&ctx->event_mu);
    api_events_wake(ctx); /* the streams see stopping */
    api_events_watch_stop(ctx);
}
