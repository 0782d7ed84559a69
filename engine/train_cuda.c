/* train_cuda.c - eng_train on a CUDA device for models of dense, conv2d,
 * maxpool2d, global_avg_pool, batchnorm, augment, flatten, dropout and
 * activation layers (not residual blocks yet): fp32 and mixed_bf16 (see
 * train.h and train_loop.h). A conv2d layer is im2col then the dense
 * op over its output pixels (cuda_ops.h); which layers compute in bf16
 * follows the CPU (eng_layer_uses_bf16), and so does the relu a conv2d
 * leaves to the maxpool2d after it (model.c). Plain C over cuda_ops.h, the same in every build: without
 * CUDA eng_cuda_open refuses and so does this.
 *
 * On the device, once per run: the model's parameter, gradient and
 * optimiser-state blocks (one allocation each, as on the host), the
 * datasets of the splits (uint8 stays uint8) with their labels or targets,
 * the validation rows and each layer's batch buffers. Per epoch: the
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
 * and the optimiser (one kernel over the whole block, clipping and the bf16
 * copy folded in) run, and the cursor advances. Since no host value is in
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
 * clipnorm skips that step's update on the device (eng_cuda_optim_step)
 * instead of failing at once; the loss then diverges and the epoch end
 * reports HPO_EDIVERGED. max_bytes (a host budget) is not applied here: the
 * device has its own (train.h, eng_train_cuda_check_budget), checked by a
 * dry run of the allocating code (dev_alloc with a plan) before the device
 * is opened; an allocation that still fails is HPO_ENOMEM naming the bytes. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "gpu.h"
#include "ops.h"
#include "train_loop.h"

/* a top-level layer's device buffers (capacity bs) and its last forward */
typedef struct dlayer {
    float *z, *y, *dx, *mask;
    float *cols, *dcols; /* conv2d: im2col rows (f32 layers) and their gradient */
    uint16_t *cols16;    /* conv2d in bf16: the rows in bf16 */
    int32_t *arg;        /* maxpool2d: the winners */
    float *xhat, *mu, *invstd, *bnk; /* batchnorm: what backward needs, its scratch */
    size_t rec_off;      /* dropout, augment: its draws' place in a step's record (words) */
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
    float *st;               /* batchnorm running statistics (m->stats), or NULL */
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
    /* steps from device memory: per-step records of rec_words 8-byte words
     * (REC_SC_WORDS of scalars, then each drawing layer's draws at its
     * rec_off) for the spe steps of an epoch (recs, its host copy hrecs),
     * staged K at a time into stage_idx / stage_rec from the step cursor;
     * graph: K whole steps */
    int K;
    size_t spe, rec_words;
    uint64_t *recs, *hrecs, *stage_rec;
    uint32_t *stage_idx;
    int32_t *cursor;
    eng_cuda_graph *graph;
    eng_cuda_mem *plan;      /* a dry run: sizes added up here, nothing allocated */
} dev;

#define REC_SC_WORDS ((sizeof(eng_cuda_opt_scalars) + 7) / 8)

/* the layers whose training forward draws from the model's generator */
static int draws_dropout(const eng_layer *l) { return l->kind == ENG_L_DROPOUT && l->rate != 0.0f; }
static int draws_augment(const eng_layer *l) { return l->kind == ENG_L_AUGMENT && (l->translate || l->flip); }

static int bf16_layer(const dev *d, const eng_layer *l) { return eng_layer_uses_bf16(d->prec, l); }

/* the first layer with parameters: backward stops there (no gradient of the
 * model's input), and the layers from it on need their dx */
static int first_param_layer(const eng_model *m) {
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].nw) return i;
    return m->nlayers;
}

static void conv_shape(const eng_layer *l, int B, eng_conv2d_shape *s) {
    (void)eng_conv2d_shape_init(s, B, l->in_shape[0], l->in_shape[1], l->in_shape[2], l->kh, l->kw, l->filters, l->sh,
                                l->sw, l->padding);
}

/* the layers this path runs; the first other one is named */
static int check_model(const eng_model *m, const eng_train_opts *o, hpo_error *err) {
    if (o->precision == ENG_PREC_FP16)
        return hpo_fail(err, HPO_EUNSUPPORTED, "training.precision",
                        "mixed_fp16 is not available on CUDA devices yet (loss scaling); use fp32 or mixed_bf16");
    for (int i = 0; i < m->nlayers; i++) {
        const eng_layer *l = &m->layers[i];
        if (l->kind != ENG_L_RESIDUAL) continue;
        char field[128];
        snprintf(field, sizeof field, "model.%.100s", l->path);
        return hpo_fail(err, HPO_EUNSUPPORTED, field,
                        "%s: %s layers cannot train on a CUDA device yet (every other kind can); use a cpu slot",
                        field, eng_layer_kind_name(l->kind));
    }
    return 0;
}

/* what an allocation holds, for eng_cuda_mem */
enum { MEM_WEIGHTS, MEM_ACTIVATIONS, MEM_DATA };

/* one device allocation, or in a dry run (d->plan) its size counted:
 * rounded up to 512 bytes, as cudaMalloc does at least */
static int dalloc(dev *d, size_t bytes, void *out, const char *what, int kind, hpo_error *err) {
    if (d->plan) {
        size_t *part = kind == MEM_WEIGHTS ? &d->plan->weights
                       : kind == MEM_DATA  ? &d->plan->data
                                           : &d->plan->activations;
        size_t r = bytes > SIZE_MAX - 511 ? SIZE_MAX : ((bytes ? bytes : 1) + 511) / 512 * 512;
        *part = eng_size_add(*part, r);
        *(void **)out = NULL;
        return 0;
    }
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
    int rc = 0, A = MEM_ACTIVATIONS, first_p = first_param_layer(m);
    for (int i = 0; i < m->nlayers && !rc; i++) {
        const eng_layer *l = &m->layers[i];
        dlayer *dl = &d->ls[i];
        size_t in = cap * l->in_size * sizeof(float), out = cap * l->out_size * sizeof(float);
        switch (l->kind) {
        case ENG_L_DENSE:
            if ((rc = dalloc(d, out, &dl->y, "dense output", A, err)) || (rc = dalloc(d, in, &dl->dx, "dense dx", A, err)))
                break;
            if (eng_act_needs_z(l->act)) rc = dalloc(d, out, &dl->z, "dense z", A, err);
            else dl->z = dl->y;
            if (!rc && bf16_layer(d, l) && (!(rc = dalloc(d, in / 2, &dl->xb, "bf16 input", A, err))))
                rc = dalloc(d, out / 2, &dl->d16, "bf16 gradient", A, err);
            break;
        case ENG_L_CONV2D: {
            eng_conv2d_shape cs;
            conv_shape(l, d->bs, &cs);
            size_t cols = eng_size_mul((size_t)cs.N * cs.OH * cs.OW, (size_t)cs.KH * cs.KW * cs.C);
            if ((rc = dalloc(d, out, &dl->y, "conv2d output", A, err)) ||
                (rc = dalloc(d, in, &dl->dx, "conv2d dx", A, err)))
                break;
            if (eng_act_needs_z(l->act)) rc = dalloc(d, out, &dl->z, "conv2d z", A, err);
            else dl->z = dl->y;
            if (!rc && bf16_layer(d, l)) {
                if (!(rc = dalloc(d, eng_size_mul(cols, 2), &dl->cols16, "bf16 im2col rows", A, err)))
                    rc = dalloc(d, out / 2, &dl->d16, "bf16 gradient", A, err);
            } else if (!rc) {
                rc = dalloc(d, eng_size_mul(cols, sizeof(float)), &dl->cols, "im2col rows", A, err);
            }
            if (!rc && i > first_p) rc = dalloc(d, eng_size_mul(cols, sizeof(float)), &dl->dcols, "im2col gradient", A, err);
            break;
        }
        case ENG_L_MAXPOOL:
            if (!(rc = dalloc(d, out, &dl->y, "maxpool2d output", A, err)) &&
                !(rc = dalloc(d, cap * l->out_size * sizeof(int32_t), &dl->arg, "maxpool2d winners", A, err)))
                rc = dalloc(d, in, &dl->dx, "maxpool2d dx", A, err);
            break;
        case ENG_L_AUGMENT:
            if (draws_augment(l) && !(rc = dalloc(d, out, &dl->y, "augment output", A, err)))
                rc = dalloc(d, in, &dl->dx, "augment dx", A, err);
            break;
        case ENG_L_GAP:
            if (!(rc = dalloc(d, out, &dl->y, "global_avg_pool output", A, err)))
                rc = dalloc(d, in, &dl->dx, "global_avg_pool dx", A, err);
            break;
        case ENG_L_BATCHNORM: {
            size_t cb = (size_t)l->in_shape[l->in_rank - 1] * sizeof(float);
            if ((rc = dalloc(d, out, &dl->y, "batchnorm output", A, err)) ||
                (rc = dalloc(d, out, &dl->xhat, "batchnorm xhat", A, err)) ||
                (rc = dalloc(d, cb, &dl->mu, "batchnorm mean", A, err)) ||
                (rc = dalloc(d, cb, &dl->invstd, "batchnorm invstd", A, err)))
                break;
            rc = dalloc(d, 3 * cb, &dl->bnk, "batchnorm scratch", A, err);
            break;
        }
        case ENG_L_DROPOUT:
            if (!(rc = dalloc(d, out, &dl->y, "dropout output", A, err)))
                rc = dalloc(d, out, &dl->mask, "dropout mask", A, err);
            break;
        case ENG_L_ACT:
            if (l->act != ENG_ACT_NONE) rc = dalloc(d, out, &dl->y, "activation output", A, err);
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
        eng_cuda_free(d->cu, dl->cols);
        eng_cuda_free(d->cu, dl->dcols);
        eng_cuda_free(d->cu, dl->cols16);
        eng_cuda_free(d->cu, dl->arg);
        eng_cuda_free(d->cu, dl->xhat);
        eng_cuda_free(d->cu, dl->mu);
        eng_cuda_free(d->cu, dl->invstd);
        eng_cuda_free(d->cu, dl->bnk);
    }
    free(d->ls);
    void *bufs[] = {d->p, d->g, d->s, d->st, d->pb, d->x_all[0], d->x_all[1], d->y_all[0], d->y_all[1], d->t_all[0],
                    d->t_all[1], d->order, d->vidx, d->xin, d->dlogits, d->xin16, d->lab, d->tgt, d->sums,
                    d->vsums, d->norm, d->recs, d->stage_rec, d->stage_idx, d->cursor};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) eng_cuda_free(d->cu, bufs[i]);
    eng_cuda_graph_free(d->graph);
    free(d->hrecs);
    eng_cuda_close(d->cu);
}

/* a dataset's rows and labels or targets: their sizes, allocation, upload */
static size_t data_x_bytes(const eng_dataset *ds) {
    return eng_size_mul(eng_size_mul(ds->n, ds->sample_size), ds->x_type == ENG_DATA_U8 ? 1 : sizeof(float));
}

static size_t data_y_bytes(const eng_dataset *ds) {
    return ds->y_class ? eng_size_mul(ds->n, sizeof(int32_t)) : eng_size_mul(eng_size_mul(ds->n, ds->y_dim), sizeof(float));
}

static int alloc_data(dev *d, const eng_dataset *ds, int k, hpo_error *err) {
    int rc = dalloc(d, data_x_bytes(ds), &d->x_all[k], "dataset", MEM_DATA, err);
    if (rc) return rc;
    if (ds->y_class) return dalloc(d, data_y_bytes(ds), &d->y_all[k], "labels", MEM_DATA, err);
    return dalloc(d, data_y_bytes(ds), &d->t_all[k], "targets", MEM_DATA, err);
}

static int upload_data(dev *d, const eng_dataset *ds, int k, hpo_error *err) {
    int rc = eng_cuda_upload(d->cu, d->x_all[k], ds->x, data_x_bytes(ds), err);
    if (rc) return rc;
    if (ds->y_class) return eng_cuda_upload(d->cu, d->y_all[k], ds->y_class, data_y_bytes(ds), err);
    return eng_cuda_upload(d->cu, d->t_all[k], ds->y_target, data_y_bytes(ds), err);
}

/* Every device allocation of a run, in one place: with d->plan set nothing
 * is allocated and the sizes are added up (eng_train_cuda_mem_estimate). */
static int dev_alloc(dev *d, const eng_split *train, const eng_split *val, hpo_error *err) {
    const eng_model *m = d->m;
    int rc, K = m->out_dim, A = MEM_ACTIVATIONS, W = MEM_WEIGHTS;
    size_t cap = (size_t)d->bs, pbytes = (m->nparams ? m->nparams : 1) * sizeof(float);
    if ((rc = dalloc(d, pbytes, &d->p, "parameters", W, err)) || (rc = dalloc(d, pbytes, &d->g, "gradients", W, err)) ||
        (rc = dalloc(d, (m->nstate ? m->nstate : 1) * sizeof(float), &d->s, "optimiser state", W, err)))
        return rc;
    if (d->prec == ENG_PREC_BF16 && (rc = dalloc(d, pbytes / 2 + 2, &d->pb, "bf16 parameters", W, err))) return rc;
    if (m->nstats && (rc = dalloc(d, m->nstats * sizeof(float), &d->st, "batchnorm statistics", W, err))) return rc;
    if ((rc = alloc_layers(d, err)) || (rc = alloc_data(d, train->ds, 0, err))) return rc;
    if (val && val->n && val->ds != train->ds && (rc = alloc_data(d, val->ds, 1, err))) return rc;
    if ((rc = dalloc(d, train->n * sizeof(uint32_t), &d->order, "batch order", A, err))) return rc;
    if (val && val->n && (rc = dalloc(d, val->n * sizeof(uint32_t), &d->vidx, "validation rows", A, err))) return rc;
    if ((rc = dalloc(d, cap * m->in_size * sizeof(float), &d->xin, "batch", A, err)) ||
        (d->bf16_input && (rc = dalloc(d, cap * m->in_size * 2, &d->xin16, "bf16 batch", A, err))) ||
        (rc = dalloc(d, cap * sizeof(int32_t), &d->lab, "batch labels", A, err)) ||
        (rc = dalloc(d, cap * (size_t)K * sizeof(float), &d->tgt, "batch targets", A, err)) ||
        (rc = dalloc(d, cap * (size_t)K * sizeof(float), &d->dlogits, "loss gradient", A, err)) ||
        (rc = dalloc(d, ENG_CUDA_SUMS * sizeof(double), &d->sums, "metric sums", A, err)) ||
        (rc = dalloc(d, ENG_CUDA_SUMS * sizeof(double), &d->vsums, "metric sums", A, err)) ||
        (rc = dalloc(d, 2 * sizeof(double), &d->norm, "gradient norm", A, err)))
        return rc;
    size_t rb = d->rec_words * sizeof(uint64_t);
    if ((rc = dalloc(d, eng_size_mul(d->spe, rb), &d->recs, "step records", A, err)) ||
        (rc = dalloc(d, (size_t)d->K * rb, &d->stage_rec, "staged step records", A, err)) ||
        (rc = dalloc(d, (size_t)d->K * cap * sizeof(uint32_t), &d->stage_idx, "staged batch rows", A, err)) ||
        (rc = dalloc(d, sizeof(int32_t), &d->cursor, "step cursor", A, err)))
        return rc;
    return 0;
}

/* d's run settings and its layers' buffer table (host) */
static int dev_init(dev *d, eng_model *m, const eng_split *train, const eng_train_opts *o) {
    d->m = m;
    d->dev = o->cuda_device;
    d->prec = o->precision;
    d->bs = o->batch_size;
    d->bf16_input = eng_model_bf16_input_at(m, d->prec);
    d->spe = (train->n + (size_t)d->bs - 1) / (size_t)d->bs;
    d->K = o->steps_per_execution > 1 ? o->steps_per_execution : 1;
    if ((size_t)d->K > d->spe) d->K = d->spe ? (int)d->spe : 1;
    d->ls = calloc((size_t)(m->nlayers > 0 ? m->nlayers : 1), sizeof *d->ls);
    if (!d->ls) return HPO_ENOMEM;
    d->rec_words = REC_SC_WORDS;
    for (int i = 0; i < m->nlayers; i++) { /* a key, or (ty, tx, flipped) int32 per sample */
        d->ls[i].rec_off = d->rec_words;
        if (draws_dropout(&m->layers[i])) d->rec_words += 1;
        if (draws_augment(&m->layers[i])) d->rec_words += ((size_t)d->bs * 3 + 1) / 2;
    }
    return 0;
}

static int dev_open(dev *d, eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                    hpo_error *err) {
    int rc;
    if ((rc = eng_cuda_open(o->cuda_device, o->allow_tf32, &d->cu, err))) return rc;
    if ((rc = dev_init(d, m, train, o)) ||
        !(d->hrecs = calloc(d->spe ? d->spe * d->rec_words : 1, sizeof *d->hrecs)))
        return hpo_fail(err, HPO_ENOMEM, "training", "out of memory");
    if ((rc = dev_alloc(d, train, val, err)) || (rc = upload_data(d, train->ds, 0, err))) return rc;
    if (val && val->n && val->ds != train->ds && (rc = upload_data(d, val->ds, 1, err))) return rc;
    if (val && val->n && (rc = eng_cuda_upload(d->cu, d->vidx, val->idx, val->n * sizeof(uint32_t), err))) return rc;
    return 0;
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
    if (dev_init(&d, (eng_model *)m, train, o) || dev_alloc(&d, train, val, &err)) /* a dry run cannot fail but for the host table */
        out->activations = SIZE_MAX;
    free(d.ls);
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
    if (!rc && d->pb) rc = eng_cuda_to_bf16(d->cu, d->p, d->pb, m->nparams);
    return rc;
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
    if (!rc && d->y_all[k]) rc = eng_cuda_gather_labels(d->cu, d->y_all[k], idx, n, d->lab);
    if (!rc && d->t_all[k]) rc = eng_cuda_gather_targets(d->cu, d->t_all[k], (int)ds->y_dim, idx, n, d->tgt);
    return rc;
}

/* the forward pass (model_run.c's forward_layer for these kinds); x NULL:
 * the bf16 batch xin16; rec (dev): the step's record with the draws of its
 * dropout and augment layers (training), or NULL (evaluation) */
static int forward(dev *d, const float *x, int B, const uint64_t *rec, const float **out) {
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
        case ENG_L_CONV2D: {
            eng_conv2d_shape cs;
            conv_shape(l, B, &cs);
            int crows = cs.N * cs.OH * cs.OW, K = cs.KH * cs.KW * cs.C;
            const uint16_t *x16 = x ? NULL : d->xin16;
            if (bf16_layer(d, l)) {
                if (!(rc = eng_cuda_im2col(d->cu, &cs, x, x16, NULL, dl->cols16)))
                    rc = eng_cuda_dense_forward_bf16(d->cu, dl->cols16, d->pb + l->w_off, d->p + l->b_off, dl->z, dl->y,
                                                     crows, K, l->filters, l->act);
            } else if (!(rc = eng_cuda_im2col(d->cu, &cs, x, x16, dl->cols, NULL))) {
                rc = eng_cuda_dense_forward(d->cu, dl->cols, d->p + l->w_off, d->p + l->b_off, dl->z, dl->y, crows, K,
                                            l->filters, l->act);
            }
            break;
        }
        case ENG_L_MAXPOOL: /* with the relu of the conv2d before it, if any (model.c) */
            rc = eng_cuda_maxpool_forward(d->cu, x, dl->y, dl->arg, B, l->in_shape[0], l->in_shape[1], C, l->ph, l->pw,
                                          l->psh, l->psw, l->out_shape[0], l->out_shape[1]);
            if (!rc && l->act == ENG_ACT_RELU)
                rc = eng_cuda_act_forward(d->cu, ENG_ACT_RELU, dl->y, dl->y, (size_t)B * l->out_size / (size_t)C,
                                          (size_t)C);
            break;
        case ENG_L_AUGMENT:
            if (!rec || !draws_augment(l)) dl->yo = x;
            else
                rc = eng_cuda_augment_forward(d->cu, x, dl->y, (const int32_t *)(const void *)(rec + dl->rec_off), B,
                                              l->in_shape[0], l->in_shape[1], C);
            break;
        case ENG_L_GAP:
            rc = eng_cuda_gap_forward(d->cu, x, dl->y, B, l->in_shape[0] * l->in_shape[1], C);
            break;
        case ENG_L_BATCHNORM: {
            float *rm = d->st + l->stat_off, *rv = rm + C;
            if (rec)
                rc = eng_cuda_batchnorm_forward_train(d->cu, x, dl->y, d->p + l->w_off, d->p + l->b_off, rm, rv,
                                                      l->momentum, l->eps, dl->xhat, dl->mu, dl->invstd, rows, C);
            else
                rc = eng_cuda_batchnorm_forward_eval(d->cu, x, dl->y, d->p + l->w_off, d->p + l->b_off, rm, rv, l->eps,
                                                     rows, C);
            break;
        }
        case ENG_L_DROPOUT:
            if (!rec || !draws_dropout(l)) dl->yo = x;
            else rc = eng_cuda_dropout_forward_dev(d->cu, x, dl->y, dl->mask, n, l->rate, rec + dl->rec_off);
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
static int backward(dev *d, int B, const uint64_t *rec) {
    const eng_model *m = d->m;
    int first_p = first_param_layer(m), rc = 0;
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
        case ENG_L_CONV2D: {
            eng_conv2d_shape cs;
            conv_shape(l, B, &cs);
            int crows = cs.N * cs.OH * cs.OW, K = cs.KH * cs.KW * cs.C;
            float *dcols = need_dx ? dl->dcols : NULL;
            if (bf16_layer(d, l))
                rc = eng_cuda_dense_backward_bf16(d->cu, dl->cols16, d->pb + l->w_off, dl->z, dl->yo, dd, dl->d16, dcols,
                                                  d->g + l->w_off, d->g + l->b_off, crows, K, l->filters, l->act);
            else
                rc = eng_cuda_dense_backward(d->cu, dl->cols, d->p + l->w_off, dl->z, dl->yo, dd, dcols, d->g + l->w_off,
                                             d->g + l->b_off, crows, K, l->filters, l->act);
            if (!rc && need_dx) rc = eng_cuda_col2im(d->cu, &cs, dl->dcols, dl->dx);
            dd = dx;
            break;
        }
        case ENG_L_MAXPOOL: {
            size_t orows = (size_t)B * l->out_size / (size_t)C;
            if (l->act == ENG_ACT_RELU) rc = eng_cuda_act_backward(d->cu, ENG_ACT_RELU, NULL, dl->y, dd, orows, (size_t)C);
            if (!rc && need_dx)
                rc = eng_cuda_maxpool_backward(d->cu, dd, dl->arg, dl->dx, B, l->in_shape[0], l->in_shape[1], C, l->ph,
                                               l->pw, l->psh, l->psw, l->out_shape[0], l->out_shape[1]);
            dd = dx;
            break;
        }
        case ENG_L_AUGMENT:
            if (need_dx && dl->yo != dl->x)
                rc = eng_cuda_augment_backward(d->cu, dd, (const int32_t *)(const void *)(rec + dl->rec_off), dl->dx, B,
                                               l->in_shape[0], l->in_shape[1], C);
            if (need_dx && dl->yo != dl->x) dd = dl->dx;
            break;
        case ENG_L_GAP:
            if (need_dx) rc = eng_cuda_gap_backward(d->cu, dd, dl->dx, B, l->in_shape[0] * l->in_shape[1], C);
            dd = dx;
            break;
        case ENG_L_BATCHNORM: /* dx in place of dy, as the CPU */
            rc = eng_cuda_batchnorm_backward(d->cu, dd, dl->xhat, dl->invstd, d->p + l->w_off, need_dx ? dd : NULL,
                                             d->g + l->w_off, d->g + l->b_off, dl->bnk, rows, C);
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

/* one optimiser step over the whole block with the step's scalars sc
 * (dev), clipping and the bf16 copy folded in */
static int update(dev *d, const eng_cuda_opt_scalars *sc) {
    eng_model *m = d->m;
    int rc = 0;
    const double *norm = NULL;
    if (m->opt.clipnorm > 0) {
        rc = eng_cuda_grad_norm(d->cu, d->g, m->nparams, 1.0f, d->norm);
        norm = d->norm;
    }
    if (!rc) rc = eng_cuda_optim_step_dev(d->cu, &m->opt, sc, d->p, d->g, d->s, m->nparams, norm, d->pb);
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
            (rc = forward(d, d->bf16_input ? NULL : d->xin, n, NULL, &logits)))
            break;
        rc = eng_cuda_loss(d->cu, d->m->loss, d->m->final_act, logits, d->y_all[k] ? d->lab : NULL,
                           d->y_all[k] ? NULL : d->tgt, n, d->m->out_dim, 1.0f, NULL, d->vsums);
    }
    if (rc) return op_failed(d, rc, err);
    if ((rc = eng_cuda_sums_add(d->cu, d->vsums, s->n, d->m->out_dim, &sums, err))) return rc;
    eng_metrics_from_sums(&sums, out);
    return 0;
}

/* the next `steps` training steps from the cursor, each of B rows (the
 * epoch's last may have fewer: the stage copies only the rows there are) */
static int enqueue_steps(dev *d, const eng_split *train, int steps, int B) {
    eng_model *m = d->m;
    size_t rb = d->rec_words * sizeof(uint64_t);
    int rc = eng_cuda_stage_steps(d->cu, d->order, train->n, d->bs, d->recs, rb, d->cursor, steps, d->stage_idx,
                                  d->stage_rec);
    for (int s = 0; s < steps && !rc; s++) {
        const uint64_t *rec = d->stage_rec + (size_t)s * d->rec_words;
        const float *logits;
        if ((rc = gather(d, train->ds, 0, d->stage_idx + (size_t)s * (size_t)d->bs, B)) ||
            (rc = forward(d, d->bf16_input ? NULL : d->xin, B, rec, &logits)) ||
            (rc = eng_cuda_loss(d->cu, m->loss, m->final_act, logits, d->y_all[0] ? d->lab : NULL,
                                d->y_all[0] ? NULL : d->tgt, B, m->out_dim, 1.0f, d->dlogits, d->sums)) ||
            (rc = backward(d, B, rec)))
            break;
        rc = update(d, (const eng_cuda_opt_scalars *)(const void *)rec);
    }
    if (!rc) rc = eng_cuda_cursor_advance(d->cu, d->cursor, steps);
    return rc;
}

/* the records of the epoch's steps from L->st.step on, drawing from the
 * generator in the order the CPU's forward passes do: per step, layer by
 * layer, a key per dropout layer (eng_dropout_forward) and per sample of
 * the step's n a flip, then a shift in y and x, per augment layer
 * (eng_augment_forward); *lr: the last step's rate */
static void epoch_records(dev *d, const eng_split *train, eng_train_loop *L, long spe, long total, double *lr) {
    eng_model *m = d->m;
    for (size_t j = 0; j < d->spe; j++) {
        uint64_t *rec = d->hrecs + j * d->rec_words;
        long step = L->st.step + (long)j;
        eng_cuda_opt_scalars sc;
        memset(&sc, 0, sizeof sc);
        *lr = eng_schedule_lr(&m->sched, m->opt.lr, step, spe, total);
        eng_cuda_opt_scalars_at(&m->opt, (float)*lr, step + 1, &sc);
        memset(rec, 0, REC_SC_WORDS * sizeof *rec);
        memcpy(rec, &sc, sizeof sc);
        size_t n = train->n - j * (size_t)d->bs < (size_t)d->bs ? train->n - j * (size_t)d->bs : (size_t)d->bs;
        for (int i = 0; i < m->nlayers; i++) {
            const eng_layer *l = &m->layers[i];
            uint64_t *at = rec + d->ls[i].rec_off;
            if (draws_dropout(l)) *at = hpo_rng_u64(&m->rng);
            if (!draws_augment(l)) continue;
            int32_t *p = (int32_t *)(void *)at, k = l->translate;
            for (size_t s = 0; s < n; s++) { /* eng_augment_forward's draws */
                p[3 * s + 2] = l->flip ? (int32_t)(hpo_rng_u64(&m->rng) >> 63) : 0;
                p[3 * s] = k > 0 ? (int32_t)hpo_rng_below(&m->rng, (uint64_t)(2 * k + 1)) - k : 0;
                p[3 * s + 1] = k > 0 ? (int32_t)hpo_rng_below(&m->rng, (uint64_t)(2 * k + 1)) - k : 0;
            }
        }
    }
}

/* one epoch's steps: K at a time by the captured graph, the rest one by
 * one; *sums gets its metric sums */
static int train_epoch(dev *d, const eng_split *train, eng_train_loop *L, int epoch, long spe, long total,
                       uint32_t *order, eng_metric_sums *sums, double *lr, hpo_error *err) {
    eng_model *m = d->m;
    const eng_train_opts *o = L->o;
    memcpy(order, train->idx, train->n * sizeof *order); /* eng_batcher_start_epoch's order */
    hpo_rng r;
    hpo_rng_derive(&r, o->seed, (uint64_t)epoch, 0);
    hpo_rng_shuffle_u32(&r, order, (uint32_t)train->n);
    epoch_records(d, train, L, spe, total, lr);
    int rc = eng_cuda_upload(d->cu, d->order, order, train->n * sizeof *order, err);
    if (!rc) rc = eng_cuda_upload(d->cu, d->recs, d->hrecs, d->spe * d->rec_words * sizeof *d->hrecs, err);
    if (rc) return rc;
    if ((rc = eng_cuda_zero(d->cu, d->sums, ENG_CUDA_SUMS * sizeof(double))) ||
        (rc = eng_cuda_zero(d->cu, d->cursor, sizeof(int32_t))))
        return op_failed(d, rc, err);
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
        L->st.step += d->K;
    }
    for (; j < d->spe; j++) {
        size_t first = j * (size_t)d->bs;
        int n = train->n - first < (size_t)d->bs ? (int)(train->n - first) : d->bs;
        if ((rc = enqueue_steps(d, train, 1, n))) return op_failed(d, rc, err);
        L->st.step++;
    }
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
    if ((rc = eng_train_cuda_check_budget(m, train, val, o, NULL, err))) goto fail;
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
