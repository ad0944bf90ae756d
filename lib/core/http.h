/* libcurl usage shared by every HTTP client of the library (the remote
 * rollout client, the HTTP reward verifier, the HTTP weight transport):
 * one process-wide curl_global_init, the options every POST gets (no
 * signals, no redirects, http/https only, timeouts, a response-size cap)
 * and one retry policy. Built only with libcurl. The transfer loop is
 * core/http_queue.h; bodies and parsing stay with each client. */
#ifndef RLPI_CORE_HTTP_H
#define RLPI_CORE_HTTP_H

#include <curl/curl.h>
#include <stddef.h>

/* curl_global_init, once per process (pthread_once); RLP_OK or
 * RLP_E_NETWORK. Thread-safe. */
int rlpi_curl_global_init(void);

typedef struct rlpi_http_post {
    const char *url;
    const char *body;
    size_t body_len;
    struct curl_slist *headers;
    curl_write_callback on_data;
    void *data;                /* CURLOPT_WRITEDATA and CURLOPT_PRIVATE */
    char *errbuf;              /* CURL_ERROR_SIZE bytes */
    long timeout_ms, connect_timeout_ms;
    size_t max_response;       /* refuse a declared Content-Length above it; 0 = no cap here */
} rlpi_http_post;

/* Sets a POST's options on an easy handle; 0 on success, non-zero when
 * libcurl refused one. */
int rlpi_curl_post_setopts(CURL *e, const rlpi_http_post *p);
/* What every request of the library sets: no signals (no SIGALRM in a
 * library), no redirects, http and https only. Nonzero if curl refused one. */
int rlpi_curl_safe_setopts(CURL *e);

/* A response body received chunk by chunk, capped at `limit` bytes. */
typedef struct rlpi_http_response {
    char *data;                /* (cap) bytes, len of them used; not NUL-terminated */
    size_t len, cap, limit;
    int overflow, nomem;       /* why the write callback stopped the transfer */
} rlpi_http_response;

/* Empties the body for a new attempt (keeps its allocation). */
void rlpi_http_response_reset(rlpi_http_response *b, size_t limit);
/* Appends n bytes, growing geometrically up to the limit. Returns n, or 0
 * (which makes curl end the transfer with CURLE_WRITE_ERROR) after setting
 * overflow or nomem. For a CURLOPT_WRITEFUNCTION. */
size_t rlpi_http_response_append(rlpi_http_response *b, const char *p, size_t n);
void rlpi_http_response_free(rlpi_http_response *b);

/* Transport failures another attempt may cure (the peer may be back, or
 * the next URL may answer); certificate, protocol and URL errors are not. */
int rlpi_curl_retryable(CURLcode rc);

/* 5xx, and 408/429 that proxies send when a server is busy; other 4xx
 * mean the request itself is wrong. */
int rlpi_http_retryable(long code);

#endif
