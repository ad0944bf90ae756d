/* The trajectory batch that rollout, reward, replay buffer and algorithms
 * share (rlp_batch). Internal code builds trajectories in place and hands
 * them over without copying; the public accessors are in batch.c. It knows
 * nothing about models or sampling. */
#ifndef RLPI_CORE_BATCH_H
#define RLPI_CORE_BATCH_H

#include "rlpost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_traj {
    uint64_t group_id;
    int32_t *prompt;        /* (n_prompt) */
    size_t n_prompt;
    int32_t *tokens;        /* (n_tokens, cap) completion ids */
    float *logprobs;        /* (n_tokens, cap) behaviour logprobs */
    uint64_t *versions;     /* (n_tokens, cap) policy version per token */
    size_t n_tokens, cap;
    char *prompt_text;      /* NULL or owned */
    char *text;             /* completion text, owned (never NULL once finished) */
    uint64_t policy_version;
    int32_t finish_reason;
    int32_t stop_index;
    float temperature;
    float reward;           /* NaN until scored */
    int32_t valid;
    char *error;            /* owned or NULL */
    char *metadata;         /* owned JSON or NULL */
    uint32_t sample_index;  /* within the group */
    float *token_rewards;   /* (n_tokens) owned, or NULL */
    bool has_provenance;    /* false: where it came from is unknown (provenance all zero) */
    rlp_provenance provenance; /* version RLP_PROVENANCE_VERSION when set; plain data, copied with the struct */
    uint8_t *loss_mask;     /* (n_tokens, cap) owned, or NULL = every token is the model's */
    bool has_episode;       /* a multi-turn episode: episode is its record */
    rlp_episode_stats episode; /* plain data, copied with the struct */
} rlpi_traj;

struct rlp_batch {
    rlpi_traj *items;       /* (n, cap) */
    size_t n, cap;
};

/* Frees what a trajectory owns and zeroes it. */
void rlpi_traj_clear(rlpi_traj *t);
/* Appends one completion token (grows the arrays). */
int rlpi_traj_push_token(rlpi_traj *t, int32_t token, float logprob, uint64_t version);
/* Prompt + completion of a trajectory as one sequence for the policy API
 * (n_prompt = its prompt's length): the ids are a malloc'd copy in *ids,
 * which the caller frees. RLP_OK or RLP_E_NOMEM. */
int rlpi_traj_sequence(const rlpi_traj *t, rlp_sequence *seq, int32_t **ids);
/* Completion tokens with loss mask 1 (the model's; all of them without a mask). */
static inline size_t rlpi_traj_model_tokens(const rlpi_traj *t)
{
    if (!t->loss_mask)
        return t->n_tokens;
    size_t n = 0;
    for (size_t i = 0; i < t->n_tokens; i++)
        n += t->loss_mask[i] != 0;
    return n;
}
/* Appends n observation tokens (loss mask 0, logprob 0, version v);
 * creates the mask (all 1 so far) on first use. */
int rlpi_traj_push_observation(rlpi_traj *t, const int32_t *ids, size_t n, uint64_t version);
/* Moves *t into the batch (t is zeroed; on failure t is untouched). */
int rlpi_batch_take(rlp_batch *b, rlpi_traj *t);
/* Reserve room for n more trajectories. */
int rlpi_batch_reserve(rlp_batch *b, size_t more);
/* Copies src (all owned memory duplicated; provenance with it). */
int rlpi_traj_copy(rlpi_traj *dst, const rlpi_traj *src);
/* Checks a caller's provenance (NULL, unknown version) and copies the
 * fields its version has into *out, stamped RLP_PROVENANCE_VERSION.
 * `what` names the caller in the message. */
int rlpi_provenance_read(rlp_provenance *out, const rlp_provenance *p, const char *what);

#endif
