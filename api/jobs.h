/*
 * jobs.h - the job layer: the work hpod does itself on its worker slots
 * (training the trials of embedded studies; refits, trial models and
 * ensembles), as seen by the scheduler thread (server/scheduler.c) and the
 * worker threads (server/workers.c). The REST side is api.h.
 *
 * Design notes
 * - Files, and the one way they call: job_sched.c (what runs next, stop
 *   reasons, settling, reaping, recovery) -> job_trial.c (a trial) and
 *   job_model.c (a model job) -> job_setup.c (training options, splits,
 *   seeds), members.c (a trial's or a model's trained weights), job_tb.c
 *   (TensorBoard runs), data_dir.c (every path and file), job_queue.c (the run queue), study_cache.c (the
 *   tuner state), events.c, pbt.c (population-based training: which
 *   member runs next, rankings at boundaries, bred trials); budget.c (a study's budget and its end, shared
 *   with the ask/tell handlers); nodes.c (this hpod as a node of its
 *   database: its heartbeat, the jobs of dead nodes, recovery) ->
 *   job_queue.c (the studies other nodes changed). Handlers (studies.c, control.c, models.c,
 *   trials.c) call into job_queue.c, budget.c and deadlines.c only, never
 *   into the runners.
 * - The run queue (job_queue.c) is the set of embedded studies, oldest
 *   first, with their state: loaded once at start, then kept by the calls
 *   that change a study (create, pause, resume, cancel, complete, delete),
 *   and every tick by the changes other nodes made (api_queue_sync).
 *   The scheduler's pass reads it instead of scanning every stored study,
 *   so external (ask/tell) studies cost a tick nothing: they end at their
 *   own moments (a tell, a lease expiry, a refused ask, a resume), and
 *   those with a max_seconds at their deadline, kept in a heap
 *   (deadlines.c) whose top is all a tick looks at.
 * - Life cycle of a trial job: api_jobs_next creates it from the tuner (or
 *   takes a queued one) and marks it running on a slot (trial_started or
 *   trial_resumed event) -> a worker runs it (api_jobs_run) -> it ends
 *   complete, pruned, failed (a failure is data) or cancelled; or goes back
 *   to queued (the study paused, hpod shutting down, the disk full or its
 *   own files failing on the file system: HPO_EFS) and
 *   resumes from its last epoch checkpoint. A job that could not store its
 *   end stays running in storage: api_jobs_reap queues it again once no
 *   slot runs it. At start, jobs left running by a dead hpod are queued
 *   again (api_jobs_recover), or failed after API_MAX_CRASHES deaths in a
 *   row while training them (data_dir.h); with several nodes on one
 *   database, only those of this data dir's earlier runs, and those of the
 *   nodes found dead, at start and on every tick (nodes.c, below). A model job (refit, trial model,
 *   ensemble) is queued by its handler, started before any trial, and ends
 *   complete or failed; a shutdown, a full disk or a file-system error of
 *   its files queues it again.
 * - Threads: the scheduler thread alone calls recover, next, reap, settle,
 *   stop_reason and expire_leases, and alone starts jobs; a worker thread
 *   runs one job at a time (api_jobs_run) and reads its stop flag between
 *   epochs; HTTP threads change studies and wake the scheduler
 *   (api_jobs_wake, through the run queue).
 * - Lock order: the study cache's mutex -> a study's mutex -> storage's
 *   connection mutex (storage/db_internal.h) -> the leaves: the run queue's
 *   mutex, the deadlines', the disk-full back-off's, the node's (nodes.c:
 *   its name, the heartbeat's stop), the events' (event_mu: readers are
 *   woken after every other lock is released). The heartbeat thread uses a
 *   connection of its own and takes no other lock. Events are stored in the
 *   storage call's own transaction. No lock is held while a job trains; the
 *   study's mutex is taken once per epoch to tell the pruner.
 */
#ifndef HPO_API_JOBS_H
#define HPO_API_JOBS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hpo.h"

typedef struct api_ctx api_ctx;

enum { API_JOB_TRIAL = 0, API_JOB_MODEL = 1 };
typedef struct api_job {
    int kind;           /* API_JOB_TRIAL: train a trial; API_JOB_MODEL: a refit, a model from a trial, an ensemble */
    int64_t trial_id, study_id, number;
    int64_t model_id;   /* API_JOB_MODEL */
    int resumed;        /* the trial ran before (paused, or hpod restarted) */
    double timeout;     /* seconds the trial may train in all its runs (trial_timeout); 0 = no limit */
    double trained;     /* seconds its earlier runs trained (a resumed trial's train_seconds) */
} api_job;

/* Why a running job must stop, in *stop of api_jobs_run. LOST: the job
 * runs on another node now (this one was found dead): it stores nothing. */
enum { API_STOP_NONE = 0, API_STOP_PAUSE, API_STOP_CANCEL, API_STOP_TIMEOUT, API_STOP_SHUTDOWN, API_STOP_LOST };

/* Start-up: running jobs of the dead process go back to the queue (or fail
 * when they keep taking hpod down, see above); returns how many were
 * queued again. */
int api_jobs_recover(api_ctx *ctx);
/* The next job for a free slot: a queued model job (asked for explicitly,
 * so first), else a queued trial (resumed from its checkpoint), else a new
 * trial from the tuner of a running embedded study within its budget and
 * its parallel_trials. 0 and *job (now stored as running on slot), or
 * HPO_ENOTFOUND when there is nothing to run, or during a disk-full
 * back-off (api_internal.h). */
int api_jobs_next(api_ctx *ctx, const char *slot, api_job *job);
/* Runs a job on the calling worker thread until it ends or *stop becomes
 * nonzero (checked between epochs). A trial: PAUSE and SHUTDOWN queue it
 * again (its checkpoint stays), CANCEL cancels it, TIMEOUT fails it. A
 * model job stopped by SHUTDOWN runs again at the next start. A full disk
 * (HPO_ENOSPACE) queues the job again and starts the back-off; a job whose
 * study was deleted stores nothing and removes its files. Returns 0, or the
 * error that kept the job from starting (its study or trial is gone); an
 * outcome that cannot be stored is logged and left to api_jobs_reap. */
int api_jobs_run(api_ctx *ctx, const api_job *job, const char *slot, int threads, const atomic_int *stop);
/* The stop reason the study's state asks of a running job (a paused,
 * cancelled or deleted study), or API_STOP_NONE. Model jobs stop only when
 * their study is deleted. */
int api_jobs_stop_reason(api_ctx *ctx, const api_job *job);
/* Queues again every job stored as running that none of the busy jobs
 * runs: its worker ended without storing its outcome (the disk was full).
 * Nothing during a disk-full back-off. Returns how many. */
int api_jobs_reap(api_ctx *ctx, const api_job *busy, size_t n_busy);
/* Once the wait of a disk-full (or failing-files) back-off has passed, the
 * scheduler asks the file system itself, each pass, without taking the
 * room a job or a client needs: after a full disk, whether 16 MiB are
 * free (statvfs); after failing files, whether a 4 KiB file can be
 * written, synced and removed under <root>/checkpoints. Yes: the back-off
 * ends (and /metrics' hpo_disk_full with it), though no job is waiting to
 * show it. No: nothing changes (jobs try again as before, and one that
 * stores progress ends it). Nothing outside a back-off, nor in one that an
 * epoch the database refused started (a file says nothing of it). */
void api_disk_probe(api_ctx *ctx);
/* Completes embedded studies whose budget is spent and whose trials have
 * all ended (study_complete event); cancels the queued trials of cancelled
 * studies. */
void api_jobs_settle(api_ctx *ctx);
/* fn(arg) is called (from any thread) when the scheduler has something to
 * look at: a study created, paused, resumed, cancelled or deleted, a model
 * job queued. NULL: none. */
void api_jobs_set_wakeup(api_ctx *ctx, void (*fn)(void *arg), void *arg);
/* ---- this hpod as a node of its database (nodes.c) ----
 * Several hpod processes (nodes) may share one PostgreSQL database; each
 * registers a row at start (storage.h: nodes), beats every second or so
 * from a thread of its own, and ends its row when it stops. A node whose
 * heartbeat is older than the timeout is dead: the first node that looks
 * (every tick) ends its row and queues its running trials again (to
 * resume from their checkpoints on any node: the artifacts dir is shared)
 * and its model jobs, each exactly once. A node found dead that still
 * runs (a stall) learns it at its next beat: its jobs stop without storing
 * anything and it registers again. On SQLite (one node) there is no
 * heartbeat thread: its tick beats, and its start ends every earlier node. */
#define API_NODE_TIMEOUT 10.0
typedef struct api_node_options {
    const char *ident; /* names the node's data dir across its runs (data_dir.h: api_dir_node_ident) */
    const char *name;  /* shown in GET /api/v1/nodes (host:port) */
    double timeout;    /* seconds without a heartbeat after which a node is dead (<= 0: API_NODE_TIMEOUT) */
} api_node_options;
/* Registers this node (before api_jobs_recover, which ends its earlier
 * runs) and starts its heartbeat on a shared database. */
int api_node_start(api_ctx *ctx, const api_node_options *o);
void api_node_rename(api_ctx *ctx, const char *name);
/* After the workers stopped: the heartbeat ends, and the node's row. */
void api_node_stop(api_ctx *ctx);
/* The scheduler's tick: rejoin if this node was found dead, end the nodes
 * found dead and reclaim their jobs, learn of the studies other nodes
 * created or changed (api_queue_sync). Returns how many jobs were queued
 * again. */
int api_nodes_tick(api_ctx *ctx);
/* This node's id (0: none started). */
int64_t api_node_id(api_ctx *ctx);
/* This data dir's node ident (NULL: no node started). */
const char *api_node_ident(api_ctx *ctx);

/* Fails the external trials whose lease expired (leases.c, see api.h), and
 * completes the external studies whose budget that spent, or whose
 * max_seconds deadline passed, with no trial out (jobs_internal.h);
 * returns how many trials failed, or a negative code. */
int api_expire_leases(api_ctx *ctx, double now);

#endif
