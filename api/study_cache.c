/* study_cache.c - per-study tuner state, loaded lazily by replaying the
 * stored history (api.h: threading; jobs.h: the lock order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

/* A study being loaded, outside the cache's lock. */
typedef struct loading {
    int64_t id;
    int forgotten; /* api_study_forget came during the load: the result is dropped */
} loading;

typedef struct api_cache {
    pthread_mutex_t lock;
    pthread_cond_t loaded; /* broadcast when a load ends */
    api_study **items;
    size_t n, cap;
    loading *loads;
    size_t n_loads, cap_loads;
} api_cache;

int api_cache_new(api_ctx *ctx) {
    api_cache *c = hpo_xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->loaded, NULL);
    ctx->cache = c;
    return 0;
}

void api_study_note_waiting(api_study *st, const sto_trial *t) {
    int waits = t->state == STO_TRIAL_QUEUED && t->started <= 0;
    size_t i = 0;
    while (i < st->n_waiting && st->waiting[i] != t->number) i++;
    if (waits && i == st->n_waiting) {
        if (st->n_waiting == st->cap_waiting) {
            st->cap_waiting = st->cap_waiting ? 2 * st->cap_waiting : 8;
            st->waiting = hpo_xrealloc(st->waiting, st->cap_waiting * sizeof *st->waiting);
        }
        st->waiting[st->n_waiting++] = t->number;
    } else if (!waits && i < st->n_waiting) {
        st->waiting[i] = st->waiting[--st->n_waiting];
    }
}

int api_study_may_wait(api_ctx *ctx, const api_study *st) { return !sto_shared(ctx->db) || st->n_waiting > 0; }

static void study_free(api_study *st) {
    if (!st) return;
    tun_study_free(st->tuner);
    free(st->waiting);
    api_study_def_clear(&st->def);
    json_decref(st->spec);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

void api_cache_free(api_ctx *ctx) {
    api_cache *c = ctx->cache;
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) study_free(c->items[i]);
    free(c->items);
    free(c->loads); /* empty: no request or job outlives the api */
    pthread_cond_destroy(&c->loaded);
    pthread_mutex_destroy(&c->lock);
    free(c);
    ctx->cache = NULL;
}

tun_trial_state api_tun_state(sto_trial_state s) {
    switch (s) {
    case STO_TRIAL_COMPLETE: return TUN_TRIAL_COMPLETE;
    case STO_TRIAL_PRUNED: return TUN_TRIAL_PRUNED;
    case STO_TRIAL_FAILED:
    case STO_TRIAL_CANCELLED: return TUN_TRIAL_FAILED;
    default: return TUN_TRIAL_RUNNING;
    }
}

/* Ends a trial for the tuner: with each constraint's value when they were
 * told (the bayesian sampler models each one), else the violation. Values
 * the tuner refuses (non-finite: stored before the checks that keep them
 * out) make the trial failed for it: a stored trial never keeps its study
 * from loading, nor a tell from answering. */
static int finish_told(api_study *st, int64_t number, tun_trial_state ts, const double *values, double violation,
                       const double *cons) {
    int rc = ts == TUN_TRIAL_COMPLETE && !isnan(violation) && st->def.n_cons > 0
                 ? tun_study_finish_cons(st->tuner, number, ts, values, st->def.n_cons, cons)
                 : tun_study_finish_mo(st->tuner, number, ts, ts == TUN_TRIAL_COMPLETE ? values : NULL, violation);
    if (rc != HPO_EINVAL) return rc;
    HPO_WARN("study %lld trial %lld: the tuner refuses its values: failed for the tuner", (long long)st->id,
             (long long)number);
    return tun_study_finish_mo(st->tuner, number, TUN_TRIAL_FAILED, NULL, NAN);
}

int api_tuner_finish(api_study *st, const sto_trial *t) {
    tun_trial_state ts = api_tun_state(t->state);
    double values[TUN_MAX_OBJECTIVES], violation = NAN, cons[API_MAX_CONSTRAINTS];
    if (ts != TUN_TRIAL_COMPLETE) return tun_study_finish_mo(st->tuner, t->number, ts, NULL, NAN);
    if (api_trial_objectives(&st->def, t, values, &violation, cons)) {
        HPO_WARN("study %lld trial %lld: its stored values do not fit the study's objectives: failed for the tuner",
                 (long long)st->id, (long long)t->number);
        return tun_study_finish_mo(st->tuner, t->number, TUN_TRIAL_FAILED, NULL, NAN);
    }
    return finish_told(st, t->number, ts, values, violation, cons);
}

int api_tuner_finish_outcome(api_study *st, int64_t number, const api_outcome *o) {
    return finish_told(st, number, api_tun_state(o->state), o->values, o->violation, o->cons);
}

typedef struct replay {
    api_ctx *ctx;
    const api_study_def *def;
    tun_study *tuner;
    const sto_trial *trials; /* ordered by number */
    size_t n_trials;
    int64_t loaded;          /* the trial number whose curves are in eps, -1: none */
    sto_epoch *eps;
    size_t n_eps;
} replay;

int api_reports_vectors(const api_study_def *d) {
    return d->n_obj > 1 && d->tuner.pruner.kind != TUN_PRUNER_NONE;
}

void api_curve_vector(const api_study_def *d, const char *curve, double value, double *vec) {
    vec[0] = value;
    for (int k = 1; k < d->n_obj; k++) vec[k] = NAN;
    if (!curve) return;
    json_t *mj = json_loads(curve, 0, NULL);
    api_objective_vector(d, mj, vec);
    json_decref(mj);
}

void api_report_vector(const api_study_def *d, const sto_epoch *eps, size_t n_eps, int64_t step, double value,
                       double *vec) {
    const char *curve = NULL;
    for (size_t i = 0; i < n_eps && !curve; i++)
        if (eps[i].execution == 0 && eps[i].epoch == step) curve = eps[i].metrics;
    api_curve_vector(d, curve, value, vec);
}

/* The vector a study with several objectives and a pruner was told at
 * (number, step) (api_report_vector), its trial's curves read once. */
static void replay_vector(replay *r, int64_t number, int64_t step, double value, double *vec) {
    if (r->loaded != number) {
        sto_epoch_list_free(r->eps, r->n_eps);
        r->eps = NULL;
        r->n_eps = 0;
        r->loaded = number;
        size_t lo = 0, hi = r->n_trials; /* the trial of that number */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (r->trials[mid].number < number)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < r->n_trials && r->trials[lo].number == number &&
            sto_trial_epochs(r->ctx->db, r->trials[lo].id, &r->eps, &r->n_eps))
            r->n_eps = 0;
    }
    api_report_vector(r->def, r->eps, r->n_eps, step, value, vec);
}

static void replay_intermediate(void *arg, const sto_intermediate *row) {
    replay *r = arg;
    double vec[TUN_MAX_OBJECTIVES];
    if (api_reports_vectors(r->def))
        replay_vector(r, row->number, row->step, row->value, vec);
    else
        api_report_vector(r->def, NULL, 0, row->step, row->value, vec);
    tun_study_replay_report(r->tuner, row->number, row->step, vec, row->flags & STO_STEP_LATE,
                            row->flags & STO_STEP_PRUNED, row->rung);
}

/* A study stored before definitions pinned their uploaded dataset
 * (dataset.id, api_embedded_show) names it by name alone: the dataset of
 * that name now is the one it trained on only if it was uploaded before
 * the study was created; then it is pinned in memory (the loaded
 * definition's dataset object, which its jobs open), else HPO_ECONFLICT
 * (logged). */
static int check_unpinned_dataset(api_ctx *ctx, const api_study *st) {
    json_t *ds = json_object_get(st->spec, "dataset");
    if (!st->def.embedded || st->def.emb.dataset_id <= 0 || json_object_get(ds, "id")) return 0;
    sto_dataset d;
    if (sto_dataset_get(ctx->db, st->def.emb.dataset_id, &d)) return 0; /* parse just read it */
    int newer = d.created > st->created;
    if (newer)
        HPO_ERROR("study %lld: dataset %s (id %lld) was uploaded after the study was created: it is not the one "
                  "the study trained on", (long long)st->id, d.name, (long long)d.id);
    else
        json_object_set_new(ds, "id", json_integer((json_int_t)d.id));
    sto_dataset_clear(&d);
    return newer ? HPO_ECONFLICT : 0;
}

/* Builds the tuner state of study id from storage. */
static int study_load(api_ctx *ctx, int64_t id, api_study **out) {
    sto_study s;
    memset(&s, 0, sizeof s);
    sto_trial *trials = NULL;
    size_t n = 0;
    double *x = NULL;
    hpo_error err = {{0}, {0}};
    api_study *st = hpo_xcalloc(1, sizeof *st);
    pthread_mutex_init(&st->lock, NULL);
    st->id = id;
    int rc = sto_study_get(ctx->db, id, &s);
    if (rc) goto fail;
    st->created = s.created;
    json_error_t jerr;
    st->spec = json_loads(s.spec, 0, &jerr);
    if (!st->spec) {
        HPO_ERROR("study %lld: stored definition is not JSON: %s", (long long)id, jerr.text);
        rc = HPO_EINTERNAL;
        goto fail;
    }
    if ((rc = api_study_def_load(ctx, st->spec, &st->def, &err))) {
        HPO_ERROR("study %lld: stored definition no longer valid: %s (%s)", (long long)id,
                  err.message, err.field);
        goto fail;
    }
    if ((rc = check_unpinned_dataset(ctx, st))) goto fail;
    int maxi[TUN_MAX_OBJECTIVES];
    for (int k = 0; k < st->def.n_obj; k++) maxi[k] = st->def.obj[k].maximize;
    maxi[0] = st->def.maximize; /* an embedded study's direction may be inferred from its metric */
    if ((rc = tun_study_new_mo(st->def.space, &st->def.tuner, st->def.n_obj, maxi, &st->tuner)))
        goto fail;
    if ((rc = api_warm_start_feed(st->spec, st->def.space, st->tuner))) { /* priors first */
        HPO_ERROR("study %lld: its warm-start snapshot is unreadable", (long long)id);
        goto fail;
    }
    sto_trial_filter all = {.state = -1, .order = STO_ORDER_NUMBER};
    if ((rc = sto_trial_list(ctx->db, id, &all, &trials, &n))) goto fail;
    x = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *x);
    for (size_t i = 0; i < n; i++) {
        /* one statement read them: changes after the highest seq come later (study_sync.c) */
        if (trials[i].seq > st->seq) st->seq = trials[i].seq;
        if (trials[i].number + 1 > st->next_number) st->next_number = trials[i].number + 1;
        if (!trials[i].lineage) st->pbt_members++;
        api_study_note_waiting(st, &trials[i]);
        /* an enqueued trial never handed out (queued, or cancelled while it
         * waited) holds its number but is not in the tuner's history */
        if (trials[i].started <= 0) continue;
        json_t *params = json_loads(trials[i].params, 0, &jerr);
        rc = params ? tun_space_from_json(st->def.space, params, x, &err) : HPO_EINTERNAL;
        json_decref(params);
        if (rc) {
            HPO_ERROR("study %lld trial %lld: stored params unreadable", (long long)id,
                      (long long)trials[i].number);
            goto fail;
        }
        if ((rc = tun_study_add(st->tuner, trials[i].number, x, TUN_TRIAL_RUNNING, NAN))) goto fail;
    }
    replay r = {ctx, &st->def, st->tuner, trials, n, -1, NULL, 0};
    rc = sto_study_intermediates(ctx->db, id, replay_intermediate, &r);
    sto_epoch_list_free(r.eps, r.n_eps);
    if (rc) goto fail;
    for (size_t i = 0; i < n; i++) {
        tun_trial_state ts = api_tun_state(trials[i].state);
        if (ts == TUN_TRIAL_RUNNING || trials[i].started <= 0) continue;
        if ((rc = api_tuner_finish(st, &trials[i]))) goto fail;
    }
    free(x);
    sto_trial_list_free(trials, n);
    sto_study_clear(&s);
    *out = st;
    return 0;
fail:
    free(x);
    sto_trial_list_free(trials, n);
    sto_study_clear(&s);
    study_free(st);
    return rc;
}

/* The cached study id, or NULL (under the lock). */
static api_study *cached(const api_cache *c, int64_t id) {
    for (size_t i = 0; i < c->n; i++)
        if (c->items[i]->id == id) return c->items[i];
    return NULL;
}

/* The load of study id under way, or NULL (under the lock). */
static loading *load_of(const api_cache *c, int64_t id) {
    for (size_t i = 0; i < c->n_loads; i++)
        if (c->loads[i].id == id) return &c->loads[i];
    return NULL;
}

/* Takes out of the cache (under its lock) the least recently used study
 * that only the cache holds, and returns it (NULL when every one is held).
 * One at a time: each load that passes API_CACHE_KEEP drops one. */
static api_study *least_used_idle(api_cache *c) {
    size_t k = c->n;
    for (size_t i = 0; i < c->n; i++)
        if (c->items[i]->refs == 1 && (k == c->n || c->items[i]->used < c->items[k]->used)) k = i;
    if (k == c->n) return NULL;
    api_study *st = c->items[k];
    c->items[k] = c->items[--c->n];
    return st;
}

/* A study's first load replays its history and parses its definition, which
 * opens an embedded study's dataset: seconds for a large one. It runs
 * outside the cache's lock, so requests for other studies go on; a thread
 * that asks for the same study meanwhile waits for that load (a study is
 * never loaded twice at once). */
int api_study_acquire(api_ctx *ctx, int64_t id, api_study **out) {
    api_cache *c = ctx->cache;
    pthread_mutex_lock(&c->lock);
    api_study *hit;
    while (!(hit = cached(c, id)) && load_of(c, id)) pthread_cond_wait(&c->loaded, &c->lock);
    if (hit) {
        hit->refs++;
        hit->used = hpo_monotonic();
        *out = hit;
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    if (c->n_loads == c->cap_loads) {
        c->cap_loads = c->cap_loads ? 2 * c->cap_loads : 4;
        c->loads = hpo_xrealloc(c->loads, c->cap_loads * sizeof *c->loads);
    }
    c->loads[c->n_loads++] = (loading){id, 0};
    pthread_mutex_unlock(&c->lock);

    api_study *st = NULL;
    int rc = study_load(ctx, id, &st);

    pthread_mutex_lock(&c->lock);
    loading *l = load_of(c, id);
    if (rc == 0 && l->forgotten) rc = HPO_ENOTFOUND; /* deleted meanwhile */
    *l = c->loads[--c->n_loads];
    if (rc == 0) {
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 16;
            c->items = hpo_xrealloc(c->items, c->cap * sizeof *c->items);
        }
        st->refs = 2; /* the cache's and the caller's */
        st->used = hpo_monotonic();
        c->items[c->n++] = st;
        *out = st;
        st = NULL;
    }
    api_study *dropped = c->n > API_CACHE_KEEP ? least_used_idle(c) : NULL;
    pthread_cond_broadcast(&c->loaded);
    pthread_mutex_unlock(&c->lock);
    study_free(st); /* loaded but forgotten meanwhile */
    study_free(dropped);
    return rc;
}

void api_fail_study_acquire(api_response *resp, int rc, int64_t id) {
    if (rc == HPO_ENOTFOUND || rc == HPO_ENOMEM || rc == HPO_ESTORAGE || rc == HPO_EIO || rc == HPO_EFS ||
        rc == HPO_ENOSPACE) /* gone, or a failure that passes */
        api_fail_lookup(resp, rc, "study", id);
    else
        api_fail(resp, 409, "conflict", "id",
                 "study %lld can no longer be loaded (its uploaded dataset deleted, or a definition this version "
                 "refuses; hpod's log says why)",
                 (long long)id);
}

size_t api_cache_count(api_ctx *ctx) {
    api_cache *c = ctx->cache;
    pthread_mutex_lock(&c->lock);
    size_t n = c->n;
    pthread_mutex_unlock(&c->lock);
    return n;
}

void api_study_release(api_ctx *ctx, api_study *st) {
    if (!st) return;
    api_cache *c = ctx->cache;
    pthread_mutex_lock(&c->lock);
    int last = --st->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (last) study_free(st);
}

void api_study_forget(api_ctx *ctx, int64_t id) {
    api_cache *c = ctx->cache;
    api_study *st = NULL;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n; i++) {
        if (c->items[i]->id == id) {
            st = c->items[i];
            c->items[i] = c->items[--c->n];
            break;
        }
    }
    loading *l = load_of(c, id);
    if (l) l->forgotten = 1;
    pthread_mutex_unlock(&c->lock);
    if (st) api_study_release(ctx, st);
}
