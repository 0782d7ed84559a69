/*
 * gpu_test.h - what the device tests of tests/gpu share: the skip rule, one
 * context for the whole executable, device buffers from host arrays, random
 * inputs, poisoning, and the error measures they print.
 *
 * Design notes
 * - gpu_test_main: no usable CUDA device (eng_gpu_count fails: no GPU, no
 *   driver, a build without CUDA) prints why and exits 77, which ctest
 *   reports as skipped (SKIP_RETURN_CODE 77); otherwise it opens cuda:0
 *   (HPO_TEST_DEVICE=N picks another) and runs the cmocka group, or the
 *   tests of it whose names match HPO_TEST_FILTER and not HPO_TEST_SKIP
 *   (cmocka's patterns: '*' and '?' wildcards). HPO_TEST_LIST=1 prints
 *   the tests' names instead (run-on-device.sh reruns a failed program's
 *   tests one per process, so a fault that poisons the context of one does
 *   not fail the others).
 * - Outputs are poisoned (all bytes 0xff: NaN in f32) before each op, so an
 *   element the op never wrote fails the comparison.
 * - rel_err is the normwise max relative error max|a-r| / max|r| (0/0 = 0;
 *   any NaN or Inf in a gives +Inf), printed by every comparison with the
 *   op, the shape and the tolerance.
 * Header-only (static functions): each test executable includes it once.
 */
#ifndef HPO_GPU_TEST_H
#define HPO_GPU_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "gpu.h"
#include "rng.h"

#define TOL_F32 1e-4
#define TOL_BF16 1e-2

static eng_cuda *g_cu;

static inline int gpu_test_main(const struct CMUnitTest *tests, size_t n_tests) {
    int n = 0;
    hpo_error err = {{0}, {0}};
    /* line by line into run-on-device.sh's log: a test killed at its time
     * limit, or one that crashes, keeps the comparisons it printed */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getenv("HPO_TEST_LIST")) { /* the names, one a line, for running them one by one */
        for (size_t i = 0; i < n_tests; i++) printf("%s\n", tests[i].name);
        return 0;
    }
    if (eng_gpu_count(&n, &err)) {
        printf("skipped: %s\n", err.message);
        return 77;
    }
    const char *dev = getenv("HPO_TEST_DEVICE");
    int d = dev ? atoi(dev) : 0;
    eng_gpu_info info;
    if (eng_gpu_info_get(d, &info, &err) == 0)
        printf("cuda:%d: %s, sm_%d%d, %d SMs\n", d, info.name, info.cc_major, info.cc_minor, info.multiprocessors);
    if (eng_cuda_open(d, 0, &g_cu, &err)) {
        printf("eng_cuda_open failed: %s\n", err.message);
        return 1;
    }
    if (getenv("HPO_TEST_FILTER")) cmocka_set_test_filter(getenv("HPO_TEST_FILTER"));
    if (getenv("HPO_TEST_SKIP")) cmocka_set_skip_filter(getenv("HPO_TEST_SKIP"));
    int rc = _cmocka_run_group_tests("gpu", tests, n_tests, NULL, NULL);
    eng_cuda_close(g_cu);
    return rc;
}

#define GPU_TEST_MAIN(tests) gpu_test_main(tests, sizeof(tests) / sizeof((tests)[0]))

static inline void sync_ok(void) {
    hpo_error err = {{0}, {0}};
    int rc = eng_cuda_sync(g_cu, &err);
    if (rc) printf("device error: %s\n", err.message);
    assert_int_equal(rc, 0);
}

static inline void *dev_new(size_t bytes) {
    void *p = NULL;
    hpo_error err = {{0}, {0}};
    int rc = eng_cuda_alloc(g_cu, bytes, &p, &err);
    if (rc) printf("alloc: %s\n", err.message);
    assert_int_equal(rc, 0);
    return p;
}

static inline void up(void *dst, const void *src, size_t bytes) {
    hpo_error err = {{0}, {0}};
    int rc = eng_cuda_upload(g_cu, dst, src, bytes, &err);
    if (rc) printf("upload: %s\n", err.message);
    assert_int_equal(rc, 0);
}

static inline void down(void *dst, const void *src, size_t bytes) {
    hpo_error err = {{0}, {0}};
    int rc = eng_cuda_download(g_cu, dst, src, bytes, &err);
    if (rc) printf("download: %s\n", err.message);
    assert_int_equal(rc, 0);
}

static inline void *dev_from(const void *h, size_t bytes) {
    void *p = dev_new(bytes);
    up(p, h, bytes);
    return p;
}

static inline void poison(void *d, size_t bytes) {
    unsigned char *h = malloc(bytes ? bytes : 1);
    assert_non_null(h);
    memset(h, 0xff, bytes);
    up(d, h, bytes);
    free(h);
}

/* host copy of n floats of device memory (caller frees) */
static inline float *fetch(const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    down(h, d, n * sizeof *h);
    return h;
}

static inline float *rnd(size_t n, hpo_rng *r, float scale) {
    float *a = malloc((n ? n : 1) * sizeof *a);
    assert_non_null(a);
    for (size_t i = 0; i < n; i++) a[i] = (float)(hpo_rng_normal(r) * scale);
    return a;
}

static inline double rel_err(const float *a, const float *r, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double e = fabs((double)a[i] - r[i]);
        if (e > num) num = e;
        if (fabs(r[i]) > den) den = fabs(r[i]);
    }
    return den > 0 ? num / den : num;
}

/* prints and checks one comparison */
static inline void check_close(const char *what, const float *a, const float *r, size_t n, double tol) {
    double e = rel_err(a, r, n);
    printf("  %-44s max rel err %.3e (tol %.0e)%s\n", what, e, tol, e <= tol ? "" : "  FAIL");
    assert_true(e <= tol);
}

static inline void check_exact(const char *what, const void *a, const void *r, size_t bytes) {
    int same = memcmp(a, r, bytes) == 0;
    printf("  %-44s %s\n", what, same ? "bit-identical" : "DIFFERENT  FAIL");
    assert_true(same);
}

#endif
