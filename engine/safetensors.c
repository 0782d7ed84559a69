/* safetensors.c - safetensors reader/writer with validation and crash-safe
 * writes (see safetensors.h). */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor.h"

#define MAX_HEADER (100u << 20)
#define MAX_NAME 1023

static const struct {
    const char *name;
    size_t size;
} dtypes[ENG_ST_DTYPE_COUNT] = {
    [ENG_ST_F32] = {"F32", 4}, [ENG_ST_BF16] = {"BF16", 2}, [ENG_ST_F16] = {"F16", 2},
    [ENG_ST_F64] = {"F64", 8}, [ENG_ST_I32] = {"I32", 4},   [ENG_ST_I64] = {"I64", 8},
    [ENG_ST_U8] = {"U8", 1},   [ENG_ST_U64] = {"U64", 8},   [ENG_ST_I8] = {"I8", 1},
    [ENG_ST_BOOL] = {"BOOL", 1},
};

const char *eng_st_dtype_name(eng_st_dtype t) {
    return (unsigned)t < ENG_ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

int eng_st_dtype_parse(const char *name) {
    for (int i = 0; i < ENG_ST_DTYPE_COUNT; i++)
        if (strcmp(name, dtypes[i].name) == 0) return i;
    return -1;
}

size_t eng_st_dtype_size(eng_st_dtype t) {
    return (unsigned)t < ENG_ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

/* bytes = product(shape) * size, with overflow checks; -1 on overflow. */
static int tensor_bytes(eng_st_dtype t, int rank, const int64_t *shape, size_t *out) {
    size_t n = eng_st_dtype_size(t);
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return -1;
        if (__builtin_mul_overflow(n, (size_t)shape[i], &n)) return -1;
    }
    *out = n;
    return 0;
}

/* ---------------------------------------------------------------- writer */

typedef struct wtensor {
    char *name;
    eng_st_dtype dtype;
    int rank;
    int64_t shape[ENG_ST_MAX_RANK];
    const void *data;
    size_t nbytes;
} wtensor;

struct eng_st_writer {
    wtensor *t;
    size_t n, cap;
    json_t *meta; /* object of strings */
    int no_fsync; /* eng_st_writer_set_durable(w, 0) */
};

void eng_st_writer_set_durable(eng_st_writer *w, int durable) { w->no_fsync = !durable; }

eng_st_writer *eng_st_writer_new(void) {
    eng_st_writer *w = hpo_xcalloc(1, sizeof *w);
    w->meta = json_object();
    if (!w->meta) abort();
    return w;
}

void eng_st_writer_free(eng_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    json_decref(w->meta);
    free(w);
}

int eng_st_writer_add(eng_st_writer *w, const char *name, eng_st_dtype dtype, int rank,
                      const int64_t *shape, const void *data, hpo_error *err) {
    size_t nb;
    if (!w || !name || !*name || strlen(name) > MAX_NAME)
        return hpo_fail(err, HPO_EINVAL, "name", "tensor name empty or longer than %d bytes",
                        MAX_NAME);
    if (strcmp(name, "__metadata__") == 0)
        return hpo_fail(err, HPO_EINVAL, "name", "tensor name __metadata__ is reserved");
    if ((unsigned)dtype >= ENG_ST_DTYPE_COUNT)
        return hpo_fail(err, HPO_EINVAL, "dtype", "unknown dtype %d", (int)dtype);
    if (rank < 0 || rank > ENG_ST_MAX_RANK || (rank > 0 && !shape))
        return hpo_fail(err, HPO_EINVAL, "shape", "tensor %s: rank %d not in 0..%d", name, rank,
                        ENG_ST_MAX_RANK);
    if (tensor_bytes(dtype, rank, shape, &nb) < 0)
        return hpo_fail(err, HPO_ETOOLARGE, "shape", "tensor %s: negative or huge shape", name);
    if (nb > 0 && !data)
        return hpo_fail(err, HPO_EINVAL, "data", "tensor %s: no data", name);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return hpo_fail(err, HPO_EINVAL, "name", "duplicate tensor name %s", name);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->t = hpo_xrealloc(w->t, w->cap * sizeof *w->t);
    }
    wtensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = hpo_strdup(name);
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nb;
    return 0;
}

int eng_st_writer_meta(eng_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value) return HPO_EINVAL;
    json_t *s = json_string(value);
    if (!s) return HPO_EINVAL; /* not UTF-8 */
    if (json_object_set_new(w->meta, key, s) < 0) return HPO_EINVAL;
    return 0;
}

/* The 8-byte length plus the padded JSON header; *data_len gets the size of
 * the data section. */
static int build_header(const eng_st_writer *w, char **out, size_t *out_len, size_t *data_len,
                        hpo_error *err) {
    int rc = HPO_ENOMEM;
    json_t *root = json_object();
    char *js = NULL, *buf = NULL;
    size_t off = 0;
    if (!root) goto fail;
    if (json_object_size(w->meta) > 0 && json_object_set(root, "__metadata__", w->meta) < 0)
        goto fail;
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        json_t *o = json_object(), *sh = json_array(), *offs = json_array();
        if (!o || !sh || !offs) {
            json_decref(o), json_decref(sh), json_decref(offs);
            goto fail;
        }
        for (int k = 0; k < t->rank; k++) json_array_append_new(sh, json_integer(t->shape[k]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(o, "dtype", json_string(dtypes[t->dtype].name));
        json_object_set_new(o, "shape", sh);
        json_object_set_new(o, "data_offsets", offs);
        if (json_object_set_new(root, t->name, o) < 0) {
            rc = hpo_fail(err, HPO_EINVAL, "name", "tensor name %s is not UTF-8", t->name);
            goto fail;
        }
        off += t->nbytes;
    }
    js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!js) goto fail;
    size_t jl = strlen(js), hl = (jl + 7) & ~(size_t)7;
    buf = hpo_xmalloc(8 + hl);
    for (int k = 0; k < 8; k++) buf[k] = (char)(((uint64_t)hl >> (8 * k)) & 0xff);
    memcpy(buf + 8, js, jl);
    memset(buf + 8 + jl, ' ', hl - jl);
    *out = buf;
    *out_len = 8 + hl;
    *data_len = off;
    buf = NULL;
    rc = 0;
fail:
    free(js);
    free(buf);
    json_decref(root);
    if (rc == HPO_ENOMEM && err && !err->message[0])
        hpo_fail(err, rc, "", "out of memory building the safetensors header");
    return rc;
}

int eng_st_write_buffer(const eng_st_writer *w, void **buf, size_t *len, hpo_error *err) {
    char *hdr;
    size_t hl, dl;
    int rc = build_header(w, &hdr, &hl, &dl, err);
    if (rc < 0) return rc;
    char *b = hpo_xmalloc(hl + dl + 1);
    memcpy(b, hdr, hl);
    size_t off = hl;
    for (size_t i = 0; i < w->n; i++) {
        if (w->t[i].nbytes) memcpy(b + off, w->t[i].data, w->t[i].nbytes);
        off += w->t[i].nbytes;
    }
    free(hdr);
    *buf = b;
    *len = hl + dl;
    return 0;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static void fsync_dir_of(const char *path) {
    char *copy = hpo_strdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(copy);
}

/* HPO_ENOSPACE for a full disk, HPO_EFS for a failure of the file system
 * (permissions, read-only, an I/O error, a stale network mount: the caller
 * may retry both later), else HPO_EIO (hpo_errno_rc). */
static int io_rc(int e) { return hpo_errno_rc(e); }

int eng_st_write_file(const eng_st_writer *w, const char *path, hpo_error *err) {
    static atomic_ulong counter;
    char *hdr = NULL, tmp[4096];
    size_t hl, dl;
    int fd = -1, created = 0, rc = build_header(w, &hdr, &hl, &dl, err);
    if (rc < 0) return rc;
    unsigned long c = atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), c) >=
        sizeof tmp) {
        rc = hpo_fail(err, HPO_EINVAL, "path", "path too long");
        goto fail;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = hpo_fail(err, io_rc(errno), "path", "cannot create %s: %s", tmp, strerror(errno));
        goto fail;
    }
    created = 1;
    int bad = write_all(fd, hdr, hl);
    for (size_t i = 0; !bad && i < w->n; i++)
        if (w->t[i].nbytes) bad = write_all(fd, w->t[i].data, w->t[i].nbytes);
    if (bad || (!w->no_fsync && fsync(fd) < 0)) {
        rc = hpo_fail(err, io_rc(errno), "path", "cannot write %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(fd) < 0) {
        fd = -1;
        rc = hpo_fail(err, io_rc(errno), "path", "cannot close %s: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        rc = hpo_fail(err, io_rc(errno), "path", "cannot rename %s to %s: %s", tmp, path,
                      strerror(errno));
        goto fail;
    }
    created = 0;
    if (!w->no_fsync) fsync_dir_of(path);
    free(hdr);
    return 0;
fail:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    free(hdr);
    return rc;
}

/* ---------------------------------------------------------------- reader */

struct eng_st_file {
    eng_st_tensor *t;
    size_t n;
    char **meta_k, **meta_v;
    size_t n_meta;
    void *data;  /* the data section, 64-byte aligned; NULL after eng_st_open */
    void *block; /* the allocation holding it (a copy, or the file read by eng_st_read_file) */
    int fd;      /* eng_st_open: the file, read by eng_st_read_tensor; -1 otherwise */
    uint64_t data_start; /* eng_st_open: the data section's offset in the file */
    char *path;  /* eng_st_open: for messages */
};

void eng_st_file_free(eng_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (size_t i = 0; i < f->n_meta; i++) free(f->meta_k[i]), free(f->meta_v[i]);
    free(f->t);
    free(f->meta_k);
    free(f->meta_v);
    free(f->block);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

size_t eng_st_count(const eng_st_file *f) { return f->n; }

const eng_st_tensor *eng_st_get(const eng_st_file *f, size_t i) {
    return i < f->n ? &f->t[i] : NULL;
}

const eng_st_tensor *eng_st_find(const eng_st_file *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *eng_st_meta(const eng_st_file *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_k[i], key) == 0) return f->meta_v[i];
    return NULL;
}

size_t eng_st_meta_count(const eng_st_file *f) { return f->n_meta; }

int eng_st_meta_at(const eng_st_file *f, size_t i, const char **key, const char **value) {
    if (i >= f->n_meta) return HPO_EINVAL;
    *key = f->meta_k[i];
    *value = f->meta_v[i];
    return 0;
}

typedef struct span {
    size_t begin, end, idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

#define BAD(...) do { rc = hpo_fail(err, HPO_EFORMAT, "", __VA_ARGS__); goto fail; } while (0)

/* eng_st_read_buffer; when owned is not NULL, buf lies in the block owned
 * (from eng_alloc) with its data section 64-byte aligned, and on success the
 * file object keeps the block instead of copying the data section. */
/* header_only: buf holds the 8-byte length and the header of a file of len
 * bytes, whose data section is not read (eng_st_open). */
static int read_buffer(const void *buf, size_t len, void *owned, int header_only, eng_st_file **out,
                       hpo_error *err) {
    const unsigned char *b = buf;
    int rc = HPO_EFORMAT;
    json_t *root = NULL;
    span *spans = NULL;
    eng_st_file *f = hpo_xcalloc(1, sizeof *f);
    f->fd = -1;
    json_error_t je;
    if (len < 8) BAD("safetensors: file of %zu bytes is shorter than its 8-byte header length",
                     len);
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)b[k] << (8 * k);
    if (hl > MAX_HEADER) BAD("safetensors: header length %llu over the 100 MB limit",
                             (unsigned long long)hl);
    if (hl > len - 8) BAD("safetensors: header length %llu beyond the end of the file (%zu bytes)",
                          (unsigned long long)hl, len);
    if (hl < 2 || b[8] != '{') BAD("safetensors: header does not start with '{'");
    root = json_loadb((const char *)b + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!root) BAD("safetensors: header is not valid JSON: %s (column %d)", je.text, je.column);
    if (!json_is_object(root)) BAD("safetensors: header is not a JSON object");
    size_t data_len = len - 8 - (size_t)hl;
    size_t n_obj = json_object_size(root);
    f->t = hpo_xcalloc(n_obj ? n_obj : 1, sizeof *f->t);
    spans = hpo_xcalloc(n_obj ? n_obj : 1, sizeof *spans);
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) BAD("safetensors: __metadata__ is not an object");
            size_t m = json_object_size(val);
            f->meta_k = hpo_xcalloc(m ? m : 1, sizeof(char *));
            f->meta_v = hpo_xcalloc(m ? m : 1, sizeof(char *));
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) BAD("safetensors: metadata %s is not a string", mk);
                f->meta_k[f->n_meta] = hpo_strdup(mk);
                f->meta_v[f->n_meta++] = hpo_strdup(json_string_value(mv));
            }
            continue;
        }
        if (strlen(key) == 0 || strlen(key) > MAX_NAME) BAD("safetensors: bad tensor name");
        if (!json_is_object(val)) BAD("safetensors: tensor %s is not an object", key);
        json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
               *jo = json_object_get(val, "data_offsets");
        if (!json_is_string(jd)) BAD("safetensors: tensor %s has no dtype string", key);
        int dt = eng_st_dtype_parse(json_string_value(jd));
        if (dt < 0) BAD("safetensors: tensor %s has unknown dtype %s", key, json_string_value(jd));
        if (!json_is_array(js)) BAD("safetensors: tensor %s has no shape array", key);
        if (json_array_size(js) > ENG_ST_MAX_RANK)
            BAD("safetensors: tensor %s has rank %zu over %d", key, json_array_size(js),
                ENG_ST_MAX_RANK);
        if (!json_is_array(jo) || json_array_size(jo) != 2 ||
            !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
            BAD("safetensors: tensor %s has no [begin, end] data_offsets", key);
        eng_st_tensor *t = &f->t[f->n];
        t->dtype = (eng_st_dtype)dt;
        t->rank = (int)json_array_size(js);
        for (int k = 0; k < t->rank; k++) {
            json_t *d = json_array_get(js, (size_t)k);
            if (!json_is_integer(d) || json_integer_value(d) < 0)
                BAD("safetensors: tensor %s has a shape entry that is not a non-negative integer",
                    key);
            t->shape[k] = json_integer_value(d);
        }
        json_int_t jb = json_integer_value(json_array_get(jo, 0));
        json_int_t je2 = json_integer_value(json_array_get(jo, 1));
        if (jb < 0 || je2 < jb || (uint64_t)je2 > data_len)
            BAD("safetensors: tensor %s has data_offsets [%lld, %lld] outside the %zu-byte data "
                "section", key, (long long)jb, (long long)je2, data_len);
        size_t nb = 0;
        if (tensor_bytes(t->dtype, t->rank, t->shape, &nb) < 0)
            BAD("safetensors: tensor %s: shape overflows the address space", key);
        if (nb != (size_t)(je2 - jb))
            BAD("safetensors: tensor %s: shape and dtype %s need %zu bytes, data_offsets give "
                "%lld", key, dtypes[dt].name, nb, (long long)(je2 - jb));
        t->name = hpo_strdup(key);
        t->nbytes = nb;
        spans[f->n] = (span){(size_t)jb, (size_t)je2, f->n};
        f->n++;
    }
    qsort(spans, f->n, sizeof *spans, span_cmp);
    size_t pos = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (spans[i].begin < pos)
            BAD("safetensors: tensor %s overlaps the tensor before it",
                f->t[spans[i].idx].name);
        if (spans[i].begin > pos)
            BAD("safetensors: hole of %zu bytes before tensor %s", spans[i].begin - pos,
                f->t[spans[i].idx].name);
        pos = spans[i].end;
    }
    if (pos != data_len)
        BAD("safetensors: data section has %zu bytes but the tensors cover %zu", data_len, pos);
    if (header_only) {
        f->data = NULL;
    } else if (owned) {
        f->data = (void *)(b + 8 + hl);
    } else {
        f->data = eng_alloc(data_len);
        if (!f->data) {
            rc = hpo_fail(err, HPO_ENOMEM, "", "safetensors: out of memory for a data section of %zu bytes", data_len);
            goto fail;
        }
        f->block = f->data;
        if (data_len) memcpy(f->data, b + 8 + hl, data_len);
    }
    /* reorder the tensors by offset so eng_st_get follows the file */
    eng_st_tensor *sorted = hpo_xcalloc(f->n ? f->n : 1, sizeof *sorted);
    for (size_t i = 0; i < f->n; i++) {
        sorted[i] = f->t[spans[i].idx];
        sorted[i].data = f->data ? (char *)f->data + spans[i].begin : NULL;
        sorted[i].offset = spans[i].begin;
    }
    free(f->t);
    f->t = sorted;
    free(spans);
    json_decref(root);
    if (owned) f->block = owned; /* only now: on failure the caller keeps it */
    *out = f;
    return 0;
fail:
    free(spans);
    json_decref(root);
    eng_st_file_free(f);
    return rc;
}

/* Prefixes err's message with the file's name: a long path keeps its end
 * (the folder of a trial and the file), "..." before it. */
#define NAMED_PATH_MAX 160
static void name_file(hpo_error *err, const char *path) {
    if (!err) return;
    char m[sizeof err->message + NAMED_PATH_MAX + 8];
    size_t n = strlen(path);
    const char *tail = path, *cut = "";
    if (n > NAMED_PATH_MAX) {
        tail = path + n - NAMED_PATH_MAX;
        while ((*tail & 0xc0) == 0x80) tail++; /* not inside a UTF-8 character */
        cut = "...";
    }
    snprintf(m, sizeof m, "%s%s: %s", cut, tail, err->message);
    size_t l = strlen(m);
    if (l >= sizeof err->message) l = sizeof err->message - 1;
    memcpy(err->message, m, l);
    err->message[l] = 0;
}

/* 0, the errno of a failed read, or -1 when the file ends first. */
static int read_at(int fd, void *dst, size_t n, uint64_t off) {
    char *c = dst;
    while (n > 0) {
        ssize_t k = pread(fd, c, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno ? errno : EIO;
        if (k == 0) return -1;
        c += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int eng_st_read_buffer(const void *buf, size_t len, eng_st_file **out, hpo_error *err) {
    return read_buffer(buf, len, NULL, 0, out, err);
}

/* The file is read once, into a block where its data section starts on a
 * 64-byte boundary, which the file object then keeps: a checkpoint being
 * resumed takes its own size in memory, not twice that. */
int eng_st_read_file(const char *path, eng_st_file **out, hpo_error *err) {
    int rc;
    char *buf = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return hpo_fail(err, errno == ENOENT ? HPO_ENOTFOUND : io_rc(errno), "path", "cannot open %s: %s",
                        path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = hpo_fail(err, HPO_EIO, "path", "%s is not a regular file", path);
        goto fail;
    }
    size_t len = (size_t)st.st_size, pad = 0;
    unsigned char head[8];
    if (len >= 8 && fread(head, 1, 8, fp) == 8) {
        uint64_t hl = 0;
        for (int k = 0; k < 8; k++) hl |= (uint64_t)head[k] << (8 * k);
        if (hl <= len - 8) pad = (64 - (size_t)((8 + hl) % 64)) % 64;
    }
    rewind(fp);
    buf = eng_alloc(pad + len);
    if (!buf) {
        rc = hpo_fail(err, HPO_ENOMEM, "path", "%s: out of memory for %zu bytes", path, len);
        goto fail;
    }
    if (fread(buf + pad, 1, len, fp) != len) {
        int e = ferror(fp) ? errno : 0; /* else shorter than it was: not the file system's fault */
        rc = hpo_fail(err, e ? io_rc(e) : HPO_EIO, "path", "cannot read %s%s%s", path, e ? ": " : "",
                      e ? strerror(e) : "");
        goto fail;
    }
    rc = read_buffer(buf + pad, len, buf, 0, out, err);
    if (rc == 0) buf = NULL; /* the file object owns it */
    if (rc < 0) name_file(err, path);
fail:
    free(buf);
    fclose(fp);
    return rc;
}

int eng_st_open(const char *path, eng_st_file **out, hpo_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
    if (fd < 0)
        return hpo_fail(err, errno == ENOENT ? HPO_ENOTFOUND : io_rc(errno), "path", "cannot open %s: %s", path,
                        strerror(errno));
    char *buf = NULL;
    struct stat st;
    unsigned char head[8];
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = hpo_fail(err, HPO_EIO, "path", "%s is not a regular file", path);
        goto fail;
    }
    size_t len = (size_t)st.st_size;
    uint64_t hl = 0;
    if (len >= 8) {
        int e = read_at(fd, head, 8, 0);
        if (e) {
            rc = hpo_fail(err, e > 0 ? io_rc(e) : HPO_EIO, "path", "cannot read %s%s%s", path, e > 0 ? ": " : "",
                          e > 0 ? strerror(e) : "");
            goto fail;
        }
        for (int k = 0; k < 8; k++) hl |= (uint64_t)head[k] << (8 * k);
    }
    /* a length past the limits is left to read_buffer's messages */
    size_t want = len < 8 ? len : hl > MAX_HEADER || hl > len - 8 ? 8 : 8 + (size_t)hl;
    buf = hpo_xmalloc(want ? want : 1);
    int e = want ? read_at(fd, buf, want, 0) : 0;
    if (e) {
        rc = hpo_fail(err, e > 0 ? io_rc(e) : HPO_EIO, "path", "cannot read %s%s%s", path, e > 0 ? ": " : "",
                      e > 0 ? strerror(e) : "");
        goto fail;
    }
    rc = read_buffer(buf, len, NULL, 1, out, err);
    if (rc < 0) {
        name_file(err, path);
        goto fail;
    }
    (*out)->fd = fd;
    (*out)->data_start = 8 + hl;
    (*out)->path = hpo_strdup(path);
    free(buf);
    return 0;
fail:
    free(buf);
    close(fd);
    return rc;
}

int eng_st_file_dup(const eng_st_file *f, uint64_t *size) {
    struct stat st;
    if (!f || f->fd < 0) {
        errno = EBADF;
        return -1;
    }
    if (fstat(f->fd, &st) < 0) return -1;
    int fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
    if (fd >= 0) *size = (uint64_t)st.st_size;
    return fd;
}

int eng_st_read_tensor(const eng_st_file *f, const eng_st_tensor *t, void *dst, hpo_error *err) {
    if (t->data) {
        if (t->nbytes) memcpy(dst, t->data, t->nbytes);
        return 0;
    }
    if (f->fd < 0) return hpo_fail(err, HPO_EINVAL, "", "safetensors: tensor %s has no data", t->name);
    int e = t->nbytes ? read_at(f->fd, dst, t->nbytes, f->data_start + t->offset) : 0;
    if (e)
        return hpo_fail(err, e > 0 ? io_rc(e) : HPO_EIO, "path", "cannot read tensor %s of %s: %s", t->name,
                        f->path, e > 0 ? strerror(e) : "the file is shorter than its header says");
    return 0;
}
