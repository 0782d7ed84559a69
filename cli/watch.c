/* watch.c - `hpo study watch ID`: follows a study until it is finished.
 *
 * Polls GET /api/v1/studies/{id} every --interval seconds (default 1). On a
 * terminal one status line is redrawn in place (\r, erase line): a bar of
 * finished/max_trials, the ETA from the finishing rate seen so far, the
 * counts by state and the best value. Not on a terminal (a log, a pipe) a
 * plain line is printed only when something changed. Finished means: an
 * embedded study's state is complete or cancelled; an external study (whose
 * state stays running: only its clients know when they are done) has
 * max_trials trials finished. Ctrl-C ends it with exit 130. --json (or
 * --field) prints the study's JSON (its fields) on a line at each change
 * instead, --quiet nothing: the exit code says it ended. The SSE stream
 * (GET /studies/{id}/events), when hpod has it, can replace the polling
 * without changing the output. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "hpo.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

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
    int emit = c->json || c->quiet || c->n_field; /* cli_emit at each change */
    int tty = !emit && isatty(STDOUT_FILENO);
    char path[64], last[512] = "";
    snprintf(path, sizeof path, "/api/v1/studies/%lld", id);
    double t_first = -1;
    long long done_first = 0;
    int rc = CLI_OK;
    while (!interrupted) {
        json_t *s = NULL;
        rc = cli_call(c, "GET", path, NULL, &s);
        if (rc) break;
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
        int finished = (state && (strcmp(state, "complete") == 0 || strcmp(state, "cancelled") == 0)) ||
                       (external && max > 0 && done >= max);
        double now = hpo_monotonic();
        if (t_first < 0) {
            t_first = now;
            done_first = done;
        }
        /* ETA from the rate seen while watching */
        double rate = now > t_first + 0.5 && done > done_first ? (double)(done - done_first) / (now - t_first) : NAN;
        char eta[32], best[48], bar[64], line[512];
        fmt_eta(eta, sizeof eta, max > 0 && isfinite(rate) ? (double)(max - done) / rate : NAN);
        cli_fmt_value(best, sizeof best, json_object_get(json_object_get(s, "best"), "value"));
        if (max > 0) {
            int w = 30, fill = (int)((double)w * (double)(done < max ? done : max) / (double)max);
            for (int k = 0; k < w; k++) bar[k] = k < fill ? '#' : '.';
            bar[w] = '\0';
            snprintf(line, sizeof line, "[%s] %lld/%lld %3.0f%%  ETA %s  running %lld  queued %lld  complete %lld  pruned %lld  failed %lld  best %s",
                     bar, done, max, 100.0 * (double)done / (double)max, finished ? "0s" : eta, running, queued,
                     complete, pruned, failed, best);
        } else {
            snprintf(line, sizeof line, "%lld finished  running %lld  queued %lld  complete %lld  pruned %lld  failed %lld  best %s",
                     done, running, queued, complete, pruned, failed, best);
        }
        if (tty) {
            printf("\r\033[K%s", line);
            fflush(stdout);
        } else {
            char key[256]; /* print when a count or the best changed, not the ETA */
            snprintf(key, sizeof key, "%lld %lld %lld %lld %lld %lld %s", done, running, queued, complete, pruned,
                     failed, best);
            if (strcmp(key, last) != 0) {
                if (!cli_emit(c, s)) printf("%s\n", line);
                fflush(stdout);
                snprintf(last, sizeof last, "%s", key);
            }
        }
        json_decref(s);
        if (finished) {
            if (tty) printf("\n");
            if (!emit) printf("study %lld finished: %lld trials, best %s\n", id, done, best);
            return CLI_OK;
        }
        nap(interval);
    }
    if (tty) printf("\n");
    if (interrupted) {
        fprintf(stderr, "hpo: interrupted\n");
        return CLI_EINTR;
    }
    return rc;
}
