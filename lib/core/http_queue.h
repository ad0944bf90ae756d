/* A retrying queue of HTTP POSTs on one libcurl multi handle, shared by
 * every HTTP client of the library (remote rollout client, HTTP reward
 * verifier, HTTP weight transport): many requests in flight at once, each
 * with its own timeouts, retries with capped exponential backoff (optional
 * jitter), URL rotation on retry, a deadline, and an abort hook. It only
 * moves bytes: bodies, headers, parsing and messages stay with each client.
 * Built only with libcurl. */
#ifndef RLPI_CORE_HTTP_QUEUE_H
#define RLPI_CORE_HTTP_QUEUE_H

#include "core/http.h"

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

/* How a request ended (rlpi_http_req.outcome). */
enum {
    RLPI_HQ_PENDING = 0, /* not run yet (or still running) */
    RLPI_HQ_DONE = 1,    /* its last attempt ran: read curl_rc, http_code, resp */
    RLPI_HQ_NOSTART = 2, /* an attempt could not be started (out of memory) */
    RLPI_HQ_BROKEN = 3,  /* the multi handle failed (rlpi_http_queue_run's message) */
    RLPI_HQ_ABORTED = 4, /* the abort hook said stop */
    RLPI_HQ_NOURL = 5,   /* pick found no URL within pick_wait_ns (only with a pick hook) */
};

typedef struct rlpi_http_req rlpi_http_req;

/* Picks the endpoint of r's next attempt from a set that may change while
 * the queue runs (rlpi_http_req.pick): stores a malloc'd URL in *url and an
 * id of the caller's choosing in *id, and returns 0; returns 1 when the set
 * is empty now (the queue asks again later), -1 when out of memory. r's
 * `picked`/`picked_id` still name the previous attempt's (NULL before the
 * first). Called on the queue's thread. */
typedef int (*rlpi_http_pick_fn)(void *arg, const rlpi_http_req *r, char **url, size_t *id);

struct rlpi_http_req {
    /* in, set by the caller (the strings and lists are borrowed) */
    const char *const *urls; /* (n_urls) endpoints; a retry moves to the next one */
    size_t n_urls;
    size_t url; /* in: URL of the first attempt; out: that of the last */
    const char *body;
    size_t body_len;
    struct curl_slist *headers;
    long timeout_ms, connect_timeout_ms; /* per attempt */
    size_t response_limit;               /* bytes kept of a response; more ends it with resp.overflow */
    size_t max_declared;                 /* refuse a declared Content-Length above it; 0 = response_limit */
    uint32_t max_retries;                /* attempts after the first */
    uint64_t deadline_ns;                /* rlpi_now_ns() clock; no attempt starts or waits past it; 0 = none */
    rlpi_http_pick_fn pick;              /* or NULL: urls/url instead; with it, urls and n_urls are unused */
    void *pick_arg;
    uint64_t pick_wait_ns;               /* longest wait for pick to find a URL, from its first "none" */

    /* out */
    int outcome;                  /* RLPI_HQ_* */
    uint32_t attempts;            /* attempts started */
    CURLcode curl_rc;             /* of the last attempt */
    long http_code;               /* of the last attempt (0: no response) */
    long last_http_code;          /* the last non-zero code of any attempt */
    curl_off_t declared;          /* Content-Length of the last response, -1 if none */
    rlpi_http_response resp;      /* the last attempt's body; freed by rlpi_http_req_release */
    char errbuf[CURL_ERROR_SIZE]; /* curl's text for the last attempt */
    char *picked;                 /* with pick: the last attempt's URL (malloc'd; freed by rlpi_http_req_release) */
    size_t picked_id;             /* and its id */

    /* the queue's */
    uint64_t nourl_since;         /* when pick first found none in a row (0: it found one) */
    int state;
    uint64_t ready_ns;
    CURL *easy;
};

typedef struct rlpi_http_queue_opts {
    uint32_t max_in_flight;      /* 0 = no limit */
    long max_connects;           /* CURLMOPT_MAXCONNECTS; 0 = curl's default */
    uint32_t backoff_ms;         /* wait before the 2nd attempt; doubles each retry */
    uint32_t max_backoff_ms;     /* cap of the doubling */
    int jitter;                  /* wait a random time in [w/2, w], so failures do not come back together */
    int retry_any_curl_error;    /* retry every transport error, not only rlpi_curl_retryable ones */
    long poll_ms;                /* longest sleep in one curl_multi_poll (abort latency) */
    int (*abort)(void *payload); /* non-zero: stop now; checked between polls */
    void *payload;
} rlpi_http_queue_opts;

typedef struct rlpi_http_queue rlpi_http_queue;

/* A queue with its own multi handle (kept across runs for its connection
 * cache). RLP_OK, or RLP_E_NOMEM with the error set. Calls
 * rlpi_curl_global_init. */
int rlpi_http_queue_create(rlpi_http_queue **out, const rlpi_http_queue_opts *o);
void rlpi_http_queue_free(rlpi_http_queue *q);

/* Runs reqs[0..n) to their end on the calling thread: retries first, then
 * untried requests, up to max_in_flight. An attempt is retried (after the
 * backoff, at the next URL) when it failed with a retryable transport
 * error or HTTP status (rlpi_curl_retryable / rlpi_http_retryable), attempts
 * are left and the backoff ends before the deadline; an oversized response
 * or one that ran out of memory never is. Every request gets an outcome.
 * Returns RLP_OK; RLP_E_NETWORK when the multi handle failed (message
 * "curl_multi_perform: ..." or "curl_multi_poll: ...", the unfinished
 * requests RLPI_HQ_BROKEN); RLP_E_CLOSED when the abort hook stopped it (the
 * unfinished RLPI_HQ_ABORTED). One thread at a time per queue. */
int rlpi_http_queue_run(rlpi_http_queue *q, rlpi_http_req *reqs, size_t n);

/* Frees a request's response and picked URL. */
void rlpi_http_req_release(rlpi_http_req *r);

#endif
