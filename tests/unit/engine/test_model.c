/* test_model.c - model templates (references, field-named errors, shapes,
 * residual projections), optimisers against their scalar reference,
 * learning-rate schedules, checkpoint/resume bit-identity, divergence as
 * data, mixed_fp16 loss scaling and the early-stopping/callback plumbing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bf16.h"
#include "data.h"
#include "model.h"
#include "optim.h"
#include "safetensors.h"
#include "train.h"
#include "weights.h"

static json_t *J(const char *s) {
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (!j) fprintf(stderr, "bad test JSON: %s\n", e.text);
    assert_non_null(j);
    return j;
}

/* Build tmpl with params; expect rc and (if field) that exact field. */
static void expect_build(const char *tmpl, const char *params, int rank, int h, int w, int c, int rc, const char *field) {
    json_t *t = J(tmpl), *p = params ? J(params) : NULL;
    int shape[3] = {h, w, c};
    eng_model *m = NULL;
    hpo_error err;
    memset(&err, 0, sizeof err);
    int got = eng_model_new(t, p, rank, shape, 10, 1, &m, &err);
    printf("  %-60.60s -> %s %s: %s\n", tmpl, hpo_errname(got), err.field, err.message);
    assert_int_equal(got, rc);
    if (field) assert_string_equal(err.field, field);
    if (rc == 0) assert_non_null(m);
    else assert_null(m);
    eng_model_free(m);
    json_decref(t);
    json_decref(p);
}

static void test_template_errors(void **state) {
    (void)state;
    const char *mlp = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":\"$units\",\"activation\":\"relu\"}},"
                      "{\"dropout\":{\"rate\":\"$dropout\"}},{\"dense\":{\"units\":10,\"activation\":\"softmax\"}}],"
                      "\"optimizer\":{\"name\":\"$optimizer\",\"learning_rate\":\"$lr\",\"momentum\":\"$momentum\"}}";
    expect_build(mlp, "{\"units\":32,\"dropout\":0.1,\"optimizer\":\"sgd\",\"lr\":0.1,\"momentum\":0.9}", 3, 28, 28, 1, 0, NULL);
    expect_build(mlp, "{\"units\":32,\"dropout\":0.1,\"optimizer\":\"adam\",\"lr\":0.1}", 3, 28, 28, 1, HPO_EINVAL,
                 "model.optimizer.momentum");
    expect_build(mlp, "{\"dropout\":0.1,\"optimizer\":\"adam\",\"lr\":0.1,\"momentum\":0}", 3, 28, 28, 1, HPO_EINVAL,
                 "model.layers[1].dense.units");
    expect_build(mlp, "{\"units\":\"many\",\"dropout\":0.1,\"optimizer\":\"adam\",\"lr\":0.1,\"momentum\":0}", 3, 28, 28, 1,
                 HPO_EINVAL, "model.layers[1].dense.units");
    expect_build(mlp, "{\"units\":16.5,\"dropout\":0.1,\"optimizer\":\"adam\",\"lr\":0.1,\"momentum\":0}", 3, 28, 28, 1,
                 HPO_EINVAL, "model.layers[1].dense.units");
    expect_build(mlp, "{\"units\":16,\"dropout\":1.5,\"optimizer\":\"adam\",\"lr\":0.1,\"momentum\":0}", 3, 28, 28, 1,
                 HPO_EINVAL, "model.layers[2].dropout.rate");
    expect_build(mlp, "{\"units\":16,\"dropout\":0.5,\"optimizer\":\"lion\",\"lr\":0.1,\"momentum\":0}", 3, 28, 28, 1,
                 HPO_EINVAL, "model.optimizer.name");
    /* a key the chosen optimizer or schedule does not read is refused,
     * naming it (a tuned "$momentum" given to adam searched for nothing) */
    /* the build takes it (a study stored before the check still trains);
     * eng_model_check_keys, which a new study passes, refuses it */
    expect_build(mlp, "{\"units\":32,\"dropout\":0.1,\"optimizer\":\"adam\",\"lr\":0.1,\"momentum\":0.9}", 3, 28,
                 28, 1, 0, NULL);
    json_t *tm = J(mlp), *pm = J("{\"optimizer\":\"adam\",\"lr\":0.1,\"momentum\":0.9}");
    hpo_error kerr;
    memset(&kerr, 0, sizeof kerr);
    assert_int_equal(eng_model_check_keys(tm, pm, &kerr), HPO_EINVAL);
    assert_string_equal(kerr.field, "model.optimizer.momentum");
    json_decref(pm);
    pm = J("{\"optimizer\":\"sgd\",\"lr\":0.1,\"momentum\":0.9}");
    assert_int_equal(eng_model_check_keys(tm, pm, &kerr), 0);
    json_decref(pm);
    json_decref(tm);
    const char *opt_keys[][3] = {
        {"{\"name\":\"adam\",\"nesterov\":true}", "model.optimizer.nesterov", "adam takes"},
        {"{\"name\":\"adamw\",\"rho\":0.9}", "model.optimizer.rho", "adamw takes"},
        {"{\"name\":\"sgd\",\"beta_1\":0.8}", "model.optimizer.beta_1", "sgd takes"},
        {"{\"name\":\"sgd\",\"epsilon\":1e-8}", "model.optimizer.epsilon", "sgd takes"},
        {"{\"name\":\"rmsprop\",\"nesterov\":true,\"momentum\":0.9}", "model.optimizer.nesterov", "rmsprop takes"},
        {"{\"name\":\"sgd\",\"clipnorm\":1,\"global_clipnorm\":1}", "model.optimizer.global_clipnorm", "one setting"},
        {"{\"name\":\"adam\"}", NULL, NULL},
        {"{\"name\":\"rmsprop\",\"momentum\":0.9,\"rho\":0.8,\"epsilon\":1e-6,\"clipnorm\":1}", NULL, NULL},
    };
    const char *sched_keys[][3] = {
        {"{\"name\":\"cosine\",\"gamma\":0.5}", "model.schedule.gamma", "cosine takes"},
        {"{\"name\":\"constant\",\"step_epochs\":2}", "model.schedule.step_epochs", "constant takes"},
        {"{\"name\":\"step\",\"alpha\":0.1}", "model.schedule.alpha", "step takes"},
        {"{\"name\":\"exponential\",\"cosine_steps\":100}", "model.schedule.cosine_steps", "exponential takes"},
        {"{\"warmup_steps\":10}", NULL, NULL},
        {"{\"name\":\"step\",\"gamma\":0.5,\"step_epochs\":2,\"warmup_epochs\":1}", NULL, NULL},
    };
    for (int k = 0; k < 2; k++) {
        size_t n = k == 0 ? HPO_ARRAY_LEN(opt_keys) : HPO_ARRAY_LEN(sched_keys);
        for (size_t i = 0; i < n; i++) {
            const char *const *c = k == 0 ? opt_keys[i] : sched_keys[i];
            char tmpl[512];
            snprintf(tmpl, sizeof tmpl, "{\"layers\":[{\"dense\":{\"units\":3}}],\"%s\":%s}",
                     k == 0 ? "optimizer" : "schedule", c[0]);
            json_t *t = J(tmpl);
            int shape[3] = {4, 1, 1};
            eng_model *m = NULL;
            hpo_error err;
            memset(&err, 0, sizeof err);
            assert_int_equal(eng_model_new(t, NULL, 1, shape, 3, 1, &m, &err), 0); /* the build takes any */
            int got = eng_model_check_keys(t, NULL, &err);
            printf("  %-60.60s -> %s %s: %s\n", tmpl, hpo_errname(got), err.field, err.message);
            assert_int_equal(got, c[1] ? HPO_EINVAL : 0);
            if (c[1]) {
                assert_string_equal(err.field, c[1]);
                assert_non_null(strstr(err.message, c[2]));
            }
            eng_model_free(m);
            json_decref(t);
        }
    }
    /* global_clipnorm is clipnorm's other name */
    json_t *a = J("{\"layers\":[{\"dense\":{\"units\":3}}],\"optimizer\":{\"name\":\"sgd\",\"global_clipnorm\":0.5}}");
    int shape[3] = {4, 1, 1};
    eng_model *ma = NULL;
    hpo_error aerr;
    assert_int_equal(eng_model_new(a, NULL, 1, shape, 3, 1, &ma, &aerr), 0);
    assert_true(ma->opt.clipnorm == 0.5f);
    eng_model_free(ma);
    json_decref(a);
    expect_build("{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3}},{\"maxpool2d\":{\"pool\":2}},{\"conv2d\":"
                 "{\"filters\":8,\"kernel\":3}},{\"conv2d\":{\"filters\":8,\"kernel\":\"$k\"}},{\"flatten\":{}},{\"dense\":{\"units\":10}}]}",
                 "{\"k\":12}", 3, 28, 28, 1, HPO_ESHAPE, "model.layers[3].conv2d.kernel");
    expect_build("{\"layers\":[{\"maxpool2d\":{\"pool\":4}},{\"maxpool2d\":{\"pool\":4}},{\"maxpool2d\":{\"pool\":4}},"
                 "{\"flatten\":{}},{\"dense\":{\"units\":10}}]}",
                 NULL, 3, 28, 28, 1, HPO_ESHAPE, "model.layers[2].maxpool2d.pool");
    expect_build("{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"full\"}}]}", NULL, 3, 28, 28, 1,
                 HPO_EINVAL, "model.layers[0].conv2d.padding");
    /* a key nothing reads is refused, never ignored (it was: "strides" trained at stride 1) */
    expect_build("{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3,\"strides\":2}},{\"flatten\":{}},"
                 "{\"dense\":{\"units\":10}}]}", NULL, 3, 28, 28, 1, HPO_EINVAL, "model.layers[0].conv2d.strides");
    expect_build("{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":10}}],\"optimizer\":{\"name\":\"sgd\",\"lr\":0.1}}",
                 NULL, 3, 28, 28, 1, HPO_EINVAL, "model.optimizer.lr");
    expect_build("{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":10}}],\"optimiser\":\"sgd\"}", NULL, 3, 28, 28,
                 1, HPO_EINVAL, "model.optimiser");
    expect_build("{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":1,\"activation\":\"sigmoid\"}}],"
                 "\"loss\":\"binary_crossentropy\"}", NULL, 3, 28, 28, 1, HPO_ESHAPE, "model.loss");
    expect_build("{\"layers\":[{\"dense\":{\"units\":10,\"activation\":\"swish\"}}]}", NULL, 1, 784, 0, 0, HPO_EINVAL,
                 "model.layers[0].dense.activation");
    expect_build("{\"layers\":[{\"dense\":{\"units\":10}},{\"lstm\":{}}]}", NULL, 1, 784, 0, 0, HPO_EINVAL,
                 "model.layers[1]");
    expect_build("{\"layers\":[{\"conv2d\":{\"filters\":4,\"kernel\":3}}]}", NULL, 1, 784, 0, 0, HPO_ESHAPE,
                 "model.layers[0].conv2d");
    expect_build("{\"layers\":[{\"dense\":{\"units\":7}}]}", NULL, 1, 784, 0, 0, HPO_ESHAPE, "model.layers[0]");
    expect_build("{\"layers\":[{\"dense\":{\"units\":10}}],\"loss\":\"hinge\"}", NULL, 1, 784, 0, 0, HPO_EINVAL, "model.loss");
    expect_build("{\"layers\":[{\"residual\":{\"layers\":[]}}]}", NULL, 1, 784, 0, 0, HPO_EINVAL,
                 "model.layers[0].residual.layers");
    expect_build("{\"layers\":[{\"residual\":{\"layers\":[{\"dense\":{\"units\":\"$u\"}}]}},{\"dense\":{\"units\":10}}]}",
                 "{}", 1, 784, 0, 0, HPO_EINVAL, "model.layers[0].residual.layers[0].dense.units");
    expect_build("{\"layers\":[{\"dense\":{\"units\":10,\"precision\":\"fp8\"}}]}", NULL, 1, 784, 0, 0, HPO_EINVAL,
                 "model.layers[0].dense.precision");
    expect_build("{\"layers\":[{\"dense\":{\"units\":10}}],\"schedule\":{\"name\":\"cosine\",\"warmup_epochs\":\"$w\"}}",
                 "{\"w\":-1}", 1, 784, 0, 0, HPO_EINVAL, "model.schedule.warmup_epochs");
    expect_build("[1,2]", NULL, 1, 784, 0, 0, HPO_EINVAL, "model");
    /* residual or not as a hyperparameter: both shapes build (identity / projections) */
    expect_build("{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"same\"}},{\"residual\":{\"layers\":"
                 "[{\"conv2d\":{\"filters\":16,\"kernel\":3,\"padding\":\"same\",\"stride\":2,\"activation\":\"relu\"}},"
                 "{\"batchnorm\":{}}],\"activation\":\"relu\"}},{\"global_avg_pool\":{}},{\"dense\":{\"units\":10}}]}",
                 NULL, 3, 28, 28, 1, 0, NULL);
}

static void test_optimizers_vs_ref(void **state) {
    (void)state;
    const int kinds[] = {ENG_OPT_SGD, ENG_OPT_SGD, ENG_OPT_RMSPROP, ENG_OPT_RMSPROP, ENG_OPT_ADAM, ENG_OPT_ADAMW};
    size_t n = 1000 + 3;
    for (size_t k = 0; k < HPO_ARRAY_LEN(kinds); k++) {
        eng_optim_config c;
        eng_optim_defaults(&c, kinds[k]);
        c.momentum = (k == 1 || k == 3) ? 0.9f : 0.0f;
        c.nesterov = k == 1;
        c.weight_decay = k >= 4 ? 0.01f : 0.001f;
        size_t ns = eng_optim_state_floats(&c) * n;
        float *p1 = malloc(n * 4), *p2 = malloc(n * 4), *g = malloc(n * 4), *g2 = malloc(n * 4);
        float *s1 = calloc(ns + 1, 4), *s2 = calloc(ns + 1, 4);
        hpo_rng r;
        hpo_rng_seed(&r, k);
        for (size_t i = 0; i < n; i++) p1[i] = p2[i] = hpo_rng_uniform_f(&r) - 0.5f;
        double md = 0;
        for (long t = 1; t <= 20; t++) {
            for (size_t i = 0; i < n; i++) g[i] = g2[i] = hpo_rng_uniform_f(&r) - 0.5f;
            eng_optim_step(&c, 0.01f, t, p1, g, s1, n);
            eng_optim_step_ref(&c, 0.01f, t, p2, g2, s2, n);
        }
        for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)p1[i] - p2[i]));
        printf("  optimizer %-8s momentum %.1f nesterov %d: max |fast - ref| after 20 steps %.3g\n", eng_opt_name(c.kind),
               c.momentum, c.nesterov, md);
        assert_true(md < 1e-5);
        free(p1), free(p2), free(g), free(g2), free(s1), free(s2);
    }
    /* adam with the bf16 copy written in the same pass */
    {
        eng_optim_config c;
        eng_optim_defaults(&c, ENG_OPT_ADAM);
        size_t n2 = 1000 + 7;
        float *p1 = malloc(n2 * 4), *p2 = malloc(n2 * 4), *g1 = malloc(n2 * 4), *g2 = malloc(n2 * 4);
        float *s1 = calloc(2 * n2, 4), *s2 = calloc(2 * n2, 4);
        uint16_t *pb = malloc(n2 * 2), *pb2 = malloc(n2 * 2);
        hpo_rng r;
        hpo_rng_seed(&r, 77);
        for (size_t i = 0; i < n2; i++) {
            p1[i] = p2[i] = hpo_rng_uniform_f(&r) - 0.5f;
            g1[i] = g2[i] = hpo_rng_uniform_f(&r) - 0.5f;
        }
        eng_optim_step_range_bf16(&c, 0.01f, 1, p1, g1, s1, n2, 3, n2 - 3, pb - 0);
        eng_optim_step_range(&c, 0.01f, 1, p2, g2, s2, n2, 3, n2 - 3);
        eng_f32_to_bf16_n(p2 + 3, pb2 + 3, n2 - 3);
        assert_memory_equal(p1, p2, n2 * 4);
        assert_memory_equal(pb + 3, pb2 + 3, (n2 - 3) * 2);
        printf("  adam step with its bf16 copy in the same pass: params and bf16 copy bit-identical to step + convert\n");
        /* a second gradient added inside the step == added into g first, for every optimiser */
        const int all_kinds[] = {ENG_OPT_SGD, ENG_OPT_RMSPROP, ENG_OPT_ADAM, ENG_OPT_ADAMW};
        for (size_t k = 0; k < HPO_ARRAY_LEN(all_kinds); k++) {
            eng_optim_config ck;
            eng_optim_defaults(&ck, all_kinds[k]);
            ck.momentum = 0.9f;
            float *g3 = malloc(n2 * 4), *s3 = calloc(2 * n2, 4), *s4 = calloc(2 * n2, 4);
            uint16_t *pb3 = malloc(n2 * 2), *pb4 = malloc(n2 * 2);
            for (size_t i = 0; i < n2; i++) {
                g1[i] = g2[i] = hpo_rng_uniform_f(&r) - 0.5f;
                g3[i] = hpo_rng_uniform_f(&r) - 0.5f;
            }
            memcpy(p2, p1, n2 * 4);
            eng_optim_step_range_sum(&ck, 0.01f, 2, p1, g1, g3, s3, n2, 5, n2 - 5, pb3);
            for (size_t i = 0; i < n2; i++) g2[i] += g3[i];
            eng_optim_step_range_bf16(&ck, 0.01f, 2, p2, g2, s4, n2, 5, n2 - 5, pb4);
            assert_memory_equal(p1, p2, n2 * 4);
            assert_memory_equal(s3, s4, 2 * n2 * 4);
            assert_memory_equal(pb3 + 5, pb4 + 5, (n2 - 5) * 2);
            free(g3), free(s3), free(s4), free(pb3), free(pb4);
        }
        printf("  a replica's gradient added inside the step: bit-identical to adding it first (sgd, rmsprop, "
               "adam, adamw)\n");
        free(p1), free(p2), free(g1), free(g2), free(s1), free(s2), free(pb), free(pb2);
    }
    /* clipping */
    float g[4] = {3, 4, 0, 0};
    int fin = 0;
    double nrm = eng_grad_unscale_norm(g, 4, 1.0f, &fin);
    assert_true(fin && fabs(nrm - 5) < 1e-6);
    eng_grad_clip(g, 4, nrm, 1.0f);
    assert_true(fabsf(g[0] - 0.6f) < 1e-6f && fabsf(g[1] - 0.8f) < 1e-6f);
    g[2] = INFINITY;
    eng_grad_unscale_norm(g, 4, 1.0f, &fin);
    assert_false(fin);
}

static void test_schedules(void **state) {
    (void)state;
    eng_schedule s;
    memset(&s, 0, sizeof s);
    assert_true(fabs(eng_schedule_lr(&s, 0.1, 500, 100, 1000) - 0.1) < 1e-12);
    s.kind = ENG_SCHED_STEP;
    s.step_epochs = 2;
    s.gamma = 0.5;
    assert_true(fabs(eng_schedule_lr(&s, 0.1, 199, 100, 1000) - 0.1) < 1e-12);
    assert_true(fabs(eng_schedule_lr(&s, 0.1, 200, 100, 1000) - 0.05) < 1e-12);
    assert_true(fabs(eng_schedule_lr(&s, 0.1, 450, 100, 1000) - 0.025) < 1e-12);
    s.kind = ENG_SCHED_PIECEWISE;
    s.n_bounds = 2;
    s.bounds[0] = 1;
    s.bounds[1] = 3;
    s.values[0] = 1;
    s.values[1] = 0.5;
    s.values[2] = 0.1;
    assert_true(eng_schedule_lr(&s, 9, 99, 100, 0) == 1 && eng_schedule_lr(&s, 9, 100, 100, 0) == 0.5 &&
                eng_schedule_lr(&s, 9, 300, 100, 0) == 0.1);
    s.kind = ENG_SCHED_EXPONENTIAL;
    s.decay_rate = 0.5;
    s.decay_steps = 100;
    assert_true(fabs(eng_schedule_lr(&s, 1, 200, 100, 0) - 0.25) < 1e-12);
    s.kind = ENG_SCHED_COSINE;
    s.alpha = 0;
    assert_true(fabs(eng_schedule_lr(&s, 1, 0, 100, 1000) - 1) < 1e-12);
    assert_true(fabs(eng_schedule_lr(&s, 1, 500, 100, 1000) - 0.5) < 1e-12);
    assert_true(fabs(eng_schedule_lr(&s, 1, 1000, 100, 1000)) < 1e-12);
    s.warmup_steps = 10;
    assert_true(fabs(eng_schedule_lr(&s, 1, 4, 100, 1000) - 0.5 * (1 + cos(M_PI * 4 / 1000)) * 0.5) < 1e-12);
    printf("  step, piecewise, exponential, cosine and warm-up rates match their formulas\n");
}

/* ---- training on a small synthetic image set ---- */

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
        int cls = (int)hpo_rng_below(&r, 4);
        ds->y_class[i] = cls;
        for (int p = 0; p < 64; p++) {
            int bright = (p / 8 < 4) == (cls & 1) && (p % 8 < 4) == ((cls >> 1) & 1);
            x[i * 64 + p] = (uint8_t)(hpo_rng_below(&r, 120) + (bright ? 120 : 0));
        }
    }
    return ds;
}

static const char *small_cnn =
    "{\"layers\":[{\"augment\":{\"translate\":1,\"flip\":false}},{\"conv2d\":{\"filters\":4,\"kernel\":3,\"padding\":\"same\","
    "\"activation\":\"relu\"}},{\"batchnorm\":{}},{\"maxpool2d\":{\"pool\":2}},{\"flatten\":{}},{\"dropout\":{\"rate\":0.2}},"
    "{\"dense\":{\"units\":16,\"activation\":\"relu\"}},{\"dense\":{\"units\":4,\"activation\":\"softmax\"}}],"
    "\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.003},\"schedule\":{\"name\":\"cosine\",\"warmup_epochs\":1,\"cosine_steps\":200}}";

static eng_model *small_model(const char *tmpl) {
    json_t *t = J(tmpl);
    int shape[3] = {8, 8, 1};
    eng_model *m = NULL;
    hpo_error err;
    int rc = eng_model_new(t, NULL, 3, shape, 4, 42, &m, &err);
    if (rc) printf("%s %s\n", err.field, err.message);
    assert_int_equal(rc, 0);
    json_decref(t);
    return m;
}

/* eng_model_backward_update == eng_model_backward + eng_optim_step */
static void test_fused_update(void **state) {
    (void)state;
    const char *tm[] = {small_cnn, "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":8,\"activation\":\"relu\"}},"
                                   "{\"residual\":{\"layers\":[{\"dense\":{\"units\":6}}]}},{\"dense\":{\"units\":4}}],"
                                   "\"optimizer\":{\"name\":\"sgd\",\"momentum\":0.9,\"learning_rate\":0.1}}"};
    for (int k = 0; k < 2; k++) {
        eng_model *a = small_model(tm[k]), *b = small_model(tm[k]);
        int B = 8;
        int32_t lab[8] = {0, 1, 2, 3, 3, 2, 1, 0};
        hpo_rng r;
        hpo_rng_seed(&r, 3);
        assert_int_equal(eng_model_reserve(a, B, ENG_PREC_FP32), 0);
        assert_int_equal(eng_model_reserve(b, B, ENG_PREC_FP32), 0);
        for (int step = 1; step <= 3; step++) {
            for (size_t i = 0; i < (size_t)B * 64; i++) a->input[i] = b->input[i] = hpo_rng_uniform_f(&r);
            hpo_rng keep = a->rng;
            b->rng = keep;
            const float *oa, *ob;
            assert_int_equal(eng_model_forward(a, B, 1, &oa), 0);
            assert_int_equal(eng_model_forward(b, B, 1, &ob), 0);
            eng_loss_compute(a->loss, a->final_act, oa, lab, NULL, B, 4, 1.0f, a->dlogits, NULL);
            eng_loss_compute(b->loss, b->final_act, ob, lab, NULL, B, 4, 1.0f, b->dlogits, NULL);
            assert_int_equal(eng_model_backward(a, B), 0);
            eng_optim_step(&a->opt, 0.01f, step, a->params, a->grads, a->opt_state, a->nparams);
            eng_model_params_changed(a);
            assert_int_equal(eng_model_backward_update(b, B, 0.01f, step), 0);
        }
        double md = 0;
        for (size_t i = 0; i < a->nparams; i++) md = fmax(md, fabs((double)a->params[i] - b->params[i]));
        printf("  per-layer update in backward vs separate step (%s, 3 steps): max |diff| %.3g\n",
               k ? "residual mlp, sgd" : "small cnn, adam", md);
        assert_true(md < 1e-6);
        eng_model_free(a);
        eng_model_free(b);
    }
}

/* mixed_bf16: a batch given in bf16 (eng_model_forward_bf16, as the trainer
 * gathers it from uint8 images) gives bit-identical logits and updated
 * parameters to the same batch given in f32. Models whose first layer
 * cannot take bf16 say so. */
static void test_bf16_input_batches(void **state) {
    (void)state;
    const char *mlp = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":24,\"activation\":\"relu\"}},"
                      "{\"dropout\":{\"rate\":0.2}},{\"dense\":{\"units\":4}}],"
                      "\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.01}}";
    eng_model *a = small_model(mlp), *b = small_model(mlp);
    if (!a->be->gemm_bf16) {
        printf("  no bf16 GEMM on this backend: skipped\n");
        eng_model_free(a), eng_model_free(b);
        return;
    }
    int B = 16;
    int32_t lab[16];
    uint8_t img[16 * 64];
    uint16_t xb[16 * 64];
    hpo_rng r;
    hpo_rng_seed(&r, 9);
    assert_int_equal(eng_model_reserve(a, B, ENG_PREC_BF16), 0);
    assert_int_equal(eng_model_reserve(b, B, ENG_PREC_BF16), 0);
    assert_true(eng_model_bf16_input(a));
    for (int step = 1; step <= 3; step++) {
        for (int i = 0; i < B * 64; i++) {
            img[i] = (uint8_t)hpo_rng_below(&r, 256);
            a->input[i] = (float)img[i] * (1.0f / 255.0f);
        }
        for (int i = 0; i < B; i++) lab[i] = (int32_t)hpo_rng_below(&r, 4);
        eng_u8_to_bf16_n(img, 1.0f / 255.0f, xb, (size_t)B * 64);
        const float *oa, *ob;
        assert_int_equal(eng_model_forward(a, B, 1, &oa), 0);
        assert_int_equal(eng_model_forward_bf16(b, xb, B, 1, &ob), 0);
        assert_memory_equal(oa, ob, (size_t)B * 4 * sizeof(float));
        eng_loss_compute(a->loss, a->final_act, oa, lab, NULL, B, 4, 1.0f, a->dlogits, NULL);
        eng_loss_compute(b->loss, b->final_act, ob, lab, NULL, B, 4, 1.0f, b->dlogits, NULL);
        assert_int_equal(eng_model_backward_update(a, B, 0.01f, step), 0);
        assert_int_equal(eng_model_backward_update(b, B, 0.01f, step), 0);
        assert_memory_equal(a->params, b->params, a->nparams * sizeof(float));
    }
    printf("  bf16 batches vs f32 batches under mixed_bf16 (mlp, adam, 3 steps): logits and params bit-identical\n");
    eng_model_free(a), eng_model_free(b);
    /* a model starting with a conv (f32 at one channel) cannot */
    eng_model *c = small_model(small_cnn);
    assert_int_equal(eng_model_reserve(c, B, ENG_PREC_BF16), 0);
    assert_false(eng_model_bf16_input(c));
    assert_int_equal(eng_model_forward_bf16(c, xb, B, 1, &(const float *){NULL}), HPO_EINVAL);
    eng_model_free(c);
}

/* A CPU whose oneDNN cannot run bf16 (backend.h: gemm_bf16 NULL; an AVX2
 * CPU, or ONEDNN_MAX_CPU_ISA below AVX-512): mixed_bf16 training is
 * refused naming training.precision, and a model left in mixed_bf16 (as a
 * GPU run leaves it) still runs, in f32, with the fp32 model's logits. */
static void test_no_bf16_backend(void **state) {
    (void)state;
    eng_backend no_bf16 = *eng_backend_cpu();
    no_bf16.gemm_bf16 = NULL;
    eng_model *a = small_model(small_cnn), *b = small_model(small_cnn);
    a->be = b->be = &no_bf16;
    eng_dataset *ds = synth(64, 5);
    eng_split tr;
    assert_int_equal(eng_split_all(ds, &tr), 0);
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.epochs = 1;
    o.batch_size = 16;
    o.precision = ENG_PREC_BF16;
    eng_train_result r;
    hpo_error err = {{0}, {0}};
    assert_int_equal(eng_train(a, &tr, NULL, &o, &r, &err), HPO_EUNSUPPORTED);
    printf("  mixed_bf16 without bf16 kernels: %s (%s)\n", err.message, err.field);
    assert_string_equal(err.field, "training.precision");
    assert_non_null(strstr(err.message, "AVX-512"));
    int B = 16;
    assert_int_equal(eng_model_reserve(a, B, ENG_PREC_BF16), 0);
    assert_int_equal(eng_model_reserve(b, B, ENG_PREC_FP32), 0);
    for (int i = 0; i < B * 64; i++) a->input[i] = b->input[i] = (float)(i % 251) / 251.0f;
    const float *oa, *ob;
    assert_int_equal(eng_model_forward(a, B, 0, &oa), 0);
    assert_int_equal(eng_model_forward(b, B, 0, &ob), 0);
    assert_memory_equal(oa, ob, (size_t)B * 4 * sizeof(float));
    printf("  a model left in mixed_bf16 runs in f32 there: logits bit-identical to fp32\n");
    eng_split_clear(&tr);
    eng_dataset_release(ds);
    eng_model_free(a), eng_model_free(b);
}

static int count_cb(const eng_epoch_report *r, void *user) {
    (*(int *)user)++;
    return r->epoch >= 2 && *(int *)user < 0; /* never: counts only */
}

/* Data, two checkpoint folders and training options shared by the resume
 * tests: 6 epochs of batches of 32 on a synthetic set, on `threads`. */
typedef struct resume_fixture {
    eng_dataset *ds;
    eng_split tr, va;
    char d1[32], d2[32];
    eng_train_opts o;
} resume_fixture;

static void resume_setup(resume_fixture *f, int threads) {
    f->ds = synth(600, 3);
    eng_split_spec spec = {.val_count = 100};
    hpo_error err;
    assert_int_equal(eng_split_make(f->ds, &spec, &f->tr, &f->va, &err), 0);
    snprintf(f->d1, sizeof f->d1, "/tmp/hpo_ckptA_XXXXXX");
    snprintf(f->d2, sizeof f->d2, "/tmp/hpo_ckptB_XXXXXX");
    assert_non_null(mkdtemp(f->d1));
    assert_non_null(mkdtemp(f->d2));
    eng_train_opts_init(&f->o);
    f->o.batch_size = 32;
    f->o.threads = threads;
    f->o.seed = 7;
    f->o.epochs = 6;
    f->o.patience = 100;
}

static void resume_teardown(resume_fixture *f) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", f->d1, f->d2);
    assert_int_equal(system(cmd), 0);
    eng_split_clear(&f->tr);
    eng_split_clear(&f->va);
    eng_dataset_release(f->ds);
}

static void test_checkpoint_resume_bit_identical(void **state) {
    (void)state;
    resume_fixture fx;
    resume_setup(&fx, 1);
    eng_split tr = fx.tr, va = fx.va;
    char *d1 = fx.d1, *d2 = fx.d2;
    eng_train_opts o = fx.o;
    hpo_error err;
    int calls = 0;
    o.on_epoch = count_cb;
    o.user = &calls;
    /* straight 6 epochs */
    eng_model *a = small_model(small_cnn);
    eng_train_result ra;
    o.checkpoint_dir = d1;
    o.restore_best = 0;
    assert_int_equal(eng_train(a, &tr, &va, &o, &ra, &err), 0);
    assert_int_equal(ra.epochs_run, 6);
    assert_int_equal(calls, 6);
    /* 3 epochs, a fresh model object resumes to 6 */
    eng_model *b = small_model(small_cnn);
    eng_train_result rb;
    o.checkpoint_dir = d2;
    o.epochs = 3;
    assert_int_equal(eng_train(b, &tr, &va, &o, &rb, &err), 0);
    eng_model_free(b);
    eng_model *c = small_model(small_cnn);
    o.epochs = 6;
    o.resume = 1;
    assert_int_equal(eng_train(c, &tr, &va, &o, &rb, &err), 0);
    assert_int_equal(rb.start_epoch, 3);
    assert_int_equal(rb.epochs_run, 6);
    int same_p = !memcmp(a->params, c->params, a->nparams * 4), same_s = !memcmp(a->opt_state, c->opt_state, a->nstate * 4),
        same_b = !memcmp(a->stats, c->stats, a->nstats * 4);
    size_t ndiff = 0;
    for (size_t i = 0; i < a->nparams; i++) ndiff += a->params[i] != c->params[i];
    printf("  6 straight epochs vs 3 + resume to 6: params %s (%zu of %zu differ), optimiser state %s, BN stats %s; "
           "val_acc %.3f vs %.3f\n",
           same_p ? "bit-identical" : "DIFFER", ndiff, a->nparams, same_s ? "identical" : "DIFFER",
           same_b ? "identical" : "DIFFER", ra.val.accuracy, rb.val.accuracy);
    assert_true(same_p && same_s && same_b);
    assert_true(ra.val.accuracy > 0.5); /* it learned something */
    /* named weights export reads back with the right names and shapes */
    char wpath[64];
    snprintf(wpath, sizeof wpath, "%s/weights.safetensors", d1);
    assert_int_equal(eng_model_export_weights(a, wpath, NULL, &err), 0);
    eng_st_file *f = NULL;
    assert_int_equal(eng_st_read_file(wpath, &f, &err), 0);
    const eng_st_tensor *k = eng_st_find(f, "layers[1].conv2d.weight");
    assert_non_null(k);
    assert_int_equal(k->rank, 4);
    assert_true(k->shape[0] == 3 && k->shape[1] == 3 && k->shape[2] == 1 && k->shape[3] == 4);
    assert_non_null(eng_st_find(f, "layers[2].batchnorm.running_var"));
    assert_non_null(eng_st_find(f, "layers[7].dense.bias"));
    printf("  weights export: %zu named tensors, e.g. layers[1].conv2d.weight [3,3,1,4]\n", eng_st_count(f));
    eng_st_file_free(f);
    eng_model_free(a);
    eng_model_free(c);
    resume_teardown(&fx);
}

static int stop_at_2(const eng_epoch_report *r, void *user) {
    (void)user;
    return r->epoch >= 2;
}

/* The same with 2 threads (data parallelism, engine/replicas.h): a resumed
 * run is bit-identical to a straight one, since the replicas' dropout
 * generators start every step from the checkpointed one; and it learns as
 * well as 1 thread. */
static void test_checkpoint_resume_data_parallel(void **state) {
    (void)state;
    resume_fixture fx;
    resume_setup(&fx, 2);
    eng_split tr = fx.tr, va = fx.va;
    eng_train_opts o = fx.o;
    hpo_error err;
    o.checkpoint_dir = fx.d1;
    eng_model *a = small_model(small_cnn), *b = small_model(small_cnn), *c = small_model(small_cnn);
    eng_train_result ra, rb, r1;
    assert_int_equal(eng_train(a, &tr, &va, &o, &ra, &err), 0);
    o.checkpoint_dir = fx.d2;
    o.epochs = 3;
    assert_int_equal(eng_train(b, &tr, &va, &o, &rb, &err), 0);
    o.epochs = 6;
    o.resume = 1;
    assert_int_equal(eng_train(c, &tr, &va, &o, &rb, &err), 0);
    assert_int_equal(rb.start_epoch, 3);
    assert_memory_equal(a->params, c->params, a->nparams * 4);
    assert_memory_equal(a->opt_state, c->opt_state, a->nstate * 4);
    assert_memory_equal(a->stats, c->stats, a->nstats * 4);
    eng_model *d = small_model(small_cnn); /* one thread, same seed */
    o.threads = 1;
    o.checkpoint_dir = NULL;
    o.resume = 0;
    assert_int_equal(eng_train(d, &tr, &va, &o, &r1, &err), 0);
    printf("  2 threads: 6 straight epochs vs 3 + resume to 6 bit-identical; val_acc %.3f (1 thread: %.3f)\n",
           ra.val.accuracy, r1.val.accuracy);
    assert_true(ra.val.accuracy > 0.5 && fabs(ra.val.accuracy - r1.val.accuracy) < 0.1);
    eng_model_free(a), eng_model_free(b), eng_model_free(c), eng_model_free(d);
    resume_teardown(&fx);
}

static void test_divergence_stop_and_fp16(void **state) {
    (void)state;
    eng_dataset *ds = synth(400, 5);
    eng_split tr;
    hpo_error err;
    assert_int_equal(eng_split_all(ds, &tr), 0);
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.batch_size = 50;
    o.threads = 1;
    o.epochs = 5;
    /* divergence is data */
    eng_model *m = small_model("{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":32,\"activation\":\"tanh\"}},"
                               "{\"dense\":{\"units\":4}}],\"loss\":\"mse\",\"optimizer\":{\"name\":\"sgd\",\"learning_rate\":100}}");
    eng_train_result r;
    memset(&r, 0, sizeof r);
    int rc = eng_train(m, &tr, NULL, &o, &r, &err);
    printf("  mse, sgd lr 100: %s (%s), epochs completed %d\n", hpo_errname(rc), err.message, r.epochs_run);
    assert_int_equal(rc, HPO_EDIVERGED);
    eng_model_free(m);
    /* the callback stops training */
    m = small_model(small_cnn);
    o.on_epoch = stop_at_2;
    assert_int_equal(eng_train(m, &tr, NULL, &o, &r, &err), 0);
    assert_int_equal(r.epochs_run, 2);
    assert_true(r.stopped_by_callback);
    eng_model_free(m);
    /* mixed_fp16: trains and halves the scale on overflow (a huge initial
     * gradient scale overflows fp16 at once: 2^15 * large logits grads) */
    o.on_epoch = NULL;
    o.precision = ENG_PREC_FP16;
    o.epochs = 4;
    m = small_model(small_cnn);
    assert_int_equal(eng_train(m, &tr, NULL, &o, &r, &err), 0);
    printf("  mixed_fp16: train acc %.3f loss %.3f after 4 epochs\n", r.train.accuracy, r.train.loss);
    assert_true(r.train.accuracy > 0.5);
    eng_model_free(m);
    /* early stopping with a patience of 0 on a metric that cannot improve */
    o.precision = ENG_PREC_FP32;
    o.patience = 0;
    o.monitor = "loss";
    o.min_delta = 1e9;
    o.epochs = 5;
    m = small_model(small_cnn);
    assert_int_equal(eng_train(m, &tr, NULL, &o, &r, &err), 0);
    printf("  early stopping (patience 0, min_delta huge): stopped after %d epochs, best epoch %d\n", r.epochs_run,
           r.best_epoch);
    assert_true(r.stopped_early);
    assert_int_equal(r.epochs_run, 2); /* Keras: the first epoch sets the best, the second does not improve */
    assert_int_equal(r.best_epoch, 1);
    eng_model_free(m);
    eng_split_clear(&tr);
    eng_dataset_release(ds);
}


/* The model's parameters and BN statistics at the epoch early stopping
 * called best (the callback sees the host model current: train_loop.h),
 * and each epoch's validation loss. */
typedef struct best_probe {
    eng_model *m;
    float *params, *stats;
    double val_loss[32];
    int epochs;
} best_probe;

static int probe_best(const eng_epoch_report *r, void *user) {
    best_probe *p = user;
    p->val_loss[r->epoch - 1] = r->val.loss;
    p->epochs = r->epoch;
    if (r->is_best) {
        memcpy(p->params, p->m->params, p->m->nparams * sizeof(float));
        memcpy(p->stats, p->m->stats, p->m->nstats * sizeof(float));
    }
    return 0;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* restore_best_weights with batch normalisation: the model after training,
 * and the best weights of its checkpoint (eng_model_from_checkpoint), are
 * the best epoch's parameters AND running statistics (Keras restores
 * moving_mean/moving_variance too), so evaluating it gives the best epoch's
 * validation loss. */
/* A run of 12 epochs of a small model on synth data (450 training rows,
 * 150 validation), checkpointed in a folder of its own, restore_best on:
 * the setup and the clean-up of the best-epoch tests. */
typedef struct best_fixture {
    eng_dataset *ds;
    eng_split tr, va;
    char dir[32];
    eng_train_opts o;
} best_fixture;

static void best_setup(best_fixture *f) {
    f->ds = synth(600, 3);
    eng_split_spec spec = {.val_count = 150};
    hpo_error err;
    assert_int_equal(eng_split_make(f->ds, &spec, &f->tr, &f->va, &err), 0);
    snprintf(f->dir, sizeof f->dir, "/tmp/hpo_best_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    eng_train_opts_init(&f->o);
    f->o.batch_size = 32;
    f->o.threads = 1;
    f->o.seed = 5;
    f->o.epochs = 12;
    f->o.restore_best = 1;
    f->o.monitor = "val_loss";
    f->o.checkpoint_dir = f->dir;
}

static void best_teardown(best_fixture *f) {
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    eng_split_clear(&f->tr);
    eng_split_clear(&f->va);
    eng_dataset_release(f->ds);
}

static void test_restore_best_batchnorm(void **state) {
    (void)state;
    best_fixture f;
    best_setup(&f);
    hpo_error err;
    const char *tmpl = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":32}},{\"batchnorm\":{\"momentum\":0.9}},"
                       "{\"activation\":\"relu\"},{\"dense\":{\"units\":4}}],"
                       "\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.05}}";
    eng_model *m = small_model(tmpl);
    best_probe p = {.m = m, .params = malloc(m->nparams * sizeof(float)), .stats = malloc(m->nstats * sizeof(float))};
    f.o.on_epoch = probe_best;
    f.o.user = &p;
    eng_train_result r;
    assert_int_equal(eng_train(m, &f.tr, &f.va, &f.o, &r, &err), 0);
    printf("  batchnorm MLP, 12 epochs: best epoch %d (val_loss %.6f), last epoch val_loss %.6f, restored %d\n",
           r.best_epoch, p.val_loss[r.best_epoch - 1], p.val_loss[p.epochs - 1], r.restored_best);
    assert_true(r.restored_best); /* the test needs a best epoch before the last */
    double dp = max_abs_diff(m->params, p.params, m->nparams), ds_ = max_abs_diff(m->stats, p.stats, m->nstats);
    eng_metrics ev;
    assert_int_equal(eng_evaluate(m, &f.va, 32, &ev, &err), 0);
    double dl = fabs(ev.loss - p.val_loss[r.best_epoch - 1]);
    printf("  restored model vs best epoch: params max diff %g, BN running stats max diff %g; eng_evaluate val_loss "
           "%.6f (diff %g)\n", dp, ds_, ev.loss, dl);
    assert_true(dp == 0 && ds_ == 0);
    assert_true(dl <= 1e-6 * fabs(p.val_loss[r.best_epoch - 1]) + 1e-7);
    /* the checkpoint's best weights: the same parameters and statistics */
    char ck[64];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", f.dir);
    eng_model *c = small_model(tmpl);
    assert_int_equal(eng_model_from_checkpoint(c, ck, 1, &err), 0);
    double cp = max_abs_diff(c->params, p.params, c->nparams), cs = max_abs_diff(c->stats, p.stats, c->nstats);
    printf("  eng_model_from_checkpoint(use_best): params max diff %g, BN running stats max diff %g\n", cp, cs);
    assert_true(cp == 0 && cs == 0);
    eng_model_free(c);
    free(p.params);
    free(p.stats);
    eng_model_free(m);
    best_teardown(&f);
}

/* Each epoch's parameters and validation metrics. */
typedef struct epoch_probe {
    eng_model *m;
    float *params[16];
    double val_loss[16];
    int epochs;
} epoch_probe;

static int probe_epochs(const eng_epoch_report *r, void *user) {
    epoch_probe *p = user;
    int e = r->epoch - 1;
    p->val_loss[e] = r->val.loss;
    p->params[e] = malloc(p->m->nparams * sizeof(float));
    memcpy(p->params[e], p->m->params, p->m->nparams * sizeof(float));
    p->epochs = r->epoch;
    return 0;
}

/* Trains m on the fixture keeping val_loss's best epoch by keep_mode (+1
 * the highest), each epoch's weights in *p; returns the kept epoch's index
 * (the first of the extreme val_loss). */
static int train_keeping(best_fixture *f, eng_model *m, int keep_mode, epoch_probe *p, eng_train_result *r) {
    hpo_error err;
    *p = (epoch_probe){.m = m};
    f->o.keep_metric = "val_loss";
    f->o.keep_mode = keep_mode;
    f->o.on_epoch = probe_epochs;
    f->o.user = p;
    assert_int_equal(eng_train(m, &f->tr, &f->va, &f->o, r, &err), 0);
    int kept = 0;
    for (int e = 1; e < p->epochs; e++)
        if (keep_mode > 0 ? p->val_loss[e] > p->val_loss[kept] : p->val_loss[e] < p->val_loss[kept]) kept = e;
    return kept;
}

static void probe_free(epoch_probe *p) {
    for (int e = 0; e < p->epochs; e++) free(p->params[e]);
}

/* keep_metric: early stopping watches one metric, the weights kept
 * (restored at the end, saved as the checkpoint's best) are the best epoch
 * of another, the one a study's objective (its trial's value) names. So
 * that the two epochs differ on every CPU, the kept one is the HIGHEST
 * val_loss (keep_mode +1) while the monitor's is the lowest. */
static void test_keep_metric(void **state) {
    (void)state;
    best_fixture f;
    best_setup(&f);
    hpo_error err;
    const char *tmpl = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":32,\"activation\":\"relu\"}},"
                       "{\"dense\":{\"units\":4}}],\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.05}}";
    eng_model *m = small_model(tmpl);
    epoch_probe p;
    eng_train_result r;
    int kept = train_keeping(&f, m, 1, &p, &r); /* the first of the highest val_loss */
    printf("  monitor val_loss (min): best epoch %d (%.6f); kept (val_loss, max): epoch %d (%.6f)\n", r.best_epoch,
           p.val_loss[r.best_epoch - 1], kept + 1, p.val_loss[kept]);
    assert_true(kept + 1 != r.best_epoch);
    double d = max_abs_diff(m->params, p.params[kept], m->nparams);
    char ck[64];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", f.dir);
    eng_model *c = small_model(tmpl);
    assert_int_equal(eng_model_from_checkpoint(c, ck, 1, &err), 0);
    double dc = max_abs_diff(c->params, p.params[kept], c->nparams);
    printf("  restored weights vs that epoch's: max diff %g; the checkpoint's best: %g\n", d, dc);
    assert_true(d == 0 && dc == 0);
    eng_model_free(c);
    probe_free(&p);
    eng_model_free(m);
    best_teardown(&f);
}

/* keep_metric equal to the monitor, with a min_delta: the kept weights
 * are the strict best epoch's, the one a trial's value comes from, not the
 * last epoch that improved by min_delta (an audit: hpod's trial model came
 * from epoch 7 while its value and best_epoch were epoch 8's). */
static void test_keep_metric_min_delta(void **state) {
    (void)state;
    best_fixture f;
    best_setup(&f);
    const char *tmpl = "{\"layers\":[{\"flatten\":{}},{\"dense\":{\"units\":32,\"activation\":\"relu\"}},"
                       "{\"dense\":{\"units\":4}}],\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.01}}";
    eng_model *m = small_model(tmpl);
    f.o.min_delta = 1e9; /* the monitor improves at epoch 1 only */
    f.o.patience = 100;
    epoch_probe p;
    eng_train_result r;
    int kept = train_keeping(&f, m, -1, &p, &r); /* the strict best: the first of the lowest val_loss */
    printf("  min_delta 1e9: the monitor's best epoch %d, the strict best %d (%.6f)\n", r.best_epoch, kept + 1,
           p.val_loss[kept]);
    assert_true(kept > 0); /* it trained past epoch 1 */
    double d = max_abs_diff(m->params, p.params[kept], m->nparams);
    printf("  restored weights vs the strict best epoch's: max diff %g\n", d);
    assert_true(d == 0);
    probe_free(&p);
    eng_model_free(m);
    best_teardown(&f);
}

/* A checkpoint names its optimiser: another one's state of the same size
 * (adam's m and v read as rmsprop's mean square and momentum, which
 * diverged to NaN in an audit) is refused on load. */
static void test_checkpoint_optimizer_must_match(void **state) {
    (void)state;
    const char *adam = "{\"layers\":[{\"dense\":{\"units\":3}}],\"optimizer\":\"adam\"}";
    const char *rms = "{\"layers\":[{\"dense\":{\"units\":3}}],"
                      "\"optimizer\":{\"name\":\"rmsprop\",\"momentum\":0.9}}";
    json_t *ta = J(adam), *tr = J(rms);
    int shape[3] = {4, 1, 1};
    eng_model *a = NULL, *b = NULL, *c = NULL;
    hpo_error err;
    assert_int_equal(eng_model_new(ta, NULL, 1, shape, 3, 1, &a, &err), 0);
    assert_int_equal(eng_model_new(tr, NULL, 1, shape, 3, 1, &b, &err), 0);
    assert_int_equal(eng_model_new(ta, NULL, 1, shape, 3, 2, &c, &err), 0);
    assert_int_equal(eng_optim_state_floats(&a->opt), eng_optim_state_floats(&b->opt)); /* the same size */
    char dir[] = "/tmp/hpo_ckopt_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    eng_train_state st;
    memset(&st, 0, sizeof st);
    st.loss_scale = 1;
    assert_int_equal(eng_checkpoint_save(a, &st, path, 0, &err), 0);
    eng_train_state got;
    memset(&err, 0, sizeof err);
    assert_int_equal(eng_checkpoint_load(b, path, &got, NULL, NULL, &err), HPO_EFORMAT);
    printf("  adam's checkpoint into rmsprop: %s\n", err.message);
    assert_non_null(strstr(err.message, "optimizer adam"));
    assert_int_equal(eng_checkpoint_load(c, path, &got, NULL, NULL, &err), 0);
    unlink(path);
    rmdir(dir);
    eng_model_free(a);
    eng_model_free(b);
    eng_model_free(c);
    json_decref(ta);
    json_decref(tr);
}

/* Checkpoint metadata as the loop wrote it, or the file is refused
 * (HPO_EFORMAT, naming the field): an epoch of -3 or a best epoch past the
 * epoch once resumed a run at epoch -3 (its epochs could never be
 * stored) or made a 33-epoch run complete as 40. */
static void test_checkpoint_metadata_checked(void **state) {
    (void)state;
    json_t *t = J("{\"layers\":[{\"dense\":{\"units\":3}}],\"optimizer\":\"adam\"}");
    int shape[3] = {4, 1, 1};
    eng_model *a = NULL;
    hpo_error err;
    assert_int_equal(eng_model_new(t, NULL, 1, shape, 3, 1, &a, &err), 0);
    char dir[] = "/tmp/hpo_ckmeta_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    static const struct {
        int epoch, best_epoch, wait;
        long step, good_steps;
        double loss_scale;
        const char *field;
    } cases[] = {{5, 2, 1, 50, 10, 1, NULL},          {-3, 0, 0, 0, 0, 1, "epoch"},
                 {5, 6, 0, 50, 0, 1, "best_epoch"},   {5, 2, 6, 50, 0, 1, "wait"},
                 {5, 2, 1, -1, 0, 1, "step"},         {5, 2, 1, 50, 51, 1, "good_steps"},
                 {5, 2, 1, 50, 0, NAN, "loss_scale"}, {5, 2, 1, 50, 0, 0, "loss_scale"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eng_train_state st, got;
        memset(&st, 0, sizeof st);
        st.epoch = cases[i].epoch;
        st.best_epoch = cases[i].best_epoch;
        st.kept_epoch = cases[i].best_epoch;
        st.wait = cases[i].wait;
        st.step = cases[i].step;
        st.good_steps = cases[i].good_steps;
        st.loss_scale = cases[i].loss_scale;
        assert_int_equal(eng_checkpoint_save(a, &st, path, 0, &err), 0);
        memset(&err, 0, sizeof err);
        int rc = eng_checkpoint_load(a, path, &got, NULL, NULL, &err);
        printf("  %-10s -> %s\n", cases[i].field ? cases[i].field : "(valid)", rc ? err.message : "loaded");
        if (!cases[i].field) {
            assert_int_equal(rc, 0);
            assert_int_equal(got.epoch, 5);
        } else {
            char want[48];
            snprintf(want, sizeof want, "\"%s\" is out of range", cases[i].field);
            assert_int_equal(rc, HPO_EFORMAT);
            assert_non_null(strstr(err.message, want));
        }
    }
    unlink(path);
    rmdir(dir);
    eng_model_free(a);
    json_decref(t);
}

/* A resume from a checkpoint its header refuses (truncated, as a power
 * cut under --sync normal leaves it) trains from the first epoch, as
 * without one (it failed the trial); one past the run's epochs fails it. */
static void test_damaged_checkpoint_starts_over(void **state) {
    (void)state;
    resume_fixture fx;
    resume_setup(&fx, 1);
    eng_train_opts o = fx.o;
    hpo_error err;
    o.checkpoint_dir = fx.d2;
    o.restore_best = 0;
    o.epochs = 3;
    eng_model *b = small_model(small_cnn);
    eng_train_result r;
    assert_int_equal(eng_train(b, &fx.tr, &fx.va, &o, &r, &err), 0);
    eng_model_free(b);
    char ck[96];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", fx.d2);
    struct stat sb;
    assert_int_equal(stat(ck, &sb), 0);
    assert_int_equal(truncate(ck, sb.st_size / 2), 0);
    o.resume = 1;
    o.epochs = 5;
    b = small_model(small_cnn);
    memset(&err, 0, sizeof err);
    assert_int_equal(eng_train(b, &fx.tr, &fx.va, &o, &r, &err), 0);
    printf("  truncated checkpoint: resumed at epoch %d, trained to %d\n", r.start_epoch, r.epochs_run);
    assert_int_equal(r.start_epoch, 0);
    assert_int_equal(r.epochs_run, 5);
    eng_model_free(b);
    /* its checkpoint is at epoch 5 now: a run of 4 cannot resume from it */
    o.epochs = 4;
    b = small_model(small_cnn);
    assert_int_equal(eng_train(b, &fx.tr, &fx.va, &o, &r, &err), HPO_EFORMAT);
    printf("  a run of 4 epochs: %s\n", err.message);
    assert_non_null(strstr(err.message, "past the run's 4 epochs"));
    eng_model_free(b);
    resume_teardown(&fx);
}

/* A run that early stopping ended at an epoch where the callback also
 * stopped it (a pause) resumes without training another epoch: it equals
 * the uninterrupted run. */
static void test_early_stop_resume(void **state) {
    (void)state;
    resume_fixture fx;
    resume_setup(&fx, 1);
    eng_train_opts o = fx.o;
    hpo_error err;
    o.patience = 0; /* acts as 1: the loss cannot improve by min_delta, so it stops after epoch 2 */
    o.monitor = "val_loss";
    o.min_delta = 1e9;
    o.checkpoint_dir = fx.d1;
    eng_model *a = small_model(small_cnn), *b = small_model(small_cnn), *c = small_model(small_cnn);
    eng_train_result ra, rb, rc;
    assert_int_equal(eng_train(a, &fx.tr, &fx.va, &o, &ra, &err), 0);
    o.checkpoint_dir = fx.d2;
    o.on_epoch = stop_at_2; /* paused at the epoch early stopping ends it */
    assert_int_equal(eng_train(b, &fx.tr, &fx.va, &o, &rb, &err), 0);
    o.on_epoch = NULL;
    o.resume = 1;
    assert_int_equal(eng_train(c, &fx.tr, &fx.va, &o, &rc, &err), 0);
    printf("  early stopping: straight run %d epochs (stopped early %d); paused at %d and resumed: %d epochs "
           "(stopped early %d), params %s\n",
           ra.epochs_run, ra.stopped_early, rb.epochs_run, rc.epochs_run, rc.stopped_early,
           memcmp(a->params, c->params, a->nparams * 4) ? "DIFFER" : "bit-identical");
    assert_int_equal(ra.epochs_run, 2);
    assert_true(ra.stopped_early && rb.stopped_early && rb.stopped_by_callback);
    assert_int_equal(rc.start_epoch, 2);
    assert_int_equal(rc.epochs_run, 2);
    assert_true(rc.stopped_early);
    assert_int_equal(rc.best_epoch, ra.best_epoch);
    assert_memory_equal(a->params, c->params, a->nparams * 4);
    assert_memory_equal(a->stats, c->stats, a->nstats * 4);
    eng_model_free(a), eng_model_free(b), eng_model_free(c);
    resume_teardown(&fx);
}

/* eng_model_forward_flops and the trainable parameter count against a
 * count by hand: 2 FLOPs per multiply-add of every dense and conv2d output. */
static void test_forward_flops_and_params(void **state) {
    (void)state;
    struct {
        const char *tmpl;
        int rank, shape[3];
        double flops, params;
    } cases[] = {
        {"{\"layers\":[{\"dense\":{\"units\":64,\"activation\":\"relu\"}},{\"dense\":{\"units\":10}}]}", 1, {784, 0, 0},
         2.0 * (784 * 64 + 64 * 10), (784 * 64 + 64) + (64 * 10 + 10)},
        {"{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"valid\"}},{\"flatten\":{}},"
         "{\"dense\":{\"units\":10}}]}",
         3, {28, 28, 1}, 2.0 * (3 * 3 * 1 * 8) * (26 * 26) + 2.0 * (26 * 26 * 8) * 10,
         (3 * 3 * 1 * 8 + 8) + (26 * 26 * 8 * 10 + 10)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *t = J(cases[i].tmpl);
        eng_model *m = NULL;
        hpo_error err;
        memset(&err, 0, sizeof err);
        assert_int_equal(eng_model_new(t, NULL, cases[i].rank, cases[i].shape, 10, 1, &m, &err), 0);
        printf("  %s: forward flops %.0f (by hand %.0f), params %zu (by hand %.0f)\n", cases[i].tmpl,
               eng_model_forward_flops(m), cases[i].flops, m->nparams, cases[i].params);
        assert_float_equal(eng_model_forward_flops(m), cases[i].flops, 0.5);
        assert_float_equal((double)m->nparams, cases[i].params, 0.5);
        eng_model_free(m);
        json_decref(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_errors),
        cmocka_unit_test(test_optimizers_vs_ref),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_fused_update),
        cmocka_unit_test(test_bf16_input_batches),
        cmocka_unit_test(test_no_bf16_backend),
        cmocka_unit_test(test_checkpoint_resume_bit_identical),
        cmocka_unit_test(test_checkpoint_resume_data_parallel),
        cmocka_unit_test(test_divergence_stop_and_fp16),
        cmocka_unit_test(test_restore_best_batchnorm),
        cmocka_unit_test(test_keep_metric),
        cmocka_unit_test(test_keep_metric_min_delta),
        cmocka_unit_test(test_checkpoint_optimizer_must_match),
        cmocka_unit_test(test_checkpoint_metadata_checked),
        cmocka_unit_test(test_damaged_checkpoint_starts_over),
        cmocka_unit_test(test_early_stop_resume),
        cmocka_unit_test(test_forward_flops_and_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
