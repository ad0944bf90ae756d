/**
 * @file rlpost/trainer.h
 * @brief librlpost: the run loop as library code — the trainer (rlp_trainer)
 *        for synchronous, sequential-pull and asynchronous runs, and its
 *        producer half, the rollout worker (rlp_rollout_worker).
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 *
 * The three modes are configuration, not host code paths (Echo, Xiao et
 * al. 2025; AReaL, Fu et al. 2025):
 *
 * - **RLP_TRAIN_SYNC**: each step generates its groups on an engine that
 *   shares the policy's weights, scores them, trains. Staleness 0.
 * - **RLP_TRAIN_PULL** (Echo's sequential pull): the rollout side is a
 *   separate engine — a copy of the policy on the same context, or remote
 *   workers (`rlpost serve`) — that pulls the latest version through a
 *   synchronizer before each step's generation. Staleness 0.
 * - **RLP_TRAIN_ASYNC** (Echo's asynchronous push-pull, AReaL's fully
 *   asynchronous RL): a rollout worker thread generates, scores and pushes
 *   groups into a replay buffer while the trainer trains; the
 *   synchronizer's staleness gate admits a group only while it can still
 *   be trained within η versions, and the buffer drops what is older. With
 *   η = 0 the metrics equal those of a sync run bit for bit.
 *
 * Versions count RL steps: every rlp_trainer_step() that applies an update
 * advances the policy's version by one, so the host never computes
 * groups-per-version.
 */
#ifndef RLPOST_TRAINER_H
#define RLPOST_TRAINER_H

#include "rlpost/core.h"
#include "rlpost/algo.h"
#include "rlpost/rollout.h"
#include "rlpost/task.h"
#include "rlpost/buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Runs RL steps: owns the rollout side (engines, synchronizer, replay buffer, rollout thread). */
typedef struct rlp_trainer rlp_trainer;
/** The producer half of an asynchronous run: admit, pull, generate, score, push. */
typedef struct rlp_rollout_worker rlp_rollout_worker;

/* ------------------------------------------------------------------------ */
/* Trainer                                                                  */
/* ------------------------------------------------------------------------ */

/** How the rollout side keeps in step with training (values fixed). */
typedef enum rlp_train_mode {
    RLP_TRAIN_SYNC = 0,  /**< co-located engine sharing the weights; generate, score, train */
    RLP_TRAIN_PULL = 1,  /**< Echo sequential pull: a separate engine pulls each version before generating */
    RLP_TRAIN_ASYNC = 2  /**< Echo push-pull / AReaL: a rollout thread feeds a replay buffer under the gate */
} rlp_train_mode;

/** A reward function scored on each step's batch for the record only (not
 *  the training reward), e.g. a format check or an accuracy verifier. */
typedef struct rlp_trainer_metric {
    rlp_reward_fn *fn;       /**< borrowed; must outlive the trainer; used by one trainer call at a time */
    const char *mean_key;    /**< JSON key of the mean score over valid samples, or NULL; copied */
    const char *rate_key;    /**< JSON key of the share of samples scoring ≥ threshold, or NULL; copied */
    double threshold;        /**< for rate_key */
} rlp_trainer_metric;

/** Called with each step's scored batch before it trains (e.g. to write
 *  samples); @p step is the step it belongs to (1-based). Runs on the
 *  thread that called rlp_trainer_step(). Non-zero fails the step
 *  (RLP_E_CALLBACK). The batch is borrowed for the call. */
typedef int (*rlp_trainer_batch_fn)(const rlp_batch *batch, uint64_t step, void *payload);

/** Version of rlp_trainer_options understood by this header. 2 added
 *  multiturn (a version-1 caller's struct ends before it), 3
 *  rollout_weights, 4 max_gen_batches and rl of rlp_rl_options version 2
 *  (which moved every field after rl: callers of versions 1–3 pass the
 *  older layout, and the library converts it field by field), 5 the
 *  critic (appended: a version-4 struct ends before critic_path), 6
 *  remote_workers (appended: a version-5 struct ends before it). */
#define RLP_TRAINER_OPTIONS_VERSION 6

/** Options of rlp_trainer_create(). Every pointer is borrowed for the call
 *  and what it points to copied, unless said otherwise. */
typedef struct rlp_trainer_options {
    uint32_t version;               /**< RLP_TRAINER_OPTIONS_VERSION */
    int32_t mode;                   /**< rlp_train_mode; default RLP_TRAIN_SYNC */
    uint32_t max_staleness;         /**< η (RLP_TRAIN_ASYNC only): a group generated at version u is
                                         trained at version v only if v − u ≤ η; default 0 (the
                                         default mode is SYNC). Other modes are on-policy: a non-zero
                                         η there is refused */
    uint32_t prompts_per_step;      /**< G groups per RL step; default 8 */
    uint64_t seed;                  /**< step k samples with a seed that is a pure function of (seed, k) */
    rlp_sampling_options sampling;  /**< how completions are drawn; n is the group size (≥ 2 for GRPO);
                                         its seed is ignored (see seed) */
    rlp_rl_options rl;              /**< the RL step */
    const rlp_policy *ref;          /**< frozen reference policy for a KL, or NULL; borrowed, must outlive */
    const rlp_tokenizer *tokenizer; /**< renders the task's prompts and decodes completions for a model
                                         without a tokenizer; NULL = the policy's; borrowed, must outlive */
    uint32_t max_seq_len;           /**< local rollout engines: prompt + completion tokens; 0 = the model's */
    uint32_t max_batch;             /**< local engines on the policy's context (SYNC, local PULL, and the
                                         evaluation engine): sequences decoded at once; 0 =
                                         min(256, prompts_per_step × n) */
    uint32_t rollout_threads;       /**< ASYNC with a local engine: 0 = the rollout worker's engine works on
                                         the policy's context; N = on a context of its own with N threads
                                         (same backend, device and seed), so that rollouts and training
                                         do not oversubscribe the cores */
    const char *const *worker_urls; /**< (n_worker_urls) `rlpost serve` base URLs: PULL and ASYNC generate
                                         there instead of on a local copy; copied */
    size_t n_worker_urls;
    const char *api_key;            /**< bearer token of the workers, or NULL; copied */
    const char *weights_dir;        /**< with worker_urls: where published versions are written for the
                                         workers to load (required then); copied */
    uint32_t worker_timeout_ms;     /**< per generate request to a worker; 0 = 300000 */
    uint32_t worker_retries;        /**< a group whose request failed is generated again this many
                                         times (any mode); default 2 */
    const rlp_trainer_metric *metrics; /**< (n_metrics) scored on each step's batch for the record; copied */
    size_t n_metrics;               /**< at most RLP_TRAINER_MAX_METRICS */
    rlp_trainer_batch_fn on_batch;  /**< or NULL */
    void *on_batch_payload;
    rlp_comm *comm;                 /**< data parallelism: the ranks' group (also set on the policy with
                                         rlp_policy_set_comm()); each rank generates its share of
                                         every step's prompts and the step's scores are reduced. NULL
                                         alone. Borrowed, must outlive the trainer */
    uint32_t stall_polls;           /**< ASYNC: 200 ms waits with the gate closed and too few groups
                                         buffered before a step fails as stalled; default 10 */
    const char *rollout_inbox;      /**< ASYNC with rollout workers in other processes (or machines, over a
                                         shared folder): no rollout thread here; each step takes in the
                                         batch files those workers write into this folder
                                         (rlp_replay_buffer_ingest_dir), and versions are published as
                                         files in weights_dir (required then) for them to load. Their gate
                                         is their own synchronizer's; the buffer drops what is older than
                                         η. Not with worker_urls. Copied */
    rlp_multiturn_options multiturn; /**< (version 2) multiturn.env non-NULL: every sample is a multi-turn
                                         episode against that environment (borrowed, must outlive the
                                         trainer; rlp_rollout_generate_episodes()), in every mode; NULL
                                         (the default): single-turn completions */
    int32_t rollout_weights;        /**< (version 3) rlp_rollout_weights of the local engines (rollouts and
                                         evaluations); default RLP_ROLLOUT_WEIGHTS_F32 */
    uint32_t max_gen_batches;       /**< (version 4) DAPO dynamic sampling (Yu et al. 2025 §3.2), with
                                         rl.filter_equal_groups, SYNC and PULL: a step whose groups with
                                         unequal rewards number fewer than prompts_per_step generates further
                                         batches of prompts_per_step prompts (the task's next ones) until it
                                         has that many, at most this many batches in all, and trains on the
                                         first prompts_per_step such groups; past the cap the step fails with
                                         RLP_E_STATE saying so (verl's max_num_gen_batches). 0 (the default):
                                         one batch, groups filtered, the step trains on fewer. SYNC and PULL
                                         on one rank only: with filter_equal_groups, rlp_trainer_create
                                         refuses it in ASYNC mode (where filter_equal_groups drops all-equal
                                         groups at train time) and with more than one rank. The record's
                                         prompts are the kept groups'; its reward figures cover every sample
                                         generated; batch j > 0 samples with a seed derived from the step's */
    /* (version 5) PPO with a critic (rl.advantage = RLP_ADV_GAE, which needs one; verl's and
     * OpenRLHF's critic worker): every step computes V(s_t) of the step's tokens with the critic,
     * GAE(rl.gamma, gae_lambda) advantages and returns, trains the policy on the advantages and
     * then the critic on the returns, rl.ppo_epochs × rl.mini_batches optimizer steps each
     * (rl.micro_batch_tokens too), with the clipped value loss
     * ½·max((V − R)², (clip(V, V_old ± value_clip) − R)²), token-mean (verl compute_value_loss).
     * Checkpoints (rlp_trainer_save) hold the critic and its optimizer. One rank only. */
    const char *critic_path;        /**< (version 5) "policy": a copy of the policy's weights with a value
                                         head (HF *ForTokenClassification, one output, zero-initialised:
                                         V = 0 at the start); or an HF *ForTokenClassification folder with
                                         one output (a saved critic); NULL (the default): no critic. Copied */
    float critic_lr;                /**< (version 5) the critic's AdamW learning rate; 0 (the default) = the
                                         policy's (its other optimizer options are the policy's) */
    uint32_t critic_warmup;         /**< (version 5) the first N steps train the critic only (verl's
                                         critic_warmup): the policy's weights stay, its version still
                                         advances by one a step; default 0 */
    float value_clip;               /**< (version 5) ε of the value loss's clip around the step's values
                                         (verl's cliprange_value); default 0.5; 0 = no clipping */
    float gae_lambda;               /**< (version 5) λ of GAE in [0, 1]; default 1 (verl's lam: then
                                         A_t = Σ γ^k r_{t+k} − V(s_t)) */
    int32_t remote_workers;         /**< (version 6) 1: generate on remote `rlpost serve` workers even when
                                         n_worker_urls is 0: a swarm whose workers join later, given to
                                         the trainer with rlp_trainer_set_worker_urls() (PULL or ASYNC;
                                         weights_dir required as with worker_urls). 0 (the default): remote
                                         exactly when n_worker_urls > 0 */
} rlp_trainer_options;

#define RLP_TRAINER_MAX_METRICS 8

/** Fills @p opts with the defaults (sampling, rl: their own defaults). */
RLP_API int rlp_trainer_options_init(rlp_trainer_options *opts, uint32_t version);

/** Version of rlp_step_record understood by this header. */
#define RLP_STEP_RECORD_VERSION 6

/**
 * What one rlp_trainer_step() did. Seconds are wall-clock. In SYNC and
 * PULL mode the trainer waits while rollouts are generated and scored and
 * the engine waits while the trainer trains; in ASYNC mode both run at
 * once, and rollout_seconds, reward_seconds and rollout_idle_seconds are
 * the rollout side's since the previous step.
 */
typedef struct rlp_step_record {
    uint32_t version;              /**< RLP_STEP_RECORD_VERSION, set by the caller */
    uint64_t step;                 /**< 1-based RL step */
    uint64_t policy_version;       /**< after the step */
    uint64_t epoch;                /**< the task epoch of the step's first prompt */
    uint64_t sampling_seed;        /**< the seed its groups were drawn with (as a signed 63-bit value; the
                                        first batch's under dynamic sampling) */
    const uint64_t *prompt_index;  /**< (n_prompts) record indices of its prompts; borrowed until the next
                                        step or rlp_trainer_free() */
    size_t n_prompts;
    double reward_mean, reward_std, reward_min, reward_max; /**< over valid samples (this rank's with comm:
                                                               reduced over all ranks); NaN when none */
    uint64_t reward_valid;         /**< valid samples */
    uint64_t reward_errors, reward_timeouts, reward_nonfinite, reward_crashed; /**< why samples were invalid */
    uint64_t completions, completion_tokens, truncated;
    double metric_mean[RLP_TRAINER_MAX_METRICS]; /**< per options.metrics; NaN when none valid */
    double metric_rate[RLP_TRAINER_MAX_METRICS];
    rlp_rl_stats rl;               /**< the RL step */
    uint64_t buffer_dropped;       /**< ASYNC: groups dropped as stale since the previous step */
    uint64_t buffer_dropped_total, buffer_size;
    double rollout_seconds, reward_seconds, train_seconds, publish_seconds;
    double trainer_idle_seconds, rollout_idle_seconds, step_seconds;
    uint64_t rollout_tokens;       /**< completion tokens generated for this step (ASYNC: since the previous) */
    double tokens_per_second;      /**< rollout_tokens / rollout_seconds; NaN when no time */
    /* (version 2) multi-turn episodes: all zero (rates NaN) when the step's samples are not episodes */
    uint64_t episodes;             /**< samples that are episodes */
    double turns_mean;             /**< model turns per episode */
    uint32_t turns_max;
    double tool_call_rate;         /**< share of episodes with at least one tool call */
    uint64_t tool_calls, tool_errors, tool_timeouts; /**< summed over the episodes */
    double tool_seconds;           /**< environment call time, summed (calls overlap: not wall time) */
    double masked_token_share;     /**< observation tokens / completion tokens (loss mask 0) */
    uint64_t episodes_truncated;   /**< ended by the token budget (RLP_EPISODE_BUDGET) */
    uint64_t episodes_max_turns;   /**< ended by the turn limit */
    uint64_t episodes_failed;      /**< ended by an environment failure or timeout (invalid) */
    /* (version 3) behaviour/trainer mismatch of the step's trained tokens: d = logp_trainer − logp_behaviour
     * (π_prox at the step's start vs the logprob recorded at generation), w = exp(d) */
    double mismatch_kl;            /**< mean (w − 1 − d): k3 estimate of KL(π_behav ‖ π_trainer), nats/token */
    double mismatch_is_mean;       /**< mean importance weight w */
    double mismatch_is_min, mismatch_is_max;
    double mismatch_abs_mean;      /**< mean |d| (nats) */
    /* (version 4) */
    uint64_t publish_bytes;        /**< bytes this step's publish moved through the synchronizer (FILE, HTTP,
                                        COLLECTIVE): the adapter files only for a LoRA policy; 0 in SYNC mode
                                        and for in-process engines */
    /* (version 5) DAPO dynamic sampling, overlong filtering and the rollout correction (rl.rollout_is,
     * rl.rollout_rs, rl.rollout_token_veto); w = π_old/π_behav at the option's level */
    uint32_t gen_batches;          /**< batches of prompts_per_step prompts generated for this step; 1
                                        without max_gen_batches */
    uint64_t dynamic_dropped_groups; /**< groups with all-equal rewards set aside by dynamic sampling */
    uint64_t overlong_filtered;    /**< sequences without loss because the length limit cut them */
    double rollout_is_mean, rollout_is_min, rollout_is_max; /**< of w before truncation (1 when off) */
    double rollout_is_truncated;   /**< share of tokens (TOKEN) or sequences (SEQUENCE) whose w > threshold */
    double rollout_is_ess;         /**< effective sample size 1/mean((w′/mean w′)²) with w′ = w clamped to
                                        [1/threshold, threshold] (verl's formula, whose 1e-8 in the mean can
                                        put it a rounding above 1) */
    double rollout_rs_masked;      /**< share of model tokens rejected (rollout_rs and the veto) */
    double rollout_rs_seq_masked;  /**< share of sequences with at least one rejected token */
    double rollout_veto;           /**< share of sequences vetoed */
    /* (version 6) PPO with a critic (rlp_trainer_options::critic_path); all zero without one */
    double value_loss;             /**< the critic's clipped value loss, mean over its optimizer steps (before
                                        each update) */
    double value_clipfrac;         /**< share of trained tokens where the clipped term won (mean over steps) */
    double values_mean;            /**< V(s_t) at the step's start, mean over trained tokens */
    double returns_mean;           /**< GAE returns, mean over trained tokens */
    double value_explained_var;    /**< 1 − Var(R − V)/Var(R) over trained tokens at the step's start (NaN when
                                        Var(R) = 0) */
    double critic_grad_norm;       /**< of the critic's last optimizer step, before clipping */
    double critic_seconds;         /**< values + critic updates */
} rlp_step_record;

/**
 * Creates a trainer over a trainable policy, a task and a reward function,
 * and (PULL, ASYNC) the rollout side: engine, synchronizer, replay buffer,
 * and publishes the policy's current version. Nothing runs until the
 * first rlp_trainer_step(); ASYNC's rollout thread starts there.
 *
 * @param policy  trainable; borrowed, must outlive the trainer; the trainer
 *                is its only user while it exists
 * @param task    the training prompts; borrowed, must outlive the trainer;
 *                the trainer (its rollout thread in ASYNC) draws from it
 * @param reward  the training reward; borrowed, must outlive the trainer
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, a bad mode, η ≠ 0 outside
 *         ASYNC, prompts_per_step = 0, group size < 1, worker_urls with
 *         SYNC or without weights_dir, a metric without fn, too many
 *         metrics, max_gen_batches with rl.filter_equal_groups in ASYNC
 *         mode or on several ranks, bad rl options); RLP_E_STATE (a frozen policy); RLP_E_NETWORK (a
 *         worker URL is malformed); RLP_E_NOMEM; or the engine's,
 *         synchronizer's or buffer's creation error.
 */
RLP_API int rlp_trainer_create(rlp_trainer **out, rlp_policy *policy, rlp_task *task, rlp_reward_fn *reward,
                               const rlp_trainer_options *opts);

/**
 * Runs one RL step: takes the step's groups (SYNC, PULL: generates and
 * scores them now; ASYNC: waits for the rollout thread's, at most η
 * versions old), scores the metrics, calls on_batch, trains
 * (rlp_policy_train_rl) and publishes the new version to the rollout side.
 *
 * @param[out] rec  may be NULL; set rec->version first
 * @return RLP_OK; RLP_E_CLOSED (rlp_trainer_interrupt() was called while
 *         the step waited: nothing was trained, the trainer stays usable);
 *         RLP_E_STATE (an earlier step failed: the trainer must be freed
 *         and the run resumed from a checkpoint; or dynamic sampling reached
 *         max_gen_batches without prompts_per_step groups of unequal
 *         rewards); RLP_E_TIMEOUT (ASYNC: the
 *         staleness gate admits nothing while the buffer cannot fill a
 *         step — a safety net; resume from the last checkpoint); RLP_E_CALLBACK (on_batch
 *         failed); otherwise the failing part's code with its message
 *         (generation, a worker, the reward, the RL step, publishing).
 *         After any error but RLP_E_CLOSED the trainer is failed.
 */
RLP_API int rlp_trainer_step(rlp_trainer *trainer, rlp_step_record *rec);

/**
 * The last step's record as one JSON object (the keys of metrics.jsonl:
 * step, policy_version, epoch, prompt_index, sampling_seed, reward_*,
 * the metrics' keys, completions, …, rl fields, buffer_*, *_seconds,
 * tokens_per_second). Writes at most @p cap bytes including the NUL.
 * @param[out] len_out  the text's length without the NUL (also on
 *         RLP_E_OVERFLOW: then @p cap must be at least *len_out + 1)
 * @return RLP_OK; RLP_E_STATE (no step yet); RLP_E_OVERFLOW (@p cap too
 *         small: *len_out says how much is needed).
 */
RLP_API int rlp_trainer_step_json(const rlp_trainer *trainer, char *buf, size_t cap, size_t *len_out);

/**
 * Asks a step waiting for rollouts to return RLP_E_CLOSED. Safe from any
 * thread and from a signal handler (it only stores an atomic flag). The
 * flag is cleared when a step returns.
 */
RLP_API int rlp_trainer_interrupt(rlp_trainer *trainer);

/**
 * Stops the rollout side (ASYNC: the thread stops, a generate call in
 * flight is aborted, nothing half-done is pushed), e.g. so that a final
 * evaluation has the cores to itself. A later step fails (RLP_E_CLOSED).
 */
RLP_API int rlp_trainer_stop(rlp_trainer *trainer);

/** Steps done (resumed ones included). */
RLP_API int rlp_trainer_steps_done(uint64_t *out_steps, const rlp_trainer *trainer);


/**
 * Writes a checkpoint into folder @p dir (created; files replaced
 * atomically): the weights (rlp_policy_save, @p dtype), the optimizer
 * state (optimizer.safetensors) and state.json (the step, the task
 * cursor after the last trained prompt, the options that a resume must
 * match, and the keys of @p host_json when not NULL — beside the
 * trainer's, which win on a clash). In ASYNC mode the
 * cursor stands before any prompt generated but not yet trained, so a
 * resume generates them again rather than skip them.
 * @return RLP_OK; RLP_E_INVALID_ARG (@p host_json not a JSON object);
 *         RLP_E_IO.
 */
RLP_API int rlp_trainer_checkpoint(rlp_trainer *trainer, const char *dir, int dtype, const char *host_json);

/**
 * Resumes from a checkpoint folder written by rlp_trainer_checkpoint():
 * restores the optimizer state, the task cursor and the step count. The
 * policy must already hold the checkpoint's weights (load it from @p dir).
 * Call before the first step.
 * @return RLP_OK; RLP_E_STATE (a step already ran); RLP_E_NOT_FOUND (no
 *         state.json); RLP_E_FORMAT (malformed); RLP_E_INVALID_ARG (the
 *         checkpoint was taken with other options — the message names the
 *         option — or its policy version differs from the policy's).
 */
RLP_API int rlp_trainer_resume(rlp_trainer *trainer, const char *dir);

/**
 * Generates completions of @p set with the trainer's current weights, e.g.
 * for an evaluation: on the co-located engine (SYNC), on the local copy
 * brought up to date (local PULL), or on an engine on the policy's context
 * that shares its weights (ASYNC and remote PULL; created at the first
 * call). Failed remote groups are generated again as in training. The
 * completions are not scored. Not while a step runs (same thread).
 * @return RLP_OK; RLP_E_INVALID_ARG; the engine's error.
 */
RLP_API int rlp_trainer_generate(rlp_batch **out, rlp_trainer *trainer, const rlp_prompt_set *set,
                                 const rlp_sampling_options *sampling);

/** Version of rlp_eval_result understood by this header. */
#define RLP_EVAL_RESULT_VERSION 1

/** What rlp_trainer_evaluate() measured. */
typedef struct rlp_eval_result {
    uint32_t version;              /**< RLP_EVAL_RESULT_VERSION, set by the caller */
    uint64_t prompts, completions; /**< completions = prompts × sampling->n */
    uint64_t correct;              /**< completions the verifier scored ≥ threshold */
    double accuracy;               /**< correct / completions */
    double accuracy_low, accuracy_high; /**< 95 % interval: Wilson (n = 1), else a percentile bootstrap over
                                             prompts (the n samples of a prompt are not independent) */
    double reward_mean;            /**< the verifier's mean over valid completions; NaN when none */
    double mean_completion_tokens;
    uint64_t truncated;            /**< completions that hit max_new_tokens */
    double seconds;
} rlp_eval_result;

/**
 * Evaluates the current weights on held-out prompts: generates
 * (rlp_trainer_generate) and scores each completion with @p verifier.
 *
 * @param[out] out       set out->version first
 * @param set            the held-out prompts
 * @param sampling       n samples per prompt; temperature 0 = greedy
 * @param verifier       scores correctness (e.g. the task's accuracy reward); borrowed for the call
 * @param threshold      a completion is correct when its score is ≥ this
 * @param per_prompt     (prompts) receives each prompt's share of correct samples, or NULL
 * @param[out] out_batch receives the scored completions (prompt-major: the n samples of prompt 0
 *                       first), or NULL
 * @return RLP_OK; RLP_E_INVALID_ARG; the engine's or verifier's error.
 */
RLP_API int rlp_trainer_evaluate(rlp_eval_result *out, rlp_trainer *trainer, const rlp_prompt_set *set,
                                 const rlp_sampling_options *sampling, rlp_reward_fn *verifier, double threshold,
                                 double *per_prompt, rlp_batch **out_batch);

/* ------------------------------------------------------------------------ */
/* Confidence intervals of evaluations                                      */
/* ------------------------------------------------------------------------ */

/** Wilson score interval (Wilson 1927) of @p hits successes in @p n trials
 *  at normal quantile @p z (1.959963984540054 for 95 %); both NaN when n = 0. */
RLP_API int rlp_stats_wilson(double *lo, double *hi, uint64_t hits, uint64_t n, double z);

/** Percentile bootstrap 95 % interval of the mean of @p x (@p n values)
 *  with @p resamples resamples drawn from a splitmix64 stream started at
 *  @p seed (reproducible). NaN for n = 0; [x0, x0] for n = 1.
 *  RLP_OK, RLP_E_INVALID_ARG or RLP_E_NOMEM. */
RLP_API int rlp_stats_bootstrap_mean(double *lo, double *hi, const double *x, size_t n, uint32_t resamples,
                                     uint64_t seed);

/** The same for the mean of the paired differences b[i] − a[i] (two
 *  evaluations of the same prompts). */
RLP_API int rlp_stats_bootstrap_paired(double *lo, double *hi, const double *a, const double *b, size_t n,
                                       uint32_t resamples, uint64_t seed);

/** Frees the trainer: stops the rollout side and frees what it created
 *  (not the policy, task, reward or metrics). NULL is a no-op. */
RLP_API void rlp_trainer_free(rlp_trainer *trainer);

/* ------------------------------------------------------------------------ */
/* Rollout worker: the producer half                                        */
/* ------------------------------------------------------------------------ */

/** Version of rlp_rollout_worker_options understood by this header. */
#define RLP_ROLLOUT_WORKER_OPTIONS_VERSION 2

/** Options of rlp_rollout_worker_create(). */
typedef struct rlp_rollout_worker_options {
    uint32_t version;               /**< RLP_ROLLOUT_WORKER_OPTIONS_VERSION */
    uint32_t prompts_per_batch;     /**< G groups generated, scored and pushed together; default 8 */
    uint64_t seed;                  /**< batch j is drawn with a seed that is a pure function of (seed, j + 1) */
    uint64_t first_batch;           /**< j of the first batch (a resumed run's steps done) */
    rlp_sampling_options sampling;  /**< n is the group size; its seed is ignored */
    const rlp_tokenizer *tokenizer; /**< renders prompts and decodes completions; NULL = the engine's */
    uint32_t retries;               /**< a group whose request failed is generated again; default 2 */
    int32_t remote;                 /**< 1: the engine is remote (`rlpost serve` workers): the sampling seed
                                         goes out as a 63-bit value (seed >> 1), and a failed pull
                                         (RLP_E_NETWORK: some worker did not load the version) is a
                                         warning — generation goes on, the next pull retries; default 0 */
    rlp_log_fn log_fn;              /**< warnings; NULL = stderr */
    void *log_payload;
    const char *outbox_dir;         /**< or NULL: write each batch as a batch file into this folder
                                         (rlp_batch_write_file; a trainer in another process takes them in
                                         with rlp_trainer_options::rollout_inbox) instead of pushing into a
                                         buffer (then NULL); the gate slots are released as accepted once
                                         the file is written. Group ids get a tag of this process and
                                         worker, so that workers of several processes never share one.
                                         Copied */
    rlp_multiturn_options multiturn; /**< (version 2) multiturn.env non-NULL: batches are multi-turn
                                         episodes against it (borrowed; rlp_rollout_generate_episodes()) */
} rlp_rollout_worker_options;

/** Fills @p opts with the defaults. */
RLP_API int rlp_rollout_worker_options_init(rlp_rollout_worker_options *opts, uint32_t version);

/** Counters of a rollout worker (cumulative since creation). */
typedef struct rlp_rollout_worker_stats {
    uint32_t version;              /**< set by the caller (1) */
    uint64_t batches, groups_pushed, groups_released; /**< released = admitted but not pushed */
    uint64_t tokens;               /**< completion tokens generated */
    double generate_seconds, reward_seconds, idle_seconds; /**< idle: at the gate or a full buffer */
    uint64_t reward_errors, reward_timeouts, reward_nonfinite, reward_crashed;
    int32_t at_gate;               /**< 1 while waiting for the staleness gate */
    int32_t running;               /**< 1 while its thread runs */
} rlp_rollout_worker_stats;

/**
 * Creates the producer half of an asynchronous run: per batch it admits G
 * groups through @p sync's staleness gate, pulls the latest version into
 * @p engine, draws G prompts from @p task, generates (retrying failed
 * groups), scores with @p reward, tags every group with its provenance
 * (prompt index, epoch, task position, sampling seed) and pushes it whole
 * into @p buffer; a failure releases its gate slots unaccepted.
 *
 * The options are copied (the sampling options' stop strings and stop ids
 * too; the tokenizer is borrowed). All handles are borrowed and must
 * outlive the worker; @p buffer is NULL with outbox_dir, and otherwise
 * should be attached to @p sync (rlp_buffer_options::sync) so that both judge
 * staleness by one version and one η.
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOMEM.
 */
RLP_API int rlp_rollout_worker_create(rlp_rollout_worker **out, rlp_rollout_engine *engine, rlp_task *task,
                                      rlp_reward_fn *reward, rlp_synchronizer *sync, rlp_replay_buffer *buffer,
                                      const rlp_rollout_worker_options *opts);

/**
 * Produces one batch on the calling thread (admit, pull, generate, score,
 * push). @return RLP_OK; RLP_E_CLOSED (the gate or the buffer was closed,
 * or the worker stopped); the failing part's code otherwise.
 */
RLP_API int rlp_rollout_worker_run_once(rlp_rollout_worker *worker);

/**
 * Gives the worker another engine (a lane): rlp_rollout_worker_start() then
 * runs one thread per engine, each producing whole batches, so that up to
 * 1 + (engines added) batches generate at once, within the staleness gate
 * (which bounds the groups admitted, not the lanes). Batch numbers and
 * prompts are drawn in one order and batches enter the buffer (or outbox)
 * in that order, so a run trains on the same batches in the same steps
 * whatever the number of lanes; only their generation overlaps. Meant for
 * remote engines over the same servers, whose batches spend most of their
 * time waiting on the network (a WAN swarm): one engine each, since an
 * engine runs one generate call at a time.
 *
 * @param worker  a worker not started yet
 * @param engine  borrowed, must outlive the worker; not one the worker has;
 *                the same tokenizer as the first engine
 * @return RLP_OK; RLP_E_STATE (started); RLP_E_INVALID_ARG (more than 16
 *         engines, a repeated engine, another tokenizer).
 * rlp_rollout_worker_run_once() uses the first engine only.
 */
RLP_API int rlp_rollout_worker_add_engine(rlp_rollout_worker *worker, rlp_rollout_engine *engine);

/** Starts a thread that runs batches until rlp_rollout_worker_stop() or a
 *  failure (rlp_rollout_worker_error() tells which). RLP_E_STATE if running. */
RLP_API int rlp_rollout_worker_start(rlp_rollout_worker *worker);

/** Stops the thread: closes the gate and the buffer, aborts a generate
 *  call in flight, joins. Nothing half-done is pushed. */
RLP_API int rlp_rollout_worker_stop(rlp_rollout_worker *worker);

/** RLP_OK while the worker is healthy; else the code its thread failed
 *  with, and its message (borrowed, valid until the worker is freed) in
 *  @p *message when not NULL. Thread-safe. */
RLP_API int rlp_rollout_worker_error(const rlp_rollout_worker *worker, const char **message);

/** Copies the counters. Thread-safe. */
RLP_API int rlp_rollout_worker_stats_get(rlp_rollout_worker_stats *out, const rlp_rollout_worker *worker);

/**
 * ASYNC: the counters of the trainer's replay buffer and of its rollout
 * worker (cumulative since creation), for accounting a run: every group
 * the rollout side pushed and the buffer accepted is consumed by a step,
 * dropped as stale, or still held —
 * accepted + restored = consumed + dropped_stale + size.
 * @param[out] buffer  the buffer's counters (rlp_replay_buffer_stats()); may be NULL
 * @param[out] worker  the rollout worker's (rlp_rollout_worker_stats_get(); set
 *                     worker->version = 1 first); may be NULL, not both
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_STATE (not an ASYNC trainer).
 *         Thread-safe against the trainer's own threads; call it between steps.
 */
RLP_API int rlp_trainer_async_stats(rlp_buffer_stats *buffer, rlp_rollout_worker_stats *worker,
                                    const rlp_trainer *trainer);

/**
 * Replaces the set of remote workers of a running trainer (a swarm whose
 * `rlpost serve` workers join, leave or die): the rollout engine's servers
 * (rlp_rollout_engine_set_urls(): the next attempt of every request picks
 * from the new set; with none, requests wait up to worker_timeout_ms) and
 * the servers the synchronizer tells to load each version
 * (rlp_synchronizer_set_urls(): a new one is brought to the current
 * version at the next pull). Before the first step (when the synchronizer
 * does not exist yet) the set is kept and used when it is made. The gate,
 * the replay buffer and the staleness accounting are untouched: groups of a
 * worker that left are still accepted or dropped by the same rules.
 *
 * @param trainer  a trainer with remote workers (worker_urls or
 *                 remote_workers)
 * @param urls     (n_urls) base URLs of `rlpost serve` workers, http:// or
 *                 https://; copied. NULL when n_urls is 0
 * @param n_urls   at most 64; 0 empties the set
 * @return RLP_OK; RLP_E_STATE (the trainer has no remote workers);
 *         RLP_E_INVALID_ARG (a URL at fault, or more than 64; nothing
 *         changed); RLP_E_NOMEM; an error of either set_urls (the engine's
 *         set may then be the new one and the synchronizer's the old).
 * Thread-safe: may be called from any thread while another one runs
 * rlp_trainer_step() (the swarm's coordinator does), not concurrently with
 * rlp_trainer_free().
 */
RLP_API int rlp_trainer_set_worker_urls(rlp_trainer *trainer, const char *const *urls, size_t n_urls);

/**
 * Per-worker counters of a trainer with remote workers: its rollout
 * engine's rlp_rollout_engine_server_stats() (requests, completions,
 * tokens, last weight_version, staleness), one entry per worker that was
 * ever in its set.
 *
 * @param[out] out    (cap) entries, the first min(cap, count) filled; may be NULL when cap is 0
 * @param cap         room in @p out
 * @param[out] n_out  the count of workers (may exceed @p cap)
 * @param trainer     the trainer
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_STATE (no remote workers).
 * Thread-safe, like rlp_trainer_set_worker_urls().
 */
RLP_API int rlp_trainer_server_stats(rlp_server_stats *out, size_t cap, size_t *n_out, const rlp_trainer *trainer);

/** Stops (if running) and frees. NULL is a no-op. */
RLP_API void rlp_rollout_worker_free(rlp_rollout_worker *worker);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_TRAINER_H */
