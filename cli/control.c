/* control.c - `hpo study pause|resume|cancel ID`, `hpo trial ID` and
 * `hpo importance ID` (cli.h): one call each on a study or a trial. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"

/* POST /api/v1/studies/ID/<what> (no body); prints "study ID: <state>". */
static int control(cli_ctx *c, int argc, char **argv, const char *what) {
    char cmd[32];
    snprintf(cmd, sizeof cmd, "study %s", what);
    long long id = cli_one_id(argc, argv, cmd, "study");
    if (!id) return CLI_EUSAGE;
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/%s", id, what);
    json_t *out = NULL;
    int rc = cli_call(c, "POST", path, NULL, &out);
    if (rc) return rc;
    if (!cli_emit(c, out)) {
        const char *state = json_string_value(json_object_get(out, "state"));
        printf("study %lld: %s\n", id, state ? state : "?");
    }
    json_decref(out);
    return CLI_OK;
}

int cli_study_pause(cli_ctx *c, int argc, char **argv) { return control(c, argc, argv, "pause"); }
int cli_study_resume(cli_ctx *c, int argc, char **argv) { return control(c, argc, argv, "resume"); }
int cli_study_cancel(cli_ctx *c, int argc, char **argv) { return control(c, argc, argv, "cancel"); }

int cli_trial(cli_ctx *c, int argc, char **argv) {
    return cli_id_call(c, argc, argv, "trial", "trial", "GET", "/api/v1/trials");
}

/* PARAM IMPORTANCE and a bar of the share, most important first. */
int cli_importance(cli_ctx *c, int argc, char **argv) {
    long long id = cli_one_id(argc, argv, "importance", "study");
    if (!id) return CLI_EUSAGE;
    char path[64];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/importance", id);
    json_t *out = NULL;
    int rc = cli_call(c, "GET", path, NULL, &out);
    if (rc) return rc;
    if (!cli_emit(c, out)) {
        printf("%-24s %-10s\n", "PARAM", "IMPORTANCE");
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(out, "importance"), i, p) {
            const json_t *v = json_object_get(p, "importance");
            char bar[41] = "";
            char val[32];
            cli_fmt_value(val, sizeof val, v);
            if (json_is_number(v)) {
                int w = (int)(json_number_value(v) * 40 + 0.5);
                for (int k = 0; k < w && k < 40; k++) bar[k] = '#';
                bar[w < 40 ? (w < 0 ? 0 : w) : 40] = '\0';
                snprintf(val, sizeof val, "%.3f", json_number_value(v));
            }
            printf("%-24s %-10s %s\n", json_string_value(json_object_get(p, "param")), val, bar);
        }
        const char *method = json_string_value(json_object_get(out, "method"));
        printf("(%s over %lld complete trials)\n", method ? method : "importance",
               (long long)json_integer_value(json_object_get(out, "n_trials")));
    }
    json_decref(out);
    return CLI_OK;
}
