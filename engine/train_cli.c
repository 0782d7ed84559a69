/* train_cli.c - `hpod train`: train a model template on a dataset from the
 * command line, one JSON line per epoch and a JSON summary at the end.
 *
 *   hpod train --model FILE.json --dataset fashion-mnist --epochs N
 *              --batch-size B --precision fp32|mixed_bf16|mixed_fp16
 *              --threads T [--limit N] [--seed S] [--validation-split N]
 *              [--checkpoint-dir D] [--resume] [--params JSON]
 *              [--patience P --monitor M --min-delta D --restore-best]
 *              [--no-prefetch] [--quiet]
 *
 * The model file is a template as in model.h; "$name" references are
 * resolved from --params (a JSON object). Exit status 0 on success, 2 on bad
 * usage, 3 on divergence, 1 on other errors (message on stderr). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "engine_cli.h"
#include "model.h"
#include "train.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: hpod train --model FILE.json --dataset fashion-mnist [--epochs N] [--batch-size B]\n"
            "       [--precision fp32|mixed_bf16|mixed_fp16] [--threads T] [--limit N] [--seed S]\n"
            "       [--validation-split N] [--checkpoint-dir D] [--resume] [--params JSON]\n"
            "       [--patience P] [--monitor METRIC] [--min-delta D] [--restore-best] [--no-prefetch] [--quiet]\n"
            "  --threads T > 1 trains data-parallel: each thread runs the model on 1/T of every batch\n");
}

static void put_metrics(json_t *o, const char *prefix, const eng_metrics *m) {
    char k[32];
    snprintf(k, sizeof k, "%sloss", prefix);
    json_object_set_new(o, k, json_real(m->loss));
    snprintf(k, sizeof k, "%saccuracy", prefix);
    json_object_set_new(o, k, json_real(m->accuracy));
    snprintf(k, sizeof k, "%smse", prefix);
    json_object_set_new(o, k, json_real(m->mse));
    snprintf(k, sizeof k, "%smae", prefix);
    json_object_set_new(o, k, json_real(m->mae));
}

static void print_json(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s) {
        printf("%s\n", s);
        fflush(stdout);
        free(s);
    }
    json_decref(o);
}

static int on_epoch(const eng_epoch_report *r, void *user) {
    if (*(int *)user) return 0;
    json_t *o = json_object();
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    put_metrics(o, "", &r->train);
    if (r->has_val) put_metrics(o, "val_", &r->val);
    json_object_set_new(o, "samples_per_s", json_real(r->samples_per_s));
    json_object_set_new(o, "seconds", json_real(r->seconds));
    json_object_set_new(o, "lr", json_real(r->lr));
    if (r->loss_scale != 1.0) {
        json_object_set_new(o, "loss_scale", json_real(r->loss_scale));
        json_object_set_new(o, "skipped_steps", json_integer(r->skipped_steps));
    }
    print_json(o);
    return 0;
}

int eng_train_main(int argc, char **argv) {
    const char *model_path = NULL, *dataset = "fashion-mnist", *prec = "fp32", *ckdir = NULL, *params_s = NULL;
    const char *monitor = "val_loss";
    long epochs = 10, bs = 128, threads = 1, limit = 0, vsplit = 0, patience = -1;
    unsigned long long seed = 0;
    double min_delta = 0;
    int resume = 0, restore = 0, prefetch = 1, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && (i++, 1))
        if (!strcmp(a, "train")) continue;
        else if (OPT("--model")) model_path = v;
        else if (OPT("--dataset")) dataset = v;
        else if (OPT("--epochs")) epochs = strtol(v, NULL, 10);
        else if (OPT("--batch-size")) bs = strtol(v, NULL, 10);
        else if (OPT("--precision")) prec = v;
        else if (OPT("--threads")) threads = strtol(v, NULL, 10);
        else if (OPT("--limit")) limit = strtol(v, NULL, 10);
        else if (OPT("--seed")) seed = strtoull(v, NULL, 10);
        else if (OPT("--validation-split")) vsplit = strtol(v, NULL, 10);
        else if (OPT("--checkpoint-dir")) ckdir = v;
        else if (OPT("--params")) params_s = v;
        else if (OPT("--patience")) patience = strtol(v, NULL, 10);
        else if (OPT("--monitor")) monitor = v;
        else if (OPT("--min-delta")) min_delta = strtod(v, NULL);
        else if (!strcmp(a, "--resume")) resume = 1;
        else if (!strcmp(a, "--restore-best")) restore = 1;
        else if (!strcmp(a, "--no-prefetch")) prefetch = 0;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "hpod train: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        }
#undef OPT
    }
    int precision = eng_precision_parse(prec);
    if (!model_path || precision < 0 || epochs < 0 || bs < 1 || threads < 1 || limit < 0 || vsplit < 0) {
        usage(stderr);
        return 2;
    }
    hpo_error err = {{0}, {0}};
    json_error_t jerr;
    json_t *tmpl = json_load_file(model_path, 0, &jerr), *params = NULL;
    eng_dataset *train_ds = NULL, *test_ds = NULL;
    eng_split tr = {0}, va = {0}, te = {0};
    eng_model *m = NULL;
    int rc = 0, status = 1;
    if (!tmpl) {
        fprintf(stderr, "hpod train: %s:%d: %s\n", model_path, jerr.line, jerr.text);
        return 2;
    }
    if (params_s && !(params = json_loads(params_s, 0, &jerr))) {
        fprintf(stderr, "hpod train: --params: %s\n", jerr.text);
        json_decref(tmpl);
        return 2;
    }
    if ((rc = eng_model_check_keys(tmpl, params, &err))) goto fail;
    if ((rc = eng_dataset_cache_get(dataset, "train", &train_ds, &err))) goto fail;
    if ((rc = eng_dataset_cache_get(dataset, "test", &test_ds, &err))) goto fail;
    eng_split_spec spec = {.val_count = (size_t)vsplit, .mode = ENG_SPLIT_TAIL, .limit = (size_t)limit};
    if ((rc = eng_split_make(train_ds, &spec, &tr, vsplit ? &va : NULL, &err))) goto fail;
    if ((rc = eng_split_all(test_ds, &te))) goto fail;
    int shape[3] = {0, 0, 0};
    for (int i = 0; i < train_ds->rank && i < 3; i++) shape[i] = (int)train_ds->shape[i];
    if ((rc = eng_model_new(tmpl, params, train_ds->rank, shape, train_ds->n_classes, seed, &m, &err))) goto fail;
    char summary[1024];
    eng_model_summary(m, summary, sizeof summary);
    if (!quiet) fprintf(stderr, "hpod train: %s\n", summary);
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.epochs = (int)epochs;
    o.batch_size = (int)bs;
    o.threads = (int)threads;
    o.seed = seed;
    o.precision = precision;
    o.patience = (int)patience;
    o.monitor = monitor;
    o.min_delta = min_delta;
    o.restore_best = restore;
    o.checkpoint_dir = ckdir;
    o.resume = resume;
    o.prefetch = prefetch;
    o.on_epoch = on_epoch;
    o.user = &quiet;
    eng_train_result res;
    memset(&res, 0, sizeof res);
    double t0 = hpo_monotonic();
    rc = eng_train(m, &tr, vsplit ? &va : NULL, &o, &res, &err);
    json_t *sum = json_object();
    json_object_set_new(sum, "summary", json_true());
    json_object_set_new(sum, "status", json_string(rc == 0 ? "complete" : rc == HPO_EDIVERGED ? "diverged" : "failed"));
    json_object_set_new(sum, "epochs", json_integer(res.epochs_run));
    if (rc == 0) {
        eng_metrics tm;
        if ((rc = eng_evaluate(m, &te, 1000, &tm, &err))) goto fail;
        json_object_set_new(sum, "test_loss", json_real(tm.loss));
        json_object_set_new(sum, "test_accuracy", json_real(tm.accuracy));
        put_metrics(sum, "", &res.train);
        if (res.has_val) put_metrics(sum, "val_", &res.val);
        json_object_set_new(sum, "best_epoch", json_integer(res.best_epoch));
        json_object_set_new(sum, "stopped_early", json_boolean(res.stopped_early));
        status = 0;
    } else {
        json_object_set_new(sum, "error", json_string(err.message));
        status = rc == HPO_EDIVERGED ? 3 : 1;
    }
    json_object_set_new(sum, "samples_per_s", json_real(res.samples_per_s));
    json_object_set_new(sum, "seconds", json_real(hpo_monotonic() - t0));
    json_object_set_new(sum, "precision", json_string(eng_precision_name(precision)));
    json_object_set_new(sum, "threads", json_integer(threads));
    json_object_set_new(sum, "params", json_integer((json_int_t)m->nparams));
    print_json(sum);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "hpod train: %s: %s%s%s\n", hpo_strerror(rc), err.field[0] ? err.field : "",
                    err.field[0] ? ": " : "", err.message);
    eng_model_free(m);
    eng_split_clear(&tr);
    if (vsplit) eng_split_clear(&va);
    eng_split_clear(&te);
    eng_dataset_release(train_ds);
    eng_dataset_release(test_ds);
    json_decref(tmpl);
    json_decref(params);
    return rc ? 1 : status;
}
