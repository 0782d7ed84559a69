/*
 * head.h - checks the head of an HTTP/1.x request (request line and header
 * fields) from the bytes received so far, before libmicrohttpd reads it.
 *
 * Design notes
 * - Why: libmicrohttpd 0.9.75 answers a malformed head itself, with an HTML
 *   page (400, 413, 414, 431, 505) that no handler of ours can change, and
 *   for a malformed Content-Length it even sends its status line and headers
 *   twice. The gate (gate.h) runs this check on the first request of every
 *   connection and answers what it refuses with our JSON error; only a head
 *   this check accepts is handed to libmicrohttpd, which then never takes
 *   those paths. The check is stricter than libmicrohttpd on purpose, so
 *   everything it accepts libmicrohttpd accepts too.
 * - What it refuses: a request line that is not METHOD SP TARGET SP
 *   HTTP/d.d (400), a version other than HTTP/1.x (505), a request line
 *   over max_line bytes or a query of more than max_fields arguments (414),
 *   a head over max_head bytes or of more than max_fields fields (431), a
 *   header line without a token name and colon, folded lines, control bytes
 *   (NUL included) (400), a Content-Length that is not one decimal number
 *   (400; given twice, even equal: 400; over 2^64: 413), a Transfer-Encoding
 *   other than "chunked" (501) or beside a Content-Length (400).
 * - Pure: no I/O, no allocation; the caller peeks at the socket and calls
 *   srv_head_check again with the longer prefix as bytes arrive.
 */
#ifndef HPO_SERVER_HEAD_H
#define HPO_SERVER_HEAD_H

#include <stddef.h>

typedef struct srv_head_limits {
    size_t max_line;   /* request line, bytes (default 8192) */
    size_t max_head;   /* whole head with its blank line, bytes (default 16384) */
    size_t max_fields; /* header fields; also query arguments (default 100) */
} srv_head_limits;

typedef struct srv_head {
    size_t len;          /* bytes of the head, through its blank line */
    char method[24];     /* for logs; "" when the request line is unreadable */
    char target[160];    /* the request target, cut short for logs */
    /* 0: a good head; else the status to answer, with the error's code,
     * the header it names ("" for none) and a sentence */
    int status;
    const char *code;
    const char *field;
    char message[160];
} srv_head;

enum { SRV_HEAD_MORE = 0, SRV_HEAD_DONE = 1 };

/* Checks the n bytes received so far. SRV_HEAD_MORE: the head is not
 * complete yet and nothing seen so far is wrong (read more); SRV_HEAD_DONE:
 * *out says whether the head is good (status 0, len) or what to answer.
 * lim NULL or zero fields: the defaults. */
int srv_head_check(const char *buf, size_t n, const srv_head_limits *lim, srv_head *out);

#endif
