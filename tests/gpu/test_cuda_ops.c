/* test_cuda_ops.c - every device op of cuda_ops.h against the CPU engine's
 * naive reference (the _ref functions of engine/) or its fast path where the
 * two must agree bit for bit (dropout masks, gathers, bf16 and fp16 rounding), on
 * fresh random inputs at several shapes, odd ones included, printing the max
 * relative error of each (f32 < 1e-4, bf16 and fp16 < 1e-2). Weights and biases sit
 * at odd float offsets of one block, as in a model's parameter block, and
 * 16-bit weights at odd offsets of a 16-bit block (2-byte aligned), as in
 * the 16-bit copy of it, so the cuBLASLt alignment handling is exercised.
 * Skipped (77) without a GPU. */
#include "gpu_test.h"

#include "bf16.h"
#include "dnnl_ops.h"
#include "loss.h"
#include "ops.h"

typedef struct shape3 {
    int B, I, O;
} shape3;

static const shape3 dense_shapes[] = {{1, 1, 1}, {7, 13, 5}, {64, 100, 10}, {33, 257, 129}, {128, 784, 256}, {256, 64, 1}};
static const int dense_acts[] = {ENG_ACT_NONE, ENG_ACT_RELU, ENG_ACT_GELU, ENG_ACT_TANH, ENG_ACT_SIGMOID};

enum { F32 = 0, BF16 = 1, FP16 = 2 }; /* the GEMMs' input format */

/* one dense layer, f32, bf16 or fp16, forward and backward vs the reference;
 * offset: floats before w in the parameter block (b follows w directly) */
static void dense_case(const shape3 *s, int act, int with_bias, int separate_z, int bf16, size_t offset, hpo_rng *r) {
    int B = s->B, I = s->I, O = s->O;
    size_t nx = (size_t)B * I, nw = (size_t)I * O, ny = (size_t)B * O;
    float *x = rnd(nx, r, 1.0f), *w = rnd(nw, r, 1.0f / sqrtf((float)I)), *b = rnd((size_t)O, r, 0.5f);
    float *dy = rnd(ny, r, 1.0f);
    if (bf16 == BF16) { /* the reference sees the inputs the device sees */
        eng_round_bf16_n(x, nx);
        eng_round_bf16_n(w, nw);
    } else if (bf16 == FP16) {
        eng_round_fp16_n(x, nx);
        eng_round_fp16_n(w, nw);
    }
    eng_cuda_set_fp16(g_cu, bf16 == FP16);
    float *zr = malloc(ny * 4), *yr = malloc(ny * 4), *dr = malloc(ny * 4), *dxr = malloc(nx * 4), *dwr = malloc(nw * 4),
          *dbr = malloc((size_t)O * 4);
    const float *bias = with_bias ? b : NULL;
    eng_dense_forward_ref(x, w, bias, zr, yr, B, I, O, act);

    /* the parameter block: [offset][w][b] */
    size_t np = offset + nw + (size_t)O;
    float *blk = calloc(np, 4);
    memcpy(blk + offset, w, nw * 4);
    memcpy(blk + offset + nw, b, (size_t)O * 4);
    float *dp = dev_from(blk, np * 4), *dw_dev = dp + offset, *db_dev = dp + offset + nw;
    float *dx_in = dev_from(x, nx * 4), *dz = dev_new(ny * 4), *dyv = dev_new(ny * 4), *dd = dev_from(dy, ny * 4);
    float *gblk = dev_new(np * 4), *gdx = dev_new(nx * 4);
    uint16_t *xb = NULL, *wb = NULL, *wblk = NULL, *d16 = NULL;
    float *zdev = separate_z ? dz : dyv;
    poison(dz, ny * 4);
    poison(dyv, ny * 4);
    poison(gblk, np * 4);
    poison(gdx, nx * 4);
    int rc;
    if (bf16) {
        xb = dev_new(nx * 2);
        wblk = dev_new((offset + nw) * 2); /* the 16-bit copy of the block: odd offsets are 2-byte aligned */
        wb = wblk + offset;
        d16 = dev_new(ny * 2);
        assert_int_equal(eng_cuda_to_h16(g_cu, dx_in, xb, nx), 0);
        assert_int_equal(eng_cuda_to_h16(g_cu, dw_dev, wb, nw), 0);
        rc = eng_cuda_dense_forward_h16(g_cu, xb, wb, with_bias ? db_dev : NULL, zdev, dyv, B, I, O, act);
    } else {
        rc = eng_cuda_dense_forward(g_cu, dx_in, dw_dev, with_bias ? db_dev : NULL, zdev, dyv, B, I, O, act);
    }
    assert_int_equal(rc, 0);
    sync_ok();
    char what[120];
    double tol = bf16 ? TOL_BF16 : TOL_F32;
    snprintf(what, sizeof what, "dense%s %dx%dx%d %s%s%s off%zu y", bf16 == FP16 ? "fp16" : bf16 ? "bf16" : "", B, I, O,
             eng_act_name(act),
             with_bias ? "+b" : "", separate_z ? " z" : "", offset);
    float *yh = fetch(dyv, ny);
    check_close(what, yh, yr, ny, tol);
    float *zh = separate_z ? fetch(dz, ny) : NULL;
    if (separate_z && act != ENG_ACT_RELU) { /* relu with a z buffer: z is not defined (ops.h) */
        what[strlen(what) - 1] = 'z';
        check_close(what, zh, zr, ny, tol);
    }
    /* the reference backward from the device's own forward outputs, so a
     * relu output that rounds to the other side of 0 cannot flip a gradient */
    memcpy(dr, dy, ny * 4);
    const float *zref = zh && act != ENG_ACT_RELU ? zh : yh;
    int ref_act = act;
    if (bf16 == FP16) { /* mixed_fp16 rounds dz before the bias sum and the GEMMs (model_run.c's rounds_dz_fp16) */
        eng_act_backward_ref(act, zref, yh, dr, (size_t)B, (size_t)O);
        eng_round_fp16_n(dr, ny);
        ref_act = ENG_ACT_NONE;
    }
    eng_dense_backward_ref(x, w, zref, yh, dr, dxr, dwr, dbr, B, I, O, ref_act);
    free(zh);
    float *gw = gblk + offset, *gb = gblk + offset + nw;
    if (bf16)
        rc = eng_cuda_dense_backward_h16(g_cu, xb, wb, zdev, dyv, dd, d16, gdx, gw, with_bias ? gb : NULL, B, I, O, act);
    else
        rc = eng_cuda_dense_backward(g_cu, dx_in, dw_dev, zdev, dyv, dd, gdx, gw, with_bias ? gb : NULL, B, I, O, act);
    assert_int_equal(rc, 0);
    sync_ok();
    float *dxh = fetch(gdx, nx), *gh = fetch(gblk, np), *dzh = fetch(dd, ny);
    size_t at = strlen(what) - 1;
    snprintf(what + at, sizeof what - at, "dz");
    /* the activation backward is f32 in both; fp16 then rounds it, where a
     * last-bit difference may round to the other fp16 neighbour */
    double dz_tol = bf16 == FP16 ? tol : TOL_F32;
    check_close(what, dzh, dr, ny, dz_tol);
    snprintf(what + at, sizeof what - at, "dx");
    check_close(what, dxh, dxr, nx, tol);
    snprintf(what + at, sizeof what - at, "dw");
    check_close(what, gh + offset, dwr, nw, tol);
    if (with_bias) {
        snprintf(what + at, sizeof what - at, "db");
        check_close(what, gh + offset + nw, dbr, (size_t)O, dz_tol);
    }
    eng_cuda_set_fp16(g_cu, 0);
    eng_cuda_free(g_cu, xb);
    eng_cuda_free(g_cu, wblk);
    eng_cuda_free(g_cu, d16);
    eng_cuda_free(g_cu, dp);
    eng_cuda_free(g_cu, dx_in);
    eng_cuda_free(g_cu, dz);
    eng_cuda_free(g_cu, dyv);
    eng_cuda_free(g_cu, dd);
    eng_cuda_free(g_cu, gblk);
    eng_cuda_free(g_cu, gdx);
    free(x), free(w), free(b), free(dy), free(zr), free(yr), free(dr), free(dxr), free(dwr), free(dbr), free(blk);
    free(yh), free(dxh), free(gh), free(dzh);
}

static void test_dense_f32(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 11);
    for (size_t s = 0; s < HPO_ARRAY_LEN(dense_shapes); s++)
        for (size_t a = 0; a < HPO_ARRAY_LEN(dense_acts); a++) {
            int act = dense_acts[a];
            /* aligned block, then odd offsets; relu both fused (z == y) and not */
            dense_case(&dense_shapes[s], act, 1, eng_act_needs_z(act), 0, 0, &r);
            dense_case(&dense_shapes[s], act, 1, 1, 0, 3, &r);
            if (act == ENG_ACT_RELU) dense_case(&dense_shapes[s], act, 1, 0, 0, 5, &r);
        }
    dense_case(&dense_shapes[3], ENG_ACT_RELU, 0, 0, 0, 1, &r); /* no bias: plain relu epilogue */
    dense_case(&dense_shapes[3], ENG_ACT_NONE, 0, 0, 0, 0, &r);
}

/* every dense shape and activation with 16-bit GEMMs in format fmt */
static void dense_h16_cases(int fmt, uint64_t seed) {
    hpo_rng r;
    hpo_rng_seed(&r, seed);
    for (size_t s = 0; s < HPO_ARRAY_LEN(dense_shapes); s++)
        for (size_t a = 0; a < HPO_ARRAY_LEN(dense_acts); a++) {
            int act = dense_acts[a];
            dense_case(&dense_shapes[s], act, 1, eng_act_needs_z(act), fmt, 0, &r);
            dense_case(&dense_shapes[s], act, 1, 1, fmt, 7, &r);
        }
}

static void test_dense_bf16(void **state) {
    (void)state;
    dense_h16_cases(BF16, 12);
}

/* mixed_fp16's GEMMs: fp16 inputs and weights (the context set to fp16) */
static void test_dense_fp16(void **state) {
    (void)state;
    dense_h16_cases(FP16, 13);
}

/* the fp16 conversion and rounding against bf16.c's scalar and fast ones:
 * bit for bit, subnormals, overflow to Inf and ties included (a NaN stays
 * a NaN; its payload is not compared) */
static void test_fp16_rounding(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 42);
    size_t n = 70001;
    float *x = rnd(n, &r, 3e3f), *ref = malloc(n * 4);
    const float sp[] = {INFINITY, -INFINITY, 65504.0f, 65519.99f, 65520.0f, -70000.0f, 6e-8f, 2.9e-8f, 3e-8f,
                        1e-8f, -0.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f, 1e-40f, NAN};
    memcpy(x, sp, sizeof sp);
    for (size_t i = 100; i < 2000; i++) x[i] = ldexpf(x[i] / 3e3f, -14 - (int)(i % 12)); /* subnormal range */
    memcpy(ref, x, n * 4);
    eng_round_fp16_n(ref, n);
    uint16_t *h16 = malloc(n * 2), *r16 = malloc(n * 2);
    for (size_t i = 0; i < n; i++) r16[i] = eng_f32_to_fp16(x[i]);
    float *dx = dev_from(x, n * 4), *dy = dev_new(n * 4);
    uint16_t *d16 = dev_new(n * 2);
    eng_cuda_set_fp16(g_cu, 1);
    assert_int_equal(eng_cuda_to_h16(g_cu, dx, d16, n), 0);
    assert_int_equal(eng_cuda_round_fp16(g_cu, dx, dy, n), 0);
    eng_cuda_set_fp16(g_cu, 0);
    sync_ok();
    float *y = fetch(dy, n);
    down(h16, d16, n * 2);
    size_t nan_at = HPO_ARRAY_LEN(sp) - 1;
    assert_true(isnan(y[nan_at]) && (h16[nan_at] & 0x7c00) == 0x7c00 && (h16[nan_at] & 0x3ff));
    y[nan_at] = ref[nan_at] = 0, h16[nan_at] = r16[nan_at] = 0;
    check_exact("fp16 conversion n=70001 (Inf, overflow, subnormal, ties)", h16, r16, n * 2);
    check_exact("fp16 rounding = eng_round_fp16_n", y, ref, n * 4);
    eng_cuda_free(g_cu, dx), eng_cuda_free(g_cu, dy), eng_cuda_free(g_cu, d16);
    free(x), free(ref), free(h16), free(r16), free(y);
}

/* the TF32 switch: off by default (checked above at 1e-4); with allow_tf32
 * a large product still agrees to TF32's precision (3e-3) */
static void test_dense_tf32(void **state) {
    (void)state;
    eng_cuda *keep = g_cu, *tf = NULL;
    hpo_error err = {{0}, {0}};
    int dev = getenv("HPO_TEST_DEVICE") ? atoi(getenv("HPO_TEST_DEVICE")) : 0;
    assert_int_equal(eng_cuda_open(dev, 1, &tf, &err), 0);
    g_cu = tf;
    hpo_rng r;
    hpo_rng_seed(&r, 13);
    shape3 s = {128, 784, 256};
    int B = s.B, I = s.I, O = s.O;
    float *x = rnd((size_t)B * I, &r, 1), *w = rnd((size_t)I * O, &r, 0.05f), *yr = malloc((size_t)B * O * 4);
    eng_dense_forward_ref(x, w, NULL, yr, yr, B, I, O, ENG_ACT_NONE);
    float *dx = dev_from(x, (size_t)B * I * 4), *dw = dev_from(w, (size_t)I * O * 4), *dy = dev_new((size_t)B * O * 4);
    assert_int_equal(eng_cuda_dense_forward(g_cu, dx, dw, NULL, dy, dy, B, I, O, ENG_ACT_NONE), 0);
    sync_ok();
    float *yh = fetch(dy, (size_t)B * O);
    check_close("dense 128x784x256 with allow_tf32", yh, yr, (size_t)B * O, 3e-3);
    eng_cuda_free(g_cu, dx), eng_cuda_free(g_cu, dw), eng_cuda_free(g_cu, dy);
    free(x), free(w), free(yr), free(yh);
    eng_cuda_close(tf);
    g_cu = keep;
}

static void test_activations(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 21);
    static const size_t shapes[][2] = {{1, 1}, {3, 7}, {64, 1000}, {1000, 3}};
    static const int acts[] = {ENG_ACT_NONE, ENG_ACT_RELU, ENG_ACT_GELU, ENG_ACT_TANH, ENG_ACT_SIGMOID, ENG_ACT_SOFTMAX};
    for (size_t s = 0; s < HPO_ARRAY_LEN(shapes); s++)
        for (size_t a = 0; a < HPO_ARRAY_LEN(acts); a++) {
            size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
            int act = acts[a];
            float *z = rnd(n, &r, 3.0f), *d = rnd(n, &r, 1.0f), *yr = malloc(n * 4), *dr = malloc(n * 4);
            eng_act_forward_ref(act, z, yr, rows, cols);
            memcpy(dr, d, n * 4);
            eng_act_backward_ref(act, z, yr, dr, rows, cols);
            float *dz = dev_from(z, n * 4), *dy = dev_new(n * 4), *dd = dev_from(d, n * 4);
            poison(dy, n * 4);
            assert_int_equal(eng_cuda_act_forward(g_cu, act, dz, dy, rows, cols), 0);
            assert_int_equal(eng_cuda_act_backward(g_cu, act, dz, dy, dd, rows, cols), 0);
            sync_ok();
            float *yh = fetch(dy, n), *dh = fetch(dd, n);
            char what[96];
            snprintf(what, sizeof what, "act %s %zux%zu forward", eng_act_name(act), rows, cols);
            check_close(what, yh, yr, n, TOL_F32);
            snprintf(what, sizeof what, "act %s %zux%zu backward", eng_act_name(act), rows, cols);
            check_close(what, dh, dr, n, TOL_F32);
            eng_cuda_free(g_cu, dz), eng_cuda_free(g_cu, dy), eng_cuda_free(g_cu, dd);
            free(z), free(d), free(yr), free(dr), free(yh), free(dh);
        }
}

/* the masks of the CPU fast path for the same generator state, bit for bit */
static void test_dropout(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 31);
    static const size_t sizes[] = {1, 17, 1000, 100003};
    static const float rates[] = {0.0f, 0.1f, 0.5f, 0.9f};
    for (size_t s = 0; s < HPO_ARRAY_LEN(sizes); s++)
        for (size_t k = 0; k < HPO_ARRAY_LEN(rates); k++) {
            size_t n = sizes[s];
            float *x = rnd(n, &r, 1.0f), *dy = rnd(n, &r, 1.0f), *y = malloc(n * 4), *mask = malloc(n * 4),
                  *dx = malloc(n * 4);
            hpo_rng model, copy;
            hpo_rng_seed(&model, 1000 + s * 10 + k);
            copy = model;
            eng_dropout_forward(x, y, mask, n, rates[k], &model);
            eng_dropout_backward(dy, mask, dx, n);
            uint64_t key = hpo_rng_u64(&copy); /* the draw eng_dropout_forward made */
            float *d_x = dev_from(x, n * 4), *d_y = dev_new(n * 4), *d_m = dev_new(n * 4), *d_dy = dev_from(dy, n * 4),
                  *d_dx = dev_new(n * 4);
            poison(d_y, n * 4), poison(d_m, n * 4), poison(d_dx, n * 4);
            assert_int_equal(eng_cuda_dropout_forward(g_cu, d_x, d_y, d_m, n, rates[k], key), 0);
            assert_int_equal(eng_cuda_dropout_backward(g_cu, d_dy, d_m, d_dx, n), 0);
            sync_ok();
            float *yh = fetch(d_y, n), *mh = fetch(d_m, n), *dxh = fetch(d_dx, n);
            char what[96];
            snprintf(what, sizeof what, "dropout n=%zu rate %.1f mask", n, (double)rates[k]);
            check_exact(what, mh, mask, n * 4);
            check_exact("  y", yh, y, n * 4);
            check_exact("  dx", dxh, dx, n * 4);
            uint64_t *d_key = dev_from(&key, sizeof key); /* the key read on the device (graph replay) */
            poison(d_y, n * 4), poison(d_m, n * 4);
            assert_int_equal(eng_cuda_dropout_forward_dev(g_cu, d_x, d_y, d_m, n, rates[k], d_key), 0);
            sync_ok();
            float *yh2 = fetch(d_y, n), *mh2 = fetch(d_m, n);
            check_exact("  key from device memory: mask", mh2, mask, n * 4);
            check_exact("  key from device memory: y", yh2, y, n * 4);
            free(yh2), free(mh2);
            eng_cuda_free(g_cu, d_key);
            eng_cuda_free(g_cu, d_x), eng_cuda_free(g_cu, d_y), eng_cuda_free(g_cu, d_m), eng_cuda_free(g_cu, d_dy),
                eng_cuda_free(g_cu, d_dx);
            free(x), free(dy), free(y), free(mask), free(dx), free(yh), free(mh), free(dxh);
        }
}

/* conv2d as im2col + the dense op (+ col2im backward) against the naive
 * reference on random inputs: valid and same padding, strides 1 and 2, 1 to
 * 16 channels; f32 within TOL_F32, and with bf16 rows and weights against
 * the reference on bf16-rounded inputs within TOL_BF16. im2col from a bf16
 * source equals im2col from its f32 values, bit for bit. */
typedef struct conv_case {
    int N, H, W, C, K, OC, stride, padding, act;
} conv_case;

static void conv_one(const conv_case *cc, int bf16, hpo_rng *r) {
    eng_conv2d_shape s;
    assert_int_equal(eng_conv2d_shape_init(&s, cc->N, cc->H, cc->W, cc->C, cc->K, cc->K, cc->OC, cc->stride,
                                           cc->stride, cc->padding),
                     0);
    size_t nx = (size_t)s.N * s.H * s.W * s.C, ny = (size_t)s.N * s.OH * s.OW * s.OC;
    int rows = s.N * s.OH * s.OW, KK = s.KH * s.KW * s.C;
    size_t nw = (size_t)KK * s.OC, ncols = (size_t)rows * KK;
    float *x = rnd(nx, r, 1.0f), *w = rnd(nw, r, 0.3f), *b = rnd((size_t)s.OC, r, 0.1f), *dy = rnd(ny, r, 1.0f);
    if (bf16) eng_round_bf16_n(x, nx), eng_round_bf16_n(w, nw);
    float *z = malloc(ny * 4), *y = malloc(ny * 4), *d = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4),
          *db = malloc((size_t)s.OC * 4);
    eng_conv2d_forward_ref(&s, x, w, b, z, y, cc->act);
    memcpy(d, dy, ny * 4);
    eng_conv2d_backward_ref(&s, x, w, z, y, d, dx, dw, db, cc->act);
    float *gx = dev_from(x, nx * 4), *gw = dev_from(w, nw * 4), *gb = dev_from(b, (size_t)s.OC * 4);
    float *gz = dev_new(ny * 4), *gy = dev_new(ny * 4), *gd = dev_from(dy, ny * 4), *gdx = dev_new(nx * 4);
    float *gdw = dev_new(nw * 4), *gdb = dev_new((size_t)s.OC * 4), *gdcols = dev_new(ncols * 4);
    poison(gz, ny * 4), poison(gy, ny * 4), poison(gdx, nx * 4), poison(gdw, nw * 4), poison(gdb, (size_t)s.OC * 4);
    int needz = eng_act_needs_z(cc->act);
    if (bf16) {
        uint16_t *x16 = malloc(nx * 2), *w16 = malloc(nw * 2);
        eng_f32_to_bf16_n(x, x16, nx);
        eng_f32_to_bf16_n(w, w16, nw);
        uint16_t *gx16 = dev_from(x16, nx * 2), *gw16 = dev_from(w16, nw * 2), *gc16 = dev_new(ncols * 2),
                 *gc16b = dev_new(ncols * 2), *gd16 = dev_new(ny * 2);
        assert_int_equal(eng_cuda_im2col(g_cu, &s, gx, NULL, NULL, gc16), 0);
        assert_int_equal(eng_cuda_im2col(g_cu, &s, NULL, gx16, NULL, gc16b), 0);
        assert_int_equal(eng_cuda_dense_forward_h16(g_cu, gc16, gw16, gb, needz ? gz : gy, gy, rows, KK, s.OC, cc->act), 0);
        assert_int_equal(eng_cuda_dense_backward_h16(g_cu, gc16, gw16, needz ? gz : gy, gy, gd, gd16, gdcols, gdw, gdb,
                                                      rows, KK, s.OC, cc->act),
                         0);
        sync_ok();
        uint16_t *c1 = malloc(ncols * 2), *c2 = malloc(ncols * 2);
        down(c1, gc16, ncols * 2);
        down(c2, gc16b, ncols * 2);
        check_exact("  im2col from bf16 = from f32", c2, c1, ncols * 2);
        free(c1), free(c2), free(x16), free(w16);
        eng_cuda_free(g_cu, gx16), eng_cuda_free(g_cu, gw16), eng_cuda_free(g_cu, gc16), eng_cuda_free(g_cu, gc16b);
        eng_cuda_free(g_cu, gd16);
    } else {
        float *gcols = dev_new(ncols * 4);
        assert_int_equal(eng_cuda_im2col(g_cu, &s, gx, NULL, gcols, NULL), 0);
        assert_int_equal(eng_cuda_dense_forward(g_cu, gcols, gw, gb, needz ? gz : gy, gy, rows, KK, s.OC, cc->act), 0);
        assert_int_equal(eng_cuda_dense_backward(g_cu, gcols, gw, needz ? gz : gy, gy, gd, gdcols, gdw, gdb, rows, KK,
                                                 s.OC, cc->act),
                         0);
        eng_cuda_free(g_cu, gcols);
    }
    assert_int_equal(eng_cuda_col2im(g_cu, &s, gdcols, gdx), 0);
    sync_ok();
    float *hy = fetch(gy, ny), *hdx = fetch(gdx, nx), *hdw = fetch(gdw, nw), *hdb = fetch(gdb, (size_t)s.OC);
    double tol = bf16 ? TOL_BF16 : TOL_F32;
    char what[96];
    snprintf(what, sizeof what, "conv%s %dx%dx%dx%d k%d oc%d s%d %s %s y", bf16 ? "16" : "", s.N, s.H, s.W, s.C,
             cc->K, s.OC, cc->stride, cc->padding == ENG_PAD_SAME ? "same" : "valid", eng_act_name(cc->act));
    check_close(what, hy, y, ny, tol);
    check_close("  dx", hdx, dx, nx, tol);
    check_close("  dw", hdw, dw, nw, tol);
    check_close("  db", hdb, db, (size_t)s.OC, tol);
    free(hy), free(hdx), free(hdw), free(hdb);
    float *bufs[] = {gx, gw, gb, gz, gy, gd, gdx, gdw, gdb, gdcols};
    for (size_t i = 0; i < HPO_ARRAY_LEN(bufs); i++) eng_cuda_free(g_cu, bufs[i]);
    free(x), free(w), free(b), free(dy), free(z), free(y), free(d), free(dx), free(dw), free(db);
}

static void test_conv2d(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 51);
    static const conv_case cases[] = {
        {4, 28, 28, 1, 3, 8, 1, ENG_PAD_VALID, ENG_ACT_NONE}, {3, 9, 7, 3, 3, 5, 2, ENG_PAD_SAME, ENG_ACT_RELU},
        {2, 8, 8, 16, 3, 16, 1, ENG_PAD_SAME, ENG_ACT_GELU},  {2, 6, 10, 4, 5, 3, 2, ENG_PAD_VALID, ENG_ACT_TANH},
        {5, 4, 4, 2, 1, 7, 1, ENG_PAD_VALID, ENG_ACT_RELU},
    };
    for (size_t i = 0; i < HPO_ARRAY_LEN(cases); i++) {
        conv_one(&cases[i], 0, &r);
        conv_one(&cases[i], 1, &r);
    }
}

/* max pooling equals the CPU's (eng_maxpool2d_forward/backward) bit for bit:
 * outputs, winners (ties included: small integers) and gradients, with
 * disjoint and overlapping windows */
static void test_maxpool(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 53);
    static const int cases[][7] = {/* N, H, W, C, pool, stride, ties */
                                   {4, 26, 26, 8, 2, 2, 0},
                                   {3, 9, 11, 3, 3, 2, 1},
                                   {2, 7, 7, 5, 2, 1, 1}};
    for (size_t k = 0; k < HPO_ARRAY_LEN(cases); k++) {
        int N = cases[k][0], H = cases[k][1], W = cases[k][2], C = cases[k][3], p = cases[k][4], st = cases[k][5];
        int OH = (H - p) / st + 1, OW = (W - p) / st + 1;
        size_t nx = (size_t)N * H * W * C, ny = (size_t)N * OH * OW * C;
        float *x = rnd(nx, &r, 1.0f), *dy = rnd(ny, &r, 1.0f);
        if (cases[k][6])
            for (size_t i = 0; i < nx; i++) x[i] = (float)hpo_rng_below(&r, 3);
        float *y = malloc(ny * 4), *dx = malloc(nx * 4);
        int32_t *arg = malloc(ny * 4);
        eng_maxpool2d_forward(x, y, arg, N, H, W, C, p, p, st, st, OH, OW);
        eng_maxpool2d_backward(dy, arg, dx, N, H, W, C, OH, OW);
        float *gx = dev_from(x, nx * 4), *gy = dev_new(ny * 4), *gdy = dev_from(dy, ny * 4), *gdx = dev_new(nx * 4);
        int32_t *garg = dev_new(ny * 4);
        poison(gy, ny * 4), poison(garg, ny * 4), poison(gdx, nx * 4);
        assert_int_equal(eng_cuda_maxpool_forward(g_cu, gx, gy, garg, N, H, W, C, p, p, st, st, OH, OW), 0);
        assert_int_equal(eng_cuda_maxpool_backward(g_cu, gdy, garg, gdx, N, H, W, C, p, p, st, st, OH, OW), 0);
        sync_ok();
        float *hy = fetch(gy, ny), *hdx = fetch(gdx, nx);
        int32_t *harg = malloc(ny * 4);
        down(harg, garg, ny * 4);
        char what[96];
        snprintf(what, sizeof what, "maxpool %dx%dx%dx%d pool %d stride %d%s y", N, H, W, C, p, st,
                 cases[k][6] ? " ties" : "");
        check_exact(what, hy, y, ny * 4);
        check_exact("  winners", harg, arg, ny * 4);
        check_exact("  dx", hdx, dx, nx * 4);
        eng_cuda_free(g_cu, gx), eng_cuda_free(g_cu, gy), eng_cuda_free(g_cu, gdy), eng_cuda_free(g_cu, gdx);
        eng_cuda_free(g_cu, garg);
        free(x), free(dy), free(y), free(dx), free(arg), free(hy), free(hdx), free(harg);
    }
}

/* batch normalisation against the CPU's (ops_misc.c): training forward
 * (y, xhat, invstd, the running statistics), evaluation, backward (dx,
 * dgamma, dbeta), within TOL_F32 (double sums in another order) */
static void test_batchnorm(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 59);
    static const size_t shapes[][2] = {{1000, 8}, {37, 3}, {4096, 64}, {2, 1}};
    for (size_t k = 0; k < HPO_ARRAY_LEN(shapes); k++) {
        size_t M = shapes[k][0], n;
        int C = (int)shapes[k][1];
        n = M * (size_t)C;
        float *x = rnd(n, &r, 2.0f), *g = rnd((size_t)C, &r, 1.0f), *b = rnd((size_t)C, &r, 0.5f), *dy = rnd(n, &r, 1.0f);
        for (size_t i = 0; i < n; i++) x[i] += 3.0f; /* a mean away from 0 */
        float *rm = rnd((size_t)C, &r, 0.1f), *rv = malloc((size_t)C * 4);
        for (int c = 0; c < C; c++) rv[c] = 1.0f + 0.1f * (float)c;
        float *y = malloc(n * 4), *xhat = malloc(n * 4), *inv = malloc((size_t)C * 4), *ye = malloc(n * 4);
        float *dx = malloc(n * 4), *dg = malloc((size_t)C * 4), *db = malloc((size_t)C * 4);
        float *grm = dev_from(rm, (size_t)C * 4), *grv = dev_from(rv, (size_t)C * 4);
        eng_batchnorm_forward_train(x, y, g, b, rm, rv, 0.9f, 1e-3f, xhat, inv, M, C);
        eng_batchnorm_forward_eval(x, ye, g, b, rm, rv, 1e-3f, M, C);
        memcpy(dx, dy, n * 4);
        eng_batchnorm_backward(dx, xhat, inv, g, dx, dg, db, M, C);
        float *gx = dev_from(x, n * 4), *gg = dev_from(g, (size_t)C * 4), *gb = dev_from(b, (size_t)C * 4);
        float *gy = dev_new(n * 4), *gxh = dev_new(n * 4), *gmu = dev_new((size_t)C * 4), *ginv = dev_new((size_t)C * 4);
        float *gye = dev_new(n * 4), *gdy = dev_from(dy, n * 4), *gdg = dev_new((size_t)C * 4), *gdb = dev_new((size_t)C * 4);
        float *gk = dev_new((size_t)C * 12);
        poison(gy, n * 4), poison(gxh, n * 4), poison(gye, n * 4), poison(gdg, (size_t)C * 4), poison(gdb, (size_t)C * 4);
        assert_int_equal(eng_cuda_batchnorm_forward_train(g_cu, gx, gy, gg, gb, grm, grv, 0.9f, 1e-3f, gxh, gmu, ginv, M, C),
                         0);
        assert_int_equal(eng_cuda_batchnorm_forward_eval(g_cu, gx, gye, gg, gb, grm, grv, 1e-3f, M, C), 0);
        assert_int_equal(eng_cuda_batchnorm_backward(g_cu, gdy, gxh, ginv, gg, gdy, gdg, gdb, gk, M, C), 0);
        sync_ok();
        float *hy = fetch(gy, n), *hxh = fetch(gxh, n), *hinv = fetch(ginv, (size_t)C), *hrm = fetch(grm, (size_t)C);
        float *hrv = fetch(grv, (size_t)C), *hye = fetch(gye, n), *hdx = fetch(gdy, n), *hdg = fetch(gdg, (size_t)C);
        float *hdb = fetch(gdb, (size_t)C);
        char what[96];
        snprintf(what, sizeof what, "batchnorm %zux%d train y", M, C);
        check_close(what, hy, y, n, TOL_F32);
        check_close("  xhat", hxh, xhat, n, TOL_F32);
        check_close("  invstd", hinv, inv, (size_t)C, TOL_F32);
        check_close("  running mean", hrm, rm, (size_t)C, TOL_F32);
        check_close("  running variance", hrv, rv, (size_t)C, TOL_F32);
        check_close("  evaluation y", hye, ye, n, TOL_F32);
        check_close("  dx", hdx, dx, n, TOL_F32);
        check_close("  dgamma", hdg, dg, (size_t)C, TOL_F32);
        check_close("  dbeta", hdb, db, (size_t)C, TOL_F32);
        float *gbufs[] = {grm, grv, gx, gg, gb, gy, gxh, gmu, ginv, gye, gdy, gdg, gdb, gk};
        for (size_t i = 0; i < HPO_ARRAY_LEN(gbufs); i++) eng_cuda_free(g_cu, gbufs[i]);
        float *hbufs[] = {x, g, b, dy, rm, rv, y, xhat, inv, ye, dx, dg, db, hy, hxh, hinv, hrm, hrv, hye, hdx, hdg, hdb};
        for (size_t i = 0; i < HPO_ARRAY_LEN(hbufs); i++) free(hbufs[i]);
    }
}

/* augmentation with the CPU's drawn parameters, and global average
 * pooling, equal the CPU's bit for bit, forward and backward */
static void test_augment_gap(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 57);
    static const int cases[][6] = {{5, 8, 8, 1, 1, 1}, {3, 7, 9, 3, 2, 0}, {4, 6, 6, 2, 0, 1}}; /* N H W C k flip */
    for (size_t k = 0; k < HPO_ARRAY_LEN(cases); k++) {
        int N = cases[k][0], H = cases[k][1], W = cases[k][2], C = cases[k][3];
        size_t n = (size_t)N * H * W * C;
        float *x = rnd(n, &r, 1.0f), *dy = rnd(n, &r, 1.0f), *y = malloc(n * 4), *dx = malloc(n * 4);
        int32_t *params = malloc((size_t)N * 3 * 4);
        for (size_t i = 0; i < n; i += 5) dy[i] = -0.0f; /* +0 in dx, as the CPU's sum into zeros gives */
        hpo_rng g;
        hpo_rng_seed(&g, 100 + k);
        eng_augment_forward(x, y, params, N, H, W, C, cases[k][4], cases[k][5], &g);
        eng_augment_backward(dy, params, dx, N, H, W, C);
        float *gx = dev_from(x, n * 4), *gy = dev_new(n * 4), *gdy = dev_from(dy, n * 4), *gdx = dev_new(n * 4);
        int32_t *gp = dev_from(params, (size_t)N * 3 * 4);
        poison(gy, n * 4), poison(gdx, n * 4);
        assert_int_equal(eng_cuda_augment_forward(g_cu, gx, gy, gp, N, H, W, C), 0);
        assert_int_equal(eng_cuda_augment_backward(g_cu, gdy, gp, gdx, N, H, W, C), 0);
        sync_ok();
        float *hy = fetch(gy, n), *hdx = fetch(gdx, n);
        char what[96];
        snprintf(what, sizeof what, "augment %dx%dx%dx%d shift %d flip %d y", N, H, W, C, cases[k][4], cases[k][5]);
        check_exact(what, hy, y, n * 4);
        check_exact("  dx", hdx, dx, n * 4);
        free(hy), free(hdx);
        /* global average pooling of the same x */
        size_t ny = (size_t)N * C;
        float *gyp = dev_new(ny * 4), *py = malloc(ny * 4), *pdy = rnd(ny, &r, 1.0f), *pdx = malloc(n * 4);
        float *gpdy = dev_from(pdy, ny * 4);
        eng_gap_forward(x, py, N, H * W, C);
        eng_gap_backward(pdy, pdx, N, H * W, C);
        poison(gyp, ny * 4), poison(gdx, n * 4);
        assert_int_equal(eng_cuda_gap_forward(g_cu, gx, gyp, N, H * W, C), 0);
        assert_int_equal(eng_cuda_gap_backward(g_cu, gpdy, gdx, N, H * W, C), 0);
        sync_ok();
        hy = fetch(gyp, ny), hdx = fetch(gdx, n);
        snprintf(what, sizeof what, "global_avg_pool %dx%dx%dx%d y", N, H, W, C);
        check_exact(what, hy, py, ny * 4);
        check_exact("  dx", hdx, pdx, n * 4);
        float *bufs[] = {gx, gy, gdy, gdx, gyp, gpdy};
        for (size_t i = 0; i < HPO_ARRAY_LEN(bufs); i++) eng_cuda_free(g_cu, bufs[i]);
        eng_cuda_free(g_cu, gp);
        free(x), free(dy), free(y), free(dx), free(params), free(hy), free(hdx), free(py), free(pdy), free(pdx);
    }
}

/* the steps staged from the device cursor equal the host's slices of the
 * order and the records, the epoch's short last step included, and the
 * cursor advances */
static void test_stage_steps(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 37);
    const size_t rows = 1000, words = 3;
    const int bs = 96, K = 4, spe = (int)((rows + bs - 1) / bs); /* 11 steps, the last of 40 rows */
    uint32_t *order = malloc(rows * 4);
    uint64_t *recs = malloc((size_t)spe * words * 8);
    for (size_t i = 0; i < rows; i++) order[i] = (uint32_t)hpo_rng_below(&r, 1u << 30);
    for (size_t i = 0; i < (size_t)spe * words; i++) recs[i] = hpo_rng_u64(&r);
    uint32_t *d_order = dev_from(order, rows * 4), *d_idx = dev_new((size_t)K * bs * 4);
    uint64_t *d_recs = dev_from(recs, (size_t)spe * words * 8), *d_rec = dev_new((size_t)K * words * 8);
    int32_t *d_cur = dev_new(4);
    assert_int_equal(eng_cuda_zero(g_cu, d_cur, 4), 0);
    int same = 1;
    for (int s0 = 0; s0 < spe;) {
        int steps = s0 + K <= spe ? K : 1;
        size_t first = (size_t)s0 * bs, n = (size_t)steps * bs;
        if (n > rows - first) n = rows - first;
        poison(d_idx, (size_t)K * bs * 4), poison(d_rec, (size_t)K * words * 8);
        assert_int_equal(eng_cuda_stage_steps(g_cu, d_order, rows, bs, d_recs, words * 8, d_cur, steps, d_idx, d_rec), 0);
        assert_int_equal(eng_cuda_cursor_advance(g_cu, d_cur, steps), 0);
        sync_ok();
        uint32_t *idx = malloc(n * 4);
        uint64_t *rec = malloc((size_t)steps * words * 8);
        down(idx, d_idx, n * 4);
        down(rec, d_rec, (size_t)steps * words * 8);
        same &= !memcmp(idx, order + first, n * 4) && !memcmp(rec, recs + (size_t)s0 * words, (size_t)steps * words * 8);
        free(idx), free(rec);
        s0 += steps;
    }
    int32_t cur = 0;
    down(&cur, d_cur, 4);
    printf("  %-44s %s, cursor %d of %d\n", "staged rows and records", same ? "bit-identical" : "DIFFERENT  FAIL", cur,
           spe);
    assert_true(same);
    assert_int_equal(cur, spe);
    eng_cuda_free(g_cu, d_order), eng_cuda_free(g_cu, d_idx), eng_cuda_free(g_cu, d_recs), eng_cuda_free(g_cu, d_rec);
    eng_cuda_free(g_cu, d_cur);
    free(order), free(recs);
}

static void test_add_and_bf16(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 41);
    size_t n = 70001;
    float *a = rnd(n, &r, 1e3f), *b = rnd(n, &r, 1.0f), *y = malloc(n * 4), *sp = rnd(n, &r, 1e3f);
    /* the conversion's special values (the add's NaN payloads differ by design: not compared) */
    sp[0] = NAN, sp[1] = INFINITY, sp[2] = -INFINITY, sp[3] = 1e-40f, sp[4] = -0.0f, sp[5] = 3.3895314e38f;
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    uint16_t *hb = malloc(n * 2), *ref = malloc(n * 2);
    for (size_t i = 0; i < n; i++) ref[i] = eng_f32_to_bf16(sp[i]); /* the scalar rounding, denormals too */
    float *da = dev_from(a, n * 4), *db = dev_from(b, n * 4), *dy = dev_new(n * 4), *dsp = dev_from(sp, n * 4);
    uint16_t *d16 = dev_new(n * 2);
    poison(dy, n * 4);
    assert_int_equal(eng_cuda_to_h16(g_cu, dsp, d16, n), 0);
    assert_int_equal(eng_cuda_add(g_cu, da, db, dy, n), 0);
    sync_ok();
    float *yh = fetch(dy, n);
    down(hb, d16, n * 2);
    check_exact("bf16 conversion n=70001 (NaN, Inf, denormal)", hb, ref, n * 2);
    check_exact("add n=70001", yh, y, n * 4);
    assert_int_equal(eng_cuda_add(g_cu, da, db, da, n), 0); /* in place */
    sync_ok();
    free(yh);
    yh = fetch(da, n);
    check_exact("add in place", yh, y, n * 4);
    eng_cuda_free(g_cu, da), eng_cuda_free(g_cu, db), eng_cuda_free(g_cu, dy), eng_cuda_free(g_cu, d16);
    eng_cuda_free(g_cu, dsp);
    free(a), free(b), free(y), free(hb), free(ref), free(yh), free(sp);
}

/* batches gathered on the device by an index list equal batch.c's gather */
static void test_gather(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 51);
    size_t rows = 1000, ss = 28 * 28 + 3;
    int n = 257, K = 3;
    uint8_t *xu = malloc(rows * ss);
    float *xf = rnd(rows * ss, &r, 2.0f), *tg = rnd(rows * (size_t)K, &r, 1.0f);
    int32_t *lab = malloc(rows * 4);
    uint32_t *idx = malloc((size_t)n * 4);
    for (size_t i = 0; i < rows * ss; i++) xu[i] = (uint8_t)hpo_rng_below(&r, 256);
    for (size_t i = 0; i < rows; i++) lab[i] = (int32_t)hpo_rng_below(&r, 10);
    for (int i = 0; i < n; i++) idx[i] = (uint32_t)hpo_rng_below(&r, rows); /* repeats allowed */
    idx[0] = (uint32_t)rows - 1;
    uint8_t *d_xu = dev_from(xu, rows * ss);
    float *d_xf = dev_from(xf, rows * ss * 4), *d_tg = dev_from(tg, rows * (size_t)K * 4);
    int32_t *d_lab = dev_from(lab, rows * 4), *d_lo = dev_new((size_t)n * 4);
    uint32_t *d_idx = dev_from(idx, (size_t)n * 4);
    float *d_out = dev_new((size_t)n * ss * 4), *d_to = dev_new((size_t)n * K * 4);
    uint16_t *d_o16 = dev_new((size_t)n * ss * 2);
    size_t nf = (size_t)n * ss;
    float *ref = malloc(nf * 4), *h = malloc(nf * 4);
    uint16_t *ref16 = malloc(nf * 2), *h16 = malloc(nf * 2);
    const float scales[] = {1.0f / 255.0f, 1.0f, 0.5f};
    for (int u8 = 0; u8 < 2; u8++)
        for (size_t s = 0; s < HPO_ARRAY_LEN(scales); s++) {
            float sc = scales[s];
            for (int i = 0; i < n; i++)
                for (size_t j = 0; j < ss; j++) {
                    float v = u8 ? (float)xu[(size_t)idx[i] * ss + j] * sc : xf[(size_t)idx[i] * ss + j] * sc;
                    ref[(size_t)i * ss + j] = v;
                    ref16[(size_t)i * ss + j] = eng_f32_to_bf16(v);
                }
            poison(d_out, nf * 4), poison(d_o16, nf * 2);
            const void *src = u8 ? (const void *)d_xu : (const void *)d_xf;
            assert_int_equal(eng_cuda_gather_x(g_cu, src, u8, ss, sc, d_idx, n, d_out, NULL), 0);
            assert_int_equal(eng_cuda_gather_x(g_cu, src, u8, ss, sc, d_idx, n, NULL, d_o16), 0);
            sync_ok();
            down(h, d_out, nf * 4);
            down(h16, d_o16, nf * 2);
            char what[96];
            snprintf(what, sizeof what, "gather %s scale %g f32", u8 ? "u8" : "f32", (double)sc);
            check_exact(what, h, ref, nf * 4);
            check_exact("  bf16", h16, ref16, nf * 2);
        }
    int32_t *lref = malloc((size_t)n * 4), *lh = malloc((size_t)n * 4);
    float *tref = malloc((size_t)n * K * 4), *th = malloc((size_t)n * K * 4);
    for (int i = 0; i < n; i++) {
        lref[i] = lab[idx[i]];
        for (int k = 0; k < K; k++) tref[(size_t)i * K + k] = tg[(size_t)idx[i] * K + k];
    }
    assert_int_equal(eng_cuda_gather_labels(g_cu, d_lab, d_idx, n, d_lo), 0);
    assert_int_equal(eng_cuda_gather_targets(g_cu, d_tg, K, d_idx, n, d_to), 0);
    sync_ok();
    down(lh, d_lo, (size_t)n * 4);
    down(th, d_to, (size_t)n * K * 4);
    check_exact("gather labels", lh, lref, (size_t)n * 4);
    check_exact("gather targets K=3", th, tref, (size_t)n * K * 4);
    eng_cuda_free(g_cu, d_xu), eng_cuda_free(g_cu, d_xf), eng_cuda_free(g_cu, d_tg), eng_cuda_free(g_cu, d_lab);
    eng_cuda_free(g_cu, d_lo), eng_cuda_free(g_cu, d_idx), eng_cuda_free(g_cu, d_out), eng_cuda_free(g_cu, d_to);
    eng_cuda_free(g_cu, d_o16);
    free(xu), free(xf), free(tg), free(lab), free(idx), free(ref), free(h), free(ref16), free(h16), free(lref), free(lh),
        free(tref), free(th);
}

/* eng_loss_compute vs the device: gradient and the four metric sums */
static void loss_case(int loss, int fused, int use_labels, int B, int K, hpo_rng *r) {
    size_t n = (size_t)B * K;
    float *z = rnd(n, r, 2.0f), *tg = malloc(n * 4), *dz = malloc(n * 4);
    int32_t *lab = malloc((size_t)B * 4);
    if (loss == ENG_LOSS_BCE && fused != ENG_ACT_SIGMOID) /* probabilities in */
        for (size_t i = 0; i < n; i++) z[i] = 0.02f + 0.96f * hpo_rng_uniform_f(r);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)hpo_rng_below(r, (uint64_t)(K > 1 ? K : 2));
    for (size_t i = 0; i < n; i++) tg[i] = loss == ENG_LOSS_SCCE || loss == ENG_LOSS_BCE ? hpo_rng_uniform_f(r) : z[i] + (float)hpo_rng_normal(r);
    if (loss == ENG_LOSS_SCCE) /* soft targets sum to 1 per row */
        for (int i = 0; i < B; i++) {
            float s = 0;
            for (int k = 0; k < K; k++) s += tg[(size_t)i * K + k];
            for (int k = 0; k < K; k++) tg[(size_t)i * K + k] /= s;
        }
    eng_metric_sums acc;
    memset(&acc, 0, sizeof acc);
    const float scale = 0.75f;
    eng_loss_compute(loss, fused, z, use_labels ? lab : NULL, use_labels ? NULL : tg, B, K, scale, dz, &acc);
    float *d_z = dev_from(z, n * 4), *d_tg = dev_from(tg, n * 4), *d_dz = dev_new(n * 4);
    int32_t *d_lab = dev_from(lab, (size_t)B * 4);
    double *d_sums = dev_new(ENG_CUDA_SUMS * sizeof(double));
    poison(d_dz, n * 4);
    assert_int_equal(eng_cuda_zero(g_cu, d_sums, ENG_CUDA_SUMS * sizeof(double)), 0);
    assert_int_equal(eng_cuda_loss(g_cu, loss, fused, d_z, use_labels ? d_lab : NULL, use_labels ? NULL : d_tg, B, K,
                                   scale, d_dz, d_sums),
                     0);
    sync_ok();
    eng_metric_sums dev;
    memset(&dev, 0, sizeof dev);
    hpo_error err = {{0}, {0}};
    assert_int_equal(eng_cuda_sums_add(g_cu, d_sums, (size_t)B, K, &dev, &err), 0);
    float *dzh = fetch(d_dz, n);
    char what[120];
    snprintf(what, sizeof what, "loss %s%s %s B=%d K=%d dz", eng_loss_name(loss), fused == ENG_ACT_SIGMOID ? "+sigmoid" : "",
             use_labels ? "labels" : "targets", B, K);
    check_close(what, dzh, dz, n, TOL_F32);
    float got[3] = {(float)dev.loss, (float)dev.sq, (float)dev.abs}, want[3] = {(float)acc.loss, (float)acc.sq, (float)acc.abs};
    check_close("  sums loss, sq, abs", got, want, 3, TOL_F32);
    printf("  %-44s %g vs %g\n", "  correct", dev.correct, acc.correct);
    assert_true(fabs(dev.correct - acc.correct) <= 0.0);
    assert_true(dev.n == acc.n && dev.nvals == acc.nvals);
    eng_cuda_free(g_cu, d_z), eng_cuda_free(g_cu, d_tg), eng_cuda_free(g_cu, d_dz), eng_cuda_free(g_cu, d_lab),
        eng_cuda_free(g_cu, d_sums);
    free(z), free(tg), free(dz), free(lab), free(dzh);
}

static void test_losses(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 61);
    static const int sizes[][2] = {{1, 10}, {5, 1}, {300, 10}, {257, 37}, {1000, 2}};
    for (size_t s = 0; s < HPO_ARRAY_LEN(sizes); s++) {
        int B = sizes[s][0], K = sizes[s][1];
        if (K > 1) {
            loss_case(ENG_LOSS_SCCE, ENG_ACT_NONE, 1, B, K, &r);
            loss_case(ENG_LOSS_SCCE, ENG_ACT_NONE, 0, B, K, &r);
        }
        for (int lab = 0; lab < 2; lab++) {
            loss_case(ENG_LOSS_BCE, ENG_ACT_SIGMOID, lab, B, K, &r);
            loss_case(ENG_LOSS_BCE, ENG_ACT_NONE, lab, B, K, &r);
            loss_case(ENG_LOSS_MSE, ENG_ACT_NONE, lab, B, K, &r);
            loss_case(ENG_LOSS_MAE, ENG_ACT_NONE, lab, B, K, &r);
        }
    }
}

/* errors: a bad device index, an allocation the device cannot hold (not
 * sticky: the context still works), and a failing op that is */
static void test_errors(void **state) {
    (void)state;
    int n = 0;
    hpo_error err = {{0}, {0}};
    assert_int_equal(eng_gpu_count(&n, &err), 0);
    eng_cuda *bad = NULL;
    assert_int_equal(eng_cuda_open(n, 0, &bad, &err), HPO_EINVAL);
    assert_string_equal(err.field, "devices");
    void *p = NULL;
    assert_int_equal(eng_cuda_alloc(g_cu, (size_t)1 << 52, &p, &err), HPO_ENOMEM);
    printf("  4 PiB: %s\n", err.message);
    assert_null(p);
    float *d = dev_new(16);
    assert_int_equal(eng_cuda_zero(g_cu, d, 16), 0);
    sync_ok(); /* still usable */
    eng_cuda_free(g_cu, d);
}

/* Before each test: the shared context as gpu_test_main opened it. A test
 * that fails an assertion returns at once, and would leave it in fp16
 * (test_dense_fp16, test_fp16_rounding) or leave g_cu on test_dense_tf32's
 * TF32 context, failing the bf16 and f32 comparisons of every later test
 * in the process. */
static eng_cuda *g_main;

static int reset_ctx(void **state) {
    (void)state;
    if (!g_main) g_main = g_cu;
    if (g_cu != g_main) {
        eng_cuda_close(g_cu);
        g_cu = g_main;
    }
    eng_cuda_set_fp16(g_cu, 0);
    return 0;
}

#define T(f) cmocka_unit_test_setup(f, reset_ctx)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_errors),      T(test_dense_f32),   T(test_dense_bf16),     T(test_dense_fp16),
        T(test_fp16_rounding), T(test_dense_tf32), T(test_activations),   T(test_dropout),
        T(test_stage_steps), T(test_conv2d),      T(test_maxpool),        T(test_augment_gap),
        T(test_batchnorm),   T(test_add_and_bf16), T(test_gather),        T(test_losses),
    };
    return GPU_TEST_MAIN(tests);
}
