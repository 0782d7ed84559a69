/*
 * ensemble.h - ensemble math over members' prediction matrices: the weighted
 * average, weights fitted on the validation split (NLopt Nelder-Mead on a
 * softmax), greedy ensemble selection (Caruana et al. 2004), and the metrics
 * of a member or of an ensemble.
 *
 * Design notes
 * - Inputs are predictions, not models: preds[m] is member m's output on the
 *   same N samples, row-major [N][K] f32. Classification (labels != NULL,
 *   int32 [N] in [0, K)): rows are class probabilities (after softmax, not
 *   logits); K == 1 means binary, the row is P(class 1) and labels are 0/1.
 *   Regression (labels == NULL, targets f32 [N][K]): rows are values.
 *   Exactly one of labels / targets is given.
 * - Loss: classification is the cross-entropy of the averaged probabilities,
 *   mean over samples of -log(max(sum_m w_m P_m[i][y_i], 1e-7)) (only the
 *   lower clamp matters for -log). Regression is the MSE, mean over N and K
 *   (Keras). Metrics follow engine/loss.h's eng_metrics: loss, accuracy
 *   (argmax vs label; K == 1: p >= 0.5; 0 for regression), and mse / mae of
 *   the predictions against the targets (the one-hot vector, or the 0/1 label
 *   when K == 1).
 * - Weights: w[M] on the simplex (>= 0, sum 1). eng_ensemble_combine accepts
 *   any non-negative finite w with a positive sum and divides by the sum, so
 *   greedy counts can be passed as they are.
 * - Fitted weights: w = softmax(0, z_1..z_{M-1}), i.e. M-1 free logits with
 *   the first fixed at 0. Softmax is invariant to adding a constant to all M
 *   logits; fixing one removes that flat direction, in which a Nelder-Mead
 *   simplex would otherwise drift and degenerate. Logits are bounded to
 *   [-30, 30] (a weight ratio down to e^-60, i.e. zero for every purpose).
 *   Start: z = 0 (uniform weights), initial step 1, NLOPT_LN_NELDERMEAD,
 *   ftol_abs 1e-10, xtol_abs 1e-6, maxeval 500 + 200 M. NLopt's Nelder-Mead
 *   uses no random numbers, so a fit is deterministic; it returns the best
 *   point it evaluated, so the fitted loss is never above the plain mean's.
 *   The objective is cheap: classification uses only P_m[i][y_i] (gathered
 *   once, O(N M) per evaluation), regression the Gram matrix of the members'
 *   residuals R_m = V_m - T (MSE(w) = w' G w / (N K) on the simplex; O(M^2)).
 * - Greedy selection: start empty; each round adds, with replacement, the
 *   member whose addition gives the lowest loss of the running average
 *   (strict <, so ties go to the lowest index). Round 1 therefore picks the
 *   best single member. A forced addition can raise the loss, so the result
 *   is the best round's ensemble (the first one at the minimum) -- never
 *   worse than the best single member. rounds <= 0 means 25. Each round
 *   evaluates M candidates with the same objective (O(N M^2) per round for
 *   classification). Measured: N 10000, K 10, M 10 -> fit 0.16 s, 25 greedy
 *   rounds 0.05 s (one core).
 * - Validation: M >= 1, N >= 1, K >= 1, non-NULL members, every prediction
 *   and target finite, labels in range, w >= 0 with a positive sum:
 *   HPO_EINVAL otherwise (with a message where an hpo_error is taken).
 *   HPO_EINTERNAL if NLopt fails. Out-params are written only on success.
 * Threading: pure functions, reentrant; fit/greedy allocate O(N M + M^2)
 * scratch and free it before returning. Nothing returned is borrowed.
 */
#ifndef ENG_ENSEMBLE_H
#define ENG_ENSEMBLE_H

#include <stddef.h>
#include <stdint.h>

#include "hpo.h"
#include "loss.h"

#define ENG_ENSEMBLE_DEFAULT_ROUNDS 25
#define ENG_ENSEMBLE_PROB_EPS 1e-7

/* out[N][K] = sum_m w[m] preds[m][N][K] / sum(w); w NULL: plain mean.
 * Accumulated in double. out may not alias a member. */
int eng_ensemble_combine(const float *const *preds, int M, size_t N, int K, const double *w, float *out);

/* Weights on the simplex minimising the validation loss of the ensemble.
 * w_out[M]; loss_out (may be NULL) gets the loss at w_out; err may be NULL. */
int eng_ensemble_fit_weights(const float *const *preds, int M, size_t N, int K, const int32_t *labels,
                             const float *targets, double *w_out, double *loss_out, hpo_error *err);

/* Caruana ensemble selection with replacement for `rounds` rounds (<= 0: 25).
 * counts_out[M] (may be NULL): times each member was picked in the returned
 * (best-round) ensemble; w_out[M] (may be NULL) = counts / total; loss_out
 * (may be NULL): its validation loss. */
int eng_ensemble_greedy(const float *const *preds, int M, size_t N, int K, const int32_t *labels,
                        const float *targets, int rounds, int *counts_out, double *w_out, double *loss_out);

/* Metrics of one prediction matrix pred[N][K] (a member, or a combined
 * ensemble) against labels or targets, as described above. */
int eng_ensemble_metrics(const float *pred, size_t N, int K, const int32_t *labels, const float *targets,
                         eng_metrics *out);

#endif
