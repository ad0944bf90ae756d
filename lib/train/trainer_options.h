/* rlp_trainer_options across its versions. Version 4 embeds an
 * rlp_rl_options of version 2, which is longer than version 1's, so every
 * field after `rl` moved: a caller built against versions 1–3 passes the
 * frozen layout below (cut before multiturn for version 1, before
 * rollout_weights for version 2), which is converted field by field. */
#ifndef RLPI_TRAIN_TRAINER_OPTIONS_H
#define RLPI_TRAIN_TRAINER_OPTIONS_H

#include "rlpost.h"

#include "algo/rl_options.h"

/* The version-3 layout of rlp_trainer_options, frozen. */
typedef struct rlpi_trainer_options_v3 {
    uint32_t version;
    int32_t mode;
    uint32_t max_staleness;
    uint32_t prompts_per_step;
    uint64_t seed;
    rlp_sampling_options sampling;
    rlpi_rl_options_v1 rl;
    const rlp_policy *ref;
    const rlp_tokenizer *tokenizer;
    uint32_t max_seq_len;
    uint32_t max_batch;
    uint32_t rollout_threads;
    const char *const *worker_urls;
    size_t n_worker_urls;
    const char *api_key;
    const char *weights_dir;
    uint32_t worker_timeout_ms;
    uint32_t worker_retries;
    const rlp_trainer_metric *metrics;
    size_t n_metrics;
    rlp_trainer_batch_fn on_batch;
    void *on_batch_payload;
    rlp_comm *comm;
    uint32_t stall_polls;
    const char *rollout_inbox;
    rlp_multiturn_options multiturn; /* version 2 */
    int32_t rollout_weights;         /* version 3 */
} rlpi_trainer_options_v3;

_Static_assert(offsetof(rlpi_trainer_options_v3, rl) == offsetof(rlp_trainer_options, rl),
               "the fields before rl must not move");

/* *out = the caller's options @p in (versions 1 to current) with the
 * fields its version lacks at their defaults, out->version current; NULL
 * in: the defaults. RLP_E_INVALID_ARG for an unknown version. */
int rlpi_trainer_options_upgrade(rlp_trainer_options *out, const rlp_trainer_options *in);

#endif
