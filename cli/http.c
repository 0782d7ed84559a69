/* http.c - the client's only HTTP code: one libcurl easy handle; JSON, a
 * multipart form (curl_mime) or nothing in; JSON, a stream or a download
 * out (cli_req.sink); HTTP failures mapped to the exit codes of cli.h. An
 * error answer (4xx/5xx) is always buffered, never given to the sink. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void buf_add(buf *b, const char *data, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = hpo_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
}

typedef struct xfer {
    CURL *h;
    cli_req *r;
    buf b;        /* the answer, unless a 2xx goes to the sink */
    int stopped;  /* the sink asked to stop */
} xfer;

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg) {
    xfer *x = arg;
    size_t n = size * nmemb;
    long status = 0;
    if (x->r->sink) curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
    if (x->r->sink && status >= 200 && status < 300) {
        if (x->r->sink(data, n, x->r->sink_arg)) {
            x->stopped = 1;
            return 0; /* ends the transfer (CURLE_WRITE_ERROR) */
        }
        return n;
    }
    buf_add(&x->b, data, n);
    return n;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    xfer *x = arg;
    if (x->r->aborted && x->r->aborted()) return 1;
    if (x->r->tick && x->r->tick(x->r->tick_arg)) {
        x->stopped = 1; /* the caller has what it wanted */
        return 1;
    }
    return 0;
}

int cli_init(cli_ctx *c, const char *url, const char *token) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return CLI_ECONNECT;
    c->url = url;
    c->token = token && *token ? token : NULL;
    c->curl = curl_easy_init();
    return c->curl ? CLI_OK : CLI_ECONNECT;
}

void cli_clear(cli_ctx *c) {
    if (c->curl) curl_easy_cleanup(c->curl);
    c->curl = NULL;
    curl_global_cleanup();
}

/* Prints the server's error: {"error": {"code", "message", "field"}} as
 * the JSON itself (one line, for scripts) on stderr. */
static void print_error(long status, const char *method, const char *path, const buf *b) {
    json_t *j = b->p ? json_loads(b->p, 0, NULL) : NULL;
    if (j && json_object_get(j, "error")) {
        char *s = json_dumps(j, JSON_COMPACT);
        fprintf(stderr, "%s\n", s);
        free(s);
    } else {
        fprintf(stderr, "hpo: %s %s: HTTP %ld%s%.200s\n", method, path, status, b->n ? ": " : "",
                b->p ? b->p : "");
    }
    json_decref(j);
}

int cli_call(cli_ctx *c, const char *method, const char *path, const json_t *body, json_t **out) {
    cli_req r = {.method = method, .path = path, .body = body, .timeout_ms = 120 * 1000};
    return cli_request(c, &r, out);
}

int cli_request(cli_ctx *c, cli_req *r, json_t **out) {
    CURL *h = c->curl;
    xfer x = {.h = h, .r = r};
    char *data = NULL, *url = NULL;
    struct curl_slist *headers = NULL;
    const char *method = r->method, *path = r->path;
    int rc = CLI_OK;
    if (out) *out = NULL;
    r->timed_out = 0;
    r->status = 0;
    r->broken = 0;
    size_t ul = strlen(c->url) + strlen(path) + 1;
    url = hpo_xmalloc(ul);
    snprintf(url, ul, "%s%s", c->url, path);
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    if (r->timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, r->timeout_ms);
    if (r->aborted || r->tick) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "hpo/" HPO_VERSION);
    char accept[128];
    snprintf(accept, sizeof accept, "Accept: %s", r->accept ? r->accept : "application/json");
    headers = curl_slist_append(headers, accept);
    if (r->last_event_id > 0) {
        char last[64];
        snprintf(last, sizeof last, "Last-Event-ID: %lld", r->last_event_id);
        headers = curl_slist_append(headers, last);
    }
    if (c->token) {
        size_t n = strlen(c->token) + 32;
        char *auth = hpo_xmalloc(n);
        snprintf(auth, n, "Authorization: Bearer %s", c->token);
        headers = curl_slist_append(headers, auth);
        free(auth);
    }
    if (r->mime) {
        curl_easy_setopt(h, CURLOPT_MIMEPOST, (curl_mime *)r->mime); /* sets multipart/form-data */
    } else if (r->body) {
        data = json_dumps(r->body, JSON_COMPACT);
        if (!data) {
            fprintf(stderr, "hpo: cannot encode the request body\n");
            rc = CLI_EUSAGE;
            goto fail;
        }
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, data);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(data));
    } else if (strcmp(method, "POST") == 0) {
        /* no body: no Content-Type either (libcurl would send a form's, which
         * hpod without a token refuses, see its README) */
        headers = curl_slist_append(headers, "Content-Type:");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    r->status = status;
    if (x.stopped) goto fail; /* the sink or the tick has what it wanted */
    if (cc == CURLE_ABORTED_BY_CALLBACK) {
        rc = CLI_EINTR;
        goto fail;
    }
    if (cc == CURLE_OPERATION_TIMEDOUT && r->sink && status >= 200 && status < 300) {
        r->timed_out = 1; /* a stream bounded by its time limit: done */
        goto fail;
    }
    if (cc != CURLE_OK && r->sink && status >= 200 && status < 300) {
        r->broken = 1; /* the answer began and broke off: the caller says what it means */
        goto fail;
    }
    if (cc != CURLE_OK) {
        fprintf(stderr, "hpo: cannot reach hpod at %s: %s (set HPO_URL or --url)\n", c->url,
                curl_easy_strerror(cc));
        rc = CLI_ECONNECT;
        goto fail;
    }
    if (status >= 400) {
        print_error(status, method, path, &x.b);
        rc = status < 500 ? CLI_EREFUSED : CLI_ESERVER;
        goto fail;
    }
    if (x.b.n && out) {
        json_error_t jerr;
        json_t *j = json_loads(x.b.p, 0, &jerr);
        if (!j) {
            fprintf(stderr, "hpo: %s %s: the answer is not JSON (%s)\n", method, path, jerr.text);
            rc = CLI_ESERVER;
            goto fail;
        }
        *out = j;
    }
fail:
    curl_slist_free_all(headers);
    free(data);
    free(url);
    free(x.b.p);
    return rc;
}
