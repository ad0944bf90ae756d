/* A fixed pool of worker threads for data-parallel loops on the CPU.
 * The calling thread takes part in every loop, so a pool of n threads
 * starts n-1 workers. Work is split statically into contiguous ranges, so a
 * loop's partition depends only on (n_items, n_threads): results that are
 * reduced per range are reproducible run to run.
 * Hand-offs spin: after a loop, workers (and the caller waiting for them)
 * poll for up to a spin budget before sleeping on a condition variable, so
 * back-to-back small loops cost no syscalls and an idle pool costs no CPU
 * after the budget. The budget is 400 µs unless RLPOST_POOL_SPIN_US (read
 * when a pool is created, 0 to 1000000) says otherwise; 0 sleeps at once. */
#ifndef RLPI_CORE_THREADPOOL_H
#define RLPI_CORE_THREADPOOL_H

#include <stdint.h>

typedef struct rlpi_threadpool rlpi_threadpool;

/* Body of a parallel loop: process items [begin, end) on thread `tid`
 * (0 = the caller). */
typedef void (*rlpi_range_fn)(void *arg, int64_t begin, int64_t end, int tid);

/* n_threads >= 1. Returns RLP_OK, RLP_E_NOMEM or RLP_E_BACKEND (thread
 * creation failed). */
int rlpi_threadpool_create(rlpi_threadpool **out, int n_threads);
void rlpi_threadpool_free(rlpi_threadpool *pool);
int rlpi_threadpool_size(const rlpi_threadpool *pool);

/* Sets the spin budget in µs (clamped to [0, 1e6]; 0 = sleep at once) for
 * the hand-offs that start after the call; for tests that force the
 * sleeping path. A NULL pool is ignored. */
void rlpi_threadpool_set_spin_us(rlpi_threadpool *pool, int64_t spin_us);

/* Runs fn over [0, n_items) split into at most size() ranges of at least
 * `min_chunk` items and waits for all of them. Loops from different threads
 * on the same pool are serialised. A NULL pool runs fn inline. */
void rlpi_threadpool_parallel_for(rlpi_threadpool *pool, int64_t n_items, int64_t min_chunk,
                                  rlpi_range_fn fn, void *arg);

/* Body of a task loop: run task `task` on thread `tid`. */
typedef void (*rlpi_task_fn)(void *arg, int64_t task, int tid);

/* Runs fn once for each task in [0, n_tasks), handed out one at a time to
 * whichever thread is free (dynamic scheduling), and waits for all of them.
 * For uneven work (attention blocks of sequences of different lengths,
 * GEMM tiles): which thread runs a task varies run to run, so tasks must
 * write disjoint outputs and not reduce across tasks. A NULL pool or one
 * task runs inline on the caller. */
void rlpi_threadpool_run_tasks(rlpi_threadpool *pool, int64_t n_tasks, rlpi_task_fn fn, void *arg);

#endif
