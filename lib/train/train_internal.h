/* What the trainer (trainer.c), its checkpoints (trainer_state.c), its step
 * record (step_record.c) and the rollout worker (rollout_worker.c) share.
 * lib/train is the top layer: it drives the other handles through the
 * public API only, and reports failures with rlpi_error_set(). */
#ifndef RLPI_TRAIN_INTERNAL_H
#define RLPI_TRAIN_INTERNAL_H

#include "rlpost.h"

#include <stddef.h>
#include <stdint.h>

/* splitmix64: the sampling seed of step k (batch k − 1) is a pure function
 * of (seed, k), so every mode draws the same groups for the same step. */
static inline uint64_t rlpi_train_mix_seed(uint64_t seed, uint64_t step)
{
    uint64_t z = seed * UINT64_C(0x9e3779b97f4a7c15) + step + 1;
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* generate.c: completion groups for prompts [first, first + count) of @p set
 * (count SIZE_MAX: to the end) on @p engine. With @p ext_tok (a model
 * without a tokenizer of its own) the prompts are encoded and the
 * completions decoded with it. A group holding a RLP_FINISH_ERROR sample
 * (a remote request that failed on every URL) is generated again, up to
 * @p retries times, so that every group comes back whole; otherwise
 * RLP_E_NETWORK. Thread-safe for distinct engines. */
/* step_record.c: the episode fields of a record (turns, tool calls, masked share…). */
void rlpi_train_episode_summary(rlp_step_record *rec, const rlp_batch *batch);

int rlpi_train_generate(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt_set *set, size_t first,
                        size_t count, const rlp_sampling_options *s, const rlp_multiturn_options *mt,
                        const rlp_tokenizer *ext_tok, uint32_t retries);

/* generate.c: the arrays a sampling options struct points to (stop strings,
 * stop token ids), copied so that a handle can read them long after its
 * create call returned; @p s is made to point to the copies. */
typedef struct rlpi_sampling_copy {
    char **stops;      /* (n) */
    size_t n;
    int32_t *stop_ids;
} rlpi_sampling_copy;

int rlpi_sampling_copy_make(rlpi_sampling_copy *c, rlp_sampling_options *s);
void rlpi_sampling_copy_free(rlpi_sampling_copy *c);

/* step_record.c: the reward's summary of a scored batch (mean, spread,
 * valid samples, tokens, truncations) into @p rec. */
void rlpi_train_reward_summary(rlp_step_record *rec, const rlp_batch *batch);

/* step_record.c: scores @p fn over @p batch: the share of all samples ≥ thr
 * and the mean over valid ones (NaN when none). */
int rlpi_train_score_metric(rlp_reward_fn *fn, rlp_batch *batch, double thr, double *rate, double *mean);

/* step_record.c: a deep copy of a batch (metrics are scored on a copy when
 * the batch must keep its training reward). */
int rlpi_train_batch_copy(rlp_batch **out, const rlp_batch *batch);

#endif
