/*
 * gpu.h - the CUDA devices this hpod can use: whether the build has the
 * CUDA backend, which runtime, and what the machine's GPUs are.
 *
 * Design notes
 * - The interface is plain C and the same in every build: gpu_cuda.cu
 *   implements it with the CUDA runtime (linked statically, so hpod needs
 *   only the driver where it runs) when CMake found nvcc (HPO_CUDA=auto or
 *   ON); gpu_none.c answers "built without CUDA" otherwise. Callers never
 *   need #ifdefs.
 * - Nothing here trains: this is the device query that --devices and
 *   --version use. A machine without a GPU (or without its driver) is an
 *   ordinary answer, HPO_EUNSUPPORTED with "no CUDA device: <the runtime's
 *   reason>", never a crash.
 * - Thread-safe: every call asks the runtime afresh (eng_gpu_lost reads
 *   an atomic flag).
 */
#ifndef ENG_GPU_H
#define ENG_GPU_H

#include <stddef.h>

#include "hpo.h"

typedef struct eng_gpu_info {
    int index;
    char name[96];        /* "NVIDIA H100 80GB HBM3" */
    int cc_major, cc_minor; /* compute capability */
    size_t total_bytes;   /* device memory */
    int multiprocessors;
} eng_gpu_info;

/* 1 if this build has the CUDA backend. */
int eng_gpu_built(void);
/* A line naming the backend for --version: "CUDA runtime 13.0 (built for
 * sm_80 sm_90), driver 13.0" / "... no driver" / "not built". */
void eng_gpu_describe(char *buf, size_t n);
/* The number of CUDA devices (>= 1), or HPO_EUNSUPPORTED with the reason
 * ("no CUDA device: ...", "hpod was built without CUDA ..."). */
int eng_gpu_count(int *n, hpo_error *err);
/* Device i's properties; HPO_EINVAL naming "devices" for a bad index. */
int eng_gpu_info_get(int i, eng_gpu_info *out, hpo_error *err);
/* Device i's memory in use (by every process: total - free) and its total,
 * for /metrics. Asks through this process's context on the device
 * (cudaMemGetInfo), which its first call creates when no trial has yet
 * (the context a slot's first trial would create anyway: /metrics asks
 * only about GPUs that have slots); the calling thread's current device is
 * left as it was. */
int eng_gpu_memory(int i, size_t *used, size_t *total, hpo_error *err);

/* 1 once this process has lost its context on GPU i: a call on it failed
 * with an error the CUDA runtime never recovers from (an illegal address,
 * a launch failure or timeout, a device-side assert, an uncorrectable ECC
 * error...), after which every call on that GPU fails until the process
 * ends. The worker pool gives such a GPU's slots no more jobs and /metrics
 * says so (hpo_gpu_lost); the other slots go on. 0 otherwise, and for an
 * index out of range. Same in every build (gpu_lost.c). */
int eng_gpu_lost(int i);
/* Records that (engine/cuda's error check; the host emulation of the
 * tests on an illegal address). */
void eng_gpu_mark_lost(int i);

#endif
