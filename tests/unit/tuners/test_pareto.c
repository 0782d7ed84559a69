/* tuners: Pareto geometry (pareto.c) - the non-dominated sort (ENS-BS)
 * against naive peeling and, on 3,000 points, against its definition, the exact hypervolume (2-D, 3-D, WFG for 4 and 5
 * objectives) against counting grid cells, on random inputs with ties; the
 * Monte Carlo estimates (hypervolume, contributions, greedy selection)
 * against the exact figures (4 to 8 objectives);
 * crowding distance and constrained domination on hand-made cases. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rng.h"
#include "tuners.h"

/* Random points; a coarse grid of values makes ties and duplicates common. */
static void random_points(hpo_rng *rng, double *F, size_t n, int m, int coarse) {
    for (size_t i = 0; i < n * (size_t)m; i++)
        F[i] = coarse ? (double)hpo_rng_below(rng, 5) / 4 : hpo_rng_uniform(rng);
}

static void test_sort_matches_naive(void **state) {
    (void)state;
    hpo_rng rng;
    hpo_rng_seed(&rng, 7);
    double F[60 * 5], viol[60];
    int r1[60], r2[60], mismatches = 0;
    for (int round = 0; round < 400; round++) {
        size_t n = 1 + hpo_rng_below(&rng, 60);
        int m = 1 + (int)hpo_rng_below(&rng, 5), constrained = round % 3 == 0;
        random_points(&rng, F, n, m, round % 2);
        for (size_t i = 0; i < n; i++) {
            uint64_t c = hpo_rng_below(&rng, 4);
            viol[i] = c == 0 ? 0.0 : c == 1 ? NAN : (double)hpo_rng_below(&rng, 3);
        }
        int f1 = tun_nondominated_sort(F, constrained ? viol : NULL, n, m, r1);
        int f2 = tun_nondominated_sort_ref(F, constrained ? viol : NULL, n, m, r2);
        assert_int_equal(f1, f2);
        for (size_t i = 0; i < n; i++) mismatches += r1[i] != r2[i];
    }
    printf("non-dominated sort vs naive peeling: %d rank mismatches in 400 random sets\n", mismatches);
    assert_int_equal(mismatches, 0);
}

/* A large set (too large for the naive peeling): the ranks satisfy the
 * definition: nothing dominates a point from its own or a later front, and
 * every point past the first front has a dominator in the front before. */
static void test_sort_large(void **state) {
    (void)state;
    enum { N = 3000 };
    static double F[N * 3], viol[N];
    static int rank[N];
    hpo_rng rng;
    hpo_rng_seed(&rng, 21);
    for (int round = 0; round < 2; round++) {
        int m = 2 + round, bad = 0;
        random_points(&rng, F, N, m, 0);
        for (size_t i = 0; i < N; i++) viol[i] = hpo_rng_below(&rng, 3) ? 0.0 : hpo_rng_uniform(&rng);
        const double *v = round ? viol : NULL;
        int fronts = tun_nondominated_sort(F, v, N, m, rank);
        for (size_t i = 0; i < N; i++) {
            int has_parent = rank[i] == 0;
            for (size_t j = 0; j < N; j++) {
                int d = v ? tun_dominates_constrained(F + j * m, v[j], F + i * m, v[i], m)
                          : tun_dominates(F + j * m, F + i * m, m);
                if (d && rank[j] >= rank[i]) bad++;
                if (d && rank[j] == rank[i] - 1) has_parent = 1;
            }
            bad += !has_parent;
        }
        printf("non-dominated sort of %d points (m = %d%s): %d fronts, %d violations of the definition\n", N, m,
               v ? ", constrained" : "", fronts, bad);
        assert_int_equal(bad, 0);
    }
}

static void test_hypervolume_matches_naive(void **state) {
    (void)state;
    hpo_rng rng;
    hpo_rng_seed(&rng, 11);
    double F[14 * 5], ref[5];
    for (int m = 1; m <= 5; m++) {
        double max_diff = 0;
        int max_n = m <= 3 ? 14 : m == 4 ? 10 : 8;
        for (int round = 0; round < 300; round++) {
            size_t n = 1 + hpo_rng_below(&rng, (uint64_t)max_n);
            random_points(&rng, F, n, m, round % 2);
            for (int k = 0; k < m; k++) ref[k] = round % 5 == 0 ? 0.8 : 1.1; /* some points outside */
            double fast = tun_hypervolume(F, n, m, ref), naive = tun_hypervolume_ref(F, n, m, ref);
            double d = fabs(fast - naive);
            if (d > max_diff) max_diff = d;
        }
        printf("hypervolume m=%d vs grid cells: max |difference| %.3g over 300 random sets\n", m, max_diff);
        assert_true(max_diff < 1e-12);
    }
}

/* The Monte Carlo estimate (for fronts the exact figure cannot afford)
 * against the exact one: within 4 standard errors on random fronts of 4
 * to 8 objectives, the same figure for the same seed, and 0 without a
 * point inside ref. */
static void test_hypervolume_estimate(void **state) {
    (void)state;
    hpo_rng rng;
    hpo_rng_seed(&rng, 5);
    double F[12 * 8], ref[8];
    for (int m = 4; m <= 8; m++) {
        double worst = 0, max_diff = 0;
        for (int round = 0; round < 40; round++) {
            size_t n = 2 + hpo_rng_below(&rng, 10);
            random_points(&rng, F, n, m, 0);
            for (int k = 0; k < m; k++) ref[k] = 1.05;
            double se, se2, exact = tun_hypervolume(F, n, m, ref);
            double est = tun_hypervolume_mc(F, n, m, ref, 65536, 1, &se);
            assert_true(tun_hypervolume_mc(F, n, m, ref, 65536, 1, &se2) == est && se2 == se);
            double z = fabs(est - exact) / (se > 0 ? se : 1e-300);
            if (fabs(est - exact) > max_diff) max_diff = fabs(est - exact);
            if (z > worst) worst = z;
        }
        printf("hypervolume m=%d, Monte Carlo (65,536 samples) vs exact: max |difference| %.3g, worst %.2f "
               "standard errors over 40 random fronts\n", m, max_diff, worst);
        assert_true(worst < 4.5);
    }
    double se, far[2] = {2, 2}, r[2] = {1, 1};
    assert_true(tun_hypervolume_mc(far, 1, 2, r, 1000, 1, &se) == 0 && se == 0);
    /* affordable: every front of up to 3 objectives, small ones above */
    assert_true(tun_hypervolume_affordable(1000000, 3));
    assert_true(tun_hypervolume_affordable(3000, 4) && !tun_hypervolume_affordable(4000, 4));
    assert_true(tun_hypervolume_affordable(14, 8) && !tun_hypervolume_affordable(160, 8));
}

/* The Monte Carlo contributions and greedy selection against the exact
 * ones on random fronts of 4 and 5 objectives: contributions within 3% of
 * the box, and the greedy subset's exact hypervolume within 3% of the
 * exact greedy's. */
static void test_hv_selection_estimate(void **state) {
    (void)state;
    hpo_rng rng;
    hpo_rng_seed(&rng, 9);
    double F[12 * 5], ref[5], c[12], cm[12], S[12 * 5];
    size_t ge[12], gm[12];
    for (int m = 4; m <= 5; m++) {
        double worst_c = 0, worst_g = 0;
        for (int round = 0; round < 30; round++) {
            size_t n = 3 + hpo_rng_below(&rng, 9), k = 1 + hpo_rng_below(&rng, n);
            random_points(&rng, F, n, m, 0);
            double box = 1;
            for (int o = 0; o < m; o++) {
                ref[o] = 1.05;
                double lo = 1;
                for (size_t i = 0; i < n; i++) lo = fmin(lo, F[i * (size_t)m + (size_t)o]);
                box *= ref[o] - lo;
            }
            tun_hv_contributions(F, n, m, ref, c);
            tun_hv_contributions_mc(F, n, m, ref, 65536, 3, cm);
            for (size_t i = 0; i < n; i++) worst_c = fmax(worst_c, fabs(c[i] - cm[i]) / box);
            tun_hv_greedy(F, n, m, ref, k, ge);
            tun_hv_greedy_mc(F, n, m, ref, k, 65536, 3, gm);
            double hv[2];
            for (int w = 0; w < 2; w++) {
                for (size_t j = 0; j < k; j++)
                    memcpy(S + j * (size_t)m, F + (w ? gm : ge)[j] * (size_t)m, (size_t)m * sizeof *S);
                hv[w] = tun_hypervolume(S, k, m, ref);
            }
            worst_g = fmax(worst_g, (hv[0] - hv[1]) / hv[0]);
        }
        printf("m=%d, Monte Carlo vs exact: contributions max |difference| %.4f of the box; greedy subset's "
               "hypervolume at most %.4f below the exact greedy's (30 random fronts)\n", m, worst_c, worst_g);
        assert_true(worst_c < 0.03 && worst_g < 0.03);
    }
}

static void test_hypervolume_known(void **state) {
    (void)state;
    /* two points in 2-D: 2*1 + 1*2 - 1*1 overlap */
    double F2[] = {1, 2, 2, 1}, r2[] = {3, 3};
    assert_float_equal(tun_hypervolume(F2, 2, 2, r2), 3.0, 1e-12);
    /* a point no better than the reference in one objective adds nothing */
    double F3[] = {0, 0, 0, 2, 0, 0}, r3[] = {1, 1, 1};
    assert_float_equal(tun_hypervolume(F3, 2, 3, r3), 1.0, 1e-12);
    /* a larger front: 100 points of the 3-D simplex x+y+z = 1 against 2x the cube */
    double S[300];
    size_t n = 0;
    for (int a = 0; a < 10; a++)
        for (int b = 0; b < 10 - a; b++) {
            S[3 * n] = a / 9.0;
            S[3 * n + 1] = b / 9.0;
            S[3 * n + 2] = 1 - a / 9.0 - b / 9.0;
            n++;
        }
    double r[] = {1.1, 1.1, 1.1};
    double fast = tun_hypervolume(S, n, 3, r), naive = tun_hypervolume_ref(S, n, 3, r);
    printf("simplex front (%zu points): hypervolume %.12f, naive %.12f\n", n, fast, naive);
    assert_float_equal(fast, naive, 1e-12);
    /* WFG on the same points padded to 4-D equals the 3-D volume times the pad */
    double S4[55 * 4], r4[] = {1.1, 1.1, 1.1, 2};
    for (size_t i = 0; i < n; i++) {
        memcpy(S4 + 4 * i, S + 3 * i, 3 * sizeof *S);
        S4[4 * i + 3] = 1;
    }
    assert_float_equal(tun_hypervolume(S4, n, 4, r4), fast * 1.0, 1e-12);
}

static void test_crowding(void **state) {
    (void)state;
    double F[] = {0, 4, 1, 3, 3, 1, 4, 0};
    size_t idx[] = {0, 1, 2, 3};
    double cd[4];
    tun_crowding_distance(F, 2, idx, 4, cd);
    assert_true(isinf(cd[0]) && isinf(cd[3]));
    /* point 1: (3 - 0) / 4 in each objective */
    assert_float_equal(cd[1], 1.5, 1e-12);
    assert_float_equal(cd[2], 1.5, 1e-12);
    tun_crowding_distance(F, 2, idx, 2, cd);
    assert_true(isinf(cd[0]) && isinf(cd[1]));
    /* identical points in an objective give no ends there (Optuna: an
     * objective of zero width is skipped): three equal points all 0 (two
     * of them were +inf, picked by the sort), and in the other objective
     * the ends only */
    double G[] = {1, 0, 1, 5, 1, 10};
    size_t gi[] = {0, 1, 2};
    tun_crowding_distance(G, 2, gi, 3, cd);
    assert_true(isinf(cd[0]) && cd[1] == 1.0 && isinf(cd[2]));
    double H[] = {1, 1, 1, 1, 1, 1};
    tun_crowding_distance(H, 2, gi, 3, cd);
    assert_true(cd[0] == 0 && cd[1] == 0 && cd[2] == 0);
}

static void test_constrained_domination(void **state) {
    (void)state;
    double good[] = {0, 0}, bad[] = {5, 5};
    assert_true(tun_dominates(good, bad, 2));
    assert_false(tun_dominates(good, good, 2));
    /* a feasible point beats an infeasible one, whatever the values */
    assert_true(tun_dominates_constrained(bad, 0, good, 0.1, 2));
    assert_false(tun_dominates_constrained(good, 0.1, bad, 0, 2));
    /* among infeasible ones, the smaller violation */
    assert_true(tun_dominates_constrained(bad, 0.5, good, 1.0, 2));
    assert_false(tun_dominates_constrained(good, 1.0, bad, 0.5, 2));
    /* none told (NaN) is the worst */
    assert_true(tun_dominates_constrained(bad, 100, good, NAN, 2));
    /* both feasible: plain domination */
    assert_true(tun_dominates_constrained(good, 0, bad, 0, 2));
    assert_false(tun_dominates_constrained(bad, 0, good, 0, 2));
    double F[] = {5, 5, 0, 0, 1, 1};
    double v[] = {0, 2, 1};
    int rank[3];
    assert_int_equal(tun_nondominated_sort(F, v, 3, 2, rank), 3);
    assert_int_equal(rank[0], 0);
    assert_int_equal(rank[2], 1);
    assert_int_equal(rank[1], 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort_matches_naive),
        cmocka_unit_test(test_sort_large),
        cmocka_unit_test(test_hypervolume_matches_naive),
        cmocka_unit_test(test_hypervolume_known),
        cmocka_unit_test(test_hypervolume_estimate),
        cmocka_unit_test(test_hv_selection_estimate),
        cmocka_unit_test(test_crowding),
        cmocka_unit_test(test_constrained_domination),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
