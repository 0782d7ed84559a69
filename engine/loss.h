/*
 * loss.h - losses and metrics, computed in f32 with double accumulators
 * whatever the training precision.
 *
 * Design notes
 * - One call per batch computes the mean loss, its gradient with respect to
 *   the model output (scaled by `scale`, which is how dynamic loss scaling in
 *   mixed_fp16 enters), and accumulates the metric sums.
 * - Fusion: sparse categorical cross-entropy always applies softmax to the
 *   model output itself (the model stops before a final softmax), which is
 *   the numerically stable log-sum-exp form with gradient (p - onehot) / B.
 *   The model's output is therefore logits whether or not the template says
 *   "activation": "softmax" on the last layer. Binary cross-entropy fuses a
 *   final sigmoid the same way (logits in); without one the output is taken
 *   as probabilities, clamped to [1e-7, 1 - 1e-7] (Keras' epsilon).
 * - Targets: class labels (int32, [B]) or values (f32, [B][K]). With labels,
 *   BCE/MSE/MAE compare against the one-hot vector (K > 1) or the label value
 *   (K == 1). Means are over the batch and the K outputs (Keras), except
 *   cross-entropy which sums over classes.
 * - Metrics: accuracy (argmax vs label; K == 1: class 1 above 0.5, as
 *   Keras' binary_accuracy), loss, mse and mae of the predictions
 *   (probabilities after the fused activation) against the targets.
 * Threading: pure functions.
 */
#ifndef ENG_LOSS_H
#define ENG_LOSS_H

#include <stddef.h>
#include <stdint.h>

typedef enum eng_loss_kind {
    ENG_LOSS_SCCE = 0, /* sparse_categorical_crossentropy */
    ENG_LOSS_BCE,      /* binary_crossentropy */
    ENG_LOSS_MSE,      /* mse / mean_squared_error */
    ENG_LOSS_MAE,      /* mae / mean_absolute_error */
} eng_loss_kind;

int eng_loss_parse(const char *name); /* -1 if unknown */
const char *eng_loss_name(int loss);

typedef struct eng_metric_sums {
    double loss;    /* sum over samples of the per-sample loss */
    double correct; /* samples classified right */
    double sq, abs; /* sums of squared / absolute errors over all outputs */
    size_t n;       /* samples */
    size_t nvals;   /* outputs (n * K) */
} eng_metric_sums;

typedef struct eng_metrics {
    double loss, accuracy, mse, mae;
} eng_metrics;

/* z[B][K]: model output (logits for SCCE, and for BCE when fused_act is
 * sigmoid). labels[B] or targets[B][K] (one of them non-NULL). dz (NULL: no
 * gradient) gets scale * d(mean loss)/dz. Adds to acc (may be NULL). Returns
 * the mean loss of the batch (NaN/Inf propagate, for divergence checks). */
double eng_loss_compute(int loss, int fused_act, const float *z, const int32_t *labels, const float *targets,
                        int B, int K, float scale, float *dz, eng_metric_sums *acc);

void eng_metrics_from_sums(const eng_metric_sums *s, eng_metrics *out);
/* "loss", "accuracy", "mse", "mae" (and the val_ forms) -> the value; -1 on
 * an unknown name. */
int eng_metric_get(const eng_metrics *m, const char *name, double *out);

#endif
