/* train.c - the training loop, evaluation, early stopping, loss scaling
 * (see train.h). */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops.h"
#include "replicas.h"
#include "tensor.h"

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
    e->best = o->restore_best ? eng_alloc_size(eng_size_mul(m->nparams + 1, sizeof(float))) : 0;
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

static int check_data(const eng_model *m, const eng_split *s, hpo_error *err) {
    const eng_dataset *ds = s->ds;
    if (ds->sample_size != m->in_size)
        return hpo_fail(err, HPO_ESHAPE, "dataset", "samples of %s have %zu values, the model expects %zu", ds->name,
                        ds->sample_size, m->in_size);
    if (ds->y_type == ENG_DATA_Y_TARGET && ds->y_dim != (size_t)m->out_dim)
        return hpo_fail(err, HPO_ESHAPE, "dataset", "targets of %s have %zu values, the model outputs %d", ds->name,
                        ds->y_dim, m->out_dim);
    if (ds->y_type == ENG_DATA_Y_TARGET && m->loss == ENG_LOSS_SCCE)
        return hpo_fail(err, HPO_EINVAL, "model.loss", "sparse_categorical_crossentropy needs class labels; %s has targets",
                        ds->name);
    return 0;
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
    if ((rc = check_data(m, s, err))) return rc;
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

static int monitor_mode(const char *name, int mode) {
    if (mode) return mode < 0 ? -1 : 1;
    return strstr(name, "acc") ? 1 : -1;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

int eng_train(eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
              eng_train_result *res, hpo_error *err) {
    unsigned mxcsr = eng_set_ftz_daz();
    eng_batcher *b = NULL;
    eng_replicas *reps = NULL;
    float *best_params = NULL;
    char ckpt[1024] = "";
    eng_train_result r;
    eng_train_state st;
    int rc, bs = o->batch_size;
    memset(&r, 0, sizeof r);
    memset(&st, 0, sizeof st);
    if (bs < 1 || o->epochs < 0 || o->precision < 0 || o->precision > ENG_PREC_FP16) {
        rc = hpo_fail(err, HPO_EINVAL, "training", "batch_size must be >= 1 and epochs >= 0");
        goto fail;
    }
    if (o->precision == ENG_PREC_BF16 && !m->be->gemm_bf16) {
        rc = hpo_fail(err, HPO_EUNSUPPORTED, "training.precision", "mixed_bf16 is not available on this backend");
        goto fail;
    }
    if ((rc = check_data(m, train, err)) || (val && (rc = check_data(m, val, err)))) goto fail;
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
    const char *monitor = o->monitor ? o->monitor : "val_loss";
    int use_val = val && val->n > 0;
    if (!strncmp(monitor, "val_", 4) && !use_val) monitor += 4; /* no validation: monitor the training metric */
    int mode = monitor_mode(monitor, o->mode);
    eng_metrics probe = {0};
    double dummy;
    if (eng_metric_get(&probe, monitor, &dummy) < 0) {
        rc = hpo_fail(err, HPO_EINVAL, "training.early_stopping.monitor", "unknown metric \"%s\"", monitor);
        goto fail;
    }
    long spe = (long)eng_batcher_n_batches(b), total = spe * o->epochs;
    st.loss_scale = o->precision == ENG_PREC_FP16 ? 32768.0 : 1.0;
    st.best = mode < 0 ? INFINITY : -INFINITY;
    if (o->restore_best && !(best_params = eng_alloc((m->nparams + 1) * sizeof(float)))) {
        char sz[32];
        eng_format_bytes(mem.best, sz, sizeof sz);
        rc = hpo_fail(err, HPO_ENOMEM, "training.early_stopping.restore_best_weights",
                      "out of memory for a copy of the best epoch's weights (%s)", sz);
        goto fail;
    }
    if (o->checkpoint_dir) {
        mkdir(o->checkpoint_dir, 0755);
        snprintf(ckpt, sizeof ckpt, "%s/%s", o->checkpoint_dir,
                 o->checkpoint_name ? o->checkpoint_name : "checkpoint.safetensors");
        if (o->resume && file_exists(ckpt)) {
            int hb = 0;
            if ((rc = eng_checkpoint_load(m, ckpt, &st, best_params, &hb, err))) goto fail;
            if (!hb && best_params) memcpy(best_params, m->params, m->nparams * sizeof(float));
            r.start_epoch = st.epoch;
            HPO_INFO("engine: resumed %s at epoch %d (step %ld)", ckpt, st.epoch, st.step);
        }
    }
    /* per-layer updates inside backward unless a global look at the
     * gradients (clipping norm, fp16 overflow check) must come first */
    if (data_parallel && (rc = eng_replicas_new(m, o->threads, &reps))) {
        char sz[32];
        eng_format_bytes(mem.replicas, sz, sizeof sz);
        if (rc == HPO_ENOMEM)
            rc = hpo_fail(err, rc, "training", "out of memory for %d data-parallel replicas (%s)", o->threads - 1, sz);
        goto fail;
    }
    double t_all = hpo_monotonic(), sps_sum = 0;
    int stop = 0;
    r.epochs_run = st.epoch;
    for (int epoch = st.epoch; epoch < o->epochs && !stop; epoch++) {
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
                lr = eng_schedule_lr(&m->sched, m->opt.lr, st.step, spe, total);
                double loss;
                rc = eng_replicas_step(reps, &bt, b, bf16_batches, (float)lr, st.step + 1, &sums, &loss);
                if (rc) goto fail;
                if (!isfinite(loss)) {
                    eng_metrics_from_sums(&sums, &r.train);
                    rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss became %s at epoch %d, step %ld",
                                  isnan(loss) ? "NaN" : "Inf", epoch + 1, st.step);
                    goto fail;
                }
                st.step++;
                continue;
            }
            if (bo.defer_gather && (rc = eng_batcher_gather_rows(b, &bt, 0, bt.n))) goto fail; /* a tiny batch */
            rc = bf16_batches ? eng_model_forward_bf16(m, bt.x, n, 1, &logits)
                              : eng_model_forward_from(m, bt.x, n, 1, &logits);
            if (rc) goto fail;
            double loss = eng_loss_compute(m->loss, m->final_act, logits, bt.y_class, bt.y_target, n, m->out_dim,
                                           (float)st.loss_scale, m->dlogits, &sums);
            if (!isfinite(loss)) {
                eng_metrics_from_sums(&sums, &r.train);
                rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss became %s at epoch %d, step %ld",
                              isnan(loss) ? "NaN" : "Inf", epoch + 1, st.step);
                goto fail;
            }
            lr = eng_schedule_lr(&m->sched, m->opt.lr, st.step, spe, total);
            if (fused_update) { /* each layer updated as soon as its gradients exist */
                if ((rc = eng_model_backward_update(m, n, (float)lr, st.step + 1))) goto fail;
                st.step++;
                continue;
            }
            if ((rc = eng_model_backward(m, n))) goto fail;
            if (o->precision == ENG_PREC_FP16 || m->opt.clipnorm > 0) {
                int finite = 1;
                double norm = eng_grad_unscale_norm(m->grads, m->nparams, (float)(1.0 / st.loss_scale), &finite);
                if (!finite) {
                    if (o->precision != ENG_PREC_FP16) {
                        rc = hpo_fail(err, HPO_EDIVERGED, "training", "gradients became NaN/Inf at epoch %d", epoch + 1);
                        goto fail;
                    }
                    st.loss_scale *= 0.5;
                    st.good_steps = 0;
                    skipped++;
                    if (st.loss_scale < 0x1p-24) {
                        rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss scale underflow at epoch %d", epoch + 1);
                        goto fail;
                    }
                    continue;
                }
                eng_grad_clip(m->grads, m->nparams, norm, m->opt.clipnorm);
            }
            eng_optim_step(&m->opt, (float)lr, st.step + 1, m->params, m->grads, m->opt_state, m->nparams);
            st.step++;
            eng_model_params_changed(m);
            if (o->precision == ENG_PREC_FP16 && ++st.good_steps >= 2000) {
                st.loss_scale *= 2.0;
                st.good_steps = 0;
            }
        }
        double secs = hpo_monotonic() - t0;
        eng_epoch_report rep;
        memset(&rep, 0, sizeof rep);
        rep.epoch = epoch + 1;
        rep.epochs = o->epochs;
        eng_metrics_from_sums(&sums, &rep.train);
        rep.seconds = secs;
        rep.samples_per_s = secs > 0 ? (double)sums.n / secs : 0;
        rep.lr = lr;
        rep.loss_scale = st.loss_scale;
        rep.skipped_steps = skipped;
        sps_sum += rep.samples_per_s;
        if (use_val) {
            if ((rc = evaluate(m, reps, o->threads, val, bs, &rep.val, err))) goto fail;
            rep.has_val = 1;
        }
        double v = 0;
        eng_metric_get(!strncmp(monitor, "val_", 4) ? &rep.val : &rep.train, monitor, &v);
        int improved = isfinite(v) && (mode < 0 ? v < st.best - o->min_delta : v > st.best + o->min_delta);
        if (improved) {
            st.best = v;
            st.best_epoch = epoch + 1;
            st.wait = 0;
            if (best_params) memcpy(best_params, m->params, m->nparams * sizeof(float));
        } else {
            st.wait++;
        }
        rep.is_best = improved;
        st.epoch = epoch + 1;
        r.epochs_run = epoch + 1;
        r.train = rep.train;
        r.val = rep.val;
        r.has_val = rep.has_val;
        if (o->patience >= 0 && st.wait >= (o->patience > 0 ? o->patience : 1)) {
            r.stopped_early = 1;
            stop = 1;
        }
        /* The callback runs before the checkpoint is written: whatever it
         * records about epoch e (curves, reports) is durable before a resume
         * could start after e, so a crash between the two repeats epoch e
         * instead of leaving a hole. A stopped run still checkpoints, so a
         * pause resumes after this epoch. */
        rep.checkpoint = ckpt[0] ? ckpt : NULL;
        int cb = o->on_epoch ? o->on_epoch(&rep, o->user) : 0;
        if (cb < 0) { /* the callback could not record the epoch: no checkpoint of it */
            rc = hpo_fail(err, cb, "training", "epoch %d could not be recorded: %s", epoch + 1, hpo_strerror(cb));
            goto fail;
        }
        if (cb) {
            r.stopped_by_callback = 1;
            stop = 1;
        }
        if (ckpt[0]) {
            st.best_params = best_params;
            if ((rc = eng_checkpoint_save(m, &st, ckpt, o->checkpoint_durable, err))) goto fail;
        }
    }
    if (best_params && st.best_epoch > 0 && st.best_epoch != r.epochs_run) {
        memcpy(m->params, best_params, m->nparams * sizeof(float));
        eng_model_params_changed(m);
        r.restored_best = 1;
    }
    r.best_epoch = st.best_epoch;
    r.best_value = st.best;
    r.seconds = hpo_monotonic() - t_all;
    r.samples_per_s = r.epochs_run > r.start_epoch ? sps_sum / (r.epochs_run - r.start_epoch) : 0;
    rc = 0;
fail:
    if (rc == HPO_EDIVERGED || rc == 0) {
        r.best_epoch = st.best_epoch;
        r.best_value = st.best;
        if (res) *res = r; /* divergence is data: the result is filled */
    }
    eng_replicas_free(reps);
    free(best_params);
    eng_batcher_free(b);
    eng_restore_mxcsr(mxcsr);
    return rc;
}
