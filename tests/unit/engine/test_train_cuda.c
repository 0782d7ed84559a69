/* test_train_cuda.c - what eng_train on a CUDA device (train_cuda.c) answers
 * on any machine: without a usable device a model of every layer kind it
 * runs (augment, conv2d, maxpool2d, batchnorm, a residual block with a
 * projection, global_avg_pool, dense, dropout), in every precision, gets
 * the device's reason (field "devices"), never a crash; data-parallel
 * replicas that cannot be (a GPU named twice beside another, too many,
 * mixed_fp16) are refused naming the field before any device work. The device runs themselves are
 * tests/gpu/test_cuda_train.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data.h"
#include "gpu.h"
#include "model.h"
#include "train.h"

typedef struct fx {
    eng_dataset *ds;
    eng_split tr, va;
} fx;

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    int64_t shape[3] = {6, 6, 2};
    hpo_error err;
    assert_int_equal(eng_dataset_new("images", 40, 3, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &f->ds), 0);
    f->ds->x_scale = 1.0f / 255.0f;
    f->ds->n_classes = 3;
    for (size_t i = 0; i < 40 * 72; i++) ((uint8_t *)f->ds->x)[i] = (uint8_t)(i * 37);
    for (int i = 0; i < 40; i++) f->ds->y_class[i] = i % 3;
    eng_split_spec spec = {.val_count = 8};
    assert_int_equal(eng_split_make(f->ds, &spec, &f->tr, &f->va, &err), 0);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    eng_split_clear(&f->tr);
    eng_split_clear(&f->va);
    eng_dataset_release(f->ds);
    free(f);
    return 0;
}

/* trains layers (a JSON list's items, then a softmax dense of 3) on the
 * device, on replicas data-parallel replicas (0: one) on GPUs gpus */
static int run_on(fx *f, const char *layers, int precision, int replicas, const int *gpus, hpo_error *err) {
    char t[512];
    snprintf(t, sizeof t, "{\"layers\":[%s{\"dense\":{\"units\":3,\"activation\":\"softmax\"}}]}", layers);
    json_t *j = json_loads(t, 0, NULL);
    assert_non_null(j);
    int shape[3] = {6, 6, 2};
    eng_model *m = NULL;
    assert_int_equal(eng_model_new(j, NULL, 3, shape, 3, 1, &m, err), 0);
    json_decref(j);
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.epochs = 1;
    o.batch_size = 8;
    o.precision = precision;
    o.cuda = 1;
    o.cuda_replicas = replicas;
    for (int k = 0; k < replicas && k < 8; k++) o.cuda_devices[k] = gpus[k];
    eng_train_result r;
    memset(err, 0, sizeof *err);
    int rc = eng_train(m, &f->tr, &f->va, &o, &r, err);
    eng_model_free(m);
    return rc;
}

static int run(fx *f, const char *layers, int precision, hpo_error *err) {
    return run_on(f, layers, precision, 0, NULL, err);
}

static void test_no_device_reason(void **state) {
    for (int prec = ENG_PREC_FP32; prec <= ENG_PREC_FP16; prec++) {
        hpo_error err, gerr;
        int n = 0;
        int rc = run(*state,
                     "{\"augment\":{\"translate\":1,\"flip\":true}},"
                     "{\"conv2d\":{\"filters\":4,\"kernel\":3,\"activation\":\"relu\"}},"
                     "{\"maxpool2d\":{\"pool\":2}},{\"batchnorm\":{}},"
                     "{\"residual\":{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":1}}]}},{\"global_avg_pool\":{}},"
                     "{\"dense\":{\"units\":5,\"activation\":\"relu\"}},"
                     "{\"dropout\":{\"rate\":0.5}},",
                     prec, &err);
        if (eng_gpu_count(&n, &gerr) == 0) { /* a GPU here: it trains (tests/gpu checks the numbers) */
            assert_int_equal(rc, 0);
            continue;
        }
        assert_int_equal(rc, HPO_EUNSUPPORTED);
        assert_string_equal(err.field, "devices");
        printf("%s without a device: %s\n", eng_precision_name(prec), err.message);
    }
}

/* replicas that cannot be are refused before any device is touched, naming
 * the field; possible ones get the device's reason here */
static void test_replicas_refused(void **state) {
    hpo_error err;
    const int same[3] = {0, 0, 0}, mixed[3] = {0, 0, 1}, two[2] = {0, 1}, nine[9] = {0};
    assert_int_equal(run_on(*state, "{\"flatten\":{}},", ENG_PREC_FP32, 3, mixed, &err), HPO_EINVAL);
    assert_string_equal(err.field, "devices");
    printf("replicas on cuda:0, cuda:0, cuda:1: %s\n", err.message);
    assert_int_equal(run_on(*state, "{\"flatten\":{}},", ENG_PREC_FP32, 9, nine, &err), HPO_EINVAL);
    assert_string_equal(err.field, "devices");
    int n = 0;
    hpo_error gerr;
    if (eng_gpu_count(&n, &gerr) == 0) return; /* a GPU here: tests/gpu runs them */
    assert_int_equal(run_on(*state, "{\"flatten\":{}},", ENG_PREC_FP32, 3, same, &err), HPO_EUNSUPPORTED);
    assert_string_equal(err.field, "devices");
    assert_int_equal(run_on(*state, "{\"flatten\":{}},", ENG_PREC_BF16, 2, two, &err), HPO_EUNSUPPORTED);
    assert_string_equal(err.field, "devices");
    assert_int_equal(run_on(*state, "{\"flatten\":{}},", ENG_PREC_FP16, 2, two, &err), HPO_EUNSUPPORTED);
    assert_string_equal(err.field, "devices"); /* mixed_fp16 replicas are possible: only the device is missing */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_device_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replicas_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
