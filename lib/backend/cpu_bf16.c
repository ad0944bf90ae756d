/* bf16 GEMMs through oneDNN's matmul primitive (see cpu_bf16.h).
 *
 * Why oneDNN's matmul and not its gemm API or an own kernel: Debian's
 * oneDNN 2.6 exports no bf16 gemm in its C API, but its matmul primitive
 * picks the AMX-BF16 brgemm kernels on this CPU (AVX512-BF16 ones where
 * there is no AMX): 3.0-4.2x the single-thread rate of OpenBLAS's SGEMM on
 * SmolLM2-135M training shapes (2048×576×576 … 2048×576×1536, both
 * transposes), with a primitive-cache hit costing ~16 µs. An own
 * AVX512-BF16 micro-kernel could at most double SGEMM's rate.
 *
 * Rounding is ours, not oneDNN's: A and B are converted to packed bf16 here
 * with the integer round-to-nearest-even of core/half.h (vcvtneps2bf16
 * would flush denormals), so this path and the emulation in cpu.c multiply
 * the same operands and differ only in the order of the fp32 sums.
 *
 * Blocks: each pool tile converts op(B) (and the matching part of A) a
 * block of ≤ 1 MiB of bf16 at a time and multiplies it at once, so the
 * copies stay in cache and a big operand is read from memory once, as by
 * SGEMM; converting whole operands first cost the head's train-step GEMMs
 * (B = the 49,152 × 576 embedding, 64-row chunks) a 113 MB conversion each.
 *
 * Threads: oneDNN's CPU runtime here is OpenMP. Every primitive is created
 * and run with the calling thread's OpenMP team size set to 1 (saved and
 * restored around our calls), and the tiles are spread over our own pool:
 * one set of threads does all the work, as with OpenBLAS (cpu.c). Each run
 * gets its own scratchpad (user scratchpad mode), so two pool threads can
 * run one primitive at the same time. */
#include "backend/cpu_bf16.h"

#include "core/error.h"
#include "core/half.h"

#include <stdlib.h>
#include <string.h>

static int forced_fallback;

void rlpi_cpu_bf16_force_fallback(int on)
{
    __atomic_store_n(&forced_fallback, on ? 1 : 0, __ATOMIC_RELAXED);
}

/* ---- rounding rows (both paths) ---------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* rlpi_f32_to_bf16 of 16 lanes (RNE, NaN quieted), the bf16 in each lane's
 * low 16 bits; the caller checked AVX512F/BW. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i bf16_bits16(__m512i u)
{
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absmask), inf);
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
}

__attribute__((target("avx512f,avx512bw"))) static void round_row_avx512(float *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i r = bf16_bits16(_mm512_loadu_si512((const void *)(s + i)));
        _mm512_storeu_si512((void *)(d + i), _mm512_slli_epi32(r, 16));
    }
    for (; i < n; i++)
        d[i] = rlpi_f32_round_bf16(s[i]);
}

static int have_avx512bw(void)
{
    static int known; /* 0 unknown, 1 no, 2 yes; racing first calls agree */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (!k) {
        k = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? 2 : 1;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}

void rlpi_cpu_round_bf16_row(float *dst, const float *src, int64_t n)
{
    if (have_avx512bw()) {
        round_row_avx512(dst, src, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = rlpi_f32_round_bf16(src[i]);
}

#else /* not x86-64 */

void rlpi_cpu_round_bf16_row(float *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = rlpi_f32_round_bf16(src[i]);
}

#endif

/* ---- the oneDNN path ---------------------------------------------------- */

#if defined(RLPI_HAVE_DNNL) && defined(__x86_64__) && defined(__GNUC__)

#include <cpuid.h>
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

#if DNNL_CPU_RUNTIME != DNNL_RUNTIME_OMP && DNNL_CPU_RUNTIME != DNNL_RUNTIME_SEQ
#define BF16_RUNTIME_OK 0 /* TBB or threadpool runtime: team size not ours to set */
#else
#define BF16_RUNTIME_OK 1
#endif

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int usable;             /* CPU, runtime and engine all fine */
static dnnl_engine_t engine;   /* one per process, never destroyed */
static int (*omp_get_max)(void);
static void (*omp_set_num)(int);

static int cpu_has_bf16(void)
{
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw"))
        return 0;
    unsigned a, b, c, d;
    int avx512_bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
    int amx_bf16 = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
    return avx512_bf16 || amx_bf16;
}

static void init(void)
{
    const char *env = getenv("RLPOST_CPU_BF16");
    if (env && (!strcmp(env, "0") || !strcmp(env, "off") || !strcmp(env, "emulate")))
        return;
    if (!BF16_RUNTIME_OK || !cpu_has_bf16())
        return;
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    /* libgomp is loaded with libdnnl; looked up rather than linked so that
     * the build needs nothing beyond oneDNN itself */
    *(void **)&omp_get_max = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    *(void **)&omp_set_num = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (!omp_get_max || !omp_set_num)
        return;
#endif
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        return;
    usable = 1;
}

int rlpi_cpu_bf16_available(void)
{
    pthread_once(&init_once, init);
    return usable && !__atomic_load_n(&forced_fallback, __ATOMIC_RELAXED);
}

const char *rlpi_cpu_bf16_path(void)
{
    return rlpi_cpu_bf16_available() ? "oneDNN" : "emulated";
}

/* One OpenMP thread for oneDNN on this thread while in scope */
static int omp_single_begin(void)
{
    if (!omp_get_max)
        return 0;
    int saved = omp_get_max();
    if (saved != 1)
        omp_set_num(1);
    return saved;
}

static void omp_single_end(int saved)
{
    if (omp_set_num && saved != 1 && saved > 0)
        omp_set_num(saved);
}

/* ---- conversion to packed bf16 ---------------------------------------- */

/* d[i] = bf16(s[i]) (rlpi_f32_to_bf16); only reached when cpu_has_bf16()
 * (AVX512F/BW present). */
__attribute__((target("avx512f,avx512bw"))) static void to_bf16_row(uint16_t *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i r = bf16_bits16(_mm512_loadu_si512((const void *)(s + i)));
        _mm256_storeu_si256((__m256i *)(void *)(d + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++)
        d[i] = rlpi_f32_to_bf16(s[i]);
}

void rlpi_cpu_bf16_convert(uint16_t *dst, const float *src, int64_t n)
{
    if (rlpi_cpu_bf16_available()) {
        to_bf16_row(dst, src, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = rlpi_f32_to_bf16(src[i]);
}

/* ---- primitives ------------------------------------------------------- */

/* A matmul of one block shape: (m, k) × (k, n) → (m, n) on packed bf16
 * blocks kept in their stored layout (transposes are strides), C strided by
 * its ld; alpha as output scale, beta as a sum post-op (none when 0: C is
 * not read). */
typedef struct block_prim {
    int64_t m, n, k;
    float beta;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a_md, b_md, c_md, scratch_md;
} block_prim;

static int prim_create(block_prim *t, const rlpi_gemm *g, int64_t m, int64_t n, int64_t k, float beta)
{
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    dnnl_dims_t as = {g->trans_a ? 1 : k, g->trans_a ? m : 1}; /* A block stored (m, k) or (k, m) */
    dnnl_dims_t bs = {g->trans_b ? 1 : n, g->trans_b ? k : 1}; /* B block stored (k, n) or (n, k) */
    dnnl_dims_t cs = {g->c.ld, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t md;
    memset(t, 0, sizeof *t);
    t->m = m, t->n = n, t->k = k, t->beta = beta;
    dnnl_status_t s;
    if ((s = dnnl_memory_desc_init_by_strides(&t->a_md, 2, ad, dnnl_bf16, as)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&t->b_md, 2, bd, dnnl_bf16, bs)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&t->c_md, 2, cd, dnnl_f32, cs)) != dnnl_success ||
        (s = dnnl_matmul_desc_init(&md, &t->a_md, &t->b_md, NULL, &t->c_md)) != dnnl_success ||
        (s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success)
        goto done;
    if (g->alpha != 1.0f && (s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &g->alpha)) != dnnl_success)
        goto done;
    if (beta != 0.0f) {
        if ((s = dnnl_post_ops_create(&ops)) != dnnl_success || (s = dnnl_post_ops_append_sum(ops, beta)) != dnnl_success ||
            (s = dnnl_primitive_attr_set_post_ops(attr, ops)) != dnnl_success)
            goto done;
    }
    if ((s = dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL)) != dnnl_success)
        goto done;
    const dnnl_memory_desc_t *sm = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sm)
        t->scratch_md = *sm;
    s = dnnl_primitive_create(&t->prim, pd);
done:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (ops)
        dnnl_post_ops_destroy(ops);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) {
        t->prim = NULL;
        return rlpi_error_set(s == dnnl_unimplemented ? RLP_E_UNSUPPORTED : RLP_E_BACKEND,
                              "gemm (bf16): oneDNN matmul %lldx%lldx%lld (trans %d%d): status %d", (long long)m,
                              (long long)n, (long long)k, g->trans_a, g->trans_b, (int)s);
    }
    return RLP_OK;
}

static void prim_free(block_prim *t)
{
    if (t->prim)
        dnnl_primitive_destroy(t->prim);
    t->prim = NULL;
}

/* ---- tiles and blocks ------------------------------------------------- */

/* The pool's split of C, as gemm_fp32 in cpu.c: along M when op(B) is the
 * smaller operand, else along N, in multiples of 32 rows/columns; small
 * products on the caller alone. */
#define BF16_SPLIT_MIN_MACS (1 << 18)
#define BF16_TILE_ALIGN 32
/* Within a tile, op(B) is converted a block at a time, at most this many
 * bytes of bf16 (half of a 2 MiB L2), and multiplied right away: the copy
 * is written and read back in cache, so a large B (the 49,152 × 576 head)
 * costs one read from memory as in fp32 instead of a conversion pass plus
 * oneDNN reading the copy again. Whole K is kept when ≥ 128 columns fit;
 * otherwise K is cut too and later blocks accumulate into C (beta 1). */
#define BF16_BLOCK_BYTES (1 << 20)

typedef struct bf16_tiles {
    const rlpi_gemm *g;
    int64_t parts, step;
    int split_m;
    int64_t nb, kb;       /* block of op(B): kb × nb */
    int failed;           /* an RLP_E_* of any task */
} bf16_tiles;

/* rows [r0, r0+rows) × cols [c0, c0+cols) of stored matrix x (batch item
 * i), rounded into dst packed (ld = cols) */
static void convert_block(uint16_t *dst, const rlpi_matrix *x, int64_t i, int64_t r0, int64_t rows, int64_t c0,
                          int64_t cols)
{
    const float *src = (const float *)x->buf->data + x->offset + i * x->stride + r0 * x->ld + c0;
    for (int64_t r = 0; r < rows; r++)
        to_bf16_row(dst + r * cols, src + r * x->ld, cols);
}

static void run_tile(void *p, int64_t task, int tid)
{
    (void)tid;
    bf16_tiles *t = p;
    const rlpi_gemm *g = t->g;
    int64_t i = task / t->parts, part = task % t->parts;
    int64_t extent = t->split_m ? g->m : g->n;
    int64_t lo = part * t->step, hi = lo + t->step < extent ? lo + t->step : extent;
    if (lo >= hi)
        return;
    int64_t r0 = t->split_m ? lo : 0, rows = t->split_m ? hi - lo : g->m;
    int64_t c0 = t->split_m ? 0 : lo, c1 = t->split_m ? g->n : hi;
    int64_t nb = t->nb < c1 - c0 ? t->nb : c1 - c0, kb = t->kb;
    uint16_t *ab = malloc((size_t)(rows * kb) * sizeof *ab + 64);
    uint16_t *bb = malloc((size_t)(kb * nb) * sizeof *bb + 64);
    void *scratch = NULL;
    size_t scratch_cap = 0;
    block_prim bp = {0};
    dnnl_stream_t stream = NULL;
    int saved = omp_single_begin();
    int rc = ab && bb ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "gemm (bf16): cannot allocate bf16 blocks");
    if (rc == RLP_OK && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
        rc = rlpi_error_set(RLP_E_BACKEND, "gemm (bf16): oneDNN stream");
    for (int64_t cc = c0; rc == RLP_OK && cc < c1; cc += nb) {
        int64_t nw = c1 - cc < nb ? c1 - cc : nb;
        for (int64_t kk = 0; rc == RLP_OK && kk < g->k; kk += kb) {
            int64_t kw = g->k - kk < kb ? g->k - kk : kb;
            /* A's rows r0.. and columns kk.. of op(A); B's kk.. × cc.. of op(B), in stored layout */
            if (g->trans_a)
                convert_block(ab, &g->a, i, kk, kw, r0, rows);
            else
                convert_block(ab, &g->a, i, r0, rows, kk, kw);
            if (g->trans_b)
                convert_block(bb, &g->b, i, cc, nw, kk, kw);
            else
                convert_block(bb, &g->b, i, kk, kw, cc, nw);
            float beta = kk == 0 ? g->beta : 1.0f;
            if (!bp.prim || bp.m != rows || bp.n != nw || bp.k != kw || bp.beta != beta) {
                prim_free(&bp);
                if ((rc = prim_create(&bp, g, rows, nw, kw, beta)) != RLP_OK)
                    break;
            }
            size_t need = dnnl_memory_desc_get_size(&bp.scratch_md);
            if (need > scratch_cap) {
                free(scratch);
                scratch_cap = (need + 63) / 64 * 64;
                scratch = aligned_alloc(64, scratch_cap);
                if (!scratch) {
                    scratch_cap = 0;
                    rc = rlpi_error_set(RLP_E_NOMEM, "gemm (bf16): cannot allocate oneDNN scratchpad");
                    break;
                }
            }
            float *c = (float *)g->c.buf->data + g->c.offset + i * g->c.stride + r0 * g->c.ld + cc;
            dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
            dnnl_status_t s;
            if ((s = dnnl_memory_create(&ma, &bp.a_md, engine, ab)) == dnnl_success &&
                (s = dnnl_memory_create(&mb, &bp.b_md, engine, bb)) == dnnl_success &&
                (s = dnnl_memory_create(&mc, &bp.c_md, engine, c)) == dnnl_success &&
                (s = dnnl_memory_create(&ms, &bp.scratch_md, engine, scratch)) == dnnl_success) {
                dnnl_exec_arg_t args[4] = {
                    {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
                if ((s = dnnl_primitive_execute(bp.prim, stream, 4, args)) == dnnl_success)
                    s = dnnl_stream_wait(stream);
            }
            dnnl_memory_destroy(ma); /* NULL is fine */
            dnnl_memory_destroy(mb);
            dnnl_memory_destroy(mc);
            dnnl_memory_destroy(ms);
            if (s != dnnl_success)
                rc = rlpi_error_set(RLP_E_BACKEND, "gemm (bf16): oneDNN matmul %lldx%lldx%lld failed: status %d",
                                    (long long)rows, (long long)nw, (long long)kw, (int)s);
        }
    }
    if (stream)
        dnnl_stream_destroy(stream);
    prim_free(&bp);
    omp_single_end(saved);
    free(scratch);
    free(ab);
    free(bb);
    if (rc != RLP_OK)
        __atomic_store_n(&t->failed, rc, __ATOMIC_RELAXED);
}

int rlpi_cpu_bf16_gemm(rlpi_threadpool *pool, const rlpi_gemm *g)
{
    if (!rlpi_cpu_bf16_available())
        return rlpi_error_set(RLP_E_UNSUPPORTED, "gemm (bf16): no oneDNN bf16 path on this CPU");
    if (g->k < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm (bf16): k = 0");
    int threads = rlpi_threadpool_size(pool);
    double macs = (double)g->m * (double)g->n * (double)g->k;
    bf16_tiles t = {.g = g, .parts = 1, .step = g->m, .split_m = 1};
    if (threads > 1 && macs >= BF16_SPLIT_MIN_MACS && g->batch < threads) {
        int split_m = g->m > 1 && (g->n <= g->m || g->n < 2 * BF16_TILE_ALIGN);
        int64_t extent = split_m ? g->m : g->n;
        int64_t step = (extent + threads - 1) / threads;
        if (extent >= 2 * BF16_TILE_ALIGN)
            step = (step + BF16_TILE_ALIGN - 1) / BF16_TILE_ALIGN * BF16_TILE_ALIGN;
        t.split_m = split_m;
        t.step = step;
        t.parts = (extent + step - 1) / step;
    }
    /* blocks of op(B): whole K and as many columns as fit, else 512 × kb */
    int64_t tile_cols = t.split_m ? g->n : t.step;
    int64_t fit = BF16_BLOCK_BYTES / (2 * g->k);
    if (fit >= tile_cols) {
        t.nb = tile_cols, t.kb = g->k;
    } else if (fit >= 128) {
        t.nb = fit / BF16_TILE_ALIGN * BF16_TILE_ALIGN, t.kb = g->k;
    } else {
        t.nb = tile_cols < 512 ? tile_cols : 512;
        t.kb = BF16_BLOCK_BYTES / (2 * t.nb) / 64 * 64;
        t.kb = t.kb < 64 ? 64 : t.kb;
    }

    /* one primitive first: a shape oneDNN has no kernel for fails before C
     * is touched (the caller falls back); the tasks' own hit its cache */
    int saved = omp_single_begin();
    block_prim probe;
    int64_t first_rows = t.split_m ? (t.step < g->m ? t.step : g->m) : g->m;
    int rc = prim_create(&probe, g, first_rows, t.nb < g->n ? t.nb : g->n, t.kb < g->k ? t.kb : g->k, g->beta);
    prim_free(&probe);
    omp_single_end(saved);
    if (rc != RLP_OK)
        return rc;
    int64_t tasks = g->batch * t.parts;
    if (tasks == 1 || macs * (double)g->batch < BF16_SPLIT_MIN_MACS) {
        for (int64_t x = 0; x < tasks; x++)
            run_tile(&t, x, 0);
    } else {
        rlpi_threadpool_run_tasks(pool, tasks, run_tile, &t);
    }
    if (t.failed) /* the message is the failing thread's; say it here too */
        return rlpi_error_set(t.failed == RLP_E_NOMEM ? RLP_E_NOMEM : RLP_E_BACKEND,
                              "gemm (bf16): %lldx%lldx%lld failed in a tile (%s)", (long long)g->m, (long long)g->n,
                              (long long)g->k, rlp_status_str(t.failed));
    return RLP_OK;
}

#else /* no oneDNN, or not x86-64: RLP_MATMUL_BF16 stays emulated */

int rlpi_cpu_bf16_available(void)
{
    return 0;
}

const char *rlpi_cpu_bf16_path(void)
{
    return "emulated";
}

void rlpi_cpu_bf16_convert(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = rlpi_f32_to_bf16(src[i]);
}

int rlpi_cpu_bf16_gemm(rlpi_threadpool *pool, const rlpi_gemm *g)
{
    (void)pool;
    (void)g;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "gemm (bf16): built without oneDNN");
}

#endif
