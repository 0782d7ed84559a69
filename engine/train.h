/*
 * train.h - the training loop: epochs over a training split, validation
 * every epoch, early stopping, a per-epoch callback that may stop training,
 * checkpoints with exact resume, mixed precision with loss scaling.
 *
 * Design notes
 * - Determinism: for a seed and a thread count a run is bit-reproducible.
 *   Epoch e's batch order comes from the batcher (hpo_rng_derive(seed, e,
 *   0)); the model's dropout/augmentation generator is part of the
 *   checkpoint (the replicas of a data-parallel run start each step from
 *   it and draw the same masks as one thread: replicas.h).
 *   With OpenBLAS/oneDNN on one thread the kernels are deterministic too.
 * - Checkpoint (eng_checkpoint_save/load): one safetensors file per run,
 *   rewritten atomically after every epoch: tensors "params", "opt_state",
 *   "bn_stats", "best_params" and "best_bn_stats" (when
 *   restore_best_weights is on: the best epoch's parameters and batch-norm
 *   running statistics, Keras' restore_best_weights restoring both), "rng"
 *   (U64 [4]); metadata: epoch, step, loss_scale, good_steps, early-stopping
 *   state (best, best_epoch, wait; kept_best, kept_epoch: the best of the
 *   metric whose epoch's weights are kept, opts.keep_metric, the monitor's
 *   in a checkpoint without them), the optimiser and the parameter count,
 *   which must match on load (HPO_EFORMAT otherwise; the precision may
 *   change: the weights are f32 masters in every one). Resuming epoch E from it and
 *   training on gives the weights of an uninterrupted run, bit for bit; a
 *   run that early stopping ended (wait >= patience) stays ended when it
 *   resumes, without another epoch. A checkpoint from before "best_bn_stats"
 *   existed loads with the last epoch's statistics as the best epoch's.
 * - Divergence: a NaN/Inf training loss returns HPO_EDIVERGED with the result
 *   filled (epochs completed, last metrics): a normal, recorded outcome.
 * - mixed_fp16: dynamic loss scaling. The loss gradient is multiplied by the
 *   scale (2^15 at start); when any gradient is Inf/NaN the step is skipped
 *   and the scale halved; after 2000 good steps it doubles. The scale falling
 *   below 2^-24 counts as divergence.
 * - The optimiser step of a layer runs inside the backward pass as soon as
 *   that layer's gradients exist (eng_model_backward_update: weights and
 *   gradients still in cache), unless a global look at all gradients must
 *   come first: clipnorm or mixed_fp16's overflow check use the separate
 *   unscale/clip/step pass. Both give the same update.
 * - Threads: with threads > 1 (and a fused update, see above) training is
 *   data-parallel (replicas.h): each thread runs the model on its share of
 *   every batch with single-threaded kernels and gathers that share itself;
 *   validation runs on the same threads (eng_replicas_evaluate), so no
 *   intra-op OpenBLAS thread is left spinning into the next epoch (it took
 *   up to 12% of an epoch on 2 cores). Otherwise eng_train sets the
 *   OpenBLAS/oneDNN threads (backend set_threads). FTZ/DAZ are set in every
 *   training thread's MXCSR for the duration of the call (restored on
 *   return). OpenBLAS's count is process-wide: workers with different
 *   thread counts at the same time override each other.
 * - On a CUDA device (opts.cuda, train_cuda.c) the same loop runs with its
 *   steps on the device: the same batch order and dropout masks, metrics
 *   summed on the device, the host model refreshed from the device at
 *   every epoch end, so the callback, early stopping and the checkpoint
 *   (same layout) are the CPU's; a run resumes on either. Results agree
 *   with the CPU's to f32 rounding (sums in other orders), not bit for bit.
 *   A NaN loss is seen at the epoch's end there, not at its step. Its device
 *   memory has a budget of its own (eng_cuda_mem below: the slot's share of
 *   the GPU), checked like max_bytes before anything is allocated.
 * - Checkpoints are fsynced unless checkpoint_durable is 0 (hpod under
 *   --sync normal): then they survive a crash of the process, not of the
 *   machine (eng_st_writer_set_durable).
 * - Memory budget: eng_train_mem adds up, before anything large is
 *   allocated, every block a run takes through eng_alloc (tensor.h): the
 *   model's parameter blocks, its batch buffers, the data-parallel
 *   replicas, the best epoch's weights, the batcher's buffers and, when
 *   resuming, the checkpoint file; the same dry-run sizes as the code that
 *   allocates (model.h), so the estimate is the allocation (tests compare
 *   the two). With max_bytes set, eng_train trains on intra-op threads
 *   instead of data-parallel replicas when only the replicas go over it,
 *   and otherwise refuses with HPO_ETOOLARGE ("model needs 15.9 GiB, budget
 *   4.0 GiB", naming the largest layer's size field);
 *   eng_train_check_budget says the same about a shape-only model
 *   (eng_model_new_shape) before its parameters exist. Not counted: the
 *   dataset, the batcher's row index arrays, OpenBLAS/oneDNN scratch.
 * - The callback runs on the training thread after each epoch, BEFORE that
 *   epoch's checkpoint is written (so what it records about the epoch is
 *   durable first: a crash in between repeats the epoch, never skips it);
 *   returning nonzero stops training (result->stopped_by_callback), e.g. a
 *   pruner's decision; the epoch is still checkpointed. Returning a
 *   negative HPO_E* code instead (it could not record the epoch: a full
 *   disk) ends eng_train with that code WITHOUT checkpointing the epoch, so
 *   a resume redoes it rather than leaving a hole in what was recorded.
 * - A checkpoint that cannot be written because the disk is full fails with
 *   HPO_ENOSPACE (the previous checkpoint stays intact: files are replaced
 *   atomically), other write failures with HPO_EIO.
 */
#ifndef ENG_TRAIN_H
#define ENG_TRAIN_H

#include <stdint.h>

#include "data.h"
#include "hpo.h"
#include "loss.h"
#include "model.h"

typedef struct eng_epoch_report {
    int epoch;           /* 1-based */
    int epochs;          /* planned */
    eng_metrics train, val;
    int has_val;
    double seconds;      /* training part of the epoch (no validation) */
    double samples_per_s;
    double lr;           /* learning rate of the last step */
    double loss_scale;   /* mixed_fp16; 1 otherwise */
    long skipped_steps;  /* mixed_fp16 overflow skips this epoch */
    int is_best;         /* early-stopping monitor improved */
    const char *checkpoint; /* path written right after the callback, or NULL */
} eng_epoch_report;

/* Return nonzero to stop training after this epoch (checkpointed), or a
 * negative HPO_E* code to abort with it (this epoch not checkpointed). */
typedef int (*eng_epoch_fn)(const eng_epoch_report *r, void *user);

typedef struct eng_train_opts {
    int epochs;
    int batch_size;
    int threads;            /* <= 0: leave the thread settings alone */
    uint64_t seed;
    int precision;          /* eng_precision */
    /* early stopping (off when patience < 0): stop after `patience` epochs
     * without improvement (Keras; 0 acts as 1) */
    int patience;
    const char *monitor;    /* "val_loss" (default), "val_accuracy", "loss", ... */
    int mode;               /* -1 min, +1 max, 0 auto from the name */
    double min_delta;
    int restore_best;
    /* the metric whose best epoch's weights restore_best keeps (and the
     * checkpoint saves as the best): NULL for the monitor's. A study's
     * objective, when early stopping watches another metric: the model
     * taken from a trial is then the epoch its value comes from (a strict
     * improvement, no min_delta; keep_mode as mode) */
    const char *keep_metric;
    int keep_mode;
    /* checkpoints: a file in this directory, written every epoch; NULL: none */
    const char *checkpoint_dir;
    const char *checkpoint_name; /* default "checkpoint.safetensors" */
    int resume;             /* start from the checkpoint if one exists */
    int checkpoint_durable; /* fsync every checkpoint (default 1; see eng_st_writer_set_durable) */
    int prefetch;           /* background batch gathering */
    eng_epoch_fn on_epoch;
    void *user;
    size_t max_bytes;       /* memory budget of the run (eng_train_mem); 0 = none */
    /* train on CUDA device cuda_device instead of the CPU (train_cuda.c):
     * every layer kind, every precision */
    int cuda;
    int cuda_device;
    /* data parallel on the device: cuda_replicas > 1 (at most
     * ENG_CUDA_MAX_REPLICAS) replicas of the model, replica k on GPU
     * cuda_devices[k] (cuda_device unused), each GPU named once (an NCCL
     * all-reduce of the gradients) or every replica on the same GPU (one
     * context, a device-side sum: the replica logic testable on one GPU);
     * the batch is split over them as the CPU's threads split it
     * (replicas.h). fp32 and mixed_bf16. */
    int cuda_replicas;
    int cuda_devices[8];
    /* the run's share of the device's memory (eng_train_cuda_check_budget);
     * 0: the default share (eng_train_cuda_budget) */
    size_t cuda_max_bytes;
    /* on a CUDA device, the training steps one launch of a captured graph
     * runs (Keras' steps_per_execution; <= 1: one); the CPU ignores it */
    int steps_per_execution;
    /* on a CUDA device, f32 GEMMs may use TF32 (10-bit mantissa products,
     * f32 accumulation; PyTorch's allow_tf32); default 0: full f32 */
    int allow_tf32;
} eng_train_opts;

void eng_train_opts_init(eng_train_opts *o); /* defaults: 10 epochs, batch 128, ... */

typedef struct eng_train_result {
    int epochs_run;         /* epochs completed (including resumed ones) */
    int start_epoch;        /* 0, or the epoch resumed from */
    int best_epoch;         /* 1-based epoch of the best monitor value, 0 if none */
    double best_value;
    eng_metrics train, val; /* of the last epoch */
    int has_val;
    int stopped_early, stopped_by_callback, restored_best;
    double seconds;
    double samples_per_s;   /* mean over epochs */
} eng_train_result;

/* What a training run of m with options o takes from eng_alloc, in bytes
 * (saturating at SIZE_MAX). Batches are counted at full batch_size and with
 * a validation split (upper bounds). */
typedef struct eng_train_mem {
    size_t weights;     /* parameters, gradients, optimiser state, batch-norm statistics */
    size_t activations; /* every layer's batch buffers, input, loss gradient, bf16/fp16 weight copies */
    size_t replicas;    /* data-parallel replicas (0 on one thread) */
    size_t best;        /* the best epoch's weights (restore_best) */
    size_t batches;     /* the batcher's buffers: training (two with prefetch) and validation */
    size_t total;       /* their sum, the peak (a resumed checkpoint is read straight into the
                         * model: safetensors.h, eng_st_open) */
    int data_parallel;  /* trains on replicas (replicas.h); decided as eng_train decides: not when
                         * the replicas would take the run over max_bytes */
} eng_train_mem;
void eng_train_mem_estimate(const eng_model *m, const eng_train_opts *o, eng_train_mem *out);
/* 0 when the run fits o->max_bytes (or there is no budget); otherwise
 * HPO_ETOOLARGE with err: "model needs X, budget Y: ..." and the field that
 * sizes the largest layer ("model.layers[1].dense.units"). m may be
 * shape-only. out (may be NULL) gets the estimate. */
int eng_train_check_budget(const eng_model *m, const eng_train_opts *o, eng_train_mem *out, hpo_error *err);

/* ---- the device memory of a run on a CUDA device (train_cuda.c) ----
 * What eng_train with o->cuda allocates on the device, added up by a dry
 * run of the code that allocates (so the estimate is the allocation, to
 * cudaMalloc's 512-byte rounding), before anything is allocated: the
 * context's own buffers, the parameter, gradient and optimiser-state blocks
 * (and their bf16 copy), every layer's batch buffers and the batch, label,
 * loss and metric buffers at full batch_size, and the datasets of the
 * splits with their labels and row lists. Works on a shape-only model
 * (eng_model_new_shape). Not counted: the CUDA context itself and the
 * allocator's rounding of large blocks, which the default share leaves
 * room for. */
typedef struct eng_cuda_mem {
    size_t context;     /* the eng_cuda context's workspace and scratch */
    size_t weights;     /* parameters, gradients, optimiser state, bf16 copy */
    size_t activations; /* layer, batch, label, loss, metric buffers, the epoch's order */
    size_t data;        /* the training (and another validation) dataset, labels or targets */
    size_t total;       /* their sum (saturating at SIZE_MAX) */
} eng_cuda_mem;
void eng_train_cuda_mem_estimate(const eng_model *m, const eng_split *train, const eng_split *val,
                                 const eng_train_opts *o, eng_cuda_mem *out);
/* The memory of a slot on a device of device_bytes shared by `slots` slots:
 * 90% of it (the rest for the CUDA context and the allocator's rounding)
 * over the slots. */
size_t eng_cuda_slot_share(size_t device_bytes, int slots);
/* hpod's worker pool says how many slots train on device d at once (1 by
 * default; process-wide, thread-safe). */
void eng_train_cuda_set_slots(int device, int slots);
/* The budget of a run on the device: o->cuda_max_bytes, else the slot
 * share of o->cuda_device's memory (eng_gpu_info_get); 0 (no check) when
 * there is no such device. */
size_t eng_train_cuda_budget(const eng_train_opts *o);
/* 0 when the run fits its budget; otherwise HPO_ETOOLARGE with err: "model
 * needs X of device memory, the slot's share of cuda:G is Y: ..." naming the
 * field that sizes the largest part (the largest layer's size field, or
 * "dataset"). eng_train checks this before it opens the device, so a run
 * that cannot fit fails with the reason, never with an out-of-memory midway.
 * out (may be NULL) gets the estimate. */
int eng_train_cuda_check_budget(const eng_model *m, const eng_split *train, const eng_split *val,
                                const eng_train_opts *o, eng_cuda_mem *out, hpo_error *err);

/* Train m on train (val may be NULL). m's buffers are reserved here. Out of
 * memory anywhere is HPO_ENOMEM with err saying for what. */
int eng_train(eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
              eng_train_result *res, hpo_error *err);

/* Metrics of m on a split (eval mode: no dropout, running BN statistics). */
int eng_evaluate(eng_model *m, const eng_split *s, int batch_size, eng_metrics *out, hpo_error *err);

/* mixed_fp16's dynamic loss scale (above): its start, the good steps in a
 * row after which it doubles, the ceiling it stays at (a float scale past
 * 2^127 would be Inf and skip every later step: a model whose gradients
 * stay tiny, or are all zero, must not get there), and the floor below
 * which a run diverged */
#define ENG_LOSS_SCALE_START 32768.0
#define ENG_LOSS_SCALE_GROWTH 2000
#define ENG_LOSS_SCALE_MAX 0x1p24
#define ENG_LOSS_SCALE_MIN 0x1p-24

/* ---- checkpoints (checkpoint.c) ---- */
typedef struct eng_train_state {
    int epoch;          /* epochs completed */
    long step;          /* optimiser steps taken */
    double loss_scale;
    long good_steps;
    double best;        /* early-stopping best value */
    int best_epoch, wait;
    double kept_best;   /* the keep metric's best value and its epoch: whose weights best_weights are */
    int kept_epoch;
    /* NULL: none saved; else the best epoch's weights, m->nparams parameters
     * then m->nstats batch-norm statistics (one block: they are kept,
     * saved and restored together) */
    const float *best_weights;
} eng_train_state;

/* durable: fsync the file (eng_st_writer_set_durable). */
int eng_checkpoint_save(const eng_model *m, const eng_train_state *st, const char *path, int durable,
                        hpo_error *err);
/* Loads params, optimiser state, BN statistics and RNG into m (shapes must
 * match) and fills st (st->best_weights NULL); best_weights (may be NULL;
 * m->nparams + m->nstats floats) receives the saved best weights when
 * present (*has_best = 1): the parameters, then the statistics
 * ("best_bn_stats", or the last epoch's from a checkpoint without it). */
int eng_checkpoint_load(eng_model *m, const char *path, eng_train_state *st, float *best_weights, int *has_best,
                        hpo_error *err);

#endif
