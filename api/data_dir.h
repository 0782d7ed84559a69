/*
 * data_dir.h - the layout of hpod's data directory: the only code that
 * formats its paths, creates and removes its folders, writes its small
 * files atomically and prunes old checkpoints.
 *
 * <root> is the api's files root, hpod's --artifacts-dir (the data dir by
 * default): the nodes sharing a database share it (a network file system),
 * so any node resumes a trial from its checkpoint or serves a model
 * another node trained. hpo.db, hpod.lock and node-id are in the data dir,
 * each node's own.
 *
 *   <root>/hpo.db                          the database (storage/)
 *   <root>/hpod.lock                       one hpod per data dir (flock, pid inside)
 *   <root>/node-id                         the data dir's node ident (api/jobs.h: nodes)
 *   <root>/datasets/<id>-<name>/           an uploaded dataset's files (api/datasets.c)
 *   <root>/datasets/.upload-XXXXXX/        an upload in progress
 *   <root>/checkpoints/trial-<id>/         a trial: exec-<k>.safetensors (the engine's
 *                                          checkpoint), exec-<k>.done.json (a finished
 *                                          execution's result), training (crash counter),
 *                                          pbt-<epoch>.safetensors (a pbt member's checkpoint
 *                                          at a boundary, api/pbt.c; a hard link)
 *   <root>/checkpoints/model-<id>/         a refit's checkpoint
 *   <root>/models/model-<id>.safetensors   exported weights; storage keeps the path
 *                                          relative to the root
 *   <root>/studies/study-<id>/             a study's own files, removed with it:
 *     tensorboard/                         its TensorBoard logdir (training.tensorboard),
 *                                          one run folder per trial execution or refit:
 *       trial-<number>/                    a trial (its first execution)
 *       trial-<number>-exec-<k>/           its execution k >= 1 (executions_per_trial)
 *       refit-model-<id>/                  a refit; each holds events.out.tfevents.*
 *                                          files (engine/tb_events.h names them)
 *
 * Design notes
 * - Lengths: the root is checked once, at start (api_dir_check_root: hpod
 *   refuses a --data-dir longer than API_DIR_ROOT_MAX, and so does
 *   api_ctx_new; with SQLite, whose unix VFS opens paths of at most 504
 *   bytes, hpod also refuses a --data-dir longer than 497 bytes once made
 *   absolute with its links resolved: api_dir_check_db_path). Every path below it adds at most API_DIR_SUFFIX_MAX bytes
 *   (a dataset folder of a 64-character name and a file in it is the
 *   longest; a refit's event file, ~180 bytes with a 64-byte host name,
 *   comes next), so an API_PATH_MAX buffer holds every path; the formatters
 *   still check and return HPO_EINVAL instead of truncating.
 * - Results: every I/O call is checked. A full disk (ENOSPC, EDQUOT) is
 *   HPO_ENOSPACE and a failure of the file system rather than of the file
 *   (EACCES, EROFS, EIO, ESTALE on a network --artifacts-dir: hpo_errno_rc)
 *   HPO_EFS, both of which the jobs turn into a requeue with a back-off
 *   (jobs.h); other failures are HPO_EIO. The error names the path and
 *   errno's text. Removal
 *   is best effort (a file already gone is fine) and logs what it cannot
 *   remove: nothing a client waits for depends on it.
 * - Threads and nodes: the functions keep no state; two threads (or two
 *   nodes) never write one file (a trial's folder belongs to the worker
 *   running it; ids are the database's), and temporary files have names
 *   unique on the file system (mkstemp), renamed over the file: rename is
 *   atomic on a network file system too.
 */
#ifndef HPO_API_DATA_DIR_H
#define HPO_API_DATA_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "hpo.h"
#include "storage.h"

#define API_PATH_MAX 4096
#define API_DIR_SUFFIX_MAX 256
#define API_DIR_ROOT_MAX (API_PATH_MAX - API_DIR_SUFFIX_MAX)

/* 0 if root can be hpod's data dir (1 to API_DIR_ROOT_MAX bytes), else
 * HPO_EINVAL naming field ("data-dir" for the flag). */
int api_dir_check_root(const char *root, const char *field, hpo_error *err);
/* 0 if SQLite can open <root>/hpo.db: root (an existing folder), made
 * absolute with its links resolved, at most sto_sqlite_path_max() - 7
 * bytes (497); else HPO_EINVAL naming "data-dir" and the limit. */
int api_dir_check_db_path(const char *root, hpo_error *err);

/* <root>/<relative> into out (API_PATH_MAX bytes); HPO_EINVAL if too long. */
int api_dir_path(char *out, const char *root, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int api_dir_db(char *out, const char *root);
int api_dir_datasets(char *out, const char *root);
int api_dir_dataset(char *out, const char *root, int64_t id, const char *name);
int api_dir_trial(char *out, const char *root, int64_t trial_id);
/* checkpoints/trial-<id>/<name>: exec-<k>.safetensors, exec-<k>.done.json */
int api_dir_trial_file(char *out, const char *root, int64_t trial_id, const char *name);
int api_dir_model_checkpoint(char *out, const char *root, int64_t model_id);
/* studies/study-<id>: removed with the study */
int api_dir_study(char *out, const char *root, int64_t study_id);
/* studies/study-<id>/tensorboard: `tensorboard --logdir` it */
int api_dir_tensorboard(char *out, const char *root, int64_t study_id);
/* The run folder of a trial's execution (trial-<number>, or
 * trial-<number>-exec-<k> for k >= 1) and of a refit (refit-model-<id>). */
int api_dir_tensorboard_trial(char *out, const char *root, int64_t study_id, int64_t number, int execution);
int api_dir_tensorboard_refit(char *out, const char *root, int64_t study_id, int64_t model_id);
/* A file storage names relative to the root (a model's weights). */
int api_dir_file(char *out, const char *root, const char *rel);
int api_dir_models(char *out, const char *root);
/* models/model-<id>.safetensors: the path relative to the root (stored). */
int api_dir_model_file_rel(char *out, size_t cap, int64_t model_id);

/* Takes the data dir's lock for the life of the process: HPO_ECONFLICT
 * "data dir DIR in use by pid N" if another hpod holds it. */
int api_dir_lock(const char *root, hpo_error *err);
/* Takes the SQLite database file's own lock (<its real path>.lock) for the
 * life of the process: a data dir whose hpo.db is a link to another's is
 * refused too, "database PATH in use by pid N" (two hpods on one SQLite
 * file each took the other's running trials for a dead run's). */
int api_db_lock(const char *db_path, hpo_error *err);
/* The data dir's node ident (<root>/node-id: 32 random hex digits, made at
 * its first start), which names its node's runs in the database (jobs.h:
 * nodes) so that a restart reclaims what the last run left running. out
 * holds API_NODE_IDENT_MAX bytes. 0, or HPO_EIO naming the file. */
#define API_NODE_IDENT_MAX 40
int api_dir_node_ident(const char *root, char *out, hpo_error *err);

/* Creates dir and its missing parents below root (root itself must
 * exist). 0, HPO_ENOSPACE, HPO_EFS or HPO_EIO (err names the folder). */
int api_dir_make(const char *root, const char *dir, hpo_error *err);
/* Writes text to path atomically: a temporary file renamed over it, so a
 * crash or a full disk leaves the old file or the new one, never half of
 * one. durable: fsync the file and its folder. 0, HPO_ENOSPACE, HPO_EFS or
 * HPO_EIO. */
int api_dir_write_atomic(const char *path, const char *text, int durable, hpo_error *err);
/* Makes dst a copy of the file src, bit for bit: a hard link (files are
 * replaced by rename, never rewritten in place, so the two stay what src
 * is now), or a copy where the file system has no links; through a
 * temporary name renamed over dst, fsynced when durable. HPO_ENOTFOUND
 * when src is missing, HPO_ENOSPACE for a full disk, HPO_EFS or HPO_EIO. */
int api_dir_link(const char *src, const char *dst, int durable, hpo_error *err);
/* fsyncs a file (folder 0) or a folder: 0 or errno. */
int api_dir_sync(const char *path, int folder);
/* Removes a folder and everything in it; "" or a missing folder is fine. */
void api_dir_remove(const char *dir);
/* Removes one file; a missing file is fine. */
void api_dir_unlink(const char *path);

/* Removes the checkpoints of every trial finished in t[0..n) (a study's
 * trials as read BEFORE keep was chosen, so that every trial finished in
 * it was a candidate for keep) but those in keep[0..n_keep) (the caller's
 * choice: its best trials, which refits and ensembles start from, and the
 * trials models need), so disk use stays bounded. It leaves for now the
 * folders of the ended trials that reported step keep_from or a later one
 * (a population-based study's members may still copy their checkpoints at
 * those epochs: api/pbt.c; INT64_MAX: none). */
void api_dir_prune_checkpoints(const char *root, const sto_trial *t, size_t n, int64_t keep_from, const int64_t *keep,
                               size_t n_keep);
/* How many of a study's best complete trials keep their checkpoints. */
#define API_KEEP_CHECKPOINTS 8

/* ---- the crash counter of a trial (checkpoints/trial-<id>/training) ----
 * Counts the deaths of hpod while training a trial. The runner calls
 * begin when it starts training (before the model's memory is allocated:
 * one more than what a crash left there), epoch after every epoch (the
 * file goes, as at end: progress is not a crash loop, and a death after an
 * epoch of this run finished does not count) and end when training returns
 * (the process survived: the file goes). At start-up the file exists only
 * for trials whose training hpod died in before an epoch finished, holding
 * how many times in a row that happened; at API_MAX_CRASHES the trial
 * fails instead of being resumed again. Kills before training starts (while
 * the dataset loads) do not count. A counter that cannot be written is
 * logged: it only weakens the crash-loop guard. */
#define API_MAX_CRASHES 3
int api_training_begin(const char *root, int64_t trial_id);
void api_training_epoch(const char *root, int64_t trial_id);
void api_training_end(const char *root, int64_t trial_id);
int api_training_crashes(const char *root, int64_t trial_id); /* 0 when there is no file */

/* The same for a model job (checkpoints/model-<id>.training: beside its
 * checkpoint folder, which only refits have): begin before
 * it loads its data, epoch after each of a refit's epochs (the file goes:
 * a death after it does not count), end when it
 * returns; at API_MAX_CRASHES the job fails at the next start instead of
 * running again (api/nodes.c). Its dataset's loading counts here. */
int api_model_job_begin(const char *root, int64_t model_id);
void api_model_job_epoch(const char *root, int64_t model_id);
void api_model_job_end(const char *root, int64_t model_id);
int api_model_job_crashes(const char *root, int64_t model_id); /* 0 when there is no file */

/* ---- the start-up sweep (sweep.c) ----
 * Run once at start, before the scheduler and the HTTP server: removes the
 * partial uploads a crash left (datasets/.upload-*) and the temporaries of
 * the writes it cut short under checkpoints/ and models/ (a checkpoint's
 * or weights file's <file>.tmp.<pid>.<n>, <file>.tmp-XXXXXX, <file>.link-XXXXXX), and moves every entry
 * whose id has no row in db (a deleted study's files a crash left, or
 * another database's: hpo.db replaced, emptied or restored from an older
 * backup, whose ids would be handed out again over them) into
 * <root>/orphaned/<UTC time>/ under its relative path, with one WARN line;
 * nothing of them is deleted. On a shared database (PostgreSQL) only
 * uploads and temporaries unchanged for an hour are removed and nothing is
 * moved (other nodes create rows and folders, and write files,
 * meanwhile). Returns how many were moved. */
int api_dir_sweep(sto_db *db, const char *root);

#endif
