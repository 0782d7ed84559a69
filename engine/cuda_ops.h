/*
 * cuda_ops.h - the device op library of the CUDA training path: device
 * memory, the dataset on the device and batch gathering, dense layers
 * (cuBLASLt), conv2d as im2col + that GEMM, max pooling, augmentation,
 * global average pooling, batch normalisation, activations, dropout, the fused losses with their metric sums, gradient norm and
 * clipping, and the optimisers as one fused kernel each.
 *
 * Design notes
 * - Plain C, the same in every build: the .cu files of engine/cuda/ implement it when
 *   CMake enabled CUDA (HPO_CUDA_ENABLED); cuda_none.c answers otherwise,
 *   where eng_cuda_open fails with HPO_EUNSUPPORTED and no eng_cuda can
 *   exist, so callers never need #ifdefs (the gpu.h pattern).
 * - One eng_cuda per device slot and thread: the device, one stream, the
 *   cuBLASLt handle and its workspace, a small reduction scratch. Every op
 *   is enqueued on that stream in call order and returns at once; pointers
 *   marked (dev) are device memory, all others host memory.
 * - Errors are sticky, like CUDA's own: an op returns 0, or a negative
 *   HPO_E* code when its launch failed, and the first failure is kept in the
 *   context; eng_cuda_sync waits for the stream and reports it (or a fault
 *   of an earlier kernel) with the reason. A training loop checks once per
 *   step or epoch. A context with an error refuses further work.
 * - Semantics are the CPU engine's, op for op (ops.h, loss.h, optim.h): the
 *   same layouts (row-major, dense weights [I][O]), the same activations
 *   (GELU tanh form), the same update rules and clipping, and dropout masks
 *   bit-identical to eng_dropout_forward for the same 64-bit key (the CPU's
 *   counter-based hash, evaluated per element on the device), so a trial
 *   moves between CPU and GPU slots and resumes exactly.
 * - f32 GEMMs use CUBLAS_COMPUTE_32F: no TF32 unless the context is opened
 *   with allow_tf32. The _h16 variants take 16-bit inputs and weights and
 *   produce f32 outputs and gradients with f32 accumulation (ops.h); the
 *   16-bit format is the context's: bf16 (mixed_bf16), or IEEE fp16 once
 *   eng_cuda_set_fp16 says so (mixed_fp16). Every op that writes or reads
 *   a 16-bit buffer (uint16_t *) uses that format.
 * - mixed_fp16's dynamic loss scale lives on the device (eng_cuda_scaler):
 *   the loss reads the scale, the gradient pass unscales and checks
 *   finiteness, the optimiser skips a step whose gradients are not finite
 *   and reads its scalars by the count of applied steps, and
 *   eng_cuda_scaler_update does train.c's bookkeeping, so a graph of K
 *   steps replays with the scale changing inside it.
 * - Reductions (bias gradients, gradient norms) are deterministic: fixed
 *   block order, no atomics. The metric sums of the losses use double
 *   atomics (one per block): their order may vary in the last bits.
 * - Graph capture: a sequence of ops can be captured once and replayed
 *   (eng_cuda_capture_begin/_end); the host scalars of the captured ops
 *   are frozen at capture. The _dev variants read the scalars that change
 *   per step (learning rate and Adam's bias correction, a dropout key) from
 *   device memory instead, and eng_cuda_stage_steps copies the next steps'
 *   batch rows and scalars into fixed buffers from a cursor on the device
 *   that eng_cuda_cursor_advance moves: a graph of K whole training steps
 *   replays without a host value in it (train_cuda.c, steps_per_execution).
 * Threading: a context is used by one thread at a time.
 */
#ifndef ENG_CUDA_OPS_H
#define ENG_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "dnnl_ops.h" /* eng_conv2d_shape */
#include "hpo.h"
#include "loss.h"
#include "optim.h"

typedef struct eng_cuda eng_cuda;
typedef struct eng_cuda_graph eng_cuda_graph;

/* ---- context ---- */
/* The device memory a context allocates for itself: the cuBLASLt workspace
 * and the reduction scratch (counted by eng_train_cuda_mem_estimate). */
#define ENG_CUDA_WORKSPACE_BYTES ((size_t)32 << 20) /* NVIDIA's advice for Hopper */
#define ENG_CUDA_SCRATCH_DOUBLES 1024               /* >= the blocks of a reduction's first pass */
#define ENG_CUDA_CONTEXT_BYTES (ENG_CUDA_WORKSPACE_BYTES + ENG_CUDA_SCRATCH_DOUBLES * sizeof(double))
/* Opens device `device` (cudaSetDevice for this thread), its stream and
 * cuBLASLt. HPO_EUNSUPPORTED (field "devices") without CUDA or device. */
int eng_cuda_open(int device, int allow_tf32, eng_cuda **out, hpo_error *err);
void eng_cuda_close(eng_cuda *cu);
/* The 16-bit format of the context's _h16 ops: fp16 if fp16, else bf16
 * (the default). Set before the first op. */
void eng_cuda_set_fp16(eng_cuda *cu, int fp16);
/* Loads cuBLASLt (dlopen; eng_cuda_open does it at the first context):
 * 0, or HPO_EUNSUPPORTED (field "devices") saying why, the library missing
 * or lacking a function. Needs no GPU; a build without CUDA answers as
 * eng_cuda_open. */
int eng_cuda_blas_load(hpo_error *err);
/* Waits for every enqueued op; 0 or the first error, with the reason. */
int eng_cuda_sync(eng_cuda *cu, hpo_error *err);

/* ---- memory (dev) ---- */
/* cudaMalloc: HPO_ENOMEM naming the bytes when the device is full. */
int eng_cuda_alloc(eng_cuda *cu, size_t bytes, void **out, hpo_error *err);
void eng_cuda_free(eng_cuda *cu, void *p); /* NULL ok */
/* Synchronous copies (they wait for the stream first). */
int eng_cuda_upload(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err);
int eng_cuda_download(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err);
/* Enqueued. */
int eng_cuda_zero(eng_cuda *cu, void *p, size_t bytes);
int eng_cuda_copy(eng_cuda *cu, void *dst, const void *src, size_t bytes);

/* ---- data: rows of a dataset already on the device ----
 * x_all (dev): [rows][ss] uint8 (x_u8) or f32; out[n][ss] = x_all[idx[i]] *
 * scale, as f32 (out) or 16-bit rounded to nearest even (out16); one of
 * the two. idx (dev): n row numbers (an epoch's order, offset by the batch). */
int eng_cuda_gather_x(eng_cuda *cu, const void *x_all, int x_u8, size_t ss, float scale, const uint32_t *idx,
                      int n, float *out, uint16_t *out16);
/* labels out[i] = y_all[idx[i]]; targets out[i][k] = t_all[idx[i]][k]. */
int eng_cuda_gather_labels(eng_cuda *cu, const int32_t *y_all, const uint32_t *idx, int n, int32_t *out);
int eng_cuda_gather_targets(eng_cuda *cu, const float *t_all, int K, const uint32_t *idx, int n, float *out);
/* f32 -> the context's 16-bit format (round to nearest even, NaN kept
 * quiet; fp16 overflows to Inf), n elements. */
int eng_cuda_to_h16(eng_cuda *cu, const float *x, uint16_t *y, size_t n);
/* y = x rounded to the nearest fp16 value, as f32 (eng_round_fp16_n); y may be x. */
int eng_cuda_round_fp16(eng_cuda *cu, const float *x, float *y, size_t n);

/* ---- activations (ops.h): z, y, d [rows][cols] (dev) ---- */
int eng_cuda_act_forward(eng_cuda *cu, int act, const float *z, float *y, size_t rows, size_t cols);
int eng_cuda_act_backward(eng_cuda *cu, int act, const float *z, const float *y, float *d, size_t rows,
                          size_t cols);

/* ---- dense (ops.h): x[B][I], w[I][O], b[O], z, y, d[B][O] (dev) ----
 * z = x w + b, y = act(z); z may be y unless act needs z (gelu). */
int eng_cuda_dense_forward(eng_cuda *cu, const float *x, const float *w, const float *b, float *z, float *y, int B,
                           int I, int O, int act);
/* d: dy in, dz out (clobbered); dx (NULL: skip), dw, db overwritten. */
int eng_cuda_dense_backward(eng_cuda *cu, const float *x, const float *w, const float *z, const float *y, float *d,
                            float *dx, float *dw, float *db, int B, int I, int O, int act);
/* 16-bit: xb[B][I], wb[I][O] in the context's format; d16 scratch [B][O]
 * (dz rounded to that format before the two GEMMs). */
int eng_cuda_dense_forward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *b, float *z,
                                float *y, int B, int I, int O, int act);
int eng_cuda_dense_backward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *z,
                                 const float *y, float *d, uint16_t *d16, float *dx, float *dw, float *db, int B,
                                 int I, int O, int act);

/* ---- conv2d (ops.h): x[N][H][W][C], w[KH][KW][C][OC], y[N][OH][OW][OC] ----
 * as the dense op over the rows of cols[N*OH*OW][KH*KW*C] (im2col: each
 * output pixel's receptive field, zero outside x) with w as [KH*KW*C][OC]:
 * forward = im2col, then eng_cuda_dense_forward(_h16) with its bias and
 * activation; backward = eng_cuda_dense_backward(_h16) into dcols, then
 * col2im. im2col reads x (f32) or x16 (16-bit) and writes cols (f32) or
 * cols16 (16-bit, rounded to nearest even): one of each. col2im overwrites
 * dx[N][H][W][C] with, for each element, the sum of the dcols entries im2col
 * copied it to (a gather: deterministic). */
int eng_cuda_im2col(eng_cuda *cu, const eng_conv2d_shape *s, const float *x, const uint16_t *x16, float *cols,
                    uint16_t *cols16);
int eng_cuda_col2im(eng_cuda *cu, const eng_conv2d_shape *s, const float *dcols, float *dx);

/* ---- maxpool2d (ops.h, valid windows): x[N][H][W][C] -> y[N][OH][OW][C] ----
 * arg (dev) [N*OH*OW*C]: the winner's offset within its sample, the first
 * maximum in window order as eng_maxpool2d_forward; backward overwrites
 * dx with each element's sum of dy over the windows it won. */
int eng_cuda_maxpool_forward(eng_cuda *cu, const float *x, float *y, int32_t *arg, int N, int H, int W, int C, int ph,
                             int pw, int sh, int sw, int OH, int OW);
int eng_cuda_maxpool_backward(eng_cuda *cu, const float *dy, const int32_t *arg, float *dx, int N, int H, int W, int C,
                              int ph, int pw, int sh, int sw, int OH, int OW);

/* ---- augmentation (ops.h, training only): x, y[N][H][W][C] ----
 * params (dev) [N*3]: (ty, tx, flipped) per sample, as eng_augment_forward
 * draws them (the caller draws them on the host and stages them);
 * backward overwrites dx. */
int eng_cuda_augment_forward(eng_cuda *cu, const float *x, float *y, const int32_t *params, int N, int H, int W, int C);
int eng_cuda_augment_backward(eng_cuda *cu, const float *dy, const int32_t *params, float *dx, int N, int H, int W,
                              int C);

/* ---- global average pooling (ops.h): x[N][HW][C] -> y[N][C]; dx overwritten ---- */
int eng_cuda_gap_forward(eng_cuda *cu, const float *x, float *y, int N, int HW, int C);
int eng_cuda_gap_backward(eng_cuda *cu, const float *dy, float *dx, int N, int HW, int C);

/* ---- batch normalisation (ops.h) over the last dimension: x, y[M][C] ----
 * train: the batch's statistics (double sums), running_mean/var moved by
 * momentum (the variance unbiased), xhat[M][C], mu[C] and invstd[C] kept
 * for backward; eval: the running statistics. backward: dgamma, dbeta
 * overwritten, k[3C] scratch, dx (may be dy; NULL: only dgamma, dbeta). */
int eng_cuda_batchnorm_forward_train(eng_cuda *cu, const float *x, float *y, const float *gamma, const float *beta,
                                     float *run_mean, float *run_var, float momentum, float eps, float *xhat,
                                     float *mu, float *invstd, size_t M, int C);
int eng_cuda_batchnorm_forward_eval(eng_cuda *cu, const float *x, float *y, const float *gamma, const float *beta,
                                    const float *run_mean, const float *run_var, float eps, size_t M, int C);
int eng_cuda_batchnorm_backward(eng_cuda *cu, const float *dy, const float *xhat, const float *invstd,
                                const float *gamma, float *dx, float *dgamma, float *dbeta, float *k, size_t M, int C);

/* ---- dropout (ops.h), inverted: mask in {0, 1/(1-rate)} ----
 * key: the 64-bit draw eng_dropout_forward takes from the model's generator
 * (the caller draws it: hpo_rng_u64), so the masks equal the CPU's. */
int eng_cuda_dropout_forward(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate,
                             uint64_t key);
/* The same with the key read from key (dev) when the kernel runs. */
int eng_cuda_dropout_forward_dev(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate,
                                 const uint64_t *key);
int eng_cuda_dropout_backward(eng_cuda *cu, const float *dy, const float *mask, float *dx, size_t n);

/* ---- residual add: y = a + b (y may alias a or b) ---- */
int eng_cuda_add(eng_cuda *cu, const float *a, const float *b, float *y, size_t n);

/* ---- losses (loss.h) ----
 * eng_loss_compute on the device: z[B][K], labels[B] or targets[B][K] (dev,
 * one of them non-NULL), dz (dev, NULL: no gradient) = scale * d(mean
 * loss)/dz. sums (dev, ENG_CUDA_SUMS doubles: loss, correct, sq, abs) get
 * this batch added; eng_cuda_sums_add folds them into host metric sums. */
#define ENG_CUDA_SUMS 4
/* mixed_fp16's dynamic loss scale (train.h), in device memory: the scale,
 * the good steps since it last changed, this epoch's applied and skipped
 * steps, and whether the latest step was applied (the epoch's learning
 * rate is the schedule's at the step count before its last batch). */
typedef struct eng_cuda_scaler {
    float scale;
    int32_t good, applied, skipped, last_applied;
} eng_cuda_scaler;
int eng_cuda_loss(eng_cuda *cu, int loss, int fused_act, const float *z, const int32_t *labels,
                  const float *targets, int B, int K, float scale, float *dz, double *sums);
/* The same with the loss gradient scaled by scale * s->scale (s: dev, read
 * when the kernel runs): a replica's share of the batch times mixed_fp16's
 * loss scale. */
int eng_cuda_loss_scaled(eng_cuda *cu, int loss, int fused_act, const float *z, const int32_t *labels,
                         const float *targets, int B, int K, float scale, const eng_cuda_scaler *s, float *dz,
                         double *sums);
/* Downloads sums (dev) and adds them, with n samples of K outputs, to acc
 * (eng_cuda_sums_fold). */
int eng_cuda_sums_add(eng_cuda *cu, const double *sums, size_t n, int K, eng_metric_sums *acc, hpo_error *err);
/* The host half of eng_cuda_sums_add: h, the ENG_CUDA_SUMS doubles brought
 * down, added to acc (also the host emulation's, tests/unit/engine). */
static inline void eng_cuda_sums_fold(const double *h, size_t n, int K, eng_metric_sums *acc) {
    acc->loss += h[0];
    acc->correct += h[1];
    acc->sq += h[2];
    acc->abs += h[3];
    acc->n += n;
    acc->nvals += n * (size_t)K;
}

/* ---- gradients and optimisers (optim.h) over whole blocks (dev) ----
 * eng_grad_unscale_norm: g *= unscale, then out[0] = the L2 norm (double
 * accumulation), out[1] = 1 if every element is finite else 0 (out: dev, 2
 * doubles). Stays on the device: no host round trip per step. */
int eng_cuda_grad_norm(eng_cuda *cu, float *g, size_t n, float unscale, double *out);
/* mixed_fp16: g rounded to fp16 (eng_model_backward's rounding), then the
 * same with unscale = 1 / s->scale (s: dev) when the kernel runs. */
int eng_cuda_grad_unscale_norm(eng_cuda *cu, float *g, size_t n, const eng_cuda_scaler *s, double *out);
/* After a mixed_fp16 step's update, train.c's bookkeeping from norm[1]
 * (dev): not finite: the step was skipped, scale halved, good = 0,
 * skipped + 1; finite: applied + 1, and after growth_interval good steps in
 * a row the scale doubles while it is below max_scale. */
int eng_cuda_scaler_update(eng_cuda *cu, const double *norm, eng_cuda_scaler *s, int growth_interval,
                           float max_scale);
/* That bookkeeping itself, for one step whose gradients were finite or
 * not: the kernel's (optim.cu) and the host emulation's one definition. */
#ifdef __CUDACC__
#define ENG_CUDA_HOST_DEVICE __host__ __device__
#else
#define ENG_CUDA_HOST_DEVICE
#endif
static inline ENG_CUDA_HOST_DEVICE void eng_cuda_scaler_step(eng_cuda_scaler *s, int finite, int growth_interval,
                                                             float max_scale) {
    if (!finite) { /* skipped: Inf/NaN in the gradients */
        s->scale *= 0.5f;
        s->good = 0;
        s->skipped++;
        s->last_applied = 0;
        return;
    }
    s->applied++;
    s->last_applied = 1;
    if (++s->good >= growth_interval) {
        if (s->scale < max_scale) s->scale *= 2.0f;
        s->good = 0;
    }
}
/* One update of p[n] from g[n] with state laid out as optim.h says; g may be
 * modified. norm (dev, from eng_cuda_grad_norm, or NULL): when clipnorm > 0
 * and norm[0] > clipnorm, g is first scaled by clipnorm / norm[0] as
 * eng_grad_clip does, and when norm[1] == 0 (not finite) nothing is updated. */
int eng_cuda_optim_step(eng_cuda *cu, const eng_optim_config *c, float lr, long t, float *p, float *g,
                        float *state, size_t n, const double *norm);

/* The scalars of one update that change per step: the rate, and Adam's
 * (eng_adam_scalars_at at lr and the 1-based step t). */
typedef struct eng_cuda_opt_scalars {
    float lr;
    eng_adam_scalars adam;
} eng_cuda_opt_scalars;
static inline void eng_cuda_opt_scalars_at(const eng_optim_config *c, float lr, long t, eng_cuda_opt_scalars *out) {
    out->lr = lr;
    eng_adam_scalars_at(c, lr, t, &out->adam);
}
/* What eng_cuda_optim_step_dev reads and writes besides the blocks; every
 * pointer is device memory, NULL for none but sc. */
typedef struct eng_cuda_step_args {
    const eng_cuda_opt_scalars *sc; /* the step's scalars, read when the kernel runs; */
    const int32_t *sc_index;        /* with this: entry *sc_index of a table of them, */
    size_t sc_stride;               /* sc_stride bytes apart (mixed_fp16: by applied steps) */
    const double *norm;             /* as eng_cuda_optim_step's */
    double *skipped;                /* + 1 at each step not taken for non-finite gradients */
    uint16_t *p16;                  /* the 16-bit copy of every updated parameter */
    float *ph;                      /* its fp16-rounded f32 copy (mixed_fp16) */
} eng_cuda_step_args;
/* eng_cuda_optim_step with the scalars from device memory (graph replay),
 * writing the copies as it goes (no separate pass over the block). */
int eng_cuda_optim_step_dev(eng_cuda *cu, const eng_optim_config *c, const eng_cuda_step_args *a, float *p, float *g,
                            float *state, size_t n);

/* ---- steps staged from device memory ----
 * order (dev): an epoch's row order, rows entries, taken bs at a time;
 * recs (dev): one record of rec_bytes (a multiple of 8) per step of the
 * epoch. With s = *cursor (dev, in steps) when the kernel runs, copies the
 * rows of steps s .. s+steps-1 into idx (dev, steps * bs entries; the last
 * step of the epoch may have fewer) and their records into rec (dev). */
int eng_cuda_stage_steps(eng_cuda *cu, const uint32_t *order, size_t rows, int bs, const void *recs,
                         size_t rec_bytes, const int32_t *cursor, int steps, uint32_t *idx, void *rec);
/* *cursor += steps (dev), enqueued. */
int eng_cuda_cursor_advance(eng_cuda *cu, int32_t *cursor, int steps);

/* ---- data parallel across GPUs (train_cuda.c's replicas) ---- */
#define ENG_CUDA_MAX_REPLICAS 8
typedef struct eng_cuda_comm eng_cuda_comm;
/* An all-reduce group over the n contexts cus (2..ENG_CUDA_MAX_REPLICAS,
 * each on another GPU): NCCL, loaded with dlopen at the first group, one
 * communicator per GPU. HPO_EUNSUPPORTED (field "devices") saying why when
 * NCCL cannot be loaded or set up; HPO_EINVAL for a GPU named twice. */
int eng_cuda_comm_open(eng_cuda *const *cus, int n, eng_cuda_comm **out, hpo_error *err);
void eng_cuda_comm_free(eng_cuda_comm *c); /* NULL ok */
/* Ends and frees the group after a failure (NULL ok): the all-reduces in
 * flight are aborted (ncclCommAbort), so that no GPU waits forever for a
 * peer whose stream failed before it joined, and its streams can drain. */
void eng_cuda_comm_abort(eng_cuda_comm *c);
/* bufs[k] (dev, on cus[k], n floats each) = the sum of all of them, in
 * place, enqueued on each context's stream (one NCCL group: one host
 * thread drives every GPU). */
int eng_cuda_allreduce_sum(eng_cuda_comm *c, eng_cuda *const *cus, float *const *bufs, size_t n);

/* ---- graphs ---- */
/* Ops enqueued between begin and end are recorded, not run. */
int eng_cuda_capture_begin(eng_cuda *cu, hpo_error *err);
int eng_cuda_capture_end(eng_cuda *cu, eng_cuda_graph **out, hpo_error *err);
int eng_cuda_graph_launch(eng_cuda *cu, eng_cuda_graph *g);
void eng_cuda_graph_free(eng_cuda_graph *g);

#endif
