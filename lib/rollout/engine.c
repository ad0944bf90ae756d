/* Public entry points of the rollout engine: options, creation of local
 * and remote engines, the weight-update handshake with a running generate
 * call (see engine.h), version, abort and statistics. Generation itself is
 * in engine_local.c and engine_remote.c. */
#include "rollout/engine.h"

#include "backend/context.h"
#include "core/error.h"
#include "model/lora.h"
#include "model/policy.h"
#include "model/qbase.h"
#include "model/qweights.h"
#include "backend/sampler.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rlp_sampling_options_init(rlp_sampling_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version == RLP_SAMPLING_OPTIONS_VERSION, "unknown version");
    rlp_sampling_options d = RLP_SAMPLING_OPTIONS_INIT;
    *opts = d;
    return RLP_OK;
}

int rlp_rollout_options_init(rlp_rollout_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_ROLLOUT_OPTIONS_VERSION, "unknown version");
    rlp_rollout_options d = RLP_ROLLOUT_OPTIONS_INIT;
    d.version = version;
    /* a version-1 struct ends before `weights` */
    memcpy(opts, &d, version >= 2 ? sizeof d : offsetof(rlp_rollout_options, weights));
    return RLP_OK;
}

int rlp_remote_options_init(rlp_remote_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version == RLP_REMOTE_OPTIONS_VERSION, "unknown version");
    rlp_remote_options d = RLP_REMOTE_OPTIONS_INIT;
    *opts = d;
    return RLP_OK;
}

int rlpi_engine_check_sampling(const rlp_sampling_options *in, rlp_sampling_options *out)
{
    rlp_sampling_options d = RLP_SAMPLING_OPTIONS_INIT;
    if (!in)
        in = &d;
    if (in->version != RLP_SAMPLING_OPTIONS_VERSION)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampling options: unknown version %u", in->version);
    *out = *in;
    if (out->n < 1 || out->n > 65536)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampling options: n = %u (must be 1..65536)", out->n);
    if (out->max_new_tokens < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampling options: max_new_tokens must be >= 1");
    rlpi_sampler_params sp = {out->temperature, out->top_k, out->top_p, out->min_p, out->logprobs_mode};
    int rc = rlpi_sampler_params_check(&sp);
    if (rc)
        return rlpi_error_wrap("sampling options");
    if (out->n_stop && !out->stop)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampling options: stop is NULL with n_stop = %zu", out->n_stop);
    for (size_t i = 0; i < out->n_stop; i++)
        if (!out->stop[i] || !out->stop[i][0])
            return rlpi_error_set(RLP_E_INVALID_ARG, "sampling options: stop[%zu] is NULL or empty", i);
    if (out->n_stop_token_ids && !out->stop_token_ids)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampling options: stop_token_ids is NULL");
    return RLP_OK;
}

int rlpi_engine_prompt_ids(const rlp_rollout_engine *e, const rlp_prompt *p, size_t index, const int32_t **ids,
                           size_t *n, int32_t **owned)
{
    *owned = NULL;
    if (p->tokens) {
        if (p->n_tokens < 1)
            return rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu has no tokens", index);
        *ids = p->tokens;
        *n = p->n_tokens;
        return RLP_OK;
    }
    if (!p->text)
        return rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu has neither tokens nor text", index);
    if (!e->tok)
        return rlpi_error_set(RLP_E_STATE, "prompt %zu is text but the engine has no tokenizer", index);
    size_t len = strlen(p->text), need = 0;
    int rc = rlp_tokenizer_encode(e->tok, p->text, len, RLP_ENCODE_DEFAULT_BOS, NULL, 0, &need);
    if (rc != RLP_OK && rc != RLP_E_OVERFLOW)
        return rlpi_error_wrap("prompt %zu", index);
    if (need < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu encodes to no tokens", index);
    int32_t *buf = malloc(need * sizeof *buf);
    if (!buf)
        return rlpi_error_set(RLP_E_NOMEM, "prompt %zu: out of memory", index);
    if ((rc = rlp_tokenizer_encode(e->tok, p->text, len, RLP_ENCODE_DEFAULT_BOS, buf, need, n)) != RLP_OK) {
        free(buf);
        return rlpi_error_wrap("prompt %zu", index);
    }
    *ids = *owned = buf;
    return RLP_OK;
}

uint64_t rlpi_engine_group_id(const rlp_prompt *p, size_t index, uint64_t base)
{
    /* engine-numbered groups live in the upper half so they never meet a
     * host's own small ids */
    return p->group_id ? p->group_id : (UINT64_C(1) << 63) | (base + index);
}

uint64_t rlpi_engine_stream(uint64_t group, uint32_t j)
{
    /* a bijective mix of (group, j): distinct pairs get distinct streams */
    uint64_t z = group * UINT64_C(0x9E3779B97F4A7C15);
    z ^= z >> 29;
    return (z << 20) ^ (z >> 44) ^ j;
}

static rlp_rollout_engine *engine_new(int kind)
{
    rlp_rollout_engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->kind = kind;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->stats.version = 1;
    return e;
}

int rlp_rollout_engine_create(rlp_rollout_engine **out, rlp_policy *policy, const rlp_rollout_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    if (opts) {
        RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_ROLLOUT_OPTIONS_VERSION,
                       "opts->version is unknown");
        /* a version-1 caller's struct ends before `weights` (F32) */
        memcpy(&o, opts, opts->version >= 2 ? sizeof o : offsetof(rlp_rollout_options, weights));
        o.version = RLP_ROLLOUT_OPTIONS_VERSION;
    }
    RLPI_CHECK_ARG(o.weights >= RLP_ROLLOUT_WEIGHTS_F32 && o.weights <= RLP_ROLLOUT_WEIGHTS_Q4_0,
                   "weights is not an rlp_rollout_weights");
    RLPI_CHECK_ARG(o.max_batch >= 1 && o.max_batch <= 4096, "max_batch must be 1..4096");
    RLPI_CHECK_ARG(o.interrupt_mode >= RLP_INTERRUPT_RECOMPUTE && o.interrupt_mode <= RLP_INTERRUPT_DEFER,
                   "interrupt_mode is not an rlp_interrupt_mode");
    const rlpi_model_config *cfg = rlpi_transformer_config(policy->tf);
    if (o.max_seq_len == 0)
        o.max_seq_len = (uint32_t)(cfg->max_seq_len < 2048 ? cfg->max_seq_len : 2048);
    if (o.max_seq_len < 2 || (int64_t)o.max_seq_len > cfg->max_seq_len)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: max_seq_len %u outside [2, context %d]", __func__,
                              o.max_seq_len, cfg->max_seq_len);
    rlp_rollout_engine *e = engine_new(RLPI_ENGINE_LOCAL);
    if (!e)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    e->opts = o;
    int rc = RLP_OK;
    if (o.share_weights) {
        e->policy = policy;
    } else {
        rc = rlp_policy_clone(&e->policy, policy, 0);
        e->owns_policy = rc == RLP_OK;
    }
    if (!rc) {
        e->version = e->policy->version;
        e->tok = e->policy->tokenizer;
        rc = rlpi_kv_cache_create(&e->kv, e->policy->tf, o.max_batch, o.max_seq_len);
    }
    if (!rc)
        rc = rlpi_engine_make_qweights(e);
    if (rc) {
        rlp_rollout_engine_free(e);
        return rlpi_error_wrap("%s", __func__);
    }
    *out = e;
    return RLP_OK;
}

int rlp_rollout_engine_create_remote(rlp_rollout_engine **out, const rlp_tokenizer *tok,
                                     const rlp_remote_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(opts->version == RLP_REMOTE_OPTIONS_VERSION, "opts->version is unknown");
    RLPI_CHECK_ARG(opts->urls || opts->n_urls == 0, "opts->urls is NULL");
    for (size_t i = 0; i < opts->n_urls; i++)
        RLPI_CHECK_ARG(opts->urls[i] && opts->urls[i][0], "urls[i] is NULL or empty");
    rlp_rollout_engine *e = engine_new(RLPI_ENGINE_REMOTE);
    if (!e)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    e->tok = tok;
    e->ropts = *opts;
    int rc = rlpi_engine_remote_create(e);
    if (rc) {
        rlp_rollout_engine_free(e);
        return rc;
    }
    *out = e;
    return RLP_OK;
}

void rlp_rollout_engine_free(rlp_rollout_engine *engine)
{
    if (!engine)
        return;
    if (engine->kind == RLPI_ENGINE_REMOTE)
        rlpi_engine_remote_destroy(engine);
    rlpi_kv_cache_free(engine->kv);
    rlpi_qweights_free(engine->qw);
    if (engine->owns_policy)
        rlp_policy_free(engine->policy);
    pthread_mutex_destroy(&engine->mu);
    pthread_cond_destroy(&engine->cv);
    free(engine);
}

static int generate(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt *prompts, size_t n_prompts,
                    const rlp_sampling_options *sampling, const rlp_multiturn_options *mt, rlp_stream_fn on_token,
                    void *payload)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(engine, "engine is NULL");
    RLPI_CHECK_ARG(prompts, "prompts is NULL");
    RLPI_CHECK_ARG(n_prompts >= 1, "n_prompts must be >= 1");
    /* every prompt's resolved options: its own, or the call's */
    rlp_sampling_options *sp = calloc(n_prompts, sizeof *sp);
    if (!sp)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    uint64_t total = 0;
    int rc = RLP_OK;
    for (size_t p = 0; !rc && p < n_prompts; p++) {
        rc = rlpi_engine_check_sampling(prompts[p].sampling ? prompts[p].sampling : sampling, &sp[p]);
        if (rc)
            rc = rlpi_error_wrap("%s: prompt %zu", __func__, p);
        total += sp[p].n;
    }
    if (!rc && total > (UINT64_C(1) << 32))
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "%s: %llu samples in one call is too many", __func__,
                            (unsigned long long)total);
    if (rc) {
        free(sp);
        return rc;
    }
    pthread_mutex_lock(&engine->mu);
    bool busy = engine->generating;
    if (!busy) {
        engine->generating = true;
        __atomic_store_n(&engine->abort_requested, 0, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&engine->mu);
    if (busy) {
        free(sp);
        return rlpi_error_set(RLP_E_STATE, "%s: another generate call is running on this engine", __func__);
    }
    rlp_batch *b = NULL;
    rc = rlp_batch_create(&b);
    if (!rc)
        rc = engine->kind == RLPI_ENGINE_LOCAL
                 ? rlpi_engine_local_generate(engine, b, prompts, n_prompts, sp, mt, on_token, payload)
             : mt ? rlpi_engine_remote_episodes(engine, b, prompts, n_prompts, sp, mt, on_token, payload)
                  : rlpi_engine_remote_generate(engine, b, prompts, n_prompts, sp, on_token, payload);
    free(sp);
    pthread_mutex_lock(&engine->mu);
    engine->generating = false;
    pthread_cond_broadcast(&engine->cv);
    pthread_mutex_unlock(&engine->mu);
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    *out = b;
    return RLP_OK;
}

int rlp_rollout_generate(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt *prompts, size_t n_prompts,
                         const rlp_sampling_options *sampling, rlp_stream_fn on_token, void *payload)
{
    return generate(out, engine, prompts, n_prompts, sampling, NULL, on_token, payload);
}

int rlp_rollout_generate_episodes(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt *prompts,
                                  size_t n_prompts, const rlp_sampling_options *sampling,
                                  const rlp_multiturn_options *mt, rlp_stream_fn on_token, void *payload)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(engine, "engine is NULL");
    RLPI_CHECK_ARG(mt, "mt is NULL");
    RLPI_CHECK_ARG(mt->version >= 1 && mt->version <= RLP_MULTITURN_OPTIONS_VERSION,
                   "mt->version must be RLP_MULTITURN_OPTIONS_VERSION");
    RLPI_CHECK_ARG(mt->env, "mt->env is NULL");
    RLPI_CHECK_ARG(mt->max_turns >= 1, "mt->max_turns must be >= 1");
    if (!engine->tok)
        return rlpi_error_set(RLP_E_STATE, "%s: episodes need an engine with a tokenizer (actions are decoded, "
                              "observations encoded)", __func__);
    return generate(out, engine, prompts, n_prompts, sampling, mt, on_token, payload);
}

/* Runs `swap` with the generate loop parked between two steps (or, in
 * DEFER mode, between two generate calls). */
static int with_weights_lock(rlp_rollout_engine *e, int (*swap)(rlp_rollout_engine *, void *), void *arg)
{
    pthread_mutex_lock(&e->mu);
    e->pending++;
    while (e->in_step || (e->opts.interrupt_mode == RLP_INTERRUPT_DEFER && e->generating))
        pthread_cond_wait(&e->cv, &e->mu);
    int rc = swap(e, arg);
    if (rc == RLP_OK)
        e->epoch++;
    e->pending--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

static int copy_weights(rlp_rollout_engine *e, void *arg)
{
    const rlp_policy *src = arg;
    rlpi_buffer *from = rlpi_transformer_params(src->tf), *to = rlpi_transformer_params(e->policy->tf);
    size_t bytes = rlpi_transformer_n_params(src->tf) * sizeof(float);
    /* whole weights: adapters an adapter folder attached belong to the old ones */
    int rc = rlpi_transformer_detach_lora(e->policy->tf);
    if (rc)
        return rc;
    rlpi_lora_base_changed(e->policy->tf); /* whatever follows rewrites the base */
    bool lora = rlpi_transformer_lora_config(src->tf) != NULL;
    bool quantized = rlpi_transformer_base_type(src->tf) != RLPI_GGML_F32;
    if ((lora && from->owner != to->owner) || quantized) {
        /* adapters on another backend, or over a quantized base (its
         * buffer holds one layer's matrices): the merged model through the
         * host */
        rlpi_weights w;
        if ((rc = rlpi_transformer_export(src->tf, &w)) == RLP_OK) {
            rc = rlpi_transformer_set_weights(e->policy->tf, &w);
            rlpi_weights_free(&w);
        }
    } else if (from->owner == to->owner) {
        rc = rlpi_buffer_copy(to, 0, from, 0, bytes);
        /* adapters: the engine decodes the merged model W + s·B·A, made in
         * its own buffer (the base just copied, then one GEMM per projection) */
        if (!rc && lora)
            rc = rlpi_lora_merge_params(src->tf, e->policy->tf);
    } else {
        float *host = malloc(bytes);
        rc = host ? rlpi_buffer_download(from, 0, host, bytes) : rlpi_error_set(RLP_E_NOMEM, "out of memory");
        if (!rc)
            rc = rlpi_buffer_upload(to, 0, host, bytes);
        free(host);
    }
    if (!rc)
        e->version = e->policy->version = src->version;
    return rc;
}

static int local_owned(const rlp_rollout_engine *e, const char *fn)
{
    if (e->kind != RLPI_ENGINE_LOCAL)
        return rlpi_error_set(RLP_E_STATE, "%s: a remote engine's weights are updated on its servers", fn);
    if (!e->owns_policy)
        return rlpi_error_set(RLP_E_STATE, "%s: the engine shares the policy's weights (share_weights = 1)", fn);
    return RLP_OK;
}

int rlp_rollout_engine_update_weights(rlp_rollout_engine *engine, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(engine, "engine is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    int rc = local_owned(engine, __func__);
    if (rc)
        return rc;
    const rlpi_model_config *a = rlpi_transformer_config(policy->tf), *b = rlpi_transformer_config(engine->policy->tf);
    if (rlpi_transformer_n_params(policy->tf) != rlpi_transformer_n_params(engine->policy->tf) ||
        a->n_layers != b->n_layers || a->dim != b->dim || a->vocab_size != b->vocab_size ||
        a->tie_embeddings != b->tie_embeddings)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the policy's architecture differs from the engine's", __func__);
    return with_weights_lock(engine, copy_weights, (void *)policy);
}

typedef struct disk_update {
    rlpi_weights *w;
    uint64_t version;
} disk_update;

static int set_from_disk(rlp_rollout_engine *e, void *arg)
{
    disk_update *u = arg;
    /* whole weights: adapters applied before belong to the old base */
    int rc = rlpi_transformer_detach_lora(e->policy->tf);
    if (!rc)
        rc = rlpi_transformer_set_weights(e->policy->tf, u->w);
    if (!rc) {
        e->version = e->policy->version = u->version;
        e->policy->weights_gen++;
    }
    return rc;
}

typedef struct adapter_update {
    const char *dir;
    uint64_t version;
} adapter_update;

/* A PEFT adapter folder onto the engine's base: attached (inference-only,
 * run unmerged by the decode) or replacing the adapters of the last one;
 * rlpi_lora_load_peft checks everything before it changes anything. */
static int set_adapter_from_disk(rlp_rollout_engine *e, void *arg)
{
    adapter_update *u = arg;
    int rc = rlpi_lora_load_peft(e->policy->tf, u->dir);
    if (!rc) {
        e->version = e->policy->version = u->version;
        e->policy->weights_gen++;
    }
    return rc;
}

int rlp_rollout_engine_load_weights(rlp_rollout_engine *engine, const char *path, uint64_t version)
{
    RLPI_CHECK_ARG(engine, "engine is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    int rc = local_owned(engine, __func__);
    if (rc)
        return rc;
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/adapter_config.json", path);
    if (access(probe, F_OK) == 0) { /* LoRA adapters only (rlp_policy_save_lora): applied to this engine's base */
        adapter_update au = {path, version};
        rc = with_weights_lock(engine, set_adapter_from_disk, &au);
        return rc ? rlpi_error_wrap("%s: %s", __func__, path) : RLP_OK;
    }
    /* read and check outside the lock: generation goes on meanwhile */
    rlpi_model_config cfg;
    rlpi_weights w;
    rc = rlpi_model_load_weights(path, &cfg, &w, NULL);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    /* before the swap: a NaN in the new weights would fail every request after it */
    if ((rc = rlpi_weights_check_finite(&w, path)) != RLP_OK) {
        rlpi_weights_free(&w);
        return rlpi_error_wrap("%s", __func__);
    }
    const rlpi_model_config *cur = rlpi_transformer_config(engine->policy->tf);
    if (cfg.n_layers != cur->n_layers || cfg.dim != cur->dim || cfg.vocab_size != cur->vocab_size ||
        cfg.n_heads != cur->n_heads || cfg.n_kv_heads != cur->n_kv_heads || cfg.ffn_dim != cur->ffn_dim) {
        rlpi_weights_free(&w);
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s has another architecture than the engine's model", __func__,
                              path);
    }
    disk_update u = {&w, version};
    rc = with_weights_lock(engine, set_from_disk, &u);
    rlpi_weights_free(&w);
    return rc ? rlpi_error_wrap("%s: %s", __func__, path) : RLP_OK;
}

int rlp_rollout_engine_version(uint64_t *out_version, const rlp_rollout_engine *engine)
{
    RLPI_CHECK_ARG(out_version, "out_version is NULL");
    RLPI_CHECK_ARG(engine, "engine is NULL");
    rlp_rollout_engine *e = (rlp_rollout_engine *)engine;
    pthread_mutex_lock(&e->mu);
    *out_version = e->kind == RLPI_ENGINE_LOCAL && !e->owns_policy ? e->policy->version : e->version;
    pthread_mutex_unlock(&e->mu);
    return RLP_OK;
}

int rlp_rollout_engine_set_version(rlp_rollout_engine *engine, uint64_t version)
{
    RLPI_CHECK_ARG(engine, "engine is NULL");
    if (engine->kind != RLPI_ENGINE_REMOTE)
        return rlpi_error_set(RLP_E_STATE, "%s: only a remote engine's version is set by hand", __func__);
    pthread_mutex_lock(&engine->mu);
    engine->version = version;
    engine->epoch++;
    pthread_mutex_unlock(&engine->mu);
    return RLP_OK;
}

int rlp_rollout_engine_set_urls(rlp_rollout_engine *engine, const char *const *urls, size_t n_urls)
{
    RLPI_CHECK_ARG(engine, "engine is NULL");
    if (engine->kind != RLPI_ENGINE_REMOTE)
        return rlpi_error_set(RLP_E_STATE, "%s: a local engine has no servers", __func__);
    RLPI_CHECK_ARG(urls || n_urls == 0, "urls is NULL");
    int rc = rlpi_engine_remote_set_urls(engine, urls, n_urls);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

int rlp_rollout_engine_server_stats(rlp_server_stats *out, size_t cap, size_t *n_out, const rlp_rollout_engine *engine)
{
    RLPI_CHECK_ARG(n_out, "n_out is NULL");
    RLPI_CHECK_ARG(engine, "engine is NULL");
    RLPI_CHECK_ARG(out || cap == 0, "out is NULL");
    if (engine->kind != RLPI_ENGINE_REMOTE)
        return rlpi_error_set(RLP_E_STATE, "%s: a local engine has no servers", __func__);
    *n_out = rlpi_engine_remote_server_stats(engine, out, cap);
    return RLP_OK;
}

void rlpi_engine_set_min_version(rlp_rollout_engine *e, uint64_t v, uint64_t latest)
{
    pthread_mutex_lock(&e->mu);
    e->min_version = v;
    if (latest > e->latest_version)
        e->latest_version = latest;
    pthread_mutex_unlock(&e->mu);
}

int rlp_rollout_engine_abort(rlp_rollout_engine *engine)
{
    RLPI_CHECK_ARG(engine, "engine is NULL");
    __atomic_store_n(&engine->abort_requested, 1, __ATOMIC_SEQ_CST);
    return RLP_OK;
}

const rlp_tokenizer *rlp_rollout_engine_tokenizer(const rlp_rollout_engine *engine)
{
    RLPI_CHECK_ARG_NULL(engine, "engine is NULL");
    return engine->tok;
}

int rlp_rollout_engine_stats(rlp_rollout_stats *out, const rlp_rollout_engine *engine)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(engine, "engine is NULL");
    rlp_rollout_engine *e = (rlp_rollout_engine *)engine;
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
    return RLP_OK;
}
