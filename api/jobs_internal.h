/*
 * jobs_internal.h - what the job layer's files share behind jobs.h (the
 * layer's design note, files and lock order are there): the run queue the
 * handlers keep up to date, a study's budget and its end (shared by the
 * scheduler's settling of embedded studies and the ask/tell handlers of
 * external ones), the deadlines of external studies, the two runners, and
 * the setup they share with the template checks and the model handlers.
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
 * releasing their locks; the changes made through other nodes come with
 * api_queue_sync on the scheduler's tick. */
/* Loads it from storage (once, at start), and the deadlines of the external
 * studies that are running or paused (api_deadlines_new first). */
int api_queue_new(api_ctx *ctx);
void api_queue_free(api_ctx *ctx);
/* Adds or updates a study (sto_study_state). */
void api_queue_set(api_ctx *ctx, int64_t study_id, int state);
void api_queue_remove(api_ctx *ctx, int64_t study_id);
/* Whether the study is in the queue (an embedded one, not deleted). */
int api_queue_has(api_ctx *ctx, int64_t study_id);
/* A running study that could not be loaded is not loaded again by the
 * scheduler's passes before until (api_queue_held says so), or before its
 * state changes: a load that fails may parse a definition and decode a
 * dataset first, and logs why, every pass otherwise. */
void api_queue_hold(api_ctx *ctx, int64_t study_id, double until);
int api_queue_held(api_ctx *ctx, int64_t study_id, double now);
/* The ids of the queued studies whose state is in mask (1 << state),
 * oldest first; *ids malloc'd (NULL when none). */
size_t api_queue_list(api_ctx *ctx, unsigned mask, int64_t **ids);
/* Learns of the studies created, or whose state changed, through other
 * nodes (or through this one: the same again) since the last call, from
 * storage's study change counter (sto_studies_changed): embedded ones go
 * into the queue, external ones with a max_seconds into the deadlines. A
 * study deleted elsewhere leaves when the scheduler finds it gone. The
 * scheduler thread. */
void api_queue_sync(api_ctx *ctx);
/* Wakes the scheduler (something changed: a study, a model job queued). */
void api_jobs_wake(api_ctx *ctx);
#define API_STATE_BIT(s) (1u << (s))

/* ---- a study's budget and its end (budget.c) ----
 * A study's budget is spent once tuner.max_trials trials were created,
 * tuner.max_seconds have passed since it was created, or its tuner has
 * nothing left (a grid with every point held by a trial). It then gets no
 * new trial; once none of its trials runs or waits in the queue it is
 * complete, with a study_complete event ({"complete", "pruned", "failed",
 * "cancelled": the trial counts, "reason": the budget's field}) in the same
 * transaction. Embedded studies are settled by the scheduler's pass
 * (api_jobs_settle); external ones at the moments that can end them, all
 * under the study's lock: a tell, a lease expiry (leases.c), an ask refused
 * for the budget, a resume, and their max_seconds deadline (deadlines.c). */
/* The field of the spent budget ("tuner.max_trials", "tuner.max_seconds",
 * "space"), or NULL while the study may start a trial. now: wall clock.
 * probe: ask a grid tuner whether a point is left (a suggestion's cost;
 * otherwise only a suggestion that failed tells, st->exhausted). The
 * study's lock is held. */
const char *api_budget_spent(api_study *st, double now, int probe);
/* Whether the study's max_seconds has passed at now (wall clock). An
 * external study's enqueued trials still waiting then are cancelled when
 * it ends (api_external_end), and an ask hands none out. */
int api_deadline_passed(const api_study *st, double now);
/* Stores the study complete with its study_complete event (counts: the
 * trials by state; reason: the budget's field), from running only
 * (HPO_ECONFLICT, nothing stored, when another node ended or paused it
 * first: one final event), and updates the run queue of an embedded
 * study. The study's lock is held; the caller wakes the event readers
 * (api_events_wake) once it is released. */
int api_study_complete(api_ctx *ctx, api_study *st, const char *reason, const int64_t counts[STO_TRIAL_N_STATES]);
/* Ends an external study that is running, whose budget is spent at now
 * (the grid probed) and with no trial running: 1 when it completed it, 0
 * when not (an embedded study: 0), or a negative code. The study's lock is
 * held; the caller wakes the event readers after releasing it. */
int api_external_end(api_ctx *ctx, api_study *st, double now);

/* ---- max_seconds deadlines of external studies (deadlines.c) ----
 * A min-heap of (deadline, study id) holding the external studies with a
 * tuner.max_seconds that may still end: added when one is created, loaded
 * with the run queue at start (api_queue_new). The scheduler's lease pass
 * (api_expire_leases) takes the due ones and ends those with no trial out
 * (api_external_end); one with trials out ends at their tell or lease
 * expiry, a paused one when resumed. A tick costs a look at the heap's top,
 * whatever the number of external studies. A deleted study's entry is
 * dropped when due. Its mutex is a leaf of the lock order. */
int api_deadlines_new(api_ctx *ctx);
void api_deadlines_free(api_ctx *ctx);
/* Adds a study's deadline unless it has one already. */
void api_deadline_add(api_ctx *ctx, int64_t study_id, double at);
/* Removes the entries due at now (at <= now); their study ids in *ids
 * (malloc'd; NULL when none), returns how many. */
size_t api_deadlines_due(api_ctx *ctx, double now, int64_t **ids);

/* ---- nodes (nodes.c) ----
 * Ends the nodes found dead (at_start: this data dir's earlier runs, and
 * on SQLite every other node) and reclaims the jobs they left running:
 * trials queued again (or failed in a crash loop), model jobs queued
 * again; at start also those of no node (a schema before nodes). Returns
 * how many were queued again. The scheduler thread. */
int api_nodes_reclaim(api_ctx *ctx, int at_start);

/* ---- the runners (job_trial.c, job_model.c) ---- */
int api_run_trial(api_ctx *ctx, const api_job *job, const char *slot, int threads, const atomic_int *stop);
int api_run_model(api_ctx *ctx, int64_t model_id, const char *slot, int threads, const atomic_int *stop);

/* ---- population-based training (pbt.c; the schedule is there) ---- */
/* Whether epoch is a perturbation boundary of a pbt study (a multiple of
 * the interval below max_epochs); 0 for other studies. */
int api_pbt_boundary(const api_study *st, int64_t epoch);
/* The member to start next (trial_id 0: a new one from the tuner, while
 * the first population is not complete and may_add), after ranking it at
 * its boundary and maybe replacing it by a bred trial; HPO_ENOTFOUND when
 * none may run now. The scheduler thread, the study's lock held. */
typedef struct api_pbt_pick {
    int64_t trial_id, number;
    double trained; /* its train_seconds so far (trial_timeout counts them); 0 for a bred one */
} api_pbt_pick;
int api_pbt_next(api_ctx *ctx, api_study *st, int may_add, api_pbt_pick *pick);
/* A worker, before it trains member t of a pbt study (nothing for other
 * studies): a bred trial's checkpoint linked from its parent if missing
 * (an error fails the trial; a full disk or a failing file system,
 * HPO_ENOSPACE or HPO_EFS, queues it again), and the checkpoint at the boundary it goes
 * on from kept as pbt-<epoch>.safetensors. */
int api_pbt_prepare(api_ctx *ctx, const api_study *st, const sto_trial *t, hpo_error *err);
/* The keep_from of api_dir_prune_checkpoints for the study: INT64_MAX
 * unless a live member may still copy an ended member's checkpoint. */
int64_t api_pbt_keep_from(api_ctx *ctx, const api_study *st);

/* ---- training setup (job_setup.c) ---- */
/* Mixes two numbers into a seed (the seed of a trial's execution, a refit). */
uint64_t api_seed_mix(uint64_t a, uint64_t b);
/* The training options of an embedded study's trials on threads threads:
 * its training block, the best weights kept, resumed from checkpoints, the
 * memory budget of --max-model-bytes. The caller sets the seed, the
 * checkpoint files and the callback. */
void api_trial_train_opts(api_ctx *ctx, const api_embedded *emb, int threads, struct eng_train_opts *o);
/* A training job on `slot`: a CUDA slot ("cuda:G/K") trains on its GPU,
 * one spanning GPUs ("cuda:G+H/K") on a data-parallel replica per GPU,
 * when the study's training.device lets it (a trial's and a refit's always
 * do: api_jobs_next; only where another node claimed the refit checked
 * first can a slot its study refuses get one, and it trains on the CPU). */
void api_slot_train_opts(const char *slot, const api_embedded *emb, struct eng_train_opts *o);
/* The training and validation splits of an embedded study's dataset. */
int api_open_splits(api_ctx *ctx, const api_embedded *emb, struct eng_split *train, struct eng_split *val,
                    hpo_error *err);
/* The study's test split (the dataset's "test" part); HPO_ENOTFOUND when
 * the dataset has none (uploaded datasets). */
int api_open_test(api_ctx *ctx, const api_embedded *emb, struct eng_split *test, hpo_error *err);

/* ---- TensorBoard runs (job_tb.c) ----
 * training.tensorboard: each execution of a trial and each refit writes its
 * epochs' scalars (engine/tb_events.h) into its run folder of the study's
 * logdir (data_dir.h). The file is made at the run's first epoch (a run
 * that trains no epoch leaves none; a resumed run starts a new file in the
 * same folder). A folder or file that cannot be made or written is logged
 * once and ends the writing for the rest of the job; it never fails it. */
struct eng_tb_writer;
struct eng_epoch_report;
typedef struct api_tb_run {
    const char *root;
    char what[40];              /* "trial 12", "model 3": for the log */
    int classify;               /* the study's dataset has classes */
    int off;                    /* not enabled, or a write failed */
    char dir[API_PATH_MAX];     /* the current run folder ("" none) */
    struct eng_tb_writer *w;    /* opened at the run's first epoch */
} api_tb_run;
/* what is copied; off unless the study has training.tensorboard. */
void api_tb_run_init(api_tb_run *t, api_ctx *ctx, const api_study *st, const char *what);
/* Makes dir (a data_dir.h run folder) the run that epochs go to next. */
void api_tb_run_select(api_tb_run *t, const char *dir);
void api_tb_run_epoch(api_tb_run *t, const struct eng_epoch_report *r);
void api_tb_run_clear(api_tb_run *t);

/* ---- trained weights (members.c) ---- */
/* A trial's params and expanded model template (new references; *t filled). */
int api_trial_template(api_ctx *ctx, const api_study *st, int64_t trial_id, sto_trial *t, json_t **params,
                       json_t **model, hpo_error *err);
/* A trial's search-phase model: its first execution's best-epoch weights. */
int api_trial_model(api_ctx *ctx, const api_study *st, int64_t trial_id, struct eng_model **out, hpo_error *err);
/* The trials of a study whose search-phase checkpoint a model still needs
 * (api_trial_model): those of trial models and ensembles not run yet (an
 * ensemble predicts the validation split with every member's search-phase
 * model), and the members of complete ensembles that have no weights of
 * their own (predict loads them from the checkpoint). *ids malloc'd (may
 * hold one id twice); the count. The checkpoint pruning keeps them. */
size_t api_trials_in_use(api_ctx *ctx, int64_t study_id, int64_t **ids);

/* ---- an import in progress (imports.c) ----
 * begin: its marker made in the (paused) study's insert transaction; end: removed once
 * it runs, or the failed import deleted it. recover (at start): the studies
 * this data dir's node was importing when it stopped, still paused, are
 * deleted with their markers. */
int api_import_begin(api_ctx *ctx, int64_t study_id, hpo_error *err);
void api_import_end(api_ctx *ctx, int64_t study_id);
void api_imports_recover(api_ctx *ctx);
/* The model an ensemble member ({"model_id"} or {"trial_id"}) predicts the
 * test split (and requests) with; *trial_id gets its origin trial. */
int api_member_model(api_ctx *ctx, const api_study *st, const json_t *member, struct eng_model **out,
                     int64_t *trial_id, hpo_error *err);

#endif
