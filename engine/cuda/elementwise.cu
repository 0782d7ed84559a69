/* elementwise.cu - activations, dropout, the residual add, 16-bit conversion,
 * fp16 rounding and the batch gather (see cuda_ops.h). Each op is one grid-stride kernel
 * whose per-element arithmetic is the CPU's (ops_dense.c, ops_misc.c,
 * batch.c), in f32 with the same formulas. */
#include "cuda_internal.h"

extern "C" {
#include "ops.h"
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi), as ops_dense.c */
#define GELU_C 0.044715f

static __device__ __forceinline__ float act_f(int act, float z) {
    switch (act) {
    case ENG_ACT_RELU: return z > 0.0f ? z : 0.0f;
    case ENG_ACT_GELU: return 0.5f * z * (1.0f + tanhf(GELU_K * (z + GELU_C * z * z * z)));
    case ENG_ACT_TANH: return tanhf(z);
    case ENG_ACT_SIGMOID: return z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
    default: return z;
    }
}

static __device__ __forceinline__ float act_grad(int act, float z, float y, float d) {
    switch (act) {
    case ENG_ACT_RELU: return y > 0.0f ? d : 0.0f;
    case ENG_ACT_GELU: {
        float t = tanhf(GELU_K * (z + GELU_C * z * z * z));
        return d * (0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * z * z));
    }
    case ENG_ACT_TANH: return d * (1.0f - y * y);
    case ENG_ACT_SIGMOID: return d * (y * (1.0f - y));
    default: return d;
    }
}

static __global__ void act_fwd_k(int act, const float *z, float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = act_f(act, z[i]);
}

static __global__ void act_bwd_k(int act, const float *z, const float *y, float *d, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        d[i] = act_grad(act, z ? z[i] : 0.0f, y ? y[i] : 0.0f, d[i]);
}

/* softmax rows, one thread per row, as softmax_rows in ops_dense.c */
static __global__ void softmax_fwd_k(const float *z, float *y, size_t rows, size_t cols) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
        const float *zr = z + r * cols;
        float *yr = y + r * cols;
        float m = zr[0], s = 0.0f;
        for (size_t j = 1; j < cols; j++) m = zr[j] > m ? zr[j] : m;
        for (size_t j = 0; j < cols; j++) s += (yr[j] = expf(zr[j] - m));
        float inv = 1.0f / s;
        for (size_t j = 0; j < cols; j++) yr[j] *= inv;
    }
}

static __global__ void softmax_bwd_k(const float *y, float *d, size_t rows, size_t cols) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
        float *dr = d + r * cols;
        const float *yr = y + r * cols;
        float s = 0.0f;
        for (size_t j = 0; j < cols; j++) s += dr[j] * yr[j];
        for (size_t j = 0; j < cols; j++) dr[j] = yr[j] * (dr[j] - s);
    }
}

extern "C" int eng_cuda_act_forward(eng_cuda *cu, int act, const float *z, float *y, size_t rows, size_t cols) {
    CU_READY(cu);
    size_t n = rows * cols;
    if (!n) return 0;
    if (act == ENG_ACT_NONE) return eng_cuda_copy(cu, y, z, n * sizeof *y);
    if (act == ENG_ACT_SOFTMAX)
        softmax_fwd_k<<<cu_grid(rows), CU_THREADS, 0, cu->stream>>>(z, y, rows, cols);
    else
        act_fwd_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(act, z, y, n);
    return cu_launched(cu, "activation forward");
}

extern "C" int eng_cuda_act_backward(eng_cuda *cu, int act, const float *z, const float *y, float *d, size_t rows,
                                     size_t cols) {
    CU_READY(cu);
    size_t n = rows * cols;
    if (!n || act == ENG_ACT_NONE) return 0;
    if (act == ENG_ACT_SOFTMAX)
        softmax_bwd_k<<<cu_grid(rows), CU_THREADS, 0, cu->stream>>>(y, d, rows, cols);
    else
        act_bwd_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(act, z, y, d, n);
    return cu_launched(cu, "activation backward");
}

/* ---- dropout: the hash of ops_misc.c's dropout_bits, element by element ---- */

static __device__ __forceinline__ uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

/* the key is k01, unless key (dev) is given */
static __global__ void dropout_k(const float *x, float *y, float *mask, size_t n, uint64_t k01, const uint64_t *key,
                                 uint32_t thr, float scale) {
    if (key) k01 = *key;
    uint32_t k0 = (uint32_t)k01, k1 = (uint32_t)(k01 >> 32);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t bits = fmix32(fmix32((uint32_t)i * 0x9e3779b9u + k0) ^ k1) >> 8;
        float m = bits < thr ? scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

static int dropout_launch(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate, uint64_t k01,
                          const uint64_t *key) {
    CU_READY(cu);
    if (!n) return 0;
    /* the scalars exactly as eng_dropout_forward computes them */
    float keep = 1.0f - rate, scale = rate < 1.0f ? 1.0f / keep : 0.0f;
    uint32_t thr = (uint32_t)((double)keep * 16777216.0);
    dropout_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(x, y, mask, n, k01, key, thr, scale);
    return cu_launched(cu, "dropout");
}

extern "C" int eng_cuda_dropout_forward(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate,
                                        uint64_t key) {
    return dropout_launch(cu, x, y, mask, n, rate, key, NULL);
}

extern "C" int eng_cuda_dropout_forward_dev(eng_cuda *cu, const float *x, float *y, float *mask, size_t n,
                                            float rate, const uint64_t *key) {
    return dropout_launch(cu, x, y, mask, n, rate, 0, key);
}

static __global__ void mul_k(const float *a, const float *b, float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = a[i] * b[i];
}

static __global__ void add_k(const float *a, const float *b, float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

extern "C" int eng_cuda_dropout_backward(eng_cuda *cu, const float *dy, const float *mask, float *dx, size_t n) {
    CU_READY(cu);
    if (!n) return 0;
    mul_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(dy, mask, dx, n);
    return cu_launched(cu, "dropout backward");
}

extern "C" int eng_cuda_add(eng_cuda *cu, const float *a, const float *b, float *y, size_t n) {
    CU_READY(cu);
    if (!n) return 0;
    add_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(a, b, y, n);
    return cu_launched(cu, "add");
}

static __global__ void to_h16_k(const float *x, uint16_t *y, size_t n, int fp16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = cu_f32_to_h16(x[i], fp16);
}

extern "C" int eng_cuda_to_h16(eng_cuda *cu, const float *x, uint16_t *y, size_t n) {
    CU_READY(cu);
    if (!n) return 0;
    to_h16_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(x, y, n, cu->half_fp16);
    return cu_launched(cu, "16-bit conversion");
}

static __global__ void round_fp16_k(const float *x, float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = cu_round_fp16(x[i]);
}

extern "C" int eng_cuda_round_fp16(eng_cuda *cu, const float *x, float *y, size_t n) {
    CU_READY(cu);
    if (!n) return 0;
    round_fp16_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(x, y, n);
    return cu_launched(cu, "fp16 rounding");
}

/* ---- gather: rows y over blockIdx.y (grid-stride), columns over x ---- */

template <typename T>
static __global__ void gather_x_k(const T *x_all, size_t ss, float scale, const uint32_t *idx, int n, float *out,
                                  uint16_t *out16, int fp16) {
    for (int r = blockIdx.y; r < n; r += gridDim.y) {
        const T *src = x_all + (size_t)idx[r] * ss;
        for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < ss; j += (size_t)gridDim.x * blockDim.x) {
            float v = (float)src[j] * scale;
            if (out16) out16[(size_t)r * ss + j] = cu_f32_to_h16(v, fp16);
            else out[(size_t)r * ss + j] = v;
        }
    }
}

extern "C" int eng_cuda_gather_x(eng_cuda *cu, const void *x_all, int x_u8, size_t ss, float scale,
                                 const uint32_t *idx, int n, float *out, uint16_t *out16) {
    CU_READY(cu);
    if (n <= 0 || !ss) return 0;
    if (!out == !out16) return cu_fail(cu, HPO_EINTERNAL, "gather: exactly one of out and out16 is needed");
    size_t bx = (ss + CU_THREADS - 1) / CU_THREADS;
    dim3 grid((unsigned)(bx > 64 ? 64 : bx), (unsigned)(n > 65535 ? 65535 : n));
    if (x_u8)
        gather_x_k<uint8_t><<<grid, CU_THREADS, 0, cu->stream>>>((const uint8_t *)x_all, ss, scale, idx, n, out, out16, cu->half_fp16);
    else
        gather_x_k<float><<<grid, CU_THREADS, 0, cu->stream>>>((const float *)x_all, ss, scale, idx, n, out, out16, cu->half_fp16);
    return cu_launched(cu, "batch gather");
}

template <typename T>
static __global__ void gather_rows_k(const T *all, int K, const uint32_t *idx, int n, T *out) {
    size_t total = (size_t)n * K;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] = all[(size_t)idx[i / K] * K + i % K];
}

extern "C" int eng_cuda_gather_labels(eng_cuda *cu, const int32_t *y_all, const uint32_t *idx, int n, int32_t *out) {
    CU_READY(cu);
    if (n <= 0) return 0;
    gather_rows_k<int32_t><<<cu_grid((size_t)n), CU_THREADS, 0, cu->stream>>>(y_all, 1, idx, n, out);
    return cu_launched(cu, "label gather");
}

extern "C" int eng_cuda_gather_targets(eng_cuda *cu, const float *t_all, int K, const uint32_t *idx, int n,
                                       float *out) {
    CU_READY(cu);
    if (n <= 0 || K <= 0) return 0;
    gather_rows_k<float><<<cu_grid((size_t)n * K), CU_THREADS, 0, cu->stream>>>(t_all, K, idx, n, out);
    return cu_launched(cu, "target gather");
}
