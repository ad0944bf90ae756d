/* HTTP verifier: POSTs samples in batches to a user's scoring service
 * over libcurl's multi interface (every request of a score call in flight
 * at once, up to max_in_flight, on the one worker thread that runs it),
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

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#if LIBCURL_VERSION_NUM < 0x074200
#error "http_verifier.c needs libcurl >= 7.66 (curl_multi_poll)"
#endif

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

/* ---- libcurl's global state -------------------------------------------------- */



typedef struct http_impl {
    char *url;
    struct curl_slist *headers;
    CURLM *multi;                 /* kept across calls for its connection cache */
    uint32_t timeout_ms, connect_timeout_ms, max_retries, backoff_ms, batch_size, max_in_flight;
    size_t max_response;
    int send_tokens;
    uint64_t rng;                 /* xorshift state of the backoff jitter */
} http_impl;

enum { X_WAITING = 0, X_RUNNING, X_DONE };

/* One request (samples [b, e)) across its attempts. */
typedef struct xfer {
    size_t b, e;
    int state;
    uint32_t attempts;
    uint64_t ready_ns;
    char *body;
    size_t body_len;
    CURL *easy;
    rlpi_http_response rb;     /* the response */
    char errbuf[CURL_ERROR_SIZE];
} xfer;

/* ---- transfers ------------------------------------------------------------------ */

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    return rlpi_http_response_append(&x->rb, p, size * nmemb); /* size is always 1 */
}

static int start(http_impl *h, xfer *x)
{
    CURL *c = curl_easy_init();
    if (!c)
        return RLP_E_NOMEM;
    rlpi_http_response_reset(&x->rb, h->max_response);
    x->errbuf[0] = '\0';
    x->attempts++;
    rlpi_http_post post = {.url = h->url, .body = x->body, .body_len = x->body_len, .headers = h->headers,
                           .on_data = on_data, .data = x, .errbuf = x->errbuf, .timeout_ms = (long)h->timeout_ms,
                           .connect_timeout_ms = (long)h->connect_timeout_ms, .max_response = h->max_response};
    int bad = rlpi_curl_post_setopts(c, &post);
    if (bad || curl_multi_add_handle(h->multi, c) != CURLM_OK) {
        curl_easy_cleanup(c);
        return RLP_E_NOMEM;
    }
    x->easy = c;
    x->state = X_RUNNING;
    return RLP_OK;
}


static uint64_t backoff_ns(http_impl *h, uint32_t attempts)
{
    uint64_t ms = h->backoff_ms;
    for (uint32_t i = 1; i < attempts && ms < MAX_BACKOFF_MS; i++)
        ms *= 2;
    if (ms > MAX_BACKOFF_MS)
        ms = MAX_BACKOFF_MS;
    h->rng ^= h->rng << 13;
    h->rng ^= h->rng >> 7;
    h->rng ^= h->rng << 17;
    ms = ms / 2 + h->rng % (ms / 2 + 1); /* jitter: requests that failed together come back apart */
    return ms * 1000000u;
}

static void finish(xfer *x)
{
    x->state = X_DONE;
    free(x->body);
    x->body = NULL;
    rlpi_http_response_free(&x->rb);
}

/* An attempt ended. Returns 1 when another attempt is queued. */
static int attempt_done(http_impl *h, xfer *x, CURLcode rc, rlp_reward_result *res, uint8_t *fail,
                        const rlp_reward_request *req)
{
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_multi_remove_handle(h->multi, x->easy);
    curl_easy_cleanup(x->easy);
    x->easy = NULL;
    char why[RLP_REWARD_REASON_MAX];
    const char *s = x->attempts == 1 ? "" : "s";
    if (x->rb.nomem) {
        snprintf(why, sizeof why, "%.*s: out of memory for the response", URL_QUOTE, h->url);
        rlpi_http_fail_all(res, fail, x->b, x->e, RLPI_RW_ERROR, why);
        finish(x);
        return 0;
    }
    if (x->rb.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(why, sizeof why, "%.*s: response larger than %zu bytes", URL_QUOTE, h->url, h->max_response);
        rlpi_http_fail_all(res, fail, x->b, x->e, RLPI_RW_ERROR, why);
        finish(x);
        return 0;
    }
    int retry = rc != CURLE_OK ? rlpi_curl_retryable(rc) : rlpi_http_retryable(code);
    if (retry && x->attempts <= h->max_retries) {
        x->ready_ns = rlpi_now_ns() + backoff_ns(h, x->attempts);
        x->state = X_WAITING;
        return 1;
    }
    if (rc != CURLE_OK) {
        snprintf(why, sizeof why, "%.*s: %.50s after %u attempt%s", URL_QUOTE, h->url,
                 x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc), x->attempts, s);
        int kind = rc == CURLE_OPERATION_TIMEDOUT ? RLPI_RW_TIMEOUT : RLPI_RW_ERROR;
        rlpi_http_fail_all(res, fail, x->b, x->e, kind, why);
    } else if (code < 200 || code >= 300) {
        snprintf(why, sizeof why, "%.*s: HTTP %ld after %u attempt%s", URL_QUOTE, h->url, code, x->attempts, s);
        rlpi_http_fail_all(res, fail, x->b, x->e, RLPI_RW_ERROR, why);
    } else {
        rlpi_http_read_answer(h->url, x->rb.data ? x->rb.data : "", x->rb.len, res + x->b, fail + x->b, req + x->b,
                              x->e - x->b);
    }
    finish(x);
    return 0;
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    http_impl *h = impl;
    size_t nx = (n + h->batch_size - 1) / h->batch_size;
    xfer *xs = calloc(nx, sizeof *xs);
    size_t *retry_q = calloc(nx, sizeof *retry_q);
    if (!xs || !retry_q) {
        free(xs);
        free(retry_q);
        rlpi_reason(&res[0], "out of memory");
        return RLP_E_NOMEM;
    }
    for (size_t k = 0; k < nx; k++) {
        xs[k].b = k * h->batch_size;
        xs[k].e = xs[k].b + h->batch_size < n ? xs[k].b + h->batch_size : n;
    }
    size_t next = 0, n_retry = 0, done = 0, running = 0;
    while (done < nx) {
        uint64_t now = rlpi_now_ns();
        for (size_t q = 0; q < n_retry && running < h->max_in_flight;) {
            xfer *x = &xs[retry_q[q]];
            if (x->ready_ns > now) {
                q++;
                continue;
            }
            retry_q[q] = retry_q[--n_retry];
            if (start(h, x)) {
                rlpi_http_fail_all(res, fail, x->b, x->e, RLPI_RW_ERROR, "cannot start a transfer (out of memory)");
                finish(x);
                done++;
            } else {
                running++;
            }
        }
        while (next < nx && running < h->max_in_flight) {
            xfer *x = &xs[next++];
            x->body = rlpi_http_body(req, x->b, x->e, h->send_tokens, &x->body_len);
            if (!x->body || start(h, x)) {
                rlpi_http_fail_all(res, fail, x->b, x->e, RLPI_RW_ERROR,
                                   "cannot build or start the request (out of memory)");
                finish(x);
                done++;
            } else {
                running++;
            }
        }
        if (done == nx)
            break;
        int still;
        CURLMcode mc = curl_multi_perform(h->multi, &still);
        CURLMsg *m;
        int left;
        while (mc == CURLM_OK && (m = curl_multi_info_read(h->multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            CURLcode rc = m->data.result;
            char *priv = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
            xfer *x = (xfer *)(void *)priv;
            running--;
            if (attempt_done(h, x, rc, res, fail, req))
                retry_q[n_retry++] = (size_t)(x - xs);
            else
                done++;
        }
        long wait_ms = POLL_MS;
        if (mc == CURLM_OK && done < nx && running < h->max_in_flight && n_retry) {
            now = rlpi_now_ns();
            for (size_t q = 0; q < n_retry; q++) {
                uint64_t t = xs[retry_q[q]].ready_ns;
                long ms = t <= now ? 0 : (long)((t - now + 999999u) / 1000000u);
                if (ms < wait_ms)
                    wait_ms = ms;
            }
        }
        if (mc == CURLM_OK && done < nx && wait_ms > 0)
            mc = curl_multi_poll(h->multi, NULL, 0, (int)wait_ms, NULL);
        if (mc != CURLM_OK) { /* the multi handle broke: every open request fails */
            for (size_t k = 0; k < nx; k++) {
                xfer *x = &xs[k];
                if (x->state == X_DONE)
                    continue;
                if (x->easy) {
                    curl_multi_remove_handle(h->multi, x->easy);
                    curl_easy_cleanup(x->easy);
                    x->easy = NULL;
                }
                rlpi_http_fail_all(res, fail, x->b, x->e, RLPI_RW_ERROR, curl_multi_strerror(mc));
                finish(x);
            }
            break;
        }
    }
    free(xs);
    free(retry_q);
    return 0;
}

static void destroy(void *impl)
{
    http_impl *h = impl;
    if (h->multi)
        curl_multi_cleanup(h->multi);
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
    h->rng = (rlpi_now_ns() ^ (uint64_t)(uintptr_t)h) | 1;
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
    if (ok)
        ok = (h->multi = curl_multi_init()) != NULL;
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
