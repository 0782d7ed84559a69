/* budget.c - a study's budget (tuner.max_trials, tuner.max_seconds, the
 * tuner's own end) and the end of a study whose budget is spent: state
 * complete with its study_complete event in one transaction
 * (jobs_internal.h). Embedded studies are ended by the scheduler's pass
 * (job_sched.c); external ones by api_external_end at a tell, a lease
 * expiry, a refused ask, a resume or their deadline. */
#include <stdlib.h>

#include "jobs_internal.h"

int api_deadline_passed(const api_study *st, double now) {
    return st->def.max_seconds > 0 && now >= st->created + st->def.max_seconds;
}

const char *api_budget_spent(api_study *st, double now, int probe) {
    if (st->def.max_trials > 0 && st->next_number >= st->def.max_trials) return "tuner.max_trials";
    if (st->def.max_seconds > 0 && now >= st->created + st->def.max_seconds) return "tuner.max_seconds";
    /* pbt samples its population once; later members are bred (pbt.c) */
    if (st->def.tuner.algorithm == TUN_PBT && st->pbt_members >= st->def.tuner.pbt_population)
        return "tuner.population_size";
    if (!st->exhausted && probe && st->def.tuner.algorithm == TUN_GRID &&
        (uint64_t)st->next_number >= tun_grid_size(st->def.space)) {
        /* the grid's suggestion changes nothing: it finds the first point no
         * trial holds, or none (every point stays held: trials are kept).
         * Only once there are as many trials as points can none be left:
         * before, each tell re-encoded the whole history for nothing */
        double *x = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *x);
        if (tun_study_suggest(st->tuner, st->next_number, x) == HPO_EEXHAUSTED) st->exhausted = 1;
        free(x);
    }
    return st->exhausted ? "space" : NULL;
}

int api_study_complete(api_ctx *ctx, api_study *st, const char *reason, const int64_t counts[STO_TRIAL_N_STATES]) {
    char *data = api_event_text(json_pack(
        "{s:I, s:I, s:I, s:I, s:s}", "complete", (json_int_t)counts[STO_TRIAL_COMPLETE], "pruned",
        (json_int_t)counts[STO_TRIAL_PRUNED], "failed", (json_int_t)counts[STO_TRIAL_FAILED], "cancelled",
        (json_int_t)counts[STO_TRIAL_CANCELLED], "reason", reason));
    sto_event_in ev = {"study_complete", data};
    /* from running only: of several nodes settling it at once, one ends it */
    int rc = sto_study_transition_ev(ctx->db, st->id, API_STATE_BIT(STO_STUDY_RUNNING), STO_STUDY_COMPLETE, &ev);
    free(data);
    if (rc == HPO_ECONFLICT) return rc; /* another node ended it, or it was paused meanwhile */
    if (rc) {
        HPO_WARN("study %lld: cannot store its end: %s", (long long)st->id, hpo_strerror(rc));
        return rc;
    }
    if (st->def.embedded) api_queue_set(ctx, st->id, STO_STUDY_COMPLETE);
    int64_t finished = counts[STO_TRIAL_COMPLETE] + counts[STO_TRIAL_PRUNED] + counts[STO_TRIAL_FAILED];
    HPO_INFO("study %lld complete (%s): %lld trials finished", (long long)st->id, reason, (long long)finished);
    return 0;
}

int api_external_end(api_ctx *ctx, api_study *st, double now) {
    if (st->def.embedded) return 0;
    const char *why = api_budget_spent(st, now, 1);
    if (!why) return 0;
    sto_study s;
    int rc = sto_study_get(ctx->db, st->id, &s);
    if (rc) return rc;
    sto_study_state state = s.state;
    sto_study_clear(&s);
    if (state != STO_STUDY_RUNNING) return 0; /* paused: at its resume; over: nothing to do */
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    if ((rc = sto_trial_counts(ctx->db, st->id, counts))) return rc;
    if (counts[STO_TRIAL_QUEUED] > 0 && api_deadline_passed(st, now)) {
        /* enqueued trials still waiting at max_seconds never start: no
         * lease ends them, and the study would run on for them */
        sto_trial_filter f = {.state = STO_TRIAL_QUEUED, .order = STO_ORDER_NUMBER};
        sto_trial *t = NULL;
        size_t n = 0;
        if ((rc = sto_trial_list(ctx->db, st->id, &f, &t, &n))) return rc;
        for (size_t i = 0; i < n; i++) api_trial_cancel_why(ctx, st, &t[i], "tuner.max_seconds passed before it started");
        sto_trial_list_free(t, n);
        st->n_waiting = 0;
        if ((rc = sto_trial_counts(ctx->db, st->id, counts))) return rc;
    }
    if (counts[STO_TRIAL_RUNNING] > 0 || counts[STO_TRIAL_QUEUED] > 0) return 0; /* at their tell or expiry */
    rc = api_study_complete(ctx, st, why, counts);
    return rc == HPO_ECONFLICT ? 0 : rc ? rc : 1; /* ECONFLICT: another node ended it */
}
