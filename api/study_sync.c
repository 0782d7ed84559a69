/* study_sync.c - a study's cached tuner state kept in step with the
 * database when other hpod nodes write it too (PostgreSQL): before the
 * tuner is asked or told, the trials changed since the cache's cursor
 * (sto_trials_changed) are folded into its history, and a new trial is
 * stored at the study's next number after a last catch-up under the
 * study's row lock (suggested again there when another node took the same
 * point meanwhile; api_internal.h). */
#include <math.h>
#include <stdlib.h>

#include "api_internal.h"

/* Attempts at an exact number before a trial takes whatever number storage
 * gives (a safeguard: under the study's lock the first one succeeds). */
#define NEW_TRIAL_TRIES 16

int api_prune_answer(const api_study *st, int64_t number, int prune) {
    if (!prune) return 0;
    int rung = tun_study_prune_rung(st->tuner, number);
    return rung >= 0 ? 2 + rung : 1;
}

/* Folds one changed trial t into the history; x is scratch (space->n).
 * Only a storage failure is returned. */
static int sync_trial(api_ctx *ctx, api_study *st, const sto_trial *t, double *x) {
    api_study_note_waiting(st, t);
    if (t->number >= st->next_number) { /* t is by number: a new one */
        st->next_number = t->number + 1;
        if (!t->lineage) st->pbt_members++;
    }
    if (t->started <= 0) return 0; /* enqueued and waiting: not in the history yet */
    tun_trial_state ts = TUN_TRIAL_RUNNING;
    int64_t known_step = -1;
    if (tun_study_trial(st->tuner, t->number, &ts, &known_step) == HPO_ENOTFOUND) {
        hpo_error err = {{0}, {0}};
        json_t *params = json_loads(t->params, 0, NULL);
        int rc = params ? tun_space_from_json(st->def.space, params, x, &err) : HPO_EINTERNAL;
        json_decref(params);
        if (rc == 0) rc = tun_study_add(st->tuner, t->number, x, TUN_TRIAL_RUNNING, NAN);
        if (rc) {
            HPO_ERROR("study %lld trial %lld: stored params unreadable, left out of the tuner", (long long)st->id,
                      (long long)t->number);
            return 0;
        }
    } else if (ts != TUN_TRIAL_RUNNING) {
        return 0; /* its end is known: nothing of it changes for the tuner */
    }
    /* the steps after the highest one the tuner has (a step reported out
     * of order below it is not read: the tuner keeps a step's first value
     * anyway, and reports go up) */
    if (t->last_step > known_step) {
        sto_intermediate *rows = NULL;
        size_t n = 0;
        sto_epoch *eps = NULL; /* MO-ASHA: the vectors, the trial's curve points */
        size_t n_eps = 0;
        int rc = sto_trial_intermediates_after(ctx->db, t->id, known_step, &rows, &n);
        if (rc == 0 && api_reports_vectors(&st->def) && n > 0) rc = sto_trial_epochs(ctx->db, t->id, &eps, &n_eps);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            double vec[TUN_MAX_OBJECTIVES];
            api_report_vector(&st->def, eps, n_eps, rows[i].step, rows[i].value, vec);
            tun_study_replay_report(st->tuner, t->number, rows[i].step, vec, rows[i].flags & STO_STEP_LATE,
                                    rows[i].flags & STO_STEP_PRUNED, rows[i].rung);
        }
        sto_epoch_list_free(eps, n_eps);
        free(rows);
        if (rc) return rc;
    }
    if (api_tun_state(t->state) != TUN_TRIAL_RUNNING) {
        int rc = api_tuner_finish(st, t);
        if (rc) /* logged, not returned: one odd trial must not stop every ask */
            HPO_WARN("study %lld: the tuner refused the end of trial %lld: %s", (long long)st->id,
                     (long long)t->number, hpo_strerror(rc));
    }
    return 0;
}

int api_study_sync_state(api_ctx *ctx, api_study *st, sto_study_state *state) {
    if (!sto_shared(ctx->db)) { /* SQLite: this process is its one writer */
        sto_study s;
        int rc = state ? sto_study_get(ctx->db, st->id, &s) : 0;
        if (rc == 0 && state) {
            *state = s.state;
            sto_study_clear(&s);
        }
        return rc;
    }
    sto_trial *t = NULL;
    size_t n = 0;
    int64_t seq = st->seq;
    int rc = sto_trials_changed(ctx->db, st->id, st->seq, &t, &n, &seq, state);
    if (rc) return rc;
    st->synced += (int64_t)n;
    double *x = hpo_xcalloc((size_t)st->def.space->n + 1, sizeof *x);
    for (size_t i = 0; rc == 0 && i < n; i++) rc = sync_trial(ctx, st, &t[i], x);
    if (rc == 0) st->seq = seq; /* else read again next time: folding a trial twice changes nothing */
    free(x);
    sto_trial_list_free(t, n);
    return rc;
}

int api_study_sync(api_ctx *ctx, api_study *st) { return api_study_sync_state(ctx, st, NULL); }

/* Another node's trial numbered from..next_number-1 (just synced) holds x. */
static int taken_meanwhile(const api_study *st, int64_t from, const double *x) {
    for (int64_t n = from; n < st->next_number; n++)
        if (tun_study_same_point(st->tuner, n, x)) return 1;
    return 0;
}

/* A suggestion: the point, the number it was made for, its JSON. */
typedef struct suggestion {
    double *x;
    int64_t number;
    json_t *params;
    char *text; /* compact */
} suggestion;

/* A new suggestion for the study's next number (the old one dropped). */
static int suggest_next(api_study *st, suggestion *g) {
    json_decref(g->params);
    free(g->text);
    g->params = NULL;
    g->text = NULL;
    g->number = st->next_number;
    int rc = tun_study_suggest(st->tuner, g->number, g->x);
    if (rc == HPO_EEXHAUSTED) st->exhausted = 1;
    if (rc) return rc;
    g->params = tun_space_to_json(st->def.space, g->x);
    return (g->text = json_dumps(g->params, JSON_COMPACT)) ? 0 : HPO_ENOMEM;
}

/* The catch-up of a new trial's insert (sto_trial_run.catch_up), under
 * the study's row lock: the view takes in every trial numbered so far,
 * and the suggestion goes to the next number. One of them may hold the
 * very same point: a grid's next point, or two nodes suggesting for one
 * number from one history (a suggestion is seeded by its number); then
 * it is made again here, for the next number, from a view no other node
 * can change before the commit. */
typedef struct catch_up_arg {
    api_ctx *ctx;
    api_study *st;
    suggestion *g;
} catch_up_arg;

static int catch_up(void *arg, int64_t *number, const char **params) {
    catch_up_arg *c = arg;
    int rc = api_study_sync(c->ctx, c->st);
    if (rc == 0 && taken_meanwhile(c->st, c->g->number, c->g->x)) rc = suggest_next(c->st, c->g);
    if (rc) return rc;
    *number = c->st->next_number;
    *params = c->g->text;
    return 0;
}

int api_study_new_trial(api_ctx *ctx, api_study *st, sto_trial_run *r, double *x, json_t **params_out,
                        int64_t *trial_id_out, int64_t *number_out) {
    int shared = sto_shared(ctx->db), suggest = 1, exact = 1, rc = 0;
    suggestion g = {x, 0, NULL, NULL};
    catch_up_arg c = {ctx, st, &g};
    /* the suggestion sees every trial stored before the caller's sync; the
     * catch-up under the lock, those stored since */
    for (int attempt = 1;; attempt++) {
        int64_t trial_id = 0, number = 0;
        if (suggest && (rc = suggest_next(st, &g))) break;
        suggest = 0;
        /* at the next number (caught up under the study's lock on
         * PostgreSQL); still behind after NEW_TRIAL_TRIES, or behind where
         * nothing can tell why (SQLite): any */
        r->params = g.text;
        r->exact_number = exact && attempt < NEW_TRIAL_TRIES;
        r->number = st->next_number;
        r->catch_up = shared && r->exact_number ? catch_up : NULL;
        r->catch_up_arg = &c;
        rc = sto_trial_create_with(ctx->db, st->id, r, &trial_id, &number);
        r->params = g.text; /* the catch-up's, when it suggested again */
        r->catch_up = NULL;
        r->catch_up_arg = NULL;
        if (rc == 0 && number != st->next_number)
            HPO_WARN("study %lld: storage numbered the trial %lld, the tuner expected %lld", (long long)st->id,
                     (long long)number, (long long)st->next_number);
        if (rc == HPO_EEXHAUSTED && !st->exhausted && r->max_trials > 0 && st->next_number < r->max_trials)
            st->next_number = r->max_trials; /* other nodes created the rest of the budget */
        if (rc == HPO_ESTALE) {
            /* the insert found its number taken (the lock rules that out
             * on PostgreSQL): catch up, and suggest again only if the
             * point was taken too */
            if (!shared) exact = 0;
            if ((rc = api_study_sync(ctx, st))) break;
            suggest = taken_meanwhile(st, g.number, x);
            continue;
        }
        if (rc) break;
        st->next_number = number + 1;
        tun_study_add(st->tuner, number, x, TUN_TRIAL_RUNNING, NAN);
        *trial_id_out = trial_id;
        *number_out = number;
        if (params_out) {
            *params_out = g.params;
            g.params = NULL;
        }
        break;
    }
    json_decref(g.params);
    free(g.text);
    return rc;
}
