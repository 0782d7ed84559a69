/* test_annotate.c - storage, schema v6: user_attrs and notes of studies and
 * trials (the merge callback sees the stored text and its answer is
 * stored, its error stores nothing, NULL keeps a value, the study's
 * updated moves, the event goes in the same transaction, unknown ids are
 * HPO_ENOTFOUND and change nothing), and get-or-create by name (the oldest study of the
 * name, nothing written when it exists, one study when 8 threads race). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "db_internal.h"
#include "storage.h"
#include "storage/sto_testutil.h"

static int64_t count(sto_db *db, const char *sql) { return sto_test_int(db, sql); }

/* sto_attrs_fn: replaces the stored text with arg, noting what was stored. */
static char seen[256];
static int set_to(void *arg, const char *stored, char **out) {
    snprintf(seen, sizeof seen, "%s", stored);
    *out = strdup(arg);
    return 0;
}

static int refuse(void *arg, const char *stored, char **out) {
    (void)arg, (void)stored, (void)out;
    return HPO_ETOOLARGE;
}

static void test_study_annotate(void **state) {
    (void)state;
    sto_db *db;
    assert_int_equal(sto_test_open(&db), 0);
    int64_t id, other;
    assert_int_equal(sto_study_create(db, "a", "{}", &id), 0);
    assert_int_equal(sto_study_create(db, "b", "{}", &other), 0);
    sto_study s;
    assert_int_equal(sto_study_get(db, id, &s), 0);
    assert_string_equal(s.user_attrs, "{}"); /* the defaults */
    assert_string_equal(s.note, "");
    sto_study_clear(&s);

    sto_test_exec(db, "UPDATE studies SET updated = 1");
    sto_event_in ev = {"study_updated", "{\"fields\":[\"user_attrs\"]}"};
    assert_int_equal(sto_study_annotate(db, id, set_to, "{\"k\":1}", NULL, &ev), 0);
    assert_string_equal(seen, "{}"); /* the merge saw what was stored */
    assert_int_equal(sto_study_get(db, id, &s), 0);
    assert_string_equal(s.user_attrs, "{\"k\":1}");
    assert_string_equal(s.note, ""); /* NULL kept it */
    assert_true(s.updated > 1);
    sto_study_clear(&s);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM events WHERE type = 'study_updated'"), 1);
    assert_int_equal(sto_study_annotate(db, id, NULL, NULL, "héllo\nworld", NULL), 0);
    assert_int_equal(sto_study_get(db, id, &s), 0);
    assert_string_equal(s.user_attrs, "{\"k\":1}");
    assert_string_equal(s.note, "héllo\nworld");
    sto_study_clear(&s);
    /* the other study is untouched */
    assert_int_equal(sto_study_get(db, other, &s), 0);
    assert_string_equal(s.user_attrs, "{}");
    assert_true(s.updated == 1);
    sto_study_clear(&s);
    /* an unknown study: not found, no event */
    assert_int_equal(sto_study_annotate(db, id + 100, set_to, "{}", "x", &ev), HPO_ENOTFOUND);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM events WHERE type = 'study_updated'"), 1);
    /* the merge's error rolls everything back: no note, no event */
    assert_int_equal(sto_study_annotate(db, id, refuse, NULL, "not stored", &ev), HPO_ETOOLARGE);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM events WHERE type = 'study_updated'"), 1);
    assert_int_equal(sto_study_get(db, id, &s), 0);
    assert_string_equal(s.note, "héllo\nworld");
    sto_study_clear(&s);
    assert_int_equal(sto_study_annotate(db, id, set_to, "{\"k\":2}", NULL, NULL), 0);
    assert_string_equal(seen, "{\"k\":1}");
    /* in the list too */
    sto_study *list;
    size_t n;
    assert_int_equal(sto_study_list(db, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(list[1].user_attrs, "{\"k\":2}");
    sto_study_list_free(list, n);
    sto_close(db);
}

static void test_trial_annotate(void **state) {
    (void)state;
    sto_db *db;
    assert_int_equal(sto_test_open(&db), 0);
    int64_t sid, tid;
    assert_int_equal(sto_study_create(db, "a", "{}", &sid), 0);
    assert_int_equal(sto_trial_create(db, sid, "{}", 0, &tid, NULL), 0);
    assert_int_equal(sto_trial_finish(db, tid, STO_TRIAL_COMPLETE, 1, 0, 1, NULL), 0);
    sto_test_exec(db, "UPDATE studies SET updated = 1");
    sto_event_in ev = {"trial_updated", NULL};
    /* any state: a finished trial gets its note */
    assert_int_equal(sto_trial_annotate(db, tid, set_to, "{\"gpu\":\"a100\"}", "good run", &ev), 0);
    sto_trial t;
    assert_int_equal(sto_trial_get(db, tid, &t), 0);
    assert_string_equal(t.user_attrs, "{\"gpu\":\"a100\"}");
    assert_string_equal(t.note, "good run");
    assert_int_equal(t.state, STO_TRIAL_COMPLETE);
    sto_trial_clear(&t);
    sto_study s;
    assert_int_equal(sto_study_get(db, sid, &s), 0);
    assert_true(s.updated > 1);
    sto_study_clear(&s);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM events WHERE type = 'trial_updated' AND trial_id IS NOT NULL"), 1);
    assert_int_equal(sto_trial_annotate(db, tid + 5, set_to, "{}", NULL, &ev), HPO_ENOTFOUND);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM events WHERE type = 'trial_updated'"), 1);
    /* lists read them */
    sto_trial *list;
    size_t n;
    assert_int_equal(sto_trial_list(db, sid, NULL, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].note, "good run");
    sto_trial_list_free(list, n);
    sto_close(db);
}

static void test_create_with(void **state) {
    (void)state;
    sto_db *db;
    assert_int_equal(sto_test_open(&db), 0);
    sto_event_in ev = {"study_created", NULL};
    /* names are not unique: two plain creates make two studies */
    int64_t first, second, got;
    assert_int_equal(sto_study_create(db, "dup", "{\"v\":1}", &first), 0);
    assert_int_equal(sto_study_create(db, "dup", "{\"v\":2}", &second), 0);
    assert_true(second > first);
    int created = -1;
    sto_study_new in = {.name = "dup", .spec = "{\"v\":3}", .user_attrs = "{\"x\":1}", .load_if_exists = 1};
    assert_int_equal(sto_study_create_with(db, &in, &ev, &got, &created), 0);
    assert_int_equal(got, first); /* the oldest one */
    assert_int_equal(created, 0);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM studies"), 2);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM events"), 0); /* nothing written */
    sto_study s;
    assert_int_equal(sto_study_get(db, first, &s), 0);
    assert_string_equal(s.spec, "{\"v\":1}");
    assert_string_equal(s.user_attrs, "{}");
    sto_study_clear(&s);
    /* a new name: created with its attrs, note and event */
    in = (sto_study_new){.name = "new", .spec = "{}", .user_attrs = "{\"x\":1}", .note = "n", .load_if_exists = 1};
    assert_int_equal(sto_study_create_with(db, &in, &ev, &got, &created), 0);
    assert_int_equal(created, 1);
    assert_int_equal(sto_study_get(db, got, &s), 0);
    assert_string_equal(s.user_attrs, "{\"x\":1}");
    assert_string_equal(s.note, "n");
    sto_study_clear(&s);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM events WHERE type = 'study_created'"), 1);
    in.spec = NULL;
    assert_int_equal(sto_study_create_with(db, &in, &ev, &got, &created), HPO_EINVAL);
    /* created paused (an import's hold), or running; no other state */
    in = (sto_study_new){.name = "held", .spec = "{}", .state = STO_STUDY_PAUSED};
    assert_int_equal(sto_study_create_with(db, &in, &ev, &got, &created), 0);
    assert_int_equal(sto_study_get(db, got, &s), 0);
    assert_int_equal(s.state, STO_STUDY_PAUSED);
    sto_study_clear(&s);
    in.state = STO_STUDY_COMPLETE;
    assert_int_equal(sto_study_create_with(db, &in, &ev, &got, &created), HPO_EINVAL);
    sto_close(db);
}

/* 8 threads get-or-create one name at once: one study, every thread told its id. */
struct racer {
    sto_db *db;
    int64_t id;
    int created, rc;
};

static void *race(void *arg) {
    struct racer *r = arg;
    sto_study_new in = {.name = "raced", .spec = "{}", .load_if_exists = 1};
    r->rc = sto_study_create_with(r->db, &in, NULL, &r->id, &r->created);
    return NULL;
}

static void test_get_or_create_race(void **state) {
    (void)state;
    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    sto_db *db;
    assert_int_equal(sto_open(tmp.db, STO_SYNC_NORMAL, &db), 0);
    for (int round = 0; round < 5; round++) {
        struct racer r[8];
        pthread_t th[8];
        for (int i = 0; i < 8; i++) {
            r[i] = (struct racer){.db = db};
            assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
        }
        int created = 0;
        for (int i = 0; i < 8; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(r[i].rc, 0);
            assert_int_equal(r[i].id, r[0].id);
            created += r[i].created;
        }
        assert_int_equal(created, 1);
        assert_int_equal(count(db, "SELECT COUNT(*) FROM studies WHERE name = 'raced'"), 1);
        assert_int_equal(sto_study_delete(db, r[0].id), 0);
    }
    sto_close(db);
    sto_tmp_close(&tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_study_annotate),
        cmocka_unit_test(test_trial_annotate),
        cmocka_unit_test(test_create_with),
        cmocka_unit_test(test_get_or_create_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
