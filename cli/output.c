/* output.c - the helpers every command shares (cli.h): usage errors, ids,
 * flags with a value, the output flags --json, --field and --quiet
 * (cli_emit), and the commands that show or delete one thing by its ID
 * (cli_id_call). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"
#include "json_text.h"

int cli_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("hpo: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see hpo --help)\n", stderr);
    return CLI_EUSAGE;
}

long long cli_id(const char *s) {
    if (!s || *s < '0' || *s > '9') return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return errno || *end || v <= 0 ? 0 : v;
}

long long cli_one_id(int argc, char **argv, const char *cmd, const char *what) {
    if (argc != 1) return cli_usage("%s takes one %s ID", cmd, what), 0;
    long long id = cli_id(argv[0]);
    if (!id) cli_usage("%s is not a %s id", argv[0], what);
    return id;
}

int cli_id_call(cli_ctx *c, int argc, char **argv, const char *cmd, const char *what, const char *method,
                const char *collection) {
    long long id = cli_one_id(argc, argv, cmd, what);
    if (!id) return CLI_EUSAGE;
    char path[160];
    snprintf(path, sizeof path, "%s/%lld", collection, id);
    json_t *out = NULL;
    int rc = cli_call(c, method, path, NULL, &out);
    if (rc == CLI_OK && out && !cli_emit(c, out)) cli_print_json(out, 0);
    json_decref(out);
    return rc;
}

int cli_flag_value(int argc, char **argv, int *i, const char *name, const char **out) {
    if (strcmp(argv[*i], name) != 0) return 0;
    if (*i + 1 >= argc) return -1;
    *out = argv[++*i];
    return 1;
}

void cli_print_json(const json_t *j, int compact) {
    char *s = hpo_json_text_shortest(json_dumps(j, (compact ? JSON_COMPACT : JSON_INDENT(2)) | JSON_ENCODE_ANY));
    if (s) printf("%s\n", s);
    free(s);
}

int cli_write_json(const json_t *j, const char *file) {
    char *s = hpo_json_text_shortest(json_dumps(j, JSON_COMPACT));
    FILE *f = s ? fopen(file, "w") : NULL;
    int rc = f && fputs(s, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    free(s);
    return rc;
}

void cli_fmt_value(char *buf, size_t n, const json_t *v) {
    if (json_is_number(v))
        snprintf(buf, n, "%.6g", json_number_value(v));
    else if (json_is_string(v))
        snprintf(buf, n, "%s", json_string_value(v));
    else if (json_is_true(v) || json_is_false(v))
        snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
    else
        snprintf(buf, n, "-");
}

/* The value at a dotted path ("params.lr", "trials.0.value"); NULL if absent. */
static const json_t *at_path(const json_t *j, const char *path) {
    while (j && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        char key[256];
        if (n >= sizeof key) return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        if (json_is_object(j)) {
            j = json_object_get(j, key);
        } else if (json_is_array(j)) {
            char *end;
            errno = 0;
            long long k = strtoll(key, &end, 10);
            if (!n || *end || errno || k < 0) return NULL;
            j = json_array_get(j, (size_t)k);
        } else {
            return NULL;
        }
        path += n + (dot ? 1 : 0);
    }
    return j;
}

int cli_emit(const cli_ctx *c, const json_t *answer) {
    if (c->quiet) return 1;
    if (c->n_field) {
        for (int i = 0; i < c->n_field; i++) {
            const json_t *v = at_path(answer, c->field[i]);
            if (json_is_string(v)) printf("%s\n", json_string_value(v)); /* bare, like jq -r */
            else if (v) cli_print_json(v, 1);
            else printf("null\n");
        }
        return 1;
    }
    if (c->json) {
        if (answer) cli_print_json(answer, 1);
        return 1;
    }
    return 0;
}
