/* Train/inference mismatch: the policy's recomputed logprobs of a batch's
 * completion tokens against the behaviour logprobs the rollout recorded.
 * With the same weights, temperature and no truncation they agree to
 * float rounding; anything more is a bug or a deliberate difference
 * (truncated sampling, other kernels, stale weights). Observation tokens
 * of a multi-turn episode (loss mask 0) were not sampled: skipped. */
#include "core/batch.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>

int rlp_batch_logprob_mismatch(rlp_mismatch_stats *out, const rlp_batch *batch, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    rlp_mismatch_stats st = {.version = 1};
    double sum = 0, sum_ratio = 0;
    int rc = RLP_OK;
    for (size_t i = 0; !rc && i < batch->n; i++) {
        const rlpi_traj *t = &batch->items[i];
        if (t->n_tokens == 0 || t->n_prompt == 0)
            continue;
        int32_t *ids = NULL;
        rlp_sequence seq;
        float *lp = malloc(t->n_tokens * sizeof *lp);
        if (!lp || rlpi_traj_sequence(t, &seq, &ids)) {
            free(lp);
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        }
        float temp = t->temperature > 0 ? t->temperature : 1.0f;
        size_t got = 0;
        rc = rlp_policy_logprobs(policy, &seq, 1, temp, lp, NULL, t->n_tokens, &got);
        if (!rc && got != t->n_tokens)
            rc = rlpi_error_set(RLP_E_INTERNAL, "%s: %zu logprobs for %zu tokens", __func__, got, t->n_tokens);
        for (size_t k = 0; !rc && k < t->n_tokens; k++) {
            if (t->loss_mask && !t->loss_mask[k])
                continue;
            double d = fabs((double)lp[k] - (double)t->logprobs[k]);
            sum += d;
            sum_ratio += fabs(exp((double)lp[k] - (double)t->logprobs[k]) - 1.0);
            st.max_abs = d > st.max_abs ? d : st.max_abs;
            st.n_tokens++;
        }
        free(ids);
        free(lp);
    }
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    st.mean_abs = st.n_tokens ? sum / (double)st.n_tokens : 0;
    st.mean_ratio_dev = st.n_tokens ? sum_ratio / (double)st.n_tokens : 0;
    *out = st;
    return RLP_OK;
}
