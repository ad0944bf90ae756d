/* Confidence intervals of evaluations (trainer.h): Wilson score intervals
 * for proportions and percentile bootstrap intervals over prompts, seeded
 * so that a run's intervals are reproducible. */
#include "rlpost.h"

#include "core/error.h"

#include <math.h>
#include <stdlib.h>

int rlp_stats_wilson(double *lo, double *hi, uint64_t hits, uint64_t n, double z)
{
    RLPI_CHECK_ARG(lo && hi, "lo and hi are required");
    RLPI_CHECK_ARG(hits <= n, "hits > n");
    RLPI_CHECK_ARG(z > 0 && isfinite(z), "z must be a positive quantile");
    if (n == 0) {
        *lo = *hi = NAN;
        return RLP_OK;
    }
    double p = (double)hits / (double)n, nn = (double)n, z2 = z * z;
    double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
    double half = z / (1 + z2 / nn) * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
    *lo = fmax(0.0, centre - half);
    *hi = fmin(1.0, centre + half);
    return RLP_OK;
}

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The bootstrap of the mean of d (n values). */
static int bootstrap(const double *d, size_t n, uint32_t B, uint64_t seed, double *lo, double *hi)
{
    *lo = *hi = NAN;
    if (n == 0)
        return RLP_OK;
    if (n == 1 || B < 2) {
        *lo = *hi = d[0];
        return RLP_OK;
    }
    double *m = malloc((size_t)B * sizeof *m);
    if (!m)
        return rlpi_error_set(RLP_E_NOMEM, "bootstrap: out of memory");
    uint64_t s = seed;
    for (uint32_t b = 0; b < B; b++) {
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += d[next(&s) % n]; /* modulo bias < n / 2^64: negligible */
        m[b] = sum / (double)n;
    }
    qsort(m, (size_t)B, sizeof *m, cmp_double);
    /* percentiles 2.5 and 97.5 by linear interpolation between order statistics */
    double qa = 0.025 * (B - 1), qb = 0.975 * (B - 1);
    size_t ia = (size_t)qa, ib = (size_t)qb;
    *lo = m[ia] + (qa - (double)ia) * (m[ia + 1 < (size_t)B ? ia + 1 : ia] - m[ia]);
    *hi = m[ib] + (qb - (double)ib) * (m[ib + 1 < (size_t)B ? ib + 1 : ib] - m[ib]);
    free(m);
    return RLP_OK;
}

int rlp_stats_bootstrap_mean(double *lo, double *hi, const double *x, size_t n, uint32_t resamples, uint64_t seed)
{
    RLPI_CHECK_ARG(lo && hi, "lo and hi are required");
    RLPI_CHECK_ARG(x || n == 0, "x is NULL");
    return bootstrap(x, n, resamples, seed, lo, hi);
}

int rlp_stats_bootstrap_paired(double *lo, double *hi, const double *a, const double *b, size_t n,
                               uint32_t resamples, uint64_t seed)
{
    RLPI_CHECK_ARG(lo && hi, "lo and hi are required");
    RLPI_CHECK_ARG((a && b) || n == 0, "a and b are required");
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (!d)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    for (size_t i = 0; i < n; i++)
        d[i] = b[i] - a[i];
    int rc = bootstrap(d, n, resamples, seed, lo, hi);
    free(d);
    return rc;
}
