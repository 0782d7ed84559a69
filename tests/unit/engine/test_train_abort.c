/* test_train_abort.c - an epoch callback that cannot record its epoch (it
 * returns a negative code, e.g. HPO_ENOSPACE on a full disk) ends eng_train
 * with that code and leaves the previous epoch's checkpoint: a resume redoes
 * the epoch, so nothing the callback records has a hole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data.h"
#include "model.h"
#include "safetensors.h"
#include "train.h"

static eng_dataset *synth(size_t n) {
    int64_t shape[1] = {8};
    eng_dataset *ds = NULL;
    assert_int_equal(eng_dataset_new("synthetic", n, 1, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    ds->x_scale = 1.0f / 255.0f;
    ds->n_classes = 2;
    uint8_t *x = ds->x;
    for (size_t i = 0; i < n; i++) {
        ds->y_class[i] = (int32_t)(i % 2);
        for (int p = 0; p < 8; p++) x[i * 8 + p] = (uint8_t)((i % 2 ? 160 : 40) + (int)((i * 7 + p * 13) % 50));
    }
    return ds;
}

typedef struct recorder {
    int fail_at;  /* epoch whose recording fails (0: none) */
    int seen[16]; /* epochs recorded, in order */
    int n;
} recorder;

static int record(const eng_epoch_report *r, void *user) {
    recorder *rec = user;
    if (r->epoch == rec->fail_at) return HPO_ENOSPACE;
    if (rec->n < 16) rec->seen[rec->n++] = r->epoch;
    return 0;
}

/* The epoch stored in a checkpoint's metadata. */
static int checkpoint_epoch(const char *path) {
    eng_st_file *f = NULL;
    hpo_error err;
    assert_int_equal(eng_st_read_file(path, &f, &err), 0);
    const char *e = eng_st_meta(f, "epoch");
    assert_non_null(e);
    int epoch = atoi(e);
    eng_st_file_free(f);
    return epoch;
}

static void test_negative_callback_aborts_without_checkpoint(void **state) {
    (void)state;
    eng_dataset *ds = synth(256);
    eng_split tr, va;
    eng_split_spec spec = {.val_count = 64};
    hpo_error err;
    memset(&err, 0, sizeof err);
    assert_int_equal(eng_split_make(ds, &spec, &tr, &va, &err), 0);
    char dir[32];
    snprintf(dir, sizeof dir, "/tmp/hpo_abort_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char path[96];
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    json_t *tmpl = json_loads("{\"layers\":[{\"dense\":{\"units\":8,\"activation\":\"relu\"}},"
                              "{\"dense\":{\"units\":2,\"activation\":\"softmax\"}}]}",
                              0, NULL);
    assert_non_null(tmpl);
    int shape[3] = {8, 0, 0};
    eng_train_opts o;
    eng_train_opts_init(&o);
    o.epochs = 5;
    o.batch_size = 32;
    o.threads = 1;
    o.seed = 3;
    o.patience = -1;
    o.checkpoint_dir = dir;
    o.checkpoint_name = "run.safetensors";
    o.resume = 1;
    o.checkpoint_durable = 0;
    o.on_epoch = record;
    recorder rec = {.fail_at = 3};
    o.user = &rec;
    eng_model *m = NULL;
    assert_int_equal(eng_model_new(tmpl, NULL, 1, shape, 2, 5, &m, &err), 0);
    eng_train_result res;
    assert_int_equal(eng_train(m, &tr, &va, &o, &res, &err), HPO_ENOSPACE);
    assert_string_equal(err.field, "training");
    assert_int_equal(rec.n, 2);
    assert_int_equal(checkpoint_epoch(path), 2); /* epoch 3 was not checkpointed */
    eng_model_free(m);

    /* space again: the resume redoes epoch 3, and every epoch is recorded once */
    rec.fail_at = 0;
    assert_int_equal(eng_model_new(tmpl, NULL, 1, shape, 2, 5, &m, &err), 0);
    assert_int_equal(eng_train(m, &tr, &va, &o, &res, &err), 0);
    assert_int_equal(res.start_epoch, 2);
    assert_int_equal(res.epochs_run, 5);
    assert_int_equal(rec.n, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(rec.seen[i], i + 1);
    assert_int_equal(checkpoint_epoch(path), 5);
    eng_model_free(m);

    json_decref(tmpl);
    unlink(path);
    rmdir(dir);
    eng_split_clear(&tr);
    eng_split_clear(&va);
    eng_dataset_release(ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_negative_callback_aborts_without_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
