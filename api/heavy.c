/* heavy.c - a bound on the trials that whole-history reads (an export, a
 * page of thousands of trials) hold in memory at once.
 *
 * Such a read builds its answer as JSON before it sends a byte: about
 * 6 KB a trial at its peak (20,000 trials: 130 MB for a 14 MB export).
 * Reads need no token, so a client that asked for many at once could take
 * hpod's memory. Each read of API_HEAVY_FROM trials or more takes as many
 * units as trials it may hold (a smaller one, such as a dashboard's poll,
 * never waits); the units in use stay under API_HEAVY_TRIALS, except that
 * a read larger than that runs when no other does. One that cannot start
 * within opt.upload_wait_seconds gets 503 with Retry-After (as an upload
 * waiting for a dataset load slot does). */
#include <errno.h>
#include <time.h>

#include "api_internal.h"

#define RETRY_AFTER_S 5

static int fits(const api_ctx *ctx, int64_t trials) {
    return ctx->heavy_in_use == 0 || ctx->heavy_in_use + trials <= API_HEAVY_TRIALS;
}

int api_heavy_acquire(api_ctx *ctx, int64_t trials, api_response *resp) {
    if (trials < API_HEAVY_FROM) return 0; /* a small read: never waits */
    struct timespec until = hpo_deadline(CLOCK_REALTIME, ctx->opt.upload_wait_seconds);
    pthread_mutex_lock(&ctx->heavy_mu);
    int rc = 0;
    while (!fits(ctx, trials) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&ctx->heavy_cond, &ctx->heavy_mu, &until);
    int ok = fits(ctx, trials);
    if (ok) ctx->heavy_in_use += trials;
    pthread_mutex_unlock(&ctx->heavy_mu);
    if (ok) return 0;
    api_fail(resp, 503, "unavailable", "",
             "hpod is busy answering other reads of whole studies (%d trials at once): retry later",
             API_HEAVY_TRIALS);
    resp->retry_after = RETRY_AFTER_S;
    return -1;
}

void api_heavy_release(api_ctx *ctx, int64_t trials) {
    if (trials < API_HEAVY_FROM) return;
    pthread_mutex_lock(&ctx->heavy_mu);
    ctx->heavy_in_use -= trials;
    pthread_cond_broadcast(&ctx->heavy_cond);
    pthread_mutex_unlock(&ctx->heavy_mu);
}
