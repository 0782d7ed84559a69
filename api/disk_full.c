/* disk_full.c - the back-off after a job found the disk full (see
 * api_internal.h): the scheduler starts nothing until it ends, so jobs neither
 * spin on a full disk nor fail one after another. */
#include "api_internal.h"

void api_disk_full(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    double b = ctx->disk_backoff > 0 ? 2 * ctx->disk_backoff : 1.0;
    if (b > API_DISK_BACKOFF_MAX) b = API_DISK_BACKOFF_MAX;
    ctx->disk_backoff = b;
    ctx->disk_until = hpo_monotonic() + b;
    pthread_mutex_unlock(&ctx->disk_mu);
    HPO_WARN("the data disk is full: jobs are queued again; the next starts in %.0f s", b);
}

void api_disk_ok(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    int was = ctx->disk_backoff > 0;
    ctx->disk_backoff = 0;
    ctx->disk_until = 0;
    pthread_mutex_unlock(&ctx->disk_mu);
    if (was) HPO_INFO("the data disk has room again");
}

double api_disk_wait(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    double left = ctx->disk_until - hpo_monotonic();
    pthread_mutex_unlock(&ctx->disk_mu);
    return left > 0 ? left : 0;
}
