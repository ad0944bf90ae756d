/* See http_queue.h: the retrying transfer loop every HTTP client shares.
 * Must not block on one request while others could progress, nor let one
 * failure end the others. */
#include "core/http_queue.h"

#include "core/clock.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if LIBCURL_VERSION_NUM < 0x074200
#error "http_queue.c needs libcurl >= 7.66 (curl_multi_poll)"
#endif

/* Longest sleep in one curl_multi_poll when the options name none. */
#define DEFAULT_POLL_MS 1000

enum { S_WAITING = 0, S_RUNNING, S_DONE };

struct rlpi_http_queue {
    CURLM *multi;
    rlpi_http_queue_opts o;
    uint64_t rng; /* xorshift state of the backoff jitter */
};

int rlpi_http_queue_create(rlpi_http_queue **out, const rlpi_http_queue_opts *o)
{
    *out = NULL;
    int rc = rlpi_curl_global_init();
    if (rc)
        return rc;
    rlpi_http_queue *q = calloc(1, sizeof *q);
    if (!q || !(q->multi = curl_multi_init())) {
        free(q);
        return rlpi_error_set(RLP_E_NOMEM, "out of memory for an HTTP queue");
    }
    q->o = *o;
    if (q->o.poll_ms <= 0)
        q->o.poll_ms = DEFAULT_POLL_MS;
    q->rng = (rlpi_now_ns() ^ (uint64_t)(uintptr_t)q) | 1;
    if (o->max_connects > 0)
        curl_multi_setopt(q->multi, CURLMOPT_MAXCONNECTS, o->max_connects);
    *out = q;
    return RLP_OK;
}

void rlpi_http_queue_free(rlpi_http_queue *q)
{
    if (!q)
        return;
    curl_multi_cleanup(q->multi);
    free(q);
}

void rlpi_http_req_release(rlpi_http_req *r)
{
    rlpi_http_response_free(&r->resp);
    free(r->picked);
    r->picked = NULL;
}

/* How often an empty set is asked again (pick hook). */
#define PICK_POLL_NS 100000000u

/* With a pick hook: the URL of r's next attempt. 0: picked; 1: none yet,
 * ask again at r->ready_ns; 2: none within pick_wait_ns (or no memory):
 * r has ended. Without a hook: 0. */
static int choose(rlpi_http_req *r, uint64_t now)
{
    if (!r->pick)
        return 0;
    char *url = NULL;
    size_t id = 0;
    int got = r->pick(r->pick_arg, r, &url, &id);
    if (got == 0 && url) {
        free(r->picked);
        r->picked = url;
        r->picked_id = id;
        r->nourl_since = 0;
        return 0;
    }
    if (got < 0) {
        snprintf(r->errbuf, sizeof r->errbuf, "out of memory picking a URL");
        r->outcome = RLPI_HQ_NOSTART;
        r->state = S_DONE;
        return 2;
    }
    if (!r->nourl_since)
        r->nourl_since = now;
    uint64_t until = r->nourl_since + r->pick_wait_ns;
    if (r->deadline_ns && r->deadline_ns < until)
        until = r->deadline_ns;
    if (now >= until) {
        snprintf(r->errbuf, sizeof r->errbuf, "no server in the set for %llu ms",
                 (unsigned long long)((now - r->nourl_since) / 1000000u));
        r->outcome = RLPI_HQ_NOURL;
        r->state = S_DONE;
        return 2;
    }
    r->ready_ns = now + PICK_POLL_NS < until ? now + PICK_POLL_NS : until;
    r->state = S_WAITING;
    return 1;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    rlpi_http_req *r = ud;
    return rlpi_http_response_append(&r->resp, p, size * nmemb); /* size is always 1 */
}

/* Starts the next attempt of r; 0, or -1 when it could not. */
static int start(rlpi_http_queue *q, rlpi_http_req *r)
{
    CURL *e = curl_easy_init();
    if (!e)
        return -1;
    rlpi_http_response_reset(&r->resp, r->response_limit);
    r->errbuf[0] = '\0';
    long timeout = r->timeout_ms;
    if (r->deadline_ns) { /* an attempt ends by the deadline too */
        uint64_t now = rlpi_now_ns();
        long left = r->deadline_ns > now ? (long)((r->deadline_ns - now + 999999u) / 1000000u) : 1;
        if (timeout <= 0 || left < timeout)
            timeout = left;
    }
    rlpi_http_post post = {.url = r->pick ? r->picked : r->urls[r->url],
                           .body = r->body,
                           .body_len = r->body_len,
                           .headers = r->headers,
                           .on_data = on_data,
                           .data = r,
                           .errbuf = r->errbuf,
                           .timeout_ms = timeout,
                           .connect_timeout_ms = r->connect_timeout_ms,
                           .max_response = r->max_declared ? r->max_declared : r->response_limit};
    if (rlpi_curl_post_setopts(e, &post) || curl_multi_add_handle(q->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        return -1;
    }
    r->easy = e;
    r->state = S_RUNNING;
    r->attempts++;
    return 0;
}

static uint64_t backoff_ns(rlpi_http_queue *q, uint32_t attempts)
{
    uint64_t ms = q->o.backoff_ms, cap = q->o.max_backoff_ms;
    for (uint32_t i = 1; i < attempts && ms < cap; i++)
        ms *= 2;
    if (ms > cap)
        ms = cap;
    if (q->o.jitter) { /* in [ms/2, ms] */
        q->rng ^= q->rng << 13;
        q->rng ^= q->rng >> 7;
        q->rng ^= q->rng << 17;
        ms = ms / 2 + q->rng % (ms / 2 + 1);
    }
    return ms * 1000000u;
}

static void end(rlpi_http_req *r, int outcome)
{
    r->outcome = outcome;
    r->state = S_DONE;
}

static void drop_easy(rlpi_http_queue *q, rlpi_http_req *r)
{
    if (r->easy) {
        curl_multi_remove_handle(q->multi, r->easy);
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
    }
}

/* An attempt ended: done, or waiting for a retry. Returns 1 when waiting. */
static int attempt_done(rlpi_http_queue *q, rlpi_http_req *r, CURLcode rc)
{
    long code = 0;
    curl_off_t declared = -1;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared);
    drop_easy(q, r);
    r->curl_rc = rc;
    r->http_code = code;
    r->declared = declared;
    if (code)
        r->last_http_code = code;
    int retry;
    if (r->resp.nomem || r->resp.overflow)
        retry = 0;
    else if (rc != CURLE_OK)
        retry = q->o.retry_any_curl_error || rlpi_curl_retryable(rc);
    else
        retry = !(code >= 200 && code < 300) && rlpi_http_retryable(code);
    if (retry && r->attempts <= r->max_retries) {
        uint64_t ready = rlpi_now_ns() + backoff_ns(q, r->attempts);
        if (!r->deadline_ns || ready < r->deadline_ns) {
            if (!r->pick)
                r->url = (r->url + 1) % r->n_urls; /* the next server may be up (pick: its hook's choice) */
            r->ready_ns = ready;
            r->state = S_WAITING;
            return 1;
        }
    }
    end(r, RLPI_HQ_DONE);
    return 0;
}

/* Ends every unfinished request with `outcome`; errbuf says `why`. */
static void end_all(rlpi_http_queue *q, rlpi_http_req *reqs, size_t n, int outcome, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        rlpi_http_req *r = &reqs[i];
        if (r->state == S_DONE)
            continue;
        drop_easy(q, r);
        snprintf(r->errbuf, sizeof r->errbuf, "%s", why);
        end(r, outcome);
    }
}

int rlpi_http_queue_run(rlpi_http_queue *q, rlpi_http_req *reqs, size_t n)
{
    size_t *retry_q = n ? calloc(n, sizeof *retry_q) : NULL; /* waiting retries, unordered */
    if (n && !retry_q)
        return rlpi_error_set(RLP_E_NOMEM, "out of memory for %zu HTTP requests", n);
    for (size_t i = 0; i < n; i++) {
        reqs[i].state = S_WAITING;
        reqs[i].outcome = RLPI_HQ_PENDING;
        reqs[i].attempts = 0;
        reqs[i].curl_rc = CURLE_OK;
        reqs[i].http_code = reqs[i].last_http_code = 0;
        reqs[i].declared = -1;
        reqs[i].errbuf[0] = '\0';
        reqs[i].easy = NULL;
        reqs[i].nourl_since = 0;
        if (reqs[i].n_urls)
            reqs[i].url %= reqs[i].n_urls;
    }
    size_t cap = q->o.max_in_flight ? q->o.max_in_flight : (size_t)-1;
    size_t n_retry = 0, next_fresh = 0, n_done = 0, running = 0;
    int rc = RLP_OK;
    while (n_done < n) {
        if (q->o.abort && q->o.abort(q->o.payload)) {
            end_all(q, reqs, n, RLPI_HQ_ABORTED, "aborted");
            rc = rlpi_error_set(RLP_E_CLOSED, "HTTP requests aborted");
            break;
        }
        uint64_t now = rlpi_now_ns();
        /* retries whose backoff is over go first, then untried requests */
        for (size_t k = 0; k < n_retry && running < cap;) {
            rlpi_http_req *r = &reqs[retry_q[k]];
            if (r->ready_ns > now) {
                k++;
                continue;
            }
            retry_q[k] = retry_q[--n_retry];
            int ch = choose(r, now);
            if (ch == 1) { /* no URL yet: back in the queue, after the others */
                retry_q[n_retry++] = (size_t)(r - reqs);
                k++;
                continue;
            }
            if (ch == 2) {
                n_done++;
            } else if (start(q, r)) {
                end(r, RLPI_HQ_NOSTART);
                n_done++;
            } else {
                running++;
            }
        }
        while (next_fresh < n && running < cap) {
            rlpi_http_req *r = &reqs[next_fresh++];
            if ((!r->pick && !r->n_urls) || (r->deadline_ns && now >= r->deadline_ns)) {
                end(r, RLPI_HQ_NOSTART);
                n_done++;
                continue;
            }
            int ch = choose(r, now);
            if (ch == 1) {
                retry_q[n_retry++] = (size_t)(r - reqs);
            } else if (ch == 2) {
                n_done++;
            } else if (start(q, r)) {
                end(r, RLPI_HQ_NOSTART);
                n_done++;
            } else {
                running++;
            }
        }
        if (n_done == n)
            break;

        int still;
        CURLMcode mc = curl_multi_perform(q->multi, &still);
        if (mc != CURLM_OK) {
            end_all(q, reqs, n, RLPI_HQ_BROKEN, curl_multi_strerror(mc));
            rc = rlpi_error_set(RLP_E_NETWORK, "curl_multi_perform: %s", curl_multi_strerror(mc));
            break;
        }
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(q->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            char *priv = NULL;
            CURLcode res = m->data.result; /* m is invalid once its handle is removed */
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
            rlpi_http_req *r = (rlpi_http_req *)(void *)priv;
            running--;
            if (attempt_done(q, r, res))
                retry_q[n_retry++] = (size_t)(r - reqs);
            else
                n_done++;
        }
        if (n_done == n)
            break;

        /* sleep until a socket is ready, a curl timer fires, or the first
         * backoff ends (when a slot is free for it) */
        long wait_ms = q->o.poll_ms;
        if (running < cap && n_retry) {
            now = rlpi_now_ns();
            for (size_t k = 0; k < n_retry; k++) {
                uint64_t t = reqs[retry_q[k]].ready_ns;
                long ms = t <= now ? 0 : (long)((t - now + 999999u) / 1000000u);
                if (ms < wait_ms)
                    wait_ms = ms;
            }
        }
        if (wait_ms > 0 && (mc = curl_multi_poll(q->multi, NULL, 0, (int)wait_ms, NULL)) != CURLM_OK) {
            end_all(q, reqs, n, RLPI_HQ_BROKEN, curl_multi_strerror(mc));
            rc = rlpi_error_set(RLP_E_NETWORK, "curl_multi_poll: %s", curl_multi_strerror(mc));
            break;
        }
    }
    free(retry_q);
    return rc;
}
