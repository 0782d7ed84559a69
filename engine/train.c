/* train.c - the training loop, evaluation, early stopping, loss scaling
 * (see train.h). */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "replicas.h"
#include "tensor.h"
#include "train_loop.h"

void eng_train_opts_init(eng_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->epochs = 10;
    o->batch_size = 128;
    o->threads = 0;
    o->precision = ENG_PREC_FP32;
    o->patience = -1;
    o->monitor = "val_loss";
    o->prefetch = 1;
    o->checkpoint_durable = 1;
    o->steps_per_execution = 1;
}

/* ---- memory ---- */

/* eng_train's rule: data parallelism needs a range-wise update (no clipping,
 * not mixed_fp16), several threads and two rows per thread. */
static int wants_data_parallel(const eng_model *m, const eng_train_opts *o) {
    int fused_update = m->opt.clipnorm <= 0.0f && o->precision != ENG_PREC_FP16;
    return fused_update && o->threads > 1 && o->batch_size >= 2 * o->threads;
}

/* One batcher slot (batch.c): x in f32 or bf16, and labels or targets. */
static size_t batch_slot_bytes(const eng_model *m, int precision, size_t rows) {
    size_t xe = eng_model_bf16_input_at(m, precision) ? 2 : 4;
    size_t ye = m->loss == ENG_LOSS_SCCE || m->out_dim < 1 ? 4 : (size_t)m->out_dim * 4;
    return eng_size_add(eng_alloc_size(eng_size_mul(eng_size_mul(rows, m->in_size), xe)),
                        eng_alloc_size(eng_size_mul(rows, ye)));
}

static void estimate(const eng_model *m, const eng_train_opts *o, int data_parallel, eng_train_mem *e) {
    int bs = o->batch_size > 0 ? o->batch_size : 1, prec = o->precision;
    memset(e, 0, sizeof *e);
    e->data_parallel = data_parallel;
    e->weights = eng_model_block_bytes(m);
    e->activations = eng_model_buffer_bytes(m, bs, prec, 0);
    e->replicas = data_parallel ? eng_replicas_bytes(m, o->threads, bs, prec) : 0;
    e->best = o->restore_best ? eng_alloc_size(eng_size_mul(m->nparams + m->nstats + 1, sizeof(float))) : 0;
    size_t slot = batch_slot_bytes(m, prec, (size_t)bs);
    size_t train_batches = eng_size_mul(slot, o->prefetch && !data_parallel ? 2 : 1), val_batches = slot;
    e->batches = eng_size_add(train_batches, val_batches);
    e->total = eng_size_add(eng_size_add(eng_size_add(e->weights, e->activations), eng_size_add(e->best, e->replicas)),
                            e->batches);
}

void eng_train_mem_estimate(const eng_model *m, const eng_train_opts *o, eng_train_mem *out) {
    int dp = wants_data_parallel(m, o);
    estimate(m, o, dp, out);
    if (dp && o->max_bytes && out->total > o->max_bytes) /* one model on intra-op threads is smaller */
        estimate(m, o, 0, out);
}

int eng_train_check_budget(const eng_model *m, const eng_train_opts *o, eng_train_mem *out, hpo_error *err) {
    eng_train_mem e;
    eng_train_mem_estimate(m, o, &e);
    if (out) *out = e;
    if (!o->max_bytes || e.total <= o->max_bytes) return 0;
    char need[32], budget[32], w[32], a[32], field[128] = "model.layers", lname[256] = "";
    size_t lbytes = 0;
    const eng_layer *big = eng_model_largest_layer(m, o->batch_size > 0 ? o->batch_size : 1, o->precision, &lbytes);
    if (big) {
        eng_layer_size_field(big, field, sizeof field);
        snprintf(lname, sizeof lname, "; the largest layer is %s%s (%zu parameters)",
                 strncmp(big->path, "model.", 6) ? "model." : "", big->path, big->nw + big->nb);
    }
    eng_format_bytes(e.total, need, sizeof need);
    eng_format_bytes(o->max_bytes, budget, sizeof budget);
    eng_format_bytes(eng_size_add(e.weights, e.best), w, sizeof w);
    eng_format_bytes(e.total - eng_size_add(e.weights, e.best), a, sizeof a);
    return hpo_fail(err, HPO_ETOOLARGE, field,
                    "model needs %s, budget %s: weights, gradients, optimiser state and best-epoch copy %s; activations and "
                    "batches of %d %s%s",
                    need, budget, w, o->batch_size, a, lname);
}

/* eng_evaluate, on the replicas' threads when reps is not NULL. */
static int evaluate(eng_model *m, eng_replicas *reps, int threads, const eng_split *s, int batch_size,
                    eng_metrics *out, hpo_error *err) {
    eng_batcher *b = NULL;
    eng_metric_sums sums;
    int rc;
    memset(&sums, 0, sizeof sums);
    if (batch_size < 1) batch_size = 256;
    if (m->cap < 1 && (rc = eng_model_reserve(m, batch_size, m->precision)))
        return rc == HPO_ENOMEM ? hpo_fail(err, rc, "training.batch_size", "out of memory for the activations of "
                                           "batches of %d", batch_size)
                                : rc;
    if (batch_size > m->cap) batch_size = m->cap;
    if ((rc = eng_train_check_data(m, s, err))) return rc;
    int bf16_batches = eng_model_bf16_input(m); /* as in eng_train */
    eng_batcher_opts bo = {.batch_size = (size_t)batch_size, .shuffle = 0,
                           .x_type = bf16_batches ? ENG_BATCH_BF16 : ENG_BATCH_F32};
    if ((rc = eng_batcher_new(s, &bo, &b, err))) return rc;
    if ((rc = eng_batcher_start_epoch(b, 0)) < 0) goto fail;
    for (;;) {
        eng_batch bt;
        rc = eng_batcher_next(b, &bt); /* borrowed until the next call */
        if (rc < 0) goto fail;
        if (rc == 0) break;
        if (reps && (int)bt.n >= threads) {
            if ((rc = eng_replicas_evaluate(reps, &bt, bf16_batches, &sums))) goto fail;
            continue;
        }
        const float *logits;
        rc = bf16_batches ? eng_model_forward_bf16(m, bt.x, (int)bt.n, 0, &logits)
                          : eng_model_forward_from(m, bt.x, (int)bt.n, 0, &logits);
        if (rc) goto fail;
        eng_loss_compute(m->loss, m->final_act, logits, bt.y_class, bt.y_target, (int)bt.n, m->out_dim, 1.0f, NULL,
                         &sums);
    }
    eng_metrics_from_sums(&sums, out);
    rc = 0;
fail:
    eng_batcher_free(b);
    return rc;
}

int eng_evaluate(eng_model *m, const eng_split *s, int batch_size, eng_metrics *out, hpo_error *err) {
    return evaluate(m, NULL, 1, s, batch_size, out, err);
}

int eng_train(eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
              eng_train_result *res, hpo_error *err) {
    if (o->cuda) return eng_train_cuda(m, train, val, o, res, err); /* train_cuda.c */
    unsigned mxcsr = eng_set_ftz_daz();
    eng_batcher *b = NULL;
    eng_replicas *reps = NULL;
    eng_train_loop L;
    int rc, bs = o->batch_size;
    memset(&L, 0, sizeof L);
    if (bs < 1 || o->epochs < 0 || o->precision < 0 || o->precision > ENG_PREC_FP16) {
        rc = hpo_fail(err, HPO_EINVAL, "training", "batch_size must be >= 1 and epochs >= 0");
        goto fail;
    }
    if (o->precision == ENG_PREC_BF16 && !m->be->gemm_bf16) {
        rc = hpo_fail(err, HPO_EUNSUPPORTED, "training.precision",
                      "mixed_bf16 is not available here: oneDNN's bf16 kernels need a CPU with AVX-512 "
                      "(use fp32 or mixed_fp16)");
        goto fail;
    }
    if ((rc = eng_train_check_data(m, train, err)) || (val && (rc = eng_train_check_data(m, val, err)))) goto fail;
    eng_train_mem mem;
    if ((rc = eng_train_check_budget(m, o, &mem, err))) goto fail;
    if (o->threads > 0) m->be->set_threads(o->threads);
    if ((rc = eng_model_reserve(m, bs, o->precision))) {
        char sz[32];
        eng_format_bytes(mem.activations, sz, sizeof sz);
        if (rc == HPO_ENOMEM)
            rc = hpo_fail(err, rc, "training.batch_size", "out of memory for the activations of batches of %d (%s)",
                          bs, sz);
        goto fail;
    }
    eng_batcher_opts bo = {.batch_size = (size_t)bs, .shuffle = 1, .seed = o->seed, .drop_last = 0,
                           .x_type = ENG_BATCH_F32, .prefetch = o->prefetch};
    int fused_update = m->opt.clipnorm <= 0.0f && o->precision != ENG_PREC_FP16;
    /* several threads: data parallelism over the batch (replicas.h); the
     * threads then keep their cores busy, and a prefetch thread would only
     * preempt one of them while the others wait at the step's barrier
     * (measured: 8% slower), so the batch is gathered in line. Under a
     * memory budget the replicas must fit it (eng_train_mem). */
    int data_parallel = mem.data_parallel;
    if (data_parallel) {
        bo.prefetch = 0;
        bo.defer_gather = 1; /* each thread gathers its share of the batch (eng_replicas_step) */
    }
    int bf16_batches = eng_model_bf16_input(m); /* model.h: gathered from uint8 straight to bf16 */
    if (bf16_batches) bo.x_type = ENG_BATCH_BF16;
    if ((rc = eng_batcher_new(train, &bo, &b, err))) goto fail;
    long spe = (long)eng_batcher_n_batches(b), total = spe * o->epochs;
    if ((rc = eng_train_loop_begin(&L, m, val, o, mem.best, err))) goto fail;
    /* per-layer updates inside backward unless a global look at the
     * gradients (clipping norm, fp16 overflow check) must come first */
    if (data_parallel && (rc = eng_replicas_new(m, o->threads, &reps))) {
        char sz[32];
        eng_format_bytes(mem.replicas, sz, sizeof sz);
        if (rc == HPO_ENOMEM)
            rc = hpo_fail(err, rc, "training", "out of memory for %d data-parallel replicas (%s)", o->threads - 1, sz);
        goto fail;
    }
    int stop = L.r.stopped_early; /* resumed after early stopping ended the run: no epoch left */
    for (int epoch = L.st.epoch; epoch < o->epochs && !stop; epoch++) {
        eng_metric_sums sums;
        memset(&sums, 0, sizeof sums);
        long skipped = 0;
        double lr = m->opt.lr, t0 = hpo_monotonic();
        if ((rc = eng_batcher_start_epoch(b, (uint64_t)epoch)) < 0) goto fail;
        for (;;) {
            eng_batch bt;
            rc = eng_batcher_next(b, &bt); /* borrowed until the next call: no copy */
            if (rc < 0) goto fail;
            if (rc == 0) break;
            const float *logits;
            int n = (int)bt.n;
            if (reps && n >= o->threads) {
                lr = eng_schedule_lr(&m->sched, m->opt.lr, L.st.step, spe, total);
                double loss;
                rc = eng_replicas_step(reps, &bt, b, bf16_batches, (float)lr, L.st.step + 1, &sums, &loss);
                if (rc) goto fail;
                if (!isfinite(loss)) {
                    eng_metrics_from_sums(&sums, &L.r.train);
                    rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss became %s at epoch %d, step %ld",
                                  isnan(loss) ? "NaN" : "Inf", epoch + 1, L.st.step);
                    goto fail;
                }
                L.st.step++;
                continue;
            }
            if (bo.defer_gather && (rc = eng_batcher_gather_rows(b, &bt, 0, bt.n))) goto fail; /* a tiny batch */
            rc = bf16_batches ? eng_model_forward_bf16(m, bt.x, n, 1, &logits)
                              : eng_model_forward_from(m, bt.x, n, 1, &logits);
            if (rc) goto fail;
            double loss = eng_loss_compute(m->loss, m->final_act, logits, bt.y_class, bt.y_target, n, m->out_dim,
                                           (float)L.st.loss_scale, m->dlogits, &sums);
            if (!isfinite(loss)) {
                eng_metrics_from_sums(&sums, &L.r.train);
                rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss became %s at epoch %d, step %ld",
                              isnan(loss) ? "NaN" : "Inf", epoch + 1, L.st.step);
                goto fail;
            }
            lr = eng_schedule_lr(&m->sched, m->opt.lr, L.st.step, spe, total);
            if (fused_update) { /* each layer updated as soon as its gradients exist */
                if ((rc = eng_model_backward_update(m, n, (float)lr, L.st.step + 1))) goto fail;
                L.st.step++;
                continue;
            }
            if ((rc = eng_model_backward(m, n))) goto fail;
            if (o->precision == ENG_PREC_FP16 || m->opt.clipnorm > 0) {
                int finite = 1;
                double norm = eng_grad_unscale_norm(m->grads, m->nparams, (float)(1.0 / L.st.loss_scale), &finite);
                if (!finite) {
                    if (o->precision != ENG_PREC_FP16) {
                        rc = hpo_fail(err, HPO_EDIVERGED, "training", "gradients became NaN/Inf at epoch %d", epoch + 1);
                        goto fail;
                    }
                    L.st.loss_scale *= 0.5;
                    L.st.good_steps = 0;
                    skipped++;
                    if (L.st.loss_scale < ENG_LOSS_SCALE_MIN) {
                        rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss scale underflow at epoch %d", epoch + 1);
                        goto fail;
                    }
                    continue;
                }
                eng_grad_clip(m->grads, m->nparams, norm, m->opt.clipnorm);
            }
            eng_optim_step(&m->opt, (float)lr, L.st.step + 1, m->params, m->grads, m->opt_state, m->nparams);
            L.st.step++;
            eng_model_params_changed(m);
            if (o->precision == ENG_PREC_FP16 && ++L.st.good_steps >= ENG_LOSS_SCALE_GROWTH) {
                if (L.st.loss_scale < ENG_LOSS_SCALE_MAX) L.st.loss_scale *= 2.0;
                L.st.good_steps = 0;
            }
        }
        eng_epoch_report rep;
        eng_train_loop_report(&L, epoch, &sums, hpo_monotonic() - t0, lr, skipped, &rep);
        if (L.use_val) {
            if ((rc = evaluate(m, reps, o->threads, val, bs, &rep.val, err))) goto fail;
            rep.has_val = 1;
        }
        if ((rc = eng_train_loop_epoch_end(&L, m, &rep, &stop, err))) goto fail;
    }
    rc = 0;
fail:
    rc = eng_train_loop_end(&L, m, rc, res);
    eng_replicas_free(reps);
    eng_batcher_free(b);
    eng_restore_mxcsr(mxcsr);
    return rc;
}
