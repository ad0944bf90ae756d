/* rlp_env_create_http against the reference server (examples/env_server.py,
 * started as a subprocess on a free port) through the synchronous episode
 * API, like an evaluation harness: a whole calculator episode, then every
 * fault the server can simulate (HTTP 500, a hang past the deadline,
 * garbage, an answer without its fields, a 10 MB observation) and a port
 * that refuses connections. Each fault must fail its call with a message
 * naming it, and never the process. Usage: test_env_http PYTHON SERVER.PY */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *python, *server_py;

typedef struct server {
    pid_t pid;
    char url[64];
} server;

/* Starts the reference server with extra arguments (NULL-terminated) and
 * reads the port it prints. */
static void server_start(server *s, const char *arg1, const char *arg2)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp(python, python, server_py, "--port", "0", arg1, arg2, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[32] = {0};
    size_t n = 0;
    struct pollfd p = {fds[0], POLLIN, 0};
    while (n < sizeof line - 1 && !memchr(line, '\n', n) && poll(&p, 1, 20000) == 1) {
        ssize_t r = read(fds[0], line + n, sizeof line - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fds[0]);
    int port = atoi(line);
    assert_true(port > 0);
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", port);
}

static void server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
}

static rlp_env *make_env(const char *url, uint32_t timeout_ms, uint64_t max_obs)
{
    rlp_env_options o;
    assert_int_equal(rlp_env_options_init(&o, RLP_ENV_OPTIONS_VERSION), RLP_OK);
    o.timeout_ms = timeout_ms;
    if (max_obs)
        o.max_observation_bytes = max_obs;
    rlp_env *env = NULL;
    assert_int_equal(rlp_env_create_http(&env, url, NULL, &o), RLP_OK);
    assert_non_null(env);
    return env;
}

static int step(rlp_env_outcome *out, rlp_env_episode *ep, const char *action)
{
    const int32_t ids[3] = {7, 8, 9};
    return rlp_env_episode_step(out, ep, action, strlen(action), ids, 3);
}

static int has(const char *s, const char *part)
{
    if (!s || !strstr(s, part)) {
        print_message("\"%s\" does not contain \"%s\"\n", s ? s : "(null)", part);
        return 0;
    }
    return 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_calculator_episode(void **state)
{
    (void)state;
    server s;
    server_start(&s, NULL, NULL);
    rlp_env *env = make_env(s.url, 10000, 0);
    assert_true(has(rlp_env_name(env), s.url));

    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    assert_int_equal(rlp_env_episode_start(&ep, env, "{\"answer\": \"42\"}", &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(o.observation_len, 0);

    assert_int_equal(step(&o, ep, "Let me compute. <calculator>6*7</calculator>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(o.observation_len, strlen("\n<result>42</result>\n"));
    assert_memory_equal(o.observation, "\n<result>42</result>\n", o.observation_len);
    assert_int_equal(o.tool_call, 1);
    assert_int_equal(o.done, 0);
    assert_int_equal(o.has_reward, 0);
    assert_null(o.tool_error);

    /* a failing tool is an answer, not a failure: the episode goes on */
    assert_int_equal(step(&o, ep, "<calculator>1/0</calculator>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_true(has(o.tool_error, "ZeroDivisionError"));
    assert_true(has(o.observation, "<result>error</result>"));

    /* a turn cut inside a character is sent with U+FFFD, not refused */
    assert_int_equal(step(&o, ep, "\xe4\xb8<calculator>2**10</calculator>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_true(has(o.observation, "<result>1024</result>"));

    assert_int_equal(step(&o, ep, "<answer>42</answer>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.tool_call, 0);
    assert_int_equal(o.has_reward, 1);
    assert_true(o.reward == 1.0f);
    rlp_env_episode_free(ep);

    /* a wrong answer, and a prompt without metadata (metadata: null) */
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(step(&o, ep, "<answer>41</answer>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.has_reward, 1);
    assert_true(o.reward == 0.0f);
    rlp_env_episode_free(ep);

    /* several episodes at once on the worker threads */
    rlp_env_episode *eps[6];
    for (int i = 0; i < 6; i++) {
        assert_int_equal(rlp_env_episode_start(&eps[i], env, "{\"answer\": \"3\"}", &o), RLP_OK);
        assert_int_equal(o.status, RLP_OK);
    }
    for (int i = 0; i < 6; i++) {
        char a[64];
        snprintf(a, sizeof a, "<calculator>%d+1</calculator>", i);
        assert_int_equal(step(&o, eps[i], a), RLP_OK);
        assert_int_equal(o.status, RLP_OK);
        char want[64];
        snprintf(want, sizeof want, "<result>%d</result>", i + 1);
        assert_true(has(o.observation, want));
    }
    for (int i = 0; i < 6; i++)
        rlp_env_episode_free(eps[i]);
    rlp_env_free(env);
    server_stop(&s);
}

/* Episodes on several threads at once share the environment's pooled
 * connections; each must see only its own answers. */
typedef struct runner {
    rlp_env *env;
    int k, ok;
} runner;

static void *run_episode(void *arg)
{
    runner *r = arg;
    char meta[64], act[64], want[64];
    snprintf(meta, sizeof meta, "{\"answer\": \"%d\"}", r->k * 3);
    snprintf(act, sizeof act, "<calculator>%d*3</calculator>", r->k);
    snprintf(want, sizeof want, "\n<result>%d</result>\n", r->k * 3);
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    int ok = rlp_env_episode_start(&ep, r->env, meta, &o) == RLP_OK && o.status == RLP_OK;
    ok = ok && step(&o, ep, act) == RLP_OK && o.status == RLP_OK && o.observation_len == strlen(want) &&
        memcmp(o.observation, want, o.observation_len) == 0;
    snprintf(act, sizeof act, "<answer>%d</answer>", r->k * 3);
    ok = ok && step(&o, ep, act) == RLP_OK && o.status == RLP_OK && o.done && o.has_reward && o.reward == 1.0f;
    rlp_env_episode_free(ep);
    r->ok = ok;
    return NULL;
}

static void test_concurrent_episodes(void **state)
{
    (void)state;
    server s;
    server_start(&s, "--delay-ms", "30");
    rlp_env *env = make_env(s.url, 10000, 0);
    enum { N = 8 };
    pthread_t t[N];
    runner r[N];
    for (int i = 0; i < N; i++) {
        r[i] = (runner){env, i + 1, 0};
        assert_int_equal(pthread_create(&t[i], NULL, run_episode, &r[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_true(r[i].ok);
    }
    rlp_env_free(env);
    server_stop(&s);
}

static void test_observation_pieces(void **state)
{
    (void)state;
    server s;
    server_start(&s, "--pieces", NULL);
    rlp_env *env = make_env(s.url, 10000, 0);
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    assert_int_equal(rlp_env_episode_start(&ep, env, "{}", &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(step(&o, ep, "<calculator>(2+3)*4</calculator>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    const char *want = "<|im_end|>\n<|im_start|>user\n<result>20</result><|im_end|>\n<|im_start|>assistant\n";
    assert_int_equal(o.observation_len, strlen(want));
    assert_memory_equal(o.observation, want, o.observation_len);
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    server_stop(&s);
}

/* The reset of a server in fault mode `mode` fails with a message holding `part`. */
static void reset_fails(const char *mode, const char *part)
{
    server s;
    server_start(&s, "--fail-mode", mode);
    rlp_env *env = make_env(s.url, 10000, 0);
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    assert_int_equal(rlp_env_episode_start(&ep, env, "{\"answer\": \"1\"}", &o), RLP_OK);
    assert_int_not_equal(o.status, RLP_OK);
    assert_true(has(o.error, part));
    assert_true(has(o.error, "/reset"));
    /* a failed episode takes no more steps */
    assert_int_equal(step(&o, ep, "<answer>1</answer>"), RLP_E_STATE);
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    server_stop(&s);
}

static void test_http_500(void **state)
{
    (void)state;
    reset_fails("500", "HTTP 500");
}

static void test_garbage(void **state)
{
    (void)state;
    reset_fails("garbage", "not valid JSON");
}

static void test_missing_fields(void **state)
{
    (void)state;
    reset_fails("missing", "episode_id");
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    reset_fails("badutf8", "not valid JSON");
}

/* The key goes out as a bearer token: the server answers 401 without it. */
static void test_api_key(void **state)
{
    (void)state;
    server s;
    server_start(&s, "--api-key", "k3y");
    rlp_env *env = NULL;
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    assert_int_equal(rlp_env_create_http(&env, s.url, "wrong", NULL), RLP_OK);
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, &o), RLP_OK);
    assert_true(has(o.error, "HTTP 401: missing or wrong API key"));
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    assert_int_equal(rlp_env_create_http(&env, s.url, "k3y", NULL), RLP_OK);
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(step(&o, ep, "<answer>0</answer>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(o.done, 1);
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    server_stop(&s);
}

static void test_hang_times_out(void **state)
{
    (void)state;
    server s;
    server_start(&s, "--fail-mode", "hang");
    rlp_env *env = make_env(s.url, 300, 0);
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    double t0 = now_s();
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, &o), RLP_OK);
    double took = now_s() - t0;
    assert_int_equal(o.status, RLP_E_TIMEOUT);
    assert_true(took >= 0.25 && took < 2.5);
    rlp_env_episode_free(ep);
    t0 = now_s();
    rlp_env_free(env); /* the abandoned call ends with curl's own timeout */
    assert_true(now_s() - t0 < 5.0);
    server_stop(&s);
}

static void test_connection_refused(void **state)
{
    (void)state;
    /* a port that was free a moment ago and has no listener now */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", ntohs(a.sin_port));
    rlp_env *env = make_env(url, 5000, 0);
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    double t0 = now_s();
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, &o), RLP_OK);
    assert_int_not_equal(o.status, RLP_OK);
    assert_true(has(o.error, "/reset"));
    assert_true(has(o.error, "3 attempts")); /* retried: the request was never sent */
    assert_true(now_s() - t0 < 4.0);
    rlp_env_episode_free(ep);
    rlp_env_free(env);
}

static void test_huge_observation(void **state)
{
    (void)state;
    server s;
    server_start(&s, "--fail-mode", "huge");
    rlp_env *env = make_env(s.url, 20000, 0);
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    /* 10 MB against 65536 max_observation_bytes: refused while it arrives */
    assert_int_equal(step(&o, ep, "<calculator>1</calculator>"), RLP_OK);
    assert_int_not_equal(o.status, RLP_OK);
    assert_true(has(o.error, "larger than"));
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    server_stop(&s);
}

static void test_observation_cut(void **state)
{
    (void)state;
    server s;
    server_start(&s, NULL, NULL);
    rlp_env *env = make_env(s.url, 10000, 8); /* an observation within the answer cap is cut by env.c */
    rlp_env_episode *ep = NULL;
    rlp_env_outcome o;
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(step(&o, ep, "<calculator>123456*1</calculator>"), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(o.truncated, 1);
    assert_int_equal(o.observation_len, 8);
    assert_memory_equal(o.observation, "\n<result", 8);
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    server_stop(&s);
}

static void test_arguments(void **state)
{
    (void)state;
    rlp_env *env = NULL;
    assert_int_equal(rlp_env_create_http(NULL, "http://127.0.0.1:1", NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_http(&env, NULL, NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_http(&env, "ftp://127.0.0.1/", NULL, NULL), RLP_E_INVALID_ARG);
    assert_true(has(rlp_error_last(), "ftp://"));
    assert_int_equal(rlp_env_create_http(&env, "http://127.0.0.1:1/\nx", NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_http(&env, "http://127.0.0.1:1", "", NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_http(&env, "http://127.0.0.1:1", "a\r\nb", NULL), RLP_E_INVALID_ARG);
    rlp_env_options o = RLP_ENV_OPTIONS_INIT;
    o.version = 99;
    assert_int_equal(rlp_env_create_http(&env, "http://127.0.0.1:1", NULL, &o), RLP_E_INVALID_ARG);
    assert_null(env);
    /* defaults, with a key */
    assert_int_equal(rlp_env_create_http(&env, "https://example.invalid/env", "k", NULL), RLP_OK);
    rlp_env_free(env);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PYTHON SERVER.PY\n", argv[0]);
        return 2;
    }
    python = argv[1];
    server_py = argv[2];
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_calculator_episode),
        cmocka_unit_test(test_concurrent_episodes),
        cmocka_unit_test(test_observation_pieces),
        cmocka_unit_test(test_http_500),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_hang_times_out),
        cmocka_unit_test(test_connection_refused),
        cmocka_unit_test(test_huge_observation),
        cmocka_unit_test(test_observation_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
