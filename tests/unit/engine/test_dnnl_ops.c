/* test_dnnl_ops.c - oneDNN GEMM (f32, bf16; every transpose, padded leading
 * dimensions, alpha, beta, bias) and 2-D convolution (forward, backward data,
 * backward weights; same/valid; strides; bias; f32 and bf16) against the
 * naive references of ref_ops.c, printing the max abs / rel differences;
 * the primitive cache (hits, eviction) and concurrent use from threads. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bf16.h"
#include "blas_select.h"
#include "dnnl_ops.h"
#include "hpo.h"
#include "rng.h"

static void fill(hpo_rng *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)hpo_rng_normal(r);
}

/* max |a-b| and max |a-b| / max(|b|, 1) */
static void diff(const float *a, const float *b, size_t n, double *mabs, double *mrel) {
    double ma = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        double rr = d / fmax(fabs(b[i]), 1.0);
        if (!(d <= ma)) ma = d; /* NaN propagates */
        if (!(rr <= mr)) mr = rr;
    }
    *mabs = ma, *mrel = mr;
}

static int bf16_ok(void) {
    if (!eng_dnnl_has_bf16()) {
        printf("  no AVX512-BF16/AMX: bf16 cases skipped\n");
        return 0;
    }
    return 1;
}

static int check_gemm(int bf16, int ta, int tb, int M, int N, int K, int pad, float alpha,
                      float beta, int use_bias) {
    hpo_rng r;
    hpo_rng_seed(&r, (uint64_t)(M * 1000003 + N * 1009 + K + ta * 7 + tb * 13 + bf16));
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4);
    float bias[1024];
    uint16_t *Ah = malloc(na * 2), *Bh = malloc(nb * 2);
    fill(&r, A, na), fill(&r, B, nb), fill(&r, C, nc), fill(&r, bias, (size_t)N);
    memcpy(R, C, nc * 4);
    int rc;
    if (bf16) {
        eng_f32_to_bf16_n(A, Ah, na), eng_f32_to_bf16_n(B, Bh, nb);
        rc = eng_dnnl_gemm_bf16(ta, tb, M, N, K, alpha, Ah, lda, Bh, ldb, beta, C, ldc,
                                use_bias ? bias : NULL);
        eng_dnnl_gemm_ref(1, ta, tb, M, N, K, alpha, Ah, lda, Bh, ldb, beta, R, ldc, use_bias ? bias : NULL);
    } else {
        rc = eng_dnnl_gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                               use_bias ? bias : NULL);
        eng_dnnl_gemm_ref(0, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc, use_bias ? bias : NULL);
    }
    assert_int_equal(rc, 0);
    /* compare only the M x N part; padding columns must be untouched */
    double ma = 0, mr = 0;
    for (int i = 0; i < M; i++) {
        double a, b;
        diff(C + (size_t)i * ldc, R + (size_t)i * ldc, (size_t)N, &a, &b);
        ma = fmax(ma, a), mr = fmax(mr, b);
        for (int j = N; j < ldc; j++) assert_true(C[(size_t)i * ldc + j] == R[(size_t)i * ldc + j]);
    }
    printf("  gemm %s %c%c %4dx%4dx%4d ld+%d alpha %.1f beta %.1f bias %d [%s]: max abs %.2e rel %.2e\n",
           bf16 ? "bf16" : "f32 ", ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, pad, alpha, beta,
           use_bias, eng_dnnl_last_impl(), ma, mr);
    /* both sides use the same (bf16-rounded) inputs; only f32 accumulation differs */
    assert_true(mr < 1e-4 * sqrt((double)K));
    free(A), free(B), free(C), free(R), free(Ah), free(Bh);
    return 0;
}

static void test_gemm(void **state) {
    (void)state;
    int nb = bf16_ok() ? 2 : 1;
    for (int b16 = 0; b16 < nb; b16++) {
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) check_gemm(b16, ta, tb, 37, 29, 53, 0, 1.0f, 0.0f, 0);
        check_gemm(b16, 0, 0, 128, 256, 784, 0, 1.0f, 0.0f, 1); /* dense forward + bias */
        check_gemm(b16, 1, 0, 784, 256, 128, 0, 1.0f, 1.0f, 0); /* dW += X^T dY */
        check_gemm(b16, 0, 1, 128, 784, 256, 0, 1.0f, 0.0f, 0); /* dX = dY W^T */
        check_gemm(b16, 0, 0, 128, 10, 256, 3, 1.0f, 0.0f, 1);  /* output layer, padded ld */
        check_gemm(b16, 1, 1, 17, 33, 65, 5, 0.5f, -2.0f, 1);   /* alpha, beta, bias */
        check_gemm(b16, 0, 0, 1, 1, 1, 0, 2.0f, 0.0f, 0);
    }
    /* argument checks */
    float x[4] = {0};
    assert_int_equal(eng_dnnl_gemm_f32(0, 0, 2, 2, 2, 1, x, 1, x, 2, 0, x, 2, NULL), HPO_EINVAL);
    assert_int_equal(eng_dnnl_gemm_f32(0, 0, 0, 2, 2, 1, x, 2, x, 2, 0, x, 2, NULL), HPO_EINVAL);
}

static void test_cache(void **state) {
    (void)state;
    eng_dnnl_thread_cleanup();
    float A[64], B[64], C[64];
    memset(A, 0, sizeof A), memset(B, 0, sizeof B);
    uint64_t h, m;
    for (int i = 0; i < 10; i++) assert_int_equal(eng_dnnl_gemm_f32(0, 0, 8, 8, 8, 1, A, 8, B, 8, 0, C, 8, NULL), 0);
    eng_dnnl_cache_stats(&h, &m);
    printf("  10 identical calls: %llu hits, %llu misses\n", (unsigned long long)h, (unsigned long long)m);
    assert_int_equal(m, 1);
    assert_int_equal(h, 9);
    /* more shapes than the cache holds: LRU eviction keeps working */
    for (int round = 0; round < 2; round++)
        for (int n = 1; n <= ENG_DNNL_CACHE_SIZE + 8; n++)
            assert_int_equal(eng_dnnl_gemm_f32(0, 0, 1, 1, 1 + n % 8, 1, A, 8, B, 1 + n / 8, 0, C, 1, NULL), 0);
    eng_dnnl_cache_stats(&h, &m);
    printf("  after eviction rounds: %llu hits, %llu misses\n", (unsigned long long)h, (unsigned long long)m);
    assert_int_equal(m, 1 + 2 * (ENG_DNNL_CACHE_SIZE + 8)); /* LRU: a cyclic sweep never hits */
    /* alpha is part of the key (a constant output scale keeps the fast
     * brgemm kernels; a run-time scale falls back to gemm:jit, 3-8x slower) */
    eng_dnnl_thread_cleanup();
    for (int rep = 0; rep < 2; rep++)
        for (int i = 0; i < 4; i++) {
            for (int j = 0; j < 64; j++) A[j] = B[j] = 1.0f;
            assert_int_equal(eng_dnnl_gemm_f32(0, 0, 8, 8, 8, 0.5f + i, A, 8, B, 8, 0, C, 8, NULL), 0);
            assert_true(C[9] == 8.0f * (0.5f + i));
        }
    eng_dnnl_cache_stats(&h, &m);
    printf("  4 alphas twice: %llu hits, %llu misses\n", (unsigned long long)h, (unsigned long long)m);
    assert_int_equal(m, 4);
    assert_int_equal(h, 4);
    double t0 = hpo_monotonic();
    for (int i = 0; i < 1000; i++) eng_dnnl_gemm_f32(0, 0, 8, 8, 8, 1, A, 8, B, 8, 0, C, 8, NULL);
    double hit_us = (hpo_monotonic() - t0) * 1e3;
    eng_dnnl_thread_cleanup();
    t0 = hpo_monotonic();
    eng_dnnl_gemm_f32(0, 0, 8, 8, 8, 1, A, 8, B, 8, 0, C, 8, NULL);
    double miss_us = (hpo_monotonic() - t0) * 1e6;
    printf("  8x8x8 call: %.1f us cached, %.1f us creating the primitive\n", hit_us, miss_us);
    assert_int_equal(eng_dnnl_set_num_threads(1), 0);
}

static void check_conv(eng_dnnl_type t, int N, int H, int W, int C, int K, int OC, int stride,
                       int pad, int use_bias) {
    eng_conv2d_shape s;
    assert_int_equal(eng_conv2d_shape_init(&s, N, H, W, C, K, K, OC, stride, stride, pad), 0);
    hpo_rng r;
    hpo_rng_seed(&r, (uint64_t)(N * 31 + H * 7 + C * 3 + OC + stride + pad * 11 + t));
    size_t nx = (size_t)N * H * W * C, nw = (size_t)K * K * C * OC, ny = (size_t)N * s.OH * s.OW * OC;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4), *bias = malloc((size_t)OC * 4);
    float *y = malloc(ny * 4), *yr = malloc(ny * 4), *dx = malloc(nx * 4), *dxr = malloc(nx * 4);
    float *dw = malloc(nw * 4), *dwr = malloc(nw * 4), *db = malloc((size_t)OC * 4), *dbr = malloc((size_t)OC * 4);
    uint16_t *xh = malloc(nx * 2), *wh = malloc(nw * 2), *dyh = malloc(ny * 2);
    fill(&r, x, nx), fill(&r, w, nw), fill(&r, dy, ny), fill(&r, bias, (size_t)OC);
    const void *px = x, *pw = w, *pdy = dy;
    if (t == ENG_DNNL_BF16) {
        eng_f32_to_bf16_n(x, xh, nx), eng_f32_to_bf16_n(w, wh, nw), eng_f32_to_bf16_n(dy, dyh, ny);
        px = xh, pw = wh, pdy = dyh;
    }
    const float *b = use_bias ? bias : NULL;
    double a1, r1, a2, r2, a3, r3, a4 = 0, r4 = 0;
    char impl[3][64];
    assert_int_equal(eng_dnnl_conv2d_forward(&s, t, px, pw, b, y), 0);
    snprintf(impl[0], 64, "%s", eng_dnnl_last_impl());
    eng_dnnl_conv2d_forward_ref(&s, t, px, pw, b, yr);
    diff(y, yr, ny, &a1, &r1);
    assert_int_equal(eng_dnnl_conv2d_backward_data(&s, t, pdy, pw, dx), 0);
    snprintf(impl[1], 64, "%s", eng_dnnl_last_impl());
    eng_dnnl_conv2d_backward_data_ref(&s, t, pdy, pw, dxr);
    diff(dx, dxr, nx, &a2, &r2);
    assert_int_equal(eng_dnnl_conv2d_backward_weights(&s, t, px, pdy, dw, use_bias ? db : NULL), 0);
    snprintf(impl[2], 64, "%s", eng_dnnl_last_impl());
    eng_dnnl_conv2d_backward_weights_ref(&s, t, px, pdy, dwr, use_bias ? dbr : NULL);
    diff(dw, dwr, nw, &a3, &r3);
    if (use_bias) diff(db, dbr, (size_t)OC, &a4, &r4);
    printf("  conv %s %dx%dx%dx%d k%d->%d s%d %s bias %d: fwd %.1e/%.1e [%s] bwd_d %.1e/%.1e [%s] "
           "bwd_w %.1e/%.1e [%s] db %.1e (max abs/rel)\n",
           t ? "bf16" : "f32 ", N, H, W, C, K, OC, stride, pad ? "same" : "valid", use_bias, a1, r1,
           impl[0], a2, r2, impl[1], a3, r3, impl[2], a4);
    double reduce = sqrt((double)N * s.OH * s.OW);
    assert_true(r1 < 1e-4 * sqrt((double)K * K * C));
    assert_true(r2 < 1e-4 * sqrt((double)K * K * OC));
    assert_true(r3 < 1e-4 * reduce);
    assert_true(r4 < 1e-4 * reduce);
    free(x), free(w), free(dy), free(bias), free(y), free(yr), free(dx), free(dxr);
    free(dw), free(dwr), free(db), free(dbr), free(xh), free(wh), free(dyh);
}

static void test_conv(void **state) {
    (void)state;
    eng_conv2d_shape s;
    assert_int_equal(eng_conv2d_shape_init(&s, 1, 28, 28, 1, 3, 3, 32, 1, 1, ENG_PAD_SAME), 0);
    assert_true(s.OH == 28 && s.pad_t == 1 && s.pad_b == 1);
    assert_int_equal(eng_conv2d_shape_init(&s, 1, 28, 28, 1, 3, 3, 32, 2, 2, ENG_PAD_SAME), 0);
    assert_true(s.OH == 14 && s.pad_t == 0 && s.pad_b == 1); /* TF: extra pad at the bottom */
    assert_int_equal(eng_conv2d_shape_init(&s, 1, 28, 28, 1, 3, 3, 32, 1, 1, ENG_PAD_VALID), 0);
    assert_true(s.OH == 26 && s.pad_t == 0);
    assert_int_equal(eng_conv2d_shape_init(&s, 1, 2, 2, 1, 3, 3, 4, 1, 1, ENG_PAD_VALID), HPO_EINVAL);
    int nb = bf16_ok() ? 2 : 1;
    for (int t = 0; t < nb; t++) {
        check_conv((eng_dnnl_type)t, 4, 28, 28, 1, 3, 32, 1, ENG_PAD_SAME, 1);  /* first CNN layer */
        check_conv((eng_dnnl_type)t, 2, 14, 14, 32, 3, 64, 1, ENG_PAD_SAME, 1);
        check_conv((eng_dnnl_type)t, 3, 11, 9, 5, 3, 7, 2, ENG_PAD_SAME, 0);    /* odd sizes, stride 2 */
        check_conv((eng_dnnl_type)t, 2, 10, 12, 3, 5, 4, 1, ENG_PAD_VALID, 1);
        check_conv((eng_dnnl_type)t, 1, 9, 9, 2, 2, 3, 3, ENG_PAD_VALID, 1);    /* stride 3 */
    }
}

static void *thread_body(void *arg) {
    int id = *(int *)arg;
    int M = 40 + id, N = 50 + 3 * id, K = 64 + 5 * id;
    float *A = calloc((size_t)M * K, 4), *B = calloc((size_t)K * N, 4), *C = calloc((size_t)M * N, 4);
    float *R = calloc((size_t)M * N, 4);
    hpo_rng r;
    hpo_rng_seed(&r, (uint64_t)id);
    fill(&r, A, (size_t)M * K), fill(&r, B, (size_t)K * N);
    eng_dnnl_gemm_ref(0, 0, 0, M, N, K, 1, A, K, B, N, 0, R, N, NULL);
    long bad = 0;
    eng_dnnl_set_num_threads(1);
    for (int it = 0; it < 200; it++) {
        if (eng_dnnl_gemm_f32(0, 0, M, N, K, 1, A, K, B, N, 0, C, N, NULL) < 0) bad++;
        for (int i = 0; i < M * N; i++)
            if (fabsf(C[i] - R[i]) > 1e-3f) bad++;
    }
    free(A), free(B), free(C), free(R);
    return (void *)bad;
}

static void test_threads(void **state) {
    (void)state;
    pthread_t th[4];
    int ids[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_body, &ids[i]);
    long total = 0;
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        total += (long)ret;
    }
    printf("  4 threads x 200 gemm calls with per-thread caches: %ld bad values\n", total);
    assert_int_equal(total, 0);
}

int main(int argc, char **argv) {
    eng_blas_select(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
