/* train_cuda.c - eng_train on a CUDA device, every layer kind of the
 * engine (train_cuda_layers.c runs them): fp32, with TF32 if asked,
 * mixed_bf16 and mixed_fp16 (see train.h and train_loop.h). Plain C over cuda_ops.h, the
 * same in every build: without CUDA eng_cuda_open refuses and so does
 * this.
 *
 * On the device, once per run: the model's parameter, gradient and
 * optimiser-state blocks (one allocation each, as on the host), the
 * validation rows and each layer's batch buffers; the datasets of the
 * splits (uint8 stays uint8) with their labels or targets are the GPU's
 * copy, shared by the runs on it at the same time (cuda_data.h). Per epoch: the
 * batch order (the CPU batcher's: hpo_rng_derive(seed, epoch, 0)) goes up
 * once, with one record per step of the epoch: its learning rate and
 * Adam's scalars (eng_cuda_opt_scalars_at), and what the forward pass
 * draws from the host model's generator, in the order the CPU's draws it:
 * a key per dropout layer, a shift and flip per sample per augment layer
 * (so masks, shifts, the generator's state and the checkpoint are the
 * CPU's).
 * Per step nothing crosses the bus: the step's rows and record are staged
 * on the device from a step cursor there (eng_cuda_stage_steps), rows are
 * gathered, the forward and backward passes, the loss with its metric sums
 * and the optimiser (one kernel over the whole block, clipping and the
 * 16-bit copy folded in) run, and the cursor advances. mixed_fp16's loss
 * scale stays on the device too (cuda_ops.h, eng_cuda_scaler): a step whose
 * gradients are not finite is skipped there, and the optimiser takes its
 * scalars from the epoch's records by the count of applied steps, so
 * skipped steps do not advance the schedule or Adam's step, as on the CPU;
 * the epoch end brings the scale and the counts down. Since no host value is in
 * a step, K = steps_per_execution whole steps are captured once as a CUDA
 * graph and each replay trains the next K (Keras' steps_per_execution,
 * here also what removes the launch cost of small models); the epoch's
 * remainder (fewer than K steps, the last batch when it is short) is
 * enqueued step by step through the same code.
 * At each epoch end the stream is synchronised (the metric sums come down),
 * validation runs on the device, and the parameters and optimiser state are
 * copied into the host model, where train_loop.c keeps the best weights and
 * writes the checkpoint: the same safetensors layout as a CPU run, so
 * either can resume the other.
 * Not the CPU's, by design: a NaN/Inf loss is noticed at the end of the
 * epoch (the sums), not at the step, and a non-finite gradient under
 * clipnorm (fp32, mixed_bf16) skips that step's update on the device
 * (eng_cuda_optim_step_dev), which counts it, instead of failing at once:
 * the epoch end reports HPO_EDIVERGED as the CPU does at the step (the
 * loss may stay finite while gradients overflow); mixed_fp16's scale
 * falling below its floor is reported at the epoch's end, not at the step. max_bytes (a host budget) is not applied here: the
 * device has its own (train.h, eng_train_cuda_check_budget), checked by a
 * dry run of the allocating code (dev_alloc with a plan) before the device
 * is opened; an allocation that still fails is HPO_ENOMEM naming the bytes. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_data.h"
#include "gpu.h"
#include "ops.h"
#include "train_cuda_internal.h"
#include "train_loop.h"

/* an op failed to launch: the context's reason in err */
static int op_failed(dev *d, int rc, hpo_error *err) {
    if (eng_cuda_sync(d->cu, err) == 0) hpo_fail(err, rc, "devices", "cuda:%d: a device op failed", d->dev);
    return rc;
}

/* the context's memory for cuda_data.h */
static int data_alloc(void *cu, size_t bytes, void **out, hpo_error *err) { return eng_cuda_alloc(cu, bytes, out, err); }
static int data_upload(void *cu, void *dst, const void *src, size_t bytes, hpo_error *err) {
    return eng_cuda_upload(cu, dst, src, bytes, err);
}
static void data_free(void *cu, void *p) { eng_cuda_free(cu, p); }

static eng_cuda_data_ops data_ops(dev *d) {
    eng_cuda_data_ops ops = {data_alloc, data_upload, data_free, d->cu};
    return ops;
}

static void dev_free(dev *d) {
    if (!d->cu) return;
    eng_dev_layers_free(d);
    eng_cuda_data_ops ops = data_ops(d);
    for (int k = 0; k < 2; k++)
        if (d->shared[k]) eng_cuda_data_put(&ops, d->dev, d->shared[k]);
    void *bufs[] = {d->p, d->g, d->s, d->st, d->pb, d->ph, d->scaler, d->order, d->vidx, d->xin, d->dlogits, d->xin16, d->lab, d->tgt,
                    d->sums, d->vsums, d->norm, d->recs, d->stage_rec, d->stage_idx, d->cursor};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) eng_cuda_free(d->cu, bufs[i]);
    eng_cuda_graph_free(d->graph);
    free(d->hrecs);
    if (d->owns_cu) eng_cuda_close(d->cu);
}

/* a dataset's rows and labels or targets: the GPU's copy (shared with the
 * runs beside this one on it), or in a dry run their sizes (counted for
 * each run: a budget that holds when the run is alone on the GPU) */
static int alloc_data(dev *d, const eng_dataset *ds, int k, hpo_error *err) {
    if (d->plan) {
        int rc = eng_dev_alloc(d, eng_cuda_data_x_bytes(ds), &d->x_all[k], "dataset", MEM_DATA, err);
        if (!rc) rc = eng_dev_alloc(d, eng_cuda_data_y_bytes(ds), &d->y_all[k], "labels or targets", MEM_DATA, err);
        return rc;
    }
    eng_cuda_data_ops ops = data_ops(d);
    eng_cuda_data c;
    int rc = eng_cuda_data_get(&ops, d->dev, ds, &c, err);
    if (rc == HPO_ENOMEM)
        return hpo_fail(err, rc, "devices", "cuda:%d: out of device memory for the dataset (%zu bytes)", d->dev,
                        eng_size_add(eng_cuda_data_x_bytes(ds), eng_cuda_data_y_bytes(ds)));
    if (rc) return rc;
    d->shared[k] = ds;
    d->x_all[k] = c.x;
    d->y_all[k] = c.y;
    d->t_all[k] = c.t;
    return 0;
}

/* Every device allocation of a run, in one place: with d->plan set nothing
 * is allocated and the sizes are added up (eng_train_cuda_mem_estimate). */
static int dev_alloc(dev *d, const eng_split *train, const eng_split *val, hpo_error *err) {
    const eng_model *m = d->m;
    int rc, K = m->out_dim, A = MEM_ACTIVATIONS, W = MEM_WEIGHTS;
    size_t cap = (size_t)d->bs, pbytes = (m->nparams ? m->nparams : 1) * sizeof(float);
    if ((rc = eng_dev_alloc(d, pbytes, &d->p, "parameters", W, err)) || (rc = eng_dev_alloc(d, pbytes, &d->g, "gradients", W, err)) ||
        (rc = eng_dev_alloc(d, (m->nstate ? m->nstate : 1) * sizeof(float), &d->s, "optimiser state", W, err)))
        return rc;
    if (d->prec != ENG_PREC_FP32 && (rc = eng_dev_alloc(d, pbytes / 2 + 2, &d->pb, "16-bit parameters", W, err))) return rc;
    if (d->prec == ENG_PREC_FP16 &&
        ((rc = eng_dev_alloc(d, pbytes, &d->ph, "fp16-rounded parameters", W, err)) ||
         (rc = eng_dev_alloc(d, sizeof(eng_cuda_scaler), &d->scaler, "loss scale", W, err))))
        return rc;
    if (m->nstats && (rc = eng_dev_alloc(d, m->nstats * sizeof(float), &d->st, "batchnorm statistics", W, err))) return rc;
    if ((rc = eng_dev_layers_alloc(d, err)) || (rc = alloc_data(d, train->ds, 0, err))) return rc;
    if (val && val->n && val->ds != train->ds && (rc = alloc_data(d, val->ds, 1, err))) return rc;
    if ((rc = eng_dev_alloc(d, train->n * sizeof(uint32_t), &d->order, "batch order", A, err))) return rc;
    if (val && val->n && (rc = eng_dev_alloc(d, val->n * sizeof(uint32_t), &d->vidx, "validation rows", A, err))) return rc;
    if ((rc = eng_dev_alloc(d, cap * m->in_size * sizeof(float), &d->xin, "batch", A, err)) ||
        (d->bf16_input && (rc = eng_dev_alloc(d, cap * m->in_size * 2, &d->xin16, "bf16 batch", A, err))) ||
        (rc = eng_dev_alloc(d, cap * sizeof(int32_t), &d->lab, "batch labels", A, err)) ||
        (rc = eng_dev_alloc(d, cap * (size_t)K * sizeof(float), &d->tgt, "batch targets", A, err)) ||
        (rc = eng_dev_alloc(d, cap * (size_t)K * sizeof(float), &d->dlogits, "loss gradient", A, err)) ||
        (rc = eng_dev_alloc(d, ENG_CUDA_SUMS * sizeof(double), &d->sums, "metric sums", A, err)) ||
        (rc = eng_dev_alloc(d, ENG_CUDA_SUMS * sizeof(double), &d->vsums, "metric sums", A, err)) ||
        (rc = eng_dev_alloc(d, 3 * sizeof(double), &d->norm, "gradient norm", A, err)))
        return rc;
    size_t rb = d->rec_words * sizeof(uint64_t);
    if ((rc = eng_dev_alloc(d, eng_size_mul(d->spe, rb), &d->recs, "step records", A, err)) ||
        (rc = eng_dev_alloc(d, (size_t)d->K * rb, &d->stage_rec, "staged step records", A, err)) ||
        (rc = eng_dev_alloc(d, (size_t)d->K * cap * sizeof(uint32_t), &d->stage_idx, "staged batch rows", A, err)) ||
        (rc = eng_dev_alloc(d, sizeof(int32_t), &d->cursor, "step cursor", A, err)))
        return rc;
    return 0;
}

/* d's run settings and its layers' buffer table (host); a replica stages
 * one step at a time (the run's graph holds K of every replica's steps:
 * train_epoch_replicas) */
static int dev_init(dev *d, eng_model *m, const eng_split *train, const eng_train_opts *o, int device) {
    d->m = m;
    d->dev = device;
    d->prec = o->precision;
    d->bs = o->batch_size;
    d->bf16_input = eng_model_bf16_input_at(m, d->prec);
    d->spe = (train->n + (size_t)d->bs - 1) / (size_t)d->bs;
    d->K = o->steps_per_execution > 1 && o->cuda_replicas <= 1 ? o->steps_per_execution : 1;
    if ((size_t)d->K > d->spe) d->K = d->spe ? (int)d->spe : 1;
    d->rec_words = REC_SC_WORDS;
    return eng_dev_layers_init(d);
}

/* d on GPU device, in a context of its own, or in shared (an earlier
 * replica's on the same GPU) */
static int dev_open(dev *d, eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                    int device, eng_cuda *shared, hpo_error *err) {
    int rc;
    if (shared) {
        d->cu = shared;
    } else {
        if ((rc = eng_cuda_open(device, o->allow_tf32, &d->cu, err))) return rc;
        d->owns_cu = 1;
        eng_cuda_set_fp16(d->cu, o->precision == ENG_PREC_FP16);
    }
    if ((rc = dev_init(d, m, train, o, device)) ||
        !(d->hrecs = calloc(d->spe ? d->spe * d->rec_words : 1, sizeof *d->hrecs)))
        return hpo_fail(err, HPO_ENOMEM, "training", "out of memory");
    if ((rc = dev_alloc(d, train, val, err))) return rc;
    eng_cuda_zero(d->cu, d->norm, 3 * sizeof(double)); /* a failure is the context's, reported by the next wait */
    if (val && val->n && (rc = eng_cuda_upload(d->cu, d->vidx, val->idx, val->n * sizeof(uint32_t), err))) return rc;
    return eng_cuda_sync(d->cu, err);
}

/* ---- the device memory budget (train.h) ---- */

void eng_train_cuda_mem_estimate(const eng_model *m, const eng_split *train, const eng_split *val,
                                 const eng_train_opts *o, eng_cuda_mem *out) {
    dev d;
    memset(&d, 0, sizeof d);
    memset(out, 0, sizeof *out);
    d.plan = out;
    out->context = ENG_CUDA_CONTEXT_BYTES;
    hpo_error err;
    if (dev_init(&d, (eng_model *)m, train, o, o->cuda_device) ||
        dev_alloc(&d, train, val, &err)) /* a dry run cannot fail but for the host table */
        out->activations = SIZE_MAX;
    eng_dev_layers_free(&d); /* the tables: nothing was allocated on a device */
    out->total = eng_size_add(eng_size_add(out->context, out->weights), eng_size_add(out->activations, out->data));
}

static _Atomic int slots_on[64]; /* eng_train_cuda_set_slots; 0 reads as 1 */

void eng_train_cuda_set_slots(int device, int slots) {
    if (device >= 0 && device < 64) atomic_store(&slots_on[device], slots > 0 ? slots : 1);
}

size_t eng_cuda_slot_share(size_t device_bytes, int slots) {
    return (size_t)((double)device_bytes * 0.9 / (slots > 0 ? slots : 1));
}

size_t eng_train_cuda_budget(const eng_train_opts *o) {
    if (o->cuda_max_bytes) return o->cuda_max_bytes;
    eng_gpu_info gi;
    hpo_error err;
    if (eng_gpu_info_get(o->cuda_device, &gi, &err)) return 0;
    int slots = o->cuda_device >= 0 && o->cuda_device < 64 ? atomic_load(&slots_on[o->cuda_device]) : 1;
    return eng_cuda_slot_share(gi.total_bytes, slots);
}

int eng_train_cuda_check_budget(const eng_model *m, const eng_split *train, const eng_split *val,
                                const eng_train_opts *o, eng_cuda_mem *out, hpo_error *err) {
    eng_cuda_mem e;
    eng_train_cuda_mem_estimate(m, train, val, o, &e);
    if (out) *out = e;
    size_t budget = eng_train_cuda_budget(o);
    if (!budget || e.total <= budget) return 0;
    char need[32], have[32], w[32], a[32], dt[32], cx[32], field[128] = "dataset";
    size_t lbytes = 0;
    const eng_layer *big = eng_model_largest_layer(m, o->batch_size > 0 ? o->batch_size : 1, o->precision, &lbytes);
    if (big && eng_size_add(e.weights, e.activations) >= e.data) eng_layer_size_field(big, field, sizeof field);
    eng_format_bytes(e.total, need, sizeof need);
    eng_format_bytes(budget, have, sizeof have);
    eng_format_bytes(e.weights, w, sizeof w);
    eng_format_bytes(e.activations, a, sizeof a);
    eng_format_bytes(e.data, dt, sizeof dt);
    eng_format_bytes(e.context, cx, sizeof cx);
    return hpo_fail(err, HPO_ETOOLARGE, field,
                    "model needs %s of device memory, the %s of cuda:%d is %s: weights, gradients and optimiser state "
                    "%s; batch buffers of %d %s; datasets %s; the device context's workspace %s",
                    need, o->cuda_max_bytes ? "budget" : "slot's share", o->cuda_device, have, w, o->batch_size, a, dt,
                    cx);
}

/* the host model's parameters and optimiser state to the device (start, resume) */
static int params_up(dev *d, hpo_error *err) {
    const eng_model *m = d->m;
    int rc = eng_cuda_upload(d->cu, d->p, m->params, m->nparams * sizeof(float), err);
    if (!rc && m->nstate) rc = eng_cuda_upload(d->cu, d->s, m->opt_state, m->nstate * sizeof(float), err);
    if (!rc && m->nstats) rc = eng_cuda_upload(d->cu, d->st, m->stats, m->nstats * sizeof(float), err);
    if (rc) return rc;
    if (d->pb && (rc = eng_cuda_to_h16(d->cu, d->p, d->pb, m->nparams))) return op_failed(d, rc, err);
    if (d->ph && (rc = eng_cuda_round_fp16(d->cu, d->p, d->ph, m->nparams))) return op_failed(d, rc, err);
    return 0;
}

/* and back into the host model (epoch end: best weights, checkpoint) */
static int params_down(dev *d, hpo_error *err) {
    eng_model *m = d->m;
    int rc = eng_cuda_download(d->cu, m->params, d->p, m->nparams * sizeof(float), err);
    if (!rc && m->nstate) rc = eng_cuda_download(d->cu, m->opt_state, d->s, m->nstate * sizeof(float), err);
    if (!rc && m->nstats) rc = eng_cuda_download(d->cu, m->stats, d->st, m->nstats * sizeof(float), err);
    eng_model_params_changed(m);
    return rc;
}

/* rows idx[0..n) of dataset k into the batch buffers */
static int gather(dev *d, const eng_dataset *ds, int k, const uint32_t *idx, int n) {
    int rc = eng_cuda_gather_x(d->cu, d->x_all[k], ds->x_type == ENG_DATA_U8, ds->sample_size, ds->x_scale, idx, n,
                               d->bf16_input ? NULL : d->xin, d->bf16_input ? d->xin16 : NULL);
    if (!rc && d->prec == ENG_PREC_FP16) rc = eng_cuda_round_fp16(d->cu, d->xin, d->xin, (size_t)n * ds->sample_size);
    if (!rc && d->y_all[k]) rc = eng_cuda_gather_labels(d->cu, d->y_all[k], idx, n, d->lab);
    if (!rc && d->t_all[k]) rc = eng_cuda_gather_targets(d->cu, d->t_all[k], (int)ds->y_dim, idx, n, d->tgt);
    return rc;
}

/* one optimiser step over the whole block with the step's scalars sc
 * (dev), clipping and the 16-bit copy folded in; mixed_fp16: the gradients
 * rounded and unscaled, the step skipped when they are not finite, the
 * scalars those of the next applied step (the epoch's records, by the
 * scaler's count), the loss scale's bookkeeping after it */
static int update(dev *d, const eng_cuda_opt_scalars *sc) {
    eng_model *m = d->m;
    int rc = 0, fp16 = d->prec == ENG_PREC_FP16;
    eng_cuda_step_args a;
    memset(&a, 0, sizeof a);
    a.sc = sc;
    a.p16 = d->pb;
    a.ph = d->ph;
    if (fp16) {
        a.sc = (const eng_cuda_opt_scalars *)(const void *)d->recs;
        a.sc_index = &d->scaler->applied;
        a.sc_stride = d->rec_words * sizeof(uint64_t);
        rc = eng_cuda_grad_unscale_norm(d->cu, d->g, m->nparams, d->scaler, d->norm);
        a.norm = d->norm;
    } else if (m->opt.clipnorm > 0) {
        rc = eng_cuda_grad_norm(d->cu, d->g, m->nparams, 1.0f, d->norm);
        a.norm = d->norm;
        a.skipped = d->norm + 2;
    }
    if (!rc) rc = eng_cuda_optim_step_dev(d->cu, &m->opt, &a, d->p, d->g, d->s, m->nparams);
    if (!rc && fp16)
        rc = eng_cuda_scaler_update(d->cu, d->norm, d->scaler, ENG_LOSS_SCALE_GROWTH, (float)ENG_LOSS_SCALE_MAX);
    return rc;
}

/* the metric sums of split s (eval mode) */
static int evaluate(dev *d, const eng_split *s, int k, eng_metrics *out, hpo_error *err) {
    eng_metric_sums sums;
    memset(&sums, 0, sizeof sums);
    int rc = eng_cuda_zero(d->cu, d->vsums, ENG_CUDA_SUMS * sizeof(double));
    for (size_t first = 0; first < s->n && !rc; first += (size_t)d->bs) {
        int n = s->n - first < (size_t)d->bs ? (int)(s->n - first) : d->bs;
        const float *logits;
        if ((rc = gather(d, s->ds, k, d->vidx + first, n)) ||
            (rc = eng_dev_forward(d, d->bf16_input ? NULL : d->xin, n, NULL, &logits)))
            break;
        rc = eng_cuda_loss(d->cu, d->m->loss, d->m->final_act, logits, d->y_all[k] ? d->lab : NULL,
                           d->y_all[k] ? NULL : d->tgt, n, d->m->out_dim, 1.0f, NULL, d->vsums);
    }
    if (rc) return op_failed(d, rc, err);
    if ((rc = eng_cuda_sums_add(d->cu, d->vsums, s->n, d->m->out_dim, &sums, err))) return rc;
    eng_metrics_from_sums(&sums, out);
    return 0;
}

/* a training step's loss, its metric sums and the loss gradient of B rows,
 * scaled by share (a replica's part of the batch; 1 alone) and, under
 * mixed_fp16, by the device's loss scale, then rounded to fp16 values */
static int loss_step(dev *d, const float *logits, int B, float share) {
    const eng_model *m = d->m;
    const int32_t *lab = d->y_all[0] ? d->lab : NULL;
    const float *tgt = d->y_all[0] ? NULL : d->tgt;
    if (d->prec != ENG_PREC_FP16)
        return eng_cuda_loss(d->cu, m->loss, m->final_act, logits, lab, tgt, B, m->out_dim, share, d->dlogits, d->sums);
    int rc = eng_cuda_loss_scaled(d->cu, m->loss, m->final_act, logits, lab, tgt, B, m->out_dim, share, d->scaler,
                                  d->dlogits, d->sums);
    return rc ? rc : eng_cuda_round_fp16(d->cu, d->dlogits, d->dlogits, (size_t)B * (size_t)m->out_dim);
}

/* the next `steps` training steps from the cursor, each of B rows (the
 * epoch's last may have fewer: the stage copies only the rows there are) */
static int enqueue_steps(dev *d, const eng_split *train, int steps, int B) {
    size_t rb = d->rec_words * sizeof(uint64_t);
    int rc = eng_cuda_stage_steps(d->cu, d->order, train->n, d->bs, d->recs, rb, d->cursor, steps, d->stage_idx,
                                  d->stage_rec);
    for (int s = 0; s < steps && !rc; s++) {
        const uint64_t *rec = d->stage_rec + (size_t)s * d->rec_words;
        const float *logits;
        if ((rc = gather(d, train->ds, 0, d->stage_idx + (size_t)s * (size_t)d->bs, B)) ||
            (rc = eng_dev_forward(d, d->bf16_input ? NULL : d->xin, B, rec, &logits)) ||
            (rc = loss_step(d, logits, B, 1.0f)) || (rc = eng_dev_backward(d, B, rec)))
            break;
        rc = update(d, (const eng_cuda_opt_scalars *)(const void *)rec);
    }
    if (!rc) rc = eng_cuda_cursor_advance(d->cu, d->cursor, steps);
    return rc;
}

/* rows [lo, hi) of a step of n rows are replica k's of R (replicas.c's split) */
static void share_rows(int n, int k, int R, int *lo, int *hi) {
    *lo = (int)((long)n * k / R);
    *hi = (int)((long)n * (k + 1) / R);
}

/* the records of the epoch's steps from L->st.step on, for each of the R
 * replicas ds (R = 1: the run alone), drawing from the generators in the
 * order the CPU's forward passes do: per step, layer by layer, a key per
 * dropout layer (eng_dropout_forward) and per sample of the step's rows a
 * flip, then a shift in y and x, per augment layer (eng_augment_forward);
 * with replicas a step of at least R rows has every replica draw from the
 * model's generator as for the whole batch and keep its rows' part
 * (replicas.c: the same masks as one replica), and a smaller one runs on
 * the first replica alone. *lr: the last step's rate */
static void epoch_records(dev *ds, int R, const eng_split *train, eng_train_loop *L, long total, double *lr) {
    eng_model *m = ds[0].m;
    for (size_t j = 0; j < ds[0].spe; j++) {
        long step = L->st.step + (long)j;
        eng_cuda_opt_scalars sc;
        memset(&sc, 0, sizeof sc);
        *lr = eng_schedule_lr(&m->sched, m->opt.lr, step, (long)ds[0].spe, total);
        eng_cuda_opt_scalars_at(&m->opt, (float)*lr, step + 1, &sc);
        size_t bs = (size_t)ds[0].bs, n = train->n - j * bs < bs ? train->n - j * bs : bs;
        int active = (int)n >= R ? R : 1;
        hpo_rng start = m->rng; /* every replica draws from here as the CPU's shares do (replicas.c) */
        for (int k = 0; k < R; k++) {
            dev *d = &ds[k];
            uint64_t *rec = d->hrecs + j * d->rec_words;
            memset(rec, 0, (k < active ? REC_SC_WORDS : d->rec_words) * sizeof *rec);
            memcpy(rec, &sc, sizeof sc);
            int lo, hi;
            share_rows((int)n, k, active, &lo, &hi);
            hpo_rng rk = start;
            if (k < active) eng_dev_layers_draw(d, k ? &rk : &m->rng, rec, (size_t)lo, (size_t)(hi - lo), n);
        }
    }
}

/* mixed_fp16: the loss scale up at an epoch's start, and down at its end
 * with the steps applied (L's step advances by those only) and skipped */
static int scaler_up(dev *d, const eng_train_loop *L, hpo_error *err) {
    eng_cuda_scaler s = {(float)L->st.loss_scale, (int32_t)L->st.good_steps, 0, 0, 0};
    return eng_cuda_upload(d->cu, d->scaler, &s, sizeof s, err);
}

static int scaler_down(dev *d, eng_train_loop *L, long total, double *lr, long *skipped, hpo_error *err) {
    eng_cuda_scaler s;
    int rc = eng_cuda_download(d->cu, &s, d->scaler, sizeof s, err);
    if (rc) return rc;
    /* train.c reports the rate of its last batch, at the applied steps before it */
    *lr = eng_schedule_lr(&d->m->sched, d->m->opt.lr, L->st.step + s.applied - s.last_applied, (long)d->spe, total);
    L->st.step += s.applied;
    L->st.loss_scale = s.scale;
    L->st.good_steps = s.good;
    *skipped = s.skipped;
    return 0;
}

/* fp32 and mixed_bf16 under clipnorm: the steps skipped so far for
 * non-finite gradients (the run fails at the first epoch that has one) */
static int nonfinite_down(dev *d, long *skipped, hpo_error *err) {
    if (d->m->opt.clipnorm <= 0) return 0;
    double n[3];
    int rc = eng_cuda_download(d->cu, n, d->norm, sizeof n, err);
    if (!rc) *skipped = (long)n[2];
    return rc;
}

/* the epoch's batch order: eng_batcher_start_epoch's */
static void epoch_order(const eng_train_opts *o, const eng_split *train, int epoch, uint32_t *order) {
    memcpy(order, train->idx, train->n * sizeof *order);
    hpo_rng r;
    hpo_rng_derive(&r, o->seed, (uint64_t)epoch, 0);
    hpo_rng_shuffle_u32(&r, order, (uint32_t)train->n);
}

/* the order and records up to d, its sums and step cursor zeroed */
static int epoch_up(dev *d, const eng_split *train, const uint32_t *order, hpo_error *err) {
    int rc = eng_cuda_upload(d->cu, d->order, order, train->n * sizeof *order, err);
    if (!rc) rc = eng_cuda_upload(d->cu, d->recs, d->hrecs, d->spe * d->rec_words * sizeof *d->hrecs, err);
    if (rc) return rc;
    if ((rc = eng_cuda_zero(d->cu, d->sums, ENG_CUDA_SUMS * sizeof(double))) ||
        (rc = eng_cuda_zero(d->cu, d->cursor, sizeof(int32_t))))
        return op_failed(d, rc, err);
    return 0;
}

/* one epoch's steps: K at a time by the captured graph, the rest one by
 * one; *sums gets its metric sums, *skipped mixed_fp16's skipped steps */
static int train_epoch(dev *d, const eng_split *train, eng_train_loop *L, int epoch, long total,
                       uint32_t *order, eng_metric_sums *sums, double *lr, long *skipped, hpo_error *err) {
    eng_model *m = d->m;
    epoch_order(L->o, train, epoch, order);
    epoch_records(d, 1, train, L, total, lr);
    int rc = epoch_up(d, train, order, err);
    if (!rc && d->scaler) rc = scaler_up(d, L, err);
    if (rc) return rc;
    long steps = 0;
    size_t full = train->n / (size_t)d->bs, j = 0;
    for (; j + (size_t)d->K <= full; j += (size_t)d->K) {
        if (!d->graph) {
            if ((rc = eng_cuda_capture_begin(d->cu, err))) return rc;
            rc = enqueue_steps(d, train, d->K, d->bs);
            int rc2 = eng_cuda_capture_end(d->cu, &d->graph, err);
            if (rc) return op_failed(d, rc, err);
            if (rc2) return rc2;
        }
        if ((rc = eng_cuda_graph_launch(d->cu, d->graph))) return op_failed(d, rc, err);
        steps += d->K;
    }
    for (; j < d->spe; j++) {
        size_t first = j * (size_t)d->bs;
        int n = train->n - first < (size_t)d->bs ? (int)(train->n - first) : d->bs;
        if ((rc = enqueue_steps(d, train, 1, n))) return op_failed(d, rc, err);
        steps++;
    }
    *skipped = 0;
    if (d->scaler) rc = scaler_down(d, L, total, lr, skipped, err);
    else {
        L->st.step += steps;
        rc = nonfinite_down(d, skipped, err);
    }
    return rc ? rc : eng_cuda_sums_add(d->cu, d->sums, train->n, m->out_dim, sums, err);
}

/* ---- data-parallel replicas (eng_train_opts.cuda_replicas) ---- */

/* the replicas of a run (R = 1: the run alone, in d[0]); comm: NCCL's group
 * when each is on its own GPU, NULL when all share one context; K, graph:
 * with one shared context, K whole steps of every replica captured once
 * (steps_per_execution) */
typedef struct run {
    dev d[ENG_CUDA_MAX_REPLICAS];
    int R, K;
    eng_cuda_comm *comm;
    eng_cuda_graph *graph;
} run;

/* a replica's op failed: the reason of the first context that has one */
static int run_failed(run *r, int rc, hpo_error *err) {
    /* first the all-reduces: a GPU whose peer failed before joining one
     * would wait for it forever, and so would the wait below */
    eng_cuda_comm_abort(r->comm);
    r->comm = NULL;
    int found = 0; /* every context waited for, not only up to the failed one: run_free frees them all */
    for (int k = 0; k < r->R; k++)
        if (r->d[k].owns_cu && eng_cuda_sync(r->d[k].cu, found ? NULL : err)) found = 1;
    if (!found) hpo_fail(err, rc, "devices", "cuda:%d: a device op failed", r->d[0].dev);
    return rc;
}

/* every replica's gradient block becomes their sum: NCCL across GPUs, or on
 * one GPU replicas.c's order (g0 + g2 + .. + g(R-1), then + g1) and copies */
static int sum_gradients(run *r) {
    dev *ds = r->d;
    size_t n = ds[0].m->nparams;
    if (r->comm) {
        eng_cuda *cus[ENG_CUDA_MAX_REPLICAS];
        float *gs[ENG_CUDA_MAX_REPLICAS];
        for (int k = 0; k < r->R; k++) cus[k] = ds[k].cu, gs[k] = ds[k].g;
        return eng_cuda_allreduce_sum(r->comm, cus, gs, n);
    }
    eng_cuda *cu = ds[0].cu;
    int rc = 0;
    for (int k = 2; k < r->R && !rc; k++) rc = eng_cuda_add(cu, ds[0].g, ds[k].g, ds[0].g, n);
    if (!rc) rc = eng_cuda_add(cu, ds[0].g, ds[1].g, ds[0].g, n);
    for (int k = 1; k < r->R && !rc; k++) rc = eng_cuda_copy(cu, ds[k].g, ds[0].g, n * sizeof(float));
    return rc;
}

/* one training step of n rows on the replicas: each stages the step, the
 * active ones (all, or the first alone for fewer rows than replicas) run
 * their share with the loss scaled by it (the shares' gradients add up to
 * the batch's mean loss gradient; an idle replica adds zeros), the
 * gradients are summed into every replica, and each takes the same update */
static int replicas_step(run *r, const eng_split *train, int n) {
    dev *ds = r->d;
    const eng_model *m = ds[0].m;
    int R = r->R, active = n >= R ? R : 1, rc = 0;
    size_t rb = ds[0].rec_words * sizeof(uint64_t);
    for (int k = 0; k < R && !rc; k++)
        rc = eng_cuda_stage_steps(ds[k].cu, ds[k].order, train->n, ds[k].bs, ds[k].recs, rb, ds[k].cursor, 1,
                                  ds[k].stage_idx, ds[k].stage_rec);
    for (int k = 0; k < R && !rc; k++) {
        dev *d = &ds[k];
        if (k >= active) {
            rc = eng_cuda_zero(d->cu, d->g, m->nparams * sizeof(float));
            continue;
        }
        int lo, hi;
        share_rows(n, k, active, &lo, &hi);
        const float *logits;
        if ((rc = gather(d, train->ds, 0, d->stage_idx + lo, hi - lo)) ||
            (rc = eng_dev_forward(d, d->bf16_input ? NULL : d->xin, hi - lo, d->stage_rec, &logits)) ||
            (rc = loss_step(d, logits, hi - lo, (float)(hi - lo) / (float)n)))
            break;
        rc = eng_dev_backward(d, hi - lo, d->stage_rec);
    }
    if (!rc) rc = sum_gradients(r);
    for (int k = 0; k < R && !rc; k++) {
        rc = update(&ds[k], (const eng_cuda_opt_scalars *)(const void *)ds[k].stage_rec);
        if (!rc) rc = eng_cuda_cursor_advance(ds[k].cu, ds[k].cursor, 1);
    }
    return rc;
}

/* one epoch on the replicas: with one shared context (every replica on one
 * GPU), K whole steps of all of them per replay of the run's graph, the
 * rest one by one; across GPUs (NCCL) step by step. *sums gets their
 * metric sums, *skipped mixed_fp16's skipped steps. Under mixed_fp16 every
 * replica keeps its own loss scale: they see the same summed gradients, so
 * they skip the same steps and their scales stay equal (the first one's
 * comes down). */
static int train_epoch_replicas(run *r, const eng_split *train, eng_train_loop *L, int epoch, long total,
                                uint32_t *order, eng_metric_sums *sums, double *lr, long *skipped, hpo_error *err) {
    dev *ds = r->d;
    epoch_order(L->o, train, epoch, order);
    epoch_records(ds, r->R, train, L, total, lr);
    int rc = 0;
    for (int k = 0; k < r->R && !rc; k++) {
        rc = epoch_up(&ds[k], train, order, err);
        if (!rc && ds[k].scaler) rc = scaler_up(&ds[k], L, err);
    }
    if (rc) return rc;
    size_t j = 0, full = train->n / (size_t)ds[0].bs;
    for (; !r->comm && j + (size_t)r->K <= full; j += (size_t)r->K) { /* one context: graphs */
        if (!r->graph) {
            if ((rc = eng_cuda_capture_begin(ds[0].cu, err))) return rc;
            for (int s = 0; s < r->K && !rc; s++) rc = replicas_step(r, train, ds[0].bs);
            int rc2 = eng_cuda_capture_end(ds[0].cu, &r->graph, err);
            if (rc) return run_failed(r, rc, err);
            if (rc2) return rc2;
        }
        if ((rc = eng_cuda_graph_launch(ds[0].cu, r->graph))) return run_failed(r, rc, err);
    }
    for (; j < ds[0].spe; j++) {
        size_t first = j * (size_t)ds[0].bs;
        int n = train->n - first < (size_t)ds[0].bs ? (int)(train->n - first) : ds[0].bs;
        if ((rc = replicas_step(r, train, n))) return run_failed(r, rc, err);
    }
    *skipped = 0;
    if (ds[0].scaler && (rc = scaler_down(&ds[0], L, total, lr, skipped, err))) return rc;
    if (!ds[0].scaler) { /* the replicas saw the same summed gradients: they skipped the same steps */
        L->st.step += (long)ds[0].spe;
        if ((rc = nonfinite_down(&ds[0], skipped, err))) return rc;
    }
    for (int k = 0; k < r->R && !rc; k++)
        rc = eng_cuda_sums_add(ds[k].cu, ds[k].sums, k ? 0 : train->n, ds[k].m->out_dim, sums, err);
    return rc;
}

/* what replicas can be: at most ENG_CUDA_MAX_REPLICAS, each GPU once or all
 * on one. Replicas the slot asks for always split the batch
 * (MirroredStrategy's contract), clipnorm and small batches included, where
 * the CPU's threads split it only when train.c's wants_data_parallel says
 * so: a GPU run with R replicas equals the CPU's with R threads where the
 * CPU splits, and elsewhere draws the replicas' own dropout and
 * augmentation keys (the same on every run of its seed). */
static int check_replicas(const eng_train_opts *o, int R, int *same, hpo_error *err) {
    *same = 1;
    if (R == 1) return 0;
    if (R > ENG_CUDA_MAX_REPLICAS)
        return hpo_fail(err, HPO_EINVAL, "devices", "at most %d data-parallel replicas, not %d",
                        ENG_CUDA_MAX_REPLICAS, R);
    int distinct = 1;
    for (int k = 1; k < R; k++) {
        if (o->cuda_devices[k] != o->cuda_devices[0]) *same = 0;
        for (int j = 0; j < k; j++)
            if (o->cuda_devices[j] == o->cuda_devices[k]) distinct = 0;
    }
    if (!*same && !distinct)
        return hpo_fail(err, HPO_EINVAL, "devices", "replicas go each on its own GPU or all on one");
    return 0;
}

/* each replica's run within its share of its GPU (the GPU's share split
 * between the replicas on it) */
static int check_budgets(const eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                         int R, hpo_error *err) {
    if (R == 1) return eng_train_cuda_check_budget(m, train, val, o, NULL, err);
    for (int k = 0; k < R; k++) {
        eng_train_opts ok = *o;
        ok.cuda_device = o->cuda_devices[k];
        int on_gpu = 0;
        for (int j = 0; j < R; j++) on_gpu += o->cuda_devices[j] == ok.cuda_device;
        size_t budget = eng_train_cuda_budget(&ok);
        if (budget) ok.cuda_max_bytes = budget / (size_t)on_gpu;
        int rc = eng_train_cuda_check_budget(m, train, k ? NULL : val, &ok, NULL, err);
        if (rc) return rc;
    }
    return 0;
}

/* the replicas on their GPUs (or the run alone), the parameters up on each,
 * NCCL's group across GPUs */
static int run_open(run *r, eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                    int same, hpo_error *err) {
    int rc = 0;
    r->K = o->steps_per_execution > 1 ? o->steps_per_execution : 1;
    for (int k = 0; k < r->R && !rc; k++) {
        int device = r->R > 1 ? o->cuda_devices[k] : o->cuda_device;
        eng_cuda *shared = k > 0 && same ? r->d[0].cu : NULL;
        rc = dev_open(&r->d[k], m, train, k ? NULL : val, o, device, shared, err);
        if (!rc) rc = params_up(&r->d[k], err);
    }
    if (!rc && r->R > 1 && !same) {
        eng_cuda *cus[ENG_CUDA_MAX_REPLICAS];
        for (int k = 0; k < r->R; k++) cus[k] = r->d[k].cu;
        rc = eng_cuda_comm_open(cus, r->R, &r->comm, err);
    }
    return rc;
}

static void run_free(run *r, int failed) {
    /* a failed run's group first, whichever call saw the failure (a fault
     * shows at the next wait, such as the epoch end's downloads): a GPU
     * whose peer faulted waits in an all-reduce forever, and so would the
     * waits below (NCCL: abort a communicator that saw an error) */
    if (failed) {
        eng_cuda_comm_abort(r->comm);
        r->comm = NULL;
    }
    /* nothing freed under work still in flight (a failed run may have
     * returned before its streams drained) */
    for (int k = 0; k < r->R; k++)
        if (r->d[k].cu && r->d[k].owns_cu) eng_cuda_sync(r->d[k].cu, NULL);
    eng_cuda_graph_free(r->graph);
    eng_cuda_comm_free(r->comm);
    for (int k = r->R - 1; k >= 0; k--) dev_free(&r->d[k]); /* the context's owner last */
}

int eng_train_cuda(eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                   eng_train_result *res, hpo_error *err) {
    run r;
    eng_train_loop L;
    uint32_t *order = NULL;
    int rc, failed, bs = o->batch_size, same = 1, R = o->cuda_replicas > 1 ? o->cuda_replicas : 1;
    memset(&r, 0, sizeof r); /* r.R = 0 until the replicas are checked: nothing to free */
    memset(&L, 0, sizeof L);
    dev *d = &r.d[0];
    if (bs < 1 || o->epochs < 0 || o->precision < 0 || o->precision > ENG_PREC_FP16) {
        rc = hpo_fail(err, HPO_EINVAL, "training", "batch_size must be >= 1 and epochs >= 0");
        goto fail;
    }
    if (!m->params) {
        rc = hpo_fail(err, HPO_EINVAL, "model", "the model has no parameter blocks (eng_model_alloc)");
        goto fail;
    }
    if ((rc = check_replicas(o, R, &same, err))) goto fail;
    r.R = R;
    if ((rc = eng_train_check_data(m, train, err)) || (val && (rc = eng_train_check_data(m, val, err)))) goto fail;
    if ((rc = check_budgets(m, train, val, o, r.R, err))) goto fail;
    if (!(order = malloc((train->n ? train->n : 1) * sizeof *order))) {
        rc = hpo_fail(err, HPO_ENOMEM, "training", "out of memory for the batch order");
        goto fail;
    }
    if ((rc = eng_train_loop_begin(&L, m, val, o, (m->nparams + m->nstats + 1) * sizeof(float), err))) goto fail;
    if ((rc = run_open(&r, m, train, val, o, same, err))) goto fail;
    long total = (long)d->spe * o->epochs; /* the schedule's steps (dev_init counted those of an epoch) */
    int vk = val && val->ds != train->ds ? 1 : 0, stop = L.r.stopped_early; /* as train.c */
    for (int epoch = L.st.epoch; epoch < o->epochs && !stop; epoch++) {
        eng_metric_sums sums;
        memset(&sums, 0, sizeof sums);
        double lr = m->opt.lr, t0 = hpo_monotonic();
        long skipped = 0;
        rc = r.R > 1 ? train_epoch_replicas(&r, train, &L, epoch, total, order, &sums, &lr, &skipped, err)
                     : train_epoch(d, train, &L, epoch, total, order, &sums, &lr, &skipped, err);
        if (rc) goto fail;
        eng_epoch_report rep;
        eng_train_loop_report(&L, epoch, &sums, hpo_monotonic() - t0, lr, skipped, &rep);
        if (!isfinite(sums.loss)) {
            L.r.train = rep.train;
            rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss became %s during epoch %d (step %ld)",
                          isnan(sums.loss) ? "NaN" : "Inf", epoch + 1, L.st.step);
            goto fail;
        }
        if (o->precision != ENG_PREC_FP16 && skipped > 0) { /* the CPU's error, at the epoch's end */
            L.r.train = rep.train;
            rc = hpo_fail(err, HPO_EDIVERGED, "training", "gradients became NaN/Inf at epoch %d (%ld steps skipped)",
                          epoch + 1, skipped);
            goto fail;
        }
        if (o->precision == ENG_PREC_FP16 && L.st.loss_scale < ENG_LOSS_SCALE_MIN) {
            L.r.train = rep.train;
            rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss scale underflow at epoch %d", epoch + 1);
            goto fail;
        }
        if (L.use_val) { /* on the first replica: its running statistics are the model's */
            if ((rc = evaluate(d, val, vk, &rep.val, err))) goto fail;
            rep.has_val = 1;
        }
        if ((rc = params_down(d, err)) || (rc = eng_train_loop_epoch_end(&L, m, &rep, &stop, err))) goto fail;
    }
    /* the host model as eng_train leaves it, its buffers in the training
     * precision: an evaluation or prediction then computes as after a CPU run */
    if ((rc = eng_model_reserve(m, bs, o->precision)))
        rc = hpo_fail(err, rc, "training.batch_size", "out of host memory for the model's batches of %d", bs);
fail:
    failed = rc != 0;
    rc = eng_train_loop_end(&L, m, rc, res);
    run_free(&r, failed);
    free(order);
    return rc;
}
