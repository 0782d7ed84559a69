/*
 * cuda_emulated.c - the device op library (engine/cuda_ops.h) and the
 * device query (engine/gpu.h) emulated on the host, so that the host side
 * of the CUDA training path (train_cuda.c, train_cuda_layers.c,
 * cuda_data.c: records, the step cursor and staging, graphs, mixed_fp16's
 * loss scale, replicas, checkpoints) and the device tests that drive it
 * (tests/gpu/test_cuda_train.c, test_cuda_step.c) run on any machine, CI's
 * included. tests/CMakeLists.txt links them with this file in place of
 * engine/cuda/ and gpu_cuda.cu (ctest: unit.engine.cuda_emulated.*).
 *
 * Design notes
 * - Two GPUs (EMU_GPUS) of EMU_GPU_BYTES each, so data-parallel replicas
 *   run both on one GPU and across two. Device memory is host memory
 *   (malloc) in a table of live allocations per GPU; a fresh allocation is
 *   poisoned with 0xff bytes (NaN as f32), so a buffer read before it was
 *   written shows in the results, as the device tests' poison() does.
 * - Each op computes what its kernel in engine/cuda/ computes: through the
 *   CPU engine's function where the math is the same (ops.h's activations,
 *   dense layers over eng_backend_cpu's f32 GEMM, max pooling, augmentation,
 *   global average pooling, batch normalisation, dropout's backward and the
 *   residual add; loss.h's eng_loss_compute; bf16.h's scalar conversions),
 *   otherwise as the kernel's loop in C (im2col and col2im, dropout from a
 *   key, the batch gathers, the gradient norm with its double sum, the
 *   optimisers with their scalars from device memory, the loss scaler, the
 *   step staging). A 16-bit GEMM widens its operands to f32 (exact; the
 *   device multiplies them exactly and accumulates in f32); with allow_tf32
 *   an f32 GEMM's operands are rounded to TF32 first. mixed_fp16's dense
 *   backward is dense.cu's: the activation's backward, dz rounded to fp16 in
 *   place, then the bias sum and the GEMMs from that dz.
 * - Ops run when they are enqueued, to completion, unless their context is
 *   capturing: then the op's arguments are copied into a graph node (host
 *   scalars frozen at capture, device pointers read at each replay, as a
 *   kernel node's parameters are) and eng_cuda_graph_launch runs the nodes
 *   in order.
 * - NCCL's hang: a wait on a context of an all-reduce group, or the
 *   group's free (ncclCommFinalize), after a peer of the group failed
 *   would wait on the device for the peer's part of an all-reduce forever
 *   (unless the group was aborted): the emulation says so and aborts the
 *   process.
 * - Faults on cue (cuda_emulated.h): a kernel fault that shows at a
 *   group member's next wait; non-finite gradients from a given norm on.
 * - What the device would refuse fails the context, sticky, with the reason
 *   (cuda_ops.h's error model): the kernels' own argument checks; during a
 *   capture, what a capture on the driver refuses (a synchronisation, an
 *   allocation, a free, an upload or download, and so eng_cuda_sums_add);
 *   an op's device pointer that is not inside one live allocation of the
 *   context's GPU for the bytes the op touches (a host pointer, a freed
 *   buffer, another GPU's buffer, an overrun: an illegal address on the
 *   device, or silent corruption of a neighbour); an upload from or a
 *   download into device memory; overlapping copies; a graph launched on
 *   another GPU. Out of memory (past EMU_GPU_BYTES) is HPO_ENOMEM, not
 *   sticky, as cudaMalloc's is.
 * What it cannot check
 * - Capture legality on a real driver beyond those calls (the capture mode,
 *   instantiation), and asynchrony: every op has finished when its call
 *   returns, so a missing wait between the host and a stream or between two
 *   contexts' streams goes unseen, and so does a host read of device memory
 *   (host memory here).
 * - Which GPU is current in a thread (engine/cuda's cu_use): ops run on
 *   their context's GPU whatever cudaSetDevice would say.
 * - NCCL itself: eng_cuda_allreduce_sum is a host sum in replica order.
 * - Kernel numerics: cuBLASLt's and the reductions' summation orders, nvcc's
 *   fused multiply-adds, the metric sums' atomics, TF32's exact rounding:
 *   the tests compare GPU and CPU runs within their tolerances, as on a GPU.
 * - Reads a kernel makes at addresses it finds in device memory (a gather's
 *   rows of the dataset, a staged step's records): only AddressSanitizer
 *   (CI's ASan build runs these tests) bounds those.
 * Threading: the allocation table is under a mutex; a context is used by
 * one thread at a time, as cuda_ops.h says.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bf16.h"
#include "cuda_emulated.h"
#include "cuda_ops.h"
#include "gpu.h"
#include "ops.h"

#define EMU_GPUS 2
#define EMU_GPU_BYTES ((size_t)16 << 30)

static void *emu_check(void *p) {
    if (!p) {
        fprintf(stderr, "cuda_emulated: out of host memory\n");
        abort();
    }
    return p;
}

static void *emu_calloc(size_t n, size_t size) { return emu_check(calloc(n ? n : 1, size ? size : 1)); }

/* at, an array of *cap items of size bytes, with room for twice as many */
static void *emu_grow(void *at, size_t *cap, size_t size) {
    *cap = *cap ? 2 * *cap : 64;
    return emu_check(realloc(at, *cap * size));
}

/* ---- device memory: the live allocations ---- */

typedef struct emu_block {
    uintptr_t base;
    size_t bytes;
    int device;
} emu_block;

static struct {
    pthread_mutex_t mu;
    emu_block *at;
    size_t n, cap;
    size_t used[EMU_GPUS];
} mem = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, {0}};

/* the block of `bytes` at p for device, or HPO_ENOMEM past the GPU's size */
static int mem_add(void *p, size_t bytes, int device) {
    pthread_mutex_lock(&mem.mu);
    int rc = 0;
    if (bytes > EMU_GPU_BYTES - mem.used[device]) {
        rc = HPO_ENOMEM;
    } else {
        if (mem.n == mem.cap) mem.at = emu_grow(mem.at, &mem.cap, sizeof *mem.at);
        mem.at[mem.n++] = (emu_block){(uintptr_t)p, bytes, device};
        mem.used[device] += bytes;
    }
    pthread_mutex_unlock(&mem.mu);
    return rc;
}

/* forgets the block starting at p: 1, or 0 when p starts none */
static int mem_remove(const void *p) {
    pthread_mutex_lock(&mem.mu);
    int found = 0;
    for (size_t i = 0; i < mem.n && !found; i++)
        if (mem.at[i].base == (uintptr_t)p) {
            mem.used[mem.at[i].device] -= mem.at[i].bytes;
            mem.at[i] = mem.at[--mem.n];
            found = 1;
        }
    pthread_mutex_unlock(&mem.mu);
    return found;
}

/* 1 if block b holds [a, a + bytes) */
static int block_holds(const emu_block *b, uintptr_t a, size_t bytes) {
    return a >= b->base && a - b->base < b->bytes && bytes <= b->bytes - (a - b->base);
}

/* the device whose one live block holds [p, p + bytes), or -1 */
static int mem_device_of(const void *p, size_t bytes) {
    int device = -1;
    pthread_mutex_lock(&mem.mu);
    for (size_t i = 0; i < mem.n && device < 0; i++)
        if (block_holds(&mem.at[i], (uintptr_t)p, bytes)) device = mem.at[i].device;
    pthread_mutex_unlock(&mem.mu);
    return device;
}

/* ---- contexts, their sticky error, and graph nodes ---- */

typedef void (*emu_kernel)(const void *args);

typedef struct emu_node {
    emu_kernel run;
    void *args; /* a copy of the op's arguments */
} emu_node;

typedef struct emu_nodes {
    emu_node *at;
    size_t n, cap;
} emu_nodes;

struct eng_cuda {
    int device, tf32, fp16;
    struct eng_cuda_comm *comm; /* its all-reduce group, or NULL */
    int capturing;
    emu_nodes capture; /* the nodes captured so far */
    int rc;            /* first failure (sticky), 0 if none */
    hpo_error err;     /* its reason */
};

struct eng_cuda_graph {
    int device;
    emu_nodes nodes;
};

static void nodes_free(emu_nodes *ns) {
    for (size_t i = 0; i < ns->n; i++) free(ns->at[i].args);
    free(ns->at);
    memset(ns, 0, sizeof *ns);
}

static int emu_fail(eng_cuda *cu, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- faults on cue (cuda_emulated.h) ---- */

static _Atomic int fault_device = -1;               /* the GPU of a member wait to fail, or -1 */
static _Atomic int fault_countdown;                 /* the waits left before it does */
static _Atomic int nan_device = -1;                 /* the GPU whose norms see non-finite gradients, or -1 */
static _Atomic long nan_countdown;                  /* the norms left before they do */
static void group_wait_check(const struct eng_cuda_comm *c, const char *what);

void emu_cuda_fault_in_group(int device, int wait) {
    atomic_store(&fault_countdown, wait);
    atomic_store(&fault_device, wait > 0 ? device : -1);
}

void emu_cuda_nan_gradients_from(int device, long n) {
    atomic_store(&nan_countdown, n);
    atomic_store(&nan_device, n > 0 ? device : -1);
}

/* engine/cuda's cu_fail: the first failure stays, with its reason */
static int emu_fail(eng_cuda *cu, int rc, const char *fmt, ...) {
    if (cu->rc) return cu->rc;
    cu->rc = rc;
    snprintf(cu->err.field, sizeof cu->err.field, "devices");
    int len = snprintf(cu->err.message, sizeof cu->err.message, "cuda:%d: ", cu->device);
    va_list ap;
    va_start(ap, fmt);
    if (len > 0 && (size_t)len < sizeof cu->err.message)
        vsnprintf(cu->err.message + len, sizeof cu->err.message - (size_t)len, fmt, ap);
    va_end(ap);
    return rc;
}

/* what a capture on the driver refuses (cudaStreamCaptureModeThreadLocal):
 * 1, the context failed, during a capture */
static int capture_refuses(eng_cuda *cu, const char *what) {
    if (!cu->capturing) return 0;
    emu_fail(cu, HPO_EINTERNAL, "%s: operation not permitted when stream is capturing "
             "(cudaErrorStreamCaptureUnsupported)", what);
    return 1;
}

/* 1, the context failed, unless p (dev) holds `bytes` bytes (0: none
 * touched) of one live allocation on cu's GPU */
static int dev_bad(eng_cuda *cu, const char *op, const char *name, const void *p, size_t bytes) {
    if (!bytes || mem_device_of(p, bytes) == cu->device) return 0;
    eng_gpu_mark_lost(cu->device); /* on the device: the context is lost for the process */
    emu_fail(cu, HPO_EINTERNAL, "%s: %s (%p, %zu bytes) is not in one device allocation of this GPU "
             "(an illegal address)", op, name, p, bytes);
    return 1;
}

/* 1, the context failed, when p (host) is device memory */
static int host_bad(eng_cuda *cu, const char *op, const char *name, const void *p) {
    if (mem_device_of(p, 1) < 0) return 0;
    emu_fail(cu, HPO_EINTERNAL, "%s: %s (%p) is device memory, not host memory (cudaErrorInvalidValue)", op, name, p);
    return 1;
}

/* engine/cuda's CU_READY: an op refuses work once its context failed;
 * ENTER also names the op (op) for the checks of its device pointers:
 * DEV(p, bytes) holds the bytes the op touches, DEV_OPT is NULL or does */
#define READY(cu)                      \
    do {                               \
        if ((cu)->rc) return (cu)->rc; \
    } while (0)
#define ENTER(cu)              \
    const char *op = __func__; \
    READY(cu)
#define DEV(p, bytes)                                            \
    do {                                                         \
        if (dev_bad(cu, op, #p, (p), (bytes))) return cu->rc;    \
    } while (0)
#define DEV_OPT(p, bytes)                                        \
    do {                                                         \
        if ((p) && dev_bad(cu, op, #p, (p), (bytes))) return cu->rc; \
    } while (0)

/* runs the op now, or records a copy of its arguments in the capture */
static int launch(eng_cuda *cu, emu_kernel run, const void *args, size_t size) {
    if (!cu->capturing) {
        run(args);
        return 0;
    }
    emu_nodes *ns = &cu->capture;
    if (ns->n == ns->cap) ns->at = emu_grow(ns->at, &ns->cap, sizeof *ns->at);
    void *copy = emu_calloc(1, size);
    memcpy(copy, args, size);
    ns->at[ns->n++] = (emu_node){run, copy};
    return 0;
}

/* KERNEL(name, { fields }) { body over a->fields }: an op's arguments and
 * what its kernel does with them; LAUNCH(name, values of the fields) runs
 * or captures it and returns from the op */
#define KERNEL(name, ...)                                             \
    typedef struct __VA_ARGS__ name##_args;                           \
    static void name##_body(const name##_args *a);                    \
    static void name##_run(const void *a) { name##_body(a); }         \
    static void name##_body(const name##_args *a)
#define LAUNCH(name, ...)                                             \
    do {                                                              \
        const name##_args a_ = {__VA_ARGS__};                         \
        return launch(cu, name##_run, &a_, sizeof a_);                \
    } while (0)

/* ---- 16-bit values and GEMM operands ---- */

/* the context's 16-bit format: fp16, else bf16 (round to nearest even,
 * subnormals kept, as cu_f32_to_h16) */
static uint16_t to_h16(float v, int fp16) { return fp16 ? eng_f32_to_fp16(v) : eng_f32_to_bf16(v); }
static float from_h16(uint16_t h, int fp16) { return fp16 ? eng_fp16_to_f32(h) : eng_bf16_to_f32(h); }
static float round_fp16(float v) { return eng_fp16_to_f32(eng_f32_to_fp16(v)); }

/* v rounded to TF32: 10 mantissa bits, to nearest, ties away from zero */
static float round_tf32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}

/* the formats of a GEMM's operands */
enum { GEMM_F32, GEMM_TF32, GEMM_BF16, GEMM_FP16 };

static int f32_gemm(const eng_cuda *cu) { return cu->tf32 ? GEMM_TF32 : GEMM_F32; }
static int h16_gemm(const eng_cuda *cu) { return cu->fp16 ? GEMM_FP16 : GEMM_BF16; }
static size_t gemm_bytes(int fmt) { return fmt == GEMM_BF16 || fmt == GEMM_FP16 ? 2 : 4; }

/* n operands of format fmt as the f32 values the device multiplies: p
 * itself, or a copy in *tmp (the caller frees it) */
static const float *operand(const void *p, size_t n, int fmt, float **tmp) {
    *tmp = NULL;
    if (fmt == GEMM_F32) return p;
    float *f = *tmp = emu_calloc(n, sizeof *f);
    const float *p32 = p;
    const uint16_t *p16 = p;
    for (size_t i = 0; i < n; i++) f[i] = fmt == GEMM_TF32 ? round_tf32(p32[i]) : from_h16(p16[i], fmt == GEMM_FP16);
    return f;
}

/* ---- gpu.h ---- */

int eng_gpu_built(void) { return 1; }

void eng_gpu_describe(char *buf, size_t n) {
    snprintf(buf, n, "CUDA emulated on the host (tests/unit/engine/cuda_emulated.c), %d GPUs", EMU_GPUS);
}

int eng_gpu_count(int *n, hpo_error *err) {
    (void)err;
    *n = EMU_GPUS;
    return 0;
}

static int gpu_index_bad(int i, hpo_error *err) {
    if (i >= 0 && i < EMU_GPUS) return 0;
    return hpo_fail(err, HPO_EINVAL, "devices", "cuda:%d: this machine has %d CUDA device(s)", i, EMU_GPUS);
}

int eng_gpu_info_get(int i, eng_gpu_info *out, hpo_error *err) {
    int rc = gpu_index_bad(i, err);
    if (rc) return rc;
    memset(out, 0, sizeof *out);
    out->index = i;
    snprintf(out->name, sizeof out->name, "emulated on the host");
    out->cc_major = 9;
    out->total_bytes = EMU_GPU_BYTES;
    out->multiprocessors = 1;
    return 0;
}

int eng_gpu_memory(int i, size_t *used, size_t *total, hpo_error *err) {
    int rc = gpu_index_bad(i, err);
    if (rc) return rc;
    pthread_mutex_lock(&mem.mu);
    *used = mem.used[i];
    pthread_mutex_unlock(&mem.mu);
    *total = EMU_GPU_BYTES;
    return 0;
}

/* ---- context ---- */

int eng_cuda_open(int device, int allow_tf32, eng_cuda **out, hpo_error *err) {
    int rc = gpu_index_bad(device, err);
    if (rc) return rc;
    eng_cuda *cu = emu_calloc(1, sizeof *cu);
    cu->device = device;
    cu->tf32 = allow_tf32 != 0;
    *out = cu;
    return 0;
}

void eng_cuda_close(eng_cuda *cu) {
    if (!cu) return;
    nodes_free(&cu->capture);
    free(cu);
}

void eng_cuda_set_fp16(eng_cuda *cu, int fp16) { cu->fp16 = fp16 != 0; }

int eng_cuda_blas_load(hpo_error *err) {
    (void)err;
    return 0;
}

int eng_cuda_sync(eng_cuda *cu, hpo_error *err) {
    capture_refuses(cu, "a synchronisation");
    if (!cu->rc && cu->comm) {
        if (cu->device == atomic_load(&fault_device) && atomic_fetch_sub(&fault_countdown, 1) == 1)
            emu_fail(cu, HPO_EINTERNAL, "an illegal memory access was encountered (cudaErrorIllegalAddress, "
                     "a fault on cue)");
        else
            group_wait_check(cu->comm, "eng_cuda_sync");
    }
    if (cu->rc && err) *err = cu->err;
    return cu->rc;
}

/* ---- memory ---- */

int eng_cuda_alloc(eng_cuda *cu, size_t bytes, void **out, hpo_error *err) {
    if (capture_refuses(cu, "cudaMalloc")) {
        if (err) *err = cu->err;
        return cu->rc;
    }
    size_t size = bytes ? bytes : 1;
    void *p = malloc(size);
    if (!p || mem_add(p, size, cu->device)) { /* not sticky: the context stays usable */
        free(p);
        return hpo_fail(err, HPO_ENOMEM, "devices", "cuda:%d: out of device memory (%zu bytes asked)", cu->device,
                        bytes);
    }
    memset(p, 0xff, size);
    *out = p;
    return 0;
}

void eng_cuda_free(eng_cuda *cu, void *p) {
    if (!p || capture_refuses(cu, "cudaFree")) return;
    if (!mem_remove(p)) {
        emu_fail(cu, HPO_EINTERNAL, "cudaFree of %p: not a live device allocation (cudaErrorInvalidValue)", p);
        return;
    }
    free(p);
}

int eng_cuda_upload(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err) {
    if (!cu->rc && bytes && !capture_refuses(cu, "an upload") && !dev_bad(cu, __func__, "dst", dst, bytes) &&
        !host_bad(cu, __func__, "src", src))
        memcpy(dst, src, bytes);
    return eng_cuda_sync(cu, err);
}

int eng_cuda_download(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err) {
    if (!cu->rc && bytes && !capture_refuses(cu, "a download") && !dev_bad(cu, __func__, "src", src, bytes) &&
        !host_bad(cu, __func__, "dst", dst))
        memcpy(dst, src, bytes);
    return eng_cuda_sync(cu, err);
}

KERNEL(zero, { void *p; size_t bytes; }) { memset(a->p, 0, a->bytes); }

int eng_cuda_zero(eng_cuda *cu, void *p, size_t bytes) {
    ENTER(cu);
    if (!bytes) return 0;
    DEV(p, bytes);
    LAUNCH(zero, p, bytes);
}

KERNEL(copy, { void *dst; const void *src; size_t bytes; }) { memcpy(a->dst, a->src, a->bytes); }

int eng_cuda_copy(eng_cuda *cu, void *dst, const void *src, size_t bytes) {
    ENTER(cu);
    if (!bytes || dst == src) return 0;
    DEV(dst, bytes);
    DEV(src, bytes);
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d < s + bytes && s < d + bytes) return emu_fail(cu, HPO_EINTERNAL, "cudaMemcpy: overlapping ranges");
    LAUNCH(copy, dst, src, bytes);
}

/* ---- data ---- */

KERNEL(gather_x, { const void *x_all; int x_u8; size_t ss; float scale; const uint32_t *idx; int n; float *out;
                   uint16_t *out16; int fp16; }) {
    for (int r = 0; r < a->n; r++)
        for (size_t j = 0; j < a->ss; j++) {
            size_t at = (size_t)a->idx[r] * a->ss + j, to = (size_t)r * a->ss + j;
            float v = (a->x_u8 ? (float)((const uint8_t *)a->x_all)[at] : ((const float *)a->x_all)[at]) * a->scale;
            if (a->out16) a->out16[to] = to_h16(v, a->fp16);
            else a->out[to] = v;
        }
}

int eng_cuda_gather_x(eng_cuda *cu, const void *x_all, int x_u8, size_t ss, float scale, const uint32_t *idx, int n,
                      float *out, uint16_t *out16) {
    ENTER(cu);
    if (n <= 0 || !ss) return 0;
    if (!out == !out16) return emu_fail(cu, HPO_EINTERNAL, "gather: exactly one of out and out16 is needed");
    size_t rows = (size_t)n * ss;
    DEV(x_all, ss * (x_u8 ? 1 : sizeof(float)));
    DEV(idx, (size_t)n * sizeof *idx);
    DEV_OPT(out, rows * sizeof *out);
    DEV_OPT(out16, rows * sizeof *out16);
    LAUNCH(gather_x, x_all, x_u8, ss, scale, idx, n, out, out16, cu->fp16);
}

/* row i of out = row idx[i] of all, rows of row_bytes bytes */
KERNEL(gather_rows, { const void *all; size_t row_bytes; const uint32_t *idx; int n; void *out; }) {
    for (int i = 0; i < a->n; i++)
        memcpy((char *)a->out + (size_t)i * a->row_bytes, (const char *)a->all + (size_t)a->idx[i] * a->row_bytes,
               a->row_bytes);
}

int eng_cuda_gather_labels(eng_cuda *cu, const int32_t *y_all, const uint32_t *idx, int n, int32_t *out) {
    ENTER(cu);
    if (n <= 0) return 0;
    DEV(y_all, sizeof *y_all);
    DEV(idx, (size_t)n * sizeof *idx);
    DEV(out, (size_t)n * sizeof *out);
    LAUNCH(gather_rows, y_all, sizeof *y_all, idx, n, out);
}

int eng_cuda_gather_targets(eng_cuda *cu, const float *t_all, int K, const uint32_t *idx, int n, float *out) {
    ENTER(cu);
    if (n <= 0 || K <= 0) return 0;
    DEV(t_all, (size_t)K * sizeof *t_all);
    DEV(idx, (size_t)n * sizeof *idx);
    DEV(out, (size_t)n * K * sizeof *out);
    LAUNCH(gather_rows, t_all, (size_t)K * sizeof *t_all, idx, n, out);
}

KERNEL(to_h16, { const float *x; uint16_t *y; size_t n; int fp16; }) {
    for (size_t i = 0; i < a->n; i++) a->y[i] = to_h16(a->x[i], a->fp16);
}

int eng_cuda_to_h16(eng_cuda *cu, const float *x, uint16_t *y, size_t n) {
    ENTER(cu);
    if (!n) return 0;
    DEV(x, n * sizeof *x);
    DEV(y, n * sizeof *y);
    LAUNCH(to_h16, x, y, n, cu->fp16);
}

KERNEL(round_fp16, { const float *x; float *y; size_t n; }) {
    for (size_t i = 0; i < a->n; i++) a->y[i] = round_fp16(a->x[i]);
}

int eng_cuda_round_fp16(eng_cuda *cu, const float *x, float *y, size_t n) {
    ENTER(cu);
    if (!n) return 0;
    DEV(x, n * sizeof *x);
    DEV(y, n * sizeof *y);
    LAUNCH(round_fp16, x, y, n);
}

/* ---- activations ---- */

/* 1, the context failed, unless the activation's backward has what it
 * reads (ops.h): z for gelu, y for the others but none */
static int act_bad(eng_cuda *cu, const char *op, int act, const float *z, const float *y, size_t bytes) {
    if (act == ENG_ACT_GELU) return dev_bad(cu, op, "z", z, bytes);
    return act != ENG_ACT_NONE && dev_bad(cu, op, "y", y, bytes);
}

KERNEL(act_fwd, { int act; const float *z; float *y; size_t rows, cols; }) {
    eng_act_forward(a->act, a->z, a->y, a->rows, a->cols);
}

int eng_cuda_act_forward(eng_cuda *cu, int act, const float *z, float *y, size_t rows, size_t cols) {
    ENTER(cu);
    size_t n = rows * cols;
    if (!n) return 0;
    if (act == ENG_ACT_NONE) return eng_cuda_copy(cu, y, z, n * sizeof *y);
    DEV(z, n * sizeof *z);
    DEV(y, n * sizeof *y);
    LAUNCH(act_fwd, act, z, y, rows, cols);
}

KERNEL(act_bwd, { int act; const float *z, *y; float *d; size_t rows, cols; }) {
    eng_act_backward(a->act, a->z, a->y, a->d, a->rows, a->cols);
}

int eng_cuda_act_backward(eng_cuda *cu, int act, const float *z, const float *y, float *d, size_t rows,
                          size_t cols) {
    ENTER(cu);
    size_t n = rows * cols;
    if (!n || act == ENG_ACT_NONE) return 0;
    if (act_bad(cu, op, act, z, y, n * sizeof(float))) return cu->rc;
    DEV(d, n * sizeof *d);
    LAUNCH(act_bwd, act, z, y, d, rows, cols);
}

/* ---- dense ---- */

/* z = x w + b, then y = act(z) (dense.cu: the bias epilogue, then the
 * activation; a relu epilogue when z is y gives the same) */
KERNEL(dense_fwd, { const void *x, *w; const float *b; float *z, *y; int B, I, O, act, fmt; }) {
    float *xt, *wt;
    const float *x = operand(a->x, (size_t)a->B * a->I, a->fmt, &xt);
    const float *w = operand(a->w, (size_t)a->I * a->O, a->fmt, &wt);
    eng_dense_forward(eng_backend_cpu(), x, w, a->b, a->z, a->z, a->B, a->I, a->O, ENG_ACT_NONE);
    eng_act_forward(a->act, a->z, a->y, (size_t)a->B, (size_t)a->O);
    free(xt);
    free(wt);
}

static int dense_fwd(eng_cuda *cu, const char *op, int fmt, const void *x, const void *w, const float *b, float *z,
                     float *y, int B, int I, int O, int act) {
    READY(cu);
    if (B <= 0 || O <= 0) return 0;
    if (I <= 0) return emu_fail(cu, HPO_EINTERNAL, "dense with no inputs");
    size_t es = gemm_bytes(fmt), out = (size_t)B * O * sizeof(float);
    DEV(x, (size_t)B * I * es);
    DEV(w, (size_t)I * O * es);
    DEV_OPT(b, (size_t)O * sizeof *b);
    DEV(z, out);
    DEV(y, out);
    LAUNCH(dense_fwd, x, w, b, z, y, B, I, O, act, fmt);
}

int eng_cuda_dense_forward(eng_cuda *cu, const float *x, const float *w, const float *b, float *z, float *y, int B,
                           int I, int O, int act) {
    return dense_fwd(cu, __func__, f32_gemm(cu), x, w, b, z, y, B, I, O, act);
}

int eng_cuda_dense_forward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *b, float *z,
                                float *y, int B, int I, int O, int act) {
    return dense_fwd(cu, __func__, h16_gemm(cu), xb, wb, b, z, y, B, I, O, act);
}

/* d = act'(z, y) d in place, rounded to fp16 values when round_dz
 * (mixed_fp16), db (NULL: none) = its column sums; d16 (NULL: none) = d in
 * the 16-bit format of fmt; then dw = x^T dz, dx (NULL: none) = dz w^T,
 * dz being d16 when there is one (dense.cu) */
KERNEL(dense_bwd, { const void *x, *w; const float *z, *y; float *d; uint16_t *d16; float *dx, *dw, *db;
                    int B, I, O, act, fmt, round_dz; }) {
    int B = a->B, I = a->I, O = a->O;
    size_t nd = (size_t)B * O;
    eng_act_backward(a->act, a->z, a->y, a->d, (size_t)B, (size_t)O);
    if (a->round_dz)
        for (size_t i = 0; i < nd; i++) a->d[i] = round_fp16(a->d[i]);
    if (a->db)
        for (int j = 0; j < O; j++) {
            float s = 0.0f;
            for (int r = 0; r < B; r++) s += a->d[(size_t)r * O + j];
            a->db[j] = s;
        }
    if (a->d16)
        for (size_t i = 0; i < nd; i++) a->d16[i] = to_h16(a->d[i], a->fmt == GEMM_FP16);
    float *xt, *wt, *dt;
    const float *x = operand(a->x, (size_t)B * I, a->fmt, &xt), *w = operand(a->w, (size_t)I * O, a->fmt, &wt);
    const float *dz = operand(a->d16 ? (const void *)a->d16 : a->d, nd, a->fmt, &dt);
    const eng_backend *be = eng_backend_cpu();
    be->gemm_f32(1, 0, I, O, B, 1.0f, x, I, dz, O, 0.0f, a->dw, O);
    if (a->dx) be->gemm_f32(0, 1, B, I, O, 1.0f, dz, O, w, O, 0.0f, a->dx, I);
    free(xt);
    free(wt);
    free(dt);
}

static int dense_bwd(eng_cuda *cu, const char *op, int fmt, const void *x, const void *w, const float *z,
                     const float *y, float *d, uint16_t *d16, float *dx, float *dw, float *db, int B, int I, int O,
                     int act) {
    READY(cu);
    if (B <= 0 || O <= 0 || I <= 0) return emu_fail(cu, HPO_EINTERNAL, "dense backward of an empty shape");
    size_t es = gemm_bytes(fmt), out = (size_t)B * O;
    DEV(x, (size_t)B * I * es);
    DEV(w, (size_t)I * O * es);
    if (act_bad(cu, op, act, z, y, out * sizeof(float))) return cu->rc;
    DEV(d, out * sizeof *d);
    if (es == 2) DEV(d16, out * sizeof *d16);
    DEV_OPT(dx, (size_t)B * I * sizeof *dx);
    DEV(dw, (size_t)I * O * sizeof *dw);
    DEV_OPT(db, (size_t)O * sizeof *db);
    LAUNCH(dense_bwd, x, w, z, y, d, es == 2 ? d16 : NULL, dx, dw, db, B, I, O, act, fmt, fmt == GEMM_FP16);
}

int eng_cuda_dense_backward(eng_cuda *cu, const float *x, const float *w, const float *z, const float *y, float *d,
                            float *dx, float *dw, float *db, int B, int I, int O, int act) {
    return dense_bwd(cu, __func__, f32_gemm(cu), x, w, z, y, d, NULL, dx, dw, db, B, I, O, act);
}

int eng_cuda_dense_backward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *z, const float *y,
                                 float *d, uint16_t *d16, float *dx, float *dw, float *db, int B, int I, int O,
                                 int act) {
    return dense_bwd(cu, __func__, h16_gemm(cu), xb, wb, z, y, d, d16, dx, dw, db, B, I, O, act);
}

/* ---- conv2d: im2col and col2im (conv.cu's loops) ---- */

KERNEL(im2col, { eng_conv2d_shape s; const float *x; const uint16_t *x16; float *cols; uint16_t *cols16;
                 int fp16; }) {
    const eng_conv2d_shape *s = &a->s;
    const int K = s->KH * s->KW * s->C;
    size_t total = (size_t)s->N * s->OH * s->OW * K;
    for (size_t i = 0; i < total; i++) {
        size_t row = i / (size_t)K;
        int k = (int)(i % (size_t)K), c = k % s->C, kw = (k / s->C) % s->KW, kh = k / (s->C * s->KW);
        int ow = (int)(row % (size_t)s->OW), oh = (int)((row / (size_t)s->OW) % (size_t)s->OH);
        size_t n = row / ((size_t)s->OW * s->OH);
        int h = oh * s->stride_h - s->pad_t + kh, w = ow * s->stride_w - s->pad_l + kw;
        float v = 0.0f;
        if (h >= 0 && h < s->H && w >= 0 && w < s->W) {
            size_t at = ((n * s->H + h) * s->W + w) * s->C + c;
            v = a->x ? a->x[at] : from_h16(a->x16[at], a->fp16);
        }
        if (a->cols) a->cols[i] = v;
        else a->cols16[i] = to_h16(v, a->fp16);
    }
}

int eng_cuda_im2col(eng_cuda *cu, const eng_conv2d_shape *s, const float *x, const uint16_t *x16, float *cols,
                    uint16_t *cols16) {
    ENTER(cu);
    if (!x == !x16 || !cols == !cols16) return emu_fail(cu, HPO_EINTERNAL, "im2col: one source and one destination");
    size_t in = (size_t)s->N * s->H * s->W * s->C, rows = (size_t)s->N * s->OH * s->OW * s->KH * s->KW * s->C;
    DEV_OPT(x, in * sizeof *x);
    DEV_OPT(x16, in * sizeof *x16);
    DEV_OPT(cols, rows * sizeof *cols);
    DEV_OPT(cols16, rows * sizeof *cols16);
    LAUNCH(im2col, *s, x, x16, cols, cols16, cu->fp16);
}

/* dx(n, h, w, c) = the sum of the dcols entries im2col copied it to, kh and
 * kw ascending */
KERNEL(col2im, { eng_conv2d_shape s; const float *dcols; float *dx; }) {
    const eng_conv2d_shape *s = &a->s;
    const size_t K = (size_t)s->KH * s->KW * s->C;
    for (size_t n = 0; n < (size_t)s->N; n++)
        for (int h = 0; h < s->H; h++)
            for (int w = 0; w < s->W; w++)
                for (int c = 0; c < s->C; c++) {
                    float acc = 0.0f;
                    for (int kh = 0; kh < s->KH; kh++) {
                        int t = h + s->pad_t - kh;
                        if (t < 0 || t % s->stride_h || t / s->stride_h >= s->OH) continue;
                        for (int kw = 0; kw < s->KW; kw++) {
                            int u = w + s->pad_l - kw;
                            if (u < 0 || u % s->stride_w || u / s->stride_w >= s->OW) continue;
                            size_t row = (n * s->OH + (size_t)(t / s->stride_h)) * s->OW + (size_t)(u / s->stride_w);
                            acc += a->dcols[row * K + (size_t)(kh * s->KW + kw) * s->C + c];
                        }
                    }
                    a->dx[((n * s->H + h) * s->W + w) * s->C + c] = acc;
                }
}

int eng_cuda_col2im(eng_cuda *cu, const eng_conv2d_shape *s, const float *dcols, float *dx) {
    ENTER(cu);
    DEV(dcols, (size_t)s->N * s->OH * s->OW * s->KH * s->KW * s->C * sizeof *dcols);
    DEV(dx, (size_t)s->N * s->H * s->W * s->C * sizeof *dx);
    LAUNCH(col2im, *s, dcols, dx);
}

/* ---- maxpool2d ---- */

KERNEL(maxpool_fwd, { const float *x; float *y; int32_t *arg; int N, H, W, C, ph, pw, sh, sw, OH, OW; }) {
    eng_maxpool2d_forward(a->x, a->y, a->arg, a->N, a->H, a->W, a->C, a->ph, a->pw, a->sh, a->sw, a->OH, a->OW);
}

int eng_cuda_maxpool_forward(eng_cuda *cu, const float *x, float *y, int32_t *arg, int N, int H, int W, int C, int ph,
                             int pw, int sh, int sw, int OH, int OW) {
    ENTER(cu);
    size_t out = (size_t)N * OH * OW * C;
    if (!out) return 0;
    DEV(x, (size_t)N * H * W * C * sizeof *x);
    DEV(y, out * sizeof *y);
    DEV(arg, out * sizeof *arg);
    LAUNCH(maxpool_fwd, x, y, arg, N, H, W, C, ph, pw, sh, sw, OH, OW);
}

KERNEL(maxpool_bwd, { const float *dy; const int32_t *arg; float *dx; int N, H, W, C, OH, OW; }) {
    eng_maxpool2d_backward(a->dy, a->arg, a->dx, a->N, a->H, a->W, a->C, a->OH, a->OW);
}

int eng_cuda_maxpool_backward(eng_cuda *cu, const float *dy, const int32_t *arg, float *dx, int N, int H, int W, int C,
                              int ph, int pw, int sh, int sw, int OH, int OW) {
    (void)ph, (void)pw, (void)sh, (void)sw; /* the winners' offsets say it all */
    ENTER(cu);
    size_t in = (size_t)N * H * W * C, out = (size_t)N * OH * OW * C;
    if (!in) return 0;
    DEV(dy, out * sizeof *dy);
    DEV(arg, out * sizeof *arg);
    DEV(dx, in * sizeof *dx);
    LAUNCH(maxpool_bwd, dy, arg, dx, N, H, W, C, OH, OW);
}

/* ---- augmentation, global average pooling ---- */

KERNEL(augment, { const float *x; float *y; const int32_t *params; int N, H, W, C, backward; }) {
    if (a->backward) eng_augment_backward(a->x, a->params, a->y, a->N, a->H, a->W, a->C);
    else eng_augment_apply_ref(a->x, a->y, a->params, a->N, a->H, a->W, a->C);
}

/* forward: y from x; backward: y = dx from x = dy */
static int augment(eng_cuda *cu, const char *op, const float *x, float *y, const int32_t *params, int N, int H, int W,
                   int C, int backward) {
    READY(cu);
    size_t n = (size_t)N * H * W * C;
    if (!n) return 0;
    DEV(x, n * sizeof *x);
    DEV(y, n * sizeof *y);
    DEV(params, (size_t)N * 3 * sizeof *params);
    LAUNCH(augment, x, y, params, N, H, W, C, backward);
}

int eng_cuda_augment_forward(eng_cuda *cu, const float *x, float *y, const int32_t *params, int N, int H, int W,
                             int C) {
    return augment(cu, __func__, x, y, params, N, H, W, C, 0);
}

int eng_cuda_augment_backward(eng_cuda *cu, const float *dy, const int32_t *params, float *dx, int N, int H, int W,
                              int C) {
    return augment(cu, __func__, dy, dx, params, N, H, W, C, 1);
}

KERNEL(gap, { const float *in; float *out; int N, HW, C, backward; }) {
    if (a->backward) eng_gap_backward(a->in, a->out, a->N, a->HW, a->C);
    else eng_gap_forward(a->in, a->out, a->N, a->HW, a->C);
}

int eng_cuda_gap_forward(eng_cuda *cu, const float *x, float *y, int N, int HW, int C) {
    ENTER(cu);
    if (N <= 0 || C <= 0) return 0;
    DEV(x, (size_t)N * HW * C * sizeof *x);
    DEV(y, (size_t)N * C * sizeof *y);
    LAUNCH(gap, x, y, N, HW, C, 0);
}

int eng_cuda_gap_backward(eng_cuda *cu, const float *dy, float *dx, int N, int HW, int C) {
    ENTER(cu);
    if (N <= 0 || C <= 0 || HW <= 0) return 0;
    DEV(dy, (size_t)N * C * sizeof *dy);
    DEV(dx, (size_t)N * HW * C * sizeof *dx);
    LAUNCH(gap, dy, dx, N, HW, C, 1);
}

/* ---- batch normalisation ---- */

/* the CPU's forward, and mu (the batch means, which the CPU keeps to itself) */
KERNEL(bn_train, { const float *x; float *y; const float *gamma, *beta; float *run_mean, *run_var; float momentum, eps;
                   float *xhat, *mu, *invstd; size_t M; int C; }) {
    size_t M = a->M;
    int C = a->C;
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (size_t m = 0; m < M; m++) s += a->x[m * C + c];
        a->mu[c] = (float)(s / (double)M);
    }
    eng_batchnorm_forward_train(a->x, a->y, a->gamma, a->beta, a->run_mean, a->run_var, a->momentum, a->eps, a->xhat,
                                a->invstd, M, C);
}

int eng_cuda_batchnorm_forward_train(eng_cuda *cu, const float *x, float *y, const float *gamma, const float *beta,
                                     float *run_mean, float *run_var, float momentum, float eps, float *xhat,
                                     float *mu, float *invstd, size_t M, int C) {
    ENTER(cu);
    if (!M || C <= 0) return 0;
    size_t n = M * C * sizeof(float), c = (size_t)C * sizeof(float);
    DEV(x, n);
    DEV(y, n);
    DEV(gamma, c);
    DEV(beta, c);
    DEV(run_mean, c);
    DEV(run_var, c);
    DEV(xhat, n);
    DEV(mu, c);
    DEV(invstd, c);
    LAUNCH(bn_train, x, y, gamma, beta, run_mean, run_var, momentum, eps, xhat, mu, invstd, M, C);
}

KERNEL(bn_eval, { const float *x; float *y; const float *gamma, *beta, *run_mean, *run_var; float eps; size_t M;
                  int C; }) {
    eng_batchnorm_forward_eval(a->x, a->y, a->gamma, a->beta, a->run_mean, a->run_var, a->eps, a->M, a->C);
}

int eng_cuda_batchnorm_forward_eval(eng_cuda *cu, const float *x, float *y, const float *gamma, const float *beta,
                                    const float *run_mean, const float *run_var, float eps, size_t M, int C) {
    ENTER(cu);
    if (!M || C <= 0) return 0;
    size_t n = M * C * sizeof(float), c = (size_t)C * sizeof(float);
    DEV(x, n);
    DEV(y, n);
    DEV(gamma, c);
    DEV(beta, c);
    DEV(run_mean, c);
    DEV(run_var, c);
    LAUNCH(bn_eval, x, y, gamma, beta, run_mean, run_var, eps, M, C);
}

/* the CPU's backward; without dx, into scratch of its own (the device then
 * computes only dgamma and dbeta); k, the device's scratch, is not written */
KERNEL(bn_bwd, { const float *dy, *xhat, *invstd, *gamma; float *dx, *dgamma, *dbeta; size_t M; int C; }) {
    float *dx = a->dx ? a->dx : emu_calloc(a->M * (size_t)a->C, sizeof *dx);
    eng_batchnorm_backward(a->dy, a->xhat, a->invstd, a->gamma, dx, a->dgamma, a->dbeta, a->M, a->C);
    if (dx != a->dx) free(dx);
}

int eng_cuda_batchnorm_backward(eng_cuda *cu, const float *dy, const float *xhat, const float *invstd,
                                const float *gamma, float *dx, float *dgamma, float *dbeta, float *k, size_t M, int C) {
    ENTER(cu);
    if (!M || C <= 0) return 0;
    size_t n = M * C * sizeof(float), c = (size_t)C * sizeof(float);
    DEV(dy, n);
    DEV(xhat, n);
    DEV(invstd, c);
    DEV(gamma, c);
    DEV_OPT(dx, n);
    DEV(dgamma, c);
    DEV(dbeta, c);
    DEV(k, 3 * c);
    LAUNCH(bn_bwd, dy, xhat, invstd, gamma, dx, dgamma, dbeta, M, C);
}

/* ---- dropout, the residual add ---- */

/* ops_misc.c's dropout_bits, from the key the caller drew */
static uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

KERNEL(dropout, { const float *x; float *y, *mask; size_t n; uint64_t key; const uint64_t *dkey; uint32_t thr;
                  float scale; }) {
    uint64_t key = a->dkey ? *a->dkey : a->key;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (size_t i = 0; i < a->n; i++) {
        uint32_t bits = fmix32(fmix32((uint32_t)i * 0x9e3779b9u + k0) ^ k1) >> 8;
        a->mask[i] = bits < a->thr ? a->scale : 0.0f;
        a->y[i] = a->x[i] * a->mask[i];
    }
}

/* the key is key, unless dkey (dev) is given */
static int dropout(eng_cuda *cu, const char *op, const float *x, float *y, float *mask, size_t n, float rate,
                   uint64_t key, const uint64_t *dkey) {
    READY(cu);
    if (!n) return 0;
    DEV(x, n * sizeof *x);
    DEV(y, n * sizeof *y);
    DEV(mask, n * sizeof *mask);
    DEV_OPT(dkey, sizeof *dkey);
    /* the scalars exactly as eng_dropout_forward computes them */
    float keep = 1.0f - rate, scale = rate < 1.0f ? 1.0f / keep : 0.0f;
    LAUNCH(dropout, x, y, mask, n, key, dkey, (uint32_t)((double)keep * 16777216.0), scale);
}

int eng_cuda_dropout_forward(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate, uint64_t key) {
    return dropout(cu, __func__, x, y, mask, n, rate, key, NULL);
}

int eng_cuda_dropout_forward_dev(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate,
                                 const uint64_t *key) {
    return dropout(cu, __func__, x, y, mask, n, rate, 0, key);
}

/* y = x1 * x2 (mul) or x1 + x2, element by element */
KERNEL(binary, { const float *x1, *x2; float *y; size_t n; int mul; }) {
    if (a->mul) eng_dropout_backward(a->x1, a->x2, a->y, a->n);
    else eng_add_forward(a->x1, a->x2, a->y, a->n);
}

static int binary(eng_cuda *cu, const char *op, const float *a, const float *b, float *y, size_t n, int mul) {
    READY(cu);
    if (!n) return 0;
    DEV(a, n * sizeof *a);
    DEV(b, n * sizeof *b);
    DEV(y, n * sizeof *y);
    LAUNCH(binary, a, b, y, n, mul);
}

int eng_cuda_dropout_backward(eng_cuda *cu, const float *dy, const float *mask, float *dx, size_t n) {
    return binary(cu, __func__, dy, mask, dx, n, 1);
}

int eng_cuda_add(eng_cuda *cu, const float *a, const float *b, float *y, size_t n) {
    return binary(cu, __func__, a, b, y, n, 0);
}

/* ---- losses ---- */

/* eng_loss_compute, its sums added to sums (the device's atomics) */
KERNEL(loss, { int loss, fused_act; const float *z; const int32_t *labels; const float *targets; int B, K; float scale;
               const float *dscale; float *dz; double *sums; }) {
    eng_metric_sums s = {0};
    eng_loss_compute(a->loss, a->fused_act, a->z, a->labels, a->targets, a->B, a->K,
                     a->dscale ? a->scale * *a->dscale : a->scale, a->dz, &s);
    a->sums[0] += s.loss;
    a->sums[1] += s.correct;
    a->sums[2] += s.sq;
    a->sums[3] += s.abs;
}

/* scale, times *dscale (dev) when given */
static int loss(eng_cuda *cu, const char *op, int kind, int fused_act, const float *z, const int32_t *labels,
                const float *targets, int B, int K, float scale, const float *dscale, float *dz, double *sums) {
    READY(cu);
    if (B <= 0 || K <= 0) return 0;
    if (kind < ENG_LOSS_SCCE || kind > ENG_LOSS_MAE) return emu_fail(cu, HPO_EINTERNAL, "unknown loss %d", kind);
    if (!labels == !targets) return emu_fail(cu, HPO_EINTERNAL, "loss: exactly one of labels and targets is needed");
    size_t out = (size_t)B * K * sizeof(float);
    DEV(z, out);
    DEV_OPT(labels, (size_t)B * sizeof *labels);
    DEV_OPT(targets, out);
    DEV_OPT(dscale, sizeof *dscale);
    DEV_OPT(dz, out);
    DEV(sums, ENG_CUDA_SUMS * sizeof *sums);
    LAUNCH(loss, kind, fused_act, z, labels, targets, B, K, scale, dscale, dz, sums);
}

int eng_cuda_loss(eng_cuda *cu, int loss_kind, int fused_act, const float *z, const int32_t *labels,
                  const float *targets, int B, int K, float scale, float *dz, double *sums) {
    return loss(cu, __func__, loss_kind, fused_act, z, labels, targets, B, K, scale, NULL, dz, sums);
}

int eng_cuda_loss_scaled(eng_cuda *cu, int loss_kind, int fused_act, const float *z, const int32_t *labels,
                         const float *targets, int B, int K, float scale, const eng_cuda_scaler *s, float *dz,
                         double *sums) {
    return loss(cu, __func__, loss_kind, fused_act, z, labels, targets, B, K, scale, &s->scale, dz, sums);
}

int eng_cuda_sums_add(eng_cuda *cu, const double *sums, size_t n, int K, eng_metric_sums *acc, hpo_error *err) {
    double h[ENG_CUDA_SUMS];
    int rc = eng_cuda_download(cu, h, sums, sizeof h, err);
    if (!rc) eng_cuda_sums_fold(h, n, K, acc);
    return rc;
}

/* ---- gradients, the loss scale, optimisers ---- */

/* optim.cu's norm: each element rounded to fp16 first when round16, then
 * unscaled (by 1 / *scale when scale is given), the squares summed in
 * double; out[1] says whether every element is finite */
KERNEL(grad_norm, { float *g; size_t n; float unscale; const float *scale; int round16; double *out; int device; }) {
    if (a->n && a->device == atomic_load(&nan_device) && atomic_fetch_sub(&nan_countdown, 1) <= 1)
        a->g[0] = NAN; /* on cue */
    float unscale = a->scale ? (float)(1.0 / (double)*a->scale) : a->unscale;
    double sum = 0.0;
    float chk = 0.0f;
    for (size_t i = 0; i < a->n; i++) {
        float v = a->g[i];
        if (a->round16) v = round_fp16(v);
        if (unscale != 1.0f || a->round16) a->g[i] = v = v * unscale;
        sum += (double)v * v;
        chk += v - v; /* NaN if any element is NaN or Inf */
    }
    a->out[0] = sqrt(sum);
    a->out[1] = chk == 0.0f && isfinite(sum) ? 1.0 : 0.0;
}

static int grad_norm(eng_cuda *cu, const char *op, float *g, size_t n, float unscale, const float *scale, int round16,
                     double *out) {
    READY(cu);
    DEV(g, n * sizeof *g);
    DEV_OPT(scale, sizeof *scale);
    DEV(out, 2 * sizeof *out);
    LAUNCH(grad_norm, g, n, unscale, scale, round16, out, cu->device);
}

int eng_cuda_grad_norm(eng_cuda *cu, float *g, size_t n, float unscale, double *out) {
    return grad_norm(cu, __func__, g, n, unscale, NULL, 0, out);
}

int eng_cuda_grad_unscale_norm(eng_cuda *cu, float *g, size_t n, const eng_cuda_scaler *s, double *out) {
    return grad_norm(cu, __func__, g, n, 1.0f, &s->scale, 1, out);
}

/* optim.cu's scaler_k: train.c's bookkeeping of a mixed_fp16 step */
KERNEL(scaler, { const double *norm; eng_cuda_scaler *s; int growth_interval; float max_scale; }) {
    eng_cuda_scaler_step(a->s, a->norm[1] != 0.0, a->growth_interval, a->max_scale);
}

int eng_cuda_scaler_update(eng_cuda *cu, const double *norm, eng_cuda_scaler *s, int growth_interval,
                           float max_scale) {
    ENTER(cu);
    DEV(norm, 2 * sizeof *norm);
    DEV(s, sizeof *s);
    LAUNCH(scaler, norm, s, growth_interval, max_scale);
}

/* optim.cu's optim_k: the step's scalars hs, unless st.sc (dev) is given
 * (entry *st.sc_index of a table st.sc_stride bytes apart when st.sc_index
 * is); clipping and the non-finite skip from st.norm, counted in
 * st.skipped; the copies st.p16 and st.ph written as the parameters are */
KERNEL(optim, { eng_optim_config c; eng_cuda_opt_scalars hs; eng_cuda_step_args st; float *p, *g, *state; size_t n;
                int fp16; }) {
    const eng_optim_config *c = &a->c;
    const double *norm = a->st.norm;
    float k = 1.0f;
    if (norm) {
        if (norm[1] == 0.0) { /* gradients not finite: no update, counted */
            if (a->st.skipped) *a->st.skipped += 1.0;
            return;
        }
        if (c->clipnorm > 0.0f && norm[0] > c->clipnorm) k = (float)(c->clipnorm / norm[0]);
    }
    const eng_cuda_opt_scalars *ds = a->st.sc;
    if (ds && a->st.sc_index)
        ds = (const eng_cuda_opt_scalars *)(const void *)((const char *)ds + (size_t)*a->st.sc_index * a->st.sc_stride);
    const eng_cuda_opt_scalars sc = ds ? *ds : a->hs;
    const float lr = sc.lr, mu = c->momentum, wd = c->weight_decay;
    size_t per = eng_optim_state_floats(c);
    float *s0 = per >= 1 ? a->state : NULL, *s1 = per >= 2 ? a->state + a->n : NULL;
    for (size_t i = 0; i < a->n; i++) {
        float gi = a->g[i];
        if (k != 1.0f) a->g[i] = gi = gi * k;
        float pi = a->p[i];
        switch (c->kind) {
        case ENG_OPT_SGD:
            if (wd != 0.0f) gi = gi + wd * pi;
            if (mu != 0.0f) {
                float v = mu * s0[i] + gi;
                s0[i] = v;
                pi -= lr * (c->nesterov ? gi + mu * v : v);
            } else {
                pi -= lr * gi;
            }
            break;
        case ENG_OPT_RMSPROP: {
            if (wd != 0.0f) gi = gi + wd * pi;
            float s = c->rho * s0[i] + (1.0f - c->rho) * gi * gi;
            s0[i] = s;
            float u = gi / (sqrtf(s) + c->eps);
            if (mu != 0.0f) {
                u = mu * s1[i] + u;
                s1[i] = u;
            }
            pi -= lr * u;
            break;
        }
        default: { /* adam, adamw */
            gi += sc.adam.l2 * pi;
            float m = c->beta1 * s0[i] + (1.0f - c->beta1) * gi;
            float v = c->beta2 * s1[i] + (1.0f - c->beta2) * gi * gi;
            s0[i] = m;
            s1[i] = v;
            pi = pi * sc.adam.decay - sc.adam.a * m / (sqrtf(v) + sc.adam.e);
            break;
        }
        }
        a->p[i] = pi;
        if (a->st.p16) a->st.p16[i] = to_h16(pi, a->fp16);
        if (a->st.ph) a->st.ph[i] = round_fp16(pi);
    }
}

static int optim(eng_cuda *cu, const char *op, const eng_optim_config *c, const eng_cuda_opt_scalars *hs,
                 const eng_cuda_step_args *st, float *p, float *g, float *state, size_t n) {
    READY(cu);
    if (!n) return 0;
    if (c->kind < ENG_OPT_SGD || c->kind > ENG_OPT_ADAMW)
        return emu_fail(cu, HPO_EINTERNAL, "unknown optimiser %d", c->kind);
    DEV(p, n * sizeof *p);
    DEV(g, n * sizeof *g);
    DEV(state, eng_optim_state_floats(c) * n * sizeof *state);
    DEV_OPT(st->norm, 2 * sizeof *st->norm);
    DEV_OPT(st->skipped, sizeof *st->skipped);
    DEV_OPT(st->sc, sizeof *st->sc);
    DEV_OPT(st->sc_index, sizeof *st->sc_index);
    DEV_OPT(st->p16, n * sizeof *st->p16);
    DEV_OPT(st->ph, n * sizeof *st->ph);
    LAUNCH(optim, *c, *hs, *st, p, g, state, n, cu->fp16);
}

int eng_cuda_optim_step(eng_cuda *cu, const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                        size_t n, const double *norm) {
    eng_cuda_opt_scalars hs;
    eng_cuda_opt_scalars_at(c, lr, t, &hs);
    eng_cuda_step_args st;
    memset(&st, 0, sizeof st);
    st.norm = norm;
    return optim(cu, __func__, c, &hs, &st, p, g, state, n);
}

int eng_cuda_optim_step_dev(eng_cuda *cu, const eng_optim_config *c, const eng_cuda_step_args *a, float *p, float *g,
                            float *state, size_t n) {
    if (!a->sc) return emu_fail(cu, HPO_EINTERNAL, "optimiser step: no scalars");
    eng_cuda_opt_scalars unused;
    memset(&unused, 0, sizeof unused);
    return optim(cu, __func__, c, &unused, a, p, g, state, n);
}

/* ---- steps staged from device memory ---- */

/* steps.cu's stage_k: from step s = *cursor, the rows of steps s ..
 * s+steps-1 that the order has, and their records */
KERNEL(stage, { const uint32_t *order; size_t rows; int bs; const char *recs; size_t rec_bytes; const int32_t *cursor;
                int steps; uint32_t *idx; void *rec; }) {
    size_t s = (size_t)*a->cursor, first = s * (size_t)a->bs, n = (size_t)a->steps * (size_t)a->bs;
    if (first >= a->rows) n = 0;
    else if (n > a->rows - first) n = a->rows - first;
    memcpy(a->idx, a->order + first, n * sizeof *a->idx);
    memcpy(a->rec, a->recs + s * a->rec_bytes, (size_t)a->steps * a->rec_bytes);
}

int eng_cuda_stage_steps(eng_cuda *cu, const uint32_t *order, size_t rows, int bs, const void *recs, size_t rec_bytes,
                         const int32_t *cursor, int steps, uint32_t *idx, void *rec) {
    ENTER(cu);
    if (steps < 1 || bs < 1 || rec_bytes % 8)
        return emu_fail(cu, HPO_EINTERNAL, "stage: %d steps of %d rows, records of %zu bytes", steps, bs, rec_bytes);
    DEV(order, rows * sizeof *order);
    DEV(recs, rec_bytes);
    DEV(cursor, sizeof *cursor);
    DEV(idx, (size_t)steps * (size_t)bs * sizeof *idx);
    DEV(rec, (size_t)steps * rec_bytes);
    LAUNCH(stage, order, rows, bs, recs, rec_bytes, cursor, steps, idx, rec);
}

KERNEL(advance, { int32_t *cursor; int steps; }) { *a->cursor += a->steps; }

int eng_cuda_cursor_advance(eng_cuda *cu, int32_t *cursor, int steps) {
    ENTER(cu);
    DEV(cursor, sizeof *cursor);
    LAUNCH(advance, cursor, steps);
}

/* ---- data parallel: NCCL's all-reduce as a host sum ---- */

struct eng_cuda_comm {
    int n;
    eng_cuda *cus[ENG_CUDA_MAX_REPLICAS];
};

/* NCCL's hang: a member's wait, or the group's finalize, after a peer
 * failed (its part of an all-reduce never runs) and before an abort */
static void group_wait_check(const struct eng_cuda_comm *c, const char *what) {
    for (int k = 0; k < c->n; k++)
        if (c->cus[k]->rc) {
            fprintf(stderr, "cuda_emulated: %s would hang on the device: cuda:%d of the all-reduce group failed (%s) "
                    "and the group was not aborted (eng_cuda_comm_abort)\n", what, c->cus[k]->device,
                    c->cus[k]->err.message);
            abort();
        }
}

static void group_leave(eng_cuda_comm *c) {
    for (int k = 0; k < c->n; k++) c->cus[k]->comm = NULL;
    free(c);
}

int eng_cuda_comm_open(eng_cuda *const *cus, int n, eng_cuda_comm **out, hpo_error *err) {
    if (n < 2 || n > ENG_CUDA_MAX_REPLICAS)
        return hpo_fail(err, HPO_EINVAL, "devices", "an all-reduce group spans 2 to %d GPUs, not %d",
                        ENG_CUDA_MAX_REPLICAS, n);
    for (int k = 0; k < n; k++)
        for (int j = 0; j < k; j++)
            if (cus[j]->device == cus[k]->device)
                return hpo_fail(err, HPO_EINVAL, "devices",
                                "cuda:%d twice in an all-reduce group (NCCL needs one rank per GPU)", cus[k]->device);
    eng_cuda_comm *c = emu_calloc(1, sizeof *c);
    c->n = n;
    for (int k = 0; k < n; k++) c->cus[k] = cus[k], cus[k]->comm = c;
    *out = c;
    return 0;
}

void eng_cuda_comm_free(eng_cuda_comm *c) {
    if (!c) return;
    group_wait_check(c, "eng_cuda_comm_free (ncclCommFinalize)");
    group_leave(c);
}

/* the emulated all-reduce is a host sum that has finished when its call
 * returns: nothing is in flight to abort, only the group to leave */
void eng_cuda_comm_abort(eng_cuda_comm *c) {
    if (c) group_leave(c);
}

int eng_cuda_allreduce_sum(eng_cuda_comm *c, eng_cuda *const *cus, float *const *bufs, size_t n) {
    for (int k = 0; k < c->n; k++) {
        eng_cuda *cu = cus[k];
        READY(cu);
        if (cu->capturing) return emu_fail(cu, HPO_EINTERNAL, "the emulation does not capture all-reduces");
        if (dev_bad(cu, __func__, "bufs[k]", bufs[k], n * sizeof(float))) return cu->rc;
    }
    for (size_t i = 0; i < n; i++) {
        float s = bufs[0][i];
        for (int k = 1; k < c->n; k++) s += bufs[k][i];
        for (int k = 0; k < c->n; k++) bufs[k][i] = s;
    }
    return 0;
}

/* ---- graphs ---- */

int eng_cuda_capture_begin(eng_cuda *cu, hpo_error *err) {
    if (!cu->rc && cu->capturing) emu_fail(cu, HPO_EINTERNAL, "capture: the stream is capturing already");
    if (!cu->rc) cu->capturing = 1;
    if (cu->rc && err) *err = cu->err;
    return cu->rc;
}

int eng_cuda_capture_end(eng_cuda *cu, eng_cuda_graph **out, hpo_error *err) {
    /* ends the capture even after a failed op, so the context is usable again */
    emu_nodes nodes = cu->capture;
    int was = cu->capturing;
    memset(&cu->capture, 0, sizeof cu->capture);
    cu->capturing = 0;
    if (!was) emu_fail(cu, HPO_EINTERNAL, "end of capture: the stream is not capturing (cudaErrorIllegalState)");
    if (cu->rc) {
        nodes_free(&nodes);
        if (err) *err = cu->err;
        return cu->rc;
    }
    eng_cuda_graph *g = emu_calloc(1, sizeof *g);
    g->device = cu->device;
    g->nodes = nodes;
    *out = g;
    return 0;
}

int eng_cuda_graph_launch(eng_cuda *cu, eng_cuda_graph *g) {
    READY(cu);
    if (g->device != cu->device)
        return emu_fail(cu, HPO_EINTERNAL, "cudaGraphLaunch: the graph was captured on cuda:%d", g->device);
    if (cu->capturing) return emu_fail(cu, HPO_EINTERNAL, "the emulation does not capture graph launches");
    for (size_t i = 0; i < g->nodes.n; i++) g->nodes.at[i].run(g->nodes.at[i].args);
    return 0;
}

void eng_cuda_graph_free(eng_cuda_graph *g) {
    if (!g) return;
    nodes_free(&g->nodes);
    free(g);
}
