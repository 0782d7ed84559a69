/* keyed_sort.c - values sorted with their positions (see keyed_sort.h). */
#include "keyed_sort.h"

#include <math.h>
#include <stdlib.h>

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
