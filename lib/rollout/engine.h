/* Internal layout of rlp_rollout_engine, shared by the public entry points
 * (engine.c), the local batched generator (engine_local.c) and the remote
 * OpenAI-compatible generator (engine_remote.c).
 *
 * Weight updates from other threads meet the generate loop here: a step
 * runs with `in_step` set; an update raises `pending`, waits for the step
 * to end, swaps the weights under `mu` and bumps `epoch`; the loop waits
 * for `pending` to drop before it starts the next step and then treats the
 * sequences in flight by the interrupt mode. */
#ifndef RLPI_ROLLOUT_ENGINE_H
#define RLPI_ROLLOUT_ENGINE_H

#include "core/batch.h"
#include "model/kv_cache.h"
#include "rlpost.h"

#include <pthread.h>
#include <stdbool.h>

enum { RLPI_ENGINE_LOCAL = 1, RLPI_ENGINE_REMOTE = 2 };

struct rlpi_remote_client;

struct rlp_rollout_engine {
    int kind;
    const rlp_tokenizer *tok;      /* borrowed */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;                   /* weight updates waiting for the step to end */
    bool in_step, generating;
    uint64_t epoch;                /* bumped by every weight swap */
    uint64_t version;              /* of the weights in use (local: own copy; remote: set/reported) */
    uint64_t min_version;          /* remote: the oldest weights its requests accept (rlpi_engine_set_min_version) */
    uint64_t latest_version;       /* remote: the newest version published, as last told (ditto) */
    uint64_t next_group;           /* engine-numbered group ids handed out so far */
    int abort_requested;           /* atomic */
    rlp_rollout_stats stats;       /* under mu */

    /* local */
    rlp_rollout_options opts;
    rlp_policy *policy;            /* borrowed (share_weights) or owned frozen copy */
    bool owns_policy;
    rlpi_kv_cache *kv;
    struct rlpi_qweights *qw;      /* quantized rollout copy (opts.weights), or NULL: fp32 */
    uint64_t qw_epoch, qw_version, qw_gen; /* the weights it was quantized from (current_weights(),
                                            * policy->weights_gen) */

    /* remote */
    struct rlpi_remote_client *client;
    rlp_remote_options ropts;
    uint64_t remote_ctx;           /* the servers' context length, once one said (0 = not yet); under mu */
};

/* Makes the quantized copy that opts.weights asks for (engine_local.c):
 * none for F32, for AUTO where the CPU lacks fast int8 products or the
 * backend has no quantized kernels (then F32, logged); an error for Q8_0 on
 * a backend without them is not raised either: the engine decodes fp32
 * and says so in the log. */
int rlpi_engine_make_qweights(rlp_rollout_engine *e);

/* For the owner of the weights a local engine shares, just before it
 * changes them (a synchronous trainer's optimizer step): the quantized
 * copy would be re-quantized before the next decode anyway, so its pages
 * go back to the system now (rlpi_buffer_discard) and it is marked stale.
 * Saves the copy's bytes (151 MB for SmolLM2-135M) during the step; costs
 * nothing, the re-quantization happens either way. No-op without a copy,
 * for remote engines, and while a generate call runs. */
void rlpi_engine_release_qweights(rlp_rollout_engine *e);

/* Resolved sampling options with defaults applied and everything checked. */
int rlpi_engine_check_sampling(const rlp_sampling_options *in, rlp_sampling_options *out);

/* Prompt i's ids: borrowed from the prompt, or encoded from its text into
 * *owned (caller frees). */
int rlpi_engine_prompt_ids(const rlp_rollout_engine *e, const rlp_prompt *p, size_t index, const int32_t **ids,
                           size_t *n, int32_t **owned);

/* Generate on each kind; the public rlp_rollout_generate() validates first
 * and passes each prompt's resolved sampling options (n_prompts). */
int rlpi_engine_local_generate(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                               const rlp_sampling_options *s, const rlp_multiturn_options *mt, rlp_stream_fn cb,
                               void *payload);
int rlpi_engine_remote_generate(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                                const rlp_sampling_options *s, rlp_stream_fn cb, void *payload);
/* Episodes on a remote engine: each turn a completion request with the
 * episode's ids so far (engine_remote_episodes.c). */
int rlpi_engine_remote_episodes(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                                const rlp_sampling_options *s, const rlp_multiturn_options *mt, rlp_stream_fn cb,
                                void *payload);
int rlpi_engine_remote_create(rlp_rollout_engine *e);
/* A remote engine's requests from now on ask their server for weights of
 * version @p v at least ("min_weight_version"; 0 = any), while @p latest
 * is the newest version published (what a server's staleness is measured
 * against). Thread-safe. */
void rlpi_engine_set_min_version(rlp_rollout_engine *e, uint64_t v, uint64_t latest);
void rlpi_engine_remote_destroy(rlp_rollout_engine *e);
/* The remote client's set of servers and per-server counters (engine_remote.c). */
int rlpi_engine_remote_set_urls(rlp_rollout_engine *e, const char *const *urls, size_t n);
size_t rlpi_engine_remote_server_stats(const rlp_rollout_engine *e, rlp_server_stats *out, size_t cap);

/* The group id that a prompt's samples carry, and the random stream of its
 * sample j: a pure function of (group, j), never of the batch around it. */
uint64_t rlpi_engine_group_id(const rlp_prompt *p, size_t index, uint64_t base);
uint64_t rlpi_engine_stream(uint64_t group, uint32_t j);

#endif
