/* disk_full.c - the back-off after a job found the disk full, its own
 * files failing on the file system, or an epoch it could not store (see
 * api_internal.h): the scheduler starts nothing until it ends, so jobs
 * neither spin on a full disk nor fail one after another; the probe that
 * ends it once the disk has room again; and how many times in a row each
 * trial's epoch could not be stored. */
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "api_internal.h"
#include "data_dir.h"

/* Starts the back-off, or doubles it: its seconds when it starts now, 0
 * when one runs. */
static double back_off(api_ctx *ctx, int why) {
    pthread_mutex_lock(&ctx->disk_mu);
    ctx->disk_why = why;
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
    double b = back_off(ctx, API_BACKOFF_DISK_FULL);
    if (b > 0) HPO_WARN("the data disk is full: jobs are queued again; the next starts in %.0f s", b);
}

void api_files_failed(api_ctx *ctx, const char *why) {
    double b = back_off(ctx, API_BACKOFF_FILES_FAILED);
    if (b > 0) HPO_WARN("hpod's files failed on the file system (%s): jobs are queued again; the next starts in %.0f s",
                        why, b);
}

void api_disk_ok(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    int was = ctx->disk_backoff > 0;
    ctx->disk_backoff = 0;
    ctx->disk_until = 0;
    ctx->disk_why = API_BACKOFF_NONE;
    pthread_mutex_unlock(&ctx->disk_mu);
    if (was) HPO_INFO("hpod's files can be written again: jobs start");
}

/* Whether hpod's files can be written again, asked of the file system
 * without taking the room a job or a client needs: a full disk, by its
 * free space (statvfs: API_DISK_ROOM or more); failing files, by a small
 * file written, synced and removed under <root>/checkpoints (named as
 * data_dir.c's temporaries, which the start-up sweep removes should a
 * crash leave one). */
static int probe_ok(const char *root, int why) {
    char path[API_PATH_MAX];
    if (why == API_BACKOFF_DISK_FULL) {
        struct statvfs v;
        return statvfs(root, &v) == 0 && (double)v.f_bavail * (double)v.f_frsize >= API_DISK_ROOM;
    }
    if (api_dir_path(path, root, "checkpoints/disk-probe.tmp-XXXXXX")) return 0;
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    static const char block[4096];
    int ok = write(fd, block, sizeof block) == (ssize_t)sizeof block && fsync(fd) == 0;
    if (close(fd) != 0) ok = 0;
    unlink(path);
    return ok;
}

void api_disk_probe(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    int why = ctx->disk_why;
    int due = ctx->disk_backoff > 0 && ctx->disk_until <= hpo_monotonic() && why != API_BACKOFF_STORE_FAILED;
    pthread_mutex_unlock(&ctx->disk_mu);
    if (due && probe_ok(ctx->opt.data_dir, why)) api_disk_ok(ctx);
}

/* The entry of trial_id, or (add) a free one, else the one with the
 * fewest failures (a trial dropped there starts its count again: with
 * more than API_STORE_FAILURES_KEPT failing at once the guard weakens,
 * the back-off still holds). Under disk_mu. */
static int failure_slot(api_ctx *ctx, int64_t trial_id, int add) {
    int free_slot = -1, least = 0;
    for (int i = 0; i < API_STORE_FAILURES_KEPT; i++) {
        if (ctx->store_failures[i].trial_id == trial_id) return i;
        if (!ctx->store_failures[i].trial_id && free_slot < 0) free_slot = i;
        if (ctx->store_failures[i].times < ctx->store_failures[least].times) least = i;
    }
    if (!add) return -1;
    int i = free_slot >= 0 ? free_slot : least;
    ctx->store_failures[i].trial_id = trial_id;
    ctx->store_failures[i].times = 0;
    return i;
}

int api_epoch_not_stored(api_ctx *ctx, int64_t trial_id, const char *why) {
    double b = back_off(ctx, API_BACKOFF_STORE_FAILED);
    if (b > 0) HPO_WARN("an epoch could not be stored (%s): jobs are queued again; the next starts in %.0f s", why, b);
    pthread_mutex_lock(&ctx->disk_mu);
    int times = ++ctx->store_failures[failure_slot(ctx, trial_id, 1)].times;
    pthread_mutex_unlock(&ctx->disk_mu);
    return times;
}

void api_epoch_stored(api_ctx *ctx, int64_t trial_id) {
    pthread_mutex_lock(&ctx->disk_mu);
    int i = failure_slot(ctx, trial_id, 0);
    if (i >= 0) ctx->store_failures[i].trial_id = 0;
    pthread_mutex_unlock(&ctx->disk_mu);
}

double api_disk_wait(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    double left = ctx->disk_until - hpo_monotonic();
    pthread_mutex_unlock(&ctx->disk_mu);
    return left > 0 ? left : 0;
}

int api_disk_backoff_why(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->disk_mu);
    int why = ctx->disk_backoff > 0 ? ctx->disk_why : API_BACKOFF_NONE;
    pthread_mutex_unlock(&ctx->disk_mu);
    return why;
}
