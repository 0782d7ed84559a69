/* test_workers.c - the worker pool's slots as the scheduler sees them
 * (workers.h): the first idle slot from an index, and a GPU lost for the
 * process (engine/gpu.h, eng_gpu_lost) retiring that GPU's slots, not the
 * others. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>

#include "api.h"
#include "gpu.h"
#include "storage.h"
#include "workers.h"

static void on_done(void *arg) { (void)arg; }

static void test_idle_slots_and_lost_gpus(void **state) {
    (void)state;
    sto_db *db;
    api_ctx *ctx;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(api_ctx_new(db, NULL, &ctx), 0);
    srv_slot *slots = NULL;
    int n = 0;
    hpo_error err;
    assert_int_equal(srv_devices_parse("cpu:1,cuda:5,cuda:6x2", &slots, &n, &err), 0);
    assert_int_equal(n, 4); /* cpu:0, cuda:5/0, cuda:6/0, cuda:6/1 */
    srv_workers *w;
    assert_int_equal(srv_workers_new(ctx, slots, n, on_done, NULL, &w), 0);
    for (int i = 0; i < n; i++) assert_int_equal(srv_workers_idle(w, i), i);
    assert_int_equal(srv_workers_idle(w, n), -1);
    assert_int_equal(srv_workers_idle(w, -3), 0);

    eng_gpu_mark_lost(6); /* a device fault on GPU 6: both its slots retire */
    assert_true(eng_gpu_lost(6) && !eng_gpu_lost(5));
    assert_int_equal(srv_workers_idle(w, 0), 0);
    assert_int_equal(srv_workers_idle(w, 1), 1);
    assert_int_equal(srv_workers_idle(w, 2), -1);
    eng_gpu_mark_lost(5);
    assert_int_equal(srv_workers_idle(w, 1), -1);
    assert_int_equal(srv_workers_idle(w, 0), 0); /* the CPU slot goes on */
    assert_false(eng_gpu_lost(-1) || eng_gpu_lost(64) || eng_gpu_lost(7));

    srv_workers_free(w);
    free(slots);
    api_ctx_free(ctx);
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_idle_slots_and_lost_gpus)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
