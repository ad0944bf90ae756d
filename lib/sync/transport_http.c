/* The HTTP transport: tells rollout servers to load a published version
 * folder through the SGLang-style endpoint that `rlpost serve` implements,
 * POST {base}/update_weights_from_disk {"model_path", "version",
 * "weight_version"}. All servers are asked at once (libcurl multi), each
 * with its own timeout and bounded retries with backoff; one failing server
 * never stops the others, and every failure is named in the error. Without
 * an api_key it sends the token that `rlpost serve --weights-dir DIR`
 * keeps in DIR/.rlpost-serve-token (servers demand one for weight
 * updates). Built only with libcurl. */
#include "sync/sync.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/http.h"
#include "rollout/remote_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RESPONSE_LIMIT 65536
#define FIRST_BACKOFF_MS 200u
#define MAX_BACKOFF_MS 5000u
#define CONNECT_TIMEOUT_MS 10000u

enum { P_WAITING, P_RUNNING, P_DONE };

typedef struct post {
    size_t target;
    char *url;                 /* full endpoint */
    CURL *easy;
    int state;
    uint32_t attempts;
    uint64_t ready_ns;         /* earliest start of the next attempt */
    char resp[RESPONSE_LIMIT + 1];
    size_t resp_len;
    bool overflow, ok;
    char why[256];             /* last failure */
    char errbuf[CURL_ERROR_SIZE];
} post;


static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    post *x = arg;
    size_t len = size * n;
    if (len > RESPONSE_LIMIT - x->resp_len) {
        x->overflow = true;
        return 0; /* aborts the transfer */
    }
    memcpy(x->resp + x->resp_len, p, len);
    x->resp_len += len;
    return len;
}

/* The token `rlpost serve` generated for weight updates to folders below
 * `dir` (the first line of DIR/.rlpost-serve-token), read at each update
 * since a worker may start after the trainer. False when there is none. */
static bool dir_token(const char *dir, char *out, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/.rlpost-serve-token", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return false;
    ssize_t k = read(fd, out, n - 1);
    close(fd);
    if (k <= 0)
        return false;
    out[k] = '\0';
    out[strcspn(out, "\r\n \t")] = '\0';
    return out[0] != '\0';
}

/* "http://h:p", "http://h:p/" or "http://h:p/v1" -> ".../update_weights_from_disk" */
static char *endpoint(const char *base)
{
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    if (n >= 3 && !memcmp(base + n - 3, "/v1", 3))
        n -= 3;
    size_t cap = n + sizeof "/update_weights_from_disk";
    char *u = malloc(cap);
    if (u)
        snprintf(u, cap, "%.*s/update_weights_from_disk", (int)n, base);
    return u;
}

static int start(CURLM *multi, post *x, const char *body, struct curl_slist *headers, uint32_t timeout_ms)
{
    x->easy = curl_easy_init();
    if (!x->easy)
        return -1;
    x->resp_len = 0;
    x->overflow = false;
    x->errbuf[0] = '\0';
    /* the response is a small JSON status: 1 MiB is plenty */
    rlpi_http_post req = {.url = x->url, .body = body, .body_len = strlen(body), .headers = headers,
                           .on_data = on_data, .data = x, .errbuf = x->errbuf, .timeout_ms = (long)timeout_ms,
                           .connect_timeout_ms = (long)(timeout_ms < CONNECT_TIMEOUT_MS ? timeout_ms
                                                                                        : CONNECT_TIMEOUT_MS),
                           .max_response = 1u << 20};
    if (rlpi_curl_post_setopts(x->easy, &req) != 0) {
        curl_easy_cleanup(x->easy);
        x->easy = NULL;
        return -1;
    }
    if (curl_multi_add_handle(multi, x->easy) != CURLM_OK) {
        curl_easy_cleanup(x->easy);
        x->easy = NULL;
        return -1;
    }
    x->state = P_RUNNING;
    x->attempts++;
    return 0;
}

/* Sorts out one finished attempt: done (ok or not) or to be retried. */
static void finish(post *x, CURLcode res, uint32_t max_retries)
{
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    x->resp[x->resp_len] = '\0';
    bool retry = false;
    if (res != CURLE_OK) {
        snprintf(x->why, sizeof x->why, "%s", x->overflow ? "response larger than 64 KiB"
                                                          : (x->errbuf[0] ? x->errbuf : curl_easy_strerror(res)));
        retry = !x->overflow;
    } else if (code >= 200 && code < 300) {
        /* SGLang answers 200 with {"success": false} when the load failed */
        json_t *j = json_loadb(x->resp, x->resp_len, 0, NULL);
        json_t *ok = json_is_object(j) ? json_object_get(j, "success") : NULL;
        if (ok && json_is_false(ok)) {
            json_t *msg = json_object_get(j, "message");
            snprintf(x->why, sizeof x->why, "HTTP %ld, success false: %.150s", code,
                     json_is_string(msg) ? json_string_value(msg) : "(no message)");
        } else {
            x->ok = true;
        }
        json_decref(j);
    } else {
        retry = code >= 500 || code == 408 || code == 429;
        snprintf(x->why, sizeof x->why, "HTTP %ld: %.160s", code, x->resp);
    }
    if (!x->ok && retry && x->attempts <= max_retries) {
        uint64_t backoff = (uint64_t)FIRST_BACKOFF_MS << (x->attempts - 1 < 10 ? x->attempts - 1 : 10);
        if (backoff > MAX_BACKOFF_MS)
            backoff = MAX_BACKOFF_MS;
        x->ready_ns = rlpi_now_ns() + backoff * 1000000u;
        x->state = P_WAITING;
    } else {
        x->state = P_DONE;
    }
}

int rlpi_http_update(rlp_synchronizer *s, uint64_t version, bool *sent)
{
    *sent = false;
    int rc = rlpi_curl_global_init();
    if (rc)
        return rc;
    pthread_mutex_lock(&s->http_mu);
    size_t n = 0;
    post *posts = calloc(s->n_targets, sizeof *posts);
    if (!posts) {
        pthread_mutex_unlock(&s->http_mu);
        return rlpi_error_set(RLP_E_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_targets; i++)
        if (s->targets[i].version < 0 || (uint64_t)s->targets[i].version < version)
            posts[n++].target = i;
    pthread_mutex_unlock(&s->mu);

    char *body = NULL;
    struct curl_slist *headers = NULL;
    CURLM *multi = NULL;
    if (n) {
        char path[4096], wv[24];
        snprintf(path, sizeof path, "%s/v%" PRIu64, s->dir, version);
        snprintf(wv, sizeof wv, "%" PRIu64, version);
        json_t *j = json_pack("{s:s, s:I, s:s}", "model_path", path, "version", (json_int_t)version,
                              "weight_version", wv);
        body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        headers = curl_slist_append(NULL, "Content-Type: application/json");
        headers = headers ? curl_slist_append(headers, "Expect:") : NULL;
        char tok[300];
        const char *key = s->api_key ? s->api_key : dir_token(s->dir, tok, sizeof tok) ? tok : NULL;
        if (headers && key) {
            char auth[1024];
            snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
            headers = curl_slist_append(headers, auth);
        }
        multi = curl_multi_init();
        if (!body || !headers || !multi)
            rc = rlpi_error_set(RLP_E_NOMEM, "weight update: out of memory");
    }
    for (size_t i = 0; rc == RLP_OK && i < n; i++)
        if (!(posts[i].url = endpoint(s->targets[posts[i].target].url)))
            rc = rlpi_error_set(RLP_E_NOMEM, "weight update: out of memory");

    size_t done = 0;
    while (rc == RLP_OK && done < n) {
        uint64_t t = rlpi_now_ns(), next = UINT64_MAX;
        for (size_t i = 0; i < n; i++) {
            if (posts[i].state != P_WAITING)
                continue;
            if (posts[i].ready_ns <= t) {
                if (start(multi, &posts[i], body, headers, s->opts.timeout_ms) != 0) {
                    snprintf(posts[i].why, sizeof posts[i].why, "curl could not start the request");
                    posts[i].state = P_DONE;
                    done++;
                }
            } else if (posts[i].ready_ns < next) {
                next = posts[i].ready_ns;
            }
        }
        int running = 0;
        curl_multi_perform(multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            post *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode res = msg->data.result;
            finish(x, res, s->opts.max_retries);
            curl_multi_remove_handle(multi, x->easy);
            curl_easy_cleanup(x->easy);
            x->easy = NULL;
            done += x->state == P_DONE;
        }
        if (done < n) {
            int wait_ms = 100;
            if (!running && next != UINT64_MAX) {
                uint64_t now = rlpi_now_ns();
                wait_ms = next > now ? (int)((next - now) / 1000000u) + 1 : 0;
                if (wait_ms > 100)
                    wait_ms = 100;
            }
            curl_multi_poll(multi, NULL, 0, wait_ms, NULL);
        }
    }

    char msg[1024] = "";
    size_t mlen = 0, failed = 0;
    uint64_t attempts = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        attempts += posts[i].attempts;
        if (posts[i].ok) {
            s->targets[posts[i].target].version = (int64_t)version;
            *sent = true;
        } else if (rc == RLP_OK) {
            failed++;
            if (mlen < sizeof msg)
                mlen += (size_t)snprintf(msg + mlen, sizeof msg - mlen, "%s%s (%u attempts): %s", failed > 1 ? "; " : "",
                                         posts[i].url, posts[i].attempts, posts[i].why);
        }
    }
    s->st.http_requests += attempts;
    s->st.http_failures += failed;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        if (posts[i].easy) {
            curl_multi_remove_handle(multi, posts[i].easy);
            curl_easy_cleanup(posts[i].easy);
        }
        free(posts[i].url);
    }
    if (multi)
        curl_multi_cleanup(multi);
    curl_slist_free_all(headers);
    free(body);
    free(posts);
    pthread_mutex_unlock(&s->http_mu);
    if (rc == RLP_OK && failed)
        rc = rlpi_error_set(RLP_E_NETWORK, "version %" PRIu64 " reached %zu of %zu servers; %s", version, n - failed,
                            n, msg);
    return rc;
}
