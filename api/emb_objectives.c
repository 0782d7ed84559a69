/* emb_objectives.c - objectives and constraints of an embedded study on
 * the metrics the engine supplies (api_internal.h):
 * - the epoch metrics stored per epoch (loss, accuracy, mse, mae and their
 *   val_ forms), read at the trial's best epoch: the epoch where its curve
 *   metric (the first objective that is an epoch metric, else val_loss,
 *   minimised) is best on average over the executions; each metric is the
 *   mean over the executions at that epoch;
 * - params: the model's trainable parameters;
 * - flops: forward FLOPs per sample (eng_model_forward_flops: 2 per
 *   multiply-add of the dense and conv2d layers);
 * - latency_ms: inference latency of one sample (a batch of 1, eval mode,
 *   on the worker's threads), the median of 15 timed forwards after 2 warm
 *   ups of a model built from the trial's params (weights do not change
 *   the time);
 * - train_seconds: the trial's wall time (every execution's training).
 * The trial's outcome is then {"values": [...], "metrics": {...}} checked
 * by api_parse_outcome as a tell is, so embedded and external trials store
 * and replay the same way; with several executions and an epoch metric
 * first, its value_n is their count and value_std their spread (as a
 * one-objective study's), else 1 and none (one measurement).
 * With a pruner (MO-ASHA), every epoch of the first execution reports the
 * objectives' vector: the epoch metrics, params, flops and latency_ms
 * measured once at its first epoch (a run's, after a resume), and
 * train_seconds, the training seconds of its epochs so far; they are
 * stored in the epoch's metrics, so a restart replays the same vectors
 * (job_trial.c, study_cache.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "data.h"
#include "model.h"

static const char *const engine_metrics[] = {"params", "flops", "latency_ms", "train_seconds"};
static const char *const epoch_metrics[] = {"loss",     "accuracy",     "mse",     "mae",
                                            "val_loss", "val_accuracy", "val_mse", "val_mae"};

static int in_list(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(name, list[i]) == 0) return 1;
    return 0;
}

static int is_epoch_metric(const char *name) { return in_list(name, epoch_metrics, HPO_ARRAY_LEN(epoch_metrics)); }

static int check_metric(const char *name, const char *field, hpo_error *err) {
    if (is_epoch_metric(name) || in_list(name, engine_metrics, HPO_ARRAY_LEN(engine_metrics))) return 0;
    return hpo_fail(err, HPO_EINVAL, field,
                    "%s: an embedded study's metrics are loss, accuracy, mse, mae, val_loss, val_accuracy, "
                    "val_mse, val_mae, params, flops, latency_ms or train_seconds (not \"%s\")",
                    field, name ? name : "");
}

int api_emb_objectives_check(api_study_def *d, int listed, hpo_error *err) {
    char field[64];
    api_embedded *e = &d->emb;
    e->curve = NULL;
    for (int i = 0; i < d->n_obj; i++) {
        if (listed)
            snprintf(field, sizeof field, "objectives[%d].metric", i);
        else
            snprintf(field, sizeof field, "objective.metric");
        int rc = check_metric(d->obj[i].metric, field, err);
        if (rc) return rc;
        if (!e->curve && is_epoch_metric(d->obj[i].metric)) {
            e->curve = d->obj[i].metric;
            e->curve_max = d->obj[i].maximize;
        }
    }
    for (int i = 0; i < d->n_cons; i++) {
        snprintf(field, sizeof field, "constraints[%d].metric", i);
        int rc = check_metric(d->cons[i].metric, field, err);
        if (rc) return rc;
    }
    if (!e->curve) {
        e->curve = "val_loss";
        e->curve_max = 0;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int api_emb_reports_vector(const api_study_def *d) {
    return d->embedded && d->n_obj > 1 && d->tuner.pruner.kind != TUN_PRUNER_NONE;
}

/* params, flops and latency_ms of the model the trial trained. */
int api_emb_engine_figures(const api_embedded *emb, const json_t *model_tmpl, const json_t *params, json_t *metrics,
                          hpo_error *err) {
    eng_model *m = NULL;
    float *x = NULL, *out = NULL;
    int rc = eng_model_new(model_tmpl, params, emb->in_rank, emb->in_shape, emb->n_classes, 1, &m, err);
    if (rc == 0) rc = eng_model_reserve(m, 1, ENG_PREC_FP32);
    if (rc) goto done;
    x = calloc(m->in_size ? m->in_size : 1, sizeof *x);
    out = calloc((size_t)(m->out_dim > 0 ? m->out_dim : 1), sizeof *out);
    if (!x || !out) {
        rc = hpo_fail(err, HPO_ENOMEM, "", "no memory to time the model");
        goto done;
    }
    enum { WARM = 2, RUNS = 15 };
    double t[RUNS];
    for (int k = 0; k < WARM + RUNS && rc == 0; k++) {
        double t0 = hpo_monotonic();
        rc = eng_model_predict(m, x, 1, out);
        if (k >= WARM) t[k - WARM] = (hpo_monotonic() - t0) * 1e3;
    }
    if (rc) goto done;
    qsort(t, RUNS, sizeof *t, cmp_double);
    json_object_set_new(metrics, "params", json_real((double)m->nparams));
    json_object_set_new(metrics, "flops", json_real(eng_model_forward_flops(m)));
    json_object_set_new(metrics, "latency_ms", json_real(t[RUNS / 2]));
done:
    free(x);
    free(out);
    eng_model_free(m);
    return rc;
}

/* The epoch metrics at best_epoch, the mean over the executions' stored
 * epochs; and first's (an epoch metric, else NULL) value in each
 * execution: first_vals, *n_first of them (at most API_MAX_EXECUTIONS). */
static int epoch_figures(api_ctx *ctx, int64_t trial_id, int best_epoch, json_t *metrics, const char *first,
                         double *first_vals, int *n_first, hpo_error *err) {
    sto_epoch *eps = NULL;
    size_t n = 0;
    double sum[HPO_ARRAY_LEN(epoch_metrics)] = {0};
    int cnt[HPO_ARRAY_LEN(epoch_metrics)] = {0};
    int rc = sto_trial_epochs(ctx->db, trial_id, &eps, &n);
    if (rc) return hpo_fail(err, rc, "", "the trial's epochs could not be read");
    for (size_t i = 0; i < n; i++) {
        if (eps[i].epoch != best_epoch) continue;
        json_t *m = json_loads(eps[i].metrics, 0, NULL);
        const json_t *fv = first ? json_object_get(m, first) : NULL;
        if (json_is_number(fv) && *n_first < API_MAX_EXECUTIONS) first_vals[(*n_first)++] = json_number_value(fv);
        for (size_t k = 0; k < HPO_ARRAY_LEN(epoch_metrics); k++) {
            const json_t *v = json_object_get(m, epoch_metrics[k]);
            if (json_is_number(v)) {
                sum[k] += json_number_value(v);
                cnt[k]++;
            }
        }
        json_decref(m);
    }
    sto_epoch_list_free(eps, n);
    for (size_t k = 0; k < HPO_ARRAY_LEN(epoch_metrics); k++)
        if (cnt[k] && isfinite(sum[k] / cnt[k])) json_object_set_new(metrics, epoch_metrics[k], json_real(sum[k] / cnt[k]));
    return 0;
}

int api_emb_outcome(api_ctx *ctx, const api_study_def *d, int64_t trial_id, int best_epoch, const json_t *model_tmpl,
                    const json_t *params, double seconds, api_outcome *o, hpo_error *err) {
    json_t *metrics = json_object(), *values = json_array();
    const char *first = is_epoch_metric(d->obj[0].metric) ? d->obj[0].metric : NULL;
    double first_vals[API_MAX_EXECUTIONS];
    int n_first = 0;
    int rc = epoch_figures(ctx, trial_id, best_epoch, metrics, first, first_vals, &n_first, err);
    if (rc == 0) rc = api_emb_engine_figures(&d->emb, model_tmpl, params, metrics, err);
    json_object_set_new(metrics, "train_seconds", json_real(seconds));
    for (int i = 0; rc == 0 && i < d->n_obj; i++) {
        const json_t *v = json_object_get(metrics, d->obj[i].metric);
        if (!v)
            rc = hpo_fail(err, HPO_EINVAL, "", "the objective metric %s was never finite", d->obj[i].metric);
        else
            json_array_append(values, (json_t *)v);
    }
    if (rc == 0) {
        json_t *body = json_pack("{s:s, s:O, s:O}", "state", "complete", "values", values, "metrics", metrics);
        rc = api_parse_outcome(d, body, o, err);
        json_decref(body);
    }
    if (rc == 0 && n_first > 1) { /* the first objective is the mean of the executions': their count and spread */
        o->value_n = n_first;
        tun_mean_std(first_vals, n_first, NULL, &o->value_std);
    }
    json_decref(values);
    json_decref(metrics);
    return rc;
}
