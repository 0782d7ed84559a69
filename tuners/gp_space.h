/*
 * gp_space.h - what the "bayesian" samplers share (gp.c, one objective;
 * gp_mo.c, several objectives or constraints): a tun_space in the GP's unit
 * cube, the candidate points the acquisition is evaluated on, the local
 * optimiser that polishes the best of them, and the hyperparameter fit on
 * a subset of a long history.
 *
 * Design notes
 * - Encoding: a float or int takes one column, (v - low) / (high - low) or
 *   its log version (ints and stepped floats over [low - step/2, high +
 *   step/2], so every value owns an equal slice); a choice or bool takes one
 *   one-hot column per value. An inactive conditional parameter is encoded
 *   at 0.5 (numeric) or all-zero (one-hot), so trials that share a branch
 *   are close and the others are not. Decoding snaps (tun_space_snap) and
 *   takes the largest one-hot column.
 * - Everything is deterministic given the rng passed in; nothing is kept
 *   between calls. Private to tuners/.
 */
#ifndef HPO_TUNERS_GP_SPACE_H
#define HPO_TUNERS_GP_SPACE_H

#include "gp_model.h"
#include "tuners_internal.h"

typedef struct tun_gp_enc {
    int d;           /* columns */
    int *col;        /* first column of parameter i */
    double *lo, *hi; /* numeric: the encoded range (log-scaled where asked) */
} tun_gp_enc;

/* HPO_ENOMEM */
int tun_gp_enc_init(tun_gp_enc *e, const tun_space *s);
void tun_gp_enc_clear(tun_gp_enc *e);
void tun_gp_encode(const tun_gp_enc *e, const tun_space *s, const double *x, double *u);
void tun_gp_decode(const tun_gp_enc *e, const tun_space *s, const double *u, double *x);
int tun_gp_is_numeric(const tun_param *p);
/* Whether a present trial of t has configuration x (NaN equals NaN). */
int tun_gp_already_tried(const tun_study *t, const double *x);

/* The search and fit settings both samplers (gp.c, gp_mo.c) use: random
 * candidates, perturbations of the best points, L-BFGS polish of the best
 * few; hyperparameters fitted on at most TUN_GP_FIT_MAX_POINTS
 * observations; past TUN_GP_MAX_GP_POINTS, the best and the most recent
 * trials are kept. (gp.c's header has what the tuning of issue 16 tried.) */
#define TUN_GP_N_RANDOM_CANDIDATES 1000
#define TUN_GP_N_TOP_PERTURBED 5
#define TUN_GP_N_PERTURB_EACH 100
#define TUN_GP_N_LOCAL_STARTS 4
#define TUN_GP_LOCAL_MAX_EVAL 40
#define TUN_GP_FIT_RESTARTS 2
#define TUN_GP_FIT_MAX_EVAL 60
#define TUN_GP_FIT_MAX_POINTS 100
#define TUN_GP_MAX_GP_POINTS 600

/* Candidates into C (rows of e->d): n_random random configurations, then
 * for each of the n_base encoded points base[a] n_each Gaussian
 * perturbations of its active numeric columns (sigmas 0.005, 0.02, 0.05,
 * 0.15 in turn, clipped to [0, 1]). Returns the number of rows,
 * n_random + n_base * n_each. */
int tun_gp_candidates(const tun_gp_enc *e, const tun_space *s, hpo_rng *rng, int n_random,
                      const double *const *base, int n_base, int n_each, double *C);

/* An acquisition at the encoded point u; grad (e->d doubles, may be NULL)
 * gets its gradient in u. Maximised. */
typedef double (*tun_gp_acq_fn)(void *data, const double *u, double *grad);
/* A candidate's acquisition value and its row; tun_gp_cmp_cand sorts them
 * best first (ties: the lower row), for qsort. */
typedef struct tun_gp_cand {
    double acq;
    int idx;
} tun_gp_cand;
int tun_gp_cmp_cand(const void *a, const void *b);
/* L-BFGS (NLopt, at most max_eval evaluations) over the numeric columns of
 * the active parameters of u, in place, choices held; returns the value
 * reached, or start_value with u unchanged when it did not improve. */
double tun_gp_local_opt(tun_gp_acq_fn f, void *data, const tun_gp_enc *e, const tun_space *s, double *u,
                        double start_value, int max_eval);

/* Fits gp's hyperparameters by MAP (tun_gp_fit, restarts x max_eval) on at
 * most max_points of its observations (the best half of them, then an even
 * spread of the rest in order) and sets them on the whole gp; fixed_noise
 * as tun_gp.fixed_noise. HPO_ENOMEM, HPO_EINVAL. */
int tun_gp_fit_subset(tun_gp *gp, hpo_rng *rng, double fixed_noise, int max_points, int restarts, int max_eval);

#endif
