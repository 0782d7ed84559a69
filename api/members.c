/* members.c - trained weights a model job or a predict request uses: a
 * trial's search-phase model (its first execution's best-epoch
 * checkpoint), or a finished model's exported weights (jobs_internal.h). */
#include <stdio.h>
#include <unistd.h>

#include "jobs_internal.h"
#include "model.h"
#include "weights.h"

int api_trial_template(api_ctx *ctx, const api_study *st, int64_t trial_id, sto_trial *t, json_t **params,
                          json_t **model, hpo_error *err) {
    int rc = sto_trial_get(ctx->db, trial_id, t);
    if (rc) return hpo_fail(err, rc, "trial_id", "trial %lld does not exist", (long long)trial_id);
    *params = json_loads(t->params, 0, NULL);
    if (!*params) {
        sto_trial_clear(t);
        return hpo_fail(err, HPO_EINTERNAL, "trial_id", "stored params are unreadable");
    }
    rc = api_model_expand(st->def.emb.model, *params, st->def.space, model, err);
    if (rc) {
        json_decref(*params);
        sto_trial_clear(t);
    }
    return rc;
}

int api_trial_model(api_ctx *ctx, const api_study *st, int64_t trial_id, eng_model **out, hpo_error *err) {
    sto_trial t;
    json_t *params = NULL, *model = NULL;
    int rc = api_trial_template(ctx, st, trial_id, &t, &params, &model, err);
    if (rc) return rc;
    const api_embedded *emb = &st->def.emb;
    eng_model *m = NULL;
    char path[API_PATH_MAX];
    if (api_dir_trial_file(path, ctx->opt.data_dir, trial_id, "exec-0.safetensors")) {
        rc = hpo_fail(err, HPO_EINVAL, "trial_id", "the checkpoint path is too long");
    } else if (t.state != STO_TRIAL_COMPLETE) {
        rc = hpo_fail(err, HPO_ECONFLICT, "trial_id", "trial %lld is %s, not complete", (long long)trial_id,
                      sto_trial_state_name(t.state));
    } else if (access(path, R_OK) != 0) {
        rc = hpo_fail(err, HPO_ENOTFOUND, "trial_id",
                      "trial %lld's checkpoint was removed (only the best trials of a study keep theirs)",
                      (long long)trial_id);
    } else {
        rc = eng_model_new(model, params, emb->in_rank, emb->in_shape, emb->n_classes, 1, &m, err);
        if (rc == 0) rc = eng_model_from_checkpoint(m, path, 1, err);
    }
    if (rc == 0) m->precision = ENG_PREC_FP32;
    json_decref(params);
    json_decref(model);
    sto_trial_clear(&t);
    if (rc) {
        eng_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int api_member_model(api_ctx *ctx, const api_study *st, const json_t *member, eng_model **out, int64_t *trial_id,
                     hpo_error *err) {
    json_int_t model_id = json_integer_value(json_object_get(member, "model_id"));
    json_int_t tid = json_integer_value(json_object_get(member, "trial_id"));
    if (model_id > 0) {
        sto_model mr;
        int rc = sto_model_get(ctx->db, model_id, &mr);
        if (rc) return hpo_fail(err, rc, "members", "model %lld does not exist", (long long)model_id);
        if (mr.study_id != st->id || mr.kind == STO_MODEL_ENSEMBLE || mr.state != STO_MODEL_COMPLETE || !mr.path)
            rc = hpo_fail(err, HPO_ECONFLICT, "members", "model %lld is not a complete trained model of study %lld",
                          (long long)model_id, (long long)st->id);
        char path[API_PATH_MAX];
        if (rc == 0 && api_dir_file(path, ctx->opt.data_dir, mr.path))
            rc = hpo_fail(err, HPO_EINVAL, "members", "model %lld's weights path is too long", (long long)model_id);
        if (rc == 0) rc = eng_model_new_from_weights(path, out, NULL, err);
        *trial_id = mr.trial_id;
        sto_model_clear(&mr);
        return rc;
    }
    *trial_id = tid;
    return api_trial_model(ctx, st, tid, out, err);
}

/* Adds id to the list (grown by doubling). */
static void add_id(int64_t **ids, size_t *n, size_t *cap, int64_t id) {
    if (id <= 0) return;
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *ids = hpo_xrealloc(*ids, *cap * sizeof **ids);
    }
    (*ids)[(*n)++] = id;
}

/* The origin trial of model id among the study's models m[0..n), or 0. */
static int64_t origin_of(const sto_model *m, size_t n, json_int_t id) {
    for (size_t i = 0; i < n; i++)
        if (m[i].id == id) return m[i].trial_id;
    return 0;
}

size_t api_trials_in_use(api_ctx *ctx, int64_t study_id, int64_t **ids) {
    sto_model *m = NULL;
    size_t nm = 0, n = 0, cap = 0;
    *ids = NULL;
    if (sto_model_list(ctx->db, study_id, -1, &m, &nm)) return 0;
    for (size_t i = 0; i < nm; i++) {
        int pending = m[i].state == STO_MODEL_QUEUED || m[i].state == STO_MODEL_RUNNING;
        if (m[i].kind == STO_MODEL_TRIAL && pending) add_id(ids, &n, &cap, m[i].trial_id);
        if (m[i].kind != STO_MODEL_ENSEMBLE || m[i].state == STO_MODEL_FAILED) continue;
        /* pending: every member (spec); complete: those without weights (result) */
        json_t *doc = json_loads(pending ? m[i].spec : m[i].result ? m[i].result : "{}", 0, NULL);
        size_t k;
        json_t *mem;
        json_array_foreach(json_object_get(doc, "members"), k, mem) {
            json_int_t model_id = json_integer_value(json_object_get(mem, "model_id"));
            if (json_object_get(mem, "skipped") || (!pending && model_id > 0)) continue;
            add_id(ids, &n, &cap, model_id > 0 ? origin_of(m, nm, model_id)
                                               : json_integer_value(json_object_get(mem, "trial_id")));
        }
        json_decref(doc);
    }
    sto_model_list_free(m, nm);
    return n;
}
