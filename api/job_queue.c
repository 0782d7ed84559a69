/* job_queue.c - the run queue: the embedded studies and their states, so
 * the scheduler's pass looks at the studies hpod trains and at nothing else
 * (jobs.h, jobs_internal.h). Loaded from storage once (every stored
 * definition is read there, and only there: the max_seconds deadlines of
 * external studies are loaded in the same pass); then the calls that change a
 * study keep it: create, pause, resume, cancel, complete, delete, under the
 * study's lock right after storage changed, then wake the scheduler once
 * every lock is released; every tick, api_queue_sync adds what other nodes
 * (sharing the database) created or changed, from storage's study change
 * counter: the list read at start is read after that counter, so nothing
 * falls between the two. A study deleted through another node is dropped
 * by the scheduler when it finds it gone. It is an index: the scheduler still reads a
 * study's state from storage before it starts a trial. Its mutex is a leaf
 * of the lock order: nothing is called under it. */
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"

typedef struct queued {
    int64_t id;        /* ids grow (AUTOINCREMENT): sorted by id is oldest first */
    int state;         /* sto_study_state */
    double held_until; /* not loaded again before then (api_queue_hold); 0: none */
} queued;

struct api_run_queue {
    pthread_mutex_t lock;
    queued *items;
    size_t n, cap;
    int64_t since; /* storage's study change counter seen (api_queue_sync; its thread only) */
    void (*wakeup)(void *arg); /* the scheduler's, or NULL */
    void *wakeup_arg;
};

/* The index of id, or where it would go (under the lock). */
static size_t find(const struct api_run_queue *q, int64_t id) {
    size_t lo = 0, hi = q->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (q->items[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void put(struct api_run_queue *q, int64_t id, int state) {
    size_t i = find(q, id);
    if (i < q->n && q->items[i].id == id) {
        if (q->items[i].state != state) q->items[i].held_until = 0; /* a new state: try it at once */
        q->items[i].state = state;
        return;
    }
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 16;
        q->items = hpo_xrealloc(q->items, q->cap * sizeof *q->items);
    }
    memmove(q->items + i + 1, q->items + i, (q->n - i) * sizeof *q->items);
    q->items[i] = (queued){id, state, 0};
    q->n++;
}

/* Whether a stored definition is an embedded study (it has a "model": the
 * rule of api_study_def_parse), and its tuner.max_seconds (0: none). */
static int is_embedded(const char *spec, double *max_seconds) {
    json_t *def = json_loads(spec, 0, NULL);
    int yes = json_object_get(def, "model") != NULL;
    json_t *ms = json_object_get(json_object_get(def, "tuner"), "max_seconds");
    *max_seconds = json_is_number(ms) ? json_number_value(ms) : 0;
    json_decref(def);
    return yes;
}

/* A stored study into the queue (embedded) or the deadlines (external,
 * with a max_seconds, that may still end). */
static void learn(api_ctx *ctx, struct api_run_queue *q, const sto_study *s) {
    double ms;
    if (is_embedded(s->spec, &ms)) {
        pthread_mutex_lock(&q->lock);
        put(q, s->id, s->state);
        pthread_mutex_unlock(&q->lock);
    } else if (ms > 0 && (s->state == STO_STUDY_RUNNING || s->state == STO_STUDY_PAUSED)) {
        api_deadline_add(ctx, s->id, s->created + ms); /* may be past: ends at the first pass */
    }
}

int api_queue_new(api_ctx *ctx) {
    struct api_run_queue *q = hpo_xcalloc(1, sizeof *q);
    pthread_mutex_init(&q->lock, NULL);
    sto_study *list = NULL;
    size_t n = 0;
    /* the change counter before the list: api_queue_sync starts from it */
    int rc = sto_study_changes_seq(ctx->db, &q->since);
    if (rc == 0) rc = sto_study_list(ctx->db, &list, &n);
    if (rc) {
        pthread_mutex_destroy(&q->lock);
        free(q);
        return rc;
    }
    for (size_t i = 0; i < n; i++) learn(ctx, q, &list[i]);
    sto_study_list_free(list, n);
    ctx->queue = q;
    return 0;
}

void api_queue_sync(api_ctx *ctx) {
    struct api_run_queue *q = ctx->queue;
    sto_study *list = NULL;
    size_t n = 0;
    if (sto_studies_changed(ctx->db, &q->since, &list, &n)) return; /* logged; the next tick tries again */
    for (size_t i = 0; i < n; i++) learn(ctx, q, &list[i]);
    sto_study_list_free(list, n);
}

void api_queue_free(api_ctx *ctx) {
    struct api_run_queue *q = ctx->queue;
    if (!q) return;
    pthread_mutex_destroy(&q->lock);
    free(q->items);
    free(q);
    ctx->queue = NULL;
}

void api_queue_set(api_ctx *ctx, int64_t study_id, int state) {
    struct api_run_queue *q = ctx->queue;
    pthread_mutex_lock(&q->lock);
    put(q, study_id, state);
    pthread_mutex_unlock(&q->lock);
}

/* The entry of id, or NULL (under the lock). */
static queued *entry(struct api_run_queue *q, int64_t id) {
    size_t i = find(q, id);
    return i < q->n && q->items[i].id == id ? &q->items[i] : NULL;
}

int api_queue_has(api_ctx *ctx, int64_t study_id) {
    struct api_run_queue *q = ctx->queue;
    pthread_mutex_lock(&q->lock);
    int has = entry(q, study_id) != NULL;
    pthread_mutex_unlock(&q->lock);
    return has;
}

void api_queue_hold(api_ctx *ctx, int64_t study_id, double until) {
    struct api_run_queue *q = ctx->queue;
    pthread_mutex_lock(&q->lock);
    queued *e = entry(q, study_id);
    if (e) e->held_until = until;
    pthread_mutex_unlock(&q->lock);
}

int api_queue_held(api_ctx *ctx, int64_t study_id, double now) {
    struct api_run_queue *q = ctx->queue;
    pthread_mutex_lock(&q->lock);
    queued *e = entry(q, study_id);
    int held = e && e->held_until > now;
    pthread_mutex_unlock(&q->lock);
    return held;
}

void api_queue_remove(api_ctx *ctx, int64_t study_id) {
    struct api_run_queue *q = ctx->queue;
    pthread_mutex_lock(&q->lock);
    size_t i = find(q, study_id);
    if (i < q->n && q->items[i].id == study_id) {
        memmove(q->items + i, q->items + i + 1, (q->n - i - 1) * sizeof *q->items);
        q->n--;
    }
    pthread_mutex_unlock(&q->lock);
}

size_t api_queue_list(api_ctx *ctx, unsigned mask, int64_t **ids) {
    struct api_run_queue *q = ctx->queue;
    size_t k = 0;
    pthread_mutex_lock(&q->lock);
    *ids = q->n ? hpo_xmalloc(q->n * sizeof **ids) : NULL;
    for (size_t i = 0; i < q->n; i++)
        if (mask & API_STATE_BIT(q->items[i].state)) (*ids)[k++] = q->items[i].id;
    pthread_mutex_unlock(&q->lock);
    return k;
}

void api_jobs_set_wakeup(api_ctx *ctx, void (*fn)(void *arg), void *arg) {
    struct api_run_queue *q = ctx->queue;
    pthread_mutex_lock(&q->lock);
    q->wakeup = fn;
    q->wakeup_arg = arg;
    pthread_mutex_unlock(&q->lock);
}

void api_jobs_wake(api_ctx *ctx) {
    struct api_run_queue *q = ctx->queue;
    pthread_mutex_lock(&q->lock);
    void (*fn)(void *) = q->wakeup;
    void *arg = q->wakeup_arg;
    pthread_mutex_unlock(&q->lock);
    if (fn) fn(arg);
}
