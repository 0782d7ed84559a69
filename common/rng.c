/* rng.c - xoshiro256** with splitmix64 seeding (see rng.h). */
#include "rng.h"

#include <math.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void hpo_rng_seed(hpo_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

void hpo_rng_derive(hpo_rng *r, uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed;
    uint64_t h = splitmix64(&x);
    x = h ^ (a * 0xd1b54a32d192ed03ULL);
    h = splitmix64(&x);
    x = h ^ (b * 0x8cb92ba72f3d8dd7ULL);
    hpo_rng_seed(r, splitmix64(&x));
}

uint64_t hpo_rng_u64(hpo_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double hpo_rng_uniform(hpo_rng *r) { return (double)(hpo_rng_u64(r) >> 11) * 0x1.0p-53; }

float hpo_rng_uniform_f(hpo_rng *r) { return (float)(hpo_rng_u64(r) >> 40) * 0x1.0p-24f; }

double hpo_rng_normal(hpo_rng *r) {
    double u1 = hpo_rng_uniform(r), u2 = hpo_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t hpo_rng_below(hpo_rng *r, uint64_t n) {
    /* Lemire's rejection: unbiased */
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = hpo_rng_u64(r);
        if (x >= threshold) return x % n;
    }
}

void hpo_rng_shuffle_u32(hpo_rng *r, uint32_t *idx, uint32_t n) {
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)hpo_rng_below(r, i);
        uint32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

uint64_t hpo_rng_entropy_seed(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
        x ^= (uint64_t)getpid() << 32;
        v = splitmix64(&x);
    }
    return v & 0x7fffffffULL;
}
