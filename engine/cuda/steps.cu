/* steps.cu - the next training steps staged from device memory (see
 * cuda_ops.h): the batch rows of an epoch's order and the per-step records
 * (learning rate, Adam's scalars, dropout keys) copied into fixed buffers
 * from a step cursor that lives on the device, and the cursor's advance.
 * A captured graph of K steps begins with the stage and ends with the
 * advance, so each replay trains the next K steps with nothing from the
 * host but the launch. */
#include "cuda_internal.h"

/* idx: thread i of the grid copies order[s * bs + i] for i < the rows left;
 * rec: 8-byte words, the same threads */
static __global__ void stage_k(const uint32_t *order, size_t rows, int bs, const uint64_t *recs, size_t rec_words,
                               const int32_t *cursor, int steps, uint32_t *idx, uint64_t *rec) {
    size_t s = (size_t)*cursor, first = s * (size_t)bs;
    size_t n = (size_t)steps * (size_t)bs;
    if (first >= rows) n = 0;
    else if (n > rows - first) n = rows - first;
    size_t words = (size_t)steps * rec_words;
    const uint64_t *from = recs + s * rec_words;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n || i < words;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i < n) idx[i] = order[first + i];
        if (i < words) rec[i] = from[i];
    }
}

extern "C" int eng_cuda_stage_steps(eng_cuda *cu, const uint32_t *order, size_t rows, int bs, const void *recs,
                                    size_t rec_bytes, const int32_t *cursor, int steps, uint32_t *idx, void *rec) {
    CU_READY(cu);
    if (steps < 1 || bs < 1 || rec_bytes % 8)
        return cu_fail(cu, HPO_EINTERNAL, "stage: %d steps of %d rows, records of %zu bytes", steps, bs, rec_bytes);
    size_t words = (size_t)steps * (rec_bytes / 8), n = (size_t)steps * (size_t)bs;
    stage_k<<<cu_grid(n > words ? n : words), CU_THREADS, 0, cu->stream>>>(
        order, rows, bs, (const uint64_t *)recs, rec_bytes / 8, cursor, steps, idx, (uint64_t *)rec);
    return cu_launched(cu, "stage steps");
}

static __global__ void advance_k(int32_t *cursor, int steps) { *cursor += steps; }

extern "C" int eng_cuda_cursor_advance(eng_cuda *cu, int32_t *cursor, int steps) {
    CU_READY(cu);
    advance_k<<<1, 1, 0, cu->stream>>>(cursor, steps);
    return cu_launched(cu, "cursor advance");
}
