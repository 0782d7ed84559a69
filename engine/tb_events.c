/* tb_events.c - TensorBoard event files (see tb_events.h). */
#include "tb_events.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TB_PATH_MAX 4096
#define TB_TAG_MAX 255
#define TB_MASK_DELTA 0xa282ead8u

/* protobuf keys: field number << 3 | wire type (0 varint, 1 fixed64,
 * 2 length-delimited, 5 fixed32) */
#define KEY_WALL_TIME ((1u << 3) | 1u)
#define KEY_STEP ((2u << 3) | 0u)
#define KEY_FILE_VERSION ((3u << 3) | 2u)
#define KEY_SUMMARY ((5u << 3) | 2u)
#define KEY_SUMMARY_VALUE ((1u << 3) | 2u)
#define KEY_VALUE_TAG ((1u << 3) | 2u)
#define KEY_VALUE_SIMPLE ((2u << 3) | 5u)

struct eng_tb_writer {
    int fd;
    char path[TB_PATH_MAX];
};

uint32_t eng_crc32c(const void *data, size_t n) {
    /* ISA-L takes the register's start value and returns it unfinished:
     * CRC-32C starts at ~0 and ends inverted. int lengths: chunks. */
    const unsigned char *p = data;
    unsigned int crc = 0xffffffffu;
    while (n > 0) {
        int k = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        crc = crc32_iscsi((unsigned char *)p, k, crc);
        p += k;
        n -= (size_t)k;
    }
    return ~crc;
}

uint32_t eng_tb_masked_crc(const void *data, size_t n) {
    uint32_t crc = eng_crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + TB_MASK_DELTA;
}

/* ---- encoding into a buffer the caller sized ---- */

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_bytes(uint8_t *p, unsigned key, const void *s, size_t n) {
    p = put_varint(p, key);
    p = put_varint(p, n);
    memcpy(p, s, n);
    return p + n;
}

/* Size of a Summary.Value {tag, simple_value}. */
static size_t value_len(size_t tag_len) { return 1 + varint_len(tag_len) + tag_len + 1 + 4; }

/* ---- records ---- */

static int io_fail(hpo_error *err, int e, const char *what, const char *path) {
    return hpo_fail(err, e == ENOSPC || e == EDQUOT ? HPO_ENOSPACE : HPO_EIO, "", "cannot %s %s: %s", what, path,
                    strerror(e));
}

/* Frames event[0..n) as a TFRecord (rec has 12 bytes free before event
 * and 4 after) and writes it. */
static int write_record(eng_tb_writer *w, uint8_t *rec, size_t n, hpo_error *err) {
    uint8_t *p = put_le(rec, n, 8);
    p = put_le(p, eng_tb_masked_crc(rec, 8), 4);
    put_le(p + n, eng_tb_masked_crc(p, n), 4);
    size_t total = 12 + n + 4, done = 0;
    while (done < total) {
        ssize_t k = write(w->fd, rec + done, total - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return io_fail(err, k < 0 ? errno : EIO, "write", w->path);
        done += (size_t)k;
    }
    return 0;
}

/* Starts an Event at p: wall_time, and step unless 0 (proto3's default). */
static uint8_t *put_event_head(uint8_t *p, double wall_time, int64_t step) {
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits);
    p = put_varint(p, KEY_WALL_TIME);
    p = put_le(p, bits, 8);
    if (step != 0) {
        p = put_varint(p, KEY_STEP);
        p = put_varint(p, (uint64_t)step);
    }
    return p;
}

static int write_version(eng_tb_writer *w, double wall_time, hpo_error *err) {
    uint8_t rec[12 + 64 + 4];
    uint8_t *p = put_event_head(rec + 12, wall_time, 0);
    p = put_bytes(p, KEY_FILE_VERSION, ENG_TB_FILE_VERSION, strlen(ENG_TB_FILE_VERSION));
    return write_record(w, rec, (size_t)(p - (rec + 12)), err);
}

/* v as written, in *f: whether it is finite as float32 (a finite double
 * beyond float32's range becomes inf). */
static int as_float(double v, float *f) {
    *f = (float)v;
    return isfinite(*f);
}

int eng_tb_write_scalars(eng_tb_writer *w, int64_t step, double wall_time, const eng_tb_scalar *v, size_t n,
                         hpo_error *err) {
    size_t summary = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        size_t t = strlen(v[i].tag);
        if (t > TB_TAG_MAX) return hpo_fail(err, HPO_EINVAL, "", "tag too long: %.64s...", v[i].tag);
        float f;
        if (!as_float(v[i].value, &f)) continue;
        size_t vl = value_len(t);
        summary += 1 + varint_len(vl) + vl;
        kept++;
    }
    if (kept == 0) return 0;
    size_t event = 9 + 1 + varint_len((uint64_t)step) + 1 + varint_len(summary) + summary;
    uint8_t *rec = malloc(12 + event + 4);
    if (!rec) return hpo_fail(err, HPO_ENOMEM, "", "out of memory for an event");
    uint8_t *p = put_event_head(rec + 12, wall_time, step);
    p = put_varint(p, KEY_SUMMARY);
    p = put_varint(p, summary);
    for (size_t i = 0; i < n; i++) {
        float f;
        if (!as_float(v[i].value, &f)) continue;
        size_t t = strlen(v[i].tag);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        p = put_varint(p, KEY_SUMMARY_VALUE);
        p = put_varint(p, value_len(t));
        p = put_bytes(p, KEY_VALUE_TAG, v[i].tag, t);
        p = put_varint(p, KEY_VALUE_SIMPLE);
        p = put_le(p, bits, 4);
    }
    int rc = write_record(w, rec, (size_t)(p - (rec + 12)), err);
    free(rec);
    return rc;
}

int eng_tb_write_epoch(eng_tb_writer *w, const eng_epoch_report *r, int classify, hpo_error *err) {
    eng_tb_scalar v[12];
    size_t n = 0;
    v[n++] = (eng_tb_scalar){"train/loss", r->train.loss};
    if (classify) {
        v[n++] = (eng_tb_scalar){"train/accuracy", r->train.accuracy};
    } else {
        v[n++] = (eng_tb_scalar){"train/mse", r->train.mse};
        v[n++] = (eng_tb_scalar){"train/mae", r->train.mae};
    }
    if (r->has_val) {
        v[n++] = (eng_tb_scalar){"val/loss", r->val.loss};
        if (classify) {
            v[n++] = (eng_tb_scalar){"val/accuracy", r->val.accuracy};
        } else {
            v[n++] = (eng_tb_scalar){"val/mse", r->val.mse};
            v[n++] = (eng_tb_scalar){"val/mae", r->val.mae};
        }
    }
    v[n++] = (eng_tb_scalar){"train/learning_rate", r->lr};
    v[n++] = (eng_tb_scalar){"perf/epoch_seconds", r->seconds};
    v[n++] = (eng_tb_scalar){"perf/samples_per_s", r->samples_per_s};
    return eng_tb_write_scalars(w, r->epoch, hpo_now(), v, n, err);
}

/* ---- files ---- */

/* The host's name with anything but [A-Za-z0-9._-] replaced by '_'. */
static void host_name(char *out, size_t cap) {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) || !h[0]) snprintf(h, sizeof h, "localhost");
    size_t i = 0;
    for (; h[i] && i + 1 < cap && i < 64; i++) {
        char c = h[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == '-';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}

int eng_tb_open(const char *dir, eng_tb_writer **out, hpo_error *err) {
    eng_tb_writer *w = calloc(1, sizeof *w);
    if (!w) return hpo_fail(err, HPO_ENOMEM, "", "out of memory for an event writer");
    char host[72];
    host_name(host, sizeof host);
    double now = hpo_now();
    long long secs = (long long)floor(now);
    int rc = 0;
    w->fd = -1;
    for (int k = 0; w->fd < 0; k++) {
        int len = k == 0 ? snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s", dir, secs, host)
                         : snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir, secs, host, k);
        if (len < 0 || (size_t)len >= sizeof w->path) {
            rc = hpo_fail(err, HPO_EINVAL, "", "event file path too long: %.64s...", dir);
            goto fail;
        }
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (w->fd < 0 && (errno != EEXIST || k >= 1000)) {
            rc = io_fail(err, errno, "create", w->path);
            goto fail;
        }
    }
    if ((rc = write_version(w, now, err))) goto fail;
    *out = w;
    return 0;
fail:
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->path); /* no file without its version record */
    }
    free(w);
    return rc;
}

void eng_tb_close(eng_tb_writer *w) {
    if (!w) return;
    close(w->fd);
    free(w);
}

const char *eng_tb_path(const eng_tb_writer *w) { return w->path; }
