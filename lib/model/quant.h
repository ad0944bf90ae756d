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

#endif
