/* CPU kernels of the transformer forward/backward, the fused logprob head
 * and AdamW, run on the backend's thread pool. Loops are partitioned so that
 * no two threads write the same element (no atomics), and every reduction is
 * done per static range then combined in range order, so results do not
 * depend on timing. Sums that feed a normaliser (RMS, softmax, norms) are
 * accumulated in double. Dense products stay in OpenBLAS (cpu.c). */
#include "backend/cpu_kernels.h"
#include "backend/cpu_vecmath.h"

#include "core/error.h"
#include "core/threadpool.h"

#include <cblas.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define POOL(be) rlpi_backend_cpu_pool(be)
#define MAX_RANGES 1024

static float dotf(const float *a, const float *b, int64_t n)
{
    /* 8 independent partial sums: lets the compiler vectorise without
     * -ffast-math and keeps the result independent of thread count */
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += a[i + l] * b[i + l];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
}

static void axpyf(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* ---------------------------------------------------------------- embedding */

typedef struct emb_arg {
    float *out;
    const float *table;
    const int32_t *ids;
    int64_t dim, vocab;
    int bad;
} emb_arg;

static void emb_fwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    emb_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        int32_t id = a->ids[i];
        if (id < 0 || id >= a->vocab) {
            __atomic_store_n(&a->bad, 1, __ATOMIC_RELAXED);
            memset(a->out + i * a->dim, 0, (size_t)a->dim * sizeof(float));
            continue;
        }
        memcpy(a->out + i * a->dim, a->table + (int64_t)id * a->dim, (size_t)a->dim * sizeof(float));
    }
}

int rlpi_cpu_embedding_fwd(rlpi_backend *be, float *out, const float *table, const int32_t *ids,
                           int64_t n, int64_t dim, int64_t vocab)
{
    emb_arg a = {out, table, ids, dim, vocab, 0};
    rlpi_threadpool_parallel_for(POOL(be), n, 64, emb_fwd_range, &a);
    return a.bad ? rlpi_error_set(RLP_E_INVALID_ARG, "embedding: token id outside [0, %lld)", (long long)vocab)
                 : RLP_OK;
}

typedef struct emb_bwd_arg {
    float *dtable;
    const float *dout;
    const int32_t *ids;
    int64_t n, dim, vocab;
} emb_bwd_arg;

/* parallel over embedding columns: repeated ids never race */
static void emb_bwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    emb_bwd_arg *a = p;
    for (int64_t i = 0; i < a->n; i++) {
        int32_t id = a->ids[i];
        if (id < 0 || id >= a->vocab)
            continue;
        float *dst = a->dtable + (int64_t)id * a->dim;
        const float *src = a->dout + i * a->dim;
        for (int64_t c = b; c < e; c++)
            dst[c] += src[c];
    }
}

int rlpi_cpu_embedding_bwd(rlpi_backend *be, float *dtable, const float *dout, const int32_t *ids,
                           int64_t n, int64_t dim, int64_t vocab)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return rlpi_error_set(RLP_E_INVALID_ARG, "embedding backward: token id %d outside [0, %lld)",
                                  ids[i], (long long)vocab);
    emb_bwd_arg a = {dtable, dout, ids, n, dim, vocab};
    rlpi_threadpool_parallel_for(POOL(be), dim, 16, emb_bwd_range, &a);
    return RLP_OK;
}

/* ------------------------------------------------------------------ RMSNorm */

typedef struct rms_arg {
    float *out, *rstd, *dx, *dw;
    const float *x, *w, *dout, *rstd_in;
    int64_t n, dim;
    float eps;
} rms_arg;

static void rms_fwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    rms_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        const float *x = a->x + i * a->dim;
        double ss = 0;
        for (int64_t c = 0; c < a->dim; c++)
            ss += (double)x[c] * x[c];
        float r = (float)(1.0 / sqrt(ss / (double)a->dim + (double)a->eps));
        a->rstd[i] = r;
        float *o = a->out + i * a->dim;
        for (int64_t c = 0; c < a->dim; c++)
            o[c] = x[c] * r * a->w[c];
    }
}

int rlpi_cpu_rmsnorm_fwd(rlpi_backend *be, float *out, float *rstd, const float *x, const float *w,
                         int64_t n, int64_t dim, float eps)
{
    rms_arg a = {.out = out, .rstd = rstd, .x = x, .w = w, .n = n, .dim = dim, .eps = eps};
    rlpi_threadpool_parallel_for(POOL(be), n, 8, rms_fwd_range, &a);
    return RLP_OK;
}

/* y = x·r·w with r = (mean(x²) + eps)^(-1/2):
 * dx = r·(w∘dy) − x·r³/dim·Σ_c(w∘dy∘x) ;  dw = Σ_rows dy∘x·r */
static void rms_bwd_rows(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    rms_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        const float *x = a->x + i * a->dim, *dy = a->dout + i * a->dim;
        float r = a->rstd_in[i];
        double dot = 0;
        for (int64_t c = 0; c < a->dim; c++)
            dot += (double)a->w[c] * dy[c] * x[c];
        float coef = (float)(dot * (double)r * r * r / (double)a->dim);
        float *dx = a->dx + i * a->dim;
        for (int64_t c = 0; c < a->dim; c++)
            dx[c] += r * a->w[c] * dy[c] - x[c] * coef;
    }
}

static void rms_bwd_cols(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    rms_arg *a = p;
    for (int64_t c = b; c < e; c++) {
        double s = 0;
        for (int64_t i = 0; i < a->n; i++)
            s += (double)a->dout[i * a->dim + c] * a->x[i * a->dim + c] * a->rstd_in[i];
        a->dw[c] += (float)s;
    }
}

int rlpi_cpu_rmsnorm_bwd(rlpi_backend *be, float *dx, float *dw, const float *dout, const float *x,
                         const float *w, const float *rstd, int64_t n, int64_t dim)
{
    rms_arg a = {.dx = dx, .dw = dw, .x = x, .w = w, .dout = dout, .rstd_in = rstd, .n = n, .dim = dim};
    rlpi_threadpool_parallel_for(POOL(be), n, 8, rms_bwd_rows, &a);
    rlpi_threadpool_parallel_for(POOL(be), dim, 16, rms_bwd_cols, &a);
    return RLP_OK;
}

/* --------------------------------------------------------------------- RoPE */

typedef struct rope_arg {
    float *x;
    const int32_t *pos;
    const float *inv_freq;
    int64_t n_heads, head_dim;
    int inverse;
} rope_arg;

static void rope_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    rope_arg *a = p;
    int64_t half = a->head_dim / 2;
    for (int64_t i = b; i < e; i++) {
        for (int64_t f = 0; f < half; f++) {
            /* angle in double: positions up to 10^5 times frequencies near 1
             * lose too much in fp32 before the sin/cos */
            double ang = (double)a->pos[i] * (double)a->inv_freq[f];
            float c = (float)cos(ang), s = (float)sin(ang);
            if (a->inverse)
                s = -s;
            for (int64_t h = 0; h < a->n_heads; h++) {
                float *x = a->x + (i * a->n_heads + h) * a->head_dim;
                float x0 = x[f], x1 = x[f + half];
                x[f] = x0 * c - x1 * s;
                x[f + half] = x1 * c + x0 * s;
            }
        }
    }
}

int rlpi_cpu_rope(rlpi_backend *be, float *x, const int32_t *pos, const float *inv_freq, int64_t n,
                  int64_t n_heads, int64_t head_dim, int inverse)
{
    rope_arg a = {x, pos, inv_freq, n_heads, head_dim, inverse};
    rlpi_threadpool_parallel_for(POOL(be), n, 16, rope_range, &a);
    return RLP_OK;
}

/* ---------------------------------------------------------------- attention */

typedef struct attn_arg {
    float *out, *lse, *dq, *dk, *dv;
    const float *q, *k, *v, *dout, *o, *lse_in;
    const int64_t *seq_start;
    int64_t n_seq, n, H, KV, hd, max_len;
    int64_t window; /* 0 = full causal; W = keys p − W + 1 .. p */
    float scale;
    int nomem;
} attn_arg;

/* First key a query at in-sequence index i (of a sequence starting at
 * `start`) sees: the sequence start, or the sliding window's edge. */
static inline int64_t first_key(int64_t start, int64_t i, int64_t window)
{
    return window > 0 && i - window + 1 > start ? i - window + 1 : start;
}

static int64_t seq_of(const int64_t *seq_start, int64_t n_seq, int64_t tok)
{
    int64_t lo = 0, hi = n_seq - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (seq_start[mid] <= tok)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* items: (head h, token i), h-major; each writes out[i, h] and lse[h, i] */
static void attn_fwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    attn_arg *a = p;
    float *s = malloc((size_t)(a->max_len ? a->max_len : 1) * sizeof(float));
    if (!s) {
        __atomic_store_n(&a->nomem, 1, __ATOMIC_RELAXED);
        return;
    }
    const float scale = a->scale;
    const int64_t group = a->H / a->KV;
    for (int64_t it = b; it < e; it++) {
        int64_t h = it / a->n, i = it % a->n, kvh = h / group;
        int64_t start = first_key(a->seq_start[seq_of(a->seq_start, a->n_seq, i)], i, a->window);
        const float *q = a->q + (i * a->H + h) * a->hd;
        float m = -INFINITY;
        for (int64_t j = start; j <= i; j++) {
            float v = dotf(q, a->k + (j * a->KV + kvh) * a->hd, a->hd) * scale;
            s[j - start] = v;
            m = v > m ? v : m;
        }
        double sum = 0;
        for (int64_t j = start; j <= i; j++) {
            float pj = expf(s[j - start] - m);
            s[j - start] = pj;
            sum += pj;
        }
        float *o = a->out + (i * a->H + h) * a->hd;
        memset(o, 0, (size_t)a->hd * sizeof(float));
        float inv = (float)(1.0 / sum);
        for (int64_t j = start; j <= i; j++)
            axpyf(o, s[j - start] * inv, a->v + (j * a->KV + kvh) * a->hd, a->hd);
        a->lse[h * a->n + i] = m + (float)log(sum);
    }
    free(s);
}

static int64_t max_seq_len(const int64_t *seq_start, int64_t n_seq)
{
    int64_t m = 0;
    for (int64_t s = 0; s < n_seq; s++)
        if (seq_start[s + 1] - seq_start[s] > m)
            m = seq_start[s + 1] - seq_start[s];
    return m;
}

static int attention_fwd_streaming(rlpi_backend *be, float *out, float *lse, const float *q, const float *k,
                                   const float *v, const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads,
                                   int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window)
{
    attn_arg a = {.out = out,
                  .lse = lse,
                  .q = q,
                  .k = k,
                  .v = v,
                  .seq_start = seq_start,
                  .n_seq = n_seq,
                  .n = n,
                  .H = n_heads,
                  .KV = n_kv_heads,
                  .hd = head_dim,
                  .max_len = max_seq_len(seq_start, n_seq),
                  .window = window,
                  .scale = scale};
    rlpi_threadpool_parallel_for(POOL(be), n * n_heads, 4, attn_fwd_range, &a);
    return a.nomem ? rlpi_error_set(RLP_E_NOMEM, "attention: out of memory") : RLP_OK;
}

/* items: (sequence, kv head); a kv head's dk/dv rows are written by one
 * thread only. With p_ij = exp(s_ij − lse_i), D_i = dout_i·out_i:
 *   ds_ij = p_ij (dout_i·v_j − D_i)
 *   dq_i = scale Σ_j ds_ij k_j ; dk_j += scale ds_ij q_i ; dv_j += p_ij dout_i */
static void attn_bwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    attn_arg *a = p;
    const float scale = a->scale;
    const int64_t group = a->H / a->KV;
    for (int64_t it = b; it < e; it++) {
        int64_t sidx = it / a->KV, kvh = it % a->KV;
        int64_t start = a->seq_start[sidx], end = a->seq_start[sidx + 1];
        for (int64_t j = start; j < end; j++) {
            memset(a->dk + (j * a->KV + kvh) * a->hd, 0, (size_t)a->hd * sizeof(float));
            memset(a->dv + (j * a->KV + kvh) * a->hd, 0, (size_t)a->hd * sizeof(float));
        }
        for (int64_t h = kvh * group; h < (kvh + 1) * group; h++)
            for (int64_t i = start; i < end; i++) {
                const float *q = a->q + (i * a->H + h) * a->hd;
                const float *dO = a->dout + (i * a->H + h) * a->hd;
                float D = dotf(dO, a->o + (i * a->H + h) * a->hd, a->hd);
                float lse = a->lse_in[h * a->n + i];
                float *dq = a->dq + (i * a->H + h) * a->hd;
                memset(dq, 0, (size_t)a->hd * sizeof(float));
                for (int64_t j = first_key(start, i, a->window); j <= i; j++) {
                    const float *kj = a->k + (j * a->KV + kvh) * a->hd;
                    const float *vj = a->v + (j * a->KV + kvh) * a->hd;
                    float pij = expf(dotf(q, kj, a->hd) * scale - lse);
                    float ds = pij * (dotf(dO, vj, a->hd) - D);
                    axpyf(dq, ds * scale, kj, a->hd);
                    axpyf(a->dk + (j * a->KV + kvh) * a->hd, ds * scale, q, a->hd);
                    axpyf(a->dv + (j * a->KV + kvh) * a->hd, pij, dO, a->hd);
                }
            }
    }
}

static int attention_bwd_streaming(rlpi_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                   const float *k, const float *v, const float *out, const float *lse,
                                   const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads,
                                   int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window)
{
    attn_arg a = {.dq = dq,
                  .dk = dk,
                  .dv = dv,
                  .dout = dout,
                  .q = q,
                  .k = k,
                  .v = v,
                  .o = out,
                  .lse_in = lse,
                  .seq_start = seq_start,
                  .n_seq = n_seq,
                  .n = n,
                  .H = n_heads,
                  .KV = n_kv_heads,
                  .hd = head_dim,
                  .window = window,
                  .scale = scale};
    rlpi_threadpool_parallel_for(POOL(be), n_seq * n_kv_heads, 1, attn_bwd_range, &a);
    return RLP_OK;
}


/* Attention through BLAS. Per (sequence, head) the L×L score block is
 * materialised (L ≤ rlpi_cpu_attention_blas_max_len = 2048) so that the four
 * products run as OpenBLAS GEMMs at full speed; the causal mask, softmax
 * and its backward are row loops inside the same task, one (sequence,
 * head) block per pool task (32 MiB of scratch per thread at 2048; the
 * backward holds S and dS). Longer sequences use
 * the streaming kernels above, which never hold a score matrix. */
int64_t rlpi_cpu_attention_blas_max_len = 2048;

typedef struct sm_arg {
    float *S;           /* (L, L) scores → probabilities, in place */
    float *dS;          /* backward: (L, L) dP → dS, in place */
    float *lse;         /* (L) out (forward) */
    const float *lse_in, *dO, *O;
    int64_t L, ld_o, hd;
    int64_t window; /* 0 = full causal */
    float scale;
} sm_arg;

static void softmax_rows(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    sm_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        float *row = a->S + i * a->L;
        int64_t j0 = first_key(0, i, a->window);
        float m = -INFINITY;
        for (int64_t j = j0; j <= i; j++) {
            float v = row[j] * a->scale;
            m = v > m ? v : m;
        }
        double sum = rlpi_vec_exp_affine_sum(row + j0, i + 1 - j0, a->scale, m);
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < j0; j++)
            row[j] = 0.0f; /* sliding-window mask */
        for (int64_t j = j0; j <= i; j++)
            row[j] *= inv;
        for (int64_t j = i + 1; j < a->L; j++)
            row[j] = 0.0f; /* causal mask */
        a->lse[i] = m + (float)log(sum);
    }
}

/* recompute P from S = QKᵀ and lse; dS = P ∘ (dP − D), D_i = dO_i·O_i */
static void softmax_bwd_rows(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    sm_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        float *prow = a->S + i * a->L, *drow = a->dS + i * a->L;
        float D = dotf(a->dO + i * a->ld_o, a->O + i * a->ld_o, a->hd);
        float l = a->lse_in[i];
        int64_t j0 = first_key(0, i, a->window);
        rlpi_vec_exp_affine_sum(prow + j0, i + 1 - j0, a->scale, l);
        for (int64_t j = 0; j < j0; j++)
            prow[j] = drow[j] = 0.0f; /* sliding-window mask */
        for (int64_t j = j0; j <= i; j++)
            drow[j] = prow[j] * (drow[j] - D);
        for (int64_t j = i + 1; j < a->L; j++)
            prow[j] = drow[j] = 0.0f;
    }
}

/* One (sequence, head) block of the BLAS attention: the tasks of
 * attention_blas_fwd/bwd, run on whichever pool thread is free with that
 * thread's score scratch. OpenBLAS is single-threaded (cpu.c), so the
 * blocks themselves are the parallelism: 72 of them for 8 sequences × 9
 * heads against one hand-off per GEMM before. */
typedef struct blas_attn {
    float *out, *lse, *dq, *dk, *dv;
    const float *q, *k, *v, *dout, *o, *lse_in;
    const int64_t *seq_start;
    int64_t *order;      /* sequences, longest first (largest tasks first balances the tail) */
    float *scratch;      /* per thread: S, dS (max_len² each) and l (max_len) */
    size_t scratch_per_thread;
    int64_t n, H, KV, hd, max_len;
    int64_t window;
    float scale;
} blas_attn;

static void attn_blas_fwd_task(void *p, int64_t task, int tid)
{
    blas_attn *a = p;
    int64_t s = a->order[task / a->H], h = task % a->H;
    int64_t t0 = a->seq_start[s], L = a->seq_start[s + 1] - t0;
    const int64_t hd = a->hd, kvh = h / (a->H / a->KV);
    const int ldq = (int)(a->H * hd), ldk = (int)(a->KV * hd);
    float *S = a->scratch + (size_t)tid * a->scratch_per_thread, *l = S + 2 * a->max_len * a->max_len;
    const float *Q = a->q + t0 * ldq + h * hd, *K = a->k + t0 * ldk + kvh * hd, *V = a->v + t0 * ldk + kvh * hd;
    /* S = Q Kᵀ (L, L); the upper triangle is computed and discarded:
     * cheaper than L small products */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)L, (blasint)L, (blasint)hd, 1.0f, Q, ldq, K, ldk,
                0.0f, S, (blasint)L);
    sm_arg sm = {.S = S, .lse = l, .L = L, .window = a->window, .scale = a->scale};
    softmax_rows(&sm, 0, L, tid);
    for (int64_t i = 0; i < L; i++)
        a->lse[h * a->n + t0 + i] = l[i];
    /* O = P V */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)L, (blasint)hd, (blasint)L, 1.0f, S, (blasint)L,
                V, ldk, 0.0f, a->out + t0 * ldq + h * hd, ldq);
}

/* tasks are (sequence, kv head): dK and dV of a kv head accumulate over
 * the query heads of its group, so one task owns them */
static void attn_blas_bwd_task(void *p, int64_t task, int tid)
{
    blas_attn *a = p;
    int64_t s = a->order[task / a->KV], kvh = task % a->KV;
    int64_t t0 = a->seq_start[s], L = a->seq_start[s + 1] - t0;
    const int64_t hd = a->hd, group = a->H / a->KV;
    const int ldq = (int)(a->H * hd), ldk = (int)(a->KV * hd);
    const float scale = a->scale;
    float *S = a->scratch + (size_t)tid * a->scratch_per_thread, *dS = S + a->max_len * a->max_len;
    const float *K = a->k + t0 * ldk + kvh * hd, *V = a->v + t0 * ldk + kvh * hd;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
        float beta_kv = h == kvh * group ? 0.0f : 1.0f;
        const float *Q = a->q + t0 * ldq + h * hd;
        const float *dO = a->dout + t0 * ldq + h * hd, *O = a->o + t0 * ldq + h * hd;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)L, (blasint)L, (blasint)hd, 1.0f, Q, ldq, K,
                    ldk, 0.0f, S, (blasint)L);
        /* dP = dO Vᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)L, (blasint)L, (blasint)hd, 1.0f, dO, ldq, V,
                    ldk, 0.0f, dS, (blasint)L);
        sm_arg sm = {.S = S,
                     .dS = dS,
                     .lse_in = a->lse_in + h * a->n + t0,
                     .dO = dO,
                     .O = O,
                     .L = L,
                     .ld_o = ldq,
                     .hd = hd,
                     .window = a->window,
                     .scale = scale};
        softmax_bwd_rows(&sm, 0, L, tid);
        /* dQ = scale·dS K ; dK += scale·dSᵀ Q ; dV += Pᵀ dO */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)L, (blasint)hd, (blasint)L, scale, dS,
                    (blasint)L, K, ldk, 0.0f, a->dq + t0 * ldq + h * hd, ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)L, (blasint)hd, (blasint)L, scale, dS,
                    (blasint)L, Q, ldq, beta_kv, a->dk + t0 * ldk + kvh * hd, ldk);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)L, (blasint)hd, (blasint)L, 1.0f, S,
                    (blasint)L, dO, ldq, beta_kv, a->dv + t0 * ldk + kvh * hd, ldk);
    }
}

static int cmp_len_desc(const void *x, const void *y, void *ss)
{
    const int64_t *st = ss, i = *(const int64_t *)x, j = *(const int64_t *)y;
    int64_t li = st[i + 1] - st[i], lj = st[j + 1] - st[j];
    return li != lj ? (li > lj ? -1 : 1) : (i > j) - (i < j);
}

/* Sets up a->order and a->scratch; RLP_E_NOMEM leaves nothing allocated. */
static int blas_attn_prepare(rlpi_backend *be, blas_attn *a, const int64_t *seq_start, int64_t n_seq, int64_t max_len)
{
    int threads = rlpi_threadpool_size(POOL(be));
    a->seq_start = seq_start;
    a->max_len = max_len;
    a->scratch_per_thread = (size_t)(2 * max_len * max_len + max_len + 16);
    a->order = malloc((size_t)n_seq * sizeof *a->order);
    a->scratch = malloc((size_t)threads * a->scratch_per_thread * sizeof(float));
    if (!a->order || !a->scratch) {
        free(a->order);
        free(a->scratch);
        return RLP_E_NOMEM;
    }
    for (int64_t s = 0; s < n_seq; s++)
        a->order[s] = s;
    qsort_r(a->order, (size_t)n_seq, sizeof *a->order, cmp_len_desc, (void *)seq_start);
    return RLP_OK;
}

int rlpi_cpu_attention_fwd(rlpi_backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, float scale, int64_t window)
{
    int64_t max_len = max_seq_len(seq_start, n_seq);
    blas_attn a = {.out = out,
                   .lse = lse,
                   .q = q,
                   .k = k,
                   .v = v,
                   .n = n,
                   .H = n_heads,
                   .KV = n_kv_heads,
                   .hd = head_dim,
                   .window = window,
                   .scale = scale};
    if (max_len > rlpi_cpu_attention_blas_max_len || blas_attn_prepare(be, &a, seq_start, n_seq, max_len))
        return attention_fwd_streaming(be, out, lse, q, k, v, seq_start, n_seq, n, n_heads, n_kv_heads, head_dim, scale,
                                       window);
    rlpi_threadpool_run_tasks(POOL(be), n_seq * n_heads, attn_blas_fwd_task, &a);
    free(a.order);
    free(a.scratch);
    return RLP_OK;
}

int rlpi_cpu_attention_bwd(rlpi_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, const float *lse, const int64_t *seq_start,
                           int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                           int64_t window)
{
    int64_t max_len = max_seq_len(seq_start, n_seq);
    blas_attn a = {.dq = dq,
                   .dk = dk,
                   .dv = dv,
                   .dout = dout,
                   .q = q,
                   .k = k,
                   .v = v,
                   .o = out,
                   .lse_in = lse,
                   .n = n,
                   .H = n_heads,
                   .KV = n_kv_heads,
                   .hd = head_dim,
                   .window = window,
                   .scale = scale};
    if (max_len > rlpi_cpu_attention_blas_max_len || blas_attn_prepare(be, &a, seq_start, n_seq, max_len))
        return attention_bwd_streaming(be, dq, dk, dv, dout, q, k, v, out, lse, seq_start, n_seq, n, n_heads,
                                       n_kv_heads, head_dim, scale, window);
    rlpi_threadpool_run_tasks(POOL(be), n_seq * n_kv_heads, attn_blas_bwd_task, &a);
    free(a.order);
    free(a.scratch);
    return RLP_OK;
}

/* ------------------------------------------------------------------- SwiGLU */

typedef struct ew_arg {
    float *y, *y2;
    const float *a, *b, *c;
    float alpha;
    int64_t cols;
} ew_arg;

static void swiglu_fwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    rlpi_vec_swiglu_fwd(a->y + b, a->a + b, a->b + b, e - b);
}

/* ------------------------------------------------------- cached attention */

typedef struct cached_arg {
    float *out;
    const float *q, *kc, *vc;
    const int64_t *q_start, *slot, *past;
    int64_t n_seq, n, slot_stride, H, KV, hd, max_keys;
    int64_t heads_per_item; /* query heads an item covers: the kv group, or 1 */
    int64_t window;
    float scale;
    int nomem;
} cached_arg;

/* items: (token, kv head) with the `group` query heads that share it done
 * together, so each cache row is read once for all of them; or, when those
 * items are too few to share out evenly (batch-1 decode: 3 items, one
 * thread doing two), (token, query head). A head's result is the same
 * either way (rlpi_vec_attend). */
static void attn_cached_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    cached_arg *a = p;
    const int64_t group = a->H / a->KV, per = a->heads_per_item, items_per_token = a->H / per;
    float *s = malloc((size_t)(per * a->max_keys) * sizeof(float));
    if (!s) {
        __atomic_store_n(&a->nomem, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t it = b; it < e; it++) {
        int64_t i = it / items_per_token, h0 = (it % items_per_token) * per, kvh = h0 / group;
        int64_t sq = seq_of(a->q_start, a->n_seq, i);
        int64_t pos = a->past[sq] + (i - a->q_start[sq]);
        /* keys j0 .. pos: K and V start at row j0 so the loops below are
         * those of full causal attention over nk rows */
        const int64_t row = a->KV * a->hd, j0 = first_key(0, pos, a->window), nk = pos + 1 - j0;
        const float *K = a->kc + a->slot[sq] * a->slot_stride + j0 * row + kvh * a->hd;
        const float *V = a->vc + a->slot[sq] * a->slot_stride + j0 * row + kvh * a->hd;
        for (int64_t g0 = 0; g0 < per; g0 += RLPI_VEC_ATTEND_MAX_GROUP) {
            int g = per - g0 < RLPI_VEC_ATTEND_MAX_GROUP ? (int)(per - g0) : RLPI_VEC_ATTEND_MAX_GROUP;
            const float *qs[RLPI_VEC_ATTEND_MAX_GROUP];
            float *os[RLPI_VEC_ATTEND_MAX_GROUP];
            for (int h = 0; h < g; h++) {
                qs[h] = a->q + (i * a->H + h0 + g0 + h) * a->hd;
                os[h] = a->out + (i * a->H + h0 + g0 + h) * a->hd;
            }
            rlpi_vec_attend(os, qs, g, K, V, row, nk, a->hd, a->scale, s);
        }
    }
    free(s);
}

int rlpi_cpu_attention_cached(rlpi_backend *be, float *out, const float *q, const float *kc, const float *vc,
                              const int64_t *q_start, const int64_t *slot, const int64_t *past, int64_t n_seq,
                              int64_t n, int64_t slot_stride, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                              float scale, int64_t window)
{
    int64_t max_keys = 1;
    for (int64_t s = 0; s < n_seq; s++)
        if (past[s] + q_start[s + 1] - q_start[s] > max_keys)
            max_keys = past[s] + q_start[s + 1] - q_start[s];
    const int threads = rlpi_threadpool_size(POOL(be));
    const int64_t group = n_heads / n_kv_heads;
    /* per query head when the grouped items cannot keep every thread
     * equally busy (fewer than 4 a thread, not a multiple of the threads) */
    const bool by_head = threads > 1 && group > 1 && n * n_kv_heads < 4 * threads && (n * n_kv_heads) % threads;
    cached_arg a = {.out = out,
                    .q = q,
                    .kc = kc,
                    .vc = vc,
                    .q_start = q_start,
                    .slot = slot,
                    .past = past,
                    .n_seq = n_seq,
                    .n = n,
                    .slot_stride = slot_stride,
                    .H = n_heads,
                    .KV = n_kv_heads,
                    .hd = head_dim,
                    .max_keys = max_keys,
                    .heads_per_item = by_head ? 1 : group,
                    .window = window,
                    .scale = scale};
    rlpi_threadpool_parallel_for(POOL(be), n * (n_heads / a.heads_per_item), 1, attn_cached_range, &a);
    return a.nomem ? rlpi_error_set(RLP_E_NOMEM, "cached attention: out of memory") : RLP_OK;
}

int rlpi_cpu_swiglu_fwd(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n)
{
    ew_arg a = {.y = out, .a = gate, .b = up};
    rlpi_threadpool_parallel_for(POOL(be), n, 4096, swiglu_fwd_range, &a);
    return RLP_OK;
}

/* silu(g) = g·σ(g); silu'(g) = σ(g)·(1 + g·(1 − σ(g))) */
static void swiglu_bwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    rlpi_vec_swiglu_bwd(a->y + b, a->y2 + b, a->c + b, a->a + b, a->b + b, e - b);
}

int rlpi_cpu_swiglu_bwd(rlpi_backend *be, float *dgate, float *dup, const float *dout,
                        const float *gate, const float *up, int64_t n)
{
    ew_arg a = {.y = dgate, .y2 = dup, .a = gate, .b = up, .c = dout};
    rlpi_threadpool_parallel_for(POOL(be), n, 4096, swiglu_bwd_range, &a);
    return RLP_OK;
}

/* ------------------------------------------------------------------- GeGLU */

static void geglu_fwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    rlpi_vec_geglu_fwd(a->y + b, a->a + b, a->b + b, e - b);
}

int rlpi_cpu_geglu_fwd(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n)
{
    ew_arg a = {.y = out, .a = gate, .b = up};
    rlpi_threadpool_parallel_for(POOL(be), n, 4096, geglu_fwd_range, &a);
    return RLP_OK;
}

static void geglu_bwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    rlpi_vec_geglu_bwd(a->y + b, a->y2 + b, a->c + b, a->a + b, a->b + b, e - b);
}

int rlpi_cpu_geglu_bwd(rlpi_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                       const float *up, int64_t n)
{
    ew_arg a = {.y = dgate, .y2 = dup, .a = gate, .b = up, .c = dout};
    rlpi_threadpool_parallel_for(POOL(be), n, 4096, geglu_bwd_range, &a);
    return RLP_OK;
}

/* ------------------------------------------------------------- soft-capping */

/* x = cap·tanh(x / cap); tanhf is scalar, but this runs over one chunk
 * of logits rows (head_chunk_tokens × vocab) per call, only for models
 * that ask for it */
static void softcap_fwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    const float cap = a->alpha, inv = 1.0f / a->alpha;
    for (int64_t i = b; i < e; i++)
        a->y[i] = cap * tanhf(a->y[i] * inv);
}

int rlpi_cpu_softcap_fwd(rlpi_backend *be, float *x, int64_t n, float cap)
{
    ew_arg a = {.y = x, .alpha = cap};
    rlpi_threadpool_parallel_for(POOL(be), n, 4096, softcap_fwd_range, &a);
    return RLP_OK;
}

/* d/dx cap·tanh(x/cap) = 1 − tanh² = 1 − (y/cap)² */
static void softcap_bwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    const float inv = 1.0f / a->alpha;
    for (int64_t i = b; i < e; i++) {
        float t = a->a[i] * inv;
        a->y[i] *= 1.0f - t * t;
    }
}

int rlpi_cpu_softcap_bwd(rlpi_backend *be, float *dx, const float *y, int64_t n, float cap)
{
    ew_arg a = {.y = dx, .a = y, .alpha = cap};
    rlpi_threadpool_parallel_for(POOL(be), n, 4096, softcap_bwd_range, &a);
    return RLP_OK;
}

/* -------------------------------------------------------------- elementwise */

static void add_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    for (int64_t i = b; i < e; i++)
        a->y[i] += a->a[i];
}

int rlpi_cpu_add(rlpi_backend *be, float *y, const float *x, int64_t n)
{
    ew_arg a = {.y = y, .a = x};
    rlpi_threadpool_parallel_for(POOL(be), n, 8192, add_range, &a);
    return RLP_OK;
}

static void add_bias_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    for (int64_t r = b; r < e; r++)
        for (int64_t c = 0; c < a->cols; c++)
            a->y[r * a->cols + c] += a->a[c];
}

int rlpi_cpu_add_bias(rlpi_backend *be, float *y, const float *bias, int64_t rows, int64_t cols)
{
    ew_arg a = {.y = y, .a = bias, .cols = cols};
    rlpi_threadpool_parallel_for(POOL(be), rows, 16, add_bias_range, &a);
    return RLP_OK;
}

typedef struct colsum_arg {
    float *dbias;
    const float *dy;
    int64_t rows, cols;
} colsum_arg;

static void bias_bwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    colsum_arg *a = p;
    for (int64_t c = b; c < e; c++) {
        double s = 0;
        for (int64_t r = 0; r < a->rows; r++)
            s += a->dy[r * a->cols + c];
        a->dbias[c] += (float)s;
    }
}

int rlpi_cpu_bias_bwd(rlpi_backend *be, float *dbias, const float *dy, int64_t rows, int64_t cols)
{
    colsum_arg a = {dbias, dy, rows, cols};
    rlpi_threadpool_parallel_for(POOL(be), cols, 16, bias_bwd_range, &a);
    return RLP_OK;
}

static void scale_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_arg *a = p;
    for (int64_t i = b; i < e; i++)
        a->y[i] *= a->alpha;
}

int rlpi_cpu_scale(rlpi_backend *be, float *x, float alpha, int64_t n)
{
    ew_arg a = {.y = x, .alpha = alpha};
    rlpi_threadpool_parallel_for(POOL(be), n, 8192, scale_range, &a);
    return RLP_OK;
}

/* ----------------------------------------------------- fused logprob head */

typedef struct lp_arg {
    float *logp, *entropy, *logits;
    const float *logits_in, *dlogp, *dentropy;
    const int32_t *targets;
    int64_t vocab;
    float inv_temp;
    int bad;
} lp_arg;

static void lp_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    lp_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        const float *row = a->logits_in + i * a->vocab;
        int32_t t = a->targets[i];
        if (t < 0 || t >= a->vocab) {
            __atomic_store_n(&a->bad, 1, __ATOMIC_RELAXED);
            continue;
        }
        double lse, pz;
        rlpi_vec_row_stats(row, a->vocab, a->inv_temp, &lse, &pz);
        a->logp[i] = (float)((double)(row[t] * a->inv_temp) - lse);
        if (a->entropy)
            a->entropy[i] = (float)(lse - pz); /* H = −Σ p (z − lse) */
    }
}

int rlpi_cpu_logprob_rows(rlpi_backend *be, float *logp, float *entropy, const float *logits,
                          const int32_t *targets, int64_t n, int64_t vocab, float inv_temp)
{
    lp_arg a = {.logp = logp, .entropy = entropy, .logits_in = logits, .targets = targets,
                .vocab = vocab, .inv_temp = inv_temp};
    rlpi_threadpool_parallel_for(POOL(be), n, 1, lp_range, &a);
    return a.bad ? rlpi_error_set(RLP_E_INVALID_ARG, "logprob: target id outside [0, %lld)", (long long)vocab)
                 : RLP_OK;
}

/* With z = logits/T, p = softmax(z), H = lse − Σ p z:
 *   ∂logp_t/∂z_j = δ_jt − p_j ;  ∂H/∂z_j = −p_j (z_j − lse + H)
 *   ∂L/∂logits_j = (1/T)·(dlogp·(δ_jt − p_j) − dH·p_j·(z_j − lse + H)) */
static void lp_bwd_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    lp_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        float *row = a->logits + i * a->vocab;
        int32_t t = a->targets[i];
        if (t < 0 || t >= a->vocab) {
            __atomic_store_n(&a->bad, 1, __ATOMIC_RELAXED);
            continue;
        }
        double lse, pz;
        rlpi_vec_row_stats(row, a->vocab, a->inv_temp, &lse, &pz);
        double H = lse - pz;
        float dl = a->dlogp[i], dh = a->dentropy ? a->dentropy[i] : 0.0f;
        float lse_f = (float)lse, zh = (float)(H - lse);
        float zt = row[t] * a->inv_temp, pt = expf(zt - lse_f);
        rlpi_vec_logprob_grad(row, a->vocab, a->inv_temp, lse_f, zh, dl, dh);
        row[t] = (-dl * pt - dh * pt * (zt + zh) + dl) * a->inv_temp;
    }
}

int rlpi_cpu_logprob_rows_bwd(rlpi_backend *be, float *logits, const int32_t *targets,
                              const float *dlogp, const float *dentropy, int64_t n, int64_t vocab,
                              float inv_temp)
{
    lp_arg a = {.logits = logits, .dlogp = dlogp, .dentropy = dentropy, .targets = targets,
                .vocab = vocab, .inv_temp = inv_temp};
    rlpi_threadpool_parallel_for(POOL(be), n, 1, lp_bwd_range, &a);
    return a.bad ? rlpi_error_set(RLP_E_INVALID_ARG, "logprob backward: target id outside [0, %lld)",
                                  (long long)vocab)
                 : RLP_OK;
}

/* ---------------------------------------------------------------- optimizer */

typedef struct ss_arg {
    const float *x;
    double partial[MAX_RANGES];
} ss_arg;

static void ss_range(void *p, int64_t b, int64_t e, int tid)
{
    ss_arg *a = p;
    double s = 0;
    for (int64_t i = b; i < e; i++)
        s += (double)a->x[i] * a->x[i];
    a->partial[tid] = s;
}

int rlpi_cpu_sum_squares(rlpi_backend *be, double *out, const float *x, int64_t n)
{
    ss_arg *a = calloc(1, sizeof *a);
    if (!a)
        return rlpi_error_set(RLP_E_NOMEM, "sum of squares: out of memory");
    a->x = x;
    rlpi_threadpool_parallel_for(POOL(be), n, 65536, ss_range, a);
    double s = 0;
    for (int t = 0; t < rlpi_threadpool_size(POOL(be)) && t < MAX_RANGES; t++)
        s += a->partial[t]; /* in range order: deterministic */
    free(a);
    *out = s;
    return RLP_OK;
}

typedef struct adam_arg {
    float *p, *m, *v;
    const float *g;
    const rlpi_adamw_step *st;
} adam_arg;

static void adam_range(void *p, int64_t b, int64_t e, int tid)
{
    (void)tid;
    adam_arg *a = p;
    const rlpi_adamw_step *s = a->st;
    for (int64_t i = b; i < e; i++) {
        float g = a->g[i] * s->grad_scale;
        float m = s->beta1 * a->m[i] + (1.0f - s->beta1) * g;
        float v = s->beta2 * a->v[i] + (1.0f - s->beta2) * g * g;
        a->m[i] = m;
        a->v[i] = v;
        float mhat = m / s->bias_correction1, vhat = v / s->bias_correction2;
        a->p[i] -= s->lr * (mhat / (sqrtf(vhat) + s->eps) + s->weight_decay * a->p[i]);
    }
}

int rlpi_cpu_adamw(rlpi_backend *be, float *param, const float *grad, float *m, float *v, int64_t n,
                   const rlpi_adamw_step *step)
{
    adam_arg a = {param, m, v, grad, step};
    rlpi_threadpool_parallel_for(POOL(be), n, 16384, adam_range, &a);
    return RLP_OK;
}
