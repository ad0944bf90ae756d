/* Generalized Advantage Estimation (Schulman et al. 2016, eq. 16 in its
 * recursive form) over each sequence's model tokens; see algo/gae.h for the
 * mask, bootstrap and framework conventions. No whitening here: the caller
 * applies its whiten option to the advantages. */
#include "algo/gae.h"

#include "core/error.h"

#include <math.h>

/* RLPI_CHECK_ARG would name this helper, not the function called */
#define BAD(cond, what)                                                                                                \
    do {                                                                                                               \
        if (cond)                                                                                                      \
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_gae: %s", what);                                            \
    } while (0)

static int check(const rlpi_gae_seqs *s, float gamma, float lambda, const float *advantages, const float *returns)
{
    BAD(!s, "s is NULL");
    BAD(!s->tok_start, "tok_start is NULL");
    BAD(!s->token_reward || !s->values, "token_reward and values must not be NULL");
    BAD(!advantages || !returns, "advantages and returns must not be NULL");
    BAD(!(gamma >= 0 && gamma <= 1), "gamma must be in [0, 1]");
    BAD(!(lambda >= 0 && lambda <= 1), "lambda must be in [0, 1]");
    for (size_t i = 0; i < s->n_seqs; i++) {
        size_t a = s->tok_start[i], b = s->tok_start[i + 1];
        if (b < a)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_gae: tok_start decreases at sequence %zu", i);
        for (size_t t = a; t < b; t++)
            if (!isfinite(s->token_reward[t]) || !isfinite(s->values[t]))
                return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_gae: sequence %zu token %zu: non-finite reward or value",
                                      i, t - a);
        if (s->bootstrap && !isfinite(s->bootstrap[i]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_gae: sequence %zu: non-finite bootstrap value", i);
    }
    return RLP_OK;
}
#undef BAD

int rlpi_gae(const rlpi_gae_seqs *s, float gamma, float lambda, float *advantages, float *returns)
{
    int rc = check(s, gamma, lambda, advantages, returns);
    if (rc != RLP_OK)
        return rc;
    const double g = gamma, gl = (double)gamma * (double)lambda;
    for (size_t i = 0; i < s->n_seqs; i++) {
        double v_next = s->bootstrap ? (double)s->bootstrap[i] : 0.0, a_next = 0.0;
        for (size_t t = s->tok_start[i + 1]; t-- > s->tok_start[i];) {
            if (s->mask && !s->mask[t]) { /* an observation: context only, the running state passes over it */
                advantages[t] = 0.0f;
                returns[t] = 0.0f;
                continue;
            }
            double v = s->values[t];
            double a = (double)s->token_reward[t] + g * v_next - v + gl * a_next;
            advantages[t] = (float)a;
            returns[t] = (float)(a + v);
            v_next = v;
            a_next = a;
        }
    }
    return RLP_OK;
}
