/* conns.c - the books of hpod's HTTP connections (see conns.h). */
#include "conns.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "hpo.h"

/* A handing record libmicrohttpd has not started after this long was
 * dropped by it (it closes such a socket without telling us). */
#define STALE_HANDING_SECONDS 5.0

struct srv_conn {
    srv_conn *prev, *next;
    int fd;
    srv_addr addr;
    int live;     /* libmicrohttpd reported it started */
    int counted;  /* counts toward its address and the total */
    int waiting;  /* waiting for a request head since `since` */
    int in_body;  /* sending a request body since `since` (its head came then) */
    double body_bytes; /* of that body so far */
    int served;   /* answered a request: waiting now means idle keep-alive */
    int cut;
    double since;
    double handed_at;
};

/* Per-address counts: open addressing, linear probing, deletion by
 * backward shift (no tombstones); an address whose counts are zero has no
 * slot. */
typedef struct slot {
    srv_addr key;
    unsigned pending, handed;
    int used;
} slot;

typedef struct list {
    srv_conn *head, *tail;
} list;

struct srv_conns {
    pthread_mutex_t mu;
    srv_conns_opts opt;
    slot *tab;
    size_t mask;
    list handing, live;
    unsigned pending_total, handed_total;
    double next_due; /* reap has nothing to do before this */
    unsigned long long cut_deadline, cut_evicted;
};

void srv_addr_from(const struct sockaddr *sa, srv_addr *out) {
    memset(out, 0, sizeof *out);
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        out->b[10] = out->b[11] = 0xff;
        memcpy(out->b + 12, &in->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        memcpy(out->b, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
}

void srv_addr_format(const srv_addr *a, char *buf, size_t n) {
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const char *ok = memcmp(a->b, mapped, 12) == 0 ? inet_ntop(AF_INET, a->b + 12, buf, (socklen_t)n)
                                                   : inet_ntop(AF_INET6, a->b, buf, (socklen_t)n);
    if (!ok && n) buf[0] = '\0';
}

static size_t hash_addr(const srv_addr *a) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < 16; i++) h = (h ^ a->b[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

/* The slot of a; with insert, a new empty one if a has none. NULL when the
 * table is full (then a is not counted: caps do not apply to it). */
static slot *find_slot(srv_conns *c, const srv_addr *a, int insert) {
    size_t i = hash_addr(a) & c->mask;
    for (size_t probes = 0; probes <= c->mask; probes++, i = (i + 1) & c->mask) {
        slot *s = &c->tab[i];
        if (!s->used) {
            if (!insert) return NULL;
            memset(s, 0, sizeof *s);
            s->key = *a;
            s->used = 1;
            return s;
        }
        if (memcmp(s->key.b, a->b, 16) == 0) return s;
    }
    return NULL;
}

/* Frees slot s when both its counts are zero. */
static void release_slot(srv_conns *c, slot *s) {
    if (!s || s->pending || s->handed) return;
    size_t i = (size_t)(s - c->tab), j = i;
    for (;;) {
        j = (j + 1) & c->mask;
        if (!c->tab[j].used) break;
        size_t k = hash_addr(&c->tab[j].key) & c->mask;
        /* move j back to i unless its home k lies cyclically in (i, j] */
        int stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
        if (!stays) {
            c->tab[i] = c->tab[j];
            i = j;
        }
    }
    c->tab[i].used = 0;
}

static void list_push(list *l, srv_conn *k) {
    k->next = NULL;
    k->prev = l->tail;
    if (l->tail)
        l->tail->next = k;
    else
        l->head = k;
    l->tail = k;
}

static void list_unlink(list *l, srv_conn *k) {
    if (k->prev)
        k->prev->next = k->next;
    else
        l->head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else
        l->tail = k->prev;
    k->prev = k->next = NULL;
}

static void count(srv_conns *c, srv_conn *k) {
    slot *s = find_slot(c, &k->addr, 1);
    if (s) s->handed++;
    c->handed_total++;
    k->counted = 1;
}

static void uncount(srv_conns *c, srv_conn *k) {
    if (!k->counted) return;
    slot *s = find_slot(c, &k->addr, 0);
    if (s && s->handed) {
        s->handed--;
        release_slot(c, s);
    }
    c->handed_total--;
    k->counted = 0;
}

static void default_cut(int fd) { shutdown(fd, SHUT_RDWR); }

static void cut(srv_conns *c, srv_conn *k, int evicted) {
    c->opt.cut(k->fd);
    k->cut = 1;
    k->waiting = k->in_body = 0;
    uncount(c, k);
    if (evicted)
        c->cut_evicted++;
    else
        c->cut_deadline++;
}

int srv_conns_new(const srv_conns_opts *opt, srv_conns **out) {
    if (!opt || opt->max_handed == 0 || !(opt->header_timeout > 0)) return HPO_EINVAL;
    srv_conns *c = hpo_xcalloc(1, sizeof *c);
    c->opt = *opt;
    if (!c->opt.cut) c->opt.cut = default_cut;
    /* at most max_pending + max_handed addresses (plus the few over caps
     * in flight): a table four times that stays sparse */
    size_t want = 4 * ((size_t)opt->max_pending + opt->max_handed) + 64, cap = 64;
    while (cap < want) cap <<= 1;
    c->tab = hpo_xcalloc(cap, sizeof *c->tab);
    c->mask = cap - 1;
    c->next_due = INFINITY;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

static void free_list(list *l) {
    for (srv_conn *k = l->head, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    l->head = l->tail = NULL;
}

void srv_conns_free(srv_conns *c) {
    if (!c) return;
    free_list(&c->handing);
    free_list(&c->live);
    pthread_mutex_destroy(&c->mu);
    free(c->tab);
    free(c);
}

unsigned srv_conns_pending_add(srv_conns *c, const srv_addr *a) {
    pthread_mutex_lock(&c->mu);
    slot *s = find_slot(c, a, 1);
    unsigned n = 1;
    if (s) n = ++s->pending;
    c->pending_total++;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void srv_conns_pending_del(srv_conns *c, const srv_addr *a) {
    pthread_mutex_lock(&c->mu);
    slot *s = find_slot(c, a, 0);
    if (s && s->pending) {
        s->pending--;
        release_slot(c, s);
    }
    if (c->pending_total) c->pending_total--;
    pthread_mutex_unlock(&c->mu);
}

/* The idle keep-alive connection of address a (any when NULL) that has
 * waited longest for its next request head, or NULL. A connection whose
 * first head is still on its way is not idle. */
static srv_conn *oldest_waiting(srv_conns *c, const srv_addr *a) {
    srv_conn *best = NULL;
    for (srv_conn *k = c->live.head; k; k = k->next)
        if (k->waiting && k->served && !k->cut && (!a || memcmp(k->addr.b, a->b, 16) == 0) && (!best || k->since < best->since))
            best = k;
    return best;
}

static void drop(srv_conns *c, list *l, srv_conn *k) {
    list_unlink(l, k);
    uncount(c, k);
    free(k);
}

srv_admit srv_conns_admit(srv_conns *c, const srv_addr *a, int fd, double now) {
    srv_admit res = SRV_ADMIT_OK;
    pthread_mutex_lock(&c->mu);
    for (srv_conn *k = c->handing.head; k; k = k->next)
        if (k->fd == fd) { /* its socket was closed, so libmicrohttpd dropped it */
            drop(c, &c->handing, k);
            break;
        }
    if (c->opt.per_client) {
        slot *s = find_slot(c, a, 0);
        if (s && s->handed >= c->opt.per_client) {
            srv_conn *victim = oldest_waiting(c, a);
            if (!victim) {
                res = SRV_ADMIT_CLIENT_CAP;
                goto out;
            }
            cut(c, victim, 1);
        }
    }
    if (c->handed_total >= c->opt.max_handed) {
        srv_conn *victim = oldest_waiting(c, NULL);
        if (!victim) {
            res = SRV_ADMIT_BUSY;
            goto out;
        }
        cut(c, victim, 1);
    }
    srv_conn *k = hpo_xcalloc(1, sizeof *k);
    k->fd = fd;
    k->addr = *a;
    k->handed_at = k->since = now;
    list_push(&c->handing, k);
    count(c, k);
    if (now + STALE_HANDING_SECONDS < c->next_due) c->next_due = now + STALE_HANDING_SECONDS;
out:
    pthread_mutex_unlock(&c->mu);
    return res;
}

void srv_conns_handoff_failed(srv_conns *c, int fd) {
    pthread_mutex_lock(&c->mu);
    for (srv_conn *k = c->handing.head; k; k = k->next)
        if (k->fd == fd) {
            drop(c, &c->handing, k);
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

srv_conn *srv_conns_started(srv_conns *c, int fd, const srv_addr *a, double now) {
    pthread_mutex_lock(&c->mu);
    srv_conn *k = c->handing.head;
    while (k && k->fd != fd) k = k->next;
    if (k) {
        list_unlink(&c->handing, k);
    } else { /* not admitted by the gate (cannot happen in hpod): count it now */
        k = hpo_xcalloc(1, sizeof *k);
        k->fd = fd;
        k->addr = *a;
        k->since = k->handed_at = now;
        count(c, k);
    }
    k->live = 1;
    k->waiting = 1; /* its first head is on its way from the socket buffer */
    list_push(&c->live, k);
    if (k->since + c->opt.header_timeout < c->next_due) c->next_due = k->since + c->opt.header_timeout;
    pthread_mutex_unlock(&c->mu);
    return k;
}

void srv_conns_closed(srv_conns *c, srv_conn *k) {
    if (!k) return;
    pthread_mutex_lock(&c->mu);
    drop(c, &c->live, k);
    pthread_mutex_unlock(&c->mu);
}

/* When k's wait for a head, or its body, runs out. */
static double due_of(const srv_conns *c, const srv_conn *k) {
    return k->since + c->opt.header_timeout + (k->in_body ? k->body_bytes / SRV_BODY_MIN_RATE : 0);
}

int srv_conns_busy(srv_conns *c, srv_conn *k, double now) {
    pthread_mutex_lock(&c->mu);
    int was_cut = k->cut;
    k->waiting = 0;
    if (!was_cut) {
        k->in_body = 1;
        k->body_bytes = 0;
        k->since = now;
        if (due_of(c, k) < c->next_due) c->next_due = due_of(c, k);
    }
    pthread_mutex_unlock(&c->mu);
    return was_cut ? -1 : 0;
}

void srv_conns_body(srv_conns *c, srv_conn *k, size_t n) {
    pthread_mutex_lock(&c->mu);
    k->body_bytes += (double)n; /* the deadline only moves later: next_due stays early enough */
    pthread_mutex_unlock(&c->mu);
}

void srv_conns_body_done(srv_conns *c, srv_conn *k) {
    pthread_mutex_lock(&c->mu);
    k->in_body = 0;
    pthread_mutex_unlock(&c->mu);
}

void srv_conns_idle(srv_conns *c, srv_conn *k, double now) {
    pthread_mutex_lock(&c->mu);
    if (!k->cut) {
        k->waiting = 1;
        k->in_body = 0;
        k->served = 1;
        k->since = now;
        if (now + c->opt.header_timeout < c->next_due) c->next_due = now + c->opt.header_timeout;
    }
    pthread_mutex_unlock(&c->mu);
}

int srv_conns_was_cut(srv_conns *c, const srv_conn *k) {
    pthread_mutex_lock(&c->mu);
    int was = k->cut;
    pthread_mutex_unlock(&c->mu);
    return was;
}

int srv_conns_reap(srv_conns *c, double now) {
    int n = 0;
    pthread_mutex_lock(&c->mu);
    if (now >= c->next_due) {
        double next = INFINITY;
        for (srv_conn *k = c->handing.head, *after; k; k = after) {
            after = k->next;
            if (now >= k->handed_at + STALE_HANDING_SECONDS)
                drop(c, &c->handing, k);
            else if (k->handed_at + STALE_HANDING_SECONDS < next)
                next = k->handed_at + STALE_HANDING_SECONDS;
        }
        for (srv_conn *k = c->live.head; k; k = k->next) {
            if (!(k->waiting || k->in_body) || k->cut) continue;
            double due = due_of(c, k);
            if (now >= due) {
                cut(c, k, 0);
                n++;
            } else if (due < next) {
                next = due;
            }
        }
        c->next_due = next;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

void srv_conns_stats_get(srv_conns *c, srv_conns_stats *out) {
    pthread_mutex_lock(&c->mu);
    memset(out, 0, sizeof *out);
    out->pending = c->pending_total;
    out->handed = c->handed_total;
    for (srv_conn *k = c->live.head; k; k = k->next) out->waiting += k->waiting && !k->cut;
    out->cut_deadline = c->cut_deadline;
    out->cut_evicted = c->cut_evicted;
    pthread_mutex_unlock(&c->mu);
}
