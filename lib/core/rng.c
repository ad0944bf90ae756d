/* xoshiro256** (Blackman & Vigna, 2018) seeded with splitmix64. */
#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rlpi_rng_seed(rlpi_rng *rng, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * UINT64_C(0xd1342543de82ef95));
    /* mix the stream in twice so that nearby (seed, stream) pairs diverge */
    x = splitmix64(&x) ^ stream;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

uint64_t rlpi_rng_u64(rlpi_rng *rng)
{
    uint64_t *s = rng->s;
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

float rlpi_rng_f32(rlpi_rng *rng)
{
    return (float)(rlpi_rng_u64(rng) >> 40) * 0x1.0p-24f;
}

double rlpi_rng_f64(rlpi_rng *rng)
{
    return (double)(rlpi_rng_u64(rng) >> 11) * 0x1.0p-53;
}

uint64_t rlpi_rng_below(rlpi_rng *rng, uint64_t n)
{
    /* Lemire, "Fast Random Integer Generation in an Interval" (2019) */
    __extension__ typedef unsigned __int128 u128;
    u128 m = (u128)rlpi_rng_u64(rng) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n;
        while (low < threshold) {
            m = (u128)rlpi_rng_u64(rng) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double rlpi_rng_normal(rlpi_rng *rng)
{
    double u1 = rlpi_rng_f64(rng);
    double u2 = rlpi_rng_f64(rng);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
