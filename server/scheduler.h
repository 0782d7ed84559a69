/*
 * scheduler.h - the scheduler thread: one libuv loop that runs embedded
 * studies on the worker pool, expires the leases of external trials, and
 * turns SIGINT/SIGTERM/SIGHUP into a graceful shutdown.
 *
 * Design notes
 * - The loop wakes on three things: a uv_async (a worker finished a job,
 *   or the job layer reports a study created, paused, resumed, cancelled or
 *   deleted, or a model job queued: api_jobs_set_wakeup), a
 *   one-second uv_timer (leases, per-trial timeouts, and a safety net), and
 *   the signals. Each wake-up runs one pass: stop the jobs whose study or
 *   timeout asks it, queue again the jobs stored as running that no slot
 *   runs (api_jobs_reap: a worker could not store their outcome on a full
 *   disk), settle finished studies, then fill every idle slot with the next
 *   job (api_jobs_next: model jobs, queued trials, then new ones).
 * - The job layer (api/jobs.h) owns the studies, the run queue and the
 *   choice of what runs next; the scheduler owns the slots and the clock.
 *   It never blocks: jobs run on worker threads. A pass costs the same
 *   however many external studies there are (tests/unit/api/test_tick_cost).
 * - At start, trials that were running when hpod died are queued again
 *   (api_jobs_recover) and resume from their last epoch checkpoint.
 * - Several nodes on one database: every tick first looks at the other
 *   nodes (api_nodes_tick): the jobs of a node found dead go back to the
 *   queue, and the studies other nodes created or changed join the run
 *   queue, so the pass that follows may start them here.
 * - srv_scheduler_run runs the loop on the calling thread (hpod's main
 *   thread) until a signal or srv_scheduler_stop (any thread).
 */
#ifndef HPO_SERVER_SCHEDULER_H
#define HPO_SERVER_SCHEDULER_H

#include "jobs.h"
#include "workers.h"

typedef struct srv_scheduler srv_scheduler;

/* slots: the worker slots (copied). */
int srv_scheduler_new(api_ctx *api, const srv_slot *slots, int n_slots, srv_scheduler **out);
/* Stops the running trials (they are requeued), joins the workers, frees. */
void srv_scheduler_free(srv_scheduler *s);
/* Runs until SIGINT/SIGTERM/SIGHUP or srv_scheduler_stop; returns the signal
 * number that stopped it, or 0. */
int srv_scheduler_run(srv_scheduler *s);
void srv_scheduler_stop(srv_scheduler *s);

#endif
