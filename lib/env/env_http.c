/* An environment served over HTTP (rlp_env_create_http): rlp_env_callbacks
 * whose reset/step/close POST JSON to {url}/reset, /step and /close with
 * libcurl, built on the public rlp_env_create() so that deadlines, worker
 * threads and observation cuts stay env.c's. Answers are untrusted: parsed
 * with a depth bound, every field checked for type (the reader has no I/O,
 * so it is also a fuzz target's entry); any failure fails that call with a
 * message naming the URL. Must not retry a request the server may have
 * received (a step runs a tool), follow redirects or raise signals. */
#include "env/env_http.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "core/json_text.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An episode id is a handle, not a payload. */
#define MAX_EPISODE_ID 1024

/* ---- answers -------------------------------------------------------------------- */

/* Adds the answer's observation ("observation" or "observation_pieces")
 * to the reply. *given says whether the answer had one. */
static int add_observation(rlp_env_reply *reply, json_t *a, const char *url, char *msg, size_t cap, int *given)
{
    json_t *obs = json_object_get(a, "observation"), *pieces = json_object_get(a, "observation_pieces");
    if (obs && json_is_null(obs))
        obs = NULL;
    if (pieces && json_is_null(pieces))
        pieces = NULL;
    *given = obs || pieces;
    if (obs && pieces) {
        snprintf(msg, cap, "%s: the answer has both \"observation\" and \"observation_pieces\"", url);
        return RLP_E_FORMAT;
    }
    if (obs) {
        if (!json_is_string(obs)) {
            snprintf(msg, cap, "%s: \"observation\" is not a string", url);
            return RLP_E_FORMAT;
        }
        return rlp_env_reply_add_text(reply, json_string_value(obs), json_string_length(obs), 0);
    }
    if (!pieces)
        return RLP_OK;
    if (!json_is_array(pieces)) {
        snprintf(msg, cap, "%s: \"observation_pieces\" is not an array", url);
        return RLP_E_FORMAT;
    }
    size_t i;
    json_t *p;
    json_array_foreach(pieces, i, p)
    {
        json_t *t = json_object_get(p, "text"), *sp = json_object_get(p, "special");
        if (!json_is_object(p) || !json_is_string(t) || (sp && !json_is_boolean(sp))) {
            snprintf(msg, cap, "%s: observation_pieces[%zu] is not {\"text\": string, \"special\": bool}", url, i);
            return RLP_E_FORMAT;
        }
        uint32_t flags = sp && json_is_true(sp) ? RLP_ENCODE_PARSE_SPECIAL : 0;
        int rc = rlp_env_reply_add_text(reply, json_string_value(t), json_string_length(t), flags);
        if (rc != RLP_OK)
            return rc;
    }
    return RLP_OK;
}

/* A reset answer: {"episode_id": string, "observation"...}. */
static int read_reset(rlp_env_reply *reply, json_t *a, const char *url, char **episode_id, char *msg, size_t cap)
{
    json_t *id = json_object_get(a, "episode_id");
    if (!json_is_string(id) || json_string_length(id) == 0 || json_string_length(id) > MAX_EPISODE_ID ||
        strlen(json_string_value(id)) != json_string_length(id)) {
        snprintf(msg, cap, "%s: the answer has no \"episode_id\" string (1 to %d bytes)", url, MAX_EPISODE_ID);
        return RLP_E_FORMAT;
    }
    if (!(*episode_id = strdup(json_string_value(id)))) {
        snprintf(msg, cap, "%s: out of memory", url);
        return RLP_E_NOMEM;
    }
    int given;
    return add_observation(reply, a, url, msg, cap, &given);
}

/* A step answer: {"observation", "reward", "done", "tool_call", "tool_error", "metadata"}. */
static int read_step(rlp_env_reply *reply, json_t *a, const char *url, char *msg, size_t cap)
{
    json_t *reward = json_object_get(a, "reward"), *done = json_object_get(a, "done"),
           *tool_call = json_object_get(a, "tool_call"), *tool_error = json_object_get(a, "tool_error"),
           *meta = json_object_get(a, "metadata");
    const char *field = NULL;
    if (reward && !json_is_null(reward) &&
        (!json_is_number(reward) || !isfinite(json_number_value(reward)) || fabs(json_number_value(reward)) > FLT_MAX))
        field = "\"reward\" is not a finite number";
    else if (done && !json_is_null(done) && !json_is_boolean(done))
        field = "\"done\" is not a boolean";
    else if (tool_call && !json_is_null(tool_call) && !json_is_boolean(tool_call))
        field = "\"tool_call\" is not a boolean";
    else if (tool_error && !json_is_null(tool_error) && !json_is_string(tool_error))
        field = "\"tool_error\" is not a string";
    else if (meta && !json_is_null(meta) && !json_is_object(meta))
        field = "\"metadata\" is not an object";
    if (field) {
        snprintf(msg, cap, "%s: %s", url, field);
        return RLP_E_FORMAT;
    }
    int is_done = done && json_is_true(done);
    int given = 0;
    int rc = add_observation(reply, a, url, msg, cap, &given);
    if (rc == RLP_OK && !given && !is_done) {
        snprintf(msg, cap, "%s: the answer has no \"observation\" (required unless \"done\" is true)", url);
        rc = RLP_E_FORMAT;
    }
    if (rc == RLP_OK && reward && json_is_number(reward))
        rc = rlp_env_reply_set_reward(reply, (float)json_number_value(reward));
    if (rc == RLP_OK && is_done)
        rc = rlp_env_reply_set_done(reply, 1);
    if (rc == RLP_OK && tool_call && json_is_boolean(tool_call))
        rc = rlp_env_reply_set_tool_call(reply, json_is_true(tool_call));
    if (rc == RLP_OK && meta && json_is_object(meta)) {
        char *m = json_dumps(meta, JSON_COMPACT);
        rc = m ? rlp_env_reply_set_metadata(reply, m) : RLP_E_NOMEM;
        free(m);
    }
    if (rc == RLP_OK && tool_error && json_is_string(tool_error))
        rc = rlp_env_reply_set_tool_error(reply, json_string_value(tool_error));
    return rc;
}

int rlpi_env_http_read_answer(rlp_env_reply *reply, int kind, const char *url, const char *body, size_t len,
                              char **episode_id, char *msg, size_t cap)
{
    msg[0] = 0;
    if (episode_id)
        *episode_id = NULL;
    json_t *a = NULL;
    int rc;
    if (rlpi_json_load_guarded(body ? body : "", len, RLPI_JSON_MAX_DEPTH, url, &a) != RLP_OK) {
        snprintf(msg, cap, "%s: the answer is not valid JSON (%s)", url, rlp_error_last());
        return RLP_E_FORMAT;
    }
    if (!json_is_object(a)) {
        snprintf(msg, cap, "%s: the answer is not a JSON object", url);
        rc = RLP_E_FORMAT;
    } else if (kind == RLPI_ENV_HTTP_RESET) {
        rc = read_reset(reply, a, url, episode_id, msg, cap);
    } else {
        rc = read_step(reply, a, url, msg, cap);
    }
    json_decref(a);
    if (rc != RLP_OK && !msg[0]) /* a reply setter refused: its message */
        snprintf(msg, cap, "%s: %s", url, rlp_error_last());
    return rc;
}

#ifdef RLPI_HAVE_CURL

#include "core/clock.h"
#include "core/http.h"

#include <curl/curl.h>
#include <pthread.h>
#include <strings.h>
#include <time.h>

#define CONNECT_TIMEOUT_MS 10000L
/* /close is bookkeeping: it never waits as long as a tool call may. */
#define CLOSE_TIMEOUT_MS 5000L
/* The library's deadline (env.c) decides a slow call; curl gives up a
 * little after it so that the abandoned thread ends soon. */
#define CURL_GRACE_MS 250L
/* Attempts of a request whose connection could not be made (the request
 * was never sent, so a retry cannot run a tool twice). */
#define CONNECT_ATTEMPTS 3
#define BACKOFF_MS 100L
/* Room in a response for everything but the observation (JSON keys,
 * metadata, tool_error). */
#define RESPONSE_SLACK ((size_t)64 << 10)
#define MSG 512

typedef struct http_env {
    char *url; /* base, without a trailing slash */
    char *url_reset, *url_step, *url_close;
    struct curl_slist *headers;
    long timeout_ms; /* curl's limit of reset/step; 0 = none */
    long connect_timeout_ms;
    size_t max_response;
    pthread_mutex_t mu; /* guards idle */
    CURL **idle;        /* (cap_idle) handles kept for their connections */
    size_t n_idle, cap_idle;
} http_env;

typedef struct http_episode {
    char *id;
} http_episode;

/* ---- transport ------------------------------------------------------------------ */

static CURL *take_handle(http_env *h)
{
    CURL *e = NULL;
    pthread_mutex_lock(&h->mu);
    if (h->n_idle)
        e = h->idle[--h->n_idle];
    pthread_mutex_unlock(&h->mu);
    return e ? e : curl_easy_init();
}

static void give_handle(http_env *h, CURL *e)
{
    pthread_mutex_lock(&h->mu);
    if (h->n_idle < h->cap_idle) {
        h->idle[h->n_idle++] = e;
        e = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    if (e)
        curl_easy_cleanup(e);
}

static size_t on_data(char *p, size_t size, size_t n, void *data)
{
    return rlpi_http_response_append(data, p, size * n);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* The printable start of a server's error body, for a message. */
static void body_excerpt(char *dst, size_t cap, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap && o < 120; i++)
        dst[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : ' ';
    dst[o] = 0;
}

/* POSTs body to url; on RLP_OK (a 2xx) *resp holds the answer's bytes
 * (the caller frees it with rlpi_http_response_free). Otherwise msg says
 * why (naming the URL) and the RLP_E_* code is returned. */
static int post(http_env *h, const char *url, const char *body, long timeout_ms, rlpi_http_response *out, char *msg)
{
    CURL *e = take_handle(h);
    if (!e) {
        snprintf(msg, MSG, "POST %s: out of memory", url);
        return RLP_E_NOMEM;
    }
    char errbuf[CURL_ERROR_SIZE];
    rlpi_http_response resp = {0};
    rlpi_http_post p = {.url = url,
                        .body = body,
                        .body_len = strlen(body),
                        .headers = h->headers,
                        .on_data = on_data,
                        .data = &resp,
                        .errbuf = errbuf,
                        .timeout_ms = timeout_ms ? timeout_ms + CURL_GRACE_MS : 0,
                        .connect_timeout_ms = h->connect_timeout_ms,
                        .max_response = h->max_response};
    if (timeout_ms && p.connect_timeout_ms > timeout_ms)
        p.connect_timeout_ms = timeout_ms;
    uint64_t start = rlpi_now_ns();
    CURLcode rc = CURLE_OK;
    int attempts = 0;
    long code = 0;
    for (;;) {
        errbuf[0] = 0;
        rlpi_http_response_reset(&resp, h->max_response);
        attempts++;
        if (rlpi_curl_post_setopts(e, &p) != 0) {
            rc = CURLE_FAILED_INIT;
            break;
        }
        rc = curl_easy_perform(e);
        if (rc != CURLE_COULDNT_CONNECT || attempts >= CONNECT_ATTEMPTS)
            break;
        long wait = BACKOFF_MS << (attempts - 1);
        uint64_t spent_ms = (rlpi_now_ns() - start) / 1000000u;
        if (timeout_ms && (long)spent_ms + wait >= timeout_ms)
            break;
        sleep_ms(wait);
    }
    if (rc == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    give_handle(h, e);

    int ret = RLP_OK;
    if (resp.nomem) {
        snprintf(msg, MSG, "POST %s: out of memory for the answer", url);
        ret = RLP_E_NOMEM;
    } else if (resp.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(msg, MSG, "POST %s: answer larger than %zu bytes (max_observation_bytes and 64 KiB of room)", url,
                 h->max_response);
        ret = RLP_E_OVERFLOW;
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(msg, MSG, "POST %s: no answer within %ld ms", url, timeout_ms);
        ret = RLP_E_TIMEOUT;
    } else if (rc != CURLE_OK) {
        snprintf(msg, MSG, "POST %s: %s (%d attempt%s)", url, errbuf[0] ? errbuf : curl_easy_strerror(rc), attempts,
                 attempts == 1 ? "" : "s");
        ret = RLP_E_NETWORK;
    } else if (code < 200 || code >= 300) {
        char ex[128];
        body_excerpt(ex, sizeof ex, resp.data, resp.len);
        snprintf(msg, MSG, "POST %s: HTTP %ld%s%s", url, code, ex[0] ? ": " : "", ex);
        ret = RLP_E_NETWORK;
    }
    if (ret == RLP_OK)
        *out = resp;
    else
        rlpi_http_response_free(&resp);
    return ret;
}

/* ---- bodies and answers --------------------------------------------------------- */

/* A JSON string of an action: a turn cut inside a character leaves
 * invalid UTF-8, which JSON cannot carry: those bytes become U+FFFD (a NUL
 * too: jansson refuses it without JSON_ALLOW_NUL). */
static json_t *json_text(const char *s, size_t n)
{
    return rlpi_json_string_lossy(s, n, true);
}

static char *dump(json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return s;
}

/* Fails a call: the message becomes the sample's reason. */
static int fail(rlp_env_reply *reply, int rc, const char *msg)
{
    rlp_env_reply_set_tool_error(reply, msg);
    return rc ? rc : RLP_E_CALLBACK;
}

static void post_close(http_env *h, const char *id)
{
    json_t *b = json_object();
    if (b && json_object_set_new(b, "episode_id", json_string(id)) != 0) {
        json_decref(b);
        return;
    }
    char *body = dump(b);
    if (!body)
        return;
    char msg[MSG];
    rlpi_http_response resp = {0};
    long t = h->timeout_ms && h->timeout_ms < CLOSE_TIMEOUT_MS ? h->timeout_ms : CLOSE_TIMEOUT_MS;
    if (post(h, h->url_close, body, t, &resp, msg) == RLP_OK) /* the episode is over either way */
        rlpi_http_response_free(&resp);
    free(body);
}

/* ---- the callbacks -------------------------------------------------------------- */

static int http_reset(void **episode, rlp_env_reply *reply, const char *metadata_json, void *user)
{
    http_env *h = user;
    char msg[MSG] = "";
    json_t *meta = json_null();
    if (metadata_json) {
        json_error_t je;
        meta = json_loads(metadata_json, JSON_DECODE_ANY, &je);
        if (!meta) {
            snprintf(msg, MSG, "%s: the prompt's metadata is not JSON (%s)", h->url_reset, je.text);
            return fail(reply, RLP_E_FORMAT, msg);
        }
    }
    json_t *b = json_object();
    if (!b || json_object_set_new(b, "metadata", meta) != 0) {
        json_decref(b);
        return fail(reply, RLP_E_NOMEM, "out of memory");
    }
    char *body = dump(b);
    if (!body)
        return fail(reply, RLP_E_NOMEM, "out of memory");
    rlpi_http_response resp = {0};
    int rc = post(h, h->url_reset, body, h->timeout_ms, &resp, msg);
    free(body);
    if (rc != RLP_OK)
        return fail(reply, rc, msg);
    char *id = NULL;
    rc = rlpi_env_http_read_answer(reply, RLPI_ENV_HTTP_RESET, h->url_reset, resp.data, resp.len, &id, msg, MSG);
    rlpi_http_response_free(&resp);
    http_episode *ep = rc == RLP_OK ? calloc(1, sizeof *ep) : NULL;
    if (rc == RLP_OK && !ep) {
        snprintf(msg, MSG, "%s: out of memory", h->url_reset);
        rc = RLP_E_NOMEM;
    }
    if (rc != RLP_OK) {
        if (id) /* the server has opened an episode that nobody will step */
            post_close(h, id);
        free(id);
        return fail(reply, rc, msg);
    }
    ep->id = id;
    *episode = ep;
    return RLP_OK;
}

static int http_step(rlp_env_reply *reply, void *episode, const char *action, size_t action_len,
                     const int32_t *action_ids, size_t n_action_ids, void *user)
{
    http_env *h = user;
    http_episode *ep = episode;
    char msg[MSG] = "";
    if (!ep)
        return fail(reply, RLP_E_STATE, "step of an HTTP episode whose reset did not succeed");
    json_t *b = json_object(), *ids = json_array();
    int bad = !b || !ids;
    for (size_t i = 0; !bad && i < n_action_ids; i++)
        bad = json_array_append_new(ids, json_integer(action_ids[i])) != 0;
    bad = bad || json_object_set_new(b, "episode_id", json_string(ep->id)) != 0;
    bad = bad || json_object_set_new(b, "action", json_text(action ? action : "", action ? action_len : 0)) != 0;
    bad = bad || json_object_set(b, "action_ids", ids) != 0;
    json_decref(ids);
    char *body = bad ? (json_decref(b), NULL) : dump(b);
    if (!body)
        return fail(reply, RLP_E_NOMEM, "out of memory");
    rlpi_http_response resp = {0};
    int rc = post(h, h->url_step, body, h->timeout_ms, &resp, msg);
    free(body);
    if (rc != RLP_OK)
        return fail(reply, rc, msg);
    rc = rlpi_env_http_read_answer(reply, RLPI_ENV_HTTP_STEP, h->url_step, resp.data, resp.len, NULL, msg, MSG);
    rlpi_http_response_free(&resp);
    return rc == RLP_OK ? RLP_OK : fail(reply, rc, msg);
}

static void http_close(void *episode, void *user)
{
    http_episode *ep = episode;
    if (!ep)
        return;
    post_close(user, ep->id);
    free(ep->id);
    free(ep);
}

static void http_free(void *user)
{
    http_env *h = user;
    if (!h)
        return;
    for (size_t i = 0; i < h->n_idle; i++)
        curl_easy_cleanup(h->idle[i]);
    free(h->idle);
    pthread_mutex_destroy(&h->mu);
    curl_slist_free_all(h->headers);
    free(h->url);
    free(h->url_reset);
    free(h->url_step);
    free(h->url_close);
    free(h);
}

/* ---- creation ------------------------------------------------------------------- */

static int has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

static char *join(const char *base, const char *path)
{
    size_t n = strlen(base) + strlen(path) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", base, path);
    return s;
}

static int add_header(struct curl_slist **l, const char *h)
{
    struct curl_slist *n = curl_slist_append(*l, h);
    if (n)
        *l = n;
    return n != NULL;
}

int rlp_env_create_http(rlp_env **out, const char *url, const char *api_key, const rlp_env_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(url, "url is NULL");
    if (!(strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0) || has_ctl(url))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "rlp_env_create_http: url \"%.200s\" is not an http:// or "
                              "https:// URL",
                              url);
    if (api_key && (!*api_key || has_ctl(api_key)))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_env_create_http: api_key is empty or has control characters");
    rlp_env_options o = RLP_ENV_OPTIONS_INIT;
    if (opts) {
        RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_ENV_OPTIONS_VERSION,
                       "opts->version is not a known RLP_ENV_OPTIONS_VERSION");
        o = *opts;
    }
    if (rlpi_curl_global_init() != RLP_OK)
        return rlpi_error_wrap("rlp_env_create_http");
    http_env *h = calloc(1, sizeof *h);
    if (!h)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_env_create_http: out of memory");
    if (pthread_mutex_init(&h->mu, NULL) != 0) {
        free(h);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_env_create_http: cannot create a mutex");
    }
    h->timeout_ms = (long)o.timeout_ms;
    h->connect_timeout_ms = CONNECT_TIMEOUT_MS;
    /* JSON may escape every byte of the observation as \u00XX (6 bytes) */
    uint64_t cap = o.max_observation_bytes > ((uint64_t)1 << 40) ? ((uint64_t)1 << 40) : o.max_observation_bytes;
    h->max_response = (size_t)(cap * 6) + RESPONSE_SLACK;
    h->cap_idle = o.max_threads ? o.max_threads : 8;
    int ok = (h->url = strdup(url)) != NULL && (h->idle = calloc(h->cap_idle, sizeof *h->idle)) != NULL;
    if (ok) {
        size_t n = strlen(h->url);
        while (n > 0 && h->url[n - 1] == '/')
            h->url[--n] = 0;
        ok = (h->url_reset = join(h->url, "/reset")) && (h->url_step = join(h->url, "/step")) &&
            (h->url_close = join(h->url, "/close"));
    }
    ok = ok && add_header(&h->headers, "Content-Type: application/json") &&
        add_header(&h->headers, "Accept: application/json") && add_header(&h->headers, "Expect:");
    if (ok && api_key) {
        char *auth = join("Authorization: Bearer ", api_key);
        ok = auth && add_header(&h->headers, auth);
        free(auth);
    }
    if (!ok) {
        http_free(h);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_env_create_http: out of memory");
    }
    rlp_env_callbacks cb = {RLP_ENV_CALLBACKS_VERSION, http_reset, http_step, http_close, http_free};
    rlp_env *env = NULL;
    char name[256];
    snprintf(name, sizeof name, "http:%.240s", h->url);
    int rc = rlp_env_create(&env, name, &cb, h, opts);
    if (rc != RLP_OK) {
        http_free(h);
        return rlpi_error_wrap("rlp_env_create_http");
    }
    *out = env;
    return RLP_OK;
}

#else /* no libcurl */

int rlp_env_create_http(rlp_env **out, const char *url, const char *api_key, const rlp_env_options *opts)
{
    (void)out, (void)url, (void)api_key, (void)opts;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_env_create_http: this librlpost was built without libcurl");
}

#endif
