/* test_data.c - dataset loaders (IDX plain and gzipped, CSV, NPY), their
 * error messages, the size cap on what files declare and the load slots,
 * Fashion-MNIST, the cache under concurrent use, splits,
 * shuffle determinism, and the prefetching batcher against synchronous
 * gathering. Test files are written into a temporary directory. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "bf16.h"
#include "data.h"
#include "rng.h"

static char dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hpo_data_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    eng_dataset_cache_clear();
    return system(cmd) == 0 ? 0 : -1;
}

static const char *p(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *b, size_t n, int gz) {
    if (gz) {
        gzFile g = gzopen(path, "wb");
        assert_non_null(g);
        assert_int_equal(gzwrite(g, b, (unsigned)n), (int)n);
        gzclose(g);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b, 1, n, f), n);
        fclose(f);
    }
}

/* IDX ubyte file of the given dims; extra/missing bytes to break it. */
static void write_idx(const char *path, int type, int ndim, const uint32_t *dims,
                      const uint8_t *data, long delta, int gz) {
    uint8_t buf[8192];
    size_t n = 4, count = 1;
    buf[0] = 0, buf[1] = 0, buf[2] = (uint8_t)type, buf[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[n++] = (uint8_t)(dims[i] >> 24), buf[n++] = (uint8_t)(dims[i] >> 16);
        buf[n++] = (uint8_t)(dims[i] >> 8), buf[n++] = (uint8_t)dims[i];
        count *= dims[i];
    }
    memcpy(buf + n, data, count);
    n += count;
    write_bytes(path, buf, (size_t)((long)n + delta), gz);
}

/* IDX float file, f32 (type 0x0D) or f64 (0x0E), big-endian, of the
 * given dims and values. */
static void write_idx_float(const char *path, int type, int ndim, const uint32_t *dims, const double *vals,
                            int gz) {
    size_t count = 1, n = 4, es = type == 0x0E ? 8 : 4;
    for (int i = 0; i < ndim; i++) count *= dims[i];
    uint8_t *buf = malloc(4 + 4 * (size_t)ndim + es * count);
    buf[0] = 0, buf[1] = 0, buf[2] = (uint8_t)type, buf[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[n++] = (uint8_t)(dims[i] >> 24), buf[n++] = (uint8_t)(dims[i] >> 16);
        buf[n++] = (uint8_t)(dims[i] >> 8), buf[n++] = (uint8_t)dims[i];
    }
    for (size_t i = 0; i < count; i++) {
        uint64_t u = 0;
        float f = (float)vals[i];
        uint32_t u32;
        if (es == 8) memcpy(&u, &vals[i], 8);
        else memcpy(&u32, &f, 4), u = u32;
        for (size_t k = 0; k < es; k++) buf[n++] = (uint8_t)(u >> (8 * (es - 1 - k)));
    }
    write_bytes(path, buf, n, gz);
    free(buf);
}

static void expect_err(int rc, int want, const hpo_error *err, const char *needle) {
    printf("  -> %s: %s\n", hpo_errname(rc), err->message);
    assert_int_equal(rc, want);
    if (needle) assert_non_null(strstr(err->message, needle));
}

static void test_idx(void **state) {
    (void)state;
    uint8_t img[5 * 3 * 2], lab[5] = {0, 3, 1, 2, 3};
    for (int i = 0; i < 30; i++) img[i] = (uint8_t)(i * 8);
    uint32_t di[3] = {5, 3, 2}, dl[1] = {5};
    for (int gz = 0; gz < 2; gz++) {
        write_idx(p("i"), 0x08, 3, di, img, 0, gz);
        write_idx(p("l"), 0x08, 1, dl, lab, 0, !gz);
        eng_dataset *ds;
        hpo_error err = {0};
        assert_int_equal(eng_load_idx(p("i"), p("l"), &ds, &err), 0);
        assert_int_equal(ds->n, 5);
        assert_int_equal(ds->rank, 3);
        assert_int_equal(ds->shape[0], 3);
        assert_int_equal(ds->shape[1], 2);
        assert_int_equal(ds->shape[2], 1);
        assert_int_equal(ds->sample_size, 6);
        assert_int_equal(ds->x_type, ENG_DATA_U8);
        assert_int_equal(ds->n_classes, 4);
        assert_memory_equal(ds->x, img, 30);
        assert_int_equal(ds->y_class[1], 3);
        eng_dataset_release(ds);
    }
    eng_dataset *ds = (eng_dataset *)0x1;
    hpo_error err = {0};
    write_idx(p("l"), 0x08, 1, dl, lab, 0, 1);
    printf(" bad magic\n");
    uint8_t junk[40] = {0x1f, 0x00, 0x08, 0x03};
    write_bytes(p("i"), junk, sizeof junk, 0);
    expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "magic");
    printf(" bad type\n");
    write_idx(p("i"), 0x07, 3, di, img, 0, 0);
    expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "type");
    printf(" truncated data (gz)\n");
    write_idx(p("i"), 0x08, 3, di, img, -7, 1);
    expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "truncated");
    printf(" truncated header\n");
    write_idx(p("i"), 0x08, 3, di, img, -30 - 5, 0);
    expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "truncated");
    printf(" trailing bytes\n");
    uint8_t big[40] = {0};
    memcpy(big, img, 30);
    write_idx(p("i"), 0x08, 3, di, big, 3, 0);
    expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "trailing");
    printf(" count mismatch\n");
    uint32_t d4[3] = {4, 3, 2};
    write_idx(p("i"), 0x08, 3, d4, img, 0, 0);
    expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "labels");
    printf(" zero dimension\n");
    uint32_t d0[3] = {5, 0, 2};
    write_idx(p("i"), 0x08, 3, d0, img, 0, 0);
    expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "0");
    printf(" missing file\n");
    expect_err(eng_load_idx(p("nope"), p("l"), &ds, &err), HPO_ENOTFOUND, &err, NULL);
    /* float images must be finite as float32, as in NPY and CSV: a NaN in a
     * validation row made an objective silently wrong */
    double fv[30];
    for (int i = 0; i < 30; i++) fv[i] = i / 8.0;
    write_idx_float(p("i"), 0x0D, 3, di, fv, 0);
    assert_int_equal(eng_load_idx(p("i"), p("l"), &ds, &err), 0);
    assert_true(((float *)ds->x)[29] == 29.0f / 8);
    eng_dataset_release(ds);
    ds = (eng_dataset *)0x1;
    const double bad[] = {NAN, INFINITY, -INFINITY, 1e300};
    for (int k = 0; k < 4; k++) {
        printf(" %s image value %g\n", k < 3 ? "f32" : "f64 (inf as float32)", bad[k]);
        fv[13] = bad[k];
        write_idx_float(p("i"), k < 3 ? 0x0D : 0x0E, 3, di, fv, k == 1);
        expect_err(eng_load_idx(p("i"), p("l"), &ds, &err), HPO_EFORMAT, &err, "value 13 (sample 2)");
        assert_non_null(strstr(err.message, "finite"));
    }
    printf(" corrupt gzip stream\n");
    write_idx(p("i"), 0x08, 3, di, img, 0, 1);
    FILE *f = fopen(p("i"), "r+b");
    fseek(f, 12, SEEK_SET);
    fputc(0x55, f), fputc(0xaa, f), fputc(0x55, f);
    fclose(f);
    int rc = eng_load_idx(p("i"), p("l"), &ds, &err);
    printf("  -> %s: %s\n", hpo_errname(rc), err.message);
    assert_true(rc == HPO_EFORMAT);
    assert_ptr_equal(ds, (eng_dataset *)0x1); /* never written on failure */
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s), 0); }

static void test_csv(void **state) {
    (void)state;
    eng_dataset *ds;
    hpo_error err = {0};
    write_text(p("a.csv"), "x1, x2 ,\"label\",x3\r\n1,2,0,3\r\n\r\n4.5,-5e-1,2,6\n7,8,1,1e30\n");
    assert_int_equal(eng_load_csv(p("a.csv"), "label", 1, &ds, &err), 0);
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->sample_size, 3);
    assert_int_equal(ds->n_classes, 3);
    const float *x = ds->x;
    assert_true(x[3] == 4.5f && x[4] == -0.5f && x[5] == 6.f && x[8] == 1e30f);
    assert_int_equal(ds->y_class[1], 2);
    eng_dataset_release(ds);
    assert_int_equal(eng_load_csv(p("a.csv"), "x3", 0, &ds, &err), 0); /* regression */
    assert_int_equal(ds->y_type, ENG_DATA_Y_TARGET);
    assert_true(ds->y_target[1] == 6.f);
    eng_dataset_release(ds);

    /* a UTF-8 byte order mark (Excel's "CSV UTF-8") is not part of the first column's name */
    write_text(p("bom.csv"), "\xEF\xBB\xBFy,a\n0,1.5\n1,2.5\n");
    assert_int_equal(eng_load_csv(p("bom.csv"), "y", 1, &ds, &err), 0);
    assert_true(ds->n == 2 && ds->n_classes == 2 && ((float *)ds->x)[1] == 2.5f);
    eng_dataset_release(ds);

    /* named classes (iris.csv's species): sorted names, class k the k-th */
    write_text(p("n.csv"), "sl,sw,species\n5.1,3.5,setosa\n7.0,3.2,versicolor\n6.3,3.3,\"virginica\"\n"
                           "4.9,3.0,setosa\n5.0,2.0,10\n");
    assert_int_equal(eng_load_csv(p("n.csv"), "species", 1, &ds, &err), 0);
    assert_int_equal(ds->n_classes, 4);
    assert_non_null(ds->class_names);
    const char *want[] = {"10", "setosa", "versicolor", "virginica"}; /* byte order; "10" is a name here */
    for (int k = 0; k < 4; k++) assert_string_equal(ds->class_names[k], want[k]);
    int32_t want_y[] = {1, 2, 3, 1, 0};
    for (int i = 0; i < 5; i++) assert_int_equal(ds->y_class[i], want_y[i]);
    eng_dataset_release(ds);
    assert_int_equal(eng_load_csv(p("a.csv"), "label", 1, &ds, &err), 0); /* class numbers: no names */
    assert_null(ds->class_names);
    eng_dataset_release(ds);
    /* a column with more distinct names than classes can be */
    FILE *big = fopen(p("many.csv"), "w");
    fprintf(big, "x,y\n");
    for (int i = 0; i <= ENG_CSV_MAX_CLASSES; i++) fprintf(big, "1,c%d\n", i);
    fclose(big);
    ds = (eng_dataset *)0x1;
    printf(" too many named classes\n");
    expect_err(eng_load_csv(p("many.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "distinct labels");

    ds = (eng_dataset *)0x1;
    printf(" short row\n");
    write_text(p("b.csv"), "a,b,y\n1,2,0\n3,4\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "line 3");
    printf(" non-numeric field\n");
    write_text(p("b.csv"), "a,b,y\n1,2,0\n\n3,abc,1\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "line 4, column 2");
    printf(" empty field\n");
    write_text(p("b.csv"), "a,b,y\n1,,0\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "line 2");
    printf(" empty class label\n");
    write_text(p("b.csv"), "a,b,y\n1,2,0\n3,4,\n5,6,2\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "line 3, column 3");
    assert_non_null(strstr(err.message, "label is empty"));
    write_text(p("b.csv"), "a,b,y\n1,2,setosa\n3,4,\"\"\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "line 3, column 3");
    printf(" C hex float cells (strtod reads them, numpy does not)\n");
    write_text(p("b.csv"), "a,b,y\n1,0x10,0\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "line 2, column 2");
    write_text(p("b.csv"), "a,b,y\n1,2,0X1p-2\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 0, &ds, &err), HPO_EFORMAT, &err, "line 2, column 3");
    printf(" fractional class label\n");
    write_text(p("b.csv"), "a,b,y\n1,2,0.5\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "line 2");
    printf(" missing label column\n");
    write_text(p("b.csv"), "a,b,y\n1,2,0\n");
    expect_err(eng_load_csv(p("b.csv"), "target", 1, &ds, &err), HPO_EFORMAT, &err, "target");
    /* values that are not finite (as float32) make every trial diverge: refused */
    const char *not_finite[] = {"a,b,y\n1,2,0\n3,inf,1\n", "a,b,y\n1,nan,0\n", "a,b,y\n1,2,0\n1e39,2,1\n",
                                "a,b,y\n1,2,-inf\n"};
    for (int k = 0; k < 4; k++) {
        write_text(p("b.csv"), not_finite[k]);
        expect_err(eng_load_csv(p("b.csv"), "y", k < 3, &ds, &err), HPO_EFORMAT, &err, "finite");
    }
    printf(" no rows\n");
    write_text(p("b.csv"), "a,b,y\n\n");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "no data");
    printf(" empty file\n");
    write_text(p("b.csv"), "");
    expect_err(eng_load_csv(p("b.csv"), "y", 1, &ds, &err), HPO_EFORMAT, &err, "empty");
    assert_ptr_equal(ds, (eng_dataset *)0x1);
}

static void test_npy(void **state) {
    (void)state;
    hpo_error err = {0};
    int64_t sx[3] = {4, 2, 3}, sy[1] = {4};
    const char *descrs[] = {"|u1", "<f4", "<f8", "<i4", "<i8"};
    for (size_t d = 0; d < 5; d++) {
        unsigned char raw[24 * 8];
        for (int i = 0; i < 24; i++) {
            double v = i * 3 + 1;
            switch (d) {
            case 0: raw[i] = (uint8_t)v; break;
            case 1: { float f = (float)v; memcpy(raw + 4 * i, &f, 4); break; }
            case 2: memcpy(raw + 8 * i, &v, 8); break;
            case 3: { int32_t k = (int32_t)v; memcpy(raw + 4 * i, &k, 4); break; }
            case 4: { int64_t k = (int64_t)v; memcpy(raw + 8 * i, &k, 8); break; }
            }
        }
        assert_int_equal(eng_npy_write(p("x.npy"), descrs[d], 3, sx, raw, &err), 0);
        /* labels in the same dtype family: integers -> classes, floats -> targets */
        unsigned char ry[4 * 8];
        for (int i = 0; i < 4; i++) {
            double v = i % 3;
            switch (d) {
            case 0: ry[i] = (uint8_t)v; break;
            case 1: { float f = (float)v; memcpy(ry + 4 * i, &f, 4); break; }
            case 2: memcpy(ry + 8 * i, &v, 8); break;
            case 3: { int32_t k = (int32_t)v; memcpy(ry + 4 * i, &k, 4); break; }
            case 4: { int64_t k = (int64_t)v; memcpy(ry + 8 * i, &k, 8); break; }
            }
        }
        assert_int_equal(eng_npy_write(p("y.npy"), descrs[d], 1, sy, ry, &err), 0);
        eng_dataset *ds;
        assert_int_equal(eng_load_npy(p("x.npy"), p("y.npy"), 1, &ds, &err), 0);
        assert_int_equal(ds->n, 4);
        assert_int_equal(ds->rank, 2);
        assert_int_equal(ds->shape[1], 3);
        for (int i = 0; i < 24; i++) {
            double v = ds->x_type == ENG_DATA_U8 ? ((uint8_t *)ds->x)[i] : ((float *)ds->x)[i];
            assert_true(v == i * 3 + 1);
        }
        int yfloat = d == 1 || d == 2;
        assert_int_equal(ds->y_type, yfloat ? ENG_DATA_Y_TARGET : ENG_DATA_Y_CLASS);
        for (int i = 0; i < 4; i++) {
            if (yfloat) assert_true(ds->y_target[i] == i % 3);
            else assert_int_equal(ds->y_class[i], i % 3);
        }
        if (d == 0) assert_true(fabsf(ds->x_scale - 1.0f / 255) < 1e-9f);
        eng_dataset_release(ds);
        /* eng_npy_read round trip */
        void *data;
        int rank;
        int64_t shape[8];
        assert_int_equal(eng_npy_read(p("x.npy"), 0, &data, &rank, shape, &err), 0);
        assert_int_equal(rank, 3);
        assert_true(shape[0] == 4 && shape[1] == 2 && shape[2] == 3);
        assert_true(((float *)data)[23] == 70.f);
        free(data);
        printf("  npy %s round trip ok\n", descrs[d]);
    }
    /* a v2.0 header and python-style spacing */
    {
        const char *h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        size_t hl = strlen(h) + 1;
        unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, (unsigned char)hl, 0, 0, 0};
        float v[2] = {1.5f, -2.f};
        FILE *f = fopen(p("v2.npy"), "wb");
        fwrite(pre, 1, 12, f), fwrite(h, 1, hl - 1, f), fputc('\n', f), fwrite(v, 4, 2, f);
        fclose(f);
        void *data;
        int rank;
        int64_t shape[8];
        assert_int_equal(eng_npy_read(p("v2.npy"), 0, &data, &rank, shape, &err), 0);
        assert_true(rank == 1 && shape[0] == 2 && ((float *)data)[1] == -2.f);
        free(data);
    }
    /* errors */
    eng_dataset *ds = (eng_dataset *)0x1;
    int64_t s5[1] = {5};
    int32_t y5[5] = {0};
    assert_int_equal(eng_npy_write(p("y5.npy"), "<i4", 1, s5, y5, &err), 0);
    printf(" label count mismatch\n");
    expect_err(eng_load_npy(p("x.npy"), p("y5.npy"), 0, &ds, &err), HPO_EFORMAT, &err, "match");
    printf(" big-endian dtype\n");
    {
        const char *h = "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n";
        unsigned char be[128] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)strlen(h), 0};
        memcpy(be + 10, h, strlen(h));
        write_bytes(p("be.npy"), be, 10 + strlen(h) + 8, 0);
    }
    expect_err(eng_load_npy(p("be.npy"), p("y5.npy"), 0, &ds, &err), HPO_EFORMAT, &err, ">f4");
    printf(" values that are not finite\n");
    {
        int64_t s22[2] = {2, 2}, s2[1] = {2};
        float xf[4] = {1, 2, NAN, 4}, xok[4] = {1, 2, 3, 4};
        int32_t yc[2] = {0, 1};
        double yt[2] = {0.5, 1e300}; /* beyond float32: inf once stored */
        assert_int_equal(eng_npy_write(p("nx.npy"), "<f4", 2, s22, xf, &err), 0);
        assert_int_equal(eng_npy_write(p("ny.npy"), "<i4", 1, s2, yc, &err), 0);
        expect_err(eng_load_npy(p("nx.npy"), p("ny.npy"), 0, &ds, &err), HPO_EFORMAT, &err, "sample 1");
        assert_int_equal(eng_npy_write(p("nx.npy"), "<f4", 2, s22, xok, &err), 0);
        assert_int_equal(eng_npy_write(p("nt.npy"), "<f8", 1, s2, yt, &err), 0);
        expect_err(eng_load_npy(p("nx.npy"), p("nt.npy"), 0, &ds, &err), HPO_EFORMAT, &err, "finite");
    }
    printf(" truncated data\n");
    assert_int_equal(truncate(p("x.npy"), 128 + 20), 0);
    expect_err(eng_load_npy(p("x.npy"), p("y.npy"), 0, &ds, &err), HPO_EFORMAT, &err, "truncated");
    printf(" not npy\n");
    write_text(p("no.npy"), "hello world, this is not numpy");
    expect_err(eng_load_npy(p("no.npy"), p("y.npy"), 0, &ds, &err), HPO_EFORMAT, &err, "magic");
    assert_ptr_equal(ds, (eng_dataset *)0x1);
}

static int have_fmnist(void) {
    const char *d = getenv("HPO_FASHION_MNIST_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz",
             d ? d : "/usr/share/datasets/fashion-mnist");
    return access(path, R_OK) == 0;
}

static void *cache_thread(void *arg) {
    eng_dataset **out = arg;
    hpo_error err = {0};
    if (eng_dataset_cache_get("fashion-mnist", "test", out, &err) < 0) *out = NULL;
    return NULL;
}

static void test_fashion_mnist_and_cache(void **state) {
    (void)state;
    if (!have_fmnist()) {
        printf("  Fashion-MNIST files not installed: skipped\n");
        skip();
    }
    hpo_error err = {0};
    eng_dataset *tr, *te[4];
    double t0 = hpo_monotonic();
    assert_int_equal(eng_dataset_cache_get("fashion-mnist", "train", &tr, &err), 0);
    double t1 = hpo_monotonic();
    /* four threads ask for the test set at once: loaded once, same object */
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, cache_thread, &te[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) assert_ptr_equal(te[i], te[0]);
    printf("  fashion-mnist train loaded in %.3f s (gz IDX -> uint8), test %.3f s\n", t1 - t0,
           hpo_monotonic() - t1);
    assert_int_equal(tr->n, 60000);
    assert_int_equal(te[0]->n, 10000);
    assert_int_equal(tr->sample_size, 784);
    assert_int_equal(tr->n_classes, 10);
    int counts[10] = {0};
    for (size_t i = 0; i < tr->n; i++) {
        assert_true(tr->y_class[i] >= 0 && tr->y_class[i] < 10);
        counts[tr->y_class[i]]++;
    }
    for (int c = 0; c < 10; c++) assert_int_equal(counts[c], 6000);
    for (size_t i = 0; i < te[0]->n; i++) assert_true(te[0]->y_class[i] >= 0 && te[0]->y_class[i] < 10);
    assert_int_equal(eng_dataset_cache_size(), 2);
    eng_dataset *again;
    assert_int_equal(eng_dataset_cache_get("fashion-mnist", "train", &again, &err), 0);
    assert_ptr_equal(again, tr);
    assert_int_equal(tr->refcount_, 3); /* cache + tr + again */
    eng_dataset_release(again);
    for (int i = 0; i < 4; i++) eng_dataset_release(te[i]);
    /* clearing the cache leaves our reference alive */
    eng_dataset_cache_clear();
    assert_int_equal(eng_dataset_cache_size(), 0);
    assert_int_equal(tr->refcount_, 1);
    assert_int_equal(tr->y_class[59999] >= 0, 1);
    eng_dataset_release(tr);
    assert_int_equal(eng_dataset_cache_get("mnist-digits", NULL, &again, &err), HPO_ENOTFOUND);
}

/* The cache reaches every loader through its table: each source kind loads
 * its own files; the same source (by another path to the same file) is one
 * entry, a source that loads differently (CSV targets instead of classes)
 * another; a kind the table lacks fails cleanly and caches nothing. */
static void test_cache_sources(void **state) {
    (void)state;
    hpo_error err = {0};
    eng_dataset_cache_clear();
    uint8_t img[4 * 2 * 2], lab[4] = {0, 1, 2, 1};
    for (int i = 0; i < 16; i++) img[i] = (uint8_t)i;
    uint32_t di[3] = {4, 2, 2}, dl[1] = {4};
    write_idx(p("ci"), 0x08, 3, di, img, 0, 0);
    write_idx(p("cl"), 0x08, 1, dl, lab, 0, 1);
    write_text(p("c.csv"), "a,b,label\n1,2,0\n3,4,1\n5,6,1\n");
    float x[3 * 2] = {1, 2, 3, 4, 5, 6};
    int32_t y[3] = {0, 1, 1};
    int64_t sx[2] = {3, 2}, sy[1] = {3};
    assert_int_equal(eng_npy_write(p("cx.npy"), "<f4", 2, sx, x, &err), 0);
    assert_int_equal(eng_npy_write(p("cy.npy"), "<i4", 1, sy, y, &err), 0);
    char ci[600], cl[600], csv[600], dotted[600], cx[600], cy[600]; /* p() reuses 4 buffers */
    snprintf(ci, sizeof ci, "%s/ci", dir);
    snprintf(cl, sizeof cl, "%s/cl", dir);
    snprintf(csv, sizeof csv, "%s/c.csv", dir);
    snprintf(dotted, sizeof dotted, "%s/./c.csv", dir);
    snprintf(cx, sizeof cx, "%s/cx.npy", dir);
    snprintf(cy, sizeof cy, "%s/cy.npy", dir);

    eng_data_source src[] = {
        {.kind = ENG_SRC_IDX, .x_path = ci, .y_path = cl},
        {.kind = ENG_SRC_CSV, .x_path = csv, .label_column = "label", .classify = 1},
        {.kind = ENG_SRC_CSV, .x_path = dotted, .label_column = "label", .classify = 1},
        {.kind = ENG_SRC_CSV, .x_path = csv, .label_column = "label", .classify = 0},
        {.kind = ENG_SRC_NPY, .x_path = cx, .y_path = cy},
    };
    size_t want_n[] = {4, 3, 3, 3, 3}, want_size[] = {1, 2, 2, 3, 4};
    eng_dataset *ds[5];
    for (int i = 0; i < 5; i++) {
        int rc = eng_dataset_cache_get_source(&src[i], &ds[i], &err);
        if (rc < 0) printf("  source %d: %s\n", i, err.message);
        assert_int_equal(rc, 0);
        assert_int_equal(ds[i]->n, want_n[i]);
        assert_int_equal(eng_dataset_cache_size(), want_size[i]);
    }
    assert_int_equal(ds[0]->x_type, ENG_DATA_U8);
    assert_int_equal(ds[1]->y_type, ENG_DATA_Y_CLASS);
    assert_ptr_equal(ds[2], ds[1]);
    assert_int_equal(ds[3]->y_type, ENG_DATA_Y_TARGET);
    assert_int_equal(ds[4]->x_type, ENG_DATA_F32);
    assert_int_equal(ds[4]->sample_size, 2);

    eng_data_source bad = {.kind = (eng_source_kind)(ENG_SRC_NPY + 1), .x_path = csv};
    eng_dataset *none = (eng_dataset *)0x1;
    expect_err(eng_dataset_cache_get_source(&bad, &none, &err), HPO_EINVAL, &err, "kind");
    assert_ptr_equal(none, (eng_dataset *)0x1);
    bad.kind = (eng_source_kind)-1;
    expect_err(eng_dataset_cache_get_source(&bad, &none, &err), HPO_EINVAL, &err, "kind");
    assert_int_equal(eng_dataset_cache_size(), 4);
    for (int i = 0; i < 5; i++) eng_dataset_release(ds[i]);

    /* a deleted upload's folder drops its entries, and only those (a
     * folder whose name merely starts the same keeps its own) */
    char sub[600], subcsv[700], other[700];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(subcsv, sizeof subcsv, "%s/c.csv", sub);
    snprintf(other, sizeof other, "%s/su", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    write_text(subcsv, "a,label\n1,0\n2,1\n");
    eng_data_source in_sub = {.kind = ENG_SRC_CSV, .x_path = subcsv, .label_column = "label", .classify = 1};
    eng_dataset *held;
    assert_int_equal(eng_dataset_cache_get_source(&in_sub, &held, &err), 0);
    assert_int_equal(eng_dataset_cache_size(), 5);
    assert_int_equal(eng_dataset_cache_drop_under(other), 0);
    assert_int_equal(eng_dataset_cache_drop_under(sub), 1);
    assert_int_equal(eng_dataset_cache_size(), 4);
    assert_int_equal(held->refcount_, 1); /* ours lives on */
    eng_dataset_release(held);
    assert_int_equal(eng_dataset_cache_drop_under(dir), 4);
    assert_int_equal(eng_dataset_cache_size(), 0);
    unlink(subcsv);
    rmdir(sub);
}

/* An IDX file of the given header and `body` bytes of (i * 13) % 256,
 * however many bytes the header declares. */
static void write_idx_body(const char *path, int type, int ndim, const uint32_t *dims, size_t body,
                           int gz) {
    uint8_t *buf = malloc(4 + 4 * (size_t)ndim + body);
    size_t n = 4;
    buf[0] = 0, buf[1] = 0, buf[2] = (uint8_t)type, buf[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[n++] = (uint8_t)(dims[i] >> 24), buf[n++] = (uint8_t)(dims[i] >> 16);
        buf[n++] = (uint8_t)(dims[i] >> 8), buf[n++] = (uint8_t)dims[i];
    }
    for (size_t i = 0; i < body; i++) buf[n++] = (uint8_t)(i * 13);
    write_bytes(path, buf, n, gz);
    free(buf);
}

/* An .npy v1.0 header declaring `descr` and `shape` (text), then `body` zero bytes. */
static void write_npy_head(const char *path, const char *descr, const char *shape, size_t body) {
    char h[256];
    int hl = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
                      shape);
    size_t pad = (64 - (10 + (size_t)hl + 1) % 64) % 64, total = (size_t)hl + pad + 1;
    uint8_t *buf = calloc(1, 10 + total + body);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(total & 0xff), buf[9] = (uint8_t)(total >> 8);
    memcpy(buf + 10, h, (size_t)hl);
    memset(buf + 10 + hl, ' ', pad);
    buf[10 + total - 1] = '\n';
    write_bytes(path, buf, 10 + total + body, 0);
    free(buf);
}

static void expect_cap(int rc, const hpo_error *err, const char *file) {
    expect_err(rc, HPO_ETOOLARGE, err, "--max-dataset-bytes");
    assert_string_equal(err->field, "dataset");
    assert_non_null(strstr(err->message, file));
}

/* The size cap (--max-dataset-bytes): what a file declares is checked
 * before anything of that size is allocated; a failure names the file. */
static void test_size_cap(void **state) {
    (void)state;
    eng_dataset *ds = (eng_dataset *)0x1;
    hpo_error err = {0};
    eng_data_set_max_bytes(0);
    size_t def = eng_data_max_bytes();
    printf("  default cap %zu bytes, %d load(s) at once\n", def, eng_data_max_loads());
    assert_true(def >= ((size_t)256 << 20) && def <= ((size_t)4 << 30)); /* Fashion-MNIST fits */
    assert_true(eng_data_max_loads() >= 1 && eng_data_max_loads() <= 4);

    /* The defect: a 50-byte IDX file declaring ~16 GiB (under the old
     * 16 GiB per-file limit) made the loader allocate what it declared. */
    printf(" IDX declaring 16 GiB, default cap\n");
    uint32_t huge[3] = {21913098, 28, 28}, hl[1] = {21913098};
    write_idx_body(p("i"), 0x08, 3, huge, 32, 1);
    write_idx_body(p("l"), 0x08, 1, hl, 32, 0);
    expect_cap(eng_load_idx(p("i"), p("l"), &ds, &err), &err, p("i"));

    eng_data_set_max_bytes((size_t)1 << 20);
    assert_int_equal(eng_data_max_bytes(), (size_t)1 << 20);
    printf(" 1 MiB cap: IDX u8 images of 1.5 MiB (gz)\n");
    uint32_t di[3] = {2000, 28, 28}, dl[1] = {2000};
    write_idx_body(p("i"), 0x08, 3, di, 2000 * 784, 1);
    write_idx_body(p("l"), 0x08, 1, dl, 2000, 1);
    expect_cap(eng_load_idx(p("i"), p("l"), &ds, &err), &err, p("i"));
    printf(" 1 MiB cap: f64 IDX of 1.2 MB decoded (0.6 MB as f32)\n");
    uint32_t df[2] = {100, 1600}, dl100[1] = {100};
    write_idx_body(p("i"), 0x0E, 2, df, 0, 0);
    write_idx_body(p("l"), 0x08, 1, dl100, 100, 0);
    expect_cap(eng_load_idx(p("i"), p("l"), &ds, &err), &err, p("i"));
    printf(" 1 MiB cap: IDX i32 labels of 1.2 MB for 300 KB of images\n");
    uint32_t dlab[1] = {300000}, dsm[2] = {300000, 1};
    write_idx_body(p("i"), 0x08, 2, dsm, 0, 0);
    write_idx_body(p("l"), 0x0C, 1, dlab, 0, 0);
    expect_cap(eng_load_idx(p("i"), p("l"), &ds, &err), &err, p("l"));
    printf(" 1 MiB cap: the same in memory, under it as files (u8 x, i32 labels: 5 B/row)\n");
    uint32_t dm[2] = {300000, 1}, dlm[1] = {300000};
    write_idx_body(p("i"), 0x08, 2, dm, 300000, 0);
    write_idx_body(p("l"), 0x08, 1, dlm, 300000, 0);
    expect_cap(eng_load_idx(p("i"), p("l"), &ds, &err), &err, p("i"));
    printf(" 1 MiB cap: a fitting IDX f32 dataset still loads\n");
    uint32_t dok[2] = {1000, 16}, dlok[1] = {1000};
    double *vals = malloc(1000 * 16 * sizeof *vals);
    for (int i = 0; i < 1000 * 16; i++) vals[i] = i * 0.25;
    write_idx_float(p("i"), 0x0D, 2, dok, vals, 1);
    free(vals);
    uint8_t lab[1000];
    for (int i = 0; i < 1000; i++) lab[i] = (uint8_t)(i % 7);
    write_idx(p("l"), 0x08, 1, dlok, lab, 0, 0);
    assert_int_equal(eng_load_idx(p("i"), p("l"), &ds, &err), 0);
    assert_int_equal(ds->n, 1000);
    assert_int_equal(ds->n_classes, 7);
    /* converted through the 64 KiB buffer: element 5000 of the f32 data */
    assert_true(((float *)ds->x)[5000] == 1250.0f);
    eng_dataset_release(ds);
    ds = (eng_dataset *)0x1;

    printf(" NPY declaring 8 GiB\n");
    write_npy_head(p("x.npy"), "<f4", "(1073741824, 2)", 64);
    int32_t y5[5] = {0, 1, 0, 1, 0};
    int64_t s5[1] = {5};
    assert_int_equal(eng_npy_write(p("y5.npy"), "<i4", 1, s5, y5, &err), 0);
    expect_cap(eng_load_npy(p("x.npy"), p("y5.npy"), 0, &ds, &err), &err, p("x.npy"));
    void *arr = (void *)0x1;
    int rank;
    int64_t shape[8];
    expect_cap(eng_npy_read(p("x.npy"), 0, &arr, &rank, shape, &err), &err, p("x.npy"));
    printf(" NPY |u1 of 600 KB: as u8 it fits, as f32 (2.4 MB) it does not\n");
    write_npy_head(p("u.npy"), "|u1", "(300000, 2)", 600000);
    assert_int_equal(eng_npy_read(p("u.npy"), 1, &arr, &rank, shape, &err), 0);
    free(arr);
    arr = (void *)0x1;
    expect_cap(eng_npy_read(p("u.npy"), 0, &arr, &rank, shape, &err), &err, p("u.npy"));
    assert_ptr_equal(arr, (void *)0x1);
    printf(" NPY <i8 labels of 1.6 MB for 200 KB of samples\n");
    write_npy_head(p("x.npy"), "|u1", "(200000,)", 200000);
    write_npy_head(p("y.npy"), "<i8", "(200000,)", 0);
    expect_cap(eng_load_npy(p("x.npy"), p("y.npy"), 0, &ds, &err), &err, p("y.npy"));

    printf(" CSV growing past the cap (12 bytes a row, 90000 rows)\n");
    FILE *f = fopen(p("big.csv"), "w");
    fputs("a,b,label\n", f);
    for (int i = 0; i < 90000; i++) fprintf(f, "%d,%d,%d\n", i % 10, i % 3, i % 2);
    fclose(f);
    expect_cap(eng_load_csv(p("big.csv"), "label", 1, &ds, &err), &err, p("big.csv"));
    assert_non_null(strstr(err.message, "line 87383")); /* 87381 rows fit in 1 MiB */
    printf(" CSV under the cap: 80000 rows load, x adopted without a copy\n");
    f = fopen(p("ok.csv"), "w");
    fputs("a,b,label\n", f);
    for (int i = 0; i < 80000; i++) fprintf(f, "%d,%d,%d\n", i % 10, i % 3, i % 2);
    fclose(f);
    assert_int_equal(eng_load_csv(p("ok.csv"), "label", 1, &ds, &err), 0);
    assert_int_equal(ds->n, 80000);
    assert_true(((float *)ds->x)[2 * 79999] == 79999 % 10 && ((float *)ds->x)[2 * 79999 + 1] == 79999 % 3);
    assert_int_equal(ds->y_class[79999], 1);
    eng_dataset_release(ds);
    ds = (eng_dataset *)0x1;
    printf(" CSV with a line over 16 MiB\n");
    f = fopen(p("long.csv"), "w");
    fputs("a,label\n", f);
    for (int i = 0; i < (17 << 20) / 8; i++) fputs("11111111", f);
    fputs(",1\n", f);
    fclose(f);
    expect_err(eng_load_csv(p("long.csv"), "label", 1, &ds, &err), HPO_ETOOLARGE, &err, "line 2");
    printf(" CSV with a NUL byte\n");
    write_bytes(p("nul.csv"), "a,label\n1,0\n2\0,1\n", 17, 0);
    expect_err(eng_load_csv(p("nul.csv"), "label", 1, &ds, &err), HPO_EFORMAT, &err, "line 3");

    int64_t big[1] = {1 << 20};
    assert_int_equal(eng_dataset_new("big", 2, 1, big, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds),
                     HPO_ETOOLARGE);
    assert_ptr_equal(ds, (eng_dataset *)0x1);
    eng_data_set_max_bytes(0);
    assert_int_equal(eng_data_max_bytes(), def);
}

typedef struct slot_arg {
    const char *path;
    eng_dataset *ds;
    int rc;
    atomic_int done;
} slot_arg;

static void *slot_thread(void *arg) {
    slot_arg *a = arg;
    eng_data_source src = {.kind = ENG_SRC_CSV, .x_path = a->path, .label_column = "label", .classify = 1};
    hpo_error err = {0};
    a->rc = eng_dataset_cache_get_source(&src, &a->ds, &err);
    atomic_store_explicit(&a->done, 1, memory_order_release);
    return NULL;
}

/* Load slots (--max-dataset-loads): a load waits for a free slot; a
 * bounded wait times out. */
static void test_load_slots(void **state) {
    (void)state;
    eng_data_set_max_loads(1);
    assert_int_equal(eng_data_max_loads(), 1);
    assert_int_equal(eng_data_load_acquire(-1), 0);
    double t0 = hpo_monotonic();
    assert_int_equal(eng_data_load_acquire(0.05), HPO_ETIMEOUT);
    assert_true(hpo_monotonic() - t0 >= 0.04);
    write_text(p("s.csv"), "a,label\n1,0\n2,1\n");
    slot_arg a = {.path = p("s.csv")};
    pthread_t th;
    pthread_create(&th, NULL, slot_thread, &a);
    usleep(100 * 1000);
    assert_int_equal(atomic_load_explicit(&a.done, memory_order_acquire), 0); /* waits for our slot */
    assert_int_equal(eng_dataset_cache_size(), 0);
    eng_data_load_release();
    pthread_join(th, NULL);
    assert_int_equal(a.rc, 0);
    assert_int_equal(a.ds->n, 2);
    eng_dataset_release(a.ds);
    /* the slot came back: a second one is free again */
    assert_int_equal(eng_data_load_acquire(0), 0);
    eng_data_set_max_loads(2); /* a raised limit lets a waiter in */
    assert_int_equal(eng_data_load_acquire(0), 0);
    eng_data_load_release();
    eng_data_load_release();
    eng_data_set_max_loads(0);
    eng_dataset_cache_clear();
}

/* A synthetic classification dataset: x[i][k] = (i * 7 + k) % 256, y = i % 10. */
static eng_dataset *synth(size_t n, int ss) {
    int64_t shape[1] = {ss};
    eng_dataset *ds;
    assert_int_equal(eng_dataset_new("synth", n, 1, shape, ENG_DATA_U8, ENG_DATA_Y_CLASS, 1, &ds), 0);
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < ss; k++) ((uint8_t *)ds->x)[i * (size_t)ss + (size_t)k] = (uint8_t)((i * 7 + (size_t)k) % 256);
        ds->y_class[i] = (int32_t)(i % 10);
    }
    ds->x_scale = 1.0f / 255;
    ds->n_classes = 10;
    return ds;
}

static void test_splits(void **state) {
    (void)state;
    eng_dataset *ds = synth(1000, 4);
    hpo_error err = {0};
    eng_split tr, va;
    eng_split_spec sp = {.val_count = 100};
    assert_int_equal(eng_split_make(ds, &sp, &tr, &va, &err), 0);
    assert_int_equal(tr.n, 900);
    assert_int_equal(va.n, 100);
    assert_int_equal(tr.idx[899], 899);
    assert_int_equal(va.idx[0], 900); /* Keras: validation = the tail */
    eng_split all;
    assert_int_equal(eng_split_concat(&tr, &va, &all), 0);
    assert_int_equal(all.n, 1000);
    eng_split_clear(&all);
    eng_split_clear(&tr), eng_split_clear(&va);
    sp = (eng_split_spec){.val_fraction = 0.2, .limit = 50, .val_limit = 30};
    assert_int_equal(eng_split_make(ds, &sp, &tr, &va, &err), 0);
    assert_int_equal(tr.n, 50);
    assert_int_equal(va.n, 30);
    assert_int_equal(va.idx[0], 800);
    eng_split_clear(&tr), eng_split_clear(&va);
    /* seeded shuffle: deterministic, disjoint, covers everything */
    sp = (eng_split_spec){.val_count = 300, .mode = ENG_SPLIT_SHUFFLE, .seed = 5};
    eng_split tr2, va2;
    assert_int_equal(eng_split_make(ds, &sp, &tr, &va, &err), 0);
    assert_int_equal(eng_split_make(ds, &sp, &tr2, &va2, &err), 0);
    assert_memory_equal(tr.idx, tr2.idx, tr.n * 4);
    assert_memory_equal(va.idx, va2.idx, va.n * 4);
    char seen[1000] = {0};
    for (size_t i = 0; i < tr.n; i++) seen[tr.idx[i]]++;
    for (size_t i = 0; i < va.n; i++) seen[va.idx[i]]++;
    for (int i = 0; i < 1000; i++) assert_int_equal(seen[i], 1);
    int identity = 1;
    for (size_t i = 0; i < tr.n; i++) identity &= tr.idx[i] == i;
    assert_false(identity);
    eng_split_clear(&tr), eng_split_clear(&va), eng_split_clear(&tr2), eng_split_clear(&va2);
    sp = (eng_split_spec){.val_count = 1000};
    assert_int_equal(eng_split_make(ds, &sp, &tr, &va, &err), HPO_EINVAL);
    sp = (eng_split_spec){.val_fraction = 1.5};
    assert_int_equal(eng_split_make(ds, &sp, &tr, &va, &err), HPO_EINVAL);
    assert_int_equal(ds->refcount_, 1); /* every split released its reference */
    eng_dataset_release(ds);
}

/* Collect one epoch of a batcher: x as f32 or bf16 bytes, labels. */
static size_t run_epoch(eng_batcher *b, uint64_t epoch, unsigned char *x, int32_t *y, size_t xe,
                        size_t ss) {
    assert_int_equal(eng_batcher_start_epoch(b, epoch), 0);
    eng_batch bt;
    size_t rows = 0, k = 0;
    int rc;
    while ((rc = eng_batcher_next(b, &bt)) == 1) {
        assert_int_equal(bt.index, k++);
        memcpy(x + rows * ss * xe, bt.x, bt.n * ss * xe);
        memcpy(y + rows, bt.y_class, bt.n * 4);
        rows += bt.n;
        if ((k & 3) == 0) usleep(100); /* let the producer run ahead */
    }
    assert_int_equal(rc, 0);
    assert_int_equal(eng_batcher_next(b, &bt), 0); /* stays at the end */
    return rows;
}

static void test_batcher(void **state) {
    (void)state;
    enum { N = 1003, SS = 17, BS = 64 };
    eng_dataset *ds = synth(N, SS);
    eng_split all;
    hpo_error err = {0};
    assert_int_equal(eng_split_all(ds, &all), 0);
    for (int xt = 0; xt < 2; xt++) {
        size_t xe = xt ? 2 : 4;
        unsigned char *xa = malloc(N * SS * xe), *xb = malloc(N * SS * xe),
                      *xs = malloc(N * SS * xe);
        int32_t *ya = malloc(N * 4), *yb = malloc(N * 4), *ys = malloc(N * 4);
        eng_batcher_opts o = {.batch_size = BS, .shuffle = 1, .seed = 11, .x_type = xt};
        eng_batcher *sync, *pre;
        assert_int_equal(eng_batcher_new(&all, &o, &sync, &err), 0);
        o.prefetch = 1;
        assert_int_equal(eng_batcher_new(&all, &o, &pre, &err), 0);
        assert_int_equal(eng_batcher_n_batches(pre), (N + BS - 1) / BS);
        for (uint64_t e = 0; e < 3; e++) {
            assert_int_equal(run_epoch(sync, e, xa, ya, xe, SS), N);
            assert_int_equal(run_epoch(pre, e, xb, yb, xe, SS), N);
            assert_memory_equal(xa, xb, N * SS * xe); /* prefetch == synchronous */
            assert_memory_equal(ya, yb, N * 4);
            /* and both equal eng_split_gather over the permuted split */
            eng_split perm = all;
            hpo_rng r;
            uint32_t *idx = malloc(N * 4);
            memcpy(idx, all.idx, N * 4);
            hpo_rng_derive(&r, 11, e, 0);
            hpo_rng_shuffle_u32(&r, idx, N);
            perm.idx = idx;
            assert_int_equal(eng_split_gather(&perm, 0, N, (eng_batch_xtype)xt, xs, ys, NULL), 0);
            assert_memory_equal(xa, xs, N * SS * xe);
            assert_memory_equal(ya, ys, N * 4);
            free(idx);
            /* labels match the rows the x came from */
            for (int i = 0; i < N; i++) {
                float x0 = xt ? eng_bf16_to_f32(((uint16_t *)xa)[i * SS]) : ((float *)xa)[i * SS];
                int row = -1;
                for (int c = 0; c < N && row < 0; c++)
                    if (ya[i] == c % 10 && fabsf(x0 - (float)((c * 7) % 256) / 255) < 4e-3f &&
                        ((c * 7) % 256) == (int)lrintf(x0 * 255)) row = c;
                assert_true(row >= 0);
            }
        }
        /* the same epoch number gives the same order; different epochs differ */
        run_epoch(pre, 1, xa, ya, xe, SS);
        run_epoch(pre, 1, xb, yb, xe, SS);
        assert_memory_equal(ya, yb, N * 4);
        run_epoch(pre, 2, xb, yb, xe, SS);
        assert_true(memcmp(ya, yb, N * 4) != 0);
        /* abandon an epoch halfway, start another: no stale batch */
        assert_int_equal(eng_batcher_start_epoch(pre, 0), 0);
        eng_batch bt;
        for (int i = 0; i < 5; i++) assert_int_equal(eng_batcher_next(pre, &bt), 1);
        assert_int_equal(run_epoch(pre, 1, xb, yb, xe, SS), N);
        assert_memory_equal(ya, yb, N * 4);
        /* next_into copies */
        assert_int_equal(eng_batcher_start_epoch(pre, 1), 0);
        size_t n;
        assert_int_equal(eng_batcher_next_into(pre, xb, yb, NULL, &n), 1);
        assert_int_equal(n, BS);
        assert_memory_equal(yb, ya, BS * 4);
        eng_batcher_free(sync);
        eng_batcher_free(pre); /* mid-epoch: joins the producer cleanly */
        free(xa), free(xb), free(xs), free(ya), free(yb), free(ys);
    }
    /* drop_last, no shuffle */
    eng_batcher_opts o = {.batch_size = 100, .drop_last = 1, .prefetch = 1};
    eng_batcher *b;
    assert_int_equal(eng_batcher_new(&all, &o, &b, &err), 0);
    assert_int_equal(eng_batcher_n_batches(b), 10);
    assert_int_equal(eng_batcher_start_epoch(b, 0), 0);
    eng_batch bt;
    size_t cnt = 0;
    while (eng_batcher_next(b, &bt) == 1) {
        assert_int_equal(bt.n, 100);
        assert_int_equal(bt.y_class[0], (int)((bt.index * 100) % 10));
        assert_true(((const float *)bt.x)[1] == (float)((bt.index * 100 * 7 + 1) % 256) * (1.0f / 255));
        cnt++;
    }
    assert_int_equal(cnt, 10);
    eng_batcher_free(b);
    eng_split_clear(&all);
    assert_int_equal(ds->refcount_, 1);
    eng_dataset_release(ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx),
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_npy),
        cmocka_unit_test(test_fashion_mnist_and_cache),
        cmocka_unit_test(test_cache_sources),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_load_slots),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_batcher),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
