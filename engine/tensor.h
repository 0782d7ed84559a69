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

/* A heap tensor with zeroed, 64-byte aligned data. HPO_EINVAL on a bad shape. */
int eng_tensor_new(eng_tensor **out, eng_dtype dtype, int ndim, const int *shape);
void eng_tensor_free(eng_tensor *t);

/* A view of borrowed memory (data stays owned by the caller). */
eng_tensor eng_tensor_view(eng_dtype dtype, void *data, int ndim, const int *shape);

/* 64-byte aligned allocation that aborts on out-of-memory (freed with free). */
void *eng_alloc(size_t nbytes);

#endif
