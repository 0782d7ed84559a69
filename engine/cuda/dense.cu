/* dense.cu - dense layers on the device: cuBLASLt GEMMs with the bias (and
 * relu) fused as epilogues, the other activations and the bias gradient as
 * kernels (see cuda_ops.h).
 *
 * Row-major [B][I] x [I][O] is column-major O x B = (O x I)(I x B), so every
 * GEMM below is written in cuBLASLt's column-major terms on the row-major
 * buffers unchanged (the derivations are beside each call). cuBLASLt's
 * heuristic assumes 256-byte aligned pointers unless told otherwise; a
 * layer's weights sit at any float offset of the parameter block, so each
 * call states the real alignment of its pointers. The bias epilogue is used
 * only with a 16-byte aligned bias; otherwise (or when no algorithm offers
 * the epilogue) the GEMM runs plain and a kernel adds the bias. */
#include "cuda_internal.h"

extern "C" {
#include "ops.h"
}

static uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

#define LT(call)                                                                        \
    do {                                                                                \
        cublasStatus_t st_ = (call);                                                    \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                             \
            rc = cu_fail(cu, HPO_EINTERNAL, "%s: %s", #call, cu->blas->GetStatusString(st_)); \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

/* C[m][n] (column-major, ldc, f32) = op(A) op(B) (+ bias[m], relu per epi).
 * ab: CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F. *used_epi = 0 when no algorithm took the
 * epilogue and the product was not computed (the caller falls back). */
static int lt_gemm(eng_cuda *cu, cudaDataType_t ab, int ta, int tb, int m, int n, int k, const void *A, int lda,
                   const void *B, int ldb, float *C, int ldc, cublasLtEpilogue_t epi, const float *bias,
                   int *used_epi) {
    int rc = 0, nres = 0;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    cublasComputeType_t ct = ab == CUDA_R_32F && cu->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t bias_t = CUDA_R_32F;
    uint64_t ws = CU_WORKSPACE;
    uint32_t al_a = align_of(A), al_b = align_of(B), al_c = align_of(C);
    const float one = 1.0f, zero = 0.0f;
    if (used_epi) *used_epi = 1;
    LT(cu->blas->MatmulDescCreate(&op, ct, CUDA_R_32F));
    LT(cu->blas->MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cu->blas->MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        LT(cu->blas->MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (bias) {
            LT(cu->blas->MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
            LT(cu->blas->MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t));
        }
    }
    LT(cu->blas->MatrixLayoutCreate(&la, ab, ta ? k : m, ta ? m : k, lda));
    LT(cu->blas->MatrixLayoutCreate(&lb, ab, tb ? n : k, tb ? k : n, ldb));
    LT(cu->blas->MatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc));
    LT(cu->blas->MatmulPreferenceCreate(&pref));
    LT(cu->blas->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT(cu->blas->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    LT(cu->blas->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    LT(cu->blas->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    LT(cu->blas->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
    {
        cublasStatus_t st = cu->blas->MatmulAlgoGetHeuristic(cu->lt, op, la, lb, lc, lc, pref, 1, &res, &nres);
        if ((st != CUBLAS_STATUS_SUCCESS || nres < 1) && epi != CUBLASLT_EPILOGUE_DEFAULT && used_epi) {
            *used_epi = 0; /* the caller computes it without the epilogue */
            goto done;
        }
        if (st != CUBLAS_STATUS_SUCCESS || nres < 1) {
            rc = cu_fail(cu, HPO_EINTERNAL, "cuBLASLt has no algorithm for %dx%dx%d (%s)", m, n, k,
                         cu->blas->GetStatusString(st));
            goto done;
        }
    }
    LT(cu->blas->Matmul(cu->lt, op, &one, A, la, B, lb, &zero, C, lc, C, lc, &res.algo, cu->workspace, CU_WORKSPACE,
                      cu->stream));
done:
    if (pref) cu->blas->MatmulPreferenceDestroy(pref);
    if (lc) cu->blas->MatrixLayoutDestroy(lc);
    if (lb) cu->blas->MatrixLayoutDestroy(lb);
    if (la) cu->blas->MatrixLayoutDestroy(la);
    if (op) cu->blas->MatmulDescDestroy(op);
    return rc;
}

/* z[r][j] += b[j] */
static __global__ void bias_k(const float *b, float *z, int B, int O) {
    size_t n = (size_t)B * O;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        z[i] += b[i % O];
}

/* db[j] = sum over rows of d[r][j], in two deterministic passes (a conv's
 * rows are N * OH * OW, tens of thousands, for a few dozen columns: one
 * thread per column would be latency-bound). Pass one: a block of
 * BIAS_COLS x BIAS_LANES threads sums one chunk of rows for BIAS_COLS
 * columns (lane l takes rows l, l + BIAS_LANES, ..; coalesced across the
 * columns), the lanes folded in order into part[chunk][j]; pass two folds
 * the chunks in order. The partial sums live in the cuBLASLt workspace,
 * which nothing else uses between two stream-ordered ops. */
#define BIAS_COLS 32
#define BIAS_LANES 8
#define BIAS_CHUNK_ROWS 256

static __global__ void bias_grad_part_k(const float *d, float *part, int B, int O, int rows_per_chunk) {
    __shared__ float s[BIAS_LANES][BIAS_COLS + 1];
    int j = blockIdx.x * BIAS_COLS + threadIdx.x, lane = threadIdx.y;
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(B, r0 + rows_per_chunk);
    float acc = 0.0f;
    if (j < O)
        for (int r = r0 + lane; r < r1; r += BIAS_LANES) acc += d[(size_t)r * O + j];
    s[lane][threadIdx.x] = acc;
    __syncthreads();
    if (lane == 0 && j < O) {
        float t = 0.0f;
        for (int l = 0; l < BIAS_LANES; l++) t += s[l][threadIdx.x];
        part[(size_t)blockIdx.y * O + j] = t;
    }
}

static __global__ void bias_grad_fold_k(const float *part, float *db, int chunks, int O) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < O; j += gridDim.x * blockDim.x) {
        float t = 0.0f;
        for (int c = 0; c < chunks; c++) t += part[(size_t)c * O + j];
        db[j] = t;
    }
}

static int bias_grad(eng_cuda *cu, const float *d, float *db, int B, int O) {
    int chunks = (B + BIAS_CHUNK_ROWS - 1) / BIAS_CHUNK_ROWS;
    size_t fit = CU_WORKSPACE / ((size_t)O * sizeof(float));
    if ((size_t)chunks > fit) chunks = (int)fit; /* O > 8M columns would leave no chunk: not a layer we build */
    if (chunks > 65535) chunks = 65535;          /* gridDim.y */
    if (chunks < 1) return cu_fail(cu, HPO_EINTERNAL, "bias gradient of %d columns", O);
    int rows_per_chunk = (B + chunks - 1) / chunks;
    chunks = (B + rows_per_chunk - 1) / rows_per_chunk;
    float *part = chunks == 1 ? db : (float *)cu->workspace;
    dim3 grid((unsigned)((O + BIAS_COLS - 1) / BIAS_COLS), (unsigned)chunks), block(BIAS_COLS, BIAS_LANES);
    bias_grad_part_k<<<grid, block, 0, cu->stream>>>(d, part, B, O, rows_per_chunk);
    int rc = cu_launched(cu, "bias gradient");
    if (rc || chunks == 1) return rc;
    bias_grad_fold_k<<<cu_grid((size_t)O), CU_THREADS, 0, cu->stream>>>(part, db, chunks, O);
    return cu_launched(cu, "bias gradient fold");
}

/* z = x w + b, y = act(z); x, w of type ab */
static int dense_fwd(eng_cuda *cu, cudaDataType_t ab, const void *x, const void *w, const float *b, float *z,
                     float *y, int B, int I, int O, int act) {
    CU_READY(cu);
    if (B <= 0 || O <= 0) return 0;
    if (I <= 0) return cu_fail(cu, HPO_EINTERNAL, "dense with no inputs");
    /* column-major: z^T (O x B, ld O) = w^T (O x I: the w buffer, ld O) x^T (I x B: the x buffer, ld I) */
    int relu_fused = act == ENG_ACT_RELU && z == y;
    float *out = relu_fused ? y : z;
    int used = 0, rc;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (b && align_of(b) >= 16) epi = relu_fused ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (!b && relu_fused) epi = CUBLASLT_EPILOGUE_RELU;
    rc = lt_gemm(cu, ab, 0, 0, O, B, I, w, O, x, I, out, O, epi, b, &used);
    if (rc) return rc;
    if (used && epi != CUBLASLT_EPILOGUE_DEFAULT) {
        if (relu_fused) return 0;
    } else {
        if (!used && (rc = lt_gemm(cu, ab, 0, 0, O, B, I, w, O, x, I, out, O, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL)))
            return rc;
        if (b) {
            bias_k<<<cu_grid((size_t)B * O), CU_THREADS, 0, cu->stream>>>(b, out, B, O);
            if ((rc = cu_launched(cu, "dense bias"))) return rc;
        }
    }
    return eng_cuda_act_forward(cu, act, out, y, (size_t)B, (size_t)O);
}

extern "C" int eng_cuda_dense_forward(eng_cuda *cu, const float *x, const float *w, const float *b, float *z, float *y,
                                      int B, int I, int O, int act) {
    return dense_fwd(cu, CUDA_R_32F, x, w, b, z, y, B, I, O, act);
}

/* the context's 16-bit format */
static cudaDataType_t h16_type(const eng_cuda *cu) { return cu->half_fp16 ? CUDA_R_16F : CUDA_R_16BF; }

extern "C" int eng_cuda_dense_forward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *b,
                                           float *z, float *y, int B, int I, int O, int act) {
    return dense_fwd(cu, h16_type(cu), xb, wb, b, z, y, B, I, O, act);
}

/* act backward into d, then db from d */
static int act_back_bias(eng_cuda *cu, const float *z, const float *y, float *d, float *db, int B, int O, int act) {
    int rc = eng_cuda_act_backward(cu, act, z, y, d, (size_t)B, (size_t)O);
    if (rc || !db) return rc;
    return bias_grad(cu, d, db, B, O);
}

/* dw, dx from dz (d) with x, w, dz of type ab */
static int dense_bwd_gemms(eng_cuda *cu, cudaDataType_t ab, const void *x, const void *w, const void *dz, float *dx,
                           float *dw, int B, int I, int O) {
    /* dw^T (O x I, ld O) = dz^T (O x B: the d buffer, ld O) (x^T)^T (B x I: the x buffer as I x B, ld I, transposed) */
    int rc = lt_gemm(cu, ab, 0, 1, O, I, B, dz, O, x, I, dw, O, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    /* dx^T (I x B, ld I) = (w^T)^T (I x O: the w buffer as O x I, ld O, transposed) dz^T (O x B, ld O) */
    if (!rc && dx) rc = lt_gemm(cu, ab, 1, 0, I, B, O, w, O, dz, O, dx, I, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    return rc;
}

extern "C" int eng_cuda_dense_backward(eng_cuda *cu, const float *x, const float *w, const float *z, const float *y,
                                       float *d, float *dx, float *dw, float *db, int B, int I, int O, int act) {
    CU_READY(cu);
    if (B <= 0 || O <= 0 || I <= 0) return cu_fail(cu, HPO_EINTERNAL, "dense backward of an empty shape");
    int rc = act_back_bias(cu, z, y, d, db, B, O, act);
    return rc ? rc : dense_bwd_gemms(cu, CUDA_R_32F, x, w, d, dx, dw, B, I, O);
}

extern "C" int eng_cuda_dense_backward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *z,
                                            const float *y, float *d, uint16_t *d16, float *dx, float *dw, float *db,
                                            int B, int I, int O, int act) {
    CU_READY(cu);
    if (B <= 0 || O <= 0 || I <= 0) return cu_fail(cu, HPO_EINTERNAL, "dense backward of an empty shape");
    int rc;
    if (cu->half_fp16) { /* fp16: dz rounded before the bias sum too (model_run.c's rounds_dz_fp16) */
        rc = eng_cuda_act_backward(cu, act, z, y, d, (size_t)B, (size_t)O);
        if (!rc) rc = eng_cuda_round_fp16(cu, d, d, (size_t)B * O);
        if (!rc) rc = act_back_bias(cu, z, y, d, db, B, O, ENG_ACT_NONE);
    } else {
        rc = act_back_bias(cu, z, y, d, db, B, O, act);
    }
    if (!rc) rc = eng_cuda_to_h16(cu, d, d16, (size_t)B * O);
    return rc ? rc : dense_bwd_gemms(cu, h16_type(cu), xb, wb, d16, dx, dw, B, I, O);
}
