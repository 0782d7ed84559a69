/* bf16.c - f32 <-> bf16 / fp16 conversions: scalar references and
 * AVX-512 / F16C fast paths chosen at run time (see bf16.h). */
#include "bf16.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* ---- scalar fp16 (round to nearest even, after F. Giesen's public-domain
 * float_to_half_fast3_rtne / half_to_float) ---- */

static inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

eng_fp16 eng_f32_to_fp16(float f) {
    uint32_t u = f2u(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t h;
    if (a > 0x7f800000u) {                       /* NaN: quiet, keep top payload */
        h = 0x7e00u | ((a >> 13) & 0x3ffu);
    } else if (a >= 0x47800000u) {               /* >= 65536 or Inf */
        h = 0x7c00u;
    } else if (a < 0x38800000u) {                /* fp16 subnormal or zero */
        const uint32_t denorm_magic = ((127 - 15) + (23 - 10) + 1) << 23;
        float fa = u2f(a) + u2f(denorm_magic);   /* hardware RNE aligns the bits */
        h = f2u(fa) - denorm_magic;
    } else {                                     /* normal */
        uint32_t odd = (a >> 13) & 1u;
        a += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        h = a >> 13;                             /* may round up to Inf: correct */
    }
    return (eng_fp16)(h | sign);
}

float eng_fp16_to_f32(eng_fp16 hv) {
    const uint32_t shifted_exp = 0x7c00u << 13;
    uint32_t o = ((uint32_t)hv & 0x7fffu) << 13;
    uint32_t exp = shifted_exp & o;
    o += (uint32_t)(127 - 15) << 23;
    if (exp == shifted_exp) {
        o += (uint32_t)(128 - 16) << 23;         /* Inf / NaN */
    } else if (exp == 0) {
        o += 1u << 23;                           /* subnormal: renormalise */
        o = f2u(u2f(o) - u2f(113u << 23));
    }
    o |= ((uint32_t)hv & 0x8000u) << 16;
    return u2f(o);
}

/* ---- scalar bulk references ---- */

void eng_f32_to_bf16_n_ref(const float *src, eng_bf16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = eng_f32_to_bf16(src[i]);
}

void eng_bf16_to_f32_n_ref(const eng_bf16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = eng_bf16_to_f32(src[i]);
}

void eng_f32_to_fp16_n_ref(const float *src, eng_fp16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = eng_f32_to_fp16(src[i]);
}

void eng_fp16_to_f32_n_ref(const eng_fp16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = eng_fp16_to_f32(src[i]);
}

/* ---- AVX-512 paths ---- */

#define T_BF16 __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))
#define T_512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define T_F16C __attribute__((target("avx,f16c")))

/* 16 f32 -> 16 bf16 with integer RNE (AVX512F only; same as the scalar). */
T_512 static inline __m256i cvt16_bf16_int(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_mov_epi32(r, nan, q);
    return _mm512_cvtepi32_epi16(r);
}

T_512 static void f32_to_bf16_512(const float *src, eng_bf16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), cvt16_bf16_int(_mm512_loadu_ps(src + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m256i r = cvt16_bf16_int(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, r);
    }
}

T_BF16 static void f32_to_bf16_avx512bf16(const float *src, eng_bf16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        __m512bh r = _mm512_cvtne2ps_pbh(hi, lo);
        _mm512_storeu_si512((void *)(dst + i), (__m512i)r);
    }
    for (; i < n; i += 16) {
        size_t k = n - i < 16 ? n - i : 16;
        __mmask16 m = (__mmask16)((1u << k) - 1);
        __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)r);
    }
}

T_512 static void bf16_to_f32_512(const eng_bf16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
        _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
}

T_BF16 static void u8_to_bf16_avx512bf16(const uint8_t *src, float scale, eng_bf16 *dst,
                                         size_t n) {
    __m512 s = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + i))));
        __m512 hi = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + i + 16))));
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, s), _mm512_mul_ps(lo, s));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)r);
    }
    for (; i < n; i++) dst[i] = eng_f32_to_bf16((float)src[i] * scale);
}

/* F16C: 8 at a time with AVX; vcvtps2ph rounds per the immediate (RNE). */
T_F16C static void f32_to_fp16_f16c(const float *src, eng_fp16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = eng_f32_to_fp16(src[i]);
}

T_F16C static void fp16_to_f32_f16c(const eng_fp16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = eng_fp16_to_f32(src[i]);
}

T_512 static void f32_to_fp16_512(const float *src, eng_fp16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = eng_f32_to_fp16(src[i]);
}

T_512 static void fp16_to_f32_512(const eng_fp16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = eng_fp16_to_f32(src[i]);
}

/* ---- dispatch ---- */

enum { L_SCALAR = 0, L_F16C = 1, L_512 = 2, L_BF16 = 3 };

static atomic_int forced = -1; /* eng_bf16_force_impl */

static int cpu_level(void) {
    static atomic_int level = -1; /* every thread computes the same value */
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    int l = atomic_load_explicit(&level, memory_order_relaxed);
    if (f >= 0 && (l < 0 || f <= l)) return f;
    if (l >= 0) return l;
    __builtin_cpu_init();
    l = L_SCALAR;
    unsigned a, b, c, d; /* F16C from cpuid: clang < 16 has no __builtin_cpu_supports("f16c") */
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx")) l = L_F16C;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        l = L_512;
    if (l == L_512 && __builtin_cpu_supports("avx512bf16")) l = L_BF16;
    atomic_store_explicit(&level, l, memory_order_relaxed);
    return l;
}

int eng_bf16_force_impl(const char *name) {
    static const char *const names[] = {"scalar", "f16c", "avx512f", "avx512bf16"};
    int want = -1;
    atomic_store_explicit(&forced, -1, memory_order_relaxed);
    if (!name) return 0;
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) want = i;
    if (want < 0 || want > cpu_level()) return -1;
    atomic_store_explicit(&forced, want, memory_order_relaxed);
    return 0;
}

const char *eng_bf16_impl(void) {
    int l = cpu_level();
    return l == L_BF16 ? "avx512bf16" : l == L_512 ? "avx512f" : "scalar";
}

const char *eng_fp16_impl(void) {
    int l = cpu_level();
    return l >= L_512 ? "avx512f" : l == L_F16C ? "f16c" : "scalar";
}

void eng_f32_to_bf16_n(const float *src, eng_bf16 *dst, size_t n) {
    int l = cpu_level();
    if (l == L_BF16) f32_to_bf16_avx512bf16(src, dst, n);
    else if (l == L_512) f32_to_bf16_512(src, dst, n);
    else eng_f32_to_bf16_n_ref(src, dst, n);
}

void eng_bf16_to_f32_n(const eng_bf16 *src, float *dst, size_t n) {
    if (cpu_level() >= L_512) bf16_to_f32_512(src, dst, n);
    else eng_bf16_to_f32_n_ref(src, dst, n);
}

void eng_round_bf16_n(float *x, size_t n) {
    eng_bf16 tmp[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t k = n - i < 256 ? n - i : 256;
        eng_f32_to_bf16_n(x + i, tmp, k);
        eng_bf16_to_f32_n(tmp, x + i, k);
    }
}

void eng_f32_to_fp16_n(const float *src, eng_fp16 *dst, size_t n) {
    int l = cpu_level();
    if (l >= L_512) f32_to_fp16_512(src, dst, n);
    else if (l == L_F16C) f32_to_fp16_f16c(src, dst, n);
    else eng_f32_to_fp16_n_ref(src, dst, n);
}

void eng_fp16_to_f32_n(const eng_fp16 *src, float *dst, size_t n) {
    int l = cpu_level();
    if (l >= L_512) fp16_to_f32_512(src, dst, n);
    else if (l == L_F16C) fp16_to_f32_f16c(src, dst, n);
    else eng_fp16_to_f32_n_ref(src, dst, n);
}

void eng_round_fp16_n(float *x, size_t n) {
    eng_fp16 tmp[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t k = n - i < 256 ? n - i : 256;
        eng_f32_to_fp16_n(x + i, tmp, k);
        eng_fp16_to_f32_n(tmp, x + i, k);
    }
}

void eng_u8_to_bf16_n(const uint8_t *src, float scale, eng_bf16 *dst, size_t n) {
    if (cpu_level() == L_BF16) {
        u8_to_bf16_avx512bf16(src, scale, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++) dst[i] = eng_f32_to_bf16((float)src[i] * scale);
}
