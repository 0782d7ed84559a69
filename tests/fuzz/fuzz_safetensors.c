/*
 * fuzz_safetensors.c - libFuzzer harness for the safetensors reader
 * (eng_st_read_buffer; eng_st_read_file only adds the file read). Input:
 * the file image.
 *
 * Checks beyond "no crash, no leak, no UB": a parse either fails with
 * HPO_EFORMAT and a message, or gives tensors whose data lies inside the
 * copy of the data section (every byte is read), whose nbytes is
 * product(shape) * dtype size, in data_offsets order without gaps, found
 * by name; metadata found by key; and writing them back
 * (eng_st_write_buffer) gives a file that reads back to the same tensors
 * and metadata. Build and run as fuzz_idx.c says, with fuzz_safetensors,
 * safetensors.dict and corpus/safetensors (no size cap involved).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_file(const eng_st_file *f) {
    const char *prev_end = NULL;
    for (size_t i = 0; i < eng_st_count(f); i++) {
        const eng_st_tensor *t = eng_st_get(f, i);
        if (!t || !t->name || !t->name[0] || t->rank < 0 || t->rank > ENG_ST_MAX_RANK) abort();
        size_t nb = eng_st_dtype_size(t->dtype);
        for (int k = 0; k < t->rank; k++) nb *= (size_t)t->shape[k];
        if (nb != t->nbytes) abort();
        if (prev_end && (const char *)t->data != prev_end) abort(); /* no gaps */
        prev_end = (const char *)t->data + t->nbytes;
        volatile unsigned sum = 0;
        for (size_t b = 0; b < t->nbytes; b++) sum += ((const unsigned char *)t->data)[b];
        (void)sum;
        if (eng_st_find(f, t->name) != t) abort();
    }
    if (eng_st_get(f, eng_st_count(f)) != NULL) abort();
    for (size_t i = 0; i < eng_st_meta_count(f); i++) {
        const char *k, *v;
        if (eng_st_meta_at(f, i, &k, &v) != 0 || !k || !v) abort();
        if (eng_st_meta(f, k) == NULL) abort();
    }
}

/* f written back and read again: the same tensors and metadata. */
static void round_trip(const eng_st_file *f) {
    eng_st_writer *w = eng_st_writer_new();
    hpo_error err = {{0}, {0}};
    for (size_t i = 0; i < eng_st_count(f); i++) {
        const eng_st_tensor *t = eng_st_get(f, i);
        if (eng_st_writer_add(w, t->name, t->dtype, t->rank, t->shape, t->data, &err) != 0) abort();
    }
    for (size_t i = 0; i < eng_st_meta_count(f); i++) {
        const char *k, *v;
        eng_st_meta_at(f, i, &k, &v);
        if (eng_st_writer_meta(w, k, v) != 0) abort();
    }
    void *buf = NULL;
    size_t len = 0;
    if (eng_st_write_buffer(w, &buf, &len, &err) != 0) abort();
    eng_st_file *g = NULL;
    if (eng_st_read_buffer(buf, len, &g, &err) != 0) abort();
    if (eng_st_count(g) != eng_st_count(f) || eng_st_meta_count(g) != eng_st_meta_count(f)) abort();
    for (size_t i = 0; i < eng_st_count(f); i++) {
        const eng_st_tensor *a = eng_st_get(f, i), *b = eng_st_find(g, a->name);
        if (!b || b->dtype != a->dtype || b->rank != a->rank || b->nbytes != a->nbytes) abort();
        if (memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) != 0) abort();
        if (a->nbytes && memcmp(a->data, b->data, a->nbytes) != 0) abort();
    }
    for (size_t i = 0; i < eng_st_meta_count(f); i++) {
        const char *k, *v, *v2;
        eng_st_meta_at(f, i, &k, &v);
        if (!(v2 = eng_st_meta(g, k)) || strcmp(v, v2) != 0) abort();
    }
    eng_st_file_free(g);
    free(buf);
    eng_st_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    eng_st_file *f = NULL;
    hpo_error err = {{0}, {0}};
    int rc = eng_st_read_buffer(data, size, &f, &err);
    if (rc != 0) {
        if (rc != HPO_EFORMAT || f || !err.message[0]) abort();
        return 0;
    }
    check_file(f);
    round_trip(f);
    eng_st_file_free(f);
    return 0;
}
