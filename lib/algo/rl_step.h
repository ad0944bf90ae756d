/* The RL step's internal entry (rl_step.c) for the trainer: the public
 * rlp_policy_train_rl plus the behaviour/trainer mismatch of the step's
 * tokens, which the per-step metrics report. */
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
 * Non-finite d_t are left out. On a data-parallel step: this rank's tokens. */
typedef struct rlpi_rl_mismatch {
    uint64_t n_tokens;
    double kl, is_mean, is_min, is_max, abs_mean;
} rlpi_rl_mismatch;

/* rlp_policy_train_rl, filling *mm (may be NULL) as well. */
int rlpi_policy_train_rl(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                         const rlp_rl_options *opts, rlp_rl_stats *stats, rlpi_rl_mismatch *mm);

#endif
