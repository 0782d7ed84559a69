/* dataset.c - the eng_dataset object's life cycle: allocation (with the
 * size cap of data_limits.c) and the atomic reference count (see data.h).
 * The loaders (idx.c, csv.c, npy.c) build their datasets here; it calls
 * nothing but data_limits.c, so the calls between the data files go one
 * way: data.c -> loaders -> dataset.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "data.h"

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
    atomic_init(&ds->refcount_, 1);
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

eng_dataset *eng_dataset_retain(eng_dataset *ds) {
    if (ds) atomic_fetch_add_explicit(&ds->refcount_, 1, memory_order_relaxed);
    return ds;
}

void eng_dataset_release(eng_dataset *ds) {
    if (!ds) return;
    if (atomic_fetch_sub_explicit(&ds->refcount_, 1, memory_order_acq_rel) != 1) return;
    if (ds->class_names)
        for (int i = 0; i < ds->n_classes; i++) free(ds->class_names[i]);
    free(ds->class_names);
    free(ds->x);
    free(ds->y_class);
    free(ds->y_target);
    free(ds);
}
