/* studies.c - /api/v1/studies handlers: create (and get-or-create by name
 * with load_if_exists), list, get, delete, the trials of a study and its
 * best trials. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs_internal.h"
#include "rng.h"

/* What POST /studies takes beside the definition: user_attrs, note and
 * load_if_exists, taken out of def (checked; 400/413 naming the field). */
static int take_extras(json_t *def, api_study_extras *x, hpo_error *err) {
    memset(x, 0, sizeof *x);
    json_t *attrs = json_object_get(def, "user_attrs"), *note = json_object_get(def, "note");
    json_t *lie = json_object_get(def, "load_if_exists");
    int rc = 0;
    if (lie && !json_is_boolean(lie)) return hpo_fail(err, HPO_EINVAL, "load_if_exists", "load_if_exists must be true or false");
    x->load_if_exists = json_is_true(lie);
    if (x->load_if_exists && !json_object_get(def, "name"))
        return hpo_fail(err, HPO_EINVAL, "name",
                        "load_if_exists finds the study by its name: give one (without, every study would be one)");
    if (attrs && (rc = api_attrs_merge(NULL, attrs, &x->attrs, err))) return rc;
    if (note && (rc = api_note_check(note, &x->note_text, err))) return rc;
    x->note = json_incref(note);
    json_object_del(def, "user_attrs");
    json_object_del(def, "note");
    json_object_del(def, "load_if_exists");
    return 0;
}

void api_study_extras_clear(api_study_extras *x) {
    free(x->attrs);
    json_decref(x->note);
    memset(x, 0, sizeof *x);
}

/* load_if_exists found study `id`: 200 with it when the stored definition
 * is the posted one (def, normalised as a new study's would be; the seed
 * is compared only when posted, a warm start's snapshot of trials never,
 * keys written at their default as if absent),
 * else 409 naming the first field that differs. */
static void answer_existing(api_ctx *ctx, int64_t id, json_t *def, int seeded, api_response *resp) {
    sto_study s;
    int rc = sto_study_get(ctx->db, id, &s);
    if (rc) { /* deleted in between */
        api_fail_lookup(resp, rc, "study", id);
        return;
    }
    json_t *stored = json_loads(s.spec, 0, NULL);
    if (!seeded) {
        json_object_del(json_object_get(def, "tuner"), "seed");
        json_object_del(json_object_get(stored, "tuner"), "seed");
    }
    static const char *snapshot[] = {"trials", "trials_used", "trials_skipped"}; /* warm_start.c */
    for (size_t k = 0; k < sizeof snapshot / sizeof *snapshot; k++) {
        json_object_del(json_object_get(def, "warm_start"), snapshot[k]);
        json_object_del(json_object_get(stored, "warm_start"), snapshot[k]);
    }
    char path[256];
    int differ = api_json_first_diff(def, stored, path, sizeof path);
    if (differ) { /* perhaps only in keys written at their default (a parse per key: not when equal) */
        api_def_drop_defaults(def);
        api_def_drop_defaults(stored);
        differ = api_json_first_diff(def, stored, path, sizeof path);
    }
    if (differ)
        api_fail(resp, 409, "conflict", path,
                 "study %lld is named \"%.128s\" with another definition: %s differs (load_if_exists answers "
                 "only a study with the same definition)",
                 (long long)id, s.name, path[0] ? path : "the definition");
    else
        api_reply_json(resp, 200, api_study_json(ctx, &s, 1));
    json_decref(stored);
    sto_study_clear(&s);
}

int api_study_create(api_ctx *ctx, json_t *def, int hold, const api_study_extras *x, int64_t *id_out,
                     int *created_out, hpo_error *err) {
    static const api_study_extras none;
    if (!x) x = &none;
    if (created_out) *created_out = 0;
    api_study_def d;
    int rc = api_study_def_parse(ctx, def, &d, err);
    if (rc) return rc;
    if (x->needs_slot && !x->load_if_exists && d.embedded && !sto_shared(ctx->db) &&
        !api_have_slot_for(ctx, d.emb.device)) {
        const char *kind = d.emb.device == API_DEVICE_CUDA ? "cuda" : "cpu";
        api_study_def_clear(&d);
        return hpo_fail(err, HPO_ECONFLICT, "training.device",
                        "training.device is \"%s\" and this hpod has no %s slot (--devices): the study would "
                        "wait for one forever; start hpod with one, or ask for \"any\"", kind, kind);
    }
    /* Store the objective as it was understood (an embedded study's metric
     * and inferred direction), so every reader sees the same. */
    json_t *objective = json_object_get(def, "objective");
    if (!objective && !json_object_get(def, "objectives"))
        json_object_set_new(def, "objective", objective = json_object());
    if (objective) {
        json_object_set_new(objective, "direction", json_string(d.maximize ? "maximize" : "minimize"));
        if (d.metric) json_object_set_new(objective, "metric", json_string(d.metric));
    }
    if (d.embedded) api_embedded_show(def, &d.emb);
    /* A study without a seed gets one, stored in its definition and shown:
     * its suggestions (and an embedded study's trainings) can be replayed. */
    json_t *tuner = json_object_get(def, "tuner");
    if (!json_object_get(tuner, "seed")) {
        if (!json_is_object(tuner)) json_object_set_new(def, "tuner", tuner = json_object()); /* absent or null */
        d.tuner.seed = hpo_rng_entropy_seed();
        json_object_set_new(tuner, "seed", json_integer((json_int_t)d.tuner.seed));
    }
    /* pbt's mutable parameters as decided at creation, stored and shown */
    if (d.tuner.algorithm == TUN_PBT && !d.tuner.pbt_mutable_given) {
        json_t *names = json_array();
        for (int i = 0; i < d.space->n && i < 64; i++)
            if (d.tuner.pbt_mutable >> i & 1) json_array_append_new(names, json_string(d.space->params[i].name));
        json_object_set_new(tuner, "mutable", names);
    }
    /* the other studies' trials a warm start feeds the tuner, as they are now */
    rc = api_warm_start_snapshot(ctx, def, d.space, err);
    int embedded = d.embedded, created = 0;
    double max_seconds = d.max_seconds;
    char *spec = rc ? NULL : json_dumps(def, JSON_COMPACT);
    int64_t study_id = 0;
    /* the study and its first event ({"id": N}) in one transaction; with
     * load_if_exists the lookup by name too */
    sto_event_in created_ev = {"study_created", NULL};
    sto_study_new in = {.name = d.name, .spec = spec, .user_attrs = x->attrs, .note = x->note_text,
                        .load_if_exists = x->load_if_exists, .state = hold ? STO_STUDY_PAUSED : STO_STUDY_RUNNING,
                        .dataset_id = d.embedded ? d.emb.dataset_id : 0, .on_insert = x->on_insert,
                        .on_insert_arg = x->on_insert_arg};
    if (rc == 0) rc = spec ? sto_study_create_with(ctx->db, &in, &created_ev, &study_id, &created) : HPO_ENOMEM;
    if (rc == 0 && created && d.embedded && !hold) api_queue_set(ctx, study_id, STO_STUDY_RUNNING); /* a new study runs */
    free(spec);
    api_study_def_clear(&d);
    if (rc == HPO_ESTALE) /* sto_study_new.dataset_id: deleted by another request or node meanwhile */
        return hpo_fail(err, HPO_EINVAL, "dataset", "the dataset was deleted while the study was created: "
                                                    "nothing was stored; upload it again");
    if (rc == HPO_ENOSPACE)
        return hpo_fail(err, rc, "", "the data disk is full: the study was not created (nothing was stored); "
                                     "free space and retry");
    if (rc) return rc;
    *id_out = study_id;
    if (created_out) *created_out = created;
    if (!created) return 0; /* load_if_exists found it */
    api_events_wake(ctx);
    api_jobs_wake(ctx);
    /* an external study's max_seconds: its deadline (checked again when due) */
    if (!embedded && max_seconds > 0) {
        sto_study s;
        int got = sto_study_get(ctx->db, study_id, &s);
        api_deadline_add(ctx, study_id, (got == 0 ? s.created : hpo_now()) + max_seconds);
        if (got == 0) sto_study_clear(&s);
    }
    return 0;
}

void api_reply_study(api_ctx *ctx, int status, int64_t id, api_response *resp) {
    sto_study s;
    if (sto_study_get(ctx->db, id, &s) == 0) {
        api_reply_json(resp, status, api_study_json(ctx, &s, 0));
        sto_study_clear(&s);
    } else {
        api_reply_json(resp, status, json_pack("{s:I}", "id", (json_int_t)id));
    }
}

void api_h_study_create(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    json_t *def = api_body_object(req, resp);
    if (!def) return;
    hpo_error err = {{0}, {0}};
    api_study_extras x;
    int64_t study_id = 0;
    int created = 0;
    int seeded = json_object_get(json_object_get(def, "tuner"), "seed") != NULL;
    int rc = take_extras(def, &x, &err);
    x.needs_slot = 1;
    if (rc == 0) rc = api_study_create(ctx, def, 0, &x, &study_id, &created, &err);
    api_study_extras_clear(&x);
    if (rc)
        api_fail_rc(resp, rc, &err);
    else if (!created)
        answer_existing(ctx, study_id, def, seeded, resp);
    else
        api_reply_study(ctx, 201, study_id, resp);
    json_decref(def);
}

/* Newest first; ?name= keeps the studies of that name, ?limit= and
 * ?offset= a page of them (default: all, from the first). Each study
 * listed costs its counts and best trial (three reads): 2,000 of them took
 * 0.36 s, so a page is what a client of many studies asks for. */
void api_h_study_list(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    const char *name = req->query ? req->query(req->query_arg, "name") : NULL;
    int64_t limit = 0, offset = 0;
    if (api_query_int(req, resp, "limit", 0, 1, 100000, &limit) ||
        api_query_int(req, resp, "offset", 0, 0, INT64_C(1) << 40, &offset))
        return;
    sto_study *list = NULL;
    size_t n = 0;
    int rc = sto_study_list(ctx->db, &list, &n);
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        return;
    }
    json_t *arr = json_array();
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (name && strcmp(list[i].name, name) != 0) continue;
        if (total++ < offset || (limit && (int64_t)json_array_size(arr) == limit)) continue;
        json_array_append_new(arr, api_study_json(ctx, &list[i], 0));
    }
    sto_study_list_free(list, n);
    api_reply_json(resp, 200, json_pack("{s:o, s:I, s:I}", "studies", arr, "total", (json_int_t)total, "offset",
                                        (json_int_t)offset));
}

void api_h_study_get(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_study s;
    int rc = sto_study_get(ctx->db, id, &s);
    if (rc) {
        api_fail_lookup(resp, rc, "study", id);
        return;
    }
    api_reply_json(resp, 200, api_study_json(ctx, &s, 1));
    sto_study_clear(&s);
}

/* DELETE answers at once; it does not wait for the study's running jobs (an
 * epoch can take minutes). What makes that safe: the rows go in one
 * transaction, and ids are never reused (storage.h), so every write a
 * worker of the study still attempts (epoch, report, finish, event, model)
 * names a row that no longer exists and stores nothing, anywhere; the
 * scheduler, woken here, raises those jobs' stop flags (a study that is
 * gone asks API_STOP_CANCEL) and they end at their next epoch, removing the
 * files they wrote meanwhile. A later call naming the study or one of its
 * trials gets 404. */
void api_h_study_delete(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    /* Hold the study's lock while deleting, so no ask/tell of it is half-way. */
    api_study *st = NULL;
    sto_trial *trials = NULL;
    sto_model *models = NULL;
    size_t n_trials = 0, n_models = 0;
    sto_trial_filter all = {.state = -1, .order = STO_ORDER_NUMBER};
    sto_trial_list(ctx->db, id, &all, &trials, &n_trials);
    sto_model_list(ctx->db, id, -1, &models, &n_models);
    int rc = api_study_acquire(ctx, id, &st);
    if (rc == 0) pthread_mutex_lock(&st->lock);
    if (rc == 0 || rc != HPO_ENOTFOUND) rc = sto_study_delete(ctx->db, id);
    if (rc == 0) api_queue_remove(ctx, id);
    if (st) {
        pthread_mutex_unlock(&st->lock);
        api_study_release(ctx, st);
    }
    api_study_forget(ctx, id);
    if (rc) {
        sto_trial_list_free(trials, n_trials);
        sto_model_list_free(models, n_models);
        api_fail_lookup(resp, rc, "study", id);
        return;
    }
    api_jobs_wake(ctx);   /* stops the study's running jobs */
    api_events_wake(ctx); /* its event streams end now, not at their next wait's end */
    /* the files of its trials and models go with it */
    const char *root = ctx->opt.data_dir;
    char path[API_PATH_MAX];
    for (size_t i = 0; i < n_trials; i++)
        if (api_dir_trial(path, root, trials[i].id) == 0) api_dir_remove(path);
    if (api_dir_study(path, root, id) == 0) api_dir_remove(path); /* its TensorBoard logdir */
    for (size_t i = 0; i < n_models; i++) {
        if (api_dir_model_checkpoint(path, root, models[i].id) == 0) api_dir_remove(path);
        if (models[i].path && api_dir_file(path, root, models[i].path) == 0) api_dir_unlink(path);
    }
    sto_trial_list_free(trials, n_trials);
    sto_model_list_free(models, n_models);
    api_reply_text(resp, 204, "application/json", "", 0);
}

/* 404 for a study id that does not exist; 0 if it exists. */
static int study_must_exist(api_ctx *ctx, int64_t id, sto_study *s, api_response *resp) {
    int rc = sto_study_get(ctx->db, id, s);
    if (rc == 0) return 0;
    api_fail_lookup(resp, rc, "study", id);
    return -1;
}

static int study_maximizes(const sto_study *s) {
    json_t *spec = json_loads(s->spec, 0, NULL);
    int maximize = api_spec_maximizes(spec);
    json_decref(spec);
    return maximize;
}

void api_h_study_trials(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_study s;
    if (study_must_exist(ctx, id, &s, resp)) return;
    sto_trial_filter f = {.state = -1, .order = STO_ORDER_NUMBER};
    int64_t limit, offset;
    const char *state = req->query ? req->query(req->query_arg, "state") : NULL;
    const char *order = req->query ? req->query(req->query_arg, "order") : NULL;
    const char *desc = req->query ? req->query(req->query_arg, "desc") : NULL;
    if (state && (f.state = sto_trial_state_parse(state)) < 0) {
        api_fail(resp, 400, "invalid_argument", "state",
                 "state must be one of running, complete, pruned, failed, cancelled, queued");
        goto done;
    }
    if (order && strcmp(order, "number") == 0)
        f.order = STO_ORDER_NUMBER;
    else if (order && strcmp(order, "value") == 0)
        f.order = STO_ORDER_VALUE;
    else if (order) {
        api_fail(resp, 400, "invalid_argument", "order", "order must be \"number\" or \"value\"");
        goto done;
    }
    if (desc && strcmp(desc, "true") && strcmp(desc, "false") && strcmp(desc, "1") && strcmp(desc, "0")) {
        api_fail(resp, 400, "invalid_argument", "desc", "desc must be true or false");
        goto done;
    }
    f.descending = desc && (strcmp(desc, "true") == 0 || strcmp(desc, "1") == 0);
    if (api_query_int(req, resp, "limit", 100, 1, 100000, &limit)) goto done;
    if (api_query_int(req, resp, "offset", 0, 0, INT64_C(1) << 40, &offset)) goto done;
    f.limit = limit;
    f.offset = offset;
    if (api_heavy_acquire(ctx, limit, resp)) goto done; /* a page of thousands is held whole while made */
    sto_trial *trials = NULL;
    size_t n = 0;
    int64_t counts[STO_TRIAL_N_STATES] = {0};
    int rc = sto_trial_list(ctx->db, id, &f, &trials, &n);
    if (rc == 0) rc = sto_trial_counts(ctx->db, id, counts);
    if (rc) {
        sto_trial_list_free(trials, n);
        api_fail_rc(resp, rc, NULL);
        api_heavy_release(ctx, limit);
        goto done;
    }
    int64_t total = 0;
    for (int i = 0; i < STO_TRIAL_N_STATES; i++)
        if (f.state < 0 || f.state == i) total += counts[i];
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, api_trial_json(&trials[i], 0, NULL));
    sto_trial_list_free(trials, n);
    api_reply_json(resp, 200, json_pack("{s:o, s:I, s:I, s:I}", "trials", arr, "total",
                                        (json_int_t)total, "limit", (json_int_t)limit, "offset",
                                        (json_int_t)offset));
    api_heavy_release(ctx, limit);
done:
    sto_study_clear(&s);
}

void api_h_study_best(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_study s;
    if (study_must_exist(ctx, id, &s, resp)) return;
    int64_t top_n;
    if (api_query_int(req, resp, "top_n", 1, 1, 1000, &top_n)) goto done;
    json_t *spec = json_loads(s.spec, 0, NULL);
    int multi = json_object_get(spec, "objectives") || json_object_get(spec, "constraints");
    json_decref(spec);
    if (multi) { /* the Pareto front (front.c) */
        api_reply_front(ctx, id, resp);
        goto done;
    }
    int maximize = study_maximizes(&s);
    sto_trial_filter f = {.state = STO_TRIAL_COMPLETE, .order = STO_ORDER_VALUE,
                          .descending = maximize, .limit = top_n};
    sto_trial *trials = NULL;
    size_t n = 0;
    int rc = sto_trial_list(ctx->db, id, &f, &trials, &n);
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        goto done;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *params = json_loads(trials[i].params, 0, NULL);
        json_array_append_new(
            arr, json_pack("{s:I, s:I, s:o, s:o, s:o, s:i}", "trial_id", (json_int_t)trials[i].id,
                           "number", (json_int_t)trials[i].number, "params",
                           params ? params : json_null(), "value", api_json_real(trials[i].value),
                           "value_std", api_json_real(trials[i].value_std), "value_n",
                           trials[i].value_n));
    }
    /* Is #1 really better than #2? Welch's t-test over their executions. */
    double p = NAN;
    if (n >= 2)
        p = tun_welch_p(trials[0].value, trials[0].value_std, trials[0].value_n, trials[1].value,
                        trials[1].value_std, trials[1].value_n);
    sto_trial_list_free(trials, n);
    api_reply_json(resp, 200, json_pack("{s:o, s:s, s:o}", "trials", arr, "direction",
                                        maximize ? "maximize" : "minimize", "p_value_top2",
                                        api_json_real(p)));
done:
    sto_study_clear(&s);
}
