/*
 * cma.h - the CMA-ES math behind the "cmaes" tuner: a (mu/mu_w, lambda)-CMA-ES
 * with active (negative) weights as in Hansen's tutorial ("The CMA Evolution
 * Strategy: A Tutorial", arXiv:1604.00772, 2016, the equations the `cmaes`
 * Python library that Optuna's CmaEsSampler uses implements), the margin of
 * "CMA-ES with Margin" (Hamano et al., GECCO 2022) for discrete coordinates,
 * and the stopping rules that trigger IPOP restarts.
 *
 * Design notes
 * - Works on raw arrays in the encoded space: n coordinates, each in [0, 1].
 *   tuners/cmaes.c does the encoding of a tun_space, the generations and the
 *   restarts; this file knows nothing of trials.
 * - A coordinate is continuous (n_values 0) or discrete with n_values bins
 *   partitioning [0, 1]: equal widths (linear ints, stepped floats) or the
 *   log-spaced bins [ln(v - 1/2), ln(v + 1/2)] of a log int, rescaled. A
 *   sample's discrete coordinate is read as the bin of m_i + A_i (x_i - m_i)
 *   (A_i is the margin's scale, 1 for continuous ones); continuous
 *   coordinates are resampled until inside [0, 1] (at most 10 n times, then
 *   clipped), as cmaes' ask does.
 * - Telling discrete values: cmaes' CMAwM is told the raw samples (Optuna
 *   keeps them in trial system attributes); hpo keeps only the values, so
 *   the caller tells tun_cma_bin_point, the expected raw sample given its
 *   bin. The centre of the bin instead would tell a sample that crossed
 *   into a neighbour a whole bin width away, with y = width / sigma huge
 *   once sigma is small, and the step size explodes.
 * - The margin: after every update, for every discrete coordinate with two
 *   or more values, the probability that a sample leaves the bin holding the
 *   mean is kept at least alpha = 1 / (n lambda) (the library's default):
 *   in an end bin by moving the mean toward its one threshold, in an inner
 *   bin by floors of alpha/2 on each tail, realised by setting A_i and m_i.
 * - Eigendecomposition: LAPACK's dsyev (the same LAPACKE that the GP's
 *   Cholesky uses), after each update; B is row-major (column j is the j-th
 *   eigenvector), D the square roots of the eigenvalues (negative ones
 *   clamped to 1e-8, and C rebuilt as B D^2 B^T as cmaes does).
 * - Deterministic: the only randomness is the rng given to tun_cma_sample.
 *   Not thread-safe; a tun_cma owns its arrays (_init/_clear).
 */
#ifndef HPO_TUNERS_CMA_H
#define HPO_TUNERS_CMA_H

#include <stdint.h>

#include "hpo.h"
#include "rng.h"

/* The largest population an IPOP restart doubles up to. */
#define TUN_CMA_MAX_LAMBDA 4096

typedef struct tun_cma_dim {
    int64_t n_values; /* 0: continuous; k >= 1: k bins */
    int log;          /* log-int bins: values low .. low + k - 1 */
    double low;       /* log: the first value */
} tun_cma_dim;

typedef struct tun_cma {
    int n, lambda, mu;
    double *w;                 /* lambda recombination weights, best first */
    double mu_eff, c1, cmu, cs, ds, cc, chi_n;
    double sigma, sigma0;
    double *m, *C, *B, *D;     /* mean; n x n covariance, eigenvectors; sqrt eigenvalues */
    double *ps, *pc;           /* evolution paths */
    double *A;                 /* margin scales (1 for continuous coordinates) */
    tun_cma_dim *dims;         /* n coordinates */
    double margin;             /* alpha */
    int g;                     /* generations told */
    int funhist_term;          /* 10 + ceil(30 n / lambda) */
    double *funhist;           /* 2 * funhist_term: best and worst of recent generations */
    double tolx;               /* 1e-12 sigma0 */
} tun_cma;

/* Sets up a fresh state: mean m0 (n values in [0, 1]), step size sigma0 > 0,
 * C = I, lambda >= 2. dims may be NULL (all continuous). HPO_EINVAL for a bad
 * argument, HPO_EINTERNAL when LAPACK fails. */
int tun_cma_init(tun_cma *c, int n, int lambda, const double *m0, double sigma0,
                 const tun_cma_dim *dims);
void tun_cma_clear(tun_cma *c);
/* The default population 4 + floor(3 ln n). */
int tun_cma_default_lambda(int n);

/* One sample x ~ N(m, sigma^2 C) (continuous coordinates inside [0, 1]). */
void tun_cma_sample(const tun_cma *c, hpo_rng *rng, double *x);
/* The bin (0 .. n_values-1) that coordinate i of sample x falls in, through
 * the margin's scale; -1 for a continuous coordinate. */
int64_t tun_cma_bin(const tun_cma *c, int i, double xi);
/* The coordinate to tell for a discrete coordinate i whose sample fell in
 * bin j, when the raw sample is not kept: the mean of N(m_i, sigma^2 C_ii)
 * restricted to the raw values that the margin's scale maps into bin j
 * (the end bins open-ended); the nearest end of that interval when its
 * probability underflows. */
double tun_cma_bin_point(const tun_cma *c, int i, int64_t j);
/* Bin geometry: edge j (0 .. k) of a discrete coordinate, and the bin of u. */
double tun_cma_dim_edge(const tun_cma_dim *d, int64_t j);
int64_t tun_cma_dim_bin(const tun_cma_dim *d, double u);

/* One generation: lambda points X (row-major, lambda x n) and their values f
 * (minimised; ties broken by row). Updates m, sigma, the paths and C (the
 * tutorial's equations), then the margin, then B and D. HPO_EINVAL for a
 * non-finite value, HPO_EINTERNAL when LAPACK fails (the state is then
 * unchanged). */
int tun_cma_tell(tun_cma *c, const double *X, const double *f);
/* Whether the run should restart: a non-finite state, no progress in the
 * best and worst values over the last funhist_term generations (< 1e-12),
 * the step below tolx in every coordinate, sigma times the largest axis over
 * 1e4, a step that no longer changes a coordinate or a principal axis of the
 * mean, or cond(C) over 1e14. */
int tun_cma_should_stop(const tun_cma *c);

/* The standard normal quantile (inverse CDF) for p in (0, 1). */
double tun_norm_quantile(double p);

#endif
