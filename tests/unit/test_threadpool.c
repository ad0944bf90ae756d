/* The thread pool's hand-off (lib/core/threadpool.c) on both of its paths:
 * workers and caller that catch the next loop while spinning, and ones that
 * ran out of spin and sleep. Part of the 'tsan' suite: ThreadSanitizer
 * checks the generation/pending protocol and the sleep/wake pairing. */
#include "core/threadpool.h"
#include "rlpost.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#include <cmocka.h>

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* counts[i] += 1 for every item; sum of tids seen per range */
typedef struct count_arg {
    int *counts;
    int64_t calls;   /* (atomic) */
    long delay_us;   /* ranges other than the caller's sleep this long */
} count_arg;

static void count_range(void *p, int64_t b, int64_t e, int tid)
{
    count_arg *a = p;
    if (a->delay_us && tid != 0)
        sleep_us(a->delay_us);
    for (int64_t i = b; i < e; i++)
        a->counts[i]++; /* ranges are disjoint: no atomics needed */
    __atomic_add_fetch(&a->calls, 1, __ATOMIC_RELAXED);
}

/* n loops over `items`, each checked item by item */
static void run_loops(rlpi_threadpool *pool, int n_loops, int64_t items, long gap_us, long delay_us)
{
    int *counts = calloc((size_t)items, sizeof *counts);
    assert_non_null(counts);
    for (int l = 0; l < n_loops; l++) {
        count_arg a = {counts, 0, delay_us};
        rlpi_threadpool_parallel_for(pool, items, 1, count_range, &a);
        int64_t expect_calls = items < rlpi_threadpool_size(pool) ? items : rlpi_threadpool_size(pool);
        assert_int_equal(a.calls, expect_calls);
        if (gap_us)
            sleep_us(gap_us);
    }
    for (int64_t i = 0; i < items; i++)
        assert_int_equal(counts[i], n_loops);
    free(counts);
}

/* Thousands of back-to-back tiny loops (the decode pattern): workers catch
 * each generation while spinning. */
static void back_to_back_loops_while_spinning(void **state)
{
    (void)state;
    const int threads[] = {2, 3};
    for (size_t t = 0; t < 2; t++) {
        rlpi_threadpool *pool;
        assert_int_equal(rlpi_threadpool_create(&pool, threads[t]), RLP_OK);
        rlpi_threadpool_set_spin_us(pool, 1000);
        run_loops(pool, 1000, 7, 0, 0);
        run_loops(pool, 200, 1, 0, 0); /* one range: inline, no hand-off */
        rlpi_threadpool_free(pool);
    }
}

/* Gaps between loops longer than the spin budget: every hand-off finds the
 * workers asleep and must wake them (a lost wake-up hangs here). */
static void loops_after_the_spin_ran_out(void **state)
{
    (void)state;
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 3), RLP_OK);
    rlpi_threadpool_set_spin_us(pool, 5);
    run_loops(pool, 100, 100, 200, 0);
    rlpi_threadpool_set_spin_us(pool, 0); /* sleep at once: the pool before spinning */
    run_loops(pool, 300, 100, 0, 0);
    run_loops(pool, 50, 100, 100, 0);
    rlpi_threadpool_free(pool);
}

/* Workers slower than the caller's spin: the caller sleeps on `done` and
 * the last worker must wake it. */
static void caller_sleeps_until_slow_workers_finish(void **state)
{
    (void)state;
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 3), RLP_OK);
    rlpi_threadpool_set_spin_us(pool, 10);
    run_loops(pool, 30, 64, 0, 2000);
    rlpi_threadpool_set_spin_us(pool, 0);
    run_loops(pool, 30, 64, 0, 500);
    rlpi_threadpool_free(pool);
}

/* Freeing a pool whose workers are spinning, and one whose workers sleep. */
static void free_while_spinning_or_asleep(void **state)
{
    (void)state;
    for (int rep = 0; rep < 20; rep++) {
        rlpi_threadpool *pool;
        assert_int_equal(rlpi_threadpool_create(&pool, 3), RLP_OK);
        rlpi_threadpool_set_spin_us(pool, rep % 2 ? 1000 : 0);
        run_loops(pool, 3, 16, 0, 0);
        rlpi_threadpool_free(pool); /* spinning workers must see quit */
    }
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 2), RLP_OK);
    rlpi_threadpool_free(pool); /* never used */
}

typedef struct concurrent_arg {
    rlpi_threadpool *pool;
    int64_t total;
} concurrent_arg;

static void add_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    __atomic_add_fetch((int64_t *)p, e - b, __ATOMIC_RELAXED);
}

static void *submit_loops(void *p)
{
    concurrent_arg *ca = p;
    for (int i = 0; i < 500; i++)
        rlpi_threadpool_parallel_for(ca->pool, 1000, 1, add_range, &ca->total);
    return NULL;
}

static void concurrent_callers_with_spinning(void **state)
{
    (void)state;
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 3), RLP_OK);
    concurrent_arg a = {pool, 0}, b = {pool, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, submit_loops, &a);
    pthread_create(&tb, NULL, submit_loops, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.total, 500 * 1000);
    assert_int_equal(b.total, 500 * 1000);
    rlpi_threadpool_free(pool);
}

typedef struct task_arg {
    int *hits;
} task_arg;

static void hit_task(void *p, int64_t task, int tid)
{
    (void)tid;
    __atomic_add_fetch(&((task_arg *)p)->hits[task], 1, __ATOMIC_RELAXED);
}

static void tasks_run_once_each(void **state)
{
    (void)state;
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 3), RLP_OK);
    int hits[37] = {0};
    task_arg a = {hits};
    for (int rep = 0; rep < 500; rep++)
        rlpi_threadpool_run_tasks(pool, 37, hit_task, &a);
    for (int i = 0; i < 37; i++)
        assert_int_equal(hits[i], 500);
    rlpi_threadpool_free(pool);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The spin is bounded: an idle pool goes to sleep. Four workers that spun
 * on would burn several hundred ms of CPU in the 500 ms below even on a
 * busy machine; the budget is 100 µs each. */
static void idle_pool_sleeps(void **state)
{
    (void)state;
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 5), RLP_OK);
    rlpi_threadpool_set_spin_us(pool, 100);
    run_loops(pool, 10, 64, 0, 0);
    sleep_us(20000); /* let the spin run out */
    double c0 = cpu_seconds();
    sleep_us(500000);
    double used = cpu_seconds() - c0;
    assert_true(used < 0.05);
    run_loops(pool, 10, 64, 0, 0); /* and wakes again */
    rlpi_threadpool_free(pool);
}

int main(void)
{
    /* RLPOST_TEST_FILTER=name runs one test (timing the parts by hand) */
    if (getenv("RLPOST_TEST_FILTER"))
        cmocka_set_test_filter(getenv("RLPOST_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(back_to_back_loops_while_spinning),
        cmocka_unit_test(loops_after_the_spin_ran_out),
        cmocka_unit_test(caller_sleeps_until_slow_workers_finish),
        cmocka_unit_test(free_while_spinning_or_asleep),
        cmocka_unit_test(concurrent_callers_with_spinning),
        cmocka_unit_test(tasks_run_once_each),
        cmocka_unit_test(idle_pool_sleeps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
