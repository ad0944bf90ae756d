/* Confidence intervals of evaluations (eval_stats.h). */
#include "eval_stats.h"

#include <math.h>
#include <stdlib.h>

void eval_wilson(size_t hits, size_t n, double z, double *lo, double *hi)
{
    if (n == 0) {
        *lo = *hi = NAN;
        return;
    }
    double p = (double)hits / (double)n, nn = (double)n, z2 = z * z;
    double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
    double half = z / (1 + z2 / nn) * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
    *lo = fmax(0.0, centre - half);
    *hi = fmin(1.0, centre + half);
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
static int bootstrap(const double *d, size_t n, int B, uint64_t seed, double *lo, double *hi)
{
    *lo = *hi = NAN;
    if (n == 0)
        return 0;
    if (n == 1 || B < 2) {
        *lo = *hi = d[0];
        return 0;
    }
    double *m = malloc((size_t)B * sizeof *m);
    if (!m)
        return -1;
    uint64_t s = seed;
    for (int b = 0; b < B; b++) {
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
    return 0;
}

int eval_bootstrap_mean(const double *x, size_t n, int B, uint64_t seed, double *lo, double *hi)
{
    return bootstrap(x, n, B, seed, lo, hi);
}

int eval_bootstrap_paired(const double *a, const double *b, size_t n, int B, uint64_t seed, double *lo,
                          double *hi)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (!d)
        return -1;
    for (size_t i = 0; i < n; i++)
        d[i] = b[i] - a[i];
    int rc = bootstrap(d, n, B, seed, lo, hi);
    free(d);
    return rc;
}
