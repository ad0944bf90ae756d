/* Remote completion client against an in-test libmicrohttpd server that
 * answers by the prompt's first token id: every response form and failure
 * in ONE call (each failure must leave the others intact), the request JSON
 * the server saw, retry to the next URL, the in-flight cap; a set of URLs
 * that changes (and starts empty) with per-server counters, through the
 * client and the public remote engine; and the parser alone on bodies a
 * lax parser would accept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "http_test_server.h"
#include "rollout/remote_client.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- canned answers, keyed by prompt[0] ---------------------------------- */

enum {
    K_VLLM = 1,       /* n = 2, "token_id:N" tokens, choices out of index order, weight_version 7 */
    K_LLAMA,          /* llama.cpp: logprobs.content[].id / .logprob */
    K_TOKEN_IDS,      /* choices[].token_ids, text tokens in logprobs.tokens, finish "abort" */
    K_FLAKY500,       /* 500 the first time, then a good answer */
    K_ALWAYS500,      /* 500 with a body every time */
    K_SLOW,           /* stalls past the client's timeout */
    K_MALFORMED,      /* 200 with invalid JSON */
    K_TRUNC_JSON,     /* 200, honest Content-Length, JSON cut short */
    K_SHORT_BODY,     /* declares 1000 bytes, sends 100, closes */
    K_HUGE_CHUNKED,   /* chunked body past the size limit */
    K_HUGE_DECLARED,  /* Content-Length past the size limit */
    K_BAD_REQUEST,    /* 400 */
    K_SIMPLE,         /* a good one-choice answer */
    K_CONC,           /* a good answer after 150 ms, counting concurrent handlers */
    K_COUNT
};

#define TEST_LIMIT 65536       /* max_response_bytes of the test client */
#define HUGE_BYTES (300 * 1024) /* well past TEST_LIMIT */
#define SHORT_DECLARED 1000
#define SHORT_SENT 100

static const char VLLM_ANSWER[] =
    "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"test-model\","
    "\"weight_version\":7,\"choices\":["
    "{\"index\":1,\"text\":\" world\",\"logprobs\":{\"text_offset\":[0,2,5],"
    "\"token_logprobs\":[-0.25,-1.5,-0.125],\"tokens\":[\"token_id:9\",\"token_id:10\",\"token_id:2\"],"
    "\"top_logprobs\":[{\"token_id:9\":-0.25},{\"token_id:10\":-1.5},{\"token_id:2\":-0.125}]},"
    "\"finish_reason\":\"stop\",\"stop_reason\":2},"
    "{\"index\":0,\"text\":\" hi\",\"logprobs\":{\"text_offset\":[0,1],"
    "\"token_logprobs\":[-0.5,-2.0],\"tokens\":[\"token_id:5\",\"token_id:7\"],"
    "\"top_logprobs\":[{\"token_id:5\":-0.5},{\"token_id:7\":-2.0}]},"
    "\"finish_reason\":\"length\",\"stop_reason\":null}],"
    "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":8,\"completion_tokens\":5}}";

static const char LLAMA_ANSWER[] =
    "{\"choices\":[{\"text\":\"ab\",\"index\":0,\"logprobs\":{\"content\":["
    "{\"id\":101,\"token\":\"a\",\"bytes\":[97],\"logprob\":-0.75,"
    "\"top_logprobs\":[{\"id\":101,\"token\":\"a\",\"bytes\":[97],\"logprob\":-0.75}]},"
    "{\"id\":102,\"token\":\"b\",\"bytes\":[98],\"logprob\":-0.0625,\"top_logprobs\":[]}]},"
    "\"finish_reason\":\"length\"}],\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"b1\","
    "\"object\":\"text_completion\",\"usage\":{\"completion_tokens\":2},\"id\":\"chatcmpl-x\"}";

/* text tokens in logprobs.tokens: ids must come from token_ids, which is
 * preferred; an integer logprob (-1) is a number too */
static const char TOKEN_IDS_ANSWER[] =
    "{\"weight_version\":0,\"choices\":[{\"index\":0,\"text\":\"xyz\",\"token_ids\":[300,301,302],"
    "\"logprobs\":{\"tokens\":[\"x\",\"y\",\"z\"],\"token_logprobs\":[-1,-0.5,-0.25]},"
    "\"finish_reason\":\"abort\"}]}";

static const char SIMPLE_ANSWER[] =
    "{\"choices\":[{\"index\":0,\"text\":\"ok\",\"logprobs\":{\"tokens\":[\"token_id:8\"],"
    "\"token_logprobs\":[-0.375]},\"finish_reason\":\"stop\"}]}";

static const char ERROR_500[] = "upstream exploded";
static const char ERROR_400[] =
    "{\"object\":\"error\",\"message\":\"n must be at least 1, got 0\",\"type\":\"BadRequestError\","
    "\"code\":400}";
static const char MALFORMED[] = "{\"choices\": [{\"index\": 0, \"text\": \"x\",}]}";

/* ---- the server ----------------------------------------------------------- */

typedef struct server {
    http_test_server http;        /* the daemon, its base URL, `stopping` */
    pthread_mutex_t mu;
    int hits[K_COUNT];            /* requests per key */
    char *last_body[K_COUNT];     /* request JSON of the last request per key */
    char *last_auth[K_COUNT];     /* its Authorization header */
    int active, peak;             /* K_CONC handlers running now / at most */
} server;

static ssize_t huge_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    if (pos >= HUGE_BYTES)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = HUGE_BYTES - pos < max ? (size_t)(HUGE_BYTES - pos) : max;
    memset(buf, ' ', n);
    return (ssize_t)n;
}

/* The first SHORT_SENT bytes of a good answer, then an error that makes
 * MHD drop the connection with SHORT_DECLARED - SHORT_SENT still owed. */
static ssize_t short_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    if (pos >= SHORT_SENT)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = SHORT_SENT - pos < max ? (size_t)(SHORT_SENT - pos) : max;
    memcpy(buf, VLLM_ANSWER + pos, n);
    return (ssize_t)n;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *body, size_t len)
{
    server *s = cls;
    if (strcmp(method, "POST") != 0 || strcmp(url, "/v1/completions") != 0)
        return http_test_reply(conn, MHD_HTTP_NOT_FOUND, "{}");

    json_t *req = body ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *first = json_array_get(json_object_get(req, "prompt"), 0);
    json_int_t key = json_is_integer(first) ? json_integer_value(first) : 0;
    json_decref(req);
    if (key <= 0 || key >= K_COUNT)
        return http_test_reply(conn, MHD_HTTP_BAD_REQUEST, "{\"message\":\"unknown key\"}");

    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    pthread_mutex_lock(&s->mu);
    int hit = ++s->hits[key];
    free(s->last_body[key]);
    free(s->last_auth[key]);
    s->last_body[key] = strdup(body);
    s->last_auth[key] = auth ? strdup(auth) : NULL;
    pthread_mutex_unlock(&s->mu);

    switch (key) {
    case K_VLLM: return http_test_reply(conn, MHD_HTTP_OK, VLLM_ANSWER);
    case K_LLAMA: return http_test_reply(conn, MHD_HTTP_OK, LLAMA_ANSWER);
    case K_TOKEN_IDS: return http_test_reply(conn, MHD_HTTP_OK, TOKEN_IDS_ANSWER);
    case K_FLAKY500:
        if (hit == 1)
            return http_test_reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, ERROR_500);
        return http_test_reply(conn, MHD_HTTP_OK, SIMPLE_ANSWER);
    case K_ALWAYS500:
        return http_test_reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, ERROR_500);
    case K_SLOW:
        for (int i = 0; i < 300 && !atomic_load(&s->http.stopping); i++)
            sleep_ms(10);
        return http_test_reply(conn, MHD_HTTP_OK, SIMPLE_ANSWER);
    case K_MALFORMED: return http_test_reply(conn, MHD_HTTP_OK, MALFORMED);
    case K_TRUNC_JSON: return http_test_reply_n(conn, MHD_HTTP_OK, VLLM_ANSWER, 60);
    case K_SHORT_BODY: return http_test_reply_stream(conn, SHORT_DECLARED, short_reader);
    case K_HUGE_CHUNKED: return http_test_reply_stream(conn, MHD_SIZE_UNKNOWN, huge_reader);
    case K_HUGE_DECLARED: {
        char *big = malloc(HUGE_BYTES);
        if (!big)
            return MHD_NO;
        memset(big, ' ', HUGE_BYTES);
        enum MHD_Result ok = http_test_reply_n(conn, MHD_HTTP_OK, big, HUGE_BYTES);
        free(big);
        return ok;
    }
    case K_BAD_REQUEST: return http_test_reply(conn, MHD_HTTP_BAD_REQUEST, ERROR_400);
    case K_CONC:
        pthread_mutex_lock(&s->mu);
        if (++s->active > s->peak)
            s->peak = s->active;
        pthread_mutex_unlock(&s->mu);
        sleep_ms(150);
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
        return http_test_reply(conn, MHD_HTTP_OK, SIMPLE_ANSWER);
    default: return http_test_reply(conn, MHD_HTTP_OK, SIMPLE_ANSWER);
    }
}

static server *server_start(void)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    pthread_mutex_init(&s->mu, NULL);
    http_test_server_start(&s->http, on_request, s);
    return s;
}

static void server_stop(server *s)
{
    http_test_server_stop(&s->http);
    for (int k = 0; k < K_COUNT; k++) {
        free(s->last_body[k]);
        free(s->last_auth[k]);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int hits(server *s, int key)
{
    pthread_mutex_lock(&s->mu);
    int h = s->hits[key];
    pthread_mutex_unlock(&s->mu);
    return h;
}

/* ---- helpers ---------------------------------------------------------------- */

static rlpi_remote_config test_config(const char *const *urls, size_t n_urls)
{
    rlpi_remote_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.base_urls = urls;
    cfg.n_urls = n_urls;
    cfg.model = "test-model";
    cfg.api_key = "sekrit";
    cfg.timeout_ms = 700;
    cfg.connect_timeout_ms = 500;
    cfg.max_retries = 2;
    cfg.backoff_ms = 10;
    cfg.max_response_bytes = TEST_LIMIT;
    return cfg;
}

/* A one-token-id prompt selecting `key`, greedy, n = 1. */
static rlpi_remote_request simple_request(const int32_t *prompt)
{
    rlpi_remote_request r;
    memset(&r, 0, sizeof r);
    r.prompt = prompt;
    r.n_prompt = 1;
    r.n = 1;
    r.max_tokens = 8;
    r.top_p = 1.0f;
    return r;
}

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", part);
}

static void assert_choice(const rlpi_remote_choice *c, const int32_t *ids, const float *lps,
                          size_t n, const char *text, const char *finish)
{
    assert_int_equal(c->n_tokens, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(c->tokens[i], ids[i]);
        /* dyadic fractions: exact in float, so compared exactly */
        assert_true(c->logprobs[i] == lps[i]);
    }
    assert_string_equal(c->text, text);
    assert_string_equal(c->finish_reason, finish);
}

/* ---- one call, every outcome ----------------------------------------------- */

static void test_all_outcomes_in_one_call(void **state)
{
    (void)state;
    server *s = server_start();
    const char *urls[] = {s->http.base};
    rlpi_remote_config cfg = test_config(urls, 1);
    rlpi_remote_client *c;
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_OK);

    enum { N = 13 };
    static const int32_t keys[N - 1] = {K_VLLM,       K_LLAMA,        K_TOKEN_IDS,     K_FLAKY500,
                                        K_ALWAYS500,  K_SLOW,         K_MALFORMED,     K_TRUNC_JSON,
                                        K_SHORT_BODY, K_HUGE_CHUNKED, K_HUGE_DECLARED, K_BAD_REQUEST};
    int32_t prompts[N - 1][1];
    rlpi_remote_request reqs[N];
    for (int i = 0; i < N - 1; i++) {
        prompts[i][0] = keys[i];
        reqs[i] = simple_request(prompts[i]);
    }
    /* request 0: every sampling field set, to check the JSON the server got */
    static const int32_t vllm_prompt[] = {K_VLLM, 42, 43};
    static const char *const stop[] = {"</s>", "\n\n"};
    static const int32_t stop_ids[] = {2};
    reqs[0].prompt = vllm_prompt;
    reqs[0].n_prompt = 3;
    reqs[0].n = 2;
    reqs[0].max_tokens = 16;
    reqs[0].temperature = 0.7f;
    reqs[0].top_p = 0.95f;
    reqs[0].min_p = 0.05f;
    reqs[0].top_k = 0;
    reqs[0].seed = 1234;
    reqs[0].has_seed = 1;
    reqs[0].stop = stop;
    reqs[0].n_stop = 2;
    reqs[0].stop_ids = stop_ids;
    reqs[0].n_stop_ids = 1;
    reqs[0].include_stop_str = 1;
    reqs[1].top_k = 40;
    /* request 12: malformed (empty prompt) — fails alone, never sent */
    reqs[N - 1] = simple_request(NULL);
    reqs[N - 1].n_prompt = 0;

    rlpi_remote_result res[N];
    assert_int_equal(rlpi_remote_client_complete(c, reqs, N, res), RLP_OK);

    /* vLLM form: choices put in index order, weight_version read */
    assert_int_equal(res[0].status, RLP_OK);
    assert_null(res[0].error);
    assert_int_equal(res[0].http_code, 200);
    assert_int_equal(res[0].attempts, 1);
    assert_int_equal(res[0].n_choices, 2);
    assert_int_equal(res[0].weight_version, 7);
    assert_choice(&res[0].choices[0], (const int32_t[]){5, 7}, (const float[]){-0.5f, -2.0f}, 2,
                  " hi", "length");
    assert_choice(&res[0].choices[1], (const int32_t[]){9, 10, 2},
                  (const float[]){-0.25f, -1.5f, -0.125f}, 3, " world", "stop");

    /* llama.cpp form */
    assert_int_equal(res[1].status, RLP_OK);
    assert_int_equal(res[1].n_choices, 1);
    assert_int_equal(res[1].weight_version, -1);
    assert_choice(&res[1].choices[0], (const int32_t[]){101, 102}, (const float[]){-0.75f, -0.0625f},
                  2, "ab", "length");

    /* token_ids form */
    assert_int_equal(res[2].status, RLP_OK);
    assert_int_equal(res[2].weight_version, 0);
    assert_choice(&res[2].choices[0], (const int32_t[]){300, 301, 302},
                  (const float[]){-1.0f, -0.5f, -0.25f}, 3, "xyz", "abort");

    /* 500 once, then success on the retry */
    assert_int_equal(res[3].status, RLP_OK);
    assert_int_equal(res[3].attempts, 2);
    assert_int_equal(res[3].http_code, 200);
    assert_choice(&res[3].choices[0], (const int32_t[]){8}, (const float[]){-0.375f}, 1, "ok", "stop");
    assert_int_equal(hits(s, K_FLAKY500), 2);

    /* always 500: 1 + max_retries attempts, URL, code and body in the message */
    char want[256];
    snprintf(want, sizeof want, "POST %s/v1/completions: HTTP 500 after 3 attempts: %s", s->http.base,
             ERROR_500);
    assert_int_equal(res[4].status, RLP_E_NETWORK);
    assert_int_equal(res[4].attempts, 3);
    assert_int_equal(res[4].http_code, 500);
    assert_string_equal(res[4].error, want);
    assert_null(res[4].choices);
    assert_int_equal(hits(s, K_ALWAYS500), 3);

    /* stall: each attempt times out, and so does the request */
    assert_int_equal(res[5].status, RLP_E_TIMEOUT);
    assert_int_equal(res[5].attempts, 3);
    assert_int_equal(res[5].http_code, 0);
    assert_contains(res[5].error, s->http.base);
    assert_contains(res[5].error, "after 3 attempts");

    /* invalid JSON with 200: not retried */
    assert_int_equal(res[6].status, RLP_E_FORMAT);
    assert_int_equal(res[6].attempts, 1);
    assert_int_equal(res[6].http_code, 200);
    assert_contains(res[6].error, "HTTP 200");
    assert_contains(res[6].error, "invalid JSON");
    assert_int_equal(hits(s, K_MALFORMED), 1);

    /* JSON cut short under an honest Content-Length */
    assert_int_equal(res[7].status, RLP_E_FORMAT);
    assert_int_equal(res[7].attempts, 1);
    assert_contains(res[7].error, "invalid JSON");

    /* connection closed mid-body: retried (the server may be restarting),
     * then reported as a truncated body with the byte counts */
    assert_int_equal(res[8].status, RLP_E_FORMAT);
    assert_int_equal(res[8].attempts, 3);
    assert_contains(res[8].error, "truncated");
    assert_contains(res[8].error, "100 of 1000 bytes");
    assert_int_equal(hits(s, K_SHORT_BODY), 3);

    /* over the size limit while receiving a chunked body: not retried */
    assert_int_equal(res[9].status, RLP_E_OVERFLOW);
    assert_int_equal(res[9].attempts, 1);
    assert_contains(res[9].error, "65536");
    assert_null(res[9].choices);
    assert_int_equal(hits(s, K_HUGE_CHUNKED), 1);

    /* over the limit by its Content-Length */
    assert_int_equal(res[10].status, RLP_E_OVERFLOW);
    assert_int_equal(res[10].attempts, 1);
    assert_contains(res[10].error, "65536");

    /* 400: the request is wrong, so not retried; the server's words quoted */
    assert_int_equal(res[11].status, RLP_E_NETWORK);
    assert_int_equal(res[11].attempts, 1);
    assert_int_equal(res[11].http_code, 400);
    assert_contains(res[11].error, "HTTP 400 after 1 attempt:");
    assert_contains(res[11].error, "n must be at least 1");
    assert_int_equal(hits(s, K_BAD_REQUEST), 1);

    /* malformed request: its own error, nothing sent */
    assert_int_equal(res[12].status, RLP_E_INVALID_ARG);
    assert_int_equal(res[12].attempts, 0);
    assert_contains(res[12].error, "request 12: empty prompt");

    /* what the server received for request 0 */
    json_t *body = json_loads(s->last_body[K_VLLM], 0, NULL);
    assert_non_null(body);
    json_t *p = json_object_get(body, "prompt");
    assert_int_equal(json_array_size(p), 3);
    assert_int_equal(json_integer_value(json_array_get(p, 0)), K_VLLM);
    assert_int_equal(json_integer_value(json_array_get(p, 1)), 42);
    assert_int_equal(json_integer_value(json_array_get(p, 2)), 43);
    assert_string_equal(json_string_value(json_object_get(body, "model")), "test-model");
    assert_int_equal(json_integer_value(json_object_get(body, "n")), 2);
    assert_int_equal(json_integer_value(json_object_get(body, "max_tokens")), 16);
    /* floats go out as their shortest decimal form */
    assert_true(json_real_value(json_object_get(body, "temperature")) == 0.7);
    assert_true(json_real_value(json_object_get(body, "top_p")) == 0.95);
    assert_true(json_real_value(json_object_get(body, "min_p")) == 0.05);
    assert_int_equal(json_integer_value(json_object_get(body, "top_k")), -1);
    assert_int_equal(json_integer_value(json_object_get(body, "seed")), 1234);
    json_t *st = json_object_get(body, "stop");
    assert_int_equal(json_array_size(st), 2);
    assert_string_equal(json_string_value(json_array_get(st, 0)), "</s>");
    assert_string_equal(json_string_value(json_array_get(st, 1)), "\n\n");
    json_t *sti = json_object_get(body, "stop_token_ids");
    assert_int_equal(json_array_size(sti), 1);
    assert_int_equal(json_integer_value(json_array_get(sti, 0)), 2);
    assert_true(json_is_true(json_object_get(body, "include_stop_str_in_output")));
    assert_int_equal(json_integer_value(json_object_get(body, "logprobs")), 1);
    assert_true(json_is_true(json_object_get(body, "return_tokens_as_token_ids")));
    assert_true(json_is_false(json_object_get(body, "skip_special_tokens")));
    assert_true(json_is_false(json_object_get(body, "stream")));
    json_decref(body);
    assert_string_equal(s->last_auth[K_VLLM], "Bearer sekrit");

    /* request 1: no seed, no stop lists; top_k as given */
    body = json_loads(s->last_body[K_LLAMA], 0, NULL);
    assert_non_null(body);
    assert_null(json_object_get(body, "seed"));
    assert_null(json_object_get(body, "stop"));
    assert_null(json_object_get(body, "stop_token_ids"));
    assert_int_equal(json_integer_value(json_object_get(body, "top_k")), 40);
    assert_true(json_is_false(json_object_get(body, "include_stop_str_in_output")));
    json_decref(body);

    for (int i = 0; i < N; i++)
        rlpi_remote_result_clear(&res[i]);
    assert_null(res[0].choices);
    assert_int_equal(res[0].weight_version, -1);
    rlpi_remote_client_free(c);
    server_stop(s);
}

/* ---- URLs: round-robin, retry to the next one ------------------------------ */

static void test_retry_moves_to_next_url(void **state)
{
    (void)state;
    server *s = server_start();
    int fd;
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d/", http_test_dead_port(&fd));
    const char *urls[] = {dead, s->http.base};
    rlpi_remote_config cfg = test_config(urls, 2);
    rlpi_remote_client *c;
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_OK);

    static const int32_t prompt[] = {K_SIMPLE};
    rlpi_remote_request reqs[2] = {simple_request(prompt), simple_request(prompt)};
    rlpi_remote_result res[2];
    assert_int_equal(rlpi_remote_client_complete(c, reqs, 2, res), RLP_OK);
    /* request 0 starts on the dead URL, is refused, succeeds on the live
     * one; request 1 starts on the live one (round-robin) */
    assert_int_equal(res[0].status, RLP_OK);
    assert_int_equal(res[0].attempts, 2);
    assert_int_equal(res[1].status, RLP_OK);
    assert_int_equal(res[1].attempts, 1);
    assert_int_equal(hits(s, K_SIMPLE), 2);
    rlpi_remote_result_clear(&res[0]);
    rlpi_remote_result_clear(&res[1]);
    rlpi_remote_client_free(c);

    /* only the dead URL: a network error naming it, after 1 + retries */
    const char *dead_only[] = {dead};
    cfg = test_config(dead_only, 1);
    cfg.max_retries = 1;
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_OK);
    assert_int_equal(rlpi_remote_client_complete(c, reqs, 1, res), RLP_OK);
    assert_int_equal(res[0].status, RLP_E_NETWORK);
    assert_int_equal(res[0].attempts, 2);
    assert_int_equal(res[0].http_code, 0);
    char want[160];
    snprintf(want, sizeof want, "POST %sv1/completions: ", dead); /* dead ends in '/' */
    assert_contains(res[0].error, want);
    assert_contains(res[0].error, "after 2 attempts");
    rlpi_remote_result_clear(&res[0]);
    rlpi_remote_client_free(c);
    close(fd);
    server_stop(s);
}

/* ---- concurrency ------------------------------------------------------------ */

static void test_in_flight_cap(void **state)
{
    (void)state;
    server *s = server_start();
    const char *urls[] = {s->http.base};
    rlpi_remote_config cfg = test_config(urls, 1);
    cfg.max_in_flight = 3;
    cfg.timeout_ms = 5000;
    rlpi_remote_client *c;
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_OK);
    enum { N = 7 };
    static const int32_t prompt[] = {K_CONC};
    rlpi_remote_request reqs[N];
    rlpi_remote_result res[N];
    for (int i = 0; i < N; i++)
        reqs[i] = simple_request(prompt);
    assert_int_equal(rlpi_remote_client_complete(c, reqs, N, res), RLP_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i].status, RLP_OK);
        assert_int_equal(res[i].choices[0].tokens[0], 8);
        rlpi_remote_result_clear(&res[i]);
    }
    /* concurrent (3 handlers overlapped), never more than the cap */
    assert_int_equal(s->peak, 3);
    assert_int_equal(hits(s, K_CONC), N);
    rlpi_remote_client_free(c);
    server_stop(s);
}

static void test_create_rejects_bad_config(void **state)
{
    (void)state;
    rlpi_remote_client *c = (rlpi_remote_client *)&c;
    const char *ftp[] = {"ftp://127.0.0.1:1"};
    rlpi_remote_config cfg = test_config(ftp, 1);
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_E_INVALID_ARG);
    assert_null(c);
    assert_contains(rlp_error_last(), "ftp://127.0.0.1:1");
    const char *ok[] = {"http://127.0.0.1:1"};
    cfg = test_config(NULL, 1);
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_E_INVALID_ARG);
    char longurl[RLP_SERVER_URL_MAX + 8];
    memset(longurl, 'a', sizeof longurl - 1);
    memcpy(longurl, "http://", 7);
    longurl[sizeof longurl - 1] = '\0';
    const char *too_long[] = {longurl};
    cfg = test_config(too_long, 1);
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_E_INVALID_ARG);
    assert_contains(rlp_error_last(), "more than 255");
    cfg = test_config(ok, 1);
    cfg.api_key = "a\r\nX-Injected: 1";
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_remote_client_complete(NULL, NULL, 0, NULL), RLP_E_INVALID_ARG);
}

/* ---- a set of URLs that changes --------------------------------------------- */

static uint64_t version_nine(void *arg)
{
    (void)arg;
    return 9;
}

typedef struct late_set {
    rlpi_remote_client *c;
    const char *url;
} late_set;

static void *set_later(void *arg)
{
    late_set *l = arg;
    sleep_ms(300);
    assert_int_equal(rlpi_remote_client_set_urls(l->c, &l->url, 1), RLP_OK);
    return NULL;
}

static rlp_server_stats *find_stats(rlp_server_stats *st, size_t n, const char *url)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(st[i].url, url))
            return &st[i];
    fail_msg("no counters for %s", url);
    return NULL;
}

static void test_set_urls_changes_servers(void **state)
{
    (void)state;
    server *a = server_start(), *b = server_start();
    /* no server at all: a request waits for one up to its timeout, then
     * fails alone saying the set was empty */
    rlpi_remote_config cfg = test_config(NULL, 0);
    cfg.timeout_ms = 400;
    rlpi_remote_client *c;
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_OK);
    rlpi_remote_client_set_version_source(c, version_nine, NULL);
    static const int32_t simple[] = {K_SIMPLE}, vllm[] = {K_VLLM};
    rlpi_remote_request reqs[2] = {simple_request(simple), simple_request(simple)};
    rlpi_remote_result res[2];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(rlpi_remote_client_complete(c, reqs, 1, res), RLP_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    assert_int_equal(res[0].status, RLP_E_TIMEOUT);
    assert_int_equal(res[0].attempts, 0);
    assert_contains(res[0].error, "set of server URLs stayed empty for 400 ms");
    assert_true(waited >= 0.39 && waited < 5.0);
    rlpi_remote_result_clear(&res[0]);
    assert_int_equal(rlpi_remote_client_server_stats(c, NULL, 0), 0);
    rlpi_remote_client_free(c);

    /* a server that appears while the request waits serves it */
    cfg.timeout_ms = 5000;
    assert_int_equal(rlpi_remote_client_create(&c, &cfg), RLP_OK);
    late_set l = {c, a->http.base};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, set_later, &l), 0);
    assert_int_equal(rlpi_remote_client_complete(c, reqs, 2, res), RLP_OK);
    pthread_join(th, NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(res[i].status, RLP_OK);
        assert_int_equal(res[i].attempts, 1);
        rlpi_remote_result_clear(&res[i]);
    }
    assert_int_equal(hits(a, K_SIMPLE), 2);
    rlpi_remote_client_set_version_source(c, version_nine, NULL);

    /* {a} -> {b}: the next requests (and a clone's) go to b only; a keeps
     * its counters, out of the set */
    const char *only_b[] = {b->http.base};
    assert_int_equal(rlpi_remote_client_set_urls(c, only_b, 1), RLP_OK);
    rlpi_remote_client *clone;
    assert_int_equal(rlpi_remote_client_clone(&clone, c, 1), RLP_OK);
    rlpi_remote_request vr = simple_request(vllm);
    vr.n = 2;
    assert_int_equal(rlpi_remote_client_complete(c, &vr, 1, res), RLP_OK);
    assert_int_equal(res[0].status, RLP_OK);
    assert_int_equal(res[0].weight_version, 7);
    rlpi_remote_result_clear(&res[0]);
    assert_int_equal(rlpi_remote_client_complete(clone, reqs, 1, res), RLP_OK);
    assert_int_equal(res[0].status, RLP_OK);
    rlpi_remote_result_clear(&res[0]);
    assert_int_equal(hits(b, K_VLLM), 1);
    assert_int_equal(hits(b, K_SIMPLE), 1);
    assert_int_equal(hits(a, K_SIMPLE), 2);

    /* a bad set is refused whole; the old one stays */
    const char *bad[] = {b->http.base, "ftp://x"};
    assert_int_equal(rlpi_remote_client_set_urls(c, bad, 2), RLP_E_INVALID_ARG);
    assert_contains(rlp_error_last(), "ftp://x");

    rlp_server_stats st[4];
    memset(st, 0, sizeof st);
    assert_int_equal(rlpi_remote_client_server_stats(c, st, 4), 2);
    rlp_server_stats *sa = find_stats(st, 2, a->http.base), *sb = find_stats(st, 2, b->http.base);
    assert_int_equal(sa->version, RLP_SERVER_STATS_VERSION);
    assert_int_equal(sa->in_set, 0);
    assert_int_equal(sa->requests_ok, 2);
    assert_int_equal(sa->requests_failed, 0);
    assert_int_equal(sa->completions, 2);
    assert_int_equal(sa->completion_tokens, 2); /* SIMPLE_ANSWER: one token */
    assert_int_equal(sa->last_weight_version, -1);
    assert_int_equal(sa->versioned, 0);
    assert_int_equal(sb->in_set, 1);
    assert_int_equal(sb->requests_ok, 2);
    assert_int_equal(sb->completions, 3);       /* 2 of VLLM_ANSWER, 1 of SIMPLE_ANSWER */
    assert_int_equal(sb->completion_tokens, 6); /* 3 + 2 + 1 */
    assert_int_equal(sb->last_weight_version, 7);
    assert_int_equal(sb->versioned, 1);
    assert_int_equal(sb->staleness_max, 2); /* version 9 at the answer, weight_version 7 */
    assert_int_equal(sb->staleness_sum, 2);

    /* a request that fails at a dead server is charged to it */
    int fd;
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d", http_test_dead_port(&fd));
    const char *only_dead[] = {dead};
    assert_int_equal(rlpi_remote_client_set_urls(c, only_dead, 1), RLP_OK);
    assert_int_equal(rlpi_remote_client_complete(c, reqs, 1, res), RLP_OK);
    assert_int_equal(res[0].status, RLP_E_NETWORK);
    assert_int_equal(res[0].attempts, 3);
    rlpi_remote_result_clear(&res[0]);
    assert_int_equal(rlpi_remote_client_server_stats(c, st, 4), 3);
    rlp_server_stats *sd = find_stats(st, 3, dead);
    assert_int_equal(sd->requests_failed, 1);
    assert_int_equal(sd->requests_ok, 0);
    assert_int_equal(find_stats(st, 3, b->http.base)->in_set, 0);
    close(fd);
    rlpi_remote_client_free(clone);
    rlpi_remote_client_free(c);
    server_stop(a);
    server_stop(b);
}

/* The same through the public remote engine: created with no server,
 * given one later; staleness measured from the engine's version. */
static void test_engine_set_urls(void **state)
{
    (void)state;
    server *a = server_start();
    rlp_remote_options o = RLP_REMOTE_OPTIONS_INIT;
    o.timeout_ms = 3000;
    o.max_retries = 0;
    rlp_rollout_engine *e = NULL;
    assert_int_equal(rlp_rollout_engine_create_remote(&e, NULL, &o), RLP_OK);
    size_t n = 99;
    assert_int_equal(rlp_rollout_engine_server_stats(NULL, 0, &n, e), RLP_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rlp_rollout_engine_set_urls(e, NULL, 1), RLP_E_INVALID_ARG);
    const char *bad[] = {"localhost:8000"};
    assert_int_equal(rlp_rollout_engine_set_urls(e, bad, 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_engine_set_urls(e, (const char *const *)&a->http.base, 0), RLP_OK);
    const char *urls[] = {a->http.base};
    assert_int_equal(rlp_rollout_engine_set_urls(e, urls, 1), RLP_OK);
    assert_int_equal(rlp_rollout_engine_set_version(e, 10), RLP_OK);
    static const int32_t vllm[] = {K_VLLM};
    rlp_prompt pr = {.tokens = vllm, .n_tokens = 1};
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.n = 2;
    rlp_batch *b = NULL;
    assert_int_equal(rlp_rollout_generate(&b, e, &pr, 1, &s, NULL, NULL), RLP_OK);
    size_t nb = 0;
    assert_int_equal(rlp_batch_size(&nb, b), RLP_OK);
    assert_int_equal(nb, 2);
    rlp_batch_free(b);
    rlp_server_stats st[2];
    assert_int_equal(rlp_rollout_engine_server_stats(st, 1, &n, e), RLP_OK);
    assert_int_equal(n, 1);
    assert_string_equal(st[0].url, a->http.base);
    assert_int_equal(st[0].in_set, 1);
    assert_int_equal(st[0].requests_ok, 1);
    assert_int_equal(st[0].completions, 2);
    assert_int_equal(st[0].last_weight_version, 7);
    assert_int_equal(st[0].staleness_max, 3); /* 10 - 7 */
    /* emptied again: a generate call fails its samples, not the call */
    assert_int_equal(rlp_rollout_engine_set_urls(e, NULL, 0), RLP_OK);
    assert_int_equal(rlp_rollout_engine_server_stats(st, 2, &n, e), RLP_OK);
    assert_int_equal(st[0].in_set, 0);
    rlp_rollout_engine_free(e);
    server_stop(a);
}

/* ---- the parser alone ------------------------------------------------------- */

static int parse(const char *body, uint32_t n, rlpi_remote_result *r)
{
    memset(r, 0, sizeof *r);
    return rlpi_remote_parse_completion(body, strlen(body), n, r);
}

/* One choice with the given logprobs object and extra choice fields. */
static int parse_one(const char *logprobs, const char *extra, rlpi_remote_result *r)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"choices\":[{\"index\":0,\"text\":\"t\",\"finish_reason\":\"stop\",%s\"logprobs\":%s}]}",
             extra, logprobs);
    return parse(body, 1, r);
}

static void test_parse_rejects(void **state)
{
    (void)state;
    rlpi_remote_result r;
    /* good answers parse; the wrong count does not */
    assert_int_equal(parse(VLLM_ANSWER, 2, &r), RLP_OK);
    rlpi_remote_result_clear(&r);
    assert_int_equal(parse(VLLM_ANSWER, 0, &r), RLP_OK); /* any count */
    assert_int_equal(r.n_choices, 2);
    rlpi_remote_result_clear(&r);
    assert_int_equal(parse(VLLM_ANSWER, 3, &r), RLP_E_FORMAT);
    assert_null(r.choices);
    assert_int_equal(r.weight_version, -1);
    assert_contains(rlp_error_last(), "2 choices, expected 3");

    static const struct {
        const char *body;
        const char *msg;
    } bad[] = {
        {"[]", "not an object"},
        {"{\"choices\":[]}", "empty choices"},
        {"{\"choices\":{}}", "choices is an object"},
        {"{\"error\":{\"message\":\"model not loaded\"}}", "the server says: model not loaded"},
        {"{\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":\"stop\",\"logprobs\":{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[-1]}},"
         "{\"index\":0,\"text\":\"b\",\"finish_reason\":\"stop\",\"logprobs\":{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[-1]}}]}",
         "index 0 appears twice"},
        {"{\"choices\":[{\"index\":1,\"text\":\"a\",\"finish_reason\":\"stop\",\"logprobs\":{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[-1]}}]}",
         "index 1 is outside 0..0"},
        {"{\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\",\"logprobs\":{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[-1]}}]}",
         "index is missing"},
        {"{\"choices\":[{\"index\":0,\"finish_reason\":\"stop\",\"logprobs\":{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[-1]}}]}",
         "text is missing"},
        {"{\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":7,\"logprobs\":{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[-1]}}]}",
         "finish_reason is an integer"},
        {"{\"weight_version\":\"3\",\"choices\":[]}", "weight_version is a string"},
        {"{\"weight_version\":-2,\"choices\":[]}", "weight_version -2 is negative"},
        {"{\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":\"stop\",\"logprobs\":null}]}",
         "logprobs is null"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (parse(bad[i].body, 0, &r) != RLP_E_FORMAT)
            fail_msg("accepted: %s", bad[i].body);
        assert_null(r.choices);
        assert_contains(rlp_error_last(), bad[i].msg);
    }

    static const struct {
        const char *logprobs, *extra, *msg;
    } badlp[] = {
        /* a null logprob (what servers send for the first prompt token) */
        {"{\"tokens\":[\"token_id:1\",\"token_id:2\"],\"token_logprobs\":[null,-1]}", "",
         "token_logprobs[0] is null"},
        {"{\"tokens\":[\"token_id:1\",\"token_id:2\"],\"token_logprobs\":[-1]}", "",
         "token_logprobs has 1 entries for 2 tokens"},
        {"{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[-1e300]}", "", "not a finite logprob"},
        {"{\"tokens\":[\"token_id:1\"],\"token_logprobs\":[\"-1\"]}", "", "is a string"},
        {"{\"tokens\":[\"token_id:-1\"],\"token_logprobs\":[-1]}", "", "tokens[0] is not \"token_id:N\""},
        {"{\"tokens\":[\"token_id:2147483648\"],\"token_logprobs\":[-1]}", "", "tokens[0] is not"},
        {"{\"tokens\":[\"token_id:12x\"],\"token_logprobs\":[-1]}", "", "tokens[0] is not"},
        {"{\"tokens\":[\"token_id:\"],\"token_logprobs\":[-1]}", "", "tokens[0] is not"},
        {"{\"tokens\":[\"hello\"],\"token_logprobs\":[-1]}", "", "return_tokens_as_token_ids"},
        {"{\"token_logprobs\":[-1]}", "\"token_ids\":[-3],", "token_ids[0] is not an integer"},
        {"{\"token_logprobs\":[-1]}", "\"token_ids\":[4294967296],", "token_ids[0] is not"},
        {"{\"token_logprobs\":[-1]}", "\"token_ids\":[1.0],", "token_ids[0] is not"},
        {"{\"token_logprobs\":[-1]}", "\"token_ids\":\"1\",", "token_ids is a string"},
        {"{\"token_logprobs\":[-1]}", "", "has no token ids"},
        {"{\"tokens\":[\"token_id:1\"]}", "", "has no logprobs"},
        {"{\"content\":[{\"id\":5,\"logprob\":null}]}", "", "content[0].logprob is null"},
        {"{\"content\":[{\"id\":5}]}", "", "content[0].logprob is missing"},
        {"{\"content\":[{\"token\":\"a\",\"logprob\":-1}]}", "", "content[0].id is not"},
        {"{\"content\":[5]}", "", "content[0].id is not"},
    };
    for (size_t i = 0; i < sizeof badlp / sizeof *badlp; i++) {
        if (parse_one(badlp[i].logprobs, badlp[i].extra, &r) != RLP_E_FORMAT)
            fail_msg("accepted: %s %s", badlp[i].extra, badlp[i].logprobs);
        assert_null(r.choices);
        assert_contains(rlp_error_last(), badlp[i].msg);
    }

    /* nesting deeper than any real answer stops before jansson recurses */
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_int_equal(rlpi_remote_parse_completion(deep, sizeof deep, 1, &r), RLP_E_FORMAT);
    assert_contains(rlp_error_last(), "nested deeper");
    assert_int_equal(rlpi_remote_parse_completion("", 0, 1, &r), RLP_E_FORMAT);
}

static void test_parse_accepts(void **state)
{
    (void)state;
    rlpi_remote_result r;
    /* an unknown finish reason is kept, cut to 15 characters; null is "" */
    assert_int_equal(
        parse("{\"choices\":[{\"index\":1,\"text\":\"\",\"finish_reason\":null,\"logprobs\":{\"tokens\":[],"
              "\"token_logprobs\":[]}},{\"index\":0,\"text\":\"q\",\"finish_reason\":"
              "\"content_filter_and_more\",\"logprobs\":{\"tokens\":[\"token_id:2147483647\"],"
              "\"token_logprobs\":[0]}}],\"weight_version\":9007199254740993}",
              2, &r),
        RLP_OK);
    assert_string_equal(r.choices[0].finish_reason, "content_filter_");
    assert_int_equal(r.choices[0].tokens[0], INT32_MAX);
    assert_true(r.choices[0].logprobs[0] == 0.0f);
    assert_string_equal(r.choices[1].finish_reason, "");
    assert_int_equal(r.choices[1].n_tokens, 0);
    assert_string_equal(r.choices[1].text, "");
    assert_true(r.weight_version == INT64_C(9007199254740993)); /* past 2^53: read as an integer */
    rlpi_remote_result_clear(&r);

    /* token_ids beat logprobs.tokens; llama.cpp content gives the logprobs */
    assert_int_equal(parse_one("{\"content\":[{\"id\":1,\"logprob\":-0.5},{\"id\":2,\"logprob\":-0.25}]}",
                               "\"token_ids\":[10,20],", &r),
                     RLP_OK);
    assert_int_equal(r.choices[0].tokens[0], 10);
    assert_int_equal(r.choices[0].tokens[1], 20);
    assert_true(r.choices[0].logprobs[1] == -0.25f);
    rlpi_remote_result_clear(&r);
    rlpi_remote_result_clear(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_parse_accepts),
        cmocka_unit_test(test_create_rejects_bad_config),
        cmocka_unit_test(test_all_outcomes_in_one_call),
        cmocka_unit_test(test_retry_moves_to_next_url),
        cmocka_unit_test(test_in_flight_cap),
        cmocka_unit_test(test_set_urls_changes_servers),
        cmocka_unit_test(test_engine_set_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
