/*
 * http.h - libmicrohttpd glue: accepts connections, enforces limits and the
 * bearer token, reads request bodies, hands complete requests to the api
 * (api_handle) and sends its responses; one log line per request.
 *
 * Design notes
 * - libmicrohttpd runs a thread per connection (up to max_connections);
 *   api_handle is called on those threads. The api never blocks on a trial;
 *   only an event stream (server-sent events) waits, on its own thread.
 * - Limits: the body of a request is capped (max_body bytes; a larger
 *   Content-Length is refused with 413 before the body is read, a chunked
 *   body that grows past the cap is discarded and refused), connections are
 *   capped (max_connections) and idle connections time out (timeout_s).
 * - Auth: when a token is set, every method other than GET and HEAD needs
 *   "Authorization: Bearer <token>" (compared in constant time), else 401.
 * - Ownership: srv_http borrows the api context, which must outlive it.
 */
#ifndef HPO_SERVER_HTTP_H
#define HPO_SERVER_HTTP_H

#include <stddef.h>

#include "api.h"

typedef struct srv_http srv_http;

typedef struct srv_http_options {
    const char *bind;    /* IPv4 address to bind, default "127.0.0.1" */
    int port;            /* 0: any free port (see srv_http_port) */
    const char *token;   /* bearer token for mutating calls; NULL or "" for none */
    size_t max_body;     /* bytes, default 1 MiB */
    unsigned max_connections; /* default 256 */
    unsigned timeout_s;  /* idle connection timeout, default 60 */
} srv_http_options;

int srv_http_start(api_ctx *api, const srv_http_options *opt, srv_http **out, hpo_error *err);
int srv_http_port(const srv_http *h);
/* Stops accepting, finishes or closes open connections, frees h. */
void srv_http_stop(srv_http *h);

#endif
