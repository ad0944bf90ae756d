/* A fixed pool of worker threads for data-parallel loops on the CPU.
 * The calling thread takes part in every loop, so a pool of n threads
 * starts n-1 workers. Work is split statically into contiguous ranges, so a
 * loop's partition depends only on (n_items, n_threads): results that are
 * reduced per range are reproducible run to run. */
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

/* Runs fn over [0, n_items) split into at most size() ranges of at least
 * `min_chunk` items and waits for all of them. Loops from different threads
 * on the same pool are serialised. A NULL pool runs fn inline. */
void rlpi_threadpool_parallel_for(rlpi_threadpool *pool, int64_t n_items, int64_t min_chunk,
                                  rlpi_range_fn fn, void *arg);

#endif
