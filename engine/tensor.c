/* tensor.c - tensor allocation, views and bf16/fp16 conversion (see tensor.h). */
#include "tensor.h"

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

void *eng_alloc(size_t nbytes) {
    void *p = NULL;
    size_t n = (nbytes + 63) & ~(size_t)63;
    if (n == 0) n = 64;
    if (posix_memalign(&p, 64, n) != 0 || !p) {
        HPO_ERROR("engine: out of memory allocating %zu bytes", nbytes);
        abort();
    }
    return p;
}

int eng_tensor_new(eng_tensor **out, eng_dtype dtype, int ndim, const int *shape) {
    if (ndim < 0 || ndim > ENG_MAX_DIMS || (dtype != ENG_F32 && dtype != ENG_BF16)) return HPO_EINVAL;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) return HPO_EINVAL;
    eng_tensor *t = hpo_xcalloc(1, sizeof *t);
    *t = eng_tensor_view(dtype, NULL, ndim, shape);
    size_t nb = eng_tensor_nbytes(t);
    t->data = eng_alloc(nb);
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

