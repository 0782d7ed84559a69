/* ctx.cu - the eng_cuda context: device, stream, cuBLASLt, memory, copies,
 * sticky errors and graph capture (see cuda_ops.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

extern "C" {
#include "gpu.h"
}

int cu_fail(eng_cuda *cu, int rc, const char *fmt, ...) {
    if (cu->rc) return cu->rc;
    cu->rc = rc;
    snprintf(cu->err.field, sizeof cu->err.field, "devices");
    va_list ap;
    va_start(ap, fmt);
    int len = snprintf(cu->err.message, sizeof cu->err.message, "cuda:%d: ", cu->device);
    if (len > 0 && (size_t)len < sizeof cu->err.message)
        vsnprintf(cu->err.message + len, sizeof cu->err.message - (size_t)len, fmt, ap);
    va_end(ap);
    return rc;
}

/* the errors after which the process's context on the GPU is unusable:
 * every later call on that GPU (any slot's) fails until the process ends */
static int cu_context_lost(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable: return 1;
    default: return 0;
    }
}

int cu_check(eng_cuda *cu, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    if (cu_context_lost(e)) eng_gpu_mark_lost(cu->device);
    return cu_fail(cu, e == cudaErrorMemoryAllocation ? HPO_ENOMEM : HPO_EINTERNAL, "%s: %s (%s)%s", what,
                   cudaGetErrorString(e), cudaGetErrorName(e),
                   cu_context_lost(e) ? "; the GPU's context is lost for this process: its slots take no more jobs until hpod restarts" : "");
}

int cu_launched(eng_cuda *cu, const char *what) { return cu_check(cu, cudaGetLastError(), what); }

extern "C" int eng_cuda_open(int device, int allow_tf32, eng_cuda **out, hpo_error *err) {
    int n = 0;
    int rc = eng_gpu_count(&n, err);
    if (rc) return rc;
    if (device < 0 || device >= n)
        return hpo_fail(err, HPO_EINVAL, "devices", "cuda:%d: this machine has %d CUDA device(s)", device, n);
    eng_cuda *cu = (eng_cuda *)calloc(1, sizeof *cu);
    if (!cu) return hpo_fail(err, HPO_ENOMEM, "devices", "out of memory");
    cu->device = device;
    cu->allow_tf32 = allow_tf32;
    cublasStatus_t st;
    if (cu_check(cu, cudaSetDevice(device), "cudaSetDevice") ||
        cu_check(cu, cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
        cu_check(cu, cudaMalloc(&cu->workspace, CU_WORKSPACE), "the cuBLASLt workspace") ||
        cu_check(cu, cudaMalloc((void **)&cu->scratch, CU_SCRATCH * sizeof(double)), "the reduction scratch"))
        goto fail;
    {
        const char *why;
        if (!(cu->blas = cu_lt(&why))) {
            cu_fail(cu, HPO_EUNSUPPORTED, "%s", why);
            goto fail;
        }
    }
    st = cu->blas->Create(&cu->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cu_fail(cu, HPO_EINTERNAL, "cublasLtCreate: %s", cu->blas->GetStatusString(st));
        goto fail;
    }
    *out = cu;
    return 0;
fail:
    rc = cu->rc;
    if (err) *err = cu->err;
    eng_cuda_close(cu);
    return rc;
}

extern "C" void eng_cuda_set_fp16(eng_cuda *cu, int fp16) { cu->half_fp16 = fp16 != 0; }

extern "C" void eng_cuda_close(eng_cuda *cu) {
    if (!cu) return;
    cu_use(cu);
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    if (cu->lt) cu->blas->Destroy(cu->lt);
    cudaFree(cu->workspace);
    cudaFree(cu->scratch);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    cudaGetLastError(); /* a closing context leaves no error behind for the thread */
    free(cu);
}

extern "C" int eng_cuda_sync(eng_cuda *cu, hpo_error *err) {
    /* drained even after a failure: the caller frees the buffers of the
     * work enqueued before it (cudaFree only "may" synchronise) */
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    if (!cu->rc) cu_check(cu, e, "a kernel failed");
    if (cu->rc && err) *err = cu->err;
    return cu->rc;
}

extern "C" int eng_cuda_alloc(eng_cuda *cu, size_t bytes, void **out, hpo_error *err) {
    void *p = NULL;
    cu_use(cu);
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) { /* not sticky: the context stays usable */
        cudaGetLastError();
        return hpo_fail(err, HPO_ENOMEM, "devices", "cuda:%d: out of device memory (%zu bytes asked)", cu->device,
                        bytes);
    }
    if (cu_check(cu, e, "cudaMalloc")) {
        if (err) *err = cu->err;
        return cu->rc;
    }
    *out = p;
    return 0;
}

extern "C" void eng_cuda_free(eng_cuda *cu, void *p) {
    if (!p) return;
    cu_use(cu); /* one thread may drive several GPUs (replicas): free on the buffer's */
    if (cudaFree(p) != cudaSuccess) cudaGetLastError(); /* not the thread's next launch's error */
}

static int copy_sync(eng_cuda *cu, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, hpo_error *err) {
    cu_use(cu);
    if (!cu->rc && bytes) cu_check(cu, cudaMemcpyAsync(dst, src, bytes, kind, cu->stream), "cudaMemcpy");
    return eng_cuda_sync(cu, err);
}

extern "C" int eng_cuda_upload(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err) {
    return copy_sync(cu, dst, src, bytes, cudaMemcpyHostToDevice, err);
}

extern "C" int eng_cuda_download(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err) {
    return copy_sync(cu, dst, src, bytes, cudaMemcpyDeviceToHost, err);
}

extern "C" int eng_cuda_zero(eng_cuda *cu, void *p, size_t bytes) {
    CU_READY(cu);
    return bytes ? cu_check(cu, cudaMemsetAsync(p, 0, bytes, cu->stream), "cudaMemset") : 0;
}

extern "C" int eng_cuda_copy(eng_cuda *cu, void *dst, const void *src, size_t bytes) {
    CU_READY(cu);
    if (!bytes || dst == src) return 0;
    return cu_check(cu, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu->stream), "cudaMemcpy");
}

/* ---- graphs ---- */

extern "C" int eng_cuda_capture_begin(eng_cuda *cu, hpo_error *err) {
    cu_use(cu);
    if (!cu->rc) cu_check(cu, cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal), "capture");
    if (cu->rc && err) *err = cu->err;
    return cu->rc;
}

extern "C" int eng_cuda_capture_end(eng_cuda *cu, eng_cuda_graph **out, hpo_error *err) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    /* ends the capture even after a failed op, so the stream is usable again */
    cudaError_t e = cudaStreamEndCapture(cu->stream, &g);
    if (!cu->rc) cu_check(cu, e, "end of capture");
    if (!cu->rc) cu_check(cu, cudaGraphInstantiate(&x, g, 0), "cudaGraphInstantiate");
    if (cu->rc) {
        if (g) cudaGraphDestroy(g);
        if (err) *err = cu->err;
        return cu->rc;
    }
    eng_cuda_graph *gr = (eng_cuda_graph *)calloc(1, sizeof *gr);
    if (!gr) {
        cudaGraphExecDestroy(x);
        cudaGraphDestroy(g);
        return hpo_fail(err, HPO_ENOMEM, "devices", "out of memory");
    }
    gr->graph = g;
    gr->exec = x;
    *out = gr;
    return 0;
}

extern "C" int eng_cuda_graph_launch(eng_cuda *cu, eng_cuda_graph *g) {
    CU_READY(cu);
    return cu_check(cu, cudaGraphLaunch(g->exec, cu->stream), "cudaGraphLaunch");
}

extern "C" void eng_cuda_graph_free(eng_cuda_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}
