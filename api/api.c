/* api.c - the api context: storage handle, study cache, metrics. */
#include <stdlib.h>

#include "internal.h"

int api_ctx_new(sto_db *db, const api_options *opt, api_ctx **out) {
    api_ctx *ctx = hpo_xcalloc(1, sizeof *ctx);
    ctx->db = db;
    if (opt) ctx->opt = *opt;
    if (ctx->opt.default_lease_seconds <= 0) ctx->opt.default_lease_seconds = 600;
    ctx->opt.data_dir = hpo_strdup(ctx->opt.data_dir ? ctx->opt.data_dir : ".");
    if (ctx->opt.max_upload_bytes == 0) ctx->opt.max_upload_bytes = UINT64_C(1) << 30;
    api_cache_init(ctx);
    api_metrics_new(&ctx->metrics);
    *out = ctx;
    return 0;
}

void api_ctx_free(api_ctx *ctx) {
    if (!ctx) return;
    api_cache_close(ctx);
    api_metrics_free(ctx->metrics);
    free((char *)ctx->opt.data_dir);
    free(ctx);
}

sto_db *api_ctx_db(api_ctx *ctx) { return ctx->db; }
