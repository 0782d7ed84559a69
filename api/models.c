/* models.c - REST for the end of the workflow: refits, models, ensembles.
 *
 *   POST /api/v1/studies/{id}/refits     {"top_n": N} | {"trials": [ids]}, "epochs_factor": 1.2
 *   GET  /api/v1/studies/{id}/refits
 *   POST /api/v1/trials/{id}/model       the trial's own best-epoch weights as a model
 *   GET  /api/v1/studies/{id}/models     every model of the study (refits, trial models, ensembles)
 *   POST /api/v1/studies/{id}/ensembles  {"members": [model ids]} | {"top_n": N} | {"trials": [ids]},
 *                                        "method": mean|weighted|greedy
 * A study of several objectives has no "best": refits and ensembles take
 * chosen trials ("trials", e.g. members of its Pareto front); top_n there
 * is a 400 naming "trials" that lists the front.
 *   GET  /api/v1/studies/{id}/ensembles
 *   GET  /api/v1/models/{id}             GET /api/v1/models/{id}/weights (safetensors)
 *   POST /api/v1/models/{id}/predict     {"inputs": [[...], ...]}
 *
 * Creating answers at once (201) with queued models; the worker pool builds
 * them (job_model.c) with progress on the study's event stream. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "ensemble.h"
#include "jobs_internal.h"
#include "model.h"
#include "safetensors.h"
#include "weights.h"

#define MAX_TOP_N 64
#define MAX_PREDICT_ROWS 4096

static json_t *stored(const char *text) {
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    return j ? j : json_null();
}

static json_t *api_model_json(const sto_model *m) {
    json_t *j = json_pack("{s:I, s:I, s:s, s:s, s:o, s:o, s:o, s:o, s:f, s:o, s:o}", "id", (json_int_t)m->id,
                          "study_id", (json_int_t)m->study_id, "kind", sto_model_kind_name(m->kind), "state",
                          sto_model_state_name(m->state), "trial_id",
                          m->trial_id > 0 ? json_integer(m->trial_id) : json_null(), "how", stored(m->spec), "result",
                          stored(m->result), "error", m->error ? json_string(m->error) : json_null(), "created",
                          m->created, "started", m->started > 0 ? json_real(m->started) : json_null(), "finished",
                          m->finished > 0 ? json_real(m->finished) : json_null());
    if (m->path) {
        char url[96];
        snprintf(url, sizeof url, "/api/v1/models/%lld/weights", (long long)m->id);
        json_object_set_new(j, "weights_url", json_string(url));
    }
    return j;
}

/* A model job that sto_model_create refused: HPO_ESTALE is its study's
 * uploaded dataset, deleted since the study was loaded. */
static void fail_model_create(api_response *resp, int rc) {
    if (rc == HPO_ESTALE)
        api_fail(resp, 409, "conflict", "dataset",
                 "the study's uploaded dataset was deleted: its models can no longer be made");
    else
        api_fail_rc(resp, rc, NULL);
}

/* An embedded study with a reference, or an error response. */
static api_study *embedded_study(api_ctx *ctx, int64_t id, api_response *resp) {
    api_study *st = NULL;
    int rc = api_study_acquire(ctx, id, &st);
    if (rc) {
        api_fail_study_acquire(resp, rc, id);
        return NULL;
    }
    if (!st->def.embedded) {
        api_fail(resp, 409, "conflict", "id",
                 "study %lld is external: refits, models and ensembles need hpod to train (an embedded study)",
                 (long long)id);
        api_study_release(ctx, st);
        return NULL;
    }
    return st;
}

/* The chosen complete trials of a study: body "trials" (ids) or "top_n"
 * (best first; default def_top). A study of several objectives has no
 * best: without "trials" it is a 400 naming the field that lists the
 * front's members. */
static int chosen_trials(api_ctx *ctx, api_study *st, const json_t *body, int def_top, sto_trial **out, size_t *n,
                         api_response *resp) {
    const json_t *ids = json_object_get(body, "trials"), *top = json_object_get(body, "top_n");
    *out = NULL;
    *n = 0;
    if (ids && top) {
        api_fail(resp, 400, "invalid_argument", "trials", "give either trials or top_n, not both");
        return -1;
    }
    if (ids) {
        if (!json_is_array(ids) || json_array_size(ids) == 0 || json_array_size(ids) > MAX_TOP_N) {
            api_fail(resp, 400, "invalid_argument", "trials", "trials must be an array of 1 to %d trial ids", MAX_TOP_N);
            return -1;
        }
        sto_trial *list = hpo_xcalloc(json_array_size(ids), sizeof *list);
        size_t i;
        json_t *v;
        json_array_foreach(ids, i, v) {
            int rc = json_is_integer(v) ? sto_trial_get(ctx->db, json_integer_value(v), &list[i]) : HPO_EINVAL;
            if (rc == 0 && (list[i].study_id != st->id || list[i].state != STO_TRIAL_COMPLETE)) rc = HPO_ECONFLICT;
            if (rc) {
                sto_trial_list_free(list, i + (rc == HPO_ECONFLICT));
                api_fail(resp, rc == HPO_ECONFLICT ? 409 : 400, rc == HPO_ECONFLICT ? "conflict" : "invalid_argument",
                         "trials", "trials[%zu] is not a complete trial of study %lld", i, (long long)st->id);
                return -1;
            }
        }
        *out = list;
        *n = json_array_size(ids);
        return 0;
    }
    if (st->def.n_obj > 1) { /* no "best": the client chooses among the front */
        json_t *front = api_front_trial_ids(ctx, &st->def, st->id);
        char *list = json_dumps(front, JSON_COMPACT);
        api_fail(resp, 400, "invalid_argument", "trials",
                 "study %lld has %d objectives: its Pareto front has %zu members (trial ids %.400s); choose with "
                 "\"trials\": [trial ids] instead of top_n",
                 (long long)st->id, st->def.n_obj, json_array_size(front), list ? list : "[]");
        free(list);
        json_decref(front);
        return -1;
    }
    json_int_t k = def_top;
    if (top && (!json_is_integer(top) || (k = json_integer_value(top)) < 1 || k > MAX_TOP_N)) {
        api_fail(resp, 400, "invalid_argument", "top_n", "top_n must be an integer in 1..%d", MAX_TOP_N);
        return -1;
    }
    int rc = api_best_trials(ctx, &st->def, st->id, (size_t)k, out, n); /* with constraints: feasible ones */
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        return -1;
    }
    if (*n == 0) {
        api_fail(resp, 409, "conflict", "top_n", "study %lld has no complete%s trial yet", (long long)st->id,
                 st->def.n_cons > 0 ? " feasible" : "");
        return -1;
    }
    return 0;
}

static void reply_models(api_ctx *ctx, api_response *resp, int status, const char *key, const int64_t *ids, size_t n) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        sto_model m;
        if (sto_model_get(ctx->db, ids[i], &m) == 0) {
            json_array_append_new(arr, api_model_json(&m));
            sto_model_clear(&m);
        }
    }
    api_reply_json(resp, status, json_pack("{s:o}", key, arr));
}

void api_h_study_refits_create(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const char *keys[] = {"top_n", "trials", "epochs_factor"};
    json_t *body = req->body_len ? api_body_object(req, resp) : json_object();
    if (!body) return;
    api_study *st = NULL;
    sto_trial *trials = NULL;
    size_t n = 0;
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto done;
    const json_t *jf = json_object_get(body, "epochs_factor");
    double factor = jf ? json_number_value(jf) : 1.2;
    if (jf && (!json_is_number(jf) || !(factor > 0) || factor > 10)) {
        api_fail(resp, 400, "invalid_argument", "epochs_factor", "epochs_factor must be a number in (0, 10]");
        goto done;
    }
    if (!(st = embedded_study(ctx, id, resp))) goto done;
    if (chosen_trials(ctx, st, body, 1, &trials, &n, resp)) goto done;
    int64_t *ids = hpo_xcalloc(n, sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        /* best_epoch is the epoch of the best objective averaged over the
         * trial's executions; a trial without one trains its full budget */
        int64_t best = trials[i].best_epoch > 0 ? trials[i].best_epoch : st->def.emb.max_epochs;
        int64_t epochs = (int64_t)ceil(factor * (double)best - 1e-9);
        if (epochs < 1) epochs = 1;
        json_t *spec = json_pack("{s:I, s:f, s:I, s:I, s:s}", "epochs", (json_int_t)epochs, "epochs_factor", factor,
                                 "best_epoch", (json_int_t)best, "trial_number", (json_int_t)trials[i].number, "data",
                                 "train+validation");
        char *text = json_dumps(spec, JSON_COMPACT);
        json_decref(spec);
        int rc = sto_model_create(ctx->db, id, trials[i].id, STO_MODEL_REFIT, text, st->def.emb.dataset_id, &ids[i]);
        free(text);
        if (rc) {
            fail_model_create(resp, rc);
            free(ids);
            goto done;
        }
        api_event(ctx, id, trials[i].id, "model_queued",
                  json_pack("{s:I, s:s, s:I}", "model_id", (json_int_t)ids[i], "kind", "refit", "epochs",
                            (json_int_t)epochs));
    }
    api_jobs_wake(ctx);
    reply_models(ctx, resp, 201, "refits", ids, n);
    free(ids);
done:
    sto_trial_list_free(trials, n);
    if (st) api_study_release(ctx, st);
    json_decref(body);
}

static void list_kind(api_ctx *ctx, int64_t id, int kind, const char *key, api_response *resp) {
    sto_study s;
    int rc = sto_study_get(ctx->db, id, &s);
    if (rc) {
        api_fail_lookup(resp, rc, "study", id);
        return;
    }
    sto_study_clear(&s);
    sto_model *list = NULL;
    size_t n = 0;
    if ((rc = sto_model_list(ctx->db, id, kind, &list, &n))) {
        api_fail_rc(resp, rc, NULL);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, api_model_json(&list[i]));
    sto_model_list_free(list, n);
    api_reply_json(resp, 200, json_pack("{s:o}", key, arr));
}

void api_h_study_refits_list(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    list_kind(ctx, id, STO_MODEL_REFIT, "refits", resp);
}

void api_h_study_models_list(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    list_kind(ctx, id, -1, "models", resp);
}

void api_h_study_ensembles_list(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    list_kind(ctx, id, STO_MODEL_ENSEMBLE, "ensembles", resp);
}

void api_h_trial_model_create(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    if (api_body_empty(req, resp)) return;
    sto_trial t;
    int rc = sto_trial_get(ctx->db, id, &t);
    if (rc) {
        api_fail_lookup(resp, rc, "trial", id);
        return;
    }
    api_study *st = embedded_study(ctx, t.study_id, resp);
    if (st && t.state != STO_TRIAL_COMPLETE)
        api_fail(resp, 409, "conflict", "id", "trial %lld is %s: only a complete trial has a model", (long long)id,
                 sto_trial_state_name(t.state));
    if (st && t.state == STO_TRIAL_COMPLETE) {
        json_t *spec = json_pack("{s:I, s:I, s:s}", "trial_number", (json_int_t)t.number, "best_epoch",
                                 (json_int_t)t.best_epoch, "weights", "best epoch of the first execution");
        char *text = json_dumps(spec, JSON_COMPACT);
        json_decref(spec);
        int64_t mid;
        rc = sto_model_create(ctx->db, t.study_id, id, STO_MODEL_TRIAL, text, st->def.emb.dataset_id, &mid);
        free(text);
        if (rc) {
            fail_model_create(resp, rc);
        } else {
            api_event(ctx, t.study_id, id, "model_queued",
                      json_pack("{s:I, s:s}", "model_id", (json_int_t)mid, "kind", "trial"));
            api_jobs_wake(ctx);
            sto_model m;
            if (sto_model_get(ctx->db, mid, &m) == 0) {
                api_reply_json(resp, 201, api_model_json(&m));
                sto_model_clear(&m);
            }
        }
    }
    if (st) api_study_release(ctx, st);
    sto_trial_clear(&t);
}

/* The latest complete refit of a trial, else 0. */
static int64_t refit_of(api_ctx *ctx, int64_t study_id, int64_t trial_id) {
    sto_model *list = NULL;
    size_t n = 0;
    int64_t best = 0;
    if (sto_model_list(ctx->db, study_id, STO_MODEL_REFIT, &list, &n) == 0)
        for (size_t i = 0; i < n; i++)
            if (list[i].trial_id == trial_id && list[i].state == STO_MODEL_COMPLETE) best = list[i].id;
    sto_model_list_free(list, n);
    return best;
}

void api_h_study_ensembles_create(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const char *keys[] = {"members", "top_n", "trials", "method", "rounds"};
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    api_study *st = NULL;
    sto_trial *trials = NULL;
    size_t n = 0;
    json_t *members = json_array();
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto done;
    const char *method = json_string_value(json_object_get(body, "method"));
    if (json_object_get(body, "method") &&
        (!method || (strcmp(method, "mean") && strcmp(method, "weighted") && strcmp(method, "greedy")))) {
        api_fail(resp, 400, "invalid_argument", "method", "method must be \"mean\", \"weighted\" or \"greedy\"");
        goto done;
    }
    const json_t *jr = json_object_get(body, "rounds");
    if (jr && (!json_is_integer(jr) || json_integer_value(jr) < 1 || json_integer_value(jr) > 1000)) {
        api_fail(resp, 400, "invalid_argument", "rounds", "rounds must be an integer in 1..1000");
        goto done;
    }
    if (!(st = embedded_study(ctx, id, resp))) goto done;
    const json_t *jm = json_object_get(body, "members");
    if (jm && (json_object_get(body, "top_n") || json_object_get(body, "trials"))) {
        api_fail(resp, 400, "invalid_argument", "members", "give one of members, trials or top_n");
        goto done;
    }
    if (jm) {
        if (!json_is_array(jm) || json_array_size(jm) == 0 || json_array_size(jm) > MAX_TOP_N) {
            api_fail(resp, 400, "invalid_argument", "members", "members must be an array of 1 to %d model ids", MAX_TOP_N);
            goto done;
        }
        size_t i;
        json_t *v;
        json_array_foreach(jm, i, v) {
            sto_model m;
            int rc = json_is_integer(v) ? sto_model_get(ctx->db, json_integer_value(v), &m) : HPO_EINVAL;
            int ok = rc == 0 && m.study_id == id && m.kind != STO_MODEL_ENSEMBLE;
            if (rc == 0) sto_model_clear(&m);
            if (!ok) {
                api_fail(resp, 400, "invalid_argument", "members", "members[%zu] is not a model of study %lld", i,
                         (long long)id);
                goto done;
            }
            /* a member that is not built (yet, or failed) is skipped by the job, with its reason */
            json_array_append_new(members, json_pack("{s:I}", "model_id", json_integer_value(v)));
        }
    } else {
        json_t *sel = json_object();
        if (json_object_get(body, "trials")) json_object_set(sel, "trials", json_object_get(body, "trials"));
        if (json_object_get(body, "top_n")) json_object_set(sel, "top_n", json_object_get(body, "top_n"));
        int bad = chosen_trials(ctx, st, sel, 3, &trials, &n, resp);
        json_decref(sel);
        if (bad) goto done;
        for (size_t i = 0; i < n; i++) {
            int64_t refit = refit_of(ctx, id, trials[i].id);
            json_array_append_new(members, refit ? json_pack("{s:I}", "model_id", (json_int_t)refit)
                                                 : json_pack("{s:I}", "trial_id", (json_int_t)trials[i].id));
        }
    }
    json_t *spec = json_pack("{s:s, s:O, s:i}", "method", method ? method : "mean", "members", members, "rounds",
                             jr ? (int)json_integer_value(jr) : 25);
    char *text = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    int64_t mid;
    int rc = sto_model_create(ctx->db, id, 0, STO_MODEL_ENSEMBLE, text, st->def.emb.dataset_id, &mid);
    free(text);
    if (rc) {
        fail_model_create(resp, rc);
        goto done;
    }
    api_event(ctx, id, 0, "model_queued", json_pack("{s:I, s:s}", "model_id", (json_int_t)mid, "kind", "ensemble"));
    api_jobs_wake(ctx);
    sto_model m;
    if (sto_model_get(ctx->db, mid, &m) == 0) {
        api_reply_json(resp, 201, api_model_json(&m));
        sto_model_clear(&m);
    }
done:
    json_decref(members);
    sto_trial_list_free(trials, n);
    if (st) api_study_release(ctx, st);
    json_decref(body);
}

/* A model row, 404 if unknown. */
static int model_row(api_ctx *ctx, int64_t id, sto_model *m, api_response *resp) {
    int rc = sto_model_get(ctx->db, id, m);
    if (rc == 0) return 0;
    api_fail_lookup(resp, rc, "model", id);
    return -1;
}

void api_h_model_get(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_model m;
    if (model_row(ctx, id, &m, resp)) return;
    api_reply_json(resp, 200, api_model_json(&m));
    sto_model_clear(&m);
}

/* The weights file of model id (stored path rel) as the body: checked
 * first as a safetensors file whose header covers it exactly (a damaged
 * file is a 409 saying so, as predict answers), then sent from disk. */
static void send_weights(api_ctx *ctx, int64_t id, const char *rel, api_response *resp) {
    char path[API_PATH_MAX];
    hpo_error err = {{0}, {0}};
    eng_st_file *f = NULL;
    int rc = api_dir_file(path, ctx->opt.data_dir, rel) ? HPO_ENOTFOUND : eng_st_open(path, &f, &err);
    uint64_t len = 0;
    int fd = rc == 0 ? eng_st_file_dup(f, &len) : -1;
    int dup_errno = errno; /* before the close in eng_st_file_free */
    eng_st_file_free(f);
    if (fd >= 0) {
        resp->status = 200;
        resp->content_type = "application/octet-stream";
        resp->has_file = 1;
        resp->file_fd = fd;
        resp->file_len = len;
        snprintf(resp->filename, sizeof resp->filename, "model-%lld.safetensors", (long long)id);
    } else if (rc == HPO_ENOTFOUND) {
        api_fail(resp, 409, "conflict", "id", "model %lld: its weights file %s is missing", (long long)id, rel);
    } else if (rc == 0 || rc == HPO_EFS) {
        api_fail(resp, 500, "io_error", "", "model %lld: its weights file cannot be read: %s", (long long)id,
                 rc ? err.message : strerror(dup_errno));
    } else {
        api_fail(resp, 409, "conflict", "id", "model %lld: its weights file is damaged: %s", (long long)id,
                 err.message);
    }
}

void api_h_model_weights(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_model m;
    if (model_row(ctx, id, &m, resp)) return;
    if (m.kind == STO_MODEL_ENSEMBLE) {
        api_fail(resp, 409, "conflict", "id",
                 "model %lld is an ensemble: it has no weights of its own; download its members' weights",
                 (long long)id);
    } else if (m.state != STO_MODEL_COMPLETE || !m.path) {
        api_fail(resp, 409, "conflict", "id", "model %lld is %s: no weights yet", (long long)id,
                 sto_model_state_name(m.state));
    } else {
        send_weights(ctx, id, m.path, resp);
    }
    sto_model_clear(&m);
}

/* Reads "inputs" into x (rows of `size` floats, scaled as the model was
 * trained); 0 or fills resp. */
static int read_inputs(const json_t *body, size_t size, float scale, float **x, size_t *rows, api_response *resp) {
    const json_t *in = json_object_get(body, "inputs");
    size_t n = json_array_size(in);
    if (!json_is_array(in) || n == 0 || n > MAX_PREDICT_ROWS) {
        api_fail(resp, 400, "invalid_argument", "inputs", "inputs must be an array of 1 to %d rows", MAX_PREDICT_ROWS);
        return -1;
    }
    float *buf = hpo_xmalloc(n * size * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        const json_t *row = json_array_get(in, i);
        if (!json_is_array(row) || json_array_size(row) != size) {
            free(buf);
            api_fail(resp, 400, "invalid_argument", "inputs", "inputs[%zu] must be an array of %zu numbers", i, size);
            return -1;
        }
        for (size_t k = 0; k < size; k++) {
            const json_t *v = json_array_get(row, k);
            float f = json_is_number(v) ? (float)json_number_value(v) * scale : NAN;
            if (!isfinite(f)) { /* not a number, not finite, or beyond a float once scaled */
                free(buf);
                api_fail(resp, 400, "invalid_argument", "inputs",
                         "inputs[%zu][%zu] must be a finite number within the float range (scaled by %g as in training)",
                         i, k, (double)scale);
                return -1;
            }
            buf[i * size + k] = f;
        }
    }
    *x = buf;
    *rows = n;
    return 0;
}

void api_h_model_predict(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    sto_model m;
    api_study *st = NULL;
    eng_dataset *ds = NULL;
    float *x = NULL, *preds = NULL, *acc = NULL;
    json_t *members = NULL;
    hpo_error err = {{0}, {0}};
    memset(&m, 0, sizeof m);
    if (model_row(ctx, id, &m, resp)) goto done;
    if (m.state != STO_MODEL_COMPLETE) {
        api_fail(resp, 409, "conflict", "id", "model %lld is %s", (long long)id, sto_model_state_name(m.state));
        goto done;
    }
    if (!(st = embedded_study(ctx, m.study_id, resp))) goto done;
    int rc = api_dataset_open(ctx, st->def.emb.dataset, "train", &ds, &err);
    if (rc == HPO_EINVAL || rc == HPO_ENOTFOUND || rc == HPO_EFORMAT) {
        /* the study's dataset, not the request: deleted since, say */
        api_fail(resp, 409, "conflict", "id", "model %lld cannot predict: its study's dataset: %s", (long long)id,
                 err.message[0] ? err.message : hpo_strerror(rc));
        goto done;
    }
    if (rc) { /* no memory, a wait for a load over, ... */
        api_fail_rc(resp, rc, &err);
        goto done;
    }
    size_t rows;
    if (read_inputs(body, ds->sample_size, ds->x_scale, &x, &rows, resp)) goto done;
    /* a trained model is one member with weight 1; an ensemble its members */
    json_t *result = m.kind == STO_MODEL_ENSEMBLE ? json_loads(m.result ? m.result : "{}", 0, NULL) : NULL;
    members = result ? json_incref(json_object_get(result, "members")) : json_pack("[{s:I, s:f}]", "model_id",
                                                                                   (json_int_t)id, "weight", 1.0);
    json_decref(result);
    int K = 0;
    size_t i;
    json_t *mem;
    json_array_foreach(members, i, mem) {
        if (json_object_get(mem, "skipped")) continue;
        double w = json_number_value(json_object_get(mem, "weight"));
        eng_model *model = NULL;
        int64_t tid;
        if ((rc = api_member_model(ctx, st, mem, &model, &tid, &err))) {
            /* the request named the model only: what its weights lack is a
             * conflict on it, whatever field the member's error names */
            if (rc == HPO_ENOMEM)
                api_fail_rc(resp, rc, &err);
            else
                api_fail(resp, 409, "conflict", "id", "model %lld cannot predict: member %zu: %s", (long long)id, i,
                         err.message[0] ? err.message : hpo_strerror(rc));
            goto done;
        }
        if (!acc) {
            K = model->out_dim;
            acc = hpo_xcalloc(rows * (size_t)K, sizeof *acc);
            preds = hpo_xmalloc(rows * (size_t)K * sizeof *preds);
        }
        size_t in_size = model->in_size;
        rc = model->out_dim == K ? eng_predict_rows(model, x, rows, ds->sample_size, preds) : HPO_ESHAPE;
        eng_model_free(model);
        if (rc == HPO_ESHAPE && in_size != ds->sample_size) {
            /* the dataset of that name was replaced since (deleted, uploaded again) */
            api_fail(resp, 409, "conflict", "id",
                     "model %lld takes %zu input values per row, and the study's dataset now has %zu per "
                     "sample: it was replaced after the model was trained",
                     (long long)id, in_size, ds->sample_size);
            goto done;
        }
        if (rc) {
            api_fail_rc(resp, rc, NULL);
            goto done;
        }
        for (size_t k = 0; k < rows * (size_t)K; k++) acc[k] += (float)w * preds[k];
    }
    if (!acc) {
        api_fail(resp, 409, "conflict", "id", "model %lld has no usable member", (long long)id);
        goto done;
    }
    json_t *out = json_array(), *classes = json_array();
    for (size_t r = 0; r < rows; r++) {
        json_t *row = json_array();
        const float *p = acc + r * (size_t)K;
        int arg = 0, finite = 1;
        for (int k = 0; k < K; k++) {
            json_array_append_new(row, api_json_real(p[k])); /* null where not finite: every row has K values */
            finite &= isfinite(p[k]) != 0;
            if (p[k] > p[arg]) arg = k;
        }
        if (K == 1) arg = p[0] >= 0.5f; /* one sigmoid output: the probability of class 1 (as training reads it) */
        json_array_append_new(out, row);
        json_array_append_new(classes, finite ? json_integer(arg) : json_null());
    }
    json_t *reply = json_pack("{s:I, s:o}", "model_id", (json_int_t)id, "predictions", out);
    if (st->def.emb.n_classes > 0 && ds->class_names) { /* the dataset named its classes: their labels too */
        json_t *labels = json_array();
        json_t *k;
        json_array_foreach(classes, i, k) {
            json_int_t c = json_integer_value(k);
            json_array_append_new(labels, json_is_integer(k) && c < ds->n_classes ? api_json_string_lossy(ds->class_names[c])
                                                                                    : json_null());
        }
        json_object_set_new(reply, "labels", labels);
    }
    if (st->def.emb.n_classes > 0)
        json_object_set_new(reply, "classes", classes);
    else
        json_decref(classes);
    api_reply_json(resp, 200, reply);
done:
    free(x);
    free(preds);
    free(acc);
    json_decref(members);
    if (ds) eng_dataset_release(ds);
    if (st) api_study_release(ctx, st);
    sto_model_clear(&m);
    json_decref(body);
}
