/* Client of OpenAI-compatible completion servers (vLLM, SGLang, llama.cpp
 * server, `rlpost serve`) over libcurl's multi interface: many requests in
 * flight on one thread, per-request timeout, bounded retries with backoff on
 * connection errors and 5xx, a response-size limit, token ids recovered
 * from the response. One failing request never fails the others. */
#ifndef RLPI_ROLLOUT_REMOTE_CLIENT_H
#define RLPI_ROLLOUT_REMOTE_CLIENT_H

#include "rlpost.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_remote_client rlpi_remote_client;

typedef struct rlpi_remote_config {
    const char *const *base_urls;  /* (n_urls) e.g. "http://127.0.0.1:8000"; requests spread round-robin;
                                      at most RLP_SERVER_URL_MAX - 1 bytes each */
    size_t n_urls;                 /* may be 0: requests wait for rlpi_remote_client_set_urls() */
    const char *model;             /* "model" field of each request (NULL = omitted) */
    const char *api_key;           /* bearer token or NULL */
    uint32_t timeout_ms;           /* whole-request timeout (0 = 600000) */
    uint32_t connect_timeout_ms;   /* 0 = 10000 */
    uint32_t max_retries;          /* retries after the first try on connection errors / 5xx / timeout */
    uint32_t backoff_ms;           /* first backoff, doubled each retry (0 = 200) */
    size_t max_response_bytes;     /* 0 = 64 MiB */
    uint32_t max_in_flight;        /* concurrent transfers (0 = 64) */
} rlpi_remote_config;

/* One /v1/completions call: prompt as token ids, n samples. */
typedef struct rlpi_remote_request {
    const int32_t *prompt;         /* (n_prompt) */
    size_t n_prompt;
    uint32_t n;
    uint32_t max_tokens;
    float temperature, top_p, min_p;
    int32_t top_k;                 /* 0 = off (sent as -1 for vLLM) */
    uint64_t seed;                 /* sent when has_seed */
    int has_seed;
    const char *const *stop;       /* (n_stop) */
    size_t n_stop;
    const int32_t *stop_ids;       /* (n_stop_ids) sent as stop_token_ids */
    size_t n_stop_ids;
    int include_stop_str;          /* include_stop_str_in_output */
    uint64_t min_version;          /* > 0: sent as "min_weight_version" (rlpost serve holds the request
                                      until its weights are at least this new; others ignore it) */
} rlpi_remote_request;

typedef struct rlpi_remote_choice {
    int32_t *tokens;               /* (n_tokens) completion token ids, malloc'd */
    float *logprobs;               /* (n_tokens) malloc'd */
    size_t n_tokens;
    char *text;                    /* completion text, malloc'd, NUL-terminated */
    char finish_reason[16];        /* "stop", "length", "abort" */
} rlpi_remote_choice;

typedef struct rlpi_remote_result {
    int status;                    /* RLP_OK or the error of this request */
    char *error;                   /* malloc'd message with URL and HTTP code, or NULL */
    long http_code;                /* last HTTP code seen (0 = none) */
    uint32_t attempts;
    rlpi_remote_choice *choices;   /* (n_choices) in index order, malloc'd */
    size_t n_choices;
    int64_t weight_version;        /* "weight_version" of the response when present, else -1 */
} rlpi_remote_result;

/* A base URL may end in "/" or "/v1"; requests go to <base>/v1/completions.
 * The set of URLs may change while the client runs
 * (rlpi_remote_client_set_urls); every attempt of a request picks its URL
 * from the set as it is then, and a request that finds it empty waits
 * (asking again every 0.1 s) up to timeout_ms, then fails with
 * RLP_E_TIMEOUT.
 * The first call in the process runs curl_global_init, once (pthread_once);
 * a host that uses libcurl itself from several threads should call it
 * before starting them. A client is used by one thread at a time; distinct
 * clients may run on distinct threads. RLP_E_INVALID_ARG, RLP_E_NETWORK
 * (curl failed to initialise), RLP_E_NOMEM. */
int rlpi_remote_client_create(rlpi_remote_client **out, const rlpi_remote_config *cfg);
void rlpi_remote_client_free(rlpi_remote_client *c);
/* A new client with c's headers and limits and a queue of its own, for
 * another thread (a client is one thread's). It shares c's set of URLs,
 * round-robin cursor and per-server counters (so clones spread over the
 * servers and see set changes); `first_url` is kept for the callers and
 * unused. Reads c only: safe while c's owner is between calls.
 * RLP_E_NOMEM. */
int rlpi_remote_client_clone(rlpi_remote_client **out, const rlpi_remote_client *c, size_t first_url);

/* Replaces the set of base URLs (checked as at create; copied) that the
 * client and its clones pick from. Attempts in flight finish where they
 * are; the next attempt of any request picks from the new set. A server
 * keeps its counters across removal and return (matched by base URL).
 * Thread-safe, also while another thread is in rlpi_remote_client_complete.
 * RLP_E_INVALID_ARG, RLP_E_NOMEM (the old set is kept). */
int rlpi_remote_client_set_urls(rlpi_remote_client *c, const char *const *base_urls, size_t n_urls);

/* Where the staleness of a response is measured from: fn(arg) is the
 * version current when a response arrives (the engine's). Set once, before
 * any request; without it the staleness counters stay 0. */
void rlpi_remote_client_set_version_source(rlpi_remote_client *c, uint64_t (*fn)(void *arg), void *arg);

/* Per-server counters (every server ever in the set, in order of first
 * appearance) into out[0 .. min(cap, count)); returns the count.
 * Thread-safe. */
size_t rlpi_remote_client_server_stats(const rlpi_remote_client *c, rlp_server_stats *out, size_t cap);

/* The servers' context length (prompt + completion tokens per sequence):
 * the smallest `max_model_len` that GET <base>/v1/models reports (vLLM,
 * SGLang and `rlpost serve` report it), asked of every URL with a short
 * timeout; 0 when no server says (down, or another kind). Never fails. */
uint64_t rlpi_remote_client_context(const rlpi_remote_client *c);

/* Runs all requests concurrently and waits for every one to end. results
 * (n) are filled whether each succeeded or not; the return value is RLP_OK
 * unless the call itself could not run (bad arguments, no memory).
 * results are overwritten, not freed: clear earlier results first; after
 * any return other than RLP_E_INVALID_ARG each result is safe to clear. A
 * malformed request fails alone with status RLP_E_INVALID_ARG, 0 attempts.
 * Retried: connection errors, timeouts, truncated bodies, HTTP 5xx, 408 and
 * 429; each retry goes to the next base URL. */
int rlpi_remote_client_complete(rlpi_remote_client *c, const rlpi_remote_request *reqs, size_t n,
                                rlpi_remote_result *results);
void rlpi_remote_result_clear(rlpi_remote_result *r);

/* Parses one /v1/completions response body (exposed for tests and the
 * fuzz target). Token ids are taken, in order of preference, from
 * choices[i].token_ids, from logprobs.tokens entries "token_id:N" (vLLM's
 * return_tokens_as_token_ids), or from logprobs.content[].id (llama.cpp).
 * A choice without recoverable ids is RLP_E_FORMAT. n_expected 0 accepts
 * any non-zero count. Sets out->choices, n_choices, weight_version (NULL, 0,
 * -1 on failure) and nothing else; out->choices must hold nothing. */
int rlpi_remote_parse_completion(const char *body, size_t len, uint32_t n_expected, rlpi_remote_result *out);

#endif
