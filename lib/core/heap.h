/* Returning the C library's free heap memory to the system between the
 * phases of a step. */
#ifndef RLPI_CORE_HEAP_H
#define RLPI_CORE_HEAP_H

/* Gives the pages of free malloc chunks back to the kernel (glibc's
 * malloc_trim, which also releases whole free pages inside the heap, not
 * just at its top); a no-op with other C libraries. Live allocations are
 * untouched, so it is safe at any time from any thread; it costs a walk of
 * the free chunks and, for the memory it returns, page faults when that
 * memory is used again.
 *
 * Why: glibc raises its mmap threshold to the size of the largest block
 * freed so far (up to 32 MiB), after which a step's large temporaries come
 * from the heap and the holes they leave stay resident. Called before each
 * train step it lowered a 6-step default job's peak by 15 MB
 * (docs/PERFORMANCE.md, "Issue 22: batch-1 decode at the memory bound, and
 * the peak RSS goal"). */
void rlpi_return_free_heap(void);

#endif
