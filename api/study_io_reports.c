/* study_io_reports.c - what a study document (study_io.c) says of a
 * trial's reports besides their values, so that the pruner of a copy or
 * an import answers as the original's does:
 *
 *   "reports": {"<step>": {"values": [v0, v1, ...], "late": true,
 *               "pruned": true, "rung": r}, ...}
 *
 * beside Optuna's "intermediate_values" (which stays one number per step).
 * A step is listed only when it has something to say: "values" is the
 * vector a study with several objectives and a pruner ranked (MO-ASHA;
 * values[0] is the step's intermediate value, null a component not told),
 * "late" a report made after a higher step of its trial (no rung's value
 * for other trials), "pruned" the report the pruner said stop at, with the
 * rung it said so at (asha, hyperband). Without "reports" a step is late
 * when a higher one comes before it in intermediate_values, and none was
 * pruned (an Optuna document, or one written before this key). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

/* rungs the storage encoding keeps (sto_intermediate.rung) */
#define MAX_RUNG 63

json_t *api_doc_report(const api_study_def *d, const sto_intermediate *row, const sto_epoch *eps, size_t n_eps) {
    json_t *o = json_object();
    if (api_reports_vectors(d)) {
        double vec[TUN_MAX_OBJECTIVES];
        api_report_vector(d, eps, n_eps, row->step, row->value, vec);
        json_t *values = json_array();
        for (int k = 0; k < d->n_obj; k++) json_array_append_new(values, api_json_real(vec[k]));
        json_object_set_new(o, "values", values);
    }
    if (row->flags & STO_STEP_LATE) json_object_set_new(o, "late", json_true());
    if (row->flags & STO_STEP_PRUNED) {
        json_object_set_new(o, "pruned", json_true());
        if (row->rung >= 0) json_object_set_new(o, "rung", json_integer(row->rung));
    }
    if (json_object_size(o) == 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void api_doc_steps_free(api_doc_steps *s, size_t n) {
    for (size_t i = 0; s->curves && i < n; i++) free(s->curves[i]);
    free(s->flags);
    free(s->rungs);
    free(s->curves);
    memset(s, 0, sizeof *s);
}

/* One step's object of "reports" (field names it) into slot i of out;
 * value is the step's intermediate value. */
static int read_step(const json_t *o, const api_study_def *d, double value, const char *field, size_t i,
                     api_doc_steps *out, hpo_error *err) {
    static const char *keys[] = {"values", "late", "pruned", "rung"};
    if (!json_is_object(o)) return hpo_fail(err, HPO_EINVAL, field, "%s must be an object", field);
    const char *key;
    const json_t *v;
    char f[160];
    json_object_foreach((json_t *)o, key, v) {
        size_t k = 0;
        while (k < HPO_ARRAY_LEN(keys) && strcmp(key, keys[k]) != 0) k++;
        if (k == HPO_ARRAY_LEN(keys)) {
            snprintf(f, sizeof f, "%.100s.%.40s", field, key);
            return hpo_fail(err, HPO_EINVAL, f, "unknown key \"%.40s\" in %s (values, late, pruned, rung)", key,
                            field);
        }
    }
    const json_t *late = json_object_get(o, "late"), *pruned = json_object_get(o, "pruned"),
                 *rung = json_object_get(o, "rung"), *values = json_object_get(o, "values");
    const char *bad = late && !json_is_boolean(late) ? "late" : pruned && !json_is_boolean(pruned) ? "pruned" : NULL;
    if (bad) {
        snprintf(f, sizeof f, "%.100s.%s", field, bad);
        return hpo_fail(err, HPO_EINVAL, f, "%s must be true or false", f);
    }
    if (rung && (!json_is_integer(rung) || json_integer_value(rung) < 0 || json_integer_value(rung) > MAX_RUNG ||
                 !json_is_true(pruned))) {
        snprintf(f, sizeof f, "%.100s.rung", field);
        return hpo_fail(err, HPO_EINVAL, f, "%s must be an integer from 0 to %d, given with \"pruned\": true", f,
                        MAX_RUNG);
    }
    out->flags[i] = (json_is_true(late) ? STO_STEP_LATE : 0) | (json_is_true(pruned) ? STO_STEP_PRUNED : 0);
    out->rungs[i] = rung ? (int)json_integer_value(rung) : -1;
    if (!values) return 0;
    snprintf(f, sizeof f, "%.100s.values", field);
    if (!api_reports_vectors(d))
        return hpo_fail(err, HPO_EINVAL, f,
                        "%s: this study's reports are single values (a vector is ranked only with several "
                        "objectives and a pruner)", f);
    if (!json_is_array(values) || json_array_size(values) != (size_t)d->n_obj)
        return hpo_fail(err, HPO_EINVAL, f, "%s holds one number (or null) per objective (this study has %d)", f,
                        d->n_obj);
    double vec[TUN_MAX_OBJECTIVES];
    for (int k = 0; k < d->n_obj; k++) {
        const json_t *e = json_array_get(values, (size_t)k);
        if (!json_is_number(e) && !json_is_null(e))
            return hpo_fail(err, HPO_EINVAL, f, "%s[%d] must be a number or null", f, k);
        vec[k] = json_is_number(e) ? json_number_value(e) : NAN;
    }
    if (!(vec[0] == value || (isnan(vec[0]) && isnan(value))))
        return hpo_fail(err, HPO_EINVAL, f, "%s: values[0] (%.17g) is not the step's intermediate value (%.17g)", f,
                        vec[0], value);
    if (!(out->curves[i] = api_vector_curve(d, vec))) return HPO_ENOMEM;
    return 0;
}

typedef struct step_at {
    int64_t step;
    size_t i;
} step_at;

static int cmp_step(const void *a, const void *b) {
    const step_at *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

/* The index in steps (sorted as by, n of them) of the step key names as
 * intermediate_values' keys are written, or -1. */
static long find_step(const char *key, const step_at *by, size_t n) {
    int64_t step;
    if (!api_step_key(key, &step)) return -1;
    step_at want = {step, 0}, *hit = bsearch(&want, by, n, sizeof *by, cmp_step);
    return hit ? (long)hit->i : -1;
}

int api_doc_reports_read(const json_t *reports, const api_study_def *d, const int64_t *steps, const double *values,
                         size_t n, const char *field, api_doc_steps *out, hpo_error *err) {
    memset(out, 0, sizeof *out);
    if (!reports || json_is_null(reports)) return 0;
    if (!json_is_object(reports))
        return hpo_fail(err, HPO_EINVAL, field, "%s must be an object {\"<step>\": {...}, ...}", field);
    out->flags = hpo_xcalloc(n + 1, sizeof *out->flags);
    out->rungs = hpo_xcalloc(n + 1, sizeof *out->rungs);
    out->curves = hpo_xcalloc(n + 1, sizeof *out->curves);
    step_at *by = hpo_xcalloc(n + 1, sizeof *by);
    for (size_t i = 0; i < n; i++) {
        out->rungs[i] = -1;
        by[i] = (step_at){steps[i], i};
    }
    qsort(by, n, sizeof *by, cmp_step);
    int rc = 0;
    const char *key;
    const json_t *o;
    json_object_foreach((json_t *)reports, key, o) {
        char f[160];
        snprintf(f, sizeof f, "%s.%.40s", field, key);
        long i = find_step(key, by, n);
        rc = i < 0 ? hpo_fail(err, HPO_EINVAL, f, "%s: intermediate_values has no step \"%.40s\"", f, key)
                   : read_step(o, d, values[i], f, (size_t)i, out, err);
        if (rc) break;
    }
    free(by);
    if (rc) api_doc_steps_free(out, n);
    return rc;
}
