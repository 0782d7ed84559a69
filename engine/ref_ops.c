/* ref_ops.c - naive references of the oneDNN ops (see dnnl_ops.h): plain
 * loops with double accumulation, written from the definitions, used by the
 * tests to check the fast paths. */
#include <string.h>

#include "bf16.h"
#include "dnnl_ops.h"

static double ld(int bf16, const void *p, size_t i) {
    return bf16 ? (double)eng_bf16_to_f32(((const uint16_t *)p)[i]) : (double)((const float *)p)[i];
}

void eng_dnnl_gemm_ref(int bf16, int transA, int transB, int M, int N, int K, float alpha,
                       const void *A, int lda, const void *B, int ldb, float beta, float *C,
                       int ldc, const float *bias) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ld(bf16, A, transA ? (size_t)k * lda + i : (size_t)i * lda + k);
                double b = ld(bf16, B, transB ? (size_t)j * ldb + k : (size_t)k * ldb + j);
                s += a * b;
            }
            double c = alpha * s + (bias ? bias[j] : 0.0);
            if (beta != 0.0f) c += (double)beta * C[(size_t)i * ldc + j];
            C[(size_t)i * ldc + j] = (float)c;
        }
}

/* x[n][h][w][c], w[kh][kw][c][oc], y[n][oh][ow][oc] */
void eng_dnnl_conv2d_forward_ref(const eng_conv2d_shape *s, eng_dnnl_type t, const void *x,
                                 const void *w, const float *bias, float *y) {
    int b16 = t == ENG_DNNL_BF16;
    for (int n = 0; n < s->N; n++)
        for (int oh = 0; oh < s->OH; oh++)
            for (int ow = 0; ow < s->OW; ow++)
                for (int oc = 0; oc < s->OC; oc++) {
                    double acc = bias ? bias[oc] : 0.0;
                    for (int kh = 0; kh < s->KH; kh++) {
                        int ih = oh * s->stride_h - s->pad_t + kh;
                        if (ih < 0 || ih >= s->H) continue;
                        for (int kw = 0; kw < s->KW; kw++) {
                            int iw = ow * s->stride_w - s->pad_l + kw;
                            if (iw < 0 || iw >= s->W) continue;
                            for (int c = 0; c < s->C; c++)
                                acc += ld(b16, x, (((size_t)n * s->H + ih) * s->W + iw) * s->C + c) *
                                       ld(b16, w, (((size_t)kh * s->KW + kw) * s->C + c) * s->OC + oc);
                        }
                    }
                    y[(((size_t)n * s->OH + oh) * s->OW + ow) * s->OC + oc] = (float)acc;
                }
}

void eng_dnnl_conv2d_backward_data_ref(const eng_conv2d_shape *s, eng_dnnl_type t, const void *dy,
                                       const void *w, float *dx) {
    int b16 = t == ENG_DNNL_BF16;
    /* dx[n][ih][iw][c] = sum over (oh, ow, kh, kw) with ih = oh*sh - pt + kh of
     * dy[n][oh][ow][oc] * w[kh][kw][c][oc] */
    for (int n = 0; n < s->N; n++)
        for (int ih = 0; ih < s->H; ih++)
            for (int iw = 0; iw < s->W; iw++)
                for (int c = 0; c < s->C; c++) {
                    double acc = 0;
                    for (int kh = 0; kh < s->KH; kh++) {
                        int oh_s = ih + s->pad_t - kh;
                        if (oh_s < 0 || oh_s % s->stride_h) continue;
                        int oh = oh_s / s->stride_h;
                        if (oh >= s->OH) continue;
                        for (int kw = 0; kw < s->KW; kw++) {
                            int ow_s = iw + s->pad_l - kw;
                            if (ow_s < 0 || ow_s % s->stride_w) continue;
                            int ow = ow_s / s->stride_w;
                            if (ow >= s->OW) continue;
                            for (int oc = 0; oc < s->OC; oc++)
                                acc += ld(b16, dy, (((size_t)n * s->OH + oh) * s->OW + ow) * s->OC + oc) *
                                       ld(b16, w, (((size_t)kh * s->KW + kw) * s->C + c) * s->OC + oc);
                        }
                    }
                    dx[(((size_t)n * s->H + ih) * s->W + iw) * s->C + c] = (float)acc;
                }
}

void eng_dnnl_conv2d_backward_weights_ref(const eng_conv2d_shape *s, eng_dnnl_type t,
                                          const void *x, const void *dy, float *dw, float *db) {
    int b16 = t == ENG_DNNL_BF16;
    for (int kh = 0; kh < s->KH; kh++)
        for (int kw = 0; kw < s->KW; kw++)
            for (int c = 0; c < s->C; c++)
                for (int oc = 0; oc < s->OC; oc++) {
                    double acc = 0;
                    for (int n = 0; n < s->N; n++)
                        for (int oh = 0; oh < s->OH; oh++) {
                            int ih = oh * s->stride_h - s->pad_t + kh;
                            if (ih < 0 || ih >= s->H) continue;
                            for (int ow = 0; ow < s->OW; ow++) {
                                int iw = ow * s->stride_w - s->pad_l + kw;
                                if (iw < 0 || iw >= s->W) continue;
                                acc += ld(b16, x, (((size_t)n * s->H + ih) * s->W + iw) * s->C + c) *
                                       ld(b16, dy, (((size_t)n * s->OH + oh) * s->OW + ow) * s->OC + oc);
                            }
                        }
                    dw[(((size_t)kh * s->KW + kw) * s->C + c) * s->OC + oc] = (float)acc;
                }
    if (db)
        for (int oc = 0; oc < s->OC; oc++) {
            double acc = 0;
            for (size_t i = 0; i < (size_t)s->N * s->OH * s->OW; i++) acc += ld(b16, dy, i * s->OC + oc);
            db[oc] = (float)acc;
        }
}
