/* bench_hpod.c - hpod processes and JSON over HTTP for benchmarks (see
 * bench_hpod.h). */
#include "bench_hpod.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct bench_http {
    CURL *curl;
    struct curl_slist *headers;
    char base[64];
    char *body;
    size_t len;
};

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg) {
    bench_http *c = arg;
    size_t n = size * nmemb;
    char *grown = realloc(c->body, c->len + n + 1);
    if (!grown) return 0;
    c->body = grown;
    memcpy(c->body + c->len, p, n);
    c->len += n;
    c->body[c->len] = '\0';
    return n;
}

bench_http *bench_http_new(const char *base) {
    bench_http *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->curl = curl_easy_init();
    c->headers = curl_slist_append(NULL, "Content-Type: application/json");
    snprintf(c->base, sizeof c->base, "%s", base);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    return c;
}

void bench_http_free(bench_http *c) {
    if (!c) return;
    curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    free(c->body);
    free(c);
}

static long perform(bench_http *c, const char *path, json_t **out) {
    char url[512];
    snprintf(url, sizeof url, "%s%s", c->base, path);
    c->len = 0;
    if (c->body) c->body[0] = '\0';
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    if (out) *out = NULL;
    if (curl_easy_perform(c->curl) != CURLE_OK) return -1;
    long status = 0;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
    if (out && c->len) *out = json_loadb(c->body, c->len, 0, NULL);
    return status;
}

long bench_http_post(bench_http *c, const char *path, const char *body, json_t **out) {
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body ? body : "");
    return perform(c, path, out);
}

long bench_http_get(bench_http *c, const char *path, json_t **out) {
    curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
    return perform(c, path, out);
}

const char *bench_http_body(const bench_http *c) { return c->body ? c->body : ""; }

int bench_hpod_start(const char *hpod, const char *const *extra, bench_hpod *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->data_dir, sizeof out->data_dir, "/tmp/hpo-bench-XXXXXX");
    if (!mkdtemp(out->data_dir)) return -1;
    int fds[2];
    if (pipe(fds)) return -1;
    const char *argv[32] = {hpod, "--port", "0", "--data-dir", out->data_dir, "--log-level", "warn"};
    int argc = 7;
    for (int i = 0; extra && extra[i] && argc < 31; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execv(hpod, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[256] = "";
    if (!f || !fgets(line, sizeof line, f) || !strstr(line, "listening on")) {
        fprintf(stderr, "bench: %s did not start\n", hpod);
        if (f) fclose(f);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    fclose(f);
    out->pid = pid;
    out->port = atoi(strrchr(line, ':') + 1);
    snprintf(out->base, sizeof out->base, "http://127.0.0.1:%d", out->port);
    return 0;
}

void bench_hpod_stop(bench_hpod *h) {
    if (h->pid > 0) {
        kill(h->pid, SIGTERM);
        waitpid(h->pid, NULL, 0);
        h->pid = 0;
    }
    if (h->data_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->data_dir);
        if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", h->data_dir);
        h->data_dir[0] = '\0';
    }
}

const char *bench_hpod_path(void) {
    const char *p = getenv("HPO_HPOD");
    return p && *p ? p : "build/hpod";
}
