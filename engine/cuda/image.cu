/* image.cu - the image layers besides convolution and max pooling, on the
 * device (see cuda_ops.h): augmentation (a flip and a shift per sample,
 * zero fill, with the parameters the CPU's generator drew) and global
 * average pooling. Per element the arithmetic is ops_misc.c's: the
 * augmentation moves values (its backward routes each gradient back to
 * the one input it came from: a bijection on what stays in the image), and
 * the pooling sums the pixels in order in f32 and scales by 1/HW, so both
 * are bit-identical to the CPU. */
#include "cuda_internal.h"

typedef struct img_shape {
    int N, H, W, C;
} img_shape;

/* y(n, i, j, c) = x(n, i - ty, flip ? W-1-(j - tx) : j - tx, c), 0 outside */
static __global__ void augment_fwd_k(img_shape s, const float *x, float *y, const int32_t *params, size_t total) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        cu_nhwc q = cu_nhwc_of(e, s.H, s.W, s.C);
        size_t n = q.n;
        int ty = params[3 * n], tx = params[3 * n + 1], fl = params[3 * n + 2];
        int si = q.h - ty, sj = q.w - tx, c = q.c;
        if (fl) sj = s.W - 1 - sj;
        y[e] = si < 0 || si >= s.H || sj < 0 || sj >= s.W ? 0.0f : x[((n * s.H + si) * s.W + sj) * s.C + c];
    }
}

/* dx(n, si, sj, c) = dy at the one output that read it, or 0; 0 + dy as
 * the CPU's sum into zeros, so that a -0 comes out +0 there too */
static __global__ void augment_bwd_k(img_shape s, const float *dy, float *dx, const int32_t *params, size_t total) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        cu_nhwc q = cu_nhwc_of(e, s.H, s.W, s.C);
        size_t n = q.n;
        int ty = params[3 * n], tx = params[3 * n + 1], fl = params[3 * n + 2];
        int i = q.h + ty, j = (fl ? s.W - 1 - q.w : q.w) + tx, c = q.c;
        dx[e] = i < 0 || i >= s.H || j < 0 || j >= s.W ? 0.0f : __fadd_rn(0.0f, dy[((n * s.H + i) * s.W + j) * s.C + c]);
    }
}

extern "C" int eng_cuda_augment_forward(eng_cuda *cu, const float *x, float *y, const int32_t *params, int N, int H,
                                        int W, int C) {
    CU_READY(cu);
    img_shape s = {N, H, W, C};
    size_t total = (size_t)N * H * W * C;
    if (!total) return 0;
    augment_fwd_k<<<cu_grid(total), CU_THREADS, 0, cu->stream>>>(s, x, y, params, total);
    return cu_launched(cu, "augment");
}

extern "C" int eng_cuda_augment_backward(eng_cuda *cu, const float *dy, const int32_t *params, float *dx, int N,
                                         int H, int W, int C) {
    CU_READY(cu);
    img_shape s = {N, H, W, C};
    size_t total = (size_t)N * H * W * C;
    if (!total) return 0;
    augment_bwd_k<<<cu_grid(total), CU_THREADS, 0, cu->stream>>>(s, dy, dx, params, total);
    return cu_launched(cu, "augment backward");
}

static __global__ void gap_fwd_k(const float *x, float *y, int N, int HW, int C) {
    float inv = 1.0f / (float)HW;
    size_t total = (size_t)N * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        size_t n = e / (size_t)C, c = e % (size_t)C;
        float acc = 0.0f;
        for (int p = 0; p < HW; p++) acc += x[(n * HW + p) * C + c];
        y[e] = acc * inv;
    }
}

static __global__ void gap_bwd_k(const float *dy, float *dx, int N, int HW, int C) {
    float inv = 1.0f / (float)HW;
    size_t total = (size_t)N * HW * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x)
        dx[e] = dy[(e / ((size_t)HW * C)) * C + e % (size_t)C] * inv;
}

extern "C" int eng_cuda_gap_forward(eng_cuda *cu, const float *x, float *y, int N, int HW, int C) {
    CU_READY(cu);
    if (N <= 0 || C <= 0) return 0;
    gap_fwd_k<<<cu_grid((size_t)N * C), CU_THREADS, 0, cu->stream>>>(x, y, N, HW, C);
    return cu_launched(cu, "global average pooling");
}

extern "C" int eng_cuda_gap_backward(eng_cuda *cu, const float *dy, float *dx, int N, int HW, int C) {
    CU_READY(cu);
    if (N <= 0 || C <= 0 || HW <= 0) return 0;
    gap_bwd_k<<<cu_grid((size_t)N * HW * C), CU_THREADS, 0, cu->stream>>>(dy, dx, N, HW, C);
    return cu_launched(cu, "global average pooling backward");
}
