/* gate.c - accepts connections and checks their first request head before
 * libmicrohttpd sees them (see gate.h). */
#include "gate.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "api.h"
#include "hpo.h"

#define LINGER_SECONDS 1.0     /* draining after a reply, before close */
#define TICK_SECONDS 0.25      /* srv_conns_reap runs at least this often */
#define ACCEPT_PAUSE_SECONDS 0.1
#define ACCEPTS_PER_WAKE 256

typedef struct pend {
    struct pend *prev, *next;
    int fd;
    int closing;    /* the reply is out; draining until EOF or LINGER_SECONDS; it no
                     * longer counts among its client's pending connections */
    double since;   /* accepted, or (closing) replied */
    size_t seen;    /* bytes of the head seen so far */
    srv_addr addr;
    struct sockaddr_storage sa;
    socklen_t salen;
} pend;

typedef struct plist {
    pend *head, *tail;
    unsigned n;
} plist;

struct srv_gate {
    srv_gate_opts opt;
    srv_conns *conns;
    srv_gate_hooks hooks;
    int ep, wake_fd;
    pthread_t thread;
    plist reading, closing; /* each in deadline order */
    double accept_paused_until; /* 0: accepting */
    char *buf;                  /* max_head + 1 bytes for peeking */
    size_t buf_len;
    char listen_tag, wake_tag;  /* epoll data of the two non-client descriptors */
};

static void plist_push(plist *l, pend *p) {
    p->next = NULL;
    p->prev = l->tail;
    if (l->tail)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->n++;
}

static void plist_unlink(plist *l, pend *p) {
    if (p->prev)
        p->prev->next = p->next;
    else
        l->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        l->tail = p->prev;
    p->prev = p->next = NULL;
    l->n--;
}

/* Forgets p: off its list and the books; closes its socket unless handed. */
static void release(srv_gate *g, pend *p, int close_fd) {
    plist_unlink(p->closing ? &g->closing : &g->reading, p);
    epoll_ctl(g->ep, EPOLL_CTL_DEL, p->fd, NULL);
    if (close_fd) close(p->fd);
    if (!p->closing) srv_conns_pending_del(g->conns, &p->addr);
    free(p);
}

static const char *reason(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

static void drain(srv_gate *g, pend *p);

/* Answers p with a JSON error and moves it to the closing list; p may be
 * gone when this returns. */
static void reply(srv_gate *g, pend *p, const srv_head *head, int status, const char *code,
                  const char *field, const char *message, int retry_after) {
    api_response r = {0};
    api_error_response(&r, status, code, message, field);
    char top[320], retry[48] = "";
    if (retry_after > 0) snprintf(retry, sizeof retry, "Retry-After: %d\r\n", retry_after);
    int n = snprintf(top, sizeof top,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                     "Connection: close\r\n%sContent-Length: %zu\r\n\r\n",
                     status, reason(status), retry, r.body_len);
    int head_only = head && strcmp(head->method, "HEAD") == 0;
    struct iovec iov[2] = {{top, (size_t)n}, {r.body, head_only ? 0 : r.body_len}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    /* a fresh socket's send buffer holds a reply this small; if the client
     * does not read it, it loses it */
    ssize_t sent = sendmsg(p->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)sent;
    api_response_clear(&r);
    shutdown(p->fd, SHUT_WR);
    if (g->hooks.answered) {
        srv_gate_answer a = {head ? head->method : "", head ? head->target : "", status, code, field, message,
                             hpo_monotonic() - p->since};
        g->hooks.answered(g->hooks.arg, &p->addr, &a);
    }
    plist_unlink(&g->reading, p);
    /* answered: a client's next connection must not find this one in its
     * count (it would be closed unanswered while this one drains) */
    srv_conns_pending_del(g->conns, &p->addr);
    p->closing = 1;
    p->since = hpo_monotonic();
    plist_push(&g->closing, p);
    drain(g, p); /* the head (and any body) must not be left unread at close */
}

/* Reads and drops what a closing connection sent; closes it at its end. */
static void drain(srv_gate *g, pend *p) {
    for (;;) {
        ssize_t n = recv(p->fd, g->buf, g->buf_len, MSG_DONTWAIT);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        release(g, p, 1); /* end of stream or an error */
        return;
    }
}

static void admit(srv_gate *g, pend *p, const srv_head *head) {
    srv_admit a = srv_conns_admit(g->conns, &p->addr, p->fd, hpo_monotonic());
    if (a == SRV_ADMIT_CLIENT_CAP) {
        reply(g, p, head, 503, "unavailable", "",
              "this client has too many connections open; close some or retry later", 1);
        return;
    }
    if (a == SRV_ADMIT_BUSY) {
        reply(g, p, head, 503, "unavailable", "", "hpod has too many connections open; retry later", 1);
        return;
    }
    int fd = p->fd;
    struct sockaddr_storage sa = p->sa;
    socklen_t salen = p->salen;
    release(g, p, 0);
    if (g->hooks.handoff(g->hooks.arg, fd, (struct sockaddr *)&sa, salen)) srv_conns_handoff_failed(g->conns, fd);
}

/* New bytes (or the end) on a connection waiting for its head. */
static void on_readable(srv_gate *g, pend *p, uint32_t events) {
    ssize_t n;
    do n = recv(p->fd, g->buf, g->buf_len, MSG_PEEK | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) release(g, p, 1);
        return;
    }
    if (n <= 0) { /* gone before a complete head */
        release(g, p, 1);
        return;
    }
    srv_head head;
    int rc = srv_head_check(g->buf, (size_t)n, &g->opt.limits, &head);
    p->seen = (size_t)n;
    if (rc == SRV_HEAD_MORE) {
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) release(g, p, 1); /* it stopped sending */
        return;
    }
    if (head.status) {
        reply(g, p, &head, head.status, head.code, head.field, head.message, 0);
        return;
    }
    admit(g, p, &head);
}

/* Makes room for one more pending connection: closes the one waiting
 * longest (a closing one first). 0, or -1 when there is none. */
static int evict_oldest(srv_gate *g) {
    pend *p = g->closing.head ? g->closing.head : g->reading.head;
    if (!p) return -1;
    HPO_DEBUG("gate: closing a connection that waited %.1f s to make room", hpo_monotonic() - p->since);
    release(g, p, 1);
    return 0;
}

static void set_accepting(srv_gate *g, int on) {
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = &g->listen_tag};
    epoll_ctl(g->ep, EPOLL_CTL_MOD, g->opt.listen_fd, &ev);
}

static void on_accept(srv_gate *g) {
    for (int i = 0; i < ACCEPTS_PER_WAKE; i++) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd = accept4(g->opt.listen_fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                if (evict_oldest(g) == 0) continue;
                HPO_WARN("gate: out of descriptors (%s); pausing accept", strerror(errno));
                g->accept_paused_until = hpo_monotonic() + ACCEPT_PAUSE_SECONDS;
                set_accepting(g, 0);
            }
            return; /* EAGAIN: none left */
        }
        pend *p = hpo_xcalloc(1, sizeof *p);
        p->fd = fd;
        p->sa = sa;
        p->salen = salen;
        p->since = hpo_monotonic();
        srv_addr_from((struct sockaddr *)&sa, &p->addr);
        unsigned mine = srv_conns_pending_add(g->conns, &p->addr);
        if (g->opt.per_client && mine > g->opt.per_client) {
            /* this client holds enough connections that sent nothing yet */
            srv_conns_pending_del(g->conns, &p->addr);
            close(fd);
            free(p);
            continue;
        }
        if (g->reading.n + g->closing.n >= g->opt.max_pending) evict_oldest(g);
        plist_push(&g->reading, p);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = p};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev)) {
            release(g, p, 1);
            continue;
        }
    }
}

/* Deadlines of pending connections; returns seconds to the next one. */
static double expire(srv_gate *g, double now) {
    while (g->reading.head && now >= g->reading.head->since + g->opt.header_timeout) {
        pend *p = g->reading.head;
        if (p->seen == 0) { /* sent nothing: no request to answer */
            release(g, p, 1);
            continue;
        }
        /* the request line, for the log, if it arrived */
        srv_head head = {.code = "", .field = ""};
        ssize_t n = recv(p->fd, g->buf, g->buf_len, MSG_PEEK | MSG_DONTWAIT);
        if (n <= 0 || srv_head_check(g->buf, (size_t)n, &g->opt.limits, &head) != SRV_HEAD_MORE)
            head = (srv_head){.code = "", .field = ""};
        char msg[96];
        snprintf(msg, sizeof msg, "the request headers did not arrive within %g s", g->opt.header_timeout);
        reply(g, p, &head, 408, "request_timeout", "headers", msg, 0);
    }
    while (g->closing.head && now >= g->closing.head->since + LINGER_SECONDS) release(g, g->closing.head, 1);
    double next = TICK_SECONDS;
    if (g->reading.head && g->reading.head->since + g->opt.header_timeout - now < next)
        next = g->reading.head->since + g->opt.header_timeout - now;
    if (g->closing.head && g->closing.head->since + LINGER_SECONDS - now < next)
        next = g->closing.head->since + LINGER_SECONDS - now;
    if (g->accept_paused_until > 0) {
        if (now >= g->accept_paused_until) {
            g->accept_paused_until = 0;
            set_accepting(g, 1);
        } else if (g->accept_paused_until - now < next) {
            next = g->accept_paused_until - now;
        }
    }
    return next < 0 ? 0 : next;
}

static void *gate_main(void *arg) {
    srv_gate *g = arg;
    struct epoll_event evs[64];
    for (;;) {
        double now = hpo_monotonic();
        srv_conns_reap(g->conns, now);
        double wait_s = expire(g, now);
        int n = epoll_wait(g->ep, evs, 64, (int)ceil(wait_s * 1000));
        if (n < 0 && errno != EINTR) {
            HPO_ERROR("gate: epoll_wait: %s", strerror(errno));
            break;
        }
        /* clients first: accepting may close (and free) pending
         * connections to make room, whose events would then dangle */
        int accept_now = 0;
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &g->wake_tag) return NULL;
            if (tag == &g->listen_tag) {
                accept_now = 1;
                continue;
            }
            pend *p = tag;
            if (p->closing)
                drain(g, p);
            else
                on_readable(g, p, evs[i].events);
        }
        if (accept_now) on_accept(g);
    }
    return NULL;
}

int srv_gate_start(const srv_gate_opts *opt, srv_conns *conns, const srv_gate_hooks *hooks, srv_gate **out) {
    srv_gate *g = hpo_xcalloc(1, sizeof *g);
    g->opt = *opt;
    g->conns = conns;
    g->hooks = *hooks;
    g->wake_fd = -1;
    size_t max_head = opt->limits.max_head ? opt->limits.max_head : 16384;
    g->buf_len = max_head + 1;
    g->buf = hpo_xmalloc(g->buf_len);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &g->listen_tag};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &g->wake_tag};
    if (g->ep < 0 || g->wake_fd < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, opt->listen_fd, &lev) ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake_fd, &wev) || pthread_create(&g->thread, NULL, gate_main, g)) {
        HPO_ERROR("gate: cannot start: %s", strerror(errno));
        if (g->ep >= 0) close(g->ep);
        if (g->wake_fd >= 0) close(g->wake_fd);
        free(g->buf);
        free(g);
        return HPO_EIO;
    }
    *out = g;
    return 0;
}

void srv_gate_stop(srv_gate *g) {
    if (!g) return;
    uint64_t one = 1;
    if (write(g->wake_fd, &one, sizeof one) < 0) HPO_WARN("gate: cannot wake: %s", strerror(errno));
    pthread_join(g->thread, NULL);
    while (g->reading.head) release(g, g->reading.head, 1);
    while (g->closing.head) release(g, g->closing.head, 1);
    close(g->opt.listen_fd);
    close(g->wake_fd);
    close(g->ep);
    free(g->buf);
    free(g);
}
