/* job_model.c - the worker side of refits, models and ensembles: the last
 * steps of the KerasTuner workflow, run as jobs on the worker pool.
 *
 * - refit: the trial's configuration retrained on train+validation for
 *   ceil(epochs_factor x best_epoch) epochs (the spec says how many), then
 *   evaluated on the test split; its weights are exported.
 * - trial: the trial's own best-epoch weights (its checkpoint), evaluated on
 *   validation and test; exported too (KerasTuner's get_best_models).
 * - ensemble: members' predictions combined by mean, weights fitted with
 *   Nelder-Mead, or greedy selection. Weights are fitted on VALIDATION
 *   predictions of the search-phase models (each member's origin trial
 *   checkpoint, trained on the training split only), never on the test
 *   split; the members themselves (refits or trial models) are evaluated on
 *   the test split. A member that cannot be used is skipped with its reason.
 * The test split is touched only here: tuning never sees it.
 * A full disk, a file system failing under its files or a shutdown queues
 * the job again (HPO_ENOSPACE, HPO_EFS, see jobs.h); a job whose study was
 * deleted meanwhile stores nothing and removes its files, and so does one
 * that went to another node (this one was found dead: API_STOP_LOST). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "ensemble.h"
#include "jobs_internal.h"
#include "model.h"
#include "train.h"
#include "weights.h"

#define MAX_MEMBERS 64

static json_t *metrics_json(const eng_metrics *m, int classify) {
    if (classify) return json_pack("{s:o, s:o}", "loss", api_json_real(m->loss), "accuracy", api_json_real(m->accuracy));
    return json_pack("{s:o, s:o, s:o}", "loss", api_json_real(m->loss), "mse", api_json_real(m->mse), "mae",
                     api_json_real(m->mae));
}




/* The metadata that lets the weights be used outside hpod: "input_scale"
 * (what a raw input value is multiplied by before the first layer: 1/255
 * for uint8 images, 1 otherwise) and "classes" (class k's label, when the
 * dataset named its classes, e.g. a CSV of species). */
static void add_data_meta(api_ctx *ctx, const api_study *st, json_t *meta) {
    eng_dataset *ds = NULL;
    hpo_error derr = {{0}, {0}};
    if (api_dataset_open(ctx, st->def.emb.dataset, "train", &ds, &derr)) return; /* it trained on it: cached */
    json_object_set_new(meta, "input_scale", json_real(ds->x_scale));
    if (ds->class_names) {
        json_t *classes = json_array();
        for (int k = 0; k < ds->n_classes; k++) json_array_append_new(classes, api_json_string_lossy(ds->class_names[k]));
        json_object_set_new(meta, "classes", classes);
    }
    eng_dataset_release(ds);
}

/* Exports m's weights as models/model-<id>.safetensors under the data dir;
 * *rel gets the path relative to the data dir (malloc'd). */
static int export(api_ctx *ctx, const api_study *st, int64_t model_id, const eng_model *m, int64_t trial_id,
                  const char *kind, hpo_error *err, char **rel) {
    const char *root = ctx->opt.data_dir;
    char dir[API_PATH_MAX], path[API_PATH_MAX], relpath[128];
    if (api_dir_models(dir, root) || api_dir_model_file_rel(relpath, sizeof relpath, model_id) ||
        api_dir_file(path, root, relpath))
        return hpo_fail(err, HPO_EINVAL, "", "the models folder's path is too long");
    int rc = api_dir_make(root, dir, err);
    if (rc) return rc;
    sto_trial t;
    json_t *params = NULL, *model = NULL;
    rc = api_trial_template(ctx, st, trial_id, &t, &params, &model, err);
    if (rc) return rc;
    char study[32], trial[32];
    snprintf(study, sizeof study, "%lld", (long long)st->id);
    snprintf(trial, sizeof trial, "%lld", (long long)trial_id);
    json_t *meta = json_pack("{s:o, s:o, s:s, s:s, s:s, s:i}", "template", model, "params", params, "study", study,
                             "trial", trial, "kind", kind, "n_classes", st->def.emb.n_classes);
    add_data_meta(ctx, st, meta);
    rc = eng_model_export_weights(m, path, meta, err);
    json_decref(meta);
    sto_trial_clear(&t);
    if (rc == 0) *rel = hpo_strdup(relpath);
    return rc;
}

typedef struct refit_progress {
    api_ctx *ctx;
    int64_t study_id, model_id, trial_id;
    const atomic_int *stop;
    int stopped;
    api_tb_run *tb; /* training.tensorboard */
} refit_progress;

static int on_refit_epoch(const eng_epoch_report *r, void *user) {
    refit_progress *p = user;
    /* taken from this node (found dead): nothing more of this run is
     * stored, and the crash counter is the new run's (as a trial's) */
    if (atomic_load(p->stop) == API_STOP_LOST) return p->stopped = API_STOP_LOST;
    api_event(p->ctx, p->study_id, p->trial_id, "model_epoch",
              json_pack("{s:I, s:i, s:i, s:o}", "model_id", (json_int_t)p->model_id, "epoch", r->epoch, "epochs",
                        r->epochs, "loss", api_json_real(r->train.loss)));
    api_tb_run_epoch(p->tb, r);
    api_model_job_epoch(p->ctx->opt.data_dir, p->model_id); /* progress: not a crash loop */
    p->stopped = atomic_load(p->stop);
    return p->stopped;
}

static int run_refit(api_ctx *ctx, api_study *st, const sto_model *mrow, const char *slot, int threads,
                     const atomic_int *stop, json_t *result, char **rel, hpo_error *err) {
    const api_embedded *emb = &st->def.emb;
    json_t *spec = json_loads(mrow->spec, 0, NULL);
    int epochs = (int)json_integer_value(json_object_get(spec, "epochs"));
    json_decref(spec);
    if (epochs < 1) return hpo_fail(err, HPO_EINVAL, "epochs", "the refit has no epoch count");
    sto_trial t;
    json_t *params = NULL, *model = NULL;
    eng_split train = {0}, val = {0}, all = {0}, test = {0};
    eng_model *m = NULL;
    int rc = api_trial_template(ctx, st, mrow->trial_id, &t, &params, &model, err);
    if (rc) return rc;
    if ((rc = api_open_splits(ctx, emb, &train, &val, err))) goto done;
    if ((rc = eng_split_concat(&train, &val, &all))) goto done;
    uint64_t seed = api_seed_mix(api_seed_mix(st->def.tuner.seed, (uint64_t)t.number), 0x7e517 + (uint64_t)mrow->id);
    if ((rc = eng_model_new_shape(model, params, emb->in_rank, emb->in_shape, emb->n_classes, &m, err))) goto done;
    /* checkpoints/model-<id>/refit.safetensors: a restart resumes the refit */
    char ckdir[API_PATH_MAX], ckname[] = "refit.safetensors";
    if (api_dir_model_checkpoint(ckdir, ctx->opt.data_dir, mrow->id)) {
        rc = hpo_fail(err, HPO_EINVAL, "", "the refit's checkpoint path is too long");
        goto done;
    }
    if ((rc = api_dir_make(ctx->opt.data_dir, ckdir, err))) goto done;
    char what[40], tbdir[API_PATH_MAX];
    snprintf(what, sizeof what, "model %lld", (long long)mrow->id);
    api_tb_run tb;
    api_tb_run_init(&tb, ctx, st, what);
    if (api_dir_tensorboard_refit(tbdir, ctx->opt.data_dir, st->id, mrow->id) == 0) api_tb_run_select(&tb, tbdir);
    refit_progress prog = {ctx, st->id, mrow->id, mrow->trial_id, stop, 0, &tb};
    /* the trials' training options (precision, steps_per_execution, TF32,
     * budget, checkpoints resumed), without early stopping or a best epoch
     * to go back to: a fixed number of epochs on train + validation */
    eng_train_opts o;
    api_trial_train_opts(ctx, emb, threads, &o);
    o.epochs = epochs;
    o.seed = seed;
    o.patience = -1;
    o.monitor = "loss";
    o.min_delta = 0;
    o.restore_best = 0;
    o.checkpoint_dir = ckdir;
    o.checkpoint_name = ckname;
    o.on_epoch = on_refit_epoch;
    o.user = &prog;
    api_slot_train_opts(slot, emb, &o); /* a CUDA slot trains it on its GPU */
    /* the budget before the parameters exist (as for trials, job_trial.c) */
    if ((rc = eng_train_check_budget(m, &o, NULL, err)) || (rc = eng_model_alloc(m, seed, err))) goto done;
    eng_train_result res;
    double t0 = hpo_monotonic();
    rc = eng_train(m, &all, NULL, &o, &res, err);
    api_tb_run_clear(&tb);
    if (rc) goto done;
    if (prog.stopped) {
        rc = hpo_fail(err, HPO_ECANCELLED, "", "stopped");
        goto done;
    }
    int classify = emb->n_classes > 0;
    json_object_set_new(result, "epochs", json_integer(epochs));
    json_object_set_new(result, "train_rows", json_integer((json_int_t)all.n));
    json_object_set_new(result, "train", metrics_json(&res.train, classify));
    json_object_set_new(result, "seconds", json_real(hpo_monotonic() - t0));
    hpo_error terr = {{0}, {0}};
    if (api_open_test(ctx, emb, &test, &terr) == 0) {
        eng_metrics tm;
        if ((rc = eng_evaluate(m, &test, emb->batch_size, &tm, err))) goto done;
        json_object_set_new(result, "test", metrics_json(&tm, classify));
        json_object_set_new(result, "test_rows", json_integer((json_int_t)test.n));
    } else {
        json_object_set_new(result, "test", json_null());
        json_object_set_new(result, "test_error", json_string(terr.message));
    }
    rc = export(ctx, st, mrow->id, m, mrow->trial_id, "refit", err, rel);
    if (rc == 0) api_dir_remove(ckdir); /* the refit's own checkpoint is no longer needed */
done:
    eng_model_free(m);
    eng_split_clear(&train);
    eng_split_clear(&val);
    eng_split_clear(&all);
    eng_split_clear(&test);
    json_decref(params);
    json_decref(model);
    sto_trial_clear(&t);
    return rc;
}

static int run_trial_model(api_ctx *ctx, api_study *st, const sto_model *mrow, json_t *result, char **rel,
                           hpo_error *err) {
    const api_embedded *emb = &st->def.emb;
    eng_model *m = NULL;
    eng_split train = {0}, val = {0}, test = {0};
    int rc = api_trial_model(ctx, st, mrow->trial_id, &m, err);
    if (rc) return rc;
    int classify = emb->n_classes > 0;
    if ((rc = api_open_splits(ctx, emb, &train, &val, err))) goto done;
    eng_metrics vm, tm;
    if ((rc = eng_evaluate(m, &val, emb->batch_size, &vm, err))) goto done;
    json_object_set_new(result, "val", metrics_json(&vm, classify));
    hpo_error terr = {{0}, {0}};
    if (api_open_test(ctx, emb, &test, &terr) == 0) {
        if ((rc = eng_evaluate(m, &test, emb->batch_size, &tm, err))) goto done;
        json_object_set_new(result, "test", metrics_json(&tm, classify));
    } else {
        json_object_set_new(result, "test", json_null());
        json_object_set_new(result, "test_error", json_string(terr.message));
    }
    rc = export(ctx, st, mrow->id, m, mrow->trial_id, "trial", err, rel);
done:
    eng_model_free(m);
    eng_split_clear(&train);
    eng_split_clear(&val);
    eng_split_clear(&test);
    return rc;
}

/* The index of the first non-finite value of p[0..n), or n. */
static size_t first_not_finite(const float *p, size_t n) {
    size_t i = 0;
    while (i < n && isfinite(p[i])) i++;
    return i;
}

/* 0, or why a member's predictions of a split (rows x k) cannot enter an
 * ensemble: a non-finite value (a diverged model, a NaN feature). */
static int finite_predictions(const float *p, size_t rows, int k, const char *split, hpo_error *err) {
    size_t bad = first_not_finite(p, rows * (size_t)k);
    if (bad == rows * (size_t)k) return 0;
    return hpo_fail(err, HPO_EINVAL, "members", "its %s predictions are not finite (sample %zu, output %zu)", split,
                    bad / (size_t)k, bad % (size_t)k);
}

/* The labels (or targets) of a split: *labels or *targets malloc'd. */
static void split_truth(const eng_split *s, int32_t **labels, float **targets) {
    const eng_dataset *ds = s->ds;
    *labels = NULL;
    *targets = NULL;
    if (ds->y_type == ENG_DATA_Y_CLASS) {
        *labels = hpo_xmalloc(s->n * sizeof(int32_t));
        for (size_t i = 0; i < s->n; i++) (*labels)[i] = ds->y_class[s->idx[i]];
    } else {
        *targets = hpo_xmalloc(s->n * ds->y_dim * sizeof(float));
        for (size_t i = 0; i < s->n; i++)
            memcpy(*targets + i * ds->y_dim, ds->y_target + (size_t)s->idx[i] * ds->y_dim, ds->y_dim * sizeof(float));
    }
}


static int run_ensemble(api_ctx *ctx, api_study *st, const sto_model *mrow, json_t *result, hpo_error *err) {
    const api_embedded *emb = &st->def.emb;
    json_t *spec = json_loads(mrow->spec, 0, NULL);
    const char *method = json_string_value(json_object_get(spec, "method"));
    json_t *members = json_object_get(spec, "members");
    int rounds = (int)json_integer_value(json_object_get(spec, "rounds"));
    eng_split train = {0}, val = {0}, test = {0};
    int32_t *val_labels = NULL, *test_labels = NULL;
    float *val_targets = NULL, *test_targets = NULL;
    float *vp[MAX_MEMBERS] = {0}, *tp[MAX_MEMBERS] = {0};
    int used[MAX_MEMBERS];
    int M = 0, K = 0;
    json_t *out_members = json_array();
    int classify = emb->n_classes > 0;
    hpo_error terr = {{0}, {0}};
    int rc = api_open_splits(ctx, emb, &train, &val, err);
    if (rc) goto done;
    int have_test = api_open_test(ctx, emb, &test, &terr) == 0;
    split_truth(&val, &val_labels, &val_targets);
    if (have_test) split_truth(&test, &test_labels, &test_targets);
    size_t i;
    json_t *member;
    json_array_foreach(members, i, member) {
        json_t *row = json_deep_copy(member);
        json_array_append_new(out_members, row);
        if (M >= MAX_MEMBERS) {
            json_object_set_new(row, "skipped", json_string("too many members"));
            continue;
        }
        hpo_error merr = {{0}, {0}};
        eng_model *search = NULL, *final = NULL;
        int64_t tid = 0;
        int mrc = api_member_model(ctx, st, member, &final, &tid, &merr);
        if (mrc == 0) mrc = api_trial_model(ctx, st, tid, &search, &merr); /* its search-phase counterpart */
        if (mrc == 0 && K && final->out_dim != K)
            mrc = hpo_fail(&merr, HPO_ESHAPE, "members", "its output width %d differs from the others' %d",
                           final->out_dim, K);
        float *v = NULL, *t = NULL;
        if (mrc == HPO_EFS) { /* the file system failed, not the member: the job runs again later */
            eng_model_free(search);
            eng_model_free(final);
            *err = merr;
            rc = mrc;
            goto done;
        }
        if (mrc == 0) {
            int k = final->out_dim;
            v = hpo_xmalloc(val.n * (size_t)k * sizeof(float));
            mrc = eng_predict_split(search, &val, emb->batch_size, v, &merr);
            if (mrc == 0) mrc = finite_predictions(v, val.n, k, "validation", &merr);
            if (mrc == 0 && have_test) {
                t = hpo_xmalloc(test.n * (size_t)k * sizeof(float));
                mrc = eng_predict_split(final, &test, emb->batch_size, t, &merr);
                if (mrc == 0) mrc = finite_predictions(t, test.n, k, "test", &merr);
            }
        }
        if (mrc == 0) {
            K = final->out_dim;
            vp[M] = v;
            tp[M] = t;
            used[M] = (int)i;
            json_object_set_new(row, "trial_id", json_integer(tid));
            M++;
        } else {
            free(v);
            free(t);
            json_object_set_new(row, "skipped", json_string(merr.message[0] ? merr.message : hpo_strerror(mrc)));
        }
        eng_model_free(search);
        eng_model_free(final);
    }
    if (M == 0) {
        rc = hpo_fail(err, HPO_EINVAL, "members", "no member could be used (see each member's reason)");
        json_object_set_new(result, "members", json_incref(out_members));
        goto done;
    }
    double w[MAX_MEMBERS];
    double fit_loss = NAN;
    if (method && strcmp(method, "weighted") == 0) {
        if ((rc = eng_ensemble_fit_weights((const float *const *)vp, M, val.n, K, val_labels, val_targets, w, &fit_loss,
                                           err)))
            goto done;
    } else if (method && strcmp(method, "greedy") == 0) {
        int counts[MAX_MEMBERS];
        if ((rc = eng_ensemble_greedy((const float *const *)vp, M, val.n, K, val_labels, val_targets, rounds, counts, w,
                                      &fit_loss))) {
            hpo_fail(err, rc, "method", "the greedy selection failed on the members' validation predictions");
            goto done;
        }
        for (int k = 0; k < M; k++)
            json_object_set_new(json_array_get(out_members, (size_t)used[k]), "count", json_integer(counts[k]));
    } else {
        for (int k = 0; k < M; k++) w[k] = 1.0 / M;
    }
    /* every member's predictions are finite (finite_predictions): the
     * metrics and the combination fail only on a bug; then the job fails
     * with it rather than storing what was never computed */
    eng_metrics mm;
    for (int k = 0; rc == 0 && k < M; k++) {
        json_t *row = json_array_get(out_members, (size_t)used[k]);
        json_object_set_new(row, "weight", json_real(w[k]));
        if ((rc = eng_ensemble_metrics(vp[k], val.n, K, val_labels, val_targets, &mm))) break;
        json_object_set_new(row, "val", metrics_json(&mm, classify));
        if (have_test) {
            if ((rc = eng_ensemble_metrics(tp[k], test.n, K, test_labels, test_targets, &mm))) break;
            json_object_set_new(row, "test", metrics_json(&mm, classify));
        }
    }
    float *comb = hpo_xmalloc((have_test && test.n > val.n ? test.n : val.n) * (size_t)K * sizeof(float));
    if (rc == 0) rc = eng_ensemble_combine((const float *const *)vp, M, val.n, K, w, comb);
    if (rc == 0) rc = eng_ensemble_metrics(comb, val.n, K, val_labels, val_targets, &mm);
    if (rc == 0) json_object_set_new(result, "val", metrics_json(&mm, classify));
    if (rc == 0 && have_test) {
        rc = eng_ensemble_combine((const float *const *)tp, M, test.n, K, w, comb);
        if (rc == 0) rc = eng_ensemble_metrics(comb, test.n, K, test_labels, test_targets, &mm);
        if (rc == 0) json_object_set_new(result, "test", metrics_json(&mm, classify));
    }
    if (rc) {
        free(comb);
        hpo_fail(err, rc, "members", "the ensemble's metrics could not be computed: %s", hpo_strerror(rc));
        goto done;
    }
    if (!have_test) {
        json_object_set_new(result, "test", json_null());
        json_object_set_new(result, "test_error", json_string(terr.message));
    }
    free(comb);
    json_object_set_new(result, "method", json_string(method ? method : "mean"));
    json_object_set_new(result, "fit_loss", api_json_real(fit_loss));
    json_object_set_new(result, "members", json_incref(out_members));
done:
    for (int k = 0; k < M; k++) {
        free(vp[k]);
        free(tp[k]);
    }
    free(val_labels);
    free(val_targets);
    free(test_labels);
    free(test_targets);
    eng_split_clear(&train);
    eng_split_clear(&val);
    eng_split_clear(&test);
    json_decref(out_members);
    json_decref(spec);
    return rc;
}

int api_run_model(api_ctx *ctx, int64_t model_id, const char *slot, int threads, const atomic_int *stop) {
    sto_model mrow;
    api_study *st = NULL;
    hpo_error err = {{0}, {0}};
    int rc = sto_model_get(ctx->db, model_id, &mrow);
    if (rc) return rc;
    rc = api_study_acquire(ctx, mrow.study_id, &st);
    if (rc) {
        /* its study is there but cannot be loaded (its uploaded dataset was
         * deleted once it completed, its definition no longer passes): the
         * job fails with the reason. Left running, api_jobs_reap would queue
         * it again and the next pass claim it again (model jobs first), at
         * once and forever, and no trial would get that slot */
        sto_study s;
        if (sto_study_get(ctx->db, mrow.study_id, &s) == 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "its study %lld cannot be loaded (%s; hpod's log says why)",
                     (long long)mrow.study_id, hpo_strerror(rc));
            char *data = api_event_text(json_pack("{s:I, s:s, s:s}", "model_id", (json_int_t)model_id, "kind",
                                                  sto_model_kind_name(mrow.kind), "error", msg));
            sto_event_in ev = {"model_failed", data};
            int frc = sto_model_finish_ev(ctx->db, model_id, STO_MODEL_FAILED, NULL, NULL, msg, &ev);
            free(data);
            sto_study_clear(&s);
            HPO_WARN("model %lld: %s", (long long)model_id, msg);
            if (frc == 0) {
                api_events_wake(ctx);
                rc = 0;
            }
        }
        sto_model_clear(&mrow);
        return rc;
    }
    json_t *result = json_object();
    char *rel = NULL;
    double t0 = hpo_monotonic();
    /* the crash-loop guard (data_dir.h): a job that takes hpod down fails
     * at the API_MAX_CRASHES-th start instead of running again */
    api_model_job_begin(ctx->opt.data_dir, model_id);
    if (!st->def.embedded)
        rc = hpo_fail(&err, HPO_EINVAL, "", "study %lld is external: hpod has no models of it", (long long)st->id);
    else if (mrow.kind == STO_MODEL_REFIT)
        rc = run_refit(ctx, st, &mrow, slot, threads, stop, result, &rel, &err);
    else if (mrow.kind == STO_MODEL_TRIAL)
        rc = run_trial_model(ctx, st, &mrow, result, &rel, &err);
    else
        rc = run_ensemble(ctx, st, &mrow, result, &err);
    if (atomic_load(stop) != API_STOP_LOST) /* else the job left this node: its counter is the new run's */
        api_model_job_end(ctx->opt.data_dir, model_id); /* hpod survived it */
    const char *kind = sto_model_kind_name(mrow.kind);
    int stored = 0;
    if (rc == HPO_ECANCELLED && atomic_load(stop) == API_STOP_SHUTDOWN) {
        /* queued again: another node, or this one's next start, runs it */
        HPO_INFO("model %lld: interrupted by shutdown; queued to run again", (long long)model_id);
        stored = sto_model_requeue(ctx->db, model_id);
    } else if (rc == HPO_ECANCELLED && atomic_load(stop) == API_STOP_LOST) {
        HPO_WARN("model %lld: it runs on another node now; this run stores nothing", (long long)model_id);
    } else if (rc == HPO_ENOSPACE) {
        /* a full disk is not the model's fault: it runs again (a refit from
         * its checkpoint) after the back-off; if even this cannot be stored,
         * api_jobs_reap queues it once this worker is idle */
        HPO_WARN("model %lld: the data disk is full (%s): queued again", (long long)model_id, err.message);
        stored = sto_model_requeue(ctx->db, model_id);
        api_disk_full(ctx);
        rc = 0;
    } else if (rc == HPO_EFS) {
        /* the file system failed under the job's own files (its weights,
         * a refit's checkpoint, a trial's checkpoint it reads: permission
         * denied, read-only, an I/O error, a stale network mount): not the
         * model's fault either, the same back-off as a full disk */
        const char *why = err.message[0] ? err.message : hpo_strerror(rc);
        HPO_WARN("model %lld: its files failed (%s): queued again", (long long)model_id, why);
        stored = sto_model_requeue(ctx->db, model_id);
        api_files_failed(ctx, why);
        rc = 0;
    } else if (rc == 0) {
        json_object_set_new(result, "seconds_total", json_real(hpo_monotonic() - t0));
        char *text = json_dumps(result, JSON_COMPACT);
        char *data = api_event_text(
            json_pack("{s:I, s:s, s:O}", "model_id", (json_int_t)model_id, "kind", kind, "result", result));
        sto_event_in ev = {"model_complete", data};
        rc = stored = sto_model_finish_ev(ctx->db, model_id, STO_MODEL_COMPLETE, text, rel, NULL, &ev);
        free(text);
        free(data);
        if (rc == 0) api_disk_ok(ctx); /* its files and row written: the disk has room */
    } else {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", err.message[0] ? err.message : hpo_strerror(rc));
        char *text = json_object_size(result) ? json_dumps(result, JSON_COMPACT) : NULL;
        char *data = api_event_text(
            json_pack("{s:I, s:s, s:s}", "model_id", (json_int_t)model_id, "kind", kind, "error", msg));
        sto_event_in ev = {"model_failed", data};
        stored = sto_model_finish_ev(ctx->db, model_id, STO_MODEL_FAILED, text, NULL, msg, &ev);
        free(text);
        free(data);
        rc = 0;
    }
    if (stored == HPO_ENOTFOUND) { /* deleted with its study meanwhile: leave nothing behind */
        char path[API_PATH_MAX];
        if (api_dir_model_checkpoint(path, ctx->opt.data_dir, model_id) == 0) api_dir_remove(path);
        if (rel && api_dir_file(path, ctx->opt.data_dir, rel) == 0) api_dir_unlink(path);
        if (api_dir_study(path, ctx->opt.data_dir, mrow.study_id) == 0) api_dir_remove(path); /* TensorBoard */
        HPO_INFO("model %lld: its study was deleted; nothing stored", (long long)model_id);
        rc = 0;
    } else if (stored < 0) {
        HPO_WARN("model %lld: could not record its outcome: %s", (long long)model_id, hpo_strerror(stored));
    } else if (stored == 0) {
        api_events_wake(ctx);
    }
    HPO_INFO("model %lld (%s, study %lld) on %s took %.1f s", (long long)model_id, kind, (long long)mrow.study_id, slot,
             hpo_monotonic() - t0);
    free(rel);
    json_decref(result);
    api_study_release(ctx, st);
    sto_model_clear(&mrow);
    return rc;
}
