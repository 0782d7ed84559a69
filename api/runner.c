/* runner.c - runs one trial of an embedded study on a worker thread: builds
 * the model from the template and the trial's params, trains each execution
 * with the engine, stores every epoch's metrics (the learning curves),
 * reports the objective to the pruner after every epoch, and records the
 * outcome. Executions resume from their checkpoints after a pause or a
 * restart; a finished execution leaves a small result file so it is not
 * trained again. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "internal.h"
#include "model.h"
#include "train.h"

#define MAX_EXECUTIONS 16
#define MAX_EPOCHS 100000

/* One trial's run: what the epoch callback needs. */
typedef struct run {
    api_ctx *ctx;
    api_study *st;
    const api_job *job;
    const volatile int *stop;
    int execution;
    double *curve[MAX_EXECUTIONS]; /* objective per epoch (1-based), NaN when unknown */
    int curve_len[MAX_EXECUTIONS];
    int pruned;
    int stopped; /* API_STOP_* seen by the callback */
    int epochs_seen; /* callbacks of the current execution */
    double started;  /* monotonic start of this run, for job->timeout */
} run;

void api_checkpoint_dir(api_ctx *ctx, int64_t trial_id, char *out, size_t n) {
    snprintf(out, n, "%s/checkpoints/trial-%lld", ctx->opt.data_dir, (long long)trial_id);
}

static void mkdirs(api_ctx *ctx, const char *dir) {
    char parent[1024];
    snprintf(parent, sizeof parent, "%s/checkpoints", ctx->opt.data_dir);
    mkdir(parent, 0755);
    mkdir(dir, 0755);
}

/* The objective metric of an epoch report. */
static double objective_of(const api_study *st, const eng_metrics *train, const eng_metrics *val, int has_val) {
    const char *metric = st->def.metric;
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

static void curve_set(run *r, int e, int epoch, double v) {
    if (epoch < 1 || epoch > MAX_EPOCHS) return;
    if (epoch > r->curve_len[e]) {
        r->curve[e] = hpo_xrealloc(r->curve[e], (size_t)epoch * sizeof(double));
        for (int i = r->curve_len[e]; i < epoch; i++) r->curve[e][i] = NAN;
        r->curve_len[e] = epoch;
    }
    r->curve[e][epoch - 1] = v;
}

static int on_epoch(const eng_epoch_report *rep, void *user) {
    run *r = user;
    api_study *st = r->st;
    if (r->epochs_seen++ == 0 && rep->epoch > 1) /* the engine resumed from a checkpoint */
        api_event(r->ctx, r->job->study_id, r->job->trial_id, "execution_resumed",
                  json_pack("{s:I, s:I, s:i, s:i}", "trial_id", (json_int_t)r->job->trial_id, "number",
                            (json_int_t)r->job->number, "execution", r->execution, "from_epoch", rep->epoch - 1));
    json_t *m = metrics_json(rep);
    char *text = json_dumps(m, JSON_COMPACT);
    sto_epoch_put(r->ctx->db, r->job->trial_id, r->execution, rep->epoch, text);
    free(text);
    double v = objective_of(st, &rep->train, &rep->val, rep->has_val);
    curve_set(r, r->execution, rep->epoch, v);
    int prune = 0;
    if (r->execution == 0 && isfinite(v)) { /* the pruner watches the first execution */
        pthread_mutex_lock(&st->lock);
        if (sto_trial_report(r->ctx->db, r->job->trial_id, rep->epoch, v, 0) == 0)
            tun_study_report(st->tuner, r->job->number, rep->epoch, v, &prune);
        pthread_mutex_unlock(&st->lock);
    }
    api_event(r->ctx, r->job->study_id, r->job->trial_id, "epoch",
              json_pack("{s:I, s:I, s:i, s:i, s:i, s:o, s:o}", "trial_id", (json_int_t)r->job->trial_id,
                        "number", (json_int_t)r->job->number, "execution", r->execution, "epoch", rep->epoch,
                        "epochs", rep->epochs, "value", api_json_real(v), "metrics", m));
    if (prune) r->pruned = 1;
    r->stopped = *r->stop;
    /* the scheduler's timer stops a trial too, but only once a second:
     * checking here ends it at the first epoch past its time */
    if (!r->stopped && r->job->timeout > 0 && hpo_monotonic() - r->started > r->job->timeout)
        r->stopped = API_STOP_TIMEOUT;
    return prune || r->stopped;
}

/* The result file of a finished execution: {"best": v, "best_epoch": k}. */
static void done_path(api_ctx *ctx, int64_t trial_id, int e, char *out, size_t n) {
    char dir[900];
    api_checkpoint_dir(ctx, trial_id, dir, sizeof dir);
    snprintf(out, n, "%s/exec-%d.done.json", dir, e);
}

/* Loads the stored curves of a resumed trial. */
static void load_curves(run *r) {
    sto_epoch *eps = NULL;
    size_t n = 0;
    if (sto_trial_epochs(r->ctx->db, r->job->trial_id, &eps, &n)) return;
    for (size_t i = 0; i < n; i++) {
        if (eps[i].execution < 0 || eps[i].execution >= MAX_EXECUTIONS) continue;
        json_t *m = json_loads(eps[i].metrics, 0, NULL);
        const char *metric = r->st->def.metric;
        json_t *v = json_object_get(m, metric);
        if (!v && strncmp(metric, "val_", 4) == 0) v = json_object_get(m, metric + 4);
        if (json_is_number(v)) curve_set(r, eps[i].execution, (int)eps[i].epoch, json_number_value(v));
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
        if (isnan(best) || (st->def.maximize ? c[i] > best : c[i] < best)) {
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
        if (ok && (isnan(best) || (r->st->def.maximize ? v > best : v < best))) {
            best = v;
            best_epoch = k + 1;
        }
    }
    return best_epoch;
}

uint64_t api_seed_mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    return z ^ (z >> 31);
}

/* Trains execution e; *value gets its best objective. 0, HPO_ECANCELLED
 * when stopped (pruned or told to), or an error (the trial fails). */
static int run_execution(run *r, int e, const json_t *model_tmpl, const json_t *params, const eng_split *train,
                         const eng_split *val, int threads, double *value, hpo_error *err) {
    api_study *st = r->st;
    const api_embedded *emb = &st->def.emb;
    char dir[900], done[1024], name[64];
    api_checkpoint_dir(r->ctx, r->job->trial_id, dir, sizeof dir);
    done_path(r->ctx, r->job->trial_id, e, done, sizeof done);
    int best_epoch = 0;
    json_t *prev = json_load_file(done, 0, NULL);
    if (prev) { /* finished before a restart */
        *value = json_number_value(json_object_get(prev, "best"));
        json_decref(prev);
        return 0;
    }
    mkdirs(r->ctx, dir);
    snprintf(name, sizeof name, "exec-%d.safetensors", e);
    eng_model *m = NULL;
    uint64_t seed = api_seed_mix(api_seed_mix(st->def.tuner.seed, (uint64_t)r->job->number), (uint64_t)e);
    int rc = eng_model_new(model_tmpl, params, emb->in_rank, emb->in_shape, emb->n_classes, seed, &m, err);
    if (rc) return rc;
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.epochs = emb->max_epochs;
    o.batch_size = emb->batch_size;
    o.threads = threads;
    o.seed = seed;
    o.precision = emb->precision;
    o.patience = emb->patience;
    o.monitor = emb->monitor;
    o.min_delta = emb->min_delta;
    /* The checkpoint always keeps the best epoch's weights too: a model taken
     * from the trial (POST /trials/{id}/model, ensembles) uses them. */
    o.restore_best = 1;
    o.checkpoint_dir = dir;
    o.checkpoint_name = name;
    o.resume = 1;
    o.checkpoint_durable = r->ctx->opt.durable_checkpoints;
    o.prefetch = 1;
    o.on_epoch = on_epoch;
    o.user = r;
    r->execution = e;
    r->epochs_seen = 0;
    eng_train_result res;
    rc = eng_train(m, train, val, &o, &res, err);
    eng_model_free(m);
    if (rc) return rc;
    if (r->pruned || r->stopped) return HPO_ECANCELLED;
    *value = e < MAX_EXECUTIONS ? best_of(st, r->curve[e], r->curve_len[e], &best_epoch) : NAN;
    json_t *d = json_pack("{s:o, s:i, s:i}", "best", api_json_real(*value), "best_epoch", best_epoch, "epochs",
                          res.epochs_run);
    json_dump_file(d, done, JSON_COMPACT);
    json_decref(d);
    return 0;
}

int api_open_splits(api_ctx *ctx, const api_embedded *emb, eng_split *train, eng_split *val, hpo_error *err) {
    eng_dataset *ds = NULL;
    int rc = api_dataset_open(ctx, emb->dataset, "train", &ds, err);
    if (rc) return rc;
    eng_split_spec spec = {0};
    if (emb->validation_split >= 1)
        spec.val_count = (size_t)emb->validation_split;
    else
        spec.val_fraction = emb->validation_split;
    spec.mode = ENG_SPLIT_TAIL;
    spec.limit = (size_t)emb->limit;
    spec.val_limit = (size_t)emb->validation_limit;
    rc = eng_split_make(ds, &spec, train, val, err);
    eng_dataset_unref(ds);
    return rc;
}

static void finish(api_ctx *ctx, api_study *st, const api_job *job, sto_trial_state state, double value, double std,
                   int n, const char *error, const char *event, json_t *data) {
    pthread_mutex_lock(&st->lock);
    int rc = sto_trial_finish(ctx->db, job->trial_id, state, value, std, n, error);
    if (rc == 0) {
        sto_trial t;
        if (state == STO_TRIAL_PRUNED && sto_trial_get(ctx->db, job->trial_id, &t) == 0) {
            value = t.value; /* storage kept the last intermediate */
            sto_trial_clear(&t);
        }
        tun_study_finish(st->tuner, job->number, api_tun_state(state), value);
    }
    pthread_mutex_unlock(&st->lock);
    if (rc) HPO_WARN("trial %lld: could not record its end: %s", (long long)job->trial_id, hpo_strerror(rc));
    json_object_set_new(data, "trial_id", json_integer(job->trial_id));
    json_object_set_new(data, "number", json_integer(job->number));
    json_object_set_new(data, "state", json_string(sto_trial_state_name(state)));
    if (error) json_object_set_new(data, "error", json_string(error));
    api_event(ctx, job->study_id, job->trial_id, event, data);
}

int api_run_trial(api_ctx *ctx, const api_job *job, const char *slot, int threads, const volatile int *stop) {
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
    r.stop = stop;
    r.started = t0;
    const api_embedded *emb = &st->def.emb;
    int executions = emb->executions < 1 ? 1 : emb->executions > MAX_EXECUTIONS ? MAX_EXECUTIONS : emb->executions;
    double values[MAX_EXECUTIONS];
    params = json_loads(t.params, 0, NULL);
    if (job->resumed) load_curves(&r);
    rc = params ? api_model_expand(emb->model, params, st->def.space, &model, &err) : HPO_EINTERNAL;
    if (rc == 0) rc = api_open_splits(ctx, emb, &train, &val, &err);
    for (int e = 0; rc == 0 && e < executions; e++)
        rc = run_execution(&r, e, model, params, &train, &val, threads, &values[e], &err);
    double secs = hpo_monotonic() - t0;
    int best_epoch = rc == 0 || r.pruned ? mean_best_epoch(&r, rc == 0 ? executions : 1) : 0;
    sto_trial_set_training(ctx->db, job->trial_id, best_epoch, secs);

    if (rc == 0) {
        double mean, std;
        tun_mean_std(values, executions, &mean, &std);
        if (!isfinite(mean)) {
            finish(ctx, st, job, STO_TRIAL_FAILED, NAN, NAN, 0, "the objective metric was never finite",
                   "trial_failed", json_object());
        } else {
            finish(ctx, st, job, STO_TRIAL_COMPLETE, mean, std, executions, NULL, "trial_complete",
                   json_pack("{s:f, s:o, s:i, s:i, s:f}", "value", mean, "value_std", api_json_real(std),
                             "value_n", executions, "best_epoch", best_epoch, "seconds", secs));
        }
    } else if (rc == HPO_ECANCELLED && r.pruned) {
        finish(ctx, st, job, STO_TRIAL_PRUNED, NAN, NAN, 0, NULL, "trial_pruned",
               json_pack("{s:i, s:f}", "best_epoch", best_epoch, "seconds", secs));
    } else if (rc == HPO_ECANCELLED && (r.stopped == API_STOP_PAUSE || r.stopped == API_STOP_SHUTDOWN)) {
        pthread_mutex_lock(&st->lock);
        sto_trial_requeue(ctx->db, job->trial_id);
        pthread_mutex_unlock(&st->lock);
        api_event(ctx, job->study_id, job->trial_id, "trial_requeued",
                  json_pack("{s:I, s:I, s:s}", "trial_id", (json_int_t)job->trial_id, "number",
                            (json_int_t)job->number, "reason",
                            r.stopped == API_STOP_PAUSE ? "study paused" : "hpod shutting down"));
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
    /* disk stays bounded: only the best trials keep their checkpoints; a
     * trial whose study was deleted meanwhile keeps nothing */
    sto_trial gone;
    if (sto_trial_get(ctx->db, job->trial_id, &gone) == HPO_ENOTFOUND) {
        char dir[900];
        api_checkpoint_dir(ctx, job->trial_id, dir, sizeof dir);
        api_remove_dir(dir);
    } else {
        sto_trial_clear(&gone);
        if (!(rc == HPO_ECANCELLED && (r.stopped == API_STOP_PAUSE || r.stopped == API_STOP_SHUTDOWN)))
            api_prune_checkpoints(ctx, job->study_id, st->def.maximize, API_KEEP_CHECKPOINTS);
    }
    for (int e = 0; e < MAX_EXECUTIONS; e++) free(r.curve[e]);
    eng_split_close(&train);
    eng_split_close(&val);
    json_decref(model);
    json_decref(params);
    sto_trial_clear(&t);
    api_study_release(ctx, st);
    return 0;
}
