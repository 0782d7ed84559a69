/* engine.c - training throughput of the engine beside PyTorch 1.13, in one
 * invocation: samples/s over one epoch (the second; the first is warm-up, as
 * in torch_mlp.py) for the MLP and the CNN of engine/models, fp32 and
 * mixed_bf16, 1 and 2 threads; PyTorch run as a child with
 * OPENBLAS_CORETYPE=SkylakeX, OMP_WAIT_POLICY=PASSIVE and --flush-denormal
 * (its best settings here): f32 rows against tests/bench/peers/torch_mlp.py,
 * mixed_bf16 rows against tests/bench/peers/torch_bf16.py (the same recipe under
 * torch.autocast("cpu", dtype=torch.bfloat16)); ours with the same
 * OMP_WAIT_POLICY=PASSIVE and FTZ/DAZ (set by eng_train). Also the GEMM/conv-bound
 * limit measured in the same run: the time of just the GEMM and convolution
 * calls training makes for one batch (on T threads the better of intra-op
 * calls and T batch shares at once), the same with the first layer's input
 * gradient too (which training skips, but the usual count of 1.6 MFLOP per
 * MLP sample - forward, dW and dX of every layer - includes), and the 1024^3
 * sgemm peak; each printed beside PyTorch's samples/s of the same run.
 *
 *   bench_engine [--models mlp,cnn] [--threads 1,2] [--precisions fp32,mixed_bf16]
 *                [--no-torch] [--epochs 2] [--limit N]
 * Peer scripts: tests/bench/peers/, or $HPO_PEERS (lib/bench_peers.h). */
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_peers.h"
#include "bench_cli.h"
#include "bf16.h"
#include "blas_select.h"
#include "data.h"
#include "model.h"
#include "train.h"

static char root[PATH_MAX];

static double torch_sps(const char *model, int threads, int bf16) {
    const char *peers = bench_peers_dir();
    char cmd[2 * PATH_MAX];
    if (bf16)
        snprintf(cmd, sizeof cmd,
                 "OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 '%s/torch_bf16.py' "
                 "--model %s --threads %d --epochs 2 --flush-denormal 2>/dev/null",
                 peers, model, threads);
    else
        snprintf(cmd, sizeof cmd,
                 "OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 '%s/torch_mlp.py' --model %s "
                 "--threads %d --epochs 2 --runs 1 --flush-denormal --quiet 2>/dev/null",
                 peers, model, threads);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[1024];
    double v = -1;
    const char *key = "samples/s median [min..max] over runs:";
    while (fgets(line, sizeof line, p)) {
        char *s = strstr(line, key);
        if (s) v = strtod(s + strlen(key), NULL);
    }
    pclose(p);
    return v;
}

/* Seconds per batch of B spent in the model's GEMM/conv calls alone, made
 * in training order (forward over the layers, then backward: dW, and dX
 * except for the first layer) on distinct buffers of the layers' sizes, as
 * the training step makes them; best of reps. */
typedef struct kbuf {
    void *x, *w, *dy;
    float *y, *dw, *dx, *db;
} kbuf;

static void fill(void *p, size_t n, int bf) {
    for (size_t i = 0; i < n; i++) {
        float v = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        if (bf) ((uint16_t *)p)[i] = eng_f32_to_bf16(v);
        else ((float *)p)[i] = v;
    }
}

/* The time of the model's GEMM/conv calls for one batch of B (best of reps).
 * first_dx: also the first layer's input gradient, which training skips
 * (nothing needs it) but the usual count of 1.6 MFLOP per MLP sample
 * (forward, dW and dX of every layer) includes. */
static double kernel_time(eng_model *m, int B, int prec, int reps, int first_dx) {
    const eng_backend *be = m->be;
    int bf = prec == ENG_PREC_BF16, es = bf ? 2 : 4;
    kbuf *kb = calloc((size_t)m->nlayers, sizeof *kb);
    int first = -1;
    for (int i = 0; i < m->nlayers; i++) {
        const eng_layer *l = &m->layers[i];
        if (l->kind != ENG_L_DENSE && l->kind != ENG_L_CONV2D) continue;
        if (first < 0) first = i;
        size_t in = (size_t)B * l->in_size, out = (size_t)B * l->out_size;
        kb[i].x = calloc(in, (size_t)es);
        kb[i].w = calloc(l->nw, (size_t)es);
        kb[i].dy = calloc(out, (size_t)es);
        kb[i].y = calloc(out, 4);
        kb[i].dw = calloc(l->nw, 4);
        kb[i].dx = calloc(in, 4);
        kb[i].db = calloc(l->nb, 4);
        /* real values in real pages (untouched calloc memory all maps the
         * one zero page, which would make the bound unrealistically fast) */
        fill(kb[i].x, in, bf), fill(kb[i].w, l->nw, bf), fill(kb[i].dy, out, bf);
        memset(kb[i].y, 1, out * 4), memset(kb[i].dw, 1, l->nw * 4), memset(kb[i].dx, 1, in * 4);
    }
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = hpo_monotonic();
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < m->nlayers; k++) {
                int i = pass ? m->nlayers - 1 - k : k;
                const eng_layer *l = &m->layers[i];
                kbuf *q = &kb[i];
                if (l->kind == ENG_L_DENSE) {
                    int I = l->in_shape[l->in_rank - 1], O = l->units;
                    if (pass == 0) {
                        if (bf) be->gemm_bf16(0, 0, B, O, I, 1, q->x, I, q->w, O, 0, q->y, O, NULL);
                        else be->gemm_f32(0, 0, B, O, I, 1, q->x, I, q->w, O, 0, q->y, O);
                        continue;
                    }
                    if (bf) be->gemm_bf16(1, 0, I, O, B, 1, q->x, I, q->dy, O, 0, q->dw, O, NULL);
                    else be->gemm_f32(1, 0, I, O, B, 1, q->x, I, q->dy, O, 0, q->dw, O);
                    if (i != first || first_dx) {
                        if (bf) be->gemm_bf16(0, 1, B, I, O, 1, q->dy, O, q->w, O, 0, q->dx, I, NULL);
                        else be->gemm_f32(0, 1, B, I, O, 1, q->dy, O, q->w, O, 0, q->dx, I);
                    }
                } else if (l->kind == ENG_L_CONV2D) {
                    eng_conv2d_shape s;
                    eng_conv2d_shape_init(&s, B, l->in_shape[0], l->in_shape[1], l->in_shape[2], l->kh, l->kw,
                                          l->filters, l->sh, l->sw, l->padding);
                    int cbf = bf && l->in_shape[2] >= 16; /* as the model does */
                    eng_dtype dt = cbf ? ENG_BF16 : ENG_F32;
                    if (pass == 0) {
                        be->conv2d_forward(&s, dt, q->x, q->w, NULL, q->y);
                        continue;
                    }
                    be->conv2d_backward_weights(&s, dt, q->x, q->dy, q->dw, q->db);
                    if (i != first || first_dx) be->conv2d_backward_data(&s, dt, q->dy, q->w, q->dx);
                }
            }
        double t = hpo_monotonic() - t0;
        if (r > 0 && t < best) best = t;
    }
    for (int i = 0; i < m->nlayers; i++) {
        free(kb[i].x), free(kb[i].w), free(kb[i].dy), free(kb[i].y), free(kb[i].dw), free(kb[i].dx), free(kb[i].db);
    }
    free(kb);
    return best;
}

/* The GEMM bound of data parallelism (engine/replicas.h): T threads at once,
 * each running the single-threaded GEMMs of its B/T rows; the slowest one's
 * time. */
typedef struct share_job {
    eng_model *m;
    int rows, prec, first_dx;
    double t;
    pthread_barrier_t *go;
} share_job;

static void *share_main(void *arg) {
    share_job *j = arg;
    j->m->be->set_threads(1);
    unsigned mx = eng_set_ftz_daz();
    pthread_barrier_wait(j->go);
    j->t = kernel_time(j->m, j->rows, j->prec, 12, j->first_dx);
    eng_restore_mxcsr(mx);
    return NULL;
}

static double kernel_time_shares(eng_model *m, int B, int prec, int T, int first_dx) {
    pthread_t th[8];
    share_job jobs[8];
    pthread_barrier_t go;
    if (T > 8) T = 8;
    pthread_barrier_init(&go, NULL, (unsigned)T);
    for (int k = 0; k < T; k++) {
        jobs[k] = (share_job){.m = m, .rows = B / T, .prec = prec, .first_dx = first_dx, .go = &go};
        pthread_create(&th[k], NULL, share_main, &jobs[k]);
    }
    double worst = 0;
    for (int k = 0; k < T; k++) {
        pthread_join(th[k], NULL);
        if (jobs[k].t > worst) worst = jobs[k].t;
    }
    pthread_barrier_destroy(&go);
    return worst;
}

static double sgemm_peak(const eng_backend *be) {
    int n = 1024;
    float *a = calloc((size_t)n * n, 4), *b = calloc((size_t)n * n, 4), *c = calloc((size_t)n * n, 4);
    double best = 1e9;
    for (int r = 0; r < 4; r++) {
        double t0 = hpo_monotonic();
        be->gemm_f32(0, 0, n, n, n, 1, a, n, b, n, 0, c, n);
        double t = hpo_monotonic() - t0;
        if (r && t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * n / best / 1e9;
}

typedef struct row {
    const char *model, *prec;
    int threads;
    double ours, torch, bound, bound_all, gflops, acc;
    const char *bound_how;
} row;

static int on_epoch(const eng_epoch_report *r, void *user) {
    double *sps = user;
    if (r->epoch >= 2 || sps[0] == 0) sps[0] = r->samples_per_s;
    sps[1] = r->train.accuracy;
    return 0;
}

int main(int argc, char **argv) {
    /* Our side runs with the same OpenMP setting as PyTorch's best (libgomp
     * reads it when it loads, so set it and start again). */
    if (!getenv("OMP_WAIT_POLICY") && !getenv("HPO_BENCH_REEXEC")) {
        setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        setenv("HPO_BENCH_REEXEC", "1", 1);
        execv("/proc/self/exe", argv);
    }
    eng_blas_select(argc, argv);
    const char *models = "mlp,cnn", *threads_l = "1,2", *precs = "fp32,mixed_bf16";
    int torch = 1, epochs = 2;
    long limit = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads_l = argv[++i];
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc) precs = argv[++i];
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--limit") && i + 1 < argc) limit = atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = 0;
        else {
            fprintf(stderr, "usage: %s [--models mlp,cnn] [--threads 1,2] [--precisions fp32,mixed_bf16] [--epochs 2] "
                            "[--limit N] [--no-torch]\n", argv[0]);
            return 2;
        }
    }
    if (bench_find_root(root, sizeof root)) {
        fprintf(stderr, "bench_engine: cannot find engine/models (run from the repository)\n");
        return 1;
    }
    hpo_error err;
    eng_dataset *ds = NULL;
    if (eng_dataset_cache_get("fashion-mnist", "train", &ds, &err)) {
        fprintf(stderr, "bench_engine: %s\n", err.message);
        return 77;
    }
    eng_split sp;
    eng_split_spec spec = {.limit = (size_t)limit};
    eng_split_make(ds, &spec, &sp, NULL, &err);
    const eng_backend *be = eng_backend_cpu();
    printf("OpenBLAS core %s; bf16 conversions %s; oneDNN bf16 %s\n", eng_blas_corename(), eng_bf16_impl(),
           eng_dnnl_has_bf16() ? "yes" : "no");
    row rows[16];
    int nr = 0;
    double peak[3] = {0};
    const char *mnames[] = {"mlp", "cnn"}, *pnames[] = {"fp32", "mixed_bf16"};
    int tlist[] = {1, 2};
    for (int ti = 0; ti < 2; ti++) {
        int T = tlist[ti];
        char ts[8];
        snprintf(ts, sizeof ts, "%d", T);
        if (!bench_list_has(threads_l, ts)) continue;
        be->set_threads(T);
        eng_set_ftz_daz();
        peak[T] = sgemm_peak(be);
        for (int mi = 0; mi < 2; mi++) {
            if (!bench_list_has(models, mnames[mi])) continue;
            for (int pi = 0; pi < 2; pi++) {
                if (!bench_list_has(precs, pnames[pi])) continue;
                double tsps = torch ? torch_sps(mnames[mi], T, pi == 1) : -1;
                char path[PATH_MAX + 64];
                snprintf(path, sizeof path, "%s/engine/models/%s.json", root, mnames[mi]);
                json_error_t je;
                json_t *t = json_load_file(path, 0, &je);
                int shape[3] = {28, 28, 1};
                eng_model *m = NULL;
                if (!t || eng_model_new(t, NULL, 3, shape, 10, 1, &m, &err)) {
                    fprintf(stderr, "bench_engine: %s: %s\n", path, t ? err.message : je.text);
                    return 1;
                }
                eng_train_opts o;
                eng_train_opts_init(&o);
                o.epochs = epochs;
                o.threads = T;
                o.precision = eng_precision_parse(pnames[pi]);
                double sps[2] = {0, 0};
                o.on_epoch = on_epoch;
                o.user = sps;
                eng_train_result res;
                if (eng_train(m, &sp, NULL, &o, &res, &err)) {
                    fprintf(stderr, "bench_engine: %s\n", err.message);
                    return 1;
                }
                unsigned mx = eng_set_ftz_daz();
                /* the better of the two ways to run the GEMMs on T threads:
                 * each GEMM split over them, or T batch shares at once */
                be->set_threads(T);
                double kt = kernel_time(m, 128, o.precision, 12, 0),
                       kt_shares = T > 1 ? kernel_time_shares(m, 128, o.precision, T, 0) : 1e9;
                be->set_threads(T);
                double kt_all = kernel_time(m, 128, o.precision, 12, 1),
                       kt_all_shares = T > 1 ? kernel_time_shares(m, 128, o.precision, T, 1) : 1e9;
                be->set_threads(T);
                if (kt_all_shares < kt_all) kt_all = kt_all_shares;
                const char *how = "intra-op";
                if (kt_shares < kt) {
                    kt = kt_shares;
                    how = T == 2 ? "2 shares" : "shares";
                }
                eng_restore_mxcsr(mx);
                row *r = &rows[nr++];
                r->model = mnames[mi];
                r->prec = pnames[pi];
                r->threads = T;
                r->ours = sps[0];
                r->torch = tsps;
                r->bound = 128.0 / kt;
                r->bound_all = 128.0 / kt_all;
                r->bound_how = how;
                r->gflops = sps[0] * m->flops_per_sample / 1e9;
                r->acc = sps[1];
                fprintf(stderr, "  %s %s T=%d: %.0f samples/s (torch %.0f)\n", r->model, r->prec, T, r->ours, r->torch);
                eng_model_free(m);
                json_decref(t);
            }
        }
    }
    printf("\nsgemm 1024^3 peak in this run: 1 thread %.1f GFLOP/s, 2 threads %.1f GFLOP/s\n", peak[1], peak[2]);
    printf("| model | precision | threads | hpo samples/s | PyTorch samples/s (same precision) | hpo / PyTorch "
           "| GEMM+conv-bound samples/s | bound from | hpo / bound | bound with the first layer's dX | hpo / that "
           "| hpo GFLOP/s | hpo / own fp32 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++) {
        row *r = &rows[i];
        double own = 0;
        for (int j = 0; j < nr; j++)
            if (!strcmp(rows[j].model, r->model) && rows[j].threads == r->threads && !strcmp(rows[j].prec, "fp32"))
                own = rows[j].ours;
        printf("| %s | %s | %d | %.0f | %.0f | %.2fx | %.0f | %s | %.0f%% | %.0f | %.0f%% | %.1f | %.2fx |\n", r->model,
               r->prec, r->threads, r->ours, r->torch, r->torch > 0 ? r->ours / r->torch : 0, r->bound, r->bound_how,
               100 * r->ours / r->bound, r->bound_all, 100 * r->ours / r->bound_all, r->gflops, own > 0 ? r->ours / own : 0);
    }
    eng_split_clear(&sp);
    eng_dataset_release(ds);
    return 0;
}
