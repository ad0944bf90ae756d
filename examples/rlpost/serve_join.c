/* `rlpost serve --join TRAINER_URL`: the worker side of the swarm's control
 * plane (the trainer side is train_swarm.c). A thread registers the
 * server with the trainer's coordinator (bearer token, worker id, the URL
 * the trainer calls, the engine's weight version), heartbeats every
 * heartbeat_s the trainer names, registers again when the trainer answers
 * 404 (it restarted or forgot us), retries with backoff (at most 5 s) while
 * the trainer is unreachable, and says leave when the server shuts down.
 * The worker id (128 random bits, hex) lives in WEIGHTS_DIR/.rlpost-worker-id,
 * so a restarted worker is the same worker to the trainer's ledger. It only
 * announces: the trainer pushes requests and weight updates as before. */
#define _GNU_SOURCE 1
#include "serve.h"

#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ID_FILE ".rlpost-worker-id"
#define BACKOFF_MIN_S 0.5
#define BACKOFF_MAX_S 5.0
#define REQUEST_TIMEOUT_MS 10000L
#define LEAVE_TIMEOUT_MS 3000L
#define RESPONSE_MAX 65536

/* ---- the worker id ---------------------------------------------------------- */

static bool hex_id(const char *s)
{
    return strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

int serve_join_id(const char *dir, char *id, size_t n, char *err, size_t errlen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" ID_FILE, dir);
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) {
            char buf[64] = {0};
            ssize_t k = read(fd, buf, sizeof buf - 1);
            close(fd);
            buf[k > 0 ? k : 0] = '\0';
            buf[strcspn(buf, "\r\n")] = '\0';
            if (!hex_id(buf) || n < 33) {
                snprintf(err, errlen, "%s: not a worker id (32 hex digits); remove it to get a new one", path);
                return -1;
            }
            snprintf(id, n, "%s", buf);
            return 0;
        }
        if (errno != ENOENT) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return -1;
        }
        unsigned char raw[16];
        if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
            snprintf(err, errlen, "getrandom: %s", strerror(errno));
            return -1;
        }
        char hex[34];
        for (int i = 0; i < 16; i++)
            snprintf(hex + 2 * i, 3, "%02x", raw[i]);
        hex[32] = '\n';
        hex[33] = '\0';
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST)
            continue; /* another process made it first: read it */
        if (fd < 0 || write(fd, hex, 33) != 33 || fsync(fd) != 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            if (fd >= 0) {
                close(fd);
                unlink(path);
            }
            return -1;
        }
        close(fd);
        hex[32] = '\0';
        snprintf(id, n, "%s", hex);
        return 0;
    }
    snprintf(err, errlen, "%s: cannot be read or made", path);
    return -1;
}

/* ---- one POST --------------------------------------------------------------- */

typedef struct body_buf {
    char data[RESPONSE_MAX + 1];
    size_t len;
} body_buf;

static size_t on_data(char *p, size_t sz, size_t nm, void *ud)
{
    body_buf *b = ud;
    size_t n = sz * nm, room = RESPONSE_MAX - b->len;
    memcpy(b->data + b->len, p, n < room ? n : room);
    b->len += n < room ? n : room;
    b->data[b->len] = '\0';
    return n;
}

/* POST TRAINER/v1/rlpost/<what> with a JSON body: the HTTP status (0 when
 * none came back, with curl's reason in why) and the parsed answer in
 * *answer (NULL when it was not JSON). */
static long post(serve_join *j, const char *what, json_t *body, long timeout_ms, json_t **answer, char *why, size_t wn)
{
    *answer = NULL;
    why[0] = '\0';
    char url[sizeof j->trainer + 64], auth[SERVE_TOKEN_MAX + 32];
    snprintf(url, sizeof url, "%s/v1/rlpost/%s", j->trainer, what);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    CURL *e = text ? curl_easy_init() : NULL;
    struct curl_slist *h = NULL;
    body_buf *b = calloc(1, sizeof *b);
    long code = 0;
    if (!e || !b) {
        snprintf(why, wn, "out of memory");
        goto done;
    }
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", j->token);
    struct curl_slist *t = curl_slist_append(h, "Content-Type: application/json");
    h = t ? t : h;
    t = t ? curl_slist_append(h, auth) : NULL;
    h = t ? t : h;
    t = t ? curl_slist_append(h, "Expect:") : NULL;
    h = t ? t : h;
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    CURLcode rc = curl_easy_perform(e);
    if (rc != CURLE_OK) {
        snprintf(why, wn, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
        *answer = json_loadb(b->data, b->len, 0, NULL);
        if (code != 200) {
            json_t *m = json_object_get(json_object_get(*answer, "error"), "message");
            snprintf(why, wn, "HTTP %ld: %.200s", code, json_is_string(m) ? json_string_value(m) : b->data);
        }
    }
done:
    curl_slist_free_all(h);
    if (e)
        curl_easy_cleanup(e);
    free(b);
    free(text);
    return code;
}

static json_t *id_body(serve_join *j, bool with_url)
{
    uint64_t v = 0;
    rlp_rollout_engine_version(&v, j->engine);
    json_t *o = json_pack("{s:s, s:I}", "worker_id", j->id, "weight_version", (json_int_t)v);
    if (o && with_url)
        json_object_set_new(o, "url", json_string(j->url));
    return o;
}

/* ---- the thread ---------------------------------------------------------------- */

static void *join_main(void *arg)
{
    serve_join *j = arg;
    double backoff = BACKOFF_MIN_S;
    unsigned failures = 0;
    pthread_mutex_lock(&j->mu);
    while (!j->stop) {
        bool registered = j->registered;
        pthread_mutex_unlock(&j->mu);
        json_t *ans = NULL;
        char why[512];
        double wait;
        long code = post(j, registered ? "heartbeat" : "register", id_body(j, !registered), REQUEST_TIMEOUT_MS, &ans,
                         why, sizeof why);
        if (code == 200) {
            json_t *hb = json_object_get(ans, "heartbeat_s"), *v = json_object_get(ans, "version");
            if (!registered) {
                if (json_is_number(hb) && json_number_value(hb) >= 0.05 && json_number_value(hb) <= 3600)
                    j->heartbeat_s = json_number_value(hb);
                fprintf(stderr,
                        "rlpost serve: joined the swarm at %s as %s (trainer at version %lld, join %lld, "
                        "heartbeat every %.3g s)\n",
                        j->trainer, j->id, json_is_integer(v) ? (long long)json_integer_value(v) : -1LL,
                        (long long)json_integer_value(json_object_get(ans, "joins")), j->heartbeat_s);
            } else if (failures) {
                fprintf(stderr, "rlpost serve: the trainer answers heartbeats again (after %u failures)\n", failures);
            }
            pthread_mutex_lock(&j->mu);
            j->registered = true;
            pthread_mutex_unlock(&j->mu);
            failures = 0;
            backoff = BACKOFF_MIN_S;
            wait = j->heartbeat_s;
        } else if (registered && code == 404) {
            fprintf(stderr, "rlpost serve: the trainer does not know this worker (%s): registering again\n", why);
            pthread_mutex_lock(&j->mu);
            j->registered = false;
            pthread_mutex_unlock(&j->mu);
            wait = 0;
        } else if (!registered && (code == 400 || code == 401 || code == 403 || code == 409)) {
            /* the trainer refuses this worker for good (a wrong token, a
             * URL it cannot reach, weights of another run): asking again
             * cannot help, and serving on would only mislead */
            fprintf(stderr, "rlpost serve: --join: the trainer at %s refused this worker: %s; shutting down\n",
                    j->trainer, why);
            json_decref(ans);
            kill(getpid(), SIGTERM); /* the main thread's orderly shutdown */
            pthread_mutex_lock(&j->mu);
            break;
        } else {
            if (failures++ % 10 == 0)
                fprintf(stderr, "rlpost serve: %s %s: %s; retrying every %.1f-%.0f s\n",
                        registered ? "heartbeat to" : "registering with", j->trainer, why, BACKOFF_MIN_S,
                        BACKOFF_MAX_S);
            wait = backoff;
            backoff = backoff * 2 < BACKOFF_MAX_S ? backoff * 2 : BACKOFF_MAX_S;
        }
        json_decref(ans);
        pthread_mutex_lock(&j->mu);
        if (wait > 0 && !j->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            long long ns = ts.tv_nsec + (long long)(wait * 1e9);
            ts.tv_sec += (time_t)(ns / 1000000000LL);
            ts.tv_nsec = (long)(ns % 1000000000LL);
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        }
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

int serve_join_start(serve_join *j, const rlp_rollout_engine *engine, const char *trainer, const char *advertise,
                     const char *dir, const char *token)
{
    memset(j, 0, sizeof *j);
    size_t tl = strlen(trainer);
    while (tl > 0 && trainer[tl - 1] == '/')
        tl--;
    if (tl >= sizeof j->trainer || strlen(advertise) >= sizeof j->url) {
        fprintf(stderr, "rlpost serve: --join or --advertise URL too long\n");
        return -1;
    }
    memcpy(j->trainer, trainer, tl);
    snprintf(j->url, sizeof j->url, "%s", advertise);
    j->engine = engine;
    j->token = token;
    j->heartbeat_s = 2.0;
    char err[PATH_MAX + 256];
    if (serve_join_id(dir, j->id, sizeof j->id, err, sizeof err) != 0) {
        fprintf(stderr, "rlpost serve: --join: %s\n", err);
        return -1;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->inited = true;
    if (pthread_create(&j->thread, NULL, join_main, j) != 0) {
        fprintf(stderr, "rlpost serve: --join: cannot start the heartbeat thread\n");
        return -1;
    }
    j->started = true;
    fprintf(stderr, "rlpost serve: joining the swarm at %s as worker %s, reachable at %s\n", j->trainer, j->id, j->url);
    return 0;
}

void serve_join_stop(serve_join *j)
{
    if (!j->inited)
        return;
    pthread_mutex_lock(&j->mu);
    j->stop = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (j->started)
        pthread_join(j->thread, NULL); /* a request in flight ends within its timeout */
    if (j->registered) {
        json_t *ans = NULL;
        char why[512];
        long code = post(j, "leave", id_body(j, false), LEAVE_TIMEOUT_MS, &ans, why, sizeof why);
        json_decref(ans);
        if (code == 200)
            fprintf(stderr, "rlpost serve: left the swarm at %s\n", j->trainer);
        else
            fprintf(stderr, "rlpost serve: leaving the swarm at %s: %s\n", j->trainer, why);
    }
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    j->inited = j->started = false;
}
