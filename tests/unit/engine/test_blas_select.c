/* test_blas_select.c - eng_blas_select re-executes the test with the right
 * OpenBLAS kernel (SkylakeX on AVX-512 CPUs; exit 77 elsewhere), also when
 * the environment names a weaker one (OPENBLAS_CORETYPE=Haswell, as on some
 * AMD machines of this project's kind), and sgemm with that kernel matches a
 * naive double-precision reference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <cmocka.h>

#include "blas_select.h"
#include "hpo.h"
#include "rng.h"

static void test_corename(void **state) {
    (void)state;
    const char *pref = eng_blas_preferred_core();
    printf("OpenBLAS core %s (preferred %s, OPENBLAS_CORETYPE=%s, OMP_WAIT_POLICY=%s, "
           "OPENBLAS_NUM_THREADS=%s)\n",
           eng_blas_corename(), pref ? pref : "none", getenv("OPENBLAS_CORETYPE") ?: "",
           getenv("OMP_WAIT_POLICY") ?: "", getenv("OPENBLAS_NUM_THREADS") ?: "");
    assert_non_null(pref);
    assert_string_equal(pref, "SkylakeX");
    assert_false(eng_blas_is_generic());
    assert_string_equal(eng_blas_corename(), "SkylakeX");
    assert_false(eng_blas_core_underuses_cpu());
    /* main() started us with OPENBLAS_CORETYPE=Haswell: we were re-executed */
    assert_string_equal(getenv("HPO_BLAS_REEXEC") ?: "", "1");
    assert_string_equal(getenv("OPENBLAS_CORETYPE") ?: "", "SkylakeX");
    assert_non_null(getenv("OMP_WAIT_POLICY"));
    assert_non_null(getenv("OPENBLAS_NUM_THREADS"));
}

static void test_core_levels(void **state) {
    (void)state;
    assert_int_equal(eng_blas_core_level("SkylakeX"), 2);
    assert_int_equal(eng_blas_core_level("cooperlake"), 2);
    assert_int_equal(eng_blas_core_level("SapphireRapids"), 2);
    assert_int_equal(eng_blas_core_level("Haswell"), 1);
    assert_int_equal(eng_blas_core_level("ZEN"), 1);
    assert_int_equal(eng_blas_core_level("Prescott"), 0);
    assert_int_equal(eng_blas_core_level("Sandybridge"), 0);
    assert_int_equal(eng_blas_core_level(NULL), 0);
}

static void check_sgemm(int ta, int tb, int M, int N, int K) {
    hpo_rng r;
    hpo_rng_seed(&r, (uint64_t)(M * 131 + N * 7 + K));
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
    float *C = malloc(sizeof(float) * (size_t)M * N);
    for (int i = 0; i < M * K; i++) A[i] = (float)hpo_rng_normal(&r);
    for (int i = 0; i < K * N; i++) B[i] = (float)hpo_rng_normal(&r);
    int lda = ta ? M : K, ldb = tb ? K : N;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
    double maxd = 0, maxref = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            double d = fabs(s - C[i * N + j]);
            if (d > maxd) maxd = d;
            if (fabs(s) > maxref) maxref = fabs(s);
        }
    printf("sgemm %c%c %dx%dx%d: max abs diff vs double %.3g (max |C| %.3g)\n", ta ? 'T' : 'N',
           tb ? 'T' : 'N', M, N, K, maxd, maxref);
    /* f32 accumulation over K terms of unit variance: error ~ K * eps * |a||b| */
    assert_true(maxd < 1e-6 * K * 8);
    free(A), free(B), free(C);
}

static void test_sgemm_matches_reference(void **state) {
    (void)state;
    check_sgemm(0, 0, 128, 256, 785);
    check_sgemm(1, 0, 77, 130, 128);
    check_sgemm(0, 1, 128, 10, 256);
    check_sgemm(1, 1, 33, 65, 97);
}

int main(int argc, char **argv) {
    if (!eng_blas_preferred_core() || strcmp(eng_blas_preferred_core(), "SkylakeX") != 0) {
        printf("no AVX-512 on this CPU: skipping\n");
        return 77;
    }
    if (strcmp(getenv("HPO_BLAS_SELECT") ?: "", "0") == 0) {
        printf("HPO_BLAS_SELECT=0 set by the caller: skipping the kernel check\n");
        return 77;
    }
    /* Before the re-exec: an environment that names a weaker kernel must be
     * overridden without HPO_BLAS_SELECT=force. */
    if (!getenv("HPO_BLAS_REEXEC")) {
        setenv("OPENBLAS_CORETYPE", "Haswell", 1);
        unsetenv("HPO_BLAS_SELECT");
    }
    eng_blas_select(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corename),
        cmocka_unit_test(test_core_levels),
        cmocka_unit_test(test_sgemm_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
