/* DAPO's dynamic sampling with over-sampling (Yu et al. 2025 §3.2; verl's
 * max_num_gen_batches), the SYNC/PULL step's alternative to one batch:
 * batches of prompts_per_step prompts until prompts_per_step groups have
 * unequal rewards, at most max_gen_batches. Which groups count as
 * all-equal is the RL step's filter_equal_groups test (rl_step.c); the
 * record's reward figures are pooled over every batch generated. */
#include "trainer_impl.h"

#include "algo/rl_math.h"
#include "core/batch.h"
#include "core/clock.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* DAPO dynamic sampling: what a step's batches add up to. The reward's
 * figures are summed over every sample generated (as rlpi_train_reward_summary
 * and rlpi_train_episode_summary sum them over one batch); the metrics'
 * rates and means are weighted by completions, as reduce_scores does. */
typedef struct score_pool {
    uint64_t completions, tokens, truncated, valid;
    uint64_t errors, timeouts, nonfinite, crashed;
    double sum, sq, lo, hi;
    double rate[RLP_TRAINER_MAX_METRICS], mean[RLP_TRAINER_MAX_METRICS], mean_w[RLP_TRAINER_MAX_METRICS];
    uint64_t episodes, turns, with_call, tool_calls, tool_errors, tool_timeouts;
    uint64_t ep_truncated, ep_max_turns, ep_failed, ep_tokens, masked;
    uint32_t turns_max;
    double tool_seconds;
} score_pool;

static void pool_add(score_pool *p, const rlp_trainer *t, const rlp_batch *b, const rlp_step_record *br)
{
    size_t n = 0;
    rlp_batch_size(&n, b);
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&tr, b, i))
            continue;
        p->completions++;
        p->tokens += tr.n_completion_tokens;
        p->truncated += tr.finish_reason == RLP_FINISH_LENGTH;
        if (tr.valid && !isnan(tr.reward)) {
            p->valid++;
            p->sum += tr.reward;
            p->sq += (double)tr.reward * tr.reward;
            p->lo = fmin(p->lo, tr.reward);
            p->hi = fmax(p->hi, tr.reward);
        }
        if (!tr.has_episode)
            continue;
        const rlp_episode_stats *e = &tr.episode;
        p->episodes++;
        p->turns += e->turns;
        p->turns_max = e->turns > p->turns_max ? e->turns : p->turns_max;
        p->with_call += e->tool_calls > 0;
        p->tool_calls += e->tool_calls;
        p->tool_errors += e->tool_errors;
        p->tool_timeouts += e->tool_timeouts;
        p->tool_seconds += e->tool_seconds;
        p->ep_truncated += e->end == RLP_EPISODE_BUDGET;
        p->ep_max_turns += e->end == RLP_EPISODE_MAX_TURNS;
        p->ep_failed += e->end == RLP_EPISODE_ERROR;
        p->ep_tokens += tr.n_completion_tokens;
        for (size_t k = 0; tr.loss_mask && k < tr.n_completion_tokens; k++)
            p->masked += !tr.loss_mask[k];
    }
    p->errors += br->reward_errors;
    p->timeouts += br->reward_timeouts;
    p->nonfinite += br->reward_nonfinite;
    p->crashed += br->reward_crashed;
    for (size_t i = 0; i < t->n_metrics; i++) {
        p->rate[i] += isnan(br->metric_rate[i]) ? 0 : br->metric_rate[i] * (double)n;
        if (!isnan(br->metric_mean[i])) {
            p->mean[i] += br->metric_mean[i] * (double)n;
            p->mean_w[i] += (double)n;
        }
    }
}

static void pool_finish(const score_pool *p, const rlp_trainer *t, rlp_step_record *r)
{
    r->completions = p->completions;
    r->completion_tokens = p->tokens;
    r->truncated = p->truncated;
    r->reward_valid = p->valid;
    if (p->valid) {
        r->reward_mean = p->sum / (double)p->valid;
        r->reward_std = p->valid > 1 ? sqrt(fmax(0, (p->sq - p->sum * r->reward_mean) / (double)(p->valid - 1))) : 0;
        r->reward_min = p->lo;
        r->reward_max = p->hi;
    } else {
        r->reward_mean = r->reward_std = r->reward_min = r->reward_max = NAN;
    }
    r->reward_errors = p->errors;
    r->reward_timeouts = p->timeouts;
    r->reward_nonfinite = p->nonfinite;
    r->reward_crashed = p->crashed;
    for (size_t i = 0; i < t->n_metrics; i++) {
        r->metric_rate[i] = p->completions ? p->rate[i] / (double)p->completions : NAN;
        r->metric_mean[i] = p->mean_w[i] > 0 ? p->mean[i] / p->mean_w[i] : NAN;
    }
    r->episodes = p->episodes;
    r->turns_mean = p->episodes ? (double)p->turns / (double)p->episodes : NAN;
    r->turns_max = p->turns_max;
    r->tool_call_rate = p->episodes ? (double)p->with_call / (double)p->episodes : NAN;
    r->tool_calls = p->tool_calls;
    r->tool_errors = p->tool_errors;
    r->tool_timeouts = p->tool_timeouts;
    r->tool_seconds = p->tool_seconds;
    r->masked_token_share = p->ep_tokens ? (double)p->masked / (double)p->ep_tokens : NAN;
    r->episodes_truncated = p->ep_truncated;
    r->episodes_max_turns = p->ep_max_turns;
    r->episodes_failed = p->ep_failed;
}

/* Whether the group items[0 … n) carries no signal for the RL step's
 * filter_equal_groups (rl_step.c): its trainable trajectories (valid, with
 * prompt and model tokens) are fewer than 2, or their shaped rewards (the
 * reward plus DAPO's overlong penalty) are all equal. */
static int group_all_equal(const rlp_trainer *t, const rlpi_traj *items, size_t n)
{
    size_t used = 0;
    float first = 0;
    int equal = 1;
    for (size_t j = 0; j < n; j++) {
        const rlpi_traj *tr = &items[j];
        size_t model = rlpi_traj_model_tokens(tr);
        if (!tr->valid || tr->n_tokens == 0 || tr->n_prompt == 0 || model == 0)
            continue;
        float r = tr->reward + rlpi_overlong_penalty((uint32_t)model, t->o.rl.overlong_max, t->o.rl.overlong_cache);
        if (used++ == 0)
            first = r;
        else
            equal &= r == first;
    }
    return used < 2 || equal;
}

/* Moves the groups of @p b (prompt g of @p set is its g-th run of samples
 * sharing a group_id) whose rewards are not all equal into @p keep, up to
 * prompts_per_step kept in all (*kept), with their prompts' record indices
 * in t->prompt_ids; counts the all-equal ones in *dropped. Unequal groups
 * beyond prompts_per_step are left behind (surplus, not counted). */
static int keep_groups(rlp_trainer *t, rlp_batch *keep, rlp_batch *b, const rlp_prompt_set *set, size_t *kept,
                       uint64_t *dropped, rlp_step_record *rec)
{
    size_t np = 0, g = 0;
    rlp_prompt_set_size(&np, set);
    for (size_t i = 0; i < b->n; g++) {
        size_t j = i + 1;
        while (j < b->n && b->items[j].group_id == b->items[i].group_id)
            j++;
        if (g >= np)
            return rlpi_error_set(RLP_E_INTERNAL, "dynamic sampling: more sample groups than the %zu prompts", np);
        if (group_all_equal(t, &b->items[i], j - i)) {
            (*dropped)++;
        } else if (*kept < t->o.prompts_per_step) {
            rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
            int rc = rlp_prompt_set_item(&it, set, g);
            if (!rc)
                rc = rlpi_batch_reserve(keep, j - i); /* then the group moves whole */
            if (rc)
                return rlpi_error_wrap("dynamic sampling");
            if (*kept == 0)
                rec->epoch = it.epoch;
            t->prompt_ids[(*kept)++] = it.index;
            for (size_t k = i; k < j; k++)
                rlpi_batch_take(keep, &b->items[k]);
        }
        i = j;
    }
    if (g != np)
        return rlpi_error_set(RLP_E_INTERNAL, "dynamic sampling: %zu sample groups for %zu prompts", g, np);
    return RLP_OK;
}

/* SYNC and PULL with filter_equal_groups and max_gen_batches (one rank):
 * batches of prompts_per_step prompts until prompts_per_step groups have
 * unequal rewards (DAPO §3.2, verl's max_num_gen_batches). The record's
 * prompts are the kept groups'; its reward figures cover every sample
 * generated. Batch j > 0 of step seed s samples with seed mix(s, j). */
int rlpi_train_collect_dynamic(rlp_trainer *t, rlp_rollout_engine *e, uint64_t seed, double t0,
                               rlp_step_record *rec, rlp_batch **out)
{
    const uint32_t want = t->o.prompts_per_step, cap = t->o.max_gen_batches;
    rlp_batch *keep = NULL;
    int rc = rlpi_train_keep_prompt_ids(t, want);
    if (!rc && (rc = rlp_batch_create(&keep)))
        rlpi_error_wrap("dynamic sampling");
    if (rc)
        return rc;
    score_pool pool = {.lo = INFINITY, .hi = -INFINITY};
    size_t kept = 0;
    uint64_t dropped = 0;
    uint32_t batches = 0;
    double gen_s = 0, score_s = 0;
    while (!rc && kept < want && batches < cap) {
        double tb = batches ? rlpi_now_s() : t0, t1 = tb;
        rlp_step_record br;
        memset(&br, 0, sizeof br);
        for (size_t i = 0; i < RLP_TRAINER_MAX_METRICS; i++)
            br.metric_mean[i] = br.metric_rate[i] = NAN;
        rlp_prompt_set *set = NULL;
        rlp_batch *b = NULL;
        rc = rlpi_train_gen_batch(t, e, batches ? rlpi_train_mix_seed(seed, batches) : seed, &br, &b, &set, &t1);
        double t2 = rlpi_now_s();
        gen_s += t1 - tb;
        score_s += t2 - t1;
        if (rc)
            break;
        batches++;
        pool_add(&pool, t, b, &br);
        rc = keep_groups(t, keep, b, set, &kept, &dropped, rec);
        rlp_batch_free(b);
        rlp_prompt_set_free(set);
    }
    rec->gen_batches = batches;
    rec->dynamic_dropped_groups = dropped;
    if (!rc && kept < want)
        rc = rlpi_error_set(RLP_E_STATE, "max_gen_batches: %u batches of %u prompts gave %zu groups with unequal "
                            "rewards of the %u a step trains on (%llu groups had all-equal rewards); raise "
                            "max_gen_batches, or set it to 0 to train on the groups left after filtering",
                            batches, want, kept, want, (unsigned long long)dropped);
    if (rc) {
        rlp_batch_free(keep);
        return rc;
    }
    pool_finish(&pool, t, rec);
    rec->n_prompts = kept;
    rec->rollout_seconds = gen_s;
    rec->reward_seconds = score_s;
    rec->trainer_idle_seconds = rlpi_now_s() - t0;
    rec->rollout_tokens = rec->completion_tokens; /* every sample generated */
    *out = keep;
    return RLP_OK;
}
