/* csv.c - numeric CSV datasets with a header row (see data.h).
 *
 * Accepted: comma-separated fields, optional surrounding spaces, optional
 * double quotes around a field (no embedded commas or quotes), LF or CRLF
 * line ends, blank lines skipped, a UTF-8 byte order mark before the header
 * skipped. Every feature must parse completely as a finite number (strtod:
 * decimal, exponent; C hex floats, "inf", "nan" and values beyond float32
 * are refused: numpy reads no hex, and every trial on the others would
 * diverge); a class label must not be empty. Errors name the file, the
 * 1-based line number and the column.
 *
 * Class labels. While reading, each distinct label text gets an id in a
 * small hash table (labels); a row keeps its label's id. At the end, if
 * every distinct label is a class number the ids are mapped to those
 * numbers (the file's own classes); otherwise the labels are names and are
 * sorted in byte order, class k being the k-th (as scikit-learn's
 * LabelEncoder does), and the names are kept in the dataset.
 *
 * Memory: the file is read line by line (a line may take up to 16 MiB) and
 * the rows are parsed into arrays that grow by doubling; before each row
 * the dataset it would make is checked against eng_data_max_bytes(), and
 * the arrays never grow past what the cap allows. The parsed features
 * become the dataset's x without a copy. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

#define CSV_MAX_LINE ((size_t)16 << 20)
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
    if (!*s || strpbrk(s, "xX")) return -1; /* strtod's C hex floats (0x10) are no CSV number */
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

/* ---- the distinct labels of a class column ---- */
typedef struct labels {
    char **names;   /* by id, in order of first appearance */
    long *line;     /* by id: the line it first appeared on (for messages) */
    int n, cap;
    int *slots;     /* open addressing: id + 1, 0 = empty; size a power of 2 */
    size_t n_slots;
} labels;

static uint64_t hash_text(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* The id of text (added when new); HPO_ETOOLARGE past ENG_CSV_MAX_CLASSES,
 * HPO_ENOMEM. */
static int label_id(labels *l, const char *text, long lineno) {
    if ((size_t)l->n * 2 >= l->n_slots) { /* grow and rehash */
        size_t ns = l->n_slots ? l->n_slots * 2 : 64;
        int *slots = calloc(ns, sizeof *slots);
        if (!slots) return HPO_ENOMEM;
        for (int id = 0; id < l->n; id++) {
            size_t i = hash_text(l->names[id]) & (ns - 1);
            while (slots[i]) i = (i + 1) & (ns - 1);
            slots[i] = id + 1;
        }
        free(l->slots);
        l->slots = slots;
        l->n_slots = ns;
    }
    size_t i = hash_text(text) & (l->n_slots - 1);
    for (; l->slots[i]; i = (i + 1) & (l->n_slots - 1))
        if (strcmp(l->names[l->slots[i] - 1], text) == 0) return l->slots[i] - 1;
    if (l->n == ENG_CSV_MAX_CLASSES) return HPO_ETOOLARGE;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **names = realloc(l->names, (size_t)cap * sizeof *names);
        if (!names) return HPO_ENOMEM;
        l->names = names;
        long *line = realloc(l->line, (size_t)cap * sizeof *line);
        if (!line) return HPO_ENOMEM;
        l->line = line;
        l->cap = cap;
    }
    char *copy = strdup(text);
    if (!copy) return HPO_ENOMEM;
    l->names[l->n] = copy;
    l->line[l->n] = lineno;
    l->slots[i] = l->n + 1;
    return l->n++;
}

static void labels_clear(labels *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    free(l->line);
    free(l->slots);
    memset(l, 0, sizeof *l);
}

/* 1 if text is a class number (an integer in [0, 1e6]), with it in *k. */
static int class_number(const char *text, int *k) {
    double v;
    if (parse_num(text, &v) < 0 || v < 0 || v != floor(v) || v > 1e6) return 0;
    *k = (int)v;
    return 1;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Turns the label ids of the n rows in ids into classes of ds: the file's
 * class numbers when every label is one, else the sorted names (moved into
 * ds->class_names). Labels that are all numbers but not all class numbers
 * (2.5, -1) are refused: that column holds a regression target. 0,
 * HPO_EFORMAT or HPO_ENOMEM. */
static int labels_to_classes(labels *l, const float *ids, size_t n, eng_dataset *ds, const char *path,
                             hpo_error *err) {
    int numeric = 1, numbers = 1, n_classes = 0, bad = -1;
    for (int id = 0; id < l->n; id++) {
        int k;
        double v;
        if (class_number(l->names[id], &k)) {
            if (k + 1 > n_classes) n_classes = k + 1;
            continue;
        }
        numeric = 0;
        if (bad < 0) bad = id;
        if (parse_num(l->names[id], &v) < 0) numbers = 0;
    }
    if (!numeric && numbers)
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: line %ld: label '%.40s' is not a class number (an integer >= 0)",
                        path, l->line[bad], l->names[bad]);
    int *class_of = malloc((size_t)(l->n > 0 ? l->n : 1) * sizeof *class_of);
    if (!class_of) return HPO_ENOMEM;
    for (int id = 0; id < l->n && numeric; id++) class_number(l->names[id], &class_of[id]);
    if (!numeric) {
        char **sorted = malloc((size_t)(l->n > 0 ? l->n : 1) * sizeof *sorted);
        if (!sorted) {
            free(class_of);
            return HPO_ENOMEM;
        }
        memcpy(sorted, l->names, (size_t)l->n * sizeof *sorted);
        qsort(sorted, (size_t)l->n, sizeof *sorted, compare_names);
        for (int id = 0; id < l->n; id++) /* each name's place in the sorted list */
            class_of[id] = (int)((char **)bsearch(&l->names[id], sorted, (size_t)l->n, sizeof *sorted,
                                                  compare_names) - sorted);
        n_classes = l->n;
        ds->class_names = sorted; /* the strings move from l to ds */
        free(l->names);
        l->names = NULL;
        l->n = 0;
    }
    for (size_t i = 0; i < n; i++) ds->y_class[i] = class_of[(int)ids[i]];
    free(class_of);
    ds->n_classes = n_classes;
    return 0;
}

/* Lines of a file, read in blocks; each line is NUL-terminated in place
 * (without its '\n'). */
typedef struct line_reader {
    FILE *fp;
    char *buf;
    size_t cap, start, end; /* buf[start, end) is read and not yet returned */
    int eof;
} line_reader;

/* 1 and *line, *len; 0 at the end; HPO_ETOOLARGE (a line over
 * CSV_MAX_LINE), HPO_EIO or HPO_ENOMEM. */
static int next_line(line_reader *r, char **line, size_t *len) {
    for (;;) {
        char *b = r->buf + r->start;
        char *nl = memchr(b, '\n', r->end - r->start);
        if (nl || (r->eof && r->end > r->start)) {
            size_t n = nl ? (size_t)(nl - b) : r->end - r->start;
            b[n] = '\0'; /* at eof there is room: end < cap (see below) */
            r->start += nl ? n + 1 : n;
            *line = b;
            *len = n;
            return 1;
        }
        if (r->eof) return 0;
        if (r->start) { /* keep the partial line at the front */
            memmove(r->buf, b, r->end - r->start);
            r->end -= r->start;
            r->start = 0;
        }
        if (r->end + 1 >= r->cap) {
            if (r->cap >= CSV_MAX_LINE) return HPO_ETOOLARGE;
            char *t = realloc(r->buf, r->cap * 2);
            if (!t) return HPO_ENOMEM;
            r->buf = t;
            r->cap *= 2;
        }
        size_t k = fread(r->buf + r->end, 1, r->cap - 1 - r->end, r->fp);
        r->end += k;
        if (k == 0) {
            if (ferror(r->fp)) return HPO_EIO;
            r->eof = 1;
        }
    }
}

/* A line from next_line, or the error it gave as an hpo_fail. */
static int read_line(line_reader *r, const char *path, long lineno, char **line, hpo_error *err) {
    size_t len;
    int k = next_line(r, line, &len);
    if (k == HPO_ETOOLARGE)
        return hpo_fail(err, HPO_ETOOLARGE, "dataset", "%s: line %ld is over %zu bytes", path,
                        lineno, CSV_MAX_LINE);
    if (k == HPO_EIO) return hpo_fail(err, HPO_EIO, "path", "cannot read %s", path);
    if (k == HPO_ENOMEM) return hpo_fail(err, HPO_ENOMEM, "path", "%s: out of memory", path);
    if (k == 1 && strlen(*line) != len)
        return hpo_fail(err, HPO_EFORMAT, "path", "%s: line %ld: binary data (NUL byte) in a CSV file",
                        path, lineno);
    return k;
}

int eng_load_csv(const char *path, const char *label_column, int classify, eng_dataset **out,
                 hpo_error *err) {
    int rc = 0;
    char **fields = NULL, *line = NULL;
    float *xs = NULL, *ys = NULL;
    eng_dataset *ds = NULL;
    line_reader rd = {0};
    labels lab = {0};
    if (!path || !label_column || !*label_column)
        return hpo_fail(err, HPO_EINVAL, "dataset.label_column",
                        "CSV needs a file and a label column name");
    rd.fp = fopen(path, "rb");
    if (!rd.fp)
        return hpo_fail(err, errno == ENOENT ? HPO_ENOTFOUND : HPO_EIO, "path",
                        "cannot open %s: %s", path, strerror(errno));
    rd.cap = 1 << 16;
    rd.buf = malloc(rd.cap);
    if (!rd.buf) goto oom;

    /* header: first non-blank line */
    long lineno = 0;
    int ncols = -1, label = -1;
    for (;;) {
        lineno++;
        if ((rc = read_line(&rd, path, lineno, &line, err)) < 0) goto fail;
        if (rc == 0) break;
        if (lineno == 1 && strncmp(line, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 BOM (Excel's "CSV UTF-8") */
            line += 3;
        if (is_blank(line)) continue;
        /* as many field pointers as the header has fields, at most CSV_MAX_COLS */
        size_t nf_max = 1;
        for (const char *c = line; (c = strchr(c, ',')) && nf_max <= CSV_MAX_COLS; c++) nf_max++;
        if (nf_max > CSV_MAX_COLS) nf_max = CSV_MAX_COLS;
        fields = malloc(nf_max * sizeof *fields);
        if (!fields) goto oom;
        ncols = split_fields(line, fields, (int)nf_max);
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
    /* a row takes nf features and one label, 4 bytes each, in memory */
    size_t row_bytes = ((size_t)nf + 1) * 4, max_rows = eng_data_max_bytes() / row_bytes;
    if (max_rows > UINT32_MAX) max_rows = UINT32_MAX;
    size_t n = 0, rcap = ((size_t)32 << 10) / row_bytes; /* 32 KiB to start, then doubling */
    if (rcap < 1) rcap = 1;
    if (rcap > max_rows) rcap = max_rows;
    xs = malloc((rcap ? rcap : 1) * (size_t)nf * sizeof *xs);
    ys = malloc((rcap ? rcap : 1) * sizeof *ys);
    if (!xs || !ys) goto oom;
    for (;;) {
        lineno++;
        if ((rc = read_line(&rd, path, lineno, &line, err)) < 0) goto fail;
        if (rc == 0) break;
        if (is_blank(line)) continue;
        int k = split_fields(line, fields, ncols);
        if (k != ncols) {
            if (k < 0)
                rc = hpo_fail(err, HPO_EFORMAT, "path",
                              "%s: line %ld: more than the %d fields of the header", path, lineno,
                              ncols);
            else
                rc = hpo_fail(err, HPO_EFORMAT, "path", "%s: line %ld: %d fields, the header has %d",
                              path, lineno, k, ncols);
            goto fail;
        }
        if (n == rcap) {
            if (n >= max_rows) {
                char desc[96];
                snprintf(desc, sizeof desc, "line %ld: %zu rows of %d columns", lineno, n + 1,
                         ncols);
                rc = n >= UINT32_MAX ? hpo_fail(err, HPO_ETOOLARGE, "dataset",
                                                "%s: too many rows", path)
                                     : eng_data_check_bytes(path, desc, (n + 1) * row_bytes, err);
                goto fail;
            }
            rcap = rcap > max_rows / 2 ? max_rows : rcap * 2;
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
            if (i == label && classify) { /* a class number or a name (see the top) */
                if (!*fields[i]) {
                    rc = hpo_fail(err, HPO_EFORMAT, "path",
                                  "%s: line %ld, column %d: the label is empty: every row needs its class (drop "
                                  "or fill in that row)", path, lineno, i + 1);
                    goto fail;
                }
                int id = label_id(&lab, fields[i], lineno);
                if (id == HPO_ETOOLARGE) {
                    rc = hpo_fail(err, HPO_EFORMAT, "dataset.label_column",
                                  "%s: line %ld: more than %d distinct labels in column '%s': is it a class "
                                  "column? (a regression target is a number)", path, lineno, ENG_CSV_MAX_CLASSES,
                                  label_column);
                    goto fail;
                }
                if (id < 0) goto oom;
                ys[n] = (float)id;
                continue;
            }
            if (parse_num(fields[i], &v) < 0) {
                rc = hpo_fail(err, HPO_EFORMAT, "path",
                              "%s: line %ld, column %d: '%.40s' is not a number", path, lineno,
                              i + 1, fields[i]);
                goto fail;
            }
            if (!isfinite((float)v)) {
                rc = hpo_fail(err, HPO_EFORMAT, "path",
                              "%s: line %ld, column %d: '%.40s' is not a finite float32 number: datasets must hold "
                              "finite numbers (drop or fill in that row)", path, lineno, i + 1, fields[i]);
                goto fail;
            }
            if (i == label) {
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
    /* the parsed rows become x (trimmed to n rows): no second copy; the
     * x that eng_dataset_new allocated was never touched */
    float *x = realloc(xs, n * (size_t)nf * sizeof *xs);
    free(ds->x);
    ds->x = x ? x : xs;
    xs = NULL;
    if (classify) {
        if ((rc = labels_to_classes(&lab, ys, n, ds, path, err)) == HPO_ENOMEM) goto oom;
        if (rc < 0) goto fail;
    } else {
        memcpy(ds->y_target, ys, n * sizeof *ys);
    }
    free(rd.buf);
    free(fields);
    free(ys);
    labels_clear(&lab);
    fclose(rd.fp);
    *out = ds;
    return 0;
oom:
    rc = hpo_fail(err, HPO_ENOMEM, "path", "%s: out of memory", path);
fail:
    free(rd.buf);
    free(fields);
    free(xs);
    free(ys);
    labels_clear(&lab);
    eng_dataset_release(ds);
    fclose(rd.fp);
    return rc;
}
