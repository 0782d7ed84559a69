/* test_durability.c - storage: nothing acknowledged is lost on kill -9.
 *
 * A forked child opens the database and loops create -> report -> finish,
 * writing each trial id and value to a pipe only after sto_trial_finish has
 * returned (the "acknowledgement" hpod sends its client). The parent drains
 * the pipe and SIGKILLs the child at a random moment, then reopens the
 * database and checks that every acknowledged trial is COMPLETE with its
 * value, that at most one unacknowledged finish made it in, and that the file
 * passes integrity_check. Several rounds on the same file, alternating
 * synchronous NORMAL and FULL; every round re-checks all earlier acks.
 * The seed is printed; HPO_TEST_SEED=<n> replays one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "db_internal.h"
#include "rng.h"
#include "storage.h"
#include "storage/sto_testutil.h"

struct ack {
    int64_t study, trial;
    double value;
};

enum { ROUNDS = 6, MAX_ACKS = 1 << 20 };

static double value_of(int64_t i) { return 1.0 / (double)(i + 3) + (double)i; }

static void child_main(const char *path, sto_sync sync, int fd) {
    sto_db *db = NULL;
    int64_t study;
    if (sto_open(path, sync, &db) != 0) _exit(2);
    if (sto_study_create(db, "durability", "{}", &study) != 0) _exit(3);
    for (int64_t i = 0;; i++) {
        int64_t id;
        double v = value_of(i);
        if (sto_trial_create(db, study, "{}", hpo_now() + 60, &id, NULL) != 0) _exit(4);
        if (sto_trial_report(db, id, 0, v / 2, hpo_now() + 60, 0) != 0) _exit(5);
        if (sto_trial_finish(db, id, STO_TRIAL_COMPLETE, v, NAN, 1, NULL) != 0) _exit(6);
        struct ack a = {study, id, v}; /* < PIPE_BUF: written atomically */
        if (write(fd, &a, sizeof a) != (ssize_t)sizeof a) _exit(7);
    }
}

/* Appends whole records from fd to acks; keeps a partial one in buf. */
static int drain(int fd, unsigned char *buf, size_t *have, struct ack *acks, size_t *n) {
    ssize_t r = read(fd, buf + *have, sizeof(struct ack) * 64 - *have);
    if (r < 0) return errno == EAGAIN || errno == EINTR ? 1 : -1;
    if (r == 0) return 0;
    *have += (size_t)r;
    size_t whole = *have / sizeof(struct ack);
    for (size_t i = 0; i < whole && *n < MAX_ACKS; i++)
        memcpy(&acks[(*n)++], buf + i * sizeof(struct ack), sizeof(struct ack));
    *have -= whole * sizeof(struct ack);
    memmove(buf, buf + whole * sizeof(struct ack), *have);
    return 1;
}

/* One round: returns the number of acks read (appended to acks). */
static size_t kill_round(const char *path, sto_sync sync, double kill_after_s, struct ack *acks,
                         size_t *n) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        child_main(path, sync, p[1]);
        _exit(1);
    }
    close(p[1]);
    size_t before = *n, have = 0;
    unsigned char buf[sizeof(struct ack) * 64];
    /* Start the clock at the first acknowledgement, so every round kills a
     * child that is in its loop; then keep draining so it never blocks. */
    while (*n == before) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        assert_true(poll(&pf, 1, 10000) == 1);
        assert_int_equal(drain(p[0], buf, &have, acks, n), 1);
    }
    double deadline = hpo_monotonic() + kill_after_s;
    for (;;) {
        double left = deadline - hpo_monotonic();
        if (left <= 0) break;
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int pr = poll(&pf, 1, (int)(left * 1000) + 1);
        if (pr == 1) assert_int_equal(drain(p[0], buf, &have, acks, n), 1);
    }
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        fail_msg("child ended by itself (status %d) before the kill", status);
    /* Everything written before the kill is still in the pipe. */
    int rc;
    while ((rc = drain(p[0], buf, &have, acks, n)) == 1) {}
    assert_int_equal(rc, 0);
    assert_int_equal(have, 0); /* writes are atomic: no torn record */
    close(p[0]);
    assert_true(*n < MAX_ACKS);
    return *n - before;
}

static void verify(const char *path, const struct ack *acks, size_t n, int64_t round_study,
                   size_t round_acks) {
    sto_db *db = NULL;
    assert_int_equal(sto_open(path, STO_SYNC_NORMAL, &db), 0);
    if (!sto_test_pg()) /* SQLite's file is sound (PostgreSQL's files are the server's) */
        assert_int_equal(sto_test_int(db, "SELECT COUNT(*) FROM pragma_integrity_check() WHERE integrity_check = 'ok'"),
                         1);
    for (size_t i = 0; i < n; i++) {
        sto_trial t;
        int rc = sto_trial_get(db, acks[i].trial, &t);
        if (rc != 0) fail_msg("acknowledged trial %lld lost (%d)", (long long)acks[i].trial, rc);
        if (t.state != STO_TRIAL_COMPLETE || t.value != acks[i].value || t.study_id != acks[i].study)
            fail_msg("acknowledged trial %lld: state %d value %.17g, expected complete %.17g",
                     (long long)acks[i].trial, t.state, t.value, acks[i].value);
        assert_int_equal(t.last_step, 0);
        sto_trial_clear(&t);
    }
    /* The killed round: the acked finishes, plus at most one that committed
     * but was not yet written to the pipe; at most one trial left running. */
    int64_t c[STO_TRIAL_N_STATES];
    assert_int_equal(sto_trial_counts(db, round_study, c), 0);
    assert_true(c[STO_TRIAL_COMPLETE] >= (int64_t)round_acks);
    assert_true(c[STO_TRIAL_COMPLETE] <= (int64_t)round_acks + 1);
    assert_true(c[STO_TRIAL_RUNNING] <= 1);
    sto_close(db);
}

static void test_kill9_loses_nothing_acknowledged(void **state) {
    (void)state;
    uint64_t seed = (uint64_t)(hpo_now() * 1e6);
    const char *env = getenv("HPO_TEST_SEED");
    if (env) seed = strtoull(env, NULL, 10);
    print_message("durability seed %llu (HPO_TEST_SEED to replay)\n", (unsigned long long)seed);
    hpo_rng rng;
    hpo_rng_seed(&rng, seed);

    sto_tmp tmp;
    assert_int_equal(sto_tmp_init(&tmp), 0);
    struct ack *acks = hpo_xmalloc(MAX_ACKS * sizeof *acks);
    size_t n = 0;
    for (int round = 0; round < ROUNDS; round++) {
        sto_sync sync = round % 2 ? STO_SYNC_FULL : STO_SYNC_NORMAL;
        double after = 0.001 + 0.25 * hpo_rng_uniform(&rng); /* 1 .. 251 ms */
        size_t got = kill_round(tmp.db, sync, after, acks, &n);
        print_message("round %d (%s): killed after %.0f ms, %zu acknowledged finishes\n", round,
                      sync == STO_SYNC_FULL ? "FULL" : "NORMAL", after * 1e3, got);
        assert_true(got >= 1);
        verify(tmp.db, acks, n, acks[n - 1].study, got);
    }
    free(acks);
    sto_tmp_close(&tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_loses_nothing_acknowledged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
