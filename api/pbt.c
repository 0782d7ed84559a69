/* pbt.c - population-based training in the job layer (jobs_internal.h):
 * which member of a "pbt" study runs next, its ranking at a perturbation
 * boundary, the member bred from a better one's checkpoint, the
 * checkpoints kept at boundaries. The decisions are the tuner's
 * (tuners/pbt.c); the scheduler thread calls api_pbt_next under the
 * study's lock, a worker api_pbt_prepare before it trains a member.
 *
 * The schedule: every member stops at each boundary (a multiple of the
 * perturbation interval below max_epochs) and waits QUEUED
 * (job_trial.c). A waiting member is ranked once every live member
 * (queued or running) has reported that epoch and none is still writing
 * its checkpoint of it: the trials that reported the epoch are the ranking
 * (tun_pbt_rank). Going on, its pbt_epoch becomes the boundary; in the
 * bottom quantile, it ends pruned and a new trial with the explored params
 * of a top member starts from that member's checkpoint at the boundary
 * (hard-linked into its folder as exec-0.safetensors, which the engine
 * resumes from), in one transaction (sto_trial_pbt_breed_ev). Members are
 * taken least progress first, so a population larger than the slots trains
 * in turns.
 *
 * A member's checkpoint at a boundary stays readable after it moves on: a
 * worker links it to pbt-<epoch>.safetensors before training past it, and
 * keeps the two latest (a member cannot pass a boundary before every live
 * member reached the previous one). Ended members keep their folder while
 * a live member may still be ranked at an epoch they reported
 * (api_pbt_keep_from). Everything is derived from storage, so after a
 * restart (kill -9 included) the same rankings and the same bred trials
 * follow: a ranking is deterministic given the history and the seed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jobs_internal.h"
#include "safetensors.h"

#define CKPT "exec-0.safetensors"

int api_pbt_boundary(const api_study *st, int64_t epoch) {
    int every = st->def.tuner.pbt_interval;
    return st->def.tuner.algorithm == TUN_PBT && every > 0 && epoch > 0 && epoch % every == 0 &&
           epoch < st->def.emb.max_epochs;
}

/* How far a trial got: its last reported epoch, or the boundary it was
 * ranked at (a bred one: where it starts). */
static int64_t progress(const sto_trial *t) { return t->last_step > t->pbt_epoch ? t->last_step : t->pbt_epoch; }

static int is_live(const sto_trial *t) { return t->state == STO_TRIAL_QUEUED || t->state == STO_TRIAL_RUNNING; }

/* Whether a waiting member at boundary b may be ranked: every other live
 * member reported b (a queued one) or went on from b (a running one). */
static int all_reached(const sto_trial *t, size_t n, size_t self, int64_t b) {
    for (size_t i = 0; i < n; i++) {
        if (i == self || !is_live(&t[i])) continue;
        if (t[i].state == STO_TRIAL_QUEUED && progress(&t[i]) < b) return 0;
        if (t[i].state == STO_TRIAL_RUNNING && t[i].pbt_epoch < b) return 0;
    }
    return 1;
}

/* The epoch a checkpoint file was written at, or -1. */
static int64_t checkpoint_epoch(const char *path) {
    eng_st_file *f = NULL;
    hpo_error err;
    if (eng_st_open(path, &f, &err)) return -1;
    const char *e = eng_st_meta(f, "epoch");
    int64_t epoch = e ? (int64_t)strtod(e, NULL) : -1;
    eng_st_file_free(f);
    return epoch;
}

/* The path of trial_id's checkpoint at epoch: its boundary copy, or its
 * current checkpoint when that is at epoch. HPO_ENOTFOUND when gone. */
static int checkpoint_at(const char *root, int64_t trial_id, int64_t epoch, char *out) {
    char name[64];
    struct stat sb;
    snprintf(name, sizeof name, "pbt-%lld.safetensors", (long long)epoch);
    if (api_dir_trial_file(out, root, trial_id, name)) return HPO_EINVAL;
    if (stat(out, &sb) == 0) return 0;
    if (api_dir_trial_file(out, root, trial_id, CKPT)) return HPO_EINVAL;
    return checkpoint_epoch(out) == epoch ? 0 : HPO_ENOTFOUND;
}

/* Starts bred trial `trial_id` from its parent's checkpoint at epoch. */
static int seed_checkpoint(api_ctx *ctx, int64_t parent_id, int64_t trial_id, int64_t epoch, hpo_error *err) {
    const char *root = ctx->opt.data_dir;
    char src[API_PATH_MAX], dir[API_PATH_MAX], dst[API_PATH_MAX];
    int rc = checkpoint_at(root, parent_id, epoch, src);
    if (rc == HPO_ENOTFOUND)
        return hpo_fail(err, rc, "", "the checkpoint of trial %lld at epoch %lld is gone", (long long)parent_id,
                        (long long)epoch);
    if (rc == 0) rc = api_dir_trial(dir, root, trial_id);
    if (rc == 0) rc = api_dir_make(root, dir, err);
    if (rc == 0) rc = api_dir_trial_file(dst, root, trial_id, CKPT);
    if (rc == 0) rc = api_dir_link(src, dst, ctx->opt.durable_checkpoints, err);
    return rc;
}

/* Whether the study may still breed a trial (max_trials, max_seconds), as
 * far as this node knows: the breed itself counts max_trials in storage,
 * under the study's row lock, whatever the other nodes bred. */
static int may_breed(const api_study *st) {
    if (st->def.max_trials > 0 && st->next_number >= st->def.max_trials) return 0;
    return !(st->def.max_seconds > 0 && hpo_now() >= st->created + st->def.max_seconds);
}

static const sto_trial *by_number(const sto_trial *t, size_t n, int64_t number) {
    for (size_t i = 0; i < n; i++)
        if (t[i].number == number) return &t[i];
    return NULL;
}

/* Replaces member m (queued at boundary b) by a trial bred from donor:
 * stored, its checkpoint linked, the tuner told. 0 and *pick. */
static int breed(api_ctx *ctx, api_study *st, const sto_trial *m, const sto_trial *donor, int64_t b,
                 api_pbt_pick *pick) {
    const tun_space *s = st->def.space;
    hpo_error err = {{0}, {0}};
    double *xd = hpo_xcalloc((size_t)s->n + 1, sizeof *xd), *x = hpo_xcalloc((size_t)s->n + 1, sizeof *x);
    json_t *before = json_loads(donor->params, 0, NULL), *after = NULL, *lineage = NULL;
    char *params = NULL, *text = NULL, *end_data = NULL;
    int64_t id = 0, number = 0;
    int rc = before ? tun_space_from_json(s, before, xd, &err) : HPO_EINTERNAL;
    if (rc) goto done;
    tun_pbt_explore(st->tuner, m->number, b, xd, x);
    after = tun_space_to_json(s, x);
    lineage = json_pack("{s:I, s:I, s:I, s:I, s:I, s:O, s:O}", "parent_trial_id", (json_int_t)donor->id,
                        "parent_number", (json_int_t)donor->number, "parent_epoch", (json_int_t)b,
                        "replaced_trial_id", (json_int_t)m->id, "replaced_number", (json_int_t)m->number,
                        "params_before", before, "params_after", after);
    params = after ? json_dumps(after, JSON_COMPACT) : NULL;
    text = lineage ? json_dumps(lineage, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!params || !text) {
        rc = HPO_ENOMEM;
        goto done;
    }
    end_data = api_event_text(json_pack("{s:I, s:I, s:s, s:I, s:f, s:s, s:I, s:I, s:I}", "trial_id",
                                        (json_int_t)m->id, "number", (json_int_t)m->number, "state", "pruned",
                                        "best_epoch", (json_int_t)m->best_epoch, "seconds", m->train_seconds,
                                        "reason", "pbt_replaced", "epoch", (json_int_t)b, "parent_trial_id",
                                        (json_int_t)donor->id, "parent_number", (json_int_t)donor->number));
    sto_event_in ev_end = {"trial_pruned", end_data}, ev_new = {"trial_bred", NULL};
    sto_pbt_breed in = {.replaced_id = m->id, .params = params, .lineage = text, .epoch = b,
                        .max_trials = st->def.max_trials};
    if ((rc = sto_trial_pbt_breed_ev(ctx->db, st->id, &in, &ev_end, &ev_new, &id, &number))) goto done;
    st->next_number = number + 1;
    tun_study_finish(st->tuner, m->number, TUN_TRIAL_PRUNED, NAN);
    tun_study_add(st->tuner, number, x, TUN_TRIAL_RUNNING, NAN);
    /* a failure here leaves the trial to link its checkpoint when it starts (api_pbt_prepare) */
    if (seed_checkpoint(ctx, donor->id, id, b, &err))
        HPO_WARN("trial %lld: cannot copy its parent's checkpoint yet: %s", (long long)id, err.message);
    HPO_INFO("study %lld: trial #%lld replaced at epoch %lld by #%lld, bred from #%lld", (long long)st->id,
             (long long)m->number, (long long)b, (long long)number, (long long)donor->number);
    api_events_wake_study(ctx, st->id);
    *pick = (api_pbt_pick){id, number, 0};
done:
    /* HPO_EEXHAUSTED: other nodes bred up to max_trials meanwhile; m goes on */
    if (rc && rc != HPO_EEXHAUSTED)
        HPO_WARN("study %lld: cannot breed a member at epoch %lld: %s", (long long)st->id, (long long)b,
                 err.message[0] ? err.message : hpo_strerror(rc));
    free(end_data);
    free(text);
    free(params);
    json_decref(lineage);
    json_decref(after);
    json_decref(before);
    free(x);
    free(xd);
    return rc;
}

/* Ranks waiting member m at boundary b: it goes on (its pbt_epoch stored)
 * or is replaced (breed). *pick: the trial to start. */
static int rank(api_ctx *ctx, api_study *st, const sto_trial *t, size_t n, const sto_trial *m, int64_t b,
                api_pbt_pick *pick) {
    int64_t donor_number = -1;
    int r = tun_pbt_rank(st->tuner, m->number, b, &donor_number);
    const sto_trial *donor = r == 1 ? by_number(t, n, donor_number) : NULL;
    char path[API_PATH_MAX];
    if (donor && may_breed(st)) { /* else, or when it cannot breed, m goes on */
        if (checkpoint_at(ctx->opt.data_dir, donor->id, b, path) != 0)
            HPO_WARN("study %lld: trial #%lld goes on at epoch %lld: #%lld's checkpoint there is gone",
                     (long long)st->id, (long long)m->number, (long long)b, (long long)donor->number);
        else if (breed(ctx, st, m, donor, b, pick) == 0)
            return 0;
    }
    int rc = sto_trial_pbt_ranked(ctx->db, m->id, b);
    if (rc == 0) *pick = (api_pbt_pick){m->id, m->number, m->train_seconds};
    return rc;
}

/* Least progress first, then by number. */
static int by_progress(const void *a, const void *b) {
    const sto_trial *x = *(const sto_trial *const *)a, *y = *(const sto_trial *const *)b;
    int64_t px = progress(x), py = progress(y);
    if (px != py) return px < py ? -1 : 1;
    return x->number < y->number ? -1 : x->number > y->number;
}

int api_pbt_next(api_ctx *ctx, api_study *st, int may_add, api_pbt_pick *pick) {
    sto_trial_filter f = {.state = -1, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    int rc = sto_trial_list(ctx->db, st->id, &f, &t, &n);
    if (rc) return rc;
    /* the first population before anything moves past a boundary */
    if (may_add && st->pbt_members < st->def.tuner.pbt_population) {
        sto_trial_list_free(t, n);
        *pick = (api_pbt_pick){0, 0, 0};
        return 0;
    }
    const sto_trial **q = hpo_xcalloc(n + 1, sizeof *q);
    size_t nq = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].state == STO_TRIAL_QUEUED && t[i].started > 0) q[nq++] = &t[i];
    qsort(q, nq, sizeof *q, by_progress);
    rc = HPO_ENOTFOUND;
    for (size_t k = 0; k < nq && rc == HPO_ENOTFOUND; k++) {
        const sto_trial *m = q[k];
        int64_t b = progress(m);
        if (!api_pbt_boundary(st, b) || m->pbt_epoch >= b) { /* nothing to rank: it goes on */
            *pick = (api_pbt_pick){m->id, m->number, m->train_seconds};
            rc = 0;
        } else if (all_reached(t, n, (size_t)(m - t), b)) {
            rc = rank(ctx, st, t, n, m, b, pick);
            if (rc) {
                HPO_WARN("study %lld: cannot rank trial #%lld at epoch %lld: %s", (long long)st->id,
                         (long long)m->number, (long long)b, hpo_strerror(rc));
                rc = HPO_ENOTFOUND;
            }
        }
    }
    free(q);
    sto_trial_list_free(t, n);
    return rc;
}

int api_pbt_prepare(api_ctx *ctx, const api_study *st, const sto_trial *t, hpo_error *err) {
    const char *root = ctx->opt.data_dir;
    char ckpt[API_PATH_MAX], dst[API_PATH_MAX], name[64];
    struct stat sb;
    if (st->def.tuner.algorithm != TUN_PBT || api_dir_trial_file(ckpt, root, t->id, CKPT)) return 0;
    json_t *lin = t->lineage ? json_loads(t->lineage, 0, NULL) : NULL;
    if (lin && stat(ckpt, &sb) != 0) { /* bred, its parent's checkpoint not linked yet */
        int64_t parent = json_integer_value(json_object_get(lin, "parent_trial_id"));
        int rc = seed_checkpoint(ctx, parent, t->id, t->pbt_epoch, err);
        if (rc) {
            json_decref(lin);
            return rc;
        }
    }
    json_decref(lin);
    /* its checkpoint at the boundary it goes on from stays for the members
     * not ranked there yet; the one before it too, older ones go */
    int64_t b = t->pbt_epoch, every = st->def.tuner.pbt_interval;
    if (b <= 0 || checkpoint_epoch(ckpt) != b) return 0;
    snprintf(name, sizeof name, "pbt-%lld.safetensors", (long long)b);
    if (api_dir_trial_file(dst, root, t->id, name) == 0 && stat(dst, &sb) != 0) {
        int rc = api_dir_link(ckpt, dst, ctx->opt.durable_checkpoints, err);
        if (rc) return rc;
    }
    for (int64_t old = b - 2 * every; old > 0; old -= every) {
        snprintf(name, sizeof name, "pbt-%lld.safetensors", (long long)old);
        if (api_dir_trial_file(dst, root, t->id, name) == 0) api_dir_unlink(dst);
    }
    return 0;
}

int64_t api_pbt_keep_from(api_ctx *ctx, const api_study *st) {
    if (st->def.tuner.algorithm != TUN_PBT) return INT64_MAX;
    sto_trial_filter f = {.state = -1, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    int64_t from = INT64_MAX;
    if (sto_trial_list(ctx->db, st->id, &f, &t, &n)) return 0; /* keep everything this time */
    for (size_t i = 0; i < n; i++)
        if (is_live(&t[i]) && t[i].pbt_epoch + 1 < from) from = t[i].pbt_epoch + 1;
    sto_trial_list_free(t, n);
    return from;
}
