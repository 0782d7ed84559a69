/*
 * jobs_internal.h - what the job layer's files share behind jobs.h (the
 * layer's design note, files and lock order are there): the run queue the
 * handlers keep up to date, the two runners, and the setup they share with
 * the template checks and the model handlers.
 */
#ifndef HPO_API_JOBS_INTERNAL_H
#define HPO_API_JOBS_INTERNAL_H

#include "api_internal.h"
#include "data_dir.h"
#include "jobs.h"

struct eng_model;
struct eng_split;
struct eng_train_opts;

/* ---- the run queue (job_queue.c) ----
 * The embedded studies with their state, oldest first. A study that is not
 * embedded is never in it. The calls that change a study's state update it
 * under the study's lock once storage did, then call api_jobs_wake after
 * releasing their locks. */
int api_queue_new(api_ctx *ctx);   /* loads it from storage (once, at start) */
void api_queue_free(api_ctx *ctx);
/* Adds or updates a study (sto_study_state). */
void api_queue_set(api_ctx *ctx, int64_t study_id, int state);
void api_queue_remove(api_ctx *ctx, int64_t study_id);
/* The ids of the queued studies whose state is in mask (1 << state),
 * oldest first; *ids malloc'd (NULL when none). */
size_t api_queue_list(api_ctx *ctx, unsigned mask, int64_t **ids);
/* Wakes the scheduler (something changed: a study, a model job queued). */
void api_jobs_wake(api_ctx *ctx);
#define API_STATE_BIT(s) (1u << (s))

/* ---- the runners (job_trial.c, job_model.c) ---- */
int api_run_trial(api_ctx *ctx, const api_job *job, const char *slot, int threads, const atomic_int *stop);
int api_run_model(api_ctx *ctx, int64_t model_id, const char *slot, int threads, const atomic_int *stop);

/* ---- training setup (job_setup.c) ---- */
/* Mixes two numbers into a seed (the seed of a trial's execution, a refit). */
uint64_t api_seed_mix(uint64_t a, uint64_t b);
/* The training options of an embedded study's trials on threads threads:
 * its training block, the best weights kept, resumed from checkpoints, the
 * memory budget of --max-model-bytes. The caller sets the seed, the
 * checkpoint files and the callback. */
void api_trial_train_opts(api_ctx *ctx, const api_embedded *emb, int threads, struct eng_train_opts *o);
/* The training and validation splits of an embedded study's dataset. */
int api_open_splits(api_ctx *ctx, const api_embedded *emb, struct eng_split *train, struct eng_split *val,
                    hpo_error *err);
/* The study's test split (the dataset's "test" part); HPO_ENOTFOUND when
 * the dataset has none (uploaded datasets). */
int api_open_test(api_ctx *ctx, const api_embedded *emb, struct eng_split *test, hpo_error *err);

/* ---- trained weights (members.c) ---- */
/* A trial's params and expanded model template (new references; *t filled). */
int api_trial_template(api_ctx *ctx, const api_study *st, int64_t trial_id, sto_trial *t, json_t **params,
                       json_t **model, hpo_error *err);
/* A trial's search-phase model: its first execution's best-epoch weights. */
int api_trial_model(api_ctx *ctx, const api_study *st, int64_t trial_id, struct eng_model **out, hpo_error *err);
/* The model an ensemble member ({"model_id"} or {"trial_id"}) predicts the
 * test split (and requests) with; *trial_id gets its origin trial. */
int api_member_model(api_ctx *ctx, const api_study *st, const json_t *member, struct eng_model **out,
                     int64_t *trial_id, hpo_error *err);

#endif
