/* Confidence intervals for `rlpost train` / `rlpost eval` evaluations:
 * Wilson score intervals for proportions (greedy accuracy, format and
 * parse rates) and percentile bootstrap intervals over prompts for means
 * of per-prompt values (sampled accuracy: k samples per prompt are not
 * independent, so prompts are resampled, not samples) and for paired
 * differences between two evaluations of the same prompts. Pure
 * functions; the bootstrap is seeded, so a run's intervals are
 * reproducible. */
#ifndef RLPOST_EVAL_STATS_H
#define RLPOST_EVAL_STATS_H

#include <stddef.h>
#include <stdint.h>

/* 95 % two-sided normal quantile. */
#define EVAL_Z95 1.959963984540054

/* Bootstrap resamples (percentile method). */
#define EVAL_BOOTSTRAP 2000

/* Wilson score interval (Wilson 1927) of `hits` successes in n trials at
 * z: [*lo, *hi]; both NaN when n = 0. */
void eval_wilson(size_t hits, size_t n, double z, double *lo, double *hi);

/* Percentile bootstrap 95 % interval of the mean of x (n values), with B
 * resamples drawn from a splitmix64 stream started at seed. NaN for n = 0;
 * [x0, x0] for n = 1. Allocates B doubles (returns -1 when it cannot). */
int eval_bootstrap_mean(const double *x, size_t n, int B, uint64_t seed, double *lo, double *hi);

/* The same for the mean of the paired differences b[i] − a[i]. */
int eval_bootstrap_paired(const double *a, const double *b, size_t n, int B, uint64_t seed, double *lo,
                          double *hi);

#endif
