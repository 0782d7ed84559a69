/* keyed_sort.c - values sorted with their positions (see keyed_sort.h). */
#include "keyed_sort.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpo.h"

static int cmp_keyed(const void *a, const void *b) {
    const tun_keyed *x = a, *y = b;
    int x_nan = isnan(x->v) != 0, y_nan = isnan(y->v) != 0;
    if (x_nan != y_nan) return x_nan - y_nan;
    if (!x_nan && x->v != y->v) return x->v < y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

void tun_keyed_sort(tun_keyed *key, size_t n) {
    if (n > 1) qsort(key, n, sizeof *key, cmp_keyed);
}

void tun_keyed_sort_rows(double *P, size_t n, int m, int c, int desc) {
    if (n < 2) return;
    size_t row = (size_t)m;
    tun_keyed *key = hpo_xmalloc(n * sizeof *key);
    double *T = hpo_xmalloc(n * row * sizeof *T);
    for (size_t i = 0; i < n; i++) key[i] = (tun_keyed){desc ? -P[i * row + (size_t)c] : P[i * row + (size_t)c], (int64_t)i};
    tun_keyed_sort(key, n);
    for (size_t i = 0; i < n; i++) memcpy(T + i * row, P + (size_t)key[i].i * row, row * sizeof *T);
    memcpy(P, T, n * row * sizeof *P);
    free(T);
    free(key);
}
