/* train_loop.c - the parts of a training loop every device shares: data
 * checks, early stopping, the callback, checkpoints and resume, the result
 * (see train_loop.h). */
#include "train_loop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tensor.h"

int eng_train_check_data(const eng_model *m, const eng_split *s, hpo_error *err) {
    const eng_dataset *ds = s->ds;
    if (ds->sample_size != m->in_size)
        return hpo_fail(err, HPO_ESHAPE, "dataset", "samples of %s have %zu values, the model expects %zu", ds->name,
                        ds->sample_size, m->in_size);
    if (ds->y_type == ENG_DATA_Y_TARGET && ds->y_dim != (size_t)m->out_dim)
        return hpo_fail(err, HPO_ESHAPE, "dataset", "targets of %s have %zu values, the model outputs %d", ds->name,
                        ds->y_dim, m->out_dim);
    if (ds->y_type == ENG_DATA_Y_TARGET && m->loss == ENG_LOSS_SCCE)
        return hpo_fail(err, HPO_EINVAL, "model.loss", "sparse_categorical_crossentropy needs class labels; %s has targets",
                        ds->name);
    return 0;
}

static int monitor_mode(const char *name, int mode) {
    if (mode) return mode < 0 ? -1 : 1;
    return strstr(name, "acc") ? 1 : -1;
}

/* Early stopping's patience is used up after `wait` epochs without
 * improvement (Keras; 0 acts as 1). */
static int patience_spent(const eng_train_opts *o, int wait) {
    return o->patience >= 0 && wait >= (o->patience > 0 ? o->patience : 1);
}

/* The best epoch's weights are the parameters and the batch-norm running
 * statistics together (Keras' restore_best_weights restores both): the
 * parameters alone would run with another epoch's statistics. */
static void keep_best(float *best, const eng_model *m) {
    memcpy(best, m->params, m->nparams * sizeof(float));
    if (m->nstats) memcpy(best + m->nparams, m->stats, m->nstats * sizeof(float));
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

int eng_train_loop_begin(eng_train_loop *L, eng_model *m, const eng_split *val, const eng_train_opts *o,
                         size_t best_bytes, hpo_error *err) {
    int rc;
    L->o = o;
    L->monitor = o->monitor ? o->monitor : "val_loss";
    L->use_val = val && val->n > 0;
    if (!strncmp(L->monitor, "val_", 4) && !L->use_val) L->monitor += 4; /* no validation: the training metric */
    L->mode = monitor_mode(L->monitor, o->mode);
    eng_metrics probe = {0};
    double dummy;
    if (eng_metric_get(&probe, L->monitor, &dummy) < 0)
        return hpo_fail(err, HPO_EINVAL, "training.early_stopping.monitor", "unknown metric \"%s\"", L->monitor);
    L->keep = o->keep_metric;
    if (L->keep && !strncmp(L->keep, "val_", 4) && !L->use_val) L->keep += 4;
    /* the keep metric is the monitor's: the monitor's best serves, unless
     * min_delta makes it another epoch than the strict best (the value's) */
    if (L->keep && !strcmp(L->keep, L->monitor) && monitor_mode(L->keep, o->keep_mode) == L->mode && !(o->min_delta > 0))
        L->keep = NULL;
    if (L->keep && eng_metric_get(&probe, L->keep, &dummy) < 0)
        return hpo_fail(err, HPO_EINVAL, "objective.metric", "unknown metric \"%s\"", L->keep);
    L->keep_mode = L->keep ? monitor_mode(L->keep, o->keep_mode) : L->mode;
    L->st.loss_scale = o->precision == ENG_PREC_FP16 ? ENG_LOSS_SCALE_START : 1.0;
    L->st.best = L->mode < 0 ? INFINITY : -INFINITY;
    L->st.kept_best = L->keep_mode < 0 ? INFINITY : -INFINITY;
    if (o->restore_best && !(L->best = eng_alloc((m->nparams + m->nstats + 1) * sizeof(float)))) {
        char sz[32];
        eng_format_bytes(best_bytes, sz, sizeof sz);
        return hpo_fail(err, HPO_ENOMEM, "training.early_stopping.restore_best_weights",
                        "out of memory for a copy of the best epoch's weights (%s)", sz);
    }
    if (o->checkpoint_dir) {
        mkdir(o->checkpoint_dir, 0755);
        snprintf(L->ckpt, sizeof L->ckpt, "%s/%s", o->checkpoint_dir,
                 o->checkpoint_name ? o->checkpoint_name : "checkpoint.safetensors");
        if (o->resume && file_exists(L->ckpt)) {
            int hb = 0;
            eng_train_state fresh = L->st;
            rc = eng_checkpoint_load(m, L->ckpt, &L->st, L->best, &hb, err);
            if (rc == HPO_EFORMAT) {
                /* damaged (its header refused before any tensor was read
                 * into the model): as if there were none, the run starts
                 * over, and its next checkpoint replaces the file */
                HPO_WARN("engine: %s: training from the first epoch", err->message);
                L->st = fresh;
                memset(err, 0, sizeof *err);
            } else if (rc) {
                return rc;
            } else if (L->st.epoch > o->epochs) {
                return hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s is at epoch %d, past the run's %d epochs", L->ckpt,
                                L->st.epoch, o->epochs);
            } else {
                if (!hb && L->best) keep_best(L->best, m);
                L->r.start_epoch = L->st.epoch;
                /* early stopping ended the run at the checkpoint's epoch (the
                 * state re-derives the decision): it stays ended, as the
                 * uninterrupted run did; the loops train no epoch */
                if (patience_spent(o, L->st.wait)) L->r.stopped_early = 1;
                HPO_INFO("engine: resumed %s at epoch %d (step %ld)", L->ckpt, L->st.epoch, L->st.step);
            }
        }
    }
    L->r.epochs_run = L->st.epoch;
    L->t_all = hpo_monotonic();
    return 0;
}

void eng_train_loop_report(const eng_train_loop *L, int epoch, const eng_metric_sums *sums, double secs, double lr,
                           long skipped, eng_epoch_report *rep) {
    memset(rep, 0, sizeof *rep);
    rep->epoch = epoch + 1;
    rep->epochs = L->o->epochs;
    eng_metrics_from_sums(sums, &rep->train);
    rep->seconds = secs;
    rep->samples_per_s = secs > 0 ? (double)sums->n / secs : 0;
    rep->lr = lr;
    rep->loss_scale = L->st.loss_scale;
    rep->skipped_steps = skipped;
}

int eng_train_loop_epoch_end(eng_train_loop *L, eng_model *m, eng_epoch_report *rep, int *stop, hpo_error *err) {
    const eng_train_opts *o = L->o;
    eng_train_state *st = &L->st;
    int epoch = rep->epoch - 1;
    L->sps_sum += rep->samples_per_s;
    double v = 0;
    eng_metric_get(!strncmp(L->monitor, "val_", 4) ? &rep->val : &rep->train, L->monitor, &v);
    int improved = isfinite(v) && (L->mode < 0 ? v < st->best - o->min_delta : v > st->best + o->min_delta);
    if (improved) {
        st->best = v;
        st->best_epoch = epoch + 1;
        st->wait = 0;
    } else {
        st->wait++;
    }
    /* the weights kept: the monitor's best epoch, or the keep metric's */
    double kv = v;
    if (L->keep) eng_metric_get(!strncmp(L->keep, "val_", 4) ? &rep->val : &rep->train, L->keep, &kv);
    int kept = L->keep ? isfinite(kv) && (L->keep_mode < 0 ? kv < st->kept_best : kv > st->kept_best) : improved;
    if (kept) {
        st->kept_best = kv;
        st->kept_epoch = epoch + 1;
        if (L->best) keep_best(L->best, m);
    }
    rep->is_best = improved;
    st->epoch = epoch + 1;
    L->r.epochs_run = epoch + 1;
    L->r.train = rep->train;
    L->r.val = rep->val;
    L->r.has_val = rep->has_val;
    if (patience_spent(o, st->wait)) {
        L->r.stopped_early = 1;
        *stop = 1;
    }
    /* The callback runs before the checkpoint is written: whatever it
     * records about epoch e (curves, reports) is durable before a resume
     * could start after e, so a crash between the two repeats epoch e
     * instead of leaving a hole. A stopped run still checkpoints, so a
     * pause resumes after this epoch. */
    rep->checkpoint = L->ckpt[0] ? L->ckpt : NULL;
    int cb = o->on_epoch ? o->on_epoch(rep, o->user) : 0;
    if (cb < 0) /* the callback could not record the epoch: no checkpoint of it */
        return hpo_fail(err, cb, "training", "epoch %d could not be recorded: %s", epoch + 1, hpo_strerror(cb));
    if (cb) {
        L->r.stopped_by_callback = 1;
        *stop = 1;
    }
    if (L->ckpt[0]) {
        st->best_weights = L->best;
        return eng_checkpoint_save(m, st, L->ckpt, o->checkpoint_durable, err);
    }
    return 0;
}

int eng_train_loop_end(eng_train_loop *L, eng_model *m, int rc, eng_train_result *res) {
    eng_train_result *r = &L->r;
    if (rc == 0) {
        if (L->best && L->st.kept_epoch > 0 && L->st.kept_epoch != r->epochs_run) {
            memcpy(m->params, L->best, m->nparams * sizeof(float));
            if (m->nstats) memcpy(m->stats, L->best + m->nparams, m->nstats * sizeof(float));
            eng_model_params_changed(m);
            r->restored_best = 1;
        }
        r->seconds = hpo_monotonic() - L->t_all;
        r->samples_per_s = r->epochs_run > r->start_epoch ? L->sps_sum / (r->epochs_run - r->start_epoch) : 0;
    }
    if (rc == HPO_EDIVERGED || rc == 0) {
        r->best_epoch = L->st.best_epoch;
        r->best_value = L->st.best;
        if (res) *res = *r; /* divergence is data: the result is filled */
    }
    free(L->best);
    L->best = NULL;
    return rc;
}
