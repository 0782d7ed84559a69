/*
 * mo_hypervolume.c - multi-objective search quality: the hypervolume hpo's
 * samplers reach after 100 trials on ZDT1, ZDT2, ZDT3 (30 dims, 2
 * objectives) and DTLZ2 (12 dims, 3 objectives): nsga2 (sbx and uniform
 * crossover), random and tpe (multi-objective TPE, tpe_mo.c), beside Optuna 3.1's
 * NSGAIISampler and TPESampler (multi-objective) run by
 * peers/optuna_mo.py in the same run; and bayesian (a GP per objective,
 * log EHVI: gp_mo.c), which Optuna 3.1 has no peer for.
 *
 * The peer prints every trial's objective values; this program computes
 * every hypervolume (its own runs' and the peer's) with the same C code
 * (tun_hypervolume) against the same fixed reference point per problem:
 * ZDT (1.1, 11) (f1 <= 1, f2 <= g <= 10), DTLZ2 (3.5, 3.5, 3.5) (each
 * f <= 1 + g <= 3.5). Each side runs seeds 0..N-1; the table shows the
 * median over seeds of each sampler, the best hpo median over the best
 * Optuna median, and each side's seconds (the peer runs beside hpo's
 * samplers, its output in a temporary file: wall times overlap). Both
 * sides use one BLAS thread.
 *
 *   bench_mo_hypervolume [--seeds N] [--trials T] [--hpo nsga2,nsga2-uniform,random,tpe,bayesian]
 *                        [--no-peer] [--peer-samplers nsga2,tpe]
 *   bench_mo_hypervolume --selftest   (the functions on their known Pareto fronts;
 *                                      the hypervolume of a sampled front)
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpo.h"
#include "tuners.h"

#ifndef HPO_PEERS_DIR
#define HPO_PEERS_DIR "tests/bench/peers"
#endif

enum { ZDT1 = 0, ZDT2, ZDT3, DTLZ2, N_PROBLEMS };
static const char *const names[] = {"zdt1", "zdt2", "zdt3", "dtlz2"};
static const int dims[] = {30, 30, 30, 12};
static const int n_obj[] = {2, 2, 2, 3};
static const double refs[][3] = {{1.1, 11, 0}, {1.1, 11, 0}, {1.1, 11, 0}, {3.5, 3.5, 3.5}};

static void evaluate(int p, const double *x, double *f) {
    int n = dims[p];
    if (p == DTLZ2) {
        double g = 0;
        for (int i = 2; i < n; i++) g += (x[i] - 0.5) * (x[i] - 0.5);
        double a = x[0] * M_PI / 2, b = x[1] * M_PI / 2;
        f[0] = (1 + g) * cos(a) * cos(b);
        f[1] = (1 + g) * cos(a) * sin(b);
        f[2] = (1 + g) * sin(a);
        return;
    }
    double g = 0;
    for (int i = 1; i < n; i++) g += x[i];
    g = 1 + 9 * g / (n - 1);
    double r = x[0] / g;
    f[0] = x[0];
    if (p == ZDT1) f[1] = g * (1 - sqrt(r));
    else if (p == ZDT2) f[1] = g * (1 - r * r);
    else f[1] = g * (1 - sqrt(r) - r * sin(10 * M_PI * x[0]));
}

static tun_space *unit_space(int n) {
    char *text = malloc((size_t)n * 64 + 8), *w = text;
    w += sprintf(w, "{");
    for (int i = 0; i < n; i++) w += sprintf(w, "%s\"x%02d\":{\"type\":\"float\",\"low\":0,\"high\":1}", i ? "," : "", i);
    sprintf(w, "}");
    json_t *j = json_loads(text, 0, NULL);
    tun_space *s = NULL;
    hpo_error err;
    if (!j || tun_space_parse(j, &s, &err)) {
        fprintf(stderr, "space: %s\n", err.message);
        exit(1);
    }
    json_decref(j);
    free(text);
    return s;
}

/* x in the problem's order (x00, x01, ...), whatever order the space keeps. */
static void in_order(const tun_space *s, const double *x, double *out) {
    char name[16];
    for (int i = 0; i < s->n; i++) {
        snprintf(name, sizeof name, "x%02d", i % 100);
        out[i] = x[tun_space_index(s, name)];
    }
}

static double run_hpo(int p, tun_algorithm alg, tun_crossover xover, uint64_t seed, int trials) {
    tun_space *s = unit_space(dims[p]);
    tun_config cfg;
    tun_config_default(&cfg);
    cfg.algorithm = alg;
    cfg.seed = seed;
    cfg.nsga_crossover = xover;
    int maxi[3] = {0};
    tun_study *t = NULL;
    if (tun_study_new_mo(s, &cfg, n_obj[p], maxi, &t)) exit(1);
    double *F = malloc((size_t)trials * 3 * sizeof *F), x[64], xo[64];
    for (int k = 0; k < trials; k++) {
        if (tun_study_suggest(t, k, x) || tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN)) exit(1);
        in_order(s, x, xo);
        evaluate(p, xo, F + (size_t)k * (size_t)n_obj[p]);
        if (tun_study_finish_mo(t, k, TUN_TRIAL_COMPLETE, F + (size_t)k * (size_t)n_obj[p], NAN)) exit(1);
    }
    double hv = tun_hypervolume(F, (size_t)trials, n_obj[p], refs[p]);
    free(F);
    tun_study_free(t);
    tun_space_free(s);
    return hv;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define MAX_SEEDS 100
#define N_PEER 2
static const char *const peer_names[N_PEER] = {"nsga2", "tpe"};

/* hpo's samplers the table can show (--hpo picks some, in this order) */
typedef struct hpo_sampler {
    const char *name;
    tun_algorithm alg;
    tun_crossover xover;
} hpo_sampler;
static const hpo_sampler hpo_samplers[] = {
    {"nsga2", TUN_NSGA2, TUN_XOVER_SBX},   {"nsga2-uniform", TUN_NSGA2, TUN_XOVER_UNIFORM},
    {"random", TUN_RANDOM, TUN_XOVER_SBX}, {"tpe", TUN_TPE, TUN_XOVER_SBX},
    {"bayesian", TUN_BAYESIAN, TUN_XOVER_SBX},
};
#define N_HPO ((int)(sizeof hpo_samplers / sizeof hpo_samplers[0]))

/* The peer runs beside hpo's samplers: its lines go to a temporary file,
 * read once it has ended. */
typedef struct peer_run {
    FILE *fp;
    char path[64];
} peer_run;

static int peer_start(peer_run *pr, int seeds, int trials, const char *samplers) {
    char cmd[1200];
    snprintf(pr->path, sizeof pr->path, "/tmp/hpo-mo-peer-XXXXXX");
    int fd = mkstemp(pr->path);
    if (fd < 0) return 1;
    close(fd);
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 %s/optuna_mo.py --seeds %d --trials %d "
             "--samplers %s > %s",
             HPO_PEERS_DIR, seeds, trials, samplers, pr->path);
    fprintf(stderr, "peer: %s\n", cmd);
    pr->fp = popen(cmd, "r");
    return pr->fp ? 0 : 1;
}

/* Waits for the peer and reads its lines "problem sampler seed trial f1 f2
 * [f3]" into hv[problem][sampler][seed]; returns the number of runs read. */
static int peer_finish(peer_run *pr, int seeds, int trials, double hv[N_PROBLEMS][N_PEER][MAX_SEEDS]) {
    if (pclose(pr->fp) != 0) fprintf(stderr, "peer: exited with an error\n");
    FILE *fp = fopen(pr->path, "r");
    if (!fp) return 0;
    static double pts[N_PROBLEMS][N_PEER][MAX_SEEDS][300 * 3];
    static int cnt[N_PROBLEMS][N_PEER][MAX_SEEDS];
    char line[512], prob[16], samp[16];
    int seed, trial, runs = 0;
    double f[3];
    while (fgets(line, sizeof line, fp)) {
        int got = sscanf(line, "%15s %15s %d %d %lf %lf %lf", prob, samp, &seed, &trial, &f[0], &f[1], &f[2]);
        if (got < 6) continue;
        int p = 0, q = 0;
        while (p < N_PROBLEMS && strcmp(prob, names[p])) p++;
        while (q < N_PEER && strcmp(samp, peer_names[q])) q++;
        if (p == N_PROBLEMS || q == N_PEER || seed < 0 || seed >= MAX_SEEDS || got - 4 != n_obj[p]) continue;
        int *c = &cnt[p][q][seed];
        if (*c >= 300) continue;
        memcpy(&pts[p][q][seed][*c * n_obj[p]], f, (size_t)n_obj[p] * sizeof *f);
        (*c)++;
    }
    fclose(fp);
    unlink(pr->path);
    for (int p = 0; p < N_PROBLEMS; p++)
        for (int q = 0; q < N_PEER; q++)
            for (int s = 0; s < seeds; s++) {
                hv[p][q][s] = cnt[p][q][s] ? tun_hypervolume(pts[p][q][s], (size_t)cnt[p][q][s], n_obj[p], refs[p]) : NAN;
                runs += cnt[p][q][s] == trials;
            }
    return runs;
}

static int selftest(void) {
    int bad = 0;
    double x[30], f[3];
    for (int p = 0; p < N_PROBLEMS; p++) {
        for (int k = 0; k <= 20; k++) {
            for (int i = 0; i < dims[p]; i++) x[i] = p == DTLZ2 ? 0.5 : 0.0;
            x[0] = k / 20.0;
            if (p == DTLZ2) x[1] = (20 - k) / 20.0;
            evaluate(p, x, f);
            double want = p == ZDT1   ? 1 - sqrt(f[0])
                          : p == ZDT2 ? 1 - f[0] * f[0]
                          : p == ZDT3 ? 1 - sqrt(f[0]) - f[0] * sin(10 * M_PI * f[0])
                                      : 1.0;
            double got = p == DTLZ2 ? f[0] * f[0] + f[1] * f[1] + f[2] * f[2] : f[1];
            if (fabs(got - want) > 1e-12) {
                printf("%s: off its Pareto front at x0 = %g: %g, want %g\n", names[p], x[0], got, want);
                bad++;
            }
        }
    }
    /* ZDT1's front, finely sampled: hypervolume to (1, 1) tends to 1 - 1/3 (the area under 1 - sqrt) */
    enum { K = 2001 };
    static double F[2 * K];
    for (int k = 0; k < K; k++) {
        F[2 * k] = k / (double)(K - 1);
        F[2 * k + 1] = 1 - sqrt(F[2 * k]);
    }
    double one[] = {1, 1}, hv = tun_hypervolume(F, K, 2, one);
    printf("ZDT1 front, %d points: hypervolume to (1, 1) %.6f (analytic 2/3)\n", K, hv);
    if (fabs(hv - 2.0 / 3) > 1e-3) bad++;
    printf("%s\n", bad ? "selftest FAILED" : "selftest ok: every function on its known front");
    return bad ? 1 : 0;
}

/* A column of sampler a: its name and 4 more, at least 9. */
static int width(int a) {
    int w = (int)strlen(hpo_samplers[a].name) + 4;
    return w > 9 ? w : 9;
}

static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

int main(int argc, char **argv) {
    int seeds = 10, trials = 100, peer = 1;
    const char *peer_samplers = "nsga2,tpe", *hpo_list = "nsga2,nsga2-uniform,random,tpe,bayesian";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--selftest")) return selftest();
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) trials = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-peer")) peer = 0;
        else if (!strcmp(argv[i], "--peer-samplers") && i + 1 < argc) peer_samplers = argv[++i];
        else if (!strcmp(argv[i], "--hpo") && i + 1 < argc) hpo_list = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--seeds N] [--trials T] [--hpo nsga2,nsga2-uniform,random,tpe,bayesian] [--no-peer]"
                    " [--peer-samplers nsga2,tpe] | --selftest\n",
                    argv[0]);
            return 2;
        }
    }
    if (seeds < 1 || seeds > MAX_SEEDS || trials < 2 || trials > 300) {
        fprintf(stderr, "--seeds 1..%d, --trials 2..300\n", MAX_SEEDS);
        return 2;
    }
    /* one BLAS thread on each side: the GP's small solves gain nothing from
     * more, and on busy shared cores spinning BLAS threads only wait */
    openblas_set_num_threads(1);
    static double hv[N_PROBLEMS][N_HPO][MAX_SEEDS], peer_hv[N_PROBLEMS][N_PEER][MAX_SEEDS];
    double secs[N_HPO] = {0};
    int use[N_HPO], peer_use[N_PEER];
    for (int a = 0; a < N_HPO; a++) use[a] = listed(hpo_list, hpo_samplers[a].name);
    for (int q = 0; q < N_PEER; q++) peer_use[q] = peer && listed(peer_samplers, peer_names[q]);
    peer_run pr = {0};
    double t_peer = hpo_monotonic();
    if (peer && peer_start(&pr, seeds, trials, peer_samplers)) peer = 0;
    for (int p = 0; p < N_PROBLEMS; p++)
        for (int a = 0; a < N_HPO; a++) {
            if (!use[a]) continue;
            double t0 = hpo_monotonic();
            for (int s = 0; s < seeds; s++)
                hv[p][a][s] = run_hpo(p, hpo_samplers[a].alg, hpo_samplers[a].xover, (uint64_t)s, trials);
            secs[a] += hpo_monotonic() - t0;
            fprintf(stderr, "%s hpo %s: %.1f s\n", names[p], hpo_samplers[a].name, hpo_monotonic() - t0);
        }
    int runs = 0;
    double peer_secs = 0;
    if (peer) {
        runs = peer_finish(&pr, seeds, trials, peer_hv);
        peer_secs = hpo_monotonic() - t_peer;
    }
    printf("hypervolume after %d trials, median over %d seeds (reference: ZDT (1.1, 11), DTLZ2 (3.5, 3.5, 3.5));"
           " %d peer runs read\n",
           trials, seeds, runs);
    printf("%-7s", "problem");
    for (int a = 0; a < N_HPO; a++)
        if (use[a]) printf(" %*s", width(a),
                           hpo_samplers[a].name);
    for (int q = 0; q < N_PEER; q++)
        if (peer_use[q]) printf(" %12s", peer_names[q]);
    printf(" %16s\n", "best hpo/optuna");
    printf("%-7s", "");
    for (int a = 0; a < N_HPO; a++)
        if (use[a]) printf(" %*s", width(a), "hpo");
    for (int q = 0; q < N_PEER; q++)
        if (peer_use[q]) printf(" %12s", "optuna 3.1");
    printf("\n");
    for (int p = 0; p < N_PROBLEMS; p++) {
        double best_hpo = -INFINITY, best_peer = -INFINITY;
        printf("%-7s", names[p]);
        for (int a = 0; a < N_HPO; a++) {
            if (!use[a]) continue;
            double v[MAX_SEEDS];
            memcpy(v, hv[p][a], (size_t)seeds * sizeof *v);
            double med = median(v, seeds);
            best_hpo = fmax(best_hpo, med);
            printf(" %*.4f", width(a), med);
        }
        for (int q = 0; q < N_PEER; q++) {
            if (!peer_use[q]) continue;
            double v[MAX_SEEDS];
            int n = 0;
            for (int s = 0; s < seeds; s++)
                if (!isnan(peer_hv[p][q][s])) v[n++] = peer_hv[p][q][s];
            double med = median(v, n);
            if (!isnan(med)) best_peer = fmax(best_peer, med);
            printf(" %12.4f", med);
        }
        printf(" %16.3f\n", best_peer > -INFINITY ? best_hpo / best_peer : NAN);
    }
    printf("%-7s", "seconds");
    for (int a = 0; a < N_HPO; a++)
        if (use[a]) printf(" %*.1f", width(a), secs[a]);
    printf("   (every problem and seed; the Optuna peer, every sampler, running beside them: %.1f s)\n", peer_secs);
    return 0;
}
