/* Cost of the thread pool's hand-off: back-to-back parallel loops of a
 * given amount of work per range (a decode step is hundreds of such loops),
 * on a pool with the default spinning hand-off against one that sleeps at
 * once (spin budget 0: the sleep/wake pool it was before), alternating in
 * the same run. Prints µs per loop (median of the rounds) and the ratio
 * sleeping / spinning (min / median / max over the rounds), with the load
 * average: on a machine with more runnable threads than cores the two
 * should be about equal, with a core per thread the spinning pool wins.
 * Usage: bench_threadpool [threads] [loops per round] [rounds] */
#include "core/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile float sink;

/* `*(long *)p` dependent float adds per item (4 cycles each) */
static void work(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    long n = *(const long *)p * (long)(e - b);
    float x = 0;
    for (long i = 0; i < n; i++)
        x += (float)i * 1e-9f;
    sink = x;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int loops = argc > 2 ? atoi(argv[2]) : 300;
    int rounds = argc > 3 ? atoi(argv[3]) : 21;
    if (threads < 2 || loops < 1 || rounds < 1 || rounds > 101) {
        fprintf(stderr, "usage: bench_threadpool [threads >= 2] [loops] [rounds <= 101]\n");
        return 2;
    }
    rlpi_threadpool *spin, *sleep;
    if (rlpi_threadpool_create(&spin, threads) != 0 || rlpi_threadpool_create(&sleep, threads) != 0)
        return 1;
    rlpi_threadpool_set_spin_us(sleep, 0);
    double la = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &la) != 1)
            la = 0;
        fclose(f);
    }
    printf("%d threads, %d loops per round, %d rounds, load average %.2f\n", threads, loops, rounds, la);
    printf("%12s %14s %14s %26s\n", "adds/range", "sleep µs/loop", "spin µs/loop", "sleep / spin min/med/max");
    const long works[] = {0, 1000, 10000, 100000};
    for (size_t w = 0; w < sizeof works / sizeof works[0]; w++) {
        double a[101], b[101], r[101];
        long n = works[w];
        for (int k = 0; k < rounds; k++) {
            double t0 = now();
            for (int i = 0; i < loops; i++)
                rlpi_threadpool_parallel_for(sleep, threads, 1, work, &n);
            double t1 = now();
            for (int i = 0; i < loops; i++)
                rlpi_threadpool_parallel_for(spin, threads, 1, work, &n);
            double t2 = now();
            a[k] = (t1 - t0) / loops * 1e6;
            b[k] = (t2 - t1) / loops * 1e6;
            r[k] = a[k] / b[k];
        }
        qsort(a, (size_t)rounds, sizeof *a, cmp_double);
        qsort(b, (size_t)rounds, sizeof *b, cmp_double);
        qsort(r, (size_t)rounds, sizeof *r, cmp_double);
        printf("%12ld %14.1f %14.1f %10.2f / %.2f / %.2fx\n", n, a[rounds / 2], b[rounds / 2],
               r[0], r[rounds / 2], r[rounds - 1]);
    }
    rlpi_threadpool_free(spin);
    rlpi_threadpool_free(sleep);
    return 0;
}
