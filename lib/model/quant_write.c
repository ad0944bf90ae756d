/* Quantization of fp32 to the ggml types the GGUF writer emits (F16, BF16,
 * Q8_0, Q4_0, Q4_K): the inverse of quant.c's dequantizers, written from the
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

/* Round to nearest, ties to even, for |x| < 2^22: adding 1.5·2^23 leaves
 * the integer in the low mantissa bits (ggml's nearest_int). */
static int nearest_int(float x)
{
    float v = x + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* One 32-element Q4_K sub-block: the (scale, min) with x ≈ scale·L − min,
 * L in 0..nmax, minimising the weighted squared error, searched as ggml's
 * make_qkx2_quants does (the min/max start, then nstep + 1 trial inverse
 * scales (nmax + rmin + rdelta·is) / (max − min), each refined by weighted
 * least squares). Returns the scale; *neg_min receives −min (≥ 0). */
static float qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, uint8_t *Laux,
                  float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        best += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur += w[i] * (diff * diff);
            }
            if (cur < best) {
                memcpy(L, Laux, (size_t)n);
                best = cur;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

/* Q4_K block of 256: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}, eight
 * sub-blocks of 32 with 6-bit (scale, min) pairs packed as quant.c's
 * k_scale_min reads them; y = d·sc·q − dmin·m (ggml's quantize_row_q4_K_ref,
 * without an importance matrix: weights av|x| + |x_i|). */
static void q4_k_block(const float *x, uint8_t *b)
{
    uint8_t L[256], Laux[32];
    float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = qkx2(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t *sc = b + 4;
    memset(sc, 0, 12);
    for (int j = 0; j < 8; j++) {
        int ls = nearest_int(inv_scale * scales[j]), lm = nearest_int(inv_min * mins[j]);
        ls = ls > 63 ? 63 : ls;
        lm = lm > 63 ? 63 : lm;
        if (j < 4) {
            sc[j] = (uint8_t)ls;
            sc[j + 4] = (uint8_t)lm;
        } else {
            sc[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sc[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    uint16_t dh = rlpi_fp32_to_fp16(max_scale / 63.0f), mh = rlpi_fp32_to_fp16(max_min / 63.0f);
    wr16(b, dh);
    wr16(b + 2, mh);
    float d16 = rlpi_fp16_to_fp32(dh), m16 = rlpi_fp16_to_fp32(mh);
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        if (j < 4) {
            s = sc[j] & 63;
            m = sc[j + 4] & 63;
        } else {
            s = (uint8_t)((sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4));
            m = (uint8_t)((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
        }
        float d = d16 * (float)s;
        if (d == 0.0f)
            continue;
        float dm = m16 * (float)m;
        for (int i = 0; i < 32; i++) {
            int l = nearest_int((x[32 * j + i] + dm) / d);
            L[32 * j + i] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
        }
    }
    uint8_t *q = b + 16;
    for (int j = 0; j < 256; j += 64, q += 32)
        for (int l = 0; l < 32; l++)
            q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

bool rlpi_quantize_supported(uint32_t type)
{
    return type == RLPI_GGML_F32 || type == RLPI_GGML_F16 || type == RLPI_GGML_BF16 || type == RLPI_GGML_Q8_0 ||
           type == RLPI_GGML_Q4_0 || type == RLPI_GGML_Q4_K;
}

int rlpi_quantize(uint32_t type, const float *src, size_t n, void *dst, size_t dst_bytes)
{
    const rlpi_ggml_type_info *ti = rlpi_ggml_type(type);
    if (!ti || !rlpi_quantize_supported(type))
        return rlpi_error_set(RLP_E_UNSUPPORTED, "quantize: type %s (%u) cannot be written (F32, F16, BF16, Q8_0, Q4_0, Q4_K)",
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
    case RLPI_GGML_Q4_K:
        for (size_t i = 0; i < n / 256; i++)
            q4_k_block(src + 256 * i, d + 144 * i);
        break;
    }
    return RLP_OK;
}
