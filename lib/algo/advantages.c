/* rlp_rl_advantages(): the advantage each trajectory of a scored batch
 * gets from the estimator of an RL step, for logs and completion tables
 * (`rlpost train`'s samples.jsonl). The same selection (valid, with
 * completion tokens), reward shaping (overlong penalty) and estimator
 * (rl_math.c) as rlp_policy_train_rl(), without a policy: the KL term of
 * kl_in_reward, which needs π_ref's logprobs, is left out. Observation
 * tokens (loss mask 0) count nowhere, as in the step. */
#include "rlpost.h"

#include "algo/rl_math.h"
#include "algo/rl_options.h"
#include "core/batch.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

RLP_API int rlp_rl_advantages(float *out, size_t n, const rlp_batch *batch, const rlp_rl_options *opts)
{
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(out || n == 0, "out is NULL");
    if (n != batch->n)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: n is %zu but the batch holds %zu trajectories", __func__, n,
                              batch->n);
    rlp_rl_options o;
    if (rlpi_rl_options_upgrade(&o, opts, "opts") || rlpi_rl_options_check(&o))
        return rlpi_error_wrap("%s", __func__);
    o.kl_in_reward = 0;
    size_t used = 0, n_tok = 0;
    for (size_t i = 0; i < n; i++) {
        const rlpi_traj *t = &batch->items[i];
        out[i] = NAN;
        if (t->valid && t->n_tokens > 0 && t->n_prompt > 0 && rlpi_traj_model_tokens(t) > 0) {
            if (!isfinite(t->reward))
                return rlpi_error_set(RLP_E_INVALID_ARG, "%s: trajectory %zu has no reward (score the batch first)",
                                      __func__, i);
            used++;
            n_tok += t->n_tokens;
        }
    }
    if (used == 0)
        return RLP_OK;
    size_t *pick = malloc(used * sizeof *pick), *tok_start = malloc((used + 1) * sizeof *tok_start);
    uint64_t *group = malloc(used * sizeof *group);
    float *reward = malloc(used * sizeof *reward), *arr = calloc(n_tok * 3, sizeof *arr);
    uint8_t *mask = malloc(n_tok), *keep = malloc(n_tok);
    int rc = pick && tok_start && group && reward && arr && mask && keep
                 ? RLP_OK
                 : rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    int have_mask = 0;
    int have_token_rewards = 0;
    size_t k = 0, at = 0;
    float *logp = arr, *adv = arr + n_tok, *tokr = arr + 2 * n_tok;
    for (size_t i = 0; !rc && i < n; i++) {
        const rlpi_traj *t = &batch->items[i];
        if (!t->valid || t->n_tokens == 0 || t->n_prompt == 0 || rlpi_traj_model_tokens(t) == 0)
            continue;
        pick[k] = i;
        tok_start[k] = at;
        group[k] = t->group_id;
        reward[k] = t->reward +
                    rlpi_overlong_penalty((uint32_t)rlpi_traj_model_tokens(t), o.overlong_max, o.overlong_cache);
        if (t->loss_mask) {
            memcpy(mask + at, t->loss_mask, t->n_tokens);
            have_mask = 1;
        } else {
            memset(mask + at, 1, t->n_tokens);
        }
        /* DAPO's overlong filter: a cut completion trains nothing (and counts in no normalisation) */
        memset(keep + at, !(o.overlong_filter && t->finish_reason == RLP_FINISH_LENGTH), t->n_tokens);
        memcpy(logp + at, t->logprobs, t->n_tokens * sizeof *logp);
        if (t->token_rewards) {
            memcpy(tokr + at, t->token_rewards, t->n_tokens * sizeof *tokr);
            have_token_rewards = 1;
        }
        at += t->n_tokens;
        k++;
    }
    if (!rc) {
        tok_start[used] = n_tok;
        rlpi_rl_seqs s = {.n_seqs = used, .tok_start = tok_start, .group = group, .reward = reward,
                          .token_reward = have_token_rewards ? tokr : NULL, .logp_old = logp,
                          .logp_behav = logp, .logp_ref = NULL, .mask = have_mask ? mask : NULL,
                          .keep = o.overlong_filter ? keep : NULL};
        rlpi_adv_info info = {0};
        rc = rlpi_rl_advantages(&o, &s, adv, &info);
        /* the advantage at a trajectory's first model token: the whole
         * sequence's for outcome estimators, the return-to-go's start for
         * REINFORCE++ */
        for (size_t j = 0; !rc && j < used; j++) {
            size_t f = tok_start[j];
            while (!mask[f])
                f++;
            out[pick[j]] = adv[f];
        }
        if (rc)
            rc = rlpi_error_wrap("%s", __func__);
    }
    free(pick);
    free(tok_start);
    free(group);
    free(reward);
    free(arr);
    free(mask);
    free(keep);
    return rc;
}
