/* json_diff.c - where two JSON values first differ, as a field path
 * (api_internal.h): how a get-or-create (POST /studies with load_if_exists)
 * names the field in which the posted definition differs from the stored
 * one. Object keys are visited in a's order, then b's keys missing from a;
 * array elements by index. */
#include <stdio.h>
#include <string.h>

#include "api_internal.h"

/* Appends ".key" (or "key" at the root) or "[i]" to the path at len;
 * returns the new length (cut to cap - 1). */
static size_t push_key(char *buf, size_t cap, size_t len, const char *key) {
    int n = snprintf(buf + len, cap - len, "%s%s", len ? "." : "", key);
    return n < 0 ? len : len + (size_t)n >= cap ? cap - 1 : len + (size_t)n;
}

static size_t push_index(char *buf, size_t cap, size_t len, size_t i) {
    int n = snprintf(buf + len, cap - len, "[%zu]", i);
    return n < 0 ? len : len + (size_t)n >= cap ? cap - 1 : len + (size_t)n;
}

static int differ(const json_t *a, const json_t *b, char *buf, size_t cap, size_t len) {
    buf[len] = '\0';
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) != json_number_value(b);
    if (json_typeof(a) != json_typeof(b)) return 1;
    if (json_is_object(a)) {
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)a, key, v) {
            size_t n = push_key(buf, cap, len, key);
            const json_t *w = json_object_get(b, key);
            if (!w || differ(v, w, buf, cap, n)) return 1;
        }
        json_object_foreach((json_t *)b, key, v) {
            if (!json_object_get(a, key)) {
                push_key(buf, cap, len, key);
                return 1;
            }
        }
        buf[len] = '\0';
        return 0;
    }
    if (json_is_array(a)) {
        size_t na = json_array_size(a), nb = json_array_size(b);
        for (size_t i = 0; i < na && i < nb; i++)
            if (differ(json_array_get(a, i), json_array_get(b, i), buf, cap, push_index(buf, cap, len, i))) return 1;
        if (na != nb) {
            push_index(buf, cap, len, na < nb ? na : nb);
            return 1;
        }
        buf[len] = '\0';
        return 0;
    }
    return !json_equal((json_t *)a, (json_t *)b); /* strings, true, false, null */
}

int api_json_first_diff(const json_t *a, const json_t *b, char *buf, size_t cap) {
    buf[0] = '\0'; /* cap >= 1 */
    if (!a || !b) return a != b;
    return differ(a, b, buf, cap, 0);
}
