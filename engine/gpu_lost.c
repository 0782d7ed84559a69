/* gpu_lost.c - the GPUs this process has lost (gpu.h: eng_gpu_lost), in
 * every build: the CUDA backend (engine/cuda/ctx.cu) marks one when a call
 * on it fails with an error its context never recovers from, the worker
 * pool and /metrics read them. */
#include <stdatomic.h>

#include "gpu.h"

#define LOST_MAX_GPUS 64

static atomic_int lost[LOST_MAX_GPUS];

void eng_gpu_mark_lost(int i) {
    if (i >= 0 && i < LOST_MAX_GPUS) atomic_store(&lost[i], 1);
}

int eng_gpu_lost(int i) { return i >= 0 && i < LOST_MAX_GPUS && atomic_load(&lost[i]); }
