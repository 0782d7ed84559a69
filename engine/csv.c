/* csv.c - numeric CSV datasets with a header row (see data.h).
 *
 * Accepted: comma-separated fields, optional surrounding spaces, optional
 * double quotes around a field (no embedded commas or quotes), LF or CRLF
 * line ends, blank lines skipped. Every data field must parse completely as
 * a number (strtod: decimal, exponent, inf, nan). Errors name the file, the
 * 1-based line number and the column. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

#define CSV_MAX_BYTES ((size_t)4 << 30)
#define CSV_MAX_COLS 100000

/* Split line (modified in place) into fields; returns count, or -1 if more
 * than cap. Trims spaces and one pair of quotes. */
static int split_fields(char *line, char **f, int cap) {
    int n = 0;
    char *p = line;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        while (*p == ' ' || *p == '\t') p++;
        char *e = p + strlen(p);
        while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = 0;
        if (e - p >= 2 && *p == '"' && e[-1] == '"') {
            e[-1] = 0;
            p++;
        }
        if (n == cap) return -1;
        f[n++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

static int parse_num(const char *s, double *v) {
    if (!*s) return -1;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*end || end == s) return -1;
    *v = d;
    return 0;
}

static int is_blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return 0;
    return 1;
}

int eng_load_csv(const char *path, const char *label_column, int classify, eng_dataset **out,
                 hpo_error *err) {
    int rc = 0;
    char *text = NULL, **fields = NULL;
    float *xs = NULL, *ys = NULL;
    eng_dataset *ds = NULL;
    FILE *fp = NULL;
    if (!path || !label_column || !*label_column)
        return hpo_fail(err, HPO_EINVAL, "dataset.label_column",
                        "CSV needs a file and a label column name");
    fp = fopen(path, "rb");
    if (!fp)
        return hpo_fail(err, errno == ENOENT ? HPO_ENOTFOUND : HPO_EIO, "path",
                        "cannot open %s: %s", path, strerror(errno));
    /* read everything */
    size_t cap = 1 << 16, len = 0;
    text = malloc(cap);
    if (!text) goto oom;
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= CSV_MAX_BYTES) {
                rc = hpo_fail(err, HPO_ETOOLARGE, "path", "%s: CSV over 4 GB", path);
                goto fail;
            }
            char *t = realloc(text, cap * 2);
            if (!t) goto oom;
            text = t;
            cap *= 2;
        }
        size_t k = fread(text + len, 1, cap - 1 - len, fp);
        if (k == 0) break;
        len += k;
    }
    if (ferror(fp)) {
        rc = hpo_fail(err, HPO_EIO, "path", "cannot read %s", path);
        goto fail;
    }
    text[len] = 0;
    if (memchr(text, 0, len)) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: binary data (NUL byte) in a CSV file", path);
        goto fail;
    }

    fields = malloc(CSV_MAX_COLS * sizeof *fields);
    if (!fields) goto oom;
    /* header: first non-blank line */
    char *p = text, *line;
    long lineno = 0;
    int ncols = -1, label = -1;
    while (*p) {
        line = p;
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0, p = nl + 1;
        else p += strlen(p);
        lineno++;
        if (is_blank(line)) continue;
        ncols = split_fields(line, fields, CSV_MAX_COLS);
        if (ncols < 0) {
            rc = hpo_fail(err, HPO_ETOOLARGE, "path", "%s: line %ld: over %d columns", path,
                          lineno, CSV_MAX_COLS);
            goto fail;
        }
        for (int i = 0; i < ncols; i++)
            if (strcmp(fields[i], label_column) == 0) {
                if (label >= 0) {
                    rc = hpo_fail(err, HPO_EFORMAT, "path",
                                  "%s: line %ld: label column '%s' appears twice", path, lineno,
                                  label_column);
                    goto fail;
                }
                label = i;
            }
        break;
    }
    if (ncols < 0) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: empty CSV file (no header row)", path);
        goto fail;
    }
    if (label < 0) {
        rc = hpo_fail(err, HPO_EFORMAT, "dataset.label_column",
                      "%s: line %ld: no column named '%s' in the header", path, lineno,
                      label_column);
        goto fail;
    }
    if (ncols < 2) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: only the label column, no features", path);
        goto fail;
    }
    int nf = ncols - 1;
    size_t n = 0, rcap = 1024;
    xs = malloc(rcap * (size_t)nf * sizeof *xs);
    ys = malloc(rcap * sizeof *ys);
    if (!xs || !ys) goto oom;
    while (*p) {
        line = p;
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0, p = nl + 1;
        else p += strlen(p);
        lineno++;
        if (is_blank(line)) continue;
        int k = split_fields(line, fields, CSV_MAX_COLS);
        if (k != ncols) {
            rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: line %ld: %d fields, the header has %d",
                          path, lineno, k < 0 ? CSV_MAX_COLS : k, ncols);
            goto fail;
        }
        if (n == rcap) {
            if (n >= UINT32_MAX / 2) {
                rc = hpo_fail(err, HPO_ETOOLARGE, "path", "%s: too many rows", path);
                goto fail;
            }
            rcap *= 2;
            float *a = realloc(xs, rcap * (size_t)nf * sizeof *xs);
            if (!a) goto oom;
            xs = a;
            float *b = realloc(ys, rcap * sizeof *ys);
            if (!b) goto oom;
            ys = b;
        }
        int j = 0;
        for (int i = 0; i < ncols; i++) {
            double v;
            if (parse_num(fields[i], &v) < 0) {
                rc = hpo_fail(err, HPO_EFORMAT, "path",
                              "%s: line %ld, column %d: '%.40s' is not a number", path, lineno,
                              i + 1, fields[i]);
                goto fail;
            }
            if (i == label) {
                if (classify && (v < 0 || v != floor(v) || v > 1e6)) {
                    rc = hpo_fail(err, HPO_EFORMAT, "path",
                                  "%s: line %ld: label '%.40s' is not a class number (an "
                                  "integer >= 0)", path, lineno, fields[i]);
                    goto fail;
                }
                ys[n] = (float)v;
            } else {
                xs[n * (size_t)nf + (size_t)j++] = (float)v;
            }
        }
        n++;
    }
    if (n == 0) {
        rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: no data rows after the header", path);
        goto fail;
    }
    int64_t shape[1] = {nf};
    rc = eng_dataset_new(path, n, 1, shape, ENG_DATA_F32,
                         classify ? ENG_DATA_Y_CLASS : ENG_DATA_Y_TARGET, 1, &ds);
    if (rc < 0) goto oom;
    memcpy(ds->x, xs, n * (size_t)nf * sizeof *xs);
    if (classify) {
        int maxl = 0;
        for (size_t i = 0; i < n; i++) {
            ds->y_class[i] = (int32_t)ys[i];
            if (ds->y_class[i] > maxl) maxl = ds->y_class[i];
        }
        ds->n_classes = maxl + 1;
    } else {
        memcpy(ds->y_target, ys, n * sizeof *ys);
    }
    free(text);
    free(fields);
    free(xs);
    free(ys);
    fclose(fp);
    *out = ds;
    return 0;
oom:
    rc = hpo_fail(err, HPO_ENOMEM, "path", "%s: out of memory", path);
fail:
    free(text);
    free(fields);
    free(xs);
    free(ys);
    eng_dataset_unref(ds);
    if (fp) fclose(fp);
    return rc;
}
