/* Real bf16 GEMMs of the CPU backend (RLP_MATMUL_BF16): fp32 operands rounded
 * to bf16 (RNE, exactly as rlpi_f32_round_bf16) and multiplied with fp32
 * accumulation by oneDNN's matmul primitive (AMX-BF16 or AVX512-BF16
 * kernels), tiled over the backend's pool. Only used where the CPU has the
 * instructions and the library was found at build time; cpu.c otherwise keeps
 * the emulation (rounded operands, then SGEMM). Must not decide precision
 * policy: that is the context's. */
#ifndef RLPI_BACKEND_CPU_BF16_H
#define RLPI_BACKEND_CPU_BF16_H

#include "backend/backend.h"
#include "core/threadpool.h"

/* 1 when rlpi_cpu_bf16_gemm can run here: built with oneDNN (RLPI_HAVE_DNNL),
 * the CPU has AVX512-BF16 or AMX-BF16 (with AVX512F/BW for the conversion),
 * the environment does not say RLPOST_CPU_BF16=0, and no test forced the
 * fallback. Thread-safe; the first call initialises oneDNN. */
int rlpi_cpu_bf16_available(void);

/* A short name of the path that RLP_MATMUL_BF16 takes on this CPU, for the
 * device description: "oneDNN" or "emulated". Static string. */
const char *rlpi_cpu_bf16_path(void);

/* Tests only: force (1) or stop forcing (0) the emulated fallback, so both
 * paths run on a machine that has the instructions. Process-wide. */
void rlpi_cpu_bf16_force_fallback(int on);

/* dst[i] = bf16(src[i]) (RNE as rlpi_f32_to_bf16), the operand conversion
 * of rlpi_cpu_bf16_gemm, on the calling thread; for benchmarks that weigh
 * its cost. Scalar where rlpi_cpu_bf16_available() is 0. */
void rlpi_cpu_bf16_convert(uint16_t *dst, const float *src, int64_t n);

/* dst[i] = src[i] rounded to bf16 and widened back to fp32 (exactly
 * rlpi_f32_round_bf16), 16 lanes at a time where the CPU has AVX512F/BW.
 * dst may equal src. For the few-row products of cpu.c, which round their
 * B operand chunk by chunk in cache. */
void rlpi_cpu_round_bf16_row(float *dst, const float *src, int64_t n);

/* C[b] = alpha·op(A[b])·op(B[b]) + beta·C[b] (the rlpi_gemm contract,
 * validated by rlpi_gemm_f32; k ≥ 1) with A and B rounded to bf16 and the
 * products summed in fp32. The pool splits C into tiles as gemm_fp32 does.
 * Returns RLP_OK; RLP_E_UNSUPPORTED when not available or oneDNN has no
 * kernel for the shape (C untouched: the caller falls back); RLP_E_NOMEM;
 * RLP_E_BACKEND when oneDNN fails while executing (C may be partly written). */
int rlpi_cpu_bf16_gemm(rlpi_threadpool *pool, const rlpi_gemm *g);

#endif
