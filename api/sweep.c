/* sweep.c - the start-up sweep of the artifacts dir (data_dir.h,
 * api_dir_sweep): partial uploads left by a crash are removed, and the
 * files whose ids have no row in this database are moved aside.
 *
 * Why move and not delete: files without a row are either a deleted
 * study's that a crash left behind (the delete commits first, then removes
 * the files), or another database's (hpo.db replaced, restored from an
 * older backup or emptied: its ids are handed out again over the old
 * folders, and a new trial would resume from, or "finish" with, an old
 * trial's checkpoint). In the second case the database may be the wrong
 * one, so nothing is destroyed: the entries go to
 * <root>/orphaned/<UTC time>/ under their relative paths, and one WARN line
 * says how many and where.
 *
 * What is looked at (every kind data_dir.h lists):
 *   datasets/.upload-*                      removed (see below for PostgreSQL)
 *   datasets/<id>-<name>                    no dataset <id>, or it has another name
 *   checkpoints/trial-<id>                  no trial <id>
 *   checkpoints/model-<id>, model-<id>.*    no model <id> (a refit's checkpoint, its crash counter)
 *   models/model-<id>.*                     no model <id> (exported weights)
 *   studies/study-<id>                      no study <id>; in a study that exists, its
 *     tensorboard/trial-<n>[-exec-<k>]      runs of trial numbers it does not have (numbers
 *     tensorboard/refit-model-<id>          are dense) and of refits of models not its own
 * Temporary files beside an entry (<name>.tmp-XXXXXX) go with it; names of
 * no known form are left alone. A storage error on a lookup keeps the entry.
 *
 * Temporaries a killed write left (kill -9, OOM, power loss) are deleted
 * first, wherever they are under checkpoints/ and models/ (and so under a
 * row that exists too): a checkpoint's or weights file's
 * (<file>.tmp.<pid>.<n>, engine/safetensors.c: as large as the file) and
 * data_dir.c's (<file>.tmp-XXXXXX, <file>.link-XXXXXX). Nothing reads
 * them: the write they were for never renamed them over its file.
 *
 * PostgreSQL (sto_shared): the nodes share the artifacts dir and other
 * nodes create rows and their folders while this one starts, and a node
 * started on the wrong database URL (a new, empty database) would
 * otherwise move a live cluster's files away. So there only uploads that
 * no file in has changed for an hour, and temporaries unchanged for an
 * hour (another node may be writing one), are removed, and the id sweep is
 * skipped (logged); api/job_trial.c still ignores a finished execution's
 * result file that another trial wrote. On SQLite this process is the
 * only one using the files (the data dir's lock), and the sweep runs
 * before the scheduler and the HTTP server start. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data_dir.h"

#define UPLOAD_MAX_AGE_SHARED 3600 /* seconds without a change before a shared upload is stale */

typedef struct sweep {
    sto_db *db;
    const char *root;
    char dest[API_PATH_MAX]; /* <root>/orphaned/<time>, made at the first move */
    int moved, failed;
} sweep;

/* "<prefix><digits>" followed by '\0' or '.' (or '-' when dash): the id,
 * else -1. */
static int64_t parse_id(const char *name, const char *prefix, int dash) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0) return -1;
    const char *p = name + n;
    if (*p < '0' || *p > '9') return -1;
    int64_t id = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (id > (INT64_MAX - 9) / 10) return -1;
        id = id * 10 + (*p - '0');
    }
    if (*p == '\0' || *p == '.' || (dash && *p == '-')) return id;
    return -1;
}

/* Moves <root>/<folder>/<name> to <dest>/<folder>/<name>. */
static void move_aside(sweep *s, const char *folder, const char *name) {
    char rel[API_PATH_MAX], from[API_PATH_MAX], to[API_PATH_MAX], dir[API_PATH_MAX];
    snprintf(rel, sizeof rel, "%s/%s", folder, name);
    hpo_error err = {{0}, {0}};
    if (!s->dest[0]) {
        time_t now = time(NULL);
        struct tm tm;
        char stamp[32];
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
        if (api_dir_path(dir, s->root, "orphaned") || api_dir_make(s->root, dir, &err)) goto fail;
        for (int k = 0; k < 100 && !s->dest[0]; k++) { /* a folder of its own, even two starts in a second */
            int rc = k ? api_dir_path(to, s->root, "orphaned/%s-%d", stamp, k)
                       : api_dir_path(to, s->root, "orphaned/%s", stamp);
            if (rc) goto fail;
            if (mkdir(to, 0755) == 0) snprintf(s->dest, sizeof s->dest, "%s", to);
            else if (errno != EEXIST) goto fail;
        }
        if (!s->dest[0]) goto fail;
    }
    if (api_dir_path(from, s->root, "%s", rel) || api_dir_path(to, s->dest, "%s", rel)) goto fail;
    snprintf(dir, sizeof dir, "%s", to);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    if (api_dir_make(s->dest, dir, &err) || rename(from, to)) goto fail;
    s->moved++;
    return;
fail:
    s->failed++;
    HPO_WARN("start-up sweep: cannot move %s/%s aside: %s", s->root, rel,
             err.message[0] ? err.message : strerror(errno));
}

/* 1 when the row of a kind is surely absent (HPO_ENOTFOUND); a storage
 * error counts as present. */
static int absent(int rc) { return rc == HPO_ENOTFOUND; }

static int study_absent(sweep *s, int64_t id) {
    sto_study st;
    int rc = sto_study_get(s->db, id, &st);
    if (rc == 0) sto_study_clear(&st);
    return absent(rc);
}

static int trial_absent(sweep *s, int64_t id) {
    sto_trial t;
    int rc = sto_trial_get(s->db, id, &t);
    if (rc == 0) sto_trial_clear(&t);
    return absent(rc);
}

/* No model id, or (study_id > 0) one of another study. */
static int model_absent(sweep *s, int64_t id, int64_t study_id) {
    sto_model m;
    int rc = sto_model_get(s->db, id, &m);
    if (rc) return absent(rc);
    int other = study_id > 0 && m.study_id != study_id;
    sto_model_clear(&m);
    return other;
}

/* datasets/<id>-<name>: no such row, or a row of another name. */
static int dataset_absent(sweep *s, int64_t id, const char *name) {
    sto_dataset d;
    int rc = sto_dataset_get(s->db, id, &d);
    if (rc) return absent(rc);
    int other = !d.name || strcmp(d.name, name) != 0;
    sto_dataset_clear(&d);
    return other;
}

/* Calls fn(s, folder, name, arg) for every entry of <root>/<folder> but . and .. */
typedef void (*entry_fn)(sweep *s, const char *folder, const char *name, void *arg);
static void each_entry(sweep *s, const char *folder, entry_fn fn, void *arg) {
    char path[API_PATH_MAX];
    if (api_dir_path(path, s->root, "%s", folder)) return;
    DIR *d = opendir(path);
    if (!d) {
        if (errno != ENOENT) HPO_WARN("start-up sweep: cannot read %s: %s", path, strerror(errno));
        return;
    }
    /* the names first: entries are moved while the folder is read */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == cap) names = hpo_xrealloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[n++] = hpo_strdup(e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        fn(s, folder, names[i], arg);
        free(names[i]);
    }
    free(names);
}

/* ---- uploads ---- */

typedef struct uploads {
    int shared, removed;
} uploads;

static time_t newest_seen; /* nftw has no argument; the sweep runs once, before any thread */
static int newest(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)path, (void)flag, (void)ftw;
    if (sb->st_mtime > newest_seen) newest_seen = sb->st_mtime;
    return 0;
}

static void upload_entry(sweep *s, const char *folder, const char *name, void *arg) {
    uploads *up = arg;
    if (strncmp(name, ".upload-", 8) != 0) return;
    char path[API_PATH_MAX];
    if (api_dir_path(path, s->root, "%s/%s", folder, name)) return;
    if (up->shared) { /* another node may be uploading into it right now */
        newest_seen = 0;
        if (nftw(path, newest, 8, FTW_PHYS)) return;
        if (time(NULL) - newest_seen < UPLOAD_MAX_AGE_SHARED) return;
    }
    api_dir_remove(path);
    up->removed++;
}

/* ---- temporaries of killed writes ---- */

typedef struct temps {
    int shared, removed, depth;
} temps;

/* 1 when s is n characters of [A-Za-z0-9] (mkstemp's) */
static int alnum_run(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

/* <file>.tmp.<digits>.<digits> (eng_st_write_file), <file>.tmp-XXXXXX or
 * <file>.link-XXXXXX (data_dir.c) */
static int is_temporary(const char *name) {
    const char *p = strstr(name, ".tmp.");
    for (; p; p = strstr(p + 1, ".tmp.")) {
        const char *q = p + 5;
        size_t a = strspn(q, "0123456789"), b = a && q[a] == '.' ? strspn(q + a + 1, "0123456789") : 0;
        if (p > name && b && q[a + 1 + b] == '\0') return 1;
    }
    const char *dash = strrchr(name, '-');
    if (!dash || dash == name) return 0;
    size_t n = (size_t)(dash - name);
    return ((n > 4 && strncmp(dash - 4, ".tmp", 4) == 0) || (n > 5 && strncmp(dash - 5, ".link", 5) == 0)) &&
           alnum_run(dash + 1, 6);
}

static void temporary_entry(sweep *s, const char *folder, const char *name, void *arg) {
    temps *t = arg;
    char path[API_PATH_MAX];
    struct stat st;
    if (api_dir_path(path, s->root, "%s/%s", folder, name) || lstat(path, &st)) return;
    if (S_ISDIR(st.st_mode) && t->depth < 2) { /* checkpoints/trial-<id>/..., model-<id>/... */
        char rel[API_PATH_MAX];
        snprintf(rel, sizeof rel, "%s/%s", folder, name);
        t->depth++;
        each_entry(s, rel, temporary_entry, t);
        t->depth--;
        return;
    }
    if (!S_ISREG(st.st_mode) || !is_temporary(name)) return;
    if (t->shared && time(NULL) - st.st_mtime < UPLOAD_MAX_AGE_SHARED) return;
    if (unlink(path) == 0) t->removed++;
    else if (errno != ENOENT) HPO_WARN("start-up sweep: cannot remove %s: %s", path, strerror(errno));
}

/* ---- ids ---- */

static void dataset_entry(sweep *s, const char *folder, const char *name, void *arg) {
    (void)arg;
    int64_t id = parse_id(name, "", 1);
    const char *dash = strchr(name, '-');
    if (id < 0 || !dash || !dash[1] || !dataset_absent(s, id, dash + 1)) return;
    move_aside(s, folder, name);
}

static void checkpoint_entry(sweep *s, const char *folder, const char *name, void *arg) {
    (void)arg;
    int64_t trial = parse_id(name, "trial-", 0), model = parse_id(name, "model-", 0);
    if (!(trial >= 0 && trial_absent(s, trial)) && !(model >= 0 && model_absent(s, model, 0))) return;
    move_aside(s, folder, name);
}

static void model_entry(sweep *s, const char *folder, const char *name, void *arg) {
    (void)arg;
    int64_t model = parse_id(name, "model-", 0);
    if (model < 0 || !model_absent(s, model, 0)) return;
    move_aside(s, folder, name);
}

/* studies/study-<id>/tensorboard/<run> of a study that exists */
typedef struct study_runs {
    int64_t study_id, n_trials;
} study_runs;

static void run_entry(sweep *s, const char *folder, const char *name, void *arg) {
    study_runs *sr = arg;
    int64_t number = parse_id(name, "trial-", 1), model = parse_id(name, "refit-model-", 0);
    int stale = (number >= 0 && sr->n_trials >= 0 && number >= sr->n_trials) ||
                (model >= 0 && model_absent(s, model, sr->study_id));
    if (!stale) return;
    move_aside(s, folder, name);
}

static void study_entry(sweep *s, const char *folder, const char *name, void *arg) {
    (void)arg;
    int64_t id = parse_id(name, "study-", 0);
    if (id < 0) return;
    char rel[API_PATH_MAX];
    if (study_absent(s, id)) {
        move_aside(s, folder, name);
        return;
    }
    int64_t counts[STO_TRIAL_N_STATES];
    study_runs sr = {id, -1}; /* numbers are dense: a study of n trials has 0..n-1 */
    if (sto_trial_counts(s->db, id, counts) == 0) {
        sr.n_trials = 0;
        for (int i = 0; i < STO_TRIAL_N_STATES; i++) sr.n_trials += counts[i];
    }
    snprintf(rel, sizeof rel, "%s/%s/tensorboard", folder, name);
    each_entry(s, rel, run_entry, &sr);
}

int api_dir_sweep(sto_db *db, const char *root) {
    sweep s = {.db = db, .root = root};
    int shared = sto_shared(db);
    uploads up = {shared, 0};
    each_entry(&s, "datasets", upload_entry, &up);
    if (up.removed)
        HPO_INFO("start-up sweep: removed %d partial upload(s) left in %s/datasets by a crash%s", up.removed, root,
                 shared ? " (unchanged for an hour)" : "");
    temps tmp = {shared, 0, 0};
    each_entry(&s, "checkpoints", temporary_entry, &tmp);
    each_entry(&s, "models", temporary_entry, &tmp);
    if (tmp.removed)
        HPO_INFO("start-up sweep: removed %d temporary file(s) of writes a crash cut short in %s/checkpoints and "
                 "%s/models%s", tmp.removed, root, root, shared ? " (unchanged for an hour)" : "");
    if (shared) {
        HPO_INFO("start-up sweep: the database is shared (PostgreSQL): files without a row in it are left where "
                 "they are");
        return 0;
    }
    each_entry(&s, "datasets", dataset_entry, NULL);
    each_entry(&s, "checkpoints", checkpoint_entry, NULL);
    each_entry(&s, "models", model_entry, NULL);
    each_entry(&s, "studies", study_entry, NULL);
    if (s.moved)
        HPO_WARN("start-up sweep: %d file(s)/folder(s) of %s name ids this database has no row for (a deleted "
                 "study's files left by a crash, or hpo.db replaced, emptied or restored from an older backup): "
                 "moved to %s, nothing deleted (move them back if this is the wrong database)",
                 s.moved, root, s.dest);
    return s.moved;
}
