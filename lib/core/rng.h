/* Counter-friendly pseudo-random streams (xoshiro256**, seeded through
 * splitmix64). A stream is a plain value: reproducible results across
 * thread counts come from giving each logical item (a sample, a sequence)
 * its own stream derived from (seed, item id), never from sharing one. */
#ifndef RLPI_CORE_RNG_H
#define RLPI_CORE_RNG_H

#include <stdint.h>

typedef struct rlpi_rng {
    uint64_t s[4];
} rlpi_rng;

/* Seeds a stream from a seed and a stream id (e.g. sample index). */
void rlpi_rng_seed(rlpi_rng *rng, uint64_t seed, uint64_t stream);
uint64_t rlpi_rng_u64(rlpi_rng *rng);
/* Uniform in [0, 1) with 24 bits of precision (exactly representable). */
float rlpi_rng_f32(rlpi_rng *rng);
/* Uniform in [0, 1) with 53 bits of precision. */
double rlpi_rng_f64(rlpi_rng *rng);
/* Uniform integer in [0, n), unbiased (Lemire's method); n > 0. */
uint64_t rlpi_rng_below(rlpi_rng *rng, uint64_t n);
/* Standard normal (Box–Muller). */
double rlpi_rng_normal(rlpi_rng *rng);

#endif
