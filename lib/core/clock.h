/* The library's one clock: CLOCK_MONOTONIC, which wall-clock changes (NTP,
 * an administrator) cannot move, for every duration, deadline and timing
 * statistic. Condition variables that wait on a deadline are created with
 * pthread_condattr_setclock(CLOCK_MONOTONIC) to match rlpi_deadline_after. */
#ifndef RLPI_CORE_CLOCK_H
#define RLPI_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on the monotonic clock (an arbitrary origin). */
static inline uint64_t rlpi_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Seconds on the monotonic clock, for durations. */
static inline double rlpi_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The monotonic time `ms` milliseconds from now, as the absolute deadline
 * of pthread_cond_timedwait on a CLOCK_MONOTONIC condition variable. */
static inline void rlpi_deadline_after(struct timespec *ts, uint32_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

#endif
