/* asktell.c - benchmark: ask+tell round trips per second against a real
 * hpod over loopback HTTP with 4 client threads (libcurl, keep-alive),
 * beside Optuna 3.1 (RDB storage on an SQLite file, RandomSampler, 4
 * threads) measured in the same run, and the ratio.
 *
 *   bench_asktell [--hpod build/hpod] [--trials-per-thread N] [--threads T]
 *                 [--optuna-trials N] [--repeats R] [--sync normal|full]
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpo.h"

typedef struct buf {
    char *s;
    size_t n;
} buf;

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg) {
    buf *b = arg;
    size_t n = size * nmemb;
    b->s = hpo_xrealloc(b->s, b->n + n + 1);
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
    return n;
}

/* POSTs body to url; returns the HTTP status and the response in out. */
static long post(CURL *c, const char *url, const char *body, buf *out) {
    out->n = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    if (curl_easy_perform(c) != CURLE_OK) return -1;
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static CURL *client_new(void) {
    CURL *c = curl_easy_init();
    static struct curl_slist *headers;
    if (!headers) headers = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    return c;
}

typedef struct job {
    const char *base;
    long study;
    int n;
    int errors;
} job;

static void *client(void *arg) {
    job *j = arg;
    CURL *c = client_new();
    buf b = {0};
    char url[256], body[128];
    for (int i = 0; i < j->n; i++) {
        snprintf(url, sizeof url, "%s/api/v1/studies/%ld/ask", j->base, j->study);
        if (post(c, url, "", &b) != 200) {
            j->errors++;
            continue;
        }
        json_t *t = json_loads(b.s, 0, NULL);
        json_int_t id = json_integer_value(json_object_get(t, "trial_id"));
        json_t *params = json_object_get(t, "params");
        double x = json_number_value(json_object_get(params, "x"));
        double y = json_number_value(json_object_get(params, "y"));
        json_decref(t);
        snprintf(url, sizeof url, "%s/api/v1/trials/%lld/tell", j->base, (long long)id);
        snprintf(body, sizeof body, "{\"value\": %.17g}", x * x + y * y);
        if (post(c, url, body, &b) != 200) j->errors++;
    }
    free(b.s);
    curl_easy_cleanup(c);
    return NULL;
}

/* Starts hpod on a free port in a fresh data dir; returns its pid. */
static pid_t start_hpod(const char *hpod, const char *dir, const char *sync, int *port) {
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl(hpod, hpod, "--port", "0", "--data-dir", dir, "--sync", sync, "--log-level", "warn",
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[256] = "";
    if (!fgets(line, sizeof line, f) || !strstr(line, "listening on")) {
        fprintf(stderr, "bench: hpod did not start\n");
        return -1;
    }
    *port = atoi(strrchr(line, ':') + 1);
    return pid;
}

static double run_hpod(const char *hpod, const char *sync, int threads, int per_thread) {
    char dir[] = "/tmp/hpo-bench-XXXXXX";
    if (!mkdtemp(dir)) return -1;
    int port = 0;
    pid_t pid = start_hpod(hpod, dir, sync, &port);
    if (pid < 0) return -1;
    char base[64], url[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    snprintf(url, sizeof url, "%s/api/v1/studies", base);
    CURL *c = client_new();
    buf b = {0};
    long st = post(c, url,
                   "{\"name\": \"bench\", \"space\": {\"x\": {\"type\": \"float\", \"low\": -10, "
                   "\"high\": 10}, \"y\": {\"type\": \"float\", \"low\": -10, \"high\": 10}}, "
                   "\"tuner\": {\"algorithm\": \"random\", \"seed\": 0}}",
                   &b);
    json_t *s = json_loads(b.s ? b.s : "", 0, NULL);
    long study = (long)json_integer_value(json_object_get(s, "id"));
    json_decref(s);
    free(b.s);
    curl_easy_cleanup(c);
    double rate = -1;
    if (st == 201) {
        pthread_t th[64];
        job jobs[64];
        double t0 = hpo_monotonic();
        for (int i = 0; i < threads; i++) {
            jobs[i] = (job){base, study, per_thread, 0};
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
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "bench: could not remove %s\n", dir);
    return rate;
}

static double run_optuna(const char *script, int threads, int trials) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s --threads %d --trials %d", script, threads, trials);
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
    const char *hpod = getenv("HPO_HPOD") ? getenv("HPO_HPOD") : "build/hpod", *sync = "normal";
    const char *script = "tests/bench/optuna_asktell.py";
    int threads = 4, per_thread = 2500, optuna_trials = 400, repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--hpod")) hpod = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--trials-per-thread")) per_thread = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--optuna-trials")) optuna_trials = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats")) repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--sync")) sync = argv[i + 1];
        else if (!strcmp(argv[i], "--optuna-script")) script = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [--hpod PATH] [--threads T] [--trials-per-thread N] "
                            "[--optuna-trials N] [--repeats R] [--sync normal|full]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || repeats < 1 || repeats > 20) return 2;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    double ours[20], theirs[20];
    for (int r = 0; r < repeats; r++) {
        ours[r] = run_hpod(hpod, sync, threads, per_thread);
        theirs[r] = run_optuna(script, threads, optuna_trials);
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
    curl_global_cleanup();
    return mo > 0 && mt > 0 ? 0 : 1;
}
