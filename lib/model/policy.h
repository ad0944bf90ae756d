/* Internal layout of rlp_policy and its constructor from an in-memory
 * config and weights (what every file loader ends with). */
#ifndef RLPI_MODEL_POLICY_H
#define RLPI_MODEL_POLICY_H

#include "algo/optimizer.h"
#include "backend/context.h"
#include "model/transformer.h"
#include "rlpost.h"

#include <stdbool.h>

struct rlp_policy {
    rlp_context *ctx;          /* borrowed; outlives the policy */
    rlp_policy_options opts;
    bool trainable;
    rlpi_transformer *tf;      /* owned */
    rlpi_optimizer opt;
    uint64_t version;          /* optimizer steps applied */
};

/* Builds a policy on ctx's backend from a config and HF-named weights
 * (copied). */
int rlpi_policy_create(rlp_policy **out, rlp_context *ctx, const rlpi_model_config *cfg, const rlpi_weights *w,
                       const rlp_policy_options *opts);

#endif
