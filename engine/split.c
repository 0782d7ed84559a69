/* split.c - train/validation splits: views of a dataset's rows, each an
 * index list plus one reference on the dataset (see data.h for the split
 * policy). */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "rng.h"

static int split_from(eng_dataset *ds, const uint32_t *idx, size_t n, eng_split *out) {
    uint32_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) return HPO_ENOMEM;
    if (n) memcpy(copy, idx, n * sizeof *copy);
    out->ds = eng_dataset_retain(ds);
    out->idx = copy;
    out->n = n;
    return 0;
}

int eng_split_all(eng_dataset *ds, eng_split *out) {
    if (!ds || !out) return HPO_EINVAL;
    uint32_t *idx = malloc((ds->n ? ds->n : 1) * sizeof *idx);
    if (!idx) return HPO_ENOMEM;
    for (size_t i = 0; i < ds->n; i++) idx[i] = (uint32_t)i;
    out->ds = eng_dataset_retain(ds);
    out->idx = idx;
    out->n = ds->n;
    return 0;
}

size_t eng_split_val_rows(size_t n, double fraction) {
    return n - (size_t)((double)n * (1.0 - fraction));
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
        nv = eng_split_val_rows(n, spec->val_fraction);
    }
    if (nv >= n)
        return hpo_fail(err, HPO_EINVAL, "dataset.validation_split",
                        "validation takes %zu of the dataset's %zu rows: nothing left to train on", nv, n);
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
    eng_split_clear(&tr);
    eng_split_clear(&va);
    return rc == HPO_ENOMEM ? hpo_fail(err, rc, "", "out of memory") : rc;
}

int eng_split_concat(const eng_split *a, const eng_split *b, eng_split *out) {
    if (!a || !b || !out || a->ds != b->ds) return HPO_EINVAL;
    size_t n = a->n + b->n;
    uint32_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx) return HPO_ENOMEM;
    if (a->n) memcpy(idx, a->idx, a->n * sizeof *idx);
    if (b->n) memcpy(idx + a->n, b->idx, b->n * sizeof *idx);
    out->ds = eng_dataset_retain(a->ds);
    out->idx = idx;
    out->n = n;
    return 0;
}

void eng_split_clear(eng_split *s) {
    if (!s) return;
    eng_dataset_release(s->ds);
    free(s->idx);
    s->ds = NULL;
    s->idx = NULL;
    s->n = 0;
}
