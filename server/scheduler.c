/* scheduler.c - the libuv loop of hpod (see scheduler.h). */
#include "scheduler.h"

#include <signal.h>
#include <stdlib.h>
#include <uv.h>

struct srv_scheduler {
    uv_loop_t loop;
    uv_timer_t lease_timer;
    uv_signal_t sigint, sigterm;
    uv_async_t stop;
    api_ctx *api;
    int stopped_by;
};

static void on_lease_timer(uv_timer_t *t) {
    srv_scheduler *s = t->data;
    int n = api_expire_leases(s->api, hpo_now());
    if (n < 0) HPO_WARN("lease expiry failed: %s", hpo_strerror(n));
}

static void stop_loop(srv_scheduler *s) {
    uv_timer_stop(&s->lease_timer);
    uv_signal_stop(&s->sigint);
    uv_signal_stop(&s->sigterm);
    uv_stop(&s->loop);
}

static void on_signal(uv_signal_t *h, int signum) {
    srv_scheduler *s = h->data;
    HPO_INFO("received %s: shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    s->stopped_by = signum;
    stop_loop(s);
}

static void on_stop(uv_async_t *a) { stop_loop(a->data); }

int srv_scheduler_new(api_ctx *api, srv_scheduler **out) {
    srv_scheduler *s = hpo_xcalloc(1, sizeof *s);
    s->api = api;
    if (uv_loop_init(&s->loop)) {
        free(s);
        return HPO_EIO;
    }
    uv_timer_init(&s->loop, &s->lease_timer);
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    uv_async_init(&s->loop, &s->stop, on_stop);
    s->lease_timer.data = s->sigint.data = s->sigterm.data = s->stop.data = s;
    *out = s;
    return 0;
}

int srv_scheduler_run(srv_scheduler *s) {
    uv_timer_start(&s->lease_timer, on_lease_timer, 0, 1000);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return s->stopped_by;
}

void srv_scheduler_stop(srv_scheduler *s) { uv_async_send(&s->stop); }

static void on_close(uv_handle_t *h) { (void)h; }

void srv_scheduler_free(srv_scheduler *s) {
    if (!s) return;
    uv_close((uv_handle_t *)&s->lease_timer, on_close);
    uv_close((uv_handle_t *)&s->sigint, on_close);
    uv_close((uv_handle_t *)&s->sigterm, on_close);
    uv_close((uv_handle_t *)&s->stop, on_close);
    uv_run(&s->loop, UV_RUN_DEFAULT); /* lets the close callbacks run */
    uv_loop_close(&s->loop);
    free(s);
}
