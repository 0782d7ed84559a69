/*
 * gate.h - hpod's front door: owns the listening socket, accepts
 * connections and holds each one until its first request head is complete
 * and good, then hands it to libmicrohttpd (srv_http); everything it
 * refuses it answers itself with a JSON error.
 *
 * Design notes
 * - Why a gate: libmicrohttpd gives each connection a thread as soon as it
 *   is accepted, so idle or trickling sockets used to take every thread
 *   (256) and lock all clients out; and it answers a malformed head with
 *   HTML (or, for a bad Content-Length, twice). Here a connection costs one
 *   socket and no thread until its head is complete; the head is checked by
 *   srv_head_check (head.h) and admitted by the books (conns.h).
 * - One thread and one epoll set (edge-triggered for clients). The head is
 *   read with MSG_PEEK, so the bytes stay in the socket and libmicrohttpd
 *   reads the same request after srv_gate_hooks.handoff.
 * - Deadline: a pending connection must complete its head within
 *   header_timeout of its accept; bytes trickling in do not extend it. At
 *   the deadline a connection that sent part of a head gets 408, one that
 *   sent nothing is closed without a word.
 * - Caps: at most max_pending connections wait here (a new one beyond that
 *   closes the one waiting longest) and at most per_client from one address
 *   (a new one beyond that is closed at once). A good head that the books
 *   refuse (client over its cap, server full) gets 503 with Retry-After.
 * - Replies the gate writes: a JSON error body, Connection: close; then it
 *   reads and drops what the client still sends for up to a second before
 *   closing, so the client reads the reply instead of a reset.
 * - The gate thread also runs srv_conns_reap (the header deadline of
 *   connections libmicrohttpd holds) at least every 250 ms.
 * - Accept failing for want of descriptors (EMFILE) closes the longest
 *   waiting pending connection, or pauses accepting for 100 ms.
 */
#ifndef HPO_SERVER_GATE_H
#define HPO_SERVER_GATE_H

#include <sys/socket.h>

#include "conns.h"
#include "head.h"

typedef struct srv_gate srv_gate;

/* An answer the gate wrote itself: the JSON error the client got. */
typedef struct srv_gate_answer {
    const char *method, *target; /* "" when the request line is unreadable */
    int status;
    const char *code, *field, *message;
    double secs; /* from the accept to the answer */
} srv_gate_answer;

typedef struct srv_gate_hooks {
    void *arg;
    /* Gives an admitted connection to libmicrohttpd: 0, or -1 when it was
     * refused (the callee has closed fd). */
    int (*handoff)(void *arg, int fd, const struct sockaddr *sa, socklen_t len);
    /* The gate answered a request itself (for the log and the metrics). */
    void (*answered)(void *arg, const srv_addr *from, const srv_gate_answer *answer);
} srv_gate_hooks;

typedef struct srv_gate_opts {
    int listen_fd;          /* bound, listening, non-blocking; the gate closes it */
    unsigned max_pending;   /* > 0 */
    unsigned per_client;    /* pending connections per address; 0: no cap */
    double header_timeout;  /* seconds */
    srv_head_limits limits;
} srv_gate_opts;

int srv_gate_start(const srv_gate_opts *opt, srv_conns *conns, const srv_gate_hooks *hooks, srv_gate **out);
/* Stops accepting, closes every pending connection and the listening
 * socket, joins the thread, frees g. */
void srv_gate_stop(srv_gate *g);

#endif
