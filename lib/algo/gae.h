/* Generalized Advantage Estimation for PPO with a critic (Schulman et al.
 * 2016, arXiv:1506.02438, eqs. 11-16) on host arrays, with the multi-turn
 * loss mask. Pure function, no model, no allocation: the caller has already
 * shaped the per-token rewards and evaluated the critic, and applies the
 * advantage whitening (the existing whiten option) afterwards. */
#ifndef RLPI_ALGO_GAE_H
#define RLPI_ALGO_GAE_H

#include "rlpost.h"

#include <stddef.h>
#include <stdint.h>

/* Per-sequence token arrays indexed through tok_start, like rlpi_rl_seqs in
 * algo/rl_math.h. */
typedef struct rlpi_gae_seqs {
    size_t n_seqs;
    const size_t *tok_start;   /* (n_seqs + 1) */
    const float *token_reward; /* (n_tokens) per-token reward r_t (the outcome reward already placed at the last
                                  model token, KL shaping already subtracted by the caller), NOT NULL */
    const float *values;       /* (n_tokens) V(s_t) from the critic at each token, NOT NULL */
    const uint8_t *mask;       /* (n_tokens) 1 = model token, 0 = observation token of a multi-turn episode;
                                  NULL = all model tokens */
    const float *bootstrap;    /* (n_seqs) V of the state after the last token for a TRUNCATED episode, or
                                  NULL = every episode terminal (value 0 after its last token) */
} rlpi_gae_seqs;

/* Advantages and returns (n_tokens each) of every sequence, backwards over
 * its model tokens t:
 *     δ_t = r_t + γ·V_next − V_t,   A_t = δ_t + γλ·A_next,   R_t = A_t + V_t
 * where V_next, A_next are those of the next model token of the same
 * sequence and, after its last model token, V_next = bootstrap[i] (0 when
 * bootstrap is NULL) and A_next = 0. Sums run in double; γ = λ = 1 gives the
 * Monte Carlo A_t = G_t − V_t, λ = 0 the one-step TD error.
 *
 * A masked token (mask 0) gets exactly 0 in both outputs, and the recursion
 * passes over it: its reward and value are not read, no discount is applied
 * across it. A sequence without model tokens gets zeros only.
 *
 * Conventions against the frameworks (read, not copied):
 * - verl compute_gae_advantage_return (verl/trainer/ppo/core_algos.py):
 *   same recursion and same multi-turn rule (nextvalues and lastgaelam carried
 *   unchanged over response_mask 0, an observation token's reward and TD error
 *   discarded), same returns = advantages + values, episode terminal
 *   (nextvalues 0 after the end, no bootstrap). Differences: verl leaves the
 *   carried-over lastgaelam (not 0) at masked positions and relies on the loss
 *   mask, and whitens the advantages inside the function (masked_whiten);
 *   here masked outputs are 0 and no whitening is done.
 * - OpenRLHF get_advantages_and_returns (openrlhf/trainer/ppo_utils/
 *   experience_maker.py): same δ/A recursion and returns = advantages +
 *   values, terminal at the end of the response, rewards with the KL shaping
 *   and the outcome at the last token built beforehand (compute_reward), as
 *   here. Its action_mask only zeroes values and rewards and the recursion
 *   still steps through masked positions (discounting γλ across them, right
 *   for trailing padding only); here masked tokens are skipped, which agrees
 *   with OpenRLHF on trailing padding and with verl on observations in the
 *   middle. Whitening is done by OpenRLHF's caller, as by ours.
 * - Neither bootstraps a truncated episode; bootstrap[] adds that (eq. 11
 *   with V(s_{T}) of the state after the cut instead of 0).
 *
 * Validates everything before writing anything. Returns RLP_OK, or
 * RLP_E_INVALID_ARG (with rlp_error_last()) for NULL s, tok_start,
 * token_reward, values or outputs, a decreasing tok_start, γ or λ outside
 * [0, 1] (NaN included), or a non-finite reward, value or bootstrap (checked
 * on every token, masked ones too: a NaN is a bug upstream wherever it is).
 * Thread-safe (touches only its arguments). */
int rlpi_gae(const rlpi_gae_seqs *s, float gamma, float lambda, float *advantages, float *returns);

#endif
