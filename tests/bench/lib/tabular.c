/* tabular.c - the tabular benchmark's grid, its table file and lookups
 * (tabular.h). */
#include "tabular.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The grid. "mlp": flatten, `layers` dense layers of `units` (relu) each
 * followed by dropout, softmax; "cnn": `convs` blocks of conv2d 3x3 (same,
 * relu; filters, then twice that) + maxpool 2, then dense(`units`), softmax.
 * sgd has momentum 0.9. Changing an axis changes the ids: regenerate. */
const tab_task tab_tasks[TAB_N_TASKS] = {
    {"mlp",
     6,
     {{"layers", TAB_INT, 3, {1, 2, 3}, {0}},
      {"units", TAB_INT_LOG, 3, {32, 128, 512}, {0}},
      {"lr", TAB_FLOAT_LOG, 4, {1e-4, 1e-3, 1e-2, 1e-1}, {0}},
      {"dropout", TAB_FLOAT_STEP, 2, {0, 0.4}, {0}},
      {"batch", TAB_CHOICE, 2, {0, 1}, {"32", "256"}},
      {"optimizer", TAB_CHOICE, 2, {0, 1}, {"adam", "sgd"}}}},
    {"cnn",
     5,
     {{"convs", TAB_INT, 2, {1, 2}, {0}},
      {"filters", TAB_INT_LOG, 3, {4, 8, 16}, {0}},
      {"units", TAB_INT_LOG, 2, {32, 128}, {0}},
      {"lr", TAB_FLOAT_LOG, 4, {1e-4, 1e-3, 1e-2, 1e-1}, {0}},
      {"optimizer", TAB_CHOICE, 2, {0, 1}, {"adam", "sgd"}}}},
};

int tab_task_index(const char *name) {
    for (int i = 0; i < TAB_N_TASKS; i++)
        if (strcmp(tab_tasks[i].name, name) == 0) return i;
    return -1;
}

int tab_task_size(const tab_task *t) {
    int n = 1;
    for (int a = 0; a < t->n_axes; a++) n *= t->axes[a].n;
    return n;
}

void tab_decode(const tab_task *t, int id, int *idx) {
    for (int a = t->n_axes - 1; a >= 0; a--) {
        idx[a] = id % t->axes[a].n;
        id /= t->axes[a].n;
    }
}

int tab_encode(const tab_task *t, const int *idx) {
    int id = 0;
    for (int a = 0; a < t->n_axes; a++) id = id * t->axes[a].n + idx[a];
    return id;
}

int tab_snap(const tab_axis *a, double v) {
    if (isnan(v)) return 0;
    int lg = a->kind == TAB_INT_LOG || a->kind == TAB_FLOAT_LOG;
    if (lg) v = log(v > 0 ? v : 1e-300);
    int best = 0;
    double bd = INFINITY;
    for (int i = 0; i < a->n; i++) {
        double g = lg ? log(a->values[i]) : a->values[i];
        double d = fabs(v - g);
        if (d < bd) bd = d, best = i;
    }
    return best;
}

void tab_params_text(const tab_task *t, int id, char *buf, size_t len) {
    int idx[TAB_MAX_AXES];
    tab_decode(t, id, idx);
    size_t o = 0;
    buf[0] = 0;
    for (int a = 0; a < t->n_axes && o < len; a++) {
        const tab_axis *ax = &t->axes[a];
        int w = ax->kind == TAB_CHOICE ? snprintf(buf + o, len - o, "%s%s=%s", a ? " " : "", ax->name, ax->labels[idx[a]])
                                       : snprintf(buf + o, len - o, "%s%s=%g", a ? " " : "", ax->name, ax->values[idx[a]]);
        if (w < 0) break;
        o += (size_t)w;
    }
}

double tab_best_of(const tab_curve *c, int k) {
    double b = -INFINITY;
    for (int e = 0; e < k && e < c->epochs; e++)
        if (c->acc[e] > b) b = c->acc[e];
    return b;
}

void tab_clear(tab_table *t) {
    for (int i = 0; i < TAB_N_TASKS; i++) free(t->curves[i]);
    memset(t, 0, sizeof *t);
}

/* Reads n numbers separated by spaces from s into v; lo/hi bound them. */
static int read_list(const char *s, int n, float *v, double lo, double hi) {
    char *end;
    for (int i = 0; i < n; i++) {
        double x = strtod(s, &end);
        if (end == s || !isfinite(x) || x < lo || x > hi) return -1;
        v[i] = (float)x;
        s = end;
        if (i + 1 < n && *s != ' ') return -1;
    }
    return *s == 0 ? 0 : -1;
}

/* Splits line at commas into at most max fields (in place). */
static int split(char *line, char **f, int max) {
    int n = 0;
    f[n++] = line;
    for (char *p = line; *p; p++)
        if (*p == ',') {
            *p = 0;
            if (n == max) return -1;
            f[n++] = p + 1;
        }
    return n;
}

int tab_load(const char *path, int complete, tab_table *out, char *msg, size_t msg_len) {
    tab_table t;
    memset(&t, 0, sizeof t);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(msg, msg_len, "%s: cannot open", path);
        return -1;
    }
    for (int i = 0; i < TAB_N_TASKS; i++) t.curves[i] = calloc((size_t)tab_task_size(&tab_tasks[i]), sizeof(tab_curve));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long ln = 0;
    int rc = -1;
    while ((len = getline(&line, &cap, fp)) >= 0) {
        ln++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0 || line[0] == '#') continue;
        char *f[8];
        if (split(line, f, 8) != 7) {
            snprintf(msg, msg_len, "%s:%ld: expected 7 comma-separated fields", path, ln);
            goto done;
        }
        int ti = tab_task_index(f[0]);
        if (ti < 0) {
            snprintf(msg, msg_len, "%s:%ld: unknown task \"%s\"", path, ln, f[0]);
            goto done;
        }
        const tab_task *task = &tab_tasks[ti];
        char *end;
        long id = strtol(f[1], &end, 10), ep = strtol(f[3], NULL, 10);
        if (*end || id < 0 || id >= tab_task_size(task)) {
            snprintf(msg, msg_len, "%s:%ld: config id \"%s\" out of range", path, ln, f[1]);
            goto done;
        }
        char want[512];
        tab_params_text(task, (int)id, want, sizeof want);
        if (strcmp(want, f[2]) != 0) {
            snprintf(msg, msg_len, "%s:%ld: params \"%s\" are not config %ld's (%s): another grid", path, ln, f[2], id,
                     want);
            goto done;
        }
        tab_curve *c = &t.curves[ti][id];
        if (c->epochs) {
            snprintf(msg, msg_len, "%s:%ld: %s config %ld given twice", path, ln, task->name, id);
            goto done;
        }
        if (ep < 1 || ep > TAB_MAX_EPOCHS) {
            snprintf(msg, msg_len, "%s:%ld: epochs %s not in 1..%d", path, ln, f[3], TAB_MAX_EPOCHS);
            goto done;
        }
        if (read_list(f[4], (int)ep, c->acc, 0, 1) || read_list(f[5], (int)ep, c->loss, 0, 1e30) ||
            read_list(f[6], (int)ep, c->sec, 0, 1e6)) {
            snprintf(msg, msg_len, "%s:%ld: a curve is not %ld finite numbers in range", path, ln, ep);
            goto done;
        }
        c->epochs = (int)ep;
        t.n[ti]++;
        if (ep > t.max_epochs) t.max_epochs = (int)ep;
    }
    for (int ti = 0; ti < TAB_N_TASKS; ti++) {
        int n = tab_task_size(&tab_tasks[ti]);
        t.best[ti] = -INFINITY;
        for (int id = 0; id < n; id++) {
            const tab_curve *c = &t.curves[ti][id];
            if (complete && c->epochs == 0) {
                snprintf(msg, msg_len, "%s: %s config %d missing (the grid is incomplete)", path, tab_tasks[ti].name,
                         id);
                goto done;
            }
            double b = tab_best_of(c, c->epochs);
            if (b > t.best[ti]) t.best[ti] = b;
        }
    }
    rc = 0;
done:
    free(line);
    fclose(fp);
    if (rc) tab_clear(&t);
    else *out = t;
    return rc;
}
