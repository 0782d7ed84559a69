/* study_def.c - validation of a study definition (POST /api/v1/studies). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api_internal.h"

static const char *top_keys[] = {"name", "description", "objective", "objectives", "constraints", "space",
                                 "tuner", "model", "dataset", "training", "warm_start"};

static int known(const char *key, const char **keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, keys[i]) == 0) return 1;
    return 0;
}

static int parse_name(const json_t *def, const char **name, hpo_error *err) {
    const json_t *j = json_object_get(def, "name");
    if (!j) {
        *name = "study";
        return 0;
    }
    if (!json_is_string(j)) return hpo_fail(err, HPO_EINVAL, "name", "name must be a string");
    const char *s = json_string_value(j);
    size_t len = json_string_length(j), chars = 0;
    for (size_t i = 0; i < len; i++) chars += ((unsigned char)s[i] & 0xc0) != 0x80; /* UTF-8: not a continuation */
    if (chars == 0 || chars > 128)
        return hpo_fail(err, HPO_EINVAL, "name", "name must have 1 to 128 characters");
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return hpo_fail(err, HPO_EINVAL, "name", "name must not contain control characters");
    *name = s;
    return 0;
}

/* A population-based study's training: one execution per member (a bred
 * member copies one checkpoint), boundaries below max_epochs, and the
 * parameters a member may change (tuner.mutable, or what keeps the model's
 * shapes: api_pbt_mutable). */
static int pbt_check(api_study_def *d, hpo_error *err) {
    if (d->emb.executions != 1)
        return hpo_fail(err, HPO_EINVAL, "tuner.executions_per_trial", "pbt trains one execution per member");
    if (d->tuner.pbt_interval >= d->emb.max_epochs)
        return hpo_fail(err, HPO_EINVAL, "tuner.perturbation_interval",
                        "must be below training.max_epochs (%d): members are ranked every that many epochs",
                        d->emb.max_epochs);
    if (!d->tuner.pbt_mutable_given) d->tuner.pbt_mutable = api_pbt_mutable(d);
    return 0;
}

/* The pruner keys each pruner reads (tuners/pruners.c), by
 * tun_pruner_kind: asha's rungs have no end (max_resource is Hyperband's),
 * the median rule has no rungs, and only it waits for warmup_steps and
 * n_startup_trials. A new study is refused the others (tun_config_parse
 * takes them all, so that a stored study still loads). */
static int pruner_keys_check(const json_t *tuner, const tun_pruner_config *pc, hpo_error *err) {
    static const char *const keys[][6] = {
        {"algorithm"},
        {"algorithm", "warmup_steps", "n_startup_trials"},
        {"algorithm", "eta", "min_resource", "min_epochs"},
        {"algorithm", "eta", "min_resource", "min_epochs", "max_resource", "max_epochs"},
    };
    static const size_t n_keys[] = {1, 3, 4, 6};
    static const char *const names[] = {"none", "median", "asha", "hyperband"};
    const json_t *pj = tuner ? json_object_get(tuner, "pruner") : NULL;
    if (!json_is_object(pj) || (int)pc->kind < 0 || (int)pc->kind >= (int)HPO_ARRAY_LEN(keys)) return 0;
    const char *key = api_unknown_key(pj, keys[pc->kind], n_keys[pc->kind]);
    if (!key) return 0;
    char field[128], list[128] = "";
    snprintf(field, sizeof field, "tuner.pruner.%.80s", key);
    for (size_t k = 1; k < n_keys[pc->kind]; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == 1 ? "" : ", ", keys[pc->kind][k]);
    return hpo_fail(err, HPO_EINVAL, field, "%s: the %s pruner does not read it (it takes %s)", field,
                    names[pc->kind], list[0] ? list : "no options");
}

/* The tuner keys each algorithm reads (tuners/), by tun_algorithm,
 * after those of every study (the scheduler's and the pruner). A new
 * study is refused another's (cmaes took n_startup_trials and sampled no
 * random trials first; evolution took nsga2's population_size for its
 * population); tun_config_parse takes them all, so a stored study still
 * loads. */
static int tuner_keys_check(const json_t *tuner, tun_algorithm algorithm, hpo_error *err) {
    enum { COMMON = 9, MAX_OWN = 5 };
    static const char *const own[][MAX_OWN] = {
        {NULL},
        {NULL},
        {"n_startup_trials", "n_ei_candidates", "gamma", "tpe_multi_fidelity"},
        {"n_startup_trials", "acquisition", "ucb_beta", "deterministic"},
        {"popsize", "sigma0"},
        {"population", "sample_size"},
        {"population_size", "crossover", "crossover_prob", "swapping_prob", "mutation_prob"},
        {"n_ei_candidates", "gamma", "random_fraction", "bandwidth_factor", "min_points_in_model"},
        {"population_size", "perturbation_interval", "quantile", "resample_probability", "mutable"},
    };
    if (!json_is_object(tuner) || (int)algorithm < 0 || (int)algorithm >= (int)HPO_ARRAY_LEN(own)) return 0;
    const char *keys[COMMON + MAX_OWN] = {"algorithm", "seed", "pruner", "max_trials", "max_seconds",
                                          "lease_seconds", "executions_per_trial", "parallel_trials",
                                          "trial_timeout"};
    size_t n = COMMON;
    char list[160] = "";
    for (size_t k = 0; k < MAX_OWN && own[algorithm][k]; k++) {
        keys[n++] = own[algorithm][k];
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", own[algorithm][k]);
    }
    const char *key = api_unknown_key(tuner, keys, n);
    if (!key) return 0;
    char field[128];
    snprintf(field, sizeof field, "tuner.%.80s", key);
    return hpo_fail(err, HPO_EINVAL, field, "%s: the %s algorithm does not read it (its own options: %s)", field,
                    tun_algorithm_name(algorithm), list[0] ? list : "none");
}

static int def_parse(api_ctx *ctx, const json_t *def, int check_model, api_study_def *out, hpo_error *err) {
    double default_lease = ctx->opt.default_lease_seconds;
    api_study_def d;
    memset(&d, 0, sizeof d);
    int rc;
    if (!json_is_object(def)) return hpo_fail(err, HPO_EINVAL, "", "a study must be a JSON object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)def, key, v) {
        if (!known(key, top_keys, HPO_ARRAY_LEN(top_keys)))
            return hpo_fail(err, HPO_EINVAL, key, "unknown key \"%.64s\" in the study definition", key);
    }
    if ((rc = parse_name(def, &d.name, err))) return rc;
    const json_t *desc = json_object_get(def, "description");
    if (desc && !json_is_string(desc))
        return hpo_fail(err, HPO_EINVAL, "description", "description must be a string");
    if ((rc = api_objectives_parse(def, &d, err))) return rc;

    json_t *space = json_incref(json_object_get(def, "space"));
    d.embedded = json_object_get(def, "model") != NULL;
    if (d.embedded) {
        json_decref(space);
        space = NULL;
        if ((rc = api_embedded_parse(ctx, def, &d, &space, err))) return rc;
    } else if (json_object_get(def, "dataset") || json_object_get(def, "training")) {
        return hpo_fail(err, HPO_EINVAL, json_object_get(def, "dataset") ? "dataset" : "training",
                        "\"dataset\" and \"training\" need a \"model\" (an embedded study)");
    }
    if (!space) {
        api_embedded_clear(&d.emb);
        return hpo_fail(err, HPO_EINVAL, "space", "a study needs a \"space\" object");
    }
    rc = tun_space_parse(space, &d.space, err);
    if (rc) {
        json_decref(space);
        api_embedded_clear(&d.emb);
        return rc;
    }
    d.space_json = space; /* the effective space: a premade template's merged with "space" */

    const json_t *tuner = json_object_get(def, "tuner");
    if ((rc = tun_config_parse(tuner, d.space, &d.tuner, err))) goto fail;
    if ((rc = api_objectives_check(&d, def, err))) goto fail;
    if ((rc = api_warm_start_check(ctx, def, &d, check_model, err))) goto fail;
    /* tun_config_parse validated the types of the keys read here. */
    const json_t *mt = tuner ? json_object_get(tuner, "max_trials") : NULL;
    d.max_trials = mt ? json_integer_value(mt) : 0;
    const json_t *ms = tuner ? json_object_get(tuner, "max_seconds") : NULL;
    d.max_seconds = ms ? json_number_value(ms) : 0;
    const json_t *lease = tuner ? json_object_get(tuner, "lease_seconds") : NULL;
    d.lease_seconds = lease ? json_number_value(lease) : default_lease;

    /* Keys only the scheduler reads (it runs an embedded study's trials):
     * on an external study they would do nothing, so a new one is refused
     * them (a stored one still loads). */
    static const char *embedded_only[] = {"parallel_trials", "trial_timeout", "executions_per_trial"};
    for (size_t k = 0; !d.embedded && check_model && tuner && k < HPO_ARRAY_LEN(embedded_only); k++)
        if (json_object_get(tuner, embedded_only[k])) {
            char field[64];
            snprintf(field, sizeof field, "tuner.%s", embedded_only[k]);
            rc = hpo_fail(err, HPO_EINVAL, field,
                          "%s applies to embedded studies, whose trials hpod runs: an external study's clients "
                          "decide how many trials they run at once, for how long, and send repeated executions "
                          "as tell's \"repeats\"", field);
            goto fail;
        }
    if (check_model && ((rc = pruner_keys_check(tuner, &d.tuner.pruner, err)) ||
                        (rc = tuner_keys_check(tuner, d.tuner.algorithm, err))))
        goto fail;
    if (check_model && d.tuner.algorithm == TUN_BAYESIAN && tun_gp_columns(d.space) > TUN_GP_MAX_COLUMNS) {
        rc = hpo_fail(err, HPO_EINVAL, "tuner.algorithm",
                      "bayesian encodes this space in %d columns (one per number, one per choice value, two per "
                      "bool) and takes at most %d: its Gaussian process would cost seconds and gigabytes per "
                      "trial; tpe handles large choices", tun_gp_columns(d.space), TUN_GP_MAX_COLUMNS);
        goto fail;
    }
    if (!d.embedded && d.tuner.algorithm == TUN_PBT) {
        rc = hpo_fail(err, HPO_EINVAL, "tuner.algorithm",
                      "pbt trains its members itself: it needs an embedded study (\"model\" and \"dataset\")");
        goto fail;
    }
    if (d.embedded) {
        const json_t *ex = tuner ? json_object_get(tuner, "executions_per_trial") : NULL;
        const json_t *par = tuner ? json_object_get(tuner, "parallel_trials") : NULL;
        const json_t *tt = tuner ? json_object_get(tuner, "trial_timeout") : NULL;
        d.emb.executions = ex ? (int)json_integer_value(ex) : 1;
        if (ex && json_integer_value(ex) > API_MAX_EXECUTIONS) { /* job_trial.c keeps that many curves */
            rc = hpo_fail(err, HPO_EINVAL, "tuner.executions_per_trial",
                          "an embedded study trains at most %d executions per trial", API_MAX_EXECUTIONS);
            goto fail;
        }
        d.emb.parallel = par ? (int)json_integer_value(par) : 0;
        d.emb.trial_timeout = tt ? json_number_value(tt) : 0;
        if (d.max_trials <= 0 && d.max_seconds <= 0) {
            rc = hpo_fail(err, HPO_EINVAL, "tuner.max_trials",
                          "an embedded study needs a budget: tuner.max_trials or tuner.max_seconds");
            goto fail;
        }
        if (d.tuner.algorithm == TUN_PBT && (rc = pbt_check(&d, err))) goto fail;
        /* bred members are trials too: a budget of the population alone
         * leaves none to breed, and pbt would be random search */
        if (check_model && d.tuner.algorithm == TUN_PBT && d.max_trials > 0 &&
            d.max_trials <= d.tuner.pbt_population) {
            rc = hpo_fail(err, HPO_EINVAL, "tuner.max_trials",
                          "pbt counts every trial it breeds toward max_trials (%lld): with a population of %d it "
                          "could breed none; give more (each boundary breeds about quantile x population_size)",
                          (long long)d.max_trials, d.tuner.pbt_population);
            goto fail;
        }
        /* Hyperband's R defaults to the epochs a trial may train. */
        if (d.tuner.pruner.kind == TUN_PRUNER_HYPERBAND && d.tuner.pruner.max_resource <= 0)
            d.tuner.pruner.max_resource = d.emb.max_epochs;
        if (check_model && (rc = api_embedded_check_model(ctx, &d, err))) goto fail;
    }
    *out = d;
    return 0;
fail:
    tun_space_free(d.space);
    json_decref(d.space_json);
    api_embedded_clear(&d.emb);
    return rc;
}

int api_study_def_parse(api_ctx *ctx, const json_t *def, api_study_def *out, hpo_error *err) {
    return def_parse(ctx, def, 1, out, err);
}

int api_study_def_load(api_ctx *ctx, const json_t *def, api_study_def *out, hpo_error *err) {
    return def_parse(ctx, def, 0, out, err);
}

void api_study_def_clear(api_study_def *d) {
    tun_space_free(d->space);
    d->space = NULL;
    json_decref(d->space_json);
    d->space_json = NULL;
    api_embedded_clear(&d->emb);
}
