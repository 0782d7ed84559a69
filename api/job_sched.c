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

/* The embedded studies of the run queue in the states of mask, oldest
 * first (a new reference each). */
static size_t embedded_studies(api_ctx *ctx, unsigned mask, api_study ***out) {
    int64_t *ids = NULL;
    size_t n = api_queue_list(ctx, mask, &ids), k = 0;
    api_study **sts = hpo_xcalloc(n + 1, sizeof *sts);
    for (size_t i = 0; i < n; i++)
        if (api_study_acquire(ctx, ids[i], &sts[k]) == 0) k++;
    free(ids);
    *out = sts;
    return k;
}

static void release_all(api_ctx *ctx, api_study **sts, size_t n) {
    for (size_t i = 0; i < n; i++) api_study_release(ctx, sts[i]);
    free(sts);
}

/* The running trials of one study after an unclean stop: queued again, or
 * failed when they keep taking hpod down (see jobs.h, data_dir.h). */
static int64_t recover_trials(api_ctx *ctx, api_study *st) {
    sto_trial_filter f = {.state = STO_TRIAL_RUNNING, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    int64_t requeued = 0;
    pthread_mutex_lock(&st->lock);
    int rc = sto_trial_list(ctx->db, st->id, &f, &t, &n);
    pthread_mutex_unlock(&st->lock);
    if (rc) return 0;
    for (size_t i = 0; i < n; i++) {
        int k = api_training_crashes(ctx->opt.data_dir, t[i].id), failed = 0;
        char msg[200];
        snprintf(msg, sizeof msg,
                 "hpod stopped %d times in a row while training this trial, before it finished an epoch "
                 "(out of memory?); it is not resumed again", k);
        pthread_mutex_lock(&st->lock);
        if (k < API_MAX_CRASHES) {
            if (sto_trial_requeue(ctx->db, t[i].id) == 0) requeued++;
        } else if (sto_trial_finish(ctx->db, t[i].id, STO_TRIAL_FAILED, NAN, NAN, 0, msg) == 0) {
            tun_study_finish(st->tuner, t[i].number, TUN_TRIAL_FAILED, NAN);
            failed = 1;
        }
        pthread_mutex_unlock(&st->lock);
        if (!failed) continue;
        HPO_WARN("study %lld, trial %lld: %s", (long long)st->id, (long long)t[i].id, msg);
        api_event(ctx, st->id, t[i].id, "trial_failed",
                  json_pack("{s:I, s:I, s:s, s:s, s:s}", "trial_id", (json_int_t)t[i].id, "number",
                            (json_int_t)t[i].number, "state", "failed", "error", msg, "reason", "crash_loop"));
    }
    sto_trial_list_free(t, n);
    return requeued;
}

int api_jobs_recover(api_ctx *ctx) {
    api_study **sts;
    size_t n = embedded_studies(ctx, ~0u, &sts);
    int64_t total = 0, models = 0;
    if (sto_models_requeue_running(ctx->db, &models) == 0 && models > 0) {
        HPO_INFO("%lld interrupted model job(s) queued again", (long long)models);
        total += models;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t k = recover_trials(ctx, sts[i]);
        if (k > 0) {
            HPO_INFO("study %lld: %lld interrupted trial(s) queued to resume from their checkpoints",
                     (long long)sts[i]->id, (long long)k);
            total += k;
        }
    }
    release_all(ctx, sts, n);
    return (int)total;
}

/* Within the study's budget (trials, seconds, the tuner; budget.c)? */
static int has_budget(api_study *st) { return api_budget_spent(st, hpo_now(), 0) == NULL; }

/* Marks a trial running on slot, with its trial_started/trial_resumed event;
 * a requeued one is resumed by one caller only (sto_trial_resume_ev). */
static int start_trial(api_ctx *ctx, int64_t trial_id, int64_t number, int resumed, const char *slot) {
    char *data = api_event_text(json_pack("{s:I, s:I, s:s}", "trial_id", (json_int_t)trial_id, "number",
                                          (json_int_t)number, "slot", slot));
    sto_event_in ev = {resumed ? "trial_resumed" : "trial_started", data};
    int rc = resumed ? sto_trial_resume_ev(ctx->db, trial_id, slot, &ev) : sto_trial_start_ev(ctx->db, trial_id, slot, &ev);
    free(data);
    if (rc == 0) api_events_wake(ctx);
    return rc;
}

/* The oldest queued trial of the study, started on slot: a requeued one
 * resumes from its checkpoint, an enqueued one (never started) gets its
 * parameters completed (enqueued.c); 0 or HPO_ENOTFOUND. */
static int take_queued(api_ctx *ctx, api_study *st, const char *slot, api_job *job) {
    sto_trial_filter f = {.state = STO_TRIAL_QUEUED, .order = STO_ORDER_NUMBER, .limit = 1};
    sto_trial *t = NULL;
    size_t n = 0;
    int rc = sto_trial_list(ctx->db, st->id, &f, &t, &n);
    if (rc == 0 && n == 0) rc = HPO_ENOTFOUND;
    int resumed = rc == 0 && t[0].started > 0; /* else enqueued: never started */
    if (rc == 0 && resumed) {
        rc = start_trial(ctx, t[0].id, t[0].number, 1, slot);
    } else if (rc == 0) {
        char *data = api_event_text(json_pack("{s:I, s:I, s:s}", "trial_id", (json_int_t)t[0].id, "number",
                                              (json_int_t)t[0].number, "slot", slot));
        sto_event_in ev = {"trial_started", data};
        rc = api_enqueued_hand_out(ctx, st, &t[0], 0, slot, &ev, NULL);
        free(data);
        if (rc == 0) api_events_wake(ctx);
    }
    if (rc == 0)
        *job = (api_job){.kind = API_JOB_TRIAL, .trial_id = t[0].id, .study_id = st->id, .number = t[0].number,
                         .resumed = resumed, .timeout = st->def.emb.trial_timeout};
    sto_trial_list_free(t, n);
    return rc;
}

/* A new trial from the tuner, started on slot; 0, HPO_ENOTFOUND (no budget)
 * or an error. */
static int take_new(api_ctx *ctx, api_study *st, const char *slot, api_job *job) {
    if (!has_budget(st)) return HPO_ENOTFOUND;
    double *x = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *x);
    int64_t number = 0, trial_id = 0;
    int rc = api_study_new_trial(ctx, st, 0, x, NULL, &trial_id, &number);
    if (rc == HPO_EEXHAUSTED) rc = HPO_ENOTFOUND;
    if (rc == 0) {
        st->pbt_members++;
        /* should this fail (a full disk), the trial is running without a
         * worker: api_jobs_reap queues it again */
        rc = start_trial(ctx, trial_id, number, 0, slot);
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
    if ((rc = start_trial(ctx, pick.trial_id, pick.number, 1, slot))) return rc;
    *job = (api_job){.kind = API_JOB_TRIAL, .trial_id = pick.trial_id, .study_id = st->id, .number = pick.number,
                     .resumed = 1, .timeout = st->def.emb.trial_timeout};
    return 0;
}

/* The model_started event of a claimed model (arg: the slot). */
static char *model_started_data(void *arg, int64_t model_id) {
    return api_event_text(json_pack("{s:I, s:s}", "model_id", (json_int_t)model_id, "slot", (const char *)arg));
}

/* The oldest queued model job, claimed for slot (once, whatever the number
 * of hpods on the database); 0 or HPO_ENOTFOUND. */
static int take_model(api_ctx *ctx, const char *slot, api_job *job) {
    sto_model m;
    int rc = sto_model_claim_ev(ctx->db, "model_started", model_started_data, (void *)slot, &m);
    if (rc) return rc;
    api_events_wake(ctx);
    *job = (api_job){.kind = API_JOB_MODEL, .model_id = m.id, .study_id = m.study_id, .trial_id = m.trial_id};
    sto_model_clear(&m);
    return 0;
}

int api_jobs_next(api_ctx *ctx, const char *slot, api_job *job) {
    if (api_disk_wait(ctx) > 0) return HPO_ENOTFOUND; /* the disk was full: wait */
    if (take_model(ctx, slot, job) == 0) return 0;
    api_study **sts;
    size_t n = embedded_studies(ctx, API_STATE_BIT(STO_STUDY_RUNNING), &sts);
    int rc = HPO_ENOTFOUND;
    for (size_t i = 0; i < n && rc == HPO_ENOTFOUND; i++) {
        api_study *st = sts[i];
        sto_study s;
        /* the state under the study's lock: storage decides, the queue is an index */
        pthread_mutex_lock(&st->lock);
        if (sto_study_get(ctx->db, st->id, &s)) {
            pthread_mutex_unlock(&st->lock);
            continue;
        }
        int64_t counts[STO_TRIAL_N_STATES] = {0};
        if (s.state == STO_STUDY_RUNNING && api_study_sync(ctx, st) == 0 &&
            sto_trial_counts(ctx->db, st->id, counts) == 0 &&
            (st->def.emb.parallel <= 0 || counts[STO_TRIAL_RUNNING] < st->def.emb.parallel)) {
            if (st->def.tuner.algorithm == TUN_PBT) {
                rc = take_pbt(ctx, st, slot, job);
            } else {
                rc = counts[STO_TRIAL_QUEUED] > 0 ? take_queued(ctx, st, slot, job) : HPO_ENOTFOUND;
                if (rc == HPO_ENOTFOUND) rc = take_new(ctx, st, slot, job);
            }
        }
        pthread_mutex_unlock(&st->lock);
        sto_study_clear(&s);
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

int api_jobs_reap(api_ctx *ctx, const api_job *busy, size_t n_busy) {
    if (api_disk_wait(ctx) > 0) return 0; /* it would fail the same way: after the back-off */
    api_study **sts;
    size_t n = embedded_studies(ctx, ~0u, &sts);
    int reaped = 0;
    for (size_t i = 0; i < n; i++) {
        api_study *st = sts[i];
        sto_trial_filter f = {.state = STO_TRIAL_RUNNING, .order = STO_ORDER_NUMBER};
        sto_trial *t = NULL;
        size_t nt = 0;
        pthread_mutex_lock(&st->lock);
        if (sto_trial_list(ctx->db, st->id, &f, &t, &nt) == 0) {
            for (size_t k = 0; k < nt; k++) {
                if (is_busy(busy, n_busy, API_JOB_TRIAL, t[k].id)) continue;
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
        sto_model *m = NULL;
        size_t nm = 0;
        if (sto_model_list(ctx->db, st->id, -1, &m, &nm) == 0) {
            for (size_t k = 0; k < nm; k++) {
                if (m[k].state != STO_MODEL_RUNNING || is_busy(busy, n_busy, API_JOB_MODEL, m[k].id)) continue;
                if (sto_model_requeue(ctx->db, m[k].id) == 0) {
                    HPO_WARN("model %lld (study %lld) was running without a worker: queued again", (long long)m[k].id,
                             (long long)st->id);
                    reaped++;
                }
            }
        }
        sto_model_list_free(m, nm);
    }
    release_all(ctx, sts, n);
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

int api_jobs_stop_reason(api_ctx *ctx, const api_job *job) {
    sto_study s;
    int rc = sto_study_get(ctx->db, job->study_id, &s);
    if (rc == HPO_ENOTFOUND) return API_STOP_CANCEL;
    if (rc) return API_STOP_NONE;
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
    for (size_t i = 0; i < n; i++) {
        if (sto_trial_finish(ctx->db, t[i].id, STO_TRIAL_CANCELLED, NAN, NAN, 0, "study cancelled") == 0)
            tun_study_finish(st->tuner, t[i].number, TUN_TRIAL_FAILED, NAN);
    }
    sto_trial_list_free(t, n);
}

void api_jobs_settle(api_ctx *ctx) {
    api_study **sts;
    size_t n = embedded_studies(ctx, API_STATE_BIT(STO_STUDY_RUNNING) | API_STATE_BIT(STO_STUDY_CANCELLED), &sts);
    for (size_t i = 0; i < n; i++) {
        api_study *st = sts[i];
        sto_study s;
        if (sto_study_get(ctx->db, st->id, &s)) continue;
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
