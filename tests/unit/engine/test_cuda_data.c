/* test_cuda_data.c - the shared device copies of datasets (cuda_data.h)
 * with host fakes for the device's allocation, upload and free:
 * - runs on one GPU share one copy (one upload), the last release frees
 *   it, another GPU or another dataset gets its own;
 * - a failed upload is returned with its reason, leaves nothing allocated
 *   and no entry: the next run uploads again;
 * - runs asking at once (four threads, a slow upload) wait for the one
 *   upload and all get the same copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_data.h"

static atomic_int allocs, frees, uploads, fail_uploads, slow_upload_ms;

static int fake_alloc(void *ctx, size_t bytes, void **out, hpo_error *err) {
    (void)ctx, (void)err;
    *out = malloc(bytes ? bytes : 1);
    atomic_fetch_add(&allocs, 1);
    return 0;
}

static int fake_upload(void *ctx, void *dst, const void *src, size_t bytes, hpo_error *err) {
    (void)ctx;
    if (atomic_load(&slow_upload_ms)) usleep((useconds_t)atomic_load(&slow_upload_ms) * 1000);
    if (atomic_load(&fail_uploads)) return hpo_fail(err, HPO_EIO, "devices", "the fake upload failed");
    memcpy(dst, src, bytes);
    atomic_fetch_add(&uploads, 1);
    return 0;
}

static void fake_free(void *ctx, void *p) {
    (void)ctx;
    if (!p) return;
    free(p);
    atomic_fetch_add(&frees, 1);
}

static const eng_cuda_data_ops ops = {fake_alloc, fake_upload, fake_free, NULL};

static eng_dataset *dataset(size_t n) {
    int64_t shape[1] = {3};
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_new("fake", n, 1, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    for (size_t i = 0; i < n * 3; i++) ((uint8_t *)ds->x)[i] = (uint8_t)i;
    for (size_t i = 0; i < n; i++) ds->y_class[i] = (int32_t)(i % 2);
    return ds;
}

static void reset(void) {
    atomic_store(&allocs, 0), atomic_store(&frees, 0), atomic_store(&uploads, 0);
    atomic_store(&fail_uploads, 0), atomic_store(&slow_upload_ms, 0);
}

static void test_shared_then_freed(void **state) {
    (void)state;
    reset();
    eng_dataset *a = dataset(10), *b = dataset(5);
    eng_cuda_data c1, c2, c3, c4;
    hpo_error err;
    assert_int_equal(eng_cuda_data_get(&ops, 0, a, &c1, &err), 0);
    assert_int_equal(eng_cuda_data_get(&ops, 0, a, &c2, &err), 0);
    assert_ptr_equal(c1.x, c2.x);
    assert_ptr_equal(c1.y, c2.y);
    assert_null(c1.t);
    assert_memory_equal(c1.x, a->x, 30);
    assert_memory_equal(c1.y, a->y_class, 10 * sizeof(int32_t));
    assert_int_equal(atomic_load(&uploads), 2); /* rows and labels, once */
    assert_int_equal(eng_cuda_data_get(&ops, 1, a, &c3, &err), 0); /* another GPU */
    assert_int_equal(eng_cuda_data_get(&ops, 0, b, &c4, &err), 0); /* another dataset */
    assert_ptr_not_equal(c3.x, c1.x);
    assert_ptr_not_equal(c4.x, c1.x);
    assert_int_equal(eng_cuda_data_live(), 3);
    eng_cuda_data_put(&ops, 0, a);
    assert_int_equal(atomic_load(&frees), 0); /* one run still holds it */
    eng_cuda_data_put(&ops, 0, a);
    assert_int_equal(atomic_load(&frees), 2);
    eng_cuda_data_put(&ops, 1, a);
    eng_cuda_data_put(&ops, 0, b);
    assert_int_equal(atomic_load(&frees), atomic_load(&allocs));
    assert_int_equal(eng_cuda_data_live(), 0);
    eng_dataset_release(a);
    eng_dataset_release(b);
}

static void test_failed_upload(void **state) {
    (void)state;
    reset();
    eng_dataset *a = dataset(4);
    eng_cuda_data c;
    hpo_error err = {{0}, {0}};
    atomic_store(&fail_uploads, 1);
    assert_int_equal(eng_cuda_data_get(&ops, 0, a, &c, &err), HPO_EIO);
    assert_string_equal(err.message, "the fake upload failed");
    assert_int_equal(atomic_load(&frees), atomic_load(&allocs)); /* nothing left allocated */
    assert_int_equal(eng_cuda_data_live(), 0);
    atomic_store(&fail_uploads, 0);
    assert_int_equal(eng_cuda_data_get(&ops, 0, a, &c, &err), 0); /* tried again */
    eng_cuda_data_put(&ops, 0, a);
    assert_int_equal(eng_cuda_data_live(), 0);
    eng_dataset_release(a);
}

typedef struct asker {
    const eng_dataset *ds;
    eng_cuda_data c;
    int rc;
} asker;

static void *ask(void *arg) {
    asker *a = arg;
    hpo_error err;
    a->rc = eng_cuda_data_get(&ops, 0, a->ds, &a->c, &err);
    return NULL;
}

static void test_concurrent_askers_wait(void **state) {
    (void)state;
    reset();
    eng_dataset *ds = dataset(64);
    atomic_store(&slow_upload_ms, 50);
    pthread_t th[4];
    asker as[4];
    for (int i = 0; i < 4; i++) {
        as[i] = (asker){.ds = ds};
        assert_int_equal(pthread_create(&th[i], NULL, ask, &as[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(as[i].rc, 0);
        assert_ptr_equal(as[i].c.x, as[0].c.x);
    }
    assert_int_equal(atomic_load(&uploads), 2);
    assert_int_equal(atomic_load(&allocs), 2);
    for (int i = 0; i < 4; i++) eng_cuda_data_put(&ops, 0, ds);
    assert_int_equal(atomic_load(&frees), 2);
    eng_dataset_release(ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_then_freed),
        cmocka_unit_test(test_failed_upload),
        cmocka_unit_test(test_concurrent_askers_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
