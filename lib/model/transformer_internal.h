/* The layout of rlpi_transformer, shared by the training passes
 * (transformer.c) and the KV-cached inference pass (kv_cache.c). Nothing
 * outside lib/model/ includes this. */
#ifndef RLPI_MODEL_TRANSFORMER_INTERNAL_H
#define RLPI_MODEL_TRANSFORMER_INTERNAL_H

#include "model/lora.h"
#include "model/transformer.h"

/* Offsets (floats) of one layer's tensors in the parameter buffer.
 * ffn_norm is the MLP's input norm (HF post_attention_layernorm without
 * post_norms, pre_feedforward_layernorm with them); q_norm/k_norm exist
 * with cfg.qk_norm, post_attn_norm/post_ffn_norm with cfg.post_norms. */
typedef struct layer_params {
    size_t attn_norm, wq, wk, wv, bq, bk, bv, wo, ffn_norm, wg, wu, wd;
    size_t q_norm, k_norm, post_attn_norm, post_ffn_norm;
    int64_t window; /* sliding window of this layer's attention, 0 = full */
    bool local;     /* uses the local RoPE frequencies (inv_freq_local) */
} layer_params;

/* Offsets (floats) of one layer's saved activations inside its buffer.
 * Three inputs of products are not among them: the MLP's activation
 * act = σ(gate)·up and the two norms' outputs xn1 and xn2. They live in
 * buffers shared by every layer (tf->mlp_act, tf->norm_out; `act`, `xn1`
 * and `xn2` are offsets there) and backward recomputes them from what is
 * kept (gate and up; the norms' inputs and rstd are kept for their own
 * backward anyway) with the same kernels on the same inputs, so the same
 * bits: a 256-token micro-batch of SmolLM2-135M keeps 82 MB less
 * (docs/PERFORMANCE.md, "Issue 22: batch-1 decode at the memory bound,
 * and the peak RSS goal").
 * Fields of features a config lacks take no space: q_raw/k_raw alias q/k
 * without qk_norm, and rstd_q, rstd_k, attn_o, rstd_po, mlp_o, rstd_pf
 * are empty without their feature, so a Llama layer is laid out as
 * before. */
typedef struct act_layout {
    size_t xn1, rstd1, q, k, v, att, lse, x_mid, xn2, rstd2, gate, up, act;
    size_t q_raw, k_raw, rstd_q, rstd_k; /* projections before the q/k norm, its (n·heads) rstd */
    size_t attn_o, rstd_po;              /* att·Woᵀ before the post-attention norm, its rstd */
    size_t mlp_o, rstd_pf;               /* act·Wdᵀ before the post-feed-forward norm, its rstd */
    size_t total;
    /* Projections of this pass (fixed at the forward, used by its
     * backward): fused_qkv = one (n, qdim + 2·kvdim) product split into
     * q_raw/k_raw/v; fused_gu = gate, up and act stored TRANSPOSED, (ffn, n)
     * each, gate and up adjacent, so that [gate; up] is one (2·ffn, n)
     * product (see layer_forward). */
    bool fused_qkv, fused_gu;
} act_layout;

struct rlpi_transformer {
    rlpi_model_config cfg;
    rlpi_transformer_options opts;
    rlpi_backend *be;
    int64_t qdim, kvdim;           /* H·hd, KV·hd */

    rlpi_param_info *infos;        /* (n_infos) */
    char **names;                  /* owned strings behind infos[].name */
    size_t n_infos;
    size_t n_params;
    size_t embed, final_norm, lm_head; /* lm_head: unused with a score head */
    size_t score_w, score_b;       /* score head (cfg.score_labels > 0): (labels, dim), (labels) with score_bias */
    layer_params *layers;          /* (n_layers) */
    rlpi_buffer *params;           /* (n_params) */
    rlpi_buffer *grads;            /* (n_params) */
    rlpi_buffer *inv_freq;         /* (head_dim / 2), global layers */
    rlpi_buffer *inv_freq_local;   /* (head_dim / 2), local (sliding-window) layers; NULL without them */
    float attn_scale;              /* softmax scale in effect */

    /* state of the last forward */
    int64_t n, m, n_seq;           /* tokens, tokens with a target, sequences */
    int64_t *seq_start;            /* host copy (n_seq + 1) */
    int32_t *sel_host;             /* token index of each target row (m) */
    rlpi_buffer *tokens, *positions, *sel, *targets_sel; /* int32 */
    rlpi_buffer *xs;               /* residual stream (n_layers + 1, n, dim) */
    rlpi_buffer *acts;             /* (n_layers or 1) × layout.total */
    rlpi_buffer *mlp_act;          /* (n, ffn), or (ffn, n) with fused_gu: the act of the layer being computed */
    rlpi_buffer *norm_out;         /* (n, dim): xn1, then xn2, of the layer being computed */
    act_layout lay;
    rlpi_buffer *h, *rstd_f, *hsel; /* final norm output (n, dim), (n), gathered (m, dim) */
    /* scratch kept between calls (grown, never shrunk below half): freeing
     * and re-allocating 10–60 MiB per step cost ~4 % of a train step in
     * page faults */
    rlpi_buffer *head_logits;      /* (chunk, vocab) */
    rlpi_buffer *head_capped;      /* (chunk, vocab): soft-capped logits kept for their backward */
    rlpi_buffer *head_a, *head_b;  /* (m) each: logp/entropy forward, dlogp/dentropy backward */
    rlpi_buffer *head_dhsel;       /* (m, dim) */
    rlpi_buffer *grad_scratch;     /* backward's per-layer gradients */
    rlpi_buffer *qkv;              /* (n, qdim + 2·kvdim): the fused Q/K/V product or its gradient, only where it
                                    * does not fit the layer's gate/up region (qdim + 2·kvdim > 2·ffn) */
    /* wq|wk|wv (and bq|bk|bv) and wg|wu lie back to back in params and
     * grads (build_layout), so each group is one (rows, dim) matrix */
    bool can_fuse_qkv, can_fuse_gu;
    bool separate_qkv, separate_gu; /* one product per projection (tests and benchmarks compare against them) */
    bool kept;                     /* activations of every layer are valid */
    /* LoRA (model/lora.h): with adapters attached the base is frozen, grads
     * is NULL, backward skips every ∂W product and the norms' weight
     * gradients land in norm_sink (max(dim, head_dim) floats, never read) */
    rlpi_lora *lora;
    rlpi_buffer *norm_sink;
    /* a quantized frozen base (model/qbase.h): the layers' projection
     * matrices are blocks there, and params holds one layer's worth of them
     * (the window, at offset 0) before the fp32 tensors; NULL: all fp32 */
    struct rlpi_qbase *qbase;
    size_t n_stored;               /* floats in params (n_params without a quantized base) */
    /* rlpi_qbase_fingerprint_as's last answer (valid until the base changes) */
    bool qcrc_valid;
    uint32_t qcrc_type, qcrc;
    float inv_temp;
};

/* Builds infos, names and layers from cfg (tensors at increasing offsets
 * of params; with tf->qbase set, the projection matrices at their window
 * offsets instead). n_params and n_stored grow from their current values. */
int rlpi_tf_build_layout(rlpi_transformer *tf);

/* Returns from the calling function with the status of x unless RLP_OK. */
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        int rc_ = (x);                                                                                                 \
        if (rc_ != RLP_OK)                                                                                             \
            return rc_;                                                                                                \
    } while (0)

/* Makes *buf hold at least `bytes` (kept when it is at most about twice
 * that: scratch grows and is reused rather than re-faulted every call). */
int rlpi_tf_realloc(rlpi_backend *be, rlpi_buffer **buf, size_t bytes);

/* C (m, n) = op(A) op(B) (+ C when beta = 1); row-major, contiguous. */
/* Applies cfg.final_softcap (when set) in place to rows × vocab logits. */
int rlpi_tf_softcap(rlpi_transformer *tf, rlpi_buffer *logits, size_t off, int64_t rows);

/* Multiplies rows × dim embeddings by cfg.embed_scale when it is set and
 * not 1 (Gemma's √dim). */
int rlpi_tf_embed_scale(rlpi_transformer *tf, rlpi_buffer *x, size_t off, int64_t rows);

/* The global or local RoPE table of layer l. */
rlpi_buffer *rlpi_tf_inv_freq(rlpi_transformer *tf, int l);

int rlpi_tf_mm(rlpi_transformer *tf, rlpi_buffer *C, size_t coff, rlpi_buffer *A, size_t aoff, int ta,
               rlpi_buffer *B, size_t boff, int tb, int64_t m, int64_t n, int64_t k, float beta);

#endif
