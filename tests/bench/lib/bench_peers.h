/*
 * bench_peers.h - where the benchmarks find their peer scripts (the PyTorch
 * and Optuna programs in tests/bench/peers/ they run beside hpo).
 *
 * Design notes
 * - The folder is $HPO_PEERS when set and not empty, else HPO_PEERS_DIR:
 *   tests/bench/CMakeLists.txt defines it as the absolute path of
 *   tests/bench/peers in the source tree, so a benchmark finds its peers
 *   from any working directory and never outside the repository.
 * - Header only (static inline): the tuner benchmarks link only the tuners,
 *   not hpo_benchlib and its libcurl.
 */
#ifndef HPO_BENCH_PEERS_H
#define HPO_BENCH_PEERS_H

#include <stdlib.h>

#ifndef HPO_PEERS_DIR
#error "HPO_PEERS_DIR must name tests/bench/peers (set by tests/bench/CMakeLists.txt)"
#endif

static inline const char *bench_peers_dir(void) {
    const char *p = getenv("HPO_PEERS");
    return p && *p ? p : HPO_PEERS_DIR;
}

#endif
