/* test_ops.c - every layer kernel's fast path against its naive reference
 * (printed max abs difference, tolerance), and finite-difference gradient
 * checks of every layer and loss through small models (printed max relative
 * error, tolerance). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bf16.h"
#include "loss.h"
#include "model.h"
#include "ops.h"
#include "rng.h"

static float *rnd(size_t n, hpo_rng *r, float scale) {
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (2.0f * hpo_rng_uniform_f(r) - 1.0f) * scale;
    return v;
}

static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static void check(const char *what, double diff, double tol) {
    printf("  %-44s max abs diff %.3g (tol %.1g)\n", what, diff, tol);
    assert_true(diff <= tol);
}

/* ---- naive vs fast ---- */

static void test_dense_naive_vs_fast(void **state) {
    (void)state;
    const eng_backend *be = eng_backend_cpu();
    hpo_rng r;
    hpo_rng_seed(&r, 1);
    int B = 7, I = 33, O = 19;
    for (int act = 0; act <= ENG_ACT_SOFTMAX; act++) {
        float *x = rnd((size_t)B * I, &r, 1), *w = rnd((size_t)I * O, &r, 0.5f), *b = rnd((size_t)O, &r, 0.5f);
        float *z1 = calloc((size_t)B * O, 4), *y1 = calloc((size_t)B * O, 4), *z2 = calloc((size_t)B * O, 4),
              *y2 = calloc((size_t)B * O, 4);
        eng_dense_forward(be, x, w, b, z1, y1, B, I, O, act);
        eng_dense_forward_ref(x, w, b, z2, y2, B, I, O, act);
        char name[64];
        snprintf(name, sizeof name, "dense forward (%s)", eng_act_name(act));
        check(name, maxdiff(y1, y2, (size_t)B * O), 1e-5);
        float *d1 = rnd((size_t)B * O, &r, 1), *d2 = malloc((size_t)B * O * 4);
        memcpy(d2, d1, (size_t)B * O * 4);
        float *dx1 = calloc((size_t)B * I, 4), *dx2 = calloc((size_t)B * I, 4), *dw1 = calloc((size_t)I * O, 4),
              *dw2 = calloc((size_t)I * O, 4), *db1 = calloc((size_t)O, 4), *db2 = calloc((size_t)O, 4);
        eng_dense_backward(be, x, w, z1, y1, d1, dx1, dw1, db1, B, I, O, act);
        eng_dense_backward_ref(x, w, z2, y2, d2, dx2, dw2, db2, B, I, O, act);
        snprintf(name, sizeof name, "dense backward dx/dw/db (%s)", eng_act_name(act));
        double m = fmax(maxdiff(dx1, dx2, (size_t)B * I), fmax(maxdiff(dw1, dw2, (size_t)I * O), maxdiff(db1, db2, O)));
        check(name, m, 1e-5);
        /* bf16 path against the reference on bf16-rounded inputs */
        if (eng_dnnl_has_bf16() && act == ENG_ACT_RELU) {
            uint16_t *xb = malloc((size_t)B * I * 2), *wb = malloc((size_t)I * O * 2);
            eng_f32_to_bf16_n(x, xb, (size_t)B * I);
            eng_f32_to_bf16_n(w, wb, (size_t)I * O);
            eng_round_bf16_n(x, (size_t)B * I);
            eng_round_bf16_n(w, (size_t)I * O);
            eng_dense_forward_ref(x, w, b, z2, y2, B, I, O, act);
            assert_int_equal(eng_dense_forward_bf16(be, xb, wb, b, z1, y1, B, I, O, act), 0);
            check("dense forward bf16 vs ref on rounded inputs", maxdiff(y1, y2, (size_t)B * O), 1e-4);
            free(xb);
            free(wb);
        }
        free(x), free(w), free(b), free(z1), free(y1), free(z2), free(y2), free(d1), free(d2);
        free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
    }
}

static void test_conv_naive_vs_fast(void **state) {
    (void)state;
    const eng_backend *be = eng_backend_cpu();
    hpo_rng r;
    hpo_rng_seed(&r, 2);
    int cfg[][5] = {{3, 1, ENG_PAD_VALID, 1, 4}, {3, 1, ENG_PAD_SAME, 3, 5}, {3, 2, ENG_PAD_SAME, 2, 4}, {1, 2, ENG_PAD_VALID, 4, 6}};
    for (size_t k = 0; k < HPO_ARRAY_LEN(cfg); k++) {
        eng_conv2d_shape s;
        assert_int_equal(eng_conv2d_shape_init(&s, 3, 9, 8, cfg[k][3], cfg[k][0], cfg[k][0], cfg[k][4], cfg[k][1],
                                               cfg[k][1], cfg[k][2]), 0);
        size_t nx = (size_t)s.N * s.H * s.W * s.C, nw = (size_t)s.KH * s.KW * s.C * s.OC,
               ny = (size_t)s.N * s.OH * s.OW * s.OC;
        float *x = rnd(nx, &r, 1), *w = rnd(nw, &r, 0.5f), *b = rnd((size_t)s.OC, &r, 0.5f);
        float *y1 = calloc(ny, 4), *y2 = calloc(ny, 4);
        assert_int_equal(eng_conv2d_forward(be, &s, ENG_F32, x, w, b, y1, y1, ENG_ACT_RELU), 0);
        eng_conv2d_forward_ref(&s, x, w, b, y2, y2, ENG_ACT_RELU);
        char name[80];
        snprintf(name, sizeof name, "conv2d %dx%d s%d %s forward", cfg[k][0], cfg[k][0], cfg[k][1],
                 cfg[k][2] == ENG_PAD_SAME ? "same" : "valid");
        check(name, maxdiff(y1, y2, ny), 1e-4);
        float *d1 = rnd(ny, &r, 1), *d2 = malloc(ny * 4);
        memcpy(d2, d1, ny * 4);
        float *dx1 = calloc(nx, 4), *dx2 = calloc(nx, 4), *dw1 = calloc(nw, 4), *dw2 = calloc(nw, 4),
              *db1 = calloc((size_t)s.OC, 4), *db2 = calloc((size_t)s.OC, 4);
        assert_int_equal(eng_conv2d_backward(be, &s, ENG_F32, x, w, y1, y1, d1, NULL, dx1, dw1, db1, ENG_ACT_RELU), 0);
        eng_conv2d_backward_ref(&s, x, w, y2, y2, d2, dx2, dw2, db2, ENG_ACT_RELU);
        snprintf(name, sizeof name, "conv2d %dx%d s%d backward dx/dw/db", cfg[k][0], cfg[k][0], cfg[k][1]);
        check(name, fmax(maxdiff(dx1, dx2, nx), fmax(maxdiff(dw1, dw2, nw), maxdiff(db1, db2, (size_t)s.OC))), 1e-4);
        free(x), free(w), free(b), free(y1), free(y2), free(d1), free(d2);
        free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
    }
}

static void test_pool_bn_naive_vs_fast(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 3);
    int N = 2, H = 7, W = 6, C = 5, OH = 3, OW = 3;
    size_t nx = (size_t)N * H * W * C, ny = (size_t)N * OH * OW * C;
    float *x = rnd(nx, &r, 1), *y1 = calloc(ny, 4), *y2 = calloc(ny, 4), *dy = rnd(ny, &r, 1);
    float *dx1 = calloc(nx, 4), *dx2 = calloc(nx, 4);
    int32_t *arg = calloc(ny, 4);
    eng_maxpool2d_forward(x, y1, arg, N, H, W, C, 2, 2, 2, 2, OH, OW);
    eng_maxpool2d_forward_ref(x, y2, N, H, W, C, 2, 2, 2, 2, OH, OW);
    check("maxpool2d forward", maxdiff(y1, y2, ny), 0);
    eng_maxpool2d_backward(dy, arg, dx1, N, H, W, C, OH, OW);
    eng_maxpool2d_backward_ref(x, dy, dx2, N, H, W, C, 2, 2, 2, 2, OH, OW);
    check("maxpool2d backward", maxdiff(dx1, dx2, nx), 0);
    float g1[10], g2[10];
    eng_gap_forward(x, g1, N, H * W, C);
    eng_gap_forward_ref(x, g2, N, H * W, C);
    check("global_avg_pool forward", maxdiff(g1, g2, (size_t)N * C), 1e-6);
    eng_gap_backward(g1, dx1, N, H * W, C);
    eng_gap_backward_ref(g1, dx2, N, H * W, C);
    check("global_avg_pool backward", maxdiff(dx1, dx2, nx), 1e-7);
    /* batchnorm over M = N*H*W rows of C */
    size_t M = (size_t)N * H * W;
    float *gam = rnd((size_t)C, &r, 1), *bet = rnd((size_t)C, &r, 1), rm[5] = {0}, rv[5] = {1, 1, 1, 1, 1};
    float *xh = calloc(nx, 4), is[5], *yb1 = calloc(nx, 4), *yb2 = calloc(nx, 4), *d = rnd(nx, &r, 1);
    float dg1[5], db1[5], dg2[5], db2[5];
    eng_batchnorm_forward_train(x, yb1, gam, bet, rm, rv, 0.9f, 1e-3f, xh, is, M, C);
    eng_batchnorm_forward_train_ref(x, yb2, gam, bet, 1e-3f, M, C);
    check("batchnorm forward (train)", maxdiff(yb1, yb2, nx), 1e-5);
    eng_batchnorm_backward(d, xh, is, gam, dx1, dg1, db1, M, C);
    eng_batchnorm_backward_ref(x, d, gam, 1e-3f, dx2, dg2, db2, M, C);
    check("batchnorm backward dx/dgamma/dbeta",
          fmax(maxdiff(dx1, dx2, nx), fmax(maxdiff(dg1, dg2, (size_t)C), maxdiff(db1, db2, (size_t)C))), 1e-4);
    /* augmentation: forward then backward is the transpose (adjoint test) */
    int32_t prm[6];
    hpo_rng ar;
    hpo_rng_seed(&ar, 9);
    eng_augment_forward(x, yb1, prm, N, H, W, C, 2, 1, &ar);
    eng_augment_apply_ref(x, yb2, prm, N, H, W, C);
    check("augment forward", maxdiff(yb1, yb2, nx), 0);
    /* shares of the batch (eng_augment_forward_rows): the whole batch's
     * draws, each share its rows; the generator ends where the whole batch's
     * call left it */
    for (int first = 0; first < N; first++) {
        hpo_rng sr;
        hpo_rng_seed(&sr, 9);
        int32_t sp[6];
        size_t per = nx / (size_t)N;
        eng_augment_forward_rows(x + first * per, yb2, sp, N - first, first, N, H, W, C, 2, 1, &sr);
        assert_memory_equal(sp, prm + 3 * first, (size_t)(N - first) * 3 * sizeof(int32_t));
        assert_memory_equal(yb2, yb1 + first * per, (nx - first * per) * sizeof(float));
        assert_memory_equal(&sr, &ar, sizeof sr);
    }
    eng_augment_backward(d, prm, dx1, N, H, W, C);
    double a = 0, b = 0;
    for (size_t i = 0; i < nx; i++) {
        a += (double)yb1[i] * d[i];
        b += (double)x[i] * dx1[i];
    }
    check("augment backward adjoint <Ax,d> - <x,A'd>", fabs(a - b), 1e-4);
    free(x), free(y1), free(y2), free(dy), free(dx1), free(dx2), free(arg), free(gam), free(bet), free(xh);
    free(yb1), free(yb2), free(d);
}

static void test_act_naive_vs_fast(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 4);
    size_t rows = 5, cols = 13, n = rows * cols;
    for (int act = 0; act <= ENG_ACT_SOFTMAX; act++) {
        float *z = rnd(n, &r, 3), *y1 = calloc(n, 4), *y2 = calloc(n, 4), *d1 = rnd(n, &r, 1), *d2 = malloc(n * 4);
        memcpy(d2, d1, n * 4);
        eng_act_forward(act, z, y1, rows, cols);
        eng_act_forward_ref(act, z, y2, rows, cols);
        eng_act_backward(act, z, y1, d1, rows, cols);
        eng_act_backward_ref(act, z, y2, d2, rows, cols);
        char name[64];
        snprintf(name, sizeof name, "activation %s forward+backward", eng_act_name(act));
        check(name, fmax(maxdiff(y1, y2, n), maxdiff(d1, d2, n)), 2e-6);
        free(z), free(y1), free(y2), free(d1), free(d2);
    }
}

/* ---- finite differences through small models ---- */

typedef struct fd_case {
    const char *name;
    const char *json;
    int rank, shape[3];
    int K;        /* outputs */
    int labels;   /* class labels (else random targets) */
} fd_case;

static double model_loss(eng_model *m, const float *x, int B, const int32_t *lab, const float *tg, hpo_rng saved,
                         float *dz) {
    const float *out;
    memcpy(m->input, x, (size_t)B * m->in_size * 4);
    m->rng = saved;
    m->shadow_dirty = 1;
    assert_int_equal(eng_model_forward(m, B, 1, &out), 0);
    return eng_loss_compute(m->loss, m->final_act, out, lab, tg, B, m->out_dim, 1.0f, dz, NULL);
}

static void run_fd(const fd_case *c) {
    hpo_error err;
    json_error_t je;
    json_t *t = json_loads(c->json, 0, &je);
    assert_non_null(t);
    eng_model *m = NULL;
    int rc = eng_model_new(t, NULL, c->rank, c->shape, 0, 5, &m, &err);
    if (rc) printf("%s: %s %s\n", c->name, err.field, err.message);
    assert_int_equal(rc, 0);
    int B = 4;
    assert_int_equal(eng_model_reserve(m, B, ENG_PREC_FP32), 0);
    hpo_rng r;
    hpo_rng_seed(&r, 6);
    /* move parameters off zero (biases) and BN gamma off one */
    for (size_t i = 0; i < m->nparams; i++) m->params[i] += 0.2f * (2.0f * hpo_rng_uniform_f(&r) - 1.0f);
    float *x = rnd((size_t)B * m->in_size, &r, 1.0f);
    int32_t lab[4];
    float *tg = rnd((size_t)B * m->out_dim, &r, 1.0f);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)hpo_rng_below(&r, (uint64_t)m->out_dim);
    if (m->loss == ENG_LOSS_BCE)
        for (int i = 0; i < B * m->out_dim; i++) tg[i] = hpo_rng_uniform_f(&r);
    const int32_t *L = c->labels ? lab : NULL;
    const float *T = c->labels ? NULL : tg;
    hpo_rng saved = m->rng;
    model_loss(m, x, B, L, T, saved, m->dlogits);
    assert_int_equal(eng_model_backward(m, B), 0);
    float *g = malloc(m->nparams * 4);
    memcpy(g, m->grads, m->nparams * 4);
    double gmax = 0;
    for (size_t i = 0; i < m->nparams; i++) gmax = fmax(gmax, fabs(g[i]));
    double worst = 0;
    size_t stride = m->nparams > 300 ? m->nparams / 300 : 1;
    for (size_t i = 0; i < m->nparams; i += stride) {
        float p0 = m->params[i];
        float h = 2e-3f * fmaxf(1.0f, fabsf(p0));
        m->params[i] = p0 + h;
        double lp = model_loss(m, x, B, L, T, saved, NULL);
        m->params[i] = p0 - h;
        double lm = model_loss(m, x, B, L, T, saved, NULL);
        m->params[i] = p0;
        double fd = (lp - lm) / ((double)(p0 + h) - (double)(p0 - h));
        double den = fmax(fmax(fabs(fd), fabs(g[i])), 1e-2 * gmax + 1e-6);
        worst = fmax(worst, fabs(fd - g[i]) / den);
    }
    printf("  %-44s max rel error %.3g (%zu params, tol 3e-2)\n", c->name, worst, m->nparams);
    assert_true(worst < 3e-2);
    free(g);
    free(x);
    free(tg);
    eng_model_free(m);
    json_decref(t);
}

#define L_SCCE "\"loss\":\"sparse_categorical_crossentropy\""
/* Dropout masks: the AVX-512 path equals the scalar loop bit for bit; the
 * kept fraction is within 4 sigma of 1 - rate; successive calls and
 * neighbouring elements are not correlated (printed). */
static void test_dropout_masks(void **state) {
    (void)state;
    const float rates[] = {0.1f, 0.5f, 0.9f};
    size_t n = 100000 + 13;
    hpo_rng r;
    hpo_rng_seed(&r, 5);
    float *x = rnd(n, &r, 1.0f), *y1 = malloc(n * 4), *y2 = malloc(n * 4), *m1 = malloc(n * 4), *m2 = malloc(n * 4);
    for (size_t k = 0; k < HPO_ARRAY_LEN(rates); k++) {
        hpo_rng a, b;
        hpo_rng_seed(&a, 100 + k);
        b = a;
        eng_dropout_forward(x, y1, m1, n, rates[k], &a);
        eng_dropout_forward_ref(x, y2, m2, n, rates[k], &b);
        assert_memory_equal(m1, m2, n * 4);
        assert_memory_equal(y1, y2, n * 4);
        assert_memory_equal(&a, &b, sizeof a); /* one draw each */
        double keep = 1.0 - rates[k], kept = 0, both = 0, same_next = 0;
        for (size_t i = 0; i < n; i++) kept += m1[i] != 0.0f;
        eng_dropout_forward(x, y2, m2, n, rates[k], &a); /* the next call */
        for (size_t i = 0; i < n; i++) {
            both += (m1[i] != 0.0f) && (m2[i] != 0.0f);
            if (i + 1 < n) same_next += (m1[i] != 0.0f) && (m1[i + 1] != 0.0f);
        }
        double sigma = sqrt(n * keep * (1 - keep)), frac = kept / n;
        printf("  dropout rate %.1f: kept %.4f (expected %.4f, %.1f sigma); P(kept in both calls) %.4f, "
               "P(neighbours both kept) %.4f (independent: %.4f)\n",
               rates[k], frac, keep, fabs(kept - n * keep) / sigma, both / n, same_next / (n - 1), keep * keep);
        assert_true(fabs(kept - n * keep) < 4 * sigma);
        assert_true(fabs(both / n - keep * keep) < 0.01);
        assert_true(fabs(same_next / (n - 1) - keep * keep) < 0.01);
        for (size_t i = 0; i < n; i++) assert_true(m1[i] == 0.0f || fabsf(m1[i] - 1.0f / (float)keep) < 1e-6f);
        /* a data-parallel share's part: the key shifted to its first element
         * gives the slice of the whole mask (vector and scalar tails) */
        hpo_rng c;
        hpo_rng_seed(&c, 100 + k);
        uint64_t key = hpo_rng_u64(&c);
        const size_t firsts[] = {0, 1, 17, 4096, n - 5};
        for (size_t f = 0; f < HPO_ARRAY_LEN(firsts); f++) {
            size_t first = firsts[f], len = n - first < 1000 + f ? n - first : 1000 + f;
            eng_dropout_forward_key(x + first, y2, m2, len, rates[k], eng_dropout_key_at(key, first));
            assert_memory_equal(m2, m1 + first, len * 4);
            assert_memory_equal(y2, y1 + first, len * 4);
        }
    }
    printf("  dropout masks of shares (eng_dropout_key_at, first element 0/1/17/4096/n-5): the slices of the "
           "whole batch's mask, bit for bit\n");
    free(x), free(y1), free(y2), free(m1), free(m2);
}

static void test_fd_layers(void **state) {
    (void)state;
    static const fd_case cases[] = {
        {"fd dense tanh + softmax-CE", "{\"layers\":[{\"dense\":{\"units\":7,\"activation\":\"tanh\"}},{\"dense\":{\"units\":4,\"activation\":\"softmax\"}}]," L_SCCE "}", 1, {6}, 4, 1},
        {"fd dense relu", "{\"layers\":[{\"dense\":{\"units\":9,\"activation\":\"relu\"}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 1, {5}, 3, 1},
        {"fd dense gelu", "{\"layers\":[{\"dense\":{\"units\":6,\"activation\":\"gelu\"}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 1, {5}, 3, 1},
        {"fd dense sigmoid", "{\"layers\":[{\"dense\":{\"units\":6,\"activation\":\"sigmoid\"}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 1, {5}, 3, 1},
        {"fd activation layers (tanh, softmax)", "{\"layers\":[{\"dense\":{\"units\":6}},{\"activation\":\"tanh\"},{\"dense\":{\"units\":5}},{\"activation\":\"softmax\"},{\"dense\":{\"units\":3}}],\"loss\":\"mse\"}", 1, {4}, 3, 0},
        {"fd conv2d valid + maxpool + flatten", "{\"layers\":[{\"conv2d\":{\"filters\":3,\"kernel\":3,\"activation\":\"tanh\"}},{\"maxpool2d\":{\"pool\":2}},{\"flatten\":{}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 3, {6, 7, 2}, 3, 1},
        {"fd conv2d relu + maxpool (relu after pool)", "{\"layers\":[{\"conv2d\":{\"filters\":3,\"kernel\":3,\"activation\":\"relu\"}},{\"maxpool2d\":{\"pool\":2}},{\"flatten\":{}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 3, {6, 7, 2}, 3, 1},
        {"fd conv2d same stride 2 + gap", "{\"layers\":[{\"conv2d\":{\"filters\":4,\"kernel\":3,\"padding\":\"same\",\"stride\":2,\"activation\":\"gelu\"}},{\"conv2d\":{\"filters\":3,\"kernel\":[2,3],\"padding\":\"same\"}},{\"global_avg_pool\":{}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 3, {7, 6, 2}, 3, 1},
        {"fd batchnorm (dense and conv)", "{\"layers\":[{\"conv2d\":{\"filters\":3,\"kernel\":3,\"padding\":\"same\"}},{\"batchnorm\":{}},{\"activation\":\"tanh\"},{\"flatten\":{}},{\"dense\":{\"units\":5}},{\"batchnorm\":{}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 3, {4, 4, 2}, 3, 1},
        {"fd dropout (fixed mask)", "{\"layers\":[{\"dense\":{\"units\":8,\"activation\":\"tanh\"}},{\"dropout\":{\"rate\":0.5}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 1, {5}, 3, 1},
        {"fd augment (fixed shifts/flips)", "{\"layers\":[{\"augment\":{\"translate\":1,\"flip\":true}},{\"conv2d\":{\"filters\":2,\"kernel\":3,\"padding\":\"same\",\"activation\":\"tanh\"}},{\"augment\":{\"translate\":1,\"flip\":true}},{\"flatten\":{}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 3, {5, 5, 1}, 3, 1},
        {"fd residual identity (dense)", "{\"layers\":[{\"dense\":{\"units\":6,\"activation\":\"tanh\"}},{\"residual\":{\"layers\":[{\"dense\":{\"units\":6,\"activation\":\"tanh\"}},{\"dense\":{\"units\":6}}],\"activation\":\"tanh\"}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 1, {4}, 3, 1},
        {"fd residual projection (dense)", "{\"layers\":[{\"dense\":{\"units\":6,\"activation\":\"tanh\"}},{\"residual\":{\"layers\":[{\"dense\":{\"units\":4,\"activation\":\"tanh\"}}]}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 1, {4}, 3, 1},
        {"fd residual projection (1x1 conv, stride 2)", "{\"layers\":[{\"conv2d\":{\"filters\":2,\"kernel\":3,\"padding\":\"same\",\"activation\":\"tanh\"}},{\"residual\":{\"layers\":[{\"conv2d\":{\"filters\":3,\"kernel\":3,\"padding\":\"same\",\"stride\":2,\"activation\":\"tanh\"}}]}},{\"flatten\":{}},{\"dense\":{\"units\":3}}]," L_SCCE "}", 3, {6, 6, 1}, 3, 1},
        {"fd loss binary_crossentropy (fused sigmoid)", "{\"layers\":[{\"dense\":{\"units\":5,\"activation\":\"tanh\"}},{\"dense\":{\"units\":2,\"activation\":\"sigmoid\"}}],\"loss\":\"binary_crossentropy\"}", 1, {4}, 2, 0},
        {"fd loss binary_crossentropy (probabilities)", "{\"layers\":[{\"dense\":{\"units\":5,\"activation\":\"tanh\"}},{\"dense\":{\"units\":2}},{\"activation\":\"sigmoid\"},{\"activation\":\"tanh\"}],\"loss\":\"binary_crossentropy\"}", 1, {4}, 2, 0},
        {"fd loss mse", "{\"layers\":[{\"dense\":{\"units\":5,\"activation\":\"tanh\"}},{\"dense\":{\"units\":3}}],\"loss\":\"mse\"}", 1, {4}, 3, 0},
        {"fd loss mae", "{\"layers\":[{\"dense\":{\"units\":5,\"activation\":\"tanh\"}},{\"dense\":{\"units\":3}}],\"loss\":\"mae\"}", 1, {4}, 3, 0},
        {"fd loss sparse CE (no final softmax)", "{\"layers\":[{\"dense\":{\"units\":5,\"activation\":\"tanh\"}},{\"dense\":{\"units\":4}}]," L_SCCE "}", 1, {4}, 4, 1},
    };
    for (size_t i = 0; i < HPO_ARRAY_LEN(cases); i++) run_fd(&cases[i]);
}

/* conv2d(relu)+maxpool runs fused and chunked; conv2d + activation layer +
 * maxpool takes the plain path. Same parameters: outputs and gradients agree. */
static void test_conv_pool_fused_vs_plain(void **state) {
    (void)state;
    const char *a = "{\"layers\":[{\"conv2d\":{\"filters\":2,\"kernel\":3,\"padding\":\"same\",\"activation\":\"tanh\"}},"
                    "{\"conv2d\":{\"filters\":64,\"kernel\":3,\"padding\":\"same\",\"activation\":\"relu\"}},"
                    "{\"maxpool2d\":{\"pool\":2}},{\"global_avg_pool\":{}},{\"dense\":{\"units\":3}}]}";
    const char *b = "{\"layers\":[{\"conv2d\":{\"filters\":2,\"kernel\":3,\"padding\":\"same\",\"activation\":\"tanh\"}},"
                    "{\"conv2d\":{\"filters\":64,\"kernel\":3,\"padding\":\"same\"}},{\"activation\":\"relu\"},"
                    "{\"maxpool2d\":{\"pool\":2}},{\"global_avg_pool\":{}},{\"dense\":{\"units\":3}}]}";
    eng_model *m[2];
    const float *out[2];
    int shape[3] = {64, 64, 1}, B = 5;
    int32_t lab[5] = {0, 1, 2, 1, 0};
    hpo_rng r;
    hpo_rng_seed(&r, 11);
    float *x = rnd((size_t)B * 64 * 64, &r, 1.0f);
    for (int k = 0; k < 2; k++) {
        hpo_error err;
        json_t *t = json_loads(k ? b : a, 0, NULL);
        assert_int_equal(eng_model_new(t, NULL, 3, shape, 3, 9, &m[k], &err), 0);
        json_decref(t);
        assert_int_equal(eng_model_reserve(m[k], B, ENG_PREC_FP32), 0);
        memcpy(m[k]->input, x, (size_t)B * 64 * 64 * 4);
        assert_int_equal(eng_model_forward(m[k], B, 1, &out[k]), 0);
        eng_loss_compute(m[k]->loss, m[k]->final_act, out[k], lab, NULL, B, 3, 1.0f, m[k]->dlogits, NULL);
        assert_int_equal(eng_model_backward(m[k], B), 0);
    }
    assert_true(m[0]->layers[1].pool_fused && !m[1]->layers[1].pool_fused);
    assert_int_equal(m[0]->nparams, m[1]->nparams);
    double go = maxdiff(out[0], out[1], (size_t)B * 3), gg = maxdiff(m[0]->grads, m[1]->grads, m[0]->nparams);
    check("conv(relu)+maxpool fused+chunked vs plain: logits", go, 1e-5);
    check("conv(relu)+maxpool fused+chunked vs plain: gradients", gg, 1e-5);
    eng_model_free(m[0]);
    eng_model_free(m[1]);
    free(x);
}

/* Binary accuracy (one sigmoid output) counts class 1 above 0.5 only, as
 * Keras' binary_accuracy: a logit of 0 (p = 0.5 exactly) predicts class 0. */
static void test_binary_accuracy_threshold(void **state) {
    (void)state;
    const float z[4] = {0.0f, 0.0f, 1e-3f, -1e-3f};
    const int32_t labels[4] = {0, 1, 1, 0};
    eng_metric_sums acc = {0};
    eng_loss_compute(ENG_LOSS_BCE, ENG_ACT_SIGMOID, z, labels, NULL, 4, 1, 1.0f, NULL, &acc);
    printf("  binary accuracy at p = 0.5: %g of 4 right (expected 3)\n", acc.correct);
    assert_true(acc.correct == 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_naive_vs_fast),   cmocka_unit_test(test_conv_naive_vs_fast),
        cmocka_unit_test(test_pool_bn_naive_vs_fast), cmocka_unit_test(test_act_naive_vs_fast),
        cmocka_unit_test(test_fd_layers),              cmocka_unit_test(test_conv_pool_fused_vs_plain),
        cmocka_unit_test(test_dropout_masks),          cmocka_unit_test(test_binary_accuracy_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
