/*
 * api_testutil.h - the one helper the api's unit tests share: a request
 * handled in-process by api_handle, as the HTTP layer would hand it over.
 *
 * Design notes
 * - Header-only (static inline), as tests/unit/storage/sto_testutil.h: each
 *   test is one executable.
 * - The body is parsed when the response says it is JSON; a streamed body
 *   (an event stream) is released unread.
 */
#ifndef HPO_TESTS_API_TESTUTIL_H
#define HPO_TESTS_API_TESTUTIL_H

#include <string.h>

#include "api_internal.h"

/* Calls method path with body (may be NULL) on ctx: *status, and the parsed
 * JSON body (a new reference) or NULL. */
static inline json_t *api_test_call(api_ctx *ctx, const char *method, const char *path, const char *body,
                                    int *status) {
    api_request req = {.method = method, .path = path, .body = body, .body_len = body ? strlen(body) : 0};
    api_response resp;
    api_handle(ctx, &req, &resp);
    *status = resp.status;
    json_t *j = resp.body_len && resp.content_type && strstr(resp.content_type, "json")
                    ? json_loadb(resp.body, resp.body_len, 0, NULL)
                    : NULL;
    if (resp.stream_free) resp.stream_free(resp.stream_arg);
    api_response_clear(&resp);
    return j;
}

#endif
