/*
 * conns.h - the books of hpod's HTTP connections: how many each client
 * address holds, which connections wait for a request and since when, and
 * the decisions made on them: admission, eviction and the header deadline.
 *
 * Design notes
 * - Two kinds of connection. A pending one was accepted by the gate
 *   (gate.h) and has not sent its first complete request head yet: it costs
 *   a socket and no thread, and the gate alone decides its fate (a per-client
 *   count is kept here). A handed one was given to libmicrohttpd: a thread
 *   each, tracked here as a record from admission to close.
 * - Admission (srv_conns_admit, when a pending connection's first head is
 *   complete): a client address over its cap (per_client handed
 *   connections) or a server over its soft cap (max_handed) first makes
 *   room by cutting that client's (or anyone's) connection that has waited
 *   longest for its next request (an idle keep-alive connection); with none
 *   to cut the answer is SRV_ADMIT_CLIENT_CAP / SRV_ADMIT_BUSY and the gate
 *   replies 503. Active requests and event streams are never cut.
 * - The header deadline: a handed connection waits for request headers from
 *   its accept until libmicrohttpd hands us the head (srv_conns_busy), and
 *   again from the end of each response (srv_conns_idle) to the next head.
 *   srv_conns_reap cuts every connection that waited longer than
 *   header_timeout; bytes trickling in do not move the deadline.
 * - The body deadline (Apache's mod_reqtimeout rule): from its head, a
 *   request has header_timeout seconds to send its body, plus one second
 *   for every SRV_BODY_MIN_RATE bytes that arrived (srv_conns_body), until
 *   the body is complete (srv_conns_body_done) and the request is served.
 *   A body trickled in a byte at a time is cut like a slow head; an upload
 *   of a gigabyte at any usable speed is not. Serving (a long computation,
 *   an event stream) is never cut.
 * - Cutting is shutdown(2) of the socket (opt.cut): libmicrohttpd's thread
 *   sees the end of the stream and closes the connection itself. A cut
 *   connection stops counting at once. cut() runs under the books' mutex and
 *   only on a record libmicrohttpd has not reported closed, and
 *   libmicrohttpd reports a close before it closes the socket, so the
 *   descriptor cut is never a reused one.
 * - A record is created at admission (handing) and becomes live when
 *   libmicrohttpd reports the connection started (srv_conns_started finds
 *   it by descriptor). libmicrohttpd may drop a connection it was handed
 *   without a word (no thread to be had): handing records older than a few
 *   seconds are dropped by srv_conns_reap, and a new admission of the same
 *   descriptor replaces a stale one.
 * - Thread safety: one mutex; the gate thread, libmicrohttpd's daemon thread
 *   (started, closed) and its connection threads (busy, idle) call in.
 */
#ifndef HPO_SERVER_CONNS_H
#define HPO_SERVER_CONNS_H

#include <stddef.h>
#include <sys/socket.h>

/* A client address: IPv6, or IPv4 mapped into it (::ffff:a.b.c.d). */
typedef struct srv_addr {
    unsigned char b[16];
} srv_addr;

void srv_addr_from(const struct sockaddr *sa, srv_addr *out);
/* "127.0.0.1" or "::1"; at least 46 bytes. */
void srv_addr_format(const srv_addr *a, char *buf, size_t n);

typedef struct srv_conns srv_conns;
typedef struct srv_conn srv_conn;

typedef struct srv_conns_opts {
    unsigned max_handed;   /* soft cap of handed connections (> 0) */
    unsigned per_client;   /* cap of handed connections per client address; 0: none */
    unsigned max_pending;  /* sizes the address table: the gate's cap of pending connections */
    double header_timeout; /* seconds (> 0) */
    void (*cut)(int fd);   /* NULL: shutdown(fd, SHUT_RDWR) */
} srv_conns_opts;

typedef enum srv_admit { SRV_ADMIT_OK = 0, SRV_ADMIT_BUSY, SRV_ADMIT_CLIENT_CAP } srv_admit;

typedef struct srv_conns_stats {
    unsigned pending;      /* connections of the gate */
    unsigned handed;       /* counted handed connections (handing + live, not cut) */
    unsigned waiting;      /* live ones waiting for a request head */
    unsigned long long cut_deadline; /* cut for the header or body deadline, since start */
    unsigned long long cut_evicted;  /* cut to make room */
} srv_conns_stats;

int srv_conns_new(const srv_conns_opts *opt, srv_conns **out);
void srv_conns_free(srv_conns *c);

/* The gate's pending connections of address a: add returns a's count with
 * the new one. */
unsigned srv_conns_pending_add(srv_conns *c, const srv_addr *a);
void srv_conns_pending_del(srv_conns *c, const srv_addr *a);

/* A pending connection (socket fd, accepted at time since) sent a good
 * head: SRV_ADMIT_OK (a handing record now counts it) or why not. */
srv_admit srv_conns_admit(srv_conns *c, const srv_addr *a, int fd, double since);
/* libmicrohttpd refused the connection admitted with fd. */
void srv_conns_handoff_failed(srv_conns *c, int fd);

/* libmicrohttpd's notifications. started returns the record to pass to the
 * others (never NULL). */
srv_conn *srv_conns_started(srv_conns *c, int fd, const srv_addr *a, double now);
void srv_conns_closed(srv_conns *c, srv_conn *k);
/* k got a request head at now: it stops waiting, and its body's deadline
 * runs. -1 when it was cut already (its deadline passed, or it made room):
 * the request must not be served. */
int srv_conns_busy(srv_conns *c, srv_conn *k, double now);
#define SRV_BODY_MIN_RATE 500.0 /* bytes a second a body must keep up, after header_timeout */
/* n more bytes of k's request body arrived: its deadline moves on. */
void srv_conns_body(srv_conns *c, srv_conn *k, size_t n);
/* k's request body is complete (or it had none): no deadline until it idles. */
void srv_conns_body_done(srv_conns *c, srv_conn *k);
void srv_conns_idle(srv_conns *c, srv_conn *k, double now);
/* Whether k was cut. */
int srv_conns_was_cut(srv_conns *c, const srv_conn *k);

/* Cuts the live connections that waited for a head, or sent a body, past
 * their deadline and drops stale handing records; returns how many were cut.
 * Cheap when no deadline is due. */
int srv_conns_reap(srv_conns *c, double now);
void srv_conns_stats_get(srv_conns *c, srv_conns_stats *out);

#endif
