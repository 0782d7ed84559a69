/* leases.c - the time limits of external studies, checked by the scheduler
 * thread every second (api.h: leases; jobs.h: api_expire_leases). The lease
 * of an asked trial runs out: storage fails the trial with "lease expired",
 * the tuner is told, and a study whose budget is then spent ends
 * (jobs_internal.h: a study's end). A study's max_seconds deadline passes
 * (deadlines.c): it ends if no trial of it is out. Both read only what is
 * due (the lease index, the heap's top), never every external study. */
#include <math.h>
#include <stdlib.h>

#include "jobs_internal.h"

/* A due deadline: ends study id if nothing of it runs (api_external_end);
 * one not reached yet goes back to the heap. 1 if it ended the study. */
static int deadline_due(api_ctx *ctx, int64_t id, double now) {
    api_study *st;
    if (api_study_acquire(ctx, id, &st)) return 0; /* deleted */
    pthread_mutex_lock(&st->lock);
    double at = st->created + st->def.max_seconds;
    int early = now < at;
    int ended = early ? 0 : api_external_end(ctx, st, now) > 0;
    pthread_mutex_unlock(&st->lock);
    if (early) api_deadline_add(ctx, id, at);
    api_study_release(ctx, st);
    return ended;
}

int api_expire_leases(api_ctx *ctx, double now) {
    sto_trial *expired = NULL;
    size_t n = 0;
    int ended = 0;
    int rc = sto_trials_expire(ctx->db, now, &expired, &n);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        HPO_INFO("trial %lld (study %lld, number %lld) failed: lease expired",
                 (long long)expired[i].id, (long long)expired[i].study_id,
                 (long long)expired[i].number);
        api_study *st;
        if (api_study_acquire(ctx, expired[i].study_id, &st)) continue;
        pthread_mutex_lock(&st->lock);
        tun_study_finish(st->tuner, expired[i].number, TUN_TRIAL_FAILED, NAN);
        ended += api_external_end(ctx, st, now) > 0;
        pthread_mutex_unlock(&st->lock);
        api_study_release(ctx, st);
    }
    sto_trial_list_free(expired, n);
    int64_t *due = NULL;
    size_t n_due = api_deadlines_due(ctx, now, &due);
    for (size_t i = 0; i < n_due; i++) ended += deadline_due(ctx, due[i], now);
    free(due);
    if (ended) api_events_wake(ctx);
    return (int)n;
}
