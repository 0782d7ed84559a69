/* conv.cu - conv2d as a GEMM, and max pooling, on the device (see
 * cuda_ops.h): im2col lays each output pixel's receptive field out as one
 * row, so that the convolution is the dense op over rows N*OH*OW with the
 * weights [KH*KW*C][OC] as they are (ops.h's HWIO layout: no transposes),
 * and its bias and activation epilogues; col2im is the adjoint, gathered:
 * each input element adds up the rows that read it, in a fixed order, with
 * no atomics (deterministic, as the CPU's reductions are).
 * Max pooling is ops_misc.c's: valid windows, the first maximum in window
 * order wins (strict >), its offset within the sample recorded for
 * backward, which routes each gradient to its winner; the backward is a
 * gather too (windows may overlap), summing in output order as the CPU. */
#include "cuda_internal.h"

/* rows: output pixels (n, oh, ow); columns: (kh, kw, c); zero outside x */
template <typename S, typename D>
static __global__ void im2col_k(eng_conv2d_shape s, const S *x, D *cols, size_t total) {
    const int K = s.KH * s.KW * s.C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / (size_t)K;
        int k = (int)(i % (size_t)K), c = k % s.C, kw = (k / s.C) % s.KW, kh = k / (s.C * s.KW);
        int ow = (int)(row % (size_t)s.OW), oh = (int)((row / (size_t)s.OW) % (size_t)s.OH);
        size_t n = row / ((size_t)s.OW * s.OH);
        int h = oh * s.stride_h - s.pad_t + kh, w = ow * s.stride_w - s.pad_l + kw;
        float v = 0.0f;
        if (h >= 0 && h < s.H && w >= 0 && w < s.W) v = cu_load_f32(x + ((n * s.H + h) * s.W + w) * s.C + c);
        cu_store(cols + i, v);
    }
}

extern "C" int eng_cuda_im2col(eng_cuda *cu, const eng_conv2d_shape *s, const float *x, const uint16_t *x16,
                               float *cols, uint16_t *cols16) {
    CU_READY(cu);
    if (!x == !x16 || !cols == !cols16) return cu_fail(cu, HPO_EINTERNAL, "im2col: one source and one destination");
    size_t total = (size_t)s->N * s->OH * s->OW * s->KH * s->KW * s->C;
    unsigned g = cu_grid(total);
    const __half *xh = (const __half *)x16; /* the 16-bit buffers in the context's format */
    __half *colsh = (__half *)cols16;
    if (x && cols) im2col_k<float, float><<<g, CU_THREADS, 0, cu->stream>>>(*s, x, cols, total);
    else if (x && cu->half_fp16) im2col_k<float, __half><<<g, CU_THREADS, 0, cu->stream>>>(*s, x, colsh, total);
    else if (x) im2col_k<float, uint16_t><<<g, CU_THREADS, 0, cu->stream>>>(*s, x, cols16, total);
    else if (cols && cu->half_fp16) im2col_k<__half, float><<<g, CU_THREADS, 0, cu->stream>>>(*s, xh, cols, total);
    else if (cols) im2col_k<uint16_t, float><<<g, CU_THREADS, 0, cu->stream>>>(*s, x16, cols, total);
    else if (cu->half_fp16) im2col_k<__half, __half><<<g, CU_THREADS, 0, cu->stream>>>(*s, xh, colsh, total);
    else im2col_k<uint16_t, uint16_t><<<g, CU_THREADS, 0, cu->stream>>>(*s, x16, cols16, total);
    return cu_launched(cu, "im2col");
}

/* dx(n, h, w, c) = sum over the (oh, ow, kh, kw) that read it of
 * dcols[(n, oh, ow)][(kh, kw, c)], kh and kw ascending */
static __global__ void col2im_k(eng_conv2d_shape s, const float *dcols, float *dx, size_t total) {
    const int K = s.KH * s.KW * s.C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        cu_nhwc q = cu_nhwc_of(i, s.H, s.W, s.C);
        int c = q.c, w = q.w, h = q.h;
        size_t n = q.n;
        float acc = 0.0f;
        for (int kh = 0; kh < s.KH; kh++) {
            int t = h + s.pad_t - kh;
            if (t < 0 || t % s.stride_h) continue;
            int oh = t / s.stride_h;
            if (oh >= s.OH) continue;
            for (int kw = 0; kw < s.KW; kw++) {
                int u = w + s.pad_l - kw;
                if (u < 0 || u % s.stride_w) continue;
                int ow = u / s.stride_w;
                if (ow >= s.OW) continue;
                acc += dcols[((n * s.OH + oh) * s.OW + ow) * (size_t)K + (size_t)(kh * s.KW + kw) * s.C + c];
            }
        }
        dx[i] = acc;
    }
}

extern "C" int eng_cuda_col2im(eng_cuda *cu, const eng_conv2d_shape *s, const float *dcols, float *dx) {
    CU_READY(cu);
    size_t total = (size_t)s->N * s->H * s->W * s->C;
    col2im_k<<<cu_grid(total), CU_THREADS, 0, cu->stream>>>(*s, dcols, dx, total);
    return cu_launched(cu, "col2im");
}

typedef struct pool_shape {
    int N, H, W, C, ph, pw, sh, sw, OH, OW;
} pool_shape;

static __global__ void maxpool_fwd_k(pool_shape p, const float *x, float *y, int32_t *arg, size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        cu_nhwc q = cu_nhwc_of(i, p.OH, p.OW, p.C);
        int c = q.c, ow = q.w, oh = q.h;
        size_t n = q.n;
        const float *xn = x + n * (size_t)p.H * p.W * p.C;
        int32_t base = (int32_t)(((size_t)oh * p.sh * p.W + (size_t)ow * p.sw) * p.C) + c, best = base;
        float m = xn[base];
        for (int a = 0; a < p.ph; a++)
            for (int b = 0; b < p.pw; b++) {
                int32_t off = base + (int32_t)(((size_t)a * p.W + b) * p.C);
                float v = xn[off];
                if (v > m) m = v, best = off;
            }
        y[i] = m;
        arg[i] = best;
    }
}

extern "C" int eng_cuda_maxpool_forward(eng_cuda *cu, const float *x, float *y, int32_t *arg, int N, int H, int W,
                                        int C, int ph, int pw, int sh, int sw, int OH, int OW) {
    CU_READY(cu);
    pool_shape p = {N, H, W, C, ph, pw, sh, sw, OH, OW};
    size_t total = (size_t)N * OH * OW * C;
    if (!total) return 0;
    maxpool_fwd_k<<<cu_grid(total), CU_THREADS, 0, cu->stream>>>(p, x, y, arg, total);
    return cu_launched(cu, "maxpool");
}

/* dx(n, h, w, c): the sum of dy over the windows (oh, ow ascending) whose
 * winner it is */
static __global__ void maxpool_bwd_k(pool_shape p, const float *dy, const int32_t *arg, float *dx, size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        cu_nhwc q = cu_nhwc_of(i, p.H, p.W, p.C);
        int c = q.c, w = q.w, h = q.h;
        size_t n = q.n;
        int32_t off = (int32_t)(((size_t)h * p.W + w) * p.C) + c;
        int oh0 = h >= p.ph ? (h - p.ph) / p.sh + 1 : 0, ow0 = w >= p.pw ? (w - p.pw) / p.sw + 1 : 0;
        float acc = 0.0f;
        for (int oh = oh0; oh <= h / p.sh && oh < p.OH; oh++)
            for (int ow = ow0; ow <= w / p.sw && ow < p.OW; ow++) {
                size_t o = ((n * p.OH + oh) * p.OW + ow) * p.C + c;
                if (arg[o] == off) acc += dy[o];
            }
        dx[i] = acc;
    }
}

extern "C" int eng_cuda_maxpool_backward(eng_cuda *cu, const float *dy, const int32_t *arg, float *dx, int N, int H,
                                         int W, int C, int ph, int pw, int sh, int sw, int OH, int OW) {
    CU_READY(cu);
    pool_shape p = {N, H, W, C, ph, pw, sh, sw, OH, OW};
    size_t total = (size_t)N * H * W * C;
    if (!total) return 0;
    maxpool_bwd_k<<<cu_grid(total), CU_THREADS, 0, cu->stream>>>(p, dy, arg, dx, total);
    return cu_launched(cu, "maxpool backward");
}
