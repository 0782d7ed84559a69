/*
 * optim.h - optimisers (sgd with momentum/nesterov, rmsprop, adam, adamw),
 * weight decay, global-norm gradient clipping and learning-rate schedules.
 *
 * Design notes
 * - An optimiser works on whole blocks: the model's parameter block p[n],
 *   gradient block g[n] and one optimiser-state block (eng_optim_state_floats
 *   per parameter: sgd with momentum 1, rmsprop 1 or 2, adam/adamw 2, laid
 *   out as [m: n][v: n]). One pass updates everything: no per-layer loops,
 *   one allocation, one checkpoint write.
 * - Update rules follow PyTorch where Keras and PyTorch differ in form:
 *   sgd: v = mu v + g; p -= lr (nesterov ? g + mu v : v);
 *   rmsprop: s = rho s + (1-rho) g^2; with momentum: b = mu b + g/(sqrt(s)+eps),
 *   p -= lr b; without: p -= lr g/(sqrt(s)+eps);
 *   adam: bias-corrected moments, p -= lr mhat / (sqrt(vhat) + eps);
 *   adamw: adam plus decoupled decay p -= lr wd p. For sgd/rmsprop/adam,
 *   weight_decay is L2 added to the gradient (g += wd p), as in PyTorch.
 *   Defaults: Keras' (adam eps 1e-7, rmsprop rho 0.9, eps 1e-7; adamw wd 0.004
 *   when not given).
 * - Schedules compute the learning rate of a step from the base rate; the
 *   step count is global (epochs * steps_per_epoch + batch), so a resumed run
 *   sees the same rates. Linear warm-up (warmup_steps) multiplies any
 *   schedule by (step+1)/warmup for the first steps.
 * Threading: pure functions on caller memory.
 */
#ifndef ENG_OPTIM_H
#define ENG_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum eng_opt_kind { ENG_OPT_SGD = 0, ENG_OPT_RMSPROP, ENG_OPT_ADAM, ENG_OPT_ADAMW } eng_opt_kind;

typedef struct eng_optim_config {
    int kind;
    float lr;
    float momentum;     /* sgd, rmsprop */
    int nesterov;       /* sgd */
    float beta1, beta2; /* adam */
    float rho;          /* rmsprop */
    float eps;
    float weight_decay;
    float clipnorm;     /* global-norm clip; 0 = off */
} eng_optim_config;

int eng_opt_parse(const char *name); /* -1 if unknown */
const char *eng_opt_name(int kind);
/* Fill the defaults for kind (lr 1e-3, or 1e-2 for sgd). */
void eng_optim_defaults(eng_optim_config *c, int kind);
/* Floats of optimiser state per parameter. */
size_t eng_optim_state_floats(const eng_optim_config *c);

/* The per-step scalars of the folded Adam and AdamW rule, p = p * decay -
 * a * m / (sqrt(v) + e) after g += l2 * p: a = lr sqrt(bc2) / bc1, e = eps
 * sqrt(bc2) (bc_k = 1 - beta_k^t, in double), decay = 1 - lr wd for AdamW
 * (else 1), l2 = wd for Adam (else 0). Shared by the CPU's update and the
 * device's (engine/cuda/optim.cu), so both round them alike. */
typedef struct eng_adam_scalars {
    float a, e, decay, l2;
} eng_adam_scalars;
void eng_adam_scalars_at(const eng_optim_config *c, float lr, long t, eng_adam_scalars *out);

/* One update of p[n] from g[n] (g may be modified: weight decay is folded
 * in). t is the 1-based step count (adam's bias correction); lr the rate of
 * this step. */
void eng_optim_step(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state, size_t n);
/* The same update on the range [off, off + len) of blocks of n_total
 * parameters (state slot k of parameter i at state[k * n_total + i]); lets
 * the model update a layer as soon as its gradients exist (train.c). */
void eng_optim_step_range(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                          size_t n_total, size_t off, size_t len);
/* The same, also writing the bf16 copy pb[off + i] of each updated
 * parameter (mixed_bf16: saves a pass over the weights). */
void eng_optim_step_range_bf16(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                               size_t n_total, size_t off, size_t len, uint16_t *pb);
/* The same with the gradient g + g2 (a data-parallel replica's share,
 * engine/replicas.c): Adam adds g2 on the fly, saving a pass; the other
 * optimisers add it into g first. Bit-identical to adding g2 into g and
 * stepping. pb: the bf16 copy as above, or NULL. */
void eng_optim_step_range_sum(const eng_optim_config *c, float lr, long t, float *p, float *g, const float *g2,
                              float *state, size_t n_total, size_t off, size_t len, uint16_t *pb);
/* Plain scalar reference of the same update, for the tests. */
void eng_optim_step_ref(const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                        size_t n);

/* Multiply g by `unscale`, return the global L2 norm of the result (double
 * accumulation); *finite = 0 if any element is NaN/Inf. */
double eng_grad_unscale_norm(float *g, size_t n, float unscale, int *finite);
/* Scale g so that its norm is at most clipnorm (given its current norm). */
void eng_grad_clip(float *g, size_t n, double norm, float clipnorm);

typedef enum eng_sched_kind {
    ENG_SCHED_CONSTANT = 0,
    ENG_SCHED_STEP,        /* lr * gamma^floor(epoch / step_epochs) */
    ENG_SCHED_PIECEWISE,   /* values[i] for epoch in [boundaries[i-1], boundaries[i]) */
    ENG_SCHED_EXPONENTIAL, /* lr * decay_rate^(step / decay_steps) */
    ENG_SCHED_COSINE,      /* lr * (alpha + (1-alpha) * (1 + cos(pi * min(step, T) / T)) / 2) */
} eng_sched_kind;

#define ENG_SCHED_MAX_PIECES 16

typedef struct eng_schedule {
    int kind;
    double warmup_steps;   /* resolved from warmup_epochs when given */
    double warmup_epochs;  /* used when warmup_steps is 0 */
    double step_epochs, gamma;
    int n_bounds;
    double bounds[ENG_SCHED_MAX_PIECES];      /* in epochs */
    double values[ENG_SCHED_MAX_PIECES + 1];  /* absolute learning rates */
    double decay_rate, decay_steps;           /* exponential; decay_steps 0 = one epoch */
    double cosine_steps, alpha;               /* cosine; cosine_steps 0 = whole run */
} eng_schedule;

int eng_sched_parse(const char *name); /* -1 if unknown */
/* The learning rate of global step `step` (0-based). */
double eng_schedule_lr(const eng_schedule *s, double base_lr, long step, long steps_per_epoch, long total_steps);

#endif
