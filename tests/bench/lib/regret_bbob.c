/*
 * regret_bbob.c - the BBOB suite of bench_tuner_regret and the checks of the
 * functions (regret_bbob.h has the flags and the design notes).
 */
#include "regret_bbob.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bbob.h"
#include "bench_peers.h"
#include "hpo.h"
#include "regret.h"

#ifndef HPO_BBOB_LIB
#error "HPO_BBOB_LIB must name libhpo_bbob.so (set by tests/bench/CMakeLists.txt)"
#endif

#define NF BENCH_BBOB_N_FUNCTIONS
#define MAX_DIMS 4
#define MAX_BUDGETS 8
#define FLOOR 1e-8 /* regrets below COCO's final target count as solved */

static const char *algo_names[] = {"random", "tpe", "bayesian", "bayesian-det", "cmaes",
                                   "evolution"};
static const tun_algorithm algo_ids[] = {TUN_RANDOM, TUN_TPE,   TUN_BAYESIAN,
                                         TUN_BAYESIAN, TUN_CMAES, TUN_EVOLUTION};
#define N_ALGOS 6
static const char *peer_names[] = {"random", "tpe", "cmaes"};
#define N_PEERS 3
/* each algorithm's peer (index into peer_names) */
static const int algo_peer[N_ALGOS] = {0, 1, 1, 1, 2, 1};
/* --variant: index = the noise model (BENCH_NOISE_*); the last is the mixed space */
static const char *variant_names[] = {"noiseless", "noisy-gauss", "noisy-uniform", "noisy-cauchy",
                                      "mixed"};
#define N_VARIANTS 5
#define V_MIXED 4

static const char *lib_path(void) {
    const char *p = getenv("HPO_BBOB_LIB");
    return p && *p ? p : HPO_BBOB_LIB;
}

/* "2,5,10" -> v; returns the count, or -1 when an item is out of [lo, hi] */
static int parse_ints(const char *s, int *v, int max, int lo, int hi) {
    int n = 0;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < lo || x > hi || n == max) return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* ---- checks ------------------------------------------------------------- */

static double uniform(uint64_t *s) { /* xorshift64*, [0, 1) */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

/* For every function, dimension and a few instances: x_opt in [-5, 5]^D,
 * f(x_opt) = f_opt (max |diff| printed), f(x) > f_opt at random points of
 * [-5, 5]^D, and f >= f_opt near x_opt (x_opt is a local minimum). */
static int selftest(void) {
    static const int dims[] = {2, 5, 10, 40};
    double worst_opt = 0.0, worst_near = 0.0, x[BENCH_BBOB_MAX_DIM], xo[BENCH_BBOB_MAX_DIM];
    int bad = 0;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int fid = 1; fid <= NF; fid++)
        for (int k = 0; k < 4; k++)
            for (unsigned inst = 1; inst <= 3; inst++) {
                int D = dims[k];
                bench_bbob *f = bench_bbob_new(fid, D, inst);
                if (!f) return 1;
                double fo = bench_bbob_fopt(f);
                bench_bbob_xopt(f, xo);
                for (int i = 0; i < D; i++)
                    if (!(fabs(xo[i]) <= 5.0)) {
                        printf("f%d D=%d inst %u: x_opt[%d] = %g outside [-5, 5]\n", fid, D,
                               inst, i, xo[i]);
                        bad++;
                    }
                double d = fabs(bench_bbob_eval(f, xo) - fo);
                if (!(d <= 1e-8)) {
                    printf("f%d D=%d inst %u: f(x_opt) - f_opt = %g\n", fid, D, inst, d);
                    bad++;
                }
                if (!(d <= worst_opt)) worst_opt = d;
                for (int t = 0; t < 100; t++) {
                    for (int i = 0; i < D; i++) x[i] = 10.0 * uniform(&s) - 5.0;
                    double y = bench_bbob_eval(f, x);
                    if (!(y > fo)) {
                        printf("f%d D=%d inst %u: f(x) = %.17g <= f_opt = %g at a random x\n",
                               fid, D, inst, y, fo);
                        bad++;
                    }
                    for (int i = 0; i < D; i++)
                        x[i] = fmin(5.0, fmax(-5.0, xo[i] + 1e-3 * (2.0 * uniform(&s) - 1.0)));
                    double below = fo - bench_bbob_eval(f, x);
                    if (!(below <= 1e-9)) {
                        printf("f%d D=%d inst %u: f = f_opt - %g near x_opt\n", fid, D, inst,
                               below);
                        bad++;
                    }
                    if (below > worst_near) worst_near = below;
                }
                bench_bbob_free(f);
            }
    /* the variants: noise is a pure function of (instance, model, k), never
     * below f_opt, and moves values; the mixed decoding spans [-5, 5] */
    int moved = 0, evals = 0;
    for (int fid = 1; fid <= NF; fid++) {
        bench_bbob *f = bench_bbob_new(fid, 5, 1);
        if (!f) return 1;
        for (int t = 0; t < 20; t++)
            for (int model = BENCH_NOISE_GAUSS; model <= BENCH_NOISE_CAUCHY; model++) {
                for (int i = 0; i < 5; i++) x[i] = 10.0 * uniform(&s) - 5.0;
                double truth, y = bench_bbob_eval_noisy(f, x, model, 1, (unsigned)t, &truth);
                double again = bench_bbob_eval_noisy(f, x, model, 1, (unsigned)t, NULL);
                evals++;
                moved += y != truth;
                if (!(y >= bench_bbob_fopt(f)) || y != again || truth != bench_bbob_eval(f, x)) {
                    printf("f%d model %d k %d: noisy %.17g, again %.17g, truth %.17g, f_opt %g\n",
                           fid, model, t, y, again, truth, bench_bbob_fopt(f));
                    bad++;
                }
            }
        bench_bbob_free(f);
    }
    if (moved < evals * 9 / 10) {
        printf("noise moved only %d of %d values\n", moved, evals);
        bad++;
    }
    if (fabs(bench_mixed_coord(1, 1e-3) + 5.0) > 1e-12 || fabs(bench_mixed_coord(1, 1e2) - 5.0) > 1e-12 ||
        bench_mixed_coord(4, -5.0) != -5.0) {
        printf("bench_mixed_coord does not map its ranges onto [-5, 5]\n");
        bad++;
    }
    printf("bbob selftest: 24 functions x D in {2,5,10,40} x instances 1..3: max |f(x_opt) - "
           "f_opt| = %.3g; max f_opt - f near x_opt = %.3g; noise moved %d of %d values; "
           "%d failures\n",
           worst_opt, worst_near, moved, evals, bad);
    return bad ? 1 : 0;
}

/* The C values and the peer's (the same library through ctypes) at random
 * points of [-6, 6]^D (the penalties too), every function, D in dims, each
 * under every noise model (evaluation number = the point's number). */
static int check_peer(const int *dims, int n_dims) {
    char path[64] = "/tmp/hpo_bbob_points_XXXXXX", cmd[1024];
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    FILE *out = fdopen(fd, "w");
    if (!out) {
        close(fd);
        unlink(path);
        return 1;
    }
    uint64_t s = 0xD1B54A32D192ED03ull;
    double x[BENCH_BBOB_MAX_DIM];
    int n = 0;
    for (int fid = 1; fid <= NF; fid++)
        for (int k = 0; k < n_dims; k++)
            for (unsigned inst = 1; inst <= 2; inst++) {
                bench_bbob *f = bench_bbob_new(fid, dims[k], inst);
                if (!f) continue;
                for (int t = 0; t < 10; t++, n++) {
                    int model = t % (BENCH_NOISE_CAUCHY + 1);
                    for (int i = 0; i < dims[k]; i++) x[i] = 12.0 * uniform(&s) - 6.0;
                    fprintf(out, "%d %d %u %d %d %.17g", fid, dims[k], inst, model, t,
                            bench_bbob_eval_noisy(f, x, model, inst, (unsigned)t, NULL));
                    for (int i = 0; i < dims[k]; i++) fprintf(out, " %.17g", x[i]);
                    fputc('\n', out);
                }
                bench_bbob_free(f);
            }
    fclose(out);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/optuna_bbob.py' --lib '%s' --check %s",
             bench_peers_dir(), lib_path(), path);
    int rc = system(cmd);
    unlink(path);
    printf("bbob peer check (%d points, every noise model): %s\n", n, rc == 0 ? "equal" : "FAILED");
    return rc == 0 ? 0 : 1;
}

/* ---- the variants' problems --------------------------------------------- */

typedef struct problem {
    const bench_bbob *f;
    int dim, variant;
    unsigned long long instance;
} problem;

/* The mixed space of bbob.h (bench_mixed_coord) in D coordinates */
static json_t *mixed_space(int D) {
    json_t *js = json_object(), *nums = json_array();
    for (int v = -5; v <= 5; v++) json_array_append_new(nums, json_integer(v));
    for (int i = 0; i < D; i++) {
        char name[16], mode[16];
        snprintf(name, sizeof name, "x%d", i);
        switch (i % 4) {
        case 0:
            json_object_set_new(js, name, json_pack("{s:s, s:i, s:i}", "type", "int", "low", -5,
                                                    "high", 5));
            break;
        case 1:
            json_object_set_new(js, name, json_pack("{s:s, s:f, s:f, s:b}", "type", "float",
                                                    "low", 1e-3, "high", 1e2, "log", 1));
            break;
        case 2:
            json_object_set_new(js, name, json_pack("{s:s, s:O}", "type", "choice", "values", nums));
            break;
        default:
            snprintf(mode, sizeof mode, "m%d", i);
            json_object_set_new(js, mode, json_pack("{s:s, s:[s,s]}", "type", "choice", "values",
                                                    "fine", "coarse"));
            snprintf(name, sizeof name, "x%df", i);
            json_object_set_new(js, name, json_pack("{s:s, s:f, s:f, s:{s:[s]}}", "type", "float",
                                                    "low", -5.0, "high", 5.0, "condition", mode,
                                                    "fine"));
            snprintf(name, sizeof name, "x%dc", i);
            json_object_set_new(js, name, json_pack("{s:s, s:i, s:i, s:i, s:{s:[s]}}", "type",
                                                    "int", "low", -4, "high", 4, "step", 2,
                                                    "condition", mode, "coarse"));
        }
    }
    json_decref(nums);
    return js;
}

static json_t *box_space(int D) {
    json_t *js = json_object();
    for (int i = 0; i < D; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        json_object_set_new(js, name, json_pack("{s:s, s:f, s:f}", "type", "float", "low", -5.0,
                                                "high", 5.0));
    }
    return js;
}

/* the active value of the parameter `name` (choices decoded to their number) */
static double value_of(const tun_space *sp, const double *x, const char *name) {
    int j = tun_space_index(sp, name);
    const tun_param *p = &sp->params[j];
    if (p->type == TUN_CHOICE && !isnan(x[j]))
        return json_number_value(json_array_get(p->choices, (size_t)x[j]));
    return x[j];
}

static double eval_problem(void *ctx, const tun_space *sp, const double *x, int k, double *truth) {
    const problem *p = ctx;
    double v[BENCH_BBOB_MAX_DIM];
    for (int i = 0; i < p->dim; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        if (p->variant == V_MIXED && i % 4 == 3) { /* the mode picks which one is active */
            char mode[16];
            snprintf(mode, sizeof mode, "m%d", i);
            snprintf(name, sizeof name, "x%d%c", i, x[tun_space_index(sp, mode)] == 0.0 ? 'f' : 'c');
            v[i] = x[tun_space_index(sp, name)];
        } else {
            v[i] = bench_mixed_coord(p->variant == V_MIXED ? i : 0, value_of(sp, x, name));
        }
    }
    int model = p->variant == V_MIXED ? BENCH_NOISE_NONE : p->variant;
    return bench_bbob_eval_noisy(p->f, v, model, p->instance, (unsigned long long)k, truth);
}

/* ---- the benchmark ------------------------------------------------------- */

typedef struct suite {
    int variant; /* index into variant_names */
    int dims[MAX_DIMS], n_dims, budgets[MAX_BUDGETS], n_budgets, fids[NF], n_fids, n_seeds;
    int seed0; /* run s uses seed seed0 + s and instance seed0 + s + 1 */
    int ran[N_ALGOS], have_peer[N_PEERS];
    /* [function-1][dim index][algo][budget][seed] */
    double reg[NF][MAX_DIMS][N_ALGOS][MAX_BUDGETS][REGRET_MAX_SEEDS];
    double peer[NF][MAX_DIMS][N_PEERS][MAX_BUDGETS][REGRET_MAX_SEEDS];
    int peer_n[NF][MAX_DIMS][N_PEERS][MAX_BUDGETS];
} suite;

static int index_of(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return i;
    return -1;
}

/* CSV "fid,dim,sampler,budget,seed,regret" */
static int read_peer_csv(const char *path, suite *S) {
    FILE *f = fopen(path, "r");
    if (!f) return HPO_EIO;
    char line[256], name[32];
    int fid, dim, budget, seed;
    double r;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%d,%d,%31[^,],%d,%d,%lf", &fid, &dim, name, &budget, &seed, &r) != 6)
            continue;
        seed -= S->seed0;
        int k = index_of(S->dims, S->n_dims, dim), b = index_of(S->budgets, S->n_budgets, budget);
        int p = -1;
        for (int i = 0; i < N_PEERS; i++)
            if (!strcmp(name, peer_names[i])) p = i;
        if (fid < 1 || fid > NF || k < 0 || b < 0 || p < 0 || seed < 0 || seed >= S->n_seeds)
            continue;
        S->peer[fid - 1][k][p][b][seed] = r;
        S->peer_n[fid - 1][k][p][b]++;
    }
    fclose(f);
    return 0;
}

static double med_hpo(const suite *S, int f, int k, int a, int b) {
    return regret_percentile(S->reg[f][k][a][b], S->n_seeds, 50);
}

static double med_peer(const suite *S, int f, int k, int p, int b) {
    if (S->peer_n[f][k][p][b] != S->n_seeds) return NAN;
    return regret_percentile(S->peer[f][k][p][b], S->n_seeds, 50);
}

static double ratio(const suite *S, int f, int k, int a, int b) {
    double o = med_peer(S, f, k, algo_peer[a], b);
    if (isnan(o)) return NAN; /* no peer (fmax would take the floor for it) */
    return fmax(med_hpo(S, f, k, a, b), FLOOR) / fmax(o, FLOOR);
}

/* The paired bootstrap's 90% interval of a cell's ratio: the seeds drawn
 * with replacement, the same draw on both sides (seed s is instance s + 1
 * on both), the ratio of the two medians of each draw (floored as ratio()
 * does), its 5th and 95th percentiles over BOOT_DRAWS draws. It says which
 * cells are beyond a threshold by more than the seeds' noise: with
 * heavy-tailed regrets the median of 40 seeds moves by 2x between two
 * equal samplers. Deterministic: the draws come from a fixed seed. */
#define BOOT_DRAWS 1000
static void ratio_ci(const suite *S, int f, int k, int a, int b, double *lo, double *hi) {
    int n = S->n_seeds, p = algo_peer[a];
    double h[REGRET_MAX_SEEDS], o[REGRET_MAX_SEEDS], r[BOOT_DRAWS];
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)(f * 131 + k * 17 + a * 7 + b);
    for (int d = 0; d < BOOT_DRAWS; d++) {
        for (int i = 0; i < n; i++) {
            int s = (int)(uniform(&rng) * n);
            h[i] = fmax(S->reg[f][k][a][b][s], FLOOR);
            o[i] = fmax(S->peer[f][k][p][b][s], FLOOR);
        }
        r[d] = regret_percentile(h, n, 50) / regret_percentile(o, n, 50);
    }
    *lo = regret_percentile(r, BOOT_DRAWS, 5);
    *hi = regret_percentile(r, BOOT_DRAWS, 95);
}

/* The interval's checks, on made-up regrets (log-uniform over 4 decades):
 * hpo exactly 3x the peer on every seed gives 3..3; ten cells where both
 * sides are independent draws of one distribution give intervals that hold
 * 1 (but for about one in ten: 90% intervals); with 4x the seeds they
 * are narrower. */
static int selftest_interval(suite *S) {
    memset(S, 0, sizeof *S);
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    int bad = 0, misses = 0, narrower = 0, cells = 10, a = 1; /* tpe against optuna's tpe */
    double lo, hi, width[2][10];
    for (int pass = 0; pass < 2; pass++) {
        S->n_seeds = pass ? 160 : 40;
        for (int s = 0; s < S->n_seeds; s++) {
            double v = pow(10.0, 4.0 * uniform(&rng) - 2.0);
            S->reg[0][0][a][0][s] = 3.0 * v;
            S->peer[0][0][algo_peer[a]][0][s] = v;
            for (int f = 1; f <= cells; f++) {
                S->reg[f][0][a][0][s] = pow(10.0, 4.0 * uniform(&rng) - 2.0);
                S->peer[f][0][algo_peer[a]][0][s] = pow(10.0, 4.0 * uniform(&rng) - 2.0);
            }
        }
        for (int f = 0; f <= cells; f++) S->peer_n[f][0][algo_peer[a]][0] = S->n_seeds;
        ratio_ci(S, 0, 0, a, 0, &lo, &hi);
        if (fabs(lo - 3.0) > 1e-12 || fabs(hi - 3.0) > 1e-12) {
            printf("interval of a ratio of exactly 3: %.17g..%.17g\n", lo, hi);
            bad++;
        }
        for (int f = 1; f <= cells; f++) {
            ratio_ci(S, f, 0, a, 0, &lo, &hi);
            misses += !(lo <= 1.0 && 1.0 <= hi);
            width[pass][f - 1] = hi / lo;
        }
    }
    for (int f = 0; f < cells; f++) narrower += width[1][f] < width[0][f];
    /* 20 intervals of 90%: 2 misses expected, more than 5 has odds of 1% */
    if (misses > 5 || narrower < cells - 1) bad++;
    printf("bootstrap interval: a 3x ratio gives 3..3; equal samplers: %d of %d intervals miss "
           "1; 160 seeds narrower than 40 in %d of %d cells (width %.2fx at 40 seeds, "
           "%.2fx at 160, the first cell); %d failures\n",
           misses, 2 * cells, narrower, cells, width[0][0], width[1][0], bad);
    return bad ? 1 : 0;
}

/* the cells of budget b whose ratio is beyond RATIO_LIMIT, each with its
 * bootstrap interval; returns how many, and in *significant how many of
 * them have the whole interval beyond it (NULL: printed, not counted) */
#define RATIO_LIMIT 1.5
static int cells_beyond(const suite *S, int a, int b, int half, int *significant) {
    int n = 0;
    if (significant) *significant = 0;
    for (int i = 0; i < S->n_fids; i++) {
        int fid = S->fids[i];
        if ((half == 1 && fid % 2 == 0) || (half == 2 && fid % 2 == 1)) continue;
        for (int k = 0; k < S->n_dims; k++) {
            double x = ratio(S, fid - 1, k, a, b), lo, hi;
            if (!(x > RATIO_LIMIT)) continue;
            n++;
            ratio_ci(S, fid - 1, k, a, b, &lo, &hi);
            if (significant) *significant += lo > RATIO_LIMIT;
            else
                printf("  %-9s f%d %s D=%d: %.3g (90%% interval %.3g..%.3g)%s\n", algo_names[a],
                       fid, bench_bbob_name(fid), S->dims[k], x, lo, hi,
                       lo > RATIO_LIMIT ? " beyond the seeds' noise" : "");
        }
    }
    return n;
}

static void print_table(const suite *S, int b) {
    printf("\nn=%d: median simple regret over seeds %d..%d (instance = seed + 1); ratio = hpo / "
           "peer (floored at %g)\n  %-22s", S->budgets[b], S->seed0, S->seed0 + S->n_seeds - 1,
           FLOOR, "function");
    for (int a = 0; a < N_ALGOS; a++)
        if (S->ran[a]) printf(" %9.9s", algo_names[a]);
    for (int p = 0; p < N_PEERS; p++)
        if (S->have_peer[p]) printf("  opt.%-5s", peer_names[p]);
    printf(" |");
    for (int a = 1; a < N_ALGOS; a++)
        if (S->ran[a]) printf(" %9.9s", algo_names[a]);
    printf("\n");
    for (int i = 0; i < S->n_fids; i++)
        for (int k = 0; k < S->n_dims; k++) {
            int f = S->fids[i] - 1;
            char label[32];
            snprintf(label, sizeof label, "f%d %s D=%d", f + 1, bench_bbob_name(f + 1),
                     S->dims[k]);
            printf("  %-22s", label);
            for (int a = 0; a < N_ALGOS; a++)
                if (S->ran[a]) printf(" %9.3g", med_hpo(S, f, k, a, b));
            for (int p = 0; p < N_PEERS; p++)
                if (S->have_peer[p]) printf(" %10.3g", med_peer(S, f, k, p, b));
            printf(" |");
            for (int a = 1; a < N_ALGOS; a++) {
                double r = ratio(S, f, k, a, b);
                if (!S->ran[a]) continue;
                if (isnan(r)) printf(" %9s", "n/a");
                else printf(" %9.3g", r);
            }
            printf("\n");
        }
    printf("  cells with a ratio beyond %.1f, and its paired-bootstrap interval over the seeds:\n",
           RATIO_LIMIT);
    int any = 0;
    for (int a = 0; a < N_ALGOS; a++)
        if (S->ran[a] && S->have_peer[algo_peer[a]]) any += cells_beyond(S, a, b, 0, NULL);
    if (!any) printf("  none\n");
}

/* per algorithm: median, worst and wins of its ratios over the functions of
 * a half (0: all, 1: odd ids, 2: even ids) and every dimension */
static void print_summary(const suite *S, int b) {
    static const char *halves[] = {"all", "odd f (tuning)", "even f (held out)"};
    printf("\nn=%d: ratio of median regrets hpo / peer over functions x dims: median [worst] "
           "wins (ratio < 1), cells beyond %.1f (of them, beyond it by more than the seeds' "
           "noise: the 90%% interval)\n  %-24s",
           S->budgets[b], RATIO_LIMIT, "algorithm / peer");
    for (int h = 0; h < 3; h++) printf(" %34s", halves[h]);
    printf("\n");
    for (int a = 0; a < N_ALGOS; a++) {
        if (!S->ran[a] || !S->have_peer[algo_peer[a]]) continue;
        char label[48];
        snprintf(label, sizeof label, "%s / optuna %s", algo_names[a], peer_names[algo_peer[a]]);
        printf("  %-24s", label);
        for (int h = 0; h < 3; h++) {
            double r[NF * MAX_DIMS];
            int n = 0, wins = 0;
            for (int i = 0; i < S->n_fids; i++) {
                int fid = S->fids[i];
                if ((h == 1 && fid % 2 == 0) || (h == 2 && fid % 2 == 1)) continue;
                for (int k = 0; k < S->n_dims; k++) {
                    double x = ratio(S, fid - 1, k, a, b);
                    if (isnan(x)) continue;
                    wins += x < 1.0;
                    r[n++] = x;
                }
            }
            char c[96] = "n/a";
            if (n > 0) {
                /* the median of up to 96 ratios: sorted copy, middle */
                double worst = r[0], med;
                for (int j = 1; j < n; j++) worst = fmax(worst, r[j]);
                for (int j = 1; j < n; j++) /* insertion sort */
                    for (int m = j; m > 0 && r[m - 1] > r[m]; m--) {
                        double t = r[m];
                        r[m] = r[m - 1];
                        r[m - 1] = t;
                    }
                med = n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
                int sig, beyond = cells_beyond(S, a, b, h, &sig);
                snprintf(c, sizeof c, "%.3g [%.3g] %d/%d >%.1f:%d(%d)", med, worst, wins, n,
                         RATIO_LIMIT, beyond, sig);
            }
            printf(" %34s", c);
        }
        printf("\n");
    }
}

static FILE *start_peer(const suite *S, const char *algos, int jobs, char *tmpcsv) {
    char samplers[64] = "", dims[64] = "", budgets[64] = "", fids[128] = "", cmd[1024];
    for (int p = 0; p < N_PEERS; p++) {
        int need = 0;
        for (int a = 0; a < N_ALGOS; a++) need |= algo_peer[a] == p && regret_has(algos, algo_names[a]);
        if (!need) continue;
        if (*samplers) strcat(samplers, ",");
        strcat(samplers, peer_names[p]);
    }
    for (int k = 0; k < S->n_dims; k++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), k ? ",%d" : "%d", S->dims[k]);
    for (int b = 0; b < S->n_budgets; b++)
        snprintf(budgets + strlen(budgets), sizeof budgets - strlen(budgets), b ? ",%d" : "%d",
                 S->budgets[b]);
    for (int i = 0; i < S->n_fids; i++)
        snprintf(fids + strlen(fids), sizeof fids - strlen(fids), i ? ",%d" : "%d", S->fids[i]);
    int fd = mkstemp(tmpcsv);
    if (fd < 0) return NULL;
    close(fd);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s/optuna_bbob.py' --lib '%s' --dims %s --seeds %d --seed0 %d "
             "--budgets %s --samplers %s --functions %s --variant %s --jobs %d --csv %s",
             bench_peers_dir(), lib_path(), dims, S->n_seeds, S->seed0, budgets, samplers, fids,
             variant_names[S->variant], jobs, tmpcsv);
    printf("optuna: %s\n", cmd);
    fflush(stdout);
    return popen(cmd, "r");
}

static int run_hpo(suite *S, const char *algos, int startup, FILE *csv) {
    int n_trials = S->budgets[S->n_budgets - 1];
    double traj[2048];
    for (int a = 0; a < N_ALGOS; a++) {
        if (!(S->ran[a] = regret_has(algos, algo_names[a]))) continue;
        double t0 = hpo_monotonic();
        for (int i = 0; i < S->n_fids; i++)
            for (int k = 0; k < S->n_dims; k++) {
                int D = S->dims[k];
                json_t *space = S->variant == V_MIXED ? mixed_space(D) : box_space(D);
                for (int s = 0; s < S->n_seeds; s++) {
                    int fid = S->fids[i], seed = S->seed0 + s;
                    bench_bbob *f = bench_bbob_new(fid, D, (unsigned)seed + 1);
                    problem pb = {f, D, S->variant, (unsigned)seed + 1};
                    double sec;
                    int rc = f ? regret_run_space(space, eval_problem, &pb, bench_bbob_fopt(f),
                                                  algo_ids[a], (uint64_t)seed, startup, a == 3,
                                                  n_trials, traj, &sec)
                               : HPO_ENOMEM;
                    bench_bbob_free(f);
                    if (rc < 0) {
                        fprintf(stderr, "f%d D=%d %s seed %d: %s\n", fid, D, algo_names[a], seed,
                                hpo_strerror(rc));
                        json_decref(space);
                        return rc;
                    }
                    for (int b = 0; b < S->n_budgets; b++) {
                        S->reg[fid - 1][k][a][b][s] = traj[S->budgets[b] - 1];
                        if (csv)
                            fprintf(csv, "%d,%d,hpo-%s,%d,%d,%.10g\n", fid, D, algo_names[a],
                                    S->budgets[b], seed, traj[S->budgets[b] - 1]);
                    }
                }
                json_decref(space);
            }
        fprintf(stderr, "  done hpo %s (%.1f s)\n", algo_names[a], hpo_monotonic() - t0);
    }
    return 0;
}

int regret_bbob_main(int argc, char **argv) {
    static suite S;
    const char *algos = "random,tpe,bayesian,cmaes,evolution", *csv_path = NULL, *peer_csv = NULL;
    int startup = -1, use_optuna = 1, peer_jobs = 1, rc = 0;
    memset(&S, 0, sizeof S);
    S.n_dims = parse_ints("2,5,10", S.dims, MAX_DIMS, 2, BENCH_BBOB_MAX_DIM);
    S.n_budgets = parse_ints("25,50,100", S.budgets, MAX_BUDGETS, 1, 2048);
    S.n_seeds = 5;
    S.n_fids = NF;
    for (int i = 0; i < NF; i++) S.fids[i] = i + 1;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--selftest")) return selftest() | selftest_interval(&S);
        if (!strcmp(argv[i], "--check-peer")) return check_peer(S.dims, S.n_dims);
        if (!strcmp(argv[i], "--no-optuna")) {
            use_optuna = 0;
            continue;
        }
        if (!v) goto usage;
        i++;
        if (!strcmp(argv[i - 1], "--suite")) continue;
        else if (!strcmp(argv[i - 1], "--dims"))
            S.n_dims = parse_ints(v, S.dims, MAX_DIMS, 2, BENCH_BBOB_MAX_DIM);
        else if (!strcmp(argv[i - 1], "--budgets"))
            S.n_budgets = parse_ints(v, S.budgets, MAX_BUDGETS, 1, 2048);
        else if (!strcmp(argv[i - 1], "--functions"))
            S.n_fids = parse_ints(v, S.fids, NF, 1, NF);
        else if (!strcmp(argv[i - 1], "--seeds"))
            S.n_seeds = atoi(v);
        else if (!strcmp(argv[i - 1], "--seed0"))
            S.seed0 = atoi(v);
        else if (!strcmp(argv[i - 1], "--peer-jobs"))
            peer_jobs = atoi(v);
        else if (!strcmp(argv[i - 1], "--peer-csv"))
            peer_csv = v;
        else if (!strcmp(argv[i - 1], "--tuner")) {
            json_error_t je;
            json_decref(regret_tuner);
            if (!(regret_tuner = json_loads(v, 0, &je))) {
                fprintf(stderr, "--tuner: %s\n", je.text);
                goto usage;
            }
        }
        else if (!strcmp(argv[i - 1], "--algos"))
            algos = v;
        else if (!strcmp(argv[i - 1], "--startup"))
            startup = atoi(v);
        else if (!strcmp(argv[i - 1], "--csv"))
            csv_path = v;
        else if (!strcmp(argv[i - 1], "--variant")) {
            S.variant = -1;
            for (int k = 0; k < N_VARIANTS; k++)
                if (!strcmp(v, variant_names[k])) S.variant = k;
            if (S.variant < 0) goto usage;
        } else if (!strcmp(argv[i - 1], "--tpe-max-components"))
            regret_tpe_max_components = atoi(v);
        else
            goto usage;
    }
    if (S.n_dims < 1 || S.n_budgets < 1 || S.n_fids < 1 || S.n_seeds < 1 ||
        S.n_seeds > REGRET_MAX_SEEDS || S.seed0 < 0 || peer_jobs < 1 || peer_jobs > 64)
        goto usage;
    for (int b = 1; b < S.n_budgets; b++)
        if (S.budgets[b] <= S.budgets[b - 1]) goto usage;

    if (peer_csv) { /* the peer's figures of an earlier run (--csv), not run again */
        use_optuna = 0;
        if (read_peer_csv(peer_csv, &S) < 0) {
            fprintf(stderr, "--peer-csv %s: cannot read it\n", peer_csv);
            return 1;
        }
        for (int p = 0; p < N_PEERS; p++)
            for (int i = 0; i < S.n_fids; i++)
                S.have_peer[p] |= S.peer_n[S.fids[i] - 1][0][p][0] > 0;
        printf("optuna: the peer's regrets are read from %s (an earlier run), not measured now\n",
               peer_csv);
    }
    /* both sides must see the same functions: the peer's values at random
     * points against ours, before anything is measured */
    if (use_optuna && check_peer(S.dims, S.n_dims)) return 1;
    char tmpcsv[64] = "/tmp/hpo_optuna_bbob_XXXXXX";
    FILE *py = use_optuna ? start_peer(&S, algos, peer_jobs, tmpcsv) : NULL;
    if (use_optuna && !py) fprintf(stderr, "cannot start optuna_bbob.py; continuing without it\n");
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv) fprintf(csv, "fid,dim,sampler,budget,seed,regret\n");
    double t0 = hpo_monotonic();
    rc = run_hpo(&S, algos, startup, csv);
    double t_hpo = hpo_monotonic() - t0;
    if (py) {
        char line[512];
        while (fgets(line, sizeof line, py)) fputs(line, stderr); /* its progress */
        int st = pclose(py);
        if (st != 0 || read_peer_csv(tmpcsv, &S) < 0)
            fprintf(stderr, "optuna_bbob.py failed (status %d); its columns are n/a\n", st);
        for (int p = 0; p < N_PEERS; p++)
            for (int i = 0; i < S.n_fids; i++)
                S.have_peer[p] |= S.peer_n[S.fids[i] - 1][0][p][0] > 0;
        if (csv) { /* the peer's rows too, one file for both sides */
            FILE *in = fopen(tmpcsv, "r");
            if (in && fgets(line, sizeof line, in))
                while (fgets(line, sizeof line, in)) fputs(line, csv);
            if (in) fclose(in);
        }
        unlink(tmpcsv);
    }
    if (csv) fclose(csv);
    if (rc < 0) return 1;
    printf("\nBBOB suite (%s): %d functions x D in {", variant_names[S.variant], S.n_fids);
    for (int k = 0; k < S.n_dims; k++) printf(k ? ",%d" : "%d", S.dims[k]);
    printf("} on [-5,5]^D, %d seeds, %d trials per run; hpo's tuners took %.0f s wall\n",
           S.n_seeds, S.budgets[S.n_budgets - 1], t_hpo);
    for (int b = 0; b < S.n_budgets; b++) print_table(&S, b);
    for (int b = 0; b < S.n_budgets; b++) print_summary(&S, b);
    return 0;
usage:
    fprintf(stderr,
            "usage: %s --suite bbob [--dims 2,5,10] [--seeds N<=%d] [--budgets 25,50,100 "
            "(increasing)] [--algos random,tpe,bayesian,bayesian-det,cmaes,evolution] "
            "[--functions 1,..,24] [--variant noiseless|noisy-gauss|noisy-uniform|noisy-cauchy|"
            "mixed] [--startup N] [--no-optuna] [--csv FILE] [--seed0 S] [--peer-csv FILE] "
            "[--peer-jobs N] "
            "[--tuner JSON] [--tpe-max-components N] | --selftest | "
            "--check-peer\n",
            argv[0], REGRET_MAX_SEEDS);
    return 2;
}
