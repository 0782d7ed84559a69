/* data_dir.c - the data directory's layout, folders and small files (see
 * data_dir.h). */
#define _XOPEN_SOURCE 700
#include "data_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int api_dir_check_root(const char *root, const char *field, hpo_error *err) {
    size_t n = root ? strlen(root) : 0;
    if (n == 0) return hpo_fail(err, HPO_EINVAL, field, "the data dir must not be empty");
    if (n > API_DIR_ROOT_MAX)
        return hpo_fail(err, HPO_EINVAL, field, "the data dir path is %zu bytes long; at most %d are allowed", n,
                        API_DIR_ROOT_MAX);
    return 0;
}

int api_dir_check_db_path(const char *root, hpo_error *err) {
    char name[API_PATH_MAX];
    api_dir_db(name, ""); /* "/hpo.db": what the database adds to the data dir's path */
    char *real = realpath(root, NULL);
    if (!real) return 0; /* the database's open says why */
    size_t n = strlen(real), max = sto_sqlite_path_max(), room = max - strlen(name);
    free(real);
    if (n <= room) return 0;
    return hpo_fail(err, HPO_EINVAL, "data-dir",
                    "the data dir is %zu bytes long as an absolute path with links resolved; SQLite opens its "
                    "database (hpo.db) in one of at most %zu bytes (its limit for a database path is %zu bytes)",
                    n, room, max);
}

int api_dir_path(char *out, const char *root, const char *fmt, ...) {
    int n = snprintf(out, API_PATH_MAX, "%s/", root);
    if (n < 0 || n >= API_PATH_MAX) return HPO_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out + n, (size_t)(API_PATH_MAX - n), fmt, ap);
    va_end(ap);
    if (k < 0 || k >= API_PATH_MAX - n) {
        out[0] = '\0';
        return HPO_EINVAL;
    }
    return 0;
}

int api_dir_db(char *out, const char *root) { return api_dir_path(out, root, "hpo.db"); }
int api_dir_datasets(char *out, const char *root) { return api_dir_path(out, root, "datasets"); }
int api_dir_dataset(char *out, const char *root, int64_t id, const char *name) {
    return api_dir_path(out, root, "datasets/%lld-%s", (long long)id, name);
}
int api_dir_trial(char *out, const char *root, int64_t trial_id) {
    return api_dir_path(out, root, "checkpoints/trial-%lld", (long long)trial_id);
}
int api_dir_trial_file(char *out, const char *root, int64_t trial_id, const char *name) {
    return api_dir_path(out, root, "checkpoints/trial-%lld/%s", (long long)trial_id, name);
}
int api_dir_file(char *out, const char *root, const char *rel) { return api_dir_path(out, root, "%s", rel); }
int api_dir_model_checkpoint(char *out, const char *root, int64_t model_id) {
    return api_dir_path(out, root, "checkpoints/model-%lld", (long long)model_id);
}
int api_dir_study(char *out, const char *root, int64_t study_id) {
    return api_dir_path(out, root, "studies/study-%lld", (long long)study_id);
}
int api_dir_tensorboard(char *out, const char *root, int64_t study_id) {
    return api_dir_path(out, root, "studies/study-%lld/tensorboard", (long long)study_id);
}
int api_dir_tensorboard_trial(char *out, const char *root, int64_t study_id, int64_t number, int execution) {
    if (execution == 0)
        return api_dir_path(out, root, "studies/study-%lld/tensorboard/trial-%lld", (long long)study_id,
                            (long long)number);
    return api_dir_path(out, root, "studies/study-%lld/tensorboard/trial-%lld-exec-%d", (long long)study_id,
                        (long long)number, execution);
}
int api_dir_tensorboard_refit(char *out, const char *root, int64_t study_id, int64_t model_id) {
    return api_dir_path(out, root, "studies/study-%lld/tensorboard/refit-model-%lld", (long long)study_id,
                        (long long)model_id);
}
int api_dir_models(char *out, const char *root) { return api_dir_path(out, root, "models"); }
int api_dir_model_file_rel(char *out, size_t cap, int64_t model_id) {
    int n = snprintf(out, cap, "models/model-%lld.safetensors", (long long)model_id);
    return n < 0 || (size_t)n >= cap ? HPO_EINVAL : 0;
}

/* HPO_ENOSPACE (a full disk), HPO_EFS (the file system failed: the jobs
 * retry both) or HPO_EIO, naming the path and errno's text. */
static int io_error(hpo_error *err, int e, const char *what, const char *path) {
    return hpo_fail(err, hpo_errno_rc(e), "", "cannot %s %s: %s", what, path, strerror(e));
}

/* Locks path (flock, made if missing) for the life of the process, its pid
 * written in it: HPO_ECONFLICT "<what> in use by pid N" (field) when
 * another process holds it. A file system without flock is a warning. */
static int lock_for_life(const char *path, const char *field, const char *what, hpo_error *err) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return hpo_fail(err, HPO_EIO, field, "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char text[32] = "";
            ssize_t n = pread(fd, text, sizeof text - 1, 0);
            text[n > 0 ? n : 0] = '\0';
            long pid = strtol(text, NULL, 10);
            close(fd);
            if (pid > 0) return hpo_fail(err, HPO_ECONFLICT, field, "%s in use by pid %ld", what, pid);
            return hpo_fail(err, HPO_ECONFLICT, field, "%s in use by another hpod", what);
        }
        HPO_WARN("cannot lock %s (%s): nothing stops a second hpod on %s", path, strerror(e), what);
        close(fd);
        return 0;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, text, (size_t)n, 0) != n)
        HPO_WARN("cannot write the pid to %s: %s", path, strerror(errno));
    /* fd stays open (and the lock held) until the process exits */
    return 0;
}

int api_dir_lock(const char *root, hpo_error *err) {
    char path[API_PATH_MAX], what[API_PATH_MAX + 16];
    if (api_dir_path(path, root, "hpod.lock")) return hpo_fail(err, HPO_EINVAL, "data-dir", "the data dir path is too long");
    snprintf(what, sizeof what, "data dir %s", root);
    return lock_for_life(path, "data-dir", what, err);
}

int api_db_lock(const char *db_path, hpo_error *err) {
    char real[PATH_MAX], path[PATH_MAX + 8], what[PATH_MAX + 16];
    if (!realpath(db_path, real)) snprintf(real, sizeof real, "%s", db_path); /* not made yet */
    if (snprintf(path, sizeof path, "%s.lock", real) >= (int)sizeof path)
        return hpo_fail(err, HPO_EINVAL, "data-dir", "the database path is too long");
    snprintf(what, sizeof what, "database %s", real);
    return lock_for_life(path, "data-dir", what, err);
}

int api_dir_node_ident(const char *root, char *out, hpo_error *err) {
    char path[API_PATH_MAX];
    if (api_dir_path(path, root, "node-id")) return hpo_fail(err, HPO_EINVAL, "data-dir", "the data dir path is too long");
    FILE *f = fopen(path, "r");
    if (f) {
        int ok = fgets(out, API_NODE_IDENT_MAX, f) != NULL;
        fclose(f);
        if (ok) out[strcspn(out, "\r\n")] = '\0';
        if (ok && strlen(out) == 32 && strspn(out, "0123456789abcdef") == 32) return 0;
        HPO_WARN("%s is not a node ident: a new one is made", path);
    }
    unsigned char bytes[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, bytes, sizeof bytes) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof bytes) return hpo_fail(err, HPO_EIO, "data-dir", "cannot read /dev/urandom");
    for (size_t i = 0; i < sizeof bytes; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    char text[API_NODE_IDENT_MAX + 1];
    snprintf(text, sizeof text, "%s\n", out);
    return api_dir_write_atomic(path, text, 1, err);
}

int api_dir_make(const char *root, const char *dir, hpo_error *err) {
    size_t skip = strlen(root);
    if (strncmp(dir, root, skip) != 0 || (dir[skip] != '/' && dir[skip] != '\0'))
        return hpo_fail(err, HPO_EINTERNAL, "", "%s is not inside the data dir %s", dir, root);
    char path[API_PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof path) return hpo_fail(err, HPO_EINVAL, "", "path too long: %.64s...", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = skip + 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) && errno != EEXIST) return io_error(err, errno, "create", path);
        path[i] = c;
    }
    return 0;
}

/* fsyncs path (a file or a folder); 0 or errno. */
static int sync_path(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) return errno;
    int e = fsync(fd) ? errno : 0;
    close(fd);
    return e;
}

int api_dir_sync(const char *path, int folder) { return sync_path(path, O_RDONLY | (folder ? O_DIRECTORY : 0)); }

/* A new empty file <path>.<tag>-XXXXXX (0644) open in *fd, its name unique
 * on the file system (several nodes may share the artifacts dir). */
static int unique_tmp(char *tmp, size_t cap, const char *path, const char *tag, int *fd, hpo_error *err) {
    int n = snprintf(tmp, cap, "%s.%s-XXXXXX", path, tag);
    if (n < 0 || (size_t)n >= cap) return hpo_fail(err, HPO_EINVAL, "", "path too long: %.64s...", path);
    if ((*fd = mkstemp(tmp)) < 0) return io_error(err, errno, "create", tmp);
    if (fchmod(*fd, 0644)) HPO_WARN("cannot make %s readable to all: %s", tmp, strerror(errno));
    return 0;
}

int api_dir_write_atomic(const char *path, const char *text, int durable, hpo_error *err) {
    char tmp[API_PATH_MAX + 16];
    int fd = -1, rc = unique_tmp(tmp, sizeof tmp, path, "tmp", &fd, err);
    if (rc) return rc;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return io_error(err, e, "create", tmp);
    }
    int e = fputs(text, f) < 0 || fflush(f) ? errno : 0;
    if (!e && durable && fsync(fileno(f))) e = errno;
    if (fclose(f) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (e) {
        unlink(tmp);
        return io_error(err, e, "write", path);
    }
    if (durable) {
        char dir[API_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        if ((e = sync_path(slash ? dir : ".", O_RDONLY | O_DIRECTORY))) return io_error(err, e, "sync", dir);
    }
    return 0;
}

/* Copies src into the open file fd. */
static int copy_into(const char *src, int fd) {
    int in = open(src, O_RDONLY);
    if (in < 0) return errno;
    char buf[1 << 16];
    int e = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n < 0) e = errno;
            break;
        }
        for (ssize_t off = 0; off < n && !e;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno != EINTR) e = errno;
            if (w > 0) off += w;
        }
        if (e) break;
    }
    close(in);
    return e;
}

int api_dir_link(const char *src, const char *dst, int durable, hpo_error *err) {
    char tmp[API_PATH_MAX + 16];
    int fd = -1, rc = unique_tmp(tmp, sizeof tmp, dst, "link", &fd, err); /* a name of our own, then the link */
    if (rc) return rc;
    close(fd);
    unlink(tmp);
    int e = link(src, tmp) ? errno : 0;
    if (e == ENOENT) return hpo_fail(err, HPO_ENOTFOUND, "", "%s is missing", src);
    if (e) { /* no hard links here: a copy */
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        e = fd < 0 ? errno : copy_into(src, fd);
        if (fd >= 0 && !e && durable && fsync(fd)) e = errno;
        if (fd >= 0 && close(fd) && !e) e = errno;
    }
    if (!e && rename(tmp, dst)) e = errno;
    if (e) {
        unlink(tmp);
        return io_error(err, e, "write", dst);
    }
    if (durable) {
        char dir[API_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", dst);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        if ((e = sync_path(slash ? dir : ".", O_RDONLY | O_DIRECTORY))) return io_error(err, e, "sync", dir);
    }
    return 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    if (remove(path) && errno != ENOENT) HPO_WARN("cannot remove %s: %s", path, strerror(errno));
    return 0;
}

void api_dir_remove(const char *dir) {
    if (!dir || !dir[0]) return;
    if (nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
        HPO_WARN("cannot remove %s: %s", dir, strerror(errno));
}

void api_dir_unlink(const char *path) {
    if (unlink(path) && errno != ENOENT) HPO_WARN("cannot remove %s: %s", path, strerror(errno));
}

static int listed(const int64_t *ids, size_t n, int64_t id) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

void api_dir_prune_checkpoints(const char *root, const sto_trial *t, size_t n, int64_t keep_from, const int64_t *keep,
                               size_t n_keep) {
    for (size_t i = 0; i < n; i++) {
        if (t[i].state == STO_TRIAL_RUNNING || t[i].state == STO_TRIAL_QUEUED) continue;
        if (t[i].last_step >= keep_from || listed(keep, n_keep, t[i].id)) continue;
        char dir[API_PATH_MAX];
        if (api_dir_trial(dir, root, t[i].id) == 0) api_dir_remove(dir);
    }
}

/* ---- the crash counters: a trial's, a model job's ---- */

static int counter_path(char *out, const char *root, int model, int64_t id) {
    return model ? api_dir_path(out, root, "checkpoints/model-%lld.training", (long long)id)
                 : api_dir_path(out, root, "checkpoints/trial-%lld/training", (long long)id);
}

static int crashes(const char *root, int model, int64_t id) {
    char path[API_PATH_MAX];
    int k = 0;
    FILE *f = counter_path(path, root, model, id) ? NULL : fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d", &k) != 1 || k < 0) k = 0;
        fclose(f);
    }
    return k;
}

static void write_count(const char *root, int model, int64_t id, int k) {
    char dir[API_PATH_MAX], path[API_PATH_MAX], text[16];
    hpo_error err = {{0}, {0}};
    int rc = model ? api_dir_path(dir, root, "checkpoints") : api_dir_trial(dir, root, id);
    if (rc == 0) rc = api_dir_make(root, dir, &err); /* nothing checkpointed yet: it may not exist */
    if (rc == 0) rc = counter_path(path, root, model, id);
    snprintf(text, sizeof text, "%d\n", k);
    if (rc == 0) rc = api_dir_write_atomic(path, text, 0, &err);
    if (rc)
        HPO_WARN("%s %lld: cannot write its crash counter (%s): the crash-loop guard is off for it",
                 model ? "model" : "trial", (long long)id, err.message[0] ? err.message : hpo_strerror(rc));
}

static int begin(const char *root, int model, int64_t id) {
    int k = crashes(root, model, id) + 1;
    write_count(root, model, id, k);
    return k;
}

/* Training returned, or an epoch finished: a death from now on is not one
 * "before it finished an epoch" (no file: 0). The next run's begin counts
 * from there. */
static void end(const char *root, int model, int64_t id) {
    char path[API_PATH_MAX];
    if (counter_path(path, root, model, id) == 0) api_dir_unlink(path);
}

int api_training_crashes(const char *root, int64_t trial_id) { return crashes(root, 0, trial_id); }
int api_training_begin(const char *root, int64_t trial_id) { return begin(root, 0, trial_id); }
void api_training_epoch(const char *root, int64_t trial_id) { end(root, 0, trial_id); }
void api_training_end(const char *root, int64_t trial_id) { end(root, 0, trial_id); }

int api_model_job_crashes(const char *root, int64_t model_id) { return crashes(root, 1, model_id); }
int api_model_job_begin(const char *root, int64_t model_id) { return begin(root, 1, model_id); }
void api_model_job_epoch(const char *root, int64_t model_id) { end(root, 1, model_id); }
void api_model_job_end(const char *root, int64_t model_id) { end(root, 1, model_id); }
