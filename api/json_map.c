/* json_map.c - JSON views of stored studies and trials. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

/* Parses stored JSON text; stored text was validated, so failure is a bug
 * that must still not crash a response: it shows as null. */
static json_t *stored_json(const char *text) {
    if (!text) return json_null();
    json_t *j = json_loads(text, 0, NULL);
    return j ? j : json_null();
}

/* A stored user_attrs object ({} when none: rows are "{}" by default). */
static json_t *stored_object(const char *text) {
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    if (json_is_object(j)) return j;
    json_decref(j);
    return json_object();
}

json_t *api_trial_json(const sto_trial *t, int with_intermediates, sto_db *db) {
    json_t *j = json_object();
    json_object_set_new(j, "id", json_integer(t->id));
    json_object_set_new(j, "trial_id", json_integer(t->id));
    json_object_set_new(j, "study_id", json_integer(t->study_id));
    json_object_set_new(j, "number", json_integer(t->number));
    json_object_set_new(j, "state", json_string(sto_trial_state_name(t->state)));
    json_object_set_new(j, "params", stored_json(t->params));
    json_object_set_new(j, "value", api_json_real(t->value));
    json_object_set_new(j, "value_std", api_json_real(t->value_std));
    json_object_set_new(j, "value_n", json_integer(t->value_n));
    /* the objective vector: stored for a multi-objective study's trial, else [value] */
    json_t *vec = t->values_json ? json_loads(t->values_json, 0, NULL) : NULL;
    if (!vec && t->state == STO_TRIAL_COMPLETE && !isnan(t->value)) vec = json_pack("[o]", api_json_real(t->value));
    json_object_set_new(j, "values", vec ? vec : json_null());
    json_object_set_new(j, "metrics", stored_json(t->metrics_json));
    json_object_set_new(j, "last_step", t->last_step >= 0 ? json_integer(t->last_step) : json_null());
    json_object_set_new(j, "created", api_json_real(t->created));
    json_object_set_new(j, "started", api_json_real(t->started));
    json_object_set_new(j, "finished", t->finished > 0 ? json_real(t->finished) : json_null());
    json_object_set_new(j, "lease_expires",
                        t->lease_expires > 0 ? json_real(t->lease_expires) : json_null());
    json_object_set_new(j, "error", t->error ? json_string(t->error) : json_null());
    json_object_set_new(j, "best_epoch", t->best_epoch > 0 ? json_integer(t->best_epoch) : json_null());
    json_object_set_new(j, "slot", t->slot ? json_string(t->slot) : json_null());
    json_object_set_new(j, "node_id", t->node_id > 0 ? json_integer(t->node_id) : json_null());
    json_object_set_new(j, "train_seconds", api_json_real(t->train_seconds));
    json_object_set_new(j, "user_attrs", stored_object(t->user_attrs));
    /* population-based training: where a bred trial comes from (schema v8) */
    json_object_set_new(j, "lineage", stored_json(t->lineage));
    if (with_intermediates) json_object_set_new(j, "note", json_string(t->note ? t->note : ""));
    if (with_intermediates) { /* and the learning curves of embedded trials */
        sto_epoch *eps = NULL;
        size_t ne = 0;
        json_t *curves = json_array();
        if (sto_trial_epochs(db, t->id, &eps, &ne) == 0) {
            for (size_t i = 0; i < ne; i++)
                json_array_append_new(curves, json_pack("{s:i, s:I, s:o}", "execution", eps[i].execution, "epoch",
                                                        (json_int_t)eps[i].epoch, "metrics", stored_json(eps[i].metrics)));
            sto_epoch_list_free(eps, ne);
        }
        json_object_set_new(j, "curves", curves);
    }
    if (with_intermediates) {
        int64_t *steps = NULL;
        double *values = NULL;
        size_t n = 0;
        json_t *arr = json_array();
        if (sto_trial_intermediates(db, t->id, &steps, &values, &n) == 0) {
            for (size_t i = 0; i < n; i++)
                json_array_append_new(arr, json_pack("{s:I, s:o}", "step", (json_int_t)steps[i],
                                                     "value", api_json_real(values[i])));
            free(steps);
            free(values);
        }
        json_object_set_new(j, "intermediate", arr);
    }
    return j;
}

/* The study's best trial (0 or 1 of them into *t, *n): its best complete
 * trial by value, or with constraints its best feasible one (/best's). */
static int best_trial(api_ctx *ctx, int64_t id, const json_t *spec, int maximize, sto_trial **t, size_t *n) {
    if (json_array_size(json_object_get(spec, "constraints")) > 0) {
        api_study *st = NULL;
        int rc = api_study_acquire(ctx, id, &st);
        if (rc) return rc;
        rc = api_best_trials(ctx, &st->def, id, 1, t, n);
        api_study_release(ctx, st);
        return rc;
    }
    sto_trial_filter best = {.state = STO_TRIAL_COMPLETE, .order = STO_ORDER_VALUE, .descending = maximize,
                             .limit = 1};
    return sto_trial_list(ctx->db, id, &best, t, n);
}

json_t *api_study_json(api_ctx *ctx, const sto_study *s, int full) {
    json_t *spec = stored_json(s->spec);
    json_t *j = json_object();
    json_object_set_new(j, "id", json_integer(s->id));
    json_object_set_new(j, "name", json_string(s->name));
    json_object_set_new(j, "state", json_string(sto_study_state_name(s->state)));
    int maximize = api_spec_maximizes(spec);
    json_object_set_new(j, "direction", json_string(maximize ? "maximize" : "minimize"));
    json_object_set_new(j, "objectives", api_objectives_json(spec));
    json_t *cons = json_object_get(spec, "constraints");
    json_object_set_new(j, "constraints", json_is_array(cons) ? json_incref(cons) : json_array());
    json_object_set_new(j, "kind", json_string(json_object_get(spec, "model") ? "embedded" : "external"));
    json_t *tuner = json_object_get(spec, "tuner");
    const char *alg = json_string_value(json_object_get(tuner, "algorithm"));
    json_object_set_new(j, "algorithm", json_string(alg ? alg : "random"));
    json_t *mt = json_object_get(tuner, "max_trials");
    json_object_set_new(j, "max_trials", mt ? json_incref(mt) : json_null());
    json_t *ms = json_object_get(tuner, "max_seconds");
    json_object_set_new(j, "max_seconds", ms ? json_incref(ms) : json_null());
    /* the seed its tuner uses: stored at creation (drawn when not given);
     * studies stored before that used 0 */
    json_t *seed = json_object_get(tuner, "seed");
    json_object_set_new(j, "seed", seed ? json_incref(seed) : json_integer(0));
    json_object_set_new(j, "created", json_real(s->created));
    json_object_set_new(j, "updated", json_real(s->updated));
    json_object_set_new(j, "user_attrs", stored_object(s->user_attrs));
    if (full) json_object_set_new(j, "note", json_string(s->note ? s->note : ""));
    json_t *warm = api_warm_start_view(spec);
    if (warm) json_object_set_new(j, "warm_start", warm);

    int64_t counts[STO_TRIAL_N_STATES] = {0};
    json_t *by_state = json_object();
    int64_t total = 0;
    if (sto_trial_counts(ctx->db, s->id, counts) == 0) {
        for (int st = 0; st < STO_TRIAL_N_STATES; st++) {
            json_object_set_new(by_state, sto_trial_state_name(st), json_integer(counts[st]));
            total += counts[st];
        }
    }
    json_object_set_new(j, "n_trials", json_integer(total));
    json_object_set_new(j, "trials_by_state", by_state);

    sto_trial *t = NULL;
    size_t n = 0;
    json_t *best_json = json_null();
    if (best_trial(ctx, s->id, spec, maximize, &t, &n) == 0) {
        if (n == 1 && isfinite(t[0].value)) {
            json_decref(best_json);
            best_json = json_pack("{s:I, s:I, s:o, s:o}", "trial_id", (json_int_t)t[0].id,
                                  "number", (json_int_t)t[0].number, "value",
                                  api_json_real(t[0].value), "params", stored_json(t[0].params));
        }
        sto_trial_list_free(t, n);
    }
    json_object_set_new(j, "best", best_json);
    int64_t last_event = 0;
    if (sto_event_last_id(ctx->db, s->id, &last_event) == 0)
        json_object_set_new(j, "last_event_id", json_integer(last_event)); /* GET .../events?after= */
    if (full) {
        /* as the client wrote it (the warm-start snapshot left out) */
        json_t *def = json_deep_copy(spec);
        api_warm_start_strip(def);
        json_object_set_new(j, "definition", def);
        /* the space the tuner searches: for a premade template, its own
         * space merged with the definition's overrides */
        api_study *st;
        if (api_study_acquire(ctx, s->id, &st) == 0) {
            /* a copy: requests share the study, and jansson's reference
             * count is no lock (concurrent get-or-creates raced on it) */
            json_object_set_new(j, "space", json_deep_copy(st->def.space_json));
            api_study_release(ctx, st);
        }
    }
    json_decref(spec);
    return j;
}
