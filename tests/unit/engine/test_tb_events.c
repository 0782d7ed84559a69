/* test_tb_events.c - TensorBoard event files (engine/tb_events.h): CRC-32C
 * against RFC 3720's test vectors and a bitwise reference at every length
 * to 1 KiB, the masked CRC, the exact bytes of a file's records (framing,
 * both CRCs, the hand-encoded Event/Summary protobuf), values not finite
 * as float32 left out, an epoch report's tags, and the file name and open
 * failures. */
#include <dirent.h>
#include <sys/stat.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tb_events.h"

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hpo_tb_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Bit by bit, reflected polynomial 0x82f63b78 (Castagnoli). */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static void test_crc32c_vectors(void **state) {
    (void)state;
    uint8_t buf[48];
    /* RFC 3720, appendix B.4 */
    memset(buf, 0, 32);
    assert_int_equal(eng_crc32c(buf, 32), 0x8a9136aau);
    memset(buf, 0xff, 32);
    assert_int_equal(eng_crc32c(buf, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    assert_int_equal(eng_crc32c(buf, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    assert_int_equal(eng_crc32c(buf, 32), 0x113fdb5cu);
    static const uint8_t read_pdu[48] = {0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
                                         0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(eng_crc32c(read_pdu, 48), 0xd9963a56u);
    assert_int_equal(eng_crc32c("123456789", 9), 0xe3069283u);
    assert_int_equal(eng_crc32c("", 0), 0);
}

static void test_crc32c_lengths(void **state) {
    (void)state;
    uint8_t buf[1024 + 7];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof buf; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    /* every length and a few misalignments: ISA-L's vector paths */
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 1024; n += off ? 61 : 1)
            assert_int_equal(eng_crc32c(buf + off, n), crc32c_bitwise(buf + off, n));
}

static void test_masked_crc(void **state) {
    (void)state;
    uint8_t data[5] = {1, 2, 3, 4, 5};
    uint32_t c = crc32c_bitwise(data, 5);
    uint32_t want = ((c >> 15) | (c << 17)) + 0xa282ead8u;
    assert_int_equal(eng_tb_masked_crc(data, 5), want);
    /* "123456789": 0xe3069283 rotated right by 15 is 0x2507c60d, + delta */
    assert_int_equal(eng_tb_masked_crc("123456789", 9), (uint32_t)(0x2507c60du + 0xa282ead8u));
}

/* Reads the only event file of dir into *buf; returns its size. */
static size_t read_only_file(const char *dir, uint8_t **buf, char *name, size_t cap) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(name, cap, "%s", e->d_name);
        found++;
    }
    closedir(d);
    assert_int_equal(found, 1);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    *buf = malloc(1 << 16);
    size_t n = fread(*buf, 1, 1 << 16, f);
    fclose(f);
    return n;
}

static uint64_t le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Checks the record at *p (framing and both CRCs) and returns its data. */
static const uint8_t *record(const uint8_t **p, const uint8_t *end, size_t *n) {
    assert_true(end - *p >= 16);
    *n = (size_t)le(*p, 8);
    assert_int_equal(le(*p + 8, 4), eng_tb_masked_crc(*p, 8));
    const uint8_t *data = *p + 12;
    assert_true((size_t)(end - data) >= *n + 4);
    assert_int_equal(le(data + *n, 4), eng_tb_masked_crc(data, *n));
    *p = data + *n + 4;
    return data;
}

static void test_file_bytes(void **state) {
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/bytes", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    hpo_error err = {{0}, {0}};
    eng_tb_writer *w = NULL;
    assert_int_equal(eng_tb_open(dir, &w, &err), 0);
    /* wall_time 1.5, step 3, "a" = 1.0; NaN and Inf are left out, and so
     * are finite doubles beyond float32's range (inf as float32) */
    eng_tb_scalar v[] = {{"a", 1.0}, {"nan", NAN}, {"inf", INFINITY}, {"big", 9e76}, {"small", -3.5e38}};
    assert_int_equal(eng_tb_write_scalars(w, 3, 1.5, v, 5, &err), 0);
    /* nothing finite: no record */
    eng_tb_scalar none[] = {{"x", NAN}, {"y", 1e39}};
    assert_int_equal(eng_tb_write_scalars(w, 4, 2.0, none, 2, &err), 0);
    /* step 300 takes a two-byte varint; two values in one summary */
    eng_tb_scalar two[] = {{"train/loss", 0.25}, {"val/loss", -2.0}};
    assert_int_equal(eng_tb_write_scalars(w, 300, 2.0, two, 2, &err), 0);
    eng_tb_close(w);

    uint8_t *buf;
    char name[256];
    size_t len = read_only_file(dir, &buf, name, sizeof name);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    long long secs = 0;
    char rest[256] = "";
    assert_int_equal(sscanf(name, "events.out.tfevents.%lld.%255s", &secs, rest), 2);
    assert_true(secs > 1600000000LL);
    assert_true(strlen(rest) > 0);
    if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == strlen(host))
        assert_string_equal(rest, host);

    const uint8_t *p = buf, *end = buf + len;
    size_t n;
    /* 1: {wall_time, file_version "brain.Event:2"} */
    const uint8_t *d = record(&p, end, &n);
    assert_int_equal(n, 9 + 2 + 13);
    assert_int_equal(d[0], 0x09);
    uint64_t bits = le(d + 1, 8);
    double wt;
    memcpy(&wt, &bits, 8);
    assert_true(fabs(wt - (double)secs) < 2.0);
    assert_int_equal(d[9], 0x1a);
    assert_int_equal(d[10], 13);
    assert_memory_equal(d + 11, "brain.Event:2", 13);
    /* 2: the exact bytes */
    static const uint8_t ev2[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, /* wall_time 1.5 */
                                  0x10, 0x03,                          /* step 3 */
                                  0x2a, 0x0a,                          /* summary, 10 bytes */
                                  0x0a, 0x08,                          /* value, 8 bytes */
                                  0x0a, 0x01, 'a',                     /* tag "a" */
                                  0x15, 0x00, 0x00, 0x80, 0x3f};       /* simple_value 1.0f */
    d = record(&p, end, &n);
    assert_int_equal(n, sizeof ev2);
    assert_memory_equal(d, ev2, sizeof ev2);
    /* 3: step 300 = ac 02; two values */
    static const uint8_t ev3[] = {0x09, 0, 0, 0, 0, 0, 0, 0x00, 0x40, /* 2.0 */
                                  0x10, 0xac, 0x02,
                                  0x2a, 0x24,
                                  0x0a, 0x11, 0x0a, 0x0a, 't', 'r', 'a', 'i', 'n', '/', 'l', 'o', 's', 's',
                                  0x15, 0x00, 0x00, 0x80, 0x3e, /* 0.25f */
                                  0x0a, 0x0f, 0x0a, 0x08, 'v', 'a', 'l', '/', 'l', 'o', 's', 's',
                                  0x15, 0x00, 0x00, 0x00, 0xc0}; /* -2.0f */
    d = record(&p, end, &n);
    assert_int_equal(n, sizeof ev3);
    assert_memory_equal(d, ev3, sizeof ev3);
    assert_ptr_equal(p, end);
    free(buf);
}

/* Finds tag in a Summary-bearing Event; its float value, or NAN. */
static float find_tag(const uint8_t *d, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t i = 0; i + t + 5 <= n; i++)
        if (d[i] == 0x0a && d[i + 1] == t && memcmp(d + i + 2, tag, t) == 0 && d[i + 2 + t] == 0x15) {
            float f;
            uint32_t bits = (uint32_t)le(d + i + 3 + t, 4);
            memcpy(&f, &bits, 4);
            return f;
        }
    return NAN;
}

static void test_epoch_tags(void **state) {
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/epoch", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    hpo_error err = {{0}, {0}};
    eng_tb_writer *w = NULL;
    assert_int_equal(eng_tb_open(dir, &w, &err), 0);
    eng_epoch_report r = {.epoch = 2, .epochs = 5, .has_val = 1, .seconds = 1.25, .samples_per_s = 4000, .lr = 0.01};
    r.train = (eng_metrics){.loss = 0.5, .accuracy = 0.75, .mse = 0.1, .mae = 0.2};
    r.val = (eng_metrics){.loss = 0.625, .accuracy = 0.5, .mse = 0.3, .mae = 0.4};
    assert_int_equal(eng_tb_write_epoch(w, &r, 1, &err), 0); /* classification */
    r.epoch = 3;
    r.has_val = 0;
    assert_int_equal(eng_tb_write_epoch(w, &r, 0, &err), 0); /* regression, no validation */
    eng_tb_close(w);
    uint8_t *buf;
    char name[256];
    size_t len = read_only_file(dir, &buf, name, sizeof name), n;
    const uint8_t *p = buf, *end = buf + len;
    record(&p, end, &n);
    const uint8_t *d = record(&p, end, &n);
    assert_int_equal(d[9], 0x10);
    assert_int_equal(d[10], 2); /* step = epoch */
    assert_true(find_tag(d, n, "train/loss") == 0.5f);
    assert_true(find_tag(d, n, "train/accuracy") == 0.75f);
    assert_true(find_tag(d, n, "val/loss") == 0.625f);
    assert_true(find_tag(d, n, "val/accuracy") == 0.5f);
    assert_true(find_tag(d, n, "train/learning_rate") == 0.01f);
    assert_true(find_tag(d, n, "perf/epoch_seconds") == 1.25f);
    assert_true(find_tag(d, n, "perf/samples_per_s") == 4000.0f);
    assert_true(isnan(find_tag(d, n, "train/mse")));
    d = record(&p, end, &n);
    assert_int_equal(d[10], 3);
    assert_true(find_tag(d, n, "train/mse") == 0.1f);
    assert_true(find_tag(d, n, "train/mae") == 0.2f);
    assert_true(isnan(find_tag(d, n, "train/accuracy")));
    assert_true(isnan(find_tag(d, n, "val/loss")));
    assert_ptr_equal(p, end);
    free(buf);
}

static void test_new_file_per_open(void **state) {
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/reopen", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    hpo_error err = {{0}, {0}};
    eng_tb_writer *a = NULL, *b = NULL, *c = NULL;
    /* three opens, likely within one second: three files (.1, .2 appended) */
    assert_int_equal(eng_tb_open(dir, &a, &err), 0);
    assert_int_equal(eng_tb_open(dir, &b, &err), 0);
    assert_int_equal(eng_tb_open(dir, &c, &err), 0);
    assert_string_not_equal(eng_tb_path(a), eng_tb_path(b));
    assert_string_not_equal(eng_tb_path(b), eng_tb_path(c));
    assert_string_not_equal(eng_tb_path(a), eng_tb_path(c));
    assert_true(access(eng_tb_path(a), F_OK) == 0 && access(eng_tb_path(c), F_OK) == 0);
    eng_tb_close(a);
    eng_tb_close(b);
    eng_tb_close(c);
    eng_tb_close(NULL);
}

static void test_open_fails(void **state) {
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/missing/run", tmpdir);
    hpo_error err = {{0}, {0}};
    eng_tb_writer *w = NULL;
    assert_int_equal(eng_tb_open(dir, &w, &err), HPO_EIO);
    assert_null(w);
    assert_non_null(strstr(err.message, "missing/run/events.out.tfevents."));
    /* a path over PATH_MAX is refused, not cut */
    char *longdir = malloc(5000);
    memset(longdir, 'a', 4999);
    longdir[4999] = '\0';
    assert_int_equal(eng_tb_open(longdir, &w, &err), HPO_EINVAL);
    free(longdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_lengths),
        cmocka_unit_test(test_masked_crc),
        cmocka_unit_test(test_file_bytes),
        cmocka_unit_test(test_epoch_tags),
        cmocka_unit_test(test_new_file_per_open),
        cmocka_unit_test(test_open_fails),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
