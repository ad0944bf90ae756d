/* Int8 products of quantized weights (qmat.h) with fp32 activations.
 *
 * All three kernels compute, for output (i, j), 16 fp32 lane sums: lane l
 * of block pair p takes block b = 2p + l/8 and the 4 elements 4(l%8)..+3
 * of it, forms t = Σ q_w·q_a of those 4 exactly in int32 (VNNI: unsigned ×
 * signed vpdpbusd on the offset-binary weights q_w + 128, seeded with the
 * precomputed correction −128·Σ q_a; AVX2: vpmaddubsw of |q_w| and q_a
 * with q_w's sign, then vpmaddwd), and adds (float)t · (d_w · d_a) to its
 * lane; the 16 lanes are then summed in lane order. Q4_0 weights (qmat.h)
 * enter as their nibbles: VNNI multiplies q_w + 8 and seeds with −8·Σ q_a,
 * AVX2 and the scalar kernel use q_w = nibble − 8; the sums t are the same
 * integers either way. The scalar kernel does
 * exactly these operations, so all agree bit for bit. FP contraction is off in
 * ISO C mode with GCC (and by pragma for clang), which that equality needs. */
#include "backend/qmat.h"

#include "core/error.h"
#include "core/threadpool.h"

#include <cblas.h>
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

size_t rlpi_qmat_row_bytes(int type, int64_t k)
{
    int64_t kp = rlpi_qmat_kpad(k);
    return type == RLPI_QMAT_Q8_0 ? (size_t)kp : type == RLPI_QMAT_Q4_0 ? (size_t)kp / 2 : 0;
}

size_t rlpi_qmat_bytes(int type, int64_t n, int64_t k)
{
    size_t row = n < 1 || k < 1 ? 0 : rlpi_qmat_row_bytes(type, k); /* 0: unknown type */
    if (!row)
        return 0;
    return (size_t)n * row + (size_t)n * (size_t)(rlpi_qmat_kpad(k) / 32) * sizeof(float);
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

/* the unsigned nibble (q + 8) of element e of a GGUF Q4_0 block's qs */
static unsigned q4_0_nibble(const uint8_t *qs, int e)
{
    return e < 16 ? qs[e] & 0x0fu : qs[e - 16] >> 4;
}

void rlpi_qmat_pack_q4_0(void *dst, int64_t n, int64_t k, int64_t row0, int64_t rows, const void *blocks)
{
    int64_t kp = rlpi_qmat_kpad(k), kb = kp / 32, nb = (k + 31) / 32;
    uint8_t *q = dst;
    float *s = (float *)(q + (size_t)n * (size_t)(kp / 2));
    const uint8_t *src = blocks;
    for (int64_t r = 0; r < rows; r++) {
        int64_t j = row0 + r;
        uint8_t *qj = q + (size_t)j * (size_t)(kp / 2);
        float *sj = s + (size_t)j * (size_t)kb;
        for (int64_t b = 0; b < kb; b++) {
            const uint8_t *blk = b < nb ? src + (size_t)(r * nb + b) * 18 : NULL;
            sj[b] = blk ? half_to_float((uint16_t)(blk[0] | blk[1] << 8)) : 0.0f;
            /* block b is elements 32·(b % 2).. of its pair */
            for (int i = 0; i < 32; i++)
                rlpi_qmat_q4_set(qj + (b / 2) * 32, (int)(b % 2) * 32 + i, blk ? q4_0_nibble(blk + 2, i) : 8u);
        }
    }
}

/* ---- dispatch ---- */

static int forced = RLPI_QMAT_ISA_AUTO;
static int64_t gemm_min_rows; /* 0: the kernel family's own */

void rlpi_qmat_set_gemm_min_rows(int64_t rows)
{
    gemm_min_rows = rows > 0 ? rows : 0;
}

/* What the CPU has, as a kernel family bit set: bit 1 AVX2, bit 2 AVX512-VNNI. */
static int cpu_features(void)
{
    static int feats = -1;
    int f = __atomic_load_n(&feats, __ATOMIC_RELAXED);
    if (f < 0) {
        f = 0;
#if QMAT_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2"))
            f |= 1 << RLPI_QMAT_ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
            f |= 1 << RLPI_QMAT_ISA_VNNI512;
#endif
        __atomic_store_n(&feats, f, __ATOMIC_RELAXED);
    }
    return f;
}

int rlpi_qmat_isa(void)
{
    int f = cpu_features();
    /* RLPOST_CPU_FEATURES lists what may be used ("all", "none",
     * "avx2,avx512vnni,..."): a family runs only if its name is listed.
     * Read at every product so a test can flip it. */
    const char *env = getenv("RLPOST_CPU_FEATURES");
    if (env && !strstr(env, "all")) {
        if (!strstr(env, "avx512vnni"))
            f &= ~(1 << RLPI_QMAT_ISA_VNNI512);
        if (!strstr(env, "avx2"))
            f &= ~(1 << RLPI_QMAT_ISA_AVX2);
    }
    /* forcing a family the CPU (or the environment) lacks gives the best
     * family below it that is there */
    int top = forced == RLPI_QMAT_ISA_AUTO ? RLPI_QMAT_ISA_VNNI512 : forced;
    for (int b = top; b > RLPI_QMAT_ISA_SCALAR; b--)
        if (f & (1 << b))
            return b;
    return RLPI_QMAT_ISA_SCALAR;
}

const char *rlpi_qmat_isa_name(int isa)
{
    return isa == RLPI_QMAT_ISA_VNNI512 ? "AVX512-VNNI" : isa == RLPI_QMAT_ISA_AVX2 ? "AVX2" : "scalar";
}

int64_t rlpi_qmat_gemm_min_rows(void)
{
    if (gemm_min_rows > 0)
        return gemm_min_rows;
    /* RLPOST_QMAT_GEMM_MIN_ROWS (a positive integer) moves the switch for
     * benchmarks on other CPUs; read once */
    static int64_t env_rows = -1;
    int64_t er = __atomic_load_n(&env_rows, __ATOMIC_RELAXED);
    if (er < 0) {
        const char *v = getenv("RLPOST_QMAT_GEMM_MIN_ROWS");
        char *end = NULL;
        long long x = v ? strtoll(v, &end, 10) : 0;
        er = v && end != v && *end == '\0' && x > 0 ? (int64_t)x : 0;
        __atomic_store_n(&env_rows, er, __ATOMIC_RELAXED);
    }
    if (er > 0)
        return er;
    int isa = rlpi_qmat_isa();
    return isa == RLPI_QMAT_ISA_VNNI512 ? RLPI_QMAT_GEMM_MIN_ROWS_VNNI512
           : isa == RLPI_QMAT_ISA_AVX2  ? RLPI_QMAT_GEMM_MIN_ROWS_AVX2
                                        : RLPI_QMAT_GEMM_MIN_ROWS_SCALAR;
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

/* Row i of a product's activations and of its quantized form. */
typedef struct qrow {
    const float *x;
    int8_t *q;
    int32_t *corr;
    float *da;
} qrow;

static inline qrow qrow_at(const qact *A, const float *a, int64_t i)
{
    return (qrow){a + i * A->k, A->qa + i * A->kp, A->corr + i * A->kb * 8, A->da + i * A->kb * 8};
}

/* The reference: what the vector quantizer below must equal bit for bit. */
static void quantize_rows_scalar(const qact *A, const float *a, int64_t begin, int64_t end)
{
    for (int64_t i = begin; i < end; i++) {
        const qrow R = qrow_at(A, a, i);
        const float *x = R.x;
        int8_t *q = R.q;
        int32_t *corr = R.corr;
        float *da = R.da;
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
                /* round half away from zero; clamped first so that a
                 * non-finite activation cannot make the cast undefined
                 * (NaN becomes 0: the fp32 path would give NaN anyway) */
                v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f;
                int iv = (int)(v + (v >= 0.0f ? 0.5f : -0.5f));
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

#if QMAT_X86
/* The same quantization, 32 elements (one block) per step: amax by a
 * masked max-reduction, the same float multiply, clamp (NaN to 0) and
 * round-half-away-from-zero as the scalar loop (so the quants agree bit for
 * bit: test_qmatmul), and the 8 sums of 4 quants by vpmaddubsw/vpmaddwd.
 * In batch-1 decode this runs on the calling thread before every product
 * while the other threads wait: the scalar loop was 3-5 % of a token. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
quantize_rows_avx512(const qact *A, const float *a, int64_t begin, int64_t end)
{
    const __m512 lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f), half = _mm512_set1_ps(0.5f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u), absm = _mm512_set1_epi32(0x7fffffff);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i m128 = _mm256_set1_epi32(-128);
    for (int64_t i = begin; i < end; i++) {
        const qrow R = qrow_at(A, a, i);
        const float *x = R.x;
        for (int64_t b = 0; b < A->kb; b++) {
            /* elements of this block inside the row: kp pads k to a
             * multiple of 64, so a last block may hold none (all zero) */
            int64_t lo = b * 32, n = A->k - lo < 32 ? A->k - lo : 32;
            n = n < 0 ? 0 : n;
            __mmask16 k0 = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
            __mmask16 k1 = n >= 32 ? (__mmask16)0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1u);
            __m512 x0 = _mm512_maskz_loadu_ps(k0, x + lo), x1 = _mm512_maskz_loadu_ps(k1, x + lo + 16);
            /* |x| by clearing the sign bit; the max skips NaN as the scalar
             * compare does (a NaN fails v > amax) */
            __m512 a0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x0), absm));
            __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x1), absm));
            /* maxps returns its second operand when either is NaN */
            __m512 am = _mm512_max_ps(a1, _mm512_max_ps(a0, _mm512_setzero_ps()));
            float amax = _mm512_reduce_max_ps(am);
            float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            __m512 vid = _mm512_set1_ps(id);
            __m256i qs[2];
            for (int h = 0; h < 2; h++) {
                __m512 v = _mm512_mul_ps(h ? x1 : x0, vid);
                __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
                v = _mm512_min_ps(_mm512_max_ps(v, nlim), lim);
                v = _mm512_maskz_mov_ps(ord, v);
                __m512 r = _mm512_or_ps(half, _mm512_and_ps(v, _mm512_castsi512_ps(sign)));
                __m512i iv = _mm512_cvttps_epi32(_mm512_add_ps(v, r));
                __m128i b8 = _mm512_cvtepi32_epi8(iv);
                qs[h] = _mm256_castsi128_si256(b8);
            }
            __m256i q32 = _mm256_inserti128_si256(qs[0], _mm256_castsi256_si128(qs[1]), 1);
            _mm256_storeu_si256((__m256i *)(R.q + lo), q32);
            __m256i s16 = _mm256_maddubs_epi16(ones8, q32);   /* pairs */
            __m256i s32 = _mm256_madd_epi16(s16, ones16);     /* groups of 4, in order */
            _mm256_storeu_si256((__m256i *)(R.corr + b * 8), _mm256_mullo_epi32(s32, m128));
            _mm256_storeu_ps(R.da + b * 8, _mm256_set1_ps(d));
        }
    }
}
#endif

static void quantize_rows(const qact *A, const float *a, int64_t begin, int64_t end, int isa)
{
#if QMAT_X86
    if (isa == RLPI_QMAT_ISA_VNNI512) {
        quantize_rows_avx512(A, a, begin, end);
        return;
    }
#endif
    (void)isa;
    quantize_rows_scalar(A, a, begin, end);
}

/* ---- products ---- */

typedef struct qjob {
    const qact *A;
    int type;           /* RLPI_QMAT_Q8_0 or RLPI_QMAT_Q4_0 */
    int64_t wrow;       /* bytes of a weight row's quants: kp (Q8_0), kp / 2 (Q4_0) */
    const uint8_t *wq;  /* (n, wrow) */
    const float *ws;    /* (n, kb) */
    const float *a;     /* fp32 activations (m, k): the GEMM route */
    float *c;
    int64_t n, chunk;
    float beta;
    float *tile;        /* the GEMM route: per thread, chunk · kp dequantized weights */
    int isa;
} qjob;

/* The 16 lane sums in a fixed tree: (l, l+8), then (l, l+4), (l, l+2),
 * (0, 1); the VNNI kernel reduces its register in the same order. */
static float lane_sum(const float *v)
{
    float s8[8], s4[4], s2[2];
    for (int l = 0; l < 8; l++)
        s8[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; l++)
        s4[l] = s8[l] + s8[l + 4];
    for (int l = 0; l < 2; l++)
        s2[l] = s4[l] + s4[l + 2];
    return s2[0] + s2[1];
}

static void store(float *c, float sum, float beta)
{
    *c = beta != 0.0f ? *c + sum : sum;
}

/* outputs (i, j) for weight rows [j0, j1) and activation rows [r0, r1) */
static void block_scalar(const qjob *J, int64_t j0, int64_t j1, int64_t r0, int64_t r1)
{
    const qact *A = J->A;
    const bool q4 = J->type == RLPI_QMAT_Q4_0;
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *wq = J->wq + j * J->wrow;
        const float *ws = J->ws + j * A->kb;
        for (int64_t i = r0; i < r1; i++) {
            const int8_t *qa = A->qa + i * A->kp;
            const int32_t *corr = A->corr + i * A->kb * 8;
            const float *da = A->da + i * A->kb * 8;
            float acc[16] = {0};
            for (int64_t p = 0; p < A->kb / 2; p++) {
                for (int l = 0; l < 16; l++) {
                    int64_t e = p * 64 + 4 * l; /* lane l's four bytes */
                    int32_t t;
                    if (q4) {
                        t = 0;
                        for (int u = 0; u < 4; u++)
                            t += ((int32_t)rlpi_qmat_q4_get(wq + p * 32, 4 * l + u) - 8) * (int32_t)qa[e + u];
                    } else {
                        t = corr[p * 16 + l];
                        for (int u = 0; u < 4; u++)
                            t += (int32_t)wq[e + u] * (int32_t)qa[e + u];
                    }
                    float s = ws[2 * p + l / 8] * da[p * 16 + l];
                    acc[l] = acc[l] + (float)t * s;
                }
            }
            store(J->c + i * J->n + j, lane_sum(acc), J->beta);
        }
    }
}

#if QMAT_X86
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")))

VNNI_TARGET static inline float vnni_lane_sum(__m512 v)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

/* the two block scales of pair p, each over its 8 lanes */
VNNI_TARGET static inline __m512 pair_scales(const float *ws, int64_t p, __m512i idx)
{
    __m128 two = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(ws + 2 * p)));
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(two));
}

/* The 64 unsigned weights of pair p: Q8_0's offset-binary bytes as they
 * are; Q4_0's 32 bytes split into their low nibbles (elements 0..31) and
 * high nibbles (32..63), each q + 8. */
VNNI_TARGET static inline __m512i vnni_weights(const uint8_t *w, int64_t p, bool q4)
{
    if (!q4)
        return _mm512_loadu_si512(w + p * 64);
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
    __m256i v = _mm256_loadu_si256((const __m256i *)(w + p * 32));
    __m256i lo = _mm256_and_si256(v, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* 4 weight rows at a time share each activation load. The unsigned ×
 * signed dot product is seeded with the correction for the weights'
 * offset: −128·Σ q_a (Q8_0), −8·Σ q_a = that shifted right by 4, exactly
 * (Q4_0). */
VNNI_TARGET static void block_vnni(const qjob *J, int64_t j0, int64_t j1, int64_t r0, int64_t r1)
{
    const qact *A = J->A;
    const int64_t pairs = A->kb / 2, kp = A->kp, kb = A->kb, wr = J->wrow;
    const bool q4 = J->type == RLPI_QMAT_Q4_0;
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) {
        const uint8_t *w0 = J->wq + j * wr, *w1 = w0 + wr, *w2 = w1 + wr, *w3 = w2 + wr;
        const float *s0 = J->ws + j * kb, *s1 = s0 + kb, *s2 = s1 + kb, *s3 = s2 + kb;
        for (int64_t i = r0; i < r1; i++) {
            const int8_t *qa = A->qa + i * kp;
            const int32_t *corr = A->corr + i * kb * 8;
            const float *da = A->da + i * kb * 8;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t p = 0; p < pairs; p++) {
                __m512i q = _mm512_loadu_si512(qa + p * 64), cr = _mm512_loadu_si512(corr + p * 16);
                if (q4)
                    cr = _mm512_srai_epi32(cr, 4);
                __m512 d = _mm512_loadu_ps(da + p * 16);
#define QSTEP(acc, w, sc)                                                                                   \
    do {                                                                                                    \
        __m512i t_ = _mm512_dpbusd_epi32(cr, vnni_weights(w, p, q4), q);                                    \
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(t_), _mm512_mul_ps(pair_scales(sc, p, idx), d))); \
    } while (0)
                QSTEP(a0, w0, s0);
                QSTEP(a1, w1, s1);
                QSTEP(a2, w2, s2);
                QSTEP(a3, w3, s3);
            }
            float *c = J->c + i * J->n + j;
            store(c + 0, vnni_lane_sum(a0), J->beta);
            store(c + 1, vnni_lane_sum(a1), J->beta);
            store(c + 2, vnni_lane_sum(a2), J->beta);
            store(c + 3, vnni_lane_sum(a3), J->beta);
        }
    }
    for (; j < j1; j++) {
        const uint8_t *w0 = J->wq + j * wr;
        const float *s0 = J->ws + j * kb;
        for (int64_t i = r0; i < r1; i++) {
            const int8_t *qa = A->qa + i * kp;
            const int32_t *corr = A->corr + i * kb * 8;
            const float *da = A->da + i * kb * 8;
            __m512 a0 = _mm512_setzero_ps();
            for (int64_t p = 0; p < pairs; p++) {
                __m512i q = _mm512_loadu_si512(qa + p * 64), cr = _mm512_loadu_si512(corr + p * 16);
                if (q4)
                    cr = _mm512_srai_epi32(cr, 4);
                __m512 d = _mm512_loadu_ps(da + p * 16);
                QSTEP(a0, w0, s0);
            }
#undef QSTEP
            store(J->c + i * J->n + j, vnni_lane_sum(a0), J->beta);
        }
    }
}

#define AVX2_TARGET __attribute__((target("avx2")))

/* lane sums of (lo, hi) = lanes 0..7 and 8..15: (l, l+8) first, as above */
AVX2_TARGET static inline float avx2_lane_sum(__m256 lo, __m256 hi)
{
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

/* Σ q_w·q_a of each 4 bytes: |q_w| (unsigned) times q_a with q_w's sign,
 * in int16 pairs (each ≤ 2·128·127 < 2^15), then pairs of those in int32 */
AVX2_TARGET static inline __m256i avx2_dot4_signed(__m256i w, __m256i qa)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(qa, w));
    return _mm256_madd_epi16(p16, ones);
}

/* 32 signed weights of half h (elements 32h..32h+31) of pair p: Q8_0's
 * bytes with the offset flipped off; Q4_0's nibbles (low for h = 0, high
 * for h = 1) minus 8 */
AVX2_TARGET static inline __m256i avx2_weights(const uint8_t *w, int64_t p, int h, bool q4)
{
    if (!q4)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + p * 64 + 32 * h)),
                                _mm256_set1_epi8((char)0x80));
    __m256i v = _mm256_loadu_si256((const __m256i *)(w + p * 32));
    if (h)
        v = _mm256_srli_epi16(v, 4);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

/* 2 weight rows at a time share each activation load (4 would need more
 * than AVX2's 16 registers) */
AVX2_TARGET static void block_avx2(const qjob *J, int64_t j0, int64_t j1, int64_t r0, int64_t r1)
{
    const qact *A = J->A;
    const int64_t pairs = A->kb / 2, kp = A->kp, kb = A->kb, wr = J->wrow;
    const bool q4 = J->type == RLPI_QMAT_Q4_0;
    int64_t j = j0;
    for (; j < j1; j += 2) {
        const bool two = j + 1 < j1;
        const uint8_t *w0 = J->wq + j * wr, *w1 = two ? w0 + wr : w0;
        const float *s0 = J->ws + j * kb, *s1 = two ? s0 + kb : s0;
        for (int64_t i = r0; i < r1; i++) {
            const int8_t *qa = A->qa + i * kp;
            const float *da = A->da + i * kb * 8;
            __m256 a0l = _mm256_setzero_ps(), a0h = a0l, a1l = a0l, a1h = a0l;
            for (int64_t p = 0; p < pairs; p++) {
                __m256i ql = _mm256_loadu_si256((const __m256i *)(qa + p * 64));
                __m256i qh = _mm256_loadu_si256((const __m256i *)(qa + p * 64 + 32));
                __m256 dl = _mm256_loadu_ps(da + p * 16), dh = _mm256_loadu_ps(da + p * 16 + 8);
#define QSTEP2(lo, hi, w, sc)                                                                                \
    do {                                                                                                     \
        __m256i tl_ = avx2_dot4_signed(avx2_weights(w, p, 0, q4), ql);                                      \
        __m256i th_ = avx2_dot4_signed(avx2_weights(w, p, 1, q4), qh);                                      \
        lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_cvtepi32_ps(tl_), _mm256_mul_ps(_mm256_set1_ps(sc[2 * p]), dl))); \
        hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_cvtepi32_ps(th_),                                        \
                                             _mm256_mul_ps(_mm256_set1_ps(sc[2 * p + 1]), dh)));             \
    } while (0)
                QSTEP2(a0l, a0h, w0, s0);
                if (two)
                    QSTEP2(a1l, a1h, w1, s1);
#undef QSTEP2
            }
            float *c = J->c + i * J->n + j;
            store(c, avx2_lane_sum(a0l, a0h), J->beta);
            if (two)
                store(c + 1, avx2_lane_sum(a1l, a1h), J->beta);
        }
    }
}

/* w·d for rows of the GEMM route's tile */
VNNI_TARGET static void dequant_rows_avx512(float *dst, const uint8_t *wq, const float *ws, int64_t rows, int64_t kp)
{
    const __m128i flip = _mm_set1_epi8((char)0x80);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < kp; e += 16) {
            __m128i u = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(wq + r * kp + e)), flip);
            __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(u));
            _mm512_storeu_ps(dst + r * kp + e, _mm512_mul_ps(v, _mm512_set1_ps(ws[r * (kp / 32) + e / 32])));
        }
}

/* the same for Q4_0 rows (kp / 2 bytes each): per pair, the low nibbles
 * are elements 0..31 and the high nibbles 32..63, each minus 8 */
VNNI_TARGET static void dequant_rows_q4_avx512(float *dst, const uint8_t *wq, const float *ws, int64_t rows, int64_t kp)
{
    const __m128i lo4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < kp / 64; p++) {
            const uint8_t *src = wq + r * (kp / 2) + p * 32;
            float *d = dst + r * kp + p * 64;
            /* the scales of the pair's blocks 2p (low nibbles) and 2p + 1 (high) */
            const float *sp = ws + r * (kp / 32) + 2 * p;
            const __m512 sl = _mm512_set1_ps(sp[0]), sh = _mm512_set1_ps(sp[1]);
            for (int h = 0; h < 2; h++) {
                /* bytes 16h.. of the pair: elements 16h.. and 32 + 16h.. */
                __m128i v = _mm_loadu_si128((const __m128i *)(src + 16 * h));
                __m128i nl = _mm_sub_epi8(_mm_and_si128(v, lo4), eight);
                __m128i nh = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), lo4), eight);
                _mm512_storeu_ps(d + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(nl)), sl));
                _mm512_storeu_ps(d + 32 + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(nh)), sh));
            }
        }
}
#endif

static void dequant_rows(int isa, int type, float *dst, const uint8_t *wq, const float *ws, int64_t rows, int64_t kp)
{
#if QMAT_X86
    if (type == RLPI_QMAT_Q4_0 && isa == RLPI_QMAT_ISA_VNNI512) {
        dequant_rows_q4_avx512(dst, wq, ws, rows, kp);
        return;
    }
#endif
    if (type == RLPI_QMAT_Q4_0) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t e = 0; e < kp; e++) {
                unsigned nib = rlpi_qmat_q4_get(wq + r * (kp / 2) + (e / 64) * 32, (int)(e % 64));
                dst[r * kp + e] = (float)((int)nib - 8) * ws[r * (kp / 32) + e / 32];
            }
        return;
    }
#if QMAT_X86
    if (isa == RLPI_QMAT_ISA_VNNI512) {
        dequant_rows_avx512(dst, wq, ws, rows, kp);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < kp; e++)
            dst[r * kp + e] = (float)(int8_t)(wq[r * kp + e] ^ 0x80u) * ws[r * (kp / 32) + e / 32];
}

static void run_chunk(void *arg, int64_t task, int tid)
{
    (void)tid;
    const qjob *J = arg;
    const qact *A = J->A;
    int64_t j0 = task * J->chunk, j1 = j0 + J->chunk < J->n ? j0 + J->chunk : J->n;
    for (int64_t r0 = 0; r0 < A->m; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < A->m ? r0 + ROW_BLOCK : A->m;
#if QMAT_X86
        if (J->isa == RLPI_QMAT_ISA_VNNI512) {
            block_vnni(J, j0, j1, r0, r1);
            continue;
        }
        if (J->isa == RLPI_QMAT_ISA_AVX2) {
            block_avx2(J, j0, j1, r0, r1);
            continue;
        }
#endif
        block_scalar(J, j0, j1, r0, r1);
    }
}

/* The GEMM route: this task's weight rows dequantized to fp32 (a tile of
 * chunk · kp floats in the thread's scratch), then one SGEMM of all m
 * activation rows against them. */
static void run_chunk_gemm(void *arg, int64_t task, int tid)
{
    const qjob *J = arg;
    const qact *A = J->A;
    int64_t j0 = task * J->chunk, j1 = j0 + J->chunk < J->n ? j0 + J->chunk : J->n;
    float *tile = J->tile + (size_t)tid * (size_t)J->chunk * (size_t)A->kp;
    dequant_rows(J->isa, J->type, tile, J->wq + j0 * J->wrow, J->ws + j0 * A->kb, j1 - j0, A->kp);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)A->m, (blasint)(j1 - j0), (blasint)A->k, 1.0f,
                J->a, (blasint)A->k, tile, (blasint)A->kp, J->beta, J->c + j0, (blasint)J->n);
}

int rlpi_cpu_qmatmul(struct rlpi_threadpool *pool, float *c, const float *a, const void *w, int type, int64_t m,
                     int64_t n, int64_t k, float beta)
{
    if (type != RLPI_QMAT_Q8_0 && type != RLPI_QMAT_Q4_0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized matmul: unknown weight type %d", type);
    if (m < 1 || n < 1 || k < 1)
        return RLP_OK;
    int threads = pool ? rlpi_threadpool_size(pool) : 1;
    int64_t kp = rlpi_qmat_kpad(k), kb = kp / 32;
    double macs = (double)m * (double)n * (double)kp;
    bool split = threads > 1 && macs >= SPLIT_MIN_MACS;
    const uint8_t *wq = w;
    int64_t wrow = (int64_t)rlpi_qmat_row_bytes(type, k);
    qjob J = {.type = type, .wrow = wrow, .wq = wq, .ws = (const float *)(wq + (size_t)n * (size_t)wrow), .a = a,
              .c = c, .n = n, .beta = beta, .isa = rlpi_qmat_isa()};
    qact A = {.m = m, .k = k, .kp = kp, .kb = kb};
    J.A = &A;
    /* about 8 tasks a thread for the dynamic scheduler to even out; whole
     * groups of 4 weight rows (the VNNI kernel's unit) */
    int64_t chunk = split ? (n + 8 * threads - 1) / (8 * threads) : n;
    J.chunk = chunk < 4 ? 4 : (chunk + 3) / 4 * 4;
    int64_t tasks = (n + J.chunk - 1) / J.chunk;
    if (m >= rlpi_qmat_gemm_min_rows()) {
        /* one tile a thread, in whole 32-row multiples (OpenBLAS's full-width
         * kernels), at most 512 rows (≤ 1.2 MB of fp32 at k = 576: in L2);
         * each tile's SGEMM packs A again, so fewer, larger tiles */
        int64_t tile = (n + threads - 1) / threads;
        tile = (tile + 31) / 32 * 32;
        J.chunk = tile > 512 ? 512 : tile;
        tasks = (n + J.chunk - 1) / J.chunk;
        J.tile = malloc((size_t)threads * (size_t)J.chunk * (size_t)kp * sizeof(float));
        if (!J.tile)
            return rlpi_error_set(RLP_E_NOMEM, "quantized matmul: cannot allocate dequantized tiles");
        if (split)
            rlpi_threadpool_run_tasks(pool, tasks, run_chunk_gemm, &J);
        else
            for (int64_t t = 0; t < tasks; t++)
                run_chunk_gemm(&J, t, 0);
        free(J.tile);
        return RLP_OK;
    }
    size_t qbytes = (size_t)m * (size_t)kp;
    /* one block: quants, then corrections and scales (4-byte aligned: kp is a multiple of 64) */
    char *mem = malloc(qbytes + (size_t)m * (size_t)kb * 8 * 8);
    if (!mem)
        return rlpi_error_set(RLP_E_NOMEM, "quantized matmul: cannot allocate the activation scratch of %lld rows",
                              (long long)m);
    A.qa = (int8_t *)mem;
    A.corr = (int32_t *)(mem + qbytes);
    A.da = (float *)(mem + qbytes + (size_t)m * (size_t)kb * 8 * 4);
    quantize_rows(&A, a, 0, m, J.isa);
    if (!split || tasks == 1)
        for (int64_t t = 0; t < tasks; t++)
            run_chunk(&J, t, 0);
    else
        rlpi_threadpool_run_tasks(pool, tasks, run_chunk, &J);
    free(mem);
    return RLP_OK;
}
