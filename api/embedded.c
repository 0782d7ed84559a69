/* embedded.c - the parts of a study definition that make hpod train the
 * models itself: "model" (a template or a premade one), "dataset" and
 * "training"; and opening the study's dataset splits for a trial. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "api_internal.h"
#include "model.h"

static int get_count(const json_t *obj, const char *key, const char *field, int64_t lo, int64_t hi,
                     int64_t def, int64_t *out, hpo_error *err) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return hpo_fail(err, HPO_EINVAL, field, "must be an integer between %lld and %lld", (long long)lo,
                        (long long)hi);
    *out = json_integer_value(v);
    return 0;
}

/* Loads (through the shared cache) the dataset of a "dataset" object. An
 * uploaded dataset's files loaded when they were uploaded, so one that is
 * now malformed, missing or unreadable (HPO_EFORMAT, HPO_ENOTFOUND,
 * HPO_EIO: a bad copy or restore, a directory in its place) is hpod's own
 * file damaged: HPO_ECONFLICT (409) naming the dataset, not a 400 or 404
 * that blames the request. */
int api_dataset_open(api_ctx *ctx, const json_t *spec, const char *part, eng_dataset **out,
                     hpo_error *err) {
    const char *name = json_string_value(json_object_get(spec, "name"));
    if (name && eng_builtin_exists(name)) return eng_dataset_cache_get(name, part, out, err);
    eng_data_source src;
    char *owned = NULL;
    int rc = api_dataset_source(ctx, spec, part, &src, &owned, err);
    if (rc == 0) rc = eng_dataset_cache_get_source(&src, out, err);
    if (owned && (rc == HPO_EFORMAT || rc == HPO_ENOTFOUND || rc == HPO_EIO)) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err ? err->message : "");
        rc = hpo_fail(err, HPO_ECONFLICT, "dataset",
                      "the stored file of uploaded dataset %.64s is damaged: delete the dataset and upload it "
                      "again (%s)",
                      src.name, why);
    }
    free(owned);
    return rc;
}

/* The uploaded dataset ds names is no longer stored. */
static int dataset_deleted(api_ctx *ctx, const json_t *ds) {
    int64_t id = 0;
    if (api_dataset_id(ctx, ds, &id) == HPO_ENOTFOUND) return 1;
    sto_dataset row;
    if (id <= 0 || sto_dataset_get(ctx->db, id, &row) != 0) return id > 0;
    sto_dataset_clear(&row);
    return 0;
}

static int parse_dataset(api_ctx *ctx, const json_t *def, api_embedded *e, hpo_error *err) {
    static const char *keys[] = {"name", "id", "validation_split", "limit", "validation_limit", "split",
                                 "split_seed"};
    const json_t *ds = json_object_get(def, "dataset");
    if (!json_is_object(ds))
        return hpo_fail(err, HPO_EINVAL, "dataset", "an embedded study needs a \"dataset\" object, "
                                                   "e.g. {\"name\": \"fashion-mnist\"}");
    int rc = api_only_keys(ds, keys, HPO_ARRAY_LEN(keys), "dataset", err);
    if (rc) return rc;
    const char *name = json_string_value(json_object_get(ds, "name"));
    if (name && eng_builtin_exists(name) && json_object_get(ds, "id"))
        return hpo_fail(err, HPO_EINVAL, "dataset.id", "%s is built in: it has no id (give its name alone)", name);
    const json_t *vs = json_object_get(ds, "validation_split");
    e->validation_split = 0.2;
    if (vs && !json_is_null(vs)) {
        double v = json_number_value(vs);
        if (!json_is_number(vs) || !(v > 0) || (v >= 1 && v != floor(v)))
            return hpo_fail(err, HPO_EINVAL, "dataset.validation_split",
                            "validation_split must be a fraction in (0, 1) or a whole number of rows");
        e->validation_split = v;
    }
    const json_t *split = json_object_get(ds, "split");
    if (split && !json_is_null(split)) {
        const char *how = json_string_value(split);
        if (!how || (strcmp(how, "tail") != 0 && strcmp(how, "shuffle") != 0))
            return hpo_fail(err, HPO_EINVAL, "dataset.split",
                            "split must be \"tail\" (validation = the last rows, as Keras) or \"shuffle\" (rows "
                            "drawn at random, seeded by split_seed)");
        e->split_shuffle = strcmp(how, "shuffle") == 0;
    }
    if ((rc = get_count(ds, "split_seed", "dataset.split_seed", 0, INT64_C(1) << 53, 0, &e->split_seed, err)))
        return rc;
    const json_t *seed = json_object_get(ds, "split_seed");
    if (seed && !json_is_null(seed) && !e->split_shuffle)
        return hpo_fail(err, HPO_EINVAL, "dataset.split_seed", "split_seed seeds \"split\": \"shuffle\" only");
    if ((rc = get_count(ds, "limit", "dataset.limit", 1, INT64_C(1) << 40, 0, &e->limit, err))) return rc;
    if ((rc = get_count(ds, "validation_limit", "dataset.validation_limit", 1, INT64_C(1) << 40, 0,
                        &e->validation_limit, err)))
        return rc;
    eng_dataset *d = NULL;
    rc = api_dataset_open(ctx, ds, "train", &d, err);
    if (rc == 0 && api_dataset_id(ctx, ds, &e->dataset_id)) rc = HPO_ENOTFOUND; /* its row went meanwhile */
    if (rc) {
        if (d) eng_dataset_release(d);
        if (dataset_deleted(ctx, ds)) /* by a delete (another request or node) that ran meanwhile */
            return hpo_fail(err, HPO_EINVAL, "dataset", "the dataset was deleted while the study was checked");
        if (!err->field[0]) hpo_error_prefix(err, "dataset");
        return rc;
    }
    e->n_classes = d->y_type == ENG_DATA_Y_CLASS ? d->n_classes : 0;
    e->in_rank = d->rank == 3 ? 3 : 1;
    if (d->rank == 3)
        for (int i = 0; i < 3; i++) e->in_shape[i] = (int)d->shape[i];
    else if (d->rank == 2) /* a 2-D sample is an image with one channel */
        e->in_rank = 3, e->in_shape[0] = (int)d->shape[0], e->in_shape[1] = (int)d->shape[1], e->in_shape[2] = 1;
    else
        e->in_shape[0] = (int)d->sample_size;
    size_t n = d->n;
    eng_dataset_release(d);
    double val = e->validation_split >= 1 ? e->validation_split
                                          : (double)eng_split_val_rows(n, e->validation_split); /* as the split */
    if (val < 1 || val >= (double)n)
        return hpo_fail(err, HPO_EINVAL, "dataset.validation_split",
                        "validation_split leaves no training or no validation rows (the dataset has %zu)", n);
    e->dataset = json_incref((json_t *)ds);
    return 0;
}

int api_device_fits(int device, const char *slot) {
    if (device == API_DEVICE_ANY || !slot) return 1;
    return !strncmp(slot, device == API_DEVICE_CUDA ? "cuda:" : "cpu:", device == API_DEVICE_CUDA ? 5 : 4);
}

static int parse_training(const json_t *def, const char *metric, api_embedded *e, hpo_error *err) {
    static const char *keys[] = {"batch_size", "max_epochs", "precision", "steps_per_execution", "allow_tf32",
                                 "device", "early_stopping", "tensorboard"};
    static const char *es_keys[] = {"monitor", "patience", "min_delta", "restore_best_weights"};
    const json_t *tr = json_object_get(def, "training");
    e->batch_size = 128;
    e->max_epochs = 10;
    e->precision = ENG_PREC_FP32;
    e->steps_per_execution = 1;
    e->allow_tf32 = 0;
    e->device = API_DEVICE_ANY;
    e->patience = -1;
    e->tensorboard = 0;
    snprintf(e->monitor, sizeof e->monitor, "%s", metric);
    if (!tr) return 0;
    if (!json_is_object(tr)) return hpo_fail(err, HPO_EINVAL, "training", "training must be an object");
    int rc = api_only_keys(tr, keys, HPO_ARRAY_LEN(keys), "training", err);
    int64_t v = 0;
    if (rc || (rc = get_count(tr, "batch_size", "training.batch_size", 1, 65536, 128, &v, err))) return rc;
    e->batch_size = (int)v;
    if ((rc = get_count(tr, "max_epochs", "training.max_epochs", 1, 100000, 10, &v, err))) return rc;
    e->max_epochs = (int)v;
    if ((rc = get_count(tr, "steps_per_execution", "training.steps_per_execution", 1, 10000, 1, &v, err))) return rc;
    e->steps_per_execution = (int)v;
    const json_t *p = json_object_get(tr, "precision");
    if (p) {
        int prec = json_is_string(p) ? eng_precision_parse(json_string_value(p)) : -1;
        if (prec < 0)
            return hpo_fail(err, HPO_EINVAL, "training.precision",
                            "precision must be \"fp32\", \"mixed_bf16\" or \"mixed_fp16\"");
        e->precision = prec;
    }
    const json_t *tf32 = json_object_get(tr, "allow_tf32");
    if (tf32 && !json_is_boolean(tf32))
        return hpo_fail(err, HPO_EINVAL, "training.allow_tf32", "allow_tf32 must be true or false");
    e->allow_tf32 = tf32 ? json_is_true(tf32) : 0;
    const json_t *dev = json_object_get(tr, "device");
    if (dev) {
        const char *s = json_string_value(dev);
        if (s && !strcmp(s, "any")) e->device = API_DEVICE_ANY;
        else if (s && !strcmp(s, "cpu")) e->device = API_DEVICE_CPU;
        else if (s && !strcmp(s, "cuda")) e->device = API_DEVICE_CUDA;
        else return hpo_fail(err, HPO_EINVAL, "training.device", "device must be \"any\", \"cpu\" or \"cuda\"");
    }
    const json_t *tb = json_object_get(tr, "tensorboard");
    if (tb && !json_is_boolean(tb))
        return hpo_fail(err, HPO_EINVAL, "training.tensorboard", "tensorboard must be true or false");
    e->tensorboard = tb ? json_is_true(tb) : 0;
    const json_t *es = json_object_get(tr, "early_stopping");
    if (es) {
        if (!json_is_object(es))
            return hpo_fail(err, HPO_EINVAL, "training.early_stopping", "early_stopping must be an object");
        if ((rc = api_only_keys(es, es_keys, HPO_ARRAY_LEN(es_keys), "training.early_stopping", err))) return rc;
        if ((rc = get_count(es, "patience", "training.early_stopping.patience", 0, 100000, 5, &v, err)))
            return rc;
        e->patience = (int)v;
        const json_t *mon = json_object_get(es, "monitor");
        if (mon) {
            eng_metrics probe = {0};
            double x;
            if (!json_is_string(mon) || eng_metric_get(&probe, json_string_value(mon), &x) != 0)
                return hpo_fail(err, HPO_EINVAL, "training.early_stopping.monitor",
                                "monitor must be one of loss, accuracy, mse, mae (or val_ of them)");
            snprintf(e->monitor, sizeof e->monitor, "%s", json_string_value(mon));
        }
        const json_t *md = json_object_get(es, "min_delta");
        if (md && (!json_is_number(md) || json_number_value(md) < 0))
            return hpo_fail(err, HPO_EINVAL, "training.early_stopping.min_delta", "min_delta must be a number >= 0");
        e->min_delta = md ? json_number_value(md) : 0;
        /* Keras' option, read and checked; either way a trial keeps its
         * best epoch's weights (job_setup.c): they give its value, its
         * model and its refits */
        const json_t *rb = json_object_get(es, "restore_best_weights");
        if (rb && !json_is_boolean(rb))
            return hpo_fail(err, HPO_EINVAL, "training.early_stopping.restore_best_weights", "must be true or false");
    }
    return 0;
}

/* 1 if some value of `allowed` is among the parent's choice values. */
static int can_activate(const json_t *parent, const json_t *allowed) {
    const json_t *values = json_object_get(parent, "values");
    if (!values) return 1; /* not a choice: leave it to the space's validation */
    size_t i, k;
    const json_t *a, *v;
    json_array_foreach(allowed, i, a) json_array_foreach(values, k, v) if (json_equal(a, v)) return 1;
    return 0;
}

/* The study's "space" (may be NULL) over a premade template's default space.
 * A default parameter that the study's choices make impossible to activate
 * (momentum when the optimizer is limited to adam) is dropped. */
static json_t *merge_space(const json_t *defaults, const json_t *space, json_t *dropped) {
    json_t *merged = defaults ? json_deep_copy(defaults) : json_object();
    if (space) json_object_update(merged, (json_t *)space);
    const char *name;
    json_t *param;
    void *tmp;
    json_object_foreach_safe(merged, tmp, name, param) {
        if (space && json_object_get(space, name)) continue;
        const char *parent;
        json_t *allowed;
        json_object_foreach(json_object_get(param, "condition"), parent, allowed) {
            if (json_is_array(allowed) && !can_activate(json_object_get(merged, parent), allowed)) {
                json_array_append_new(dropped, json_string(name));
                json_object_del(merged, name);
                break;
            }
        }
    }
    return merged;
}

/* Removes, everywhere in j, members whose value is the reference "$name". */
static void strip_ref(json_t *j, const char *name) {
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) strip_ref(v, name);
        return;
    }
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(j, tmp, key, v) {
        const char *s = json_string_value(v);
        if (s && s[0] == '$' && strcmp(s + 1, name) == 0)
            json_object_del(j, key);
        else
            strip_ref(v, name);
    }
}

int api_embedded_parse(api_ctx *ctx, const json_t *def, api_study_def *d, json_t **space_out,
                       hpo_error *err) {
    api_embedded *e = &d->emb;
    json_t *tmpl_space = NULL;
    const json_t *model = json_object_get(def, "model");
    const json_t *space = json_object_get(def, "space");
    int rc;
    if (!json_is_object(model)) return hpo_fail(err, HPO_EINVAL, "model", "model must be an object");
    if (space && !json_is_object(space)) return hpo_fail(err, HPO_EINVAL, "space", "space must be an object");
    if (!d->metric) d->metric = "val_loss";
    /* the engine reads "acc" too, but the direction and a resumed trial's
     * curve go by the full name: one spelling */
    int one_objective = !json_object_get(def, "objectives"); /* else emb_objectives.c checks each */
    if (one_objective && (strcmp(d->metric, "acc") == 0 || strcmp(d->metric, "val_acc") == 0))
        return hpo_fail(err, HPO_EINVAL, "objective.metric", "write \"%s\" in full: \"%s\"", d->metric,
                        d->metric[0] == 'v' ? "val_accuracy" : "accuracy");
    /* accuracy is maximised unless the definition says otherwise */
    const json_t *dir = json_object_get(json_object_get(def, "objective"), "direction");
    if (!d->obj[0].metric || !json_object_get(def, "objectives")) {
        if (!dir && strstr(d->metric, "accuracy")) d->maximize = 1;
        d->obj[0].metric = d->metric;
        d->obj[0].maximize = d->maximize;
    }
    if (d->multi) {
        if ((rc = api_emb_objectives_check(d, json_object_get(def, "objectives") != NULL, err))) return rc;
    } else {
        eng_metrics probe = {0};
        double x;
        if (eng_metric_get(&probe, d->metric, &x) != 0)
            return hpo_fail(err, HPO_EINVAL, "objective.metric",
                            "the metric of an embedded study must be one of loss, accuracy, mse, mae, "
                            "val_loss, val_accuracy, val_mse, val_mae");
        e->curve = d->metric;
        e->curve_max = d->maximize;
    }
    if ((rc = parse_dataset(ctx, def, e, err))) goto fail;
    if (e->n_classes == 0 && one_objective && strstr(d->metric, "accuracy")) {
        rc = hpo_fail(err, HPO_EINVAL, "objective.metric",
                      "%s is for datasets of classes; this one is a regression: use val_loss, val_mse or val_mae",
                      d->metric);
        goto fail;
    }
    if ((rc = parse_training(def, e->curve, e, err))) goto fail;
    const json_t *tname = json_object_get(model, "template");
    if (tname) {
        if (json_object_size(model) != 1) {
            rc = hpo_fail(err, HPO_EINVAL, "model", "a premade template is given alone: {\"template\": \"mlp\"}");
            goto fail;
        }
        if ((rc = api_template_get(json_string_value(tname), e->n_classes, e->in_rank, &e->model,
                                   &tmpl_space, err)))
            goto fail;
    } else {
        e->model = json_incref((json_t *)model);
    }
    json_t *dropped = json_array();
    *space_out = merge_space(tmpl_space, space, dropped);
    size_t i;
    json_t *name;
    json_array_foreach(dropped, i, name) strip_ref(e->model, json_string_value(name)); /* premade: our own copy */
    json_decref(dropped);
    json_decref(tmpl_space);
    return 0;
fail:
    json_decref(tmpl_space);
    api_embedded_clear(e);
    return rc;
}

void api_embedded_clear(api_embedded *e) {
    json_decref(e->model);
    json_decref(e->dataset);
    e->model = NULL;
    e->dataset = NULL;
}

void api_embedded_show(json_t *def, const api_embedded *e) {
    json_t *tr = json_object_get(def, "training");
    if (!json_is_object(tr)) json_object_set_new(def, "training", tr = json_object());
    json_object_set_new(tr, "tensorboard", json_boolean(e->tensorboard));
    /* an uploaded dataset named by name is pinned to the one it names now:
     * one uploaded again under that name later is another dataset (its
     * models, refits and a restart never read it in its place) */
    json_t *ds = json_object_get(def, "dataset");
    if (e->dataset_id > 0 && json_is_object(ds)) json_object_set_new(ds, "id", json_integer((json_int_t)e->dataset_id));
}
