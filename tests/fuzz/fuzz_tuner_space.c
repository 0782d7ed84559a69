/*
 * fuzz_tuner_space.c - libFuzzer harness for what a client controls in the
 * tuners: a study's "space" and "tuner" blocks and the params of a told or
 * enqueued trial. Input: one JSON document {"space": ..., "tuner": ...,
 * "params": ...} (any of them may be missing or of the wrong type).
 *
 * Checks beyond "no crash, no leak, no UB": a parse either succeeds with the
 * documented invariants (parents first, 1..64 parameters) or fails with
 * HPO_EINVAL and a field under "space"/"tuner"/"params"; a sampled
 * configuration survives to_json -> from_json unchanged; grid, random and the
 * pruners run a few steps on it.
 *
 *   cmake -S . -B build-fuzz -DHPO_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
 *   cmake --build build-fuzz --target fuzz_tuner_space
 *   build-fuzz/tests/fuzz/fuzz_tuner_space -max_total_time=120 -dict=tests/fuzz/tuner_space.dict \
 *       <scratch copy of tests/fuzz/corpus/tuner_space>
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tuners.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const double *a, const double *b, int n) {
    for (int i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return 0;
        if (!isnan(a[i]) && a[i] != b[i]) return 0;
    }
    return 1;
}

static void check_field(const hpo_error *err, const char *prefix) {
    if (strncmp(err->field, prefix, strlen(prefix)) != 0 && strncmp(err->field, "space", 5) != 0)
        abort();
    if (!err->message[0]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t je;
    json_t *doc = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!doc) return 0;
    tun_space *s = NULL;
    hpo_error err;
    memset(&err, 0, sizeof err);
    json_t *space = json_is_object(doc) ? json_object_get(doc, "space") : doc;
    int rc = tun_space_parse(space, &s, &err);
    if (rc) {
        if (rc != HPO_EINVAL && rc != HPO_ENOMEM) abort();
        check_field(&err, "space");
        json_decref(doc);
        return 0;
    }
    if (s->n < 1 || s->n > 64) abort();
    for (int i = 0; i < s->n; i++)
        if (s->params[i].parent >= i) abort();

    tun_config cfg;
    memset(&err, 0, sizeof err);
    rc = tun_config_parse(json_object_get(doc, "tuner"), s, &cfg, &err);
    if (rc) {
        if (rc != HPO_EINVAL) abort();
        check_field(&err, "tuner");
        tun_config_default(&cfg);
    }
    if (cfg.algorithm == TUN_TPE || cfg.algorithm == TUN_BAYESIAN) cfg.algorithm = TUN_RANDOM;

    double x[64], y[64];
    hpo_rng rng;
    hpo_rng_seed(&rng, size);
    for (int k = 0; k < 8; k++) {
        tun_space_sample(s, &rng, x);
        json_t *j = tun_space_to_json(s, x);
        if (!j) abort();
        if (tun_space_from_json(s, j, y, &err) != 0 || !same(x, y, s->n)) abort();
        json_decref(j);
    }
    json_t *params = json_object_get(doc, "params");
    if (params) {
        memset(&err, 0, sizeof err);
        if (tun_space_from_json(s, params, y, &err) != 0) check_field(&err, "params");
    }

    tun_study *t = NULL;
    if (tun_study_new(s, &cfg, (int)(size & 1), &t) == 0) {
        for (int k = 0; k < 6; k++) {
            rc = tun_study_suggest(t, k, x);
            if (rc) break;
            tun_study_add(t, k, x, TUN_TRIAL_RUNNING, NAN);
            int prune;
            for (int e = 1; e < 4; e++) tun_study_report(t, k, e, (double)((k * 7 + e) % 5), &prune);
            tun_study_finish(t, k, TUN_TRIAL_COMPLETE, (double)k);
        }
        tun_study_free(t);
    }
    tun_space_free(s);
    json_decref(doc);
    return 0;
}
