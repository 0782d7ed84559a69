/* user_attrs.c - the user's attributes and notes of studies and trials
 * (Optuna's set_user_attr, Optuna Dashboard's notes): what a client may
 * send (checked here, errors naming "user_attrs" or "note"), the merge (a
 * key set to null is deleted, any other value replaces the stored one), and
 * PATCH /api/v1/studies/{id} and /api/v1/trials/{id}.
 *
 * The merge runs inside storage's transaction (sto_attrs_fn), so a
 * read-merge-write loses no concurrent change, and needs neither the
 * study's lock nor its tuner state (an old embedded study whose dataset is
 * gone still takes a note). Each change stores a study_updated or
 * trial_updated event in its transaction (sto_*_annotate) naming the
 * fields it changed. */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

/* How deep v nests (a number or string: 0), counting no further than
 * limit + 1. */
static int depth_of(const json_t *v, int limit) {
    if (limit < 0 || (!json_is_object(v) && !json_is_array(v))) return 0;
    int most = 0;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && most <= limit; i++) {
            int d = depth_of(json_array_get(v, i), limit - 1);
            if (d > most) most = d;
        }
    } else {
        const char *k;
        const json_t *e;
        json_object_foreach((json_t *)v, k, e) {
            int d = depth_of(e, limit - 1);
            if (d > most) most = d;
            if (most > limit) break;
        }
    }
    return most + 1;
}

int api_attrs_check(const json_t *patch, hpo_error *err) {
    if (!json_is_object(patch))
        return hpo_fail(err, HPO_EINVAL, "user_attrs", "user_attrs must be a JSON object of user values");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)patch, key, v) {
        size_t n = strlen(key);
        if (n == 0 || n > API_ATTR_KEY_MAX)
            return hpo_fail(err, HPO_EINVAL, "user_attrs",
                            "a user_attrs key must have 1 to %d bytes (\"%.32s%s\" has %zu)", API_ATTR_KEY_MAX, key,
                            n > 32 ? "..." : "", n);
        if (depth_of(v, API_ATTR_MAX_DEPTH) > API_ATTR_MAX_DEPTH) {
            char f[64];
            snprintf(f, sizeof f, "user_attrs.%.40s", key);
            return hpo_fail(err, HPO_EINVAL, f, "%s nests arrays and objects deeper than %d levels", f,
                            API_ATTR_MAX_DEPTH);
        }
    }
    return 0;
}

int api_attrs_merge(const char *stored, const json_t *patch, char **out, hpo_error *err) {
    int rc = api_attrs_check(patch, err);
    if (rc) return rc;
    json_t *obj = stored ? json_loads(stored, 0, NULL) : NULL;
    if (!json_is_object(obj)) { /* none yet (or unreadable: a bug; start over) */
        json_decref(obj);
        obj = json_object();
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)patch, key, v) {
        if (json_is_null(v))
            json_object_del(obj, key);
        else
            json_object_set(obj, key, v);
    }
    char *text = api_json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!text) return hpo_fail(err, HPO_ENOMEM, "user_attrs", "user_attrs cannot be encoded");
    size_t n = strlen(text);
    if (n > API_ATTRS_MAX_BYTES) {
        free(text);
        return hpo_fail(err, HPO_ETOOLARGE, "user_attrs",
                        "user_attrs would be %zu bytes as JSON, over the limit of %d (64 KiB)", n,
                        API_ATTRS_MAX_BYTES);
    }
    *out = text;
    return 0;
}

int api_note_check(const json_t *note, const char **out, hpo_error *err) {
    if (json_is_null(note)) {
        *out = "";
        return 0;
    }
    if (!json_is_string(note)) return hpo_fail(err, HPO_EINVAL, "note", "note must be a string (or null to clear it)");
    /* jansson has checked the UTF-8 and refused NUL (\u0000) */
    if (json_string_length(note) > API_NOTE_MAX_BYTES)
        return hpo_fail(err, HPO_ETOOLARGE, "note", "note has %zu bytes, over the limit of %d (64 KiB)",
                        json_string_length(note), API_NOTE_MAX_BYTES);
    *out = json_string_value(note);
    return 0;
}

/* The "fields" array of an update event. */
static json_t *changed_fields(const json_t *attrs, const char *note) {
    json_t *f = json_array();
    if (attrs) json_array_append_new(f, json_string("user_attrs"));
    if (note) json_array_append_new(f, json_string("note"));
    return f;
}

/* The sto_attrs_fn of a patch: api_attrs_merge inside the transaction. */
typedef struct merge_arg {
    const json_t *patch;
    hpo_error *err;
} merge_arg;

static int merge_stored(void *arg, const char *stored, char **out) {
    merge_arg *m = arg;
    return api_attrs_merge(stored, m->patch, out, m->err);
}

/* Stores attrs (merged; may be NULL) and note (NULL keeps it) of the study
 * `id` (trial NULL) or of trial t, with the event; nothing when both are
 * NULL. Errors name the field. */
static int annotate(api_ctx *ctx, int64_t id, const sto_trial *t, const json_t *attrs, const char *note,
                    hpo_error *err) {
    if (!attrs && !note) return 0;
    merge_arg m = {attrs, err};
    json_t *data = t ? json_pack("{s:I, s:I, s:o}", "trial_id", (json_int_t)t->id, "number", (json_int_t)t->number,
                                 "fields", changed_fields(attrs, note))
                     : json_pack("{s:o}", "fields", changed_fields(attrs, note));
    char *text = api_event_text(data);
    sto_event_in ev = {t ? "trial_updated" : "study_updated", text};
    sto_attrs_fn merge = attrs ? merge_stored : NULL;
    int rc = t ? sto_trial_annotate(ctx->db, t->id, merge, &m, note, &ev) : sto_study_annotate(ctx->db, id, merge, &m, note, &ev);
    free(text);
    if (rc && !err->message[0]) /* not the merge's own error */
        hpo_fail(err, rc, rc == HPO_ENOTFOUND ? "id" : "", "%s %lld: %s", t ? "trial" : "study",
                 (long long)(t ? t->id : id), rc == HPO_ENOTFOUND ? "does not exist" : hpo_strerror(rc));
    return rc;
}

int api_trial_annotate(api_ctx *ctx, const sto_trial *t, const json_t *attrs, const char *note, hpo_error *err) {
    return annotate(ctx, t->id, t, attrs, note, err);
}

/* The body of a PATCH: user_attrs and note, checked (note: NULL when absent). */
static int patch_body(const json_t *body, const json_t **attrs, const char **note, api_response *resp) {
    static const char *keys[] = {"user_attrs", "note"};
    if (api_check_keys(body, keys, HPO_ARRAY_LEN(keys), resp)) return -1;
    hpo_error err = {{0}, {0}};
    *attrs = json_object_get(body, "user_attrs");
    const json_t *jnote = json_object_get(body, "note");
    *note = NULL;
    int rc = *attrs ? api_attrs_check(*attrs, &err) : 0;
    if (rc == 0 && jnote) rc = api_note_check(jnote, note, &err);
    if (rc) api_fail_rc(resp, rc, &err);
    return rc ? -1 : 0;
}

/* PATCH of a study (trial 0) or a trial; answers as GET does. */
static void patch(api_ctx *ctx, const api_request *req, int64_t id, int trial, api_response *resp) {
    const char *what = trial ? "trial" : "study";
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    const json_t *attrs;
    const char *note;
    hpo_error err = {{0}, {0}};
    sto_trial t;
    sto_study s;
    if (patch_body(body, &attrs, &note, resp)) goto out;
    /* a trial's event names its number: read it first (it never changes) */
    int rc = trial ? sto_trial_get(ctx->db, id, &t) : 0;
    if (rc) {
        api_fail_lookup(resp, rc, what, id);
        goto out;
    }
    rc = annotate(ctx, id, trial ? &t : NULL, attrs, note, &err);
    int64_t study_id = trial ? t.study_id : id;
    if (trial) sto_trial_clear(&t);
    if (rc) {
        api_fail_rc(resp, rc, &err);
        goto out;
    }
    if (attrs || note) api_events_wake_study(ctx, study_id);
    if (trial && (rc = sto_trial_get(ctx->db, id, &t)) == 0) {
        api_reply_json(resp, 200, api_trial_json(&t, 1, ctx->db));
        sto_trial_clear(&t);
    } else if (!trial && (rc = sto_study_get(ctx->db, id, &s)) == 0) {
        api_reply_json(resp, 200, api_study_json(ctx, &s, 1));
        sto_study_clear(&s);
    } else {
        api_fail_lookup(resp, rc, what, id);
    }
out:
    json_decref(body);
}

void api_h_study_patch(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    patch(ctx, req, id, 0, resp);
}

void api_h_trial_patch(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    patch(ctx, req, id, 1, resp);
}
