/* request.c - a request's body on its way to the api (see request.h). */
#include "request.h"

#include <microhttpd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A part of the multipart body, as libmicrohttpd's post processor cuts it. */
static enum MHD_Result on_upload_piece(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                       const char *content_type, const char *transfer_encoding, const char *data,
                                       uint64_t off, size_t size) {
    srv_request *r = cls;
    return api_upload_part(r->upload, key, filename, data, off, size) == 0 ? MHD_YES : MHD_NO;
}

static const char *query_arg(void *arg, const char *key) {
    return MHD_lookup_connection_value((struct MHD_Connection *)arg, MHD_GET_ARGUMENT_KIND, key);
}

int srv_request_upload_begin(srv_request *r, api_ctx *api, struct MHD_Connection *c, api_response *resp) {
    if (api_upload_begin(api, &r->upload, resp)) return -1;
    r->pp = MHD_create_post_processor(c, 64 * 1024, on_upload_piece, r);
    if (r->pp) return 0;
    api_upload_abort(r->upload);
    r->upload = NULL;
    api_error_response(resp, 400, "invalid_argument", "an upload must be a multipart/form-data body", "");
    return -1;
}

void srv_request_upload_piece(srv_request *r, const char *data, size_t n) {
    r->len += n;
    /* after a refused piece the api has failed the upload; the rest is
     * read and dropped so the client still gets the answer */
    MHD_post_process(r->pp, data, n);
}

void srv_request_upload_finish(srv_request *r, api_ctx *api, api_response *resp) {
    MHD_destroy_post_processor(r->pp);
    r->pp = NULL;
    api_upload *u = r->upload;
    r->upload = NULL;
    api_upload_finish(api, u, resp);
}

void srv_request_append(srv_request *r, const char *data, size_t n, size_t max) {
    if (r->too_large || r->len + n > max) {
        r->too_large = 1;
        r->dropped += n;
        free(r->body);
        r->body = NULL;
        r->len = r->cap = 0;
        return;
    }
    if (r->len + n > r->cap) {
        r->cap = r->len + n > 2 * r->cap ? r->len + n : 2 * r->cap;
        r->body = hpo_xrealloc(r->body, r->cap);
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
}

void srv_request_api(srv_request *r, struct MHD_Connection *c, const char *method, const char *url,
                     api_request *out) {
    *out = (api_request){
        .method = method,
        .path = url,
        .query = query_arg,
        .query_arg = c,
        .body = r->body,
        .body_len = r->len,
        .last_event_id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID"),
    };
}

void srv_request_clear(srv_request *r) {
    if (r->pp) MHD_destroy_post_processor(r->pp);
    if (r->upload) api_upload_abort(r->upload); /* the client went away */
    free(r->body);
    memset(r, 0, sizeof *r);
}
