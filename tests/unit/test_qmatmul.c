/* Quantized products (lib/backend/qmat.h) and the quantized rollout copy
 * (lib/model/qweights.h):
 * - C = A·Wᵀ with W in Q8_0 and Q4_0 against a double-precision product of the exact
 *   fp32 A with W dequantized by quant.c (independent of the kernels'
 *   layout), over ragged shapes (k not a multiple of 32 or 64, n = 1..67,
 *   odd m). Tolerance per element, from the format: the activations are
 *   rounded to int8 per block of 32 with step d_a = max_b|a| / 127, so
 *   |ΔC_ij| ≤ Σ_b (d_a,b / 2)·Σ_{l∈b} |W_jl|; plus fp32 summation,
 *   bounded by 1e-5·Σ_l |a_l W_jl| + 1e-30.
 * - the VNNI and AVX2 kernels and the scalar kernel give bit-identical C
 *   (every kernel the CPU has, each forced in turn);
 * - forcing the scalar kernel (rlpi_qmat_force_isa, RLPOST_CPU_FEATURES)
 *   switches the dispatch;
 * - the rollout copy packs exactly GGUF's Q8_0 (or Q4_0 layers and a Q8_0
 *   head) of the weights;
 * - greedy decode of tiny models with the copy agrees with fp32 decode
 *   (Q8_0 closely, Q4_0 within the looser bound of 4-bit weights);
 * - after new weights, decode uses them once the copy is updated. */
#include "rlpost.h"
#include "backend/backend.h"
#include "backend/qmat.h"
#include "core/threadpool.h"
#include "model/kv_cache.h"
#include "model/quant.h"
#include "model/qweights.h"
#include "model/transformer.h"
#include "tiny_model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static float urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

static const int TYPES[] = {RLPI_QMAT_Q8_0, RLPI_QMAT_Q4_0};

static const char *type_name(int type)
{
    return type == RLPI_QMAT_Q4_0 ? "Q4_0" : "Q8_0";
}

/* W (n, k) quantized by quant.c as GGUF blocks of `type` and packed: the
 * packed matrix, and its dequantized values (n, k) */
static void *make_q(int type, const float *w, int64_t n, int64_t k, float *deq)
{
    const bool q4 = type == RLPI_QMAT_Q4_0;
    const uint32_t gt = q4 ? RLPI_GGML_Q4_0 : RLPI_GGML_Q8_0;
    const size_t bb = q4 ? 18 : 34;
    int64_t k32 = (k + 31) / 32 * 32, nb = k32 / 32;
    void *q = malloc(rlpi_qmat_bytes(type, n, k));
    float *row = calloc((size_t)k32, sizeof *row), *drow = malloc((size_t)k32 * sizeof *drow);
    uint8_t *blk = malloc((size_t)nb * bb);
    assert_non_null(q);
    for (int64_t j = 0; j < n; j++) {
        memcpy(row, w + j * k, (size_t)k * sizeof *row);
        assert_int_equal(rlpi_quantize(gt, row, (size_t)k32, blk, (size_t)nb * bb), RLP_OK);
        assert_int_equal(rlpi_dequantize(gt, blk, (size_t)nb * bb, drow, (size_t)k32), RLP_OK);
        memcpy(deq + j * k, drow, (size_t)k * sizeof *drow);
        if (q4)
            rlpi_qmat_pack_q4_0(q, n, k, j, 1, blk);
        else
            rlpi_qmat_pack_q8_0(q, n, k, j, 1, blk);
    }
    free(row);
    free(drow);
    free(blk);
    return q;
}

static void check_shape(rlpi_threadpool *pool, int type, int64_t m, int64_t n, int64_t k, uint64_t seed)
{
    float *w = malloc((size_t)(n * k) * sizeof *w), *deq = malloc((size_t)(n * k) * sizeof *deq);
    float *a = malloc((size_t)(m * k) * sizeof *a), *c = malloc((size_t)(m * n) * sizeof *c);
    float *c1 = malloc((size_t)(m * n) * sizeof *c1);
    for (int64_t i = 0; i < n * k; i++)
        w[i] = urand(&seed) * 0.2f;
    for (int64_t i = 0; i < m * k; i++)
        a[i] = urand(&seed) * (i % 7 == 0 ? 4.0f : 1.0f);
    void *q = make_q(type, w, n, k, deq);
    assert_int_equal(rlpi_cpu_qmatmul(pool, c, a, q, type, m, n, k, 0.0f), RLP_OK);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = 0, mag = 0, tol = 0;
            for (int64_t b = 0; b * 32 < k; b++) {
                double amax = 0, wsum = 0;
                for (int64_t l = b * 32; l < k && l < b * 32 + 32; l++) {
                    amax = fmax(amax, fabs(a[i * k + l]));
                    wsum += fabs(deq[j * k + l]);
                    ref += (double)a[i * k + l] * deq[j * k + l];
                    mag += fabs((double)a[i * k + l] * deq[j * k + l]);
                }
                tol += amax / 127.0 / 2.0 * wsum;
            }
            tol = tol * 1.0001 + 1e-5 * mag + 1e-30;
            double err = fabs(c[i * n + j] - ref);
            if (!(err <= tol))
                fail_msg("%s m=%lld n=%lld k=%lld C[%lld,%lld]=%g ref=%g err=%g tol=%g", type_name(type), (long long)m,
                         (long long)n,
                         (long long)k, (long long)i, (long long)j, c[i * n + j], ref, err, tol);
        }
    /* beta = 1 adds to C */
    for (int64_t i = 0; i < m * n; i++)
        c1[i] = 1.0f;
    assert_int_equal(rlpi_cpu_qmatmul(pool, c1, a, q, type, m, n, k, 1.0f), RLP_OK);
    for (int64_t i = 0; i < m * n; i++)
        assert_true(fabsf(c1[i] - (c[i] + 1.0f)) <= 1e-5f * (1.0f + fabsf(c[i])));
    free(q);
    free(w);
    free(deq);
    free(a);
    free(c);
    free(c1);
}

static void test_against_reference(void **state)
{
    (void)state;
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 2), RLP_OK);
    static const int64_t ks[] = {1, 31, 32, 33, 64, 100, 257, 576};
    static const int64_t ns[] = {1, 2, 5, 16, 67};
    static const int64_t ms[] = {1, 3, 33};
    uint64_t seed = 1;
    for (int isa = RLPI_QMAT_ISA_SCALAR; isa <= RLPI_QMAT_ISA_VNNI512; isa++) {
        rlpi_qmat_force_isa(isa);
        if (rlpi_qmat_isa() != isa)
            continue; /* not on this CPU */
        for (size_t t = 0; t < 2; t++)
            for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
                for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                    for (size_t c = 0; c < sizeof ms / sizeof ms[0]; c++)
                        check_shape(c % 2 ? pool : NULL, TYPES[t], ms[c], ns[b], ks[a], seed++);
    }
    /* a large product: threaded, several row blocks (and the GEMM route
     * with its dequantized tiles from 24 rows on with VNNI) */
    for (size_t t = 0; t < 2; t++)
        check_shape(pool, TYPES[t], 67, 130, 1536, 99);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AUTO);
    rlpi_threadpool_free(pool);
}

/* each SIMD kernel and the scalar one: the same bits */
static void test_simd_equals_scalar(void **state)
{
    (void)state;
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AUTO);
    if (rlpi_qmat_isa() == RLPI_QMAT_ISA_SCALAR) {
        print_message("no AVX2 or AVX512-VNNI on this CPU: only the scalar kernel runs\n");
        skip();
    }
    rlpi_threadpool *pool;
    assert_int_equal(rlpi_threadpool_create(&pool, 2), RLP_OK);
    /* the int8 kernels at every m (each family's own switch to the GEMM
     * route differs) */
    rlpi_qmat_set_gemm_min_rows(1 << 30);
    /* odd n (the AVX2 kernel's row pairs, VNNI's groups of 4), m up to
     * the GEMM route's switch, quants at ±127 and weights at −128 below */
    static const int64_t shapes[][3] = {{1, 67, 576}, {7, 33, 100}, {33, 96, 1536}, {5, 1, 33}, {2, 50, 257}, {3, 3, 64}};
    uint64_t seed = 5;
    int tried = 0;
    const size_t n_shapes = sizeof shapes / sizeof shapes[0];
    for (size_t st = 0; st < 2 * n_shapes; st++) {
        const size_t s = st % n_shapes;
        const int type = TYPES[st / n_shapes];
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *w = malloc((size_t)(n * k) * sizeof *w), *deq = malloc((size_t)(n * k) * sizeof *deq);
        float *a = malloc((size_t)(m * k) * sizeof *a);
        float *c0 = malloc((size_t)(m * n) * sizeof *c0), *c1 = malloc((size_t)(m * n) * sizeof *c1);
        for (int64_t i = 0; i < n * k; i++)
            w[i] = urand(&seed);
        for (int64_t i = 0; i < m * k; i++)
            a[i] = urand(&seed) * 3.0f;
        void *q = make_q(type, w, n, k, deq);
        if (type == RLPI_QMAT_Q8_0 && s == n_shapes - 1) {
            /* the extreme quant −128 (a GGUF file may hold it; our
             * quantizer never writes it): stored as offset binary 0 */
            uint8_t *qb = q;
            for (int64_t i = 0; i < n * rlpi_qmat_kpad(k); i += 3)
                qb[i] = 0;
        }
        rlpi_qmat_force_isa(RLPI_QMAT_ISA_SCALAR);
        assert_int_equal(rlpi_qmat_isa(), RLPI_QMAT_ISA_SCALAR);
        assert_int_equal(rlpi_cpu_qmatmul(pool, c0, a, q, type, m, n, k, 0.0f), RLP_OK);
        for (int isa = RLPI_QMAT_ISA_AVX2; isa <= RLPI_QMAT_ISA_VNNI512; isa++) {
            rlpi_qmat_force_isa(isa);
            if (rlpi_qmat_isa() != isa)
                continue;
            tried |= 1 << isa;
            memset(c1, 0xff, (size_t)(m * n) * sizeof *c1);
            assert_int_equal(rlpi_cpu_qmatmul(pool, c1, a, q, type, m, n, k, 0.0f), RLP_OK);
            if (memcmp(c0, c1, (size_t)(m * n) * sizeof *c0))
                fail_msg("%s: %s kernel differs from the scalar one at m=%lld n=%lld k=%lld", type_name(type),
                         rlpi_qmat_isa_name(isa), (long long)m, (long long)n, (long long)k);
        }
        free(q);
        free(w);
        free(deq);
        free(a);
        free(c0);
        free(c1);
    }
    print_message("compared with the scalar kernel:%s%s\n", tried & (1 << RLPI_QMAT_ISA_AVX2) ? " AVX2" : "",
                  tried & (1 << RLPI_QMAT_ISA_VNNI512) ? " AVX512-VNNI" : "");
    assert_true(tried != 0);
    rlpi_qmat_set_gemm_min_rows(0);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AUTO);
    rlpi_threadpool_free(pool);
}

/* The activation quantizer's corners, each ISA's against the scalar one's
 * bits: an all-zero row, a block of one non-zero, −0, NaN (quantized to
 * 0 and left out of the block's max, as the int8 route documents), exact halves (rounded away from
 * zero), values past the block's max after rounding, a ragged last block
 * (k = 80), and ±inf (whose block scale is inf: NaN outputs, compared as
 * NaN). */
static void test_activation_corners(void **state)
{
    (void)state;
    enum { M = 5, N = 9, K = 80 };
    float a[M * K] = {0}, w[N * K], deq[N * K];
    uint64_t seed = 11;
    for (int i = 0; i < N * K; i++)
        w[i] = urand(&seed);
    a[1 * K + 3] = 1e-30f;                      /* row 1: one tiny value */
    for (int e = 0; e < K; e++)                 /* row 2: halves after scaling by 127 / 127 */
        a[2 * K + e] = (e % 2 ? -1.0f : 1.0f) * (float)(e % 64) + (e % 3 ? 0.5f : 0.0f);
    a[2 * K + 7] = 127.0f;
    a[2 * K + 40] = -127.0f;
    a[2 * K + 75] = 63.5f;
    for (int e = 0; e < K; e++)                 /* row 3: −0, NaN amid ordinary values */
        a[3 * K + e] = urand(&seed) * 5.0f;
    a[3 * K + 0] = -0.0f;
    a[3 * K + 5] = NAN;
    a[3 * K + 20] = NAN; /* both halves of a block */
    a[3 * K + 33] = NAN;
    a[3 * K + 64] = NAN; /* the ragged block */
    for (int e = 0; e < K; e++)                 /* row 4: an infinity in the second block */
        a[4 * K + e] = urand(&seed);
    a[4 * K + 40] = -INFINITY;
    rlpi_qmat_set_gemm_min_rows(1 << 30); /* the int8 route at every ISA (the GEMM one takes fp32 rows) */
    for (size_t t = 0; t < 2; t++) {
        void *q = make_q(TYPES[t], w, N, K, deq);
        float c0[M * N], c1[M * N];
        rlpi_qmat_force_isa(RLPI_QMAT_ISA_SCALAR);
        assert_int_equal(rlpi_cpu_qmatmul(NULL, c0, a, q, TYPES[t], M, N, K, 0.0f), RLP_OK);
        for (int i = 0; i < N; i++) /* the all-zero row gives zeros, the NaN row finite values */
            if (c0[i] != 0.0f || !isfinite(c0[3 * N + i]))
                fail_msg("%s: scalar gives %g on the zero row, %g on the NaN row (col %d)", type_name(TYPES[t]),
                         (double)c0[i], (double)c0[3 * N + i], i);
        for (int isa = RLPI_QMAT_ISA_AVX2; isa <= RLPI_QMAT_ISA_VNNI512; isa++) {
            rlpi_qmat_force_isa(isa);
            if (rlpi_qmat_isa() != isa)
                continue;
            assert_int_equal(rlpi_cpu_qmatmul(NULL, c1, a, q, TYPES[t], M, N, K, 0.0f), RLP_OK);
            for (int i = 0; i < M * N; i++)
                if (!(isnan(c0[i]) && isnan(c1[i])) && memcmp(&c0[i], &c1[i], sizeof c0[i]))
                    fail_msg("%s: %s differs from scalar at row %d col %d: %g vs %g", type_name(TYPES[t]),
                             rlpi_qmat_isa_name(isa), i / N, i % N, (double)c0[i], (double)c1[i]);
        }
        free(q);
    }
    rlpi_qmat_set_gemm_min_rows(0);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AUTO);
}

/* the features can be forced off: by the setter and by the environment */
static void test_dispatch_fallback(void **state)
{
    (void)state;
    /* the CPU's own best, whatever the caller's environment says */
    char *saved = getenv("RLPOST_CPU_FEATURES") ? strdup(getenv("RLPOST_CPU_FEATURES")) : NULL;
    unsetenv("RLPOST_CPU_FEATURES");
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AUTO);
    int best = rlpi_qmat_isa();
    /* each family's own switch to the GEMM route */
    assert_int_equal(rlpi_qmat_gemm_min_rows(), best == RLPI_QMAT_ISA_VNNI512 ? RLPI_QMAT_GEMM_MIN_ROWS_VNNI512
                                                : best == RLPI_QMAT_ISA_AVX2  ? RLPI_QMAT_GEMM_MIN_ROWS_AVX2
                                                                              : RLPI_QMAT_GEMM_MIN_ROWS_SCALAR);
    rlpi_qmat_set_gemm_min_rows(7);
    assert_int_equal(rlpi_qmat_gemm_min_rows(), 7);
    rlpi_qmat_set_gemm_min_rows(0);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_SCALAR);
    assert_int_equal(rlpi_qmat_isa(), RLPI_QMAT_ISA_SCALAR);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AUTO);
    assert_int_equal(rlpi_qmat_isa(), best);
    setenv("RLPOST_CPU_FEATURES", "none", 1);
    assert_int_equal(rlpi_qmat_isa(), RLPI_QMAT_ISA_SCALAR);
    setenv("RLPOST_CPU_FEATURES", "avx2,avx512bf16,avx512vnni", 1);
    assert_int_equal(rlpi_qmat_isa(), best);
    setenv("RLPOST_CPU_FEATURES", "all", 1);
    assert_int_equal(rlpi_qmat_isa(), best);
    /* without avx512vnni in the list, a VNNI CPU falls back to AVX2 */
    setenv("RLPOST_CPU_FEATURES", "avx2", 1);
    assert_int_equal(rlpi_qmat_isa(), best >= RLPI_QMAT_ISA_AVX2 ? RLPI_QMAT_ISA_AVX2 : RLPI_QMAT_ISA_SCALAR);
    setenv("RLPOST_CPU_FEATURES", "avx512vnni", 1);
    assert_int_equal(rlpi_qmat_isa(), best == RLPI_QMAT_ISA_VNNI512 ? best : RLPI_QMAT_ISA_SCALAR);
    unsetenv("RLPOST_CPU_FEATURES");
    /* forcing a kernel the CPU lacks gives the best it has below it */
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_VNNI512);
    assert_int_equal(rlpi_qmat_isa(), best);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AVX2);
    assert_int_equal(rlpi_qmat_isa(), best >= RLPI_QMAT_ISA_AVX2 ? RLPI_QMAT_ISA_AVX2 : RLPI_QMAT_ISA_SCALAR);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_SCALAR);
    assert_int_equal(rlpi_qmat_gemm_min_rows(), RLPI_QMAT_GEMM_MIN_ROWS_SCALAR);
    if (saved)
        setenv("RLPOST_CPU_FEATURES", saved, 1);
    free(saved);
    rlpi_qmat_force_isa(RLPI_QMAT_ISA_AUTO);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    rlpi_backend *be;
    assert_int_equal(rlpi_backend_cpu_create(&be, 1), RLP_OK);
    assert_true(rlpi_op_qmatmul_available(be));
    rlpi_buffer *a, *c, *w;
    assert_int_equal(rlpi_buffer_alloc(be, 4 * 64, &a), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, 4 * 8, &c), RLP_OK);
    size_t wb = rlpi_qmat_bytes(RLPI_QMAT_Q8_0, 8, 64);
    assert_int_equal(wb, 8 * 64 + 8 * 2 * 4);
    assert_int_equal(rlpi_qmat_bytes(RLPI_QMAT_Q4_0, 8, 64), 8 * 32 + 8 * 2 * 4);
    assert_int_equal(rlpi_qmat_bytes(RLPI_QMAT_Q4_0, 3, 65), 3 * 64 + 3 * 4 * 4);
    assert_int_equal(rlpi_qmat_bytes(3, 8, 64), 0);
    assert_int_equal(rlpi_buffer_alloc(be, wb, &w), RLP_OK);
    memset(rlpi_buffer_host(w), 0x80, wb);
    assert_int_equal(rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), w, 0, RLPI_QMAT_Q8_0, 1, 8, 64, 0.0f),
                     RLP_OK);
    assert_int_equal(rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), w, 4, RLPI_QMAT_Q8_0, 1, 8, 64, 0.0f),
                     RLP_E_INVALID_ARG); /* past the end */
    assert_int_equal(rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), w, wb - 320, RLPI_QMAT_Q4_0, 1, 8, 64, 0.0f),
                     RLP_OK); /* Q4_0's 320 bytes at the buffer's end */
    assert_int_equal(rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), w, wb - 319, RLPI_QMAT_Q4_0, 1, 8, 64, 0.0f),
                     RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), w, 0, 7, 1, 8, 64, 0.0f),
                     RLP_E_INVALID_ARG); /* type */
    assert_int_equal(rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), w, 0, RLPI_QMAT_Q8_0, 2, 8, 64, 0.0f),
                     RLP_E_INVALID_ARG); /* C too small */
    assert_int_equal(rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), w, 0, RLPI_QMAT_Q8_0, 1, 8, 64, 0.5f),
                     RLP_E_INVALID_ARG); /* beta */
    assert_int_equal(rlpi_cpu_qmatmul(NULL, NULL, NULL, NULL, 3, 1, 1, 1, 0.0f), RLP_E_INVALID_ARG);
    rlpi_buffer_free(a);
    rlpi_buffer_free(c);
    rlpi_buffer_free(w);
    rlpi_backend_destroy(be);
}

/* ---- the rollout copy in decode ---- */

typedef struct model {
    rlpi_backend *be;
    rlpi_transformer *tf;
    rlpi_model_config cfg;
} model;

static void model_make(model *f, const char *arch, bool tied, uint64_t seed)
{
    assert_int_equal(rlpi_backend_cpu_create(&f->be, 2), RLP_OK);
    tiny_config(&f->cfg, arch, tied);
    rlpi_weights w;
    assert_int_equal(tiny_weights(&f->cfg, &w, seed), RLP_OK);
    rlpi_transformer_options o = {.frozen = true};
    assert_int_equal(rlpi_transformer_create(&f->tf, f->be, &f->cfg, &w, &o), RLP_OK);
    rlpi_weights_free(&w);
}

static void model_drop(model *f)
{
    rlpi_transformer_free(f->tf);
    rlpi_backend_destroy(f->be);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static double log_softmax_at(const float *x, int n, int t)
{
    double mx = x[argmax(x, n)], s = 0;
    for (int i = 0; i < n; i++)
        s += exp((double)x[i] - mx);
    return (double)x[t] - mx - log(s);
}

/* greedy decode of `steps` tokens after a prompt (2 sequences at once) with
 * the copy `qw` (NULL = fp32); tokens out (2, steps), logits of the chosen
 * tokens' log-probabilities under this model in lp (2, steps) */
static void greedy(model *f, const rlpi_qweights *qw, const int32_t *forced, int steps, int32_t *out, double *lp)
{
    const int V = f->cfg.vocab_size;
    rlpi_kv_cache *kv;
    assert_int_equal(rlpi_kv_cache_create(&kv, f->tf, 2, 64), RLP_OK);
    rlpi_kv_cache_set_qweights(kv, qw);
    int32_t prompt[2][6] = {{1, 5, 9, 13, 17, 21}, {1, 40, 3}};
    int64_t qs[3] = {0, 6, 9}, slot[2] = {1, 0}, past[2] = {0, 0};
    int32_t tok[9];
    memcpy(tok, prompt[0], 6 * sizeof *tok);
    memcpy(tok + 6, prompt[1], 3 * sizeof *tok);
    float *logits = malloc((size_t)2 * V * sizeof *logits);
    assert_int_equal(rlpi_transformer_extend(f->tf, kv, 2, qs, slot, past, tok, logits), RLP_OK);
    past[0] = 6;
    past[1] = 3;
    for (int t = 0; t < steps; t++) {
        int32_t next[2];
        for (int s = 0; s < 2; s++) {
            out[s * steps + t] = argmax(logits + s * V, V);
            /* continue both runs on the same tokens (the reference's), so
             * one disagreement does not change the contexts after it */
            next[s] = forced ? forced[s * steps + t] : out[s * steps + t];
            lp[s * steps + t] = log_softmax_at(logits + s * V, V, next[s]);
        }
        int64_t q1[3] = {0, 1, 2};
        assert_int_equal(rlpi_transformer_extend(f->tf, kv, 2, q1, slot, past, next, logits), RLP_OK);
        past[0]++;
        past[1]++;
    }
    free(logits);
    rlpi_kv_cache_free(kv);
}

/* Q8_0: token agreement ≥ 85 % and |Δ logprob| ≤ 0.3 nats on 2 × 24
 * greedy tokens. The tiny models' weights are uniform in [-1, 1), so
 * logits spread over ±10 or more and the ~0.5 % relative error of int8
 * weights and activations (half a step of 1/127 of each block's max,
 * twice) moves them by up to ~0.1 (measured: 0.13–0.19 nats worst case,
 * 44–48 of 48 tokens). Q4_0 layers: a weight's step is 1/8 of its block's
 * max instead of 1/127 (16× coarser; uniform weights are the worst case for
 * it): measured 30–47 of 48 tokens and 0.13–3.1 nats over the five models,
 * so the bounds (≥ 50 %, ≤ 4 nats) only catch a miswired copy (a wrong
 * type or offset decodes garbage); the products themselves are checked
 * against the double reference above and the bytes against GGUF's Q4_0 in
 * test_requantize. */
static void check_decode(const char *arch, bool tied, int type)
{
    model f;
    model_make(&f, arch, tied, 42);
    rlpi_qweights *qw;
    assert_int_equal(rlpi_qweights_create(&qw, f.tf, type), RLP_OK);
    assert_true(rlpi_qweights_bytes(qw) > 0);
    enum { STEPS = 24 };
    int32_t ref[2 * STEPS], got[2 * STEPS];
    double lref[2 * STEPS], lgot[2 * STEPS];
    greedy(&f, NULL, NULL, STEPS, ref, lref);
    greedy(&f, qw, ref, STEPS, got, lgot);
    int agree = 0;
    double worst = 0;
    for (int i = 0; i < 2 * STEPS; i++) {
        agree += got[i] == ref[i];
        worst = fmax(worst, fabs(lgot[i] - lref[i]));
    }
    print_message("%s%s, %s: %d/%d greedy tokens agree, max |Δ logprob| %.4f\n", arch, tied ? " (tied)" : "",
                  type_name(type), agree, 2 * STEPS, worst);
    const bool q4 = type == RLPI_QMAT_Q4_0;
    assert_true(agree >= 2 * STEPS * (q4 ? 50 : 85) / 100);
    assert_true(worst <= (q4 ? 4.0 : 0.3));
    rlpi_qweights_free(qw);
    model_drop(&f);
}

static void test_decode_llama(void **state)
{
    (void)state;
    for (size_t t = 0; t < 2; t++) {
        check_decode("llama", true, TYPES[t]);
        check_decode("llama", false, TYPES[t]);
    }
}

static void test_decode_families(void **state)
{
    (void)state;
    for (size_t t = 0; t < 2; t++) {
        check_decode("qwen2", false, TYPES[t]); /* QKV bias */
        check_decode("qwen3", true, TYPES[t]);  /* q/k norms */
        check_decode("gemma3", true, TYPES[t]); /* post norms, GeGLU, sliding window, soft cap off */
    }
}

/* the tiny tied Llama and its Q8_0 rollout copy */
static rlpi_qweights *tied_llama_with_copy(model *f)
{
    model_make(f, "llama", true, 42);
    rlpi_qweights *qw;
    assert_int_equal(rlpi_qweights_create(&qw, f->tf, RLPI_QMAT_Q8_0), RLP_OK);
    return qw;
}

/* The KV-cached forward uses the copy only below the kernels' switch to
 * the GEMM route: a batch of that many one-token sequences (every product,
 * the head's too, has that many rows) gives exactly the fp32 logits; one
 * sequence fewer gives the copy's. */
static void test_decode_switch(void **state)
{
    (void)state;
    model f;
    rlpi_qweights *qw = tied_llama_with_copy(&f);
    const int V = f.cfg.vocab_size;
    int64_t sw = rlpi_qmat_gemm_min_rows();
    assert_true(sw >= 2 && sw <= 64);
    int32_t tok[64];
    int64_t qs[65], slot[64], past[64] = {0};
    for (int i = 0; i < 64; i++) {
        tok[i] = (i * 7 + 3) % V;
        qs[i] = i;
        slot[i] = i;
    }
    qs[64] = 64;
    float *lf = malloc((size_t)64 * V * sizeof(float)), *lq = malloc((size_t)64 * V * sizeof(float));
    for (int64_t n = sw - 1; n <= sw; n++) {
        float *outs[2] = {lf, lq};
        qs[n] = n;
        for (int q = 0; q < 2; q++) {
            rlpi_kv_cache *kv;
            assert_int_equal(rlpi_kv_cache_create(&kv, f.tf, n, 8), RLP_OK);
            rlpi_kv_cache_set_qweights(kv, q ? qw : NULL);
            assert_int_equal(rlpi_transformer_extend(f.tf, kv, n, qs, slot, past, tok, outs[q]), RLP_OK);
            rlpi_kv_cache_free(kv);
        }
        bool same = !memcmp(lf, lq, (size_t)(n * V) * sizeof(float));
        print_message("%lld one-token sequences (switch %lld): %s\n", (long long)n, (long long)sw,
                      same ? "fp32 weights" : "the Q8_0 copy");
        assert_int_equal(same, n >= sw);
    }
    free(lf);
    free(lq);
    rlpi_qweights_free(qw);
    model_drop(&f);
}

/* the copy packs exactly GGUF's Q8_0 of the fp32 weights, and after new
 * weights decode follows them once the copy is updated */
static void test_requantize(void **state)
{
    (void)state;
    model f;
    rlpi_qweights *qw = tied_llama_with_copy(&f);
    const int V = f.cfg.vocab_size;
    assert_int_equal(qw->updates, 1);
    rlpi_kv_cache *kv;
    assert_int_equal(rlpi_kv_cache_create(&kv, f.tf, 1, 16), RLP_OK);
    rlpi_kv_cache_set_qweights(kv, qw);
    int32_t tok[4] = {1, 7, 8, 9};
    int64_t qs[2] = {0, 4}, slot[1] = {0}, past[1] = {0};
    float *old_q = malloc((size_t)V * sizeof(float)), *now = malloc((size_t)V * sizeof(float));
    float *new_f = malloc((size_t)V * sizeof(float));
    assert_int_equal(rlpi_transformer_extend(f.tf, kv, 1, qs, slot, past, tok, old_q), RLP_OK);

    /* new weights in the transformer (norms and embeddings are read from it
     * live; the stale copy still has the old linear weights) */
    rlpi_weights w;
    assert_int_equal(tiny_weights(&f.cfg, &w, 4242), RLP_OK);
    assert_int_equal(rlpi_transformer_set_weights(f.tf, &w), RLP_OK);
    rlpi_weights_free(&w);
    float *stale = malloc((size_t)V * sizeof(float));
    assert_int_equal(rlpi_transformer_extend(f.tf, kv, 1, qs, slot, past, tok, stale), RLP_OK);
    rlpi_kv_cache_set_qweights(kv, NULL);
    assert_int_equal(rlpi_transformer_extend(f.tf, kv, 1, qs, slot, past, tok, new_f), RLP_OK);

    /* updated: close to the new fp32 logits, far from the old */
    assert_int_equal(rlpi_qweights_update(qw, f.tf), RLP_OK);
    assert_int_equal(qw->updates, 2);
    rlpi_kv_cache_set_qweights(kv, qw);
    assert_int_equal(rlpi_transformer_extend(f.tf, kv, 1, qs, slot, past, tok, now), RLP_OK);
    double d_new = 0, d_old = 0, d_stale = 0;
    for (int i = 0; i < V; i++) {
        d_new = fmax(d_new, fabs(now[i] - new_f[i]));
        d_old = fmax(d_old, fabs(now[i] - old_q[i]));
        d_stale = fmax(d_stale, fabs(stale[i] - new_f[i]));
    }
    print_message("max |Δ logit| to the new fp32: updated copy %.4f, stale copy %.4f; updated to old %.4f\n", d_new,
                  d_stale, d_old);
    assert_true(d_new < 0.3);
    assert_true(d_old > 10 * d_new);
    assert_true(d_stale > 10 * d_new);
    free(stale);

    /* the copy holds GGUF's Q8_0 (quant.c's quantizer, repacked) of the head
     * (the tied embedding, k = 32) and of a down projection (k = 48) */
    const struct {
        const char *name;
        size_t off;
    } mats[] = {{"embed_tokens", qw->head}, {"layers.1.mlp.down_proj", qw->layers[1].wd}};
    for (size_t m = 0; m < 2; m++) {
        const rlpi_param_info *pi = NULL;
        for (size_t i = 0; i < rlpi_transformer_n_tensors(f.tf); i++)
            if (strstr(rlpi_transformer_tensor(f.tf, i)->name, mats[m].name))
                pi = rlpi_transformer_tensor(f.tf, i);
        assert_non_null(pi);
        const float *E = (const float *)rlpi_buffer_host(rlpi_transformer_params(f.tf)) + pi->offset;
        int64_t rows = pi->shape[0], cols = pi->shape[1];
        float *deq = malloc((size_t)(rows * cols) * sizeof *deq);
        void *packed = make_q(RLPI_QMAT_Q8_0, E, rows, cols, deq);
        size_t bytes = rlpi_qmat_bytes(RLPI_QMAT_Q8_0, rows, cols);
        assert_memory_equal((const char *)rlpi_buffer_host(qw->buf) + mats[m].off, packed, bytes);
        free(packed);
        free(deq);
    }
    /* a Q4_0 copy: GGUF's Q4_0 of every layer matrix (the stacked QKV and
     * gate-up too: their parts quantized row by row), GGUF's Q8_0 of the head */
    rlpi_qweights *q4;
    assert_int_equal(rlpi_qweights_create(&q4, f.tf, RLPI_QMAT_Q4_0), RLP_OK);
    assert_int_equal(q4->type, RLPI_QMAT_Q4_0);
    assert_int_equal(q4->head_type, RLPI_QMAT_Q8_0);
    assert_true(rlpi_qweights_bytes(q4) < rlpi_qweights_bytes(qw));
    const float *P = rlpi_buffer_host(rlpi_transformer_params(f.tf));
    for (int l = 0; l < f.cfg.n_layers; l++) {
        const struct {
            const char *parts[3];
            size_t off;
        } lm[] = {{{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, q4->layers[l].qkv},
                  {{"self_attn.o_proj"}, q4->layers[l].wo},
                  {{"mlp.gate_proj", "mlp.up_proj"}, q4->layers[l].gu},
                  {{"mlp.down_proj"}, q4->layers[l].wd}};
        for (size_t m = 0; m < 4; m++) {
            /* the matrix: its parts' rows one after another */
            float *W = NULL;
            int64_t rows = 0, cols = 0;
            for (int pt = 0; pt < 3 && lm[m].parts[pt]; pt++) {
                char name[96];
                snprintf(name, sizeof name, "layers.%d.%s", l, lm[m].parts[pt]);
                const rlpi_param_info *pi = NULL;
                for (size_t i = 0; i < rlpi_transformer_n_tensors(f.tf); i++)
                    if (strstr(rlpi_transformer_tensor(f.tf, i)->name, name))
                        pi = rlpi_transformer_tensor(f.tf, i);
                assert_non_null(pi);
                cols = pi->shape[1];
                W = realloc(W, (size_t)((rows + pi->shape[0]) * cols) * sizeof *W);
                assert_non_null(W);
                memcpy(W + rows * cols, P + pi->offset, (size_t)(pi->shape[0] * cols) * sizeof *W);
                rows += pi->shape[0];
            }
            float *deq = malloc((size_t)(rows * cols) * sizeof *deq);
            void *packed = make_q(RLPI_QMAT_Q4_0, W, rows, cols, deq);
            if (memcmp((const char *)rlpi_buffer_host(q4->buf) + lm[m].off, packed,
                       rlpi_qmat_bytes(RLPI_QMAT_Q4_0, rows, cols)))
                fail_msg("layer %d, %s: the Q4_0 copy differs from GGUF's Q4_0", l, lm[m].parts[0]);
            free(packed);
            free(deq);
            free(W);
        }
    }
    {
        const rlpi_param_info *pi = NULL;
        for (size_t i = 0; i < rlpi_transformer_n_tensors(f.tf); i++)
            if (strstr(rlpi_transformer_tensor(f.tf, i)->name, "embed_tokens"))
                pi = rlpi_transformer_tensor(f.tf, i);
        float *deq = malloc((size_t)(pi->shape[0] * pi->shape[1]) * sizeof *deq);
        void *packed = make_q(RLPI_QMAT_Q8_0, P + pi->offset, pi->shape[0], pi->shape[1], deq);
        assert_memory_equal((const char *)rlpi_buffer_host(q4->buf) + q4->head, packed,
                            rlpi_qmat_bytes(RLPI_QMAT_Q8_0, pi->shape[0], pi->shape[1]));
        free(packed);
        free(deq);
    }
    rlpi_qweights_free(q4);
    free(old_q);
    free(now);
    free(new_f);
    rlpi_kv_cache_free(kv);
    rlpi_qweights_free(qw);
    model_drop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference), cmocka_unit_test(test_simd_equals_scalar),
        cmocka_unit_test(test_activation_corners),
        cmocka_unit_test(test_dispatch_fallback), cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_decode_llama),      cmocka_unit_test(test_decode_families), cmocka_unit_test(test_decode_switch),
        cmocka_unit_test(test_requantize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
