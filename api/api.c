/* api.c - the api context: storage handle, study cache, metrics. */
#include <stdlib.h>

#include "internal.h"

int api_ctx_new(sto_db *db, const api_options *opt, api_ctx **out) {
    api_ctx *ctx = hpo_xcalloc(1, sizeof *ctx);
    ctx->db = db;
    ctx->opt.default_lease_seconds = 600;
    if (opt && opt->default_lease_seconds > 0) ctx->opt = *opt;
    api_cache_init(ctx);
    api_metrics_new(&ctx->metrics);
    *out = ctx;
    return 0;
}

void api_ctx_free(api_ctx *ctx) {
    if (!ctx) return;
    api_cache_close(ctx);
    api_metrics_free(ctx->metrics);
    free(ctx);
}

sto_db *api_ctx_db(api_ctx *ctx) { return ctx->db; }
