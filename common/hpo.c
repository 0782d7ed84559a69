/* hpo.c - error names, clocks and checked allocation (see hpo.h; logging is log.c). */
#define _POSIX_C_SOURCE 200809L
#include "hpo.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    int rc;
    const char *name;
    const char *text;
} errors[] = {
    {HPO_OK, "ok", "success"},
    {HPO_ENOMEM, "out_of_memory", "out of memory"},
    {HPO_EINVAL, "invalid_argument", "invalid argument"},
    {HPO_ENOTFOUND, "not_found", "not found"},
    {HPO_ECONFLICT, "conflict", "conflicts with the current state"},
    {HPO_EIO, "io_error", "input/output error"},
    {HPO_ESTORAGE, "storage_error", "storage error"},
    {HPO_ESHAPE, "shape_error", "tensor shapes do not fit"},
    {HPO_EDIVERGED, "diverged", "training diverged (NaN or Inf)"},
    {HPO_ETIMEOUT, "timeout", "timed out"},
    {HPO_ECANCELLED, "cancelled", "cancelled"},
    {HPO_EUNSUPPORTED, "unsupported", "not supported here"},
    {HPO_EEXHAUSTED, "exhausted", "search space or budget exhausted"},
    {HPO_ETOOLARGE, "too_large", "over a size limit"},
    {HPO_EFORMAT, "bad_format", "malformed file"},
    {HPO_EINTERNAL, "internal_error", "internal error"},
    {HPO_ENOSPACE, "insufficient_storage", "no space left on the data disk"},
    {HPO_ESTALE, "stale", "changed meanwhile by another writer"},
    {HPO_EFS, "file_system_error", "the file system failed (permissions, read-only, I/O error)"},
};

const char *hpo_strerror(int rc) {
    for (size_t i = 0; i < HPO_ARRAY_LEN(errors); i++)
        if (errors[i].rc == rc) return errors[i].text;
    return "unknown error";
}

const char *hpo_errname(int rc) {
    for (size_t i = 0; i < HPO_ARRAY_LEN(errors); i++)
        if (errors[i].rc == rc) return errors[i].name;
    return "unknown_error";
}

int hpo_errno_rc(int e) {
    switch (e) {
    case ENOSPC:
    case EDQUOT: return HPO_ENOSPACE;
    case EACCES:
    case EPERM:
    case EROFS:
    case EIO:
    case ESTALE:
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EBUSY:
    case EINTR:
    case ETXTBSY:
    case EMFILE:
    case ENFILE:
    case ENOLCK:
    case ENODEV:
    case ENXIO:
    case ETIMEDOUT:
    case ENOTCONN:
    case ECONNRESET:
    case ECONNABORTED:
    case ENETDOWN:
    case ENETUNREACH:
    case ENETRESET:
#ifdef EHOSTDOWN
    case EHOSTDOWN:
#endif
    case EHOSTUNREACH:
#ifdef ENOLINK
    case ENOLINK:
#endif
#ifdef EREMOTEIO
    case EREMOTEIO:
#endif
#ifdef ECOMM
    case ECOMM:
#endif
#ifdef ENOMEDIUM
    case ENOMEDIUM:
#endif
        return HPO_EFS;
    default: return HPO_EIO;
    }
}

int hpo_fail(hpo_error *err, int rc, const char *field, const char *fmt, ...) {
    if (!err) return rc;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return rc;
}

void hpo_error_prefix(hpo_error *err, const char *prefix) {
    if (!err || !prefix || !*prefix) return;
    char tmp[2 * sizeof err->field + 2];
    if (err->field[0])
        snprintf(tmp, sizeof tmp, "%s.%s", prefix, err->field);
    else
        snprintf(tmp, sizeof tmp, "%s", prefix);
    snprintf(err->field, sizeof err->field, "%.*s", (int)sizeof err->field - 1, tmp);
}

double hpo_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct timespec hpo_deadline(int clock, double seconds) {
    struct timespec ts;
    clock_gettime((clockid_t)clock, &ts);
    if (!(seconds > 0)) return ts; /* now, for zero, negative or NaN */
    double whole = (double)(time_t)seconds;
    ts.tv_sec += (time_t)seconds;
    ts.tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return ts;
}

double hpo_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *check(void *p) {
    if (!p) {
        fputs("hpo: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *hpo_xmalloc(size_t n) { return check(malloc(n ? n : 1)); }
void *hpo_xcalloc(size_t n, size_t size) { return check(calloc(n ? n : 1, size ? size : 1)); }
void *hpo_xrealloc(void *p, size_t n) { return check(realloc(p, n ? n : 1)); }
char *hpo_strdup(const char *s) { return s ? check(strdup(s)) : NULL; }
