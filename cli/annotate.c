/* annotate.c - user attributes and notes (cli.h): `hpo study attr ID
 * [KEY=VALUE...]`, `hpo trial attr TRIAL [KEY=VALUE...]`, `hpo study note
 * ID [TEXT|-]` and `hpo trial note TRIAL [TEXT|-]`. With values they PATCH
 * the study or trial (a VALUE that parses as JSON is that JSON: 0.5, true,
 * [1,2], {"a":1}, "quoted text"; null deletes the key; anything else is a
 * string) and print the resulting user_attrs or note; without, they print
 * the current ones. --json prints the whole study or trial. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"

#define NOTE_MAX (64 * 1024) /* hpod's limit; a longer stdin is refused here */

/* "/api/v1/studies/ID" or "/api/v1/trials/ID". */
static void object_path(char *buf, size_t n, int trial, long long id) {
    snprintf(buf, n, "/api/v1/%s/%lld", trial ? "trials" : "studies", id);
}

/* GETs (patch NULL) or PATCHes the object and prints `field` of the answer. */
static int call_and_print(cli_ctx *c, int trial, long long id, json_t *patch, const char *field) {
    char path[64];
    object_path(path, sizeof path, trial, id);
    json_t *out = NULL;
    int rc = cli_call(c, patch ? "PATCH" : "GET", path, patch, &out);
    if (rc == CLI_OK && !cli_emit(c, out)) {
        const json_t *v = json_object_get(out, field);
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            printf("%s%s", s, *s && s[strlen(s) - 1] != '\n' ? "\n" : "");
        } else if (v) {
            cli_print_json(v, 0);
        } else {
            printf("{}\n");
        }
    }
    json_decref(out);
    return rc;
}

static int attr_cmd(cli_ctx *c, int argc, char **argv, int trial) {
    const char *cmd = trial ? "trial attr" : "study attr";
    if (argc < 1) return cli_usage("%s needs an ID (and KEY=VALUE pairs to set)", cmd);
    long long id = cli_id(argv[0]);
    if (!id) return cli_usage("%s is not a %s id", argv[0], trial ? "trial" : "study");
    if (argc == 1) return call_and_print(c, trial, id, NULL, "user_attrs");
    json_t *attrs = json_object();
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) {
            json_decref(attrs);
            return cli_usage("%s: %s is not KEY=VALUE", cmd, argv[i]);
        }
        char key[512];
        if ((size_t)(eq - argv[i]) >= sizeof key) {
            json_decref(attrs);
            return cli_usage("%s: the key of %.32s... is too long", cmd, argv[i]);
        }
        memcpy(key, argv[i], (size_t)(eq - argv[i]));
        key[eq - argv[i]] = '\0';
        json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        json_object_set_new(attrs, key, v ? v : json_string(eq + 1));
    }
    json_t *body = json_pack("{s:o}", "user_attrs", attrs);
    int rc = call_and_print(c, trial, id, body, "user_attrs");
    json_decref(body);
    return rc;
}

/* The note from stdin, at most NOTE_MAX bytes; NULL after a usage error. */
static char *read_stdin_note(void) {
    char *buf = hpo_xmalloc(NOTE_MAX + 2);
    size_t n = fread(buf, 1, NOTE_MAX + 1, stdin);
    if (ferror(stdin) || n > NOTE_MAX) {
        free(buf);
        cli_usage("the note on stdin is unreadable or over 64 KiB (%d bytes)", NOTE_MAX);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int note_cmd(cli_ctx *c, int argc, char **argv, int trial) {
    const char *cmd = trial ? "trial note" : "study note";
    if (argc < 1 || argc > 2) return cli_usage("%s takes an ID and the TEXT (- reads stdin; none prints it)", cmd);
    long long id = cli_id(argv[0]);
    if (!id) return cli_usage("%s is not a %s id", argv[0], trial ? "trial" : "study");
    if (argc == 1) return call_and_print(c, trial, id, NULL, "note");
    char *text = strcmp(argv[1], "-") == 0 ? read_stdin_note() : hpo_strdup(argv[1]);
    if (!text) return CLI_EUSAGE;
    json_t *note = json_string(text);
    free(text);
    if (!note) return cli_usage("%s: the note is not UTF-8 text", cmd);
    json_t *body = json_pack("{s:o}", "note", note);
    int rc = call_and_print(c, trial, id, body, "note");
    json_decref(body);
    return rc;
}

int cli_study_attr(cli_ctx *c, int argc, char **argv) { return attr_cmd(c, argc, argv, 0); }
int cli_trial_attr(cli_ctx *c, int argc, char **argv) { return attr_cmd(c, argc, argv, 1); }
int cli_study_note(cli_ctx *c, int argc, char **argv) { return note_cmd(c, argc, argv, 0); }
int cli_trial_note(cli_ctx *c, int argc, char **argv) { return note_cmd(c, argc, argv, 1); }
