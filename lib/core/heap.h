/* Returning the C library's free heap memory to the system between the
 * phases of a step. */
#ifndef RLPI_CORE_HEAP_H
#define RLPI_CORE_HEAP_H

/* Gives the pages of free malloc chunks back to the kernel (glibc's
 * malloc_trim, which also releases whole free pages inside the heap, not
 * just at its top); a no-op with other C libraries. Live allocations are
 * untouched, so it is safe at any time from any thread; it costs a walk of
 * the free lists (well under a millisecond here) and, for the memory it
 * returns, page faults when that memory is used again.
 *
 * Why: glibc raises its mmap threshold to the size of the largest block
 * freed so far (up to 32 MiB), after which the step's large temporaries
 * come from the heap and the holes they leave stay resident. In the
 * default job that grew the heap by ~47 MB over 16 steps, on top of a
 * peak that is otherwise the trainer's own buffers (docs/PERFORMANCE.md,
 * "Issue 22: the peak RSS goal"). */
void rlpi_return_free_heap(void);

#endif
