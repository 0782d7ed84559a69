/*
 * internal.h - what the api's files share behind api.h: the context, the
 * handler signature, response helpers, the study definition and the cache
 * of per-study tuner state.
 *
 * Design notes
 * - A handler gets the request, the integer id from the path (0 if the route
 *   has none) and fills the response; it never returns an error code: every
 *   failure becomes a JSON error response via api_fail / api_fail_rc.
 * - api_study (the cache entry) is reference counted: acquire returns it
 *   with a reference, release drops it; the cache holds one reference while
 *   the entry is cached. Its mutex guards the tuner and the counters.
 */
#ifndef HPO_API_INTERNAL_H
#define HPO_API_INTERNAL_H

#include <jansson.h>
#include <pthread.h>

#include "api.h"
#include "tuners.h"

typedef void (*api_handler)(api_ctx *ctx, const api_request *req, int64_t id,
                            api_response *resp);

/* ---- responses (respond.c) ---- */
/* Sends json (steals the reference) with the given status. */
void api_reply_json(api_response *resp, int status, json_t *json);
void api_reply_text(api_response *resp, int status, const char *content_type, const char *text,
                    size_t len);
/* An error response for a client mistake (4xx) or our failure (5xx). */
void api_fail(api_response *resp, int status, const char *code, const char *field,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* An error response for an HPO_E* code, with err's field and message when set. */
void api_fail_rc(api_response *resp, int rc, const hpo_error *err);
int api_status_for_rc(int rc);
/* Parses the request body as a JSON object; on failure fills resp and
 * returns NULL. */
json_t *api_body_object(const api_request *req, api_response *resp);
/* Reads an integer query argument in [lo, hi] (default def); on a bad
 * value fills resp and returns -1. */
int api_query_int(const api_request *req, api_response *resp, const char *key, int64_t def,
                  int64_t lo, int64_t hi, int64_t *out);
/* JSON number for a double, null for NaN/Inf. */
json_t *api_json_real(double v);

/* ---- study definitions (study_def.c) ---- */
typedef struct api_study_def {
    const char *name;  /* borrowed from the definition */
    int maximize;
    const char *metric; /* objective metric (embedded studies), borrowed; may be NULL */
    tun_space *space;  /* owned */
    tun_config tuner;
    int64_t max_trials;    /* 0 = unlimited */
    double lease_seconds;  /* external trials: ask -> tell deadline, renewed by report */
    int embedded;          /* has a "model" */
} api_study_def;

/* Validates a study definition (a JSON object); errors name the field. */
int api_study_def_parse(const json_t *def, double default_lease, api_study_def *out,
                        hpo_error *err);
void api_study_def_close(api_study_def *d);

/* ---- per-study tuner state (study_cache.c) ---- */
typedef struct api_study {
    int64_t id;
    pthread_mutex_t lock; /* guards everything below */
    json_t *spec;         /* the stored definition */
    api_study_def def;
    tun_study *tuner;
    int64_t next_number;  /* trials created so far */
    int refs;             /* guarded by the cache mutex */
} api_study;

/* Returns the study with a reference (loading and replaying its history on
 * first use); HPO_ENOTFOUND if it does not exist. */
int api_study_acquire(api_ctx *ctx, int64_t id, api_study **out);
void api_study_release(api_ctx *ctx, api_study *st);
/* Drops a study from the cache (after DELETE). */
void api_study_forget(api_ctx *ctx, int64_t id);
int api_cache_init(api_ctx *ctx);
void api_cache_close(api_ctx *ctx);

/* Maps storage trial states to tuner states. */
tun_trial_state api_tun_state(sto_trial_state s);

/* ---- JSON of stored objects (json_map.c) ---- */
json_t *api_trial_json(const sto_trial *t, int with_intermediates, sto_db *db);
json_t *api_study_json(api_ctx *ctx, const sto_study *s, int full);

/* ---- metrics (metrics.c) ---- */
typedef struct api_metrics api_metrics;
int api_metrics_new(api_metrics **out);
void api_metrics_free(api_metrics *m);
enum { API_OP_ASK = 0, API_OP_REPORT, API_OP_TELL, API_N_OPS };
void api_metrics_observe_op(api_ctx *ctx, int op, double seconds);
char *api_metrics_render(api_ctx *ctx, size_t *len_out);

/* ---- the context ---- */
struct api_cache;
struct api_ctx {
    sto_db *db;
    api_options opt;
    struct api_cache *cache;
    api_metrics *metrics;
};

/* ---- handlers (one file per resource) ---- */
void api_h_healthz(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_metrics(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_openapi(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_create(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_list(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_get(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_delete(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_trials(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_best(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_ask(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_trial_get(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_trial_report(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_trial_tell(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_importance(api_ctx *, const api_request *, int64_t, api_response *); /* importance.c */
void api_h_static_index(api_ctx *, const api_request *, int64_t, api_response *);     /* static.c */
void api_h_static_asset(api_ctx *, const api_request *, int64_t, api_response *);

#endif
