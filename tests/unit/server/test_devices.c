/* test_devices.c - --devices parsing: slots and their BLAS threads, and
 * clear errors for what is not a slot layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workers.h"

static void test_layouts(void **state) {
    static const struct {
        const char *spec;
        int n, threads;
    } ok[] = {{"cpu:2", 2, 1}, {"cpu:1x2", 1, 2}, {"cpu:4x1", 4, 1}, {"cpu:1", 1, 1}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        srv_slot *slots = NULL;
        int n = 0;
        hpo_error err;
        assert_int_equal(srv_devices_parse(ok[i].spec, &slots, &n, &err), 0);
        assert_int_equal(n, ok[i].n);
        for (int k = 0; k < n; k++) {
            char name[32];
            snprintf(name, sizeof name, "cpu:%d", k);
            assert_string_equal(slots[k].name, name);
            assert_int_equal(slots[k].threads, ok[i].threads);
        }
        free(slots);
    }
    srv_slot *slots = NULL;
    int n = 0;
    hpo_error err;
    assert_int_equal(srv_devices_parse("cpu:2,cpu:1x3", &slots, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(slots[2].name, "cpu:2");
    assert_int_equal(slots[2].threads, 3);
    free(slots);
}

static void test_cuda_layouts(void **state) {
    srv_slot *slots = NULL;
    int n = 0;
    hpo_error err;
    assert_int_equal(srv_devices_parse("cuda:0x2,cpu:1,cuda:1+2,cuda:all", &slots, &n, &err), 0);
    assert_int_equal(n, 5);
    static const char *names[] = {"cuda:0/0", "cuda:0/1", "cpu:2", "cuda:1+2/0", "cuda:all/0"};
    for (int k = 0; k < n; k++) assert_string_equal(slots[k].name, names[k]);
    assert_true(slots[0].kind == SRV_SLOT_CUDA && slots[0].n_gpus == 1 && slots[0].gpus[0] == 0);
    assert_true(slots[2].kind == SRV_SLOT_CPU && slots[2].threads == 1);
    assert_true(slots[3].n_gpus == 2 && slots[3].gpus[0] == 1 && slots[3].gpus[1] == 2);
    assert_true(slots[4].gpus[0] == -1); /* resolved against the machine at start */
    free(slots);
    /* the longest name there can be fits its 32 bytes */
    assert_int_equal(srv_devices_parse("cuda:10+11+12+13+14+15+16+17x64", &slots, &n, &err), 0);
    assert_int_equal(n, 64);
    assert_string_equal(slots[63].name, "cuda:10+11+12+13+14+15+16+17/63");
    assert_int_equal(slots[63].n_gpus, 8);
    free(slots);
    /* a CPU-only layout needs no GPU: resolving it changes nothing */
    assert_int_equal(srv_devices_parse("cpu:2", &slots, &n, &err), 0);
    assert_int_equal(srv_devices_resolve(&slots, &n, &err), 0);
    assert_int_equal(n, 2);
    free(slots);
}

static void test_errors(void **state) {
    static const char *bad[] = {"", "gpu:1", "cpu:", "cpu:0", "cpu:2x", "cpu:2x0", "cpu:x2", "cpu:2y2", "cpu:999",
                                "cpu:1,", "cuda:", "cuda:x2", "cuda:0+0", "cuda:0x0", "cuda:-1", "cuda:0y", "cuda:0+",
                                "cuda:all+1", "cuda:0x2x",
                                /* a slot named twice: the names tell slots apart */
                                "cuda:0,cuda:0", "cuda:0x2,cpu:1,cuda:0", "cuda:1+2,cuda:1+2x2", "cuda:all,cuda:all"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_slot *slots = (srv_slot *)0x1;
        int n = -7;
        hpo_error err = {{0}, {0}};
        int rc = srv_devices_parse(bad[i], &slots, &n, &err);
        printf("%-10s -> %s\n", bad[i], err.message);
        /* "cpu:1," has an empty last group: strtok skips it, which is fine */
        if (strcmp(bad[i], "cpu:1,") == 0) {
            assert_int_equal(rc, 0);
            free(slots);
            continue;
        }
        assert_int_equal(rc, HPO_EINVAL);
        assert_string_equal(err.field, "devices");
        if (strchr(bad[i], ',')) assert_non_null(strstr(err.message, "twice"));
        assert_true(slots == (srv_slot *)0x1 && n == -7); /* untouched on error */
    }
}

/* how many slots share each GPU's memory */
static void test_gpu_slots(void **state) {
    srv_slot *slots = NULL;
    int n = 0;
    hpo_error err;
    assert_int_equal(srv_devices_parse("cuda:0x3,cpu:2,cuda:1+0x2,cuda:2", &slots, &n, &err), 0);
    assert_int_equal(srv_devices_gpu_slots(slots, n, 0), 5); /* three of its own, two spanning 1 and 0 */
    assert_int_equal(srv_devices_gpu_slots(slots, n, 1), 2);
    assert_int_equal(srv_devices_gpu_slots(slots, n, 2), 1);
    assert_int_equal(srv_devices_gpu_slots(slots, n, 3), 0);
    free(slots);
    assert_int_equal(srv_devices_parse("cpu:4", &slots, &n, &err), 0);
    assert_int_equal(srv_devices_gpu_slots(slots, n, 0), 0); /* CPU slots share no GPU */
    free(slots);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_layouts), cmocka_unit_test(test_cuda_layouts),
                                       cmocka_unit_test(test_errors), cmocka_unit_test(test_gpu_slots)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
