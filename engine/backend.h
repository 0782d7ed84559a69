/*
 * backend.h - the op table: the heavy kernels of the engine behind function
 * pointers, so a device backend (CUDA: cuBLAS/cuDNN) can replace the CPU one
 * without touching layers, model or training code.
 *
 * Design notes
 * - Only the ops whose cost matters live here (GEMM in f32 and bf16,
 *   convolution forward/backward, thread control). Cheap element-wise ops
 *   (bias, activations, pooling, norms) are plain C in ops_*.c and would get
 *   their own kernels in a device backend.
 * - GEMM is row-major: C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C,
 *   op(X) = X or X^T (ta/tb != 0), leading dimensions in elements, like
 *   cblas_sgemm(CblasRowMajor, ...). The bf16 GEMM takes bf16 operands and
 *   accumulates and writes f32 (AMX on this CPU via oneDNN).
 * - Convolution is NHWC with HWIO weights (tensor.h), described by the
 *   eng_conv2d_shape of dnnl_ops.h (a plain shape struct, not oneDNN
 *   specific); bias is fused, activations are applied by the layers.
 * - Every entry returns 0 or a negative HPO_E* code (kernel creation can fail
 *   in oneDNN); gemm_f32 cannot fail.
 * - Threading: set_threads(T) sets the intra-op threads of the calling thread
 *   (OpenBLAS is process-wide; oneDNN follows the caller's OpenMP setting).
 *   Ops are called by one training thread at a time per model.
 */
#ifndef ENG_BACKEND_H
#define ENG_BACKEND_H

#include <stdint.h>

#include "dnnl_ops.h"
#include "tensor.h"

typedef struct eng_backend {
    const char *name;
    void (*gemm_f32)(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc);
    /* bias[n] (NULL: none) added to every row of C; NULL entry when bf16
     * GEMM is not available */
    int (*gemm_bf16)(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                     const uint16_t *b, int ldb, float beta, float *c, int ldc, const float *bias);
    /* y = conv(x, w) + bias; dt says whether x, w (and dy below) are f32 or
     * bf16; outputs are f32. Shapes per eng_conv2d_shape (dnnl_ops.h). */
    int (*conv2d_forward)(const eng_conv2d_shape *s, eng_dtype dt, const void *x, const void *w,
                          const float *bias, float *y);
    int (*conv2d_backward_data)(const eng_conv2d_shape *s, eng_dtype dt, const void *dy,
                                const void *w, float *dx);
    int (*conv2d_backward_weights)(const eng_conv2d_shape *s, eng_dtype dt, const void *x,
                                   const void *dy, float *dw, float *db);
    void (*set_threads)(int threads);
} eng_backend;

/* The CPU backend (OpenBLAS sgemm, oneDNN bf16 matmul and convolution);
 * its gemm_bf16 is NULL where oneDNN cannot run bf16 (eng_dnnl_bf16_usable).
 * Borrowed, static, never freed. */
const eng_backend *eng_backend_cpu(void);

/* Set flush-to-zero and denormals-are-zero in the calling thread's MXCSR
 * (denormals cost 1.8x on this CPU). Returns the previous MXCSR value. */
unsigned eng_set_ftz_daz(void);
void eng_restore_mxcsr(unsigned mxcsr);

#endif
