/*
 * cli.h - `hpo`, the command-line client of hpod: what the files of cli/
 * share (the connection, the exit codes, output helpers).
 *
 * Design notes
 * - One process, one command: main.c holds the command table (synopsis,
 *   help, flags: `hpo --help`, `hpo CMD --help` and cli/hpo-completion.bash
 *   follow it), parses the global flags and the output flags every command
 *   takes (--json, --quiet, --field PATH, --help) into cli_ctx, and hands
 *   the rest of argv to the command (commands.c, control.c, datasets.c,
 *   annotate.c, manage.c, models.c, stream.c, watch.c). http.c is the only code that talks HTTP
 *   (libcurl, one reused handle): cli_call for JSON, cli_request for forms,
 *   streams and downloads.
 * - Exit codes are the interface for scripts (documented in `hpo --help`):
 *   0 ok, 1 usage, 2 the server refused the request (HTTP 4xx; its JSON
 *   error goes to stderr), 3 `report` was told to prune, 4 hpod cannot be
 *   reached, 5 the server failed (5xx) or answered something unreadable,
 *   6 a refit or ensemble job waited for (--wait) failed, 130 interrupted
 *   (Ctrl-C in `watch`).
 * - Output: results on stdout (ids, JSON, tables), diagnostics on stderr, so
 *   `sid=$(hpo study create s.json)` works. --json prints the server's
 *   answer as one line of JSON, --field PATH (repeatable; dotted, array
 *   indexes as numbers) one line per value (strings bare, missing: null),
 *   --quiet nothing on stdout (errors still go to stderr): cli_emit.
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

#define CLI_MAX_FIELDS 16

typedef struct cli_ctx {
    const char *url;   /* base URL without a trailing slash */
    const char *token; /* NULL: none */
    void *curl;        /* CURL *, reused across calls */
    int json, quiet;   /* --json, --quiet */
    const char *field[CLI_MAX_FIELDS]; /* --field PATH, in order */
    int n_field;
} cli_ctx;

int cli_init(cli_ctx *c, const char *url, const char *token);
void cli_clear(cli_ctx *c);

/* Sends method path (with query) and body (NULL: none; borrowed) and
 * parses the JSON answer into *out (NULL for an empty body; the caller
 * decrefs). Returns CLI_OK for 2xx; otherwise prints the problem on stderr
 * (the server's JSON error for 4xx/5xx) and returns CLI_EREFUSED,
 * CLI_ESERVER or CLI_ECONNECT; *out is then NULL. */
int cli_call(cli_ctx *c, const char *method, const char *path, const json_t *body, json_t **out);

/* A request beyond cli_call: a multipart form, a streamed or binary answer,
 * its own time limit, an abort check. */
typedef struct cli_req {
    const char *method, *path;
    const json_t *body;  /* a JSON body, or NULL */
    void *mime;          /* a curl_mime * form (borrowed), or NULL */
    long timeout_ms;     /* 0: none; cli_call uses 120 s */
    /* The 2xx answer goes here as it arrives, not into *out; returns 0 to go
     * on, nonzero to stop (then cli_request returns CLI_OK). */
    int (*sink)(const char *data, size_t n, void *arg);
    void *sink_arg;
    int (*aborted)(void); /* nonzero: stop now (Ctrl-C); cli_request returns CLI_EINTR */
    /* Called often (libcurl's progress callback: at least once a second,
     * also while no byte arrives); nonzero stops the transfer, and
     * cli_request returns CLI_OK as when the sink stops. */
    int (*tick)(void *arg);
    void *tick_arg;
    const char *accept;   /* Accept header; NULL: application/json */
    long long last_event_id; /* > 0: sent as the Last-Event-ID header */
    int timed_out;        /* out: the time limit ended it (then CLI_OK) */
    int broken;           /* out: a 2xx answer given to the sink broke off (then CLI_OK) */
    long status;          /* out: the HTTP status (0: none came) */
} cli_req;
int cli_request(cli_ctx *c, cli_req *r, json_t **out);

/* ---- server-sent events (stream.c): a parser fed by a cli_req sink ---- */
typedef struct cli_sse cli_sse;
/* on_event gets each complete event (type "message" when it has none;
 * data: its data lines joined with \n); nonzero stops the stream. */
typedef int (*cli_sse_fn)(void *arg, long long id, const char *type, const char *data);
cli_sse *cli_sse_new(cli_sse_fn on_event, void *arg);
void cli_sse_free(cli_sse *s);
/* A cli_req sink: r.sink = cli_sse_feed, r.sink_arg = the parser. */
int cli_sse_feed(const char *data, size_t n, void *parser);
/* A line over the parser's 64 KiB was cut. */
int cli_sse_cut(const cli_sse *s);

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
int cli_study_pause(cli_ctx *c, int argc, char **argv); /* control.c */
int cli_study_resume(cli_ctx *c, int argc, char **argv);
int cli_study_cancel(cli_ctx *c, int argc, char **argv);
int cli_trial(cli_ctx *c, int argc, char **argv);
int cli_importance(cli_ctx *c, int argc, char **argv);
int cli_dataset_list(cli_ctx *c, int argc, char **argv); /* datasets.c */
int cli_dataset_get(cli_ctx *c, int argc, char **argv);
int cli_dataset_upload(cli_ctx *c, int argc, char **argv);
int cli_dataset_delete(cli_ctx *c, int argc, char **argv);
int cli_study_attr(cli_ctx *c, int argc, char **argv); /* annotate.c */
int cli_trial_attr(cli_ctx *c, int argc, char **argv);
int cli_study_note(cli_ctx *c, int argc, char **argv);
int cli_trial_note(cli_ctx *c, int argc, char **argv);
int cli_study_enqueue(cli_ctx *c, int argc, char **argv); /* manage.c */
int cli_study_add_trial(cli_ctx *c, int argc, char **argv);
int cli_study_export(cli_ctx *c, int argc, char **argv);
int cli_study_import(cli_ctx *c, int argc, char **argv);
int cli_study_copy(cli_ctx *c, int argc, char **argv);
int cli_weights(cli_ctx *c, int argc, char **argv); /* stream.c */
int cli_events(cli_ctx *c, int argc, char **argv);

/* ---- helpers (commands.c) ---- */
/* Prints a usage error ("hpo: ..." and a hint) and returns CLI_EUSAGE. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a positive decimal id; 0 on failure. */
long long cli_id(const char *s);
/* Prints json on stdout (indented unless compact), with a newline; reals
 * in their shortest round-trip form, as hpod sends them (json_text.h). */
void cli_print_json(const json_t *j, int compact);
/* Writes json, compact and with shortest reals, to file; 0, or -1 when it
 * cannot be written. */
int cli_write_json(const json_t *j, const char *file);
/* A number as %.6g, "-" for null. */
void cli_fmt_value(char *buf, size_t n, const json_t *v);
/* outcome.c: a finite number (0, or -1); --metric NAME=V into metrics
 * (CLI_OK or a usage error); a trial's outcome into body: values as
 * "repeats" (one per execution) with repeats, else "value" (one) or
 * "values" (one per objective), and "metrics" when not empty. */
int cli_parse_number(const char *s, double *out);
int cli_put_metric(json_t *metrics, const char *arg);
void cli_put_outcome(json_t *body, json_t *values, int repeats, json_t *metrics);
/* Takes the flag argv[*i] with its value when it is `name`: 1 if taken, 0
 * if not that flag, -1 if its value is missing. */
int cli_flag_value(int argc, char **argv, int *i, const char *name, const char **out);
/* The output flags (cli_ctx): --quiet prints nothing, --field the values,
 * --json the answer on one line; returns 1 if one of them applied (the
 * caller then prints no human form), 0 if the caller should. */
int cli_emit(const cli_ctx *c, const json_t *answer);
/* A one-argument command's ID (argv[0]): 0 after printing a usage error. */
long long cli_one_id(int argc, char **argv, const char *cmd, const char *what);
/* A command whose one argument is an ID (cli_one_id): method on
 * collection/ID ("/api/v1/studies"), the answer printed as indented JSON
 * unless the output flags say otherwise (cli_emit); nothing for an empty
 * answer (DELETE's 204). */
int cli_id_call(cli_ctx *c, int argc, char **argv, const char *cmd, const char *what, const char *method,
                const char *collection);

#endif
