/*
 * tabular_gen.c - generates the tabular HPO benchmark's table (issue 16;
 * lib/tabular.h): trains every configuration of the grid with hpod's own
 * engine on a Fashion-MNIST subset and appends, per configuration, its
 * per-epoch val_accuracy, val_loss and seconds to the table file.
 *
 *   bench_tabular_gen [--out tests/bench/data/tabular_fmnist.csv] [--tasks mlp,cnn]
 *                     [--train 3000] [--val 1000] [--epochs 27] [--seed 1]
 *                     [--threads 1] [--probe N]
 *
 * Resumable: configurations already in the file are skipped, and a
 * configuration's line is written (and flushed) only once all its epochs
 * are trained, so an interrupted run is continued by running it again.
 * Data: the Fashion-MNIST training set, shuffled with hpo_rng seeded by
 * seed + task index (ENG_SPLIT_SHUFFLE): the last `val` rows validate, the
 * first `train` of the rest train; each task has its own subset. Each
 * configuration trains from the first draw of hpo_rng_derive(seed, task, id) with fp32 on
 * `threads` threads (1: bit-reproducible), constant learning rate, no early
 * stopping. Seconds per epoch are wall time of training plus validation.
 * --probe N trains only the first epoch of every Nth configuration and
 * prints the estimated total time (nothing written).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "hpo.h"
#include "model.h"
#include "rng.h"
#include "tabular.h"
#include "train.h"

typedef struct rec {
    tab_curve c;
    double t0;
} rec;

static int on_epoch(const eng_epoch_report *r, void *user) {
    rec *q = user;
    double now = hpo_monotonic();
    int e = r->epoch - 1;
    if (e >= 0 && e < TAB_MAX_EPOCHS) {
        q->c.acc[e] = (float)r->val.accuracy;
        q->c.loss[e] = (float)r->val.loss;
        q->c.sec[e] = (float)(now - q->t0);
        q->c.epochs = r->epoch;
    }
    q->t0 = now;
    return 0;
}

/* The engine template of configuration id of task t (a new reference). */
static json_t *template_of(const tab_task *t, int id, int *batch) {
    int idx[TAB_MAX_AXES];
    tab_decode(t, id, idx);
    double v[TAB_MAX_AXES];
    const char *opt = "adam";
    *batch = 128;
    for (int a = 0; a < t->n_axes; a++) {
        const tab_axis *ax = &t->axes[a];
        v[a] = ax->values[idx[a]];
        if (strcmp(ax->name, "optimizer") == 0) opt = ax->labels[idx[a]];
        if (strcmp(ax->name, "batch") == 0) *batch = atoi(ax->labels[idx[a]]);
    }
    json_t *layers = json_array();
    double lr = 1e-3;
    if (strcmp(t->name, "mlp") == 0) {
        int n = (int)v[0], units = (int)v[1];
        double drop = v[3];
        lr = v[2];
        json_array_append_new(layers, json_pack("{s:{}}", "flatten"));
        for (int i = 0; i < n; i++) {
            json_array_append_new(layers, json_pack("{s:{s:i, s:s}}", "dense", "units", units, "activation", "relu"));
            if (drop > 0) json_array_append_new(layers, json_pack("{s:{s:f}}", "dropout", "rate", drop));
        }
    } else {
        int convs = (int)v[0], filters = (int)v[1], units = (int)v[2];
        lr = v[3];
        for (int i = 0; i < convs; i++) {
            json_array_append_new(layers, json_pack("{s:{s:i, s:i, s:s, s:i, s:s}}", "conv2d", "filters", filters << i,
                                                    "kernel", 3, "padding", "same", "stride", 1, "activation", "relu"));
            json_array_append_new(layers, json_pack("{s:{s:i}}", "maxpool2d", "pool", 2));
        }
        json_array_append_new(layers, json_pack("{s:{}}", "flatten"));
        json_array_append_new(layers, json_pack("{s:{s:i, s:s}}", "dense", "units", units, "activation", "relu"));
    }
    json_array_append_new(layers, json_pack("{s:{s:i, s:s}}", "dense", "units", 10, "activation", "softmax"));
    json_t *o = json_pack("{s:s, s:f}", "name", opt, "learning_rate", lr);
    if (strcmp(opt, "sgd") == 0) json_object_set_new(o, "momentum", json_real(0.9));
    return json_pack("{s:o, s:s, s:o}", "layers", layers, "loss", "sparse_categorical_crossentropy", "optimizer", o);
}

static void put_list(FILE *f, const float *v, int n, const char *fmt) {
    for (int i = 0; i < n; i++) {
        if (i) fputc(' ', f);
        fprintf(f, fmt, (double)v[i]);
    }
}

/* Marks the configurations already in the file (done[task][id]). */
static void read_done(const char *path, unsigned char **done) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) >= 0) {
        if (line[0] == '#') continue;
        char *c = strchr(line, ',');
        if (!c) continue;
        *c = 0;
        int ti = tab_task_index(line), id = atoi(c + 1);
        if (ti >= 0 && id >= 0 && id < tab_task_size(&tab_tasks[ti])) done[ti][id] = 1;
    }
    free(line);
    fclose(f);
}

int main(int argc, char **argv) {
    const char *out = "tests/bench/data/tabular_fmnist.csv", *tasks = "mlp,cnn";
    int train_n = 3000, val_n = 1000, epochs = TAB_MAX_EPOCHS, threads = 1, probe = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--tasks") && i + 1 < argc) tasks = argv[++i];
        else if (!strcmp(argv[i], "--train") && i + 1 < argc) train_n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--val") && i + 1 < argc) val_n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--probe") && i + 1 < argc) probe = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--out FILE] [--tasks mlp,cnn] [--train 3000] [--val 1000] [--epochs 27] "
                            "[--seed 1] [--threads 1] [--probe N]\n", argv[0]);
            return 2;
        }
    }
    if (epochs < 1 || epochs > TAB_MAX_EPOCHS || train_n < 1 || val_n < 1) {
        fprintf(stderr, "tabular_gen: --epochs must be in 1..%d, --train and --val >= 1\n", TAB_MAX_EPOCHS);
        return 2;
    }
    hpo_error err;
    eng_dataset *ds = NULL;
    if (eng_dataset_cache_get("fashion-mnist", "train", &ds, &err)) {
        fprintf(stderr, "tabular_gen: %s\n", err.message);
        return 77;
    }
    unsigned char *done[TAB_N_TASKS];
    for (int ti = 0; ti < TAB_N_TASKS; ti++) done[ti] = calloc((size_t)tab_task_size(&tab_tasks[ti]), 1);
    FILE *f = NULL;
    if (!probe) {
        read_done(out, done);
        FILE *probe_f = fopen(out, "r");
        int fresh = !probe_f;
        if (probe_f) fclose(probe_f);
        f = fopen(out, "a");
        if (!f) {
            fprintf(stderr, "tabular_gen: cannot open %s\n", out);
            return 1;
        }
        if (fresh)
            fprintf(f,
                    "# tabular_fmnist.csv - the tabular HPO benchmark of issue 16 (tests/bench/lib/tabular.h has the\n"
                    "# grid and the format; tests/bench/data/README.md how it was made).\n"
                    "# made by: bench_tabular_gen --train %d --val %d --epochs %d --seed %llu --threads %d\n"
                    "# engine: hpod %s, fp32, Fashion-MNIST train set shuffled with seed+task, constant lr\n"
                    "# columns: task,config,params,epochs,val_accuracy[epochs],val_loss[epochs],seconds[epochs]\n",
                    train_n, val_n, epochs, (unsigned long long)seed, threads, HPO_VERSION);
    }
    double probe_total = 0;
    int probe_n = 0;
    for (int ti = 0; ti < TAB_N_TASKS; ti++) {
        const tab_task *task = &tab_tasks[ti];
        const char *p = strstr(tasks, task->name);
        if (!p) continue;
        eng_split tr, va;
        eng_split_spec spec = {.val_count = (size_t)val_n, .mode = ENG_SPLIT_SHUFFLE, .seed = seed + (uint64_t)ti,
                               .limit = (size_t)train_n};
        if (eng_split_make(ds, &spec, &tr, &va, &err)) {
            fprintf(stderr, "tabular_gen: %s\n", err.message);
            return 1;
        }
        int n = tab_task_size(task), to_train = 0;
        for (int id = 0; id < n; id++) to_train += !done[ti][id];
        fprintf(stderr, "tabular_gen: task %s: %d configurations, %d to train\n", task->name, n, probe ? n : to_train);
        double t_start = hpo_monotonic();
        int trained = 0;
        for (int id = 0; id < n; id++) {
            if (probe ? id % probe != 0 : done[ti][id]) continue;
            int batch;
            json_t *tmpl = template_of(task, id, &batch);
            int shape[3] = {28, 28, 1};
            hpo_rng rng;
            hpo_rng_derive(&rng, seed, (uint64_t)ti, (uint64_t)id);
            uint64_t s = hpo_rng_u64(&rng);
            eng_model *m = NULL;
            if (eng_model_new(tmpl, NULL, 3, shape, 10, s, &m, &err)) {
                fprintf(stderr, "tabular_gen: %s config %d: %s\n", task->name, id, err.message);
                return 1;
            }
            eng_train_opts o;
            eng_train_opts_init(&o);
            o.epochs = probe ? 1 : epochs;
            o.batch_size = batch;
            o.threads = threads;
            o.seed = s;
            o.patience = -1;
            o.checkpoint_dir = NULL;
            o.on_epoch = on_epoch;
            rec q;
            memset(&q, 0, sizeof q);
            o.user = &q;
            q.t0 = hpo_monotonic();
            eng_train_result res;
            int rc = eng_train(m, &tr, &va, &o, &res, &err);
            eng_model_free(m);
            json_decref(tmpl);
            if (rc && rc != HPO_EDIVERGED) {
                fprintf(stderr, "tabular_gen: %s config %d: %s\n", task->name, id, err.message);
                return 1;
            }
            if (q.c.epochs == 0) { /* diverged in its first epoch: chance level, recorded as such */
                q.c.epochs = 1;
                q.c.acc[0] = 0.1f;
                q.c.loss[0] = (float)log(10.0);
                q.c.sec[0] = (float)(hpo_monotonic() - q.t0);
            }
            if (probe) {
                probe_total += q.c.sec[0] * epochs * probe;
                probe_n++;
                fprintf(stderr, "  %s %d: %.3f s/epoch acc %.3f\n", task->name, id, q.c.sec[0], q.c.acc[0]);
                continue;
            }
            char params[512];
            tab_params_text(task, id, params, sizeof params);
            fprintf(f, "%s,%d,%s,%d,", task->name, id, params, q.c.epochs);
            put_list(f, q.c.acc, q.c.epochs, "%.4g");
            fputc(',', f);
            put_list(f, q.c.loss, q.c.epochs, "%.4g");
            fputc(',', f);
            put_list(f, q.c.sec, q.c.epochs, "%.3g");
            fputc('\n', f);
            fflush(f);
            trained++;
            double el = hpo_monotonic() - t_start;
            fprintf(stderr, "tabular_gen: %s %d/%d (%s) best %.4f, %d epochs; %.0f s, ~%.0f s left\n", task->name,
                    trained, to_train, params, tab_best_of(&q.c, q.c.epochs), q.c.epochs, el,
                    el / trained * (to_train - trained));
        }
        eng_split_clear(&tr);
        eng_split_clear(&va);
    }
    if (probe) fprintf(stderr, "tabular_gen: probe: %d configs, about %.0f s for the grid\n", probe_n, probe_total);
    if (f && fclose(f)) {
        fprintf(stderr, "tabular_gen: writing %s failed\n", out);
        return 1;
    }
    for (int ti = 0; ti < TAB_N_TASKS; ti++) free(done[ti]);
    eng_dataset_release(ds);
    return 0;
}
