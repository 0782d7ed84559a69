/* kernels.c - GFLOP/s of the engine's hot kernels on this machine:
 * OpenBLAS sgemm vs oneDNN f32 matmul vs oneDNN bf16 matmul (AMX) at the MLP
 * shapes and 1024^3, 1 and 2 threads; the CNN's first convolution
 * (128x28x28x1 -> 32, 3x3, same) forward / backward-data / backward-weights
 * in f32 and bf16; bf16 conversion and batch-gathering throughput; the
 * Fashion-MNIST load time. Each figure: median of 5 timed runs [min..max]
 * of GFLOP/s (runs of >= 50 ms after a warm-up).
 *
 *   bench_kernels [--quick]
 *   HPO_DNNL_CONV_WEIGHTS=any bench_kernels   # oneDNN-chosen conv weights layout
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "blas_select.h"
#include "data.h"
#include "dnnl_ops.h"
#include "hpo.h"
#include "rng.h"

static int quick;

typedef int (*kernel_fn)(void *ctx);

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median [min..max] of work/time over 5 runs of >= 50 ms; returns median. */
static double measure(kernel_fn f, void *ctx, double work, double *lo, double *hi) {
    double r[5];
    int runs = quick ? 3 : 5;
    *lo = *hi = 0;
    if (f(ctx) < 0) return -1; /* warm-up (primitive creation) */
    int reps = 1;
    for (;;) {
        double t0 = hpo_monotonic();
        for (int i = 0; i < reps; i++) f(ctx);
        double dt = hpo_monotonic() - t0;
        if (dt > 0.05 || reps > (1 << 20)) break;
        reps *= 2;
    }
    for (int k = 0; k < runs; k++) {
        double t0 = hpo_monotonic();
        for (int i = 0; i < reps; i++) f(ctx);
        r[k] = work * reps / (hpo_monotonic() - t0);
    }
    qsort(r, (size_t)runs, sizeof r[0], cmp_d);
    *lo = r[0], *hi = r[runs - 1];
    return r[runs / 2];
}

typedef struct gctx {
    int ta, tb, M, N, K;
    float *A, *B, *C;
    uint16_t *Ah, *Bh;
} gctx;

static int k_sgemm(void *p) {
    gctx *g = p;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                g->M, g->N, g->K, 1.0f, g->A, g->ta ? g->M : g->K, g->B, g->tb ? g->K : g->N, 0.0f,
                g->C, g->N);
    return 0;
}

static int k_dnnl_f32(void *p) {
    gctx *g = p;
    return eng_dnnl_gemm_f32(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->ta ? g->M : g->K, g->B,
                             g->tb ? g->K : g->N, 0.0f, g->C, g->N, NULL);
}

static int k_dnnl_bf16(void *p) {
    gctx *g = p;
    return eng_dnnl_gemm_bf16(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->Ah, g->ta ? g->M : g->K,
                              g->Bh, g->tb ? g->K : g->N, 0.0f, g->C, g->N, NULL);
}

static void bench_gemm(const char *label, int ta, int tb, int M, int N, int K, int threads) {
    gctx g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K};
    size_t na = (size_t)M * K, nb = (size_t)K * N;
    g.A = malloc(na * 4), g.B = malloc(nb * 4), g.C = malloc((size_t)M * N * 4);
    g.Ah = malloc(na * 2), g.Bh = malloc(nb * 2);
    hpo_rng r;
    hpo_rng_seed(&r, 1);
    for (size_t i = 0; i < na; i++) g.A[i] = (float)hpo_rng_normal(&r);
    for (size_t i = 0; i < nb; i++) g.B[i] = (float)hpo_rng_normal(&r);
    eng_f32_to_bf16_n(g.A, g.Ah, na), eng_f32_to_bf16_n(g.B, g.Bh, nb);
    double flop = 2.0 * M * N * K, lo[3] = {0}, hi[3] = {0}, med[3];
    med[0] = measure(k_sgemm, &g, flop, &lo[0], &hi[0]) / 1e9;
    med[1] = measure(k_dnnl_f32, &g, flop, &lo[1], &hi[1]) / 1e9;
    char impl_f32[48];
    snprintf(impl_f32, sizeof impl_f32, "%s", eng_dnnl_last_impl());
    med[2] = measure(k_dnnl_bf16, &g, flop, &lo[2], &hi[2]) / 1e9;
    printf("| %-22s %c%c %4dx%4dx%4d | %d | %6.1f [%5.1f..%5.1f] | %6.1f [%5.1f..%5.1f] %-16s | %6.1f [%5.1f..%5.1f] %s |\n",
           label, ta ? 'T' : 'N', tb ? 'T' : 'N', M, K, N, threads, med[0], lo[0] / 1e9, hi[0] / 1e9,
           med[1], lo[1] / 1e9, hi[1] / 1e9, impl_f32, med[2], lo[2] / 1e9, hi[2] / 1e9,
           eng_dnnl_last_impl());
    fflush(stdout);
    free(g.A), free(g.B), free(g.C), free(g.Ah), free(g.Bh);
}

typedef struct cctx {
    eng_conv2d_shape s;
    eng_dnnl_type t;
    int op;
    void *x, *w, *dy;
    float *y, *dx, *dw, *db, *bias;
} cctx;

static int k_conv(void *p) {
    cctx *c = p;
    if (c->op == 0) return eng_dnnl_conv2d_forward(&c->s, c->t, c->x, c->w, c->bias, c->y);
    if (c->op == 1) return eng_dnnl_conv2d_backward_data(&c->s, c->t, c->dy, c->w, c->dx);
    return eng_dnnl_conv2d_backward_weights(&c->s, c->t, c->x, c->dy, c->dw, c->db);
}

static void bench_conv(int N, int H, int C, int K, int OC, int threads) {
    for (int t = 0; t < 2; t++) {
        cctx c;
        memset(&c, 0, sizeof c);
        eng_conv2d_shape_init(&c.s, N, H, H, C, K, K, OC, 1, 1, ENG_PAD_SAME);
        c.t = (eng_dnnl_type)t;
        size_t nx = (size_t)N * H * H * C, nw = (size_t)K * K * C * OC,
               ny = (size_t)N * c.s.OH * c.s.OW * OC, es = t ? 2 : 4;
        c.x = calloc(nx, es), c.w = calloc(nw, es), c.dy = calloc(ny, es);
        c.y = calloc(ny, 4), c.dx = calloc(nx, 4), c.dw = calloc(nw, 4), c.db = calloc((size_t)OC, 4),
        c.bias = calloc((size_t)OC, 4);
        double flop = eng_conv2d_flops(&c.s), lo, hi;
        static const char *const ops[3] = {"fwd", "bwd_data", "bwd_weights"};
        for (c.op = 0; c.op < 3; c.op++) {
            double m = measure(k_conv, &c, flop, &lo, &hi);
            printf("| conv %dx%dx%dx%d -> %d %dx%d same, %s %-11s | %d | %6.1f [%5.1f..%5.1f] GFLOP/s, "
                   "%.3f ms | %s |\n",
                   N, H, H, C, OC, K, K, t ? "bf16" : "f32 ", ops[c.op], threads, m / 1e9, lo / 1e9,
                   hi / 1e9, flop / m * 1e3, eng_dnnl_last_impl());
        }
        fflush(stdout);
        free(c.x), free(c.w), free(c.dy), free(c.y), free(c.dx), free(c.dw), free(c.db), free(c.bias);
    }
}

typedef struct bctx {
    float *f;
    uint16_t *h;
    size_t n;
} bctx;

static int k_to_bf16(void *p) {
    bctx *b = p;
    eng_f32_to_bf16_n(b->f, b->h, b->n);
    return 0;
}

static int k_to_bf16_ref(void *p) {
    bctx *b = p;
    eng_f32_to_bf16_n_ref(b->f, b->h, b->n);
    return 0;
}

static void bench_data(void) {
    bctx b = {.n = 1 << 20};
    b.f = malloc(b.n * 4), b.h = malloc(b.n * 2);
    for (size_t i = 0; i < b.n; i++) b.f[i] = (float)i * 1e-3f;
    double lo, hi, m = measure(k_to_bf16, &b, (double)b.n, &lo, &hi);
    double mr = measure(k_to_bf16_ref, &b, (double)b.n, &lo, &hi);
    printf("f32->bf16 1M values: %s %.2f Gvalues/s, scalar reference %.2f Gvalues/s\n",
           eng_bf16_impl(), m / 1e9, mr / 1e9);
    free(b.f), free(b.h);

    hpo_error err = {0};
    eng_dataset *ds;
    double t0 = hpo_monotonic();
    if (eng_dataset_cache_get("fashion-mnist", "train", &ds, &err) < 0) {
        printf("fashion-mnist: %s\n", err.message);
        return;
    }
    double tl = hpo_monotonic() - t0;
    eng_split sp;
    eng_split_all(ds, &sp);
    for (int xt = 0; xt < 2; xt++)
        for (int pf = 0; pf < 2; pf++) {
            eng_batcher_opts o = {.batch_size = 128, .shuffle = 1, .seed = 1, .x_type = xt, .prefetch = pf};
            eng_batcher *bt;
            eng_batcher_new(&sp, &o, &bt, &err);
            eng_batch batch;
            t0 = hpo_monotonic();
            eng_batcher_start_epoch(bt, 0);
            while (eng_batcher_next(bt, &batch) == 1) {
            }
            double te = hpo_monotonic() - t0;
            printf("batcher epoch of 60000 (batch 128, shuffled, %s, prefetch %d, no compute): %.1f ms = %.2f M samples/s\n",
                   xt ? "bf16" : "f32", pf, te * 1e3, 60000 / te / 1e6);
            eng_batcher_free(bt);
        }
    printf("fashion-mnist train load (gz IDX, 60000x784 uint8): %.3f s\n", tl);
    eng_split_clear(&sp);
    eng_dataset_release(ds);
}

int main(int argc, char **argv) {
    eng_blas_select(argc, argv);
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    printf("OpenBLAS core %s; bf16 path %s; OMP_WAIT_POLICY=%s; conv weights %s\n", eng_blas_corename(),
           eng_bf16_impl(), getenv("OMP_WAIT_POLICY") ?: "(unset)",
           getenv("HPO_DNNL_CONV_WEIGHTS") ?: "per-op table");
    printf("| GEMM (M x K x N) | threads | OpenBLAS sgemm GFLOP/s | oneDNN f32 GFLOP/s [impl] | oneDNN bf16 GFLOP/s [impl] |\n");
    printf("|---|---|---|---|---|\n");
    for (int threads = 1; threads <= 2; threads++) {
        openblas_set_num_threads(threads);
        eng_dnnl_set_num_threads(threads);
        bench_gemm("dense1 fwd", 0, 0, 128, 256, 784, threads);
        bench_gemm("dense1 dW = X^T dY", 1, 0, 784, 256, 128, threads);
        bench_gemm("dense1 dX = dY W^T", 0, 1, 128, 784, 256, threads);
        bench_gemm("dense2 fwd", 0, 0, 128, 256, 256, threads);
        bench_gemm("output fwd", 0, 0, 128, 10, 256, threads);
        if (!quick) bench_gemm("square", 0, 0, 1024, 1024, 1024, threads);
    }
    for (int threads = 1; threads <= 2; threads++) {
        eng_dnnl_set_num_threads(threads);
        bench_conv(128, 28, 1, 3, 32, threads);
    }
    eng_dnnl_set_num_threads(1);
    bench_data();
    return 0;
}
