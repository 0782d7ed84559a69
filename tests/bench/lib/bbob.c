/*
 * bbob.c - the 24 noiseless BBOB functions (bbob.h has the design notes).
 *
 * Notation as in the definitions document: z is the transformed variable,
 * Lambda^a = diag(a^(0.5 i/(D-1))), i = 0..D-1 here (1..D there), 1± a
 * vector of random signs, f_pen(x) = sum max(0, |x_i| - 5)^2.
 */
#include "bbob.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXD BENCH_BBOB_MAX_DIM
#define MAX_PEAKS 101

struct bench_bbob {
    int fid, dim;
    double fopt;
    double xopt[MAXD];
    double sign[MAXD];         /* 1± (f20, f24: the signs of x_opt) */
    double R[MAXD * MAXD], Q[MAXD * MAXD];
    int n_peaks;               /* f21: 101, f22: 21 */
    double w[MAX_PEAKS];       /* peak heights */
    double ry[MAX_PEAKS][MAXD];    /* R y_k: the peaks in rotated coordinates */
    double scale[MAX_PEAKS][MAXD]; /* the diagonal of C_k */
};

static const char *names[BENCH_BBOB_N_FUNCTIONS] = {
    "sphere",        "ellipsoid",      "rastrigin",     "bueche-rastrigin", "linear-slope",
    "attract-sector", "step-ellipsoid", "rosenbrock",   "rosenbrock-rot",   "ellipsoid-rot",
    "discus",        "bent-cigar",     "sharp-ridge",   "diff-powers",      "rastrigin-rot",
    "weierstrass",   "schaffers-f7",   "schaffers-ill", "griewank-rosen",   "schwefel",
    "gallagher-101", "gallagher-21",   "katsuura",      "lunacek"};

const char *bench_bbob_name(int fid) {
    return fid >= 1 && fid <= BENCH_BBOB_N_FUNCTIONS ? names[fid - 1] : "?";
}

/* ---- the instance generator: splitmix64, uniform, Box-Muller ------------- */

static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

static double gauss(uint64_t *s) {
    double u = 1.0 - unif(s), v = unif(s); /* u in (0, 1] */
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* a Gaussian D x D matrix, rows orthonormalised by Gram-Schmidt */
static void rotation(double *M, int D, uint64_t *s) {
    for (int i = 0; i < D * D; i++) M[i] = gauss(s);
    for (int i = 0; i < D; i++) {
        double *r = M + i * D;
        for (int k = 0; k < i; k++) {
            const double *q = M + k * D;
            double dot = 0.0;
            for (int j = 0; j < D; j++) dot += r[j] * q[j];
            for (int j = 0; j < D; j++) r[j] -= dot * q[j];
        }
        double n = 0.0;
        for (int j = 0; j < D; j++) n += r[j] * r[j];
        n = sqrt(n);
        for (int j = 0; j < D; j++) r[j] /= n;
    }
}

/* ---- the documented transformations -------------------------------------- */

static double tosz(double x) {
    if (x == 0.0) return 0.0;
    double h = log(fabs(x)), c1 = x > 0 ? 10.0 : 5.5, c2 = x > 0 ? 7.9 : 3.1;
    return copysign(exp(h + 0.049 * (sin(c1 * h) + sin(c2 * h))), x);
}

static void tasy(double *v, int D, double beta) {
    for (int i = 0; i < D; i++)
        if (v[i] > 0) v[i] = pow(v[i], 1.0 + beta * i / (D - 1) * sqrt(v[i]));
}

static double lam(double alpha, int i, int D) { return pow(alpha, 0.5 * i / (D - 1)); }

static void matvec(const double *M, const double *in, double *out, int D) {
    for (int i = 0; i < D; i++) {
        double s = 0.0;
        for (int j = 0; j < D; j++) s += M[i * D + j] * in[j];
        out[i] = s;
    }
}

static double fpen(const double *x, int D) {
    double s = 0.0;
    for (int i = 0; i < D; i++) {
        double t = fabs(x[i]) - 5.0;
        if (t > 0) s += t * t;
    }
    return s;
}

/* ---- the raw functions of z ---------------------------------------------- */

static double rastrigin(const double *z, int D) {
    double c = 0.0, q = 0.0;
    for (int i = 0; i < D; i++) {
        c += cos(2 * M_PI * z[i]);
        q += z[i] * z[i];
    }
    return 10.0 * (D - c) + q;
}

static double ellipsoid(const double *z, int D) {
    double s = 0.0;
    for (int i = 0; i < D; i++) s += pow(1e6, (double)i / (D - 1)) * z[i] * z[i];
    return s;
}

static double rosenbrock(const double *z, int D) {
    double s = 0.0;
    for (int i = 0; i < D - 1; i++) {
        double a = z[i] * z[i] - z[i + 1], b = z[i] - 1.0;
        s += 100.0 * a * a + b * b;
    }
    return s;
}

static double tail_sq(const double *z, int D) { /* sum_{i >= 2} z_i^2 */
    double s = 0.0;
    for (int i = 1; i < D; i++) s += z[i] * z[i];
    return s;
}

static double weierstrass(const double *z, int D) {
    double f0 = 0.0, s = 0.0;
    for (int k = 0; k < 12; k++) f0 += pow(0.5, k) * cos(M_PI * pow(3.0, k));
    for (int i = 0; i < D; i++)
        for (int k = 0; k < 12; k++) s += pow(0.5, k) * cos(2 * M_PI * pow(3.0, k) * (z[i] + 0.5));
    double t = s / D - f0;
    return 10.0 * t * t * t;
}

static double schaffers(const double *z, int D) {
    double s = 0.0;
    for (int i = 0; i < D - 1; i++) {
        double si = sqrt(z[i] * z[i] + z[i + 1] * z[i + 1]), r = sqrt(si), sn = sin(50.0 * pow(si, 0.2));
        s += r + r * sn * sn;
    }
    s /= D - 1;
    return s * s;
}

static double griewank_rosenbrock(const double *z, int D) {
    double s = 0.0;
    for (int i = 0; i < D - 1; i++) {
        double a = z[i] * z[i] - z[i + 1], b = z[i] - 1.0, si = 100.0 * a * a + b * b;
        s += si / 4000.0 - cos(si);
    }
    return 10.0 * s / (D - 1) + 10.0;
}

static double katsuura(const double *z, int D) {
    double p = 1.0, e = 10.0 / pow(D, 1.2);
    for (int i = 0; i < D; i++) {
        double s = 0.0;
        for (int j = 1; j <= 32; j++) {
            double t = ldexp(z[i], j);
            s += fabs(t - nearbyint(t)) / ldexp(1.0, j);
        }
        p *= pow(1.0 + (i + 1) * s, e);
    }
    return 10.0 / (D * D) * (p - 1.0);
}

/* ---- the 24 functions -------------------------------------------------- */

static double schwefel(const bench_bbob *p, const double *x) {
    int D = p->dim;
    double xh[MAXD] = {0}, z[MAXD] = {0}, s = 0.0;
    for (int i = 0; i < D; i++) xh[i] = 2.0 * p->sign[i] * x[i];
    for (int i = 0; i < D; i++) {
        double zh = i == 0 ? xh[0] : xh[i] + 0.25 * (xh[i - 1] - 2.0 * fabs(p->xopt[i - 1]));
        double c = 2.0 * fabs(p->xopt[i]);
        z[i] = 100.0 * (lam(10, i, D) * (zh - c) + c);
    }
    for (int i = 0; i < D; i++) s += z[i] * sin(sqrt(fabs(z[i])));
    double zs[MAXD] = {0};
    for (int i = 0; i < D; i++) zs[i] = z[i] / 100.0;
    return -s / (100.0 * D) + 4.189828872724339 + 100.0 * fpen(zs, D);
}

static double gallagher(const bench_bbob *p, const double *x) {
    int D = p->dim;
    double rx[MAXD] = {0}, best = 0.0;
    matvec(p->R, x, rx, D);
    for (int k = 0; k < p->n_peaks; k++) {
        double q = 0.0;
        for (int j = 0; j < D; j++) {
            double t = rx[j] - p->ry[k][j];
            q += p->scale[k][j] * t * t;
        }
        double v = p->w[k] * exp(-q / (2.0 * D));
        if (v > best) best = v;
    }
    double t = tosz(10.0 - best);
    return t * t + fpen(x, D);
}

static double lunacek(const bench_bbob *p, const double *x) {
    int D = p->dim;
    const double mu0 = 2.5, d = 1.0, s = 1.0 - 1.0 / (2.0 * sqrt(D + 20.0) - 8.2),
                 mu1 = -sqrt((mu0 * mu0 - d) / s);
    double xh[MAXD] = {0}, a[MAXD] = {0}, b[MAXD] = {0}, z[MAXD] = {0}, s0 = 0.0, s1 = 0.0, c = 0.0;
    for (int i = 0; i < D; i++) {
        xh[i] = 2.0 * p->sign[i] * x[i];
        a[i] = xh[i] - mu0;
        s0 += a[i] * a[i];
        s1 += (xh[i] - mu1) * (xh[i] - mu1);
    }
    matvec(p->R, a, b, D);
    for (int i = 0; i < D; i++) b[i] *= lam(100, i, D);
    matvec(p->Q, b, z, D);
    for (int i = 0; i < D; i++) c += cos(2 * M_PI * z[i]);
    return fmin(s0, d * D + s * s1) + 10.0 * (D - c) + 1e4 * fpen(x, D);
}

double bench_bbob_eval(const bench_bbob *p, const double *x) {
    int D = p->dim;
    double a[MAXD] = {0}, b[MAXD] = {0}, z[MAXD] = {0}, w[MAXD] = {0}, f = 0.0;
    const double c = fmax(1.0, sqrt((double)D) / 8.0); /* Rosenbrock's scaling */
    for (int i = 0; i < D; i++) a[i] = x[i] - p->xopt[i];
    switch (p->fid) {
    case 1:
        for (int i = 0; i < D; i++) f += a[i] * a[i];
        break;
    case 2:
        for (int i = 0; i < D; i++) z[i] = tosz(a[i]);
        f = ellipsoid(z, D);
        break;
    case 3:
        for (int i = 0; i < D; i++) b[i] = tosz(a[i]);
        tasy(b, D, 0.2);
        for (int i = 0; i < D; i++) z[i] = lam(10, i, D) * b[i];
        f = rastrigin(z, D);
        break;
    case 4:
        for (int i = 0; i < D; i++) {
            z[i] = tosz(a[i]);
            double s = pow(10.0, 0.5 * i / (D - 1));
            if (z[i] > 0 && i % 2 == 0) s *= 10.0; /* odd i of the document (1-based) */
            z[i] *= s;
        }
        f = rastrigin(z, D) + 100.0 * fpen(x, D);
        break;
    case 5:
        for (int i = 0; i < D; i++) {
            double s = copysign(pow(10.0, (double)i / (D - 1)), p->xopt[i]);
            double zi = p->xopt[i] * x[i] < 25.0 ? x[i] : p->xopt[i];
            f += 5.0 * fabs(s) - s * zi;
        }
        break;
    case 6:
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) b[i] *= lam(10, i, D);
        matvec(p->Q, b, z, D);
        for (int i = 0; i < D; i++) {
            double s = z[i] * p->xopt[i] > 0 ? 100.0 : 1.0;
            f += s * z[i] * s * z[i];
        }
        f = pow(tosz(f), 0.9);
        break;
    case 7: {
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) {
            b[i] *= lam(10, i, D);
            w[i] = fabs(b[i]) > 0.5 ? floor(0.5 + b[i]) : floor(0.5 + 10.0 * b[i]) / 10.0;
        }
        matvec(p->Q, w, z, D);
        double e = 0.0;
        for (int i = 0; i < D; i++) e += pow(10.0, 2.0 * i / (D - 1)) * z[i] * z[i];
        f = 0.1 * fmax(fabs(b[0]) / 1e4, e) + fpen(x, D);
        break;
    }
    case 8:
        for (int i = 0; i < D; i++) z[i] = c * a[i] + 1.0;
        f = rosenbrock(z, D);
        break;
    case 9:
        matvec(p->R, x, b, D);
        for (int i = 0; i < D; i++) z[i] = c * b[i] + 0.5;
        f = rosenbrock(z, D);
        break;
    case 10:
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) z[i] = tosz(b[i]);
        f = ellipsoid(z, D);
        break;
    case 11:
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) z[i] = tosz(b[i]);
        f = 1e6 * z[0] * z[0] + tail_sq(z, D);
        break;
    case 12:
        matvec(p->R, a, b, D);
        tasy(b, D, 0.5);
        matvec(p->R, b, z, D);
        f = z[0] * z[0] + 1e6 * tail_sq(z, D);
        break;
    case 13:
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) b[i] *= lam(10, i, D);
        matvec(p->Q, b, z, D);
        f = z[0] * z[0] + 100.0 * sqrt(tail_sq(z, D));
        break;
    case 14:
        matvec(p->R, a, z, D);
        for (int i = 0; i < D; i++) f += pow(fabs(z[i]), 2.0 + 4.0 * i / (D - 1));
        f = sqrt(f);
        break;
    case 15:
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) b[i] = tosz(b[i]);
        tasy(b, D, 0.2);
        matvec(p->Q, b, w, D);
        for (int i = 0; i < D; i++) w[i] *= lam(10, i, D);
        matvec(p->R, w, z, D);
        f = rastrigin(z, D);
        break;
    case 16:
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) b[i] = tosz(b[i]);
        matvec(p->Q, b, w, D);
        for (int i = 0; i < D; i++) w[i] *= lam(0.01, i, D);
        matvec(p->R, w, z, D);
        f = weierstrass(z, D) + 10.0 / D * fpen(x, D);
        break;
    case 17:
    case 18:
        matvec(p->R, a, b, D);
        tasy(b, D, 0.5);
        matvec(p->Q, b, z, D);
        for (int i = 0; i < D; i++) z[i] *= lam(p->fid == 17 ? 10 : 1000, i, D);
        f = schaffers(z, D) + 10.0 * fpen(x, D);
        break;
    case 19:
        matvec(p->R, x, b, D);
        for (int i = 0; i < D; i++) z[i] = c * b[i] + 0.5;
        f = griewank_rosenbrock(z, D);
        break;
    case 20:
        f = schwefel(p, x);
        break;
    case 21:
    case 22:
        f = gallagher(p, x);
        break;
    case 23:
        matvec(p->R, a, b, D);
        for (int i = 0; i < D; i++) b[i] *= lam(100, i, D);
        matvec(p->Q, b, z, D);
        f = katsuura(z, D) + fpen(x, D);
        break;
    case 24:
        f = lunacek(p, x);
        break;
    default:
        return NAN;
    }
    return f + p->fopt;
}

/* ---- instances ------------------------------------------------------------ */

/* Gallagher's peaks: heights w, locations y (y_1 = x_opt), C_k = Lambda^a_k /
 * a_k^(1/4) with its diagonal permuted at random per peak */
static void gallagher_init(bench_bbob *p, uint64_t *s) {
    int D = p->dim, n = p->fid == 21 ? 101 : 21;
    double half = p->fid == 21 ? 5.0 : 4.9, a1 = p->fid == 21 ? 1000.0 : 1e6;
    int perm[MAX_PEAKS], dperm[MAXD];
    p->n_peaks = n;
    for (int k = 0; k < n - 1; k++) perm[k] = k;
    for (int k = n - 2; k > 0; k--) { /* Fisher-Yates */
        int j = (int)(unif(s) * (k + 1)), t = perm[k];
        perm[k] = perm[j];
        perm[j] = t;
    }
    for (int k = 0; k < n; k++) {
        double alpha = k == 0 ? a1 : pow(1000.0, 2.0 * perm[k - 1] / (n - 2));
        p->w[k] = k == 0 ? 10.0 : 1.1 + 8.0 * (k - 1) / (n - 2);
        for (int j = 0; j < D; j++) dperm[j] = j;
        for (int j = D - 1; j > 0; j--) {
            int r = (int)(unif(s) * (j + 1)), t = dperm[j];
            dperm[j] = dperm[r];
            dperm[r] = t;
        }
        for (int j = 0; j < D; j++)
            p->scale[k][j] = pow(alpha, 0.5 * dperm[j] / (D - 1) - 0.25);
        double y[MAXD] = {0};
        for (int j = 0; j < D; j++) {
            y[j] = (2.0 * unif(s) - 1.0) * half * (k == 0 ? 0.8 : 1.0);
            if (k == 0) p->xopt[j] = y[j];
        }
        matvec(p->R, y, p->ry[k], D);
    }
}

bench_bbob *bench_bbob_new(int fid, int dim, unsigned long long instance) {
    if (fid < 1 || fid > BENCH_BBOB_N_FUNCTIONS || dim < 2 || dim > MAXD) return NULL;
    bench_bbob *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fid = fid;
    p->dim = dim;
    uint64_t s = 0x243F6A8885A308D3ull ^ ((uint64_t)fid << 56) ^ ((uint64_t)dim << 48) ^
                 (instance * 0x9E3779B97F4A7C15ull);
    next_u64(&s);
    /* f_opt: a Cauchy draw, 2 decimals, in [-1000, 1000] */
    double g1 = gauss(&s), g2 = gauss(&s);
    p->fopt = fmin(1000.0, fmax(-1000.0, round(100.0 * 100.0 * g1 / g2) / 100.0));
    for (int i = 0; i < dim; i++) {
        p->xopt[i] = 8.0 * unif(&s) - 4.0;
        p->sign[i] = unif(&s) < 0.5 ? -1.0 : 1.0;
    }
    rotation(p->R, dim, &s);
    rotation(p->Q, dim, &s);
    switch (fid) {
    case 4: /* the odd coordinates (1-based) of x_opt are positive */
        for (int i = 0; i < dim; i += 2) p->xopt[i] = fabs(p->xopt[i]);
        break;
    case 5:
        for (int i = 0; i < dim; i++) p->xopt[i] = 5.0 * p->sign[i];
        break;
    case 8:
        for (int i = 0; i < dim; i++) p->xopt[i] *= 0.75; /* in [-3, 3] */
        break;
    case 9:
    case 19: { /* z = c R x + 1/2 = 1 at x_opt = R^T (1 / (2c)) */
        double c = fmax(1.0, sqrt((double)dim) / 8.0);
        for (int i = 0; i < dim; i++) {
            p->xopt[i] = 0.0;
            for (int k = 0; k < dim; k++) p->xopt[i] += p->R[k * dim + i] * 0.5 / c;
        }
        break;
    }
    case 20:
        for (int i = 0; i < dim; i++) p->xopt[i] = 0.5 * 4.2096874637 * p->sign[i];
        break;
    case 21:
    case 22:
        gallagher_init(p, &s);
        break;
    case 24:
        for (int i = 0; i < dim; i++) p->xopt[i] = 0.5 * 2.5 * p->sign[i];
        break;
    default:
        break;
    }
    return p;
}

void bench_bbob_free(bench_bbob *f) { free(f); }
double bench_bbob_fopt(const bench_bbob *f) { return f->fopt; }
int bench_bbob_dim(const bench_bbob *f) { return f->dim; }
void bench_bbob_xopt(const bench_bbob *f, double *x) {
    memcpy(x, f->xopt, (size_t)f->dim * sizeof(double));
}

/* ---- the variants (bbob.h) ---------------------------------------------- */

double bench_bbob_eval_noisy(const bench_bbob *p, const double *x, int model,
                             unsigned long long instance, unsigned long long k, double *truth) {
    double f = bench_bbob_eval(p, x), d = f - p->fopt;
    if (truth) *truth = f;
    if (model == BENCH_NOISE_NONE || !(d >= 1e-8)) return f;
    uint64_t s = 0x452821E638D01377ull ^ ((uint64_t)p->fid << 56) ^ ((uint64_t)p->dim << 48) ^
                 ((uint64_t)model << 40) ^ (instance * 0x9E3779B97F4A7C15ull) ^
                 (k * 0xD1B54A32D192ED03ull);
    next_u64(&s);
    switch (model) {
    case BENCH_NOISE_GAUSS:
        d *= exp(gauss(&s));
        break;
    case BENCH_NOISE_UNIFORM: {
        double alpha = 0.49 + 1.0 / p->dim, u1 = unif(&s), u2 = unif(&s);
        d = d * u1 * fmax(1.0, pow(1e9 / (d + 1e-199), alpha * u2));
        break;
    }
    case BENCH_NOISE_CAUCHY: {
        double u = unif(&s), n1 = gauss(&s), n2 = gauss(&s);
        d += fmax(0.0, 1000.0 + (u < 0.2 ? n1 / (fabs(n2) + 1e-199) : 0.0));
        break;
    }
    default:
        return f;
    }
    return d + 1.01e-8 + p->fopt;
}

double bench_mixed_coord(int i, double v) { return i % 4 == 1 ? 2.0 * log10(v) + 1.0 : v; }
