/* A stand-in for CUDA's cuda_bf16.h: the bfloat16 type and the conversions
 * cuda/ uses, for the kernel emulator (C++ only). The rounding is written
 * here independently of lib/core/half.h (by comparing the two neighbouring
 * bf16 values instead of adding a rounding bias), so the emulated
 * conversion kernel is checked against a second implementation. */
#ifndef RLPI_CUDA_EMU_BF16_H
#define RLPI_CUDA_EMU_BF16_H

#include "cuda_runtime.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    unsigned short __x;
};

static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* round toward zero: drop the 16 low bits (NaN kept a NaN) */
static inline __nv_bfloat16 __float2bfloat16_rz(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 h;
    h.__x = (unsigned short)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fffu : u >> 16);
    return h;
}

/* round to nearest, ties to even; overflow rounds to ±Inf; NaN becomes the
 * canonical NaN 0x7fff as on the GPU */
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.__x = 0x7fffu;
        return h;
    }
    if ((u & 0x7fffffffu) == 0x7f800000u) { /* ±Inf is exact (and has no upper neighbour) */
        h.__x = (unsigned short)(u >> 16);
        return h;
    }
    uint32_t sign = u & 0x80000000u, lo = u & 0x7fff0000u, hi = lo + 0x10000u; /* |f| lies in [lo, hi) */
    double x = fabs((double)f), vlo, vhi;
    memcpy(&f, &lo, sizeof f);
    vlo = f;
    if (hi >= 0x7f800000u) {
        vhi = ldexp(1.0, 128); /* the first magnitude that is not finite */
    } else {
        memcpy(&f, &hi, sizeof f);
        vhi = f;
    }
    double dlo = x - vlo, dhi = vhi - x; /* exact in double */
    uint32_t r = dlo < dhi || (dlo == dhi && !(lo & 0x10000u)) ? lo : hi;
    h.__x = (unsigned short)((sign | r) >> 16);
    return h;
}

#endif
