/* /v1/completions requests through the shared HTTP queue (core/http_queue):
 * every request of a call in flight at once (up to max_in_flight) on the
 * calling thread, each with its own timeouts, retries to the next URL, size
 * limit and error. Builds request bodies and turns each transfer's end into
 * a result; parsing the answer is remote_parse.c's job. */
#include "rollout/remote_client.h"

#include "core/clock.h"
#include "core/http.h"
#include "core/http_queue.h"

#include "core/error.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_TIMEOUT_MS 600000u
#define DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define DEFAULT_BACKOFF_MS 200u
#define DEFAULT_MAX_RESPONSE ((size_t)64 << 20)
#define DEFAULT_MAX_IN_FLIGHT 64u
/* Longest wait between retries however many there are: a server that is
 * down for minutes should be probed, not waited out for hours. */
#define MAX_BACKOFF_MS 30000u
/* Bytes of an error response body quoted in the message. */
#define BODY_QUOTE 200
/* Longest wait in one curl_multi_poll (curl shortens it to its own timers). */
#define POLL_MS 1000

/* One server ever in the set: its URLs and counters (id = its index in
 * the pool's `known`, stable while the pool lives). */
typedef struct server_rec {
    char *base;     /* as given */
    char *endpoint; /* ".../v1/completions" */
    rlp_server_stats st;
} server_rec;

/* The set of servers, shared by a client and its clones (refcounted):
 * rlpi_remote_client_set_urls() may change it from another thread while
 * requests pick from it. */
typedef struct url_pool {
    pthread_mutex_t mu;
    int refs;
    server_rec *known; /* (n_known) every server ever in the set */
    size_t n_known, cap_known;
    size_t *cur; /* (n_cur) ids in `known`: the current set */
    size_t n_cur;
    size_t cursor; /* round-robin over cur, shared by the clones */
    uint64_t (*version_fn)(void *);
    void *version_arg;
} url_pool;

struct rlpi_remote_client {
    url_pool *pool;
    char *model;
    struct curl_slist *headers; /* content type, bearer token, no Expect: 100-continue */
    uint32_t timeout_ms, connect_timeout_ms, max_retries, backoff_ms, max_in_flight;
    size_t max_response_bytes;
    rlpi_http_queue *queue; /* kept across calls: its connection cache reuses sockets */
};

/* ---- small helpers ------------------------------------------------------ */


static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* malloc'd printf; NULL when out of memory. */
static char *fmt_alloc(const char *fmt, ...) RLPI_PRINTF(1, 2);
static char *fmt_alloc(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* A float as the double with the fewest significant digits that reads
 * back as the same float, so 0.7f goes out as 0.7, not 0.699999988. */
static double short_double(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f)
            return d;
    }
    return (double)f;
}

/* ---- client ------------------------------------------------------------- */

/* base "http://h:p", "http://h:p/" or "http://h:p/v1" -> ".../v1/completions" */
static char *endpoint_url(const char *base)
{
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    int has_v1 = n >= 3 && memcmp(base + n - 3, "/v1", 3) == 0;
    return fmt_alloc("%.*s%s", (int)n, base, has_v1 ? "/completions" : "/v1/completions");
}

static int has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

/* ---- the set of servers ------------------------------------------------ */

/* RLP_OK, or RLP_E_INVALID_ARG naming the first URL at fault. */
static int check_urls(const char *const *urls, size_t n)
{
    RLPI_CHECK_ARG(urls || n == 0, "base_urls is NULL");
    for (size_t i = 0; i < n; i++) {
        const char *u = urls[i];
        if (!u || !(strncasecmp(u, "http://", 7) == 0 || strncasecmp(u, "https://", 8) == 0) || has_ctl(u))
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "remote client: base_urls[%zu] \"%s\" is not an http:// or "
                                  "https:// URL",
                                  i, u ? u : "(null)");
        if (strlen(u) >= RLP_SERVER_URL_MAX)
            return rlpi_error_set(RLP_E_INVALID_ARG, "remote client: base_urls[%zu] is %zu bytes long, more than %d", i,
                                  strlen(u), RLP_SERVER_URL_MAX - 1);
    }
    return RLP_OK;
}

static url_pool *pool_new(void)
{
    url_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->refs = 1;
    return p;
}

static void pool_unref(url_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last)
        return;
    for (size_t i = 0; i < p->n_known; i++) {
        free(p->known[i].base);
        free(p->known[i].endpoint);
    }
    free(p->known);
    free(p->cur);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The id of `base` in known, added when new (under mu); -1 out of memory. */
static long pool_id(url_pool *p, const char *base)
{
    for (size_t i = 0; i < p->n_known; i++)
        if (!strcmp(p->known[i].base, base))
            return (long)i;
    if (p->n_known == p->cap_known) {
        size_t cap = p->cap_known ? 2 * p->cap_known : 8;
        server_rec *k = realloc(p->known, cap * sizeof *k);
        if (!k)
            return -1;
        p->known = k;
        p->cap_known = cap;
    }
    server_rec *r = &p->known[p->n_known];
    memset(r, 0, sizeof *r);
    r->base = dup_str(base);
    r->endpoint = endpoint_url(base);
    if (!r->base || !r->endpoint) {
        free(r->base);
        free(r->endpoint);
        return -1;
    }
    r->st.version = RLP_SERVER_STATS_VERSION;
    snprintf(r->st.url, sizeof r->st.url, "%s", base);
    r->st.last_weight_version = -1;
    return (long)p->n_known++;
}

/* Replaces the current set (URLs already checked). */
static int pool_set(url_pool *p, const char *const *urls, size_t n)
{
    size_t *cur = n ? malloc(n * sizeof *cur) : NULL;
    if (n && !cur)
        return rlpi_error_set(RLP_E_NOMEM, "remote client: out of memory");
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < n; i++) {
        long id = pool_id(p, urls[i]);
        if (id < 0) {
            pthread_mutex_unlock(&p->mu);
            free(cur);
            return rlpi_error_set(RLP_E_NOMEM, "remote client: out of memory");
        }
        cur[i] = (size_t)id;
    }
    for (size_t i = 0; i < p->n_known; i++)
        p->known[i].st.in_set = 0;
    for (size_t i = 0; i < n; i++)
        p->known[cur[i]].st.in_set = 1;
    free(p->cur);
    p->cur = cur;
    p->n_cur = n;
    pthread_mutex_unlock(&p->mu);
    return RLP_OK;
}

/* Copies of the current endpoints (malloc'd array of malloc'd strings). */
static char **pool_snapshot(url_pool *p, size_t *n)
{
    pthread_mutex_lock(&p->mu);
    size_t k = 0;
    char **v = p->n_cur ? calloc(p->n_cur, sizeof *v) : NULL;
    for (size_t i = 0; v && i < p->n_cur; i++)
        if ((v[k] = dup_str(p->known[p->cur[i]].endpoint)))
            k++;
    pthread_mutex_unlock(&p->mu);
    *n = k;
    return v;
}

/* The queue's pick hook: a retry goes to the server after the one that
 * failed (when it is still in the set), a first attempt to the next one of
 * the shared round-robin. */
static int pool_pick(void *arg, const rlpi_http_req *r, char **url, size_t *id)
{
    url_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    if (!p->n_cur) {
        pthread_mutex_unlock(&p->mu);
        return 1;
    }
    size_t pos = p->n_cur;
    if (r->picked)
        for (size_t i = 0; i < p->n_cur && pos == p->n_cur; i++)
            if (p->cur[i] == r->picked_id)
                pos = (i + 1) % p->n_cur;
    if (pos == p->n_cur)
        pos = p->cursor++ % p->n_cur;
    *id = p->cur[pos];
    *url = dup_str(p->known[*id].endpoint);
    pthread_mutex_unlock(&p->mu);
    return *url ? 0 : -1;
}

int rlpi_remote_client_set_urls(rlpi_remote_client *c, const char *const *base_urls, size_t n_urls)
{
    RLPI_CHECK_ARG(c, "client is NULL");
    int rc = check_urls(base_urls, n_urls);
    return rc ? rc : pool_set(c->pool, base_urls, n_urls);
}

void rlpi_remote_client_set_version_source(rlpi_remote_client *c, uint64_t (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&c->pool->mu);
    c->pool->version_fn = fn;
    c->pool->version_arg = arg;
    pthread_mutex_unlock(&c->pool->mu);
}

size_t rlpi_remote_client_server_stats(const rlpi_remote_client *c, rlp_server_stats *out, size_t cap)
{
    url_pool *p = c->pool;
    pthread_mutex_lock(&p->mu);
    size_t n = p->n_known;
    for (size_t i = 0; out && i < n && i < cap; i++)
        out[i] = p->known[i].st;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Counts one request's end at the server of its last attempt. */
static void pool_count(url_pool *p, const rlpi_http_req *x, const rlpi_remote_result *res)
{
    if (!x->picked)
        return; /* never reached a server */
    uint64_t (*fn)(void *);
    void *arg;
    pthread_mutex_lock(&p->mu);
    fn = p->version_fn;
    arg = p->version_arg;
    pthread_mutex_unlock(&p->mu);
    uint64_t now_v = fn && res->status == RLP_OK && res->weight_version >= 0 ? fn(arg) : 0;
    pthread_mutex_lock(&p->mu);
    rlp_server_stats *st = &p->known[x->picked_id].st;
    if (res->status != RLP_OK) {
        st->requests_failed++;
    } else {
        st->requests_ok++;
        st->completions += res->n_choices;
        for (size_t i = 0; i < res->n_choices; i++)
            st->completion_tokens += res->choices[i].n_tokens;
        if (res->weight_version >= 0) {
            uint64_t wv = (uint64_t)res->weight_version;
            uint64_t stale = fn && now_v > wv ? now_v - wv : 0;
            st->last_weight_version = res->weight_version;
            st->versioned++;
            st->staleness_sum += stale;
            if (stale > st->staleness_max)
                st->staleness_max = stale;
        }
    }
    pthread_mutex_unlock(&p->mu);
}

int rlpi_remote_client_create(rlpi_remote_client **out, const rlpi_remote_config *cfg)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    RLPI_CHECK_ARG(cfg, "cfg is NULL");
    int rc = check_urls(cfg->base_urls, cfg->n_urls);
    if (rc)
        return rc;
    if (cfg->api_key && (has_ctl(cfg->api_key) || !*cfg->api_key))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "remote client: api_key is empty or has control characters");
    if (cfg->model) {
        json_t *probe = json_string(cfg->model);
        if (!probe)
            return rlpi_error_set(RLP_E_INVALID_ARG, "remote client: model is not valid UTF-8");
        json_decref(probe);
    }

    if (rlpi_curl_global_init() != RLP_OK)
        return rlpi_error_wrap("remote client");

    rlpi_remote_client *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "remote client: out of memory");
    c->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    c->max_retries = cfg->max_retries;
    c->backoff_ms = cfg->backoff_ms ? cfg->backoff_ms : DEFAULT_BACKOFF_MS;
    c->max_response_bytes = cfg->max_response_bytes ? cfg->max_response_bytes : DEFAULT_MAX_RESPONSE;
    c->max_in_flight = cfg->max_in_flight ? cfg->max_in_flight : DEFAULT_MAX_IN_FLIGHT;

    int ok = (c->pool = pool_new()) != NULL && pool_set(c->pool, cfg->base_urls, cfg->n_urls) == RLP_OK;
    if (ok && cfg->model)
        ok = (c->model = dup_str(cfg->model)) != NULL;

    const char *fixed[] = {"Content-Type: application/json", "Accept: application/json", "Expect:"};
    for (size_t i = 0; ok && i < sizeof fixed / sizeof *fixed; i++) {
        struct curl_slist *h = curl_slist_append(c->headers, fixed[i]);
        ok = h != NULL;
        if (h)
            c->headers = h;
    }
    if (ok && cfg->api_key) {
        char *auth = fmt_alloc("Authorization: Bearer %s", cfg->api_key);
        struct curl_slist *h = auth ? curl_slist_append(c->headers, auth) : NULL;
        free(auth); /* curl_slist_append copies */
        ok = h != NULL;
        if (h)
            c->headers = h;
    }
    /* keep a connection per transfer for reuse by the next call */
    rlpi_http_queue_opts qo = {.max_in_flight = c->max_in_flight, .max_connects = 4 * (long)c->max_in_flight,
                               .backoff_ms = c->backoff_ms, .max_backoff_ms = MAX_BACKOFF_MS, .jitter = 1,
                               .poll_ms = POLL_MS};
    if (ok)
        ok = rlpi_http_queue_create(&c->queue, &qo) == RLP_OK;
    if (!ok) {
        rlpi_remote_client_free(c);
        return rlpi_error_set(RLP_E_NOMEM, "remote client: out of memory");
    }
    *out = c;
    return RLP_OK;
}

void rlpi_remote_client_free(rlpi_remote_client *c)
{
    if (!c)
        return;
    rlpi_http_queue_free(c->queue);
    curl_slist_free_all(c->headers);
    pool_unref(c->pool);
    free(c->model);
    free(c);
}

int rlpi_remote_client_clone(rlpi_remote_client **out, const rlpi_remote_client *c, size_t first_url)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    RLPI_CHECK_ARG(c, "client is NULL");
    (void)first_url; /* the clones share one round-robin cursor */
    rlpi_remote_client *d = calloc(1, sizeof *d);
    if (!d)
        return rlpi_error_set(RLP_E_NOMEM, "remote client: out of memory");
    pthread_mutex_lock(&c->pool->mu);
    c->pool->refs++;
    pthread_mutex_unlock(&c->pool->mu);
    d->pool = c->pool;
    d->timeout_ms = c->timeout_ms;
    d->connect_timeout_ms = c->connect_timeout_ms;
    d->max_retries = c->max_retries;
    d->backoff_ms = c->backoff_ms;
    d->max_response_bytes = c->max_response_bytes;
    d->max_in_flight = c->max_in_flight;
    int ok = 1;
    if (c->model)
        ok = (d->model = dup_str(c->model)) != NULL;
    for (const struct curl_slist *h = c->headers; ok && h; h = h->next) {
        struct curl_slist *n = curl_slist_append(d->headers, h->data);
        ok = n != NULL;
        if (n)
            d->headers = n;
    }
    rlpi_http_queue_opts qo = {.max_in_flight = d->max_in_flight, .max_connects = 4 * (long)d->max_in_flight,
                               .backoff_ms = d->backoff_ms, .max_backoff_ms = MAX_BACKOFF_MS, .jitter = 1,
                               .poll_ms = POLL_MS};
    if (ok)
        ok = rlpi_http_queue_create(&d->queue, &qo) == RLP_OK;
    if (!ok) {
        rlpi_remote_client_free(d);
        return rlpi_error_set(RLP_E_NOMEM, "remote client: out of memory");
    }
    *out = d;
    return RLP_OK;
}

/* ---- server facts ------------------------------------------------------- */

/* Longest wait for a /v1/models answer: a fact worth having, not worth a stall. */
#define MODELS_TIMEOUT_MS 10000L
#define MODELS_MAX_BYTES ((size_t)1 << 20)

static size_t on_models_data(char *p, size_t sz, size_t nm, void *ud)
{
    return rlpi_http_response_append(ud, p, sz * nm);
}

/* max_model_len of the served model (the entry named `model`, else the first that has one); 0 if none. */
static uint64_t models_context(const char *body, size_t len, const char *model)
{
    json_t *root = body ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *data = json_object_get(root, "data");
    uint64_t first = 0, named = 0;
    for (size_t i = 0; json_is_array(data) && i < json_array_size(data) && !named; i++) {
        json_t *m = json_array_get(data, i), *id = json_object_get(m, "id");
        json_t *v = json_object_get(m, "max_model_len");
        if (!json_is_integer(v) || json_integer_value(v) <= 0)
            continue;
        if (!first)
            first = (uint64_t)json_integer_value(v);
        if (model && json_is_string(id) && !strcmp(json_string_value(id), model))
            named = (uint64_t)json_integer_value(v);
    }
    json_decref(root);
    return named ? named : first;
}

uint64_t rlpi_remote_client_context(const rlpi_remote_client *c)
{
    uint64_t best = 0;
    size_t n_urls = 0;
    char **urls = c ? pool_snapshot(c->pool, &n_urls) : NULL;
    for (size_t i = 0; urls && i < n_urls; i++) {
        const char *u = urls[i]; /* ".../v1/completions" */
        size_t n = strlen(u), tail = strlen("completions");
        char *url = n > tail ? fmt_alloc("%.*smodels", (int)(n - tail), u) : NULL;
        CURL *e = url ? curl_easy_init() : NULL;
        rlpi_http_response body = {0};
        char errbuf[CURL_ERROR_SIZE] = "";
        rlpi_http_response_reset(&body, MODELS_MAX_BYTES);
        long timeout = (long)c->timeout_ms < MODELS_TIMEOUT_MS ? (long)c->timeout_ms : MODELS_TIMEOUT_MS;
        rlpi_http_post req = {.url = url, .body = "", .headers = c->headers, .on_data = on_models_data,
                              .data = &body, .errbuf = errbuf, .timeout_ms = timeout,
                              .connect_timeout_ms = (long)c->connect_timeout_ms, .max_response = MODELS_MAX_BYTES};
        long code = 0;
        /* the POST's safety options, then turned into a GET */
        if (e && !rlpi_curl_post_setopts(e, &req) && curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) == CURLE_OK &&
            curl_easy_perform(e) == CURLE_OK && curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK &&
            code == 200) {
            uint64_t v = models_context(body.data, body.len, c->model);
            if (v && (!best || v < best))
                best = v;
        }
        rlpi_http_response_free(&body);
        if (e)
            curl_easy_cleanup(e);
        free(url);
    }
    for (size_t i = 0; urls && i < n_urls; i++)
        free(urls[i]);
    free(urls);
    return best;
}

/* ---- request body ------------------------------------------------------- */

static int put(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

/* Checks one request; NULL if fine, else a static reason. */
static const char *request_problem(const rlpi_remote_request *r)
{
    if (r->n_prompt == 0 || !r->prompt)
        return "empty prompt";
    for (size_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0)
            return "negative prompt token id";
    if (r->n == 0)
        return "n is 0";
    if (!isfinite(r->temperature) || !isfinite(r->top_p) || !isfinite(r->min_p))
        return "temperature, top_p or min_p is not finite";
    if (r->has_seed && r->seed > (uint64_t)INT64_MAX)
        return "seed does not fit in a JSON int64 (vLLM takes a signed 64-bit seed)";
    if (r->n_stop && !r->stop)
        return "stop is NULL with n_stop > 0";
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i])
            return "a stop string is NULL";
    if (r->n_stop_ids && !r->stop_ids)
        return "stop_ids is NULL with n_stop_ids > 0";
    for (size_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] < 0)
            return "negative stop token id";
    return NULL;
}

/* The /v1/completions body. Beyond OpenAI's fields: top_k, min_p,
 * stop_token_ids, include_stop_str_in_output, skip_special_tokens,
 * return_tokens_as_token_ids and return_token_ids are vLLM's (SGLang and
 * llama.cpp read the sampling ones, ignore the rest). logprobs: 1, not 0:
 * llama.cpp returns no probabilities at all for 0, and 1 still costs
 * only one alternative per token. */
static char *build_body(const rlpi_remote_client *c, const rlpi_remote_request *r, size_t *len)
{
    json_t *o = json_object();
    json_t *prompt = json_array();
    int bad = !o || !prompt;
    for (size_t i = 0; !bad && i < r->n_prompt; i++)
        bad = json_array_append_new(prompt, json_integer(r->prompt[i])) != 0;
    if (!bad && c->model)
        bad = put(o, "model", json_string(c->model));
    if (bad)
        json_decref(prompt); /* put() takes the reference, even when it fails */
    else
        bad = put(o, "prompt", prompt);
    bad = bad || put(o, "n", json_integer(r->n));
    bad = bad || put(o, "max_tokens", json_integer(r->max_tokens));
    bad = bad || put(o, "temperature", json_real(short_double(r->temperature)));
    bad = bad || put(o, "top_p", json_real(short_double(r->top_p)));
    bad = bad || put(o, "top_k", json_integer(r->top_k > 0 ? r->top_k : -1));
    bad = bad || put(o, "min_p", json_real(short_double(r->min_p)));
    if (!bad && r->has_seed)
        bad = put(o, "seed", json_integer((json_int_t)r->seed));
    if (!bad && r->n_stop) {
        json_t *stop = json_array();
        bad = put(o, "stop", stop);
        for (size_t i = 0; !bad && i < r->n_stop; i++)
            bad = json_array_append_new(stop, json_string(r->stop[i])) != 0;
    }
    if (!bad && r->n_stop_ids) {
        json_t *ids = json_array();
        bad = put(o, "stop_token_ids", ids);
        for (size_t i = 0; !bad && i < r->n_stop_ids; i++)
            bad = json_array_append_new(ids, json_integer(r->stop_ids[i])) != 0;
    }
    bad = bad || put(o, "include_stop_str_in_output", json_boolean(r->include_stop_str));
    if (!bad && r->min_version)
        bad = put(o, "min_weight_version", json_integer((json_int_t)r->min_version));
    bad = bad || put(o, "logprobs", json_integer(1));
    bad = bad || put(o, "echo", json_false());
    bad = bad || put(o, "stream", json_false());
    bad = bad || put(o, "skip_special_tokens", json_false());
    bad = bad || put(o, "return_tokens_as_token_ids", json_true());
    bad = bad || put(o, "return_token_ids", json_true());
    char *s = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (s)
        *len = strlen(s);
    return s;
}

/* ---- transfers ---------------------------------------------------------- */

/* First bytes of a body, one printable line. */
static void quote_body(const rlpi_http_response *rb, char *dst, size_t cap)
{
    size_t n = rb->len < cap - 1 ? rb->len : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)rb->data[i];
        dst[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : (ch == '\n' || ch == '\r' || ch == '\t') ? ' ' : '?';
    }
    dst[n] = '\0';
    if (n == 0)
        snprintf(dst, cap, "(empty body)");
}

/* Sets `res` to `status` and `msg` (taken); returns 0. */
static int finish(rlpi_remote_result *res, int status, char *msg)
{
    res->status = status;
    free(res->error);
    res->error = msg;
    if (status != RLP_OK && !msg)
        res->status = RLP_E_NOMEM; /* could not even say why */
    return 0;
}

/* The result of a request whose last attempt ran (RLPI_HQ_DONE). */
static int request_done(const rlpi_remote_client *c, const rlpi_http_req *x, uint32_t n_expected,
                         rlpi_remote_result *res)
{
    const char *url = x->picked ? x->picked : "(no server)";
    long code = x->http_code;
    CURLcode rc = x->curl_rc;
    uint32_t att = x->attempts;
    const char *s = att == 1 ? "" : "s";

    if (x->resp.nomem)
        return finish(res, RLP_E_NOMEM, fmt_alloc("POST %s: out of memory for the response", url));
    if (x->resp.overflow || rc == CURLE_FILESIZE_EXCEEDED)
        return finish(res, RLP_E_OVERFLOW,
                      fmt_alloc("POST %s: HTTP %ld: response larger than the limit of %zu bytes "
                                "(max_response_bytes)",
                                url, code, c->max_response_bytes));
    if (rc == CURLE_PARTIAL_FILE)
        return finish(res, RLP_E_FORMAT,
                      fmt_alloc("POST %s: HTTP %ld after %u attempt%s: body truncated, connection "
                                "closed after %zu of %lld bytes",
                                url, code, att, s, x->resp.len, (long long)x->declared));
    if (rc != CURLE_OK) {
        const char *why = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
        int st = rc == CURLE_OPERATION_TIMEDOUT ? RLP_E_TIMEOUT : RLP_E_NETWORK;
        if (code)
            return finish(res, st, fmt_alloc("POST %s: HTTP %ld after %u attempt%s: %s", url, code, att, s, why));
        return finish(res, st, fmt_alloc("POST %s: %s after %u attempt%s", url, why, att, s));
    }
    if (code < 200 || code >= 300) {
        char quote[BODY_QUOTE + 1];
        quote_body(&x->resp, quote, sizeof quote);
        return finish(res, RLP_E_NETWORK,
                      fmt_alloc("POST %s: HTTP %ld after %u attempt%s: %s", url, code, att, s, quote));
    }
    int st = rlpi_remote_parse_completion(x->resp.data, x->resp.len, n_expected, res);
    return finish(res, st,
                  st ? fmt_alloc("POST %s: HTTP %ld after %u attempt%s: %s", url, code, att, s, rlp_error_last())
                     : NULL);
}

int rlpi_remote_client_complete(rlpi_remote_client *c, const rlpi_remote_request *reqs, size_t n,
                                rlpi_remote_result *results)
{
    RLPI_CHECK_ARG(c, "client is NULL");
    RLPI_CHECK_ARG(n == 0 || (reqs && results), "reqs or results is NULL");
    for (size_t i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof results[i]);
        results[i].weight_version = -1;
    }
    if (n == 0)
        return RLP_OK;
    rlpi_http_req *xs = calloc(n, sizeof *xs);
    size_t *req_of = calloc(n, sizeof *req_of); /* xs[k] is request req_of[k] */
    if (!xs || !req_of) {
        free(xs);
        free(req_of);
        return rlpi_error_set(RLP_E_NOMEM, "remote client: out of memory for %zu requests", n);
    }
    size_t nx = 0;
    for (size_t i = 0; i < n; i++) {
        const char *problem = request_problem(&reqs[i]);
        if (problem) {
            finish(&results[i], RLP_E_INVALID_ARG, fmt_alloc("request %zu: %s", i, problem));
            continue;
        }
        rlpi_http_req *x = &xs[nx];
        char *body = build_body(c, &reqs[i], &x->body_len);
        if (!body) {
            finish(&results[i], RLP_E_INVALID_ARG,
                   fmt_alloc("request %zu: cannot encode as JSON (a stop string that is not UTF-8?), or "
                             "out of memory",
                             i));
            continue;
        }
        x->body = body;
        x->pick = pool_pick;
        x->pick_arg = c->pool;
        x->pick_wait_ns = (uint64_t)c->timeout_ms * 1000000u;
        x->headers = c->headers;
        x->timeout_ms = (long)c->timeout_ms;
        x->connect_timeout_ms = (long)c->connect_timeout_ms;
        x->response_limit = c->max_response_bytes;
        x->max_retries = c->max_retries;
        req_of[nx++] = i;
    }

    int rc = rlpi_http_queue_run(c->queue, xs, nx);
    char broken[256] = "";
    if (rc != RLP_OK)
        snprintf(broken, sizeof broken, "%s", rlp_error_last());
    for (size_t k = 0; k < nx; k++) {
        rlpi_http_req *x = &xs[k];
        size_t i = req_of[k];
        rlpi_remote_result *res = &results[i];
        res->attempts = x->attempts;
        res->http_code = x->last_http_code;
        const char *url = x->picked ? x->picked : "(no server)";
        if (x->outcome == RLPI_HQ_DONE) {
            request_done(c, x, reqs[i].n, res);
        } else if (x->outcome == RLPI_HQ_NOURL) {
            finish(res, RLP_E_TIMEOUT,
                   fmt_alloc("request %zu: no rollout server: the set of server URLs stayed empty for %u ms (the "
                             "request's timeout; rlp_rollout_engine_set_urls adds servers)",
                             i, c->timeout_ms));
        } else if (x->outcome == RLPI_HQ_NOSTART) {
            res->attempts++; /* the one that could not start counts */
            finish(res, RLP_E_NOMEM,
                   x->attempts ? fmt_alloc("POST %s: cannot start a transfer", url)
                               : fmt_alloc("request %zu: cannot start a transfer (out of memory)", i));
        } else if (x->outcome == RLPI_HQ_PENDING) { /* the queue had no memory to run */
            finish(res, RLP_E_NOMEM, fmt_alloc("POST %s: out of memory", url));
        } else { /* the multi handle broke */
            finish(res, RLP_E_NETWORK, fmt_alloc("POST %s: %s", url, x->errbuf));
        }
        pool_count(c->pool, x, res);
        rlpi_http_req_release(x);
        free((char *)x->body);
    }
    free(xs);
    free(req_of);
    if (rc != RLP_OK)
        rc = rlpi_error_set(rc, "remote client: %s", broken);
    return rc;
}
