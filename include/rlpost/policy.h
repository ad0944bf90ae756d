/**
 * @file rlpost/policy.h
 * @brief librlpost: the policy (rlp_policy): a causal LM with trainable weights and optimizer state.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_POLICY_H
#define RLPOST_POLICY_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Policy: a causal LM with trainable weights and optimizer state           */
/* ------------------------------------------------------------------------ */

/**
 * One token sequence for scoring or training: a prompt followed by a
 * completion, packed with others without padding.
 *
 * The logprob of token t (t ≥ max(n_prompt, 1)) is that of tokens[t] given
 * tokens[0..t): so a sequence contributes n_tokens − max(n_prompt, 1)
 * "scored" tokens, in order, to every per-token array of the policy API.
 */
typedef struct rlp_sequence {
    const int32_t *tokens;  /**< (n_tokens) token ids; borrowed for the call */
    uint32_t n_tokens;      /**< ≥ 1, ≤ the model's context length */
    uint32_t n_prompt;      /**< tokens [0, n_prompt) are conditioning only */
} rlp_sequence;

/** Version of rlp_policy_options understood by this header. */
#define RLP_POLICY_OPTIONS_VERSION 1

/** Options of rlp_policy_load(). */
typedef struct rlp_policy_options {
    uint32_t version;                  /**< RLP_POLICY_OPTIONS_VERSION */
    uint32_t head_chunk_tokens;        /**< rows of logits alive at once in the fused head (0 = 64) */
    int32_t activation_checkpointing;  /**< 1: keep only layer inputs, recompute in backward */
    int32_t trainable;                 /**< 0: frozen (no gradients or optimizer state; for π_ref) */
} rlp_policy_options;

#define RLP_POLICY_OPTIONS_INIT { RLP_POLICY_OPTIONS_VERSION, 0, 0, 1 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_policy_options_init(rlp_policy_options *opts, uint32_t version);

/** Learning-rate schedules (values fixed). */
typedef enum rlp_lr_schedule {
    RLP_LR_CONSTANT = 0,       /**< lr throughout */
    RLP_LR_LINEAR_WARMUP = 1,  /**< lr·min(1, (t+1)/warmup), t = updates applied so far */
    RLP_LR_COSINE = 2          /**< warmup, then lr·(r + (1−r)·½(1 + cos πp)), p = progress after warmup, r = min_lr_ratio */
} rlp_lr_schedule;

/** Version of rlp_optimizer_options understood by this header. */
#define RLP_OPTIMIZER_OPTIONS_VERSION 1

/**
 * AdamW (Loshchilov & Hutter, ICLR 2019, Alg. 2) with bias correction and
 * global-norm clipping. Weight decay is not applied to norms, biases and
 * embeddings (a tied output head counts as the embedding).
 */
typedef struct rlp_optimizer_options {
    uint32_t version;        /**< RLP_OPTIMIZER_OPTIONS_VERSION */
    float lr;                /**< peak learning rate; default 1e-6 */
    float beta1, beta2;      /**< defaults 0.9, 0.999 */
    float eps;               /**< default 1e-8 */
    float weight_decay;      /**< decoupled; default 0.01 */
    float max_grad_norm;     /**< clip the global L2 norm to this; ≤ 0 = off; default 1.0 */
    int32_t schedule;        /**< rlp_lr_schedule; default RLP_LR_CONSTANT */
    int64_t warmup_steps;    /**< default 0 */
    int64_t total_steps;     /**< for the cosine schedule */
    float min_lr_ratio;      /**< cosine floor as a fraction of lr; default 0 */
} rlp_optimizer_options;

#define RLP_OPTIMIZER_OPTIONS_INIT \
    { RLP_OPTIMIZER_OPTIONS_VERSION, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, RLP_LR_CONSTANT, 0, 0, 0.0f }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_optimizer_options_init(rlp_optimizer_options *opts, uint32_t version);

/**
 * What a loss function sees for one micro-batch, and where it writes.
 *
 * Per-token arrays cover the scored tokens of the micro-batch's sequences
 * in order (see rlp_sequence); sequence i of the micro-batch owns entries
 * [token_start[i], token_start[i+1]) and is sequence seq_index[i] of the
 * whole step. The step totals let a loss normalise over the whole step, so
 * that micro-batching does not change the gradient (token-mean divides by
 * step_n_tokens, not by this micro-batch's count).
 */
typedef struct rlp_loss_context {
    uint32_t version;              /**< 1 */
    size_t n_seqs;                 /**< sequences in this micro-batch */
    const size_t *seq_index;       /**< (n_seqs) index of each within the step */
    const size_t *token_start;     /**< (n_seqs + 1) offsets into the per-token arrays */
    size_t n_tokens;               /**< scored tokens in this micro-batch */
    const float *logprobs;         /**< (n_tokens) log π_θ(token), temperature-scaled */
    const float *entropy;          /**< (n_tokens) entropy of π_θ at that position (nats) */
    size_t step_n_seqs;            /**< sequences in the whole step */
    size_t step_n_tokens;          /**< scored tokens in the whole step */
    float *dlogprobs;              /**< out (n_tokens): ∂L/∂logprobs, zeroed on entry */
    float *dentropy;               /**< out (n_tokens): ∂L/∂entropy, zeroed on entry */
    double loss;                   /**< out: this micro-batch's contribution to the step loss */
} rlp_loss_context;

/**
 * A loss over per-token logprobs: fills ctx->dlogprobs (and optionally
 * ctx->dentropy) and ctx->loss. Called on the thread that runs the train
 * step, once per micro-batch. A non-zero return aborts the step
 * (RLP_E_CALLBACK) with the weights untouched.
 */
typedef int (*rlp_loss_fn)(rlp_loss_context *ctx, void *payload);

/**
 * Built-in supervised loss: token-mean negative log-likelihood over the
 * whole step, L = −Σ logp / step_n_tokens. @p payload is ignored.
 * Usable as an rlp_loss_fn.
 */
RLP_API int rlp_loss_nll(rlp_loss_context *ctx, void *payload);

/** Version of rlp_train_options understood by this header. */
#define RLP_TRAIN_OPTIONS_VERSION 1

/** Options of one rlp_policy_train_step(). */
typedef struct rlp_train_options {
    uint32_t version;              /**< RLP_TRAIN_OPTIONS_VERSION */
    float temperature;             /**< logprobs under softmax(logits / T); must match the rollout's T; default 1 */
    uint32_t micro_batch_tokens;   /**< pack at most this many tokens per forward/backward (0 = all at once);
                                        a longer single sequence runs alone */
} rlp_train_options;

#define RLP_TRAIN_OPTIONS_INIT { RLP_TRAIN_OPTIONS_VERSION, 1.0f, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_train_options_init(rlp_train_options *opts, uint32_t version);

/** Statistics of one train step. */
typedef struct rlp_train_stats {
    uint32_t version;              /**< set by the library (1) */
    double loss;                   /**< Σ of the loss function's contributions */
    double grad_norm;              /**< global L2 norm before clipping */
    float lr;                      /**< learning rate used (0 when skipped) */
    int32_t skipped;               /**< 1 if the gradient was not finite and no update was applied */
    uint64_t policy_version;       /**< version after the step */
    uint64_t n_seqs, n_tokens;     /**< sequences and scored tokens */
    uint32_t n_micro_batches;
    double mean_entropy;           /**< mean entropy over scored tokens (nats) */
    double seconds;                /**< wall time of the step */
} rlp_train_stats;

/**
 * Loads a policy: a GGUF file, a Hugging Face folder (config.json +
 * *.safetensors [+ tokenizer.json]) or a llama2.c checkpoint (.bin).
 *
 * @param[out] out   new policy; free with rlp_policy_free()
 * @param ctx        context whose backend the policy runs on; must outlive it
 * @param path       file or folder
 * @param opts       options or NULL
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_IO; RLP_E_FORMAT (names the file
 *         and field/tensor); RLP_E_UNSUPPORTED (architecture, dtype);
 *         RLP_E_NOMEM.
 */
RLP_API int rlp_policy_load(rlp_policy **out, rlp_context *ctx, const char *path,
                            const rlp_policy_options *opts);

/** Storage dtypes for saved weights (values fixed). */
typedef enum rlp_dtype {
    RLP_DTYPE_F32 = 0,
    RLP_DTYPE_F16 = 1,
    RLP_DTYPE_BF16 = 2
} rlp_dtype;

/**
 * Saves the policy's weights as a Hugging Face folder: config.json,
 * model.safetensors (in @p dtype; a tied head is not stored) and
 * generation_config.json, loadable by transformers, vLLM and SGLang, plus
 * the tokenizer as tokenizer.json and tokenizer_config.json: copied when it
 * came as such files, written from GGUF metadata when it came from a GGUF
 * (byte-level BPE vocabularies; a SentencePiece GGUF vocabulary gives
 * RLP_E_UNSUPPORTED after the weights are written). Each file is written to
 * a temporary name and renamed.
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_IO (names the file).
 */
RLP_API int rlp_policy_save(const rlp_policy *policy, const char *dir, int dtype);

/** Tensor types of a GGUF file (ggml type ids; values fixed by the format). */
typedef enum rlp_gguf_type {
    RLP_GGUF_F32 = 0,
    RLP_GGUF_F16 = 1,
    RLP_GGUF_Q4_0 = 2,
    RLP_GGUF_Q8_0 = 8,
    RLP_GGUF_Q4_K = 12,
    RLP_GGUF_BF16 = 30
} rlp_gguf_type;

/** Version of rlp_gguf_save_options understood by this header. */
#define RLP_GGUF_SAVE_OPTIONS_VERSION 1

/** Options of rlp_policy_save_gguf(). */
typedef struct rlp_gguf_save_options {
    uint32_t version;     /**< RLP_GGUF_SAVE_OPTIONS_VERSION */
    int32_t type;         /**< rlp_gguf_type of the weight matrices (default F16) */
    int32_t embed_type;   /**< rlp_gguf_type of token_embd / output, or -1 = @c type */
    const char *name;     /**< general.name; NULL = the architecture name. Borrowed for the call */
    const char *tokenizer_gguf; /**< a GGUF whose `tokenizer.*` keys to copy (e.g. the model a run
                                     started from, when the policy was resumed from an HF folder);
                                     NULL = the GGUF the policy's tokenizer came from. Borrowed */
} rlp_gguf_save_options;

#define RLP_GGUF_SAVE_OPTIONS_INIT { RLP_GGUF_SAVE_OPTIONS_VERSION, RLP_GGUF_F16, -1, NULL, NULL }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_gguf_save_options_init(rlp_gguf_save_options *opts, uint32_t version);

/**
 * The rlp_gguf_type named @p name ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k";
 * case-insensitive). RLP_OK; RLP_E_INVALID_ARG naming the unknown name.
 */
RLP_API int rlp_gguf_type_from_name(int32_t *out_type, const char *name);

/**
 * Saves the policy as one GGUF file that llama.cpp (and so Ollama, LM
 * Studio) loads, as llama.cpp's convert_hf_to_gguf.py would write it:
 * general.architecture = the family ("llama", "qwen2", "qwen3", "mistral",
 * "gemma3"), the `<arch>.*` hyper-parameters (block_count, context_length,
 * embedding_length, feed_forward_length, attention.head_count(_kv),
 * key/value_length, rope.freq_base, RoPE scaling, layer_norm_rms_epsilon,
 * sliding_window, final_logit_softcapping), GGUF tensor names with ggml's
 * reversed dimension order, q/k rows permuted for llama/mistral, no
 * output.weight when the head is tied, norm weights as the effective scale
 * (Gemma's 1 + w, as GGUF stores it). Matrices are written in
 * @c opts->type; 1-D tensors (norms, biases) always in F32; a row that is
 * not a whole number of the type's blocks (32 elements; Q4_K 256) makes
 * that tensor F16, or Q8_0 for Q4_K when 32 divides it (as llama.cpp
 * falls back too). Quantization follows ggml's reference
 * quantize_row_q8_0 / q4_0 / q4_K (no importance matrix): the bytes equal
 * gguf-py's and llama.cpp's quantizers'. The tokenizer goes into the
 * metadata: every
 * `tokenizer.*` key (chat template included) of @c opts->tokenizer_gguf,
 * or else of the GGUF the policy's tokenizer came from, is copied as
 * stored; a byte-level BPE tokenizer that came from a tokenizer.json (an
 * HF folder, a training checkpoint) is written as llama.cpp's converter
 * writes it (model "gpt2", pre named after its pre-tokenizer: gpt2,
 * smollm, qwen2 or llama-bpe; tokens padded with "[PADi]" to the model's
 * vocabulary; token types; merges in rank order; special ids; add_bos;
 * chat template); the chat template written is the one the policy's
 * tokenizer renders with (its source's Jinja, or the canonical Jinja of a
 * built-in kind set with rlp_tokenizer_set_chat_template or guessed for a
 * vocabulary without one); a SentencePiece one from a tokenizer.json gives
 * RLP_E_UNSUPPORTED (pass @c tokenizer_gguf), and so does a policy without
 * a tokenizer (llama2.c): neither llama.cpp nor rlp_policy_load reads a
 * GGUF without one.
 * The file is written to a temporary name and renamed: on any error no
 * partial file is left and an existing @p path is untouched.
 * F32 output loads back through rlp_policy_load() bit for bit.
 * @param policy  the policy (read only; its weights are downloaded)
 * @param path    the .gguf file to write
 * @param opts    options, or NULL for the defaults
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL policy/path, unknown type or
 *         options version); RLP_E_IO (names the file); RLP_E_FORMAT
 *         (tokenizer_gguf is not a valid GGUF, or its vocabulary is not the
 *         model's size); RLP_E_UNSUPPORTED (architecture, tokenizer
 *         source); RLP_E_NOMEM.
 * Thread-safety: not with a concurrent train step on the same policy.
 */
RLP_API int rlp_policy_save_gguf(const rlp_policy *policy, const char *path, const rlp_gguf_save_options *opts);

/**
 * Saves the optimizer state (AdamW moments, step count, skipped count) and
 * the policy version to one safetensors file, atomically, for resume.
 */
RLP_API int rlp_policy_save_optimizer(const rlp_policy *policy, const char *path);

/**
 * Restores what rlp_policy_save_optimizer() wrote into a trainable policy
 * of the same architecture (RLP_E_FORMAT naming the tensor on a mismatch);
 * the version is restored too. The weights are not touched.
 */
RLP_API int rlp_policy_load_optimizer(rlp_policy *policy, const char *path);

/** Version of rlp_model_info filled by this library. */
#define RLP_MODEL_INFO_VERSION 3

/** What a model file holds (rlp_model_inspect()). */
typedef struct rlp_model_info {
    uint32_t version;            /**< set by the library */
    char architecture[32];       /**< "llama", "qwen2", "mistral" */
    char format[16];             /**< "gguf", "hf", "llama2c" */
    int32_t n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size;
    int32_t context_length;
    float rope_theta, rms_eps;
    int32_t rope_scaling;        /**< 0 none, 1 llama3, 2 linear */
    int32_t tie_embeddings;      /**< 1: the output head is the token embedding */
    int32_t attention_bias;      /**< 1: q/k/v projections have biases */
    uint64_t n_params;           /**< parameters, a tied head counted once */
    uint64_t n_tensors;          /**< tensors stored in the file */
    char dtypes[128];            /**< stored dtypes with tensor counts, e.g. "Q4_1:210 F32:61 Q8_0:1" */
    /* version 2: how the family computes (what differs between Llama,
     * Qwen2/3, Mistral and Gemma 3) */
    char activation[16];         /**< gated MLP: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, Gemma) */
    int32_t qk_norm;             /**< 1: per-head RMSNorm of queries and keys before RoPE (Qwen3, Gemma 3) */
    int32_t post_norms;          /**< 1: RMSNorm of each sublayer's output before the residual add (Gemma) */
    float norm_offset;           /**< HF files store norm weights as scale - this: 1 for Gemma, else 0 */
    float embed_scale;           /**< token embeddings are multiplied by this (Gemma: sqrt(dim)); 0 = none */
    float attn_scale;            /**< softmax scale of q·k in effect (1/sqrt(head_dim) unless the file
                                      sets another, e.g. Gemma's query_pre_attn_scalar^-1/2) */
    float final_softcap;         /**< logits = c·tanh(logits/c) with this c; 0 = off */
    int32_t sliding_window;      /**< positions a local layer's query sees (itself included); 0 = none */
    int32_t n_local_layers;      /**< layers that use the sliding window (and rope_theta_local) */
    float rope_theta_local;      /**< RoPE base of the local layers; 0 = rope_theta */
    /* version 3: the head */
    int32_t score_labels;        /**< 0: a language model (lm_head); ≥ 1: a value or reward model whose head is
                                      HF's `score` Linear with this many outputs (rlp_policy_score()) */
    int32_t score_per_token;     /**< 1: *ForTokenClassification (a PRM or critic: scores every token);
                                      0: *ForSequenceClassification (an ORM: the last token's) or an LM */
} rlp_model_info;

/**
 * Reads a model file or folder (as rlp_policy_load() would) and describes
 * it. Set out->version first (RLP_MODEL_INFO_VERSION): a version-1 caller
 * gets only the fields up to dtypes written (its struct is that long), a
 * version-2 caller those up to rope_theta_local, any higher version the
 * whole struct; out->version is set to what was filled. Thread-safe (no shared state).
 * @return RLP_OK or the loader's error (RLP_E_IO, RLP_E_FORMAT, RLP_E_UNSUPPORTED).
 */
RLP_API int rlp_model_inspect(rlp_model_info *out, const char *path);

/**
 * Describes a loaded policy as rlp_model_inspect() describes a file,
 * without reading anything again: the architecture, sizes, context length
 * and score head of what it runs. format is "" (a loaded policy keeps no
 * file format), dtypes "F32:N" (it holds fp32 tensors), n_params and
 * n_tensors those of the transformer (LoRA adapters not counted). The
 * caller's out->version says how much is written, as for
 * rlp_model_inspect().
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, out->version 0). Thread-safe
 *         with other readers of the policy.
 */
RLP_API int rlp_policy_info(rlp_model_info *out, const rlp_policy *policy);

/** Frees a policy (and its tokenizer). NULL is a no-op. */
RLP_API void rlp_policy_free(rlp_policy *policy);

/**
 * A copy of the policy's current weights as a new policy (same context).
 * With @p trainable = 0 the copy is frozen: no gradients or optimizer state
 * (a reference policy π_ref, or a snapshot). The copy starts at the same
 * version, with a fresh optimizer.
 */
RLP_API int rlp_policy_clone(rlp_policy **out, const rlp_policy *policy, int trainable);

/**
 * The same onto another context @p ctx (its own threads or device), e.g.
 * for a rollout engine that must not share the trainer's thread pool.
 * @p ctx is borrowed and must outlive the copy.
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOMEM; the backend's error.
 */
RLP_API int rlp_policy_clone_to(rlp_policy **out, const rlp_policy *policy, rlp_context *ctx, int trainable);

/**
 * The tokenizer that came with the model (GGUF metadata or the HF folder's
 * tokenizer.json), borrowed: valid until the policy is freed. NULL (with
 * RLP_E_NOT_FOUND in rlp_error_last()) when the model file has none, as
 * for llama2.c checkpoints.
 */
RLP_API const rlp_tokenizer *rlp_policy_tokenizer(const rlp_policy *policy);

/**
 * The policy version: the steps taken so far, each rlp_policy_train_rl()
 * call one (however many optimizer steps it applied, even none) and each
 * rlp_policy_train_step() call that updated the weights one. The RL loop
 * publishes it (rlp_synchronizer_publish()), tags rollouts with it and
 * measures staleness in it: versions count RL steps. The optimizer's own
 * update count (learning-rate schedule, AdamW bias correction) is separate.
 * Saved and restored with the optimizer state.
 */
RLP_API int rlp_policy_version(uint64_t *out_version, const rlp_policy *policy);

/** Number of parameters (a tied head counted once). */
RLP_API int rlp_policy_n_params(uint64_t *out_count, const rlp_policy *policy);

/** Memory held by a policy, in bytes. */
typedef struct rlp_memory_stats {
    uint32_t version;          /**< set by the library (1) */
    uint64_t weights;          /**< parameters */
    uint64_t gradients;        /**< gradient buffer (0 when frozen) */
    uint64_t optimizer;        /**< AdamW moments (0 before the first step) */
    uint64_t activations;      /**< activation buffers currently held */
} rlp_memory_stats;

/** Fills @p out with the policy's memory use. */
RLP_API int rlp_policy_memory(rlp_memory_stats *out, const rlp_policy *policy);

/** Version of rlp_lora_options understood by this header. */
#define RLP_LORA_OPTIONS_VERSION 2

/**
 * LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
 * Language Models", arXiv:2106.09685) on the policy's linear projections:
 * y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with A (rank, in), B (out, rank) and
 * s = alpha / rank, or alpha / √rank with rslora (Kalajdzievski 2023,
 * arXiv:2312.03732): Hugging Face PEFT's LoraLayer without dropout. A is
 * drawn U(−1/√in, 1/√in) as PEFT does, B starts at zero, so attaching
 * changes no output.
 */
typedef struct rlp_lora_options {
    uint32_t version;     /**< RLP_LORA_OPTIONS_VERSION */
    int32_t rank;         /**< r: 1 … 1024 and at most every target's in and out dimension; default 16 */
    float alpha;          /**< > 0; default 32 */
    int32_t rslora;       /**< 1: s = alpha / √rank; default 0 */
    const char *targets;  /**< comma-separated PEFT module names (q_proj, k_proj, v_proj, o_proj,
                               gate_proj, up_proj, down_proj) or "all" / "all-linear"; NULL = all;
                               borrowed for the call */
    uint64_t seed;        /**< draws A; default 0 */
    /* version 2 */
    const char *base_dtype; /**< the frozen base's storage: NULL or "f32" (default), or "q8_0", "q4_0",
                                 "q4_k": GGUF block formats, dequantized one layer at a time in every
                                 pass (QLoRA-style; see rlp_policy_enable_lora); borrowed for the call */
} rlp_lora_options;

#define RLP_LORA_OPTIONS_INIT { RLP_LORA_OPTIONS_VERSION, 16, 32.0f, 0, NULL, 0, NULL }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_lora_options_init(rlp_lora_options *opts, uint32_t version);

/**
 * Attaches LoRA adapters to every layer's targeted projections and freezes
 * the base weights. From then on the train step updates the adapters only
 * (AdamW over them; the base has no gradient buffer, 4 bytes a parameter
 * saved, and the backward skips every weight-gradient product of the
 * base), rlp_policy_save() and rollout engines take the merged weights
 * W + s·B·A, rlp_policy_save_optimizer() writes the adapters' moments,
 * and rlp_policy_memory() counts the adapters. Optimizer moments held
 * before (the base's) are dropped. rlp_policy_clone() of an adapted policy
 * is a plain policy with the merged weights. Not thread-safe against other
 * calls on the policy.
 *
 * With base_dtype "q8_0", "q4_0" or "q4_k" the base's projection matrices
 * (q/k/v/o/gate/up/down of every layer) are quantized row by row as GGUF
 * stores them (ggml's reference quantizers; a Q8_0 GGUF's blocks come back
 * byte for byte) and their fp32 copy is freed; the embedding, head, norms
 * and biases stay fp32. Each pass dequantizes one layer at a time into a
 * one-layer fp32 window before its products (QLoRA, Dettmers et al. 2023,
 * arXiv:2305.14314, with GGUF's blocks in place of NF4), so the policy
 * computes exactly what an fp32 model holding the dequantized weights
 * computes, in base bytes + one layer. q4_k falls back to q4_0 for
 * matrices whose rows are not a multiple of 256 (as llama.cpp does). Such
 * a policy keeps its adapters for good (its fp32 base is gone). Saving
 * writes dequantized fp32 weights.
 * @return RLP_OK; RLP_E_INVALID_ARG (names the field: rank, alpha,
 *         targets, base_dtype); RLP_E_STATE (a frozen policy, or adapters
 *         already attached); RLP_E_UNSUPPORTED (rows not a multiple of
 *         32 for a quantized base, named); RLP_E_NOMEM. On error the
 *         policy is unchanged.
 */
RLP_API int rlp_policy_enable_lora(rlp_policy *policy, const rlp_lora_options *opts);

/** Number of parameters the optimizer updates: the adapters' under LoRA,
 *  else every parameter (as rlp_policy_n_params). */
RLP_API int rlp_policy_n_trainable(uint64_t *out_count, const rlp_policy *policy);

/**
 * Saves the adapters as PEFT's save_pretrained does, into folder @p dir
 * (created): adapter_model.safetensors (fp32) and adapter_config.json
 * (peft_type LORA, r, lora_alpha, use_rslora, target_modules,
 * base_model_name_or_path = @p base_model or null), each atomically.
 * PeftModel.from_pretrained(base, dir) loads it.
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_STATE (no adapters); RLP_E_IO.
 */
RLP_API int rlp_policy_save_lora(const rlp_policy *policy, const char *dir, const char *base_model);

/**
 * Loads a PEFT LoRA adapter folder (adapter_config.json +
 * adapter_model.safetensors, PEFT's or ours) into the policy: attaches
 * adapters of that config when none are attached (on a frozen policy they
 * are inference-only: logprobs and generation, no training), else the
 * config must equal the attached one. Everything is
 * validated before anything changes: every adapter tensor present with
 * this model's shape and nothing else, all values finite.
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOT_FOUND; RLP_E_IO;
 *         RLP_E_FORMAT (names the file and tensor); RLP_E_UNSUPPORTED
 *         (DoRA, trained biases, rank/alpha patterns, modules_to_save,
 *         fan_in_fan_out, layer subsets: named).
 */
RLP_API int rlp_policy_load_lora(rlp_policy *policy, const char *dir);

/** Sets the optimizer configuration (takes effect at the next step; the
 *  moments are kept). */
RLP_API int rlp_policy_set_optimizer(rlp_policy *policy, const rlp_optimizer_options *opts);

/**
 * Per-token logprobs (and entropies) of the scored tokens of @p seqs under
 * softmax(logits / temperature). Peak memory above the weights does not
 * grow with tokens × vocabulary (chunked fused head).
 *
 * @param[out] logprobs  (cap) floats: the scored tokens of all sequences, in order
 * @param[out] entropy   (cap) floats, or NULL
 * @param cap            capacity of the arrays; RLP_E_OVERFLOW if too small
 * @param[out] n_out     scored tokens written (may be NULL)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULLs, token ids outside the vocabulary,
 *         a sequence longer than the context, temperature ≤ 0);
 *         RLP_E_OVERFLOW; RLP_E_NOMEM.
 * Not thread-safe on one policy.
 */
RLP_API int rlp_policy_logprobs(const rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs,
                                float temperature, float *logprobs, float *entropy, size_t cap,
                                size_t *n_out);

/**
 * Outputs of a score head per position of a value or reward model.
 * @param[out] out_labels  L: 0 for a language model; ≥ 1 for a model loaded
 *        from an HF *ForSequenceClassification (an outcome reward model: its
 *        score is the output at the last token) or *ForTokenClassification
 *        folder (process reward models, critics: an output at every token),
 *        num_labels as transformers counts it (len(id2label), default 2).
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL). Thread-safe.
 */
RLP_API int rlp_policy_score_labels(uint32_t *out_labels, const rlp_policy *policy);

/**
 * The score head of a value or reward model (rlp_policy_score_labels() ≥ 1)
 * at every token of @p seqs: out[(t_0 + t)·L + j] is output j of HF's
 * `score` Linear on the final hidden state at token t of a sequence whose
 * first token is the t_0-th of the call (sequences in order; n_prompt is
 * ignored). The same numbers as transformers' forward of the class
 * (tests/unit/test_score_head.c: within 1e-4 relative). A sequence
 * classifier's (ORM's) score is its last token's row. Sequences are
 * packed up to 4096 tokens a forward pass; memory is that of a
 * forward-only pass.
 *
 * @param[out] out  (cap) floats, fp32
 * @param cap       capacity of @p out in floats; RLP_E_OVERFLOW if below Σ n_tokens · L
 * @param[out] n_out  floats written, or needed on RLP_E_OVERFLOW (may be NULL)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULLs, ids outside the vocabulary, a
 *         sequence longer than the context); RLP_E_STATE (a language model:
 *         no score head); RLP_E_OVERFLOW; RLP_E_NOMEM.
 * Not thread-safe on one policy.
 */
RLP_API int rlp_policy_score(const rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, float *out,
                             size_t cap, size_t *n_out);

/**
 * One optimizer step: forward over @p seqs in micro-batches, the loss,
 * backward (gradients accumulate across micro-batches), global-norm
 * clipping, AdamW, version + 1 (an SFT step is one version). A non-finite
 * gradient skips the update (stats->skipped = 1, weights untouched, version
 * unchanged). rlp_policy_train_rl() takes its optimizer steps without
 * advancing the version and advances it once itself. Gradients live only
 * inside the call: afterwards their memory (4 bytes a parameter) goes back
 * to the system until the next step, as with PyTorch's
 * zero_grad(set_to_none=True).
 *
 * @param policy   a trainable policy
 * @param seqs     sequences; at least one must have a scored token
 * @param loss     e.g. rlp_loss_nll, or the RL losses
 * @param payload  passed to @p loss
 * @param opts     options or NULL
 * @param[out] stats  step statistics (may be NULL)
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_STATE (frozen policy);
 *         RLP_E_CALLBACK (the loss failed; nothing applied); RLP_E_NOMEM.
 */
RLP_API int rlp_policy_train_step(rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs,
                                  rlp_loss_fn loss, void *payload, const rlp_train_options *opts,
                                  rlp_train_stats *stats);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_POLICY_H */
