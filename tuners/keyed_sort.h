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
 * - tun_keyed_sort: the caller fills the array and reads .i back; nothing
 *   is allocated. tun_keyed_sort_rows reorders the rows of a matrix by one
 *   column with it (the Pareto and EHVI code's sweeps).
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

/* Reorders the n rows of P (m values each) by their value in column c,
 * ascending, or descending when desc; equal values keep their order. */
void tun_keyed_sort_rows(double *P, size_t n, int m, int c, int desc);

#endif
