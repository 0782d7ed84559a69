/*
 * cuda_internal.h - what the files of engine/cuda/ share (C++, nvcc only):
 * the eng_cuda context, the sticky-error helpers and the launch shapes.
 *
 * Design notes
 * - cu_fail records the first failure in the context (cuda_ops.h: errors
 *   are sticky) and returns its code; CU_READY(cu) makes an op refuse work
 *   once the context has failed, and makes the context's GPU current
 *   (cu_use); cu_launched checks a kernel launch.
 * - cu_grid: blocks for n elements at CU_THREADS per block, capped so that
 *   kernels loop grid-stride (any n fits in 32-bit grids).
 * - scratch: CU_SCRATCH doubles of device memory for two-pass reductions
 *   (block partials, then one block folds them in a fixed order).
 * - cuBLASLt is not linked: cu_lt() loads it with dlopen at the first
 *   context (lt_api.cu) and the ops call it through that table. Linked, its
 *   static initialisers (~0.7 s of page faults on a 2-core machine) ran at
 *   the start of every process that links the engine, hpod and every test
 *   included, with or without a GPU.
 */
#ifndef ENG_CUDA_INTERNAL_H
#define ENG_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "cuda_ops.h"
}

#define CU_THREADS 256
#define CU_MAX_BLOCKS 4096
#define CU_SCRATCH ENG_CUDA_SCRATCH_DOUBLES   /* cuda_ops.h */
#define CU_WORKSPACE ENG_CUDA_WORKSPACE_BYTES /* the cuBLASLt workspace */

/* The cuBLASLt functions the ops use, named without the cublasLt prefix. */
struct cu_lt_api {
    decltype(&cublasLtCreate) Create;
    decltype(&cublasLtDestroy) Destroy;
    decltype(&cublasLtGetStatusString) GetStatusString;
    decltype(&cublasLtMatmul) Matmul;
    decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
    decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
    decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
    decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
    decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
    decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
    decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
    decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};
/* The table, loaded once per process (thread-safe); NULL when the library
 * cannot be loaded or lacks a function, with *why (may be NULL) saying
 * which. */
const cu_lt_api *cu_lt(const char **why);
/* dlopen of a CUDA library by soname: the loader's search path, else the
 * toolkit found at build time; NULL with why saying why. */
void *cu_dlopen(const char *soname, char *why, size_t why_size);

struct eng_cuda {
    int device;
    int allow_tf32;
    int half_fp16; /* the 16-bit format of the _h16 ops: fp16, else bf16 (eng_cuda_set_fp16) */
    cudaStream_t stream;
    const cu_lt_api *blas; /* cu_lt() */
    cublasLtHandle_t lt;
    void *workspace;
    double *scratch;
    int rc;        /* first failure (sticky), 0 if none */
    hpo_error err; /* its reason */
};

struct eng_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

int cu_fail(eng_cuda *cu, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* cudaGetLastError after a launch: 0, or the failure recorded. */
int cu_launched(eng_cuda *cu, const char *what);
/* A CUDA runtime call's result: 0, or the failure recorded. */
int cu_check(eng_cuda *cu, cudaError_t e, const char *what);

/* Makes cu's GPU the calling thread's current one: one thread may drive
 * contexts on several GPUs (data-parallel replicas), and a kernel, a copy
 * or an allocation goes to the current GPU. A failure is the next call's
 * to report (it finds no usable GPU), not left for the thread's next
 * launch check to blame on a kernel. */
static inline void cu_use(const eng_cuda *cu) {
    int cur = -1;
    if ((cudaGetDevice(&cur) != cudaSuccess || cur != cu->device) && cudaSetDevice(cu->device) != cudaSuccess)
        cudaGetLastError();
}

#define CU_READY(cu)                  \
    do {                              \
        if ((cu)->rc) return (cu)->rc; \
        cu_use(cu);                   \
    } while (0)

static inline unsigned cu_grid(size_t n) {
    size_t b = (n + CU_THREADS - 1) / CU_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b > CU_MAX_BLOCKS ? CU_MAX_BLOCKS : b);
}

/* eng_f32_to_bf16 (bf16.h) on the device: round to nearest even, NaN quiet. */
static __device__ __forceinline__ uint16_t cu_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* eng_f32_to_fp16 (bf16.h) on the device: IEEE half, round to nearest
 * even, subnormals kept, overflow to Inf; and the f32 value it stands for
 * (eng_round_fp16_n's rounding) */
static __device__ __forceinline__ uint16_t cu_f32_to_fp16(float f) { return __half_as_ushort(__float2half_rn(f)); }
static __device__ __forceinline__ float cu_round_fp16(float f) { return __half2float(__float2half_rn(f)); }
/* a value in the context's 16-bit format */
static __device__ __forceinline__ uint16_t cu_f32_to_h16(float f, int fp16) {
    return fp16 ? cu_f32_to_fp16(f) : cu_f32_to_bf16(f);
}

/* element e's place in an NHWC tensor of H x W x C per sample */
typedef struct cu_nhwc {
    size_t n;
    int h, w, c;
} cu_nhwc;
static __device__ __forceinline__ cu_nhwc cu_nhwc_of(size_t e, int H, int W, int C) {
    cu_nhwc p;
    p.c = (int)(e % (size_t)C);
    e /= (size_t)C;
    p.w = (int)(e % (size_t)W);
    e /= (size_t)W;
    p.h = (int)(e % (size_t)H);
    p.n = e / (size_t)H;
    return p;
}

/* a value of an f32, bf16 (uint16_t) or fp16 (__half) buffer as f32, and
 * its store (16-bit formats rounded to nearest even): the ops templated
 * over the three */
static __device__ __forceinline__ float cu_load_f32(const float *p) { return *p; }
static __device__ __forceinline__ float cu_load_f32(const uint16_t *p) { return __uint_as_float((uint32_t)*p << 16); }
static __device__ __forceinline__ float cu_load_f32(const __half *p) { return __half2float(*p); }
static __device__ __forceinline__ void cu_store(float *p, float v) { *p = v; }
static __device__ __forceinline__ void cu_store(uint16_t *p, float v) { *p = cu_f32_to_bf16(v); }
static __device__ __forceinline__ void cu_store(__half *p, float v) { *p = __float2half_rn(v); }

#endif
