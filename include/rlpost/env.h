/**
 * @file rlpost/env.h
 * @brief librlpost: environments (rlp_env) that answer a model's turns in multi-turn, tool-using episodes.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 *
 * An episode (ASearcher, arXiv:2508.07976; Search-R1, arXiv:2503.09516) is
 * a prompt followed by turns: the model writes until a turn ends (a stop
 * string such as "</search>" or "</tool_call>", a stop token, EOS), the
 * environment reads that action and answers with an observation (tool
 * output) or ends the episode, and the observation's tokens are appended
 * to the sequence — as token ids, never by re-encoding the conversation —
 * with loss mask 0. rlp_rollout_generate_episodes() runs episodes on an
 * engine; the trainer runs them when its options name an environment.
 */
#ifndef RLPOST_ENV_H
#define RLPOST_ENV_H

#include "rlpost/core.h"
#include "rlpost/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An environment: callbacks, an HTTP service or a built-in tool set, with deadlines. */
typedef struct rlp_env rlp_env;
/** What one reset or step call answers; filled by the environment through the rlp_env_reply_* setters. */
typedef struct rlp_env_reply rlp_env_reply;
/** One running episode of the synchronous API (rlp_env_episode_start()). */
typedef struct rlp_env_episode rlp_env_episode;

/**
 * Appends a piece of observation text to @p reply (copied). Pieces are
 * encoded one by one and their ids concatenated, so a piece never merges
 * with the model's last token or with another piece. @p flags are
 * rlp_encode_flags: RLP_ENCODE_PARSE_SPECIAL only on text the environment
 * wrote itself (a chat template's "<|im_start|>user"), never on tool
 * output, whose "<|im_end|>" would otherwise close a turn.
 * @param len  bytes of @p text; invalid UTF-8 is encoded byte by byte
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOMEM. Observations longer
 *         than rlp_env_options::max_observation_bytes are cut there (the
 *         episode records it) rather than refused.
 */
RLP_API int rlp_env_reply_add_text(rlp_env_reply *reply, const char *text, size_t len, uint32_t flags);
/** Appends observation token ids (copied; checked against the vocabulary when the engine appends them). */
RLP_API int rlp_env_reply_add_tokens(rlp_env_reply *reply, const int32_t *ids, size_t n);
/** Gives this turn a reward (finite); it is put on the last model token of the turn (rlp_trajectory::token_rewards). */
RLP_API int rlp_env_reply_set_reward(rlp_env_reply *reply, float reward);
/** 1: the episode ends after this reply (its observation, if any, is not appended). */
RLP_API int rlp_env_reply_set_done(rlp_env_reply *reply, int done);
/** 1: the action was a tool call (counted in rlp_episode_stats::tool_calls); 0: it was not (a final answer). */
RLP_API int rlp_env_reply_set_tool_call(rlp_env_reply *reply, int tool_call);
/** The tool failed but the episode goes on (a bad query, an unknown tool): counted in tool_errors. */
RLP_API int rlp_env_reply_set_tool_error(rlp_env_reply *reply, const char *message);
/** A JSON object (copied, checked) merged into the trajectory's metadata_json under "env". */
RLP_API int rlp_env_reply_set_metadata(rlp_env_reply *reply, const char *json);

/** Version of rlp_env_callbacks understood by this header. */
#define RLP_ENV_CALLBACKS_VERSION 1

/**
 * An environment in C. Every callback returns RLP_OK (0) or any other
 * value for a failure, which marks the sample invalid (with the reply's
 * tool error, if set, as the reason) while the run goes on. Calls for
 * different episodes run on the environment's worker threads at once
 * (unless rlp_env_options::serialize); calls of one episode never overlap.
 * A call that overruns its deadline is abandoned: the sample is marked
 * invalid, its thread finishes alone, and the episode's close runs when
 * it has.
 */
typedef struct rlp_env_callbacks {
    uint32_t version;  /**< RLP_ENV_CALLBACKS_VERSION */
    /** Starts an episode for a prompt whose task metadata is @p metadata_json
     *  (NULL when it has none); *episode receives the environment's state of
     *  the episode (may stay NULL). An observation added to @p reply is
     *  appended to the prompt (masked like any observation). Required. */
    int (*reset)(void **episode, rlp_env_reply *reply, const char *metadata_json, void *user);
    /** Answers one model turn: @p action is its decoded text (UTF-8, @p
     *  action_len bytes, through the stop string that ended the turn),
     *  @p action_ids its token ids. Required. */
    int (*step)(rlp_env_reply *reply, void *episode, const char *action, size_t action_len,
                const int32_t *action_ids, size_t n_action_ids, void *user);
    /** Frees an episode's state; may be NULL. */
    void (*close)(void *episode, void *user);
    /** Called once by rlp_env_free() after the last call has ended; may be NULL. */
    void (*free_user)(void *user);
} rlp_env_callbacks;

/** Version of rlp_env_options understood by this header. */
#define RLP_ENV_OPTIONS_VERSION 1

/** How an environment's calls are run. */
typedef struct rlp_env_options {
    uint32_t version;                /**< RLP_ENV_OPTIONS_VERSION */
    uint32_t timeout_ms;             /**< deadline of one reset or step call; 0 = none; default 30000 */
    uint32_t max_threads;            /**< worker threads (calls at once); default 8 */
    uint32_t max_abandoned;          /**< overrun calls whose threads may still run; more → new calls fail
                                          at once; default 16 */
    uint64_t max_observation_bytes;  /**< longer observations are cut (and the cut recorded); default 65536 */
    int32_t serialize;               /**< 1: one call at a time (an environment that is not thread-safe) */
} rlp_env_options;

#define RLP_ENV_OPTIONS_INIT { RLP_ENV_OPTIONS_VERSION, 30000, 8, 16, 65536, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_env_options_init(rlp_env_options *opts, uint32_t version);

/**
 * Creates an environment from callbacks (copied) and @p user (borrowed
 * until free_user). @p name (copied, may be NULL) names it in messages.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL reset or step, bad options); RLP_E_NOMEM.
 */
RLP_API int rlp_env_create(rlp_env **out, const char *name, const rlp_env_callbacks *callbacks, void *user,
                           const rlp_env_options *opts);

/**
 * Creates an environment served over HTTP (needs libcurl, else
 * RLP_E_UNSUPPORTED). Protocol (docs/environments.md), JSON both ways:
 * `POST {url}/reset {"metadata": …}` → `{"episode_id": "…",
 * "observation": "…"}`; `POST {url}/step {"episode_id", "action",
 * "action_ids"}` → `{"observation", "reward", "done", "tool_call",
 * "tool_error", "metadata"}` (all optional but observation); `POST
 * {url}/close {"episode_id"}`. A connection error, a timeout, a non-2xx
 * status or a malformed answer fails that call (sample invalid).
 * @param api_key  sent as a bearer token, or NULL
 */
RLP_API int rlp_env_create_http(rlp_env **out, const char *url, const char *api_key, const rlp_env_options *opts);

/**
 * Creates a built-in environment. "tools": tool calls of a prompt template
 * run against built-in tools; options_json {"template": "search" (the
 * ASearcher tags <search>, <access>, <information>, <answer>) or "hermes"
 * (Qwen/Hermes <tool_call> JSON), "corpus": a JSONL file of {"id",
 * "title", "text"} documents indexed with BM25 (or "corpus_inline": the
 * same as an array), "top_k": passages per search (default 3), "tools":
 * ["search", "open", "calculator"] (default all the template knows)}.
 * An action without a tool call ends the episode.
 * @return RLP_OK; RLP_E_NOT_FOUND (unknown name); RLP_E_INVALID_ARG /
 *         RLP_E_FORMAT (options, corpus); RLP_E_IO; RLP_E_NOMEM.
 */
RLP_API int rlp_env_create_builtin(rlp_env **out, const char *name, const char *options_json,
                                   const rlp_env_options *opts);

/** The environment's name (borrowed). */
RLP_API const char *rlp_env_name(const rlp_env *env);

/**
 * Frees an environment. NULL is a no-op. Not while an engine uses it;
 * calls abandoned by a deadline finish on their own, and free_user runs
 * after the last of them.
 */
RLP_API void rlp_env_free(rlp_env *env);

/** Version of rlp_env_outcome understood by this header. */
#define RLP_ENV_OUTCOME_VERSION 1

/** What one call of the synchronous API answered (strings borrowed until the next call on the episode). */
typedef struct rlp_env_outcome {
    uint32_t version;           /**< set by the library */
    int32_t status;             /**< RLP_OK; RLP_E_TIMEOUT (deadline); RLP_E_CALLBACK (the environment failed) */
    const char *error;          /**< why it failed, or NULL */
    const char *observation;    /**< the text pieces concatenated (token pieces are not shown) */
    size_t observation_len;
    size_t n_observation_tokens;/**< ids of the token pieces */
    int32_t done, tool_call;
    int32_t has_reward;
    float reward;
    const char *tool_error;     /**< or NULL */
    const char *metadata_json;  /**< or NULL */
    int32_t truncated;          /**< 1: the observation was cut at max_observation_bytes */
    double seconds;             /**< wall time of the call */
} rlp_env_outcome;

/**
 * Starts an episode outside an engine (an evaluation harness, a test):
 * runs reset under the deadline and fills @p first (may be NULL).
 * @return RLP_OK (see first->status for the call's own result); RLP_E_INVALID_ARG; RLP_E_NOMEM.
 */
RLP_API int rlp_env_episode_start(rlp_env_episode **out, rlp_env *env, const char *metadata_json,
                                  rlp_env_outcome *first);
/** Runs one step under the deadline. RLP_OK (see out->status); RLP_E_INVALID_ARG; RLP_E_STATE (after done or failure). */
RLP_API int rlp_env_episode_step(rlp_env_outcome *out, rlp_env_episode *ep, const char *action, size_t action_len,
                                 const int32_t *action_ids, size_t n_action_ids);
/** Ends an episode (its close runs now, or when an abandoned call ends). NULL is a no-op. */
RLP_API void rlp_env_episode_free(rlp_env_episode *ep);

/* ------------------------------------------------------------------------ */
/* Tool calls in a model's text                                              */
/* ------------------------------------------------------------------------ */

/** A list of tool calls parsed from a model's text (rlp_tool_calls_parse()). */
typedef struct rlp_tool_call_list rlp_tool_call_list;

/** Version of rlp_tool_call understood by this header. */
#define RLP_TOOL_CALL_VERSION 1

/** One parsed call, as a view (strings borrowed from the list until it is freed). */
typedef struct rlp_tool_call {
    uint32_t version;       /**< RLP_TOOL_CALL_VERSION, set by the caller */
    const char *name;       /**< the function's name */
    const char *arguments;  /**< its arguments as compact JSON object text ("{}" when absent) */
    size_t start, end;      /**< byte span of the block in the text ([start, end)) */
} rlp_tool_call;

/**
 * Parses the Qwen/Hermes tool calls of a model's text — every
 * `<tool_call>{"name": …, "arguments": {…}}</tool_call>` block, in order —
 * without running anything (what the built-in "hermes" environment and
 * `rlpost serve`'s OpenAI `tool_calls` use). A block whose body is not a
 * JSON object with a string "name" and object (or JSON-string-encoded
 * object) "arguments" is skipped and counted in *n_bad; an unclosed last
 * block counts when its JSON is complete. Pure: safe on untrusted bytes
 * (fuzzed), thread-safe.
 * @param n_bad  may be NULL
 * @return RLP_OK (also with no call); RLP_E_INVALID_ARG; RLP_E_NOMEM.
 */
RLP_API int rlp_tool_calls_parse(rlp_tool_call_list **out, const char *text, size_t len, size_t *n_bad);
/** Number of calls in @p list. */
RLP_API int rlp_tool_call_list_size(size_t *out_count, const rlp_tool_call_list *list);
/** Fills @p out (out->version set by the caller) with call @p index. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_tool_call_list_get(rlp_tool_call *out, const rlp_tool_call_list *list, size_t index);
/** Frees a list. NULL is a no-op. */
RLP_API void rlp_tool_call_list_free(rlp_tool_call_list *list);

/* ------------------------------------------------------------------------ */
/* Multi-turn rollouts                                                       */
/* ------------------------------------------------------------------------ */

/** Version of rlp_multiturn_options understood by this header. */
#define RLP_MULTITURN_OPTIONS_VERSION 1

/** How rlp_rollout_generate_episodes() runs episodes. */
typedef struct rlp_multiturn_options {
    uint32_t version;           /**< RLP_MULTITURN_OPTIONS_VERSION */
    rlp_env *env;               /**< the environment (borrowed); required */
    uint32_t max_turns;         /**< model turns per episode; default 8 */
    uint32_t max_tokens;        /**< token budget after the prompt (model + observation tokens); 0 = the
                                     engine's KV capacity; each turn is also bounded by max_new_tokens */
    int32_t overlap;            /**< 1 (default): other sequences keep decoding while an environment call
                                     runs; 0: every call of a step waits for all of them (batch-wide wait,
                                     the baseline of tests/bench) */
} rlp_multiturn_options;

#define RLP_MULTITURN_OPTIONS_INIT { RLP_MULTITURN_OPTIONS_VERSION, NULL, 8, 0, 1 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_multiturn_options_init(rlp_multiturn_options *opts, uint32_t version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_ENV_H */
