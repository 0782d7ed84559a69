/*
 * bf16.h - conversions between f32 and the 16-bit float formats used by the
 * mixed-precision modes: bfloat16 (mixed_bf16) and IEEE half (mixed_fp16).
 *
 * Design notes
 * - Values are carried as raw uint16_t bit patterns (eng_bf16, eng_fp16 are
 *   typedefs of uint16_t); arithmetic happens in f32.
 * - f32 -> 16-bit rounds to nearest, ties to even (what
 *   _mm512_cvtne2ps_pbh and _mm512_cvtps_ph(_MM_FROUND_TO_NEAREST_INT) do).
 *   NaN stays NaN (quiet), Inf stays Inf; bf16 keeps f32's range, fp16
 *   overflows to Inf above 65504 (round-to-nearest) and keeps subnormals.
 *   One exception: the AVX512-BF16 path flushes f32 denormal inputs to a
 *   zero of the same sign (the instruction implies DAZ); see below.
 * - Each bulk function has a scalar reference (_ref) beside it; the public
 *   bulk functions dispatch once at runtime (__builtin_cpu_supports) to
 *   AVX512-BF16 / AVX512F / F16C code, so the binary runs on any x86-64.
 * - bf16 -> f32 is exact (a shift).
 *
 * Threading: all functions are pure and thread-safe.
 */
#ifndef ENG_BF16_H
#define ENG_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t eng_bf16;
typedef uint16_t eng_fp16;

/* Scalar conversions (inline, exact reference semantics). */
static inline float eng_bf16_to_f32(eng_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline eng_bf16 eng_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
        return (eng_bf16)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (eng_bf16)(u >> 16);
}

/* Round f to the nearest bf16 value and return it as f32. */
static inline float eng_round_bf16(float f) { return eng_bf16_to_f32(eng_f32_to_bf16(f)); }

/* IEEE half <-> f32, scalar, round to nearest even (defined in bf16.c). */
float eng_fp16_to_f32(eng_fp16 h);
eng_fp16 eng_f32_to_fp16(float f);

/* ---- bulk conversions (dispatching) ---- */
/* Denormal note: the AVX512-BF16 path (vcvtne2ps2bf16) flushes f32 denormal
 * inputs to zero of the same sign; the scalar path rounds them (to a bf16
 * denormal or zero). Training never depends on it; tests exclude denormals. */
void eng_f32_to_bf16_n(const float *src, eng_bf16 *dst, size_t n);
void eng_bf16_to_f32_n(const eng_bf16 *src, float *dst, size_t n);
/* x[i] = round_to_bf16(x[i]) in place (the "fake quantisation" used to keep
 * f32 buffers holding bf16-representable values). */
void eng_round_bf16_n(float *x, size_t n);
void eng_f32_to_fp16_n(const float *src, eng_fp16 *dst, size_t n);
void eng_fp16_to_f32_n(const eng_fp16 *src, float *dst, size_t n);
void eng_round_fp16_n(float *x, size_t n);
/* uint8 -> bf16 of (u8 * scale): the data batcher's image path. */
void eng_u8_to_bf16_n(const uint8_t *src, float scale, eng_bf16 *dst, size_t n);

/* ---- scalar references (for tests) ---- */
void eng_f32_to_bf16_n_ref(const float *src, eng_bf16 *dst, size_t n);
void eng_bf16_to_f32_n_ref(const eng_bf16 *src, float *dst, size_t n);
void eng_f32_to_fp16_n_ref(const float *src, eng_fp16 *dst, size_t n);
void eng_fp16_to_f32_n_ref(const eng_fp16 *src, float *dst, size_t n);

/* Which path the bulk functions use: "avx512bf16", "avx512f", "f16c" or
 * "scalar" for bf16 and fp16 respectively (for logs). */
const char *eng_bf16_impl(void);
const char *eng_fp16_impl(void);
/* Tests only: force a lower path ("scalar", "f16c", "avx512f",
 * "avx512bf16"; NULL restores automatic choice). Returns -1 if the CPU
 * cannot run it. Not thread-safe with respect to concurrent conversions. */
int eng_bf16_force_impl(const char *name);

#endif
