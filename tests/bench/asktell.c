/* asktell.c - benchmark: ask+tell round trips per second against a real
 * hpod over loopback HTTP with 4 client threads (libcurl, keep-alive),
 * beside Optuna 3.1 (RDB storage on an SQLite file, RandomSampler, 4
 * threads) measured in the same run, and the ratio.
 *
 *   bench_asktell [--threads T] [--trials-per-thread N] [--optuna-trials N]
 *                 [--repeats R] [--sync normal|full]
 * hpod: $HPO_HPOD (default build/hpod); the Optuna side runs
 * tests/bench/peers/optuna_asktell.py (or $HPO_PEERS/optuna_asktell.py) with
 * /usr/bin/python3.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_hpod.h"
#include "bench_peers.h"
#include "hpo.h"

typedef struct job {
    const char *base;
    long study;
    int n;
    int errors;
} job;

static void *client(void *arg) {
    job *j = arg;
    bench_http *c = bench_http_new(j->base);
    char path[128], body[128];
    for (int i = 0; i < j->n; i++) {
        json_t *t = NULL;
        snprintf(path, sizeof path, "/api/v1/studies/%ld/ask", j->study);
        if (bench_http_post(c, path, "", &t) != 200) {
            j->errors++;
            json_decref(t);
            continue;
        }
        json_int_t id = json_integer_value(json_object_get(t, "trial_id"));
        json_t *params = json_object_get(t, "params");
        double x = json_number_value(json_object_get(params, "x"));
        double y = json_number_value(json_object_get(params, "y"));
        json_decref(t);
        snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", (long long)id);
        snprintf(body, sizeof body, "{\"value\": %.17g}", x * x + y * y);
        if (bench_http_post(c, path, body, NULL) != 200) j->errors++;
    }
    bench_http_free(c);
    return NULL;
}

static double run_hpod(const char *sync, int threads, int per_thread) {
    bench_hpod h;
    const char *extra[] = {"--sync", sync, NULL};
    if (bench_hpod_start(bench_hpod_path(), extra, &h)) return -1;
    bench_http *c = bench_http_new(h.base);
    json_t *s = NULL;
    long st = bench_http_post(c, "/api/v1/studies",
                              "{\"name\": \"bench\", \"space\": {\"x\": {\"type\": \"float\", \"low\": -10, "
                              "\"high\": 10}, \"y\": {\"type\": \"float\", \"low\": -10, \"high\": 10}}, "
                              "\"tuner\": {\"algorithm\": \"random\", \"seed\": 0}}",
                              &s);
    long study = (long)json_integer_value(json_object_get(s, "id"));
    json_decref(s);
    bench_http_free(c);
    double rate = -1;
    if (st == 201) {
        pthread_t th[64];
        job jobs[64];
        double t0 = hpo_monotonic();
        for (int i = 0; i < threads; i++) {
            jobs[i] = (job){h.base, study, per_thread, 0};
            pthread_create(&th[i], NULL, client, &jobs[i]);
        }
        int errors = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            errors += jobs[i].errors;
        }
        double secs = hpo_monotonic() - t0;
        rate = (threads * per_thread - errors) / secs;
        if (errors) fprintf(stderr, "bench: %d failed requests\n", errors);
    }
    bench_hpod_stop(&h);
    return rate;
}

static double run_optuna(int threads, int trials) {
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/optuna_asktell.py' --threads %d --trials %d",
             bench_peers_dir(), threads, trials);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512] = "";
    double rate = -1;
    while (fgets(line, sizeof line, p)) {
        json_t *j = json_loads(line, 0, NULL);
        if (j) rate = json_number_value(json_object_get(j, "trials_per_s"));
        json_decref(j);
    }
    pclose(p);
    return rate;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *sync = "normal";
    int threads = 4, per_thread = 2500, optuna_trials = 400, repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--trials-per-thread")) per_thread = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--optuna-trials")) optuna_trials = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats")) repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--sync")) sync = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [--threads T] [--trials-per-thread N] [--optuna-trials N] "
                            "[--repeats R] [--sync normal|full]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || repeats < 1 || repeats > 20) return 2;
    double ours[20], theirs[20];
    for (int r = 0; r < repeats; r++) {
        ours[r] = run_hpod(sync, threads, per_thread);
        theirs[r] = run_optuna(threads, optuna_trials);
        printf("repeat %d: hpod %.0f/s, optuna %.1f/s\n", r + 1, ours[r], theirs[r]);
        fflush(stdout);
    }
    qsort(ours, (size_t)repeats, sizeof *ours, cmp);
    qsort(theirs, (size_t)repeats, sizeof *theirs, cmp);
    double mo = ours[repeats / 2], mt = theirs[repeats / 2];
    printf("\nask+tell round trips per second, %d client threads, median [min..max] of %d\n", threads, repeats);
    printf("| system | storage | trials | round trips/s |\n|---|---|---|---|\n");
    printf("| hpod (HTTP, loopback) | SQLite WAL, sync=%s | %d | %.0f [%.0f..%.0f] |\n", sync,
           threads * per_thread, mo, ours[0], ours[repeats - 1]);
    printf("| Optuna 3.1 (in-process) | RDB on SQLite file | %d | %.1f [%.1f..%.1f] |\n", optuna_trials, mt,
           theirs[0], theirs[repeats - 1]);
    printf("ratio hpod / Optuna: %.1fx (goal: at least 20x)\n", mo / mt);
    return mo > 0 && mt > 0 ? 0 : 1;
}
