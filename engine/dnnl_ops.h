/*
 * dnnl_ops.h - the hot ops of the CPU backend on oneDNN 2.6 (matmul on AMX
 * in bf16, f32 matmul, 2-D convolution forward / backward-data /
 * backward-weights), plus a naive C reference of each for the tests.
 *
 * Design notes
 * - Creating a oneDNN primitive costs tens to hundreds of microseconds, far
 *   more than a 128x256x10 GEMM, so primitives are cached by everything that
 *   defines them (op, dtypes, shapes, strides/leading dimensions, transposes,
 *   bias presence, alpha, beta). The cache is per thread (thread-local, a
 *   small LRU of ENG_DNNL_CACHE_SIZE entries, freed at thread exit): no lock
 *   on the hot path, and each thread also owns its oneDNN stream. The oneDNN
 *   engine (CPU, index 0) is process-wide, created once.
 * - Layouts are the engine's, so no reorder happens around the calls:
 *   row-major matrices with leading dimensions (passed to oneDNN as strided
 *   memory descriptors), NHWC activations, conv weights HWIO
 *   ([KH][KW][Cin][Cout], the TensorFlow/Keras layout). The primitives are
 *   created with these plain formats for activations. Conv weights stay
 *   HWIO in the caller's buffer, but for most ops oneDNN gets them in its
 *   own blocked layout through a cached reorder (user <-> blocked) on every
 *   call: measured, it pays (e.g. bf16 forward of the CNN's first layer 3.2
 *   vs 37.8 ms; see weights_any() in dnnl_ops.c and tests/bench/kernels.c).
 *   HPO_DNNL_CONV_WEIGHTS=plain|any in the environment forces one choice.
 * - Mixed precision: bf16 variants take bf16 (uint16_t bit patterns) inputs
 *   and weights and write f32 outputs and gradients, accumulating in f32
 *   (AMX tiles on CPUs with AMX-BF16, AVX512-BF16 otherwise).
 * - Threads: oneDNN here is built with OpenMP. eng_dnnl_set_num_threads sets
 *   the OpenMP thread count of the CALLING thread (omp_set_num_threads,
 *   looked up at run time with dlsym so nothing extra is linked); a worker
 *   calls it once with its slot's thread count.
 * - Errors: HPO_EINVAL for bad arguments, HPO_EUNSUPPORTED when oneDNN has no
 *   implementation (e.g. bf16 on a CPU without AVX-512), HPO_EINTERNAL for
 *   other oneDNN failures (logged with the dnnl status).
 *
 * Threading: every function may be called from any thread concurrently;
 * buffers must not alias between inputs and outputs (except C with beta).
 */
#ifndef ENG_DNNL_OPS_H
#define ENG_DNNL_OPS_H

#include <stddef.h>
#include <stdint.h>

#define ENG_DNNL_CACHE_SIZE 64

/* Set the OpenMP (hence oneDNN) thread count of the calling thread; n >= 1.
 * Returns 0, or HPO_EUNSUPPORTED if no OpenMP runtime is loaded. */
int eng_dnnl_set_num_threads(int n);
/* Whether oneDNN can run bf16 matmul/conv fast here (AVX512-BF16 or AMX). */
int eng_dnnl_has_bf16(void);
/* Whether oneDNN runs bf16 matmul/conv here at all: natively, or emulated
 * on plain AVX-512; not on AVX2 (its primitives are not implemented). */
int eng_dnnl_bf16_usable(void);
/* Free the calling thread's primitive cache and stream (also done
 * automatically at thread exit). */
void eng_dnnl_thread_cleanup(void);
/* Cache statistics of the calling thread (hits, misses), for tests/logs. */
void eng_dnnl_cache_stats(uint64_t *hits, uint64_t *misses);
/* oneDNN's implementation name of the calling thread's most recently used
 * primitive ("brg:avx512_core_amx", "gemm:jit", ...), for logs and benches.
 * Borrowed; "" if none. */
const char *eng_dnnl_last_impl(void);

/* ---- GEMM ----
 * C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C + bias[N] (bias
 * broadcast over rows; NULL for none). Row-major: op(A) = A (M x K, lda >= K)
 * or, with transA, A^T where A is K x M (lda >= M); same for B (K x N,
 * ldb >= N, or N x K with transB, ldb >= K). C is M x N f32 with ldc >= N.
 * beta == 0 means C is write-only (NaNs in C are ignored).
 * alpha and beta are compile-time constants of the cached primitive (a
 * run-time scale makes oneDNN drop its AMX/brgemm kernels: 3-8x slower), so
 * each distinct value costs a primitive; apply a scale that changes every
 * step (a dynamic loss scale) outside, or keep alpha = 1. */
int eng_dnnl_gemm_f32(int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta,
                      float *C, int ldc, const float *bias);
int eng_dnnl_gemm_bf16(int transA, int transB, int M, int N, int K, float alpha,
                       const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                       float *C, int ldc, const float *bias);
/* Naive reference (double accumulation) with the same contract. A and B are
 * f32, or bf16 when `bf16` != 0 (then cast the pointers). */
void eng_dnnl_gemm_ref(int bf16, int transA, int transB, int M, int N, int K, float alpha,
                       const void *A, int lda, const void *B, int ldb, float beta, float *C,
                       int ldc, const float *bias);

/* ---- 2-D convolution ----
 * x: [N][H][W][C] (NHWC), w: [KH][KW][C][OC] (HWIO), bias: [OC] f32,
 * y: [N][OH][OW][OC]. Padding: ENG_PAD_VALID = none; ENG_PAD_SAME = TF/Keras
 * "same": OH = ceil(H / stride), total pad = max((OH-1)*stride + KH - H, 0),
 * top = total / 2, bottom = the rest (same for width). Cross-correlation (no
 * kernel flip), as in every framework. */
enum { ENG_PAD_VALID = 0, ENG_PAD_SAME = 1 };

typedef struct eng_conv2d_shape {
    int N, H, W, C;        /* input */
    int KH, KW, OC;        /* kernel and output channels */
    int stride_h, stride_w;
    int pad_t, pad_l, pad_b, pad_r;
    int OH, OW;            /* output, computed */
} eng_conv2d_shape;

/* Fill s (computing pads, OH, OW); HPO_EINVAL if sizes are not positive or
 * the output would be empty. */
int eng_conv2d_shape_init(eng_conv2d_shape *s, int N, int H, int W, int C, int KH, int KW,
                          int OC, int stride_h, int stride_w, int padding);
/* FLOPs of one forward pass (2*N*OH*OW*OC*KH*KW*C); backward-data and
 * backward-weights cost the same each. */
double eng_conv2d_flops(const eng_conv2d_shape *s);

/* Element type of x/w/dy for the conv calls below. Outputs are always f32. */
typedef enum eng_dnnl_type { ENG_DNNL_F32 = 0, ENG_DNNL_BF16 = 1 } eng_dnnl_type;

/* y = conv(x, w) + bias (bias NULL: none). x, w of type t; y f32. */
int eng_dnnl_conv2d_forward(const eng_conv2d_shape *s, eng_dnnl_type t, const void *x,
                            const void *w, const float *bias, float *y);
/* dx = conv_backward_data(dy, w): dy [N][OH][OW][OC] and w of type t; dx f32
 * (overwritten, not accumulated). */
int eng_dnnl_conv2d_backward_data(const eng_conv2d_shape *s, eng_dnnl_type t, const void *dy,
                                  const void *w, float *dx);
/* dw = sum over batch of x (*) dy, HWIO f32 (overwritten); db[OC] = sum of
 * dy over N, OH, OW (overwritten; NULL to skip). x and dy of type t. */
int eng_dnnl_conv2d_backward_weights(const eng_conv2d_shape *s, eng_dnnl_type t,
                                     const void *x, const void *dy, float *dw, float *db);

/* Naive references (double accumulation), same contracts, f32 only or bf16
 * inputs when t == ENG_DNNL_BF16. */
void eng_dnnl_conv2d_forward_ref(const eng_conv2d_shape *s, eng_dnnl_type t, const void *x,
                                 const void *w, const float *bias, float *y);
void eng_dnnl_conv2d_backward_data_ref(const eng_conv2d_shape *s, eng_dnnl_type t, const void *dy,
                                       const void *w, float *dx);
void eng_dnnl_conv2d_backward_weights_ref(const eng_conv2d_shape *s, eng_dnnl_type t,
                                          const void *x, const void *dy, float *dw, float *db);

#endif
