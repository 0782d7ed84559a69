/*
 * gp_region.h - the "bayesian" sampler's trust-region step: TuRBO-1
 * (Eriksson et al. 2019, "Scalable Global Optimization via Local Bayesian
 * Optimization") beside the global step, its state replayed from the
 * history.
 *
 * Design notes
 * - gp.c alternates: once TUN_GP_REGION_FROM_STARTUPS x n_startup_trials
 *   trials are finished, every odd trial number is a region step, the even
 *   ones stay global. The global GP smooths what it cannot resolve at the
 *   scale of the whole box (the ripples of Rastrigin are fitted as noise);
 *   a GP fitted near the incumbent sees them at their own scale.
 * - The region: a box centred on the best trial (the incumbent), with side
 *   L * w_k along each active numeric column k, w the global GP's
 *   lengthscales over their geometric mean (longer where the function
 *   varies slowly), clipped to the unit cube; choices and bools are held at
 *   the incumbent's.
 * - L follows TuRBO's rule, replayed over the values in trial order
 *   (tun_gp_region_side), so nothing is kept between calls: 0.8 once the
 *   startup trials are done; doubled (at most 1.6) after 3 improvements in
 *   a row; halved after max(4, d) trials in a row without one; back to 0.8
 *   when it falls below 0.5^7 (TuRBO restarts there).
 * - The local model: a GP (gp_model.h, its own MAP fit) on the residuals
 *   of the global trend at the trials inside the box, and at least the
 *   TUN_GP_REGION_POINTS_PER_DIM * (d + 1) nearest ones in the box's scaled
 *   max-norm; its prediction plus the trend is the posterior. Running
 *   trials are fantasised at its mean (kriging believer), as in gp.c.
 * - TUN_GP_REGION_CANDIDATES uniform points in the box; the one of largest
 *   log EI against the best value that decodes to a configuration not yet
 *   tried wins.
 * Deterministic given the rng; private to tuners/ (gp.c's header has the
 * measurements behind the constants).
 */
#ifndef HPO_TUNERS_GP_REGION_H
#define HPO_TUNERS_GP_REGION_H

#include "gp_space.h"

#define TUN_GP_REGION_FROM_STARTUPS 2
#define TUN_GP_REGION_POINTS_PER_DIM 4
#define TUN_GP_REGION_CANDIDATES 2000
#define TUN_GP_REGION_SIDE_INIT 0.8
#define TUN_GP_REGION_SIDE_MAX 1.6
#define TUN_GP_REGION_SIDE_MIN 0.0078125 /* 0.5^7 */
#define TUN_GP_REGION_SUCCESSES 3

/* What the global step hands the region step. */
typedef struct tun_gp_region_in {
    const tun_study *t;
    const tun_gp_enc *e;
    int n_obs, n_pending;
    const double *U;          /* (n_obs + n_pending) x e->d: observations in trial order, then running */
    const double *y;          /* n_obs values as the global GP sees them (warped, standardised) */
    const double *resid;      /* n_obs residuals of the trend over its scale (y when it is off) */
    const tun_gp_trend *tr;   /* the global trend */
    const double *theta;      /* the global GP's hyperparameters (gp_model.h) */
    int n_startup;
} tun_gp_region_in;

/* Whether trial `number` with n_obs finished trials takes the region step. */
int tun_gp_region_turn(int64_t number, int n_obs, int n_startup);

/* The side L after the values y[0..n) in trial order (see above). */
double tun_gp_region_side(const double *y, int n, int n_startup, int d);

/* The box around center (d = e->d columns) into lo, hi; columns that are
 * not active numeric ones get lo = hi = center. Returns how many columns
 * are free (0: no box). */
int tun_gp_region_box(const tun_gp_enc *e, const tun_space *s, const double *center, const double *theta,
                      double side, double *lo, double *hi);

/* The region step's configuration into x (s->n values). Returns 1 with x
 * set, 0 when it has none (no free column, or every candidate was tried),
 * HPO_ENOMEM or HPO_EINVAL. */
int tun_gp_region_suggest(const tun_gp_region_in *in, hpo_rng *rng, double *x);

#endif
