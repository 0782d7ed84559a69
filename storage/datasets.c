/* datasets.c - datasets uploaded to hpod (schema v3): a row per dataset
 * with its format, file path(s) relative to the data dir, and meta JSON
 * (see storage.h). The files themselves are the api's business: storage
 * records where they are and never opens them. Names are unique (a UNIQUE
 * constraint: a duplicate is HPO_ECONFLICT, decided atomically by the
 * database). */
#include "db_internal.h"

#include <stdlib.h>
#include <string.h>

static void read_dataset(sto_stmt *s, void *out) {
    sto_dataset *d = out;
    memset(d, 0, sizeof *d);
    d->id = sto_col_int64(s, 0);
    d->name = sto_col_text(s, 1);
    d->format = sto_col_text(s, 2);
    d->path = sto_col_text(s, 3);
    d->meta = sto_col_text(s, 4);
    d->n_rows = sto_col_int64(s, 5);
    d->bytes = sto_col_int64(s, 6);
    d->created = sto_col_double(s, 7);
}

void sto_dataset_clear(sto_dataset *d) {
    if (!d) return;
    free(d->name);
    free(d->format);
    free(d->path);
    free(d->meta);
    memset(d, 0, sizeof *d);
}

void sto_dataset_list_free(sto_dataset *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) sto_dataset_clear(&list[i]);
    free(list);
}

int sto_dataset_create(sto_db *db, const char *name, const char *format, const char *path,
                       const char *meta, int64_t n_rows, int64_t bytes, int64_t *id_out) {
    return sto_dataset_create_placed(db, name, format, path, meta, n_rows, bytes, NULL, NULL, id_out);
}

int sto_dataset_create_placed(sto_db *db, const char *name, const char *format, const char *path,
                              const char *meta, int64_t n_rows, int64_t bytes, sto_dataset_place_fn place, void *arg,
                              int64_t *id_out) {
    if (!db || !name || !*name || !format || !path) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_DATASET_INSERT];
    int rc = sto_db_begin(db);
    if (rc) goto fail;
    sto_bind_text(s, 1, name);
    sto_bind_text(s, 2, format);
    sto_bind_text(s, 3, path);
    sto_bind_text(s, 4, meta ? meta : "{}");
    sto_bind_int64(s, 5, n_rows);
    sto_bind_int64(s, 6, bytes);
    sto_bind_real(s, 7, hpo_now());
    int64_t id = 0;
    if ((rc = sto_db_insert(db, s, "dataset create", &id, NULL))) goto fail;
    if (place && (rc = place(arg, id))) goto fail;
    rc = sto_db_commit(db);
    if (rc) goto fail;
    sto_db_unlock(db);
    if (id_out) *id_out = id;
    return 0;
fail:
    sto_db_done(s);
    sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}

static void clear_dataset(void *d) { sto_dataset_clear(d); }

int sto_dataset_get(sto_db *db, int64_t id, sto_dataset *out) {
    if (!db || !out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_DATASET_GET];
    sto_bind_int64(s, 1, id);
    int rc = sto_db_row(db, s, read_dataset, out, "dataset get");
    sto_db_unlock(db);
    return rc;
}

int sto_dataset_get_by_name(sto_db *db, const char *name, sto_dataset *out) {
    if (!db || !name || !out) return HPO_EINVAL;
    sto_db_lock(db);
    sto_stmt *s = db->q[STO_Q_DATASET_GET_BY_NAME];
    sto_bind_text(s, 1, name);
    int rc = sto_db_row(db, s, read_dataset, out, "dataset get");
    sto_db_unlock(db);
    return rc;
}

int sto_dataset_list(sto_db *db, sto_dataset **out, size_t *n_out) {
    if (!db || !out || !n_out) return HPO_EINVAL;
    sto_db_lock(db);
    int rc = sto_db_rows(db, db->q[STO_Q_DATASET_LIST], sizeof **out, read_dataset, clear_dataset, "dataset list",
                         (void **)out, n_out);
    sto_db_unlock(db);
    return rc;
}

int sto_dataset_delete(sto_db *db, int64_t id) {
    if (!db) return HPO_EINVAL;
    return sto_db_exec_id(db, STO_Q_DATASET_DELETE, id, "dataset delete");
}

int sto_dataset_delete_unused(sto_db *db, int64_t id, sto_dataset_in_use_fn in_use, void *arg) {
    if (!db || !in_use) return HPO_EINVAL;
    sto_db_lock(db);
    int rc = sto_db_begin(db);
    if (rc == 0) rc = sto_db_exists(db, STO_Q_DATASET_CLAIM, id);
    if (rc == 0) {
        rc = in_use(arg);
        if (rc == 1) rc = HPO_ECONFLICT;
    }
    if (rc == 0) {
        sto_stmt *s = db->q[STO_Q_DATASET_DELETE];
        sto_bind_int64(s, 1, id);
        if (sto_step(s) != STO_DONE) rc = sto_db_error(db, "dataset delete");
        sto_db_done(s);
    }
    if (rc == 0) rc = sto_db_commit(db);
    if (rc) sto_db_rollback(db);
    sto_db_unlock(db);
    return rc;
}
