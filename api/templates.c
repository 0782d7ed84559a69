/* templates.c - premade model templates (KerasTuner's HyperModel idea: a
 * model with its own default search space, so a study needs only a dataset
 * and an objective), and the expansion of the template constructs the api
 * adds on top of the engine's: "repeat" blocks and optional residuals. */
#include <string.h>

#include "api_internal.h"

/* Default spaces: what a KerasTuner user would tune on such a model. */
static const char *mlp_space =
    "{\"layers\": {\"type\": \"int\", \"low\": 1, \"high\": 3},"
    " \"units\": {\"type\": \"int\", \"low\": 32, \"high\": 512, \"log\": true},"
    " \"dropout\": {\"type\": \"float\", \"low\": 0.0, \"high\": 0.5},"
    " \"lr\": {\"type\": \"float\", \"low\": 1e-4, \"high\": 1e-2, \"log\": true},"
    " \"optimizer\": {\"type\": \"choice\", \"values\": [\"adam\", \"rmsprop\", \"sgd\"]},"
    " \"momentum\": {\"type\": \"float\", \"low\": 0.0, \"high\": 0.95, \"condition\": {\"optimizer\": [\"sgd\"]}}}";

static const char *convnet_space =
    "{\"blocks\": {\"type\": \"int\", \"low\": 1, \"high\": 3},"
    " \"filters\": {\"type\": \"int\", \"low\": 16, \"high\": 64, \"log\": true},"
    " \"kernel\": {\"type\": \"choice\", \"values\": [3, 5]},"
    " \"units\": {\"type\": \"int\", \"low\": 32, \"high\": 256, \"log\": true},"
    " \"dropout\": {\"type\": \"float\", \"low\": 0.0, \"high\": 0.5},"
    " \"translate\": {\"type\": \"int\", \"low\": 0, \"high\": 2},"
    " \"flip\": {\"type\": \"bool\"},"
    " \"lr\": {\"type\": \"float\", \"low\": 1e-4, \"high\": 1e-2, \"log\": true},"
    " \"optimizer\": {\"type\": \"choice\", \"values\": [\"adam\", \"adamw\"]}}";

static const char *resnet_space =
    "{\"blocks\": {\"type\": \"int\", \"low\": 1, \"high\": 3},"
    " \"filters\": {\"type\": \"int\", \"low\": 16, \"high\": 64, \"log\": true},"
    " \"residual\": {\"type\": \"bool\"},"
    " \"dropout\": {\"type\": \"float\", \"low\": 0.0, \"high\": 0.5},"
    " \"translate\": {\"type\": \"int\", \"low\": 0, \"high\": 2},"
    " \"flip\": {\"type\": \"bool\"},"
    " \"lr\": {\"type\": \"float\", \"low\": 1e-4, \"high\": 1e-2, \"log\": true},"
    " \"optimizer\": {\"type\": \"choice\", \"values\": [\"adam\", \"adamw\"]}}";

/* The output layer: softmax over the classes, or one linear unit. */
static json_t *head(int n_classes) {
    return n_classes > 0
               ? json_pack("{s:{s:i, s:s}}", "dense", "units", n_classes, "activation", "softmax")
               : json_pack("{s:{s:i, s:s}}", "dense", "units", 1, "activation", "linear");
}

static json_t *compile(json_t *layers, int n_classes, int with_momentum) {
    json_t *opt = json_pack("{s:s, s:s}", "name", "$optimizer", "learning_rate", "$lr");
    if (with_momentum) json_object_set_new(opt, "momentum", json_string("$momentum"));
    json_array_append_new(layers, head(n_classes));
    return json_pack("{s:o, s:s, s:o}", "layers", layers, "loss",
                     n_classes > 0 ? "sparse_categorical_crossentropy" : "mse", "optimizer", opt);
}

static json_t *mlp_model(int n_classes) {
    json_t *block = json_pack("[{s:{s:s, s:s}}, {s:{s:s}}]", "dense", "units", "$units", "activation",
                              "relu", "dropout", "rate", "$dropout");
    json_t *layers = json_pack("[{s:{}}, {s:{s:s, s:o}}]", "flatten", "repeat", "count", "$layers",
                               "layers", block);
    return compile(layers, n_classes, 1);
}

static json_t *convnet_model(int n_classes) {
    json_t *block = json_pack("[{s:{s:s, s:s, s:s, s:s}}, {s:{s:i}}]", "conv2d", "filters", "$filters",
                              "kernel", "$kernel", "padding", "same", "activation", "relu", "maxpool2d",
                              "pool", 2);
    json_t *layers = json_pack(
        "[{s:{s:s, s:s}}, {s:{s:s, s:o}}, {s:{}}, {s:{s:s, s:s}}, {s:{s:s}}]", "augment", "translate",
        "$translate", "flip", "$flip", "repeat", "count", "$blocks", "layers", block, "flatten", "dense",
        "units", "$units", "activation", "relu", "dropout", "rate", "$dropout");
    return compile(layers, n_classes, 0);
}

static json_t *resnet_model(int n_classes) {
    /* stage: residual (or plain) block of two 3x3 convs with batch norm,
     * then a strided downsampling conv */
    json_t *inner = json_pack("[{s:{s:s, s:i, s:s}}, {s:{}}, {s:s}, {s:{s:s, s:i, s:s}}, {s:{}}]",
                              "conv2d", "filters", "$filters", "kernel", 3, "padding", "same", "batchnorm",
                              "activation", "relu", "conv2d", "filters", "$filters", "kernel", 3,
                              "padding", "same", "batchnorm");
    json_t *stage = json_pack("[{s:{s:o, s:s, s:s}}, {s:{s:s, s:i, s:s, s:i, s:s}}]", "residual",
                              "layers", inner, "activation", "relu", "enabled", "$residual", "conv2d",
                              "filters", "$filters", "kernel", 3, "padding", "same", "stride", 2,
                              "activation", "relu");
    json_t *layers = json_pack(
        "[{s:{s:s, s:s}}, {s:{s:s, s:i, s:s, s:s}}, {s:{s:s, s:o}}, {s:{}}, {s:{s:s}}]", "augment",
        "translate", "$translate", "flip", "$flip", "conv2d", "filters", "$filters", "kernel", 3, "padding",
        "same", "activation", "relu", "repeat", "count", "$blocks", "layers", stage, "global_avg_pool",
        "dropout", "rate", "$dropout");
    return compile(layers, n_classes, 0);
}

int api_template_get(const char *name, int n_classes, int in_rank, json_t **model, json_t **space,
                     hpo_error *err) {
    const char *space_text;
    json_t *m;
    if (name && strcmp(name, "mlp") == 0) {
        m = mlp_model(n_classes);
        space_text = mlp_space;
    } else if (name && (strcmp(name, "convnet") == 0 || strcmp(name, "resnet") == 0)) {
        if (in_rank != 3)
            return hpo_fail(err, HPO_EINVAL, "model.template",
                            "template \"%s\" needs image data (samples of shape HxWxC)", name);
        int conv = strcmp(name, "convnet") == 0;
        m = conv ? convnet_model(n_classes) : resnet_model(n_classes);
        space_text = conv ? convnet_space : resnet_space;
    } else {
        return hpo_fail(err, HPO_EINVAL, "model.template",
                        "template must be \"mlp\", \"convnet\" or \"resnet\"");
    }
    json_t *s = json_loads(space_text, 0, NULL);
    if (!m || !s) { /* the texts above are constants: this is a bug */
        json_decref(m);
        json_decref(s);
        return hpo_fail(err, HPO_EINTERNAL, "model.template", "template %s is broken", name);
    }
    *model = m;
    *space = s;
    return 0;
}

/* A "$name" reference resolved from params; a literal stays as it is. */
static const json_t *resolve(const json_t *v, const json_t *params, const char *field, hpo_error *err,
                             int *rc) {
    const char *s = json_string_value(v);
    if (!s || s[0] != '$') return v;
    const json_t *r = json_object_get(params, s + 1);
    if (!r) *rc = hpo_fail(err, HPO_EINVAL, field, "%s is not a parameter of this trial", s);
    return r;
}

/* The most layer objects a model expands to (repeats multiplied out,
 * residual blocks' inner layers counted): nested repeats multiply, and
 * four levels of 64 made 16.8 million from a 500-byte definition, more
 * memory than the model budget ever saw (it is checked on the expansion). */
#define API_MAX_EXPANDED_LAYERS 4096

static int expand_layers(const json_t *layers, const json_t *params, const char *path, json_t *out,
                         size_t *n, hpo_error *err);

/* One more layer object in the expansion: 0, or the error naming path. */
static int count_layer(size_t *n, const char *path, hpo_error *err) {
    if (++*n <= API_MAX_EXPANDED_LAYERS) return 0;
    return hpo_fail(err, HPO_EINVAL, path, "the model expands to more than %d layers (repeat counts multiply)",
                    API_MAX_EXPANDED_LAYERS);
}

/* Appends the expansion of one layer object to out; *n counts them. */
static int expand_layer(const json_t *layer, const json_t *params, const char *path, json_t *out, size_t *n,
                        hpo_error *err) {
    char field[160];
    int rc = 0;
    const json_t *rep = json_object_get(layer, "repeat");
    if (rep && json_object_size(layer) == 1) {
        snprintf(field, sizeof field, "%.120s.repeat.count", path);
        const json_t *count = resolve(json_object_get(rep, "count"), params, field, err, &rc);
        if (rc) return rc;
        if (!json_is_integer(count) || json_integer_value(count) < 0 || json_integer_value(count) > 64)
            return hpo_fail(err, HPO_EINVAL, field, "repeat count must be an integer in 0..64");
        snprintf(field, sizeof field, "%.120s.repeat.layers", path);
        for (json_int_t i = 0; i < json_integer_value(count); i++)
            if ((rc = expand_layers(json_object_get(rep, "layers"), params, field, out, n, err))) return rc;
        return 0;
    }
    const json_t *res = json_object_get(layer, "residual");
    if (res && json_object_size(layer) == 1 && json_object_get(res, "enabled")) {
        snprintf(field, sizeof field, "%.120s.residual.enabled", path);
        const json_t *en = resolve(json_object_get(res, "enabled"), params, field, err, &rc);
        if (rc) return rc;
        if (!json_is_boolean(en)) return hpo_fail(err, HPO_EINVAL, field, "enabled must be a boolean");
        if ((rc = count_layer(n, path, err))) return rc;
        json_t *inner = json_array();
        snprintf(field, sizeof field, "%.120s.residual.layers", path);
        if ((rc = expand_layers(json_object_get(res, "layers"), params, field, inner, n, err))) {
            json_decref(inner);
            return rc;
        }
        if (json_is_true(en)) {
            json_t *copy = json_deep_copy(res);
            json_object_del(copy, "enabled");
            json_object_set_new(copy, "layers", inner);
            json_array_append_new(out, json_pack("{s:o}", "residual", copy));
        } else { /* the same layers without the skip connection */
            json_array_extend(out, inner);
            json_decref(inner);
            const json_t *act = json_object_get(res, "activation");
            if (act) json_array_append_new(out, json_pack("{s:O}", "activation", act));
        }
        return 0;
    }
    if ((rc = count_layer(n, path, err))) return rc;
    json_array_append_new(out, json_deep_copy(layer));
    return 0;
}

static int expand_layers(const json_t *layers, const json_t *params, const char *path, json_t *out,
                         size_t *n, hpo_error *err) {
    if (!json_is_array(layers)) return hpo_fail(err, HPO_EINVAL, path, "layers must be an array");
    size_t i;
    const json_t *layer;
    json_array_foreach(layers, i, layer) {
        char field[160];
        snprintf(field, sizeof field, "%.120s[%zu]", path, i);
        if (!json_is_object(layer)) return hpo_fail(err, HPO_EINVAL, field, "a layer must be an object");
        int rc = expand_layer(layer, params, field, out, n, err);
        if (rc) return rc;
    }
    return 0;
}

/* Removes, everywhere in j, object members whose value is "$name" for a
 * parameter of the space that is inactive in this trial (absent from
 * params): the engine then uses its default for that key (e.g. momentum
 * when the optimizer is not sgd). */
static void drop_inactive(json_t *j, const json_t *params, const tun_space *space) {
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) drop_inactive(v, params, space);
        return;
    }
    if (!json_is_object(j)) return;
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(j, tmp, key, v) {
        const char *s = json_string_value(v);
        if (s && s[0] == '$' && !json_object_get(params, s + 1) && tun_space_index(space, s + 1) >= 0)
            json_object_del(j, key);
        else
            drop_inactive(v, params, space);
    }
}

int api_model_expand(const json_t *model, const json_t *params, const tun_space *space, json_t **out,
                     hpo_error *err) {
    json_t *layers = json_array();
    size_t n = 0;
    int rc = expand_layers(json_object_get(model, "layers"), params, "model.layers", layers, &n, err);
    if (rc) {
        json_decref(layers);
        return rc;
    }
    json_t *m = json_deep_copy(model);
    json_object_set_new(m, "layers", layers);
    drop_inactive(m, params, space);
    *out = m;
    return 0;
}
