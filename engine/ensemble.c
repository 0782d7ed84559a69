/*
 * ensemble.c - weighted average, fitted weights (NLopt Nelder-Mead on a
 * softmax), greedy ensemble selection and metrics. See ensemble.h.
 */
#include "ensemble.h"

#include <math.h>
#include <nlopt.h>
#include <stdlib.h>
#include <string.h>

#define LOGIT_BOUND 30.0

/* ---- validation ---- */

static int check_preds(const float *const *preds, int M, size_t N, int K, hpo_error *err) {
    if (M < 1) return hpo_fail(err, HPO_EINVAL, "members", "an ensemble needs at least one member (got %d)", M);
    if (N < 1) return hpo_fail(err, HPO_EINVAL, "samples", "predictions need at least one sample");
    if (K < 1) return hpo_fail(err, HPO_EINVAL, "outputs", "predictions need at least one output (got %d)", K);
    if (N > SIZE_MAX / sizeof(float) / (size_t)K || N > SIZE_MAX / sizeof(double) / (size_t)M)
        return hpo_fail(err, HPO_EINVAL, "samples", "%zu samples x %d outputs is too large", N, K);
    if (!preds) return hpo_fail(err, HPO_EINVAL, "members", "no prediction matrices given");
    size_t nv = N * (size_t)K;
    for (int m = 0; m < M; m++) {
        if (!preds[m]) return hpo_fail(err, HPO_EINVAL, "members", "member %d has no predictions", m);
        for (size_t j = 0; j < nv; j++)
            if (!isfinite(preds[m][j]))
                return hpo_fail(err, HPO_EINVAL, "members", "member %d: prediction %zu (sample %zu, output %zu) is not finite",
                                m, j, j / (size_t)K, j % (size_t)K);
    }
    return 0;
}

static int check_truth(size_t N, int K, const int32_t *labels, const float *targets, hpo_error *err) {
    if (!labels == !targets)
        return hpo_fail(err, HPO_EINVAL, labels ? "targets" : "labels",
                        "give exactly one of labels (classification) or targets (regression)");
    if (labels) {
        int32_t hi = K == 1 ? 1 : K - 1;
        for (size_t i = 0; i < N; i++)
            if (labels[i] < 0 || labels[i] > hi)
                return hpo_fail(err, HPO_EINVAL, "labels", "label %d of sample %zu is outside [0, %d]", (int)labels[i],
                                i, (int)hi);
    } else {
        for (size_t j = 0; j < N * (size_t)K; j++)
            if (!isfinite(targets[j]))
                return hpo_fail(err, HPO_EINVAL, "targets", "target %zu (sample %zu) is not finite", j, j / (size_t)K);
    }
    return 0;
}

/* ---- the validation-loss problem, reduced once ---- */

typedef struct problem {
    int M;
    size_t N;
    float *py;  /* classification: [N][M], P_m[i][y_i] */
    double *G;  /* regression: [M][M], <R_a, R_b> / (N K), R = V - T */
    double *w;  /* [M] scratch for the objective */
} problem;

static void problem_free(problem *p) {
    free(p->py);
    free(p->G);
    free(p->w);
}

static void problem_init(problem *p, const float *const *preds, int M, size_t N, int K, const int32_t *labels,
                         const float *targets) {
    memset(p, 0, sizeof *p);
    p->M = M;
    p->N = N;
    p->w = hpo_xcalloc((size_t)M, sizeof(double));
    if (labels) {
        p->py = hpo_xmalloc(N * (size_t)M * sizeof(float));
        for (size_t i = 0; i < N; i++)
            for (int m = 0; m < M; m++) {
                float x = K == 1 ? preds[m][i] : preds[m][i * (size_t)K + (size_t)labels[i]];
                p->py[i * (size_t)M + (size_t)m] = K == 1 && labels[i] == 0 ? 1.0f - x : x;
            }
        return;
    }
    p->G = hpo_xcalloc((size_t)M * (size_t)M, sizeof(double));
    double *r = hpo_xmalloc((size_t)M * sizeof(double));
    for (size_t j = 0; j < N * (size_t)K; j++) {
        for (int m = 0; m < M; m++) r[m] = (double)preds[m][j] - (double)targets[j];
        for (int a = 0; a < M; a++)
            for (int b = a; b < M; b++) p->G[(size_t)a * M + b] += r[a] * r[b];
    }
    double inv = 1.0 / ((double)N * (double)K);
    for (int a = 0; a < M; a++)
        for (int b = a; b < M; b++) p->G[(size_t)b * M + a] = p->G[(size_t)a * M + b] *= inv;
    free(r);
}

/* The validation loss of the ensemble with weights w (sum 1). */
static double problem_loss(const problem *p, const double *w) {
    int M = p->M;
    double total = 0;
    if (p->py) {
        for (size_t i = 0; i < p->N; i++) {
            const float *row = p->py + i * (size_t)M;
            double s = 0;
            for (int m = 0; m < M; m++) s += w[m] * row[m];
            total -= log(fmax(s, ENG_ENSEMBLE_PROB_EPS));
        }
        return total / (double)p->N;
    }
    for (int a = 0; a < M; a++) {
        double s = 0;
        for (int b = 0; b < M; b++) s += p->G[(size_t)a * M + b] * w[b];
        total += w[a] * s;
    }
    return total;
}

/* w[M] = softmax(0, z[0..M-2]). */
static void softmax_fixed(const double *z, int M, double *w) {
    double mx = 0, s = 0;
    for (int m = 1; m < M; m++) mx = fmax(mx, z[m - 1]);
    for (int m = 0; m < M; m++) s += (w[m] = exp((m ? z[m - 1] : 0.0) - mx));
    for (int m = 0; m < M; m++) w[m] /= s;
}

static double objective(unsigned n, const double *z, double *grad, void *data) {
    (void)grad; /* derivative-free */
    problem *p = data;
    softmax_fixed(z, (int)n + 1, p->w);
    return problem_loss(p, p->w);
}

/* ---- public ---- */

int eng_ensemble_combine(const float *const *preds, int M, size_t N, int K, const double *w, float *out) {
    int rc = check_preds(preds, M, N, K, NULL);
    if (rc) return rc;
    if (!out) return HPO_EINVAL;
    double sum = 0;
    for (int m = 0; w && m < M; m++) {
        if (!isfinite(w[m]) || w[m] < 0) return HPO_EINVAL;
        sum += w[m];
    }
    if (w && !(sum > 0 && isfinite(sum))) return HPO_EINVAL;
    double inv = w ? 1.0 / sum : 1.0 / M;
    for (size_t j = 0; j < N * (size_t)K; j++) {
        double s = 0;
        for (int m = 0; m < M; m++) s += (w ? w[m] : 1.0) * preds[m][j];
        out[j] = (float)(s * inv);
    }
    return 0;
}

int eng_ensemble_fit_weights(const float *const *preds, int M, size_t N, int K, const int32_t *labels,
                             const float *targets, double *w_out, double *loss_out, hpo_error *err) {
    int rc = check_preds(preds, M, N, K, err);
    if (!rc) rc = check_truth(N, K, labels, targets, err);
    if (rc) return rc;
    if (!w_out) return hpo_fail(err, HPO_EINVAL, "weights", "no output array for the weights");

    problem p;
    problem_init(&p, preds, M, N, K, labels, targets);
    nlopt_opt opt = NULL;
    double *z = hpo_xcalloc((size_t)M, sizeof(double)); /* M-1 logits, z = 0: uniform start */
    double *w = hpo_xcalloc((size_t)M, sizeof(double));
    if (M > 1) {
        unsigned n = (unsigned)(M - 1);
        opt = nlopt_create(NLOPT_LN_NELDERMEAD, n);
        if (!opt) {
            rc = hpo_fail(err, HPO_ENOMEM, "", "nlopt_create failed");
            goto fail;
        }
        double fmin = 0;
        if (nlopt_set_min_objective(opt, objective, &p) < 0 || nlopt_set_lower_bounds1(opt, -LOGIT_BOUND) < 0 ||
            nlopt_set_upper_bounds1(opt, LOGIT_BOUND) < 0 || nlopt_set_initial_step1(opt, 1.0) < 0 ||
            nlopt_set_ftol_abs(opt, 1e-10) < 0 || nlopt_set_xtol_abs1(opt, 1e-6) < 0 ||
            nlopt_set_maxeval(opt, 500 + 200 * M) < 0) {
            rc = hpo_fail(err, HPO_EINTERNAL, "", "configuring NLopt failed");
            goto fail;
        }
        nlopt_result r = nlopt_optimize(opt, z, &fmin);
        /* ROUNDOFF_LIMITED still leaves the best point found in z. */
        if (r < 0 && r != NLOPT_ROUNDOFF_LIMITED) {
            rc = hpo_fail(err, r == NLOPT_OUT_OF_MEMORY ? HPO_ENOMEM : HPO_EINTERNAL, "",
                          "NLopt Nelder-Mead failed: %s", nlopt_result_to_string(r));
            goto fail;
        }
    }
    softmax_fixed(z, M, w);
    double loss = problem_loss(&p, w);
    if (!isfinite(loss)) {
        rc = hpo_fail(err, HPO_EINTERNAL, "", "the fitted ensemble's loss is not finite");
        goto fail;
    }
    memcpy(w_out, w, (size_t)M * sizeof(double));
    if (loss_out) *loss_out = loss;
fail:
    if (opt) nlopt_destroy(opt);
    free(z);
    free(w);
    problem_free(&p);
    return rc;
}

int eng_ensemble_greedy(const float *const *preds, int M, size_t N, int K, const int32_t *labels,
                        const float *targets, int rounds, int *counts_out, double *w_out, double *loss_out) {
    int rc = check_preds(preds, M, N, K, NULL);
    if (!rc) rc = check_truth(N, K, labels, targets, NULL);
    if (rc) return rc;
    if (rounds <= 0) rounds = ENG_ENSEMBLE_DEFAULT_ROUNDS;

    problem p;
    problem_init(&p, preds, M, N, K, labels, targets);
    int *counts = hpo_xcalloc((size_t)M, sizeof(int));
    int *best_counts = hpo_xcalloc((size_t)M, sizeof(int));
    double *w = hpo_xcalloc((size_t)M, sizeof(double));
    double best_loss = INFINITY;
    for (int t = 0; t < rounds; t++) { /* t members so far */
        int pick = -1;
        double pick_loss = INFINITY;
        for (int c = 0; c < M; c++) {
            counts[c]++;
            for (int m = 0; m < M; m++) w[m] = (double)counts[m] / (double)(t + 1);
            counts[c]--;
            double l = problem_loss(&p, w);
            if (l < pick_loss) { /* strict: ties go to the lowest index */
                pick_loss = l;
                pick = c;
            }
        }
        if (pick < 0) { /* every candidate NaN: cannot happen with finite inputs */
            rc = HPO_EINTERNAL;
            goto fail;
        }
        counts[pick]++;
        if (pick_loss < best_loss) {
            best_loss = pick_loss;
            memcpy(best_counts, counts, (size_t)M * sizeof(int));
        }
    }
    if (counts_out) memcpy(counts_out, best_counts, (size_t)M * sizeof(int));
    int total = 0;
    for (int m = 0; m < M; m++) total += best_counts[m];
    for (int m = 0; w_out && m < M; m++) w_out[m] = (double)best_counts[m] / (double)total;
    if (loss_out) *loss_out = best_loss;
fail:
    free(counts);
    free(best_counts);
    free(w);
    problem_free(&p);
    return rc;
}

int eng_ensemble_metrics(const float *pred, size_t N, int K, const int32_t *labels, const float *targets,
                         eng_metrics *out) {
    int rc = check_preds(&pred, 1, N, K, NULL);
    if (!rc) rc = check_truth(N, K, labels, targets, NULL);
    if (rc) return rc;
    if (!out) return HPO_EINVAL;
    double loss = 0, correct = 0, sq = 0, ab = 0;
    for (size_t i = 0; i < N; i++) {
        const float *row = pred + i * (size_t)K;
        int am = 0;
        for (int k = 1; k < K; k++)
            if (row[k] > row[am]) am = k;
        for (int k = 0; k < K; k++) {
            double t = targets ? targets[i * (size_t)K + k] : K == 1 ? labels[i] : labels[i] == k;
            double d = row[k] - t;
            sq += d * d;
            ab += fabs(d);
        }
        if (!labels) continue;
        double py = K == 1 ? (labels[i] ? row[0] : 1.0 - row[0]) : row[labels[i]];
        loss -= log(fmax(py, ENG_ENSEMBLE_PROB_EPS));
        correct += K == 1 ? ((row[0] >= 0.5f) == (labels[i] == 1)) : am == labels[i];
    }
    double nv = (double)N * (double)K;
    out->loss = labels ? loss / (double)N : sq / nv;
    out->accuracy = correct / (double)N;
    out->mse = sq / nv;
    out->mae = ab / nv;
    return 0;
}
