/* checkpoint.c - training checkpoints as safetensors files: weights,
 * optimiser state, batch-norm statistics, RNG state and the loop's state in
 * the metadata (see train.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "safetensors.h"
#include "train.h"

static int add_f32(eng_st_writer *w, const char *name, const float *data, size_t n, hpo_error *err) {
    int64_t shape[1] = {(int64_t)n};
    return eng_st_writer_add(w, name, ENG_ST_F32, 1, shape, data, err);
}

static int meta_num(eng_st_writer *w, const char *key, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", v);
    return eng_st_writer_meta(w, key, buf);
}

int eng_checkpoint_save(const eng_model *m, const eng_train_state *st, const char *path, int durable,
                        hpo_error *err) {
    eng_st_writer *w = eng_st_writer_new();
    int rc;
    if (!w) return HPO_ENOMEM;
    eng_st_writer_set_durable(w, durable);
    int64_t rshape[1] = {4};
    if ((rc = add_f32(w, "params", m->params, m->nparams, err))) goto fail;
    if ((rc = add_f32(w, "opt_state", m->opt_state, m->nstate, err))) goto fail;
    if ((rc = add_f32(w, "bn_stats", m->stats, m->nstats, err))) goto fail;
    if (st->best_weights && ((rc = add_f32(w, "best_params", st->best_weights, m->nparams, err)) ||
                             (rc = add_f32(w, "best_bn_stats", st->best_weights + m->nparams, m->nstats, err))))
        goto fail;
    if ((rc = eng_st_writer_add(w, "rng", ENG_ST_U64, 1, rshape, m->rng.s, err))) goto fail;
    if ((rc = meta_num(w, "epoch", st->epoch)) || (rc = meta_num(w, "step", (double)st->step)) ||
        (rc = meta_num(w, "loss_scale", st->loss_scale)) || (rc = meta_num(w, "good_steps", (double)st->good_steps)) ||
        (rc = meta_num(w, "best", st->best)) || (rc = meta_num(w, "best_epoch", st->best_epoch)) ||
        (rc = meta_num(w, "wait", st->wait)) || (rc = meta_num(w, "kept_best", st->kept_best)) ||
        (rc = meta_num(w, "kept_epoch", st->kept_epoch)) || (rc = meta_num(w, "nparams", (double)m->nparams)) ||
        (rc = eng_st_writer_meta(w, "format", "hpo-checkpoint-1")) ||
        (rc = eng_st_writer_meta(w, "optimizer", eng_opt_name(m->opt.kind))))
        goto fail;
    rc = eng_st_write_file(w, path, err);
fail:
    eng_st_writer_free(w);
    return rc;
}

/* The f32 tensor name of n values in f, or HPO_EFORMAT. */
static int find_f32(const eng_st_file *f, const char *name, size_t n, const char *path, const eng_st_tensor **out,
                    hpo_error *err) {
    const eng_st_tensor *t = eng_st_find(f, name);
    if (!t || t->dtype != ENG_ST_F32 || t->nbytes != n * sizeof(float))
        return hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s: tensor \"%s\" is missing or has the wrong size for this model",
                        path, name);
    *out = t;
    return 0;
}

static int get_meta(const eng_st_file *f, const char *key, double *v, const char *path, hpo_error *err) {
    const char *s = eng_st_meta(f, key);
    char *end = NULL;
    if (s) *v = strtod(s, &end);
    if (!s || end == s)
        return hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s: metadata \"%s\" is missing or not a number", path, key);
    return 0;
}

/* A count of the loop's state: a whole number from 0 to max. */
static int count_ok(double v, double max) { return isfinite(v) && v >= 0 && v <= max && v == floor(v); }

int eng_checkpoint_load(eng_model *m, const char *path, eng_train_state *st, float *best_weights, int *has_best,
                        hpo_error *err) {
    eng_st_file *f = NULL;
    int rc = eng_st_open(path, &f, err); /* the header; tensors are read straight into the model */
    if (rc) return rc;
    eng_train_state s;
    memset(&s, 0, sizeof s);
    double ep = 0, step = 0, ls = 1, gs = 0, best = 0, be = 0, wait = 0, np = 0;
    const char *fmt = eng_st_meta(f, "format");
    if (!fmt || strcmp(fmt, "hpo-checkpoint-1")) {
        rc = hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s is not an hpo checkpoint", path);
        goto out;
    }
    if ((rc = get_meta(f, "epoch", &ep, path, err)) || (rc = get_meta(f, "step", &step, path, err)) ||
        (rc = get_meta(f, "loss_scale", &ls, path, err)) || (rc = get_meta(f, "good_steps", &gs, path, err)) ||
        (rc = get_meta(f, "best", &best, path, err)) || (rc = get_meta(f, "best_epoch", &be, path, err)) ||
        (rc = get_meta(f, "wait", &wait, path, err)) || (rc = get_meta(f, "nparams", &np, path, err)))
        goto out;
    if ((size_t)np != m->nparams) {
        rc = hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s has %.0f parameters, the model %zu", path, np, m->nparams);
        goto out;
    }
    /* another optimiser's state may have the same size (adam's m and v
     * read as rmsprop's mean square and momentum diverge): refused */
    const char *opt = eng_st_meta(f, "optimizer");
    if (opt && strcmp(opt, eng_opt_name(m->opt.kind)) != 0) {
        rc = hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s holds the state of optimizer %s, the model trains with %s",
                      path, opt, eng_opt_name(m->opt.kind));
        goto out;
    }
    /* the kept metric's best (newer than the rest): without it, the monitor's */
    double kb = best, ke = be;
    if ((eng_st_meta(f, "kept_best") && (rc = get_meta(f, "kept_best", &kb, path, err))) ||
        (eng_st_meta(f, "kept_epoch") && (rc = get_meta(f, "kept_epoch", &ke, path, err))))
        goto out;
    /* counts as the loop wrote them: a damaged file's epoch past INT_MAX or
     * NaN must not become an epoch (the caller treats this as no
     * checkpoint) */
    const char *bad = !count_ok(ep, INT_MAX)                          ? "epoch"
                      : !count_ok(step, 9007199254740992.0)           ? "step"
                      : !count_ok(gs, step)                           ? "good_steps"
                      : !count_ok(be, ep)                             ? "best_epoch"
                      : !count_ok(ke, ep)                             ? "kept_epoch"
                      : !count_ok(wait, ep)                           ? "wait"
                      : !(isfinite(ls) && ls > 0)                     ? "loss_scale"
                      : isnan(best) || isnan(kb)                      ? "best"
                                                                      : NULL;
    if (bad) {
        rc = hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s: metadata \"%s\" is out of range", path, bad);
        goto out;
    }
    const eng_st_tensor *r = eng_st_find(f, "rng");
    if (!r || r->dtype != ENG_ST_U64 || r->nbytes != sizeof m->rng.s) {
        rc = hpo_fail(err, HPO_EFORMAT, "checkpoint", "%s: tensor \"rng\" is missing or malformed", path);
        goto out;
    }
    /* read into the model only after every check of the header (straight
     * from the file: no copy of a large model in between; an I/O error now
     * leaves the model partly loaded, and its caller discards it) */
    const eng_st_tensor *tp, *to, *tb, *tbest = NULL, *tbstats = NULL;
    if ((rc = find_f32(f, "params", m->nparams, path, &tp, err)) ||
        (rc = find_f32(f, "opt_state", m->nstate, path, &to, err)) ||
        (rc = find_f32(f, "bn_stats", m->nstats, path, &tb, err)))
        goto out;
    int hb = eng_st_find(f, "best_params") != NULL;
    if (hb && best_weights && (rc = find_f32(f, "best_params", m->nparams, path, &tbest, err))) goto out;
    /* "best_bn_stats" is newer than "best_params": without it the best
     * epoch gets the last epoch's statistics, as before it was saved */
    if (tbest && eng_st_find(f, "best_bn_stats") &&
        (rc = find_f32(f, "best_bn_stats", m->nstats, path, &tbstats, err)))
        goto out;
    uint64_t rng[4];
    if ((rc = eng_st_read_tensor(f, tp, m->params, err)) || (rc = eng_st_read_tensor(f, to, m->opt_state, err)) ||
        (rc = eng_st_read_tensor(f, tb, m->stats, err)) ||
        (tbest && (rc = eng_st_read_tensor(f, tbest, best_weights, err))) ||
        (tbstats && (rc = eng_st_read_tensor(f, tbstats, best_weights + m->nparams, err))) ||
        (rc = eng_st_read_tensor(f, r, rng, err)))
        goto out;
    if (tbest && !tbstats && m->nstats) memcpy(best_weights + m->nparams, m->stats, m->nstats * sizeof(float));
    memcpy(m->rng.s, rng, sizeof m->rng.s);
    m->shadow_dirty = 1;
    s.epoch = (int)ep;
    s.step = (long)step;
    s.loss_scale = ls;
    s.good_steps = (long)gs;
    s.best = best;
    s.best_epoch = (int)be;
    s.wait = (int)wait;
    s.kept_best = kb;
    s.kept_epoch = (int)ke;
    *st = s;
    if (has_best) *has_best = hb;
out:
    eng_st_file_free(f);
    return rc;
}
