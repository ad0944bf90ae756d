/* The CPU backend: host memory, OpenBLAS for GEMM, the core thread pool for
 * everything else. Kernels of later issues (norms, attention, the fused
 * logprob head, AdamW) live in their own cpu_*.c files and are wired into
 * the ops table here. */
#include "backend/backend.h"
#include "backend/cpu_kernels.h"

#include "core/error.h"
#include "core/threadpool.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS API (declared in its cblas.h; repeated to be explicit about
 * which symbols we rely on) */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);
char *openblas_get_corename(void);

typedef struct cpu_state {
    rlpi_threadpool *pool;
} cpu_state;

/* 64-byte alignment: a cache line, and the widest SIMD load */
#define CPU_ALIGN 64

static int cpu_buffer_alloc(rlpi_backend *be, size_t nbytes, rlpi_buffer *buf)
{
    (void)be;
    size_t rounded = (nbytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (rounded < nbytes)
        return rlpi_error_set(RLP_E_OVERFLOW, "cpu buffer: %zu bytes", nbytes);
    void *p = aligned_alloc(CPU_ALIGN, rounded ? rounded : CPU_ALIGN);
    if (!p)
        return rlpi_error_set(RLP_E_NOMEM, "cpu buffer: cannot allocate %zu bytes", nbytes);
    buf->data = p;
    return RLP_OK;
}

static void cpu_buffer_free(rlpi_backend *be, rlpi_buffer *buf)
{
    (void)be;
    free(buf->data);
}

static int cpu_upload(rlpi_backend *be, rlpi_buffer *dst, size_t off, const void *src, size_t n)
{
    (void)be;
    memmove((char *)dst->data + off, src, n);
    return RLP_OK;
}

static int cpu_download(rlpi_backend *be, const rlpi_buffer *src, size_t off, void *dst, size_t n)
{
    (void)be;
    memmove(dst, (const char *)src->data + off, n);
    return RLP_OK;
}

static int cpu_copy(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src,
                    size_t src_off, size_t n)
{
    (void)be;
    memmove((char *)dst->data + dst_off, (const char *)src->data + src_off, n);
    return RLP_OK;
}

static int cpu_fill_f32(rlpi_backend *be, rlpi_buffer *dst, size_t off, size_t n, float value)
{
    (void)be;
    float *p = (float *)dst->data + off;
    for (size_t i = 0; i < n; i++)
        p[i] = value;
    return RLP_OK;
}

static int cpu_gemm_f32(rlpi_backend *be, const rlpi_gemm *g)
{
    (void)be;
    const float *a = (const float *)g->a.buf->data + g->a.offset;
    const float *b = (const float *)g->b.buf->data + g->b.offset;
    float *c = (float *)g->c.buf->data + g->c.offset;
    /* One multithreaded OpenBLAS call per batch item: the batched forms the
     * model uses (attention heads) are large enough per item that this beats
     * splitting the batch across single-threaded calls on few cores. */
    for (int64_t i = 0; i < g->batch; i++) {
        if (g->k == 0) {
            /* BLAS leaves C untouched for k = 0 only when beta = 1 */
            for (int64_t r = 0; r < g->m; r++)
                for (int64_t col = 0; col < g->n; col++) {
                    float *x = c + i * g->c.stride + r * g->c.ld + col;
                    *x = g->beta == 0.0f ? 0.0f : g->beta * *x;
                }
            continue;
        }
        if (g->m == 1) {
            /* one row (batch-1 decode): a matrix-vector product streams B
             * once, where OpenBLAS 0.3.21's sgemm would first pack it */
            float *y = c + i * g->c.stride;
            if (g->beta == 0.0f)
                memset(y, 0, (size_t)g->n * sizeof *y); /* C may hold NaN; BLAS scaling by 0 need not clear it */
            const float *x = a + i * g->a.stride;
            blasint incx = g->trans_a ? (blasint)g->a.ld : 1;
            if (g->trans_b)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)g->n, (blasint)g->k, g->alpha,
                            b + i * g->b.stride, (blasint)g->b.ld, x, incx, g->beta, y, 1);
            else
                cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)g->k, (blasint)g->n, g->alpha,
                            b + i * g->b.stride, (blasint)g->b.ld, x, incx, g->beta, y, 1);
            continue;
        }
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, (blasint)g->m, (blasint)g->n,
                    (blasint)g->k, g->alpha, a + i * g->a.stride, (blasint)g->a.ld,
                    b + i * g->b.stride, (blasint)g->b.ld, g->beta, c + i * g->c.stride,
                    (blasint)g->c.ld);
    }
    return RLP_OK;
}

static void cpu_destroy(rlpi_backend *be)
{
    cpu_state *st = be->impl;
    rlpi_threadpool_free(st->pool);
    free(st);
    free(be);
}

static const rlpi_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_upload = cpu_upload,
    .buffer_download = cpu_download,
    .buffer_copy = cpu_copy,
    .buffer_fill_f32 = cpu_fill_f32,
    .synchronize = NULL,
    .host_visible = 1,
    .gemm_f32 = cpu_gemm_f32,
    .embedding_fwd = rlpi_cpu_embedding_fwd,
    .embedding_bwd = rlpi_cpu_embedding_bwd,
    .rmsnorm_fwd = rlpi_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = rlpi_cpu_rmsnorm_bwd,
    .rope = rlpi_cpu_rope,
    .attention_fwd = rlpi_cpu_attention_fwd,
    .attention_cached = rlpi_cpu_attention_cached,
    .attention_bwd = rlpi_cpu_attention_bwd,
    .swiglu_fwd = rlpi_cpu_swiglu_fwd,
    .swiglu_bwd = rlpi_cpu_swiglu_bwd,
    .add = rlpi_cpu_add,
    .add_bias = rlpi_cpu_add_bias,
    .bias_bwd = rlpi_cpu_bias_bwd,
    .scale = rlpi_cpu_scale,
    .logprob_rows = rlpi_cpu_logprob_rows,
    .logprob_rows_bwd = rlpi_cpu_logprob_rows_bwd,
    .sum_squares = rlpi_cpu_sum_squares,
    .adamw = rlpi_cpu_adamw,
};

int rlpi_backend_cpu_create(rlpi_backend **out, int n_threads)
{
    if (!out || n_threads < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "cpu backend: bad arguments");
    rlpi_backend *be = calloc(1, sizeof *be);
    cpu_state *st = calloc(1, sizeof *st);
    if (!be || !st) {
        free(be);
        free(st);
        return rlpi_error_set(RLP_E_NOMEM, "cpu backend: out of memory");
    }
    int rc = rlpi_threadpool_create(&st->pool, n_threads);
    if (rc != RLP_OK) {
        free(be);
        free(st);
        return rc;
    }
    openblas_set_num_threads(n_threads);
    be->ops = &cpu_ops;
    be->kind = RLP_BACKEND_CPU;
    be->device = 0;
    be->n_threads = n_threads;
    be->impl = st;
    snprintf(be->description, sizeof be->description, "cpu: %d thread%s, %s", n_threads,
             n_threads == 1 ? "" : "s", openblas_get_config());
    *out = be;
    return RLP_OK;
}

const char *rlpi_backend_cpu_advice(void)
{
#if defined(__x86_64__)
    /* OpenBLAS 0.3.21 (Debian 12) does not know some recent Xeons and falls
     * back to its SSE3 "Prescott" kernels, about 5x slower than its AVX-512
     * ones here (docs/PERFORMANCE.md). The choice is made when OpenBLAS
     * loads, before we run, so all we can do is say so. */
    const char *core = openblas_get_corename();
    if (core && !strcmp(core, "Prescott") && __builtin_cpu_supports("avx2"))
        return __builtin_cpu_supports("avx512f")
                   ? "OpenBLAS picked its generic Prescott kernels on an AVX-512 CPU; set "
                     "OPENBLAS_CORETYPE=SkylakeX (or Haswell) before starting for ~5x faster GEMMs"
                   : "OpenBLAS picked its generic Prescott kernels on an AVX2 CPU; set "
                     "OPENBLAS_CORETYPE=Haswell before starting for faster GEMMs";
#endif
    return NULL;
}

rlpi_threadpool *rlpi_backend_cpu_pool(rlpi_backend *be)
{
    return be && be->kind == RLP_BACKEND_CPU ? ((cpu_state *)be->impl)->pool : NULL;
}
