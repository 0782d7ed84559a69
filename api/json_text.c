/* json_text.c - api_json_dumps: jansson's text with every real in its
 * shortest round-trip form (common/json_text.h), for every answer and event
 * text hpod sends, so the dashboard shows no noise. */
#include "api_internal.h"
#include "json_text.h"

char *api_json_dumps(const json_t *json, size_t flags) {
    return hpo_json_text_shortest(json_dumps(json, flags));
}
