/* loss.c - losses fused with their final activation, and metrics (see loss.h). */
#include "loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static const char *loss_names[] = {"sparse_categorical_crossentropy", "binary_crossentropy", "mse", "mae"};

int eng_loss_parse(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < (int)HPO_ARRAY_LEN(loss_names); i++)
        if (!strcmp(name, loss_names[i])) return i;
    if (!strcmp(name, "mean_squared_error")) return ENG_LOSS_MSE;
    if (!strcmp(name, "mean_absolute_error")) return ENG_LOSS_MAE;
    return -1;
}

const char *eng_loss_name(int loss) {
    return loss >= 0 && loss < (int)HPO_ARRAY_LEN(loss_names) ? loss_names[loss] : "?";
}

static inline float target_of(const int32_t *labels, const float *targets, int r, int k, int K) {
    if (targets) return targets[(size_t)r * K + k];
    return K == 1 ? (float)labels[r] : (labels[r] == k ? 1.0f : 0.0f);
}

/* eng_loss_compute with p (K floats) for a row's probabilities */
static double loss_rows(int loss, int fused_act, const float *z, const int32_t *labels, const float *targets, int B,
                        int K, float scale, float *dz, eng_metric_sums *acc, float *p) {
    double total = 0, sq = 0, ab = 0, correct = 0;
    const float invB = 1.0f / (float)B, invBK = 1.0f / ((float)B * (float)K);
    for (int r = 0; r < B; r++) {
        const float *zr = z + (size_t)r * K;
        float *dr = dz ? dz + (size_t)r * K : NULL;
        int am = 0;
        for (int k = 1; k < K; k++)
            if (zr[k] > zr[am]) am = k;
        double lr = 0;
        switch (loss) {
        case ENG_LOSS_SCCE: {
            float m = zr[am];
            double s = 0;
            for (int k = 0; k < K; k++) s += (p[k] = expf(zr[k] - m));
            float inv = (float)(1.0 / s);
            for (int k = 0; k < K; k++) p[k] *= inv;
            int lab = labels ? labels[r] : 0;
            if (!labels) { /* one-hot or soft targets given as values */
                for (int k = 0; k < K; k++) lr -= targets[(size_t)r * K + k] * ((zr[k] - m) - log(s));
            } else {
                lr = log(s) - (zr[lab] - m);
            }
            if (dr)
                for (int k = 0; k < K; k++) dr[k] = scale * invB * (p[k] - target_of(labels, targets, r, k, K));
            if (labels) correct += am == lab;
            else correct += targets[(size_t)r * K + am] >= 0.5f;
            break;
        }
        case ENG_LOSS_BCE:
            for (int k = 0; k < K; k++) {
                float t = target_of(labels, targets, r, k, K), x = zr[k];
                if (fused_act == ENG_ACT_SIGMOID) {
                    lr += fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
                    p[k] = x >= 0 ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
                    if (dr) dr[k] = scale * invBK * (p[k] - t);
                } else {
                    float q = fminf(fmaxf(x, 1e-7f), 1.0f - 1e-7f);
                    lr -= t * logf(q) + (1.0f - t) * logf(1.0f - q);
                    p[k] = x;
                    if (dr) dr[k] = (x > 1e-7f && x < 1.0f - 1e-7f) ? scale * invBK * (q - t) / (q * (1.0f - q)) : 0.0f;
                }
            }
            lr /= K;
            break;
        case ENG_LOSS_MSE:
        case ENG_LOSS_MAE:
            for (int k = 0; k < K; k++) {
                float t = target_of(labels, targets, r, k, K), e = zr[k] - t;
                p[k] = zr[k];
                if (loss == ENG_LOSS_MSE) {
                    lr += (double)e * e;
                    if (dr) dr[k] = scale * invBK * 2.0f * e;
                } else {
                    lr += fabs(e);
                    if (dr) dr[k] = scale * invBK * (e > 0 ? 1.0f : e < 0 ? -1.0f : 0.0f);
                }
            }
            lr /= K;
            break;
        default:
            return NAN;
        }
        total += lr;
        if (loss != ENG_LOSS_SCCE) {
            if (K == 1) {
                float t = target_of(labels, targets, r, 0, 1);
                correct += labels && loss != ENG_LOSS_BCE ? (lrintf(p[0]) == labels[r]) : ((p[0] > 0.5f) == (t >= 0.5f));
            } else if (labels) {
                correct += am == labels[r];
            } else {
                correct += targets[(size_t)r * K + am] >= 0.5f;
            }
        }
        for (int k = 0; k < K; k++) {
            double e = (double)p[k] - target_of(labels, targets, r, k, K);
            sq += e * e;
            ab += fabs(e);
        }
    }
    if (acc) {
        acc->loss += total;
        acc->correct += correct;
        acc->sq += sq;
        acc->abs += ab;
        acc->n += (size_t)B;
        acc->nvals += (size_t)B * K;
    }
    return total / B;
}

double eng_loss_compute(int loss, int fused_act, const float *z, const int32_t *labels, const float *targets,
                        int B, int K, float scale, float *dz, eng_metric_sums *acc) {
    float small[256], *p = K <= 256 ? small : hpo_xmalloc((size_t)K * sizeof(float)); /* a wide output: the heap */
    double v = loss_rows(loss, fused_act, z, labels, targets, B, K, scale, dz, acc, p);
    if (p != small) free(p);
    return v;
}

void eng_metrics_from_sums(const eng_metric_sums *s, eng_metrics *out) {
    double n = s->n ? (double)s->n : 1.0, nv = s->nvals ? (double)s->nvals : 1.0;
    out->loss = s->loss / n;
    out->accuracy = s->correct / n;
    out->mse = s->sq / nv;
    out->mae = s->abs / nv;
}

int eng_metric_get(const eng_metrics *m, const char *name, double *out) {
    if (!name) return -1;
    if (!strncmp(name, "val_", 4)) name += 4;
    if (!strcmp(name, "loss")) *out = m->loss;
    else if (!strcmp(name, "accuracy") || !strcmp(name, "acc")) *out = m->accuracy;
    else if (!strcmp(name, "mse")) *out = m->mse;
    else if (!strcmp(name, "mae")) *out = m->mae;
    else return -1;
    return 0;
}
