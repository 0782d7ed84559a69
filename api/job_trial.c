/* job_trial.c - runs one trial of an embedded study on a worker thread: builds
 * the model from the template and the trial's params, trains each execution
 * with the engine, stores every epoch's metrics (the learning curves, each
 * with its "epoch" event), reports the objective to the pruner after every
 * epoch, and records the outcome with its event. Executions resume from
 * their checkpoints after a pause or a restart; a finished execution leaves
 * a small result file so it is not trained again. A full disk (a
 * checkpoint, a result file or an epoch that cannot be written) queues the
 * trial again instead of failing it, and so does a file system that fails
 * under the trial's files (HPO_EFS: permissions, read-only, an I/O
 * error); a trial deleted with its study stops at the first epoch it
 * cannot store and leaves nothing behind. With
 * training.tensorboard each execution's stored epochs also go to its
 * TensorBoard run (job_tb.c). A member of a population-based study stops
 * at each perturbation boundary and waits queued to be ranked (pbt.c). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "jobs_internal.h"
#include "model.h"
#include "train.h"

#define MAX_EXECUTIONS API_MAX_EXECUTIONS
#define MAX_EPOCHS 100000

/* One trial's run: what the epoch callback needs. */
typedef struct run {
    api_ctx *ctx;
    api_study *st;
    const api_job *job;
    const char *slot; /* the worker slot, for the metrics */
    const atomic_int *stop;
    int execution;
    double *curve[MAX_EXECUTIONS]; /* objective per epoch (1-based), NaN when unknown */
    int curve_len[MAX_EXECUTIONS];
    int pruned;
    int stopped; /* API_STOP_* seen by the callback */
    int store_rc; /* an epoch that could not be stored: HPO_ENOSPACE, HPO_ENOTFOUND (trial deleted),
                     HPO_ECONFLICT (the trial runs on another node), or another storage error */
    int epochs_seen; /* callbacks of the current execution */
    int64_t boundary; /* pbt: the boundary it stopped at, to wait there to be ranked (pbt.c) */
    double started;  /* monotonic start of this run less its earlier runs' training, for job->timeout */
    api_tb_run tb;   /* training.tensorboard */
    const json_t *model, *params; /* the expanded model template and the trial's params */
    json_t *figures; /* several objectives and a pruner: params, flops and latency_ms, which
                      * every epoch of execution 0 reports with the others (emb_objectives.c);
                      * measured at the first epoch (the model has passed the memory budget) */
    double *secs0;   /* execution 0: each epoch's training seconds (1-based), NaN when unknown */
    int secs0_len;
} run;



/* The objective metric of an epoch report. */
static double objective_of(const api_study *st, const eng_metrics *train, const eng_metrics *val, int has_val) {
    const char *metric = st->def.emb.curve;
    double v = NAN;
    int is_val = strncmp(metric, "val_", 4) == 0;
    eng_metric_get(is_val && has_val ? val : train, metric, &v);
    return v;
}

static json_t *metrics_json(const eng_epoch_report *r) {
    json_t *j = json_pack("{s:o, s:o, s:o, s:o, s:f, s:f, s:f}", "loss", api_json_real(r->train.loss), "accuracy",
                          api_json_real(r->train.accuracy), "mse", api_json_real(r->train.mse), "mae",
                          api_json_real(r->train.mae), "seconds", r->seconds, "samples_per_s",
                          r->samples_per_s, "lr", r->lr);
    if (r->has_val) {
        json_object_set_new(j, "val_loss", api_json_real(r->val.loss));
        json_object_set_new(j, "val_accuracy", api_json_real(r->val.accuracy));
        json_object_set_new(j, "val_mse", api_json_real(r->val.mse));
        json_object_set_new(j, "val_mae", api_json_real(r->val.mae));
    }
    return j;
}

/* Sets (*a)[epoch - 1] = v, growing the array (NaN-filled). */
static void series_set(double **a, int *len, int epoch, double v) {
    if (epoch < 1 || epoch > MAX_EPOCHS) return;
    if (epoch > *len) {
        *a = hpo_xrealloc(*a, (size_t)epoch * sizeof(double));
        for (int i = *len; i < epoch; i++) (*a)[i] = NAN;
        *len = epoch;
    }
    (*a)[epoch - 1] = v;
}

static void curve_set(run *r, int e, int epoch, double v) { series_set(&r->curve[e], &r->curve_len[e], epoch, v); }

/* Several objectives and a pruner: the epoch's metrics m get the engine's
 * figures (measured at the first call) and train_seconds (execution 0's
 * training seconds up to this epoch), and vec the objectives read from
 * them. An error when the figures cannot be measured (the trial fails). */
/* The model's params, flops and latency (r->figures), measured once on a
 * model of their own: before the trial's model exists (run_execution),
 * so the two are never in memory together (the budget counts one). */
static int measure_figures(run *r, hpo_error *why) {
    if (r->figures) return 0;
    hpo_error err = {{0}, {0}};
    json_t *f = json_object();
    int rc = api_emb_engine_figures(&r->st->def.emb, r->model, r->params, f, &err);
    if (rc) {
        HPO_WARN("trial %lld: its model's params, flops and latency could not be measured: %s",
                 (long long)r->job->trial_id, err.message[0] ? err.message : hpo_strerror(rc));
        json_decref(f);
        if (why) *why = err;
        return rc;
    }
    r->figures = f;
    return 0;
}

static int epoch_vector(run *r, const eng_epoch_report *rep, json_t *m, double *vec) {
    int frc = measure_figures(r, NULL);
    if (frc) return frc;
    series_set(&r->secs0, &r->secs0_len, rep->epoch, rep->seconds);
    double secs = 0;
    for (int i = 0; i < rep->epoch && i < r->secs0_len; i++)
        if (isfinite(r->secs0[i])) secs += r->secs0[i];
    json_object_update(m, r->figures);
    json_object_set_new(m, "train_seconds", json_real(secs));
    api_objective_vector(&r->st->def, m, vec);
    return 0;
}

static int on_epoch(const eng_epoch_report *rep, void *user) {
    run *r = user;
    api_study *st = r->st;
    /* this node was found dead and the trial taken from it: this run
     * stores nothing more, its counter neither. After the rejoin its
     * writes would pass as the new node's, whose next pass may resume the
     * trial here on another slot (the scheduler flags this run first) */
    if (atomic_load(r->stop) == API_STOP_LOST) {
        r->store_rc = HPO_ECONFLICT;
        return HPO_ECONFLICT;
    }
    api_training_epoch(r->ctx->opt.data_dir, r->job->trial_id); /* progress: not a crash loop (data_dir.h) */
    if (r->epochs_seen++ == 0 && rep->epoch > 1) /* the engine resumed from a checkpoint */
        api_event(r->ctx, r->job->study_id, r->job->trial_id, "execution_resumed",
                  json_pack("{s:I, s:I, s:i, s:i}", "trial_id", (json_int_t)r->job->trial_id, "number",
                            (json_int_t)r->job->number, "execution", r->execution, "from_epoch", rep->epoch - 1));
    json_t *m = metrics_json(rep);
    double v = objective_of(st, &rep->train, &rep->val, rep->has_val), vec[TUN_MAX_OBJECTIVES];
    int with_vector = api_emb_reports_vector(&st->def) && r->execution == 0;
    if (with_vector) {
        int frc = epoch_vector(r, rep, m, vec);
        if (frc) {
            json_decref(m);
            return frc < 0 ? frc : HPO_EINTERNAL;
        }
    }
    char *text = json_dumps(m, JSON_COMPACT);
    char *data = api_event_text(json_pack("{s:I, s:I, s:i, s:i, s:i, s:o, s:o}", "trial_id",
                                          (json_int_t)r->job->trial_id, "number", (json_int_t)r->job->number,
                                          "execution", r->execution, "epoch", rep->epoch, "epochs", rep->epochs,
                                          "value", api_json_real(v), "metrics", m));
    /* the curve point and its "epoch" event together */
    sto_event_in ev = {"epoch", data};
    int rc = text ? sto_epoch_put_ev(r->ctx->db, r->job->trial_id, r->execution, rep->epoch, text, &ev) : HPO_ENOMEM;
    free(text);
    free(data);
    int stored = rc == 0;
    int prune = 0;
    if (rc == 0 && r->execution == 0 && isfinite(v)) { /* the pruner watches the first execution */
        pthread_mutex_lock(&st->lock);
        if (with_vector) tun_study_report_mo(st->tuner, r->job->number, rep->epoch, vec, &prune);
        else tun_study_report(st->tuner, r->job->number, rep->epoch, v, &prune);
        /* the answer is stored with the report (a resume after a restart
         * re-reports this epoch: told the same; another node never reads
         * the report without it) */
        rc = sto_trial_report(r->ctx->db, r->job->trial_id, rep->epoch, v, 0,
                              api_prune_answer(st, r->job->number, prune));
        if (rc == HPO_ECONFLICT) rc = 0; /* no longer running: the outcome below tells */
        pthread_mutex_unlock(&st->lock);
    }
    if (!stored || rc == HPO_ENOSPACE || rc == HPO_ENOTFOUND || rc == HPO_ECONFLICT) {
        /* a full disk, the trial is gone (its study was deleted), it runs
         * on another node now (this one was found dead), or the curve point
         * could not be stored for another reason (a connection lost during
         * a stall, say): stop without checkpointing this epoch, so a resume
         * redoes it. A checkpoint past the stored curve would let the
         * resume skip an epoch that has no point (a gap in the curve). */
        r->store_rc = rc;
        return rc;
    }
    if (rc) HPO_WARN("trial %lld: epoch %d not stored: %s", (long long)r->job->trial_id, rep->epoch, hpo_strerror(rc));
    if (stored) api_tb_run_epoch(&r->tb, rep); /* the epoch as stored */
    api_events_wake_study(r->ctx, st->id);
    api_metrics_epoch(r->ctx, r->slot, rep->samples_per_s);
    /* the engine checkpointed the previous epoch of this run: the disk has room */
    if (r->epochs_seen >= 2) api_disk_ok(r->ctx);
    if (stored) api_epoch_stored(r->ctx, r->job->trial_id);
    curve_set(r, r->execution, rep->epoch, v);
    if (prune) r->pruned = 1;
    r->stopped = atomic_load(r->stop);
    /* the scheduler's timer stops a trial too, but only once a second:
     * checking here ends it at the first epoch past its time */
    if (!r->stopped && r->job->timeout > 0 && hpo_monotonic() - r->started > r->job->timeout)
        r->stopped = API_STOP_TIMEOUT;
    if (!prune && !r->stopped && api_pbt_boundary(st, rep->epoch)) r->boundary = rep->epoch;
    return prune || r->stopped || r->boundary;
}

/* Writes an execution's result file (d stolen) atomically, so a full disk
 * leaves no half file behind. HPO_ENOSPACE when the disk is full (the
 * trial is queued again and this execution, whose last checkpoint is its
 * final epoch, ends at once when resumed). */
static int write_done(api_ctx *ctx, const char *path, json_t *d, hpo_error *err) {
    char *text = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    int rc = text ? api_dir_write_atomic(path, text, ctx->opt.durable_checkpoints, err) : HPO_ENOMEM;
    free(text);
    return rc;
}

/* Loads the stored curves of a resumed trial. */
static void load_curves(run *r) {
    sto_epoch *eps = NULL;
    size_t n = 0;
    if (sto_trial_epochs(r->ctx->db, r->job->trial_id, &eps, &n)) return;
    for (size_t i = 0; i < n; i++) {
        if (eps[i].execution < 0 || eps[i].execution >= MAX_EXECUTIONS) continue;
        json_t *m = json_loads(eps[i].metrics, 0, NULL);
        const char *metric = r->st->def.emb.curve;
        json_t *v = json_object_get(m, metric);
        if (!v && strncmp(metric, "val_", 4) == 0) v = json_object_get(m, metric + 4);
        if (json_is_number(v)) curve_set(r, eps[i].execution, (int)eps[i].epoch, json_number_value(v));
        json_t *secs = json_object_get(m, "seconds");
        if (eps[i].execution == 0 && json_is_number(secs))
            series_set(&r->secs0, &r->secs0_len, (int)eps[i].epoch, json_number_value(secs));
        json_decref(m);
    }
    sto_epoch_list_free(eps, n);
}

/* Best value of an execution's curve in the study's direction, and its epoch. */
static double best_of(const api_study *st, const double *c, int n, int *epoch) {
    double best = NAN;
    *epoch = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(c[i])) continue;
        if (isnan(best) || (st->def.emb.curve_max ? c[i] > best : c[i] < best)) {
            best = c[i];
            *epoch = i + 1;
        }
    }
    return best;
}

/* The epoch whose objective, averaged over executions, is best (KerasTuner's
 * best epoch for a refit); 0 if none. */
static int mean_best_epoch(const run *r, int executions) {
    int len = MAX_EPOCHS;
    for (int e = 0; e < executions; e++)
        if (r->curve_len[e] < len) len = r->curve_len[e];
    double best = NAN;
    int best_epoch = 0;
    for (int k = 0; k < len; k++) {
        double sum = 0;
        int ok = 1;
        for (int e = 0; e < executions; e++) {
            if (!isfinite(r->curve[e][k])) ok = 0;
            sum += r->curve[e][k];
        }
        double v = sum / executions;
        if (ok && (isnan(best) || (r->st->def.emb.curve_max ? v > best : v < best))) {
            best = v;
            best_epoch = k + 1;
        }
    }
    return best_epoch;
}


/* Whose result an execution's done file is: the trial row's study, number
 * and creation time, which a folder left by another database's trial of
 * the same id (hpo.db replaced or restored: ids handed out again) does
 * not share. 0, or a storage error. */
static int done_stamp(const run *r, double *created) {
    sto_trial t;
    int rc = sto_trial_get(r->ctx->db, r->job->trial_id, &t);
    if (rc) return rc;
    *created = t.created;
    sto_trial_clear(&t);
    return 0;
}

/* Trains execution e; *value gets its best objective. 0, HPO_ECANCELLED
 * when stopped (pruned or told to), or an error (the trial fails). */
static int run_execution(run *r, int e, const json_t *model_tmpl, const json_t *params, const eng_split *train,
                         const eng_split *val, int threads, double *value, hpo_error *err) {
    api_study *st = r->st;
    const api_embedded *emb = &st->def.emb;
    const char *root = r->ctx->opt.data_dir;
    char dir[API_PATH_MAX], done[API_PATH_MAX], tb[API_PATH_MAX], name[64], done_name[64];
    snprintf(name, sizeof name, "exec-%d.safetensors", e);
    snprintf(done_name, sizeof done_name, "exec-%d.done.json", e); /* {"best": v, "best_epoch": k, stamp} */
    if (api_dir_trial(dir, root, r->job->trial_id) || api_dir_trial_file(done, root, r->job->trial_id, done_name) ||
        api_dir_tensorboard_trial(tb, root, r->job->study_id, r->job->number, e))
        return hpo_fail(err, HPO_EINVAL, "", "the trial's checkpoint path is too long");
    int best_epoch = 0;
    json_t *prev = json_load_file(done, 0, NULL);
    double created = 0;
    int stamped = done_stamp(r, &created) == 0; /* else unstamped: a resume trains this execution again */
    if (prev && stamped) {
        json_t *c = json_object_get(prev, "trial_created");
        if (json_integer_value(json_object_get(prev, "study_id")) == r->job->study_id &&
            json_integer_value(json_object_get(prev, "number")) == r->job->number && json_is_real(c) &&
            json_real_value(c) == created) { /* finished before a restart */
            *value = json_number_value(json_object_get(prev, "best"));
            json_decref(prev);
            return 0;
        }
        /* another trial's (or unstamped): neither it nor that execution's checkpoint is this trial's */
        HPO_WARN("trial %lld: %s is not this trial's result (another database's trial of this id?): ignored, "
                 "the execution trains from the start", (long long)r->job->trial_id, done);
        char ckpt[API_PATH_MAX];
        api_dir_unlink(done);
        if (api_dir_trial_file(ckpt, root, r->job->trial_id, name) == 0) api_dir_unlink(ckpt);
    }
    json_decref(prev);
    int rc = api_dir_make(root, dir, err);
    if (rc) return rc;
    eng_model *m = NULL;
    uint64_t seed = api_seed_mix(api_seed_mix(st->def.tuner.seed, (uint64_t)r->job->number), (uint64_t)e);
    eng_train_opts o;
    api_trial_train_opts(r->ctx, emb, threads, &o);
    o.seed = seed;
    o.checkpoint_dir = dir;
    o.checkpoint_name = name;
    o.on_epoch = on_epoch;
    o.user = r;
    api_slot_train_opts(r->slot, emb, &o); /* a CUDA slot trains on its GPU */
    r->execution = e;
    r->epochs_seen = 0;
    api_tb_run_select(&r->tb, tb);
    /* the model's memory is checked against the budget before its
     * parameters exist: a model over it fails the trial, never hpod */
    rc = eng_model_new_shape(model_tmpl, params, emb->in_rank, emb->in_shape, emb->n_classes, &m, err);
    if (rc == 0) rc = eng_train_check_budget(m, &o, NULL, err);
    if (rc) {
        eng_model_free(m);
        return rc;
    }
    if (e == 0 && api_emb_reports_vector(&r->st->def) && (rc = measure_figures(r, err))) {
        eng_model_free(m);
        return rc;
    }
    api_training_begin(root, r->job->trial_id); /* a death from here on counts (data_dir.h) */
    eng_train_result res;
    rc = eng_model_alloc(m, seed, err);
    if (rc == 0) rc = eng_train(m, train, val, &o, &res, err);
    if (r->store_rc != HPO_ECONFLICT) /* else the trial left this node: its counter is the new one's */
        api_training_end(root, r->job->trial_id);
    eng_model_free(m);
    if (rc) return rc;
    if (r->pruned || r->stopped || r->boundary) return HPO_ECANCELLED;
    *value = e < MAX_EXECUTIONS ? best_of(st, r->curve[e], r->curve_len[e], &best_epoch) : NAN;
    json_t *d = json_pack("{s:o, s:i, s:i}", "best", api_json_real(*value), "best_epoch", best_epoch, "epochs",
                          res.epochs_run);
    if (stamped) {
        json_object_set_new(d, "study_id", json_integer(r->job->study_id));
        json_object_set_new(d, "number", json_integer(r->job->number));
        json_object_set_new(d, "trial_created", json_real(created));
    }
    return write_done(r->ctx, done, d, err);
}



/* Logs why an outcome was not stored. Not stored, the trial stays running
 * in storage: api_jobs_reap queues it again once this worker is idle (a
 * resume finds its finished executions' result files). */
/* The trials of st whose checkpoints stay (api_dir_prune_checkpoints; a
 * malloc'd array in *ids): the API_KEEP_CHECKPOINTS best complete ones
 * (with constraints: feasible), with several objectives or constraints the
 * Pareto front too (its members are what a client picks models from), and
 * the trials models need (an ensemble predicts from its members). */
static size_t checkpoints_kept(api_ctx *ctx, const api_study *st, int64_t **ids) {
    size_t n = api_trials_in_use(ctx, st->id, ids);
    sto_trial *best = NULL;
    size_t n_best = 0;
    if (api_best_trials(ctx, &st->def, st->id, API_KEEP_CHECKPOINTS, &best, &n_best)) n_best = 0;
    json_t *front = st->def.n_obj > 1 || st->def.n_cons > 0 ? api_front_trial_ids(ctx, &st->def, st->id) : NULL;
    *ids = hpo_xrealloc(*ids, (n + n_best + json_array_size(front) + 1) * sizeof **ids);
    for (size_t i = 0; i < n_best; i++) (*ids)[n++] = best[i].id;
    size_t i;
    json_t *v;
    json_array_foreach(front, i, v)(*ids)[n++] = json_integer_value(v);
    sto_trial_list_free(best, n_best);
    json_decref(front);
    return n;
}

static void outcome_not_stored(const api_job *job, const char *what, int rc) {
    if (rc == HPO_ENOTFOUND)
        HPO_INFO("trial %lld: its study was deleted; nothing stored", (long long)job->trial_id);
    else
        HPO_WARN("trial %lld: could not record %s: %s", (long long)job->trial_id, what, hpo_strerror(rc));
}

/* Ends the trial in state, with its event (data stolen) in the same
 * transaction; o (may be NULL) the outcome of a study with objectives or
 * constraints (its values, metrics and violation). */
static void finish_as(api_ctx *ctx, api_study *st, const api_job *job, sto_trial_state state, double value, double std,
                      int n, const char *error, const char *event, json_t *data, const api_outcome *o) {
    json_object_set_new(data, "trial_id", json_integer(job->trial_id));
    json_object_set_new(data, "number", json_integer(job->number));
    json_object_set_new(data, "state", json_string(sto_trial_state_name(state)));
    if (error) json_object_set_new(data, "error", json_string(error));
    char *text = api_event_text(data);
    sto_event_in ev = {event, text};
    pthread_mutex_lock(&st->lock);
    int rc;
    if (o) {
        sto_outcome so = {.state = state, .value = value, .value_std = std, .value_n = n, .error = error,
                          .values_json = o->values_json, .metrics_json = o->metrics_json};
        rc = sto_trial_finish_outcome(ctx->db, job->trial_id, &so, &ev);
        if (rc == 0) rc = api_tuner_finish_outcome(st, job->number, o);
    } else {
        rc = sto_trial_finish_ev(ctx->db, job->trial_id, state, value, std, n, error, &ev);
        if (rc == 0) {
            sto_trial t;
            if (state == STO_TRIAL_PRUNED && sto_trial_get(ctx->db, job->trial_id, &t) == 0) {
                value = t.value; /* storage kept the last intermediate */
                sto_trial_clear(&t);
            }
            /* a study with objectives: a trial that did not complete has no values */
            if (st->def.multi)
                tun_study_finish_mo(st->tuner, job->number, api_tun_state(state), NULL, NAN);
            else
                tun_study_finish(st->tuner, job->number, api_tun_state(state), value);
        }
    }
    pthread_mutex_unlock(&st->lock);
    free(text);
    if (rc) outcome_not_stored(job, "its end", rc);
    else api_events_wake_study(ctx, st->id);
}

static void finish(api_ctx *ctx, api_study *st, const api_job *job, sto_trial_state state, double value, double std,
                   int n, const char *error, const char *event, json_t *data) {
    finish_as(ctx, st, job, state, value, std, n, error, event, data, NULL);
}

/* Puts the trial back in the queue (its checkpoints stay), with a
 * trial_requeued event saying why (reason; error, when not NULL, the
 * failure behind it). */
static void requeue_why(api_ctx *ctx, api_study *st, const api_job *job, const char *reason, const char *error) {
    json_t *data = json_pack("{s:I, s:I, s:s}", "trial_id", (json_int_t)job->trial_id, "number",
                             (json_int_t)job->number, "reason", reason);
    if (error) json_object_set_new(data, "error", json_string(error));
    char *text = api_event_text(data);
    sto_event_in ev = {"trial_requeued", text};
    pthread_mutex_lock(&st->lock);
    int rc = sto_trial_requeue_ev(ctx->db, job->trial_id, &ev);
    pthread_mutex_unlock(&st->lock);
    free(text);
    if (rc) outcome_not_stored(job, "its requeue", rc);
    else api_events_wake_study(ctx, st->id);
}

static void requeue(api_ctx *ctx, api_study *st, const api_job *job, const char *reason) {
    requeue_why(ctx, st, job, reason, NULL);
}

int api_run_trial(api_ctx *ctx, const api_job *job, const char *slot, int threads, const atomic_int *stop) {
    api_study *st = NULL;
    sto_trial t;
    memset(&t, 0, sizeof t);
    eng_split train = {0}, val = {0};
    json_t *params = NULL, *model = NULL;
    hpo_error err = {{0}, {0}};
    run r;
    memset(&r, 0, sizeof r);
    double t0 = hpo_monotonic();
    int rc = api_study_acquire(ctx, job->study_id, &st);
    if (rc == 0) rc = sto_trial_get(ctx->db, job->trial_id, &t);
    if (rc) {
        HPO_WARN("trial %lld: cannot run: %s", (long long)job->trial_id, hpo_strerror(rc));
        api_study_release(ctx, st);
        return rc;
    }
    r.ctx = ctx;
    r.st = st;
    r.job = job;
    r.slot = slot;
    r.stop = stop;
    r.started = t0 - t.train_seconds; /* trial_timeout counts its earlier runs (paused, resumed, a pbt segment) */
    char what[40];
    snprintf(what, sizeof what, "trial %lld", (long long)job->trial_id);
    api_tb_run_init(&r.tb, ctx, st, what);
    const api_embedded *emb = &st->def.emb;
    int executions = emb->executions < 1 ? 1 : emb->executions > MAX_EXECUTIONS ? MAX_EXECUTIONS : emb->executions;
    double values[MAX_EXECUTIONS];
    params = json_loads(t.params, 0, NULL);
    if (job->resumed) load_curves(&r);
    rc = params ? api_model_expand(emb->model, params, st->def.space, &model, &err) : HPO_EINTERNAL;
    r.model = model;
    r.params = params;
    if (rc == 0) rc = api_pbt_prepare(ctx, st, &t, &err);
    if (rc == 0) rc = api_open_splits(ctx, emb, &train, &val, &err);
    for (int e = 0; rc == 0 && e < executions; e++)
        rc = run_execution(&r, e, model, params, &train, &val, threads, &values[e], &err);
    double secs = hpo_monotonic() - t0;
    int best_epoch = rc == 0 || r.pruned ? mean_best_epoch(&r, rc == 0 ? executions : 1) : 0;
    int lost = (rc == HPO_ECONFLICT && r.store_rc == HPO_ECONFLICT) ||
               (rc == HPO_ECANCELLED && r.stopped == API_STOP_LOST);
    if (!lost) sto_trial_set_training(ctx->db, job->trial_id, best_epoch, secs);

    if (rc == HPO_ENOTFOUND && r.store_rc == HPO_ENOTFOUND) {
        outcome_not_stored(job, "its epoch", rc); /* deleted with its study */
    } else if (lost) {
        /* this node was found dead and the trial went to another one, which
         * resumes it from its checkpoint: nothing of this run is stored */
        HPO_WARN("trial %lld: it runs on another node now; this run stores nothing", (long long)job->trial_id);
    } else if (rc && rc == r.store_rc && rc != HPO_ENOSPACE) {
        /* an epoch could not be stored: not the trial's fault either; it
         * resumes from its last checkpoint (if it is still this node's)
         * after the back-off, and fails when it happened
         * API_MAX_STORE_FAILURES times in a row (a damaged database page
         * does not heal) */
        const char *why = err.message[0] ? err.message : hpo_strerror(rc);
        int times = api_epoch_not_stored(ctx, job->trial_id, why);
        if (times >= API_MAX_STORE_FAILURES) {
            char msg[640];
            snprintf(msg, sizeof msg, "its epochs could not be stored %d times in a row: %s", times, why);
            HPO_ERROR("trial %lld: %s: failed", (long long)job->trial_id, msg);
            api_epoch_stored(ctx, job->trial_id); /* its count is done */
            finish(ctx, st, job, STO_TRIAL_FAILED, NAN, NAN, 0, msg, "trial_failed", json_object());
        } else {
            HPO_WARN("trial %lld: an epoch could not be stored (%s): queued again", (long long)job->trial_id, why);
            requeue_why(ctx, st, job, "epoch not stored", why);
        }
    } else if (rc == HPO_ENOSPACE) {
        /* not the trial's fault: it resumes from its last checkpoint once
         * the back-off has passed, and the study goes on */
        HPO_WARN("trial %lld: the data disk is full (%s): queued again", (long long)job->trial_id,
                 err.message[0] ? err.message : hpo_strerror(rc));
        requeue(ctx, st, job, "disk full");
        api_disk_full(ctx);
    } else if (rc == HPO_EFS) {
        /* the file system failed under the trial's own files (a checkpoint,
         * its folder, a result file: permission denied, read-only, an I/O
         * error, a stale network mount), not the trial: as on a full disk
         * it resumes from its last checkpoint after the back-off, and the
         * study is not charged for it */
        const char *why = err.message[0] ? err.message : hpo_strerror(rc);
        HPO_WARN("trial %lld: its files failed (%s): queued again", (long long)job->trial_id, why);
        requeue_why(ctx, st, job, "file system error", why);
        api_files_failed(ctx, why);
    } else if (rc == 0) {
        double mean, std;
        tun_mean_std(values, executions, &mean, &std);
        api_outcome o = {0};
        hpo_error oerr = {{0}, {0}};
        if (!isfinite(mean)) {
            finish(ctx, st, job, STO_TRIAL_FAILED, NAN, NAN, 0, "the objective metric was never finite",
                   "trial_failed", json_object());
        } else if (st->def.multi && api_emb_outcome(ctx, &st->def, job->trial_id, best_epoch, model, params, secs, &o,
                                                    &oerr)) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s%s%s%s", oerr.message, oerr.field[0] ? " (" : "", oerr.field,
                     oerr.field[0] ? ")" : "");
            finish(ctx, st, job, STO_TRIAL_FAILED, NAN, NAN, 0, msg, "trial_failed", json_object());
        } else if (st->def.multi) {
            json_t *vals = json_loads(o.values_json, 0, NULL);
            finish_as(ctx, st, job, STO_TRIAL_COMPLETE, o.value, o.value_std, o.value_n, NULL, "trial_complete",
                      json_pack("{s:f, s:o, s:o, s:i, s:i, s:f}", "value", o.value, "value_std",
                                api_json_real(o.value_std), "values", vals ? vals : json_null(), "value_n", o.value_n,
                                "best_epoch", best_epoch, "seconds", secs),
                      &o);
        } else {
            finish(ctx, st, job, STO_TRIAL_COMPLETE, mean, std, executions, NULL, "trial_complete",
                   json_pack("{s:f, s:o, s:i, s:i, s:f}", "value", mean, "value_std", api_json_real(std),
                             "value_n", executions, "best_epoch", best_epoch, "seconds", secs));
        }
        api_outcome_clear(&o);
    } else if (rc == HPO_ECANCELLED && r.boundary) { /* waits to be ranked there (pbt.c) */
        requeue(ctx, st, job, "pbt boundary");
    } else if (rc == HPO_ECANCELLED && r.pruned) {
        finish(ctx, st, job, STO_TRIAL_PRUNED, NAN, NAN, 0, NULL, "trial_pruned",
               json_pack("{s:i, s:f}", "best_epoch", best_epoch, "seconds", secs));
    } else if (rc == HPO_ECANCELLED && (r.stopped == API_STOP_PAUSE || r.stopped == API_STOP_SHUTDOWN)) {
        requeue(ctx, st, job, r.stopped == API_STOP_PAUSE ? "study paused" : "hpod shutting down");
    } else if (rc == HPO_ECANCELLED && r.stopped == API_STOP_CANCEL) {
        finish(ctx, st, job, STO_TRIAL_CANCELLED, NAN, NAN, 0, "study cancelled", "trial_cancelled", json_object());
    } else if (rc == HPO_ECANCELLED && r.stopped == API_STOP_TIMEOUT) {
        char msg[128];
        snprintf(msg, sizeof msg, "timed out after %.0f s (trial_timeout)", job->timeout);
        finish(ctx, st, job, STO_TRIAL_FAILED, NAN, NAN, 0, msg, "trial_failed", json_object());
    } else { /* a failure is data: diverged, a template that does not fit these params, ... */
        char msg[600];
        snprintf(msg, sizeof msg, "%s%s%s%s", err.message[0] ? err.message : hpo_strerror(rc),
                 err.field[0] ? " (" : "", err.field, err.field[0] ? ")" : "");
        finish(ctx, st, job, STO_TRIAL_FAILED, NAN, NAN, 0, msg, "trial_failed",
               json_pack("{s:s}", "reason", hpo_errname(rc)));
    }
    HPO_INFO("trial %lld (study %lld #%lld) on %s ended after %.1f s: %s", (long long)job->trial_id,
             (long long)job->study_id, (long long)job->number, slot, secs,
             rc == 0 ? "complete" : r.pruned ? "pruned" : r.stopped ? "stopped" : hpo_strerror(rc));
    int requeued = lost || rc == HPO_ENOSPACE || rc == HPO_EFS ||
                   (rc == HPO_ECANCELLED && (r.boundary || r.stopped == API_STOP_PAUSE || r.stopped == API_STOP_SHUTDOWN));
    /* disk stays bounded: only the best trials keep their checkpoints; a
     * trial whose study was deleted meanwhile keeps nothing */
    sto_trial gone;
    int got = sto_trial_get(ctx->db, job->trial_id, &gone);
    if (got == HPO_ENOTFOUND) {
        char dir[API_PATH_MAX];
        if (api_dir_trial(dir, ctx->opt.data_dir, job->trial_id) == 0) api_dir_remove(dir);
        api_tb_run_clear(&r.tb); /* its events too, if written after the study's files went */
        if (api_dir_study(dir, ctx->opt.data_dir, job->study_id) == 0) api_dir_remove(dir);
    } else if (got == 0) { /* (another error, the database gone a moment: the next trial prunes) */
        sto_trial_clear(&gone);
        /* a pbt member waiting at a boundary prunes too: the members replaced
         * at earlier boundaries are no donors any more (pbt.c) */
        sto_trial *all = NULL;
        size_t n_all = 0;
        /* the trials first, then what to keep: a trial that finishes in
         * between (on another slot) is not among those removed */
        if ((!requeued || r.boundary) && sto_trial_list(ctx->db, job->study_id, NULL, &all, &n_all) == 0) {
            int64_t *keep = NULL;
            size_t n_keep = checkpoints_kept(ctx, st, &keep);
            api_dir_prune_checkpoints(ctx->opt.data_dir, all, n_all, api_pbt_keep_from(ctx, st), keep, n_keep);
            free(keep);
            sto_trial_list_free(all, n_all);
        }
    }
    api_tb_run_clear(&r.tb);
    for (int e = 0; e < MAX_EXECUTIONS; e++) free(r.curve[e]);
    free(r.secs0);
    json_decref(r.figures);
    eng_split_clear(&train);
    eng_split_clear(&val);
    json_decref(model);
    json_decref(params);
    sto_trial_clear(&t);
    api_study_release(ctx, st);
    return 0;
}
