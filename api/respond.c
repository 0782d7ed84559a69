/* respond.c - JSON responses, the error model, body and query parsing. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

void api_reply_json(api_response *resp, int status, json_t *json) {
    char *text = json ? api_json_dumps(json, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(json);
    if (!text) {
        resp->status = 500;
        resp->content_type = "application/json";
        resp->body = hpo_strdup("{\"error\":{\"code\":\"internal_error\",\"message\":\"could not encode the response\",\"field\":\"\"}}");
        resp->body_len = strlen(resp->body);
        return;
    }
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = text;
    resp->body_len = strlen(text);
}

void api_reply_text(api_response *resp, int status, const char *content_type, const char *text,
                    size_t len) {
    resp->status = status;
    resp->content_type = content_type;
    resp->body = hpo_xmalloc(len + 1);
    memcpy(resp->body, text, len);
    resp->body[len] = '\0';
    resp->body_len = len;
}

/* src with every byte outside printable ASCII replaced by '?'. */
static void printable_copy(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    dst[i] = '\0';
}

json_t *api_json_string_lossy(const char *s) {
    json_t *j = json_string(s);
    if (j) return j;
    char shown[256];
    printable_copy(shown, sizeof shown, s);
    return json_string(shown);
}

void api_error_response(api_response *resp, int status, const char *code, const char *message,
                        const char *field) {
    if (!field) field = "";
    json_t *e = json_pack("{s:{s:s, s:s, s:s}}", "error", "code", code, "message", message,
                          "field", field);
    if (!e) { /* a message or field quoting client bytes that are not UTF-8 */
        char m[512], f[128];
        printable_copy(m, sizeof m, message);
        printable_copy(f, sizeof f, field);
        e = json_pack("{s:{s:s, s:s, s:s}}", "error", "code", code, "message", m, "field", f);
    }
    api_reply_json(resp, status, e);
}

int api_response_error(const api_response *resp, api_error_info *out) {
    if (!resp->body || resp->stream) return HPO_ENOTFOUND;
    json_t *doc = json_loadb(resp->body, resp->body_len, 0, NULL);
    json_t *e = json_object_get(doc, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *field = json_string_value(json_object_get(e, "field"));
    const char *message = json_string_value(json_object_get(e, "message"));
    if (!code || !message) {
        json_decref(doc);
        return HPO_ENOTFOUND;
    }
    snprintf(out->code, sizeof out->code, "%s", code);
    snprintf(out->field, sizeof out->field, "%s", field ? field : "");
    snprintf(out->message, sizeof out->message, "%s", message);
    json_decref(doc);
    return 0;
}

void api_fail(api_response *resp, int status, const char *code, const char *field,
              const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_error_response(resp, status, code, msg, field);
}

int api_status_for_rc(int rc) {
    switch (rc) {
    case HPO_EINVAL:
    case HPO_ESHAPE:
    case HPO_EFORMAT: return 400;
    case HPO_ENOTFOUND: return 404;
    case HPO_ECONFLICT:
    case HPO_ESTALE:
    case HPO_EEXHAUSTED: return 409;
    case HPO_ETOOLARGE: return 413;
    case HPO_EUNSUPPORTED: return 501;
    case HPO_ENOSPACE: return 507; /* Insufficient Storage: nothing was stored, retry later */
    case HPO_EFS: return 500;      /* our file system failed (jobs retry it; a request answers it) */
    default: return 500;
    }
}

void api_fail_rc(api_response *resp, int rc, const hpo_error *err) {
    int status = api_status_for_rc(rc);
    const char *message = err && err->message[0] ? err->message : hpo_strerror(rc);
    char why[320];
    if (!(err && err->message[0]) && (rc == HPO_ESTORAGE || rc == HPO_ENOSPACE) && sto_error_reason()[0]) {
        snprintf(why, sizeof why, "%.80s (%.230s)", message, sto_error_reason()); /* the database's words */
        message = why;
    }
    if (status >= 500) HPO_ERROR("request failed: %s (%s)", message, hpo_strerror(rc));
    api_error_response(resp, status, hpo_errname(rc), message, err ? err->field : "");
}

void api_fail_lookup(api_response *resp, int rc, const char *what, int64_t id) {
    hpo_error err;
    hpo_fail(&err, rc, "id", "%s %lld does not exist", what, (long long)id);
    api_fail_rc(resp, rc, rc == HPO_ENOTFOUND ? &err : NULL);
}

const char *api_unknown_key(const json_t *obj, const char *const *keys, size_t n) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        size_t i = 0;
        while (i < n && strcmp(key, keys[i]) != 0) i++;
        if (i == n) return key;
    }
    return NULL;
}

int api_check_keys(const json_t *obj, const char *const *keys, size_t n, api_response *resp) {
    const char *key = api_unknown_key(obj, keys, n);
    if (!key) return 0;
    api_fail(resp, 400, "invalid_argument", key, "unknown key \"%.64s\"", key);
    return -1;
}

int api_only_keys(const json_t *obj, const char *const *keys, size_t n, const char *field, hpo_error *err) {
    const char *key = api_unknown_key(obj, keys, n);
    return key ? hpo_fail(err, HPO_EINVAL, field, "unknown key \"%.64s\" in %s", key, field) : 0;
}

json_t *api_body_object(const api_request *req, api_response *resp) {
    if (req->body_len == 0) {
        api_fail(resp, 400, "invalid_json", "", "the request needs a JSON object body");
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        api_fail(resp, 400, "invalid_json", "", "invalid JSON at line %d, column %d: %s",
                 jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        api_fail(resp, 400, "invalid_json", "", "the body must be a JSON object");
        return NULL;
    }
    return j;
}

int api_body_empty(const api_request *req, api_response *resp) {
    if (req->body_len == 0) return 0;
    json_t *body = api_body_object(req, resp);
    if (!body) return -1;
    int bad = api_check_keys(body, NULL, 0, resp);
    json_decref(body);
    return bad;
}

int api_parse_decimal(const char *text, int64_t *out) {
    const char *digits = text[0] == '-' ? text + 1 : text;
    if (*digits < '0' || *digits > '9') return -1; /* strtoll would skip spaces and take a '+' */
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    if (errno || *end) return -1;
    *out = x;
    return 0;
}

int api_query_int(const api_request *req, api_response *resp, const char *key, int64_t def,
                  int64_t lo, int64_t hi, int64_t *out) {
    const char *v = req->query ? req->query(req->query_arg, key) : NULL;
    if (!v) {
        *out = def;
        return 0;
    }
    int64_t x = 0;
    if (api_parse_decimal(v, &x) || x < lo || x > hi) {
        api_fail(resp, 400, "invalid_argument", key,
                 "query argument %s must be an integer in [%lld, %lld]", key, (long long)lo,
                 (long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

json_t *api_json_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }
