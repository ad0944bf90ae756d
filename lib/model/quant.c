/* Dequantization of ggml block formats to fp32, written from the block
 * layouts (ggml-common.h) and checked against gguf-py's numpy dequantizer
 * (tests/reference). Reads bytes with memcpy/shifts so that unaligned
 * mmap'd input and big blocks never trip UBSan; must not allocate. */
#include "model/quant.h"

#include "core/error.h"

#include <string.h>

/* Results must equal gguf-py's bit for bit (tests/reference): every value is
 * one or two IEEE fp32 roundings in a fixed order, so a fused multiply-add
 * would change them. GCC does not contract in ISO C mode (-std=c11); clang
 * needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256

/* Geometry of every type gguf-py 0.19 knows, so that any tensor in a valid
 * file can be bounds-checked even when we cannot dequantize it. Q8_1 is an
 * in-memory type; its size here follows gguf-py. */
static const rlpi_ggml_type_info type_table[] = {
    [0] = {"F32", 1, 4, true},        [1] = {"F16", 1, 2, true},
    [2] = {"Q4_0", 32, 18, true},     [3] = {"Q4_1", 32, 20, true},
    [6] = {"Q5_0", 32, 22, true},     [7] = {"Q5_1", 32, 24, true},
    [8] = {"Q8_0", 32, 34, true},     [9] = {"Q8_1", 32, 40, false},
    [10] = {"Q2_K", 256, 84, false},  [11] = {"Q3_K", 256, 110, false},
    [12] = {"Q4_K", 256, 144, true},  [13] = {"Q5_K", 256, 176, true},
    [14] = {"Q6_K", 256, 210, true},  [15] = {"Q8_K", 256, 292, false},
    [16] = {"IQ2_XXS", 256, 66, false}, [17] = {"IQ2_XS", 256, 74, false},
    [18] = {"IQ3_XXS", 256, 98, false}, [19] = {"IQ1_S", 256, 50, false},
    [20] = {"IQ4_NL", 32, 18, false}, [21] = {"IQ3_S", 256, 110, false},
    [22] = {"IQ2_S", 256, 82, false}, [23] = {"IQ4_XS", 256, 136, false},
    [24] = {"I8", 1, 1, false},       [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},      [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},      [29] = {"IQ1_M", 256, 56, false},
    [30] = {"BF16", 1, 2, true},      [34] = {"TQ1_0", 256, 54, false},
    [35] = {"TQ2_0", 256, 66, false}, [39] = {"MXFP4", 32, 17, false},
};

const rlpi_ggml_type_info *rlpi_ggml_type(uint32_t type)
{
    if (type >= sizeof type_table / sizeof type_table[0] || !type_table[type].name)
        return NULL;
    return &type_table[type];
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float rlpi_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN: keep the payload */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign);
        /* subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

float rlpi_bf16_to_fp32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline float rdh(const uint8_t *p)
{
    return rlpi_fp16_to_fp32(rd16(p));
}

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q4_0: {f16 d; u8 qs[16]}; low nibbles are elements 0..15, high 16..31. */
static void deq_q4_0(const uint8_t *b, float *y)
{
    float d = rdh(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 0x0f) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

/* Q4_1: {f16 d; f16 m; u8 qs[16]}; y = d*q + m. */
static void deq_q4_1(const uint8_t *b, float *y)
{
    float d = rdh(b), m = rdh(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0x0f) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

/* Q5_0: {f16 d; u8 qh[4] (bit j = 5th bit of element j); u8 qs[16]}. */
static void deq_q5_0(const uint8_t *b, float *y)
{
    float d = rdh(b);
    uint32_t qh = rd32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int x0 = (int)((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - 16;
        int x1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
        y[j] = d * (float)x0;
        y[j + 16] = d * (float)x1;
    }
}

/* Q5_1: {f16 d; f16 m; u8 qh[4]; u8 qs[16]}; unsigned 5-bit, y = d*q + m. */
static void deq_q5_1(const uint8_t *b, float *y)
{
    float d = rdh(b), m = rdh(b + 2);
    uint32_t qh = rd32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        unsigned x0 = (qs[j] & 0x0fu) | (((qh >> j) & 1u) << 4);
        unsigned x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * (float)x0 + m;
        y[j + 16] = d * (float)x1 + m;
    }
}

/* Q8_0: {f16 d; i8 qs[32]}. */
static void deq_q8_0(const uint8_t *b, float *y)
{
    float d = rdh(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

/* The 12 scale bytes of Q4_K/Q5_K pack eight 6-bit (scale, min) pairs: pairs
 * 0..3 in the low 6 bits of bytes 0..3 / 4..7, pairs 4..7 split between the
 * nibbles of bytes 8..11 and the top 2 bits of bytes 0..7. */
static void k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}; 8 sub-blocks of 32,
 * each 32 bytes of qs giving the low nibbles to one sub-block and the high
 * nibbles to the next; y = (d*sc)*q - (dmin*m). */
static void deq_q4_k(const uint8_t *b, float *y)
{
    float d = rdh(b), dmin = rdh(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
        uint8_t sc, m;
        k_scale_min(is, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        k_scale_min(is + 1, scales, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            y[l] = d1 * (float)(q[l] & 0x0f) - m1;
            y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}; as Q4_K with
 * bit (2*pair, 2*pair+1) of qh[l] adding 16 to the two sub-blocks' element l. */
static void deq_q5_k(const uint8_t *b, float *y)
{
    float d = rdh(b), dmin = rdh(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *q = b + 48;
    unsigned u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, q += 32, y += 64, u1 <<= 2, u2 <<= 2) {
        uint8_t sc, m;
        k_scale_min(is, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        k_scale_min(is + 1, scales, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            y[l] = d1 * (float)((q[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
            y[l + 32] = d2 * (float)((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}; two halves of 128,
 * each element = 4 low bits from ql + 2 high bits from qh, minus 32;
 * y = (d*scale)*q with one scale per 16 elements. */
static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = rdh(b + 208);
    for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0x0f) | ((qh[l] & 3u) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3u) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3u) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3u) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

typedef void (*block_fn)(const uint8_t *, float *);

int rlpi_dequantize(uint32_t type, const void *src, size_t src_bytes, float *dst, size_t n)
{
    const rlpi_ggml_type_info *ti = rlpi_ggml_type(type);
    if (!ti || !ti->dequant)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "dequantize: type %s (%u) is not supported",
                              ti ? ti->name : "unknown", type);
    if (n % ti->blck != 0 || n / ti->blck > SIZE_MAX / ti->type_size ||
        n / ti->blck * ti->type_size != src_bytes || (n && (!src || !dst)))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "dequantize: %zu %s elements do not fill %zu bytes", n, ti->name, src_bytes);
    const uint8_t *s = src;
    switch (type) {
    case RLPI_GGML_F32:
        if (n)
            memcpy(dst, s, n * sizeof(float));
        return RLP_OK;
    case RLPI_GGML_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = rlpi_fp16_to_fp32(rd16(s + 2 * i));
        return RLP_OK;
    case RLPI_GGML_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = rlpi_bf16_to_fp32(rd16(s + 2 * i));
        return RLP_OK;
    default:
        break;
    }
    block_fn fn = NULL;
    switch (type) {
    case RLPI_GGML_Q4_0: fn = deq_q4_0; break;
    case RLPI_GGML_Q4_1: fn = deq_q4_1; break;
    case RLPI_GGML_Q5_0: fn = deq_q5_0; break;
    case RLPI_GGML_Q5_1: fn = deq_q5_1; break;
    case RLPI_GGML_Q8_0: fn = deq_q8_0; break;
    case RLPI_GGML_Q4_K: fn = deq_q4_k; break;
    case RLPI_GGML_Q5_K: fn = deq_q5_k; break;
    case RLPI_GGML_Q6_K: fn = deq_q6_k; break;
    default:
        return rlpi_error_set(RLP_E_INTERNAL, "dequantize: no kernel for %s", ti->name);
    }
    size_t nb = n / ti->blck;
    for (size_t i = 0; i < nb; i++)
        fn(s + i * ti->type_size, dst + i * ti->blck);
    return RLP_OK;
}
