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
    json_object_set_new(m, "trainer_idle_seconds", json_real(r->trainer_idle_seconds));
    json_object_set_new(m, "rollout_idle_seconds", json_real(r->rollout_idle_seconds));
    json_object_set_new(m, "step_seconds", json_real(r->step_seconds));
    json_object_set_new(m, "tokens_per_second", jnum(r->tokens_per_second));
    char *text = json_dumps(m, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(m);
    return text;
}
