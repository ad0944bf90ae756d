/**
 * @file rlpost/batch.h
 * @brief librlpost: trajectories and batches (rlp_batch), the type that rollout, reward, replay buffer and train step share.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_BATCH_H
#define RLPOST_BATCH_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Trajectories: what rollout, reward, replay buffer and train step share   */
/* ------------------------------------------------------------------------ */

/** Why a completion ended (values fixed). */
typedef enum rlp_finish_reason {
    RLP_FINISH_NONE = 0,    /**< still running (never in a returned batch) */
    RLP_FINISH_STOP = 1,    /**< a stop string, a stop token id or EOS */
    RLP_FINISH_LENGTH = 2,  /**< max_new_tokens or the KV capacity was reached */
    RLP_FINISH_ABORT = 3,   /**< aborted: rlp_rollout_engine_abort(), a stream callback, or a weight
                                 update in RLP_INTERRUPT_ABORT mode; the tokens so far are kept */
    RLP_FINISH_ERROR = 4    /**< a remote request failed; see rlp_trajectory::error */
} rlp_finish_reason;

/** Version of rlp_provenance understood by this header. */
#define RLP_PROVENANCE_VERSION 1

/**
 * Where a trajectory came from: the task item its prompt was served as and
 * the producer's batch and sampling seed. Set by the producer right after
 * generation (rlp_batch_set_provenance(), rlp_batch_set_group_provenance(),
 * or a version-2 rlp_trajectory on rlp_batch_append()); the library never
 * makes it up, it only carries it: through rlp_batch_get() /
 * rlp_batch_append() copies, rlp_batch_extend(), the replay buffer's push and
 * pull and its spill file (so groups restored after a crash still say where
 * they came from). Every sample of a group normally shares one provenance.
 */
typedef struct rlp_provenance {
    uint32_t version;       /**< RLP_PROVENANCE_VERSION, set by the caller */
    uint64_t prompt_index;  /**< the prompt's record index in its task (rlp_task_item::index) */
    uint64_t epoch;         /**< the task epoch it was served in (rlp_task_item::epoch) */
    uint64_t position;      /**< its position in that epoch's order (rlp_task_item::position) */
    uint64_t sampling_seed; /**< the seed its group was drawn with (rlp_sampling_options::seed) */
    uint64_t batch;         /**< the producer's 0-based batch number: the 1-based RL step it was made for, − 1 */
} rlp_provenance;

/** How an episode ended (values fixed). */
typedef enum rlp_episode_end {
    RLP_EPISODE_RUNNING = 0,    /**< not ended (never in a returned batch) */
    RLP_EPISODE_DONE = 1,       /**< the environment said done */
    RLP_EPISODE_MAX_TURNS = 2,  /**< the turn limit was reached */
    RLP_EPISODE_BUDGET = 3,     /**< the token budget or the KV capacity was reached (truncated) */
    RLP_EPISODE_ERROR = 4,      /**< an environment call failed or timed out (sample invalid) */
    RLP_EPISODE_ABORT = 5       /**< the generation was aborted */
} rlp_episode_end;

/** Version of rlp_episode_stats understood by this header. */
#define RLP_EPISODE_STATS_VERSION 1

/** What happened in one episode (rlp_trajectory::episode). */
typedef struct rlp_episode_stats {
    uint32_t version;             /**< RLP_EPISODE_STATS_VERSION */
    uint32_t turns;               /**< model turns */
    uint32_t tool_calls;          /**< steps the environment answered as a tool call */
    uint32_t tool_errors;         /**< tool failures the episode survived, plus a failed call that ended it */
    uint32_t tool_timeouts;       /**< calls abandoned at their deadline */
    uint32_t observation_tokens;  /**< tokens appended with loss mask 0 */
    uint32_t observations_cut;    /**< observations cut at max_observation_bytes or by the budget */
    int32_t end;                  /**< rlp_episode_end */
    double tool_seconds;          /**< wall time of the environment's calls, summed */
} rlp_episode_stats;

/**
 * Version of rlp_trajectory understood by this header. 2 added
 * has_provenance and provenance, 3 loss_mask and the episode record; a
 * caller that sets an older version gets and gives that version's fields
 * only (its struct is the shorter one).
 */
#define RLP_TRAJECTORY_VERSION 3

/**
 * One prompt and one sampled completion with everything the losses need,
 * as a view: rlp_batch_get() fills it with pointers borrowed from the batch
 * (valid until the batch is changed or freed); rlp_batch_append() copies
 * from it. Set @ref version to RLP_TRAJECTORY_VERSION before either call.
 *
 * Per-token arrays have n_completion_tokens entries: the i-th completion
 * token was drawn from the rollout policy at version token_versions[i] with
 * behaviour logprob logprobs[i] (see rlp_logprobs_mode for which
 * distribution). In a multi-turn episode the completion is the turns and
 * the observations between them, in order; loss_mask tells them apart.
 * After a stop string the ids and logprobs of every sampled
 * token are kept (they are training data) while completion_text ends at the
 * stop.
 */
typedef struct rlp_trajectory {
    uint32_t version;                  /**< RLP_TRAJECTORY_VERSION, set by the caller */
    uint64_t group_id;                 /**< samples of one prompt share it (GRPO group) */
    const int32_t *prompt_tokens;      /**< (n_prompt_tokens) */
    size_t n_prompt_tokens;
    const int32_t *completion_tokens;  /**< (n_completion_tokens) */
    size_t n_completion_tokens;
    const float *logprobs;             /**< (n_completion_tokens) behaviour logprobs (nats) */
    const uint64_t *token_versions;    /**< (n_completion_tokens) policy version per token; NULL on append = all policy_version */
    const char *prompt_text;           /**< UTF-8 or NULL */
    const char *completion_text;       /**< UTF-8, ends at a matched stop string (or includes it if asked) */
    uint64_t policy_version;           /**< version of the weights that started the rollout */
    int32_t finish_reason;             /**< rlp_finish_reason */
    int32_t stop_index;                /**< index of the matched stop string, or −1 */
    float temperature;                 /**< the T the tokens were sampled at (the trainer must use the same) */
    float reward;                      /**< scalar reward; NaN until scored */
    int32_t valid;                     /**< 0: marked invalid (reward failure, remote error); see error */
    const char *error;                 /**< why invalid, or NULL */
    const char *metadata_json;         /**< JSON object carried from the prompt (by convention its "reference"
                                            field is the reference answer rewards compare with), or NULL */
    uint32_t sample_index;             /**< 0 … n−1 within its group */
    const float *token_rewards;        /**< (n_completion_tokens) per-token (process) rewards, or NULL */
    int32_t has_provenance;            /**< (version 2) 1: provenance says where it came from; 0: unknown
                                            (provenance is then all zero on get and ignored on append) */
    rlp_provenance provenance;         /**< (version 2) see rlp_provenance; version RLP_PROVENANCE_VERSION on get */
    const uint8_t *loss_mask;          /**< (version 3) (n_completion_tokens) 1: a model token, trained on;
                                            0: an observation token of a multi-turn episode (tool output):
                                            no gradient, not counted by any loss or token mean, its logprob
                                            is 0; NULL = every token is the model's */
    int32_t has_episode;               /**< (version 3) 1: a multi-turn episode; episode says what happened */
    rlp_episode_stats episode;         /**< (version 3) see rlp_episode_stats; all zero when has_episode is 0 */
} rlp_trajectory;

/** Creates an empty batch. RLP_OK, RLP_E_INVALID_ARG or RLP_E_NOMEM. */
RLP_API int rlp_batch_create(rlp_batch **out);

/** Frees a batch. NULL is a no-op. */
RLP_API void rlp_batch_free(rlp_batch *batch);

/** Number of trajectories. */
RLP_API int rlp_batch_size(size_t *out_count, const rlp_batch *batch);

/**
 * Fills @p out with a view of trajectory @p index (pointers borrowed; see
 * rlp_trajectory). @p out->version must be set by the caller: with 1 only
 * the version-1 fields are written (nothing past token_rewards), with 2 or
 * more also has_provenance and provenance; out->version then says which.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, version 0, index out of range).
 */
RLP_API int rlp_batch_get(rlp_trajectory *out, const rlp_batch *batch, size_t index);

/**
 * Appends a copy of @p traj (arrays and strings are copied). Checks that
 * the per-token arrays are present when n_completion_tokens > 0, that
 * logprobs are finite and ≤ 0, and that finish_reason is known. A
 * version-2 @p traj with has_provenance set gives its provenance too
 * (whose version must be 1 … RLP_PROVENANCE_VERSION); a version-1 one
 * appends a trajectory without provenance.
 * @return RLP_OK; RLP_E_INVALID_ARG (naming the field); RLP_E_NOMEM.
 */
RLP_API int rlp_batch_append(rlp_batch *batch, const rlp_trajectory *traj);

/** Moves every trajectory of @p src to the end of @p dst (src becomes empty); provenance moves with them. */
RLP_API int rlp_batch_extend(rlp_batch *dst, rlp_batch *src);

/**
 * Sets the provenance of trajectory @p index to a copy of @p p (replacing
 * any it had). Not thread-safe: the batch is used by one thread at a time.
 * @param p  p->version must be 1 … RLP_PROVENANCE_VERSION; the fields that
 *           version has are read.
 * @return RLP_OK; RLP_E_INVALID_ARG (@p batch or @p p NULL, an unknown
 *         p->version, @p index outside the batch).
 */
RLP_API int rlp_batch_set_provenance(rlp_batch *batch, size_t index, const rlp_provenance *p);

/**
 * Sets the provenance of every trajectory whose group_id is @p group_id
 * (every sample of one prompt) to a copy of @p p: what a producer calls
 * once per group right after generation. Same rules as
 * rlp_batch_set_provenance(); nothing is changed on error.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, an unknown p->version);
 *         RLP_E_NOT_FOUND (no trajectory of the batch has @p group_id).
 */
RLP_API int rlp_batch_set_group_provenance(rlp_batch *batch, uint64_t group_id, const rlp_provenance *p);

/** Sets the scalar reward of trajectory @p index (finite, else RLP_E_INVALID_ARG). */
RLP_API int rlp_batch_set_reward(rlp_batch *batch, size_t index, float reward);

/**
 * Sets per-token (process) rewards of trajectory @p index: @p n must equal
 * its completion length; values are copied and must be finite. NULL with
 * n = 0 clears them.
 */
RLP_API int rlp_batch_set_token_rewards(rlp_batch *batch, size_t index, const float *rewards, size_t n);

/** Marks trajectory @p index invalid with a reason (copied); it keeps its tokens. */
RLP_API int rlp_batch_set_invalid(rlp_batch *batch, size_t index, const char *reason);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_BATCH_H */
