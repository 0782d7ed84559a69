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
/* a short name ("sphere", "ellipsoid", ...) of fid 1..24, else "?" */
const char *bench_bbob_name(int fid);

#endif
