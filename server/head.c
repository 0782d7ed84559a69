/* head.c - checks an HTTP/1.x request head before libmicrohttpd reads it
 * (see head.h). */
#include "head.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int is_tchar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A control byte (NUL, CR, LF, DEL, ...); HTAB only where tab_ok. */
static int is_ctl(unsigned char c, int tab_ok) { return (c < 0x20 && !(tab_ok && c == '\t')) || c == 0x7f; }

static int refuse(srv_head *out, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int refuse(srv_head *out, int status, const char *code, const char *field, const char *fmt, ...) {
    out->status = status;
    out->code = code;
    out->field = field;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->message, sizeof out->message, fmt, ap);
    va_end(ap);
    return SRV_HEAD_DONE;
}

static void copy_cut(char *dst, size_t cap, const char *s, size_t n) {
    if (n >= cap) n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* The request line s[0..len): complete when its line end was seen. Returns
 * SRV_HEAD_MORE when what is there is a good (prefix of a) request line. */
static int check_request_line(const char *s, size_t len, int complete, const srv_head_limits *lim,
                              srv_head *out) {
    size_t m = 0;
    while (m < len && is_tchar((unsigned char)s[m])) m++;
    copy_cut(out->method, sizeof out->method, s, m);
    if (len > lim->max_line)
        return refuse(out, 414, "uri_too_long", "request_line", "the request line is over %zu bytes",
                      lim->max_line);
    if (m == len && !complete) return SRV_HEAD_MORE;
    if (m == 0 || m == len || s[m] != ' ')
        return refuse(out, 400, "bad_request", "request_line",
                      "the request line must be METHOD SP target SP HTTP/1.1");
    size_t t = m + 1, te = t;
    size_t args = 0;
    int in_query = 0;
    while (te < len && s[te] != ' ') {
        unsigned char c = (unsigned char)s[te];
        if (is_ctl(c, 0))
            return refuse(out, 400, "bad_request", "request_line",
                          "the request target holds a control byte (0x%02x)", c);
        if (c == '?' && !in_query) {
            in_query = 1;
            args = 1;
        } else if (c == '&' && in_query) {
            args++;
        }
        te++;
    }
    copy_cut(out->target, sizeof out->target, s + t, te - t);
    if (args > lim->max_fields)
        return refuse(out, 414, "uri_too_long", "query", "the query has more than %zu arguments",
                      lim->max_fields);
    if (te == len && !complete) return SRV_HEAD_MORE;
    if (te == t || te == len)
        return refuse(out, 400, "bad_request", "request_line",
                      "the request line must be METHOD SP target SP HTTP/1.1");
    const char *v = s + te + 1;
    size_t vn = len - te - 1;
    static const char proto[] = "HTTP/";
    /* a prefix of "HTTP/d.d" is fine while the line is incomplete */
    for (size_t i = 0; i < vn && i < 8; i++) {
        int ok = i < 5 ? v[i] == proto[i] : i == 6 ? v[i] == '.' : (v[i] >= '0' && v[i] <= '9');
        if (!ok) break;
        if (i + 1 == vn && !complete) return SRV_HEAD_MORE;
    }
    if (vn == 0 && !complete) return SRV_HEAD_MORE;
    if (vn != 8 || memcmp(v, proto, 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' || v[7] < '0' ||
        v[7] > '9')
        return refuse(out, 400, "bad_request", "request_line",
                      "the request line must end with an HTTP version such as HTTP/1.1");
    if (v[5] != '1')
        return refuse(out, 505, "http_version_not_supported", "request_line",
                      "HTTP/%c.%c is not supported; use HTTP/1.1", v[5], v[7]);
    return SRV_HEAD_MORE;
}

/* Whether s[0..n) (without surrounding whitespace) is `word`, any case. */
static int trimmed_equals(const char *s, size_t n, const char *word) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    return n == strlen(word) && strncasecmp(s, word, n) == 0;
}

static int check_content_length(const char *s, size_t n, srv_head *out) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n == 0)
        return refuse(out, 400, "bad_request", "Content-Length", "Content-Length is empty");
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return refuse(out, 400, "bad_request", "Content-Length",
                          "Content-Length must be one decimal number of bytes");
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return refuse(out, 413, "too_large", "Content-Length", "Content-Length is too large");
        v = v * 10 + d;
    }
    return SRV_HEAD_MORE;
}

int srv_head_check(const char *buf, size_t n, const srv_head_limits *lim_in, srv_head *out) {
    srv_head_limits lim = {8192, 16384, 100};
    if (lim_in) {
        if (lim_in->max_line) lim.max_line = lim_in->max_line;
        if (lim_in->max_head) lim.max_head = lim_in->max_head;
        if (lim_in->max_fields) lim.max_fields = lim_in->max_fields;
    }
    memset(out, 0, sizeof *out);
    out->code = "";
    out->field = "";
    size_t pos = 0;
    /* empty lines before the request line are tolerated (RFC 9112 2.2) */
    while (pos < n && (buf[pos] == '\n' || buf[pos] == '\r')) {
        if (buf[pos] == '\r' && pos + 1 < n && buf[pos + 1] != '\n')
            return refuse(out, 400, "bad_request", "request_line", "a bare CR before the request line");
        pos++;
        if (pos > lim.max_line)
            return refuse(out, 400, "bad_request", "request_line", "no request line");
    }
    int line_no = 0, cl_seen = 0, te_seen = 0;
    size_t fields = 0;
    for (;;) {
        const char *nl = pos < n ? memchr(buf + pos, '\n', n - pos) : NULL;
        size_t end = nl ? (size_t)(nl - buf) : n; /* the line is buf[pos..end) */
        size_t len = end - pos;
        if (nl && len && buf[end - 1] == '\r') len--; /* CRLF; a bare LF is tolerated */
        if (line_no == 0) {
            size_t seen = nl ? len : n - pos;
            if (!nl && seen && buf[pos + seen - 1] == '\r') seen--; /* its LF is on the way */
            int rc = check_request_line(buf + pos, seen, nl != NULL, &lim, out);
            if (rc != SRV_HEAD_MORE) return rc;
        }
        if ((nl ? end + 1 : n) > lim.max_head)
            return refuse(out, 431, "header_too_large", "headers", "the request head is over %zu bytes",
                          lim.max_head);
        if (!nl) return SRV_HEAD_MORE;
        if (line_no == 0) {
            line_no = 1;
            pos = end + 1;
            continue;
        }
        const char *s = buf + pos;
        line_no++;
        pos = end + 1;
        if (len == 0) { /* the blank line: the head is complete */
            if (te_seen && cl_seen)
                return refuse(out, 400, "bad_request", "Content-Length",
                              "a request may not carry both Content-Length and Transfer-Encoding");
            out->len = pos;
            return SRV_HEAD_DONE;
        }
        if (s[0] == ' ' || s[0] == '\t')
            return refuse(out, 400, "bad_request", "headers", "folded header lines are not accepted");
        size_t k = 0;
        while (k < len && is_tchar((unsigned char)s[k])) k++;
        if (k == 0 || k == len || s[k] != ':')
            return refuse(out, 400, "bad_request", "headers", "header line %d is not 'Name: value'",
                          line_no - 1);
        if (++fields > lim.max_fields)
            return refuse(out, 431, "header_too_large", "headers", "the request has more than %zu headers",
                          lim.max_fields);
        const char *v = s + k + 1;
        size_t vn = len - k - 1;
        for (size_t i = 0; i < vn; i++)
            if (is_ctl((unsigned char)v[i], 1))
                return refuse(out, 400, "bad_request", "headers",
                              "header line %d holds a control byte (0x%02x)", line_no - 1,
                              (unsigned char)v[i]);
        if (k == 14 && strncasecmp(s, "Content-Length", 14) == 0) {
            if (cl_seen++)
                return refuse(out, 400, "bad_request", "Content-Length", "Content-Length is given twice");
            int rc = check_content_length(v, vn, out);
            if (rc != SRV_HEAD_MORE) return rc;
        } else if (k == 17 && strncasecmp(s, "Transfer-Encoding", 17) == 0) {
            if (te_seen++)
                return refuse(out, 400, "bad_request", "Transfer-Encoding",
                              "Transfer-Encoding is given twice");
            if (!trimmed_equals(v, vn, "chunked"))
                return refuse(out, 501, "not_implemented", "Transfer-Encoding",
                              "the only Transfer-Encoding accepted is chunked");
        }
    }
}
