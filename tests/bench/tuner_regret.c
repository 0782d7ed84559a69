/*
 * tuner_regret.c - sample efficiency of hpo's tuners beside Optuna 3.1's TPE
 * and CmaEsSampler.
 *
 * Every algorithm (random, tpe, bayesian, bayesian-det: bayesian with
 * cfg.deterministic, told the objective has no noise, cmaes and evolution; grid is skipped:
 * these budgets are below any useful grid of a continuous space) runs through the tun_study
 * ask/tell interface (suggest, add RUNNING, finish COMPLETE) on Branin 2D,
 * Hartmann6, Rosenbrock 4D on [-5,10]^4 and Ackley 5D, with the domains and
 * optima of the peer tests/bench/peers/optuna_quality.py. One 100-trial run
 * per seed gives the budgets 25/50/100 as prefixes of best-so-far. Simple regret (best - f*) is
 * printed as median [Q1..Q3] over the seeds (quartiles as numpy's default
 * linear interpolation), beside Optuna's TPE and CmaEsSampler (cmaes' peer;
 * default settings) on the same functions, budgets and seeds: the program
 * starts /usr/bin/python3 PEERS/optuna_quality.py --samplers tpe,cmaes
 * --csv FILE in the background (PEERS: tests/bench/peers, or
 * $HPO_PEERS; lib/bench_peers.h) and reads its CSV.
 *
 *   bench_tuner_regret [--seeds 10] [--algos random,tpe,bayesian,bayesian-det,cmaes,evolution]
 *                      [--problems branin2,hartmann6,rosenbrock4,ackley5]
 *                      [--no-optuna] [--startup N] [--csv FILE] [--seed0 S]
 * (--seed0 shifts our seeds, for tuning on seeds other than the reported
 * ones; the Optuna column is then n/a.)
 *
 * `--suite bbob` runs the 24 BBOB functions instead, beside Optuna's TPE,
 * CmaEsSampler and RandomSampler (lib/regret_bbob.c; lib/regret_bbob.h
 * lists its flags); `--suite classic` (the default) is the run above.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_peers.h"
#include "regret_bbob.h"
#include "hpo.h"
#include "regret.h"
#include "tuners.h"

#define N_TRIALS 100
#define MAX_SEEDS REGRET_MAX_SEEDS
static const int budgets[] = {25, 50, 100};
#define N_BUDGETS 3

/* ---- test functions (as in optuna_quality.py) ---------------------------- */

static double branin(const double *x) {
    double a = 1.0, b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, r = 6.0, s = 10.0,
           t = 1 / (8 * M_PI);
    double u = x[1] - b * x[0] * x[0] + c * x[0] - r;
    return a * u * u + s * (1 - t) * cos(x[0]) + s;
}

static const double H6_A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                  {0.05, 10, 17, 0.1, 8, 14},
                                  {3, 3.5, 1.7, 10, 17, 8},
                                  {17, 8, 0.05, 10, 0.1, 14}};
static const double H6_P[4][6] = {{1312, 1696, 5569, 124, 8283, 5886},
                                  {2329, 4135, 8307, 3736, 1004, 9991},
                                  {2348, 1451, 3522, 2883, 3047, 6650},
                                  {4047, 8828, 8732, 5743, 1091, 381}};
static const double H6_ALPHA[4] = {1.0, 1.2, 3.0, 3.2};

static double hartmann6(const double *x) {
    double s = 0.0;
    for (int i = 0; i < 4; i++) {
        double e = 0.0;
        for (int j = 0; j < 6; j++) {
            double t = x[j] - 1e-4 * H6_P[i][j];
            e += H6_A[i][j] * t * t;
        }
        s += H6_ALPHA[i] * exp(-e);
    }
    return -s;
}

static double rosenbrock4(const double *x) {
    double s = 0.0;
    for (int i = 0; i < 3; i++)
        s += 100.0 * pow(x[i + 1] - x[i] * x[i], 2) + pow(1 - x[i], 2);
    return s;
}

static double ackley5(const double *x) {
    double s2 = 0.0, sc = 0.0;
    for (int i = 0; i < 5; i++) {
        s2 += x[i] * x[i];
        sc += cos(2 * M_PI * x[i]);
    }
    return -20 * exp(-0.2 * sqrt(s2 / 5)) - exp(sc / 5) + 20 + M_E;
}

typedef struct problem {
    const char *name;
    double (*f)(const double *);
    int d;
    double lo[6], hi[6];
    double fstar;
} problem;

static const problem problems[] = {
    {"branin2", branin, 2, {-5, 0}, {10, 15}, 0.397887},
    {"hartmann6", hartmann6, 6, {0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, -3.32237},
    {"rosenbrock4", rosenbrock4, 4, {-5, -5, -5, -5}, {10, 10, 10, 10}, 0.0},
    {"ackley5", ackley5, 5, {-32.768, -32.768, -32.768, -32.768, -32.768},
     {32.768, 32.768, 32.768, 32.768, 32.768}, 0.0},
};
#define N_PROBLEMS 4

/* "bayesian-det": bayesian told the objective is deterministic (cfg.deterministic) */
static const char *algo_names[] = {"random", "tpe", "bayesian", "bayesian-det", "cmaes",
                                   "evolution"};
static const tun_algorithm algo_ids[] = {TUN_RANDOM, TUN_TPE,   TUN_BAYESIAN,
                                         TUN_BAYESIAN, TUN_CMAES, TUN_EVOLUTION};
static const int algo_det[] = {0, 0, 0, 1, 0, 0};
#define N_ALGOS 6

/* Optuna's samplers read from the peer's CSV: the column each is shown in */
static const char *optuna_names[] = {"tpe", "cmaes"};
#define N_OPTUNA 2

/* ---- one run ------------------------------------------------------------ */

static double eval_problem(void *ctx, const double *x) { return ((const problem *)ctx)->f(x); }

static int run_one(const problem *p, tun_algorithm algo, uint64_t seed, int startup,
                   int deterministic, double *traj, double *sec) {
    return regret_run(eval_problem, (void *)p, p->d, p->lo, p->hi, p->fstar, algo, seed, startup,
                      deterministic, N_TRIALS, traj, sec);
}

/* ---- Optuna's side ------------------------------------------------------- */

/* optuna[sampler][problem][budget][seed] from the CSV "problem,sampler,budget,seed,regret" */
static int read_optuna_csv(const char *path,
                           double opt[N_OPTUNA][N_PROBLEMS][N_BUDGETS][MAX_SEEDS],
                           int have[N_OPTUNA][N_PROBLEMS][N_BUDGETS]) {
    FILE *f = fopen(path, "r");
    if (!f) return HPO_EIO;
    char line[256];
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return HPO_EFORMAT;
    }
    while (fgets(line, sizeof line, f)) {
        char prob[64], sampler[32];
        int budget, seed;
        double r;
        if (sscanf(line, "%63[^,],%31[^,],%d,%d,%lf", prob, sampler, &budget, &seed, &r) != 5)
            continue;
        int o = -1;
        for (int k = 0; k < N_OPTUNA; k++)
            if (!strcmp(sampler, optuna_names[k])) o = k;
        if (o < 0 || seed < 0 || seed >= MAX_SEEDS) continue;
        for (int p = 0; p < N_PROBLEMS; p++)
            for (int b = 0; b < N_BUDGETS; b++)
                if (!strcmp(prob, problems[p].name) && budget == budgets[b]) {
                    opt[o][p][b][seed] = r;
                    if (seed + 1 > have[o][p][b]) have[o][p][b] = seed + 1;
                }
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--suite")) {
            if (!strcmp(argv[i + 1], "bbob")) return regret_bbob_main(argc, argv);
            if (strcmp(argv[i + 1], "classic")) {
                fprintf(stderr, "--suite: classic or bbob\n");
                return 2;
            }
        }
    int n_seeds = 10, use_optuna = 1, startup = -1, seed0 = 0;
    const char *algos = "random,tpe,bayesian,bayesian-det,cmaes,evolution";
    const char *probs = "branin2,hartmann6,rosenbrock4,ackley5";
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) n_seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--algos") && i + 1 < argc) algos = argv[++i];
        else if (!strcmp(argv[i], "--problems") && i + 1 < argc) probs = argv[++i];
        else if (!strcmp(argv[i], "--startup") && i + 1 < argc) startup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--seed0") && i + 1 < argc) seed0 = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-optuna")) use_optuna = 0;
        else if (!strcmp(argv[i], "--suite") && i + 1 < argc) i++; /* classic */
        else {
            fprintf(stderr, "usage: %s [--seeds N] [--algos a,b] [--problems p,q] [--startup N] "
                            "[--csv FILE] [--no-optuna] [--seed0 S]\n", argv[0]);
            return 2;
        }
    }
    if (n_seeds < 1 || n_seeds > MAX_SEEDS) n_seeds = 10;
    if (seed0 != 0) use_optuna = 0;

    /* start Optuna in the background: it runs while we do */
    char tmpcsv[64] = "/tmp/hpo_optuna_XXXXXX", cmd[2048];
    FILE *py = NULL;
    if (use_optuna) {
        int fd = mkstemp(tmpcsv);
        if (fd >= 0) close(fd);
        char plist[256] = "";
        for (int p = 0; p < N_PROBLEMS; p++)
            if (regret_has(probs, problems[p].name)) {
                if (*plist) strcat(plist, ",");
                strcat(plist, problems[p].name);
            }
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 '%s/optuna_quality.py' --seeds %d --samplers %s "
                 "--problems %s --csv %s", bench_peers_dir(), n_seeds,
                 regret_has(algos, "cmaes") ? "tpe,cmaes" : "tpe", plist, tmpcsv);
        printf("optuna: %s\n", cmd);
        fflush(stdout);
        py = popen(cmd, "r");
        if (!py) fprintf(stderr, "cannot start optuna_quality.py; continuing without it\n");
    }

    static double reg[N_PROBLEMS][N_ALGOS][N_BUDGETS][MAX_SEEDS];
    static double secs[N_PROBLEMS][N_ALGOS];
    int ran[N_PROBLEMS][N_ALGOS] = {{0}};
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (out) fprintf(out, "problem,sampler,budget,seed,regret\n");
    for (int p = 0; p < N_PROBLEMS; p++) {
        if (!regret_has(probs, problems[p].name)) continue;
        for (int a = 0; a < N_ALGOS; a++) {
            if (!regret_has(algos, algo_names[a])) continue;
            double tsum = 0.0;
            for (int s = 0; s < n_seeds; s++) {
                double traj[N_TRIALS], sec = 0.0;
                int rc = run_one(&problems[p], algo_ids[a], (uint64_t)(seed0 + s), startup,
                                 algo_det[a], traj, &sec);
                if (rc < 0) {
                    fprintf(stderr, "%s/%s seed %d: %s\n", problems[p].name, algo_names[a], s,
                            hpo_strerror(rc));
                    return 1;
                }
                tsum += sec;
                for (int b = 0; b < N_BUDGETS; b++) {
                    reg[p][a][b][s] = traj[budgets[b] - 1];
                    if (out)
                        fprintf(out, "%s,%s,%d,%d,%.10g\n", problems[p].name, algo_names[a],
                                budgets[b], s, traj[budgets[b] - 1]);
                }
            }
            secs[p][a] = tsum;
            ran[p][a] = 1;
            fprintf(stderr, "  done %s %s (%.1f s of suggestions)\n", problems[p].name,
                    algo_names[a], tsum);
        }
    }
    if (out) fclose(out);

    static double opt[N_OPTUNA][N_PROBLEMS][N_BUDGETS][MAX_SEEDS];
    int have[N_OPTUNA][N_PROBLEMS][N_BUDGETS] = {{{0}}};
    if (py) {
        char line[512];
        while (fgets(line, sizeof line, py)) {
        } /* its own table is not needed: the CSV has every seed */
        int st = pclose(py);
        if (st != 0 || read_optuna_csv(tmpcsv, opt, have) < 0)
            fprintf(stderr, "optuna_quality.py failed (status %d); its column is n/a\n", st);
        unlink(tmpcsv);
    }

    printf("\nsimple regret, median [Q1..Q3] over seeds %d..%d, %d trials per run\n", seed0,
           seed0 + n_seeds - 1, N_TRIALS);
    for (int p = 0; p < N_PROBLEMS; p++) {
        if (!regret_has(probs, problems[p].name)) continue;
        printf("\n%s (f* = %g)\n  %-16s", problems[p].name, problems[p].fstar, "sampler");
        for (int b = 0; b < N_BUDGETS; b++) printf("%30s", budgets[b] == 25 ? "n=25" : budgets[b] == 50 ? "n=50" : "n=100");
        printf("   sugg. s\n");
        for (int a = 0; a < N_ALGOS; a++) {
            if (!ran[p][a]) continue;
            printf("  hpo %-12s", algo_names[a]);
            for (int b = 0; b < N_BUDGETS; b++) {
                char c[64];
                regret_cell(c, sizeof c, reg[p][a][b], n_seeds);
                printf("%30s", c);
            }
            printf("   %7.2f\n", secs[p][a]);
        }
        for (int o = 0; o < N_OPTUNA; o++) {
            if (o > 0 && !regret_has(algos, optuna_names[o])) continue;
            printf("  optuna %-9s", optuna_names[o]);
            for (int b = 0; b < N_BUDGETS; b++) {
                char c[64];
                regret_cell(c, sizeof c, opt[o][p][b], have[o][p][b] == n_seeds ? n_seeds : 0);
                printf("%30s", c);
            }
            printf("\n");
        }
    }
    printf("\nratio of medians at n=50, hpo / optuna tpe (goals: bayesian <= 0.5, tpe <= 1.0);"
           " cmaes / optuna cmaes\n");
    printf("  %-12s %10s %10s %13s %10s %10s\n", "function", "tpe", "bayesian", "bayesian-det",
           "evolution", "cmaes");
    for (int p = 0; p < N_PROBLEMS; p++) {
        if (!regret_has(probs, problems[p].name)) continue;
        double o = have[0][p][1] == n_seeds ? regret_percentile(opt[0][p][1], n_seeds, 50) : NAN;
        double oc = have[1][p][1] == n_seeds ? regret_percentile(opt[1][p][1], n_seeds, 50) : NAN;
        printf("  %-12s", problems[p].name);
        static const int cols[] = {1, 2, 3, 5, 4}; /* algo_names indices */
        for (int k = 0; k < 5; k++) {
            int a = cols[k], w = a == 3 ? 13 : 10;
            double peer = a == 4 ? oc : o;
            if (ran[p][a] && peer > 0)
                printf(" %*.3g", w, regret_percentile(reg[p][a][1], n_seeds, 50) / peer);
            else
                printf(" %*s", w, "n/a");
        }
        printf("\n");
    }
    return 0;
}
