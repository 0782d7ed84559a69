/*
 * tpe_index.c - TPE's incremental index of a study's history (the contract
 * is in tuners_internal.h): finished count, multi-fidelity budget, the best
 * TUN_TPE_TOP finished trials, and one Fenwick tree per parameter group
 * over the trials the group models. study.c notes every change
 * (tun_tpe_index_note, O(groups log n + TUN_TPE_TOP)); tpe.c syncs before a
 * suggestion (tun_tpe_index_sync: nothing to do unless something is
 * stale). Everything here is a function of the history alone, so a study
 * replayed from storage has the same index as the live one.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"

void tun_tpe_index_free(tun_tpe_index *ix) {
    if (!ix) return;
    if (ix->fen)
        for (int g = 0; g < ix->n_groups; g++) free(ix->fen[g]);
    free(ix->fen);
    free(ix->count);
    free(ix->group_of);
    free(ix);
}

int tun_tpe_index_models(const tun_study *t, const tun_trial_rec *rec, int g) {
    if (!rec->present || rec->state == TUN_TRIAL_FAILED) return 0;
    const tun_tpe_index *ix = t->tpe;
    for (int j = 0; j < t->space->n; j++)
        if (ix->group_of[j] == g && isnan(rec->x[j])) return 0;
    return 1;
}

/* ---- Fenwick trees ---- */

static void fen_add(tun_tpe_index *ix, int g, int64_t idx, int32_t d) {
    int32_t *f = ix->fen[g];
    for (int64_t i = idx + 1; i <= ix->size; i += i & -i) f[i] += d;
    ix->count[g] += d;
}

int64_t tun_tpe_index_select(const tun_tpe_index *ix, int g, int64_t k) {
    const int32_t *f = ix->fen[g];
    int64_t pos = 0, rem = k + 1, step = 1;
    while (step * 2 <= ix->size) step *= 2;
    for (; step > 0; step /= 2)
        if (pos + step <= ix->size && f[pos + step] < rem) {
            pos += step;
            rem -= f[pos];
        }
    return pos; /* 1-based pos + 1 is the k-th: index pos */
}

/* every tree anew over t->cap indices, in O(cap * groups) */
static int fen_build(tun_study *t) {
    tun_tpe_index *ix = t->tpe;
    int64_t size = t->cap > 16 ? t->cap : 16;
    for (int g = 0; g < ix->n_groups; g++) {
        int32_t *f = realloc(ix->fen[g], (size_t)(size + 1) * sizeof *f);
        if (!f) return HPO_ENOMEM;
        ix->fen[g] = f;
        memset(f, 0, (size_t)(size + 1) * sizeof *f);
        ix->count[g] = 0;
    }
    ix->size = size;
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *rec = &t->trials[i];
        for (int g = 0; g < ix->n_groups; g++)
            if (tun_tpe_index_models(t, rec, g)) {
                ix->fen[g][i + 1] = 1;
                ix->count[g]++;
            }
    }
    for (int g = 0; g < ix->n_groups; g++) {
        int32_t *f = ix->fen[g];
        for (int64_t i = 1; i <= size; i++) {
            int64_t j = i + (i & -i);
            if (j <= size) f[j] += f[i];
        }
    }
    ix->fen_ok = 1;
    return 0;
}

/* ---- the best few ---- */

static void top_insert(tun_tpe_index *ix, const tun_tpe_key *k) {
    if (ix->n_top == TUN_TPE_TOP && tun_tpe_key_cmp(k, &ix->top[TUN_TPE_TOP - 1]) >= 0) return;
    int lo = 0, hi = ix->n_top;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (tun_tpe_key_cmp(&ix->top[mid], k) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    int n = ix->n_top < TUN_TPE_TOP ? ix->n_top : TUN_TPE_TOP - 1;
    memmove(ix->top + lo + 1, ix->top + lo, (size_t)(n - lo) * sizeof *ix->top);
    ix->top[lo] = *k;
    if (ix->n_top < TUN_TPE_TOP) ix->n_top++;
}

static void top_build(tun_study *t) {
    tun_tpe_index *ix = t->tpe;
    ix->n_top = 0;
    for (int64_t i = 0; i < t->cap; i++) {
        const tun_trial_rec *rec = &t->trials[i];
        if (!rec->present || !tun_tpe_is_finished(rec)) continue;
        tun_tpe_key k;
        tun_tpe_key_of(t, i, ix->budget, &k);
        top_insert(ix, &k);
    }
    ix->top_ok = 1;
}

static void budget_build(tun_study *t) {
    tun_tpe_index *ix = t->tpe;
    int n_min = t->space->n + 2;
    ix->n_steps_top = 0;
    ix->budget = -1;
    if (tun_tpe_multi_fidelity(t) && n_min <= TUN_TPE_BUDGET_MAX)
        for (int64_t i = 0; i < t->cap; i++) {
            const tun_trial_rec *rec = &t->trials[i];
            if (!rec->present || !tun_tpe_is_finished(rec) || rec->n_steps == 0) continue;
            ix->budget = tun_tpe_budget_push(ix->steps_top, &ix->n_steps_top, n_min,
                                             rec->steps[rec->n_steps - 1]);
        }
    ix->budget_ok = 1;
}

int tun_tpe_index_sync(tun_study *t) {
    tun_tpe_index *ix = t->tpe;
    if (!ix) {
        const tun_space *s = t->space;
        ix = calloc(1, sizeof *ix);
        if (!ix) return HPO_ENOMEM;
        ix->group_of = malloc((size_t)s->n * sizeof *ix->group_of);
        if (!ix->group_of) {
            free(ix);
            return HPO_ENOMEM;
        }
        ix->n_groups = 1;
        for (int j = 0; j < s->n; j++) ix->group_of[j] = s->params[j].parent < 0 ? 0 : ix->n_groups++;
        ix->fen = calloc((size_t)ix->n_groups, sizeof *ix->fen);
        ix->count = calloc((size_t)ix->n_groups, sizeof *ix->count);
        if (!ix->fen || !ix->count) {
            tun_tpe_index_free(ix);
            return HPO_ENOMEM;
        }
        for (int64_t i = 0; i < t->cap; i++)
            if (t->trials[i].present && tun_tpe_is_finished(&t->trials[i])) ix->n_finished++;
        t->tpe = ix;
    }
    if (!ix->budget_ok) {
        budget_build(t);
        ix->top_ok = 0;
    }
    if (!ix->top_ok) top_build(t);
    if (!ix->fen_ok) return fen_build(t);
    return 0;
}

void tun_tpe_index_note(tun_study *t, int64_t idx, int prev_state) {
    tun_tpe_index *ix = t->tpe;
    if (!ix) return;
    const tun_trial_rec *rec = &t->trials[idx];
    int finished = tun_tpe_is_finished(rec);
    if (prev_state == (int)rec->state) { /* a report */
        if (finished) ix->budget_ok = ix->top_ok = 0; /* its key, maybe the budget, moved */
        return;
    }
    if (ix->fen_ok && idx >= ix->size) ix->fen_ok = 0; /* the history outgrew the trees */
    if (ix->fen_ok)
        for (int g = 0; g < ix->n_groups; g++) {
            int now = tun_tpe_index_models(t, rec, g);
            /* modelled before: a new record was not; a finished one was
             * unless failed or a parameter of g inactive */
            tun_trial_rec was = *rec;
            was.state = prev_state < 0 ? TUN_TRIAL_FAILED : (tun_trial_state)prev_state;
            int before = tun_tpe_index_models(t, &was, g);
            if (now != before) fen_add(ix, g, idx, now ? 1 : -1);
        }
    if (!finished) return;
    ix->n_finished++;
    if (ix->budget_ok && tun_tpe_multi_fidelity(t) && rec->n_steps > 0 &&
        t->space->n + 2 <= TUN_TPE_BUDGET_MAX) {
        int64_t b = tun_tpe_budget_push(ix->steps_top, &ix->n_steps_top, t->space->n + 2,
                                        rec->steps[rec->n_steps - 1]);
        if (b != ix->budget) {
            ix->budget = b;
            ix->top_ok = 0; /* every key at the old budget is stale */
        }
    }
    if (ix->budget_ok && ix->top_ok) {
        tun_tpe_key k;
        tun_tpe_key_of(t, idx, ix->budget, &k);
        top_insert(ix, &k);
    }
}
