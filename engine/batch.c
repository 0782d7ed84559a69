/* batch.c - gathering rows into batches, per-epoch shuffling and the
 * double-buffered prefetch thread (see data.h).
 *
 * Prefetch protocol: two slots; batch j goes to slot j % 2. A slot is FREE,
 * FILLED (holds batch slot_batch[s]) or INUSE (handed to the caller). The
 * producer gathers the next batch into its slot when the slot is FREE; the
 * consumer's next() frees the slot of the previous batch (the caller is done
 * with it by contract), then waits until its batch is FILLED. start_epoch
 * bumps a generation counter, waits for an in-flight gather to finish and
 * resets both slots, so a stale batch is never handed out. One mutex and one
 * condition variable (broadcast) serve both sides: there are two threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "data.h"
#include "rng.h"
#include "tensor.h"

enum { FREE = 0, FILLED = 1, INUSE = 2 };

typedef struct slot {
    void *x;
    int32_t *y_class;
    float *y_target;
    size_t n;
} slot;

struct eng_batcher {
    eng_dataset *ds;
    eng_split view; /* ds + index copy, used by the gather */
    uint32_t *order;
    eng_batcher_opts o;
    size_t nb;
    slot s[2];
    /* epoch state (under mu when prefetching) */
    int started;
    size_t next_batch;
    int state[2];
    size_t slot_batch[2];
    size_t produce_next;
    uint64_t gen;
    int busy, stop;
    int rc; /* first gather error */
    pthread_t th;
    int has_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* ---------------------------------------------------------------- gather */

static void gather_x(const eng_dataset *ds, uint32_t row, eng_batch_xtype xt, void *dst,
                     size_t off) {
    size_t ss = ds->sample_size;
    if (ds->x_type == ENG_DATA_U8) {
        const uint8_t *src = (const uint8_t *)ds->x + (size_t)row * ss;
        if (xt == ENG_BATCH_BF16) {
            eng_u8_to_bf16_n(src, ds->x_scale, (eng_bf16 *)dst + off, ss);
        } else {
            float *d = (float *)dst + off, sc = ds->x_scale;
            for (size_t i = 0; i < ss; i++) d[i] = (float)src[i] * sc;
        }
    } else {
        const float *src = (const float *)ds->x + (size_t)row * ss;
        if (xt == ENG_BATCH_BF16) {
            eng_bf16 *d = (eng_bf16 *)dst + off;
            if (ds->x_scale == 1.0f) {
                eng_f32_to_bf16_n(src, d, ss);
            } else {
                for (size_t i = 0; i < ss; i++) d[i] = eng_f32_to_bf16(src[i] * ds->x_scale);
            }
        } else {
            float *d = (float *)dst + off, sc = ds->x_scale;
            if (sc == 1.0f) memcpy(d, src, ss * sizeof *d);
            else
                for (size_t i = 0; i < ss; i++) d[i] = src[i] * sc;
        }
    }
}

/* Rows are visited in shuffled order, so the hardware prefetcher cannot see
 * the next one coming: the loop asks for the row PREFETCH_AHEAD places ahead
 * while converting this one (perf had the conversion stalled on its first
 * load 75% of the time without it). */
#define PREFETCH_AHEAD 3

/* keep: for a use much later (eng_batcher_prefetch_next_rows), so into L2
 * rather than the non-temporal hint of a row needed a few rows from now. */
static void prefetch_row(const eng_dataset *ds, uint32_t row, int keep) {
    size_t bytes = ds->sample_size * (ds->x_type == ENG_DATA_U8 ? 1 : 4);
    const char *p = (const char *)ds->x + (size_t)row * bytes;
    for (size_t o = 0; o < bytes; o += 64) {
        if (keep) __builtin_prefetch(p + o, 0, 2);
        else __builtin_prefetch(p + o, 0, 0);
    }
}

/* Rows idx[first..first+count) of ds. */
static void gather_rows(const eng_dataset *ds, const uint32_t *idx, size_t count,
                        eng_batch_xtype xt, void *x, int32_t *y_class, float *y_target) {
    if (x)
        for (size_t i = 0; i < count && i < PREFETCH_AHEAD; i++) prefetch_row(ds, idx[i], 0);
    for (size_t i = 0; i < count; i++) {
        uint32_t r = idx[i];
        if (x && i + PREFETCH_AHEAD < count) prefetch_row(ds, idx[i + PREFETCH_AHEAD], 0);
        if (x) gather_x(ds, r, xt, x, i * ds->sample_size);
        if (y_class && ds->y_class) y_class[i] = ds->y_class[r];
        if (y_target && ds->y_target)
            memcpy(y_target + i * ds->y_dim, ds->y_target + (size_t)r * ds->y_dim,
                   ds->y_dim * sizeof *y_target);
    }
}

int eng_split_gather(const eng_split *s, size_t first, size_t count, eng_batch_xtype xt,
                     void *x, int32_t *y_class, float *y_target) {
    if (!s || !s->ds || first > s->n || count > s->n - first) return HPO_EINVAL;
    if (xt != ENG_BATCH_F32 && xt != ENG_BATCH_BF16) return HPO_EINVAL;
    gather_rows(s->ds, s->idx + first, count, xt, x, y_class, y_target);
    return 0;
}

/* ---------------------------------------------------------------- batcher */

static size_t batch_count(const eng_batcher *b, size_t j) {
    size_t first = j * b->o.batch_size;
    size_t left = b->view.n - first;
    return left < b->o.batch_size ? left : b->o.batch_size;
}

static void gather_batch(eng_batcher *b, size_t j, slot *sl) {
    size_t first = j * b->o.batch_size, n = batch_count(b, j);
    gather_rows(b->ds, b->order + first, n, b->o.x_type, sl->x, sl->y_class, sl->y_target);
    sl->n = n;
}

static void *producer(void *arg) {
    eng_batcher *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        size_t j = b->produce_next;
        if (!b->started || j >= b->nb || b->state[j % 2] != FREE) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        uint64_t g = b->gen;
        b->busy = 1;
        pthread_mutex_unlock(&b->mu);
        gather_batch(b, j, &b->s[j % 2]);
        pthread_mutex_lock(&b->mu);
        b->busy = 0;
        if (g == b->gen) {
            b->state[j % 2] = FILLED;
            b->slot_batch[j % 2] = j;
            b->produce_next = j + 1;
        }
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* batch buffers come from eng_alloc: counted in memory estimates (train.h) */
static void *xaligned(size_t n) { return eng_alloc(n); }

int eng_batcher_new(const eng_split *s, const eng_batcher_opts *opts, eng_batcher **out,
                    hpo_error *err) {
    if (!s || !s->ds || !opts || opts->batch_size == 0)
        return hpo_fail(err, HPO_EINVAL, "training.batch_size", "batch size must be positive");
    if (opts->x_type != ENG_BATCH_F32 && opts->x_type != ENG_BATCH_BF16)
        return hpo_fail(err, HPO_EINVAL, "training.precision", "unknown batch x type");
    if (s->n == 0)
        return hpo_fail(err, HPO_EINVAL, "dataset", "split of %s is empty", s->ds->name);
    eng_batcher *b = calloc(1, sizeof *b);
    if (!b) return hpo_fail(err, HPO_ENOMEM, "", "out of memory");
    int rc = HPO_ENOMEM;
    b->o = *opts;
    b->ds = eng_dataset_retain(s->ds);
    size_t bs = opts->batch_size < s->n ? opts->batch_size : s->n;
    b->o.batch_size = opts->batch_size;
    b->nb = opts->drop_last ? s->n / opts->batch_size : (s->n + opts->batch_size - 1) / opts->batch_size;
    if (b->nb == 0) {
        rc = hpo_fail(err, HPO_EINVAL, "training.batch_size",
                      "batch size %zu with drop_last leaves no batch of %zu rows",
                      opts->batch_size, s->n);
        eng_dataset_release(b->ds);
        free(b);
        return rc;
    }
    b->view.ds = b->ds;
    b->view.n = s->n;
    b->view.idx = malloc(s->n * sizeof(uint32_t));
    b->order = malloc(s->n * sizeof(uint32_t));
    if (!b->view.idx || !b->order) goto fail;
    memcpy(b->view.idx, s->idx, s->n * sizeof(uint32_t));
    size_t xe = opts->x_type == ENG_BATCH_BF16 ? 2 : 4;
    int nslots = opts->prefetch ? 2 : 1;
    for (int i = 0; i < nslots; i++) {
        b->s[i].x = xaligned(bs * b->ds->sample_size * xe);
        if (b->ds->y_class) b->s[i].y_class = xaligned(bs * sizeof(int32_t));
        if (b->ds->y_target) b->s[i].y_target = xaligned(bs * b->ds->y_dim * sizeof(float));
        if (!b->s[i].x || (!b->s[i].y_class && !b->s[i].y_target)) goto fail;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (opts->prefetch) {
        if (pthread_create(&b->th, NULL, producer, b) != 0) {
            pthread_mutex_destroy(&b->mu);
            pthread_cond_destroy(&b->cv);
            rc = hpo_fail(err, HPO_EINTERNAL, "", "cannot start the prefetch thread");
            goto fail;
        }
        b->has_thread = 1;
    }
    *out = b;
    return 0;
fail:
    for (int i = 0; i < 2; i++) free(b->s[i].x), free(b->s[i].y_class), free(b->s[i].y_target);
    free(b->view.idx);
    free(b->order);
    eng_dataset_release(b->ds);
    free(b);
    return rc == HPO_ENOMEM ? hpo_fail(err, rc, "", "out of memory for batch buffers") : rc;
}

size_t eng_batcher_n_batches(const eng_batcher *b) { return b->nb; }

int eng_batcher_start_epoch(eng_batcher *b, uint64_t epoch) {
    if (!b) return HPO_EINVAL;
    if (b->has_thread) {
        pthread_mutex_lock(&b->mu);
        b->gen++;
        while (b->busy) pthread_cond_wait(&b->cv, &b->mu);
    }
    memcpy(b->order, b->view.idx, b->view.n * sizeof(uint32_t));
    if (b->o.shuffle) {
        hpo_rng r;
        hpo_rng_derive(&r, b->o.seed, epoch, 0);
        hpo_rng_shuffle_u32(&r, b->order, (uint32_t)b->view.n);
    }
    b->next_batch = 0;
    b->produce_next = 0;
    b->state[0] = b->state[1] = FREE;
    b->started = 1;
    if (b->has_thread) {
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
    return 0;
}

int eng_batcher_gather_rows(eng_batcher *b, const eng_batch *bt, size_t lo, size_t hi) {
    if (!b || !bt || !b->o.defer_gather || b->has_thread || lo > hi || hi > bt->n) return HPO_EINVAL;
    const eng_dataset *ds = b->ds;
    size_t xe = b->o.x_type == ENG_BATCH_BF16 ? 2 : 4, first = bt->index * b->o.batch_size;
    slot *sl = &b->s[0];
    gather_rows(ds, b->order + first + lo, hi - lo, b->o.x_type, (char *)sl->x + lo * ds->sample_size * xe,
                sl->y_class ? sl->y_class + lo : NULL, sl->y_target ? sl->y_target + lo * ds->y_dim : NULL);
    return 0;
}

void eng_batcher_prefetch_next_rows(const eng_batcher *b, const eng_batch *bt, size_t lo, size_t hi) {
    if (!b || !bt || !b->o.defer_gather || bt->index + 1 >= b->nb) return;
    size_t n = batch_count(b, bt->index + 1), first = (bt->index + 1) * b->o.batch_size;
    if (hi > n) hi = n;
    for (size_t i = lo; i < hi; i++) prefetch_row(b->ds, b->order[first + i], 1);
}

int eng_batcher_next(eng_batcher *b, eng_batch *out) {
    if (!b || !out) return HPO_EINVAL;
    if (!b->started) return HPO_ECONFLICT;
    size_t j = b->next_batch;
    if (!b->has_thread) {
        if (j >= b->nb) return 0;
        if (b->o.defer_gather) b->s[0].n = batch_count(b, j); /* eng_batcher_gather_rows fills it */
        else gather_batch(b, j, &b->s[0]);
        b->next_batch++;
        *out = (eng_batch){.n = b->s[0].n, .index = j, .x = b->s[0].x,
                           .y_class = b->s[0].y_class, .y_target = b->s[0].y_target};
        return 1;
    }
    pthread_mutex_lock(&b->mu);
    if (j > 0 && b->state[(j - 1) % 2] == INUSE) { /* the caller is done with batch j-1 */
        b->state[(j - 1) % 2] = FREE;
        pthread_cond_broadcast(&b->cv);
    }
    if (j >= b->nb) {
        pthread_mutex_unlock(&b->mu);
        return 0;
    }
    while (!(b->state[j % 2] == FILLED && b->slot_batch[j % 2] == j))
        pthread_cond_wait(&b->cv, &b->mu);
    b->state[j % 2] = INUSE;
    b->next_batch++;
    pthread_mutex_unlock(&b->mu);
    slot *sl = &b->s[j % 2];
    *out = (eng_batch){.n = sl->n, .index = j, .x = sl->x, .y_class = sl->y_class,
                       .y_target = sl->y_target};
    return 1;
}

int eng_batcher_next_into(eng_batcher *b, void *x, int32_t *y_class, float *y_target, size_t *n) {
    eng_batch bt;
    int rc = eng_batcher_next(b, &bt);
    if (rc <= 0) return rc;
    size_t xe = b->o.x_type == ENG_BATCH_BF16 ? 2 : 4;
    if (x) memcpy(x, bt.x, bt.n * b->ds->sample_size * xe);
    if (y_class && bt.y_class) memcpy(y_class, bt.y_class, bt.n * sizeof *y_class);
    if (y_target && bt.y_target) memcpy(y_target, bt.y_target, bt.n * b->ds->y_dim * sizeof(float));
    if (n) *n = bt.n;
    return 1;
}

void eng_batcher_free(eng_batcher *b) {
    if (!b) return;
    if (b->has_thread) {
        pthread_mutex_lock(&b->mu);
        b->stop = 1;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->th, NULL);
    }
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    for (int i = 0; i < 2; i++) free(b->s[i].x), free(b->s[i].y_class), free(b->s[i].y_target);
    free(b->view.idx);
    free(b->order);
    eng_dataset_release(b->ds);
    free(b);
}
