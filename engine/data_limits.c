/* data_limits.c - the process-wide dataset limits: the most bytes one
 * dataset may take, and the load slots that bound how many datasets are
 * loaded at once (see data.h).
 *
 * Defaults. The memory budget is physical memory, or the cgroup v2
 * memory.max of this process when that is smaller (a container). A dataset
 * may take a quarter of it, clamped to [256 MiB, 4 GiB]: the cache keeps a
 * dataset for every study that uses it, an upload is validated by loading
 * it while the cache may hold another, and the models, their optimizer
 * state and SQLite need the rest; 4 GiB because the engine trains on CPU
 * cores, where a bigger dataset would take hours an epoch (the flag raises
 * it). Load slots: as many as fit in a quarter of the budget at the cap
 * each, 1 to 4 (with the default cap: 1 under 32 GiB, 2 from 32 GiB, 4
 * from 64 GiB).
 *
 * Threading: the settings are atomics, the budget is read once
 * (pthread_once); the slots are one mutex and a condition variable on
 * CLOCK_MONOTONIC. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "data.h"

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define MAX_LOADS 4

static atomic_size_t max_bytes_set; /* 0: default */
static atomic_int max_loads_set;    /* 0: default */

static pthread_once_t slots_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slots_cv;
static int slots_used;

static pthread_once_t budget_once = PTHREAD_ONCE_INIT;
static size_t budget;

/* Physical memory, or the cgroup's limit when smaller; 4 GiB if unknown. */
static void read_budget(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    size_t mem = pages > 0 && psize > 0 ? (size_t)pages * (size_t)psize : 4 * GIB;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); /* "max" when unlimited */
    if (f) {
        unsigned long long lim;
        if (fscanf(f, "%llu", &lim) == 1 && lim > 0 && lim < mem) mem = (size_t)lim;
        fclose(f);
    }
    budget = mem;
}

static size_t memory_budget(void) {
    pthread_once(&budget_once, read_budget);
    return budget;
}

void eng_data_set_max_bytes(size_t max_bytes) {
    atomic_store_explicit(&max_bytes_set, max_bytes, memory_order_relaxed);
}

size_t eng_data_max_bytes(void) {
    size_t v = atomic_load_explicit(&max_bytes_set, memory_order_relaxed);
    if (v) return v;
    v = memory_budget() / 4;
    if (v < 256 * MIB) v = 256 * MIB;
    if (v > 4 * GIB) v = 4 * GIB;
    return v;
}

static void slots_init(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&slots_cv, &a);
    pthread_condattr_destroy(&a);
}

void eng_data_set_max_loads(int n) {
    pthread_once(&slots_once, slots_init);
    atomic_store_explicit(&max_loads_set, n > 0 ? n : 0, memory_order_relaxed);
    pthread_mutex_lock(&slots_mu); /* more slots may let waiters in */
    pthread_cond_broadcast(&slots_cv);
    pthread_mutex_unlock(&slots_mu);
}

int eng_data_max_loads(void) {
    int v = atomic_load_explicit(&max_loads_set, memory_order_relaxed);
    if (v) return v;
    size_t fit = memory_budget() / 4 / eng_data_max_bytes();
    return fit < 1 ? 1 : fit > MAX_LOADS ? MAX_LOADS : (int)fit;
}

int eng_data_load_acquire(double timeout_s) {
    pthread_once(&slots_once, slots_init);
    if (timeout_s > 1e9) timeout_s = -1; /* no deadline worth a timespec */
    int max = eng_data_max_loads(), rc = 0;
    struct timespec until = hpo_deadline(CLOCK_MONOTONIC, timeout_s >= 0 ? timeout_s : 0);
    pthread_mutex_lock(&slots_mu);
    while (slots_used >= max && rc != ETIMEDOUT) {
        rc = timeout_s < 0 ? pthread_cond_wait(&slots_cv, &slots_mu)
                           : pthread_cond_timedwait(&slots_cv, &slots_mu, &until);
        max = eng_data_max_loads();
    }
    int got = slots_used < max;
    if (got) slots_used++;
    pthread_mutex_unlock(&slots_mu);
    return got ? 0 : HPO_ETIMEOUT;
}

void eng_data_load_release(void) {
    pthread_once(&slots_once, slots_init);
    pthread_mutex_lock(&slots_mu);
    if (slots_used > 0) slots_used--;
    pthread_cond_signal(&slots_cv);
    pthread_mutex_unlock(&slots_mu);
}

int eng_data_check_bytes(const char *what, const char *desc, size_t bytes, hpo_error *err) {
    size_t cap = eng_data_max_bytes();
    if (bytes <= cap) return 0;
    return hpo_fail(err, HPO_ETOOLARGE, "dataset",
                    "%s: %s: %zu bytes, over the dataset size limit of %zu bytes (--max-dataset-bytes)",
                    what ? what : "dataset", desc, bytes, cap);
}

int eng_dataset_bytes(size_t n, size_t sample_size, eng_data_xtype x_type, eng_data_ytype y_type,
                      size_t y_dim, size_t *out) {
    size_t es = x_type == ENG_DATA_U8 ? 1 : 4, xb, yb, total;
    if (y_type == ENG_DATA_Y_CLASS) y_dim = 1;
    if (__builtin_mul_overflow(sample_size, n, &xb) || __builtin_mul_overflow(xb, es, &xb) ||
        __builtin_mul_overflow(n, y_dim, &yb) || __builtin_mul_overflow(yb, (size_t)4, &yb) ||
        __builtin_add_overflow(xb, yb, &total))
        return HPO_ETOOLARGE;
    *out = total;
    return 0;
}
