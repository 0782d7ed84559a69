/* replicas.c - data parallelism inside one worker slot (see replicas.h). */
#include "replicas.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dnnl_ops.h"
#include "hpo.h"
#include "optim.h"

/* How long an idle helper spins for the next phase before it sleeps: longer
 * than the gap between the two phases of a step and between steps, shorter
 * than anything between epochs (validation, checkpoint). */
#define SPIN_SECONDS 200e-6

enum { PHASE_GRADIENTS = 1, PHASE_UPDATE = 2, PHASE_EVALUATE = 3, PHASE_STOP = 4 };

typedef struct share {
    eng_model *model; /* the primary for share 0 */
    eng_metric_sums sums;
    double loss;
    int rows_lo, rows_hi;
    int rc;
    pthread_t thread;
    struct eng_replicas *owner;
    int index;
} share;

struct eng_replicas {
    eng_model *m;
    int threads;
    int running; /* helper threads started (1..running) */
    share *shares;
    /* the step being run (written by the main thread before a phase starts) */
    const eng_batch *bt;
    eng_batcher *deferred; /* gathers each share's rows, or NULL: bt is filled */
    int x_bf16;
    int n;
    float lr;
    long t;
    int phase;
    /* phase hand-off */
    atomic_ulong generation; /* bumped for every phase */
    atomic_int finished;     /* helpers done with the current phase */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sleepers;
};

/* ---- the phases, for share k ---- */

/* Forward and loss on share k's rows; with train, also the backward pass.
 * Training scales the loss by the share of the batch, so the shares'
 * gradients add up to the gradient of the whole batch's mean loss; inference
 * (evaluation) only adds metrics. */
static void run_share(eng_replicas *r, share *s, int train) {
    eng_model *mk = s->model;
    int nk = s->rows_hi - s->rows_lo, lo = s->rows_lo, K = mk->out_dim;
    memset(&s->sums, 0, sizeof s->sums);
    s->loss = 0;
    s->rc = 0;
    if (nk < 1) return;
    const eng_batch *bt = r->bt;
    if (r->deferred && (s->rc = eng_batcher_gather_rows(r->deferred, bt, (size_t)lo, (size_t)s->rows_hi))) return;
    const float *logits;
    if (r->x_bf16)
        s->rc = eng_model_forward_bf16(mk, (const uint16_t *)bt->x + (size_t)lo * mk->in_size, nk, train, &logits);
    else
        s->rc = eng_model_forward_from(mk, (const float *)bt->x + (size_t)lo * mk->in_size, nk, train, &logits);
    if (s->rc) return;
    s->loss = eng_loss_compute(mk->loss, mk->final_act, logits, bt->y_class ? bt->y_class + lo : NULL,
                               bt->y_target ? bt->y_target + (size_t)lo * K : NULL, nk, K,
                               train ? (float)nk / (float)r->n : 1.0f, train ? mk->dlogits : NULL, &s->sums);
    if (train && r->deferred) /* the next batch's rows come from DRAM while backward computes */
        eng_batcher_prefetch_next_rows(r->deferred, bt, (size_t)lo, (size_t)s->rows_hi);
    if (train && isfinite(s->loss)) s->rc = eng_model_backward(mk, nk);
}

/* Parameter range k of T, in whole 64-byte lines so no two threads write one. */
static void param_range(size_t n, int k, int T, size_t *lo, size_t *hi) {
    size_t lines = (n + 15) / 16;
    *lo = lines * (size_t)k / (size_t)T * 16;
    *hi = k + 1 == T ? n : lines * (size_t)(k + 1) / (size_t)T * 16;
    if (*hi > n) *hi = n;
    if (*lo > *hi) *lo = *hi;
}

static void run_update(eng_replicas *r, int k) {
    eng_model *m = r->m;
    size_t lo, hi;
    param_range(m->nparams, k, r->threads, &lo, &hi);
    if (hi <= lo) return;
    float *g = m->grads;
    for (int j = 2; j < r->threads; j++) { /* fixed order: deterministic sums */
        const float *gj = r->shares[j].model->grads;
        for (size_t i = lo; i < hi; i++) g[i] += gj[i];
    }
    /* the first replica's share is added inside the optimiser step */
    eng_optim_step_range_sum(&m->opt, r->lr, r->t, m->params, g, r->shares[1].model->grads, m->opt_state, m->nparams,
                             lo, hi - lo, m->precision == ENG_PREC_BF16 ? m->params_b16 : NULL);
}

/* ---- hand-off between the main thread and the helpers ---- */

static void *helper_main(void *arg) {
    share *s = arg;
    eng_replicas *r = s->owner;
    unsigned mxcsr = eng_set_ftz_daz();
    r->m->be->set_threads(1);
    unsigned long seen = 0; /* not a load: the first phase may be posted before this thread runs */
    for (;;) {
        double spin_until = hpo_monotonic() + SPIN_SECONDS;
        int polls = 0;
        while (atomic_load_explicit(&r->generation, memory_order_acquire) == seen) {
            _mm_pause();
            if (++polls % 64 == 0 && hpo_monotonic() > spin_until) {
                pthread_mutex_lock(&r->mu);
                r->sleepers++;
                while (atomic_load(&r->generation) == seen) pthread_cond_wait(&r->cv, &r->mu);
                r->sleepers--;
                pthread_mutex_unlock(&r->mu);
            }
        }
        seen = atomic_load_explicit(&r->generation, memory_order_acquire);
        int phase = r->phase;
        if (phase == PHASE_STOP) break;
        if (phase == PHASE_GRADIENTS || phase == PHASE_EVALUATE) run_share(r, s, phase == PHASE_GRADIENTS);
        else run_update(r, s->index);
        atomic_fetch_add_explicit(&r->finished, 1, memory_order_release);
    }
    eng_dnnl_thread_cleanup();
    eng_restore_mxcsr(mxcsr);
    return NULL;
}

static void start_phase(eng_replicas *r, int phase) {
    r->phase = phase;
    atomic_store_explicit(&r->finished, 0, memory_order_relaxed);
    pthread_mutex_lock(&r->mu);
    atomic_fetch_add_explicit(&r->generation, 1, memory_order_release);
    if (r->sleepers) pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void wait_helpers(eng_replicas *r) {
    int polls = 0;
    while (atomic_load_explicit(&r->finished, memory_order_acquire) < r->threads - 1) {
        _mm_pause();
        if (++polls > 20000) sched_yield(); /* a helper was descheduled: do not burn its core */
    }
}

/* ---- public ---- */

int eng_replicas_new(eng_model *m, int threads, eng_replicas **out) {
    if (!m || m->is_replica || threads < 2 || m->cap < threads) return HPO_EINVAL;
    eng_replicas *r = eng_alloc(sizeof *r);
    if (!r) return HPO_ENOMEM;
    memset(r, 0, sizeof *r);
    r->m = m;
    r->threads = threads;
    r->shares = eng_alloc((size_t)threads * sizeof *r->shares);
    if (!r->shares) {
        free(r);
        return HPO_ENOMEM;
    }
    memset(r->shares, 0, (size_t)threads * sizeof *r->shares);
    atomic_init(&r->generation, 0);
    atomic_init(&r->finished, 0);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int rc = HPO_OK;
    for (int k = 0; k < threads; k++) {
        share *s = &r->shares[k];
        s->owner = r;
        s->index = k;
        if (k == 0) s->model = m;
        else if (rc == HPO_OK) rc = eng_model_replica_new(m, &s->model);
    }
    for (int k = 1; rc == HPO_OK && k < threads; k++) {
        if (pthread_create(&r->shares[k].thread, NULL, helper_main, &r->shares[k])) rc = HPO_ENOMEM;
        else r->running = k;
    }
    if (rc) {
        eng_replicas_free(r);
        return rc;
    }
    m->be->set_threads(1);
    *out = r;
    return HPO_OK;
}

size_t eng_replicas_bytes(const eng_model *m, int threads, int cap, int precision) {
    if (threads < 2) return 0;
    size_t b = eng_size_add(eng_alloc_size(sizeof(eng_replicas)), eng_alloc_size((size_t)threads * sizeof(share)));
    return eng_size_add(b, eng_size_mul((size_t)(threads - 1), eng_model_replica_bytes(m, cap, precision)));
}

void eng_replicas_free(eng_replicas *r) {
    if (!r) return;
    if (r->running > 0) {
        start_phase(r, PHASE_STOP);
        for (int k = 1; k <= r->running; k++) pthread_join(r->shares[k].thread, NULL);
    }
    for (int k = 1; k < r->threads; k++) eng_model_free(r->shares[k].model); /* NULL where never made */
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->shares);
    free(r);
}

/* Splits bt's rows over the shares and records the step's inputs. */
static void assign_rows(eng_replicas *r, const eng_batch *bt, eng_batcher *deferred, int x_bf16) {
    int n = (int)bt->n;
    r->bt = bt;
    r->deferred = deferred;
    r->x_bf16 = x_bf16;
    r->n = n;
    for (int k = 0; k < r->threads; k++) {
        r->shares[k].rows_lo = (int)((long)n * k / r->threads);
        r->shares[k].rows_hi = (int)((long)n * (k + 1) / r->threads);
    }
}

/* Adds the shares' metrics to sums; the first failure code, or 0. */
static int collect(eng_replicas *r, eng_metric_sums *sums, double *mean_loss) {
    int rc = 0;
    double total = 0;
    for (int k = 0; k < r->threads; k++) {
        share *s = &r->shares[k];
        if (s->rc && !rc) rc = s->rc;
        total += s->loss * (double)(s->rows_hi - s->rows_lo) / (double)r->n;
        sums->loss += s->sums.loss;
        sums->correct += s->sums.correct;
        sums->sq += s->sums.sq;
        sums->abs += s->sums.abs;
        sums->n += s->sums.n;
        sums->nvals += s->sums.nvals;
    }
    if (mean_loss) *mean_loss = total;
    return rc;
}

int eng_replicas_step(eng_replicas *r, const eng_batch *bt, eng_batcher *deferred, int x_bf16, float lr, long t,
                      eng_metric_sums *sums, double *loss) {
    eng_model *m = r->m;
    int n = (int)bt->n;
    if (n < r->threads || n > m->cap) return HPO_EINVAL; /* every share has rows, the primary's included */
    eng_model_sync_shadows(m); /* before any replica reads them */
    assign_rows(r, bt, deferred, x_bf16);
    r->lr = lr;
    r->t = t;
    /* Every share starts from the primary's generator (checkpointed) and
     * draws as a one-thread run of the whole batch would, keeping its rows'
     * dropout masks and augmentations (model.h share_row0): the masks do
     * not depend on T, and the primary's generator advances as with T = 1. */
    for (int k = 0; k < r->threads; k++) {
        eng_model *mk = r->shares[k].model;
        if (k) mk->rng = m->rng;
        mk->share_row0 = r->shares[k].rows_lo;
        mk->share_rows = n;
    }
    start_phase(r, PHASE_GRADIENTS);
    run_share(r, &r->shares[0], 1);
    wait_helpers(r);
    m->share_row0 = m->share_rows = 0; /* the primary alone runs whole batches (a short last one) */
    int rc = collect(r, sums, loss);
    if (rc || !isfinite(*loss)) return rc;
    start_phase(r, PHASE_UPDATE);
    run_update(r, 0);
    wait_helpers(r);
    return HPO_OK;
}

int eng_replicas_evaluate(eng_replicas *r, const eng_batch *bt, int x_bf16, eng_metric_sums *sums) {
    eng_model *m = r->m;
    if ((int)bt->n < r->threads || (int)bt->n > m->cap) return HPO_EINVAL;
    eng_model_sync_shadows(m);
    for (int k = 1; k < r->threads; k++) /* inference uses the primary's running statistics */
        memcpy(r->shares[k].model->stats, m->stats, m->nstats * sizeof(float));
    assign_rows(r, bt, NULL, x_bf16);
    start_phase(r, PHASE_EVALUATE);
    run_share(r, &r->shares[0], 0);
    wait_helpers(r);
    return collect(r, sums, NULL);
}
