/* Token sampling from one row of logits: temperature, top-k, top-p, min-p,
 * and the behaviour logprob of the drawn token. Pure functions over host
 * arrays, no model and no global state: the engine (local) and the tests
 * call them; randomness comes in as a uniform number so a draw is a pure
 * function of (seed, sequence, step) whatever the batch or thread count. */
#ifndef RLPI_BACKEND_SAMPLER_H
#define RLPI_BACKEND_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* rlpi_sampler_params and the RLPI_LOGPROBS_* modes (which mirror the
 * public RLP_LOGPROBS_* enum) are defined in backend/backend.h: the
 * backend op rlpi_op_sample_rows takes them too. */

/* Scratch space for one sampler call: reuse across calls on one thread. */
typedef struct rlpi_sampler_scratch {
    float *probs;     /* (cap) */
    int32_t *idx;     /* (cap) */
    size_t cap;
} rlpi_sampler_scratch;

void rlpi_sampler_scratch_free(rlpi_sampler_scratch *s);

/* Validates params (finite, temperature >= 0, top_k >= 0, 0 < top_p <= 1,
 * 0 <= min_p <= 1, known mode); RLP_OK or RLP_E_INVALID_ARG naming the field. */
int rlpi_sampler_params_check(const rlpi_sampler_params *p);

/* Draws one token from logits (vocab floats, read-only) with uniform u in
 * [0, 1). Order of the truncations (Hugging Face's warper order):
 * temperature, top-k, top-p, min-p; the kept set is renormalised.
 * *out_logprob follows p->logprobs_mode; at temperature 0 it is the raw
 * log_softmax(logits) of the argmax. Non-finite logits: +Inf/NaN give
 * RLP_E_INVALID_ARG ("logits[i] is NaN"); -Inf entries are allowed
 * (masked tokens) unless all are -Inf.
 * Returns RLP_OK, RLP_E_INVALID_ARG or RLP_E_NOMEM. */
int rlpi_sample(const float *logits, int32_t vocab, const rlpi_sampler_params *p, double u,
                rlpi_sampler_scratch *scratch, int32_t *out_token, float *out_logprob);

/* The full sampling distribution (vocab floats, zeros outside the kept set)
 * that rlpi_sample draws from: for tests (chi-square) and for callers that
 * want top-n alternatives. */
int rlpi_sampler_distribution(const float *logits, int32_t vocab, const rlpi_sampler_params *p,
                              rlpi_sampler_scratch *scratch, float *out_probs);

/* Counter-based uniform in [0, 1) with 53 random bits: a pure function of
 * (seed, stream, step), so sequence `stream` draws the same numbers whatever
 * else is in the batch. */
double rlpi_sample_uniform(uint64_t seed, uint64_t stream, uint64_t step);

#endif
