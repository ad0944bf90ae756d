/* Runs a scorer over many samples on a reward handle's own worker threads,
 * with a deadline per call, and abandons (detaches and replaces) a worker
 * whose call overruns, so that one hung callback can neither stall nor
 * crash a score call. It copies everything a scorer reads, so an abandoned
 * call never reads memory the host may free. It does not touch batches:
 * the handle turns outcomes into rewards. */
#ifndef RLPI_REWARD_EXECUTOR_H
#define RLPI_REWARD_EXECUTOR_H

#include "reward/scorer.h"

#include <stdint.h>

typedef struct rlpi_reward_exec rlpi_reward_exec;

/* What became of one sample. token_scores / step_ends are malloc'd
 * (n_completion_tokens each) when the scorer gave per-token scores,
 * refinement already applied; free with rlpi_outcome_clear(). */
typedef struct rlpi_outcome {
    double score;              /* meaningful when valid */
    int valid;
    int kind;                  /* RLPI_RW_* */
    char reason[RLP_REWARD_REASON_MAX];
    float *token_scores;       /* (n_tokens) or NULL */
    uint8_t *step_ends;        /* (n_tokens) or NULL */
    size_t n_tokens;
} rlpi_outcome;

void rlpi_outcome_clear(rlpi_outcome *o);

/* n_threads >= 1 workers, started lazily by the first run; at most
 * n_threads + max_abandoned threads (live + abandoned) exist at once.
 * RLP_OK or RLP_E_NOMEM. */
int rlpi_reward_exec_create(rlpi_reward_exec **out, int n_threads, uint32_t max_abandoned);

/* Joins the idle workers; abandoned ones finish (and free) on their own. */
void rlpi_reward_exec_free(rlpi_reward_exec *ex);

/* Scores reqs (n; pointers borrowed for the duration of the call; a NULL
 * reference is filled from metadata_json's "reference") with sc, each call
 * with a deadline of timeout_ms (0 = none; ignored when sc bounds its own
 * time), and fills out (n, zeroed by the caller). Per-token scores are
 * refined with (refine, eta). *abandoned_running receives the number of
 * abandoned calls still running at return. One run at a time per
 * executor. RLP_OK (whatever became of the samples), RLP_E_NOMEM,
 * RLP_E_BACKEND (no worker could be started). */
int rlpi_reward_exec_run(rlpi_reward_exec *ex, rlpi_scorer *sc, uint32_t timeout_ms, int refine, float eta,
                         const rlp_reward_request *reqs, size_t n, rlpi_outcome *out,
                         uint64_t *abandoned_running);

#endif
