/* objectives.c - a study's objectives and constraints: the definition's
 * "objective" (one) or "objectives" (1 to 8) and "constraints", a told
 * outcome's "value" / "values" / "repeats" / "metrics", and a stored
 * trial's objective vector and constraint violation (api_internal.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

static int parse_direction(const json_t *dir, const char *field, int *maximize, hpo_error *err) {
    const char *s = json_string_value(dir);
    if (!dir) return 0;
    if (s && strcmp(s, "minimize") == 0)
        *maximize = 0;
    else if (s && strcmp(s, "maximize") == 0)
        *maximize = 1;
    else
        return hpo_fail(err, HPO_EINVAL, field, "direction must be \"minimize\" or \"maximize\"");
    return 0;
}

static int parse_metric(const json_t *m, const char *field, const char **out, hpo_error *err) {
    if (!json_is_string(m) || json_string_length(m) == 0 || json_string_length(m) > 64)
        return hpo_fail(err, HPO_EINVAL, field, "metric must be a string of 1 to 64 characters");
    *out = json_string_value(m);
    return 0;
}

static int parse_single(const json_t *obj, api_study_def *d, hpo_error *err) {
    static const char *const keys[] = {"direction", "metric"};
    if (!json_is_object(obj)) return hpo_fail(err, HPO_EINVAL, "objective", "objective must be an object");
    int rc = api_only_keys(obj, keys, HPO_ARRAY_LEN(keys), "objective", err);
    if (rc == 0) rc = parse_direction(json_object_get(obj, "direction"), "objective.direction", &d->maximize, err);
    const json_t *metric = json_object_get(obj, "metric");
    if (rc == 0 && metric) {
        if (!json_is_string(metric) || json_string_length(metric) == 0)
            return hpo_fail(err, HPO_EINVAL, "objective.metric", "metric must be a non-empty string");
        d->metric = json_string_value(metric);
    }
    return rc;
}

static int parse_list(const json_t *arr, api_study_def *d, hpo_error *err) {
    static const char *const keys[] = {"metric", "direction", "reference"};
    size_t n = json_array_size(arr);
    char field[96];
    if (!json_is_array(arr) || n < 1 || n > TUN_MAX_OBJECTIVES)
        return hpo_fail(err, HPO_EINVAL, "objectives",
                        "objectives must be an array of 1 to %d objects {\"metric\", \"direction\"}",
                        TUN_MAX_OBJECTIVES);
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(arr, i);
        api_objective *ob = &d->obj[i];
        ob->reference = NAN;
        snprintf(field, sizeof field, "objectives[%zu]", i);
        if (!json_is_object(o)) return hpo_fail(err, HPO_EINVAL, field, "%s must be an object", field);
        int rc = api_only_keys(o, keys, HPO_ARRAY_LEN(keys), field, err);
        if (rc) return rc;
        snprintf(field, sizeof field, "objectives[%zu].metric", i);
        if ((rc = parse_metric(json_object_get(o, "metric"), field, &ob->metric, err))) return rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(d->obj[j].metric, ob->metric) == 0)
                return hpo_fail(err, HPO_EINVAL, field, "objectives[%zu] and [%zu] name the same metric", j, i);
        snprintf(field, sizeof field, "objectives[%zu].direction", i);
        if ((rc = parse_direction(json_object_get(o, "direction"), field, &ob->maximize, err))) return rc;
        const json_t *ref = json_object_get(o, "reference");
        if (ref) {
            snprintf(field, sizeof field, "objectives[%zu].reference", i);
            if (!json_is_number(ref) || !isfinite(json_number_value(ref)))
                return hpo_fail(err, HPO_EINVAL, field, "reference must be a finite number");
            ob->reference = json_number_value(ref);
        }
    }
    d->n_obj = (int)n;
    d->multi = 1;
    d->maximize = d->obj[0].maximize;
    d->metric = d->obj[0].metric;
    return 0;
}

static int parse_constraints(const json_t *arr, api_study_def *d, hpo_error *err) {
    static const char *const keys[] = {"metric", "min", "max"};
    size_t n = json_array_size(arr);
    char field[96];
    if (!json_is_array(arr) || n < 1 || n > API_MAX_CONSTRAINTS)
        return hpo_fail(err, HPO_EINVAL, "constraints",
                        "constraints must be an array of 1 to %d objects {\"metric\", \"max\" and/or \"min\"}",
                        API_MAX_CONSTRAINTS);
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_array_get(arr, i);
        api_constraint *k = &d->cons[i];
        snprintf(field, sizeof field, "constraints[%zu]", i);
        if (!json_is_object(c)) return hpo_fail(err, HPO_EINVAL, field, "%s must be an object", field);
        int rc = api_only_keys(c, keys, HPO_ARRAY_LEN(keys), field, err);
        if (rc) return rc;
        snprintf(field, sizeof field, "constraints[%zu].metric", i);
        if ((rc = parse_metric(json_object_get(c, "metric"), field, &k->metric, err))) return rc;
        for (int j = 0; j < d->n_obj; j++)
            if (strcmp(d->obj[j].metric ? d->obj[j].metric : "", k->metric) == 0)
                return hpo_fail(err, HPO_EINVAL, field, "\"%s\" is an objective, not a constraint", k->metric);
        k->min = k->max = NAN;
        const char *names[] = {"min", "max"};
        double *dst[] = {&k->min, &k->max};
        for (int b = 0; b < 2; b++) {
            const json_t *v = json_object_get(c, names[b]);
            if (!v) continue;
            snprintf(field, sizeof field, "constraints[%zu].%s", i, names[b]);
            if (!json_is_number(v) || !isfinite(json_number_value(v)))
                return hpo_fail(err, HPO_EINVAL, field, "%s must be a finite number", names[b]);
            *dst[b] = json_number_value(v);
        }
        snprintf(field, sizeof field, "constraints[%zu]", i);
        if (isnan(k->min) && isnan(k->max))
            return hpo_fail(err, HPO_EINVAL, field, "a constraint needs \"max\" or \"min\" (or both)");
        if (k->min > k->max) return hpo_fail(err, HPO_EINVAL, field, "min must be at most max");
    }
    d->n_cons = (int)n;
    return 0;
}

int api_objectives_parse(const json_t *def, api_study_def *d, hpo_error *err) {
    const json_t *one = json_object_get(def, "objective"), *list = json_object_get(def, "objectives");
    const json_t *cons = json_object_get(def, "constraints");
    d->maximize = 0;
    d->metric = NULL;
    d->n_obj = 1;
    d->multi = 0;
    d->n_cons = 0;
    d->obj[0] = (api_objective){NULL, 0, NAN};
    int rc = 0;
    if (one && list)
        return hpo_fail(err, HPO_EINVAL, "objectives", "give \"objective\" or \"objectives\", not both");
    if (list)
        rc = parse_list(list, d, err);
    else if (one && (rc = parse_single(one, d, err)) == 0) {
        d->obj[0].metric = d->metric;
        d->obj[0].maximize = d->maximize;
    }
    if (rc == 0 && cons) {
        if ((rc = parse_constraints(cons, d, err))) return rc;
        d->multi = 1;
    }
    return rc;
}

int api_objectives_check(const api_study_def *d, const json_t *def, hpo_error *err) {
    if (!d->multi) return 0;
    const char *what = json_object_get(def, "constraints") ? "constraints" : "objectives";
    tun_algorithm a = d->tuner.algorithm;
    if (a != TUN_RANDOM && a != TUN_NSGA2 && a != TUN_TPE && a != TUN_BAYESIAN)
        return hpo_fail(err, HPO_EINVAL, "tuner.algorithm",
                        "a study with %s needs an algorithm that reads them: \"nsga2\", \"tpe\", \"bayesian\" or "
                        "\"random\" (not \"%s\")",
                        d->n_obj > 1 ? "several objectives" : "constraints", tun_algorithm_name(a));
    if (a == TUN_BAYESIAN && d->tuner.acquisition == TUN_ACQ_UCB)
        return hpo_fail(err, HPO_EINVAL, "tuner.acquisition",
                        "a study with %s uses log expected hypervolume improvement: acquisition \"ucb\" is for "
                        "one unconstrained objective",
                        d->n_obj > 1 ? "several objectives" : "constraints");
    /* MO-ASHA: asha and hyperband rank the reported vectors (tuners/pruners.c) */
    if (d->tuner.pruner.kind == TUN_PRUNER_MEDIAN && d->n_obj > 1)
        return hpo_fail(err, HPO_EINVAL, "tuner.pruner",
                        "the median pruner takes one objective: a study with several prunes with \"asha\" or "
                        "\"hyperband\" (Pareto ranks at each rung)");
    if (json_object_get(def, "warm_start"))
        return hpo_fail(err, HPO_EINVAL, "warm_start", "a study with %s takes no warm start yet", what);
    return 0;
}

/* ---- outcomes ---- */

double api_constraint_values(const api_study_def *d, const double *cv, double *c) {
    double v = 0;
    for (int i = 0; i < d->n_cons; i++) {
        double over = -INFINITY;
        if (!isnan(d->cons[i].max)) over = cv[i] - d->cons[i].max;
        if (!isnan(d->cons[i].min)) over = fmax(over, d->cons[i].min - cv[i]);
        c[i] = over;
        if (over > 0) v += over;
    }
    return v;
}

void api_outcome_clear(api_outcome *o) {
    free(o->values_json);
    free(o->metrics_json);
    o->values_json = o->metrics_json = NULL;
}

/* "metrics": an object of at most 64 numbers; a complete trial of a study
 * with constraints gives each constraint's metric. */
static int parse_metrics(const api_study_def *d, const json_t *m, api_outcome *o, hpo_error *err) {
    double cv[API_MAX_CONSTRAINTS];
    if (m && (!json_is_object(m) || json_object_size(m) > 64))
        return hpo_fail(err, HPO_EINVAL, "metrics", "metrics must be an object of at most 64 numbers");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)m, key, v) {
        if (!json_is_number(v) || !isfinite(json_number_value(v))) {
            char field[96];
            snprintf(field, sizeof field, "metrics.%.64s", key);
            return hpo_fail(err, HPO_EINVAL, field, "%s must be a finite number", field);
        }
    }
    for (int i = 0; i < d->n_cons && o->state == STO_TRIAL_COMPLETE; i++) {
        const json_t *c = json_object_get(m, d->cons[i].metric);
        if (!c) {
            char field[96];
            snprintf(field, sizeof field, "metrics.%s", d->cons[i].metric);
            return hpo_fail(err, HPO_EINVAL, field,
                            "the study's constraints[%d] reads metric \"%s\": a complete trial gives it in metrics",
                            i, d->cons[i].metric);
        }
        cv[i] = json_number_value(c);
    }
    if (d->n_cons > 0 && o->state == STO_TRIAL_COMPLETE) {
        o->violation = api_constraint_values(d, cv, o->cons);
        /* finite values whose distance to a bound overflows: refused here,
         * not stored for the tuner to refuse (a study it cannot load) */
        for (int i = 0; i < d->n_cons; i++)
            if (!isfinite(o->cons[i]) || !isfinite(o->violation)) {
                char field[96];
                snprintf(field, sizeof field, "metrics.%s", d->cons[i].metric);
                return hpo_fail(err, HPO_EINVAL, field,
                                "%s is too far beyond the constraint's bound: the violation overflows a double", field);
            }
    }
    if (m && json_object_size(m) > 0) o->metrics_json = api_json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
    return 0;
}

int api_parse_outcome(const api_study_def *d, const json_t *body, api_outcome *o, hpo_error *err) {
    const json_t *jstate = json_object_get(body, "state");
    const json_t *jvalue = json_object_get(body, "value");
    const json_t *jvalues = json_object_get(body, "values");
    const json_t *jrepeats = json_object_get(body, "repeats");
    const json_t *jerror = json_object_get(body, "error");
    const json_t *jmetrics = json_object_get(body, "metrics");
    memset(o, 0, sizeof *o);
    o->state = STO_TRIAL_COMPLETE;
    o->value = o->value_std = o->violation = NAN;
    if (jstate) {
        const char *s = json_string_value(jstate);
        if (s && strcmp(s, "complete") == 0)
            o->state = STO_TRIAL_COMPLETE;
        else if (s && strcmp(s, "pruned") == 0)
            o->state = STO_TRIAL_PRUNED;
        else if (s && strcmp(s, "failed") == 0)
            o->state = STO_TRIAL_FAILED;
        else {
            return hpo_fail(err, HPO_EINVAL, "state", "state must be \"complete\", \"pruned\" or \"failed\"");
        }
    }
    if (jerror && !json_is_string(jerror)) {
        return hpo_fail(err, HPO_EINVAL, "error", "error must be a string");
    }
    o->error = json_string_value(jerror);
    if (!!jvalue + !!jvalues + !!jrepeats > 1) {
        return hpo_fail(err, HPO_EINVAL, jvalues ? "values" : "repeats",
                 "give one of value, values (one per objective) or repeats (one per execution)");
    }
    int m = d->n_obj;
    if (jvalue) {
        if (m > 1) {
            return hpo_fail(err, HPO_EINVAL, "value",
                     "this study has %d objectives: give values, one number per objective", m);
        }
        if (!json_is_number(jvalue)) {
            return hpo_fail(err, HPO_EINVAL, "value", "value must be a number");
        }
        o->value = json_number_value(jvalue);
        o->value_n = 1;
    } else if (jvalues) {
        if (!json_is_array(jvalues) || json_array_size(jvalues) != (size_t)m) {
            return hpo_fail(err, HPO_EINVAL, "values",
                     "values holds one number per objective (this study has %d); the values of repeated "
                     "executions go in \"repeats\"",
                     m);
        }
        for (int i = 0; i < m; i++) {
            const json_t *e = json_array_get(jvalues, (size_t)i);
            if (!json_is_number(e) || !isfinite(json_number_value(e))) {
                return hpo_fail(err, HPO_EINVAL, "values", "values[%d] must be a finite number", i);
            }
            o->values[i] = json_number_value(e);
        }
        o->value = o->values[0];
        o->value_n = 1;
        if (d->multi) o->values_json = api_json_dumps(jvalues, JSON_COMPACT);
    } else if (jrepeats) {
        size_t len = json_array_size(jrepeats);
        if (m > 1) {
            return hpo_fail(err, HPO_EINVAL, "repeats",
                     "repeats (one value per execution) are for one-objective studies; this one has %d", m);
        }
        if (!json_is_array(jrepeats) || len == 0 || len > 1000) {
            return hpo_fail(err, HPO_EINVAL, "repeats",
                     "repeats must be an array of 1 to 1000 numbers (one per execution)");
        }
        double v[1000];
        for (size_t i = 0; i < len; i++) {
            const json_t *e = json_array_get(jrepeats, i);
            if (!json_is_number(e)) {
                return hpo_fail(err, HPO_EINVAL, "repeats", "repeats[%zu] must be a number", i);
            }
            v[i] = json_number_value(e);
        }
        tun_mean_std(v, (int)len, &o->value, &o->value_std);
        if (!isfinite(o->value) || (len > 1 && !isfinite(o->value_std)))
            return hpo_fail(err, HPO_EINVAL, "repeats",
                            "repeats are too large to average: their mean or spread overflows a double");
        o->value_n = (int)len;
    }
    if (o->state == STO_TRIAL_COMPLETE && o->value_n == 0) {
        const char *f = m > 1 ? "values" : "value";
        return hpo_fail(err, HPO_EINVAL, f,
                 m > 1 ? "a complete trial needs values, one number per objective"
                       : "a complete trial needs a value (or repeats, one per execution)");
    }
    if (o->state == STO_TRIAL_FAILED && o->value_n > 0) {
        return hpo_fail(err, HPO_EINVAL, jvalues ? "values" : jrepeats ? "repeats" : "value",
                 "a failed trial has no value");
    }
    if (o->value_n > 0 && m == 1 && !jvalues) o->values[0] = o->value;
    if (d->multi && o->value_n > 0 && !o->values_json) { /* one objective told as value or repeats */
        json_t *arr = json_pack("[f]", o->value);
        o->values_json = api_json_dumps(arr, JSON_COMPACT);
        json_decref(arr);
    }
    if (jmetrics || d->n_cons > 0) {
        int rc = parse_metrics(d, jmetrics, o, err);
        if (rc) {
            api_outcome_clear(o);
            return rc;
        }
    }
    return 0;
}

int api_trial_objectives(const api_study_def *d, const sto_trial *t, double *values, double *violation,
                         double *cons) {
    *violation = NAN;
    if (!d->multi || !t->values_json) {
        if (d->n_obj != 1) return HPO_EINVAL;
        values[0] = t->value;
    } else {
        json_t *arr = json_loads(t->values_json, 0, NULL);
        int ok = json_array_size(arr) == (size_t)d->n_obj;
        for (int i = 0; ok && i < d->n_obj; i++) {
            const json_t *e = json_array_get(arr, (size_t)i);
            ok = json_is_number(e);
            if (ok) values[i] = json_number_value(e);
        }
        json_decref(arr);
        if (!ok) return HPO_EINVAL;
    }
    if (d->n_cons > 0 && t->metrics_json) {
        json_t *m = json_loads(t->metrics_json, 0, NULL);
        double cv[API_MAX_CONSTRAINTS];
        int ok = json_is_object(m);
        for (int i = 0; ok && i < d->n_cons; i++) {
            const json_t *c = json_object_get(m, d->cons[i].metric);
            ok = json_is_number(c);
            if (ok) cv[i] = json_number_value(c);
        }
        json_decref(m);
        double c[API_MAX_CONSTRAINTS];
        if (ok) *violation = api_constraint_values(d, cv, cons ? cons : c);
    }
    return 0;
}

void api_objective_vector(const api_study_def *d, const json_t *metrics, double *vec) {
    for (int k = 0; k < d->n_obj; k++) {
        const char *name = d->obj[k].metric;
        const json_t *v = name ? json_object_get(metrics, name) : NULL;
        if (!v && name && d->embedded && strncmp(name, "val_", 4) == 0) v = json_object_get(metrics, name + 4);
        vec[k] = json_is_number(v) ? json_number_value(v) : NAN;
    }
}

char *api_vector_curve(const api_study_def *d, const double *vec) {
    json_t *row = json_object();
    for (int k = 0; k < d->n_obj; k++)
        if (d->obj[k].metric) json_object_set_new(row, d->obj[k].metric, api_json_real(vec[k]));
    char *text = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(row);
    return text;
}

/* ---- views ---- */

json_t *api_objectives_json(const json_t *spec) {
    json_t *list = json_object_get(spec, "objectives"), *out = json_array();
    if (json_is_array(list)) {
        size_t i;
        json_t *o;
        json_array_foreach(list, i, o) {
            const char *dir = json_string_value(json_object_get(o, "direction"));
            json_array_append_new(out, json_pack("{s:O, s:s}", "metric", json_object_get(o, "metric"), "direction",
                                                 dir ? dir : "minimize"));
        }
        return out;
    }
    const json_t *one = json_object_get(spec, "objective");
    const char *dir = json_string_value(json_object_get(one, "direction"));
    const json_t *metric = json_object_get(one, "metric");
    json_array_append_new(out, json_pack("{s:O, s:s}", "metric", metric ? metric : json_null(), "direction",
                                         dir && strcmp(dir, "maximize") == 0 ? "maximize" : "minimize"));
    return out;
}

int api_spec_maximizes(const json_t *spec) {
    json_t *view = api_objectives_json(spec);
    const char *dir = json_string_value(json_object_get(json_array_get(view, 0), "direction"));
    int maximize = dir && strcmp(dir, "maximize") == 0;
    json_decref(view);
    return maximize;
}
