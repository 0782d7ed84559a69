/*
 * fuzz_csv.c - libFuzzer harness for the CSV loader (eng_load_csv). Input:
 * a flags byte (bit 0: classification, else regression; bit 1: the label
 * column is "label", else the bytes up to the first newline of the rest,
 * at most 64, which are then also part of the file), then the file.
 *
 * Checks beyond "no crash, no leak, no UB": a load gives a dataset with the
 * documented invariants (rank 1, classes in [0, n_classes) or one target a
 * row, within the size cap) all of whose bytes are read, or fails with a
 * documented code and a message naming the file; nothing allocates past
 * the cap (run with -malloc_limit_mb=64; the cap is 4 MiB). Build and run
 * as fuzz_idx.c says, with fuzz_csv, csv.dict and corpus/csv.
 */
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_files_init();
    if (size < 1) return 0;
    int flags = data[0];
    data++, size--;
    char label[65] = "label";
    if (!(flags & 2)) {
        size_t k = 0;
        while (k < size && k < 64 && data[k] != '\n' && data[k] != ',') k++;
        memcpy(label, data, k);
        label[k] = '\0';
    }
    const char *path = fuzz_write("data.csv", data, size, 0);
    eng_dataset *ds = NULL;
    hpo_error err = {{0}, {0}};
    int classify = flags & 1;
    int rc = eng_load_csv(path, label, classify, &ds, &err);
    if (rc == 0) {
        fuzz_check_dataset(ds);
        if (ds->rank != 1 || ds->x_type != ENG_DATA_F32) abort();
        if ((ds->y_type == ENG_DATA_Y_CLASS) != (classify != 0)) abort();
        eng_dataset_release(ds);
    } else {
        if (ds) abort();
        fuzz_check_error(rc, &err);
    }
    return 0;
}
