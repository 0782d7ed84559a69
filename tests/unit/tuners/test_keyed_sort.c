/* test_keyed_sort.c - the tuners' arg-sort (tuners/keyed_sort.c) against a
 * naive reference: an insertion sort over the stated order (value
 * ascending, ties by position, NaN last), on random arrays with many ties,
 * infinities and NaN, whatever order the positions come in; the row sort
 * against a stable insertion sort of the rows by one column, both ways. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "keyed_sort.h"
#include "rng.h"

/* Whether a comes strictly before b, the order written out case by case. */
static int naive_before(const tun_keyed *a, const tun_keyed *b) {
    if (isnan(a->v) && !isnan(b->v)) return 0;
    if (!isnan(a->v) && isnan(b->v)) return 1;
    if (!isnan(a->v) && a->v < b->v) return 1;
    if (!isnan(a->v) && a->v > b->v) return 0;
    return a->i < b->i;
}

static void naive_sort(tun_keyed *key, size_t n) {
    for (size_t a = 1; a < n; a++)
        for (size_t b = a; b > 0 && naive_before(&key[b], &key[b - 1]); b--) {
            tun_keyed t = key[b];
            key[b] = key[b - 1];
            key[b - 1] = t;
        }
}

static void test_against_naive(void **state) {
    (void)state;
    static const double pool[] = {-INFINITY, -2.5, -0.0, 0.0, 1.0, 1.0, 3.25, INFINITY, NAN};
    hpo_rng rng;
    hpo_rng_seed(&rng, 11);
    int mismatches = 0;
    for (int rep = 0; rep < 300; rep++) {
        size_t n = (size_t)hpo_rng_below(&rng, 40);
        tun_keyed got[40], want[40];
        for (size_t a = 0; a < n; a++) {
            /* half from a small pool (ties, signed zeros, infinities, NaN) */
            double v = hpo_rng_uniform(&rng) < 0.5 ? pool[hpo_rng_below(&rng, 9)] : hpo_rng_uniform(&rng) - 0.5;
            got[a] = want[a] = (tun_keyed){v, (int64_t)hpo_rng_below(&rng, 1000) - 500};
        }
        tun_keyed_sort(got, n);
        naive_sort(want, n);
        for (size_t a = 0; a < n; a++)
            if (got[a].i != want[a].i || !(got[a].v == want[a].v || (isnan(got[a].v) && isnan(want[a].v))))
                mismatches++;
    }
    printf("300 random arrays of up to 39 keys: %d positions differ from the naive sort\n", mismatches);
    assert_int_equal(mismatches, 0);
}

static void test_cases(void **state) {
    (void)state;
    tun_keyed k[] = {{NAN, 0}, {2.0, 5}, {-1.0, 9}, {2.0, 1}, {-INFINITY, 7}, {NAN, -3}};
    tun_keyed_sort(k, 6);
    const int64_t want[] = {7, 9, 1, 5, -3, 0};
    for (int a = 0; a < 6; a++) assert_int_equal(k[a].i, want[a]);
    tun_keyed_sort(k, 0); /* nothing to do, nothing touched */
    tun_keyed_sort(NULL, 0);
    assert_int_equal(k[0].i, 7);
}

/* Stable insertion sort of the n rows of P (m wide) by column c. */
static void naive_sort_rows(double *P, size_t n, int m, int c, int desc) {
    for (size_t a = 1; a < n; a++)
        for (size_t b = a; b > 0; b--) {
            double x = P[b * m + c], y = P[(b - 1) * m + c];
            if (!(desc ? x > y : x < y)) break;
            for (int k = 0; k < m; k++) {
                double t = P[b * m + k];
                P[b * m + k] = P[(b - 1) * m + k];
                P[(b - 1) * m + k] = t;
            }
        }
}

static void test_rows_against_naive(void **state) {
    (void)state;
    hpo_rng rng;
    hpo_rng_seed(&rng, 5);
    int mismatches = 0;
    for (int rep = 0; rep < 200; rep++) {
        size_t n = (size_t)hpo_rng_below(&rng, 30);
        int m = 1 + (int)hpo_rng_below(&rng, 4), c = (int)hpo_rng_below(&rng, (uint64_t)m), desc = rep % 2;
        double got[30 * 4], want[30 * 4];
        for (size_t a = 0; a < n * (size_t)m; a++) /* few distinct values: many ties */
            got[a] = want[a] = (double)hpo_rng_below(&rng, 5) + (a % (size_t)m == (size_t)c ? 0.0 : hpo_rng_uniform(&rng));
        tun_keyed_sort_rows(got, n, m, c, desc);
        naive_sort_rows(want, n, m, c, desc);
        mismatches += memcmp(got, want, n * (size_t)m * sizeof *got) != 0;
    }
    printf("200 random matrices of up to 29 rows: %d row orders differ from the naive sort\n", mismatches);
    assert_int_equal(mismatches, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_naive),
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_rows_against_naive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
