/* http.c - libmicrohttpd glue (see http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conns.h"
#include "gate.h"
#include "head.h"
#include "request.h"

/* libmicrohttpd's memory per connection: the head the gate lets through
 * (16 KiB, 100 headers, 100 query arguments) fits (test_protocol sends
 * one at the limits). Not more: above 32 KiB libmicrohttpd mmaps the pool,
 * and the munmap at every close (a TLB shootdown across CPUs) cost ~0.8 ms
 * of CPU per connection. */
#define MHD_MEMORY_LIMIT ((size_t)32 * 1024)
/* descriptors beside the connections: database, files, pipes */
#define SPARE_FDS 256
/* A JSON body over --max-body is read and dropped for a clean 413 up to
 * this many times the cap; past it (announced, or chunked) the 413 comes at
 * once and the connection closes. */
#define DROP_FACTOR 64ull
/* An upload's multipart boundaries and part headers, beside its files. */
#define UPLOAD_FRAMING_BYTES ((uint64_t)1 << 20)

struct srv_http {
    struct MHD_Daemon *daemon;
    srv_conns *conns;
    srv_gate *gate;
    api_ctx *api;
    char *token;
    size_t max_body;
    int port;
    char bind[INET_ADDRSTRLEN];
    int bind_any; /* 0.0.0.0: any IPv4 literal names this server */
    int bind_loopback; /* 127.0.0.0/8: only this machine's clients, and pages in its browsers, reach it */
    char **allowed; /* extra Host names, lower case */
    size_t n_allowed;
    unsigned max_streams;
    atomic_uint streams;
    srv_head_limits limits;
};

/* Per-request state across the calls libmicrohttpd makes for one request;
 * created by on_uri when the request line is read. */
typedef struct request_state {
    double started;
    int headers_seen;   /* on_request had its first call */
    const char *nul_in; /* "path" or "query": the raw target holds %00 */
    srv_request req;    /* its body or upload (request.h) */
} request_state;

/* An event stream's response and the server whose stream count it holds. */
typedef struct stream_ctx {
    api_response resp;
    srv_http *h;
} stream_ctx;

/* Why a request is refused before the api sees it. */
typedef struct refusal {
    int status;
    const char *code, *field;
    char message[256];
} refusal;

static int refuse(refusal *r, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int refuse(refusal *r, int status, const char *code, const char *field, const char *fmt, ...) {
    r->status = status;
    r->code = code;
    r->field = field;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    return -1;
}

static srv_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static const char *header(struct MHD_Connection *c, const char *name) {
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

static int tokens_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

static int is_mutation(const char *method) { return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0; }

static int authorized(const srv_http *h, struct MHD_Connection *c) {
    const char *auth = header(c, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!auth || strncasecmp(auth, "Bearer ", 7) != 0) return 0; /* the scheme is case-insensitive */
    auth += 7;
    while (*auth == ' ') auth++;
    return tokens_equal(auth, h->token);
}

/* Splits "host[:port]" ("[v6]:port" for IPv6) into name (lower case,
 * brackets kept, one trailing dot dropped) and port (-1 when absent);
 * 0, or -1 when malformed. */
static int split_host(const char *s, size_t n, char *name, size_t cap, long *port) {
    size_t end;
    if (n && s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb) return -1;
        end = (size_t)(rb - s) + 1;
    } else {
        const char *colon = memchr(s, ':', n);
        end = colon ? (size_t)(colon - s) : n;
    }
    if (end == 0 || end >= cap) return -1;
    for (size_t i = 0; i < end; i++) name[i] = (char)tolower((unsigned char)s[i]);
    name[end] = '\0';
    if (end > 1 && name[end - 1] == '.') name[end - 1] = '\0';
    *port = -1;
    if (end == n) return 0;
    if (s[end] != ':' || end + 1 == n || n - end - 1 > 5) return -1;
    long p = 0;
    for (size_t i = end + 1; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        p = p * 10 + (s[i] - '0');
    }
    if (p > 65535) return -1;
    *port = p;
    return 0;
}

/* Whether a Host name names this server: localhost, a loopback or bind
 * address (any IPv4 literal when bound to 0.0.0.0), or an allowed host.
 * The port is not checked: a rebinding page is told apart by its name, and
 * a published container port may differ from the one hpod listens on. */
static int names_us(const srv_http *h, const char *name) {
    for (size_t i = 0; i < h->n_allowed; i++)
        if (strcmp(name, h->allowed[i]) == 0) return 1;
    if (strcmp(name, "localhost") == 0 || strcmp(name, "127.0.0.1") == 0 || strcmp(name, "[::1]") == 0 ||
        strcmp(name, h->bind) == 0)
        return 1;
    struct in_addr a;
    return h->bind_any && inet_pton(AF_INET, name, &a) == 1;
}

/* Splits a header value (spaces around it dropped); 0 or -1. */
static int split_value(const char *v, char *name, size_t cap, long *port) {
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    return split_host(v, n, name, cap, port);
}

static int host_ok(const srv_http *h, const char *host) {
    char name[256];
    long port;
    return split_value(host, name, sizeof name, &port) == 0 && names_us(h, name);
}

/* An Origin ("http://name[:port]") is the site the request is addressed
 * to (the same name and port as its Host: a page hpod served), or an
 * allowed host. Without a Host (HTTP/1.0) it must name this server on its
 * own port. */
static int origin_ok(const srv_http *h, const char *origin, const char *host) {
    long def;
    if (strncasecmp(origin, "http://", 7) == 0) {
        def = 80;
        origin += 7;
    } else if (strncasecmp(origin, "https://", 8) == 0) {
        def = 443;
        origin += 8;
    } else {
        return 0; /* "null" (a sandboxed or file: page) and the rest */
    }
    size_t n = strcspn(origin, "/");
    char name[256], hname[256];
    long port, hport;
    if (split_host(origin, n, name, sizeof name, &port)) return 0;
    for (size_t i = 0; i < h->n_allowed; i++)
        if (strcmp(name, h->allowed[i]) == 0) return 1;
    if (port < 0) port = def;
    if (!host) return names_us(h, name) && port == h->port;
    if (split_value(host, hname, sizeof hname, &hport)) return 0;
    if (hport < 0) hport = def; /* a Host without a port is on the scheme's default one */
    return strcmp(name, hname) == 0 && port == hport;
}

/* A mutation's body is JSON, an upload's multipart, or there is none. */
static int content_type_ok(struct MHD_Connection *c, const char *method, const char *url) {
    const char *ct = header(c, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct) {
        const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
        return !header(c, MHD_HTTP_HEADER_TRANSFER_ENCODING) && (!cl || strtoull(cl, NULL, 10) == 0);
    }
    while (*ct == ' ' || *ct == '\t') ct++;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
    if (n == 16 && strncasecmp(ct, "application/json", 16) == 0) return 1;
    return api_is_upload(method, url) && n == 19 && strncasecmp(ct, "multipart/form-data", 19) == 0;
}

/* Headers that must come once: a proxy reading the last of two while hpod
 * reads the first would check another Host, Origin or token than hpod. */
static const char *const once_headers[] = {MHD_HTTP_HEADER_HOST, "Origin", MHD_HTTP_HEADER_CONTENT_TYPE,
                                           MHD_HTTP_HEADER_AUTHORIZATION};

typedef struct framing {
    int content_length, transfer_encoding, chunked;
    int once[HPO_ARRAY_LEN(once_headers)]; /* how often each came */
    int encoded;        /* a Content-Encoding other than identity */
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    framing *f = cls;
    for (size_t i = 0; i < HPO_ARRAY_LEN(once_headers); i++)
        if (strcasecmp(key, once_headers[i]) == 0) f->once[i]++;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_ENCODING) == 0 && value &&
        strcasecmp(value + strspn(value, " \t"), "identity") != 0)
        f->encoded = 1;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) f->content_length++;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->transfer_encoding++;
        while (value && (*value == ' ' || *value == '\t')) value++;
        f->chunked = value && strncasecmp(value, "chunked", 7) == 0 && strspn(value + 7, " \t") == strlen(value + 7);
    }
    return MHD_YES;
}

/* The checks every request passes before the api sees it (the gate has
 * checked the first head of a connection already; later ones on a
 * keep-alive connection only meet these). 0, or -1 with *r filled. */
static int check_request(const srv_http *h, struct MHD_Connection *c, const char *method, const char *url,
                         const char *version, const request_state *rs, refusal *r) {
    if (rs->nul_in)
        return refuse(r, 400, "invalid_argument", rs->nul_in, "the request %s holds an encoded NUL (%%00)",
                      rs->nul_in);
    const union MHD_ConnectionInfo *hs = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    framing f = {0};
    int fields = MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if ((hs && hs->header_size > h->limits.max_head) || fields > (int)h->limits.max_fields)
        return refuse(r, 431, "header_too_large", "headers", "the request head is over %zu bytes or %zu fields",
                      h->limits.max_head, h->limits.max_fields);
    if (strlen(url) > h->limits.max_line ||
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, NULL, NULL) > (int)h->limits.max_fields)
        return refuse(r, 414, "uri_too_long", "request_line", "the request target is too long");
    if (f.content_length > 1)
        return refuse(r, 400, "bad_request", "Content-Length", "Content-Length is given twice");
    for (size_t i = 0; i < HPO_ARRAY_LEN(once_headers); i++)
        if (f.once[i] > 1) return refuse(r, 400, "bad_request", once_headers[i], "%s is given twice", once_headers[i]);
    if (f.encoded)
        return refuse(r, 415, "unsupported_media_type", "Content-Encoding",
                      "hpod reads request bodies as sent: no Content-Encoding");
    if (f.transfer_encoding && (f.transfer_encoding > 1 || !f.chunked))
        return refuse(r, 501, "not_implemented", "Transfer-Encoding", "the only Transfer-Encoding accepted is chunked");
    if (f.transfer_encoding && f.content_length)
        return refuse(r, 400, "bad_request", "Content-Length",
                      "a request may not carry both Content-Length and Transfer-Encoding");
    const char *host = header(c, MHD_HTTP_HEADER_HOST);
    if (!host && strcmp(version, MHD_HTTP_VERSION_1_1) == 0)
        return refuse(r, 400, "bad_request", "Host", "an HTTP/1.1 request needs a Host header");
    /* DNS rebinding: a page that calls itself evil.com reaches a loopback
     * hpod through the browser; a token guards mutations, not reads */
    if ((!h->token || h->bind_loopback) && host && !host_ok(h, host))
        return refuse(r, 421, "misdirected_request", "Host",
                      "Host '%.80s' does not name this server (hpod --allowed-host NAME accepts more names)", host);
    if (!is_mutation(method)) return 0;
    if (h->token) {
        if (!authorized(h, c))
            return refuse(r, 401, "unauthorized", "Authorization",
                          "this call needs the header Authorization: Bearer <token>");
        return 0;
    }
    const char *origin = header(c, "Origin");
    if (origin && !origin_ok(h, origin, host))
        return refuse(r, 403, "forbidden", "Origin", "a page from %.80s may not call this server", origin);
    if (!content_type_ok(c, method, url))
        return refuse(r, 415, "unsupported_media_type", "Content-Type",
                      api_is_upload(method, url)
                          ? "a dataset upload is sent as multipart/form-data"
                          : "send the body as JSON with the header Content-Type: application/json");
    return 0;
}

/* The client closed its connection (end of stream; bytes it may have
 * pipelined do not count). arg: the socket. */
static int client_gone(void *arg) {
    char b;
    ssize_t n = recv((int)(intptr_t)arg, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *s = cls;
    long n = s->resp.stream(s->resp.stream_arg, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    s->resp.stream_free(s->resp.stream_arg);
    atomic_fetch_sub(&s->h->streams, 1);
    free(s);
}

/* The line of an answered request: 5xx at WARN; report and tell (many a
 * second from training code) at DEBUG when they succeed; the rest at INFO,
 * a 4xx with the error the client got. */
static void log_request(const char *method, const char *url, const char *route, int status, size_t in_bytes,
                        double secs, const api_error_info *why) {
    int level = status >= 500 ? HPO_LOG_WARN : HPO_LOG_INFO;
    if (status < 400 && route && (strcmp(route, "trials.report") == 0 || strcmp(route, "trials.tell") == 0))
        level = HPO_LOG_DEBUG;
    if (level < hpo_log_level) return;
    hpo_log_field f[8];
    size_t n = 0;
    f[n++] = HPO_LOG_STR("route", route ? route : "unmatched");
    f[n++] = HPO_LOG_NUM("status", status);
    f[n++] = HPO_LOG_NUM("bytes_in", (double)in_bytes);
    f[n++] = HPO_LOG_NUM("ms", floor(secs * 1e5) / 100); /* two decimals */
    if (why) {
        f[n++] = HPO_LOG_STR("code", why->code);
        f[n++] = HPO_LOG_STR("field", why->field);
        f[n++] = HPO_LOG_STR("error", why->message);
    }
    hpo_log_fields(level, f, n, "%s %s %d", method, url, status);
}

/* The body of HEAD on an event stream: none (libmicrohttpd sends no body
 * to HEAD); a response of unknown size gets GET's framing headers. */
static ssize_t no_body(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)cls, (void)pos, (void)buf, (void)max;
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static enum MHD_Result send_response(srv_http *h, struct MHD_Connection *c, const char *method,
                                     const char *url, api_response *resp, request_state *rs) {
    int head_of_stream = 0;
    if (resp->stream) {
        int head = strcmp(method, "HEAD") == 0;
        head_of_stream = head;
        unsigned open = 0;
        if (head || (open = atomic_fetch_add(&h->streams, 1)) >= h->max_streams) {
            resp->stream_free(resp->stream_arg);
            resp->stream = NULL;
            if (!head) {
                atomic_fetch_sub(&h->streams, 1);
                char msg[128];
                snprintf(msg, sizeof msg, "%u event streams are open, the most hpod serves; retry later", open);
                api_error_response(resp, 503, "unavailable", msg, "");
            } /* HEAD: the stream's headers, no body */
        }
    }
    /* a 4xx logs its reason: the error the client got */
    api_error_info why;
    int has_why = resp->status >= 400 && resp->status < 500 && api_response_error(resp, &why) == 0;
    struct MHD_Response *r;
    if (resp->stream) { /* server-sent events: the copy lives as long as the stream */
        stream_ctx *s = hpo_xmalloc(sizeof *s);
        s->resp = *resp;
        s->h = h;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
    } else if (head_of_stream) {
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64, no_body, NULL, NULL);
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        free(resp->body);
        resp->body = NULL;
    } else if (resp->has_file) { /* closed by libmicrohttpd with r */
        r = MHD_create_response_from_fd64(resp->file_len, resp->file_fd);
        if (!r) close(resp->file_fd);
        resp->has_file = 0;
        free(resp->body);
        resp->body = NULL;
    } else {
        r = MHD_create_response_from_buffer(resp->body_len, resp->body, MHD_RESPMEM_MUST_FREE);
        resp->body = NULL; /* owned by r now */
    }
    if (!r) { /* libmicrohttpd refused the body (out of memory, or a file's size past off_t) */
        static const char failed[] = "{\"error\":{\"code\":\"internal\",\"message\":\"the response could not be made\","
                                     "\"field\":\"\"}}";
        resp->status = 500;
        resp->content_type = NULL;
        resp->filename[0] = 0;
        r = MHD_create_response_from_buffer(sizeof failed - 1, (void *)failed, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type ? resp->content_type
                                                                                : "application/json");
    MHD_add_response_header(r, "Cache-Control", resp->cache_control ? resp->cache_control : "no-store");
    if (resp->filename[0]) {
        char disposition[96];
        snprintf(disposition, sizeof disposition, "attachment; filename=\"%s\"", resp->filename);
        MHD_add_response_header(r, "Content-Disposition", disposition);
    }
    if (resp->status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (resp->allow[0]) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
    if (resp->retry_after > 0 || resp->status == 503) { /* a 503 says when to come back */
        char ra[16];
        snprintf(ra, sizeof ra, "%d", resp->retry_after > 0 ? resp->retry_after : 5);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    double secs = hpo_monotonic() - rs->started;
    log_request(method, url, resp->route, resp->status, rs->req.len, secs, has_why ? &why : NULL);
    api_metrics_observe_request(h->api, resp->route, resp->status, secs);
    return ok;
}

static enum MHD_Result reply_error(srv_http *h, struct MHD_Connection *c, const char *method,
                                   const char *url, request_state *rs, int status, const char *code,
                                   const char *message, const char *field) {
    api_response resp = {0};
    api_error_response(&resp, status, code, message, field);
    resp.route = api_route_name(method, url);
    return send_response(h, c, method, url, &resp, rs);
}

/* The 413 of a body over --max-body, naming the limit. */
static enum MHD_Result reply_too_large(srv_http *h, struct MHD_Connection *c, const char *method, const char *url,
                                       request_state *rs) {
    char msg[160];
    snprintf(msg, sizeof msg, "the request body is over the size limit of %zu bytes (hpod --max-body)", h->max_body);
    return reply_error(h, c, method, url, rs, 413, "too_large", msg, "");
}

/* The 413 of an upload over --max-upload, before or while it is read. */
static enum MHD_Result reply_upload_too_large(srv_http *h, struct MHD_Connection *c, const char *method,
                                              const char *url, request_state *rs) {
    char msg[160];
    snprintf(msg, sizeof msg, "the upload is over the size limit of %llu bytes (hpod --max-upload)",
             (unsigned long long)api_upload_limit(h->api));
    return reply_error(h, c, method, url, rs, 413, "too_large", msg, "");
}

/* The request line is read: the per-request state starts here, with the
 * raw target (before libmicrohttpd decodes %XX and cuts it at a NUL). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    request_state *rs = hpo_xcalloc(1, sizeof *rs);
    rs->started = hpo_monotonic();
    const char *q = uri ? strchr(uri, '?') : NULL;
    for (const char *s = uri; s && *s; s++)
        if (s[0] == '%' && s[1] == '0' && s[2] == '0') {
            rs->nul_in = q && s > q ? "query" : "path";
            break;
        }
    return rs;
}

/* The path of a request target in absolute form ("http://host:8080/p",
 * which RFC 9112 says a server must accept, as proxies send it): its
 * authority is dropped (the Host header is the one checked), "/" when it
 * has no path; any other target as it is. */
static const char *origin_form(const char *url) {
    size_t skip = strncasecmp(url, "http://", 7) == 0 ? 7 : strncasecmp(url, "https://", 8) == 0 ? 8 : 0;
    if (!skip) return url;
    const char *path = strchr(url + skip, '/');
    return path ? path : "/";
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    srv_http *h = cls;
    url = origin_form(url);
    request_state *rs = *con_cls;
    if (!rs) *con_cls = rs = on_uri(h, NULL, c); /* not reached: on_uri runs first */
    if (!rs->headers_seen) { /* first call: headers only */
        rs->headers_seen = 1;
        srv_conn *k = conn_of(c);
        if (k && srv_conns_busy(h->conns, k, hpo_monotonic())) return MHD_NO; /* cut: its deadline passed */
        refusal why;
        if (check_request(h, c, method, url, version, rs, &why))
            return reply_error(h, c, method, url, rs, why.status, why.code, why.message, why.field);
        /* a body known to be over its limit: refused before it is read (with
         * "Expect: 100-continue", before the client sends it) */
        const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long announced = cl ? strtoull(cl, NULL, 10) : 0;
        int upload = api_is_upload(method, url);
        if (upload && announced > api_upload_limit(h->api) + UPLOAD_FRAMING_BYTES)
            return reply_upload_too_large(h, c, method, url, rs);
        if (upload) {
            api_response resp = {0};
            if (srv_request_upload_begin(&rs->req, h->api, c, &resp) == 0) return MHD_YES;
            resp.route = api_route_name(method, url);
            return send_response(h, c, method, url, &resp, rs);
        }
        /* A body over the limit is read and dropped, so the client gets a
         * clean 413 instead of a reset; one far over it, or one whose client
         * waits for leave to send it (Expect: 100-continue), is refused at
         * once. */
        const char *expect = header(c, MHD_HTTP_HEADER_EXPECT);
        if (announced > DROP_FACTOR * h->max_body ||
            (announced > h->max_body && expect && strcasecmp(expect, "100-continue") == 0))
            return reply_too_large(h, c, method, url, rs);
        rs->req.too_large = announced > h->max_body;
        return MHD_YES;
    }
    /* the body's deadline moves with each piece, and ends with the body */
    srv_conn *k = conn_of(c);
    if (k && *upload_data_size) srv_conns_body(h->conns, k, *upload_data_size);
    if (k && !*upload_data_size) srv_conns_body_done(h->conns, k);
    if (rs->req.upload) { /* streamed: every piece goes to the api as it arrives */
        if (*upload_data_size) {
            srv_request_upload_piece(&rs->req, upload_data, *upload_data_size);
            *upload_data_size = 0;
            if (rs->req.len > api_upload_limit(h->api) + UPLOAD_FRAMING_BYTES) /* chunked, past the cap */
                return reply_upload_too_large(h, c, method, url, rs);
            return MHD_YES;
        }
        api_response resp = {0};
        srv_request_upload_finish(&rs->req, h->api, &resp);
        resp.route = api_route_name(method, url);
        return send_response(h, c, method, url, &resp, rs);
    }
    if (*upload_data_size) { /* a piece of the body */
        srv_request_append(&rs->req, upload_data, *upload_data_size, h->max_body);
        *upload_data_size = 0;
        if (rs->req.dropped > DROP_FACTOR * h->max_body) /* chunked, far past the cap: enough read */
            return reply_too_large(h, c, method, url, rs);
        return MHD_YES;
    }
    if (rs->req.too_large)
        return reply_too_large(h, c, method, url, rs);
    api_request req;
    srv_request_api(&rs->req, c, method, url, &req);
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (fd) {
        req.client_gone = client_gone;
        req.client_gone_arg = (void *)(intptr_t)fd->connect_fd;
    }
    api_response resp;
    api_handle(h->api, &req, &resp);
    return send_response(h, c, method, url, &resp, rs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    srv_http *h = cls;
    srv_conn *k = conn_of(c);
    /* a keep-alive connection now waits for its next head: the deadline runs */
    if (k && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) srv_conns_idle(h->conns, k, hpo_monotonic());
    request_state *rs = *con_cls;
    if (!rs) return;
    srv_request_clear(&rs->req);
    free(rs);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        srv_addr a;
        srv_addr_from(ad ? ad->client_addr : NULL, &a);
        *socket_context = srv_conns_started(h->conns, fd ? fd->connect_fd : -1, &a, hpo_monotonic());
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        srv_conns_closed(h->conns, *socket_context);
        *socket_context = NULL;
    }
}

static int handoff(void *arg, int fd, const struct sockaddr *sa, socklen_t len) {
    srv_http *h = arg;
    return MHD_add_connection(h->daemon, fd, sa, len) == MHD_YES ? 0 : -1;
}

/* The line of an answer the gate wrote: what log_request writes for a 4xx,
 * with the client's address; bytes_in 0 (the gate reads no body) and ms
 * from the accept. */
static void on_gate_answer(void *arg, const srv_addr *from, const srv_gate_answer *a) {
    srv_http *h = arg;
    char ip[64], path[160];
    srv_addr_format(from, ip, sizeof ip);
    size_t n = strcspn(a->target, "?");
    if (n >= sizeof path) n = sizeof path - 1;
    memcpy(path, a->target, n);
    path[n] = '\0';
    const char *route = *a->method ? api_route_name(a->method, path) : "unmatched";
    hpo_log_field f[] = {HPO_LOG_STR("route", route ? route : "unmatched"), HPO_LOG_NUM("status", a->status),
                         HPO_LOG_NUM("bytes_in", 0), HPO_LOG_NUM("ms", floor(a->secs * 1e5) / 100),
                         HPO_LOG_STR("code", a->code), HPO_LOG_STR("field", a->field),
                         HPO_LOG_STR("error", a->message), HPO_LOG_STR("from", ip)};
    hpo_log_fields(HPO_LOG_INFO, f, HPO_ARRAY_LEN(f), "%s %s %d from %s: %s",
                   *a->method ? a->method : "-", *path ? path : "-", a->status, ip, a->message);
    /* no latency: the gate's answers are not the routes' */
    api_metrics_observe_request(h->api, route, a->status, -1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[n - 1] = '\0';
    HPO_DEBUG("libmicrohttpd: %s", line);
}

/* Raises the soft descriptor limit to the hard one; returns how many
 * descriptors the process may hold. */
static rlim_t raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl)) getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

static int listen_on(const struct sockaddr_in *addr, hpo_error *err, const char *name, int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return hpo_fail(err, HPO_EIO, "port", "cannot create a socket: %s", strerror(errno));
    /* SO_REUSEADDR lets a restarted hpod bind past connections in TIME_WAIT;
     * it does not let two listen on one port (SO_REUSEPORT would) */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)addr, sizeof *addr) || listen(fd, SOMAXCONN)) {
        int e = errno;
        close(fd);
        return hpo_fail(err, HPO_EIO, "port", "cannot listen on %s:%d: %s%s", name, port, strerror(e),
                        e == EADDRINUSE ? " (another hpod or program holds the port)" : "");
    }
    return fd;
}

static void free_http(srv_http *h) {
    for (size_t i = 0; i < h->n_allowed; i++) free(h->allowed[i]);
    free(h->allowed);
    srv_conns_free(h->conns);
    free(h->token);
    free(h);
}

int srv_http_start(api_ctx *api, const srv_http_options *opt, srv_http **out, hpo_error *err) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)opt->port);
    const char *bind = opt->bind ? opt->bind : "127.0.0.1";
    if (inet_pton(AF_INET, bind, &addr.sin_addr) != 1)
        return hpo_fail(err, HPO_EINVAL, "bind", "--bind %s is not an IPv4 address", bind);
    if (opt->port < 0 || opt->port > 65535)
        return hpo_fail(err, HPO_EINVAL, "port", "--port %d is not in 0..65535", opt->port);
    unsigned max_conn = opt->max_connections ? opt->max_connections : 1024;
    rlim_t nofile = raise_nofile();
    /* the connections libmicrohttpd serves and as many waiting at the gate */
    if ((rlim_t)2 * max_conn + SPARE_FDS > nofile) {
        unsigned fit = nofile > 2 * SPARE_FDS ? (unsigned)((nofile - SPARE_FDS) / 2) : 64;
        HPO_WARN("the descriptor limit (%llu) holds %u connections, not %u: raise it (ulimit -n) to serve more",
                 (unsigned long long)nofile, fit, max_conn);
        max_conn = fit;
    }
    srv_http *h = hpo_xcalloc(1, sizeof *h);
    h->api = api;
    h->token = opt->token && *opt->token ? hpo_strdup(opt->token) : NULL;
    h->max_body = opt->max_body ? opt->max_body : (size_t)1 << 20;
    h->max_streams = opt->max_streams ? opt->max_streams : 256;
    snprintf(h->bind, sizeof h->bind, "%s", bind);
    h->bind_any = addr.sin_addr.s_addr == htonl(INADDR_ANY);
    h->bind_loopback = (ntohl(addr.sin_addr.s_addr) >> 24) == 127;
    h->limits = (srv_head_limits){8192, 16384, 100};
    h->allowed = hpo_xcalloc(opt->n_allowed_hosts + 1, sizeof *h->allowed);
    for (size_t i = 0; i < opt->n_allowed_hosts; i++) {
        char *name = hpo_strdup(opt->allowed_hosts[i]);
        for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
        h->allowed[h->n_allowed++] = name;
    }
    unsigned per_client = opt->max_per_client == SRV_HTTP_UNLIMITED ? 0
                          : opt->max_per_client                   ? opt->max_per_client
                                                                  : 64;
    unsigned reserve = max_conn / 16 > 8 ? max_conn / 16 : 8;
    double header_timeout = opt->header_timeout_s ? opt->header_timeout_s : 10;
    /* room above the soft cap answers 503 instead of a reset */
    srv_conns_opts copt = {.max_handed = max_conn > 2 * reserve ? max_conn - reserve : (max_conn + 1) / 2,
                           .per_client = per_client,
                           .max_pending = max_conn,
                           .header_timeout = header_timeout};
    int lfd = -1;
    if (srv_conns_new(&copt, &h->conns)) {
        free_http(h);
        return hpo_fail(err, HPO_EINVAL, "max-connections", "bad connection limits");
    }
    lfd = listen_on(&addr, err, bind, opt->port);
    if (lfd < 0) {
        free_http(h);
        return lfd;
    }
    struct sockaddr_in got;
    socklen_t gl = sizeof got;
    h->port = getsockname(lfd, (struct sockaddr *)&got, &gl) == 0 ? ntohs(got.sin_port) : opt->port;
    /* A thread per connection: an event stream may block its thread while it
     * waits for the next event without holding up anyone else. The gate
     * accepts and hands connections over (MHD_add_connection). */
    h->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG |
            MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC,
        0, NULL, NULL, on_request, h,
        /* first: libmicrohttpd's errors about the options after it go to our log */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_CONNECTION_LIMIT, max_conn,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(opt->timeout_s ? opt->timeout_s : 60),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, MHD_MEMORY_LIMIT, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h, MHD_OPTION_END);
    if (!h->daemon) {
        close(lfd);
        free_http(h);
        return hpo_fail(err, HPO_EIO, "port", "cannot start libmicrohttpd");
    }
    srv_gate_opts gopt = {.listen_fd = lfd,
                          .max_pending = max_conn,
                          .per_client = per_client,
                          .header_timeout = header_timeout,
                          .limits = h->limits};
    srv_gate_hooks hooks = {.arg = h, .handoff = handoff, .answered = on_gate_answer};
    if (srv_gate_start(&gopt, h->conns, &hooks, &h->gate)) {
        close(lfd);
        MHD_stop_daemon(h->daemon);
        free_http(h);
        return hpo_fail(err, HPO_EIO, "port", "cannot start accepting connections");
    }
    *out = h;
    return 0;
}

int srv_http_port(const srv_http *h) { return h->port; }

void srv_http_stop(srv_http *h) {
    if (!h) return;
    srv_gate_stop(h->gate); /* no new connections */
    MHD_stop_daemon(h->daemon);
    free_http(h);
}
