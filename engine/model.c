/* model.c - building a model from its JSON template: "$name" references,
 * validation with field paths, shapes, parameter layout and initialisation
 * (see model.h). Running it is model_run.c. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "tensor.h"

/* field paths are bounded by hpo_error.field; truncation there is fine */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static const char *prec_names[] = {"fp32", "mixed_bf16", "mixed_fp16"};

int eng_precision_parse(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, prec_names[i])) return i;
    return -1;
}

const char *eng_precision_name(int p) { return p >= 0 && p < 3 ? prec_names[p] : "?"; }

/* ---- template values ---- */

typedef struct ctx {
    const json_t *params;
    hpo_error *err;
    size_t nparams, nstats;
} ctx;

/* The value of key in obj, with "$name" resolved. *v = NULL if absent or
 * null. Returns 0 or HPO_EINVAL (unresolved reference). */
static int get(ctx *c, const json_t *obj, const char *key, const char *path, const json_t **v) {
    const json_t *j = json_object_get(obj, key);
    if (j && json_is_string(j) && json_string_value(j)[0] == '$') {
        const char *name = json_string_value(j) + 1;
        const json_t *p = c->params ? json_object_get(c->params, name) : NULL;
        if (!p) {
            char field[200];
            snprintf(field, sizeof field, "%s.%s", path, key);
            return hpo_fail(c->err, HPO_EINVAL, field,
                            "%s refers to \"$%s\", which is not among the trial's parameters", field, name);
        }
        j = p;
    }
    *v = j && !json_is_null(j) ? j : NULL;
    return 0;
}

static int fail_field(ctx *c, int rc, const char *path, const char *key, const char *fmt, const char *what) {
    char field[192];
    snprintf(field, sizeof field, "%s%s%s", path, key ? "." : "", key ? key : "");
    return hpo_fail(c->err, rc, field, fmt, field, what);
}

static int get_int(ctx *c, const json_t *obj, const char *key, const char *path, int def, int lo, int hi, int *out) {
    const json_t *v;
    int rc = get(c, obj, key, path, &v);
    if (rc) return rc;
    if (!v) {
        if (def == INT32_MIN) return fail_field(c, HPO_EINVAL, path, key, "%s is required%s", "");
        *out = def;
        return 0;
    }
    double d;
    if (json_is_integer(v)) d = (double)json_integer_value(v);
    else if (json_is_real(v)) d = json_real_value(v);
    else return fail_field(c, HPO_EINVAL, path, key, "%s must be an integer%s", "");
    if (d != floor(d)) return fail_field(c, HPO_EINVAL, path, key, "%s must be an integer%s", "");
    if (d < lo || d > hi) {
        char msg[64];
        snprintf(msg, sizeof msg, " (between %d and %d)", lo, hi);
        return fail_field(c, HPO_EINVAL, path, key, "%s is out of range%s", msg);
    }
    *out = (int)d;
    return 0;
}

static int get_num(ctx *c, const json_t *obj, const char *key, const char *path, double def, double lo, double hi,
                   double *out) {
    const json_t *v;
    int rc = get(c, obj, key, path, &v);
    if (rc) return rc;
    if (!v) {
        if (isnan(def)) return fail_field(c, HPO_EINVAL, path, key, "%s is required%s", "");
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return fail_field(c, HPO_EINVAL, path, key, "%s must be a number%s", "");
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        char msg[96];
        snprintf(msg, sizeof msg, " (between %g and %g)", lo, hi);
        return fail_field(c, HPO_EINVAL, path, key, "%s is out of range%s", msg);
    }
    *out = d;
    return 0;
}

static int get_str(ctx *c, const json_t *obj, const char *key, const char *path, const char *def, const char **out) {
    const json_t *v;
    int rc = get(c, obj, key, path, &v);
    if (rc) return rc;
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_string(v)) return fail_field(c, HPO_EINVAL, path, key, "%s must be a string%s", "");
    *out = json_string_value(v);
    return 0;
}

static int get_bool(ctx *c, const json_t *obj, const char *key, const char *path, int def, int *out) {
    const json_t *v;
    int rc = get(c, obj, key, path, &v);
    if (rc) return rc;
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return fail_field(c, HPO_EINVAL, path, key, "%s must be true or false%s", "");
    *out = json_is_true(v);
    return 0;
}

/* an int or a pair [a, b] */
static int get_pair(ctx *c, const json_t *obj, const char *key, const char *path, int def, int lo, int hi, int *a,
                    int *b) {
    const json_t *v;
    int rc = get(c, obj, key, path, &v);
    if (rc) return rc;
    if (v && json_is_array(v)) {
        if (json_array_size(v) != 2) return fail_field(c, HPO_EINVAL, path, key, "%s must be an integer or a pair%s", "");
        json_t *tmp = json_pack("{sOsO}", "a", json_array_get(v, 0), "b", json_array_get(v, 1));
        char p2[192];
        snprintf(p2, sizeof p2, "%s.%s", path, key);
        rc = get_int(c, tmp, "a", p2, def, lo, hi, a);
        if (!rc) rc = get_int(c, tmp, "b", p2, def, lo, hi, b);
        json_decref(tmp);
        return rc;
    }
    rc = get_int(c, obj, key, path, def, lo, hi, a);
    if (!rc) *b = *a;
    return rc;
}

static int get_act(ctx *c, const json_t *obj, const char *key, const char *path, int *act) {
    const char *s = NULL;
    int rc = get_str(c, obj, key, path, NULL, &s);
    if (rc) return rc;
    int a = eng_act_parse(s);
    if (a < 0) return fail_field(c, HPO_EINVAL, path, key, "%s: unknown activation \"%s\"", s);
    *act = a;
    return 0;
}

/* HPO_EINVAL naming path.<key> for a key of obj that is not in keys (a
 * NULL-ended list): a misspelt or foreign option (Keras's "strides", a
 * "lr" for "learning_rate") would otherwise be ignored, and the study
 * would train another model than the one it describes. */
/* A 400 naming the first key of obj that is not in keys; what names the
 * taker in the message ("model.optimizer adam takes name, ..."). */
static int only_keys_of(ctx *c, const json_t *obj, const char *const *keys, const char *path, const char *what) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int known = 0;
        for (const char *const *k = keys; *k && !known; k++) known = strcmp(key, *k) == 0;
        if (known) continue;
        char field[224], names[200] = "";
        snprintf(field, sizeof field, "%s.%.60s", path, key);
        for (const char *const *k = keys; *k; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k == keys ? "" : ", ", *k);
        return hpo_fail(c->err, HPO_EINVAL, field, "%s: unknown key (%s takes %s)", field, what,
                        names[0] ? names : "no options");
    }
    return 0;
}

static int only_keys(ctx *c, const json_t *obj, const char *const *keys, const char *path) {
    return only_keys_of(c, obj, keys, path, path);
}

/* ---- layers ---- */

static const char *kind_names[] = {"dense", "conv2d", "maxpool2d", "global_avg_pool", "flatten", "dropout",
                                   "batchnorm", "residual", "augment", "activation"};
/* the options each kind reads (build_layer), by kind */
static const char *const kind_keys[][7] = {
    {"units", "activation", "precision", NULL},
    {"filters", "kernel", "stride", "padding", "activation", "precision", NULL},
    {"pool", "stride", NULL},
    {NULL},
    {NULL},
    {"rate", NULL},
    {"momentum", "epsilon", NULL},
    {"layers", "activation", NULL},
    {"translate", "flip", NULL},
    {"name", NULL},
};

const char *eng_layer_kind_name(int kind) {
    return kind >= 0 && kind < (int)HPO_ARRAY_LEN(kind_names) ? kind_names[kind] : "?";
}

static int build_list(ctx *c, const json_t *arr, const char *path, int *rank, int *shape, eng_layer **out, int *n);

static size_t numel(int rank, const int *s) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n = eng_size_mul(n, (size_t)(s[i] > 0 ? s[i] : 0));
    return n;
}

/* Adds a layer's parameters to the count; HPO_ETOOLARGE past
 * ENG_MODEL_MAX_PARAMS (so no later size computation overflows). */
static int add_params(ctx *c, size_t n, const char *path) {
    if (n > ENG_MODEL_MAX_PARAMS || c->nparams > ENG_MODEL_MAX_PARAMS - n)
        return hpo_fail(c->err, HPO_ETOOLARGE, path, "%s: the model would have more than 2^48 parameters", path);
    c->nparams += n;
    return 0;
}

static int shape_fail(ctx *c, const char *path, const char *msg) {
    return hpo_fail(c->err, HPO_ESHAPE, path, "%s: %s", path, msg);
}

/* A projection for a residual block from shape (ri, si) to (ro, so). */
static int make_proj(ctx *c, eng_layer *l, int ri, const int *si, int ro, const int *so, const char *path) {
    eng_layer *p = hpo_xcalloc(1, sizeof *p);
    l->proj = p;
    snprintf(p->path, sizeof p->path, "%s.projection", path);
    p->in_rank = ri;
    memcpy(p->in_shape, si, sizeof p->in_shape);
    p->out_rank = ro;
    memcpy(p->out_shape, so, sizeof p->out_shape);
    p->act = ENG_ACT_NONE;
    if (ri == 1 && ro == 1) {
        p->kind = ENG_L_DENSE;
        p->units = so[0];
        p->nw = (size_t)si[0] * so[0];
        p->nb = (size_t)so[0];
    } else if (ri == 3 && ro == 3 && so[0] > 0 && so[1] > 0 && (si[0] + so[0] - 1) / so[0] == (si[0] - 1) / so[0] + 1 &&
               si[0] % so[0] == 0 && si[1] % so[1] == 0) {
        p->kind = ENG_L_CONV2D;
        p->filters = so[2];
        p->kh = p->kw = 1;
        p->sh = si[0] / so[0];
        p->sw = si[1] / so[1];
        p->padding = ENG_PAD_VALID;
        p->nw = (size_t)si[2] * so[2];
        p->nb = (size_t)so[2];
    } else {
        return shape_fail(c, path, "the block's output shape cannot be reached from its input by a dense or 1x1-conv projection");
    }
    p->in_size = numel(ri, si);
    p->out_size = numel(ro, so);
    p->w_off = c->nparams;
    p->b_off = c->nparams + p->nw;
    return add_params(c, p->nw + p->nb, p->path);
}

static int build_layer(ctx *c, const json_t *item, const char *path, int *rank, int *shape, eng_layer *l) {
    int rc;
    if (!json_is_object(item) || json_object_size(item) != 1)
        return hpo_fail(c->err, HPO_EINVAL, path, "%s must be an object with one key, the layer type", path);
    const char *type = json_object_iter_key(json_object_iter((json_t *)item));
    const json_t *cfg = json_object_iter_value(json_object_iter((json_t *)item));
    char p[192];
    snprintf(p, sizeof p, "%s.%s", path, type);
    int kind = -1;
    for (int i = 0; i < (int)HPO_ARRAY_LEN(kind_names); i++)
        if (!strcmp(type, kind_names[i])) kind = i;
    if (!strcmp(type, "maxpool") || !strcmp(type, "max_pool2d")) kind = ENG_L_MAXPOOL;
    if (!strcmp(type, "global_average_pooling2d") || !strcmp(type, "gap")) kind = ENG_L_GAP;
    if (kind < 0) return hpo_fail(c->err, HPO_EINVAL, path, "%s: unknown layer type \"%s\"", path, type);
    /* {"activation": "relu"} is a short form */
    json_t *tmp = NULL;
    if (kind == ENG_L_ACT && json_is_string(cfg)) {
        tmp = json_pack("{sO}", "name", (json_t *)cfg);
        cfg = tmp;
    }
    if (!json_is_object(cfg)) {
        json_decref(tmp);
        return hpo_fail(c->err, HPO_EINVAL, p, "%s must be an object", p);
    }
    if ((rc = only_keys(c, cfg, kind_keys[kind], p))) {
        json_decref(tmp);
        return rc;
    }
    l->kind = kind;
    l->in_rank = *rank;
    memcpy(l->in_shape, shape, sizeof l->in_shape);
    l->in_size = numel(*rank, shape);
    snprintf(l->path, sizeof l->path, "%s", path + (strncmp(path, "model.", 6) ? 0 : 6));
    const char *prec = NULL;
    int ro = *rank, so[3] = {shape[0], shape[1], shape[2]};
    switch (kind) {
    case ENG_L_DENSE: {
        if ((rc = get_int(c, cfg, "units", p, INT32_MIN, 1, 1 << 20, &l->units))) goto out;
        if ((rc = get_act(c, cfg, "activation", p, &l->act))) goto out;
        int in = shape[*rank - 1];
        so[ro - 1] = l->units;
        l->nw = (size_t)in * l->units;
        l->nb = (size_t)l->units;
        break;
    }
    case ENG_L_CONV2D: {
        const char *pad;
        if ((rc = get_int(c, cfg, "filters", p, INT32_MIN, 1, 1 << 16, &l->filters))) goto out;
        if ((rc = get_pair(c, cfg, "kernel", p, INT32_MIN, 1, 64, &l->kh, &l->kw))) goto out;
        if ((rc = get_pair(c, cfg, "stride", p, 1, 1, 64, &l->sh, &l->sw))) goto out;
        if ((rc = get_str(c, cfg, "padding", p, "valid", &pad))) goto out;
        if ((rc = get_act(c, cfg, "activation", p, &l->act))) goto out;
        if (!strcmp(pad, "same")) l->padding = ENG_PAD_SAME;
        else if (!strcmp(pad, "valid")) l->padding = ENG_PAD_VALID;
        else { rc = fail_field(c, HPO_EINVAL, p, "padding", "%s must be \"same\" or \"valid\", not \"%s\"", pad); goto out; }
        if (*rank != 3) { rc = shape_fail(c, p, "conv2d needs an image input (height, width, channels)"); goto out; }
        if (l->padding == ENG_PAD_SAME) {
            so[0] = (shape[0] + l->sh - 1) / l->sh;
            so[1] = (shape[1] + l->sw - 1) / l->sw;
        } else {
            if (l->kh > shape[0] || l->kw > shape[1]) {
                char f[200];
                snprintf(f, sizeof f, "%s.kernel", p);
                rc = hpo_fail(c->err, HPO_ESHAPE, f, "%s: a %dx%d kernel does not fit a %dx%d input with valid padding", f,
                              l->kh, l->kw, shape[0], shape[1]);
                goto out;
            }
            so[0] = (shape[0] - l->kh) / l->sh + 1;
            so[1] = (shape[1] - l->kw) / l->sw + 1;
        }
        so[2] = l->filters;
        l->nw = (size_t)l->kh * l->kw * shape[2] * l->filters;
        l->nb = (size_t)l->filters;
        break;
    }
    case ENG_L_MAXPOOL: {
        if ((rc = get_pair(c, cfg, "pool", p, 2, 1, 1024, &l->ph, &l->pw))) goto out;
        if ((rc = get_pair(c, cfg, "stride", p, 0, 0, 1024, &l->psh, &l->psw))) goto out;
        if (!l->psh) l->psh = l->ph;
        if (!l->psw) l->psw = l->pw;
        if (*rank != 3) { rc = shape_fail(c, p, "maxpool2d needs an image input"); goto out; }
        if (l->ph > shape[0] || l->pw > shape[1]) {
            char f[200];
            snprintf(f, sizeof f, "%s.pool", p);
            rc = hpo_fail(c->err, HPO_ESHAPE, f, "%s: a %dx%d pool reduces a %dx%d input to nothing", f, l->ph, l->pw,
                          shape[0], shape[1]);
            goto out;
        }
        so[0] = (shape[0] - l->ph) / l->psh + 1;
        so[1] = (shape[1] - l->pw) / l->psw + 1;
        break;
    }
    case ENG_L_GAP:
        if (*rank != 3) { rc = shape_fail(c, p, "global_avg_pool needs an image input"); goto out; }
        ro = 1;
        so[0] = shape[2];
        so[1] = so[2] = 0;
        break;
    case ENG_L_FLATTEN:
        ro = 1;
        so[0] = (int)l->in_size;
        so[1] = so[2] = 0;
        break;
    case ENG_L_DROPOUT: {
        double r;
        if ((rc = get_num(c, cfg, "rate", p, NAN, 0.0, 0.999, &r))) goto out;
        l->rate = (float)r;
        break;
    }
    case ENG_L_BATCHNORM: {
        double mom, eps;
        if ((rc = get_num(c, cfg, "momentum", p, 0.99, 0.0, 1.0, &mom))) goto out;
        if ((rc = get_num(c, cfg, "epsilon", p, 1e-3, 1e-12, 1.0, &eps))) goto out;
        l->momentum = (float)mom;
        l->eps = (float)eps;
        l->nw = l->nb = (size_t)shape[*rank - 1];
        l->stat_off = c->nstats;
        c->nstats += 2 * l->nw;
        break;
    }
    case ENG_L_AUGMENT:
        if ((rc = get_int(c, cfg, "translate", p, 0, 0, 64, &l->translate))) goto out;
        if ((rc = get_bool(c, cfg, "flip", p, 0, &l->flip))) goto out;
        if (*rank != 3) { rc = shape_fail(c, p, "augment needs an image input"); goto out; }
        break;
    case ENG_L_ACT:
        if ((rc = get_act(c, cfg, "name", p, &l->act))) goto out;
        break;
    case ENG_L_RESIDUAL: {
        const json_t *arr = json_object_get(cfg, "layers");
        char sp[192];
        snprintf(sp, sizeof sp, "%s.layers", p);
        if (!json_is_array(arr) || json_array_size(arr) == 0) {
            rc = hpo_fail(c->err, HPO_EINVAL, sp, "%s must be a non-empty array of layers", sp);
            goto out;
        }
        if ((rc = get_act(c, cfg, "activation", p, &l->act))) goto out;
        int r2 = *rank, s2[3] = {shape[0], shape[1], shape[2]};
        if ((rc = build_list(c, arr, sp, &r2, s2, &l->sub, &l->nsub))) goto out;
        ro = r2;
        memcpy(so, s2, sizeof so);
        if (!(r2 == *rank && numel(r2, s2) == l->in_size && !memcmp(s2, shape, sizeof s2)))
            if ((rc = make_proj(c, l, *rank, shape, r2, s2, p))) goto out;
        break;
    }
    }
    if ((kind == ENG_L_DENSE || kind == ENG_L_CONV2D) && (rc = get_str(c, cfg, "precision", p, NULL, &prec))) goto out;
    if (prec) {
        if (!strcmp(prec, "fp32")) l->fp32_only = 1;
        else if (strcmp(prec, "auto") && strcmp(prec, "mixed")) {
            rc = fail_field(c, HPO_EINVAL, p, "precision", "%s must be \"fp32\" (opt out of mixed precision), not \"%s\"", prec);
            goto out;
        }
    }
    if (l->nw) {
        l->w_off = c->nparams;
        l->b_off = c->nparams + l->nw;
        if ((rc = add_params(c, l->nw + l->nb, p))) goto out;
    }
    for (int i = 0; i < ro; i++)
        if (so[i] <= 0) { rc = shape_fail(c, p, "the layer's output would be empty"); goto out; }
    l->out_rank = ro;
    memcpy(l->out_shape, so, sizeof l->out_shape);
    l->out_size = numel(ro, so);
    if (l->out_size > INT32_MAX) { /* sizes per sample are ints in places (flatten, kernels) */
        rc = hpo_fail(c->err, HPO_ETOOLARGE, p, "%s: the layer's output would have more than 2^31 - 1 values per sample", p);
        goto out;
    }
    *rank = ro;
    memcpy(shape, so, sizeof so);
    rc = 0;
out:
    json_decref(tmp);
    return rc;
}

static int build_list(ctx *c, const json_t *arr, const char *path, int *rank, int *shape, eng_layer **out, int *n) {
    size_t cnt = json_array_size(arr);
    eng_layer *ls = hpo_xcalloc(cnt ? cnt : 1, sizeof *ls);
    *out = ls;
    *n = (int)cnt;
    for (size_t i = 0; i < cnt; i++) {
        char p[192];
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        int rc = build_layer(c, json_array_get(arr, i), p, rank, shape, &ls[i]);
        if (rc) return rc;
    }
    /* conv2d(relu) + maxpool2d: apply the relu after the pool (max and relu
     * commute), on a 4x smaller tensor; saves a pass over the conv output
     * forward and backward. The results are the same. */
    for (size_t i = 0; i + 1 < cnt; i++)
        if (ls[i].kind == ENG_L_CONV2D && ls[i + 1].kind == ENG_L_MAXPOOL &&
            (ls[i].act == ENG_ACT_RELU || ls[i].act == ENG_ACT_NONE)) {
            ls[i + 1].act = ls[i].act;
            ls[i].act = ENG_ACT_NONE;
            ls[i].pool_fused = 1;
        }
    return 0;
}

static void free_list(eng_layer *ls, int n);

static void free_list(eng_layer *ls, int n) {
    if (!ls) return;
    for (int i = 0; i < n; i++) {
        eng_layer_free_bufs(&ls[i]);
        free_list(ls[i].sub, ls[i].nsub);
        if (ls[i].proj) {
            eng_layer_free_bufs(ls[i].proj);
            free(ls[i].proj);
        }
    }
    free(ls);
}

/* Glorot-uniform weights, zero biases, BN gamma 1 / running var 1. */
static void init_list(eng_model *m, eng_layer *ls, int n, hpo_rng *r) {
    for (int i = 0; i < n; i++) {
        eng_layer *l = &ls[i];
        if (l->kind == ENG_L_RESIDUAL) {
            init_list(m, l->sub, l->nsub, r);
            if (l->proj) init_list(m, l->proj, 1, r);
            continue;
        }
        if (l->kind == ENG_L_BATCHNORM) {
            for (size_t k = 0; k < l->nw; k++) {
                m->params[l->w_off + k] = 1.0f;
                m->params[l->b_off + k] = 0.0f;
                m->stats[l->stat_off + k] = 0.0f;
                m->stats[l->stat_off + l->nw + k] = 1.0f;
            }
            continue;
        }
        if (!l->nw) continue;
        double fan_in, fan_out;
        if (l->kind == ENG_L_CONV2D) {
            fan_in = (double)l->kh * l->kw * l->in_shape[2];
            fan_out = (double)l->kh * l->kw * l->filters;
        } else {
            fan_in = (double)l->in_shape[l->in_rank - 1];
            fan_out = (double)l->units;
        }
        float lim = (float)sqrt(6.0 / (fan_in + fan_out));
        for (size_t k = 0; k < l->nw; k++) m->params[l->w_off + k] = (2.0f * hpo_rng_uniform_f(r) - 1.0f) * lim;
        memset(m->params + l->b_off, 0, l->nb * sizeof(float));
    }
}

static double flops_list(const eng_layer *ls, int n) {
    double f = 0;
    for (int i = 0; i < n; i++) {
        const eng_layer *l = &ls[i];
        if (l->kind == ENG_L_DENSE) f += 6.0 * l->nw * (l->in_size / l->in_shape[l->in_rank - 1]);
        if (l->kind == ENG_L_CONV2D) f += 6.0 * l->nw * l->out_shape[0] * l->out_shape[1];
        if (l->kind == ENG_L_RESIDUAL) f += flops_list(l->sub, l->nsub) + (l->proj ? flops_list(l->proj, 1) : 0);
    }
    return f;
}

double eng_model_forward_flops(const eng_model *m) { return flops_list(m->layers, m->nlayers) / 3.0; }

/* The keys each optimiser reads (eng_optim_step), by eng_opt_kind, and
 * each schedule (eng_schedule_lr), by eng_sched_kind: a build takes any of
 * them (a study stored before eng_model_check_keys existed still trains),
 * the check refuses the others. clipnorm is the global norm's (PyTorch's
 * clip_grad_norm_); global_clipnorm, Keras' name for that, says the same. */
static const char *const optimizer_keys[][9] = {
    {"name", "learning_rate", "momentum", "nesterov", "weight_decay", "clipnorm", "global_clipnorm", NULL},
    {"name", "learning_rate", "momentum", "rho", "epsilon", "weight_decay", "clipnorm", "global_clipnorm", NULL},
    {"name", "learning_rate", "beta_1", "beta_2", "epsilon", "weight_decay", "clipnorm", "global_clipnorm", NULL},
    {"name", "learning_rate", "beta_1", "beta_2", "epsilon", "weight_decay", "clipnorm", "global_clipnorm", NULL},
};
static const char *const any_optimizer_keys[] = {"name",     "learning_rate",   "momentum", "nesterov",
                                                 "weight_decay", "clipnorm", "global_clipnorm", "beta_1",
                                                 "beta_2",   "epsilon",         "rho",      NULL};
static const char *const schedule_keys[][6] = {
    {"name", "warmup_steps", "warmup_epochs", NULL},
    {"name", "warmup_steps", "warmup_epochs", "step_epochs", "gamma", NULL},
    {"name", "warmup_steps", "warmup_epochs", "boundaries", "values", NULL},
    {"name", "warmup_steps", "warmup_epochs", "decay_rate", "decay_steps", NULL},
    {"name", "warmup_steps", "warmup_epochs", "cosine_steps", "alpha", NULL},
};
static const char *const any_schedule_keys[] = {"name",        "warmup_steps", "warmup_epochs", "step_epochs",
                                                "gamma",       "decay_rate",   "decay_steps",   "cosine_steps",
                                                "alpha",       "boundaries",   "values",        NULL};

static int parse_optimizer(ctx *c, const json_t *o, eng_optim_config *oc) {
    const char *p = "model.optimizer";
    const char *name = "adam";
    int rc;
    if (o && json_is_string(o)) {
        name = json_string_value(o);
        o = NULL;
    } else if (o && !json_is_object(o)) {
        return hpo_fail(c->err, HPO_EINVAL, p, "%s must be an object or a name", p);
    }
    if (o && (rc = get_str(c, o, "name", p, "adam", &name))) return rc;
    int kind = eng_opt_parse(name);
    if (kind < 0) return hpo_fail(c->err, HPO_EINVAL, "model.optimizer.name", "model.optimizer.name: unknown optimizer \"%s\"", name);
    if (o && (rc = only_keys(c, o, any_optimizer_keys, p))) return rc;
    eng_optim_defaults(oc, kind);
    if (!o) return 0;
    double lr = 0, mom = 0, wd = 0, clip = 0, b1 = 0, b2 = 0, eps = 0, rho = 0;
    int nest = 0;
    if ((rc = get_num(c, o, "learning_rate", p, oc->lr, 0.0, 1e9, &lr))) return rc;
    if ((rc = get_num(c, o, "momentum", p, 0.0, 0.0, 0.9999, &mom))) return rc;
    if ((rc = get_bool(c, o, "nesterov", p, 0, &nest))) return rc;
    if ((rc = get_num(c, o, "weight_decay", p, oc->weight_decay, 0.0, 10.0, &wd))) return rc;
    const char *clip_key = json_object_get(o, "global_clipnorm") ? "global_clipnorm" : "clipnorm";
    if ((rc = get_num(c, o, clip_key, p, 0.0, 0.0, 1e12, &clip))) return rc;
    if ((rc = get_num(c, o, "beta_1", p, oc->beta1, 0.0, 0.9999999, &b1))) return rc;
    if ((rc = get_num(c, o, "beta_2", p, oc->beta2, 0.0, 0.9999999, &b2))) return rc;
    if ((rc = get_num(c, o, "epsilon", p, oc->eps, 0.0, 1.0, &eps))) return rc;
    if ((rc = get_num(c, o, "rho", p, oc->rho, 0.0, 0.9999999, &rho))) return rc;
    oc->lr = (float)lr;
    oc->momentum = (float)mom;
    oc->nesterov = nest;
    oc->weight_decay = (float)wd;
    oc->clipnorm = (float)clip;
    oc->beta1 = (float)b1;
    oc->beta2 = (float)b2;
    oc->eps = (float)eps;
    oc->rho = (float)rho;
    if (nest && oc->kind == ENG_OPT_SGD && mom == 0.0)
        return hpo_fail(c->err, HPO_EINVAL, "model.optimizer.nesterov", "model.optimizer.nesterov needs a momentum > 0");
    return 0;
}

static int parse_schedule(ctx *c, const json_t *o, double base_lr, eng_schedule *s) {
    const char *p = "model.schedule", *name = "constant";
    int rc;
    memset(s, 0, sizeof *s);
    if (!o) return 0;
    if (json_is_string(o)) {
        name = json_string_value(o);
        o = NULL;
    } else if (!json_is_object(o)) {
        return hpo_fail(c->err, HPO_EINVAL, p, "%s must be an object or a name", p);
    }
    if (o && (rc = get_str(c, o, "name", p, "constant", &name))) return rc;
    s->kind = eng_sched_parse(name);
    if (s->kind < 0) return hpo_fail(c->err, HPO_EINVAL, "model.schedule.name", "model.schedule.name: unknown schedule \"%s\"", name);
    if (o && (rc = only_keys(c, o, any_schedule_keys, p))) return rc;
    if (!o) return 0;
    if ((rc = get_num(c, o, "warmup_steps", p, 0, 0, 1e9, &s->warmup_steps))) return rc;
    if ((rc = get_num(c, o, "warmup_epochs", p, 0, 0, 1e6, &s->warmup_epochs))) return rc;
    if ((rc = get_num(c, o, "step_epochs", p, 10, 1e-9, 1e6, &s->step_epochs))) return rc;
    if ((rc = get_num(c, o, "gamma", p, 0.1, 0, 1e3, &s->gamma))) return rc;
    if ((rc = get_num(c, o, "decay_rate", p, 0.96, 0, 1e3, &s->decay_rate))) return rc;
    if ((rc = get_num(c, o, "decay_steps", p, 0, 0, 1e12, &s->decay_steps))) return rc;
    if ((rc = get_num(c, o, "cosine_steps", p, 0, 0, 1e12, &s->cosine_steps))) return rc;
    if ((rc = get_num(c, o, "alpha", p, 0, 0, 1, &s->alpha))) return rc;
    if (s->kind == ENG_SCHED_PIECEWISE) {
        const json_t *b = json_object_get(o, "boundaries"), *v = json_object_get(o, "values");
        if (!json_is_array(b) || !json_is_array(v) || json_array_size(v) != json_array_size(b) + 1 ||
            json_array_size(b) > ENG_SCHED_MAX_PIECES)
            return hpo_fail(c->err, HPO_EINVAL, "model.schedule.values",
                            "model.schedule: piecewise needs \"boundaries\" (epochs, at most %d) and one more \"values\"",
                            ENG_SCHED_MAX_PIECES);
        s->n_bounds = (int)json_array_size(b);
        for (size_t i = 0; i <= json_array_size(b); i++) {
            char key[8];
            json_t *tmp = json_object();
            if (i < json_array_size(b)) json_object_set(tmp, "b", json_array_get(b, i));
            json_object_set(tmp, "v", json_array_get(v, i));
            snprintf(key, sizeof key, "%zu", i);
            rc = i < json_array_size(b) ? get_num(c, tmp, "b", "model.schedule.boundaries", NAN, 0, 1e9, &s->bounds[i]) : 0;
            if (!rc) rc = get_num(c, tmp, "v", "model.schedule.values", NAN, 0, 100, &s->values[i]);
            json_decref(tmp);
            if (rc) return rc;
        }
    }
    (void)base_lr;
    return 0;
}

/* The optimizer's or schedule's object (o) against the keys its kind reads;
 * kind_of maps the (resolved) name to the kind, -1 when unknown (the build
 * names that). */
static int check_kind_keys(ctx *c, const json_t *o, const char *p, const char *default_name,
                           int (*kind_of)(const char *), const char *const *(*keys_of)(int)) {
    const char *name = default_name;
    int rc;
    if (!json_is_object(o)) return 0; /* a name alone, or what the build refuses */
    if ((rc = get_str(c, o, "name", p, default_name, &name))) return rc;
    int kind = kind_of(name);
    if (kind < 0) return 0;
    char what[64];
    snprintf(what, sizeof what, "%s %s", p, name);
    return only_keys_of(c, o, keys_of(kind), p, what);
}

static const char *const *optimizer_keys_of(int kind) { return optimizer_keys[kind]; }
static const char *const *schedule_keys_of(int kind) { return schedule_keys[kind]; }

int eng_model_check_keys(const json_t *tmpl, const json_t *params, hpo_error *err) {
    ctx c = {params, err, 0, 0};
    if (!json_is_object(tmpl)) return 0;
    const json_t *o = json_object_get(tmpl, "optimizer");
    int rc = check_kind_keys(&c, o, "model.optimizer", "adam", eng_opt_parse, optimizer_keys_of);
    if (rc) return rc;
    if (json_is_object(o) && json_object_get(o, "clipnorm") && json_object_get(o, "global_clipnorm"))
        return hpo_fail(err, HPO_EINVAL, "model.optimizer.global_clipnorm",
                        "model.optimizer: clipnorm and global_clipnorm are one setting (the global norm): give one");
    return check_kind_keys(&c, json_object_get(tmpl, "schedule"), "model.schedule", "constant", eng_sched_parse,
                           schedule_keys_of);
}

int eng_model_new_shape(const json_t *tmpl, const json_t *params, int in_rank, const int *in_shape, int n_classes,
                        eng_model **out, hpo_error *err) {
    ctx c = {params, err, 0, 0};
    int rc;
    eng_model *m = NULL;
    if (!json_is_object(tmpl)) return hpo_fail(err, HPO_EINVAL, "model", "model must be a JSON object");
    static const char *const model_keys[] = {"layers", "loss", "optimizer", "schedule", NULL};
    if ((rc = only_keys(&c, tmpl, model_keys, "model"))) return rc;
    const json_t *arr = json_object_get(tmpl, "layers");
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return hpo_fail(err, HPO_EINVAL, "model.layers", "model.layers must be a non-empty array");
    if (in_rank != 1 && in_rank != 3) return hpo_fail(err, HPO_ESHAPE, "dataset", "input must be a vector or an image");
    m = hpo_xcalloc(1, sizeof *m);
    m->be = eng_backend_cpu();
    m->in_rank = in_rank;
    for (int i = 0; i < in_rank; i++) m->in_shape[i] = in_shape[i];
    m->in_size = numel(in_rank, in_shape);
    if (m->in_size > INT32_MAX) {
        rc = hpo_fail(err, HPO_ETOOLARGE, "dataset", "samples of more than 2^31 - 1 values are not supported");
        goto fail;
    }
    int rank = in_rank, shape[3] = {m->in_shape[0], m->in_shape[1], m->in_shape[2]};
    if ((rc = build_list(&c, arr, "model.layers", &rank, shape, &m->layers, &m->nlayers))) goto fail;
    if (rank != 1) { /* name the usual cause: dense applied to an image acts on its channels only */
        const eng_layer *d = NULL;
        for (int i = 0; i < m->nlayers && !d; i++)
            if (m->layers[i].kind == ENG_L_DENSE && m->layers[i].in_rank == 3) d = &m->layers[i];
        if (d) {
            char f[128];
            snprintf(f, sizeof f, "model.%s.dense", d->path);
            rc = hpo_fail(err, HPO_ESHAPE, f,
                          "%s: dense on an image (%dx%dx%d) acts on its channels only, so the model's output is an "
                          "image (%dx%dx%d), not a vector; add {\"flatten\": {}} before it (or global_avg_pool)",
                          f, d->in_shape[0], d->in_shape[1], d->in_shape[2], shape[0], shape[1], shape[2]);
        } else {
            rc = hpo_fail(err, HPO_ESHAPE, "model.layers",
                          "model.layers: the model's output must be a vector, not an image (%dx%dx%d); add flatten or "
                          "global_avg_pool", shape[0], shape[1], shape[2]);
        }
        goto fail;
    }
    m->out_dim = shape[0];
    const char *lname = "sparse_categorical_crossentropy";
    if ((rc = get_str(&c, tmpl, "loss", "model", lname, &lname))) goto fail;
    m->loss = eng_loss_parse(lname);
    if (m->loss < 0) {
        rc = hpo_fail(err, HPO_EINVAL, "model.loss", "model.loss: unknown loss \"%s\"", lname);
        goto fail;
    }
    if (m->loss == ENG_LOSS_SCCE && n_classes > 0 && m->out_dim != n_classes) {
        char f[64];
        snprintf(f, sizeof f, "model.layers[%d]", m->nlayers - 1);
        rc = hpo_fail(err, HPO_ESHAPE, f, "%s: the last layer has %d outputs but the dataset has %d classes", f, m->out_dim,
                      n_classes);
        goto fail;
    }
    /* binary cross-entropy reads each label as a target in [0, 1]: one
     * output takes two classes, else one output per class (multi-label) */
    if (m->loss == ENG_LOSS_BCE && n_classes > 0 && !(m->out_dim == 1 && n_classes <= 2) &&
        m->out_dim != n_classes) {
        rc = hpo_fail(err, HPO_ESHAPE, "model.loss",
                      "model.loss: binary_crossentropy with %d output(s) takes 2 classes (one sigmoid output) or one "
                      "output per class; the dataset has %d classes (use sparse_categorical_crossentropy)",
                      m->out_dim, n_classes);
        goto fail;
    }
    /* the final activation fused into the loss */
    eng_layer *last = &m->layers[m->nlayers - 1];
    int fusable = m->loss == ENG_LOSS_SCCE ? ENG_ACT_SOFTMAX : m->loss == ENG_LOSS_BCE ? ENG_ACT_SIGMOID : -1;
    m->final_act = m->loss == ENG_LOSS_SCCE ? ENG_ACT_SOFTMAX : ENG_ACT_NONE;
    if (fusable >= 0 && (last->kind == ENG_L_DENSE || last->kind == ENG_L_CONV2D || last->kind == ENG_L_ACT) &&
        last->act == fusable) {
        m->final_act = fusable;
        last->act = ENG_ACT_NONE; /* an ACT layer with NONE is the identity */
    }
    if ((rc = parse_optimizer(&c, json_object_get(tmpl, "optimizer"), &m->opt))) goto fail;
    if ((rc = parse_schedule(&c, json_object_get(tmpl, "schedule"), m->opt.lr, &m->sched))) goto fail;
    m->nparams = c.nparams;
    m->nstats = c.nstats;
    m->nstate = eng_optim_state_floats(&m->opt) * m->nparams;
    m->flops_per_sample = flops_list(m->layers, m->nlayers);
    for (int i = 0; i < m->nlayers; i++) { /* the first layer computes no input gradient */
        const eng_layer *l = &m->layers[i];
        if (l->kind == ENG_L_DENSE || l->kind == ENG_L_CONV2D) {
            m->flops_per_sample -= flops_list(l, 1) / 3.0;
            break;
        }
        if (l->nw || l->kind == ENG_L_RESIDUAL) break;
    }
    m->shadow_dirty = 1;
    *out = m;
    return HPO_OK;
fail:
    eng_model_free(m);
    return rc;
}

/* The four blocks of eng_model_alloc: n floats each, plus one so that no
 * block is empty. */
static size_t block_floats(size_t n) { return eng_size_add(n, 1); }

size_t eng_model_block_bytes(const eng_model *m) {
    size_t b = 0;
    b = eng_size_add(b, eng_alloc_size(eng_size_mul(block_floats(m->nparams), sizeof(float)))); /* params */
    b = eng_size_add(b, eng_alloc_size(eng_size_mul(block_floats(m->nparams), sizeof(float)))); /* grads */
    b = eng_size_add(b, eng_alloc_size(eng_size_mul(block_floats(m->nstate), sizeof(float))));
    b = eng_size_add(b, eng_alloc_size(eng_size_mul(block_floats(m->nstats), sizeof(float))));
    return b;
}

int eng_model_alloc(eng_model *m, uint64_t seed, hpo_error *err) {
    if (m->params || m->is_replica) return hpo_fail(err, HPO_EINVAL, "model", "the model's parameters exist already");
    size_t np = (m->nparams + 1) * sizeof(float), ns = (m->nstate + 1) * sizeof(float),
           nb = (m->nstats + 1) * sizeof(float);
    m->params = eng_alloc(np);
    m->grads = m->params ? eng_alloc(np) : NULL;
    m->opt_state = m->grads ? eng_alloc(ns) : NULL;
    m->stats = m->opt_state ? eng_alloc(nb) : NULL;
    if (!m->stats) {
        free(m->params);
        free(m->grads);
        free(m->opt_state);
        m->params = m->grads = m->opt_state = NULL;
        char need[32];
        eng_format_bytes(eng_model_block_bytes(m), need, sizeof need);
        return hpo_fail(err, HPO_ENOMEM, "model", "out of memory for the model's %zu parameters (%s with gradients and "
                        "optimiser state)", m->nparams, need);
    }
    memset(m->grads, 0, np);
    memset(m->opt_state, 0, ns);
    hpo_rng r;
    hpo_rng_derive(&r, seed, 0x1217, 0);
    init_list(m, m->layers, m->nlayers, &r);
    hpo_rng_derive(&m->rng, seed, 0x1217, 1);
    m->shadow_dirty = 1;
    return HPO_OK;
}

int eng_model_new(const json_t *tmpl, const json_t *params, int in_rank, const int *in_shape, int n_classes,
                  uint64_t seed, eng_model **out, hpo_error *err) {
    eng_model *m = NULL;
    int rc = eng_model_new_shape(tmpl, params, in_rank, in_shape, n_classes, &m, err);
    if (rc == 0 && (rc = eng_model_alloc(m, seed, err))) eng_model_free(m);
    if (rc == 0) *out = m;
    return rc;
}

/* A copy of the layer tree without its batch buffers (reserve makes them);
 * NULL when out of memory. */
static eng_layer *clone_list(const eng_layer *ls, int n) {
    if (n < 0) n = 0;
    eng_layer *c = eng_alloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    if (!c) return NULL;
    memcpy(c, ls, (size_t)n * sizeof *c);
    for (int i = 0; i < n; i++) {
        eng_layer_drop_bufs(&c[i]); /* they are the original's */
        c[i].sub = NULL;
        c[i].proj = NULL;
    }
    int ok = 1;
    for (int i = 0; ok && i < n; i++) {
        if (ls[i].nsub) ok = (c[i].sub = clone_list(ls[i].sub, ls[i].nsub)) != NULL;
        if (ok && ls[i].proj) ok = (c[i].proj = clone_list(ls[i].proj, 1)) != NULL;
    }
    if (!ok) {
        free_list(c, n);
        return NULL;
    }
    return c;
}

static size_t list_bytes(const eng_layer *ls, int n) {
    size_t b = eng_alloc_size((size_t)(n > 0 ? n : 1) * sizeof *ls);
    for (int i = 0; i < n; i++) {
        if (ls[i].nsub) b = eng_size_add(b, list_bytes(ls[i].sub, ls[i].nsub));
        if (ls[i].proj) b = eng_size_add(b, list_bytes(ls[i].proj, 1));
    }
    return b;
}

size_t eng_model_replica_bytes(const eng_model *m, int cap, int precision) {
    size_t b = eng_alloc_size(sizeof *m);
    b = eng_size_add(b, list_bytes(m->layers, m->nlayers));
    b = eng_size_add(b, eng_alloc_size(eng_size_mul(block_floats(m->nparams), sizeof(float)))); /* grads */
    b = eng_size_add(b, eng_alloc_size(eng_size_mul(block_floats(m->nstats), sizeof(float))));
    return eng_size_add(b, eng_model_buffer_bytes(m, cap, precision, 1));
}

int eng_model_replica_new(eng_model *m, eng_model **out) {
    if (m->is_replica || m->cap < 1) return HPO_EINVAL;
    eng_model *r = eng_alloc(sizeof *r);
    if (!r) return HPO_ENOMEM;
    *r = *m;
    r->is_replica = 1;
    r->layers = clone_list(m->layers, m->nlayers);
    r->grads = r->layers ? eng_alloc((m->nparams + 1) * sizeof(float)) : NULL;
    r->stats = r->grads ? eng_alloc((m->nstats + 1) * sizeof(float)) : NULL;
    r->opt_state = NULL; /* the primary steps the optimiser */
    r->input = r->dlogits = NULL;
    r->in_b16 = NULL;
    r->shadow_dirty = 0; /* the primary refreshes the shared shadows */
    r->cap = 0;
    if (!r->stats) {
        eng_model_free(r);
        return HPO_ENOMEM;
    }
    memset(r->grads, 0, (m->nparams + 1) * sizeof(float));
    memcpy(r->stats, m->stats, (m->nstats + 1) * sizeof(float));
    int rc = eng_model_reserve(r, m->cap, m->precision);
    if (rc) {
        eng_model_free(r);
        return rc;
    }
    *out = r;
    return HPO_OK;
}

void eng_model_free(eng_model *m) {
    if (!m) return;
    free_list(m->layers, m->nlayers);
    free(m->grads);
    free(m->stats);
    if (!m->is_replica) { /* shared with the replicas */
        free(m->params);
        free(m->opt_state);
        free(m->params_h);
        free(m->params_b16);
    }
    free(m->input);
    free(m->dlogits);
    free(m);
}

void eng_layer_size_field(const eng_layer *l, char *buf, size_t len) {
    const char *pre = strncmp(l->path, "model.", 6) ? "model." : "";
    const char *key = l->kind == ENG_L_DENSE ? "units" : l->kind == ENG_L_CONV2D ? "filters" : NULL;
    if (l->proj == NULL && key && !strstr(l->path, ".projection"))
        snprintf(buf, len, "%s%s.%s.%s", pre, l->path, kind_names[l->kind], key);
    else
        snprintf(buf, len, "%s%s", pre, l->path);
}

static void largest_in(const eng_model *m, const eng_layer *ls, int n, int cap, int precision, size_t per_param,
                       const eng_layer **best, size_t *best_bytes) {
    for (int i = 0; i < n; i++) {
        const eng_layer *l = &ls[i];
        if (l->kind == ENG_L_RESIDUAL) { /* its inner layers and projection compete on their own */
            largest_in(m, l->sub, l->nsub, cap, precision, per_param, best, best_bytes);
            if (l->proj) largest_in(m, l->proj, 1, cap, precision, per_param, best, best_bytes);
            continue;
        }
        size_t b = eng_size_add(eng_size_mul(l->nw + l->nb, per_param), eng_layer_buffer_bytes(l, cap, precision));
        if (!*best || b > *best_bytes) {
            *best = l;
            *best_bytes = b;
        }
    }
}

const eng_layer *eng_model_largest_layer(const eng_model *m, int cap, int precision, size_t *bytes) {
    const eng_layer *best = NULL;
    size_t b = 0, per_param = sizeof(float) * (2 + eng_optim_state_floats(&m->opt));
    largest_in(m, m->layers, m->nlayers, cap, precision, per_param, &best, &b);
    if (bytes) *bytes = b;
    return best;
}

static void summary_list(const eng_layer *ls, int n, char *buf, size_t len, size_t *pos) {
    for (int i = 0; i < n && *pos < len; i++) {
        const eng_layer *l = &ls[i];
        char shp[48];
        if (l->out_rank == 3) snprintf(shp, sizeof shp, "%dx%dx%d", l->out_shape[0], l->out_shape[1], l->out_shape[2]);
        else snprintf(shp, sizeof shp, "%d", l->out_shape[0]);
        int k = snprintf(buf + *pos, len - *pos, "%s%s(%s%s%s)", *pos ? " " : "", kind_names[l->kind], shp,
                         l->act ? "," : "", l->act ? eng_act_name(l->act) : "");
        if (k > 0) *pos += (size_t)k;
        if (l->kind == ENG_L_RESIDUAL && *pos < len) {
            k = snprintf(buf + *pos, len - *pos, "[");
            if (k > 0) *pos += (size_t)k;
            summary_list(l->sub, l->nsub, buf, len, pos);
            if (*pos < len) {
                k = snprintf(buf + *pos, len - *pos, "]%s", l->proj ? "+proj" : "");
                if (k > 0) *pos += (size_t)k;
            }
        }
    }
}

void eng_model_summary(const eng_model *m, char *buf, size_t len) {
    size_t pos = 0;
    if (!len) return;
    buf[0] = 0;
    summary_list(m->layers, m->nlayers, buf, len, &pos);
    if (pos < len) snprintf(buf + pos, len - pos, "; %zu params; loss %s; %s lr %g", m->nparams, eng_loss_name(m->loss),
                            eng_opt_name(m->opt.kind), m->opt.lr);
}

int eng_layer_param_views(const eng_model *m, const eng_layer *l, eng_tensor *kernel, eng_tensor *bias) {
    if (!l->nw) return HPO_EINVAL;
    int ks[4], kr, bs[1] = {(int)l->nb};
    if (l->kind == ENG_L_CONV2D) {
        ks[0] = l->kh;
        ks[1] = l->kw;
        ks[2] = l->in_shape[2];
        ks[3] = l->filters;
        kr = 4;
    } else if (l->kind == ENG_L_DENSE) {
        ks[0] = l->in_shape[l->in_rank - 1];
        ks[1] = l->units;
        kr = 2;
    } else {
        ks[0] = (int)l->nw;
        kr = 1;
    }
    if (kernel) *kernel = eng_tensor_view(ENG_F32, m->params + l->w_off, kr, ks);
    if (bias) *bias = eng_tensor_view(ENG_F32, m->params + l->b_off, 1, bs);
    return HPO_OK;
}
