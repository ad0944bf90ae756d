/* One RL step on a scored batch (rlp_policy_train_rl): select valid
 * trajectories, shape rewards, compute π_prox and π_ref with the current
 * weights, advantages per group, then ppo_epochs × mini_batches optimizer
 * steps of the chosen loss through rlpi_policy_train_step (which owns
 * micro-batching, backward, clipping and AdamW). The loss callback maps a
 * micro-batch back to the step's per-token arrays. The step advances the
 * policy version by one, however many optimizer steps it applied.
 * Observation tokens of a multi-turn episode (loss mask 0) are in the
 * sequences as context and counted nowhere: advantages, losses, token
 * means, statistics and the overlong penalty see model tokens only.
 * With one epoch of one mini-batch π_prox is the training forward's own
 * logprobs (same weights, tokens, temperature and precision): the step
 * then takes them from that forward instead of a forward of its own. */
#include "algo/rl_step.h"

#include "algo/rl_math.h"
#include "algo/rl_options.h"
#include "core/clock.h"
#include "core/batch.h"
#include "core/error.h"
#include "dist/comm.h"
#include "model/lora.h"
#include "model/policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int force_prox_forward;
static uint64_t prox_forwards;

void rlpi_rl_force_prox_forward(int on)
{
    __atomic_store_n(&force_prox_forward, on != 0, __ATOMIC_RELAXED);
}

uint64_t rlpi_rl_prox_forwards(void)
{
    return __atomic_load_n(&prox_forwards, __ATOMIC_RELAXED);
}

/* Whether π_prox can be the training forward's logprobs, detached. They
 * are the same numbers as a separate forward's when the step applies one
 * optimizer step (one epoch, one mini-batch: every micro-batch's forward
 * runs on the weights the step started with) and nothing reads π_prox
 * before that forward. Every other reader of logp_old is the loss itself
 * (ratio, decoupled PPO's and truncated IS's π_prox/π_behav weight, GSPO's
 * sequence ratio, the ratio statistics), which then sees ratio exactly 1:
 * the same loss, and the same gradient, since π_prox is a constant there.
 * Readers before training keep the pass: REINFORCE++ with the KL in the
 * reward (per-token reward −β·KL(π_prox‖π_ref), advantages.c), and the
 * options listed below.
 * The condition depends on the options only, so data-parallel ranks agree
 * (and rlp_policy_logprobs runs no collective either way). */
static bool prox_from_training(const rlp_rl_options *o, bool need_ref)
{
    if (__atomic_load_n(&force_prox_forward, __ATOMIC_RELAXED))
        return false;
    if (o->ppo_epochs != 1 || o->mini_batches != 1)
        return false;
    /* readers of π_prox before training: rejection sampling and the veto
     * (which tokens train), the IS weights' batch mean, the covariance
     * selection of CLIP_COV and KL_COV */
    if (o->rollout_rs || o->rollout_token_veto > 0 || (o->rollout_is && o->rollout_is_batch_normalize) ||
        o->policy_loss == RLP_LOSS_CLIP_COV || o->policy_loss == RLP_LOSS_KL_COV)
        return false;
    /* per-token KL shaping reads π_prox before training */
    return !((o->advantage == RLP_ADV_REINFORCE_PP || o->advantage == RLP_ADV_GAE) && o->kl_in_reward &&
             o->kl_estimator && need_ref);
}

typedef struct rl_step {
    const rlp_rl_options *o;
    rlpi_rl_seqs all;             /* every used sequence of the step */
    float *fill_old;              /* non-NULL: π_prox comes from the training forward; the loss writes it here */
    const float *adv;
    size_t mb_first;              /* first sequence (index into `all`) of the current mini-batch */
    rlpi_rl_norm norm;            /* of the current mini-batch (= one optimizer step) */
    rlpi_rl_acc acc;
} rl_step;

static int rl_loss(rlp_loss_context *lc, void *payload)
{
    rl_step *st = payload;
    size_t *idx = malloc((lc->n_seqs ? lc->n_seqs : 1) * sizeof *idx);
    if (!idx)
        return rlpi_error_set(RLP_E_NOMEM, "RL loss: out of memory");
    for (size_t i = 0; i < lc->n_seqs; i++)
        idx[i] = st->mb_first + lc->seq_index[i];
    if (st->fill_old)
        for (size_t i = 0; i < lc->n_seqs; i++) {
            /* this micro-batch's logprobs are π_prox for its sequences (a
             * length mismatch is reported by rlpi_rl_loss below) */
            size_t g0 = st->all.tok_start[idx[i]], len = st->all.tok_start[idx[i] + 1] - g0;
            size_t l0 = lc->token_start[i], ln = lc->token_start[i + 1] - l0;
            memcpy(st->fill_old + g0, lc->logprobs + l0, (len < ln ? len : ln) * sizeof(float));
        }
    double before = st->acc.loss;
    int rc = rlpi_rl_loss(st->o, &st->all, st->adv, idx, lc->n_seqs, lc->token_start, lc->logprobs, lc->entropy,
                          &st->norm, lc->dlogprobs, lc->dentropy, &st->acc);
    lc->loss = st->acc.loss - before;
    free(idx);
    return rc;
}


/* Advantages of a data-parallel step: the estimator per group (groups
 * never span ranks), then the whole-batch normalisation over all ranks'
 * tokens. Called on every rank, also one without sequences. */
static int dp_advantages(rlp_comm *comm, const rlp_rl_options *o, const rlpi_rl_seqs *s, float *adv,
                         rlpi_adv_info *ai)
{
    double eps;
    int rc = rlpi_rl_advantages_unnormalised(o, s, adv, ai, &eps);
    if (rc != RLP_OK || eps < 0)
        return rc;
    size_t n = s->tok_start[s->n_seqs];
    double m[2] = {0, 0}, var = 0;
    for (size_t i = 0; i < n; i++)
        if (rlpi_rl_on(s, i)) {
            m[0] += 1;
            m[1] += adv[i];
        }
    if ((rc = rlpi_comm_all_reduce_host(comm, m, 2, RLPI_DT_F64, RLP_REDUCE_SUM)) != RLP_OK)
        return rc;
    double mean = m[0] > 0 ? m[1] / m[0] : 0;
    for (size_t i = 0; i < n; i++)
        if (rlpi_rl_on(s, i))
            var += ((double)adv[i] - mean) * ((double)adv[i] - mean);
    if ((rc = rlpi_comm_all_reduce_host(comm, &var, 1, RLPI_DT_F64, RLP_REDUCE_SUM)) != RLP_OK)
        return rc;
    double div = rlpi_whiten_divisor(o->whiten, var, m[0], eps);
    for (size_t i = 0; i < n; i++)
        if (rlpi_rl_on(s, i)) /* an observation token keeps its 0 */
            adv[i] = (float)(((double)adv[i] - mean) / div);
    return RLP_OK;
}

/* The mismatch statistics of rlpi_rl_mismatch over the step's tokens. */
static void mismatch(rlpi_rl_mismatch *mm, const float *behav, const float *old, const uint8_t *mask, size_t n)
{
    double kl = 0, w_sum = 0, w_min = INFINITY, w_max = 0, abs_sum = 0;
    uint64_t cnt = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)old[i] - (double)behav[i];
        if ((mask && !mask[i]) || !isfinite(d))
            continue;
        double w = exp(d);
        kl += w - 1.0 - d;
        w_sum += w;
        w_min = w < w_min ? w : w_min;
        w_max = w > w_max ? w : w_max;
        abs_sum += fabs(d);
        cnt++;
    }
    double c = cnt ? (double)cnt : 1;
    *mm = (rlpi_rl_mismatch){.n_tokens = cnt, .kl = kl / c, .is_mean = cnt ? w_sum / c : 1, .is_min = cnt ? w_min : 1,
                             .is_max = cnt ? w_max : 1, .abs_mean = abs_sum / c};
}

/* The rollout correction's weight statistics (rlpi_rl_mismatch, corr_*) over
 * the model tokens of s (π_prox complete). */
static void correction_metrics(rlpi_rl_mismatch *mm, const rlp_rl_options *o, const rlpi_rl_seqs *s)
{
    mm->corr_is_mean = mm->corr_is_min = mm->corr_is_max = mm->corr_is_ess = 1.0;
    mm->corr_is_truncated = 0.0;
    if (!o->rollout_is)
        return;
    double C = (double)o->rollout_is_threshold, sum = 0, n = 0, lo = INFINITY, hi = 0, over = 0, units = 0;
    double csum = 0, csq = 0;
    for (size_t i = 0; i < s->n_seqs; i++) {
        bool counted = false;
        /* a sequence's weight once per sequence: rlpi_rl_is_raw sums over it */
        double seq_w = o->rollout_is == RLP_IS_SEQUENCE ? rlpi_rl_is_raw(RLP_IS_SEQUENCE, s, i, 0) : 1.0;
        for (size_t t = s->tok_start[i]; t < s->tok_start[i + 1]; t++) {
            if (!rlpi_rl_model(s, t))
                continue;
            double w = o->rollout_is == RLP_IS_TOKEN ? rlpi_rl_is_raw(RLP_IS_TOKEN, s, i, t) : seq_w;
            sum += w;
            n += 1;
            lo = w < lo ? w : lo;
            hi = w > hi ? w : hi;
            double c = fmin(fmax(w, 1.0 / C), C);
            csum += c;
            csq += c * c;
            if (o->rollout_is == RLP_IS_TOKEN || !counted) {
                over += w > C;
                units += 1;
                counted = true;
            }
        }
    }
    if (n == 0)
        return;
    double cm = csum / n;
    mm->corr_is_mean = sum / n;
    mm->corr_is_min = lo;
    mm->corr_is_max = hi;
    mm->corr_is_truncated = over / units;
    mm->corr_is_ess = csq > 0 ? 1.0 / (csq / n / ((cm + 1e-8) * (cm + 1e-8))) : 1.0;
}

static int train_rl(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                    const rlp_rl_options *opts, rlp_rl_stats *stats, rlpi_rl_mismatch *mm,
                    const rlpi_rl_critic_io *cio)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(batch, "batch is NULL");
    rlp_rl_options o;
    int rc = rlpi_rl_options_upgrade(&o, opts, "opts");
    if (!rc)
        rc = rlpi_rl_options_check(&o);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    if (!policy->trainable)
        return rlpi_error_set(RLP_E_STATE, "%s: the policy is frozen", __func__);
    bool gae = o.advantage == RLP_ADV_GAE;
    if (gae && !cio)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "%s: advantage GAE needs a critic's values; the trainer runs a critic "
                              "(rlp_trainer_options.critic_path)",
                              __func__);
    if (gae && policy->comm)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: PPO with a critic is not data-parallel here", __func__);
    if (cio && (!cio->item_start || !cio->values || !cio->returns || !cio->item_used))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: incomplete critic values", __func__);
    bool need_ref = o.kl_estimator != 0 && o.kl_coef > 0;
    if (need_ref && !ref)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: a KL coefficient needs a reference policy", __func__);
    /* the policy as its own reference: the base under its LoRA adapters */
    bool ref_is_base = need_ref && ref == policy;
    if (ref_is_base && !rlpi_policy_has_lora(policy))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: ref is the policy itself, which only a policy with LoRA "
                              "adapters can be (its base, adapters off)", __func__);
    double t0 = rlpi_now_s();
    rlp_rl_stats S = {.version = 1};
    uint64_t v0 = policy->version;
    rlp_comm *comm = policy->comm; /* data parallel: every rank runs the same collectives below */

    /* 1. valid trajectories with completion tokens; temperature */
    size_t n = batch->n, used = 0, n_tok = 0, n_model = 0;
    size_t *pick = malloc((n ? n : 1) * sizeof *pick);
    if (!pick)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    float temp = o.temperature;
    for (size_t i = 0; i < n; i++) {
        const rlpi_traj *t = &batch->items[i];
        /* a trajectory without a model token (only observations) has nothing to train on */
        if (!t->valid || t->n_tokens == 0 || t->n_prompt == 0 || rlpi_traj_model_tokens(t) == 0) {
            S.invalid_seqs++;
            continue;
        }
        if (!isfinite(t->reward)) {
            free(pick);
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: trajectory %zu has no reward (score the batch first)",
                                  __func__, i);
        }
        float tt = t->temperature > 0 ? t->temperature : 1.0f;
        if (o.temperature == 0) {
            if (used > 0 && tt != temp) {
                free(pick);
                return rlpi_error_set(RLP_E_INVALID_ARG,
                                      "%s: trajectories sampled at temperatures %g and %g; set opts->temperature",
                                      __func__, (double)temp, (double)tt);
            }
            temp = tt;
        }
        pick[used++] = i;
    }
    if (temp == 0)
        temp = 1.0f;

    /* 2. shaped rewards; group filtering (DAPO dynamic sampling) */
    float *reward = malloc((used ? used : 1) * sizeof *reward);
    uint64_t *group = malloc((used ? used : 1) * sizeof *group);
    rc = reward && group ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    for (size_t k = 0; !rc && k < used; k++) {
        const rlpi_traj *t = &batch->items[pick[k]];
        /* DAPO's length is what the model generated: observations do not count */
        reward[k] = t->reward +
                    rlpi_overlong_penalty((uint32_t)rlpi_traj_model_tokens(t), o.overlong_max, o.overlong_cache);
        group[k] = t->group_id;
    }
    if (!rc && o.filter_equal_groups) {
        /* a group whose rewards are all equal carries no signal: drop it whole */
        char *drop = calloc(used ? used : 1, 1), *seen = calloc(used ? used : 1, 1);
        if (!drop || !seen)
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        for (size_t k = 0; !rc && k < used; k++) {
            if (seen[k])
                continue;
            bool equal = true;
            for (size_t j = k; j < used; j++)
                if (group[j] == group[k])
                    equal &= reward[j] == reward[k];
            for (size_t j = k; j < used; j++)
                if (group[j] == group[k]) {
                    seen[j] = 1;
                    drop[j] = equal;
                }
            S.filtered_groups += equal;
        }
        size_t keep = 0;
        for (size_t k = 0; !rc && k < used; k++)
            if (!drop[k]) {
                pick[keep] = pick[k];
                reward[keep] = reward[k];
                group[keep] = group[k];
                keep++;
            }
        if (!rc)
            used = keep;
        free(drop);
        free(seen);
    }
    /* 3. sequences and per-token arrays */
    rlp_sequence *seqs = calloc(used ? used : 1, sizeof *seqs);
    size_t *tok_start = malloc((used + 1) * sizeof *tok_start), *model_start = malloc((used + 1) * sizeof *model_start);
    int32_t **owned = calloc(used ? used : 1, sizeof *owned);
    if (!rc && (!seqs || !tok_start || !model_start || !owned))
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    for (size_t k = 0; !rc && k < used; k++) {
        const rlpi_traj *t = &batch->items[pick[k]];
        tok_start[k] = n_tok;
        model_start[k] = n_model;
        n_tok += t->n_tokens;
        n_model += rlpi_traj_model_tokens(t);
        if ((rc = rlpi_traj_sequence(t, &seqs[k], &owned[k])))
            break;
        uint64_t tv = t->policy_version;
        for (size_t j = 0; j < t->n_tokens; j++)
            if (!t->loss_mask || t->loss_mask[j])
                tv = t->versions && t->versions[j] < tv ? t->versions[j] : tv;
        double stale = v0 >= tv ? (double)(v0 - tv) : 0.0;
        S.staleness_mean += stale;
        S.staleness_max = stale > S.staleness_max ? stale : S.staleness_max;
        S.reward_mean += reward[k];
    }
    if (tok_start && model_start) {
        tok_start[used] = n_tok;
        model_start[used] = n_model;
    }
    float *arr = rc ? NULL : malloc((n_tok ? n_tok : 1) * 5 * sizeof *arr);
    uint8_t *mask = rc || n_model == n_tok ? NULL : malloc(n_tok); /* NULL: every token is the model's */
    if (!rc && (!arr || (n_model != n_tok && !mask)))
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    float *behav = arr, *old = arr + n_tok, *refl = arr + 2 * n_tok, *adv = arr + 3 * n_tok, *tokr = arr + 4 * n_tok;
    bool have_token_rewards = false;
    for (size_t k = 0; !rc && k < used; k++) {
        const rlpi_traj *t = &batch->items[pick[k]];
        memcpy(behav + tok_start[k], t->logprobs, t->n_tokens * sizeof(float));
        for (size_t j = 0; j < t->n_tokens; j++)
            tokr[tok_start[k] + j] = t->token_rewards ? t->token_rewards[j] : 0.0f;
        have_token_rewards |= t->token_rewards != NULL;
        if (mask) {
            if (t->loss_mask)
                memcpy(mask + tok_start[k], t->loss_mask, t->n_tokens);
            else
                memset(mask + tok_start[k], 1, t->n_tokens);
        }
    }
    /* PPO with a critic: its values at the step's tokens; the returns come back */
    float *vals = NULL, *rets = NULL;
    if (!rc && gae) {
        vals = malloc((n_tok ? n_tok : 1) * sizeof *vals);
        rets = calloc(n_tok ? n_tok : 1, sizeof *rets);
        if (!vals || !rets)
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        for (size_t k = 0; !rc && k < used; k++) {
            const rlpi_traj *t = &batch->items[pick[k]];
            if (cio->item_start[pick[k] + 1] - cio->item_start[pick[k]] != t->n_tokens) {
                rc = rlpi_error_set(RLP_E_INVALID_ARG, "%s: item %zu has %zu values for %zu tokens", __func__,
                                    pick[k], cio->item_start[pick[k] + 1] - cio->item_start[pick[k]], t->n_tokens);
                break;
            }
            memcpy(vals + tok_start[k], cio->values + cio->item_start[pick[k]], t->n_tokens * sizeof *vals);
        }
    }
    bool reuse = prox_from_training(&o, need_ref);
    if (!rc && used > 0) {
        /* 4. π_prox with the current weights, unless the training forward
         * gives it (filled in by rl_loss); π_ref */
        if (!reuse) {
            rc = rlp_policy_logprobs(policy, seqs, used, temp, old, NULL, n_tok, NULL);
            __atomic_add_fetch(&prox_forwards, 1, __ATOMIC_RELAXED);
        }
        if (!rc && ref_is_base)
            rlpi_transformer_set_lora_enabled(policy->tf, false);
        if (!rc && need_ref)
            rc = rlp_policy_logprobs(ref, seqs, used, temp, refl, NULL, n_tok, NULL);
        if (ref_is_base)
            rlpi_transformer_set_lora_enabled(policy->tf, true);
    }
    rl_step st = {.o = &o,
                  .all = {.n_seqs = used, .tok_start = tok_start, .group = group, .reward = reward,
                          .token_reward = have_token_rewards ? tokr : NULL, .logp_old = old,
                          .logp_behav = behav, .logp_ref = need_ref ? refl : NULL, .mask = mask,
                          .values = vals, .gae_lambda = cio ? cio->lambda : 1.0f, .returns = rets},
                  .fill_old = reuse ? old : NULL,
                  .adv = adv};
    st.norm.is_div = 1.0;
    /* 4b. which model tokens train: DAPO's overlong filter, the rollout
     * correction's rejection sampling and veto (π_prox is complete here:
     * prox_from_training keeps the pass for them). Rejected tokens count
     * nowhere from here on, as observations do, advantages included. */
    uint8_t *keep = NULL, *cov_pick = NULL;
    rlpi_reject_info rj = {0};
    uint64_t overlong_filtered = 0;
    if (!rc && used > 0 && (o.overlong_filter || o.rollout_rs || o.rollout_token_veto > 0)) {
        if (!(keep = malloc(n_tok))) {
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        } else {
            if (o.rollout_rs || o.rollout_token_veto > 0)
                rlpi_rl_reject(&o, &st.all, keep, &rj);
            else
                memset(keep, 1, n_tok);
            for (size_t k = 0; o.overlong_filter && k < used; k++)
                if (batch->items[pick[k]].finish_reason == RLP_FINISH_LENGTH) {
                    memset(keep + tok_start[k], 0, tok_start[k + 1] - tok_start[k]);
                    overlong_filtered++;
                }
            st.all.keep = keep;
            /* the aggregation's counts are of the tokens that train */
            size_t m = 0;
            for (size_t k = 0; k < used; k++) {
                model_start[k] = m;
                for (size_t t = tok_start[k]; t < tok_start[k + 1]; t++)
                    m += (size_t)rlpi_rl_on(&st.all, t);
            }
            model_start[used] = m;
            n_model = m;
        }
    }
    if (!rc && (o.policy_loss == RLP_LOSS_CLIP_COV || o.policy_loss == RLP_LOSS_KL_COV) &&
        !(cov_pick = calloc(n_tok ? n_tok : 1, 1)))
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    st.norm.cov_pick = cov_pick;
    if (!rc && o.rollout_is && o.rollout_is_batch_normalize) {
        double is[2];
        rlpi_rl_is_batch_sum(&o, &st.all, &is[0], &is[1]);
        if (comm)
            rc = rlpi_comm_all_reduce_host(comm, is, 2, RLPI_DT_F64, RLP_REDUCE_SUM);
        st.norm.is_div = rlpi_rl_is_divisor(&o, is[0], is[1]);
    }
    rlpi_adv_info ai = {0};
    if (!rc && comm)
        rc = dp_advantages(comm, &o, &st.all, adv, &ai);
    else if (!rc && used > 0)
        rc = rlpi_rl_advantages(&o, &st.all, adv, &ai);
    if (!rc && gae) { /* the returns, back to the caller's per-item layout */
        memset(cio->returns, 0, cio->item_start[batch->n] * sizeof *cio->returns);
        memset(cio->item_used, 0, batch->n);
        for (size_t k = 0; k < used; k++) {
            memcpy(cio->returns + cio->item_start[pick[k]], rets + tok_start[k],
                   (tok_start[k + 1] - tok_start[k]) * sizeof *rets);
            cio->item_used[pick[k]] = 1;
        }
    }
    S.n_groups = ai.n_groups + S.filtered_groups;
    S.zero_std_groups = ai.zero_std_groups + S.filtered_groups;
    double adv_sum = 0, adv_sq = 0; /* for the statistics of a data-parallel step */
    for (size_t i = 0; comm && !rc && i < n_tok; i++) {
        adv_sum += adv[i]; /* an observation token's is 0 */
        adv_sq += (double)adv[i] * adv[i];
    }
    if (!rc && n_model > 0) {
        double m = 0, v = 0;
        for (size_t i = 0; i < n_tok; i++)
            m += adv[i];
        m /= (double)n_model;
        for (size_t i = 0; i < n_tok; i++)
            if (rlpi_rl_on(&st.all, i))
                v += ((double)adv[i] - m) * ((double)adv[i] - m);
        S.adv_mean = m;
        S.adv_std = sqrt(v / (double)n_model);
    }

    /* 5. optimizer steps: epochs × mini-batches (contiguous ranges of sequences) */
    size_t longest = 0; /* in model tokens: Dr. GRPO's constant is the longest generation */
    for (size_t k = 0; k < used; k++)
        longest = model_start[k + 1] - model_start[k] > longest ? model_start[k + 1] - model_start[k] : longest;
    rlp_train_options to = RLP_TRAIN_OPTIONS_INIT;
    to.temperature = temp;
    to.micro_batch_tokens = o.micro_batch_tokens;
    uint32_t mbs = o.mini_batches < used ? o.mini_batches : (uint32_t)(used ? used : 1);
    double g[2] = {(double)longest, (double)used}; /* the longest sequence and whether any rank has one */
    if (comm && !rc) {
        /* every rank must take the same optimizer steps: the same number of
         * mini-batches, skipping only those empty on all ranks */
        mbs = o.mini_batches;
        rc = rlpi_comm_all_reduce_host(comm, g, 2, RLPI_DT_F64, RLP_REDUCE_MAX);
    }
    double g_longest = g[0];
    uint32_t epochs = cio && cio->advantages_only ? 0 : o.ppo_epochs;
    for (uint32_t ep = 0; !rc && g[1] > 0 && ep < epochs; ep++)
        for (uint32_t mb = 0; !rc && mb < mbs; mb++) {
            size_t b = used * mb / mbs, e = used * (mb + 1) / mbs;
            st.mb_first = b;
            size_t train_seqs = 0; /* a sequence whose every token was rejected is not in the mean */
            for (size_t k = b; k < e; k++)
                train_seqs += model_start[k + 1] > model_start[k];
            st.norm.step_seqs = (double)train_seqs;
            st.norm.step_tokens = (double)(model_start[e] - model_start[b]);
            st.norm.norm_c = o.agg_norm_constant > 0 ? (double)o.agg_norm_constant : g_longest;
            if (comm) {
                double tot[2] = {st.norm.step_seqs, st.norm.step_tokens};
                if ((rc = rlpi_comm_all_reduce_host(comm, tot, 2, RLPI_DT_F64, RLP_REDUCE_SUM)) != RLP_OK)
                    break;
                st.norm.step_seqs = tot[0];
                st.norm.step_tokens = tot[1];
            }
            if (st.norm.step_seqs == 0)
                continue;
            if (cov_pick) /* drawn per optimizer step, reproducibly */
                rlpi_rl_cov_select(&o, &st.all, adv, b, e, v0 * 0x100000001b3ull + (uint64_t)ep * 4099u + mb, cov_pick);
            rlp_train_stats ts;
            rc = rlpi_policy_train_step(policy, seqs + b, e - b, rl_loss, &st, &to, &ts, false);
            if (!rc) {
                S.optimizer_steps++;
                S.skipped_steps += ts.skipped != 0;
                S.grad_norm = ts.grad_norm;
                S.loss += st.acc.loss;
                S.pg_loss += st.acc.pg;
                st.acc.loss = st.acc.pg = 0;
            }
        }
    /* π_prox is complete here: computed above, or filled in by the training
     * forward of the step's one optimizer step (equal numbers either way) */
    if (!rc && mm && used > 0) {
        mismatch(mm, behav, old, mask, n_tok);
        correction_metrics(mm, &o, &st.all);
        mm->rs_tokens = rj.model_tokens;
        mm->rs_rejected_tokens = rj.rejected_tokens;
        mm->rs_seqs = rj.seqs;
        mm->rs_rejected_seqs = rj.rejected_seqs;
        mm->rs_vetoed_seqs = rj.vetoed_seqs;
        mm->overlong_filtered = overlong_filtered;
    }
    /* Versions count RL steps, not optimizer steps: one step is one
     * version whether it applied k = ppo_epochs × mini_batches updates or
     * none (every group filtered, every sample invalid, a skipped
     * gradient), so the staleness gate (B groups per version) never waits
     * for a version that a step without updates did not make. A step that
     * failed after an update changed the weights: it advances it too. */
    if (!rc || S.optimizer_steps > S.skipped_steps)
        policy->version = v0 + 1;
    size_t rep_seqs = used, rep_tokens = n_model; /* what the statistics cover: model tokens */
    if (comm && !rc) {
        /* report the whole step: sums and maxima over the ranks */
        double sum[] = {S.loss, S.pg_loss, st.acc.kl, st.acc.ent, st.acc.n_tokens, st.acc.clip_lo, st.acc.clip_hi,
                        st.acc.ratio_sum, st.acc.w_sum, S.reward_mean, S.staleness_mean, (double)used,
                        (double)n_model, (double)S.invalid_seqs, (double)S.n_groups, (double)S.zero_std_groups,
                        (double)S.filtered_groups, adv_sum, adv_sq};
        double max[] = {st.acc.ratio_max, st.acc.w_max, S.staleness_max};
        if (!(rc = rlpi_comm_all_reduce_host(comm, sum, sizeof sum / sizeof *sum, RLPI_DT_F64, RLP_REDUCE_SUM)))
            rc = rlpi_comm_all_reduce_host(comm, max, sizeof max / sizeof *max, RLPI_DT_F64, RLP_REDUCE_MAX);
        if (!rc) {
            S.loss = sum[0], S.pg_loss = sum[1], st.acc.kl = sum[2], st.acc.ent = sum[3], st.acc.n_tokens = sum[4];
            st.acc.clip_lo = sum[5], st.acc.clip_hi = sum[6], st.acc.ratio_sum = sum[7], st.acc.w_sum = sum[8];
            S.reward_mean = sum[9], S.staleness_mean = sum[10], rep_seqs = (size_t)sum[11], rep_tokens = (size_t)sum[12];
            S.invalid_seqs = (uint64_t)sum[13], S.n_groups = (uint64_t)sum[14];
            S.zero_std_groups = (uint64_t)sum[15], S.filtered_groups = (uint64_t)sum[16];
            double nt = rep_tokens ? (double)rep_tokens : 1, mean = sum[17] / nt, var = sum[18] / nt - mean * mean;
            S.adv_mean = mean;
            S.adv_std = sqrt(var > 0 ? var : 0);
            st.acc.ratio_max = max[0], st.acc.w_max = max[1], S.staleness_max = max[2];
        }
    }
    if (!rc) {
        double nt = st.acc.n_tokens > 0 ? st.acc.n_tokens : 1;
        double steps = S.optimizer_steps ? S.optimizer_steps : 1;
        S.loss /= steps;
        S.pg_loss /= steps;
        S.kl = st.acc.kl / nt;
        S.entropy = st.acc.ent / nt;
        S.clip_frac_low = st.acc.clip_lo / nt;
        S.clip_frac_high = st.acc.clip_hi / nt;
        S.ratio_mean = st.acc.ratio_sum / nt;
        S.ratio_max = st.acc.ratio_max;
        S.behav_weight_mean = st.acc.w_sum / nt;
        S.behav_weight_max = st.acc.w_max;
        S.n_seqs = rep_seqs;
        S.n_tokens = rep_tokens;
        S.reward_mean = rep_seqs ? S.reward_mean / (double)rep_seqs : 0;
        S.staleness_mean = rep_seqs ? S.staleness_mean / (double)rep_seqs : 0;
        S.policy_version = policy->version;
        S.seconds = rlpi_now_s() - t0;
        if (stats)
            *stats = S;
    }
    for (size_t k = 0; owned && k < used; k++)
        free(owned[k]);
    free(owned);
    free(seqs);
    free(tok_start);
    free(model_start);
    free(mask);
    free(keep);
    free(cov_pick);
    free(vals);
    free(rets);
    free(arr);
    free(reward);
    free(group);
    free(pick);
    return rc;
}

int rlp_policy_train_rl(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                        const rlp_rl_options *opts, rlp_rl_stats *stats)
{
    return rlpi_policy_train_rl(policy, batch, ref, opts, stats, NULL);
}

int rlpi_policy_train_rl(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                         const rlp_rl_options *opts, rlp_rl_stats *stats, rlpi_rl_mismatch *mm)
{
    return rlpi_policy_train_rl_critic(policy, batch, ref, opts, stats, mm, NULL);
}

int rlpi_policy_train_rl_critic(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                                const rlp_rl_options *opts, rlp_rl_stats *stats, rlpi_rl_mismatch *mm,
                                const rlpi_rl_critic_io *critic)
{
    if (mm)
        *mm = (rlpi_rl_mismatch){.is_mean = 1, .is_min = 1, .is_max = 1, .corr_is_mean = 1, .corr_is_min = 1,
                                 .corr_is_max = 1, .corr_is_ess = 1};
    int rc = train_rl(policy, batch, ref, opts, stats, mm, critic);
    if (rc != RLP_OK && policy && policy->comm && rc != RLP_E_CLOSED && rc != RLP_E_TIMEOUT)
        rlpi_dp_fail(policy->comm, "RL step", rc); /* the peers would wait for this rank forever */
    return rc;
}
