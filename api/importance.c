/* importance.c - GET /api/v1/studies/{id}/importance: how much each
 * hyperparameter matters for the objective, computed by tun_importance
 * (permutation importance on a random forest) over the study's complete
 * trials.
 *
 * The newest MAX_TRIALS complete trials are used (a forest sees at most
 * 512 per tree anyway), so a large study answers in a fraction of a
 * second. Trials whose stored params no longer parse are skipped. No study
 * lock is taken: the space is immutable and the trials come from storage.
 * The seed is the study id: the same trials give the same figures.
 * Several objectives: ?objective=K (0-based, default 0) picks the one
 * explained, and the answer names it (Optuna asks for a target there). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

enum { MAX_TRIALS = 2000 };

void api_h_study_importance(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    api_study *st = NULL;
    sto_trial *trials = NULL;
    size_t n = 0;
    double *X = NULL, *y = NULL, *imp = NULL;
    int rc = api_study_acquire(ctx, id, &st);
    if (rc) {
        api_fail_study_acquire(resp, rc, id);
        return;
    }
    const tun_space *space = st->def.space;
    int d = space->n;
    int64_t objective = 0;
    if (api_query_int(req, resp, "objective", 0, 0, st->def.n_obj - 1, &objective)) goto done;
    sto_trial_filter f = {.state = STO_TRIAL_COMPLETE, .order = STO_ORDER_NUMBER, .descending = 1,
                          .limit = MAX_TRIALS};
    rc = sto_trial_list(ctx->db, id, &f, &trials, &n);
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        goto done;
    }
    X = hpo_xmalloc((n + 1) * (size_t)d * sizeof *X);
    y = hpo_xmalloc((n + 1) * sizeof *y);
    imp = hpo_xcalloc((size_t)d, sizeof *imp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *params = json_loads(trials[i].params, 0, NULL);
        hpo_error err;
        double v[TUN_MAX_OBJECTIVES], violation;
        int have = st->def.n_obj > 1 ? api_trial_objectives(&st->def, &trials[i], v, &violation, NULL) == 0
                                     : (v[0] = trials[i].value, 1);
        if (params && have && isfinite(v[objective]) &&
            tun_space_from_json(space, params, X + m * (size_t)d, &err) == 0)
            y[m++] = v[objective];
        json_decref(params);
    }
    double t0 = hpo_monotonic();
    int computed = m >= 2 && tun_importance(space, X, y, m, (uint64_t)id, imp) == 0;
    double ms = (hpo_monotonic() - t0) * 1e3;
    json_t *arr = json_array();
    int *order = hpo_xmalloc((size_t)d * sizeof *order);
    for (int i = 0; i < d; i++) order[i] = i;
    for (int i = 1; i < d; i++) /* most important first; ties keep the space's order */
        for (int k = i; k > 0 && imp[order[k]] > imp[order[k - 1]]; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    for (int i = 0; i < d; i++)
        json_array_append_new(arr, json_pack("{s:s, s:o}", "param", space->params[order[i]].name,
                                             "importance", computed ? json_real(imp[order[i]]) : json_null()));
    free(order);
    json_t *out = json_pack("{s:I, s:s, s:I, s:o, s:o}", "study_id", (json_int_t)id, "method",
                            m < TUN_IMPORTANCE_OOB_FROM
                                ? "permutation importance, random forest (in-sample: under 12 trials)"
                                : "permutation importance, random forest (out-of-bag)",
                            "n_trials", (json_int_t)m, "importance", arr, "seconds",
                            computed ? json_real(ms / 1e3) : json_null());
    if (st->def.n_obj > 1) /* which objective the figures explain */
        json_object_set_new(out, "objective",
                            json_pack("{s:I, s:s*}", "index", (json_int_t)objective, "metric",
                                      st->def.obj[objective].metric));
    api_reply_json(resp, 200, out);
done:
    sto_trial_list_free(trials, n);
    free(X);
    free(y);
    free(imp);
    api_study_release(ctx, st);
}
