/* test_study_cache.c - a study's first load runs outside the study cache's
 * lock (study_cache.c): while one thread loads an embedded study, whose
 * definition opens its dataset, a request for another study is served, a
 * second request for the same study waits for that load and gets the same
 * entry, and a study forgotten (deleted) during its load is not cached.
 *
 * The load is held still without timing: after a restart of the api on
 * the same database, HPO_FASHION_MNIST_DIR points at a dir of named pipes
 * in place of the dataset's files, so the loader blocks in open() until
 * the test writes the real files into the pipes. Before the change the
 * load ran under the cache's lock and the other study's acquire waited for
 * it: the check bounds that wait at 120 s (a deadlock detector, not a
 * timing: the acquire takes microseconds). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api_internal.h"
#include "data.h"
#include "db_internal.h"
#include "api/api_testutil.h"

#define REAL_DIR "/usr/share/datasets/fashion-mnist"
static const char *files[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"};

static char dir[64], pipes[96];
static sto_db *db;
static api_ctx *ctx;

/* A thread that acquires a study. */
typedef struct acquirer {
    pthread_t th;
    int64_t id;
    int rc;
    api_study *st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} acquirer;

static void *acquire_main(void *arg) {
    acquirer *a = arg;
    a->rc = api_study_acquire(ctx, a->id, &a->st);
    pthread_mutex_lock(&a->mu);
    a->done = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void start(acquirer *a, int64_t id) {
    memset(a, 0, sizeof *a);
    a->id = id;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    assert_int_equal(pthread_create(&a->th, NULL, acquire_main, a), 0);
}

/* Whether the acquire ended within limit_s seconds. */
static int ended_within(acquirer *a, int limit_s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += limit_s;
    pthread_mutex_lock(&a->mu);
    while (!a->done && pthread_cond_timedwait(&a->cv, &a->mu, &until) != ETIMEDOUT) {
    }
    int done = a->done;
    pthread_mutex_unlock(&a->mu);
    return done;
}

static void finish(acquirer *a) {
    pthread_join(a->th, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
}

/* Writes a real dataset file into its pipe: through fd when it is open
 * already, else through a new blocking open (which waits for the loader to
 * open the other end). */
typedef struct feeder {
    const char *name;
    int fd;
} feeder;

static void *feed_main(void *arg) {
    feeder *f = arg;
    char src[256], dst[160];
    snprintf(src, sizeof src, "%s/%s", REAL_DIR, f->name);
    snprintf(dst, sizeof dst, "%s/%s", pipes, f->name);
    FILE *in = fopen(src, "rb");
    int out = f->fd >= 0 ? f->fd : open(dst, O_WRONLY);
    if (!in || out < 0) abort();
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (write(out, buf, n) != (ssize_t)n) abort();
    fclose(in);
    close(out);
    return NULL;
}

/* Feeds both pipes at once (the loader opens both, then reads); the images
 * pipe through images_fd, the writer wait_loader_in_open opened. */
static void feed(int images_fd) {
    pthread_t th[2];
    feeder f[2] = {{files[0], images_fd}, {files[1], -1}};
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, feed_main, &f[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}

/* Waits until the loader has the images pipe open for reading: a
 * non-blocking open for writing fails with ENXIO before that. The writer
 * it opened is returned, blocking, and stays open (a reader whose last
 * writer closed reads end of file). */
static int wait_loader_in_open(void) {
    char p[160];
    snprintf(p, sizeof p, "%s/%s", pipes, files[0]);
    for (;;) {
        int fd = open(p, O_WRONLY | O_NONBLOCK);
        if (fd >= 0) {
            assert_int_equal(fcntl(fd, F_SETFL, 0), 0);
            return fd;
        }
        assert_int_equal(errno, ENXIO);
        usleep(1000);
    }
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* A new api on the same database, with the dataset's files as pipes. */
static void restart_on_pipes(void) {
    api_ctx_free(ctx);
    eng_dataset_cache_clear();
    setenv("HPO_FASHION_MNIST_DIR", pipes, 1);
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);
}

static const char *embedded =
    "{\"name\": \"e\", \"objective\": {\"metric\": \"val_accuracy\"}, \"model\": {\"template\": \"mlp\"},"
    " \"dataset\": {\"name\": \"fashion-mnist\", \"limit\": 300, \"validation_split\": 100},"
    " \"training\": {\"max_epochs\": 1}, \"tuner\": {\"algorithm\": \"random\", \"max_trials\": 1}}";
static const char *external = "{\"name\": \"x\", \"space\": {\"x\": {\"type\": \"float\", \"low\": 0, \"high\": 1}}}";

static void test_load_outside_the_lock(void **state) {
    (void)state;
    if (access(REAL_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) skip();
    snprintf(dir, sizeof dir, "/tmp/hpo-cache-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(pipes, sizeof pipes, "%s/pipes", dir);
    assert_int_equal(mkdir(pipes, 0700), 0);
    for (int i = 0; i < 2; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s/%s", pipes, files[i]);
        assert_int_equal(mkfifo(p, 0600), 0);
    }
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    api_options opt = {.data_dir = dir};
    assert_int_equal(api_ctx_new(db, &opt, &ctx), 0);
    int64_t emb = api_test_create_study(ctx, embedded), ext = api_test_create_study(ctx, external);
    restart_on_pipes();

    /* one thread loads the embedded study: blocked in its dataset's open */
    acquirer loader, same, other;
    start(&loader, emb);
    int images = wait_loader_in_open();
    /* another study is served meanwhile */
    start(&other, ext);
    int served = ended_within(&other, 120);
    printf("another study's acquire during a blocked load: %s\n", served ? "served" : "waited 120 s");
    /* the same study: waits for that load (it would block on the pipes too
     * if it loaded a second time, and the feed would not reach both) */
    start(&same, emb);
    feed(images);
    finish(&loader);
    finish(&same);
    if (!served) ended_within(&other, 600);
    finish(&other);
    assert_true(served);
    assert_int_equal(other.rc, 0);
    assert_int_equal(loader.rc, 0);
    assert_int_equal(same.rc, 0);
    assert_ptr_equal(loader.st, same.st);
    api_study_release(ctx, other.st);
    api_study_release(ctx, loader.st);
    api_study_release(ctx, same.st);

    /* forgotten during its load: not cached, and the loader gets not found */
    restart_on_pipes();
    start(&loader, emb);
    images = wait_loader_in_open();
    api_study_forget(ctx, emb);
    feed(images);
    finish(&loader);
    assert_int_equal(loader.rc, HPO_ENOTFOUND);

    api_ctx_free(ctx);
    sto_close(db);
    unsetenv("HPO_FASHION_MNIST_DIR");
    eng_dataset_cache_clear();
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* The cache keeps at most API_CACHE_KEEP studies nobody holds: touching
 * more drops the least recently used idle one (a later acquire loads it
 * again, with its history), never one a caller holds. (Before, every
 * study touched stayed: 17 KB a study and 0.6 KB a trial, for good.) */
static void test_least_used_idle_dropped(void **state) {
    (void)state;
    assert_int_equal(sto_open(":memory:", STO_SYNC_NORMAL, &db), 0);
    assert_int_equal(api_ctx_new(db, NULL, &ctx), 0);
    int64_t first = api_test_create_study(ctx, external), held_id = api_test_create_study(ctx, external);
    int status;
    char path[96];
    snprintf(path, sizeof path, "/api/v1/studies/%lld/ask", (long long)first);
    json_t *asked = api_test_call(ctx, "POST", path, "{}", &status); /* a trial of its history */
    assert_int_equal(status, 200);
    json_decref(asked);
    api_study *a = NULL, *held = NULL, *again = NULL;
    assert_int_equal(api_study_acquire(ctx, first, &a), 0);
    api_study_release(ctx, a); /* cached, idle, the least recently used from here on */
    assert_int_equal(api_study_acquire(ctx, held_id, &held), 0);
    for (int i = 0; i < API_CACHE_KEEP + 10; i++) {
        api_study *st = NULL;
        assert_int_equal(api_study_acquire(ctx, api_test_create_study(ctx, external), &st), 0);
        api_study_release(ctx, st);
    }
    printf("  %d studies touched: %zu in the cache\n", API_CACHE_KEEP + 12, api_cache_count(ctx));
    assert_int_equal(api_cache_count(ctx), API_CACHE_KEEP);
    /* held throughout: the same entry */
    api_study *held_again = NULL;
    assert_int_equal(api_study_acquire(ctx, held_id, &held_again), 0);
    assert_ptr_equal(held_again, held);
    api_study_release(ctx, held_again);
    api_study_release(ctx, held);
    /* dropped, loaded again with its history: its next trial is number 1 */
    assert_int_equal(api_study_acquire(ctx, first, &again), 0);
    assert_int_equal(again->next_number, 1);
    api_study_release(ctx, again);
    snprintf(path, sizeof path, "/api/v1/studies/%lld/ask", (long long)first);
    asked = api_test_call(ctx, "POST", path, "{}", &status);
    assert_int_equal(status, 200);
    assert_int_equal(json_integer_value(json_object_get(asked, "number")), 1);
    json_decref(asked);
    api_ctx_free(ctx);
    sto_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_outside_the_lock),
        cmocka_unit_test(test_least_used_idle_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
