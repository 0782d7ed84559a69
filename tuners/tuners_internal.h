/*
 * tuners_internal.h - what the algorithms of tuners/ share behind tuners.h: the
 * history a tun_study keeps and the signature every sampler and pruner has.
 *
 * Design notes
 * - Trials are kept in an array indexed by trial number (numbers are dense,
 *   0, 1, 2, ... in a study); rec->present says whether a number is known.
 *   Prior observations (warm start, tun_study_add_prior) come first: the
 *   array holds n_prior of them (rec->prior, complete, the k-th numbered
 *   k - TUN_MAX_PRIORS < 0), then trial `number` at index n_prior + number. Samplers see them
 *   as complete trials; pruners skip them; code comparing a record with a
 *   trial number uses rec->number, never the index.
 * - Values are stored in the minimisation sign: a maximised study's values
 *   are negated by study.c before any algorithm sees them. Intermediate
 *   values likewise.
 * - Samplers get the study read-only and a generator already derived from
 *   (seed, number), and write a full configuration into x (NaN for inactive
 *   parameters). They must be deterministic given those.
 */
#ifndef HPO_TUNERS_INTERNAL_H
#define HPO_TUNERS_INTERNAL_H

#include "cma.h"
#include "rng.h"
#include "tuners.h"

typedef struct tun_trial_rec {
    int present;
    int64_t number;
    tun_trial_state state;
    double *x;            /* space->n values */
    double value;         /* minimisation sign; NaN unless COMPLETE; values[0] */
    double *values;       /* the study's n_obj values, minimisation sign; NULL unless COMPLETE */
    double violation;     /* constraint violation (0 feasible; NaN: none told) */
    int64_t *steps;       /* intermediate values, ordered by step */
    double *step_values;  /* minimisation sign */
    int n_steps, cap_steps;
    int prune_said;       /* the pruner stopped it once: later reports answer prune too */
    int bracket;          /* hyperband: its bracket (tun_hyperband_bracket_of), else 0 */
    int prior;            /* a warm-start observation, not a trial of this study */
} tun_trial_rec;

/* cmaes' state (cmaes.c): the CMA-ES run the history has reached. */
struct tun_cmaes_state {
    int restarts;      /* IPOP restarts so far */
    int n;             /* CMA coordinates (0: random search) */
    int *idx;          /* their parameter indices */
    tun_cma_dim *dims;
    tun_cma cma;
    int64_t pos;       /* the next trial number the walk reads */
    int n_members;     /* complete members of the current generation so far */
    double *X, *f;     /* their encoded points (lambda rows) and values */
};

struct tun_study {
    const tun_space *space;
    tun_config cfg;
    int maximize;          /* the first objective's direction */
    int n_obj;             /* objectives, 1 .. TUN_MAX_OBJECTIVES */
    int obj_max[TUN_MAX_OBJECTIVES]; /* each one's direction */
    tun_trial_rec *trials; /* indexed by number */
    int64_t cap;           /* allocated slots */
    int64_t n_present;     /* priors included */
    int64_t n_prior;       /* warm-start observations at the front */
    /* cmaes: the CMA state of the generations complete so far, a cache of
     * what the history determines (cmaes.c); NULL until the first suggestion */
    struct tun_cmaes_state *cmaes;
};

/* The values of a discrete parameter (int, stepped float, choice, bool) are
 * numbered k = 0 .. n-1 in increasing order (space.c). A continuous float has
 * n = 0. value_at(k) is the encoded value (the int, the float low + k*step
 * kept within [low, high], the choice index, 0/1); index_of is its inverse
 * (-1 when v is not a value; a stepped float matches within 1e-9 relative). */
int64_t tun_param_n_values(const tun_param *p);
double tun_param_value_at(const tun_param *p, int64_t k);
int64_t tun_param_index_of(const tun_param *p, double v);
/* One random value of p, as tun_space_sample draws it. */
double tun_param_sample(const tun_param *p, hpo_rng *rng);

/* The unit encoding of an int or float parameter (unit_scale.c), shared by
 * cmaes and evolution: [0, 1] over its range, in log space where asked; a
 * discrete parameter's values are the centres of the bins of tun_unit_dim
 * (equal bins, or [ln(v - 1/2), ln(v + 1/2)] for a log int: Optuna's
 * transform). decode maps any u (clipped to [0, 1]) to a value of the
 * domain. */
double tun_unit_encode(const tun_param *p, double v);
double tun_unit_decode(const tun_param *p, double u);
void tun_unit_dim(const tun_param *p, tun_cma_dim *d);

/* Upper bound on trial numbers a study accepts (the history is dense). */
#define TUN_MAX_TRIAL_NUMBER 10000000

/* Grid size (conditions respected); saturates at TUN_GRID_MAX + 1. */
#define TUN_GRID_MAX 1000000
uint64_t tun_grid_size(const tun_space *s);

/* Whether a present trial other than `number` has configuration x (NaN
 * equals NaN; random.c). */
int tun_study_has_config(const tun_study *t, int64_t number, const double *x);

/* Samplers (one file each). */
int tun_random_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_grid_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_tpe_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_gp_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_evolution_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_nsga2_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
/* cmaes keeps its cache in t->cmaes (freed by tun_cmaes_state_free). */
int tun_cmaes_suggest(tun_study *t, int64_t number, hpo_rng *rng, double *x);
void tun_cmaes_state_free(struct tun_cmaes_state *s);

/* TPE's ranking (tpe.c), best first, of the trials it models: complete,
 * pruned and running (failed ones are left out). Writes their numbers to
 * order (room for t->n_present), *n_ranked of them; *n_finished (may be
 * NULL) is how many are complete or pruned (they come before the running
 * ones, and gamma splits them); *budget (may be NULL) the step b at which
 * they were compared (the multi-fidelity rule), or -1 for Optuna's rule.
 * HPO_ENOMEM. */
int tun_tpe_rank(const tun_study *t, int64_t *order, int *n_ranked, int *n_finished,
                 int64_t *budget);

/* Hyperband: the bracket (0 = most aggressive, as tun_hyperband_brackets'
 * out[]) of trial `number`, drawn from (seed, number) with probability
 * n_b / sum(n) (pruners.c). */
int tun_hyperband_bracket_of(const tun_study *t, int64_t number);

/* Pruners: whether trial rec, which has just reported (step, value), stops. */
int tun_pruner_decide(const tun_study *t, const tun_trial_rec *rec, int64_t step, int *prune);

#endif
