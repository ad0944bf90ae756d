/* See heap.h. */
#include "core/heap.h"

#include <stdlib.h> /* defines __GLIBC__ with glibc */

#if defined(__GLIBC__)
#include <malloc.h>
#endif

void rlpi_return_free_heap(void)
{
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}
