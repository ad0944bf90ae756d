/* The CPU backend: host memory, OpenBLAS for GEMM, the core thread pool for
 * everything else. Kernels of later issues (norms, attention, the fused
 * logprob head, AdamW) live in their own cpu_*.c files and are wired into
 * the ops table here. */
#include "backend/backend.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"

#include "core/error.h"
#include "core/half.h"
#include "backend/qmat.h"
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
    rlpi_cpu_sampler *sampler; /* sample_rows' scratch */
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

static int cpu_copy_2d(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, size_t dst_pitch, const rlpi_buffer *src,
                       size_t src_off, size_t src_pitch, size_t width, size_t rows)
{
    (void)be;
    char *d = (char *)dst->data + dst_off;
    const char *s = (const char *)src->data + src_off;
    for (size_t r = 0; r < rows; r++)
        memcpy(d + r * dst_pitch, s + r * src_pitch, width);
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

/* One GEMM (or GEMV for a single row) of batch item `i`, restricted to rows
 * [r0, r1) and columns [c0, c1) of C, on the calling thread. */
static void gemm_block(const rlpi_gemm *g, int64_t i, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    const float *a = (const float *)g->a.buf->data + g->a.offset + i * g->a.stride;
    const float *b = (const float *)g->b.buf->data + g->b.offset + i * g->b.stride;
    float *c = (float *)g->c.buf->data + g->c.offset + i * g->c.stride;
    int64_t m = r1 - r0, n = c1 - c0;
    /* sub-blocks: rows of op(A) and C, columns of op(B) and C */
    a += g->trans_a ? r0 : r0 * g->a.ld;
    b += g->trans_b ? c0 * g->b.ld : c0;
    c += r0 * g->c.ld + c0;
    if (g->k == 0) {
        /* BLAS leaves C untouched for k = 0 only when beta = 1 */
        for (int64_t r = 0; r < m; r++)
            for (int64_t col = 0; col < n; col++) {
                float *x = c + r * g->c.ld + col;
                *x = g->beta == 0.0f ? 0.0f : g->beta * *x;
            }
        return;
    }
    if (m == 1) {
        /* one row (batch-1 decode): a matrix-vector product streams B once,
         * where OpenBLAS 0.3.21's sgemm would first pack it */
        if (g->beta == 0.0f)
            memset(c, 0, (size_t)n * sizeof *c); /* C may hold NaN; BLAS scaling by 0 need not clear it */
        blasint incx = g->trans_a ? (blasint)g->a.ld : 1;
        if (g->trans_b)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)g->k, g->alpha, b, (blasint)g->b.ld, a,
                        incx, g->beta, c, 1);
        else
            cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)g->k, (blasint)n, g->alpha, b, (blasint)g->b.ld, a, incx,
                        g->beta, c, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)g->k, g->alpha, a, (blasint)g->a.ld, b, (blasint)g->b.ld, g->beta, c,
                (blasint)g->c.ld);
}

typedef struct gemm_tiles {
    const rlpi_gemm *g;
    int64_t parts;   /* tiles per batch item */
    int64_t step;    /* rows (split_m) or columns per tile */
    int split_m;
} gemm_tiles;

static void gemm_tile(void *p, int64_t task, int tid)
{
    (void)tid;
    const gemm_tiles *t = p;
    const rlpi_gemm *g = t->g;
    int64_t i = task / t->parts, part = task % t->parts;
    int64_t extent = t->split_m ? g->m : g->n;
    int64_t lo = part * t->step, hi = lo + t->step < extent ? lo + t->step : extent;
    if (lo >= hi)
        return;
    if (t->split_m)
        gemm_block(g, i, lo, hi, 0, g->n);
    else
        gemm_block(g, i, 0, g->m, lo, hi);
}

/* Below this many multiply-adds a product runs on the calling thread: the
 * hand-off to the pool (~10 µs) would cost more than it saves. */
#define GEMM_SPLIT_MIN_MACS (1 << 18)
/* Tiles are whole multiples of this many rows or columns, so every tile
 * runs OpenBLAS's full-width micro-kernels (16 floats = one AVX-512 row). */
#define GEMM_TILE_ALIGN 32

/* OpenBLAS runs single-threaded (rlpi_backend_cpu_create) and the products
 * are split here over the backend's own pool, so one set of threads does
 * all the work: with OpenBLAS's threads and ours both alive, each spun or
 * yielded while the other worked (17 % of a train step in sched_yield on 2
 * cores, docs/PERFORMANCE.md). C is cut along M when op(B) is the smaller
 * operand (each tile packs B again) and along N otherwise (each tile packs
 * A again); a batch of small items is spread item by item. */
static int gemm_fp32(rlpi_backend *be, const rlpi_gemm *g)
{
    cpu_state *st = be->impl;
    int threads = rlpi_threadpool_size(st->pool);
    double macs = (double)g->m * (double)g->n * (double)(g->k ? g->k : 1);
    gemm_tiles t = {.g = g, .parts = 1, .step = g->m, .split_m = 1};
    if (threads > 1 && macs >= GEMM_SPLIT_MIN_MACS && g->batch < threads) {
        int split_m = g->m > 1 && (g->n <= g->m || g->n < 2 * GEMM_TILE_ALIGN);
        int64_t extent = split_m ? g->m : g->n;
        int64_t step = (extent + threads - 1) / threads;
        if (extent >= 2 * GEMM_TILE_ALIGN)
            step = (step + GEMM_TILE_ALIGN - 1) / GEMM_TILE_ALIGN * GEMM_TILE_ALIGN;
        t.split_m = split_m;
        t.step = step;
        t.parts = (extent + step - 1) / step;
    }
    if (g->batch * t.parts == 1 || (macs * (double)g->batch < GEMM_SPLIT_MIN_MACS)) {
        for (int64_t i = 0; i < g->batch; i++)
            gemm_block(g, i, 0, g->m, 0, g->n);
        return RLP_OK;
    }
    rlpi_threadpool_run_tasks(st->pool, g->batch * t.parts, gemm_tile, &t);
    return RLP_OK;
}

/* A copy of operand x, (rows, cols) as stored, with every element rounded
 * to bf16 (RNE) and packed (ld = cols; one item when x is broadcast), as a
 * buffer view for the fp32 GEMM. */
static int round_operand(rlpi_backend *be, const rlpi_matrix *x, int64_t rows, int64_t cols, int64_t batch,
                         rlpi_buffer *view, rlpi_matrix *out)
{
    int64_t items = x->stride == 0 ? 1 : batch;
    size_t n = (size_t)items * (size_t)rows * (size_t)cols; /* <= the buffer's floats: checked by the wrapper */
    float *dst = malloc((n ? n : 1) * sizeof *dst);
    if (!dst)
        return rlpi_error_set(RLP_E_NOMEM, "gemm (bf16): cannot allocate %zu bytes of rounded operands",
                              n * sizeof *dst);
    const float *src = (const float *)x->buf->data + x->offset;
    float *d = dst;
    for (int64_t b = 0; b < items; b++)
        for (int64_t r = 0; r < rows; r++) {
            const float *row = src + b * x->stride + r * x->ld;
            for (int64_t c = 0; c < cols; c++)
                *d++ = rlpi_f32_round_bf16(row[c]);
        }
    *view = (rlpi_buffer){.owner = be, .data = dst, .nbytes = n * sizeof *dst};
    *out = (rlpi_matrix){.buf = view, .offset = 0, .ld = cols, .stride = x->stride == 0 ? 0 : rows * cols};
    return RLP_OK;
}

/* RLP_MATMUL_BF16 as an emulation: both operands rounded to bf16 exactly
 * as the CUDA conversion kernel does, then the fp32 GEMM. A bf16 × bf16
 * product (8-bit significands) is exact in fp32, so this differs from
 * cuBLAS's bf16 GEMM and from the oneDNN path (cpu_bf16.c) only in the
 * order of the fp32 sums. The rounded copies are allocated per call (no
 * state shared between the threads that may drive one backend). The
 * fallback where the CPU lacks AVX512-BF16/AMX or oneDNN is missing, and
 * the reference the real path is tested against; slower than fp32. */
static int gemm_bf16_emulated(rlpi_backend *be, const rlpi_gemm *g)
{
    rlpi_buffer va, vb;
    rlpi_gemm r = *g;
    int rc = round_operand(be, &g->a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->batch, &va, &r.a);
    if (rc != RLP_OK)
        return rc;
    rc = round_operand(be, &g->b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->batch, &vb, &r.b);
    if (rc == RLP_OK) {
        rc = gemm_fp32(be, &r);
        free(vb.data);
    }
    free(va.data);
    return rc;
}

/* Products of fewer rows than this (decode steps of a few sequences) take
 * gemm_bf16_few_rows: rounding all of B first (the emulation) or converting
 * it for oneDNN costs more than the product itself there (SmolLM2's head at
 * m = 1: 180-280 ms against 10-14 ms in fp32), and oneDNN's kernels only
 * beat SGEMM from about 8 rows up. A B of more than BF16_BIG_B elements
 * (the vocabulary head: 28 M) does not fit in cache as a bf16 copy either:
 * converting it streams memory three more times (write, oneDNN's repacking
 * read and write), which only pays from ~64 rows (measured: head at m = 32,
 * 125 ms streamed against 160 ms through oneDNN; fp32 110 ms). */
#define BF16_FEW_ROWS 8
#define BF16_FEW_ROWS_BIG_B 64
#define BF16_BIG_B (4.0 * 1024 * 1024)
/* columns of C per task, and per rounded chunk of op(B) (64 × k floats:
 * 147 KiB at k = 576, in L2 while the product reads it) */
#define BF16_FEW_TASK_COLS 512
#define BF16_FEW_CHUNK 64

typedef struct few_rows {
    const rlpi_gemm *g;
    const float *a;   /* A rounded, packed as stored: (items, rows, cols) */
    int64_t a_item;   /* floats per item of a (0 = broadcast) */
    int64_t tasks_per_item;
    int failed;       /* a chunk buffer could not be allocated */
} few_rows;

static void few_rows_task(void *p, int64_t task, int tid)
{
    (void)tid;
    few_rows *f = p;
    const rlpi_gemm *g = f->g;
    int64_t i = task / f->tasks_per_item;
    int64_t lo = (task % f->tasks_per_item) * BF16_FEW_TASK_COLS;
    int64_t hi = lo + BF16_FEW_TASK_COLS < g->n ? lo + BF16_FEW_TASK_COLS : g->n;
    float *blk = malloc((size_t)BF16_FEW_CHUNK * (size_t)g->k * sizeof *blk);
    if (!blk) {
        __atomic_store_n(&f->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    const float *b = (const float *)g->b.buf->data + g->b.offset + i * g->b.stride;
    const float *a = f->a + i * f->a_item;
    float *c = (float *)g->c.buf->data + g->c.offset + i * g->c.stride;
    blasint lda = (blasint)(g->trans_a ? g->m : g->k);
    for (int64_t c0 = lo; c0 < hi; c0 += BF16_FEW_CHUNK) {
        int64_t w = hi - c0 < BF16_FEW_CHUNK ? hi - c0 : BF16_FEW_CHUNK;
        /* op(B)'s columns c0..c0+w rounded: rows of B (trans_b: (w, k)) or a
         * (k, w) block of it */
        if (g->trans_b)
            for (int64_t r = 0; r < w; r++)
                rlpi_cpu_round_bf16_row(blk + r * g->k, b + (c0 + r) * g->b.ld, g->k);
        else
            for (int64_t r = 0; r < g->k; r++)
                rlpi_cpu_round_bf16_row(blk + r * w, b + r * g->b.ld + c0, w);
        float *cc = c + c0;
        if (g->m == 1) {
            /* sgemv streams the chunk once; BLAS scaling by beta = 0 need not
             * clear a NaN in C */
            if (g->beta == 0.0f)
                memset(cc, 0, (size_t)w * sizeof *cc);
            if (g->trans_b)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)w, (blasint)g->k, g->alpha, blk, (blasint)g->k, a,
                            1, g->beta, cc, 1);
            else
                cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)g->k, (blasint)w, g->alpha, blk, (blasint)w, a, 1,
                            g->beta, cc, 1);
        } else {
            cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                        g->trans_b ? CblasTrans : CblasNoTrans, (blasint)g->m, (blasint)w, (blasint)g->k, g->alpha,
                        a, lda, blk, (blasint)(g->trans_b ? g->k : w), g->beta, cc, (blasint)g->c.ld);
        }
    }
    free(blk);
}

/* RLP_MATMUL_BF16 with m < BF16_FEW_ROWS: A rounded once (small), op(B)
 * rounded chunk by chunk into a per-task buffer just before SGEMM/SGEMV
 * reads it, so B is read from memory once, as in fp32. Same operands and
 * fp32 sums as the emulation; the tasks split C's columns over the pool. */
static int gemm_bf16_few_rows(rlpi_backend *be, const rlpi_gemm *g)
{
    cpu_state *st = be->impl;
    int64_t rows = g->trans_a ? g->k : g->m, cols = g->trans_a ? g->m : g->k;
    int64_t items = g->a.stride == 0 ? 1 : g->batch;
    float *a = malloc((size_t)(items * rows * cols) * sizeof *a + sizeof *a);
    if (!a)
        return rlpi_error_set(RLP_E_NOMEM, "gemm (bf16): cannot allocate rounded A");
    for (int64_t it = 0; it < items; it++)
        for (int64_t r = 0; r < rows; r++)
            rlpi_cpu_round_bf16_row(a + (it * rows + r) * cols,
                                    (const float *)g->a.buf->data + g->a.offset + it * g->a.stride + r * g->a.ld,
                                    cols);
    few_rows f = {.g = g, .a = a, .a_item = g->a.stride == 0 ? 0 : rows * cols,
                  .tasks_per_item = (g->n + BF16_FEW_TASK_COLS - 1) / BF16_FEW_TASK_COLS};
    int64_t tasks = g->batch * f.tasks_per_item;
    double macs = (double)g->m * (double)g->n * (double)g->k * (double)g->batch;
    if (tasks == 1 || macs < GEMM_SPLIT_MIN_MACS)
        for (int64_t t = 0; t < tasks; t++)
            few_rows_task(&f, t, 0);
    else
        rlpi_threadpool_run_tasks(st->pool, tasks, few_rows_task, &f);
    free(a);
    if (f.failed)
        return rlpi_error_set(RLP_E_NOMEM, "gemm (bf16): cannot allocate a rounded chunk of B");
    return RLP_OK;
}

static int gemm_bf16(rlpi_backend *be, const rlpi_gemm *g)
{
    if (g->k == 0) /* no products: C = beta·C, as in fp32 */
        return gemm_fp32(be, g);
    if (g->m < BF16_FEW_ROWS ||
        (g->m < BF16_FEW_ROWS_BIG_B && (double)g->n * (double)g->k > BF16_BIG_B))
        /* generation's few-row products (decode steps) in fp32: rounding
         * the whole weight operand every token costs more than the product
         * (measured on the default job: docs/PERFORMANCE.md) */
        return rlpi_gemm_in_generation() ? gemm_fp32(be, g) : gemm_bf16_few_rows(be, g);
    cpu_state *st = be->impl;
    int rc = rlpi_cpu_bf16_gemm(st->pool, g);
    /* unsupported (no instructions, no oneDNN, a shape it has no kernel
     * for) leaves C untouched: same operands, emulated */
    return rc == RLP_E_UNSUPPORTED ? gemm_bf16_emulated(be, g) : rc;
}

static int cpu_gemm_f32(rlpi_backend *be, const rlpi_gemm *g)
{
    /* TF32 never reaches the CPU backend (the context runs it as fp32) */
    return be->matmul == RLP_MATMUL_BF16 ? gemm_bf16(be, g) : gemm_fp32(be, g);
}

static void cpu_destroy(rlpi_backend *be)
{
    cpu_state *st = be->impl;
    rlpi_threadpool_free(st->pool);
    rlpi_cpu_sampler_free(st->sampler);
    free(st);
    free(be);
}

static int cpu_sample_rows(rlpi_backend *be, int32_t *tokens, float *logprobs, const float *logits,
                           const int32_t *rows, int64_t n, int64_t vocab, const rlpi_sampler_params *params,
                           const double *u)
{
    cpu_state *st = be->impl;
    return rlpi_cpu_sample_rows(st->pool, st->sampler, tokens, logprobs, logits, rows, n, vocab, params, u);
}

static int cpu_qmatmul(rlpi_backend *be, float *c, const float *a, const void *w, int type, int64_t m, int64_t n,
                       int64_t k, float beta)
{
    cpu_state *st = be->impl;
    return rlpi_cpu_qmatmul(st->pool, c, a, w, type, m, n, k, beta);
}

static const rlpi_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_upload = cpu_upload,
    .buffer_download = cpu_download,
    .buffer_copy = cpu_copy,
    .buffer_copy_2d = cpu_copy_2d,
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
    /* sampling (rollout engine) */
    .sample_rows = cpu_sample_rows,
    .geglu_fwd = rlpi_cpu_geglu_fwd,
    .geglu_bwd = rlpi_cpu_geglu_bwd,
    .softcap_fwd = rlpi_cpu_softcap_fwd,
    .softcap_bwd = rlpi_cpu_softcap_bwd,
    .qmatmul = cpu_qmatmul,
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
    if (rc == RLP_OK && (rc = rlpi_cpu_sampler_create(&st->sampler, n_threads)) != RLP_OK)
        rlpi_threadpool_free(st->pool);
    if (rc != RLP_OK) {
        free(be);
        free(st);
        return rc;
    }
    /* one set of worker threads: ours (see cpu_gemm_f32) */
    openblas_set_num_threads(1);
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
