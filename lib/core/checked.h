/* Overflow-checked size arithmetic. Every loader and allocator multiplies
 * counts from untrusted input through these, never with a bare `*`. */
#ifndef RLPI_CORE_CHECKED_H
#define RLPI_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out = a * b; returns false on overflow (then *out is unspecified). */
static inline bool rlpi_mul_size(size_t *out, size_t a, size_t b)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool rlpi_add_size(size_t *out, size_t a, size_t b)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline bool rlpi_mul_u64(uint64_t *out, uint64_t a, uint64_t b)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool rlpi_add_u64(uint64_t *out, uint64_t a, uint64_t b)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Rounds `x` up to a multiple of `align` (> 0); false on overflow. */
static inline bool rlpi_align_up_u64(uint64_t *out, uint64_t x, uint64_t align)
{
    if (align == 0)
        return false;
    uint64_t rem = x % align;
    if (rem == 0) {
        *out = x;
        return true;
    }
    return rlpi_add_u64(out, x, align - rem);
}

#endif
