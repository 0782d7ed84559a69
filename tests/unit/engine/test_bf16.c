/* test_bf16.c - bf16/fp16 conversions: the dispatching (vector) paths
 * against the scalar references over every f32 exponent and top mantissa
 * pattern plus random values, and the scalar references against
 * independent definitions (double-precision rounding). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bf16.h"
#include "optim.h"
#include "hpo.h"
#include "rng.h"

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static int is_denormal(float f) { return fpclassify(f) == FP_SUBNORMAL; }

/* Every upper 16 bits (all exponents, signs, 7 mantissa bits) combined with
 * low halves that straddle the rounding boundary, then random patterns. */
static size_t make_inputs(float **out) {
    static const uint16_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    size_t nl = HPO_ARRAY_LEN(lows), n = 65536 * nl + (1u << 20);
    float *v = malloc(n * sizeof *v);
    size_t k = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t l = 0; l < nl; l++) v[k++] = u2f(hi << 16 | lows[l]);
    hpo_rng r;
    hpo_rng_seed(&r, 42);
    while (k < n) v[k++] = u2f((uint32_t)hpo_rng_u64(&r));
    *out = v;
    return n;
}

static void test_bf16_vector_vs_scalar(void **state) {
    (void)state;
    float *in;
    size_t n = make_inputs(&in);
    eng_bf16 *a = malloc(n * 2), *b = malloc(n * 2);
    /* odd offsets and lengths exercise the masked tails */
    eng_f32_to_bf16_n(in, a, n - 3);
    eng_f32_to_bf16_n(in + n - 3, a + n - 3, 3);
    eng_f32_to_bf16_n_ref(in, b, n);
    size_t mismatches = 0, denorm_flush = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        if (is_denormal(in[i]) && (a[i] & 0x7fff) == 0) {
            denorm_flush++; /* AVX512-BF16 treats f32 denormals as zero */
            continue;
        }
        if (mismatches++ < 5)
            printf("  mismatch %08x: vec %04x ref %04x\n", f2u(in[i]), a[i], b[i]);
    }
    printf("bf16 [%s]: %zu values, %zu mismatches, %zu denormals flushed\n", eng_bf16_impl(), n,
           mismatches, denorm_flush);
    assert_int_equal(mismatches, 0);
    /* bf16 -> f32 is exact in both paths */
    float *fa = malloc(n * 4), *fb = malloc(n * 4);
    eng_bf16_to_f32_n(b, fa, n);
    eng_bf16_to_f32_n_ref(b, fb, n);
    assert_memory_equal(fa, fb, n * 4);
    free(fa), free(fb), free(a), free(b), free(in);
}

/* Scalar reference against rounding done in double: the nearest bf16 with
 * ties to even. */
static void test_bf16_scalar_rne(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 7);
    double maxrel = 0;
    for (int i = 0; i < 2000000; i++) {
        float f = u2f((uint32_t)hpo_rng_u64(&r));
        if (!isfinite(f) || is_denormal(f) || f == 0) continue;
        eng_bf16 h = eng_f32_to_bf16(f);
        float g = eng_bf16_to_f32(h);
        if (isinf(g)) { /* overflow only just below FLT_MAX */
            assert_true(fabsf(f) > 3.38e38f);
            continue;
        }
        /* neighbours of g in bf16 */
        float lo = eng_bf16_to_f32((eng_bf16)(h - 1)), hi = eng_bf16_to_f32((eng_bf16)(h + 1));
        double d = fabs((double)f - g);
        assert_true(d <= fabs((double)f - lo) && d <= fabs((double)f - hi));
        if (d == fabs((double)f - lo) || d == fabs((double)f - hi)) assert_int_equal(h & 1, 0);
        double rel = d / fabs((double)f);
        if (rel > maxrel) maxrel = rel;
    }
    printf("bf16 scalar: max relative rounding error %.3e (bound 2^-8 = %.3e)\n", maxrel,
           ldexp(1, -8));
    assert_true(maxrel <= ldexp(1, -8));
    /* specials */
    assert_int_equal(eng_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(eng_f32_to_bf16(-INFINITY), 0xff80);
    assert_true(isnan(eng_bf16_to_f32(eng_f32_to_bf16(NAN))));
    assert_true(isnan(eng_bf16_to_f32(eng_f32_to_bf16(u2f(0x7f800001))))); /* low-payload NaN */
    assert_int_equal(eng_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(eng_f32_to_bf16(u2f(0x3f808000)), 0x3f80); /* tie -> even */
    assert_int_equal(eng_f32_to_bf16(u2f(0x3f818000)), 0x3f82); /* tie -> even (up) */
}

static void test_fp16(void **state) {
    (void)state;
    /* every fp16 value converts to f32 and back unchanged (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = eng_fp16_to_f32((eng_fp16)h);
        if (isnan(f)) {
            assert_int_equal(eng_f32_to_fp16(f) & 0x7c00, 0x7c00);
            assert_true(eng_f32_to_fp16(f) & 0x3ff);
            continue;
        }
        assert_int_equal(eng_f32_to_fp16(f), h);
    }
    float *in;
    size_t n = make_inputs(&in);
    eng_fp16 *a = malloc(n * 2), *b = malloc(n * 2);
    eng_f32_to_fp16_n(in, a, n);
    eng_f32_to_fp16_n_ref(in, b, n);
    size_t mism = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        int both_nan = isnan(in[i]) && (a[i] & 0x7fff) > 0x7c00 && (b[i] & 0x7fff) > 0x7c00;
        if (both_nan) continue; /* payload bits may differ */
        if (mism++ < 5) printf("  fp16 mismatch %08x: vec %04x ref %04x\n", f2u(in[i]), a[i], b[i]);
    }
    /* scalar against double rounding for finite in-range values */
    double maxrel = 0;
    for (size_t i = 0; i < n; i++) {
        float f = in[i];
        if (!isfinite(f) || fabsf(f) < 6.2e-5f || fabsf(f) > 65504.f) continue;
        double g = eng_fp16_to_f32(b[i]);
        double rel = fabs(g - f) / fabs(f);
        if (rel > maxrel) maxrel = rel;
    }
    float *fa = malloc(n * 4), *fb = malloc(n * 4);
    eng_fp16_to_f32_n(b, fa, n);
    eng_fp16_to_f32_n_ref(b, fb, n);
    size_t back = 0;
    for (size_t i = 0; i < n; i++)
        if (f2u(fa[i]) != f2u(fb[i]) && !(isnan(fa[i]) && isnan(fb[i]))) back++;
    printf("fp16 [%s]: %zu values, %zu mismatches, %zu back-conversion mismatches, max rel "
           "error (normal range) %.3e (bound 2^-11 = %.3e)\n",
           eng_fp16_impl(), n, mism, back, maxrel, ldexp(1, -11));
    assert_int_equal(mism, 0);
    assert_int_equal(back, 0);
    assert_true(maxrel <= ldexp(1, -11));
    assert_int_equal(eng_f32_to_fp16(65520.f), 0x7c00);
    assert_int_equal(eng_f32_to_fp16(65519.f), 0x7bff);
    assert_int_equal(eng_f32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(eng_f32_to_fp16(u2f(0x33000000)), 0);      /* 2^-25: tie -> 0 */
    assert_int_equal(eng_f32_to_fp16(u2f(0x33000001)), 1);      /* just above: min subnormal */
    free(fa), free(fb), free(a), free(b), free(in);
}

static void test_round_and_u8(void **state) {
    (void)state;
    enum { N = 1001 };
    float x[N], y[N];
    hpo_rng r;
    hpo_rng_seed(&r, 3);
    for (int i = 0; i < N; i++) x[i] = y[i] = (float)hpo_rng_normal(&r) * 100.f;
    eng_round_bf16_n(x, N);
    for (int i = 0; i < N; i++) assert_int_equal(f2u(x[i]), f2u(eng_round_bf16(y[i])));
    for (int i = 0; i < N; i++) x[i] = y[i];
    eng_round_fp16_n(x, N);
    for (int i = 0; i < N; i++) assert_int_equal(f2u(x[i]), f2u(eng_fp16_to_f32(eng_f32_to_fp16(y[i]))));
    uint8_t u[N];
    eng_bf16 a[N];
    for (int i = 0; i < N; i++) u[i] = (uint8_t)(i * 37);
    eng_u8_to_bf16_n(u, 1.0f / 255.0f, a, N);
    for (int i = 0; i < N; i++) assert_int_equal(a[i], eng_f32_to_bf16((float)u[i] * (1.0f / 255.0f)));
}

/* The same comparisons on the lower paths this CPU can run. */
/* The fused optimiser step writes the bf16 compute copy itself: a NaN
 * master weight stays NaN there, whatever its payload (0x7fffffff rounded
 * as a number became -0.0, a finite weight; an audit's case), as
 * eng_f32_to_bf16 keeps it. */
static void test_optimizer_copy_keeps_nan(void **state) {
    (void)state;
    eng_optim_config c;
    eng_optim_defaults(&c, ENG_OPT_ADAM);
    const uint32_t nan_bits[3] = {0x7fffffffu, 0x7fc00000u, 0xffc00001u};
    for (int k = 0; k < 3; k++) {
        float p[40], g[40], st[80];
        uint16_t pb[40];
        for (int i = 0; i < 40; i++) {
            memcpy(&p[i], &nan_bits[k], 4);
            g[i] = 0.1f;
        }
        memset(st, 0, sizeof st);
        eng_optim_step_range_bf16(&c, 1e-3f, 1, p, g, st, 40, 0, 40, pb);
        for (int i = 0; i < 40; i++) {
            if (!isnan(eng_bf16_to_f32(pb[i])))
                fail_msg("NaN bits 0x%08x: the bf16 copy of weight %d is 0x%04x, not a NaN", nan_bits[k], i, pb[i]);
        }
    }
}

static void test_fallback_paths(void **state) {
    static const char *const impls[] = {"avx512f", "f16c", "scalar"};
    for (size_t i = 0; i < HPO_ARRAY_LEN(impls); i++) {
        if (eng_bf16_force_impl(impls[i]) < 0) continue;
        test_bf16_vector_vs_scalar(state);
        test_fp16(state);
        test_round_and_u8(state);
    }
    eng_bf16_force_impl(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_vector_vs_scalar),
        cmocka_unit_test(test_bf16_scalar_rne),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_round_and_u8),
        cmocka_unit_test(test_fallback_paths),
        cmocka_unit_test(test_optimizer_copy_keeps_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
