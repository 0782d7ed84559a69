/*
 * gp_model.h - the Gaussian-process math behind the "bayesian" tuner: a
 * Matern-5/2 ARD kernel on the unit cube, its log marginal likelihood with an
 * analytic gradient, hyperparameter fitting with NLopt, the posterior with
 * input gradients, and numerically stable log expected improvement.
 *
 * Design notes
 * - Works on raw arrays (X: n x d row-major, inputs in [0,1]^d; y: n values
 *   to minimise, standardised by the caller or by tun_gp_init), so it is
 *   testable without a search space. tuners/gp.c does the encoding of a
 *   tun_space, the candidates and the decoding.
 * - Hyperparameters theta (d + 2 doubles) are all logs: theta[k] = log
 *   lengthscale of input k, theta[d] = log output scale (kernel variance),
 *   theta[d+1] = log noise variance. k(x, x') = s2 * m52(r) with
 *   r^2 = sum_k ((x_k - x'_k) / l_k)^2 and m52(r) = (1 + sqrt5 r + 5/3 r^2)
 *   exp(-sqrt5 r); the covariance of the observations is K + noise I.
 * - The fit maximises log marginal likelihood + a log prior (as Optuna 4's
 *   GPSampler: -(0.1/lam + 0.1 lam) on each inverse squared lengthscale
 *   lam = l^-2, Gamma(2, 1) on s2; but Gamma(1.1, 200) on the noise
 *   instead of its Gamma(1.1, 30), which favours low-noise fits: Ackley5's
 *   median regret at 50 trials on tuning seeds went from 6.7 (rate 30) to
 *   about 5.8 (200) and 4.9 (1000); 1000 interpolates noisy data (a noise
 *   variance of 0.09 was fitted as 8e-5), 200 still fits 0.026 there,
 *   test_gp's test_noisy_fit). With fixed_noise > 0 (the tuner's
 *   cfg.deterministic) the noise is not fitted at all. NLopt's L-BFGS
 *   works in log-parameter space from the current theta and a few random
 *   starts inside the bounds. Cholesky factorisations and solves
 *   are LAPACK's (dpotrf/dpotrs/dpotri/dtrtrs), column-major.
 * - Pending trials are handled by the caller with tun_gp_condition
 *   (kriging believer): the points are added with the posterior mean as
 *   their value and a noise of 1e-8 s2, keeping the hyperparameters; the
 *   mean is unchanged and the variance collapses there.
 * - Not thread-safe; a tun_gp owns all its arrays (_init/_close).
 *   Deterministic: the only randomness is the rng passed to tun_gp_fit.
 */
#ifndef HPO_TUNERS_GP_MODEL_H
#define HPO_TUNERS_GP_MODEL_H

#include "hpo.h"
#include "rng.h"

/* Bounds of the log hyperparameters. */
#define TUN_GP_LOG_LS_MIN (-4.6)    /* lengthscale 0.01 */
#define TUN_GP_LOG_LS_MAX (4.6)     /* 100 */
#define TUN_GP_LOG_S2_MIN (-6.9)    /* 0.001 */
#define TUN_GP_LOG_S2_MAX (4.6)     /* 100 */
#define TUN_GP_LOG_NOISE_MIN (-13.815510557964274) /* log 1e-6 */
#define TUN_GP_LOG_NOISE_MAX (0.0)  /* 1 */

typedef struct tun_gp {
    int n, d;
    int n_data;      /* the first n_data rows are observations, the rest fantasies */
    double *X;       /* n x d row-major, in [0,1]^d */
    double *y;       /* n values (standardised units) */
    double *theta;   /* d + 2 log hyperparameters */
    double *L;       /* n x n column-major lower Cholesky of K + noise I */
    double *alpha;   /* (K + noise I)^-1 y */
    double y_best;   /* min of y over the observations (not fantasies) */
    double fixed_noise; /* > 0: tun_gp_fit keeps the noise variance at this value */
} tun_gp;

/* Copies X and y (n >= 1); y is used as given (see tun_gp_standardise).
 * theta starts at the default (lengthscales 0.5, s2 1, noise 1e-4). */
int tun_gp_init(tun_gp *gp, int n, int d, const double *X, const double *y);
void tun_gp_clear(tun_gp *gp);

/* Standardises v[0..n) in place to mean 0 and std 1 (std 1 when constant);
 * finite values up to DBL_MAX give finite results (*std may be inf). */
void tun_gp_standardise(double *v, int n, double *mean, double *std);

/* m52 kernel of one pair of points under theta (noise excluded). */
double tun_gp_kernel(int d, const double *theta, const double *a, const double *b);
/* The n x n kernel matrix (noise excluded), column-major (symmetric). */
void tun_gp_kernel_matrix(int n, int d, const double *X, const double *theta, double *K);

/* Log marginal likelihood of (X, y) under theta, plus the log prior when
 * with_prior; grad (may be NULL) gets d/dtheta. HPO_EINVAL when K + noise I
 * is not positive definite even with jitter. */
int tun_gp_lml(const tun_gp *gp, const double *theta, int with_prior, double *lml,
               double *grad);

/* Maximises lml + prior over theta from the current theta and n_restarts
 * random starts (each at most max_eval evaluations); leaves the best theta
 * factorised (tun_gp_set_theta). */
int tun_gp_fit(tun_gp *gp, hpo_rng *rng, int n_restarts, int max_eval);
/* Sets theta and computes L and alpha. */
int tun_gp_set_theta(tun_gp *gp, const double *theta);

/* Kriging believer: adds m points (m x d) with their posterior means as
 * values, keeps theta, refactorises. y_best is unchanged. */
int tun_gp_condition(tun_gp *gp, int m, const double *Xp);

/* Posterior mean and latent variance at x; dmu and dvar (d doubles each,
 * may be NULL) get their gradients with respect to x. */
void tun_gp_predict(const tun_gp *gp, const double *x, double *mu, double *var, double *dmu,
                    double *dvar);
/* The same for m points at once (Xs m x d row-major); no gradients. */
int tun_gp_predict_batch(const tun_gp *gp, int m, const double *Xs, double *mu, double *var);

/* log h(z), h(z) = phi(z) + z Phi(z), accurate for every finite z (Ament et
 * al. 2023); *dlogh (may be NULL) gets its derivative Phi(z)/h(z). */
double tun_log_h(double z, double *dlogh);
/* log EI for minimisation: log E[max(best - f, 0)], f ~ N(mu, var);
 * gradients with respect to mu and var into dmu, dvar (may be NULL). */
double tun_log_ei(double mu, double var, double best, double *dmu, double *dvar);

/* ---- quadratic trend (gp_trend.c) ----
 * The bayesian sampler's prior mean (universal kriging, with the trend's
 * coefficients plugged in): f(u) = trend(u) + scale * g(u), g the GP of
 * the standardised residuals. trend(u) = b0 + sum_k b_k (u_k - 1/2) +
 * sum_k c_k (u_k - 1/2)^2, the squares only for the columns marked quad
 * (numeric ones) and only with c_k >= 0: a least-squares fit with a ridge
 * of TUN_GP_TREND_RIDGE * n on every coefficient but b0, then the most
 * negative square dropped and the rest refitted until none is negative. A
 * bowl the data support is extrapolated towards its bottom where the
 * stationary GP alone falls back to the mean; a concave direction is left
 * to the GP, so the trend never pushes the search into a corner. Fitted
 * only with at least TUN_GP_TREND_POINTS_PER_FEATURE points per
 * coefficient; otherwise (or when the fit is singular) on = 0 and the
 * functions below leave everything as it is. */
#define TUN_GP_TREND_RIDGE 1e-3
#define TUN_GP_TREND_POINTS_PER_FEATURE 2
typedef struct tun_gp_trend {
    int on;
    int d, p;
    int *feat;     /* p features: 0 the intercept, 1 + k column k, 1 + d + k its square */
    double *beta;  /* their coefficients */
    double scale;  /* RMS of the residuals, which g models in units of it */
} tun_gp_trend;
/* Fits the trend to (U, y) (n points of d columns; quad: d flags) and
 * replaces y by the residuals over scale. HPO_ENOMEM. */
int tun_gp_trend_fit(tun_gp_trend *tr, int n, int d, const double *U, const unsigned char *quad, double *y);
void tun_gp_trend_clear(tun_gp_trend *tr);
/* trend(u); grad (d doubles, may be NULL) its gradient. 0 when off. */
double tun_gp_trend_eval(const tun_gp_trend *tr, const double *u, double *grad);
/* Turns the GP's prediction of g at u (mu, var and their gradients dmu,
 * dvar, which may be NULL) into f's, in place. */
void tun_gp_trend_apply(const tun_gp_trend *tr, const double *u, double *mu, double *var, double *dmu,
                        double *dvar);

/* ---- expected hypervolume improvement (ehvi.c) ----
 * For several objectives (minimised, m <= TUN_MAX_OBJECTIVES): the region
 * below ref that the front does not dominate, cut into disjoint boxes once
 * (tun_ehvi_init), then the exact expected hypervolume improvement of a
 * point whose objectives are independent Gaussians N(mu_k, var_k), as its
 * log, with gradients (tun_ehvi_log). The front's points not strictly
 * below ref in every objective, and dominated ones, are dropped; past
 * 50,000 boxes the front keeps its points of largest exclusive
 * hypervolume, as many as (n + 1)^(m - 1) <= 50,000 allows. */
#define TUN_EHVI_MAX_OBJ 8
typedef struct tun_ehvi {
    int m;
    double ref[TUN_EHVI_MAX_OBJ];
    size_t n_front;
    double *front;          /* n_front rows of m: the points kept */
    int n_boxes;
    double *lo, *hi;        /* n_boxes rows of m: the boxes (lo may be -inf) */
    int *box;               /* per box and objective, lo's and hi's index in grid (-1: -inf) */
    int n_grid[TUN_EHVI_MAX_OBJ];
    double *grid[TUN_EHVI_MAX_OBJ]; /* per objective, the finite bounds, sorted */
    double *lg[TUN_EHVI_MAX_OBJ], *dlm[TUN_EHVI_MAX_OBJ], *dls[TUN_EHVI_MAX_OBJ]; /* work */
    double *term;           /* work: per box */
} tun_ehvi;
/* F: n rows of m (may hold dominated points); ref finite. HPO_EINVAL. */
int tun_ehvi_init(tun_ehvi *e, const double *F, size_t n, int m, const double *ref);
void tun_ehvi_clear(tun_ehvi *e);
/* log EHVI at (mu, var); dmu, dvar (m each, may be NULL) its gradients.
 * -inf only when the region is empty. Uses e's work arrays: one caller at
 * a time. */
double tun_ehvi_log(tun_ehvi *e, const double *mu, const double *var, double *dmu, double *dvar);
/* The naive reference: the mean over n_samples draws of the hypervolume
 * the n points of F gain with one point drawn from N(mu, var)
 * (tun_hypervolume), and its standard error. */
double tun_ehvi_mc_ref(const double *F, size_t n, int m, const double *ref, const double *mu, const double *var,
                       int n_samples, hpo_rng *rng, double *std_err);

#endif
