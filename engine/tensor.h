/*
 * tensor.h - the engine's tensor: a typed view of up to 4 dimensions.
 *
 * Design notes
 * - A tensor is a small struct (dtype, shape, data pointer, ownership flag)
 *   passed by value or pointer; it never reference-counts. Most tensors the
 *   engine touches are *views*: the parameters and gradients of a model live
 *   in one block per kind (llm.c style) and each layer's weights are views at
 *   an offset into those blocks (eng_tensor_view), so one memcpy saves or
 *   restores a whole model.
 * - Layout: row-major, last dimension fastest. Images are NHWC, convolution
 *   weights HWIO (kh, kw, in channels, out channels), dense weights IO
 *   (in, out), as in Keras/TensorFlow, so a flatten is free.
 * - dtypes: f32 everywhere for master weights, losses and reductions; bf16
 *   (upper 16 bits of an IEEE f32, round-to-nearest-even) for compute copies
 *   in mixed precision (conversions live in bf16.h). fp16 compute on the CPU
 *   is emulated by rounding f32 values to the nearest half (eng_round_fp16_n).
 * - Threading: none; a tensor is owned by one model and one thread.
 * - Memory: every large block of the engine (parameter blocks, batch
 *   buffers, replicas, batches) comes from eng_alloc, which returns NULL on
 *   out-of-memory: callers return HPO_ENOMEM, so a worker thread never
 *   aborts on a model that does not fit (train.h's memory budget keeps it
 *   from trying). eng_alloc counts the bytes it hands out per thread, which
 *   is how the tests check the budget's estimate against real allocations,
 *   and can be told to fail past a number of bytes, which is how they reach
 *   every out-of-memory path.
 */
#ifndef ENG_TENSOR_H
#define ENG_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define ENG_MAX_DIMS 4

typedef enum eng_dtype { ENG_F32 = 0, ENG_BF16 = 1 } eng_dtype;

typedef struct eng_tensor {
    eng_dtype dtype;
    int ndim;
    int shape[ENG_MAX_DIMS];
    void *data;
    int owns; /* 1: eng_tensor_free releases data */
} eng_tensor;

size_t eng_dtype_size(eng_dtype t);
size_t eng_tensor_numel(const eng_tensor *t);
size_t eng_tensor_nbytes(const eng_tensor *t);

/* A heap tensor with zeroed, 64-byte aligned data. HPO_EINVAL on a bad shape,
 * HPO_ETOOLARGE when its size overflows, HPO_ENOMEM when out of memory. */
int eng_tensor_new(eng_tensor **out, eng_dtype dtype, int ndim, const int *shape);
void eng_tensor_free(eng_tensor *t);

/* A view of borrowed memory (data stays owned by the caller). */
eng_tensor eng_tensor_view(eng_dtype dtype, void *data, int ndim, const int *shape);

/* 64-byte aligned allocation (freed with free); NULL when out of memory. */
void *eng_alloc(size_t nbytes);
/* The bytes eng_alloc(nbytes) takes (rounded up to 64; SIZE_MAX if that
 * overflows): what memory estimates add up. */
size_t eng_alloc_size(size_t nbytes);
/* Bytes eng_alloc handed out on the calling thread since the last reset,
 * each allocation rounded up to 64 as it is allocated. */
size_t eng_alloc_counted(void);
void eng_alloc_count_reset(void);
/* Tests: on the calling thread, an allocation that would take the count
 * above limit fails (returns NULL); SIZE_MAX (the default) turns it off. */
void eng_alloc_fail_after(size_t limit);

/* Saturating size arithmetic for memory estimates: a sum or product that
 * does not fit a size_t is SIZE_MAX, which no budget accepts. */
static inline size_t eng_size_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }
static inline size_t eng_size_mul(size_t a, size_t b) { return b && a > SIZE_MAX / b ? SIZE_MAX : a * b; }

/* "17.6 GiB", "512.0 MiB", "3.0 KiB", "12 B" into buf. */
void eng_format_bytes(size_t n, char *buf, size_t len);

#endif
