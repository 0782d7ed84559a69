/* gpu_cuda.cu - gpu.h with the CUDA runtime (see gpu.h). Compiled by nvcc
 * only when CMake enabled CUDA; gpu_none.c stands in otherwise. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "gpu.h"
}

#ifndef HPO_CUDA_ARCHS
#define HPO_CUDA_ARCHS "?"
#endif

extern "C" int eng_gpu_built(void) { return 1; }

extern "C" void eng_gpu_describe(char *buf, size_t n) {
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    int len = snprintf(buf, n, "CUDA runtime %d.%d (built for %s)", rt / 1000, rt % 1000 / 10, HPO_CUDA_ARCHS);
    if (len < 0 || (size_t)len >= n) return;
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        snprintf(buf + len, n - (size_t)len, ", driver %d.%d", drv / 1000, drv % 1000 / 10);
    else
        snprintf(buf + len, n - (size_t)len, ", no driver");
}

extern "C" int eng_gpu_count(int *n, hpo_error *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    *n = 0;
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error for later calls */
        return hpo_fail(err, HPO_EUNSUPPORTED, "devices", "no CUDA device: %s (%s)", cudaGetErrorString(e),
                        cudaGetErrorName(e));
    }
    if (count < 1) return hpo_fail(err, HPO_EUNSUPPORTED, "devices", "no CUDA device: the runtime sees none");
    *n = count;
    return 0;
}

extern "C" int eng_gpu_info_get(int i, eng_gpu_info *out, hpo_error *err) {
    int n = 0;
    int rc = eng_gpu_count(&n, err);
    if (rc) return rc;
    if (i < 0 || i >= n) return hpo_fail(err, HPO_EINVAL, "devices", "cuda:%d: this machine has %d CUDA device(s)", i, n);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not the thread's next launch's error (cu_launched) */
        return hpo_fail(err, HPO_EUNSUPPORTED, "devices", "cuda:%d: %s", i, cudaGetErrorString(e));
    }
    memset(out, 0, sizeof *out);
    out->index = i;
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->total_bytes = p.totalGlobalMem;
    out->multiprocessors = p.multiProcessorCount;
    return 0;
}

extern "C" int eng_gpu_memory(int i, size_t *used, size_t *total, hpo_error *err) {
    int n = 0;
    int rc = eng_gpu_count(&n, err);
    if (rc) return rc;
    if (i < 0 || i >= n) return hpo_fail(err, HPO_EINVAL, "devices", "cuda:%d: this machine has %d CUDA device(s)", i, n);
    size_t fr = 0, tot = 0;
    int prev = -1; /* the calling thread's device, given back: /metrics asks from an HTTP thread */
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess) e = cudaSetDevice(i);
    if (e == cudaSuccess) e = cudaMemGetInfo(&fr, &tot);
    if (prev >= 0 && prev != i) cudaSetDevice(prev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hpo_fail(err, HPO_EUNSUPPORTED, "devices", "cuda:%d: %s", i, cudaGetErrorString(e));
    }
    *used = tot - fr;
    *total = tot;
    return 0;
}
