/* Int8 products of quantized weights (qmat.h) with fp32 activations.
 *
 * Both kernels compute, for output (i, j), 16 fp32 lane sums: lane l of
 * block pair p takes block b = 2p + l/8 and the 4 elements 4(l%8)..+3 of
 * it, forms t = Σ (q_w + 128)·q_a − 128·Σ q_a exactly in int32 (VNNI's
 * unsigned × signed vpdpbusd on the offset-binary weights, seeded with the
 * precomputed correction), and adds (float)t · (d_w · d_a) to its lane; the
 * 16 lanes are then summed in lane order. The scalar kernel does exactly
 * these operations, so the two agree bit for bit. FP contraction is off in
 * ISO C mode with GCC (and by pragma for clang), which that equality needs. */
#include "backend/qmat.h"

#include "core/error.h"
#include "core/threadpool.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define QMAT_X86 1
#include <immintrin.h>
#endif

/* activation rows handled against one weight row before moving on: their
 * quants, corrections and scales (3·kp bytes a row) stay in L1/L2 while a
 * task's weight rows stream past */
#define ROW_BLOCK 32
/* below this many multiply-adds the product runs on the calling thread */
#define SPLIT_MIN_MACS (1 << 17)

size_t rlpi_qmat_bytes(int type, int64_t n, int64_t k)
{
    if (type != RLPI_QMAT_Q8_0 || n < 1 || k < 1)
        return 0;
    int64_t kp = rlpi_qmat_kpad(k);
    return (size_t)n * (size_t)kp + (size_t)n * (size_t)(kp / 32) * sizeof(float);
}

/* IEEE binary16 to fp32 (the Q8_0 scales; normal, subnormal, inf/NaN). */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    float f;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

void rlpi_qmat_pack_q8_0(void *dst, int64_t n, int64_t k, int64_t row0, int64_t rows, const void *blocks)
{
    int64_t kp = rlpi_qmat_kpad(k), kb = kp / 32, nb = (k + 31) / 32;
    uint8_t *q = dst;
    float *s = (float *)(q + (size_t)n * (size_t)kp);
    const uint8_t *src = blocks;
    for (int64_t r = 0; r < rows; r++) {
        int64_t j = row0 + r;
        uint8_t *qj = q + (size_t)j * (size_t)kp;
        float *sj = s + (size_t)j * (size_t)kb;
        for (int64_t b = 0; b < kb; b++) {
            if (b < nb) {
                const uint8_t *blk = src + (size_t)(r * nb + b) * 34;
                sj[b] = half_to_float((uint16_t)(blk[0] | blk[1] << 8));
                for (int i = 0; i < 32; i++)
                    qj[b * 32 + i] = (uint8_t)(blk[2 + i] ^ 0x80u);
            } else {
                sj[b] = 0.0f;
                memset(qj + b * 32, 0x80, 32);
            }
        }
    }
}

/* ---- dispatch ---- */

static int forced = RLPI_QMAT_ISA_AUTO;

static int cpu_best(void)
{
    static int best = -1;
    int b = __atomic_load_n(&best, __ATOMIC_RELAXED);
    if (b < 0) {
        b = RLPI_QMAT_ISA_SCALAR;
#if QMAT_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
            b = RLPI_QMAT_ISA_VNNI512;
#endif
        __atomic_store_n(&best, b, __ATOMIC_RELAXED);
    }
    return b;
}

int rlpi_qmat_isa(void)
{
    int b = cpu_best();
    /* RLPOST_CPU_FEATURES lists what may be used ("all", "none",
     * "avx512vnni,..."): without avx512vnni the scalar kernel runs. Read
     * at every product so a test can flip it. */
    const char *env = getenv("RLPOST_CPU_FEATURES");
    if (env && b == RLPI_QMAT_ISA_VNNI512 && !strstr(env, "avx512vnni") && !strstr(env, "all"))
        b = RLPI_QMAT_ISA_SCALAR;
    return forced == RLPI_QMAT_ISA_AUTO || forced > b ? b : forced;
}

void rlpi_qmat_force_isa(int isa)
{
    forced = isa;
}

/* ---- activations ---- */

/* One product's quantized activations: row i has quants qa + i·kp, the
 * negated lane corrections −128·Σ of each 4 quants at corr + i·kb·8, and
 * its block scales repeated over the 8 lanes of the block at da + i·kb·8. */
typedef struct qact {
    int64_t m, k, kp, kb;
    int8_t *qa;
    int32_t *corr;
    float *da;
} qact;

static void quantize_rows(void *arg, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const void *const *p = arg;
    qact *A = (qact *)p[0];
    const float *a = p[1];
    for (int64_t i = begin; i < end; i++) {
        const float *x = a + i * A->k;
        int8_t *q = A->qa + i * A->kp;
        int32_t *corr = A->corr + i * A->kb * 8;
        float *da = A->da + i * A->kb * 8;
        for (int64_t b = 0; b < A->kb; b++) {
            int64_t lo = b * 32, hi = lo + 32 < A->k ? lo + 32 : A->k;
            float amax = 0.0f;
            for (int64_t e = lo; e < hi; e++) {
                float v = x[e] < 0 ? -x[e] : x[e];
                amax = v > amax ? v : amax;
            }
            float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            for (int64_t e = 0; e < 32; e++) {
                float v = lo + e < hi ? x[lo + e] * id : 0.0f;
                /* round half away from zero, |v| ≤ 127 (+ rounding) */
                int iv = (int)(v + (v >= 0.0f ? 0.5f : -0.5f));
                iv = iv > 127 ? 127 : iv < -127 ? -127 : iv;
                q[lo + e] = (int8_t)iv;
            }
            for (int g = 0; g < 8; g++) {
                int32_t sum = 0;
                for (int e = 0; e < 4; e++)
                    sum += q[lo + 4 * g + e];
                corr[b * 8 + g] = -128 * sum;
                da[b * 8 + g] = d;
            }
        }
    }
}

/* ---- products ---- */

typedef struct qjob {
    const qact *A;
    const uint8_t *wq;  /* (n, kp) */
    const float *ws;    /* (n, kb) */
    float *c;
    int64_t n, chunk;
    float beta;
    float *dw;          /* per thread: kb·8 expanded weight scales */
    int isa;
} qjob;

static void expand_scales(float *dw, const float *ws, int64_t kb)
{
    for (int64_t b = 0; b < kb; b++)
        for (int g = 0; g < 8; g++)
            dw[b * 8 + g] = ws[b];
}

static void store(float *c, float sum, float beta)
{
    *c = beta != 0.0f ? *c + sum : sum;
}

static void rows_scalar(const qjob *J, const float *dw, int64_t j, int64_t r0, int64_t r1)
{
    const qact *A = J->A;
    const uint8_t *wq = J->wq + j * A->kp;
    for (int64_t i = r0; i < r1; i++) {
        const int8_t *qa = A->qa + i * A->kp;
        const int32_t *corr = A->corr + i * A->kb * 8;
        const float *da = A->da + i * A->kb * 8;
        float acc[16] = {0};
        for (int64_t p = 0; p < A->kb / 2; p++) {
            for (int l = 0; l < 16; l++) {
                int64_t e = p * 64 + 4 * l; /* lane l's four bytes */
                int32_t t = corr[p * 16 + l];
                for (int u = 0; u < 4; u++)
                    t += (int32_t)wq[e + u] * (int32_t)qa[e + u];
                float s = dw[p * 16 + l] * da[p * 16 + l];
                acc[l] = acc[l] + (float)t * s;
            }
        }
        float sum = 0.0f;
        for (int l = 0; l < 16; l++)
            sum += acc[l];
        store(J->c + i * J->n + j, sum, J->beta);
    }
}

#if QMAT_X86
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
rows_vnni(const qjob *J, const float *dw, int64_t j, int64_t r0, int64_t r1)
{
    const qact *A = J->A;
    const uint8_t *wq = J->wq + j * A->kp;
    int64_t pairs = A->kb / 2;
    for (int64_t i = r0; i < r1; i++) {
        const int8_t *qa = A->qa + i * A->kp;
        const int32_t *corr = A->corr + i * A->kb * 8;
        const float *da = A->da + i * A->kb * 8;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t p = 0; p < pairs; p++) {
            __m512i t = _mm512_dpbusd_epi32(_mm512_loadu_si512(corr + p * 16), _mm512_loadu_si512(wq + p * 64),
                                            _mm512_loadu_si512(qa + p * 64));
            __m512 s = _mm512_mul_ps(_mm512_loadu_ps(dw + p * 16), _mm512_loadu_ps(da + p * 16));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(t), s));
        }
        float lanes[16];
        _mm512_storeu_ps(lanes, acc);
        float sum = 0.0f;
        for (int l = 0; l < 16; l++)
            sum += lanes[l];
        store(J->c + i * J->n + j, sum, J->beta);
    }
}
#endif

static void run_chunk(void *arg, int64_t task, int tid)
{
    const qjob *J = arg;
    const qact *A = J->A;
    float *dw = J->dw + (size_t)tid * (size_t)A->kb * 8;
    int64_t j0 = task * J->chunk, j1 = j0 + J->chunk < J->n ? j0 + J->chunk : J->n;
    for (int64_t r0 = 0; r0 < A->m; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < A->m ? r0 + ROW_BLOCK : A->m;
        for (int64_t j = j0; j < j1; j++) {
            expand_scales(dw, J->ws + j * A->kb, A->kb);
#if QMAT_X86
            if (J->isa == RLPI_QMAT_ISA_VNNI512) {
                rows_vnni(J, dw, j, r0, r1);
                continue;
            }
#endif
            rows_scalar(J, dw, j, r0, r1);
        }
    }
}

int rlpi_cpu_qmatmul(struct rlpi_threadpool *pool, float *c, const float *a, const void *w, int type, int64_t m,
                     int64_t n, int64_t k, float beta)
{
    if (type != RLPI_QMAT_Q8_0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized matmul: unknown weight type %d", type);
    if (m < 1 || n < 1 || k < 1)
        return RLP_OK;
    int threads = pool ? rlpi_threadpool_size(pool) : 1;
    int64_t kp = rlpi_qmat_kpad(k), kb = kp / 32;
    qact A = {.m = m, .k = k, .kp = kp, .kb = kb};
    size_t qbytes = (size_t)m * (size_t)kp;
    /* one block: quants, then corrections and scales (4-byte aligned: kp is a multiple of 64) */
    char *mem = malloc(qbytes + (size_t)m * (size_t)kb * 8 * 8 + (size_t)threads * (size_t)kb * 8 * sizeof(float));
    if (!mem)
        return rlpi_error_set(RLP_E_NOMEM, "quantized matmul: cannot allocate the activation scratch of %lld rows",
                              (long long)m);
    A.qa = (int8_t *)mem;
    A.corr = (int32_t *)(mem + qbytes);
    A.da = (float *)(mem + qbytes + (size_t)m * (size_t)kb * 8 * 4);
    float *dw = (float *)(mem + qbytes + (size_t)m * (size_t)kb * 8 * 8);
    double macs = (double)m * (double)n * (double)kp;
    bool split = threads > 1 && macs >= SPLIT_MIN_MACS;
    const void *qargs[2] = {&A, a};
    if (split && m >= 8)
        rlpi_threadpool_parallel_for(pool, m, 4, quantize_rows, (void *)qargs);
    else
        quantize_rows((void *)qargs, 0, m, 0);
    const uint8_t *wq = w;
    qjob J = {.A = &A, .wq = wq, .ws = (const float *)(wq + (size_t)n * (size_t)kp), .c = c, .n = n,
              .beta = beta, .dw = dw, .isa = rlpi_qmat_isa()};
    if (!split) {
        J.chunk = n;
        run_chunk(&J, 0, 0);
    } else {
        /* about 8 tasks a thread for the dynamic scheduler to even out */
        int64_t chunk = (n + 8 * threads - 1) / (8 * threads);
        J.chunk = chunk < 4 ? 4 : chunk;
        rlpi_threadpool_run_tasks(pool, (n + J.chunk - 1) / J.chunk, run_chunk, &J);
    }
    free(mem);
    return RLP_OK;
}
