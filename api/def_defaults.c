/* def_defaults.c - a study definition without the keys written at their
 * default (api_internal.h): how a get-or-create (POST /studies with
 * load_if_exists) tells that {"log": false} or {"n_startup_trials": 10}
 * posted again is the definition stored without them. The parsers decide
 * what a default is: a key goes when the space (or tuner) parsed without
 * it is the same as parsed with it. */
#include <string.h>

#include "api_internal.h"

/* The space parsed; NULL when it does not parse. */
static tun_space *parse_space(const json_t *space) {
    tun_space *s = NULL;
    hpo_error err;
    return tun_space_parse(space, &s, &err) == 0 ? s : NULL;
}

static int parse_tuner(const json_t *tuner, const tun_space *s, tun_config *cfg) {
    hpo_error err;
    return tun_config_parse(tuner, s, cfg, &err);
}

/* The keys of obj, as a new array of strings: a key put back after a trial
 * removal goes to the end of obj's order, so obj itself is not walked. */
static json_t *keys_of(const json_t *obj) {
    json_t *keys = json_array();
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) json_array_append_new(keys, json_string(key));
    return keys;
}

/* Removes obj[key] when same(ctx) still holds without it; else puts it back. */
static void drop_if_same(json_t *obj, const char *key, int (*same)(void *), void *ctx) {
    json_t *held = json_incref(json_object_get(obj, key));
    json_object_del(obj, key);
    if (!same(ctx)) json_object_set(obj, key, held);
    json_decref(held);
}

typedef struct space_check {
    const json_t *space;
    const tun_space *parsed;
} space_check;

static int same_space(void *p) {
    space_check *c = p;
    tun_space *without = parse_space(c->space);
    int same = without && tun_space_equal(c->parsed, without);
    tun_space_free(without);
    return same;
}

typedef struct tuner_check {
    const json_t *tuner;
    const tun_space *space;
    const tun_config *parsed;
} tuner_check;

static int same_tuner(void *p) {
    tuner_check *c = p;
    tun_config without;
    return parse_tuner(c->tuner, c->space, &without) == 0 && tun_config_same_search(c->parsed, &without, c->space);
}

/* Drops the keys of each parameter's spec that leave the space as parsed. */
static void drop_space_defaults(json_t *space, const tun_space *parsed) {
    space_check c = {space, parsed};
    const char *name;
    json_t *spec;
    json_object_foreach(space, name, spec) {
        if (!json_is_object(spec)) continue;
        json_t *keys = keys_of(spec);
        for (size_t k = 0; k < json_array_size(keys); k++) {
            const char *key = json_string_value(json_array_get(keys, k));
            if (strcmp(key, "type") != 0) drop_if_same(spec, key, same_space, &c);
        }
        json_decref(keys);
    }
}

/* Drops the keys of the tuner, and of its pruner, that leave the tuner as
 * parsed; not the keys other layers read. */
static void drop_tuner_defaults(json_t *tuner, const tun_space *s, const tun_config *parsed) {
    tuner_check c = {tuner, s, parsed};
    json_t *pruner = json_object_get(tuner, "pruner");
    if (json_is_object(pruner)) {
        json_t *keys = keys_of(pruner);
        for (size_t k = 0; k < json_array_size(keys); k++)
            drop_if_same(pruner, json_string_value(json_array_get(keys, k)), same_tuner, &c);
        json_decref(keys);
    }
    json_t *keys = keys_of(tuner);
    for (size_t k = 0; k < json_array_size(keys); k++) {
        const char *key = json_string_value(json_array_get(keys, k));
        if (!tun_config_key_read_elsewhere(key)) drop_if_same(tuner, key, same_tuner, &c);
    }
    json_decref(keys);
}

void api_def_drop_defaults(json_t *def) {
    json_t *space = json_object_get(def, "space"), *tuner = json_object_get(def, "tuner");
    tun_space *s = json_is_object(space) ? parse_space(space) : NULL;
    if (!s) return; /* an embedded study's template space: compared as written */
    drop_space_defaults(space, s);
    tun_config cfg;
    if (json_is_object(tuner) && parse_tuner(tuner, s, &cfg) == 0) drop_tuner_defaults(tuner, s, &cfg);
    tun_space_free(s);
}
