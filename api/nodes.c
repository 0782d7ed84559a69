/* nodes.c - this hpod as one node of its database (jobs.h: nodes): its row
 * registered at start, its heartbeat (a thread of its own, on a connection
 * of its own, so that no long call on the main connection delays a beat),
 * the nodes found dead and the jobs they left running reclaimed (at start
 * and on every tick of a shared database), a rejoin after this node was
 * itself found dead, and GET /api/v1/nodes. Another node is found dead
 * only by a node whose own beats went through for a whole timeout (after
 * the database was away from every node, each gets a timeout to beat
 * again). The reclaim of a trial keeps
 * the crash-loop guard (data_dir.h: a trial hpod died training
 * API_MAX_CRASHES times in a row fails instead of resuming again). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs_internal.h"

struct api_node {
    char *ident, *name;
    double timeout;  /* seconds without a beat after which a node is dead */
    double interval; /* seconds between beats */
    int shared;      /* the database is shared (PostgreSQL): beats and dead nodes */
    sto_db *beat_db; /* the heartbeat's connection (shared only) */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu; /* guards quit and name; the beat thread sleeps on cond */
    pthread_cond_t cond;
    int quit;
    atomic_llong id; /* this node's row; a new one after a rejoin */
    atomic_int lost; /* a beat found the row ended: this node was found dead */
    /* this node's own beats (ms of hpo_monotonic): the last that went
     * through, and the first of the run of them without a gap since */
    atomic_llong beat_ok_ms, beating_since_ms;
    unsigned ticks;  /* the scheduler's: ticks since the last look for orphans */
};

/* Orphans come from nodes ended by a reclaim (which then looks at once);
 * this often a tick also looks, for those a reclaim left (it died between
 * the node's end and its jobs). */
#define SWEEP_TICKS 30
/* a timeout no heartbeat's age reaches (finite: the SQL takes a number) */
#define NEVER_DEAD 1e12

/* A beat went through at now: after a gap of more than half the timeout
 * (the database away, this process stopped or starved) a new run starts. */
static void beat_ok(struct api_node *n, double now) {
    long long ms = (long long)(now * 1e3), last = atomic_load(&n->beat_ok_ms);
    if (last == 0 || ms - last > (long long)(n->timeout * 500)) atomic_store(&n->beating_since_ms, ms);
    atomic_store(&n->beat_ok_ms, ms);
}

/* The timeout to find other nodes dead by: theirs while this node's own
 * beats have gone through without a gap for a whole timeout; else none
 * (NEVER_DEAD): a silence this node may have shared (the database away from
 * every node, or every node's host paused) is no proof that the others
 * died, and they have a timeout from its end to beat again. */
static double dead_after(struct api_node *n) {
    long long now = (long long)(hpo_monotonic() * 1e3), last = atomic_load(&n->beat_ok_ms);
    int steady = last > 0 && now - last <= (long long)(n->timeout * 500) &&
                 now - atomic_load(&n->beating_since_ms) >= (long long)(n->timeout * 1e3);
    return steady ? n->timeout : NEVER_DEAD;
}

static void *beat_main(void *arg) {
    struct api_node *n = arg;
    int failing = 0;
    pthread_mutex_lock(&n->mu);
    while (!n->quit) {
        pthread_mutex_unlock(&n->mu);
        int rc = sto_node_beat(n->beat_db, (int64_t)atomic_load(&n->id));
        if (rc == 0) beat_ok(n, hpo_monotonic());
        if (rc == HPO_ECONFLICT) {
            if (!atomic_exchange(&n->lost, 1))
                HPO_WARN("node %lld: another node found it dead (no heartbeat for %.0f s)",
                         (long long)atomic_load(&n->id), n->timeout);
        } else if (rc && !failing++) {
            HPO_WARN("node %lld: heartbeat failed: %s (other nodes take its jobs over after %.0f s without one)",
                     (long long)atomic_load(&n->id), hpo_strerror(rc), n->timeout);
        } else if (rc == 0 && failing) {
            HPO_INFO("node %lld: heartbeat back", (long long)atomic_load(&n->id));
            failing = 0;
        }
        struct timespec until = hpo_deadline(CLOCK_REALTIME, n->interval);
        pthread_mutex_lock(&n->mu);
        if (!n->quit) pthread_cond_timedwait(&n->cond, &n->mu, &until);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

static void node_free(struct api_node *n) {
    if (!n) return;
    sto_close(n->beat_db);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cond);
    free(n->ident);
    free(n->name);
    free(n);
}

int api_node_start(api_ctx *ctx, const api_node_options *o) {
    if (!o || !o->ident || !o->name || ctx->node) return HPO_EINVAL;
    struct api_node *n = hpo_xcalloc(1, sizeof *n);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cond, NULL);
    n->ident = hpo_strdup(o->ident);
    n->name = hpo_strdup(o->name);
    n->timeout = o->timeout > 0 ? o->timeout : API_NODE_TIMEOUT;
    n->interval = fmin(1.0, n->timeout / 4);
    n->shared = sto_shared(ctx->db);
    int64_t id = 0;
    int rc = sto_node_register(ctx->db, n->ident, n->name, &id);
    if (rc == 0 && n->shared) rc = sto_reopen(ctx->db, &n->beat_db);
    /* a transaction of a stalled node (stopped, swapped out) ends before
     * long: its row locks would hold up the nodes that take its jobs over */
    if (rc == 0 && n->shared) rc = sto_set_stall_timeout(ctx->db, 2 * n->timeout);
    if (rc == 0 && n->shared) rc = sto_set_stall_timeout(n->beat_db, 2 * n->timeout);
    if (rc) {
        node_free(n);
        return rc;
    }
    atomic_store(&n->id, id);
    if (n->shared) {
        if (pthread_create(&n->thread, NULL, beat_main, n)) {
            node_free(n);
            return HPO_EIO;
        }
        n->thread_started = 1;
    }
    ctx->node = n;
    if (n->shared)
        HPO_INFO("node %lld (%s): a heartbeat every %.1f s; a node silent for %.0f s is taken over", (long long)id,
                 n->name, n->interval, n->timeout);
    return 0;
}

void api_node_rename(api_ctx *ctx, const char *name) {
    struct api_node *n = ctx->node;
    if (!n || !name) return;
    pthread_mutex_lock(&n->mu);
    free(n->name);
    n->name = hpo_strdup(name);
    pthread_mutex_unlock(&n->mu);
    int rc = sto_node_rename(ctx->db, (int64_t)atomic_load(&n->id), name);
    if (rc) HPO_WARN("node %lld: cannot store its name %s: %s", (long long)atomic_load(&n->id), name, hpo_strerror(rc));
}

void api_node_stop(api_ctx *ctx) {
    struct api_node *n = ctx->node;
    if (!n) return;
    if (n->thread_started) {
        pthread_mutex_lock(&n->mu);
        n->quit = 1;
        pthread_cond_signal(&n->cond);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->thread, NULL);
    }
    /* its jobs are queued again already (the workers stopped): no other
     * node waits for a timeout before it looks at them */
    int rc = sto_node_end(ctx->db, (int64_t)atomic_load(&n->id), "stopped");
    if (rc && rc != HPO_ECONFLICT) HPO_WARN("node: cannot store its end: %s", hpo_strerror(rc));
    ctx->node = NULL;
    node_free(n);
}

/* This node was found dead (its heartbeat stalled past the timeout): its
 * jobs went to other nodes, and the ones still running here store nothing
 * (their trials are not this node's any more: api_jobs_stop_reason stops
 * them). It registers again, as a new node. */
static void rejoin(api_ctx *ctx, struct api_node *n) {
    pthread_mutex_lock(&n->mu);
    char *name = hpo_strdup(n->name);
    pthread_mutex_unlock(&n->mu);
    int64_t old = (int64_t)atomic_load(&n->id), id = 0;
    int rc = sto_node_register(ctx->db, n->ident, name, &id);
    if (rc == 0) {
        atomic_store(&n->id, id);
        atomic_store(&n->lost, 0);
        HPO_WARN("node %lld was found dead by another node: its jobs went to other nodes; it joins again as node %lld",
                 (long long)old, (long long)id);
    }
    free(name);
}

/* The trial_requeued or trial_failed (crash loop) event of a reclaimed
 * trial: reason "node gone" (with the node) or "hpod restarted" (no node:
 * a schema before nodes). */
static char *reclaim_event(const sto_trial *t, const char *error) {
    json_t *d = error ? json_pack("{s:I, s:I, s:s, s:s, s:s}", "trial_id", (json_int_t)t->id, "number",
                                  (json_int_t)t->number, "state", "failed", "error", error, "reason", "crash_loop")
                      : json_pack("{s:I, s:I, s:s}", "trial_id", (json_int_t)t->id, "number", (json_int_t)t->number,
                                  "reason", t->node_id > 0 ? "node gone" : "hpod restarted");
    if (t->node_id > 0) json_object_set_new(d, "node_id", json_integer(t->node_id));
    return api_event_text(d);
}

/* A trial its node left running: queued again to resume from its last
 * checkpoint on whichever node takes it, or failed when training it took
 * hpod down API_MAX_CRASHES times in a row. 1 when it was queued. */
static int reclaim_trial(api_ctx *ctx, const sto_trial *t) {
    int k = api_training_crashes(ctx->opt.data_dir, t->id);
    char error[200];
    snprintf(error, sizeof error,
             "hpod stopped %d times in a row while training this trial, before it finished an epoch "
             "(out of memory?); it is not resumed again", k);
    int fail = k >= API_MAX_CRASHES;
    char *data = reclaim_event(t, fail ? error : NULL);
    sto_event_in ev = {fail ? "trial_failed" : "trial_requeued", data};
    api_study *st = NULL;
    if (api_study_acquire(ctx, t->study_id, &st)) st = NULL; /* its tuner is not told; storage still is */
    if (st) pthread_mutex_lock(&st->lock);
    int rc = sto_trial_reclaim_ev(ctx->db, t->id, t->node_id, fail ? error : NULL, &ev);
    if (rc == 0 && fail && st) tun_study_finish(st->tuner, t->number, TUN_TRIAL_FAILED, NAN);
    if (st) pthread_mutex_unlock(&st->lock);
    api_study_release(ctx, st);
    free(data);
    if (rc == HPO_ECONFLICT) return 0; /* another node reclaimed it first */
    if (rc) {
        HPO_WARN("trial %lld: cannot reclaim it from its node: %s", (long long)t->id, hpo_strerror(rc));
        return 0;
    }
    api_events_wake(ctx);
    if (fail) {
        HPO_WARN("study %lld, trial %lld: %s", (long long)t->study_id, (long long)t->id, error);
        return 0;
    }
    HPO_INFO("study %lld, trial %lld (#%lld): its node (%lld) is gone; queued to resume from its checkpoint",
             (long long)t->study_id, (long long)t->id, (long long)t->number, (long long)t->node_id);
    return 1;
}

/* After the model jobs its node left running were queued again: one whose
 * running took hpod down API_MAX_CRASHES times in a row fails instead (it
 * would take it down again, and every trial running beside it would count
 * those deaths too). 1 when it failed. */
static int model_crash_loop(api_ctx *ctx, const sto_model *m) {
    int k = api_model_job_crashes(ctx->opt.data_dir, m->id);
    if (k < API_MAX_CRASHES) return 0;
    char error[200];
    snprintf(error, sizeof error,
             "hpod stopped %d times in a row while running this model job (out of memory?); it is not run again", k);
    char *data = api_event_text(json_pack("{s:I, s:s, s:s, s:s}", "model_id", (json_int_t)m->id, "kind",
                                          sto_model_kind_name(m->kind), "error", error, "reason", "crash_loop"));
    sto_event_in ev = {"model_failed", data};
    int rc = sto_model_finish_ev(ctx->db, m->id, STO_MODEL_FAILED, NULL, NULL, error, &ev);
    free(data);
    if (rc) return 0; /* another node claimed it first */
    api_model_job_end(ctx->opt.data_dir, m->id);
    HPO_WARN("study %lld, model %lld: %s", (long long)m->study_id, (long long)m->id, error);
    return 1;
}

int api_nodes_reclaim(api_ctx *ctx, int at_start) {
    struct api_node *n = ctx->node;
    int shared = sto_shared(ctx->db);
    if (!at_start && !shared) return 0; /* one node: nothing dies under it */
    /* at start: this data dir's earlier runs (on SQLite every other node,
     * there is one per database), then on every tick the silent ones */
    size_t ended = 0;
    double timeout = !n ? API_NODE_TIMEOUT : shared ? dead_after(n) : n->timeout;
    int rc = sto_nodes_end_stale(ctx->db, timeout, at_start && n ? n->ident : NULL, at_start && !shared, NULL,
                                 &ended);
    if (rc) return 0;
    if (!at_start && ended == 0 && (!n || ++n->ticks < SWEEP_TICKS)) return 0;
    if (n) n->ticks = 0;
    sto_trial *t = NULL;
    size_t nt = 0;
    int reclaimed = 0;
    if (sto_trials_orphaned(ctx->db, at_start, &t, &nt) == 0)
        for (size_t i = 0; i < nt; i++) reclaimed += reclaim_trial(ctx, &t[i]);
    sto_trial_list_free(t, nt);
    int64_t models = 0;
    sto_model *ms = NULL;
    size_t nm = 0;
    if (sto_models_orphaned(ctx->db, at_start, &ms, &nm)) nm = 0; /* then no guard this time */
    if (sto_models_reclaim(ctx->db, at_start, &models) == 0 && models > 0) {
        for (size_t i = 0; i < nm; i++) models -= model_crash_loop(ctx, &ms[i]);
        if (models > 0) HPO_INFO("%lld interrupted model job(s) queued again", (long long)models);
        reclaimed += (int)models;
        api_events_wake(ctx);
        api_jobs_wake(ctx);
    }
    sto_model_list_free(ms, nm);
    return reclaimed;
}

int api_nodes_tick(api_ctx *ctx) {
    struct api_node *n = ctx->node;
    if (n && !n->shared) sto_node_beat(ctx->db, (int64_t)atomic_load(&n->id)); /* one node: no thread */
    if (n && atomic_load(&n->lost)) rejoin(ctx, n);
    int reclaimed = api_nodes_reclaim(ctx, 0);
    api_queue_sync(ctx);
    return reclaimed;
}

int64_t api_node_id(api_ctx *ctx) { return ctx->node ? (int64_t)atomic_load(&ctx->node->id) : 0; }

const char *api_node_ident(api_ctx *ctx) { return ctx->node ? ctx->node->ident : NULL; }

void api_h_nodes_list(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    (void)id;
    int64_t limit;
    if (api_query_int(req, resp, "limit", 100, 1, 10000, &limit)) return;
    sto_node *list = NULL;
    size_t n = 0;
    /* read before the rows: a rejoin stores its new row, then takes its id,
     * so the list has the row of the id read first, whichever that is */
    int64_t self = api_node_id(ctx);
    int rc = sto_node_list(ctx->db, limit, &list, &n);
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        return;
    }
    json_t *nodes = json_array();
    for (size_t i = 0; i < n; i++) {
        const sto_node *d = &list[i];
        json_array_append_new(
            nodes, json_pack("{s:I, s:o, s:s, s:f, s:f, s:f, s:o, s:o, s:b}", "id", (json_int_t)d->id, "name",
                             api_json_string_lossy(d->name), "state", d->ended > 0 ? "ended" : "alive", "started",
                             d->started, "heartbeat", d->heartbeat, "heartbeat_age", fmax(0, d->now - d->heartbeat),
                             "ended", d->ended > 0 ? json_real(d->ended) : json_null(), "end_reason",
                             d->end_reason ? json_string(d->end_reason) : json_null(), "self",
                             d->id == self));
    }
    sto_node_list_free(list, n);
    api_reply_json(resp, 200, json_pack("{s:o, s:f}", "nodes", nodes, "timeout",
                                        ctx->node ? ctx->node->timeout : API_NODE_TIMEOUT));
}
