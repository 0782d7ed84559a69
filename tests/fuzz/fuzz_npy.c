/*
 * fuzz_npy.c - libFuzzer harness for the NPY reader and loader
 * (eng_npy_read, eng_load_npy). Input: a flags byte (bit 0: scale_u8, bit
 * 1: eng_npy_read the x file as raw u8 instead of f32), a little-endian u16
 * length L, then L bytes of the x file and the rest as the y file.
 *
 * Checks beyond "no crash, no leak, no UB": eng_npy_read gives an array of
 * the product of its shape (read through) or fails with a message; the
 * dataset loader gives a dataset with the documented invariants within the
 * size cap or fails with a documented code; nothing allocates past the cap
 * (run with -malloc_limit_mb=64; the cap is 4 MiB). Build and run as
 * fuzz_idx.c says, with fuzz_npy, npy.dict and corpus/npy.
 */
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_files_init();
    if (size < 3) return 0;
    int flags = data[0];
    size_t lx = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3, size -= 3;
    if (lx > size) lx = size;
    const char *px = fuzz_write("x.npy", data, lx, 0);
    const char *py = fuzz_write("y.npy", data + lx, size - lx, 0);

    void *arr = NULL;
    int rank = 0;
    int64_t shape[8];
    hpo_error err = {{0}, {0}};
    int want_u8 = (flags & 2) != 0;
    int rc = eng_npy_read(px, want_u8, &arr, &rank, shape, &err);
    if (rc == 0) {
        if (rank < 0 || rank > 8) abort();
        size_t count = 1;
        for (int i = 0; i < rank; i++) {
            if (shape[i] < 0) abort();
            count *= (size_t)shape[i];
        }
        if (count * (want_u8 ? 1 : 4) > eng_data_max_bytes()) abort();
        volatile double sum = 0;
        for (size_t i = 0; i < count; i++)
            sum += want_u8 ? ((const uint8_t *)arr)[i] : ((const float *)arr)[i];
        (void)sum;
        free(arr);
    } else {
        if (rc != HPO_EFORMAT && rc != HPO_ETOOLARGE && rc != HPO_ENOMEM) abort();
        if (!err.message[0]) abort();
    }

    eng_dataset *ds = NULL;
    memset(&err, 0, sizeof err);
    rc = eng_load_npy(px, py, flags & 1, &ds, &err);
    if (rc == 0) {
        fuzz_check_dataset(ds);
        eng_dataset_release(ds);
    } else {
        if (ds) abort();
        fuzz_check_error(rc, &err);
    }
    return 0;
}
