/* model_run.c - buffers, forward and backward passes and prediction of a
 * model, in fp32, mixed_bf16 and mixed_fp16 (see model.h). */
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "model.h"
#include "ops.h"
#include "tensor.h"

/* ---- buffers ---- */

/* Where reserve's buffers come from: eng_alloc, or nowhere in a dry run,
 * which only adds up what they would take (eng_model_buffer_bytes). Either
 * way bytes is the total; after the first failed allocation nothing more
 * is allocated and failed is set. */
typedef struct arena {
    int dry, failed;
    size_t bytes;
} arena;

static void *take(arena *a, size_t nbytes) {
    a->bytes = eng_size_add(a->bytes, eng_alloc_size(nbytes));
    if (a->dry || a->failed) return NULL;
    void *p = eng_alloc(nbytes);
    if (!p) a->failed = 1;
    return p;
}

static float *fbuf(arena *a, size_t n) { return take(a, eng_size_mul(n ? n : 1, sizeof(float))); }
static void *sbuf(arena *a, size_t n, size_t elt) { return take(a, eng_size_add(eng_size_mul(n, elt), 64)); }

void eng_layer_drop_bufs(eng_layer *l) {
    l->z = l->y = l->dx = l->dcopy = l->mask = l->xhat = l->invstd = NULL;
    l->xb = l->d16 = NULL;
    l->arg = NULL;
    l->x = l->yo = NULL;
    l->xbo = NULL;
    l->y_alias = 0;
}

void eng_layer_free_bufs(eng_layer *l) {
    if (l->z != l->y) free(l->z);
    free(l->y); /* NULL when y_alias */
    free(l->dx);
    free(l->dcopy);
    free(l->mask);
    free(l->xhat);
    free(l->invstd);
    free(l->xb);
    free(l->d16);
    free(l->arg);
    eng_layer_drop_bufs(l);
}

/* A conv whose input has few channels stays f32 under mixed_bf16: oneDNN 2.6
 * has no fast bf16 kernel for it (4x slower than f32 at C = 1, measured with
 * the CNN's first layer), and such a layer is bound by memory, not FLOPs. */
#define BF16_CONV_MIN_CHANNELS 16

static int uses_bf16_at(int precision, const eng_layer *l) {
    if (precision != ENG_PREC_BF16 || l->fp32_only) return 0;
    return l->kind == ENG_L_DENSE || (l->kind == ENG_L_CONV2D && l->in_shape[2] >= BF16_CONV_MIN_CHANNELS);
}

/* a model left in mixed_bf16 by a GPU run (train_cuda.c) on a CPU without
 * bf16 kernels (backend.h: gemm_bf16 NULL) runs its layers in f32 */
static int uses_bf16(const eng_model *m, const eng_layer *l) {
    return m->be->gemm_bf16 && uses_bf16_at(m->precision, l);
}

/* mixed_fp16 rounds the output gradient of a layer that a GPU runs as
 * 16-bit GEMMs to fp16 values after the activation's backward, before the
 * bias sum and the two GEMMs, as the CUDA path does (its GEMMs read fp16) */
static int rounds_dz_fp16(const eng_model *m, const eng_layer *l) {
    return m->precision == ENG_PREC_FP16 && uses_bf16_at(ENG_PREC_BF16, l);
}

/* the activation's backward and the fp16 rounding of dz in place (see
 * rounds_dz_fp16); returns the activation left to the op: none */
static int act_backward_fp16(eng_layer *l, float *d, size_t rows, size_t cols) {
    eng_act_backward(l->act, l->z, l->yo, d, rows, cols);
    eng_round_fp16_n(d, rows * cols);
    return ENG_ACT_NONE;
}

int eng_layer_uses_bf16(int precision, const eng_layer *l) { return uses_bf16_at(precision, l); }

static void reserve_list(eng_layer *ls, int n, size_t cap, int precision, arena *a);

/* Samples per chunk of a pool-fused conv: its output chunk fits in ~1 MB. */
static int pool_chunk(const eng_layer *l) {
    size_t per = l->out_size * sizeof(float), nb = ((size_t)1 << 20) / (per ? per : 1);
    return nb < 1 ? 1 : nb > 4096 ? 4096 : (int)nb;
}

/* A layer's batch buffers for cap samples: allocated into l, or (dry) only
 * counted, l untouched. */
static void reserve_layer(eng_layer *l, size_t cap, int precision, arena *a) {
    size_t in = eng_size_mul(cap, l->in_size), out = eng_size_mul(cap, l->out_size);
    float *y = NULL, *z = NULL, *dx = NULL, *dcopy = NULL, *mask = NULL, *xhat = NULL, *invstd = NULL;
    uint16_t *xb = NULL, *d16 = NULL;
    int32_t *arg = NULL;
    int alias = 0;
    if (!a->dry) eng_layer_free_bufs(l);
    switch (l->kind) {
    case ENG_L_CONV2D:
        if (l->pool_fused) { /* chunk-sized scratch only (conv_pool_forward) */
            size_t nb = (size_t)pool_chunk(l);
            y = z = fbuf(a, nb * l->out_size);
            dx = fbuf(a, in);
            dcopy = fbuf(a, l->nw + l->nb);
            if (uses_bf16_at(precision, l)) {
                xb = sbuf(a, in, sizeof(uint16_t));
                d16 = sbuf(a, nb * l->out_size, sizeof(uint16_t));
            }
            break;
        }
        /* fall through */
    case ENG_L_DENSE:
        y = fbuf(a, out);
        z = eng_act_needs_z(l->act) ? fbuf(a, out) : y;
        dx = fbuf(a, in);
        if (uses_bf16_at(precision, l)) {
            xb = sbuf(a, in, sizeof(uint16_t));
            d16 = sbuf(a, out, sizeof(uint16_t));
        }
        break;
    case ENG_L_MAXPOOL:
        y = fbuf(a, out);
        arg = sbuf(a, out, sizeof(int32_t));
        dx = fbuf(a, in);
        break;
    case ENG_L_GAP:
        y = fbuf(a, out);
        dx = fbuf(a, in);
        break;
    case ENG_L_FLATTEN:
        alias = 1;
        break;
    case ENG_L_DROPOUT:
        y = fbuf(a, out);
        mask = fbuf(a, out);
        break;
    case ENG_L_BATCHNORM:
        y = fbuf(a, out);
        xhat = fbuf(a, out);
        invstd = fbuf(a, (size_t)l->out_shape[l->out_rank - 1]);
        break;
    case ENG_L_AUGMENT:
        y = fbuf(a, out);
        arg = sbuf(a, cap * 3, sizeof(int32_t));
        dx = fbuf(a, in);
        break;
    case ENG_L_ACT:
        if (l->act == ENG_ACT_NONE) alias = 1;
        else y = fbuf(a, out);
        break;
    case ENG_L_RESIDUAL:
        z = fbuf(a, out);
        y = l->act == ENG_ACT_NONE ? z : fbuf(a, out);
        dcopy = fbuf(a, out);
        dx = fbuf(a, in);
        reserve_list(l->sub, l->nsub, cap, precision, a);
        if (l->proj) reserve_layer(l->proj, cap, precision, a);
        break;
    }
    if (a->dry) return;
    l->y = y;
    l->z = z;
    l->dx = dx;
    l->dcopy = dcopy;
    l->mask = mask;
    l->xhat = xhat;
    l->invstd = invstd;
    l->xb = xb;
    l->d16 = d16;
    l->arg = arg;
    l->y_alias = alias;
}

static void reserve_list(eng_layer *ls, int n, size_t cap, int precision, arena *a) {
    for (int i = 0; i < n; i++) reserve_layer(&ls[i], cap, precision, a);
}

static void free_bufs_list(eng_layer *ls, int n) {
    for (int i = 0; i < n; i++) {
        eng_layer_free_bufs(&ls[i]);
        free_bufs_list(ls[i].sub, ls[i].nsub);
        if (ls[i].proj) eng_layer_free_bufs(ls[i].proj);
    }
}

/* Everything eng_model_reserve allocates (or, dry, would allocate). */
static void reserve_all(eng_model *m, size_t cap, int precision, int replica, arena *a) {
    reserve_list(m->layers, m->nlayers, cap, precision, a);
    float *input = fbuf(a, eng_size_mul(cap, m->in_size)), *dlogits = fbuf(a, eng_size_mul(cap, (size_t)m->out_dim));
    void *b16 = NULL, *h = NULL;
    if (!replica && precision == ENG_PREC_BF16) b16 = take(a, eng_size_mul(m->nparams + 1, sizeof(uint16_t)));
    if (!replica && precision == ENG_PREC_FP16) h = fbuf(a, m->nparams);
    if (a->dry) return;
    free(m->input);
    free(m->dlogits);
    m->input = input;
    m->dlogits = dlogits;
    if (replica) return; /* the shadows are the primary's */
    free(m->params_b16);
    free(m->params_h);
    m->params_b16 = b16;
    m->params_h = h;
}

size_t eng_model_buffer_bytes(const eng_model *m, int cap, int precision, int replica) {
    arena a = {1, 0, 0};
    reserve_all((eng_model *)m, (size_t)(cap > 0 ? cap : 1), precision, replica, &a); /* dry: m is only read */
    return a.bytes;
}

size_t eng_layer_buffer_bytes(const eng_layer *l, int cap, int precision) {
    arena a = {1, 0, 0};
    reserve_layer((eng_layer *)l, (size_t)(cap > 0 ? cap : 1), precision, &a); /* dry: l is only read */
    return a.bytes;
}

int eng_model_reserve(eng_model *m, int cap, int precision) {
    if (cap < 1 || precision < 0 || precision > ENG_PREC_FP16 || !m->params) return HPO_EINVAL;
    if (cap == m->cap && precision == m->precision && m->input) return HPO_OK;
    arena a = {0, 0, 0};
    reserve_all(m, (size_t)cap, precision, m->is_replica, &a);
    if (a.failed) { /* no half-reserved model: it holds no buffers, cap 0 */
        free_bufs_list(m->layers, m->nlayers);
        free(m->input);
        free(m->dlogits);
        m->input = m->dlogits = NULL;
        if (!m->is_replica) {
            free(m->params_b16);
            free(m->params_h);
            m->params_b16 = NULL;
            m->params_h = NULL;
        }
        m->cap = 0;
        return HPO_ENOMEM;
    }
    m->precision = precision;
    m->cap = cap;
    m->shadow_dirty = !m->is_replica;
    return HPO_OK;
}

/* ---- forward ---- */

static int fp16_on(const eng_model *m, const eng_layer *l) { return m->precision == ENG_PREC_FP16 && !l->fp32_only; }

/* the f32 parameters a layer computes with (the rounded shadow under fp16) */
static const float *cparams(const eng_model *m, const eng_layer *l) {
    return fp16_on(m, l) ? m->params_h : m->params;
}

static void conv_shape(const eng_layer *l, int B, eng_conv2d_shape *s) {
    (void)eng_conv2d_shape_init(s, B, l->in_shape[0], l->in_shape[1], l->in_shape[2], l->kh, l->kw, l->filters, l->sh,
                                l->sw, l->padding);
}

static int forward_list(eng_model *m, eng_layer *ls, int n, const float *x, int B, int train, const float **out);

static int forward_layer(eng_model *m, eng_layer *l, const float *x, int B, int train) {
    const eng_backend *be = m->be;
    const float *P = cparams(m, l);
    size_t rows = (size_t)B * l->in_size / (size_t)l->in_shape[l->in_rank - 1];
    int C = l->in_shape[l->in_rank - 1], rc = 0;
    l->x = x;
    l->yo = l->y;
    switch (l->kind) {
    case ENG_L_DENSE:
        if (uses_bf16(m, l)) {
            l->xbo = l->xb;
            if (!x && m->in_b16) l->xbo = m->in_b16; /* eng_model_forward_bf16 */
            else eng_f32_to_bf16_n(x, l->xb, rows * C);
            rc = eng_dense_forward_bf16(be, l->xbo, m->params_b16 + l->w_off, m->params + l->b_off, l->z, l->y, (int)rows,
                                        C, l->units, l->act);
        } else {
            eng_dense_forward(be, x, P + l->w_off, P + l->b_off, l->z, l->y, (int)rows, C, l->units, l->act);
        }
        break;
    case ENG_L_CONV2D: {
        eng_conv2d_shape s;
        conv_shape(l, B, &s);
        if (uses_bf16(m, l)) {
            eng_f32_to_bf16_n(x, l->xb, (size_t)B * l->in_size);
            rc = eng_conv2d_forward(be, &s, ENG_BF16, l->xb, m->params_b16 + l->w_off, m->params + l->b_off, l->z, l->y,
                                    l->act);
        } else {
            rc = eng_conv2d_forward(be, &s, ENG_F32, x, P + l->w_off, P + l->b_off, l->z, l->y, l->act);
        }
        break;
    }
    case ENG_L_MAXPOOL:
        eng_maxpool2d_forward(x, l->y, l->arg, B, l->in_shape[0], l->in_shape[1], C, l->ph, l->pw, l->psh, l->psw,
                              l->out_shape[0], l->out_shape[1]);
        if (l->act == ENG_ACT_RELU) /* deferred from the conv before it (model.c) */
            eng_act_forward(ENG_ACT_RELU, l->y, l->y, (size_t)B * l->out_size / C, (size_t)C);
        break;
    case ENG_L_GAP:
        eng_gap_forward(x, l->y, B, l->in_shape[0] * l->in_shape[1], C);
        break;
    case ENG_L_FLATTEN:
        l->yo = x;
        return 0;
    case ENG_L_DROPOUT:
        if (!train || l->rate == 0.0f) {
            l->yo = x;
            return 0;
        }
        eng_dropout_forward_key(x, l->y, l->mask, (size_t)B * l->in_size, l->rate,
                                eng_dropout_key_at(hpo_rng_u64(&m->rng), (size_t)m->share_row0 * l->in_size));
        break;
    case ENG_L_BATCHNORM:
        if (train)
            eng_batchnorm_forward_train(x, l->y, P + l->w_off, P + l->b_off, m->stats + l->stat_off,
                                        m->stats + l->stat_off + C, l->momentum, l->eps, l->xhat, l->invstd, rows, C);
        else
            eng_batchnorm_forward_eval(x, l->y, P + l->w_off, P + l->b_off, m->stats + l->stat_off,
                                       m->stats + l->stat_off + C, l->eps, rows, C);
        break;
    case ENG_L_AUGMENT:
        if (!train || (!l->translate && !l->flip)) {
            l->yo = x;
            return 0;
        }
        eng_augment_forward_rows(x, l->y, l->arg, B, m->share_row0, m->share_rows ? m->share_rows : B, l->in_shape[0],
                                 l->in_shape[1], C, l->translate, l->flip, &m->rng);
        break;
    case ENG_L_ACT:
        if (l->act == ENG_ACT_NONE) {
            l->yo = x;
            return 0;
        }
        eng_act_forward(l->act, x, l->y, rows, (size_t)C);
        break;
    case ENG_L_RESIDUAL: {
        const float *fy, *py = x;
        if ((rc = forward_list(m, l->sub, l->nsub, x, B, train, &fy))) return rc;
        if (l->proj) {
            if ((rc = forward_layer(m, l->proj, x, B, train))) return rc;
            py = l->proj->yo;
        }
        eng_add_forward(fy, py, l->z, (size_t)B * l->out_size);
        if (l->act != ENG_ACT_NONE)
            eng_act_forward(l->act, l->z, l->y, (size_t)B * l->out_size / l->out_shape[l->out_rank - 1],
                            (size_t)l->out_shape[l->out_rank - 1]);
        break;
    }
    }
    if (rc == 0 && fp16_on(m, l)) eng_round_fp16_n(l->y, (size_t)B * l->out_size);
    return rc;
}

/* The optimiser step of one layer's parameters (eng_model_backward_update). */
static void layer_update(eng_model *m, const eng_layer *l) {
    if (!m->upd_on || !l->nw) return;
    size_t off = l->w_off, len = l->nw + l->nb; /* w then b, contiguous */
    if (m->precision == ENG_PREC_BF16)
        eng_optim_step_range_bf16(&m->opt, m->upd_lr, m->upd_t, m->params, m->grads, m->opt_state, m->nparams, off,
                                  len, m->params_b16);
    else
        eng_optim_step_range(&m->opt, m->upd_lr, m->upd_t, m->params, m->grads, m->opt_state, m->nparams, off, len);
}

/* conv2d + maxpool2d chunk by chunk (model.h): the conv output of a chunk
 * stays in cache; the pool writes its slice of the pooled output and argmax. */
static int conv_pool_forward(eng_model *m, eng_layer *cv, eng_layer *pl, const float *x, int B) {
    const eng_backend *be = m->be;
    const float *P = cparams(m, cv);
    int bf = uses_bf16(m, cv), nb = pool_chunk(cv), rc = 0, C = cv->filters;
    size_t in = cv->in_size, po = pl->out_size;
    cv->x = x;
    cv->yo = NULL;
    pl->x = NULL;
    pl->yo = pl->y;
    if (bf) eng_f32_to_bf16_n(x, cv->xb, (size_t)B * in);
    const void *w = bf ? (const void *)(m->params_b16 + cv->w_off) : (const void *)(P + cv->w_off);
    const float *bias = (bf ? m->params : P) + cv->b_off;
    for (int s = 0; s < B && rc == 0; s += nb) {
        int n = B - s < nb ? B - s : nb;
        eng_conv2d_shape sh;
        conv_shape(cv, n, &sh);
        const void *xs = bf ? (const void *)(cv->xb + (size_t)s * in) : (const void *)(x + (size_t)s * in);
        rc = be->conv2d_forward(&sh, bf ? ENG_BF16 : ENG_F32, xs, w, bias, cv->z);
        if (rc) break;
        if (fp16_on(m, cv)) eng_round_fp16_n(cv->z, (size_t)n * cv->out_size);
        eng_maxpool2d_forward(cv->z, pl->y + (size_t)s * po, pl->arg + (size_t)s * po, n, cv->out_shape[0],
                              cv->out_shape[1], C, pl->ph, pl->pw, pl->psh, pl->psw, pl->out_shape[0], pl->out_shape[1]);
    }
    if (rc == 0 && pl->act == ENG_ACT_RELU) eng_act_forward(ENG_ACT_RELU, pl->y, pl->y, (size_t)B * po / C, (size_t)C);
    if (rc == 0 && fp16_on(m, pl)) eng_round_fp16_n(pl->y, (size_t)B * po);
    return rc;
}

static int conv_pool_backward(eng_model *m, eng_layer *cv, eng_layer *pl, float *d, int B, int need_dx, float **dx_out) {
    const eng_backend *be = m->be;
    const float *P = cparams(m, cv);
    int bf = uses_bf16(m, cv), nb = pool_chunk(cv), rc = 0, C = cv->filters;
    size_t in = cv->in_size, po = pl->out_size, co = cv->out_size;
    float *dw = m->grads + cv->w_off, *db = m->grads + cv->b_off, *dwc = cv->dcopy, *dbc = cv->dcopy + cv->nw;
    if (pl->act == ENG_ACT_RELU) eng_act_backward(ENG_ACT_RELU, NULL, pl->y, d, (size_t)B * po / C, (size_t)C);
    memset(dw, 0, cv->nw * sizeof *dw);
    memset(db, 0, cv->nb * sizeof *db);
    const void *w = bf ? (const void *)(m->params_b16 + cv->w_off) : (const void *)(P + cv->w_off);
    for (int s = 0; s < B && rc == 0; s += nb) {
        int n = B - s < nb ? B - s : nb;
        eng_conv2d_shape sh;
        conv_shape(cv, n, &sh);
        eng_maxpool2d_backward(d + (size_t)s * po, pl->arg + (size_t)s * po, cv->z, n, cv->out_shape[0],
                               cv->out_shape[1], C, pl->out_shape[0], pl->out_shape[1]);
        if (m->precision == ENG_PREC_FP16) eng_round_fp16_n(cv->z, (size_t)n * co);
        const void *dd = cv->z, *xs = bf ? (const void *)(cv->xb + (size_t)s * in) : (const void *)(cv->x + (size_t)s * in);
        if (bf) {
            eng_f32_to_bf16_n(cv->z, cv->d16, (size_t)n * co);
            dd = cv->d16;
        }
        if ((rc = be->conv2d_backward_weights(&sh, bf ? ENG_BF16 : ENG_F32, xs, dd, dwc, dbc))) break;
        for (size_t i = 0; i < cv->nw; i++) dw[i] += dwc[i];
        for (size_t i = 0; i < cv->nb; i++) db[i] += dbc[i];
        if (need_dx) rc = be->conv2d_backward_data(&sh, bf ? ENG_BF16 : ENG_F32, dd, w, cv->dx + (size_t)s * in);
    }
    if (rc == 0 && need_dx && m->precision == ENG_PREC_FP16) eng_round_fp16_n(cv->dx, (size_t)B * in);
    if (rc == 0) layer_update(m, cv);
    *dx_out = need_dx ? cv->dx : NULL;
    return rc;
}

static int forward_list(eng_model *m, eng_layer *ls, int n, const float *x, int B, int train, const float **out) {
    for (int i = 0; i < n; i++) {
        if (ls[i].pool_fused && i + 1 < n) {
            int rc = conv_pool_forward(m, &ls[i], &ls[i + 1], x, B);
            if (rc) return rc;
            x = ls[++i].yo;
            continue;
        }
        int rc = forward_layer(m, &ls[i], x, B, train);
        if (rc) return rc;
        x = ls[i].yo;
    }
    *out = x;
    return 0;
}

static void refresh_shadows(eng_model *m) {
    if (!m->shadow_dirty) return;
    if (m->precision == ENG_PREC_BF16) eng_f32_to_bf16_n(m->params, m->params_b16, m->nparams);
    if (m->precision == ENG_PREC_FP16) {
        memcpy(m->params_h, m->params, m->nparams * sizeof(float));
        eng_round_fp16_n(m->params_h, m->nparams);
    }
    m->shadow_dirty = 0;
}

int eng_model_forward_from(eng_model *m, const float *x, int B, int train, const float **out) {
    if (B < 1 || B > m->cap) return HPO_EINVAL;
    refresh_shadows(m);
    if (m->precision == ENG_PREC_FP16) { /* rounded in our own buffer, never the caller's */
        if (x != m->input) memcpy(m->input, x, (size_t)B * m->in_size * sizeof *x);
        eng_round_fp16_n(m->input, (size_t)B * m->in_size);
        x = m->input;
    }
    return forward_list(m, m->layers, m->nlayers, x, B, train, out);
}

int eng_model_bf16_input_at(const eng_model *m, int precision) {
    for (int i = 0; i < m->nlayers; i++) {
        const eng_layer *l = &m->layers[i];
        if (l->kind == ENG_L_FLATTEN) continue;
        return l->kind == ENG_L_DENSE && uses_bf16_at(precision, l);
    }
    return 0;
}

int eng_model_bf16_input(const eng_model *m) { return eng_model_bf16_input_at(m, m->precision); }

int eng_model_forward_bf16(eng_model *m, const uint16_t *xb, int B, int train, const float **out) {
    if (B < 1 || B > m->cap || !xb || !eng_model_bf16_input(m)) return HPO_EINVAL;
    refresh_shadows(m);
    m->in_b16 = xb; /* the flatten layers pass x = NULL through to the dense layer */
    int rc = forward_list(m, m->layers, m->nlayers, NULL, B, train, out);
    m->in_b16 = NULL;
    return rc;
}

void eng_model_sync_shadows(eng_model *m) { refresh_shadows(m); }

int eng_model_forward(eng_model *m, int B, int train, const float **out) {
    return eng_model_forward_from(m, m->input, B, train, out);
}

/* ---- backward ---- */

static int backward_list(eng_model *m, eng_layer *ls, int n, float *d, int B, int need_dx, float **dx_out);


/* d: gradient of the layer's output (clobbered). *dx_out: gradient of its
 * input (l->dx or d itself), NULL when !need_dx. */
static int backward_layer(eng_model *m, eng_layer *l, float *d, int B, int need_dx, float **dx_out) {
    const eng_backend *be = m->be;
    const float *P = cparams(m, l);
    float *G = m->grads, *dx = need_dx ? l->dx : NULL;
    size_t rows = (size_t)B * l->in_size / (size_t)l->in_shape[l->in_rank - 1];
    int C = l->in_shape[l->in_rank - 1], rc = 0;
    switch (l->kind) {
    case ENG_L_DENSE:
        if (uses_bf16(m, l))
            rc = eng_dense_backward_bf16(be, l->xbo, m->params_b16 + l->w_off, l->z, l->yo, d, l->d16, dx, G + l->w_off,
                                         G + l->b_off, (int)rows, C, l->units, l->act);
        else
            eng_dense_backward(be, l->x, P + l->w_off, l->z, l->yo, d, dx, G + l->w_off, G + l->b_off, (int)rows, C,
                               l->units,
                               rounds_dz_fp16(m, l) ? act_backward_fp16(l, d, rows, (size_t)l->units) : l->act);
        break;
    case ENG_L_CONV2D: {
        eng_conv2d_shape s;
        conv_shape(l, B, &s);
        if (uses_bf16(m, l))
            rc = eng_conv2d_backward(be, &s, ENG_BF16, l->xb, m->params_b16 + l->w_off, l->z, l->yo, d, l->d16, dx,
                                     G + l->w_off, G + l->b_off, l->act);
        else
            rc = eng_conv2d_backward(be, &s, ENG_F32, l->x, P + l->w_off, l->z, l->yo, d, NULL, dx, G + l->w_off,
                                     G + l->b_off,
                                     rounds_dz_fp16(m, l)
                                         ? act_backward_fp16(l, d, (size_t)s.N * s.OH * s.OW, (size_t)s.OC)
                                         : l->act);
        break;
    }
    case ENG_L_MAXPOOL:
        if (l->act == ENG_ACT_RELU) eng_act_backward(ENG_ACT_RELU, NULL, l->y, d, (size_t)B * l->out_size / C, (size_t)C);
        if (dx)
            eng_maxpool2d_backward(d, l->arg, dx, B, l->in_shape[0], l->in_shape[1], C, l->out_shape[0],
                                   l->out_shape[1]);
        break;
    case ENG_L_GAP:
        if (dx) eng_gap_backward(d, dx, B, l->in_shape[0] * l->in_shape[1], C);
        break;
    case ENG_L_FLATTEN:
        dx = need_dx ? d : NULL;
        break;
    case ENG_L_DROPOUT:
        if (need_dx && l->yo != l->x) eng_dropout_backward(d, l->mask, d, (size_t)B * l->in_size);
        dx = need_dx ? d : NULL;
        break;
    case ENG_L_BATCHNORM:
        eng_batchnorm_backward(d, l->xhat, l->invstd, P + l->w_off, d, G + l->w_off, G + l->b_off, rows, C);
        dx = need_dx ? d : NULL;
        break;
    case ENG_L_AUGMENT:
        if (dx) {
            if (l->yo == l->x) dx = d;
            else eng_augment_backward(d, l->arg, dx, B, l->in_shape[0], l->in_shape[1], C);
        }
        break;
    case ENG_L_ACT:
        if (need_dx) eng_act_backward(l->act, l->x, l->yo, d, rows, (size_t)C);
        dx = need_dx ? d : NULL;
        break;
    case ENG_L_RESIDUAL: {
        size_t no = (size_t)B * l->out_size;
        int Co = l->out_shape[l->out_rank - 1];
        if (l->act != ENG_ACT_NONE) eng_act_backward(l->act, l->z, l->y, d, no / Co, (size_t)Co);
        memcpy(l->dcopy, d, no * sizeof *d);
        float *ds = NULL, *dp = l->dcopy;
        if ((rc = backward_list(m, l->sub, l->nsub, d, B, need_dx, &ds))) return rc;
        if (l->proj && (rc = backward_layer(m, l->proj, l->dcopy, B, need_dx, &dp))) return rc;
        if (dx) eng_add_forward(ds, dp, dx, (size_t)B * l->in_size);
        break;
    }
    }
    if (rc == 0 && dx && m->precision == ENG_PREC_FP16) eng_round_fp16_n(dx, (size_t)B * l->in_size);
    if (rc == 0 && l->kind != ENG_L_RESIDUAL) layer_update(m, l);
    *dx_out = dx;
    return rc;
}

int eng_layer_has_params(const eng_layer *l) {
    if (l->nw) return 1;
    if (l->kind != ENG_L_RESIDUAL) return 0;
    for (int i = 0; i < l->nsub; i++)
        if (eng_layer_has_params(&l->sub[i])) return 1;
    return l->proj != NULL;
}

/* Input gradients are needed only down to the first layer with parameters:
 * the gradient of the model input itself is never used (flatten, augment,
 * dropout in front of the first dense layer do not change that). */
static int backward_list(eng_model *m, eng_layer *ls, int n, float *d, int B, int need_dx, float **dx_out) {
    int first_p = n; /* index of the first layer with parameters */
    for (int i = 0; i < n; i++)
        if (eng_layer_has_params(&ls[i])) {
            first_p = i;
            break;
        }
    for (int i = n - 1; i >= 0; i--) {
        if (!need_dx && i < first_p) { /* nothing below needs a gradient any more */
            *dx_out = NULL;
            return 0;
        }
        float *dx = NULL;
        if (i >= 1 && ls[i - 1].pool_fused) {
            int rc = conv_pool_backward(m, &ls[i - 1], &ls[i], d, B, i - 1 > first_p || need_dx, &dx);
            if (rc) return rc;
            d = dx;
            i--;
            continue;
        }
        int rc = backward_layer(m, &ls[i], d, B, i > first_p || need_dx, &dx);
        if (rc) return rc;
        d = dx;
    }
    *dx_out = d;
    return 0;
}

int eng_model_backward(eng_model *m, int B) {
    if (B < 1 || B > m->cap) return HPO_EINVAL;
    if (m->precision == ENG_PREC_FP16) eng_round_fp16_n(m->dlogits, (size_t)B * m->out_dim);
    float *dx = NULL;
    int rc = backward_list(m, m->layers, m->nlayers, m->dlogits, B, 0, &dx);
    if (rc == 0 && m->precision == ENG_PREC_FP16) eng_round_fp16_n(m->grads, m->nparams);
    return rc;
}

int eng_model_backward_update(eng_model *m, int B, float lr, long t) {
    if (m->precision == ENG_PREC_FP16) return HPO_EINVAL; /* needs the loss-scale check first */
    if (m->shadow_dirty) refresh_shadows(m);
    m->upd_on = 1;
    m->upd_lr = lr;
    m->upd_t = t;
    int rc = eng_model_backward(m, B);
    m->upd_on = 0;
    return rc;
}

int eng_model_predict(eng_model *m, const float *x, int B, float *probs) {
    if (m->cap < 1) return HPO_EINVAL;
    for (int s = 0; s < B; s += m->cap) {
        int n = B - s < m->cap ? B - s : m->cap;
        const float *out;
        memcpy(m->input, x + (size_t)s * m->in_size, (size_t)n * m->in_size * sizeof(float));
        int rc = eng_model_forward(m, n, 0, &out);
        if (rc) return rc;
        eng_act_forward(m->final_act, out, probs + (size_t)s * m->out_dim, (size_t)n, (size_t)m->out_dim);
    }
    return 0;
}
