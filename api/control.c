/* control.c - POST /api/v1/studies/{id}/pause, /resume and /cancel.
 *
 * A paused study gets no new trials: an external study's ask answers 409,
 * an embedded study's running trials stop at their next epoch and go back
 * to the queue (resumed from their checkpoints by /resume). Cancel is
 * final: running trials are cancelled (embedded ones at their next epoch),
 * queued ones too, and the event stream ends with "study_cancelled". An
 * external study resumed with its budget spent and no trial out completes
 * at once (the answer shows it complete).
 * A study that can no longer be loaded changes state all the same
 * (through storage; the scheduler cancels its queued trials). None takes
 * options: the body is empty or {}, anything else is a 400. */
#include <math.h>
#include <stdlib.h>

#include "jobs_internal.h"

static unsigned from_mask(const sto_study_state *from, size_t n) {
    unsigned mask = 0;
    for (size_t i = 0; i < n; i++) mask |= API_STATE_BIT(from[i]);
    return mask;
}

static void change_state(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp,
                         const sto_study_state *from, size_t n_from, sto_study_state to, const char *event) {
    if (api_body_empty(req, resp)) return; /* no options: a body is {} or nothing */
    api_study *st = NULL;
    int rc = api_study_acquire(ctx, id, &st);
    if (rc == HPO_ENOTFOUND || rc == HPO_ENOMEM) {
        api_fail_lookup(resp, rc, "study", id);
        return;
    }
    /* a study that cannot be loaded any more (its dataset gone, a
     * definition this version refuses: hpod's log says why) still changes
     * state, through storage alone: its owner can cancel it */
    if (rc) st = NULL;
    int embedded = st ? st->def.embedded : api_queue_has(ctx, id);
    char *data = api_event_text(json_pack("{s:s}", "state", sto_study_state_name(to)));
    sto_event_in ev = {event, data}; /* stored with the state change */
    if (st) pthread_mutex_lock(&st->lock);
    sto_study s;
    int got = sto_study_get(ctx->db, id, &s);
    rc = got;
    int allowed = 0;
    for (size_t i = 0; rc == 0 && i < n_from; i++) allowed |= s.state == from[i];
    if (rc) {
        api_fail_rc(resp, rc, NULL);
    } else if (!allowed) {
        api_fail(resp, 409, "conflict", "state", "study %lld is %s", (long long)id, sto_study_state_name(s.state));
    } else if ((rc = sto_study_transition_ev(ctx->db, id, from_mask(from, n_from), to, &ev))) {
        /* another node changed it since it was read (HPO_ECONFLICT: 409) */
        api_fail_rc(resp, rc, NULL);
    } else if (embedded) {
        api_queue_set(ctx, id, to);
    } else if (to == STO_STUDY_RUNNING && st) {
        /* resumed with its budget spent and nothing out (its max_seconds
         * passed while paused): it ends now (jobs_internal.h) */
        api_external_end(ctx, st, hpo_now());
    } else if (to == STO_STUDY_CANCELLED) {
        /* external trials in flight are cancelled now (their tells get 409),
         * and the enqueued ones still waiting */
        sto_trial_filter f = {.state = -1, .order = STO_ORDER_NUMBER};
        sto_trial *t = NULL;
        size_t n = 0;
        if (sto_trial_list(ctx->db, id, &f, &t, &n) == 0)
            for (size_t i = 0; i < n; i++)
                if (t[i].state == STO_TRIAL_RUNNING || t[i].state == STO_TRIAL_QUEUED)
                    api_trial_cancel_for_study(ctx, st, &t[i]);
        sto_trial_list_free(t, n);
    }
    if (got == 0) sto_study_clear(&s);
    if (st) {
        pthread_mutex_unlock(&st->lock);
        api_study_release(ctx, st);
    }
    free(data);
    if (resp->body) return; /* an error was filled */
    api_events_wake(ctx);
    api_jobs_wake(ctx);
    if (sto_study_get(ctx->db, id, &s) == 0) {
        api_reply_json(resp, 200, api_study_json(ctx, &s, 0));
        sto_study_clear(&s);
    } else {
        api_reply_json(resp, 200, json_pack("{s:I, s:s}", "id", (json_int_t)id, "state", sto_study_state_name(to)));
    }
}

void api_h_study_pause(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const sto_study_state from[] = {STO_STUDY_RUNNING};
    change_state(ctx, req, id, resp, from, 1, STO_STUDY_PAUSED, "study_paused");
}

void api_h_study_resume(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const sto_study_state from[] = {STO_STUDY_PAUSED};
    change_state(ctx, req, id, resp, from, 1, STO_STUDY_RUNNING, "study_resumed");
}

void api_h_study_cancel(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const sto_study_state from[] = {STO_STUDY_RUNNING, STO_STUDY_PAUSED};
    change_state(ctx, req, id, resp, from, 2, STO_STUDY_CANCELLED, "study_cancelled");
}
