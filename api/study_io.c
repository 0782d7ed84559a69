/* study_io.c - a study as a document (Optuna's copy_study, and a JSON file
 * Optuna can load): GET /studies/{id}/export, POST /studies/import and
 * POST /studies/{id}/copy.
 *
 * The document, "format": "hpo.study/1":
 *   {"format", "study": {"name", "direction", "kind", "state", "created",
 *    "definition" (as GET /studies/{id} shows it), "space" (the effective
 *    one), "user_attrs", "note"}, "trials": [{"number", "state", "params",
 *    "value", "values" and "metrics" (a study with objectives or constraints:
 *    the objective vector and the metrics told; absent when none),
 *    "value_std" and "value_n" (a value told as repeats: their spread and
 *    count; absent otherwise),
 *    "intermediate_values": {"<step>": v}, "reports" (what a pruner knew of
 *    a step besides its value, where it knew more: study_io_reports.c),
 *    "datetime_start",
 *    "datetime_complete" (ISO 8601, UTC, or null), "distributions",
 *    "user_attrs", "note"}]}
 * where each trial's distributions are Optuna's JSON form of its params'
 * ranges (optuna.distributions.distribution_to_json: FloatDistribution,
 * IntDistribution, CategoricalDistribution; a bool is a categorical of
 * false/true) and a categorical param is its choice value, so
 * optuna.trial.create_trial takes a trial as it is.
 *
 * Import makes a new study of the definition (its "name", or the body's
 * "name") and adds the finished trials (complete, pruned, failed,
 * cancelled) in number order, renumbered 0, 1, ..., with their
 * user_attrs and notes (the study's too); running and queued
 * ones are skipped and counted ("skipped"). Every trial is checked before
 * anything is stored: its params against the definition's space (400
 * naming trials[i].params.<name>), a complete one needs a value (a study
 * with several objectives: "values", one per objective; "values" and
 * "metrics" are checked against the objectives and constraints as
 * POST /studies/{id}/trials checks them, 400 naming trials[i].values). Optuna's
 * state names are read too (COMPLETE, PRUNED, FAIL, RUNNING, WAITING);
 * "distributions" are not read: the definition's space decides. A
 * definition's warm_start is dropped (its ids name studies of the hpod it
 * came from). The new study is stored paused until its trials are in (no
 * node starts a trial of it, nor answers an ask, without its history);
 * then it runs: its tuner has learnt the imported trials, and an embedded
 * one trains new trials until its budget is spent (a budget already spent
 * completes it). Nothing but trials is copied: an
 * embedded study's checkpoints, weights and models stay with the original.
 * Copy is export + import inside hpod. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "jobs_internal.h"

#define FORMAT "hpo.study/1"

/* ---- export ---- */

static json_t *iso_time(double t) {
    if (!(t > 0)) return json_null();
    /* to the nearest microsecond (truncating lost one per round trip) */
    double whole = floor(t);
    long us = lround((t - whole) * 1e6);
    if (us >= 1000000) {
        whole += 1;
        us -= 1000000;
    }
    time_t sec = (time_t)whole;
    struct tm tm;
    if (!gmtime_r(&sec, &tm)) return json_null();
    char buf[64], frac[24];
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(frac, sizeof frac, ".%06ld", us);
    strncat(buf, frac, sizeof buf - strlen(buf) - 1);
    strncat(buf, "+00:00", sizeof buf - strlen(buf) - 1);
    return json_string(buf);
}

/* Optuna's distribution_to_json of one parameter, as an object. */
static json_t *distribution(const tun_param *p) {
    switch (p->type) {
    case TUN_FLOAT:
        return json_pack("{s:s, s:{s:f, s:f, s:b, s:o}}", "name", "FloatDistribution", "attributes", "low", p->low,
                         "high", p->high, "log", p->log, "step", p->step > 0 ? json_real(p->step) : json_null());
    case TUN_INT:
        return json_pack("{s:s, s:{s:I, s:I, s:b, s:I}}", "name", "IntDistribution", "attributes", "low",
                         (json_int_t)p->low, "high", (json_int_t)p->high, "log", p->log, "step",
                         (json_int_t)(p->step >= 1 ? p->step : 1));
    case TUN_CHOICE:
        return json_pack("{s:s, s:{s:O}}", "name", "CategoricalDistribution", "attributes", "choices", p->choices);
    default: /* TUN_BOOL */
        return json_pack("{s:s, s:{s:[bb]}}", "name", "CategoricalDistribution", "attributes", "choices", 0, 1);
    }
}

typedef struct collect {
    sto_db *db;
    const api_study_def *def;
    const sto_trial *trials;
    json_t **steps;   /* per trial: {"<step>": value} */
    json_t **reports; /* per trial: {"<step>": {...}} (study_io_reports.c) */
    size_t n;
    int64_t loaded;   /* the trial whose curves are in eps (vector reports), -1: none */
    sto_epoch *eps;
    size_t n_eps;
} collect;

static void collect_intermediate(void *arg, const sto_intermediate *row) {
    collect *c = arg;
    int64_t number = row->number;
    size_t lo = 0, hi = c->n;
    while (lo < hi) { /* trials are ordered by number */
        size_t mid = (lo + hi) / 2;
        if (c->trials[mid].number < number)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == c->n || c->trials[lo].number != number) return;
    char key[32];
    snprintf(key, sizeof key, "%lld", (long long)row->step);
    json_object_set_new(c->steps[lo], key, api_json_real(row->value));
    if (api_reports_vectors(c->def) && c->loaded != number) { /* its vectors are its curve points */
        sto_epoch_list_free(c->eps, c->n_eps);
        c->eps = NULL;
        c->n_eps = 0;
        c->loaded = number;
        if (sto_trial_epochs(c->db, c->trials[lo].id, &c->eps, &c->n_eps)) c->n_eps = 0;
    }
    json_t *report = api_doc_report(c->def, row, c->eps, c->n_eps);
    if (report) json_object_set_new(c->reports[lo], key, report);
}

/* An uploaded dataset given by id alone gets its name: ids are this
 * hpod's, and an import elsewhere finds the dataset by name (or refuses). */
static void name_dataset(api_ctx *ctx, json_t *ds) {
    const json_t *id = json_object_get(ds, "id");
    sto_dataset row;
    if (!json_is_integer(id) || json_object_get(ds, "name") || sto_dataset_get(ctx->db, json_integer_value(id), &row))
        return;
    json_object_set_new(ds, "name", json_string(row.name));
    sto_dataset_clear(&row);
}

/* The document of study st (stored row s); NULL with rc on failure. */
static json_t *export_doc(api_ctx *ctx, api_study *st, const sto_study *s, int *rc_out) {
    sto_trial_filter all = {.state = -1, .order = STO_ORDER_NUMBER};
    sto_trial *t = NULL;
    size_t n = 0;
    int rc = sto_trial_list(ctx->db, st->id, &all, &t, &n);
    if (rc) {
        *rc_out = rc;
        return NULL;
    }
    collect c = {ctx->db, &st->def, t, hpo_xcalloc(n + 1, sizeof(json_t *)), hpo_xcalloc(n + 1, sizeof(json_t *)),
                 n, -1, NULL, 0};
    for (size_t i = 0; i < n; i++) {
        c.steps[i] = json_object();
        c.reports[i] = json_object();
    }
    rc = sto_study_intermediates(ctx->db, st->id, collect_intermediate, &c);
    sto_epoch_list_free(c.eps, c.n_eps);
    json_t *trials = json_array();
    const tun_space *space = st->def.space;
    for (size_t i = 0; i < n; i++) {
        json_t *params = json_loads(t[i].params, 0, NULL);
        if (!params) params = json_object();
        json_t *dists = json_object();
        for (int k = 0; k < space->n; k++)
            if (json_object_get(params, space->params[k].name))
                json_object_set_new(dists, space->params[k].name, distribution(&space->params[k]));
        json_t *attrs = json_loads(t[i].user_attrs ? t[i].user_attrs : "{}", 0, NULL);
        json_array_append_new(
            trials, json_pack("{s:I, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:s}", "number", (json_int_t)t[i].number,
                              "state", sto_trial_state_name(t[i].state), "params", params, "value",
                              api_json_real(t[i].value), "intermediate_values", c.steps[i], "datetime_start",
                              iso_time(t[i].started), "datetime_complete", iso_time(t[i].finished), "distributions",
                              dists, "user_attrs", attrs ? attrs : json_object(), "note", t[i].note ? t[i].note : ""));
        json_t *row = json_array_get(trials, json_array_size(trials) - 1);
        json_t *vec = t[i].values_json ? json_loads(t[i].values_json, 0, NULL) : NULL;
        json_t *metrics = t[i].metrics_json ? json_loads(t[i].metrics_json, 0, NULL) : NULL;
        if (vec) json_object_set_new(row, "values", vec);
        if (metrics) json_object_set_new(row, "metrics", metrics);
        if (json_object_size(c.reports[i])) json_object_set(row, "reports", c.reports[i]);
        json_decref(c.reports[i]);
        if (t[i].error && t[i].error[0]) json_object_set_new(row, "error", json_string(t[i].error));
        if (t[i].value_n > 1) { /* told with repeats: their spread and count */
            json_object_set_new(row, "value_std", api_json_real(t[i].value_std));
            json_object_set_new(row, "value_n", json_integer(t[i].value_n));
        }
    }
    free(c.steps);
    free(c.reports);
    sto_trial_list_free(t, n);
    if (rc) {
        json_decref(trials);
        *rc_out = rc;
        return NULL;
    }
    json_t *def = json_deep_copy(st->spec);
    api_warm_start_strip(def);
    name_dataset(ctx, json_object_get(def, "dataset"));
    json_t *attrs = json_loads(s->user_attrs ? s->user_attrs : "{}", 0, NULL);
    /* the space: a copy, since requests share the study (json_map.c) */
    json_t *study = json_pack("{s:s, s:s, s:s, s:s, s:f, s:o, s:o, s:o, s:s}", "name", s->name, "direction",
                              st->def.maximize ? "maximize" : "minimize", "kind", st->def.embedded ? "embedded" : "external",
                              "state", sto_study_state_name(s->state), "created", s->created, "definition", def,
                              "space", json_deep_copy(st->def.space_json), "user_attrs", attrs ? attrs : json_object(), "note",
                              s->note ? s->note : "");
    return json_pack("{s:s, s:o, s:o}", "format", FORMAT, "study", study, "trials", trials);
}

/* The document of study id, or NULL with the error in resp. */
static json_t *export_study(api_ctx *ctx, int64_t id, api_response *resp) {
    api_study *st = NULL;
    int rc = api_study_acquire(ctx, id, &st);
    if (rc) {
        api_fail_study_acquire(resp, rc, id);
        return NULL;
    }
    json_t *doc = NULL;
    sto_study s;
    pthread_mutex_lock(&st->lock); /* no trial changes half-way */
    if ((rc = sto_study_get(ctx->db, id, &s)) == 0) {
        doc = export_doc(ctx, st, &s, &rc);
        sto_study_clear(&s);
    }
    pthread_mutex_unlock(&st->lock);
    api_study_release(ctx, st);
    if (!doc) api_fail_lookup(resp, rc, "study", id);
    return doc;
}

/* The trials of study id (0 when it cannot say: the export answers why). */
static int64_t trial_count(api_ctx *ctx, int64_t id) {
    int64_t counts[STO_TRIAL_N_STATES] = {0}, n = 0;
    if (sto_trial_counts(ctx->db, id, counts)) return 0;
    for (int i = 0; i < STO_TRIAL_N_STATES; i++) n += counts[i];
    return n;
}

void api_h_study_export(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    (void)req;
    int64_t n = trial_count(ctx, id);
    if (api_heavy_acquire(ctx, n, resp)) return; /* the document is held whole while made */
    json_t *doc = export_study(ctx, id, resp);
    if (doc) api_reply_json(resp, 200, doc);
    api_heavy_release(ctx, n);
}

/* ---- import ---- */

typedef struct import_trial {
    int64_t number;
    sto_trial_state state;
    double value, started, finished;
    double value_std; /* over repeated executions (NaN: none) */
    int value_n;      /* executions behind value */
    char *params;
    char *attrs;      /* user_attrs text (NULL: none) */
    const char *note; /* borrowed from the document (NULL: none) */
    const char *error; /* a failed or cancelled trial's, borrowed from the document (NULL: none) */
    size_t index;      /* its place in the document's trials */
    char *values_json;  /* the objective vector (a study with objectives or constraints); NULL: none */
    char *metrics_json; /* the metrics told with it; NULL: none */
    double *x;
    int64_t *steps;
    double *step_values;
    size_t n_steps;
    api_doc_steps details; /* the steps' "reports" */
} import_trial;

static void import_trials_free(import_trial *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(t[i].params);
        free(t[i].attrs);
        free(t[i].values_json);
        free(t[i].metrics_json);
        free(t[i].x);
        api_doc_steps_free(&t[i].details, t[i].n_steps);
        free(t[i].steps);
        free(t[i].step_values);
    }
    free(t);
}

static int cmp_number(const void *a, const void *b) {
    const import_trial *x = a, *y = b;
    return (x->number > y->number) - (x->number < y->number);
}

/* A trial's state by hpo's or Optuna's name; -1 skipped (running,
 * queued), -2 unknown. */
static int import_state(const char *s) {
    static const struct {
        const char *name;
        int state;
    } names[] = {{"complete", STO_TRIAL_COMPLETE}, {"pruned", STO_TRIAL_PRUNED}, {"failed", STO_TRIAL_FAILED},
                 {"fail", STO_TRIAL_FAILED},        {"cancelled", STO_TRIAL_CANCELLED}, {"running", -1},
                 {"queued", -1},                    {"waiting", -1}};
    for (size_t i = 0; s && i < HPO_ARRAY_LEN(names); i++)
        if (strcasecmp(s, names[i].name) == 0) return names[i].state;
    return -2;
}

/* The user_attrs and note of an object of the document (optional; where:
 * "study" or "trials[i]"), checked as PATCH checks them: *attrs the merged
 * text (malloc'd), *note borrowed from j (the document outlives the
 * import); errors name <where>.user_attrs / <where>.note. */
static int read_attrs_note(const json_t *j, const char *where, char **attrs, const char **note, hpo_error *err) {
    const json_t *jattrs = json_object_get(j, "user_attrs"), *jnote = json_object_get(j, "note");
    hpo_error e = {{0}, {0}};
    int rc = jattrs ? api_attrs_merge(NULL, jattrs, attrs, &e) : 0;
    if (rc == 0 && jnote) rc = api_note_check(jnote, note, &e);
    if (rc) {
        char f[96];
        snprintf(f, sizeof f, "%s.%.60s", where, e.field[0] ? e.field : (jattrs ? "user_attrs" : "note"));
        return hpo_fail(err, rc, f, "%s: %s", f, e.message);
    }
    return 0;
}

/* A read trial's "values" and "metrics", checked as add-trial checks them
 * (api_parse_outcome: one finite number per objective, each constraint's
 * metric for a complete trial); a failed or cancelled trial keeps no
 * value. Errors name trials[i].<field>. */
static int read_outcome(const json_t *j, size_t i, const api_study_def *d, import_trial *out, hpo_error *err) {
    const json_t *values = json_object_get(j, "values"), *metrics = json_object_get(j, "metrics");
    int has_value = out->state != STO_TRIAL_FAILED && out->state != STO_TRIAL_CANCELLED;
    json_t *body = json_pack("{s:s}", "state", out->state == STO_TRIAL_COMPLETE ? "complete"
                                               : out->state == STO_TRIAL_PRUNED ? "pruned"
                                                                                : "failed");
    if (has_value && values)
        json_object_set(body, "values", (json_t *)values);
    else if (has_value && d->n_obj == 1 && !isnan(out->value))
        json_object_set_new(body, "value", json_real(out->value));
    if (metrics) json_object_set(body, "metrics", (json_t *)metrics);
    api_outcome o;
    int rc = api_parse_outcome(d, body, &o, err);
    json_decref(body);
    if (rc) {
        hpo_error in = *err;
        char where[32];
        snprintf(where, sizeof where, "trials[%zu]", i);
        hpo_error_prefix(&in, where);
        return hpo_fail(err, rc, in.field, "%s: %s", in.field, in.message);
    }
    if (json_is_number(json_object_get(j, "value")) && values && o.value_n > 0 && o.value != out->value) {
        char f[48];
        snprintf(f, sizeof f, "trials[%zu].values", i);
        return hpo_fail(err, HPO_EINVAL, f, "%s: values[0] (%.17g) is not the trial's value (%.17g)", f, o.value,
                        out->value);
    }
    if (o.value_n > 0) out->value = o.value;
    out->values_json = o.values_json;
    out->metrics_json = o.metrics_json;
    return 0;
}

/* Reads and checks trial i of a document against d. 1 when it is
 * skipped, 0 when read into *out, or an error naming trials[i].<field>. */
static int read_trial(const json_t *j, size_t i, const api_study_def *d, import_trial *out, hpo_error *err) {
    static const char *keys[] = {"number",         "state",          "params",        "value",
                                 "values",         "metrics",        "intermediate_values",
                                 "datetime_start", "datetime_complete", "distributions", "user_attrs",
                                 "note",           "value_std",      "value_n",       "error",
                                 "reports"};
    const tun_space *space = d->space;
    char f[96];
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) {
        snprintf(f, sizeof f, "trials[%zu]", i);
        return hpo_fail(err, HPO_EINVAL, f, "%s must be an object", f);
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        size_t k = 0;
        while (k < HPO_ARRAY_LEN(keys) && strcmp(key, keys[k]) != 0) k++;
        if (k == HPO_ARRAY_LEN(keys)) {
            snprintf(f, sizeof f, "trials[%zu].%.40s", i, key);
            return hpo_fail(err, HPO_EINVAL, f, "unknown key \"%.40s\" in trials[%zu]", key, i);
        }
    }
    int state = import_state(json_string_value(json_object_get(j, "state")));
    if (state == -2) {
        snprintf(f, sizeof f, "trials[%zu].state", i);
        return hpo_fail(err, HPO_EINVAL, f, "%s must be complete, pruned, failed, cancelled, running or queued", f);
    }
    if (state == -1) return 1;
    /* cancelled while it waited (an enqueued trial, its params partial):
     * never started, so in no tuner's history; skipped as a queued one */
    const json_t *start = json_object_get(j, "datetime_start");
    if (state == STO_TRIAL_CANCELLED && (!start || json_is_null(start))) return 1;
    out->state = (sto_trial_state)state;
    out->index = i;
    const json_t *num = json_object_get(j, "number");
    if (num && (!json_is_integer(num) || json_integer_value(num) < 0)) {
        snprintf(f, sizeof f, "trials[%zu].number", i);
        return hpo_fail(err, HPO_EINVAL, f, "%s must be an integer >= 0", f);
    }
    out->number = num ? json_integer_value(num) : (int64_t)i;
    const json_t *value = json_object_get(j, "value");
    out->value = json_is_number(value) ? json_number_value(value) : NAN;
    if ((value && !json_is_null(value) && !json_is_number(value)) ||
        (out->state == STO_TRIAL_COMPLETE && !json_is_number(value) && !json_object_get(j, "values"))) {
        snprintf(f, sizeof f, "trials[%zu].value", i);
        return hpo_fail(err, HPO_EINVAL, f, "%s must be a number%s", f,
                        out->state == STO_TRIAL_COMPLETE ? " (a complete trial has one)" : " or null");
    }
    int ended = out->state == STO_TRIAL_FAILED || out->state == STO_TRIAL_CANCELLED;
    const json_t *values = json_object_get(j, "values"), *error = json_object_get(j, "error");
    const json_t *std = json_object_get(j, "value_std"), *vn = json_object_get(j, "value_n");
    const char *bad = ended && json_is_number(value) ? "value"
                      : ended && values && !json_is_null(values) ? "values"
                      : ended && std && !json_is_null(std) ? "value_std"
                      : ended && vn ? "value_n"
                      : !ended && error && !json_is_null(error) ? "error"
                                                                 : NULL;
    if (bad) {
        snprintf(f, sizeof f, "trials[%zu].%s", i, bad);
        return hpo_fail(err, HPO_EINVAL, f, "%s: %s", f,
                        ended ? "a failed or cancelled trial has no value (null)" : "only a failed or cancelled trial has an error");
    }
    if (error && !json_is_null(error) && !json_is_string(error)) {
        snprintf(f, sizeof f, "trials[%zu].error", i);
        return hpo_fail(err, HPO_EINVAL, f, "%s must be a string or null", f);
    }
    out->error = json_string_value(error);
    if (ended) out->value = NAN;
    int rc = read_outcome(j, i, d, out, err);
    if (rc) return rc;
    /* a value averaged over repeated executions: their spread and count */
    out->value_std = json_is_number(std) && isfinite(json_number_value(std)) ? json_number_value(std) : NAN;
    out->value_n = 1;
    if ((std && !json_is_null(std) && (!json_is_number(std) || json_number_value(std) < 0)) ||
        (vn && (!json_is_integer(vn) || json_integer_value(vn) < 1 || json_integer_value(vn) > 1000000))) {
        snprintf(f, sizeof f, "trials[%zu].%s", i, std && !json_is_null(std) && (!json_is_number(std) ||
                                                                               json_number_value(std) < 0)
                                                       ? "value_std" : "value_n");
        return hpo_fail(err, HPO_EINVAL, f, "%s must be %s", f,
                        strstr(f, "value_std") ? "a number >= 0 or null" : "an integer from 1 to 1000000");
    }
    if (vn) out->value_n = (int)json_integer_value(vn);
    if (out->value_n > 1 && isnan(out->value_std)) {
        snprintf(f, sizeof f, "trials[%zu].value_std", i);
        return hpo_fail(err, HPO_EINVAL, f, "%s: a value of %d executions has their spread (a number >= 0)", f,
                        out->value_n);
    }
    out->x = hpo_xcalloc((size_t)space->n + 1, sizeof *out->x);
    hpo_error perr = {{0}, {0}};
    rc = tun_space_from_json(space, json_object_get(j, "params"), out->x, &perr);
    if (rc) {
        snprintf(f, sizeof f, "trials[%zu].%.60s", i, perr.field);
        return hpo_fail(err, rc, f, "%s %s", f, perr.message);
    }
    json_t *params = tun_space_to_json(space, out->x);
    out->params = json_dumps(params, JSON_COMPACT);
    json_decref(params);
    if (!out->params) return HPO_ENOMEM;
    snprintf(f, sizeof f, "trials[%zu].intermediate_values", i);
    if ((rc = api_parse_intermediates(json_object_get(j, "intermediate_values"), f, &out->steps, &out->step_values,
                                      &out->n_steps, err)))
        return rc;
    snprintf(f, sizeof f, "trials[%zu].reports", i);
    if ((rc = api_doc_reports_read(json_object_get(j, "reports"), d, out->steps, out->step_values, out->n_steps, f,
                                   &out->details, err)))
        return rc;
    snprintf(f, sizeof f, "trials[%zu]", i);
    if ((rc = read_attrs_note(j, f, &out->attrs, &out->note, err))) return rc;
    snprintf(f, sizeof f, "trials[%zu].datetime_start", i);
    if ((rc = api_parse_time(json_object_get(j, "datetime_start"), f, &out->started, err))) return rc;
    snprintf(f, sizeof f, "trials[%zu].datetime_complete", i);
    if ((rc = api_parse_time(json_object_get(j, "datetime_complete"), f, &out->finished, err))) return rc;
    if (out->started > 0 && out->finished > 0 && out->finished < out->started)
        return hpo_fail(err, HPO_EINVAL, f, "%s is before its datetime_start", f);
    return 0;
}

/* Makes a study of document doc (name: its name, or NULL): 201 with
 * {"study", "imported", "skipped"}, or the error in resp. */
typedef struct import_mark {
    api_ctx *ctx;
    hpo_error *err;
} import_mark;

static int mark_import(void *arg, int64_t id) {
    import_mark *m = arg;
    return api_import_begin(m->ctx, id, m->err);
}

static void import_doc(api_ctx *ctx, const json_t *doc, const char *name, api_response *resp) {
    hpo_error err = {{0}, {0}};
    const char *format = json_string_value(json_object_get(doc, "format"));
    if (!format || strcmp(format, FORMAT) != 0) {
        api_fail(resp, 400, "invalid_argument", "format", "format must be \"" FORMAT "\" (GET .../export writes it)");
        return;
    }
    const json_t *def_in = json_object_get(json_object_get(doc, "study"), "definition");
    const json_t *jtrials = json_object_get(doc, "trials");
    if (!json_is_object(def_in)) {
        api_fail(resp, 400, "invalid_argument", "study.definition", "study.definition must be a study definition");
        return;
    }
    if (jtrials && !json_is_array(jtrials)) {
        api_fail(resp, 400, "invalid_argument", "trials", "trials must be an array");
        return;
    }
    json_t *def = json_deep_copy(def_in);
    json_object_del(def, "warm_start"); /* ids of the hpod it came from */
    json_t *dataset = json_object_get(def, "dataset");
    if (json_string_value(json_object_get(dataset, "name"))) { /* its id there: here the name finds it */
        json_object_del(dataset, "id");
    } else if (json_object_get(dataset, "id")) { /* an id alone would name whatever upload has it here */
        api_fail(resp, 400, "invalid_argument", "study.definition.dataset.id",
                 "study.definition.dataset.id names an upload of the hpod the document came from: give the "
                 "dataset's name (study.definition.dataset.name) to find it here");
        json_decref(def);
        return;
    }
    if (name) json_object_set_new(def, "name", json_string(name));
    size_t n_in = json_array_size(jtrials), n = 0, skipped = 0;
    import_trial *trials = hpo_xcalloc(n_in + 1, sizeof *trials);
    api_study_def d;
    api_study *st = NULL;
    api_study_extras extras = {0};
    int64_t id = 0;
    int rc = api_study_def_load(ctx, def, &d, &err); /* the space, to check the trials first */
    if (rc) { /* where it is in the document (the body's own name: "name") */
        if (!(name && strcmp(err.field, "name") == 0)) hpo_error_prefix(&err, "study.definition");
        goto fail;
    }
    for (size_t i = 0; rc == 0 && i < n_in; i++) {
        rc = read_trial(json_array_get(jtrials, i), i, &d, &trials[n], &err);
        if (rc == 1) { /* running or queued: nothing was read */
            skipped++;
            rc = 0;
        } else {
            n++; /* read, or partly (freed below) */
        }
    }
    api_study_def_clear(&d);
    if (rc) goto fail;
    qsort(trials, n, sizeof *trials, cmp_number);
    for (size_t i = 1; i < n; i++)
        if (trials[i].number == trials[i - 1].number) {
            size_t a = trials[i - 1].index < trials[i].index ? trials[i - 1].index : trials[i].index,
                   b = trials[i - 1].index ^ trials[i].index ^ a;
            char f[48];
            snprintf(f, sizeof f, "trials[%zu].number", b);
            rc = hpo_fail(&err, HPO_EINVAL, f, "%s: trials[%zu] has number %lld too", f, a,
                          (long long)trials[i].number);
            goto fail;
        }
    if ((rc = read_attrs_note(json_object_get(doc, "study"), "study", &extras.attrs, &extras.note_text, &err)))
        goto fail;
    import_mark mark = {ctx, &err};
    extras.on_insert = mark_import; /* in the study's insert: a crash after its commit finds the marker */
    extras.on_insert_arg = &mark;
    if ((rc = api_study_create(ctx, def, 1, &extras, &id, NULL, &err))) goto fail;
    if ((rc = api_study_acquire(ctx, id, &st))) goto fail;
    pthread_mutex_lock(&st->lock);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sto_trial_in in = {.params = trials[i].params, .state = trials[i].state, .value = trials[i].value,
                           .value_std = trials[i].value_std, .value_n = trials[i].value_n,
                           .started = trials[i].started,
                           .finished = trials[i].finished, .steps = trials[i].steps,
                           .step_values = trials[i].step_values, .n_steps = trials[i].n_steps,
                           .user_attrs = trials[i].attrs, .note = trials[i].note, .error = trials[i].error,
                           .values_json = trials[i].values_json, .metrics_json = trials[i].metrics_json,
                           .step_flags = trials[i].details.flags, .step_rungs = trials[i].details.rungs,
                           .step_curves = (const char *const *)trials[i].details.curves};
        rc = api_trial_add(ctx, st, &in, trials[i].x, NULL, NULL);
    }
    /* created paused (hold): no node started a trial of it, nor answered
     * an ask, before its history was in; now it runs */
    if (rc == 0) rc = sto_study_transition_ev(ctx->db, id, API_STATE_BIT(STO_STUDY_PAUSED), STO_STUDY_RUNNING, NULL);
    if (rc == 0) api_external_end(ctx, st, hpo_now()); /* an external study whose budget is spent ends */
    int embedded = st->def.embedded;
    pthread_mutex_unlock(&st->lock);
    api_study_release(ctx, st);
    st = NULL;
    if (rc) goto fail;
    api_import_end(ctx, id);
    if (embedded) api_queue_set(ctx, id, STO_STUDY_RUNNING); /* now the scheduler may start its trials */
    api_events_wake(ctx);
    api_jobs_wake(ctx);
    sto_study s;
    if ((rc = sto_study_get(ctx->db, id, &s))) goto fail;
    api_reply_json(resp, 201, json_pack("{s:o, s:I, s:I}", "study", api_study_json(ctx, &s, 0), "imported",
                                        (json_int_t)n, "skipped", (json_int_t)skipped));
    sto_study_clear(&s);
    import_trials_free(trials, n);
    api_study_extras_clear(&extras);
    json_decref(def);
    return;
fail:
    if (id > 0) { /* nothing half-imported stays */
        sto_study_delete(ctx->db, id);
        api_study_forget(ctx, id);
        api_import_end(ctx, id);
    }
    import_trials_free(trials, n);
    api_study_extras_clear(&extras);
    json_decref(def);
    if (!resp->body && rc == HPO_ENOTFOUND && id > 0) /* a DELETE of the new study won the race */
        api_fail(resp, 409, "conflict", "study", "study %lld was deleted during its import: nothing was imported",
                 (long long)id);
    else if (!resp->body)
        api_fail_rc(resp, rc, &err);
}

void api_h_study_import(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    (void)id;
    static const char *keys[] = {"format", "study", "trials", "name"};
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    const json_t *name = json_object_get(body, "name");
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto out;
    if (name && !json_is_string(name)) {
        api_fail(resp, 400, "invalid_argument", "name", "name must be a string");
        goto out;
    }
    import_doc(ctx, body, json_string_value(name), resp);
out:
    json_decref(body);
}

void api_h_study_copy(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    static const char *keys[] = {"name"};
    json_t *body = NULL;
    if (req->body_len > 0) {
        if (!(body = api_body_object(req, resp))) return;
        if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) goto out;
    }
    const json_t *name = json_object_get(body, "name");
    if (name && !json_is_string(name)) {
        api_fail(resp, 400, "invalid_argument", "name", "name must be a string");
        goto out;
    }
    int64_t n = trial_count(ctx, id);
    if (api_heavy_acquire(ctx, n, resp)) goto out;
    json_t *doc = export_study(ctx, id, resp);
    if (doc) import_doc(ctx, doc, json_string_value(name), resp);
    json_decref(doc);
    api_heavy_release(ctx, n);
out:
    json_decref(body);
}
