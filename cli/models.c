/* models.c - `hpo refit`, `hpo ensemble`, `hpo models` and `hpo predict`:
 * the end of the workflow of an embedded study (cli.h). Refits and
 * ensembles are jobs on hpod's worker pool; --wait follows them (polling
 * GET /api/v1/models/{id}) and prints their metrics, exit 6 if one failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "hpo.h"

/* "accuracy 0.8123 loss 0.52" of a metrics object, "-" if none. */
static void fmt_metrics(char *buf, size_t n, const json_t *m) {
    const char *key;
    json_t *v;
    size_t used = 0;
    snprintf(buf, n, "-");
    json_object_foreach((json_t *)m, key, v) {
        if (!json_is_number(v)) continue;
        int w = snprintf(buf + used, n - used, "%s%s %.4g", used ? " " : "", key, json_number_value(v));
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
}

/* Options shared by refit and ensemble, into body: 1 if argv[*i] was one
 * (its value consumed), 0 if not, -1 (usage printed) if its value is bad. */
static int job_option(int argc, char **argv, int *i, json_t *body);

/* A comma-separated list of ids as a JSON array; NULL on a bad list. */
static json_t *id_list(const char *s) {
    json_t *arr = json_array();
    while (*s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= 0 || (*end && *end != ',')) {
            json_decref(arr);
            return NULL;
        }
        json_array_append_new(arr, json_integer(v));
        s = *end ? end + 1 : end;
    }
    if (json_array_size(arr) == 0) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static int job_option(int argc, char **argv, int *i, json_t *body) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    static const char *takes_value[] = {"--top", "--trials", "--members", "--epochs-factor", "--method", "--rounds"};
    size_t k = 0;
    while (k < HPO_ARRAY_LEN(takes_value) && strcmp(a, takes_value[k]) != 0) k++;
    if (k == HPO_ARRAY_LEN(takes_value)) return 0;
    if (!v) return cli_usage("%s needs a value", a), -1;
    (*i)++;
    if (strcmp(a, "--top") == 0) {
        if (!cli_id(v)) return cli_usage("--top needs a number >= 1"), -1;
        json_object_set_new(body, "top_n", json_integer(cli_id(v)));
    } else if (strcmp(a, "--rounds") == 0) {
        if (!cli_id(v)) return cli_usage("--rounds needs a number >= 1"), -1;
        json_object_set_new(body, "rounds", json_integer(cli_id(v)));
    } else if (strcmp(a, "--epochs-factor") == 0) {
        char *end;
        double f = strtod(v, &end);
        if (*end || !(f > 0) || !isfinite(f)) return cli_usage("--epochs-factor needs a number > 0"), -1;
        json_object_set_new(body, "epochs_factor", json_real(f));
    } else if (strcmp(a, "--method") == 0) {
        json_object_set_new(body, "method", json_string(v));
    } else {
        json_t *l = id_list(v);
        if (!l) return cli_usage("%s needs ids separated by commas, e.g. 3,5,8", a), -1;
        json_object_set_new(body, strcmp(a, "--trials") == 0 ? "trials" : "members", l);
    }
    return 1;
}

static void print_model_row(const json_t *m) {
    char val[128], test[128], trial[24];
    const json_t *res = json_object_get(m, "result");
    fmt_metrics(val, sizeof val, json_object_get(res, "val"));
    fmt_metrics(test, sizeof test, json_object_get(res, "test"));
    const json_t *t = json_object_get(m, "trial_id");
    if (json_is_integer(t)) snprintf(trial, sizeof trial, "%lld", (long long)json_integer_value(t));
    else snprintf(trial, sizeof trial, "-");
    printf("%-6lld %-9s %-9s %-6s %-28s %s\n", (long long)json_integer_value(json_object_get(m, "id")),
           json_string_value(json_object_get(m, "kind")), json_string_value(json_object_get(m, "state")), trial,
           val, test);
    const char *err = json_string_value(json_object_get(m, "error"));
    if (err) printf("       error: %s\n", err);
}

static void model_header(void) { printf("%-6s %-9s %-9s %-6s %-28s %s\n", "MODEL", "KIND", "STATE", "TRIAL", "VAL", "TEST"); }

/* Polls the models until each is complete or failed; fills done[] with
 * their final JSON (new references). */
static int wait_models(cli_ctx *c, json_t *ids, json_t **done) {
    size_t n = json_array_size(ids), left = n;
    for (size_t i = 0; i < n; i++) done[i] = NULL;
    while (left) {
        for (size_t i = 0; i < n; i++) {
            if (done[i]) continue;
            char path[64];
            snprintf(path, sizeof path, "/api/v1/models/%lld", (long long)json_integer_value(json_array_get(ids, i)));
            json_t *m = NULL;
            int rc = cli_call(c, "GET", path, NULL, &m);
            if (rc) return rc;
            const char *st = json_string_value(json_object_get(m, "state"));
            if (st && (strcmp(st, "complete") == 0 || strcmp(st, "failed") == 0)) {
                done[i] = m;
                left--;
            } else {
                json_decref(m);
            }
        }
        if (left) {
            struct timespec ts = {0, 300 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return CLI_OK;
}

int cli_refit(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    int wait = 0, rc;
    json_t *body = json_object();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int opt = strcmp(a, "--members") && strcmp(a, "--method") && strcmp(a, "--rounds")
                      ? job_option(argc, argv, &i, body) : 0;
        if (opt < 0) {
            json_decref(body);
            return CLI_EUSAGE;
        }
        if (opt) continue;
        if (strcmp(a, "--wait") == 0) wait = 1;
        else if (!id && (id = cli_id(a))) continue;
        else {
            json_decref(body);
            return cli_usage("refit takes a study ID, --top N, --trials ID,ID, --epochs-factor F, --wait; not %s", a);
        }
    }
    if (!id) {
        json_decref(body);
        return cli_usage("refit needs a study ID");
    }
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/refits", id);
    json_t *out = NULL;
    rc = cli_call(c, "POST", path, body, &out);
    json_decref(body);
    if (rc) return rc;
    json_t *refits = json_object_get(out, "refits"), *ids = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(refits, i, m) json_array_append(ids, json_object_get(m, "id"));
    if (!wait) {
        if (!cli_emit(c, out)) {
            model_header();
            json_array_foreach(refits, i, m) print_model_row(m);
        }
        json_decref(ids);
        json_decref(out);
        return CLI_OK;
    }
    size_t n = json_array_size(ids);
    json_t **done = hpo_xcalloc(n + 1, sizeof *done);
    rc = wait_models(c, ids, done);
    int failed = 0;
    json_t *arr = json_array(); /* --json: the final models */
    for (i = 0; i < n; i++) {
        if (!done[i]) continue;
        failed |= strcmp(json_string_value(json_object_get(done[i], "state")), "complete") != 0;
        json_array_append(arr, done[i]);
        json_decref(done[i]);
    }
    if (rc == CLI_OK && !cli_emit(c, arr)) {
        model_header();
        json_array_foreach(arr, i, m) print_model_row(m);
    }
    json_decref(arr);
    free(done);
    json_decref(ids);
    json_decref(out);
    return rc ? rc : failed ? CLI_EJOB : CLI_OK;
}

int cli_ensemble(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    int wait = 0, rc;
    json_t *body = json_object();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int opt = strcmp(a, "--trials") && strcmp(a, "--epochs-factor") ? job_option(argc, argv, &i, body) : 0;
        if (opt < 0) {
            json_decref(body);
            return CLI_EUSAGE;
        }
        if (opt) continue;
        if (strcmp(a, "--wait") == 0) wait = 1;
        else if (!id && (id = cli_id(a))) continue;
        else {
            json_decref(body);
            return cli_usage("ensemble takes a study ID, --members ID,ID or --top N, --method mean|weighted|greedy, "
                             "--rounds R, --wait; not %s", a);
        }
    }
    if (!id) {
        json_decref(body);
        return cli_usage("ensemble needs a study ID");
    }
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/ensembles", id);
    json_t *out = NULL;
    rc = cli_call(c, "POST", path, body, &out);
    json_decref(body);
    if (rc) return rc;
    if (!wait) {
        if (!cli_emit(c, out)) printf("%lld\n", (long long)json_integer_value(json_object_get(out, "id")));
        json_decref(out);
        return CLI_OK;
    }
    json_t *ids = json_pack("[O]", json_object_get(out, "id")), *e = NULL;
    json_decref(out);
    rc = wait_models(c, ids, &e);
    json_decref(ids);
    if (rc) return rc;
    int failed = strcmp(json_string_value(json_object_get(e, "state")), "complete") != 0;
    if (!cli_emit(c, e)) {
        const json_t *res = json_object_get(e, "result");
        printf("ensemble %lld (%s): %s\n", (long long)json_integer_value(json_object_get(e, "id")),
               json_string_value(json_object_get(json_object_get(e, "how"), "method")),
               json_string_value(json_object_get(e, "state")));
        printf("%-8s %-6s %-7s %-28s %s\n", "MEMBER", "TRIAL", "WEIGHT", "VAL", "TEST");
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(res, "members"), i, m) {
            char val[128], test[128];
            fmt_metrics(val, sizeof val, json_object_get(m, "val"));
            fmt_metrics(test, sizeof test, json_object_get(m, "test"));
            const char *skipped = json_string_value(json_object_get(m, "skipped"));
            printf("%-8lld %-6lld %-7.3f %-28s %s%s%s\n", (long long)json_integer_value(json_object_get(m, "model_id")),
                   (long long)json_integer_value(json_object_get(m, "trial_id")),
                   json_number_value(json_object_get(m, "weight")), val, test, skipped ? "  skipped: " : "",
                   skipped ? skipped : "");
        }
        char val[128], test[128];
        fmt_metrics(val, sizeof val, json_object_get(res, "val"));
        fmt_metrics(test, sizeof test, json_object_get(res, "test"));
        printf("%-8s %-6s %-7s %-28s %s\n", "ensemble", "", "", val, test);
        const char *err = json_string_value(json_object_get(e, "error"));
        if (err) printf("error: %s\n", err);
    }
    json_decref(e);
    return failed ? CLI_EJOB : CLI_OK;
}

int cli_models(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    for (int i = 0; i < argc; i++) {
        if (!id && (id = cli_id(argv[i]))) continue;
        else return cli_usage("models takes a study ID, not %s", argv[i]);
    }
    if (!id) return cli_usage("models needs a study ID");
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/models", id);
    json_t *out = NULL;
    int rc = cli_call(c, "GET", path, NULL, &out);
    if (rc) return rc;
    json_t *models = json_object_get(out, "models");
    if (!cli_emit(c, out)) {
        model_header();
        size_t i;
        json_t *m;
        json_array_foreach(models, i, m) print_model_row(m);
    }
    json_decref(out);
    return CLI_OK;
}

int cli_predict(cli_ctx *c, int argc, char **argv) {
    if (argc < 1 || argc > 2) return cli_usage("predict needs MODEL and FILE.json (or - for stdin)");
    long long id = cli_id(argv[0]);
    if (!id) return cli_usage("%s is not a model id", argv[0]);
    const char *file = argc == 2 ? argv[1] : "-";
    json_error_t jerr;
    json_t *in = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &jerr) : json_load_file(file, 0, &jerr);
    if (!in) {
        fprintf(stderr, "hpo: %s: %s (line %d)\n", file, jerr.text, jerr.line);
        return CLI_EUSAGE;
    }
    /* {"inputs": rows} or the rows themselves */
    json_t *body = json_is_array(in) ? json_pack("{s:O}", "inputs", in) : json_incref(in);
    json_decref(in);
    char path[64];
    snprintf(path, sizeof path, "/api/v1/models/%lld/predict", id);
    json_t *out = NULL;
    int rc = cli_call(c, "POST", path, body, &out);
    json_decref(body);
    if (rc == CLI_OK && !cli_emit(c, out)) cli_print_json(out, 1);
    json_decref(out);
    return rc;
}
