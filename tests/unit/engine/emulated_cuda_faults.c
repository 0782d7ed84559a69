/* emulated_cuda_faults.c - the CUDA training path (train_cuda.c) meeting what a
 * device can throw at it, on the emulated device's cues (cuda_emulated.h):
 * - a kernel fault on one of two GPUs of a data-parallel run, which shows
 *   at that GPU's next wait: the run fails with the fault's reason, and the
 *   all-reduce group is aborted before any other wait (on a device the
 *   healthy GPU waits in its all-reduce for the faulted one forever; the
 *   emulation aborts the process there), at the epoch's start and at its
 *   end;
 * - non-finite gradients under clipnorm in fp32 (the loss may stay finite
 *   while gradients overflow): the device skips those steps and counts
 *   them, and the run fails with HPO_EDIVERGED naming the gradients and the
 *   epoch, as the CPU does at the step; alone and on two GPUs.
 * Emulation only: a device has no faults on cue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cuda_emulated.h"
#include "data.h"
#include "model.h"
#include "train.h"

#define NI 16
#define NK 3

typedef struct fx {
    eng_dataset *ds;
    eng_split tr, va;
} fx;

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    int64_t shape[1] = {NI};
    size_t n = 320;
    assert_int_equal(eng_dataset_new("synthetic", n, 1, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &f->ds), 0);
    f->ds->x_scale = 1.0f / 255.0f;
    f->ds->n_classes = NK;
    uint8_t *x = f->ds->x;
    hpo_rng r;
    hpo_rng_seed(&r, 3);
    for (size_t i = 0; i < n; i++) {
        f->ds->y_class[i] = (int32_t)hpo_rng_below(&r, NK);
        for (int p = 0; p < NI; p++) x[i * NI + p] = (uint8_t)hpo_rng_below(&r, 256);
    }
    hpo_error err = {{0}, {0}};
    eng_split_spec spec = {.val_count = 64};
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

static eng_model *mlp(double clipnorm) {
    char t[400];
    snprintf(t, sizeof t,
             "{\"layers\":[{\"dense\":{\"units\":24,\"activation\":\"relu\"}},"
             "{\"dense\":{\"units\":%d,\"activation\":\"softmax\"}}],\"loss\":\"sparse_categorical_crossentropy\","
             "\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.003,\"clipnorm\":%g}}",
             NK, clipnorm);
    json_t *j = json_loads(t, 0, NULL);
    assert_non_null(j);
    int shape[3] = {NI, 0, 0};
    eng_model *m = NULL;
    hpo_error err = {{0}, {0}};
    assert_int_equal(eng_model_new(j, NULL, 1, shape, NK, 7, &m, &err), 0);
    json_decref(j);
    return m;
}

/* eng_train on the emulated GPUs (two replicas on GPUs 0 and 1 when
 * across), 3 epochs of 4 batches: its return code, its error in err */
static int train(fx *f, double clipnorm, int across, hpo_error *err) {
    eng_model *m = mlp(clipnorm);
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.epochs = 3;
    o.batch_size = 64;
    o.threads = 1;
    o.seed = 5;
    o.prefetch = 0;
    o.cuda = 1;
    o.cuda_device = 0;
    if (across) {
        o.cuda_replicas = 2;
        o.cuda_devices[0] = 0;
        o.cuda_devices[1] = 1;
    }
    eng_train_result res;
    memset(err, 0, sizeof *err);
    int rc = eng_train(m, &f->tr, &f->va, &o, &res, err);
    printf("  %s%s: rc %d %s (%s)\n", across ? "cuda:0 + cuda:1" : "cuda:0", clipnorm > 0 ? ", clipnorm" : "", rc,
           err->message, err->field);
    eng_model_free(m);
    return rc;
}

/* a fault on GPU 1 at each of its first waits in the group (the epochs'
 * uploads, their ends' downloads after steps with all-reduces, the
 * validation): the fault is the error, and nothing hangs */
static void test_fault_on_one_gpu(void **state) {
    fx *f = *state;
    hpo_error err;
    assert_int_equal(train(f, 0, 1, &err), 0); /* the run is sound without the cue */
    for (int wait = 1; wait <= 8; wait++) {
        emu_cuda_fault_in_group(1, wait);
        assert_int_not_equal(train(f, 0, 1, &err), 0);
        assert_non_null(strstr(err.message, "cuda:1: an illegal memory access"));
    }
    assert_int_equal(train(f, 0, 1, &err), 0); /* each cue acted once */
}

/* NaN gradients from the 6th step on (epoch 2 of 4 steps each) */
static void test_nonfinite_gradients(void **state) {
    fx *f = *state;
    hpo_error err;
    for (int across = 0; across <= 1; across++) {
        emu_cuda_nan_gradients_from(0, 6);
        int rc = train(f, 1.0, across, &err);
        emu_cuda_nan_gradients_from(0, 0);
        assert_int_equal(rc, HPO_EDIVERGED);
        assert_string_equal(err.field, "training");
        assert_non_null(strstr(err.message, "gradients became NaN/Inf at epoch 2 (3 steps skipped)"));
    }
    /* without clipnorm nothing looks at the gradients (as on the CPU): the
     * cue's NaN never reaches a norm, and the run ends */
    emu_cuda_nan_gradients_from(0, 6);
    assert_int_equal(train(f, 0, 0, &err), 0);
    emu_cuda_nan_gradients_from(0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fault_on_one_gpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite_gradients, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
