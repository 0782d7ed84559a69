/*
 * keyed_sort.h - an arg-sort the tuners share: values sorted together with
 * the positions they came from (the trials nearest a point, a generation
 * by fitness, the rows of a front by one objective, a budget's
 * observations by value).
 *
 * Design notes
 * - Ascending by value, ties by position, NaN after every number: a total
 *   order, so the result does not depend on how qsort orders equal keys
 *   and the samplers stay deterministic on every libc.
 * - The caller fills the array and reads .i back; nothing is allocated.
 */
#ifndef HPO_TUNERS_KEYED_SORT_H
#define HPO_TUNERS_KEYED_SORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct tun_keyed {
    double v;  /* the key */
    int64_t i; /* where it came from */
} tun_keyed;

void tun_keyed_sort(tun_keyed *key, size_t n);

#endif
