/* tensor.c - tensor allocation, views and bf16/fp16 conversion (see tensor.h). */
#include "tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpo.h"

size_t eng_dtype_size(eng_dtype t) { return t == ENG_BF16 ? 2 : 4; }

size_t eng_tensor_numel(const eng_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

size_t eng_tensor_nbytes(const eng_tensor *t) { return eng_tensor_numel(t) * eng_dtype_size(t->dtype); }

static _Thread_local size_t alloc_count, alloc_limit = SIZE_MAX;

size_t eng_alloc_counted(void) { return alloc_count; }
void eng_alloc_count_reset(void) { alloc_count = 0; }
void eng_alloc_fail_after(size_t limit) { alloc_limit = limit; }

size_t eng_alloc_size(size_t nbytes) {
    if (nbytes > SIZE_MAX - 63) return SIZE_MAX;
    size_t n = (nbytes + 63) & ~(size_t)63;
    return n ? n : 64;
}

void eng_format_bytes(size_t n, char *buf, size_t len) {
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(buf, len, "%zu B", n);
        return;
    }
    double v = (double)n / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

void *eng_alloc(size_t nbytes) {
    void *p = NULL;
    size_t n = eng_alloc_size(nbytes);
    if (n == SIZE_MAX) return NULL;
    if (n > alloc_limit || alloc_count > alloc_limit - n) return NULL;
    if (posix_memalign(&p, 64, n) != 0 || !p) {
        HPO_WARN("engine: out of memory allocating %zu bytes", nbytes);
        return NULL;
    }
    alloc_count += n;
    return p;
}

int eng_tensor_new(eng_tensor **out, eng_dtype dtype, int ndim, const int *shape) {
    if (ndim < 0 || ndim > ENG_MAX_DIMS || (dtype != ENG_F32 && dtype != ENG_BF16)) return HPO_EINVAL;
    size_t n = eng_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) return HPO_EINVAL;
        n = eng_size_mul(n, (size_t)shape[i]);
    }
    if (n == SIZE_MAX) return HPO_ETOOLARGE;
    eng_tensor *t = hpo_xcalloc(1, sizeof *t);
    *t = eng_tensor_view(dtype, NULL, ndim, shape);
    size_t nb = eng_tensor_nbytes(t);
    t->data = eng_alloc(nb);
    if (!t->data) {
        free(t);
        return HPO_ENOMEM;
    }
    memset(t->data, 0, nb);
    t->owns = 1;
    *out = t;
    return HPO_OK;
}

void eng_tensor_free(eng_tensor *t) {
    if (!t) return;
    if (t->owns) free(t->data);
    free(t);
}

eng_tensor eng_tensor_view(eng_dtype dtype, void *data, int ndim, const int *shape) {
    eng_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.ndim = ndim < 0 ? 0 : ndim > ENG_MAX_DIMS ? ENG_MAX_DIMS : ndim;
    for (int i = 0; i < t.ndim; i++) t.shape[i] = shape[i];
    t.data = data;
    return t;
}

