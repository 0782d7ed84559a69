/* test_train_cuda_mem.c - the device memory budget of a run on a CUDA device
 * (train.h: eng_train_cuda_mem_estimate, eng_train_cuda_check_budget), on
 * any machine: the estimate against a count by hand of every buffer
 * train_cuda.c allocates (fp32, mixed_bf16 and mixed_fp16, a validation set
 * of its own),
 * a shape-only model estimated as the allocated one, a run over its budget
 * refused with HPO_ETOOLARGE naming the sizes and the field before any
 * device is opened (so even here, without one), a run at its budget let
 * through to the device (here: the device's own reason), and the slot share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_ops.h"
#include "data.h"
#include "gpu.h"
#include "model.h"
#include "train.h"

#define N 100
#define NVAL 20
#define NI 64
#define NK 4
#define B 16

static const char *tmpl = "{\"layers\":[{\"dense\":{\"units\":32,\"activation\":\"relu\"}},{\"dropout\":{\"rate\":0.25}},"
                          "{\"dense\":{\"units\":4,\"activation\":\"softmax\"}}],\"optimizer\":\"adam\"}";

static eng_dataset *vectors(size_t n) {
    int64_t shape[1] = {NI};
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_new("vectors", n, 1, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    ds->x_scale = 1.0f / 255.0f;
    ds->n_classes = NK;
    for (size_t i = 0; i < n * NI; i++) ((uint8_t *)ds->x)[i] = (uint8_t)(i * 31);
    for (size_t i = 0; i < n; i++) ds->y_class[i] = (int32_t)(i % NK);
    return ds;
}

static eng_model *model(int shape_only) {
    json_t *j = json_loads(tmpl, 0, NULL);
    assert_non_null(j);
    int shape[1] = {NI};
    eng_model *m = NULL;
    hpo_error err;
    if (shape_only) assert_int_equal(eng_model_new_shape(j, NULL, 1, shape, NK, &m, &err), 0);
    else assert_int_equal(eng_model_new(j, NULL, 1, shape, NK, 1, &m, &err), 0);
    json_decref(j);
    return m;
}

static void opts(eng_train_opts *o, int precision) {
    eng_train_opts_init(o);
    o->epochs = 1;
    o->batch_size = B;
    o->precision = precision;
    o->cuda = 1;
}

/* cudaMalloc's least rounding */
static size_t r512(size_t b) { return (b ? b + 511 : 512) / 512 * 512; }

/* train_cuda.c's buffers counted by hand for the model above on N rows (NVAL of them validation) */
static void by_hand(int prec, int own_val_ds, eng_cuda_mem *e) {
    size_t np = NI * 32 + 32 + 32 * NK + NK, f = sizeof(float);
    int h16 = prec != ENG_PREC_FP32, bf16 = prec == ENG_PREC_BF16, fp16 = prec == ENG_PREC_FP16;
    memset(e, 0, sizeof *e);
    e->context = ENG_CUDA_CONTEXT_BYTES;
    e->weights = 2 * r512(np * f) + r512(2 * np * f) + (h16 ? r512(np * 2 + 2) : 0) /* p, g, Adam's m and v, 16-bit */
                 + (fp16 ? r512(np * f) + r512(16) : 0);                          /* fp16-rounded p, the loss scale */
    size_t act[] = {
        r512(B * 32 * f), r512(B * NI * f),          /* dense 1: y (relu: z is y), dx */
        h16 ? r512(B * NI * 2) + r512(B * 32 * 2) : 0, /* its 16-bit input and gradient */
        r512(B * 32 * f), r512(B * 32 * f),          /* dropout: y, mask */
        r512(B * NK * f), r512(B * 32 * f),          /* dense 2: y, dx */
        h16 ? r512(B * 32 * 2) + r512(B * NK * 2) : 0,
        r512((N - NVAL) * 4), r512(NVAL * 4),        /* the epoch's order, the validation rows */
        r512(B * NI * f), bf16 ? r512(B * NI * 2) : 0, /* the batch (and its bf16 form: the first layer is bf16) */
        r512(B * 4), r512(B * NK * f), r512(B * NK * f), /* labels, targets, loss gradient */
        r512(4 * 8), r512(4 * 8), r512(2 * 8),       /* metric sums (training, validation), gradient norm */
        /* steps_per_execution 1: the epoch's 5 step records of 3 words of
         * scalars and 1 dropout key, one staged record and batch of rows, the cursor */
        r512(((N - NVAL + B - 1) / B) * 4 * 8), r512(4 * 8), r512(B * 4), r512(4),
    };
    for (size_t i = 0; i < sizeof act / sizeof act[0]; i++) e->activations += act[i];
    e->data = r512(N * NI) + r512(N * 4) + (own_val_ds ? r512(NVAL * NI) + r512(NVAL * 4) : 0);
    e->total = e->context + e->weights + e->activations + e->data;
}

static void assert_mem_equal(const eng_cuda_mem *a, const eng_cuda_mem *b) {
    printf("  estimate: context %zu, weights %zu, activations %zu, data %zu, total %zu (by hand %zu)\n", a->context,
           a->weights, a->activations, a->data, a->total, b->total);
    assert_int_equal(a->context, b->context);
    assert_int_equal(a->weights, b->weights);
    assert_int_equal(a->activations, b->activations);
    assert_int_equal(a->data, b->data);
    assert_int_equal(a->total, b->total);
}

static void test_estimate_by_hand(void **state) {
    (void)state;
    eng_dataset *ds = vectors(N);
    eng_split tr, va;
    hpo_error err;
    eng_split_spec spec = {.val_count = NVAL};
    assert_int_equal(eng_split_make(ds, &spec, &tr, &va, &err), 0);
    eng_model *m = model(0), *shape = model(1);
    for (int prec = ENG_PREC_FP32; prec <= ENG_PREC_FP16; prec++) {
        eng_train_opts o;
        opts(&o, prec);
        eng_cuda_mem got, want, from_shape;
        eng_train_cuda_mem_estimate(m, &tr, &va, &o, &got);
        printf("%s\n", eng_precision_name(prec));
        by_hand(prec, 0, &want);
        assert_mem_equal(&got, &want);
        eng_train_cuda_mem_estimate(shape, &tr, &va, &o, &from_shape); /* before the parameters exist */
        assert_mem_equal(&from_shape, &want);
    }
    eng_model_free(m);
    eng_model_free(shape);
    eng_split_clear(&tr);
    eng_split_clear(&va);
    eng_dataset_release(ds);
}

/* a validation set from another dataset goes up too */
static void test_estimate_own_validation_dataset(void **state) {
    (void)state;
    eng_dataset *ds = vectors(N - NVAL), *vs = vectors(NVAL);
    eng_split tr, va;
    assert_int_equal(eng_split_all(ds, &tr), 0);
    assert_int_equal(eng_split_all(vs, &va), 0);
    eng_model *m = model(0);
    eng_train_opts o;
    opts(&o, ENG_PREC_FP32);
    eng_cuda_mem got, want;
    eng_train_cuda_mem_estimate(m, &tr, &va, &o, &got);
    by_hand(ENG_PREC_FP32, 1, &want);
    want.data = r512((N - NVAL) * NI) + r512((N - NVAL) * 4) + r512(NVAL * NI) + r512(NVAL * 4);
    want.total = want.context + want.weights + want.activations + want.data;
    assert_mem_equal(&got, &want);
    eng_model_free(m);
    eng_split_clear(&tr);
    eng_split_clear(&va);
    eng_dataset_release(ds);
    eng_dataset_release(vs);
}

/* over the budget: refused before the device is opened, naming sizes and
 * the field; at the budget: through to the device (here, its reason) */
static void test_budget(void **state) {
    (void)state;
    eng_dataset *ds = vectors(N);
    eng_split tr, va;
    hpo_error err;
    eng_split_spec spec = {.val_count = NVAL};
    assert_int_equal(eng_split_make(ds, &spec, &tr, &va, &err), 0);
    eng_model *m = model(0);
    eng_train_opts o;
    opts(&o, ENG_PREC_FP32);
    eng_cuda_mem e;
    eng_train_cuda_mem_estimate(m, &tr, &va, &o, &e);
    o.cuda_max_bytes = e.total;
    assert_int_equal(eng_train_cuda_check_budget(m, &tr, &va, &o, NULL, &err), 0);
    o.cuda_max_bytes = e.total - 1;
    assert_int_equal(eng_train_cuda_check_budget(m, &tr, &va, &o, NULL, &err), HPO_ETOOLARGE);
    printf("  %s: %s\n", err.field, err.message);
    assert_non_null(strstr(err.message, "of device memory, the budget of cuda:0 is"));
    assert_non_null(strstr(err.message, "batch buffers of 16"));
    assert_string_equal(err.field, "model.layers[0].dense.units");

    eng_train_result r;
    memset(&err, 0, sizeof err);
    assert_int_equal(eng_train(m, &tr, &va, &o, &r, &err), HPO_ETOOLARGE); /* no device needed to refuse */
    assert_non_null(strstr(err.message, "of device memory"));
    int n;
    hpo_error gerr;
    if (eng_gpu_count(&n, &gerr) != 0) { /* at the budget, this machine's lack of a device answers */
        o.cuda_max_bytes = e.total;
        memset(&err, 0, sizeof err);
        assert_int_not_equal(eng_train(m, &tr, &va, &o, &r, &err), HPO_ETOOLARGE);
        assert_string_equal(err.field, "devices");
    }
    eng_model_free(m);
    eng_split_clear(&tr);
    eng_split_clear(&va);
    eng_dataset_release(ds);
}

/* when the datasets are the largest part, the field says so */
static void test_budget_names_the_dataset(void **state) {
    (void)state;
    eng_dataset *ds = vectors(20000); /* 1.3 MB of rows against ~100 KB of model */
    eng_split tr;
    hpo_error err;
    assert_int_equal(eng_split_all(ds, &tr), 0);
    eng_model *m = model(0);
    eng_train_opts o;
    opts(&o, ENG_PREC_FP32);
    o.cuda_max_bytes = 1 << 20;
    assert_int_equal(eng_train_cuda_check_budget(m, &tr, NULL, &o, NULL, &err), HPO_ETOOLARGE);
    printf("  %s: %s\n", err.field, err.message);
    assert_string_equal(err.field, "dataset");
    eng_model_free(m);
    eng_split_clear(&tr);
    eng_dataset_release(ds);
}

static void test_slot_share(void **state) {
    (void)state;
    size_t gib = (size_t)1 << 30;
    assert_int_equal(eng_cuda_slot_share(80 * gib, 4), 18 * gib);
    assert_int_equal(eng_cuda_slot_share(80 * gib, 1), 72 * gib);
    assert_int_equal(eng_cuda_slot_share(80 * gib, 0), 72 * gib); /* no count: one slot */
    eng_train_opts o;
    opts(&o, ENG_PREC_FP32);
    o.cuda_max_bytes = 12345;
    assert_int_equal(eng_train_cuda_budget(&o), 12345); /* an explicit budget wins */
    int n;
    hpo_error gerr;
    o.cuda_max_bytes = 0;
    if (eng_gpu_count(&n, &gerr) != 0) assert_int_equal(eng_train_cuda_budget(&o), 0); /* no device: no check */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_by_hand),
        cmocka_unit_test(test_estimate_own_validation_dataset),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_budget_names_the_dataset),
        cmocka_unit_test(test_slot_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
