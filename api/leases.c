/* leases.c - the lease of an asked trial of an external study runs out
 * (api.h: leases; jobs.h: the scheduler thread calls this every second):
 * storage fails the trial with "lease expired" and the tuner is told. */
#include <math.h>

#include "jobs_internal.h"

int api_expire_leases(api_ctx *ctx, double now) {
    sto_trial *expired = NULL;
    size_t n = 0;
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
        pthread_mutex_unlock(&st->lock);
        api_study_release(ctx, st);
    }
    sto_trial_list_free(expired, n);
    return (int)n;
}
