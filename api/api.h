/*
 * api.h - the REST API of hpod, independent of the HTTP library: a request
 * (method, path, query, headers of interest, body) goes in, a response
 * (status, content type, body) comes out. server/http.c adapts
 * libmicrohttpd to this; the unit tests call api_handle directly.
 *
 * Design notes
 * - Routing is a static table (api_route_at) of method + path pattern with
 *   integer {id} segments; every route is in api/openapi.yaml and a test
 *   checks the two agree. A route's name ("studies.ask") labels metrics.
 * - Errors are JSON {"error": {"code", "message", "field"}} with a 4xx
 *   status for anything a client did wrong, 5xx only for our failures.
 * - State: the api owns an api_ctx: the storage handle, the in-memory tuner
 *   state of studies that were used since start (loaded lazily from
 *   storage by replaying their history, so a restarted hpod suggests what
 *   the old one would have), and the metrics.
 * - Threading: api_handle is called concurrently from the HTTP threads.
 *   Each study's tuner state has its own mutex; ask, report and tell for one
 *   study are serialised by it (they also write storage under it, so the
 *   trial numbers storage assigns match the tuner's), different studies run
 *   in parallel. The cache's mutex guards the table and the reference
 *   counts; a study's first load (replaying its history, opening an
 *   embedded study's dataset) runs outside it, marked as under way, so two
 *   threads never load one study twice and no request waits for another
 *   study's load. The lock order is in jobs.h.
 * - The work hpod does on its worker slots (training, refits, ensembles) is
 *   the job layer, jobs.h; the server's scheduler and workers use that.
 * - Leases: an asked trial of an external study holds a lease of the
 *   study's "lease_seconds" (default 600). Every report renews it; tell ends
 *   it. api_expire_leases (called every second by the server) fails the
 *   trials whose lease expired, with error "lease expired", and tells the
 *   tuner; a late tell then gets 409. The lease is stored, so the rule holds
 *   across restarts: a trial asked before a crash and never told is failed
 *   once its lease runs out.
 * - Budgets: an external study's budget is tuner.max_trials (trials asked),
 *   tuner.max_seconds (since its creation) and, for a grid, its points. An
 *   ask past it gets 409 "exhausted" naming the field ("tuner.max_trials",
 *   "tuner.max_seconds", "space"). Once it is spent and no trial is out the
 *   study is complete (a study_complete event): at the tell or lease expiry
 *   of its last trial, at a refused ask or a resume, or at its max_seconds
 *   deadline (the server's lease pass: an idle study ends within a second
 *   of it, also after a restart). See jobs_internal.h: a study's end.
 * - A study created without tuner.seed gets one drawn at random, stored in
 *   its definition and shown in its JSON ("seed"), so it can be replayed.
 */
#ifndef HPO_API_H
#define HPO_API_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hpo.h"
#include "storage.h"

typedef struct api_ctx api_ctx;

typedef struct api_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* without the query string */
    /* Looks up a query argument (NULL if absent); arg is passed back. */
    const char *(*query)(void *arg, const char *key);
    void *query_arg;
    const char *body; /* may be NULL when body_len == 0; not NUL-terminated */
    size_t body_len;
    const char *last_event_id; /* Last-Event-ID header, or NULL */
    /* Whether the client has gone (closed its connection); NULL: unknown.
     * An event stream asks while it waits for events, so a closed stream
     * ends (and frees its place) within a second, not at its next write.
     * Valid for as long as the response's stream is. */
    int (*client_gone)(void *arg);
    void *client_gone_arg;
} api_request;

typedef struct api_response {
    int status;
    const char *content_type; /* static string */
    char *body;               /* malloc'd, owned by the response */
    size_t body_len;
    const char *route;        /* route name for logs and metrics (static) */
    const char *cache_control; /* Cache-Control (static string); NULL: "no-store" */
    int retry_after;           /* > 0: a Retry-After header of that many seconds (503) */
    char allow[48];            /* non-empty: an Allow header (405: the path's methods) */
    /* non-empty: the body is a file to save under this name (Content-Disposition:
     * attachment); printable ASCII without quotes */
    char filename[64];
    /* A streamed body (server-sent events): when stream is set, body is
     * unused and the server calls stream(arg, buf, max) for more bytes until
     * it returns -1 (the end). It may block: every connection has its own
     * thread. stream_free(arg) is called once when the connection ends. */
    long (*stream)(void *arg, char *buf, size_t max);
    void (*stream_free)(void *arg);
    void *stream_arg;
    /* A file as the body (a model's weights): when has_file is set, body is
     * unused and the server sends file_len bytes of file_fd from its start
     * (sendfile, no copy in memory) and closes it; api_response_clear closes
     * it when the response is dropped instead. */
    int has_file;
    int file_fd;
    uint64_t file_len;
} api_response;

typedef struct api_options {
    double default_lease_seconds; /* default 600 */
    const char *data_dir;         /* where uploads and checkpoints live (default ".") */
    uint64_t max_upload_bytes;    /* largest dataset upload (default 1 GiB) */
    /* the longest an upload waits for one of the engine's dataset load
     * slots (eng_data_load_acquire) before it gets 503 (default 30 s) */
    double upload_wait_seconds;
    /* fsync trial checkpoints (hpod --sync full); 0: they survive a crash of
     * hpod but not a power cut, as the database does under --sync normal */
    int durable_checkpoints;
    /* memory budget of one model's training run (engine/train.h,
     * eng_train_mem): a study whose template needs more at every point of
     * its space is refused (400), a trial that draws a model over it fails
     * with "model needs X, budget Y" (hpod --max-model-bytes; 0: the
     * default below) */
    uint64_t max_model_bytes;
} api_options;

#define API_DEFAULT_MAX_MODEL_BYTES (UINT64_C(4) << 30)

/* 0 and *out, or an error: the data dir path too long (data_dir.h), the
 * run queue not loaded from storage. */
int api_ctx_new(sto_db *db, const api_options *opt, api_ctx **out);
/* Ends open event streams promptly (before the server stops). */
void api_ctx_shutdown(api_ctx *ctx);
void api_ctx_free(api_ctx *ctx);
sto_db *api_ctx_db(api_ctx *ctx); /* borrowed */

/* Handles one request; always fills resp (free with api_response_clear). */
void api_handle(api_ctx *ctx, const api_request *req, api_response *resp);
void api_response_clear(api_response *resp);

/* Fills resp with a JSON error {"error": {...}} for rc/err. */
void api_error_response(api_response *resp, int status, const char *code, const char *message,
                        const char *field);

/* Records a finished request in the metrics (the server calls this after
 * sending, so errors produced by the HTTP layer are counted too): its
 * count by route and status, and its duration (seconds from the request
 * line to the response queued; < 0: unknown, not observed) in the latency
 * histogram of its route. route NULL: "unmatched". */
void api_metrics_observe_request(api_ctx *ctx, const char *route, int status, double seconds);

/* The error of an error response ({"error": {"code","message","field"}}),
 * for the log line of a 4xx: 0 and the three strings (cut to their buffers,
 * each at least 1 byte), or HPO_ENOTFOUND when the body is not one. */
typedef struct api_error_info {
    char code[48], field[128], message[384];
} api_error_info;
int api_response_error(const api_response *resp, api_error_info *out);

/* The metrics of the job layer's workers. api_metrics_slots names the slots
 * once at start (before any job runs): hpo_slots and the per-slot series
 * (epochs, samples/s) cover these names and no others, so the labels stay
 * bounded. */
void api_metrics_slots(api_ctx *ctx, const char *const *names, size_t n);
/* The slot's worker starts (busy 1) or ends (0) a job: hpo_slot_busy_seconds_total. */
void api_metrics_slot_busy(api_ctx *ctx, const char *slot, int busy);

/* ---- streamed uploads (POST /api/v1/datasets, multipart/form-data) ----
 * The server parses the multipart body (libmicrohttpd's post processor) and
 * feeds every piece here as it arrives, so a large file never sits in
 * memory: text fields are collected, file fields are written to a temporary
 * folder under the data dir. finish validates the files, stores the dataset
 * and fills the response; abort (connection lost) removes the temporary
 * files. Exactly one of finish/abort is called. finish loads the files in
 * one of the engine's dataset load slots (bounded concurrency, data.h): it
 * waits for one at most opt.upload_wait_seconds, then answers 503 with
 * Retry-After; a dataset over eng_data_max_bytes() gets 413 naming the
 * form field of the file. */
typedef struct api_upload api_upload;
/* 1 if method+path is an upload route. */
int api_is_upload(const char *method, const char *path);
/* The largest upload accepted (opt.max_upload_bytes or its default). */
uint64_t api_upload_limit(const api_ctx *ctx);
/* 0 and *out, or an error response in resp (e.g. no data dir). */
int api_upload_begin(api_ctx *ctx, api_upload **out, api_response *resp);
/* A piece of field `key` (filename NULL for a text field) at offset off.
 * 0, or a negative code after which the upload is failed (finish reports it). */
int api_upload_part(api_upload *u, const char *key, const char *filename, const char *data,
                    uint64_t off, size_t size);
void api_upload_finish(api_ctx *ctx, api_upload *u, api_response *resp);
void api_upload_abort(api_upload *u);

/* The route table, for the server's 405 handling and the openapi test. */
typedef struct api_route {
    const char *method;
    const char *pattern; /* "/api/v1/studies/{id}/ask" */
    const char *name;    /* "studies.ask" */
} api_route;
size_t api_route_count(void);
/* The name of the route method+path resolves to ("unmatched" if none): the
 * label of requests the server answers itself (401, 413). */
const char *api_route_name(const char *method, const char *path);
const api_route *api_route_at(size_t i);

/* The OpenAPI contract embedded at build time. */
extern const unsigned char api_openapi_yaml[];
extern const unsigned long api_openapi_yaml_len;

#endif
