/* The decoder of every family rlpi_model_config describes (RMSNorm, RoPE,
 * grouped-query attention, gated MLP, tied or untied head), with what the
 * families differ in read from the config alone, never from its name: QKV
 * bias, per-head q/k RMSNorm before RoPE (Qwen3, Gemma 3), post-norms of
 * the attention and MLP outputs (Gemma), SwiGLU or GeGLU, embedding scale,
 * attention scale, sliding-window local layers with their own RoPE base,
 * and the final logit soft-cap (applied wherever logits come out: the
 * logprob head, logits_rows/last_logits and KV-cached decode). Forward and
 * backward run over a packed batch of variable-length sequences, with the
 * chunked fused logprob head. Written only against the backend interface,
 * so the CUDA backend runs it unchanged. It knows nothing of RL: a loss
 * hands it ∂L/∂logp. Norm weights are effective scales (Gemma's 1 + w). */
#ifndef RLPI_MODEL_TRANSFORMER_H
#define RLPI_MODEL_TRANSFORMER_H

#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"

#include <stdbool.h>

typedef struct rlpi_transformer rlpi_transformer;

/* Sequences packed back to back, no padding. Token i of the batch is at
 * position positions[i] of its sequence; targets[i] is the token whose
 * logprob is wanted at i (the next token), or -1 for none (prompt tokens:
 * the head is not computed for them). Host arrays. */
typedef struct rlpi_packed_batch {
    int64_t n_seq;
    const int64_t *seq_start;  /* (n_seq + 1), seq_start[0] = 0, last = n_tokens */
    int64_t n_tokens;
    const int32_t *tokens;     /* (n_tokens) */
    const int32_t *positions;  /* (n_tokens) */
    const int32_t *targets;    /* (n_tokens), -1 = no logprob here */
} rlpi_packed_batch;

typedef struct rlpi_transformer_options {
    int64_t head_chunk_tokens;  /* rows of logits live at once; 0 = 64 */
    bool activation_checkpointing; /* keep only each layer's input; recompute in backward */
    bool frozen;                   /* no gradient buffer: forward only (reference policies) */
} rlpi_transformer_options;

/* Builds the model on `be` from a config and weights in HF names/layout
 * (copies them into one parameter buffer). Ties lm_head to the embedding
 * when cfg->tie_embeddings or when lm_head.weight is absent. Per layer it
 * expects self_attn.q_norm/k_norm.weight (head_dim) with cfg->qk_norm and,
 * with cfg->post_norms, post_attention_layernorm (the attention OUTPUT
 * norm), pre_feedforward_layernorm (the MLP input norm) and
 * post_feedforward_layernorm; without post_norms post_attention_layernorm
 * is the MLP input norm. RLP_E_FORMAT for an invalid config or a missing
 * or misshapen tensor (named), RLP_E_UNSUPPORTED for a config it cannot
 * run (named field). */
int rlpi_transformer_create(rlpi_transformer **out, rlpi_backend *be, const rlpi_model_config *cfg,
                            const rlpi_weights *w, const rlpi_transformer_options *opts);
void rlpi_transformer_free(rlpi_transformer *tf);
/* The training passes run Q/K/V as one GEMM and gate/up as one GEMM
 * (forward and backward) by default; false for either group goes back to
 * one GEMM per projection of that group, from the next forward on. The
 * results agree to fp32 rounding; this exists for the tests and benchmarks
 * that compare the two (docs/PERFORMANCE.md has the figures). */
void rlpi_transformer_set_fused_projections(rlpi_transformer *tf, bool qkv, bool gate_up);
/* Overwrites every parameter from HF-named weights of the same shapes
 * (RLP_E_FORMAT naming a missing or misshapen tensor; parameters before it
 * are already overwritten). */
int rlpi_transformer_set_weights(rlpi_transformer *tf, const rlpi_weights *w);
const rlpi_model_config *rlpi_transformer_config(const rlpi_transformer *tf);
size_t rlpi_transformer_n_params(const rlpi_transformer *tf);

/* Forward pass. Writes per-token logprobs of the targets under
 * softmax(logits · inv_temp) and (if non-NULL) the entropy of that
 * distribution, host arrays (n_tokens); entries without a target are 0.
 * With keep_for_backward the activations stay for rlpi_transformer_backward
 * (until the next forward); otherwise memory is only one layer's worth. */
int rlpi_transformer_forward(rlpi_transformer *tf, const rlpi_packed_batch *batch, float inv_temp,
                             float *logp, float *entropy, bool keep_for_backward);

/* Forward pass that returns the raw logits (no temperature) at the last
 * token of every sequence: host array (n_seq, vocab). What prefill and
 * greedy decoding need. batch->targets is ignored. */
int rlpi_transformer_last_logits(rlpi_transformer *tf, const rlpi_packed_batch *batch, float *logits);
/* Same at any token rows of the batch: host (n_rows, vocab). */
int rlpi_transformer_logits_rows(rlpi_transformer *tf, const rlpi_packed_batch *batch, const int32_t *rows,
                                 int64_t n_rows, float *logits);

/* Backward of the last forward (which must have kept its activations) given
 * ∂L/∂logp and optionally ∂L/∂entropy per token (host, n_tokens; entries
 * without a target are ignored). Gradients are ADDED to the gradient buffer
 * (so micro-batches accumulate). */
int rlpi_transformer_backward(rlpi_transformer *tf, const float *dlogp, const float *dentropy);

/* Score head (cfg.score_labels = L > 0: a value or reward model, HF's
 * `score` Linear). Forward over the whole batch, then the head at the
 * n_rows token indices `rows` (any order, repeats allowed): out is a host
 * (n_rows, L) array of W·h + b, h the final norm's output at that token.
 * batch->targets is ignored (may be NULL). keep_for_backward as in
 * rlpi_transformer_forward. RLP_E_STATE for a model without a score head
 * (and rlpi_transformer_forward/backward/logits refuse one with it). */
int rlpi_transformer_score(rlpi_transformer *tf, const rlpi_packed_batch *batch, const int32_t *rows,
                           int64_t n_rows, float *out, bool keep_for_backward);
/* Backward of the last rlpi_transformer_score given ∂L/∂out (host,
 * n_rows × L); gradients ADDED as rlpi_transformer_backward does. */
int rlpi_transformer_score_backward(rlpi_transformer *tf, const float *dscore);

int rlpi_transformer_zero_grad(rlpi_transformer *tf);
/* After an optimizer step: the gradients are dead until the next
 * zero_grad rewrites them, so their host pages go back to the system
 * (rlpi_buffer_discard; they read as zeros when touched again). Keeps 4
 * bytes a parameter (538 MB for SmolLM2-135M) out of the resident set
 * while rollouts and evaluations run, for one page fault per 4 KiB at the
 * next zero_grad (~0.1–0.2 s per 500 MB). The activation scratch stays: it
 * is small and re-faulting it cost ~4 % of a step. No-op for device
 * memory and frozen models. */
void rlpi_transformer_release_grads(rlpi_transformer *tf);
/* Global L2 norm of the accumulated gradient (tied tensors counted once). */
int rlpi_transformer_grad_norm(rlpi_transformer *tf, double *out);

/* Per-tensor views for optimizers, tests and savers. */
typedef struct rlpi_param_info {
    const char *name;         /* HF name */
    int32_t n_dims;
    int64_t shape[2];
    size_t offset, n_elems;   /* in floats, in the parameter/gradient buffers */
    bool no_decay;            /* norms, biases, embeddings: excluded from weight decay */
} rlpi_param_info;

size_t rlpi_transformer_n_tensors(const rlpi_transformer *tf);
const rlpi_param_info *rlpi_transformer_tensor(const rlpi_transformer *tf, size_t i);
rlpi_buffer *rlpi_transformer_params(rlpi_transformer *tf);
rlpi_buffer *rlpi_transformer_grads(rlpi_transformer *tf);

/* Bytes held in activation buffers right now. */
size_t rlpi_transformer_activation_bytes(const rlpi_transformer *tf);

/* Copies the current parameters out as HF-named weights (tied head as an
 * alias), for saving and for cloning a frozen reference. */
int rlpi_transformer_export(rlpi_transformer *tf, rlpi_weights *out);

#endif
