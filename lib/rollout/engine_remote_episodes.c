/* Episodes on a remote engine: every turn is one completion request with
 * the episode's ids so far (prompt, turns, observations), so the server's
 * prefix cache does what the local engine's kept KV slot does. Each
 * sample is its own episode, run start to end by one of a pool of
 * threads, each with its own HTTP client: an episode whose environment
 * call is slow holds up only its own thread, never the others' requests.
 * The turn and observation rules are episode_local.c's; keep them equal. */
#include "rollout/engine.h"
#include "rollout/episode_common.h"

#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RLPI_HAVE_CURL
#include "env/env_call_wait.h"
#include "rollout/remote_client.h"

/* Episode threads when the engine sets no max_in_flight: each holds at
 * most one request or one environment call at a time. */
#define DEFAULT_THREADS 16

typedef struct rep_call {
    rlp_rollout_engine *e;
    const rlp_prompt *prompts;
    const rlp_sampling_options *sp; /* (n_prompts) resolved */
    const rlp_multiturn_options *mt;
    rlp_stream_fn cb;
    void *payload;
    const int32_t **ids; /* (n_prompts) prompt ids */
    size_t *lens;
    size_t *first; /* (n_prompts) index of the prompt's first sample */
    uint64_t group_base;
    int32_t vocab;
    uint32_t budget;   /* tokens after the prompt (model + observations) */
    uint64_t capacity; /* the servers' context (prompt + episode), UINT64_MAX unknown */
    rlpi_traj *trajs;  /* (N) prompt-major, sample-minor */
    size_t N, n_prompts;
    size_t next;        /* next episode to start (atomic) */
    pthread_mutex_t mu; /* the callback, the counters, the first error */
    int rc;             /* first failure of the call itself (no memory) */
    char msg[512];
    uint64_t tokens, errors;
} rep_call;

/* One episode on its thread, beside its trajectory. */
typedef struct rep_episode {
    rep_call *x;
    rlpi_remote_client *client;
    rlpi_traj *t;
    const rlp_sampling_options *s;
    size_t p;
    uint32_t j;
    uint64_t stream;
    rlpi_env_ep *ep;
    rlpi_episode_acc acc; /* text, turn rewards, metadata (episode_common.h) */
    rlp_episode_stats es;
    int turn_reason; /* how the last turn ended (RLP_FINISH_STOP before any) */
    size_t turn_start, turn_last;
    int32_t stop_index; /* of the last turn, -1 once an observation follows it */
    uint64_t version;   /* latest weights version seen */
} rep_episode;

static int aborted(const rep_call *x)
{
    return __atomic_load_n(&x->e->abort_requested, __ATOMIC_SEQ_CST) != 0;
}

/* The random seed of one turn's request: a pure function of (seed, group,
 * sample, turn), so a rerun draws the same turns whatever the batch. */
static uint64_t turn_seed(uint64_t seed, uint64_t stream, uint32_t turn)
{
    uint64_t z = seed + stream * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)turn * UINT64_C(0xD6E8FEB86659FD93);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return z >> 1; /* vLLM takes a signed 64-bit seed */
}

static int finish_reason_of(const char *s)
{
    if (!strcmp(s, "length"))
        return RLP_FINISH_LENGTH;
    if (!strcmp(s, "abort"))
        return RLP_FINISH_ABORT;
    return RLP_FINISH_STOP; /* "stop", and e.g. "eos" from some servers */
}

/* Which stop string ends a turn's text (the server keeps it: include_stop_str is forced on). */
static int32_t matched_stop(const rlp_sampling_options *s, const char *text, int finish)
{
    if (finish != RLP_FINISH_STOP)
        return -1;
    size_t tl = strlen(text);
    for (size_t i = 0; i < s->n_stop; i++) {
        size_t sl = strlen(s->stop[i]);
        if (tl >= sl && !memcmp(text + tl - sl, s->stop[i], sl))
            return (int32_t)i;
    }
    return -1;
}

/* The episode is over: end reason, error (NULL = none, else the sample is
 * invalid), finish_reason. */
static int end_episode(rep_episode *ep, int end, int reason, const char *error)
{
    if (error) {
        free(ep->t->error);
        if (!(ep->t->error = strdup(error)))
            return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
        ep->t->valid = 0;
    }
    ep->es.end = end;
    ep->t->finish_reason = reason;
    return RLP_OK;
}

/* Ends the episode as failed by its environment: the sample is invalid,
 * its finish_reason stays how its last turn ended (RLP_FINISH_ERROR means
 * a failed remote request, which a trainer generates again). */
static int env_fail(rep_episode *ep, const char *what, const char *why)
{
    char msg[512];
    snprintf(msg, sizeof msg, "environment '%s': %s: %s", rlp_env_name(ep->x->mt->env), what, why ? why : "failed");
    return end_episode(ep, RLP_EPISODE_ERROR, ep->turn_reason, msg);
}

/* The observation of a reply as ids (*ids malloc'd), its text appended to
 * the episode: each piece encoded alone with its own flags, as the local
 * engine does. A token piece outside the vocabulary fails the reply (*bad
 * set). */
/* Appends a reply's observation (its ids, then its text) unless it is
 * malformed (the episode fails) or leaves no room for a next turn (the
 * budget ends the episode); *over cleared when the model goes on. */
static int observe(rep_episode *ep, const rlp_env_reply *r, const char *what, bool *over)
{
    int32_t *obs = NULL;
    size_t n_obs = 0;
    char bad[160] = "";
    size_t text_mark = ep->acc.len;
    int rc = rlpi_episode_encode_reply(&ep->acc, ep->x->e->tok, ep->x->vocab, r, &obs, &n_obs, bad, sizeof bad);
    if (rc)
        return rc;
    size_t ctx_len = ep->x->lens[ep->p] + ep->t->n_tokens + n_obs + 1;
    if (bad[0] || ep->t->n_tokens + n_obs + 1 > ep->x->budget || ctx_len > ep->x->capacity) {
        rlpi_episode_text_cut(&ep->acc, text_mark); /* the observation is not part of the episode */
        free(obs);
        if (bad[0])
            return env_fail(ep, what, bad);
        /* the next turn needs room for the observation and at least one token */
        ep->es.observations_cut++;
        return end_episode(ep, RLP_EPISODE_BUDGET, RLP_FINISH_LENGTH, NULL);
    }
    rc = rlpi_traj_push_observation(ep->t, obs, n_obs, ep->version);
    free(obs);
    if (rc)
        return rc;
    ep->es.observation_tokens += (uint32_t)n_obs;
    ep->es.observations_cut += r->truncated;
    ep->stop_index = -1;
    *over = false;
    return RLP_OK;
}

/* Runs one reset or step to its end. *over is set when the episode ended
 * (failure, deadline, abort, done, turn limit, budget); otherwise the
 * observation has been appended and the model writes the next turn. */
static int env_call(rep_episode *ep, int kind, const char *text, size_t len, const int32_t *ids, size_t n, bool *over)
{
    rep_call *x = ep->x;
    const char *what = kind == RLPI_ENV_RESET ? "reset" : "step";
    *over = true;
    rlpi_env_call *c = NULL;
    int rc = rlpi_env_call_submit(&c, ep->ep, kind, text, len, ids, n);
    if (rc)
        return rc;
    int st = rlpi_env_call_wait(c, x->mt->env, &x->e->abort_requested);
    if (st == RLPI_CALL_RUNNING) { /* aborted meanwhile: the call is abandoned */
        rlpi_env_call_release(c);
        return end_episode(ep, RLP_EPISODE_ABORT, RLP_FINISH_ABORT, NULL);
    }
    if (st == RLPI_CALL_TIMED_OUT) {
        const rlp_env_options *o = rlpi_env_options(x->mt->env);
        ep->es.tool_timeouts++;
        ep->es.tool_errors++;
        ep->es.tool_seconds += 1e-3 * o->timeout_ms;
        rlpi_env_call_release(c);
        char why[96];
        snprintf(why, sizeof why, "no answer within the %u ms deadline", o->timeout_ms);
        return env_fail(ep, what, why);
    }
    ep->es.tool_seconds += rlpi_env_call_seconds(c);
    const char *err = NULL;
    if (rlpi_env_call_status(c, &err) != RLP_OK) {
        ep->es.tool_errors++;
        rc = env_fail(ep, what, err);
        rlpi_env_call_release(c);
        return rc;
    }
    const rlp_env_reply *r = rlpi_env_call_reply(c);
    bool reset = kind == RLPI_ENV_RESET;
    if (!reset && rlpi_env_reply_is_tool_call(r))
        ep->es.tool_calls++;
    if (!reset && r->has_reward)
        rc = rlpi_episode_add_turn_reward(&ep->acc, ep->turn_last, r->reward);
    if (r->tool_error)
        ep->es.tool_errors++;
    if (!rc && r->metadata)
        rc = rlpi_episode_set_meta(&ep->acc, r->metadata);
    if (!rc && r->done)
        rc = end_episode(ep, RLP_EPISODE_DONE, RLP_FINISH_STOP, NULL);
    else if (!rc && !reset && ep->es.turns >= x->mt->max_turns)
        rc = end_episode(ep, RLP_EPISODE_MAX_TURNS, RLP_FINISH_STOP, NULL);
    else if (!rc)
        rc = observe(ep, r, what, over);
    rlpi_env_call_release(c);
    return rc;
}

/* One turn: a completion request for the ids so far. *over as env_call. */
static int model_turn(rep_episode *ep, bool *over)
{
    rep_call *x = ep->x;
    const rlp_sampling_options *s = ep->s;
    *over = true;
    if (aborted(x))
        return end_episode(ep, RLP_EPISODE_ABORT, RLP_FINISH_ABORT, NULL);
    rlpi_traj *t = ep->t;
    size_t np = x->lens[ep->p];
    int32_t *ctx = malloc((np + t->n_tokens) * sizeof *ctx);
    if (!ctx)
        return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
    memcpy(ctx, x->ids[ep->p], np * sizeof *ctx);
    if (t->n_tokens)
        memcpy(ctx + np, t->tokens, t->n_tokens * sizeof *ctx);
    uint64_t left = x->budget - t->n_tokens, room = x->capacity - (np + t->n_tokens);
    left = room < left ? room : left;
    uint32_t max_tokens = s->max_new_tokens < left ? s->max_new_tokens : (uint32_t)left;
    pthread_mutex_lock(&x->e->mu);
    uint64_t min_version = x->e->min_version;
    pthread_mutex_unlock(&x->e->mu);
    rlpi_remote_request rq = {.prompt = ctx,
                              .min_version = min_version,
                              .n_prompt = np + t->n_tokens,
                              .n = 1,
                              .max_tokens = max_tokens,
                              .temperature = s->temperature,
                              .top_p = s->top_p,
                              .min_p = s->min_p,
                              .top_k = s->top_k,
                              .seed = turn_seed(s->seed, ep->stream, ep->es.turns),
                              .has_seed = 1,
                              .stop = s->stop,
                              .n_stop = s->n_stop,
                              .stop_ids = s->stop_token_ids,
                              .n_stop_ids = s->n_stop_token_ids,
                              /* the action keeps its "</search>": the environment parses it */
                              .include_stop_str = 1};
    rlpi_remote_result res;
    int rc = rlpi_remote_client_complete(ep->client, &rq, 1, &res);
    free(ctx);
    if (rc)
        return rc;
    const rlpi_remote_choice *c = res.status == RLP_OK && res.n_choices >= 1 ? &res.choices[0] : NULL;
    if (!c) {
        const char *msg = res.status != RLP_OK ? (res.error ? res.error : rlp_status_str(res.status))
                                               : "the server returned no choice";
        pthread_mutex_lock(&x->mu);
        x->errors++;
        pthread_mutex_unlock(&x->mu);
        rc = end_episode(ep, RLP_EPISODE_ERROR, RLP_FINISH_ERROR, msg);
        rlpi_remote_result_clear(&res);
        return rc;
    }
    if (res.weight_version >= 0) {
        ep->version = (uint64_t)res.weight_version;
    } else {
        pthread_mutex_lock(&x->e->mu);
        ep->version = x->e->version;
        pthread_mutex_unlock(&x->e->mu);
    }
    if (ep->es.turns == 0) /* the weights of its first sampled token, as the local engine */
        t->policy_version = ep->version;
    ep->turn_start = t->n_tokens;
    for (size_t i = 0; !rc && i < c->n_tokens; i++)
        rc = rlpi_traj_push_token(t, c->tokens[i], c->logprobs[i], ep->version);
    const char *text = c->text ? c->text : "";
    if (!rc)
        rc = rlpi_episode_text_append(&ep->acc, text, strlen(text));
    int reason = finish_reason_of(c->finish_reason);
    size_t got = c->n_tokens;
    pthread_mutex_lock(&x->mu);
    x->tokens += got;
    pthread_mutex_unlock(&x->mu);
    ep->es.turns++;
    ep->turn_reason = reason;
    ep->turn_last = t->n_tokens ? t->n_tokens - 1 : 0;
    ep->stop_index = matched_stop(s, text, reason);
    if (!rc && reason == RLP_FINISH_ABORT)
        rc = end_episode(ep, RLP_EPISODE_ABORT, RLP_FINISH_ABORT, NULL);
    else if (!rc && reason == RLP_FINISH_LENGTH &&
             (t->n_tokens >= x->budget || np + t->n_tokens >= x->capacity || got < max_tokens))
        /* the budget, or the server's context (also when it stopped short of max_tokens) */
        rc = end_episode(ep, RLP_EPISODE_BUDGET, RLP_FINISH_LENGTH, NULL);
    else if (!rc)
        rc = env_call(ep, RLPI_ENV_STEP, text, strlen(text), t->tokens + ep->turn_start, t->n_tokens - ep->turn_start,
                      over);
    rlpi_remote_result_clear(&res);
    return rc;
}

/* metadata_json gains {"env": <the environment's last metadata>} */
/* Puts the episode's text, record, rewards, mask and metadata on its trajectory. */
static int close_episode(rep_episode *ep)
{
    ep->t->stop_index = ep->stop_index;
    return rlpi_episode_finalize(&ep->acc, ep->t, &ep->es);
}

static int fill_traj(rep_call *x, rlpi_traj *t, size_t p, uint32_t j)
{
    const rlp_prompt *pr = &x->prompts[p];
    const rlp_sampling_options *s = &x->sp[p];
    t->group_id = rlpi_engine_group_id(pr, p, x->group_base);
    t->sample_index = j;
    t->temperature = s->temperature;
    t->reward = NAN;
    t->valid = 1;
    t->stop_index = -1;
    t->n_prompt = x->lens[p];
    t->prompt = malloc(x->lens[p] * sizeof *t->prompt);
    if (!t->prompt)
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    memcpy(t->prompt, x->ids[p], x->lens[p] * sizeof *t->prompt);
    if (pr->text && !(t->prompt_text = strdup(pr->text)))
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    if (pr->metadata_json && !(t->metadata = strdup(pr->metadata_json)))
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    return RLP_OK;
}

/* Episode k of the call, reset to end, on the calling thread. */
static int run_episode(rep_call *x, rlpi_remote_client *client, size_t k)
{
    size_t p = 0;
    while (p + 1 < x->n_prompts && x->first[p + 1] <= k)
        p++;
    uint32_t j = (uint32_t)(k - x->first[p]);
    rep_episode ep = {.x = x,
                      .client = client,
                      .t = &x->trajs[k],
                      .s = &x->sp[p],
                      .p = p,
                      .j = j,
                      .turn_reason = RLP_FINISH_STOP,
                      .stop_index = -1};
    ep.es.version = RLP_EPISODE_STATS_VERSION;
    uint64_t stream_group = x->prompts[p].group_id ? x->prompts[p].group_id : p;
    ep.stream = rlpi_engine_stream(stream_group, j);
    pthread_mutex_lock(&x->e->mu);
    ep.version = x->e->version;
    pthread_mutex_unlock(&x->e->mu);
    ep.t->policy_version = ep.version;
    int rc = fill_traj(x, ep.t, p, j);
    if (!rc)
        rc = rlpi_episode_text_append(&ep.acc, "", 0);
    if (!rc)
        rc = rlpi_env_ep_create(&ep.ep, x->mt->env);
    bool over = true;
    const char *meta = x->prompts[p].metadata_json;
    if (!rc && aborted(x))
        rc = end_episode(&ep, RLP_EPISODE_ABORT, RLP_FINISH_ABORT, NULL);
    else if (!rc)
        rc = env_call(&ep, RLPI_ENV_RESET, meta, meta ? strlen(meta) : 0, NULL, 0, &over);
    while (!rc && !over)
        rc = model_turn(&ep, &over);
    if (!rc)
        rc = close_episode(&ep);
    if (!rc && x->cb) {
        /* no token stream from a remote episode: one event when it ends, one callback at a time */
        rlp_stream_event ev = {.version = 1,
                               .prompt_index = p,
                               .sample_index = j,
                               .token = -1,
                               .policy_version = ep.t->policy_version,
                               .text = ep.t->text,
                               .text_len = strlen(ep.t->text),
                               .finish_reason = ep.t->finish_reason};
        pthread_mutex_lock(&x->mu);
        x->cb(&ev, x->payload);
        pthread_mutex_unlock(&x->mu);
    }
    rlpi_env_ep_release(ep.ep);
    rlpi_episode_acc_clear(&ep.acc);
    return rc;
}

typedef struct rep_worker {
    rep_call *x;
    rlpi_remote_client *client;
    pthread_t th;
} rep_worker;

static void *worker_main(void *arg)
{
    rep_worker *w = arg;
    rep_call *x = w->x;
    for (;;) {
        if (__atomic_load_n(&x->rc, __ATOMIC_SEQ_CST))
            break;
        size_t k = __atomic_fetch_add(&x->next, 1, __ATOMIC_SEQ_CST);
        if (k >= x->N)
            break;
        int rc = run_episode(x, w->client, k);
        if (rc) {
            /* the message is this thread's: hand it to the caller's */
            pthread_mutex_lock(&x->mu);
            if (!x->rc) {
                snprintf(x->msg, sizeof x->msg, "%s", rlp_error_last());
                __atomic_store_n(&x->rc, rc, __ATOMIC_SEQ_CST);
            }
            pthread_mutex_unlock(&x->mu);
            break;
        }
    }
    return NULL;
}

/* Runs every episode on up to n_threads threads (the caller's is one of them). */
static int run_all(rep_call *x, size_t n_threads)
{
    n_threads = n_threads ? n_threads : 1;
    rep_worker *w = calloc(n_threads, sizeof *w);
    if (!w)
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    w[0].x = x;
    w[0].client = x->e->client; /* the engine's own client, used by this thread */
    size_t n = 1;
    for (size_t i = 1; i < n_threads; i++, n++) {
        w[i].x = x;
        /* fewer threads than asked when one cannot start: slower, not wrong */
        if (rlpi_remote_client_clone(&w[i].client, x->e->client, i) != RLP_OK)
            break;
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
            rlpi_remote_client_free(w[i].client);
            break;
        }
    }
    worker_main(&w[0]);
    for (size_t i = 1; i < n; i++) {
        pthread_join(w[i].th, NULL);
        rlpi_remote_client_free(w[i].client);
    }
    free(w);
    if (x->rc)
        return rlpi_error_set(x->rc, "%s", x->msg);
    return RLP_OK;
}

int rlpi_engine_remote_episodes(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                                const rlp_sampling_options *sp, const rlp_multiturn_options *mt, rlp_stream_fn cb,
                                void *payload)
{
    rep_call x = {.e = e, .prompts = prompts, .sp = sp, .mt = mt, .cb = cb, .payload = payload, .n_prompts = n_prompts};
    size_t vocab = 0;
    int rc = rlp_tokenizer_vocab_size(&vocab, e->tok);
    x.vocab = (int32_t)vocab;
    /* the servers' context plays the local engine's KV capacity: asked
     * once per engine; unknown (a server that does not say), the budget is
     * mt->max_tokens and a full context shows as a turn cut short */
    pthread_mutex_lock(&e->mu);
    uint64_t cap = e->remote_ctx;
    pthread_mutex_unlock(&e->mu);
    if (!rc && !cap) {
        cap = rlpi_remote_client_context(e->client);
        pthread_mutex_lock(&e->mu);
        e->remote_ctx = cap;
        pthread_mutex_unlock(&e->mu);
    }
    x.capacity = cap ? cap : UINT64_MAX;
    x.budget = cap && cap < UINT32_MAX / 2 ? (uint32_t)cap : UINT32_MAX / 2;
    if (mt->max_tokens && mt->max_tokens < x.budget)
        x.budget = mt->max_tokens;
    x.ids = calloc(n_prompts, sizeof *x.ids);
    x.lens = calloc(n_prompts, sizeof *x.lens);
    x.first = calloc(n_prompts, sizeof *x.first);
    int32_t **owned = calloc(n_prompts, sizeof *owned);
    if (!rc && !(x.ids && x.lens && x.first && owned))
        rc = rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    for (size_t p = 0; !rc && p < n_prompts; p++) {
        rc = rlpi_engine_prompt_ids(e, &prompts[p], p, &x.ids[p], &x.lens[p], &owned[p]);
        if (!rc && x.lens[p] == 0)
            rc = rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu has no tokens", p);
        if (!rc && x.lens[p] + 1 > x.capacity)
            rc = rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu has %zu tokens; the servers hold %llu per sequence", p,
                                x.lens[p], (unsigned long long)x.capacity);
        for (size_t i = 0; !rc && i < x.lens[p]; i++)
            if (x.ids[p][i] < 0 || x.ids[p][i] >= x.vocab)
                rc = rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu: token %zu has id %d outside the vocabulary of %d",
                                    p, i, x.ids[p][i], x.vocab);
        x.first[p] = x.N;
        x.N += sp[p].n;
    }
    if (!rc) {
        x.trajs = calloc(x.N, sizeof *x.trajs);
        if (!x.trajs)
            rc = rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    }
    if (!rc) {
        pthread_mutex_lock(&e->mu);
        x.group_base = e->next_group;
        e->next_group += n_prompts;
        pthread_mutex_unlock(&e->mu);
        pthread_mutex_init(&x.mu, NULL);
        size_t limit = e->ropts.max_in_flight ? e->ropts.max_in_flight : DEFAULT_THREADS;
        rc = run_all(&x, x.N < limit ? x.N : limit);
        pthread_mutex_destroy(&x.mu);
    }
    if (!rc)
        rc = rlpi_batch_reserve(out, x.N);
    for (size_t k = 0; !rc && k < x.N; k++)
        rc = rlpi_batch_take(out, &x.trajs[k]);
    if (x.trajs) {
        pthread_mutex_lock(&e->mu);
        e->stats.remote_errors += x.errors;
        e->stats.prompts += n_prompts;
        e->stats.completions += rc ? 0 : x.N;
        e->stats.decode_tokens += x.tokens;
        pthread_mutex_unlock(&e->mu);
    }
    for (size_t k = 0; x.trajs && k < x.N; k++)
        rlpi_traj_clear(&x.trajs[k]);
    free(x.trajs);
    for (size_t p = 0; owned && p < n_prompts; p++)
        free(owned[p]);
    free(owned);
    free(x.ids);
    free(x.lens);
    free(x.first);
    return rc;
}

#else

int rlpi_engine_remote_episodes(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                                const rlp_sampling_options *s, const rlp_multiturn_options *mt, rlp_stream_fn cb,
                                void *payload)
{
    (void)e, (void)out, (void)prompts, (void)n_prompts, (void)s, (void)mt, (void)cb, (void)payload;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "remote rollout engine: librlpost was built without libcurl");
}

#endif
