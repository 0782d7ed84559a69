/*
 * http.h - the HTTP server: accepts connections (the gate, gate.h), serves
 * their requests with libmicrohttpd, enforces limits, the bearer token and
 * the cross-site rules, hands complete requests to the api (api_handle) and
 * sends its responses; one log line per request.
 *
 * Design notes
 * - Connections: the gate owns the listening socket and holds a new
 *   connection (a socket, no thread) until its first request head is
 *   complete and good; then libmicrohttpd runs it on a thread of its own
 *   (up to max_connections). The api never blocks on a trial; only an event
 *   stream (server-sent events) waits, on its own thread.
 * - Limits, all answered with a JSON error: request heads are checked
 *   (head.h: 400, 413, 414, 431, 501, 505); a head must arrive within
 *   header_timeout_s of the accept or of the previous response, however
 *   slowly it trickles (408 or close); connections per client address
 *   (max_per_client), open event streams (max_streams) and connections in
 *   all are capped (503 with Retry-After; idle keep-alive connections are
 *   closed first to make room, see conns.h); the body of a request is capped
 *   (max_body bytes: a Content-Length far over it, or over it with
 *   "Expect: 100-continue", is refused with 413 before the body is read;
 *   a body a little over it, or chunked, is read and dropped, then
 *   refused, unless it grows far past the cap first; an upload announcing
 *   more than the api's upload limit is refused at once); a request body
 *   has a deadline (conns.h); a connection silent mid-request times out
 *   (timeout_s).
 * - What libmicrohttpd 0.9.75 still answers itself, in HTML, because no
 *   hook of it reaches those paths: a malformed head on the second or a
 *   later request of a keep-alive connection (the gate only sees the
 *   first; such a head over 32 KiB, a bad request line or version, a bad
 *   Content-Length), and a malformed chunked body.
 * - Auth: when a token is set, every method other than GET and HEAD needs
 *   "Authorization: Bearer <token>" (scheme in any case; token compared in
 *   constant time), else 401.
 * - The Host header must name this server (localhost, 127.0.0.1, [::1],
 *   the bind address, or one of allowed_hosts; any port) else 421, which
 *   defeats DNS rebinding: without a token always, with one when bound to
 *   a loopback address (a token guards mutations, not reads; bound to a
 *   network address with a token, any name may reach it).
 * - Without a token, browsers are kept out of mutations: a
 *   call other than GET/HEAD must be application/json (multipart/form-data
 *   for a dataset upload) or carry no body and no Content-Type, else 415,
 *   and an Origin header must be the site the request is addressed to (its
 *   Host's name and port) or an allowed host, else 403: a cross-site form
 *   or fetch cannot send such a request without the server's consent.
 * - A request path or query holding an encoded NUL (%00) is refused (400).
 * - HEAD is served as GET without the body.
 * - Ownership: srv_http borrows the api context, which must outlive it.
 */
#ifndef HPO_SERVER_HTTP_H
#define HPO_SERVER_HTTP_H

#include <limits.h>
#include <stddef.h>

#include "api.h"

typedef struct srv_http srv_http;

/* max_per_client / max_streams: no cap */
#define SRV_HTTP_UNLIMITED UINT_MAX

typedef struct srv_http_options {
    const char *bind;    /* IPv4 address to bind, default "127.0.0.1" */
    int port;            /* 0: any free port (see srv_http_port) */
    const char *token;   /* bearer token for mutating calls; NULL or "" for none */
    size_t max_body;     /* bytes, default 1 MiB */
    unsigned max_connections;  /* served at once, a thread each; default 1024 (as many more
                                  may wait for their first request head) */
    unsigned timeout_s;        /* a connection silent mid-request, default 60 */
    unsigned header_timeout_s; /* request head deadline, default 10 */
    unsigned max_per_client;   /* connections per client address, default 64 */
    unsigned max_streams;      /* open event streams, default 256 */
    const char *const *allowed_hosts; /* more Host names accepted without a token */
    size_t n_allowed_hosts;
} srv_http_options;

/* Starts serving; raises the soft RLIMIT_NOFILE to its hard limit (and
 * lowers max_connections, with a warning, if even that is too small). */
int srv_http_start(api_ctx *api, const srv_http_options *opt, srv_http **out, hpo_error *err);
int srv_http_port(const srv_http *h);
/* Stops accepting, finishes or closes open connections, frees h. */
void srv_http_stop(srv_http *h);

#endif
