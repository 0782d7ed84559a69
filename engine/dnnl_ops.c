/* dnnl_ops.c - oneDNN 2.6 matmul and convolution primitives behind a
 * per-thread shape-keyed cache (see dnnl_ops.h). The naive references are
 * in ref_ops.c.
 *
 * A cache entry owns everything one call needs besides the data pointers:
 * the primitive, one dnnl_memory per argument (created without a buffer;
 * dnnl_memory_set_data_handle points it at the caller's data on each call),
 * and, for convolutions whose weights oneDNN prefers in a blocked layout,
 * a reorder primitive and a buffer for the blocked weights. */
#include "dnnl_ops.h"

#include <dlfcn.h>
#include <dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "hpo.h"

enum { OP_GEMM = 1, OP_CONV_FWD, OP_CONV_BWD_D, OP_CONV_BWD_W };
enum { MAX_ARGS = 6 };

typedef struct key {
    int op, dt;
    int ta, tb, M, N, K, lda, ldb, ldc;
    int bias;
    float alpha, beta;
    eng_conv2d_shape cs;
    int wany; /* conv: let oneDNN choose the weights layout (+ reorders) */
} key;

typedef struct entry {
    key k;
    int used;
    uint64_t stamp;
    dnnl_primitive_t prim;
    int nargs;
    dnnl_exec_arg_t args[MAX_ARGS];
    /* conv weights in oneDNN's layout: user <-> blocked reorder */
    dnnl_primitive_t wreorder;
    dnnl_memory_t wuser, wblk;
    void *wbuf;
    char impl[64];
} entry;

typedef struct tls_state {
    dnnl_stream_t stream;
    entry e[ENG_DNNL_CACHE_SIZE];
    uint64_t clock, hits, misses;
    float *scratch; /* bf16 -> f32 staging (conv forward with few channels) */
    size_t scratch_n;
} tls_state;

static dnnl_engine_t g_engine;
static int g_engine_rc;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static __thread tls_state *t_state;

static void entry_clear(entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    for (int i = 0; i < e->nargs; i++)
        if (e->args[i].memory) dnnl_memory_destroy(e->args[i].memory);
    if (e->wreorder) dnnl_primitive_destroy(e->wreorder);
    if (e->wuser) dnnl_memory_destroy(e->wuser);
    if (e->wblk) dnnl_memory_destroy(e->wblk);
    free(e->wbuf);
    memset(e, 0, sizeof *e);
}

static void tls_free(void *p) {
    tls_state *s = p;
    if (!s) return;
    for (int i = 0; i < ENG_DNNL_CACHE_SIZE; i++) entry_clear(&s->e[i]);
    if (s->stream) dnnl_stream_destroy(s->stream);
    free(s->scratch);
    free(s);
}

static void init_once(void) {
    pthread_key_create(&g_key, tls_free);
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) {
        g_engine_rc = HPO_EUNSUPPORTED;
        HPO_ERROR("dnnl: cannot create the CPU engine");
    }
}

static int map_status(dnnl_status_t st, const char *what) {
    if (st == dnnl_success) return 0;
    if (st == dnnl_unimplemented) {
        HPO_DEBUG("dnnl: %s: no implementation", what);
        return HPO_EUNSUPPORTED;
    }
    if (st == dnnl_out_of_memory) return HPO_ENOMEM;
    HPO_ERROR("dnnl: %s failed with status %d", what, (int)st);
    return st == dnnl_invalid_arguments ? HPO_EINVAL : HPO_EINTERNAL;
}

static tls_state *state(void) {
    if (t_state) return t_state;
    pthread_once(&g_once, init_once);
    if (g_engine_rc < 0) return NULL;
    tls_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (dnnl_stream_create(&s->stream, g_engine, dnnl_stream_default_flags) != dnnl_success) {
        free(s);
        return NULL;
    }
    pthread_setspecific(g_key, s);
    t_state = s;
    return s;
}

void eng_dnnl_thread_cleanup(void) {
    if (!t_state) return;
    pthread_setspecific(g_key, NULL);
    tls_free(t_state);
    t_state = NULL;
}

void eng_dnnl_cache_stats(uint64_t *hits, uint64_t *misses) {
    tls_state *s = t_state;
    if (hits) *hits = s ? s->hits : 0;
    if (misses) *misses = s ? s->misses : 0;
}

int eng_dnnl_set_num_threads(int n) {
    typedef void (*set_fn)(int);
    static _Atomic(set_fn) cached; /* set by whichever thread gets here first */
    if (n < 1) return HPO_EINVAL;
    set_fn fn = atomic_load_explicit(&cached, memory_order_acquire);
    if (!fn) {
        void *p = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
        if (!p) return HPO_EUNSUPPORTED;
        memcpy(&fn, &p, sizeof fn);
        atomic_store_explicit(&cached, fn, memory_order_release);
    }
    fn(n);
    return 0;
}

/* oneDNN's own view: the ISA it dispatches to here, the CPU's as capped by
 * ONEDNN_MAX_CPU_ISA (the cpuid bits alone would claim bf16 that oneDNN was
 * told not to use). The values are nested bit masks. */
static int dnnl_isa_has(dnnl_cpu_isa_t isa) { return (dnnl_get_effective_cpu_isa() & isa) == isa; }

int eng_dnnl_has_bf16(void) { return dnnl_isa_has(dnnl_cpu_isa_avx512_core_bf16); }

int eng_dnnl_bf16_usable(void) { return dnnl_isa_has(dnnl_cpu_isa_avx512_core); }

/* Find k in the cache; on a miss, *fresh = 1 and the LRU slot is returned
 * cleared with its key set. */
static entry *lookup(tls_state *s, const key *k, int *fresh) {
    entry *lru = &s->e[0];
    s->clock++;
    for (int i = 0; i < ENG_DNNL_CACHE_SIZE; i++) {
        entry *e = &s->e[i];
        if (e->used && memcmp(&e->k, k, sizeof *k) == 0) {
            e->stamp = s->clock;
            s->hits++;
            *fresh = 0;
            return e;
        }
        if (!e->used) {
            if (lru->used) lru = e;
        } else if (lru->used && e->stamp < lru->stamp) {
            lru = e;
        }
    }
    entry_clear(lru);
    lru->k = *k;
    lru->stamp = s->clock;
    s->misses++;
    *fresh = 1;
    return lru;
}

/* Create the primitive and argument memories of e from pd. args lists the
 * DNNL_ARG_* ids this primitive takes (memory descs from the pd). */
static int finish_entry(entry *e, dnnl_primitive_desc_t pd, const int *ids, int n) {
    dnnl_status_t st = dnnl_primitive_create(&e->prim, pd);
    if (st != dnnl_success) return map_status(st, "primitive_create");
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(e->impl, sizeof e->impl, "%s", impl);
    for (int i = 0; i < n; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, ids[i]);
        dnnl_memory_desc_t scale_md;
        if (ids[i] == DNNL_ARG_ATTR_OUTPUT_SCALES) { /* one f32, not reported by the pd */
            dnnl_dims_t one = {1};
            if (dnnl_memory_desc_init_by_tag(&scale_md, 1, one, dnnl_f32, dnnl_a) != dnnl_success)
                return HPO_EINTERNAL;
            md = &scale_md;
        }
        if (!md) return HPO_EINTERNAL;
        e->args[i].arg = ids[i];
        st = dnnl_memory_create(&e->args[i].memory, md, g_engine, DNNL_MEMORY_NONE);
        if (st != dnnl_success) return map_status(st, "memory_create");
        e->nargs = i + 1;
    }
    e->used = 1;
    return 0;
}

static int set_arg(entry *e, int id, const void *p) {
    for (int i = 0; i < e->nargs; i++)
        if (e->args[i].arg == id)
            return map_status(dnnl_memory_set_data_handle(e->args[i].memory, (void *)p),
                              "set_data_handle");
    return HPO_EINTERNAL;
}

static int run(tls_state *s, entry *e) {
    dnnl_status_t st = dnnl_primitive_execute(e->prim, s->stream, e->nargs, e->args);
    if (st == dnnl_success) st = dnnl_stream_wait(s->stream);
    return map_status(st, "execute");
}

/* ---------------------------------------------------------------- GEMM */

static int gemm_create(entry *e) {
    const key *k = &e->k;
    dnnl_data_type_t in = k->dt ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_dims_t da = {k->M, k->K}, db = {k->K, k->N}, dc = {k->M, k->N}, dbias = {1, k->N};
    dnnl_dims_t sa = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t sb = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t sc = {k->ldc, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t md;
    int rc;
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&a, 2, da, in, sa);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&b, 2, db, in, sb);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&bias, 2, dbias, dnnl_f32, dnnl_ab);
    if (st == dnnl_success) st = dnnl_matmul_desc_init(&md, &a, &b, k->bias ? &bias : NULL, &c);
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
    /* alpha as a constant output scale: a run-time scale (DNNL_RUNTIME_F32_VAL)
     * was measured 3-8x slower (oneDNN 2.6 drops to gemm:jit) */
    if (st == dnnl_success && k->alpha != 1.0f)
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha);
    if (st == dnnl_success && k->beta != 0.0f) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, k->beta);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL);
    if (st != dnnl_success) {
        rc = map_status(st, "matmul primitive_desc_create");
        goto fail;
    }
    int ids[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}, n = 3;
    if (k->bias) ids[n++] = DNNL_ARG_BIAS;
    rc = finish_entry(e, pd, ids, n);
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return rc;
}

static int gemm(int dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                const void *B, int ldb, float beta, float *C, int ldc, const float *bias) {
    if (M < 1 || N < 1 || K < 1 || !A || !B || !C) return HPO_EINVAL;
    if (lda < (ta ? M : K) || ldb < (tb ? K : N) || ldc < N) return HPO_EINVAL;
    tls_state *s = state();
    if (!s) return HPO_EUNSUPPORTED;
    /* oneDNN applies the output scale to (A*B + bias); our contract scales
     * only A*B, so with alpha != 1 the bias is added afterwards. */
    int bias_in = bias && alpha == 1.0f;
    key k;
    memset(&k, 0, sizeof k);
    k.op = OP_GEMM, k.dt = dt, k.ta = !!ta, k.tb = !!tb, k.M = M, k.N = N, k.K = K;
    k.lda = lda, k.ldb = ldb, k.ldc = ldc, k.bias = bias_in, k.beta = beta;
    k.alpha = alpha;
    int fresh, rc;
    entry *e = lookup(s, &k, &fresh);
    if (fresh && (rc = gemm_create(e)) < 0) {
        entry_clear(e);
        return rc;
    }
    if ((rc = set_arg(e, DNNL_ARG_SRC, A)) < 0 || (rc = set_arg(e, DNNL_ARG_WEIGHTS, B)) < 0 ||
        (rc = set_arg(e, DNNL_ARG_DST, C)) < 0 || (bias_in && (rc = set_arg(e, DNNL_ARG_BIAS, bias)) < 0))
        return rc;
    if ((rc = run(s, e)) < 0) return rc;
    if (bias && !bias_in)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] += bias[j];
    return 0;
}

int eng_dnnl_gemm_f32(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc,
                      const float *bias) {
    return gemm(0, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

int eng_dnnl_gemm_bf16(int transA, int transB, int M, int N, int K, float alpha,
                       const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                       float *C, int ldc, const float *bias) {
    return gemm(1, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

/* ---------------------------------------------------------------- conv */

int eng_conv2d_shape_init(eng_conv2d_shape *s, int N, int H, int W, int C, int KH, int KW,
                          int OC, int stride_h, int stride_w, int padding) {
    if (!s || N < 1 || H < 1 || W < 1 || C < 1 || KH < 1 || KW < 1 || OC < 1 || stride_h < 1 ||
        stride_w < 1 || (padding != ENG_PAD_VALID && padding != ENG_PAD_SAME))
        return HPO_EINVAL;
    eng_conv2d_shape r;
    memset(&r, 0, sizeof r);
    r.N = N, r.H = H, r.W = W, r.C = C, r.KH = KH, r.KW = KW, r.OC = OC;
    r.stride_h = stride_h, r.stride_w = stride_w;
    if (padding == ENG_PAD_SAME) {
        r.OH = (H + stride_h - 1) / stride_h;
        r.OW = (W + stride_w - 1) / stride_w;
        int ph = (r.OH - 1) * stride_h + KH - H, pw = (r.OW - 1) * stride_w + KW - W;
        if (ph < 0) ph = 0;
        if (pw < 0) pw = 0;
        r.pad_t = ph / 2, r.pad_b = ph - ph / 2, r.pad_l = pw / 2, r.pad_r = pw - pw / 2;
    } else {
        if (KH > H || KW > W) return HPO_EINVAL;
        r.OH = (H - KH) / stride_h + 1;
        r.OW = (W - KW) / stride_w + 1;
    }
    if (r.OH < 1 || r.OW < 1) return HPO_EINVAL;
    *s = r;
    return 0;
}

double eng_conv2d_flops(const eng_conv2d_shape *s) {
    return 2.0 * s->N * s->OH * s->OW * s->OC * (double)s->KH * s->KW * s->C;
}

/* Weights layout per op. Measured on the CNN's first layer (128x28x28x1 ->
 * 32, 3x3, 1 thread, tests/bench/kernels.c): oneDNN's blocked layout plus a
 * reorder per call beats plain HWIO (which only gets gemm:jit, im2col) for
 * every op but f32 backward-data: f32 fwd 2.1 vs 3.7 ms, f32 bwd_w 1.7 vs
 * 4.8 ms, bf16 fwd 3.2 vs 37.8 ms, bf16 bwd_d 1.0 vs 4.3 ms, bf16 bwd_w 2.6
 * vs 8.7 ms; f32 bwd_d 9.6 vs 5.5 ms (plain wins). Below AVX-512 (an AVX2
 * CPU, or ONEDNN_MAX_CPU_ISA=AVX2) every op gets plain HWIO: there oneDNN
 * 2.6's jit:avx2 backward-weights kernel with blocked weights (ABcd8b8a)
 * writes 16 bytes past a 432-byte buffer of its own for a 3x3 conv of 4 to
 * 6 channels, and the heap breaks (valgrind; test_weights aborted in 2 runs
 * of 3), while gemm:jit with plain weights runs clean.
 * HPO_DNNL_CONV_WEIGHTS=plain|any overrides all of it (read once). */
static int weights_any(int op, int bf16) {
    static atomic_int forced = -2; /* worker threads race to set the same value */
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    if (f == -2) {
        const char *e = getenv("HPO_DNNL_CONV_WEIGHTS");
        f = !e ? -1 : strcmp(e, "any") == 0 ? 1 : strcmp(e, "plain") == 0 ? 0 : -1;
        if (f < 0 && !dnnl_isa_has(dnnl_cpu_isa_avx512_core)) f = 0;
        atomic_store_explicit(&forced, f, memory_order_relaxed);
    }
    if (f >= 0) return f;
    return !(op == OP_CONV_BWD_D && !bf16);
}

static int conv_create(entry *e) {
    const key *k = &e->k;
    const eng_conv2d_shape *c = &k->cs;
    dnnl_data_type_t in = k->dt ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t src, wei, wuser, bias, dst;
    dnnl_dims_t ds = {c->N, c->C, c->H, c->W}, dw = {c->OC, c->C, c->KH, c->KW}, db = {c->OC},
                dd = {c->N, c->OC, c->OH, c->OW};
    dnnl_dims_t strides = {c->stride_h, c->stride_w}, pl = {c->pad_t, c->pad_l},
                pr = {c->pad_b, c->pad_r};
    dnnl_convolution_desc_t fwd, bwd;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL, rpd = NULL;
    int rc = 0;
    /* data types per op: inputs `in`, outputs f32 */
    dnnl_data_type_t t_src = k->op == OP_CONV_BWD_D ? dnnl_f32 : in;
    dnnl_data_type_t t_wei = k->op == OP_CONV_BWD_W ? dnnl_f32 : in;
    dnnl_data_type_t t_dst = k->op == OP_CONV_FWD ? dnnl_f32 : in;
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&src, 4, ds, t_src, dnnl_nhwc);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&wei, 4, dw, t_wei, k->wany ? dnnl_format_tag_any : dnnl_hwio);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&wuser, 4, dw, t_wei, dnnl_hwio);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&bias, 1, db, dnnl_f32, dnnl_a);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&dst, 4, dd, t_dst, dnnl_nhwc);
    /* the forward descriptor (the hint for backward passes) */
    if (st == dnnl_success) {
        dnnl_memory_desc_t fs = src, fw = wei, fd = dst;
        fs.data_type = in, fw.data_type = in;
        fd.data_type = k->op == OP_CONV_FWD ? dnnl_f32 : in;
        st = dnnl_convolution_forward_desc_init(&fwd, dnnl_forward_training, dnnl_convolution_direct,
                                                &fs, &fw, k->bias ? &bias : NULL, &fd, strides, pl, pr);
    }
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&fpd, &fwd, NULL, g_engine, NULL);
    if (st != dnnl_success) {
        rc = map_status(st, "conv forward primitive_desc_create");
        goto fail;
    }
    int ids[4], n = 0, warg;
    if (k->op == OP_CONV_FWD) {
        pd = fpd, fpd = NULL;
        ids[n++] = DNNL_ARG_SRC, ids[n++] = DNNL_ARG_DST;
        if (k->bias) ids[n++] = DNNL_ARG_BIAS;
        warg = DNNL_ARG_WEIGHTS;
    } else if (k->op == OP_CONV_BWD_D) {
        st = dnnl_convolution_backward_data_desc_init(&bwd, dnnl_convolution_direct, &src, &wei, &dst,
                                                      strides, pl, pr);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &bwd, NULL, g_engine, fpd);
        ids[n++] = DNNL_ARG_DIFF_DST, ids[n++] = DNNL_ARG_DIFF_SRC;
        warg = DNNL_ARG_WEIGHTS;
    } else {
        st = dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &src, &wei,
                                                         k->bias ? &bias : NULL, &dst, strides, pl, pr);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &bwd, NULL, g_engine, fpd);
        ids[n++] = DNNL_ARG_SRC, ids[n++] = DNNL_ARG_DIFF_DST;
        if (k->bias) ids[n++] = DNNL_ARG_DIFF_BIAS;
        warg = DNNL_ARG_DIFF_WEIGHTS;
    }
    if (st != dnnl_success) {
        rc = map_status(st, "conv backward primitive_desc_create");
        goto fail;
    }
    ids[n++] = warg;
    if ((rc = finish_entry(e, pd, ids, n)) < 0) goto fail;
    /* weights in a layout other than HWIO: a buffer and a reorder */
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, warg);
    if (!dnnl_memory_desc_equal(pw, &wuser)) {
        size_t sz = dnnl_memory_desc_get_size(pw);
        e->wbuf = aligned_alloc(64, (sz + 63) & ~(size_t)63);
        if (!e->wbuf) {
            rc = HPO_ENOMEM;
            goto fail;
        }
        st = dnnl_memory_create(&e->wblk, pw, g_engine, e->wbuf);
        if (st == dnnl_success) st = dnnl_memory_create(&e->wuser, &wuser, g_engine, DNNL_MEMORY_NONE);
        if (st == dnnl_success) {
            if (k->op == OP_CONV_BWD_W)
                st = dnnl_reorder_primitive_desc_create(&rpd, pw, g_engine, &wuser, g_engine, NULL);
            else
                st = dnnl_reorder_primitive_desc_create(&rpd, &wuser, g_engine, pw, g_engine, NULL);
        }
        if (st == dnnl_success) st = dnnl_primitive_create(&e->wreorder, rpd);
        if (st == dnnl_success) st = dnnl_memory_set_data_handle(e->args[n - 1].memory, e->wbuf);
        if (st != dnnl_success) {
            rc = map_status(st, "conv weights reorder");
            goto fail;
        }
    }
fail:
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    return rc;
}

static int reorder_w(tls_state *s, entry *e, const void *user, int to_user) {
    dnnl_status_t st = dnnl_memory_set_data_handle(e->wuser, (void *)user);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, to_user ? e->wblk : e->wuser},
                            {DNNL_ARG_TO, to_user ? e->wuser : e->wblk}};
    if (st == dnnl_success) st = dnnl_primitive_execute(e->wreorder, s->stream, 2, a);
    if (st == dnnl_success) st = dnnl_stream_wait(s->stream);
    return map_status(st, "weights reorder");
}

static entry *conv_entry(int op, const eng_conv2d_shape *cs, eng_dnnl_type t, int bias, int *rc) {
    tls_state *s = state();
    if (!s) {
        *rc = HPO_EUNSUPPORTED;
        return NULL;
    }
    key k;
    memset(&k, 0, sizeof k);
    k.op = op, k.dt = t == ENG_DNNL_BF16, k.bias = bias, k.cs = *cs, k.wany = weights_any(op, t == ENG_DNNL_BF16);
    k.alpha = 1.0f;
    int fresh;
    entry *e = lookup(s, &k, &fresh);
    if (fresh && (*rc = conv_create(e)) < 0) {
        entry_clear(e);
        return NULL;
    }
    *rc = 0;
    return e;
}

static int conv_check(const eng_conv2d_shape *s, eng_dnnl_type t) {
    if (!s || s->OH < 1 || s->OW < 1 || (t != ENG_DNNL_F32 && t != ENG_DNNL_BF16)) return HPO_EINVAL;
    return 0;
}

/* With few input channels (the first layer of a CNN on images) oneDNN 2.6's
 * bf16 forward kernels are slower than f32 brgconv (128x28x28x1 -> 32:
 * 3.3-4.4 ms vs 1.3-2.1 ms), while widening x and w to f32 costs ~0.05 ms:
 * run those in f32 (exact: bf16 values are f32 values). */
#define BF16_FWD_MIN_C 8

static float *scratch(tls_state *st, size_t n) {
    if (st->scratch_n < n) {
        free(st->scratch);
        st->scratch = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
        st->scratch_n = st->scratch ? n : 0;
    }
    return st->scratch;
}

int eng_dnnl_conv2d_forward(const eng_conv2d_shape *s, eng_dnnl_type t, const void *x,
                            const void *w, const float *bias, float *y) {
    int rc = conv_check(s, t);
    if (rc < 0 || !x || !w || !y) return rc < 0 ? rc : HPO_EINVAL;
    if (t == ENG_DNNL_BF16 && s->C < BF16_FWD_MIN_C && state()) {
        size_t nx = (size_t)s->N * s->H * s->W * s->C, nw = (size_t)s->KH * s->KW * s->C * s->OC;
        float *buf = scratch(t_state, nx + nw);
        if (buf) {
            eng_bf16_to_f32_n(x, buf, nx);
            eng_bf16_to_f32_n(w, buf + nx, nw);
            return eng_dnnl_conv2d_forward(s, ENG_DNNL_F32, buf, buf + nx, bias, y);
        }
    }
    entry *e = conv_entry(OP_CONV_FWD, s, t, bias != NULL, &rc);
    if (!e) return rc;
    tls_state *st = t_state;
    if (e->wreorder) {
        if ((rc = reorder_w(st, e, w, 0)) < 0) return rc;
    } else if ((rc = set_arg(e, DNNL_ARG_WEIGHTS, w)) < 0) {
        return rc;
    }
    if ((rc = set_arg(e, DNNL_ARG_SRC, x)) < 0 || (rc = set_arg(e, DNNL_ARG_DST, y)) < 0 ||
        (bias && (rc = set_arg(e, DNNL_ARG_BIAS, bias)) < 0))
        return rc;
    return run(st, e);
}

int eng_dnnl_conv2d_backward_data(const eng_conv2d_shape *s, eng_dnnl_type t, const void *dy,
                                  const void *w, float *dx) {
    int rc = conv_check(s, t);
    if (rc < 0 || !dy || !w || !dx) return rc < 0 ? rc : HPO_EINVAL;
    entry *e = conv_entry(OP_CONV_BWD_D, s, t, 0, &rc);
    if (!e) return rc;
    tls_state *st = t_state;
    if (e->wreorder) {
        if ((rc = reorder_w(st, e, w, 0)) < 0) return rc;
    } else if ((rc = set_arg(e, DNNL_ARG_WEIGHTS, w)) < 0) {
        return rc;
    }
    if ((rc = set_arg(e, DNNL_ARG_DIFF_DST, dy)) < 0 || (rc = set_arg(e, DNNL_ARG_DIFF_SRC, dx)) < 0)
        return rc;
    return run(st, e);
}

int eng_dnnl_conv2d_backward_weights(const eng_conv2d_shape *s, eng_dnnl_type t, const void *x,
                                     const void *dy, float *dw, float *db) {
    int rc = conv_check(s, t);
    if (rc < 0 || !x || !dy || !dw) return rc < 0 ? rc : HPO_EINVAL;
    entry *e = conv_entry(OP_CONV_BWD_W, s, t, db != NULL, &rc);
    if (!e) return rc;
    tls_state *st = t_state;
    if (!e->wreorder && (rc = set_arg(e, DNNL_ARG_DIFF_WEIGHTS, dw)) < 0) return rc;
    if ((rc = set_arg(e, DNNL_ARG_SRC, x)) < 0 || (rc = set_arg(e, DNNL_ARG_DIFF_DST, dy)) < 0 ||
        (db && (rc = set_arg(e, DNNL_ARG_DIFF_BIAS, db)) < 0))
        return rc;
    if ((rc = run(st, e)) < 0) return rc;
    return e->wreorder ? reorder_w(st, e, dw, 1) : 0;
}

const char *eng_dnnl_last_impl(void) {
    tls_state *s = t_state;
    if (!s) return "";
    entry *best = NULL;
    for (int i = 0; i < ENG_DNNL_CACHE_SIZE; i++)
        if (s->e[i].used && (!best || s->e[i].stamp > best->stamp)) best = &s->e[i];
    return best ? best->impl : "";
}
