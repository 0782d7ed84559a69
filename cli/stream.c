/* stream.c - the answers that are not one JSON document (cli.h):
 * `hpo weights MODEL [-o FILE]` downloads a model's safetensors file,
 * written beside FILE and renamed into place once complete (default: the
 * server's name, model-<id>.safetensors; `-o -` writes to stdout);
 * `hpo events STUDY [--after N] [--timeout S]` prints a study's
 * server-sent events as JSON lines {"id", "event", "data"}, until the
 * stream ends (the study's final event), --timeout S passes (exit 0) or
 * Ctrl-C (exit 130). The SSE parser (cli_sse) is shared with watch.c. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "hpo.h"

/* ---- weights ---- */
typedef struct download {
    FILE *f;
    long long bytes;
    int failed; /* a write failed: errno kept in err */
    int err;
} download;

static int write_chunk(const char *data, size_t n, void *arg) {
    download *d = arg;
    if (fwrite(data, 1, n, d->f) != n) {
        d->failed = 1;
        d->err = errno;
        return 1;
    }
    d->bytes += (long long)n;
    return 0;
}

int cli_weights(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    const char *file = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f = cli_flag_value(argc, argv, &i, "-o", &v);
        if (!f) f = cli_flag_value(argc, argv, &i, "--output", &v);
        if (f < 0) return cli_usage("%s needs a FILE (- for stdout)", argv[i]);
        if (f) file = v;
        else if (!id && (id = cli_id(argv[i]))) continue;
        else return cli_usage("weights takes a model ID and -o FILE, not %s", argv[i]);
    }
    if (!id) return cli_usage("weights needs a model ID");
    char name[64], tmp[4096 + 16], path[64];
    if (!file) {
        snprintf(name, sizeof name, "model-%lld.safetensors", id);
        file = name;
    }
    int to_stdout = strcmp(file, "-") == 0;
    if (!to_stdout && snprintf(tmp, sizeof tmp, "%s.part", file) >= (int)sizeof tmp)
        return cli_usage("-o: the file name is too long");
    download d = {.f = to_stdout ? stdout : fopen(tmp, "wb")};
    if (!d.f) {
        fprintf(stderr, "hpo: cannot write %s: %s\n", tmp, strerror(errno));
        return CLI_EUSAGE;
    }
    snprintf(path, sizeof path, "/api/v1/models/%lld/weights", id);
    cli_req r = {.method = "GET", .path = path, .sink = write_chunk, .sink_arg = &d,
                 .accept = "application/octet-stream, application/json"};
    int rc = cli_request(c, &r, NULL);
    if (rc == CLI_OK && r.broken) {
        fprintf(stderr, "hpo: the download of model %lld broke off\n", id);
        rc = CLI_ECONNECT;
    }
    if (to_stdout) {
        if (fflush(stdout) && !d.failed) d.failed = 1, d.err = errno;
    } else if (fclose(d.f) && !d.failed) {
        d.failed = 1, d.err = errno;
    }
    if (rc == CLI_OK && d.failed) {
        fprintf(stderr, "hpo: cannot write %s: %s\n", to_stdout ? "stdout" : file, strerror(d.err));
        rc = CLI_EUSAGE;
    }
    if (!to_stdout && rc == CLI_OK && rename(tmp, file) != 0) {
        fprintf(stderr, "hpo: cannot write %s: %s\n", file, strerror(errno));
        rc = CLI_EUSAGE;
    }
    if (!to_stdout && rc != CLI_OK) unlink(tmp);
    if (rc == CLI_OK && !to_stdout) {
        json_t *info = json_pack("{s:I, s:s, s:I}", "model_id", (json_int_t)id, "file", file, "bytes",
                                 (json_int_t)d.bytes);
        if (!cli_emit(c, info)) printf("%s (%lld bytes)\n", file, d.bytes);
        json_decref(info);
    }
    return rc;
}

/* ---- events ---- */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static int was_interrupted(void) { return interrupted; }

struct cli_sse {
    cli_sse_fn on_event;
    void *arg;
    char line[1 << 16]; /* the line being read; longer ones are cut */
    size_t len;
    int cut, stop;
    long long id;
    char event[64];
    char *data; /* the event's data lines, joined with \n */
    size_t data_len;
};

cli_sse *cli_sse_new(cli_sse_fn on_event, void *arg) {
    cli_sse *s = hpo_xcalloc(1, sizeof *s);
    s->on_event = on_event;
    s->arg = arg;
    return s;
}

void cli_sse_free(cli_sse *s) {
    if (!s) return;
    free(s->data);
    free(s);
}

int cli_sse_cut(const cli_sse *s) { return s->cut; }

static void dispatch(cli_sse *s) {
    if (!s->data) return; /* no data: a comment or keep-alive block */
    if (s->on_event(s->arg, s->id, s->event[0] ? s->event : "message", s->data)) s->stop = 1;
    free(s->data);
    s->data = NULL;
    s->data_len = 0;
    s->event[0] = '\0';
}

/* One line of the SSE grammar (without its newline). */
static void on_line(cli_sse *s, char *line) {
    if (!*line) {
        dispatch(s);
        return;
    }
    if (*line == ':') return; /* a comment: keep-alive */
    char *colon = strchr(line, ':');
    const char *value = "";
    if (colon) {
        *colon = '\0';
        value = colon + 1;
        if (*value == ' ') value++;
    }
    if (strcmp(line, "id") == 0) {
        s->id = strtoll(value, NULL, 10);
    } else if (strcmp(line, "event") == 0) {
        snprintf(s->event, sizeof s->event, "%s", value);
    } else if (strcmp(line, "data") == 0) {
        size_t n = strlen(value);
        s->data = hpo_xrealloc(s->data, s->data_len + n + 2);
        if (s->data_len) s->data[s->data_len++] = '\n';
        memcpy(s->data + s->data_len, value, n + 1);
        s->data_len += n;
    }
}

int cli_sse_feed(const char *data, size_t n, void *parser) {
    cli_sse *s = parser;
    for (size_t i = 0; i < n && !s->stop; i++) {
        char ch = data[i];
        if (ch == '\n') {
            if (s->len && s->line[s->len - 1] == '\r') s->len--;
            s->line[s->len] = '\0';
            on_line(s, s->line);
            s->len = 0;
        } else if (s->len + 1 < sizeof s->line) {
            s->line[s->len++] = ch;
        } else {
            s->cut = 1;
        }
    }
    return s->stop;
}

/* hpo events: the client and the type of the last event printed. */
typedef struct events_out {
    const cli_ctx *c;
    char last[32];
} events_out;

/* `hpo events`: each event as a JSON line. */
static int print_event(void *arg, long long id, const char *type, const char *text) {
    events_out *o = arg;
    const cli_ctx *c = o->c;
    snprintf(o->last, sizeof o->last, "%s", type);
    json_t *data = json_loads(text, 0, NULL);
    if (!data) data = json_string(text); /* not JSON: kept as a string */
    json_t *ev = json_pack("{s:I, s:s, s:o}", "id", (json_int_t)id, "event", type, "data", data);
    if (!cli_emit(c, ev)) cli_print_json(ev, 1);
    fflush(stdout);
    json_decref(ev);
    return 0;
}

int cli_events(cli_ctx *c, int argc, char **argv) {
    long long id = 0, after = 0;
    double timeout = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f;
        char *end;
        if ((f = cli_flag_value(argc, argv, &i, "--after", &v)) > 0) {
            errno = 0;
            after = strtoll(v, &end, 10);
            if (errno || *end || end == v || after < 0) return cli_usage("--after needs an event id >= 0");
        } else if (f == 0 && (f = cli_flag_value(argc, argv, &i, "--timeout", &v)) > 0) {
            timeout = strtod(v, &end);
            if (*end || end == v || !(timeout > 0 && timeout <= 86400 * 365))
                return cli_usage("--timeout needs seconds > 0");
        } else if (f < 0) {
            return cli_usage("%s needs a value", argv[i]);
        } else if (!id && (id = cli_id(argv[i]))) {
            continue;
        } else {
            return cli_usage("events takes a study ID, --after N and --timeout S, not %s", argv[i]);
        }
    }
    if (!id) return cli_usage("events needs a study ID");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/events?after=%lld", id, after);
    events_out o = {c, ""};
    cli_sse *s = cli_sse_new(print_event, &o);
    cli_req r = {.method = "GET", .path = path, .sink = cli_sse_feed, .sink_arg = s, .aborted = was_interrupted,
                 .accept = "text/event-stream", .timeout_ms = timeout > 0 ? (long)(timeout * 1000) + 1 : 0};
    int rc = cli_request(c, &r, NULL);
    if (rc == CLI_OK && r.broken) {
        fprintf(stderr, "hpo: the event stream of study %lld broke off (resume with --after)\n", id);
        rc = CLI_ECONNECT;
    }
    /* a stream ends with the study's final event; one that ended without
     * it (the study deleted meanwhile) is not a success */
    if (rc == CLI_OK && !interrupted && strcmp(o.last, "study_complete") != 0 &&
        strcmp(o.last, "study_cancelled") != 0 && !(timeout > 0)) {
        snprintf(path, sizeof path, "/api/v1/studies/%lld", id);
        json_t *st = NULL;
        rc = cli_call(c, "GET", path, NULL, &st); /* a 404 says it on stderr: exit 2 */
        json_decref(st);
    }
    if (rc == CLI_EINTR || interrupted) {
        fprintf(stderr, "hpo: interrupted\n");
        rc = CLI_EINTR;
    }
    if (cli_sse_cut(s)) fprintf(stderr, "hpo: an event line over 64 KiB was cut\n");
    cli_sse_free(s);
    return rc;
}
