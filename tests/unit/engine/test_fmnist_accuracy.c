/* test_fmnist_accuracy.c - the slow test: Fashion-MNIST test accuracy of the
 * example models (engine/models), MLP >= 88.5% after 10 epochs and CNN >=
 * 90.5% after 5 epochs in fp32, and mixed_bf16 within 0.5 points of fp32.
 * Batch 128, seed 0, one thread (HPO_TEST_THREADS to change). Skips (77)
 * under AddressSanitizer and ThreadSanitizer (it would take most of an
 * hour, and single-threaded training gives TSan nothing to find) and when
 * the dataset is not installed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "blas_select.h"
#include "data.h"
#include "model.h"
#include "train.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

static eng_dataset *train_ds, *test_ds;

static double run(const char *model, int epochs, int precision) {
    char path[1024];
    const char *src = __FILE__; /* .../tests/unit/engine/test_fmnist_accuracy.c */
    const char *cut = strstr(src, "tests/unit/engine/");
    snprintf(path, sizeof path, "%.*sengine/models/%s.json", cut ? (int)(cut - src) : 0, src, model);
    json_error_t je;
    json_t *t = json_load_file(path, 0, &je);
    if (!t) fprintf(stderr, "%s: %s\n", path, je.text);
    assert_non_null(t);
    int shape[3] = {28, 28, 1};
    eng_model *m = NULL;
    hpo_error err;
    assert_int_equal(eng_model_new(t, NULL, 3, shape, 10, 0, &m, &err), 0);
    eng_split tr, te;
    assert_int_equal(eng_split_all(train_ds, &tr), 0);
    assert_int_equal(eng_split_all(test_ds, &te), 0);
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.epochs = epochs;
    o.batch_size = 128;
    o.threads = getenv("HPO_TEST_THREADS") ? atoi(getenv("HPO_TEST_THREADS")) : 1;
    o.precision = precision;
    eng_train_result r;
    double t0 = hpo_monotonic();
    int rc = eng_train(m, &tr, NULL, &o, &r, &err);
    if (rc) fprintf(stderr, "train: %s\n", err.message);
    assert_int_equal(rc, 0);
    eng_metrics tm;
    assert_int_equal(eng_evaluate(m, &te, 1000, &tm, &err), 0);
    printf("  %s %-10s %2d epochs: test accuracy %.4f (train loss %.4f, %.0f samples/s, %.1f s)\n", model,
           eng_precision_name(precision), epochs, tm.accuracy, r.train.loss, r.samples_per_s, hpo_monotonic() - t0);
    fflush(stdout);
    eng_split_clear(&tr);
    eng_split_clear(&te);
    eng_model_free(m);
    json_decref(t);
    return tm.accuracy;
}

/* mixed_bf16 needs oneDNN's bf16 kernels (backend.h); without them only
 * fp32 is checked */
static int bf16_here(const char *model, double f, double need) {
    if (eng_backend_cpu()->gemm_bf16) return 1;
    printf("  %s: fp32 %.4f (need >= %.3f); mixed_bf16 skipped: no bf16 kernels on this CPU\n", model, f, need);
    return 0;
}

static void test_mlp(void **state) {
    (void)state;
    double f = run("mlp", 10, ENG_PREC_FP32);
    assert_true(f >= 0.885);
    if (!bf16_here("mlp", f, 0.885)) return;
    double b = run("mlp", 10, ENG_PREC_BF16);
    printf("  mlp: fp32 %.4f (need >= 0.885), mixed_bf16 %.4f (|diff| %.4f, need <= 0.005)\n", f, b, fabs(f - b));
    assert_true(fabs(f - b) <= 0.005);
}

static void test_cnn(void **state) {
    (void)state;
    double f = run("cnn", 5, ENG_PREC_FP32);
    assert_true(f >= 0.905);
    if (!bf16_here("cnn", f, 0.905)) return;
    double b = run("cnn", 5, ENG_PREC_BF16);
    printf("  cnn: fp32 %.4f (need >= 0.905), mixed_bf16 %.4f (|diff| %.4f, need <= 0.005)\n", f, b, fabs(f - b));
    assert_true(fabs(f - b) <= 0.005);
}

int main(int argc, char **argv) {
#ifdef UNDER_SANITIZER
    printf("test_fmnist_accuracy: skipped under a sanitizer (10+5 epochs of Fashion-MNIST would take most of an "
           "hour); run the plain build\n");
    return 77;
#endif
    eng_blas_select(argc, argv); /* the OpenBLAS kernel hpod would run */
    hpo_error err;
    if (eng_dataset_cache_get("fashion-mnist", "train", &train_ds, &err) ||
        eng_dataset_cache_get("fashion-mnist", "test", &test_ds, &err)) {
        printf("test_fmnist_accuracy: skipped, Fashion-MNIST not available: %s\n", err.message);
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mlp), cmocka_unit_test(test_cnn)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    eng_dataset_release(train_ds);
    eng_dataset_release(test_ds);
    eng_dataset_cache_clear();
    return rc;
}
