/*
 * bench_cli.h - what the benchmark programs share around their command
 * line: where the repository they belong to is (its engine/models
 * templates and other files of the source tree), and comma lists.
 *
 * Design notes
 * - The root is the nearest folder above the executable that holds
 *   engine/models/mlp.json (build/tests/bench/bench_x, or a bundle's
 *   .gpu-bundle/bin/bench_x copied beside a checkout: tests/gpu/bundle.sh),
 *   else the working directory when it holds it; a benchmark run from
 *   anywhere else says so and stops.
 * - bench_list_has("mlp,cnn", "cnn"): whole items only ("cnn" is not in
 *   "cnn2").
 * - Header only (static inline), like bench_peers.h.
 */
#ifndef HPO_BENCH_CLI_H
#define HPO_BENCH_CLI_H

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* 0 with the root's path in root[n], or -1. */
static inline int bench_find_root(char *root, size_t n) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return -1;
    exe[len] = 0;
    for (int up = 0; up < 6; up++) {
        char *s = strrchr(exe, '/');
        if (!s) break;
        *s = 0;
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/engine/models/mlp.json", exe);
        if (access(probe, R_OK) == 0) {
            snprintf(root, n, "%s", exe);
            return 0;
        }
    }
    if (access("engine/models/mlp.json", R_OK) == 0 && getcwd(root, n)) return 0;
    return -1;
}

/* 1 if the comma list holds item as a whole entry. */
static inline int bench_list_has(const char *list, const char *item) {
    size_t n = strlen(item);
    for (const char *p = list; (p = strstr(p, item)); p++)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

#endif
