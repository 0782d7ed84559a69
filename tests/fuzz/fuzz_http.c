/*
 * fuzz_http.c - libFuzzer harness for hpod's request path as a client
 * reaches it: raw bytes on a TCP connection to a real srv_http
 * (libmicrohttpd's parsing, server/http.c's limits, bearer token and
 * multipart streaming), the router, every handler (JSON study definitions,
 * ask/tell/report, queries) and the dataset uploads with their loaders.
 *
 * Why this level. Driving srv_http through its public header (http.h) over
 * loopback reaches everything a client reaches with one input format (the
 * bytes of one or more pipelined requests), including multipart parsing,
 * which exists only inside libmicrohttpd's post processor and which a
 * harness calling api_handle directly would have to imitate; it costs a
 * connection and a thread per input (a few thousand inputs a second),
 * which is still far more code per input than api_handle alone.
 *
 * Input: a flags byte (bit 0: send to the server that requires
 * "Authorization: Bearer fuzz-token" on mutating calls), then the bytes
 * sent on one connection, after which the harness half-closes it and reads
 * the answers until the server closes (an event stream is dropped once its
 * headers arrive). Every answer must be an HTTP/1.x status line; a 500,
 * or any other 5xx from hpod (JSON) than 501 (valid, not available in this
 * build) and 503 (busy), is a finding (libmicrohttpd's own 505 for an
 * unknown HTTP version is not). The servers run with the real
 * defaults except: uploads up to 64 KiB, bodies up to 64 KiB, datasets up
 * to 1 MiB, a one-second wait for a load slot, a 100-image stand-in for
 * Fashion-MNIST (HPO_FASHION_MNIST_DIR), no scheduler (studies are stored
 * and asked, never trained). Every 2048 inputs the servers, their
 * databases and data folders are made afresh, so state stays small.
 *
 *   cmake -S . -B build-fuzz -DHPO_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
 *   cmake --build build-fuzz --target fuzz_http
 *   build-fuzz/tests/fuzz/fuzz_http -dict=tests/fuzz/http.dict <scratch copy of corpus/http>
 */
#include <arpa/inet.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "http.h"

#define RESET_EVERY 2048
#define TOKEN "fuzz-token"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct server {
    char dir[128];
    sto_db *db;
    api_ctx *api;
    srv_http *http;
    int port;
} server;

static server servers[2];
static char root[64];
static long inputs;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void gz_file(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    if (!g || gzwrite(g, data, (unsigned)n) != (int)n) abort();
    gzclose(g);
}

/* A small stand-in for Fashion-MNIST: 100 28x28 images of 10 classes. */
static void make_builtin(const char *dir) {
    enum { N = 100 };
    static uint8_t img[16 + N * 784], lab[8 + N];
    const uint8_t hi[16] = {0, 0, 8, 3, 0, 0, 0, N, 0, 0, 0, 28, 0, 0, 0, 28};
    const uint8_t hl[8] = {0, 0, 8, 1, 0, 0, 0, N};
    memcpy(img, hi, 16);
    memcpy(lab, hl, 8);
    for (int i = 0; i < N * 784; i++) img[16 + i] = (uint8_t)(i * 31 + i / 784);
    for (int i = 0; i < N; i++) lab[8 + i] = (uint8_t)(i % 10);
    char p[192];
    for (int part = 0; part < 2; part++) {
        const char *pre = part ? "t10k" : "train";
        snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte.gz", dir, pre);
        gz_file(p, img, sizeof img);
        snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte.gz", dir, pre);
        gz_file(p, lab, sizeof lab);
    }
}

static void server_start(server *s, const char *token) {
    snprintf(s->dir, sizeof s->dir, "%s/data-XXXXXX", root);
    if (!mkdtemp(s->dir)) abort();
    char db[160];
    snprintf(db, sizeof db, "%s/hpo.db", s->dir);
    if (sto_open(db, STO_SYNC_NORMAL, &s->db)) abort();
    api_options ao = {.data_dir = s->dir, .max_upload_bytes = 64 << 10, .upload_wait_seconds = 1};
    if (api_ctx_new(s->db, &ao, &s->api)) abort();
    srv_http_options ho = {.bind = "127.0.0.1", .port = 0, .token = token, .max_body = 64 << 10,
                           .max_connections = 64, .timeout_s = 5};
    hpo_error err = {{0}, {0}};
    if (srv_http_start(s->api, &ho, &s->http, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.message);
        abort();
    }
    s->port = srv_http_port(s->http);
}

static void server_stop(server *s) {
    api_ctx_shutdown(s->api); /* ends event streams */
    srv_http_stop(s->http);
    api_ctx_free(s->api);
    sto_close(s->db);
    nftw(s->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    memset(s, 0, sizeof *s);
}

static void stop_all(void) {
    for (int i = 0; i < 2; i++)
        if (servers[i].http) server_stop(&servers[i]);
    eng_dataset_cache_clear();
    if (root[0]) nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void start_all(void) {
    server_start(&servers[0], NULL);
    server_start(&servers[1], TOKEN);
}

static void init_once(void) {
    if (root[0]) return;
    hpo_log_level = HPO_LOG_ERROR + 1; /* quiet: the fuzzer's output is the report */
    snprintf(root, sizeof root, "%s/hpo-fuzz-http-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(root)) abort();
    char fm[96];
    snprintf(fm, sizeof fm, "%.60s/fashion-mnist", root);
    if (mkdir(fm, 0755)) abort();
    make_builtin(fm);
    setenv("HPO_FASHION_MNIST_DIR", fm, 1);
    eng_data_set_max_bytes((size_t)1 << 20);
    start_all();
    atexit(stop_all);
}

static int is_status_line(const char *p, const char *end) {
    return end - p >= 12 && memcmp(p, "HTTP/1.", 7) == 0 && p[8] == ' ';
}

/* The value of header `name` (case-insensitive) in [head, hend), or -1. */
static long header_num(const char *head, const char *hend, const char *name) {
    size_t n = strlen(name);
    for (const char *l = head; l && l < hend;) {
        if ((size_t)(hend - l) > n && strncasecmp(l, name, n) == 0) return strtol(l + n, NULL, 10);
        l = memmem(l, (size_t)(hend - l), "\r\n", 2);
        if (l) l += 2;
    }
    return -1;
}

/* Walks the answers of one connection, one after the other (a body is
 * skipped by its Content-Length; the answer to a HEAD has none; a body of
 * unknown length ends the walk) and checks each status. */
static void check_answers(const char *buf, size_t len) {
    static int trace = -1; /* FUZZ_HTTP_TRACE=1: print each answer (corpus work) */
    if (trace < 0) trace = getenv("FUZZ_HTTP_TRACE") != NULL;
    const char *p = buf, *end = buf + len;
    if (len && !is_status_line(p, end)) abort(); /* whatever came back must be HTTP */
    while (is_status_line(p, end)) {
        int status = atoi(p + 9);
        const char *hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (trace) fprintf(stderr, "  %d %.160s\n", status, hend ? hend + 4 : "");
        if (status < 100 || status > 599) abort();
        /* hpod's own answers are JSON; libmicrohttpd answers protocol
         * errors itself (505 for an unknown HTTP version, ...), and a
         * 500 from it means a callback of ours failed */
        int json = hend && memmem(p, (size_t)(hend - p), "application/json", 16);
        if (status == 500 || (json && status >= 500 && status != 501 && status != 503)) {
            fprintf(stderr, "fuzz_http: status %d:\n%.*s\n", status, (int)(end - p), p);
            abort();
        }
        if (!hend) break;
        long cl = header_num(p, hend, "Content-Length:");
        const char *next = hend + 4;
        if (cl < 0) break;
        if (cl <= end - next && is_status_line(next + cl, end)) next += cl;
        else if (!is_status_line(next, end)) break; /* the last answer */
        p = next;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init_once();
    if (size < 1) return 0;
    if (++inputs % RESET_EVERY == 0) {
        for (int i = 0; i < 2; i++) server_stop(&servers[i]);
        eng_dataset_cache_clear();
        start_all();
    }
    const server *s = &servers[data[0] & 1];
    data++, size--;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) abort();
    for (size_t off = 0; off < size;) {
        ssize_t k = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (k <= 0) break; /* the server may close early (a 413, a bad request) */
        off += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    static char buf[1 << 20];
    size_t len = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
        buf[len] = '\0';
        if (len == sizeof buf - 1) break;
        if (strstr(buf, "text/event-stream") && strstr(buf, "\r\n\r\n")) break; /* never ends */
    }
    close(fd);
    check_answers(buf, len);
    return 0;
}
