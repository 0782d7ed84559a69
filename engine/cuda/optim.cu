/* optim.cu - the gradient norm, the optimisers and mixed_fp16's loss scale
 * on the device (see cuda_ops.h and optim.h): one kernel pass over the
 * whole parameter block per update, with clipping folded in.
 *
 * The update rules are optim.c's, per element: sgd and rmsprop as
 * step_scalar, adam and adamw in the folded form of adam_scalar (bias
 * correction in the two scalars a and e, decoupled decay as a factor),
 * with those scalars computed on the host by optim.c's own
 * eng_adam_scalars_at, passed by value or (the _dev form, graph replay)
 * read from device memory. The norm is two passes: per-block partial sums in double into the
 * context's scratch, then one block folds them in a fixed order (the same
 * result on every run). */
#include <math.h>

#include "cuda_internal.h"

#define NORM_BLOCKS (CU_SCRATCH / 2)

/* scale (dev, or NULL): unscale = 1 / *scale (eng_cuda_grad_unscale_norm),
 * each element first rounded to fp16 when round16 (mixed_fp16's gradients) */
static __global__ void norm_partial_k(float *g, size_t n, float unscale, const float *scale, int round16,
                                      double *scratch) {
    __shared__ double s_sum[CU_THREADS];
    __shared__ float s_chk[CU_THREADS];
    double acc = 0.0;
    float chk = 0.0f;
    if (scale) unscale = (float)(1.0 / (double)*scale); /* the CPU's (float)(1.0 / loss_scale) */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = g[i];
        if (round16) v = cu_round_fp16(v);
        if (unscale != 1.0f || round16) g[i] = v = v * unscale;
        acc += (double)v * v;
        chk += v - v; /* NaN if any element is NaN or Inf */
    }
    s_sum[threadIdx.x] = acc;
    s_chk[threadIdx.x] = chk;
    __syncthreads();
    for (int w = CU_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            s_sum[threadIdx.x] += s_sum[threadIdx.x + w];
            s_chk[threadIdx.x] += s_chk[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        scratch[blockIdx.x] = s_sum[0];
        scratch[NORM_BLOCKS + blockIdx.x] = s_chk[0] == 0.0f ? 1.0 : 0.0;
    }
}

static __global__ void norm_final_k(const double *scratch, int blocks, double *out) {
    if (threadIdx.x != 0) return;
    double s = 0.0, fin = 1.0;
    for (int b = 0; b < blocks; b++) {
        s += scratch[b];
        if (scratch[NORM_BLOCKS + b] == 0.0) fin = 0.0;
    }
    out[0] = sqrt(s);
    out[1] = fin != 0.0 && isfinite(s) ? 1.0 : 0.0;
}

static int norm_launch(eng_cuda *cu, float *g, size_t n, float unscale, const float *scale, int round16,
                       double *out) {
    CU_READY(cu);
    unsigned blocks = cu_grid(n);
    if (blocks > NORM_BLOCKS) blocks = NORM_BLOCKS;
    norm_partial_k<<<blocks, CU_THREADS, 0, cu->stream>>>(g, n, unscale, scale, round16, cu->scratch);
    int rc = cu_launched(cu, "gradient norm");
    if (rc) return rc;
    norm_final_k<<<1, 32, 0, cu->stream>>>(cu->scratch, (int)blocks, out);
    return cu_launched(cu, "gradient norm");
}

extern "C" int eng_cuda_grad_norm(eng_cuda *cu, float *g, size_t n, float unscale, double *out) {
    return norm_launch(cu, g, n, unscale, NULL, 0, out);
}

extern "C" int eng_cuda_grad_unscale_norm(eng_cuda *cu, float *g, size_t n, const eng_cuda_scaler *s, double *out) {
    return norm_launch(cu, g, n, 1.0f, &s->scale, 1, out);
}

/* train.c's bookkeeping of a mixed_fp16 step, on the device */
static __global__ void scaler_k(const double *norm, eng_cuda_scaler *s, int growth_interval, float max_scale) {
    if (threadIdx.x == 0 && blockIdx.x == 0) eng_cuda_scaler_step(s, norm[1] != 0.0, growth_interval, max_scale);
}

extern "C" int eng_cuda_scaler_update(eng_cuda *cu, const double *norm, eng_cuda_scaler *s, int growth_interval,
                                      float max_scale) {
    CU_READY(cu);
    scaler_k<<<1, 32, 0, cu->stream>>>(norm, s, growth_interval, max_scale);
    return cu_launched(cu, "loss scale update");
}

typedef struct opt_args { /* the configuration: the same every step */
    int kind, nesterov;
    float mu, rho, eps, wd;
    float b1, b2;
    float clipnorm;
} opt_args;

/* g + wd * p rounded twice, as optim.c's step_scalar does, not contracted
 * into one fused multiply-add: where wd * p nearly cancels g the fused form
 * keeps bits the CPU drops, and RMSprop's g / (sqrt(s) + eps) magnifies the
 * difference (2e-4 of the update, seen on an H200; 2e-6 rounded twice) */
static __device__ __forceinline__ float l2_term(float g, float wd, float p) { return __fadd_rn(g, __fmul_rn(wd, p)); }

/* hs: the step's scalars by value, unless a.sc (dev) is given (entry
 * *a.sc_index of a table with a.sc_stride bytes per entry when sc_index is);
 * a.p16, a.ph: the copies to write, or NULL */
static __global__ void optim_k(opt_args o, eng_cuda_opt_scalars hs, eng_cuda_step_args a, float *p, float *g,
                               float *s0, float *s1, size_t n, int fp16) {
    const double *norm = a.norm;
    float k = 1.0f;
    if (norm) {
        if (norm[1] == 0.0) { /* gradients not finite: no update, counted (the caller reports it) */
            if (a.skipped && blockIdx.x == 0 && threadIdx.x == 0) *a.skipped += 1.0;
            return;
        }
        if (o.clipnorm > 0.0f && norm[0] > o.clipnorm) k = (float)(o.clipnorm / norm[0]);
    }
    const eng_cuda_opt_scalars *ds = a.sc;
    if (ds && a.sc_index)
        ds = (const eng_cuda_opt_scalars *)(const void *)((const char *)ds + (size_t)*a.sc_index * a.sc_stride);
    const eng_cuda_opt_scalars sc = ds ? *ds : hs;
    const float lr = sc.lr;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        if (k != 1.0f) g[i] = gi = gi * k;
        float pi = p[i];
        switch (o.kind) {
        case ENG_OPT_SGD:
            if (o.wd != 0.0f) gi = l2_term(gi, o.wd, pi);
            if (o.mu != 0.0f) {
                float v = o.mu * s0[i] + gi;
                s0[i] = v;
                pi -= lr * (o.nesterov ? gi + o.mu * v : v);
            } else {
                pi -= lr * gi;
            }
            break;
        case ENG_OPT_RMSPROP: {
            if (o.wd != 0.0f) gi = l2_term(gi, o.wd, pi);
            float s = o.rho * s0[i] + (1.0f - o.rho) * gi * gi;
            s0[i] = s;
            float u = gi / (sqrtf(s) + o.eps);
            if (o.mu != 0.0f) {
                u = o.mu * s1[i] + u;
                s1[i] = u;
            }
            pi -= lr * u;
            break;
        }
        default: { /* adam, adamw */
            gi += sc.adam.l2 * pi;
            float m = o.b1 * s0[i] + (1.0f - o.b1) * gi;
            float v = o.b2 * s1[i] + (1.0f - o.b2) * gi * gi;
            s0[i] = m;
            s1[i] = v;
            pi = pi * sc.adam.decay - sc.adam.a * m / (sqrtf(v) + sc.adam.e);
            break;
        }
        }
        p[i] = pi;
        if (a.p16) a.p16[i] = cu_f32_to_h16(pi, fp16);
        if (a.ph) a.ph[i] = cu_round_fp16(pi);
    }
}

static int optim_launch(eng_cuda *cu, const eng_optim_config *c, const eng_cuda_opt_scalars *hs,
                        const eng_cuda_step_args *a, float *p, float *g, float *state, size_t n) {
    CU_READY(cu);
    if (!n) return 0;
    if (c->kind < ENG_OPT_SGD || c->kind > ENG_OPT_ADAMW) return cu_fail(cu, HPO_EINTERNAL, "unknown optimiser %d", c->kind);
    opt_args o;
    memset(&o, 0, sizeof o);
    o.kind = c->kind;
    o.nesterov = c->nesterov;
    o.mu = c->momentum;
    o.rho = c->rho;
    o.eps = c->eps;
    o.wd = c->weight_decay;
    o.b1 = c->beta1;
    o.b2 = c->beta2;
    o.clipnorm = c->clipnorm;
    size_t per = eng_optim_state_floats(c);
    float *s0 = per >= 1 ? state : NULL, *s1 = per >= 2 ? state + n : NULL;
    optim_k<<<cu_grid(n), CU_THREADS, 0, cu->stream>>>(o, *hs, *a, p, g, s0, s1, n, cu->half_fp16);
    return cu_launched(cu, "optimiser step");
}

extern "C" int eng_cuda_optim_step(eng_cuda *cu, const eng_optim_config *c, float lr, long t, float *p, float *g,
                                   float *state, size_t n, const double *norm) {
    eng_cuda_opt_scalars hs;
    eng_cuda_opt_scalars_at(c, lr, t, &hs);
    eng_cuda_step_args a;
    memset(&a, 0, sizeof a);
    a.norm = norm;
    return optim_launch(cu, c, &hs, &a, p, g, state, n);
}

extern "C" int eng_cuda_optim_step_dev(eng_cuda *cu, const eng_optim_config *c, const eng_cuda_step_args *a, float *p,
                                       float *g, float *state, size_t n) {
    if (!a->sc) return cu_fail(cu, HPO_EINTERNAL, "optimiser step: no scalars");
    eng_cuda_opt_scalars unused;
    memset(&unused, 0, sizeof unused);
    return optim_launch(cu, c, &unused, a, p, g, state, n);
}
