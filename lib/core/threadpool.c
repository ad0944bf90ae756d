/* Persistent worker threads handed each loop through a generation counter.
 * A worker that finishes a loop spins (pause) for a bounded, adaptive time
 * watching the counter before it sleeps on a condition variable, and the
 * caller spins the same way for the workers to finish, so back-to-back
 * small loops (a decode step is hundreds of them) are handed over without
 * a futex syscall; an idle pool sleeps.
 * Must not allocate per loop: it runs inside every layer of every step. */
#include "core/threadpool.h"

#include "core/error.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* The most a thread spins for a hand-off before it sleeps. A batch-1
 * decode step of SmolLM2-135M dispatches hundreds of loops of 10-100 µs
 * with a few µs of serial work between them; the spin must outlast those
 * gaps but stay short against the time an idle pool would burn a core.
 * 400 rather than 100: with the 4-bit and int8 rollout copies the loops
 * are shorter and the serial gaps between some of them (the head's
 * sampling, attention set-up) longer than 100 µs; batch-1 decode measured
 * +15-17 % (Q4_0 median 110-120 -> 123-139 tok/s, Q8_0 85 -> 99, in
 * alternating same-run pairs), batch 32 unchanged (docs/PERFORMANCE.md,
 * "Issue 22: Q4_0 rollout weights and bf16 by default"). */
#define DEFAULT_SPIN_US 400

/* Keeps the hot words of the hand-off on their own cache lines: the
 * dispatcher writes `generation` while workers poll it, and every worker
 * decrements `pending` while the caller polls it. */
#define CACHE_LINE 64

struct rlpi_threadpool {
    /* written by the dispatcher, polled by spinning workers */
    _Alignas(CACHE_LINE) uint64_t generation; /* bumped to start a loop (atomic) */
    /* decremented by workers, polled by the waiting caller */
    _Alignas(CACHE_LINE) int pending;         /* workers still running the current loop (atomic) */

    _Alignas(CACHE_LINE) int n_threads;
    int64_t spin_ns;             /* most a thread spins before sleeping (atomic; 0 = sleep at once) */
    int64_t caller_budget_ns;    /* the callers' adaptive spin budget (under loop_lock) */
    pthread_t *workers;          /* (n_threads - 1) */
    int *cpu_of;                 /* (n_threads) the CPU each thread last ran on, 0 = the caller (atomic) */
    pthread_mutex_t loop_lock;   /* serialises parallel_for callers */
    /* sleeping: a worker that ran out of spin registers in `sleepers` under
     * mu and waits on `wake`; a caller that ran out of spin sets
     * `caller_sleeping` under mu and waits on `done` */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    int sleepers;                /* workers asleep or about to be (atomic) */
    int caller_sleeping;         /* (atomic) */
    int quit;                    /* set before the last generation bump */
    /* the current loop: written before the generation bump (release), read
     * after seeing it (acquire) */
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

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Bounded, adaptive waiting for a word to change. The waiter pauses and
 * polls the word for up to its current budget, then gives up (and the
 * caller sleeps). A hand-off caught while spinning grows the budget by a
 * quarter (up to the pool's maximum); a budget that ran out, or a spin
 * during which the spinner was preempted by another thread, halves it
 * (down to SPIN_MIN_NS). With a core per thread nearly every hand-off is
 * caught and the budget stays at the maximum. With more runnable threads
 * than cores the thread waited for is often not running and spinning only
 * delays it: the budget decays within a few hand-offs, and a thread never
 * spins for one that last ran on its own CPU (queued behind the spinner),
 * so the pool then behaves as the plain sleep/wake pool it was before
 * spinning. */
#define SPIN_MIN_NS 2000
/* A gap this long between two clock reads of a spin (normally < 1 µs
 * apart) means the spinning thread lost its core for a while. */
#define PREEMPTED_NS 20000

/* Involuntary context switches of the calling thread so far (-1 where the
 * system cannot tell). */
static long involuntary_switches(void)
{
#ifdef RUSAGE_THREAD
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0)
        return ru.ru_nivcsw;
#endif
    return -1;
}

/* Whether a gap in a spin was this kernel giving the core to another of
 * its threads, rather than an interrupt or, on a virtual machine, the
 * hypervisor running another guest's vCPU. Only the first means the
 * cores are oversubscribed and spinning takes time from someone who
 * needs it; the others stop every thread alike, and sleeping then only
 * adds a wake-up to each hand-off. On a 2-vCPU VM they came often enough
 * to halve every spin budget down to its floor: 460 futex calls per
 * decoded token, batch-1 decode 93 against 112 tok/s with them ignored
 * (docs/PERFORMANCE.md, "Issue 22: batch-1 decode at the memory bound").
 * Counted once per thread: a switch seen here is not seen again. */
static int preempted_by_a_thread(void)
{
    static _Thread_local long seen = -1;
    long now = involuntary_switches();
    if (now < 0)
        return 1; /* cannot tell: assume the worst, as before */
    int more = seen >= 0 && now > seen;
    seen = now;
    return more;
}

/* Waits until *word != ref (when `zero` is 0) or *word == 0 (when `zero`
 * is 1), for at most *budget_ns; adapts *budget_ns within
 * [min(SPIN_MIN_NS, max_ns), max_ns]. Returns 1 when the condition holds. */
static int spin_wait(const void *word, int is_int, uint64_t ref, int64_t *budget_ns, int64_t max_ns)
{
    if (max_ns <= 0)
        return 0;
    int64_t floor_ns = max_ns < SPIN_MIN_NS ? max_ns : SPIN_MIN_NS;
    int64_t limit = *budget_ns < floor_ns ? floor_ns : *budget_ns > max_ns ? max_ns : *budget_ns;
    int64_t t0 = 0, t_prev = 0, stolen = 0; /* stolen: gaps not spent spinning, not charged to the budget */
    for (unsigned i = 0;; i++) {
        int done = is_int ? __atomic_load_n((const int *)word, __ATOMIC_ACQUIRE) == 0
                          : __atomic_load_n((const uint64_t *)word, __ATOMIC_ACQUIRE) != ref;
        if (done) {
            *budget_ns = limit + limit / 4 > max_ns ? max_ns : limit + limit / 4;
            return 1;
        }
        cpu_relax();
        if ((i & 15) == 15) { /* a clock read every ~0.3-1 µs of pauses */
            int64_t t = now_ns();
            if (!t0) {
                t0 = t;
            } else {
                int preempted = 0;
                if (t - t_prev > PREEMPTED_NS) {
                    if (preempted_by_a_thread())
                        preempted = 1;
                    else
                        stolen += t - t_prev;
                }
                if (preempted || t - t0 - stolen > limit) {
                    /* out of budget, or another thread took this core
                     * while it spun: others want the cores, so sleep
                     * instead */
                    *budget_ns = limit / 2 < floor_ns ? floor_ns : limit / 2;
                    return 0;
                }
            }
            t_prev = t;
        }
    }
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
    int64_t budget = INT64_MAX; /* this worker's adaptive spin budget (clamped to the pool's) */
    for (;;) {
        /* Spinning for a caller queued on this same CPU would only keep it
         * from running: then sleep at once. */
        int cpu = sched_getcpu();
        __atomic_store_n(&pool->cpu_of[wa.tid], cpu, __ATOMIC_RELAXED);
        int64_t max_ns = cpu >= 0 && cpu == __atomic_load_n(&pool->cpu_of[0], __ATOMIC_RELAXED)
                             ? 0
                             : __atomic_load_n(&pool->spin_ns, __ATOMIC_RELAXED);
        if (!spin_wait(&pool->generation, 0, seen, &budget, max_ns)) {
            /* Sleep. Registering in `sleepers` and then reading the
             * generation (both seq_cst) pairs with the dispatcher's bump
             * and then read of `sleepers`: either this thread sees the new
             * generation or the dispatcher sees a sleeper and broadcasts,
             * which it can only do once this thread waits (it holds mu). */
            pthread_mutex_lock(&pool->mu);
            __atomic_add_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&pool->generation, __ATOMIC_SEQ_CST) == seen)
                pthread_cond_wait(&pool->wake, &pool->mu);
            __atomic_sub_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&pool->mu);
        }
        seen = __atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE);
        if (pool->quit)
            break;
        rlpi_range_fn fn = pool->fn;
        void *arg = pool->arg;
        int64_t n_items = pool->n_items;
        int n_ranges = pool->n_ranges;
        if (wa.tid < n_ranges) {
            int64_t b, e;
            range_of(n_items, n_ranges, wa.tid, &b, &e);
            fn(arg, b, e, wa.tid);
        }
        /* the same pairing as above, for the caller asleep on `done` */
        if (__atomic_sub_fetch(&pool->pending, 1, __ATOMIC_SEQ_CST) == 0 &&
            __atomic_load_n(&pool->caller_sleeping, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

/* RLPOST_POOL_SPIN_US overrides the spin budget (0: sleep at once, as
 * before this hand-off existed; for hosts with more busy threads than
 * cores, and for A/B measurements). */
static int64_t spin_budget_ns(void)
{
    const char *env = getenv("RLPOST_POOL_SPIN_US");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 1000000)
            return (int64_t)v * 1000;
    }
    return (int64_t)DEFAULT_SPIN_US * 1000;
}

int rlpi_threadpool_create(rlpi_threadpool **out, int n_threads)
{
    if (!out)
        return rlpi_error_set(RLP_E_INVALID_ARG, "thread pool: out is NULL");
    if (n_threads < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "thread pool: %d threads", n_threads);
    /* aligned for the cache-line members; the size must be a multiple of
     * the alignment for aligned_alloc */
    size_t size = (sizeof(rlpi_threadpool) + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    rlpi_threadpool *pool = aligned_alloc(CACHE_LINE, size);
    if (!pool)
        return rlpi_error_set(RLP_E_NOMEM, "thread pool: out of memory");
    memset(pool, 0, size);
    pool->n_threads = n_threads;
    pool->spin_ns = spin_budget_ns();
    pool->caller_budget_ns = pool->spin_ns;
    pthread_mutex_init(&pool->loop_lock, NULL);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    pool->cpu_of = malloc((size_t)n_threads * sizeof *pool->cpu_of);
    if (pool->cpu_of)
        for (int i = 0; i < n_threads; i++)
            pool->cpu_of[i] = -1;
    if (n_threads > 1)
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
    if (!pool->cpu_of || (n_threads > 1 && !pool->workers)) {
        free(pool->cpu_of);
        free(pool->workers);
        free(pool);
        return rlpi_error_set(RLP_E_NOMEM, "thread pool: out of memory");
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
    pool->quit = 1; /* published by the bump below */
    __atomic_add_fetch(&pool->generation, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++)
        pthread_join(pool->workers[i - 1], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->mu);
    pthread_mutex_destroy(&pool->loop_lock);
    free(pool->workers);
    free(pool->cpu_of);
    free(pool);
}

int rlpi_threadpool_size(const rlpi_threadpool *pool)
{
    return pool ? pool->n_threads : 1;
}

void rlpi_threadpool_set_spin_us(rlpi_threadpool *pool, int64_t spin_us)
{
    if (!pool)
        return;
    if (spin_us < 0)
        spin_us = 0;
    if (spin_us > 1000000)
        spin_us = 1000000;
    __atomic_store_n(&pool->spin_ns, spin_us * 1000, __ATOMIC_RELAXED);
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
    int64_t spin_ns = __atomic_load_n(&pool->spin_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&pool->cpu_of[0], sched_getcpu(), __ATOMIC_RELAXED);
    /* every worker has decremented `pending` to 0 by now (the previous
     * loop waited for it), so these writes race with no reader */
    pool->fn = fn;
    pool->arg = arg;
    pool->n_items = n_items;
    pool->n_ranges = n_ranges;
    __atomic_store_n(&pool->pending, pool->n_threads - 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pool->generation, 1, __ATOMIC_SEQ_CST); /* publishes the loop */
    if (__atomic_load_n(&pool->sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
    }

    int64_t b, e;
    range_of(n_items, n_ranges, 0, &b, &e);
    fn(arg, b, e, 0);

    /* as in the workers: no spinning for a worker queued on this CPU */
    int cpu = sched_getcpu();
    __atomic_store_n(&pool->cpu_of[0], cpu, __ATOMIC_RELAXED);
    for (int i = 1; cpu >= 0 && i < pool->n_threads && spin_ns; i++)
        if (__atomic_load_n(&pool->cpu_of[i], __ATOMIC_RELAXED) == cpu)
            spin_ns = 0;
    if (!spin_wait(&pool->pending, 1, 0, &pool->caller_budget_ns, spin_ns)) {
        pthread_mutex_lock(&pool->mu);
        __atomic_store_n(&pool->caller_sleeping, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&pool->pending, __ATOMIC_SEQ_CST) > 0)
            pthread_cond_wait(&pool->done, &pool->mu);
        __atomic_store_n(&pool->caller_sleeping, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&pool->mu);
    }
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
