/*
 * sampler_util.h - helpers shared by the sampler tests (test_tpe.c,
 * test_gp.c): parse a space, run an ask/tell loop, check a configuration
 * against its space (activity, bounds, steps). Header-only, static.
 */
#ifndef HPO_TEST_SAMPLER_UTIL_H
#define HPO_TEST_SAMPLER_UTIL_H

#include <math.h>
#include <string.h>

#include "tuners.h"

/* A mixed space with a condition: numbers, log, steps, a choice, a bool. */
static const char MIXED_SPACE[] =
    "{\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1e-1,\"log\":true},"
    "\"units\":{\"type\":\"int\",\"low\":16,\"high\":256,\"step\":16},"
    "\"layers\":{\"type\":\"int\",\"low\":1,\"high\":4},"
    "\"drop\":{\"type\":\"float\",\"low\":0,\"high\":0.5,\"step\":0.05},"
    "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\",\"rmsprop\"]},"
    "\"momentum\":{\"type\":\"float\",\"low\":0,\"high\":0.99,\"condition\":{\"opt\":[\"sgd\"]}},"
    "\"nesterov\":{\"type\":\"bool\",\"condition\":{\"opt\":[\"sgd\"]}},"
    "\"bn\":{\"type\":\"bool\"}}";

static inline tun_space *parse_space(const char *text) {
    json_error_t jerr;
    json_t *js = json_loads(text, 0, &jerr);
    tun_space *s = NULL;
    hpo_error err;
    if (!js || tun_space_parse(js, &s, &err) != 0) s = NULL;
    json_decref(js);
    return s;
}

/* Every parameter is active exactly when it has a value, and every value is
 * on its domain (snapping leaves it alone, choices in range). */
static inline int config_valid(const tun_space *s, const double *x) {
    for (int i = 0; i < s->n; i++) {
        int active = tun_space_is_active(s, x, i);
        if (active != !isnan(x[i])) return 0;
        if (!active) continue;
        const tun_param *p = &s->params[i];
        if (p->type == TUN_CHOICE || p->type == TUN_BOOL) {
            int k = p->type == TUN_BOOL ? 2 : p->n_choices;
            if (x[i] != floor(x[i]) || x[i] < 0 || x[i] >= k) return 0;
        } else {
            if (x[i] < p->low || x[i] > p->high) return 0;
            if (tun_space_snap(s, i, x[i]) != x[i]) return 0;
        }
    }
    return 1;
}

/* Objective for the mixed space: smooth in the numbers, better with adam,
 * and with momentum near 0.9 when sgd. */
static inline double mixed_objective(const tun_space *s, const double *x) {
    double f = 0.0;
    for (int i = 0; i < s->n; i++) {
        if (isnan(x[i])) continue;
        const tun_param *p = &s->params[i];
        if (p->type == TUN_CHOICE) {
            f += x[i] == 1 ? 0.0 : 0.5;
        } else if (p->type == TUN_BOOL) {
            f += 0.1 * x[i];
        } else {
            double lo = p->log ? log(p->low) : p->low, hi = p->log ? log(p->high) : p->high;
            double u = ((p->log ? log(x[i]) : x[i]) - lo) / (hi - lo);
            f += (u - 0.3) * (u - 0.3);
        }
    }
    return f;
}

/* Bitwise equality of two configurations (NaN equals NaN). */
static inline int same_bits(const double *a, const double *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof(double)) == 0;
}

#endif
