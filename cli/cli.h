/*
 * cli.h - `hpo`, the command-line client of hpod: what the files of cli/
 * share (the connection, the exit codes, output helpers).
 *
 * Design notes
 * - One process, one command: main.c parses the global flags and the
 *   subcommand, commands.c and watch.c do the work through cli_call, which
 *   is the only code that talks HTTP (libcurl, one reused handle).
 * - Exit codes are the interface for scripts (documented in `hpo --help`):
 *   0 ok, 1 usage, 2 the server refused the request (HTTP 4xx; its JSON
 *   error goes to stderr), 3 `report` was told to prune, 4 hpod cannot be
 *   reached, 5 the server failed (5xx) or answered something unreadable,
 *   6 a refit or ensemble job waited for (--wait) failed, 130 interrupted
 *   (Ctrl-C in `watch`).
 * - Output: results on stdout (ids, JSON, tables), diagnostics on stderr, so
 *   `sid=$(hpo study create s.json)` works.
 * - Configuration: HPO_URL (default http://127.0.0.1:8080) and HPO_TOKEN (sent
 *   as "Authorization: Bearer"), overridden by --url and --token.
 */
#ifndef HPO_CLI_H
#define HPO_CLI_H

#include <jansson.h>

enum {
    CLI_OK = 0,
    CLI_EUSAGE = 1,
    CLI_EREFUSED = 2, /* HTTP 4xx */
    CLI_PRUNE = 3,    /* report: the pruner says stop */
    CLI_ECONNECT = 4, /* cannot reach hpod */
    CLI_ESERVER = 5,  /* HTTP 5xx or an unreadable answer */
    CLI_EJOB = 6,     /* refit/ensemble --wait: the job failed */
    CLI_EINTR = 130,  /* interrupted */
};

typedef struct cli_ctx {
    const char *url;   /* base URL without a trailing slash */
    const char *token; /* NULL: none */
    void *curl;        /* CURL *, reused across calls */
} cli_ctx;

int cli_init(cli_ctx *c, const char *url, const char *token);
void cli_clear(cli_ctx *c);

/* Sends method path (with query) and body (NULL: none; borrowed) and
 * parses the JSON answer into *out (NULL for an empty body; the caller
 * decrefs). Returns CLI_OK for 2xx; otherwise prints the problem on stderr
 * (the server's JSON error for 4xx/5xx) and returns CLI_EREFUSED,
 * CLI_ESERVER or CLI_ECONNECT; *out is then NULL. */
int cli_call(cli_ctx *c, const char *method, const char *path, const json_t *body, json_t **out);

/* ---- commands (commands.c, watch.c); argv starts after the command words ---- */
int cli_study_create(cli_ctx *c, int argc, char **argv);
int cli_study_list(cli_ctx *c, int argc, char **argv);
int cli_study_get(cli_ctx *c, int argc, char **argv);
int cli_study_delete(cli_ctx *c, int argc, char **argv);
int cli_study_watch(cli_ctx *c, int argc, char **argv);
int cli_best(cli_ctx *c, int argc, char **argv);
int cli_ask(cli_ctx *c, int argc, char **argv);
int cli_report(cli_ctx *c, int argc, char **argv);
int cli_tell(cli_ctx *c, int argc, char **argv);
int cli_trials(cli_ctx *c, int argc, char **argv);
int cli_refit(cli_ctx *c, int argc, char **argv); /* models.c */
int cli_ensemble(cli_ctx *c, int argc, char **argv);
int cli_models(cli_ctx *c, int argc, char **argv);
int cli_predict(cli_ctx *c, int argc, char **argv);

/* ---- helpers (commands.c) ---- */
/* Prints a usage error ("hpo: ..." and a hint) and returns CLI_EUSAGE. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a positive decimal id; 0 on failure. */
long long cli_id(const char *s);
/* Prints json on stdout (indented unless compact), with a newline. */
void cli_print_json(const json_t *j, int compact);
/* A number as %.6g, "-" for null. */
void cli_fmt_value(char *buf, size_t n, const json_t *v);

#endif
