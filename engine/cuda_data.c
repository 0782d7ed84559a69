/* cuda_data.c - the shared device copies of datasets (see cuda_data.h): a
 * small table of entries under one mutex, uploads outside it. */
#include "cuda_data.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h" /* eng_size_mul */

enum { LOADING, READY, FAILED };

typedef struct entry {
    int device, state, refs, rc;
    const eng_dataset *ds;
    eng_cuda_data data;
    hpo_error err;
    struct entry *next;
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t loaded = PTHREAD_COND_INITIALIZER;
static entry *table;

size_t eng_cuda_data_x_bytes(const eng_dataset *ds) {
    return eng_size_mul(eng_size_mul(ds->n, ds->sample_size), ds->x_type == ENG_DATA_U8 ? 1 : sizeof(float));
}

size_t eng_cuda_data_y_bytes(const eng_dataset *ds) {
    return ds->y_class ? eng_size_mul(ds->n, sizeof(int32_t))
                       : eng_size_mul(eng_size_mul(ds->n, ds->y_dim), sizeof(float));
}

static entry **find(int device, const eng_dataset *ds) {
    entry **e = &table;
    while (*e && ((*e)->device != device || (*e)->ds != ds)) e = &(*e)->next;
    return e;
}

static void release(const eng_cuda_data_ops *ops, eng_cuda_data *d) {
    ops->free(ops->ctx, d->x);
    ops->free(ops->ctx, d->y);
    ops->free(ops->ctx, d->t);
    memset(d, 0, sizeof *d);
}

/* the copy's allocations and uploads; on failure nothing stays allocated */
static int load(const eng_cuda_data_ops *ops, const eng_dataset *ds, eng_cuda_data *d, hpo_error *err) {
    size_t xb = eng_cuda_data_x_bytes(ds), yb = eng_cuda_data_y_bytes(ds);
    void **y = ds->y_class ? (void **)&d->y : (void **)&d->t;
    const void *ysrc = ds->y_class ? (const void *)ds->y_class : (const void *)ds->y_target;
    int rc = ops->alloc(ops->ctx, xb, &d->x, err);
    if (!rc) rc = ops->alloc(ops->ctx, yb, y, err);
    if (!rc) rc = ops->upload(ops->ctx, d->x, ds->x, xb, err);
    if (!rc) rc = ops->upload(ops->ctx, *y, ysrc, yb, err);
    if (rc) release(ops, d);
    return rc;
}

/* one holder less; the last frees the copy (called with mu held) */
static void drop(const eng_cuda_data_ops *ops, entry **at) {
    entry *e = *at;
    if (--e->refs > 0) return;
    *at = e->next;
    if (e->state == READY) release(ops, &e->data);
    free(e);
}

int eng_cuda_data_get(const eng_cuda_data_ops *ops, int device, const eng_dataset *ds, eng_cuda_data *out,
                      hpo_error *err) {
    pthread_mutex_lock(&mu);
    entry *e = *find(device, ds);
    if (e) {
        e->refs++;
        while (e->state == LOADING) pthread_cond_wait(&loaded, &mu);
        int rc = e->state == READY ? 0 : e->rc;
        if (rc) {
            if (err) *err = e->err;
            drop(ops, find(device, ds));
        } else {
            *out = e->data;
        }
        pthread_mutex_unlock(&mu);
        return rc;
    }
    e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&mu);
        return hpo_fail(err, HPO_ENOMEM, "devices", "out of memory");
    }
    e->device = device;
    e->ds = ds;
    e->refs = 1;
    e->state = LOADING;
    e->next = table;
    table = e;
    pthread_mutex_unlock(&mu);

    eng_cuda_data d;
    memset(&d, 0, sizeof d);
    hpo_error lerr = {{0}, {0}};
    int rc = load(ops, ds, &d, &lerr);

    pthread_mutex_lock(&mu);
    if (rc) {
        e->state = FAILED;
        e->rc = rc;
        e->err = lerr;
        if (err) *err = lerr;
        drop(ops, find(device, ds));
    } else {
        e->state = READY;
        e->data = d;
        *out = d;
    }
    pthread_cond_broadcast(&loaded);
    pthread_mutex_unlock(&mu);
    return rc;
}

void eng_cuda_data_put(const eng_cuda_data_ops *ops, int device, const eng_dataset *ds) {
    pthread_mutex_lock(&mu);
    entry **at = find(device, ds);
    if (*at) drop(ops, at);
    pthread_mutex_unlock(&mu);
}

int eng_cuda_data_live(void) {
    pthread_mutex_lock(&mu);
    int n = 0;
    for (entry *e = table; e; e = e->next) n++;
    pthread_mutex_unlock(&mu);
    return n;
}
