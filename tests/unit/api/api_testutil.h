/*
 * api_testutil.h - what the api's unit tests share: a request handled
 * in-process by api_handle, as the HTTP layer would hand it over, and a
 * study created through it.
 *
 * Design notes
 * - Header-only (static inline), as tests/unit/storage/sto_testutil.h: each
 *   test is one executable.
 * - The body is parsed when the response says it is JSON; a streamed body
 *   (an event stream) is released unread unless the caller keeps the
 *   response.
 * - Uses cmocka's assertions: include it after <cmocka.h>.
 */
#ifndef HPO_TESTS_API_TESTUTIL_H
#define HPO_TESTS_API_TESTUTIL_H

#include <string.h>

#include "api_internal.h"

/* Calls method path with body (may be NULL) on ctx: *status, and the parsed
 * JSON body (a new reference) or NULL. With keep, the response is left
 * there for the caller to read and clear (api_response_clear). */
static inline json_t *api_test_call_keep(api_ctx *ctx, const char *method, const char *path, const char *body,
                                         int *status, api_response *keep) {
    api_request req = {.method = method, .path = path, .body = body, .body_len = body ? strlen(body) : 0};
    api_response resp;
    api_handle(ctx, &req, &resp);
    *status = resp.status;
    json_t *j = resp.body_len && resp.content_type && strstr(resp.content_type, "json")
                    ? json_loadb(resp.body, resp.body_len, 0, NULL)
                    : NULL;
    if (keep) {
        *keep = resp;
        return j;
    }
    if (resp.stream_free) resp.stream_free(resp.stream_arg);
    api_response_clear(&resp);
    return j;
}

static inline json_t *api_test_call(api_ctx *ctx, const char *method, const char *path, const char *body,
                                    int *status) {
    return api_test_call_keep(ctx, method, path, body, status, NULL);
}

/* POSTs the study definition body, asserts 201 and returns the new id. */
static inline int64_t api_test_create_study(api_ctx *ctx, const char *body) {
    int status;
    json_t *j = api_test_call(ctx, "POST", "/api/v1/studies", body, &status);
    assert_int_equal(status, 201);
    int64_t id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    return id;
}

#endif
