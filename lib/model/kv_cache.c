/* KV-cached inference: the decoder layers of transformer.c without the
 * activations that backward needs, writing keys and values into cache
 * slots and attending over them. Like transformer.c it calls only backend
 * wrappers, so the CUDA backend runs it unchanged. Sliding-window layers
 * keep every row too (the window masks by position): simpler slot
 * copies and prefix sharing, at the cost of cache memory a ring buffer
 * would save on local layers. */
#include "model/kv_cache.h"

#include "backend/qmat.h"
#include "core/error.h"
#include "model/qbase.h"
#include "model/qweights.h"
#include "model/transformer_internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct rlpi_kv_cache {
    rlpi_backend *be;
    int64_t n_layers, kvdim, n_slots, capacity;
    int64_t slot_stride;        /* capacity · kvdim floats */
    rlpi_buffer *kv;            /* (n_layers, 2, n_slots, capacity, kvdim) */
    /* workspace of the last call, grown on demand */
    int64_t ws_tokens, ws_seqs;
    rlpi_buffer *x, *xn, *rstd, *q, *k, *v, *att, *gate, *up, *act; /* (n, ·) */
    rlpi_buffer *tmp, *rstd_h;  /* post_norms: a sublayer's normed output (n, dim); qk_norm: (n·H) rstd */
    rlpi_buffer *ids, *pos;     /* int32 (n) */
    rlpi_buffer *last, *rows, *rows_n, *rows_rstd, *logits; /* (n_seq, ·) */
    /* quantized products (rlpi_kv_cache_set_qweights): the rollout copy
     * (borrowed) and the fused QKV (n, qdim + 2·kvdim) and gate-up (n, 2·ffn)
     * outputs, split into q/k/v and gate/up on the host */
    const rlpi_qweights *qw;
    int64_t qws_tokens;
    rlpi_buffer *qkv, *gu;
};

static size_t k_off(const rlpi_kv_cache *kv, int64_t l)
{
    return (size_t)((l * 2 + 0) * kv->n_slots * kv->slot_stride);
}

static size_t v_off(const rlpi_kv_cache *kv, int64_t l)
{
    return (size_t)((l * 2 + 1) * kv->n_slots * kv->slot_stride);
}

int rlpi_kv_cache_create(rlpi_kv_cache **out, rlpi_transformer *tf, int64_t n_slots, int64_t capacity)
{
    if (!out || !tf || n_slots < 1 || capacity < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "KV cache: bad arguments");
    if (capacity > tf->cfg.max_seq_len)
        return rlpi_error_set(RLP_E_INVALID_ARG, "KV cache: capacity %lld exceeds the context length %d",
                              (long long)capacity, tf->cfg.max_seq_len);
    rlpi_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return rlpi_error_set(RLP_E_NOMEM, "KV cache: out of memory");
    kv->be = tf->be;
    kv->n_layers = tf->cfg.n_layers;
    kv->kvdim = tf->kvdim;
    kv->n_slots = n_slots;
    kv->capacity = capacity;
    kv->slot_stride = capacity * tf->kvdim;
    double bytes = (double)kv->n_layers * 2.0 * (double)n_slots * (double)kv->slot_stride * 4.0;
    int rc = bytes > (double)(SIZE_MAX / 2)
                 ? rlpi_error_set(RLP_E_OVERFLOW, "KV cache: %.0f bytes do not fit", bytes)
                 : rlpi_buffer_alloc(kv->be, (size_t)bytes, &kv->kv);
    if (rc) {
        free(kv);
        return rlpi_error_wrap("KV cache of %lld slots × %lld tokens (%.1f MiB)", (long long)n_slots,
                               (long long)capacity, bytes / 1048576.0);
    }
    *out = kv;
    return RLP_OK;
}

/* Every buffer the cache owns (NULL where not grown yet), into out;
 * returns the count (at most KV_BUFFERS). */
enum { KV_BUFFERS = 22 };
static size_t cache_buffers(rlpi_kv_cache *kv, rlpi_buffer **out)
{
    rlpi_buffer *bufs[KV_BUFFERS] = {kv->kv,   kv->x,      kv->xn,        kv->rstd,   kv->q,   kv->k,     kv->v,
                                     kv->att,  kv->gate,   kv->up,        kv->act,    kv->ids, kv->pos,   kv->last,
                                     kv->rows, kv->rows_n, kv->rows_rstd, kv->logits, kv->tmp, kv->rstd_h,
                                     kv->qkv,  kv->gu};
    memcpy(out, bufs, sizeof bufs);
    return KV_BUFFERS;
}

void rlpi_kv_cache_free(rlpi_kv_cache *kv)
{
    if (!kv)
        return;
    rlpi_buffer *bufs[KV_BUFFERS];
    for (size_t i = 0, n = cache_buffers(kv, bufs); i < n; i++)
        rlpi_buffer_free(bufs[i]);
    free(kv);
}

int64_t rlpi_kv_cache_slots(const rlpi_kv_cache *kv)
{
    return kv->n_slots;
}

int64_t rlpi_kv_cache_capacity(const rlpi_kv_cache *kv)
{
    return kv->capacity;
}

size_t rlpi_kv_cache_bytes(const rlpi_kv_cache *kv)
{
    return kv->kv->nbytes;
}

int rlpi_kv_cache_copy_prefix(rlpi_kv_cache *kv, int64_t dst, int64_t src, int64_t n_rows)
{
    if (!kv || dst < 0 || src < 0 || dst >= kv->n_slots || src >= kv->n_slots || n_rows < 0 ||
        n_rows > kv->capacity)
        return rlpi_error_set(RLP_E_INVALID_ARG, "KV cache: bad prefix copy");
    if (dst == src || n_rows == 0)
        return RLP_OK;
    size_t bytes = (size_t)(n_rows * kv->kvdim) * 4;
    for (int64_t l = 0; l < kv->n_layers; l++) {
        size_t offs[2] = {k_off(kv, l), v_off(kv, l)};
        for (int t = 0; t < 2; t++) {
            int rc = rlpi_buffer_copy(kv->kv, (offs[t] + (size_t)(dst * kv->slot_stride)) * 4, kv->kv,
                                      (offs[t] + (size_t)(src * kv->slot_stride)) * 4, bytes);
            if (rc)
                return rc;
        }
    }
    return RLP_OK;
}

static int grow(rlpi_backend *be, rlpi_buffer **b, int64_t elems)
{
    size_t bytes = (size_t)(elems > 0 ? elems : 1) * 4;
    if (*b && (*b)->nbytes >= bytes)
        return RLP_OK;
    rlpi_buffer_free(*b);
    *b = NULL;
    return rlpi_buffer_alloc(be, bytes, b);
}

static int ensure_workspace(rlpi_kv_cache *kv, const rlpi_transformer *tf, int64_t n, int64_t n_seq)
{
    if (n <= kv->ws_tokens && n_seq <= kv->ws_seqs)
        return RLP_OK;
    const rlpi_model_config *c = &tf->cfg;
    int64_t N = n > kv->ws_tokens ? n : kv->ws_tokens, S = n_seq > kv->ws_seqs ? n_seq : kv->ws_seqs;
    rlpi_backend *be = kv->be;
    int rc;
    if ((rc = grow(be, &kv->x, N * c->dim)) || (rc = grow(be, &kv->xn, N * c->dim)) ||
        (rc = grow(be, &kv->rstd, N)) || (rc = grow(be, &kv->q, N * tf->qdim)) ||
        (rc = grow(be, &kv->k, N * tf->kvdim)) || (rc = grow(be, &kv->v, N * tf->kvdim)) ||
        (rc = grow(be, &kv->att, N * tf->qdim)) || (rc = grow(be, &kv->gate, N * c->ffn_dim)) ||
        (rc = grow(be, &kv->up, N * c->ffn_dim)) || (rc = grow(be, &kv->act, N * c->ffn_dim)) ||
        (rc = grow(be, &kv->ids, N)) || (rc = grow(be, &kv->pos, N)) || (rc = grow(be, &kv->last, S)) ||
        (rc = grow(be, &kv->rows, S * c->dim)) || (rc = grow(be, &kv->rows_n, S * c->dim)) ||
        (rc = grow(be, &kv->rows_rstd, S)) || (rc = grow(be, &kv->logits, S * c->vocab_size)))
        return rc;
    if (c->post_norms && (rc = grow(be, &kv->tmp, N * c->dim)))
        return rc;
    if (c->qk_norm && (rc = grow(be, &kv->rstd_h, N * c->n_heads)))
        return rc;
    kv->ws_tokens = N;
    kv->ws_seqs = S;
    return RLP_OK;
}

void rlpi_kv_cache_release(rlpi_kv_cache *kv)
{
    if (!kv)
        return;
    rlpi_buffer *bufs[KV_BUFFERS];
    for (size_t i = 0, n = cache_buffers(kv, bufs); i < n; i++)
        rlpi_buffer_discard(bufs[i]);
}

void rlpi_kv_cache_set_qweights(rlpi_kv_cache *kv, const rlpi_qweights *qw)
{
    if (kv)
        kv->qw = qw;
}

/* The fused outputs of the quantized path, n rows. */
static int ensure_qworkspace(rlpi_kv_cache *kv, const rlpi_transformer *tf, int64_t n)
{
    if (n <= kv->qws_tokens)
        return RLP_OK;
    int rc;
    if ((rc = grow(kv->be, &kv->qkv, n * (tf->qdim + 2 * tf->kvdim))) ||
        (rc = grow(kv->be, &kv->gu, n * 2 * tf->cfg.ffn_dim)))
        return rc;
    kv->qws_tokens = n;
    return RLP_OK;
}

/* dst (n, width) = columns [col0, col0 + width) of the fused (n, total)
 * product in src. Host memory: the quantized path runs on the CPU backend
 * only (rlpi_qweights_create checks). */
static int split_cols(rlpi_buffer *src, int64_t n, int64_t total, int64_t col0, rlpi_buffer *dst, int64_t width)
{
    const float *s = rlpi_buffer_host(src);
    float *d = rlpi_buffer_host(dst);
    if (!s || !d)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "quantized decode: buffers not in host memory");
    for (int64_t i = 0; i < n; i++)
        memcpy(d + i * width, s + i * total + col0, (size_t)width * sizeof *d);
    return RLP_OK;
}

/* Whether a product of m activation rows uses the quantized copy: only
 * below the int8 kernels' switch (qmat.h); from there on the fp32 weights,
 * which are here anyway (except under a quantized base), beat the int8 kernels and need no dequantizing. */
static bool quantized(const rlpi_transformer *tf, const rlpi_kv_cache *kv, int64_t m)
{
    /* a quantized base has no fp32 weights at hand: the int8 kernels for every batch */
    return kv->qw && (m < rlpi_qmat_gemm_min_rows() || tf->qbase);
}

/* dst (n, width) = xn · Wᵀ for the Q, K or V weight at w_off: its columns
 * of the fused QKV product already made with the quantized copy, or an
 * fp32 product. */
static int qkv_part(rlpi_transformer *tf, rlpi_kv_cache *kv, int64_t n, rlpi_buffer *dst, int64_t col0, int64_t width,
                    size_t w_off)
{
    if (quantized(tf, kv, n))
        return split_cols(kv->qkv, n, tf->qdim + 2 * tf->kvdim, col0, dst, width);
    return rlpi_tf_mm(tf, dst, 0, kv->xn, 0, 0, tf->params, w_off, 1, n, width, tf->cfg.dim, 0.0f);
}

/* C (m, n_out) = A (m, k) · Wᵀ (+ C with beta 1): the quantized matrix at
 * byte q_off of the rollout copy when there is one, else the fp32 weight at
 * w_off of the parameters. */
static int linear(rlpi_transformer *tf, rlpi_kv_cache *kv, rlpi_buffer *C, rlpi_buffer *A, size_t w_off, size_t q_off,
                  int q_type, int64_t m, int64_t n_out, int64_t k, float beta)
{
    if (quantized(tf, kv, m))
        return rlpi_op_qmatmul(tf->be, RLPI_REF(C, 0), RLPI_REF(A, 0), kv->qw->buf, q_off, q_type, m, n_out, k, beta);
    return rlpi_tf_mm(tf, C, 0, A, 0, 0, tf->params, w_off, 1, m, n_out, k, beta);
}

static int layer_extend(rlpi_transformer *tf, rlpi_kv_cache *kv, int l, int64_t n, int64_t n_seq,
                        const int64_t *q_start, const int64_t *slot, const int64_t *past)
{
    const rlpi_model_config *c = &tf->cfg;
    const layer_params *P = &tf->layers[l];
    rlpi_backend *be = tf->be;
    rlpi_buffer *W = tf->params;
    int64_t d = c->dim;
    rlpi_buffer *freq = rlpi_tf_inv_freq(tf, l);
    TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(kv->xn, 0), RLPI_REF(kv->rstd, 0), RLPI_REF(kv->x, 0),
                            RLPI_REF(W, P->attn_norm), n, d, c->rms_eps));
    /* with qk_norm the projection goes to `att` (free until the attention)
     * and its per-head norm to q/k; k's (n, KV·hd) fits there too */
    rlpi_buffer *qdst = c->qk_norm ? kv->att : kv->q;
    const rlpi_qlayer *Q = quantized(tf, kv, n) ? &kv->qw->layers[l] : NULL;
    const int qt = Q ? kv->qw->type : 0; /* the layer matrices' RLPI_QMAT_* */
    if (!Q) /* the fp32 products: a quantized base dequantizes this layer first */
        TRY(rlpi_qbase_load_layer(tf, l));
    if (Q) /* one product for Q, K and V; qkv_part takes its columns apart */
        TRY(rlpi_op_qmatmul(be, RLPI_REF(kv->qkv, 0), RLPI_REF(kv->xn, 0), kv->qw->buf, Q->qkv, qt, n,
                            tf->qdim + 2 * tf->kvdim, d, 0.0f));
    TRY(qkv_part(tf, kv, n, qdst, 0, tf->qdim, P->wq));
    if (c->attention_bias)
        TRY(rlpi_op_add_bias(be, RLPI_REF(qdst, 0), RLPI_REF(W, P->bq), n, tf->qdim));
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_Q, kv->xn, 0, 0, qdst, 0, 0));
    if (c->qk_norm)
        TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(kv->q, 0), RLPI_REF(kv->rstd_h, 0), RLPI_REF(kv->att, 0),
                                RLPI_REF(W, P->q_norm), n * c->n_heads, c->head_dim, c->rms_eps));
    rlpi_buffer *kdst = c->qk_norm ? kv->att : kv->k;
    TRY(qkv_part(tf, kv, n, kdst, tf->qdim, tf->kvdim, P->wk));
    if (c->attention_bias)
        TRY(rlpi_op_add_bias(be, RLPI_REF(kdst, 0), RLPI_REF(W, P->bk), n, tf->kvdim));
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_K, kv->xn, 0, 0, kdst, 0, 0));
    if (c->qk_norm)
        TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(kv->k, 0), RLPI_REF(kv->rstd_h, 0), RLPI_REF(kv->att, 0),
                                RLPI_REF(W, P->k_norm), n * c->n_kv_heads, c->head_dim, c->rms_eps));
    TRY(qkv_part(tf, kv, n, kv->v, tf->qdim + tf->kvdim, tf->kvdim, P->wv));
    if (c->attention_bias)
        TRY(rlpi_op_add_bias(be, RLPI_REF(kv->v, 0), RLPI_REF(W, P->bv), n, tf->kvdim));
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_V, kv->xn, 0, 0, kv->v, 0, 0));
    TRY(rlpi_op_rope(be, RLPI_REF(kv->q, 0), RLPI_REF(kv->pos, 0), RLPI_REF(freq, 0), n, c->n_heads, c->head_dim, 0));
    TRY(rlpi_op_rope(be, RLPI_REF(kv->k, 0), RLPI_REF(kv->pos, 0), RLPI_REF(freq, 0), n, c->n_kv_heads, c->head_dim,
                     0));
    /* the new keys and values go to their slots' rows [past, past + new) */
    size_t ko = k_off(kv, l), vo = v_off(kv, l);
    for (int64_t s = 0; s < n_seq; s++) {
        size_t rows = (size_t)(q_start[s + 1] - q_start[s]);
        size_t dst = (size_t)(slot[s] * kv->slot_stride + past[s] * kv->kvdim);
        size_t src = (size_t)(q_start[s] * kv->kvdim);
        TRY(rlpi_buffer_copy(kv->kv, (ko + dst) * 4, kv->k, src * 4, rows * (size_t)kv->kvdim * 4));
        TRY(rlpi_buffer_copy(kv->kv, (vo + dst) * 4, kv->v, src * 4, rows * (size_t)kv->kvdim * 4));
    }
    TRY(rlpi_op_attention_cached(be, RLPI_REF(kv->att, 0), RLPI_REF(kv->q, 0), RLPI_REF(kv->kv, ko),
                                 RLPI_REF(kv->kv, vo), q_start, slot, past, n_seq, n, kv->n_slots, kv->slot_stride,
                                 c->n_heads, c->n_kv_heads, c->head_dim, tf->attn_scale, P->window));
    /* x += att·Woᵀ (or its post-attention norm) ; x += act(xn·Wgᵀ, xn·Wuᵀ)·Wdᵀ (or its post-ffw norm) */
    if (c->post_norms) {
        TRY(linear(tf, kv, kv->xn, kv->att, P->wo, Q ? Q->wo : 0, qt, n, d, tf->qdim, 0.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_O, kv->att, 0, 0, kv->xn, 0, 0));
        TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(kv->tmp, 0), RLPI_REF(kv->rstd, 0), RLPI_REF(kv->xn, 0),
                                RLPI_REF(W, P->post_attn_norm), n, d, c->rms_eps));
        TRY(rlpi_op_add(be, RLPI_REF(kv->x, 0), RLPI_REF(kv->tmp, 0), n * d));
    } else {
        TRY(linear(tf, kv, kv->x, kv->att, P->wo, Q ? Q->wo : 0, qt, n, d, tf->qdim, 1.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_O, kv->att, 0, 0, kv->x, 0, 0));
    }
    TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(kv->xn, 0), RLPI_REF(kv->rstd, 0), RLPI_REF(kv->x, 0),
                            RLPI_REF(W, P->ffn_norm), n, d, c->rms_eps));
    if (Q) { /* one product for gate and up */
        TRY(rlpi_op_qmatmul(be, RLPI_REF(kv->gu, 0), RLPI_REF(kv->xn, 0), kv->qw->buf, Q->gu, qt, n,
                            2 * c->ffn_dim, d, 0.0f));
        TRY(split_cols(kv->gu, n, 2 * c->ffn_dim, 0, kv->gate, c->ffn_dim));
        TRY(split_cols(kv->gu, n, 2 * c->ffn_dim, c->ffn_dim, kv->up, c->ffn_dim));
    } else {
        TRY(rlpi_tf_mm(tf, kv->gate, 0, kv->xn, 0, 0, W, P->wg, 1, n, c->ffn_dim, d, 0.0f));
        TRY(rlpi_tf_mm(tf, kv->up, 0, kv->xn, 0, 0, W, P->wu, 1, n, c->ffn_dim, d, 0.0f));
    }
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_GATE, kv->xn, 0, 0, kv->gate, 0, 0));
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_UP, kv->xn, 0, 0, kv->up, 0, 0));
    if (c->activation == RLPI_ACT_GELU_TANH)
        TRY(rlpi_op_geglu_fwd(be, RLPI_REF(kv->act, 0), RLPI_REF(kv->gate, 0), RLPI_REF(kv->up, 0), n * c->ffn_dim));
    else
        TRY(rlpi_op_swiglu_fwd(be, RLPI_REF(kv->act, 0), RLPI_REF(kv->gate, 0), RLPI_REF(kv->up, 0), n * c->ffn_dim));
    if (c->post_norms) {
        TRY(linear(tf, kv, kv->xn, kv->act, P->wd, Q ? Q->wd : 0, qt, n, d, c->ffn_dim, 0.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_DOWN, kv->act, 0, 0, kv->xn, 0, 0));
        TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(kv->tmp, 0), RLPI_REF(kv->rstd, 0), RLPI_REF(kv->xn, 0),
                                RLPI_REF(W, P->post_ffn_norm), n, d, c->rms_eps));
        TRY(rlpi_op_add(be, RLPI_REF(kv->x, 0), RLPI_REF(kv->tmp, 0), n * d));
    } else {
        TRY(linear(tf, kv, kv->x, kv->act, P->wd, Q ? Q->wd : 0, qt, n, d, c->ffn_dim, 1.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_DOWN, kv->act, 0, 0, kv->x, 0, 0));
    }
    return RLP_OK;
}

int rlpi_transformer_extend(rlpi_transformer *tf, rlpi_kv_cache *kv, int64_t n_seq, const int64_t *q_start,
                            const int64_t *slot, const int64_t *past, const int32_t *tokens, float *logits)
{
    if (!tf || !kv || n_seq < 1 || !q_start || !slot || !past || !tokens)
        return rlpi_error_set(RLP_E_INVALID_ARG, "extend: bad arguments");
    const rlpi_model_config *c = &tf->cfg;
    if (tf->be != kv->be || c->n_layers != kv->n_layers || tf->kvdim != kv->kvdim)
        return rlpi_error_set(RLP_E_INVALID_ARG, "extend: the KV cache was made for another model shape");
    if (q_start[0] != 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "extend: q_start[0] must be 0");
    int64_t n = q_start[n_seq];
    for (int64_t s = 0; s < n_seq; s++) {
        int64_t len = q_start[s + 1] - q_start[s];
        if (len < 1)
            return rlpi_error_set(RLP_E_INVALID_ARG, "extend: sequence %lld has no new token", (long long)s);
        if (slot[s] < 0 || slot[s] >= kv->n_slots)
            return rlpi_error_set(RLP_E_INVALID_ARG, "extend: slot %lld outside [0, %lld)", (long long)slot[s],
                                  (long long)kv->n_slots);
        if (past[s] < 0 || past[s] + len > kv->capacity)
            return rlpi_error_set(RLP_E_INVALID_ARG, "extend: sequence %lld needs %lld of %lld cache rows",
                                  (long long)s, (long long)(past[s] + len), (long long)kv->capacity);
        for (int64_t t = 0; t < s; t++)
            if (slot[t] == slot[s])
                return rlpi_error_set(RLP_E_INVALID_ARG, "extend: slot %lld used twice", (long long)slot[s]);
    }
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return rlpi_error_set(RLP_E_INVALID_ARG, "extend: token id %d outside the vocabulary of %d", tokens[i],
                                  c->vocab_size);
    if (tf->lora) { /* adapters run unmerged here; their saved activations now belong to this pass */
        tf->kept = false;
        TRY(rlpi_lora_begin_forward(tf, n, false));
    }
    TRY(ensure_workspace(kv, tf, n, n_seq));
    if (kv->qw && kv->qw->tf != tf && (rlpi_transformer_n_params(kv->qw->tf) != rlpi_transformer_n_params(tf)))
        return rlpi_error_set(RLP_E_INVALID_ARG, "extend: the quantized weights were made for another model");
    if (quantized(tf, kv, n))
        TRY(ensure_qworkspace(kv, tf, n));
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    int32_t *last = malloc((size_t)n_seq * sizeof *last);
    int rc = pos && last ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "extend: out of memory");
    if (!rc) {
        for (int64_t s = 0; s < n_seq; s++) {
            for (int64_t i = q_start[s]; i < q_start[s + 1]; i++)
                pos[i] = (int32_t)(past[s] + (i - q_start[s]));
            last[s] = (int32_t)(q_start[s + 1] - 1);
        }
        rc = rlpi_buffer_upload(kv->ids, 0, tokens, (size_t)n * 4);
    }
    if (!rc)
        rc = rlpi_buffer_upload(kv->pos, 0, pos, (size_t)n * 4);
    if (!rc)
        rc = rlpi_buffer_upload(kv->last, 0, last, (size_t)n_seq * 4);
    free(pos);
    free(last);
    if (rc)
        return rc;
    int64_t d = c->dim;
    TRY(rlpi_op_embedding_fwd(tf->be, RLPI_REF(kv->x, 0), RLPI_REF(tf->params, tf->embed), RLPI_REF(kv->ids, 0), n,
                              d, c->vocab_size));
    TRY(rlpi_tf_embed_scale(tf, kv->x, 0, n));
    for (int l = 0; l < c->n_layers; l++)
        TRY(layer_extend(tf, kv, l, n, n_seq, q_start, slot, past));
    /* the head only for each sequence's last row */
    TRY(rlpi_op_embedding_fwd(tf->be, RLPI_REF(kv->rows, 0), RLPI_REF(kv->x, 0), RLPI_REF(kv->last, 0), n_seq, d, n));
    TRY(rlpi_op_rmsnorm_fwd(tf->be, RLPI_REF(kv->rows_n, 0), RLPI_REF(kv->rows_rstd, 0), RLPI_REF(kv->rows, 0),
                            RLPI_REF(tf->params, tf->final_norm), n_seq, d, c->rms_eps));
    TRY(linear(tf, kv, kv->logits, kv->rows_n, tf->lm_head, kv->qw ? kv->qw->head : 0, kv->qw ? kv->qw->head_type : 0,
               n_seq, c->vocab_size, d, 0.0f));
    TRY(rlpi_tf_softcap(tf, kv->logits, 0, n_seq));
    return logits ? rlpi_buffer_download(kv->logits, 0, logits, (size_t)(n_seq * c->vocab_size) * 4) : RLP_OK;
}

rlpi_buffer *rlpi_kv_cache_logits(rlpi_kv_cache *kv)
{
    return kv ? kv->logits : NULL;
}
