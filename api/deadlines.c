/* deadlines.c - the max_seconds deadlines of external studies: a binary
 * min-heap of (deadline, study id), so the scheduler's pass finds the due
 * ones by looking at the top, whatever the number of external studies
 * (jobs_internal.h). Its mutex is a leaf: nothing is called under it. */
#include <stdlib.h>

#include "jobs_internal.h"

typedef struct deadline {
    double at;
    int64_t study_id;
} deadline;

struct api_deadlines {
    pthread_mutex_t lock;
    deadline *heap;
    size_t n, cap;
};

int api_deadlines_new(api_ctx *ctx) {
    struct api_deadlines *d = hpo_xcalloc(1, sizeof *d);
    pthread_mutex_init(&d->lock, NULL);
    ctx->deadlines = d;
    return 0;
}

void api_deadlines_free(api_ctx *ctx) {
    struct api_deadlines *d = ctx->deadlines;
    if (!d) return;
    pthread_mutex_destroy(&d->lock);
    free(d->heap);
    free(d);
    ctx->deadlines = NULL;
}

static void swap(deadline *a, deadline *b) {
    deadline t = *a;
    *a = *b;
    *b = t;
}

void api_deadline_add(api_ctx *ctx, int64_t study_id, double at) {
    struct api_deadlines *d = ctx->deadlines;
    pthread_mutex_lock(&d->lock);
    /* once per study: api_queue_sync learns again of the studies this node
     * created (a scan, at a study's creation or state change only) */
    for (size_t i = 0; i < d->n; i++)
        if (d->heap[i].study_id == study_id) {
            pthread_mutex_unlock(&d->lock);
            return;
        }
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 16;
        d->heap = hpo_xrealloc(d->heap, d->cap * sizeof *d->heap);
    }
    size_t i = d->n++;
    d->heap[i] = (deadline){at, study_id};
    while (i > 0 && d->heap[(i - 1) / 2].at > d->heap[i].at) { /* sift up */
        swap(&d->heap[(i - 1) / 2], &d->heap[i]);
        i = (i - 1) / 2;
    }
    pthread_mutex_unlock(&d->lock);
}

/* Removes the top (lock held). */
static void pop(struct api_deadlines *d) {
    d->heap[0] = d->heap[--d->n];
    for (size_t i = 0;;) { /* sift down */
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < d->n && d->heap[l].at < d->heap[m].at) m = l;
        if (r < d->n && d->heap[r].at < d->heap[m].at) m = r;
        if (m == i) break;
        swap(&d->heap[i], &d->heap[m]);
        i = m;
    }
}

size_t api_deadlines_due(api_ctx *ctx, double now, int64_t **ids) {
    struct api_deadlines *d = ctx->deadlines;
    size_t k = 0, cap = 0;
    *ids = NULL;
    pthread_mutex_lock(&d->lock);
    while (d->n > 0 && d->heap[0].at <= now) {
        if (k == cap) {
            cap = cap ? 2 * cap : 8;
            *ids = hpo_xrealloc(*ids, cap * sizeof **ids);
        }
        (*ids)[k++] = d->heap[0].study_id;
        pop(d);
    }
    pthread_mutex_unlock(&d->lock);
    return k;
}
