/* tuners: mean/std and Welch's t-test against reference values computed
 * independently in Python: p = 1 - 2 * integral_0^|t| of the Student-t
 * density (lgamma normalisation), composite Simpson with 200k intervals,
 * which agrees with the closed forms (dof 2, dof 3) to 1e-15. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "tuners.h"

static void near(double got, double want, double rel, const char *what) {
    double d = fabs(got - want);
    printf("%-28s got %.15g want %.15g (rel diff %.2e)\n", what, got, want, d / fabs(want));
    if (!(d <= rel * fabs(want))) fail_msg("%s: got %.15g, want %.15g", what, got, want);
}

static void test_mean_std(void **state) {
    (void)state;
    double v[] = {0.91, 0.92, 0.93}, m, s;
    tun_mean_std(v, 3, &m, &s);
    near(m, 0.92, 1e-14, "mean");
    near(s, 0.01, 1e-12, "std");
    double w[] = {2, 4, 4, 4, 5, 5, 7, 9}; /* population std 2, sample sqrt(32/7) */
    tun_mean_std(w, 8, &m, &s);
    near(m, 5, 1e-15, "mean 8");
    near(s, sqrt(32.0 / 7.0), 1e-14, "std 8");
    double one[] = {3.5};
    tun_mean_std(one, 1, &m, &s);
    assert_true(m == 3.5 && isnan(s));
    tun_mean_std(one, 0, &m, &s);
    assert_true(isnan(m) && isnan(s));
    double same[] = {0.1, 0.1, 0.1, 0.1};
    tun_mean_std(same, 4, &m, &s);
    assert_true(s == 0);
}

/* Equal n and std give dof = 2(n - 1) and t = (m1 - m2) / (s sqrt(2/n)). */
static double p_for_t(double t, int n) {
    double s = 1.0, se = s * sqrt(2.0 / n);
    return tun_welch_p(t * se, s, n, 0.0, s, n);
}

static void test_student_t_reference(void **state) {
    (void)state;
    near(p_for_t(2.0, 6), 0.07338803477074045, 1e-9, "t=2 dof=10");
    near(p_for_t(-2.0, 6), 0.07338803477074045, 1e-9, "t=-2 dof=10");
    near(p_for_t(5.0, 16), 2.3296685467006763e-05, 1e-8, "t=5 dof=30");
    near(p_for_t(0.0, 4), 1.0, 1e-12, "t=0");
    /* t=1, dof=2: closed form 1 - 1/sqrt(3) */
    near(p_for_t(1.0, 2), 1 - 1 / sqrt(3.0), 1e-10, "t=1 dof=2");
}

static void test_welch_reference(void **state) {
    (void)state;
    double a[] = {0.91, 0.92, 0.93}, b[] = {0.89, 0.90, 0.88, 0.91};
    double m1, s1, m2, s2;
    tun_mean_std(a, 3, &m1, &s1);
    tun_mean_std(b, 4, &m2, &s2);
    /* t = 2.88675, dof = 4.95918 */
    near(tun_welch_p(m1, s1, 3, m2, s2, 4), 0.03464755328828648, 1e-8, "welch 3 vs 4");
    near(tun_welch_p(m2, s2, 4, m1, s1, 3), 0.03464755328828648, 1e-8, "welch swapped");
    double c[] = {0.8512, 0.8498, 0.8530, 0.8475, 0.8520}, d[] = {0.8401, 0.8460};
    tun_mean_std(c, 5, &m1, &s1);
    tun_mean_std(d, 2, &m2, &s2);
    /* t = 2.46691, dof = 1.21773 (non-integer, small) */
    near(tun_welch_p(m1, s1, 5, m2, s2, 2), 0.20773379393564018, 1e-8, "welch 5 vs 2");
    /* undefined or degenerate cases */
    assert_true(isnan(tun_welch_p(1, 0.1, 1, 2, 0.1, 5)));
    assert_true(isnan(tun_welch_p(1, NAN, 3, 2, 0.1, 5)));
    assert_true(tun_welch_p(1, 0, 3, 1, 0, 3) == 1.0);
    assert_true(tun_welch_p(1, 0, 3, 2, 0, 3) == 0.0);
    /* p falls as the gap grows */
    double prev = 1.1;
    for (int k = 0; k < 20; k++) {
        double p = tun_welch_p(0.1 * k, 1, 10, 0, 1.5, 8);
        assert_true(p < prev && p >= 0 && p <= 1);
        prev = p;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mean_std),
        cmocka_unit_test(test_student_t_reference),
        cmocka_unit_test(test_welch_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
