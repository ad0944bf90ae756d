/* Quantized weight matrices for inference (the rollout copy of a policy's
 * linear weights) and their products with fp32 activations on the CPU.
 *
 * Format RLPI_QMAT_Q8_0: a row-major (n, k) matrix W quantized as GGUF's
 * Q8_0 (blocks of 32 weights along k, each q_i = round(w_i / d) in
 * [-127, 127] with d = max|w| / 127 stored as fp16), held in a split
 * layout that the int8 kernels read with full-width loads:
 *   kp = k rounded up to 64 (zero weights pad each row), kb = kp / 32;
 *   bytes [0, n·kp): the quants of row j at j·kp, as unsigned offset binary
 *       (q + 128), so that VNNI's unsigned × signed dot product takes them
 *       directly;
 *   then n·kb floats: the block scales d of row j at j·kb, each the fp16
 *       value of the GGUF block widened exactly to fp32.
 * Dequantized, the matrix equals GGUF's Q8_0 of the same rows element for
 * element (rlpi_dequantize of the blocks the caller packed).
 *
 * The product C (m, n) = A (m, k) · Wᵀ quantizes each row of A per block
 * of 32 to int8 the same way (d_a = max|a| / 127, fp32 scale, q = round(a /
 * d_a)), forms each block's dot product exactly in int32 and accumulates
 * Σ_blocks d_w·d_a·Σ q_w q_a in fp32 (as llama.cpp's q8_0 × q8_0 dot
 * products do). Error against the exact product with the dequantized W:
 * |ΔC_ij| ≤ Σ_b (max_b|a_i| / 254) · Σ_{l in b} |W_jl| (activation
 * rounding, ≤ half a step per element) plus fp32 summation rounding.
 *
 * (Below rlpi_qmat_gemm_min_rows() rows; from there on see that function.)
 *
 * Format RLPI_QMAT_Q4_0: GGUF's Q4_0 (blocks of 32 weights, q_i in
 * [-8, 7] stored as the nibble q + 8, w = d·q, fp16 d; d = m / -8 for
 * the block's value m of largest magnitude), in the same split layout
 * with half the quant bytes:
 *   bytes [0, n·kp/2): row j at j·kp/2; the 64 weights of block pair p
 *       (elements 64p .. 64p+63) are the 32 bytes at p·32, element 64p+x
 *       in the low nibble of byte x and element 64p+32+x in its high
 *       nibble (x < 32), so one 32-byte load and two masks give the 64
 *       weights in order;
 *   then the n·kb fp32 block scales, as for Q8_0.
 * Products quantize the activations exactly as for Q8_0 and form the same
 * integer block sums (Σ q_w q_a, exact in int32) and the same fp32
 * operations, so the error bound above holds with Q4_0's W; the kernels
 * agree bit for bit here too. 4.5 bits a weight against Q8_0's 8.5: the
 * rollout copy's bytes, which batch-1 decode streams once per token.
 *
 * Kernels: AVX512-VNNI (vpdpbusd), AVX2 (vpmaddubsw on |q_w| and the
 * activations with q_w's sign, then vpmaddwd; llama.cpp's AVX2 dot product
 * does the same: the int16 pair sums stay below 2·128·127 < 2^15, so
 * nothing saturates) and a portable scalar one; all three perform the same
 * integer sums and the same fp32 operations in the same order, so they give
 * bit-identical C. A kernel runs only where the CPU has its instructions
 * (AVX512F/BW/VL/VNNI; AVX2; checked at run time); RLPOST_CPU_FEATURES (a
 * list of feature names the library may use, e.g. "none", "avx2" or
 * "avx2,avx512vnni") or rlpi_qmat_force_isa() restrict it, so tests run
 * every kernel the machine has. */
#ifndef RLPI_BACKEND_QMAT_H
#define RLPI_BACKEND_QMAT_H

#include <stddef.h>
#include <stdint.h>

struct rlpi_threadpool;

enum { RLPI_QMAT_Q8_0 = 1, RLPI_QMAT_Q4_0 = 2 };

/* From this many activation rows on (prefill, larger decode batches) a
 * product dequantizes tiles of W to fp32 and runs OpenBLAS's SGEMM on the
 * unquantized activations instead of the int8 kernels: in the compute-bound
 * regime SGEMM's 8–16 fp32 MACs per instruction beat the int8 kernels' per-
 * block work. The weights are the same Q8_0 values; only the activations'
 * rounding goes away. The switch depends on the kernel (quiet 2-thread
 * decode of SmolLM2-135M, int8 against fp32, docs/PERFORMANCE.md): VNNI
 * wins up to about 16–24 rows (b16 1.15×, b32 0.84× on a Xeon), AVX2 up to
 * about 8 (b8 1.22×, b16 0.85× on an EPYC Zen 3); the scalar kernel never
 * wins against the fp32 path (it exists for bit-exact checks and CPUs
 * without either). The rollout engine's KV-cached decode asks
 * rlpi_qmat_gemm_min_rows() and takes its fp32 weights from there on,
 * which skips the dequantization too. */
#define RLPI_QMAT_GEMM_MIN_ROWS_VNNI512 24
#define RLPI_QMAT_GEMM_MIN_ROWS_AVX2 12
#define RLPI_QMAT_GEMM_MIN_ROWS_SCALAR 2

/* Kernel families of the dispatch. */
enum { RLPI_QMAT_ISA_AUTO = -1, RLPI_QMAT_ISA_SCALAR = 0, RLPI_QMAT_ISA_AVX2 = 1, RLPI_QMAT_ISA_VNNI512 = 2 };

/* The family's name for logs ("scalar", "AVX2", "AVX512-VNNI"). */
const char *rlpi_qmat_isa_name(int isa);

/* k rounded up to the layout's 64 and the blocks per row. */
static inline int64_t rlpi_qmat_kpad(int64_t k)
{
    return (k + 63) / 64 * 64;
}

/* Bytes of an (n, k) matrix in `type`'s layout; 0 for an unknown type or
 * n, k < 1. */
size_t rlpi_qmat_bytes(int type, int64_t n, int64_t k);

/* Bytes of one row's quants (kp for Q8_0, kp / 2 for Q4_0; 0 for an
 * unknown type); the scales follow all n rows. */
size_t rlpi_qmat_row_bytes(int type, int64_t k);

/* Q4_0's nibble of element x (0..63) of a block pair whose 32 bytes start
 * at pq (the layout above: low nibbles x < 32, high nibbles x ≥ 32); the
 * value is the nibble − 8. */
static inline unsigned rlpi_qmat_q4_get(const uint8_t *pq, int x)
{
    return x < 32 ? pq[x] & 0x0fu : (unsigned)pq[x - 32] >> 4;
}

/* Writes nibble u (0..15) of element x of that pair, keeping the other. */
static inline void rlpi_qmat_q4_set(uint8_t *pq, int x, unsigned u)
{
    if (x < 32)
        pq[x] = (uint8_t)((pq[x] & 0xf0u) | u);
    else
        pq[x - 32] = (uint8_t)((pq[x - 32] & 0x0fu) | u << 4);
}

/* Writes rows [row0, row0 + rows) of the (n, k) Q8_0 matrix at dst (of
 * rlpi_qmat_bytes(RLPI_QMAT_Q8_0, n, k) bytes) from `blocks`: those rows
 * as GGUF Q8_0 blocks (34 bytes: fp16 d, 32 int8), ⌈k/32⌉ blocks per row
 * (a row whose k is not a multiple of 32 quantized with zeros after k).
 * Thread-safe for disjoint row ranges. */
void rlpi_qmat_pack_q8_0(void *dst, int64_t n, int64_t k, int64_t row0, int64_t rows, const void *blocks);

/* The same for an RLPI_QMAT_Q4_0 matrix from GGUF Q4_0 blocks (18 bytes:
 * fp16 d, 16 bytes whose low nibbles are elements 0..15 and high nibbles
 * 16..31). Thread-safe for disjoint row ranges. */
void rlpi_qmat_pack_q4_0(void *dst, int64_t n, int64_t k, int64_t row0, int64_t rows, const void *blocks);

/* Moves the row count from which products take the GEMM route
 * (benchmarks, tests; 0 restores the kernel's own switch). Not thread-safe
 * with concurrent products. */
void rlpi_qmat_set_gemm_min_rows(int64_t rows);

/* The row count from which products take the GEMM route now: the value
 * set above, else RLPI_QMAT_GEMM_MIN_ROWS_* of the kernel family in use. */
int64_t rlpi_qmat_gemm_min_rows(void);

/* The kernel family products use now (after RLPOST_CPU_FEATURES, any
 * forcing, and the CPU's features). */
int rlpi_qmat_isa(void);

/* Forces a kernel family for later products (tests): RLPI_QMAT_ISA_SCALAR,
 * RLPI_QMAT_ISA_AVX2, RLPI_QMAT_ISA_VNNI512 (where the CPU lacks it, the
 * best family below it runs), or
 * RLPI_QMAT_ISA_AUTO to go back to the CPU's best. Not thread-safe with
 * concurrent products. */
void rlpi_qmat_force_isa(int isa);

/* C (m, n) = A (m, k) · Wᵀ, or C += A · Wᵀ when beta = 1 (beta 0: C is
 * not read); A, C row-major fp32 with row strides k and n; W in `type`'s
 * layout. Split over the pool's threads by output columns (rows of W)
 * and activation rows blocks, each weight row read once per block of 32
 * activation rows. RLP_OK, RLP_E_NOMEM (activation scratch),
 * RLP_E_INVALID_ARG (type). */
int rlpi_cpu_qmatmul(struct rlpi_threadpool *pool, float *c, const float *a, const void *w, int type, int64_t m,
                     int64_t n, int64_t k, float beta);

#endif
