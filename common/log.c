/* log.c - log lines on stderr, as text or as JSON (see hpo.h). Written by
 * hand rather than with jansson: common/ depends on nothing, a line is built
 * in a fixed buffer without allocating, and a message quoting client bytes
 * that are not UTF-8 must still give valid JSON (jansson refuses it). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hpo.h"

int hpo_log_level = HPO_LOG_INFO;
int hpo_log_format = HPO_LOG_TEXT;

int hpo_log_level_parse(const char *name) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return -1;
}

int hpo_log_format_parse(const char *name) {
    if (name && strcmp(name, "text") == 0) return HPO_LOG_TEXT;
    if (name && strcmp(name, "json") == 0) return HPO_LOG_JSON;
    return -1;
}

/* A line being built: pieces are appended whole or not at all, keeping
 * RESERVE bytes for the closing characters; once one does not fit the line
 * is full and takes nothing more but its close. A line without a buffer
 * (s NULL) only counts: what its pieces would take. */
#define RESERVE 8
typedef struct line {
    char *s;
    size_t len, cap;
    int full;
} line;

/* The room of a field's value, as written ("..." included), so that one
 * long value cannot push the others off the line; and the least room of a
 * message when the fields leave less (then fields that do not fit are left
 * out). */
#define FIELD_VALUE_MAX 1024
#define MESSAGE_MIN 256
#define CUT_MARK "..." /* ends a message or value cut short */

static void put(line *l, const char *p, size_t n) {
    if (l->full || l->len + n + RESERVE >= l->cap) {
        l->full = 1;
        return;
    }
    if (l->s) {
        memcpy(l->s + l->len, p, n);
        l->s[l->len + n] = '\0';
    }
    l->len += n;
}

static void puts_(line *l, const char *p) { put(l, p, strlen(p)); }

/* The close: always fits in the reserve. */
static void close_(line *l, const char *p) {
    size_t n = strlen(p);
    if (l->len + n >= l->cap) n = l->cap - 1 - l->len;
    memcpy(l->s + l->len, p, n);
    l->len += n;
    l->s[l->len] = '\0';
}

/* The length of the valid UTF-8 sequence at p (1 to 4), or 0 if the byte
 * there does not start one (RFC 3629: no overlongs, no surrogates). */
static size_t utf8_len(const unsigned char *p) {
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3;
    else if (c >= 0xf0 && c <= 0xf4) n = 4;
    else return 0;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

/* How put_escaped writes s: as the inside of a JSON string, of a quoted
 * text value, or as a text line's message (quotes as they are, control
 * bytes escaped all the same, so that nothing a client sends, such as a
 * request path, can start a forged line or move the terminal's cursor).
 * Control characters are escaped in every mode: the ASCII ones (\n, \x1b,
 * \u001b in JSON) and the C1 ones (U+0080..U+009F, such as NEL and CSI)
 * and U+2028/U+2029, which line splitters and terminals take for line
 * breaks or commands (\u0085 in both formats). */
typedef enum { ESC_JSON, ESC_TEXT_VALUE, ESC_TEXT_MESSAGE } esc_mode;

/* The character at p as written: its bytes (esc, or p itself when they
 * stay as they are) in *out and their count returned; *used: the bytes of
 * p it covers. */
static size_t escape_one(const unsigned char *p, esc_mode mode, char esc[8], const char **out, size_t *used) {
    unsigned c = *p;
    *out = esc;
    *used = 1;
    if ((c == '"' || c == '\\') && mode != ESC_TEXT_MESSAGE) {
        esc[0] = '\\', esc[1] = (char)c;
        return 2;
    }
    if (c == '\n' || c == '\t' || c == '\r') {
        esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        return 2;
    }
    if (c < 0x20 || c == 0x7f)
        return (size_t)snprintf(esc, 8, mode == ESC_JSON ? "\\u%04x" : "\\x%02x", c);
    if (c < 0x80) {
        *out = (const char *)p;
        return 1;
    }
    size_t n = utf8_len(p);
    unsigned cp = n == 2   ? (c & 0x1f) << 6 | (p[1] & 0x3f)
                  : n == 3 ? (c & 0x0f) << 12 | (p[1] & 0x3f) << 6 | (p[2] & 0x3f)
                           : 0;
    if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029) { /* C1 controls, line separators */
        *used = n;
        return (size_t)snprintf(esc, 8, "\\u%04x", cp);
    }
    if (n) {
        *out = (const char *)p;
        *used = n;
        return n;
    }
    /* not UTF-8: U+FFFD in JSON, the byte in hex in text */
    return (size_t)snprintf(esc, 8, mode == ESC_JSON ? "\\ufffd" : "\\x%02x", c);
}

/* Writes s escaped in at most max bytes: when it needs more, as much of it
 * as fits before CUT_MARK (max >= its length). */
static void put_escaped(line *l, const char *s, esc_mode mode, size_t max) {
    char esc[8];
    const char *out;
    size_t used, need = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && need <= max; p += used)
        need += escape_one(p, mode, esc, &out, &used);
    size_t room = need <= max ? need : max - strlen(CUT_MARK);
    size_t written = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && !l->full; p += used) {
        size_t n = escape_one(p, mode, esc, &out, &used);
        if (written + n > room) break;
        put(l, out, n);
        written += n;
    }
    if (need > max) puts_(l, CUT_MARK);
}

static void put_number(line *l, double v, int json) {
    char num[40];
    if (!isfinite(v))
        snprintf(num, sizeof num, "%s", json ? "null" : "NaN");
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(num, sizeof num, "%.0f", v);
    else
        snprintf(num, sizeof num, "%.6g", v);
    puts_(l, num);
}

/* A text value goes in quotes when it is empty or holds a space, a quote,
 * '=' or a byte that is escaped. */
static int needs_quotes(const char *s) {
    if (!*s) return 1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p >= 0x7f) return 1;
    return 0;
}

/* The fields, each with its value cut to FIELD_VALUE_MAX; a field that does
 * not fit the line is left out whole. */
static void put_fields(line *l, const hpo_log_field *fields, size_t n, int json) {
    for (size_t i = 0; i < n; i++) {
        size_t mark = l->len;
        const char *str = fields[i].str;
        puts_(l, json ? ",\"" : " ");
        puts_(l, fields[i].key);
        puts_(l, json ? "\":" : "=");
        if (!str) {
            put_number(l, fields[i].num, json);
        } else if (json || needs_quotes(str)) {
            puts_(l, "\"");
            put_escaped(l, str, json ? ESC_JSON : ESC_TEXT_VALUE, FIELD_VALUE_MAX);
            puts_(l, "\"");
        } else {
            put_escaped(l, str, ESC_TEXT_VALUE, FIELD_VALUE_MAX);
        }
        if (l->full) {
            l->len = mark;
            if (l->s) l->s[mark] = '\0';
            l->full = 0;
        }
    }
}

size_t hpo_log_format_line(char *buf, size_t cap, int format, double now, int level,
                           const hpo_log_field *fields, size_t n, const char *msg) {
    static const char *tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    static const char *names[] = {"debug", "info", "warn", "error"};
    int lv = level < 0 ? 0 : level > 3 ? 3 : level;
    line l = {buf, 0, cap, 0};
    buf[0] = '\0';
    time_t sec = (time_t)floor(now);
    long ms = (long)((now - floor(now)) * 1e3);
    if (ms > 999) ms = 999;
    struct tm tm;
    gmtime_r(&sec, &tm);
    char ts[96];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
    int json = format == HPO_LOG_JSON;
    if (json) {
        puts_(&l, "{\"ts\":\"");
        puts_(&l, ts);
        puts_(&l, "\",\"level\":\"");
        puts_(&l, names[lv]);
        puts_(&l, "\",\"msg\":\"");
    } else {
        char head[128];
        snprintf(head, sizeof head, "%s %-5s ", ts, tags[lv]);
        puts_(&l, head);
    }
    /* the message gets the room the fields leave (a long one is cut, so
     * that route, status and the error stay on the line) */
    line count = {NULL, 0, SIZE_MAX, 0};
    put_fields(&count, fields, n, json);
    /* a text message that could read as fields (or as a quoted one) is
     * quoted as a field value is: "GET /x status=200" cannot pass for a
     * status field, so the fields start at the first key=value after an
     * unquoted message */
    int quoted = json || strchr(msg, '=') || msg[0] == '"';
    size_t used = l.len + RESERVE + 1 + (size_t)quoted /* the message's closing quote */;
    size_t left = cap > used ? cap - used : 0;
    size_t msg_max = left >= count.len + MESSAGE_MIN ? left - count.len : MESSAGE_MIN;
    if (quoted && !json) puts_(&l, "\"");
    put_escaped(&l, msg, json ? ESC_JSON : quoted ? ESC_TEXT_VALUE : ESC_TEXT_MESSAGE, msg_max);
    if (quoted) puts_(&l, "\"");
    if (l.full) { /* cut inside the message (a line too short): close it */
        if (quoted) close_(&l, json ? "\"}" : "\"");
        return l.len;
    }
    put_fields(&l, fields, n, json);
    if (json) close_(&l, "}");
    return l.len;
}

static void vlog(int level, const hpo_log_field *fields, size_t n, const char *fmt, va_list ap) {
    char msg[2048], buf[HPO_LOG_LINE_MAX];
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    if (len >= (int)sizeof msg) { /* cut: marked, and not inside a UTF-8 sequence */
        size_t end = sizeof msg - 1 - strlen(CUT_MARK);
        while (end > 0 && ((unsigned char)msg[end] & 0xc0) == 0x80) end--;
        memcpy(msg + end, CUT_MARK, strlen(CUT_MARK) + 1);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    hpo_log_format_line(buf, sizeof buf, hpo_log_format, (double)ts.tv_sec + ts.tv_nsec * 1e-9, level, fields,
                        n, msg);
    fprintf(stderr, "%s\n", buf); /* one call: lines from threads do not interleave */
}

void hpo_log(int level, const char *fmt, ...) {
    if (level < hpo_log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, NULL, 0, fmt, ap);
    va_end(ap);
}

void hpo_log_fields(int level, const hpo_log_field *fields, size_t n, const char *fmt, ...) {
    if (level < hpo_log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fields, n, fmt, ap);
    va_end(ap);
}
