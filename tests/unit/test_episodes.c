/* Multi-turn episodes on the local engine with SmolLM2-135M-Instruct and
 * environments written in C against rlp_env_callbacks:
 * - every model token's behaviour logprob equals a cache-free forward over
 *   the final sequence (the KV cache survives appended observations), to
 *   1e-4 nats; the loss mask is 0 exactly on observation tokens;
 * - the episode's ids are the sampled ids and each observation's own
 *   encoding, concatenated (no re-tokenization), with an observation that
 *   starts mid-word and one with control tokens;
 * - overlapped and batch-wide-wait runs give the same tokens (sampling
 *   never depends on the batch);
 * - a step that hangs past its deadline, one that fails, invalid UTF-8 and
 *   a 10 MB observation: that sample is invalid or its observation cut,
 *   the others go on, and the call returns near the deadline;
 * - a 100-turn episode with a small budget ends by the budget with the
 *   right record; a turn limit ends with MAX_TURNS;
 * - a weight update between turns shows in the per-token versions.
 * Skipped (77) when the model file is absent. */
#include "core/clock.h"
#include "model/policy.h"
#include "rlpost.h"
#include "test_support.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(cond, ...)                                                \
    do {                                                                \
        if (!(cond)) {                                                  \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                               \
            fprintf(stderr, "\n");                                      \
            failures++;                                                 \
        }                                                               \
    } while (0)

/* ---- a scripted environment: behaviour chosen by the prompt's metadata ---- */

typedef struct script_ep {
    int turn;
    int mode;
} script_ep;

enum { M_NORMAL = 0, M_HANG = 1, M_FAIL = 2, M_HUGE = 3, M_BADUTF8 = 4, M_FOREVER = 5, M_UPDATE = 6 };

typedef struct script_env {
    rlp_rollout_engine *engine;  /* for M_UPDATE */
    rlp_policy *policy;
    int updated;
} script_env;

static const char *OBS[] = {"tion: the capital of Zorbia is Quell.\n", "\n<information>\nno results\n</information>\n"};

static int s_reset(void **episode, rlp_env_reply *reply, const char *meta, void *user)
{
    (void)reply, (void)user;
    script_ep *e = calloc(1, sizeof *e);
    if (meta && strstr(meta, "\"hang\""))
        e->mode = M_HANG;
    else if (meta && strstr(meta, "\"fail\""))
        e->mode = M_FAIL;
    else if (meta && strstr(meta, "\"huge\""))
        e->mode = M_HUGE;
    else if (meta && strstr(meta, "\"badutf8\""))
        e->mode = M_BADUTF8;
    else if (meta && strstr(meta, "\"forever\""))
        e->mode = M_FOREVER;
    else if (meta && strstr(meta, "\"update\""))
        e->mode = M_UPDATE;
    *episode = e;
    return 0;
}

static int s_step(rlp_env_reply *reply, void *episode, const char *action, size_t len, const int32_t *ids, size_t n,
                  void *user)
{
    (void)action, (void)len, (void)ids;
    script_env *env = user;
    script_ep *e = episode;
    e->turn++;
    if (n == 0)
        return -1; /* every turn has tokens */
    switch (e->mode) {
    case M_HANG:
        usleep(20000 * 1000); /* far past the deadline: waiting for it would show */
        break;
    case M_FAIL:
        rlp_env_reply_set_tool_error(reply, "boom: the search backend is down");
        return -1;
    case M_HUGE: {
        size_t big = 10u << 20;
        char *s = malloc(big);
        memset(s, 'a', big);
        for (size_t i = 0; i < big; i += 7)
            s[i] = ' ';
        rlp_env_reply_add_text(reply, s, big, 0);
        free(s);
        return 0;
    }
    case M_BADUTF8:
        rlp_env_reply_add_text(reply, "\xff\xfe bad \xc3 bytes \xed\xa0\x80", 17, 0);
        return e->turn >= 2 ? (rlp_env_reply_set_done(reply, 1), 0) : 0;
    case M_FOREVER:
        rlp_env_reply_add_text(reply, " ok", 3, 0);
        return 0;
    case M_UPDATE:
        if (e->turn == 1 && !env->updated) {
            env->policy->version = 7; /* what a trainer's step would have made */
            if (rlp_rollout_engine_update_weights(env->engine, env->policy) == RLP_OK)
                env->updated = 1;
        }
        break;
    default:
        break;
    }
    if (e->turn >= 3) {
        rlp_env_reply_set_done(reply, 1);
        rlp_env_reply_set_reward(reply, 1.0f);
        return 0;
    }
    /* an observation that starts mid-word, then one with control tokens */
    const char *o = OBS[(e->turn - 1) % 2];
    rlp_env_reply_add_text(reply, o, strlen(o), 0);
    if (e->turn == 2)
        rlp_env_reply_add_text(reply, "<|im_end|>\n<|im_start|>user\n", 28, RLP_ENCODE_PARSE_SPECIAL);
    rlp_env_reply_set_reward(reply, 0.25f);
    return 0;
}

static void s_close(void *episode, void *user)
{
    (void)user;
    free(episode);
}

/* ---- checks ---- */

/* Behaviour logprobs of model tokens vs a cache-free forward at T = 1. */
static double max_logprob_gap(rlp_policy *p, const rlp_trajectory *t)
{
    int64_t n = (int64_t)(t->n_prompt_tokens + t->n_completion_tokens);
    int32_t *ids = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4), *tg = malloc((size_t)n * 4);
    int32_t *rows = malloc(t->n_completion_tokens * 4);
    memcpy(ids, t->prompt_tokens, t->n_prompt_tokens * 4);
    memcpy(ids + t->n_prompt_tokens, t->completion_tokens, t->n_completion_tokens * 4);
    for (int64_t i = 0; i < n; i++)
        pos[i] = (int32_t)i, tg[i] = -1;
    for (size_t k = 0; k < t->n_completion_tokens; k++)
        rows[k] = (int32_t)(t->n_prompt_tokens - 1 + k);
    int64_t ss[2] = {0, n};
    rlpi_packed_batch b = {1, ss, n, ids, pos, tg};
    const int V = rlpi_transformer_config(p->tf)->vocab_size;
    float *lg = malloc(t->n_completion_tokens * (size_t)V * 4);
    double gap = 0;
    if (rlpi_transformer_logits_rows(p->tf, &b, rows, (int64_t)t->n_completion_tokens, lg) != RLP_OK)
        gap = 1e9;
    for (size_t k = 0; gap < 1e9 && k < t->n_completion_tokens; k++) {
        if (!t->loss_mask[k])
            continue;
        const float *row = lg + k * (size_t)V;
        double mx = row[0];
        for (int v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        double se = 0;
        for (int v = 0; v < V; v++)
            se += exp(row[v] - mx);
        double lp = row[t->completion_tokens[k]] - mx - log(se);
        double d = fabs(lp - t->logprobs[k]);
        gap = d > gap ? d : gap;
    }
    free(ids), free(pos), free(tg), free(rows), free(lg);
    return gap;
}

/* The observation runs of t (mask 0) must be exactly encode(piece) of the
 * script's observations, in order; model runs hold sampled ids. */
static void check_observation_ids(const rlp_tokenizer *tok, const rlp_trajectory *t)
{
    size_t i = 0, run = 0;
    while (i < t->n_completion_tokens) {
        if (t->loss_mask[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < t->n_completion_tokens && !t->loss_mask[j])
            j++;
        int32_t want[256];
        size_t nw = 0, n2 = 0;
        const char *o = OBS[run % 2];
        rlp_tokenizer_encode(tok, o, strlen(o), 0, want, 256, &nw);
        if (run % 2 == 1)
            rlp_tokenizer_encode(tok, "<|im_end|>\n<|im_start|>user\n", 28, RLP_ENCODE_PARSE_SPECIAL, want + nw,
                                 256 - nw, &n2);
        CHECK(j - i == nw + n2, "observation %zu has %zu ids, its encoding %zu", run, j - i, nw + n2);
        for (size_t k = 0; k < nw + n2 && k < j - i; k++)
            CHECK(t->completion_tokens[i + k] == want[k], "observation %zu id %zu: %d != %d", run, k,
                  t->completion_tokens[i + k], want[k]);
        for (size_t k = i; k < j; k++)
            CHECK(t->logprobs[k] == 0.0f, "observation logprob %g", (double)t->logprobs[k]);
        run++;
        i = j;
    }
}

static rlp_batch *run_episodes(rlp_rollout_engine *e, rlp_env *env, const char *const *metas, size_t n, int overlap,
                               uint32_t max_turns, uint32_t max_tokens, uint32_t per_turn, double *seconds)
{
    rlp_prompt pr[8];
    memset(pr, 0, sizeof pr);
    for (size_t i = 0; i < n; i++) {
        pr[i].text = "Question: what is the capital of Zorbia? Search first.";
        pr[i].metadata_json = metas[i];
        pr[i].group_id = 100 + i;
    }
    rlp_sampling_options so = RLP_SAMPLING_OPTIONS_INIT;
    so.temperature = 1.0f;
    so.max_new_tokens = per_turn;
    so.seed = 42;
    rlp_multiturn_options mt = RLP_MULTITURN_OPTIONS_INIT;
    mt.env = env;
    mt.max_turns = max_turns;
    mt.max_tokens = max_tokens;
    mt.overlap = overlap;
    rlp_batch *b = NULL;
    double t0 = rlpi_now_s();
    int rc = rlp_rollout_generate_episodes(&b, e, pr, n, &so, &mt, NULL, NULL);
    *seconds = rlpi_now_s() - t0;
    CHECK(rc == RLP_OK, "generate_episodes: %s", rlp_error_last());
    return b;
}

static rlp_trajectory get(const rlp_batch *b, size_t i)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    CHECK(rlp_batch_get(&t, b, i) == RLP_OK, "get %zu", i);
    return t;
}

int main(void)
{
    char path[4096];
    model_path(path, sizeof path, "SmolLM2-135M-Instruct.Q4_1.gguf");
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("SKIP: %s not found (run scripts/fetch-model.sh)\n", path);
        return 77;
    }
    fclose(f);
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 2;
    rlp_context *ctx;
    rlp_policy *pol;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    if (rlp_context_create(&ctx, &co) || rlp_policy_load(&pol, ctx, path, &po)) {
        fprintf(stderr, "load: %s\n", rlp_error_last());
        return 1;
    }
    const rlp_tokenizer *tok = rlp_policy_tokenizer(pol);
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = 4;
    ro.max_seq_len = 320;
    rlp_rollout_engine *e;
    if (rlp_rollout_engine_create(&e, pol, &ro)) {
        fprintf(stderr, "engine: %s\n", rlp_error_last());
        return 1;
    }
    script_env se = {.engine = e, .policy = pol};
    rlp_env_callbacks cb = {RLP_ENV_CALLBACKS_VERSION, s_reset, s_step, s_close, NULL};
    rlp_env_options eo = RLP_ENV_OPTIONS_INIT;
    eo.timeout_ms = 300;
    eo.max_observation_bytes = 300;
    rlp_env *env;
    CHECK(rlp_env_create(&env, "script", &cb, &se, &eo) == RLP_OK, "env: %s", rlp_error_last());

    /* 1. normal episodes: logprobs, masks, ids; overlapped == batch-wide wait */
    const char *normal[3] = {"{\"mode\":\"normal\"}", "{\"mode\":\"normal\"}", NULL};
    double s1, s2;
    rlp_batch *a = run_episodes(e, env, normal, 3, 1, 8, 0, 12, &s1);
    rlp_batch *b = run_episodes(e, env, normal, 3, 0, 8, 0, 12, &s2);
    for (size_t i = 0; a && b && i < 3; i++) {
        rlp_trajectory t = get(a, i), u = get(b, i);
        CHECK(t.has_episode && t.episode.end == RLP_EPISODE_DONE, "episode %zu end %d", i, t.episode.end);
        CHECK(t.episode.turns == 3 && t.episode.tool_calls == 2, "turns %u tool_calls %u", t.episode.turns,
              t.episode.tool_calls);
        CHECK(t.valid, "valid: %s", t.error ? t.error : "");
        CHECK(t.loss_mask != NULL, "mask");
        size_t n_obs = 0;
        for (size_t k = 0; k < t.n_completion_tokens; k++)
            n_obs += !t.loss_mask[k];
        CHECK(n_obs == t.episode.observation_tokens && n_obs > 0, "observation tokens %zu vs %u", n_obs,
              t.episode.observation_tokens);
        check_observation_ids(tok, &t);
        double gap = max_logprob_gap(pol, &t);
        printf("episode %zu: %zu tokens (%zu observation), logprob gap %.2e, text: %.80s…\n", i,
               t.n_completion_tokens, n_obs, gap, t.completion_text);
        CHECK(gap < 1e-4, "logprob gap %g", gap);
        CHECK(t.token_rewards != NULL, "turn rewards");
        CHECK(strstr(t.completion_text, "capital of Zorbia is Quell") != NULL, "observation text in completion");
        CHECK(t.n_completion_tokens == u.n_completion_tokens &&
                  !memcmp(t.completion_tokens, u.completion_tokens, t.n_completion_tokens * 4),
              "overlapped and batch-wide runs differ for episode %zu", i);
    }
    rlp_batch_free(a);
    rlp_batch_free(b);

    /* 2. faults: hang (deadline 300 ms), failure, huge and invalid UTF-8 observations */
    const char *faults[4] = {"{\"mode\":\"hang\"}", "{\"mode\":\"fail\"}", "{\"mode\":\"huge\"}",
                             "{\"mode\":\"badutf8\"}"};
    /* the same batch with the hang replaced: what the faults may cost beside it */
    const char *calm[4] = {"{\"mode\":\"normal\"}", "{\"mode\":\"fail\"}", "{\"mode\":\"huge\"}",
                           "{\"mode\":\"badutf8\"}"};
    double s3, s_calm;
    rlp_batch_free(run_episodes(e, env, calm, 4, 1, 8, 0, 12, &s_calm));
    a = run_episodes(e, env, faults, 4, 1, 8, 0, 12, &s3);
    if (a) {
        rlp_trajectory h = get(a, 0), fl = get(a, 1), hu = get(a, 2), bu = get(a, 3);
        CHECK(!h.valid && h.episode.end == RLP_EPISODE_ERROR && h.episode.tool_timeouts == 1,
              "hang: valid %d end %d timeouts %u", h.valid, h.episode.end, h.episode.tool_timeouts);
        CHECK(h.error && strstr(h.error, "deadline"), "hang error: %s", h.error ? h.error : "(none)");
        CHECK(!fl.valid && fl.error && strstr(fl.error, "boom"), "fail error: %s", fl.error ? fl.error : "(none)");
        CHECK(hu.episode.observations_cut >= 1, "huge: cut %u", hu.episode.observations_cut);
        CHECK(bu.valid && bu.episode.end == RLP_EPISODE_DONE, "bad utf-8: valid %d end %d", bu.valid,
              bu.episode.end);
        printf("faults: %.2f s, the same without the hang %.2f s (hang error: %s)\n", s3, s_calm, h.error);
        /* the hang sleeps 20 s; the batch must not wait for it (the margin
         * absorbs a loaded machine or a sanitizer's slowness) */
        CHECK(s3 < 1.5 * s_calm + 5.0, "a hung step held the batch: %.2f s against %.2f s without it", s3, s_calm);
    }
    rlp_batch_free(a);

    /* 3. 100-turn episodes: the budget ends them; a turn limit ends them */
    const char *forever[2] = {"{\"mode\":\"forever\"}", "{\"mode\":\"forever\"}"};
    double s4;
    a = run_episodes(e, env, forever, 1, 1, 100, 64, 4, &s4);
    if (a) {
        rlp_trajectory t = get(a, 0);
        CHECK(t.episode.end == RLP_EPISODE_BUDGET && t.n_completion_tokens <= 64 && t.finish_reason == RLP_FINISH_LENGTH,
              "budget: end %d tokens %zu finish %d", t.episode.end, t.n_completion_tokens, t.finish_reason);
        printf("budget episode: %u turns, %zu tokens\n", t.episode.turns, t.n_completion_tokens);
    }
    rlp_batch_free(a);
    a = run_episodes(e, env, forever, 2, 1, 3, 0, 4, &s4);
    if (a) {
        rlp_trajectory t = get(a, 1);
        CHECK(t.episode.end == RLP_EPISODE_MAX_TURNS && t.episode.turns == 3, "max turns: end %d turns %u",
              t.episode.end, t.episode.turns);
    }
    rlp_batch_free(a);

    /* 4. a weight update between turns: later tokens carry the new version
     * (a copy of the weights takes longer than the 300 ms deadline) */
    rlp_env *env2;
    eo.timeout_ms = 30000;
    CHECK(rlp_env_create(&env2, "script-update", &cb, &se, &eo) == RLP_OK, "env: %s", rlp_error_last());
    const char *upd[1] = {"{\"mode\":\"update\"}"};
    a = run_episodes(e, env2, upd, 1, 1, 8, 0, 6, &s4);
    if (a) {
        rlp_trajectory t = get(a, 0);
        CHECK(se.updated, "the update ran");
        size_t first7 = t.n_completion_tokens;
        for (size_t k = 0; k < t.n_completion_tokens; k++)
            if (t.token_versions[k] == 7) {
                first7 = k;
                break;
            }
        CHECK(first7 > 0 && first7 < t.n_completion_tokens, "version 7 from token %zu of %zu", first7,
              t.n_completion_tokens);
        for (size_t k = 0; k < t.n_completion_tokens; k++)
            CHECK(t.token_versions[k] == (k < first7 ? 0u : 7u), "token %zu version %llu", k,
                  (unsigned long long)t.token_versions[k]);
        CHECK(t.policy_version == 0, "started at version 0");
    }
    rlp_batch_free(a);

    rlp_rollout_engine_free(e);
    rlp_env_free(env);
    rlp_env_free(env2);
    rlp_policy_free(pol);
    rlp_context_free(ctx);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
