/* Core utilities: status strings, thread-local errors, overflow checks,
 * random streams and the thread pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/checked.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threadpool.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void status_strings_are_distinct(void **state)
{
    (void)state;
    const int codes[] = {RLP_OK, RLP_E_INVALID_ARG, RLP_E_NOMEM, RLP_E_IO, RLP_E_FORMAT,
                         RLP_E_UNSUPPORTED, RLP_E_BACKEND, RLP_E_TIMEOUT, RLP_E_NETWORK,
                         RLP_E_CALLBACK, RLP_E_CLOSED, RLP_E_AGAIN, RLP_E_NOT_FOUND, RLP_E_STATE,
                         RLP_E_OVERFLOW, RLP_E_INTERNAL};
    size_t n = sizeof codes / sizeof codes[0];
    /* values are part of the ABI */
    assert_int_equal(RLP_E_INVALID_ARG, -1);
    assert_int_equal(RLP_E_AGAIN, -11);
    assert_int_equal(RLP_E_INTERNAL, -15);
    for (size_t i = 0; i < n; i++) {
        const char *s = rlp_status_str(codes[i]);
        assert_non_null(s);
        assert_string_not_equal(s, "unknown status");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, rlp_status_str(codes[j]));
    }
    assert_string_equal(rlp_status_str(-999), "unknown status");
    assert_string_equal(rlp_status_str(5), "unknown status");
}

static void *other_thread(void *arg)
{
    (void)arg;
    /* a fresh thread has no error, whatever the main thread recorded */
    int empty = rlp_error_last()[0] == '\0' && rlp_error_last_code() == RLP_OK;
    rlpi_error_set(RLP_E_IO, "thread two failed on %s", "file.bin");
    return (void *)(intptr_t)empty;
}

static void errors_are_thread_local(void **state)
{
    (void)state;
    assert_int_equal(rlpi_error_set(RLP_E_FORMAT, "tensor '%s' has %d dims", "blk.0", 7), RLP_E_FORMAT);
    pthread_t t;
    void *ret;
    assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, &ret);
    assert_true((intptr_t)ret);
    assert_string_equal(rlp_error_last(), "tensor 'blk.0' has 7 dims");
    assert_int_equal(rlp_error_last_code(), RLP_E_FORMAT);
    rlpi_error_wrap("loading %s", "model.gguf");
    assert_string_equal(rlp_error_last(), "loading model.gguf: tensor 'blk.0' has 7 dims");
    rlp_error_clear();
    assert_string_equal(rlp_error_last(), "");
    assert_int_equal(rlp_error_last_code(), RLP_OK);
}

static void long_messages_are_truncated(void **state)
{
    (void)state;
    char big[4000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    rlpi_error_set(RLP_E_IO, "%s", big);
    size_t len = strlen(rlp_error_last());
    assert_true(len < sizeof big && len > 500);
    assert_string_equal(rlp_error_last() + len - 3, "...");
}

static void checked_arithmetic(void **state)
{
    (void)state;
    size_t s;
    uint64_t u;
    assert_true(rlpi_mul_size(&s, 1000, 1000) && s == 1000000);
    assert_false(rlpi_mul_size(&s, SIZE_MAX / 2, 3));
    assert_false(rlpi_add_size(&s, SIZE_MAX, 1));
    /* the GGUF padding wrap of shared/cases #4: 2^64-16 rounded up to 32 */
    assert_false(rlpi_align_up_u64(&u, UINT64_MAX - 15, 32));
    assert_true(rlpi_align_up_u64(&u, 33, 32) && u == 64);
    assert_true(rlpi_align_up_u64(&u, 64, 32) && u == 64);
    assert_false(rlpi_align_up_u64(&u, 1, 0));
}

static void rng_streams(void **state)
{
    (void)state;
    rlpi_rng a, b, c;
    rlpi_rng_seed(&a, 42, 0);
    rlpi_rng_seed(&b, 42, 0);
    rlpi_rng_seed(&c, 42, 1);
    int same_as_other_stream = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rlpi_rng_u64(&a);
        assert_true(x == rlpi_rng_u64(&b));
        same_as_other_stream += x == rlpi_rng_u64(&c);
    }
    assert_int_equal(same_as_other_stream, 0);

    /* uniformity: mean and variance of U[0,1) within 5 sigma for 1e5 draws */
    double sum = 0, sq = 0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        float f = rlpi_rng_f32(&a);
        assert_true(f >= 0.0f && f < 1.0f);
        sum += f;
        sq += (double)f * f;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / n));
    assert_true(fabs(var - 1.0 / 12) < 0.002);

    /* below(n): in range and every value hit */
    int hits[7] = {0};
    for (int i = 0; i < 7000; i++) {
        uint64_t v = rlpi_rng_below(&a, 7);
        assert_true(v < 7);
        hits[v]++;
    }
    for (int i = 0; i < 7; i++)
        assert_true(hits[i] > 800 && hits[i] < 1200);

    double nsum = 0, nsq = 0;
    for (int i = 0; i < n; i++) {
        double z = rlpi_rng_normal(&a);
        nsum += z;
        nsq += z * z;
    }
    assert_true(fabs(nsum / n) < 0.02);
    assert_true(fabs(nsq / n - 1.0) < 0.03);
}

typedef struct loop_arg {
    int *counts;
    int64_t ranges[64][2];
    int n_calls;
    pthread_mutex_t mu;
} loop_arg;

static void count_items(void *p, int64_t b, int64_t e, int tid)
{
    loop_arg *la = p;
    for (int64_t i = b; i < e; i++)
        __atomic_add_fetch(&la->counts[i], 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&la->mu);
    la->ranges[tid][0] = b;
    la->ranges[tid][1] = e;
    la->n_calls++;
    pthread_mutex_unlock(&la->mu);
}

static void threadpool_covers_each_item_once(void **state)
{
    (void)state;
    const int thread_counts[] = {1, 2, 3, 8};
    const int64_t sizes[] = {0, 1, 2, 7, 100, 1001};
    for (size_t t = 0; t < 4; t++) {
        rlpi_threadpool *pool;
        assert_int_equal(rlpi_threadpool_create(&pool, thread_counts[t]), RLP_OK);
        assert_int_equal(rlpi_threadpool_size(pool), thread_counts[t]);
        for (int rep = 0; rep < 20; rep++)
            for (size_t s = 0; s < 6; s++) {
                loop_arg la = {.counts = calloc((size_t)sizes[s] + 1, sizeof(int))};
                pthread_mutex_init(&la.mu, NULL);
                rlpi_threadpool_parallel_for(pool, sizes[s], 1, count_items, &la);
                for (int64_t i = 0; i < sizes[s]; i++)
                    assert_int_equal(la.counts[i], 1);
                int expect_calls = sizes[s] == 0 ? 0
                                   : sizes[s] < thread_counts[t] ? (int)sizes[s]
                                                                 : thread_counts[t];
                assert_int_equal(la.n_calls, expect_calls);
                pthread_mutex_destroy(&la.mu);
                free(la.counts);
            }
        /* min_chunk limits the number of ranges */
        loop_arg la = {.counts = calloc(100, sizeof(int))};
        pthread_mutex_init(&la.mu, NULL);
        rlpi_threadpool_parallel_for(pool, 100, 60, count_items, &la);
        assert_int_equal(la.n_calls, thread_counts[t] == 1 ? 1 : 2);
        pthread_mutex_destroy(&la.mu);
        free(la.counts);
        rlpi_threadpool_free(pool);
    }
    assert_int_equal(rlpi_threadpool_create(&(rlpi_threadpool *){NULL}, 0), RLP_E_INVALID_ARG);
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
    for (int i = 0; i < 200; i++)
        rlpi_threadpool_parallel_for(ca->pool, 1000, 1, add_range, &ca->total);
    return NULL;
}

static void threadpool_serialises_concurrent_callers(void **state)
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
    assert_int_equal(a.total, 200 * 1000);
    assert_int_equal(b.total, 200 * 1000);
    rlpi_threadpool_free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_strings_are_distinct),
        cmocka_unit_test(errors_are_thread_local),
        cmocka_unit_test(long_messages_are_truncated),
        cmocka_unit_test(checked_arithmetic),
        cmocka_unit_test(rng_streams),
        cmocka_unit_test(threadpool_covers_each_item_once),
        cmocka_unit_test(threadpool_serialises_concurrent_callers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
