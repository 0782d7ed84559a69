/* backend_cpu.c - the CPU op table: OpenBLAS sgemm for f32 GEMM, oneDNN
 * (dnnl_ops.c) for bf16 GEMM and for convolutions, thread and MXCSR control
 * (see backend.h). */
#include <cblas.h>
#include <stdatomic.h>
#include <xmmintrin.h>

#include "backend.h"
#include "hpo.h"

/* OpenBLAS extension, declared in its cblas.h on Debian but not everywhere */
void openblas_set_num_threads(int num_threads);

static void cpu_gemm_f32(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* sgemm with k == 0 only scales C */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, a, lda, b, ldb, beta, c, ldc);
}

static int cpu_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                         const uint16_t *b, int ldb, float beta, float *c, int ldc, const float *bias) {
    return eng_dnnl_gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
}

static eng_dnnl_type dnnl_type(eng_dtype dt) { return dt == ENG_BF16 ? ENG_DNNL_BF16 : ENG_DNNL_F32; }

static int cpu_conv_fwd(const eng_conv2d_shape *s, eng_dtype dt, const void *x, const void *w,
                        const float *bias, float *y) {
    return eng_dnnl_conv2d_forward(s, dnnl_type(dt), x, w, bias, y);
}

static int cpu_conv_bwd_data(const eng_conv2d_shape *s, eng_dtype dt, const void *dy, const void *w,
                             float *dx) {
    return eng_dnnl_conv2d_backward_data(s, dnnl_type(dt), dy, w, dx);
}

static int cpu_conv_bwd_weights(const eng_conv2d_shape *s, eng_dtype dt, const void *x, const void *dy,
                                float *dw, float *db) {
    return eng_dnnl_conv2d_backward_weights(s, dnnl_type(dt), x, dy, dw, db);
}

static void cpu_set_threads(int threads) {
    if (threads < 1) threads = 1;
    openblas_set_num_threads(threads);
    (void)eng_dnnl_set_num_threads(threads);
}

/* The table, with or without bf16: without where oneDNN cannot run it (an
 * AVX2 CPU, or ONEDNN_MAX_CPU_ISA below AVX-512), so that mixed_bf16 is
 * refused up front (train.c) instead of failing inside oneDNN. */
#define CPU_BACKEND(bf16_gemm)                                                                                 \
    {                                                                                                          \
        .name = "cpu", .gemm_f32 = cpu_gemm_f32, .gemm_bf16 = (bf16_gemm), .conv2d_forward = cpu_conv_fwd,     \
        .conv2d_backward_data = cpu_conv_bwd_data, .conv2d_backward_weights = cpu_conv_bwd_weights,            \
        .set_threads = cpu_set_threads,                                                                        \
    }
static const eng_backend cpu_backend = CPU_BACKEND(cpu_gemm_bf16), cpu_backend_no_bf16 = CPU_BACKEND(NULL);

const eng_backend *eng_backend_cpu(void) {
    static _Atomic(const eng_backend *) chosen;
    const eng_backend *b = atomic_load_explicit(&chosen, memory_order_acquire);
    if (!b) {
        b = eng_dnnl_bf16_usable() ? &cpu_backend : &cpu_backend_no_bf16;
        atomic_store_explicit(&chosen, b, memory_order_release);
    }
    return b;
}

unsigned eng_set_ftz_daz(void) {
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return old;
}

void eng_restore_mxcsr(unsigned mxcsr) { _mm_setcsr(mxcsr); }
