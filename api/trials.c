/* trials.c - ask/tell: POST /studies/{id}/ask, /trials/{id}/report and
 * /trials/{id}/tell (both may carry user_attrs, merged into the trial's
 * before the report or outcome is stored), and GET /trials/{id}. An ask
 * hands out the oldest enqueued trial before drawing a new one
 * (enqueued.c). An ask refused for the budget
 * and a tell end a study whose budget is spent once none of its trials is
 * out (jobs_internal.h: a study's end). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jobs_internal.h"

/* 409 exhausted naming the spent budget (api_budget_spent's field). */
static void refuse_budget(api_response *resp, const api_study *st, const char *why) {
    if (strcmp(why, "tuner.max_trials") == 0)
        api_fail(resp, 409, "exhausted", why, "the study has reached max_trials (%lld trials asked)",
                 (long long)st->next_number);
    else if (strcmp(why, "tuner.max_seconds") == 0)
        api_fail(resp, 409, "exhausted", why, "the study's max_seconds (%g s) have passed since it was created",
                 st->def.max_seconds);
    else
        api_fail(resp, 409, "exhausted", why, "the search space is exhausted (every grid point was asked)");
}

static void reply_asked(api_ctx *ctx, api_response *resp, int64_t study_id, int64_t trial_id, int64_t number,
                        json_t *params, double lease) {
    api_asked_put(ctx, trial_id, study_id, number);
    api_reply_json(resp, 200, json_pack("{s:I, s:I, s:I, s:O, s:f}", "trial_id", (json_int_t)trial_id,
                                        "study_id", (json_int_t)study_id, "number", (json_int_t)number,
                                        "params", params, "lease_expires", lease));
}

void api_h_study_ask(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    double t0 = hpo_monotonic();
    if (req->body_len > 0) { /* an optional, empty object: room for options */
        json_t *body = api_body_object(req, resp);
        if (!body) return;
        int bad = api_check_keys(body, NULL, 0, resp);
        json_decref(body);
        if (bad) return;
    }
    api_study *st = NULL;
    int rc = api_study_acquire(ctx, id, &st);
    if (rc) {
        api_fail_study_acquire(resp, rc, id);
        return;
    }
    double *x = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *x);
    pthread_mutex_lock(&st->lock);
    int64_t number = 0, trial_id = 0;
    json_t *params = NULL;
    double now = hpo_now(), lease = now + st->def.lease_seconds;
    int ended = 0;
    const char *why = NULL;
    if (st->def.embedded) {
        api_fail(resp, 409, "conflict", "id",
                 "study %lld is embedded: hpod runs its trials (follow GET /api/v1/studies/%lld/events)",
                 (long long)id, (long long)id);
        goto unlock;
    }
    /* what other nodes changed (a new trial's suggestion, an enqueued
     * one's free parameters and a spent budget see it) and the state */
    sto_study_state state;
    if ((rc = api_study_sync_state(ctx, st, &state))) {
        api_fail_rc(resp, rc, NULL);
        goto unlock;
    }
    /* enqueued trials first, oldest first; they hold their numbers already,
     * so a max_trials reached does not keep them waiting */
    sto_trial q;
    int queued = HPO_ENOTFOUND;
    /* not past max_seconds: an enqueued trial is a new start too (it holds
     * its number, so max_trials does not keep it waiting) */
    if (state == STO_STUDY_RUNNING && api_study_may_wait(ctx, st) && !api_deadline_passed(st, now)) {
        queued = api_enqueued_next(ctx, id, &q);
        if (queued == HPO_ENOTFOUND) st->n_waiting = 0; /* read after the sync: handed out or cancelled elsewhere */
    }
    if (queued == 0) {
        rc = api_enqueued_hand_out(ctx, st, &q, lease, NULL, NULL, &params);
        trial_id = q.id;
        number = q.number;
        sto_trial_clear(&q);
        if (rc)
            api_fail_rc(resp, rc, NULL);
        else
            reply_asked(ctx, resp, id, trial_id, number, params, lease);
        goto unlock;
    }
    /* a spent budget is named, also once it completed the study */
    if (state == STO_STUDY_RUNNING || state == STO_STUDY_COMPLETE)
        why = api_budget_spent(st, now, state == STO_STUDY_COMPLETE);
    if (!why && state != STO_STUDY_RUNNING) {
        api_fail(resp, 409, "conflict", "state", "study %lld is %s", (long long)id, sto_study_state_name(state));
        goto unlock;
    }
    if (!why) {
        /* max_trials counted in storage too: asks through other nodes count */
        sto_trial_run r = {.lease_expires = lease, .max_trials = st->def.max_trials};
        rc = api_study_new_trial(ctx, st, &r, x, &params, &trial_id, &number);
        if (rc == HPO_EEXHAUSTED) why = st->exhausted ? "space" : "tuner.max_trials";
    }
    if (why) {
        refuse_budget(resp, st, why);
        if (state == STO_STUDY_RUNNING) ended = api_external_end(ctx, st, now) > 0;
        goto unlock;
    }
    if (rc == HPO_EINVAL || rc == HPO_EINTERNAL) { /* nothing the client sent: the tuner's own failure */
        api_fail(resp, 500, "internal_error", "", "the tuner could not suggest a trial of study %lld (%s); nothing was stored",
                 (long long)id, hpo_strerror(rc));
        goto unlock;
    }
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        goto unlock;
    }
    reply_asked(ctx, resp, id, trial_id, number, params, lease);
unlock:
    pthread_mutex_unlock(&st->lock);
    if (ended) api_events_wake_study(ctx, st->id);
    json_decref(params);
    free(x);
    api_study_release(ctx, st);
    api_metrics_observe_op(ctx, API_OP_ASK, hpo_monotonic() - t0);
}

/* The user_attrs a report or tell carries (NULL: none) is malformed: 400
 * naming it (its size is checked once merged, under the study's lock). */
static int attrs_invalid(const json_t *attrs, api_response *resp) {
    hpo_error err = {{0}, {0}};
    if (!attrs || api_attrs_check(attrs, &err) == 0) return 0;
    api_fail_rc(resp, HPO_EINVAL, &err);
    return 1;
}

/* Looks up a trial and its study (with a reference); on failure fills resp. */
static int trial_and_study(api_ctx *ctx, int64_t trial_id, sto_trial *t, api_study **st,
                           api_response *resp) {
    int rc = sto_trial_get(ctx->db, trial_id, t);
    if (rc == 0) {
        rc = api_study_acquire(ctx, t->study_id, st);
        if (rc) sto_trial_clear(t);
    }
    if (rc) {
        api_fail_lookup(resp, rc, "trial", trial_id);
    }
    return rc;
}

/* A trial asked through this node (asked.c): as it was handed out,
 * running, and its study; else nonzero (the caller reads the trial). */
static int asked_trial(api_ctx *ctx, int64_t trial_id, sto_trial *t, api_study **st) {
    int64_t study_id, number;
    if (!api_asked_take(ctx, trial_id, &study_id, &number) || api_study_acquire(ctx, study_id, st)) return 1;
    *t = (sto_trial){.id = trial_id, .study_id = study_id, .number = number, .state = STO_TRIAL_RUNNING};
    return 0;
}

/* A trial of an embedded study is hpod's own: a worker trains it and stores
 * its reports and its end. A report would give it an ask/tell lease (whose
 * expiry fails it while the worker still trains it) and a tell would end it
 * under the worker (which trains on, while the scheduler starts another
 * trial past parallel_trials): both are a 409, as an ask is. */
static int embedded_trial(const api_study *st, const sto_trial *t, api_response *resp) {
    if (!st->def.embedded) return 0;
    api_fail(resp, 409, "conflict", "id",
             "trial %lld belongs to embedded study %lld: hpod trains it and records its reports and its end",
             (long long)t->id, (long long)st->id);
    return 1;
}

static int not_running(const sto_trial *t, api_response *resp) {
    if (t->state == STO_TRIAL_RUNNING) return 0;
    api_fail(resp, 409, "conflict", "id", "trial %lld is already %s", (long long)t->id,
             sto_trial_state_name(t->state));
    return 1;
}

/* A reported number: a JSON number, or "nan", "inf", "-inf" (also
 * "NaN", "Infinity", "-Infinity", any case), which JSON cannot carry: a
 * diverged run reports them, and the pruner decides on them as Optuna's
 * does (a NaN stops a trial at a rung; the median rule takes the best
 * value so far). 1 if j is one. */
static int reported_number(const json_t *j, double *out) {
    if (json_is_number(j)) {
        *out = json_number_value(j);
        return 1;
    }
    const char *s = json_string_value(j);
    if (!s) return 0;
    int neg = s[0] == '-';
    const char *w = s + (neg || s[0] == '+');
    if (strcasecmp(w, "nan") == 0 && s == w) *out = NAN;
    else if (strcasecmp(w, "inf") == 0 || strcasecmp(w, "infinity") == 0) *out = neg ? -INFINITY : INFINITY;
    else return 0;
    return 1;
}

/* A report's "value" or "values" (one number per objective) read against
 * the study's objectives: *value the first objective's, vec all of them
 * (NaN where not told), *curve (NULL: none) the epoch row that keeps a
 * vector: {"<metric>": v, ...}. 0, or a 400 in resp. */
static int report_values(const api_study *st, const json_t *jvalue, const json_t *jvalues, double *value, double *vec,
                         char **curve, api_response *resp) {
    int m = st->def.n_obj;
    *curve = NULL;
    if (!!jvalue == !!jvalues) {
        api_fail(resp, 400, "invalid_argument", jvalues ? "values" : "value",
                 "give value (a number) or values (one number per objective)");
        return -1;
    }
    if (jvalue) {
        double v;
        if (!reported_number(jvalue, &v)) {
            api_fail(resp, 400, "invalid_argument", "value", "value must be a number (or \"nan\", \"inf\", \"-inf\")");
            return -1;
        }
        if (m > 1 && st->def.tuner.pruner.kind != TUN_PRUNER_NONE) {
            api_fail(resp, 400, "invalid_argument", "values",
                     "this study has %d objectives and a pruner that ranks their vectors: report values, one "
                     "number per objective", m);
            return -1;
        }
        *value = vec[0] = v;
        for (int k = 1; k < m; k++) vec[k] = NAN;
        return 0;
    }
    if (!json_is_array(jvalues) || json_array_size(jvalues) != (size_t)m) {
        api_fail(resp, 400, "invalid_argument", "values", "values holds one number per objective (this study has %d)",
                 m);
        return -1;
    }
    for (int k = 0; k < m; k++) {
        const json_t *e = json_array_get(jvalues, (size_t)k);
        if (!reported_number(e, &vec[k])) {
            api_fail(resp, 400, "invalid_argument", "values",
                     "values[%d] must be a number (or \"nan\", \"inf\", \"-inf\")", k);
            return -1;
        }
    }
    *value = vec[0];
    if (m > 1) *curve = api_vector_curve(&st->def, vec);
    return 0;
}

void api_h_trial_report(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    double t0 = hpo_monotonic();
    static const char *keys[] = {"step", "value", "values", "user_attrs"};
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto out;
    const json_t *attrs = json_object_get(body, "user_attrs");
    if (attrs_invalid(attrs, resp)) goto out;
    json_t *jstep = json_object_get(body, "step");
    if (!json_is_integer(jstep) || json_integer_value(jstep) < 0) {
        api_fail(resp, 400, "invalid_argument", "step", "step must be an integer >= 0");
        goto out;
    }
    int64_t step = json_integer_value(jstep);
    double value, vec[TUN_MAX_OBJECTIVES];
    char *curve = NULL;
    sto_trial t;
    api_study *st;
    if (trial_and_study(ctx, id, &t, &st, resp)) goto out;
    if (embedded_trial(st, &t, resp)) {
        sto_trial_clear(&t);
        api_study_release(ctx, st);
        goto out;
    }
    if (report_values(st, json_object_get(body, "value"), json_object_get(body, "values"), &value, vec, &curve,
                      resp)) {
        sto_trial_clear(&t);
        api_study_release(ctx, st);
        goto out;
    }
    pthread_mutex_lock(&st->lock);
    /* Re-read under the lock: the state may have changed since (or the
     * study was deleted: 404 naming the trial). */
    sto_trial_clear(&t);
    int rc = sto_trial_get(ctx->db, id, &t);
    if (rc) {
        api_fail_lookup(resp, rc, "trial", id);
    } else if (!not_running(&t, resp)) {
        hpo_error err = {{0}, {0}};
        int prune = 0;
        /* the pruner compares with other nodes' trials too (without one,
         * the next ask catches up: a report spares the query) */
        if (st->def.tuner.pruner.kind != TUN_PRUNER_NONE) rc = api_study_sync(ctx, st);
        if (rc == 0) rc = api_trial_annotate(ctx, &t, attrs, NULL, &err); /* before the report: a 413 changes nothing */
        /* several objectives: the vector is kept as the trial's curve point at
         * this step (execution 0), which a restart replays (study_cache.c);
         * stored before the report, so a stored report always has it */
        if (rc == 0 && curve) rc = sto_epoch_put_report(ctx->db, id, step, curve);
        /* the pruner decides, then the report is stored with its answer in
         * one transaction, before it is answered: a retry after a restart
         * is told the same, and another node never reads the report
         * without the answer (a failed store is answered as one; the
         * tuner keeps the step's first value and answer, which the retry
         * stores) */
        if (rc == 0) rc = tun_study_report_mo(st->tuner, t.number, step, vec, &prune);
        if (rc == 0)
            rc = sto_trial_report(ctx->db, id, step, value, hpo_now() + st->def.lease_seconds,
                                  api_prune_answer(st, t.number, prune));
        if (rc)
            api_fail_rc(resp, rc, err.message[0] ? &err : NULL);
        else
            api_reply_json(resp, 200, json_pack("{s:b}", "prune", prune));
    }
    pthread_mutex_unlock(&st->lock);
    if (attrs) api_events_wake_study(ctx, st->id);
    free(curve);
    sto_trial_clear(&t);
    api_study_release(ctx, st);
out:
    json_decref(body);
    api_metrics_observe_op(ctx, API_OP_REPORT, hpo_monotonic() - t0);
}

void api_h_trial_tell(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    double t0 = hpo_monotonic();
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    api_outcome o = {0};
    static const char *keys[] = {"value", "values", "repeats", "metrics", "state", "error", "user_attrs"};
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto out;
    const json_t *attrs = json_object_get(body, "user_attrs");
    if (attrs_invalid(attrs, resp)) goto out;
    sto_trial t;
    api_study *st;
    if (asked_trial(ctx, id, &t, &st) && trial_and_study(ctx, id, &t, &st, resp)) goto out;
    if (embedded_trial(st, &t, resp)) {
        sto_trial_clear(&t);
        api_study_release(ctx, st);
        goto out;
    }
    /* the outcome is read against the study's objectives (fixed at creation) */
    hpo_error oerr = {{0}, {0}};
    int orc = api_parse_outcome(&st->def, body, &o, &oerr);
    if (orc) {
        api_fail_rc(resp, orc, &oerr);
        sto_trial_clear(&t);
        api_study_release(ctx, st);
        goto out;
    }
    sto_trial_state state = o.state;
    double value = o.value;
    pthread_mutex_lock(&st->lock);
    /* read again under the lock only when it matters: user_attrs go to a
     * trial still running, a pruned trial without a value takes its last
     * report; else the finish's own guard catches a tell that came first */
    int rc = 0, ended = 0;
    if (attrs || (state == STO_TRIAL_PRUNED && o.value_n == 0)) {
        sto_trial_clear(&t);
        rc = sto_trial_get(ctx->db, id, &t);
    }
    if (rc) {
        api_fail_lookup(resp, rc, "trial", id);
    } else if (!not_running(&t, resp)) {
        /* its user_attrs first (a 413 changes nothing), then the outcome */
        hpo_error err = {{0}, {0}};
        /* a trial asked through another node: the tuner learns of it first */
        if (tun_study_trial(st->tuner, t.number, NULL, NULL) == HPO_ENOTFOUND) rc = api_study_sync(ctx, st);
        if (rc == 0) rc = api_trial_annotate(ctx, &t, attrs, NULL, &err);
        if (rc) {
            api_fail_rc(resp, rc, &err);
            goto unlock;
        }
        sto_outcome so = {.state = state, .value = value, .value_std = o.value_std, .value_n = o.value_n,
                          .error = o.error, .values_json = o.values_json, .metrics_json = o.metrics_json};
        rc = sto_trial_finish_outcome(ctx->db, id, &so, NULL);
        if (rc == HPO_ECONFLICT) { /* ended meanwhile (another tell, its lease): say how */
            sto_trial_clear(&t);
            rc = sto_trial_get(ctx->db, id, &t);
            if (rc == 0 && not_running(&t, resp)) goto unlock;
            if (rc == 0) rc = HPO_ECONFLICT;
        }
        if (rc == 0) {
            /* Storage keeps the last intermediate as a pruned trial's value. */
            if (state == STO_TRIAL_PRUNED && o.value_n == 0) value = t.last_value;
            rc = api_tuner_finish_outcome(st, t.number, &o);
        }
        if (rc) {
            api_fail_rc(resp, rc, NULL);
        } else {
            json_t *reply = json_pack("{s:I, s:I, s:s, s:o}", "trial_id", (json_int_t)id, "number",
                                      (json_int_t)t.number, "state", sto_trial_state_name(state), "value",
                                      api_json_real(value));
            json_t *vals = o.values_json ? json_loads(o.values_json, 0, NULL) : NULL;
            if (!vals && !isnan(value) && st->def.n_obj == 1) vals = json_pack("[o]", api_json_real(value));
            json_object_set_new(reply, "values", vals ? vals : json_null());
            api_reply_json(resp, 200, reply);
            /* the tell is stored: the study's end, if this was its last trial, is
             * its own change (a failure to store it is logged, and the next
             * moment that can end the study tries again) */
            ended = api_external_end(ctx, st, hpo_now()) > 0;
        }
    }
unlock:
    pthread_mutex_unlock(&st->lock);
    if (ended || attrs) api_events_wake_study(ctx, st->id);
    sto_trial_clear(&t);
    api_study_release(ctx, st);
out:
    api_outcome_clear(&o);
    json_decref(body);
    api_metrics_observe_op(ctx, API_OP_TELL, hpo_monotonic() - t0);
}

void api_h_trial_get(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_trial t;
    int rc = sto_trial_get(ctx->db, id, &t);
    if (rc) {
        api_fail_lookup(resp, rc, "trial", id);
        return;
    }
    api_reply_json(resp, 200, api_trial_json(&t, 1, ctx->db));
    sto_trial_clear(&t);
}
