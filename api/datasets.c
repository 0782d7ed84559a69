/* datasets.c - /api/v1/datasets: streamed multipart uploads validated with
 * the engine's loaders, list/get/delete, and api_dataset_source(), which
 * turns a study's "dataset" object into an engine data source.
 *
 * Files on disk. An uploaded dataset lives in <data_dir>/datasets/<id>-<name>/
 * under fixed names: data.csv (csv), x.idx + y.idx (idx, plain or gzipped),
 * x.npy + y.npy (npy). Its row (storage) records the format, the file
 * name(s) inside that folder (csv: "data.csv"; two-file formats: a JSON
 * array ["x.npy","y.npy"]), meta JSON (shape, task, n_classes or y_dim,
 * label_column, the client's file names) and the row count. Dataset ids are
 * never reused (AUTOINCREMENT), so a folder name is never reused either.
 *
 * An upload. begin creates <data_dir>/datasets/.upload-XXXXXX/; every piece
 * of a file field is written there as it arrives (text fields are kept, at
 * most 256 bytes each), and the running total is checked against
 * opt.max_upload_bytes: over it, the files are deleted at once and the rest
 * of the body is dropped by the server; finish answers 413. finish checks
 * the fields, loads the files with eng_load_csv/idx/npy (the dataset is
 * then dropped: training loads it again through the engine's cache),
 * inserts the row (the unique name is decided there, atomically) and
 * renames the folder to its final place. The load runs in one of the
 * engine's load slots (at most eng_data_max_loads() at once, see data.h);
 * an upload that waits for one longer than opt.upload_wait_seconds gets
 * 503 with Retry-After, one whose files declare more than
 * eng_data_max_bytes() gets 413 naming its form field (the loaders check
 * the declared sizes before allocating). Every failure removes the
 * temporary folder; abort (the client went away) too. A crash of hpod in
 * the middle can leave a .upload-* folder behind: the start-up sweep
 * removes it (data_dir.h, api_dir_sweep). A full disk (ENOSPC, EDQUOT)
 * answers 507, as every call that cannot store on a full disk.
 *
 * Messages. The engine's messages name the temporary paths; they are
 * rewritten with the client's file names, and every message built from
 * client bytes is made printable ASCII (jansson refuses invalid UTF-8).
 *
 * Threading: an api_upload belongs to one request (one HTTP thread at a
 * time); the handlers share only storage, which is thread-safe. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "api_internal.h"
#include "data_dir.h"

#define UPLOAD_ROUTE "/api/v1/datasets"
#define NAME_MAX_LEN 64
#define TEXT_MAX 256
#define RETRY_AFTER_S 5 /* the Retry-After of a 503 (no load slot in time) */

enum { F_FILE = 0, F_X, F_Y, N_FILES };
static const char *const file_keys[N_FILES] = {"file", "x", "y"};
enum { T_NAME = 0, T_FORMAT, T_LABEL, T_TASK, N_TEXT };
static const char *const text_keys[N_TEXT] = {"name", "format", "label_column", "task"};

typedef struct upload_file {
    int fd; /* -1 when closed */
    int seen;
    uint64_t bytes;
    char client_name[128]; /* printable; the field name when none was sent */
} upload_file;

struct api_upload {
    api_ctx *ctx;
    char dir[API_PATH_MAX]; /* the temporary folder; "" once removed */
    uint64_t total;     /* bytes received, all fields */
    int rc;             /* first failure, reported by finish */
    hpo_error err;
    char text[N_TEXT][TEXT_MAX + 1];
    size_t text_len[N_TEXT];
    int text_seen[N_TEXT];
    upload_file file[N_FILES];
};

/* ---- small helpers ---- */

/* 1 if every row of classification dataset ds has the same class. */
static int one_class(const eng_dataset *ds) {
    for (size_t i = 1; i < ds->n; i++)
        if (ds->y_class[i] != ds->y_class[0]) return 0;
    return 1;
}

/* Copies src into dst with every byte outside printable ASCII replaced by '?'. */
static void printable(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (cap) dst[i] = '\0';
}

static int name_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > NAME_MAX_LEN) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* <data_dir>/datasets (data_dir.h) */
static int datasets_root(api_ctx *ctx, char *buf, size_t cap) {
    return cap < API_PATH_MAX ? HPO_EINVAL : api_dir_datasets(buf, ctx->opt.data_dir);
}

/* <data_dir>/datasets/<id>-<name> */
static int dataset_dir(api_ctx *ctx, int64_t id, const char *name, char *buf, size_t cap) {
    return cap < API_PATH_MAX ? HPO_EINVAL : api_dir_dataset(buf, ctx->opt.data_dir, id, name);
}

static int is_two_file(const char *format) { return strcmp(format, "csv") != 0; }

/* A file system error (errno e): a full disk is 507, the rest 500. */
static int disk_rc(int e) { return e == ENOSPC || e == EDQUOT ? HPO_ENOSPACE : HPO_EIO; }
static void fail_io(api_response *resp, int e, const char *msg) {
    if (disk_rc(e) == HPO_ENOSPACE)
        api_fail(resp, 507, hpo_errname(HPO_ENOSPACE), "", "%s (disk full)", msg);
    else
        api_fail(resp, 500, "io_error", "", "%s", msg);
}

/* ---- the upload ---- */

int api_is_upload(const char *method, const char *path) {
    return method && path && strcmp(method, "POST") == 0 && strcmp(path, UPLOAD_ROUTE) == 0;
}

static void close_files(api_upload *u) {
    for (int i = 0; i < N_FILES; i++)
        if (u->file[i].fd >= 0) {
            close(u->file[i].fd);
            u->file[i].fd = -1;
        }
}

/* Closes and deletes everything written so far. */
static void discard(api_upload *u) {
    close_files(u);
    api_dir_remove(u->dir);
    u->dir[0] = '\0';
}

int api_upload_begin(api_ctx *ctx, api_upload **out, api_response *resp) {
    char root[API_PATH_MAX];
    if (datasets_root(ctx, root, sizeof root)) {
        api_fail(resp, 500, "internal_error", "", "the data directory path is too long");
        return HPO_EINVAL;
    }
    if (mkdir(root, 0755) && errno != EEXIST) {
        int e = errno;
        HPO_ERROR("datasets: cannot create %s: %s", root, strerror(e));
        fail_io(resp, e, "cannot create the datasets folder");
        return disk_rc(e);
    }
    api_upload *u = hpo_xcalloc(1, sizeof *u);
    u->ctx = ctx;
    for (int i = 0; i < N_FILES; i++) u->file[i].fd = -1;
    int n = snprintf(u->dir, sizeof u->dir, "%s/.upload-XXXXXX", root);
    if (n < 0 || (size_t)n >= sizeof u->dir || !mkdtemp(u->dir)) {
        int e = n < 0 || (size_t)n >= sizeof u->dir ? ENAMETOOLONG : errno;
        HPO_ERROR("datasets: cannot create a temporary folder in %s: %s", root, strerror(e));
        free(u);
        fail_io(resp, e, "cannot create a temporary folder for the upload");
        return disk_rc(e);
    }
    *out = u;
    return 0;
}

/* Records the first failure; the files are deleted at once. */
static int upload_fail(api_upload *u, int rc, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int upload_fail(api_upload *u, int rc, const char *field, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof u->err.message];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    u->rc = rc;
    printable(u->err.message, sizeof u->err.message, msg);
    printable(u->err.field, sizeof u->err.field, field ? field : "");
    discard(u);
    return rc;
}

static int write_all(int fd, const char *data, size_t size) {
    while (size) {
        ssize_t w = write(fd, data, size);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += w;
        size -= (size_t)w;
    }
    return 0;
}

uint64_t api_upload_limit(const api_ctx *ctx) { return ctx->opt.max_upload_bytes; }

int api_upload_part(api_upload *u, const char *key, const char *filename, const char *data,
                    uint64_t off, size_t size) {
    if (!u) return HPO_EINVAL;
    if (u->rc) return u->rc;
    uint64_t limit = u->ctx->opt.max_upload_bytes;
    u->total += size;
    if (u->total > limit)
        return upload_fail(u, HPO_ETOOLARGE, "", "the upload is over the size limit of %llu bytes",
                           (unsigned long long)limit);
    char pkey[48];
    printable(pkey, sizeof pkey, key ? key : "");
    for (int i = 0; key && i < N_FILES; i++) {
        if (strcmp(key, file_keys[i]) != 0) continue;
        upload_file *f = &u->file[i];
        if (f->seen && off == 0 && f->bytes > 0)
            return upload_fail(u, HPO_EINVAL, key, "the form field %s is given twice", key);
        if (off != f->bytes)
            return upload_fail(u, HPO_EINVAL, key, "the form field %s arrived out of order", key);
        if (!f->seen) {
            f->seen = 1;
            printable(f->client_name, sizeof f->client_name, filename && *filename ? filename : key);
            char path[API_PATH_MAX + 8];
            snprintf(path, sizeof path, "%s/%s", u->dir, key);
            f->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (f->fd < 0) {
                int e = errno;
                HPO_ERROR("datasets: cannot create %s: %s", path, strerror(e));
                return upload_fail(u, disk_rc(e), key, "cannot store the uploaded file%s",
                                   disk_rc(e) == HPO_ENOSPACE ? " (disk full)" : "");
            }
        }
        if (size && write_all(f->fd, data, size)) {
            int e = errno;
            HPO_ERROR("datasets: cannot write %s/%s: %s", u->dir, key, strerror(e));
            return upload_fail(u, disk_rc(e), key, "cannot store the uploaded file (%s)",
                               disk_rc(e) == HPO_ENOSPACE ? "disk full" : "write error");
        }
        f->bytes += size;
        return 0;
    }
    for (int i = 0; key && i < N_TEXT; i++) {
        if (strcmp(key, text_keys[i]) != 0) continue;
        if (u->text_seen[i] && off == 0)
            return upload_fail(u, HPO_EINVAL, key, "the form field %s is given twice", key);
        u->text_seen[i] = 1;
        if (off != u->text_len[i])
            return upload_fail(u, HPO_EINVAL, key, "the form field %s arrived out of order", key);
        if (u->text_len[i] + size > TEXT_MAX)
            return upload_fail(u, HPO_EINVAL, key, "the form field %s is over %d bytes", key, TEXT_MAX);
        memcpy(u->text[i] + u->text_len[i], data, size);
        u->text_len[i] += size;
        u->text[i][u->text_len[i]] = '\0';
        return 0;
    }
    return upload_fail(u, HPO_EINVAL, pkey,
                       "unknown form field \"%.40s\" (expected name, format, label_column, task, "
                       "file, x, y)",
                       pkey);
}

void api_upload_abort(api_upload *u) {
    if (!u) return;
    discard(u);
    free(u);
}

/* A text field ("" when not sent). */
static const char *text(const api_upload *u, int i) {
    return u->text_seen[i] ? u->text[i] : "";
}

/* Replaces every occurrence of from by to in s (in place, bounded by cap). */
static void replace_all(char *s, size_t cap, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    if (!fl) return;
    char out[512];
    size_t o = 0;
    for (const char *p = s; *p && o + 1 < sizeof out;) {
        if (strncmp(p, from, fl) == 0) {
            size_t k = tl < sizeof out - 1 - o ? tl : sizeof out - 1 - o;
            memcpy(out + o, to, k);
            o += k;
            p += fl;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    size_t k = o < cap - 1 ? o : cap - 1;
    memcpy(s, out, k);
    s[k] = '\0';
}

/* Turns a loader error into the response's: the field names the form
 * field at fault (the file whose path the message names first, or
 * label_column), temporary paths become the client's file names. */
static void loader_error(api_upload *u, const char *const paths[N_FILES], int rc, hpo_error *err,
                         api_response *resp) {
    const char *field = u->file[F_FILE].seen ? "file" : "x";
    const char *first = NULL;
    for (int i = 0; i < N_FILES; i++) {
        const char *at = paths[i] ? strstr(err->message, paths[i]) : NULL;
        if (at && (!first || at < first)) first = at, field = file_keys[i];
    }
    if (strcmp(err->field, "dataset.label_column") == 0) field = "label_column";
    for (int i = 0; i < N_FILES; i++)
        if (paths[i]) replace_all(err->message, sizeof err->message, paths[i], u->file[i].client_name);
    char msg[sizeof err->message];
    printable(msg, sizeof msg, err->message);
    if (rc == HPO_ENOTFOUND || rc == HPO_EINVAL || rc == HPO_ESHAPE) rc = HPO_EFORMAT;
    int status = api_status_for_rc(rc);
    if (status >= 500) HPO_ERROR("datasets: upload failed: %s (%s)", msg, hpo_strerror(rc));
    api_error_response(resp, status, hpo_errname(rc), msg, field);
}

static json_t *shape_json(const eng_dataset *ds) {
    json_t *a = json_array();
    for (int i = 0; i < ds->rank; i++) json_array_append_new(a, json_integer(ds->shape[i]));
    return a;
}

/* finish, once the fields are known good: load, store, move into place. */
/* The files of an upload put in their folder (datasets/<id>-<name>) by the
 * row's insert transaction (sto_dataset_create_placed), so the row is
 * never stored without them; with --sync full (durable) the files (synced
 * before the transaction: it holds the database) and the folder are on
 * disk before the row commits. */
typedef struct placing {
    api_ctx *ctx;
    api_upload *u;
    const char *name;
    char final_dir[API_PATH_MAX];
    int moved;  /* the folder is in final_dir */
    int errno_; /* of the failure, 0: none */
} placing;

static int place_files(void *arg, int64_t id) {
    placing *p = arg;
    char *final_dir = p->final_dir, parent[API_PATH_MAX];
    if (dataset_dir(p->ctx, id, p->name, final_dir, sizeof p->final_dir)) {
        p->errno_ = ENAMETOOLONG;
        return HPO_EIO;
    }
    int durable = p->ctx->opt.durable_checkpoints, e = 0;
    if (rename(p->u->dir, final_dir)) e = errno;
    if (!e) {
        p->moved = 1;
        p->u->dir[0] = '\0'; /* moved: the upload's clean-up leaves it */
    }
    snprintf(parent, sizeof parent, "%s", final_dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    if (!e && durable && slash) e = api_dir_sync(parent, 1);
    p->errno_ = e;
    return e ? HPO_EIO : 0;
}

static void upload_store(api_ctx *ctx, api_upload *u, api_response *resp) {
    const char *name = text(u, T_NAME), *format = text(u, T_FORMAT), *task = text(u, T_TASK);
    const char *label = text(u, T_LABEL);
    int csv = strcmp(format, "csv") == 0, npy = strcmp(format, "npy") == 0;
    /* canonical file names inside the folder */
    static const char *const csv_names[N_FILES] = {"data.csv", NULL, NULL};
    static const char *const idx_names[N_FILES] = {NULL, "x.idx", "y.idx"};
    static const char *const npy_names[N_FILES] = {NULL, "x.npy", "y.npy"};
    const char *const *names = csv ? csv_names : npy ? npy_names : idx_names;
    char paths_buf[N_FILES][API_PATH_MAX + 16];
    const char *paths[N_FILES] = {NULL, NULL, NULL};
    uint64_t bytes = 0;
    for (int i = 0; i < N_FILES; i++) {
        if (!names[i]) continue;
        char from[API_PATH_MAX + 8];
        snprintf(from, sizeof from, "%s/%s", u->dir, file_keys[i]);
        snprintf(paths_buf[i], sizeof paths_buf[i], "%s/%s", u->dir, names[i]);
        if (rename(from, paths_buf[i])) {
            int e = errno;
            HPO_ERROR("datasets: rename %s: %s", from, strerror(e));
            fail_io(resp, e, "cannot store the uploaded file");
            return;
        }
        paths[i] = paths_buf[i];
        bytes += u->file[i].bytes;
    }

    eng_dataset *ds = NULL;
    hpo_error err = {{0}, {0}};
    /* At most eng_data_max_loads() datasets are decoded at once (each up
     * to eng_data_max_bytes()); the others wait here, a bounded time. */
    if (eng_data_load_acquire(ctx->opt.upload_wait_seconds) < 0) {
        api_fail(resp, 503, "unavailable", "",
                 "hpod is busy loading other datasets (at most %d at once): retry later",
                 eng_data_max_loads());
        resp->retry_after = RETRY_AFTER_S;
        return;
    }
    int rc = csv ? eng_load_csv(paths[F_FILE], label, strcmp(task, "regression") != 0, &ds, &err)
             : npy ? eng_load_npy(paths[F_X], paths[F_Y], 1, &ds, &err)
                   : eng_load_idx(paths[F_X], paths[F_Y], &ds, &err);
    eng_data_load_release();
    if (rc) {
        if (csv && !task[0] && strstr(err.message, "not a class number"))
            snprintf(err.message + strlen(err.message), sizeof err.message - strlen(err.message),
                     " (for a regression target send task=regression)");
        loader_error(u, paths, rc, &err, resp);
        return;
    }
    int classify = ds->y_type == ENG_DATA_Y_CLASS;
    if (npy && task[0] && classify != (strcmp(task, "classification") == 0)) {
        api_fail(resp, 400, "bad_format", "y",
                 classify ? "y holds integer class labels, but task is regression (send float targets)"
                          : "y holds float targets, but task is classification (send integer labels)");
        eng_dataset_release(ds);
        return;
    }
    if (classify && one_class(ds)) { /* softmax over one class: loss 0, accuracy 1, nothing learnt */
        char label_text[64] = "", cls[80];
        if (ds->class_names) printable(label_text, sizeof label_text, ds->class_names[ds->y_class[0]]);
        if (ds->class_names) snprintf(cls, sizeof cls, "'%s'", label_text);
        else snprintf(cls, sizeof cls, "%d", (int)ds->y_class[0]);
        api_fail(resp, 400, "bad_format", csv ? "file" : "y",
                 "every row has class %s: a classifier needs two classes at least%s", cls,
                 csv ? " (for a numeric target send task=regression)" : "");
        eng_dataset_release(ds);
        return;
    }

    json_t *files = json_object();
    for (int i = 0; i < N_FILES; i++)
        if (paths[i]) json_object_set_new(files, file_keys[i], json_string(u->file[i].client_name));
    json_t *meta = json_pack("{s:o, s:s, s:s, s:o}", "shape", shape_json(ds), "task",
                             classify ? "classification" : "regression", "x_dtype",
                             ds->x_type == ENG_DATA_U8 ? "uint8" : "float32", "files", files);
    if (classify)
        json_object_set_new(meta, "n_classes", json_integer(ds->n_classes));
    if (classify && ds->class_names) { /* class k is classes[k] (csv.c: named labels, sorted) */
        json_t *classes = json_array();
        for (int k = 0; k < ds->n_classes; k++)
            json_array_append_new(classes, api_json_string_lossy(ds->class_names[k]));
        json_object_set_new(meta, "classes", classes);
    }
    if (!classify) /* openapi: regression only */
        json_object_set_new(meta, "y_dim", json_integer((json_int_t)ds->y_dim));
    if (csv) json_object_set_new(meta, "label_column", json_string(label));
    if (npy && ds->x_type == ENG_DATA_U8) json_object_set_new(meta, "scale_u8", json_true());
    int64_t n_rows = (int64_t)ds->n;
    eng_dataset_release(ds);
    char *meta_text = json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    char stored_path[64];
    if (csv)
        snprintf(stored_path, sizeof stored_path, "%s", names[F_FILE]);
    else
        snprintf(stored_path, sizeof stored_path, "[\"%s\",\"%s\"]", names[F_X], names[F_Y]);

    int64_t id = 0;
    placing pl = {.ctx = ctx, .u = u, .name = name};
    for (int i = 0; ctx->opt.durable_checkpoints && !pl.errno_ && i < N_FILES; i++)
        if (paths[i]) pl.errno_ = api_dir_sync(paths[i], 0);
    if (pl.errno_) {
        free(meta_text);
        HPO_ERROR("datasets: cannot sync the uploaded files: %s", strerror(pl.errno_));
        fail_io(resp, pl.errno_, "cannot store the uploaded file");
        return;
    }
    rc = meta_text ? sto_dataset_create_placed(ctx->db, name, format, stored_path, meta_text, n_rows, (int64_t)bytes,
                                               place_files, &pl, &id)
                   : HPO_ENOMEM;
    free(meta_text);
    if (rc && pl.moved) api_dir_remove(pl.final_dir); /* placed, then not committed */
    if (rc == HPO_ECONFLICT) {
        api_fail(resp, 409, "conflict", "name", "a dataset named %s already exists", name);
        return;
    }
    if (rc == HPO_EIO && pl.errno_) {
        HPO_ERROR("datasets: cannot move %s to its place: %s", u->dir, strerror(pl.errno_));
        fail_io(resp, pl.errno_, "cannot move the uploaded files into place");
        return;
    }
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        return;
    }
    HPO_INFO("datasets: stored %s (id %lld, %s, %lld rows, %llu bytes)", name, (long long)id, format,
             (long long)n_rows, (unsigned long long)bytes);
    sto_dataset d;
    if (sto_dataset_get(ctx->db, id, &d) == 0) {
        api_reply_json(resp, 201, api_dataset_json(&d));
        sto_dataset_clear(&d);
    } else {
        api_reply_json(resp, 201, json_pack("{s:I, s:s}", "id", (json_int_t)id, "name", name));
    }
}

/* The form fields are complete and consistent: 0, or an error response. */
static int check_fields(api_ctx *ctx, api_upload *u, api_response *resp) {
    const char *name = text(u, T_NAME), *format = text(u, T_FORMAT), *task = text(u, T_TASK);
    char pname[NAME_MAX_LEN + 8];
    printable(pname, sizeof pname, name);
    if (!name_ok(name)) {
        api_fail(resp, 400, "invalid_argument", "name",
                 "a dataset needs a name of 1 to %d characters among A-Z a-z 0-9 _ . -", NAME_MAX_LEN);
        return -1;
    }
    if (eng_builtin_exists(name)) {
        api_fail(resp, 409, "conflict", "name", "%s is the name of a builtin dataset", name);
        return -1;
    }
    int csv = strcmp(format, "csv") == 0, idx = strcmp(format, "idx") == 0,
        npy = strcmp(format, "npy") == 0;
    if (!csv && !idx && !npy) {
        char pf[48];
        printable(pf, sizeof pf, format);
        api_fail(resp, 400, "invalid_argument", "format", "format must be csv, idx or npy%s%.40s%s",
                 format[0] ? " (got \"" : "", pf, format[0] ? "\")" : "");
        return -1;
    }
    if (task[0] && strcmp(task, "classification") != 0 && strcmp(task, "regression") != 0) {
        api_fail(resp, 400, "invalid_argument", "task", "task must be classification or regression");
        return -1;
    }
    if (idx && strcmp(task, "regression") == 0) {
        api_fail(resp, 400, "invalid_argument", "task", "idx datasets hold class labels: task must be "
                                                        "classification");
        return -1;
    }
    for (int i = 0; i < N_FILES; i++) {
        int wanted = csv ? i == F_FILE : i != F_FILE;
        if (wanted && !u->file[i].seen) {
            api_fail(resp, 400, "invalid_argument", file_keys[i],
                     csv ? "a csv upload needs its file as the form field file (-F file=@data.csv)"
                         : "a %s upload needs the form fields x and y (-F x=@... -F y=@...)", format);
            return -1;
        }
        if (!wanted && u->file[i].seen) {
            api_fail(resp, 400, "invalid_argument", file_keys[i],
                     "the form field %s does not belong to a %s upload (%s)", file_keys[i], format,
                     csv ? "send file" : "send x and y");
            return -1;
        }
    }
    if (csv && !u->text_len[T_LABEL]) {
        api_fail(resp, 400, "invalid_argument", "label_column",
                 "a csv upload needs label_column: the header name of the target column");
        return -1;
    }
    if (!csv && u->text_seen[T_LABEL]) {
        api_fail(resp, 400, "invalid_argument", "label_column", "label_column applies to csv uploads only");
        return -1;
    }
    sto_dataset d;
    int rc = sto_dataset_get_by_name(ctx->db, name, &d);
    if (rc == 0) {
        api_fail(resp, 409, "conflict", "name", "a dataset named %s already exists (id %lld)", name,
                 (long long)d.id);
        sto_dataset_clear(&d);
        return -1;
    }
    if (rc != HPO_ENOTFOUND) {
        api_fail_rc(resp, rc, NULL);
        return -1;
    }
    return 0;
}

void api_upload_finish(api_ctx *ctx, api_upload *u, api_response *resp) {
    memset(resp, 0, sizeof *resp);
    if (!u) {
        api_fail(resp, 500, "internal_error", "", "no upload");
        return;
    }
    close_files(u);
    if (u->rc)
        api_fail_rc(resp, u->rc, &u->err);
    else if (check_fields(ctx, u, resp) == 0)
        upload_store(ctx, u, resp);
    resp->route = "datasets.create";
    api_upload_abort(u); /* removes the temporary folder unless it was moved */
}

/* ---- JSON ---- */

static json_t *builtin_json(void) {
    return json_pack("{s:n, s:s, s:b, s:s, s:[i,i,i], s:s, s:i, s:s, s:i, s:i}", "id", "name",
                     "fashion-mnist", "builtin", 1, "format", "idx", "shape", 28, 28, 1, "task",
                     "classification", "n_classes", 10, "x_dtype", "uint8", "n_rows", 60000,
                     "test_rows", 10000);
}

json_t *api_dataset_json(const sto_dataset *d) {
    json_t *j = json_pack("{s:I, s:s, s:b, s:s, s:I, s:I, s:f}", "id", (json_int_t)d->id, "name",
                          d->name ? d->name : "", "builtin", 0, "format", d->format ? d->format : "",
                          "n_rows", (json_int_t)d->n_rows, "bytes", (json_int_t)d->bytes, "created",
                          d->created);
    json_t *meta = d->meta ? json_loads(d->meta, 0, NULL) : NULL;
    /* uploads stored before y_dim was regression only have it on classes */
    const char *task = json_string_value(json_object_get(meta, "task"));
    if (task && strcmp(task, "classification") == 0) json_object_del(meta, "y_dim");
    if (j && json_is_object(meta)) json_object_update_missing(j, meta);
    json_decref(meta);
    return j;
}

/* ---- handlers ---- */

void api_h_dataset_create(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    /* The server streams multipart bodies to api_upload_*; anything that
     * reaches the plain handler was not multipart. */
    api_fail(resp, 400, "invalid_argument", "",
             "upload a dataset as multipart/form-data (curl -F name=... -F format=csv "
             "-F label_column=... -F file=@data.csv)");
}

void api_h_dataset_list(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_dataset *list = NULL;
    size_t n = 0;
    int rc = sto_dataset_list(ctx->db, &list, &n);
    if (rc) {
        api_fail_rc(resp, rc, NULL);
        return;
    }
    json_t *arr = json_array();
    json_array_append_new(arr, builtin_json());
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, api_dataset_json(&list[i]));
    sto_dataset_list_free(list, n);
    api_reply_json(resp, 200, json_pack("{s:o}", "datasets", arr));
}

static int dataset_must_exist(api_ctx *ctx, int64_t id, sto_dataset *d, api_response *resp) {
    int rc = sto_dataset_get(ctx->db, id, d);
    if (rc == 0) return 0;
    api_fail_lookup(resp, rc, "dataset", id);
    return -1;
}

void api_h_dataset_get(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_dataset d;
    if (dataset_must_exist(ctx, id, &d, resp)) return;
    api_reply_json(resp, 200, api_dataset_json(&d));
    sto_dataset_clear(&d);
}

/* Whether stored definition spec trains on d (its "dataset" names it by
 * id, or by name). */
static int spec_uses(const char *spec_text, const sto_dataset *d) {
    json_t *spec = json_loads(spec_text, 0, NULL);
    const json_t *ds = json_object_get(spec, "dataset");
    const json_t *jid = json_object_get(ds, "id");
    const char *name = json_string_value(json_object_get(ds, "name"));
    int uses = (json_is_integer(jid) && json_integer_value(jid) == d->id) ||
               (!json_is_integer(jid) && name && strcmp(name, d->name) == 0);
    json_decref(spec);
    return uses;
}

/* A queued or running model job of the study (a refit trains on its
 * dataset, an ensemble predicts its splits, an export writes its
 * metadata): its id, or 0. */
static int64_t pending_model(api_ctx *ctx, int64_t study_id, const char **state) {
    sto_model *m = NULL;
    size_t n = 0;
    int64_t id = 0;
    if (sto_model_list(ctx->db, study_id, -1, &m, &n)) return 0;
    for (size_t i = 0; i < n && !id; i++)
        if (m[i].state == STO_MODEL_QUEUED || m[i].state == STO_MODEL_RUNNING) {
            id = m[i].id;
            *state = sto_model_state_name(m[i].state);
        }
    sto_model_list_free(m, n);
    return id;
}

/* Who uses d: the first running or paused study that trains on it, or a
 * study of it whose model job is queued or running: 1 and why (for the
 * 409), 0 when none, or a storage error. Called by the delete's
 * transaction once it holds the dataset's row (sto_dataset_delete_unused),
 * so a study or model created at the same time by another request or node
 * is either read here or finds the row gone. */
typedef struct dataset_users {
    api_ctx *ctx;
    const sto_dataset *d;
    char why[300];
} dataset_users;

static int dataset_in_use(void *arg) {
    dataset_users *u = arg;
    sto_study *list = NULL;
    size_t n = 0;
    int rc = sto_study_list(u->ctx->db, &list, &n);
    if (rc) return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!spec_uses(list[i].spec, u->d)) continue;
        const char *state = "";
        int64_t model = 0;
        if (list[i].state == STO_STUDY_RUNNING || list[i].state == STO_STUDY_PAUSED) {
            snprintf(u->why, sizeof u->why, "study %lld (%s) uses dataset %s: cancel or delete it first",
                     (long long)list[i].id, sto_study_state_name(list[i].state), u->d->name);
            rc = 1;
        } else if ((model = pending_model(u->ctx, list[i].id, &state))) {
            snprintf(u->why, sizeof u->why, "model %lld (%s) of study %lld uses dataset %s: wait until it ends",
                     (long long)model, state, (long long)list[i].id, u->d->name);
            rc = 1;
        }
    }
    sto_study_list_free(list, n);
    return rc;
}

void api_h_dataset_delete(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_dataset d;
    if (dataset_must_exist(ctx, id, &d, resp)) return;
    dataset_users users = {.ctx = ctx, .d = &d};
    int rc = sto_dataset_delete_unused(ctx->db, id, dataset_in_use, &users);
    if (rc == HPO_ECONFLICT) {
        api_fail(resp, 409, "conflict", "id", "%s", users.why);
        goto done;
    }
    if (rc) {
        api_fail_lookup(resp, rc, "dataset", id);
        goto done;
    }
    char dir[API_PATH_MAX];
    if (dataset_dir(ctx, d.id, d.name, dir, sizeof dir) == 0) {
        eng_dataset_cache_drop_under(dir); /* before the folder goes: the keys are its real paths */
        api_dir_remove(dir);
    }
    HPO_INFO("datasets: deleted %s (id %lld)", d.name, (long long)d.id);
    api_reply_text(resp, 204, "application/json", "", 0);
done:
    sto_dataset_clear(&d);
}

int api_dataset_id(api_ctx *ctx, const json_t *spec, int64_t *id_out) {
    const json_t *jid = json_object_get(spec, "id");
    const char *name = json_string_value(json_object_get(spec, "name"));
    *id_out = 0;
    if (json_is_integer(jid)) {
        *id_out = json_integer_value(jid);
        return 0;
    }
    if (!name || eng_builtin_exists(name)) return 0;
    sto_dataset d;
    int rc = sto_dataset_get_by_name(ctx->db, name, &d);
    if (rc) return rc;
    *id_out = d.id;
    sto_dataset_clear(&d);
    return 0;
}

/* ---- for the trial runner ---- */

int api_dataset_source(api_ctx *ctx, const json_t *spec, const char *part, eng_data_source *src,
                       char **owned, hpo_error *err) {
    if (!json_is_object(spec))
        return hpo_fail(err, HPO_EINVAL, "dataset", "dataset must be an object such as "
                                                    "{\"name\": \"fashion-mnist\"}");
    if (part && strcmp(part, "train") != 0 && strcmp(part, "test") != 0)
        return hpo_fail(err, HPO_EINVAL, "dataset", "unknown dataset part \"%.20s\"", part);
    const json_t *jid = json_object_get(spec, "id"), *jname = json_object_get(spec, "name");
    const char *name = json_string_value(jname);
    sto_dataset d;
    int rc;
    if (jid && !json_is_null(jid)) {
        if (!json_is_integer(jid) || json_integer_value(jid) <= 0)
            return hpo_fail(err, HPO_EINVAL, "dataset.id", "dataset.id must be a positive integer");
        rc = sto_dataset_get(ctx->db, json_integer_value(jid), &d);
        if (rc == HPO_ENOTFOUND)
            return hpo_fail(err, HPO_EINVAL, "dataset.id",
                            "no uploaded dataset has id %lld (GET /api/v1/datasets lists them)",
                            (long long)json_integer_value(jid));
        if (rc) return hpo_fail(err, rc, "dataset", "cannot read the dataset");
        if (name && strcmp(name, d.name) != 0) {
            char pn[NAME_MAX_LEN + 8];
            printable(pn, sizeof pn, name);
            rc = hpo_fail(err, HPO_EINVAL, "dataset.name", "dataset %lld is named %s, not %.64s",
                          (long long)d.id, d.name, pn);
            sto_dataset_clear(&d);
            return rc;
        }
    } else if (name) {
        if (eng_builtin_exists(name)) {
            char *block = hpo_strdup(name);
            memset(src, 0, sizeof *src);
            src->kind = ENG_SRC_BUILTIN;
            src->name = block;
            src->part = part ? part : "train";
            *owned = block;
            return 0;
        }
        rc = sto_dataset_get_by_name(ctx->db, name, &d);
        if (rc == HPO_ENOTFOUND) {
            char pn[NAME_MAX_LEN + 8];
            printable(pn, sizeof pn, name);
            return hpo_fail(err, HPO_EINVAL, "dataset.name",
                            "no dataset is named %.64s: the builtin one is fashion-mnist; upload "
                            "others with POST /api/v1/datasets",
                            pn);
        }
        if (rc) return hpo_fail(err, rc, "dataset", "cannot read the dataset");
    } else {
        return hpo_fail(err, HPO_EINVAL, "dataset.name",
                        "a dataset needs a \"name\" (or the \"id\" of an uploaded one)");
    }

    /* An uploaded dataset: its files and how to read them. */
    json_t *meta = json_loads(d.meta ? d.meta : "{}", 0, NULL);
    json_t *files = NULL;
    const char *f1 = NULL, *f2 = NULL;
    char dir[API_PATH_MAX];
    if (part && strcmp(part, "test") == 0) {
        rc = hpo_fail(err, HPO_ENOTFOUND, "dataset", "the uploaded dataset %s has no test part",
                      d.name);
        goto done;
    }
    if (is_two_file(d.format)) {
        files = json_loads(d.path, 0, NULL);
        f1 = json_string_value(json_array_get(files, 0));
        f2 = json_string_value(json_array_get(files, 1));
    } else {
        f1 = d.path;
    }
    if (!f1 || (is_two_file(d.format) && !f2) || dataset_dir(ctx, d.id, d.name, dir, sizeof dir)) {
        rc = hpo_fail(err, HPO_EINTERNAL, "dataset", "dataset %s has a broken file record", d.name);
        goto done;
    }
    const char *label = json_string_value(json_object_get(meta, "label_column"));
    const char *task = json_string_value(json_object_get(meta, "task"));
    const json_t *scale = json_object_get(meta, "scale_u8");
    /* one block: name \0 x_path \0 [y_path \0] [label \0] */
    size_t ln = strlen(d.name) + 1, lx = strlen(dir) + 1 + strlen(f1) + 1,
           ly = f2 ? strlen(dir) + 1 + strlen(f2) + 1 : 0, ll = label ? strlen(label) + 1 : 0;
    char *block = hpo_xmalloc(ln + lx + ly + ll), *p = block;
    memset(src, 0, sizeof *src);
    memcpy(p, d.name, ln), src->name = p, p += ln;
    snprintf(p, lx, "%s/%s", dir, f1), src->x_path = p, p += lx;
    if (f2) snprintf(p, ly, "%s/%s", dir, f2), src->y_path = p, p += ly;
    if (label) memcpy(p, label, ll), src->label_column = p;
    src->part = part ? part : "train";
    if (strcmp(d.format, "csv") == 0) {
        src->kind = ENG_SRC_CSV;
        src->classify = !task || strcmp(task, "regression") != 0;
    } else if (strcmp(d.format, "npy") == 0) {
        src->kind = ENG_SRC_NPY;
        src->scale_u8 = !scale || json_is_true(scale);
    } else {
        src->kind = ENG_SRC_IDX;
    }
    *owned = block;
    rc = 0;
done:
    json_decref(files);
    json_decref(meta);
    sto_dataset_clear(&d);
    return rc;
}
