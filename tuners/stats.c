/*
 * stats.c - the statistics of repeated executions: mean and sample standard
 * deviation, and Welch's t-test for "is the best configuration really better
 * than the second?".
 *
 * Welch: t = (m1 - m2) / sqrt(s1^2/n1 + s2^2/n2) with Welch-Satterthwaite
 * degrees of freedom; the two-sided p-value is I_{dof/(dof+t^2)}(dof/2, 1/2),
 * the regularised incomplete beta function, evaluated by its continued
 * fraction (modified Lentz) after the usual symmetry swap, with lgamma for
 * the prefactor. Accurate to ~1e-12 relative for the ranges that occur here.
 */
#include <math.h>

#include "tuners_internal.h"

void tun_mean_std(const double *v, int n, double *mean, double *std) {
    double m = NAN, s = NAN;
    if (n >= 1) {
        double sum = 0;
        for (int i = 0; i < n; i++) sum += v[i];
        m = sum / n;
    }
    if (n >= 2) {
        double ss = 0; /* two-pass: exact for equal values, no cancellation */
        for (int i = 0; i < n; i++) ss += (v[i] - m) * (v[i] - m);
        s = sqrt(ss / (n - 1));
    }
    if (mean) *mean = m;
    if (std) *std = s;
}

/* Continued fraction of the incomplete beta function (Numerical Recipes 6.4). */
static double beta_cf(double a, double b, double x) {
    const double tiny = 1e-300, eps = 1e-15;
    double qab = a + b, qap = a + 1, qam = a - 1;
    double c = 1, d = 1 - qab * x / qap;
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 10000; m++) {
        int m2 = 2 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < eps) break;
    }
    return h;
}

/* I_x(a, b), the regularised incomplete beta function, for a, b > 0. */
static double betainc(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    double lbt = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    double bt = exp(lbt);
    if (x < (a + 1) / (a + b + 2)) return bt * beta_cf(a, b, x) / a;
    return 1 - bt * beta_cf(b, a, 1 - x) / b;
}

/* Two-sided p-value of Student's t with dof degrees of freedom. */
static double student_t_p(double t, double dof) {
    if (isnan(t) || isnan(dof) || dof <= 0) return NAN;
    if (isinf(t)) return 0;
    double x = dof / (dof + t * t);
    double p = betainc(dof / 2, 0.5, x);
    return fmin(fmax(p, 0), 1);
}

double tun_welch_p(double m1, double s1, int n1, double m2, double s2, int n2) {
    if (n1 < 2 || n2 < 2 || !isfinite(m1) || !isfinite(m2) || !isfinite(s1) || !isfinite(s2))
        return NAN;
    double a = s1 * s1 / n1, b = s2 * s2 / n2;
    if (a + b == 0) return m1 == m2 ? 1.0 : 0.0; /* no noise: any difference is certain */
    double t = (m1 - m2) / sqrt(a + b);
    double dof = (a + b) * (a + b) / (a * a / (n1 - 1) + b * b / (n2 - 1));
    return student_t_p(t, dof);
}
