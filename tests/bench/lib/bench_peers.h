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

#include <stdio.h>
#include <stdlib.h>

#ifndef HPO_PEERS_DIR
#error "HPO_PEERS_DIR must name tests/bench/peers (set by tests/bench/CMakeLists.txt)"
#endif

static inline const char *bench_peers_dir(void) {
    const char *p = getenv("HPO_PEERS");
    return p && *p ? p : HPO_PEERS_DIR;
}

/* The start of a peer's command line into buf: the interpreter,
 * $HPO_PYTHON or else Debian's /usr/bin/python3 (which holds PyTorch 1.13
 * and Optuna 3.1 here), quoted, after "env LD_LIBRARY_PATH='...'" when
 * $HPO_PEER_LD_LIBRARY_PATH is set ("env -u LD_LIBRARY_PATH" when it is
 * empty): on a device machine the peer keeps its own library path, not the
 * bundle's, whose libraries could shadow PyTorch's. Returns the length
 * written (snprintf's). */
static inline int bench_peer_python(char *buf, size_t n) {
    const char *py = getenv("HPO_PYTHON"), *ldp = getenv("HPO_PEER_LD_LIBRARY_PATH");
    if (!py || !*py) py = "/usr/bin/python3";
    if (!ldp) return snprintf(buf, n, "'%s'", py);
    if (!*ldp) return snprintf(buf, n, "env -u LD_LIBRARY_PATH '%s'", py);
    return snprintf(buf, n, "env LD_LIBRARY_PATH='%s' '%s'", ldp, py);
}

#endif
