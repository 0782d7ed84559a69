/*
 * fuzz_files.h - what the dataset-loader harnesses share: the loaders read
 * files, so each input is written to files in a private folder (on tmpfs
 * when there is one) and loaded from there; the size cap is made small so
 * that any allocation by a declared size past it is a finding
 * (run with -malloc_limit_mb=64); and a loaded dataset is checked and read
 * through, so ASan sees every byte the loader claims to have filled.
 * Header-only: each harness is one program.
 */
#ifndef HPO_FUZZ_FILES_H
#define HPO_FUZZ_FILES_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"

#define FUZZ_MAX_DATASET_BYTES ((size_t)4 << 20)

static char fuzz_dir[64];

static int fuzz_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void fuzz_files_cleanup(void) {
    if (fuzz_dir[0]) nftw(fuzz_dir, fuzz_rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* Once per process: the folder (removed at exit) and the cap. */
static void fuzz_files_init(void) {
    if (fuzz_dir[0]) return;
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/hpo-fuzz-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(fuzz_dir)) abort();
    atexit(fuzz_files_cleanup);
    eng_data_set_max_bytes(FUZZ_MAX_DATASET_BYTES);
}

/* <fuzz_dir>/<name> */
static const char *fuzz_path(const char *name) {
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", fuzz_dir, name);
    return buf[k];
}

/* Writes data to <fuzz_dir>/<name>, gzip-compressed when gz; returns the path. */
static const char *fuzz_write(const char *name, const uint8_t *data, size_t size, int gz) {
    const char *path = fuzz_path(name);
    if (gz) {
        gzFile g = gzopen(path, "wb1");
        if (!g) abort();
        if (size && gzwrite(g, data, (unsigned)size) != (int)size) abort();
        gzclose(g);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) abort();
        if (size && fwrite(data, 1, size, f) != size) abort();
        fclose(f);
    }
    return path;
}

/* The documented invariants of a loaded dataset; reads all of x and y. */
static void fuzz_check_dataset(const eng_dataset *ds) {
    if (!ds || ds->n < 1 || ds->rank < 1 || ds->rank > ENG_DATA_MAX_RANK) abort();
    size_t ss = 1;
    for (int i = 0; i < ds->rank; i++) {
        if (ds->shape[i] < 1) abort();
        ss *= (size_t)ds->shape[i];
    }
    if (ss != ds->sample_size) abort();
    size_t bytes = 0;
    if (eng_dataset_bytes(ds->n, ss, ds->x_type, ds->y_type, ds->y_dim, &bytes) < 0 ||
        bytes > eng_data_max_bytes())
        abort();
    volatile double sum = 0;
    size_t nx = ds->n * ss;
    if (ds->x_type == ENG_DATA_U8)
        for (size_t i = 0; i < nx; i++) sum += ((const uint8_t *)ds->x)[i];
    else
        for (size_t i = 0; i < nx; i++) sum += ((const float *)ds->x)[i];
    if (ds->y_type == ENG_DATA_Y_CLASS) {
        if (!ds->y_class || ds->n_classes < 1) abort();
        for (size_t i = 0; i < ds->n; i++)
            if (ds->y_class[i] < 0 || ds->y_class[i] >= ds->n_classes) abort();
    } else {
        if (!ds->y_target || ds->y_dim < 1) abort();
        for (size_t i = 0; i < ds->n * ds->y_dim; i++) sum += ds->y_target[i];
    }
    (void)sum;
}

/* A failed load: one of the documented codes, with a message. */
static void fuzz_check_error(int rc, const hpo_error *err) {
    if (rc != HPO_EFORMAT && rc != HPO_ETOOLARGE && rc != HPO_EINVAL && rc != HPO_ENOMEM)
        abort();
    if (!err->message[0] || !err->field[0]) abort();
}

#endif
