/* job_sched.c - the job layer's decisions for the scheduler thread (see
 * jobs.h): which job runs next (none during a disk-full back-off), what a
 * running job must do when its study changes state, when a study is
 * complete, jobs left running without a worker, and recovery after a
 * restart. A pbt study's next member is pbt.c's choice. It looks only at the embedded studies of the run queue. Every
 * state change is stored with its event (api_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"

static void unloadable(api_ctx *ctx, int64_t study_id);

/* The embedded studies of the run queue in the states of mask, oldest
 * first (a new reference each); those that cannot be loaded are left out
 * (unloadable), and so are those held since (api_queue_hold). */
static size_t embedded_studies(api_ctx *ctx, unsigned mask, api_study ***out) {
    int64_t *ids = NULL;
    size_t n = api_queue_list(ctx, mask, &ids), k = 0;
    api_study **sts = hpo_xcalloc(n + 1, sizeof *sts);
    double now = hpo_now();
    for (size_t i = 0; i < n; i++) {
        if (api_queue_held(ctx, ids[i], now)) continue;
        int rc = api_study_acquire(ctx, ids[i], &sts[k]);
        if (rc == 0)
            k++;
        else if (rc != HPO_ENOMEM)
            unloadable(ctx, ids[i]);
    }
    free(ids);
    *out = sts;
    return k;
}

/* A queued study that cannot be loaded (its uploaded dataset deleted once
 * it was cancelled, a definition this version refuses; study_cache.c
 * logs why): a cancelled one has its queued trials cancelled through
 * storage and leaves the run queue, said once, rather than being loaded
 * (and logged) again at every pass; a running one stays, and is tried
 * again after API_UNLOADABLE_RETRY_S, or at once when its state changes
 * (its dataset may come back, a cancel makes it leave). */
#define API_UNLOADABLE_RETRY_S 60.0
static void unloadable(api_ctx *ctx, int64_t study_id) {
    sto_study s;
    if (sto_study_get(ctx->db, study_id, &s)) return;
    int cancelled = s.state == STO_STUDY_CANCELLED, running = s.state == STO_STUDY_RUNNING;
    sto_study_clear(&s);
    if (running) {
        api_queue_hold(ctx, study_id, hpo_now() + API_UNLOADABLE_RETRY_S);
        HPO_WARN("study %lld: running, and it cannot be loaded: none of its trials starts; tried again in %.0f s",
                 (long long)study_id, API_UNLOADABLE_RETRY_S);
    }
    if (!cancelled) return;
    sto_trial_filter f = {.state = STO_TRIAL_QUEUED, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    if (sto_trial_list(ctx->db, study_id, &f, &t, &n)) return;
    for (size_t i = 0; i < n; i++) api_trial_cancel_for_study(ctx, NULL, &t[i]);
    sto_trial_list_free(t, n);
    api_queue_remove(ctx, study_id);
    HPO_WARN("study %lld: cancelled, and it cannot be loaded: %zu queued trial(s) cancelled, it leaves the run queue",
             (long long)study_id, n);
    if (n) api_events_wake(ctx);
}

static void release_all(api_ctx *ctx, api_study **sts, size_t n) {
    for (size_t i = 0; i < n; i++) api_study_release(ctx, sts[i]);
    free(sts);
}

/* A study that storage no longer has (deleted, maybe through another
 * node) leaves the queue and the cache. */
static void forget(api_ctx *ctx, int64_t study_id) {
    api_queue_remove(ctx, study_id);
    api_study_forget(ctx, study_id);
}

int api_jobs_recover(api_ctx *ctx) {
    /* the studies its earlier runs were importing when they stopped
     * (imports.c), deleted */
    api_imports_recover(ctx);
    /* this data dir's earlier runs ended (every other node on SQLite), and
     * the jobs they left running queued again (nodes.c) */
    return api_nodes_reclaim(ctx, 1);
}

/* Within the study's budget (trials, seconds, the tuner; budget.c)? */
static int has_budget(api_study *st) { return api_budget_spent(st, hpo_now(), 0) == NULL; }

/* The data of a trial_started or trial_resumed event: the slot and this
 * node. */
static char *started_data(api_ctx *ctx, int64_t trial_id, int64_t number, const char *slot) {
    return api_event_text(json_pack("{s:I, s:I, s:s, s:I}", "trial_id", (json_int_t)trial_id, "number",
                                    (json_int_t)number, "slot", slot, "node_id", (json_int_t)api_node_id(ctx)));
}

typedef struct started_arg {
    api_ctx *ctx;
    const char *slot;
} started_arg;

static char *new_trial_data(void *arg, int64_t trial_id, int64_t number) {
    started_arg *a = arg;
    return started_data(a->ctx, trial_id, number, a->slot);
}

/* Resumes a requeued trial on slot, with its trial_resumed event, by one
 * caller only and within the study's parallel_trials across every node
 * (sto_trial_claim_ev): HPO_ECONFLICT when it was taken, or the study runs
 * enough trials. */
static int resume_trial(api_ctx *ctx, const api_study *st, int64_t trial_id, int64_t number, const char *slot) {
    char *data = started_data(ctx, trial_id, number, slot);
    sto_event_in ev = {"trial_resumed", data};
    sto_trial_run r = {.slot = slot, .parallel = st->def.emb.parallel};
    int rc = sto_trial_claim_ev(ctx->db, trial_id, &r, &ev);
    free(data);
    if (rc == 0) api_events_wake(ctx);
    return rc;
}

/* One of the oldest queued trials of the study, started on slot: a
 * requeued one resumes from its checkpoint, an enqueued one (never
 * started) gets its parameters completed (enqueued.c). Another node may
 * take the oldest at the same moment: the next one is tried then. 0,
 * HPO_ENOTFOUND, or HPO_ECONFLICT (parallel_trials run). */
#define TAKE_QUEUED_TRIES 4
static int take_queued(api_ctx *ctx, api_study *st, const char *slot, api_job *job) {
    sto_trial_filter f = {.state = STO_TRIAL_QUEUED, .order = STO_ORDER_NUMBER, .limit = TAKE_QUEUED_TRIES};
    sto_trial *t = NULL;
    size_t n = 0;
    int rc = sto_trial_list(ctx->db, st->id, &f, &t, &n);
    if (rc == 0 && n == 0) rc = HPO_ENOTFOUND;
    size_t i = 0;
    for (; rc == 0 && i < n; i++) {
        int resumed = t[i].started > 0; /* else enqueued: never started */
        if (resumed) {
            rc = resume_trial(ctx, st, t[i].id, t[i].number, slot);
        } else {
            char *data = started_data(ctx, t[i].id, t[i].number, slot);
            sto_event_in ev = {"trial_started", data};
            rc = api_enqueued_hand_out(ctx, st, &t[i], 0, slot, &ev, NULL);
            free(data);
            if (rc == 0) api_events_wake(ctx);
        }
        if (rc == 0) {
            *job = (api_job){.kind = API_JOB_TRIAL, .trial_id = t[i].id, .study_id = st->id,
                             .number = t[i].number, .resumed = resumed, .timeout = st->def.emb.trial_timeout,
                             .trained = t[i].train_seconds};
            break;
        }
        /* taken by another node: the next one; the study full: none */
        if (rc == HPO_ECONFLICT && i + 1 < n) {
            int64_t counts[STO_TRIAL_N_STATES] = {0};
            if (sto_trial_counts(ctx->db, st->id, counts) == 0 &&
                (st->def.emb.parallel <= 0 || counts[STO_TRIAL_RUNNING] < st->def.emb.parallel))
                rc = 0;
        }
    }
    sto_trial_list_free(t, n);
    return rc;
}

/* A new trial from the tuner, started on slot; 0, HPO_ENOTFOUND (no budget),
 * HPO_ECONFLICT (parallel_trials run) or an error. max_trials and
 * parallel_trials are counted in storage, in the transaction that creates
 * the trial, so they hold whatever the other nodes start. */
static int take_new(api_ctx *ctx, api_study *st, const char *slot, api_job *job) {
    if (!has_budget(st)) return HPO_ENOTFOUND;
    double *x = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *x);
    int64_t number = 0, trial_id = 0;
    started_arg arg = {ctx, slot};
    sto_trial_run r = {.slot = slot, .max_trials = st->def.max_trials, .parallel = st->def.emb.parallel,
                       .ev_type = "trial_started", .ev_data = new_trial_data, .ev_arg = &arg};
    int rc = api_study_new_trial(ctx, st, &r, x, NULL, &trial_id, &number);
    if (rc == HPO_EEXHAUSTED) rc = HPO_ENOTFOUND; /* the tuner is done, or other nodes created the rest */
    if (rc == 0) {
        st->pbt_members++;
        api_events_wake(ctx);
    }
    if (rc == 0)
        *job = (api_job){.kind = API_JOB_TRIAL, .trial_id = trial_id, .study_id = st->id, .number = number,
                         .timeout = st->def.emb.trial_timeout};
    free(x);
    return rc;
}

/* The next member of a population-based study (pbt.c), started on slot. */
static int take_pbt(api_ctx *ctx, api_study *st, const char *slot, api_job *job) {
    api_pbt_pick pick;
    int rc = api_pbt_next(ctx, st, has_budget(st), &pick);
    if (rc) return rc;
    if (pick.trial_id == 0) return take_new(ctx, st, slot, job);
    if ((rc = resume_trial(ctx, st, pick.trial_id, pick.number, slot))) return rc;
    *job = (api_job){.kind = API_JOB_TRIAL, .trial_id = pick.trial_id, .study_id = st->id, .number = pick.number,
                     .resumed = 1, .timeout = st->def.emb.trial_timeout, .trained = pick.trained};
    return 0;
}

/* The model_started event of a claimed model: its slot and node. */
static char *model_started_data(void *arg, int64_t model_id) {
    started_arg *a = arg;
    return api_event_text(json_pack("{s:I, s:s, s:I}", "model_id", (json_int_t)model_id, "slot", a->slot, "node_id",
                                    (json_int_t)api_node_id(a->ctx)));
}

/* Whether slot may take the oldest queued model job: a refit trains, and
 * its study's training.device says on which kind of slot (as for its
 * trials); trial models and ensembles only evaluate, anywhere. A job
 * whose study cannot be loaded is left to the claim (it fails there,
 * job_model.c). The model jobs behind a refit wait until a slot of its
 * kind takes it (they are claimed in order); where this hpod has none of
 * that kind, any slot takes it and trains on the CPU. Other nodes may
 * claim the checked job first: the claim then takes the next, and a refit
 * that does not fit the slot trains on the CPU. */
static int model_fits(api_ctx *ctx, const char *slot) {
    sto_model m;
    if (sto_model_next_queued(ctx->db, &m)) return 1; /* none: the claim finds none either */
    int fits = 1;
    api_study *st;
    if (m.kind == STO_MODEL_REFIT && api_study_acquire(ctx, m.study_id, &st) == 0) {
        /* where this hpod has no slot of that kind, any slot takes it (on
         * the CPU) rather than holding every model job behind it */
        fits = api_device_fits(st->def.emb.device, slot) || !api_have_slot_for(ctx, st->def.emb.device);
        api_study_release(ctx, st);
    }
    sto_model_clear(&m);
    return fits;
}

/* The oldest queued model job, claimed for slot (once, whatever the number
 * of hpods on the database); 0 or HPO_ENOTFOUND. */
static int take_model(api_ctx *ctx, const char *slot, api_job *job) {
    if (!model_fits(ctx, slot)) return HPO_ENOTFOUND; /* a slot of the other kind takes it */
    sto_model m;
    started_arg arg = {ctx, slot};
    int rc = sto_model_claim_ev(ctx->db, "model_started", model_started_data, &arg, &m);
    if (rc) return rc;
    api_events_wake(ctx);
    *job = (api_job){.kind = API_JOB_MODEL, .model_id = m.id, .study_id = m.study_id, .trial_id = m.trial_id};
    sto_model_clear(&m);
    return 0;
}

/* A study and how many of its trials run (on every node), for the fair
 * share's order. */
typedef struct study_load {
    api_study *st;
    int64_t running;
    size_t age; /* its place in the run queue: 0 the oldest */
} study_load;

static int cmp_load(const void *a, const void *b) {
    const study_load *x = a, *y = b;
    if (x->running != y->running) return x->running < y->running ? -1 : 1;
    return x->age < y->age ? -1 : x->age > y->age;
}

/* The studies in the order a slot offers itself to them: the one running
 * the fewest trials first, the oldest first among equals (fair share: a
 * study without parallel_trials does not hold every slot from the studies
 * created after it; each freed slot goes to the study that has least).
 * The counts are read without the studies' locks: they only order the
 * offers, and the study's own check under its lock decides. */
static void order_by_load(api_ctx *ctx, api_study **sts, size_t n) {
    study_load *l = hpo_xcalloc(n + 1, sizeof *l);
    for (size_t i = 0; i < n; i++) {
        int64_t counts[STO_TRIAL_N_STATES] = {0};
        l[i] = (study_load){sts[i], 0, i};
        if (sto_trial_counts(ctx->db, sts[i]->id, counts) == 0) l[i].running = counts[STO_TRIAL_RUNNING];
    }
    qsort(l, n, sizeof *l, cmp_load);
    for (size_t i = 0; i < n; i++) sts[i] = l[i].st;
    free(l);
}

int api_jobs_next(api_ctx *ctx, const char *slot, api_job *job) {
    if (api_disk_wait(ctx) > 0) return HPO_ENOTFOUND; /* the disk was full: wait */
    if (take_model(ctx, slot, job) == 0) return 0;
    api_study **sts;
    size_t n = embedded_studies(ctx, API_STATE_BIT(STO_STUDY_RUNNING), &sts);
    if (n > 1) order_by_load(ctx, sts, n);
    int rc = HPO_ENOTFOUND;
    /* first the studies that can train on this kind of slot only, then
     * those that take any (training.device), in the fair share's order in
     * each: an "any" study has the other slots, a "cuda" one only these */
    for (size_t k = 0; k < 2 * n && rc == HPO_ENOTFOUND; k++) {
        api_study *st = sts[k % n];
        if ((st->def.emb.device == API_DEVICE_ANY) != (k >= n)) continue; /* not in this pass */
        if (!api_device_fits(st->def.emb.device, slot)) continue; /* training.device: another kind of slot */
        sto_study_state state;
        /* the state under the study's lock: storage decides, the queue is
         * an index (read with what other nodes changed, in one statement) */
        pthread_mutex_lock(&st->lock);
        int got = api_study_sync_state(ctx, st, &state);
        if (got) {
            pthread_mutex_unlock(&st->lock);
            if (got == HPO_ENOTFOUND) forget(ctx, st->id);
            continue;
        }
        int64_t counts[STO_TRIAL_N_STATES] = {0};
        if (state == STO_STUDY_RUNNING && sto_trial_counts(ctx->db, st->id, counts) == 0 &&
            (st->def.emb.parallel <= 0 || counts[STO_TRIAL_RUNNING] < st->def.emb.parallel)) {
            if (st->def.tuner.algorithm == TUN_PBT) {
                rc = take_pbt(ctx, st, slot, job);
            } else {
                rc = counts[STO_TRIAL_QUEUED] > 0 ? take_queued(ctx, st, slot, job) : HPO_ENOTFOUND;
                if (rc == HPO_ENOTFOUND) rc = take_new(ctx, st, slot, job);
            }
        }
        pthread_mutex_unlock(&st->lock);
        if (rc == HPO_ECONFLICT) rc = HPO_ENOTFOUND; /* its parallel_trials run (on any node) */
        if (rc && rc != HPO_ENOTFOUND) {
            HPO_WARN("study %lld: cannot start a trial: %s", (long long)st->id, hpo_strerror(rc));
            rc = HPO_ENOTFOUND;
        }
    }
    release_all(ctx, sts, n);
    return rc;
}

/* 1 if one of the busy jobs runs that trial (or model). */
static int is_busy(const api_job *busy, size_t n_busy, int kind, int64_t id) {
    for (size_t i = 0; i < n_busy; i++)
        if (busy[i].kind == kind && (kind == API_JOB_MODEL ? busy[i].model_id : busy[i].trial_id) == id) return 1;
    return 0;
}

/* The running trials of a study that run on this node (me) in no slot: 1
 * if there is one. A read only, without the study: most ticks find none. */
static int has_orphan(const sto_trial *t, size_t nt, int64_t me, const api_job *busy, size_t n_busy) {
    for (size_t k = 0; k < nt; k++)
        if (t[k].node_id == me && !is_busy(busy, n_busy, API_JOB_TRIAL, t[k].id)) return 1;
    return 0;
}

/* Queues again the study's running trials that no slot runs, under the
 * study's lock (the read that found them was not). */
static int reap_trials(api_ctx *ctx, int64_t study_id, int64_t me, const api_job *busy, size_t n_busy) {
    sto_trial_filter f = {.state = STO_TRIAL_RUNNING, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t nt = 0;
    int found = sto_trial_list(ctx->db, study_id, &f, &t, &nt) == 0 && has_orphan(t, nt, me, busy, n_busy);
    sto_trial_list_free(t, nt);
    api_study *st;
    if (!found || api_study_acquire(ctx, study_id, &st)) return 0;
    int reaped = 0;
    t = NULL;
    nt = 0;
    pthread_mutex_lock(&st->lock);
    if (sto_trial_list(ctx->db, st->id, &f, &t, &nt) == 0) {
        for (size_t k = 0; k < nt; k++) {
            if (t[k].node_id != me || is_busy(busy, n_busy, API_JOB_TRIAL, t[k].id)) continue;
            char *data = api_event_text(json_pack("{s:I, s:I, s:s}", "trial_id", (json_int_t)t[k].id, "number",
                                                  (json_int_t)t[k].number, "reason",
                                                  "no worker runs it (its outcome could not be stored)"));
            sto_event_in ev = {"trial_requeued", data};
            if (sto_trial_requeue_ev(ctx->db, t[k].id, &ev) == 0) {
                HPO_WARN("trial %lld (study %lld #%lld) was running without a worker: queued again",
                         (long long)t[k].id, (long long)st->id, (long long)t[k].number);
                reaped++;
            }
            free(data);
        }
    }
    pthread_mutex_unlock(&st->lock);
    sto_trial_list_free(t, nt);
    api_study_release(ctx, st);
    return reaped;
}

/* Queues again the study's running model jobs that no slot runs. */
static int reap_models(api_ctx *ctx, int64_t study_id, int64_t me, const api_job *busy, size_t n_busy) {
    sto_model *m = NULL;
    size_t nm = 0;
    int reaped = 0;
    if (sto_model_list(ctx->db, study_id, -1, &m, &nm) == 0) {
        for (size_t k = 0; k < nm; k++) {
            if (m[k].state != STO_MODEL_RUNNING || m[k].node_id != me || is_busy(busy, n_busy, API_JOB_MODEL, m[k].id))
                continue;
            if (sto_model_requeue(ctx->db, m[k].id) == 0) {
                HPO_WARN("model %lld (study %lld) was running without a worker: queued again", (long long)m[k].id,
                         (long long)study_id);
                reaped++;
            }
        }
    }
    sto_model_list_free(m, nm);
    return reaped;
}

/* Every embedded study of the queue, finished ones too (a refit runs after
 * its study completed), is read from storage, not loaded: loading parses the
 * definition, and that opens the study's dataset (embedded.c), which at a
 * start decoded every finished study's dataset on the scheduler's thread
 * before it answered anything, SIGTERM included. Only a study with an
 * orphan is loaded, for its lock. */
int api_jobs_reap(api_ctx *ctx, const api_job *busy, size_t n_busy) {
    if (api_disk_wait(ctx) > 0) return 0; /* it would fail the same way: after the back-off */
    int64_t me = sto_node_current(ctx->db); /* the jobs of other nodes are theirs (or nodes.c's) */
    int64_t *ids = NULL;
    size_t n = api_queue_list(ctx, ~0u, &ids);
    int reaped = 0;
    for (size_t i = 0; i < n; i++) {
        reaped += reap_trials(ctx, ids[i], me, busy, n_busy);
        reaped += reap_models(ctx, ids[i], me, busy, n_busy);
    }
    free(ids);
    if (reaped) api_events_wake(ctx);
    return reaped;
}

int api_jobs_run(api_ctx *ctx, const api_job *job, const char *slot, int threads, const atomic_int *stop) {
    api_metrics_job(ctx, +1); /* hpo_slots_busy */
    int rc = job->kind == API_JOB_MODEL ? api_run_model(ctx, job->model_id, slot, threads, stop)
                                        : api_run_trial(ctx, job, slot, threads, stop);
    api_metrics_job(ctx, -1);
    return rc;
}

/* Whether a running job is not this node's any more: it was found dead
 * and another node took the job over (shared databases only). */
static int lost(api_ctx *ctx, const api_job *job) {
    if (!sto_shared(ctx->db)) return 0;
    int64_t me = sto_node_current(ctx->db), node = 0;
    if (job->kind == API_JOB_MODEL) {
        sto_model m;
        if (sto_model_get(ctx->db, job->model_id, &m)) return 0;
        node = m.node_id;
        sto_model_clear(&m);
    } else {
        sto_trial_state state;
        if (sto_trial_owner(ctx->db, job->trial_id, &state, &node)) return 0;
    }
    return node != me;
}

int api_jobs_stop_reason(api_ctx *ctx, const api_job *job) {
    sto_study s;
    int rc = sto_study_get(ctx->db, job->study_id, &s);
    if (rc == HPO_ENOTFOUND) return API_STOP_CANCEL;
    if (rc) return API_STOP_NONE;
    if (lost(ctx, job)) {
        sto_study_clear(&s);
        return API_STOP_LOST;
    }
    if (job->kind == API_JOB_MODEL) { /* pausing or cancelling the search leaves refits alone */
        sto_study_clear(&s);
        return API_STOP_NONE;
    }
    int reason = s.state == STO_STUDY_PAUSED      ? API_STOP_PAUSE
                 : s.state == STO_STUDY_CANCELLED ? API_STOP_CANCEL
                                                  : API_STOP_NONE;
    sto_study_clear(&s);
    return reason;
}

/* Cancels the queued trials of a cancelled study. */
static void cancel_queued(api_ctx *ctx, api_study *st) {
    sto_trial_filter f = {.state = STO_TRIAL_QUEUED, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    if (sto_trial_list(ctx->db, st->id, &f, &t, &n)) return;
    for (size_t i = 0; i < n; i++) api_trial_cancel_for_study(ctx, st, &t[i]);
    sto_trial_list_free(t, n);
}

void api_jobs_settle(api_ctx *ctx) {
    api_study **sts;
    size_t n = embedded_studies(ctx, API_STATE_BIT(STO_STUDY_RUNNING) | API_STATE_BIT(STO_STUDY_CANCELLED), &sts);
    for (size_t i = 0; i < n; i++) {
        api_study *st = sts[i];
        sto_study s;
        int got = sto_study_get(ctx->db, st->id, &s);
        if (got == HPO_ENOTFOUND) forget(ctx, st->id);
        if (got) continue;
        int64_t counts[STO_TRIAL_N_STATES] = {0};
        pthread_mutex_lock(&st->lock);
        if (s.state == STO_STUDY_CANCELLED) cancel_queued(ctx, st);
        const char *why = api_budget_spent(st, hpo_now(), 0);
        int done = s.state == STO_STUDY_RUNNING && why && sto_trial_counts(ctx->db, st->id, counts) == 0 &&
                   counts[STO_TRIAL_RUNNING] == 0 && counts[STO_TRIAL_QUEUED] == 0;
        /* the state and its study_complete event together (budget.c) */
        if (done) done = api_study_complete(ctx, st, why, counts) == 0;
        pthread_mutex_unlock(&st->lock);
        if (done) api_events_wake(ctx);
        sto_study_clear(&s);
    }
    release_all(ctx, sts, n);
}
