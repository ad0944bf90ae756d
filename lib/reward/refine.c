/* Process-reward refinements of Gao et al. 2024, "On Designing Effective RL
 * Reward at Training Time for LLM Reasoning" (arXiv:2410.15115): both
 * bound what a policy can gain by repeating steps a process reward model
 * likes. Only the step entries change; entries between steps stay. */
#include "reward/refine.h"

#include "core/error.h"
#include "rlpost.h"

#include <math.h>

void rlpi_refine_steps(float *r, const uint8_t *mask, size_t n, int mode, float eta)
{
    if (mode == RLP_REFINE_CLIP || mode == RLP_REFINE_CLIP_DELTA) {
        /* Clip: r_k <- min(r_k - eta, 0) */
        for (size_t t = 0; t < n; t++)
            if (!mask || mask[t]) {
                float v = r[t] - eta;
                r[t] = v < 0.0f ? v : 0.0f;
            }
    }
    if (mode == RLP_REFINE_DELTA || mode == RLP_REFINE_CLIP_DELTA) {
        /* Delta: r_k <- r_k - r_{k+1} for k < K, r_K kept; walking forward
         * with the next step's original value */
        size_t prev = n; /* index of the previous step, n = none yet */
        for (size_t t = 0; t < n; t++) {
            if (mask && !mask[t])
                continue;
            if (prev < n)
                r[prev] -= r[t];
            prev = t;
        }
    }
}

void rlpi_refine_tokens(float *r, const uint8_t *step_ends, size_t n, int mode, float eta)
{
    int any = 0;
    for (size_t t = 0; step_ends && t < n && !any; t++)
        any = step_ends[t] != 0;
    rlpi_refine_steps(r, any ? step_ends : NULL, n, mode, eta);
}

int rlp_reward_refine(float *rewards, size_t n, const uint8_t *step_mask, int mode, float eta)
{
    RLPI_CHECK_ARG(rewards || n == 0, "rewards is NULL");
    RLPI_CHECK_ARG(mode >= RLP_REFINE_NONE && mode <= RLP_REFINE_CLIP_DELTA,
                   "mode is not an rlp_reward_refine_mode");
    RLPI_CHECK_ARG(isfinite(eta), "eta is not finite");
    if (n)
        rlpi_refine_steps(rewards, step_mask, n, mode, eta);
    return RLP_OK;
}
