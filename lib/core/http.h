/* libcurl usage shared by every HTTP client of the library (the remote
 * rollout client, the HTTP reward verifier, the HTTP weight transport):
 * one process-wide curl_global_init, the options every POST gets (no
 * signals, no redirects, http/https only, timeouts, a response-size cap)
 * and one retry policy. Built only with libcurl. Transfers, bodies and
 * parsing stay with each client. */
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

/* Transport failures another attempt may cure (the peer may be back, or
 * the next URL may answer); certificate, protocol and URL errors are not. */
int rlpi_curl_retryable(CURLcode rc);

/* 5xx, and 408/429 that proxies send when a server is busy; other 4xx
 * mean the request itself is wrong. */
int rlpi_http_retryable(long code);

#endif
