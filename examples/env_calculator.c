/* env_calculator.c — write a tool environment in C and run an episode.
 *
 * The environment answers "<calculator>A op B</calculator>" with
 * "<result>…</result>" (a tool call) and ends the episode on
 * "<answer>X</answer>" with reward 1 when X is the prompt's "answer"
 * (its metadata), 0 otherwise. main() plays one scripted episode through
 * the synchronous API (rlp_env_episode_*), the way an evaluation harness
 * or a test would; rlp_rollout_generate_episodes() drives the same
 * environment with a model. Uses only rlpost.h (docs/environments.md).
 *
 *   build: part of the examples (meson); run: ./env_calculator
 */
#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One episode's state: made by reset, freed by close. */
typedef struct episode {
    long answer;
    int turns;
} episode;

/* reset: the prompt's metadata is JSON text (or NULL); a real environment
 * parses it with a JSON library, this example only looks for "answer". */
static int calc_reset(void **out, rlp_env_reply *reply, const char *metadata_json, void *user)
{
    (void)user;
    episode *ep = calloc(1, sizeof *ep);
    if (!ep) {
        rlp_env_reply_set_tool_error(reply, "out of memory");
        return 1;
    }
    const char *a = metadata_json ? strstr(metadata_json, "\"answer\"") : NULL;
    if (a && (a = strchr(a, ':')))
        ep->answer = strtol(a + 1, NULL, 10);
    *out = ep;
    /* an observation here would be appended to the prompt */
    return RLP_OK;
}

/* step: runs on the environment's worker threads (calls of one episode
 * never overlap, so the state needs no lock). Returning non-zero would
 * mark the sample invalid, with the tool error as the reason. */
static int calc_step(rlp_env_reply *reply, void *state, const char *action, size_t len, const int32_t *ids,
                     size_t n_ids, void *user)
{
    (void)ids, (void)n_ids, (void)user, (void)len;
    episode *ep = state;
    ep->turns++;
    const char *tag;
    if ((tag = strstr(action, "<answer>"))) {
        long got = strtol(tag + 8, NULL, 10);
        rlp_env_reply_set_tool_call(reply, 0);
        rlp_env_reply_set_reward(reply, got == ep->answer ? 1.0f : 0.0f);
        return rlp_env_reply_set_done(reply, 1);
    }
    double x, y, r = 0;
    char op;
    if (!(tag = strstr(action, "<calculator>")) || sscanf(tag + 12, " %lf %c %lf", &x, &op, &y) != 3) {
        /* not a failure: the model made a mistake, the episode goes on */
        rlp_env_reply_set_tool_error(reply, "no calculator call");
        const char *hint = "\nWrite <calculator>A op B</calculator> or <answer>X</answer>.\n";
        return rlp_env_reply_add_text(reply, hint, strlen(hint), 0);
    }
    int ok = 1;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/':
        ok = y != 0;
        r = ok ? x / y : 0;
        break;
    default: ok = 0;
    }
    char obs[96];
    int n = ok ? snprintf(obs, sizeof obs, "\n<result>%g</result>\n", r)
               : snprintf(obs, sizeof obs, "\n<result>error</result>\n");
    if (!ok)
        rlp_env_reply_set_tool_error(reply, "bad operator or division by zero");
    rlp_env_reply_set_tool_call(reply, 1);
    return rlp_env_reply_add_text(reply, obs, (size_t)n, 0); /* plain text: never parsed as special tokens */
}

static void calc_close(void *state, void *user)
{
    (void)user;
    free(state);
}

int main(void)
{
    rlp_env_callbacks cb = {RLP_ENV_CALLBACKS_VERSION, calc_reset, calc_step, calc_close, NULL};
    rlp_env_options opts = RLP_ENV_OPTIONS_INIT;
    opts.timeout_ms = 1000; /* a call that runs longer fails its sample, not the run */
    rlp_env *env = NULL;
    if (rlp_env_create(&env, "calculator", &cb, NULL, &opts) != RLP_OK) {
        fprintf(stderr, "env_calculator: %s\n", rlp_error_last());
        return 1;
    }
    const char *turns[] = {"Let me add. <calculator>17 + 25</calculator>", "Hmm. <calculator>6 / 0</calculator>",
                           "I think so. <answer>42</answer>"};
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    int rc = rlp_env_episode_start(&ep, env, "{\"answer\": 42}", &o);
    for (size_t i = 0; rc == RLP_OK && o.status == RLP_OK && !o.done && i < 3; i++) {
        rc = rlp_env_episode_step(&o, ep, turns[i], strlen(turns[i]), NULL, 0);
        if (rc == RLP_OK)
            printf("turn %zu: status %d, observation \"%.*s\", tool_error %s, done %d, reward %g\n", i + 1, o.status,
                   (int)o.observation_len, o.observation ? o.observation : "", o.tool_error ? o.tool_error : "-",
                   o.done, o.has_reward ? o.reward : 0.0);
    }
    int good = rc == RLP_OK && o.status == RLP_OK && o.done && o.has_reward && o.reward == 1.0f;
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    if (!good)
        fprintf(stderr, "env_calculator: the episode did not end with reward 1 (%s)\n", rlp_error_last());
    return good ? 0 : 1;
}
