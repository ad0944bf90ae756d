/* The HTTP verifier scorer (built only with libcurl). */
#ifndef RLPI_REWARD_HTTP_VERIFIER_H
#define RLPI_REWARD_HTTP_VERIFIER_H

#include "reward/scorer.h"

/* Validates o (url, api_key) and creates the scorer: chunk 0 (one call
 * per score call), its own deadlines. RLP_E_INVALID_ARG, RLP_E_NETWORK,
 * RLP_E_NOMEM. */
int rlpi_http_scorer(rlpi_scorer **out, const rlp_http_reward_options *o);

#endif
