/* See http.h: the libcurl setup and retry policy every client shares. */
#include "core/http.h"

#include "core/error.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* curl_global_init is not thread-safe and must run before any handle is
 * made; a host that calls it itself before starting us makes ours a no-op. */
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int rlpi_curl_global_init(void)
{
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK)
        return rlpi_error_set(RLP_E_NETWORK, "curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
    return RLP_OK;
}

int rlpi_curl_post_setopts(CURL *e, const rlpi_http_post *p)
{
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, p->url) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, p->body) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)p->body_len) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, p->headers) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, p->on_data) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, p->data) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, p->data) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, p->errbuf) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, p->timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, p->connect_timeout_ms) != CURLE_OK;
    /* a declared Content-Length over the cap is refused before it is read;
     * each client's write callback enforces it on bodies of unknown length */
    if (p->max_response > 0 && p->max_response <= (size_t)INT64_MAX)
        bad |= curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)p->max_response) != CURLE_OK;
    bad |= rlpi_curl_safe_setopts(e);
    return bad;
}

int rlpi_curl_safe_setopts(CURL *e)
{
    int bad = curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK; /* no SIGALRM in a library */
    bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
#else
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS)) != CURLE_OK;
#endif
    return bad;
}

int rlpi_curl_retryable(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE: /* peer closed mid-body: a crash or restart */
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_AGAIN:
        return 1;
    default:
        return 0;
    }
}

int rlpi_http_retryable(long code)
{
    return code >= 500 || code == 408 || code == 429;
}

void rlpi_http_response_reset(rlpi_http_response *b, size_t limit)
{
    b->len = 0;
    b->overflow = b->nomem = 0;
    b->limit = limit;
}

size_t rlpi_http_response_append(rlpi_http_response *b, const char *p, size_t n)
{
    if (n > b->limit - b->len) {
        b->overflow = 1;
        return 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : b->limit < 16384 ? b->limit : 16384;
        while (cap < b->len + n)
            cap = cap > b->limit / 2 ? b->limit : cap * 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->nomem = 1;
            return 0;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return n;
}

void rlpi_http_response_free(rlpi_http_response *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
