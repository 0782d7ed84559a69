/* test_safetensors.c - round trip through a file and a buffer, metadata,
 * malformed files rejected with HPO_EFORMAT (each validation rule), writer
 * argument checks, and (optionally) python3's reading of our file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "safetensors.h"

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hpo_st_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_round_trip(void **state) {
    (void)state;
    float w[6] = {1, 2, 3, 4, 5, -6.5f};
    uint16_t h[3] = {0x3f80, 0x4000, 0xc040};
    int32_t iv[2] = {-7, 1 << 30};
    uint8_t u[5] = {0, 1, 2, 254, 255};
    int64_t l[1] = {-1234567890123LL};
    double d[2] = {3.25, -1e300};
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s5[1] = {5}, s1[1] = {1}, s0[1] = {0};
    hpo_error err = {0};
    eng_st_writer *wr = eng_st_writer_new();
    assert_int_equal(eng_st_writer_add(wr, "dense_1/kernel", ENG_ST_F32, 2, s23, w, &err), 0);
    assert_int_equal(eng_st_writer_add(wr, "b16", ENG_ST_BF16, 1, s3, h, &err), 0);
    assert_int_equal(eng_st_writer_add(wr, "ints", ENG_ST_I32, 1, s2, iv, &err), 0);
    assert_int_equal(eng_st_writer_add(wr, "bytes", ENG_ST_U8, 1, s5, u, &err), 0);
    assert_int_equal(eng_st_writer_add(wr, "empty", ENG_ST_F32, 1, s0, NULL, &err), 0);
    assert_int_equal(eng_st_writer_add(wr, "step", ENG_ST_I64, 1, s1, l, &err), 0);
    assert_int_equal(eng_st_writer_add(wr, "scalar_f64", ENG_ST_F64, 1, s2, d, &err), 0);
    assert_int_equal(eng_st_writer_add(wr, "rank0", ENG_ST_F32, 0, NULL, w, &err), 0);
    /* writer argument checks */
    assert_int_equal(eng_st_writer_add(wr, "ints", ENG_ST_I32, 1, s2, iv, &err), HPO_EINVAL);
    assert_int_equal(eng_st_writer_add(wr, "__metadata__", ENG_ST_I32, 1, s2, iv, &err),
                     HPO_EINVAL);
    int64_t neg[1] = {-2};
    assert_int_equal(eng_st_writer_add(wr, "neg", ENG_ST_I32, 1, neg, iv, &err), HPO_ETOOLARGE);
    assert_int_equal(eng_st_writer_meta(wr, "format", "pt"), 0);
    assert_int_equal(eng_st_writer_meta(wr, "epoch", "3"), 0);
    assert_int_equal(eng_st_writer_meta(wr, "epoch", "4"), 0); /* replaces */

    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    assert_int_equal(eng_st_write_file(wr, path, &err), 0);
    void *buf;
    size_t len;
    assert_int_equal(eng_st_write_buffer(wr, &buf, &len, &err), 0);
    /* file and buffer have the same bytes; data section 8-aligned */
    FILE *fp = fopen(path, "rb");
    char *fb = malloc(len + 1);
    assert_int_equal(fread(fb, 1, len + 1, fp), len);
    fclose(fp);
    assert_memory_equal(fb, buf, len);
    /* the same bytes without fsync (eng_st_writer_set_durable), over the old file */
    eng_st_writer_set_durable(wr, 0);
    assert_int_equal(eng_st_write_file(wr, path, &err), 0);
    eng_st_writer_set_durable(wr, 1);
    fp = fopen(path, "rb");
    assert_int_equal(fread(fb, 1, len + 1, fp), len);
    fclose(fp);
    assert_memory_equal(fb, buf, len);
    uint64_t hl;
    memcpy(&hl, buf, 8);
    assert_int_equal(hl % 8, 0);
    free(fb);

    for (int pass = 0; pass < 2; pass++) {
        eng_st_file *f;
        if (pass == 0) assert_int_equal(eng_st_read_file(path, &f, &err), 0);
        else assert_int_equal(eng_st_read_buffer(buf, len, &f, &err), 0);
        assert_int_equal(eng_st_count(f), 8);
        assert_string_equal(eng_st_get(f, 0)->name, "dense_1/kernel"); /* file order */
        const eng_st_tensor *t = eng_st_find(f, "dense_1/kernel");
        assert_non_null(t);
        assert_int_equal(t->dtype, ENG_ST_F32);
        assert_int_equal(t->rank, 2);
        assert_int_equal(t->shape[0], 2);
        assert_int_equal(t->shape[1], 3);
        assert_int_equal(t->nbytes, sizeof w);
        assert_memory_equal(t->data, w, sizeof w);
        assert_int_equal((uintptr_t)t->data % 4, 0);
        assert_memory_equal(eng_st_find(f, "b16")->data, h, sizeof h);
        assert_memory_equal(eng_st_find(f, "ints")->data, iv, sizeof iv);
        assert_memory_equal(eng_st_find(f, "bytes")->data, u, sizeof u);
        assert_memory_equal(eng_st_find(f, "step")->data, l, sizeof l);
        assert_memory_equal(eng_st_find(f, "scalar_f64")->data, d, sizeof d);
        assert_int_equal(eng_st_find(f, "empty")->nbytes, 0);
        assert_int_equal(eng_st_find(f, "rank0")->rank, 0);
        assert_int_equal(eng_st_find(f, "rank0")->nbytes, 4);
        assert_null(eng_st_find(f, "nope"));
        assert_string_equal(eng_st_meta(f, "format"), "pt");
        assert_string_equal(eng_st_meta(f, "epoch"), "4");
        assert_int_equal(eng_st_meta_count(f), 2);
        eng_st_file_free(f);
    }
    /* eng_st_open: the header now, each tensor read from disk into its place */
    eng_st_file *f;
    assert_int_equal(eng_st_open(path, &f, &err), 0);
    assert_int_equal(eng_st_count(f), 8);
    const eng_st_tensor *t = eng_st_find(f, "dense_1/kernel");
    assert_null(t->data);
    float w2[6];
    assert_int_equal(eng_st_read_tensor(f, t, w2, &err), 0);
    assert_memory_equal(w2, w, sizeof w);
    int32_t iv2[sizeof iv / sizeof *iv];
    assert_int_equal(eng_st_read_tensor(f, eng_st_find(f, "ints"), iv2, &err), 0);
    assert_memory_equal(iv2, iv, sizeof iv);
    double d2[2];
    assert_int_equal(eng_st_read_tensor(f, eng_st_find(f, "scalar_f64"), d2, &err), 0);
    assert_memory_equal(d2, d, sizeof d);
    assert_int_equal(eng_st_read_tensor(f, eng_st_find(f, "empty"), NULL, &err), 0);
    assert_string_equal(eng_st_meta(f, "epoch"), "4");
    eng_st_file_free(f);
    free(buf);
    eng_st_writer_free(wr);
    /* no temp files left behind */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 1", tmpdir);
    assert_int_equal(system(cmd), 0);
}

/* Build a file image from a header string and data size. */
static void *image(const char *hdr, size_t data_len, size_t *len) {
    size_t hl = strlen(hdr);
    unsigned char *b = calloc(1, 8 + hl + data_len + 1);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(b + 8, hdr, hl);
    *len = 8 + hl + data_len;
    return b;
}

static void expect_bad(const char *hdr, size_t data_len, const char *what) {
    size_t len;
    void *b = image(hdr, data_len, &len);
    eng_st_file *f = (eng_st_file *)0x1;
    hpo_error err = {0};
    int rc = eng_st_read_buffer(b, len, &f, &err);
    printf("  %-28s -> %s: %s\n", what, hpo_errname(rc), err.message);
    assert_int_equal(rc, HPO_EFORMAT);
    assert_ptr_equal(f, (eng_st_file *)0x1); /* out-param untouched */
    assert_true(err.message[0] != 0);
    /* the same from a file, whole or header only */
    char path[512];
    snprintf(path, sizeof path, "%s/bad.safetensors", tmpdir);
    FILE *fp = fopen(path, "wb");
    assert_int_equal(fwrite(b, 1, len, fp), len);
    fclose(fp);
    assert_int_equal(eng_st_read_file(path, &f, &err), HPO_EFORMAT);
    assert_int_equal(eng_st_open(path, &f, &err), HPO_EFORMAT);
    assert_ptr_equal(f, (eng_st_file *)0x1);
    unlink(path);
    free(b);
}

static void test_malformed(void **state) {
    (void)state;
    /* a valid baseline first */
    size_t len;
    void *b = image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &len);
    eng_st_file *f;
    hpo_error err = {0};
    assert_int_equal(eng_st_read_buffer(b, len, &f, &err), 0);
    eng_st_file_free(f);
    free(b);

    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "bad JSON");
    expect_bad("[1,2]", 0, "not an object");
    expect_bad("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "size mismatch");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "out of bounds");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "end before begin");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "negative dim");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "hole");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "trailing data");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "duplicate name");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "no offsets");
    expect_bad("{\"__metadata__\":{\"k\":3}}", 0, "metadata not string");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
               "\"data_offsets\":[0,8]}}", 8, "shape overflow");
    /* header length beyond the file, too short files, huge length */
    unsigned char tiny[4] = {1, 2, 3, 4};
    assert_int_equal(eng_st_read_buffer(tiny, 4, &f, &err), HPO_EFORMAT);
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(eng_st_read_buffer(big, 16, &f, &err), HPO_EFORMAT);
    unsigned char over[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(eng_st_read_buffer(over, 16, &f, &err), HPO_EFORMAT);
    /* a truncated real file */
    char path[512];
    snprintf(path, sizeof path, "%s/t.safetensors", tmpdir);
    float w[64] = {0};
    int64_t s[1] = {64};
    eng_st_writer *wr = eng_st_writer_new();
    assert_int_equal(eng_st_writer_add(wr, "w", ENG_ST_F32, 1, s, w, &err), 0);
    assert_int_equal(eng_st_write_file(wr, path, &err), 0);
    eng_st_writer_free(wr);
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(eng_st_read_file(path, &f, &err), HPO_EFORMAT);
    printf("  %-28s -> %s\n", "truncated file", err.message);
    assert_int_equal(eng_st_open(path, &f, &err), HPO_EFORMAT);
    /* under a long folder, the message keeps the path's end: which trial's
     * file (it kept the first 60 bytes, the data dir's, and cut the rest) */
    char deep[480], longer[512];
    snprintf(deep, sizeof deep, "%s/%0200d", tmpdir, 0);
    assert_int_equal(mkdir(deep, 0755), 0);
    snprintf(longer, sizeof longer, "%s/trial-7.safetensors", deep);
    assert_int_equal(rename(path, longer), 0);
    assert_int_equal(eng_st_open(longer, &f, &err), HPO_EFORMAT);
    printf("  %-28s -> %.60s...\n", "a long path", err.message);
    assert_non_null(strstr(err.message, "/trial-7.safetensors: "));
    assert_int_equal(strncmp(err.message, "...", 3), 0);
    assert_int_equal(eng_st_open("/nonexistent/x.safetensors", &f, &err), HPO_ENOTFOUND);
    assert_int_equal(eng_st_read_file("/nonexistent/x.safetensors", &f, &err), HPO_ENOTFOUND);
}

/* Optional: python3 with numpy parses our file (the format by hand, no
 * safetensors package needed). */
static void test_python_reads(void **state) {
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0 ||
        system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
        printf("  python3 with numpy not available: skipped\n");
        return;
    }
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/py.safetensors", tmpdir);
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t s[2] = {2, 3};
    hpo_error err = {0};
    eng_st_writer *wr = eng_st_writer_new();
    assert_int_equal(eng_st_writer_add(wr, "w", ENG_ST_F32, 2, s, w, &err), 0);
    eng_st_writer_meta(wr, "k", "v");
    assert_int_equal(eng_st_write_file(wr, path, &err), 0);
    eng_st_writer_free(wr);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import json,struct,numpy as np\n"
             "b=open('%s','rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n])\n"
             "t=h['w']; s,e=t['data_offsets']; a=np.frombuffer(b[8+n+s:8+n+e],'<f4').reshape(t['shape'])\n"
             "assert h['__metadata__']=={'k':'v'} and a.tolist()==[[1,2,3],[4,5,6]], a\n"
             "print('  python3/numpy read it:', a.tolist())\"",
             path);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_python_reads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
