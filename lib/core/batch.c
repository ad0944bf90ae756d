/* rlp_batch: an array of owned trajectories with copy-in (append), view-out
 * (get) accessors. Validation lives here so every producer (local engine,
 * remote engine, hosts, Python) is held to the same rules. */
#include "core/batch.h"

#include "core/error.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void rlpi_traj_clear(rlpi_traj *t)
{
    if (!t)
        return;
    free(t->prompt);
    free(t->tokens);
    free(t->logprobs);
    free(t->versions);
    free(t->prompt_text);
    free(t->text);
    free(t->error);
    free(t->metadata);
    free(t->token_rewards);
    free(t->loss_mask);
    memset(t, 0, sizeof *t);
}

int rlpi_traj_push_token(rlpi_traj *t, int32_t token, float logprob, uint64_t version)
{
    if (t->n_tokens == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        int32_t *tok = realloc(t->tokens, cap * sizeof *tok);
        if (tok)
            t->tokens = tok;
        float *lp = realloc(t->logprobs, cap * sizeof *lp);
        if (lp)
            t->logprobs = lp;
        uint64_t *ver = realloc(t->versions, cap * sizeof *ver);
        if (ver)
            t->versions = ver;
        uint8_t *mask = t->loss_mask;
        if (mask && (mask = realloc(t->loss_mask, cap)) != NULL)
            t->loss_mask = mask;
        if (!tok || !lp || !ver || (t->loss_mask && !mask))
            return rlpi_error_set(RLP_E_NOMEM, "trajectory: out of memory");
        t->cap = cap;
    }
    t->tokens[t->n_tokens] = token;
    t->logprobs[t->n_tokens] = logprob;
    t->versions[t->n_tokens] = version;
    if (t->loss_mask)
        t->loss_mask[t->n_tokens] = 1;
    t->n_tokens++;
    return RLP_OK;
}

int rlpi_traj_push_observation(rlpi_traj *t, const int32_t *ids, size_t n, uint64_t version)
{
    if (n == 0)
        return RLP_OK;
    if (!t->loss_mask) {
        t->loss_mask = malloc(t->cap ? t->cap : 1);
        if (!t->loss_mask)
            return rlpi_error_set(RLP_E_NOMEM, "trajectory: out of memory");
        memset(t->loss_mask, 1, t->cap ? t->cap : 1);
    }
    for (size_t i = 0; i < n; i++) {
        int rc = rlpi_traj_push_token(t, ids[i], 0.0f, version);
        if (rc)
            return rc;
        t->loss_mask[t->n_tokens - 1] = 0;
    }
    return RLP_OK;
}

int rlpi_batch_reserve(rlp_batch *b, size_t more)
{
    if (b->n + more <= b->cap)
        return RLP_OK;
    if (more > SIZE_MAX / sizeof(rlpi_traj) - b->n)
        return rlpi_error_set(RLP_E_OVERFLOW, "batch: too many trajectories");
    size_t cap = b->cap ? b->cap : 8;
    while (cap < b->n + more)
        cap = cap > SIZE_MAX / (2 * sizeof(rlpi_traj)) ? b->n + more : 2 * cap;
    rlpi_traj *items = realloc(b->items, cap * sizeof *items);
    if (!items)
        return rlpi_error_set(RLP_E_NOMEM, "batch: out of memory");
    b->items = items;
    b->cap = cap;
    return RLP_OK;
}

int rlpi_batch_take(rlp_batch *b, rlpi_traj *t)
{
    int rc = rlpi_batch_reserve(b, 1);
    if (rc)
        return rc;
    b->items[b->n++] = *t;
    memset(t, 0, sizeof *t);
    return RLP_OK;
}

static int dup_mem(void **dst, const void *src, size_t n, size_t elem)
{
    *dst = NULL;
    if (!src || n == 0)
        return RLP_OK;
    *dst = malloc(n * elem);
    if (!*dst)
        return rlpi_error_set(RLP_E_NOMEM, "batch: out of memory");
    memcpy(*dst, src, n * elem);
    return RLP_OK;
}

static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return RLP_OK;
    *dst = strdup(src);
    return *dst ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "batch: out of memory");
}

int rlpi_traj_copy(rlpi_traj *dst, const rlpi_traj *src)
{
    *dst = *src;
    dst->prompt = NULL;
    dst->tokens = NULL;
    dst->logprobs = NULL;
    dst->versions = NULL;
    dst->prompt_text = dst->text = dst->error = dst->metadata = NULL;
    dst->token_rewards = NULL;
    dst->loss_mask = NULL;
    dst->cap = src->n_tokens;
    int rc;
    if ((rc = dup_mem((void **)&dst->prompt, src->prompt, src->n_prompt, sizeof(int32_t))) ||
        (rc = dup_mem((void **)&dst->tokens, src->tokens, src->n_tokens, sizeof(int32_t))) ||
        (rc = dup_mem((void **)&dst->logprobs, src->logprobs, src->n_tokens, sizeof(float))) ||
        (rc = dup_mem((void **)&dst->versions, src->versions, src->n_tokens, sizeof(uint64_t))) ||
        (rc = dup_str(&dst->prompt_text, src->prompt_text)) || (rc = dup_str(&dst->text, src->text)) ||
        (rc = dup_str(&dst->error, src->error)) || (rc = dup_str(&dst->metadata, src->metadata)) ||
        (rc = dup_mem((void **)&dst->token_rewards, src->token_rewards, src->n_tokens, sizeof(float))) ||
        (rc = dup_mem((void **)&dst->loss_mask, src->loss_mask, src->n_tokens, 1))) {
        rlpi_traj_clear(dst);
        return rc;
    }
    return RLP_OK;
}

int rlpi_provenance_read(rlp_provenance *out, const rlp_provenance *p, const char *what)
{
    if (!p)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: provenance is NULL", what);
    if (p->version < 1 || p->version > RLP_PROVENANCE_VERSION)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "%s: provenance version %u is unknown (set it to RLP_PROVENANCE_VERSION = %u)", what,
                              p->version, RLP_PROVENANCE_VERSION);
    /* version 1 has every field this library knows */
    memset(out, 0, sizeof *out);
    out->version = RLP_PROVENANCE_VERSION;
    out->prompt_index = p->prompt_index;
    out->epoch = p->epoch;
    out->position = p->position;
    out->sampling_seed = p->sampling_seed;
    out->batch = p->batch;
    return RLP_OK;
}

/* ------------------------------------------------------------ public API */

int rlp_batch_create(rlp_batch **out)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    rlp_batch *b = calloc(1, sizeof *b);
    if (!b)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_batch_create: out of memory");
    *out = b;
    return RLP_OK;
}

void rlp_batch_free(rlp_batch *batch)
{
    if (!batch)
        return;
    for (size_t i = 0; i < batch->n; i++)
        rlpi_traj_clear(&batch->items[i]);
    free(batch->items);
    free(batch);
}

int rlp_batch_size(size_t *out_count, const rlp_batch *batch)
{
    RLPI_CHECK_ARG(out_count, "out_count is NULL");
    RLPI_CHECK_ARG(batch, "batch is NULL");
    *out_count = batch->n;
    return RLP_OK;
}

int rlp_batch_get(rlp_trajectory *out, const rlp_batch *batch, size_t index)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(out->version >= 1, "out->version must be set to RLP_TRAJECTORY_VERSION");
    if (index >= batch->n)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_batch_get: index %zu outside the batch of %zu", index,
                              batch->n);
    const rlpi_traj *t = &batch->items[index];
    rlp_trajectory v;
    memset(&v, 0, sizeof v);
    v.version = RLP_TRAJECTORY_VERSION;
    v.group_id = t->group_id;
    v.prompt_tokens = t->prompt;
    v.n_prompt_tokens = t->n_prompt;
    v.completion_tokens = t->tokens;
    v.n_completion_tokens = t->n_tokens;
    v.logprobs = t->logprobs;
    v.token_versions = t->versions;
    v.prompt_text = t->prompt_text;
    v.completion_text = t->text ? t->text : "";
    v.policy_version = t->policy_version;
    v.finish_reason = t->finish_reason;
    v.stop_index = t->stop_index;
    v.temperature = t->temperature;
    v.reward = t->reward;
    v.valid = t->valid;
    v.error = t->error;
    v.metadata_json = t->metadata;
    v.sample_index = t->sample_index;
    v.token_rewards = t->token_rewards;
    v.has_provenance = t->has_provenance;
    if (t->has_provenance)
        v.provenance = t->provenance;
    v.loss_mask = t->loss_mask;
    v.has_episode = t->has_episode;
    if (t->has_episode)
        v.episode = t->episode;
    /* a caller built against an older header gets only the fields it knows:
     * its struct ends where the next version's fields begin */
    size_t n = sizeof v;
    if (out->version < 2) {
        v.version = out->version;
        n = offsetof(rlp_trajectory, has_provenance);
    } else if (out->version < 3) {
        v.version = out->version;
        n = offsetof(rlp_trajectory, loss_mask);
    }
    memcpy(out, &v, n);
    return RLP_OK;
}

int rlp_batch_append(rlp_batch *batch, const rlp_trajectory *traj)
{
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(traj, "traj is NULL");
    RLPI_CHECK_ARG(traj->version >= 1, "traj->version must be set to RLP_TRAJECTORY_VERSION");
    RLPI_CHECK_ARG(traj->n_prompt_tokens == 0 || traj->prompt_tokens, "prompt_tokens is NULL");
    RLPI_CHECK_ARG(traj->n_completion_tokens == 0 || (traj->completion_tokens && traj->logprobs),
                   "completion_tokens or logprobs is NULL");
    RLPI_CHECK_ARG(traj->finish_reason >= RLP_FINISH_NONE && traj->finish_reason <= RLP_FINISH_ERROR,
                   "finish_reason is not an rlp_finish_reason");
    RLPI_CHECK_ARG(!(traj->temperature < 0) && isfinite(traj->temperature), "temperature must be finite and >= 0");
    for (size_t i = 0; i < traj->n_completion_tokens; i++) {
        if (traj->completion_tokens[i] < 0)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_batch_append: completion token %zu has negative id %d", i,
                                  traj->completion_tokens[i]);
        if (!isfinite(traj->logprobs[i]) || traj->logprobs[i] > 0)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_batch_append: logprob %zu is %g (must be finite and <= 0)",
                                  i, (double)traj->logprobs[i]);
    }
    for (size_t i = 0; traj->token_rewards && i < traj->n_completion_tokens; i++)
        if (!isfinite(traj->token_rewards[i]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_batch_append: token reward %zu is not finite", i);
    for (size_t i = 0; i < traj->n_prompt_tokens; i++)
        if (traj->prompt_tokens[i] < 0)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_batch_append: prompt token %zu has negative id %d", i,
                                  traj->prompt_tokens[i]);
    /* the version-3 fields exist only in a version-3 caller's struct */
    const uint8_t *mask = traj->version >= 3 ? traj->loss_mask : NULL;
    for (size_t i = 0; mask && i < traj->n_completion_tokens; i++)
        if (mask[i] > 1)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_batch_append: loss_mask[%zu] is %u (must be 0 or 1)", i,
                                  (unsigned)mask[i]);
    bool has_episode = traj->version >= 3 && traj->has_episode;
    if (has_episode && (traj->episode.version < 1 || traj->episode.end < RLP_EPISODE_RUNNING ||
                        traj->episode.end > RLP_EPISODE_ABORT || !(traj->episode.tool_seconds >= 0)))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "rlp_batch_append: episode needs version >= 1, an rlp_episode_end and tool_seconds >= 0");
    /* the version-2 fields exist only in a version-2 caller's struct */
    bool has_prov = traj->version >= 2 && traj->has_provenance;
    rlp_provenance prov;
    memset(&prov, 0, sizeof prov);
    if (has_prov) {
        int prc = rlpi_provenance_read(&prov, &traj->provenance, "rlp_batch_append");
        if (prc)
            return prc;
    }
    rlpi_traj src = {
        .group_id = traj->group_id,
        .prompt = (int32_t *)traj->prompt_tokens,
        .n_prompt = traj->n_prompt_tokens,
        .tokens = (int32_t *)traj->completion_tokens,
        .logprobs = (float *)traj->logprobs,
        .versions = (uint64_t *)traj->token_versions,
        .n_tokens = traj->n_completion_tokens,
        .prompt_text = (char *)traj->prompt_text,
        .text = (char *)(traj->completion_text ? traj->completion_text : ""),
        .policy_version = traj->policy_version,
        .finish_reason = traj->finish_reason,
        .stop_index = traj->stop_index,
        .temperature = traj->temperature,
        .reward = traj->reward,
        .valid = traj->valid,
        .error = (char *)traj->error,
        .metadata = (char *)traj->metadata_json,
        .sample_index = traj->sample_index,
        .token_rewards = (float *)traj->token_rewards,
        .has_provenance = has_prov,
        .provenance = prov,
        .loss_mask = (uint8_t *)mask,
        .has_episode = has_episode,
    };
    if (has_episode) {
        src.episode = traj->episode;
        src.episode.version = RLP_EPISODE_STATS_VERSION;
    }
    rlpi_traj t;
    int rc = rlpi_traj_copy(&t, &src);
    if (rc)
        return rc;
    if (!traj->token_versions && t.n_tokens) {
        t.versions = malloc(t.n_tokens * sizeof *t.versions);
        if (!t.versions) {
            rlpi_traj_clear(&t);
            return rlpi_error_set(RLP_E_NOMEM, "rlp_batch_append: out of memory");
        }
        for (size_t i = 0; i < t.n_tokens; i++)
            t.versions[i] = traj->policy_version;
    }
    if ((rc = rlpi_batch_take(batch, &t)) != RLP_OK)
        rlpi_traj_clear(&t);
    return rc;
}

int rlp_batch_extend(rlp_batch *dst, rlp_batch *src)
{
    RLPI_CHECK_ARG(dst, "dst is NULL");
    RLPI_CHECK_ARG(src, "src is NULL");
    RLPI_CHECK_ARG(dst != src, "dst and src are the same batch");
    int rc = rlpi_batch_reserve(dst, src->n);
    if (rc)
        return rc;
    memcpy(dst->items + dst->n, src->items, src->n * sizeof *src->items);
    dst->n += src->n;
    src->n = 0;
    return RLP_OK;
}

int rlp_batch_set_reward(rlp_batch *batch, size_t index, float reward)
{
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(index < batch->n, "index outside the batch");
    RLPI_CHECK_ARG(isfinite(reward), "reward is not finite");
    batch->items[index].reward = reward;
    return RLP_OK;
}

int rlp_batch_set_invalid(rlp_batch *batch, size_t index, const char *reason)
{
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(index < batch->n, "index outside the batch");
    char *r = strdup(reason ? reason : "marked invalid");
    if (!r)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_batch_set_invalid: out of memory");
    free(batch->items[index].error);
    batch->items[index].error = r;
    batch->items[index].valid = 0;
    return RLP_OK;
}

int rlp_batch_set_token_rewards(rlp_batch *batch, size_t index, const float *rewards, size_t n)
{
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(index < batch->n, "index outside the batch");
    rlpi_traj *t = &batch->items[index];
    if (!rewards && n == 0) {
        free(t->token_rewards);
        t->token_rewards = NULL;
        return RLP_OK;
    }
    RLPI_CHECK_ARG(rewards, "rewards is NULL");
    if (n != t->n_tokens)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %zu rewards for %zu completion tokens", __func__, n,
                              t->n_tokens);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(rewards[i]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: reward %zu is not finite", __func__, i);
    float *r = malloc((n ? n : 1) * sizeof *r);
    if (!r)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    memcpy(r, rewards, n * sizeof *r);
    free(t->token_rewards);
    t->token_rewards = r;
    return RLP_OK;
}

int rlp_batch_set_provenance(rlp_batch *batch, size_t index, const rlp_provenance *p)
{
    RLPI_CHECK_ARG(batch, "batch is NULL");
    rlp_provenance v;
    int rc = rlpi_provenance_read(&v, p, __func__);
    if (rc)
        return rc;
    if (index >= batch->n)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: index %zu outside the batch of %zu", __func__, index, batch->n);
    batch->items[index].provenance = v;
    batch->items[index].has_provenance = true;
    return RLP_OK;
}

int rlp_batch_set_group_provenance(rlp_batch *batch, uint64_t group_id, const rlp_provenance *p)
{
    RLPI_CHECK_ARG(batch, "batch is NULL");
    rlp_provenance v;
    int rc = rlpi_provenance_read(&v, p, __func__);
    if (rc)
        return rc;
    size_t found = 0;
    for (size_t i = 0; i < batch->n; i++) {
        if (batch->items[i].group_id != group_id)
            continue;
        batch->items[i].provenance = v;
        batch->items[i].has_provenance = true;
        found++;
    }
    if (!found)
        return rlpi_error_set(RLP_E_NOT_FOUND, "%s: no trajectory of the batch (%zu) has group_id %llu", __func__,
                              batch->n, (unsigned long long)group_id);
    return RLP_OK;
}

int rlpi_traj_sequence(const rlpi_traj *t, rlp_sequence *seq, int32_t **ids)
{
    size_t n = t->n_prompt + t->n_tokens;
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return rlpi_error_set(RLP_E_NOMEM, "trajectory: out of memory");
    if (t->n_prompt)
        memcpy(v, t->prompt, t->n_prompt * sizeof *v);
    if (t->n_tokens)
        memcpy(v + t->n_prompt, t->tokens, t->n_tokens * sizeof *v);
    *ids = v;
    *seq = (rlp_sequence){v, (uint32_t)n, (uint32_t)t->n_prompt};
    return RLP_OK;
}
