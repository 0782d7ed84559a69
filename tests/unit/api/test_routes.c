/* test_routes.c - every route of the router is in api/openapi.yaml (the
 * embedded copy hpod serves), every operation of the file is routed, and
 * each operation's operationId is its route's name (the label /metrics
 * counts its requests by). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

typedef struct op {
    char method[8];
    char path[512];
    char operation_id[128]; /* "" when the operation has none */
} op;

/* Reads "paths:" of the YAML: a path is a 2-space-indented key starting
 * with '/', a method a 4-space-indented get/post/put/patch/delete key, and
 * its operationId a 6-space-indented "operationId: NAME" line. */
static size_t openapi_ops(op *ops, size_t max) {
    const char *s = (const char *)api_openapi_yaml, *end = s + api_openapi_yaml_len;
    int in_paths = 0;
    char path[512] = "";
    size_t n = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t len = nl ? (size_t)(nl - s) : (size_t)(end - s);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), s);
        s += len + 1;
        if (line[0] && line[0] != ' ' && line[0] != '#') {
            in_paths = strncmp(line, "paths:", 6) == 0;
            continue;
        }
        if (!in_paths) continue;
        if (n > 0 && strncmp(line, "      operationId: ", 19) == 0) {
            snprintf(ops[n - 1].operation_id, sizeof ops[n - 1].operation_id, "%.127s", line + 19);
            continue;
        }
        if (strncmp(line, "  /", 3) == 0) {
            char *colon = strrchr(line, ':');
            assert_non_null(colon);
            *colon = '\0';
            snprintf(path, sizeof path, "%s", line + 2);
            continue;
        }
        static const char *methods[] = {"get", "post", "put", "patch", "delete"};
        for (size_t m = 0; m < 5; m++) {
            size_t ml = strlen(methods[m]);
            if (strncmp(line, "    ", 4) == 0 && line[4] != ' ' && strncmp(line + 4, methods[m], ml) == 0 &&
                line[4 + ml] == ':') {
                assert_true(n < max);
                for (size_t k = 0; k <= ml; k++) ops[n].method[k] = (char)toupper((unsigned char)methods[m][k]);
                snprintf(ops[n].path, sizeof ops[n].path, "%s", path);
                ops[n].operation_id[0] = '\0';
                n++;
            }
        }
    }
    return n;
}

static void test_router_matches_openapi(void **state) {
    op ops[256];
    size_t n = openapi_ops(ops, 256);
    printf("openapi.yaml: %zu operations, router: %zu routes\n", n, api_route_count());
    assert_true(n >= 13);
    for (size_t i = 0; i < api_route_count(); i++) {
        const api_route *r = api_route_at(i);
        int found = 0;
        for (size_t k = 0; k < n; k++)
            found |= strcmp(ops[k].method, r->method) == 0 && strcmp(ops[k].path, r->pattern) == 0;
        if (!found) fprintf(stderr, "route %s %s is missing from openapi.yaml\n", r->method, r->pattern);
        assert_true(found);
    }
    for (size_t k = 0; k < n; k++) {
        int found = 0;
        for (size_t i = 0; i < api_route_count(); i++) {
            const api_route *r = api_route_at(i);
            found |= strcmp(ops[k].method, r->method) == 0 && strcmp(ops[k].path, r->pattern) == 0;
        }
        if (!found) fprintf(stderr, "openapi.yaml has %s %s, which is not routed\n", ops[k].method, ops[k].path);
        assert_true(found);
    }
}

static void test_operation_ids_are_route_names(void **state) {
    op ops[256];
    size_t n = openapi_ops(ops, 256);
    for (size_t i = 0; i < api_route_count(); i++) {
        const api_route *r = api_route_at(i);
        for (size_t k = 0; k < n; k++) {
            if (strcmp(ops[k].method, r->method) != 0 || strcmp(ops[k].path, r->pattern) != 0) continue;
            if (strcmp(ops[k].operation_id, r->name) != 0)
                fprintf(stderr, "%s %s: operationId \"%s\", route name \"%s\"\n", r->method, r->pattern,
                        ops[k].operation_id, r->name);
            assert_string_equal(ops[k].operation_id, r->name);
        }
    }
}

static void test_route_names_unique(void **state) {
    for (size_t i = 0; i < api_route_count(); i++)
        for (size_t k = i + 1; k < api_route_count(); k++)
            assert_string_not_equal(api_route_at(i)->name, api_route_at(k)->name);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_matches_openapi),
        cmocka_unit_test(test_operation_ids_are_route_names),
        cmocka_unit_test(test_route_names_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
