/* train_cuda.c - eng_train on a CUDA device for dense models (dense,
 * flatten, dropout, activation layers): fp32 and mixed_bf16 (see train.h and
 * train_loop.h). Plain C over cuda_ops.h, the same in every build: without
 * CUDA eng_cuda_open refuses and so does this.
 *
 * On the device, once per run: the model's parameter, gradient and
 * optimiser-state blocks (one allocation each, as on the host), the
 * datasets of the splits (uint8 stays uint8) with their labels or targets,
 * the validation rows and each layer's batch buffers. Per epoch: the
 * batch order (the CPU batcher's: hpo_rng_derive(seed, epoch, 0)) goes up
 * once; per step nothing crosses the bus: rows are gathered on the device,
 * the forward and backward passes, the loss with its metric sums and the
 * optimiser (one kernel over the whole block, clipping folded in) are
 * enqueued on the context's stream. Dropout keys are drawn from the host
 * model's generator exactly as eng_dropout_forward draws them, so masks,
 * the generator's state and the checkpoint are the CPU's.
 * At each epoch end the stream is synchronised (the metric sums come down),
 * validation runs on the device, and the parameters and optimiser state are
 * copied into the host model, where train_loop.c keeps the best weights and
 * writes the checkpoint: the same safetensors layout as a CPU run, so
 * either can resume the other.
 * Not the CPU's, by design: a NaN/Inf loss is noticed at the end of the
 * epoch (the sums), not at the step, and a non-finite gradient under
 * clipnorm skips that step's update on the device (eng_cuda_optim_step)
 * instead of failing at once; the loss then diverges and the epoch end
 * reports HPO_EDIVERGED. max_bytes (a host budget) is not applied: the
 * device allocations fail with HPO_ENOMEM naming the bytes instead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "ops.h"
#include "train_loop.h"

/* a top-level layer's device buffers (capacity bs) and its last forward */
typedef struct dlayer {
    float *z, *y, *dx, *mask;
    uint16_t *xb, *d16;
    const float *x, *yo;
    const uint16_t *xbo;
} dlayer;

typedef struct dev {
    eng_cuda *cu;
    eng_model *m;
    int dev, prec, bs, bf16_input;
    dlayer *ls;
    float *p, *g, *s;        /* parameters, gradients, optimiser state */
    uint16_t *pb;            /* bf16 copy of p (mixed_bf16) */
    void *x_all[2];          /* the training and (when another) validation dataset */
    int32_t *y_all[2];
    float *t_all[2];
    uint32_t *order, *vidx;  /* the epoch's training order; the validation rows */
    float *xin, *dlogits;
    uint16_t *xin16;
    int32_t *lab;
    float *tgt;
    double *sums, *vsums, *norm;
} dev;

static int bf16_layer(const dev *d, const eng_layer *l) {
    return d->prec == ENG_PREC_BF16 && l->kind == ENG_L_DENSE && !l->fp32_only;
}

/* the layers this path runs; the first other one is named */
static int check_model(const eng_model *m, const eng_train_opts *o, hpo_error *err) {
    if (o->precision == ENG_PREC_FP16)
        return hpo_fail(err, HPO_EUNSUPPORTED, "training.precision",
                        "mixed_fp16 is not available on CUDA devices yet (loss scaling); use fp32 or mixed_bf16");
    for (int i = 0; i < m->nlayers; i++) {
        const eng_layer *l = &m->layers[i];
        if (l->kind == ENG_L_DENSE || l->kind == ENG_L_FLATTEN || l->kind == ENG_L_DROPOUT || l->kind == ENG_L_ACT)
            continue;
        char field[128];
        snprintf(field, sizeof field, "model.%.100s", l->path);
        return hpo_fail(err, HPO_EUNSUPPORTED, field,
                        "%s: %s layers cannot train on a CUDA device yet (dense, flatten, dropout and activation layers "
                        "can); use a cpu slot",
                        field, eng_layer_kind_name(l->kind));
    }
    return 0;
}

static int dalloc(dev *d, size_t bytes, void *out, const char *what, hpo_error *err) {
    int rc = eng_cuda_alloc(d->cu, bytes, (void **)out, err);
    if (rc == HPO_ENOMEM)
        return hpo_fail(err, rc, "devices", "cuda:%d: out of device memory for the %s (%zu bytes)", d->dev,
                        what, bytes);
    return rc;
}

/* an op failed to launch: the context's reason in err */
static int op_failed(dev *d, int rc, hpo_error *err) {
    if (eng_cuda_sync(d->cu, err) == 0) hpo_fail(err, rc, "devices", "cuda:%d: a device op failed", d->dev);
    return rc;
}

static int alloc_layers(dev *d, hpo_error *err) {
    const eng_model *m = d->m;
    size_t cap = (size_t)d->bs;
    int rc = 0;
    for (int i = 0; i < m->nlayers && !rc; i++) {
        const eng_layer *l = &m->layers[i];
        dlayer *dl = &d->ls[i];
        size_t in = cap * l->in_size * sizeof(float), out = cap * l->out_size * sizeof(float);
        switch (l->kind) {
        case ENG_L_DENSE:
            if ((rc = dalloc(d, out, &dl->y, "dense output", err)) || (rc = dalloc(d, in, &dl->dx, "dense dx", err)))
                break;
            if (eng_act_needs_z(l->act)) rc = dalloc(d, out, &dl->z, "dense z", err);
            else dl->z = dl->y;
            if (!rc && bf16_layer(d, l) &&
                (!(rc = dalloc(d, in / 2, &dl->xb, "bf16 input", err))))
                rc = dalloc(d, out / 2, &dl->d16, "bf16 gradient", err);
            break;
        case ENG_L_DROPOUT:
            if (!(rc = dalloc(d, out, &dl->y, "dropout output", err))) rc = dalloc(d, out, &dl->mask, "dropout mask", err);
            break;
        case ENG_L_ACT:
            if (l->act != ENG_ACT_NONE) rc = dalloc(d, out, &dl->y, "activation output", err);
            break;
        default:
            break;
        }
    }
    return rc;
}

static void dev_free(dev *d) {
    if (!d->cu) return;
    for (int i = 0; d->ls && i < d->m->nlayers; i++) {
        dlayer *dl = &d->ls[i];
        if (dl->z != dl->y) eng_cuda_free(d->cu, dl->z);
        eng_cuda_free(d->cu, dl->y);
        eng_cuda_free(d->cu, dl->dx);
        eng_cuda_free(d->cu, dl->mask);
        eng_cuda_free(d->cu, dl->xb);
        eng_cuda_free(d->cu, dl->d16);
    }
    free(d->ls);
    void *bufs[] = {d->p, d->g, d->s, d->pb, d->x_all[0], d->x_all[1], d->y_all[0], d->y_all[1], d->t_all[0],
                    d->t_all[1], d->order, d->vidx, d->xin, d->dlogits, d->xin16, d->lab, d->tgt, d->sums,
                    d->vsums, d->norm};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) eng_cuda_free(d->cu, bufs[i]);
    eng_cuda_close(d->cu);
}

/* a dataset's rows and labels/targets, once */
static int upload_data(dev *d, const eng_dataset *ds, int k, hpo_error *err) {
    size_t xe = ds->x_type == ENG_DATA_U8 ? 1 : sizeof(float), xb = ds->n * ds->sample_size * xe;
    int rc;
    if ((rc = dalloc(d, xb, &d->x_all[k], "dataset", err)) ||
        (rc = eng_cuda_upload(d->cu, d->x_all[k], ds->x, xb, err)))
        return rc;
    if (ds->y_class) {
        size_t yb = ds->n * sizeof(int32_t);
        if ((rc = dalloc(d, yb, &d->y_all[k], "labels", err))) return rc;
        return eng_cuda_upload(d->cu, d->y_all[k], ds->y_class, yb, err);
    }
    size_t tb = ds->n * ds->y_dim * sizeof(float);
    if ((rc = dalloc(d, tb, &d->t_all[k], "targets", err))) return rc;
    return eng_cuda_upload(d->cu, d->t_all[k], ds->y_target, tb, err);
}

static int dev_open(dev *d, eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                    hpo_error *err) {
    int rc, K = m->out_dim;
    size_t cap = (size_t)o->batch_size;
    d->m = m;
    d->dev = o->cuda_device;
    d->prec = o->precision;
    d->bs = o->batch_size;
    if ((rc = eng_cuda_open(o->cuda_device, 0, &d->cu, err))) return rc;
    if (!(d->ls = calloc((size_t)m->nlayers, sizeof *d->ls))) return HPO_ENOMEM;
    size_t pbytes = (m->nparams ? m->nparams : 1) * sizeof(float);
    if ((rc = dalloc(d, pbytes, &d->p, "parameters", err)) || (rc = dalloc(d, pbytes, &d->g, "gradients", err)) ||
        (rc = dalloc(d, (m->nstate ? m->nstate : 1) * sizeof(float), &d->s, "optimiser state", err)))
        return rc;
    if (d->prec == ENG_PREC_BF16 && (rc = dalloc(d, pbytes / 2 + 2, &d->pb, "bf16 parameters", err))) return rc;
    d->bf16_input = eng_model_bf16_input_at(m, d->prec);
    if ((rc = alloc_layers(d, err)) || (rc = upload_data(d, train->ds, 0, err))) return rc;
    if (val && val->n && val->ds != train->ds && (rc = upload_data(d, val->ds, 1, err))) return rc;
    if ((rc = dalloc(d, train->n * sizeof(uint32_t), &d->order, "batch order", err))) return rc;
    if (val && val->n &&
        ((rc = dalloc(d, val->n * sizeof(uint32_t), &d->vidx, "validation rows", err)) ||
         (rc = eng_cuda_upload(d->cu, d->vidx, val->idx, val->n * sizeof(uint32_t), err))))
        return rc;
    if ((rc = dalloc(d, cap * m->in_size * sizeof(float), &d->xin, "batch", err)) ||
        (d->bf16_input && (rc = dalloc(d, cap * m->in_size * 2, &d->xin16, "bf16 batch", err))) ||
        (rc = dalloc(d, cap * sizeof(int32_t), &d->lab, "batch labels", err)) ||
        (rc = dalloc(d, cap * (size_t)K * sizeof(float), &d->tgt, "batch targets", err)) ||
        (rc = dalloc(d, cap * (size_t)K * sizeof(float), &d->dlogits, "loss gradient", err)) ||
        (rc = dalloc(d, ENG_CUDA_SUMS * sizeof(double), &d->sums, "metric sums", err)) ||
        (rc = dalloc(d, ENG_CUDA_SUMS * sizeof(double), &d->vsums, "metric sums", err)) ||
        (rc = dalloc(d, 2 * sizeof(double), &d->norm, "gradient norm", err)))
        return rc;
    return 0;
}

/* the host model's parameters and optimiser state to the device (start, resume) */
static int params_up(dev *d, hpo_error *err) {
    const eng_model *m = d->m;
    int rc = eng_cuda_upload(d->cu, d->p, m->params, m->nparams * sizeof(float), err);
    if (!rc && m->nstate) rc = eng_cuda_upload(d->cu, d->s, m->opt_state, m->nstate * sizeof(float), err);
    if (!rc && d->pb) rc = eng_cuda_to_bf16(d->cu, d->p, d->pb, m->nparams);
    return rc;
}

/* and back into the host model (epoch end: best weights, checkpoint) */
static int params_down(dev *d, hpo_error *err) {
    eng_model *m = d->m;
    int rc = eng_cuda_download(d->cu, m->params, d->p, m->nparams * sizeof(float), err);
    if (!rc && m->nstate) rc = eng_cuda_download(d->cu, m->opt_state, d->s, m->nstate * sizeof(float), err);
    eng_model_params_changed(m);
    return rc;
}

/* rows idx[0..n) of dataset k into the batch buffers */
static int gather(dev *d, const eng_dataset *ds, int k, const uint32_t *idx, int n) {
    int rc = eng_cuda_gather_x(d->cu, d->x_all[k], ds->x_type == ENG_DATA_U8, ds->sample_size, ds->x_scale, idx, n,
                               d->bf16_input ? NULL : d->xin, d->bf16_input ? d->xin16 : NULL);
    if (!rc && d->y_all[k]) rc = eng_cuda_gather_labels(d->cu, d->y_all[k], idx, n, d->lab);
    if (!rc && d->t_all[k]) rc = eng_cuda_gather_targets(d->cu, d->t_all[k], (int)ds->y_dim, idx, n, d->tgt);
    return rc;
}

/* the forward pass (model_run.c's forward_layer for these kinds); x NULL:
 * the bf16 batch xin16 */
static int forward(dev *d, const float *x, int B, int train, const float **out) {
    eng_model *m = d->m;
    int rc = 0;
    for (int i = 0; i < m->nlayers && !rc; i++) {
        const eng_layer *l = &m->layers[i];
        dlayer *dl = &d->ls[i];
        int C = l->in_shape[l->in_rank - 1];
        size_t rows = (size_t)B * l->in_size / (size_t)C, n = (size_t)B * l->in_size;
        dl->x = x;
        dl->yo = dl->y;
        switch (l->kind) {
        case ENG_L_DENSE:
            if (bf16_layer(d, l)) {
                dl->xbo = dl->xb;
                if (!x) dl->xbo = d->xin16;
                else rc = eng_cuda_to_bf16(d->cu, x, dl->xb, n);
                if (!rc)
                    rc = eng_cuda_dense_forward_bf16(d->cu, dl->xbo, d->pb + l->w_off, d->p + l->b_off, dl->z, dl->y,
                                                     (int)rows, C, l->units, l->act);
            } else {
                rc = eng_cuda_dense_forward(d->cu, x, d->p + l->w_off, d->p + l->b_off, dl->z, dl->y, (int)rows, C,
                                            l->units, l->act);
            }
            break;
        case ENG_L_DROPOUT:
            if (!train || l->rate == 0.0f) dl->yo = x;
            else rc = eng_cuda_dropout_forward(d->cu, x, dl->y, dl->mask, n, l->rate, hpo_rng_u64(&m->rng));
            break;
        case ENG_L_ACT:
            if (l->act == ENG_ACT_NONE) dl->yo = x;
            else rc = eng_cuda_act_forward(d->cu, l->act, x, dl->y, rows, (size_t)C);
            break;
        default: /* flatten */
            dl->yo = x;
            break;
        }
        x = dl->yo;
    }
    *out = x;
    return rc;
}

/* the backward pass from dlogits into the gradient block, down to the first
 * layer with parameters (no gradient of the model's input) */
static int backward(dev *d, int B) {
    const eng_model *m = d->m;
    int first_p = m->nlayers, rc = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].nw) {
            first_p = i;
            break;
        }
    float *dd = d->dlogits;
    for (int i = m->nlayers - 1; i >= first_p && !rc; i--) {
        const eng_layer *l = &m->layers[i];
        dlayer *dl = &d->ls[i];
        int C = l->in_shape[l->in_rank - 1], need_dx = i > first_p;
        size_t rows = (size_t)B * l->in_size / (size_t)C, n = (size_t)B * l->in_size;
        float *dx = need_dx ? dl->dx : NULL;
        switch (l->kind) {
        case ENG_L_DENSE:
            if (bf16_layer(d, l))
                rc = eng_cuda_dense_backward_bf16(d->cu, dl->xbo, d->pb + l->w_off, dl->z, dl->yo, dd, dl->d16, dx,
                                                  d->g + l->w_off, d->g + l->b_off, (int)rows, C, l->units, l->act);
            else
                rc = eng_cuda_dense_backward(d->cu, dl->x, d->p + l->w_off, dl->z, dl->yo, dd, dx, d->g + l->w_off,
                                             d->g + l->b_off, (int)rows, C, l->units, l->act);
            dd = dx;
            break;
        case ENG_L_DROPOUT:
            if (need_dx && dl->yo != dl->x) rc = eng_cuda_dropout_backward(d->cu, dd, dl->mask, dd, n);
            break;
        case ENG_L_ACT:
            if (need_dx && l->act != ENG_ACT_NONE)
                rc = eng_cuda_act_backward(d->cu, l->act, dl->x, dl->yo, dd, rows, (size_t)C);
            break;
        default:
            break;
        }
    }
    return rc;
}

/* one optimiser step over the whole block, clipping folded in */
static int update(dev *d, float lr, long t) {
    eng_model *m = d->m;
    int rc = 0;
    const double *norm = NULL;
    if (m->opt.clipnorm > 0) {
        rc = eng_cuda_grad_norm(d->cu, d->g, m->nparams, 1.0f, d->norm);
        norm = d->norm;
    }
    if (!rc) rc = eng_cuda_optim_step(d->cu, &m->opt, lr, t, d->p, d->g, d->s, m->nparams, norm);
    if (!rc && d->pb) rc = eng_cuda_to_bf16(d->cu, d->p, d->pb, m->nparams);
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
            (rc = forward(d, d->bf16_input ? NULL : d->xin, n, 0, &logits)))
            break;
        rc = eng_cuda_loss(d->cu, d->m->loss, d->m->final_act, logits, d->y_all[k] ? d->lab : NULL,
                           d->y_all[k] ? NULL : d->tgt, n, d->m->out_dim, 1.0f, NULL, d->vsums);
    }
    if (rc) return op_failed(d, rc, err);
    if ((rc = eng_cuda_sums_add(d->cu, d->vsums, s->n, d->m->out_dim, &sums, err))) return rc;
    eng_metrics_from_sums(&sums, out);
    return 0;
}

/* one epoch's steps; *sums gets its metric sums */
static int train_epoch(dev *d, const eng_split *train, eng_train_loop *L, int epoch, long spe, long total,
                       uint32_t *order, eng_metric_sums *sums, double *lr, hpo_error *err) {
    eng_model *m = d->m;
    const eng_train_opts *o = L->o;
    memcpy(order, train->idx, train->n * sizeof *order); /* eng_batcher_start_epoch's order */
    hpo_rng r;
    hpo_rng_derive(&r, o->seed, (uint64_t)epoch, 0);
    hpo_rng_shuffle_u32(&r, order, (uint32_t)train->n);
    int rc = eng_cuda_upload(d->cu, d->order, order, train->n * sizeof *order, err);
    if (rc) return rc;
    rc = eng_cuda_zero(d->cu, d->sums, ENG_CUDA_SUMS * sizeof(double));
    for (size_t first = 0; first < train->n && !rc; first += (size_t)d->bs) {
        int n = train->n - first < (size_t)d->bs ? (int)(train->n - first) : d->bs;
        const float *logits;
        if ((rc = gather(d, train->ds, 0, d->order + first, n)) ||
            (rc = forward(d, d->bf16_input ? NULL : d->xin, n, 1, &logits)) ||
            (rc = eng_cuda_loss(d->cu, m->loss, m->final_act, logits, d->y_all[0] ? d->lab : NULL,
                                d->y_all[0] ? NULL : d->tgt, n, m->out_dim, 1.0f, d->dlogits, d->sums)) ||
            (rc = backward(d, n)))
            break;
        *lr = eng_schedule_lr(&m->sched, m->opt.lr, L->st.step, spe, total);
        if ((rc = update(d, (float)*lr, L->st.step + 1))) break;
        L->st.step++;
    }
    if (rc) return op_failed(d, rc, err);
    return eng_cuda_sums_add(d->cu, d->sums, train->n, m->out_dim, sums, err);
}

int eng_train_cuda(eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                   eng_train_result *res, hpo_error *err) {
    dev d;
    eng_train_loop L;
    uint32_t *order = NULL;
    int rc, bs = o->batch_size;
    memset(&d, 0, sizeof d);
    memset(&L, 0, sizeof L);
    if (bs < 1 || o->epochs < 0 || o->precision < 0 || o->precision > ENG_PREC_FP16) {
        rc = hpo_fail(err, HPO_EINVAL, "training", "batch_size must be >= 1 and epochs >= 0");
        goto fail;
    }
    if (!m->params) {
        rc = hpo_fail(err, HPO_EINVAL, "model", "the model has no parameter blocks (eng_model_alloc)");
        goto fail;
    }
    if ((rc = check_model(m, o, err))) goto fail;
    if ((rc = eng_train_check_data(m, train, err)) || (val && (rc = eng_train_check_data(m, val, err)))) goto fail;
    if (!(order = malloc((train->n ? train->n : 1) * sizeof *order))) {
        rc = hpo_fail(err, HPO_ENOMEM, "training", "out of memory for the batch order");
        goto fail;
    }
    if ((rc = eng_train_loop_begin(&L, m, val, o, (m->nparams + 1) * sizeof(float), err))) goto fail;
    if ((rc = dev_open(&d, m, train, val, o, err)) || (rc = params_up(&d, err))) goto fail;
    long spe = (long)((train->n + (size_t)bs - 1) / (size_t)bs), total = spe * o->epochs;
    int vk = val && val->ds != train->ds ? 1 : 0, stop = 0;
    for (int epoch = L.st.epoch; epoch < o->epochs && !stop; epoch++) {
        eng_metric_sums sums;
        memset(&sums, 0, sizeof sums);
        double lr = m->opt.lr, t0 = hpo_monotonic();
        if ((rc = train_epoch(&d, train, &L, epoch, spe, total, order, &sums, &lr, err))) goto fail;
        eng_epoch_report rep;
        eng_train_loop_report(&L, epoch, &sums, hpo_monotonic() - t0, lr, 0, &rep);
        if (!isfinite(sums.loss)) {
            L.r.train = rep.train;
            rc = hpo_fail(err, HPO_EDIVERGED, "training", "loss became %s during epoch %d (step %ld)",
                          isnan(sums.loss) ? "NaN" : "Inf", epoch + 1, L.st.step);
            goto fail;
        }
        if (L.use_val) {
            if ((rc = evaluate(&d, val, vk, &rep.val, err))) goto fail;
            rep.has_val = 1;
        }
        if ((rc = params_down(&d, err)) || (rc = eng_train_loop_epoch_end(&L, m, &rep, &stop, err))) goto fail;
    }
    rc = 0;
fail:
    rc = eng_train_loop_end(&L, m, rc, res);
    dev_free(&d);
    free(order);
    return rc;
}
