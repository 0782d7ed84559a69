/* test_ensemble.c - combine against a naive loop; fitted weights (NLopt
 * Nelder-Mead) zero out a bad member and beat the plain mean, lie on the
 * simplex and are deterministic; greedy selection is reproducible, never
 * worse than the best member and picks a dominant member first; MSE path;
 * metrics on hand-computed values; bad inputs give HPO_EINVAL. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ensemble.h"
#include "rng.h"

enum { NS = 3000, NK = 4, NM = 5 };

/* Member probabilities: softmax(sharp * onehot(y) + noise * normal) per row;
 * sharp < 0 gives "inverted" probabilities (least mass on the truth). */
static float *make_cls_member(hpo_rng *r, const int32_t *y, size_t N, int K, double sharp, double noise) {
    float *p = malloc(N * (size_t)K * sizeof(float));
    for (size_t i = 0; i < N; i++) {
        double z[16], mx = -1e300, s = 0;
        for (int k = 0; k < K; k++) {
            z[k] = (k == y[i] ? sharp : 0.0) + noise * hpo_rng_normal(r);
            mx = fmax(mx, z[k]);
        }
        for (int k = 0; k < K; k++) s += (z[k] = exp(z[k] - mx));
        for (int k = 0; k < K; k++) p[i * (size_t)K + k] = (float)(z[k] / s);
    }
    return p;
}

static float *make_reg_member(hpo_rng *r, const float *t, size_t nv, double scale, double noise) {
    float *v = malloc(nv * sizeof(float));
    for (size_t j = 0; j < nv; j++) v[j] = (float)(scale * t[j] + noise * hpo_rng_normal(r));
    return v;
}

static void free_members(float **p, int M) {
    for (int m = 0; m < M; m++) free(p[m]);
}

static void assert_simplex(const double *w, int M) {
    double s = 0;
    for (int m = 0; m < M; m++) {
        assert_true(w[m] >= 0.0);
        s += w[m];
    }
    printf("  weights sum - 1 = %.3g\n", s - 1.0);
    assert_true(fabs(s - 1.0) <= 1e-9);
}

static double loss_of(const float *const *P, int M, size_t N, int K, const double *w, const int32_t *y,
                      const float *t) {
    float *out = malloc(N * (size_t)K * sizeof(float));
    eng_metrics mt;
    assert_int_equal(eng_ensemble_combine(P, M, N, K, w, out), 0);
    assert_int_equal(eng_ensemble_metrics(out, N, K, y, t, &mt), 0);
    free(out);
    return mt.loss;
}

static void test_combine_naive(void **state) {
    (void)state;
    enum { M = 4, N = 37, K = 3 };
    hpo_rng r;
    hpo_rng_seed(&r, 1);
    float *P[M], out[N * K], ref[N * K], cnt_out[N * K];
    double w[M] = {0.1, 0.4, 0.2, 0.3}, counts[M] = {1, 4, 2, 3};
    for (int m = 0; m < M; m++) {
        P[m] = malloc(sizeof(float) * N * K);
        for (int j = 0; j < N * K; j++) P[m][j] = hpo_rng_uniform_f(&r);
    }
    const float *const *cp = (const float *const *)P;
    double maxd = 0, maxd_mean = 0, maxd_cnt = 0;
    assert_int_equal(eng_ensemble_combine(cp, M, N, K, w, out), 0);
    assert_int_equal(eng_ensemble_combine(cp, M, N, K, counts, cnt_out), 0);
    for (int i = 0; i < N; i++) /* naive: member by member */
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int m = 0; m < M; m++) s += w[m] * P[m][i * K + k];
            ref[i * K + k] = (float)s;
        }
    for (int j = 0; j < N * K; j++) maxd = fmax(maxd, fabs(out[j] - ref[j]));
    for (int j = 0; j < N * K; j++) maxd_cnt = fmax(maxd_cnt, fabs(cnt_out[j] - ref[j]));
    assert_int_equal(eng_ensemble_combine(cp, M, N, K, NULL, out), 0);
    for (int j = 0; j < N * K; j++)
        maxd_mean = fmax(maxd_mean, fabs(out[j] - (P[0][j] + P[1][j] + P[2][j] + P[3][j]) / 4.0));
    printf("  combine vs naive: max diff %.3g (weights), %.3g (counts), %.3g (mean)\n", maxd, maxd_cnt, maxd_mean);
    assert_true(maxd <= 1e-6 && maxd_cnt <= 1e-6 && maxd_mean <= 1e-6);
    free_members(P, M);
}

/* Members 1..4 are noisy copies of the truth; member 0 is bad. */
static void cls_setup(int32_t *y, float **P, int inverted) {
    hpo_rng r;
    hpo_rng_seed(&r, 42);
    for (size_t i = 0; i < NS; i++) y[i] = (int32_t)hpo_rng_below(&r, NK);
    P[0] = inverted ? make_cls_member(&r, y, NS, NK, -3.0, 0.5) : make_cls_member(&r, y, NS, NK, 0.0, 2.0);
    for (int m = 1; m < NM; m++) P[m] = make_cls_member(&r, y, NS, NK, 2.0, 1.0 + 0.25 * m);
}

static void fit_cls(int inverted) {
    int32_t y[NS];
    float *P[NM];
    cls_setup(y, P, inverted);
    const float *const *cp = (const float *const *)P;
    double w[NM], w2[NM], loss = 0, loss2 = 0;
    hpo_error err = {0};
    assert_int_equal(eng_ensemble_fit_weights(cp, NM, NS, NK, y, NULL, w, &loss, &err), 0);
    assert_int_equal(eng_ensemble_fit_weights(cp, NM, NS, NK, y, NULL, w2, &loss2, &err), 0);
    double mean = loss_of(cp, NM, NS, NK, NULL, y, NULL), check = loss_of(cp, NM, NS, NK, w, y, NULL);
    printf("  %s bad member: w = [%.2e %.3f %.3f %.3f %.3f]\n  val CE fitted %.6f < mean %.6f "
           "(recomputed %.6f)\n", inverted ? "inverted" : "random", w[0], w[1], w[2], w[3], w[4], loss, mean, check);
    assert_simplex(w, NM);
    assert_true(w[0] < 1e-3);
    assert_true(loss < mean);
    assert_true(fabs(check - loss) < 1e-5);
    assert_memory_equal(w, w2, sizeof w); /* deterministic */
    assert_true(loss == loss2);
    free_members(P, NM);
}

static void test_fit_classification_random(void **state) {
    (void)state;
    fit_cls(0);
}

static void test_fit_classification_inverted(void **state) {
    (void)state;
    fit_cls(1);
}

/* Regression, D = 2: members 0..2 noisy copies; member 3 a degraded copy of
 * member 0 (its predictions plus noise 3). A bad member whose errors are
 * independent of the others' (say -t) rightly gets a small positive weight
 * under MSE (inverse-variance weighting); one that adds noise to a member
 * must get none. */
static void reg_setup(float *t, float **V, size_t nv) {
    hpo_rng r;
    hpo_rng_seed(&r, 7);
    for (size_t j = 0; j < nv; j++) t[j] = (float)(3.0 * hpo_rng_normal(&r));
    V[0] = make_reg_member(&r, t, nv, 1.0, 1.0);
    V[1] = make_reg_member(&r, t, nv, 1.0, 1.5);
    V[2] = make_reg_member(&r, t, nv, 1.0, 2.0);
    V[3] = make_reg_member(&r, V[0], nv, 1.0, 3.0);
}

static void test_fit_regression(void **state) {
    (void)state;
    enum { M = 4, N = 1000, D = 2 };
    float *t = malloc(sizeof(float) * N * D), *V[M];
    reg_setup(t, V, (size_t)N * D);
    const float *const *cp = (const float *const *)V;
    double w[M], w2[M], loss = 0, loss2 = 0;
    assert_int_equal(eng_ensemble_fit_weights(cp, M, N, D, NULL, t, w, &loss, NULL), 0);
    assert_int_equal(eng_ensemble_fit_weights(cp, M, N, D, NULL, t, w2, &loss2, NULL), 0);
    double mean = loss_of(cp, M, N, D, NULL, NULL, t), check = loss_of(cp, M, N, D, w, NULL, t);
    /* independent noises 1, 1.5, 2: optimal weights are proportional to 1/var */
    double iv[3] = {1.0, 1 / 2.25, 0.25}, s = iv[0] + iv[1] + iv[2];
    printf("  regression: w = [%.3f %.3f %.3f %.2e] (ideal %.3f %.3f %.3f 0)\n  val MSE fitted %.6f < mean %.6f "
           "(recomputed %.6f)\n", w[0], w[1], w[2], w[3], iv[0] / s, iv[1] / s, iv[2] / s, loss, mean, check);
    assert_simplex(w, M);
    assert_true(w[3] < 1e-3);
    assert_true(fabs(w[0] - iv[0] / s) < 0.05);
    assert_true(loss < mean);
    assert_true(fabs(check - loss) < 1e-4 * loss);
    assert_memory_equal(w, w2, sizeof w);
    /* greedy on the same data */
    int c1[M], c2[M];
    double gl = 0, gw[M];
    assert_int_equal(eng_ensemble_greedy(cp, M, N, D, NULL, t, 0, c1, gw, &gl), 0);
    assert_int_equal(eng_ensemble_greedy(cp, M, N, D, NULL, t, 0, c2, NULL, NULL), 0);
    printf("  regression greedy: counts [%d %d %d %d], val MSE %.6f (fitted %.6f)\n", c1[0], c1[1], c1[2], c1[3], gl,
           loss);
    assert_memory_equal(c1, c2, sizeof c1);
    assert_int_equal(c1[3], 0);
    assert_true(gl <= loss_of(cp, 1, N, D, NULL, NULL, t)); /* member 0 alone is the best single */
    assert_simplex(gw, M);
    free_members(V, M);
    free(t);
}

static void test_greedy(void **state) {
    (void)state;
    int32_t y[NS];
    float *P[NM];
    cls_setup(y, P, 0);
    const float *const *cp = (const float *const *)P;
    int c1[NM], c2[NM];
    double w[NM], loss = 0, loss2 = 0, best = INFINITY;
    assert_int_equal(eng_ensemble_greedy(cp, NM, NS, NK, y, NULL, 0, c1, w, &loss), 0);
    assert_int_equal(eng_ensemble_greedy(cp, NM, NS, NK, y, NULL, 0, c2, NULL, &loss2), 0);
    for (int m = 0; m < NM; m++) {
        eng_metrics mt;
        assert_int_equal(eng_ensemble_metrics(P[m], NS, NK, y, NULL, &mt), 0);
        printf("  member %d: val CE %.6f accuracy %.4f\n", m, mt.loss, mt.accuracy);
        best = fmin(best, mt.loss);
    }
    double check = loss_of(cp, NM, NS, NK, w, y, NULL);
    printf("  greedy counts [%d %d %d %d %d]: val CE %.6f (recomputed %.6f) <= best member %.6f\n", c1[0], c1[1],
           c1[2], c1[3], c1[4], loss, check, best);
    assert_memory_equal(c1, c2, sizeof c1);
    assert_true(loss == loss2);
    assert_true(loss <= best);
    assert_true(fabs(check - loss) < 1e-5);
    assert_int_equal(c1[0], 0);
    assert_simplex(w, NM);
    /* one dominant member (index 3, much sharper) is picked first */
    free(P[3]);
    hpo_rng r;
    hpo_rng_seed(&r, 5);
    P[3] = make_cls_member(&r, y, NS, NK, 6.0, 0.5);
    int c3[NM];
    assert_int_equal(eng_ensemble_greedy(cp, NM, NS, NK, y, NULL, 1, c3, NULL, NULL), 0);
    printf("  dominant member 3: first pick counts [%d %d %d %d %d]\n", c3[0], c3[1], c3[2], c3[3], c3[4]);
    assert_int_equal(c3[3], 1);
    /* identical members tie: the lowest index wins */
    const float *same[3] = {P[1], P[1], P[1]};
    assert_int_equal(eng_ensemble_greedy(same, 3, NS, NK, y, NULL, 1, c3, NULL, NULL), 0);
    assert_true(c3[0] == 1 && c3[1] == 0 && c3[2] == 0);
    free_members(P, NM);
}

/* K == 1: rows are P(class 1); member 0 is inverted (1 - p). */
static void test_fit_binary(void **state) {
    (void)state;
    enum { M = 3, N = 2000 };
    hpo_rng r;
    hpo_rng_seed(&r, 11);
    int32_t y[N];
    float *P[M];
    for (int m = 0; m < M; m++) P[m] = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        y[i] = (int32_t)hpo_rng_below(&r, 2);
        for (int m = 0; m < M; m++) {
            double z = (y[i] ? 1.5 : -1.5) + (1.0 + 0.5 * m) * hpo_rng_normal(&r);
            P[m][i] = (float)(1.0 / (1.0 + exp(m == 0 ? z : -z)));
        }
    }
    const float *const *cp = (const float *const *)P;
    double w[M], loss = 0, gloss = 0, gw[M];
    assert_int_equal(eng_ensemble_fit_weights(cp, M, N, 1, y, NULL, w, &loss, NULL), 0);
    assert_int_equal(eng_ensemble_greedy(cp, M, N, 1, y, NULL, 0, NULL, gw, &gloss), 0);
    double mean = loss_of(cp, M, N, 1, NULL, y, NULL), check = loss_of(cp, M, N, 1, w, y, NULL);
    double gcheck = loss_of(cp, M, N, 1, gw, y, NULL);
    printf("  binary: w = [%.2e %.3f %.3f], BCE fitted %.6f (recomputed %.6f) < mean %.6f; greedy %.6f (%.6f)\n",
           w[0], w[1], w[2], loss, check, mean, gloss, gcheck);
    assert_simplex(w, M);
    assert_true(w[0] < 1e-3 && loss < mean);
    assert_true(fabs(check - loss) < 1e-5 && fabs(gcheck - gloss) < 1e-5);
    free_members(P, M);
}

static void test_one_member(void **state) {
    (void)state;
    float p[6] = {0.7f, 0.3f, 0.2f, 0.8f, 0.5f, 0.5f};
    const float *P[1] = {p};
    int32_t y[3] = {0, 1, 1};
    double w = 0, loss = 0;
    int c = 0;
    assert_int_equal(eng_ensemble_fit_weights(P, 1, 3, 2, y, NULL, &w, &loss, NULL), 0);
    double want = -(log(0.7) + log(0.8) + log(0.5)) / 3;
    assert_true(w == 1.0 && fabs(loss - want) < 1e-6);
    assert_int_equal(eng_ensemble_greedy(P, 1, 3, 2, y, NULL, 3, &c, &w, &loss), 0);
    assert_true(c == 1 && w == 1.0 && fabs(loss - want) < 1e-6);
}

static void test_metrics(void **state) {
    (void)state;
    float p[6] = {0.7f, 0.3f, 0.2f, 0.8f, 0.6f, 0.4f};
    int32_t y[3] = {0, 1, 1};
    eng_metrics mt;
    assert_int_equal(eng_ensemble_metrics(p, 3, 2, y, NULL, &mt), 0);
    double ce = -(log(0.7) + log(0.8) + log(0.4)) / 3;
    double mse = (2 * 0.09 + 2 * 0.04 + 2 * 0.36) / 6, mae = (2 * 0.3 + 2 * 0.2 + 2 * 0.6) / 6;
    printf("  metrics: CE %.6g (want %.6g) acc %.4f mse %.6g mae %.6g\n", mt.loss, ce, mt.accuracy, mt.mse, mt.mae);
    assert_true(fabs(mt.loss - ce) < 1e-6 && fabs(mt.accuracy - 2.0 / 3) < 1e-12);
    assert_true(fabs(mt.mse - mse) < 1e-6 && fabs(mt.mae - mae) < 1e-6);
    /* K == 1: binary P(class 1); the clamp at 1e-7 */
    float b[4] = {0.9f, 0.2f, 1.0f, 0.5f};
    int32_t yb[4] = {1, 1, 0, 1};
    assert_int_equal(eng_ensemble_metrics(b, 4, 1, yb, NULL, &mt), 0);
    ce = -(log(0.9) + log(0.2) + log(1e-7) + log(0.5)) / 4;
    assert_true(fabs(mt.loss - ce) < 1e-5 && fabs(mt.accuracy - 0.5) < 1e-12); /* p = 0.5 -> class 1 */
    /* regression: loss is the MSE */
    float v[4] = {1, 2, 3, 4}, t[4] = {1, 0, 3, 5};
    assert_int_equal(eng_ensemble_metrics(v, 2, 2, NULL, t, &mt), 0);
    assert_true(fabs(mt.loss - 1.25) < 1e-12 && fabs(mt.mse - 1.25) < 1e-12 && fabs(mt.mae - 0.75) < 1e-12);
}

static void test_bad_inputs(void **state) {
    (void)state;
    float p[4] = {0.5f, 0.5f, 0.1f, 0.9f}, nanp[4] = {0.5f, NAN, 0.1f, 0.9f}, out[4];
    const float *P[2] = {p, p}, *Pn[2] = {p, nanp}, *Pnull[2] = {p, NULL};
    int32_t y[2] = {0, 1}, ybad[2] = {0, 2};
    float t[4] = {0, 1, 1, 0};
    double w[2] = {0.5, 0.5}, wneg[2] = {1.5, -0.5}, wzero[2] = {0, 0};
    int c[2];
    hpo_error err = {0};
    assert_int_equal(eng_ensemble_combine(P, 0, 2, 2, NULL, out), HPO_EINVAL);
    assert_int_equal(eng_ensemble_combine(P, 2, 0, 2, NULL, out), HPO_EINVAL);
    assert_int_equal(eng_ensemble_combine(P, 2, 2, 0, NULL, out), HPO_EINVAL);
    assert_int_equal(eng_ensemble_combine(Pn, 2, 2, 2, NULL, out), HPO_EINVAL);
    assert_int_equal(eng_ensemble_combine(Pnull, 2, 2, 2, NULL, out), HPO_EINVAL);
    assert_int_equal(eng_ensemble_combine(P, 2, 2, 2, wneg, out), HPO_EINVAL);
    assert_int_equal(eng_ensemble_combine(P, 2, 2, 2, wzero, out), HPO_EINVAL);
    assert_int_equal(eng_ensemble_fit_weights(Pn, 2, 2, 2, y, NULL, w, NULL, &err), HPO_EINVAL);
    printf("  NaN: %s: %s\n", err.field, err.message);
    assert_true(err.message[0] != 0);
    memset(&err, 0, sizeof err);
    assert_int_equal(eng_ensemble_fit_weights(P, 0, 2, 2, y, NULL, w, NULL, &err), HPO_EINVAL);
    assert_true(err.message[0] != 0);
    assert_int_equal(eng_ensemble_fit_weights(P, 2, 2, 2, ybad, NULL, w, NULL, &err), HPO_EINVAL);
    printf("  label: %s: %s\n", err.field, err.message);
    assert_int_equal(eng_ensemble_fit_weights(P, 2, 2, 2, y, t, w, NULL, &err), HPO_EINVAL);
    assert_int_equal(eng_ensemble_fit_weights(P, 2, 2, 2, NULL, NULL, w, NULL, &err), HPO_EINVAL);
    w[0] = 42; /* out-params untouched on failure */
    assert_int_equal(eng_ensemble_greedy(Pn, 2, 2, 2, y, NULL, 3, c, w, NULL), HPO_EINVAL);
    assert_int_equal(eng_ensemble_greedy(P, 2, 2, 0, y, NULL, 3, c, w, NULL), HPO_EINVAL);
    assert_true(w[0] == 42);
    eng_metrics mt;
    assert_int_equal(eng_ensemble_metrics(nanp, 2, 2, y, NULL, &mt), HPO_EINVAL);
    assert_int_equal(eng_ensemble_metrics(p, 2, 2, ybad, NULL, &mt), HPO_EINVAL);
    float tn[4] = {0, NAN, 0, 0};
    assert_int_equal(eng_ensemble_metrics(p, 2, 2, NULL, tn, &mt), HPO_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_combine_naive),
        cmocka_unit_test(test_fit_classification_random),
        cmocka_unit_test(test_fit_classification_inverted),
        cmocka_unit_test(test_fit_regression),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_fit_binary),
        cmocka_unit_test(test_one_member),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
