/* rlp_env without a model (also in the TSan suite): the synchronous
 * episode API over C callbacks — replies, failures, deadlines and
 * abandoned calls, the cap on abandoned calls, close run exactly once per
 * episode (also after an abandoned call ends), serialised environments,
 * many episodes at once on the worker threads, rlp_env_free returning
 * while a hung call still runs, and the reply setters' checks. */
#include "rlpost.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct counters {
    atomic_int resets, steps, closes, freed, in_call, max_in_call;
    int hang_ms;
} counters;

static void enter(counters *c)
{
    int n = atomic_fetch_add(&c->in_call, 1) + 1;
    int m = atomic_load(&c->max_in_call);
    while (n > m && !atomic_compare_exchange_weak(&c->max_in_call, &m, n)) {
    }
}

static int t_reset(void **ep, rlp_env_reply *r, const char *meta, void *user)
{
    counters *c = user;
    atomic_fetch_add(&c->resets, 1);
    int *turn = calloc(1, sizeof *turn);
    *ep = turn;
    if (meta && strstr(meta, "reset-fails"))
        return rlp_env_reply_set_tool_error(r, "no such puzzle"), -1;
    return rlp_env_reply_add_text(r, "welcome", 7, 0);
}

static int t_step(rlp_env_reply *r, void *ep, const char *a, size_t al, const int32_t *ids, size_t n, void *user)
{
    (void)ids, (void)n;
    counters *c = user;
    enter(c);
    atomic_fetch_add(&c->steps, 1);
    int *turn = ep;
    ++*turn;
    int rc = 0;
    if (al >= 4 && !memcmp(a, "hang", 4))
        usleep((useconds_t)c->hang_ms * 1000u);
    else if (al >= 4 && !memcmp(a, "fail", 4))
        rc = (rlp_env_reply_set_tool_error(r, "tool crashed"), 7);
    else if (al >= 4 && !memcmp(a, "slow", 4))
        usleep(20000);
    else if (al >= 3 && !memcmp(a, "bad", 3))
        rc = rlp_env_reply_set_tool_error(r, "unknown tool"); /* survives: a tool error, not a failure */
    if (!rc && *turn >= 3)
        rc = rlp_env_reply_set_done(r, 1) | rlp_env_reply_set_reward(r, 1.0f);
    else if (!rc)
        rc = rlp_env_reply_add_text(r, " observation", 12, 0);
    atomic_fetch_sub(&c->in_call, 1);
    return rc;
}

static void t_close(void *ep, void *user)
{
    counters *c = user;
    atomic_fetch_add(&c->closes, 1);
    free(ep);
}

static void t_free(void *user)
{
    counters *c = user;
    atomic_fetch_add(&c->freed, 1);
}

static rlp_env *make(counters *c, uint32_t timeout_ms, uint32_t threads, uint32_t max_abandoned, int serialize)
{
    rlp_env_callbacks cb = {RLP_ENV_CALLBACKS_VERSION, t_reset, t_step, t_close, t_free};
    rlp_env_options o;
    rlp_env_options_init(&o, RLP_ENV_OPTIONS_VERSION);
    o.timeout_ms = timeout_ms;
    o.max_threads = threads;
    o.max_abandoned = max_abandoned;
    o.serialize = serialize;
    rlp_env *env = NULL;
    CHECK(rlp_env_create(&env, "test", &cb, c, &o) == RLP_OK, "create: %s", rlp_error_last());
    return env;
}

static rlp_env_outcome step(rlp_env_episode *ep, const char *action)
{
    rlp_env_outcome o = {.version = RLP_ENV_OUTCOME_VERSION};
    int32_t ids[2] = {5, 6};
    CHECK(rlp_env_episode_step(&o, ep, action, strlen(action), ids, 2) == RLP_OK, "step: %s", rlp_error_last());
    return o;
}

static void test_basic(void)
{
    counters c = {0};
    rlp_env *env = make(&c, 1000, 4, 4, 0);
    rlp_env_outcome first = {.version = RLP_ENV_OUTCOME_VERSION};
    rlp_env_episode *ep;
    CHECK(rlp_env_episode_start(&ep, env, "{\"reference\": 1}", &first) == RLP_OK, "start");
    CHECK(first.status == RLP_OK && first.observation_len == 7 && !strcmp(first.observation, "welcome"),
          "reset observation '%s'", first.observation);
    rlp_env_outcome o = step(ep, "search");
    CHECK(o.status == RLP_OK && !o.done && o.tool_call && !strcmp(o.observation, " observation"), "step 1");
    o = step(ep, "bad tool");
    CHECK(o.status == RLP_OK && o.tool_error && !strcmp(o.tool_error, "unknown tool"), "a tool error is not a failure");
    o = step(ep, "answer");
    CHECK(o.status == RLP_OK && o.done && !o.tool_call && o.has_reward && o.reward == 1.0f, "step 3 done");
    CHECK(rlp_env_episode_step(&o, ep, "more", 4, NULL, 0) == RLP_E_STATE, "a step after done is refused");
    rlp_env_episode_free(ep);
    /* a failing step: status RLP_E_CALLBACK with the environment's message */
    CHECK(rlp_env_episode_start(&ep, env, NULL, NULL) == RLP_OK, "start 2");
    o = step(ep, "fail");
    CHECK(o.status == RLP_E_CALLBACK && o.error && strstr(o.error, "tool crashed"), "failure: %d %s", o.status,
          o.error ? o.error : "");
    rlp_env_episode_free(ep);
    /* a failing reset */
    CHECK(rlp_env_episode_start(&ep, env, "{\"x\": \"reset-fails\"}", &first) == RLP_OK, "start 3");
    CHECK(first.status == RLP_E_CALLBACK && strstr(first.error, "no such puzzle"), "reset failure");
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    CHECK(c.resets == 3 && c.closes == 3 && c.freed == 1, "resets %d closes %d freed %d", c.resets, c.closes,
          c.freed);
}

static void test_deadline(void)
{
    counters c = {.hang_ms = 1500};
    rlp_env *env = make(&c, 100, 2, 2, 0);
    rlp_env_episode *ep[3];
    for (int i = 0; i < 3; i++)
        CHECK(rlp_env_episode_start(&ep[i], env, NULL, NULL) == RLP_OK, "start");
    double t0 = now_s();
    rlp_env_outcome o = step(ep[0], "hang");
    double dt = now_s() - t0;
    CHECK(o.status == RLP_E_TIMEOUT && dt < 0.9, "hang: status %d after %.2f s", o.status, dt);
    /* the written-off worker is replaced: the next call answers */
    o = step(ep[1], "search");
    CHECK(o.status == RLP_OK, "after a hang: %d", o.status);
    o = step(ep[2], "hang");
    CHECK(o.status == RLP_E_TIMEOUT, "second hang");
    /* two calls abandoned = the cap: a new call fails at once */
    rlp_env_episode *ep4;
    t0 = now_s();
    CHECK(rlp_env_episode_start(&ep4, env, NULL, &o) == RLP_OK, "start 4");
    CHECK(o.status == RLP_E_TIMEOUT && now_s() - t0 < 0.05 && strstr(o.error, "abandoned"),
          "over the cap: %d %s", o.status, o.error ? o.error : "");
    rlp_env_episode_free(ep4);
    for (int i = 0; i < 3; i++)
        rlp_env_episode_free(ep[i]);
    t0 = now_s();
    rlp_env_free(env); /* must not wait for the hung calls */
    CHECK(now_s() - t0 < 0.5, "rlp_env_free waited %.2f s for hung calls", now_s() - t0);
    /* the abandoned calls end, close their episodes, and the last one frees */
    for (int i = 0; i < 40 && atomic_load(&c.freed) == 0; i++)
        usleep(100000);
    CHECK(c.freed == 1 && c.closes == c.resets, "after the hangs: freed %d, closes %d of %d", c.freed, c.closes,
          c.resets);
}

typedef struct par_arg {
    rlp_env *env;
    int ok;
} par_arg;

static void *par_episode(void *p)
{
    par_arg *a = p;
    rlp_env_episode *ep;
    if (rlp_env_episode_start(&ep, a->env, NULL, NULL))
        return NULL;
    for (int t = 0; t < 3; t++) {
        rlp_env_outcome o = step(ep, "slow");
        a->ok += o.status == RLP_OK;
    }
    rlp_env_episode_free(ep);
    return NULL;
}

/* 16 episodes on 16 host threads: calls overlap on 8 workers, or run one
 * at a time when the environment is serialised */
static void test_parallel(int serialize)
{
    counters c = {0};
    rlp_env *env = make(&c, 5000, 8, 4, serialize);
    pthread_t th[16];
    par_arg a[16];
    double t0 = now_s();
    for (int i = 0; i < 16; i++) {
        a[i] = (par_arg){env, 0};
        pthread_create(&th[i], NULL, par_episode, &a[i]);
    }
    int ok = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(th[i], NULL);
        ok += a[i].ok;
    }
    double dt = now_s() - t0;
    rlp_env_free(env);
    CHECK(ok == 48, "%d of 48 steps answered", ok);
    if (serialize)
        CHECK(c.max_in_call == 1, "serialised, yet %d calls at once", c.max_in_call);
    else
        CHECK(c.max_in_call > 1 && dt < 0.9, "%d calls at once, %.2f s (48 × 20 ms on 8 workers)", c.max_in_call, dt);
    CHECK(c.closes == 16 && c.freed == 1, "closes %d freed %d", c.closes, c.freed);
    printf("parallel%s: %d calls at once at most, %.2f s\n", serialize ? " (serialised)" : "", c.max_in_call, dt);
}

static void test_checks(void)
{
    rlp_env_callbacks cb = {RLP_ENV_CALLBACKS_VERSION, t_reset, NULL, NULL, NULL};
    rlp_env *env = NULL;
    CHECK(rlp_env_create(&env, "x", &cb, NULL, NULL) == RLP_E_INVALID_ARG && !env, "no step refused");
    cb.step = t_step;
    cb.version = 99;
    CHECK(rlp_env_create(&env, "x", &cb, NULL, NULL) == RLP_E_INVALID_ARG, "unknown version refused");
    rlp_env_options o;
    CHECK(rlp_env_options_init(&o, 0) == RLP_E_INVALID_ARG, "options version 0");
    rlp_multiturn_options mt;
    CHECK(rlp_multiturn_options_init(&mt, RLP_MULTITURN_OPTIONS_VERSION) == RLP_OK && mt.max_turns == 8 &&
              mt.overlap == 1 && !mt.env,
          "multiturn defaults");
    CHECK(rlp_env_reply_add_text(NULL, "a", 1, 0) == RLP_E_INVALID_ARG, "NULL reply");
    CHECK(rlp_env_reply_set_reward(NULL, 1.0f) == RLP_E_INVALID_ARG, "NULL reply reward");
    CHECK(rlp_env_episode_start(NULL, NULL, NULL, NULL) == RLP_E_INVALID_ARG, "NULL start");
    CHECK(rlp_env_name(NULL) == NULL, "name of NULL");
    rlp_env_free(NULL);
    rlp_env_episode_free(NULL);
}

int main(void)
{
    test_checks();
    test_basic();
    test_deadline();
    test_parallel(0);
    test_parallel(1);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
