/* template_check.c - checking an embedded study's model template when the
 * study is created (api_embedded_check_model): the template is built,
 * shape only (engine/model.h, eng_model_new_shape: nothing in proportion to
 * the model is allocated), and its training run held against the memory
 * budget, at several points of the search space:
 *   - the middle: every int/float at the middle of its range (geometric
 *     middle on a log scale, snapped to its step), every choice at its
 *     first value, every bool false;
 *   - all low and all high (choices first / last value, bools false / true);
 *   - each parameter in turn at each of its values, the others in the
 *     middle: low and high of a number, every value of a choice (at most
 *     32, evenly spaced), both of a bool; a conditional parameter with its
 *     parents set to a value that activates it.
 * A template that builds (and fits) at some point is accepted: the points
 * where it does not are trials that will fail with the reason, which is
 * data. A template that fails at every point with the same error (same
 * code, same field once layer indices are set aside, since "repeat" blocks
 * shift them) does not depend on the params: the study is refused with
 * that error, a 400 naming the field ("model.layers[1].dense.units: model
 * needs 15.9 GiB, budget 4.0 GiB"). Different errors at different points
 * are left to the trials, but for one: once a point builds, each float
 * parameter is moved from it to a fractional value, and a template that
 * then fails at a field holding that parameter's "$name" reads it as an
 * integer (units from a float in 16..64, whole at the middle): refused,
 * naming the field (check_float_refs).
 * The same shape-only builds tell which parameters a population-based
 * study may change in a member that goes on from another's checkpoint
 * (api_pbt_mutable): those whose every tried value keeps the parameter,
 * optimiser-state and batch-norm counts, the optimiser and the layers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"
#include "model.h"
#include "train.h"

#define MAX_POINTS 512
#define MAX_CHOICE_POINTS 32

typedef struct points {
    const tun_space *s;
    double *x; /* n_points rows of s->n */
    int n;
} points;

static double *add_point(points *p, const double *from) {
    if (p->n >= MAX_POINTS) return NULL;
    double *row = p->x + (size_t)p->n * (size_t)p->s->n;
    memcpy(row, from, (size_t)p->s->n * sizeof *row);
    p->n++;
    return row;
}

static double mid_of(const tun_space *s, int i) {
    const tun_param *q = &s->params[i];
    if (q->type == TUN_CHOICE || q->type == TUN_BOOL) return 0;
    double v = q->log && q->low > 0 ? exp(0.5 * (log(q->low) + log(q->high))) : 0.5 * (q->low + q->high);
    return tun_space_snap(s, i, v);
}

static double low_of(const tun_space *s, int i) {
    const tun_param *q = &s->params[i];
    return q->type == TUN_CHOICE || q->type == TUN_BOOL ? 0 : tun_space_snap(s, i, q->low);
}

static double high_of(const tun_space *s, int i) {
    const tun_param *q = &s->params[i];
    if (q->type == TUN_CHOICE) return q->n_choices - 1;
    if (q->type == TUN_BOOL) return 1;
    return tun_space_snap(s, i, q->high);
}

/* Sets the parents of parameter i (recursively) to values that activate it. */
static void activate(const tun_space *s, double *x, int i) {
    for (int p = s->params[i].parent, guard = 0; p >= 0 && guard < s->n; p = s->params[p].parent, guard++) {
        if (s->params[i].n_parent_values > 0) x[p] = s->params[i].parent_values[0];
        i = p;
    }
}

static void make_points(points *p) {
    const tun_space *s = p->s;
    int n = s->n;
    double *base = hpo_xcalloc((size_t)n + 1, sizeof *base), *row;
    for (int i = 0; i < n; i++) base[i] = mid_of(s, i);
    add_point(p, base);
    if ((row = add_point(p, base)))
        for (int i = 0; i < n; i++) row[i] = low_of(s, i);
    if ((row = add_point(p, base)))
        for (int i = 0; i < n; i++) row[i] = high_of(s, i);
    for (int i = 0; i < n; i++) {
        const tun_param *q = &s->params[i];
        int k = q->type == TUN_CHOICE ? q->n_choices : 2, m = k > MAX_CHOICE_POINTS ? MAX_CHOICE_POINTS : k;
        for (int j = 0; j < m; j++) {
            if (!(row = add_point(p, base))) break;
            activate(s, row, i);
            if (q->type == TUN_CHOICE) row[i] = m == k ? j : (double)((int64_t)j * (k - 1) / (m - 1));
            else row[i] = j ? high_of(s, i) : low_of(s, i);
        }
    }
    free(base);
}

/* Builds the template at x (shape only) and holds it against the budget.
 * With expanded_out, the template as built (its "repeat" blocks expanded;
 * the template itself when that failed) is kept there. */
static int try_point_kept(api_ctx *ctx, const api_study_def *d, const double *x, hpo_error *err,
                          json_t **expanded_out) {
    json_t *params = tun_space_to_json(d->space, x), *model = NULL;
    if (!params) return hpo_fail(err, HPO_ENOMEM, "space", "out of memory");
    eng_model *m = NULL;
    int rc = api_model_expand(d->emb.model, params, d->space, &model, err);
    if (rc == 0)
        rc = eng_model_new_shape(model, params, d->emb.in_rank, d->emb.in_shape, d->emb.n_classes, &m, err);
    if (rc == 0) {
        eng_train_opts o;
        api_trial_train_opts(ctx, &d->emb, 1, &o); /* one thread: replicas are dropped before a trial fails */
        o.checkpoint_dir = ctx->opt.data_dir;      /* only for the estimate: trials resume from checkpoints */
        rc = eng_train_check_budget(m, &o, NULL, err);
    }
    eng_model_free(m);
    if (expanded_out) *expanded_out = model ? model : json_incref(d->emb.model);
    else json_decref(model);
    json_decref(params);
    if (rc && strncmp(err->field, "model", 5) != 0 && strncmp(err->field, "dataset", 7) != 0)
        hpo_error_prefix(err, "model");
    return rc;
}

static int try_point(api_ctx *ctx, const api_study_def *d, const double *x, hpo_error *err) {
    return try_point_kept(ctx, d, x, err, NULL);
}

/* The value at a field path of the model ("model.layers[2].dense.units"),
 * or NULL. */
static const json_t *at_field(const json_t *model, const char *field) {
    if (strncmp(field, "model.", 6) != 0) return NULL;
    const json_t *j = model;
    for (const char *p = field + 6; j && *p;) {
        size_t n = strcspn(p, ".[");
        char key[128];
        if (n == 0 || n >= sizeof key) return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        j = json_object_get(j, key);
        p += n;
        while (j && *p == '[') {
            char *end;
            long i = strtol(p + 1, &end, 10);
            if (*end != ']' || i < 0) return NULL;
            j = json_array_get(j, (size_t)i);
            p = end + 1;
        }
        if (*p == '.') p++;
    }
    return j;
}

/* A float parameter used where the model needs an integer (units, filters,
 * a repeat count) builds at the points where it happens to be whole (the
 * middle of 16..64 is 40), and its trials fail elsewhere. At x (a point
 * that builds), each float parameter that can take a fractional value is
 * set to one; when the template then fails at a field that refers to that
 * parameter, the study is refused, naming the field. 0, or HPO_EINVAL. */
static int check_float_refs(api_ctx *ctx, const api_study_def *d, const double *x, hpo_error *err) {
    const tun_space *s = d->space;
    double *y = hpo_xcalloc((size_t)s->n + 1, sizeof *y);
    int rc = 0;
    for (int i = 0; i < s->n && rc == 0; i++) {
        const tun_param *q = &s->params[i];
        if (q->type != TUN_FLOAT || !tun_space_is_active(s, x, i)) continue;
        double v = 0; /* a fractional value the space holds */
        for (double f = 0.37; f < 1 && v == floor(v); f += 0.21)
            v = tun_space_snap(s, i, q->log ? exp(log(q->low) + f * (log(q->high) - log(q->low)))
                                            : q->low + f * (q->high - q->low));
        if (v == floor(v)) continue; /* whole at every step: an integer in all but name */
        memcpy(y, x, (size_t)s->n * sizeof *y);
        y[i] = v;
        hpo_error e;
        memset(&e, 0, sizeof e);
        json_t *built = NULL;
        if (try_point_kept(ctx, d, y, &e, &built) == HPO_EINVAL) {
            const char *ref = json_string_value(at_field(built, e.field));
            if (ref && ref[0] == '$' && strcmp(ref + 1, q->name) == 0)
                rc = hpo_fail(err, HPO_EINVAL, e.field,
                              "%s takes an integer, and \"$%s\" is a float parameter (%g is one of its values): "
                              "make it {\"type\": \"int\"}", e.field, q->name, v);
        }
        json_decref(built);
    }
    free(y);
    return rc;
}

/* A field with the numbers inside brackets left out: "model.layers[].dense". */
static void field_shape(const char *f, char *out, size_t n) {
    size_t k = 0;
    int in = 0;
    for (; *f && k + 1 < n; f++) {
        if (*f == '[') in = 1;
        else if (*f == ']') in = 0;
        else if (in) continue;
        out[k++] = *f;
    }
    out[k] = 0;
}

/* A key the optimizer or schedule does not read (eng_model_check_keys) at
 * any point refuses the study: unlike a model over the budget at some
 * points, it is a mistake in the definition (a momentum given to adam; with
 * "name": "$optimizer", a momentum without a condition on the optimizer). */
static int check_keys(const api_study_def *d, const points *p, hpo_error *err) {
    int rc = 0;
    for (int i = 0; i < p->n && rc == 0; i++) {
        const double *x = p->x + (size_t)i * (size_t)d->space->n;
        json_t *params = tun_space_to_json(d->space, x), *model = NULL;
        if (!params) return hpo_fail(err, HPO_ENOMEM, "space", "out of memory");
        hpo_error e;
        memset(&e, 0, sizeof e);
        if (api_model_expand(d->emb.model, params, d->space, &model, &e) == 0 &&
            eng_model_check_keys(model, params, &e) != 0) {
            int schedule = strncmp(e.field, "model.schedule", 14) == 0;
            const json_t *o = json_object_get(model, schedule ? "schedule" : "optimizer");
            const char *name = json_string_value(json_object_get(o, "name"));
            *err = e;
            if (name && name[0] == '$')
                snprintf(err->message + strlen(err->message), sizeof err->message - strlen(err->message),
                         "; the name is \"%s\": give this key through a parameter with a condition on it, active "
                         "where the key applies", name);
            rc = HPO_EINVAL;
        }
        json_decref(model);
        json_decref(params);
    }
    return rc;
}

int api_embedded_check_model(api_ctx *ctx, const api_study_def *d, hpo_error *err) {
    points p = {d->space, NULL, 0};
    p.x = hpo_xcalloc((size_t)MAX_POINTS * ((size_t)d->space->n + 1), sizeof *p.x);
    make_points(&p);
    if (check_keys(d, &p, err)) {
        free(p.x);
        return HPO_EINVAL;
    }
    int first = 0, same = 1;
    hpo_error e0;
    char shape0[sizeof e0.field], shape[sizeof e0.field];
    memset(&e0, 0, sizeof e0);
    for (int i = 0; i < p.n; i++) {
        hpo_error e;
        memset(&e, 0, sizeof e);
        int rc = try_point(ctx, d, p.x + (size_t)i * (size_t)d->space->n, &e);
        if (rc == 0) { /* it builds here: the failing points are failed trials */
            rc = check_float_refs(ctx, d, p.x + (size_t)i * (size_t)d->space->n, err);
            free(p.x);
            return rc;
        }
        field_shape(e.field, shape, sizeof shape);
        if (i == 0) {
            first = rc;
            e0 = e;
            memcpy(shape0, shape, sizeof shape0);
        } else if (rc != first || strcmp(shape, shape0) != 0) {
            same = 0;
        }
    }
    free(p.x);
    if (!same) {
        HPO_INFO("study \"%s\": the model template fails at every point of the space checked, with different errors "
                 "(at the middle: %s); its trials will fail with the reasons",
                 d->name, e0.message);
        return 0;
    }
    /* the same error everywhere: the template cannot build; a client error */
    *err = e0;
    return first == HPO_ETOOLARGE ? HPO_EINVAL : first; /* over the budget: a 400, not a 413 */
}

/* The shape a checkpoint must match (engine/checkpoint.c), or 0 when the
 * template does not build at x. */
static int shape_at(const api_study_def *d, const double *x, size_t sig[5]) {
    json_t *params = tun_space_to_json(d->space, x), *model = NULL;
    eng_model *m = NULL;
    hpo_error err;
    int ok = params && api_model_expand(d->emb.model, params, d->space, &model, &err) == 0 &&
             eng_model_new_shape(model, params, d->emb.in_rank, d->emb.in_shape, d->emb.n_classes, &m, &err) == 0;
    if (ok) {
        sig[0] = m->nparams, sig[1] = m->nstate, sig[2] = m->nstats, sig[3] = (size_t)m->opt.kind;
        sig[4] = (size_t)m->nlayers;
    }
    eng_model_free(m);
    json_decref(model);
    json_decref(params);
    return ok;
}

uint64_t api_pbt_mutable(const api_study_def *d) {
    const tun_space *s = d->space;
    int n = s->n;
    double *base = hpo_xcalloc((size_t)n + 1, sizeof *base), *x = hpo_xcalloc((size_t)n + 1, sizeof *x);
    size_t sig0[5], sig[5];
    uint64_t mask = 0;
    for (int i = 0; i < n; i++) base[i] = mid_of(s, i);
    for (int i = 0; i < n && i < 64 && shape_at(d, base, sig0); i++) {
        const tun_param *q = &s->params[i];
        int parent = 0, ok = q->parent < 0;
        for (int j = 0; j < n; j++) parent |= s->params[j].parent == i;
        int k = q->type == TUN_CHOICE ? q->n_choices : 2, m = k > MAX_CHOICE_POINTS ? MAX_CHOICE_POINTS : k;
        for (int j = 0; ok && !parent && j < m; j++) {
            memcpy(x, base, (size_t)n * sizeof *x);
            if (q->type == TUN_CHOICE) x[i] = m == k ? j : (double)((int64_t)j * (k - 1) / (m - 1));
            else x[i] = j ? high_of(s, i) : low_of(s, i);
            ok = shape_at(d, x, sig) && memcmp(sig, sig0, sizeof sig) == 0;
        }
        if (ok && !parent) mask |= (uint64_t)1 << i;
    }
    free(x);
    free(base);
    return mask;
}
