/* The remote generator: one OpenAI-compatible /v1/completions request per
 * prompt (n samples each) through the remote client, turned into
 * trajectories. A request that fails after its retries gives its samples
 * as RLP_FINISH_ERROR trajectories marked invalid with the client's
 * message, so one dead server never sinks a batch. */
#include "rollout/engine.h"

#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef RLPI_HAVE_CURL
#include "rollout/remote_client.h"

/* Where a server's staleness is measured from when a response arrives:
 * the newest version published as the synchronizer last told the engine
 * (rlp_synchronizer_pull_at_least), else the engine's own version (the
 * one every server holds, after rlp_synchronizer_pull). */
static uint64_t engine_version_now(void *arg)
{
    rlp_rollout_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    uint64_t v = e->latest_version > e->version ? e->latest_version : e->version;
    pthread_mutex_unlock(&e->mu);
    return v;
}

int rlpi_engine_remote_create(rlp_rollout_engine *e)
{
    const rlp_remote_options *o = &e->ropts;
    rlpi_remote_config cfg = {.base_urls = o->urls, .n_urls = o->n_urls, .model = o->model, .api_key = o->api_key,
                              .timeout_ms = o->timeout_ms, .max_retries = o->max_retries,
                              .max_response_bytes = (size_t)o->max_response_bytes,
                              .max_in_flight = o->max_in_flight};
    int rc = rlpi_remote_client_create(&e->client, &cfg);
    if (!rc)
        rlpi_remote_client_set_version_source(e->client, engine_version_now, e);
    return rc;
}

int rlpi_engine_remote_set_urls(rlp_rollout_engine *e, const char *const *urls, size_t n)
{
    return rlpi_remote_client_set_urls(e->client, urls, n);
}

size_t rlpi_engine_remote_server_stats(const rlp_rollout_engine *e, rlp_server_stats *out, size_t cap)
{
    return rlpi_remote_client_server_stats(e->client, out, cap);
}

void rlpi_engine_remote_destroy(rlp_rollout_engine *e)
{
    rlpi_remote_client_free(e->client);
    e->client = NULL;
}

static int finish_reason_of(const char *s)
{
    if (!strcmp(s, "stop"))
        return RLP_FINISH_STOP;
    if (!strcmp(s, "length"))
        return RLP_FINISH_LENGTH;
    if (!strcmp(s, "abort"))
        return RLP_FINISH_ABORT;
    return RLP_FINISH_STOP; /* e.g. "eos" from some servers */
}

static int fill_common(rlpi_traj *t, const rlp_prompt *p, uint64_t group, const int32_t *ids, size_t n,
                       const rlp_sampling_options *s, uint64_t version)
{
    t->group_id = group;
    t->temperature = s->temperature;
    t->reward = NAN;
    t->valid = 1;
    t->stop_index = -1;
    t->policy_version = version;
    t->n_prompt = n;
    t->prompt = malloc(n * sizeof *t->prompt);
    if (!t->prompt)
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    memcpy(t->prompt, ids, n * sizeof *ids);
    if (p->text && !(t->prompt_text = strdup(p->text)))
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    if (p->metadata_json && !(t->metadata = strdup(p->metadata_json)))
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    return RLP_OK;
}

/* Which stop string ends the text, as the server trimmed or kept it. */
static int32_t matched_stop(const rlp_sampling_options *s, const char *text, int finish)
{
    if (finish != RLP_FINISH_STOP || !text)
        return -1;
    size_t tl = strlen(text);
    for (size_t i = 0; i < s->n_stop; i++) {
        size_t sl = strlen(s->stop[i]);
        if (s->include_stop_str && tl >= sl && !memcmp(text + tl - sl, s->stop[i], sl))
            return (int32_t)i;
    }
    return -1;
}

int rlpi_engine_remote_generate(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                                const rlp_sampling_options *sp, rlp_stream_fn cb, void *payload)
{
    rlpi_remote_request *reqs = calloc(n_prompts, sizeof *reqs);
    rlpi_remote_result *res = calloc(n_prompts, sizeof *res);
    int32_t **owned = calloc(n_prompts, sizeof *owned);
    int rc = reqs && res && owned ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    for (size_t p = 0; !rc && p < n_prompts; p++) {
        rlpi_remote_request *r = &reqs[p];
        const rlp_sampling_options *s = &sp[p];
        rc = rlpi_engine_prompt_ids(e, &prompts[p], p, &r->prompt, &r->n_prompt, &owned[p]);
        r->n = s->n;
        r->max_tokens = s->max_new_tokens;
        r->temperature = s->temperature;
        r->top_p = s->top_p;
        r->min_p = s->min_p;
        r->top_k = s->top_k;
        /* each prompt its own seed, so its samples differ from its neighbours' */
        r->seed = s->seed + (prompts[p].group_id ? prompts[p].group_id : p);
        r->has_seed = 1;
        r->stop = s->stop;
        r->n_stop = s->n_stop;
        r->stop_ids = s->stop_token_ids;
        r->n_stop_ids = s->n_stop_token_ids;
        r->include_stop_str = s->include_stop_str;
    }
    uint64_t version = 0, group_base = 0;
    if (!rc) {
        pthread_mutex_lock(&e->mu);
        version = e->version;
        group_base = e->next_group;
        e->next_group += n_prompts;
        for (size_t p = 0; p < n_prompts; p++)
            reqs[p].min_version = e->min_version;
        pthread_mutex_unlock(&e->mu);
        rc = rlpi_remote_client_complete(e->client, reqs, n_prompts, res);
    }
    uint64_t errors = 0, tokens = 0, samples = 0;
    for (size_t p = 0; !rc && p < n_prompts; p++) {
        const rlp_sampling_options *s = &sp[p];
        samples += s->n;
        uint64_t group = rlpi_engine_group_id(&prompts[p], p, group_base);
        uint64_t v = res[p].weight_version >= 0 ? (uint64_t)res[p].weight_version : version;
        errors += res[p].status != RLP_OK;
        for (uint32_t j = 0; !rc && j < s->n; j++) {
            rlpi_traj t;
            memset(&t, 0, sizeof t);
            rc = fill_common(&t, &prompts[p], group, reqs[p].prompt, reqs[p].n_prompt, s, v);
            t.sample_index = j;
            const rlpi_remote_choice *c =
                res[p].status == RLP_OK && j < res[p].n_choices ? &res[p].choices[j] : NULL;
            if (!rc && c) {
                for (size_t i = 0; !rc && i < c->n_tokens; i++)
                    rc = rlpi_traj_push_token(&t, c->tokens[i], c->logprobs[i], v);
                t.finish_reason = finish_reason_of(c->finish_reason);
                if (!rc && !(t.text = strdup(c->text ? c->text : "")))
                    rc = rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
                t.stop_index = matched_stop(s, t.text, t.finish_reason);
                tokens += c->n_tokens;
            } else if (!rc) {
                t.finish_reason = RLP_FINISH_ERROR;
                t.valid = 0;
                const char *msg = res[p].status != RLP_OK
                                      ? (res[p].error ? res[p].error : rlp_status_str(res[p].status))
                                      : "the server returned fewer choices than n";
                if (!(t.text = strdup("")) || !(t.error = strdup(msg)))
                    rc = rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
            }
            /* no token stream from a remote batch call: one event per finished sample */
            if (!rc && cb) {
                rlp_stream_event ev = {.version = 1, .prompt_index = p, .sample_index = j, .token = -1,
                                       .policy_version = v, .text = t.text ? t.text : "",
                                       .text_len = t.text ? strlen(t.text) : 0, .finish_reason = t.finish_reason};
                cb(&ev, payload);
            }
            if (!rc)
                rc = rlpi_batch_take(out, &t);
            rlpi_traj_clear(&t);
        }
    }
    pthread_mutex_lock(&e->mu);
    e->stats.remote_errors += errors;
    e->stats.prompts += n_prompts;
    e->stats.completions += samples;
    e->stats.decode_tokens += tokens;
    pthread_mutex_unlock(&e->mu);
    for (size_t p = 0; res && p < n_prompts; p++)
        rlpi_remote_result_clear(&res[p]);
    for (size_t p = 0; owned && p < n_prompts; p++)
        free(owned[p]);
    free(owned);
    free(reqs);
    free(res);
    return rc;
}

#else

int rlpi_engine_remote_create(rlp_rollout_engine *e)
{
    (void)e;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "remote rollout engine: librlpost was built without libcurl");
}

void rlpi_engine_remote_destroy(rlp_rollout_engine *e)
{
    (void)e;
}

int rlpi_engine_remote_set_urls(rlp_rollout_engine *e, const char *const *urls, size_t n)
{
    (void)e, (void)urls, (void)n;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "remote rollout engine: librlpost was built without libcurl");
}

size_t rlpi_engine_remote_server_stats(const rlp_rollout_engine *e, rlp_server_stats *out, size_t cap)
{
    (void)e, (void)out, (void)cap;
    return 0;
}

int rlpi_engine_remote_generate(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                                const rlp_sampling_options *s, rlp_stream_fn cb, void *payload)
{
    (void)e, (void)out, (void)prompts, (void)n_prompts, (void)s, (void)cb, (void)payload;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "remote rollout engine: librlpost was built without libcurl");
}

#endif
