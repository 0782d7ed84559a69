/* scheduler.c - the libuv loop of hpod (see scheduler.h). */
#include "scheduler.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

struct srv_scheduler {
    uv_loop_t loop;
    uv_timer_t tick;
    uv_signal_t signals[3]; /* STOP_SIGNALS */
    uv_async_t wake, stop;
    api_ctx *api;
    srv_workers *workers;
    int stopped_by;
    int stopping;
};

/* One pass: stop what must stop, queue again jobs left running without a
 * worker, settle studies, fill idle slots. */
static void schedule(srv_scheduler *s) {
    if (s->stopping) return;
    double now = hpo_monotonic();
    int n = srv_workers_count(s->workers);
    api_job *busy = hpo_xcalloc((size_t)n + 1, sizeof *busy);
    size_t n_busy = 0;
    for (int i = 0; i < n; i++) {
        api_job job;
        double started;
        if (!srv_workers_job(s->workers, i, &job, &started)) continue;
        busy[n_busy++] = job;
        int reason = api_jobs_stop_reason(s->api, &job);
        if (reason == API_STOP_NONE && job.timeout > 0 && job.trained + (now - started) > job.timeout)
            reason = API_STOP_TIMEOUT;
        if (reason != API_STOP_NONE) srv_workers_stop(s->workers, i, reason);
    }
    api_disk_probe(s->api); /* a back-off whose wait passed: is there room again? */
    /* only this thread starts jobs: a running trial no slot runs is orphaned */
    api_jobs_reap(s->api, busy, n_busy);
    free(busy);
    api_jobs_settle(s->api);
    /* every idle slot in turn, the GPU ones first: a study that trains on
     * one kind of device (training.device) has no job for a slot of the
     * other kind, and the slots after that one still get theirs. Once a
     * kind's slot found nothing, its other slots would not either (what a
     * slot may run depends on its kind alone: api_device_fits) */
    int nothing_for[2] = {0, 0}; /* [is a cuda slot] */
    for (int pass = 0; pass < 2; pass++) /* the GPU slots first: a study of any device trains there */
        for (int slot = 0; (slot = srv_workers_idle(s->workers, slot)) >= 0; slot++) {
            const char *name = srv_workers_slot_name(s->workers, slot);
            int cuda = strncmp(name, "cuda:", 5) == 0;
            api_job job;
            if (cuda != (pass == 0) || nothing_for[cuda]) continue;
            if (api_jobs_next(s->api, name, &job)) {
                nothing_for[cuda] = 1;
                continue;
            }
            if (job.kind == API_JOB_MODEL)
                HPO_INFO("model %lld (study %lld) starts on %s", (long long)job.model_id, (long long)job.study_id,
                         name);
            else
                HPO_INFO("trial %lld (study %lld #%lld) %s on %s", (long long)job.trial_id, (long long)job.study_id,
                         (long long)job.number, job.resumed ? "resumes" : "starts", name);
            srv_workers_dispatch(s->workers, slot, &job);
        }
}

static void on_tick(uv_timer_t *t) {
    srv_scheduler *s = t->data;
    int n = api_expire_leases(s->api, hpo_now());
    if (n < 0) HPO_WARN("lease expiry failed: %s", hpo_strerror(n));
    /* the other nodes: the dead ones' jobs back in the queue, the studies
     * they created or changed (jobs.h: nodes) */
    if (!s->stopping) api_nodes_tick(s->api);
    schedule(s);
}

static void on_wake(uv_async_t *a) { schedule(a->data); }

/* Called by worker threads and the api: safe from any thread. */
static void wake(void *arg) {
    srv_scheduler *s = arg;
    uv_async_send(&s->wake);
}

/* A graceful shutdown, each: Ctrl-C, kill, and the terminal hpod runs in
 * closing (hpod has no configuration to reload). */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void stop_loop(srv_scheduler *s) {
    s->stopping = 1;
    uv_timer_stop(&s->tick);
    for (size_t i = 0; i < HPO_ARRAY_LEN(stop_signals); i++) uv_signal_stop(&s->signals[i]);
    uv_stop(&s->loop);
}

static void on_signal(uv_signal_t *h, int signum) {
    srv_scheduler *s = h->data;
    HPO_INFO("received %s: shutting down", signum == SIGINT ? "SIGINT" : signum == SIGTERM ? "SIGTERM" : "SIGHUP");
    s->stopped_by = signum;
    stop_loop(s);
}

static void on_stop(uv_async_t *a) { stop_loop(a->data); }

int srv_scheduler_new(api_ctx *api, const srv_slot *slots, int n_slots, srv_scheduler **out) {
    srv_scheduler *s = hpo_xcalloc(1, sizeof *s);
    s->api = api;
    if (uv_loop_init(&s->loop)) {
        free(s);
        return HPO_EIO;
    }
    uv_timer_init(&s->loop, &s->tick);
    for (size_t i = 0; i < HPO_ARRAY_LEN(stop_signals); i++) {
        uv_signal_init(&s->loop, &s->signals[i]);
        s->signals[i].data = s;
    }
    uv_async_init(&s->loop, &s->wake, on_wake);
    uv_async_init(&s->loop, &s->stop, on_stop);
    s->tick.data = s->wake.data = s->stop.data = s;
    int rc = srv_workers_new(api, slots, n_slots, wake, s, &s->workers);
    if (rc) {
        srv_scheduler_free(s);
        return rc;
    }
    api_jobs_set_wakeup(api, wake, s);
    /* the signal handlers before hpod says it listens: a SIGTERM right
     * after that line is a clean shutdown, never the default kill */
    for (size_t i = 0; i < HPO_ARRAY_LEN(stop_signals); i++)
        uv_signal_start(&s->signals[i], on_signal, stop_signals[i]);
    int requeued = api_jobs_recover(api);
    if (requeued > 0) HPO_INFO("recovery: %d trial(s) will resume from their checkpoints", requeued);
    *out = s;
    return 0;
}

int srv_scheduler_run(srv_scheduler *s) {
    uv_timer_start(&s->tick, on_tick, 0, 1000);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return s->stopped_by;
}

void srv_scheduler_stop(srv_scheduler *s) { uv_async_send(&s->stop); }

static void on_close(uv_handle_t *h) { (void)h; }

void srv_scheduler_free(srv_scheduler *s) {
    if (!s) return;
    api_jobs_set_wakeup(s->api, NULL, NULL);
    srv_workers_free(s->workers); /* running trials are requeued: they resume after a restart */
    uv_close((uv_handle_t *)&s->tick, on_close);
    for (size_t i = 0; i < HPO_ARRAY_LEN(stop_signals); i++) uv_close((uv_handle_t *)&s->signals[i], on_close);
    uv_close((uv_handle_t *)&s->wake, on_close);
    uv_close((uv_handle_t *)&s->stop, on_close);
    uv_run(&s->loop, UV_RUN_DEFAULT); /* lets the close callbacks run */
    uv_loop_close(&s->loop);
    free(s);
}
