/* Quantization of fp32 to the ggml types the GGUF writer emits (F16, BF16,
 * Q8_0, Q4_0): the inverse of quant.c's dequantizers, written from the
 * block layouts and ggml's reference (non-SIMD) formulas so that the bytes
 * match what llama.cpp's own converter would write. Pure functions over
 * caller buffers: no allocation, no I/O, no tensor names. */
#include "model/quant.h"

#include "core/error.h"

#include <math.h>
#include <string.h>

/* Same reason as in quant.c: each value is a fixed sequence of fp32
 * roundings, and a fused multiply-add would change the bytes. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint16_t rlpi_fp32_to_fp16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (exp == 0xff) /* inf, or NaN kept quiet with its top payload bits */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) /* too large: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* binary16 subnormal (or zero): the value in units of 2^-24,
         * rounded to nearest even from the full 24-bit significand */
        if (e < -10)
            return sign; /* below half the smallest subnormal */
        uint32_t m = man | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q); /* q may carry into the smallest normal: still right */
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        q++; /* may carry into the exponent, up to inf: correct rounding */
    return (uint16_t)(sign | q);
}

uint16_t rlpi_fp32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one (ggml sets the quiet bit) */
        return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v & 0xffu);
    p[1] = (uint8_t)(v >> 8);
}

/* Q8_0 block: {f16 d; i8 q[32]}. */
static void q8_0_block(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        if (a > amax)
            amax = a;
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, rlpi_fp32_to_fp16(d));
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

/* Q4_0 block: {f16 d; u8 qs[16]}, element j in the low nibble of qs[j],
 * element j + 16 in the high nibble. The scale maps the value of largest
 * magnitude to -8 exactly, so the other end of the range (+8) is clipped to
 * 7: the reference's choice, kept for identical bytes. */
static void q4_0_block(const float *x, uint8_t *b)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, rlpi_fp32_to_fp16(d));
    for (int j = 0; j < 16; j++) {
        float v0 = x[j] * id + 8.5f, v1 = x[j + 16] * id + 8.5f;
        int q0 = (int)v0, q1 = (int)v1; /* truncation, as the reference's (int8_t) cast */
        q0 = q0 > 15 ? 15 : q0;
        q1 = q1 > 15 ? 15 : q1;
        b[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

bool rlpi_quantize_supported(uint32_t type)
{
    return type == RLPI_GGML_F32 || type == RLPI_GGML_F16 || type == RLPI_GGML_BF16 || type == RLPI_GGML_Q8_0 ||
           type == RLPI_GGML_Q4_0;
}

int rlpi_quantize(uint32_t type, const float *src, size_t n, void *dst, size_t dst_bytes)
{
    const rlpi_ggml_type_info *ti = rlpi_ggml_type(type);
    if (!ti || !rlpi_quantize_supported(type))
        return rlpi_error_set(RLP_E_UNSUPPORTED, "quantize: type %s (%u) cannot be written (F32, F16, BF16, Q8_0, Q4_0)",
                              ti ? ti->name : "unknown", type);
    if (n % ti->blck != 0 || n / ti->blck > SIZE_MAX / ti->type_size || n / ti->blck * ti->type_size != dst_bytes ||
        (n && (!src || !dst)))
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantize: %zu %s elements do not fill %zu bytes", n, ti->name,
                              dst_bytes);
    uint8_t *d = dst;
    switch (type) {
    case RLPI_GGML_F32:
        if (n)
            memcpy(d, src, n * sizeof(float));
        break;
    case RLPI_GGML_F16:
        for (size_t i = 0; i < n; i++)
            wr16(d + 2 * i, rlpi_fp32_to_fp16(src[i]));
        break;
    case RLPI_GGML_BF16:
        for (size_t i = 0; i < n; i++)
            wr16(d + 2 * i, rlpi_fp32_to_bf16(src[i]));
        break;
    case RLPI_GGML_Q8_0:
        for (size_t i = 0; i < n / 32; i++)
            q8_0_block(src + 32 * i, d + 34 * i);
        break;
    case RLPI_GGML_Q4_0:
        for (size_t i = 0; i < n / 32; i++)
            q4_0_block(src + 32 * i, d + 18 * i);
        break;
    }
    return RLP_OK;
}
