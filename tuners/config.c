/*
 * config.c - the "tuner" block of a study: which algorithm, its seed and
 * options, the pruner, and the budget keys that other layers read (checked
 * here so that every error in the block names its field the same way).
 * Defaults and the accepted keys are listed in tuners.h.
 */
#include <math.h>
#include <string.h>

#include "cma.h"
#include "tuners_internal.h"

#define MAX_INT_OPTION 1000000000LL

static const char *const algorithm_names[] = {"random", "grid", "tpe", "bayesian", "cmaes",
                                              "evolution", "nsga2", "bohb", "pbt"};

const char *tun_algorithm_name(tun_algorithm a) {
    if ((unsigned)a < HPO_ARRAY_LEN(algorithm_names)) return algorithm_names[a];
    return "unknown";
}

void tun_config_default(tun_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->algorithm = TUN_RANDOM;
    cfg->seed = 0;
    cfg->n_startup_trials = 10;
    cfg->tpe_n_candidates = 24;
    cfg->tpe_gamma = 0;
    cfg->tpe_multivariate = -1; /* tpe.c: the joint/per-parameter mix on continuous spaces, one objective */
    cfg->tpe_multi_fidelity = 1;
    cfg->acquisition = TUN_ACQ_LOG_EI;
    cfg->ucb_beta = 2.0;
    cfg->cma_popsize = 0;
    cfg->cma_sigma0 = 1.0 / 6;
    cfg->evo_population = 20;
    cfg->evo_sample_size = 5;
    cfg->nsga_population = 50;
    cfg->nsga_crossover = TUN_XOVER_SBX;
    cfg->nsga_crossover_prob = 0.9;
    cfg->nsga_swapping_prob = 0.5;
    cfg->nsga_mutation_prob = -1; /* not given: 1 / the number of parameters */
    cfg->bohb_random_fraction = 1.0 / 3; /* BOHB's paper's rho (bohb.c) */
    cfg->bohb_bandwidth_factor = 3;       /* and its b_w */
    cfg->bohb_min_points = 0;
    cfg->pbt_population = 8;
    cfg->pbt_interval = 2;
    cfg->pbt_quantile = 0.25;
    cfg->pbt_resample = 0.25;
    cfg->pruner.kind = TUN_PRUNER_NONE;
    cfg->pruner.eta = 3;
    cfg->pruner.min_resource = 1;
    cfg->pruner.max_resource = 0;
    cfg->pruner.warmup_steps = 0;
    cfg->pruner.n_startup_trials = 5;
}

/* tun_config_default zeroes the whole struct, padding included, before
 * tun_config_parse sets fields, and it has no pointers: bytes compare. */
int tun_config_equal(const tun_config *a, const tun_config *b) { return memcmp(a, b, sizeof *a) == 0; }

/* c with the defaults its sampler works out from s written out (cmaes.c,
 * nsga2.c, bohb.c), and the population its algorithm does not read at its
 * default (population_size sets nsga2's and pbt's) */
static void effective(tun_config *c, const tun_space *s) {
    tun_config def;
    tun_config_default(&def);
    if (c->cma_popsize <= 0) c->cma_popsize = tun_cmaes_default_popsize(s);
    if (c->nsga_mutation_prob < 0 && s->n > 0) c->nsga_mutation_prob = 1.0 / s->n;
    if (c->bohb_min_points <= 0) c->bohb_min_points = s->n + 2;
    if (c->algorithm == TUN_BOHB && c->tpe_gamma <= 0) c->tpe_gamma = TUN_BOHB_DEFAULT_GAMMA;
    if (c->algorithm != TUN_PBT) c->pbt_population = def.pbt_population;
    if (c->algorithm != TUN_NSGA2) c->nsga_population = def.nsga_population;
}

int tun_config_same_search(const tun_config *a, const tun_config *b, const tun_space *space) {
    tun_config x = *a, y = *b;
    effective(&x, space);
    effective(&y, space);
    return tun_config_equal(&x, &y);
}

/* A JSON integer in [lo, hi]. Strict (60.0 is refused) because other layers
 * read the pass-through keys with json_integer_value. */
static int get_int(const json_t *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                   hpo_error *err) {
    if (!json_is_integer(v)) return hpo_fail(err, HPO_EINVAL, field, "must be an integer");
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return hpo_fail(err, HPO_EINVAL, field, "must be between %lld and %lld", (long long)lo,
                        (long long)hi);
    *out = (int64_t)i;
    return 0;
}

/* A finite number > lo (or >= lo when closed). */
static int get_num(const json_t *v, const char *field, double lo, int closed, double *out,
                   hpo_error *err) {
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return hpo_fail(err, HPO_EINVAL, field, "must be a finite number");
    double d = json_number_value(v);
    if (closed ? d < lo : d <= lo)
        return hpo_fail(err, HPO_EINVAL, field, "must be %s %g", closed ? ">=" : ">", lo);
    *out = d;
    return 0;
}

static int get_enum(const json_t *v, const char *field, const char *const *names, int n, int *out,
                    hpo_error *err) {
    if (!json_is_string(v)) return hpo_fail(err, HPO_EINVAL, field, "must be a string");
    for (int i = 0; i < n; i++)
        if (strcmp(json_string_value(v), names[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    return hpo_fail(err, HPO_EINVAL, field, "must be one of: %s", list);
}

static int unknown_key(const char *prefix, const char *key, hpo_error *err) {
    int rc = hpo_fail(err, HPO_EINVAL, NULL, "unknown key");
    if (err) snprintf(err->field, sizeof err->field, "%s.%.80s", prefix, key);
    return rc;
}

static int parse_pruner(const json_t *pj, tun_pruner_config *pc, hpo_error *err) {
    static const char *const kinds[] = {"none", "median", "asha", "hyperband"};
    const char *key;
    json_t *v;
    int64_t i = 0;
    int rc, have_min = 0, have_max = 0;
    char field[128];

    if (!json_is_object(pj))
        return hpo_fail(err, HPO_EINVAL, "tuner.pruner", "must be an object with an \"algorithm\"");
    v = json_object_get(pj, "algorithm");
    if (!v) return hpo_fail(err, HPO_EINVAL, "tuner.pruner.algorithm", "is required");
    int kind = 0;
    if ((rc = get_enum(v, "tuner.pruner.algorithm", kinds, 4, &kind, err))) return rc;
    pc->kind = (tun_pruner_kind)kind; /* the enum follows the order of kinds[] */

    json_object_foreach((json_t *)pj, key, v) {
        snprintf(field, sizeof field, "tuner.pruner.%.80s", key);
        if (strcmp(key, "algorithm") == 0) {
            continue;
        } else if (strcmp(key, "eta") == 0) {
            if ((rc = get_num(v, field, 2, 1, &pc->eta, err))) return rc;
            if (pc->eta > 1000) return hpo_fail(err, HPO_EINVAL, field, "must be at most 1000");
        } else if (strcmp(key, "min_resource") == 0 || strcmp(key, "min_epochs") == 0) {
            if (have_min++)
                return hpo_fail(err, HPO_EINVAL, field,
                                "give min_resource or min_epochs, not both");
            if ((rc = get_int(v, field, 1, MAX_INT_OPTION, &i, err))) return rc;
            pc->min_resource = i;
        } else if (strcmp(key, "max_resource") == 0 || strcmp(key, "max_epochs") == 0) {
            if (have_max++)
                return hpo_fail(err, HPO_EINVAL, field,
                                "give max_resource or max_epochs, not both");
            if ((rc = get_int(v, field, 1, MAX_INT_OPTION, &i, err))) return rc;
            pc->max_resource = i;
        } else if (strcmp(key, "warmup_steps") == 0) {
            if ((rc = get_int(v, field, 0, MAX_INT_OPTION, &i, err))) return rc;
            pc->warmup_steps = i;
        } else if (strcmp(key, "n_startup_trials") == 0) {
            if ((rc = get_int(v, field, 0, MAX_INT_OPTION, &i, err))) return rc;
            pc->n_startup_trials = (int)i;
        } else {
            return unknown_key("tuner.pruner", key, err);
        }
    }
    if (pc->max_resource > 0 && pc->max_resource < pc->min_resource) {
        const char *f = json_object_get(pj, "max_epochs") ? "tuner.pruner.max_epochs"
                                                          : "tuner.pruner.max_resource";
        return hpo_fail(err, HPO_EINVAL, f, "must be at least the minimum resource (%lld)",
                        (long long)pc->min_resource);
    }
    if (pc->kind == TUN_PRUNER_HYPERBAND && pc->max_resource > 0) {
        tun_hb_bracket br[TUN_HB_MAX_ROUNDS];
        rc = tun_hyperband_brackets(pc->eta, pc->min_resource, pc->max_resource, br,
                                    TUN_HB_MAX_ROUNDS);
        if (rc < 0)
            return hpo_fail(err, HPO_EINVAL, "tuner.pruner",
                            "max_resource / min_resource needs more than %d Hyperband rounds",
                            TUN_HB_MAX_ROUNDS);
    }
    return 0;
}

/* pbt's "mutable": names of unconditional parameters of the space, as a
 * bit mask over the space's order. */
static int parse_mutable(const json_t *v, const tun_space *space, uint64_t *out, hpo_error *err) {
    size_t k;
    json_t *name;
    uint64_t mask = 0;
    if (!json_is_array(v)) return hpo_fail(err, HPO_EINVAL, "tuner.mutable", "must be an array of parameter names");
    json_array_foreach(v, k, name) {
        int i = space && json_is_string(name) ? tun_space_index(space, json_string_value(name)) : -1;
        if (i < 0 || i >= 64)
            return hpo_fail(err, HPO_EINVAL, "tuner.mutable", "item %zu is not a parameter of the space", k);
        if (space->params[i].parent >= 0)
            return hpo_fail(err, HPO_EINVAL, "tuner.mutable",
                            "'%s' is conditional: a member cannot change it while it trains",
                            space->params[i].name);
        mask |= (uint64_t)1 << i;
    }
    *out = mask;
    return 0;
}

static int check_grid(const tun_space *space, hpo_error *err) {
    for (int k = 0; k < space->n; k++) {
        const tun_param *p = &space->params[k];
        if (p->type == TUN_FLOAT && p->step <= 0) {
            int rc = hpo_fail(err, HPO_EINVAL, NULL,
                              "grid search needs a \"step\" for every float parameter; '%s' has "
                              "none",
                              p->name);
            if (err) snprintf(err->field, sizeof err->field, "space.%s", p->name);
            return rc;
        }
    }
    uint64_t size = tun_grid_size(space);
    if (size > TUN_GRID_MAX)
        return hpo_fail(err, HPO_EINVAL, "space",
                        "the grid has more than %d points; use coarser steps or fewer values",
                        TUN_GRID_MAX);
    return 0;
}

/* Keys checked here and read by other layers (not in tun_config). */
static const char *const int_keys_elsewhere[] = {"max_trials", "executions_per_trial", "parallel_trials"};
static const char *const num_keys_elsewhere[] = {"max_seconds", "trial_timeout", "lease_seconds"};

static int in_list(const char *key, const char *const *list, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (strcmp(key, list[k]) == 0) return 1;
    return 0;
}

int tun_config_key_read_elsewhere(const char *key) {
    return in_list(key, int_keys_elsewhere, HPO_ARRAY_LEN(int_keys_elsewhere)) ||
           in_list(key, num_keys_elsewhere, HPO_ARRAY_LEN(num_keys_elsewhere));
}

int tun_config_parse(const json_t *tuner, const tun_space *space, tun_config *out,
                     hpo_error *err) {
    static const char *const acqs[] = {"ei", "ucb"};
    tun_config cfg;
    const char *key;
    json_t *v;
    int64_t i = 0;
    double d = 0;
    int rc, e = 0, have_sample_size = 0, have_pruner = 0, have_population = 0;
    char field[128];

    tun_config_default(&cfg);
    if (!tuner || json_is_null(tuner)) goto done;
    if (!json_is_object(tuner)) return hpo_fail(err, HPO_EINVAL, "tuner", "must be an object");

    json_object_foreach((json_t *)tuner, key, v) {
        snprintf(field, sizeof field, "tuner.%.80s", key);
        if (strcmp(key, "algorithm") == 0) {
            if ((rc = get_enum(v, field, algorithm_names, (int)HPO_ARRAY_LEN(algorithm_names), &e,
                               err)))
                return rc;
            cfg.algorithm = (tun_algorithm)e;
        } else if (strcmp(key, "seed") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return hpo_fail(err, HPO_EINVAL, field, "must be an integer >= 0");
            cfg.seed = (uint64_t)json_integer_value(v);
        } else if (strcmp(key, "n_startup_trials") == 0) {
            if ((rc = get_int(v, field, 0, MAX_INT_OPTION, &i, err))) return rc;
            cfg.n_startup_trials = (int)i;
        } else if (strcmp(key, "acquisition") == 0) {
            if ((rc = get_enum(v, field, acqs, 2, &e, err))) return rc;
            cfg.acquisition = e ? TUN_ACQ_UCB : TUN_ACQ_LOG_EI;
        } else if (strcmp(key, "ucb_beta") == 0) {
            if ((rc = get_num(v, field, 0, 0, &cfg.ucb_beta, err))) return rc;
        } else if (strcmp(key, "n_ei_candidates") == 0) {
            if ((rc = get_int(v, field, 1, 10000, &i, err))) return rc;
            cfg.tpe_n_candidates = (int)i;
        } else if (strcmp(key, "gamma") == 0) {
            if ((rc = get_num(v, field, 0, 0, &d, err))) return rc;
            if (d >= 1) return hpo_fail(err, HPO_EINVAL, field, "must be in (0, 1)");
            cfg.tpe_gamma = d;
        } else if (strcmp(key, "tpe_multi_fidelity") == 0) {
            if (!json_is_boolean(v)) return hpo_fail(err, HPO_EINVAL, field, "must be true or false");
            cfg.tpe_multi_fidelity = json_is_true(v);
        } else if (strcmp(key, "deterministic") == 0) {
            if (!json_is_boolean(v)) return hpo_fail(err, HPO_EINVAL, field, "must be true or false");
            cfg.deterministic = json_is_true(v);
        } else if (strcmp(key, "popsize") == 0) {
            if ((rc = get_int(v, field, 4, TUN_CMA_MAX_LAMBDA, &i, err))) return rc;
            cfg.cma_popsize = (int)i;
        } else if (strcmp(key, "sigma0") == 0) {
            if ((rc = get_num(v, field, 0, 0, &d, err))) return rc;
            if (d > 1)
                return hpo_fail(err, HPO_EINVAL, field,
                                "must be in (0, 1] (the space is scaled to [0, 1])");
            cfg.cma_sigma0 = d;
        } else if (strcmp(key, "population") == 0) {
            if ((rc = get_int(v, field, 2, 100000, &i, err))) return rc;
            cfg.evo_population = (int)i;
        } else if (strcmp(key, "sample_size") == 0) {
            if ((rc = get_int(v, field, 1, 100000, &i, err))) return rc;
            cfg.evo_sample_size = (int)i;
            have_sample_size = 1;
        } else if (strcmp(key, "population_size") == 0) {
            if ((rc = get_int(v, field, 2, 100000, &i, err))) return rc;
            cfg.nsga_population = (int)i;
            have_population = 1;
        } else if (strcmp(key, "perturbation_interval") == 0) {
            if ((rc = get_int(v, field, 1, MAX_INT_OPTION, &i, err))) return rc;
            cfg.pbt_interval = (int)i;
        } else if (strcmp(key, "quantile") == 0) {
            if ((rc = get_num(v, field, 0, 0, &d, err))) return rc;
            if (d > 0.5) return hpo_fail(err, HPO_EINVAL, field, "must be in (0, 0.5]");
            cfg.pbt_quantile = d;
        } else if (strcmp(key, "resample_probability") == 0) {
            if ((rc = get_num(v, field, 0, 1, &d, err))) return rc;
            if (d > 1) return hpo_fail(err, HPO_EINVAL, field, "must be at most 1");
            cfg.pbt_resample = d;
        } else if (strcmp(key, "mutable") == 0) {
            if ((rc = parse_mutable(v, space, &cfg.pbt_mutable, err))) return rc;
            cfg.pbt_mutable_given = 1;
        } else if (strcmp(key, "crossover") == 0) {
            static const char *const xovers[] = {"sbx", "uniform"};
            if ((rc = get_enum(v, field, xovers, 2, &e, err))) return rc;
            cfg.nsga_crossover = (tun_crossover)e;
        } else if (strcmp(key, "crossover_prob") == 0 || strcmp(key, "swapping_prob") == 0 ||
                   strcmp(key, "mutation_prob") == 0) {
            if ((rc = get_num(v, field, 0, 1, &d, err))) return rc; /* mutation 0: none, as Optuna takes it */
            if (d > 1) return hpo_fail(err, HPO_EINVAL, field, "must be at most 1");
            *(key[0] == 'c' ? &cfg.nsga_crossover_prob
                            : key[0] == 's' ? &cfg.nsga_swapping_prob : &cfg.nsga_mutation_prob) = d;
        } else if (strcmp(key, "random_fraction") == 0) {
            if ((rc = get_num(v, field, 0, 1, &d, err))) return rc;
            if (d > 1) return hpo_fail(err, HPO_EINVAL, field, "must be in [0, 1]");
            cfg.bohb_random_fraction = d;
        } else if (strcmp(key, "bandwidth_factor") == 0) {
            if ((rc = get_num(v, field, 0, 0, &d, err))) return rc;
            if (d > 100) return hpo_fail(err, HPO_EINVAL, field, "must be at most 100");
            cfg.bohb_bandwidth_factor = d;
        } else if (strcmp(key, "min_points_in_model") == 0) {
            if ((rc = get_int(v, field, 1, MAX_INT_OPTION, &i, err))) return rc;
            cfg.bohb_min_points = (int)i;
        } else if (strcmp(key, "pruner") == 0) {
            if (json_is_null(v)) continue;
            if ((rc = parse_pruner(v, &cfg.pruner, err))) return rc;
            have_pruner = 1;
        } else if (in_list(key, int_keys_elsewhere, HPO_ARRAY_LEN(int_keys_elsewhere))) {
            if ((rc = get_int(v, field, 1, MAX_INT_OPTION, &i, err))) return rc;
        } else if (in_list(key, num_keys_elsewhere, HPO_ARRAY_LEN(num_keys_elsewhere))) {
            if ((rc = get_num(v, field, 0, 0, &d, err))) return rc;
        } else {
            return unknown_key("tuner", key, err);
        }
    }
    if (cfg.evo_sample_size > cfg.evo_population) {
        if (have_sample_size)
            return hpo_fail(err, HPO_EINVAL, "tuner.sample_size",
                            "must be at most the population (%d)", cfg.evo_population);
        cfg.evo_sample_size = cfg.evo_population;
    }
    if (cfg.algorithm == TUN_BOHB) { /* BOHB is its model plus Hyperband's brackets */
        if (!have_pruner)
            cfg.pruner.kind = TUN_PRUNER_HYPERBAND;
        else if (cfg.pruner.kind != TUN_PRUNER_HYPERBAND)
            return hpo_fail(err, HPO_EINVAL, "tuner.pruner.algorithm",
                            "bohb runs on Hyperband's brackets: the pruner must be \"hyperband\" "
                            "(or left out)");
    }
    if (have_population) cfg.pbt_population = cfg.nsga_population;
    if (cfg.algorithm != TUN_PBT) {
        static const char *const pbt_keys[] = {"perturbation_interval", "quantile", "resample_probability",
                                               "mutable"};
        for (size_t k = 0; k < HPO_ARRAY_LEN(pbt_keys); k++)
            if (json_object_get(tuner, pbt_keys[k])) {
                snprintf(field, sizeof field, "tuner.%s", pbt_keys[k]);
                return hpo_fail(err, HPO_EINVAL, field, "is an option of the \"pbt\" algorithm");
            }
    } else if (cfg.pruner.kind != TUN_PRUNER_NONE) {
        return hpo_fail(err, HPO_EINVAL, "tuner.pruner",
                        "pbt replaces its bottom members itself: it takes no pruner");
    }
done:
    if (cfg.algorithm == TUN_GRID) {
        if (!space) return hpo_fail(err, HPO_EINVAL, "space", "grid search needs a space");
        if ((rc = check_grid(space, err))) return rc;
    }
    *out = cfg;
    return 0;
}
