/* warm_start.c - seeding a study's tuner from other studies' trials: a
 * definition's "warm_start": {"study_ids": [N, ...]} (tpe and bayesian
 * only: random and grid learn nothing from trials).
 *
 * At creation the complete trials of those studies whose params lie in the
 * new study's space (tun_space_from_json accepts them: every active
 * parameter, valid, no unknown name) are copied into the stored definition
 * as a snapshot: warm_start gets "trials" ([{"params", "value"}], oldest
 * study first, by number), "trials_used" and "trials_skipped" (complete
 * trials that do not fit, and those past TUN_MAX_PRIORS). The study's tuner
 * is fed the snapshot as prior observations (tun_study_add_prior) each time
 * it is loaded, so its state after an hpod restart is the one it had, even
 * if the source studies changed or were deleted meanwhile. Priors are not
 * trials of the study: they are not stored as trials, not counted toward
 * max_trials, not exported. Values are taken as they are (the objective's
 * value; the new study's direction decides what is better). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

#define MAX_SOURCES 100

int api_warm_start_check(api_ctx *ctx, const json_t *def, const api_study_def *d, int creating, hpo_error *err) {
    static const char *stored_keys[] = {"study_ids", "trials", "trials_used", "trials_skipped"};
    const json_t *ws = json_object_get(def, "warm_start");
    if (!ws) return 0;
    if (!json_is_object(ws)) return hpo_fail(err, HPO_EINVAL, "warm_start", "warm_start must be an object {\"study_ids\": [...]}");
    int rc = api_only_keys(ws, stored_keys, creating ? 1 : HPO_ARRAY_LEN(stored_keys), "warm_start", err);
    if (rc) return rc;
    const json_t *ids = json_object_get(ws, "study_ids");
    size_t n = json_array_size(ids);
    if (!json_is_array(ids) || n == 0 || n > MAX_SOURCES)
        return hpo_fail(err, HPO_EINVAL, "warm_start.study_ids", "warm_start.study_ids must be an array of 1 to %d study ids",
                        MAX_SOURCES);
    if (d->tuner.algorithm != TUN_TPE && d->tuner.algorithm != TUN_BAYESIAN)
        return hpo_fail(err, HPO_EINVAL, "warm_start",
                        "warm_start needs tuner.algorithm tpe or bayesian (%s learns nothing from trials)",
                        tun_algorithm_name(d->tuner.algorithm));
    for (size_t i = 0; i < n; i++) {
        const json_t *id = json_array_get(ids, i);
        char field[64];
        snprintf(field, sizeof field, "warm_start.study_ids[%zu]", i);
        if (!json_is_integer(id) || json_integer_value(id) < 1)
            return hpo_fail(err, HPO_EINVAL, field, "%s must be a study id (an integer >= 1)", field);
        if (!creating) continue; /* stored: the snapshot is what counts */
        for (size_t k = 0; k < i; k++) /* twice would weigh its trials double */
            if (json_integer_value(json_array_get(ids, k)) == json_integer_value(id))
                return hpo_fail(err, HPO_EINVAL, field, "%s: study %lld is warm_start.study_ids[%zu] already", field,
                                (long long)json_integer_value(id), k);
        sto_study s;
        rc = sto_study_get(ctx->db, json_integer_value(id), &s);
        if (rc == HPO_ENOTFOUND)
            return hpo_fail(err, HPO_EINVAL, field, "study %lld does not exist", (long long)json_integer_value(id));
        if (rc) return hpo_fail(err, rc, field, "study %lld cannot be read", (long long)json_integer_value(id));
        sto_study_clear(&s);
    }
    return 0;
}

int api_warm_start_snapshot(api_ctx *ctx, json_t *def, const tun_space *space, hpo_error *err) {
    json_t *ws = json_object_get(def, "warm_start");
    if (!ws) return 0;
    const json_t *ids = json_object_get(ws, "study_ids");
    json_t *trials = json_array();
    int64_t used = 0, skipped = 0;
    double *x = hpo_xcalloc((size_t)space->n + 1, sizeof *x);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < json_array_size(ids); i++) {
        int64_t sid = json_integer_value(json_array_get(ids, i));
        sto_trial_filter f = {.state = STO_TRIAL_COMPLETE, .order = STO_ORDER_NUMBER};
        sto_trial *t = NULL;
        size_t n = 0;
        if ((rc = sto_trial_list(ctx->db, sid, &f, &t, &n))) {
            char field[64];
            snprintf(field, sizeof field, "warm_start.study_ids[%zu]", i);
            rc = hpo_fail(err, rc == HPO_ENOTFOUND ? HPO_EINVAL : rc, field, "study %lld cannot be read",
                          (long long)sid);
            break;
        }
        for (size_t k = 0; k < n; k++) {
            json_t *params = json_loads(t[k].params, 0, NULL);
            hpo_error perr;
            int fits = params && isfinite(t[k].value) && used < TUN_MAX_PRIORS &&
                       tun_space_from_json(space, params, x, &perr) == 0;
            if (fits) {
                json_array_append_new(trials, json_pack("{s:O, s:f}", "params", params, "value", t[k].value));
                used++;
            } else {
                skipped++;
            }
            json_decref(params);
        }
        sto_trial_list_free(t, n);
    }
    free(x);
    if (rc) {
        json_decref(trials);
        return rc;
    }
    json_object_set_new(ws, "trials", trials);
    json_object_set_new(ws, "trials_used", json_integer(used));
    json_object_set_new(ws, "trials_skipped", json_integer(skipped));
    return 0;
}

int api_warm_start_feed(const json_t *spec, const tun_space *space, tun_study *tuner) {
    const json_t *trials = json_object_get(json_object_get(spec, "warm_start"), "trials");
    double *x = hpo_xcalloc((size_t)space->n + 1, sizeof *x);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < json_array_size(trials); i++) {
        const json_t *t = json_array_get(trials, i);
        hpo_error err;
        rc = tun_space_from_json(space, json_object_get(t, "params"), x, &err);
        if (rc == 0) rc = tun_study_add_prior(tuner, x, json_number_value(json_object_get(t, "value")));
    }
    free(x);
    return rc;
}

json_t *api_warm_start_view(const json_t *spec) {
    const json_t *ws = json_object_get(spec, "warm_start");
    if (!ws) return NULL;
    json_t *j = json_object();
    json_object_set(j, "study_ids", json_object_get(ws, "study_ids"));
    json_object_set_new(j, "trials_used", json_integer(json_integer_value(json_object_get(ws, "trials_used"))));
    json_object_set_new(j, "trials_skipped", json_integer(json_integer_value(json_object_get(ws, "trials_skipped"))));
    return j;
}

void api_warm_start_strip(json_t *def) {
    json_t *ws = json_object_get(def, "warm_start");
    if (!ws) return;
    json_object_set_new(def, "warm_start", json_pack("{s:O}", "study_ids", json_object_get(ws, "study_ids")));
}
