/*
 * bbob.h - the 24 noiseless BBOB functions (COCO's "bbobdocfunctionsdef":
 * f1 sphere .. f24 Lunacek bi-Rastrigin) on [-5, 5]^D, one instance per
 * (function, dimension, instance number).
 *
 * Design notes
 * - Written from the documented formulas (Hansen, Finck, Ros, Auger, "Real-
 *   Parameter Black-Box Optimization Benchmarking 2009: Noiseless Functions
 *   Definitions", and COCO's f_*.c read for the details the text leaves
 *   open: Gallagher's peak scales, Schwefel's x_opt constant, f4's positive
 *   odd coordinates). The transformations are the documented ones: x_opt and
 *   f_opt per instance, rotations R and Q (a seeded Gaussian matrix
 *   orthonormalised by Gram-Schmidt), T_osz, T_asy^beta, Lambda^alpha and
 *   the boundary penalty f_pen.
 * - Instances are drawn from our own seeded generator (splitmix64 + Box-
 *   Muller), not COCO's, so instance k here is not COCO's instance k; the
 *   distributions are the documented ones (x_opt uniform in [-4, 4]^D,
 *   f_opt = a Cauchy draw rounded to 2 decimals, clipped to [-1000, 1000]).
 * - ONE implementation serves hpo's benchmark and Optuna's peer: this file
 *   is built as the shared library libhpo_bbob.so that bench_tuner_regret
 *   links and tests/bench/peers/optuna_bbob.py loads with ctypes (standard
 *   library only), so both sides are judged on the same code, bit for bit;
 *   a Python transcription would have to be kept equal by hand. Hence the
 *   plain C ABI: an opaque handle, doubles and ints only, self-contained
 *   (no hpo library inside: the tuners' static libraries are not PIC).
 * - Stateless after _new: bench_bbob_eval is pure and thread-safe.
 * - Two variants built on the same functions, for the same reason in the
 *   same library: the noise models of the BBOB noisy testbed (Hansen, Finck,
 *   Ros, Auger, "Real-Parameter Black-Box Optimization Benchmarking 2009:
 *   Noisy Functions Definitions", section 2, at its "severe" settings) and a
 *   mixed space's decoding (bench_mixed_coord). The noise of an evaluation
 *   is a pure function of (instance, model, evaluation number), so both
 *   sides draw the same noise for their k-th trial.
 */
#ifndef HPO_BENCH_BBOB_H
#define HPO_BENCH_BBOB_H

#define BENCH_BBOB_N_FUNCTIONS 24
#define BENCH_BBOB_MAX_DIM 40

typedef struct bench_bbob bench_bbob;

/* fid 1..24, dim 2..BENCH_BBOB_MAX_DIM, any instance number; NULL when out
 * of range or out of memory. */
bench_bbob *bench_bbob_new(int fid, int dim, unsigned long long instance);
void bench_bbob_free(bench_bbob *f);
/* f(x) for x of f's dimension (any real x: outside [-5, 5] the documented
 * penalty applies where the function has one) */
double bench_bbob_eval(const bench_bbob *f, const double *x);
double bench_bbob_fopt(const bench_bbob *f);
/* copies the minimiser x_opt (dim values) into x */
void bench_bbob_xopt(const bench_bbob *f, double *x);
int bench_bbob_dim(const bench_bbob *f);
/* The noise models, applied as the testbed does to f - f_opt when that is
 * at least 1e-8 (below it the value is noiseless):
 *   GAUSS   f * exp(beta N(0,1)), beta = 1
 *   UNIFORM f * U^beta * max(1, (1e9 / (f + 1e-199))^(alpha U')),
 *           alpha = 0.49 + 1/D, beta = 1
 *   CAUCHY  f + alpha max(0, 1000 + [U < p] N / (|N'| + 1e-199)),
 *           alpha = 1, p = 0.2
 * plus 1.01e-8, then f_opt is added back. */
enum { BENCH_NOISE_NONE = 0, BENCH_NOISE_GAUSS, BENCH_NOISE_UNIFORM, BENCH_NOISE_CAUCHY };
/* f(x) under noise model `model` for evaluation number k (0, 1, ...) of a
 * run on instance `instance`; *truth (when not NULL) gets the noiseless
 * f(x). model BENCH_NOISE_NONE returns f(x). */
double bench_bbob_eval_noisy(const bench_bbob *f, const double *x, int model,
                             unsigned long long instance, unsigned long long k, double *truth);
/* The mixed space of coordinate i (its kind is i % 4), mapped onto
 * [-5, 5]:
 *   0: int in [-5, 5]                      x = v
 *   1: log float in [1e-3, 1e2]            x = 2 log10(v) + 1
 *   2: choice of the numbers -5, -4, .., 5 x = v
 *   3: choice mode {fine, coarse}; fine: float in [-5, 5], coarse: int in
 *      [-4, 4] step 2 (each active only under its mode)   x = v
 * bench_mixed_coord returns x for coordinate i given the active value v. */
double bench_mixed_coord(int i, double v);
/* a short name ("sphere", "ellipsoid", ...) of fid 1..24, else "?" */
const char *bench_bbob_name(int fid);

#endif
