/*
 * hpo.h - the few things every part of hpo shares: error codes, the error
 * detail that names a field, logging, and a monotonic/wall clock.
 *
 * Design notes
 * - One error type for the whole project: functions return 0 on success or a
 *   negative HPO_E* code; hpo_strerror() names it. Out-params are written only
 *   on success. Where a caller needs to tell a user *what* was wrong (a JSON
 *   field, a shape), the function also fills an hpo_error: a dotted field path
 *   ("space.lr.low") and a human sentence. The api layer maps the code to an
 *   HTTP status and the hpo_error to {"error": {"code","message","field"}}.
 * - Logging (log.c) is a single global level and one line per message on
 *   stderr, thread-safe (one fprintf per line), in one of two formats
 *   (hpod --log-format): text, "<UTC time> <LEVEL> <message> key=value ...",
 *   the message in quotes (escaped as a quoted value) when it holds '=' or
 *   starts with one, so that it never reads as fields; or JSON, one object
 *   per line {"ts","level","msg", then the fields}.
 *   Fields (hpo_log_fields) are named values a program can read back; the
 *   JSON is always valid (bytes that are not UTF-8 become U+FFFD) and a line
 *   is cut at HPO_LOG_LINE_MAX bytes, still valid.
 * - Nothing here allocates except hpo_strdup/hpo_xmalloc, which abort on
 *   out-of-memory: they are for small bookkeeping only. What a client can
 *   make large (a model's tensors, a dataset) is allocated with checks and
 *   fails with HPO_ENOMEM instead (engine/tensor.h, engine/data.h).
 */
#ifndef HPO_H
#define HPO_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define HPO_VERSION "0.1.0"

enum {
    HPO_OK = 0,
    HPO_ENOMEM = -1,      /* out of memory */
    HPO_EINVAL = -2,      /* invalid argument or input; hpo_error says which */
    HPO_ENOTFOUND = -3,   /* no such study, trial, dataset, ... */
    HPO_ECONFLICT = -4,   /* state does not allow it (tell twice, ...) */
    HPO_EIO = -5,         /* file or socket I/O failed */
    HPO_ESTORAGE = -6,    /* the database failed */
    HPO_ESHAPE = -7,      /* tensor shapes do not fit */
    HPO_EDIVERGED = -8,   /* training produced NaN/Inf */
    HPO_ETIMEOUT = -9,    /* a deadline passed */
    HPO_ECANCELLED = -10, /* stopped on request */
    HPO_EUNSUPPORTED = -11, /* valid but not available here (no GPU, ...) */
    HPO_EEXHAUSTED = -12, /* nothing left to suggest (grid done, budget used) */
    HPO_ETOOLARGE = -13,  /* over a size limit */
    HPO_EFORMAT = -14,    /* a file is malformed */
    HPO_EINTERNAL = -15,  /* a bug: should not happen */
    HPO_ENOSPACE = -16,   /* the disk is full (ENOSPC, EDQUOT, SQLITE_FULL): retry later */
    HPO_ESTALE = -17,     /* the caller's view is stale: another writer (hpod node) changed it first */
    HPO_EFS = -18,        /* the file system failed, not the file (EACCES, EROFS, EIO, ESTALE, ...): retry later */
};

const char *hpo_strerror(int rc);
/* A stable machine-readable name for an error code ("invalid_argument"). */
const char *hpo_errname(int rc);
/* The code of a file operation that failed with errno e: HPO_ENOSPACE for
 * a full disk (ENOSPC, EDQUOT); HPO_EFS for a fault of the file system or
 * its mount that can pass without anything else changing (permission
 * denied, read-only, an I/O error, a stale or lost network mount, a
 * timeout, too many open files); HPO_EIO for the rest (a missing path, a
 * name or file too long: waiting fixes none of those). */
int hpo_errno_rc(int e);

typedef struct hpo_error {
    char field[128];   /* dotted path of the offending input, "" if none */
    char message[384]; /* one sentence for a person */
} hpo_error;

/* Fill err (if not NULL) and return rc, so callers can `return hpo_fail(...)`. */
int hpo_fail(hpo_error *err, int rc, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Prefix err->field with "prefix." (or set it to prefix if empty). */
void hpo_error_prefix(hpo_error *err, const char *prefix);

/* ---- logging ---- */
enum { HPO_LOG_DEBUG = 0, HPO_LOG_INFO = 1, HPO_LOG_WARN = 2, HPO_LOG_ERROR = 3 };
extern int hpo_log_level;
int hpo_log_level_parse(const char *name); /* -1 if unknown */
enum { HPO_LOG_TEXT = 0, HPO_LOG_JSON = 1 };
extern int hpo_log_format; /* HPO_LOG_TEXT (default) or HPO_LOG_JSON; set once at start */
int hpo_log_format_parse(const char *name); /* "text" or "json"; -1 if unknown */
#define HPO_LOG_LINE_MAX 8192
/* A named value of a log line: a string (str != NULL) or a number. */
typedef struct hpo_log_field {
    const char *key; /* an identifier: [a-z_]+ */
    const char *str;
    double num;
} hpo_log_field;
static inline hpo_log_field hpo_log_str_(const char *key, const char *v) {
    return (hpo_log_field){key, v ? v : "", 0};
}
#define HPO_LOG_STR(k, v) hpo_log_str_((k), (v)) /* NULL: "" */
#define HPO_LOG_NUM(k, v) ((hpo_log_field){(k), NULL, (double)(v)})
void hpo_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line with n fields after its message. */
void hpo_log_fields(int level, const hpo_log_field *fields, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Formats one line into buf (cap >= 128) without its newline and returns its
 * length; what hpo_log_fields writes (for tests). */
size_t hpo_log_format_line(char *buf, size_t cap, int format, double now, int level,
                           const hpo_log_field *fields, size_t n, const char *msg);
#define HPO_DEBUG(...) do { if (hpo_log_level <= HPO_LOG_DEBUG) hpo_log(HPO_LOG_DEBUG, __VA_ARGS__); } while (0)
#define HPO_INFO(...) hpo_log(HPO_LOG_INFO, __VA_ARGS__)
#define HPO_WARN(...) hpo_log(HPO_LOG_WARN, __VA_ARGS__)
#define HPO_ERROR(...) hpo_log(HPO_LOG_ERROR, __VA_ARGS__)

/* ---- time ---- */
double hpo_now(void);       /* wall clock, seconds since the epoch */
double hpo_monotonic(void); /* monotonic seconds, for durations */
/* The time `seconds` from now on clock (CLOCK_REALTIME for a condition
 * variable of default attributes, CLOCK_MONOTONIC for one set to it): the
 * deadline of a pthread_cond_timedwait. */
struct timespec hpo_deadline(int clock, double seconds);

/* ---- memory that cannot fail ---- */
void *hpo_xmalloc(size_t n);
void *hpo_xcalloc(size_t n, size_t size);
void *hpo_xrealloc(void *p, size_t n);
char *hpo_strdup(const char *s); /* NULL stays NULL */

#define HPO_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
