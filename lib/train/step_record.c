/* The step record: what the reward and the metrics say of a step's scored
 * batch, and the record's JSON form (the keys of `rlpost train`'s
 * metrics.jsonl). */
#include "train_internal.h"
#include "trainer_impl.h"

#include "core/error.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void rlpi_train_reward_summary(rlp_step_record *rec, const rlp_batch *batch)
{
    size_t n = 0, valid = 0;
    rlp_batch_size(&n, batch);
    double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
    rec->completions = n;
    rec->completion_tokens = rec->truncated = 0;
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, batch, i);
        rec->completion_tokens += t.n_completion_tokens;
        rec->truncated += t.finish_reason == RLP_FINISH_LENGTH;
        if (!t.valid || isnan(t.reward))
            continue;
        valid++;
        sum += t.reward;
        sq += (double)t.reward * t.reward;
        lo = fmin(lo, t.reward);
        hi = fmax(hi, t.reward);
    }
    rlpi_train_episode_summary(rec, batch);
    rec->reward_valid = valid;
    if (valid) {
        rec->reward_mean = sum / (double)valid;
        rec->reward_std = valid > 1 ? sqrt(fmax(0, (sq - sum * rec->reward_mean) / (double)(valid - 1))) : 0;
        rec->reward_min = lo;
        rec->reward_max = hi;
    } else {
        rec->reward_mean = rec->reward_std = rec->reward_min = rec->reward_max = NAN;
    }
}

void rlpi_train_episode_summary(rlp_step_record *rec, const rlp_batch *batch)
{
    size_t n = 0;
    rlp_batch_size(&n, batch);
    uint64_t eps = 0, turns = 0, with_call = 0, masked = 0, tokens = 0;
    rec->turns_max = 0;
    rec->tool_calls = rec->tool_errors = rec->tool_timeouts = 0;
    rec->episodes_truncated = rec->episodes_max_turns = rec->episodes_failed = 0;
    rec->tool_seconds = 0;
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&t, batch, i) || !t.has_episode)
            continue;
        const rlp_episode_stats *e = &t.episode;
        eps++;
        turns += e->turns;
        rec->turns_max = e->turns > rec->turns_max ? e->turns : rec->turns_max;
        with_call += e->tool_calls > 0;
        rec->tool_calls += e->tool_calls;
        rec->tool_errors += e->tool_errors;
        rec->tool_timeouts += e->tool_timeouts;
        rec->tool_seconds += e->tool_seconds;
        rec->episodes_truncated += e->end == RLP_EPISODE_BUDGET;
        rec->episodes_max_turns += e->end == RLP_EPISODE_MAX_TURNS;
        rec->episodes_failed += e->end == RLP_EPISODE_ERROR;
        tokens += t.n_completion_tokens;
        for (size_t k = 0; t.loss_mask && k < t.n_completion_tokens; k++)
            masked += !t.loss_mask[k];
    }
    rec->episodes = eps;
    rec->turns_mean = eps ? (double)turns / (double)eps : NAN;
    rec->tool_call_rate = eps ? (double)with_call / (double)eps : NAN;
    rec->masked_token_share = tokens ? (double)masked / (double)tokens : NAN;
}

int rlpi_train_score_metric(rlp_reward_fn *fn, rlp_batch *batch, double thr, double *rate, double *mean)
{
    rlp_reward_stats st = {.version = RLP_REWARD_STATS_VERSION};
    int rc = rlp_reward_fn_score(fn, batch, &st);
    if (rc)
        return rc;
    size_t n = 0, hit = 0, valid = 0;
    double sum = 0;
    rlp_batch_size(&n, batch);
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, batch, i);
        if (!t.valid || isnan(t.reward))
            continue;
        valid++;
        sum += t.reward;
        hit += t.reward >= thr;
    }
    *rate = n ? (double)hit / (double)n : NAN;
    *mean = valid ? sum / (double)valid : NAN;
    return RLP_OK;
}

int rlpi_train_batch_copy(rlp_batch **out, const rlp_batch *batch)
{
    size_t n = 0;
    rlp_batch_size(&n, batch);
    rlp_batch *copy;
    int rc = rlp_batch_create(&copy);
    for (size_t i = 0; !rc && i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if (!(rc = rlp_batch_get(&t, batch, i)))
            rc = rlp_batch_append(copy, &t);
    }
    if (rc) {
        rlp_batch_free(copy);
        return rc;
    }
    *out = copy;
    return RLP_OK;
}

static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *juint(uint64_t v)
{
    return json_integer((json_int_t)v);
}

char *rlpi_train_record_json(const rlp_trainer *t, const rlp_step_record *r)
{
    json_t *m = json_object(), *ids = json_array();
    if (!m || !ids) {
        json_decref(m);
        json_decref(ids);
        return NULL;
    }
    for (size_t i = 0; i < r->n_prompts; i++)
        json_array_append_new(ids, juint(r->prompt_index[i]));
    const rlp_rl_stats *rs = &r->rl;
    json_object_set_new(m, "step", juint(r->step));
    json_object_set_new(m, "policy_version", juint(rs->policy_version));
    json_object_set_new(m, "epoch", juint(r->epoch));
    json_object_set_new(m, "prompt_index", ids);
    json_object_set_new(m, "sampling_seed", juint(r->sampling_seed));
    json_object_set_new(m, "reward_mean", jnum(r->reward_mean));
    json_object_set_new(m, "reward_std", jnum(r->reward_std));
    json_object_set_new(m, "reward_min", jnum(r->reward_min));
    json_object_set_new(m, "reward_max", jnum(r->reward_max));
    json_object_set_new(m, "reward_valid", juint(r->reward_valid));
    json_object_set_new(m, "reward_errors", juint(r->reward_errors));
    json_object_set_new(m, "reward_timeouts", juint(r->reward_timeouts));
    json_object_set_new(m, "reward_nonfinite", juint(r->reward_nonfinite));
    json_object_set_new(m, "reward_crashed", juint(r->reward_crashed));
    for (size_t i = 0; i < t->n_metrics; i++) {
        if (t->metrics[i].rate_key)
            json_object_set_new(m, t->metrics[i].rate_key, jnum(r->metric_rate[i]));
        if (t->metrics[i].mean_key)
            json_object_set_new(m, t->metrics[i].mean_key, jnum(r->metric_mean[i]));
    }
    json_object_set_new(m, "completions", juint(r->completions));
    json_object_set_new(m, "completion_tokens", juint(r->completion_tokens));
    json_object_set_new(m, "truncated", juint(r->truncated));
    json_object_set_new(m, "loss", jnum(rs->loss));
    json_object_set_new(m, "pg_loss", jnum(rs->pg_loss));
    json_object_set_new(m, "kl", jnum(rs->kl));
    json_object_set_new(m, "entropy", jnum(rs->entropy));
    json_object_set_new(m, "clip_frac_low", jnum(rs->clip_frac_low));
    json_object_set_new(m, "clip_frac_high", jnum(rs->clip_frac_high));
    json_object_set_new(m, "ratio_mean", jnum(rs->ratio_mean));
    json_object_set_new(m, "ratio_max", jnum(rs->ratio_max));
    json_object_set_new(m, "behav_weight_mean", jnum(rs->behav_weight_mean));
    json_object_set_new(m, "behav_weight_max", jnum(rs->behav_weight_max));
    json_object_set_new(m, "mismatch_kl", jnum(r->mismatch_kl));
    json_object_set_new(m, "mismatch_is_mean", jnum(r->mismatch_is_mean));
    json_object_set_new(m, "mismatch_is_min", jnum(r->mismatch_is_min));
    json_object_set_new(m, "mismatch_is_max", jnum(r->mismatch_is_max));
    json_object_set_new(m, "mismatch_abs_mean", jnum(r->mismatch_abs_mean));
    json_object_set_new(m, "gen_batches", juint(r->gen_batches));
    json_object_set_new(m, "dynamic_dropped_groups", juint(r->dynamic_dropped_groups));
    json_object_set_new(m, "overlong_filtered", juint(r->overlong_filtered));
    json_object_set_new(m, "rollout_is_mean", jnum(r->rollout_is_mean));
    json_object_set_new(m, "rollout_is_min", jnum(r->rollout_is_min));
    json_object_set_new(m, "rollout_is_max", jnum(r->rollout_is_max));
    json_object_set_new(m, "rollout_is_truncated", jnum(r->rollout_is_truncated));
    json_object_set_new(m, "rollout_is_ess", jnum(r->rollout_is_ess));
    json_object_set_new(m, "rollout_rs_masked", jnum(r->rollout_rs_masked));
    json_object_set_new(m, "rollout_rs_seq_masked", jnum(r->rollout_rs_seq_masked));
    json_object_set_new(m, "rollout_veto", jnum(r->rollout_veto));
    json_object_set_new(m, "grad_norm", jnum(rs->grad_norm));
    json_object_set_new(m, "adv_mean", jnum(rs->adv_mean));
    json_object_set_new(m, "adv_std", jnum(rs->adv_std));
    json_object_set_new(m, "train_reward_mean", jnum(rs->reward_mean));
    json_object_set_new(m, "staleness_mean", jnum(rs->staleness_mean));
    json_object_set_new(m, "staleness_max", jnum(rs->staleness_max));
    json_object_set_new(m, "n_seqs", juint(rs->n_seqs));
    json_object_set_new(m, "n_tokens", juint(rs->n_tokens));
    json_object_set_new(m, "n_groups", juint(rs->n_groups));
    json_object_set_new(m, "filtered_groups", juint(rs->filtered_groups));
    json_object_set_new(m, "zero_std_groups", juint(rs->zero_std_groups));
    json_object_set_new(m, "invalid_seqs", juint(rs->invalid_seqs));
    json_object_set_new(m, "optimizer_steps", juint(rs->optimizer_steps));
    json_object_set_new(m, "skipped_steps", juint(rs->skipped_steps));
    json_object_set_new(m, "buffer_dropped", juint(r->buffer_dropped));
    json_object_set_new(m, "buffer_dropped_total", juint(r->buffer_dropped_total));
    json_object_set_new(m, "buffer_size", juint(r->buffer_size));
    json_object_set_new(m, "rollout_seconds", json_real(r->rollout_seconds));
    json_object_set_new(m, "reward_seconds", json_real(r->reward_seconds));
    json_object_set_new(m, "train_seconds", json_real(r->train_seconds));
    json_object_set_new(m, "publish_seconds", json_real(r->publish_seconds));
    json_object_set_new(m, "publish_bytes", juint(r->publish_bytes));
    uint64_t n_trainable = 0;
    rlp_policy_n_trainable(&n_trainable, t->policy);
    json_object_set_new(m, "trainable_params", juint(n_trainable));
    json_object_set_new(m, "trainer_idle_seconds", json_real(r->trainer_idle_seconds));
    json_object_set_new(m, "rollout_idle_seconds", json_real(r->rollout_idle_seconds));
    json_object_set_new(m, "step_seconds", json_real(r->step_seconds));
    json_object_set_new(m, "tokens_per_second", jnum(r->tokens_per_second));
    if (t->critic) { /* PPO with a critic only */
        json_object_set_new(m, "value_loss", jnum(r->value_loss));
        json_object_set_new(m, "value_clipfrac", jnum(r->value_clipfrac));
        json_object_set_new(m, "values_mean", jnum(r->values_mean));
        json_object_set_new(m, "returns_mean", jnum(r->returns_mean));
        json_object_set_new(m, "value_explained_var", jnum(r->value_explained_var));
        json_object_set_new(m, "critic_grad_norm", jnum(r->critic_grad_norm));
        json_object_set_new(m, "critic_seconds", jnum(r->critic_seconds));
    }
        if (r->episodes) { /* multi-turn runs only: single-turn records keep their keys */
        json_object_set_new(m, "episodes", juint(r->episodes));
        json_object_set_new(m, "turns_mean", jnum(r->turns_mean));
        json_object_set_new(m, "turns_max", juint(r->turns_max));
        json_object_set_new(m, "tool_call_rate", jnum(r->tool_call_rate));
        json_object_set_new(m, "tool_calls", juint(r->tool_calls));
        json_object_set_new(m, "tool_errors", juint(r->tool_errors));
        json_object_set_new(m, "tool_timeouts", juint(r->tool_timeouts));
        json_object_set_new(m, "tool_seconds", jnum(r->tool_seconds));
        json_object_set_new(m, "masked_token_share", jnum(r->masked_token_share));
        json_object_set_new(m, "episodes_truncated", juint(r->episodes_truncated));
        json_object_set_new(m, "episodes_max_turns", juint(r->episodes_max_turns));
        json_object_set_new(m, "episodes_failed", juint(r->episodes_failed));
    }
    char *text = json_dumps(m, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(m);
    return text;
}
