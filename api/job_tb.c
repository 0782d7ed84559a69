/* job_tb.c - a trial's or a refit's TensorBoard runs (training.tensorboard;
 * jobs_internal.h): the run folders of data_dir.h, written through
 * engine/tb_events.h; a failure is logged once and stops the writing, never
 * the job. */
#include <stdio.h>
#include <string.h>

#include "jobs_internal.h"
#include "tb_events.h"

void api_tb_run_init(api_tb_run *t, api_ctx *ctx, const api_study *st, const char *what) {
    memset(t, 0, sizeof *t);
    t->root = ctx->opt.data_dir;
    snprintf(t->what, sizeof t->what, "%s", what);
    t->classify = st->def.emb.n_classes > 0;
    t->off = !st->def.emb.tensorboard;
}

void api_tb_run_select(api_tb_run *t, const char *dir) {
    eng_tb_close(t->w);
    t->w = NULL;
    snprintf(t->dir, sizeof t->dir, "%s", dir);
}

static void tb_failed(api_tb_run *t, int rc, const hpo_error *err) {
    HPO_WARN("%s: TensorBoard events are off for it from here on: %s", t->what,
             err->message[0] ? err->message : hpo_strerror(rc));
    eng_tb_close(t->w);
    t->w = NULL;
    t->off = 1;
}

void api_tb_run_epoch(api_tb_run *t, const eng_epoch_report *r) {
    if (t->off || !t->dir[0]) return;
    hpo_error err = {{0}, {0}};
    int rc = 0;
    if (!t->w) {
        rc = api_dir_make(t->root, t->dir, &err);
        if (rc == 0) rc = eng_tb_open(t->dir, &t->w, &err);
    }
    if (rc == 0) rc = eng_tb_write_epoch(t->w, r, t->classify, &err);
    if (rc) tb_failed(t, rc, &err);
}

void api_tb_run_clear(api_tb_run *t) {
    eng_tb_close(t->w);
    t->w = NULL;
    t->dir[0] = '\0';
}
