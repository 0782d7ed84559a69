/*
 * train_cuda_internal.h - what the two files of the device training loop
 * share: train_cuda.c (the run: device blocks, datasets, epochs, steps and
 * their records, graphs, data-parallel replicas: one dev each) and
 * train_cuda_layers.c (each layer's device buffers and the forward and
 * backward passes over a layer list, residual blocks recursing into
 * theirs). Not part of the engine's interface.
 *
 * Design notes
 * - One dev per run, used by one thread. Every device allocation goes
 *   through eng_dev_alloc, which in a dry run (plan set) only adds the size
 *   up: the memory budget is the allocating code itself.
 * - mixed_fp16 is model_run.c's: the layers compute with ph (the
 *   parameters rounded to fp16 values), the model's input, each layer's
 *   output (but an fp32-only layer's) and every input gradient are rounded
 *   to fp16 values, and so are the loss gradient and the gradient block;
 *   the GEMMs of dense and conv2d layers run in fp16 as mixed_bf16's run in
 *   bf16 (with the output gradient rounded to fp16 before them, where the
 *   CPU multiplies it in f32). The loss scale is on the device
 *   (eng_cuda_scaler).
 * - A step's record (8-byte words): REC_SC_WORDS of the optimiser's
 *   scalars, then each drawing layer's draws (a dropout key; (ty, tx,
 *   flipped) int32 per sample of an augment layer) at its rec_off, in the
 *   order the CPU's forward pass draws them (eng_dev_layers_draw).
 */
#ifndef ENG_TRAIN_CUDA_INTERNAL_H
#define ENG_TRAIN_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_ops.h"
#include "model.h"
#include "train.h"

/* a layer's device buffers (capacity bs) and its last forward; a residual
 * block's sub-layers and projection have tables of their own */
typedef struct dlayer dlayer;
struct dlayer {
    float *z, *y, *dx, *mask;
    float *cols, *dcols; /* conv2d: im2col rows (f32 layers) and their gradient */
    uint16_t *cols16;    /* conv2d in 16 bits: the rows in 16 bits */
    int32_t *arg;        /* maxpool2d: the winners */
    float *xhat, *mu, *invstd, *bnk; /* batchnorm: what backward needs, its scratch */
    size_t rec_off;      /* dropout, augment: its draws' place in a step's record (words) */
    uint16_t *xb, *d16;
    const float *x, *yo;
    const uint16_t *xbo;
    float *dcopy;        /* residual: the output gradient kept for the shortcut */
    dlayer *sub, *proj;  /* residual: the sub-layers' tables, the projection's */
};

typedef struct dev {
    eng_cuda *cu;
    int owns_cu;             /* closes cu; a replica on an earlier replica's GPU shares its context */
    eng_model *m;
    int dev, prec, bs, bf16_input;
    dlayer *ls;
    float *p, *g, *s;        /* parameters, gradients, optimiser state */
    float *st;               /* batchnorm running statistics (m->stats), or NULL */
    uint16_t *pb;            /* 16-bit copy of p (mixed_bf16: bf16, mixed_fp16: fp16) */
    float *ph;               /* p rounded to fp16 values (mixed_fp16: what the layers compute with) */
    eng_cuda_scaler *scaler; /* mixed_fp16's loss scale (cuda_ops.h) */
    void *x_all[2];          /* the training and (when another) validation dataset */
    const eng_dataset *shared[2]; /* the datasets whose device copies (cuda_data.h) it holds */
    int32_t *y_all[2];
    float *t_all[2];
    uint32_t *order, *vidx;  /* the epoch's training order; the validation rows */
    float *xin, *dlogits;
    uint16_t *xin16;
    int32_t *lab;
    float *tgt;
    double *sums, *vsums;
    double *norm; /* the gradient norm, 1 when it is finite (else 0), the steps skipped for that */
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

/* what an allocation holds, for eng_cuda_mem */
enum { MEM_WEIGHTS, MEM_ACTIVATIONS, MEM_DATA };

/* One device allocation (HPO_ENOMEM naming `what` and the bytes), or in a
 * dry run (d->plan) its size added to the plan's `kind`. */
int eng_dev_alloc(dev *d, size_t bytes, void *out, const char *what, int kind, hpo_error *err);

/* The layer tables of d->m (host) and each drawing layer's rec_off, adding
 * the draws' words to d->rec_words (which starts at REC_SC_WORDS). */
int eng_dev_layers_init(dev *d);
/* Every layer's device buffers (or, with d->plan, their sizes). */
int eng_dev_layers_alloc(dev *d, hpo_error *err);
/* Frees them and the tables (what was allocated; NULL ok). */
void eng_dev_layers_free(dev *d);
/* One training step's draws from rng (the model's generator, or a copy of
 * it for another replica) into its record (host), for the n rows from
 * `first` of a batch of `total` rows: the draws of the whole batch, the
 * record those of its rows (eng_dropout_key_at, eng_augment_forward_rows). */
void eng_dev_layers_draw(dev *d, hpo_rng *rng, uint64_t *rec, size_t first, size_t n, size_t total);
/* The forward pass of a batch of B rows x (dev; NULL: the 16-bit batch
 * xin16); rec (dev): the step's record (training), or NULL (evaluation).
 * *out: the logits (dev). */
int eng_dev_forward(dev *d, const float *x, int B, const uint64_t *rec, const float **out);
/* The backward pass from d->dlogits into the gradient block, down to the
 * first layer with parameters; rec: the step's record. */
int eng_dev_backward(dev *d, int B, const uint64_t *rec);

#endif
