/**
 * @file rlpost/context.h
 * @brief librlpost: backends and the execution context (rlp_context).
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_CONTEXT_H
#define RLPOST_CONTEXT_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Backends                                                                 */
/* ------------------------------------------------------------------------ */

/** Compute backends. Values are fixed and only grow. */
typedef enum rlp_backend_kind {
    RLP_BACKEND_CPU = 0,  /**< OpenBLAS GEMMs and a thread pool; always built */
    RLP_BACKEND_CUDA = 1  /**< cuBLAS, own kernels and NCCL; built with -Dcuda */
} rlp_backend_kind;

/** Number of backend kinds (one past the largest valid rlp_backend_kind). */
#define RLP_BACKEND_COUNT 2

/**
 * Whether a backend can be used on this machine right now.
 *
 * For RLP_BACKEND_CUDA this checks that the library was built with CUDA,
 * that the CUDA backend module and its runtime libraries load, and that at
 * least one GPU is visible; the reason it is not is in rlp_error_last().
 * Never fails to load or crashes on a machine without a GPU.
 *
 * @param kind  an rlp_backend_kind
 * @return 1 if available, 0 if not (reason in rlp_error_last()),
 *         RLP_E_INVALID_ARG if @p kind is not a backend kind.
 * Thread-safe.
 */
RLP_API int rlp_backend_available(int kind);

/** Static name of a backend kind ("cpu", "cuda"), or NULL for a bad kind.
 *  Thread-safe. */
RLP_API const char *rlp_backend_name(int kind);

/**
 * Number of devices of a backend kind visible here: 1 for the CPU, the GPU
 * count for CUDA (0 where none or not built).
 *
 * @param[out] out_count  receives the count
 * @param kind            an rlp_backend_kind
 * @return RLP_OK, or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_backend_device_count(int *out_count, int kind);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * Number format of the matrix products (GEMMs) of a context: every
 * projection, the logits and their backward products. Everything else stays
 * fp32 in every mode: weights (which are the fp32 master weights),
 * activations between ops, gradients, AdamW moments, norms, softmax,
 * attention and the logprob head. Values are fixed and only grow.
 *
 * Mixed precision in the sense of Micikevicius et al., "Mixed Precision
 * Training", ICLR 2018 (fp32 master weights, low-precision operands, fp32
 * accumulation), with bfloat16 operands as in Kalamkar et al., "A Study of
 * BFLOAT16 for Deep Learning Training", arXiv:1905.12322 (2019): bf16 keeps
 * fp32's exponent range, so no loss scaling is needed.
 *
 * Expected deviation from fp32 (docs/cuda.md has the measured table): each
 * operand is rounded to nearest even at a relative error of at most 2^-8
 * (bf16: 8 significant bits) or 2^-11 (TF32: 11), so an element of a
 * product can move by up to 2^-7·Σ|a·b| (bf16) or 2^-10·Σ|a·b| (TF32);
 * random rounding errors mostly cancel, and on the tests' tiny models
 * logprobs move by up to about 6e-3 nats in bf16.
 */
typedef enum rlp_matmul_precision {
    /** fp32 operands, fp32 products and sums (the default; cuBLAS in its
     *  default math mode, no TF32). The same bits as before this option. */
    RLP_MATMUL_FP32 = 0,
    /** CUDA: fp32 operands that tensor cores may round to TF32 (10-bit
     *  mantissa), fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32). The CPU
     *  backend has no TF32 and runs such a context in fp32 (a permission,
     *  not a demand, like PyTorch's set_float32_matmul_precision("high")). */
    RLP_MATMUL_TF32 = 1,
    /** Both operands rounded to bfloat16 (round to nearest even; NaN and
     *  ±Inf kept), products accumulated in fp32, the output written in fp32.
     *  CUDA: a conversion kernel, then cublasGemmStridedBatchedEx on tensor
     *  cores. CPU with AMX-BF16 or AVX512-BF16 and a build with oneDNN
     *  (libdnnl): the operands are rounded the same way into bf16 copies
     *  and multiplied by oneDNN's bf16 matmul (fp32 accumulation), about
     *  2.5–4.5× the fp32 GEMM rate (docs/PERFORMANCE.md); bf16 subnormal
     *  operands count as zero there (the instructions' DAZ). Elsewhere
     *  (or with RLPOST_CPU_BF16=0 in the environment) an emulation: the
     *  same rounding, then the fp32 GEMM, slightly slower than fp32. bf16 ×
     *  bf16 products are exact in fp32, so all of these differ only by
     *  summation order; rlp_context_device_name() says which runs. On the
     *  CPU a local rollout engine's products of few rows (decode steps of
     *  small batches) run in fp32 instead: rounding the whole weight
     *  operand every token would cost more than the product; its prefill
     *  and larger batches stay bf16, rounded as the trainer's GEMMs are. */
    RLP_MATMUL_BF16 = 2,
    /** RLP_MATMUL_BF16 where it is fast, RLP_MATMUL_FP32 elsewhere, chosen
     *  once at rlp_context_create(): bf16 on a CPU context whose bf16 GEMMs
     *  run on the CPU's own instructions (oneDNN with AMX-BF16 or
     *  AVX512-BF16; not with RLPOST_CPU_BF16=0), fp32 on CPUs without them
     *  (the emulation is slower than fp32) and, for now, on CUDA (bf16 and
     *  TF32 stay explicit choices there until measured on a GPU).
     *  rlp_context_matmul_precision() reads the choice. */
    RLP_MATMUL_AUTO = 3
} rlp_matmul_precision;

/** Version of rlp_context_options understood by this header (2 added
 *  matmul_precision; version-1 structs are still accepted and get fp32). */
#define RLP_CONTEXT_OPTIONS_VERSION 2

/** Options for rlp_context_create(). Initialise with
 *  RLP_CONTEXT_OPTIONS_INIT or rlp_context_options_init(). */
typedef struct rlp_context_options {
    uint32_t version;     /**< RLP_CONTEXT_OPTIONS_VERSION */
    int32_t backend;      /**< an rlp_backend_kind; default RLP_BACKEND_CPU */
    int32_t device;       /**< device index for CUDA (0-based); must be 0 for the CPU */
    int32_t n_threads;    /**< CPU threads of the backend's pool, which runs the GEMM tiles and every kernel; 0 = one per online core */
    uint64_t seed;        /**< seed of the context's random streams; default 0x5eed */
    rlp_log_fn log_fn;    /**< log sink; NULL = write to stderr */
    void *log_payload;    /**< passed to @ref log_fn */
    int32_t log_level;    /**< an rlp_log_level threshold; default RLP_LOG_WARN */
    int32_t matmul_precision; /**< (version ≥ 2) an rlp_matmul_precision for every GEMM run on
                                   the context, by training and by the rollout engine alike;
                                   default RLP_MATMUL_FP32 */
} rlp_context_options;

/** Static initialiser with the defaults documented in rlp_context_options. */
#define RLP_CONTEXT_OPTIONS_INIT \
    { RLP_CONTEXT_OPTIONS_VERSION, RLP_BACKEND_CPU, 0, 0, UINT64_C(0x5eed), NULL, NULL, RLP_LOG_WARN, RLP_MATMUL_FP32 }

/**
 * Fills @p opts with the defaults (same as RLP_CONTEXT_OPTIONS_INIT).
 *
 * @param[out] opts     options to initialise
 * @param version       RLP_CONTEXT_OPTIONS_VERSION
 * @return RLP_OK, or RLP_E_INVALID_ARG for NULL or an unknown version.
 */
RLP_API int rlp_context_options_init(rlp_context_options *opts, uint32_t version);

/**
 * Creates an execution context: the backend every handle made from it runs
 * on, its thread pool, its random seed and its log sink.
 *
 * Asking for RLP_BACKEND_CUDA on a machine without a GPU (or in a build
 * without CUDA) fails with RLP_E_BACKEND and a message saying why; it never
 * crashes and never makes the library fail to load.
 *
 * @param[out] out  receives the new context; free with rlp_context_free()
 * @param opts      options, or NULL for the defaults
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL @p out, unknown options version,
 *         bad backend/device/thread count/log level/matmul precision);
 *         RLP_E_BACKEND; RLP_E_NOMEM. A context whose matmul_precision is
 *         not fp32 says so at the end of rlp_context_device_name().
 * Thread-safe (creating contexts concurrently is fine). A CPU context does
 * its own threading: it splits every product over its n_threads pool and
 * calls OpenBLAS on one thread, so creating one sets OpenBLAS's process-wide
 * thread count to 1 (openblas_set_num_threads(1)). A host that uses OpenBLAS
 * itself and wants it threaded should set the count back around its own
 * calls. (With both OpenBLAS's threads and ours alive, each spun while the
 * other worked: a train step was 1.3–1.5× slower on 2 cores.)
 */
RLP_API int rlp_context_create(rlp_context **out, const rlp_context_options *opts);

/** Frees a context. Every handle created from it must be freed first.
 *  NULL is a no-op. */
RLP_API void rlp_context_free(rlp_context *ctx);

/**
 * Reads the backend a context runs on.
 * @param[out] out_kind  receives an rlp_backend_kind
 * @param ctx            the context
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_backend(int *out_kind, const rlp_context *ctx);

/**
 * Reads the number of CPU threads a context uses (after resolving 0 to the
 * core count).
 * @param[out] out_threads  receives the count (≥ 1)
 * @param ctx               the context
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_n_threads(int *out_threads, const rlp_context *ctx);

/**
 * Reads a context's seed.
 * @param[out] out_seed  receives the seed given at creation
 * @param ctx            the context
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_seed(uint64_t *out_seed, const rlp_context *ctx);

/**
 * Reads the precision a context's GEMMs run in: RLP_MATMUL_FP32,
 * RLP_MATMUL_TF32 or RLP_MATMUL_BF16, never RLP_MATMUL_AUTO (resolved at
 * creation), and fp32 for a TF32 request on the CPU (which has no TF32).
 * @param[out] out_precision  receives an rlp_matmul_precision
 * @param ctx                 the context
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_matmul_precision(int *out_precision, const rlp_context *ctx);

/**
 * A short description of the context's device, e.g.
 * "cpu: 2 threads, OpenBLAS 0.3.21" or "cuda:0 NVIDIA H200 (sm_90, 139 GiB)".
 * @param ctx  the context
 * @return a string owned by the context, valid until it is freed; NULL (with
 *         rlp_error_last() set) for a NULL context.
 * Thread-safe.
 */
RLP_API const char *rlp_context_device_name(const rlp_context *ctx);

/**
 * Changes the log threshold of a context.
 * @param ctx    the context
 * @param level  an rlp_log_level
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_set_log_level(rlp_context *ctx, int level);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_CONTEXT_H */
