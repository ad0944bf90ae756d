/* IEEE binary16 (F16) and bfloat16 (BF16) <-> fp32 conversions for the file
 * formats that store half-precision weights. Bit-level, so results do not
 * depend on the compiler's _Float16 support; rounding is to nearest even,
 * as PyTorch's .to(torch.float16 / torch.bfloat16) does. No state, no I/O. */
#ifndef RLPI_CORE_HALF_H
#define RLPI_CORE_HALF_H

#include <stdint.h>
#include <string.h>

static inline float rlpi_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t rlpi_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float rlpi_bf16_to_f32(uint16_t h)
{
    return rlpi_bits_to_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays NaN (quieted) rather than rounding up
 * into infinity. */
static inline uint16_t rlpi_f32_to_bf16(float f)
{
    uint32_t u = rlpi_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f rounded to the nearest bf16 value, as an fp32 (the operand rounding of
 * the bf16 GEMMs, RLP_MATMUL_BF16). */
static inline float rlpi_f32_round_bf16(float f)
{
    return rlpi_bf16_to_f32(rlpi_f32_to_bf16(f));
}

static inline float rlpi_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN: keep the payload */
        return rlpi_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: value = man * 2^-24, exact in fp32 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return rlpi_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t rlpi_f32_to_f16(float f)
{
    uint32_t u = rlpi_f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* result is subnormal or zero: 2^-14 > |f|. Shift the 24-bit
         * significand right and round to nearest even by hand. */
        if (a < 0x33000000u) /* < 2^-25: rounds to zero */
            return sign;
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias the exponent, round the 13 dropped bits to even */
    a += 0xc8000000u; /* exponent - 112 */
    a += 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

#endif
