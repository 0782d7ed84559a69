/* enqueued.c - handing out an enqueued trial (Optuna's enqueue_trial): the
 * parameters the client fixed, completed by the study's tuner, stored with
 * the trial now running, and the trial added to the tuner's history. The
 * ask of an external study and the scheduler (an embedded study) both take
 * enqueued trials before drawing new ones, oldest first (api_internal.h). */
#include <math.h>
#include <stdlib.h>

#include "api_internal.h"

int api_enqueued_hand_out(api_ctx *ctx, api_study *st, const sto_trial *t, double lease, const char *slot,
                          const sto_event_in *ev, json_t **params_out) {
    const tun_space *space = st->def.space;
    double *fixed = hpo_xcalloc((size_t)space->n + 1, sizeof *fixed);
    double *x = hpo_xcalloc((size_t)space->n + 1, sizeof *x);
    hpo_error err = {{0}, {0}};
    json_t *params = NULL;
    char *text = NULL;
    json_t *given = json_loads(t->params, 0, NULL);
    int rc = given ? tun_space_from_json_partial(space, given, fixed, &err) : HPO_EINTERNAL;
    json_decref(given);
    if (rc) {
        HPO_ERROR("study %lld trial %lld: enqueued params unreadable: %s", (long long)st->id, (long long)t->id,
                  err.message);
        goto done;
    }
    if ((rc = tun_study_suggest_fixed(st->tuner, t->number, fixed, x))) goto done;
    params = tun_space_to_json(space, x);
    text = json_dumps(params, JSON_COMPACT);
    if (!text) {
        rc = HPO_ENOMEM;
        goto done;
    }
    /* on a slot: within the study's parallel_trials, whatever other nodes run */
    sto_trial_run r = {.params = text, .lease_expires = lease, .slot = slot,
                       .parallel = slot && st->def.embedded ? st->def.emb.parallel : 0};
    if ((rc = sto_trial_claim_ev(ctx->db, t->id, &r, ev))) goto done;
    rc = tun_study_add(st->tuner, t->number, x, TUN_TRIAL_RUNNING, NAN);
    if (rc) HPO_WARN("study %lld: the tuner refused trial %lld: %s", (long long)st->id, (long long)t->number,
                     hpo_strerror(rc));
    rc = 0; /* stored: the trial runs; the tuner learns of it again at the next load */
    if (params_out) *params_out = json_incref(params);
done:
    json_decref(params);
    free(text);
    free(fixed);
    free(x);
    return rc;
}

int api_enqueued_next(api_ctx *ctx, int64_t study_id, sto_trial *out) {
    sto_trial_filter f = {.state = STO_TRIAL_QUEUED, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    int rc = sto_trial_list(ctx->db, study_id, &f, &t, &n);
    if (rc) return rc;
    rc = HPO_ENOTFOUND;
    for (size_t i = 0; i < n; i++) {
        if (t[i].started > 0) continue; /* a requeued trial, to resume */
        *out = t[i];
        t[i] = (sto_trial){0};
        rc = 0;
        break;
    }
    sto_trial_list_free(t, n);
    return rc;
}
