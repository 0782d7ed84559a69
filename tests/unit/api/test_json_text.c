/* test_json_text.c - api_json_dumps writes every real in its shortest
 * round-trip form (json_text.c): the text reads back to the same doubles,
 * is never longer than jansson's, and leaves integers and strings alone.
 * Checked on fixed cases and on 100,000 random doubles against strtod. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "rng.h"

static void expect(json_t *j, const char *want) {
    char *text = api_json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    if (strcmp(text, want) != 0) fprintf(stderr, "got  %s\nwant %s\n", text, want);
    assert_string_equal(text, want);
    free(text);
    json_decref(j);
}

static void test_fixed_cases(void **state) {
    (void)state;
    expect(json_real(0.4), "0.4");
    expect(json_real(0.1 + 0.2), "0.30000000000000004"); /* that one needs 17 digits */
    expect(json_real(1.0), "1.0");
    expect(json_real(-2.5e-5), "-2.5e-05");
    expect(json_real(1e300), "1e+300");
    expect(json_real(123456.7), "123456.7");
    expect(json_integer(40000000000000002), "40000000000000002");
    expect(json_pack("{s:s, s:f, s:[f, i, s]}", "note", "0.40000000000000002 \"q\\\" 0.1", "lr", 0.001, "v", 0.7, 3,
                     "1.10000000000000009"),
           "{\"note\":\"0.40000000000000002 \\\"q\\\\\\\" 0.1\",\"lr\":0.001,\"v\":[0.7,3,"
           "\"1.10000000000000009\"]}");
}

static void test_random_doubles_read_back(void **state) {
    (void)state;
    hpo_rng rng;
    hpo_rng_seed(&rng, 42);
    size_t shorter = 0;
    for (int i = 0; i < 100000; i++) {
        double v = ldexp(hpo_rng_uniform(&rng) - 0.5, (int)(hpo_rng_uniform(&rng) * 200) - 100);
        json_t *j = json_real(v);
        char *mine = api_json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY), *theirs = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        assert_true(strtod(mine, NULL) == v);
        assert_true(strlen(mine) <= strlen(theirs));
        shorter += strlen(mine) < strlen(theirs);
        free(mine);
        free(theirs);
        json_decref(j);
    }
    printf("100000 random doubles read back exactly; %zu written shorter than jansson's %%.17g\n", shorter);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_cases),
        cmocka_unit_test(test_random_doubles_read_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
