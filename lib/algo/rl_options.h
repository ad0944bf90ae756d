/* rlp_rl_options across its versions. Version 2 appended fields, so a
 * version-1 caller's struct is the current one cut before sapo_tau_pos;
 * that layout is frozen here because rlp_trainer_options of versions 1–3
 * embeds it by value, and the fields after it sit where a version-1 rl
 * ends (lib/train/trainer_options.c converts those). Every entry that
 * takes an rlp_rl_options reads it through rlpi_rl_options_upgrade. */
#ifndef RLPI_ALGO_RL_OPTIONS_H
#define RLPI_ALGO_RL_OPTIONS_H

#include "rlpost.h"

#include <stddef.h>

/* The version-1 layout of rlp_rl_options (librlpost before 0.36), frozen. */
typedef struct rlpi_rl_options_v1 {
    uint32_t version;
    int32_t advantage;
    float adv_eps;
    int32_t adv_batch_norm;
    float gamma;
    int32_t filter_equal_groups;
    int32_t policy_loss;
    float clip_low, clip_high;
    float dual_clip;
    float tis_cap;
    float behav_cap;
    int32_t behav_mask;
    int32_t kl_estimator;
    float kl_coef;
    int32_t kl_in_reward;
    float entropy_coef;
    int32_t loss_agg;
    float agg_norm_constant;
    uint32_t overlong_max;
    uint32_t overlong_cache;
    uint32_t ppo_epochs;
    uint32_t mini_batches;
    uint32_t micro_batch_tokens;
    float temperature;
} rlpi_rl_options_v1;

_Static_assert(sizeof(rlpi_rl_options_v1) == offsetof(rlp_rl_options, sapo_tau_pos),
               "rlp_rl_options version 2 must only append to the version-1 layout");
_Static_assert(offsetof(rlpi_rl_options_v1, temperature) == offsetof(rlp_rl_options, temperature),
               "the version-1 prefix of rlp_rl_options moved");

/* *out = the caller's options @p in (version 1 or the current one) with
 * the fields its version lacks at their defaults, out->version current;
 * NULL in: the defaults. RLP_E_INVALID_ARG (naming @p what) for another
 * version. */
int rlpi_rl_options_upgrade(rlp_rl_options *out, const rlp_rl_options *in, const char *what);

/* The same from a frozen version-1 struct (inside an older trainer's options). */
void rlpi_rl_options_from_v1(rlp_rl_options *out, const rlpi_rl_options_v1 *in);

#endif
