/* The HTTP verifier against an in-test libmicrohttpd server that answers
 * by path: the request body it receives, batching, every answer form, and
 * the faults that must turn into invalid samples with reasons while the
 * rest of the batch is scored: HTTP 5xx (retried, then given up), 4xx
 * (not retried), a server that stalls past the timeout, malformed, short,
 * long and oversized answers, malformed entries, a refused connection, and
 * one failing request among good ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "http_test_server.h"
#include "rlpost.h"

#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 300          /* client timeout per attempt */
#define STALL_MS 3000           /* how long /slow stalls (ended early at shutdown) */
#define LIMIT 4096              /* max_response_bytes of the test client */
#define HUGE (64 * 1024)

typedef struct server {
    http_test_server http;      /* the daemon, its base URL, `stopping` */
    pthread_mutex_t mu;
    int hits;                   /* requests, all paths */
    int flaky_hits;
    int max_samples;            /* most samples in one request */
    char *body_from[16];        /* request body by the id of its first sample */
    char *last_auth;
} server;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static ssize_t huge_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    if (pos >= HUGE)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = HUGE - pos < max ? (size_t)(HUGE - pos) : max;
    memset(buf, ' ', n);
    return (ssize_t)n;
}

/* The answer to a good request: per sample by its completion. */
static char *scores_for(json_t *samples, int extra)
{
    json_t *scores = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(samples, i, s)
    {
        const char *c = json_string_value(json_object_get(s, "completion"));
        json_t *toks = json_object_get(s, "completion_tokens");
        if (!c)
            c = "";
        if (strcmp(c, "null") == 0) {
            json_array_append_new(scores, json_null());
        } else if (strcmp(c, "invalid") == 0) {
            json_array_append_new(scores, json_pack("{s:b, s:s}", "valid", 0, "reason", "cannot verify"));
        } else if (strcmp(c, "bad entry") == 0) {
            json_array_append_new(scores, json_string("1.0"));
        } else if (strcmp(c, "bad tokens") == 0) {
            json_array_append_new(scores, json_pack("{s:f, s:[f]}", "score", 1.0, "token_scores", 1.0));
        } else if (strcmp(c, "object") == 0) {
            json_t *ts = json_array();
            for (size_t t = 0; t < json_array_size(toks); t++)
                json_array_append_new(ts, json_real(0.25 * (double)(t + 1)));
            json_array_append_new(scores,
                                  json_pack("{s:f, s:b, s:s, s:o}", "score", 2.5, "valid", 1, "reason", "fine",
                                            "token_scores", ts));
        } else {
            json_array_append_new(scores, json_integer((json_int_t)strlen(c)));
        }
    }
    if (extra > 0)
        json_array_append_new(scores, json_integer(0));
    if (extra < 0 && json_array_size(scores) > 0)
        json_array_remove(scores, json_array_size(scores) - 1);
    json_t *root = json_pack("{s:o}", "scores", scores);
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *body, size_t len)
{
    server *s = cls;
    if (strcmp(method, "POST") != 0)
        return http_test_reply(c, 405, "{}");
    json_t *req = body ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *samples = json_object_get(req, "samples");
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    pthread_mutex_lock(&s->mu);
    s->hits++;
    int flaky = strcmp(url, "/flaky") == 0 ? ++s->flaky_hits : 0;
    if ((int)json_array_size(samples) > s->max_samples)
        s->max_samples = (int)json_array_size(samples);
    json_int_t first = json_integer_value(json_object_get(json_array_get(samples, 0), "id"));
    if (first >= 0 && first < 16 && body) {
        free(s->body_from[first]);
        s->body_from[first] = strdup(body);
    }
    free(s->last_auth);
    s->last_auth = auth ? strdup(auth) : NULL;
    pthread_mutex_unlock(&s->mu);

    enum MHD_Result ok;
    if (!json_is_array(samples)) {
        ok = http_test_reply(c, 400, "{\"error\": \"no samples\"}");
    } else if (strcmp(url, "/always500") == 0 || (flaky == 1)) {
        ok = http_test_reply(c, 500, "upstream exploded");
    } else if (strcmp(url, "/400") == 0) {
        ok = http_test_reply(c, 400, "{\"error\": \"bad\"}");
    } else if (strcmp(url, "/slow") == 0) {
        for (int i = 0; i < STALL_MS / 10 && !atomic_load(&s->http.stopping); i++)
            sleep_ms(10);
        ok = http_test_reply(c, 200, "{\"scores\": []}");
    } else if (strcmp(url, "/malformed") == 0) {
        ok = http_test_reply(c, 200, "{\"scores\": [1, 2,");
    } else if (strcmp(url, "/noscores") == 0) {
        ok = http_test_reply(c, 200, "{\"result\": [1]}");
    } else if (strcmp(url, "/huge") == 0) {
        ok = http_test_reply_stream(c, MHD_SIZE_UNKNOWN, huge_reader);
    } else if (strcmp(url, "/partial") == 0 &&
               json_integer_value(json_object_get(json_array_get(samples, 0), "id")) == 3) {
        ok = http_test_reply(c, 503, "busy");
    } else {
        int extra = strcmp(url, "/short") == 0 ? -1 : strcmp(url, "/long") == 0 ? 1 : 0;
        char *scores = scores_for(samples, extra);
        ok = http_test_reply(c, 200, scores);
        free(scores);
    }
    json_decref(req);
    return ok;
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
    for (int i = 0; i < 16; i++)
        free(s->body_from[i]);
    free(s->last_auth);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int setup(void **state)
{
    *state = server_start();
    return 0;
}

static int teardown(void **state)
{
    server_stop(*state);
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------ */

static rlp_batch *make_batch(const char *const *completions, size_t n)
{
    rlp_batch *b = NULL;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    for (size_t i = 0; i < n; i++) {
        const int32_t toks[3] = {11, 12, 13};
        const float lps[3] = {-1, -1, -1};
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.group_id = 40 + i / 2;
        t.sample_index = (uint32_t)(i % 2);
        t.prompt_text = "What is 6 * 7?";
        t.completion_text = completions[i];
        t.completion_tokens = toks;
        t.logprobs = lps;
        t.n_completion_tokens = 3;
        t.policy_version = 5;
        t.finish_reason = RLP_FINISH_STOP;
        t.stop_index = -1;
        t.temperature = 1.0f;
        t.reward = NAN;
        t.valid = 1;
        t.metadata_json = "{\"reference\": \"42\", \"level\": 3}";
        assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
    }
    return b;
}

static rlp_reward_fn *verifier(const server *s, const char *path, uint32_t retries)
{
    char url[128];
    snprintf(url, sizeof url, "%s%s", s->http.base, path);
    rlp_http_reward_options o;
    assert_int_equal(rlp_http_reward_options_init(&o, RLP_HTTP_REWARD_OPTIONS_VERSION), RLP_OK);
    o.url = url;
    o.api_key = "sekrit";
    o.timeout_ms = TIMEOUT_MS;
    o.connect_timeout_ms = 500;
    o.max_retries = retries;
    o.backoff_ms = 10;
    o.batch_size = 3;
    o.max_response_bytes = LIMIT;
    o.send_tokens = 1;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_http(&fn, &o), RLP_OK);
    return fn;
}

static rlp_trajectory get(const rlp_batch *b, size_t i)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    return t;
}

static rlp_reward_stats score(rlp_reward_fn *fn, rlp_batch *b)
{
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    return st;
}

/* Every sample invalid with `why` in its reason. */
static void all_invalid(const rlp_batch *b, size_t n, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = get(b, i);
        assert_false(t.valid);
        if (!t.error || !strstr(t.error, why))
            fail_msg("sample %zu: reason \"%s\" lacks \"%s\"", i, t.error ? t.error : "(null)", why);
    }
}

static const char *const GOOD[8] = {"a", "bb", "ccc", "object", "null", "invalid", "dddd", "eeeee"};

/* ---- tests --------------------------------------------------------------------------- */

static void test_good_answers_and_request(void **state)
{
    server *s = *state;
    rlp_reward_fn *fn = verifier(s, "/ok", 0);
    assert_string_equal(rlp_reward_fn_name(fn), "http");
    rlp_batch *b = make_batch(GOOD, 8);
    rlp_reward_stats st = score(fn, b);
    assert_int_equal(s->hits, 3); /* 8 samples in batches of 3 */
    assert_int_equal(s->max_samples, 3);
    assert_int_equal(st.valid, 6);
    assert_int_equal(st.invalid, 2);
    assert_int_equal(st.errors, 0);
    const float want[8] = {1, 2, 3, 2.5f, NAN, NAN, 4, 5};
    for (size_t i = 0; i < 8; i++) {
        rlp_trajectory t = get(b, i);
        if (isnan(want[i])) {
            assert_false(t.valid);
            continue;
        }
        assert_true(t.valid);
        assert_float_equal(t.reward, want[i], 0.0f);
    }
    rlp_trajectory t = get(b, 3);
    assert_non_null(t.token_rewards);
    for (size_t k = 0; k < 3; k++)
        assert_float_equal(t.token_rewards[k], 0.25f * (float)(k + 1), 0.0f);
    assert_non_null(strstr(get(b, 4).error, "null"));
    assert_non_null(strstr(get(b, 5).error, "cannot verify"));

    /* the last request (samples 6, 7) as the server saw it */
    json_t *req = json_loads(s->body_from[6], 0, NULL);
    assert_non_null(req);
    assert_int_equal(json_integer_value(json_object_get(req, "version")), 1);
    json_t *s0 = json_array_get(json_object_get(req, "samples"), 0);
    assert_int_equal(json_array_size(json_object_get(req, "samples")), 2);
    assert_int_equal(json_integer_value(json_object_get(s0, "id")), 6);
    assert_string_equal(json_string_value(json_object_get(s0, "completion")), "dddd");
    assert_string_equal(json_string_value(json_object_get(s0, "prompt")), "What is 6 * 7?");
    assert_string_equal(json_string_value(json_object_get(s0, "reference")), "42");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(s0, "metadata"), "level")), 3);
    assert_int_equal(json_integer_value(json_object_get(s0, "group_id")), 43);
    assert_int_equal(json_integer_value(json_object_get(s0, "sample_index")), 0);
    assert_int_equal(json_integer_value(json_object_get(s0, "policy_version")), 5);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(s0, "completion_tokens"), 2)), 13);
    json_decref(req);
    assert_string_equal(s->last_auth, "Bearer sekrit");
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_invalid_utf8_is_sent_as_replacement(void **state)
{
    server *s = *state;
    rlp_reward_fn *fn = verifier(s, "/ok", 0);
    const char *c[1] = {"ab\xe2\x82"}; /* a character cut by the stop */
    rlp_batch *b = make_batch(c, 1);
    rlp_reward_stats st = score(fn, b);
    assert_int_equal(st.valid, 1);
    /* "ab" and one U+FFFD per invalid byte: 2 + 2 * 3 bytes */
    assert_float_equal(get(b, 0).reward, 8.0f, 0.0f);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_retry_then_success(void **state)
{
    server *s = *state;
    rlp_reward_fn *fn = verifier(s, "/flaky", 2);
    rlp_batch *b = make_batch(GOOD, 2);
    rlp_reward_stats st = score(fn, b);
    assert_int_equal(st.valid, 2);
    assert_int_equal(s->flaky_hits, 2);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_server_errors(void **state)
{
    server *s = *state;
    rlp_reward_fn *fn = verifier(s, "/always500", 2);
    rlp_batch *b = make_batch(GOOD, 4);
    rlp_reward_stats st = score(fn, b);
    assert_int_equal(st.errors, 4);
    assert_int_equal(s->hits, 2 * 3); /* two requests, three attempts each */
    all_invalid(b, 4, "HTTP 500 after 3 attempts");
    rlp_reward_fn_free(fn);

    s->hits = 0;
    fn = verifier(s, "/400", 2);
    st = score(fn, b);
    assert_int_equal(st.errors, 4);
    assert_int_equal(s->hits, 2); /* a client error is not retried */
    all_invalid(b, 4, "HTTP 400 after 1 attempt");
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_timeout(void **state)
{
    server *s = *state;
    rlp_reward_fn *fn = verifier(s, "/slow", 1);
    rlp_batch *b = make_batch(GOOD, 2);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rlp_reward_stats st = score(fn, b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(st.timeouts, 2);
    all_invalid(b, 2, "after 2 attempts");
    /* two attempts of TIMEOUT_MS, not the server's STALL_MS */
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    assert_true(ms < STALL_MS);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_bad_answers(void **state)
{
    server *s = *state;
    static const struct {
        const char *path, *why;
    } cases[] = {
        {"/malformed", "malformed response"},
        {"/noscores", "no \"scores\" array"},
        {"/short", "short response: 2 scores for 3 samples"},
        {"/long", "long response: 4 scores for 3 samples"},
        {"/huge", "response larger than 4096 bytes"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rlp_reward_fn *fn = verifier(s, cases[k].path, 0);
        rlp_batch *b = make_batch(GOOD, 3);
        rlp_reward_stats st = score(fn, b);
        assert_int_equal(st.errors, 3);
        assert_int_equal(st.valid, 0);
        all_invalid(b, 3, cases[k].why);
        rlp_batch_free(b);
        rlp_reward_fn_free(fn);
    }
    /* malformed entries fail alone */
    rlp_reward_fn *fn = verifier(s, "/ok", 0);
    const char *c[3] = {"bad entry", "xy", "bad tokens"};
    rlp_batch *b = make_batch(c, 3);
    rlp_reward_stats st = score(fn, b);
    assert_int_equal(st.errors, 2);
    assert_int_equal(st.valid, 1);
    assert_non_null(strstr(get(b, 0).error, "malformed score entry 0"));
    assert_non_null(strstr(get(b, 2).error, "token_scores must be 3 numbers"));
    assert_float_equal(get(b, 1).reward, 2.0f, 0.0f);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_one_failing_request_among_good_ones(void **state)
{
    server *s = *state;
    rlp_reward_fn *fn = verifier(s, "/partial", 1);
    rlp_batch *b = make_batch(GOOD, 8);
    rlp_reward_stats st = score(fn, b);
    /* requests [0,3) [3,6) [6,8): the middle one answers 503 */
    assert_int_equal(st.errors, 3);
    for (size_t i = 0; i < 8; i++) {
        rlp_trajectory t = get(b, i);
        if (i >= 3 && i < 6) {
            assert_false(t.valid);
            assert_non_null(strstr(t.error, "HTTP 503 after 2 attempts"));
        } else if (i != 4 && i != 5) {
            assert_true(t.valid);
        }
    }
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_connection_refused(void **state)
{
    (void)state;
    /* a port nobody listens on: bind, read the port, close */
    int fd;
    int port = http_test_dead_port(&fd);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/score", port);
    rlp_http_reward_options o = RLP_HTTP_REWARD_OPTIONS_INIT;
    o.url = url;
    o.max_retries = 1;
    o.backoff_ms = 5;
    o.timeout_ms = 1000;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_http(&fn, &o), RLP_OK);
    rlp_batch *b = make_batch(GOOD, 2);
    rlp_reward_stats st = score(fn, b);
    assert_int_equal(st.errors, 2);
    all_invalid(b, 2, "after 2 attempts");
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_good_answers_and_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_utf8_is_sent_as_replacement, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_then_success, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_failing_request_among_good_ones, setup, teardown),
        cmocka_unit_test(test_connection_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
