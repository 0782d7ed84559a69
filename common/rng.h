/*
 * rng.h - the one pseudo-random generator of hpo (xoshiro256**, seeded by
 * splitmix64), shared by tuners (suggestions) and the engine (init, shuffle,
 * dropout, augmentation).
 *
 * Design notes
 * - Deterministic and portable: the same seed gives the same stream on every
 *   machine, which is what makes "same seed and history, same suggestions"
 *   and exact checkpoint resume possible. The state is four uint64 words, so
 *   it is saved and restored by copying the struct.
 * - hpo_rng_derive(seed, a, b) mixes a seed with stream ids (a trial number,
 *   an execution index, a worker) into an independent generator, so the
 *   n-th trial's randomness does not depend on how many draws came before.
 * - Not thread-safe: one generator per thread or per purpose.
 * - The one call that is not deterministic is hpo_rng_entropy_seed: the
 *   seed of a study created without one, drawn once and then stored, so
 *   the study is reproducible from it like any other.
 */
#ifndef HPO_RNG_H
#define HPO_RNG_H

#include <stdint.h>

typedef struct hpo_rng {
    uint64_t s[4];
} hpo_rng;

void hpo_rng_seed(hpo_rng *r, uint64_t seed);
/* A generator for (seed, a, b), independent of other (a, b) pairs. */
void hpo_rng_derive(hpo_rng *r, uint64_t seed, uint64_t a, uint64_t b);
uint64_t hpo_rng_u64(hpo_rng *r);
double hpo_rng_uniform(hpo_rng *r);             /* [0, 1) with 53 bits */
float hpo_rng_uniform_f(hpo_rng *r);            /* [0, 1) with 24 bits */
double hpo_rng_normal(hpo_rng *r);              /* standard normal (Box-Muller) */
uint64_t hpo_rng_below(hpo_rng *r, uint64_t n); /* uniform in [0, n), unbiased; n > 0 */
/* Fisher-Yates shuffle of idx[0..n). */
void hpo_rng_shuffle_u32(hpo_rng *r, uint32_t *idx, uint32_t n);
/* A fresh seed from the kernel (getrandom; the clock and pid mixed if it
 * fails) in [0, 2^31): small enough that every client reads it back exactly
 * (a JavaScript number, numpy's 32-bit seeds). Thread-safe; not for
 * cryptography. */
uint64_t hpo_rng_entropy_seed(void);

#endif
