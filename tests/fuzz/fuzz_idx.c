/*
 * fuzz_idx.c - libFuzzer harness for the IDX loader (eng_load_idx), plain
 * and gzipped. Input: a flags byte (bit 0: gzip the images file here, bit
 * 1: gzip the labels file), a little-endian u16 length L, then L bytes of
 * the images file and the rest as the labels file. Files not gzipped here
 * are written as given, so zlib's own decoding of client bytes (a gzip
 * header in the input, a bomb) is fuzzed too.
 *
 * Checks beyond "no crash, no leak, no UB": a load either gives a dataset
 * with the documented invariants (n >= 1, shape product = sample_size,
 * labels in [0, n_classes), within the size cap), all of whose bytes are
 * read, or fails with a documented code and a message; nothing allocates
 * past the cap (run with -malloc_limit_mb=64; the cap is 4 MiB).
 *
 *   cmake -S . -B build-fuzz -DHPO_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
 *   cmake --build build-fuzz --target fuzz_idx
 *   build-fuzz/tests/fuzz/fuzz_idx -malloc_limit_mb=64 -dict=tests/fuzz/idx.dict \
 *       tests/fuzz/corpus/idx   (a scratch copy of the corpus: libFuzzer adds to it)
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
    const char *px = fuzz_write("x.idx", data, lx, flags & 1);
    const char *py = fuzz_write("y.idx", data + lx, size - lx, flags & 2);
    eng_dataset *ds = NULL;
    hpo_error err = {{0}, {0}};
    int rc = eng_load_idx(px, py, &ds, &err);
    if (rc == 0) {
        fuzz_check_dataset(ds);
        if (ds->y_type != ENG_DATA_Y_CLASS) abort();
        eng_dataset_release(ds);
    } else {
        if (ds) abort(); /* never written on failure */
        fuzz_check_error(rc, &err);
    }
    return 0;
}
