/*
 * regret.h - what the tuner-regret benchmarks share (bench_tuner_regret's
 * classic problems in tuner_regret.c and the BBOB suite in regret_bbob.c):
 * one ask/tell run of an hpo tuner on a box-bounded function, and the
 * statistics printed over seeds.
 *
 * Design notes
 * - regret_run drives the tun_study interface exactly as hpod does for a
 *   client (suggest, add RUNNING, finish COMPLETE), n trials, and records
 *   best-so-far minus f* after every trial, so one run gives every budget
 *   as a prefix.
 * - Quartiles are numpy.percentile's default (linear interpolation), the
 *   same as the Optuna peers print.
 */
#ifndef HPO_BENCH_REGRET_H
#define HPO_BENCH_REGRET_H

#include <stdint.h>

#include "tuners.h"

#define REGRET_MAX_DIM 40
#define REGRET_MAX_SEEDS 256

typedef double (*regret_fn)(void *ctx, const double *x);

/* One run: d floats x0..x{d-1} in [lo[i], hi[i]], n trials of algo with
 * seed; traj[k] = best of the first k+1 values - fstar; *sec = seconds
 * spent in suggestions. startup < 0 keeps the tuner's default. Returns 0 or
 * a negative HPO_E* code (printed to stderr). */
int regret_run(regret_fn f, void *ctx, int d, const double *lo, const double *hi, double fstar,
               tun_algorithm algo, uint64_t seed, int startup, int deterministic, int n,
               double *traj, double *sec);

/* The general run regret_run is built on: any space (JSON, borrowed), f
 * gets the tuner's encoded configuration x (space order, NaN inactive) and
 * the trial number k and returns the value the tuner is told, and *truth the
 * value the regret is measured on (the noiseless one; the told value where
 * there is no noise). traj[k] = the truth at the best told value of the
 * first k+1 - fstar: the regret of the configuration the run would
 * recommend. */
typedef double (*regret_space_fn)(void *ctx, const tun_space *space, const double *x, int k,
                                  double *truth);
int regret_run_space(json_t *space_js, regret_space_fn f, void *ctx, double fstar,
                     tun_algorithm algo, uint64_t seed, int startup, int deterministic, int n,
                     double *traj, double *sec);

/* tun_config.tpe_max_components for every later regret_run (0, the
 * default: the tuner's own; bench_tuner_regret --tpe-max-components N). */
extern int regret_tpe_max_components;

/* A "tuner" object (api's keys, tun_config_parse) whose options every later
 * regret_run starts from, the algorithm and seed then set by the run; NULL
 * (the default): the defaults. bench_tuner_regret --tuner JSON, for tuning a
 * default on the tuning half without rebuilding. */
extern json_t *regret_tuner;

/* numpy.percentile(v[:n], q) with linear interpolation (any n; NaN when a
 * copy of more than REGRET_MAX_SEEDS values cannot be allocated) */
double regret_percentile(const double *v, int n, double q);
/* "median [Q1..Q3]" of v[:n], or "n/a" when n <= 0 */
void regret_cell(char *buf, size_t len, const double *v, int n);
/* 1 when name is an item of the comma-separated list */
int regret_has(const char *list, const char *name);

#endif
