/* events.c - a study's progress events: stored with the change they tell
 * of (the storage _ev calls; api_events_wake then wakes the readers) or, for
 * mere progress (execution_resumed, model_epoch, model_queued), by
 * api_event; streamed by
 * GET /api/v1/studies/{id}/events as server-sent events, resumable with
 * Last-Event-ID (or ?after=N). The stream ends after the study's final
 * event (study_complete, study_cancelled), or within a second of its
 * client leaving (api_request.client_gone). A Last-Event-ID on a finished
 * study (complete or cancelled) with no event after it gets 204 and no
 * body, which is what stops an EventSource from reconnecting.
 *
 * Waking. A stream waits on the condition of its study's bucket (study id
 * modulo API_EVENT_BUCKETS): a study's events (api_events_wake_study) wake
 * the streams of that bucket only, a wake naming no study every one. Its
 * client check (every second) and keep-alive (every 10 s) run on deadlines
 * of the stream's own, which no wake moves.
 *
 * Several nodes on PostgreSQL: a stream on one node follows the events
 * every node stores. Storage makes a study's events commit in id order
 * (so the position, the last id sent, never passes one that commits
 * late) and sends NOTIFY hpo_events with each; the watch thread here
 * LISTENs and wakes the streams, which then read from the database. So
 * an epoch trained on node A reaches a stream on node B within a round
 * trip of its commit; a lost connection is made again and the streams
 * read once more (and the 10 s keep-alive reads anyway). The final event
 * is stored with the state, so a stream that finds the study over reads
 * once more and ends with it, whichever node ended the study. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_internal.h"

#define KEEPALIVE_SECONDS 10
#define GONE_CHECK_SECONDS 1 /* how often a waiting stream asks whether its client left */

static unsigned bucket_of(int64_t study_id) { return (unsigned)((uint64_t)study_id % API_EVENT_BUCKETS); }

void api_events_wake_study(api_ctx *ctx, int64_t study_id) {
    unsigned b = bucket_of(study_id);
    pthread_mutex_lock(&ctx->event_mu);
    ctx->event_bucket_seq[b]++;
    pthread_cond_broadcast(&ctx->event_cond[b]);
    pthread_mutex_unlock(&ctx->event_mu);
}

void api_events_wake(api_ctx *ctx) {
    pthread_mutex_lock(&ctx->event_mu);
    ctx->event_seq++;
    for (int b = 0; b < API_EVENT_BUCKETS; b++) pthread_cond_broadcast(&ctx->event_cond[b]);
    pthread_mutex_unlock(&ctx->event_mu);
}

/* The watch thread: every notice (an event another connection committed,
 * or a reconnection after which any may have been missed) wakes the
 * readers, who read their studies' events after their positions. */
static void *watch_main(void *arg) {
    api_ctx *ctx = arg;
    for (;;) {
        pthread_mutex_lock(&ctx->event_mu);
        int stopping = ctx->stopping;
        pthread_mutex_unlock(&ctx->event_mu);
        if (stopping) return NULL;
        if (sto_watch_wait(ctx->watch, 5000) > 0) api_events_wake(ctx);
    }
}

int api_events_watch_start(api_ctx *ctx) {
    if (!sto_shared(ctx->db)) return 0;
    if (sto_watch_open(ctx->db, &ctx->watch)) { /* logged; streams still read at every keep-alive */
        HPO_WARN("events stored by other nodes reach this node's event streams within %d s only",
                 KEEPALIVE_SECONDS);
        return 0;
    }
    if (pthread_create(&ctx->watch_thread, NULL, watch_main, ctx)) {
        sto_watch_close(ctx->watch);
        ctx->watch = NULL;
        return HPO_EINTERNAL;
    }
    return 0;
}

void api_events_watch_stop(api_ctx *ctx) {
    if (!ctx->watch) return;
    pthread_mutex_lock(&ctx->event_mu);
    ctx->stopping = 1;
    pthread_mutex_unlock(&ctx->event_mu);
    sto_watch_interrupt(ctx->watch);
    pthread_join(ctx->watch_thread, NULL);
    sto_watch_close(ctx->watch);
    ctx->watch = NULL;
}

char *api_event_text(json_t *data) {
    if (!data) return hpo_strdup("{}");
    char *text = api_json_dumps(data, JSON_COMPACT);
    json_decref(data);
    if (!text) abort(); /* jansson fails only out of memory, where hpo aborts anyway */
    return text;
}

void api_event(api_ctx *ctx, int64_t study_id, int64_t trial_id, const char *type, json_t *data) {
    char *text = api_event_text(data);
    int64_t id;
    int rc = sto_event_append(ctx->db, study_id, trial_id, type, text, &id);
    free(text);
    if (rc) {
        HPO_WARN("study %lld: event %s not stored: %s", (long long)study_id, type, hpo_strerror(rc));
        return;
    }
    api_events_wake_study(ctx, study_id);
}

static int is_final(const char *type) {
    return strcmp(type, "study_complete") == 0 || strcmp(type, "study_cancelled") == 0;
}

typedef struct sse {
    api_ctx *ctx;
    int64_t study_id, last_id;
    unsigned bucket;   /* bucket_of(study_id) */
    double keepalive_at, gone_check_at; /* monotonic: kept across wakes, so events of the
                                           bucket never put them off */
    char *out;         /* formatted, not yet sent */
    size_t len, off, cap;
    int final_sent;
    int (*client_gone)(void *arg);
    void *client_gone_arg;
} sse;

static void append(sse *s, const char *text, size_t n) {
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2;
        s->out = hpo_xrealloc(s->out, s->cap);
    }
    memcpy(s->out + s->len, text, n);
    s->len += n;
}

/* Formats the stored events after last_id; returns how many. */
static size_t fetch(sse *s) {
    sto_event *ev = NULL;
    size_t n = 0;
    if (sto_event_list(s->ctx->db, s->study_id, s->last_id, 256, &ev, &n)) return 0;
    for (size_t i = 0; i < n; i++) {
        char head[160];
        int k = snprintf(head, sizeof head, "id: %lld\nevent: %s\ndata: ", (long long)ev[i].id, ev[i].type);
        append(s, head, (size_t)k);
        append(s, ev[i].data, strlen(ev[i].data)); /* compact JSON: one line */
        append(s, "\n\n", 2);
        s->last_id = ev[i].id;
        if (is_final(ev[i].type)) s->final_sent = 1;
    }
    sto_event_list_free(ev, n);
    return n;
}

/* The study has ended (or is gone) and no event will follow. */
static int study_over(sse *s) {
    sto_study st;
    int rc = sto_study_get(s->ctx->db, s->study_id, &st);
    if (rc) return 1;
    int over = st.state == STO_STUDY_COMPLETE || st.state == STO_STUDY_CANCELLED;
    sto_study_clear(&st);
    return over;
}

static long sse_read(void *arg, char *buf, size_t max) {
    sse *s = arg;
    api_ctx *ctx = s->ctx;
    for (;;) {
        if (s->off < s->len) {
            size_t n = s->len - s->off < max ? s->len - s->off : max;
            memcpy(buf, s->out + s->off, n);
            s->off += n;
            if (s->off == s->len) s->off = s->len = 0;
            return (long)n;
        }
        if (s->final_sent) return -1;
        pthread_mutex_lock(&ctx->event_mu);
        uint64_t seq = ctx->event_seq, bucket_seq = ctx->event_bucket_seq[s->bucket];
        int stopping = ctx->stopping;
        pthread_mutex_unlock(&ctx->event_mu);
        if (stopping) return -1;
        if (fetch(s) > 0) continue;
        if (study_over(s)) {
            /* The study ended after that fetch: its final event was stored in
             * the same transaction as the state, so one more fetch sends it. */
            if (fetch(s) > 0) continue;
            return -1;
        }
        /* wait for an event of the bucket (or a wake of every one); ask
         * every GONE_CHECK_SECONDS whether the client is still there, and
         * send a keep-alive comment every KEEPALIVE_SECONDS (which reads
         * again too: other nodes' events without a watch), on deadlines
         * that events do not move (they came so often that a client who
         * left was never asked, and its stream lived on) */
        int woken = 0;
        while (!woken) {
            double now = hpo_monotonic();
            if (now >= s->gone_check_at) {
                if (s->client_gone && s->client_gone(s->client_gone_arg)) return -1;
                s->gone_check_at = now + GONE_CHECK_SECONDS;
            }
            if (now >= s->keepalive_at) {
                s->keepalive_at = now + KEEPALIVE_SECONDS;
                append(s, ": keep-alive\n\n", 14);
                break;
            }
            double next = s->gone_check_at < s->keepalive_at ? s->gone_check_at : s->keepalive_at;
            struct timespec until = hpo_deadline(CLOCK_REALTIME, next - now);
            pthread_mutex_lock(&ctx->event_mu);
            int rc = 0;
            while (!(woken = ctx->event_seq != seq || ctx->event_bucket_seq[s->bucket] != bucket_seq ||
                             ctx->stopping) &&
                   rc != ETIMEDOUT)
                rc = pthread_cond_timedwait(&ctx->event_cond[s->bucket], &ctx->event_mu, &until);
            pthread_mutex_unlock(&ctx->event_mu);
        }
    }
}

static void sse_free(void *arg) {
    sse *s = arg;
    api_metrics_stream(s->ctx, -1);
    free(s->out);
    free(s);
}

void api_h_study_events(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    sto_study st;
    int rc = sto_study_get(ctx->db, id, &st);
    if (rc) {
        api_fail_lookup(resp, rc, "study", id);
        return;
    }
    int over = st.state == STO_STUDY_COMPLETE || st.state == STO_STUDY_CANCELLED;
    sto_study_clear(&st);
    int64_t after = 0;
    if (req->last_event_id) {
        int64_t v = 0;
        if (api_parse_decimal(req->last_event_id, &v) || v < 0) {
            api_fail(resp, 400, "invalid_argument", "Last-Event-ID", "Last-Event-ID must be an event id");
            return;
        }
        after = v;
        /* An EventSource reconnecting to a finished study that has told it
         * everything: 204 makes it stop (a 200 that ends would be retried
         * every 2 s). The state was read first: its final event is stored
         * with it, so nothing of the search follows. */
        int64_t last = 0;
        if (over && sto_event_last_id(ctx->db, id, &last) == 0 && last <= after) {
            api_reply_text(resp, 204, "text/event-stream", "", 0);
            return;
        }
    } else if (api_query_int(req, resp, "after", 0, 0, INT64_MAX, &after)) {
        return;
    }
    sse *s = hpo_xcalloc(1, sizeof *s);
    s->ctx = ctx;
    s->study_id = id;
    s->bucket = bucket_of(id);
    s->last_id = after;
    s->gone_check_at = hpo_monotonic() + GONE_CHECK_SECONDS;
    s->keepalive_at = hpo_monotonic() + KEEPALIVE_SECONDS;
    s->client_gone = req->client_gone;
    s->client_gone_arg = req->client_gone_arg;
    api_metrics_stream(ctx, +1); /* hpo_event_streams, until sse_free */
    append(s, "retry: 2000\n\n", 13);
    resp->status = 200;
    resp->content_type = "text/event-stream";
    resp->stream = sse_read;
    resp->stream_free = sse_free;
    resp->stream_arg = s;
}
