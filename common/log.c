/* log.c - log lines on stderr, as text or as JSON (see hpo.h). Written by
 * hand rather than with jansson: common/ depends on nothing, a line is built
 * in a fixed buffer without allocating, and a message quoting client bytes
 * that are not UTF-8 must still give valid JSON (jansson refuses it). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
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
 * is full and takes nothing more but its close. */
#define RESERVE 8
typedef struct line {
    char *s;
    size_t len, cap;
    int full;
} line;

static void put(line *l, const char *p, size_t n) {
    if (l->full || l->len + n + RESERVE >= l->cap) {
        l->full = 1;
        return;
    }
    memcpy(l->s + l->len, p, n);
    l->len += n;
    l->s[l->len] = '\0';
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
 * request path, can start a forged line or move the terminal's cursor). */
typedef enum { ESC_JSON, ESC_TEXT_VALUE, ESC_TEXT_MESSAGE } esc_mode;

static void put_escaped(line *l, const char *s, esc_mode mode) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p && !l->full) {
        char esc[8];
        unsigned c = *p;
        if ((c == '"' || c == '\\') && mode != ESC_TEXT_MESSAGE) {
            esc[0] = '\\', esc[1] = (char)c;
            put(l, esc, 2);
            p++;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
            put(l, esc, 2);
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, mode == ESC_JSON ? "\\u%04x" : "\\x%02x", c);
            puts_(l, esc);
            p++;
        } else if (c < 0x80) {
            put(l, (const char *)p, 1);
            p++;
        } else {
            size_t n = utf8_len(p);
            if (n) {
                put(l, (const char *)p, n);
                p += n;
            } else { /* not UTF-8: U+FFFD in JSON, the byte in hex in text */
                if (mode == ESC_JSON) {
                    puts_(l, "\\ufffd");
                } else {
                    snprintf(esc, sizeof esc, "\\x%02x", c);
                    puts_(l, esc);
                }
                p++;
            }
        }
    }
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
        put_escaped(&l, msg, ESC_JSON);
        puts_(&l, "\"");
        if (l.full) { /* cut inside the message: close the string and the object */
            close_(&l, "\"}");
            return l.len;
        }
        for (size_t i = 0; i < n && !l.full; i++) {
            size_t mark = l.len;
            puts_(&l, ",\"");
            puts_(&l, fields[i].key);
            puts_(&l, "\":");
            if (fields[i].str) {
                puts_(&l, "\"");
                put_escaped(&l, fields[i].str, ESC_JSON);
                puts_(&l, "\"");
            } else {
                put_number(&l, fields[i].num, 1);
            }
            if (l.full) { /* a field that does not fit is left out whole */
                l.len = mark;
                buf[mark] = '\0';
            }
        }
        close_(&l, "}");
        return l.len;
    }
    char head[128];
    snprintf(head, sizeof head, "%s %-5s ", ts, tags[lv]);
    puts_(&l, head);
    put_escaped(&l, msg, ESC_TEXT_MESSAGE);
    for (size_t i = 0; i < n && !l.full; i++) {
        puts_(&l, " ");
        puts_(&l, fields[i].key);
        puts_(&l, "=");
        if (!fields[i].str) {
            put_number(&l, fields[i].num, 0);
        } else if (needs_quotes(fields[i].str)) {
            puts_(&l, "\"");
            put_escaped(&l, fields[i].str, ESC_TEXT_VALUE);
            close_(&l, "\"");
        } else {
            puts_(&l, fields[i].str);
        }
    }
    return l.len;
}

static void vlog(int level, const hpo_log_field *fields, size_t n, const char *fmt, va_list ap) {
    char msg[2048], buf[HPO_LOG_LINE_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
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
