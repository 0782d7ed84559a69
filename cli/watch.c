/* watch.c - `hpo study watch ID`: follows a study until it is finished.
 *
 * It follows the study's event stream (GET /api/v1/studies/{id}/events,
 * server-sent events, from the study's latest event on) and looks at the
 * study (GET /api/v1/studies/{id}, on a second connection) when an event
 * arrives (at most 10 times a second) and at least every --interval seconds
 * (default 1), for what sends no event (an external study's asks and
 * tells). When the stream ends or breaks off before the study ended it
 * reconnects with Last-Event-ID (after a pause of up to 1 s when that
 * stream brought no event); a 204 or the study's final event
 * (study_complete, study_cancelled) ends the watch. If the stream cannot
 * be had (refused: 503 over the stream cap, 5xx, an hpod without it) while
 * the study can be read, it says so on stderr and polls every --interval
 * seconds instead.
 *
 * Each look prints the same line: on a terminal one status line is redrawn
 * in place (\r, erase line): a bar of finished/max_trials, the ETA from the
 * finishing rate seen so far, the counts by state and the best value. Not
 * on a terminal (a log, a pipe) a plain line is printed only when something
 * changed. Finished means: the study's state is complete or cancelled, or
 * an external study has max_trials trials finished. Ctrl-C ends it with
 * exit 130. --json (or --field) prints the study's JSON (its fields) on a
 * line at each change instead, --quiet nothing: the exit code says it
 * ended. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "hpo.h"

#define EVENT_LOOK_GAP 0.1 /* seconds between looks prompted by events */
#define RECONNECT_PAUSE 1.0 /* seconds before reconnecting a stream that brought no event */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static int was_interrupted(void) { return interrupted; }

static void fmt_eta(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) snprintf(buf, n, "--");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* Sleeps up to s seconds; returns early on Ctrl-C. */
static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL); /* interrupted by the signal: that is the point */
}

typedef struct watch {
    cli_ctx *c;       /* the output flags; the stream's connection */
    cli_ctx look_c;   /* the looks' own connection (the stream holds c's) */
    long long id;
    double interval;
    int emit, tty;
    char path[64], last[512];
    double t_first, looked; /* monotonic: the first look, the latest */
    long long done_first, done, last_event;
    char best[48];
    int finished, event_seen, rc;
} watch;

/* GETs the study over `via` and shows it; sets finished, done, best and
 * (the first time) last_event. 0, or the call's failure (also in w->rc). */
static int look(watch *w, cli_ctx *via) {
    json_t *s = NULL;
    w->looked = hpo_monotonic();
    w->event_seen = 0;
    int rc = cli_call(via, "GET", w->path, NULL, &s);
    if (rc) return w->rc = rc;
    const json_t *b = json_object_get(s, "trials_by_state");
    long long complete = json_integer_value(json_object_get(b, "complete"));
    long long pruned = json_integer_value(json_object_get(b, "pruned"));
    long long failed = json_integer_value(json_object_get(b, "failed"));
    long long cancelled = json_integer_value(json_object_get(b, "cancelled"));
    long long running = json_integer_value(json_object_get(b, "running"));
    long long queued = json_integer_value(json_object_get(b, "queued"));
    long long done = complete + pruned + failed + cancelled;
    const json_t *maxj = json_object_get(s, "max_trials");
    long long max = json_is_integer(maxj) ? json_integer_value(maxj) : 0;
    const char *state = json_string_value(json_object_get(s, "state"));
    const char *kind = json_string_value(json_object_get(s, "kind"));
    int external = !kind || strcmp(kind, "embedded") != 0;
    w->finished |= (state && (strcmp(state, "complete") == 0 || strcmp(state, "cancelled") == 0)) ||
                   (external && max > 0 && done >= max);
    double now = w->looked;
    if (w->t_first < 0) {
        w->t_first = now;
        w->done_first = done;
        w->last_event = json_integer_value(json_object_get(s, "last_event_id"));
    }
    /* ETA from the rate seen while watching */
    double rate = now > w->t_first + 0.5 && done > w->done_first ? (double)(done - w->done_first) / (now - w->t_first) : NAN;
    char eta[32], bar[64], line[512];
    fmt_eta(eta, sizeof eta, max > 0 && isfinite(rate) ? (double)(max - done) / rate : NAN);
    cli_fmt_value(w->best, sizeof w->best, json_object_get(json_object_get(s, "best"), "value"));
    w->done = done;
    if (max > 0) {
        int width = 30, fill = (int)((double)width * (double)(done < max ? done : max) / (double)max);
        for (int k = 0; k < width; k++) bar[k] = k < fill ? '#' : '.';
        bar[width] = '\0';
        snprintf(line, sizeof line, "[%s] %lld/%lld %3.0f%%  ETA %s  running %lld  queued %lld  complete %lld  pruned %lld  failed %lld  best %s",
                 bar, done, max, 100.0 * (double)done / (double)max, w->finished ? "0s" : eta, running, queued,
                 complete, pruned, failed, w->best);
    } else {
        snprintf(line, sizeof line, "%lld finished  running %lld  queued %lld  complete %lld  pruned %lld  failed %lld  best %s",
                 done, running, queued, complete, pruned, failed, w->best);
    }
    if (w->tty) {
        printf("\r\033[K%s", line);
        fflush(stdout);
    } else {
        char key[256]; /* print when a count or the best changed, not the ETA */
        snprintf(key, sizeof key, "%lld %lld %lld %lld %lld %lld %s", done, running, queued, complete, pruned,
                 failed, w->best);
        if (strcmp(key, w->last) != 0) {
            if (!cli_emit(w->c, s)) printf("%s\n", line);
            fflush(stdout);
            snprintf(w->last, sizeof w->last, "%s", key);
        }
    }
    json_decref(s);
    return 0;
}

/* The stream's events: note the id; look (rate-limited); the final one
 * ends the watch. Nonzero stops the stream. */
static int on_event(void *arg, long long id, const char *type, const char *data) {
    (void)data;
    watch *w = arg;
    w->last_event = id;
    w->event_seen = 1;
    int final = strcmp(type, "study_complete") == 0 || strcmp(type, "study_cancelled") == 0;
    if (final || hpo_monotonic() - w->looked >= EVENT_LOOK_GAP) look(w, &w->look_c);
    if (final) w->finished = 1;
    return w->finished || w->rc || interrupted;
}

/* Between bytes: a look every interval, or one an event asked for. */
static int on_tick(void *arg) {
    watch *w = arg;
    if (interrupted) return 1;
    double since = hpo_monotonic() - w->looked;
    if ((w->event_seen && since >= EVENT_LOOK_GAP) || since >= w->interval) look(w, &w->look_c);
    return w->finished || w->rc;
}

/* Follows the event stream until the study is finished (0), Ctrl-C
 * (CLI_EINTR), a look fails (its code) or the stream cannot go on (-1:
 * poll instead; the reason is printed). */
static int follow(watch *w) {
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/events", w->id);
    int rc;
    if (cli_init(&w->look_c, w->c->url, w->c->token) != CLI_OK) return -1;
    for (;;) {
        long long before = w->last_event;
        cli_sse *p = cli_sse_new(on_event, w);
        cli_req r = {.method = "GET", .path = path, .sink = cli_sse_feed, .sink_arg = p, .aborted = was_interrupted,
                     .tick = on_tick, .tick_arg = w, .accept = "text/event-stream", .last_event_id = w->last_event};
        rc = cli_request(w->c, &r, NULL);
        cli_sse_free(p);
        if (interrupted) rc = CLI_EINTR;
        else if (w->rc) rc = w->rc;
        else if (w->finished) rc = CLI_OK;
        else if (rc == CLI_OK && r.status == 204) { /* finished, nothing after our last event */
            rc = look(w, &w->look_c);
            w->finished = 1;
        } else if (rc == CLI_OK) { /* ended or broke off before the study did: again, from the last event */
            if (w->last_event == before) nap(w->interval < RECONNECT_PAUSE ? w->interval : RECONNECT_PAUSE);
            continue;
        } else if (rc != CLI_OK && look(w, &w->look_c)) {
            rc = w->rc; /* not the stream: the study is gone, or hpod */
        } else if (w->finished) {
            rc = CLI_OK;
        } else {
            fprintf(stderr, "hpo: the event stream of study %lld cannot be followed; polling every %g s instead\n",
                    w->id, w->interval);
            rc = -1;
        }
        break;
    }
    cli_clear(&w->look_c);
    return rc;
}

int cli_study_watch(cli_ctx *c, int argc, char **argv) {
    long long id = 0;
    double interval = 1.0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
            char *end;
            interval = strtod(argv[++i], &end);
            if (*end || !(interval >= 0.05 && interval <= 3600)) return cli_usage("--interval must be in 0.05..3600 seconds");
        } else if (!id && (id = cli_id(argv[i]))) {
        } else {
            return cli_usage("study watch takes a study ID and --interval S, not %s", argv[i]);
        }
    }
    if (!id) return cli_usage("study watch needs a study ID");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: the nap ends at once */
    sigaction(SIGTERM, &sa, NULL);
    watch *w = hpo_xcalloc(1, sizeof *w);
    w->c = c;
    w->id = id;
    w->interval = interval;
    w->emit = c->json || c->quiet || c->n_field; /* cli_emit at each change */
    w->tty = !w->emit && isatty(STDOUT_FILENO);
    w->t_first = -1;
    snprintf(w->path, sizeof w->path, "/api/v1/studies/%lld", id);
    int rc = look(w, c);
    if (rc == CLI_OK && !w->finished && !interrupted) {
        rc = follow(w);
        while (rc < 0 && !interrupted && !w->finished) { /* polling, as hpo did before streams */
            nap(interval);
            if (!interrupted) rc = look(w, c) ? w->rc : -1;
        }
        if (interrupted) rc = CLI_EINTR;
        else if (w->finished && rc < 0) rc = CLI_OK;
    }
    if (w->tty) printf("\n");
    if (rc == CLI_OK && w->finished && !w->emit) printf("study %lld finished: %lld trials, best %s\n", id, w->done, w->best);
    if (rc == CLI_EINTR) fprintf(stderr, "hpo: interrupted\n");
    free(w);
    return rc;
}
