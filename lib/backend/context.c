/* The rlp_context handle: validates options, creates the chosen backend,
 * and keeps the seed and log sink that every handle made from it inherits.
 * Must not hold model or algorithm state. */
#include "backend/context.h"
#include "backend/cpu_bf16.h"

#include "core/error.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const rlp_context_options default_options = RLP_CONTEXT_OPTIONS_INIT;

int rlp_context_options_init(rlp_context_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_CONTEXT_OPTIONS_VERSION,
                   "version is not a known rlp_context_options version");
    /* a version-1 caller's struct may end before the fields of later
     * versions: write only the ones its version has */
    memcpy(opts, &default_options,
           version >= 2 ? sizeof *opts : offsetof(rlp_context_options, matmul_precision));
    opts->version = version;
    return RLP_OK;
}

int rlp_backend_available(int kind)
{
    if (kind == RLP_BACKEND_CPU)
        return 1;
    if (kind == RLP_BACKEND_CUDA)
        return rlpi_backend_cuda_device_count() > 0 ? 1 : 0;
    return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %d is not an rlp_backend_kind", __func__, kind);
}

const char *rlp_backend_name(int kind)
{
    switch (kind) {
    case RLP_BACKEND_CPU: return "cpu";
    case RLP_BACKEND_CUDA: return "cuda";
    default:
        rlpi_error_set(RLP_E_INVALID_ARG, "%s: %d is not an rlp_backend_kind", __func__, kind);
        return NULL;
    }
}

int rlp_backend_device_count(int *out_count, int kind)
{
    RLPI_CHECK_ARG(out_count, "out_count is NULL");
    RLPI_CHECK_ARG(kind >= 0 && kind < RLP_BACKEND_COUNT, "kind is not an rlp_backend_kind");
    *out_count = kind == RLP_BACKEND_CPU ? 1 : rlpi_backend_cuda_device_count();
    return RLP_OK;
}

static int online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

int rlp_context_create(rlp_context **out, const rlp_context_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    if (!opts)
        opts = &default_options;
    RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_CONTEXT_OPTIONS_VERSION,
                   "options->version is not a known rlp_context_options version "
                   "(initialise with RLP_CONTEXT_OPTIONS_INIT)");
    if (opts->backend < 0 || opts->backend >= RLP_BACKEND_COUNT)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: options->backend: %d is not an rlp_backend_kind",
                              __func__, (int)opts->backend);
    if (opts->device < 0 || (opts->backend == RLP_BACKEND_CPU && opts->device != 0))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: options->device: %d is not a device of the %s backend",
                              __func__, (int)opts->device, rlp_backend_name(opts->backend));
    if (opts->n_threads < 0 || opts->n_threads > 1024)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: options->n_threads: %d is outside [0, 1024]",
                              __func__, (int)opts->n_threads);
    if (opts->log_level < RLP_LOG_DEBUG || opts->log_level > RLP_LOG_NONE)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: options->log_level: %d is not an rlp_log_level",
                              __func__, (int)opts->log_level);

    int matmul = opts->version >= 2 ? opts->matmul_precision : RLP_MATMUL_FP32;
    if (matmul != RLP_MATMUL_FP32 && matmul != RLP_MATMUL_TF32 && matmul != RLP_MATMUL_BF16 &&
        matmul != RLP_MATMUL_AUTO)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: options->matmul_precision: %d is not an rlp_matmul_precision",
                              __func__, matmul);

    rlp_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    ctx->kind = opts->backend;
    ctx->device = opts->device;
    ctx->n_threads = opts->n_threads ? opts->n_threads : online_cores();
    ctx->seed = opts->seed;
    ctx->log.fn = opts->log_fn;
    ctx->log.payload = opts->log_payload;
    ctx->log.level = opts->log_level;

    int rc = opts->backend == RLP_BACKEND_CPU ? rlpi_backend_cpu_create(&ctx->backend, ctx->n_threads)
                                              : rlpi_backend_cuda_create(&ctx->backend, ctx->device);
    if (rc != RLP_OK) {
        free(ctx);
        return rlpi_error_wrap("%s: %s backend", __func__, rlp_backend_name(opts->backend));
    }
    ctx->backend->logger = &ctx->log;
    /* the CPU has no TF32: such a context runs its GEMMs in fp32 (TF32 is
     * a permission to round, not a demand), see rlp_matmul_precision */
    if (matmul == RLP_MATMUL_TF32 && ctx->kind == RLP_BACKEND_CPU)
        matmul = RLP_MATMUL_FP32;
    /* auto: bf16 only where it beats fp32, i.e. on the CPU's own bf16
     * instructions (the emulation rounds, then runs SGEMM: slower); CUDA
     * keeps fp32 until bf16/TF32 are measured on a GPU */
    if (matmul == RLP_MATMUL_AUTO)
        matmul = ctx->kind == RLP_BACKEND_CPU && rlpi_cpu_bf16_available() ? RLP_MATMUL_BF16 : RLP_MATMUL_FP32;
    ctx->backend->matmul = matmul;
    if (matmul != RLP_MATMUL_FP32) {
        size_t len = strlen(ctx->backend->description);
        /* on the CPU, say whether bf16 is real (oneDNN, AMX/AVX512-BF16) or emulated */
        snprintf(ctx->backend->description + len, sizeof ctx->backend->description - len, ", %s GEMMs%s%s%s",
                 matmul == RLP_MATMUL_BF16 ? "bf16" : "tf32",
                 matmul == RLP_MATMUL_BF16 && ctx->kind == RLP_BACKEND_CPU ? " (" : "",
                 matmul == RLP_MATMUL_BF16 && ctx->kind == RLP_BACKEND_CPU ? rlpi_cpu_bf16_path() : "",
                 matmul == RLP_MATMUL_BF16 && ctx->kind == RLP_BACKEND_CPU ? ")" : "");
    }
    rlpi_log(&ctx->log, RLP_LOG_INFO, "context on %s", ctx->backend->description);
    /* once per process: every context shares the one OpenBLAS */
    static int advised;
    const char *advice = ctx->kind == RLP_BACKEND_CPU ? rlpi_backend_cpu_advice() : NULL;
    if (advice && !__atomic_exchange_n(&advised, 1, __ATOMIC_RELAXED))
        rlpi_log(&ctx->log, RLP_LOG_WARN, "%s", advice);
    *out = ctx;
    return RLP_OK;
}

void rlp_context_free(rlp_context *ctx)
{
    if (!ctx)
        return;
    rlpi_backend_destroy(ctx->backend);
    free(ctx);
}

int rlp_context_backend(int *out_kind, const rlp_context *ctx)
{
    RLPI_CHECK_ARG(out_kind, "out_kind is NULL");
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    *out_kind = ctx->kind;
    return RLP_OK;
}

int rlp_context_n_threads(int *out_threads, const rlp_context *ctx)
{
    RLPI_CHECK_ARG(out_threads, "out_threads is NULL");
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    *out_threads = ctx->n_threads;
    return RLP_OK;
}

int rlp_context_matmul_precision(int *out_precision, const rlp_context *ctx)
{
    RLPI_CHECK_ARG(out_precision, "out_precision is NULL");
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    *out_precision = ctx->backend->matmul;
    return RLP_OK;
}

int rlp_context_seed(uint64_t *out_seed, const rlp_context *ctx)
{
    RLPI_CHECK_ARG(out_seed, "out_seed is NULL");
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    *out_seed = ctx->seed;
    return RLP_OK;
}

const char *rlp_context_device_name(const rlp_context *ctx)
{
    RLPI_CHECK_ARG_NULL(ctx, "ctx is NULL");
    return ctx->backend->description;
}

int rlp_context_set_log_level(rlp_context *ctx, int level)
{
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    RLPI_CHECK_ARG(level >= RLP_LOG_DEBUG && level <= RLP_LOG_NONE, "level is not an rlp_log_level");
    __atomic_store_n(&ctx->log.level, level, __ATOMIC_RELAXED);
    return RLP_OK;
}
