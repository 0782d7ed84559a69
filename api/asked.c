/* asked.c - the trials asked through this node and not told yet: trial id
 * -> (study, number), so a tell finds its study without reading the trial
 * from storage first (on PostgreSQL a round trip of the ~8 of an ask and a
 * tell; api_internal.h). A direct-mapped cache: a slot per hash of the id,
 * a newer ask evicts an older one, and a tell that misses reads the trial
 * as before, so nothing here can be wrong, only absent. */
#include <stdlib.h>

#include "api_internal.h"

#define ASKED_SLOTS 4096 /* a power of two; an evicted entry costs one read */

typedef struct asked_slot {
    int64_t trial_id; /* 0: empty */
    int64_t study_id, number;
} asked_slot;

struct api_asked {
    pthread_mutex_t mu;
    asked_slot slot[ASKED_SLOTS];
};

static asked_slot *slot_of(api_asked *a, int64_t trial_id) {
    uint64_t h = (uint64_t)trial_id * UINT64_C(0x9E3779B97F4A7C15); /* Fibonacci hashing */
    return &a->slot[h >> 52]; /* the top 12 bits: ASKED_SLOTS = 2^12 */
}

void api_asked_new(api_ctx *ctx) {
    ctx->asked = hpo_xcalloc(1, sizeof *ctx->asked);
    pthread_mutex_init(&ctx->asked->mu, NULL);
}

void api_asked_free(api_ctx *ctx) {
    if (!ctx->asked) return;
    pthread_mutex_destroy(&ctx->asked->mu);
    free(ctx->asked);
    ctx->asked = NULL;
}

void api_asked_put(api_ctx *ctx, int64_t trial_id, int64_t study_id, int64_t number) {
    api_asked *a = ctx->asked;
    pthread_mutex_lock(&a->mu);
    *slot_of(a, trial_id) = (asked_slot){trial_id, study_id, number};
    pthread_mutex_unlock(&a->mu);
}

int api_asked_take(api_ctx *ctx, int64_t trial_id, int64_t *study_id, int64_t *number) {
    api_asked *a = ctx->asked;
    pthread_mutex_lock(&a->mu);
    asked_slot *s = slot_of(a, trial_id);
    int found = trial_id > 0 && s->trial_id == trial_id;
    if (found) {
        *study_id = s->study_id;
        *number = s->number;
        *s = (asked_slot){0};
    }
    pthread_mutex_unlock(&a->mu);
    return found;
}
