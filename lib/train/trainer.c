/* The trainer: one RL step at a time, in any of the three modes, over the
 * rollout side it owns (engines, synchronizer, replay buffer, rollout
 * worker thread). The modes differ only in where a step's scored groups
 * come from (collect_sync / collect_async); scoring the record, training
 * and publishing are one path. */
#include "trainer_impl.h"
#include "train/trainer_options.h"

#include "backend/context.h"
#include "core/batch.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/heap.h"
#include "algo/rl_step.h"
#include "model/policy.h"
#include "rollout/engine.h"

#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Create and free                                                          */
/* ------------------------------------------------------------------------ */

static int copy_options(rlp_trainer *t, const rlp_trainer_options *o)
{
    t->o = *o;
    t->o.metrics = NULL;
    t->o.worker_urls = NULL;
    t->o.api_key = t->o.weights_dir = t->o.rollout_inbox = NULL;
    if (o->rollout_inbox && !(t->inbox = strdup(o->rollout_inbox)))
        return RLP_E_NOMEM;
    if (o->critic_path && !(t->critic_path = strdup(o->critic_path)))
        return RLP_E_NOMEM;
    t->o.critic_path = t->critic_path;
    t->n_metrics = o->n_metrics;
    for (size_t i = 0; i < o->n_metrics; i++) {
        t->metrics[i] = o->metrics[i];
        t->metrics[i].mean_key = o->metrics[i].mean_key ? strdup(o->metrics[i].mean_key) : NULL;
        t->metrics[i].rate_key = o->metrics[i].rate_key ? strdup(o->metrics[i].rate_key) : NULL;
        if ((o->metrics[i].mean_key && !t->metrics[i].mean_key) || (o->metrics[i].rate_key && !t->metrics[i].rate_key))
            return RLP_E_NOMEM;
    }
    for (size_t i = 0; i < o->n_worker_urls; i++, t->n_urls++)
        if (!(t->urls[i] = strdup(o->worker_urls[i])))
            return RLP_E_NOMEM;
    if ((o->api_key && !(t->api_key = strdup(o->api_key))) ||
        (o->weights_dir && !(t->weights_dir = strdup(o->weights_dir))))
        return RLP_E_NOMEM;
    /* the sampling options' arrays are the caller's too: every step (and the
     * rollout worker) reads them long after create returned */
    if (rlpi_sampling_copy_make(&t->sampling_copy, &t->o.sampling))
        return RLP_E_NOMEM;
    return RLP_OK;
}

static int check_options(const rlp_trainer_options *o)
{
    RLPI_CHECK_ARG(o->version == RLP_TRAINER_OPTIONS_VERSION, "opts->version: unknown version");
    if (o->multiturn.env) {
        RLPI_CHECK_ARG(o->multiturn.version >= 1 && o->multiturn.version <= RLP_MULTITURN_OPTIONS_VERSION,
                       "opts->multiturn.version: unknown version");
        RLPI_CHECK_ARG(o->multiturn.max_turns >= 1, "opts->multiturn.max_turns must be ≥ 1");
    }
    RLPI_CHECK_ARG(o->mode == RLP_TRAIN_SYNC || o->mode == RLP_TRAIN_PULL || o->mode == RLP_TRAIN_ASYNC,
                   "opts->mode: not an rlp_train_mode");
    if (o->mode != RLP_TRAIN_ASYNC && o->max_staleness != 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->max_staleness (η = %u) applies to "
                              "RLP_TRAIN_ASYNC only; sync and pull runs are on-policy (set it to 0)",
                              o->max_staleness);
    RLPI_CHECK_ARG(o->prompts_per_step >= 1, "opts->prompts_per_step must be ≥ 1");
    if (o->mode == RLP_TRAIN_ASYNC && o->rl.filter_equal_groups && o->max_gen_batches > 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->max_gen_batches (%u): dynamic sampling "
                              "runs in RLP_TRAIN_SYNC and RLP_TRAIN_PULL mode on one rank; in RLP_TRAIN_ASYNC mode "
                              "filter_equal_groups drops all-equal groups at train time (set max_gen_batches to 0)",
                              o->max_gen_batches);
    RLPI_CHECK_ARG(o->rollout_weights >= RLP_ROLLOUT_WEIGHTS_F32 && o->rollout_weights <= RLP_ROLLOUT_WEIGHTS_Q4_0,
                   "opts->rollout_weights is not an rlp_rollout_weights");
    RLPI_CHECK_ARG(o->sampling.version == RLP_SAMPLING_OPTIONS_VERSION, "opts->sampling.version: unknown version");
    RLPI_CHECK_ARG(o->sampling.n >= 1, "opts->sampling.n (the group size) must be ≥ 1");
    RLPI_CHECK_ARG(o->n_metrics <= RLP_TRAINER_MAX_METRICS, "opts->n_metrics: more than RLP_TRAINER_MAX_METRICS");
    RLPI_CHECK_ARG(o->metrics || o->n_metrics == 0, "opts->metrics is NULL");
    for (size_t i = 0; i < o->n_metrics; i++)
        if (!o->metrics[i].fn)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->metrics[%zu].fn is NULL", i);
    RLPI_CHECK_ARG(o->n_worker_urls <= RLPI_MAX_URLS, "opts->n_worker_urls: more than 64");
    RLPI_CHECK_ARG(o->worker_urls || o->n_worker_urls == 0, "opts->worker_urls is NULL");
    for (size_t i = 0; i < o->n_worker_urls; i++)
        if (!o->worker_urls[i] || !*o->worker_urls[i])
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->worker_urls[%zu] is empty", i);
    RLPI_CHECK_ARG(o->remote_workers == 0 || o->remote_workers == 1, "opts->remote_workers must be 0 or 1");
    const bool remote = o->n_worker_urls || o->remote_workers;
    if (remote && o->mode == RLP_TRAIN_SYNC)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: worker_urls (or remote_workers) need "
                              "RLP_TRAIN_PULL or RLP_TRAIN_ASYNC (a sync run generates with the trainer's own "
                              "weights)");
    if (o->rollout_inbox && (o->mode != RLP_TRAIN_ASYNC || remote || !o->weights_dir || !*o->weights_dir ||
                             !*o->rollout_inbox))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: rollout_inbox needs RLP_TRAIN_ASYNC and "
                              "weights_dir (where the workers load each version from), and not worker_urls");
    bool gae = o->rl.advantage == RLP_ADV_GAE;
    if (gae != (o->critic_path != NULL))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              gae ? "rlp_trainer_create: rl.advantage GAE needs a critic: set opts->critic_path "
                                    "(\"policy\" for a copy of the policy with a value head)"
                                  : "rlp_trainer_create: opts->critic_path is set but rl.advantage is not GAE (the "
                                    "critic's values would go unused)");
    if (o->critic_path && !*o->critic_path)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->critic_path is empty");
    if (!(o->value_clip >= 0) || !isfinite(o->value_clip))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->value_clip (%g) must be finite and >= 0",
                              (double)o->value_clip);
    if (!(o->critic_lr >= 0) || !isfinite(o->critic_lr))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->critic_lr (%g) must be finite and >= 0",
                              (double)o->critic_lr);
    if (!(o->gae_lambda >= 0 && o->gae_lambda <= 1))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: opts->gae_lambda (%g) must be in [0, 1]",
                              (double)o->gae_lambda);
    if (remote && (!o->weights_dir || !*o->weights_dir))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_trainer_create: worker_urls (or remote_workers) need "
                              "opts->weights_dir (where the workers load each published version from)");
    return RLP_OK;
}

static uint32_t engine_batch(const rlp_trainer *t)
{
    uint64_t mb = t->o.max_batch ? t->o.max_batch : (uint64_t)t->o.prompts_per_step * t->o.sampling.n;
    return (uint32_t)(mb < 256 ? (mb ? mb : 1) : 256);
}

static int local_engine(const rlp_trainer *t, rlp_rollout_engine **out, rlp_policy *from, int share, uint32_t mb)
{
    rlp_rollout_options eo = RLP_ROLLOUT_OPTIONS_INIT;
    eo.max_batch = mb;
    eo.max_seq_len = t->o.max_seq_len;
    eo.share_weights = share;
    eo.weights = t->o.rollout_weights;
    return rlp_rollout_engine_create(out, from, &eo);
}

/* The engine of remote PULL and ASYNC: remote over the URLs, or a copy of
 * the policy. */
/* A remote engine over the workers. */
static int create_remote_engine(rlp_trainer *t, rlp_rollout_engine **out)
{
    rlp_remote_options rem = RLP_REMOTE_OPTIONS_INIT;
    rem.urls = (const char *const *)t->urls;
    rem.n_urls = t->n_urls; /* may be 0: rlp_trainer_set_worker_urls() adds them */
    rem.api_key = t->api_key;
    rem.timeout_ms = t->o.worker_timeout_ms ? t->o.worker_timeout_ms : 300000;
    rem.max_retries = 3;
    /* a model without a tokenizer: the prompts go out encoded with the
     * host's and the completions are decoded with it on return
     * (rlpi_train_generate); the engine must not have it too, or the
     * rollout worker takes it for the engine's own and keeps the text the
     * workers sent, empty for such a model */
    const rlp_tokenizer *tok = t->ext_tok ? NULL : rlp_policy_tokenizer(t->policy);
    if (rlp_rollout_engine_create_remote(out, tok, &rem))
        return rlpi_error_wrap("worker_urls");
    return RLP_OK;
}

static int create_rollout_engine(rlp_trainer *t)
{
    int rc;
    if (t->remote) {
        if ((rc = create_remote_engine(t, &t->ro_engine)))
            return rc;
    } else {
        /* ASYNC: a copy of its own, on the host's rollout context if given */
        rlp_rollout_options eo = RLP_ROLLOUT_OPTIONS_INIT;
        uint64_t mb = (uint64_t)t->o.prompts_per_step * t->o.sampling.n;
        eo.max_batch = (uint32_t)(mb < 256 ? mb : 256);
        eo.max_seq_len = t->o.max_seq_len;
        eo.share_weights = 0;
        eo.weights = t->o.rollout_weights;
        rlp_policy *from = t->policy, *copy = NULL;
        if (t->o.rollout_threads) {
            /* a context of its own: same backend, device, seed and matmul
             * precision (as resolved: the rollouts of a bf16 run do not
             * depend on whether the engine shares the trainer's context) */
            const rlp_context *pc = t->policy->ctx;
            rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
            co.backend = pc->kind;
            co.device = pc->device;
            co.seed = pc->seed;
            int mm = RLP_MATMUL_FP32;
            rlp_context_matmul_precision(&mm, pc);
            co.matmul_precision = mm;
            co.n_threads = (int32_t)t->o.rollout_threads;
            if ((rc = rlp_context_create(&t->ro_ctx, &co)) || (rc = rlp_policy_clone_to(&copy, t->policy, t->ro_ctx, 0)))
                return rlpi_error_wrap("rollout context");
            from = copy;
        }
        rc = rlp_rollout_engine_create(&t->ro_engine, from, &eo);
        rlp_policy_free(copy); /* the engine keeps a copy of its own */
        if (rc)
            return rlpi_error_wrap("rollout engine");
    }
    return RLP_OK;
}

/* The synchronizer that carries each published version to the rollout
 * engine and (ASYNC) the replay buffer; then publishes the version the run
 * starts from. Made at the first step, so that a resumed run's gate starts
 * at the checkpoint's version. */
static int create_sync(rlp_trainer *t)
{
    const int async = t->o.mode == RLP_TRAIN_ASYNC;
    int rc;
    uint64_t version = 0;
    rlp_policy_version(&version, t->policy);
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = async ? RLP_SYNC_ASYNC : RLP_SYNC_SEQUENTIAL_PULL;
    so.transport = t->remote ? RLP_TRANSPORT_HTTP : t->inbox ? RLP_TRANSPORT_FILE : RLP_TRANSPORT_IN_PROCESS;
    so.max_staleness = t->o.max_staleness;
    so.batch_groups = t->o.prompts_per_step; /* versions count RL steps: a step trains on G groups */
    so.initial_version = version;
    if (t->inbox)
        so.dir = t->weights_dir; /* the workers of other processes read the manifest there */
    pthread_mutex_lock(&t->urls_mu); /* a set_worker_urls meanwhile waits, then finds t->sync */
    if (t->remote) {
        so.dir = t->weights_dir;
        so.urls = (const char *const *)t->urls; /* none yet in a swarm whose workers join later */
        so.n_urls = t->n_urls;
        so.api_key = t->api_key;
    }
    rc = rlp_synchronizer_create(&t->sync, &so);
    pthread_mutex_unlock(&t->urls_mu);
    if (rc)
        return rlpi_error_wrap("%s", t->remote || t->inbox ? "weights_dir" : "synchronizer");
    if (async) {
        rlp_buffer_options bo = RLP_BUFFER_OPTIONS_INIT;
        bo.sync = t->sync; /* one η: the gate's */
        if ((rc = rlp_replay_buffer_create(&t->buf, &bo)))
            return rlpi_error_wrap("replay buffer");
    }
    /* the version the run starts from: what the workers (re)start with */
    if ((rc = rlp_synchronizer_publish(t->sync, t->policy)))
        return rlpi_error_wrap("publishing version %llu", (unsigned long long)version);
    return RLP_OK;
}

int rlp_trainer_create(rlp_trainer **out, rlp_policy *policy, rlp_task *task, rlp_reward_fn *reward,
                       const rlp_trainer_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(policy && task && reward, "policy, task and reward are required");
    rlp_trainer_options o;
    /* an older caller's layout converted; the fields it lacks at their defaults */
    int rc = rlpi_trainer_options_upgrade(&o, opts);
    if (!rc)
        rc = check_options(&o);
    if (rc)
        return rc;
    rlp_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    pthread_mutex_init(&t->urls_mu, NULL);
    if ((rc = copy_options(t, &o))) {
        rlp_trainer_free(t);
        return rlpi_error_set(rc, "%s: out of memory", __func__);
    }
    t->policy = policy;
    t->task = task;
    t->reward = reward;
    t->remote = o.n_worker_urls > 0 || o.remote_workers;
    t->rank = 0;
    t->world = 1;
    if (o.comm) {
        int32_t rank = 0, world = 1, transport = 0;
        if ((rc = rlp_comm_info(o.comm, &rank, &world, &transport))) {
            rlp_trainer_free(t);
            return rlpi_error_wrap("%s: comm", __func__);
        }
        t->rank = rank;
        t->world = world;
        if (world > 1 && (o.mode == RLP_TRAIN_ASYNC || t->remote)) {
            rlp_trainer_free(t);
            return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: several ranks need RLP_TRAIN_SYNC or RLP_TRAIN_PULL with "
                                  "the ranks' own engines (not ASYNC, not worker_urls)", __func__);
        }
        if ((uint32_t)world > o.prompts_per_step) {
            rlp_trainer_free(t);
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: prompts_per_step (%u) must be ≥ the number of ranks (%d)",
                                  __func__, o.prompts_per_step, world);
        }
        if (world > 1 && o.rl.filter_equal_groups && o.max_gen_batches > 0) {
            rlp_trainer_free(t);
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: opts->max_gen_batches (%u): dynamic sampling runs in "
                                  "RLP_TRAIN_SYNC and RLP_TRAIN_PULL mode on one rank, not on %d (set it to 0: "
                                  "filter_equal_groups then drops all-equal groups at train time)",
                                  __func__, o.max_gen_batches, world);
        }
    }
    /* a model without a tokenizer of its own: prompts are rendered as
     * plain text and encoded with the host's */
    const rlp_tokenizer *own = rlp_policy_tokenizer(policy);
    rlp_error_clear();
    if (!own && !o.tokenizer) {
        rlp_trainer_free(t);
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the model has no tokenizer; pass opts->tokenizer", __func__);
    }
    t->ext_tok = own ? NULL : o.tokenizer;
    t->tok = own;
    if ((rc = rlpi_train_critic_create(t))) {
        rlp_trainer_free(t);
        return rc;
    }
    const int separate = o.mode == RLP_TRAIN_ASYNC || t->remote;
    if (!separate)
        rc = local_engine(t, &t->engine, policy, o.mode == RLP_TRAIN_SYNC, engine_batch(t));
    else if (!t->inbox)
        rc = create_rollout_engine(t);
    if (rc) {
        rlpi_error_wrap("%s", __func__);
        rlp_trainer_free(t);
        return rc;
    }
    size_t clen;
    rlp_task_cursor_save(task, t->cursor, sizeof t->cursor, &clen);
    *out = t;
    return RLP_OK;
}

int rlp_trainer_stop(rlp_trainer *t)
{
    RLPI_CHECK_ARG(t, "trainer is NULL");
    if (t->worker)
        rlp_rollout_worker_stop(t->worker);
    t->stopped = 1;
    return RLP_OK;
}

void rlp_trainer_free(rlp_trainer *t)
{
    if (!t)
        return;
    rlp_rollout_worker_free(t->worker);
    rlp_replay_buffer_free(t->buf);
    rlp_synchronizer_free(t->sync);
    rlp_rollout_engine_free(t->ro_engine);
    for (size_t i = 0; i < t->n_ro_lanes; i++)
        rlp_rollout_engine_free(t->ro_lanes[i]);
    rlp_rollout_engine_free(t->eval_engine);
    rlp_rollout_engine_free(t->engine);
    rlp_context_free(t->ro_ctx);
    for (size_t i = 0; i < t->n_metrics; i++) {
        free((char *)t->metrics[i].mean_key);
        free((char *)t->metrics[i].rate_key);
    }
    for (size_t i = 0; i < RLPI_MAX_URLS; i++)
        free(t->urls[i]);
    pthread_mutex_destroy(&t->urls_mu);
    free(t->api_key);
    free(t->weights_dir);
    free(t->inbox);
    free(t->critic_path);
    rlp_policy_free(t->critic);
    rlpi_sampling_copy_free(&t->sampling_copy);
    free(t->prompt_ids);
    free(t);
}

int rlp_trainer_set_worker_urls(rlp_trainer *t, const char *const *urls, size_t n_urls)
{
    RLPI_CHECK_ARG(t, "trainer is NULL");
    if (!t->remote || !t->ro_engine)
        return rlpi_error_set(RLP_E_STATE, "%s: the trainer has no remote workers (set worker_urls or "
                              "remote_workers)", __func__);
    RLPI_CHECK_ARG(urls || n_urls == 0, "urls is NULL");
    if (n_urls > RLPI_MAX_URLS)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %zu URLs, more than %d", __func__, n_urls, RLPI_MAX_URLS);
    for (size_t i = 0; i < n_urls; i++)
        if (!urls[i] || !(!strncmp(urls[i], "http://", 7) || !strncmp(urls[i], "https://", 8)))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: urls[%zu] \"%s\" is not an http:// or https:// URL",
                                  __func__, i, urls[i] ? urls[i] : "(null)");
    char *copy[RLPI_MAX_URLS] = {0};
    for (size_t i = 0; i < n_urls; i++)
        if (!(copy[i] = strdup(urls[i]))) {
            for (size_t k = 0; k < i; k++)
                free(copy[k]);
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        }
    pthread_mutex_lock(&t->urls_mu);
    int rc = rlp_rollout_engine_set_urls(t->ro_engine, urls, n_urls);
    for (size_t i = 0; !rc && i < t->n_ro_lanes; i++) /* the worker's other engines */
        rc = rlp_rollout_engine_set_urls(t->ro_lanes[i], urls, n_urls);
    if (!rc && t->sync)
        rc = rlp_synchronizer_set_urls(t->sync, urls, n_urls);
    if (!rc) {
        for (size_t i = 0; i < RLPI_MAX_URLS; i++) {
            free(t->urls[i]);
            t->urls[i] = copy[i];
            copy[i] = NULL;
        }
        t->n_urls = n_urls;
    }
    pthread_mutex_unlock(&t->urls_mu);
    for (size_t i = 0; i < n_urls; i++)
        free(copy[i]);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

int rlp_trainer_server_stats(rlp_server_stats *out, size_t cap, size_t *n_out, const rlp_trainer *t)
{
    RLPI_CHECK_ARG(t, "trainer is NULL");
    if (!t->remote || !t->ro_engine)
        return rlpi_error_set(RLP_E_STATE, "%s: the trainer has no remote workers", __func__);
    RLPI_CHECK_ARG(n_out, "n_out is NULL");
    RLPI_CHECK_ARG(out || cap == 0, "out is NULL");
    rlp_trainer *mt = (rlp_trainer *)t;
    pthread_mutex_lock(&mt->urls_mu);
    int rc = rlp_rollout_engine_server_stats(out, cap, n_out, t->ro_engine);
    /* the other engines of the rollout worker talk to the same servers:
     * their counters add to the same server's entry */
    rlp_server_stats *lane = NULL;
    size_t n_lane = 0, cap_lane = 0;
    for (size_t i = 0; !rc && i < t->n_ro_lanes; i++) {
        if ((rc = rlp_rollout_engine_server_stats(NULL, 0, &n_lane, t->ro_lanes[i])))
            break;
        if (n_lane > cap_lane) {
            rlp_server_stats *grown = realloc(lane, n_lane * sizeof *lane);
            if (!grown) {
                rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
                break;
            }
            lane = grown;
            cap_lane = n_lane;
        }
        if ((rc = rlp_rollout_engine_server_stats(lane, cap_lane, &n_lane, t->ro_lanes[i])))
            break;
        for (size_t k = 0; k < n_lane && k < cap_lane; k++) {
            size_t m = 0, shown = *n_out < cap ? *n_out : cap;
            while (m < shown && strcmp(out[m].url, lane[k].url))
                m++;
            if (m == shown) { /* a server only this engine has seen */
                if (*n_out < cap)
                    out[*n_out] = lane[k];
                (*n_out)++;
                continue;
            }
            rlp_server_stats *o = &out[m];
            o->requests_ok += lane[k].requests_ok;
            o->requests_failed += lane[k].requests_failed;
            o->completions += lane[k].completions;
            o->completion_tokens += lane[k].completion_tokens;
            if (lane[k].last_weight_version > o->last_weight_version)
                o->last_weight_version = lane[k].last_weight_version;
            o->versioned += lane[k].versioned;
            o->staleness_sum += lane[k].staleness_sum;
            if (lane[k].staleness_max > o->staleness_max)
                o->staleness_max = lane[k].staleness_max;
        }
    }
    pthread_mutex_unlock(&mt->urls_mu);
    free(lane);
    return rc;
}

int rlp_trainer_interrupt(rlp_trainer *t)
{
    if (!t)
        return RLP_E_INVALID_ARG; /* async-signal-safe: no message */
    atomic_store(&t->interrupt, 1);
    return RLP_OK;
}

int rlp_trainer_steps_done(uint64_t *out, const rlp_trainer *t)
{
    RLPI_CHECK_ARG(out && t, "out and trainer are required");
    *out = t->steps_done;
    return RLP_OK;
}

int rlp_trainer_async_stats(rlp_buffer_stats *buffer, rlp_rollout_worker_stats *worker, const rlp_trainer *t)
{
    RLPI_CHECK_ARG(t, "trainer is NULL");
    RLPI_CHECK_ARG(buffer || worker, "buffer and worker are both NULL");
    RLPI_CHECK_ARG(!worker || worker->version == 1, "worker->version must be 1");
    if (!t->buf || !t->worker)
        return rlpi_error_set(RLP_E_STATE, "rlp_trainer_async_stats: the trainer is not in ASYNC mode (no replay "
                              "buffer or rollout worker)");
    int rc = buffer ? rlp_replay_buffer_stats(buffer, t->buf) : RLP_OK;
    if (rc == RLP_OK && worker)
        rc = rlp_rollout_worker_stats_get(worker, t->worker);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* One step                                                                 */
/* ------------------------------------------------------------------------ */

int rlpi_train_keep_prompt_ids(rlp_trainer *t, size_t n)
{
    if (n > t->cap_ids) {
        uint64_t *p = realloc(t->prompt_ids, n * sizeof *p);
        if (!p)
            return rlpi_error_set(RLP_E_NOMEM, "out of memory");
        t->prompt_ids = p;
        t->cap_ids = n;
    }
    return RLP_OK;
}

/* The rank's share of n items: [*first, *first + *count). */
static void rank_share(const rlp_trainer *t, size_t n, size_t *first, size_t *count)
{
    size_t lo = n * (size_t)t->rank / (size_t)t->world, hi = n * ((size_t)t->rank + 1) / (size_t)t->world;
    *first = lo;
    *count = hi - lo;
}

/* The host's metrics over @p b into the record. Each overwrites the batch's
 * rewards: score them before the reward, or on a copy. */
static int score_metrics(rlp_trainer *t, rlp_batch *b, rlp_step_record *rec)
{
    int rc = RLP_OK;
    for (size_t i = 0; !rc && i < t->n_metrics; i++)
        if ((rc = rlpi_train_score_metric(t->metrics[i].fn, b, t->metrics[i].threshold, &rec->metric_rate[i],
                                          &rec->metric_mean[i])))
            rlpi_error_wrap("metric %zu", i);
    return rc;
}

/* Scores the metrics, then the reward (what stays in the batch is the
 * reward the step trains on). */
static int score_batch(rlp_trainer *t, rlp_batch *b, rlp_step_record *rec)
{
    int rc = score_metrics(t, b, rec);
    rlp_reward_stats st = {.version = RLP_REWARD_STATS_VERSION};
    if (!rc && (rc = rlp_reward_fn_score(t->reward, b, &st)) != RLP_OK)
        rlpi_error_wrap("reward");
    if (rc)
        return rc;
    rlpi_train_reward_summary(rec, b);
    rec->reward_errors = st.errors;
    rec->reward_timeouts = st.timeouts;
    rec->reward_nonfinite = st.nonfinite;
    rec->reward_crashed = st.crashed;
    return RLP_OK;
}

/* Several ranks: the step's scores over all ranks' completions (each rank
 * scored its share). Rates and means are weighted by completions (by valid
 * ones for the reward). */
static int reduce_scores(rlp_trainer *t, rlp_step_record *r)
{
    enum { FIXED = 10 };
    double n = (double)r->completions, v = (double)r->reward_valid;
    double sum = v > 0 ? r->reward_mean * v : 0;
    double sq = v > 1 ? r->reward_std * r->reward_std * (v - 1) + sum * r->reward_mean : sum * r->reward_mean;
    double a[FIXED + 2 * RLP_TRAINER_MAX_METRICS] = {
        n, v, sum, sq, (double)r->completion_tokens, (double)r->truncated, (double)r->reward_errors,
        (double)r->reward_timeouts, (double)r->reward_nonfinite, (double)r->reward_crashed};
    for (size_t i = 0; i < t->n_metrics; i++) {
        a[FIXED + 2 * i] = isnan(r->metric_rate[i]) ? 0 : r->metric_rate[i] * n;
        a[FIXED + 2 * i + 1] = isnan(r->metric_mean[i]) ? 0 : r->metric_mean[i] * n;
    }
    double range[2] = {v > 0 ? r->reward_min : INFINITY, v > 0 ? -r->reward_max : INFINITY}; /* min, −max */
    if (rlp_comm_all_reduce(t->o.comm, a, FIXED + 2 * t->n_metrics, RLP_REDUCE_SUM) ||
        rlp_comm_all_reduce(t->o.comm, range, 2, RLP_REDUCE_MIN))
        return rlpi_error_wrap("distributed");
    r->completions = (uint64_t)a[0];
    r->reward_valid = (uint64_t)a[1];
    r->completion_tokens = (uint64_t)a[4];
    r->truncated = (uint64_t)a[5];
    r->reward_errors = (uint64_t)a[6];
    r->reward_timeouts = (uint64_t)a[7];
    r->reward_nonfinite = (uint64_t)a[8];
    r->reward_crashed = (uint64_t)a[9];
    if (r->reward_valid) {
        r->reward_mean = a[2] / a[1];
        r->reward_std = r->reward_valid > 1 ? sqrt(fmax(0, (a[3] - a[2] * r->reward_mean) / (a[1] - 1))) : 0;
        r->reward_min = range[0];
        r->reward_max = -range[1];
    } else {
        r->reward_mean = r->reward_std = r->reward_min = r->reward_max = NAN;
    }
    for (size_t i = 0; i < t->n_metrics; i++) {
        r->metric_rate[i] = a[0] > 0 ? a[FIXED + 2 * i] / a[0] : NAN;
        r->metric_mean[i] = a[0] > 0 ? a[FIXED + 2 * i + 1] / a[0] : NAN;
    }
    return RLP_OK;
}

/* One batch of a SYNC or PULL step: the task's next prompts_per_step
 * prompts (this rank's share) generated on @p e with sampling seed
 * @p seed, scored into @p br (reduced over the ranks). *gen_end: when the
 * generation ended (the scoring's start). The prompt set in *set_out. */
int rlpi_train_gen_batch(rlp_trainer *t, rlp_rollout_engine *e, uint64_t seed, rlp_step_record *br, rlp_batch **out,
                         rlp_prompt_set **set_out, double *gen_end)
{
    rlp_prompt_set *set = NULL;
    int rc = rlp_task_next_batch(&set, t->task, t->o.prompts_per_step, t->tok);
    if (rc)
        return rlpi_error_wrap("prompts");
    size_t n = 0;
    rlp_prompt_set_size(&n, set);
    rlp_sampling_options s = t->o.sampling;
    /* each rank draws its own random streams (rank 0 the single-process ones) */
    s.seed = t->rank ? rlpi_train_mix_seed(seed, (uint64_t)t->rank) : seed;
    if (t->remote)
        s.seed >>= 1; /* servers take a signed 64-bit seed */
    size_t first = 0, count = n;
    if (t->world > 1)
        rank_share(t, n, &first, &count);
    rlp_batch *b = NULL;
    if ((rc = rlpi_train_generate(&b, e, set, first, count, &s, t->o.multiturn.env ? &t->o.multiturn : NULL,
                                  t->ext_tok, t->o.worker_retries)))
        rlpi_error_wrap("generate");
    *gen_end = rlpi_now_s();
    if (!rc)
        rc = score_batch(t, b, br);
    if (!rc && t->world > 1)
        rc = reduce_scores(t, br);
    if (rc) {
        rlp_batch_free(b);
        rlp_prompt_set_free(set);
        return rc;
    }
    *out = b;
    *set_out = set;
    return RLP_OK;
}

/* SYNC and PULL: this step's prompts, generated and scored now. */
static int collect_sync(rlp_trainer *t, rlp_step_record *rec, rlp_batch **out)
{
    const uint64_t k = t->steps_done + 1;
    double t0 = rlpi_now_s();
    uint64_t seed = rlpi_train_mix_seed(t->o.seed, k);
    rec->sampling_seed = seed >> 1;
    rlp_rollout_engine *e = t->engine;
    int rc = RLP_OK;
    if (t->remote && !t->sync && (rc = create_sync(t)))
        return rc;
    if (t->remote) {
        /* the workers load the latest published version, then generate */
        e = t->ro_engine;
        rc = rlp_synchronizer_pull(t->sync, e);
        if (rc == RLP_E_NETWORK) {
            rlpi_train_pull_warning(&t->pull_warnings, NULL, NULL, rc);
            rc = RLP_OK;
        } else if (rc) {
            return rlpi_error_wrap("weights");
        }
    } else if (t->o.mode == RLP_TRAIN_PULL && (rc = rlp_rollout_engine_update_weights(e, t->policy))) {
        return rlpi_error_wrap("weights");
    }
    if (t->o.rl.filter_equal_groups && t->o.max_gen_batches > 0)
        return rlpi_train_collect_dynamic(t, e, seed, t0, rec, out);
    rlp_prompt_set *set = NULL;
    rlp_batch *b = NULL;
    double t1 = t0;
    if ((rc = rlpi_train_gen_batch(t, e, seed, rec, &b, &set, &t1)))
        return rc;
    double t2 = rlpi_now_s();
    size_t n = 0;
    rlp_prompt_set_size(&n, set);
    if ((rc = rlpi_train_keep_prompt_ids(t, n))) {
        rlp_prompt_set_free(set);
        rlp_batch_free(b);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        rlp_prompt_set_item(&it, set, i);
        t->prompt_ids[i] = it.index;
        if (i == 0)
            rec->epoch = it.epoch;
    }
    rlp_prompt_set_free(set);
    rec->n_prompts = n;
    rec->rollout_seconds = t1 - t0;
    rec->reward_seconds = t2 - t1;
    rec->trainer_idle_seconds = t2 - t0;
    rec->rollout_tokens = rec->completion_tokens;
    *out = b;
    return RLP_OK;
}

/* The task cursor after a group: the template's, at the group's epoch
 * and position + 1 (the end of an epoch reads as the next one's start). */
static int cursor_after(rlp_trainer *t, const rlp_provenance *p)
{
    char *text = NULL;
    int rc = rlpi_train_cursor_at(t->cursor, sizeof t->cursor, p->epoch, p->position + 1, &text);
    if (rc)
        return rc;
    snprintf(t->cursor, sizeof t->cursor, "%s", text);
    free(text);
    return RLP_OK;
}

/* ASYNC: waits for the step's groups (at the trainer's version, at most η
 * old) from the rollout worker's buffer. */
static int collect_async(rlp_trainer *t, rlp_step_record *rec, rlp_batch **out)
{
    int rc;
    if (!t->sync && (rc = create_sync(t)))
        return rc;
    if (!t->worker && !t->inbox) {
        rlp_rollout_worker_options wo;
        rlp_rollout_worker_options_init(&wo, RLP_ROLLOUT_WORKER_OPTIONS_VERSION);
        wo.prompts_per_batch = t->o.prompts_per_step;
        wo.seed = t->o.seed;
        wo.first_batch = t->steps_done;
        wo.sampling = t->o.sampling;
        wo.tokenizer = t->ext_tok;
        wo.retries = t->o.worker_retries;
        wo.remote = t->remote;
        wo.multiturn = t->o.multiturn;
        if ((rc = rlp_rollout_worker_create(&t->worker, t->ro_engine, t->task, t->reward, t->sync, t->buf, &wo)))
            return rc;
        /* remote workers: η + 1 batches generate at once (the most the gate
         * admits), so that network round trips and a straggling request
         * overlap with the next batch instead of stalling the swarm */
        size_t lanes = t->remote ? (size_t)t->o.max_staleness : 0;
        if (lanes > RLPI_MAX_LANES - 1)
            lanes = RLPI_MAX_LANES - 1;
        pthread_mutex_lock(&t->urls_mu); /* the set they start with: the current one */
        while (!rc && t->n_ro_lanes < lanes) {
            rlp_rollout_engine *e = NULL;
            if ((rc = create_remote_engine(t, &e)))
                break;
            t->ro_lanes[t->n_ro_lanes++] = e;
            rc = rlp_rollout_worker_add_engine(t->worker, e);
        }
        pthread_mutex_unlock(&t->urls_mu);
        if (rc || (rc = rlp_rollout_worker_start(t->worker)))
            return rc;
    }
    uint64_t v = 0;
    rlp_policy_version(&v, t->policy);
    double t0 = rlpi_now_s();
    unsigned stalled = 0;
    rlp_batch *b = NULL;
    for (;;) {
        /* workers of other processes: what they wrote into the inbox */
        if (t->inbox && (rc = rlp_replay_buffer_ingest_dir(t->buf, t->inbox, NULL)))
            return rlpi_error_wrap("rollout_inbox");
        rc = rlp_replay_buffer_pull(&b, t->buf, t->o.prompts_per_step, v, 200);
        if (rc == RLP_OK)
            break;
        if (rc != RLP_E_TIMEOUT)
            return rlpi_error_wrap("replay buffer");
        if (atomic_exchange(&t->interrupt, 0))
            return rlpi_error_set(RLP_E_CLOSED, "interrupted while waiting for rollouts");
        if (t->inbox)
            continue; /* their gates are theirs: the host interrupts a wait that lasts */
        const char *why = NULL;
        if ((rc = rlp_rollout_worker_error(t->worker, &why)) != RLP_OK)
            return rlpi_error_set(rc, "%s", why);
        rlp_rollout_worker_stats ws = {.version = 1};
        rlp_rollout_worker_stats_get(&ws, t->worker);
        if (!ws.running)
            return rlpi_error_set(RLP_E_CLOSED, "the rollout thread has stopped");
        /* the worker waits at a closed gate while the buffer cannot make a
         * step: nothing will ever open it. A safety net: every step
         * advances the version, but groups the buffer dropped as stale
         * still count as accepted at the gate */
        rlp_buffer_stats bs = {.version = 1};
        rlp_replay_buffer_stats(&bs, t->buf);
        if (ws.at_gate && bs.size < t->o.prompts_per_step) {
            if (++stalled >= (t->o.stall_polls ? t->o.stall_polls : 10)) {
                rlp_sync_stats ss = {.version = 1};
                rlp_synchronizer_stats(&ss, t->sync);
                return rlpi_error_set(RLP_E_TIMEOUT, "the staleness gate admits no more rollouts at version %llu "
                                      "(%llu groups accepted, %llu dropped by the buffer as stale) and the buffer "
                                      "holds %llu of the %u groups a step needs; resume from the last checkpoint "
                                      "(the gate restarts at its version)",
                                      (unsigned long long)v, (unsigned long long)ss.accepted,
                                      (unsigned long long)bs.dropped_stale, (unsigned long long)bs.size,
                                      t->o.prompts_per_step);
            }
        } else {
            stalled = 0;
        }
    }
    rec->trainer_idle_seconds = rlpi_now_s() - t0;
    /* where the groups came from: their provenance (each group is contiguous) */
    size_t n = 0, n_groups = 0;
    rlp_batch_size(&n, b);
    rlp_provenance last = {0};
    uint64_t prev = 0;
    if ((rc = rlpi_train_keep_prompt_ids(t, t->o.prompts_per_step))) {
        rlp_batch_free(b);
        return rc;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION};
        if ((rc = rlp_batch_get(&tr, b, i)) || (n_groups && tr.group_id == prev))
            continue;
        prev = tr.group_id;
        if (!tr.has_provenance || n_groups == t->cap_ids) {
            rc = rlpi_error_set(RLP_E_INTERNAL, "group %llu of the replay buffer carries no provenance",
                                (unsigned long long)tr.group_id);
            break;
        }
        if (n_groups == 0) {
            rec->epoch = tr.provenance.epoch;
            rec->sampling_seed = tr.provenance.sampling_seed >> 1;
        }
        t->prompt_ids[n_groups++] = tr.provenance.prompt_index;
        last = tr.provenance;
    }
    /* the task cursor after the last group trained (a resume draws the
     * prompts generated but not trained again) */
    if (!rc && n_groups)
        rc = cursor_after(t, &last);
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    rec->n_prompts = n_groups;
    /* the metrics on a copy: the batch keeps the reward it was pushed with */
    rlp_batch *copy = NULL;
    if (t->n_metrics && (rc = rlpi_train_batch_copy(&copy, b)) == RLP_OK) {
        rc = score_metrics(t, copy, rec);
        rlp_batch_free(copy);
    }
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    rlpi_train_reward_summary(rec, b);
    /* the rollout side's figures since the previous step (workers of
     * other processes: only what the batch itself tells) */
    rlp_rollout_worker_stats ws = {.version = 1};
    if (t->worker)
        rlp_rollout_worker_stats_get(&ws, t->worker);
    else
        ws = t->seen, ws.tokens += rec->completion_tokens;
    rec->rollout_seconds = ws.generate_seconds - t->seen.generate_seconds;
    rec->reward_seconds = ws.reward_seconds - t->seen.reward_seconds;
    rec->rollout_idle_seconds = ws.idle_seconds - t->seen.idle_seconds;
    rec->rollout_tokens = ws.tokens - t->seen.tokens;
    rec->reward_errors = ws.reward_errors - t->seen.reward_errors;
    rec->reward_timeouts = ws.reward_timeouts - t->seen.reward_timeouts;
    rec->reward_nonfinite = ws.reward_nonfinite - t->seen.reward_nonfinite;
    rec->reward_crashed = ws.reward_crashed - t->seen.reward_crashed;
    t->seen = ws;
    rlp_buffer_stats bs = {.version = 1};
    rlp_replay_buffer_stats(&bs, t->buf);
    rec->buffer_dropped = bs.dropped_stale - t->seen_dropped;
    rec->buffer_dropped_total = bs.dropped_stale;
    rec->buffer_size = bs.size;
    t->seen_dropped = bs.dropped_stale;
    *out = b;
    return RLP_OK;
}

int rlp_trainer_step(rlp_trainer *t, rlp_step_record *out)
{
    RLPI_CHECK_ARG(t, "trainer is NULL");
    RLPI_CHECK_ARG(!out || (out->version >= 1 && out->version <= RLP_STEP_RECORD_VERSION),
                   "rec->version: unknown version");
    if (t->failed)
        return rlpi_error_set(RLP_E_STATE, "rlp_trainer_step: an earlier step failed; free the trainer and resume "
                              "the run from its last checkpoint");
    if (t->stopped)
        return rlpi_error_set(RLP_E_CLOSED, "rlp_trainer_step: the trainer was stopped");
    rlp_step_record rec;
    memset(&rec, 0, sizeof rec);
    rec.version = RLP_STEP_RECORD_VERSION;
    rec.step = t->steps_done + 1;
    for (size_t i = 0; i < RLP_TRAINER_MAX_METRICS; i++)
        rec.metric_mean[i] = rec.metric_rate[i] = NAN;
    double t0 = rlpi_now_s();
    rlp_batch *b = NULL;
    int rc = t->o.mode == RLP_TRAIN_ASYNC ? collect_async(t, &rec, &b) : collect_sync(t, &rec, &b);
    if (rc == RLP_E_CLOSED && !t->stopped && t->o.mode == RLP_TRAIN_ASYNC &&
        (!t->worker || !rlp_rollout_worker_error(t->worker, NULL)))
        return rc; /* interrupted while waiting: nothing happened, the trainer stays usable */
    if (!rc && t->o.on_batch && t->o.on_batch(b, rec.step, t->o.on_batch_payload))
        rc = rlpi_error_set(RLP_E_CALLBACK, "on_batch failed at step %llu", (unsigned long long)rec.step);
    double t2 = rlpi_now_s();
    rec.rl.version = 1;
    if (rec.gen_batches == 0)
        rec.gen_batches = 1;
    rlpi_rl_mismatch mm;
    /* SYNC: the engine shares the weights about to change; its quantized
     * copy is re-made before the next decode either way */
    if (!rc && t->o.mode == RLP_TRAIN_SYNC && t->engine)
        rlpi_engine_release_qweights(t->engine);
    rlpi_return_free_heap();
    if (!rc && t->critic)
        rc = rlpi_train_critic_step(t, b, &rec, &mm);
    else if (!rc && (rc = rlpi_policy_train_rl(t->policy, b, t->o.ref, &t->o.rl, &rec.rl, &mm)))
        rlpi_error_wrap("RL step");
    if (!rc) {
        rec.mismatch_kl = mm.kl;
        rec.mismatch_is_mean = mm.is_mean;
        rec.mismatch_is_min = mm.is_min;
        rec.mismatch_is_max = mm.is_max;
        rec.mismatch_abs_mean = mm.abs_mean;
        rec.overlong_filtered = mm.overlong_filtered;
        rec.rollout_is_mean = mm.corr_is_mean;
        rec.rollout_is_min = mm.corr_is_min;
        rec.rollout_is_max = mm.corr_is_max;
        rec.rollout_is_truncated = mm.corr_is_truncated;
        rec.rollout_is_ess = mm.corr_is_ess;
        rec.rollout_rs_masked = mm.rs_tokens ? (double)mm.rs_rejected_tokens / (double)mm.rs_tokens : 0.0;
        rec.rollout_rs_seq_masked = mm.rs_seqs ? (double)mm.rs_rejected_seqs / (double)mm.rs_seqs : 0.0;
        rec.rollout_veto = mm.rs_seqs ? (double)mm.rs_vetoed_seqs / (double)mm.rs_seqs : 0.0;
    }
    double t3 = rlpi_now_s();
    rlp_batch_free(b);
    rlp_sync_stats before = {.version = 1}, after = {.version = 1};
    if (t->sync)
        rlp_synchronizer_stats(&before, t->sync);
    if (!rc && t->sync && (rc = rlp_synchronizer_publish(t->sync, t->policy)))
        rlpi_error_wrap("publishing version %llu", (unsigned long long)rec.rl.policy_version);
    if (!rc && t->sync && rlp_synchronizer_stats(&after, t->sync) == RLP_OK)
        rec.publish_bytes = after.bytes_published - before.bytes_published;
    double t4 = rlpi_now_s();
    atomic_store(&t->interrupt, 0);
    if (rc) {
        t->failed = 1;
        return rlpi_error_wrap("step %llu", (unsigned long long)rec.step);
    }
    t->steps_done = rec.step;
    rec.policy_version = rec.rl.policy_version;
    rec.prompt_index = t->prompt_ids;
    rec.train_seconds = t3 - t2;
    rec.publish_seconds = t4 - t3;
    rec.step_seconds = t4 - t0;
    if (t->o.mode != RLP_TRAIN_ASYNC)
        rec.rollout_idle_seconds = t4 - (t0 + rec.trainer_idle_seconds);
    rec.tokens_per_second = rec.rollout_seconds > 0 ? (double)rec.rollout_tokens / rec.rollout_seconds : NAN;
    t->last = rec;
    t->have_last = 1;
    if (out) { /* a version-1 caller's record ends before the episode fields, a version-2 one before the
                * mismatch, a version-3 one before publish_bytes, a version-4 one before gen_batches,
                * a version-5 one before value_loss */
        uint32_t v = out->version;
        memcpy(out, &rec, v >= 6   ? sizeof rec
                          : v == 5 ? offsetof(rlp_step_record, value_loss)
                          : v == 4 ? offsetof(rlp_step_record, gen_batches)
                          : v == 3 ? offsetof(rlp_step_record, publish_bytes)
                          : v == 2 ? offsetof(rlp_step_record, mismatch_kl)
                                   : offsetof(rlp_step_record, episodes));
        out->version = v;
    }
    return RLP_OK;
}

int rlp_trainer_step_json(const rlp_trainer *t, char *buf, size_t cap, size_t *len_out)
{
    RLPI_CHECK_ARG(t && len_out, "trainer and len_out are required");
    RLPI_CHECK_ARG(buf || cap == 0, "buf is NULL");
    if (!t->have_last)
        return rlpi_error_set(RLP_E_STATE, "%s: no step has run yet", __func__);
    char *text = rlpi_train_record_json(t, &t->last);
    if (!text)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    size_t len = strlen(text);
    *len_out = len;
    if (len + 1 > cap) {
        free(text);
        return rlpi_error_set(RLP_E_OVERFLOW, "%s: %zu bytes needed", __func__, len + 1);
    }
    memcpy(buf, text, len + 1);
    free(text);
    return RLP_OK;
}

/* ------------------------------------------------------------------------ */
/* Generation and evaluation with the current weights                      */
/* ------------------------------------------------------------------------ */

int rlp_trainer_generate(rlp_batch **out, rlp_trainer *t, const rlp_prompt_set *set, const rlp_sampling_options *s)
{
    RLPI_CHECK_ARG(out && t && set && s, "out, trainer, set and sampling are required");
    RLPI_CHECK_ARG(s->version == RLP_SAMPLING_OPTIONS_VERSION, "sampling->version: unknown version");
    int rc;
    rlp_rollout_engine *e = t->engine;
    if (!e) {
        /* ASYNC and remote PULL: an engine on the trainer's context that
         * shares the policy's weights */
        if (!t->eval_engine && (rc = local_engine(t, &t->eval_engine, t->policy, 1, engine_batch(t))))
            return rlpi_error_wrap("%s: evaluation engine", __func__);
        e = t->eval_engine;
    } else if (t->o.mode == RLP_TRAIN_PULL && (rc = rlp_rollout_engine_update_weights(e, t->policy))) {
        return rlpi_error_wrap("%s: weights", __func__);
    }
    return rlpi_train_generate(out, e, set, 0, SIZE_MAX, s, t->o.multiturn.env ? &t->o.multiturn : NULL, t->ext_tok,
                               t->o.worker_retries);
}

int rlp_trainer_evaluate(rlp_eval_result *out, rlp_trainer *t, const rlp_prompt_set *set,
                         const rlp_sampling_options *s, rlp_reward_fn *verifier, double threshold, double *per_prompt,
                         rlp_batch **out_batch)
{
    RLPI_CHECK_ARG(out && out->version == RLP_EVAL_RESULT_VERSION, "out is NULL or of an unknown version");
    RLPI_CHECK_ARG(t && set && s && verifier, "trainer, set, sampling and verifier are required");
    RLPI_CHECK_ARG(isfinite(threshold), "threshold must be finite");
    double t0 = rlpi_now_s();
    size_t n = 0, total = 0;
    rlp_prompt_set_size(&n, set);
    rlp_batch *b = NULL;
    int rc = rlp_trainer_generate(&b, t, set, s);
    rlp_reward_stats st = {.version = RLP_REWARD_STATS_VERSION};
    if (!rc && (rc = rlp_reward_fn_score(verifier, b, &st)))
        rlpi_error_wrap("verifier");
    if (!rc)
        rlp_batch_size(&total, b);
    const size_t k = s->n;
    if (!rc && total != n * k)
        rc = rlpi_error_set(RLP_E_INTERNAL, "%s: %zu completions for %zu prompts × %zu", __func__, total, n, k);
    double *per = rc ? NULL : calloc(n ? n : 1, sizeof *per);
    if (!rc && !per)
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    rlp_eval_result r = {.version = RLP_EVAL_RESULT_VERSION, .prompts = n, .completions = total};
    double sum = 0, tokens = 0;
    uint64_t valid = 0;
    for (size_t i = 0; i < total; i++) {
        /* prompt-major: the k samples of prompt 0, then of prompt 1, … */
        rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&tr, b, i);
        int ok = tr.valid && !isnan(tr.reward) && tr.reward >= threshold;
        per[i / k] += ok ? 1.0 / (double)k : 0.0;
        r.correct += (uint64_t)ok;
        tokens += (double)tr.n_completion_tokens;
        r.truncated += tr.finish_reason == RLP_FINISH_LENGTH;
        if (tr.valid && !isnan(tr.reward)) {
            valid++;
            sum += tr.reward;
        }
    }
    r.accuracy = total ? (double)r.correct / (double)total : NAN;
    r.reward_mean = valid ? sum / (double)valid : NAN;
    r.mean_completion_tokens = total ? tokens / (double)total : NAN;
    /* greedy or one sample: one Bernoulli trial per prompt (Wilson); k
     * samples of a prompt are correlated, so prompts are resampled */
    if (k == 1)
        rc = rlp_stats_wilson(&r.accuracy_low, &r.accuracy_high, r.correct, total, 1.959963984540054);
    else
        rc = rlp_stats_bootstrap_mean(&r.accuracy_low, &r.accuracy_high, per, n, 2000, s->seed * 2 + 1);
    if (!rc && per_prompt)
        memcpy(per_prompt, per, n * sizeof *per);
    free(per);
    r.seconds = rlpi_now_s() - t0;
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    *out = r;
    if (out_batch)
        *out_batch = b;
    else
        rlp_batch_free(b);
    return RLP_OK;
}
