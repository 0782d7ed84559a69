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
    double *cons;         /* the study's n_cons constraint values (<= 0 met), when told
                           * (tun_study_finish_cons); NULL otherwise */
    int64_t *steps;       /* intermediate values, ordered by step */
    double *step_values;  /* minimisation sign; several objectives: the first one's */
    double *step_vecs;    /* several objectives: n_obj values per step (minimisation
                           * sign, NaN where a report did not give one); else NULL */
    unsigned char *step_late; /* per step: 1 when it was reported after a higher
                               * step of the trial (out of order): it is no rung's
                               * value (pruners.c); a replay sends steps in order */
    int n_steps, cap_steps;
    int prune_said;       /* the pruner stopped it once: later reports answer prune too */
    int said_at_rung;     /* asha, hyperband: 1 + the rung (r0 + k) it was stopped at; 0 none,
                           * or not known (a replay of a report stored without it). A
                           * report that reached several rungs and was stopped at one
                           * gives no value at the higher ones (pruners.c) */
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
    int64_t gen_start; /* the history index where the current generation began:
                        * the trial there is the mean (cmaes.c) */
};

struct tun_study {
    const tun_space *space;
    tun_config cfg;
    int maximize;          /* the first objective's direction */
    int n_obj;             /* objectives, 1 .. TUN_MAX_OBJECTIVES */
    int obj_max[TUN_MAX_OBJECTIVES]; /* each one's direction */
    int constrained;       /* a complete trial told a violation (sticky) */
    int n_cons;            /* constraint values per complete trial (tun_study_finish_cons);
                            * 0 until one told them */
    tun_trial_rec *trials; /* indexed by number */
    int64_t cap;           /* allocated slots */
    int64_t n_present;     /* priors included */
    int64_t n_prior;       /* warm-start observations at the front */
    /* cmaes: the CMA state of the generations complete so far, a cache of
     * what the history determines (cmaes.c); NULL until the first suggestion */
    struct tun_cmaes_state *cmaes;
    /* tpe: what the history determines, kept up to date by every add, report
     * and finish (tpe_index.c); NULL until the first suggestion */
    struct tun_tpe_index *tpe;
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


/* Whether a present trial other than `number` has configuration x (NaN
 * equals NaN; random.c). */
int tun_study_has_config(const tun_study *t, int64_t number, const double *x);

/* Samplers (one file each). */
int tun_random_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_grid_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
/* tpe: the fast path keeps t->tpe; _ref is the exact reference (a full
 * ranking and every trial a component, O(n log n) + O(n) per candidate)
 * the tests compare it with. */
int tun_tpe_suggest(tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_tpe_suggest_ref(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_gp_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
/* bayesian with several objectives or constraints (gp_mo.c) */
int tun_gp_mo_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_evolution_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_nsga2_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
int tun_bohb_suggest(const tun_study *t, int64_t number, hpo_rng *rng, double *x);
#define TUN_BOHB_DEFAULT_GAMMA 0.05 /* bohb.c says how it was chosen */
/* cmaes keeps its cache in t->cmaes (freed by tun_cmaes_state_free). */
int tun_cmaes_suggest(tun_study *t, int64_t number, hpo_rng *rng, double *x);
/* Whether cmaes searches parameter p (an unconditional int or float; it
 * draws the others at random), and its first population over space s when
 * popsize is not given. */
int tun_cmaes_searches(const tun_param *p);
int tun_cmaes_default_popsize(const tun_space *s);
void tun_cmaes_state_free(struct tun_cmaes_state *s);

/* TPE's sampling (tpe.c) from a split the caller made (bohb.c): below and
 * above hold nb and na indices into t->trials, each in increasing order;
 * every group samples from the trials of each side where its parameters
 * are active, as tun_tpe_suggest does from its own split; joint: the
 * unconditional parameters as one group (multivariate), else one by one;
 * widen: the candidates are drawn with the below side's numeric bandwidths
 * times it (1: as TPE; BOHB's bandwidth factor), and scored with the
 * bandwidths themselves. HPO_ENOMEM. */
int tun_tpe_sample_split(const tun_study *t, int64_t number, const int64_t *below, int nb,
                         const int64_t *above, int na, int joint, double widen, hpo_rng *rng, double *x);

/* TPE's ranking (tpe.c), best first, of the trials it models: complete,
 * pruned and running (failed ones are left out). Writes their numbers to
 * order (room for t->n_present), *n_ranked of them; *n_finished (may be
 * NULL) is how many are complete or pruned (they come before the running
 * ones, and gamma splits them); *budget (may be NULL) the step b at which
 * they were compared (the multi-fidelity rule), or -1 for Optuna's rule.
 * HPO_ENOMEM. */
int tun_tpe_rank(const tun_study *t, int64_t *order, int *n_ranked, int *n_finished,
                 int64_t *budget);

/* ---- TPE's ranking, piece by piece (tpe_rank.c) ---- */
/* Rank classes, best first. Optuna's rule uses COMPLETE, REPORTED,
 * PRUNED_BARE and RUNNING; the budget rule AT_BUDGET (in COMPLETE's place),
 * REPORTED (the finished trials that stopped before the budget),
 * COMPLETE_BARE (complete without reports), PRUNED_BARE and RUNNING. */
enum { TUN_TPE_COMPLETE = 0, TUN_TPE_AT_BUDGET = 0, TUN_TPE_REPORTED, TUN_TPE_COMPLETE_BARE,
       TUN_TPE_PRUNED_BARE, TUN_TPE_RUNNING };
typedef struct tun_tpe_key {
    int64_t idx;  /* the trial's index in t->trials */
    int cls;      /* TUN_TPE_* */
    double a, b;  /* the sort keys within the class */
} tun_tpe_key;
/* <0, 0, >0: x ranks before, with, after y (ties by trial number) */
int tun_tpe_key_cmp(const tun_tpe_key *x, const tun_tpe_key *y);
/* The key of the present, non-failed trial at index idx, at budget b (-1:
 * Optuna's rule). */
void tun_tpe_key_of(const tun_study *t, int64_t idx, int64_t budget, tun_tpe_key *out);
/* Complete or pruned. */
int tun_tpe_is_finished(const tun_trial_rec *rec);
/* Whether the multi-fidelity rule is on: cfg.tpe_multi_fidelity and a
 * successive-halving pruner (ASHA or Hyperband), under which "complete"
 * tells a trial's bracket rather than its quality (tpe.c). Without a
 * pruner, or with the median rule, complete trials are ranked by the value
 * they were told, as Optuna's TPESampler ranks them. */
int tun_tpe_multi_fidelity(const tun_study *t);
/* The multi-fidelity budget (tpe.c's rule): the (d+2)-th largest last
 * reported step of the finished trials, -1 if fewer reported or the rule
 * is off. O(n). tun_tpe_budget_push adds one last step s to top[] (the
 * k <= n_min largest so far, descending) and returns the budget so far. */
#define TUN_TPE_BUDGET_MAX (64 + 2)
int64_t tun_tpe_budget(const tun_study *t);
int64_t tun_tpe_budget_push(int64_t *top, int *k, int n_min, int64_t s);
/* Every complete, pruned and running trial ranked (malloc'd into *out, *m
 * of them, free() it); *n_finished: the complete and pruned ones; *budget
 * the budget used. HPO_ENOMEM. */
int tun_tpe_rank_all(const tun_study *t, tun_tpe_key **out, int *m, int *n_finished,
                     int64_t *budget);
/* gamma: how many of n finished trials form the "below" set. */
int tun_tpe_n_below(const tun_config *cfg, int64_t n);

/* ---- TPE's incremental index of the history (tpe_index.c) ----
 * What a suggestion needs from a long history without a pass over it, kept
 * by study.c's adds, reports and finishes in O(log n) each:
 * - the number of finished (complete + pruned) trials;
 * - the multi-fidelity budget (the d + 2 largest last steps);
 * - the best TUN_TPE_TOP finished trials by their key (the "below" set is
 *   the first gamma(n) of them when gamma(n) <= TUN_TPE_TOP);
 * - per group (0: the unconditional parameters, modelled jointly; 1 + j:
 *   the j-th conditional parameter in space order), a Fenwick tree over
 *   the history's indices of the trials a group models (present, not
 *   failed, every parameter of the group active): their count and the k-th
 *   of them in trial-number order in O(log n).
 * A report to a finished trial (its key may worsen) or a budget that moves
 * marks the best-few list stale, and a history that outgrows the trees
 * marks them stale: tun_tpe_index_sync rebuilds what is stale in O(n)
 * (O(n log TUN_TPE_TOP) for the list), which is also the first build. */
#define TUN_TPE_TOP 64
/* tpe_max_components' default (tpe.c) */
#define TUN_TPE_MAX_COMPONENTS 1024
typedef struct tun_tpe_index {
    int64_t n_finished;
    int budget_ok, n_steps_top;
    int64_t budget, steps_top[TUN_TPE_BUDGET_MAX];
    int top_ok, n_top;
    tun_tpe_key top[TUN_TPE_TOP];
    int fen_ok, n_groups;
    int *group_of;     /* per parameter: its group */
    int64_t size;      /* indices the trees cover */
    int32_t **fen;     /* n_groups trees, 1-based, size + 1 entries */
    int64_t *count;    /* per group: the trials it models */
} tun_tpe_index;
/* Brings t->tpe up to date (creating it); HPO_ENOMEM. */
int tun_tpe_index_sync(tun_study *t);
/* study.c, after the record at index idx changed: prev_state -1 for a new
 * record, else its state before (equal to the current one for a report). */
void tun_tpe_index_note(tun_study *t, int64_t idx, int prev_state);
void tun_tpe_index_free(tun_tpe_index *ix);
/* Whether rec is modelled by group g. */
int tun_tpe_index_models(const tun_study *t, const tun_trial_rec *rec, int g);
/* The index in t->trials of the k-th (0-based) trial group g models, in
 * trial-number order; k < count[g]. */
int64_t tun_tpe_index_select(const tun_tpe_index *ix, int g, int64_t k);

/* ---- TPE's split with several objectives or constraints (tpe_mo.c) ---- */
typedef struct tun_tpe_split {
    int64_t *below, *above; /* indices in t->trials, trial-number order */
    double *w_below;        /* the below trials' weights (before the prior);
                             * NULL: Optuna's ramp (one objective) */
    int64_t nb, na;
    int64_t n;              /* the complete trials modelled */
} tun_tpe_split;
/* Whether TPE splits by tpe_mo.c's rules: several objectives, or a
 * complete trial that told a constraint violation. */
int tun_tpe_uses_split(const tun_study *t);
/* Optuna 3.1's split of the complete trials (feasible first, non-domination
 * fronts, hypervolume subset selection) and the below set's weights. */
int tun_tpe_split_compute(const tun_study *t, tun_tpe_split *out);
void tun_tpe_split_clear(tun_tpe_split *s);

/* Hyperband: the bracket (0 = most aggressive, as tun_hyperband_brackets'
 * out[]) of trial `number`, drawn from (seed, number) with probability
 * n_b / sum(n) (pruners.c). */
int tun_hyperband_bracket_of(const tun_study *t, int64_t number);
/* Hyperband's R: max_resource, or 81 when unset, at least min_resource. */
int64_t tun_hyperband_max_resource(const tun_pruner_config *pc);

/* Pruners: whether trial rec, which has just reported (step, value), stops. */
int tun_pruner_decide(const tun_study *t, const tun_trial_rec *rec, int64_t step, int *prune, int *rung);

#endif
