/**
 * @file rlpost/reward.h
 * @brief librlpost: reward functions (rlp_reward_fn): C callbacks, built-in verifiers, HTTP, combinations.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_REWARD_H
#define RLPOST_REWARD_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reward functions: C callbacks, built-in verifiers, HTTP, combinations     */
/* ------------------------------------------------------------------------ */

/*
 * A reward function (rlp_reward_fn) scores the trajectories of a batch:
 * rlp_reward_fn_score() sets each one's scalar reward, or marks it invalid
 * with a reason, and sets its per-token rewards when the function gives
 * them. Kinds: a C callback (single-sample or batch form), a built-in
 * verifier created by name with JSON options, an HTTP verifier, a reward
 * library run in worker processes (rlp_reward_fn_create_isolated(): a
 * crash costs its samples, not the host), and a weighted combination of
 * any of these.
 *
 * How a call runs. Every handle owns a pool of worker threads (created at
 * its first score call, sized by rlp_reward_options::n_threads or the
 * "threads" option of a built-in). rlp_reward_fn_score() hands the samples
 * to the workers, which copy what a callback reads before calling it, and
 * supervises them; the calling thread never runs a callback itself. Each
 * call of a callback has a deadline (timeout_ms). A call that
 *   - returns non-zero (an error),
 *   - gives a score that is NaN or ±Inf, or outside the range of float,
 *     or a non-finite per-token score,
 *   - or overruns its deadline
 * marks its sample(s) invalid with a reason; the other samples are scored
 * as usual and the counts are reported in rlp_reward_stats. A bad callback
 * can therefore never fail or stall the run.
 *
 * A C callback that overruns cannot be stopped (threads cannot be killed
 * safely). Its worker thread is abandoned: detached and replaced by a
 * fresh worker, so the pool keeps its size; rlp_reward_fn_score() returns
 * on time (within a few milliseconds of the deadline) with the sample
 * invalid ("timed out after N ms"). Whatever the abandoned call later
 * returns is discarded. The request and result memory that call was given
 * belongs to the library and stays valid until it returns, so it never
 * touches freed memory; the payload, however, is the host's: keep it alive
 * until every abandoned call has returned (stats->abandoned_running tells
 * how many are still running), or hand it to the handle with
 * rlp_reward_options::payload_free, which the library calls once nothing
 * can use the payload any more. At most rlp_reward_options::max_abandoned
 * abandoned calls may run at once; past that no replacement worker is
 * started, and once no worker is left the remaining samples are marked
 * invalid at once ("no worker left").
 *
 * What a callback may touch. It runs on one of the handle's worker
 * threads, concurrently with itself on up to n_threads threads, so its
 * payload must be safe to use from several threads. It may read the
 * request and write the result it was given, during the call only (do not
 * keep the pointers). It must not touch the batch being scored, nor call
 * rlp_reward_fn_score() on the handle that called it (that call would wait
 * for itself); other librlpost calls on other handles are allowed. The
 * thread-local rlp_error_last() of a worker thread is not seen by the host.
 */

/** Version of rlp_reward_request understood by this header. */
#define RLP_REWARD_REQUEST_VERSION 1

/**
 * One sample as a reward function sees it. Filled by the library; every
 * pointer is to library-owned memory valid for the duration of the call
 * (callbacks must not keep it). Text is UTF-8 as the rollout produced it
 * (not validated), NUL-terminated, with its length in bytes beside it.
 */
typedef struct rlp_reward_request {
    uint32_t version;                   /**< RLP_REWARD_REQUEST_VERSION (set by the library) */
    const char *prompt_text;            /**< the prompt as text; "" when the trajectory has none */
    size_t prompt_len;                  /**< bytes of prompt_text */
    const char *completion_text;        /**< the completion (ends at a matched stop string); never NULL */
    size_t completion_len;              /**< bytes of completion_text */
    const int32_t *completion_tokens;   /**< (n_completion_tokens) ids, NULL when there are none */
    size_t n_completion_tokens;
    const char *reference;              /**< reference answer: the "reference" field of the metadata (a JSON
                                             string, or the JSON text of a number), or NULL */
    const char *metadata_json;          /**< the trajectory's metadata JSON object as text, or NULL */
    uint64_t group_id;                  /**< samples of one prompt share it */
    uint32_t sample_index;              /**< 0 … n−1 within its group */
    uint64_t policy_version;            /**< version of the weights that produced the completion */
    size_t batch_index;                 /**< index of the trajectory in the batch being scored */
} rlp_reward_request;

/** Version of rlp_reward_result understood by this header. */
#define RLP_REWARD_RESULT_VERSION 1

/** Size of rlp_reward_result::reason, terminating NUL included. */
#define RLP_REWARD_REASON_MAX 128

/**
 * What a reward function gives back for one sample. The library
 * initialises it before each call to: score NaN, valid 1, reason "",
 * has_token_scores 0, and token_scores / step_ends pointing at zeroed,
 * library-owned buffers of n_completion_tokens entries (NULL when the
 * completion has no tokens).
 *
 * Per-token (process) rewards: write token_scores[t] for the completion
 * token t that they belong to and set has_token_scores = 1. For a process
 * reward model give the reward of each reasoning step at the step's last
 * token and set step_ends[t] = 1 there: the refinements
 * (rlp_reward_fn_set_refine()) treat the marked tokens as the steps, or
 * every token when none is marked. The library copies the buffers after
 * the call.
 */
typedef struct rlp_reward_result {
    uint32_t version;                   /**< RLP_REWARD_RESULT_VERSION (set by the library) */
    double score;                       /**< the scalar reward; must be finite and fit in a float */
    int32_t valid;                      /**< 1: score is meaningful; 0: the sample cannot be scored */
    char reason[RLP_REWARD_REASON_MAX]; /**< short human reason (why invalid, or e.g. "wrong answer"),
                                             NUL-terminated */
    float *token_scores;                /**< (n_completion_tokens) library buffer, zeroed; NULL when there are
                                             no tokens */
    uint8_t *step_ends;                 /**< (n_completion_tokens) library buffer, zeroed; 1 marks a step's
                                             last token */
    int32_t has_token_scores;           /**< set to 1 when token_scores was filled */
} rlp_reward_result;

/**
 * Single-sample reward callback, called on a worker thread (see the top of
 * this section for which thread and what it may touch).
 *
 * @param[out] result   pre-initialised result to fill (score, valid, reason, token scores)
 * @param request       the sample
 * @param payload       the pointer given at creation
 * @return 0 on success (then result->valid says whether the sample could
 *         be scored); non-zero marks the sample invalid, with
 *         result->reason as the reason when set ("callback returned N"
 *         otherwise) and counts it in rlp_reward_stats::errors.
 */
typedef int (*rlp_reward_callback)(rlp_reward_result *result, const rlp_reward_request *request,
                                   void *payload);

/**
 * Batch reward callback: scores up to rlp_reward_options::batch_size
 * samples in one call (a verifier that amortises set-up, a model that
 * batches). Same rules as rlp_reward_callback; a non-zero return or a
 * timeout marks all @p n samples of the call invalid.
 *
 * @param[out] results  (n) pre-initialised results, in the order of @p requests
 * @param requests      (n) samples
 * @param n             ≥ 1
 * @param payload       the pointer given at creation
 */
typedef int (*rlp_reward_batch_callback)(rlp_reward_result *results, const rlp_reward_request *requests,
                                         size_t n, void *payload);

/** Version of rlp_reward_options understood by this header. */
#define RLP_REWARD_OPTIONS_VERSION 1

/** Options of a callback reward function (rlp_reward_fn_create_callback(),
 *  rlp_reward_fn_create_batch_callback()). */
typedef struct rlp_reward_options {
    uint32_t version;                   /**< RLP_REWARD_OPTIONS_VERSION */
    const char *name;                   /**< label used in reasons and by combinations (copied); NULL = "callback" */
    uint32_t n_threads;                 /**< worker threads; 0 = one per online core, at most 64; default 0 */
    uint32_t timeout_ms;                /**< deadline of each call in milliseconds; 0 = none; default 10000 */
    uint32_t batch_size;                /**< batch form: samples per call; 0 = 64; ignored by the single form */
    uint32_t max_abandoned;             /**< abandoned (timed-out) calls allowed to run at once; default 16 */
    void (*payload_free)(void *payload);/**< called once, on some thread, when nothing can use the payload any
                                             more (the handle is freed and every abandoned call has returned);
                                             NULL = the host keeps ownership */
} rlp_reward_options;

#define RLP_REWARD_OPTIONS_INIT { RLP_REWARD_OPTIONS_VERSION, NULL, 0, 10000, 0, 16, NULL }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG (NULL,
 *  unknown version). Thread-safe. */
RLP_API int rlp_reward_options_init(rlp_reward_options *opts, uint32_t version);

/** Version of rlp_reward_stats understood by this header (2 added crashed). */
#define RLP_REWARD_STATS_VERSION 2

/**
 * Counts of one rlp_reward_fn_score() call. Set @ref version to
 * RLP_REWARD_STATS_VERSION before the call; the library fills the fields
 * that version has.
 */
typedef struct rlp_reward_stats {
    uint32_t version;                   /**< RLP_REWARD_STATS_VERSION, set by the caller */
    uint64_t scored;                    /**< trajectories given to the reward function */
    uint64_t skipped;                   /**< trajectories not scored: finish_reason RLP_FINISH_ERROR */
    uint64_t valid;                     /**< scored and valid */
    uint64_t invalid;                   /**< scored and marked invalid (all causes below, and samples the
                                             function itself declared invalid, e.g. "no reference") */
    uint64_t errors;                    /**< samples of calls that returned an error (incl. HTTP failures) */
    uint64_t timeouts;                  /**< samples of calls that overran their deadline */
    uint64_t nonfinite;                 /**< samples whose score or a token score was NaN/Inf/out of float range */
    uint64_t abandoned_running;         /**< abandoned calls of this handle still running when the call returned */
    double mean_score;                  /**< mean reward over the valid samples; NaN when there are none */
    double min_score, max_score;        /**< over the valid samples; NaN when there are none */
    double seconds;                     /**< wall time of the call */
    /* version 2 */
    uint64_t crashed;                   /**< samples whose reward worker process died while scoring them
                                             (rlp_reward_fn_create_isolated()) */
} rlp_reward_stats;

/**
 * Creates a reward function from a single-sample C callback.
 *
 * @param[out] out  the handle; free with rlp_reward_fn_free()
 * @param fn        the callback (see rlp_reward_callback for the rules)
 * @param opts      options or NULL (defaults)
 * @param payload   passed to every call of @p fn; owned by the host unless
 *                  opts->payload_free is set (then by the handle, even if
 *                  this function fails: it is freed at once)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL @p out or @p fn, unknown options
 *         version); RLP_E_NOMEM. Thread-safe.
 */
RLP_API int rlp_reward_fn_create_callback(rlp_reward_fn **out, rlp_reward_callback fn,
                                          const rlp_reward_options *opts, void *payload);

/**
 * Creates a reward function from a batch callback: samples are handed over
 * in calls of up to opts->batch_size, several calls in parallel on the
 * worker threads. Parameters and codes as rlp_reward_fn_create_callback().
 */
RLP_API int rlp_reward_fn_create_batch_callback(rlp_reward_fn **out, rlp_reward_batch_callback fn,
                                                const rlp_reward_options *opts, void *payload);

/**
 * Creates a built-in verifier by name. @p options_json is a JSON object of
 * options (NULL or "{}" for the defaults); an unknown key is an error, so a
 * misspelt option cannot go unnoticed. Keys every built-in takes:
 * "threads" (worker threads, 0 = one per online core, default 0),
 * "timeout_ms" (per sample, default 10000), "refine" ("none", "clip",
 * "delta", "clip_delta") and "refine_eta" (see rlp_reward_fn_set_refine()),
 * "name" (label, default the built-in's name). The reference answer is
 * the metadata's "reference" field unless said otherwise; a sample without
 * the reference or data a built-in needs is marked invalid with a reason.
 * Scores (all overridable) and what each one checks:
 *
 * - "logic_rl_format" — Logic-RL's format reward (Xie et al. 2025,
 *   "Logic-RL", arXiv:2502.14768, rule-based reward; Unakar/Logic-RL
 *   verl/utils/reward_score/kk.py, validate_response_structure): in the assistant's text each of
 *   `<think>`, `</think>`, `<answer>`, `</answer>` occurs exactly once, in
 *   that order. The assistant's text is "assistant_prefix" + completion;
 *   without the option, the prefix is the metadata's "assistant_prefix"
 *   (rlp_task prompts carry it), else "<think>" when the prompt text ends
 *   with `<think>` (Logic-RL's prompt opens the assistant turn with it),
 *   else "".
 *   Beyond kk.py, the content of the `<answer>` block must also parse as
 *   an answer, so that a placeholder copied from a prompt (`<answer> answer
 *   </answer>`) earns no format bonus; the reason then says why (e.g.
 *   `format: <answer> content "answer" is not a number`). Option "answer":
 *   - "auto" (default): the metadata's "answer_type" when present (one of
 *     the names below; rlp_task sets "kk" for K&K and "equation" for
 *     Countdown; any other value makes the sample invalid), else "number"
 *     when the reference is a number (trimmed; a GSM8K answer ending
 *     `#### N` counts), else "nonempty";
 *   - "any": the tags only, kk.py's rule exactly;
 *   - "nonempty": some text that is not a placeholder: after trimming
 *     spaces and punctuation, not empty and not (ASCII case-insensitive)
 *     "answer", "your answer", "the answer", "final answer", "answer
 *     here", "your answer here", "insert answer", "placeholder", "todo",
 *     "tbd", "xxx" or the like; "..." and "…" are placeholders too;
 *   - "number": the trimmed content is a number as the "gsm8k" reference
 *     is read (decimal with optional thousands commas, a/b, `\frac{a}{b}`,
 *     a sign), optionally followed by one '.', or `\boxed{N}` (inside
 *     optional `$`) and nothing else — "42 apples" or "x = 42" is not;
 *   - "kk": every person of the metadata's "names" array is stated as
 *     `NAME is a knight|knave` (kk_answer's parser; roles need not be
 *     right); without "names", at least one `WORD is a knight|knave`;
 *   - "equation": the content is an expression of Countdown's grammar
 *     (below; numbers need not be the problem's).
 *   Scores "format_correct" 1, "format_wrong" −1.
 * - "kk_answer" — Logic-RL's Knights-and-Knaves answer reward (kk.py,
 *   parse_model_answer / compute_score): the reference is lines
 *   `(1) NAME is a knight|knave` (or the metadata's "solution_text_format");
 *   from the last `<answer>…</answer>` block the number of "knight" and
 *   "knave" substrings (ASCII case-insensitive) must equal the number of
 *   people and each name must be stated as `NAME is a knight|knave` (word
 *   boundaries, ASCII case-insensitive, whitespace between the words).
 *   Scores "answer_correct" 2, "answer_wrong" −1.5, "answer_unparsable" −2
 *   (no answer block, empty answer, a name not stated),
 *   "count_mismatch" −2 (as kk.py, where a wrong count makes the answer
 *   unparsable), and "answer_unparsable" whenever the format check fails
 *   ("require_format", default true).
 * - "logic_rl" — Logic-RL's total: format + answer, one of 3, −0.5, −1, −3
 *   with the defaults. Takes the options of both. kk_answer and logic_rl
 *   use the format check above, "answer" included: with "auto" on K&K
 *   prompts a real answer (every name stated) scores as in kk.py, while a
 *   placeholder or an answer that leaves a person out fails the format
 *   (−1 − 2 = −3 instead of kk.py's 1 − 2 = −1); "answer": "any" gives
 *   kk.py's scores exactly.
 * - "gsm8k" — GSM8K (Cobbe et al. 2021): the completion's final number is
 *   the one after the last `#### `, else in the last `\boxed{}`, else (when
 *   "fallback_last_number", default true) the last number in the text;
 *   commas between digit groups, `$`, and trailing zeros after a decimal
 *   point are ignored, and `\frac{a}{b}` or a/b inside the box are exact
 *   fractions; compared exactly with the reference (itself a number, or a
 *   whole GSM8K answer with a `#### N` line). Scores "correct" 1, "wrong" 0,
 *   "missing" 0.
 * - "boxed_math" — last brace-balanced `\boxed{…}` or `\fbox{…}` of the
 *   completion against the reference (its own last box if it has one), both
 *   lightly normalised: whitespace and `\,` `\;` `\:` `\!` spacing removed,
 *   `\left`/`\right` dropped, `\dfrac`/`\tfrac` read as `\frac`, `\frac12`
 *   as `\frac{1}{2}`, `{,}` and `$` removed, one pair of enclosing braces and
 *   a trailing period removed; then numbers (integers, decimals, a/b,
 *   `\frac{a}{b}`, signs, thousands separators) compare as exact fractions
 *   and anything else as normalised text (so `0.5` equals `\frac{1}{2}`,
 *   `0.333` does not equal `1/3`). Not normalised: `\text{}`, units,
 *   `^\circ`, `\%`, values of `\pi` or `\sqrt`, equivalent algebraic
 *   forms (x+1 vs 1+x), the order of set or tuple elements, `x=5` vs `5`,
 *   `\boxed 5` without braces. An unclosed last box counts as no answer. Scores "correct" 1, "wrong" 0, "missing" 0.
 * - "countdown" — TinyZero's Countdown (Jiayi-Pan/TinyZero
 *   verl/utils/reward_score/countdown.py): the last `<answer>…</answer>`
 *   block must hold an expression of non-negative integer literals, `+ - *
 *   /` and parentheses (no unary operators) using each of the metadata's
 *   "numbers" (or "nums") exactly once, whose exact rational value equals
 *   the metadata's "target". Parsed by a recursive-descent parser (nothing
 *   is evaluated as code); arithmetic is exact over int64 fractions, and an
 *   overflow or a division by zero makes the answer wrong. Scores "correct"
 *   1, "format_score" 0.1 (parses but wrong numbers or value), "missing" 0
 *   (no block, or it does not parse).
 * - "exact_match" — the extracted answer equals the reference. "extract":
 *   "none" (the whole completion, default), "answer_tag" (last
 *   `<answer>` block), "boxed" (last box), "last_line"; "trim" (default
 *   true), "case_sensitive" (default true), "collapse_whitespace" (default
 *   false). Scores "correct" 1, "wrong" 0.
 * - "regex_match" — PCRE2 (UTF) pattern "pattern" (default: the reference
 *   is the pattern) found in the extracted answer ("extract" as above),
 *   or matching all of it when "full" is true; "flags" a string of i, m, s,
 *   x; "match_limit" (default 1000000: a pattern that backtracks
 *   catastrophically makes the sample invalid instead of hanging).
 *   Scores "correct" 1, "wrong" 0.
 * - "reward_model" — a learned reward model run in process (docs/rewards.md):
 *   "model" (required) an HF *ForSequenceClassification (outcome reward
 *   model: the score head at the last token of prompt + completion) or
 *   *ForTokenClassification folder (process reward model) with its
 *   tokenizer.json; "kind" "orm" | "prm" (default from the class); "label"
 *   (with several outputs the score is softmax(outputs)[label], default 1);
 *   "step_separator" (default "\n\n"), "step_token" (text scored after
 *   each step instead of the separator, e.g. "<extra_0>"), "aggregate"
 *   "min" | "last" | "mean" over steps (default min: Lightman et al. 2023),
 *   "input" "prompt_completion" | "completion", "model_threads" (0 = one
 *   per core). A PRM's step scores are also per-token rewards at each
 *   step's last completion token when the model's tokenizer decodes the
 *   policy's ids to the completion, for the "refine" option. Runs one
 *   forward at a time per handle, with no deadline ("timeout_ms" is not
 *   applied). Creation fails for a language model, a missing folder or a
 *   label outside the outputs.
 *
 * @param[out] out       the handle; free with rlp_reward_fn_free()
 * @param name           a built-in's name (see rlp_reward_builtin_name())
 * @param options_json   JSON object text or NULL
 * @return RLP_OK; RLP_E_NOT_FOUND (unknown name); RLP_E_INVALID_ARG (bad
 *         JSON, unknown key, wrong type or value, naming it; a regex that
 *         does not compile, with PCRE2's message and offset); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_reward_fn_create_builtin(rlp_reward_fn **out, const char *name, const char *options_json);

/** Name of the @p index-th built-in (0-based), or NULL past the last one.
 *  Static string. Thread-safe. */
RLP_API const char *rlp_reward_builtin_name(size_t index);

/** Version of rlp_http_reward_options understood by this header. */
#define RLP_HTTP_REWARD_OPTIONS_VERSION 1

/**
 * Options of an HTTP verifier (rlp_reward_fn_create_http()).
 *
 * Protocol. Samples go out in batches of batch_size, each one
 * `POST {url}` with `Content-Type: application/json` and the body
 * `{"version": 1, "samples": [{"id": I, "prompt": "…", "completion": "…",
 * "reference": "…" or null, "metadata": {…} or null, "group_id": G,
 * "sample_index": S, "policy_version": V[, "completion_tokens": […]]}, …]}`
 * (id = index in the batch being scored). The answer must be HTTP 2xx
 * with `{"scores": [E, …]}`, one entry per sample in the same order, each
 * E a number (the score), null (invalid), or an object
 * `{"score": x, "valid": true|false, "reason": "…", "token_scores": […]}`
 * (all but "score" optional). A transport error, a timeout, HTTP 5xx, 408
 * or 429 is retried (up to max_retries times, with doubling backoff);
 * other 4xx are not. A request that still fails, an answer that is not
 * such JSON, is larger than max_response_bytes, or has fewer or more
 * entries than samples marks every sample of that request invalid with a
 * reason naming the URL; a malformed entry marks its own sample invalid.
 */
typedef struct rlp_http_reward_options {
    uint32_t version;                   /**< RLP_HTTP_REWARD_OPTIONS_VERSION */
    const char *url;                    /**< http:// or https:// URL that is POSTed to (copied) */
    const char *api_key;                /**< sent as "Authorization: Bearer …", or NULL (copied) */
    const char *name;                   /**< label; NULL = "http" (copied) */
    uint32_t timeout_ms;                /**< whole-request timeout of each attempt; 0 = 60000 */
    uint32_t connect_timeout_ms;        /**< 0 = 10000 */
    uint32_t max_retries;               /**< retries after the first attempt; default 2 */
    uint32_t backoff_ms;                /**< first backoff, doubled per retry (jittered); 0 = 200 */
    uint32_t batch_size;                /**< samples per request; 0 = 64 */
    uint32_t max_in_flight;             /**< concurrent requests; 0 = 8 */
    uint64_t max_response_bytes;        /**< 0 = 16 MiB */
    int32_t send_tokens;                /**< 1: include "completion_tokens" */
} rlp_http_reward_options;

#define RLP_HTTP_REWARD_OPTIONS_INIT \
    { RLP_HTTP_REWARD_OPTIONS_VERSION, NULL, NULL, NULL, 0, 0, 2, 0, 0, 0, 0, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. Thread-safe. */
RLP_API int rlp_http_reward_options_init(rlp_http_reward_options *opts, uint32_t version);

/**
 * Creates an HTTP verifier (see rlp_http_reward_options for the protocol).
 * All requests of a score call run concurrently from one worker thread
 * through libcurl's multi interface; the deadline of each is its
 * timeout_ms (per attempt) and max_retries, enforced by libcurl, so no
 * thread is ever abandoned. The first creation in the process runs
 * curl_global_init once; a host using libcurl from several threads should
 * call curl_global_init itself before starting them.
 *
 * @return RLP_OK; RLP_E_INVALID_ARG (no URL, not http(s), control
 *         characters); RLP_E_UNSUPPORTED (built without libcurl);
 *         RLP_E_NETWORK (libcurl failed to initialise); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_reward_fn_create_http(rlp_reward_fn **out, const rlp_http_reward_options *opts);

/**
 * Creates the weighted sum of @p n reward functions: reward = Σ wᵢ·rᵢ, and
 * per-token rewards = Σ wᵢ·tᵢ over the members that give them. Members
 * score the batch one after the other, each on its own threads with its
 * own deadlines; a sample is valid only if every member found it valid,
 * otherwise its reason is the first failing member's, prefixed by that
 * member's name. On success the combination takes ownership of the
 * members (free only the combination; do not use them any more); on
 * failure they stay the caller's.
 *
 * @param[out] out   the handle; free with rlp_reward_fn_free()
 * @param fns        (n) distinct handles
 * @param weights    (n) finite weights, or NULL for all 1
 * @param n          ≥ 1
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, n = 0, a repeated handle, a
 *         non-finite weight); RLP_E_NOMEM. Thread-safe for distinct members.
 */
RLP_API int rlp_reward_fn_combine(rlp_reward_fn **out, rlp_reward_fn *const *fns, const double *weights,
                                  size_t n);

/** Version of rlp_isolation_options understood by this header. */
#define RLP_ISOLATION_OPTIONS_VERSION 1

/** Options of a process-isolated reward function (rlp_reward_fn_create_isolated()). */
typedef struct rlp_isolation_options {
    uint32_t version;                   /**< RLP_ISOLATION_OPTIONS_VERSION */
    const char *name;                   /**< label used in reasons (copied); NULL = "isolated" */
    uint32_t n_workers;                 /**< worker processes (1 … 64); 0 = one per online core, at most 8 */
    uint32_t timeout_ms;                /**< deadline of each request to a worker; 0 = none; default 10000 */
    uint32_t batch_size;                /**< samples per request (1 … 4096); 0 = 1 */
    uint32_t max_restarts;              /**< worker restarts allowed within any 60 s; past that the score
                                             call fails (RLP_E_CALLBACK); default 20 */
    const char *worker_path;            /**< the rlpost-reward-worker executable (copied); NULL = the
                                             environment variable RLPOST_REWARD_WORKER, else the one
                                             installed with librlpost */
} rlp_isolation_options;

#define RLP_ISOLATION_OPTIONS_INIT { RLP_ISOLATION_OPTIONS_VERSION, NULL, 0, 10000, 0, 20, NULL }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG (NULL,
 *  unknown version). Thread-safe. */
RLP_API int rlp_isolation_options_init(rlp_isolation_options *opts, uint32_t version);

/**
 * Creates a reward function whose scoring runs in worker processes, so
 * that a reward library that crashes (NULL dereference, abort(), stack
 * overflow, _exit) or hangs cannot take the host down.
 *
 * Each worker is the helper executable `rlpost-reward-worker` (installed
 * in libexecdir; found through opts->worker_path, the environment
 * variable RLPOST_REWARD_WORKER, next to the librlpost shared object, or
 * its install path, in that order), started with posix_spawn(), which is
 * safe in a multi-threaded host where fork() without exec is not. It
 * dlopens @p library_path, calls its `int rlpost_reward_create(rlp_reward_fn
 * **out, const char *options_json)` with @p options_json (the same entry
 * point `rlpost train` loads from `reward.library`) and scores the
 * requests it is sent over a socket with the handle it got (its threads
 * and deadlines as that handle says). The host's samples travel as
 * copies; every answer is bounds-checked.
 *
 * rlp_reward_fn_score() hands requests of opts->batch_size samples to the
 * workers, one request per worker at a time. When a worker dies (a
 * signal, or an exit), the samples of its request are marked invalid
 * with the reason "reward worker killed by SIGSEGV" (the signal's name;
 * "reward worker exited with status N" for an exit) and counted in
 * rlp_reward_stats::crashed; a request that overruns opts->timeout_ms has
 * its worker killed with SIGKILL (which, unlike a thread, really stops it)
 * and its samples marked invalid ("timed out after N ms (reward worker
 * killed)", counted in timeouts). Either way the worker is restarted for
 * the next request, after a backoff that doubles with consecutive deaths
 * (10 ms up to 1 s); the other samples are scored as usual. Once more than
 * opts->max_restarts restarts would happen within 60 s, the handle is
 * broken: that score call and every later one fail with RLP_E_CALLBACK
 * and a message naming the last death, so a library that always crashes
 * stops the run instead of spinning.
 *
 * Workers start here (each must load the library and report ready within
 * 60 s), so a library that cannot be loaded fails this call. A worker
 * exits when its parent process dies (it checks every 200 ms) and is
 * killed and reaped by rlp_reward_fn_free(). The host must not reap
 * children it does not know (waitpid(-1, …)) nor set SIGCHLD to SIG_IGN,
 * or the cause of a death reads "status unavailable". A worker's stdout
 * goes to the host's stderr (a host's stdout may carry its results).
 *
 * @param[out] out        the handle; free with rlp_reward_fn_free()
 * @param library_path    path of the reward library (as dlopen takes it)
 * @param options_json    passed to rlpost_reward_create() (copied), or NULL
 * @param opts            options or NULL (defaults)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL @p out or @p library_path, an
 *         option out of range, unknown version); RLP_E_NOT_FOUND (no worker
 *         executable); RLP_E_CALLBACK (the library could not be loaded or
 *         its rlpost_reward_create() failed: the worker's message); RLP_E_IO
 *         (a worker could not be started); RLP_E_TIMEOUT (a worker did not
 *         report ready in time); RLP_E_NOMEM. Thread-safe. Score calls on
 *         the handle follow rlp_reward_fn_score() (one at a time).
 */
RLP_API int rlp_reward_fn_create_isolated(rlp_reward_fn **out, const char *library_path, const char *options_json,
                                          const rlp_isolation_options *opts);

/** Process-reward refinements (values fixed). */
typedef enum rlp_reward_refine_mode {
    RLP_REFINE_NONE = 0,        /**< per-step rewards as given */
    RLP_REFINE_CLIP = 1,        /**< r_k ← min(r_k − η, 0) */
    RLP_REFINE_DELTA = 2,       /**< r_k ← r_k − r_{k+1} for k < K; r_K kept */
    RLP_REFINE_CLIP_DELTA = 3   /**< Clip, then Delta */
} rlp_reward_refine_mode;

/**
 * Refines per-step process rewards in place, after Gao et al. 2024, "On
 * Designing Effective RL Reward at Training Time for LLM Reasoning"
 * (arXiv:2410.15115), its Clip and Delta mechanisms: with steps k = 1…K
 * of a completion and a threshold η,
 *   - Clip:  r̃_k = min(r_k − η, 0), so every step reward is ≤ 0 and the
 *     return of a completion is bounded above by 0 however many steps it
 *     repeats;
 *   - Delta: r̃_k = r_k − r_{k+1} for k < K and r̃_K = r_K, so the return
 *     from step k telescopes to r_k and cannot grow with the step count;
 *   - Clip-Delta: Clip first, then Delta on the clipped values.
 * The steps are the entries with step_mask[t] ≠ 0 in order (all entries
 * when step_mask is NULL); other entries are left as they are.
 *
 * @param rewards    (n) per-token or per-step rewards, changed in place
 * @param n          entries
 * @param step_mask  (n) or NULL
 * @param mode       an rlp_reward_refine_mode
 * @param eta        η of Clip (ignored by Delta); finite
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL rewards with n > 0, bad mode,
 *         non-finite η). Thread-safe (no shared state).
 */
RLP_API int rlp_reward_refine(float *rewards, size_t n, const uint8_t *step_mask, int mode, float eta);

/**
 * Makes a handle refine the per-token rewards its scorers give (see
 * rlp_reward_refine(); the steps are the tokens marked in
 * rlp_reward_result::step_ends, or all tokens when none is marked) before
 * they reach the batch. The scalar reward is not changed.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, bad mode, non-finite η).
 * Not while a score call of @p fn runs.
 */
RLP_API int rlp_reward_fn_set_refine(rlp_reward_fn *fn, int mode, float eta);

/**
 * Scores every trajectory of @p batch: sets its reward (and per-token
 * rewards when the function gives them) and marks it valid, or marks it
 * invalid with the reason (its reward then reads NaN). Trajectories with
 * finish_reason RLP_FINISH_ERROR have no completion and are skipped
 * (counted in stats->skipped). Returns when every sample is scored,
 * invalid or past its deadline (see the top of this section).
 *
 * @param fn      the reward function
 * @param batch   the batch; not to be touched by other threads during the call
 * @param stats   counts of this call, or NULL; set stats->version first
 * @return RLP_OK whatever happened to individual samples; RLP_E_INVALID_ARG
 *         (NULL, stats->version unset); RLP_E_NOMEM; RLP_E_BACKEND (no
 *         worker thread could be started). On an error return no
 *         trajectory was changed.
 * Calls on the same handle are serialised (the second waits); distinct
 * handles score in parallel.
 */
RLP_API int rlp_reward_fn_score(rlp_reward_fn *fn, rlp_batch *batch, rlp_reward_stats *stats);

/**
 * Scores one request outside a batch, through the same threads and
 * deadlines (for tools and tests: `rlpost reward` uses it). Fills
 * out->score, out->valid and out->reason (a valid sample's reason says
 * e.g. "wrong answer: 17, reference 18"); out->token_scores and
 * out->step_ends are set to NULL and has_token_scores to 0 (per-token
 * rewards are only delivered into a batch). A callback error, non-finite
 * score or timeout gives valid = 0 with the reason, and RLP_OK.
 *
 * @param[out] out   the result
 * @param fn         the reward function
 * @param request    the sample (its version must be set; reference NULL =
 *                   taken from metadata_json as in a batch)
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOMEM; RLP_E_BACKEND.
 */
RLP_API int rlp_reward_fn_score_one(rlp_reward_result *out, rlp_reward_fn *fn,
                                    const rlp_reward_request *request);

/** The handle's label (a built-in's name, the name option, "combine").
 *  Borrowed, valid until the handle is freed; NULL for NULL. Thread-safe. */
RLP_API const char *rlp_reward_fn_name(const rlp_reward_fn *fn);

/**
 * Frees a reward function (and the members of a combination). Joins its
 * idle worker threads; does not wait for abandoned calls, which keep the
 * library's own data alive until they return (see payload_free for the
 * payload). NULL is a no-op. Not while a score call of @p fn runs.
 */
RLP_API void rlp_reward_fn_free(rlp_reward_fn *fn);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_REWARD_H */
