/* gpu_engine.c - bench_gpu_engine: the engine's training throughput on a
 * CUDA device beside PyTorch on the same GPU, in one invocation.
 *
 * Rows: the MLP of bench_engine (engine/models/mlp.json), a wide MLP
 * (tests/bench/models/mlp_wide.json: units 4096) and the CNN
 * (engine/models/cnn.json), at batch 128 and 512, fp32 (no TF32) and
 * mixed_bf16, on Fashion-MNIST (60000 training rows; the 10000 test rows
 * validate every epoch, outside the timed part). hpo: eng_train on the
 * device (train_cuda.c), K = --steps-per-execution whole steps per replay
 * of its captured graph (default 1, the study default), samples/s of the
 * second epoch (the first is the warm-up and the capture), test accuracy
 * after it. A row the device path refuses (mixed_fp16, say) prints
 * "unsupported: <the engine's reason>", never a silent skip; the CNN's
 * GEMM-bound column stays empty (it times the dense layers' GEMMs only). PyTorch: tests/bench/peers/
 * torch_gpu.py, run once before hpo's rows for all of them (its time is
 * bounded; a crash of the engine's rows after it keeps its lines), on the
 * same GPU, the same templates and recipe, data on the device, in three modes
 * (eager, the whole step in a CUDA graph, torch.compile max-autotune), each
 * row's best mode beside hpo.
 * Also measured in the run: the engine's own cuBLASLt GEMM rates on random
 * 8192^3 operands, bf16 and f32 (spot-checked against the CPU), PyTorch's
 * bf16 matmul rate, and per dense row the "GEMM-bound" samples/s: the time
 * of just that model's GEMMs for one batch (forward, dW, dX but the first
 * layer's, same shapes) through the same op. Each row's training FLOP/s
 * (model.h flops_per_sample) is printed as a share of the GEMM peak of its
 * precision: the goal is >= 60% of the bf16 peak for the wide MLP.
 * Every row is printed as it finishes (a cut-off run keeps what ran), the
 * table at the end.
 *
 *   bench_gpu_engine [--models mlp,wide,cnn] [--batches 128,512]
 *        [--precisions fp32,mixed_bf16] [--epochs 2] [--steps-per-execution K]
 *        [--limit N] [--device N]
 *        [--gemm 8192] [--no-torch] [--torch-only] [--torch-device cuda]
 *        [--torch-modes eager,graph,compile] [--torch-compile max-autotune]
 *        [--torch-time-limit 300] [--torch-max-batches N] [--check-device]
 * Without a usable CUDA device it prints why and exits 77 (--check-device:
 * that check alone, 0 when there is one: bench.gpu_engine_no_device), except with
 * --torch-only (PyTorch alone; with --torch-device cpu it checks the peer on
 * the CPU: bench.gpu_engine_peer_cpu). The peer runs with $HPO_PYTHON
 * (default /usr/bin/python3) and, when $HPO_PEER_LD_LIBRARY_PATH is set,
 * that as its LD_LIBRARY_PATH (empty: none); Fashion-MNIST comes from
 * $HPO_FASHION_MNIST_DIR, else Debian's folder, else the bundle's copy
 * (.gpu-bundle/data/fashion-mnist beside the checkout: tests/gpu/bundle.sh).
 * Exit 1 when an hpo row failed for another reason than "unsupported", or
 * (--torch-only) when a PyTorch row is missing or failed for another reason
 * than "unsupported" (the peer's word for a precision its CPU cannot run). */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_cli.h"
#include "bench_peers.h"
#include "bf16.h"
#include "cuda_ops.h"
#include "data.h"
#include "gpu.h"
#include "model.h"
#include "ops.h"
#include "rng.h"
#include "train.h"

#define NMODES 3
static const char *mode_names[NMODES] = {"eager", "graph", "compile"};
static const char *mode_titles[NMODES] = {"PyTorch eager", "PyTorch CUDA graph", "PyTorch compile"};

typedef struct model_def {
    const char *name, *path;
} model_def;
static const model_def model_defs[] = {
    {"mlp", "engine/models/mlp.json"},
    {"wide", "tests/bench/models/mlp_wide.json"},
    {"cnn", "engine/models/cnn.json"},
};
#define NMODELS ((int)(sizeof model_defs / sizeof model_defs[0]))

typedef struct row {
    const char *model, *prec;
    int batch;
    int ran;                  /* hpo trained it */
    char why[320];            /* hpo's reason when not */
    double sps, train_acc, test_acc, flops, gemm_bound;
    double torch_sps[NMODES], torch_acc[NMODES], torch_warmup[NMODES];
    char torch_why[NMODES][200];
} row;

typedef struct opts {
    const char *models, *batches, *precs, *torch_modes, *torch_compile, *torch_device;
    int epochs, device, gemm_n, torch, torch_only, check_device, steps_per_execution;
    long limit, torch_max_batches;
    double torch_time_limit;
} opts;

static char root[PATH_MAX];

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--models mlp,wide,cnn] [--batches 128,512] [--precisions fp32,mixed_bf16] [--epochs 2]\n"
            "       [--steps-per-execution 1] [--limit N] [--device N] [--gemm 8192] [--no-torch] [--torch-only] [--torch-device cuda]\n"
            "       [--torch-modes eager,graph,compile] [--torch-compile max-autotune] [--torch-time-limit 300]\n"
            "       [--torch-max-batches N] [--check-device]\n",
            argv0);
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.models = "mlp,wide,cnn", .batches = "128,512", .precs = "fp32,mixed_bf16",
                .torch_modes = "eager,graph,compile", .torch_compile = "max-autotune", .torch_device = "cuda",
                .epochs = 2, .gemm_n = 8192, .torch = 1, .torch_time_limit = 300, .steps_per_execution = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-torch")) o->torch = 0;
        else if (!strcmp(a, "--torch-only")) o->torch_only = 1;
        else if (!strcmp(a, "--check-device")) o->check_device = 1;
        else if (!v) return -1;
        else if (!strcmp(a, "--models")) o->models = v, i++;
        else if (!strcmp(a, "--batches")) o->batches = v, i++;
        else if (!strcmp(a, "--precisions")) o->precs = v, i++;
        else if (!strcmp(a, "--epochs")) o->epochs = atoi(v), i++;
        else if (!strcmp(a, "--limit")) o->limit = atol(v), i++;
        else if (!strcmp(a, "--steps-per-execution")) o->steps_per_execution = atoi(v), i++;
        else if (!strcmp(a, "--device")) o->device = atoi(v), i++;
        else if (!strcmp(a, "--gemm")) o->gemm_n = atoi(v), i++;
        else if (!strcmp(a, "--torch-device")) o->torch_device = v, i++;
        else if (!strcmp(a, "--torch-modes")) o->torch_modes = v, i++;
        else if (!strcmp(a, "--torch-compile")) o->torch_compile = v, i++;
        else if (!strcmp(a, "--torch-time-limit")) o->torch_time_limit = atof(v), i++;
        else if (!strcmp(a, "--torch-max-batches")) o->torch_max_batches = atol(v), i++;
        else return -1;
    }
    if (o->epochs < 1 || o->steps_per_execution < 1 || o->gemm_n < 256 || (o->torch_only && !o->torch)) return -1;
    return 0;
}

/* ---- the engine's GEMM rates (the op training uses: eng_cuda_dense_forward*) ---- */

typedef struct gemm_bufs {
    eng_cuda *cu;
    void *a, *b;  /* n*n elements each, f32 or bf16 */
    float *c;     /* n*n f32 */
    int n;
} gemm_bufs;

/* one z[M][N] = x[M][K] w[K][N] through the dense forward op (no bias, no activation) */
static int gemm_once(gemm_bufs *g, int bf16, int M, int K, int N) {
    if (bf16) return eng_cuda_dense_forward_h16(g->cu, g->a, g->b, NULL, g->c, g->c, M, K, N, ENG_ACT_NONE);
    return eng_cuda_dense_forward(g->cu, g->a, g->b, NULL, g->c, g->c, M, K, N, ENG_ACT_NONE);
}

/* Seconds of the GEMMs (M, K, N) [k] run back to back, per round: the
 * median of 3 timed groups of rounds after two warm-up rounds (the first
 * loads the kernels; the second sizes the groups to ~0.1 s); -1 on a device
 * error (printed). */
static double gemm_seconds(gemm_bufs *g, int bf16, const int (*shapes)[3], int k) {
    hpo_error err;
    double t[3];
    int reps = 1;
    for (int grp = -2; grp < 3; grp++) {
        double t0 = hpo_monotonic();
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < k; i++)
                if (gemm_once(g, bf16, shapes[i][0], shapes[i][1], shapes[i][2])) break;
        if (eng_cuda_sync(g->cu, &err)) {
            fprintf(stderr, "bench_gpu_engine: GEMM: %s\n", err.message);
            return -1;
        }
        double dt = hpo_monotonic() - t0;
        if (grp == -1) {
            reps = dt > 0 ? (int)(0.1 / dt) : 100;
            reps = reps < 3 ? 3 : reps > 500 ? 500 : reps;
        } else if (grp >= 0) {
            t[grp] = dt / reps;
        }
    }
    double lo = fmin(t[0], fmin(t[1], t[2])), hi = fmax(t[0], fmax(t[1], t[2]));
    return t[0] + t[1] + t[2] - lo - hi;
}

/* Random operands (never zeros: they run faster than real data). */
static int gemm_fill(gemm_bufs *g, int bf16, float **ha, float **hb, hpo_error *err) {
    size_t n2 = (size_t)g->n * (size_t)g->n, es = bf16 ? 2 : 4;
    hpo_rng r;
    hpo_rng_seed(&r, 42);
    void *tmp = malloc(n2 * es);
    *ha = malloc(n2 * sizeof(float));
    *hb = malloc(n2 * sizeof(float));
    if (!tmp || !*ha || !*hb) {
        free(tmp);
        return hpo_fail(err, HPO_ENOMEM, "gemm", "out of host memory for the GEMM operands");
    }
    int rc = 0;
    for (int which = 0; which < 2 && !rc; which++) {
        float *h = which ? *hb : *ha;
        for (size_t i = 0; i < n2; i++) {
            float v = (float)hpo_rng_normal(&r);
            if (bf16) {
                ((uint16_t *)tmp)[i] = eng_f32_to_bf16(v);
                v = eng_bf16_to_f32(((uint16_t *)tmp)[i]);
            } else {
                ((float *)tmp)[i] = v;
            }
            h[i] = v;
        }
        rc = eng_cuda_upload(g->cu, which ? g->b : g->a, tmp, n2 * es, err);
    }
    free(tmp);
    return rc;
}

/* The n^3 rate in TFLOP/s of one precision, with 64 output elements of the
 * timed product checked against double sums on the host (printed). */
static double gemm_peak(gemm_bufs *g, int bf16) {
    hpo_error err;
    float *ha = NULL, *hb = NULL;
    int n = g->n;
    double tflops = -1;
    if (gemm_fill(g, bf16, &ha, &hb, &err)) {
        fprintf(stderr, "bench_gpu_engine: GEMM operands: %s\n", err.message);
    } else {
        int shape[1][3] = {{n, n, n}};
        double s = gemm_seconds(g, bf16, shape, 1);
        double max_err = 0, max_ref = 0;
        hpo_rng r;
        hpo_rng_seed(&r, 7);
        for (int k = 0; s > 0 && k < 64; k++) {
            size_t i = hpo_rng_below(&r, (uint64_t)n), j = hpo_rng_below(&r, (uint64_t)n);
            float got;
            if (eng_cuda_download(g->cu, &got, g->c + i * (size_t)n + j, sizeof got, &err)) break;
            double ref = 0;
            for (int q = 0; q < n; q++) ref += (double)ha[i * (size_t)n + q] * hb[(size_t)q * n + j];
            max_err = fmax(max_err, fabs(got - ref));
            max_ref = fmax(max_ref, fabs(ref));
        }
        if (s > 0) {
            tflops = 2.0 * n * (double)n * n / s / 1e12;
            printf("engine GEMM %s %d^3: %.1f TFLOP/s (%.3f ms); 64 elements vs the CPU: max abs err %.2e of "
                   "max |ref| %.1f (rel %.1e)%s\n",
                   bf16 ? "bf16->f32" : "f32 (no TF32)", n, tflops, s * 1e3, max_err, max_ref,
                   max_ref > 0 ? max_err / max_ref : 0, max_err <= 1e-3 * max_ref ? "" : "  WRONG");
            fflush(stdout);
        }
    }
    free(ha);
    free(hb);
    return tflops;
}

/* Samples/s if a batch took only the model's GEMMs (dense layers: forward,
 * dW, and dX but for the first layer), through the same op; 0 when the
 * model has other layers with work (convolutions). */
static double gemm_bound(gemm_bufs *g, const eng_model *m, int B, int bf16) {
    int shapes[64][3], k = 0, first = 1;
    for (int i = 0; i < m->nlayers; i++) {
        const eng_layer *l = &m->layers[i];
        if (l->kind == ENG_L_FLATTEN || l->kind == ENG_L_DROPOUT || l->kind == ENG_L_ACT) continue;
        if (l->kind != ENG_L_DENSE || k + 3 > 64) return 0;
        int I = l->in_shape[l->in_rank - 1], O = l->units;
        if (I > g->n || O > g->n || B > g->n) return 0;
        memcpy(shapes[k++], (int[3]){B, I, O}, sizeof shapes[0]);
        memcpy(shapes[k++], (int[3]){I, B, O}, sizeof shapes[0]);
        if (!first) memcpy(shapes[k++], (int[3]){B, O, I}, sizeof shapes[0]);
        first = 0;
    }
    double s = k ? gemm_seconds(g, bf16, (const int(*)[3])shapes, k) : -1;
    return s > 0 ? B / s : 0;
}

/* ---- hpo's rows ---- */

typedef struct epoch_seen {
    double sps, train_acc, test_acc;
} epoch_seen;

static int on_epoch(const eng_epoch_report *r, void *user) {
    epoch_seen *e = user;
    if (r->epoch >= 2 || e->sps == 0) e->sps = r->samples_per_s;
    e->train_acc = r->train.accuracy;
    e->test_acc = r->has_val ? r->val.accuracy : NAN;
    return 0;
}

static int train_row(row *rw, const opts *o, eng_split *train, eng_split *test, gemm_bufs *g) {
    char path[PATH_MAX + 64];
    const model_def *def = NULL;
    for (int i = 0; i < NMODELS; i++)
        if (!strcmp(model_defs[i].name, rw->model)) def = &model_defs[i];
    snprintf(path, sizeof path, "%s/%s", root, def->path);
    json_error_t je;
    json_t *t = json_load_file(path, 0, &je);
    hpo_error err = {{0}, {0}};
    int shape[3] = {28, 28, 1}, rc;
    eng_model *m = NULL;
    if (!t || eng_model_new(t, NULL, 3, shape, 10, 1, &m, &err)) {
        fprintf(stderr, "bench_gpu_engine: %s: %s\n", path, t ? err.message : je.text);
        json_decref(t);
        return -1;
    }
    eng_train_opts to;
    eng_train_opts_init(&to);
    to.epochs = o->epochs;
    to.batch_size = rw->batch;
    to.precision = eng_precision_parse(rw->prec);
    to.cuda = 1;
    to.cuda_device = o->device;
    to.steps_per_execution = o->steps_per_execution;
    epoch_seen seen = {0, 0, NAN};
    to.on_epoch = on_epoch;
    to.user = &seen;
    eng_train_result res;
    rc = eng_train(m, train, test, &to, &res, &err);
    rw->flops = m->flops_per_sample;
    if (rc == HPO_EUNSUPPORTED) {
        snprintf(rw->why, sizeof rw->why, "unsupported: %.300s", err.message);
        rc = 0;
    } else if (rc) {
        snprintf(rw->why, sizeof rw->why, "failed: %.250s (%.50s)", err.message, err.field);
    } else {
        rw->ran = 1;
        rw->sps = seen.sps;
        rw->train_acc = seen.train_acc;
        rw->test_acc = seen.test_acc;
        rw->gemm_bound = gemm_bound(g, m, rw->batch, to.precision == ENG_PREC_BF16);
    }
    if (rw->ran)
        printf("hpo %s batch %d %s: %.0f samples/s, train acc %.4f, test acc %.4f, GEMM-bound %.0f samples/s\n",
               rw->model, rw->batch, rw->prec, rw->sps, rw->train_acc, rw->test_acc, rw->gemm_bound);
    else
        printf("hpo %s batch %d %s: %s\n", rw->model, rw->batch, rw->prec, rw->why);
    fflush(stdout);
    eng_model_free(m);
    json_decref(t);
    return rc ? -1 : 0;
}

/* ---- PyTorch's rows (one peer process for all of them) ---- */

static row *find_row(row *rows, int nr, const char *model, int batch, const char *prec) {
    for (int i = 0; i < nr; i++)
        if (!strcmp(rows[i].model, model) && rows[i].batch == batch && !strcmp(rows[i].prec, prec)) return &rows[i];
    return NULL;
}

/* reads the peer's JSON lines into rows; *peak gets its bf16 matmul rate */
static void take_line(const char *line, row *rows, int nr, double *peak, char *info, size_t ninfo) {
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    if (!j) {
        fprintf(stderr, "torch: %s", line); /* the peer's own messages pass through */
        return;
    }
    json_t *v;
    if (!json_object_get(j, "row") && (v = json_object_get(j, "error"))) {
        printf("PyTorch: %s\n", json_string_value(v));
    } else if ((v = json_object_get(j, "info"))) {
        char *s = json_dumps(v, JSON_COMPACT);
        snprintf(info, ninfo, "%s", s ? s : "?");
        free(s);
        printf("PyTorch: %s\n", info);
    } else if ((v = json_object_get(j, "gemm_bf16_tflops"))) {
        *peak = json_number_value(v);
        printf("PyTorch matmul bf16 %lld^3: %.1f TFLOP/s\n", (long long)json_integer_value(json_object_get(j, "gemm_bf16_n")),
               *peak);
    } else {
        const char *model = json_string_value(json_object_get(j, "row")),
                   *prec = json_string_value(json_object_get(j, "precision")),
                   *mode = json_string_value(json_object_get(j, "mode")),
                   *why = json_string_value(json_object_get(j, "error"));
        int batch = (int)json_integer_value(json_object_get(j, "batch"));
        row *rw = model && prec ? find_row(rows, nr, model, batch, prec) : NULL;
        int k = -1;
        for (int i = 0; mode && i < NMODES; i++)
            if (!strcmp(mode, mode_names[i])) k = i;
        if (!rw || k < 0) {
            fprintf(stderr, "torch: a line for no row: %s", line);
        } else if (why) {
            snprintf(rw->torch_why[k], sizeof rw->torch_why[k], "%s", why);
            printf("PyTorch %s batch %d %s %s: %s\n", model, batch, prec, mode, why);
        } else {
            rw->torch_sps[k] = json_number_value(json_object_get(j, "samples_per_s"));
            rw->torch_acc[k] = json_number_value(json_object_get(j, "test_acc"));
            rw->torch_warmup[k] = json_number_value(json_object_get(j, "warmup_s"));
            json_t *cg = json_object_get(j, "compiled_graphs");
            printf("PyTorch %s batch %d %s %s: %.0f samples/s, test acc %.4f (warm-up epoch %.1f s)%s\n", model, batch,
                   prec, mode, rw->torch_sps[k], rw->torch_acc[k], rw->torch_warmup[k],
                   cg && json_integer_value(cg) == 0 ? "  NOTE: dynamo compiled no graph, it ran eagerly" : "");
        }
    }
    fflush(stdout);
    json_decref(j);
}

static int run_torch(const opts *o, row *rows, int nr, double *peak, char *info, size_t ninfo) {
    char cmd[8192], *p = cmd, *end = cmd + sizeof cmd;
    p += bench_peer_python(p, (size_t)(end - p));
    p += snprintf(p, (size_t)(end - p), " '%s/torch_gpu.py' --device %s --epochs %d --batches %s --precisions %s",
                  bench_peers_dir(), o->torch_device, o->epochs, o->batches, o->precs);
    for (int i = 0; i < NMODELS; i++)
        if (bench_list_has(o->models, model_defs[i].name))
            p += snprintf(p, (size_t)(end - p), " --model '%s=%s/%s'", model_defs[i].name, root, model_defs[i].path);
    p += snprintf(p, (size_t)(end - p), " --modes %s --compile-mode %s --time-limit %.0f", o->torch_modes,
                  o->torch_compile, o->torch_time_limit);
    if (!strcmp(o->torch_device, "cuda")) p += snprintf(p, (size_t)(end - p), " --gemm-peak %d", o->gemm_n);
    if (o->limit) p += snprintf(p, (size_t)(end - p), " --limit %ld", o->limit);
    if (o->torch_max_batches) p += snprintf(p, (size_t)(end - p), " --max-batches %ld", o->torch_max_batches);
    if (p >= end - 1) return -1;
    fprintf(stderr, "torch: %s\n", cmd);
    fflush(NULL);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[16384];
    while (fgets(line, sizeof line, f)) take_line(line, rows, nr, peak, info, ninfo);
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the table ---- */

static void cell_sps(double v, const char *why) {
    if (v > 0) printf(" %.0f |", v);
    else printf(" %s |", why[0] ? "n/a" : "-");
}

static void print_table(const opts *o, row *rows, int nr, const double peak[2], double torch_peak, const char *dev) {
    printf("\n## bench_gpu_engine on %s, hpo with steps_per_execution %d\n", dev, o->steps_per_execution);
    char tp[32] = "n/a (not run)";
    if (torch_peak > 0) snprintf(tp, sizeof tp, "%.1f TFLOP/s", torch_peak);
    if (peak[1] > 0 || torch_peak > 0)
        printf("GEMM peak (%d^3, random operands): engine cuBLASLt bf16 %.1f TFLOP/s, f32 %.1f TFLOP/s; PyTorch bf16 "
               "matmul %s\n",
               o->gemm_n, peak[1], peak[0], tp);
    printf("\n");
    printf("| model | batch | precision | hpo samples/s |");
    for (int k = 0; k < NMODES; k++) printf(" %s |", mode_titles[k]);
    printf(" hpo / best PyTorch | hpo GEMM-bound samples/s | hpo / GEMM-bound | hpo TFLOP/s | share of the GEMM peak "
           "| test acc hpo / PyTorch best |\n|---|---|---|---|");
    for (int k = 0; k < NMODES; k++) printf("---|");
    printf("---|---|---|---|---|---|\n");
    int met = 0, compared = 0;
    for (int i = 0; i < nr; i++) {
        row *r = &rows[i];
        int best = -1;
        for (int k = 0; k < NMODES; k++)
            if (r->torch_sps[k] > 0 && (best < 0 || r->torch_sps[k] > r->torch_sps[best])) best = k;
        printf("| %s | %d | %s |", r->model, r->batch, r->prec);
        if (r->ran) printf(" %.0f |", r->sps);
        else if (!strncmp(r->why, "unsupported", 11)) printf(" unsupported |");
        else if (!strncmp(r->why, "not run", 7)) printf(" not run |");
        else printf(" %s |", r->why[0] ? "failed" : "-");
        for (int k = 0; k < NMODES; k++) cell_sps(r->torch_sps[k], r->torch_why[k]);
        double tflops = r->ran ? r->sps * r->flops / 1e12 : 0, pk = peak[!strcmp(r->prec, "mixed_bf16")];
        if (r->ran && best >= 0) {
            compared++;
            met += r->sps >= 2 * r->torch_sps[best];
            printf(" %.2fx (vs %s) |", r->sps / r->torch_sps[best], mode_names[best]);
        } else {
            printf(" - |");
        }
        if (r->ran && r->gemm_bound > 0) printf(" %.0f | %.0f%% |", r->gemm_bound, 100 * r->sps / r->gemm_bound);
        else printf(" - | - |");
        if (r->ran) printf(" %.2f | %.1f%% |", tflops, pk > 0 ? 100 * tflops / pk : 0);
        else printf(" - | - |");
        if (r->ran) printf(" %.4f /", r->test_acc);
        else printf(" - /");
        if (best >= 0) printf(" %.4f |\n", r->torch_acc[best]);
        else printf(" - |\n");
    }
    printf("\nshare of the GEMM peak: the row's training FLOP/s (forward, dW, dX but the first layer's) over the "
           "engine's %d^3 GEMM rate of its precision (bf16 for mixed_bf16, f32 without TF32 for fp32)\n", o->gemm_n);
    printf("goal >= 2x PyTorch's best mode: met in %d of %d compared rows\n", met, compared);
    for (int i = 0; i < nr; i++)
        if (!strcmp(rows[i].model, "wide") && !strcmp(rows[i].prec, "mixed_bf16") && rows[i].ran && peak[1] > 0)
            printf("goal >= 60%% of the bf16 GEMM peak on the wide MLP: batch %d reaches %.1f%%\n", rows[i].batch,
                   100 * rows[i].sps * rows[i].flops / 1e12 / peak[1]);
    const char *last = "";
    for (int i = 0; i < nr; i++) /* each distinct reason once */
        if (rows[i].why[0] && strcmp(rows[i].why, last)) {
            printf("hpo %s (batch %d %s): %s\n", rows[i].model, rows[i].batch, rows[i].prec, rows[i].why);
            last = rows[i].why;
        }
    for (int i = 0; i < nr; i++)
        for (int k = 0; k < NMODES; k++)
            if (rows[i].torch_why[k][0])
                printf("PyTorch %s %s batch %d %s: %s\n", mode_names[k], rows[i].model, rows[i].batch, rows[i].prec,
                       rows[i].torch_why[k]);
}

/* Fashion-MNIST: $HPO_FASHION_MNIST_DIR, Debian's folder, or the bundle's copy */
static void find_fmnist(void) {
    const char *env = getenv("HPO_FASHION_MNIST_DIR");
    if ((env && *env) || access("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz", R_OK) == 0) return;
    char dir[PATH_MAX + 64], probe[PATH_MAX + 128];
    snprintf(dir, sizeof dir, "%s/.gpu-bundle/data/fashion-mnist", root);
    snprintf(probe, sizeof probe, "%s/train-labels-idx1-ubyte.gz", dir);
    if (access(probe, R_OK) == 0) setenv("HPO_FASHION_MNIST_DIR", dir, 1);
}

int main(int argc, char **argv) {
    opts o;
    if (parse(argc, argv, &o)) {
        usage(argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (bench_find_root(root, sizeof root)) {
        fprintf(stderr, "bench_gpu_engine: cannot find engine/models (run from the repository)\n");
        return 1;
    }
    hpo_error err = {{0}, {0}};
    char dev[512] = "the CPU (PyTorch only)", backend[256];
    eng_gpu_describe(backend, sizeof backend);
    int n = 0;
    if (!o.torch_only) {
        if (eng_gpu_count(&n, &err)) {
            printf("bench_gpu_engine: skipped: %s (CUDA backend: %s)\n", err.message, backend);
            return 77;
        }
        eng_gpu_info gi;
        if (eng_gpu_info_get(o.device, &gi, &err)) {
            fprintf(stderr, "bench_gpu_engine: %s\n", err.message);
            return 2;
        }
        snprintf(dev, sizeof dev, "cuda:%d %s (sm_%d%d, %d SMs, %.1f GiB); %s", o.device, gi.name, gi.cc_major,
                 gi.cc_minor, gi.multiprocessors, (double)gi.total_bytes / (1 << 30), backend);
        printf("device: %s\n", dev);
        if (o.check_device) return 0;
    }
    find_fmnist();
    eng_dataset *ds = NULL, *ts = NULL;
    eng_split train = {0}, test = {0};
    eng_split_spec spec = {.limit = (size_t)o.limit};
    if (eng_dataset_cache_get("fashion-mnist", "train", &ds, &err) ||
        eng_dataset_cache_get("fashion-mnist", "test", &ts, &err) || eng_split_make(ds, &spec, &train, NULL, &err) ||
        eng_split_all(ts, &test)) {
        fprintf(stderr, "bench_gpu_engine: Fashion-MNIST: %s (set HPO_FASHION_MNIST_DIR)\n", err.message);
        return 1;
    }
    row rows[64];
    int nr = 0, failed = 0;
    const char *pnames[] = {"fp32", "mixed_bf16"};
    int blist[] = {128, 256, 512, 1024};
    for (int mi = 0; mi < NMODELS; mi++)
        for (int bi = 0; bi < 4; bi++)
            for (int pi = 0; pi < 2; pi++) {
                char bs[16];
                snprintf(bs, sizeof bs, "%d", blist[bi]);
                if (!bench_list_has(o.models, model_defs[mi].name) || !bench_list_has(o.batches, bs) ||
                    !bench_list_has(o.precs, pnames[pi]))
                    continue;
                rows[nr] = (row){.model = model_defs[mi].name, .prec = pnames[pi], .batch = blist[bi]};
                nr++;
            }
    if (!nr) {
        fprintf(stderr, "bench_gpu_engine: no rows: models %s, batches %s (128, 256, 512, 1024), precisions %s\n",
                o.models, o.batches, o.precs);
        return 2;
    }
    /* PyTorch first: its time is bounded (--torch-time-limit) and its lines
     * are printed as they come, so a crash or hang of the engine's rows
     * after it (the device path's first runs) still leaves them */
    double peak[2] = {0, 0}, torch_peak = 0;
    char info[512] = "";
    if (o.torch) {
        int prc = run_torch(&o, rows, nr, &torch_peak, info, sizeof info);
        if (prc) printf("PyTorch peer exited with %d\n", prc);
        if (o.torch_only && prc == 77) return 77; /* no torch (or no CUDA for it): said on the peer's line */
        if (o.torch_only) { /* the peer check: every row of every mode asked for has a figure */
            failed |= prc != 0;
            for (int i = 0; i < nr; i++)
                for (int k = 0; k < NMODES; k++)
                    if (bench_list_has(o.torch_modes, mode_names[k]) && !(rows[i].torch_sps[k] > 0) &&
                        strncmp(rows[i].torch_why[k], "unsupported", 11) != 0) {
                        printf("PyTorch %s %s batch %d %s: no figure\n", mode_names[k], rows[i].model,
                               rows[i].batch, rows[i].prec);
                        failed = 1;
                    }
        }
    }
    if (!o.torch_only) {
        gemm_bufs g = {.n = o.gemm_n};
        size_t n2 = (size_t)g.n * (size_t)g.n;
        if (eng_cuda_open(o.device, 0, &g.cu, &err) || eng_cuda_alloc(g.cu, n2 * 4, &g.a, &err) ||
            eng_cuda_alloc(g.cu, n2 * 4, &g.b, &err) || eng_cuda_alloc(g.cu, n2 * 4, (void **)&g.c, &err)) {
            fprintf(stderr, "bench_gpu_engine: %s\n", err.message);
            return 1;
        }
        peak[0] = gemm_peak(&g, 0);
        peak[1] = gemm_peak(&g, 1); /* last: the operands stay bf16 for the GEMM-bound figures of mixed_bf16 */
        for (int i = 0; i < nr; i++) failed |= train_row(&rows[i], &o, &train, &test, &g) != 0;
        eng_cuda_free(g.cu, g.a), eng_cuda_free(g.cu, g.b), eng_cuda_free(g.cu, g.c);
        eng_cuda_close(g.cu);
    } else {
        for (int i = 0; i < nr; i++) snprintf(rows[i].why, sizeof rows[i].why, "not run (--torch-only)");
    }
    print_table(&o, rows, nr, peak, torch_peak, o.torch_only ? info : dev);
    eng_split_clear(&train);
    eng_split_clear(&test);
    eng_dataset_release(ds);
    eng_dataset_release(ts);
    return failed ? 1 : 0;
}
