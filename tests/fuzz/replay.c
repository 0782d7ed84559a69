/*
 * replay.c - runs a fuzz harness without libFuzzer: every file under the
 * directories (or the files) named on the command line goes once through
 * the harness's LLVMFuzzerTestOneInput, in name order. ctest replays each
 * harness's seed corpus and regression inputs this way on every build (a
 * plain gcc build, and the ASan+UBSan build in CI), so a bug a fuzzer once
 * found stays fixed. Exits 0 after the last input (a crash aborts first),
 * 1 when no input was found (a mistyped corpus path must not pass).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static long replayed;

static void run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        exit(2);
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) abort();
    /* a copy of exactly len bytes, so ASan sees reads past the input */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) abort();
    memcpy(copy, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);
    replayed++;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        run_file(path);
        return;
    }
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, by_name);
    for (int i = 0; i < n; i++) {
        const char *d = names[i]->d_name;
        if (d[0] != '.') { /* skips ., .. and hidden files (.gitkeep) */
            char child[4096];
            snprintf(child, sizeof child, "%s/%s", path, d);
            run_path(child);
        }
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) run_path(argv[i]);
    printf("replayed %ld inputs\n", replayed);
    return replayed > 0 ? 0 : 1;
}
