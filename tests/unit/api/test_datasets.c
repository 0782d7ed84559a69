/* test_datasets.c - the api's datasets in-process (no HTTP): the upload
 * interface the server drives (pieces in several chunks, the size cap
 * deleting the temporary files at once, abort, the dataset size cap and
 * the load slots: 413 and 503), and api_dataset_source(),
 * which the trial runner uses: builtin, by name, by id, disagreeing
 * name/id, unknown ones, the test part, the single owned block, and the
 * paths it gives load through the engine's cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "api_internal.h"

typedef struct fixture {
    char dir[64];
    sto_db *db;
    api_ctx *ctx;
} fixture;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/hpo-apids-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &f->db), 0);
    api_options opt = {.data_dir = f->dir, .max_upload_bytes = 4096};
    assert_int_equal(api_ctx_new(f->db, &opt, &f->ctx), 0);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    api_ctx_free(f->ctx);
    sto_close(f->db);
    nftw(f->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* Entries of <dir>/datasets, joined with ',' in name order. */
static void list_datasets_dir(const fixture *f, char *out, size_t cap) {
    char path[128];
    snprintf(path, sizeof path, "%s/datasets", f->dir);
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, alphasort);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
            if (out[0]) strncat(out, ",", cap - strlen(out) - 1);
            strncat(out, names[i]->d_name, cap - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

static const char CSV[] = "a,b,label\n1,2,0\n2,3,1\n3,4,0\n4,5,1\n5,6,2\n";

static int piece(api_upload *u, const char *key, const char *filename, const char *text) {
    return api_upload_part(u, key, filename, text, 0, strlen(text));
}

static void test_upload(void **state) {
    fixture *f = *state;
    api_upload *u = NULL;
    api_response resp = {0};
    /* A csv in two chunks. */
    assert_int_equal(api_upload_begin(f->ctx, &u, &resp), 0);
    assert_int_equal(piece(u, "name", NULL, "five"), 0);
    assert_int_equal(piece(u, "format", NULL, "csv"), 0);
    assert_int_equal(piece(u, "label_column", NULL, "label"), 0);
    size_t half = sizeof CSV / 2;
    assert_int_equal(api_upload_part(u, "file", "five.csv", CSV, 0, half), 0);
    assert_int_equal(api_upload_part(u, "file", "five.csv", CSV + half, half, sizeof CSV - 1 - half), 0);
    api_upload_finish(f->ctx, u, &resp);
    assert_int_equal(resp.status, 201);
    json_t *j = json_loadb(resp.body, resp.body_len, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(j, "n_rows")), 5);
    assert_int_equal(json_integer_value(json_object_get(j, "n_classes")), 3);
    int64_t id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    api_response_clear(&resp);
    char listing[256], want[64];
    list_datasets_dir(f, listing, sizeof listing);
    snprintf(want, sizeof want, "%lld-five", (long long)id);
    assert_string_equal(listing, want);

    /* Over the cap (4096 bytes): refused at once, the temporary files go. */
    assert_int_equal(api_upload_begin(f->ctx, &u, &resp), 0);
    list_datasets_dir(f, listing, sizeof listing);
    assert_non_null(strstr(listing, ".upload-"));
    assert_int_equal(piece(u, "name", NULL, "big"), 0);
    char chunk[1000];
    memset(chunk, '1', sizeof chunk);
    int rc = 0;
    for (uint64_t off = 0; off < 5000 && rc == 0; off += sizeof chunk)
        rc = api_upload_part(u, "file", "big.csv", chunk, off, sizeof chunk);
    assert_int_equal(rc, HPO_ETOOLARGE);
    list_datasets_dir(f, listing, sizeof listing);
    assert_string_equal(listing, want);
    assert_int_equal(piece(u, "format", NULL, "csv"), HPO_ETOOLARGE); /* stays failed */
    api_upload_finish(f->ctx, u, &resp);
    assert_int_equal(resp.status, 413);
    api_response_clear(&resp);

    /* Abort (client gone) removes the folder; a bad file fails at finish. */
    assert_int_equal(api_upload_begin(f->ctx, &u, &resp), 0);
    assert_int_equal(piece(u, "x", "x.npy", "\x93NUMPY"), 0);
    api_upload_abort(u);
    list_datasets_dir(f, listing, sizeof listing);
    assert_string_equal(listing, want);
    assert_int_equal(api_upload_begin(f->ctx, &u, &resp), 0);
    assert_int_equal(piece(u, "name", NULL, "bad"), 0);
    assert_int_equal(piece(u, "format", NULL, "csv"), 0);
    assert_int_equal(piece(u, "label_column", NULL, "label"), 0);
    assert_int_equal(piece(u, "file", "bad.csv", "a,label\n1,0\nx,1\n"), 0);
    api_upload_finish(f->ctx, u, &resp);
    assert_int_equal(resp.status, 400);
    j = json_loadb(resp.body, resp.body_len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "field")), "file");
    const char *msg = json_string_value(json_object_get(e, "message"));
    assert_non_null(strstr(msg, "bad.csv: line 3"));
    assert_null(strstr(msg, ".upload-"));
    json_decref(j);
    api_response_clear(&resp);
    list_datasets_dir(f, listing, sizeof listing);
    assert_string_equal(listing, want);
}

/* The error of resp: status, code, field, and the message holding needle. */
static void expect_error(api_response *resp, int status, const char *code, const char *field,
                         const char *needle) {
    printf("  -> %d %.*s\n", resp->status, (int)resp->body_len, resp->body);
    assert_int_equal(resp->status, status);
    json_t *j = json_loadb(resp->body, resp->body_len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    assert_string_equal(json_string_value(json_object_get(e, "field")), field);
    const char *msg = json_string_value(json_object_get(e, "message"));
    assert_non_null(strstr(msg, needle));
    assert_null(strstr(msg, ".upload-")); /* no temporary path leaks */
    json_decref(j);
    api_response_clear(resp);
}

/* An IDX upload: x declares n images of 28x28 (only `body` bytes follow). */
static void upload_idx(fixture *f, const char *name, uint32_t n, size_t body, api_response *resp) {
    api_upload *u = NULL;
    assert_int_equal(api_upload_begin(f->ctx, &u, resp), 0);
    assert_int_equal(piece(u, "name", NULL, name), 0);
    assert_int_equal(piece(u, "format", NULL, "idx"), 0);
    unsigned char hx[16] = {0, 0, 8, 3, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8), (unsigned char)n, 0, 0, 0, 28, 0, 0, 0, 28};
    unsigned char hy[8] = {0, 0, 8, 1, hx[4], hx[5], hx[6], hx[7]};
    assert_int_equal(api_upload_part(u, "x", "images.idx", (const char *)hx, 0, 16), 0);
    char zeros[784] = {0};
    for (size_t off = 0; off < body; off += sizeof zeros)
        assert_int_equal(api_upload_part(u, "x", "images.idx", zeros, 16 + off,
                                         body - off < sizeof zeros ? body - off : sizeof zeros), 0);
    assert_int_equal(api_upload_part(u, "y", "labels.idx", (const char *)hy, 0, 8), 0);
    for (uint32_t i = 0; i < n && body; i++) /* classes 1 and 2: one class alone is refused */
        assert_int_equal(api_upload_part(u, "y", "labels.idx", i % 2 ? "\x02" : "\x01", 8 + i, 1), 0);
    api_upload_finish(f->ctx, u, resp);
}

/* The engine's dataset limits at upload: files declaring more than
 * --max-dataset-bytes get 413 naming the form field of the file; with no
 * load slot free within opt.upload_wait_seconds, 503 with Retry-After. */
static void test_upload_limits(void **state) {
    fixture *f = *state;
    api_response resp = {0};
    char listing[256];
    f->ctx->opt.max_upload_bytes = 1 << 20;
    printf(" images declaring 16 GiB in a 24-byte file\n");
    upload_idx(f, "bomb", 21913098, 0, &resp);
    expect_error(&resp, 413, "too_large", "x", "images.idx");
    list_datasets_dir(f, listing, sizeof listing);
    assert_string_equal(listing, "");

    eng_data_set_max_bytes((size_t)1 << 20);
    printf(" 1 MiB cap: 1400 images (1.1 MB)\n");
    upload_idx(f, "big", 1400, 0, &resp);
    expect_error(&resp, 413, "too_large", "x", "--max-dataset-bytes");
    printf(" 1 MiB cap: 10 images\n");
    upload_idx(f, "small", 10, 7840, &resp);
    assert_int_equal(resp.status, 201);
    api_response_clear(&resp);

    printf(" the only load slot is taken: 503 after the wait\n");
    eng_data_set_max_loads(1);
    f->ctx->opt.upload_wait_seconds = 0.1;
    assert_int_equal(eng_data_load_acquire(-1), 0);
    upload_idx(f, "waits", 10, 7840, &resp);
    assert_int_equal(resp.retry_after, 5);
    expect_error(&resp, 503, "unavailable", "", "retry later");
    list_datasets_dir(f, listing, sizeof listing);
    assert_null(strstr(listing, ".upload-"));
    assert_null(strstr(listing, "waits"));
    eng_data_load_release();
    upload_idx(f, "waits", 10, 7840, &resp);
    assert_int_equal(resp.status, 201);
    assert_int_equal(resp.retry_after, 0);
    api_response_clear(&resp);
    eng_data_set_max_loads(0);
    eng_data_set_max_bytes(0);
}

static void test_source(void **state) {
    fixture *f = *state;
    int64_t blobs, vec, img;
    assert_int_equal(sto_dataset_create(f->db, "blobs", "csv", "data.csv",
                                        "{\"task\":\"classification\",\"label_column\":\"label\"}", 5,
                                        10, &blobs),
                     0);
    assert_int_equal(sto_dataset_create(f->db, "vec", "npy", "[\"x.npy\",\"y.npy\"]",
                                        "{\"task\":\"regression\"}", 5, 10, &vec),
                     0);
    assert_int_equal(sto_dataset_create(f->db, "img", "idx", "[\"x.idx\",\"y.idx\"]", "{}", 5, 10, &img),
                     0);
    eng_data_source src;
    char *owned = NULL;
    hpo_error err = {{0}, {0}};
    char want[256];

    json_t *spec = json_pack("{s:s}", "name", "fashion-mnist");
    assert_int_equal(api_dataset_source(f->ctx, spec, NULL, &src, &owned, &err), 0);
    assert_int_equal(src.kind, ENG_SRC_BUILTIN);
    assert_string_equal(src.name, "fashion-mnist");
    assert_string_equal(src.part, "train");
    assert_ptr_equal(owned, src.name);
    free(owned);
    json_decref(spec);

    spec = json_pack("{s:s}", "name", "blobs");
    assert_int_equal(api_dataset_source(f->ctx, spec, "train", &src, &owned, &err), 0);
    assert_int_equal(src.kind, ENG_SRC_CSV);
    snprintf(want, sizeof want, "%s/datasets/%lld-blobs/data.csv", f->dir, (long long)blobs);
    assert_string_equal(src.x_path, want);
    assert_null(src.y_path);
    assert_string_equal(src.label_column, "label");
    assert_int_equal(src.classify, 1);
    /* The paths load through the engine's cache. */
    snprintf(want, sizeof want, "%s/datasets", f->dir);
    mkdir(want, 0755);
    snprintf(want, sizeof want, "%s/datasets/%lld-blobs", f->dir, (long long)blobs);
    assert_int_equal(mkdir(want, 0755), 0);
    FILE *fp = fopen(src.x_path, "w");
    assert_non_null(fp);
    fputs(CSV, fp);
    fclose(fp);
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_cache_get_source(&src, &ds, &err), 0);
    assert_int_equal(ds->n, 5);
    assert_int_equal(ds->n_classes, 3);
    eng_dataset_release(ds);
    eng_dataset_cache_clear();
    free(owned);
    json_decref(spec);

    spec = json_pack("{s:I}", "id", (json_int_t)vec);
    assert_int_equal(api_dataset_source(f->ctx, spec, NULL, &src, &owned, &err), 0);
    assert_int_equal(src.kind, ENG_SRC_NPY);
    snprintf(want, sizeof want, "%s/datasets/%lld-vec/x.npy", f->dir, (long long)vec);
    assert_string_equal(src.x_path, want);
    snprintf(want, sizeof want, "%s/datasets/%lld-vec/y.npy", f->dir, (long long)vec);
    assert_string_equal(src.y_path, want);
    assert_string_equal(src.name, "vec");
    assert_int_equal(src.scale_u8, 1);
    free(owned);
    json_decref(spec);

    spec = json_pack("{s:s, s:I}", "name", "img", "id", (json_int_t)img);
    assert_int_equal(api_dataset_source(f->ctx, spec, NULL, &src, &owned, &err), 0);
    assert_int_equal(src.kind, ENG_SRC_IDX);
    free(owned);
    json_decref(spec);

    /* Failures: nothing written, the field named. */
    static const struct {
        const char *json, *part;
        int rc;
        const char *field;
    } bad[] = {
        {"{\"name\": \"nope\"}", NULL, HPO_EINVAL, "dataset.name"},
        {"{\"id\": 999}", NULL, HPO_EINVAL, "dataset.id"},
        {"{\"id\": \"1\"}", NULL, HPO_EINVAL, "dataset.id"},
        {"{\"id\": 0}", NULL, HPO_EINVAL, "dataset.id"},
        {"{\"id\": 1, \"name\": \"vec\"}", NULL, HPO_EINVAL, "dataset.name"},
        {"{}", NULL, HPO_EINVAL, "dataset.name"},
        {"[1]", NULL, HPO_EINVAL, "dataset"},
        {"{\"name\": \"blobs\"}", "test", HPO_ENOTFOUND, "dataset"},
        {"{\"name\": \"blobs\"}", "valid", HPO_EINVAL, "dataset"},
    };
    for (size_t i = 0; i < HPO_ARRAY_LEN(bad); i++) {
        spec = json_loads(bad[i].json, 0, NULL);
        assert_non_null(spec);
        char *keep = (char *)&src;
        owned = keep;
        memset(&err, 0, sizeof err);
        int rc = api_dataset_source(f->ctx, spec, bad[i].part, &src, &owned, &err);
        if (rc != bad[i].rc || strcmp(err.field, bad[i].field) != 0)
            fail_msg("%s: rc %d field %s (%s)", bad[i].json, rc, err.field, err.message);
        assert_ptr_equal(owned, keep);
        assert_true(err.message[0] != '\0');
        json_decref(spec);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_upload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
