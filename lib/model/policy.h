/* Internal layout of rlp_policy and its constructor from an in-memory
 * config and weights (what every file loader ends with). */
#ifndef RLPI_MODEL_POLICY_H
#define RLPI_MODEL_POLICY_H

#include "backend/context.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "rlpost.h"

#include <stdbool.h>

struct rlp_policy {
    rlp_context *ctx;          /* borrowed; outlives the policy */
    rlp_policy_options opts;
    bool trainable;
    rlpi_transformer *tf;      /* owned */
    rlpi_optimizer opt;
    uint64_t version;          /* SFT steps and RL steps taken (not optimizer steps: opt.step counts those) */
    uint64_t weights_gen;      /* bumped whenever the weights change in place without a new version
                                * (an optimizer step inside a multi-step RL step, a broadcast): what a
                                * quantized rollout copy checks besides the version */
    uint64_t bytes_broadcast;  /* what the last rlp_policy_broadcast moved: the base when a rank needed
                                * it, and the adapters (a LoRA root over the same base sends only those) */
    rlp_tokenizer *tokenizer;  /* owned; NULL when the file has none (llama2.c) */
    char *tokenizer_path;      /* where it came from (a GGUF or tokenizer.json), for clones and saves */
    rlp_comm *comm;            /* borrowed; non-NULL: train steps are data-parallel collectives */
};

/* Builds a policy on ctx's backend from a config and HF-named weights
 * (copied). */
int rlpi_policy_create(rlp_policy **out, rlp_context *ctx, const rlpi_model_config *cfg, const rlpi_weights *w,
                       const rlp_policy_options *opts);

/* rlp_policy_train_step(), with the version advanced only when
 * `advance_version`: an RL step (lib/algo/rl_step.c) takes several optimizer
 * steps and advances the version once itself. */
int rlpi_policy_train_step(rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, rlp_loss_fn loss, void *payload,
                           const rlp_train_options *opts, rlp_train_stats *stats, bool advance_version);

/* rlp_policy_save(); with adapters attached and !merged it writes the
 * frozen base instead of the merged model (a checkpoint keeps base and
 * adapters apart, so that a resumed run trains the same parameters). */
int rlpi_policy_save_hf(const rlp_policy *policy, const char *dir, int dtype, bool merged);

/* Whether LoRA adapters are attached (the synchronizer then ships them only). */
bool rlpi_policy_has_lora(const rlp_policy *policy);

/* Loads the tokenizer at `path` (GGUF or tokenizer.json) into the policy. */
int rlpi_policy_attach_tokenizer(rlp_policy *p, const char *path);

/* Reads a model file or folder (GGUF, HF folder, llama2.c) into a config
 * and HF-named fp32 weights; `pool` (may be NULL) parallelises
 * dequantization. */
int rlpi_model_load_weights(const char *path, rlpi_model_config *cfg, rlpi_weights *w,
                            struct rlpi_threadpool *pool);

/* ---- shared with critic.c (the value model reuses the policy's packing,
 * micro-batch cuts and optimizer step rather than copies of them) ---- */

/* Forward-only passes (logprobs, scores, values) are cut into packs of
 * this many tokens so that activation memory stays bounded whatever the
 * caller passes. */
#define RLPI_LOGPROB_PACK_TOKENS 4096

/* A packed batch of seqs[begin, end) with its host arrays: targets[i] is
 * the next token where position i is scored (a completion token follows:
 * i + 1 >= max(n_prompt, 1)), else -1. */
typedef struct rlpi_pack {
    rlpi_packed_batch b;
    int64_t *seq_start;                    /* (n_seq + 1) */
    int32_t *tokens, *positions, *targets; /* (n_tokens) each */
    size_t n_scored;                       /* targets >= 0 */
} rlpi_pack;

int rlpi_pack_build(rlpi_pack *k, const rlp_sequence *seqs, size_t begin, size_t end);
void rlpi_pack_free(rlpi_pack *k);
/* End of the micro-batch starting at `begin`: whole sequences, at most
 * `budget` tokens (at least one sequence; 0 = all), balanced over the
 * micro-batches the rest needs. */
size_t rlpi_pack_next_cut(const rlp_sequence *seqs, size_t n, size_t begin, size_t budget);
/* Every sequence non-empty, within the context, n_prompt <= n_tokens, ids
 * in the vocabulary; RLP_E_INVALID_ARG naming `fn` and the sequence. */
int rlpi_policy_check_seqs(const rlp_policy *p, const rlp_sequence *seqs, size_t n, const char *fn);
/* One AdamW step (the policy's clipping and schedule) over the accumulated
 * gradients of the trainable parameters; RLP_E_STATE for a frozen model.
 * The caller releases the gradients (rlpi_transformer_release_grads). */
int rlpi_policy_optimizer_step(rlp_policy *policy, double *grad_norm, float *lr, bool *skipped);

/* ---- the PPO critic (critic.c) ---- */

/* A critic for PPO: a copy of `policy`'s transformer (current weights,
 * LoRA adapters merged) whose head (LM head, or a score head) is replaced
 * by HF's *ForTokenClassification head with one label (score.weight
 * (1, dim), score.bias (1)), both zero so V ≡ 0 at the start
 * (deterministic), trainable, on the policy's context, optimizer options
 * `opt` (NULL = the policy's), version 0, no tokenizer, no communicator.
 * It saves (rlpi_policy_save_hf) as a LlamaForTokenClassification-style
 * folder that rlp_policy_load reads back as a score model. */
int rlpi_policy_create_critic(rlp_policy **out, const rlp_policy *policy, const rlp_optimizer_options *opt);

/* V(s_t) for each completion token t (t in [0, n_tokens - n_prompt)) of
 * each sequence: the score head at position n_prompt - 1 + t (the hidden
 * state of the token before it, verl's critic values[:, -T-1:-1]);
 * `values` is (Σ_i (n_tokens_i - n_prompt_i)) floats, sequences in order.
 * Requires n_prompt >= 1 for every sequence (RLP_E_INVALID_ARG), a
 * critic with a one-output score head (RLP_E_STATE). Forward only, in
 * packs of RLPI_LOGPROB_PACK_TOKENS tokens. */
int rlpi_policy_values(rlp_policy *critic, const rlp_sequence *seqs, size_t n_seqs, float *values);

/* The score head over seqs packed RLPI_LOGPROB_PACK_TOKENS tokens a pass:
 * at every token (rlp_policy_score: out is Σ n_tokens × labels) or, with
 * value_rows_only, at each completion token's value position n_prompt − 1 + t
 * (rlpi_policy_values: Σ completion tokens × labels). The sequences must
 * already be checked (critic.c). */
int rlpi_policy_score_packed(const rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, bool value_rows_only,
                             float *out);

typedef struct rlpi_value_batch {
    const rlp_sequence *seqs;
    size_t n_seqs;            /* prompt + completion, n_prompt >= 1 */
    const float *returns;     /* (Σ completion tokens) GAE returns, indexed like rlpi_policy_values' output */
    const float *old_values;  /* (same) V at the step's start (what the clip is around); may be NULL when
                               * clip <= 0 */
    const uint8_t *on;        /* (same) 1: this token trains; 0: an observation or rejected token; NULL = all */
} rlpi_value_batch;

typedef struct rlpi_value_stats {
    double loss;       /* the value loss (below), before the update */
    double clipfrac;   /* share of trained tokens where the clipped term was the larger (verl vf_clipfrac) */
    double vpred_mean; /* mean V over trained tokens, before the update */
    double grad_norm;  /* before clipping (rlpi_policy_value_step only) */
    int skipped;       /* 1: non-finite gradient, no update */
    uint64_t n_tokens; /* trained tokens */
} rlpi_value_stats;

/* One optimizer step of the clipped value loss, token-mean over the
 * trained tokens of the whole batch (verl compute_value_loss with
 * loss_agg_mode token-mean; OpenRLHF ValueLoss):
 *   L = 1/N Σ_t ½·max((V_t − R_t)², (clip(V_t, V_old_t − c, V_old_t + c) − R_t)²),  c = clip
 * (clip <= 0: no clipping, L = 1/N Σ ½ (V − R)²). The subgradient at the
 * max follows the larger term (ties: the unclipped one); the clipped
 * term's derivative is 0 where V lies outside the window (torch.clamp).
 * Micro-batched by whole sequences of up to micro_batch_tokens tokens (0 =
 * all at once) with gradient accumulation, then the policy's clipping and
 * AdamW (rlpi_policy_optimizer_step); the critic's version + 1 unless the
 * step was skipped (non-finite gradient). RLP_E_INVALID_ARG for bad
 * arguments (non-finite returns or old values, NaN clip, no trained token;
 * a sequence without completion tokens is fine: it contributes nothing),
 * RLP_E_STATE for a frozen critic or one without a single-output score
 * head. `st` may be NULL. */
int rlpi_policy_value_step(rlp_policy *critic, const rlpi_value_batch *b, float clip, uint32_t micro_batch_tokens,
                           rlpi_value_stats *st);
/* rlpi_policy_value_step without the optimizer step: the gradients of L
 * are left in the critic's gradient buffer (zeroed first) and st filled
 * except grad_norm and skipped. What value_step runs first; the tests read
 * the gradients it leaves. A pass that fails leaves them zero. */
int rlpi_policy_value_grads(rlp_policy *critic, const rlpi_value_batch *b, float clip, uint32_t micro_batch_tokens,
                            rlpi_value_stats *st);

#endif
