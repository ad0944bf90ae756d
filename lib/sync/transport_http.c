/* The HTTP transport: tells rollout servers to load a published version
 * folder through the SGLang-style endpoint that `rlpost serve` implements,
 * POST {base}/update_weights_from_disk {"model_path", "version",
 * "weight_version"}. All servers are asked at once (core/http_queue), each
 * with its own timeout and bounded retries with backoff; one failing server
 * never stops the others, and every failure is named in the error. Without
 * an api_key it sends the token that `rlpost serve --weights-dir DIR`
 * keeps in DIR/.rlpost-serve-token (servers demand one for weight
 * updates). Built only with libcurl. */
#include "sync/sync.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/http.h"
#include "core/http_queue.h"
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
/* Longest single curl_multi_poll. */
#define POLL_MS 100

/* One server's update request: what the queue does not know. */
typedef struct target_post {
    char *base;                /* the target's base URL (a copy: the set may change during the round) */
    char *url;                 /* full endpoint */
    bool ok;
    char why[256];             /* last failure */
} target_post;

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

/* Sorts out how one server's request ended. */
static void judge(target_post *t, const rlpi_http_req *x)
{
    if (x->outcome == RLPI_HQ_NOSTART) {
        snprintf(t->why, sizeof t->why, "curl could not start the request");
        return;
    }
    if (x->outcome != RLPI_HQ_DONE) {
        snprintf(t->why, sizeof t->why, "%s", x->errbuf);
        return;
    }
    const char *resp = x->resp.data ? x->resp.data : "";
    long code = x->http_code;
    if (x->curl_rc != CURLE_OK) {
        snprintf(t->why, sizeof t->why, "%s", x->resp.overflow ? "response larger than 64 KiB"
                                              : (x->errbuf[0] ? x->errbuf : curl_easy_strerror(x->curl_rc)));
    } else if (code >= 200 && code < 300) {
        /* SGLang answers 200 with {"success": false} when the load failed */
        json_t *j = json_loadb(resp, x->resp.len, 0, NULL);
        json_t *ok = json_is_object(j) ? json_object_get(j, "success") : NULL;
        if (ok && json_is_false(ok)) {
            json_t *msg = json_object_get(j, "message");
            snprintf(t->why, sizeof t->why, "HTTP %ld, success false: %.150s", code,
                     json_is_string(msg) ? json_string_value(msg) : "(no message)");
        } else {
            t->ok = true;
        }
        json_decref(j);
    } else {
        snprintf(t->why, sizeof t->why, "HTTP %ld: %.*s", code, (int)(x->resp.len < 160 ? x->resp.len : 160), resp);
    }
}

/* The queue's abort hook: the synchronizer is being freed. */
static int round_aborted(void *payload)
{
    rlp_synchronizer *s = payload;
    return atomic_load(&s->http_abort);
}

int rlpi_http_update(rlp_synchronizer *s, uint64_t version, bool *sent)
{
    *sent = false;
    int rc = rlpi_curl_global_init();
    if (rc)
        return rc;
    pthread_mutex_lock(&s->http_mu);
    size_t n = 0;
    /* the round works on copies of the URLs: rlp_synchronizer_set_urls() may
     * change the set while it runs, and results are written back by URL */
    pthread_mutex_lock(&s->mu);
    size_t cap = s->n_targets ? s->n_targets : 1;
    target_post *posts = calloc(cap, sizeof *posts);
    rlpi_http_req *xs = calloc(cap, sizeof *xs);
    if (!posts || !xs)
        rc = rlpi_error_set(RLP_E_NOMEM, "weight update: out of memory");
    for (size_t i = 0; rc == RLP_OK && i < s->n_targets; i++)
        if (s->targets[i].version < 0 || (uint64_t)s->targets[i].version < version) {
            if ((posts[n].base = strdup(s->targets[i].url)))
                n++;
            else
                rc = rlpi_error_set(RLP_E_NOMEM, "weight update: out of memory");
        }
    pthread_mutex_unlock(&s->mu);

    char *body = NULL;
    struct curl_slist *headers = NULL;
    rlpi_http_queue *queue = NULL;
    if (rc == RLP_OK && n) {
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
        /* no jitter: one trainer asks each server once per version; every
         * transport error is worth another try (the server may be starting) */
        rlpi_http_queue_opts qo = {.backoff_ms = FIRST_BACKOFF_MS, .max_backoff_ms = MAX_BACKOFF_MS,
                                   .retry_any_curl_error = 1, .poll_ms = POLL_MS, .abort = round_aborted,
                                   .payload = s};
        /* the queue outlives the round: its connections are reused by the next */
        queue = s->http_queue;
        if (!queue && rlpi_http_queue_create(&queue, &qo) == RLP_OK)
            s->http_queue = queue;
        if (!body || !headers || !queue)
            rc = rlpi_error_set(RLP_E_NOMEM, "weight update: out of memory");
    }
    for (size_t i = 0; rc == RLP_OK && i < n; i++) {
        if (!(posts[i].url = endpoint(posts[i].base))) {
            rc = rlpi_error_set(RLP_E_NOMEM, "weight update: out of memory");
            break;
        }
        rlpi_http_req *x = &xs[i];
        x->urls = (const char *const *)&posts[i].url;
        x->n_urls = 1;
        x->body = body;
        x->body_len = strlen(body);
        x->headers = headers;
        x->timeout_ms = (long)s->opts.timeout_ms;
        x->connect_timeout_ms = (long)(s->opts.timeout_ms < CONNECT_TIMEOUT_MS ? s->opts.timeout_ms
                                                                               : CONNECT_TIMEOUT_MS);
        /* the response is a small JSON status; a declared length up to 1 MiB is read (and
         * refused past 64 KiB), one above is refused before */
        x->response_limit = RESPONSE_LIMIT;
        x->max_declared = 1u << 20;
        x->max_retries = s->opts.max_retries;
    }
    if (rc == RLP_OK && n) {
        int qrc = rlpi_http_queue_run(queue, xs, n);
        if (qrc == RLP_E_NOMEM)
            rc = qrc;
    }
    for (size_t i = 0; rc == RLP_OK && i < n; i++)
        judge(&posts[i], &xs[i]);

    char msg[1024] = "";
    size_t mlen = 0, failed = 0;
    uint64_t attempts = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        attempts += xs[i].attempts;
        if (posts[i].ok) {
            for (size_t k = 0; k < s->n_targets; k++)
                if (!strcmp(s->targets[k].url, posts[i].base) &&
                    (s->targets[k].version < 0 || (uint64_t)s->targets[k].version < version))
                    s->targets[k].version = (int64_t)version;
            *sent = true;
        } else if (rc == RLP_OK) {
            failed++;
            if (mlen < sizeof msg)
                mlen += (size_t)snprintf(msg + mlen, sizeof msg - mlen, "%s%s (%u attempts): %s", failed > 1 ? "; " : "",
                                         posts[i].url, xs[i].attempts, posts[i].why);
        }
    }
    s->st.http_requests += attempts;
    s->st.http_failures += failed;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        rlpi_http_req_release(&xs[i]);
        free(posts[i].url);
        free(posts[i].base);
    }
    curl_slist_free_all(headers);
    free(body);
    free(posts);
    free(xs);
    pthread_mutex_unlock(&s->http_mu);
    if (rc == RLP_OK && failed)
        rc = rlpi_error_set(RLP_E_NETWORK, "version %" PRIu64 " reached %zu of %zu servers; %s", version, n - failed,
                            n, msg);
    return rc;
}

void rlpi_http_release(rlp_synchronizer *s)
{
    rlpi_http_queue_free(s->http_queue);
    s->http_queue = NULL;
}
