/* test_cuda_step.c - a training step on the device: finite-difference
 * checks of the device backward (dense layers + softmax cross-entropy,
 * parameters and inputs), every optimiser over a whole block against the
 * CPU's eng_optim_step (with weight decay, clipping and the non-finite
 * skip), mixed_fp16's loss scale on the device, and a graph-replayed step bit-identical to the same step run
 * eagerly. Skipped (77) without a GPU. */
#include "gpu_test.h"

#include "bf16.h"
#include "loss.h"
#include "ops.h"
#include "optim.h"

/* a two-layer MLP on the device: x[B][I] -> dense(H, act) -> dense(K) -> scce */
typedef struct mlp {
    int B, I, H, K, act;
    size_t n; /* parameters: [w1 I*H][b1 H][w2 H*K][b2 K] */
    float *p, *g;          /* dev blocks */
    float *x, *z1, *y1, *z2, *dy1, *dx; /* dev activations */
    int32_t *lab;
    double *sums;
} mlp;

static void mlp_init(mlp *m, int B, int I, int H, int K, int act, hpo_rng *r) {
    memset(m, 0, sizeof *m);
    m->B = B, m->I = I, m->H = H, m->K = K, m->act = act;
    m->n = (size_t)I * H + H + (size_t)H * K + K;
    float *p = rnd(m->n, r, 0.5f), *x = rnd((size_t)B * I, r, 1.0f);
    int32_t *lab = malloc((size_t)B * 4);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)hpo_rng_below(r, (uint64_t)K);
    m->p = dev_from(p, m->n * 4);
    m->g = dev_new(m->n * 4);
    m->x = dev_from(x, (size_t)B * I * 4);
    m->lab = dev_from(lab, (size_t)B * 4);
    m->z1 = dev_new((size_t)B * H * 4);
    m->y1 = dev_new((size_t)B * H * 4);
    m->z2 = dev_new((size_t)B * K * 4);
    m->dy1 = dev_new((size_t)B * H * 4);
    m->dx = dev_new((size_t)B * I * 4);
    m->sums = dev_new(ENG_CUDA_SUMS * sizeof(double));
    free(p), free(x), free(lab);
}

static void mlp_free(mlp *m) {
    float *bufs[] = {m->p, m->g, m->x, m->z1, m->y1, m->z2, m->dy1, m->dx};
    for (size_t i = 0; i < HPO_ARRAY_LEN(bufs); i++) eng_cuda_free(g_cu, bufs[i]);
    eng_cuda_free(g_cu, m->lab);
    eng_cuda_free(g_cu, m->sums);
}

/* forward + loss (+ backward into m->g and m->dx when grad); enqueued only */
static void mlp_step(mlp *m, const float *p, int grad) {
    int B = m->B, I = m->I, H = m->H, K = m->K;
    const float *w1 = p, *b1 = w1 + (size_t)I * H, *w2 = b1 + H, *b2 = w2 + (size_t)H * K;
    float *gw1 = m->g, *gb1 = gw1 + (size_t)I * H, *gw2 = gb1 + H, *gb2 = gw2 + (size_t)H * K;
    assert_int_equal(eng_cuda_zero(g_cu, m->sums, ENG_CUDA_SUMS * sizeof(double)), 0);
    assert_int_equal(eng_cuda_dense_forward(g_cu, m->x, w1, b1, m->z1, m->y1, B, I, H, m->act), 0);
    assert_int_equal(eng_cuda_dense_forward(g_cu, m->y1, w2, b2, m->z2, m->z2, B, H, K, ENG_ACT_NONE), 0);
    /* z2 becomes dz in place: the loss reads a row before it writes it */
    assert_int_equal(eng_cuda_loss(g_cu, ENG_LOSS_SCCE, ENG_ACT_NONE, m->z2, m->lab, NULL, B, K, 1.0f, grad ? m->z2 : NULL,
                                   m->sums),
                     0);
    if (!grad) return;
    assert_int_equal(eng_cuda_dense_backward(g_cu, m->y1, w2, m->z2, m->z2, m->z2, m->dy1, gw2, gb2, B, H, K, ENG_ACT_NONE), 0);
    assert_int_equal(eng_cuda_dense_backward(g_cu, m->x, w1, m->z1, m->y1, m->dy1, m->dx, gw1, gb1, B, I, H, m->act), 0);
}

static double mlp_loss(mlp *m) {
    mlp_step(m, m->p, 0);
    double s[ENG_CUDA_SUMS];
    down(s, m->sums, sizeof s);
    return s[0] / m->B;
}

static double fd_check(const char *what, mlp *m, float *dev, size_t n, const float *an) {
    float *h = fetch(dev, n);
    double gmax = 0, worst = 0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(an[i]));
    for (size_t i = 0; i < n; i++) {
        float v = h[i], step = 1e-2f * fmaxf(1.0f, fabsf(v));
        h[i] = v + step;
        up(dev + i, h + i, 4);
        double lp = mlp_loss(m);
        h[i] = v - step;
        up(dev + i, h + i, 4);
        double lm = mlp_loss(m);
        h[i] = v;
        up(dev + i, h + i, 4);
        double fd = (lp - lm) / (2.0 * step);
        double den = fmax(fmax(fabs(fd), fabs(an[i])), 1e-2 * gmax + 1e-6);
        worst = fmax(worst, fabs(fd - an[i]) / den);
    }
    printf("  %-44s max rel diff %.3e (tol 1e-02)%s\n", what, worst, worst <= 1e-2 ? "" : "  FAIL");
    free(h);
    return worst;
}

static void test_finite_differences(void **state) {
    (void)state;
    static const int acts[] = {ENG_ACT_TANH, ENG_ACT_GELU, ENG_ACT_SIGMOID, ENG_ACT_NONE};
    hpo_rng r;
    hpo_rng_seed(&r, 71);
    for (size_t a = 0; a < HPO_ARRAY_LEN(acts); a++) {
        mlp m;
        mlp_init(&m, 8, 6, 5, 4, acts[a], &r);
        mlp_step(&m, m.p, 1);
        sync_ok();
        float *g = fetch(m.g, m.n), *dx = fetch(m.dx, (size_t)m.B * m.I);
        char what[96];
        snprintf(what, sizeof what, "fd dense(%s)+dense+scce params", eng_act_name(acts[a]));
        assert_true(fd_check(what, &m, m.p, m.n, g) <= 1e-2);
        snprintf(what, sizeof what, "fd dense(%s)+dense+scce inputs", eng_act_name(acts[a]));
        assert_true(fd_check(what, &m, m.x, (size_t)m.B * m.I, dx) <= 1e-2);
        free(g), free(dx);
        mlp_free(&m);
    }
}

/* The error of the device's update p_gpu - p_old against the CPU's p_cpu -
 * p_old, relative to the largest CPU update, after allowing each element one
 * rounding of the stored parameter: the device contracts p - lr * u into one
 * fused multiply-add where the CPU build may round twice, so the new parameters
 * may differ by one unit in the last place of p, which is 2.5e-4 of a plain
 * SGD update of 1e-4 on parameters near 1 (seen on an H200). */
static double update_err(const float *p_gpu, const float *p_cpu, const float *p_old, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(p_gpu[i])) return INFINITY;
        double ulp = nextafterf(fabsf(p_cpu[i]), INFINITY) - fabsf(p_cpu[i]);
        double e = fabs((double)p_gpu[i] - p_cpu[i]) - ulp;
        if (e > num) num = e;
        double u = fabs((double)p_cpu[i] - p_old[i]);
        if (u > den) den = u;
    }
    return den > 0 ? num / den : num;
}

/* three steps of each optimiser on the device and on the CPU from the same
 * parameters and gradients; the updates (p_new - p_old, up to one rounding
 * of p: update_err) and the state agree. The same steps through
 * eng_cuda_optim_step_dev (the scalars read from device memory, as a
 * replayed graph does, and the bf16 copy written) end bit-identical to
 * eng_cuda_optim_step, the copy to eng_cuda_to_h16 of the parameters. */
static void optim_case(const eng_optim_config *c, const char *name, hpo_rng *r) {
    size_t n = 100003, ns = eng_optim_state_floats(c) * n;
    float *p = rnd(n, r, 1.0f), *st = calloc(ns ? ns : 1, 4), *p0 = malloc(n * 4);
    float *dp = dev_from(p, n * 4), *dg = dev_new(n * 4), *dst = dev_new((ns ? ns : 1) * 4);
    double *dnorm = dev_new(2 * sizeof(double));
    float *dp2 = dev_from(p, n * 4), *dg2 = dev_new(n * 4), *dst2 = dev_new((ns ? ns : 1) * 4);
    uint16_t *dpb = dev_new(n * 2), *dpb_ref = dev_new(n * 2);
    eng_cuda_opt_scalars *dsc = dev_new(sizeof *dsc);
    assert_int_equal(eng_cuda_zero(g_cu, dst, (ns ? ns : 1) * 4), 0);
    assert_int_equal(eng_cuda_zero(g_cu, dst2, (ns ? ns : 1) * 4), 0);
    int same = 1;
    double worst_p = 0, worst_s = 0, worst_n = 0;
    for (int t = 1; t <= 3; t++) {
        float *g = rnd(n, r, 0.01f);
        up(dg, g, n * 4);
        up(dg2, g, n * 4);
        memcpy(p0, p, n * 4);
        float lr = 1e-2f * (float)t;
        double norm = 0;
        if (c->clipnorm > 0) {
            int fin = 1;
            norm = eng_grad_unscale_norm(g, n, 1.0f, &fin);
            eng_grad_clip(g, n, norm, c->clipnorm);
            assert_int_equal(eng_cuda_grad_norm(g_cu, dg, n, 1.0f, dnorm), 0);
        }
        eng_optim_step(c, lr, t, p, g, st, n);
        assert_int_equal(eng_cuda_optim_step(g_cu, c, lr, t, dp, dg, dst, n, c->clipnorm > 0 ? dnorm : NULL), 0);
        eng_cuda_opt_scalars sc;
        eng_cuda_opt_scalars_at(c, lr, t, &sc);
        up(dsc, &sc, sizeof sc);
        eng_cuda_step_args a = {.sc = dsc, .norm = c->clipnorm > 0 ? dnorm : NULL, .p16 = dpb};
        assert_int_equal(eng_cuda_optim_step_dev(g_cu, c, &a, dp2, dg2, dst2, n), 0);
        assert_int_equal(eng_cuda_to_h16(g_cu, dp, dpb_ref, n), 0);
        sync_ok();
        float *ph2 = fetch(dp2, n), *sh2 = fetch(dst2, ns ? ns : 1), *ph1 = fetch(dp, n), *sh1 = fetch(dst, ns ? ns : 1);
        uint16_t *b1 = malloc(n * 2), *b2 = malloc(n * 2);
        down(b1, dpb_ref, n * 2);
        down(b2, dpb, n * 2);
        same &= !memcmp(ph1, ph2, n * 4) && !memcmp(sh1, sh2, (ns ? ns : 1) * 4) && !memcmp(b1, b2, n * 2);
        free(ph2), free(sh2), free(ph1), free(sh1), free(b1), free(b2);
        float *ph = fetch(dp, n), *sh = fetch(dst, ns ? ns : 1);
        worst_p = fmax(worst_p, update_err(ph, p, p0, n)); /* the updates, so p's size does not hide their error */
        if (ns) worst_s = fmax(worst_s, rel_err(sh, st, ns));
        if (c->clipnorm > 0) {
            double hn[2];
            down(hn, dnorm, sizeof hn);
            assert_true(hn[1] == 1.0);
            worst_n = fmax(worst_n, fabs(hn[0] - norm) / norm);
        }
        free(g), free(ph), free(sh);
    }
    printf("  %-44s update %.3e state %.3e norm %.3e (tol 1e-04)%s\n", name, worst_p, worst_s, worst_n,
           worst_p <= TOL_F32 && worst_s <= TOL_F32 && worst_n <= 1e-5 ? "" : "  FAIL");
    assert_true(worst_p <= TOL_F32 && worst_s <= TOL_F32 && worst_n <= 1e-5);
    printf("  %-44s %s\n", "  scalars from device memory, bf16 copy", same ? "bit-identical" : "DIFFERENT  FAIL");
    assert_true(same);
    eng_cuda_free(g_cu, dp2), eng_cuda_free(g_cu, dg2), eng_cuda_free(g_cu, dst2), eng_cuda_free(g_cu, dpb);
    eng_cuda_free(g_cu, dpb_ref), eng_cuda_free(g_cu, dsc);
    eng_cuda_free(g_cu, dp), eng_cuda_free(g_cu, dg), eng_cuda_free(g_cu, dst), eng_cuda_free(g_cu, dnorm);
    free(p), free(st), free(p0);
}

static void test_optimisers(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 81);
    static const struct {
        int kind;
        float momentum;
        int nesterov;
        const char *name;
    } kinds[] = {{ENG_OPT_SGD, 0, 0, "sgd"},         {ENG_OPT_SGD, 0.9f, 0, "sgd momentum"},
                 {ENG_OPT_SGD, 0.9f, 1, "sgd nesterov"}, {ENG_OPT_RMSPROP, 0, 0, "rmsprop"},
                 {ENG_OPT_RMSPROP, 0.5f, 0, "rmsprop momentum"}, {ENG_OPT_ADAM, 0, 0, "adam"},
                 {ENG_OPT_ADAMW, 0, 0, "adamw"}};
    for (size_t k = 0; k < HPO_ARRAY_LEN(kinds); k++)
        for (int wd = 0; wd < 2; wd++)
            for (int clip = 0; clip < 2; clip++) {
                eng_optim_config c;
                eng_optim_defaults(&c, kinds[k].kind);
                c.momentum = kinds[k].momentum;
                c.nesterov = kinds[k].nesterov;
                if (wd) c.weight_decay = 0.01f;
                if (clip) c.clipnorm = 0.5f; /* the gradients' norm is about 3: clipping happens */
                char name[96];
                snprintf(name, sizeof name, "%s wd %.3f clip %.1f", kinds[k].name, (double)c.weight_decay,
                         (double)c.clipnorm);
                optim_case(&c, name, &r);
            }
}

/* the norm's unscale, and a non-finite gradient: flagged, no update, and
 * counted when the step says where */
static void test_grad_norm_nonfinite(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 91);
    size_t n = 4099;
    float *g = rnd(n, &r, 1.0f), *p = rnd(n, &r, 1.0f), *half = malloc(n * 4);
    for (size_t i = 0; i < n; i++) half[i] = g[i] * 0.5f;
    float *dg = dev_from(g, n * 4), *dp = dev_from(p, n * 4), *dst = dev_new(2 * n * 4);
    double *dn = dev_new(2 * sizeof(double)), hn[2];
    assert_int_equal(eng_cuda_zero(g_cu, dst, 2 * n * 4), 0);
    assert_int_equal(eng_cuda_grad_norm(g_cu, dg, n, 0.5f, dn), 0);
    sync_ok();
    float *gh = fetch(dg, n);
    check_exact("grad unscale by 0.5", gh, half, n * 4);
    down(hn, dn, sizeof hn);
    int fin = 0;
    double want = eng_grad_unscale_norm(half, n, 1.0f, &fin);
    printf("  norm %.9g vs %.9g, finite %g\n", hn[0], want, hn[1]);
    assert_true(fabs(hn[0] - want) <= 1e-5 * want && hn[1] == 1.0 && fin);
    g[7] = NAN;
    up(dg, g, n * 4);
    assert_int_equal(eng_cuda_grad_norm(g_cu, dg, n, 1.0f, dn), 0);
    eng_optim_config c;
    eng_optim_defaults(&c, ENG_OPT_ADAM);
    c.clipnorm = 1.0f;
    assert_int_equal(eng_cuda_optim_step(g_cu, &c, 1e-3f, 1, dp, dg, dst, n, dn), 0);
    sync_ok();
    down(hn, dn, sizeof hn);
    assert_true(hn[1] == 0.0);
    float *ph = fetch(dp, n);
    check_exact("non-finite gradient: parameters untouched", ph, p, n * 4);
    /* from device scalars, the steps skipped are counted (train_cuda.c
     * fails the run on them at the epoch's end); a finite one is not */
    eng_cuda_opt_scalars sc;
    eng_cuda_opt_scalars_at(&c, 1e-3f, 1, &sc);
    void *dsc = dev_from(&sc, sizeof sc);
    double zero = 0.0, skipped = -1.0;
    double *dskip = dev_from(&zero, sizeof zero);
    eng_cuda_step_args a = {.sc = dsc, .norm = dn, .skipped = dskip};
    for (int k = 0; k < 2; k++) assert_int_equal(eng_cuda_optim_step_dev(g_cu, &c, &a, dp, dg, dst, n), 0);
    sync_ok();
    down(&skipped, dskip, sizeof skipped);
    float *ph2 = fetch(dp, n);
    printf("  steps skipped for a non-finite gradient: %g (want 2)\n", skipped);
    assert_true(skipped == 2.0);
    check_exact("non-finite gradient, device scalars: parameters untouched", ph2, p, n * 4);
    g[7] = 0.25f;
    up(dg, g, n * 4);
    assert_int_equal(eng_cuda_grad_norm(g_cu, dg, n, 1.0f, dn), 0);
    assert_int_equal(eng_cuda_optim_step_dev(g_cu, &c, &a, dp, dg, dst, n), 0);
    sync_ok();
    down(&skipped, dskip, sizeof skipped);
    assert_true(skipped == 2.0);
    eng_cuda_free(g_cu, dg), eng_cuda_free(g_cu, dp), eng_cuda_free(g_cu, dst), eng_cuda_free(g_cu, dn);
    eng_cuda_free(g_cu, dsc), eng_cuda_free(g_cu, dskip);
    free(g), free(p), free(half), free(gh), free(ph), free(ph2);
}

/* mixed_fp16's loss scale on the device (eng_cuda_scaler): the scaled loss
 * gradient, the gradients rounded to fp16 and unscaled as the CPU does, the
 * optimiser's scalars taken from a table by the count of applied steps,
 * the scale doubling after ENG_LOSS_SCALE_GROWTH good steps and halving on
 * a non-finite gradient, whose step leaves the parameters alone */
static void test_loss_scaler(void **state) {
    (void)state;
    hpo_rng r;
    hpo_rng_seed(&r, 93);
    const int B = 32, K = 10, growth = 2000;
    const float max_scale = 0x1p24f;
    size_t n = 5003;
    float *z = rnd((size_t)B * K, &r, 2.0f), *g = rnd(n, &r, 300.0f), *p = rnd(n, &r, 1.0f);
    int32_t lab[32];
    for (int i = 0; i < B; i++) lab[i] = (int32_t)hpo_rng_below(&r, (uint64_t)K);
    eng_cuda_scaler sc0 = {1024.0f, growth - 2, 0, 0, 0}, sh;
    eng_cuda_scaler *ds = dev_from(&sc0, sizeof sc0);
    float *dz = dev_from(z, (size_t)B * K * 4), *d1 = dev_new((size_t)B * K * 4), *d2 = dev_new((size_t)B * K * 4);
    int32_t *dlab = dev_from(lab, sizeof lab);
    double *sums = dev_new(ENG_CUDA_SUMS * sizeof(double));
    assert_int_equal(eng_cuda_zero(g_cu, sums, ENG_CUDA_SUMS * sizeof(double)), 0);
    assert_int_equal(eng_cuda_loss(g_cu, ENG_LOSS_SCCE, ENG_ACT_SOFTMAX, dz, dlab, NULL, B, K, 1024.0f, d1, sums), 0);
    assert_int_equal(eng_cuda_loss_scaled(g_cu, ENG_LOSS_SCCE, ENG_ACT_SOFTMAX, dz, dlab, NULL, B, K, 1.0f, ds, d2, sums),
                     0);
    sync_ok();
    float *h1 = fetch(d1, (size_t)B * K), *h2 = fetch(d2, (size_t)B * K);
    check_exact("loss gradient scaled from the device's scale", h2, h1, (size_t)B * K * 4);
    /* a replica's share of the batch times the device's scale */
    assert_int_equal(eng_cuda_loss(g_cu, ENG_LOSS_SCCE, ENG_ACT_SOFTMAX, dz, dlab, NULL, B, K, 256.0f, d1, sums), 0);
    assert_int_equal(eng_cuda_loss_scaled(g_cu, ENG_LOSS_SCCE, ENG_ACT_SOFTMAX, dz, dlab, NULL, B, K, 0.25f, ds, d2, sums),
                     0);
    sync_ok();
    down(h1, d1, (size_t)B * K * 4);
    down(h2, d2, (size_t)B * K * 4);
    check_exact("loss gradient scaled by a share times the device's scale", h2, h1, (size_t)B * K * 4);
    /* gradients: fp16-rounded, then unscaled (eng_model_backward, train.c) */
    float *gr = malloc(n * 4);
    memcpy(gr, g, n * 4);
    eng_round_fp16_n(gr, n);
    int fin = 0;
    double want = eng_grad_unscale_norm(gr, n, (float)(1.0 / 1024.0), &fin);
    float *dg = dev_from(g, n * 4), *dp = dev_from(p, n * 4), *dst = dev_new(2 * n * 4);
    double *dn = dev_new(2 * sizeof(double)), hn[2];
    assert_int_equal(eng_cuda_zero(g_cu, dst, 2 * n * 4), 0);
    assert_int_equal(eng_cuda_grad_unscale_norm(g_cu, dg, n, ds, dn), 0);
    sync_ok();
    float *gh = fetch(dg, n);
    check_exact("gradients rounded to fp16 and unscaled", gh, gr, n * 4);
    down(hn, dn, sizeof hn);
    printf("  norm %.9g vs %.9g, finite %g\n", hn[0], want, hn[1]);
    assert_true(fin && hn[1] == 1.0 && fabs(hn[0] - want) <= 1e-5 * want);
    /* the optimiser reads entry `applied` of a table of three steps' scalars */
    eng_optim_config c;
    eng_optim_defaults(&c, ENG_OPT_ADAM);
    const size_t stride = 48; /* wider than the scalars, as the step records are */
    unsigned char table[3 * 48];
    memset(table, 0, sizeof table);
    for (int t = 1; t <= 3; t++) {
        eng_cuda_opt_scalars s;
        eng_cuda_opt_scalars_at(&c, 1e-3f * (float)t, t, &s);
        memcpy(table + (size_t)(t - 1) * stride, &s, sizeof s);
    }
    void *dtab = dev_from(table, sizeof table);
    eng_cuda_step_args a = {.sc = dtab, .sc_index = &ds->applied, .sc_stride = stride, .norm = dn};
    float *pc = malloc(n * 4), *stc = calloc(2 * n, 4);
    memcpy(pc, p, n * 4);
    for (int step = 1; step <= 2; step++) { /* entries 0 and 1: applied counts up */
        assert_int_equal(eng_cuda_optim_step_dev(g_cu, &c, &a, dp, dg, dst, n), 0);
        assert_int_equal(eng_cuda_scaler_update(g_cu, dn, ds, growth, max_scale), 0);
        eng_optim_step(&c, 1e-3f * (float)step, step, pc, gr, stc, n);
    }
    sync_ok();
    float *ph = fetch(dp, n);
    char what[80];
    snprintf(what, sizeof what, "adam by applied steps: parameters");
    check_close(what, ph, pc, n, TOL_F32);
    down(&sh, ds, sizeof sh);
    printf("  after two good steps: scale %g good %d applied %d skipped %d\n", sh.scale, sh.good, sh.applied, sh.skipped);
    assert_true(sh.scale == 2048.0f && sh.good == 0 && sh.applied == 2 && sh.skipped == 0 && sh.last_applied == 1);
    /* a non-finite gradient: skipped, scale halved, parameters untouched */
    g[11] = INFINITY;
    up(dg, g, n * 4);
    assert_int_equal(eng_cuda_grad_unscale_norm(g_cu, dg, n, ds, dn), 0);
    assert_int_equal(eng_cuda_optim_step_dev(g_cu, &c, &a, dp, dg, dst, n), 0);
    assert_int_equal(eng_cuda_scaler_update(g_cu, dn, ds, growth, max_scale), 0);
    sync_ok();
    float *ph2 = fetch(dp, n);
    check_exact("non-finite gradient: parameters untouched", ph2, ph, n * 4);
    down(&sh, ds, sizeof sh);
    printf("  after an overflow: scale %g good %d applied %d skipped %d\n", sh.scale, sh.good, sh.applied, sh.skipped);
    assert_true(sh.scale == 1024.0f && sh.good == 0 && sh.applied == 2 && sh.skipped == 1 && sh.last_applied == 0);
    /* at max_scale a good run no longer doubles it (a float scale would reach Inf) */
    eng_cuda_scaler top = {max_scale, growth - 1, 0, 0, 0};
    up(ds, &top, sizeof top);
    g[11] = 1.0f;
    up(dg, g, n * 4);
    assert_int_equal(eng_cuda_grad_unscale_norm(g_cu, dg, n, ds, dn), 0);
    assert_int_equal(eng_cuda_scaler_update(g_cu, dn, ds, growth, max_scale), 0);
    sync_ok();
    down(&sh, ds, sizeof sh);
    printf("  at the ceiling: scale %g good %d applied %d\n", sh.scale, sh.good, sh.applied);
    assert_true(sh.scale == max_scale && sh.good == 0 && sh.applied == 1);
    eng_cuda_free(g_cu, ds), eng_cuda_free(g_cu, dz), eng_cuda_free(g_cu, d1), eng_cuda_free(g_cu, d2);
    eng_cuda_free(g_cu, dlab), eng_cuda_free(g_cu, sums), eng_cuda_free(g_cu, dg), eng_cuda_free(g_cu, dp);
    eng_cuda_free(g_cu, dst), eng_cuda_free(g_cu, dn), eng_cuda_free(g_cu, dtab);
    free(z), free(g), free(p), free(h1), free(h2), free(gr), free(gh), free(pc), free(stc), free(ph), free(ph2);
}

/* one step = forward, loss, backward, sgd-momentum update; captured once and
 * replayed, against the same ops enqueued eagerly on a twin */
static void test_graph_replay(void **state) {
    (void)state;
    hpo_rng r1, r2;
    hpo_rng_seed(&r1, 101);
    r2 = r1;
    mlp a, b;
    mlp_init(&a, 64, 784, 128, 10, ENG_ACT_RELU, &r1);
    mlp_init(&b, 64, 784, 128, 10, ENG_ACT_RELU, &r2);
    eng_optim_config c;
    eng_optim_defaults(&c, ENG_OPT_SGD);
    c.momentum = 0.9f;
    float *sa = dev_new(a.n * 4), *sb = dev_new(b.n * 4);
    assert_int_equal(eng_cuda_zero(g_cu, sa, a.n * 4), 0);
    assert_int_equal(eng_cuda_zero(g_cu, sb, b.n * 4), 0);
    sync_ok();
    hpo_error err = {{0}, {0}};
    eng_cuda_graph *gr = NULL;
    assert_int_equal(eng_cuda_capture_begin(g_cu, &err), 0);
    mlp_step(&b, b.p, 1);
    assert_int_equal(eng_cuda_optim_step(g_cu, &c, 0.05f, 1, b.p, b.g, sb, b.n, NULL), 0);
    int rc = eng_cuda_capture_end(g_cu, &gr, &err);
    if (rc) printf("capture: %s\n", err.message);
    assert_int_equal(rc, 0);
    for (int step = 1; step <= 3; step++) {
        mlp_step(&a, a.p, 1);
        assert_int_equal(eng_cuda_optim_step(g_cu, &c, 0.05f, 1, a.p, a.g, sa, a.n, NULL), 0);
        assert_int_equal(eng_cuda_graph_launch(g_cu, gr), 0);
        sync_ok();
        float *pa = fetch(a.p, a.n), *pb = fetch(b.p, b.n);
        double la[ENG_CUDA_SUMS], lb[ENG_CUDA_SUMS];
        down(la, a.sums, sizeof la);
        down(lb, b.sums, sizeof lb);
        char what[64];
        snprintf(what, sizeof what, "graph replay %d vs eager: parameters", step);
        check_exact(what, pa, pb, a.n * 4);
        printf("  loss %.9g vs %.9g, correct %g vs %g\n", la[0] / a.B, lb[0] / b.B, la[1], lb[1]);
        assert_true(fabs(la[0] - lb[0]) <= 1e-12 * fabs(la[0]) && la[1] == lb[1]);
        free(pa), free(pb);
    }
    eng_cuda_graph_free(gr);
    eng_cuda_free(g_cu, sa), eng_cuda_free(g_cu, sb);
    mlp_free(&a), mlp_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finite_differences), cmocka_unit_test(test_optimisers),
        cmocka_unit_test(test_grad_norm_nonfinite), cmocka_unit_test(test_loss_scaler),
        cmocka_unit_test(test_graph_replay),
    };
    return GPU_TEST_MAIN(tests);
}
