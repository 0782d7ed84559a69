/*
 * bench_hpod.h - what the benchmarks that drive a real hpod share: starting
 * and stopping an hpod on a free port in a fresh data directory, and JSON
 * over HTTP with libcurl (keep-alive per handle).
 *
 * Design notes
 * - bench_hpod_start forks and execs hpod with --port 0 and reads the port
 *   from its first stdout line; stop sends SIGTERM, waits, and removes the
 *   data directory.
 * - bench_http_* return the HTTP status (or -1 on a transport error) and
 *   parse the body as JSON into *out when out is not NULL (NULL on a body
 *   that is not JSON). One bench_http per thread.
 */
#ifndef HPO_BENCH_HPOD_H
#define HPO_BENCH_HPOD_H

#include <jansson.h>
#include <sys/types.h>

typedef struct bench_hpod {
    pid_t pid;
    int port;
    char base[64];     /* http://127.0.0.1:PORT */
    char data_dir[64];
} bench_hpod;

/* extra: NULL-terminated extra arguments (e.g. "--devices", "cpu:2", NULL). */
int bench_hpod_start(const char *hpod, const char *const *extra, bench_hpod *out);
void bench_hpod_stop(bench_hpod *h);

typedef struct bench_http bench_http;
bench_http *bench_http_new(const char *base);
void bench_http_free(bench_http *c);
long bench_http_post(bench_http *c, const char *path, const char *body, json_t **out);
long bench_http_get(bench_http *c, const char *path, json_t **out);
/* The raw body of the last response (valid until the next call). */
const char *bench_http_body(const bench_http *c);

/* The hpod binary: $HPO_HPOD, else build/hpod. */
const char *bench_hpod_path(void);

#endif
