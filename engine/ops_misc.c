/* ops_misc.c - pooling, dropout, batch normalisation, augmentation and the
 * residual add (see ops.h). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "ops.h"

/* ---- maxpool2d ---- */

/* AVX-512: 16 channels at a time, max and argmax by masked moves (the plain
 * C loop below does not vectorise: gcc keeps the compare as a branch). */
__attribute__((target("avx512f"))) static void maxpool_avx512(const float *xn, float *yo, int32_t *ao, int32_t base,
                                                              int C, int W, int ph, int pw) {
    for (int c0 = 0; c0 < C; c0 += 16) {
        __mmask16 k = C - c0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (C - c0)) - 1);
        __m512i lane = _mm512_add_epi32(_mm512_set1_epi32(c0), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        __m512 m = _mm512_maskz_loadu_ps(k, xn + base + c0);
        __m512i a = _mm512_add_epi32(lane, _mm512_set1_epi32(base));
        for (int i = 0; i < ph; i++)
            for (int j = 0; j < pw; j++) {
                if (!i && !j) continue;
                int32_t off = base + (int32_t)((i * W + j) * C);
                __m512 v = _mm512_maskz_loadu_ps(k, xn + off + c0);
                __mmask16 gt = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ);
                m = _mm512_mask_mov_ps(m, gt, v);
                a = _mm512_mask_mov_epi32(a, gt, _mm512_add_epi32(lane, _mm512_set1_epi32(off)));
            }
        _mm512_mask_storeu_ps(yo + c0, k, m);
        _mm512_mask_storeu_epi32(ao + c0, k, a);
    }
}

void eng_maxpool2d_forward(const float *x, float *y, int32_t *arg, int N, int H, int W, int C, int ph,
                           int pw, int sh, int sw, int OH, int OW) {
    int avx = __builtin_cpu_supports("avx512f"); /* a load of libgcc's CPU model: no cache, no race */
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * H * W * C;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                float *restrict yo = y + (((size_t)n * OH + oh) * OW + ow) * C;
                int32_t *restrict ao = arg + (((size_t)n * OH + oh) * OW + ow) * C;
                int32_t base = (int32_t)((((size_t)oh * sh) * W + (size_t)ow * sw) * C);
                if (avx) {
                    maxpool_avx512(xn, yo, ao, base, C, W, ph, pw);
                    continue;
                }
                /* first window element initialises, the rest compare */
                for (int c = 0; c < C; c++) {
                    yo[c] = xn[base + c];
                    ao[c] = base + c;
                }
                for (int i = 0; i < ph; i++)
                    for (int j = 0; j < pw; j++) {
                        if (!i && !j) continue;
                        int32_t off = base + (int32_t)(((size_t)i * W + j) * C);
                        const float *restrict xi = xn + off;
                        for (int c = 0; c < C; c++) {
                            float v = xi[c];
                            int gt = v > yo[c];
                            yo[c] = gt ? v : yo[c];
                            ao[c] = gt ? off + c : ao[c];
                        }
                    }
            }
    }
}

void eng_maxpool2d_backward(const float *dy, const int32_t *arg, float *dx, int N, int H, int W, int C,
                            int OH, int OW) {
    size_t per_in = (size_t)H * W * C, per_out = (size_t)OH * OW * C;
    memset(dx, 0, (size_t)N * per_in * sizeof *dx);
    for (int n = 0; n < N; n++) {
        float *dxn = dx + (size_t)n * per_in;
        const float *dyn = dy + (size_t)n * per_out;
        const int32_t *an = arg + (size_t)n * per_out;
        for (size_t i = 0; i < per_out; i++) dxn[an[i]] += dyn[i];
    }
}

void eng_maxpool2d_forward_ref(const float *x, float *y, int N, int H, int W, int C, int ph, int pw, int sh,
                               int sw, int OH, int OW) {
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int c = 0; c < C; c++) {
                    float m = -INFINITY;
                    for (int i = 0; i < ph; i++)
                        for (int j = 0; j < pw; j++) {
                            float v = x[(((size_t)n * H + oh * sh + i) * W + ow * sw + j) * C + c];
                            if (v > m) m = v;
                        }
                    y[(((size_t)n * OH + oh) * OW + ow) * C + c] = m;
                }
}

void eng_maxpool2d_backward_ref(const float *x, const float *dy, float *dx, int N, int H, int W, int C, int ph,
                                int pw, int sh, int sw, int OH, int OW) {
    memset(dx, 0, (size_t)N * H * W * C * sizeof *dx);
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int c = 0; c < C; c++) {
                    float m = -INFINITY;
                    size_t best = 0;
                    for (int i = 0; i < ph; i++)
                        for (int j = 0; j < pw; j++) {
                            size_t off = (((size_t)n * H + oh * sh + i) * W + ow * sw + j) * C + c;
                            if (x[off] > m) { /* first maximum wins, like the fast path */
                                m = x[off];
                                best = off;
                            }
                        }
                    dx[best] += dy[(((size_t)n * OH + oh) * OW + ow) * C + c];
                }
}

/* ---- global average pooling ---- */

void eng_gap_forward(const float *x, float *y, int N, int HW, int C) {
    float inv = 1.0f / (float)HW;
    for (int n = 0; n < N; n++) {
        float *yn = y + (size_t)n * C;
        memset(yn, 0, (size_t)C * sizeof *yn);
        for (int p = 0; p < HW; p++) {
            const float *xp = x + ((size_t)n * HW + p) * C;
            for (int c = 0; c < C; c++) yn[c] += xp[c];
        }
        for (int c = 0; c < C; c++) yn[c] *= inv;
    }
}

void eng_gap_backward(const float *dy, float *dx, int N, int HW, int C) {
    float inv = 1.0f / (float)HW;
    for (int n = 0; n < N; n++)
        for (int p = 0; p < HW; p++) {
            float *dxp = dx + ((size_t)n * HW + p) * C;
            const float *dyn = dy + (size_t)n * C;
            for (int c = 0; c < C; c++) dxp[c] = dyn[c] * inv;
        }
}

void eng_gap_forward_ref(const float *x, float *y, int N, int HW, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int p = 0; p < HW; p++) s += x[((size_t)n * HW + p) * C + c];
            y[(size_t)n * C + c] = (float)(s / HW);
        }
}

void eng_gap_backward_ref(const float *dy, float *dx, int N, int HW, int C) {
    for (int n = 0; n < N; n++)
        for (int p = 0; p < HW; p++)
            for (int c = 0; c < C; c++) dx[((size_t)n * HW + p) * C + c] = (float)((double)dy[(size_t)n * C + c] / HW);
}

/* ---- dropout ---- */

/* The mask comes from a counter-based hash rather than one generator draw
 * per element: the model's generator gives one 64-bit key per call, and
 * element i keeps when the top 24 bits of mix(key, i) fall below keep * 2^24
 * (the same 24-bit resolution as hpo_rng_uniform_f). Two rounds of the
 * murmur3 finaliser over (i, key) decorrelate neighbouring elements and
 * successive calls. Drawing a float per element was 19% of a study's CPU
 * time (perf, an MLP search with dropout); this is 16 lanes at a time, the
 * scalar loop gives bit-identical masks (tests/unit/engine/test_ops.c), and
 * the generator advances by one draw per call, so checkpoints still resume
 * exactly. */
static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

static inline uint32_t dropout_bits(uint32_t k0, uint32_t k1, uint32_t i) {
    return fmix32(fmix32(i * 0x9e3779b9u + k0) ^ k1) >> 8;
}

__attribute__((target("avx512f"))) static inline __m512i fmix32_avx512(__m512i h) {
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32((int)0x85ebca6bu));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32((int)0xc2b2ae35u));
    return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}

__attribute__((target("avx512f"))) static size_t dropout_avx512(const float *x, float *y, float *mask, size_t n,
                                                                uint32_t k0, uint32_t k1, uint32_t thr, float scale) {
    const __m512i step = _mm512_set1_epi32(16), golden = _mm512_set1_epi32((int)0x9e3779b9u);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i vk0 = _mm512_set1_epi32((int)k0), vk1 = _mm512_set1_epi32((int)k1), vthr = _mm512_set1_epi32((int)thr);
    __m512 vs = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16, idx = _mm512_add_epi32(idx, step)) {
        __m512i h = fmix32_avx512(_mm512_add_epi32(_mm512_mullo_epi32(idx, golden), vk0));
        h = _mm512_srli_epi32(fmix32_avx512(_mm512_xor_si512(h, vk1)), 8);
        __mmask16 keep = _mm512_cmplt_epu32_mask(h, vthr);
        __m512 mk = _mm512_maskz_mov_ps(keep, vs);
        _mm512_storeu_ps(mask + i, mk);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), mk));
    }
    return i;
}

void eng_dropout_forward(const float *x, float *y, float *mask, size_t n, float rate, hpo_rng *rng) {
    eng_dropout_forward_key(x, y, mask, n, rate, hpo_rng_u64(rng));
}

/* Element i's bits hash i * golden + k0 (mod 2^32): adding first * golden
 * to k0 gives element first + i's bits at i, in every path (AVX-512, scalar,
 * CUDA) without an offset of their own. */
uint64_t eng_dropout_key_at(uint64_t key, size_t first) {
    uint32_t k0 = (uint32_t)key + (uint32_t)first * 0x9e3779b9u;
    return (key & 0xffffffff00000000ull) | k0;
}

void eng_dropout_forward_key(const float *x, float *y, float *mask, size_t n, float rate, uint64_t key) {
    float keep = 1.0f - rate, scale = rate < 1.0f ? 1.0f / keep : 0.0f;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint32_t thr = (uint32_t)((double)keep * 16777216.0); /* keep iff bits < keep * 2^24 */
    int avx = __builtin_cpu_supports("avx512f"); /* a load of libgcc's CPU model: no cache, no race */
    size_t i = avx ? dropout_avx512(x, y, mask, n, k0, k1, thr, scale) : 0;
    for (; i < n; i++) {
        mask[i] = dropout_bits(k0, k1, (uint32_t)i) < thr ? scale : 0.0f;
        y[i] = x[i] * mask[i];
    }
}

/* The scalar loop alone, for the test against the vector path. */
void eng_dropout_forward_ref(const float *x, float *y, float *mask, size_t n, float rate, hpo_rng *rng) {
    float keep = 1.0f - rate, scale = rate < 1.0f ? 1.0f / keep : 0.0f;
    uint64_t key = hpo_rng_u64(rng);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32), thr = (uint32_t)((double)keep * 16777216.0);
    for (size_t i = 0; i < n; i++) {
        mask[i] = dropout_bits(k0, k1, (uint32_t)i) < thr ? scale : 0.0f;
        y[i] = x[i] * mask[i];
    }
}

void eng_dropout_backward(const float *dy, const float *mask, float *dx, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * mask[i];
}

/* ---- batch normalisation ---- */

void eng_batchnorm_forward_train(const float *x, float *y, const float *gamma, const float *beta,
                                 float *run_mean, float *run_var, float momentum, float eps, float *xhat,
                                 float *invstd, size_t M, int C) {
    /* two passes in double per channel accumulator: mean, then variance
     * (C may be large: the accumulators on the heap) */
    double *mean = hpo_xcalloc(2 * (size_t)C, sizeof(double)), *var = mean + C;
    float *mu = hpo_xmalloc((size_t)C * sizeof(float));
    for (size_t m = 0; m < M; m++)
        for (int c = 0; c < C; c++) mean[c] += x[m * C + c];
    for (int c = 0; c < C; c++) mean[c] /= (double)M;
    for (size_t m = 0; m < M; m++)
        for (int c = 0; c < C; c++) {
            double t = x[m * C + c] - mean[c];
            var[c] += t * t;
        }
    for (int c = 0; c < C; c++) {
        double v = var[c] / (double)M;
        invstd[c] = (float)(1.0 / sqrt(v + eps));
        mu[c] = (float)mean[c];
        double unbiased = M > 1 ? var[c] / (double)(M - 1) : v;
        run_mean[c] = momentum * run_mean[c] + (1.0f - momentum) * (float)mean[c];
        run_var[c] = momentum * run_var[c] + (1.0f - momentum) * (float)unbiased;
    }
    for (size_t m = 0; m < M; m++)
        for (int c = 0; c < C; c++) {
            float h = (x[m * C + c] - mu[c]) * invstd[c];
            xhat[m * C + c] = h;
            y[m * C + c] = gamma[c] * h + beta[c];
        }
    free(mean);
    free(mu);
}

void eng_batchnorm_forward_eval(const float *x, float *y, const float *gamma, const float *beta,
                                const float *run_mean, const float *run_var, float eps, size_t M, int C) {
    float *a = hpo_xmalloc(2 * (size_t)C * sizeof(float)), *b = a + C; /* C may be large: the heap */
    for (int c = 0; c < C; c++) {
        a[c] = gamma[c] / sqrtf(run_var[c] + eps);
        b[c] = beta[c] - run_mean[c] * a[c];
    }
    for (size_t m = 0; m < M; m++)
        for (int c = 0; c < C; c++) y[m * C + c] = x[m * C + c] * a[c] + b[c];
    free(a);
}

void eng_batchnorm_backward(const float *dy, const float *xhat, const float *invstd, const float *gamma,
                            float *dx, float *dgamma, float *dbeta, size_t M, int C) {
    double *sg = hpo_xcalloc(2 * (size_t)C, sizeof(double)), *sb = sg + C; /* C may be large: the heap */
    float *k1 = hpo_xmalloc(3 * (size_t)C * sizeof(float)), *k2 = k1 + C, *k3 = k2 + C;
    for (size_t m = 0; m < M; m++)
        for (int c = 0; c < C; c++) {
            sb[c] += dy[m * C + c];
            sg[c] += (double)dy[m * C + c] * xhat[m * C + c];
        }
    for (int c = 0; c < C; c++) {
        dgamma[c] = (float)sg[c];
        dbeta[c] = (float)sb[c];
        /* dx = gamma*invstd/M * (M*dy - sum(dy) - xhat*sum(dy*xhat)) */
        k1[c] = gamma[c] * invstd[c];
        k2[c] = (float)(sb[c] / (double)M);
        k3[c] = (float)(sg[c] / (double)M);
    }
    for (size_t m = 0; m < M; m++)
        for (int c = 0; c < C; c++)
            dx[m * C + c] = k1[c] * (dy[m * C + c] - k2[c] - xhat[m * C + c] * k3[c]);
    free(sg);
    free(k1);
}

void eng_batchnorm_forward_train_ref(const float *x, float *y, const float *gamma, const float *beta,
                                     float eps, size_t M, int C) {
    for (int c = 0; c < C; c++) {
        double s = 0, v = 0;
        for (size_t m = 0; m < M; m++) s += x[m * C + c];
        s /= (double)M;
        for (size_t m = 0; m < M; m++) v += (x[m * C + c] - s) * (x[m * C + c] - s);
        v /= (double)M;
        for (size_t m = 0; m < M; m++) y[m * C + c] = (float)(gamma[c] * (x[m * C + c] - s) / sqrt(v + eps) + beta[c]);
    }
}

void eng_batchnorm_backward_ref(const float *x, const float *dy, const float *gamma, float eps, float *dx,
                                float *dgamma, float *dbeta, size_t M, int C) {
    for (int c = 0; c < C; c++) {
        double mu = 0, v = 0;
        for (size_t m = 0; m < M; m++) mu += x[m * C + c];
        mu /= (double)M;
        for (size_t m = 0; m < M; m++) v += (x[m * C + c] - mu) * (x[m * C + c] - mu);
        v /= (double)M;
        double is = 1 / sqrt(v + eps), sdy = 0, sdyx = 0;
        for (size_t m = 0; m < M; m++) {
            double h = (x[m * C + c] - mu) * is;
            sdy += dy[m * C + c];
            sdyx += dy[m * C + c] * h;
        }
        dgamma[c] = (float)sdyx;
        dbeta[c] = (float)sdy;
        for (size_t m = 0; m < M; m++) {
            double h = (x[m * C + c] - mu) * is;
            dx[m * C + c] = (float)(gamma[c] * is / M * (M * dy[m * C + c] - sdy - h * sdyx));
        }
    }
}

/* ---- augmentation ---- */

/* The output pixel (i, j) reads input (i - ty, jj) with jj = j - tx, mirrored
 * if flipped; one-to-one where in range, so backward is the transpose. */
void eng_augment_apply_ref(const float *x, float *y, const int32_t *params, int N, int H, int W, int C) {
    for (int n = 0; n < N; n++) {
        int ty = params[3 * n], tx = params[3 * n + 1], fl = params[3 * n + 2];
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++) {
                int si = i - ty, sj = j - tx;
                if (fl) sj = W - 1 - sj;
                float *yo = y + (((size_t)n * H + i) * W + j) * C;
                if (si < 0 || si >= H || sj < 0 || sj >= W) {
                    memset(yo, 0, (size_t)C * sizeof *yo);
                    continue;
                }
                memcpy(yo, x + (((size_t)n * H + si) * W + sj) * C, (size_t)C * sizeof *yo);
            }
    }
}

void eng_augment_forward(const float *x, float *y, int32_t *params, int N, int H, int W, int C, int k,
                         int flip, hpo_rng *rng) {
    eng_augment_forward_rows(x, y, params, N, 0, N, H, W, C, k, flip, rng);
}

void eng_augment_draw_rows(int32_t *params, int N, int first, int total, int k, int flip, hpo_rng *rng) {
    for (int n = 0; n < total; n++) { /* rows outside [first, first + N) draw too: rng as for the whole batch */
        int fl = flip ? (int)(hpo_rng_u64(rng) >> 63) : 0;
        int ty = k > 0 ? (int)hpo_rng_below(rng, (uint64_t)(2 * k + 1)) - k : 0;
        int tx = k > 0 ? (int)hpo_rng_below(rng, (uint64_t)(2 * k + 1)) - k : 0;
        if (n < first || n >= first + N) continue;
        params[3 * (n - first)] = ty;
        params[3 * (n - first) + 1] = tx;
        params[3 * (n - first) + 2] = fl;
    }
}

void eng_augment_forward_rows(const float *x, float *y, int32_t *params, int N, int first, int total, int H, int W,
                              int C, int k, int flip, hpo_rng *rng) {
    eng_augment_draw_rows(params, N, first, total, k, flip, rng);
    eng_augment_apply_ref(x, y, params, N, H, W, C);
}

void eng_augment_backward(const float *dy, const int32_t *params, float *dx, int N, int H, int W, int C) {
    memset(dx, 0, (size_t)N * H * W * C * sizeof *dx);
    for (int n = 0; n < N; n++) {
        int ty = params[3 * n], tx = params[3 * n + 1], fl = params[3 * n + 2];
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++) {
                int si = i - ty, sj = j - tx;
                if (fl) sj = W - 1 - sj;
                if (si < 0 || si >= H || sj < 0 || sj >= W) continue;
                const float *g = dy + (((size_t)n * H + i) * W + j) * C;
                float *o = dx + (((size_t)n * H + si) * W + sj) * C;
                for (int c = 0; c < C; c++) o[c] += g[c];
            }
    }
}

void eng_add_forward(const float *a, const float *b, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
