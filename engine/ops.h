/*
 * ops.h - the layer kernels of the engine: eng_<op>_forward/_backward pairs
 * on raw f32 (and bf16 compute copies), with a naive reference (_ref) of each
 * beside the fast path; tests/unit/engine compares the two and checks every
 * backward against finite differences.
 *
 * Design notes
 * - Shapes are per call in the comments: B = batch, I/O = dense in/out
 *   features, images NHWC, dense weights IO ([I][O]), conv weights HWIO.
 * - Backward calls receive the upstream gradient in `d` and MAY CLOBBER it
 *   (it becomes the pre-activation gradient dz in place): the caller owns
 *   the buffer and never needs dy again. dx may be NULL when the layer is the
 *   first one (no one needs its input gradient); parameter gradients are
 *   OVERWRITTEN (each parameter has exactly one producer per step), so the
 *   gradient block never needs zeroing.
 * - Activations fused into dense/conv: y = act(x W + b) in one pass after the
 *   GEMM. relu, tanh and sigmoid differentiate from y alone; gelu needs the
 *   pre-activation z, so callers pass a separate z buffer for it (z == y is
 *   allowed for every other activation). GELU is the tanh approximation
 *   (Hendrycks & Gimpel; PyTorch approximate="tanh", Keras approximate=True).
 * - softmax as an activation is over the last dimension (cols). The loss
 *   functions (loss.h) fuse softmax with cross-entropy, so a final softmax
 *   layer is normally skipped by the model and handled there.
 * - mixed precision: *_bf16 variants take bf16 copies of the input and the
 *   weights (made by the caller: the model converts the weight block once per
 *   step), run the GEMMs in bf16 with f32 accumulation and produce f32
 *   outputs and gradients; d16 is caller scratch of the size of d.
 * - Threading: none inside the element-wise ops; the GEMMs and convolutions
 *   use the backend's threads.
 */
#ifndef ENG_OPS_H
#define ENG_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "hpo.h"
#include "rng.h"

typedef enum eng_act {
    ENG_ACT_NONE = 0,
    ENG_ACT_RELU,
    ENG_ACT_GELU, /* tanh approximation */
    ENG_ACT_TANH,
    ENG_ACT_SIGMOID,
    ENG_ACT_SOFTMAX, /* over the last dimension */
} eng_act;

/* "relu" -> ENG_ACT_RELU ...; "linear"/"none"/NULL -> NONE; -1 if unknown. */
int eng_act_parse(const char *name);
const char *eng_act_name(int act);
/* 1 if backward needs the pre-activation z (gelu). */
int eng_act_needs_z(int act);

/* ---- activations: z, y [rows][cols] ---- */
void eng_act_forward(int act, const float *z, float *y, size_t rows, size_t cols);
/* d: dy in, dz out (in place). */
void eng_act_backward(int act, const float *z, const float *y, float *d, size_t rows, size_t cols);
void eng_act_forward_ref(int act, const float *z, float *y, size_t rows, size_t cols);
void eng_act_backward_ref(int act, const float *z, const float *y, float *d, size_t rows, size_t cols);

/* ---- dense: x[B][I], w[I][O], b[O], z, y[B][O] ---- */
/* z = x w + b, y = act(z); z may be y unless act needs z. */
void eng_dense_forward(const eng_backend *be, const float *x, const float *w, const float *b, float *z,
                       float *y, int B, int I, int O, int act);
/* d[B][O]: dy in (clobbered); dx[B][I] (NULL: skip), dw[I][O], db[O] overwritten. */
void eng_dense_backward(const eng_backend *be, const float *x, const float *w, const float *z,
                        const float *y, float *d, float *dx, float *dw, float *db, int B, int I, int O,
                        int act);
int eng_dense_forward_bf16(const eng_backend *be, const uint16_t *xb, const uint16_t *wb, const float *b,
                           float *z, float *y, int B, int I, int O, int act);
int eng_dense_backward_bf16(const eng_backend *be, const uint16_t *xb, const uint16_t *wb, const float *z,
                            const float *y, float *d, uint16_t *d16, float *dx, float *dw, float *db,
                            int B, int I, int O, int act);
void eng_dense_forward_ref(const float *x, const float *w, const float *b, float *z, float *y, int B,
                           int I, int O, int act);
void eng_dense_backward_ref(const float *x, const float *w, const float *z, const float *y, float *d,
                            float *dx, float *dw, float *db, int B, int I, int O, int act);

/* ---- conv2d: x[N][H][W][C], w[KH][KW][C][OC], b[OC], z, y[N][OH][OW][OC] ----
 * dt: ENG_F32 (x, w f32) or ENG_BF16 (x, w bf16; d16 scratch [N*OH*OW*OC]). */
int eng_conv2d_forward(const eng_backend *be, const eng_conv2d_shape *s, eng_dtype dt, const void *x,
                       const void *w, const float *b, float *z, float *y, int act);
int eng_conv2d_backward(const eng_backend *be, const eng_conv2d_shape *s, eng_dtype dt, const void *x,
                        const void *w, const float *z, const float *y, float *d, uint16_t *d16, float *dx,
                        float *dw, float *db, int act);
void eng_conv2d_forward_ref(const eng_conv2d_shape *s, const float *x, const float *w, const float *b,
                            float *z, float *y, int act);
void eng_conv2d_backward_ref(const eng_conv2d_shape *s, const float *x, const float *w, const float *z,
                             const float *y, float *d, float *dx, float *dw, float *db, int act);

/* ---- maxpool2d (valid): x[N][H][W][C] -> y[N][OH][OW][C], OH = (H-ph)/sh+1 ----
 * arg[N*OH*OW*C] records the winning input offset for backward. */
void eng_maxpool2d_forward(const float *x, float *y, int32_t *arg, int N, int H, int W, int C, int ph,
                           int pw, int sh, int sw, int OH, int OW);
/* dx[N][H][W][C] overwritten (zero except the winners). */
void eng_maxpool2d_backward(const float *dy, const int32_t *arg, float *dx, int N, int H, int W, int C,
                            int OH, int OW);
void eng_maxpool2d_forward_ref(const float *x, float *y, int N, int H, int W, int C, int ph, int pw, int sh,
                               int sw, int OH, int OW);
void eng_maxpool2d_backward_ref(const float *x, const float *dy, float *dx, int N, int H, int W, int C, int ph,
                                int pw, int sh, int sw, int OH, int OW);

/* ---- global average pooling: x[N][H][W][C] -> y[N][C] ---- */
void eng_gap_forward(const float *x, float *y, int N, int HW, int C);
void eng_gap_backward(const float *dy, float *dx, int N, int HW, int C);
void eng_gap_forward_ref(const float *x, float *y, int N, int HW, int C);
void eng_gap_backward_ref(const float *dy, float *dx, int N, int HW, int C);

/* ---- dropout (inverted): y = x * mask, mask in {0, 1/(1-rate)} ---- */
void eng_dropout_forward(const float *x, float *y, float *mask, size_t n, float rate, hpo_rng *rng);
/* The same with the mask's 64-bit key given (eng_dropout_forward draws it
 * from rng), and the key whose mask starts at element `first` of key's: a
 * data-parallel share of a batch (rows from r, each n values) computes its
 * part of the whole batch's mask with eng_dropout_key_at(key, r * n), the
 * same masks whatever the number of shares (replicas.h). */
void eng_dropout_forward_key(const float *x, float *y, float *mask, size_t n, float rate, uint64_t key);
uint64_t eng_dropout_key_at(uint64_t key, size_t first);
/* The same masks by the scalar loop only (the reference of the AVX-512 path). */
void eng_dropout_forward_ref(const float *x, float *y, float *mask, size_t n, float rate, hpo_rng *rng);
void eng_dropout_backward(const float *dy, const float *mask, float *dx, size_t n);

/* ---- batch normalisation over the last dimension: x, y[M][C] (M = N*H*W) ----
 * train: batch statistics; running = momentum*running + (1-momentum)*batch
 * (running_var uses the unbiased variance); saves xhat[M][C], invstd[C].
 * eval: uses the running statistics. */
void eng_batchnorm_forward_train(const float *x, float *y, const float *gamma, const float *beta,
                                 float *run_mean, float *run_var, float momentum, float eps, float *xhat,
                                 float *invstd, size_t M, int C);
void eng_batchnorm_forward_eval(const float *x, float *y, const float *gamma, const float *beta,
                                const float *run_mean, const float *run_var, float eps, size_t M, int C);
/* dy[M][C] -> dx (may alias dy), dgamma, dbeta overwritten */
void eng_batchnorm_backward(const float *dy, const float *xhat, const float *invstd, const float *gamma,
                            float *dx, float *dgamma, float *dbeta, size_t M, int C);
void eng_batchnorm_forward_train_ref(const float *x, float *y, const float *gamma, const float *beta,
                                     float eps, size_t M, int C);
void eng_batchnorm_backward_ref(const float *x, const float *dy, const float *gamma, float eps, float *dx,
                                float *dgamma, float *dbeta, size_t M, int C);

/* ---- augmentation (training only): x, y[N][H][W][C] ----
 * Each sample is flipped horizontally with probability 1/2 (if flip) and
 * then shifted by (ty, tx) uniform in [-k, k] pixels, zero fill. params[N*3]
 * records (ty, tx, flipped) for backward. */
void eng_augment_forward(const float *x, float *y, int32_t *params, int N, int H, int W, int C, int k,
                         int flip, hpo_rng *rng);
/* The same for the N rows from `first` of a batch of `total` rows (a
 * data-parallel share, replicas.h): draws every row's (ty, tx, flipped) as
 * eng_augment_forward does for the whole batch, keeps rows [first, first +
 * N), so rng advances as for the whole batch and a share's rows are
 * augmented as in a one-thread run. */
void eng_augment_forward_rows(const float *x, float *y, int32_t *params, int N, int first, int total, int H, int W,
                              int C, int k, int flip, hpo_rng *rng);
/* Its draws alone, into params[3 * N] (the CUDA path draws on the host):
 * every one of total rows drawn in order, rows [first, first + N) kept. */
void eng_augment_draw_rows(int32_t *params, int N, int first, int total, int k, int flip, hpo_rng *rng);
void eng_augment_backward(const float *dy, const int32_t *params, float *dx, int N, int H, int W, int C);
void eng_augment_apply_ref(const float *x, float *y, const int32_t *params, int N, int H, int W, int C);

/* ---- residual add: y = a + b (n elements; y may alias a or b) ---- */
void eng_add_forward(const float *a, const float *b, float *y, size_t n);

#endif
