/* disk_full.c - the back-off after a job found the disk full, or its own
 * files failing on the file system (see api_internal.h): the scheduler starts nothing until it ends, so jobs neither
 * spin on a full disk nor fail one after another. */
#include "api_internal.h"

/* Starts the back-off, or doubles it: its seconds when it starts now, 0
 * when one runs. */
static double back_off(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    double now = hpo_monotonic();
    /* the jobs that were running when the disk filled find it at once: one
     * back-off for all of them; it doubles when a job started after it
     * finds the disk full again */
    int running = ctx->disk_until > now;
    double b = running ? ctx->disk_backoff : ctx->disk_backoff > 0 ? 2 * ctx->disk_backoff : 1.0;
    if (b > API_DISK_BACKOFF_MAX) b = API_DISK_BACKOFF_MAX;
    ctx->disk_backoff = b;
    if (!running) ctx->disk_until = now + b;
    pthread_mutex_unlock(&ctx->disk_mu);
    return running ? 0 : b;
}

void api_disk_full(api_ctx *ctx) {
    double b = back_off(ctx);
    if (b > 0) HPO_WARN("the data disk is full: jobs are queued again; the next starts in %.0f s", b);
}

void api_files_failed(api_ctx *ctx, const char *why) {
    double b = back_off(ctx);
    if (b > 0) HPO_WARN("hpod's files failed on the file system (%s): jobs are queued again; the next starts in %.0f s",
                        why, b);
}

void api_disk_ok(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    int was = ctx->disk_backoff > 0;
    ctx->disk_backoff = 0;
    ctx->disk_until = 0;
    pthread_mutex_unlock(&ctx->disk_mu);
    if (was) HPO_INFO("hpod's files can be written again: jobs start");
}

double api_disk_wait(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    double left = ctx->disk_until - hpo_monotonic();
    pthread_mutex_unlock(&ctx->disk_mu);
    return left > 0 ? left : 0;
}
