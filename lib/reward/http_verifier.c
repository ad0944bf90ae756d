/* HTTP verifier: POSTs samples in batches to a user's scoring service
 * through the shared HTTP queue (core/http_queue: every request of a score
 * call in flight at once, up to max_in_flight, on the one worker thread),
 * with per-attempt timeouts, bounded retries with jittered backoff, a
 * response-size limit, and a strict reader of the answer (protocol in
 * rlpost.h, rlp_http_reward_options). A failed or malformed request marks
 * its own samples invalid and never the others. Must not follow
 * redirects, speak anything but http(s), or raise signals. */
#include "reward/http_verifier.h"

#include "reward/http_protocol.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/http.h"
#include "core/http_queue.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_TIMEOUT_MS 60000u
#define DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define DEFAULT_BACKOFF_MS 200u
#define DEFAULT_BATCH 64u
#define DEFAULT_IN_FLIGHT 8u
#define DEFAULT_MAX_RESPONSE ((uint64_t)16 << 20)
/* Longest wait between two attempts, whatever the retry count. */
#define MAX_BACKOFF_MS 30000u
/* Longest single curl_multi_poll (curl shortens it to its own timers). */
#define POLL_MS 1000

typedef struct http_impl {
    char *url;
    struct curl_slist *headers;
    rlpi_http_queue *queue;       /* kept across calls for its connection cache */
    uint32_t timeout_ms, connect_timeout_ms, max_retries, backoff_ms, batch_size, max_in_flight;
    size_t max_response;
    int send_tokens;
} http_impl;

/* ---- transfers ------------------------------------------------------------------ */

/* Scores samples [b, e) from a request whose last attempt ran. */
static void request_done(http_impl *h, const rlpi_http_req *x, size_t b, size_t e, rlp_reward_result *res,
                         uint8_t *fail, const rlp_reward_request *req)
{
    char why[RLP_REWARD_REASON_MAX];
    const char *s = x->attempts == 1 ? "" : "s";
    CURLcode rc = x->curl_rc;
    long code = x->http_code;
    if (x->resp.nomem) {
        snprintf(why, sizeof why, "%.*s: out of memory for the response", URL_QUOTE, h->url);
        rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR, why);
    } else if (x->resp.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(why, sizeof why, "%.*s: response larger than %zu bytes", URL_QUOTE, h->url, h->max_response);
        rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR, why);
    } else if (rc != CURLE_OK) {
        snprintf(why, sizeof why, "%.*s: %.50s after %u attempt%s", URL_QUOTE, h->url,
                 x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc), x->attempts, s);
        int kind = rc == CURLE_OPERATION_TIMEDOUT ? RLPI_RW_TIMEOUT : RLPI_RW_ERROR;
        rlpi_http_fail_all(res, fail, b, e, kind, why);
    } else if (code < 200 || code >= 300) {
        snprintf(why, sizeof why, "%.*s: HTTP %ld after %u attempt%s", URL_QUOTE, h->url, code, x->attempts, s);
        rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR, why);
    } else {
        rlpi_http_read_answer(h->url, x->resp.data ? x->resp.data : "", x->resp.len, res + b, fail + b, req + b,
                              e - b);
    }
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    http_impl *h = impl;
    size_t nx = (n + h->batch_size - 1) / h->batch_size;
    rlpi_http_req *xs = calloc(nx, sizeof *xs);
    if (!xs) {
        rlpi_reason(&res[0], "out of memory");
        return RLP_E_NOMEM;
    }
    const char *const urls[1] = {h->url};
    for (size_t k = 0; k < nx; k++) {
        rlpi_http_req *x = &xs[k];
        size_t b = k * h->batch_size, e = b + h->batch_size < n ? b + h->batch_size : n;
        x->body = rlpi_http_body(req, b, e, h->send_tokens, &x->body_len);
        x->urls = x->body ? urls : NULL; /* no URL: the queue does not start it */
        x->n_urls = x->body ? 1 : 0;
        x->headers = h->headers;
        x->timeout_ms = (long)h->timeout_ms;
        x->connect_timeout_ms = (long)h->connect_timeout_ms;
        x->response_limit = h->max_response;
        x->max_retries = h->max_retries;
    }
    int rc = rlpi_http_queue_run(h->queue, xs, nx);
    for (size_t k = 0; k < nx; k++) {
        rlpi_http_req *x = &xs[k];
        size_t b = k * h->batch_size, e = b + h->batch_size < n ? b + h->batch_size : n;
        if (rc == RLP_E_NOMEM || x->outcome == RLPI_HQ_PENDING) /* nothing ran */
            (void)0;
        else if (x->outcome == RLPI_HQ_DONE)
            request_done(h, x, b, e, res, fail, req);
        else if (x->outcome == RLPI_HQ_NOSTART)
            rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR,
                               x->attempts ? "cannot start a transfer (out of memory)"
                                           : "cannot build or start the request (out of memory)");
        else /* the multi handle broke: every open request fails */
            rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR, x->errbuf);
        rlpi_http_req_release(x);
        free((char *)x->body);
    }
    free(xs);
    if (rc == RLP_E_NOMEM) {
        rlpi_reason(&res[0], "out of memory");
        return RLP_E_NOMEM;
    }
    return 0;
}

static void destroy(void *impl)
{
    http_impl *h = impl;
    rlpi_http_queue_free(h->queue);
    curl_slist_free_all(h->headers);
    free(h->url);
    free(h);
}

static const rlpi_scorer_ops ops = {score, destroy};

static int has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

int rlpi_http_scorer(rlpi_scorer **out, const rlp_http_reward_options *o)
{
    if (!o->url || !(strncasecmp(o->url, "http://", 7) == 0 || strncasecmp(o->url, "https://", 8) == 0) ||
        has_ctl(o->url))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "rlp_reward_fn_create_http: url \"%s\" is not an http:// or https:// URL",
                              o->url ? o->url : "(null)");
    if (o->api_key && (!*o->api_key || has_ctl(o->api_key)))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "rlp_reward_fn_create_http: api_key is empty or has control characters");
    if (rlpi_curl_global_init() != RLP_OK)
        return rlpi_error_wrap("rlp_reward_fn_create_http");
    http_impl *h = calloc(1, sizeof *h);
    if (!h)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_reward_fn_create_http: out of memory");
    h->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    h->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    h->max_retries = o->max_retries;
    h->backoff_ms = o->backoff_ms ? o->backoff_ms : DEFAULT_BACKOFF_MS;
    h->batch_size = o->batch_size ? o->batch_size : DEFAULT_BATCH;
    h->max_in_flight = o->max_in_flight ? o->max_in_flight : DEFAULT_IN_FLIGHT;
    uint64_t maxr = o->max_response_bytes ? o->max_response_bytes : DEFAULT_MAX_RESPONSE;
    h->max_response = maxr > (uint64_t)INT64_MAX / 2 ? (size_t)INT64_MAX / 2 : (size_t)maxr;
    h->send_tokens = o->send_tokens != 0;
    int ok = (h->url = strdup(o->url)) != NULL;
    const char *fixed[] = {"Content-Type: application/json", "Accept: application/json", "Expect:"};
    for (size_t i = 0; ok && i < sizeof fixed / sizeof *fixed; i++) {
        struct curl_slist *l = curl_slist_append(h->headers, fixed[i]);
        ok = l != NULL;
        if (l)
            h->headers = l;
    }
    if (ok && o->api_key) {
        size_t len = strlen(o->api_key) + 32;
        char *auth = malloc(len);
        struct curl_slist *l = NULL;
        if (auth) {
            snprintf(auth, len, "Authorization: Bearer %s", o->api_key);
            l = curl_slist_append(h->headers, auth);
            free(auth);
        }
        ok = l != NULL;
        if (l)
            h->headers = l;
    }
    rlpi_http_queue_opts qo = {.max_in_flight = h->max_in_flight, .backoff_ms = h->backoff_ms,
                               .max_backoff_ms = MAX_BACKOFF_MS, .jitter = 1, .poll_ms = POLL_MS};
    if (ok)
        ok = rlpi_http_queue_create(&h->queue, &qo) == RLP_OK;
    if (!ok) {
        destroy(h);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_reward_fn_create_http: out of memory");
    }
    int rc = rlpi_scorer_create(out, &ops, h, 0);
    if (rc == RLP_OK) {
        (*out)->token_scores = 1;
        (*out)->bounds_own_time = 1;
    }
    return rc;
}
