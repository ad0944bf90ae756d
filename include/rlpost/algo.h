/**
 * @file rlpost/algo.h
 * @brief librlpost: RL algorithms: advantages, policy losses, KL, aggregation, the RL step.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_ALGO_H
#define RLPOST_ALGO_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* RL algorithms: advantages, policy losses, KL, aggregation, the RL step    */
/* ------------------------------------------------------------------------ */

/** Advantage estimators (values fixed). G = samples of a group, r = their rewards. */
typedef enum rlp_advantage {
    RLP_ADV_GRPO = 0,           /**< (rᵢ − mean r)/(std r + ε) (Shao et al. 2024, DeepSeekMath §4.1.2); std
                                     is the unbiased sample std, as torch.std */
    RLP_ADV_DR_GRPO = 1,        /**< rᵢ − mean r (Liu et al. 2025, "Understanding R1-Zero-Like Training") */
    RLP_ADV_RLOO = 2,           /**< rᵢ − Σ_{j≠i} r_j/(G−1) (Ahmadian et al. 2024) */
    RLP_ADV_REINFORCE_PP = 3,   /**< REINFORCE++ (Hu 2025): per-token reward −β·KLₜ (k1 against π_ref, if a
                                     reference is given and kl_in_reward) plus r at the last token,
                                     return-to-go with discount γ, normalised over the whole batch */
    RLP_ADV_REINFORCE = 4,      /**< rᵢ for every token: no baseline, no normalisation */
    RLP_ADV_GAE = 5             /**< PPO with a critic: GAE(γ, λ) (Schulman et al. 2016, arXiv:1506.02438) over
                                     the model tokens with per-token reward r_t = −β·KLₜ (as REINFORCE++, with
                                     kl_in_reward) plus r at the last token, V(s_t) from the critic, then the
                                     whole-batch normalisation (whiten); returns = A + V train the critic.
                                     Needs a critic's values: the trainer runs one
                                     (rlp_trainer_options::critic_path); rlp_policy_train_rl() and
                                     rlp_rl_advantages() refuse it */
} rlp_advantage;

/** Policy losses (values fixed). ρ = exp(log π_θ − log π_old); Â the advantage. */
typedef enum rlp_policy_loss {
    RLP_LOSS_PPO_CLIP = 0,       /**< −min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â) (Schulman et al. 2017; clip-higher:
                                      DAPO, Yu et al. 2025), optional dual clip for Â < 0: min(that, −cÂ)
                                      (Ye et al. 2020); π_old = π_prox (recomputed at the start of the
                                      step); with tis_cap > 0 multiplied by min(π_old/π_behav, C) (truncated
                                      importance sampling against the rollout's logprobs) */
    RLP_LOSS_DECOUPLED_PPO = 1,  /**< AReaL (Fu et al. 2025, eq. 5): −w·min(ρÂ, clip(ρ)Â) with ρ against
                                      π_prox and w = π_prox/π_behav, truncated at behav_cap (or masked
                                      above it); π_behav = π_prox gives PPO-clip exactly */
    RLP_LOSS_GSPO = 2,           /**< GSPO (Zheng et al. 2025): sequence ratio sᵢ = exp(mean_t(log π_θ −
                                      log π_old)), −min(sᵢÂᵢ, clip(sᵢ)Âᵢ) for every token of sequence i */
    RLP_LOSS_CISPO = 3,          /**< CISPO (MiniMax-M1, arXiv:2506.13585, eq. 4–5; verl's "cispo"):
                                      −sg(clip(ρ, 1−ε_low, 1+ε_high))·Â·log π_θ per token, ρ = exp(clamp(
                                      log π_θ − log π_old, ±20)): the weight is clipped, never the gradient,
                                      so every token keeps its REINFORCE gradient −clip(ρ)·Â; tis_cap
                                      applies as for PPO_CLIP */
    RLP_LOSS_GMPO = 4,           /**< GMPO (Zhao et al. 2025, arXiv:2507.20673; verl's "geo_mean"):
                                      rᵢ = exp(mean_t mₜ) with mₜ = min(xₜ, clamp(xₜ, −ε_low, ε_high)) for Âₜ >
                                      0, max(…) for Âₜ < 0, 0 for Âₜ = 0, xₜ = log π_θ − log π_old (the clip
                                      range in log space); −mean_t(Âₜ)·rᵢ for every token of sequence i */
    RLP_LOSS_GPG = 5,            /**< GPG (Chu et al. 2025, arXiv:2504.02546; verl's "gpg"): −Â·log π_θ per
                                      token, no ratio and no clip (REINFORCE on the step's samples); tis_cap
                                      applies as for PPO_CLIP */
    RLP_LOSS_SAPO = 6,           /**< SAPO (Gao et al. 2025, arXiv:2511.20347, eq. 5–6; verl's "sapo"): −f(ρ)·Â
                                      per token with the soft gate f(ρ) = σ(τ(ρ − 1))·4/τ, τ = sapo_tau_pos for
                                      Â > 0 and sapo_tau_neg otherwise, ρ = exp(clamp(log π_θ − log π_old, ±20));
                                      f′(1) = 1, so on-policy it is the plain policy gradient, and the gradient
                                      fades smoothly off-policy instead of being cut. Aggregated
                                      seq-mean-token-mean whatever loss_agg says (the paper's objective; verl
                                      does the same); tis_cap applies as for PPO_CLIP */
    RLP_LOSS_CLIP_COV = 7,       /**< Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning
                                      LMs", arXiv:2505.22617, §4; verl's "clip_cov"): PPO-clip, but of the
                                      tokens whose ratio is not clipped and whose centred covariance
                                      (Âₜ − mean Â)(log π_θ − mean log π_θ) lies in (clip_cov_lb, clip_cov_ub),
                                      ⌊clip_cov_ratio·N⌋ (≥ 1) get no gradient (N the mini-batch's tokens) */
    RLP_LOSS_KL_COV = 8          /**< KL-Cov (same paper; verl's "kl_cov"): −ρÂ per token (no clip), and the
                                      ⌊kl_cov_ratio·N⌋ (≥ 1) tokens of largest covariance get
                                      + ppo_kl_coef·|log π_θ − log π_old| added */
} rlp_policy_loss;

/** Levels of the rollout correction (verl's rollout_is / rollout_rs; values fixed). The weight compares
 *  the trainer with the rollout: wₜ = π_old/π_behav per token (log-ratio clamped to ±20 before exp). */
typedef enum rlp_is_level {
    RLP_IS_OFF = 0,
    RLP_IS_TOKEN = 1,      /**< each token its own wₜ */
    RLP_IS_SEQUENCE = 2,   /**< the product Πₜ wₜ for every token of the sequence (exp of the summed log-ratio) */
    RLP_IS_GEOMETRIC = 3   /**< the geometric mean exp(meanₜ log wₜ) (rejection only) */
} rlp_is_level;

/** How the whole-batch advantage normalisation (REINFORCE++, adv_batch_norm) divides (values fixed). */
typedef enum rlp_whiten {
    RLP_WHITEN_POPULATION = 0, /**< (x − μ)/(σ + ε), σ² = Σ(x − μ)²/N (OpenRLHF's REINFORCE++) */
    RLP_WHITEN_UNBIASED = 1    /**< (x − μ)/√(s² + 1e-8), s² = Σ(x − μ)²/(N − 1) (verl's masked_whiten) */
} rlp_whiten;

/** KL estimators of KL(π_θ‖π_ref) per token, x = log π_θ − log π_ref (values fixed; Schulman 2020,
 *  "Approximating KL divergence"; the names and clamps of verl's kl_penalty). */
typedef enum rlp_kl_estimator {
    RLP_KL_K1 = 1,  /**< x ("kl", "k1") */
    RLP_KL_K2 = 2,  /**< ½x² ("mse", "k2") */
    RLP_KL_K3 = 3,  /**< exp(y) − y − 1 with y = clamp(−x, −20, 20), the value clamped to [−10, 10]
                         ("low_var_kl", "k3"): a token far off π_ref adds at most 10 and, past a clamp,
                         no gradient */
    RLP_KL_ABS = 4  /**< |x| ("abs"); gradient sign(x), 0 at x = 0 */
} rlp_kl_estimator;

/** How per-token losses ℓ combine into the step loss (verl's names; values fixed). The normaliser
 *  is taken over the whole step, so micro-batching never changes the gradient (public-bugs case #9). */
typedef enum rlp_loss_agg {
    RLP_AGG_TOKEN_MEAN = 0,              /**< Σ ℓ / Σ tokens */
    RLP_AGG_SEQ_MEAN_TOKEN_SUM = 1,      /**< (1/S) Σᵢ Σₜ ℓ */
    RLP_AGG_SEQ_MEAN_TOKEN_MEAN = 2,     /**< (1/S) Σᵢ (1/|yᵢ|) Σₜ ℓ */
    RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 3  /**< Σᵢ Σₜ ℓ / (S·C), C = agg_norm_constant (Dr.GRPO) */
} rlp_loss_agg;

/** Version of rlp_rl_options understood by this header. 2 added the fields after temperature; a
 *  version-1 caller's struct ends before them (they keep their defaults). */
#define RLP_RL_OPTIONS_VERSION 2

/** Everything one RL step is made of. */
typedef struct rlp_rl_options {
    uint32_t version;            /**< RLP_RL_OPTIONS_VERSION */
    int32_t advantage;           /**< rlp_advantage; default GRPO */
    float adv_eps;               /**< ε of GRPO's denominator; default 1e-6 */
    int32_t adv_batch_norm;      /**< 1: GRPO/RLOO/Dr.GRPO advantages are further normalised over the batch */
    float gamma;                 /**< REINFORCE++ discount; default 1 */
    int32_t filter_equal_groups; /**< 1: drop groups whose rewards are all equal (DAPO dynamic sampling) */
    int32_t policy_loss;         /**< rlp_policy_loss; default PPO_CLIP */
    float clip_low, clip_high;   /**< ε_low, ε_high; default 0.2, 0.2 */
    float dual_clip;             /**< c > 1 for the dual clip; 0 = off */
    float tis_cap;               /**< PPO_CLIP: truncated-IS cap C on π_old/π_behav; 0 = off */
    float behav_cap;             /**< DECOUPLED_PPO: cap on w = π_prox/π_behav; 0 = no cap */
    int32_t behav_mask;          /**< DECOUPLED_PPO: 1 = tokens with w > behav_cap get weight 0 instead of the cap */
    int32_t kl_estimator;        /**< rlp_kl_estimator, or 0 = no KL */
    float kl_coef;               /**< β */
    int32_t kl_in_reward;        /**< 1: KL goes into the REINFORCE++ per-token reward; 0: into the loss */
    float entropy_coef;          /**< loss −= coef·entropy (an entropy bonus) */
    int32_t loss_agg;            /**< rlp_loss_agg; default TOKEN_MEAN */
    float agg_norm_constant;     /**< C of SEQ_MEAN_TOKEN_SUM_NORM; 0 = the longest completion of the step */
    uint32_t overlong_max;       /**< DAPO soft overlong penalty L_max (tokens); 0 = off */
    uint32_t overlong_cache;     /**< DAPO L_cache: penalty 0 up to L_max − L_cache, linear to −1 at L_max, −1 beyond */
    uint32_t ppo_epochs;         /**< passes over the batch; default 1 */
    uint32_t mini_batches;       /**< optimizer steps per pass (groups split evenly); default 1 */
    uint32_t micro_batch_tokens; /**< tokens per forward/backward; 0 = a mini-batch at once */
    float temperature;           /**< logprobs at this T; 0 = the trajectories' own (must agree), greedy → 1 */
    /* (version 2) */
    float sapo_tau_pos;          /**< SAPO τ for Â > 0; default 1.0 (verl's tau_pos) */
    float sapo_tau_neg;          /**< SAPO τ for Â ≤ 0; default 1.05 (verl's tau_neg) */
    int32_t whiten;              /**< rlp_whiten of the whole-batch normalisation; default POPULATION */
    int32_t rollout_is;          /**< rlp_is_level TOKEN or SEQUENCE: the policy loss of every token is
                                      multiplied by min(w, rollout_is_threshold) (a constant, no gradient;
                                      verl's rollout correction, Liu, Li et al. 2025, "When Speed Kills
                                      Stability"); OFF (default). Not with tis_cap or DECOUPLED_PPO, which
                                      weigh by π_old/π_behav already */
    float rollout_is_threshold;  /**< truncation of the IS weight; default 2 */
    int32_t rollout_is_batch_normalize; /**< 1: the truncated weights are divided by their mean over the
                                      step (tokens, or sequences for SEQUENCE) */
    int32_t rollout_rs;          /**< rlp_is_level: rejection sampling: tokens (TOKEN) or whole sequences
                                      (SEQUENCE, GEOMETRIC) whose weight lies outside [rollout_rs_threshold_lower,
                                      rollout_rs_threshold] get no loss and do not count in the aggregation;
                                      OFF (default) */
    float rollout_rs_threshold;  /**< upper bound; default 2 */
    float rollout_rs_threshold_lower; /**< lower bound; 0 (default) = 1/rollout_rs_threshold */
    float rollout_token_veto;    /**< > 0: a sequence with a token of weight below this is rejected whole
                                      (verl's rollout_token_veto_threshold); 0 = off */
    int32_t overlong_filter;     /**< 1: a completion cut by the length limit (finish reason LENGTH) gets no
                                      loss (DAPO's overlong filtering, Yu et al. 2025 §3.4); its reward
                                      still counts in its group's statistics */
    float clip_cov_ratio;        /**< CLIP_COV: share of tokens detached; default 0.0002 */
    float clip_cov_lb, clip_cov_ub; /**< CLIP_COV: covariance window; default 1, 5 */
    float kl_cov_ratio;          /**< KL_COV: share of tokens penalised; default 0.0002 */
    float ppo_kl_coef;           /**< KL_COV: coefficient of |log-ratio|; default 1 */
} rlp_rl_options;

#define RLP_RL_OPTIONS_INIT                                                                          \
    { RLP_RL_OPTIONS_VERSION, RLP_ADV_GRPO, 1e-6f, 0, 1.0f, 0, RLP_LOSS_PPO_CLIP, 0.2f, 0.2f, 0.0f, \
      0.0f, 0.0f, 0, 0, 0.0f, 0, 0.0f, RLP_AGG_TOKEN_MEAN, 0.0f, 0, 0, 1, 1, 0, 0.0f,             \
      1.0f, 1.05f, RLP_WHITEN_POPULATION, RLP_IS_OFF, 2.0f, 0, RLP_IS_OFF, 2.0f, 0.0f, 0.0f, 0,    \
      0.0002f, 1.0f, 5.0f, 0.0002f, 1.0f }

/** Fills @p opts with the defaults: all of it for the current version, the fields up to temperature
 *  for version 1 (an older caller's shorter struct). RLP_OK or RLP_E_INVALID_ARG. Every function that
 *  takes an rlp_rl_options reads version 1 and 2. */
RLP_API int rlp_rl_options_init(rlp_rl_options *opts, uint32_t version);

/**
 * Checks RL options as rlp_policy_train_rl() and rlp_trainer_create() will
 * (ranges, enum values, options that contradict each other), without a
 * policy or a batch, so that a host can refuse a configuration before it
 * starts anything. Reads versions 1 and 2. Pure; any thread.
 * @return RLP_OK; RLP_E_INVALID_ARG with a message naming the field
 *         ("RL options: rollout_is and tis_cap both weigh …"; rlp_error_last())
 */
RLP_API int rlp_rl_options_check(const rlp_rl_options *opts);

/** Statistics of one RL step (over all its optimizer steps; means over scored tokens unless said). */
typedef struct rlp_rl_stats {
    uint32_t version;               /**< set by the library (1) */
    double loss, pg_loss, kl, entropy;
    double clip_frac_low, clip_frac_high;   /**< fraction of tokens whose ratio was clipped below / above */
    double ratio_mean, ratio_max;
    double behav_weight_mean, behav_weight_max;
    double grad_norm;               /**< before clipping, of the last optimizer step */
    double adv_mean, adv_std;       /**< over scored tokens */
    double reward_mean;             /**< over the trajectories used */
    double staleness_mean, staleness_max;   /**< policy version before the step − trajectory version, in RL
                                                 steps (versions count RL steps) */
    uint64_t n_seqs, n_tokens;      /**< used */
    uint64_t n_groups, filtered_groups, zero_std_groups, invalid_seqs;
    uint32_t optimizer_steps, skipped_steps;
    uint64_t policy_version;        /**< after the step: the version before it + 1 */
    double seconds;
} rlp_rl_stats;

/**
 * One RL step on a scored batch: drops invalid trajectories (counted),
 * computes advantages per group (grouped by group_id), π_prox (and π_ref
 * when @p ref and a KL are given) with the current weights, then runs
 * ppo_epochs × mini_batches optimizer steps of the chosen loss, each with
 * gradient accumulation over micro-batches, clipping and AdamW. The
 * policy version grows by exactly one per successful call, whether the
 * step applied ppo_epochs × mini_batches optimizer steps or none (every
 * group filtered, every sample invalid, every update skipped for a
 * non-finite gradient): versions count RL steps, so a staleness gate of B
 * groups per version (rlp_sync_options) takes B = the groups of one step.
 * The optimizer's update count (learning-rate schedule, AdamW bias
 * correction) still counts optimizer steps. A call that fails after an
 * update was applied also advances the version (the weights changed);
 * one that fails before leaves it.
 *
 * @param policy  a trainable policy
 * @param batch   scored trajectories (rewards set, e.g. by rlp_reward_fn_score)
 * @param ref     frozen reference policy for the KL, or NULL; or @p policy
 *                itself when it has LoRA adapters (rlp_policy_enable_lora):
 *                the reference is then its frozen base with the adapters
 *                off, and no second copy of the model is needed
 * @param opts    options or NULL
 * @param[out] stats  may be NULL
 * @return RLP_OK; RLP_E_INVALID_ARG (bad options, an unscored trajectory, a
 *         missing reference for a KL, mixed temperatures); RLP_E_STATE (frozen
 *         policy); RLP_E_NOMEM. When every group is filtered out nothing is
 *         applied, stats say so and the version still advances (RLP_OK).
 */
RLP_API int rlp_policy_train_rl(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                                const rlp_rl_options *opts, rlp_rl_stats *stats);

/**
 * The advantage each trajectory of a scored batch gets from the estimator
 * of rlp_policy_train_rl() with the same options: the same selection
 * (valid trajectories with prompt and completion tokens; groups by
 * group_id), reward shaping (overlong penalty) and formula (GRPO, Dr.GRPO,
 * RLOO, REINFORCE, REINFORCE++ with its batch normalisation; see
 * rlp_advantage), for logs and completion tables. The value is the
 * advantage at the trajectory's first completion token (the whole
 * sequence's for outcome estimators); 0 for a completion the overlong
 * filter takes out of the loss. What needs the trainer's logprobs is not
 * included: the KL shaping of kl_in_reward (π_ref) and the rollout
 * correction's rejection (π_prox). Pure: reads the batch
 * only; any number of threads may call it on one batch.
 *
 * @param[out] out  (n) advantages, float; NaN for a trajectory the step
 *                  would drop (invalid, or no prompt or completion tokens)
 * @param n     must equal the batch's size
 * @param batch scored trajectories
 * @param opts  RL options (NULL: defaults)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL batch, n ≠ size, bad options, a
 *         valid trajectory without a reward); RLP_E_NOMEM.
 */
RLP_API int rlp_rl_advantages(float *out, size_t n, const rlp_batch *batch, const rlp_rl_options *opts);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_ALGO_H */
