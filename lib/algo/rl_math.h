/* The RL formulas on host arrays: advantage estimators and per-token policy
 * losses with their gradients, aggregated with step-level normalisers.
 * Pure functions, no model: the RL step (rl_step.c) feeds them logprobs,
 * and the tests compare them with a PyTorch reference written from the
 * papers (tests/reference/make_rl_fixtures.py). */
#ifndef RLPI_ALGO_RL_MATH_H
#define RLPI_ALGO_RL_MATH_H

#include "rlpost.h"

#include <stddef.h>
#include <stdint.h>

/* One optimizer step's sequences; per-token arrays are indexed through
 * tok_start (completion tokens only). */
typedef struct rlpi_rl_seqs {
    size_t n_seqs;
    const size_t *tok_start;     /* (n_seqs + 1) */
    const uint64_t *group;       /* (n_seqs) */
    const float *reward;         /* (n_seqs) scalar rewards after shaping */
    const float *token_reward;   /* (n_tokens) process rewards (REINFORCE++ only), or NULL */
    const float *logp_old;       /* (n_tokens) π_old = π_prox */
    const float *logp_behav;     /* (n_tokens) rollout logprobs */
    const float *logp_ref;       /* (n_tokens) or NULL */
    const uint8_t *mask;         /* (n_tokens) loss mask: 1 a model token, 0 an observation token of a
                                    multi-turn episode (context only: no advantage, loss, gradient or
                                    count); NULL = every token is the model's */
    const uint8_t *keep;         /* (n_tokens) 0: a model token rejected by the rollout correction or the
                                    overlong filter (rlpi_rl_reject), from then on treated as the
                                    observations are; NULL = none rejected */
    /* GAE (RLP_ADV_GAE) only: the critic's V(s_t) per token and λ in; the
     * returns A + V out (0 where a token does not train) */
    const float *values;         /* (n_tokens) */
    float gae_lambda;
    float *returns;              /* (n_tokens) */
} rlpi_rl_seqs;

/* Whether token t (an index into the per-token arrays) is the model's. */
static inline int rlpi_rl_model(const rlpi_rl_seqs *s, size_t t)
{
    return !s->mask || s->mask[t];
}

/* Whether token t is a model token that trains (not rejected). */
static inline int rlpi_rl_on(const rlpi_rl_seqs *s, size_t t)
{
    return (!s->mask || s->mask[t]) && (!s->keep || s->keep[t]);
}

/* Model tokens (mask 1) of sequence i. */
static inline size_t rlpi_rl_model_tokens(const rlpi_rl_seqs *s, size_t i)
{
    size_t n = 0;
    for (size_t t = s->tok_start[i]; t < s->tok_start[i + 1]; t++)
        n += (size_t)rlpi_rl_on(s, t);
    return n;
}

typedef struct rlpi_adv_info {
    size_t n_groups, zero_std_groups;
} rlpi_adv_info;

/* Advantages per token (n_tokens). Groups are sequences sharing a group id,
 * in any order. A group whose rewards are all equal gets exactly 0
 * (public-bugs case #8), whatever the estimator's denominator. A masked
 * token (s->mask 0) gets exactly 0 and counts nowhere: not in the batch
 * normalisation's mean and std, not as a step of REINFORCE++'s return
 * (no discount across it, its token_reward and KL ignored; the outcome
 * reward sits at the last model token). */
int rlpi_rl_advantages(const rlp_rl_options *o, const rlpi_rl_seqs *s, float *adv, rlpi_adv_info *info);

/* The same without the whole-batch normalisation (x − μ)/(σ + ε), σ the
 * population std over all tokens: *norm_eps receives the ε the estimator
 * asks for (REINFORCE++, or adv_batch_norm), or −1 for none. For the
 * data-parallel RL step, whose batch is spread over ranks. */
int rlpi_rl_advantages_unnormalised(const rlp_rl_options *o, const rlpi_rl_seqs *s, float *adv,
                                    rlpi_adv_info *info, double *norm_eps);

/* The divisor of the whole-batch advantage normalisation (rlp_whiten)
 * from Σ(x − μ)² over m tokens and the estimator's ε. */
double rlpi_whiten_divisor(int whiten, double sq_dev, double m, double eps);

/* Accumulated loss statistics (sums; the step divides). */
typedef struct rlpi_rl_acc {
    double loss, pg, kl, ent;
    double n_tokens, clip_lo, clip_hi, ratio_sum, ratio_max, w_sum, w_max;
} rlpi_rl_acc;

/* Step-level normalisers of the aggregation: sequences with a token that
 * trains, such tokens, and the constant of seq-mean-token-sum-norm; the
 * divisor of the rollout IS weights (1, or their batch mean with
 * rollout_is_batch_normalize: rlpi_rl_is_divisor); and, for CLIP_COV and
 * KL_COV, the tokens chosen by covariance (rlpi_rl_cov_select; indexed like
 * the per-token arrays, NULL for the other losses). */
typedef struct rlpi_rl_norm {
    double step_seqs, step_tokens, norm_c;
    double is_div;
    const uint8_t *cov_pick;
} rlpi_rl_norm;

/* Loss over the sequences seq_index[0..n) of s (a micro-batch), whose
 * current logprobs/entropies are the micro-batch arrays logp/entropy laid
 * out by mb_start (n + 1). Writes ∂L/∂logp and ∂L/∂entropy there and adds
 * this micro-batch's share of the step loss to acc. Masked tokens are
 * context only: their gradients are written as 0, they add nothing to acc
 * (n_tokens, clip and ratio statistics count model tokens), and a
 * sequence's length in the aggregation and GSPO's mean log-ratio is its
 * number of model tokens. */
int rlpi_rl_loss(const rlp_rl_options *o, const rlpi_rl_seqs *s, const float *adv, const size_t *seq_index,
                 size_t n, const size_t *mb_start, const float *logp, const float *entropy,
                 const rlpi_rl_norm *norm, float *dlogp, float *dentropy, rlpi_rl_acc *acc);

/* DAPO soft overlong penalty (Yu et al. 2025, eq. 13) for a completion of
 * `len` tokens: 0 up to L_max − L_cache, then (L_max − L_cache − len)/L_cache
 * down to −1 at L_max, −1 beyond. 0 when L_max is 0. */
float rlpi_overlong_penalty(uint32_t len, uint32_t l_max, uint32_t l_cache);

/* The rollout correction's weight at @p level, before truncation:
 * exp(clamp(x, ±20)) with x = log π_old − log π_behav of token t (TOKEN),
 * or x summed over sequence seq's model tokens (SEQUENCE) or averaged
 * (GEOMETRIC; t is not read for those two: O(sequence length), call it
 * once per sequence). */
double rlpi_rl_is_raw(int level, const rlpi_rl_seqs *s, size_t seq, size_t t);

/* The sum and count of the truncated rollout IS weights over the step's
 * model tokens (TOKEN) or its sequences (SEQUENCE), and the divisor verl's
 * rollout_is_batch_normalize makes of them (summed over ranks first):
 * their mean, or 1 when off, empty or below 1e-8. */
void rlpi_rl_is_batch_sum(const rlp_rl_options *o, const rlpi_rl_seqs *s, double *sum, double *n);
double rlpi_rl_is_divisor(const rlp_rl_options *o, double sum, double n);

/* Rollout rejection (verl's rollout_rs and rollout_token_veto_threshold):
 * keep[t] = 0 for the model tokens rejected, 1 otherwise (s->keep is not
 * read). What it rejected goes into *info. */
typedef struct rlpi_reject_info {
    uint64_t model_tokens, rejected_tokens, seqs, rejected_seqs, vetoed_seqs;
} rlpi_reject_info;
void rlpi_rl_reject(const rlp_rl_options *o, const rlpi_rl_seqs *s, uint8_t *keep, rlpi_reject_info *info);

/* CLIP_COV / KL_COV: pick[t] = 1 for the tokens of sequences [b, e) of s
 * that the loss treats apart, by the centred covariance
 * (Âₜ − mean Â)(log π_old − mean log π_old) over their tokens that train:
 * KL_COV the ⌊kl_cov_ratio·N⌋ (≥ 1) largest; CLIP_COV ⌊clip_cov_ratio·N⌋
 * (≥ 1) of those inside (clip_cov_lb, clip_cov_ub), drawn with @p seed when
 * more qualify. */
void rlpi_rl_cov_select(const rlp_rl_options *o, const rlpi_rl_seqs *s, const float *adv, size_t b, size_t e,
                        uint64_t seed, uint8_t *pick);

/* Validates an options struct (ranges, enums); RLP_E_INVALID_ARG naming the field. */
int rlpi_rl_options_check(const rlp_rl_options *o);

#endif
