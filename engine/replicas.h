/*
 * replicas.h - data parallelism inside one worker slot: a training step on T
 * threads, each running the whole model on its share of the batch.
 *
 * Why: a slot with T > 1 threads used to split each GEMM over its threads
 * (OpenBLAS/oneDNN intra-op threading). For the small batches of
 * hyperparameter search (128 rows) that scales badly: an MLP's 2-thread
 * bf16 GEMMs were only 10% faster than 1-thread ones, and everything
 * between the GEMMs (Adam, activations, loss, dropout) stayed on one
 * thread, so mixed_bf16 ran no faster on 2 threads than on 1
 * (tests/bench/engine.c). Splitting the batch instead keeps every kernel
 * single-threaded and cache-friendly and puts all the work on all threads.
 *
 * A step (eng_replicas_step):
 *   1. rows [lo_k, hi_k) of the batch go to thread k (which gathers them
 *      itself from the dataset when the batcher defers the gather): thread 0 runs the
 *      primary model, thread k > 0 its replica k (model.h,
 *      eng_model_replica_new: own buffers and gradients, shared parameters);
 *      each computes forward, loss (scaled by its share, so the gradients
 *      add up to the full batch's mean) and backward, and before the
 *      backward asks for its rows of the next batch (software prefetch,
 *      eng_batcher_prefetch_next_rows: shuffled rows come from DRAM);
 *   2. barrier; then thread k sums the gradients of parameter range k over
 *      all replicas and steps the optimiser on that range; the Adam pass
 *      adds the first replica's share itself and writes the bf16 shadow
 *      (eng_optim_step_range_sum), so the sum costs no pass of its own;
 *   3. barrier. Helpers spin briefly between the two phases and sleep on a
 *      condition variable when idle (between epochs).
 * Evaluation between epochs runs on the same threads (eng_replicas_evaluate).
 * Determinism: for a given T, the same seed gives the same run (fixed split,
 * fixed summation order). Dropout masks and augmentations do not depend on
 * T: every share starts the step from the primary's generator (which the
 * checkpoint saves) and draws as one thread running the whole batch does,
 * keeping its own rows' part (eng_dropout_key_at shifts the mask's hash to
 * the share's first element; the augment layer draws every row and keeps
 * its own: a few generator draws per row), so the primary's generator
 * advances as with T = 1. Results differ from T = 1 by summation order
 * only, except that batch normalisation uses each share's batch statistics
 * (running statistics are the primary's), as PyTorch DDP does without
 * SyncBatchNorm.
 * Used by eng_train when threads > 1, the batch has at least 2 rows per
 * thread, and the update can be range-wise (no gradient clipping, not
 * mixed_fp16); otherwise training falls back to intra-op threads.
 */
#ifndef HPO_ENGINE_REPLICAS_H
#define HPO_ENGINE_REPLICAS_H

#include <stdint.h>

#include "data.h"
#include "loss.h"
#include "model.h"

typedef struct eng_replicas eng_replicas;

/* T - 1 replicas of the reserved model m and T - 1 helper threads (T >= 2);
 * kernels run single-threaded from then on. HPO_ENOMEM when a replica does
 * not fit (nothing is left allocated). */
int eng_replicas_new(eng_model *m, int threads, eng_replicas **out);
void eng_replicas_free(eng_replicas *r);
/* Bytes eng_replicas_new allocates for m reserved at (cap, precision) on
 * threads threads (0 for fewer than 2): T - 1 replicas and the bookkeeping. */
size_t eng_replicas_bytes(const eng_model *m, int threads, int cap, int precision);

/* One training step on the batch bt (threads <= bt->n <= capacity rows;
 * train a smaller batch on the model alone): bt->x is f32
 * [n][in_size], or bf16 when x_bf16 (eng_model_bf16_input); labels or
 * targets as for eng_loss_compute. deferred: the batcher of bt when it was
 * made with defer_gather (each thread then gathers its own rows first), or
 * NULL when bt is filled. Adds the batch's metrics to sums; *loss = the
 * batch's mean loss (NaN/Inf when it diverged: the parameters are then left
 * as they were). lr and t as for eng_optim_step. */
int eng_replicas_step(eng_replicas *r, const eng_batch *bt, eng_batcher *deferred, int x_bf16, float lr, long t,
                      eng_metric_sums *sums, double *loss);

/* Inference on the filled batch bt (threads <= bt->n <= capacity rows), each
 * thread on its share with the primary's parameters and running statistics:
 * adds the batch's metrics to sums, as eng_evaluate does for one batch. Keeps
 * evaluation between epochs on the slot's own threads: intra-op OpenBLAS
 * threads would spin (sched_yield) for ~0.1 s after it, into the next
 * epoch, taking a core from the training threads on a 2-core machine. */
int eng_replicas_evaluate(eng_replicas *r, const eng_batch *bt, int x_bf16, eng_metric_sums *sums);

#endif
