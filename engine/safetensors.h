/*
 * safetensors.h - reader and writer of the safetensors format, used for
 * checkpoints and for GET /api/v1/models/{id}/weights.
 *
 * Format: 8-byte little-endian u64 N, then N bytes of JSON header
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the data section; offsets are relative to the start of the data
 * section, tensors are C-order little-endian.
 *
 * Design notes
 * - Writer: tensors are added with BORROWED data pointers (they must stay
 *   valid until the write), written in insertion order with no gaps; the
 *   header is padded with spaces so the data section starts on an 8-byte
 *   boundary (as the reference implementation does). eng_st_write_file is
 *   crash-safe: it writes "<path>.tmp.<pid>.<n>", fsyncs it, renames it over
 *   path and fsyncs the directory, so a reader sees the old or the new file,
 *   never a torn one. eng_st_write_buffer produces the same bytes in memory.
 * - Reader: eng_st_read_file / eng_st_read_buffer parse and validate
 *   everything before returning: header length within the file and <= 100
 *   MB, valid JSON object, known dtypes, shapes of non-negative ints (rank
 *   <= ENG_ST_MAX_RANK), data_offsets within the data section, end - begin =
 *   product(shape) * dtype size, no overlaps and no holes (the data section
 *   is covered exactly, as the reference reader requires), unique names,
 *   metadata values strings. Any violation is HPO_EFORMAT with a message in
 *   err. The data section lies in one 64-byte-aligned block (a copy for
 *   eng_st_read_buffer; for eng_st_read_file the file itself, read once to
 *   an offset that aligns it), so a tensor's data pointer is aligned to its
 *   element size when the file's offsets are (always true for files from
 *   this writer).
 * - Names are UTF-8 strings up to 1023 bytes; "__metadata__" is reserved.
 *
 * Threading: a writer or reader object is used by one thread at a time; a
 * read-only eng_st_file may be shared once built.
 */
#ifndef ENG_SAFETENSORS_H
#define ENG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "hpo.h"

#define ENG_ST_MAX_RANK 8

typedef enum eng_st_dtype {
    ENG_ST_F32 = 0,
    ENG_ST_BF16,
    ENG_ST_F16,
    ENG_ST_F64,
    ENG_ST_I32,
    ENG_ST_I64,
    ENG_ST_U8,
    ENG_ST_U64,
    ENG_ST_I8,
    ENG_ST_BOOL,
    ENG_ST_DTYPE_COUNT
} eng_st_dtype;

/* "F32", "BF16", ... and back (-1 if unknown). */
const char *eng_st_dtype_name(eng_st_dtype t);
int eng_st_dtype_parse(const char *name);
size_t eng_st_dtype_size(eng_st_dtype t);

typedef struct eng_st_tensor {
    const char *name;      /* borrowed from the file / writer */
    eng_st_dtype dtype;
    int rank;
    int64_t shape[ENG_ST_MAX_RANK];
    const void *data;      /* borrowed; nbytes long (NULL in a file from eng_st_open) */
    size_t nbytes;
    size_t offset;         /* reader: where its bytes start in the data section */
} eng_st_tensor;

/* ---- writer ---- */
typedef struct eng_st_writer eng_st_writer;

eng_st_writer *eng_st_writer_new(void);
void eng_st_writer_free(eng_st_writer *w);
/* Add a tensor; data is borrowed until the write. HPO_EINVAL on a duplicate
 * or reserved name, bad rank/shape; HPO_ETOOLARGE on size overflow. */
int eng_st_writer_add(eng_st_writer *w, const char *name, eng_st_dtype dtype, int rank,
                      const int64_t *shape, const void *data, hpo_error *err);
/* Set a metadata string (copied; replaces an earlier value for key). */
int eng_st_writer_meta(eng_st_writer *w, const char *key, const char *value);
/* Whether eng_st_write_file fsyncs (default 1). With 0 the write is still
 * atomic (temp file + rename) and survives a crash of the process, since
 * the page cache outlives it, but not a power cut: hpod's per-epoch
 * checkpoints under --sync normal, the durability its database has then. */
void eng_st_writer_set_durable(eng_st_writer *w, int durable);
/* Crash-safe write to path (temp file + fsync + rename + directory fsync).
 * A failed write is HPO_ENOSPACE (a full disk), HPO_EFS (the file system
 * failed: permissions, read-only, an I/O error, a stale network mount; the
 * caller may retry both later) or HPO_EIO (hpo_errno_rc). */
int eng_st_write_file(const eng_st_writer *w, const char *path, hpo_error *err);
/* The whole file in memory: *buf is malloc'd (free()), *len its size. */
int eng_st_write_buffer(const eng_st_writer *w, void **buf, size_t *len, hpo_error *err);

/* ---- reader ---- */
typedef struct eng_st_file eng_st_file;

/* A file that is not there is HPO_ENOTFOUND, one that cannot be read
 * HPO_EFS or HPO_EIO as errno says (hpo_errno_rc), one shorter than its
 * header says HPO_EIO. */
int eng_st_read_file(const char *path, eng_st_file **out, hpo_error *err);
/* The header only, validated as eng_st_read_file does against the file's
 * size; the tensors' data stays on disk (data NULL) until eng_st_read_tensor
 * copies it where it is wanted: loading a large checkpoint costs no memory
 * beyond its destination. The file stays open until eng_st_file_free. */
int eng_st_open(const char *path, eng_st_file **out, hpo_error *err);
/* A new descriptor of eng_st_open's file, at its start, and the file's
 * size (the header and data it was validated with): the weights download
 * sends it as it is. The caller closes it. -1 (errno set) when f was not
 * opened by eng_st_open or dup fails. */
int eng_st_file_dup(const eng_st_file *f, uint64_t *size);
/* Copies tensor t of f (from eng_st_open or a read) into dst (t->nbytes). */
int eng_st_read_tensor(const eng_st_file *f, const eng_st_tensor *t, void *dst, hpo_error *err);
/* Parse a file image (copied; buf may be freed afterwards). */
int eng_st_read_buffer(const void *buf, size_t len, eng_st_file **out, hpo_error *err);
void eng_st_file_free(eng_st_file *f);
/* Tensors in data_offsets order. i in [0, count). Pointers borrowed from f. */
size_t eng_st_count(const eng_st_file *f);
const eng_st_tensor *eng_st_get(const eng_st_file *f, size_t i);
/* By name; NULL if absent. */
const eng_st_tensor *eng_st_find(const eng_st_file *f, const char *name);
/* Metadata value for key, or NULL. Borrowed from f. */
const char *eng_st_meta(const eng_st_file *f, const char *key);
/* Number of metadata entries and the i-th key/value (borrowed). */
size_t eng_st_meta_count(const eng_st_file *f);
int eng_st_meta_at(const eng_st_file *f, size_t i, const char **key, const char **value);

#endif
