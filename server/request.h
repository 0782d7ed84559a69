/*
 * request.h - one request's body on its way from libmicrohttpd to the api:
 * a JSON body gathered up to the size cap, or a dataset upload streamed
 * through libmicrohttpd's multipart post processor into api_upload_*, and
 * the api_request that hands either to the api.
 *
 * Design notes
 * - Shared by http.c (hpod's server, which adds the gate, the checks of
 *   the head, tokens, logs and metrics around it) and by
 *   tests/fuzz/fuzz_http.c, which drives its own libmicrohttpd daemon
 *   without threads or sockets: the fuzzer runs this very code, not a copy.
 * - A body over max bytes is read and dropped (too_large, dropped; the
 *   caller answers 413 once it is all read, or once it has dropped far more
 *   than the cap), so the client gets a clean answer instead of a reset. An upload piece the api refuses fails the upload;
 *   the rest is read and dropped for the same reason.
 * - Ownership: a srv_request belongs to its request (libmicrohttpd's
 *   con_cls); srv_request_clear frees what it holds, aborting an upload
 *   that did not finish (the client went away).
 */
#ifndef HPO_SERVER_REQUEST_H
#define HPO_SERVER_REQUEST_H

#include <stddef.h>

#include "api.h"

struct MHD_Connection;
struct MHD_PostProcessor;

typedef struct srv_request {
    char *body;          /* a JSON body so far (not an upload's) */
    size_t len, cap;     /* len: the bytes received, uploads included */
    int too_large;       /* the body went over its cap: dropped */
    size_t dropped;      /* bytes of it dropped since */
    api_upload *upload;  /* a streamed upload, until it finishes */
    struct MHD_PostProcessor *pp;
} srv_request;

/* Starts a dataset upload (api_is_upload said so) on connection c: 0, or
 * nonzero with the answer to send in resp (the api's refusal, or 400 when
 * the body is not multipart/form-data). */
int srv_request_upload_begin(srv_request *r, api_ctx *api, struct MHD_Connection *c, api_response *resp);
/* A piece of the upload's body, parsed and streamed to the api. */
void srv_request_upload_piece(srv_request *r, const char *data, size_t n);
/* The upload's body is all read: its answer in resp. */
void srv_request_upload_finish(srv_request *r, api_ctx *api, api_response *resp);
/* A piece of a JSON body, kept while the body stays within max bytes. */
void srv_request_append(srv_request *r, const char *data, size_t n, size_t max);
/* The api's request for the body read and connection c (its query
 * arguments and Last-Event-ID); r and c must outlive it. */
void srv_request_api(srv_request *r, struct MHD_Connection *c, const char *method, const char *url,
                     api_request *out);
void srv_request_clear(srv_request *r);

#endif
