/* idx.c - the IDX format of MNIST / Fashion-MNIST, gzipped or plain (zlib's
 * gzread passes plain files through). See data.h.
 *
 * Format: magic 0x00 0x00 <type> <ndim>, then ndim big-endian u32 sizes,
 * then the data, big-endian, C order. Types: 0x08 ubyte, 0x09 sbyte,
 * 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64. Images of type ubyte stay U8
 * (x_scale 1/255); other types are converted to f32 (x_scale 1) and must
 * be finite there. Labels must be an integer type of rank 1.
 *
 * Memory: the dims are checked against eng_data_max_bytes() (the decoded
 * data of each file, then the dataset in memory) before anything of their
 * size is allocated; ubyte images are decompressed straight into the
 * dataset, everything else through one 64 KiB buffer. gzread never
 * produces more than the header declares plus the one byte that proves
 * there is nothing after it, so a gzip bomb costs its declared size at
 * most, which the cap bounds. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data.h"

#define CHUNK ((size_t)64 << 10) /* conversion buffer; a multiple of every type size */

typedef struct idx_head {
    int type;
    int ndim;
    uint32_t dims[8];
    size_t count; /* product of dims */
    size_t esize;
} idx_head;

static size_t type_size(int t) {
    switch (t) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    }
    return 0;
}

/* Read exactly n bytes; returns bytes read or -1 on a zlib error. */
static long long read_n(gzFile g, void *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int k = gzread(g, (char *)p + got, chunk);
        if (k < 0) return -1;
        if (k == 0) break;
        got += (size_t)k;
    }
    return (long long)got;
}

static int zfail(gzFile g, const char *path, hpo_error *err) {
    int zerr = 0;
    const char *m = gzerror(g, &zerr);
    return hpo_fail(err, HPO_EFORMAT, "path", "%s: cannot decompress: %s", path,
                    m ? m : "zlib error");
}

static int read_head(gzFile g, const char *path, idx_head *h, hpo_error *err) {
    unsigned char m[4];
    long long k = read_n(g, m, 4);
    if (k < 0) return zfail(g, path, err);
    if (k < 4) return hpo_fail(err, HPO_EFORMAT, "path", "%s: file too short for an IDX header",
                               path);
    if (m[0] != 0 || m[1] != 0)
        return hpo_fail(err, HPO_EFORMAT, "path",
                        "%s: bad IDX magic %02x %02x (expected 00 00): not an IDX file", path,
                        m[0], m[1]);
    h->type = m[2];
    h->esize = type_size(m[2]);
    if (!h->esize)
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: unknown IDX data type 0x%02x", path, m[2]);
    h->ndim = m[3];
    if (h->ndim < 1 || h->ndim > 8)
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: IDX rank %d not in 1..8", path, h->ndim);
    unsigned char d[32];
    k = read_n(g, d, 4 * (size_t)h->ndim);
    if (k < 0) return zfail(g, path, err);
    if (k < 4 * h->ndim)
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: truncated IDX header (%d dims)", path,
                        h->ndim);
    h->count = 1;
    for (int i = 0; i < h->ndim; i++) {
        h->dims[i] = (uint32_t)d[4 * i] << 24 | (uint32_t)d[4 * i + 1] << 16 |
                     (uint32_t)d[4 * i + 2] << 8 | d[4 * i + 3];
        if (h->dims[i] == 0)
            return hpo_fail(err, HPO_EFORMAT, "path", "%s: IDX dimension %d is 0", path, i);
        if (__builtin_mul_overflow(h->count, (size_t)h->dims[i], &h->count) ||
            h->count > SIZE_MAX / h->esize)
            return hpo_fail(err, HPO_ETOOLARGE, "dataset",
                            "%s: the IDX dims overflow the address space", path);
    }
    char desc[96];
    snprintf(desc, sizeof desc, "the IDX header declares %zu elements of %zu byte(s)", h->count,
             h->esize);
    return eng_data_check_bytes(path, desc, h->count * h->esize, err);
}

/* Big-endian element i of raw as double. */
static double elem(const idx_head *h, const unsigned char *raw, size_t i) {
    const unsigned char *p = raw + i * h->esize;
    uint64_t u = 0;
    for (size_t b = 0; b < h->esize; b++) u = u << 8 | p[b];
    switch (h->type) {
    case 0x08: return (double)(uint8_t)u;
    case 0x09: return (double)(int8_t)u;
    case 0x0B: return (double)(int16_t)u;
    case 0x0C: return (double)(int32_t)u;
    case 0x0D: {
        uint32_t v = (uint32_t)u;
        float f;
        memcpy(&f, &v, 4);
        return f;
    }
    default: {
        double f;
        memcpy(&f, &u, 8);
        return f;
    }
    }
}

static int truncated(const char *path, size_t nb, size_t got, hpo_error *err) {
    return hpo_fail(err, HPO_EFORMAT, "path",
                    "%s: truncated IDX file: header promises %zu data bytes, found %zu", path, nb,
                    got);
}

/* After the data: nothing may follow. */
static int check_end(gzFile g, const char *path, size_t nb, hpo_error *err) {
    unsigned char extra;
    long long k = read_n(g, &extra, 1);
    if (k < 0) return zfail(g, path, err);
    if (k > 0)
        return hpo_fail(err, HPO_EFORMAT, "path",
                        "%s: trailing bytes after the %zu data bytes the IDX header declares",
                        path, nb);
    return 0;
}

/* The body as raw bytes into raw (count * esize bytes; ubyte images). */
static int read_body(gzFile g, const char *path, const idx_head *h, void *raw, hpo_error *err) {
    size_t nb = h->count * h->esize;
    long long k = read_n(g, raw, nb);
    if (k < 0) return zfail(g, path, err);
    if ((size_t)k < nb) return truncated(path, nb, (size_t)k, err);
    return check_end(g, path, nb, err);
}

/* The body element by element: visit(arg, i, value) for each of the count
 * elements, through a CHUNK-byte buffer. visit returns 0 or an error. */
typedef int (*idx_visit)(void *arg, size_t i, double v, hpo_error *err);

static int read_body_each(gzFile g, const char *path, const idx_head *h, idx_visit visit,
                          void *arg, hpo_error *err) {
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return hpo_fail(err, HPO_ENOMEM, "path", "out of memory");
    size_t nb = h->count * h->esize, done = 0, per = CHUNK / h->esize;
    int rc = 0;
    while (done < h->count && rc == 0) {
        size_t n = h->count - done < per ? h->count - done : per;
        long long k = read_n(g, buf, n * h->esize);
        if (k < 0) rc = zfail(g, path, err);
        else if ((size_t)k < n * h->esize) rc = truncated(path, nb, done * h->esize + (size_t)k, err);
        for (size_t i = 0; i < n && rc == 0; i++) rc = visit(arg, done + i, elem(h, buf, i), err);
        done += n;
    }
    free(buf);
    return rc ? rc : check_end(g, path, nb, err);
}

/* What a visit reads into: the dataset, the file (for errors), the
 * highest label seen. */
typedef struct body_ctx {
    eng_dataset *ds;
    const char *path;
    int maxl;
} body_ctx;

/* An image value as float32: finite, as npy.c and csv.c ask (a NaN in a
 * validation row made an objective silently wrong). */
static int put_x(void *arg, size_t i, double v, hpo_error *err) {
    body_ctx *c = arg;
    float f = (float)v;
    if (!isfinite(f))
        return hpo_fail(err, HPO_EFORMAT, "path",
                        "%s: value %zu (sample %zu) is %g as float32: datasets must hold finite numbers "
                        "(drop or fill in that sample)",
                        c->path, i, i / c->ds->sample_size, (double)f);
    ((float *)c->ds->x)[i] = f;
    return 0;
}

static int put_label(void *arg, size_t i, double v, hpo_error *err) {
    body_ctx *c = arg;
    if (!(v >= 0 && v <= 1e6))
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: label %zu is %g, not a class number",
                        c->path, i, v);
    c->ds->y_class[i] = (int32_t)v;
    if (c->ds->y_class[i] > c->maxl) c->maxl = c->ds->y_class[i];
    return 0;
}

static gzFile open_gz(const char *path, hpo_error *err, int *rc) {
    gzFile g = gzopen(path, "rb");
    if (!g) {
        int e = errno;
        *rc = hpo_fail(err, e == ENOENT ? HPO_ENOTFOUND : HPO_EIO, "path", "cannot open %s: %s",
                       path, e ? strerror(e) : "zlib error");
        return NULL;
    }
    /* 128 KiB of input a read decodes fastest (Fashion-MNIST); a small
     * file gets a buffer of its size (zlib's minimum is 8 KiB): gzread
     * allocates the buffer and twice it for output per file opened */
    struct stat st;
    unsigned want = 1u << 17;
    if (stat(path, &st) == 0 && st.st_size >= 0 && (unsigned long long)st.st_size < want)
        want = st.st_size < 8192 ? 8192 : (unsigned)st.st_size;
    gzbuffer(g, want);
    return g;
}

int eng_load_idx(const char *images_path, const char *labels_path, eng_dataset **out,
                 hpo_error *err) {
    int rc = 0;
    gzFile gx = NULL, gy = NULL;
    idx_head hx, hy;
    eng_dataset *ds = NULL;
    if (!images_path || !labels_path)
        return hpo_fail(err, HPO_EINVAL, "path", "IDX needs an images and a labels file");
    if (!(gx = open_gz(images_path, err, &rc))) goto fail;
    if (!(gy = open_gz(labels_path, err, &rc))) goto fail;
    if ((rc = read_head(gx, images_path, &hx, err)) < 0) goto fail;
    if ((rc = read_head(gy, labels_path, &hy, err)) < 0) goto fail;
    if (hx.ndim < 2 || hx.ndim > ENG_DATA_MAX_RANK) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: images have rank %d, expected 2..%d",
                      images_path, hx.ndim, ENG_DATA_MAX_RANK);
        goto fail;
    }
    if (hy.ndim != 1 || hy.type == 0x0D || hy.type == 0x0E) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: labels must be integers of rank 1",
                      labels_path);
        goto fail;
    }
    if (hy.dims[0] != hx.dims[0]) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s has %u images but %s has %u labels",
                      images_path, hx.dims[0], labels_path, hy.dims[0]);
        goto fail;
    }
    int64_t shape[ENG_DATA_MAX_RANK];
    int rank = hx.ndim - 1;
    for (int i = 0; i < rank; i++) shape[i] = hx.dims[i + 1];
    if (hx.ndim == 3) shape[rank++] = 1; /* (n, H, W) images -> NHWC with C = 1 */
    int u8 = hx.type == 0x08;
    size_t n = hx.dims[0], bytes = 0;
    eng_data_xtype xt = u8 ? ENG_DATA_U8 : ENG_DATA_F32;
    if (eng_dataset_bytes(n, hx.count / n, xt, ENG_DATA_Y_CLASS, 1, &bytes) < 0) bytes = SIZE_MAX;
    if ((rc = eng_data_check_bytes(images_path, "the dataset in memory", bytes, err)) < 0)
        goto fail;
    rc = eng_dataset_new(images_path, n, rank, shape, xt, ENG_DATA_Y_CLASS, 1, &ds);
    if (rc < 0) {
        rc = hpo_fail(err, rc, "path", "%s: cannot allocate %zu samples", images_path, n);
        goto fail;
    }
    if (u8) {
        if ((rc = read_body(gx, images_path, &hx, ds->x, err)) < 0) goto fail;
        ds->x_scale = 1.0f / 255.0f;
    } else {
        body_ctx xc = {ds, images_path, -1};
        if ((rc = read_body_each(gx, images_path, &hx, put_x, &xc, err)) < 0) goto fail;
    }
    body_ctx lc = {ds, labels_path, -1};
    if ((rc = read_body_each(gy, labels_path, &hy, put_label, &lc, err)) < 0) goto fail;
    ds->n_classes = lc.maxl + 1;
    gzclose(gx);
    gzclose(gy);
    *out = ds;
    return 0;
fail:
    eng_dataset_release(ds);
    if (gx) gzclose(gx);
    if (gy) gzclose(gy);
    return rc;
}
