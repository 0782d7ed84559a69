/* watch.c - events stored by other connections (storage.h, sto_watch): a
 * libpq connection of its own, LISTENing on hpo_events, whose notices are
 * sent by the event inserts of db.c in their transactions and delivered at
 * their commits. A wait polls the connection's socket and a pipe that
 * sto_watch_interrupt writes to. A connection that breaks is made again at
 * the next wait, which then answers 1: notices sent meanwhile are lost, so
 * the caller reads what it follows once more. */
#include "db_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sto_watch {
    PGconn *pg;
    char *url;
    int pipe[2];   /* [0] polled, [1] written by sto_watch_interrupt */
    int listening; /* LISTEN ran on the current connection */
};

static void quiet(void *arg, const char *message) {
    (void)arg;
    HPO_DEBUG("storage: postgresql (watch): %s", message);
}

/* LISTEN on a connection that is up; 0 or -1 (logged). */
static int listen_now(sto_watch *w) {
    PGresult *r = PQexec(w->pg, "LISTEN hpo_events");
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) HPO_WARN("storage: postgresql: LISTEN hpo_events: %s", PQerrorMessage(w->pg));
    PQclear(r);
    w->listening = ok;
    return ok ? 0 : -1;
}

int sto_watch_open(sto_db *db, sto_watch **out) {
    if (!db || !out) return HPO_EINVAL;
    if (!sto_db_is_pg(db)) return HPO_EUNSUPPORTED; /* SQLite */
    sto_watch *w = hpo_xcalloc(1, sizeof *w);
    w->url = hpo_strdup(db->target);
    if (pipe(w->pipe)) {
        free(w->url);
        free(w);
        return HPO_EIO;
    }
    for (int i = 0; i < 2; i++) fcntl(w->pipe[i], F_SETFL, fcntl(w->pipe[i], F_GETFL) | O_NONBLOCK);
    const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
    const char *vals[] = {"10", "hpod-watch", w->url, NULL};
    w->pg = PQconnectdbParams(keys, vals, 1);
    if (!w->pg || PQstatus(w->pg) != CONNECTION_OK || listen_now(w)) {
        HPO_ERROR("storage: postgresql: the event watch cannot connect: %s",
                  w->pg ? PQerrorMessage(w->pg) : "out of memory");
        sto_watch_close(w);
        return HPO_ESTORAGE;
    }
    PQsetNoticeProcessor(w->pg, quiet, NULL);
    *out = w;
    return 0;
}

void sto_watch_close(sto_watch *w) {
    if (!w) return;
    PQfinish(w->pg);
    close(w->pipe[0]);
    close(w->pipe[1]);
    free(w->url);
    free(w);
}

void sto_watch_interrupt(sto_watch *w) {
    if (!w) return;
    ssize_t n = write(w->pipe[1], "x", 1); /* a full pipe is interrupted already */
    (void)n;
}

/* Drains the interrupt pipe; 1 if it held something. */
static int interrupted(sto_watch *w) {
    char buf[64];
    int any = 0;
    while (read(w->pipe[0], buf, sizeof buf) > 0) any = 1;
    return any;
}

/* Notices already read off the socket; their count. */
static int take_notices(sto_watch *w) {
    int n = 0;
    PGnotify *note;
    while ((note = PQnotifies(w->pg))) {
        n++;
        PQfreemem(note);
    }
    return n;
}

/* Waits for the pipe alone (the server is not there). */
static void idle(sto_watch *w, int timeout_ms) {
    struct pollfd p = {w->pipe[0], POLLIN, 0};
    if (poll(&p, 1, timeout_ms) > 0) interrupted(w);
}

int sto_watch_wait(sto_watch *w, int timeout_ms) {
    if (!w) return 0;
    if (PQstatus(w->pg) != CONNECTION_OK || !w->listening) {
        PQreset(w->pg);
        if (PQstatus(w->pg) != CONNECTION_OK || listen_now(w)) {
            idle(w, timeout_ms);
            return 0;
        }
        HPO_INFO("storage: postgresql: the event watch is connected again");
        return 1; /* notices may have been lost meanwhile */
    }
    if (take_notices(w)) return 1;
    struct pollfd p[2] = {{PQsocket(w->pg), POLLIN, 0}, {w->pipe[0], POLLIN, 0}};
    int k = poll(p, 2, timeout_ms);
    if (k < 0 && errno != EINTR) HPO_WARN("storage: postgresql: the event watch: poll: %s", strerror(errno));
    if (k <= 0) return 0;
    if (p[1].revents) interrupted(w);
    if (p[0].revents) {
        if (!PQconsumeInput(w->pg)) {
            HPO_WARN("storage: postgresql: the event watch lost its connection: %s", PQerrorMessage(w->pg));
            w->listening = 0;
            return 0;
        }
        return take_notices(w) > 0;
    }
    return 0;
}
