/*
 * scheduler.h - the scheduler thread: one libuv loop that owns timed and
 * asynchronous work of hpod. Today it expires the leases of external trials
 * every second and turns SIGINT/SIGTERM into a graceful shutdown; the
 * embedded-studies work adds the worker pool, trial assignment and
 * per-trial timeouts to the same loop.
 *
 * Design notes
 * - srv_scheduler_run runs the loop on the calling thread (hpod's main
 *   thread) until a signal or srv_scheduler_stop; it never blocks on I/O
 *   other than through libuv.
 * - srv_scheduler_stop may be called from any thread (uv_async).
 */
#ifndef HPO_SERVER_SCHEDULER_H
#define HPO_SERVER_SCHEDULER_H

#include "api.h"

typedef struct srv_scheduler srv_scheduler;

int srv_scheduler_new(api_ctx *api, srv_scheduler **out);
void srv_scheduler_free(srv_scheduler *s);
/* Runs until SIGINT/SIGTERM or srv_scheduler_stop; returns the signal
 * number that stopped it, or 0. */
int srv_scheduler_run(srv_scheduler *s);
void srv_scheduler_stop(srv_scheduler *s);

#endif
