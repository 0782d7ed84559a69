/* trials_in.c - trials a client brings rather than the tuner (Optuna's
 * enqueue_trial and add_trial): POST /studies/{id}/enqueue stores a queued
 * trial with the parameters the client fixes (checked against the space;
 * the rest are drawn when it is handed out, enqueued.c), POST
 * /studies/{id}/trials stores a finished trial, which the tuner learns from
 * as from a told one. Both hold a number: they count toward max_trials. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs_internal.h"

#define MAX_INTERMEDIATES 100000

/* The study of a request with its lock held, open to new trials: not
 * complete or cancelled, and (full_budget) max_trials not reached; else a
 * 404/409 in resp and NULL. */
static api_study *open_study(api_ctx *ctx, int64_t id, int full_budget, api_response *resp) {
    api_study *st = NULL;
    int rc = api_study_acquire(ctx, id, &st);
    if (rc) {
        api_fail_study_acquire(resp, rc, id);
        return NULL;
    }
    pthread_mutex_lock(&st->lock);
    sto_study s;
    if ((rc = sto_study_get(ctx->db, id, &s))) {
        api_fail_lookup(resp, rc, "study", id);
        goto fail;
    }
    sto_study_state state = s.state;
    sto_study_clear(&s);
    if (state == STO_STUDY_COMPLETE || state == STO_STUDY_CANCELLED) {
        api_fail(resp, 409, "conflict", "state", "study %lld is %s: it takes no new trial", (long long)id,
                 sto_study_state_name(state));
        goto fail;
    }
    const char *why = full_budget ? api_budget_spent(st, hpo_now(), 0)
                      : st->def.max_trials > 0 && st->next_number >= st->def.max_trials ? "tuner.max_trials"
                                                                                         : NULL;
    if (why) {
        api_fail(resp, 409, "exhausted", why, "the study's budget is spent (%s): it takes no new trial", why);
        goto fail;
    }
    return st;
fail:
    pthread_mutex_unlock(&st->lock);
    api_study_release(ctx, st);
    return NULL;
}

static void close_study(api_ctx *ctx, api_study *st) {
    pthread_mutex_unlock(&st->lock);
    api_study_release(ctx, st);
}

/* 201 with the stored trial (and its intermediate values). */
static void reply_trial(api_ctx *ctx, int64_t trial_id, api_response *resp) {
    sto_trial t;
    int rc = sto_trial_get(ctx->db, trial_id, &t);
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        return;
    }
    api_reply_json(resp, 201, api_trial_json(&t, 1, ctx->db));
    sto_trial_clear(&t);
}

/* skip_if_exists (Optuna's): the id of a trial of the study, in any state,
 * whose stored params are exactly params (the same names and values), else
 * 0. A started trial holds every active parameter, so a partial enqueue
 * finds the enqueued trials waiting with it, not those that ran. */
static int64_t same_params(api_ctx *ctx, int64_t study_id, const json_t *params, int *rc) {
    sto_trial *t = NULL;
    size_t n = 0;
    int64_t found = 0;
    if ((*rc = sto_trial_outcomes(ctx->db, study_id, -1, &t, &n))) return 0;
    for (size_t i = 0; i < n && !found; i++) {
        json_t *p = json_loads(t[i].params, 0, NULL);
        if (json_equal(p, (json_t *)params)) found = t[i].id;
        json_decref(p);
    }
    sto_trial_list_free(t, n);
    return found;
}

void api_h_study_enqueue(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const char *keys[] = {"params", "user_attrs", "skip_if_exists"};
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto out;
    json_t *given = json_object_get(body, "params");
    const json_t *attrs = json_object_get(body, "user_attrs"), *skip = json_object_get(body, "skip_if_exists");
    hpo_error err = {{0}, {0}};
    if (!json_is_object(given)) {
        api_fail(resp, 400, "invalid_argument", "params",
                 "params must be an object of parameter values (the ones to fix; the tuner draws the rest)");
        goto out;
    }
    if (skip && !json_is_boolean(skip)) {
        api_fail(resp, 400, "invalid_argument", "skip_if_exists", "skip_if_exists must be true or false");
        goto out;
    }
    if (attrs && api_attrs_check(attrs, &err)) {
        api_fail_rc(resp, HPO_EINVAL, &err);
        goto out;
    }
    api_study *st = open_study(ctx, id, 1, resp);
    if (!st) goto out;
    double *fixed = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *fixed);
    int64_t trial_id = 0, number = 0, existing = 0;
    int rc = tun_space_from_json_partial(st->def.space, given, fixed, &err);
    if (rc == 0 && st->def.tuner.algorithm == TUN_PBT) /* its members are sampled or bred (api/pbt.c) */
        rc = hpo_fail(&err, HPO_EINVAL, "tuner.algorithm", "a pbt study takes no enqueued trials");
    if (rc) {
        api_fail_rc(resp, rc, &err);
    } else {
        json_t *params = tun_space_to_json(st->def.space, fixed); /* as the space writes them */
        char *text = json_dumps(params, JSON_COMPACT);
        sto_event_in ev = {"trial_enqueued", NULL};
        if (json_is_true(skip)) existing = same_params(ctx, id, params, &rc);
        if (rc == 0 && !existing)
            rc = text ? sto_trial_enqueue_ev(ctx->db, id, text, &ev, &trial_id, &number) : HPO_ENOMEM;
        free(text);
        json_decref(params);
        if (rc)
            api_fail_rc(resp, rc, NULL);
        else if (number + 1 > st->next_number)
            st->next_number = number + 1;
    }
    sto_trial t;
    if (rc == 0 && attrs && !existing && (rc = sto_trial_get(ctx->db, trial_id, &t)) == 0) {
        rc = api_trial_annotate(ctx, &t, attrs, NULL, &err); /* it waits: nothing else writes it yet */
        sto_trial_clear(&t);
        if (rc) api_fail_rc(resp, rc, &err);
    }
    int embedded = st->def.embedded;
    free(fixed);
    close_study(ctx, st);
    if (rc) goto out;
    if (existing) { /* Optuna's skip: nothing enqueued; 200 with the trial that has them */
        reply_trial(ctx, existing, resp);
        if (resp->status == 201) resp->status = 200;
        goto out;
    }
    api_events_wake_study(ctx, id);
    if (embedded) api_jobs_wake(ctx);
    reply_trial(ctx, trial_id, resp);
out:
    json_decref(body);
}

int api_trial_add(api_ctx *ctx, api_study *st, const sto_trial_in *in, const double *x, int64_t *id_out,
                  int64_t *number_out) {
    sto_event_in ev = {"trial_added", NULL};
    int64_t id = 0, number = 0;
    int rc = sto_trial_add_ev(ctx->db, st->id, in, &ev, &id, &number);
    if (rc) return rc;
    if (number + 1 > st->next_number) st->next_number = number + 1;
    st->pbt_members++; /* no lineage: a member as a reload counts it (study_cache.c; a pbt import) */
    /* the tuner learns of it as of a told trial: running, its reports, its end
     * (with the value storage kept: a pruned trial's last intermediate) */
    sto_trial t;
    if ((rc = sto_trial_get(ctx->db, id, &t)) == 0) {
        rc = tun_study_add(st->tuner, number, x, TUN_TRIAL_RUNNING, NAN);
        for (size_t i = 0; rc == 0 && i < in->n_steps; i++) {
            if (!in->step_flags) { /* lateness from the order; no answer */
                rc = tun_study_report(st->tuner, number, in->steps[i], in->step_values[i], NULL);
                continue;
            }
            double vec[TUN_MAX_OBJECTIVES]; /* as a reload replays the stored report */
            api_curve_vector(&st->def, in->step_curves ? in->step_curves[i] : NULL, in->step_values[i], vec);
            rc = tun_study_replay_report(st->tuner, number, in->steps[i], vec, in->step_flags[i] & STO_STEP_LATE,
                                         in->step_flags[i] & STO_STEP_PRUNED, in->step_rungs ? in->step_rungs[i] : -1);
        }
        if (rc == 0) rc = api_tuner_finish(st, &t);
        sto_trial_clear(&t);
    }
    if (rc) HPO_WARN("study %lld: the tuner refused added trial %lld: %s", (long long)st->id, (long long)number,
                     hpo_strerror(rc));
    if (id_out) *id_out = id;
    if (number_out) *number_out = number;
    return 0; /* stored: the tuner learns of it again at the next load */
}

int api_step_key(const char *key, int64_t *step) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(key, &end, 10);
    /* written as hpod writes it: "07" would be a second value for step 7 */
    if (!*key || *end || errno || v < 0 || key[0] < '0' || key[0] > '9' || (key[0] == '0' && key[1])) return 0;
    *step = v;
    return 1;
}

int api_parse_intermediates(const json_t *obj, const char *field, int64_t **steps, double **values, size_t *n,
                            hpo_error *err) {
    *steps = NULL;
    *values = NULL;
    *n = 0;
    if (!obj || json_is_null(obj)) return 0;
    if (!json_is_object(obj) || json_object_size(obj) > MAX_INTERMEDIATES)
        return hpo_fail(err, HPO_EINVAL, field,
                        "%s must be an object {\"<step>\": value, ...} of at most %d values", field,
                        MAX_INTERMEDIATES);
    size_t cap = json_object_size(obj) + 1, k = 0;
    int64_t *s = hpo_xmalloc(cap * sizeof *s);
    double *v = hpo_xmalloc(cap * sizeof *v);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        int64_t step;
        if (!api_step_key(key, &step)) {
            free(s);
            free(v);
            return hpo_fail(err, HPO_EINVAL, field, "%s: the step \"%.40s\" is not an integer >= 0 (digits, no leading zero)",
                            field, key);
        }
        if (!json_is_number(val) && !json_is_null(val)) {
            free(s);
            free(v);
            return hpo_fail(err, HPO_EINVAL, field, "%s[\"%lld\"] must be a number", field, (long long)step);
        }
        s[k] = step;
        v[k++] = json_is_null(val) ? NAN : json_number_value(val);
    }
    *steps = s;
    *values = v;
    *n = k;
    return 0;
}

/* The first second of the year 10000: export writes four-digit years. */
#define TIME_END 253402300800.0

/* Whether tm, as written, is a real date and time (timegm normalises
 * 2024-13-45 into 2025). */
static int real_time(const struct tm *in, time_t t) {
    struct tm back;
    return gmtime_r(&t, &back) && back.tm_year == in->tm_year && back.tm_mon == in->tm_mon &&
           back.tm_mday == in->tm_mday && back.tm_hour == in->tm_hour && back.tm_min == in->tm_min;
}

/* api_internal.h */
int api_parse_time(const json_t *j, const char *field, double *out, hpo_error *err) {
    *out = 0;
    if (!j || json_is_null(j)) return 0;
    if (json_is_number(j)) {
        *out = json_number_value(j);
        if (*out >= 0 && *out < TIME_END) return 0;
    } else if (json_is_string(j)) {
        const char *s = json_string_value(j);
        struct tm tm = {0};
        double sec = 0;
        int used = 0;
        if (sscanf(s, "%4d-%2d-%2d%*1[T ]%2d:%2d:%lf%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                   &tm.tm_min, &sec, &used) == 6 && sec >= 0 && sec < 61) {
            const char *z = s + used;
            int oh = 0, om = 0, sign = 0;
            if (*z == '+' || *z == '-') {
                sign = *z == '-' ? -1 : 1;
                if (sscanf(z + 1, "%2d:%2d", &oh, &om) != 2) sign = 2;
                z = "";
            } else if (*z == 'Z') {
                z++;
            }
            if (!*z && sign != 2) {
                tm.tm_year -= 1900;
                tm.tm_mon -= 1;
                struct tm written = tm; /* timegm normalises tm: 2024-13-45 would pass as 2025 */
                time_t t = timegm(&tm);
                *out = (double)t + sec - sign * (oh * 3600.0 + om * 60.0);
                if (t != (time_t)-1 && real_time(&written, t) && oh < 24 && om < 60 && *out >= 0 && *out < TIME_END)
                    return 0;
            }
        }
    }
    *out = 0;
    return hpo_fail(err, HPO_EINVAL, field,
                    "%s must be an ISO 8601 time from 1970 to 9999 (or seconds since the epoch, or null)", field);
}

void api_h_study_add_trial(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const char *keys[] = {"params", "state", "value", "values", "repeats", "metrics", "error",
                                 "intermediate_values", "user_attrs", "note", "datetime_start", "datetime_complete"};
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    int64_t *steps = NULL;
    double *values = NULL;
    size_t n_steps = 0;
    hpo_error err = {{0}, {0}};
    sto_trial_in in = {0};
    api_outcome o = {0};
    char *attrs = NULL; /* user_attrs, checked */
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto out;
    int rc = api_parse_intermediates(json_object_get(body, "intermediate_values"), "intermediate_values", &steps,
                                     &values, &n_steps, &err);
    if (rc) {
        api_fail_rc(resp, rc, &err);
        goto out;
    }
    in.steps = steps;
    in.step_values = values;
    in.n_steps = n_steps;
    const json_t *jattrs = json_object_get(body, "user_attrs"), *jnote = json_object_get(body, "note");
    if ((jattrs && (rc = api_attrs_merge(NULL, jattrs, &attrs, &err))) ||
        (jnote && (rc = api_note_check(jnote, &in.note, &err)))) {
        api_fail_rc(resp, rc, &err);
        goto out;
    }
    in.user_attrs = attrs;
    /* Optuna's add_trial keeps a FrozenTrial's times (absent: now) */
    if ((rc = api_parse_time(json_object_get(body, "datetime_start"), "datetime_start", &in.started, &err)) ||
        (rc = api_parse_time(json_object_get(body, "datetime_complete"), "datetime_complete", &in.finished, &err)) ||
        (in.started > 0 && in.finished > 0 && in.finished < in.started &&
         (rc = hpo_fail(&err, HPO_EINVAL, "datetime_complete", "datetime_complete is before datetime_start")))) {
        api_fail_rc(resp, rc, &err);
        goto out;
    }
    api_study *st = open_study(ctx, id, 0, resp);
    if (!st) goto out;
    if ((rc = api_parse_outcome(&st->def, body, &o, &err))) {
        api_fail_rc(resp, rc, &err);
        close_study(ctx, st);
        goto out;
    }
    in.state = o.state;
    in.value = o.value;
    in.value_std = o.value_std;
    in.value_n = o.value_n;
    in.error = o.error;
    in.values_json = o.values_json;
    in.metrics_json = o.metrics_json;
    double *x = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *x);
    json_t *given = json_object_get(body, "params");
    int64_t trial_id = 0;
    if (!given)
        rc = hpo_fail(&err, HPO_EINVAL, "params", "params is required: the value of every active parameter");
    else if (st->def.tuner.algorithm == TUN_PBT) /* a member has weights to copy (api/pbt.c): an added one none */
        rc = hpo_fail(&err, HPO_EINVAL, "tuner.algorithm", "a pbt study takes no added trials");
    else
        rc = tun_space_from_json(st->def.space, given, x, &err);
    if (rc) {
        api_fail_rc(resp, rc, &err);
    } else {
        json_t *params = tun_space_to_json(st->def.space, x);
        char *text = json_dumps(params, JSON_COMPACT);
        in.params = text;
        rc = text ? api_trial_add(ctx, st, &in, x, &trial_id, NULL) : HPO_ENOMEM;
        free(text);
        json_decref(params);
        if (rc)
            api_fail_rc(resp, rc, NULL);
        else /* an external study whose budget this spent ends (jobs_internal.h) */
            api_external_end(ctx, st, hpo_now());
    }
    int embedded = st->def.embedded;
    free(x);
    close_study(ctx, st);
    if (rc) goto out;
    api_events_wake_study(ctx, id); /* trial_added, and study_complete if it ended */
    if (embedded) api_jobs_wake(ctx);
    reply_trial(ctx, trial_id, resp);
out:
    api_outcome_clear(&o);
    free(steps);
    free(values);
    free(attrs);
    json_decref(body);
}
