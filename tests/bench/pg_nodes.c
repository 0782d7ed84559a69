/*
 * pg_nodes.c - benchmark: several hpod nodes over one PostgreSQL (issue 15)
 * beside Optuna 3.1's RDB storage on the same server, in the same run.
 *
 * It starts one PostgreSQL (tests/pg/pg_server.sh: initdb into /tmp,
 * 127.0.0.1, a free port; or --pg-url URL, a server already running whose
 * user may create databases), makes two databases (hpod's, Optuna's), and
 * starts two hpod nodes with --database on the first (each its own
 * --data-dir). Then:
 *
 * 1. Throughput: one external study (x, y floats in [-10, 10], x^2 + y^2
 *    minimized), per sampler (--samplers tpe,random): --clients HTTP
 *    clients (threads, libcurl keep-alive), client i on node i % 2, run
 *    --trials ask+tell round trips in all; round trips/s and the p50/p99
 *    latency of an ask and of a tell. The trial numbers the asks got must be
 *    exactly 0..N-1 (the nodes share the numbering through the database),
 *    else the run fails. Optuna: peers/optuna_pg.py throughput, --clients
 *    worker processes, each its own RDBStorage on the same server, the same
 *    space and sampler, --optuna-trials round trips (default 400: Optuna's
 *    per-trial cost grows with the history, and a few thousand take it tens
 *    of minutes on a small machine; hpod's grows too, so a smaller N for
 *    Optuna favours Optuna and the ratio is a lower bound). The ratio
 *    hpod / Optuna per sampler (issue 15's goal: at least 20x).
 * 2. TPE suggestion latency by history size (--sizes): per size S a study
 *    imported with S complete trials through node A (POST /studies/import,
 *    one transaction per trial as add-trial does; the fill time is shown),
 *    the first ask on each node (node B loads the study by replaying its S
 *    trials from PostgreSQL; node A, whose cache the import did not fill,
 *    too: the slower of the two is shown), then --asks ask+tell rounds
 *    alternating nodes, the ask timed: p50/p99. Optuna (peers/optuna_pg.py latency): the sizes up to
 *    --optuna-max-size (default 1000: an Optuna TPE ask at S trials reads
 *    and checks them all; larger sizes are printed as not run), filled
 *    through its ORM in one transaction, the first ask of a fresh storage,
 *    then --optuna-asks timed asks.
 *
 * The load average is printed beside the figures (the machines are shared).
 *
 *   bench_pg_nodes [--trials 2000] [--optuna-trials 400] [--clients 4]
 *                  [--samplers tpe,random] [--sizes 100,1000,10000,100000]
 *                  [--asks 50] [--optuna-max-size 1000] [--optuna-asks 10]
 *                  [--no-optuna] [--pg-url postgresql://user@host:port]
 *   bench_pg_nodes --selftest
 *
 * --selftest (ctest bench.pg_nodes_selftest, seconds): the whole program at
 * a toy size (40 trials, Optuna 8; sizes 50 and 200; 5 asks, Optuna 3), checking every figure is
 * a positive finite number, p50 <= p99, and the trial numbers; exit 77 when
 * the PostgreSQL server binaries or Optuna/psycopg2 are not installed.
 * hpod: $HPO_HPOD (default build/hpod); peers: bench_peers_dir().
 */
#include <glob.h>
#include <libpq-fe.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_hpod.h"
#include "bench_peers.h"
#include "hpo.h"
#include "rng.h"

#ifndef HPO_PG_SERVER
#error "HPO_PG_SERVER must name tests/pg/pg_server.sh (set by tests/bench/CMakeLists.txt)"
#endif

#define MAX_CLIENTS 16
#define MAX_SIZES 8
#define SPACE_JSON                                                                                                     \
    "{\"x\": {\"type\": \"float\", \"low\": -10, \"high\": 10}, "                                                      \
    "\"y\": {\"type\": \"float\", \"low\": -10, \"high\": 10}}"

typedef struct opts {
    int trials, optuna_trials, clients, asks, optuna_asks, optuna_max, no_optuna, selftest;
    char samplers[64];
    long sizes[MAX_SIZES];
    int n_sizes;
    const char *pg_url;
} opts;

typedef struct figures { /* one throughput row; NAN where not measured */
    double rate, ask50, ask99, tell50, tell99;
    int trials;
} figures;

typedef struct latency_row {
    long size;
    double fill_s, first_ms, p50, p99;
} latency_row;

static int fails;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_pg_nodes: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fails++;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double pos = q * (n - 1);
    int i = (int)pos;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* ---- PostgreSQL: the server and its databases ---- */

static int run_sql(const char *base, const char *sql) {
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo, "%s/postgres", base);
    PGconn *c = PQconnectdb(conninfo);
    int rc = 0;
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "bench_pg_nodes: %s: %s", conninfo, PQerrorMessage(c));
        rc = -1;
    } else {
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            fprintf(stderr, "bench_pg_nodes: %s: %s", sql, PQerrorMessage(c));
            rc = -1;
        }
        PQclear(r);
    }
    PQfinish(c);
    return rc;
}

static int pg_server_missing(void) {
    glob_t g;
    int missing = glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0;
    globfree(&g);
    return missing;
}

static int pg_server(const char *cmd, const char *state) {
    char line[4096 + 64];
    snprintf(line, sizeof line, "'%s' %s '%s'", HPO_PG_SERVER, cmd, state);
    return system(line);
}

/* ---- the hpod side ---- */

typedef struct client_job {
    const char *base;
    long study;
    int n, errors, done;
    double *ask, *tell;
    long *numbers;
} client_job;

static void *client(void *arg) {
    client_job *j = arg;
    bench_http *c = bench_http_new(j->base);
    char path[128], body[128];
    for (int i = 0; i < j->n; i++) {
        json_t *t = NULL;
        snprintf(path, sizeof path, "/api/v1/studies/%ld/ask", j->study);
        double t0 = hpo_monotonic();
        long st = bench_http_post(c, path, "", &t);
        double t1 = hpo_monotonic();
        if (st != 200) {
            if (j->errors++ == 0) fprintf(stderr, "bench_pg_nodes: ask: %ld %s\n", st, bench_http_body(c));
            json_decref(t);
            continue;
        }
        json_int_t id = json_integer_value(json_object_get(t, "trial_id"));
        j->numbers[j->done] = (long)json_integer_value(json_object_get(t, "number"));
        json_t *params = json_object_get(t, "params");
        double x = json_number_value(json_object_get(params, "x"));
        double y = json_number_value(json_object_get(params, "y"));
        json_decref(t);
        snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", (long long)id);
        snprintf(body, sizeof body, "{\"value\": %.17g}", x * x + y * y);
        double t2 = hpo_monotonic();
        st = bench_http_post(c, path, body, NULL);
        double t3 = hpo_monotonic();
        if (st != 200) {
            if (j->errors++ == 0) fprintf(stderr, "bench_pg_nodes: tell: %ld %s\n", st, bench_http_body(c));
            continue;
        }
        j->ask[j->done] = t1 - t0;
        j->tell[j->done] = t3 - t2;
        j->done++;
    }
    bench_http_free(c);
    return NULL;
}

static long create_study(const char *base, const char *body) {
    bench_http *c = bench_http_new(base);
    json_t *s = NULL;
    long st = bench_http_post(c, "/api/v1/studies", body, &s);
    long id = st == 201 ? (long)json_integer_value(json_object_get(s, "id")) : -1;
    if (id < 0) fail("create study: %ld %s", st, bench_http_body(c));
    json_decref(s);
    bench_http_free(c);
    return id;
}

static int cmp_l(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static figures hpod_throughput(const bench_hpod nodes[2], const char *sampler, const opts *o) {
    figures f = {NAN, NAN, NAN, NAN, NAN, 0};
    char body[512];
    snprintf(body, sizeof body, "{\"name\": \"throughput-%s\", \"space\": %s, \"tuner\": {\"algorithm\": \"%s\", "
                                "\"seed\": 0}}", sampler, SPACE_JSON, sampler);
    long study = create_study(nodes[0].base, body);
    if (study < 0) return f;
    int per = o->trials / o->clients, total = per * o->clients;
    double *ask = calloc((size_t)total, sizeof *ask), *tell = calloc((size_t)total, sizeof *tell);
    long *numbers = calloc((size_t)total, sizeof *numbers);
    pthread_t th[MAX_CLIENTS];
    client_job jobs[MAX_CLIENTS];
    double t0 = hpo_monotonic();
    for (int i = 0; i < o->clients; i++) {
        jobs[i] = (client_job){nodes[i % 2].base, study, per, 0, 0, ask + i * per, tell + i * per, numbers + i * per};
        pthread_create(&th[i], NULL, client, &jobs[i]);
    }
    int errors = 0, done = 0;
    for (int i = 0; i < o->clients; i++) {
        pthread_join(th[i], NULL);
        errors += jobs[i].errors;
    }
    double secs = hpo_monotonic() - t0;
    /* the latencies and numbers of each client, packed */
    for (int i = 0; i < o->clients; i++) {
        memmove(ask + done, jobs[i].ask, (size_t)jobs[i].done * sizeof *ask);
        memmove(tell + done, jobs[i].tell, (size_t)jobs[i].done * sizeof *tell);
        memmove(numbers + done, jobs[i].numbers, (size_t)jobs[i].done * sizeof *numbers);
        done += jobs[i].done;
    }
    if (errors) fail("%s: %d failed requests", sampler, errors);
    qsort(numbers, (size_t)done, sizeof *numbers, cmp_l);
    for (int i = 0; i < done; i++)
        if (numbers[i] != i) {
            fail("%s: the asks' trial numbers are not 0..%d (position %d holds %ld)", sampler, done - 1, i,
                 numbers[i]);
            break;
        }
    f.trials = done;
    f.rate = done / secs;
    f.ask50 = 1e3 * quantile(ask, done, 0.5);
    f.ask99 = 1e3 * quantile(ask, done, 0.99);
    f.tell50 = 1e3 * quantile(tell, done, 0.5);
    f.tell99 = 1e3 * quantile(tell, done, 0.99);
    free(ask);
    free(tell);
    free(numbers);
    return f;
}

/* The import document of a study with `size` complete trials (random
 * points of the space, seeded). */
static char *import_doc(long size) {
    size_t cap = 512 + (size_t)size * 160, len = 0; /* a trial takes at most ~120 */
    char *doc = malloc(cap);
    if (!doc) return NULL;
    len += (size_t)snprintf(doc, cap, "{\"format\": \"hpo.study/1\", \"name\": \"latency-%ld\", \"study\": "
                                      "{\"definition\": {\"name\": \"latency\", \"space\": %s, \"tuner\": "
                                      "{\"algorithm\": \"tpe\", \"seed\": 0}}}, \"trials\": [", size, SPACE_JSON);
    hpo_rng r;
    hpo_rng_seed(&r, (uint64_t)size);
    for (long i = 0; i < size; i++) {
        double x = -10 + 20 * hpo_rng_uniform(&r), y = -10 + 20 * hpo_rng_uniform(&r);
        len += (size_t)snprintf(doc + len, cap - len,
                                "%s{\"state\": \"complete\", \"params\": {\"x\": %.17g, \"y\": %.17g}, \"value\": %.17g}",
                                i ? ", " : "", x, y, x * x + y * y);
    }
    snprintf(doc + len, cap - len, "]}");
    return doc;
}

static int ask_tell_once(bench_http *c, long study, double *ask_s) {
    char path[128], body[128];
    json_t *t = NULL;
    snprintf(path, sizeof path, "/api/v1/studies/%ld/ask", study);
    double t0 = hpo_monotonic();
    long st = bench_http_post(c, path, "", &t);
    *ask_s = hpo_monotonic() - t0;
    if (st != 200) {
        fail("ask: %ld %s", st, bench_http_body(c));
        json_decref(t);
        return -1;
    }
    json_int_t id = json_integer_value(json_object_get(t, "trial_id"));
    json_t *params = json_object_get(t, "params");
    double x = json_number_value(json_object_get(params, "x"));
    double y = json_number_value(json_object_get(params, "y"));
    json_decref(t);
    snprintf(path, sizeof path, "/api/v1/trials/%lld/tell", (long long)id);
    snprintf(body, sizeof body, "{\"value\": %.17g}", x * x + y * y);
    if ((st = bench_http_post(c, path, body, NULL)) != 200) {
        fail("tell: %ld %s", st, bench_http_body(c));
        return -1;
    }
    return 0;
}

static latency_row hpod_latency(const bench_hpod nodes[2], long size, int asks) {
    latency_row row = {size, NAN, NAN, NAN, NAN};
    char *doc = import_doc(size);
    bench_http *c[2] = {bench_http_new(nodes[0].base), bench_http_new(nodes[1].base)};
    double *t = calloc((size_t)asks, sizeof *t);
    json_t *res = NULL;
    double t0 = hpo_monotonic();
    long st = doc ? bench_http_post(c[0], "/api/v1/studies/import", doc, &res) : -1;
    row.fill_s = hpo_monotonic() - t0;
    long study = -1;
    if (st == 201 && json_integer_value(json_object_get(res, "imported")) == size)
        study = (long)json_integer_value(json_object_get(json_object_get(res, "study"), "id"));
    else
        fail("import of %ld trials: %ld %.200s", size, st, bench_http_body(c[0]));
    json_decref(res);
    int n = 0;
    double first_a = NAN;
    if (study > 0 && ask_tell_once(c[1], study, &row.first_ms) == 0 && ask_tell_once(c[0], study, &first_a) == 0) {
        if (first_a > row.first_ms) row.first_ms = first_a;
        row.first_ms *= 1e3;
        for (int i = 0; i < asks; i++)
            if (ask_tell_once(c[i % 2], study, &t[n]) == 0) n++;
    }
    if (n == asks) {
        row.p50 = 1e3 * quantile(t, n, 0.5);
        row.p99 = 1e3 * quantile(t, n, 0.99);
    }
    free(t);
    free(doc);
    bench_http_free(c[0]);
    bench_http_free(c[1]);
    return row;
}

/* ---- the Optuna side (peers/optuna_pg.py), one JSON object per line ---- */

static json_t *run_peer(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/optuna_pg.py' %s", bench_peers_dir(), args);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    json_t *lines = json_array();
    char line[4096];
    while (fgets(line, sizeof line, p)) {
        json_t *j = json_loads(line, 0, NULL);
        if (j) json_array_append_new(lines, j);
    }
    if (pclose(p) != 0) fail("%s failed", cmd);
    return lines;
}

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static figures optuna_throughput(const char *url, const char *sampler, const opts *o) {
    figures f = {NAN, NAN, NAN, NAN, NAN, 0};
    char args[1024];
    snprintf(args, sizeof args, "throughput --url '%s' --sampler %s --workers %d --trials %d", url, sampler,
             o->clients, o->optuna_trials);
    json_t *lines = run_peer(args);
    json_t *j = json_array_get(lines, 0);
    if (j) {
        f.trials = (int)json_integer_value(json_object_get(j, "trials"));
        f.rate = num(j, "trials_per_s");
        f.ask50 = num(j, "ask_p50_ms");
        f.ask99 = num(j, "ask_p99_ms");
        f.tell50 = num(j, "tell_p50_ms");
        f.tell99 = num(j, "tell_p99_ms");
    } else {
        fail("optuna %s: no figures", sampler);
    }
    json_decref(lines);
    return f;
}

static void optuna_latency(const char *url, const opts *o, latency_row *rows) {
    char sizes[256] = "", args[1024];
    size_t len = 0;
    for (int i = 0; i < o->n_sizes; i++)
        if (o->sizes[i] <= o->optuna_max)
            len += (size_t)snprintf(sizes + len, sizeof sizes - len, "%s%ld", len ? "," : "", o->sizes[i]);
    for (int i = 0; i < o->n_sizes; i++) rows[i] = (latency_row){o->sizes[i], NAN, NAN, NAN, NAN};
    if (!len) return;
    snprintf(args, sizeof args, "latency --url '%s' --sizes %s --asks %d", url, sizes, o->optuna_asks);
    json_t *lines = run_peer(args);
    size_t k;
    json_t *j;
    json_array_foreach(lines, k, j) {
        long size = (long)json_integer_value(json_object_get(j, "size"));
        for (int i = 0; i < o->n_sizes; i++)
            if (rows[i].size == size)
                rows[i] = (latency_row){size, num(j, "fill_s"), num(j, "first_ms"), num(j, "ask_p50_ms"),
                                        num(j, "ask_p99_ms")};
    }
    json_decref(lines);
}

/* ---- the report ---- */

static void cell(double v, const char *fmt) {
    if (isnan(v)) printf(" - |");
    else {
        printf(" ");
        printf(fmt, v);
        printf(" |");
    }
}

static void throughput_row(const char *sampler, const char *system, const char *storage, const figures *f) {
    printf("| %s | %s | %s | %d |", sampler, system, storage, f->trials);
    cell(f->rate, "%.1f");
    cell(f->ask50, "%.2f");
    cell(f->ask99, "%.2f");
    cell(f->tell50, "%.2f");
    cell(f->tell99, "%.2f");
    printf("\n");
}

static void load_average(char *out, size_t n) {
    FILE *f = fopen("/proc/loadavg", "r");
    double a = NAN, b = NAN, c = NAN;
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3) a = b = c = NAN;
        fclose(f);
    }
    snprintf(out, n, "%.2f %.2f %.2f on %ld CPUs", a, b, c, sysconf(_SC_NPROCESSORS_ONLN));
}

static int sane(double v) { return isfinite(v) && v > 0; }

static void check_figures(const char *what, const figures *f, int trials) {
    if (!sane(f->rate) || !sane(f->ask50) || !sane(f->tell50) || f->ask50 > f->ask99 || f->tell50 > f->tell99)
        fail("%s: figures not sane (rate %g, ask %g/%g, tell %g/%g)", what, f->rate, f->ask50, f->ask99, f->tell50,
             f->tell99);
    if (f->trials != trials) fail("%s: %d round trips of %d", what, f->trials, trials);
}

static void check_latency(const char *what, const latency_row *r) {
    if (!sane(r->fill_s) || !sane(r->first_ms) || !sane(r->p50) || r->p50 > r->p99)
        fail("%s at %ld trials: figures not sane (fill %g s, first %g, p50 %g, p99 %g)", what, r->size, r->fill_s,
             r->first_ms, r->p50, r->p99);
}

static int parse_sizes(const char *s, opts *o) {
    o->n_sizes = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 10000000 || o->n_sizes == MAX_SIZES) return -1;
        o->sizes[o->n_sizes++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return o->n_sizes ? 0 : -1;
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--trials N] [--optuna-trials N] [--clients C] [--samplers tpe,random]\n"
            "          [--sizes 100,1000,10000,100000] [--asks K] [--optuna-max-size S] [--optuna-asks K]\n"
            "          [--no-optuna] [--pg-url postgresql://user@host:port] | --selftest\n",
            argv0);
    return 2;
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.trials = 2000, .optuna_trials = 400, .clients = 4, .asks = 50, .optuna_asks = 10,
                .optuna_max = 1000, .samplers = "tpe,random"};
    parse_sizes("100,1000,10000,100000", o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--selftest")) o->selftest = 1;
        else if (!strcmp(a, "--no-optuna")) o->no_optuna = 1;
        else if (!v) return -1;
        else if (!strcmp(a, "--trials")) o->trials = atoi(v);
        else if (!strcmp(a, "--optuna-trials")) o->optuna_trials = atoi(v);
        else if (!strcmp(a, "--clients")) o->clients = atoi(v);
        else if (!strcmp(a, "--asks")) o->asks = atoi(v);
        else if (!strcmp(a, "--optuna-asks")) o->optuna_asks = atoi(v);
        else if (!strcmp(a, "--optuna-max-size")) o->optuna_max = atoi(v);
        else if (!strcmp(a, "--samplers")) snprintf(o->samplers, sizeof o->samplers, "%s", v);
        else if (!strcmp(a, "--pg-url")) o->pg_url = v;
        else if (!strcmp(a, "--sizes")) {
            if (parse_sizes(v, o)) return -1;
        } else return -1;
        if (strcmp(a, "--selftest") && strcmp(a, "--no-optuna")) i++;
    }
    if (o->selftest) {
        o->trials = 40;
        o->optuna_trials = 8;
        o->asks = 5;
        o->optuna_asks = 3;
        o->optuna_max = 200;
        parse_sizes("50,200", o);
    }
    if (o->clients < 2 || o->clients > MAX_CLIENTS || o->trials < o->clients || o->asks < 1 || o->optuna_asks < 1 ||
        (!o->no_optuna && o->optuna_trials < o->clients))
        return -1;
    for (const char *s = o->samplers; *s;) {
        size_t n = strcspn(s, ",");
        if (!((n == 3 && !strncmp(s, "tpe", 3)) || (n == 6 && !strncmp(s, "random", 6)))) return -1;
        s += n + (s[n] == ',');
    }
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    if (parse(argc, argv, &o)) return usage(argv[0]);
    if (!o.pg_url && pg_server_missing()) {
        printf("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb): make deps installs postgresql\n");
        return 77;
    }
    if (!o.no_optuna && system("/usr/bin/python3 -c 'import optuna, psycopg2' >/dev/null 2>&1") != 0) {
        printf("Optuna or psycopg2 missing for /usr/bin/python3 (scripts/deps.sh --bench installs them; "
               "--no-optuna runs hpod's side alone)\n");
        return o.selftest ? 77 : 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    char state[64] = "", base[512], hpo_url[600], optuna_url[640], db_hpo[64], db_optuna[64], sql[128];
    bench_hpod nodes[2] = {{0}, {0}};
    int started = 0, made_dbs = 0;
    snprintf(db_hpo, sizeof db_hpo, "hpo_nodes_%d", (int)getpid());
    snprintf(db_optuna, sizeof db_optuna, "optuna_peer_%d", (int)getpid());
    if (o.pg_url) {
        snprintf(base, sizeof base, "%s", o.pg_url);
    } else {
        snprintf(state, sizeof state, "/tmp/hpo-pgbench-XXXXXX");
        if (!mkdtemp(state)) return 1;
        if (pg_server("start", state) != 0) {
            fail("PostgreSQL did not start");
            goto done;
        }
        started = 1;
        char path[128];
        snprintf(path, sizeof path, "%s/url", state);
        FILE *f = fopen(path, "r");
        if (!f || !fgets(base, sizeof base, f)) {
            if (f) fclose(f);
            fail("no %s", path);
            goto done;
        }
        fclose(f);
        base[strcspn(base, "\r\n")] = '\0';
    }
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", db_hpo);
    if (run_sql(base, sql)) goto done;
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", db_optuna);
    if (run_sql(base, sql)) goto done;
    made_dbs = 1;
    snprintf(hpo_url, sizeof hpo_url, "%s/%s", base, db_hpo);
    /* postgresql://... -> postgresql+psycopg2://... for SQLAlchemy */
    const char *rest = strstr(base, "://");
    snprintf(optuna_url, sizeof optuna_url, "postgresql+psycopg2%s/%s", rest ? rest : "://", db_optuna);

    const char *extra[] = {"--database", hpo_url, "--max-body", "268435456", "--devices", "cpu:1", NULL};
    for (int i = 0; i < 2; i++)
        if (bench_hpod_start(bench_hpod_path(), extra, &nodes[i])) {
            fail("hpod node %d did not start on %s", i + 1, hpo_url);
            goto done;
        }

    char load0[96], load1[96];
    load_average(load0, sizeof load0);
    printf("PostgreSQL: %s (%s); hpod nodes: %s and %s\n", base, o.pg_url ? "given" : "tests/pg/pg_server.sh",
           nodes[0].base, nodes[1].base);
    printf("load average at the start: %s\n\n", load0);

    /* 1. throughput */
    figures ours[2], theirs[2];
    const char *names[2];
    int n_samplers = 0;
    for (const char *s = o.samplers; *s && n_samplers < 2;) {
        size_t n = strcspn(s, ",");
        names[n_samplers] = !strncmp(s, "tpe", 3) ? "tpe" : "random";
        ours[n_samplers] = hpod_throughput(nodes, names[n_samplers], &o);
        check_figures(names[n_samplers], &ours[n_samplers], o.trials / o.clients * o.clients);
        if (!o.no_optuna) {
            theirs[n_samplers] = optuna_throughput(optuna_url, names[n_samplers], &o);
            check_figures("optuna", &theirs[n_samplers], o.optuna_trials / o.clients * o.clients);
        }
        n_samplers++;
        s += n + (s[n] == ',');
    }
    printf("ask+tell round trips per second: %d clients on one study (x, y floats), the same PostgreSQL server\n",
           o.clients);
    printf("| sampler | system | storage | trials | round trips/s | ask p50 ms | ask p99 ms | tell p50 ms | tell p99 ms |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    char system_hpod[96], system_optuna[96];
    snprintf(system_hpod, sizeof system_hpod, "hpod, 2 nodes x %d HTTP clients", o.clients / 2);
    snprintf(system_optuna, sizeof system_optuna, "Optuna 3.1, %d processes", o.clients);
    for (int i = 0; i < n_samplers; i++) {
        throughput_row(names[i], system_hpod, "PostgreSQL (hpod --database)", &ours[i]);
        if (!o.no_optuna) throughput_row(names[i], system_optuna, "RDBStorage, postgresql+psycopg2", &theirs[i]);
    }
    if (!o.no_optuna) {
        for (int i = 0; i < n_samplers; i++)
            printf("ratio hpod / Optuna, %s: %.1fx (goal: at least 20x)\n", names[i], ours[i].rate / theirs[i].rate);
        if (o.optuna_trials < o.trials)
            printf("(Optuna ran %d trials, hpod %d: both slow down as the history grows, so the ratio at equal N "
                   "is at least this; --optuna-trials N to run Optuna's at N)\n",
                   o.optuna_trials, o.trials);
    }

    /* 2. TPE suggestion latency by history size */
    latency_row mine[MAX_SIZES], peer[MAX_SIZES];
    for (int i = 0; i < o.n_sizes; i++) {
        mine[i] = hpod_latency(nodes, o.sizes[i], o.asks);
        check_latency("hpod", &mine[i]);
    }
    if (!o.no_optuna) {
        optuna_latency(optuna_url, &o, peer);
        for (int i = 0; i < o.n_sizes; i++)
            if (o.sizes[i] <= o.optuna_max) check_latency("optuna", &peer[i]);
    }
    printf("\nTPE ask latency by history size, one study on PostgreSQL (hpod: %d asks alternating the nodes; "
           "Optuna: %d asks, sizes up to --optuna-max-size %d)\n",
           o.asks, o.optuna_asks, o.optuna_max);
    printf("| trials | hpod fill s (import) | hpod first ask ms (each node loads; the slower) | hpod ask p50 ms | hpod ask p99 ms "
           "| Optuna fill s (ORM, 1 txn) | Optuna first ask ms | Optuna ask p50 ms | Optuna ask p99 ms |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < o.n_sizes; i++) {
        printf("| %ld |", mine[i].size);
        cell(mine[i].fill_s, "%.1f");
        cell(mine[i].first_ms, "%.1f");
        cell(mine[i].p50, "%.2f");
        cell(mine[i].p99, "%.2f");
        if (o.no_optuna) printf(" not run (--no-optuna) | | | |\n");
        else if (o.sizes[i] > o.optuna_max) printf(" not run (over --optuna-max-size %d) | | | |\n", o.optuna_max);
        else {
            cell(peer[i].fill_s, "%.1f");
            cell(peer[i].first_ms, "%.1f");
            cell(peer[i].p50, "%.2f");
            cell(peer[i].p99, "%.2f");
            printf("\n");
        }
    }
    load_average(load1, sizeof load1);
    printf("load average at the end: %s\n", load1);

done:
    for (int i = 0; i < 2; i++) bench_hpod_stop(&nodes[i]);
    if (made_dbs && o.pg_url) { /* a server of the caller's: leave it as it was */
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", db_hpo);
        run_sql(base, sql);
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", db_optuna);
        run_sql(base, sql);
    }
    if (started) pg_server("stop", state);
    if (state[0]) { /* the server's initdb.log */
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", state);
        if (system(cmd) != 0) fprintf(stderr, "bench_pg_nodes: could not remove %s\n", state);
    }
    if (o.selftest && !fails) printf("pg_nodes selftest: ok\n");
    return fails ? 1 : 0;
}
