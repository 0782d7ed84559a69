/*
 * space.c - search spaces: parsing and validating a "space" object, the
 * encoding of a configuration as a vector of doubles, sampling, snapping and
 * the JSON conversions (see the design notes in tuners.h).
 *
 * Parsing runs in three passes: every parameter's own fields, then the
 * conditions (which need every parameter to exist), then a stable
 * parents-first ordering (each parameter after its parent, otherwise in the
 * order of the JSON object), which also detects cycles.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuners_internal.h"
#include "rng.h"
#include "tuners.h"

#define NAME_MAX_LEN 64
#define INT_LIMIT 9007199254740992.0 /* 2^53: every int is exact in a double */
#define NUM_LIMIT 1e300

/* ---- small JSON helpers ---- */

static int json_to_int(const json_t *v, int64_t *out) {
    double d;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i > (json_int_t)INT_LIMIT || i < -(json_int_t)INT_LIMIT) return 0;
        *out = (int64_t)i;
        return 1;
    }
    if (!json_is_real(v)) return 0;
    d = json_real_value(v);
    if (!isfinite(d) || d != floor(d) || fabs(d) > INT_LIMIT) return 0;
    *out = (int64_t)d;
    return 1;
}

static int json_to_num(const json_t *v, double *out) {
    if (!json_is_number(v)) return 0;
    double d = json_number_value(v);
    if (!isfinite(d) || fabs(d) > NUM_LIMIT) return 0;
    *out = d;
    return 1;
}

/* Choice values are equal when of the same kind and equal; numbers compare
 * numerically (1 and 1.0 are the same value), true is not 1. */
static int value_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_is_string(a) && json_is_string(b)) /* length-aware: "\u0000" is allowed */
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    if (json_is_boolean(a) && json_is_boolean(b))
        return json_is_true(a) == json_is_true(b);
    return 0;
}

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > NAME_MAX_LEN) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == '-';
        if (!ok) return 0;
    }
    return 1;
}

static const char *type_name(tun_param_type t) {
    switch (t) {
    case TUN_INT: return "int";
    case TUN_FLOAT: return "float";
    case TUN_CHOICE: return "choice";
    case TUN_BOOL: return "bool";
    }
    return "?";
}

/* ---- the values of a discrete parameter ---- */

int64_t tun_param_n_values(const tun_param *p) {
    switch (p->type) {
    case TUN_INT: return (int64_t)floor((p->high - p->low) / p->step) + 1;
    case TUN_FLOAT: {
        if (p->step <= 0) return 0;
        /* high counts when it is low + k step up to rounding, relative to k
         * (an absolute 1e-9 missed it past 1e8 steps) */
        double q = (p->high - p->low) / p->step, k = nearbyint(q);
        return (int64_t)(fabs(q - k) <= 1e-9 * fmax(1.0, k) ? k : floor(q)) + 1;
    }
    case TUN_CHOICE: return p->n_choices;
    case TUN_BOOL: return 2;
    }
    return 0;
}

double tun_param_value_at(const tun_param *p, int64_t k) {
    switch (p->type) {
    case TUN_INT: return p->low + (double)k * p->step;
    case TUN_FLOAT: {
        if (p->step <= 0) return NAN;
        /* low + k*step, cleaned of binary noise (0.1*3 -> 0.3: 15 digits)
         * where that moves it by a sliver of the step only (a value that
         * needs more digits, 1e15 + 2, keeps them: points stay distinct),
         * and kept in bounds */
        char buf[64];
        double v = p->low + (double)k * p->step;
        snprintf(buf, sizeof buf, "%.15g", v);
        double clean = strtod(buf, NULL);
        if (fabs(clean - v) <= 1e-9 * p->step) v = clean;
        if (v > p->high) v = p->high;
        if (v < p->low) v = p->low;
        return v;
    }
    case TUN_CHOICE:
    case TUN_BOOL: return (double)k;
    }
    return NAN;
}

int64_t tun_param_index_of(const tun_param *p, double v) {
    int64_t n = tun_param_n_values(p);
    if (!isfinite(v) || n <= 0) return -1;
    switch (p->type) {
    case TUN_INT: {
        if (v != floor(v) || v < p->low || v > p->high) return -1;
        double q = (v - p->low) / p->step;
        if (q != floor(q)) return -1;
        return (int64_t)q;
    }
    case TUN_FLOAT: {
        double q = nearbyint((v - p->low) / p->step);
        if (q < 0 || q >= (double)n) return -1;
        int64_t k = (int64_t)q;
        double w = tun_param_value_at(p, k);
        if (fabs(w - v) > 1e-9 * fmax(1.0, fabs(v))) return -1;
        return k;
    }
    case TUN_CHOICE:
    case TUN_BOOL:
        if (v != floor(v) || v < 0 || v >= (double)n) return -1;
        return (int64_t)v;
    }
    return -1;
}

/* ---- parsing ---- */

/* Sets err->field to "space.<name>[.<key>]" and the message; returns HPO_EINVAL. */
static int field_fail(hpo_error *err, const char *name, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int field_fail(hpo_error *err, const char *name, const char *key, const char *fmt, ...) {
    if (!err) return HPO_EINVAL;
    if (key)
        snprintf(err->field, sizeof err->field, "space.%s.%s", name, key);
    else
        snprintf(err->field, sizeof err->field, "space.%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return HPO_EINVAL;
}

static int check_keys(const json_t *spec, const char *name, const char *const *allowed,
                      hpo_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)spec, key, v) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            if (strcmp(key, allowed[i]) == 0) ok = 1;
        if (!ok) {
            if (!valid_name(key))
                return field_fail(err, name, NULL, "unknown key in parameter '%s'", name);
            return field_fail(err, name, key, "unknown key '%s' for a parameter of this type",
                              key);
        }
    }
    return 0;
}

static int parse_log(const json_t *spec, const char *name, int *log, hpo_error *err) {
    const json_t *v = json_object_get(spec, "log");
    *log = 0;
    if (!v) return 0;
    if (!json_is_boolean(v)) return field_fail(err, name, "log", "must be true or false");
    *log = json_is_true(v);
    return 0;
}

static int parse_int_param(const json_t *spec, const char *name, tun_param *p, hpo_error *err) {
    static const char *const keys[] = {"type", "low", "high", "step", "log", "condition", NULL};
    int64_t lo, hi, step = 1;
    int rc = check_keys(spec, name, keys, err);
    if (rc) return rc;
    const json_t *v = json_object_get(spec, "low");
    if (!v) return field_fail(err, name, "low", "is required for an int parameter");
    if (!json_to_int(v, &lo)) return field_fail(err, name, "low", "must be an integer (|x| <= 2^53)");
    v = json_object_get(spec, "high");
    if (!v) return field_fail(err, name, "high", "is required for an int parameter");
    if (!json_to_int(v, &hi)) return field_fail(err, name, "high", "must be an integer (|x| <= 2^53)");
    if (lo > hi) return field_fail(err, name, "low", "low (%lld) must not exceed high (%lld)",
                                   (long long)lo, (long long)hi);
    if ((double)hi - (double)lo > INT_LIMIT)
        return field_fail(err, name, "high", "the range high - low must not exceed 2^53");
    v = json_object_get(spec, "step");
    if (v && (!json_to_int(v, &step) || step < 1))
        return field_fail(err, name, "step", "must be an integer >= 1");
    if ((rc = parse_log(spec, name, &p->log, err))) return rc;
    if (p->log && lo < 1)
        return field_fail(err, name, "log", "a log-scale int needs low >= 1 (low is %lld)",
                          (long long)lo);
    if (p->log && step != 1)
        return field_fail(err, name, "step", "a log-scale int cannot have a step other than 1");
    p->type = TUN_INT;
    p->low = (double)lo;
    p->high = (double)hi;
    p->step = (double)step;
    return 0;
}

static int parse_float_param(const json_t *spec, const char *name, tun_param *p, hpo_error *err) {
    static const char *const keys[] = {"type", "low", "high", "step", "log", "condition", NULL};
    double lo, hi, step = 0;
    int rc = check_keys(spec, name, keys, err);
    if (rc) return rc;
    const json_t *v = json_object_get(spec, "low");
    if (!v) return field_fail(err, name, "low", "is required for a float parameter");
    if (!json_to_num(v, &lo)) return field_fail(err, name, "low", "must be a finite number");
    v = json_object_get(spec, "high");
    if (!v) return field_fail(err, name, "high", "is required for a float parameter");
    if (!json_to_num(v, &hi)) return field_fail(err, name, "high", "must be a finite number");
    if (lo > hi) return field_fail(err, name, "low", "low (%g) must not exceed high (%g)", lo, hi);
    if (!isfinite(hi - lo)) return field_fail(err, name, "high", "the range high - low overflows");
    v = json_object_get(spec, "step");
    if (v) {
        if (!json_to_num(v, &step) || step <= 0)
            return field_fail(err, name, "step", "must be a number > 0");
        if ((hi - lo) / step > INT_LIMIT)
            return field_fail(err, name, "step", "too small for the range (more than 2^53 values)");
    }
    if ((rc = parse_log(spec, name, &p->log, err))) return rc;
    if (p->log && lo <= 0)
        return field_fail(err, name, "log", "a log-scale float needs low > 0 (low is %g)", lo);
    if (p->log && step > 0)
        return field_fail(err, name, "step", "a log-scale float cannot have a step");
    p->type = TUN_FLOAT;
    p->low = lo;
    p->high = hi;
    p->step = step;
    return 0;
}

static int parse_choice_param(const json_t *spec, const char *name, tun_param *p, hpo_error *err) {
    static const char *const keys[] = {"type", "values", "condition", NULL};
    int rc = check_keys(spec, name, keys, err);
    if (rc) return rc;
    json_t *vals = json_object_get(spec, "values");
    if (!vals) return field_fail(err, name, "values", "is required for a choice parameter");
    if (!json_is_array(vals)) return field_fail(err, name, "values", "must be an array");
    size_t n = json_array_size(vals);
    if (n == 0) return field_fail(err, name, "values", "must not be empty");
    if (n > TUN_MAX_CHOICES)
        return field_fail(err, name, "values", "has %zu entries; at most %d are allowed", n,
                          TUN_MAX_CHOICES);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(vals, i);
        if (json_is_real(a) && !isfinite(json_real_value(a)))
            return field_fail(err, name, "values", "entry %zu is not a finite number", i);
        if (!json_is_string(a) && !json_is_number(a) && !json_is_boolean(a))
            return field_fail(err, name, "values",
                              "entry %zu must be a string, a number or a boolean", i);
        for (size_t j = 0; j < i; j++)
            if (value_equal(a, json_array_get(vals, j)))
                return field_fail(err, name, "values", "entries %zu and %zu are the same value", j,
                                  i);
    }
    p->type = TUN_CHOICE;
    p->choices = json_deep_copy(vals);
    if (!p->choices) return HPO_ENOMEM;
    p->n_choices = (int)n;
    p->low = 0;
    p->high = (double)(n - 1);
    p->step = 1;
    return 0;
}

static int parse_bool_param(const json_t *spec, const char *name, tun_param *p, hpo_error *err) {
    static const char *const keys[] = {"type", "condition", NULL};
    int rc = check_keys(spec, name, keys, err);
    if (rc) return rc;
    p->type = TUN_BOOL;
    p->n_choices = 2;
    p->low = 0;
    p->high = 1;
    p->step = 1;
    return 0;
}

static int parse_param(const json_t *spec, const char *name, tun_param *p, hpo_error *err) {
    if (!json_is_object(spec))
        return field_fail(err, name, NULL, "a parameter must be an object with a \"type\"");
    const json_t *t = json_object_get(spec, "type");
    if (!t) return field_fail(err, name, "type", "is required (int, float, choice or bool)");
    if (!json_is_string(t)) return field_fail(err, name, "type", "must be a string");
    const char *ts = json_string_value(t);
    if (strcmp(ts, "int") == 0) return parse_int_param(spec, name, p, err);
    if (strcmp(ts, "float") == 0) return parse_float_param(spec, name, p, err);
    if (strcmp(ts, "choice") == 0) return parse_choice_param(spec, name, p, err);
    if (strcmp(ts, "bool") == 0) return parse_bool_param(spec, name, p, err);
    return field_fail(err, name, "type", "unknown type; expected int, float, choice or bool");
}

/* Encodes a JSON value of parameter p (as a condition would name it); 0 if it
 * is not one of p's values. */
static int encode_value(const tun_param *p, const json_t *v, double *out) {
    int64_t i;
    switch (p->type) {
    case TUN_INT:
        if (!json_to_int(v, &i) || tun_param_index_of(p, (double)i) < 0) return 0;
        *out = (double)i;
        return 1;
    case TUN_BOOL:
        if (!json_is_boolean(v)) return 0;
        *out = json_is_true(v) ? 1.0 : 0.0;
        return 1;
    case TUN_CHOICE:
        for (int k = 0; k < p->n_choices; k++)
            if (value_equal(v, json_array_get(p->choices, (size_t)k))) {
                *out = (double)k;
                return 1;
            }
        return 0;
    case TUN_FLOAT: return 0;
    }
    return 0;
}

static int parse_condition(const json_t *spec, tun_param *params, int n, int i, hpo_error *err) {
    tun_param *p = &params[i];
    const json_t *c = json_object_get(spec, "condition");
    if (!c) return 0;
    if (!json_is_object(c) || json_object_size(c) != 1)
        return field_fail(err, p->name, "condition",
                          "must be an object naming one parent: {\"<parent>\": [values]}");
    const char *pname = NULL;
    json_t *allowed = NULL;
    {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)c, key, v) {
            pname = key;
            allowed = v;
        }
    }
    int parent = -1;
    for (int j = 0; j < n; j++)
        if (strcmp(params[j].name, pname) == 0) parent = j;
    if (parent == i)
        return field_fail(err, p->name, "condition", "a parameter cannot be conditional on itself");
    if (parent < 0)
        return field_fail(err, p->name, "condition", "the parent parameter is not in the space");
    const tun_param *q = &params[parent];
    if (q->type == TUN_FLOAT)
        return field_fail(err, p->name, "condition",
                          "the parent '%s' is a float; only choice, bool or int parents are allowed",
                          q->name);
    if (!json_is_array(allowed) || json_array_size(allowed) == 0)
        return field_fail(err, p->name, "condition",
                          "the allowed values of '%s' must be a non-empty array", q->name);
    size_t m = json_array_size(allowed);
    if (m > TUN_MAX_CHOICES)
        return field_fail(err, p->name, "condition", "too many allowed values");
    p->parent_values = hpo_xcalloc(m, sizeof(double));
    p->n_parent_values = 0;
    for (size_t k = 0; k < m; k++) {
        double e;
        if (!encode_value(q, json_array_get(allowed, k), &e))
            return field_fail(err, p->name, "condition",
                              "allowed value %zu is not a value of the %s parameter '%s'", k,
                              type_name(q->type), q->name);
        for (int l = 0; l < p->n_parent_values; l++)
            if (p->parent_values[l] == e)
                return field_fail(err, p->name, "condition", "allowed value %zu is repeated", k);
        p->parent_values[p->n_parent_values++] = e;
    }
    p->parent = parent;
    return 0;
}

/* Appends i to order after its ancestors. state: 0 new, 1 on the stack, 2 placed. */
static int place(tun_param *params, int i, int *state, int *order, int *n_order, hpo_error *err) {
    if (state[i] == 2) return 0;
    if (state[i] == 1)
        return field_fail(err, params[i].name, "condition",
                          "conditions form a cycle through '%s'", params[i].name);
    state[i] = 1;
    if (params[i].parent >= 0) {
        int rc = place(params, params[i].parent, state, order, n_order, err);
        if (rc) return rc;
    }
    state[i] = 2;
    order[(*n_order)++] = i;
    return 0;
}

static void free_params(tun_param *params, int n) {
    if (!params) return;
    for (int i = 0; i < n; i++) {
        free(params[i].name);
        if (params[i].choices) json_decref(params[i].choices);
        free(params[i].parent_values);
    }
    free(params);
}

int tun_space_parse(const json_t *space, tun_space **out, hpo_error *err) {
    tun_param *params = NULL, *sorted = NULL;
    int n = 0, rc;
    int state[TUN_MAX_PARAMS], order[TUN_MAX_PARAMS], where[TUN_MAX_PARAMS], n_order = 0;
    const char *key;
    json_t *spec;

    if (!json_is_object(space))
        return hpo_fail(err, HPO_EINVAL, "space", "the space must be an object of parameters");
    size_t count = json_object_size(space);
    if (count == 0)
        return hpo_fail(err, HPO_EINVAL, "space", "the space must define at least one parameter");
    if (count > TUN_MAX_PARAMS)
        return hpo_fail(err, HPO_EINVAL, "space", "the space has %zu parameters; at most %d",
                        count, TUN_MAX_PARAMS);
    params = hpo_xcalloc(count, sizeof *params);
    json_object_foreach((json_t *)space, key, spec) {
        tun_param *p = &params[n];
        if (!valid_name(key)) {
            rc = hpo_fail(err, HPO_EINVAL, NULL,
                          "parameter names are 1 to %d characters of A-Z a-z 0-9 _ . -",
                          NAME_MAX_LEN);
            if (err) snprintf(err->field, sizeof err->field, "space.%.100s", key);
            goto fail;
        }
        p->name = hpo_strdup(key);
        p->parent = -1;
        n++;
        if ((rc = parse_param(spec, key, p, err))) goto fail;
    }
    {
        int i = 0;
        json_object_foreach((json_t *)space, key, spec) {
            if ((rc = parse_condition(spec, params, n, i, err))) goto fail;
            i++;
        }
    }
    memset(state, 0, sizeof state);
    for (int i = 0; i < n; i++)
        if ((rc = place(params, i, state, order, &n_order, err))) goto fail;

    sorted = hpo_xcalloc((size_t)n, sizeof *sorted);
    for (int k = 0; k < n; k++) where[order[k]] = k;
    for (int k = 0; k < n; k++) {
        sorted[k] = params[order[k]];
        if (sorted[k].parent >= 0) sorted[k].parent = where[sorted[k].parent];
    }
    free(params); /* the fields moved to sorted */
    tun_space *s = hpo_xcalloc(1, sizeof *s);
    s->n = n;
    s->params = sorted;
    *out = s;
    return 0;
fail:
    free_params(params, n);
    return rc;
}

/* Choice values compare as the parser reads them: numbers by value (1 and
 * 1.0 are the same value), anything else as JSON. */
static int same_choices(const json_t *a, const json_t *b) {
    if (!a || !b) return a == b;
    if (json_array_size(a) != json_array_size(b)) return 0;
    for (size_t k = 0; k < json_array_size(a); k++) {
        const json_t *x = json_array_get(a, k), *y = json_array_get(b, k);
        if (json_is_number(x) && json_is_number(y) ? json_number_value(x) != json_number_value(y)
                                                   : !json_equal((json_t *)x, (json_t *)y))
            return 0;
    }
    return 1;
}

int tun_space_equal(const tun_space *a, const tun_space *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++) {
        const tun_param *p = &a->params[i], *q = &b->params[i];
        if (strcmp(p->name, q->name) != 0 || p->type != q->type || p->low != q->low || p->high != q->high ||
            p->step != q->step || p->log != q->log || p->n_choices != q->n_choices || p->parent != q->parent ||
            p->n_parent_values != q->n_parent_values)
            return 0;
        if (!same_choices(p->choices, q->choices)) return 0;
        for (int k = 0; k < p->n_parent_values; k++)
            if (p->parent_values[k] != q->parent_values[k]) return 0;
    }
    return 1;
}

void tun_space_free(tun_space *s) {
    if (!s) return;
    free_params(s->params, s->n);
    free(s);
}

int tun_space_index(const tun_space *s, const char *name) {
    if (!s || !name) return -1;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->params[i].name, name) == 0) return i;
    return -1;
}

/* ---- configurations ---- */

static int parent_allows(const tun_param *p, double pv) {
    if (isnan(pv)) return 0;
    for (int k = 0; k < p->n_parent_values; k++)
        if (p->parent_values[k] == pv) return 1;
    return 0;
}

int tun_space_is_active(const tun_space *s, const double *x, int i) {
    for (int guard = 0; i >= 0 && guard <= s->n; guard++) {
        const tun_param *p = &s->params[i];
        if (p->parent < 0) return 1;
        if (!parent_allows(p, x[p->parent])) return 0;
        i = p->parent;
    }
    return 1;
}

double tun_param_sample(const tun_param *p, hpo_rng *rng) {
    double u = hpo_rng_uniform(rng);
    switch (p->type) {
    case TUN_INT:
        if (p->log) {
            /* uniform in log space over [low - 0.5, high + 0.5], then rounded */
            double a = log(p->low - 0.5), b = log(p->high + 0.5);
            double v = nearbyint(exp(a + u * (b - a)));
            return fmin(fmax(v, p->low), p->high);
        }
        return tun_param_value_at(p, (int64_t)hpo_rng_below(rng, (uint64_t)tun_param_n_values(p)));
    case TUN_FLOAT:
        if (p->step > 0)
            return tun_param_value_at(p,
                                      (int64_t)hpo_rng_below(rng, (uint64_t)tun_param_n_values(p)));
        if (p->log) {
            double a = log(p->low), b = log(p->high);
            return fmin(fmax(exp(a + u * (b - a)), p->low), p->high);
        }
        return fmin(p->low + u * (p->high - p->low), p->high);
    case TUN_CHOICE:
    case TUN_BOOL: return (double)hpo_rng_below(rng, (uint64_t)tun_param_n_values(p));
    }
    return NAN;
}

void tun_space_sample(const tun_space *s, hpo_rng *rng, double *x) {
    for (int i = 0; i < s->n; i++)
        x[i] = tun_space_is_active(s, x, i) ? tun_param_sample(&s->params[i], rng) : NAN;
}

double tun_space_snap(const tun_space *s, int i, double v) {
    const tun_param *p = &s->params[i];
    if (isnan(v)) return NAN;
    v = fmin(fmax(v, p->low), p->high);
    if (p->type == TUN_FLOAT && p->step <= 0) return v;
    if (p->type == TUN_INT && p->log) return nearbyint(v);
    int64_t n = tun_param_n_values(p);
    double k = nearbyint((v - p->low) / p->step);
    if (k < 0) k = 0;
    if (k > (double)(n - 1)) k = (double)(n - 1);
    return tun_param_value_at(p, (int64_t)k);
}

json_t *tun_space_to_json(const tun_space *s, const double *x) {
    json_t *o = json_object();
    if (!o) return NULL;
    for (int i = 0; i < s->n; i++) {
        const tun_param *p = &s->params[i];
        json_t *v = NULL;
        if (isnan(x[i]) || !tun_space_is_active(s, x, i)) continue;
        switch (p->type) {
        case TUN_INT: v = json_integer((json_int_t)llround(x[i])); break;
        case TUN_FLOAT: v = json_real(x[i]); break;
        case TUN_CHOICE: {
            int64_t k = tun_param_index_of(p, x[i]);
            if (k >= 0) v = json_incref(json_array_get(p->choices, (size_t)k));
            break;
        }
        case TUN_BOOL: v = json_boolean(x[i] != 0); break;
        }
        if (v && json_object_set_new(o, p->name, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static int param_fail(hpo_error *err, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int param_fail(hpo_error *err, const char *name, const char *fmt, ...) {
    if (!err) return HPO_EINVAL;
    snprintf(err->field, sizeof err->field, "params.%.100s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return HPO_EINVAL;
}

static int decode_value(const tun_param *p, const json_t *v, double *out, hpo_error *err) {
    int64_t i;
    double d;
    switch (p->type) {
    case TUN_INT:
        if (!json_to_int(v, &i)) return param_fail(err, p->name, "must be an integer");
        if ((double)i < p->low || (double)i > p->high)
            return param_fail(err, p->name, "%lld is outside [%.0f, %.0f]", (long long)i, p->low,
                              p->high);
        if (tun_param_index_of(p, (double)i) < 0)
            return param_fail(err, p->name, "%lld is not low + k * step (step %.0f)",
                              (long long)i, p->step);
        *out = (double)i;
        return 0;
    case TUN_FLOAT:
        if (!json_to_num(v, &d)) return param_fail(err, p->name, "must be a finite number");
        if (d < p->low || d > p->high)
            return param_fail(err, p->name, "%.15g is outside [%.15g, %.15g]", d, p->low, p->high);
        if (p->step > 0) {
            int64_t k = tun_param_index_of(p, d);
            if (k < 0)
                return param_fail(err, p->name, "%.15g is not low + k * step (step %.15g)", d, p->step);
            d = tun_param_value_at(p, k);
        }
        *out = d;
        return 0;
    case TUN_CHOICE:
        if (!encode_value(p, v, &d)) return param_fail(err, p->name, "is not one of the values");
        *out = d;
        return 0;
    case TUN_BOOL:
        if (!json_is_boolean(v)) return param_fail(err, p->name, "must be true or false");
        *out = json_is_true(v) ? 1.0 : 0.0;
        return 0;
    }
    return HPO_EINTERNAL;
}

/* The two readings of a configuration: full (every active parameter given)
 * or partial (those given; a conditional one only with its parent). */
static int from_json(const tun_space *s, const json_t *params, int partial, double *x, hpo_error *err) {
    const char *key;
    json_t *v;
    double tmp[TUN_MAX_PARAMS];
    int rc;

    if (!json_is_object(params))
        return hpo_fail(err, HPO_EINVAL, "params", "the parameters must be a JSON object");
    json_object_foreach((json_t *)params, key, v) {
        if (tun_space_index(s, key) < 0)
            return param_fail(err, key, "is not a parameter of the space");
    }
    for (int i = 0; i < s->n; i++) {
        const tun_param *p = &s->params[i];
        v = json_object_get(params, p->name);
        tmp[i] = NAN;
        int given = v && !json_is_null(v);
        if (partial && given && p->parent >= 0 && isnan(tmp[p->parent]))
            return param_fail(err, p->name, "is conditional on '%s', which must be given too",
                              s->params[p->parent].name);
        if (!tun_space_is_active(s, tmp, i)) {
            if (given)
                return param_fail(err, p->name, "is inactive: its parent '%s' does not enable it",
                                  s->params[p->parent].name);
            continue;
        }
        if (!given) {
            if (partial) continue;
            return param_fail(err, p->name, "is missing");
        }
        if ((rc = decode_value(p, v, &tmp[i], err))) return rc;
    }
    memcpy(x, tmp, (size_t)s->n * sizeof *x);
    return 0;
}

int tun_space_from_json(const tun_space *s, const json_t *params, double *x, hpo_error *err) {
    return from_json(s, params, 0, x, err);
}

int tun_space_from_json_partial(const tun_space *s, const json_t *params, double *x, hpo_error *err) {
    return from_json(s, params, 1, x, err);
}
