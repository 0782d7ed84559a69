/* data.c - datasets: allocation and refcount, builtin datasets, the
 * process-wide cache, and train/validation splits (see data.h). The file
 * formats live in idx.c, csv.c and npy.c; batching in batch.c; the size
 * cap and the load slots in data_limits.c. */
#include "data.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rng.h"

/* ---------------------------------------------------------------- dataset */

int eng_dataset_new(const char *name, size_t n, int rank, const int64_t *shape,
                    eng_data_xtype x_type, eng_data_ytype y_type, size_t y_dim,
                    eng_dataset **out) {
    if (rank < 1 || rank > ENG_DATA_MAX_RANK || n > UINT32_MAX) return HPO_EINVAL;
    size_t ss = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] <= 0) return HPO_EINVAL;
        if (__builtin_mul_overflow(ss, (size_t)shape[i], &ss)) return HPO_ETOOLARGE;
    }
    if (y_type == ENG_DATA_Y_CLASS) y_dim = 1;
    if (y_dim == 0) return HPO_EINVAL;
    size_t es = x_type == ENG_DATA_U8 ? 1 : 4, xb = ss * n * es, yb = n * y_dim * 4, total;
    /* the products cannot overflow once their sum fits (checked first) */
    if (eng_dataset_bytes(n, ss, x_type, y_type, y_dim, &total) < 0 || total > eng_data_max_bytes())
        return HPO_ETOOLARGE;
    eng_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return HPO_ENOMEM;
    snprintf(ds->name, sizeof ds->name, "%s", name ? name : "");
    ds->n = n;
    ds->rank = rank;
    for (int i = 0; i < rank; i++) ds->shape[i] = shape[i];
    ds->sample_size = ss;
    ds->x_type = x_type;
    ds->x_scale = 1.0f;
    ds->y_type = y_type;
    ds->y_dim = y_dim;
    ds->refcount_ = 1;
    ds->x = malloc(xb ? xb : 1);
    if (y_type == ENG_DATA_Y_CLASS) ds->y_class = malloc(yb ? yb : 1);
    else ds->y_target = malloc(yb ? yb : 1);
    if (!ds->x || (!ds->y_class && !ds->y_target)) {
        free(ds->x);
        free(ds->y_class);
        free(ds->y_target);
        free(ds);
        return HPO_ENOMEM;
    }
    *out = ds;
    return 0;
}

eng_dataset *eng_dataset_ref(eng_dataset *ds) {
    if (ds) __atomic_fetch_add(&ds->refcount_, 1, __ATOMIC_RELAXED);
    return ds;
}

void eng_dataset_unref(eng_dataset *ds) {
    if (!ds) return;
    if (__atomic_sub_fetch(&ds->refcount_, 1, __ATOMIC_ACQ_REL) != 0) return;
    free(ds->x);
    free(ds->y_class);
    free(ds->y_target);
    free(ds);
}

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
        eng_dataset_unref(ds);
        return hpo_fail(err, HPO_EFORMAT, "dataset", "%s is not 28x28 images of 10 classes", xi);
    }
    ds->n_classes = 10;
    snprintf(ds->name, sizeof ds->name, "fashion-mnist:%s", part);
    *out = ds;
    return 0;
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

static void canon(char *out, size_t cap, const char *p) {
    char buf[PATH_MAX];
    if (!p) p = "";
    if (*p && realpath(p, buf)) p = buf;
    snprintf(out, cap, "%s", p);
}

static char *make_key(const eng_data_source *s) {
    char a[PATH_MAX], b[PATH_MAX];
    size_t cap = 2 * PATH_MAX + 512;
    char *k = hpo_xmalloc(cap);
    switch (s->kind) {
    case ENG_SRC_BUILTIN:
        snprintf(k, cap, "builtin:%s:%s",
                 s->name && strcmp(s->name, "fashion_mnist") == 0 ? "fashion-mnist"
                                                                  : (s->name ? s->name : ""),
                 s->part ? s->part : "train");
        break;
    case ENG_SRC_IDX:
        canon(a, sizeof a, s->x_path), canon(b, sizeof b, s->y_path);
        snprintf(k, cap, "idx:%s|%s", a, b);
        break;
    case ENG_SRC_CSV:
        canon(a, sizeof a, s->x_path);
        snprintf(k, cap, "csv:%s|%s|%d", a, s->label_column ? s->label_column : "",
                 s->classify != 0);
        break;
    case ENG_SRC_NPY:
        canon(a, sizeof a, s->x_path), canon(b, sizeof b, s->y_path);
        snprintf(k, cap, "npy:%s|%s|%d", a, b, s->scale_u8 != 0);
        break;
    default:
        snprintf(k, cap, "?");
    }
    return k;
}

static int load_source(const eng_data_source *s, eng_dataset **out, hpo_error *err) {
    switch (s->kind) {
    case ENG_SRC_BUILTIN: return eng_load_builtin(s->name, s->part, out, err);
    case ENG_SRC_IDX: return eng_load_idx(s->x_path, s->y_path, out, err);
    case ENG_SRC_CSV: return eng_load_csv(s->x_path, s->label_column, s->classify, out, err);
    case ENG_SRC_NPY: return eng_load_npy(s->x_path, s->y_path, s->scale_u8, out, err);
    }
    return hpo_fail(err, HPO_EINVAL, "dataset", "unknown dataset source kind %d", (int)s->kind);
}

static centry *find_entry(const char *key) {
    for (centry *e = cache_head; e; e = e->next)
        if (strcmp(e->key, key) == 0) return e;
    return NULL;
}

int eng_dataset_cache_get_source(const eng_data_source *src, eng_dataset **out, hpo_error *err) {
    if (!src) return hpo_fail(err, HPO_EINVAL, "dataset", "no dataset source");
    char *key = make_key(src);
    pthread_mutex_lock(&cache_mu);
    for (;;) {
        centry *e = find_entry(key);
        if (!e) break;
        if (e->ds) { /* loaded */
            *out = eng_dataset_ref(e->ds);
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
    int rc = load_source(src, &ds, err);
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
        *out = eng_dataset_ref(ds);
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

void eng_dataset_cache_clear(void) {
    pthread_mutex_lock(&cache_mu);
    centry **pp = &cache_head;
    while (*pp) {
        centry *e = *pp;
        if (!e->ds) { /* still loading: leave it to its loader */
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        eng_dataset_unref(e->ds);
        free(e->key);
        free(e);
    }
    pthread_mutex_unlock(&cache_mu);
}

size_t eng_dataset_cache_size(void) {
    size_t n = 0;
    pthread_mutex_lock(&cache_mu);
    for (centry *e = cache_head; e; e = e->next) n += e->ds != NULL;
    pthread_mutex_unlock(&cache_mu);
    return n;
}

/* ---------------------------------------------------------------- splits */

static int split_from(eng_dataset *ds, const uint32_t *idx, size_t n, eng_split *out) {
    uint32_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) return HPO_ENOMEM;
    if (n) memcpy(copy, idx, n * sizeof *copy);
    out->ds = eng_dataset_ref(ds);
    out->idx = copy;
    out->n = n;
    return 0;
}

int eng_split_all(eng_dataset *ds, eng_split *out) {
    if (!ds || !out) return HPO_EINVAL;
    uint32_t *idx = malloc((ds->n ? ds->n : 1) * sizeof *idx);
    if (!idx) return HPO_ENOMEM;
    for (size_t i = 0; i < ds->n; i++) idx[i] = (uint32_t)i;
    out->ds = eng_dataset_ref(ds);
    out->idx = idx;
    out->n = ds->n;
    return 0;
}

int eng_split_make(eng_dataset *ds, const eng_split_spec *spec, eng_split *train,
                   eng_split *val, hpo_error *err) {
    int rc = 0;
    uint32_t *perm = NULL;
    eng_split tr = {0}, va = {0};
    if (!ds || !spec || !train) return hpo_fail(err, HPO_EINVAL, "dataset", "no dataset");
    size_t n = ds->n, nv = spec->val_count;
    if (nv == 0 && spec->val_fraction != 0) {
        if (!(spec->val_fraction > 0 && spec->val_fraction < 1))
            return hpo_fail(err, HPO_EINVAL, "dataset.validation_split",
                            "validation fraction %g is not in [0, 1)", spec->val_fraction);
        nv = n - (size_t)((double)n * (1.0 - spec->val_fraction)); /* Keras' split_at */
    }
    if (nv >= n)
        return hpo_fail(err, HPO_EINVAL, "dataset.validation_split",
                        "validation takes %zu of %zu rows of %s: nothing left to train on", nv,
                        n, ds->name);
    perm = malloc((n ? n : 1) * sizeof *perm);
    if (!perm) return hpo_fail(err, HPO_ENOMEM, "", "out of memory");
    for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    if (spec->mode == ENG_SPLIT_SHUFFLE) {
        hpo_rng r;
        hpo_rng_seed(&r, spec->seed);
        hpo_rng_shuffle_u32(&r, perm, (uint32_t)n);
    } else if (spec->mode != ENG_SPLIT_TAIL) {
        rc = hpo_fail(err, HPO_EINVAL, "dataset.split", "unknown split mode %d", (int)spec->mode);
        goto fail;
    }
    size_t ntr = n - nv;
    if (spec->limit && spec->limit < ntr) ntr = spec->limit;
    size_t nva = nv;
    if (spec->val_limit && spec->val_limit < nva) nva = spec->val_limit;
    if ((rc = split_from(ds, perm, ntr, &tr)) < 0) goto fail;
    if (val && (rc = split_from(ds, perm + (n - nv), nva, &va)) < 0) goto fail;
    free(perm);
    *train = tr;
    if (val) *val = va;
    return 0;
fail:
    free(perm);
    eng_split_close(&tr);
    eng_split_close(&va);
    return rc == HPO_ENOMEM ? hpo_fail(err, rc, "", "out of memory") : rc;
}

int eng_split_concat(const eng_split *a, const eng_split *b, eng_split *out) {
    if (!a || !b || !out || a->ds != b->ds) return HPO_EINVAL;
    size_t n = a->n + b->n;
    uint32_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx) return HPO_ENOMEM;
    if (a->n) memcpy(idx, a->idx, a->n * sizeof *idx);
    if (b->n) memcpy(idx + a->n, b->idx, b->n * sizeof *idx);
    out->ds = eng_dataset_ref(a->ds);
    out->idx = idx;
    out->n = n;
    return 0;
}

void eng_split_close(eng_split *s) {
    if (!s) return;
    eng_dataset_unref(s->ds);
    free(s->idx);
    s->ds = NULL;
    s->idx = NULL;
    s->n = 0;
}
