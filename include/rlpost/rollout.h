/**
 * @file rlpost/rollout.h
 * @brief librlpost: the rollout engine (rlp_rollout_engine): batched sampling with behaviour logprobs and versions.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_ROLLOUT_H
#define RLPOST_ROLLOUT_H

#include "rlpost/core.h"
#include "rlpost/env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Rollout engine: batched sampling with behaviour logprobs and versions     */
/* ------------------------------------------------------------------------ */

/**
 * Which distribution a behaviour logprob is taken under (values fixed).
 * With no truncation (top_k = 0, top_p = 1, min_p = 0) SAMPLING and
 * TEMPERED are the same number: log_softmax(logits / T)[token], which is
 * what rlp_policy_logprobs() recomputes at the same T (public-bugs case #5).
 * With truncation, SAMPLING is exact for importance weights (it is the
 * distribution the token was drawn from, renormalised over the kept set)
 * and differs from the trainer's recomputation by log(kept mass)
 * (TRL #7269); TEMPERED matches the trainer instead.
 */
typedef enum rlp_logprobs_mode {
    RLP_LOGPROBS_SAMPLING = 0,  /**< log of the truncated, renormalised, tempered distribution (default) */
    RLP_LOGPROBS_TEMPERED = 1,  /**< log_softmax(logits / T) over the whole vocabulary */
    RLP_LOGPROBS_RAW = 2        /**< log_softmax(logits): T = 1, no truncation (vLLM's default) */
} rlp_logprobs_mode;

/** Version of rlp_sampling_options understood by this header. */
#define RLP_SAMPLING_OPTIONS_VERSION 1

/**
 * How completions are sampled. Truncations apply in Hugging Face's order:
 * temperature, top-k, top-p, min-p. Temperature 0 is greedy decoding (the
 * lowest id wins ties; the logprob is then that of log_softmax(logits)).
 */
typedef struct rlp_sampling_options {
    uint32_t version;                /**< RLP_SAMPLING_OPTIONS_VERSION */
    uint32_t n;                      /**< samples per prompt (the group size); default 1 */
    float temperature;               /**< ≥ 0; default 1 */
    int32_t top_k;                   /**< 0 = off */
    float top_p;                     /**< (0, 1]; 1 = off */
    float min_p;                     /**< [0, 1]; 0 = off */
    uint32_t max_new_tokens;         /**< default 256 */
    uint64_t seed;                   /**< sample j of a prompt draws from the random stream (seed, g, j),
                                          g = the prompt's group_id, or its index in the call when that is 0:
                                          the same tokens whatever the thread count and the rest of the batch */
    const char *const *stop;         /**< (n_stop) stop strings matched on the decoded text, across token boundaries */
    size_t n_stop;
    const int32_t *stop_token_ids;   /**< (n_stop_token_ids) besides EOS */
    size_t n_stop_token_ids;
    int32_t include_stop_str;        /**< 1: completion_text keeps the matched stop string */
    int32_t ignore_eos;              /**< 1: EOS does not stop generation */
    int32_t logprobs_mode;           /**< rlp_logprobs_mode */
} rlp_sampling_options;

#define RLP_SAMPLING_OPTIONS_INIT \
    { RLP_SAMPLING_OPTIONS_VERSION, 1, 1.0f, 0, 1.0f, 0.0f, 256, 0, NULL, 0, NULL, 0, 0, 0, RLP_LOGPROBS_SAMPLING }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_sampling_options_init(rlp_sampling_options *opts, uint32_t version);

/** One prompt of a generate call. */
typedef struct rlp_prompt {
    const int32_t *tokens;           /**< (n_tokens) prompt ids, or NULL to encode @ref text */
    size_t n_tokens;
    const char *text;                /**< used when tokens is NULL: encoded as plain text (special-token
                                          spellings stay text; apply a chat template to get control tokens),
                                          with the BOS the tokenizer itself adds (RLP_ENCODE_DEFAULT_BOS) */
    uint64_t group_id;               /**< 0 = the engine numbers groups itself */
    const char *metadata_json;       /**< copied into every trajectory of the group, or NULL */
    const rlp_sampling_options *sampling; /**< this prompt's own options (n, temperature, stops, …), or NULL
                                               for the call's: requests with different options still decode
                                               together in one batch */
} rlp_prompt;

/** What happens to sequences in flight when new weights arrive (values fixed). */
typedef enum rlp_interrupt_mode {
    RLP_INTERRUPT_RECOMPUTE = 0,  /**< AReaL: drop their KV cache, recompute it with the new weights and go on;
                                       token_versions show the switch */
    RLP_INTERRUPT_ABORT = 1,      /**< end them with RLP_FINISH_ABORT and the tokens so far (the host resubmits) */
    RLP_INTERRUPT_DEFER = 2       /**< the update waits until the running generate call has finished */
} rlp_interrupt_mode;

/** Weights a local engine decodes with (values fixed). */
typedef enum rlp_rollout_weights {
    RLP_ROLLOUT_WEIGHTS_F32 = 0,  /**< the policy's fp32 weights: behaviour logprobs equal the trainer's up to
                                       summation order */
    RLP_ROLLOUT_WEIGHTS_Q8_0 = 1, /**< a Q8_0 copy of the linear weights (int8 products, activations quantized
                                       per block of 32), re-quantized at every weight update: ~3.8× fewer
                                       bytes per decoded token; behaviour logprobs differ from the trainer's
                                       (the step metrics report the mismatch). CPU backend only; elsewhere F32 */
    RLP_ROLLOUT_WEIGHTS_AUTO = 2, /**< Q8_0 where the CPU has int8 dot products (AVX512-VNNI or AVX2), else F32 */
    RLP_ROLLOUT_WEIGHTS_Q4_0 = 3  /**< GGUF Q4_0 (4-bit, 4.5 bits a weight) copy of the layers' linear weights,
                                       the head in Q8_0, re-quantized at every weight update: ~1.7× fewer bytes
                                       per decoded token than Q8_0 and a larger behaviour/trainer mismatch
                                       (pair it with algorithm.rollout_is); same products and rules as Q8_0 */
} rlp_rollout_weights;

/** Version of rlp_rollout_options understood by this header. */
#define RLP_ROLLOUT_OPTIONS_VERSION 2

/** Options of a local rollout engine. */
typedef struct rlp_rollout_options {
    uint32_t version;         /**< RLP_ROLLOUT_OPTIONS_VERSION */
    uint32_t max_batch;       /**< sequences decoded at once (KV-cache slots); default 32 */
    uint32_t max_seq_len;     /**< KV capacity per slot, prompt + completion; 0 = min(context, 2048) */
    int32_t interrupt_mode;   /**< rlp_interrupt_mode; default RLP_INTERRUPT_RECOMPUTE */
    int32_t share_weights;    /**< 1: generate with the policy's own weights (co-located; no copy; the
                                   policy must not be trained while a generate call runs);
                                   0: keep a frozen copy, refreshed by rlp_rollout_engine_update_weights() */
    int32_t weights;          /**< (version 2) rlp_rollout_weights; default RLP_ROLLOUT_WEIGHTS_F32 */
} rlp_rollout_options;

#define RLP_ROLLOUT_OPTIONS_INIT { RLP_ROLLOUT_OPTIONS_VERSION, 32, 0, RLP_INTERRUPT_RECOMPUTE, 0, RLP_ROLLOUT_WEIGHTS_F32 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_rollout_options_init(rlp_rollout_options *opts, uint32_t version);

/**
 * Creates a local engine on the policy's context: prefill as batched GEMMs
 * (one prefill shared by the n samples of a prompt), decode of up to
 * max_batch sequences at once against a KV cache, continuous batching (a
 * finished slot is refilled from the queue at once).
 *
 * @param[out] out   the engine; free with rlp_rollout_engine_free()
 * @param policy     the policy; borrowed when share_weights = 1 (it must
 *                   outlive the engine), copied otherwise; it must have a
 *                   tokenizer for text prompts and stop strings
 * @param opts       options or NULL
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOMEM (the KV cache is
 *         n_layers·2·max_batch·max_seq_len·n_kv_heads·head_dim floats).
 */
RLP_API int rlp_rollout_engine_create(rlp_rollout_engine **out, rlp_policy *policy,
                                      const rlp_rollout_options *opts);

/** Version of rlp_remote_options understood by this header. */
#define RLP_REMOTE_OPTIONS_VERSION 1

/**
 * Options of a remote engine: OpenAI-compatible `POST {url}/v1/completions`
 * servers. What a server must do: accept the prompt as an array of token
 * ids, honour `n`, `logprobs: 1` and `max_tokens`, and return the sampled
 * token ids, either as `choices[i].token_ids`, as `logprobs.tokens` entries
 * "token_id:N" (vLLM with `return_tokens_as_token_ids`, which the request
 * sets) or as `logprobs.content[].id` (llama.cpp server). `rlpost serve`
 * does all three.
 */
typedef struct rlp_remote_options {
    uint32_t version;              /**< RLP_REMOTE_OPTIONS_VERSION */
    const char *const *urls;       /**< (n_urls) base URLs, e.g. "http://10.0.0.5:8000"; round-robin;
                                        each shorter than RLP_SERVER_URL_MAX bytes */
    size_t n_urls;                 /**< may be 0: the servers come later (rlp_rollout_engine_set_urls()) */
    const char *model;             /**< "model" field of requests, or NULL */
    const char *api_key;           /**< bearer token, or NULL */
    uint32_t timeout_ms;           /**< per request; 0 = 600000 */
    uint32_t max_retries;          /**< on connection errors, timeouts and 5xx; default 3 */
    uint32_t max_in_flight;        /**< concurrent requests (backpressure); 0 = 64 */
    uint64_t max_response_bytes;   /**< 0 = 64 MiB */
} rlp_remote_options;

#define RLP_REMOTE_OPTIONS_INIT { RLP_REMOTE_OPTIONS_VERSION, NULL, 0, NULL, NULL, 0, 3, 0, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_remote_options_init(rlp_remote_options *opts, uint32_t version);

/**
 * Creates a remote engine (needs a build with libcurl; RLP_E_UNSUPPORTED
 * otherwise). @p tok (borrowed; must outlive the engine) encodes text
 * prompts and decodes completions; the servers must use the same
 * vocabulary. Its version is what rlp_rollout_engine_set_version() last
 * said, or the `weight_version` a server reports. The set of servers may
 * change while it runs (rlp_rollout_engine_set_urls()).
 */
RLP_API int rlp_rollout_engine_create_remote(rlp_rollout_engine **out, const rlp_tokenizer *tok,
                                             const rlp_remote_options *opts);

/**
 * Replaces the set of servers a remote engine sends its requests to, while
 * it runs: for a swarm whose `rlpost serve` workers join and leave
 * (`rlpost train`'s coordinator, docs/scale.md §3). Every attempt of a
 * request (its first and each retry) picks a URL from the set as it is at
 * that moment, round-robin; attempts already in flight finish at the server
 * they went to. With an empty set a request waits, asking the set again
 * every 0.1 s, until a server appears or its timeout (the options'
 * timeout_ms) passes; it then fails alone with RLP_E_TIMEOUT and a message
 * saying the set was empty. A remote engine may also be created with no
 * URL (n_urls = 0) and be given its servers here.
 *
 * A server keeps its counters (rlp_rollout_engine_server_stats()) when it
 * leaves the set and comes back (matched by its base URL as given).
 *
 * @param engine  a remote engine
 * @param urls    (n_urls) base URLs, http:// or https://, each shorter than
 *                RLP_SERVER_URL_MAX bytes; copied. NULL when n_urls is 0
 * @param n_urls  how many; 0 empties the set
 * @return RLP_OK; RLP_E_STATE (a local engine); RLP_E_INVALID_ARG (a URL
 *         at fault, named in the message; the old set is kept);
 *         RLP_E_NOMEM (the old set is kept).
 * Thread-safe: may be called from any thread, also while another thread
 * generates on the engine.
 */
RLP_API int rlp_rollout_engine_set_urls(rlp_rollout_engine *engine, const char *const *urls, size_t n_urls);

/** Longest base URL (with its NUL) that a remote engine takes and that rlp_server_stats holds. */
#define RLP_SERVER_URL_MAX 256

/** Version of rlp_server_stats written by this library. */
#define RLP_SERVER_STATS_VERSION 1

/**
 * Counters of one server of a remote engine since it first entered the
 * engine's set (see rlp_rollout_engine_server_stats()). A request is
 * counted once, when it ends, at the server of its last attempt.
 * Staleness of a response: the engine's version when the response arrived
 * (rlp_rollout_engine_version()) minus the response's `weight_version`,
 * 0 when not positive; only responses that carry a weight_version count.
 */
typedef struct rlp_server_stats {
    uint32_t version;                /**< set by the library (RLP_SERVER_STATS_VERSION) */
    int32_t in_set;                  /**< 1: in the current set; 0: was in it, removed since */
    char url[RLP_SERVER_URL_MAX];    /**< its base URL as given, NUL-terminated */
    uint64_t requests_ok;            /**< requests that ended with a usable answer here */
    uint64_t requests_failed;        /**< requests whose last attempt failed here (after their retries) */
    uint64_t completions;            /**< choices (samples) it returned */
    uint64_t completion_tokens;      /**< their tokens */
    int64_t last_weight_version;     /**< `weight_version` of its latest answer that had one; −1: none yet */
    uint64_t versioned;              /**< answers that carried a weight_version (the count behind staleness_sum) */
    uint64_t staleness_max;          /**< largest staleness of its answers: the newest version published
                                          (as rlp_synchronizer_pull_at_least last told the engine; else the
                                          engine's version) minus the answer's weight_version, in versions */
    uint64_t staleness_sum;          /**< their sum: mean = staleness_sum / versioned */
} rlp_server_stats;

/**
 * Per-server counters of a remote engine: one entry for every server that
 * has been in its set (rlp_rollout_engine_create_remote(),
 * rlp_rollout_engine_set_urls()), in the order they first entered it,
 * including those removed since (in_set = 0).
 *
 * @param[out] out    (cap) entries, filled with the first min(cap, count);
 *                    may be NULL when cap is 0
 * @param cap         room in @p out
 * @param[out] n_out  the count of servers (may exceed @p cap: call again with more room)
 * @param engine      the engine
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_STATE (a local engine).
 * Thread-safe, also while another thread generates.
 */
RLP_API int rlp_rollout_engine_server_stats(rlp_server_stats *out, size_t cap, size_t *n_out,
                                            const rlp_rollout_engine *engine);

/** Frees an engine. NULL is a no-op. Not while a generate call runs. */
RLP_API void rlp_rollout_engine_free(rlp_rollout_engine *engine);

/** One event of a streamed generation (see rlp_stream_fn). */
typedef struct rlp_stream_event {
    uint32_t version;          /**< 1 */
    size_t prompt_index;       /**< index into the prompts of the call */
    uint32_t sample_index;     /**< 0 … n−1 */
    int32_t token;             /**< the new token id, or −1 on a final event without a token */
    float logprob;             /**< its behaviour logprob */
    uint64_t policy_version;   /**< version of the weights that produced it */
    const char *text;          /**< text now safe to show (whole characters, no held-back stop prefix); borrowed */
    size_t text_len;
    int32_t finish_reason;     /**< RLP_FINISH_NONE while running; set on the sequence's last event */
} rlp_stream_event;

/** Called on the generating thread for every token; return non-zero to
 *  abort that sequence (RLP_FINISH_ABORT). */
typedef int (*rlp_stream_fn)(const rlp_stream_event *event, void *payload);

/**
 * Generates n completions for each prompt (n of the prompt's own sampling
 * options, else of @p sampling).
 *
 * @param[out] out      new batch: prompt-major, sample-minor order
 *                      (with equal n: trajectory i·n + j is sample j of prompt i)
 * @param engine        the engine
 * @param prompts       (n_prompts) prompts
 * @param n_prompts     ≥ 1
 * @param sampling      options or NULL (defaults)
 * @param on_token      stream callback or NULL
 * @param payload       passed to @p on_token
 * @return RLP_OK (remote requests that failed come back as trajectories
 *         with RLP_FINISH_ERROR and valid = 0); RLP_E_INVALID_ARG (bad
 *         options, token ids outside the vocabulary, a prompt longer than
 *         max_seq_len − 1); RLP_E_NOMEM; RLP_E_BACKEND.
 * One generate call at a time per engine; rlp_rollout_engine_update_weights(),
 * rlp_rollout_engine_load_weights() and rlp_rollout_engine_abort() may be
 * called from other threads while it runs.
 */
RLP_API int rlp_rollout_generate(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt *prompts,
                                 size_t n_prompts, const rlp_sampling_options *sampling,
                                 rlp_stream_fn on_token, void *payload);

/**
 * Runs multi-turn episodes: like rlp_rollout_generate(), but every sample
 * is an episode against mt->env (rlp_env_callbacks says how a call goes).
 * A turn ends where a completion of rlp_rollout_generate() would (a stop
 * string such as "</search>", a stop token, EOS, max_new_tokens); the
 * environment then reads the turn and ends the episode or answers with an
 * observation, whose ids are appended after the turn's tokens with loss
 * mask 0, logprob 0 and the engine's current version, and the model's next
 * turn follows. The ids of an episode are exactly the ids the engine
 * sampled and the observations' ids, concatenated: nothing is re-encoded.
 * A local engine keeps the sequence's KV cache across turns, keeps
 * decoding the other sequences while a call runs (mt->overlap) and applies
 * weight updates between and inside turns as in rlp_rollout_generate()
 * (token_versions show them). A remote engine sends each turn as a
 * completion request with the episode's ids so far.
 *
 * Every trajectory has has_episode = 1, a loss_mask, and token_rewards
 * when the environment gave turn rewards; completion_text is the turns'
 * and the observations' text in order. An environment call that fails or
 * overruns its deadline marks that sample invalid (valid = 0, error says
 * why, episode.end = RLP_EPISODE_ERROR; finish_reason stays how its last
 * turn ended, since RLP_FINISH_ERROR means a failed remote request, which
 * a trainer generates again) and the others go on; a turn limit or the
 * token budget ends the episode with RLP_EPISODE_MAX_TURNS /
 * RLP_EPISODE_BUDGET (finish_reason RLP_FINISH_STOP / RLP_FINISH_LENGTH).
 *
 * @return as rlp_rollout_generate(); RLP_E_INVALID_ARG also for NULL
 *         mt / mt->env or bad options, RLP_E_STATE for an engine without
 *         a tokenizer (actions are decoded, observations encoded).
 */
RLP_API int rlp_rollout_generate_episodes(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt *prompts,
                                          size_t n_prompts, const rlp_sampling_options *sampling,
                                          const rlp_multiturn_options *mt, rlp_stream_fn on_token,
                                          void *payload);
/**
 * Copies @p policy's weights into a local engine (same architecture) and
 * takes its version. Thread-safe with a running generate call: the copy
 * happens between two decode steps, and sequences in flight are handled by
 * the engine's interrupt mode (AReaL §4: interruptible generation).
 * @return RLP_OK; RLP_E_INVALID_ARG (architecture mismatch); RLP_E_STATE
 *         (remote or share_weights engine).
 */
RLP_API int rlp_rollout_engine_update_weights(rlp_rollout_engine *engine, const rlp_policy *policy);

/**
 * Loads weights saved by rlp_policy_save() (a folder) into a local engine
 * and sets its version to @p version; the SGLang-style
 * `/update_weights_from_disk` of `rlpost serve`. A folder with an
 * adapter_config.json is a LoRA adapter folder (rlp_policy_save_lora, or
 * PEFT's save_pretrained): its adapters are applied to the engine's base,
 * unmerged (replacing those of an earlier adapter folder; their config
 * must match), 20 MB a version for SmolLM2 at rank 16 instead of 538 MB.
 * Whole weights drop any adapters. Same threading as
 * rlp_rollout_engine_update_weights(). The engine keeps its weights and
 * version on any failure.
 * @return RLP_OK; RLP_E_FORMAT (a malformed file, or a weight that is NaN
 *         or ±Inf: the message names the tensor); RLP_E_NOT_FOUND /
 *         RLP_E_IO (no readable folder); RLP_E_INVALID_ARG (another
 *         architecture); RLP_E_STATE (remote or share_weights engine).
 */
RLP_API int rlp_rollout_engine_load_weights(rlp_rollout_engine *engine, const char *path, uint64_t version);

/** Version of the weights the engine generates with. Thread-safe. */
RLP_API int rlp_rollout_engine_version(uint64_t *out_version, const rlp_rollout_engine *engine);

/** Tells a remote engine which version its servers now hold. Thread-safe. */
RLP_API int rlp_rollout_engine_set_version(rlp_rollout_engine *engine, uint64_t version);

/** Ends every sequence in flight with RLP_FINISH_ABORT (tokens so far
 *  kept). Thread-safe; returns at once. */
RLP_API int rlp_rollout_engine_abort(rlp_rollout_engine *engine);

/** The tokenizer the engine decodes with (borrowed), or NULL. */
RLP_API const rlp_tokenizer *rlp_rollout_engine_tokenizer(const rlp_rollout_engine *engine);

/** Counters of an engine since it was created. */
typedef struct rlp_rollout_stats {
    uint32_t version;               /**< set by the library (1) */
    uint64_t prompts, completions;  /**< prompts prefilled (once per group), completions finished */
    uint64_t prefill_tokens;        /**< tokens run through prefill (including KV recomputation) */
    uint64_t decode_tokens;         /**< tokens sampled */
    uint64_t decode_steps;          /**< batched decode steps */
    uint64_t interrupts;            /**< sequences interrupted by a weight update */
    uint64_t remote_errors;         /**< remote requests that failed after their retries */
    double prefill_seconds, decode_seconds;
} rlp_rollout_stats;

/** Fills @p out. Thread-safe. */
RLP_API int rlp_rollout_engine_stats(rlp_rollout_stats *out, const rlp_rollout_engine *engine);

/** Train/inference mismatch of a batch (see rlp_batch_logprob_mismatch()). */
typedef struct rlp_mismatch_stats {
    uint32_t version;        /**< set by the library (1) */
    uint64_t n_tokens;       /**< completion tokens compared */
    double mean_abs;         /**< mean |logp_behaviour − logp_policy| (nats) */
    double max_abs;          /**< max of the same */
    double mean_ratio_dev;   /**< mean |exp(logp_policy − logp_behaviour) − 1| */
} rlp_mismatch_stats;

/**
 * Recomputes the completion tokens' logprobs with @p policy at each
 * trajectory's temperature and compares them with the recorded behaviour
 * logprobs: the train/inference mismatch verl and TRL users chase.
 * Trajectories sampled greedily (T = 0) are compared at T = 1.
 */
RLP_API int rlp_batch_logprob_mismatch(rlp_mismatch_stats *out, const rlp_batch *batch,
                                       const rlp_policy *policy);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_ROLLOUT_H */
