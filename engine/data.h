/*
 * data.h - datasets for the training engine: loaders (IDX, CSV, NPY, the
 * builtin Fashion-MNIST), a process-wide refcounted cache, train/validation
 * splits, and a batcher with per-epoch shuffling and a prefetch thread.
 *
 * Design notes
 * - An eng_dataset is immutable once loaded and shared read-only by every
 *   worker thread. Its lifetime is a refcount (eng_dataset_retain/release,
 *   atomic); the last release frees it. Loaders return a dataset with
 *   refcount 1 owned by the caller. The cache holds one reference of its own
 *   per entry.
 * - Samples are stored compactly: uint8 images stay uint8 (x_type
 *   ENG_DATA_U8, 47 MB for Fashion-MNIST train) and are converted only when a
 *   batch is gathered: to f32 scaled by x_scale (1/255 for images, so [0,1]),
 *   or straight to bf16. CSV and float NPY data are stored as f32 (x_scale 1).
 *   x holds n * sample_size elements, sample after sample, C order; the
 *   per-sample shape is NHWC without the N ({28,28,1} for Fashion-MNIST, {F}
 *   for tabular data).
 * - Targets: classification datasets have y_type ENG_DATA_Y_CLASS, int32
 *   labels in [0, n_classes); regression datasets have ENG_DATA_Y_TARGET,
 *   y_dim f32 values per sample (y_target[n * y_dim]).
 * - Splits (eng_split) are views: an index list into a dataset plus one
 *   reference on it. Validation split policy, chosen and documented here:
 *   ENG_SPLIT_TAIL (default) takes the LAST val_count rows of the source as
 *   validation, Keras' validation_split semantics, deterministic with no seed;
 *   ENG_SPLIT_SHUFFLE first permutes the rows with hpo_rng seeded by `seed`
 *   and then takes the tail. `limit` (0 = none) keeps only the first `limit`
 *   rows of the training part (after the split), for quick studies;
 *   `val_limit` does the same for the validation part.
 * - Batching: eng_batcher walks a split in batch_size steps; with shuffle on,
 *   epoch e uses the permutation from hpo_rng_derive(seed, e, 0), so the order
 *   of epoch e does not depend on what happened before (exact resume from a
 *   checkpoint only needs the epoch number). With prefetch on, one pthread
 *   gathers batch i+1 into the second of two buffers while the caller works on
 *   batch i; the batches are bit-identical to synchronous gathering.
 * - Errors: malformed files give HPO_EFORMAT (HPO_EIO when the file cannot be
 *   read, HPO_ENOTFOUND for a missing file or unknown builtin) and fill the
 *   hpo_error with a sentence naming the file and, for CSV, the line number.
 * - Limits (process-wide, data_limits.c): one dataset may take at most
 *   eng_data_max_bytes() bytes, counting both the data its files declare
 *   (decoded, after gunzip) and its in-memory form (x as stored plus the
 *   labels/targets). Every loader checks the sizes a file declares (IDX
 *   dims, NPY shape, CSV rows as they are read) against the cap, with
 *   overflow-checked products, BEFORE allocating anything of that size, and
 *   fails with HPO_ETOOLARGE (field "dataset") naming the file; it never
 *   allocates by a number read from a file otherwise, and converts non-u8
 *   data in fixed 64 KiB pieces (no raw copy of the file beside the
 *   dataset). eng_dataset_new refuses the same sizes. At most
 *   eng_data_max_loads() loads run at once: the cache and the api's upload
 *   validation take a load slot (eng_data_load_acquire) around each load.
 * - Files, and calls between them going one way: data.c (builtin datasets,
 *   the loader table of eng_source_kind -> loader, the cache) calls the
 *   loaders idx.c, csv.c and npy.c, which build their datasets with
 *   dataset.c (the object's allocation and refcount); split.c holds the
 *   splits, batch.c the batcher, data_limits.c the limits.
 *
 * Threading: loaders and splits are reentrant; the cache is mutex-protected;
 * a dataset may be read from any number of threads; one eng_batcher is used
 * by one thread (its own prefetch thread is internal).
 */
#ifndef ENG_DATA_H
#define ENG_DATA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hpo.h"

typedef enum eng_data_xtype {
    ENG_DATA_U8 = 0,  /* uint8 samples (images); gathered as x * x_scale */
    ENG_DATA_F32 = 1, /* f32 samples */
} eng_data_xtype;

typedef enum eng_data_ytype {
    ENG_DATA_Y_CLASS = 0,  /* int32 class labels in [0, n_classes) */
    ENG_DATA_Y_TARGET = 1, /* f32 regression targets, y_dim per sample */
} eng_data_ytype;

#define ENG_DATA_MAX_RANK 4

typedef struct eng_dataset {
    char name[256];        /* cache key or file name, for messages */
    size_t n;              /* number of samples */
    int rank;              /* per-sample rank, 1..ENG_DATA_MAX_RANK */
    int64_t shape[ENG_DATA_MAX_RANK]; /* per-sample shape, NHWC without N */
    size_t sample_size;    /* product of shape */
    eng_data_xtype x_type;
    float x_scale;         /* gathered value = stored value * x_scale */
    void *x;               /* n * sample_size elements of x_type */
    eng_data_ytype y_type;
    int n_classes;         /* classification: number of classes */
    size_t y_dim;          /* regression: values per sample (1 for CLASS) */
    int32_t *y_class;      /* [n] when y_type == CLASS, else NULL */
    char **class_names;    /* [n_classes] the label of each class when the file
                            * named them (a CSV of "setosa", ...), else NULL */
    float *y_target;       /* [n * y_dim] when y_type == TARGET, else NULL */
    atomic_long refcount_; /* private: use eng_dataset_retain/release */
} eng_dataset;

/* Take another reference (atomic); returns ds for chaining. */
eng_dataset *eng_dataset_retain(eng_dataset *ds);
/* Drop a reference (atomic); frees the dataset when it was the last. NULL ok. */
void eng_dataset_release(eng_dataset *ds);
/* A new empty dataset (refcount 1) with x and y allocated for n samples of the
 * given shape; used by loaders and tests. y_dim is ignored for CLASS.
 * HPO_ETOOLARGE when it would take more than eng_data_max_bytes(). */
int eng_dataset_new(const char *name, size_t n, int rank, const int64_t *shape,
                    eng_data_xtype x_type, eng_data_ytype y_type, size_t y_dim,
                    eng_dataset **out);

/* ---- limits (process-wide; see the design notes) ---- */

/* The most bytes one dataset may take (decoded file data and in memory).
 * 0 restores the default: a quarter of the memory this process may use
 * (physical memory, or the cgroup's memory.max when smaller), at least
 * 256 MiB (the builtin Fashion-MNIST takes 47 MB) and at most 4 GiB. */
void eng_data_set_max_bytes(size_t max_bytes);
size_t eng_data_max_bytes(void);
/* The most loads at once. 0 restores the default: as many as fit in a
 * quarter of memory at eng_data_max_bytes() each, 1 to 4. */
void eng_data_set_max_loads(int n);
int eng_data_max_loads(void);
/* Takes a load slot, waiting at most timeout_s seconds (< 0: as long as it
 * takes): 0, or HPO_ETIMEOUT. eng_data_load_release gives it back. */
int eng_data_load_acquire(double timeout_s);
void eng_data_load_release(void);
/* 0 when `bytes` fits the cap; else HPO_ETOOLARGE with err naming `what`
 * (a file) and `desc` (what the file declares), field "dataset". */
int eng_data_check_bytes(const char *what, const char *desc, size_t bytes, hpo_error *err);
/* The in-memory bytes of a dataset of n samples of sample_size elements
 * (x_type) with its labels/targets: 0, or HPO_ETOOLARGE on overflow. */
int eng_dataset_bytes(size_t n, size_t sample_size, eng_data_xtype x_type, eng_data_ytype y_type,
                      size_t y_dim, size_t *out);

/* ---- loaders (each returns a new dataset, refcount 1) ---- */

/* IDX (MNIST format), gzipped or plain (zlib reads both). images: ubyte
 * tensor of rank >= 2 (n, d1, ...): stored as U8 with shape {d1, d2, 1} for
 * rank 3 (images), {d1} for rank 2; labels: ubyte rank 1 with n entries.
 * n_classes = max label + 1. Checks magic, dtype byte, dims, file sizes,
 * count agreement. */
int eng_load_idx(const char *images_path, const char *labels_path, eng_dataset **out,
                 hpo_error *err);

/* CSV with a header row. label_column names the target column (required);
 * every other column is an f32 feature. classify != 0: when every label is
 * a class number (an integer >= 0), n_classes = max + 1; otherwise the
 * labels are names ("setosa"): class k is the k-th distinct label in byte
 * order (at most ENG_CSV_MAX_CLASSES), kept in class_names. classify == 0:
 * f32 targets (y_dim 1). Empty lines are skipped; a row with the wrong
 * number of fields or a non-numeric feature fails with its line number. */
#define ENG_CSV_MAX_CLASSES 65536
int eng_load_csv(const char *path, const char *label_column, int classify, eng_dataset **out,
                 hpo_error *err);

/* NPY (format v1.0/v2.0/v3.0 headers), little-endian, C order.
 * x_path dtypes: |u1 (stored U8, x_scale 1/255 if scale_u8 else 1), <f4,
 * <f8, <i4, <i8 (stored F32). Shape (n, ...) -> per-sample shape (...), a
 * 1-D x gives shape {1}. y_path (required) rank 1 with n entries: integer
 * dtypes (|u1 <i4 <i8) give class labels (must be >= 0), float dtypes (<f4
 * <f8) give regression targets; rank 2 (n, k) float gives y_dim = k. */
int eng_load_npy(const char *x_path, const char *y_path, int scale_u8, eng_dataset **out,
                 hpo_error *err);

/* Read one .npy file into f32 (any supported dtype) or as raw u8 (|u1 only,
 * want_u8 != 0). *data is malloc'd (free()); shape has up to 8 dims. Useful
 * for tests and for prediction inputs. */
int eng_npy_read(const char *path, int want_u8, void **data, int *rank, int64_t shape[8],
                 hpo_error *err);
/* Write a .npy v1.0 file: descr is "<f4", "<f8", "|u1", "<i4" or "<i8". */
int eng_npy_write(const char *path, const char *descr, int rank, const int64_t *shape,
                  const void *data, hpo_error *err);

/* Builtin datasets by name. "fashion-mnist" with part "train" (60000) or
 * "test" (10000): 28x28x1 U8 images, 10 classes. Files come from
 * $HPO_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist
 * ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]). */
int eng_load_builtin(const char *name, const char *part, eng_dataset **out, hpo_error *err);
/* 1 if name is a builtin dataset name. */
int eng_builtin_exists(const char *name);

/* ---- process-wide cache ---- */

typedef enum eng_source_kind {
    ENG_SRC_BUILTIN = 0, /* name + part */
    ENG_SRC_IDX = 1,     /* x_path = images, y_path = labels */
    ENG_SRC_CSV = 2,     /* x_path = file, label_column, classify */
    ENG_SRC_NPY = 3,     /* x_path, y_path, scale_u8 */
} eng_source_kind;

typedef struct eng_data_source {
    eng_source_kind kind;
    const char *name;         /* builtin name ("fashion-mnist") */
    const char *part;         /* builtin part: "train" | "test" (NULL = "train") */
    const char *x_path;
    const char *y_path;
    const char *label_column; /* CSV */
    int classify;             /* CSV: class labels (1) or f32 targets (0) */
    int scale_u8;             /* NPY: u1 data scaled by 1/255 when gathered */
} eng_data_source;

/* Get a dataset from the cache, loading it on first use (once, even when
 * several threads ask at the same time). *out is a NEW reference: the caller
 * releases it when done. The key is built from the source fields. */
int eng_dataset_cache_get_source(const eng_data_source *src, eng_dataset **out, hpo_error *err);
/* Shorthand for builtins: eng_dataset_cache_get("fashion-mnist", "test", ...). */
int eng_dataset_cache_get(const char *name, const char *part, eng_dataset **out, hpo_error *err);
/* Drop the cache's references (datasets still referenced elsewhere live on). */
void eng_dataset_cache_clear(void);
/* Drop the cache's references to the datasets loaded from files under
 * folder dir (an uploaded dataset being deleted: its memory goes back once
 * the last trial reading it lets go). Returns how many. */
size_t eng_dataset_cache_drop_under(const char *dir);
/* Number of datasets in the cache (for /metrics and tests). */
size_t eng_dataset_cache_size(void);

/* ---- splits ---- */

typedef enum eng_split_mode {
    ENG_SPLIT_TAIL = 0,    /* validation = last rows of the source (Keras) */
    ENG_SPLIT_SHUFFLE = 1, /* seeded permutation first, then the tail */
} eng_split_mode;

typedef struct eng_split_spec {
    size_t val_count;      /* rows for validation; if 0, val_fraction is used */
    double val_fraction;   /* in [0, 1); 0 with val_count 0: no validation */
    eng_split_mode mode;
    uint64_t seed;         /* ENG_SPLIT_SHUFFLE only */
    size_t limit;          /* keep the first `limit` training rows; 0 = all */
    size_t val_limit;      /* keep the first `val_limit` validation rows; 0 = all */
} eng_split_spec;

/* A view of rows of one dataset. Holds one reference on ds. */
typedef struct eng_split {
    eng_dataset *ds;  /* referenced */
    uint32_t *idx;    /* [n] row numbers into ds (owned) */
    size_t n;
} eng_split;

/* The whole dataset as one split (e.g. a test set). */
int eng_split_all(eng_dataset *ds, eng_split *out);
/* The validation rows a fraction in (0, 1) of n rows takes: Keras'
 * split_at, n - (size_t)(n * (1 - fraction)). A study's check and the
 * split both count with it. */
size_t eng_split_val_rows(size_t n, double fraction);
/* Train/validation split of ds. val may be NULL when no validation is wanted.
 * HPO_EINVAL (with err) if the validation part would leave no training rows. */
int eng_split_make(eng_dataset *ds, const eng_split_spec *spec, eng_split *train,
                   eng_split *val, hpo_error *err);
/* Concatenate two splits of the same dataset (train+validation for refits). */
int eng_split_concat(const eng_split *a, const eng_split *b, eng_split *out);
/* Drop the split's dataset reference and free its index list, leaving *s
 * empty (clearing it again is a no-op). NULL ok. */
void eng_split_clear(eng_split *s);

/* ---- gathering and batching ---- */

typedef enum eng_batch_xtype {
    ENG_BATCH_F32 = 0,  /* float, stored value * x_scale */
    ENG_BATCH_BF16 = 1, /* uint16 bf16 bits of the same value (RNE) */
} eng_batch_xtype;

/* Gather rows split->idx[first .. first+count) into x (count * sample_size
 * elements of xt) and labels (y_class[count] or y_target[count*y_dim]; either
 * may be NULL to skip). The synchronous reference of the batcher. */
int eng_split_gather(const eng_split *s, size_t first, size_t count, eng_batch_xtype xt,
                     void *x, int32_t *y_class, float *y_target);

typedef struct eng_batcher_opts {
    size_t batch_size;   /* > 0 */
    int shuffle;         /* permute rows each epoch */
    uint64_t seed;       /* shuffle seed */
    int drop_last;       /* skip a final partial batch */
    eng_batch_xtype x_type;
    int prefetch;        /* gather the next batch in a background thread */
    /* without prefetch: eng_batcher_next only picks the batch's rows and
     * eng_batcher_gather_rows fills them, so several threads can each fill
     * their share of the batch (engine/replicas.h) */
    int defer_gather;
} eng_batcher_opts;

/* One batch. Pointers are BORROWED from the batcher and valid until the next
 * eng_batcher_next / start_epoch / free. */
typedef struct eng_batch {
    size_t n;              /* samples in this batch (<= batch_size) */
    size_t index;          /* batch number within the epoch */
    const void *x;         /* n * sample_size elements of x_type */
    const int32_t *y_class;/* [n] or NULL (regression) */
    const float *y_target; /* [n * y_dim] or NULL (classification) */
} eng_batch;

typedef struct eng_batcher eng_batcher;

/* The batcher keeps its own reference on the split's dataset and copies the
 * index list, so the split may be cleared afterwards. */
int eng_batcher_new(const eng_split *s, const eng_batcher_opts *opts, eng_batcher **out,
                    hpo_error *err);
/* Batches per epoch. */
size_t eng_batcher_n_batches(const eng_batcher *b);
/* Begin epoch `epoch` (0-based): sets the order and, with prefetch, starts
 * gathering batch 0. Must be called before the first next(). */
int eng_batcher_start_epoch(eng_batcher *b, uint64_t epoch);
/* The next batch of the epoch: returns 1 and fills *out, or 0 at the end of
 * the epoch (out untouched), or a negative error. */
int eng_batcher_next(eng_batcher *b, eng_batch *out);
/* Same but copies into caller buffers (batch_size*sample_size of x_type,
 * y_class[batch_size] / y_target[batch_size*y_dim], NULLs allowed);
 * *n gets the batch size. Returns 1, 0 at the end, or an error. */
int eng_batcher_next_into(eng_batcher *b, void *x, int32_t *y_class, float *y_target, size_t *n);
/* With opts.defer_gather: gathers rows [lo, hi) of the batch bt that
 * eng_batcher_next returned (its x and labels/targets at those rows). Calls
 * for disjoint ranges may run at once on different threads. */
int eng_batcher_gather_rows(eng_batcher *b, const eng_batch *bt, size_t lo, size_t hi);
/* With opts.defer_gather: software prefetch (no copy) of the images at rows
 * [lo, hi) of the batch after bt, to call while computing on bt, so that
 * gathering them later finds them in cache instead of DRAM (the rows are
 * shuffled: no hardware prefetcher can guess them). Nothing after the last
 * batch of the epoch; safe from several threads at once. */
void eng_batcher_prefetch_next_rows(const eng_batcher *b, const eng_batch *bt, size_t lo, size_t hi);
/* Stops the prefetch thread (joins it), drops the dataset reference. NULL ok. */
void eng_batcher_free(eng_batcher *b);

#endif
