/* router.c - the route table and api_handle: method + path -> handler
 * (HEAD goes to the GET route; the server drops the body). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_internal.h"

static const struct {
    api_route route;
    api_handler handler;
} table[] = {
    {{"GET", "/healthz", "healthz"}, api_h_healthz},
    {{"GET", "/metrics", "metrics"}, api_h_metrics},
    {{"GET", "/api/v1/openapi.yaml", "openapi"}, api_h_openapi},
    {{"POST", "/api/v1/studies", "studies.create"}, api_h_study_create},
    {{"GET", "/api/v1/studies", "studies.list"}, api_h_study_list},
    {{"GET", "/api/v1/studies/{id}", "studies.get"}, api_h_study_get},
    {{"DELETE", "/api/v1/studies/{id}", "studies.delete"}, api_h_study_delete},
    {{"PATCH", "/api/v1/studies/{id}", "studies.update"}, api_h_study_patch},
    {{"GET", "/api/v1/studies/{id}/trials", "studies.trials"}, api_h_study_trials},
    {{"GET", "/api/v1/studies/{id}/best", "studies.best"}, api_h_study_best},
    {{"POST", "/api/v1/studies/{id}/ask", "studies.ask"}, api_h_study_ask},
    {{"POST", "/api/v1/studies/{id}/enqueue", "studies.enqueue"}, api_h_study_enqueue},
    {{"POST", "/api/v1/studies/{id}/trials", "studies.add_trial"}, api_h_study_add_trial},
    {{"GET", "/api/v1/studies/{id}/export", "studies.export"}, api_h_study_export},
    {{"POST", "/api/v1/studies/import", "studies.import"}, api_h_study_import},
    {{"POST", "/api/v1/studies/{id}/copy", "studies.copy"}, api_h_study_copy},
    {{"POST", "/api/v1/studies/{id}/pause", "studies.pause"}, api_h_study_pause},
    {{"POST", "/api/v1/studies/{id}/resume", "studies.resume"}, api_h_study_resume},
    {{"POST", "/api/v1/studies/{id}/cancel", "studies.cancel"}, api_h_study_cancel},
    {{"GET", "/api/v1/studies/{id}/events", "studies.events"}, api_h_study_events},
    {{"POST", "/api/v1/studies/{id}/refits", "studies.refits.create"}, api_h_study_refits_create},
    {{"GET", "/api/v1/studies/{id}/refits", "studies.refits.list"}, api_h_study_refits_list},
    {{"GET", "/api/v1/studies/{id}/models", "studies.models"}, api_h_study_models_list},
    {{"POST", "/api/v1/studies/{id}/ensembles", "studies.ensembles.create"}, api_h_study_ensembles_create},
    {{"GET", "/api/v1/studies/{id}/ensembles", "studies.ensembles.list"}, api_h_study_ensembles_list},
    {{"GET", "/api/v1/trials/{id}", "trials.get"}, api_h_trial_get},
    {{"PATCH", "/api/v1/trials/{id}", "trials.update"}, api_h_trial_patch},
    {{"POST", "/api/v1/trials/{id}/model", "trials.model"}, api_h_trial_model_create},
    {{"GET", "/api/v1/models/{id}", "models.get"}, api_h_model_get},
    {{"GET", "/api/v1/models/{id}/weights", "models.weights"}, api_h_model_weights},
    {{"POST", "/api/v1/models/{id}/predict", "models.predict"}, api_h_model_predict},
    {{"POST", "/api/v1/trials/{id}/report", "trials.report"}, api_h_trial_report},
    {{"POST", "/api/v1/trials/{id}/tell", "trials.tell"}, api_h_trial_tell},
    {{"POST", "/api/v1/datasets", "datasets.create"}, api_h_dataset_create},
    {{"GET", "/api/v1/datasets", "datasets.list"}, api_h_dataset_list},
    {{"GET", "/api/v1/datasets/{id}", "datasets.get"}, api_h_dataset_get},
    {{"DELETE", "/api/v1/datasets/{id}", "datasets.delete"}, api_h_dataset_delete},
    {{"GET", "/api/v1/studies/{id}/importance", "studies.importance"}, api_h_study_importance},
    {{"GET", "/api/v1/nodes", "nodes.list"}, api_h_nodes_list},
    {{"GET", "/", "static.index"}, api_h_static_index},
    {{"GET", "/assets/{file}", "static.asset"}, api_h_static_asset},
};

size_t api_route_count(void) { return HPO_ARRAY_LEN(table); }

const api_route *api_route_at(size_t i) { return i < HPO_ARRAY_LEN(table) ? &table[i].route : NULL; }

/* Matches path against pattern; {id} matches a positive decimal integer
 * (at most 18 digits) stored in *id; {file} one file name of [A-Za-z0-9._-]
 * not starting with '.' (the handler reads it from the path). */
static int match(const char *pattern, const char *path, int64_t *id) {
    const char *p = pattern, *s = path;
    while (*p && *s) {
        if (strncmp(p, "{id}", 4) == 0) {
            if (*s < '0' || *s > '9') return 0;
            int64_t v = 0;
            int digits = 0;
            while (*s >= '0' && *s <= '9') {
                if (++digits > 18) return 0;
                v = v * 10 + (*s++ - '0');
            }
            *id = v;
            p += 4;
            continue;
        }
        if (strncmp(p, "{file}", 6) == 0) {
            if (*s == '.') return 0;
            const char *start = s;
            while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                   *s == '.' || *s == '_' || *s == '-')
                s++;
            if (s == start) return 0;
            p += 6;
            continue;
        }
        if (*p++ != *s++) return 0;
    }
    return *p == '\0' && *s == '\0';
}

/* HEAD is served by the GET route (the server sends no body). */
static const char *route_method(const char *method) { return strcmp(method, "HEAD") == 0 ? "GET" : method; }

const char *api_route_name(const char *method, const char *path) {
    method = route_method(method);
    for (size_t i = 0; i < HPO_ARRAY_LEN(table); i++) {
        int64_t id;
        if (strcmp(table[i].route.method, method) == 0 && match(table[i].route.pattern, path, &id))
            return table[i].route.name;
    }
    return "unmatched";
}

/* The methods of path's routes, as an Allow header lists them ("GET, HEAD,
 * DELETE"): HEAD wherever GET is. */
static void allowed_methods(const char *path, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < HPO_ARRAY_LEN(table); i++) {
        int64_t id;
        const char *m = table[i].route.method;
        if (!match(table[i].route.pattern, path, &id) || strstr(out, m)) continue;
        int n = snprintf(out + len, cap - len, "%s%s%s", len ? ", " : "", m, strcmp(m, "GET") == 0 ? ", HEAD" : "");
        if (n < 0 || (size_t)n >= cap - len) break;
        len += (size_t)n;
    }
}

void api_handle(api_ctx *ctx, const api_request *req, api_response *resp) {
    memset(resp, 0, sizeof *resp);
    sto_error_reason_clear(); /* a 5xx of this request tells its own */
    int path_known = 0;
    for (size_t i = 0; i < HPO_ARRAY_LEN(table); i++) {
        int64_t id = 0;
        if (!match(table[i].route.pattern, req->path, &id)) continue;
        path_known = 1;
        if (strcmp(table[i].route.method, route_method(req->method)) != 0) continue;
        resp->route = table[i].route.name;
        table[i].handler(ctx, req, id, resp);
        return;
    }
    resp->route = "unmatched";
    if (path_known) {
        api_fail(resp, 405, "method_not_allowed", "", "method %s is not allowed on %s",
                 req->method, req->path);
        allowed_methods(req->path, resp->allow, sizeof resp->allow);
    }
    else
        api_fail(resp, 404, "not_found", "", "no route for %s %s", req->method, req->path);
}

void api_response_clear(api_response *resp) {
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
    if (resp->has_file) close(resp->file_fd);
    resp->has_file = 0;
}
