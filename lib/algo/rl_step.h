/* Internal entries of the RL step (rl_step.c): the trainer's entry, which
 * also reports the behaviour/trainer mismatch of the step's tokens for the
 * per-step metrics, and hooks for tests and benchmarks that compare the
 * step that reuses the training forward's logprobs as π_prox with the step
 * that recomputes them (nothing else should set them). */
#ifndef RLPI_ALGO_RL_STEP_H
#define RLPI_ALGO_RL_STEP_H

#include "rlpost.h"

#include <stdint.h>

/* Per token t of the step's model tokens (loss mask 1) with d_t =
 * logp_trainer − logp_behaviour (π_prox at the step's start, the
 * behaviour logprob recorded at generation) and w_t = exp(d_t), the
 * importance weight of the trainer's policy over the behaviour policy:
 *   kl       = mean (w_t − 1 − d_t), the k3 estimate of KL(π_behav ‖ π_trainer)
 *              (≥ 0; the tokens were drawn from π_behav);
 *   is_mean, is_min, is_max of w_t; abs_mean = mean |d_t|.
 * Non-finite d_t are left out. On a data-parallel step: this rank's tokens.
 * When π_prox has no forward of its own (rlpi_rl_force_prox_forward), the
 * training forward's logprobs are π_prox: the same numbers. */
typedef struct rlpi_rl_mismatch {
    uint64_t n_tokens;
    double kl, is_mean, is_min, is_max, abs_mean;
    /* The rollout correction at rl.rollout_is's level (all 1 / 0 when off):
     * w before truncation (mean over model tokens, a sequence's w counted
     * at each of its tokens as verl does; min and max), the share of
     * tokens (TOKEN) or sequences (SEQUENCE) with w > the threshold, and
     * the effective sample size 1/mean((w'/mean w')²) of w' = w clamped to
     * [1/threshold, threshold] (verl's rollout_is_eff_sample_size). */
    double corr_is_mean, corr_is_min, corr_is_max, corr_is_truncated, corr_is_ess;
    /* rejection: model tokens and sequences rejected (rollout_rs and the
     * veto; the overlong filter counted apart), sequences vetoed */
    uint64_t rs_tokens, rs_rejected_tokens, rs_seqs, rs_rejected_seqs, rs_vetoed_seqs, overlong_filtered;
} rlpi_rl_mismatch;

/* rlp_policy_train_rl, filling *mm (may be NULL) as well. */
int rlpi_policy_train_rl(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                         const rlp_rl_options *opts, rlp_rl_stats *stats, rlpi_rl_mismatch *mm);

/* What PPO with a critic (RLP_ADV_GAE) adds to a step: the critic's values
 * of every batch item's completion tokens in, the GAE returns out (what
 * the critic then trains on). Flat arrays over the batch's items in
 * order, item i's completion tokens at [item_start[i], item_start[i+1]). */
typedef struct rlpi_rl_critic_io {
    const size_t *item_start; /* (batch size + 1) */
    const float *values;      /* V(s_t), in */
    float lambda;             /* GAE's λ */
    float *returns;           /* out: A + V of each token that trained; 0 elsewhere (observations, rejected
                                 tokens, items the step did not use) */
    uint8_t *item_used;       /* out, (batch size): 1 for the items the step trained on */
    int advantages_only;      /* 1: advantages and returns only, no optimizer step (the critic's warm-up);
                                 the version still advances, as for a step without updates */
} rlpi_rl_critic_io;

/* rlpi_policy_train_rl with a critic's values (NULL: as without). */
int rlpi_policy_train_rl_critic(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                                const rlp_rl_options *opts, rlp_rl_stats *stats, rlpi_rl_mismatch *mm,
                                const rlpi_rl_critic_io *critic);

/* 1: every RL step runs the separate π_prox forward (the behaviour before
 * the reuse); 0 (the default): it is skipped where the training forward
 * gives the same logprobs (one epoch, one mini-batch, no consumer of π_prox
 * before training). Process-wide; set it while no step runs. */
void rlpi_rl_force_prox_forward(int on);

/* π_prox forward passes (rlp_policy_logprobs over a step's batch) run by
 * RL steps in this process so far; π_ref passes are not counted. */
uint64_t rlpi_rl_prox_forwards(void);

#endif
