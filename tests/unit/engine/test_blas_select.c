/* test_blas_select.c - the OpenBLAS kernel choice.
 *
 * 1. eng_blas_choose_core as a pure function over tables of (CPU
 *    capabilities, OPENBLAS_CORETYPE, kernel loaded now): the machines seen
 *    so far (Intel with AMX, AMD Zen 4 where OpenBLAS detects Cooperlake, AMD
 *    Zen 5 with OPENBLAS_CORETYPE=Haswell set for every process) and others
 *    (AVX2-only, AVX-512 without BF16, no AVX2, unknown names).
 * 2. One real re-exec that holds on every x86-64 CPU: main() names a weak
 *    kernel (Prescott) in the environment after OpenBLAS has loaded, as a
 *    caller could; after eng_blas_select the kernel in use must be one that
 *    eng_blas_choose_core accepts for this CPU, and sgemm with it must match
 *    a naive double-precision reference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cblas.h>
#include <cmocka.h>

#include "blas_select.h"
#include "hpo.h"
#include "rng.h"

static const eng_cpu_caps NO_AVX2 = {0, 0, 0};
static const eng_cpu_caps AVX2 = {.avx2_fma = 1};
static const eng_cpu_caps AVX512 = {.avx512 = 1, .avx2_fma = 1};                    /* Skylake-SP */
static const eng_cpu_caps AVX512_BF16 = {.avx512 = 1, .avx512_bf16 = 1, .avx2_fma = 1}; /* Zen 4/5, SPR */

typedef struct choice_case {
    const char *what;
    eng_cpu_caps cpu;
    const char *env, *loaded;
    const char *want; /* NULL: leave the environment alone */
} choice_case;

static void test_choose_core_table(void **state) {
    (void)state;
    static const choice_case cases[] = {
        {"Zen 4, nothing set, OpenBLAS detects Cooperlake", AVX512_BF16, NULL, "Cooperlake", NULL},
        {"Zen 4, Haswell set after Cooperlake loaded", AVX512_BF16, "Haswell", "Cooperlake", "Cooperlake"},
        {"Zen 4, Prescott set after Cooperlake loaded", AVX512_BF16, "Prescott", "Cooperlake", "Cooperlake"},
        {"Zen 5, Haswell in the environment", AVX512_BF16, "Haswell", "Haswell", "SkylakeX"},
        {"Zen 5, SkylakeX in the environment", AVX512_BF16, "SkylakeX", "SkylakeX", NULL},
        {"Zen 5, cooperlake (any case) in the environment", AVX512_BF16, "cooperlake", "Cooperlake", NULL},
        {"Sapphire Rapids misdetected as Prescott", AVX512_BF16, NULL, "Prescott", "SkylakeX"},
        {"Sapphire Rapids detected", AVX512_BF16, NULL, "SapphireRapids", NULL},
        {"empty OPENBLAS_CORETYPE is unset", AVX512_BF16, "", "Cooperlake", NULL},
        {"an unknown name ranks 0", AVX512_BF16, "Bogus", "Haswell", "SkylakeX"},
        {"Skylake-SP detected", AVX512, NULL, "SkylakeX", NULL},
        {"Skylake-SP with Cooperlake named: no BF16 here", AVX512, "Cooperlake", "Cooperlake", "SkylakeX"},
        {"Skylake-SP with Zen named", AVX512, "Zen", "Zen", "SkylakeX"},
        {"AVX2 CPU detected as Haswell", AVX2, NULL, "Haswell", NULL},
        {"AVX2 CPU, Zen detected", AVX2, NULL, "Zen", NULL},
        {"AVX2 CPU misdetected", AVX2, NULL, "Nehalem", "Haswell"},
        {"AVX2 CPU, Sandybridge named", AVX2, "Sandybridge", "Sandybridge", "Haswell"},
        {"AVX2 CPU, SkylakeX named: cannot run here", AVX2, "SkylakeX", "Haswell", "Haswell"},
        {"no AVX2: OpenBLAS's choice stands", NO_AVX2, NULL, "Prescott", NULL},
        {"no AVX2, something named", NO_AVX2, "Core2", "Core2", NULL},
    };
    for (size_t i = 0; i < HPO_ARRAY_LEN(cases); i++) {
        const choice_case *c = &cases[i];
        const char *got = eng_blas_choose_core(c->cpu, c->env, c->loaded);
        printf("%-50s -> %s\n", c->what, got ? got : "(leave)");
        if (!c->want)
            assert_null(got);
        else
            assert_string_equal(got ? got : "(leave)", c->want);
    }
}

static void test_preferred_core(void **state) {
    (void)state;
    assert_string_equal(eng_blas_preferred_core(AVX512_BF16), "SkylakeX");
    assert_string_equal(eng_blas_preferred_core(AVX512), "SkylakeX");
    assert_string_equal(eng_blas_preferred_core(AVX2), "Haswell");
    assert_null(eng_blas_preferred_core(NO_AVX2));
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

/* After the re-exec main() asked for: the kernel in use is one the choice
 * accepts for this CPU, and the environment names it. */
static void test_reexec_chose_a_fitting_kernel(void **state) {
    (void)state;
    eng_cpu_caps cpu = eng_cpu_caps_detect();
    const char *pref = eng_blas_preferred_core(cpu);
    const char *env = getenv("OPENBLAS_CORETYPE");
    printf("CPU: avx512 %d, avx512_bf16 %d, avx2+fma %d; OpenBLAS core %s (preferred %s, "
           "OPENBLAS_CORETYPE=%s, OMP_WAIT_POLICY=%s, OPENBLAS_NUM_THREADS=%s)\n",
           cpu.avx512, cpu.avx512_bf16, cpu.avx2_fma, eng_blas_corename(), pref ? pref : "none",
           env ? env : "", getenv("OMP_WAIT_POLICY") ?: "", getenv("OPENBLAS_NUM_THREADS") ?: "");
    assert_string_equal(getenv("HPO_BLAS_REEXEC") ?: "", "1");
    assert_non_null(getenv("OMP_WAIT_POLICY"));
    assert_non_null(getenv("OPENBLAS_NUM_THREADS"));
    assert_non_null(env);
    if (pref) {
        /* main() named Prescott: it must have been replaced by a kernel that
         * uses this CPU's widest vectors, and that kernel is what loaded */
        assert_null(eng_blas_choose_core(cpu, env, eng_blas_corename()));
        assert_int_equal(eng_blas_core_level(eng_blas_corename()), cpu.avx512 ? 2 : 1);
        assert_int_equal(strcasecmp(env, eng_blas_corename()), 0);
    } else {
        assert_string_equal(env, "Prescott"); /* no AVX2: left as named */
    }
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
    printf("sgemm %c%c %dx%dx%d on %s: max abs diff vs double %.3g (max |C| %.3g)\n", ta ? 'T' : 'N',
           tb ? 'T' : 'N', M, N, K, eng_blas_corename(), maxd, maxref);
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
    int reexec = strcmp(getenv("HPO_BLAS_SELECT") ?: "", "0") != 0;
    if (!reexec)
        printf("HPO_BLAS_SELECT=0 set by the caller: the re-exec check is skipped\n");
    /* Before the re-exec: name a weak kernel after OpenBLAS has loaded
     * (whatever the environment said), without HPO_BLAS_SELECT=force. */
    if (reexec && !getenv("HPO_BLAS_REEXEC")) {
        setenv("OPENBLAS_CORETYPE", "Prescott", 1);
        unsetenv("HPO_BLAS_SELECT");
    }
    if (reexec) eng_blas_select(argc, argv);
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_choose_core_table),
        cmocka_unit_test(test_preferred_core),
        cmocka_unit_test(test_core_levels),
        cmocka_unit_test(test_sgemm_matches_reference),
        cmocka_unit_test(test_reexec_chose_a_fitting_kernel),
    };
    size_t n = HPO_ARRAY_LEN(all) - (reexec ? 0 : 1); /* the re-exec check is last */
    return _cmocka_run_group_tests("blas_select", all, n, NULL, NULL);
}
