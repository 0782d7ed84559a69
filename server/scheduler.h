/*
 * scheduler.h - the scheduler thread: one libuv loop that runs embedded
 * studies on the worker pool, expires the leases of external trials, and
 * turns SIGINT/SIGTERM into a graceful shutdown.
 *
 * Design notes
 * - The loop wakes on three things: a uv_async (a worker finished a trial,
 *   or the api reports a study created, paused, resumed or cancelled), a
 *   one-second uv_timer (leases, per-trial timeouts, and a safety net), and
 *   the signals. Each wake-up runs one pass: stop the jobs whose study or
 *   timeout asks it, queue again the jobs stored as running that no slot
 *   runs (api_jobs_reap: a worker could not store their outcome on a full
 *   disk), settle finished studies, then fill every idle slot with the next
 *   trial (api_jobs_next: queued trials first, then new ones).
 * - The api owns the studies and their tuner state; the scheduler owns the
 *   slots and the clock. It never blocks: trials run on worker threads.
 * - At start, trials that were running when hpod died are queued again
 *   (api_jobs_recover) and resume from their last epoch checkpoint.
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
/* Runs until SIGINT/SIGTERM or srv_scheduler_stop; returns the signal
 * number that stopped it, or 0. */
int srv_scheduler_run(srv_scheduler *s);
void srv_scheduler_stop(srv_scheduler *s);

#endif
