/* manage.c - study management (cli.h): `study enqueue` (a trial with fixed
 * params), `study add-trial` (a finished trial), `study export`, `study
 * import` and `study copy` (the "hpo.study/1" document). --param NAME=VALUE
 * reads VALUE as JSON when it is JSON (3, 0.01, true, "x") and as a string
 * otherwise (adam). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"

/* Adds NAME=VALUE to obj; CLI_EUSAGE when it has no '=' or no name. */
static int put_param(json_t *obj, const char *arg, const char *flag) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) return cli_usage("%s takes NAME=VALUE, not %s", flag, arg);
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(eq - arg) < 255 ? (int)(eq - arg) : 255, arg);
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!v || json_is_object(v) || json_is_array(v)) {
        json_decref(v);
        v = json_string(eq + 1);
    }
    json_object_set_new(obj, name, v);
    return CLI_OK;
}

/* Posts body to /api/v1/studies/<id><suffix>; prints the trial it answers
 * ("trial T (#N): STATE"). */
static int post_trial(cli_ctx *c, long long id, const char *suffix, json_t *body) {
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld%s", id, suffix);
    json_t *out = NULL;
    int rc = cli_call(c, "POST", path, body, &out);
    if (rc) return rc;
    if (!cli_emit(c, out)) {
        char value[64];
        cli_fmt_value(value, sizeof value, json_object_get(out, "value"));
        printf("trial %lld (#%lld): %s%s%s\n", (long long)json_integer_value(json_object_get(out, "id")),
               (long long)json_integer_value(json_object_get(out, "number")),
               json_string_value(json_object_get(out, "state")), json_is_number(json_object_get(out, "value")) ? " " : "",
               json_is_number(json_object_get(out, "value")) ? value : "");
    }
    json_decref(out);
    return CLI_OK;
}

int cli_study_enqueue(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    json_t *params = json_object();
    int rc = CLI_OK;
    for (int i = 0; i < argc && rc == CLI_OK; i++) {
        const char *v = NULL;
        int f = cli_flag_value(argc, argv, &i, "--param", &v);
        if (f > 0) rc = put_param(params, v, "--param");
        else if (f < 0) rc = cli_usage("--param needs NAME=VALUE");
        else if (!id && (id = cli_id(argv[i]))) continue;
        else rc = cli_usage("study enqueue takes a study ID and --param NAME=VALUE, not %s", argv[i]);
    }
    if (rc == CLI_OK && !id) rc = cli_usage("study enqueue needs a study ID");
    if (rc == CLI_OK) {
        json_t *body = json_pack("{s:O}", "params", params);
        rc = post_trial(c, id, "/enqueue", body);
        json_decref(body);
    }
    json_decref(params);
    return rc;
}

int cli_study_add_trial(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    const char *state = NULL, *error = NULL;
    json_t *params = json_object(), *values = json_array(), *steps = json_object(), *metrics = json_object();
    int rc = CLI_OK, repeats = 0;
    for (int i = 0; i < argc && rc == CLI_OK; i++) {
        const char *v = NULL;
        double x;
        int f;
        if ((f = cli_flag_value(argc, argv, &i, "--param", &v)) > 0) {
            rc = put_param(params, v, "--param");
        } else if (f == 0 && (f = cli_flag_value(argc, argv, &i, "--value", &v)) > 0) {
            if (cli_parse_number(v, &x)) rc = cli_usage("--value must be a finite number, not %s", v);
            else json_array_append_new(values, json_real(x));
        } else if (f == 0 && (f = cli_flag_value(argc, argv, &i, "--metric", &v)) > 0) {
            rc = cli_put_metric(metrics, v);
        } else if (f == 0 && strcmp(argv[i], "--repeats") == 0) {
            repeats = 1;
        } else if (f == 0 && (f = cli_flag_value(argc, argv, &i, "--intermediate", &v)) > 0) {
            const char *eq = strchr(v, '=');
            char *end;
            errno = 0;
            long long step = eq ? strtoll(v, &end, 10) : -1;
            if (!eq || end != eq || errno || step < 0 || cli_parse_number(eq + 1, &x))
                rc = cli_usage("--intermediate takes STEP=VALUE (STEP an integer >= 0), not %s", v);
            else {
                char key[32];
                snprintf(key, sizeof key, "%lld", step);
                json_object_set_new(steps, key, json_real(x));
            }
        } else if (f == 0 && (f = cli_flag_value(argc, argv, &i, "--state", &v)) > 0) {
            state = v;
        } else if (f == 0 && (f = cli_flag_value(argc, argv, &i, "--error", &v)) > 0) {
            error = v;
        } else if (f < 0) {
            rc = cli_usage("%s needs a value", argv[i]);
        } else if (!id && (id = cli_id(argv[i]))) {
            continue;
        } else {
            rc = cli_usage("study add-trial: %s is not a study ID or one of its flags", argv[i]);
        }
    }
    if (rc == CLI_OK && !id) rc = cli_usage("study add-trial needs a study ID");
    if (rc == CLI_OK && state && strcmp(state, "complete") && strcmp(state, "pruned") && strcmp(state, "failed"))
        rc = cli_usage("--state must be complete, pruned or failed");
    if (rc == CLI_OK && (!state || !strcmp(state, "complete")) && json_array_size(values) == 0)
        rc = cli_usage("a complete trial needs --value V (or --state pruned|failed)");
    if (rc == CLI_OK) {
        json_t *body = json_pack("{s:O}", "params", params);
        if (state) json_object_set_new(body, "state", json_string(state));
        if (error) json_object_set_new(body, "error", json_string(error));
        cli_put_outcome(body, values, repeats, metrics);
        if (json_object_size(steps)) json_object_set(body, "intermediate_values", steps);
        rc = post_trial(c, id, "/trials", body);
        json_decref(body);
    }
    json_decref(params);
    json_decref(values);
    json_decref(metrics);
    json_decref(steps);
    return rc;
}

int cli_study_export(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    const char *file = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f = cli_flag_value(argc, argv, &i, "-o", &v);
        if (f == 0) f = cli_flag_value(argc, argv, &i, "--output", &v);
        if (f > 0) file = v;
        else if (f < 0) return cli_usage("%s needs a FILE", argv[i]);
        else if (!id && (id = cli_id(argv[i]))) continue;
        else return cli_usage("study export takes a study ID and -o FILE, not %s", argv[i]);
    }
    if (!id) return cli_usage("study export needs a study ID");
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/export", id);
    json_t *out = NULL;
    int rc = cli_call(c, "GET", path, NULL, &out);
    if (rc) return rc;
    if (file && strcmp(file, "-") != 0) {
        if (cli_write_json(out, file) != 0) {
            fprintf(stderr, "hpo: cannot write %s\n", file);
            rc = CLI_EUSAGE;
        } else if (!c->quiet && !c->json && !c->n_field) {
            printf("%s: study %lld, %zu trials\n", file, id, json_array_size(json_object_get(out, "trials")));
        } else {
            cli_emit(c, out);
        }
    } else if (!cli_emit(c, out)) {
        cli_print_json(out, 0);
    }
    json_decref(out);
    return rc;
}

/* Prints an import's answer: the new study's id on stdout, the counts on
 * stderr. */
static int print_imported(cli_ctx *c, json_t *out) {
    if (!cli_emit(c, out)) {
        printf("%lld\n", (long long)json_integer_value(json_object_get(json_object_get(out, "study"), "id")));
        fprintf(stderr, "%lld trials imported, %lld skipped (running or queued)\n",
                (long long)json_integer_value(json_object_get(out, "imported")),
                (long long)json_integer_value(json_object_get(out, "skipped")));
    }
    json_decref(out);
    return CLI_OK;
}

int cli_study_import(cli_ctx *c, int argc, char **argv) {
    const char *file = NULL, *name = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f = cli_flag_value(argc, argv, &i, "--name", &v);
        if (f > 0) name = v;
        else if (f < 0) return cli_usage("--name needs a NAME");
        else if (!file && (argv[i][0] != '-' || strcmp(argv[i], "-") == 0)) file = argv[i];
        else return cli_usage("study import takes one FILE and --name NAME, not %s", argv[i]);
    }
    if (!file) return cli_usage("study import needs FILE (an export; - for stdin)");
    json_error_t jerr;
    json_t *doc = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &jerr) : json_load_file(file, 0, &jerr);
    if (!doc) {
        fprintf(stderr, "hpo: %s: %s (line %d)\n", file, jerr.text, jerr.line);
        return CLI_EUSAGE;
    }
    if (name) json_object_set_new(doc, "name", json_string(name));
    json_t *out = NULL;
    int rc = cli_call(c, "POST", "/api/v1/studies/import", doc, &out);
    json_decref(doc);
    return rc ? rc : print_imported(c, out);
}

int cli_study_copy(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    const char *name = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f = cli_flag_value(argc, argv, &i, "--name", &v);
        if (f > 0) name = v;
        else if (f < 0) return cli_usage("--name needs a NAME");
        else if (!id && (id = cli_id(argv[i]))) continue;
        else return cli_usage("study copy takes a study ID and --name NAME, not %s", argv[i]);
    }
    if (!id) return cli_usage("study copy needs a study ID");
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/copy", id);
    json_t *body = name ? json_pack("{s:s}", "name", name) : json_object(), *out = NULL;
    int rc = cli_call(c, "POST", path, body, &out);
    json_decref(body);
    return rc ? rc : print_imported(c, out);
}
