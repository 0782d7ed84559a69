/*
 * model.h - a sequential model built from a JSON template, with residual
 * blocks; forward/backward over its layers; parameters, gradients,
 * optimiser state and batch-norm statistics in one block each.
 *
 * Design notes
 * - Template (jansson): {"layers": [{"dense": {"units": "$units",
 *   "activation": "relu"}}, {"conv2d": {"filters": 32, "kernel": 3,
 *   "padding": "same", "stride": 1}}, {"maxpool2d": {"pool": 2}},
 *   {"global_avg_pool": {}}, {"flatten": {}}, {"dropout": {"rate": 0.2}},
 *   {"batchnorm": {"momentum": 0.99, "epsilon": 0.001}},
 *   {"residual": {"layers": [...], "activation": "relu"}},
 *   {"augment": {"translate": 2, "flip": true}}, {"activation": "gelu"}],
 *   "loss": "...", "optimizer": {...}, "schedule": {...}}. Any number may be
 *   a string "$name", resolved from the trial's params object; a missing
 *   reference, a bad value or an impossible shape returns HPO_EINVAL or
 *   HPO_ESHAPE with hpo_error.field naming it
 *   ("model.layers[3].conv2d.kernel"). "precision": "fp32" on a dense or
 *   conv2d layer keeps it in f32 under mixed precision.
 * - conv2d(relu) followed by maxpool2d applies the relu after the pool (they
 *   commute), visible in eng_model_summary, and the pair runs in chunks of
 *   samples whose conv output fits in L2 (about 1 MB): the full conv output
 *   is never written to memory, forward or backward (the CNN's conv output is
 *   11 MB per batch of 128, and pooling it was memory-bound).
 * - Shapes are per sample: NHWC images {h, w, c} or vectors {n}. dense acts on
 *   the last axis (a flatten is free in NHWC); conv2d/pools need images.
 * - The final activation is fused into the loss (loss.h): the model's output
 *   during training is logits for softmax (always with cross-entropy) and
 *   sigmoid (with binary cross-entropy). eng_model_predict applies it.
 * - residual: y = act(F(x) + P(x)) where F is the block's layers and P the
 *   identity when shapes agree, else a projection: dense (vectors) or a 1x1
 *   conv with stride H_in / H_out (images), so "residual or not" can be a
 *   hyperparameter of the same template.
 * - Memory: activations and per-layer scratch are allocated once for a batch
 *   capacity (eng_model_reserve) and reused; a smaller last batch uses the
 *   same buffers. Parameters etc. are the one-block-per-kind of llm.c.
 *   Building is two steps, shape (eng_model_new_shape: the layer tree and
 *   parameter counts, small) then blocks (eng_model_alloc), so what a model
 *   will need can be computed exactly before anything in proportion to it
 *   is allocated (eng_model_*_bytes below; train.h adds up a training run).
 *   Every allocation failure returns HPO_ENOMEM; nothing aborts.
 * - Precision: fp32; mixed_bf16 (bf16 copies of weights, refreshed once per
 *   step, and of each layer input; GEMM/conv in bf16 with f32 accumulation;
 *   everything else f32); mixed_fp16 (weights, activations and gradients
 *   rounded to IEEE half values, f32 compute on them, f32 master weights;
 *   loss scaling is done by the training loop).
 * Threading: a model is used by one thread at a time.
 */
#ifndef ENG_MODEL_H
#define ENG_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "hpo.h"
#include "loss.h"
#include "optim.h"
#include "rng.h"
#include "tensor.h"

typedef enum eng_precision { ENG_PREC_FP32 = 0, ENG_PREC_BF16, ENG_PREC_FP16 } eng_precision;
int eng_precision_parse(const char *name); /* "fp32", "mixed_bf16", "mixed_fp16"; -1 unknown */
const char *eng_precision_name(int p);

typedef enum eng_layer_kind {
    ENG_L_DENSE = 0, ENG_L_CONV2D, ENG_L_MAXPOOL, ENG_L_GAP, ENG_L_FLATTEN, ENG_L_DROPOUT,
    ENG_L_BATCHNORM, ENG_L_RESIDUAL, ENG_L_AUGMENT, ENG_L_ACT,
} eng_layer_kind;

typedef struct eng_layer eng_layer;
struct eng_layer {
    int kind, act, fp32_only;
    char path[96];                   /* "layers[2].residual.layers[0]" */
    int in_rank, in_shape[3], out_rank, out_shape[3];
    size_t in_size, out_size;        /* per sample */
    size_t w_off, nw, b_off, nb;     /* into the parameter block (gamma/beta for BN) */
    size_t stat_off;                 /* BN running mean [C] then var [C] in the stats block */
    int units, filters, kh, kw, sh, sw, padding;
    int ph, pw, psh, psw;
    float rate, momentum, eps;
    int translate, flip;
    eng_layer *sub;                  /* residual block */
    int nsub;
    eng_layer *proj;                 /* residual projection or NULL */
    /* per-batch state, set by reserve / forward */
    const float *x;                  /* borrowed input of the last forward */
    const float *yo;                 /* output of the last forward (y, or x for identities) */
    float *z, *y, *dx, *dcopy, *mask, *xhat, *invstd;
    uint16_t *xb, *d16;
    const uint16_t *xbo;             /* bf16 input of the last forward: xb, or the caller's bf16 batch */
    int32_t *arg;
    int y_alias;                     /* y is x (identity in this mode) */
    int pool_fused;                  /* conv2d run chunk by chunk with the maxpool2d after it */
};

typedef struct eng_model {
    eng_layer *layers;
    int nlayers;
    int in_rank, in_shape[3];
    size_t in_size;
    int out_dim, final_act, loss;
    eng_optim_config opt;
    eng_schedule sched;
    size_t nparams, nstate, nstats;
    float *params, *grads, *opt_state, *stats;
    float *params_h;      /* fp16-rounded shadow (mixed_fp16) */
    uint16_t *params_b16; /* bf16 shadow (mixed_bf16) */
    int shadow_dirty;
    int precision;
    int cap;              /* batch capacity of the buffers */
    float *input, *dlogits;
    const uint16_t *in_b16; /* the bf16 batch of eng_model_forward_bf16, during that call */
    const eng_backend *be;
    hpo_rng rng;          /* dropout and augmentation */
    /* a data-parallel share (replicas.h): its rows are rows [share_row0,
     * share_row0 + B) of a batch of share_rows rows, and its dropout masks
     * and augmentations are those rows' of the whole batch; share_rows 0:
     * the model runs the whole batch (the default) */
    int share_row0, share_rows;
    double flops_per_sample; /* forward+backward GEMM/conv FLOPs (no dX for the first layer) */
    int upd_on;           /* eng_model_backward_update in progress */
    float upd_lr;
    long upd_t;
    int is_replica;       /* eng_model_replica_new: params and shadows are another model's */
} eng_model;

/* Build from a template and a trial's params (NULL: no references allowed).
 * in_shape: per-sample input shape (rank 1 or 3). n_classes > 0 checks the
 * output width for cross-entropy. Parameters initialised from seed (Glorot
 * uniform weights, zero biases). eng_model_new_shape then eng_model_alloc. */
int eng_model_new(const json_t *tmpl, const json_t *params, int in_rank, const int *in_shape, int n_classes,
                  uint64_t seed, eng_model **out, hpo_error *err);
/* The model without its parameter blocks (params etc. NULL): layers, shapes,
 * parameter counts, optimiser; nothing in proportion to the model's size is
 * allocated, so a template can be checked and its memory estimated (train.h,
 * eng_train_mem) before committing to it. Sizes are bounded: more than
 * ENG_MODEL_MAX_PARAMS parameters or a layer output of more than 2^31 - 1
 * values per sample is HPO_ETOOLARGE naming the layer. */
int eng_model_new_shape(const json_t *tmpl, const json_t *params, int in_rank, const int *in_shape, int n_classes,
                        eng_model **out, hpo_error *err);
/* Whether the optimizer and the schedule of tmpl (with params) hold only
 * keys their kind reads: adam takes no momentum, a cosine schedule no
 * gamma (a tuned "$momentum" given to adam would be searched for nothing).
 * 0, or HPO_EINVAL naming the key and what the kind takes. The builds above
 * accept any optimizer or schedule key, so that a study or a model stored
 * before this check still trains and predicts; a new study is checked
 * (template_check.c), and so is `hpod train`. */
int eng_model_check_keys(const json_t *tmpl, const json_t *params, hpo_error *err);
/* Allocates and initialises the parameter, gradient, optimiser-state and
 * batch-norm blocks of a shape-only model; HPO_ENOMEM (with err, the model
 * left shape-only) when they do not fit. */
int eng_model_alloc(eng_model *m, uint64_t seed, hpo_error *err);
void eng_model_free(eng_model *m);

#define ENG_MODEL_MAX_PARAMS ((size_t)1 << 48)

/* ---- memory (all sizes saturate at SIZE_MAX; eng_alloc_size rounding) ----
 * Bytes that eng_model_alloc allocates (the four blocks). */
size_t eng_model_block_bytes(const eng_model *m);
/* Bytes that eng_model_reserve(cap, precision) allocates: every layer's batch
 * buffers, input and loss gradient, and (not for a replica) the bf16/fp16
 * weight copies. A dry run of the same code, so it cannot drift. */
size_t eng_model_buffer_bytes(const eng_model *m, int cap, int precision, int replica);
/* The same for one layer (a residual block: with its inner layers). */
size_t eng_layer_buffer_bytes(const eng_layer *l, int cap, int precision);
/* Bytes that eng_model_replica_new allocates for m reserved at (cap, precision). */
size_t eng_model_replica_bytes(const eng_model *m, int cap, int precision);
/* The layer taking the most memory (its parameters with gradients and
 * optimiser state, and its batch buffers; residual blocks are looked into),
 * and those bytes; for naming it in a budget error. */
const eng_layer *eng_model_largest_layer(const eng_model *m, int cap, int precision, size_t *bytes);
/* The template field that sizes layer l: "model.layers[1].dense.units",
 * "model.layers[0].conv2d.filters", or its path for other kinds. */
void eng_layer_size_field(const eng_layer *l, char *buf, size_t len);

/* A replica for data parallelism (replicas.h): its own layer buffers,
 * gradients, batch-norm statistics and generator; the parameters and their
 * bf16/fp16 shadows are m's, read-only to it (m refreshes the shadows, see
 * eng_model_sync_shadows, and steps the optimiser). m must be reserved; the
 * replica gets the same capacity and precision. Free it before m. */
int eng_model_replica_new(eng_model *m, eng_model **out);
/* Refresh the bf16/fp16 shadows of changed parameters now (a forward pass
 * does it otherwise), before replicas read them. */
void eng_model_sync_shadows(eng_model *m);

/* A layer's batch buffers (made by eng_model_reserve): free them, or forget
 * them without freeing (in a copy of the layer, which must not share them). */
void eng_layer_free_bufs(eng_layer *l);
void eng_layer_drop_bufs(eng_layer *l);

/* Allocate activations for batches of up to cap samples in this precision.
 * HPO_EINVAL on a shape-only model; HPO_ENOMEM leaves m without buffers
 * (cap 0). */
int eng_model_reserve(eng_model *m, int cap, int precision);

/* Forward pass on m->input[B * in_size] (filled by the caller); train != 0
 * enables dropout, batch statistics and augmentation. *out = logits
 * [B][out_dim] (borrowed). */
int eng_model_forward(eng_model *m, int B, int train, const float **out);
/* The same on a borrowed input x[B * in_size] (no copy; it must stay valid
 * and unchanged until the backward pass is done). */
int eng_model_forward_from(eng_model *m, const float *x, int B, int train, const float **out);
/* Under mixed_bf16 the first layer with parameters may be a bf16 dense
 * layer behind nothing but flatten layers: it converts its input to bf16
 * before the GEMM anyway, so the batch can come in bf16 straight from the
 * uint8 images (the batcher's ENG_BATCH_BF16), which saves a f32 write and a
 * conversion pass per batch. eng_model_bf16_input tells whether this model
 * can; eng_model_forward_bf16 is then eng_model_forward_from on the bf16
 * batch xb[B * in_size] (borrowed the same way). Results are bit-identical
 * to converting a f32 batch (tests/unit/engine/test_model.c). */
int eng_model_bf16_input(const eng_model *m);
int eng_model_bf16_input_at(const eng_model *m, int precision); /* the same, were m reserved in precision */
/* Whether layer l computes in bf16 under `precision`: dense layers, and
 * conv2d layers of 16 input channels or more (a narrower conv stays f32:
 * bound by memory, and oneDNN has no fast bf16 kernel for it), unless the
 * layer asks for fp32. The device path follows the same rule. */
int eng_layer_uses_bf16(int precision, const eng_layer *l);
/* Whether l has parameters, a residual block's inner layers and projection
 * included (backward passes stop below the first layer that has). */
int eng_layer_has_params(const eng_layer *l);
int eng_model_forward_bf16(eng_model *m, const uint16_t *xb, int B, int train, const float **out);
/* Backward from m->dlogits[B][out_dim]; fills m->grads. */
int eng_model_backward(eng_model *m, int B);
/* Backward that also applies the optimiser (m->opt, rate lr, 1-based step
 * t) to each layer as soon as its gradients are complete, while its
 * weights and gradients are still in cache (and refreshes that layer's bf16
 * copy). The same update as eng_model_backward + eng_optim_step; usable when
 * no global gradient information is needed first (no clipnorm, no loss
 * scaling). Leaves the weights current (no params_changed needed). */
int eng_model_backward_update(eng_model *m, int B, float lr, long t);
/* Mark the weights changed (refresh the bf16/fp16 shadows before the next forward). */
static inline void eng_model_params_changed(eng_model *m) { m->shadow_dirty = 1; }

/* Forward FLOPs per sample: 2 per multiply-add of the dense and conv2d
 * layers (residual blocks and their projections included); element-wise
 * ops, pooling and normalisation are not counted. flops_per_sample (3x:
 * forward and backward) is what training costs. */
double eng_model_forward_flops(const eng_model *m);

/* Probabilities (the fused final activation applied) for x[B * in_size]
 * into probs[B * out_dim]; eval mode. */
int eng_model_predict(eng_model *m, const float *x, int B, float *probs);

/* Views of a layer's parameters in the parameter block (borrowed; valid
 * while m lives): dense kernel {I, O}, conv2d kernel {KH, KW, C, F} (HWIO),
 * batchnorm gamma {C}; bias / beta {O}. HPO_EINVAL if the layer has none. */
int eng_layer_param_views(const eng_model *m, const eng_layer *l, eng_tensor *kernel, eng_tensor *bias);
/* Trained weights as files users can load: weights.h. */

/* "dense", "conv2d", ... (the template's name of an eng_layer_kind); "?" */
const char *eng_layer_kind_name(int kind);

/* Total parameter count and a one-line summary for logs. */
void eng_model_summary(const eng_model *m, char *buf, size_t len);

#endif
