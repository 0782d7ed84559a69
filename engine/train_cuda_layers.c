/* train_cuda_layers.c - the layers of a model on a CUDA device (see
 * train_cuda_internal.h): the run's device allocations (eng_dev_alloc,
 * counted in a dry run), each layer's device buffers, the draws its
 * training forward pass takes from the model's generator, and the forward
 * and backward passes over a layer list, model_run.c's forward_layer,
 * backward_layer and backward_list kind by kind over cuda_ops.h:
 * - dense through cuBLASLt (bias and activation epilogues), conv2d as
 *   im2col + the same op, in 16 bits (bf16 or fp16, the run's mixed
 *   precision) where eng_layer_uses_bf16 says mixed_bf16 would;
 * - mixed_fp16's roundings where model_run.c rounds (train_cuda_internal.h);
 * - maxpool2d with the relu a conv2d before it leaves to it (model.c);
 * - augment and dropout from the step's record (the CPU's draws);
 * - batchnorm with the running statistics in d->st;
 * - a residual block: its sub-layers (a list of their own), the
 *   projection or the identity, their sum and activation; backward keeps
 *   the output gradient for the shortcut (dcopy) as the CPU does.
 * Gradients of the model's input are never computed: a list's backward
 * stops below its first layer with parameters unless its caller needs dx. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "train_cuda_internal.h"

static int draws_dropout(const eng_layer *l) { return l->kind == ENG_L_DROPOUT && l->rate != 0.0f; }
static int draws_augment(const eng_layer *l) { return l->kind == ENG_L_AUGMENT && (l->translate || l->flip); }

/* a dense or conv2d layer whose GEMMs run in 16 bits */
static int h16_layer(const dev *d, const eng_layer *l) {
    return d->prec != ENG_PREC_FP32 && eng_layer_uses_bf16(ENG_PREC_BF16, l);
}

/* mixed_fp16 rounds the layer's output to fp16 values and computes with
 * the rounded parameters (model_run.c's fp16_on, cparams) */
static int fp16_layer(const dev *d, const eng_layer *l) { return d->prec == ENG_PREC_FP16 && !l->fp32_only; }
static const float *params_of(const dev *d, const eng_layer *l) { return fp16_layer(d, l) ? d->ph : d->p; }

static int first_param_layer(const eng_layer *ls, int n) {
    for (int i = 0; i < n; i++)
        if (eng_layer_has_params(&ls[i])) return i;
    return n;
}

static void conv_shape(const eng_layer *l, int B, eng_conv2d_shape *s) {
    (void)eng_conv2d_shape_init(s, B, l->in_shape[0], l->in_shape[1], l->in_shape[2], l->kh, l->kw, l->filters, l->sh,
                                l->sw, l->padding);
}

/* ---- one allocation ---- */

/* in a dry run, each size is rounded up to 512 bytes, as cudaMalloc does at least */
int eng_dev_alloc(dev *d, size_t bytes, void *out, const char *what, int kind, hpo_error *err) {
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

/* ---- tables and record offsets ---- */

static int init_list(dev *d, const eng_layer *ls, int n, dlayer **out);

static int init_layer(dev *d, const eng_layer *l, dlayer *dl) {
    dl->rec_off = d->rec_words; /* forward order: the sub-layers draw first, then the projection */
    if (draws_dropout(l)) d->rec_words += 1;
    if (draws_augment(l)) d->rec_words += ((size_t)d->bs * 3 + 1) / 2;
    if (l->kind != ENG_L_RESIDUAL) return 0;
    int rc = init_list(d, l->sub, l->nsub, &dl->sub);
    if (!rc && l->proj) rc = init_list(d, l->proj, 1, &dl->proj);
    return rc;
}

static int init_list(dev *d, const eng_layer *ls, int n, dlayer **out) {
    *out = calloc((size_t)(n > 0 ? n : 1), sizeof **out);
    if (!*out) return HPO_ENOMEM;
    for (int i = 0; i < n; i++) {
        int rc = init_layer(d, &ls[i], &(*out)[i]);
        if (rc) return rc;
    }
    return 0;
}

int eng_dev_layers_init(dev *d) { return init_list(d, d->m->layers, d->m->nlayers, &d->ls); }

/* ---- device buffers ---- */

static int alloc_list(dev *d, const eng_layer *ls, dlayer *dls, int n, int nested, hpo_error *err);

/* nested: inside a residual block, where every layer may need its dx */
static int alloc_layer(dev *d, const eng_layer *l, dlayer *dl, int need_dx, hpo_error *err) {
    size_t cap = (size_t)d->bs, in = cap * l->in_size * sizeof(float), out = cap * l->out_size * sizeof(float);
    int rc = 0, A = MEM_ACTIVATIONS;
    switch (l->kind) {
    case ENG_L_DENSE:
        if ((rc = eng_dev_alloc(d, out, &dl->y, "dense output", A, err)) ||
            (rc = eng_dev_alloc(d, in, &dl->dx, "dense dx", A, err)))
            break;
        if (eng_act_needs_z(l->act)) rc = eng_dev_alloc(d, out, &dl->z, "dense z", A, err);
        else dl->z = dl->y;
        if (!rc && h16_layer(d, l) && !(rc = eng_dev_alloc(d, in / 2, &dl->xb, "16-bit input", A, err)))
            rc = eng_dev_alloc(d, out / 2, &dl->d16, "16-bit gradient", A, err);
        break;
    case ENG_L_CONV2D: {
        eng_conv2d_shape cs;
        conv_shape(l, d->bs, &cs);
        size_t cols = eng_size_mul((size_t)cs.N * cs.OH * cs.OW, (size_t)cs.KH * cs.KW * cs.C);
        if ((rc = eng_dev_alloc(d, out, &dl->y, "conv2d output", A, err)) ||
            (rc = eng_dev_alloc(d, in, &dl->dx, "conv2d dx", A, err)))
            break;
        if (eng_act_needs_z(l->act)) rc = eng_dev_alloc(d, out, &dl->z, "conv2d z", A, err);
        else dl->z = dl->y;
        if (!rc && h16_layer(d, l)) {
            if (!(rc = eng_dev_alloc(d, eng_size_mul(cols, 2), &dl->cols16, "16-bit im2col rows", A, err)))
                rc = eng_dev_alloc(d, out / 2, &dl->d16, "16-bit gradient", A, err);
        } else if (!rc) {
            rc = eng_dev_alloc(d, eng_size_mul(cols, sizeof(float)), &dl->cols, "im2col rows", A, err);
        }
        if (!rc && need_dx)
            rc = eng_dev_alloc(d, eng_size_mul(cols, sizeof(float)), &dl->dcols, "im2col gradient", A, err);
        break;
    }
    case ENG_L_MAXPOOL:
        if (!(rc = eng_dev_alloc(d, out, &dl->y, "maxpool2d output", A, err)) &&
            !(rc = eng_dev_alloc(d, cap * l->out_size * sizeof(int32_t), &dl->arg, "maxpool2d winners", A, err)))
            rc = eng_dev_alloc(d, in, &dl->dx, "maxpool2d dx", A, err);
        break;
    case ENG_L_AUGMENT:
        if (draws_augment(l) && !(rc = eng_dev_alloc(d, out, &dl->y, "augment output", A, err)))
            rc = eng_dev_alloc(d, in, &dl->dx, "augment dx", A, err);
        break;
    case ENG_L_GAP:
        if (!(rc = eng_dev_alloc(d, out, &dl->y, "global_avg_pool output", A, err)))
            rc = eng_dev_alloc(d, in, &dl->dx, "global_avg_pool dx", A, err);
        break;
    case ENG_L_BATCHNORM: {
        size_t cb = (size_t)l->in_shape[l->in_rank - 1] * sizeof(float);
        if ((rc = eng_dev_alloc(d, out, &dl->y, "batchnorm output", A, err)) ||
            (rc = eng_dev_alloc(d, out, &dl->xhat, "batchnorm xhat", A, err)) ||
            (rc = eng_dev_alloc(d, cb, &dl->mu, "batchnorm mean", A, err)) ||
            (rc = eng_dev_alloc(d, cb, &dl->invstd, "batchnorm invstd", A, err)))
            break;
        rc = eng_dev_alloc(d, 3 * cb, &dl->bnk, "batchnorm scratch", A, err);
        break;
    }
    case ENG_L_DROPOUT:
        if (!(rc = eng_dev_alloc(d, out, &dl->y, "dropout output", A, err)))
            rc = eng_dev_alloc(d, out, &dl->mask, "dropout mask", A, err);
        break;
    case ENG_L_ACT:
        if (l->act != ENG_ACT_NONE) rc = eng_dev_alloc(d, out, &dl->y, "activation output", A, err);
        break;
    case ENG_L_RESIDUAL:
        if ((rc = eng_dev_alloc(d, out, &dl->z, "residual sum", A, err)) ||
            (rc = eng_dev_alloc(d, out, &dl->dcopy, "residual gradient copy", A, err)) ||
            (rc = eng_dev_alloc(d, in, &dl->dx, "residual dx", A, err)))
            break;
        if (l->act != ENG_ACT_NONE) rc = eng_dev_alloc(d, out, &dl->y, "residual output", A, err);
        else dl->y = dl->z;
        if (!rc) rc = alloc_list(d, l->sub, dl->sub, l->nsub, 1, err);
        if (!rc && l->proj) rc = alloc_list(d, l->proj, dl->proj, 1, 1, err);
        break;
    default: /* flatten */
        break;
    }
    return rc;
}

static int alloc_list(dev *d, const eng_layer *ls, dlayer *dls, int n, int nested, hpo_error *err) {
    int first_p = first_param_layer(ls, n), rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = alloc_layer(d, &ls[i], &dls[i], nested || i > first_p, err);
    return rc;
}

int eng_dev_layers_alloc(dev *d, hpo_error *err) { return alloc_list(d, d->m->layers, d->ls, d->m->nlayers, 0, err); }

static void free_list(dev *d, const eng_layer *ls, dlayer *dls, int n) {
    for (int i = 0; dls && i < n; i++) {
        dlayer *dl = &dls[i];
        if (dl->z != dl->y) eng_cuda_free(d->cu, dl->z);
        void *bufs[] = {dl->y, dl->dx, dl->mask, dl->xb, dl->d16, dl->cols, dl->dcols, dl->cols16,
                        dl->arg, dl->xhat, dl->mu, dl->invstd, dl->bnk, dl->dcopy};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) eng_cuda_free(d->cu, bufs[k]);
        if (ls[i].kind == ENG_L_RESIDUAL) {
            free_list(d, ls[i].sub, dl->sub, ls[i].nsub);
            if (ls[i].proj) free_list(d, ls[i].proj, dl->proj, 1);
        }
    }
    free(dls);
}

void eng_dev_layers_free(dev *d) {
    free_list(d, d->m->layers, d->ls, d->m->nlayers);
    d->ls = NULL;
}

/* ---- a step's draws ---- */

static void draw_list(dev *d, hpo_rng *rng, const eng_layer *ls, const dlayer *dls, int n, uint64_t *rec,
                      size_t first, size_t rows, size_t total) {
    for (int i = 0; i < n; i++) {
        const eng_layer *l = &ls[i];
        uint64_t *at = rec + dls[i].rec_off;
        if (draws_dropout(l)) /* eng_dropout_forward's draw, shifted to the rows' first element */
            *at = eng_dropout_key_at(hpo_rng_u64(rng), first * l->in_size);
        if (draws_augment(l)) /* eng_augment_forward_rows's draws */
            eng_augment_draw_rows((int32_t *)(void *)at, (int)rows, (int)first, (int)total, l->translate, l->flip, rng);
        if (l->kind == ENG_L_RESIDUAL) {
            draw_list(d, rng, l->sub, dls[i].sub, l->nsub, rec, first, rows, total);
            if (l->proj) draw_list(d, rng, l->proj, dls[i].proj, 1, rec, first, rows, total);
        }
    }
}

void eng_dev_layers_draw(dev *d, hpo_rng *rng, uint64_t *rec, size_t first, size_t n, size_t total) {
    draw_list(d, rng, d->m->layers, d->ls, d->m->nlayers, rec, first, n, total);
}

/* ---- forward ---- */

static int forward_list(dev *d, const eng_layer *ls, dlayer *dls, int n, const float *x, int B, const uint64_t *rec,
                        const float **out);

static int forward_layer(dev *d, const eng_layer *l, dlayer *dl, const float *x, int B, const uint64_t *rec) {
    int C = l->in_shape[l->in_rank - 1], rc = 0;
    const float *P = params_of(d, l);
    size_t rows = (size_t)B * l->in_size / (size_t)C, n = (size_t)B * l->in_size;
    dl->x = x;
    dl->yo = dl->y;
    switch (l->kind) {
    case ENG_L_DENSE:
        if (h16_layer(d, l)) {
            dl->xbo = dl->xb;
            if (!x) dl->xbo = d->xin16;
            else rc = eng_cuda_to_h16(d->cu, x, dl->xb, n);
            if (!rc)
                rc = eng_cuda_dense_forward_h16(d->cu, dl->xbo, d->pb + l->w_off, P + l->b_off, dl->z, dl->y,
                                                (int)rows, C, l->units, l->act);
        } else {
            rc = eng_cuda_dense_forward(d->cu, x, P + l->w_off, P + l->b_off, dl->z, dl->y, (int)rows, C, l->units,
                                        l->act);
        }
        break;
    case ENG_L_CONV2D: {
        eng_conv2d_shape cs;
        conv_shape(l, B, &cs);
        int crows = cs.N * cs.OH * cs.OW, K = cs.KH * cs.KW * cs.C;
        const uint16_t *x16 = x ? NULL : d->xin16;
        if (h16_layer(d, l)) {
            if (!(rc = eng_cuda_im2col(d->cu, &cs, x, x16, NULL, dl->cols16)))
                rc = eng_cuda_dense_forward_h16(d->cu, dl->cols16, d->pb + l->w_off, P + l->b_off, dl->z, dl->y,
                                                crows, K, l->filters, l->act);
        } else if (!(rc = eng_cuda_im2col(d->cu, &cs, x, x16, dl->cols, NULL))) {
            rc = eng_cuda_dense_forward(d->cu, dl->cols, P + l->w_off, P + l->b_off, dl->z, dl->y, crows, K,
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
            rc = eng_cuda_batchnorm_forward_train(d->cu, x, dl->y, P + l->w_off, P + l->b_off, rm, rv,
                                                  l->momentum, l->eps, dl->xhat, dl->mu, dl->invstd, rows, C);
        else
            rc = eng_cuda_batchnorm_forward_eval(d->cu, x, dl->y, P + l->w_off, P + l->b_off, rm, rv, l->eps,
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
    case ENG_L_RESIDUAL: {
        const float *fy, *py = x;
        size_t no = (size_t)B * l->out_size;
        int Co = l->out_shape[l->out_rank - 1];
        if ((rc = forward_list(d, l->sub, dl->sub, l->nsub, x, B, rec, &fy))) break;
        if (l->proj) {
            if ((rc = forward_layer(d, l->proj, dl->proj, x, B, rec))) break;
            py = dl->proj->yo;
        }
        rc = eng_cuda_add(d->cu, fy, py, dl->z, no);
        if (!rc && l->act != ENG_ACT_NONE) rc = eng_cuda_act_forward(d->cu, l->act, dl->z, dl->y, no / (size_t)Co, (size_t)Co);
        break;
    }
    default: /* flatten */
        dl->yo = x;
        break;
    }
    if (!rc && fp16_layer(d, l) && dl->yo == dl->y)
        rc = eng_cuda_round_fp16(d->cu, dl->y, dl->y, (size_t)B * l->out_size);
    return rc;
}

static int forward_list(dev *d, const eng_layer *ls, dlayer *dls, int n, const float *x, int B, const uint64_t *rec,
                        const float **out) {
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = forward_layer(d, &ls[i], &dls[i], x, B, rec);
        x = dls[i].yo;
    }
    *out = x;
    return rc;
}

int eng_dev_forward(dev *d, const float *x, int B, const uint64_t *rec, const float **out) {
    return forward_list(d, d->m->layers, d->ls, d->m->nlayers, x, B, rec, out);
}

/* ---- backward ---- */

static int backward_list(dev *d, const eng_layer *ls, dlayer *dls, int n, float *dd, int B, int need_dx,
                         const uint64_t *rec, float **dx_out);

/* dd: the output gradient (dev; clobbered); *dx_out: the input gradient,
 * or NULL when !need_dx */
static int backward_layer(dev *d, const eng_layer *l, dlayer *dl, float *dd, int B, int need_dx, const uint64_t *rec,
                          float **dx_out) {
    int C = l->in_shape[l->in_rank - 1], rc = 0;
    size_t rows = (size_t)B * l->in_size / (size_t)C, n = (size_t)B * l->in_size;
    float *dx = need_dx ? dl->dx : NULL;
    const float *P = params_of(d, l);
    switch (l->kind) {
    case ENG_L_DENSE:
        if (h16_layer(d, l))
            rc = eng_cuda_dense_backward_h16(d->cu, dl->xbo, d->pb + l->w_off, dl->z, dl->yo, dd, dl->d16, dx,
                                              d->g + l->w_off, d->g + l->b_off, (int)rows, C, l->units, l->act);
        else
            rc = eng_cuda_dense_backward(d->cu, dl->x, P + l->w_off, dl->z, dl->yo, dd, dx, d->g + l->w_off,
                                         d->g + l->b_off, (int)rows, C, l->units, l->act);
        break;
    case ENG_L_CONV2D: {
        eng_conv2d_shape cs;
        conv_shape(l, B, &cs);
        int crows = cs.N * cs.OH * cs.OW, K = cs.KH * cs.KW * cs.C;
        float *dcols = need_dx ? dl->dcols : NULL;
        if (h16_layer(d, l))
            rc = eng_cuda_dense_backward_h16(d->cu, dl->cols16, d->pb + l->w_off, dl->z, dl->yo, dd, dl->d16, dcols,
                                              d->g + l->w_off, d->g + l->b_off, crows, K, l->filters, l->act);
        else
            rc = eng_cuda_dense_backward(d->cu, dl->cols, P + l->w_off, dl->z, dl->yo, dd, dcols, d->g + l->w_off,
                                         d->g + l->b_off, crows, K, l->filters, l->act);
        if (!rc && need_dx) rc = eng_cuda_col2im(d->cu, &cs, dl->dcols, dl->dx);
        break;
    }
    case ENG_L_MAXPOOL:
        if (l->act == ENG_ACT_RELU)
            rc = eng_cuda_act_backward(d->cu, ENG_ACT_RELU, NULL, dl->y, dd, (size_t)B * l->out_size / (size_t)C,
                                       (size_t)C);
        if (!rc && need_dx)
            rc = eng_cuda_maxpool_backward(d->cu, dd, dl->arg, dl->dx, B, l->in_shape[0], l->in_shape[1], C, l->ph,
                                           l->pw, l->psh, l->psw, l->out_shape[0], l->out_shape[1]);
        break;
    case ENG_L_AUGMENT:
        if (dl->yo == dl->x) dx = need_dx ? dd : NULL;
        else if (need_dx)
            rc = eng_cuda_augment_backward(d->cu, dd, (const int32_t *)(const void *)(rec + dl->rec_off), dl->dx, B,
                                           l->in_shape[0], l->in_shape[1], C);
        break;
    case ENG_L_GAP:
        if (need_dx) rc = eng_cuda_gap_backward(d->cu, dd, dl->dx, B, l->in_shape[0] * l->in_shape[1], C);
        break;
    case ENG_L_BATCHNORM: /* dx in place of dy, as the CPU */
        rc = eng_cuda_batchnorm_backward(d->cu, dd, dl->xhat, dl->invstd, P + l->w_off, need_dx ? dd : NULL,
                                         d->g + l->w_off, d->g + l->b_off, dl->bnk, rows, C);
        dx = need_dx ? dd : NULL;
        break;
    case ENG_L_DROPOUT:
        if (need_dx && dl->yo != dl->x) rc = eng_cuda_dropout_backward(d->cu, dd, dl->mask, dd, n);
        dx = need_dx ? dd : NULL;
        break;
    case ENG_L_ACT:
        if (need_dx && l->act != ENG_ACT_NONE) rc = eng_cuda_act_backward(d->cu, l->act, dl->x, dl->yo, dd, rows, (size_t)C);
        dx = need_dx ? dd : NULL;
        break;
    case ENG_L_RESIDUAL: {
        size_t no = (size_t)B * l->out_size;
        int Co = l->out_shape[l->out_rank - 1];
        float *ds = NULL, *dp = dl->dcopy;
        if (l->act != ENG_ACT_NONE) rc = eng_cuda_act_backward(d->cu, l->act, dl->z, dl->y, dd, no / (size_t)Co, (size_t)Co);
        if (!rc) rc = eng_cuda_copy(d->cu, dl->dcopy, dd, no * sizeof(float));
        if (!rc) rc = backward_list(d, l->sub, dl->sub, l->nsub, dd, B, need_dx, rec, &ds);
        if (!rc && l->proj) rc = backward_layer(d, l->proj, dl->proj, dl->dcopy, B, need_dx, rec, &dp);
        if (!rc && need_dx) rc = eng_cuda_add(d->cu, ds, dp, dl->dx, n);
        break;
    }
    default: /* flatten */
        dx = need_dx ? dd : NULL;
        break;
    }
    if (!rc && dx && d->prec == ENG_PREC_FP16) rc = eng_cuda_round_fp16(d->cu, dx, dx, n);
    *dx_out = dx;
    return rc;
}

/* model_run.c's backward_list: from the last layer down, each layer's dx
 * computed only if a layer below it has parameters or the caller needs it */
static int backward_list(dev *d, const eng_layer *ls, dlayer *dls, int n, float *dd, int B, int need_dx,
                         const uint64_t *rec, float **dx_out) {
    int first_p = first_param_layer(ls, n);
    for (int i = n - 1; i >= 0; i--) {
        if (!need_dx && i < first_p) { /* nothing below needs a gradient any more */
            *dx_out = NULL;
            return 0;
        }
        float *dx = NULL;
        int rc = backward_layer(d, &ls[i], &dls[i], dd, B, i > first_p || need_dx, rec, &dx);
        if (rc) return rc;
        dd = dx;
    }
    *dx_out = dd;
    return 0;
}

int eng_dev_backward(dev *d, int B, const uint64_t *rec) {
    float *dx = NULL;
    return backward_list(d, d->m->layers, d->ls, d->m->nlayers, d->dlogits, B, 0, rec, &dx);
}
