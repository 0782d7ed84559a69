/* imports.c - a study import (or copy) in progress, marked by a file so
 * that a crash in the middle leaves no half-imported study behind.
 *
 * An import creates its study paused, adds the trials one transaction each
 * (study_io.c), then lets it run. A kill in between left a paused study
 * with part of its history, which nothing told from one a user paused, and
 * which the client (given no answer) imported again. Now the import makes
 * <artifacts>/imports/<node ident>-study-<id> in the study's insert
 * transaction (before it commits: a committed study always has its marker;
 * a marker whose study never committed names no study) and removes it once
 * the study runs; at its next start the node deletes each
 * study its markers name that is still paused (the import never ended),
 * and removes the markers. The data dir's node ident (stable across its
 * restarts) keeps the nodes that share an artifacts dir off each other's
 * imports. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"

static const char *ident_of(api_ctx *ctx) {
    const char *ident = api_node_ident(ctx);
    return ident ? ident : "local";
}

static int marker(api_ctx *ctx, int64_t study_id, char *out) {
    return api_dir_path(out, ctx->opt.data_dir, "imports/%s-study-%lld", ident_of(ctx), (long long)study_id);
}

int api_import_begin(api_ctx *ctx, int64_t study_id, hpo_error *err) {
    char dir[API_PATH_MAX], path[API_PATH_MAX];
    if (api_dir_path(dir, ctx->opt.data_dir, "imports") || marker(ctx, study_id, path))
        return hpo_fail(err, HPO_EINVAL, "", "the data dir path is too long");
    int rc = api_dir_make(ctx->opt.data_dir, dir, err);
    return rc ? rc : api_dir_write_atomic(path, "", 1, err);
}

void api_import_end(api_ctx *ctx, int64_t study_id) {
    char path[API_PATH_MAX];
    if (marker(ctx, study_id, path) == 0) api_dir_unlink(path);
}

void api_imports_recover(api_ctx *ctx) {
    char dir[API_PATH_MAX], prefix[128];
    if (api_dir_path(dir, ctx->opt.data_dir, "imports")) return;
    DIR *d = opendir(dir);
    if (!d) return; /* no import was ever made */
    int n = snprintf(prefix, sizeof prefix, "%s-study-", ident_of(ctx));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, (size_t)n) != 0) continue;
        char *end;
        long long id = strtoll(e->d_name + n, &end, 10);
        if (*end || id <= 0) continue;
        sto_study s;
        int rc = sto_study_get(ctx->db, id, &s);
        if (rc == 0) {
            if (s.state == STO_STUDY_PAUSED) { /* else it ran: the marker outlived the import */
                rc = sto_study_delete(ctx->db, id);
                api_study_forget(ctx, id);
                if (rc == 0)
                    HPO_WARN("study %lld (%s): its import was cut short (hpod stopped before it ended): deleted; "
                             "import it again", id, s.name);
            }
            sto_study_clear(&s);
        }
        if (rc == 0 || rc == HPO_ENOTFOUND) { /* a storage error: the next start tries again */
            char path[API_PATH_MAX];
            if (marker(ctx, id, path) == 0) api_dir_unlink(path);
        }
    }
    closedir(d);
}
