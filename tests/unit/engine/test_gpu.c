/* test_gpu.c - the CUDA device query (gpu.h) answers on every machine: on
 * one without a GPU (or its driver, or a build without CUDA) with
 * HPO_EUNSUPPORTED naming "devices" and saying "no CUDA device: <why>"; on
 * one with a GPU with its properties. --version's line names the backend
 * either way. eng_cuda_open (cuda_ops.h) gives the same answers.
 * cuBLASLt is not in the process until eng_cuda_blas_load loads it, and
 * then it is (CUDA builds; the toolkit is installed wherever they build). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cuda_ops.h"
#include "gpu.h"

static void test_device_query(void **state) {
    (void)state;
    char line[160];
    eng_gpu_describe(line, sizeof line);
    printf("backend: %s\n", line);
    assert_true(strstr(line, eng_gpu_built() ? "CUDA runtime" : "not built") != NULL);
    int n = -1;
    hpo_error err = {{0}, {0}};
    int rc = eng_gpu_count(&n, &err);
    if (rc) {
        printf("no GPU here: %s\n", err.message);
        assert_int_equal(rc, HPO_EUNSUPPORTED);
        assert_int_equal(n, 0);
        assert_string_equal(err.field, "devices");
        assert_true(strncmp(err.message, "no CUDA device: ", 16) == 0);
        eng_gpu_info g;
        assert_int_equal(eng_gpu_info_get(0, &g, &err), HPO_EUNSUPPORTED);
        /* the device op library refuses the same way, and makes no context */
        eng_cuda *cu = NULL;
        hpo_error e2 = {{0}, {0}};
        assert_int_equal(eng_cuda_open(0, 0, &cu, &e2), HPO_EUNSUPPORTED);
        assert_null(cu);
        assert_string_equal(e2.field, "devices");
        assert_string_equal(e2.message, err.message);
        return;
    }
    assert_true(n >= 1);
    for (int i = 0; i < n; i++) {
        eng_gpu_info g;
        assert_int_equal(eng_gpu_info_get(i, &g, &err), 0);
        printf("cuda:%d: %s, sm_%d%d, %.1f GiB, %d SMs\n", i, g.name, g.cc_major, g.cc_minor,
               (double)g.total_bytes / (1 << 30), g.multiprocessors);
        assert_int_equal(g.index, i);
        assert_true(g.name[0] && g.total_bytes > 0 && g.multiprocessors > 0 && g.cc_major >= 1);
    }
    eng_gpu_info g;
    assert_int_equal(eng_gpu_info_get(n, &g, &err), HPO_EINVAL); /* one past the last */
    eng_cuda *cu = NULL;
    assert_int_equal(eng_cuda_open(n, 0, &cu, &err), HPO_EINVAL);
    assert_null(cu);
}

/* Whether a shared object whose path contains name is mapped in this process. */
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

static void test_blas_loaded_at_first_use(void **state) {
    (void)state;
    assert_false(mapped("libcublasLt")); /* not linked: nothing of it ran at start */
    hpo_error err = {{0}, {0}};
    int rc = eng_cuda_blas_load(&err);
    if (!eng_gpu_built()) {
        assert_int_equal(rc, HPO_EUNSUPPORTED);
        assert_string_equal(err.field, "devices");
        return;
    }
    if (rc) printf("eng_cuda_blas_load: %s\n", err.message);
    assert_int_equal(rc, 0);
    assert_true(mapped("libcublasLt"));
    assert_int_equal(eng_cuda_blas_load(&err), 0); /* once per process */
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_blas_loaded_at_first_use),
                                       cmocka_unit_test(test_device_query)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
