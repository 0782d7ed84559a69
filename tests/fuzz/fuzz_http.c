/*
 * fuzz_http.c - libFuzzer harness for hpod's request path as a client
 * reaches it: the bytes of one connection, parsed by libmicrohttpd (HTTP
 * requests, pipelining, chunked bodies, and multipart/form-data in its
 * post processor), then routed by the api (api_handle: the router, every
 * handler, the JSON study definitions, ask/tell/report, queries) or
 * streamed to the dataset uploads (api_upload_*: form fields, files, the
 * loaders that validate them).
 *
 * Why this level. A real srv_http over loopback (server/http.h) costs a
 * TCP connection and a thread per input: ~300 inputs a second under ASan
 * on two cores, too few for 10^6. So the harness runs its own
 * libmicrohttpd daemon without threads or a listening socket, hands it one
 * end of a socketpair per input (MHD_add_connection) and drives it with
 * MHD_run from the fuzzing thread; its request callback calls what
 * server/http.c calls for a request (server/request.h: the body gathered
 * into api_handle; an upload through libmicrohttpd's post processor into
 * api_upload_*), without http.c's gate, head checks and tokens, which are
 * tested by the API tests. Everything from the callback on is the
 * production code; libmicrohttpd is the production parser. Deterministic
 * and single-threaded: thousands of inputs a second.
 *
 * Input: a flags byte, then the bytes sent on the connection. flags + 1
 * (1..256) is the size of the pieces the bytes are sent in, one MHD_run
 * between pieces, so requests and multipart bodies arrive split at every
 * boundary. The harness then half-closes the connection and reads the
 * answers until libmicrohttpd closes it. An event stream (which would
 * wait for events) is answered empty.
 *
 * Checks beyond "no crash, no leak, no UB": every answer is an HTTP/1.x
 * status line, walked answer by answer; a 500, or any other 5xx from the
 * api (JSON) than 501 (valid, not available in this build) and 503 (busy),
 * is a finding (libmicrohttpd's own 505 for an unknown HTTP version is
 * not); an upload's answer names no path on the server; the connection
 * ends within a bounded number of MHD_run rounds.
 * Set-up: uploads up to 64 KiB, bodies up to 64 KiB, datasets up to 1 MiB,
 * a one-second wait for a load slot, a 100-image stand-in for
 * Fashion-MNIST (HPO_FASHION_MNIST_DIR), no scheduler (studies are stored
 * and asked, never trained). Every 2048 inputs the database and the data
 * folder are made afresh, so state stays small.
 *
 *   cmake -S . -B build-fuzz -DHPO_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
 *   cmake --build build-fuzz --target fuzz_http
 *   build-fuzz/tests/fuzz/fuzz_http -dict=tests/fuzz/http.dict <scratch copy of corpus/http>
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "api.h"
#include "data.h"
#include "request.h"

#define RESET_EVERY 2048
#define MAX_BODY (64 << 10)
#define MAX_ROUNDS 2000 /* after the last piece */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64], data_dir[128];
static sto_db *db;
static api_ctx *api;
static struct MHD_Daemon *daemon_;
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

static const uint8_t *input; /* the current input, for the echo test below */
static size_t input_len;

/* An upload's answer never names a path on the server (its temporary
 * folder, the data folder), unless the client sent that text itself (the
 * fuzzer learns such strings from comparisons) and it is echoed. Only
 * uploads are checked: other answers may echo names stored by earlier
 * inputs. */
static void check_upload_answer(const api_response *resp) {
    if (resp->body && memmem(resp->body, resp->body_len, root, strlen(root)) &&
        !memmem(input, input_len, root, strlen(root))) {
        fprintf(stderr, "fuzz_http: a server path in an upload's answer: %.*s\n",
                (int)resp->body_len, resp->body);
        abort();
    }
}

static enum MHD_Result send_response(struct MHD_Connection *c, api_response *resp) {
    if (resp->stream) { /* an event stream would block this thread: answered empty */
        resp->stream_free(resp->stream_arg);
        resp->stream = NULL;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(resp->body_len, resp->body,
                                                             MHD_RESPMEM_MUST_FREE);
    resp->body = NULL;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type ? resp->content_type : "application/json");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    api_metrics_observe_request(api, resp->route, resp->status, 0.001);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    srv_request *rs = *con_cls;
    if (!rs) { /* the head: as http.c does once its own checks pass */
        rs = calloc(1, sizeof *rs);
        if (!rs) abort();
        *con_cls = rs;
        api_response resp = {0};
        if (api_is_upload(method, url) && srv_request_upload_begin(rs, api, c, &resp))
            return send_response(c, &resp);
        return MHD_YES;
    }
    if (rs->upload) {
        if (*upload_data_size) {
            srv_request_upload_piece(rs, upload_data, *upload_data_size);
            *upload_data_size = 0;
            return MHD_YES;
        }
        api_response resp = {0};
        srv_request_upload_finish(rs, api, &resp);
        check_upload_answer(&resp);
        return send_response(c, &resp);
    }
    if (*upload_data_size) {
        srv_request_append(rs, upload_data, *upload_data_size, MAX_BODY);
        *upload_data_size = 0;
        return MHD_YES;
    }
    api_response resp = {0};
    if (rs->too_large) {
        api_error_response(&resp, 413, "too_large", "the request body is over the size limit", "");
        return send_response(c, &resp);
    }
    api_request req;
    srv_request_api(rs, c, method, url, &req);
    api_handle(api, &req, &resp);
    return send_response(c, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    srv_request *rs = *con_cls;
    if (!rs) return;
    srv_request_clear(rs);
    free(rs);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {} /* quiet */

static void state_start(void) {
    snprintf(data_dir, sizeof data_dir, "%.60s/data-XXXXXX", root);
    if (!mkdtemp(data_dir)) abort();
    char path[160];
    snprintf(path, sizeof path, "%s/hpo.db", data_dir);
    if (sto_open(path, STO_SYNC_NORMAL, &db)) abort();
    api_options ao = {.data_dir = data_dir, .max_upload_bytes = 64 << 10, .upload_wait_seconds = 1};
    if (api_ctx_new(db, &ao, &api)) abort();
}

static void state_stop(void) {
    api_ctx_shutdown(api);
    api_ctx_free(api);
    sto_close(db);
    nftw(data_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    eng_dataset_cache_clear();
}

static void stop_all(void) {
    MHD_stop_daemon(daemon_);
    state_stop();
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
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
    daemon_ = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request,
                               NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                               MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!daemon_) abort();
    state_start();
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
        state_stop();
        state_start();
    }
    size_t piece = (size_t)data[0] + 1;
    data++, size--;
    input = data, input_len = size;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) abort();
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(40000)};
    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (MHD_add_connection(daemon_, sv[1], (struct sockaddr *)&peer, sizeof peer) != MHD_YES) abort();
    static char buf[1 << 20];
    size_t sent = 0, len = 0;
    int eof = 0, rounds = 0;
    /* every round sends a piece; once all is sent, the answers must end */
    int max_rounds = (int)(size / piece) + MAX_ROUNDS;
    while (!eof) {
        if (++rounds > max_rounds) {
            fprintf(stderr, "fuzz_http: the connection did not end in %d rounds\n", max_rounds);
            abort();
        }
        if (sent < size) {
            size_t n = size - sent < piece ? size - sent : piece;
            ssize_t k = send(sv[0], data + sent, n, MSG_NOSIGNAL);
            if (k > 0) sent += (size_t)k;
            else if (k < 0 && errno != EAGAIN) sent = size; /* closed by the server */
            if (sent == size) shutdown(sv[0], SHUT_WR);
        } else if (size == 0 && rounds == 1) {
            shutdown(sv[0], SHUT_WR);
        }
        MHD_run(daemon_);
        for (;;) {
            ssize_t k = recv(sv[0], buf + len, sizeof buf - 1 - len, 0);
            if (k > 0) {
                len += (size_t)k;
                if (len == sizeof buf - 1) eof = 1;
                continue;
            }
            if (k == 0 || errno != EAGAIN) eof = 1;
            break;
        }
    }
    close(sv[0]);
    MHD_run(daemon_); /* lets libmicrohttpd finish the connection */
    buf[len] = '\0';
    check_answers(buf, len);
    return 0;
}
