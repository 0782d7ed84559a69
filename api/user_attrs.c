/* user_attrs.c - the user's attributes and notes of studies and trials
 * (Optuna's set_user_attr, Optuna Dashboard's notes): what a client may
 * send (checked here, errors naming "user_attrs" or "note"), the merge (a
 * key set to null is deleted, any other value replaces the stored one), and
 * PATCH /api/v1/studies/{id} and /api/v1/trials/{id}.
 *
 * Every writer of a study's or trial's attributes holds the study's lock
 * (api_study: these handlers, and tell and report, which may carry
 * user_attrs), so a read-merge-write loses no concurrent change. Each change
 * stores a study_updated or trial_updated event in its transaction
 * (sto_*_annotate) naming the fields it changed. */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

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

int api_trial_annotate(api_ctx *ctx, const sto_trial *t, const json_t *attrs, const char *note, hpo_error *err) {
    if (!attrs && !note) return 0;
    char *merged = NULL;
    int rc = attrs ? api_attrs_merge(t->user_attrs, attrs, &merged, err) : 0;
    if (rc) return rc;
    char *data = api_event_text(json_pack("{s:I, s:I, s:o}", "trial_id", (json_int_t)t->id, "number",
                                          (json_int_t)t->number, "fields", changed_fields(attrs, note)));
    sto_event_in ev = {"trial_updated", data};
    rc = sto_trial_annotate(ctx->db, t->id, merged, note, &ev);
    free(data);
    free(merged);
    if (rc) hpo_fail(err, rc, rc == HPO_ENOTFOUND ? "id" : "", "trial %lld: %s", (long long)t->id, hpo_strerror(rc));
    return rc;
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

/* Under the study's lock: reads the stored study (trial 0) or trial,
 * merges and stores with its event. */
static int annotate_locked(api_ctx *ctx, int64_t id, int trial, const json_t *attrs, const char *note,
                           hpo_error *err) {
    if (trial) {
        sto_trial t;
        int rc = sto_trial_get(ctx->db, id, &t);
        if (rc) return hpo_fail(err, rc, "id", "trial %lld does not exist", (long long)id);
        rc = api_trial_annotate(ctx, &t, attrs, note, err);
        sto_trial_clear(&t);
        return rc;
    }
    sto_study s;
    int rc = sto_study_get(ctx->db, id, &s);
    if (rc) return hpo_fail(err, rc, "id", "study %lld does not exist", (long long)id);
    char *merged = NULL;
    rc = attrs ? api_attrs_merge(s.user_attrs, attrs, &merged, err) : 0;
    sto_study_clear(&s);
    if (rc) return rc;
    char *data = api_event_text(json_pack("{s:o}", "fields", changed_fields(attrs, note)));
    sto_event_in ev = {"study_updated", data};
    rc = sto_study_annotate(ctx->db, id, merged, note, &ev);
    free(data);
    free(merged);
    if (rc) hpo_fail(err, rc, rc == HPO_ENOTFOUND ? "id" : "", "study %lld: %s", (long long)id, hpo_strerror(rc));
    return rc;
}

/* The study (trial 0) or trial as GET answers it; NULL if it is gone. */
static json_t *current_json(api_ctx *ctx, int64_t id, int trial) {
    json_t *j = NULL;
    if (trial) {
        sto_trial t;
        if (sto_trial_get(ctx->db, id, &t) == 0) {
            j = api_trial_json(&t, 1, ctx->db);
            sto_trial_clear(&t);
        }
    } else {
        sto_study s;
        if (sto_study_get(ctx->db, id, &s) == 0) {
            j = api_study_json(ctx, &s, 1);
            sto_study_clear(&s);
        }
    }
    return j;
}

/* PATCH of a study (trial 0) or a trial. The answer is built after the
 * study's lock is released (api_study_json takes the cache's mutex, which
 * comes first in the lock order). */
static void patch(api_ctx *ctx, const api_request *req, int64_t id, int trial, api_response *resp) {
    const char *what = trial ? "trial" : "study";
    json_t *body = api_body_object(req, resp);
    if (!body) return;
    const json_t *attrs;
    const char *note;
    api_study *st = NULL;
    int64_t study_id = id;
    hpo_error err = {{0}, {0}};
    if (patch_body(body, &attrs, &note, resp)) goto out;
    int rc = 0;
    if (trial) {
        sto_trial t;
        rc = sto_trial_get(ctx->db, id, &t);
        if (rc == 0) study_id = t.study_id;
        if (rc == 0) sto_trial_clear(&t);
    }
    if (rc == 0) rc = api_study_acquire(ctx, study_id, &st);
    if (rc) {
        api_fail_lookup(resp, rc, what, id);
        goto out;
    }
    pthread_mutex_lock(&st->lock);
    rc = attrs || note ? annotate_locked(ctx, id, trial, attrs, note, &err) : 0;
    pthread_mutex_unlock(&st->lock);
    if (rc) {
        api_fail_rc(resp, rc, &err);
        goto out;
    }
    if (attrs || note) api_events_wake(ctx);
    json_t *answer = current_json(ctx, id, trial);
    if (answer)
        api_reply_json(resp, 200, answer);
    else
        api_fail_lookup(resp, HPO_ENOTFOUND, what, id);
out:
    if (st) api_study_release(ctx, st);
    json_decref(body);
}

void api_h_study_patch(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    patch(ctx, req, id, 0, resp);
}

void api_h_trial_patch(api_ctx *ctx, const api_request *req, int64_t id, api_response *resp) {
    patch(ctx, req, id, 1, resp);
}
