/* Clip and Delta refinements of process rewards (Gao et al. 2024,
 * arXiv:2410.15115). Pure functions on arrays; the public entry point is
 * rlp_reward_refine() and the per-handle option rlp_reward_fn_set_refine(). */
#ifndef RLPI_REWARD_REFINE_H
#define RLPI_REWARD_REFINE_H

#include <stddef.h>
#include <stdint.h>

/* Refines the steps of r (n): the entries with mask[t] != 0, or every
 * entry when mask is NULL. mode is an rlp_reward_refine_mode (checked by
 * the caller). */
void rlpi_refine_steps(float *r, const uint8_t *mask, size_t n, int mode, float eta);

/* Same, for the per-token scores of a result: when step_ends marks no
 * token, every token is a step. */
void rlpi_refine_tokens(float *r, const uint8_t *step_ends, size_t n, int mode, float eta);

#endif
