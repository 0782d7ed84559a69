/* data.c - where datasets come from: the builtin datasets, the loader
 * table (which loader reads which eng_source_kind, and what makes two
 * sources the same data) and the process-wide cache (see data.h). The file
 * formats live in idx.c, csv.c and npy.c, the dataset object in dataset.c,
 * splits in split.c, batching in batch.c, the size cap and the load slots
 * in data_limits.c. Calls go one way: this file -> loaders -> dataset.c. */
#include "data.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- builtin */

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* dir/base.gz, else dir/base; into out. */
static void pick(char *out, size_t cap, const char *dir, const char *base) {
    snprintf(out, cap, "%s/%s.gz", dir, base);
    if (!file_exists(out)) snprintf(out, cap, "%s/%s", dir, base);
}

int eng_builtin_exists(const char *name) {
    return name && (strcmp(name, "fashion-mnist") == 0 || strcmp(name, "fashion_mnist") == 0);
}

int eng_load_builtin(const char *name, const char *part, eng_dataset **out, hpo_error *err) {
    if (!eng_builtin_exists(name))
        return hpo_fail(err, HPO_ENOTFOUND, "dataset.name", "unknown builtin dataset '%s'",
                        name ? name : "(null)");
    if (!part) part = "train";
    const char *prefix;
    if (strcmp(part, "train") == 0) prefix = "train";
    else if (strcmp(part, "test") == 0) prefix = "t10k";
    else
        return hpo_fail(err, HPO_EINVAL, "dataset.part", "part '%s' is not train or test", part);
    const char *dir = getenv("HPO_FASHION_MNIST_DIR");
    if (!dir || !*dir) dir = "/usr/share/datasets/fashion-mnist";
    char xi[PATH_MAX], yl[PATH_MAX], base[64];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
    pick(xi, sizeof xi, dir, base);
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
    pick(yl, sizeof yl, dir, base);
    eng_dataset *ds;
    int rc = eng_load_idx(xi, yl, &ds, err);
    if (rc < 0) return rc;
    if (ds->rank != 3 || ds->shape[0] != 28 || ds->shape[1] != 28 || ds->n_classes > 10) {
        eng_dataset_release(ds);
        return hpo_fail(err, HPO_EFORMAT, "dataset", "%s is not 28x28 images of 10 classes", xi);
    }
    ds->n_classes = 10;
    snprintf(ds->name, sizeof ds->name, "fashion-mnist:%s", part);
    *out = ds;
    return 0;
}

/* ---------------------------------------------------------------- loader table */

/* realpath of p when it resolves, else p as given: one key per file. */
static void canon(char *out, size_t cap, const char *p) {
    char buf[PATH_MAX];
    if (!p) p = "";
    if (*p && realpath(p, buf)) p = buf;
    snprintf(out, cap, "%s", p);
}

/* The loader table: one row per eng_source_kind, giving the name that
 * starts its cache key, the rest of the key (what makes two sources the same
 * data: canonical paths and the options that change what is loaded), and
 * the loader. */
typedef struct source_loader {
    const char *name;
    void (*key)(const eng_data_source *s, char *out, size_t cap);
    int (*load)(const eng_data_source *s, eng_dataset **out, hpo_error *err);
} source_loader;

static void key_builtin(const eng_data_source *s, char *k, size_t cap) {
    const char *name = s->name ? s->name : "";
    if (strcmp(name, "fashion_mnist") == 0) name = "fashion-mnist";
    snprintf(k, cap, "%s:%s", name, s->part ? s->part : "train");
}

static void key_idx(const eng_data_source *s, char *k, size_t cap) {
    char a[PATH_MAX], b[PATH_MAX];
    canon(a, sizeof a, s->x_path), canon(b, sizeof b, s->y_path);
    snprintf(k, cap, "%s|%s", a, b);
}

static void key_csv(const eng_data_source *s, char *k, size_t cap) {
    char a[PATH_MAX];
    canon(a, sizeof a, s->x_path);
    snprintf(k, cap, "%s|%s|%d", a, s->label_column ? s->label_column : "", s->classify != 0);
}

static void key_npy(const eng_data_source *s, char *k, size_t cap) {
    char a[PATH_MAX], b[PATH_MAX];
    canon(a, sizeof a, s->x_path), canon(b, sizeof b, s->y_path);
    snprintf(k, cap, "%s|%s|%d", a, b, s->scale_u8 != 0);
}

static int load_builtin(const eng_data_source *s, eng_dataset **out, hpo_error *err) {
    return eng_load_builtin(s->name, s->part, out, err);
}

static int load_idx(const eng_data_source *s, eng_dataset **out, hpo_error *err) {
    return eng_load_idx(s->x_path, s->y_path, out, err);
}

static int load_csv(const eng_data_source *s, eng_dataset **out, hpo_error *err) {
    return eng_load_csv(s->x_path, s->label_column, s->classify, out, err);
}

static int load_npy(const eng_data_source *s, eng_dataset **out, hpo_error *err) {
    return eng_load_npy(s->x_path, s->y_path, s->scale_u8, out, err);
}

static const source_loader loaders[] = {
    [ENG_SRC_BUILTIN] = {"builtin", key_builtin, load_builtin},
    [ENG_SRC_IDX] = {"idx", key_idx, load_idx},
    [ENG_SRC_CSV] = {"csv", key_csv, load_csv},
    [ENG_SRC_NPY] = {"npy", key_npy, load_npy},
};

/* The row for s->kind, or NULL for a kind the table does not have. */
static const source_loader *loader_of(const eng_data_source *s) {
    unsigned k = (unsigned)s->kind;
    return k < sizeof loaders / sizeof *loaders && loaders[k].load ? &loaders[k] : NULL;
}

/* "name:" then the row's key: "idx:/abs/x|/abs/y". Malloc'd. */
static char *make_key(const source_loader *l, const eng_data_source *s) {
    size_t cap = 2 * PATH_MAX + 512;
    char *k = hpo_xmalloc(cap);
    int n = snprintf(k, cap, "%s:", l->name);
    l->key(s, k + n, cap - (size_t)n);
    return k;
}

/* ---------------------------------------------------------------- cache */

typedef struct centry {
    char *key;
    eng_dataset *ds; /* NULL while loading */
    struct centry *next;
} centry;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cache_cv = PTHREAD_COND_INITIALIZER;
static centry *cache_head;

static centry *find_entry(const char *key) {
    for (centry *e = cache_head; e; e = e->next)
        if (strcmp(e->key, key) == 0) return e;
    return NULL;
}

int eng_dataset_cache_get_source(const eng_data_source *src, eng_dataset **out, hpo_error *err) {
    if (!src) return hpo_fail(err, HPO_EINVAL, "dataset", "no dataset source");
    const source_loader *l = loader_of(src);
    if (!l)
        return hpo_fail(err, HPO_EINVAL, "dataset", "unknown dataset source kind %d",
                        (int)src->kind);
    char *key = make_key(l, src);
    pthread_mutex_lock(&cache_mu);
    for (;;) {
        centry *e = find_entry(key);
        if (!e) break;
        if (e->ds) { /* loaded */
            *out = eng_dataset_retain(e->ds);
            pthread_mutex_unlock(&cache_mu);
            free(key);
            return 0;
        }
        pthread_cond_wait(&cache_cv, &cache_mu); /* someone is loading it */
    }
    /* not present: insert a loading placeholder and load without the lock */
    centry *e = hpo_xcalloc(1, sizeof *e);
    e->key = key;
    e->next = cache_head;
    cache_head = e;
    pthread_mutex_unlock(&cache_mu);

    eng_dataset *ds = NULL;
    double t0 = hpo_monotonic();
    eng_data_load_acquire(-1); /* bounded concurrency: see data.h */
    int rc = l->load(src, &ds, err);
    eng_data_load_release();

    pthread_mutex_lock(&cache_mu);
    if (rc < 0) { /* remove the placeholder; waiters retry and see the error */
        for (centry **pp = &cache_head; *pp; pp = &(*pp)->next)
            if (*pp == e) {
                *pp = e->next;
                break;
            }
        free(e->key);
        free(e);
    } else {
        e->ds = ds; /* the cache's reference */
        *out = eng_dataset_retain(ds);
        HPO_INFO("data: loaded %s (%zu samples) in %.3f s", e->key, ds->n,
                 hpo_monotonic() - t0);
    }
    pthread_cond_broadcast(&cache_cv);
    pthread_mutex_unlock(&cache_mu);
    return rc;
}

int eng_dataset_cache_get(const char *name, const char *part, eng_dataset **out, hpo_error *err) {
    eng_data_source s = {.kind = ENG_SRC_BUILTIN, .name = name, .part = part};
    if (!eng_builtin_exists(name))
        return hpo_fail(err, HPO_ENOTFOUND, "dataset.name", "unknown builtin dataset '%s'",
                        name ? name : "(null)");
    return eng_dataset_cache_get_source(&s, out, err);
}

/* Drops the cache's reference to every loaded entry whose key holds
 * `within` (NULL: every one); returns how many. Entries still loading are
 * left to their loaders. */
static size_t drop_entries(const char *within) {
    size_t n = 0;
    pthread_mutex_lock(&cache_mu);
    centry **pp = &cache_head;
    while (*pp) {
        centry *e = *pp;
        if (!e->ds || (within && !strstr(e->key, within))) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        eng_dataset_release(e->ds);
        free(e->key);
        free(e);
        n++;
    }
    pthread_mutex_unlock(&cache_mu);
    return n;
}

void eng_dataset_cache_clear(void) { drop_entries(NULL); }

size_t eng_dataset_cache_drop_under(const char *dir) {
    char real[PATH_MAX], prefix[PATH_MAX + 2];
    if (!dir || !*dir) return 0;
    canon(real, sizeof real, dir);
    snprintf(prefix, sizeof prefix, ":%s/", real); /* "kind:" then the first file's real path */
    return drop_entries(prefix);
}

size_t eng_dataset_cache_size(void) {
    size_t n = 0;
    pthread_mutex_lock(&cache_mu);
    for (centry *e = cache_head; e; e = e->next) n += e->ds != NULL;
    pthread_mutex_unlock(&cache_mu);
    return n;
}
