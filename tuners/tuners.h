/*
 * tuners.h - search spaces and the algorithms that search them: random,
 * grid, TPE, Gaussian-process Bayesian optimisation, CMA-ES, regularized
 * evolution, NSGA-II, BOHB (TPE's model per Hyperband budget), and the
 * multi-fidelity pruners (median, ASHA, Hyperband); Pareto geometry
 * (non-dominated sorting, hypervolume).
 * Pure C: no I/O, no clocks, no globals.
 *
 * Design notes
 * - A configuration is a vector x of doubles, one per parameter of the space,
 *   in the space's order (parents before children): int -> its value, float
 *   -> its value, choice -> the index of the value, bool -> 0 or 1, and NaN
 *   for a conditional parameter that is inactive. JSON (jansson) is only the
 *   edge: tun_space_parse reads a definition, tun_space_to_json /
 *   tun_space_from_json convert a configuration.
 * - Determinism: a tun_study's suggestion for trial number k depends only on
 *   the config's seed, k and the history it has been told (tun_study_add /
 *   _report / _finish), never on the order of calls or on time. Randomness
 *   comes from hpo_rng_derive(seed, k, ...). So a restarted hpod that replays
 *   the stored history suggests exactly what it would have suggested.
 * - Directions: the study is told whether to maximise; internally every
 *   algorithm minimises (values are negated on the way in). A study may
 *   have 1 to TUN_MAX_OBJECTIVES objectives (tun_study_new_mo), each with
 *   its direction; a trial's "value" is then its first objective's, and
 *   the samplers that know several objectives (random, nsga2, tpe,
 *   bayesian) read the vector; intermediate reports may carry one too
 *   (tun_study_report_mo), which ASHA and Hyperband rank by Pareto front
 *   (MO-ASHA). A complete trial may carry its constraint violation (the
 *   sum of the positive parts of its constraints, Optuna's
 *   constraints_func semantics): 0 is feasible, NaN none told; or the
 *   constraints' values themselves (tun_study_finish_cons), which the
 *   bayesian sampler models one by one.
 * - Threading: a tun_study is not thread-safe; its owner (the api's per-study
 *   lock, or the scheduler thread) serialises calls. tun_space is immutable
 *   after parsing and may be shared.
 * - Ownership: a tun_study borrows its tun_space, which must outlive it.
 */
#ifndef HPO_TUNERS_H
#define HPO_TUNERS_H

#include <jansson.h>
#include <stdint.h>

#include "hpo.h"

/* ---- search space ---- */
typedef enum { TUN_INT = 0, TUN_FLOAT, TUN_CHOICE, TUN_BOOL } tun_param_type;

typedef struct tun_param {
    char *name;
    tun_param_type type;
    double low, high; /* int, float: inclusive bounds */
    double step;      /* int: >= 1 (default 1); float: 0 = continuous */
    int log;          /* sample on a log scale (low > 0) */
    json_t *choices;  /* TUN_CHOICE: the array of values (strings, numbers, booleans) */
    int n_choices;    /* TUN_CHOICE: its length; TUN_BOOL: 2 */
    int parent;       /* index of the parameter this one is conditional on, -1 if none */
    double *parent_values; /* encoded parent values that make this one active */
    int n_parent_values;
} tun_param;

typedef struct tun_space {
    int n;
    tun_param *params; /* parents before their children */
} tun_space;

/* Parses and validates a "space" object: {"<name>": spec, ...}, 1 to 64
 * parameters, names of 1 to 64 characters [A-Za-z0-9_.-]. Specs:
 *   {"type": "int", "low", "high" (integers, |x| <= 2^53), "step" (>= 1,
 *    default 1; values low + k*step <= high), "log" (needs low >= 1, step 1)}
 *   {"type": "float", "low", "high", "step" (> 0, optional; values
 *    low + k*step <= high), "log" (needs low > 0, no step)}
 *   {"type": "choice", "values": [1 to 4096 distinct strings, numbers or
 *    booleans; 1 and 1.0 are the same value, true and 1 are not]}
 *   {"type": "bool"}
 * and optionally "condition": {"<parent>": [allowed values]} with exactly one
 * parent, a choice, bool or int parameter of the space, and values of it;
 * the parameter is active only when its parent is active and takes one of
 * them. Parameters are reordered parents first (otherwise in JSON order);
 * cycles and self-references are refused. Unknown keys are refused. Errors
 * are HPO_EINVAL with the field, e.g. "space.lr.low" (low > high),
 * "space.lr.log", "space.units.step", "space.opt.values", "space.x.type",
 * "space.x.<unknown key>", "space.m.condition", "space.<bad name>", "space".
 * *out is written only on success. A space has at most TUN_MAX_PARAMS
 * parameters, a choice at most TUN_MAX_CHOICES values. */
#define TUN_MAX_PARAMS 64
#define TUN_MAX_CHOICES 4096
int tun_space_parse(const json_t *space, tun_space **out, hpo_error *err);
/* The columns the bayesian sampler encodes s in (gp_space.h: one per
 * number, one per choice value, two per bool). Its fits and suggestions
 * cost time and memory in proportion; hpod refuses a new bayesian study
 * over TUN_GP_MAX_COLUMNS of them (TPE's cost does not grow so). */
#define TUN_GP_MAX_COLUMNS 4096
int tun_gp_columns(const tun_space *s);
void tun_space_free(tun_space *s);
int tun_space_index(const tun_space *s, const char *name); /* -1 if absent */
/* Whether parameter i is active in x (its parent chain takes allowed values). */
int tun_space_is_active(const tun_space *s, const double *x, int i);
/* Draws a random configuration (inactive parameters NaN). */
struct hpo_rng;
void tun_space_sample(const tun_space *s, struct hpo_rng *rng, double *x);
/* Snaps a value of parameter i to its domain (bounds, step, integer; a
 * choice or bool to the nearest index). NaN stays NaN. */
double tun_space_snap(const tun_space *s, int i, double v);
/* {"name": value, ...} for the active parameters of x; a new reference.
 * ints are JSON integers, floats reals, choices the original JSON value,
 * bools true/false; inactive (or NaN) parameters are absent. */
json_t *tun_space_to_json(const tun_space *s, const double *x);
/* The inverse: every active parameter must be present with a valid value
 * (ints integral and on the step, floats within bounds and, if stepped, on a
 * step within 1e-9 relative, choices equal to a value, bools booleans); an
 * inactive one must be absent or null; unknown names are refused. Errors
 * name "params.<name>" ("params" when not an object); x is written only on
 * success. */
int tun_space_from_json(const tun_space *s, const json_t *params, double *x, hpo_error *err);
/* The same for a partial configuration (an enqueued trial's fixed
 * parameters): each given parameter is checked as above, a missing one is
 * NaN in x; a conditional parameter may be given only with its parent, and
 * only when that parent enables it. */
int tun_space_from_json_partial(const tun_space *s, const json_t *params, double *x, hpo_error *err);
/* Whether two parsed spaces are the same search space: the same parameters
 * in the same order, each with the same type, bounds, step, scale, values
 * and condition (however their specs were written). */
int tun_space_equal(const tun_space *a, const tun_space *b);

/* ---- algorithms ---- */
typedef enum {
    TUN_RANDOM = 0,
    TUN_GRID,
    TUN_TPE,
    TUN_BAYESIAN,
    TUN_CMAES,
    TUN_EVOLUTION,
    TUN_NSGA2,
    TUN_BOHB,
    TUN_PBT,
} tun_algorithm;
typedef enum { TUN_XOVER_SBX = 0, TUN_XOVER_UNIFORM } tun_crossover;
typedef enum { TUN_PRUNER_NONE = 0, TUN_PRUNER_MEDIAN, TUN_PRUNER_ASHA, TUN_PRUNER_HYPERBAND } tun_pruner_kind;
typedef enum { TUN_ACQ_LOG_EI = 0, TUN_ACQ_UCB } tun_acquisition;

typedef struct tun_pruner_config {
    tun_pruner_kind kind;
    double eta;           /* asha, hyperband: reduction factor >= 2 (default 3) */
    int64_t min_resource; /* asha, hyperband: first rung (steps/epochs, default 1) */
    int64_t max_resource; /* hyperband: R; 0 = not given: the caller puts the study's
                           * max epochs here, and the pruner uses 81 if it stays 0 */
    int64_t warmup_steps; /* median: steps before pruning starts (default 0) */
    int n_startup_trials; /* median: COMPLETE trials before pruning (default 5) */
} tun_pruner_config;

typedef struct tun_config {
    tun_algorithm algorithm;
    uint64_t seed;
    int n_startup_trials;     /* tpe, bayesian: random trials first (default 10) */
    /* tpe */
    int tpe_n_candidates;     /* default 24 */
    double tpe_gamma;         /* fraction of "good" trials in (0, 1); 0 (the default)
                               * = Optuna's rule min(ceil(0.1 n), 25) trials */
    int tpe_multi_fidelity;   /* rank trials at a common budget when they report
                               * intermediate values (BOHB's rule, tpe.c; default 1),
                               * in a study whose pruner is asha or hyperband only
                               * (otherwise Optuna's ranking whatever this says);
                               * 0 = Optuna's ranking */
    int tpe_multivariate;     /* not a "tuner" key (tests, benchmarks): 1 = the
                               * unconditional parameters are modelled jointly
                               * (Optuna's multivariate=True); 0 = each on its
                               * own (Optuna's default); 2 = jointly for the
                               * even trial numbers, each on its own for the
                               * odd ones; < 0 (the default) = 2 with one
                               * objective on a space whose unconditional
                               * parameters are all continuous floats (1
                               * when it has at most two), 0 otherwise
                               * (tpe.c) */
    int tpe_max_components;   /* not a "tuner" key (tests, benchmarks): the most
                               * components a side of TPE's split keeps before
                               * older trials are stood for by a stratified
                               * sample (tpe.c); 0 = the default 1024, < 0 =
                               * never, >= 64 otherwise */
    /* bayesian */
    tun_acquisition acquisition;
    double ucb_beta;          /* default 2.0 */
    int deterministic;        /* the objective has no noise: the GP keeps its noise
                               * variance at 1e-6 instead of fitting it (default 0) */
    /* cmaes */
    int cma_popsize;          /* lambda of the first run; 0 (the default) = 4 + floor(3 ln n) */
    double cma_sigma0;        /* initial step size in the [0, 1]-scaled space (default 1/6) */
    /* evolution */
    int evo_population;       /* P: the most recent complete trials kept (default 20) */
    int evo_sample_size;      /* S: tournament size, 1..P (default min(5, P)) */
    /* nsga2 (nsga2.c) */
    int nsga_population;      /* population_size, 2..100000 (default 50) */
    tun_crossover nsga_crossover; /* "sbx" (default) or "uniform" (Optuna's default) */
    double nsga_crossover_prob;   /* default 0.9 */
    double nsga_swapping_prob;    /* uniform crossover's (and sbx's choices'), default 0.5 */
    double nsga_mutation_prob;    /* per parameter, 0 none; -1 (the default) = 1 / n parameters */
    /* bohb (bohb.c; also reads tpe_gamma, tpe_n_candidates, tpe_multivariate) */
    double bohb_random_fraction;  /* trials drawn at random, in [0, 1] (default 1/3) */
    double bohb_bandwidth_factor; /* the model's candidates are drawn with its numeric
                                   * bandwidths times this, > 0 (default 3) */
    int bohb_min_points;          /* observations a budget needs for the model; 0 (the
                                   * default) = the number of parameters + 2 */
    /* pbt (pbt.c): population-based training of an embedded study */
    int pbt_population;       /* population_size, 2..100000 (default 8) */
    int pbt_interval;         /* perturbation_interval: epochs between boundaries, >= 1 (default 2) */
    double pbt_quantile;      /* quantile: the bottom (and top) fraction, (0, 0.5] (default 0.25) */
    double pbt_resample;      /* resample_probability, [0, 1] (default 0.25) */
    uint64_t pbt_mutable;     /* bit i: parameter i may change at an exploit */
    int pbt_mutable_given;    /* "mutable" was given; otherwise the api decides (the
                               * parameters whose change keeps the model's shape) */
    tun_pruner_config pruner;
} tun_config;

/* Parses a "tuner" object (field names "tuner.algorithm", "tuner.pruner.eta").
 * A NULL tuner gives the defaults (random, seed 0, no pruner).
 *
 * Keys (all optional): "algorithm": "random" | "grid" | "tpe" | "bayesian" |
 * "cmaes" | "evolution" | "nsga2" | "bohb" | "pbt" (default random); "seed": int >= 0 (0); "n_startup_trials": int >= 0 (10;
 * tpe and bayesian only);
 * "acquisition": "ei" | "ucb" (ei, computed as log EI; several objectives
 * or constraints: log EHVI, gp_mo.c); "ucb_beta": > 0 (2);
 * "n_ei_candidates": 1..10000 (24); "gamma": in (0, 1) (Optuna's rule);
 * "tpe_multi_fidelity": bool (true: with an asha or hyperband pruner, trials
 * that report intermediate values are ranked at a common budget; false
 * ranks them by Optuna's rule there too; without such a pruner Optuna's
 * rule either way);
 * "deterministic": bool (false; true tells the GP the objective is noise-free);
 * "popsize": cmaes' first population, int 4..4096 (4 + floor(3 ln n));
 * "sigma0": cmaes' initial step size in (0, 1] of the scaled space (1/6);
 * "population": evolution's P, int 2..100000 (20); "sample_size": its
 * tournament S, int 1..population (min(5, population); a larger one is an
 * error naming "tuner.sample_size");
 * nsga2: "population_size" int 2..100000 (50); "crossover": "sbx" |
 * "uniform" (sbx); "crossover_prob", "swapping_prob" in [0, 1] (0.9, 0.5);
 * "mutation_prob" in [0, 1] (1 / the number of parameters; 0 none);
 * bohb: "random_fraction" in [0, 1] (1/3); "bandwidth_factor" > 0 (3);
 * "min_points_in_model" int >= 1
 * (the number of parameters + 2); "gamma" (0.05 for bohb) and
 * "n_ei_candidates" as TPE's. "bohb" implies the hyperband pruner: without
 * "pruner" it gets hyperband with the defaults, with another pruner it is
 * an error naming "tuner.pruner.algorithm";
 * pbt: "population_size" int 2..100000 (8), "perturbation_interval" int
 * >= 1 epochs (2), "quantile" in (0, 0.5] (0.25), "resample_probability"
 * in [0, 1] (0.25), "mutable": [names of unconditional parameters of the
 * space] (default: decided by the api, see pbt.c);
 * "pruner": {"algorithm": "none" | "median" | "asha" | "hyperband" (required),
 * "eta" >= 2 (3), "min_resource" or its alias "min_epochs" int >= 1 (1),
 * "max_resource" or "max_epochs" int >= min_resource (0: unset),
 * "warmup_steps" int >= 0 (0), "n_startup_trials" int >= 0 (5)}.
 * Read by other layers and only checked here: "max_trials",
 * "executions_per_trial", "parallel_trials" (ints >= 1), "max_seconds",
 * "trial_timeout", "lease_seconds" (numbers > 0). Unknown keys are errors
 * ("tuner.<key>"). With "grid", every float needs a step (error "space.<name>")
 * and the grid may hold at most 10^6 points (error "space"). */
int tun_config_parse(const json_t *tuner, const tun_space *space, tun_config *out,
                     hpo_error *err);
/* The defaults above (random, no pruner). */
void tun_config_default(tun_config *cfg);
/* Whether two configs parsed by tun_config_parse are the same (every field:
 * the keys read by other layers, such as max_trials, are not in it). */
int tun_config_equal(const tun_config *a, const tun_config *b);
/* Whether a and b (parsed over space) search alike: equal once each
 * default the samplers work out from the space (cmaes' popsize, nsga2's
 * mutation_prob, bohb's min_points_in_model and gamma) is written out and
 * the fields their algorithm does not read are put at their defaults. */
int tun_config_same_search(const tun_config *a, const tun_config *b, const tun_space *space);
/* Whether a "tuner" key is one of those checked by tun_config_parse and read
 * by other layers ("max_trials", "executions_per_trial", "parallel_trials",
 * "max_seconds", "trial_timeout", "lease_seconds"). */
int tun_config_key_read_elsewhere(const char *key);
const char *tun_algorithm_name(tun_algorithm a);

typedef enum {
    TUN_TRIAL_RUNNING = 0,
    TUN_TRIAL_COMPLETE,
    TUN_TRIAL_PRUNED,
    TUN_TRIAL_FAILED,
} tun_trial_state;

typedef struct tun_study tun_study;

#define TUN_MAX_OBJECTIVES 8
int tun_study_new(const tun_space *space, const tun_config *cfg, int maximize, tun_study **out);
/* A study of m objectives (1 .. TUN_MAX_OBJECTIVES), maximize[k] for each;
 * tun_study_new is m = 1. HPO_EINVAL otherwise. */
int tun_study_new_mo(const tun_space *space, const tun_config *cfg, int m, const int *maximize,
                     tun_study **out);
int tun_study_n_objectives(const tun_study *t);
/* Trials in the history (priors not counted). */
int64_t tun_study_n_trials(const tun_study *t);
/* What the history holds of trial `number`: its state and the highest
 * step it reported (-1: none); HPO_ENOTFOUND when it is not known. state
 * and last_step may be NULL. */
int tun_study_trial(const tun_study *t, int64_t number, tun_trial_state *state, int64_t *last_step);
/* 1 when trial `number` is known with configuration x (inactive
 * parameters NaN on both sides), else 0. */
int tun_study_same_point(const tun_study *t, int64_t number, const double *x);
void tun_study_free(tun_study *t);
/* Suggests the configuration of trial `number` (0 <= number < 10^7; numbers
 * are dense) into x (space->n doubles). Pending (running) trials are taken
 * into account, each sampler its way (grid never repeats a point; random,
 * bayesian and bohb did not in a sampler audit; tpe's constant liar, cmaes'
 * generations and evolution's mutations may repeat one in a small discrete
 * space, as Optuna's do). HPO_EEXHAUSTED when
 * a grid has nothing left; HPO_ETOOLARGE for a grid over 10^6 points. The
 * caller then records the trial with tun_study_add. */
int tun_study_suggest(tun_study *t, int64_t number, double *x);
/* The same with some parameters fixed (an enqueued trial): fixed holds
 * space->n values, NaN where the parameter is to be drawn
 * (tun_space_from_json_partial). The tuner's suggestion fills the others;
 * a parameter the suggestion left inactive but the fixed parents enable is
 * drawn at random from (seed, number); one the fixed parents disable is
 * NaN. A grid with nothing left still completes the fixed parameters. */
int tun_study_suggest_fixed(tun_study *t, int64_t number, const double *fixed, double *x);
/* Adds a prior observation (warm start: a complete trial of another study):
 * the samplers learn from it as from a complete trial of this study, the
 * pruners ignore it, and it has no number. Priors come before any trial
 * (HPO_ECONFLICT once one was added); at most TUN_MAX_PRIORS
 * (HPO_ETOOLARGE); HPO_EINVAL for a value that is not finite. */
#define TUN_MAX_PRIORS 10000
int tun_study_add_prior(tun_study *t, const double *x, double value);
/* Adds a trial to the history (a new suggestion, or one replayed from storage).
 * HPO_ECONFLICT if the number is already known; HPO_EINVAL for a COMPLETE
 * trial whose value is not finite. To replay a trial with intermediate
 * values: add it RUNNING, report its steps, then finish it (or add it
 * finished, then report: reports to a finished trial are recorded and never
 * prune). */
int tun_study_add(tun_study *t, int64_t number, const double *x, tun_trial_state state,
                  double value);
/* Records an intermediate value; *prune (may be NULL) tells whether the
 * pruner stops the trial here. Only a RUNNING trial is ever pruned, and once
 * told to stop it is told so at every later report. A repeated step keeps
 * its first value and answer (as Optuna does). A late step (below the
 * trial's highest) is judged at the highest step, as Optuna judges at
 * last_step: ASHA and Hyperband answer continue and keep the trial's
 * values at the rungs it passed; the median rule compares its best over
 * all steps with the median at the highest step. With prune NULL (replaying a
 * stored history) the value is recorded and the pruner is not consulted.
 * HPO_ENOTFOUND for an unknown number, HPO_EINVAL for step < 0. */
int tun_study_report(tun_study *t, int64_t number, int64_t step, double value, int *prune);
/* The same with one value per objective (values[0 .. n_obj), the study's
 * signs; NaN where not known): a study with several objectives keeps the
 * vector, and ASHA and Hyperband rank its trials at a rung by it
 * (pruners.c: MO-ASHA). tun_study_report on such a study records its value
 * as the first objective's, the others NaN. */
int tun_study_report_mo(tun_study *t, int64_t number, int64_t step, const double *values, int *prune);
/* Replays a stored report (values as for tun_study_report_mo) as the live
 * run took it: late, it was reported after a higher step (no rung's
 * value); pruned, the pruner said stop at it, so the trial is told to stop
 * at every later report, a repeated step included; rung, the rung asha or
 * hyperband said it at (tun_study_prune_rung; -1 none or not known). The
 * pruner is not consulted. HPO_ENOTFOUND for an unknown number, HPO_EINVAL
 * for step < 0. */
int tun_study_replay_report(tun_study *t, int64_t number, int64_t step, const double *values, int late,
                            int pruned, int rung);
/* The rung (r0 + k) at which asha or hyperband told trial number to stop,
 * for storage to keep with the report; -1 when it was not told to, or by
 * another rule (median), or the rung is not known. */
int tun_study_prune_rung(const tun_study *t, int64_t number);
/* Ends a RUNNING trial (HPO_ECONFLICT otherwise): COMPLETE with a finite
 * value; PRUNED and FAILED keep their intermediate values, value ignored. */
int tun_study_finish(tun_study *t, int64_t number, tun_trial_state state, double value);
/* The same with the study's m values (values may be NULL unless COMPLETE:
 * then m finite numbers, HPO_EINVAL otherwise) and the trial's constraint
 * violation (>= 0; NaN: none told). tun_study_finish is this with values
 * {value} on a one-objective study (HPO_EINVAL for a COMPLETE trial of a
 * study with more). */
int tun_study_finish_mo(tun_study *t, int64_t number, tun_trial_state state, const double *values,
                        double violation);
/* The same with the constraints' values as Optuna's constraints_func
 * returns them: cons[0 .. n_cons), each met when <= 0; the violation is the
 * sum of their positive parts. n_cons 0 (or a state other than COMPLETE):
 * none told. Otherwise 1 .. TUN_MAX_CONSTRAINTS finite values, as many for
 * every complete trial of the study (HPO_EINVAL). The bayesian sampler
 * models each constraint (gp_mo.c); the others read the violation. */
#define TUN_MAX_CONSTRAINTS 16
int tun_study_finish_cons(tun_study *t, int64_t number, tun_trial_state state, const double *values, int n_cons,
                          const double *cons);

/* ---- multi-objective geometry (pareto.c); everything minimises ---- */
/* a dominates b: no worse in all m objectives, better in one. */
int tun_dominates(const double *a, const double *b, int m);
/* Constrained domination (Optuna's): with violations va, vb (0 feasible,
 * NaN as infinite) a feasible point dominates an infeasible one, two
 * feasible ones compare by tun_dominates, two infeasible ones by the
 * smaller violation. */
int tun_dominates_constrained(const double *a, double va, const double *b, double vb, int m);
/* Non-dominated sort of n points (rows of m in F): rank[i] = the front of
 * point i (0 = the Pareto front); viol (may be NULL) switches to
 * constrained domination. Returns the number of fronts. ENS-BS (Zhang et
 * al. 2015): O(n) memory, O(m n^2) comparisons at worst. _ref peels the
 * fronts naively (O(n^3)), for the tests. */
int tun_nondominated_sort(const double *F, const double *viol, size_t n, int m, int *rank);
int tun_nondominated_sort_ref(const double *F, const double *viol, size_t n, int m, int *rank);
/* Crowding distance (Deb 2002) of the k points idx[] of F: the sum over
 * the objectives of the normalised gap between each point's neighbours;
 * the extremes of each objective get INFINITY (and all when k <= 2). */
void tun_crowding_distance(const double *F, int m, const size_t *idx, size_t k, double *out);
/* The exact hypervolume the n points of F dominate up to ref (points not
 * better than ref in every objective add nothing): a sweep for m = 2,
 * slices for m = 3, WFG above. _ref counts the cells of the coordinate
 * grid (exact, O(n^(m+1)); m <= TUN_MAX_OBJECTIVES), for the tests. */
double tun_hypervolume(const double *F, size_t n, int m, const double *ref);
double tun_hypervolume_ref(const double *F, size_t n, int m, const double *ref);
/* Each point's exclusive hypervolume: the hypervolume of all n points less
 * that of the others (0 for a point another one dominates or equals). */
void tun_hv_contributions(const double *F, size_t n, int m, const double *ref, double *out);
/* Whether tun_hv_contributions of n points in m objectives is affordable
 * (n^m <= 10^7: WFG is exponential in m, and 8 objectives and 150 points
 * took hours); else tun_hv_greedy. */
int tun_hv_contributions_affordable(size_t n, int m);
/* Whether tun_hypervolume of n points in m objectives is affordable on a
 * request's time (m <= 3, or n^(m-2) <= 10^7: 8 objectives and 160 points
 * on one front took 15 s); else tun_hypervolume_mc. */
int tun_hypervolume_affordable(size_t n, int m);
/* The same estimated from `samples` points drawn uniformly (rng seeded
 * with seed: the same figure for the same front) in the box from the
 * points' best values to ref: the box's volume times the share of them
 * some point dominates, and in *std_error that figure's standard error.
 * O(samples n m) at worst. */
double tun_hypervolume_mc(const double *F, size_t n, int m, const double *ref, size_t samples, uint64_t seed,
                          double *std_error);
/* tun_hv_contributions and tun_hv_greedy estimated from the same kind of
 * samples (pareto_mc.c): a point's contribution is the share of samples
 * it alone dominates times the box; a greedy pick is the point that
 * dominates the most samples none chosen before does (ties to the earlier
 * point). O(samples n m), and the greedy O(k n samples / 64) besides. */
void tun_hv_contributions_mc(const double *F, size_t n, int m, const double *ref, size_t samples, uint64_t seed,
                             double *out);
void tun_hv_greedy_mc(const double *F, size_t n, int m, const double *ref, size_t k, size_t samples, uint64_t seed,
                      size_t *out);
/* k (<= n) of the n points of F, chosen greedily: each the one adding the
 * most hypervolume to those chosen before (ties to the earlier point),
 * their indices in order of choice in out: k n hypervolumes of at most k
 * points (MOTPE's subset selection, tpe_mo.c, and the thinning of wide
 * fronts). */
void tun_hv_greedy(const double *F, size_t n, int m, const double *ref, size_t k, size_t *out);

/* ---- grid ---- */
/* Grid size (conditions respected); saturates at TUN_GRID_MAX + 1. */
#define TUN_GRID_MAX 1000000
uint64_t tun_grid_size(const tun_space *s);

/* ---- Hyperband's brackets (Li et al. 2018), for synchronous schedulers ---- */
#define TUN_HB_MAX_ROUNDS 32
typedef struct tun_hb_bracket {
    int s;        /* the paper's s: s_max for the most exploratory bracket, 0 last */
    int n_rounds; /* s + 1 successive-halving rounds */
    int64_t n[TUN_HB_MAX_ROUNDS]; /* configurations in round i: floor(n_0 / eta^i) */
    int64_t r[TUN_HB_MAX_ROUNDS]; /* resource each gets in round i */
} tun_hb_bracket;
/* Fills out[0 .. s_max] (out[b] has s = s_max - b, the order of Optuna's
 * bracket ids) with s_max = floor(log_eta(max_r / min_r)),
 * n_0 = ceil((s_max + 1) / (s + 1) * eta^s), r_i = min_r * eta^(s_max - s + i)
 * and the last round r_s = max_r. eta=3, 1..81: 81@1 27@3 9@9 3@27 1@81 |
 * 34@3 11@9 3@27 1@81 | 15@9 5@27 1@81 | 8@27 2@81 | 5@81. Returns the number
 * of brackets, HPO_EINVAL for eta <= 1, min_r < 1 or max_r < min_r, and
 * HPO_ETOOLARGE when more than max_out (or TUN_HB_MAX_ROUNDS) are needed. */
int tun_hyperband_brackets(double eta, int64_t min_r, int64_t max_r, tun_hb_bracket *out,
                           int max_out);

/* ---- population-based training (pbt.c) ----
 * Ray Tune's PBT semantics over a tun_study's history: the members of the
 * population report their objective at every epoch (tun_study_report, the
 * epoch as the step); at a boundary (a multiple of perturbation_interval)
 * a member is ranked among every trial that reported that same epoch. In
 * the bottom quantile (ceil(n * quantile) trials, at most floor(n / 2)) it
 * exploits a member drawn uniformly from the top quantile: the caller
 * copies that member's checkpoint at the boundary, and explores from its
 * configuration. Deterministic given the seed, the member's number, the
 * epoch and the history. */
/* 1 and *donor (a trial number) when trial `number` exploits at `epoch`;
 * 0 when it goes on (also when fewer than 2 trials reported epoch);
 * HPO_ENOTFOUND when it has no report at epoch. */
int tun_pbt_rank(const tun_study *t, int64_t number, int64_t epoch, int64_t *donor);
/* The explored configuration of the member that replaces trial `number`
 * at `epoch`, from the donor's donor_x: a mutable parameter is resampled
 * with probability resample_probability, else a number is multiplied by
 * 0.8 or 1.2 (clipped to its bounds, snapped to its step) and a choice or
 * bool moves to a neighbouring value; the others are the donor's. */
void tun_pbt_explore(const tun_study *t, int64_t number, int64_t epoch, const double *donor_x, double *x);

/* ---- statistics over executions (noise) ---- */
/* Mean and sample std (NaN when n < 2) of v[0..n). */
void tun_mean_std(const double *v, int n, double *mean, double *std);
/* Two-sided p-value of Welch's t-test that two means differ, from their
 * means, stds and counts; NaN when either n < 2. */
double tun_welch_p(double m1, double s1, int n1, double m2, double s2, int n2);

/* ---- hyperparameter importance (importance.c) ---- */
/* Trials from which importance is measured out of the bag; fewer are
 * measured on the trials the trees were grown on, to leaves of one. */
#define TUN_IMPORTANCE_OOB_FROM 12
/* How much each parameter of s matters for the objective, from n >= 2
 * finished trials: X holds n configurations (rows of s->n doubles, NaN for
 * an inactive parameter), y their values. Permutation importance on the
 * out-of-bag trials of a 32-tree random forest (each tree on a bootstrap of
 * at most 512 trials; under TUN_IMPORTANCE_OOB_FROM trials, on all of them,
 * measured in-sample): the rise of the squared prediction error when a
 * parameter's column is shuffled (a parent with the parameters conditional
 * on it, a child only among the trials where it is active). out[0 .. s->n)
 * is >= 0 and sums to 1, or
 * is all 0 when y is constant. Deterministic given seed; independent of the
 * direction (importance of -y is that of y). HPO_EINVAL for n < 2 or a
 * non-finite y. */
int tun_importance(const tun_space *s, const double *X, const double *y, size_t n, uint64_t seed,
                   double *out);

#endif
