/* test_replicas.c - data parallelism inside a slot (engine/replicas.h): a
 * step on T threads against the single-threaded step (max difference
 * printed), determinism, uneven and tiny batches, bf16 batches, evaluation
 * on the replicas' threads against a single-threaded forward pass, and many
 * short-lived replica sets (the hand-off must not lose a wake-up when the
 * first phase is posted before a helper thread runs). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "backend.h"
#include "bf16.h"
#include "data.h"
#include "loss.h"
#include "model.h"
#include "replicas.h"
#include "rng.h"

#define IN 64
#define K 4
#define CAP 33

static const char *mlp_plain = "{\"layers\":[{\"flatten\":{}},"
                               "{\"dense\":{\"units\":24,\"activation\":\"relu\"}},"
                               "{\"dense\":{\"units\":16,\"activation\":\"tanh\"}},{\"dense\":{\"units\":4}}],"
                               "\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.01}}";
static const char *mlp_dropout = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":24,\"activation\":\"relu\"}},"
                                 "{\"dropout\":{\"rate\":0.3}},{\"batchnorm\":{}},{\"dense\":{\"units\":4}}],"
                                 "\"optimizer\":{\"name\":\"sgd\",\"momentum\":0.9,\"learning_rate\":0.05}}";

static eng_model *make(const char *tmpl, int precision) {
    json_error_t je;
    json_t *t = json_loads(tmpl, 0, &je);
    assert_non_null(t);
    int shape[3] = {8, 8, 1};
    eng_model *m = NULL;
    hpo_error err;
    assert_int_equal(eng_model_new(t, NULL, 3, shape, K, 42, &m, &err), 0);
    json_decref(t);
    assert_int_equal(eng_model_reserve(m, CAP, precision), 0);
    return m;
}

typedef struct batch {
    float x[CAP * IN];
    uint16_t xb[CAP * IN];
    int32_t y[CAP];
} batch;

static void fill(batch *b, hpo_rng *r) {
    for (int i = 0; i < CAP * IN; i++) b->x[i] = hpo_rng_uniform_f(r);
    for (int i = 0; i < CAP; i++) b->y[i] = (int32_t)hpo_rng_below(r, K);
    eng_f32_to_bf16_n(b->x, b->xb, CAP * IN);
    for (int i = 0; i < CAP * IN; i++) b->x[i] = eng_bf16_to_f32(b->xb[i]); /* the same values both ways */
}

/* the single-threaded reference step (what eng_train does with 1 thread) */
static double step_single(eng_model *m, const batch *b, int n, long t) {
    const float *logits;
    assert_int_equal(eng_model_forward_from(m, b->x, n, 1, &logits), 0);
    double loss = eng_loss_compute(m->loss, m->final_act, logits, b->y, NULL, n, K, 1.0f, m->dlogits, NULL);
    assert_int_equal(eng_model_backward_update(m, n, 0.01f, t), 0);
    return loss;
}

/* a replica step on arrays (no batcher) */
static int step_on(eng_replicas *r, const void *x, int bf16, const int32_t *y, int n, float lr, long t,
                   eng_metric_sums *sums, double *loss) {
    eng_batch b = {.n = (size_t)n, .x = x, .y_class = y};
    return eng_replicas_step(r, &b, NULL, bf16, lr, t, sums, loss);
}

static double maxdiff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* 12 steps of 32, 33, 7 and 3 rows (3: one per thread at T = 3), the same
 * batches on a alone and on reps: the largest loss difference. */
static double twelve_steps(eng_model *a, eng_replicas *reps) {
    const int sizes[] = {32, 33, 7, 3};
    hpo_rng r;
    hpo_rng_seed(&r, 7);
    batch bt;
    double worst_loss = 0;
    for (int s = 0; s < 12; s++) {
        int n = sizes[s % 4];
        fill(&bt, &r);
        double la = step_single(a, &bt, n, s + 1), lb;
        eng_metric_sums sums;
        memset(&sums, 0, sizeof sums);
        assert_int_equal(step_on(reps, bt.x, 0, bt.y, n, 0.01f, s + 1, &sums, &lb), 0);
        assert_int_equal((int)sums.n, n);
        worst_loss = fmax(worst_loss, fabs(la - lb));
    }
    return worst_loss;
}

static void test_replicas_match_single_thread(void **state) {
    (void)state;
    for (int T = 2; T <= 3; T++) {
        eng_model *a = make(mlp_plain, ENG_PREC_FP32), *b = make(mlp_plain, ENG_PREC_FP32);
        eng_replicas *reps = NULL;
        assert_int_equal(eng_replicas_new(b, T, &reps), 0);
        double worst_loss = twelve_steps(a, reps);
        double d = maxdiff(a->params, b->params, a->nparams);
        printf("  fp32 mlp, adam, %d threads vs 1, 12 steps of 32/33/7/3 rows: max |param diff| %.3g, "
               "max |loss diff| %.3g\n", T, d, worst_loss);
        assert_true(d < 1e-5);
        assert_true(worst_loss < 1e-5);
        eng_replicas_free(reps);
        eng_model_free(a);
        eng_model_free(b);
    }
}

/* With dropout and augmentation (no batch normalisation, which uses each
 * share's batch statistics), T threads give the one-thread run up to
 * summation order: every share draws the masks of its rows of the whole
 * batch (replicas.h), and the model's generator advances as with T = 1. */
static void test_replicas_dropout_match_single_thread(void **state) {
    (void)state;
    const char *tmpl = "{\"layers\":[{\"augment\":{\"translate\":2,\"flip\":true}},{\"flatten\":{}},"
                       "{\"dense\":{\"units\":24,\"activation\":\"relu\"}},{\"dropout\":{\"rate\":0.3}},"
                       "{\"dense\":{\"units\":16,\"activation\":\"tanh\"}},{\"dropout\":{\"rate\":0.5}},"
                       "{\"dense\":{\"units\":4}}],\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.01}}";
    for (int T = 2; T <= 3; T++) {
        eng_model *a = make(tmpl, ENG_PREC_FP32), *b = make(tmpl, ENG_PREC_FP32);
        eng_replicas *reps = NULL;
        assert_int_equal(eng_replicas_new(b, T, &reps), 0);
        double worst_loss = twelve_steps(a, reps);
        double d = maxdiff(a->params, b->params, a->nparams);
        int same_rng = !memcmp(&a->rng, &b->rng, sizeof a->rng);
        printf("  augment + 2 dropout layers, adam, %d threads vs 1, 12 steps of 32/33/7/3 rows: max |param diff| "
               "%.3g, max |loss diff| %.3g, generator %s\n", T, d, worst_loss, same_rng ? "identical" : "DIFFERS");
        /* rounding only (with other masks: ~1e-2); Adam's 1/sqrt(v) magnifies
         * it on parameters whose gradient a mask often zeroes */
        assert_true(d < 1e-4);
        assert_true(worst_loss < 1e-5);
        assert_true(same_rng);
        eng_replicas_free(reps);
        eng_model_free(a);
        eng_model_free(b);
    }
}

/* The dropout + batchnorm model after 8 steps of 32 rows on 2 threads. */
static eng_model *train_dropout(eng_replicas **reps, hpo_rng *r, batch *bt) {
    eng_model *m = make(mlp_dropout, ENG_PREC_FP32);
    assert_int_equal(eng_replicas_new(m, 2, reps), 0);
    hpo_rng_seed(r, 11);
    for (int s = 0; s < 8; s++) {
        fill(bt, r);
        double loss;
        eng_metric_sums sums;
        memset(&sums, 0, sizeof sums);
        assert_int_equal(step_on(*reps, bt->x, 0, bt->y, 32, 0.05f, s + 1, &sums, &loss), 0);
        assert_true(isfinite(loss));
    }
    return m;
}

static void run_dropout(float *out, size_t *np) {
    eng_replicas *reps = NULL;
    hpo_rng r;
    batch bt;
    eng_model *m = train_dropout(&reps, &r, &bt);
    memcpy(out, m->params, m->nparams * sizeof(float));
    *np = m->nparams;
    eng_replicas_free(reps);
    eng_model_free(m);
}

static void test_replicas_deterministic(void **state) {
    (void)state;
    static float p1[1 << 14], p2[1 << 14];
    size_t n1, n2;
    run_dropout(p1, &n1);
    run_dropout(p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof(float));
    printf("  dropout + batchnorm + sgd on 2 threads, twice from the same seed: parameters bit-identical\n");
}

static void test_replicas_bf16_batches(void **state) {
    (void)state;
    eng_model *a = make(mlp_plain, ENG_PREC_BF16);
    if (!a->be->gemm_bf16) {
        eng_model_free(a);
        skip();
    }
    eng_model *b = make(mlp_plain, ENG_PREC_BF16);
    eng_replicas *reps = NULL;
    assert_int_equal(eng_replicas_new(b, 2, &reps), 0);
    hpo_rng r;
    hpo_rng_seed(&r, 5);
    batch bt;
    for (int s = 0; s < 6; s++) {
        fill(&bt, &r);
        step_single(a, &bt, 32, s + 1);
        double loss;
        eng_metric_sums sums;
        memset(&sums, 0, sizeof sums);
        assert_int_equal(step_on(reps, bt.xb, 1, bt.y, 32, 0.01f, s + 1, &sums, &loss), 0);
    }
    /* bf16 GEMMs of 16 rows round their inputs as those of 32 do, but the
     * gradients are summed in another order before the bf16 shadow */
    double d = maxdiff(a->params, b->params, a->nparams);
    uint16_t shadow[4096];
    eng_f32_to_bf16_n(b->params, shadow, b->nparams);
    printf("  mixed_bf16 mlp, bf16 batches on 2 threads vs f32 batches on 1, 6 steps: max |param diff| %.3g\n", d);
    assert_true(d < 2e-3);
    assert_memory_equal(shadow, b->params_b16, b->nparams * sizeof(uint16_t)); /* the shadow is current */
    /* evaluation of bf16 batches on the replicas: as one forward pass */
    fill(&bt, &r);
    eng_metric_sums one = {0}, two = {0};
    const float *logits;
    assert_int_equal(eng_model_forward_bf16(b, bt.xb, 32, 0, &logits), 0);
    eng_loss_compute(b->loss, b->final_act, logits, bt.y, NULL, 32, K, 1.0f, NULL, &one);
    eng_batch eb = {.n = 32, .x = bt.xb, .y_class = bt.y};
    assert_int_equal(eng_replicas_evaluate(reps, &eb, 1, &two), 0);
    printf("  mixed_bf16 evaluate on 2 threads vs 1: loss sums %.9g vs %.9g, correct %g vs %g\n", two.loss, one.loss,
           (double)two.correct, (double)one.correct);
    assert_true(fabs(one.loss - two.loss) <= 1e-5 * fmax(1.0, fabs(one.loss)));
    assert_true(one.correct == two.correct);
    eng_replicas_free(reps);
    eng_model_free(a);
    eng_model_free(b);
}

/* Replica sets created and used at once, many times: a helper that reads the
 * phase counter only when it starts would miss the first phase and hang
 * the step (main's alarm turns a hang into a failure). */
static void test_replicas_many_short_lived(void **state) {
    (void)state;
    eng_model *m = make(mlp_plain, ENG_PREC_FP32);
    hpo_rng r;
    hpo_rng_seed(&r, 3);
    batch bt;
    fill(&bt, &r);
    for (int i = 0; i < 300; i++) {
        eng_replicas *reps = NULL;
        assert_int_equal(eng_replicas_new(m, 2 + i % 2, &reps), 0);
        double loss;
        eng_metric_sums sums;
        memset(&sums, 0, sizeof sums);
        assert_int_equal(step_on(reps, bt.x, 0, bt.y, 3 + i % 30, 0.001f, i + 1, &sums, &loss), 0);
        if (i % 3 == 0) usleep(300); /* let the helpers fall asleep sometimes */
        assert_int_equal(step_on(reps, bt.x, 0, bt.y, 32, 0.001f, i + 1, &sums, &loss), 0);
        eng_replicas_free(reps);
    }
    printf("  300 replica sets of 2-3 threads, created, stepped twice, freed\n");
    eng_model_free(m);
}

/* Each thread gathering its share from the dataset (defer_gather) gives the
 * same step as a batch gathered whole, in f32 and in bf16 batches. 200 rows
 * in batches of 32 end with a batch of 8: each share's prefetch of the next
 * batch's rows must stop at its end (ASan checks the reads of the order). */
static void test_replicas_deferred_gather(void **state) {
    (void)state;
    int64_t shape[3] = {8, 8, 1};
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_new("replicas", 200, 3, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 0, &ds), 0);
    ds->x_scale = 1.0f / 255.0f;
    ds->n_classes = K;
    hpo_rng r;
    hpo_rng_seed(&r, 21);
    for (size_t i = 0; i < 200 * IN; i++) ((uint8_t *)ds->x)[i] = (uint8_t)hpo_rng_below(&r, 256);
    for (size_t i = 0; i < 200; i++) ds->y_class[i] = (int32_t)hpo_rng_below(&r, K);
    eng_split sp;
    eng_split_spec spec = {0};
    hpo_error err;
    assert_int_equal(eng_split_make(ds, &spec, &sp, NULL, &err), 0);
    for (int bf = 0; bf < 2; bf++) {
        eng_model *a = make(mlp_plain, bf ? ENG_PREC_BF16 : ENG_PREC_FP32);
        eng_model *b = make(mlp_plain, bf ? ENG_PREC_BF16 : ENG_PREC_FP32);
        if (bf && !a->be->gemm_bf16) {
            eng_model_free(a), eng_model_free(b);
            break;
        }
        eng_replicas *ra = NULL, *rb = NULL;
        assert_int_equal(eng_replicas_new(a, 2, &ra), 0);
        assert_int_equal(eng_replicas_new(b, 2, &rb), 0);
        eng_batcher_opts oa = {.batch_size = 32, .shuffle = 1, .seed = 4,
                               .x_type = bf ? ENG_BATCH_BF16 : ENG_BATCH_F32};
        eng_batcher_opts ob = oa;
        ob.defer_gather = 1;
        eng_batcher *ba = NULL, *bb = NULL;
        assert_int_equal(eng_batcher_new(&sp, &oa, &ba, &err), 0);
        assert_int_equal(eng_batcher_new(&sp, &ob, &bb, &err), 0);
        assert_true(eng_batcher_start_epoch(ba, 0) >= 0);
        assert_true(eng_batcher_start_epoch(bb, 0) >= 0);
        int steps = 0;
        for (;;) {
            eng_batch x, y;
            int ka = eng_batcher_next(ba, &x), kb = eng_batcher_next(bb, &y);
            assert_int_equal(ka, kb);
            if (ka == 0) break;
            double la, lb;
            eng_metric_sums sa = {0}, sb = {0};
            assert_int_equal(eng_replicas_step(ra, &x, NULL, bf, 0.01f, steps + 1, &sa, &la), 0);
            assert_int_equal(eng_replicas_step(rb, &y, bb, bf, 0.01f, steps + 1, &sb, &lb), 0);
            assert_true(la == lb);
            steps++;
        }
        assert_int_equal(steps, 7); /* 200 rows: 6 of 32 and one of 8 */
        assert_memory_equal(a->params, b->params, a->nparams * sizeof(float));
        printf("  %s batches gathered share by share on 2 threads: %d steps, parameters bit-identical\n",
               bf ? "bf16" : "f32", steps);
        assert_int_equal(eng_batcher_gather_rows(ba, &(eng_batch){.n = 4}, 0, 4), HPO_EINVAL); /* not deferred */
        eng_batcher_free(ba), eng_batcher_free(bb);
        eng_replicas_free(ra), eng_replicas_free(rb);
        eng_model_free(a), eng_model_free(b);
    }
    eng_split_clear(&sp);
    eng_dataset_release(ds);
}

/* Evaluation on the replicas' threads gives the metrics of a single-threaded
 * forward pass with the primary's parameters and running statistics (the
 * replicas' own statistics differ after training: each saw its share). */
static void test_replicas_evaluate(void **state) {
    (void)state;
    eng_replicas *reps = NULL;
    hpo_rng r;
    batch bt;
    eng_model *m = train_dropout(&reps, &r, &bt);
    double worst = 0;
    for (int s = 0; s < 4; s++) {
        fill(&bt, &r);
        int n = s % 2 ? CAP : 2;
        eng_metric_sums one = {0}, two = {0};
        const float *logits;
        assert_int_equal(eng_model_forward_from(m, bt.x, n, 0, &logits), 0);
        eng_loss_compute(m->loss, m->final_act, logits, bt.y, NULL, n, K, 1.0f, NULL, &one);
        eng_batch b = {.n = (size_t)n, .x = bt.x, .y_class = bt.y};
        assert_int_equal(eng_replicas_evaluate(reps, &b, 0, &two), 0);
        assert_int_equal((int)two.n, n);
        assert_true(one.correct == two.correct);
        worst = fmax(worst, fabs(one.loss - two.loss) / fmax(1.0, fabs(one.loss)));
    }
    printf("  evaluate on 2 threads vs 1 (dense, dropout, batchnorm): max relative loss-sum diff %.3g\n", worst);
    assert_true(worst < 1e-5);
    eng_batch b = {.n = 1, .x = bt.x, .y_class = bt.y};
    eng_metric_sums sums = {0};
    assert_int_equal(eng_replicas_evaluate(reps, &b, 0, &sums), HPO_EINVAL);
    eng_replicas_free(reps);
    eng_model_free(m);
}

static void test_replicas_bad_arguments(void **state) {
    (void)state;
    eng_model *m = make(mlp_plain, ENG_PREC_FP32);
    eng_replicas *reps = NULL;
    assert_int_equal(eng_replicas_new(m, 1, &reps), HPO_EINVAL);
    assert_int_equal(eng_replicas_new(m, CAP + 1, &reps), HPO_EINVAL);
    assert_int_equal(eng_replicas_new(m, 2, &reps), 0);
    batch bt = {0};
    double loss;
    eng_metric_sums sums = {0};
    /* no rows, fewer rows than threads (the caller trains those on the model
     * alone), more than the capacity */
    const size_t bad[] = {0, 1, CAP + 1};
    for (size_t i = 0; i < HPO_ARRAY_LEN(bad); i++) {
        eng_batch b = {.n = bad[i], .x = bt.x, .y_class = bt.y};
        assert_int_equal(eng_replicas_step(reps, &b, NULL, 0, 0.01f, 1, &sums, &loss), HPO_EINVAL);
    }
    eng_replicas_free(reps);
    eng_model_free(m);
}

int main(void) {
    alarm(120); /* a lost wake-up hangs a step: fail instead of waiting for ctest's timeout */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_match_single_thread), cmocka_unit_test(test_replicas_deterministic),
        cmocka_unit_test(test_replicas_bf16_batches),        cmocka_unit_test(test_replicas_many_short_lived),
        cmocka_unit_test(test_replicas_deferred_gather), cmocka_unit_test(test_replicas_evaluate),
        cmocka_unit_test(test_replicas_bad_arguments), cmocka_unit_test(test_replicas_dropout_match_single_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
