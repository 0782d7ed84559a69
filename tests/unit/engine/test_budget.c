/* test_budget.c - the memory budget of a training run (train.h,
 * eng_train_mem) and out-of-memory handling (tensor.h):
 * - the estimate of a small MLP against a naive count written out by hand;
 * - the estimate against what a real run allocates (eng_alloc counts every
 *   byte it hands out on the thread) for MLPs, CNNs with fused conv+pool,
 *   residual blocks with projections, batch norm, dropout, augmentation, in
 *   fp32 / mixed_bf16 / mixed_fp16, on 1 to 3 threads (data-parallel
 *   replicas), with best-weight copies, and resumed from a checkpoint (read
 *   straight into the model: nothing more);
 * - a 1,048,576 x 1,048,576 dense layer: the shape-only model costs nothing,
 *   the budget refuses it naming "model.layers[0].dense.units", and sizes
 *   past 2^48 parameters or 2^31 values per sample are refused when built;
 * - under a budget that only the replicas break, training falls back to
 *   one model (intra-op threads) and allocates what the estimate says;
 * - every allocation failure on the way through eng_model_new and
 *   eng_train returns HPO_ENOMEM with a message (no abort, no leak: the
 *   sanitizer build checks the latter). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "data.h"
#include "model.h"
#include "ops.h"
#include "replicas.h"
#include "rng.h"
#include "tensor.h"
#include "train.h"

static json_t *J(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("bad JSON in the test: %s", je.text);
    return j;
}

/* 8x8x1 images of 4 classes */
static eng_dataset *synth(size_t n, uint64_t seed) {
    int64_t shape[3] = {8, 8, 1};
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_new("synthetic", n, 3, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    ds->x_scale = 1.0f / 255.0f;
    ds->n_classes = 4;
    hpo_rng r;
    hpo_rng_seed(&r, seed);
    uint8_t *x = ds->x;
    for (size_t i = 0; i < n; i++) {
        ds->y_class[i] = (int32_t)hpo_rng_below(&r, 4);
        for (int p = 0; p < 64; p++) x[i * 64 + p] = (uint8_t)hpo_rng_below(&r, 256);
    }
    return ds;
}

static const char mlp[] = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":32,\"activation\":\"tanh\"}},"
                         "{\"dense\":{\"units\":4,\"activation\":\"softmax\"}}],\"optimizer\":\"adam\"}";
static const char mlp_bn[] = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":24,\"activation\":\"relu\"}},"
                            "{\"dropout\":{\"rate\":0.3}},{\"batchnorm\":{}},{\"dense\":{\"units\":4}}],"
                            "\"optimizer\":{\"name\":\"sgd\",\"momentum\":0.9,\"learning_rate\":0.05}}";
static const char mlp_clip[] = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":16,\"activation\":\"gelu\"}},"
                              "{\"dense\":{\"units\":4}}],\"optimizer\":{\"name\":\"rmsprop\",\"clipnorm\":1.0}}";
static const char cnn[] = "{\"layers\":[{\"augment\":{\"translate\":1,\"flip\":true}},"
                         "{\"conv2d\":{\"filters\":16,\"kernel\":3,\"padding\":\"same\",\"activation\":\"relu\"}},"
                         "{\"maxpool2d\":{\"pool\":2}},"
                         "{\"conv2d\":{\"filters\":16,\"kernel\":3,\"padding\":\"same\",\"activation\":\"relu\"}},"
                         "{\"batchnorm\":{}},{\"global_avg_pool\":{}},{\"dense\":{\"units\":4,\"activation\":\"softmax\"}}],"
                         "\"optimizer\":\"adamw\"}";
static const char resnet[] = "{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"same\"}},"
                            "{\"residual\":{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"same\","
                            "\"activation\":\"relu\"}},{\"batchnorm\":{}},{\"conv2d\":{\"filters\":12,\"kernel\":3,"
                            "\"padding\":\"same\",\"stride\":2}}],\"activation\":\"relu\"}},"
                            "{\"activation\":\"gelu\"},{\"flatten\":{}},{\"dense\":{\"units\":4}}],\"optimizer\":\"adam\"}";

static eng_model *build(const char *tmpl, uint64_t seed) {
    json_t *t = J(tmpl);
    int shape[3] = {8, 8, 1};
    eng_model *m = NULL;
    hpo_error err;
    memset(&err, 0, sizeof err);
    int rc = eng_model_new(t, NULL, 3, shape, 4, seed, &m, &err);
    json_decref(t);
    if (rc) fail_msg("%s: %s", err.field, err.message);
    return m;
}

/* ---- the estimate of a small MLP, counted by hand ---- */

static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

static void test_naive_reference(void **state) {
    (void)state;
    eng_model *m = build(mlp, 1);
    const size_t B = 16, in = 64, h = 32, k = 4;
    size_t P = in * h + h + h * k + k; /* two dense layers: kernels and biases */
    assert_int_equal(m->nparams, P);
    /* Adam: parameters, gradients and two moments, 4 bytes each; no batch norm */
    size_t weights = 4 * P + 4 * P + 4 * 2 * P;
    /* per dense layer: its output y (and pre-activation z when the activation
     * needs it) and the gradient of its input; the last layer's softmax is
     * fused into the loss, so it keeps y only. Plus the model's input and the
     * gradient of the logits. */
    size_t acts = 4 * B * (h + (eng_act_needs_z(ENG_ACT_TANH) ? h : 0) + in) + 4 * B * (k + h) + 4 * B * in + 4 * B * k;
    size_t blocks = eng_model_block_bytes(m), bufs = eng_model_buffer_bytes(m, (int)B, ENG_PREC_FP32, 0);
    printf("  MLP 64-32-4, Adam, batch 16: weights %zu B (naive %zu), activations %zu B (naive %zu)\n", blocks,
           weights, bufs, acts);
    /* each block rounds up to 64 bytes and has one spare float */
    assert_true(blocks >= weights && blocks <= weights + 4 * 64 + 4 * 4);
    assert_true(bufs >= acts && bufs <= acts + 8 * 64);
    /* the training run adds the best-weight copy and the batches (x in f32,
     * int32 labels; two training slots with prefetch, one for validation) */
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.batch_size = (int)B;
    o.threads = 1;
    o.restore_best = 1;
    eng_train_mem e;
    eng_train_mem_estimate(m, &o, &e);
    assert_int_equal(e.best, up64((P + 1) * 4));
    assert_int_equal(e.batches, 3 * (up64(B * in * 4) + up64(B * 4)));
    assert_int_equal(e.replicas, 0);
    assert_int_equal(e.total, e.weights + e.activations + e.best + e.batches);
    eng_model_free(m);
}

/* ---- the estimate against real allocations ---- */

typedef struct config {
    const char *name, *tmpl;
    int precision, threads, batch, restore_best, prefetch;
} config;

static const config configs[] = {
    {"mlp fp32 1 thread", mlp, ENG_PREC_FP32, 1, 16, 1, 1},
    {"mlp fp32 2 threads (replicas)", mlp, ENG_PREC_FP32, 2, 16, 1, 0},
    {"mlp+dropout+bn sgd 3 threads", mlp_bn, ENG_PREC_FP32, 3, 18, 0, 1},
    {"mlp bf16 2 threads", mlp, ENG_PREC_BF16, 2, 16, 1, 1},
    {"mlp rmsprop clipnorm 2 threads (no replicas)", mlp_clip, ENG_PREC_FP32, 2, 16, 1, 1},
    {"cnn conv+pool fused, bn, gap; fp32", cnn, ENG_PREC_FP32, 1, 12, 1, 1},
    {"cnn mixed_bf16 2 threads", cnn, ENG_PREC_BF16, 2, 12, 1, 1},
    {"resnet projection; mixed_fp16 2 threads", resnet, ENG_PREC_FP16, 2, 10, 1, 1},
    {"resnet fp32 3 threads", resnet, ENG_PREC_FP32, 3, 12, 0, 1},
};

static int bf16_ok(void) {
    eng_model *m = build(mlp, 1);
    int ok = m->be->gemm_bf16 != NULL;
    eng_model_free(m);
    return ok;
}

static void opts_for(const config *c, eng_train_opts *o) {
    eng_train_opts_init(o);
    o->epochs = 1;
    o->batch_size = c->batch;
    o->threads = c->threads;
    o->precision = c->precision;
    o->restore_best = c->restore_best;
    o->prefetch = c->prefetch;
    o->seed = 7;
    o->monitor = "val_loss";
}

/* Builds and trains (counting this thread's allocations); the count and rc. */
static int counted_run(const char *tmpl, const eng_train_opts *o, const eng_split *tr, const eng_split *va,
                       size_t *count, hpo_error *err) {
    eng_alloc_count_reset();
    eng_model *m = NULL;
    json_t *t = J(tmpl);
    int shape[3] = {8, 8, 1};
    int rc = eng_model_new(t, NULL, 3, shape, 4, 3, &m, err);
    json_decref(t);
    eng_train_result r;
    if (rc == 0) rc = eng_train(m, tr, va, o, &r, err);
    *count = eng_alloc_counted();
    eng_model_free(m);
    return rc;
}

static void test_estimate_matches_allocations(void **state) {
    (void)state;
    eng_dataset *ds = synth(120, 5);
    eng_split tr, va;
    eng_split_spec spec = {.val_count = 40};
    hpo_error err;
    assert_int_equal(eng_split_make(ds, &spec, &tr, &va, &err), 0);
    int bf16 = bf16_ok();
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        const config *c = &configs[i];
        if (c->precision == ENG_PREC_BF16 && !bf16) {
            printf("  %-44s skipped: no bf16 GEMM on this backend\n", c->name);
            continue;
        }
        eng_train_opts o;
        opts_for(c, &o);
        eng_model *shape = NULL;
        json_t *t = J(c->tmpl);
        int in_shape[3] = {8, 8, 1};
        eng_alloc_count_reset();
        assert_int_equal(eng_model_new_shape(t, NULL, 3, in_shape, 4, &shape, &err), 0);
        assert_int_equal(eng_alloc_counted(), 0); /* a shape-only model allocates nothing in proportion */
        json_decref(t);
        eng_train_mem e;
        eng_train_mem_estimate(shape, &o, &e);
        eng_model_free(shape);
        size_t count = 0;
        int rc = counted_run(c->tmpl, &o, &tr, &va, &count, &err);
        if (rc) fail_msg("%s: %s", c->name, err.message);
        size_t sum = e.weights + e.activations + e.replicas + e.best + e.batches;
        printf("  %-44s estimate %7zu B (peak %7zu, replicas %6zu), allocated %7zu B\n", c->name, sum, e.total,
               e.replicas, count);
        assert_int_equal(e.data_parallel, c->threads > 1 && c->tmpl != mlp_clip && c->precision != ENG_PREC_FP16);
        assert_int_equal(count, sum); /* the estimate is the allocation */
        assert_int_equal(e.total, sum);
    }
    /* resuming reads the checkpoint once: its size, within the header's slack */
    char dir[] = "/tmp/hpo-budget-XXXXXX";
    assert_non_null(mkdtemp(dir));
    eng_train_opts o;
    opts_for(&configs[1], &o);
    o.checkpoint_dir = dir;
    o.checkpoint_durable = 0;
    size_t first = 0, resumed = 0;
    assert_int_equal(counted_run(mlp, &o, &tr, &va, &first, &err), 0);
    o.resume = 1;
    o.epochs = 2;
    assert_int_equal(counted_run(mlp, &o, &tr, &va, &resumed, &err), 0);
    eng_model *m = build(mlp, 3);
    eng_train_mem e;
    eng_train_mem_estimate(m, &o, &e);
    eng_model_free(m);
    printf("  resumed run: estimate %zu B, allocated %zu B\n", e.total, resumed);
    assert_int_equal(resumed, e.total);
    char path[128];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    unlink(path);
    rmdir(dir);
    eng_split_clear(&tr);
    eng_split_clear(&va);
    eng_dataset_release(ds);
}

/* ---- huge layers: refused before anything is allocated ---- */

static void test_huge_dense_refused_before_allocating(void **state) {
    (void)state;
    json_t *t = J("{\"layers\":[{\"dense\":{\"units\":1048576,\"activation\":\"relu\"}},"
                  "{\"dense\":{\"units\":1048576}},{\"dense\":{\"units\":10,\"activation\":\"softmax\"}}]}");
    int in[1] = {1048576};
    eng_model *m = NULL;
    hpo_error err;
    memset(&err, 0, sizeof err);
    eng_alloc_count_reset();
    assert_int_equal(eng_model_new_shape(t, NULL, 1, in, 10, &m, &err), 0);
    assert_int_equal(eng_alloc_counted(), 0);
    assert_int_equal(m->nparams, 2 * ((size_t)1 << 40) + 2 * ((size_t)1 << 20) + ((size_t)10 << 20) + 10);
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.batch_size = 128;
    o.restore_best = 1;
    o.max_bytes = (size_t)4 << 30;
    eng_train_mem e;
    int rc = eng_train_check_budget(m, &o, &e, &err);
    printf("  2 x 2^20 x 2^20 dense: %s (field %s)\n", err.message, err.field);
    assert_int_equal(rc, HPO_ETOOLARGE);
    assert_string_equal(err.field, "model.layers[0].dense.units");
    assert_true(strncmp(err.message, "model needs 40.", 15) == 0 && strstr(err.message, " TiB, budget 4.0 GiB: "));
    /* 2^41 parameters: params, grads, two Adam moments and the best copy, 4 bytes each */
    assert_true(e.weights + e.best >= ((size_t)1 << 41) * 20 && e.total < SIZE_MAX);
    eng_alloc_fail_after(0); /* nothing below may allocate through the engine */
    assert_null(eng_alloc(1));
    assert_int_equal(eng_train_check_budget(m, &o, NULL, &err), HPO_ETOOLARGE);
    eng_alloc_fail_after(SIZE_MAX);
    eng_model_free(m);
    json_decref(t);

    /* sizes that would overflow later arithmetic are refused when built */
    t = J("{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":1048576}}],\"loss\":\"mse\"}");
    int wide[3] = {46341, 46341, 1}; /* 2^31 + 6M values per sample */
    assert_int_equal(eng_model_new_shape(t, NULL, 3, wide, 0, &m, &err), HPO_ETOOLARGE);
    assert_string_equal(err.field, "dataset");
    int big[3] = {32768, 32768, 1}; /* flatten to 2^30, dense: 2^50 weights */
    assert_int_equal(eng_model_new_shape(t, NULL, 3, big, 0, &m, &err), HPO_ETOOLARGE);
    printf("  %s\n", err.message);
    assert_string_equal(err.field, "model.layers[1].dense");
    json_decref(t);
    t = J("{\"layers\":[{\"conv2d\":{\"filters\":65536,\"kernel\":1}},{\"dense\":{\"units\":65536}},"
          "{\"global_avg_pool\":{}}],\"loss\":\"mse\"}");
    int img[3] = {256, 256, 4}; /* conv output: 2^32 values per sample */
    assert_int_equal(eng_model_new_shape(t, NULL, 3, img, 0, &m, &err), HPO_ETOOLARGE);
    assert_string_equal(err.field, "model.layers[0].conv2d");
    json_decref(t);
    /* saturating size arithmetic */
    assert_int_equal(eng_size_mul(SIZE_MAX / 2, 3), SIZE_MAX);
    assert_int_equal(eng_size_add(SIZE_MAX - 1, 2), SIZE_MAX);
    assert_int_equal(eng_alloc_size(SIZE_MAX - 10), SIZE_MAX);
    assert_null(eng_alloc(SIZE_MAX - 10));
    assert_int_equal(eng_alloc_size(1), 64);
    assert_int_equal(eng_alloc_size(0), 64);
}

/* ---- a budget that only the replicas break: one model, intra-op threads ---- */

static void test_budget_drops_replicas(void **state) {
    (void)state;
    eng_dataset *ds = synth(80, 9);
    eng_split tr, va;
    eng_split_spec spec = {.val_count = 24};
    hpo_error err;
    assert_int_equal(eng_split_make(ds, &spec, &tr, &va, &err), 0);
    eng_train_opts o;
    opts_for(&configs[1], &o);
    eng_model *m = build(mlp, 3);
    eng_train_mem dp, one;
    eng_train_mem_estimate(m, &o, &dp);
    assert_true(dp.data_parallel && dp.replicas > 0);
    o.max_bytes = dp.total - 1;
    eng_train_mem_estimate(m, &o, &one);
    assert_false(one.data_parallel);
    assert_int_equal(one.replicas, 0);
    assert_true(one.total <= o.max_bytes);
    eng_model_free(m);
    size_t count = 0;
    assert_int_equal(counted_run(mlp, &o, &tr, &va, &count, &err), 0);
    assert_int_equal(count, one.weights + one.activations + one.best + one.batches);
    o.max_bytes = one.total - 1; /* now nothing fits */
    assert_int_equal(counted_run(mlp, &o, &tr, &va, &count, &err), HPO_ETOOLARGE);
    printf("  %s (%s)\n", err.message, err.field);
    assert_string_equal(err.field, "model.layers[1].dense.units");
    eng_split_clear(&tr);
    eng_split_clear(&va);
    eng_dataset_release(ds);
}

/* ---- every allocation failure is HPO_ENOMEM with a message ---- */

static void test_allocation_failures_return_enomem(void **state) {
    (void)state;
    eng_dataset *ds = synth(64, 11);
    eng_split tr, va;
    eng_split_spec spec = {.val_count = 24};
    hpo_error err;
    assert_int_equal(eng_split_make(ds, &spec, &tr, &va, &err), 0);
    char dir[] = "/tmp/hpo-budget-XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const config runs[] = {
        {"mlp 2 threads, checkpoint resumed", mlp, ENG_PREC_FP32, 2, 16, 1, 0},
        {"resnet fp16", resnet, ENG_PREC_FP16, 1, 8, 1, 1},
        {"cnn 3 threads", cnn, ENG_PREC_FP32, 3, 12, 0, 1},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        eng_train_opts o;
        opts_for(&runs[i], &o);
        if (i == 0) { /* a checkpoint at epoch 1 to resume from */
            o.checkpoint_dir = dir;
            o.checkpoint_durable = 0;
            size_t c0;
            assert_int_equal(counted_run(runs[i].tmpl, &o, &tr, &va, &c0, &err), 0);
            o.resume = 1;
            o.epochs = 2;
        }
        size_t total = 0;
        /* the failing runs below fail before epoch 2's checkpoint: the one
         * at epoch 1 stays for every run to resume from */
        eng_alloc_fail_after(SIZE_MAX);
        int tries = 0, enomem = 0;
        size_t step = 0;
        for (size_t limit = 0;; limit += step) {
            eng_alloc_fail_after(limit);
            size_t count;
            memset(&err, 0, sizeof err);
            int rc = counted_run(runs[i].tmpl, &o, &tr, &va, &count, &err);
            eng_alloc_fail_after(SIZE_MAX);
            tries++;
            if (rc == 0) {
                total = count;
                break;
            }
            if (rc != HPO_ENOMEM) fail_msg("%s, limit %zu: %s (%s)", runs[i].name, limit, hpo_errname(rc), err.message);
            if (!strstr(err.message, "out of memory")) fail_msg("%s: no reason given: \"%s\"", runs[i].name, err.message);
            enomem++;
            if (!step) { /* about 150 limits up to the full run */
                eng_model *m = build(runs[i].tmpl, 3);
                eng_train_mem e;
                eng_train_mem_estimate(m, &o, &e);
                eng_model_free(m);
                step = e.total / 150 + 1;
            }
        }
        printf("  %-36s %d runs out of memory at limits up to %zu B, then complete\n", runs[i].name, enomem, total);
        assert_true(enomem >= 100);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    unlink(path);
    rmdir(dir);
    eng_split_clear(&tr);
    eng_split_clear(&va);
    eng_dataset_release(ds);
}

int main(void) {
    hpo_log_level = HPO_LOG_WARN; /* not a line per resumed checkpoint */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive_reference),
        cmocka_unit_test(test_estimate_matches_allocations),
        cmocka_unit_test(test_huge_dense_refused_before_allocating),
        cmocka_unit_test(test_budget_drops_replicas),
        cmocka_unit_test(test_allocation_failures_return_enomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
