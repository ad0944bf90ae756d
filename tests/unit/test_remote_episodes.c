/* Multi-turn episodes on the remote engine against `rlpost serve` on
 * SmolLM2-135M-Instruct (started on port 0), with an environment written
 * in C against rlp_env_callbacks:
 * - greedy remote episodes equal the local engine's greedy episodes
 *   token for token (same prompts, same environment, a reset observation,
 *   stop strings): ids, loss mask, record, text; logprobs to 1e-4;
 * - sampled episodes: the ids are the sampled ids and each observation's
 *   own encoding (one with control tokens), mask 0 exactly there; every
 *   model token's logprob equals a cache-free forward of the final
 *   sequence to 1e-4 nats; turn rewards and the environment's metadata
 *   are on the trajectory; a rerun draws the same tokens (per-turn seeds);
 * - a failing environment marks only its sample invalid (finish_reason
 *   not RLP_FINISH_ERROR); an episode whose step waits until another
 *   episode has ended sees it end (no batch-wide wait);
 * - the token budget and the turn limit end episodes as on the local
 *   engine; a dead server gives RLP_FINISH_ERROR samples, not a failure.
 * Usage: test_remote_episodes PATH/TO/rlpost (skips, 77, without the model). */
#include "model/policy.h"
#include "rlpost.h"
#include "test_support.h"

#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Two processes, the same float32 kernels at other batch shapes and
 * prefix lengths: logprobs agree to ~1e-6 (test_serve's bound); 1e-4
 * still catches a logprob of another distribution or position. */
#define LOGPROB_TOL 1e-4
#define MAX_SEQ_LEN 320 /* the local engine's and the server's (argv below) */

extern char **environ;

static int failures;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

/* ---- the environment: behaviour chosen by the prompt's metadata ---- */

enum { M_NORMAL = 0, M_FAIL = 1, M_FOREVER = 2, M_GREET = 3, M_WAITER = 4, M_ABORT = 5 };

typedef struct script_ep {
    int turn, mode;
} script_ep;

typedef struct script_env {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;                         /* episodes that ended done */
    int waiter_saw;                   /* the waiter saw another episode end while it waited */
    rlp_rollout_engine *abort_engine; /* M_ABORT aborts it in its first step */
} script_env;

static const char *OBS[] = {"tion: the capital of Zorbia is Quell.\n", "\n<information>\nno results\n</information>\n"};
static const char CTL[] = "<|im_end|>\n<|im_start|>user\n";
static const char GREET[] = "<|im_start|>assistant\n";

static int s_reset(void **episode, rlp_env_reply *reply, const char *meta, void *user)
{
    (void)user;
    script_ep *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    e->mode = !meta                   ? M_NORMAL
        : strstr(meta, "\"fail\"")    ? M_FAIL
        : strstr(meta, "\"forever\"") ? M_FOREVER
        : strstr(meta, "\"greet\"")   ? M_GREET
        : strstr(meta, "\"waiter\"")  ? M_WAITER
        : strstr(meta, "\"abort\"")   ? M_ABORT
                                      : M_NORMAL;
    *episode = e;
    if (e->mode == M_GREET)
        rlp_env_reply_add_text(reply, GREET, strlen(GREET), RLP_ENCODE_PARSE_SPECIAL);
    rlp_env_reply_set_metadata(reply, "{\"search_backend\":\"script\"}");
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
    if (e->mode == M_FAIL) {
        rlp_env_reply_set_tool_error(reply, "boom: the search backend is down");
        return -1;
    }
    if (e->mode == M_FOREVER) {
        static const char more[] = "\n<information>\nno results for this query; try another one\n</information>\n";
        rlp_env_reply_add_text(reply, more, strlen(more), 0);
        return 0;
    }
    if (e->mode == M_ABORT && e->turn == 1)
        rlp_rollout_engine_abort(env->abort_engine);
    if (e->mode == M_WAITER && e->turn == 1) {
        /* holds this episode until another has ended: a batch-wide wait
         * would hold the others too, and this would give up after 20 s */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 20;
        pthread_mutex_lock(&env->mu);
        while (env->done == 0 && pthread_cond_timedwait(&env->cv, &env->mu, &ts) == 0) {
        }
        env->waiter_saw = env->done > 0;
        pthread_mutex_unlock(&env->mu);
    }
    if (e->turn >= 3) {
        rlp_env_reply_set_done(reply, 1);
        rlp_env_reply_set_reward(reply, 1.0f);
        pthread_mutex_lock(&env->mu);
        env->done++;
        pthread_cond_broadcast(&env->cv);
        pthread_mutex_unlock(&env->mu);
        return 0;
    }
    /* an observation that starts mid-word, then one with control tokens */
    const char *o = OBS[(e->turn - 1) % 2];
    rlp_env_reply_add_text(reply, o, strlen(o), 0);
    if (e->turn == 2)
        rlp_env_reply_add_text(reply, CTL, strlen(CTL), RLP_ENCODE_PARSE_SPECIAL);
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

/* The observation runs of t (mask 0) must be exactly the encodings of the
 * script's observation pieces, each piece alone, in order. */
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
            rlp_tokenizer_encode(tok, CTL, strlen(CTL), RLP_ENCODE_PARSE_SPECIAL, want + nw, 256 - nw, &n2);
        CHECK(j - i == nw + n2, "observation %zu has %zu ids, its encoding %zu", run, j - i, nw + n2);
        for (size_t k = 0; k < nw + n2 && k < j - i; k++)
            CHECK(t->completion_tokens[i + k] == want[k], "observation %zu id %zu: %d != %d", run, k,
                  t->completion_tokens[i + k], want[k]);
        for (size_t k = i; k < j; k++)
            CHECK(t->logprobs[k] == 0.0f, "observation logprob %g", (double)t->logprobs[k]);
        run++;
        i = j;
    }
    CHECK(run == 2, "%zu observations, want 2", run);
}

static rlp_trajectory get(const rlp_batch *b, size_t i)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    CHECK(rlp_batch_get(&t, b, i) == RLP_OK, "get %zu", i);
    return t;
}

/* Final stream events of the last call (the remote engine sends one per episode). */
static int n_events, n_event_errors;

static int on_event(const rlp_stream_event *ev, void *payload)
{
    (void)payload;
    if (ev->finish_reason != RLP_FINISH_NONE) {
        n_events++;
        n_event_errors += ev->finish_reason == RLP_FINISH_ERROR && ev->token == -1;
    }
    return 0;
}

static size_t size_of(const rlp_batch *b)
{
    size_t n = 0;
    if (b)
        rlp_batch_size(&n, b);
    return n;
}

static const char *const QUESTIONS[] = {"Question: what is the capital of Zorbia? Search first.",
                                        "Question: who wrote the Zorbian anthem? Think, then search."};

/* Episodes for prompts (QUESTIONS[i % 2], metas[i]), n samples each. */
static rlp_batch *run_episodes(rlp_rollout_engine *e, rlp_env *env, const char *const *metas, size_t n_prompts,
                               uint32_t n, float temperature, uint32_t per_turn, uint32_t max_turns,
                               uint32_t max_tokens, const char *stop)
{
    rlp_prompt pr[8];
    memset(pr, 0, sizeof pr);
    for (size_t i = 0; i < n_prompts; i++) {
        pr[i].text = QUESTIONS[i % 2];
        pr[i].metadata_json = metas[i];
        pr[i].group_id = 100 + i;
    }
    const char *stops[1] = {stop};
    rlp_sampling_options so = RLP_SAMPLING_OPTIONS_INIT;
    so.n = n;
    so.temperature = temperature;
    so.max_new_tokens = per_turn;
    so.seed = 42;
    so.stop = stop ? stops : NULL;
    so.n_stop = stop ? 1 : 0;
    rlp_multiturn_options mt = RLP_MULTITURN_OPTIONS_INIT;
    mt.env = env;
    mt.max_turns = max_turns;
    mt.max_tokens = max_tokens;
    rlp_batch *b = NULL;
    n_events = n_event_errors = 0;
    int rc = rlp_rollout_generate_episodes(&b, e, pr, n_prompts, &so, &mt, on_event, NULL);
    CHECK(rc == RLP_OK, "generate_episodes: %s", rlp_error_last());
    return b;
}

/* ---- the server ---- */

static pid_t server_pid = -1;
static char base_url[128];

static int start_server(const char *bin, const char *model)
{
    int out[2];
    if (pipe(out) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    char *argv[] = {(char *)bin,
                    "serve",
                    (char *)model,
                    "--port",
                    "0",
                    "--max-batch",
                    "8",
                    "--max-seq-len",
                    "320" /* MAX_SEQ_LEN */,
                    "--threads",
                    "1",
                    "--batch-wait-ms",
                    "2",
                    NULL};
    int rc = posix_spawn(&server_pid, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", bin, strerror(rc));
        close(out[0]);
        return -1;
    }
    char line[1024];
    size_t n = 0;
    while (n < sizeof line - 1 && !memchr(line, '\n', n)) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 120000) <= 0)
            break;
        ssize_t k = read(out[0], line + n, sizeof line - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    line[n] = '\0';
    close(out[0]);
    json_t *j = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
    const char *url = json_string_value(json_object_get(j, "listening"));
    if (!url || strncmp(url, "http://127.0.0.1:", 17) != 0) {
        fprintf(stderr, "no listening line from the server: %s\n", line);
        json_decref(j);
        return -1;
    }
    snprintf(base_url, sizeof base_url, "%s", url);
    json_decref(j);
    printf("# server %d at %s\n", (int)server_pid, base_url);
    return 0;
}

static rlp_rollout_engine *remote_engine(const rlp_tokenizer *tok, const char *url, uint32_t retries)
{
    static const char *urls[1];
    urls[0] = url;
    rlp_remote_options rem = RLP_REMOTE_OPTIONS_INIT;
    rem.urls = urls;
    rem.n_urls = 1;
    rem.timeout_ms = 120000;
    rem.max_retries = retries;
    rlp_rollout_engine *e = NULL;
    CHECK(rlp_rollout_engine_create_remote(&e, tok, &rem) == RLP_OK, "remote engine: %s", rlp_error_last());
    return e;
}

int main(int argc, char **argv)
{
    char path[4096];
    model_path(path, sizeof path, "SmolLM2-135M-Instruct.Q4_1.gguf");
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("SKIP: %s not found (run scripts/fetch-model.sh)\n", path);
        return 77;
    }
    fclose(f);
    if (argc < 2) {
        fprintf(stderr, "usage: test_remote_episodes PATH/TO/rlpost\n");
        return 1;
    }
    if (start_server(argv[1], path) != 0)
        return 1;
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 1;
    rlp_context *ctx;
    rlp_policy *pol;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    if (rlp_context_create(&ctx, &co) || rlp_policy_load(&pol, ctx, path, &po)) {
        fprintf(stderr, "load: %s\n", rlp_error_last());
        kill(server_pid, SIGKILL);
        return 1;
    }
    const rlp_tokenizer *tok = rlp_policy_tokenizer(pol);
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = 4;
    ro.max_seq_len = MAX_SEQ_LEN;
    ro.share_weights = 1;
    rlp_rollout_engine *local = NULL;
    CHECK(rlp_rollout_engine_create(&local, pol, &ro) == RLP_OK, "local engine: %s", rlp_error_last());
    rlp_rollout_engine *remote = remote_engine(tok, base_url, 1);

    script_env se = {.done = 0};
    pthread_mutex_init(&se.mu, NULL);
    pthread_cond_init(&se.cv, NULL);
    rlp_env_callbacks cb = {RLP_ENV_CALLBACKS_VERSION, s_reset, s_step, s_close, NULL};
    rlp_env_options eo = RLP_ENV_OPTIONS_INIT;
    eo.timeout_ms = 60000;
    rlp_env *env = NULL;
    CHECK(rlp_env_create(&env, "script", &cb, &se, &eo) == RLP_OK, "env: %s", rlp_error_last());
    if (!local || !remote || !env)
        goto out;

    /* 1. greedy: the remote engine's episodes are the local engine's */
    {
        const char *metas[2] = {"{\"mode\":\"greet\"}", "{\"mode\":\"normal\"}"};
        rlp_batch *r = run_episodes(remote, env, metas, 2, 2, 0.0f, 10, 8, 0, ".");
        rlp_batch *l = run_episodes(local, env, metas, 2, 2, 0.0f, 10, 8, 0, ".");
        size_t n = r && l ? size_of(r) : 0;
        CHECK(!r || !l || (n == 4 && size_of(l) == 4), "batch sizes");
        for (size_t i = 0; i < n; i++) {
            rlp_trajectory a = get(r, i), b = get(l, i);
            CHECK(a.valid && a.has_episode && a.episode.end == RLP_EPISODE_DONE && a.episode.turns == 3,
                  "greedy %zu: valid %d end %d turns %u (%s)", i, a.valid, a.episode.end, a.episode.turns,
                  a.error ? a.error : "");
            CHECK(a.group_id == b.group_id && a.sample_index == b.sample_index, "greedy %zu: order", i);
            bool same = a.n_completion_tokens == b.n_completion_tokens &&
                !memcmp(a.completion_tokens, b.completion_tokens, a.n_completion_tokens * 4) &&
                !memcmp(a.loss_mask, b.loss_mask, a.n_completion_tokens);
            CHECK(same, "greedy %zu: remote (%zu tokens) and local (%zu tokens) episodes differ", i,
                  a.n_completion_tokens, b.n_completion_tokens);
            CHECK(!strcmp(a.completion_text, b.completion_text), "greedy %zu text:\n remote: %s\n local:  %s", i,
                  a.completion_text, b.completion_text);
            CHECK(a.finish_reason == b.finish_reason && a.stop_index == b.stop_index &&
                      a.episode.observation_tokens == b.episode.observation_tokens &&
                      a.episode.tool_calls == b.episode.tool_calls,
                  "greedy %zu record: finish %d/%d stop %d/%d obs %u/%u", i, a.finish_reason, b.finish_reason,
                  a.stop_index, b.stop_index, a.episode.observation_tokens, b.episode.observation_tokens);
            double gap = 0;
            for (size_t k = 0; same && k < a.n_completion_tokens; k++) {
                double d = fabs((double)a.logprobs[k] - (double)b.logprobs[k]);
                gap = d > gap ? d : gap;
            }
            CHECK(gap < LOGPROB_TOL, "greedy %zu: logprobs differ by %g", i, gap);
            CHECK(a.metadata_json && strstr(a.metadata_json, "\"env\":{\"search_backend\":\"script\"}"),
                  "greedy %zu metadata: %s", i, a.metadata_json ? a.metadata_json : "(none)");
            printf("greedy %zu: %zu tokens, logprob gap to local %.1e: %.60s...\n", i, a.n_completion_tokens, gap,
                   a.completion_text);
        }
        rlp_batch_free(r);
        rlp_batch_free(l);
    }

    /* 2. sampled: ids, masks, logprobs, rewards, determinism; a failing
     * environment and a step that waits for another episode to end */
    {
        const char *metas[3] = {"{\"mode\":\"normal\"}", "{\"mode\":\"fail\"}", "{\"mode\":\"waiter\"}"};
        rlp_batch *a = run_episodes(remote, env, metas, 3, 2, 1.0f, 10, 8, 0, NULL);
        size_t n = size_of(a);
        CHECK(n == 6, "%zu trajectories", n);
        for (size_t i = 0; i < n; i++) {
            rlp_trajectory t = get(a, i);
            size_t p = i / 2;
            CHECK(t.group_id == get(a, 2 * p).group_id && t.sample_index == i % 2, "order at %zu", i);
            if (p == 1) {
                CHECK(!t.valid && t.episode.end == RLP_EPISODE_ERROR && t.error && strstr(t.error, "boom"),
                      "failing env %zu: valid %d end %d error %s", i, t.valid, t.episode.end,
                      t.error ? t.error : "(none)");
                CHECK(t.finish_reason != RLP_FINISH_ERROR && t.episode.turns == 1 && t.episode.tool_errors == 1,
                      "failing env %zu: finish %d turns %u errors %u", i, t.finish_reason, t.episode.turns,
                      t.episode.tool_errors);
                continue;
            }
            CHECK(t.valid && t.episode.end == RLP_EPISODE_DONE && t.episode.turns == 3 && t.episode.tool_calls == 2,
                  "episode %zu: valid %d end %d turns %u calls %u (%s)", i, t.valid, t.episode.end, t.episode.turns,
                  t.episode.tool_calls, t.error ? t.error : "");
            size_t n_obs = 0;
            for (size_t k = 0; k < t.n_completion_tokens; k++)
                n_obs += !t.loss_mask[k];
            CHECK(n_obs == t.episode.observation_tokens && n_obs > 0, "observation tokens %zu vs %u", n_obs,
                  t.episode.observation_tokens);
            check_observation_ids(tok, &t);
            double gap = max_logprob_gap(pol, &t);
            CHECK(gap < LOGPROB_TOL, "episode %zu: logprob gap to a cache-free forward %g", i, gap);
            /* turn rewards on each turn's last token: 0.25, 0.25, 1 */
            float sum = 0;
            size_t at = 0;
            for (size_t k = 0; t.token_rewards && k < t.n_completion_tokens; k++)
                if (t.token_rewards[k] != 0.0f) {
                    sum += t.token_rewards[k];
                    at++;
                    CHECK(t.loss_mask[k] && (k + 1 == t.n_completion_tokens || !t.loss_mask[k + 1]),
                          "reward at %zu is not a turn's last token", k);
                }
            CHECK(at == 3 && fabsf(sum - 1.5f) < 1e-6f, "turn rewards: %zu of sum %g", at, (double)sum);
            CHECK(strstr(t.completion_text, "capital of Zorbia is Quell") != NULL, "observation text in completion");
            printf("sampled %zu: %zu tokens (%zu observation), logprob gap %.1e\n", i, t.n_completion_tokens, n_obs,
                   gap);
        }
        CHECK(se.waiter_saw, "the waiting step never saw another episode end: a batch-wide wait?");
        /* the same seeds draw the same episodes (prompt 0 only: the waiter's timing is its own) */
        rlp_batch *b = run_episodes(remote, env, metas, 1, 2, 1.0f, 10, 8, 0, NULL);
        for (size_t i = 0; a && b && i < 2; i++) {
            rlp_trajectory t = get(a, i), u = get(b, i);
            CHECK(t.n_completion_tokens == u.n_completion_tokens &&
                      !memcmp(t.completion_tokens, u.completion_tokens, t.n_completion_tokens * 4),
                  "rerun of sample %zu drew other tokens", i);
        }
        rlp_trajectory s0 = get(a, 0), s1 = get(a, 1);
        CHECK(s0.n_completion_tokens != s1.n_completion_tokens ||
                  memcmp(s0.completion_tokens, s1.completion_tokens, s0.n_completion_tokens * 4),
              "two samples of a group drew the same episode");
        rlp_batch_free(a);
        rlp_batch_free(b);
    }

    /* 3. the budget and the turn limit end episodes as on the local engine */
    {
        const char *metas[1] = {"{\"mode\":\"forever\"}"};
        rlp_batch *r = run_episodes(remote, env, metas, 1, 1, 0.0f, 6, 100, 40, NULL);
        rlp_batch *l = run_episodes(local, env, metas, 1, 1, 0.0f, 6, 100, 40, NULL);
        if (r && l) {
            rlp_trajectory a = get(r, 0), b = get(l, 0);
            CHECK(a.episode.end == RLP_EPISODE_BUDGET && a.finish_reason == RLP_FINISH_LENGTH &&
                      a.n_completion_tokens <= 40,
                  "budget: end %d finish %d tokens %zu", a.episode.end, a.finish_reason, a.n_completion_tokens);
            CHECK(a.n_completion_tokens == b.n_completion_tokens && a.episode.turns == b.episode.turns &&
                      a.episode.observations_cut == b.episode.observations_cut,
                  "budget: remote %zu tokens %u turns, local %zu tokens %u turns", a.n_completion_tokens,
                  a.episode.turns, b.n_completion_tokens, b.episode.turns);
        }
        rlp_batch_free(r);
        rlp_batch_free(l);
        /* no budget: the servers' context (max_model_len, as the local engine's KV capacity) ends it */
        r = run_episodes(remote, env, metas, 1, 1, 0.0f, 40, 100, 0, NULL);
        l = run_episodes(local, env, metas, 1, 1, 0.0f, 40, 100, 0, NULL);
        if (r && l) {
            rlp_trajectory a = get(r, 0), b = get(l, 0);
            CHECK(a.valid && a.episode.end == RLP_EPISODE_BUDGET && a.finish_reason == RLP_FINISH_LENGTH &&
                      a.n_prompt_tokens + a.n_completion_tokens <= MAX_SEQ_LEN,
                  "context: valid %d end %d finish %d tokens %zu (%s)", a.valid, a.episode.end, a.finish_reason,
                  a.n_completion_tokens, a.error ? a.error : "");
            CHECK(a.n_completion_tokens == b.n_completion_tokens && a.episode.turns == b.episode.turns &&
                      !memcmp(a.completion_tokens, b.completion_tokens, a.n_completion_tokens * 4),
                  "context: remote %zu tokens %u turns, local %zu tokens %u turns", a.n_completion_tokens,
                  a.episode.turns, b.n_completion_tokens, b.episode.turns);
            printf("context-bound episode: %u turns, %zu tokens\n", a.episode.turns, a.n_completion_tokens);
        }
        rlp_batch_free(r);
        rlp_batch_free(l);
        r = run_episodes(remote, env, metas, 1, 1, 0.0f, 4, 2, 0, NULL);
        if (r) {
            rlp_trajectory a = get(r, 0);
            CHECK(a.episode.end == RLP_EPISODE_MAX_TURNS && a.episode.turns == 2 && a.finish_reason == RLP_FINISH_STOP,
                  "max turns: end %d turns %u finish %d", a.episode.end, a.episode.turns, a.finish_reason);
        }
        rlp_batch_free(r);
    }

    /* 4. an abort (from the environment's step): episodes end with RLP_EPISODE_ABORT */
    {
        se.abort_engine = remote;
        const char *metas[1] = {"{\"mode\":\"abort\"}"};
        rlp_batch *r = run_episodes(remote, env, metas, 1, 1, 0.0f, 4, 8, 0, NULL);
        if (r) {
            rlp_trajectory a = get(r, 0);
            CHECK(a.valid && a.episode.end == RLP_EPISODE_ABORT && a.finish_reason == RLP_FINISH_ABORT &&
                      a.episode.turns == 1,
                  "abort: valid %d end %d finish %d turns %u", a.valid, a.episode.end, a.finish_reason,
                  a.episode.turns);
        }
        CHECK(n_events == 1, "abort: %d final events", n_events);
        rlp_batch_free(r);
    }

    /* 5. a dead server: every sample RLP_FINISH_ERROR and invalid, the call itself fine */
    {
        rlp_rollout_engine *dead = remote_engine(tok, "http://127.0.0.1:1", 0);
        const char *metas[1] = {"{\"mode\":\"normal\"}"};
        rlp_batch *r = dead ? run_episodes(dead, env, metas, 1, 2, 1.0f, 4, 8, 0, NULL) : NULL;
        for (size_t i = 0; r && i < size_of(r); i++) {
            rlp_trajectory a = get(r, i);
            CHECK(!a.valid && a.finish_reason == RLP_FINISH_ERROR && a.episode.end == RLP_EPISODE_ERROR && a.error,
                  "dead server %zu: valid %d finish %d end %d", i, a.valid, a.finish_reason, a.episode.end);
        }
        rlp_rollout_stats st = {.version = 1};
        rlp_rollout_engine_stats(&st, dead);
        CHECK(st.remote_errors == 2, "remote errors %llu", (unsigned long long)st.remote_errors);
        CHECK(n_events == 2 && n_event_errors == 2, "dead server: %d final events, %d errors", n_events,
              n_event_errors);
        rlp_batch_free(r);
        rlp_rollout_engine_free(dead);
    }

out:
    rlp_rollout_engine_free(remote);
    rlp_rollout_engine_free(local);
    rlp_env_free(env);
    rlp_policy_free(pol);
    rlp_context_free(ctx);
    kill(server_pid, SIGKILL);
    waitpid(server_pid, NULL, 0);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
