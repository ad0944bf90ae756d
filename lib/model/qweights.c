/* The quantized rollout copy (qweights.h). Each row is quantized with
 * GGUF's formula of its type straight into the kernels' split layout, so
 * the copy dequantizes to exactly what llama.cpp would make of the same
 * fp32 rows (test_qmatmul compares the bytes with rlpi_quantize +
 * rlpi_qmat_pack_*):
 *   Q8_0: ggml's quantize_row_q8_0_ref, as quant.c's rlpi_quantize:
 *         d = max|x| / 127, q = roundf(x / d) computed as x · (1/d), fp16 d;
 *   Q4_0: quantize_row_q4_0_ref: m = the x of largest |x| (sign kept),
 *         d = m / -8, nibble = min(15, (int)(x · (1/d) + 8.5)), fp16 d. */
#include "model/qweights.h"

#include "backend/qmat.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "model/quant.h"
#include "model/qbase.h"
#include "model/transformer_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the bytes must equal ggml's: no fused multiply-adds (GCC does not
 * contract in ISO C mode) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* One quantized matrix made of up to three fp32 tensors stacked along the
 * output rows (QKV, gate-up). */
typedef struct qmat_src {
    int type; /* RLPI_QMAT_* */
    uint8_t *dst;
    int64_t n, k;
    const float *part[3];
    int64_t rows[3];
    int failed; /* atomic: a row's quantizer failed (cannot for finite shapes) */
} qmat_src;

/* roundf for |v| < 2^31 without a libm call (baseline x86-64 has no
 * rounding instruction): the truncation, moved away from zero when the
 * dropped part is at least one half; v − trunc(v) is exact. */
static inline int round_half_away(float v)
{
    int i = (int)v;
    float frac = v - (float)i;
    return i + (frac >= 0.5f) - (frac <= -0.5f);
}

/* Row x[k] into the split layout: quants q[kp] (offset binary), scales s[kb]. */
static void quantize_row(const float *x, int64_t k, uint8_t *q, float *s)
{
    int64_t kp = rlpi_qmat_kpad(k);
    for (int64_t lo = 0; lo < kp; lo += 32) {
        int64_t hi = lo + 32 < k ? lo + 32 : k;
        float amax = 0.0f;
        for (int64_t e = lo; e < hi; e++) {
            float v = fabsf(x[e]);
            amax = v > amax ? v : amax;
        }
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        s[lo / 32] = rlpi_fp16_to_fp32(rlpi_fp32_to_fp16(d));
        int64_t e = lo;
        for (; e < hi; e++)
            q[e] = (uint8_t)(round_half_away(x[e] * id) + 128);
        for (; e < lo + 32; e++)
            q[e] = 0x80; /* the zeros after k */
    }
}

/* Row x[k] into the Q4_0 layout (qmat.h): nibbles q[kp / 2], scales
 * s[kb]; blocks wholly past k get scale 0 and nibble 8 (zero), as
 * rlpi_qmat_pack_q4_0 writes them. */
static void quantize_row_q4_0(const float *x, int64_t k, uint8_t *q, float *s)
{
    int64_t kp = rlpi_qmat_kpad(k);
    for (int64_t lo = 0; lo < kp; lo += 32) {
        uint8_t *pq = q + (lo / 64) * 32;
        const int x0 = (int)(lo % 64); /* the block's first element in its pair */
        if (lo >= k) {
            s[lo / 32] = 0.0f;
            for (int e = 0; e < 32; e++)
                rlpi_qmat_q4_set(pq, x0 + e, 8u);
            continue;
        }
        int64_t hi = lo + 32 < k ? lo + 32 : k;
        float amax = 0.0f, max = 0.0f;
        for (int64_t e = lo; e < hi; e++)
            if (fabsf(x[e]) > amax) {
                amax = fabsf(x[e]);
                max = x[e];
            }
        float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        s[lo / 32] = rlpi_fp16_to_fp32(rlpi_fp32_to_fp16(d));
        for (int e = 0; e < 32; e++) {
            float v = (lo + e < hi ? x[lo + e] : 0.0f) * id + 8.5f;
            int u = (int)v; /* truncation, as the reference's (int8_t) cast */
            rlpi_qmat_q4_set(pq, x0 + e, u > 15 ? 15u : (unsigned)u);
        }
    }
}

static void quantize_range(void *arg, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    qmat_src *s = arg;
    int64_t kp = rlpi_qmat_kpad(s->k), kb = kp / 32, wrow = (int64_t)rlpi_qmat_row_bytes(s->type, s->k);
    float *scales = (float *)(s->dst + (size_t)s->n * (size_t)wrow);
    for (int64_t j = begin; j < end; j++) {
        int64_t r = j, p = 0;
        while (r >= s->rows[p]) {
            r -= s->rows[p];
            p++;
        }
        if (s->type == RLPI_QMAT_Q4_0)
            quantize_row_q4_0(s->part[p] + r * s->k, s->k, s->dst + (size_t)j * (size_t)wrow, scales + j * kb);
        else
            quantize_row(s->part[p] + r * s->k, s->k, s->dst + (size_t)j * (size_t)wrow, scales + j * kb);
    }
}

static int quantize_matrix(rlpi_threadpool *pool, int type, uint8_t *dst, int64_t k, const float *const *parts,
                           const int64_t *rows, int n_parts)
{
    qmat_src s = {.type = type, .dst = dst, .k = k};
    for (int p = 0; p < n_parts; p++) {
        s.part[p] = parts[p];
        s.rows[p] = rows[p];
        s.n += rows[p];
    }
    rlpi_threadpool_parallel_for(pool, s.n, 16, quantize_range, &s);
    return s.failed ? rlpi_error_set(RLP_E_NOMEM, "quantizing the rollout weights: out of memory") : RLP_OK;
}

static size_t align64(size_t x)
{
    return (x + 63) / 64 * 64;
}

int rlpi_qweights_create(rlpi_qweights **out, rlpi_transformer *tf, int type)
{
    if (!out || !tf)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized weights: NULL argument");
    if (type != RLPI_QMAT_Q8_0 && type != RLPI_QMAT_Q4_0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized weights: unknown type %d", type);
    if (!rlpi_op_qmatmul_available(tf->be) || !rlpi_buffer_host(tf->params))
        return rlpi_error_set(RLP_E_UNSUPPORTED, "quantized weights: the %s backend has no quantized products",
                              tf->be->ops->name);
    const rlpi_model_config *c = &tf->cfg;
    rlpi_qweights *qw = calloc(1, sizeof *qw);
    if (!qw || !(qw->layers = calloc((size_t)c->n_layers, sizeof *qw->layers))) {
        free(qw);
        return rlpi_error_set(RLP_E_NOMEM, "quantized weights: out of memory");
    }
    qw->tf = tf;
    qw->type = type;
    /* the head in Q8_0 under 4-bit layers, as llama.cpp's quantizer keeps
     * the output matrix at a higher precision than the layers */
    qw->head_type = RLPI_QMAT_Q8_0;
    int64_t d = c->dim, F = c->ffn_dim;
    size_t off = 0;
    for (int l = 0; l < c->n_layers; l++) {
        rlpi_qlayer *L = &qw->layers[l];
        L->qkv = off;
        off = align64(off + rlpi_qmat_bytes(type, tf->qdim + 2 * tf->kvdim, d));
        L->wo = off;
        off = align64(off + rlpi_qmat_bytes(type, d, tf->qdim));
        L->gu = off;
        off = align64(off + rlpi_qmat_bytes(type, 2 * F, d));
        L->wd = off;
        off = align64(off + rlpi_qmat_bytes(type, d, F));
    }
    qw->head = off;
    off += rlpi_qmat_bytes(qw->head_type, c->vocab_size, d);
    int rc = rlpi_buffer_alloc(tf->be, off, &qw->buf);
    if (!rc && !rlpi_buffer_host(qw->buf))
        rc = rlpi_error_set(RLP_E_UNSUPPORTED, "quantized weights: backend memory is not host-visible");
    if (!rc)
        rc = rlpi_qweights_update(qw, tf);
    if (rc) {
        rlpi_qweights_free(qw);
        return rlpi_error_wrap("quantized rollout weights (%.1f MiB)", (double)off / 1048576.0);
    }
    *out = qw;
    return RLP_OK;
}

int rlpi_qweights_update(rlpi_qweights *qw, rlpi_transformer *tf)
{
    if (!qw || !tf)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized weights: NULL argument");
    const rlpi_model_config *c = &tf->cfg, *o = &qw->tf->cfg;
    if (c->n_layers != o->n_layers || c->dim != o->dim || c->ffn_dim != o->ffn_dim ||
        c->vocab_size != o->vocab_size || tf->qdim != qw->tf->qdim || tf->kvdim != qw->tf->kvdim)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized weights: made for another model shape");
    const float *W = rlpi_buffer_host(tf->params);
    uint8_t *Q = rlpi_buffer_host(qw->buf);
    if (!W || !Q)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "quantized weights: parameters not in host memory");
    double t0 = rlpi_now_s();
    rlpi_threadpool *pool = rlpi_backend_cpu_pool(tf->be);
    int64_t d = c->dim, F = c->ffn_dim;
    int rc = RLP_OK;
    for (int l = 0; !rc && l < c->n_layers; l++) {
        const layer_params *P = &tf->layers[l];
        const rlpi_qlayer *L = &qw->layers[l];
        if ((rc = rlpi_qbase_load_layer(tf, l)) != RLP_OK) /* a quantized base: its fp32 values, a layer at a time */
            break;
        const float *qkv[3] = {W + P->wq, W + P->wk, W + P->wv};
        int64_t qkv_rows[3] = {tf->qdim, tf->kvdim, tf->kvdim};
        const float *gu[2] = {W + P->wg, W + P->wu};
        int64_t gu_rows[2] = {F, F};
        const float *wo = W + P->wo, *wd = W + P->wd;
        const int t = qw->type;
        if ((rc = quantize_matrix(pool, t, Q + L->qkv, d, qkv, qkv_rows, 3)) ||
            (rc = quantize_matrix(pool, t, Q + L->wo, tf->qdim, &wo, &d, 1)) ||
            (rc = quantize_matrix(pool, t, Q + L->gu, d, gu, gu_rows, 2)))
            break;
        rc = quantize_matrix(pool, t, Q + L->wd, F, &wd, &d, 1);
    }
    if (!rc) {
        const float *head = W + tf->lm_head;
        int64_t vocab = c->vocab_size;
        rc = quantize_matrix(pool, qw->head_type, Q + qw->head, d, &head, &vocab, 1);
    }
    qw->last_update_s = rlpi_now_s() - t0;
    qw->updates++;
    return rc;
}

size_t rlpi_qweights_bytes(const rlpi_qweights *qw)
{
    return qw && qw->buf ? qw->buf->nbytes : 0;
}

void rlpi_qweights_free(rlpi_qweights *qw)
{
    if (!qw)
        return;
    rlpi_buffer_free(qw->buf);
    free(qw->layers);
    free(qw);
}
