/* npy.c - NumPy .npy files (format 1.0, 2.0, 3.0): read to f32 / u8,
 * write v1.0, and the NPY dataset loader (see data.h).
 *
 * Supported: little-endian (or byte-order-free) dtypes |u1 <f4 <f8 <i4 <i8
 * (also '<u1', '|i1', '<i1'), C order only; big-endian and Fortran order
 * are rejected with HPO_EFORMAT.
 *
 * Memory: the header's shape is checked against eng_data_max_bytes() (the
 * file's data, then the array or dataset in memory) before anything of its
 * size is allocated; |u1 data is read straight into place, other dtypes are
 * converted through one 64 KiB buffer. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"

#define CHUNK ((size_t)64 << 10) /* conversion buffer; a multiple of every dtype size */

typedef enum { T_U1, T_I1, T_F4, T_F8, T_I4, T_I8 } npy_t;

typedef struct npy_head {
    npy_t t;
    size_t esize;
    int rank;
    int64_t shape[8];
    size_t count;
} npy_head;

/* Find 'key' in the header dict and return a pointer just after its ':'. */
static const char *find_key(const char *h, const char *key) {
    char pat[32];
    const char *q;
    snprintf(pat, sizeof pat, "'%s'", key);
    q = strstr(h, pat);
    if (!q) {
        snprintf(pat, sizeof pat, "\"%s\"", key);
        q = strstr(h, pat);
    }
    if (!q) return NULL;
    q += strlen(pat);
    while (*q == ' ') q++;
    if (*q != ':') return NULL;
    q++;
    while (*q == ' ') q++;
    return q;
}

static int parse_header(const char *path, const char *h, npy_head *o, hpo_error *err) {
    const char *d = find_key(h, "descr");
    if (!d || (*d != '\'' && *d != '"'))
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: npy header has no 'descr'", path);
    char descr[16];
    size_t k = 0;
    char qc = *d++;
    while (*d && *d != qc && k + 1 < sizeof descr) descr[k++] = *d++;
    descr[k] = 0;
    static const struct {
        const char *s;
        npy_t t;
        size_t size;
    } types[] = {{"|u1", T_U1, 1}, {"<u1", T_U1, 1}, {"u1", T_U1, 1}, {"|i1", T_I1, 1},
                 {"<i1", T_I1, 1}, {"<f4", T_F4, 4}, {"<f8", T_F8, 8}, {"<i4", T_I4, 4},
                 {"<i8", T_I8, 8}};
    int found = 0;
    for (size_t i = 0; i < HPO_ARRAY_LEN(types); i++)
        if (strcmp(descr, types[i].s) == 0) {
            o->t = types[i].t;
            o->esize = types[i].size;
            found = 1;
        }
    if (!found)
        return hpo_fail(err, HPO_EFORMAT, "path",
                        "%s: npy dtype '%s' not supported (|u1 <f4 <f8 <i4 <i8, little-endian)",
                        path, descr);
    const char *f = find_key(h, "fortran_order");
    if (!f) return hpo_fail(err, HPO_EFORMAT, "path", "%s: npy header has no 'fortran_order'",
                            path);
    if (strncmp(f, "True", 4) == 0)
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: Fortran-order npy arrays not supported",
                        path);
    if (strncmp(f, "False", 5) != 0)
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: bad npy 'fortran_order'", path);
    const char *s = find_key(h, "shape");
    if (!s || *s != '(')
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: npy header has no 'shape' tuple", path);
    s++;
    o->rank = 0;
    o->count = 1;
    for (;;) {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || errno)
            return hpo_fail(err, HPO_EFORMAT, "path", "%s: bad npy shape", path);
        if (o->rank == 8)
            return hpo_fail(err, HPO_EFORMAT, "path", "%s: npy rank over 8", path);
        o->shape[o->rank++] = v;
        if (__builtin_mul_overflow(o->count, (size_t)v, &o->count) ||
            o->count > SIZE_MAX / o->esize)
            return hpo_fail(err, HPO_ETOOLARGE, "dataset",
                            "%s: the npy shape overflows the address space", path);
        s = end;
        while (*s == ' ') s++;
        if (*s != ',' && *s != ')')
            return hpo_fail(err, HPO_EFORMAT, "path", "%s: bad npy shape", path);
    }
    char desc[96];
    snprintf(desc, sizeof desc, "the npy header declares %zu elements of %zu byte(s)", o->count,
             o->esize);
    return eng_data_check_bytes(path, desc, o->count * o->esize, err);
}

/* Open path, parse the header; leaves fp at the data. */
static int open_npy(const char *path, FILE **fpo, npy_head *h, hpo_error *err) {
    int rc;
    char *hdr = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return hpo_fail(err, errno == ENOENT ? HPO_ENOTFOUND : HPO_EIO, "path",
                        "cannot open %s: %s", path, strerror(errno));
    unsigned char pre[12];
    if (fread(pre, 1, 8, fp) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: not an npy file (bad magic)", path);
        goto fail;
    }
    size_t hl;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, fp) != 2) goto trunc;
        hl = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, fp) != 4) goto trunc;
        hl = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        if (hl > (1u << 24)) {
            rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: npy header length %zu too big", path,
                          hl);
            goto fail;
        }
    } else {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: npy format version %d.%d not supported",
                      path, pre[6], pre[7]);
        goto fail;
    }
    /* never allocate by the declared length past what the file holds */
    struct stat st;
    long here = ftell(fp);
    if (fstat(fileno(fp), &st) == 0 && here >= 0 && (off_t)hl > st.st_size - here) goto trunc;
    hdr = malloc(hl + 1);
    if (!hdr) {
        rc = hpo_fail(err, HPO_ENOMEM, "path", "out of memory");
        goto fail;
    }
    if (fread(hdr, 1, hl, fp) != hl) goto trunc;
    hdr[hl] = 0;
    if ((rc = parse_header(path, hdr, h, err)) < 0) goto fail;
    free(hdr);
    *fpo = fp;
    return 0;
trunc:
    rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: truncated npy header", path);
fail:
    free(hdr);
    fclose(fp);
    return rc;
}

static double get(const npy_head *h, const unsigned char *raw, size_t i) {
    const unsigned char *p = raw + i * h->esize;
    switch (h->t) {
    case T_U1: return *p;
    case T_I1: return (int8_t)*p;
    case T_F4: { float v; memcpy(&v, p, 4); return v; }
    case T_F8: { double v; memcpy(&v, p, 8); return v; }
    case T_I4: { int32_t v; memcpy(&v, p, 4); return v; }
    case T_I8: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    }
    return 0;
}

static int truncated(const char *path, size_t got, size_t nb, hpo_error *err) {
    return hpo_fail(err, HPO_EFORMAT, "path", "%s: truncated npy data: %zu of %zu bytes", path,
                    got, nb);
}

/* The body as raw bytes (|u1) into raw: exactly count bytes. */
static int read_u8(const char *path, FILE *fp, const npy_head *h, void *raw, hpo_error *err) {
    size_t got = fread(raw, 1, h->count, fp);
    return got == h->count ? 0 : truncated(path, got, h->count, err);
}

/* The body converted to f32 into f[count], through a CHUNK-byte buffer. */
static int read_f32(const char *path, FILE *fp, const npy_head *h, float *f, hpo_error *err) {
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return hpo_fail(err, HPO_ENOMEM, "path", "%s: out of memory", path);
    size_t per = CHUNK / h->esize, done = 0;
    int rc = 0;
    while (done < h->count) {
        size_t n = h->count - done < per ? h->count - done : per;
        size_t got = fread(buf, h->esize, n, fp);
        for (size_t i = 0; i < got; i++) f[done + i] = (float)get(h, buf, i);
        if (got < n) {
            rc = truncated(path, (done + got) * h->esize, h->count * h->esize, err);
            break;
        }
        done += n;
    }
    free(buf);
    return rc;
}

int eng_npy_read(const char *path, int want_u8, void **data, int *rank, int64_t shape[8],
                 hpo_error *err) {
    FILE *fp;
    npy_head h;
    void *out = NULL;
    int rc = open_npy(path, &fp, &h, err);
    if (rc < 0) return rc;
    if (want_u8 && h.t != T_U1) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: dtype is not |u1", path);
        goto fail;
    }
    size_t nb = h.count; /* |u1: checked by the header; f32: checked here */
    if (!want_u8 && (__builtin_mul_overflow(h.count, sizeof(float), &nb) ||
                     (rc = eng_data_check_bytes(path, "the array as f32", nb, err)) < 0)) {
        if (rc == 0) rc = hpo_fail(err, HPO_ETOOLARGE, "dataset", "%s: npy array too large", path);
        goto fail;
    }
    out = malloc(nb ? nb : 1);
    if (!out) {
        rc = hpo_fail(err, HPO_ENOMEM, "path", "%s: out of memory", path);
        goto fail;
    }
    if ((rc = want_u8 ? read_u8(path, fp, &h, out, err) : read_f32(path, fp, &h, out, err)) < 0)
        goto fail;
    fclose(fp);
    *data = out;
    *rank = h.rank;
    for (int i = 0; i < h.rank; i++) shape[i] = h.shape[i];
    return 0;
fail:
    free(out);
    fclose(fp);
    return rc;
}

int eng_npy_write(const char *path, const char *descr, int rank, const int64_t *shape,
                  const void *data, hpo_error *err) {
    size_t es;
    if (!strcmp(descr, "<f4") || !strcmp(descr, "<i4")) es = 4;
    else if (!strcmp(descr, "<f8") || !strcmp(descr, "<i8")) es = 8;
    else if (!strcmp(descr, "|u1")) es = 1;
    else return hpo_fail(err, HPO_EINVAL, "descr", "npy dtype '%s' not supported", descr);
    if (rank < 0 || rank > 8) return hpo_fail(err, HPO_EINVAL, "shape", "rank %d", rank);
    char dict[512], sh[256] = "";
    size_t count = 1, o = 0;
    for (int i = 0; i < rank; i++) {
        o += (size_t)snprintf(sh + o, sizeof sh - o, "%lld,%s", (long long)shape[i],
                              i + 1 < rank ? " " : "");
        count *= (size_t)shape[i];
    }
    if (rank > 1) sh[o - 1] = 0; /* "(2, 3)" not "(2, 3,)"; rank 1 keeps "(5,)" */
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                      descr, sh);
    size_t total = 10 + (size_t)dl + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hl = (size_t)dl + pad + 1;
    FILE *fp = fopen(path, "wb");
    if (!fp) return hpo_fail(err, HPO_EIO, "path", "cannot create %s: %s", path, strerror(errno));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff),
                             (unsigned char)(hl >> 8)};
    int bad = fwrite(pre, 1, 10, fp) != 10 || fwrite(dict, 1, (size_t)dl, fp) != (size_t)dl;
    for (size_t i = 0; !bad && i < pad; i++) bad = fputc(' ', fp) == EOF;
    if (!bad) bad = fputc('\n', fp) == EOF;
    if (!bad && count) bad = fwrite(data, es, count, fp) != count;
    if (fclose(fp) != 0) bad = 1;
    if (bad) return hpo_fail(err, HPO_EIO, "path", "cannot write %s", path);
    return 0;
}

/* A dataset's values must be finite: one NaN or inf feature or target
 * makes every trial on it diverge, so the file is refused where it is
 * uploaded, naming the first such value. */
static int check_finite(const char *path, const float *f, size_t count, size_t per_sample, hpo_error *err) {
    for (size_t i = 0; i < count; i++)
        if (!isfinite(f[i]))
            return hpo_fail(err, HPO_EFORMAT, "path",
                            "%s: value %zu (sample %zu) is %g as float32: datasets must hold finite numbers "
                            "(drop or fill in that sample)", path, i, i / per_sample, (double)f[i]);
    return 0;
}

int eng_load_npy(const char *x_path, const char *y_path, int scale_u8, eng_dataset **out,
                 hpo_error *err) {
    FILE *fx = NULL, *fy = NULL;
    npy_head hx, hy;
    eng_dataset *ds = NULL;
    int rc;
    if (!x_path || !y_path)
        return hpo_fail(err, HPO_EINVAL, "path", "NPY datasets need an x and a y file");
    if ((rc = open_npy(x_path, &fx, &hx, err)) < 0) goto fail;
    if ((rc = open_npy(y_path, &fy, &hy, err)) < 0) goto fail;
    if (hx.rank < 1 || hx.rank > ENG_DATA_MAX_RANK + 1 || hx.shape[0] == 0) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: need shape (n, ...) with n > 0 and rank <= %d",
                      x_path, ENG_DATA_MAX_RANK + 1);
        goto fail;
    }
    if (hy.rank < 1 || hy.rank > 2 || hy.shape[0] != hx.shape[0]) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: need shape (%lld,) or (%lld, k) to match %s",
                      y_path, (long long)hx.shape[0], (long long)hx.shape[0], x_path);
        goto fail;
    }
    int yfloat = hy.t == T_F4 || hy.t == T_F8;
    if (!yfloat && hy.rank != 1) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: integer labels must have rank 1", y_path);
        goto fail;
    }
    if (hy.rank == 2 && hy.shape[1] == 0) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: empty targets", y_path);
        goto fail;
    }
    int64_t shape[ENG_DATA_MAX_RANK] = {1};
    int rank = hx.rank - 1;
    for (int i = 0; i < rank; i++) shape[i] = hx.shape[i + 1];
    if (rank == 0) rank = 1;
    for (int i = 0; i < rank; i++)
        if (shape[i] == 0) {
            rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: sample dimension %d is 0", x_path, i + 1);
            goto fail;
        }
    size_t n = (size_t)hx.shape[0], ydim = hy.rank == 2 ? (size_t)hy.shape[1] : 1, bytes = 0;
    int u8 = hx.t == T_U1;
    eng_data_xtype xt = u8 ? ENG_DATA_U8 : ENG_DATA_F32;
    eng_data_ytype yt = yfloat ? ENG_DATA_Y_TARGET : ENG_DATA_Y_CLASS;
    if (eng_dataset_bytes(n, hx.count / n, xt, yt, ydim, &bytes) < 0) bytes = SIZE_MAX;
    if ((rc = eng_data_check_bytes(x_path, "the dataset in memory", bytes, err)) < 0) goto fail;
    rc = eng_dataset_new(x_path, n, rank, shape, xt, yt, ydim, &ds);
    if (rc < 0) {
        rc = hpo_fail(err, rc, "path", "%s: bad shape or out of memory", x_path);
        goto fail;
    }
    if (u8) {
        if ((rc = read_u8(x_path, fx, &hx, ds->x, err)) < 0) goto fail;
        ds->x_scale = scale_u8 ? 1.0f / 255.0f : 1.0f;
    } else if ((rc = read_f32(x_path, fx, &hx, ds->x, err)) < 0 ||
               (rc = check_finite(x_path, ds->x, hx.count, ds->sample_size, err)) < 0) {
        goto fail;
    }
    if (yfloat) {
        if ((rc = read_f32(y_path, fy, &hy, ds->y_target, err)) < 0 ||
            (rc = check_finite(y_path, ds->y_target, hy.count, ds->n ? hy.count / ds->n : 1, err)) < 0)
            goto fail;
    } else {
        /* labels: read as f32 into y_class's own n * 4 bytes, then made
         * int32 in place (memcpy: no aliasing of the two types) */
        float *yf = (float *)(void *)ds->y_class;
        if ((rc = read_f32(y_path, fy, &hy, yf, err)) < 0) goto fail;
        int maxl = 0;
        for (size_t i = 0; i < hy.count; i++) {
            float fv;
            memcpy(&fv, &ds->y_class[i], sizeof fv);
            double v = fv;
            if (!(v >= 0 && v <= 1e6)) {
                rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: label %zu is %g, not a class number",
                              y_path, i, v);
                goto fail;
            }
            ds->y_class[i] = (int32_t)v;
            if (ds->y_class[i] > maxl) maxl = ds->y_class[i];
        }
        ds->n_classes = maxl + 1;
    }
    fclose(fx);
    fclose(fy);
    *out = ds;
    return 0;
fail:
    eng_dataset_release(ds);
    if (fx) fclose(fx);
    if (fy) fclose(fy);
    return rc;
}
