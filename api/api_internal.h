/*
 * api_internal.h - what the api's files share behind api.h: the context,
 * the handler signature, response helpers, the study definition, the cache
 * of per-study tuner state, events and the disk-full back-off. The job
 * layer's own declarations are in jobs_internal.h.
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
#include "jobs.h"
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
/* The error for a failed lookup of "<what> <id>": 404 naming the id when it
 * does not exist, the code's status otherwise. */
void api_fail_lookup(api_response *resp, int rc, const char *what, int64_t id);
/* 0 if every key of obj is one of keys, else a 400 naming the first other. */
int api_check_keys(const json_t *obj, const char *const *keys, size_t n, api_response *resp);
/* The same for a part of a definition: 0, or HPO_EINVAL in err naming field
 * ("unknown key \"k\" in <field>"). */
int api_only_keys(const json_t *obj, const char *const *keys, size_t n, const char *field, hpo_error *err);
/* The first key of obj that is not one of keys[0..n), or NULL. */
const char *api_unknown_key(const json_t *obj, const char *const *keys, size_t n);
/* Parses the request body as a JSON object; on failure fills resp and
 * returns NULL. */
json_t *api_body_object(const api_request *req, api_response *resp);
/* A call that takes no options: no body, or the empty JSON object {}. 0,
 * or -1 with a 400 in resp (not JSON, not an object, a key). */
int api_body_empty(const api_request *req, api_response *resp);
/* A decimal integer as a whole text: an optional '-' then digits only (no
 * space, '+' or trailing byte, within int64): 0, else -1. */
int api_parse_decimal(const char *text, int64_t *out);
/* Reads an integer query argument in [lo, hi] (default def, the text as
 * api_parse_decimal reads it); on a bad value fills resp and returns -1. */
int api_query_int(const api_request *req, api_response *resp, const char *key, int64_t def,
                  int64_t lo, int64_t hi, int64_t *out);
/* A JSON string of s, or, when s is not valid UTF-8 (bytes from a client's
 * file), of its first 255 bytes with every one outside printable ASCII as
 * '?'. */
json_t *api_json_string_lossy(const char *s);
/* JSON number for a double, null for NaN/Inf. */
json_t *api_json_real(double v);
/* json_dumps with every real in its shortest round-trip form (json_text.c);
 * malloc'd, NULL only when jansson fails. */
char *api_json_dumps(const json_t *json, size_t flags);

/* ---- study definitions (study_def.c, embedded.c, templates.c) ---- */

/* training.device: which worker slots may run a study's trials */
enum { API_DEVICE_ANY = 0, API_DEVICE_CPU, API_DEVICE_CUDA };
/* 1 if a slot named `slot` ("cpu:N", "cuda:G/K", ...) may run them */
int api_device_fits(int device, const char *slot);
/* 1 if one of the slots named at start (api_metrics_slots) fits device
 * (API_DEVICE_*), or none was named (a process without workers). */
int api_have_slot_for(api_ctx *ctx, int device);

/* What an embedded study (one with a "model") adds: the model template, the
 * dataset, training options and the tuner keys only hpod's own runs use. */
typedef struct api_embedded {
    json_t *model;          /* the model template (owned; premade templates expanded) */
    json_t *dataset;        /* the "dataset" object (owned reference) */
    int64_t dataset_id;     /* the uploaded dataset it names, as resolved at parse (0: a builtin one) */
    int n_classes;          /* of the dataset (0 for regression) */
    int in_rank, in_shape[3];
    /* dataset split */
    double validation_split; /* rows (>= 1) or a fraction (< 1); default 0.2 */
    int64_t limit;           /* training rows kept; 0 = all */
    int64_t validation_limit;
    int split_shuffle;       /* "split": "shuffle": rows permuted (seed split_seed) before the tail is
                                taken; default "tail" (Keras' validation_split) */
    int64_t split_seed;
    /* training */
    int batch_size;          /* default 128 */
    int max_epochs;          /* default 10 */
    int precision;           /* eng_precision, default fp32 */
    int steps_per_execution; /* training steps per graph launch on a CUDA slot; default 1 */
    int allow_tf32;          /* f32 GEMMs in TF32 on a CUDA slot; default 0 */
    int device;              /* the slots its trials may run on: API_DEVICE_*; default any */
    int patience;            /* early stopping; -1 = off */
    char monitor[64];        /* default: the objective metric */
    double min_delta;
    int tensorboard;         /* training.tensorboard: event files per trial (job_tb.c); default 0 */
    /* budget */
    int executions;          /* executions_per_trial, default 1 */
    int parallel;            /* parallel_trials; 0 = as many as there are slots */
    double trial_timeout;    /* seconds per trial; 0 = none */
    /* the curve: the epoch metric whose best epoch is the trial's (borrowed;
     * the objective's metric, or with objectives the first epoch metric
     * among them, else val_loss) and its direction (emb_objectives.c) */
    const char *curve;
    int curve_max;
} api_embedded;

/* A study's objectives and constraints (objectives.c); strings borrowed
 * from the definition. */
#define API_MAX_CONSTRAINTS 16
typedef struct api_objective {
    const char *metric; /* NULL: the one objective of an "objective" without a metric */
    int maximize;
    double reference;   /* objectives[i].reference of the hypervolume; NaN: none given */
} api_objective;
typedef struct api_constraint {
    const char *metric;
    double min, max;    /* NaN: no bound */
} api_constraint;

typedef struct api_study_def {
    const char *name;  /* borrowed from the definition */
    int maximize;       /* the (first) objective's direction */
    const char *metric; /* objective metric (embedded studies), borrowed; may be NULL */
    int n_obj;          /* objectives, 1 .. TUN_MAX_OBJECTIVES */
    api_objective obj[TUN_MAX_OBJECTIVES];
    int n_cons;         /* constraints, 0 .. API_MAX_CONSTRAINTS */
    api_constraint cons[API_MAX_CONSTRAINTS];
    int multi;          /* "objectives" or "constraints" given: trials carry a values
                         * vector (and metrics), /best answers the Pareto front */
    tun_space *space;  /* owned */
    json_t *space_json; /* owned: the effective space as JSON (a premade template's
                         * own space merged with the definition's "space") */
    tun_config tuner;
    int64_t max_trials;    /* tuner.max_trials: trials that may be created; 0 = unlimited */
    double max_seconds;    /* tuner.max_seconds: no new trial once this long has passed since
                            * the study was created (wall clock); 0 = none. Both kinds. */
    double lease_seconds;  /* external trials: ask -> tell deadline, renewed by report */
    int embedded;          /* has a "model": hpod trains it */
    api_embedded emb;      /* valid when embedded */
} api_study_def;

/* Validates a study definition (a JSON object); errors name the field. */
int api_study_def_parse(api_ctx *ctx, const json_t *def, api_study_def *out, hpo_error *err);
/* The same for a stored definition, without checking its model template
 * again (api_embedded_check_model): a study accepted at creation stays
 * usable when hpod restarts with a smaller --max-model-bytes (its trials
 * over the new budget fail with the reason). */
int api_study_def_load(api_ctx *ctx, const json_t *def, api_study_def *out, hpo_error *err);
void api_study_def_clear(api_study_def *d);
/* The embedded part of a definition (embedded.c). space_out gets the search
 * space to use: the study's "space" merged over a premade template's own. */
int api_embedded_parse(api_ctx *ctx, const json_t *def, api_study_def *d, json_t **space_out,
                       hpo_error *err);
void api_embedded_clear(api_embedded *e);
/* Writes the training options a reader should see with their defaults
 * into a definition about to be stored (training.tensorboard), and the id
 * of the uploaded dataset it names (dataset.id). */
void api_embedded_show(json_t *def, const api_embedded *e);
/* Premade templates (templates.c): the model of template `name` for a
 * dataset with n_classes classes and per-sample rank, and its default space
 * (new references). HPO_EINVAL naming "model.template" if unknown. */
int api_template_get(const char *name, int n_classes, int in_rank, json_t **model, json_t **space,
                     hpo_error *err);
/* Expands a model template for one trial: "repeat" blocks ({"repeat":
 * {"count": N|"$p", "layers": [...]}}) and residual blocks with "enabled":
 * false|"$p" (replaced by their layers) are resolved from params; members
 * referring to a parameter that is inactive in this trial are dropped (the
 * engine's default applies); other "$name" references are left for the
 * engine. A new reference in *out. */
int api_model_expand(const json_t *model, const json_t *params, const tun_space *space, json_t **out,
                     hpo_error *err);
/* Opens a study's dataset ("dataset" object; part "train" or "test")
 * through the engine's shared cache: a new reference in *out. */
struct eng_dataset;
int api_dataset_open(api_ctx *ctx, const json_t *spec, const char *part, struct eng_dataset **out,
                     hpo_error *err);
/* Checks at creation that the model template builds, and fits the memory
 * budget, at some point of the space (template_check.c: the points and the
 * rule); fails with the error when it fails everywhere with the same one. */
int api_embedded_check_model(api_ctx *ctx, const api_study_def *d, hpo_error *err);
/* pbt's default tuner.mutable (template_check.c): the unconditional
 * parameters, none a parent, whose values all build the template with the
 * shapes of the space's middle point (a checkpoint of one loads into the
 * other), as a bit mask over the space's order. */
uint64_t api_pbt_mutable(const api_study_def *d);

/* ---- creating a study (studies.c) ---- */
/* What a new study carries beside its definition (checked already). */
typedef struct api_study_extras {
    char *attrs;           /* user_attrs as JSON text, or NULL for {} */
    json_t *note;          /* the note (a reference held), or NULL */
    const char *note_text; /* its text */
    int load_if_exists;    /* an existing study of the name answers instead */
    int needs_slot;        /* POST /studies: an embedded study's training.device must have a slot here */
    /* called in the study's insert transaction with its id, before the
     * commit (sto_study_new.on_insert): an import's marker (imports.c) */
    int (*on_insert)(void *arg, int64_t id);
    void *on_insert_arg;
} api_study_extras;
void api_study_extras_clear(api_study_extras *x);
/* Validates def (a definition; it gets the direction, the seed and a warm
 * start's snapshot filled in), stores it as a new running study with its
 * study_created event, user_attrs and note (x, or NULL for none) and
 * *id_out its id; errors name the field. With x->load_if_exists an
 * existing study of the name is *id_out instead, *created_out 0 (may be
 * NULL). hold: the study is stored paused, so that no node starts a trial
 * of it (and no ask is answered) before the caller added its trials
 * first; the caller then makes it run (a transition to running, and
 * api_queue_set for an embedded one).
 * x->needs_slot (and not
 * load_if_exists): on a database no other hpod shares, an embedded study
 * whose training.device has no slot here is HPO_ECONFLICT naming
 * training.device, not a study that would wait for one forever. */
/* The most executions_per_trial an embedded study trains (a 400 above). */
#define API_MAX_EXECUTIONS 16
int api_study_create(api_ctx *ctx, json_t *def, int hold, const api_study_extras *x, int64_t *id_out,
                     int *created_out, hpo_error *err);
/* status with the study's JSON (as a list shows it). */
void api_reply_study(api_ctx *ctx, int status, int64_t id, api_response *resp);

/* ---- warm start (warm_start.c) ---- */
/* Checks a definition's "warm_start" against d's tuner; creating: only
 * "study_ids" may be given and each must name a study (400 naming
 * warm_start.study_ids[i]); a stored definition also holds the snapshot. */
int api_warm_start_check(api_ctx *ctx, const json_t *def, const api_study_def *d, int creating, hpo_error *err);
/* At creation: adds the snapshot to def's warm_start ("trials",
 * "trials_used", "trials_skipped"): the complete trials of the studies
 * named whose params lie in space. */
int api_warm_start_snapshot(api_ctx *ctx, json_t *def, const tun_space *space, hpo_error *err);
/* Feeds a stored definition's snapshot to a new tuner as priors. */
int api_warm_start_feed(const json_t *spec, const tun_space *space, tun_study *tuner);
/* {"study_ids", "trials_used", "trials_skipped"} of a stored definition, or
 * NULL when it has no warm_start (a new reference). */
json_t *api_warm_start_view(const json_t *spec);
/* Leaves only "study_ids" in def's warm_start (a definition as a client
 * writes it). */
void api_warm_start_strip(json_t *def);

/* ---- per-study tuner state (study_cache.c) ---- */
typedef struct api_study {
    int64_t id;
    double created;       /* the stored study's (the start of max_seconds) */
    pthread_mutex_t lock; /* guards everything below */
    json_t *spec;         /* the stored definition */
    api_study_def def;
    tun_study *tuner;
    int64_t next_number;  /* trials created so far */
    int exhausted;        /* the tuner has nothing left to suggest (grid) */
    int64_t pbt_members;  /* pbt: members sampled by the tuner (trials without lineage) */
    int64_t seq;          /* the trials changed after this seq are not folded in yet (study_sync.c) */
    int64_t synced;       /* trial rows read by api_study_sync so far (tests: it reads what changed) */
    int64_t *waiting;     /* the numbers of its enqueued trials not handed out yet, as read (api_study_note_waiting) */
    size_t n_waiting, cap_waiting;
    int refs;             /* guarded by the cache mutex */
    double used;          /* hpo_monotonic() of its latest acquire (the cache's LRU order) */
} api_study;

/* Returns the study with a reference (loading and replaying its history on
 * first use); HPO_ENOTFOUND if it does not exist. The cache keeps at most
 * API_CACHE_KEEP studies, more only while callers hold them: a load past
 * that drops the least recently used one nobody holds (a later acquire
 * replays its history again, as after a restart). */
#define API_CACHE_KEEP 256
/* The studies in the cache (/metrics: hpo_studies_in_memory). */
size_t api_cache_count(api_ctx *ctx);
int api_study_acquire(api_ctx *ctx, int64_t id, api_study **out);
void api_study_release(api_ctx *ctx, api_study *st);
/* Answers api_study_acquire's failure rc for study id: 404 (or 503) as a
 * lookup's, else 409 naming id: the study is stored but can no longer be
 * loaded (its uploaded dataset deleted, a definition this version refuses). */
void api_fail_study_acquire(api_response *resp, int rc, int64_t id);
/* Tells st's tuner how stored trial t (running in the tuner) ended: its
 * objective values and constraint violation as stored. Values the tuner
 * refuses (non-finite) make the trial failed for it: a stored trial never
 * keeps its study from loading. */
int api_tuner_finish(api_study *st, const sto_trial *t);
/* Several hpod nodes on one PostgreSQL (study_sync.c): the history is
 * replayed from storage at the first load, then kept by this node's
 * changes AND refreshed from the database's: api_study_sync folds in
 * the trials changed since st->seq (new trials, trials started, reported,
 * finished on other nodes; one indexed query, then only what changed), so
 * other nodes' running trials are pending for the samplers (the constant
 * liar across nodes) and their reports reach the pruners. It is called,
 * under st->lock, by the caller before a new trial is suggested, and
 * again under the study's row lock before it is stored
 * (api_study_new_trial), before an
 * enqueued trial is handed out, a report to a pruner or an unknown trial's
 * tell, and before the scheduler picks an embedded study's next trial.
 * Nothing on SQLite (one hpod per database). */
int api_study_sync(api_ctx *ctx, api_study *st);
/* The same, and the study's state as stored into *state (may be NULL), in
 * the same statement on PostgreSQL (sto_trials_changed); SQLite reads the
 * study's row. HPO_ENOTFOUND when the study is gone. */
int api_study_sync_state(api_ctx *ctx, api_study *st, sto_study_state *state);
/* What storage keeps of the pruner's answer to a report of trial number
 * (sto_trial_report's pruned): 0, 1, or 2 + the rung asha or hyperband said
 * stop at (st->lock held). */
int api_prune_answer(const api_study *st, int64_t number, int prune);
/* Keeps st->waiting (study_cache.c) as trial t was read (at the load, by a sync): its
 * number in the set while t is enqueued and never started, out of it
 * otherwise. Every change is read by a later sync, so on PostgreSQL an
 * empty set after a sync means no trial waits (the ask skips the query
 * for one); a number in it may be stale (handed out or cancelled
 * elsewhere, and not read yet): then the query decides. */
void api_study_note_waiting(api_study *st, const sto_trial *t);
/* Whether an ask should look for an enqueued trial in storage: always on
 * SQLite, on PostgreSQL when st->waiting (just synced) is not empty. */
int api_study_may_wait(api_ctx *ctx, const api_study *st);
/* A new running trial from the tuner (st->lock held), stored as r says
 * (its lease, slot, limits and event: sto_trial_create_with; this call
 * sets r's params, number and catch-up), the caller having synced
 * (api_study_sync): suggested for the next number, and stored at the
 * study's next number. On
 * PostgreSQL the insert catches up again under the study's row lock
 * (sto_trial_run.catch_up): the trials other nodes numbered while it
 * suggested are folded in, and the suggestion takes the number after
 * theirs, or is made again there, under the lock, when one of them holds
 * the very same point (a grid's next point; another node's suggestion for
 * the same number from the same history). So a suggestion sees every
 * trial stored before it was made, no point is handed out twice, numbers
 * stay dense, and racing asks never throw an insert away. x gets the configuration,
 * *params_out (may be NULL) a new reference to its JSON. HPO_EEXHAUSTED
 * when the tuner has nothing left (st->exhausted set) or the study has
 * r->max_trials trials (other nodes created the rest: st->next_number
 * moves to max_trials); HPO_ECONFLICT when r->parallel of its trials run. */
int api_study_new_trial(api_ctx *ctx, api_study *st, sto_trial_run *r, double *x, json_t **params_out,
                        int64_t *trial_id_out, int64_t *number_out);
/* Tells the tuner a trial's end from an outcome (its values, and the
 * constraints' values when told); refused values as api_tuner_finish. */
struct api_outcome;
int api_tuner_finish_outcome(api_study *st, int64_t number, const struct api_outcome *o);
/* Drops a study from the cache (after DELETE). */
void api_study_forget(api_ctx *ctx, int64_t id);
int api_cache_new(api_ctx *ctx);
void api_cache_free(api_ctx *ctx);

/* ---- enqueued trials (enqueued.c) ----
 * An enqueued trial is stored QUEUED, never started (started = 0), with the
 * parameters the client fixed; it holds its number (it counts toward
 * max_trials) but is not in the tuner's history until it is handed out. */
/* Hands out enqueued trial t: its parameters completed by the tuner
 * (tun_study_suggest_fixed), stored running with lease (<= 0: none), slot
 * (may be NULL) and ev (may be NULL), and added to the tuner as running;
 * *params_out (may be NULL) gets the full parameters. The study's lock is
 * held. HPO_ECONFLICT when t is no longer waiting, or (on a slot) the
 * study's parallel_trials run on the nodes. */
int api_enqueued_hand_out(api_ctx *ctx, api_study *st, const sto_trial *t, double lease, const char *slot,
                          const sto_event_in *ev, json_t **params_out);
/* The oldest enqueued trial of a study (queued, never started) into *out
 * (sto_trial_clear it); HPO_ENOTFOUND when none waits. */
int api_enqueued_next(api_ctx *ctx, int64_t study_id, sto_trial *out);

/* ---- objectives and constraints (objectives.c) ---- */
/* Reads "objective" (one: {"direction", "metric"}) or "objectives" (1 to 8
 * {"metric" (unique), "direction", "reference"}) and "constraints" (1 to 16
 * {"metric", "min" and/or "max"}) into d; errors name the field. */
int api_objectives_parse(const json_t *def, api_study_def *d, hpo_error *err);
/* With the rest of d parsed: what a study with objectives or constraints
 * may not have (an algorithm that reads one value, UCB, the median pruner
 * on several objectives, a warm start); 400s naming the field. */
int api_objectives_check(const api_study_def *d, const json_t *def, hpo_error *err);
/* A told outcome: "state" ("complete" default, "pruned", "failed"), one of
 * "value" (one objective), "values" (one number per objective) or
 * "repeats" (one-objective studies: one value per execution, their mean,
 * std and count), "metrics" (numbers by name; a complete trial of a study
 * with constraints gives each constraint's metric) and "error". */
typedef struct api_outcome {
    sto_trial_state state;
    double value, value_std;  /* value: the (first) objective's */
    int value_n;              /* executions behind value; 0: none */
    const char *error;        /* borrowed from the body */
    double values[TUN_MAX_OBJECTIVES]; /* when value_n > 0: the study's n_obj values */
    double violation;         /* the constraints' violation (0: feasible); NaN: none */
    double cons[API_MAX_CONSTRAINTS]; /* when violation is told: each constraint's value
                               * (api_constraint_values) */
    char *values_json;        /* owned: stored for a study with d->multi */
    char *metrics_json;       /* owned: the metrics told, NULL: none */
} api_outcome;
/* 0, or HPO_EINVAL with err naming the field (nothing to clear then).
 * The caller checks the keys. */
int api_parse_outcome(const api_study_def *d, const json_t *body, api_outcome *o, hpo_error *err);
void api_outcome_clear(api_outcome *o);
/* Each constraint's value from the constraint metrics cv[0 .. d->n_cons),
 * as Optuna's constraints_func gives them (met when <= 0: how far the
 * metric lies beyond a bound, negative inside) into c; returns the
 * violation, the sum of their positive parts. */
double api_constraint_values(const api_study_def *d, const double *cv, double *c);
/* A stored trial's n_obj values and violation (NaN when it told no
 * metrics), and with a violation each constraint's value into cons (may be
 * NULL; d->n_cons of them); HPO_EINVAL when its stored values do not fit
 * the study. */
int api_trial_objectives(const api_study_def *d, const sto_trial *t, double *values, double *violation,
                         double *cons);
/* The objectives' values in a metrics object (an epoch's, or an external
 * report's curve point {"<metric>": v}): NaN where one is missing; an
 * embedded study's val_X is read as X when the trial had no validation
 * split (as its learning curve is). */
void api_objective_vector(const api_study_def *d, const json_t *metrics, double *vec);
/* Its inverse: the metrics text of a reported vector, each objective's
 * component under its metric (malloc'd; NULL when out of memory). */
char *api_vector_curve(const api_study_def *d, const double *vec);
/* Whether the study's pruner is told vectors (several objectives and a
 * pruner: MO-ASHA); then each report's vector is the trial's curve point at
 * its step (execution 0 of eps, a trial's stored epochs), which
 * api_report_vector reads: without one, value for the first objective and
 * NaN for the others. */
int api_reports_vectors(const api_study_def *d);
void api_report_vector(const api_study_def *d, const sto_epoch *eps, size_t n_eps, int64_t step, double value,
                       double *vec);
/* The same of one curve point's metrics text (NULL: none). */
void api_curve_vector(const api_study_def *d, const char *curve, double value, double *vec);
/* [{"metric", "direction"}, ...] of a stored definition (a new reference);
 * whether its first objective is maximised. */
json_t *api_objectives_json(const json_t *spec);
int api_spec_maximizes(const json_t *spec);
/* An embedded study's objectives and constraints (emb_objectives.c): every
 * metric an epoch metric (loss, accuracy, mse, mae, val_ of them) or one the
 * engine supplies (params, flops, latency_ms, train_seconds), else
 * HPO_EINVAL naming objectives[i].metric (listed: the definition has
 * "objectives", else objective.metric) / constraints[i].metric; sets
 * d->emb.curve. */
int api_emb_objectives_check(api_study_def *d, int listed, hpo_error *err);
/* A finished embedded trial's outcome in a study with objectives or
 * constraints: the metrics at best_epoch and the engine's figures of the
 * model (model_tmpl expanded, params), checked as a tell (o to clear with
 * api_outcome_clear). HPO_EINVAL when an objective's metric is missing. */
int api_emb_outcome(api_ctx *ctx, const api_study_def *d, int64_t trial_id, int best_epoch, const json_t *model_tmpl,
                    const json_t *params, double seconds, api_outcome *o, hpo_error *err);
/* Whether an embedded study's trials report their objectives' vector at
 * every epoch (several objectives and a pruner: MO-ASHA). */
int api_emb_reports_vector(const api_study_def *d);
/* params, flops and latency_ms (one sample, median of 15 timed forwards)
 * of the model model_tmpl (expanded) with params makes, set in metrics. */
int api_emb_engine_figures(const api_embedded *emb, const json_t *model_tmpl, const json_t *params, json_t *metrics,
                           hpo_error *err);
/* GET /studies/{id}/best of a study with objectives or constraints: its
 * Pareto front and hypervolume (front.c). */
void api_reply_front(api_ctx *ctx, int64_t id, api_response *resp);
/* The trial ids of the study's Pareto front, in /best's order (a new
 * array; empty when it cannot be read). */
json_t *api_front_trial_ids(api_ctx *ctx, const api_study_def *d, int64_t id);
/* The study's k best complete trials, best first (*out to free with
 * sto_trial_list_free, *n of them): by the (first) objective's value, ties
 * by number; with constraints the feasible ones only (violation 0), as the
 * front holds them. */
int api_best_trials(api_ctx *ctx, const api_study_def *d, int64_t id, size_t k, sto_trial **out, size_t *n);

/* ---- trials a client brings (trials.c, trials_in.c) ---- */
/* Stores a finished trial in st and tells its tuner, as a told trial
 * (params full and valid: x its encoding); *id_out and *number_out (may be
 * NULL) get it. The study's lock is held. */
int api_trial_add(api_ctx *ctx, api_study *st, const sto_trial_in *in, const double *x, int64_t *id_out,
                  int64_t *number_out);

/* A trial's time as a document gives it: ISO 8601 (as Python's isoformat
 * writes it: "YYYY-MM-DD[T ]HH:MM:SS[.f]" with "Z", "+HH:MM" or nothing,
 * read as UTC; a real date), a number (seconds since the epoch) or null
 * (*out 0: now); from 1970 to the year 9999. Errors name field. */
int api_parse_time(const json_t *j, const char *field, double *out, hpo_error *err);
/* Reads {"<step>": value, ...} (steps integers >= 0, values numbers or
 * null) into two malloc'd arrays (NULL, 0 for NULL or null); errors name
 * field. */
int api_parse_intermediates(const json_t *obj, const char *field, int64_t **steps, double **values, size_t *n,
                            hpo_error *err);
/* Whether key is a step as intermediate_values' keys are written (an
 * integer >= 0 in digits, no leading zero), into *step. */
int api_step_key(const char *key, int64_t *step);

/* A trial's "reports" in a study document (study_io_reports.c): the
 * object of one stored report (its vector, read from eps as a replay
 * reads it, and its late / pruned / rung flags), NULL when it has nothing
 * beyond its value; and the object read back, checked against the trial's
 * intermediate values (steps, values: n of them), into arrays by step
 * index for sto_trial_in (all NULL when reports is absent). Errors name
 * field.<step>[.key]. */
typedef struct api_doc_steps {
    int *flags;    /* STO_STEP_* */
    int *rungs;    /* -1: none */
    char **curves; /* the vector's curve point (api_vector_curve); NULL: none */
} api_doc_steps;
json_t *api_doc_report(const api_study_def *d, const sto_intermediate *row, const sto_epoch *eps, size_t n_eps);
int api_doc_reports_read(const json_t *reports, const api_study_def *d, const int64_t *steps, const double *values,
                         size_t n, const char *field, api_doc_steps *out, hpo_error *err);
void api_doc_steps_free(api_doc_steps *s, size_t n);

/* Maps storage trial states to tuner states. */
tun_trial_state api_tun_state(sto_trial_state s);

/* ---- JSON of stored objects (json_map.c) ---- */
json_t *api_trial_json(const sto_trial *t, int with_intermediates, sto_db *db);
json_t *api_study_json(api_ctx *ctx, const sto_study *s, int full);

/* The first place two JSON values differ, as a field path ("space.lr.high",
 * "model.layers[1].units"; a key missing from one side counts): 1 and the
 * path in buf (cut to cap), or 0 when they are equal. Numbers compare by
 * value (1 and 1.0 are equal). json_diff.c */
int api_json_first_diff(const json_t *a, const json_t *b, char *buf, size_t cap);
/* Removes from a study definition the keys written at their default: in
 * each parameter's spec of "space" (when it parses on its own) and in
 * "tuner" and its "pruner" (not the keys other layers read, such as
 * max_trials), a key goes when the parser reads the same without it. So
 * {"log": false} posted again matches a definition stored without it.
 * def_defaults.c */
void api_def_drop_defaults(json_t *def);

/* ---- user_attrs and notes (user_attrs.c) ---- */
#define API_ATTR_KEY_MAX 256          /* bytes of a user_attrs key */
#define API_ATTRS_MAX_BYTES 65536     /* a study's or trial's user_attrs as compact JSON */
#define API_NOTE_MAX_BYTES 65536      /* a note's UTF-8 bytes */
/* how deep a user_attrs value nests: far below the JSON parser's limit
 * (2048), so an export (which puts them 4 levels deeper) reads back */
#define API_ATTR_MAX_DEPTH 64
/* patch is a JSON object with keys of 1..API_ATTR_KEY_MAX bytes whose
 * values nest at most API_ATTR_MAX_DEPTH deep; else HPO_EINVAL naming
 * "user_attrs" (or "user_attrs.<key>"). */
int api_attrs_check(const json_t *patch, hpo_error *err);
/* Merges patch (null deletes a key; other values replace) into the stored
 * object text (NULL: {}); *out the compact text (malloc'd). HPO_EINVAL as
 * api_attrs_check, HPO_ETOOLARGE (413) when the result is over
 * API_ATTRS_MAX_BYTES. */
int api_attrs_merge(const char *stored, const json_t *patch, char **out, hpo_error *err);
/* A note: a string of at most API_NOTE_MAX_BYTES (null: ""), borrowed into
 * *out; HPO_EINVAL / HPO_ETOOLARGE naming "note". */
int api_note_check(const json_t *note, const char **out, hpo_error *err);
/* Merges attrs (may be NULL) into trial t's user_attrs (atomically, in
 * storage's transaction) and sets note (NULL keeps it), with a
 * trial_updated event (the caller wakes the readers once its locks are
 * released); nothing when both are NULL. Errors name the field. */
int api_trial_annotate(api_ctx *ctx, const sto_trial *t, const json_t *attrs, const char *note, hpo_error *err);

/* ---- metrics (metrics.c) ---- */
typedef struct api_metrics api_metrics;
int api_metrics_new(api_metrics **out);
void api_metrics_free(api_metrics *m);
enum { API_OP_ASK = 0, API_OP_REPORT, API_OP_TELL, API_N_OPS };
void api_metrics_observe_op(api_ctx *ctx, int op, double seconds);
/* A job starts (+1) or ends (-1) on a worker (api_jobs_run): hpo_slots_busy. */
void api_metrics_job(api_ctx *ctx, int delta);
/* A trial epoch trained on slot (named by api_metrics_slots; others are not
 * counted), at samples_per_s. */
void api_metrics_epoch(api_ctx *ctx, const char *slot, double samples_per_s);
/* An event stream opens (+1) or ends (-1): hpo_event_streams. */
void api_metrics_stream(api_ctx *ctx, int delta);
char *api_metrics_render(api_ctx *ctx, size_t *len_out);
/* The clock trial counts are aged on (hpo_monotonic; tests set another). */
void api_metrics_set_clock(api_ctx *ctx, double (*clock)(void));

/* ---- reads of whole studies (heavy.c) ----
 * A read that may hold up to `trials` trials in memory (an export, a page
 * of trials) takes that many units first (none under API_HEAVY_FROM): 0,
 * or -1 with a 503 in resp once it waited opt.upload_wait_seconds. Release
 * the same count after the answer is made. */
#define API_HEAVY_TRIALS 50000
#define API_HEAVY_FROM 1000
int api_heavy_acquire(api_ctx *ctx, int64_t trials, api_response *resp);
void api_heavy_release(api_ctx *ctx, int64_t trials);

/* ---- the context ---- */
#define API_EVENT_BUCKETS 64
struct api_cache;
struct api_run_queue;
/* the trials whose failed epoch stores api_epoch_not_stored counts at once */
#define API_STORE_FAILURES_KEPT 16

struct api_ctx {
    sto_db *db;
    api_options opt;
    struct api_cache *cache;
    api_metrics *metrics;
    struct api_run_queue *queue; /* the embedded studies (job_queue.c) */
    struct api_deadlines *deadlines; /* external studies' max_seconds (deadlines.c) */
    struct api_node *node;           /* this hpod's node row and heartbeat (nodes.c); NULL: none */
    struct api_asked *asked;         /* trials asked here, not told yet (asked.c) */
    /* the event streams (events.c): a study's events bump the seq of its
     * bucket (study id modulo API_EVENT_BUCKETS) and wake the readers
     * waiting on that bucket's condition; event_seq (every bucket) is for
     * a wake that names no study */
    pthread_mutex_t event_mu;
    pthread_cond_t event_cond[API_EVENT_BUCKETS];
    uint64_t event_seq, event_bucket_seq[API_EVENT_BUCKETS];
    int stopping;              /* api_ctx_shutdown was called (under event_mu) */
    /* the trials whole-study reads hold now (heavy.c) */
    pthread_mutex_t heavy_mu;
    pthread_cond_t heavy_cond;
    int64_t heavy_in_use;
    /* other nodes' events (PostgreSQL): a thread waits on the watch and
     * wakes the readers (events.c); watch NULL on SQLite */
    sto_watch *watch;
    pthread_t watch_thread;
    /* the disk-full back-off (disk_full.c), under disk_mu */
    pthread_mutex_t disk_mu;
    double disk_until, disk_backoff; /* monotonic end; current length (0: none) */
    int disk_why;                    /* what started it: API_BACKOFF_* */
    /* trials whose epochs failed to be stored, how many times in a row
     * (api_epoch_not_stored), under disk_mu; trial_id 0: a free entry */
    struct {
        int64_t trial_id;
        int times;
    } store_failures[API_STORE_FAILURES_KEPT];
};

/* ---- trials asked through this node (asked.c) ----
 * An ask records its trial's study and number; the tell takes them back
 * and so needs no read of the trial before its own write (the write's
 * guard on the state answers a trial that ended meanwhile, and the tell
 * reads the trial then, for the message). A cache: a tell whose entry was
 * evicted, or asked through another node, reads the trial as before. */
typedef struct api_asked api_asked;
void api_asked_new(api_ctx *ctx);
void api_asked_free(api_ctx *ctx);
void api_asked_put(api_ctx *ctx, int64_t trial_id, int64_t study_id, int64_t number);
/* 1 and the study and number when trial_id was asked here (the entry is
 * removed), else 0. */
int api_asked_take(api_ctx *ctx, int64_t trial_id, int64_t *study_id, int64_t *number);

/* ---- events (events.c) ----
 * An event that tells of a state change (study created, paused, complete;
 * trial started, requeued, finished; an epoch recorded; model started,
 * finished) is stored by the storage call that makes the change, in its
 * transaction (sto_*_ev): both or neither are stored, so a replay from the
 * start of a stream misses none. The caller then wakes the readers with
 * api_events_wake. */
/* Stores an event of a study (data: a JSON object, stolen) and wakes the
 * readers of event streams; for progress that changes no state. Failures
 * are logged, never returned: progress reporting must not fail a trial. */
void api_event(api_ctx *ctx, int64_t study_id, int64_t trial_id, const char *type, json_t *data);
/* Wakes the readers of event streams after an event was stored: those of
 * study_id, or every one (events of several studies, or of one the caller
 * does not name). The study's own wake spares the streams of other studies
 * a read each (200 idle streams made every event cost 38x its CPU). */
void api_events_wake_study(api_ctx *ctx, int64_t study_id);
void api_events_wake(api_ctx *ctx);
/* Events stored by other hpod nodes on the same PostgreSQL database wake
 * the readers too: LISTEN/NOTIFY through a sto_watch, on a thread of its
 * own started by api_ctx_new (nothing on SQLite; without a watch
 * connection, a warning, and streams read at every keep-alive) and ended
 * by api_events_watch_stop (api_ctx_shutdown, api_ctx_free). */
int api_events_watch_start(api_ctx *ctx);
void api_events_watch_stop(api_ctx *ctx);
/* The compact JSON text of data (stolen; NULL: "{}"), malloc'd. */
char *api_event_text(json_t *data);
/* A study's queued or running trial cancelled because the study was (its
 * error "study cancelled", a trial_cancelled event as a worker's end
 * stores it) and the tuner told; the caller holds st->lock (st NULL: a
 * study that cannot be loaded, no tuner to tell). 0 or the storage error
 * (HPO_ECONFLICT: it had ended). */
int api_trial_cancel_for_study(api_ctx *ctx, api_study *st, const sto_trial *t);
/* The same with another reason (the trial's error and its event's). */
int api_trial_cancel_why(api_ctx *ctx, api_study *st, const sto_trial *t, const char *why);

/* ---- a full disk (disk_full.c) ----
 * A job that cannot store its progress because the disk is full
 * (HPO_ENOSPACE: a checkpoint, an epoch row, SQLITE_FULL) goes back to the
 * queue and resumes from its last checkpoint later, instead of failing.
 * api_disk_full starts (or doubles) a back-off, 1 s up to
 * API_DISK_BACKOFF_MAX s, during which the scheduler starts no job, so hpod
 * neither spins nor burns through a study's trials while the disk is full
 * (the jobs that find it full during a back-off are in it already: it
 * does not double for each); a recorded epoch, a completed model job or
 * the probe below (api_disk_ok) ends it. */
#define API_DISK_BACKOFF_MAX 15.0
void api_disk_full(api_ctx *ctx);
/* The same back-off for a job whose own files failed on the file system
 * (HPO_EFS: permission denied, read-only, an I/O error, a stale network
 * mount), logging why (the error's text) instead of "disk full". */
void api_files_failed(api_ctx *ctx, const char *why);
void api_disk_ok(api_ctx *ctx);
/* An epoch of trial_id could not be stored for a reason other than a full
 * disk (the database failed: a damaged page, an I/O error): the same
 * back-off, so a trial that fails this way is not restarted in a tight
 * loop, and how many times in a row it happened to this trial (the runner
 * fails the trial at API_MAX_STORE_FAILURES). api_epoch_stored, after an
 * epoch of it is stored, starts its count again. */
#define API_MAX_STORE_FAILURES 3
int api_epoch_not_stored(api_ctx *ctx, int64_t trial_id, const char *why);
void api_epoch_stored(api_ctx *ctx, int64_t trial_id);
/* Seconds left in the back-off (0: none). */
double api_disk_wait(api_ctx *ctx);
/* the free space api_disk_probe (jobs.h) takes for room again */
#define API_DISK_ROOM (16.0 * 1024 * 1024)
/* Why jobs back off now, for /metrics (hpo_disk_full, hpo_files_failing):
 * from a job's finding the disk full (or its files failing) until a job
 * stores progress again or the probe finds room (api_disk_ok), the waits
 * between tries included; the last finding's reason. */
enum {
    API_BACKOFF_NONE = 0,
    API_BACKOFF_DISK_FULL,
    API_BACKOFF_FILES_FAILED,
    API_BACKOFF_STORE_FAILED, /* an epoch the database refused: hpo_files_failing too; no probe (a file
                                 written says nothing of the database), a job's stored epoch ends it */
};
int api_disk_backoff_why(api_ctx *ctx);

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
void api_h_study_enqueue(api_ctx *, const api_request *, int64_t, api_response *);   /* trials_in.c */
void api_h_study_add_trial(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_export(api_ctx *, const api_request *, int64_t, api_response *);    /* study_io.c */
void api_h_study_import(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_copy(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_trial_get(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_trial_report(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_trial_tell(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_pause(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_resume(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_cancel(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_events(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_refits_create(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_refits_list(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_models_list(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_ensembles_create(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_ensembles_list(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_trial_model_create(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_model_get(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_model_weights(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_model_predict(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_patch(api_ctx *, const api_request *, int64_t, api_response *); /* user_attrs.c */
void api_h_trial_patch(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_study_importance(api_ctx *, const api_request *, int64_t, api_response *); /* importance.c */
void api_h_nodes_list(api_ctx *, const api_request *, int64_t, api_response *);       /* nodes.c */
void api_h_static_index(api_ctx *, const api_request *, int64_t, api_response *);     /* static.c */
void api_h_static_asset(api_ctx *, const api_request *, int64_t, api_response *);

/* ---- datasets (datasets.c) ---- */
void api_h_dataset_create(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_dataset_list(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_dataset_get(api_ctx *, const api_request *, int64_t, api_response *);
void api_h_dataset_delete(api_ctx *, const api_request *, int64_t, api_response *);
/* The JSON of an uploaded dataset (its meta merged in; "builtin": false). */
json_t *api_dataset_json(const sto_dataset *d);
/* Resolves a study's "dataset" object ({"name": "fashion-mnist"}, {"name":
 * "<uploaded>"} or {"id": N}; both: they must agree) into an engine data
 * source for eng_dataset_cache_get_source(). part: NULL or "train" (the
 * whole uploaded dataset; the study splits it) or "test" (builtins only:
 * an uploaded dataset has none, HPO_ENOTFOUND). An unknown name or id is
 * HPO_EINVAL naming "dataset.name" / "dataset.id" (it is a bad study
 * definition). Ownership: on success every string of *src (name, paths,
 * label_column) lives in ONE malloc'd block returned in *owned: free(*owned)
 * once the source is no longer needed (the cache copies what it keeps);
 * src->part is the caller's part (or the literal "train"). Nothing is
 * written on failure. Paths are <data_dir>/datasets/<id>-<name>/<file>. */
struct eng_data_source;
int api_dataset_source(api_ctx *ctx, const json_t *spec, const char *part,
                       struct eng_data_source *src, char **owned, hpo_error *err);
/* The id of the uploaded dataset a "dataset" object names ({"id": N} as
 * given, {"name": ...} looked up), 0 for a builtin one: what a study or
 * model insert holds (sto_study_new.dataset_id). HPO_ENOTFOUND if no
 * dataset has that name (any more). */
int api_dataset_id(api_ctx *ctx, const json_t *spec, int64_t *id_out);

#endif
