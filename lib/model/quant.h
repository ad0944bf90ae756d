/* ggml tensor types: their block sizes (what the GGUF reader needs to bound
 * a tensor's bytes) and dequantization of the supported ones to fp32.
 * Pure functions over caller-provided buffers: no allocation, no I/O, and no
 * knowledge of files or tensor names (the caller names the tensor in errors). */
#ifndef RLPI_MODEL_QUANT_H
#define RLPI_MODEL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ggml_type ids as stored in GGUF tensor infos (fixed by the format). */
enum {
    RLPI_GGML_F32 = 0,
    RLPI_GGML_F16 = 1,
    RLPI_GGML_Q4_0 = 2,
    RLPI_GGML_Q4_1 = 3,
    RLPI_GGML_Q5_0 = 6,
    RLPI_GGML_Q5_1 = 7,
    RLPI_GGML_Q8_0 = 8,
    RLPI_GGML_Q8_1 = 9,
    RLPI_GGML_Q2_K = 10,
    RLPI_GGML_Q3_K = 11,
    RLPI_GGML_Q4_K = 12,
    RLPI_GGML_Q5_K = 13,
    RLPI_GGML_Q6_K = 14,
    RLPI_GGML_Q8_K = 15,
    RLPI_GGML_BF16 = 30,
};

typedef struct rlpi_ggml_type_info {
    const char *name;    /* "Q4_K" */
    uint32_t blck;       /* elements per block (1 for plain types) */
    uint32_t type_size;  /* bytes per block */
    bool dequant;        /* rlpi_dequantize() supports it */
} rlpi_ggml_type_info;

/* Block geometry of a ggml type id; NULL for an id this library does not know
 * (the GGUF reader rejects such files: it cannot bound their tensors). */
const rlpi_ggml_type_info *rlpi_ggml_type(uint32_t type);

/* IEEE binary16 and bfloat16 to fp32, exact (subnormals, inf, NaN kept). */
float rlpi_fp16_to_fp32(uint16_t h);
float rlpi_bf16_to_fp32(uint16_t h);

/* Dequantizes `n` elements (a multiple of the type's block size) from `src`,
 * which must hold exactly n / blck * type_size bytes (`src_bytes`), into
 * dst[n]. `src` needs no alignment. Returns RLP_OK, RLP_E_UNSUPPORTED for a
 * type without a dequantizer, RLP_E_INVALID_ARG when n or src_bytes do not
 * match the type's geometry. Thread-safe; callers may split a tensor by
 * blocks across threads. */
int rlpi_dequantize(uint32_t type, const void *src, size_t src_bytes, float *dst, size_t n);

/* ---- the other direction (quant_write.c) ---- */

/* fp32 to IEEE binary16, round to nearest even (overflow to ±inf,
 * subnormals kept, NaN stays NaN), and to bfloat16 the way ggml does
 * (round to nearest even on the top 16 bits; NaN made quiet). */
uint16_t rlpi_fp32_to_fp16(float f);
uint16_t rlpi_fp32_to_bf16(float f);

/* True when rlpi_quantize() can write `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_K. */
bool rlpi_quantize_supported(uint32_t type);

/* Quantizes src[n] (n a multiple of the type's block size) into dst, which
 * must hold exactly n / blck * type_size bytes (`dst_bytes`). Block
 * formulas follow ggml's reference quantizers (quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref in ggml-quants.c), so the bytes equal gguf-py's
 * gguf.quants.quantize and llama.cpp's for the same input:
 *   Q8_0: d = max|x| / 127, q = round(x / d)            (32 per block)
 *   Q4_0: m = the x of largest |x| (sign kept), d = m / -8,
 *         q = min(15, trunc(x / d + 8.5))               (32 per block)
 *   Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins found by ggml's
 *         make_qkx2_quants search (quantize_row_q4_K_ref)  (256 per block)
 * Non-finite input gives non-finite scales; callers check weights first.
 * RLP_OK, RLP_E_UNSUPPORTED (type), RLP_E_INVALID_ARG (geometry).
 * Thread-safe, no allocation. */
int rlpi_quantize(uint32_t type, const float *src, size_t n, void *dst, size_t dst_bytes);

#endif
