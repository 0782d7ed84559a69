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
