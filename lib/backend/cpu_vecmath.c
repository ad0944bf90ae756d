/* Vectorised exp and the row kernels built on it (see cpu_vecmath.h).
 *
 * Each kernel walks its row in blocks of LANES floats with fixed-count inner
 * loops, which GCC vectorises even at -O2's cheap cost model; a ragged tail
 * is padded into a block so it goes through the same arithmetic. */
#include "backend/cpu_vecmath.h"

#include <math.h>
#include <string.h>

#define LANES 16

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* the same source compiled three times, the best one picked by an ifunc at
 * load; GCC only (clang 14 leaves external clones unresolved) and not under
 * sanitizers, whose runtimes do not all handle ifuncs */
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VEC_CLONES
#endif

#if defined(__GNUC__)
#define ALWAYS_INLINE __attribute__((always_inline))
#else
#define ALWAYS_INLINE
#endif

/* Cephes expf constants */
#define EXP_HI 88.0f         /* above: saturate (exp(88) = 1.65e38; 2^n stays finite) */
#define EXP_LO (-87.33654f)  /* below: 0 (exp(-87.34) = FLT_MIN) */
#define LOG2E 1.44269504088896341f
#define EXP_C1 0.693359375f
#define EXP_C2 (-2.12194440e-4f)
#define ROUND_MAGIC 12582912.0f       /* 1.5·2^23: adding it rounds to an integer in the low mantissa bits */
#define ROUND_MAGIC_BITS 0x4B400000

static inline ALWAYS_INLINE void exp_block(float *y, const float *x)
{
    float t[LANES], r[LANES];
    int32_t bits[LANES];
    for (int l = 0; l < LANES; l++) {
        float a = x[l];
        a = a > EXP_HI ? EXP_HI : a;
        a = a < EXP_LO ? EXP_LO : a; /* NaN passes both and stays NaN */
        float k = a * LOG2E + ROUND_MAGIC;
        t[l] = k;
        float n = k - ROUND_MAGIC;
        float rr = a - n * EXP_C1;
        r[l] = rr - n * EXP_C2;
    }
    memcpy(bits, t, sizeof bits);
    for (int l = 0; l < LANES; l++) {
        float rr = r[l];
        float p = 1.9875691500e-4f;
        p = p * rr + 1.3981999507e-3f;
        p = p * rr + 8.3334519073e-3f;
        p = p * rr + 4.1665795894e-2f;
        p = p * rr + 1.6666665459e-1f;
        p = p * rr + 5.0000001201e-1f;
        p = p * rr * rr + rr + 1.0f;
        /* 2^n, n in [-126, 127]; unsigned: a NaN lane has any bits here and
         * its p is NaN anyway */
        bits[l] = (int32_t)((uint32_t)(bits[l] - ROUND_MAGIC_BITS + 127) << 23);
        t[l] = p;
    }
    float scale[LANES];
    memcpy(scale, bits, sizeof scale);
    for (int l = 0; l < LANES; l++)
        y[l] = x[l] < EXP_LO ? 0.0f : t[l] * scale[l];
}

VEC_CLONES double rlpi_vec_exp_affine_sum(float *x, int64_t n, float a, float b)
{
    double acc[LANES] = {0};
    float z[LANES], e[LANES];
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; l++)
            z[l] = a * x[i + l] - b;
        exp_block(e, z);
        for (int l = 0; l < LANES; l++) {
            x[i + l] = e[l];
            acc[l] += e[l];
        }
    }
    if (i < n) {
        for (int l = 0; l < LANES; l++)
            z[l] = i + l < n ? a * x[i + l] - b : -INFINITY;
        exp_block(e, z);
        for (int l = 0; l < LANES && i + l < n; l++) {
            x[i + l] = e[l];
            acc[l] += e[l];
        }
    }
    double s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

/* o += a·v element by element, in blocks of LANES that each clone turns
 * into whole vectors (GCC's -O2 cost model vectorises fixed-length inner
 * loops, not a loop that would need a remainder) */
static ALWAYS_INLINE inline void axpy_row(float *restrict o, float a, const float *restrict v, int64_t n)
{
    int64_t e = 0;
    for (; e + LANES <= n; e += LANES)
        for (int l = 0; l < LANES; l++)
            o[e + l] += a * v[e + l];
    for (; e < n; e++)
        o[e] += a * v[e];
}

VEC_CLONES void rlpi_vec_attend(float *const *out, const float *const *q, int g, const float *K, const float *V,
                                int64_t stride, int64_t nk, int64_t hd, float scale, float *s)
{
    float m[RLPI_VEC_ATTEND_MAX_GROUP];
    for (int h = 0; h < g; h++)
        m[h] = -INFINITY;
    const int64_t hd8 = hd / 8 * 8;
    for (int64_t j = 0; j < nk; j++) {
        const float *k = K + j * stride;
        for (int h = 0; h < g; h++) {
            const float *qh = q[h];
            float p[8] = {0};
            for (int64_t e = 0; e < hd8; e += 8)
                for (int l = 0; l < 8; l++)
                    p[l] += qh[e + l] * k[e + l];
            float r = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
            for (int64_t e = hd8; e < hd; e++)
                r += qh[e] * k[e];
            float v = r * scale;
            s[h * nk + j] = v;
            m[h] = v > m[h] ? v : m[h];
        }
    }
    float w[RLPI_VEC_ATTEND_MAX_GROUP];
    for (int h = 0; h < g; h++) {
        double sum = rlpi_vec_exp_affine_sum(s + h * nk, nk, 1.0f, m[h]);
        w[h] = (float)(1.0 / sum);
        memset(out[h], 0, (size_t)hd * sizeof(float));
    }
    for (int64_t j = 0; j < nk; j++) {
        const float *v = V + j * stride;
        for (int h = 0; h < g; h++)
            axpy_row(out[h], s[h * nk + j] * w[h], v, hd);
    }
}

/* Σ exp(z − m) and Σ exp(z − m)·z of one block, z = row·inv_temp, added
 * lane-wise in double. `valid` lanes are read; the rest count as 0. */
static inline ALWAYS_INLINE void stats_block(const float *row, int valid, float inv_temp, float m, double *sum, double *spz)
{
    float z[LANES], a[LANES], e[LANES];
    for (int l = 0; l < LANES; l++) {
        z[l] = row[l] * inv_temp;
        a[l] = z[l] - m;
    }
    for (int l = valid; l < LANES; l++)
        a[l] = -INFINITY, z[l] = 0.0f;
    exp_block(e, a);
    for (int l = 0; l < LANES; l++)
        sum[l] += (double)e[l];
    for (int l = 0; l < LANES; l++)
        spz[l] += (double)e[l] * (double)z[l];
}

VEC_CLONES void rlpi_vec_row_stats(const float *row, int64_t n, float inv_temp, double *lse, double *pz)
{
    float mx[LANES];
    for (int l = 0; l < LANES; l++)
        mx[l] = -INFINITY;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float z = row[i + l] * inv_temp;
            mx[l] = z > mx[l] ? z : mx[l];
        }
    for (int64_t j = i; j < n; j++) {
        float z = row[j] * inv_temp;
        mx[0] = z > mx[0] ? z : mx[0];
    }
    float m = mx[0];
    for (int l = 1; l < LANES; l++)
        m = mx[l] > m ? mx[l] : m;

    double sum[LANES] = {0}, spz[LANES] = {0};
    for (i = 0; i + LANES <= n; i += LANES)
        stats_block(row + i, LANES, inv_temp, m, sum, spz);
    if (i < n) {
        float pad[LANES] = {0};
        memcpy(pad, row + i, (size_t)(n - i) * sizeof *pad);
        stats_block(pad, (int)(n - i), inv_temp, m, sum, spz);
    }
    double s = 0, sp = 0;
    for (int l = 0; l < LANES; l++) {
        s += sum[l];
        sp += spz[l];
    }
    *lse = m + log(s);
    *pz = sp / s;
}

static inline ALWAYS_INLINE void grad_block(float *out, const float *row, float inv_temp, float lse, float zh, float dl, float dh)
{
    float z[LANES], a[LANES], p[LANES];
    for (int l = 0; l < LANES; l++) {
        z[l] = row[l] * inv_temp;
        a[l] = z[l] - lse;
    }
    exp_block(p, a);
    for (int l = 0; l < LANES; l++)
        out[l] = (-dl * p[l] - dh * p[l] * (z[l] + zh)) * inv_temp;
}

VEC_CLONES void rlpi_vec_logprob_grad(float *row, int64_t n, float inv_temp, float lse, float zh, float dl, float dh)
{
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        grad_block(row + i, row + i, inv_temp, lse, zh, dl, dh);
    if (i < n) {
        float pad[LANES] = {0};
        memcpy(pad, row + i, (size_t)(n - i) * sizeof *pad);
        grad_block(pad, pad, inv_temp, lse, zh, dl, dh);
        memcpy(row + i, pad, (size_t)(n - i) * sizeof *pad);
    }
}

static inline ALWAYS_INLINE void swiglu_fwd_block(float *y, const float *g, const float *u)
{
    float a[LANES], e[LANES];
    for (int l = 0; l < LANES; l++)
        a[l] = -g[l];
    exp_block(e, a);
    for (int l = 0; l < LANES; l++)
        y[l] = g[l] / (1.0f + e[l]) * u[l];
}

VEC_CLONES void rlpi_vec_swiglu_fwd(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        swiglu_fwd_block(y + i, g + i, u + i);
    if (i < n) {
        float pg[LANES] = {0}, pu[LANES] = {0}, py[LANES];
        memcpy(pg, g + i, (size_t)(n - i) * sizeof *pg);
        memcpy(pu, u + i, (size_t)(n - i) * sizeof *pu);
        swiglu_fwd_block(py, pg, pu);
        memcpy(y + i, py, (size_t)(n - i) * sizeof *py);
    }
}

static inline ALWAYS_INLINE void swiglu_bwd_block(float *dg, float *du, const float *d, const float *g, const float *u)
{
    float a[LANES], e[LANES];
    for (int l = 0; l < LANES; l++)
        a[l] = -g[l];
    exp_block(e, a);
    for (int l = 0; l < LANES; l++) {
        float sg = 1.0f / (1.0f + e[l]);
        dg[l] = d[l] * u[l] * sg * (1.0f + g[l] * (1.0f - sg));
        du[l] = d[l] * g[l] * sg;
    }
}

VEC_CLONES void rlpi_vec_swiglu_bwd(float *dg, float *du, const float *d, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        swiglu_bwd_block(dg + i, du + i, d + i, g + i, u + i);
    if (i < n) {
        float pd[LANES] = {0}, pg[LANES] = {0}, pu[LANES] = {0}, o1[LANES], o2[LANES];
        size_t w = (size_t)(n - i) * sizeof(float);
        memcpy(pd, d + i, w);
        memcpy(pg, g + i, w);
        memcpy(pu, u + i, w);
        swiglu_bwd_block(o1, o2, pd, pg, pu);
        memcpy(dg + i, o1, w);
        memcpy(du + i, o2, w);
    }
}

/* gelu_tanh(g) = 0.5·g·(1 + tanh(z)), z = √(2/π)(g + 0.044715 g³). As
 * 0.5(1 + tanh z) = σ(2z), it is g·σ(2z): one exp per element through the
 * same polynomial as SiLU instead of a scalar tanhf. */
#define GELU_C 0.7978845608028654f /* √(2/π) */
#define GELU_A 0.044715f

static inline ALWAYS_INLINE void geglu_fwd_block(float *y, const float *g, const float *u)
{
    float a[LANES], e[LANES];
    for (int l = 0; l < LANES; l++)
        a[l] = -2.0f * GELU_C * (g[l] + GELU_A * g[l] * g[l] * g[l]);
    exp_block(e, a);
    for (int l = 0; l < LANES; l++)
        y[l] = g[l] / (1.0f + e[l]) * u[l];
}

VEC_CLONES void rlpi_vec_geglu_fwd(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        geglu_fwd_block(y + i, g + i, u + i);
    if (i < n) {
        float pg[LANES] = {0}, pu[LANES] = {0}, py[LANES];
        memcpy(pg, g + i, (size_t)(n - i) * sizeof *pg);
        memcpy(pu, u + i, (size_t)(n - i) * sizeof *pu);
        geglu_fwd_block(py, pg, pu);
        memcpy(y + i, py, (size_t)(n - i) * sizeof *py);
    }
}

/* d/dg g·σ(2z) = σ(2z) + g·σ(2z)(1 − σ(2z))·2z', z' = √(2/π)(1 + 3·0.044715 g²) */
static inline ALWAYS_INLINE void geglu_bwd_block(float *dg, float *du, const float *d, const float *g, const float *u)
{
    float a[LANES], e[LANES];
    for (int l = 0; l < LANES; l++)
        a[l] = -2.0f * GELU_C * (g[l] + GELU_A * g[l] * g[l] * g[l]);
    exp_block(e, a);
    for (int l = 0; l < LANES; l++) {
        float s = 1.0f / (1.0f + e[l]);
        float dz2 = 2.0f * GELU_C * (1.0f + 3.0f * GELU_A * g[l] * g[l]);
        dg[l] = d[l] * u[l] * (s + g[l] * s * (1.0f - s) * dz2);
        du[l] = d[l] * g[l] * s;
    }
}

VEC_CLONES void rlpi_vec_geglu_bwd(float *dg, float *du, const float *d, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        geglu_bwd_block(dg + i, du + i, d + i, g + i, u + i);
    if (i < n) {
        float pd[LANES] = {0}, pg[LANES] = {0}, pu[LANES] = {0}, o1[LANES], o2[LANES];
        size_t w = (size_t)(n - i) * sizeof(float);
        memcpy(pd, d + i, w);
        memcpy(pg, g + i, w);
        memcpy(pu, u + i, w);
        geglu_bwd_block(o1, o2, pd, pg, pu);
        memcpy(dg + i, o1, w);
        memcpy(du + i, o2, w);
    }
}
