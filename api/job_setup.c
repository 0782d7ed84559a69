/* job_setup.c - what a training job is set up with: its options, its
 * splits, its seeds (jobs_internal.h). Shared by the trial runner, the
 * model jobs and the template checks at study creation. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "jobs_internal.h"
#include "train.h"

uint64_t api_seed_mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    return z ^ (z >> 31);
}

void api_trial_train_opts(api_ctx *ctx, const api_embedded *emb, int threads, eng_train_opts *o) {
    eng_train_opts_init(o);
    o->epochs = emb->max_epochs;
    o->batch_size = emb->batch_size;
    o->threads = threads;
    o->precision = emb->precision;
    o->steps_per_execution = emb->steps_per_execution;
    o->allow_tf32 = emb->allow_tf32;
    o->patience = emb->patience;
    o->monitor = emb->monitor;
    o->min_delta = emb->min_delta;
    /* The checkpoint always keeps the best epoch's weights too: a model taken
     * from the trial (POST /trials/{id}/model, ensembles) uses them. They
     * are the objective's best epoch, the one the trial's value and
     * best_epoch come from, whatever metric early stopping watches. */
    o->restore_best = 1;
    o->keep_metric = emb->curve;
    o->keep_mode = emb->curve_max ? 1 : -1;
    o->resume = 1;
    o->checkpoint_durable = ctx->opt.durable_checkpoints;
    o->prefetch = 1;
    o->max_bytes = (size_t)ctx->opt.max_model_bytes;
}

void api_slot_train_opts(const char *slot, const api_embedded *emb, eng_train_opts *o) {
    if (!slot || strncmp(slot, "cuda:", 5) != 0 || !api_device_fits(emb->device, slot)) return;
    o->cuda = 1;
    o->cuda_device = atoi(slot + 5);
    /* "cuda:G+H+.../K": a data-parallel replica on each GPU */
    const char *p = slot + 5;
    int n = 0;
    for (;;) {
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || n == (int)(sizeof o->cuda_devices / sizeof o->cuda_devices[0])) break;
        o->cuda_devices[n++] = (int)g;
        if (*end != '+') break;
        p = end + 1;
    }
    o->cuda_replicas = n > 1 ? n : 0;
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
    spec.mode = emb->split_shuffle ? ENG_SPLIT_SHUFFLE : ENG_SPLIT_TAIL;
    spec.seed = (uint64_t)emb->split_seed;
    spec.limit = (size_t)emb->limit;
    spec.val_limit = (size_t)emb->validation_limit;
    rc = eng_split_make(ds, &spec, train, val, err);
    eng_dataset_release(ds);
    return rc;
}

int api_open_test(api_ctx *ctx, const api_embedded *emb, eng_split *test, hpo_error *err) {
    eng_dataset *ds = NULL;
    int rc = api_dataset_open(ctx, emb->dataset, "test", &ds, err);
    if (rc) return rc;
    rc = eng_split_all(ds, test);
    eng_dataset_release(ds);
    return rc;
}
