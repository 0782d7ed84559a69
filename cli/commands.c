/* commands.c - studies (create, list, get, delete), best, trials and
 * ask/report/tell (cli.h). Each parses its own arguments (main.c has taken
 * the output flags), makes one call and prints the answer: cli_emit for
 * --json/--field/--quiet, else its human form. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"

/* "k=v, k=v" of a params object, at most n bytes. */
static void fmt_params(char *buf, size_t n, const json_t *params) {
    const char *key;
    json_t *v;
    size_t used = 0;
    buf[0] = '\0';
    json_object_foreach((json_t *)params, key, v) {
        char val[64];
        cli_fmt_value(val, sizeof val, v);
        int w = snprintf(buf + used, n - used, "%s%s=%s", used ? " " : "", key, val);
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
}

/* ---- studies ---- */
int cli_study_create(cli_ctx *c, int argc, char **argv) {
    const char *file = NULL;
    int load_if_exists = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--load-if-exists") == 0) load_if_exists = 1;
        else if (!file && (argv[i][0] != '-' || strcmp(argv[i], "-") == 0)) file = argv[i];
        else return cli_usage("study create takes one FILE.json and --load-if-exists");
    }
    if (!file) return cli_usage("study create needs FILE.json (or - for stdin)");
    json_error_t jerr;
    json_t *def = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &jerr) : json_load_file(file, 0, &jerr);
    if (!def) {
        fprintf(stderr, "hpo: %s: %s (line %d)\n", file, jerr.text, jerr.line);
        return CLI_EUSAGE;
    }
    if (load_if_exists && json_is_object(def)) json_object_set_new(def, "load_if_exists", json_true());
    json_t *out = NULL;
    int rc = cli_call(c, "POST", "/api/v1/studies", def, &out);
    json_decref(def);
    if (rc) return rc;
    if (!cli_emit(c, out)) printf("%lld\n", (long long)json_integer_value(json_object_get(out, "id")));
    json_decref(out);
    return CLI_OK;
}

static long long finished_of(const json_t *study) {
    const json_t *b = json_object_get(study, "trials_by_state");
    static const char *done[] = {"complete", "pruned", "failed", "cancelled"};
    long long n = 0;
    for (size_t i = 0; i < HPO_ARRAY_LEN(done); i++) n += json_integer_value(json_object_get(b, done[i]));
    return n;
}

int cli_study_list(cli_ctx *c, int argc, char **argv) {
    if (argc) return cli_usage("study list takes no argument %s", argv[0]);
    json_t *out = NULL;
    int rc = cli_call(c, "GET", "/api/v1/studies", NULL, &out);
    if (rc) return rc;
    json_t *list = json_object_get(out, "studies");
    if (!cli_emit(c, out)) {
        printf("%-5s %-28s %-9s %-9s %-12s %s\n", "ID", "NAME", "ALGORITHM", "STATE", "FINISHED", "BEST");
        size_t i;
        json_t *s;
        json_array_foreach(list, i, s) {
            char progress[48], best[32];
            const json_t *max = json_object_get(s, "max_trials");
            if (json_is_integer(max))
                snprintf(progress, sizeof progress, "%lld/%lld", finished_of(s), (long long)json_integer_value(max));
            else
                snprintf(progress, sizeof progress, "%lld", finished_of(s));
            cli_fmt_value(best, sizeof best, json_object_get(json_object_get(s, "best"), "value"));
            printf("%-5lld %-28.28s %-9s %-9s %-12s %s\n", (long long)json_integer_value(json_object_get(s, "id")),
                   json_string_value(json_object_get(s, "name")), json_string_value(json_object_get(s, "algorithm")),
                   json_string_value(json_object_get(s, "state")), progress, best);
        }
    }
    json_decref(out);
    return CLI_OK;
}

int cli_study_get(cli_ctx *c, int argc, char **argv) {
    return cli_id_call(c, argc, argv, "study get", "study", "GET", "/api/v1/studies");
}
int cli_study_delete(cli_ctx *c, int argc, char **argv) {
    return cli_id_call(c, argc, argv, "study delete", "study", "DELETE", "/api/v1/studies");
}

int cli_best(cli_ctx *c, int argc, char **argv) {
    long long id = 0, top = 1;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f = cli_flag_value(argc, argv, &i, "--top", &v);
        if (f < 0) return cli_usage("--top needs a number");
        if (f) {
            top = cli_id(v);
            if (top < 1 || top > 1000) return cli_usage("--top must be in 1..1000");
        } else if (!id && (id = cli_id(argv[i]))) {
        } else {
            return cli_usage("best takes a study ID and --top N, not %s", argv[i]);
        }
    }
    if (!id) return cli_usage("best needs a study ID");
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/best?top_n=%lld", id, top);
    json_t *out = NULL;
    int rc = cli_call(c, "GET", path, NULL, &out);
    if (rc) return rc;
    if (!cli_emit(c, out)) {
        json_t *trials = json_object_get(out, "trials");
        /* several objectives or constraints: the Pareto front, each with its
         * vector (top_n does not apply there: the server answers the front) */
        int front = json_object_get(out, "hypervolume") != NULL;
        if (json_array_size(trials) == 0) fprintf(stderr, "hpo: study %lld has no complete trial yet\n", id);
        else if (front) printf("the Pareto front: %zu trial(s)%s\n%-4s %-8s %-6s %-24s %s\n", json_array_size(trials),
                               top > 1 ? " (--top does not apply)" : "", "#", "TRIAL", "NUMBER", "VALUES", "PARAMS");
        else printf("%-4s %-8s %-6s %-12s %s\n", "RANK", "TRIAL", "NUMBER", "VALUE", "PARAMS");
        size_t i;
        json_t *t;
        json_array_foreach(trials, i, t) {
            char value[96], std[32], params[1024];
            cli_fmt_value(value, sizeof value, json_object_get(t, "value"));
            cli_fmt_value(std, sizeof std, json_object_get(t, "value_std"));
            if (strcmp(std, "-") != 0) snprintf(value + strlen(value), sizeof value - strlen(value), "±%s", std);
            if (front) { /* the objective vector */
                size_t k, len = 0;
                json_t *v;
                value[0] = '\0';
                json_array_foreach(json_object_get(t, "values"), k, v) {
                    char one[32];
                    cli_fmt_value(one, sizeof one, v);
                    len += (size_t)snprintf(value + len, len < sizeof value ? sizeof value - len : 0, "%s%s",
                                            k ? "," : "", one);
                    if (len >= sizeof value) break;
                }
            }
            fmt_params(params, sizeof params, json_object_get(t, "params"));
            printf("%-4zu %-8lld %-6lld %-*s %s\n", i + 1, (long long)json_integer_value(json_object_get(t, "trial_id")),
                   (long long)json_integer_value(json_object_get(t, "number")), front ? 24 : 12, value, params);
        }
        json_t *p = json_object_get(out, "p_value_top2");
        if (json_is_number(p) && json_array_size(trials) >= 2)
            printf("p-value that #1 and #2 differ (Welch): %.3g\n", json_number_value(p));
    }
    json_decref(out);
    return CLI_OK;
}

int cli_trials(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    const char *state = NULL, *order = NULL, *limit = "100", *offset = "0";
    int desc = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f;
        if ((f = cli_flag_value(argc, argv, &i, "--state", &v))) state = v;
        else if ((f = cli_flag_value(argc, argv, &i, "--order", &v))) order = v;
        else if ((f = cli_flag_value(argc, argv, &i, "--limit", &v))) limit = v;
        else if ((f = cli_flag_value(argc, argv, &i, "--offset", &v))) offset = v;
        else if (strcmp(argv[i], "--desc") == 0) desc = 1;
        else if (!id && (id = cli_id(argv[i]))) continue;
        else return cli_usage("trials takes a study ID and --state/--order/--desc/--limit/--offset, not %s", argv[i]);
        if (f < 0) return cli_usage("%s needs a value", argv[i]);
    }
    if (!id) return cli_usage("trials needs a study ID");
    /* whole numbers of at most 18 digits: the path below always fits */
    for (const char *s = limit; *s; s++) if (*s < '0' || *s > '9') return cli_usage("--limit must be a whole number");
    for (const char *s = offset; *s; s++) if (*s < '0' || *s > '9') return cli_usage("--offset must be a whole number");
    if (strlen(limit) > 18 || strlen(offset) > 18) return cli_usage("--limit and --offset take at most 18 digits");
    char path[512];
    int n = snprintf(path, sizeof path, "/api/v1/studies/%lld/trials?limit=%s&offset=%s%s", id, limit, offset,
                     desc ? "&desc=true" : "");
    if (state) {
        for (const char *s = state; *s; s++) if (*s < 'a' || *s > 'z') return cli_usage("bad --state %s", state);
        n += snprintf(path + n, sizeof path - (size_t)n, "&state=%.32s", state);
    }
    if (order) {
        for (const char *s = order; *s; s++) if (*s < 'a' || *s > 'z') return cli_usage("bad --order %s", order);
        snprintf(path + n, sizeof path - (size_t)n, "&order=%.32s", order);
    }
    json_t *out = NULL;
    int rc = cli_call(c, "GET", path, NULL, &out);
    if (rc) return rc;
    if (!cli_emit(c, out)) {
        json_t *trials = json_object_get(out, "trials");
        printf("%-8s %-6s %-10s %-12s %-9s %s\n", "TRIAL", "NUMBER", "STATE", "VALUE", "LAST_STEP", "PARAMS");
        size_t i;
        json_t *t;
        json_array_foreach(trials, i, t) {
            char value[48], params[1024], last_step[24];
            cli_fmt_value(value, sizeof value, json_object_get(t, "value"));
            fmt_params(params, sizeof params, json_object_get(t, "params"));
            json_t *ls = json_object_get(t, "last_step");
            /* the last step reported (an embedded trial's last epoch), not a count */
            if (json_is_integer(ls)) snprintf(last_step, sizeof last_step, "%lld", (long long)json_integer_value(ls));
            else snprintf(last_step, sizeof last_step, "-");
            /* pbt: where a bred trial comes from */
            char from[96] = "";
            json_t *lin = json_object_get(t, "lineage");
            if (json_is_object(lin))
                snprintf(from, sizeof from, "  (bred from #%lld at epoch %lld)",
                         (long long)json_integer_value(json_object_get(lin, "parent_number")),
                         (long long)json_integer_value(json_object_get(lin, "parent_epoch")));
            printf("%-8lld %-6lld %-10s %-12s %-9s %s%s\n", (long long)json_integer_value(json_object_get(t, "trial_id")),
                   (long long)json_integer_value(json_object_get(t, "number")),
                   json_string_value(json_object_get(t, "state")), value, last_step, params, from);
        }
        long long total = json_integer_value(json_object_get(out, "total"));
        if ((long long)json_array_size(trials) < total)
            fprintf(stderr, "(%zu of %lld trials shown; see --limit and --offset)\n", json_array_size(trials), total);
    }
    json_decref(out);
    return CLI_OK;
}

/* ---- ask / report / tell ---- */
int cli_ask(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--params-only") == 0)
            return cli_usage("ask --params-only is gone (it hid the trial id you must tell): use "
                             "--field params, or --field trial_id --field params.NAME");
        else if (!id && (id = cli_id(argv[i]))) continue;
        else return cli_usage("ask takes a study ID, not %s", argv[i]);
    }
    if (!id) return cli_usage("ask needs a study ID");
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/ask", id);
    json_t *out = NULL;
    int rc = cli_call(c, "POST", path, NULL, &out);
    if (rc) return rc;
    if (!cli_emit(c, out)) cli_print_json(out, 1);
    json_decref(out);
    return CLI_OK;
}

int cli_report(cli_ctx *c, int argc, char **argv) {
    if (argc < 3) return cli_usage("report needs TRIAL STEP VALUE (one VALUE per objective)");
    long long trial = cli_id(argv[0]);
    char *end;
    errno = 0;
    long long step = strtoll(argv[1], &end, 10);
    if (!trial) return cli_usage("%s is not a trial id", argv[0]);
    if (errno || *end || end == argv[1] || step < 0) return cli_usage("STEP must be an integer >= 0, not %s", argv[1]);
    json_t *values = json_array();
    for (int i = 2; i < argc; i++) {
        double value;
        if (cli_parse_number(argv[i], &value)) {
            json_decref(values);
            return cli_usage("VALUE must be a finite number, not %s", argv[i]);
        }
        json_array_append_new(values, json_real(value));
    }
    char path[64];
    snprintf(path, sizeof path, "/api/v1/trials/%lld/report", trial);
    /* one value: "value"; several (one per objective): "values" */
    json_t *body = json_pack("{s:I}", "step", (json_int_t)step), *out = NULL;
    if (argc == 3)
        json_object_set(body, "value", json_array_get(values, 0));
    else
        json_object_set(body, "values", values);
    json_decref(values);
    int rc = cli_call(c, "POST", path, body, &out);
    json_decref(body);
    if (rc) return rc;
    int prune = json_is_true(json_object_get(out, "prune"));
    if (!cli_emit(c, out)) printf("%s\n", prune ? "prune" : "continue");
    json_decref(out);
    return prune ? CLI_PRUNE : CLI_OK;
}

int cli_tell(cli_ctx *c, int argc, char **argv) {
    if (argc < 2) return cli_usage("tell needs TRIAL and VALUE (or --state failed|pruned)");
    long long trial = cli_id(argv[0]);
    if (!trial) return cli_usage("%s is not a trial id", argv[0]);
    const char *state = NULL, *error = NULL;
    json_t *values = json_array(), *metrics = json_object();
    int rc = CLI_OK, repeats = 0;
    for (int i = 1; i < argc && rc == CLI_OK; i++) {
        const char *v = NULL;
        int f;
        double x;
        if ((f = cli_flag_value(argc, argv, &i, "--state", &v))) state = v;
        else if ((f = cli_flag_value(argc, argv, &i, "--error", &v))) error = v;
        else if ((f = cli_flag_value(argc, argv, &i, "--metric", &v)) > 0) rc = cli_put_metric(metrics, v);
        else if (f == 0 && strcmp(argv[i], "--repeats") == 0) repeats = 1;
        else if (f == 0 && cli_parse_number(argv[i], &x) == 0) json_array_append_new(values, json_real(x));
        else if (f == 0) rc = cli_usage("tell: %s is neither a finite number nor --state/--error/--metric/--repeats", argv[i]);
        if (f < 0) rc = cli_usage("%s needs a value", argv[i]);
    }
    if (rc == CLI_OK && state && strcmp(state, "failed") && strcmp(state, "pruned") && strcmp(state, "complete"))
        rc = cli_usage("--state must be failed, pruned or complete");
    if (rc == CLI_OK && !state && json_array_size(values) == 0) rc = cli_usage("tell needs a VALUE or --state");
    if (rc == CLI_OK && state && strcmp(state, "complete") && json_array_size(values))
        rc = cli_usage("--state %s takes no VALUE", state);
    if (rc) {
        json_decref(values);
        json_decref(metrics);
        return rc;
    }
    json_t *body = json_object();
    if (state) json_object_set_new(body, "state", json_string(state));
    if (error) json_object_set_new(body, "error", json_string(error));
    cli_put_outcome(body, values, repeats, metrics);
    json_decref(values);
    json_decref(metrics);
    char path[64];
    snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", trial);
    json_t *out = NULL;
    rc = cli_call(c, "POST", path, body, &out);
    json_decref(body);
    if (rc == CLI_OK && !cli_emit(c, out)) cli_print_json(out, 1);
    json_decref(out);
    return rc;
}
