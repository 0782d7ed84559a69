/* weights.c - model weights files ("hpo-model-1" safetensors with named
 * per-layer tensors and the metadata that rebuilds the model), weights from
 * a trial checkpoint, and batch predictions over splits or caller rows
 * (weights.h). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_text.h"
#include "ops.h"
#include "safetensors.h"
#include "train.h"
#include "weights.h"

#pragma GCC diagnostic ignored "-Wformat-truncation"

#define NAME_LEN 224

/* ---- the model's tensors, in layer order ---- */

typedef struct wt_entry {
    char name[NAME_LEN];
    float *data;     /* into m->params or m->stats */
    int rank;
    int64_t shape[4];
    size_t n;        /* elements */
} wt_entry;

typedef struct wt_list {
    wt_entry *e;
    size_t n, cap;
} wt_list;

static void list_free(wt_list *t) {
    free(t->e);
    memset(t, 0, sizeof *t);
}

static int push(wt_list *t, const char *base, const char *role, float *data, int rank, const int64_t *shape,
                hpo_error *err) {
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 32;
        wt_entry *ne = realloc(t->e, nc * sizeof *ne);
        if (!ne) return hpo_fail(err, HPO_ENOMEM, "", "out of memory listing the model's tensors");
        t->e = ne;
        t->cap = nc;
    }
    wt_entry *e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    int k = snprintf(e->name, sizeof e->name, "%s.%s", base, role);
    if (k < 0 || (size_t)k >= sizeof e->name)
        return hpo_fail(err, HPO_ETOOLARGE, base, "tensor name %s.%s is too long", base, role);
    e->data = data;
    e->rank = rank;
    e->n = 1;
    for (int i = 0; i < rank; i++) {
        e->shape[i] = shape[i];
        e->n *= (size_t)shape[i];
    }
    t->n++;
    return 0;
}

/* weight/bias (dense, conv2d, projections) or gamma/beta/running stats. */
static int push_layer(const eng_model *m, const eng_layer *l, const char *base, wt_list *t, hpo_error *err) {
    int rc;
    if (l->kind == ENG_L_BATCHNORM) {
        int64_t c[1] = {(int64_t)l->nw};
        if ((rc = push(t, base, "gamma", m->params + l->w_off, 1, c, err)) ||
            (rc = push(t, base, "beta", m->params + l->b_off, 1, c, err)) ||
            (rc = push(t, base, "running_mean", m->stats + l->stat_off, 1, c, err)) ||
            (rc = push(t, base, "running_var", m->stats + l->stat_off + l->nw, 1, c, err)))
            return rc;
        return 0;
    }
    int64_t ks[4], bs[1] = {(int64_t)l->nb};
    int kr;
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
        return hpo_fail(err, HPO_EINTERNAL, base, "%s: a layer of kind %d with parameters", base, l->kind);
    }
    if (ks[0] * ks[1] * (kr == 4 ? ks[2] * ks[3] : 1) != (int64_t)l->nw)
        return hpo_fail(err, HPO_EINTERNAL, base, "%s: kernel shape does not match its parameter count", base);
    if ((rc = push(t, base, "weight", m->params + l->w_off, kr, ks, err))) return rc;
    return push(t, base, "bias", m->params + l->b_off, 1, bs, err);
}

static const char *kind_name(int kind) {
    switch (kind) {
    case ENG_L_DENSE: return "dense";
    case ENG_L_CONV2D: return "conv2d";
    case ENG_L_BATCHNORM: return "batchnorm";
    default: return "layer";
    }
}

static int collect(const eng_model *m, const eng_layer *ls, int n, wt_list *t, hpo_error *err) {
    for (int i = 0; i < n; i++) {
        const eng_layer *l = &ls[i];
        char base[NAME_LEN];
        int rc;
        if (l->kind == ENG_L_RESIDUAL) {
            if ((rc = collect(m, l->sub, l->nsub, t, err))) return rc;
            if (l->proj) {
                snprintf(base, sizeof base, "%s.residual.projection", l->path);
                if ((rc = push_layer(m, l->proj, base, t, err))) return rc;
            }
            continue;
        }
        if (!l->nw) continue;
        snprintf(base, sizeof base, "%s.%s", l->path, kind_name(l->kind));
        if ((rc = push_layer(m, l, base, t, err))) return rc;
    }
    return 0;
}

static int model_tensors(const eng_model *m, wt_list *t, hpo_error *err) {
    memset(t, 0, sizeof *t);
    int rc = collect(m, m->layers, m->nlayers, t, err);
    if (rc) list_free(t);
    return rc;
}

/* ---- metadata ---- */

/* A deep copy of v with every "$name" string whose name is in params
 * replaced by that value. NULL on out of memory. */
static json_t *expand(const json_t *v, const json_t *params) {
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        const json_t *p = s[0] == '$' && json_is_object(params) ? json_object_get(params, s + 1) : NULL;
        return json_deep_copy(p ? p : v);
    }
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *k;
        json_t *x;
        if (!o) return NULL;
        json_object_foreach((json_t *)v, k, x) {
            json_t *c = expand(x, params);
            if (!c || json_object_set_new(o, k, c)) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    }
    if (json_is_array(v)) {
        json_t *a = json_array();
        size_t i;
        json_t *x;
        if (!a) return NULL;
        json_array_foreach(v, i, x) {
            json_t *c = expand(x, params);
            if (!c || json_array_append_new(a, c)) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    return json_deep_copy(v);
}

static const char *const reserved[] = {"format", "template", "params", "input_shape", "n_classes",
                                       "out_dim", "nparams", "loss", "layout", "summary"};

static int is_reserved(const char *k) {
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (!strcmp(k, reserved[i])) return 1;
    return 0;
}

/* Set key to the compact JSON text of v (reals in shortest form: the
 * template's dropout 0.4, not 0.40000000000000002). */
static int meta_json(eng_st_writer *w, const char *key, const json_t *v) {
    char *s = hpo_json_text_shortest(json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY));
    if (!s) return HPO_ENOMEM;
    int rc = eng_st_writer_meta(w, key, s);
    free(s);
    return rc;
}

static int meta_int(eng_st_writer *w, const char *key, long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return eng_st_writer_meta(w, key, buf);
}

static int add_metadata(const eng_model *m, eng_st_writer *w, const json_t *md, hpo_error *err) {
    int rc;
    const json_t *tmpl = md ? json_object_get(md, "template") : NULL;
    const json_t *params = md ? json_object_get(md, "params") : NULL;
    const json_t *ncl = md ? json_object_get(md, "n_classes") : NULL;
    if (md && !json_is_object(md)) return hpo_fail(err, HPO_EINVAL, "metadata", "metadata must be a JSON object");
    if (tmpl && !json_is_object(tmpl))
        return hpo_fail(err, HPO_EINVAL, "metadata.template", "metadata.template must be the model template object");
    if (params && !json_is_object(params) && !json_is_null(params))
        return hpo_fail(err, HPO_EINVAL, "metadata.params", "metadata.params must be an object or null");
    if (ncl && !json_is_integer(ncl))
        return hpo_fail(err, HPO_EINVAL, "metadata.n_classes", "metadata.n_classes must be an integer");
    if (params && json_is_null(params)) params = NULL;

    /* the caller's members first, so the reserved keys below win */
    if (md) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)md, k, v) {
            if (is_reserved(k)) continue;
            if (json_is_string(v)) rc = eng_st_writer_meta(w, k, json_string_value(v));
            else if (json_is_integer(v)) rc = meta_int(w, k, (long long)json_integer_value(v));
            else rc = meta_json(w, k, v); /* reals, booleans, null, objects, arrays as JSON text */
            if (rc) return rc;
        }
    }
    if ((rc = eng_st_writer_meta(w, "format", ENG_WEIGHTS_FORMAT))) return rc;
    if (tmpl) {
        json_t *x = expand(tmpl, params);
        if (!x) return HPO_ENOMEM;
        rc = meta_json(w, "template", x);
        json_decref(x);
        if (rc) return rc;
    }
    if (params) rc = meta_json(w, "params", params);
    else rc = eng_st_writer_meta(w, "params", "{}");
    if (rc) return rc;
    char shp[64];
    if (m->in_rank == 3) snprintf(shp, sizeof shp, "[%d,%d,%d]", m->in_shape[0], m->in_shape[1], m->in_shape[2]);
    else snprintf(shp, sizeof shp, "[%d]", m->in_shape[0]);
    long long nc = ncl ? (long long)json_integer_value(ncl) : m->loss == ENG_LOSS_SCCE ? m->out_dim : 0;
    char summary[2048];
    eng_model_summary(m, summary, sizeof summary);
    if ((rc = eng_st_writer_meta(w, "input_shape", shp)) || (rc = meta_int(w, "n_classes", nc)) ||
        (rc = meta_int(w, "out_dim", m->out_dim)) || (rc = meta_int(w, "nparams", (long long)m->nparams)) ||
        (rc = eng_st_writer_meta(w, "loss", eng_loss_name(m->loss))) ||
        (rc = eng_st_writer_meta(w, "layout", "dense IO, conv HWIO, NHWC")) ||
        (rc = eng_st_writer_meta(w, "summary", summary)))
        return rc;
    return 0;
}

/* A writer holding m's tensors (borrowed from m) and the metadata. */
static int build_writer(const eng_model *m, const json_t *md, eng_st_writer **out, wt_list *t, hpo_error *err) {
    eng_st_writer *w = eng_st_writer_new();
    int rc;
    if (!w) return HPO_ENOMEM;
    if ((rc = model_tensors(m, t, err))) goto fail;
    for (size_t i = 0; i < t->n; i++)
        if ((rc = eng_st_writer_add(w, t->e[i].name, ENG_ST_F32, t->e[i].rank, t->e[i].shape, t->e[i].data, err)))
            goto fail;
    if ((rc = add_metadata(m, w, md, err))) goto fail;
    *out = w;
    return 0;
fail:
    if (rc == HPO_ENOMEM) hpo_fail(err, rc, "", "out of memory writing the model's weights");
    list_free(t);
    eng_st_writer_free(w);
    return rc;
}

int eng_model_export_weights(const eng_model *m, const char *path, const json_t *metadata, hpo_error *err) {
    eng_st_writer *w = NULL;
    wt_list t;
    int rc = build_writer(m, metadata, &w, &t, err);
    if (rc) return rc;
    rc = eng_st_write_file(w, path, err);
    eng_st_writer_free(w);
    list_free(&t);
    return rc;
}

int eng_model_export_weights_buffer(const eng_model *m, const json_t *metadata, void **buf, size_t *len,
                                    hpo_error *err) {
    eng_st_writer *w = NULL;
    wt_list t;
    int rc = build_writer(m, metadata, &w, &t, err);
    if (rc) return rc;
    rc = eng_st_write_buffer(w, buf, len, err);
    eng_st_writer_free(w);
    list_free(&t);
    return rc;
}

/* ---- loading ---- */

static int load_from(eng_model *m, const eng_st_file *f, const char *path, hpo_error *err) {
    wt_list t;
    int rc;
    const char *fmt = eng_st_meta(f, "format");
    if (!fmt || strcmp(fmt, ENG_WEIGHTS_FORMAT))
        return hpo_fail(err, HPO_EFORMAT, "weights", "%s is not an %s weights file (format \"%s\")", path,
                        ENG_WEIGHTS_FORMAT, fmt ? fmt : "");
    if ((rc = model_tensors(m, &t, err))) return rc;
    /* check everything before touching the model */
    for (size_t i = 0; i < t.n; i++) {
        const wt_entry *e = &t.e[i];
        const eng_st_tensor *s = eng_st_find(f, e->name);
        if (!s) {
            rc = hpo_fail(err, HPO_EFORMAT, e->name, "%s: tensor \"%s\" is missing", path, e->name);
            goto out;
        }
        int same = s->dtype == ENG_ST_F32 && s->rank == e->rank && s->nbytes == e->n * sizeof(float);
        for (int d = 0; same && d < e->rank; d++) same = s->shape[d] == e->shape[d];
        if (!same) {
            char want[96], got[96];
            int p = snprintf(want, sizeof want, "F32 [");
            for (int d = 0; d < e->rank; d++) p += snprintf(want + p, sizeof want - (size_t)p, "%s%" PRId64, d ? ", " : "", e->shape[d]);
            snprintf(want + p, sizeof want - (size_t)p, "]");
            p = snprintf(got, sizeof got, "%s [", eng_st_dtype_name(s->dtype));
            for (int d = 0; d < s->rank && p < (int)sizeof got; d++)
                p += snprintf(got + p, sizeof got - (size_t)p, "%s%" PRId64, d ? ", " : "", s->shape[d]);
            if (p < (int)sizeof got) snprintf(got + p, sizeof got - (size_t)p, "]");
            rc = hpo_fail(err, HPO_EFORMAT, e->name, "%s: tensor \"%s\" is %s, the model needs %s", path, e->name, got,
                          want);
            goto out;
        }
    }
    if (eng_st_count(f) != t.n) {
        /* a tensor the model does not have: name the first */
        for (size_t j = 0; j < eng_st_count(f); j++) {
            const char *nm = eng_st_get(f, j)->name;
            size_t i = 0;
            while (i < t.n && strcmp(t.e[i].name, nm)) i++;
            if (i == t.n) {
                rc = hpo_fail(err, HPO_EFORMAT, nm, "%s: tensor \"%s\" is not part of this model", path, nm);
                goto out;
            }
        }
    }
    for (size_t i = 0; i < t.n; i++) memcpy(t.e[i].data, eng_st_find(f, t.e[i].name)->data, t.e[i].n * sizeof(float));
    eng_model_params_changed(m);
    rc = 0;
out:
    list_free(&t);
    return rc;
}

int eng_model_load_weights(eng_model *m, const char *path, hpo_error *err) {
    eng_st_file *f = NULL;
    int rc = eng_st_read_file(path, &f, err);
    if (rc) return rc;
    rc = load_from(m, f, path, err);
    eng_st_file_free(f);
    return rc;
}

static json_t *meta_parse(const eng_st_file *f, const char *key, const char *path, hpo_error *err) {
    const char *s = eng_st_meta(f, key);
    json_error_t je;
    json_t *j = s ? json_loads(s, JSON_DECODE_ANY, &je) : NULL;
    if (!j)
        hpo_fail(err, HPO_EFORMAT, key, "%s: metadata \"%s\" is %s", path, key, s ? "not valid JSON" : "missing");
    return j;
}

int eng_model_new_from_weights(const char *path, eng_model **out, json_t **metadata_out,
                               hpo_error *err) {
    eng_st_file *f = NULL;
    eng_model *m = NULL;
    json_t *tmpl = NULL, *params = NULL, *shape = NULL, *ncl = NULL, *md = NULL;
    int rc = eng_st_read_file(path, &f, err), in_shape[3] = {0, 0, 0}, rank;
    if (rc) return rc;
    const char *fmt = eng_st_meta(f, "format");
    if (!fmt || strcmp(fmt, ENG_WEIGHTS_FORMAT)) {
        rc = hpo_fail(err, HPO_EFORMAT, "weights", "%s is not an %s weights file", path, ENG_WEIGHTS_FORMAT);
        goto fail;
    }
    rc = HPO_EFORMAT;
    if (!(tmpl = meta_parse(f, "template", path, err)) || !(params = meta_parse(f, "params", path, err)) ||
        !(shape = meta_parse(f, "input_shape", path, err)) || !(ncl = meta_parse(f, "n_classes", path, err)))
        goto fail;
    rank = (int)json_array_size(shape);
    if (!json_is_object(tmpl) || !(json_is_object(params) || json_is_null(params)) || !json_is_integer(ncl) ||
        (rank != 1 && rank != 3)) {
        rc = hpo_fail(err, HPO_EFORMAT, "weights", "%s: metadata template/params/input_shape/n_classes malformed", path);
        goto fail;
    }
    for (int i = 0; i < rank; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > INT_MAX / 2) {
            rc = hpo_fail(err, HPO_EFORMAT, "input_shape", "%s: metadata input_shape must hold positive integers", path);
            goto fail;
        }
        in_shape[i] = (int)json_integer_value(d);
    }
    if ((rc = eng_model_new(tmpl, json_is_null(params) ? NULL : params, rank, in_shape, (int)json_integer_value(ncl), 0,
                            &m, err)))
        goto fail;
    if ((rc = load_from(m, f, path, err))) goto fail;
    if (metadata_out) {
        md = json_object();
        for (size_t i = 0; md && i < eng_st_meta_count(f); i++) {
            const char *k, *v;
            if (eng_st_meta_at(f, i, &k, &v) == 0 && json_object_set_new(md, k, json_string(v))) {
                json_decref(md);
                md = NULL;
            }
        }
        if (!md) {
            rc = hpo_fail(err, HPO_ENOMEM, "", "out of memory");
            goto fail;
        }
        *metadata_out = md;
    }
    *out = m;
    m = NULL;
    rc = 0;
fail:
    eng_model_free(m);
    json_decref(tmpl);
    json_decref(params);
    json_decref(shape);
    json_decref(ncl);
    eng_st_file_free(f);
    return rc;
}

int eng_model_from_checkpoint(eng_model *m, const char *checkpoint_path, int use_best, hpo_error *err) {
    eng_train_state st;
    int has_best = 0, rc;
    float *best = use_best ? malloc((m->nparams + m->nstats + 1) * sizeof(float)) : NULL;
    if (use_best && !best) return hpo_fail(err, HPO_ENOMEM, "", "out of memory");
    rc = eng_checkpoint_load(m, checkpoint_path, &st, best, &has_best, err);
    if (rc == 0 && use_best && has_best) { /* the parameters, then that epoch's BN statistics */
        memcpy(m->params, best, m->nparams * sizeof(float));
        if (m->nstats) memcpy(m->stats, best + m->nparams, m->nstats * sizeof(float));
        eng_model_params_changed(m);
    }
    free(best);
    return rc;
}

/* ---- predictions ---- */

static int ensure_cap(eng_model *m, size_t want) {
    if (m->cap >= 1) return 0;
    if (want < 1) want = 1;
    if (want > 256) want = 256;
    return eng_model_reserve(m, (int)want, m->precision);
}

int eng_predict_split(eng_model *m, const eng_split *s, int batch_size, float *out, hpo_error *err) {
    int rc;
    if (!s || !s->ds) return hpo_fail(err, HPO_EINVAL, "split", "no split");
    if (s->ds->sample_size != m->in_size)
        return hpo_fail(err, HPO_ESHAPE, "dataset", "the dataset's samples have %zu values, the model takes %zu",
                        s->ds->sample_size, m->in_size);
    if (batch_size < 1) batch_size = 256;
    if (m->cap < 1 && (rc = eng_model_reserve(m, batch_size, m->precision)))
        return hpo_fail(err, rc, "", "cannot reserve a batch of %d", batch_size);
    if (batch_size > m->cap) batch_size = m->cap;
    for (size_t first = 0; first < s->n; first += (size_t)batch_size) {
        size_t n = s->n - first < (size_t)batch_size ? s->n - first : (size_t)batch_size;
        const float *logits;
        if ((rc = eng_split_gather(s, first, n, ENG_BATCH_F32, m->input, NULL, NULL)))
            return hpo_fail(err, rc, "split", "gathering rows %zu..%zu failed", first, first + n);
        if ((rc = eng_model_forward(m, (int)n, 0, &logits)))
            return hpo_fail(err, rc, "", "forward pass failed on rows %zu..%zu", first, first + n);
        eng_act_forward(m->final_act, logits, out + first * (size_t)m->out_dim, n, (size_t)m->out_dim);
    }
    return 0;
}

int eng_predict_rows(eng_model *m, const float *x, size_t n, size_t row_size, float *out) {
    if (row_size != m->in_size) return HPO_ESHAPE;
    int rc = ensure_cap(m, n);
    if (rc) return rc;
    for (size_t first = 0; first < n; first += (size_t)m->cap) {
        size_t k = n - first < (size_t)m->cap ? n - first : (size_t)m->cap;
        if ((rc = eng_model_predict(m, x + first * m->in_size, (int)k, out + first * (size_t)m->out_dim))) return rc;
    }
    return 0;
}

void eng_weights_scale_u8(const uint8_t *src, size_t n, float *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i] * (1.0f / 255.0f);
}
