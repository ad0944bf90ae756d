/* Persistent worker threads woken per loop by a generation counter.
 * Must not allocate per loop: it runs inside every layer of every step. */
#include "core/threadpool.h"

#include "core/error.h"

#include <pthread.h>
#include <stdlib.h>

struct rlpi_threadpool {
    int n_threads;
    pthread_t *workers;          /* (n_threads - 1) */
    pthread_mutex_t loop_lock;   /* serialises parallel_for callers */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    uint64_t generation;         /* bumped to start a loop */
    int pending;                 /* workers still running the current loop */
    int quit;
    /* the current loop */
    rlpi_range_fn fn;
    void *arg;
    int64_t n_items;
    int n_ranges;
};

static void range_of(int64_t n_items, int n_ranges, int r, int64_t *b, int64_t *e)
{
    int64_t base = n_items / n_ranges, extra = n_items % n_ranges;
    *b = r * base + (r < extra ? r : extra);
    *e = *b + base + (r < extra ? 1 : 0);
}

struct worker_arg {
    rlpi_threadpool *pool;
    int tid;
};

static void *worker_main(void *p)
{
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    rlpi_threadpool *pool = wa.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->quit && pool->generation == seen)
            pthread_cond_wait(&pool->wake, &pool->mu);
        if (pool->quit)
            break;
        seen = pool->generation;
        rlpi_range_fn fn = pool->fn;
        void *arg = pool->arg;
        int64_t n_items = pool->n_items;
        int n_ranges = pool->n_ranges;
        pthread_mutex_unlock(&pool->mu);
        if (wa.tid < n_ranges) {
            int64_t b, e;
            range_of(n_items, n_ranges, wa.tid, &b, &e);
            fn(arg, b, e, wa.tid);
        }
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

int rlpi_threadpool_create(rlpi_threadpool **out, int n_threads)
{
    if (n_threads < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "thread pool: %d threads", n_threads);
    rlpi_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return rlpi_error_set(RLP_E_NOMEM, "thread pool: out of memory");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->loop_lock, NULL);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            free(pool);
            return rlpi_error_set(RLP_E_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (wa)
            *wa = (struct worker_arg){pool, i};
        int rc = wa ? pthread_create(&pool->workers[i - 1], NULL, worker_main, wa) : -1;
        if (rc != 0) {
            free(wa);
            pool->n_threads = i; /* tear down the ones that started */
            rlpi_threadpool_free(pool);
            return rlpi_error_set(RLP_E_BACKEND, "thread pool: could not start thread %d of %d", i,
                                  n_threads);
        }
    }
    *out = pool;
    return RLP_OK;
}

void rlpi_threadpool_free(rlpi_threadpool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->quit = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++)
        pthread_join(pool->workers[i - 1], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->mu);
    pthread_mutex_destroy(&pool->loop_lock);
    free(pool->workers);
    free(pool);
}

int rlpi_threadpool_size(const rlpi_threadpool *pool)
{
    return pool ? pool->n_threads : 1;
}

void rlpi_threadpool_parallel_for(rlpi_threadpool *pool, int64_t n_items, int64_t min_chunk,
                                  rlpi_range_fn fn, void *arg)
{
    if (n_items <= 0)
        return;
    if (min_chunk < 1)
        min_chunk = 1;
    int64_t max_ranges = (n_items + min_chunk - 1) / min_chunk;
    int n_ranges = pool ? pool->n_threads : 1;
    if (max_ranges < n_ranges)
        n_ranges = (int)max_ranges;
    if (n_ranges <= 1) {
        fn(arg, 0, n_items, 0);
        return;
    }
    pthread_mutex_lock(&pool->loop_lock);
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->n_items = n_items;
    pool->n_ranges = n_ranges;
    pool->pending = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    int64_t b, e;
    range_of(n_items, n_ranges, 0, &b, &e);
    fn(arg, b, e, 0);

    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    pthread_mutex_unlock(&pool->loop_lock);
}

typedef struct task_loop {
    rlpi_task_fn fn;
    void *arg;
    int64_t n_tasks;
    int64_t next; /* the next task to hand out (atomic) */
} task_loop;

static void task_worker(void *p, int64_t b, int64_t e, int tid)
{
    (void)b;
    (void)e;
    task_loop *t = p;
    for (;;) {
        int64_t i = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED);
        if (i >= t->n_tasks)
            break;
        t->fn(t->arg, i, tid);
    }
}

void rlpi_threadpool_run_tasks(rlpi_threadpool *pool, int64_t n_tasks, rlpi_task_fn fn, void *arg)
{
    if (n_tasks <= 0)
        return;
    int n = pool ? pool->n_threads : 1;
    if (n <= 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(arg, i, 0);
        return;
    }
    task_loop t = {fn, arg, n_tasks, 0};
    /* one range per thread; each range body pulls tasks until none are left */
    rlpi_threadpool_parallel_for(pool, n_tasks < n ? n_tasks : n, 1, task_worker, &t);
}
