/* optim.c - optimiser updates, clipping and learning-rate schedules (see optim.h). */
#include "optim.h"

#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "bf16.h"
#include "hpo.h"

static const char *opt_names[] = {"sgd", "rmsprop", "adam", "adamw"};

int eng_opt_parse(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < (int)HPO_ARRAY_LEN(opt_names); i++)
        if (!strcmp(name, opt_names[i])) return i;
    return -1;
}

const char *eng_opt_name(int kind) {
    return kind >= 0 && kind < (int)HPO_ARRAY_LEN(opt_names) ? opt_names[kind] : "?";
}

void eng_optim_defaults(eng_optim_config *c, int kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->lr = kind == ENG_OPT_SGD ? 1e-2f : 1e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->rho = 0.9f;
    c->eps = 1e-7f;
    c->weight_decay = kind == ENG_OPT_ADAMW ? 0.004f : 0.0f;
}

size_t eng_optim_state_floats(const eng_optim_config *c) {
    switch (c->kind) {
    case ENG_OPT_SGD: return c->momentum != 0.0f ? 1 : 0;
    case ENG_OPT_RMSPROP: return c->momentum != 0.0f ? 2 : 1;
    default: return 2;
    }
}

/* scalar update with explicit state slots s0 (m / momentum / mean square)
 * and s1 (v / rmsprop momentum) */
static void step_scalar(const eng_optim_config *c, float lr, long t, float *p, float *g, float *s0, float *s1,
                        size_t n) {
    float mu = c->momentum, wd = c->weight_decay;
    double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        if (wd != 0.0f && c->kind != ENG_OPT_ADAMW) gi += wd * p[i];
        switch (c->kind) {
        case ENG_OPT_SGD:
            if (mu != 0.0f) {
                s0[i] = mu * s0[i] + gi;
                p[i] -= lr * (c->nesterov ? gi + mu * s0[i] : s0[i]);
            } else {
                p[i] -= lr * gi;
            }
            break;
        case ENG_OPT_RMSPROP: {
            s0[i] = c->rho * s0[i] + (1.0f - c->rho) * gi * gi;
            float u = gi / (sqrtf(s0[i]) + c->eps);
            if (mu != 0.0f) {
                s1[i] = mu * s1[i] + u;
                u = s1[i];
            }
            p[i] -= lr * u;
            break;
        }
        default: {
            if (c->kind == ENG_OPT_ADAMW && wd != 0.0f) p[i] -= lr * wd * p[i];
            s0[i] = c->beta1 * s0[i] + (1.0f - c->beta1) * gi;
            s1[i] = c->beta2 * s1[i] + (1.0f - c->beta2) * gi * gi;
            float mh = (float)(s0[i] / bc1), vh = (float)(s1[i] / bc2);
            p[i] -= lr * mh / (sqrtf(vh) + c->eps);
            break;
        }
        }
    }
}

void eng_optim_step_ref(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                        size_t n) {
    step_scalar(c, lr, t, p, g, state, state + n, n);
}

/* Adam/AdamW with bias correction folded into two scalars:
 * p -= a * m / (sqrt(v) + e) with a = lr / bc1, e = eps * sqrt(bc2), after
 * scaling numerator and denominator by sqrt(bc2).
 *
 * The divider is the bottleneck of a plain vsqrtps + vdivps loop (one zmm
 * every ~20 cycles; perf put 30% of the loop on the instruction waiting for
 * the division). 1 / (sqrt(v) + e) is computed instead from the 14-bit
 * rsqrt14/rcp14 estimates, each refined by one Newton step, on the FMA
 * ports: within 2 ulp of the exact value (tests/unit/engine/test_model.c
 * checks the update against step_scalar), about twice as fast. The tail is
 * done with masked loads and stores, so every element takes the same path. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512 recip_sqrt_plus(__m512 v, __m512 e) {
    __m512 vc = _mm512_max_ps(v, _mm512_set1_ps(FLT_MIN)); /* rsqrt(0) is inf; sqrt(FLT_MIN) << e */
    __m512 r = _mm512_rsqrt14_ps(vc);
    __m512 t = _mm512_mul_ps(vc, r); /* sqrt(v), 14 bits */
    __m512 s = _mm512_mul_ps(t, _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), _mm512_mul_ps(t, r), _mm512_set1_ps(1.5f)));
    __m512 d = _mm512_add_ps(s, e);
    __m512 q = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(q, _mm512_fnmadd_ps(d, q, _mm512_set1_ps(2.0f)));
}

/* Adam streams five arrays in and three out, more streams than the hardware
 * prefetchers keep ahead of; asking for each 512 bytes (8 lines) ahead cut a
 * data-parallel update of 135k parameters from ~57 to ~40-47 us on a quiet
 * machine, and by half when a neighbour loads the memory system
 * (hpod train --threads 2). */
#define ADAM_PREFETCH_FLOATS 128

/* g2 (may be NULL) is added to g on the fly: a data-parallel replica's
 * gradient share (replicas.c), summed without a pass of its own. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void adam_avx512(float *p, const float *g, const float *g2,
                                                                             float *m, float *v, size_t n, float b1,
                                                                             float b2, float a, float e, float decay,
                                                                             float l2, uint16_t *pb) {
    __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), c1 = _mm512_set1_ps(1.0f - b1),
           c2 = _mm512_set1_ps(1.0f - b2), va = _mm512_set1_ps(a), ve = _mm512_set1_ps(e),
           vdec = _mm512_set1_ps(decay), vl2 = _mm512_set1_ps(l2);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        if (i + ADAM_PREFETCH_FLOATS < n) {
            size_t f = i + ADAM_PREFETCH_FLOATS;
            _mm_prefetch((const char *)(p + f), _MM_HINT_T0);
            _mm_prefetch((const char *)(g + f), _MM_HINT_T0);
            if (g2) _mm_prefetch((const char *)(g2 + f), _MM_HINT_T0);
            _mm_prefetch((const char *)(m + f), _MM_HINT_T0);
            _mm_prefetch((const char *)(v + f), _MM_HINT_T0);
        }
        __m512 pi = _mm512_maskz_loadu_ps(k, p + i), gs = _mm512_maskz_loadu_ps(k, g + i);
        if (g2) gs = _mm512_add_ps(gs, _mm512_maskz_loadu_ps(k, g2 + i));
        __m512 gi = _mm512_fmadd_ps(vl2, pi, gs);
        __m512 mi = _mm512_fmadd_ps(vb1, _mm512_maskz_loadu_ps(k, m + i), _mm512_mul_ps(c1, gi));
        __m512 vi = _mm512_fmadd_ps(vb2, _mm512_maskz_loadu_ps(k, v + i), _mm512_mul_ps(c2, _mm512_mul_ps(gi, gi)));
        _mm512_mask_storeu_ps(m + i, k, mi);
        _mm512_mask_storeu_ps(v + i, k, vi);
        pi = _mm512_fnmadd_ps(_mm512_mul_ps(va, mi), recip_sqrt_plus(vi, ve), _mm512_mul_ps(pi, vdec));
        _mm512_mask_storeu_ps(p + i, k, pi);
        if (pb) { /* the bf16 compute copy, rounded to nearest even, a NaN kept quiet (bf16.h) */
            __m512i u = _mm512_castps_si512(pi);
            __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
            __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                    _mm512_set1_epi32(0x7f800000));
            r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
            _mm256_mask_storeu_epi16(pb + i, k, _mm512_cvtepi32_epi16(r));
        }
    }
}

static void adam_scalar(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2, float a,
                        float e, float decay, float l2) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + l2 * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] = p[i] * decay - a * m[i] / (sqrtf(v[i]) + e);
    }
}

static void step_range(const eng_optim_config *c, float lr, long t, float *p, float *g, const float *g2,
                       float *state, size_t n_total, size_t off, size_t len, uint16_t *pb);

void eng_adam_scalars_at(const eng_optim_config *c, float lr, long t, eng_adam_scalars *out) {
    double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
    out->a = (float)(lr * sqrt(bc2) / bc1);
    out->e = (float)(c->eps * sqrt(bc2));
    out->decay = c->kind == ENG_OPT_ADAMW ? 1.0f - lr * c->weight_decay : 1.0f;
    out->l2 = c->kind == ENG_OPT_ADAM ? c->weight_decay : 0.0f;
}

void eng_optim_step_range(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                          size_t n_total, size_t off, size_t len) {
    step_range(c, lr, t, p, g, NULL, state, n_total, off, len, NULL);
}

void eng_optim_step_range_bf16(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                               size_t n_total, size_t off, size_t len, uint16_t *pb) {
    step_range(c, lr, t, p, g, NULL, state, n_total, off, len, pb + off);
}

void eng_optim_step_range_sum(const eng_optim_config *c, float lr, long t, float *p, float *g, const float *g2,
                              float *state, size_t n_total, size_t off, size_t len, uint16_t *pb) {
    step_range(c, lr, t, p, g, g2, state, n_total, off, len, pb ? pb + off : NULL);
}

static void step_range(const eng_optim_config *c, float lr, long t, float *p, float *g, const float *g2,
                       float *state, size_t n_total, size_t off, size_t len, uint16_t *pb) {
    float *s0 = state + off, *s1 = state + n_total + off;
    p += off;
    g += off;
    if (g2) g2 += off;
    if (c->kind == ENG_OPT_ADAM || c->kind == ENG_OPT_ADAMW) {
        eng_adam_scalars k;
        eng_adam_scalars_at(c, lr, t, &k);
        float a = k.a, e = k.e, decay = k.decay, l2 = k.l2;
        int avx = __builtin_cpu_supports("avx512f"); /* a load of libgcc's CPU model: no cache, no race */
        if (avx) {
            adam_avx512(p, g, g2, s0, s1, len, c->beta1, c->beta2, a, e, decay, l2, pb);
            return;
        }
        if (g2)
            for (size_t i = 0; i < len; i++) g[i] += g2[i];
        adam_scalar(p, g, s0, s1, len, c->beta1, c->beta2, a, e, decay, l2);
    } else {
        if (g2)
            for (size_t i = 0; i < len; i++) g[i] += g2[i];
        step_scalar(c, lr, t, p, g, s0, s1, len);
    }
    if (pb) eng_f32_to_bf16_n(p, pb, len);
}

void eng_optim_step(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state, size_t n) {
    eng_optim_step_range(c, lr, t, p, g, state, n, 0, n);
}

double eng_grad_unscale_norm(float *g, size_t n, float unscale, int *finite) {
    float chk = 0.0f;
    if (unscale != 1.0f)
        for (size_t i = 0; i < n; i++) g[i] *= unscale;
    /* squares summed in double, as the device does (cuda/optim.cu): an f32
     * sum was 1e-7 off, which a clipped rmsprop step where g k + wd p nearly
     * cancels magnified to 1e-4 of the update; four running sums keep the
     * adds in flight */
    double acc[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) {
            acc[k] += (double)g[i + k] * g[i + k];
            chk += g[i + k] - g[i + k]; /* NaN if any element is NaN or Inf */
        }
    for (; i < n; i++) {
        acc[0] += (double)g[i] * g[i];
        chk += g[i] - g[i];
    }
    double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    if (finite) *finite = chk == 0.0f && isfinite(s);
    return sqrt(s);
}

void eng_grad_clip(float *g, size_t n, double norm, float clipnorm) {
    if (clipnorm <= 0.0f || !(norm > clipnorm)) return;
    float k = (float)(clipnorm / norm);
    for (size_t i = 0; i < n; i++) g[i] *= k;
}

static const char *sched_names[] = {"constant", "step", "piecewise", "exponential", "cosine"};

int eng_sched_parse(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < (int)HPO_ARRAY_LEN(sched_names); i++)
        if (!strcmp(name, sched_names[i])) return i;
    return -1;
}

double eng_schedule_lr(const eng_schedule *s, double base_lr, long step, long steps_per_epoch, long total_steps) {
    if (steps_per_epoch < 1) steps_per_epoch = 1;
    double epoch = (double)step / (double)steps_per_epoch, lr = base_lr;
    switch (s->kind) {
    case ENG_SCHED_STEP:
        if (s->step_epochs > 0) lr = base_lr * pow(s->gamma, floor(floor(epoch + 1e-9) / s->step_epochs));
        break;
    case ENG_SCHED_PIECEWISE: {
        int i = 0;
        while (i < s->n_bounds && epoch >= s->bounds[i] - 1e-9) i++;
        lr = s->values[i];
        break;
    }
    case ENG_SCHED_EXPONENTIAL: {
        double ds = s->decay_steps > 0 ? s->decay_steps : (double)steps_per_epoch;
        lr = base_lr * pow(s->decay_rate, (double)step / ds);
        break;
    }
    case ENG_SCHED_COSINE: {
        double T = s->cosine_steps > 0 ? s->cosine_steps : (double)(total_steps > 0 ? total_steps : 1);
        double tt = (double)step < T ? (double)step : T;
        lr = base_lr * (s->alpha + (1.0 - s->alpha) * 0.5 * (1.0 + cos(M_PI * tt / T)));
        break;
    }
    default:
        break;
    }
    double w = s->warmup_steps > 0 ? s->warmup_steps : s->warmup_epochs * (double)steps_per_epoch;
    if (w > 0 && (double)step < w) lr *= ((double)step + 1.0) / w;
    return lr;
}
