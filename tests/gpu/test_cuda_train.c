/* test_cuda_train.c - eng_train on the device (train_cuda.c) against the
 * same run on the CPU: an MLP on a synthetic uint8 dataset (64 values, 4
 * classes, 640 rows, 128 of them for validation), same seed.
 * - fp32 without dropout: every epoch's training and validation loss and
 *   accuracy within TOL_RUN (relative) and the final weights and optimiser
 *   state within TOL_RUN (normwise): only the order of f32 sums differs
 *   (cuBLASLt's GEMM reductions, the device's metric sums), which a
 *   different batch order, a missing bias or a wrong update would exceed by
 *   orders of magnitude.
 * - with dropout 0.3: the same, and the model's generator ends in the same
 *   state (the same keys drawn, so the same masks).
 * - checkpoints: 2 epochs on the GPU, the 3rd resumed on the CPU, the 4th
 *   resumed on the GPU again, against 4 epochs on the CPU.
 * - mixed_bf16 against the CPU's mixed_bf16 within TOL_BF16 (when the CPU
 *   backend has bf16 GEMMs).
 * - mixed_fp16 against the CPU's within TOL_BF16 (with dropout), with the
 *   same loss scale and skipped steps every epoch; and on a regression
 *   whose first steps overflow fp16 (skipped on both, the scale halved),
 *   the same skips, scale and weights, on one replica and on two.
 * - steps_per_execution: with batches of 48 (10 whole, one of 32), K = 4
 *   (two graph replays of 4 steps, then 3 steps one by one) and K = 1000
 *   (more than an epoch: every step enqueued one by one) end with weights,
 *   optimiser state and generator bit-identical to K = 1 (a graph replay
 *   per step), and K = 4 within TOL_RUN of the CPU; the same for two
 *   replicas on one GPU (K steps of both in one graph) against K = 1 and
 *   the CPU's two threads.
 * - a CNN (augment: shift 1 and flip; conv2d 16 same relu, conv2d 8 valid
 *   relu + maxpool2d, dropout, dense) on the same data as 8x8 images: fp32
 *   within TOL_CNN_RUN of the CPU (the conv through im2col and cuBLASLt
 *   there, oneDNN here) and the generator in the same state (the same
 *   shifts and masks), mixed_fp16 within TOL_BF16, and mixed_bf16 within
 *   TOL_CNN_BF16 (its second conv, 16 input channels, in bf16 on both
 *   sides) when the CPU backend has bf16 GEMMs; each tolerance widened to
 *   CNN_SPREAD_FACTOR times the CPU's own spread where that is larger (the
 *   same CPU run from first weights one ulp apart: cnn_both);
 *   the same with a batchnorm after the first conv2d and global_avg_pool
 *   in place of maxpool2d and flatten, and with residual blocks (conv,
 *   batchnorm, relu, conv, batchnorm around an identity; one conv to 8
 *   channels around a 1x1 projection) before the pooling. With a
 *   batchnorm, the parameters of zero gradient (a conv bias before it) are
 *   left out of the weight comparison, the running statistics get
 *   TOL_BN_STATS, and the validation loss is not compared; no CNN's
 *   optimiser state is (compare_cnn_weights says why). Every CNN
 *   comparison runs and prints before the test fails, so one device run
 *   reports them all.
 * - data parallel: two replicas on one GPU (the device-side sum) against
 *   the CPU's two threads within TOL_RUN (fp32) and TOL_BF16 (mixed_bf16),
 *   the generator in the same state, and in mixed_fp16 (without dropout)
 *   against the CPU's one thread; across GPUs 0 and 1 (NCCL) too where the
 *   machine has two.
 * - allow_tf32: the fp32 run with TF32 GEMMs within TOL_TF32_RUN of the CPU's
 *   f32 run (losses and weights; TF32 rounds each product's operands to 10
 *   mantissa bits).
 * Skipped (77) without a GPU. */
#include "gpu_test.h"

#include <jansson.h>
#include <unistd.h>

#include "data.h"
#include "model.h"
#include "train.h"

#define TOL_RUN 1e-3
#define TOL_TF32_RUN 2e-2
/* a CNN in mixed_bf16: two CPU runs whose first weights differ by one ulp
 * already end 1e-2 apart (bf16 rounds to 8 bits, and the conv's sums are
 * long) */
#define TOL_CNN_BF16 5e-2
/* a CNN in fp32: a maxpool's winner or a relu's sign may flip on a near tie
 * when sums run in another order, a discrete change that no spread of
 * nearby runs predicts (6e-4 apart under the emulation with OpenBLAS's
 * Haswell kernel, while first weights one ulp apart end 4e-7 apart); see
 * cnn_both for the rest */
#define TOL_CNN_RUN 1e-2
#define TOL_BN_STATS 2e-2
#define EPOCHS 4
#define NI 64
#define NK 4

static eng_dataset *synth(size_t n) {
    int64_t shape[1] = {NI};
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_new("synthetic", n, 1, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    ds->x_scale = 1.0f / 255.0f;
    ds->n_classes = NK;
    uint8_t *x = ds->x;
    hpo_rng r;
    hpo_rng_seed(&r, 11);
    for (size_t i = 0; i < n; i++) {
        int c = (int)hpo_rng_below(&r, NK);
        ds->y_class[i] = c;
        for (int p = 0; p < NI; p++) /* a class's pixels are brighter in its quarter, plus noise */
            x[i * NI + p] = (uint8_t)((p / (NI / NK) == c ? 120 : 40) + hpo_rng_below(&r, 100));
    }
    return ds;
}

/* the same rows as 8x8 single-channel images */
static eng_dataset *synth_images(size_t n) {
    eng_dataset *flat = synth(n), *ds = NULL;
    int64_t shape[3] = {8, 8, 1};
    assert_int_equal(eng_dataset_new("images", n, 3, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    memcpy(ds->x, flat->x, n * NI);
    memcpy(ds->y_class, flat->y_class, n * sizeof(int32_t));
    ds->x_scale = flat->x_scale;
    ds->n_classes = NK;
    eng_dataset_release(flat);
    return ds;
}

typedef struct curve {
    int n;
    eng_metrics train[EPOCHS], val[EPOCHS];
    double scale[EPOCHS]; /* mixed_fp16's loss scale at the epoch's end */
    long skipped[EPOCHS]; /* and its skipped steps */
} curve;

static int record(const eng_epoch_report *r, void *user) {
    curve *c = user;
    if (r->epoch >= 1 && r->epoch <= EPOCHS) {
        c->train[r->epoch - 1] = r->train;
        c->val[r->epoch - 1] = r->val;
        c->scale[r->epoch - 1] = r->loss_scale;
        c->skipped[r->epoch - 1] = r->skipped_steps;
        if (r->epoch > c->n) c->n = r->epoch;
    }
    return 0;
}

typedef struct fx {
    eng_dataset *ds;
    eng_split tr, va;
    char dir[32];
} fx;

/* f's dataset (ds, now f's) and its splits: 128 rows for validation */
static void fx_splits(fx *f, eng_dataset *ds) {
    hpo_error err = {{0}, {0}};
    eng_split_spec spec = {.val_count = 128};
    f->ds = ds;
    assert_int_equal(eng_split_make(f->ds, &spec, &f->tr, &f->va, &err), 0);
}

static void fx_clear(fx *f) {
    eng_split_clear(&f->tr);
    eng_split_clear(&f->va);
    eng_dataset_release(f->ds);
}

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    fx_splits(f, synth(640));
    snprintf(f->dir, sizeof f->dir, "/tmp/hpo_ctrain_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    char p[96];
    snprintf(p, sizeof p, "%s/ckpt.safetensors", f->dir);
    unlink(p);
    rmdir(f->dir);
    fx_clear(f);
    free(f);
    return 0;
}

static eng_model *mlp(double dropout, const char *layer0) {
    char t[512];
    snprintf(t, sizeof t,
             "{\"layers\":[%s{\"dense\":{\"units\":48,\"activation\":\"relu\"}},{\"dropout\":{\"rate\":%g}},"
             "{\"dense\":{\"units\":32,\"activation\":\"gelu\"}},{\"dense\":{\"units\":%d,\"activation\":\"softmax\"}}],"
             "\"loss\":\"sparse_categorical_crossentropy\",\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.003}}",
             layer0, dropout, NK);
    json_t *j = json_loads(t, 0, NULL);
    assert_non_null(j);
    int shape[3] = {NI, 0, 0}, rank = 1;
    if (layer0[0]) shape[0] = 8, shape[1] = 8, shape[2] = 1, rank = 3;
    eng_model *m = NULL;
    hpo_error err = {{0}, {0}};
    int rc = eng_model_new(j, NULL, rank, shape, NK, 7, &m, &err);
    if (rc) printf("model: %s (%s)\n", err.message, err.field);
    assert_int_equal(rc, 0);
    json_decref(j);
    return m;
}

static void opts(fx *f, eng_train_opts *o, int cuda, int epochs, int resume, int precision, curve *c) {
    eng_train_opts_init(o);
    o->epochs = epochs;
    o->batch_size = 64;
    o->threads = 1;
    o->seed = 5;
    o->prefetch = 0;
    o->precision = precision;
    o->cuda = cuda;
    o->cuda_device = getenv("HPO_TEST_DEVICE") ? atoi(getenv("HPO_TEST_DEVICE")) : 0;
    o->checkpoint_dir = resume >= 0 ? f->dir : NULL;
    o->checkpoint_name = "ckpt.safetensors";
    o->checkpoint_durable = 0;
    o->resume = resume > 0;
    o->on_epoch = record;
    o->user = c;
}

static void train_ok(eng_model *m, fx *f, const eng_train_opts *o, eng_train_result *res) {
    hpo_error err = {{0}, {0}};
    int rc = eng_train(m, &f->tr, &f->va, o, res, &err);
    if (rc) printf("eng_train (%s): %s (%s)\n", o->cuda ? "cuda" : "cpu", err.message, err.field);
    assert_int_equal(rc, 0);
}

/* A failed comparison stops the test, except in test_cnn (soft), which
 * counts them (failures) so that one device run reports every variant. */
static int soft, failures;

static void verdict(int ok) {
    if (soft) failures += !ok;
    else assert_true(ok);
}

static void close_ok(const char *what, const float *a, const float *r, size_t n, double tol) {
    double e = rel_err(a, r, n);
    printf("  %-44s max rel err %.3e (tol %.1e)%s\n", what, e, tol, e <= tol ? "" : "  FAIL");
    verdict(e <= tol);
}

static void exact_ok(const char *what, const void *a, const void *r, size_t bytes) {
    int same = memcmp(a, r, bytes) == 0;
    printf("  %-44s %s\n", what, same ? "bit-identical" : "DIFFERENT  FAIL");
    verdict(same);
}

static void check_metric(const char *what, int epoch, double a, double r, double tol) {
    double e = fabs(a - r) / fmax(fabs(r), 1e-12);
    printf("  epoch %d %-30s gpu %.7f cpu %.7f max rel err %.3e (tol %.1e)%s\n", epoch, what, a, r, e, tol,
           e <= tol ? "" : "  FAIL");
    verdict(e <= tol);
}

/* with_val: the validation loss and accuracy too (not for a batchnorm
 * model: see compare_cnn_weights) */
static void compare(const curve *g, const curve *c, int from, int to, double tol, int with_val) {
    for (int e = from; e < to; e++) {
        int same = g->scale[e] == c->scale[e] && g->skipped[e] == c->skipped[e];
        printf("  epoch %d loss scale gpu %g cpu %g, skipped steps gpu %ld cpu %ld%s\n", e + 1, g->scale[e], c->scale[e],
               g->skipped[e], c->skipped[e], same ? "" : "  FAIL");
        verdict(same);
        check_metric("train loss", e + 1, g->train[e].loss, c->train[e].loss, tol);
        if (!with_val) continue;
        check_metric("val loss", e + 1, g->val[e].loss, c->val[e].loss, tol);
        /* accuracy: a sample or two may flip on a near tie */
        verdict(fabs(g->val[e].accuracy - c->val[e].accuracy) <= 2.0 / 128 + 1e-12);
    }
}

static void compare_models(const eng_model *g, const eng_model *c, double tol) {
    close_ok("final weights", g->params, c->params, c->nparams, tol);
    close_ok("final optimiser state", g->opt_state, c->opt_state, c->nstate, tol);
}

/* A CNN's final weights, on the parameters whose gradient carries
 * information. A conv bias that feeds a batchnorm has a true gradient of
 * zero: Adam turns the rounding noise there into full steps of either
 * sign, and two CPU runs whose first weights differ by one ulp already
 * differ there by more than any tolerance (and so do the running means and
 * the validation loss that inherit it). Those parameters (Adam's v on the
 * CPU below 1e-6 of its largest) are left out. The optimiser state is not
 * compared: its first moment follows the last steps' gradients, whose
 * small entries differ by more than the tolerance with a conv's sums in
 * another order (up to 7e-2 under tests/unit/engine/cuda_emulated.c, whose
 * weights agree within it); the MLP tests compare it. */
static double cnn_weights_err(const eng_model *g, const eng_model *c, size_t *compared) {
    size_t n = c->nparams, k = 0;
    const float *vc = c->opt.kind == ENG_OPT_ADAM && c->nstate == 2 * n ? c->opt_state + n : NULL;
    float vmax = 0.0f;
    for (size_t i = 0; vc && i < n; i++) vmax = fmaxf(vmax, vc[i]);
    float *a = malloc(2 * n * sizeof *a), *b = a + n;
    assert_non_null(a);
    for (size_t i = 0; i < n; i++) {
        if (vc && vc[i] < 1e-6f * vmax) continue;
        a[k] = g->params[i], b[k] = c->params[i];
        k++;
    }
    double e = rel_err(a, b, k);
    free(a);
    if (compared) *compared = k;
    return e;
}

static void compare_cnn_weights(const eng_model *g, const eng_model *c, double tol) {
    size_t k;
    double e = cnn_weights_err(g, c, &k);
    printf("  %zu of %zu parameters compared (the rest: a gradient of zero)\n", k, c->nparams);
    printf("  %-44s max rel err %.3e (tol %.1e)%s\n", "final weights", e, tol, e <= tol ? "" : "  FAIL");
    verdict(e <= tol);
}

/* The largest relative difference of two runs' epoch losses (training;
 * validation too where with_val) and CNN weights. */
static double cnn_spread(const curve *a, const curve *b, const eng_model *ma, const eng_model *mb, int with_val) {
    double s = cnn_weights_err(ma, mb, NULL);
    for (int e = 0; e < EPOCHS; e++) {
        s = fmax(s, fabs(a->train[e].loss - b->train[e].loss) / fmax(fabs(b->train[e].loss), 1e-12));
        if (with_val) s = fmax(s, fabs(a->val[e].loss - b->val[e].loss) / fmax(fabs(b->val[e].loss), 1e-12));
    }
    return s;
}

/* the same run on both, without a checkpoint */
static void both(fx *f, double dropout, int precision, double tol) {
    curve cg = {0}, cc = {0};
    eng_train_opts o;
    eng_train_result rg, rc;
    eng_model *mg = mlp(dropout, ""), *mc = mlp(dropout, "");
    opts(f, &o, 1, EPOCHS, -1, precision, &cg);
    train_ok(mg, f, &o, &rg);
    opts(f, &o, 0, EPOCHS, -1, precision, &cc);
    train_ok(mc, f, &o, &rc);
    assert_int_equal(cg.n, EPOCHS);
    assert_int_equal(rg.epochs_run, EPOCHS);
    assert_int_equal(mg->precision, precision); /* the host model left as a CPU run leaves it */
    compare(&cg, &cc, 0, EPOCHS, tol, 1);
    compare_models(mg, mc, tol);
    check_exact("dropout generator state", mg->rng.s, mc->rng.s, sizeof mg->rng.s);
    eng_model_free(mg);
    eng_model_free(mc);
}

static void test_fp32(void **state) { both(*state, 0.0, ENG_PREC_FP32, TOL_RUN); }

static void test_tf32(void **state) {
    fx *f = *state;
    curve cg = {0}, cc = {0};
    eng_train_opts o;
    eng_train_result rg, rc;
    eng_model *mg = mlp(0.0, ""), *mc = mlp(0.0, "");
    opts(f, &o, 1, EPOCHS, -1, ENG_PREC_FP32, &cg);
    o.allow_tf32 = 1;
    train_ok(mg, f, &o, &rg);
    opts(f, &o, 0, EPOCHS, -1, ENG_PREC_FP32, &cc);
    train_ok(mc, f, &o, &rc);
    compare(&cg, &cc, 0, EPOCHS, TOL_TF32_RUN, 1);
    compare_models(mg, mc, TOL_TF32_RUN);
    eng_model_free(mg);
    eng_model_free(mc);
}

static void test_dropout(void **state) { both(*state, 0.3, ENG_PREC_FP32, TOL_RUN); }

static void test_bf16(void **state) {
    eng_model *probe = mlp(0.0, "");
    int has = probe->be->gemm_bf16 != NULL;
    eng_model_free(probe);
    if (!has) {
        printf("  mixed_bf16: the CPU backend has no bf16 GEMM here, comparison skipped\n");
        return;
    }
    both(*state, 0.0, ENG_PREC_BF16, TOL_BF16);
}

/* mixed_fp16 (model_run.c's roundings, fp16 GEMMs, the loss scale on the
 * device) against the CPU's, with dropout */
static void test_fp16(void **state) { both(*state, 0.3, ENG_PREC_FP16, TOL_BF16); }

/* regression targets in the hundreds: 2^15 times their loss gradient
 * overflows fp16, so the first steps are skipped and the scale halves until
 * the gradients fit; the device must skip the same steps, end at the same
 * scale and, since skipped steps do not advance Adam's step or the
 * schedule, with the CPU's weights */
static void test_fp16_overflow(void **state) {
    fx *f = *state;
    eng_dataset *ds = NULL;
    int64_t shape[1] = {NI};
    assert_int_equal(eng_dataset_new("regression", f->ds->n, 1, shape, ENG_DATA_U8, ENG_DATA_Y_TARGET, 1, &ds), 0);
    memcpy(ds->x, f->ds->x, f->ds->n * NI);
    ds->x_scale = f->ds->x_scale;
    for (size_t i = 0; i < ds->n; i++) ds->y_target[i] = 300.0f + 100.0f * (float)f->ds->y_class[i];
    fx rf = *f; /* its checkpoint directory; the regression data and splits of its own */
    fx_splits(&rf, ds);
    hpo_error err = {{0}, {0}};
    const char *t = "{\"layers\":[{\"dense\":{\"units\":32,\"activation\":\"relu\"}},{\"dense\":{\"units\":1}}],"
                    "\"loss\":\"mse\",\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.05}}";
    json_t *j = json_loads(t, 0, NULL);
    int in_shape[3] = {NI, 0, 0};
    eng_model *mg = NULL, *mc = NULL;
    assert_int_equal(eng_model_new(j, NULL, 1, in_shape, 0, 7, &mg, &err), 0);
    assert_int_equal(eng_model_new(j, NULL, 1, in_shape, 0, 7, &mc, &err), 0);
    curve cg = {0}, cc = {0};
    eng_train_opts o;
    eng_train_result rg, rc;
    opts(&rf, &o, 1, EPOCHS, -1, ENG_PREC_FP16, &cg);
    train_ok(mg, &rf, &o, &rg);
    opts(&rf, &o, 0, EPOCHS, -1, ENG_PREC_FP16, &cc);
    train_ok(mc, &rf, &o, &rc);
    assert_true(cc.skipped[0] >= 3); /* the test makes the CPU skip */
    compare(&cg, &cc, 0, EPOCHS, TOL_BF16, 1);
    compare_models(mg, mc, TOL_BF16);
    /* two replicas on the GPU: the summed gradients overflow where the
     * batch's do, so they skip the same steps */
    curve cr = {0};
    eng_model *mr = NULL;
    assert_int_equal(eng_model_new(j, NULL, 1, in_shape, 0, 7, &mr, &err), 0);
    json_decref(j);
    opts(&rf, &o, 1, EPOCHS, -1, ENG_PREC_FP16, &cr);
    o.cuda_replicas = 2;
    o.cuda_devices[0] = o.cuda_devices[1] = o.cuda_device;
    train_ok(mr, &rf, &o, &rg);
    printf("  two replicas on cuda:%d against the CPU:\n", o.cuda_device);
    compare(&cr, &cc, 0, EPOCHS, TOL_BF16, 1);
    compare_models(mr, mc, TOL_BF16);
    eng_model_free(mr);
    eng_model_free(mg);
    eng_model_free(mc);
    fx_clear(&rf);
}

/* two data-parallel replicas on GPUs dev0 and dev1 (the same GPU: one
 * context and the device-side sum; two: NCCL) against the CPU's two threads
 * (replicas.h: the same split of each batch, the same derived generators,
 * the same order of the gradient sum), with dropout and a last batch of
 * one row (the first replica alone on both). mixed_fp16, which the CPU
 * never splits (train.c's wants_data_parallel), runs without dropout
 * against the CPU on one thread: the same loss scale and skipped steps,
 * the rest within tol (each replica's loss gradient is its share of the
 * batch's, rounded to fp16 before the sum) */
static void replicas_vs_cpu(int dev0, int dev1, int precision, double tol) {
    fx f = {0};
    fx_splits(&f, synth(641));
    curve cg = {0}, cc = {0};
    eng_train_opts o;
    eng_train_result rg, rc;
    int fp16 = precision == ENG_PREC_FP16;
    eng_model *mg = mlp(fp16 ? 0.0 : 0.3, ""), *mc = mlp(fp16 ? 0.0 : 0.3, "");
    opts(&f, &o, 1, EPOCHS, -1, precision, &cg);
    o.cuda_replicas = 2;
    o.cuda_devices[0] = dev0;
    o.cuda_devices[1] = dev1;
    train_ok(mg, &f, &o, &rg);
    opts(&f, &o, 0, EPOCHS, -1, precision, &cc);
    o.threads = fp16 ? 1 : 2;
    train_ok(mc, &f, &o, &rc);
    printf("  replicas on cuda:%d and cuda:%d, %s: val accuracy gpu %.4f cpu (%d threads) %.4f\n", dev0, dev1,
           eng_precision_name(precision), cg.val[EPOCHS - 1].accuracy, o.threads, cc.val[EPOCHS - 1].accuracy);
    compare(&cg, &cc, 0, EPOCHS, tol, 1);
    compare_models(mg, mc, tol);
    if (!fp16)
        check_exact("generator state (the replicas' keys derived from it)", mg->rng.s, mc->rng.s, sizeof mg->rng.s);
    eng_model_free(mg);
    eng_model_free(mc);
    fx_clear(&f);
}

static void test_replicas(void **state) {
    (void)state;
    int dev = getenv("HPO_TEST_DEVICE") ? atoi(getenv("HPO_TEST_DEVICE")) : 0, n = 0;
    replicas_vs_cpu(dev, dev, ENG_PREC_FP32, TOL_RUN);
    eng_model *probe = mlp(0.0, "");
    int has = probe->be->gemm_bf16 != NULL;
    eng_model_free(probe);
    if (has) replicas_vs_cpu(dev, dev, ENG_PREC_BF16, TOL_BF16);
    replicas_vs_cpu(dev, dev, ENG_PREC_FP16, TOL_BF16);
    hpo_error err = {{0}, {0}};
    if (eng_gpu_count(&n, &err) == 0 && n >= 2) {
        replicas_vs_cpu(0, 1, ENG_PREC_FP32, TOL_RUN);
        replicas_vs_cpu(0, 1, ENG_PREC_FP16, TOL_BF16);
    } else {
        printf("  one GPU here: replicas across GPUs (NCCL) not run\n");
    }
}

/* GPU epochs 1-2, CPU epoch 3, GPU epoch 4 (each resumed from the last
 * checkpoint, a fresh model each time) against 4 CPU epochs */
static void test_checkpoint_moves(void **state) {
    fx *f = *state;
    curve cm = {0}, cc = {0};
    eng_train_opts o;
    eng_train_result r;
    int dev[3] = {1, 0, 1}, upto[3] = {2, 3, 4};
    eng_model *m = NULL;
    for (int leg = 0; leg < 3; leg++) {
        eng_model_free(m);
        m = mlp(0.3, "");
        opts(f, &o, dev[leg], upto[leg], leg > 0, ENG_PREC_FP32, &cm);
        train_ok(m, f, &o, &r);
        assert_int_equal(r.start_epoch, leg ? upto[leg - 1] : 0);
        assert_int_equal(r.epochs_run, upto[leg]);
    }
    eng_model *mc = mlp(0.3, "");
    opts(f, &o, 0, EPOCHS, -1, ENG_PREC_FP32, &cc);
    train_ok(mc, f, &o, &r);
    compare(&cm, &cc, 0, EPOCHS, TOL_RUN, 1);
    compare_models(m, mc, TOL_RUN);
    check_exact("dropout generator state", m->rng.s, mc->rng.s, sizeof m->rng.s);
    eng_model_free(m);
    eng_model_free(mc);
}

/* replicas: 0 (one model), else two on this test's GPU */
static eng_model *train_spe(fx *f, int cuda, int spe, int replicas, curve *c) {
    eng_train_opts o;
    eng_train_result r;
    eng_model *m = mlp(0.3, "");
    opts(f, &o, cuda, 2, -1, ENG_PREC_FP32, c);
    o.batch_size = 48;
    o.steps_per_execution = spe;
    if (replicas) {
        o.cuda_replicas = 2;
        o.cuda_devices[0] = o.cuda_devices[1] = o.cuda_device;
        o.threads = cuda ? 1 : 2; /* the CPU's two data-parallel threads */
    }
    train_ok(m, f, &o, &r);
    assert_int_equal(r.epochs_run, 2);
    return m;
}

/* K = 4 against K = 1 bit for bit, and against the CPU within TOL_RUN;
 * what names the runs (one model, replicas) */
static void check_spe(const char *what, const eng_model *m1, const eng_model *m4, const curve *c4, const eng_model *mc,
                      const curve *cc) {
    char l[96];
    snprintf(l, sizeof l, "%s, K=4 against K=1: weights", what);
    check_exact(l, m4->params, m1->params, m1->nparams * sizeof(float));
    snprintf(l, sizeof l, "%s, K=4 against K=1: optimiser state", what);
    check_exact(l, m4->opt_state, m1->opt_state, m1->nstate * sizeof(float));
    snprintf(l, sizeof l, "%s, K=4 against K=1: generator", what);
    check_exact(l, m4->rng.s, m1->rng.s, sizeof m1->rng.s);
    compare(c4, cc, 0, 2, TOL_RUN, 1);
    compare_models(m4, mc, TOL_RUN);
    snprintf(l, sizeof l, "%s, K=4 against the CPU: generator", what);
    check_exact(l, m4->rng.s, mc->rng.s, sizeof mc->rng.s);
}

static void test_steps_per_execution(void **state) {
    fx *f = *state;
    curve c1 = {0}, c4 = {0}, cbig = {0}, cc = {0};
    eng_model *m1 = train_spe(f, 1, 1, 0, &c1), *m4 = train_spe(f, 1, 4, 0, &c4), *mbig = train_spe(f, 1, 1000, 0, &cbig);
    eng_model *mc = train_spe(f, 0, 1, 0, &cc);
    check_spe("one model", m1, m4, &c4, mc, &cc);
    check_exact("K=1000 against K=1: weights", mbig->params, m1->params, m1->nparams * sizeof(float));
    check_exact("K=1000 against K=1: generator", mbig->rng.s, m1->rng.s, sizeof m1->rng.s);
    eng_model_free(m1);
    eng_model_free(m4);
    eng_model_free(mbig);
    eng_model_free(mc);
    /* two replicas on one GPU: K steps of both in one graph */
    curve r1 = {0}, r4 = {0}, rc = {0};
    m1 = train_spe(f, 1, 1, 1, &r1), m4 = train_spe(f, 1, 4, 1, &r4), mc = train_spe(f, 0, 1, 1, &rc);
    check_spe("two replicas (the CPU: 2 threads)", m1, m4, &r4, mc, &rc);
    eng_model_free(m1);
    eng_model_free(m4);
    eng_model_free(mc);
}

/* after augment and a conv2d(16, same, relu), before dropout and the
 * softmax: variant 0: conv2d(8, valid, relu), maxpool2d, flatten; 1: a
 * batchnorm, conv2d(8, valid, relu), global_avg_pool; 2: residual blocks
 * (conv, batchnorm, relu, conv, batchnorm around the identity, then a
 * conv2d to 8 channels around a 1x1 projection), global_avg_pool */
static eng_model *cnn(int variant) {
    static const char *body[] = {
        "{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"valid\",\"activation\":\"relu\"}},"
        "{\"maxpool2d\":{\"pool\":2}},{\"flatten\":{}}",
        "{\"batchnorm\":{}},{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"valid\",\"activation\":\"relu\"}},"
        "{\"global_avg_pool\":{}}",
        "{\"residual\":{\"layers\":[{\"conv2d\":{\"filters\":16,\"kernel\":3,\"padding\":\"same\"}},{\"batchnorm\":{}},"
        "{\"activation\":\"relu\"},{\"conv2d\":{\"filters\":16,\"kernel\":3,\"padding\":\"same\"}},{\"batchnorm\":{}}],"
        "\"activation\":\"relu\"}},"
        "{\"residual\":{\"layers\":[{\"conv2d\":{\"filters\":8,\"kernel\":3,\"padding\":\"same\",\"activation\":\"relu\"}}]}},"
        "{\"global_avg_pool\":{}}"};
    char t[2048];
    snprintf(t, sizeof t,
             "{\"layers\":[{\"augment\":{\"translate\":1,\"flip\":true}},"
             "{\"conv2d\":{\"filters\":16,\"kernel\":3,\"padding\":\"same\",\"activation\":\"relu\"}},%s,"
             "{\"dropout\":{\"rate\":0.2}},{\"dense\":{\"units\":4,\"activation\":\"softmax\"}}],"
             "\"loss\":\"sparse_categorical_crossentropy\",\"optimizer\":{\"name\":\"adam\",\"learning_rate\":0.003}}",
             body[variant]);
    json_t *j = json_loads(t, 0, NULL);
    assert_non_null(j);
    int shape[3] = {8, 8, 1};
    eng_model *m = NULL;
    hpo_error err = {{0}, {0}};
    int rc = eng_model_new(j, NULL, 3, shape, NK, 7, &m, &err);
    if (rc) printf("model: %s (%s)\n", err.message, err.field);
    assert_int_equal(rc, 0);
    json_decref(j);
    return m;
}

/* A CNN's training amplifies rounding differences (convolution sums in
 * another order, batchnorm's statistics) by an amount that depends on the
 * model and on the CPU's kernels: the same comparison that the emulation
 * passes with OpenBLAS's Haswell kernel ends 1.6e-3 apart with its SkylakeX
 * one. So the CPU's own spread is measured: the same CPU run from first
 * weights one ulp apart. The device run must agree with the CPU within
 * CNN_SPREAD_FACTOR times that spread, or within tol where that is larger.
 * A wrong op (a missing bias, a transposed filter, another batch) ends
 * orders of magnitude further apart. */
#define CNN_SPREAD_FACTOR 8.0

static void cnn_both(int variant, int precision, double tol) {
    fx f = {0};
    fx_splits(&f, synth_images(640));
    curve cg = {0}, cc = {0}, cn = {0};
    eng_train_opts o;
    eng_train_result rg, rc, rn;
    eng_model *mg = cnn(variant), *mc = cnn(variant), *mn = cnn(variant);
    opts(&f, &o, 1, EPOCHS, -1, precision, &cg);
    train_ok(mg, &f, &o, &rg);
    opts(&f, &o, 0, EPOCHS, -1, precision, &cc);
    train_ok(mc, &f, &o, &rc);
    for (size_t i = 0; i < mn->nparams; i++) mn->params[i] = nextafterf(mn->params[i], INFINITY);
    opts(&f, &o, 0, EPOCHS, -1, precision, &cn);
    train_ok(mn, &f, &o, &rn);
    static const char *names[] = {"", " (batchnorm, global_avg_pool)", " (residual blocks)"};
    printf("  cnn%s %s: val accuracy gpu %.4f cpu %.4f\n", names[variant], eng_precision_name(precision),
           cg.val[EPOCHS - 1].accuracy, cc.val[EPOCHS - 1].accuracy);
    int bn = mc->nstats > 0;
    double spread = cnn_spread(&cn, &cc, mn, mc, !bn);
    printf("  the CPU's own spread (first weights one ulp apart) %.3e: tolerance max(%.0e, %g x spread)\n", spread,
           tol, CNN_SPREAD_FACTOR);
    tol = fmax(tol, CNN_SPREAD_FACTOR * spread);
    compare(&cg, &cc, 0, EPOCHS, tol, !bn);
    compare_cnn_weights(mg, mc, tol);
    /* the running means inherit the drift of a zero-gradient bias (1.2e-2 under the emulation) */
    if (bn) close_ok("batchnorm running statistics", mg->stats, mc->stats, mc->nstats, fmax(tol, TOL_BN_STATS));
    exact_ok("generator state (dropout, augment)", mg->rng.s, mc->rng.s, sizeof mg->rng.s);
    eng_model_free(mg);
    eng_model_free(mc);
    eng_model_free(mn);
    fx_clear(&f);
}

static void test_cnn(void **state) {
    (void)state;
    eng_model *probe = cnn(0);
    int has = probe->be->gemm_bf16 != NULL;
    eng_model_free(probe);
    soft = 1, failures = 0;
    for (int v = 0; v < 3; v++) {
        cnn_both(v, ENG_PREC_FP32, TOL_CNN_RUN);
        cnn_both(v, ENG_PREC_FP16, TOL_BF16);
        if (has) cnn_both(v, ENG_PREC_BF16, TOL_CNN_BF16);
        else printf("  cnn mixed_bf16: the CPU backend has no bf16 GEMM here, comparison skipped\n");
    }
    soft = 0;
    printf("  cnn: %d comparisons failed\n", failures);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fp32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tf32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bf16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fp16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fp16_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_moves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steps_per_execution, setup, teardown),
        cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_cnn),
    };
    return GPU_TEST_MAIN(tests);
}
