/* gpu_none.c - gpu.h in a build without the CUDA backend (HPO_CUDA=OFF, or
 * no nvcc found): no device is usable, and every answer says why. */
#include <stdio.h>

#include "gpu.h"

int eng_gpu_built(void) { return 0; }

void eng_gpu_describe(char *buf, size_t n) { snprintf(buf, n, "CUDA backend not built (HPO_CUDA=OFF or no nvcc)"); }

int eng_gpu_count(int *n, hpo_error *err) {
    *n = 0;
    return hpo_fail(err, HPO_EUNSUPPORTED, "devices",
                    "no CUDA device: hpod was built without CUDA (configure with nvcc on the PATH or "
                    "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)");
}

int eng_gpu_info_get(int i, eng_gpu_info *out, hpo_error *err) {
    (void)i, (void)out;
    int n;
    return eng_gpu_count(&n, err);
}

int eng_gpu_memory(int i, size_t *used, size_t *total, hpo_error *err) {
    (void)i, (void)used, (void)total;
    int n;
    return eng_gpu_count(&n, err);
}
