/* test_weights.c - model weights files (weights.h): names, shapes, offsets
 * and bytes checked by an independent header parser, load / open round trips
 * with bit-identical predictions, malformed and mismatched files, batch
 * predictions against eng_model_predict, weights from checkpoints. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data.h"
#include "model.h"
#include "safetensors.h"
#include "train.h"
#include "weights.h"

/* conv2d + batchnorm, a conv residual block with a strided 1x1 projection,
 * dense, a dense residual block with a projection, softmax output. */
static const char *tmpl_text =
    "{\"layers\":["
    "{\"conv2d\":{\"filters\":4,\"kernel\":3,\"padding\":\"same\",\"activation\":\"relu\"}},"
    "{\"batchnorm\":{\"momentum\":0.9}},"
    "{\"residual\":{\"layers\":[{\"conv2d\":{\"filters\":\"$f\",\"kernel\":3,\"padding\":\"same\",\"stride\":2}},"
    "{\"batchnorm\":{}}],\"activation\":\"relu\"}},"
    "{\"flatten\":{}},"
    "{\"dense\":{\"units\":\"$units\",\"activation\":\"relu\"}},"
    "{\"dropout\":{\"rate\":0.1}},"
    "{\"residual\":{\"layers\":[{\"dense\":{\"units\":5,\"activation\":\"tanh\"}}]}},"
    "{\"dense\":{\"units\":3,\"activation\":\"softmax\"}}],"
    "\"loss\":\"sparse_categorical_crossentropy\","
    "\"optimizer\":{\"name\":\"adam\",\"learning_rate\":\"$lr\"}}";
static const char *params_text = "{\"f\":6,\"units\":12,\"lr\":0.01}";
static const int in_shape[3] = {6, 6, 2};
#define NCLS 3
#define NROWS 70

static char dir[64];

static json_t *J(const char *s) {
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (!j) fprintf(stderr, "bad test JSON: %s\n", e.text);
    assert_non_null(j);
    return j;
}

static eng_model *build(const char *params, uint64_t seed) {
    json_t *t = J(tmpl_text), *p = J(params);
    eng_model *m = NULL;
    hpo_error err;
    int rc = eng_model_new(t, p, 3, in_shape, NCLS, seed, &m, &err);
    if (rc) printf("%s %s\n", err.field, err.message);
    assert_int_equal(rc, 0);
    json_decref(t);
    json_decref(p);
    return m;
}

static eng_dataset *synth(size_t n, uint64_t seed) {
    int64_t shape[3] = {6, 6, 2};
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_new("synthetic", n, 3, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    ds->x_scale = 1.0f / 255.0f;
    ds->n_classes = NCLS;
    hpo_rng r;
    hpo_rng_seed(&r, seed);
    uint8_t *x = ds->x;
    for (size_t i = 0; i < n; i++) {
        int cls = (int)hpo_rng_below(&r, NCLS);
        ds->y_class[i] = cls;
        for (size_t p = 0; p < 72; p++) x[i * 72 + p] = (uint8_t)(hpo_rng_below(&r, 100) + (p % 3 == (size_t)cls ? 120 : 0));
    }
    return ds;
}

/* A trained model (2 epochs: non-trivial weights and BN running stats). */
static eng_model *trained(eng_split *s) {
    eng_model *m = build(params_text, 11);
    eng_train_opts o;
    eng_train_result r;
    hpo_error err;
    eng_train_opts_init(&o);
    o.epochs = 2;
    o.batch_size = 16;
    o.threads = 1;
    o.seed = 3;
    o.patience = -1;
    int rc = eng_train(m, s, NULL, &o, &r, &err);
    if (rc) printf("train: %s\n", err.message);
    assert_int_equal(rc, 0);
    printf("  trained 2 epochs: loss %.4f acc %.3f, %zu params, %zu BN stats\n", r.train.loss, r.train.accuracy,
           m->nparams, m->nstats);
    return m;
}

static float *predict_all(eng_model *m, const eng_split *s) {
    float *out = malloc(s->n * m->out_dim * sizeof(float));
    hpo_error err;
    assert_non_null(out);
    assert_int_equal(eng_predict_split(m, s, 16, out, &err), 0);
    return out;
}

static void path_of(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* ---- the file, parsed here without safetensors.c ---- */

typedef struct expect {
    char name[128];
    int rank;
    int64_t shape[4];
    const float *data;
} expect;

static int nexp;
static expect exps[32];

static void want(const char *name, const float *data, int rank, int64_t a, int64_t b, int64_t c, int64_t d) {
    expect *e = &exps[nexp++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->rank = rank;
    e->shape[0] = a;
    e->shape[1] = b;
    e->shape[2] = c;
    e->shape[3] = d;
    e->data = data;
}

static void want_bn(const eng_model *m, const eng_layer *l, const char *base) {
    char n[128];
    int64_t c = (int64_t)l->nw;
    snprintf(n, sizeof n, "%s.gamma", base);
    want(n, m->params + l->w_off, 1, c, 0, 0, 0);
    snprintf(n, sizeof n, "%s.beta", base);
    want(n, m->params + l->b_off, 1, c, 0, 0, 0);
    snprintf(n, sizeof n, "%s.running_mean", base);
    want(n, m->stats + l->stat_off, 1, c, 0, 0, 0);
    snprintf(n, sizeof n, "%s.running_var", base);
    want(n, m->stats + l->stat_off + c, 1, c, 0, 0, 0);
}

static void expectations(const eng_model *m) {
    const eng_layer *L = m->layers, *r2 = L[2].sub, *r6 = L[6].sub;
    nexp = 0;
    want("layers[0].conv2d.weight", m->params + L[0].w_off, 4, 3, 3, 2, 4);
    want("layers[0].conv2d.bias", m->params + L[0].b_off, 1, 4, 0, 0, 0);
    want_bn(m, &L[1], "layers[1].batchnorm");
    want("layers[2].residual.layers[0].conv2d.weight", m->params + r2[0].w_off, 4, 3, 3, 4, 6);
    want("layers[2].residual.layers[0].conv2d.bias", m->params + r2[0].b_off, 1, 6, 0, 0, 0);
    want_bn(m, &r2[1], "layers[2].residual.layers[1].batchnorm");
    want("layers[2].residual.projection.weight", m->params + L[2].proj->w_off, 4, 1, 1, 4, 6);
    want("layers[2].residual.projection.bias", m->params + L[2].proj->b_off, 1, 6, 0, 0, 0);
    want("layers[4].dense.weight", m->params + L[4].w_off, 2, 54, 12, 0, 0);
    want("layers[4].dense.bias", m->params + L[4].b_off, 1, 12, 0, 0, 0);
    want("layers[6].residual.layers[0].dense.weight", m->params + r6[0].w_off, 2, 12, 5, 0, 0);
    want("layers[6].residual.layers[0].dense.bias", m->params + r6[0].b_off, 1, 5, 0, 0, 0);
    want("layers[6].residual.projection.weight", m->params + L[6].proj->w_off, 2, 12, 5, 0, 0);
    want("layers[6].residual.projection.bias", m->params + L[6].proj->b_off, 1, 5, 0, 0, 0);
    want("layers[7].dense.weight", m->params + L[7].w_off, 2, 5, 3, 0, 0);
    want("layers[7].dense.bias", m->params + L[7].b_off, 1, 3, 0, 0, 0);
}

static void check_file_independently(const eng_model *m, const char *path) {
    size_t len;
    uint8_t *b = slurp(path, &len);
    assert_true(len >= 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    assert_true(8 + hl <= len);
    assert_int_equal((8 + hl) % 8, 0); /* data section 8-byte aligned */
    json_error_t je;
    json_t *h = json_loadb((const char *)b + 8, (size_t)hl, 0, &je);
    assert_non_null(h);
    const uint8_t *data = b + 8 + hl;
    size_t dlen = len - 8 - (size_t)hl;
    expectations(m);
    assert_int_equal(json_object_size(h), (size_t)nexp + 1);
    /* every parameter / statistic float is covered exactly once */
    size_t nfloats = 0, prev_end = 0;
    double maxdiff = 0;
    for (int i = 0; i < nexp; i++) {
        const expect *e = &exps[i];
        json_t *t = json_object_get(h, e->name);
        if (!t) printf("  missing %s\n", e->name);
        assert_non_null(t);
        assert_string_equal(json_string_value(json_object_get(t, "dtype")), "F32");
        json_t *shp = json_object_get(t, "shape"), *off = json_object_get(t, "data_offsets");
        assert_int_equal(json_array_size(shp), (size_t)e->rank);
        size_t n = 1;
        for (int d = 0; d < e->rank; d++) {
            assert_int_equal(json_integer_value(json_array_get(shp, (size_t)d)), e->shape[d]);
            n *= (size_t)e->shape[d];
        }
        size_t beg = (size_t)json_integer_value(json_array_get(off, 0)), end = (size_t)json_integer_value(json_array_get(off, 1));
        assert_int_equal(end - beg, n * 4);
        assert_int_equal(beg, prev_end); /* written in layer order, no gaps */
        prev_end = end;
        assert_true(end <= dlen);
        for (size_t k = 0; k < n; k++) {
            float v;
            memcpy(&v, data + beg + 4 * k, 4);
            double dd = fabs((double)v - (double)e->data[k]);
            if (memcmp(&v, &e->data[k], 4) && !(dd > 0)) dd = INFINITY; /* NaN or -0 vs 0 */
            maxdiff = fmax(maxdiff, dd);
        }
        nfloats += n;
    }
    assert_int_equal(prev_end, dlen);
    assert_int_equal(nfloats, m->nparams + m->nstats);
    json_t *md = json_object_get(h, "__metadata__");
    assert_string_equal(json_string_value(json_object_get(md, "format")), "hpo-model-1");
    assert_string_equal(json_string_value(json_object_get(md, "input_shape")), "[6,6,2]");
    assert_string_equal(json_string_value(json_object_get(md, "n_classes")), "3");
    assert_string_equal(json_string_value(json_object_get(md, "trial")), "trial-42");
    assert_string_equal(json_string_value(json_object_get(md, "epochs")), "2");
    assert_string_equal(json_string_value(json_object_get(md, "dataset")), "synthetic");
    const char *tm = json_string_value(json_object_get(md, "template"));
    assert_non_null(tm);
    assert_null(strchr(tm, '$')); /* expanded */
    json_t *pj = J(json_string_value(json_object_get(md, "params")));
    assert_int_equal(json_integer_value(json_object_get(pj, "units")), 12);
    json_decref(pj);
    printf("  %s: %zu bytes, header %llu, %d tensors, %zu floats (= %zu params + %zu BN stats); "
           "max |file - model| = %g\n",
           path, len, (unsigned long long)hl, nexp, nfloats, m->nparams, m->nstats, maxdiff);
    assert_true(maxdiff == 0.0);
    json_decref(h);
    free(b);
}

static json_t *meta(void) {
    json_t *md = json_object();
    json_object_set_new(md, "template", J(tmpl_text));
    json_object_set_new(md, "params", J(params_text));
    json_object_set_new(md, "trial", json_string("trial-42"));
    json_object_set_new(md, "epochs", json_integer(2));
    json_object_set_new(md, "dataset", json_string("synthetic"));
    json_object_set_new(md, "format", json_string("spoofed")); /* reserved: ignored */
    return md;
}

static int same_floats(const float *a, const float *b, size_t n) { return n == 0 || !memcmp(a, b, n * sizeof(float)); }

static void test_save_load_open(void **state) {
    (void)state;
    eng_dataset *ds = synth(NROWS, 5);
    eng_split s;
    hpo_error err;
    assert_int_equal(eng_split_all(ds, &s), 0);
    eng_model *a = trained(&s);
    char p[128], p2[128];
    path_of(p, sizeof p, "model.safetensors");
    json_t *md = meta();
    assert_int_equal(eng_model_export_weights(a, p, md, &err), 0);
    check_file_independently(a, p);

    /* the in-memory image is the same bytes */
    void *buf = NULL;
    size_t blen = 0, flen = 0;
    assert_int_equal(eng_model_export_weights_buffer(a, md, &buf, &blen, &err), 0);
    void *fb = slurp(p, &flen);
    assert_int_equal(blen, flen);
    assert_memory_equal(buf, fb, blen);
    free(buf);
    free(fb);

    /* load into a fresh model (other init seed) */
    float *pa = predict_all(a, &s);
    eng_model *b = build(params_text, 999);
    float *pb0 = predict_all(b, &s);
    assert_false(same_floats(pa, pb0, s.n * NCLS));
    assert_int_equal(eng_model_load_weights(b, p, &err), 0);
    float *pb = predict_all(b, &s);
    int same_b = same_floats(pa, pb, s.n * NCLS) && same_floats(a->params, b->params, a->nparams) &&
                 same_floats(a->stats, b->stats, a->nstats);
    printf("  load_weights into a fresh model: params, BN stats and %zu x %d predictions %s\n", s.n, NCLS,
           same_b ? "bit-identical" : "DIFFER");
    assert_true(same_b);

    /* open from the file's metadata alone */
    eng_model *c = NULL;
    json_t *mo = NULL;
    assert_int_equal(eng_model_new_from_weights(p, &c, &mo, &err), 0);
    float *pc = predict_all(c, &s);
    int same_c = same_floats(pa, pc, s.n * NCLS);
    printf("  new_from_weights (template/params/input_shape/n_classes from metadata): predictions %s; trial=%s\n",
           same_c ? "bit-identical" : "DIFFER", json_string_value(json_object_get(mo, "trial")));
    assert_true(same_c);
    assert_string_equal(json_string_value(json_object_get(mo, "format")), "hpo-model-1");
    assert_string_equal(json_string_value(json_object_get(mo, "epochs")), "2");
    assert_int_equal(c->nparams, a->nparams);

    /* a file without a template loads but cannot be opened */
    path_of(p2, sizeof p2, "bare.safetensors");
    assert_int_equal(eng_model_export_weights(a, p2, NULL, &err), 0);
    assert_int_equal(eng_model_load_weights(b, p2, &err), 0);
    eng_model *d = (eng_model *)0x1;
    assert_int_equal(eng_model_new_from_weights(p2, &d, NULL, &err), HPO_EFORMAT);
    assert_true(d == (eng_model *)0x1); /* out-param untouched */
    printf("  new_from_weights without a template: %s (%s)\n", hpo_errname(HPO_EFORMAT), err.message);

    /* bad metadata arguments */
    json_t *bad = json_pack("{s:s}", "template", "not an object");
    assert_int_equal(eng_model_export_weights(a, p2, bad, &err), HPO_EINVAL);
    assert_string_equal(err.field, "metadata.template");
    json_decref(bad);

    free(pa);
    free(pb0);
    free(pb);
    free(pc);
    json_decref(md);
    json_decref(mo);
    eng_model_free(a);
    eng_model_free(b);
    eng_model_free(c);
    eng_split_clear(&s);
    eng_dataset_release(ds);
}

static void test_bad_files(void **state) {
    (void)state;
    hpo_error err;
    eng_model *a = build(params_text, 1);
    char p[128], q[128];
    path_of(p, sizeof p, "good.safetensors");
    json_t *md = meta();
    assert_int_equal(eng_model_export_weights(a, p, md, &err), 0);
    eng_model *b = build(params_text, 2);
    float *before = malloc(b->nparams * sizeof(float));
    memcpy(before, b->params, b->nparams * sizeof(float));

    /* truncated */
    size_t len;
    void *img = slurp(p, &len);
    path_of(q, sizeof q, "truncated.safetensors");
    spit(q, img, len - 10);
    int rc = eng_model_load_weights(b, q, &err);
    printf("  truncated by 10 bytes: %s: %s\n", hpo_errname(rc), err.message);
    assert_int_equal(rc, HPO_EFORMAT);
    spit(q, img, 5);
    assert_int_equal(eng_model_load_weights(b, q, &err), HPO_EFORMAT);
    eng_model *o = NULL;
    assert_int_equal(eng_model_new_from_weights(q, &o, NULL, &err), HPO_EFORMAT);
    assert_null(o);
    free(img);

    /* a model of another shape (units 16 instead of 12) */
    eng_model *w = build("{\"f\":6,\"units\":16,\"lr\":0.01}", 1);
    memset(&err, 0, sizeof err);
    rc = eng_model_load_weights(w, p, &err);
    printf("  units 16 model, units 12 file: %s [%s]: %s\n", hpo_errname(rc), err.field, err.message);
    assert_int_equal(rc, HPO_EFORMAT);
    assert_string_equal(err.field, "layers[4].dense.weight");
    eng_model_free(w);

    /* a file with a missing tensor and one with an extra tensor: rewrite via the safetensors API */
    eng_st_file *f = NULL;
    assert_int_equal(eng_st_read_file(p, &f, &err), 0);
    for (int mode = 0; mode < 2; mode++) {
        eng_st_writer *wr = eng_st_writer_new();
        for (size_t i = 0; i < eng_st_count(f); i++) {
            const eng_st_tensor *t = eng_st_get(f, i);
            if (mode == 0 && !strcmp(t->name, "layers[2].residual.layers[1].batchnorm.running_var")) continue;
            assert_int_equal(eng_st_writer_add(wr, t->name, t->dtype, t->rank, t->shape, t->data, &err), 0);
        }
        if (mode == 1) {
            int64_t one = 1;
            static const float z = 0;
            assert_int_equal(eng_st_writer_add(wr, "layers[9].dense.weight", ENG_ST_F32, 1, &one, &z, &err), 0);
        }
        for (size_t i = 0; i < eng_st_meta_count(f); i++) {
            const char *k, *v;
            eng_st_meta_at(f, i, &k, &v);
            eng_st_writer_meta(wr, k, v);
        }
        path_of(q, sizeof q, mode ? "extra.safetensors" : "missing.safetensors");
        assert_int_equal(eng_st_write_file(wr, q, &err), 0);
        eng_st_writer_free(wr);
        memset(&err, 0, sizeof err);
        rc = eng_model_load_weights(b, q, &err);
        printf("  %s tensor: %s [%s]: %s\n", mode ? "extra" : "missing", hpo_errname(rc), err.field, err.message);
        assert_int_equal(rc, HPO_EFORMAT);
        assert_string_equal(err.field, mode ? "layers[9].dense.weight" : "layers[2].residual.layers[1].batchnorm.running_var");
        o = NULL;
        assert_int_equal(eng_model_new_from_weights(q, &o, NULL, &err), HPO_EFORMAT);
        assert_null(o);
    }
    eng_st_file_free(f);

    /* a checkpoint is not a weights file */
    eng_train_state st;
    memset(&st, 0, sizeof st);
    path_of(q, sizeof q, "ckpt.safetensors");
    assert_int_equal(eng_checkpoint_save(a, &st, q, 1, &err), 0);
    assert_int_equal(eng_model_load_weights(b, q, &err), HPO_EFORMAT);
    assert_int_equal(eng_model_load_weights(b, "/nonexistent/x.safetensors", &err) < 0, 1);

    /* the model was never touched by the failures */
    assert_true(same_floats(before, b->params, b->nparams));
    free(before);
    json_decref(md);
    eng_model_free(a);
    eng_model_free(b);
}

static void test_predict(void **state) {
    (void)state;
    eng_dataset *ds = synth(NROWS, 9);
    eng_split all;
    hpo_error err;
    assert_int_equal(eng_split_all(ds, &all), 0);
    eng_model *m = trained(&all);
    /* a split view with a non-trivial index list: every other row, reversed */
    eng_split s = {.ds = ds, .n = NROWS / 2};
    s.idx = malloc(s.n * sizeof *s.idx);
    for (size_t i = 0; i < s.n; i++) s.idx[i] = (uint32_t)(NROWS - 1 - 2 * i);
    float *ps = malloc(s.n * NCLS * sizeof(float)), *pr = malloc(s.n * NCLS * sizeof(float)),
          *pl = malloc(s.n * NCLS * sizeof(float)), *x = malloc(s.n * m->in_size * sizeof(float)),
          *xs = malloc(s.n * m->in_size * sizeof(float));
    assert_int_equal(eng_predict_split(m, &s, 16, ps, &err), 0);
    /* reference: gather the rows, eng_model_predict one row at a time */
    assert_int_equal(eng_split_gather(&s, 0, s.n, ENG_BATCH_F32, x, NULL, NULL), 0);
    for (size_t i = 0; i < s.n; i++)
        assert_int_equal(eng_model_predict(m, x + i * m->in_size, 1, pl + i * NCLS), 0);
    double md = 0, sum_err = 0;
    for (size_t i = 0; i < s.n * NCLS; i++) md = fmax(md, fabs((double)ps[i] - pl[i]));
    for (size_t i = 0; i < s.n; i++) {
        double t = 0;
        for (int k = 0; k < NCLS; k++) t += ps[i * NCLS + k];
        sum_err = fmax(sum_err, fabs(t - 1));
    }
    printf("  eng_predict_split (batch 16, %zu rows) vs eng_model_predict row by row: max diff %g; "
           "max |sum(p) - 1| %g\n", s.n, md, sum_err);
    assert_true(md <= 1e-6);
    assert_true(sum_err < 1e-5);
    /* caller rows, from raw pixels through the helper: same bits as the split */
    const uint8_t *raw = ds->x;
    for (size_t i = 0; i < s.n; i++) eng_weights_scale_u8(raw + (size_t)s.idx[i] * 72, 72, xs + i * 72);
    int same_x = !memcmp(x, xs, s.n * m->in_size * sizeof(float));
    assert_int_equal(eng_predict_rows(m, xs, s.n, m->in_size - 1, pr), HPO_ESHAPE); /* rows of another width */
    assert_int_equal(eng_predict_rows(m, xs, s.n, m->in_size, pr), 0);
    double md2 = 0;
    for (size_t i = 0; i < s.n * NCLS; i++) md2 = fmax(md2, fabs((double)ps[i] - pr[i]));
    printf("  raw uint8 rows scaled by eng_weights_scale_u8: inputs %s the gathered split; eng_predict_rows max diff %g\n",
           same_x ? "bit-identical to" : "DIFFER from", md2);
    assert_true(same_x);
    assert_true(md2 == 0.0);
    /* a model without reserved buffers reserves them itself */
    eng_model *f = build(params_text, 11);
    memcpy(f->params, m->params, m->nparams * sizeof(float));
    memcpy(f->stats, m->stats, m->nstats * sizeof(float));
    eng_model_params_changed(f);
    assert_int_equal(f->cap, 0);
    assert_int_equal(eng_predict_rows(f, xs, 3, f->in_size, pr), 0);
    assert_true(f->cap >= 1);
    double md3 = 0;
    for (size_t i = 0; i < 3 * NCLS; i++) md3 = fmax(md3, fabs((double)ps[i] - pr[i]));
    printf("  unreserved model: eng_predict_rows reserved cap %d itself; max diff %g\n", f->cap, md3);
    assert_true(md3 <= 1e-6);
    eng_model_free(f);
    /* wrong sample size */
    eng_dataset *d2 = NULL;
    int64_t shp[1] = {10};
    assert_int_equal(eng_dataset_new("other", 4, 1, shp, ENG_DATA_F32, ENG_DATA_Y_CLASS, 1, &d2), 0);
    eng_split s2;
    assert_int_equal(eng_split_all(d2, &s2), 0);
    assert_int_equal(eng_predict_split(m, &s2, 16, ps, &err), HPO_ESHAPE);
    eng_split_clear(&s2);
    eng_dataset_release(d2);
    free(s.idx);
    free(ps);
    free(pr);
    free(pl);
    free(x);
    free(xs);
    eng_model_free(m);
    eng_split_clear(&all);
    eng_dataset_release(ds);
}

static void test_from_checkpoint(void **state) {
    (void)state;
    hpo_error err;
    eng_model *a = build(params_text, 21);
    assert_true(a->nstats > 0);
    /* the best epoch's weights: parameters, then BN statistics (train.h) */
    float *best = malloc((a->nparams + a->nstats) * sizeof(float)), *best_stats = best + a->nparams;
    for (size_t i = 0; i < a->nparams; i++) best[i] = a->params[i] * 0.5f + 0.01f;
    for (size_t i = 0; i < a->nstats; i++) best_stats[i] = a->stats[i] + 0.5f;
    for (size_t i = 0; i < a->nstats; i++) a->stats[i] += 0.25f;
    eng_train_state st;
    memset(&st, 0, sizeof st);
    st.epoch = 4;
    st.best_epoch = 2;
    st.loss_scale = 1;
    char with[128], without[128], old[128];
    path_of(with, sizeof with, "ckpt_best.safetensors");
    path_of(without, sizeof without, "ckpt_last.safetensors");
    path_of(old, sizeof old, "ckpt_old.safetensors");
    assert_int_equal(eng_checkpoint_save(a, &st, without, 0, &err), 0);
    st.best_weights = best;
    assert_int_equal(eng_checkpoint_save(a, &st, with, 1, &err), 0);
    /* a checkpoint written before "best_bn_stats" existed: the same file without it */
    eng_st_file *f = NULL;
    assert_int_equal(eng_st_read_file(with, &f, &err), 0);
    assert_non_null(eng_st_find(f, "best_bn_stats"));
    eng_st_writer *wr = eng_st_writer_new();
    for (size_t i = 0; i < eng_st_count(f); i++) {
        const eng_st_tensor *t = eng_st_get(f, i);
        if (strcmp(t->name, "best_bn_stats"))
            assert_int_equal(eng_st_writer_add(wr, t->name, t->dtype, t->rank, t->shape, t->data, &err), 0);
    }
    for (size_t i = 0; i < eng_st_meta_count(f); i++) {
        const char *k, *v;
        eng_st_meta_at(f, i, &k, &v);
        eng_st_writer_meta(wr, k, v);
    }
    assert_int_equal(eng_st_write_file(wr, old, &err), 0);
    eng_st_writer_free(wr);
    eng_st_file_free(f);
    struct { const char *path; int use_best; const float *expect, *expect_stats; const char *what; } cases[] = {
        {with, 1, best, best_stats, "best params and BN stats"},
        {with, 0, a->params, a->stats, "last"},
        {old, 1, best, a->stats, "best params, last BN stats (no best_bn_stats)"},
        {old, 0, a->params, a->stats, "last"},
        {without, 1, a->params, a->stats, "last"},
        {without, 0, a->params, a->stats, "last"}};
    for (int i = 0; i < 6; i++) {
        eng_model *b = build(params_text, 77);
        assert_int_equal(eng_model_from_checkpoint(b, cases[i].path, cases[i].use_best, &err), 0);
        int ok = same_floats(b->params, cases[i].expect, a->nparams) &&
                 same_floats(b->stats, cases[i].expect_stats, a->nstats);
        printf("  checkpoint %s, use_best %d: %s %s\n",
               cases[i].path == with ? "with best weights" : cases[i].path == old ? "with best_params only" : "without",
               cases[i].use_best, cases[i].what, ok ? "bit-identical" : "DIFFER");
        assert_true(ok);
        eng_model_free(b);
    }
    /* another model shape: HPO_EFORMAT, model untouched */
    eng_model *w = build("{\"f\":6,\"units\":16,\"lr\":0.01}", 1);
    float p0 = w->params[0];
    int rc = eng_model_from_checkpoint(w, with, 1, &err);
    printf("  checkpoint into a units-16 model: %s: %s\n", hpo_errname(rc), err.message);
    assert_int_equal(rc, HPO_EFORMAT);
    assert_true(w->params[0] == p0);
    eng_model_free(w);
    /* checkpoint -> weights file -> open gives the best weights */
    eng_model *b = build(params_text, 5);
    assert_int_equal(eng_model_from_checkpoint(b, with, 1, &err), 0);
    char wp[128];
    path_of(wp, sizeof wp, "from_ckpt.safetensors");
    json_t *md = meta();
    assert_int_equal(eng_model_export_weights(b, wp, md, &err), 0);
    eng_model *c = NULL;
    assert_int_equal(eng_model_new_from_weights(wp, &c, NULL, &err), 0);
    assert_true(same_floats(c->params, best, c->nparams));
    assert_true(same_floats(c->stats, best_stats, c->nstats));
    json_decref(md);
    eng_model_free(b);
    eng_model_free(c);
    eng_model_free(a);
    free(best);
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hpo_wts_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_load_open),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_predict),
        cmocka_unit_test(test_from_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
