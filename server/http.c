/* http.c - libmicrohttpd glue (see http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_http {
    struct MHD_Daemon *daemon;
    api_ctx *api;
    char *token;
    size_t max_body;
    int port;
};

/* Per-request state across the calls libmicrohttpd makes for one request. */
typedef struct request_state {
    double started;
    char *body;
    size_t len, cap;
    int too_large;
    /* streamed uploads */
    api_upload *upload;
    struct MHD_PostProcessor *pp;
} request_state;

static enum MHD_Result on_upload_piece(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *filename, const char *content_type,
                                       const char *transfer_encoding, const char *data, uint64_t off,
                                       size_t size) {
    request_state *rs = cls;
    return api_upload_part(rs->upload, key, filename, data, off, size) == 0 ? MHD_YES : MHD_NO;
}

static const char *query_arg(void *arg, const char *key) {
    return MHD_lookup_connection_value((struct MHD_Connection *)arg, MHD_GET_ARGUMENT_KIND, key);
}

static int tokens_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

static int authorized(const srv_http *h, struct MHD_Connection *c, const char *method) {
    if (!h->token || strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return auth && strncmp(auth, "Bearer ", 7) == 0 && tokens_equal(auth + 7, h->token);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    api_response *resp = cls;
    long n = resp->stream(resp->stream_arg, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void stream_free(void *cls) {
    api_response *resp = cls;
    resp->stream_free(resp->stream_arg);
    free(resp);
}

static enum MHD_Result send_response(srv_http *h, struct MHD_Connection *c, const char *method,
                                     const char *url, api_response *resp, request_state *rs) {
    struct MHD_Response *r;
    if (resp->stream) { /* server-sent events: the copy lives as long as the stream */
        api_response *copy = hpo_xmalloc(sizeof *copy);
        *copy = *resp;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, copy, stream_free);
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
    } else {
        r = MHD_create_response_from_buffer(resp->body_len, resp->body, MHD_RESPMEM_MUST_FREE);
        resp->body = NULL; /* owned by r now */
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type ? resp->content_type
                                                                                : "application/json");
    MHD_add_response_header(r, "Cache-Control", resp->cache_control ? resp->cache_control : "no-store");
    if (resp->status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (resp->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", resp->retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    double ms = (hpo_monotonic() - rs->started) * 1e3;
    hpo_log(resp->status >= 500 ? HPO_LOG_WARN : HPO_LOG_INFO, "%s %s %d in=%zub %.2fms", method,
            url, resp->status, rs->len, ms);
    api_metrics_observe_request(h->api, resp->route, resp->status);
    return ok;
}

static enum MHD_Result reply_error(srv_http *h, struct MHD_Connection *c, const char *method,
                                   const char *url, request_state *rs, int status, const char *code,
                                   const char *message) {
    api_response resp = {0};
    api_error_response(&resp, status, code, message, "");
    resp.route = api_route_name(method, url);
    return send_response(h, c, method, url, &resp, rs);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    srv_http *h = cls;
    request_state *rs = *con_cls;
    if (!rs) { /* first call: headers only */
        rs = hpo_xcalloc(1, sizeof *rs);
        rs->started = hpo_monotonic();
        *con_cls = rs;
        if (!authorized(h, c, method))
            return reply_error(h, c, method, url, rs, 401, "unauthorized",
                               "this call needs the header Authorization: Bearer <token>");
        if (api_is_upload(method, url)) {
            api_response resp = {0};
            if (api_upload_begin(h->api, &rs->upload, &resp)) {
                resp.route = api_route_name(method, url);
                return send_response(h, c, method, url, &resp, rs);
            }
            rs->pp = MHD_create_post_processor(c, 64 * 1024, on_upload_piece, rs);
            if (!rs->pp) {
                api_upload_abort(rs->upload);
                rs->upload = NULL;
                return reply_error(h, c, method, url, rs, 400, "invalid_argument",
                                   "an upload must be a multipart/form-data body");
            }
            return MHD_YES;
        }
        /* A body over the limit is read and dropped, so the client gets a
         * clean 413 instead of a reset; one far over it is refused at once. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long announced = cl ? strtoull(cl, NULL, 10) : 0;
        if (announced > 64ull * h->max_body)
            return reply_error(h, c, method, url, rs, 413, "too_large",
                               "the request body is over the size limit");
        rs->too_large = announced > h->max_body;
        return MHD_YES;
    }
    if (rs->upload) { /* streamed: every piece goes to the api as it arrives */
        if (*upload_data_size) {
            rs->len += *upload_data_size;
            /* after a refused piece the api has failed the upload; the rest
             * is read and dropped so the client still gets the answer */
            MHD_post_process(rs->pp, upload_data, *upload_data_size);
            *upload_data_size = 0;
            return MHD_YES;
        }
        MHD_destroy_post_processor(rs->pp);
        rs->pp = NULL;
        api_upload *u = rs->upload;
        rs->upload = NULL;
        api_response resp = {0};
        api_upload_finish(h->api, u, &resp);
        resp.route = api_route_name(method, url);
        return send_response(h, c, method, url, &resp, rs);
    }
    if (*upload_data_size) { /* a piece of the body */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rs->too_large || rs->len + n > h->max_body) {
            rs->too_large = 1;
            free(rs->body);
            rs->body = NULL;
            rs->len = rs->cap = 0;
            return MHD_YES;
        }
        if (rs->len + n > rs->cap) {
            rs->cap = rs->len + n > 2 * rs->cap ? rs->len + n : 2 * rs->cap;
            rs->body = hpo_xrealloc(rs->body, rs->cap);
        }
        memcpy(rs->body + rs->len, upload_data, n);
        rs->len += n;
        return MHD_YES;
    }
    if (rs->too_large)
        return reply_error(h, c, method, url, rs, 413, "too_large", "the request body is over the size limit");
    api_request req = {
        .method = method,
        .path = url,
        .query = query_arg,
        .query_arg = c,
        .body = rs->body,
        .body_len = rs->len,
        .last_event_id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID"),
    };
    api_response resp;
    api_handle(h->api, &req, &resp);
    return send_response(h, c, method, url, &resp, rs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    request_state *rs = *con_cls;
    if (!rs) return;
    if (rs->pp) MHD_destroy_post_processor(rs->pp);
    if (rs->upload) api_upload_abort(rs->upload); /* the client went away */
    free(rs->body);
    free(rs);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[n - 1] = '\0';
    HPO_DEBUG("libmicrohttpd: %s", line);
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
    srv_http *h = hpo_xcalloc(1, sizeof *h);
    h->api = api;
    h->token = opt->token && *opt->token ? hpo_strdup(opt->token) : NULL;
    h->max_body = opt->max_body ? opt->max_body : (size_t)1 << 20;
    /* A thread per connection: an event stream may block its thread while it
     * waits for the next event without holding up anyone else. */
    h->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(opt->max_connections ? opt->max_connections : 256),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(opt->timeout_s ? opt->timeout_s : 60),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    if (!h->daemon) {
        free(h->token);
        free(h);
        return hpo_fail(err, HPO_EIO, "port", "cannot listen on %s:%d (in use or not permitted)", bind,
                        opt->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : opt->port;
    *out = h;
    return 0;
}

int srv_http_port(const srv_http *h) { return h->port; }

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    free(h->token);
    free(h);
}
