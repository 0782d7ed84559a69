/* loss.cu - eng_loss_compute on the device (see cuda_ops.h and loss.h): one
 * thread per sample runs loss.c's row code unchanged in f32 with double
 * accumulators; the probabilities loss.c keeps in p[K] are recomputed per
 * class instead. A block folds its rows' metric sums in double, and one
 * atomic add per block and sum adds them to the caller's accumulator. */
#include "cuda_internal.h"

extern "C" {
#include "ops.h"
}

static __device__ __forceinline__ float target_of(const int32_t *labels, const float *targets, int r, int k, int K) {
    if (targets) return targets[(size_t)r * K + k];
    return K == 1 ? (float)labels[r] : (labels[r] == k ? 1.0f : 0.0f);
}

static __global__ void loss_k(int loss, int fused_act, const float *z, const int32_t *labels, const float *targets,
                              int B, int K, float scale, const float *dscale, float *dz, double *sums) {
    __shared__ double sh[4][CU_THREADS];
    if (dscale) scale *= *dscale;
    double total = 0, sq = 0, ab = 0, correct = 0;
    const float invB = 1.0f / (float)B, invBK = 1.0f / ((float)B * (float)K);
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < B) {
        const float *zr = z + (size_t)r * K;
        float *dr = dz ? dz + (size_t)r * K : NULL;
        int am = 0;
        for (int k = 1; k < K; k++)
            if (zr[k] > zr[am]) am = k;
        double lr = 0;
        float m = zr[am], inv = 0.0f;
        double s = 0;
        if (loss == ENG_LOSS_SCCE) {
            for (int k = 0; k < K; k++) s += expf(zr[k] - m);
            inv = (float)(1.0 / s);
            int lab = labels ? labels[r] : 0;
            if (!labels) {
                for (int k = 0; k < K; k++) lr -= targets[(size_t)r * K + k] * ((zr[k] - m) - log(s));
            } else {
                lr = log(s) - (zr[lab] - m);
            }
            if (labels) correct += am == lab;
            else correct += targets[(size_t)r * K + am] >= 0.5f;
        }
        float p0 = 0.0f;
        for (int k = 0; k < K; k++) {
            float t = target_of(labels, targets, r, k, K), x = zr[k], p;
            switch (loss) {
            case ENG_LOSS_SCCE:
                p = expf(x - m) * inv;
                if (dr) dr[k] = scale * invB * (p - t);
                break;
            case ENG_LOSS_BCE:
                if (fused_act == ENG_ACT_SIGMOID) {
                    lr += fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
                    p = x >= 0 ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
                    if (dr) dr[k] = scale * invBK * (p - t);
                } else {
                    float q = fminf(fmaxf(x, 1e-7f), 1.0f - 1e-7f);
                    lr -= t * logf(q) + (1.0f - t) * logf(1.0f - q);
                    p = x;
                    if (dr) dr[k] = (x > 1e-7f && x < 1.0f - 1e-7f) ? scale * invBK * (q - t) / (q * (1.0f - q)) : 0.0f;
                }
                break;
            case ENG_LOSS_MSE:
            case ENG_LOSS_MAE: {
                float e = x - t;
                p = x;
                if (loss == ENG_LOSS_MSE) {
                    lr += (double)e * e;
                    if (dr) dr[k] = scale * invBK * 2.0f * e;
                } else {
                    lr += fabs(e);
                    if (dr) dr[k] = scale * invBK * (e > 0 ? 1.0f : e < 0 ? -1.0f : 0.0f);
                }
                break;
            }
            default:
                p = NAN;
                lr = NAN;
            }
            if (k == 0) p0 = p;
            double e = (double)p - t;
            sq += e * e;
            ab += fabs(e);
        }
        if (loss != ENG_LOSS_SCCE) {
            lr /= K;
            if (K == 1) {
                float t = target_of(labels, targets, r, 0, 1);
                correct += labels && loss != ENG_LOSS_BCE ? (lrintf(p0) == labels[r]) : ((p0 > 0.5f) == (t >= 0.5f));
            } else if (labels) {
                correct += am == labels[r];
            } else {
                correct += targets[(size_t)r * K + am] >= 0.5f;
            }
        }
        total = lr;
    }
    sh[0][threadIdx.x] = total;
    sh[1][threadIdx.x] = correct;
    sh[2][threadIdx.x] = sq;
    sh[3][threadIdx.x] = ab;
    __syncthreads();
    for (int w = CU_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            for (int q = 0; q < 4; q++) sh[q][threadIdx.x] += sh[q][threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x < 4) atomicAdd(&sums[threadIdx.x], sh[threadIdx.x][0]);
}

static int loss_launch(eng_cuda *cu, int loss, int fused_act, const float *z, const int32_t *labels,
                       const float *targets, int B, int K, float scale, const float *dscale, float *dz, double *sums) {
    CU_READY(cu);
    if (B <= 0 || K <= 0) return 0;
    if (loss < ENG_LOSS_SCCE || loss > ENG_LOSS_MAE) return cu_fail(cu, HPO_EINTERNAL, "unknown loss %d", loss);
    if (!labels == !targets) return cu_fail(cu, HPO_EINTERNAL, "loss: exactly one of labels and targets is needed");
    unsigned blocks = (unsigned)((B + CU_THREADS - 1) / CU_THREADS);
    loss_k<<<blocks, CU_THREADS, 0, cu->stream>>>(loss, fused_act, z, labels, targets, B, K, scale, dscale, dz, sums);
    return cu_launched(cu, "loss");
}

extern "C" int eng_cuda_loss(eng_cuda *cu, int loss, int fused_act, const float *z, const int32_t *labels,
                             const float *targets, int B, int K, float scale, float *dz, double *sums) {
    return loss_launch(cu, loss, fused_act, z, labels, targets, B, K, scale, NULL, dz, sums);
}

extern "C" int eng_cuda_loss_scaled(eng_cuda *cu, int loss, int fused_act, const float *z, const int32_t *labels,
                                    const float *targets, int B, int K, float scale, const eng_cuda_scaler *s,
                                    float *dz, double *sums) {
    return loss_launch(cu, loss, fused_act, z, labels, targets, B, K, scale, &s->scale, dz, sums);
}

extern "C" int eng_cuda_sums_add(eng_cuda *cu, const double *sums, size_t n, int K, eng_metric_sums *acc,
                                 hpo_error *err) {
    double h[ENG_CUDA_SUMS];
    int rc = eng_cuda_download(cu, h, sums, sizeof h, err);
    if (!rc) eng_cuda_sums_fold(h, n, K, acc);
    return rc;
}
