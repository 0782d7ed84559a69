/* batchnorm.cu - batch normalisation over the last dimension on the device
 * (see cuda_ops.h), ops_misc.c's arithmetic: in training, per channel the
 * mean and then the variance of the batch in double (two passes), invstd
 * = 1 / sqrt(var + eps), the running statistics moved by momentum (the
 * variance unbiased), xhat and y = gamma xhat + beta in f32; in evaluation
 * the running statistics folded into one scale and shift per channel; the
 * backward's two per-channel sums in double, then dx element by element.
 * One block per channel does a channel's sums (a fixed tree: the same
 * result every run; the CPU adds in row order, so the last bits of a
 * double sum may differ from it). */
#include "cuda_internal.h"

#define BN_THREADS 256

/* the block's sum of v (double), valid in every thread */
static __device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = BN_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* block c: the statistics of channel c; mu and invstd for the normalise */
static __global__ void bn_stats_k(const float *x, size_t M, int C, float momentum, float eps, float *run_mean,
                                  float *run_var, float *mu, float *invstd) {
    __shared__ double sh[BN_THREADS];
    int c = blockIdx.x;
    double s = 0.0;
    for (size_t m = threadIdx.x; m < M; m += BN_THREADS) s += x[m * C + c];
    double mean = block_sum(s, sh) / (double)M;
    double q = 0.0;
    for (size_t m = threadIdx.x; m < M; m += BN_THREADS) {
        double t = x[m * C + c] - mean;
        q += t * t;
    }
    double var = block_sum(q, sh);
    if (threadIdx.x == 0) {
        double v = var / (double)M;
        invstd[c] = (float)(1.0 / sqrt(v + eps));
        mu[c] = (float)mean;
        double unbiased = M > 1 ? var / (double)(M - 1) : v;
        /* rounded as the CPU rounds (no fused multiply-add): the running
         * statistics carry over every step */
        run_mean[c] = __fadd_rn(__fmul_rn(momentum, run_mean[c]), __fmul_rn(1.0f - momentum, (float)mean));
        run_var[c] = __fadd_rn(__fmul_rn(momentum, run_var[c]), __fmul_rn(1.0f - momentum, (float)unbiased));
    }
}

static __global__ void bn_norm_k(const float *x, float *y, float *xhat, const float *gamma, const float *beta,
                                 const float *mu, const float *invstd, size_t n, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % (size_t)C);
        float h = (x[i] - mu[c]) * invstd[c];
        xhat[i] = h;
        y[i] = gamma[c] * h + beta[c];
    }
}

extern "C" int eng_cuda_batchnorm_forward_train(eng_cuda *cu, const float *x, float *y, const float *gamma,
                                                const float *beta, float *run_mean, float *run_var, float momentum,
                                                float eps, float *xhat, float *mu, float *invstd, size_t M, int C) {
    CU_READY(cu);
    if (!M || C <= 0) return 0;
    bn_stats_k<<<(unsigned)C, BN_THREADS, 0, cu->stream>>>(x, M, C, momentum, eps, run_mean, run_var, mu, invstd);
    int rc = cu_launched(cu, "batchnorm statistics");
    if (rc) return rc;
    bn_norm_k<<<cu_grid(M * C), CU_THREADS, 0, cu->stream>>>(x, y, xhat, gamma, beta, mu, invstd, M * C, C);
    return cu_launched(cu, "batchnorm");
}

static __global__ void bn_eval_k(const float *x, float *y, const float *gamma, const float *beta,
                                 const float *run_mean, const float *run_var, float eps, size_t n, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % (size_t)C);
        float a = gamma[c] / sqrtf(run_var[c] + eps), b = beta[c] - run_mean[c] * a;
        y[i] = x[i] * a + b;
    }
}

extern "C" int eng_cuda_batchnorm_forward_eval(eng_cuda *cu, const float *x, float *y, const float *gamma,
                                               const float *beta, const float *run_mean, const float *run_var,
                                               float eps, size_t M, int C) {
    CU_READY(cu);
    if (!M || C <= 0) return 0;
    bn_eval_k<<<cu_grid(M * C), CU_THREADS, 0, cu->stream>>>(x, y, gamma, beta, run_mean, run_var, eps, M * C, C);
    return cu_launched(cu, "batchnorm (evaluation)");
}

/* block c: dgamma, dbeta of channel c and the three factors of its dx */
static __global__ void bn_bwd_sums_k(const float *dy, const float *xhat, const float *invstd, const float *gamma,
                                     size_t M, int C, float *dgamma, float *dbeta, float *k) {
    __shared__ double sh[BN_THREADS];
    int c = blockIdx.x;
    double sb = 0.0, sg = 0.0;
    for (size_t m = threadIdx.x; m < M; m += BN_THREADS) {
        sb += dy[m * C + c];
        sg += (double)dy[m * C + c] * xhat[m * C + c];
    }
    sb = block_sum(sb, sh);
    sg = block_sum(sg, sh);
    if (threadIdx.x == 0) {
        dgamma[c] = (float)sg;
        dbeta[c] = (float)sb;
        k[c] = gamma[c] * invstd[c];
        k[C + c] = (float)(sb / (double)M);
        k[2 * C + c] = (float)(sg / (double)M);
    }
}

static __global__ void bn_bwd_dx_k(const float *dy, const float *xhat, const float *k, float *dx, size_t n, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % (size_t)C);
        dx[i] = k[c] * (dy[i] - k[C + c] - xhat[i] * k[2 * C + c]);
    }
}

extern "C" int eng_cuda_batchnorm_backward(eng_cuda *cu, const float *dy, const float *xhat, const float *invstd,
                                           const float *gamma, float *dx, float *dgamma, float *dbeta, float *k,
                                           size_t M, int C) {
    CU_READY(cu);
    if (!M || C <= 0) return 0;
    bn_bwd_sums_k<<<(unsigned)C, BN_THREADS, 0, cu->stream>>>(dy, xhat, invstd, gamma, M, C, dgamma, dbeta, k);
    int rc = cu_launched(cu, "batchnorm backward sums");
    if (rc || !dx) return rc;
    bn_bwd_dx_k<<<cu_grid(M * C), CU_THREADS, 0, cu->stream>>>(dy, xhat, k, dx, M * C, C);
    return cu_launched(cu, "batchnorm backward");
}
