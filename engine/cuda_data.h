/*
 * cuda_data.h - one device copy of a dataset per GPU, shared by the runs
 * training on that GPU at the same time (its worker slots): the first run
 * that asks uploads the rows and the labels or targets, the others borrow
 * them, and the last one to give the copy back frees it.
 *
 * Design notes
 * - Keyed by (device, dataset). Datasets are immutable and reference
 *   counted (data.h), and a run holds its dataset for as long as it holds
 *   the device copy, so the dataset's address names it while the copy
 *   lives; the copy goes at the last release, so an address reused by
 *   another dataset later finds no entry.
 * - The upload runs outside the table's lock; a run asking for a copy
 *   that is being uploaded waits for it (a condition variable) and gets its
 *   failure, if it fails (the entry then goes, and the next run tries
 *   again).
 * - The device work goes through an op table: train_cuda.c passes
 *   cuda_ops.h's allocation, upload and free on its context (cudaFree
 *   takes any pointer of the process); the unit test passes host fakes.
 * Thread-safe: one process-wide table.
 */
#ifndef ENG_CUDA_DATA_H
#define ENG_CUDA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "hpo.h"

typedef struct eng_cuda_data {
    void *x;    /* the rows, as the dataset holds them (uint8 or f32) */
    int32_t *y; /* class labels, or NULL */
    float *t;   /* regression targets, or NULL */
} eng_cuda_data;

typedef struct eng_cuda_data_ops {
    int (*alloc)(void *ctx, size_t bytes, void **out, hpo_error *err);
    int (*upload)(void *ctx, void *dst, const void *src, size_t bytes, hpo_error *err);
    void (*free)(void *ctx, void *p);
    void *ctx;
} eng_cuda_data_ops;

/* The bytes of ds's rows and of its labels or targets on a device. */
size_t eng_cuda_data_x_bytes(const eng_dataset *ds);
size_t eng_cuda_data_y_bytes(const eng_dataset *ds);

/* Device `device`'s copy of ds, uploaded by this call if no run holds one:
 * 0 and *out, or the allocation's or upload's error (err). Each success is
 * paired with one eng_cuda_data_put. */
int eng_cuda_data_get(const eng_cuda_data_ops *ops, int device, const eng_dataset *ds, eng_cuda_data *out,
                      hpo_error *err);
/* Gives a copy back; the last holder frees it (with its ops). */
void eng_cuda_data_put(const eng_cuda_data_ops *ops, int device, const eng_dataset *ds);
/* Copies alive now (for the tests and /metrics-style introspection). */
int eng_cuda_data_live(void);

#endif
