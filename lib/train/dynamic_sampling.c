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

/* What a step's batches add up to beyond their samples (which stay in one
 * batch of everything generated, summarised by rlpi_train_reward_summary):
 * the reward's failure counts, summed, and the metrics' rates and means,
 * weighted by completions as reduce_scores does. */
typedef struct score_pool {
    uint64_t errors, timeouts, nonfinite, crashed, completions;
    double rate[RLP_TRAINER_MAX_METRICS], mean[RLP_TRAINER_MAX_METRICS], mean_w[RLP_TRAINER_MAX_METRICS];
} score_pool;

static void pool_add(score_pool *p, const rlp_trainer *t, const rlp_step_record *br)
{
    double n = (double)br->completions;
    p->completions += br->completions;
    p->errors += br->reward_errors;
    p->timeouts += br->reward_timeouts;
    p->nonfinite += br->reward_nonfinite;
    p->crashed += br->reward_crashed;
    for (size_t i = 0; i < t->n_metrics; i++) {
        p->rate[i] += isnan(br->metric_rate[i]) ? 0 : br->metric_rate[i] * n;
        if (!isnan(br->metric_mean[i])) {
            p->mean[i] += br->metric_mean[i] * n;
            p->mean_w[i] += n;
        }
    }
}

static void pool_finish(const score_pool *p, const rlp_trainer *t, const rlp_batch *all, rlp_step_record *r)
{
    rlpi_train_reward_summary(r, all); /* rewards, completions, tokens, episodes: every sample generated */
    r->reward_errors = p->errors;
    r->reward_timeouts = p->timeouts;
    r->reward_nonfinite = p->nonfinite;
    r->reward_crashed = p->crashed;
    for (size_t i = 0; i < t->n_metrics; i++) {
        r->metric_rate[i] = p->completions ? p->rate[i] / (double)p->completions : NAN;
        r->metric_mean[i] = p->mean_w[i] > 0 ? p->mean[i] / p->mean_w[i] : NAN;
    }
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

/* Copies the groups of @p b (prompt g of @p set is its g-th run of samples
 * sharing a group_id) whose rewards are not all equal into @p keep, up to
 * prompts_per_step kept in all (*kept), with their prompts' record indices
 * in t->prompt_ids; counts the all-equal ones in *dropped. Unequal groups
 * beyond prompts_per_step are left out (surplus, not counted). Then moves
 * every sample of @p b into @p all. */
static int keep_groups(rlp_trainer *t, rlp_batch *keep, rlp_batch *all, rlp_batch *b, const rlp_prompt_set *set,
                       size_t *kept, uint64_t *dropped, rlp_step_record *rec)
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
                rc = rlpi_batch_reserve(keep, j - i); /* then the group goes in whole */
            for (size_t k = i; !rc && k < j; k++) {
                rlpi_traj copy;
                if (!(rc = rlpi_traj_copy(&copy, &b->items[k])))
                    rlpi_batch_take(keep, &copy);
            }
            if (rc)
                return rlpi_error_wrap("dynamic sampling");
            if (*kept == 0)
                rec->epoch = it.epoch;
            t->prompt_ids[(*kept)++] = it.index;
        }
        i = j;
    }
    if (g != np)
        return rlpi_error_set(RLP_E_INTERNAL, "dynamic sampling: %zu sample groups for %zu prompts", g, np);
    int rc = rlpi_batch_reserve(all, b->n);
    for (size_t k = 0; !rc && k < b->n; k++)
        rlpi_batch_take(all, &b->items[k]);
    return rc ? rlpi_error_wrap("dynamic sampling") : RLP_OK;
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
    rlp_batch *keep = NULL, *all = NULL;
    int rc = rlpi_train_keep_prompt_ids(t, want);
    if (!rc && ((rc = rlp_batch_create(&keep)) || (rc = rlp_batch_create(&all))))
        rlpi_error_wrap("dynamic sampling");
    if (rc) {
        rlp_batch_free(keep);
        return rc;
    }
    score_pool pool = {0};
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
        pool_add(&pool, t, &br);
        rc = keep_groups(t, keep, all, b, set, &kept, &dropped, rec);
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
    if (!rc)
        pool_finish(&pool, t, all, rec);
    rlp_batch_free(all);
    if (rc) {
        rlp_batch_free(keep);
        return rc;
    }
    rec->n_prompts = kept;
    rec->rollout_seconds = gen_s;
    rec->reward_seconds = score_s;
    rec->trainer_idle_seconds = rlpi_now_s() - t0;
    rec->rollout_tokens = rec->completion_tokens; /* every sample generated */
    *out = keep;
    return RLP_OK;
}
