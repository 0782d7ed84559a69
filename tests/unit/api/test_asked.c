/* test_asked.c - the trials asked through a node (asked.c): an ask's entry
 * is taken back once by its tell, an unknown or already taken id is not
 * found, and a newer ask whose id lands in the same slot evicts the older
 * one (a cache: the evicted tell reads the trial instead). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_internal.h"

static void test_put_take_evict(void **state) {
    (void)state;
    api_ctx ctx = {0};
    api_asked_new(&ctx);
    int64_t sid = 0, number = 0;
    assert_false(api_asked_take(&ctx, 7, &sid, &number)); /* never asked */
    api_asked_put(&ctx, 7, 3, 41);
    api_asked_put(&ctx, 8, 3, 42);
    assert_true(api_asked_take(&ctx, 7, &sid, &number));
    assert_int_equal(sid, 3);
    assert_int_equal(number, 41);
    assert_false(api_asked_take(&ctx, 7, &sid, &number)); /* once */
    assert_true(api_asked_take(&ctx, 8, &sid, &number));
    assert_int_equal(number, 42);
    /* an id sharing 9's slot: found by trying ids, as a busy node's asks would */
    int evicted = 0;
    for (int64_t other = 10; other < 1000000 && !evicted; other++) {
        api_asked_put(&ctx, 9, 5, 1);
        api_asked_put(&ctx, other, 5, 2);
        if (!api_asked_take(&ctx, 9, &sid, &number)) { /* 9 gone: other took its slot */
            assert_true(api_asked_take(&ctx, other, &sid, &number));
            assert_int_equal(number, 2);
            evicted = 1;
        } else {
            assert_int_equal(number, 1);
            assert_true(api_asked_take(&ctx, other, &sid, &number));
        }
    }
    assert_true(evicted);
    assert_false(api_asked_take(&ctx, 0, &sid, &number));
    api_asked_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_put_take_evict)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
