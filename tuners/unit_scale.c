/*
 * unit_scale.c - the [0, 1] encoding of int and float parameters that cmaes
 * and evolution search in (tuners_internal.h: tun_unit_*).
 *
 * A continuous float: (v - low) / (high - low), or the same of the logs. A
 * discrete one with k values (int, stepped float): k bins covering [0, 1]
 * (cma.h's tun_cma_dim), the value at the centre of its bin; a log int's
 * bins are [ln(v - 1/2), ln(v + 1/2)] rescaled and its value at ln v, as in
 * Optuna's search-space transform. A range of one value encodes as 1/2.
 */
#include <math.h>

#include "cma.h"
#include "tuners_internal.h"

void tun_unit_dim(const tun_param *p, tun_cma_dim *d) {
    int64_t k = tun_param_n_values(p);
    d->n_values = k > 0 ? k : 0;
    d->log = p->type == TUN_INT && p->log && k > 1;
    d->low = p->low;
}

double tun_unit_encode(const tun_param *p, double v) {
    tun_cma_dim d;
    tun_unit_dim(p, &d);
    if (d.n_values == 0) {
        if (!(p->high > p->low)) return 0.5;
        if (p->log) return (log(v) - log(p->low)) / (log(p->high) - log(p->low));
        return (v - p->low) / (p->high - p->low);
    }
    if (d.n_values == 1) return 0.5;
    int64_t j = tun_param_index_of(p, v);
    if (j < 0) j = tun_cma_dim_bin(&d, 0.5); /* not a value: never for a stored trial */
    if (d.log) {
        double a = log(p->low - 0.5), b = log(p->low + (double)d.n_values - 0.5);
        return (log(p->low + (double)j) - a) / (b - a);
    }
    return ((double)j + 0.5) / (double)d.n_values;
}

double tun_unit_decode(const tun_param *p, double u) {
    tun_cma_dim d;
    tun_unit_dim(p, &d);
    u = isnan(u) ? 0.5 : fmin(fmax(u, 0.0), 1.0);
    if (d.n_values > 0) return tun_param_value_at(p, tun_cma_dim_bin(&d, u));
    double v = p->log ? exp(log(p->low) + u * (log(p->high) - log(p->low)))
                      : p->low + u * (p->high - p->low);
    return fmin(fmax(v, p->low), p->high);
}
