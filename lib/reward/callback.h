/* Scorers around the host's reward callbacks. */
#ifndef RLPI_REWARD_CALLBACK_H
#define RLPI_REWARD_CALLBACK_H

#include "reward/scorer.h"

/* Exactly one of one / many is set; batch_size >= 1 for many. On failure
 * payload_free(payload) has run (when set). RLP_OK or RLP_E_NOMEM. */
int rlpi_callback_scorer(rlpi_scorer **out, rlp_reward_callback one, rlp_reward_batch_callback many,
                         size_t batch_size, void *payload, void (*payload_free)(void *));

#endif
