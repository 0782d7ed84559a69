/*
 * train_loop.h - what every training loop of eng_train shares, whatever runs
 * its steps (train.c on the CPU, train_cuda.c on a CUDA device): the data
 * checks, the early-stopping monitor, the best epoch's weights, resuming from
 * a checkpoint, the end of an epoch (monitor, patience, the on_epoch
 * callback, then the checkpoint) and the result.
 *
 * Design notes
 * - Internal to engine/ (train.h is the public interface). The loops keep
 *   the host model current at every epoch end before calling
 *   eng_train_loop_epoch_end: it copies m->params and m->stats (the
 *   batch-norm running statistics) for the best epoch and
 *   writes the checkpoint from m, so a checkpoint has one layout whoever
 *   trained (a trial paused on a GPU resumes on a CPU and back).
 * - The order of an epoch end is train.h's: the callback runs before the
 *   checkpoint is written; a negative callback code ends training without
 *   checkpointing the epoch.
 * Threading: one loop per training thread.
 */
#ifndef ENG_TRAIN_LOOP_H
#define ENG_TRAIN_LOOP_H

#include "train.h"

typedef struct eng_train_loop {
    const eng_train_opts *o;
    const char *monitor; /* the metric early stopping watches ("val_" dropped without validation) */
    int mode;            /* -1 min, +1 max */
    const char *keep;    /* the metric whose best epoch's weights are kept (o->keep_metric), NULL: the monitor */
    int keep_mode;
    int use_val;         /* a non-empty validation split */
    char ckpt[1024];     /* the checkpoint's path, "" for none */
    float *best;         /* restore_best: the best epoch's parameters then BN statistics (owned) */
    eng_train_state st;
    eng_train_result r;
    double t_all, sps_sum;
} eng_train_loop;

/* The dataset of s fits m: sample size, target width, labels for SCCE. */
int eng_train_check_data(const eng_model *m, const eng_split *s, hpo_error *err);

/* L zeroed by the caller first (so eng_train_loop_end is safe after an
 * early failure). Sets the monitor (HPO_EINVAL naming
 * training.early_stopping.monitor), the early-stopping start and loss
 * scale, allocates the best weights' copy (best_bytes: its size for the
 * message) and, with o->resume and a checkpoint present, loads it into m and
 * L->st; when early stopping had ended the run there, L->r.stopped_early is
 * set and the loop trains no further epoch (it starts with stop set to it). */
int eng_train_loop_begin(eng_train_loop *L, eng_model *m, const eng_split *val, const eng_train_opts *o,
                         size_t best_bytes, hpo_error *err);

/* rep for epoch `epoch` (0-based) from its training sums, seconds, last
 * learning rate and skipped steps (val left for the caller). */
void eng_train_loop_report(const eng_train_loop *L, int epoch, const eng_metric_sums *sums, double secs, double lr,
                           long skipped, eng_epoch_report *rep);

/* The end of epoch rep->epoch (rep: train metrics, timing, lr, val filled by
 * the caller; m's parameters current on the host): early stopping, the
 * callback, the checkpoint. *stop is set when training should end after
 * this epoch. 0 or an error (with err). */
int eng_train_loop_epoch_end(eng_train_loop *L, eng_model *m, eng_epoch_report *rep, int *stop, hpo_error *err);

/* Finishes with status rc: on success restores the best weights into m when
 * asked; on success or divergence fills *res (may be NULL). Frees L's
 * buffers. Returns rc. */
int eng_train_loop_end(eng_train_loop *L, eng_model *m, int rc, eng_train_result *res);

/* eng_train with o->cuda set: the run on CUDA device o->cuda_device
 * (train_cuda.c). */
int eng_train_cuda(eng_model *m, const eng_split *train, const eng_split *val, const eng_train_opts *o,
                   eng_train_result *res, hpo_error *err);

#endif
