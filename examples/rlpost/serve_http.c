/* The HTTP side of `rlpost serve` on libmicrohttpd, one thread per
 * connection: routing (404 unknown path, 405 wrong method), bearer-token
 * auth compared in constant time (401), the request-body limit (413),
 * JSON error bodies, blocking hand-off to the scheduler and SSE responses.
 * Every error is decided when the headers arrive but answered after the
 * body is drained, so a client still sending never sees a reset instead of
 * its status (except for a declared body far beyond the limit).
 * The guard: a request's headers must arrive within a deadline that each
 * byte does not extend, and its body within one derived from its size (a
 * thread closes late connections: slowloris); past --max-pending requests
 * or 3/4 of the connection limit, generation requests get 503 with
 * Retry-After, so that /health and weight updates keep their room;
 * non-loopback addresses have a per-address connection limit.
 * GET /v1/rlpost/weights/... serves --weights-dir read-only (serve_weights.c
 * picks the file; Range requests get 206 or 416) for relays; a server
 * without an engine (`rlpost weights-serve`) answers only that and /health. */
#include "serve.h"

#include <inttypes.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* Open connections at most (each a thread; lowered to fit RLIMIT_NOFILE).
 * Far above what generation admits, so that a burst is answered with 503
 * instead of libmicrohttpd's accept-and-close at the limit. */
#define MAX_CONNECTIONS 1024
/* Connections from one non-loopback address at most (loopback is exempt:
 * the trainer and local workers all come from 127.0.0.1). */
#define MAX_PER_ADDRESS 128
/* Idle timeout while a response is being sent (libmicrohttpd's, reset by
 * each byte; the guard's deadlines cover the request). */
#define IDLE_TIMEOUT_S 120
/* The slowest body upload accepted: its deadline is the header timeout
 * plus its size at this rate. */
#define MIN_BODY_BYTES_PER_S 65536u
/* How often the guard looks at the deadlines. */
#define GUARD_TICK_MS 50
/* Stack of a connection thread: request parsing and weight loading need
 * far less; 1024 threads of the default 8 MiB would reserve 8 GiB. */
#define CONN_STACK_BYTES (1u << 20)
/* How long a weight update on a relay-following server waits for the
 * version to arrive (below the HTTP transport's default 120 s timeout). */
#define RELAY_UPDATE_WAIT_MS 100000u
/* Longest wait of a generation request for the weights its
 * "min_weight_version" asks for. */
#define MIN_VERSION_WAIT_MS 60000u
/* A declared Content-Length this far past the limit is refused at once
 * (and the connection closed) instead of being read and thrown away. */
#define DRAIN_SLACK_BYTES (16u << 20)

enum route { R_NONE = 0, R_COMPLETIONS, R_CHAT, R_MODELS, R_HEALTH, R_UPDATE, R_LORA, R_WEIGHTS };

static const struct {
    const char *path;
    int route;
    const char *method; /* GET routes also answer HEAD */
} routes[] = {
    {"/v1/completions", R_COMPLETIONS, "POST"},
    {"/v1/chat/completions", R_CHAT, "POST"},
    {"/v1/models", R_MODELS, "GET"},
    {"/health", R_HEALTH, "GET"},
    {"/update_weights_from_disk", R_UPDATE, "POST"},
    {"/load_lora_adapter", R_LORA, "POST"},    /* SGLang's spelling */
    {"/v1/load_lora_adapter", R_LORA, "POST"}, /* vLLM's */
};

typedef struct conn_ctx {
    int route;
    unsigned err_status;  /* decided from the headers; answered after the body */
    const char *err_type;
    const char *allow;    /* Allow header of a 405 */
    char err_msg[160];
    char *body;           /* (len) bytes, NUL-terminated */
    size_t len, cap;
    bool too_large;
    bool admitted;        /* counted in srv->n_admitted */
} conn_ctx;

/* What the guard knows of one connection (its socket context). */
enum { PH_HEADERS = 0, PH_BODY = 1, PH_HANDLING = 2 };
typedef struct guard_conn {
    struct guard_conn *prev, *next;
    int fd;
    struct sockaddr_storage addr;
    bool loopback;
    int phase;
    bool closed;          /* shut down by the guard */
    uint64_t deadline_ns; /* of PH_HEADERS and PH_BODY (CLOCK_MONOTONIC) */
} guard_conn;

struct serve_http {
    serve_server *srv;
    struct MHD_Daemon *d;
    unsigned limit;       /* connection limit */
    pthread_mutex_t mu;   /* the list, phases, deadlines */
    pthread_cond_t cv;
    guard_conn *head;
    bool stop, started;
    pthread_t thread;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool serve_addr_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

int serve_listen_addr(const char *cmd, const char *host, long long port, bool has_token, struct addrinfo **ai)
{
    char port_str[16];
    snprintf(port_str, sizeof port_str, "%lld", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    *ai = NULL;
    int gai = getaddrinfo(host, port_str, &hints, ai);
    if (gai != 0) {
        fprintf(stderr, "%s: --host %s: %s\n", cmd, host, gai_strerror(gai));
        return -1;
    }
    if (!has_token && !serve_addr_loopback((*ai)->ai_addr)) {
        fprintf(stderr, "%s: --host %s is not a loopback address: give a token (--token-file PATH or "
                        "RLPOST_SERVE_TOKEN)\n", cmd, host);
        freeaddrinfo(*ai);
        *ai = NULL;
        return -1;
    }
    return 0;
}

static bool same_host(const struct sockaddr *a, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                       sizeof(struct in6_addr));
    return false;
}

/* libmicrohttpd's accept policy: the per-address limit. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    serve_http *h = cls;
    if (!addr || serve_addr_loopback(addr))
        return MHD_YES;
    unsigned n = 0;
    pthread_mutex_lock(&h->mu);
    for (guard_conn *g = h->head; g && n < MAX_PER_ADDRESS; g = g->next)
        n += same_host(addr, &g->addr);
    pthread_mutex_unlock(&h->mu);
    if (n < MAX_PER_ADDRESS)
        return MHD_YES;
    __atomic_add_fetch(&h->srv->n_refused_ip, 1, __ATOMIC_RELAXED);
    return MHD_NO;
}

/* Connections come and go: the guard's list. Called before the socket is
 * closed, so the guard never shuts down a reused descriptor. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    serve_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        guard_conn *g = calloc(1, sizeof *g);
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!g || !fd) { /* untracked: only libmicrohttpd's idle timeout applies */
            free(g);
            *socket_context = NULL;
            return;
        }
        g->fd = (int)fd->connect_fd;
        if (ad && ad->client_addr) {
            const struct sockaddr *sa = ad->client_addr;
            size_t n = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
            memcpy(&g->addr, sa, n);
            g->loopback = serve_addr_loopback(sa);
        }
        g->phase = PH_HEADERS;
        g->deadline_ns = now_ns() + (uint64_t)h->srv->cfg.header_timeout_ms * 1000000u;
        pthread_mutex_lock(&h->mu);
        g->next = h->head;
        if (h->head)
            h->head->prev = g;
        h->head = g;
        pthread_mutex_unlock(&h->mu);
        __atomic_add_fetch(&h->srv->n_conns, 1, __ATOMIC_RELAXED);
        *socket_context = g;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        guard_conn *g = *socket_context;
        pthread_mutex_lock(&h->mu);
        if (g->prev)
            g->prev->next = g->next;
        else
            h->head = g->next;
        if (g->next)
            g->next->prev = g->prev;
        pthread_mutex_unlock(&h->mu);
        __atomic_sub_fetch(&h->srv->n_conns, 1, __ATOMIC_RELAXED);
        free(g);
        *socket_context = NULL;
    }
}

/* Moves a connection to another phase; `ms` from now is the deadline of
 * PH_HEADERS and PH_BODY. */
static void set_phase(serve_http *h, struct MHD_Connection *c, int phase, uint64_t ms)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    guard_conn *g = ci ? ci->socket_context : NULL;
    if (!g)
        return;
    pthread_mutex_lock(&h->mu);
    g->phase = phase;
    g->deadline_ns = now_ns() + ms * 1000000u;
    pthread_mutex_unlock(&h->mu);
}

/* Closes connections whose headers or body are late. shutdown() (not
 * close(): the descriptor stays libmicrohttpd's) wakes the connection's
 * thread with end-of-file, and libmicrohttpd closes it. */
static void *guard_main(void *arg)
{
    serve_http *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        uint64_t t = now_ns();
        for (guard_conn *g = h->head; g; g = g->next) {
            if (g->phase == PH_HANDLING || g->closed || t < g->deadline_ns)
                continue;
            shutdown(g->fd, SHUT_RDWR);
            g->closed = true;
            __atomic_add_fetch(&h->srv->n_timed_out, 1, __ATOMIC_RELAXED);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += GUARD_TICK_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (!fmt)
        return;
    fprintf(stderr, "rlpost serve: ");
    vfprintf(stderr, fmt, ap);
    size_t n = strlen(fmt);
    if (n == 0 || fmt[n - 1] != '\n')
        fputc('\n', stderr);
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j, const char *allow)
{
    char *s = j ? json_dumps(j, DUMP_FLAGS) : NULL;
    json_decref(j);
    if (!s)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* OpenAI's error body: {"error": {"message", "type", "param", "code"}}. */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *msg,
                                  const char *allow)
{
    json_t *e = json_pack("{s:{s:o?, s:s, s:n, s:i}}", "error", "message", serve_json_text(msg, strlen(msg)),
                          "type", type, "param", "code", (int)status);
    return send_json(c, status, e, allow);
}

/* "Bearer T" against the token (NULL: open), in time independent of where
 * they differ. */
static bool authorized(const char *want, struct MHD_Connection *c)
{
    if (!want)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    size_t hl = strlen(h), wl = strlen(want);
    unsigned char diff = hl != wl;
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)((i < hl ? h[i] : 0) ^ want[i]);
    return diff == 0;
}

static void decide(serve_server *srv, struct MHD_Connection *c, const char *url, const char *method,
                   conn_ctx *ctx)
{
    size_t i, n = sizeof routes / sizeof routes[0];
    for (i = 0; i < n && strcmp(url, routes[i].path) != 0; i++)
        ;
    if (!strncmp(url, SERVE_WEIGHTS_ROUTE, strlen(SERVE_WEIGHTS_ROUTE))) {
        /* the weights folder, read-only, for relays (the server's token, if any) */
        if (!authorized(srv->cfg.token, c)) {
            ctx->err_status = MHD_HTTP_UNAUTHORIZED;
            ctx->err_type = "authentication_error";
            snprintf(ctx->err_msg, sizeof ctx->err_msg, "missing or wrong bearer token (Authorization: Bearer ...)");
        } else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
            ctx->err_status = MHD_HTTP_METHOD_NOT_ALLOWED;
            ctx->err_type = "invalid_request_error";
            ctx->allow = "GET, HEAD";
            snprintf(ctx->err_msg, sizeof ctx->err_msg, "the weights folder takes GET, not %.16s", method);
        } else if (!srv->cfg.weights_root) {
            ctx->err_status = MHD_HTTP_NOT_FOUND;
            ctx->err_type = "not_found_error";
            snprintf(ctx->err_msg, sizeof ctx->err_msg, "no weights folder: start the server with --weights-dir DIR");
        } else {
            ctx->route = R_WEIGHTS;
        }
        return;
    }
    /* /health stays open for load balancers; nothing else says anything
     * without the token; weight updates always need one (the generated one
     * when the server has none) */
    int route = i < n ? routes[i].route : R_NONE;
    if (!srv->engine && route != R_HEALTH) { /* `rlpost weights-serve`: the folder and /health only */
        ctx->err_status = MHD_HTTP_NOT_FOUND;
        ctx->err_type = "not_found_error";
        snprintf(ctx->err_msg, sizeof ctx->err_msg, "this server only serves weights (" SERVE_WEIGHTS_ROUTE "...)");
        return;
    }
    bool update = route == R_UPDATE || route == R_LORA; /* both replace what the engine decodes with */
    const char *want = update ? srv->cfg.update_token : route == R_HEALTH ? NULL : srv->cfg.token;
    if (update && !srv->cfg.weights_root) {
        ctx->err_status = MHD_HTTP_FORBIDDEN;
        ctx->err_type = "permission_error";
        snprintf(ctx->err_msg, sizeof ctx->err_msg,
                 "weight updates are off: start the server with --weights-dir DIR to load folders below DIR");
        return;
    }
    if (!authorized(want, c)) {
        ctx->err_status = MHD_HTTP_UNAUTHORIZED;
        ctx->err_type = "authentication_error";
        snprintf(ctx->err_msg, sizeof ctx->err_msg, "missing or wrong bearer token (Authorization: Bearer ...)");
        return;
    }
    if (i == n) {
        ctx->err_status = MHD_HTTP_NOT_FOUND;
        ctx->err_type = "not_found_error";
        snprintf(ctx->err_msg, sizeof ctx->err_msg, "no such endpoint: %.100s", url);
        return;
    }
    bool get = !strcmp(routes[i].method, "GET");
    if (strcmp(method, routes[i].method) != 0 && !(get && !strcmp(method, "HEAD"))) {
        ctx->err_status = MHD_HTTP_METHOD_NOT_ALLOWED;
        ctx->err_type = "invalid_request_error";
        ctx->allow = get ? "GET, HEAD" : "POST";
        snprintf(ctx->err_msg, sizeof ctx->err_msg, "%.100s takes %s, not %.16s", url, routes[i].method, method);
        return;
    }
    ctx->route = routes[i].route;
}

static bool append_body(conn_ctx *ctx, const char *data, size_t n, size_t limit)
{
    if (ctx->too_large || ctx->err_status)
        return true; /* drained, not kept */
    if (n > limit - ctx->len) {
        ctx->too_large = true;
        free(ctx->body);
        ctx->body = NULL;
        ctx->len = ctx->cap = 0;
        return true;
    }
    if (ctx->len + n + 1 > ctx->cap) {
        size_t cap = (ctx->len + n + 1) * 2;
        if (cap > limit + 1)
            cap = limit + 1;
        char *b = realloc(ctx->body, cap);
        if (!b)
            return false;
        ctx->body = b;
        ctx->cap = cap;
    }
    memcpy(ctx->body + ctx->len, data, n);
    ctx->len += n;
    ctx->body[ctx->len] = '\0';
    return true;
}

static int client_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    serve_job *job = cls;
    ssize_t n = serve_stream_read(job, buf, max, job->client_fd);
    if (n == -1)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
}

/* After the stream ends or the client leaves: stop its sequences, drop the ref. */
static void sse_free(void *cls)
{
    serve_job *job = cls;
    serve_job_cancel(job);
    serve_job_unref(job);
}

static unsigned status_of(int rc)
{
    switch (rc) {
    case RLP_E_INVALID_ARG: return MHD_HTTP_BAD_REQUEST;
    case RLP_E_CLOSED: return MHD_HTTP_SERVICE_UNAVAILABLE;
    default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

/* A weight update for `version` failed here: requests that need that
 * version fail at once instead of waiting for it (wait_min_version).
 * Caller holds update_mu. */
static void update_refused_locked(serve_server *srv, uint64_t version, const char *why)
{
    if (version > srv->refused_version) {
        srv->refused_version = version;
        snprintf(srv->refused_why, sizeof srv->refused_why, "%.200s", why);
    }
}

static void update_refused(serve_server *srv, uint64_t version, const char *why)
{
    pthread_mutex_lock(&srv->update_mu);
    update_refused_locked(srv, version, why);
    pthread_mutex_unlock(&srv->update_mu);
}

/* "min_weight_version" V: waits until the engine holds version V or newer
 * (a follower asks its relay for it at once; otherwise a weight update is
 * on its way from the trainer), at most MIN_VERSION_WAIT_MS. -1 with the
 * reason when it did not come (503: the client tries again, or elsewhere). */
static int wait_min_version(serve_server *srv, uint64_t v, char *why, size_t n)
{
    uint64_t have = 0;
    rlp_rollout_engine_version(&have, srv->engine);
    if (have >= v)
        return 0;
    if (srv->follow)
        return serve_follow_wait(srv->follow, v, MIN_VERSION_WAIT_MS, why, n);
    for (unsigned waited = 0; waited < MIN_VERSION_WAIT_MS && !__atomic_load_n(&srv->stopping, __ATOMIC_SEQ_CST);
         waited += 10) {
        /* the update that would bring it was refused: say so now */
        pthread_mutex_lock(&srv->update_mu);
        bool refused = srv->refused_version >= v;
        if (refused)
            snprintf(why, n, "this server holds weight version %llu and refused the update to version %llu "
                     "(%s), so it cannot serve min_weight_version %llu", (unsigned long long)have,
                     (unsigned long long)srv->refused_version, srv->refused_why, (unsigned long long)v);
        pthread_mutex_unlock(&srv->update_mu);
        if (refused)
            return -1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        rlp_rollout_engine_version(&have, srv->engine);
        if (have >= v)
            return 0;
    }
    snprintf(why, n, "this server holds weight version %llu, older than min_weight_version %llu, and no newer one "
             "came within %u ms", (unsigned long long)have, (unsigned long long)v, MIN_VERSION_WAIT_MS);
    return -1;
}

static enum MHD_Result handle_generate(serve_server *srv, struct MHD_Connection *c, conn_ctx *ctx, bool chat)
{
    char err[512];
    serve_job *job = chat ? serve_parse_chat(srv, ctx->body, ctx->len, err, sizeof err)
                          : serve_parse_completion(srv, ctx->body, ctx->len, err, sizeof err);
    if (!job)
        return send_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", err, NULL);
    if (job->min_version && wait_min_version(srv, job->min_version, err, sizeof err) != 0) {
        serve_job_unref(job);
        return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", err, NULL);
    }
    job->client_fd = client_fd(c);
    if (serve_submit(srv, job) != RLP_OK) {
        serve_job_unref(job);
        return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", "the server is shutting down", NULL);
    }
    if (job->stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, job, sse_free);
        if (!r) {
            sse_free(job);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (serve_wait(srv, job, job->client_fd) != 0) {
        serve_job_unref(job);
        return MHD_NO; /* the client left: close */
    }
    if (job->status != RLP_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "generation failed: %s", job->error ? job->error : rlp_status_str(job->status));
        unsigned status = status_of(job->status);
        serve_job_unref(job);
        return send_error(c, status, status == MHD_HTTP_BAD_REQUEST ? "invalid_request_error" : "server_error",
                          msg, NULL);
    }
    json_t *resp = serve_response(srv, job);
    serve_job_unref(job);
    if (!resp)
        return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", "out of memory", NULL);
    return send_json(c, MHD_HTTP_OK, resp, NULL);
}

/* SGLang's answer shape {"success", "message"} plus OpenAI's error object. */
static enum MHD_Result update_failed(struct MHD_Connection *c, const char *msg)
{
    json_t *e = json_pack("{s:b, s:o?, s:{s:o?, s:s, s:n, s:i}}", "success", 0, "message",
                          serve_json_text(msg, strlen(msg)), "error", "message", serve_json_text(msg, strlen(msg)),
                          "type", "invalid_request_error", "param", "code", MHD_HTTP_BAD_REQUEST);
    return send_json(c, MHD_HTTP_BAD_REQUEST, e, NULL);
}

/* The real path of `p` if it is below `root`, else false: a path that does
 * not exist and one outside get the same answer, so that the endpoint
 * tells nothing about files elsewhere. */
static bool below_root(const char *root, const char *p, char *real)
{
    size_t n = strlen(root);
    if (!realpath(p, real))
        return false;
    if (n == 1 && root[0] == '/')
        return real[1] != '\0';
    return !strncmp(real, root, n) && real[n] == '/' && real[n + 1] != '\0';
}

/* "version" (or SGLang's "weight_version", which it sends as a string of
 * digits); absent: keep *version. */
static int update_version(const json_t *o, uint64_t *version)
{
    const json_t *v = json_object_get(o, "version");
    if (!v || json_is_null(v))
        v = json_object_get(o, "weight_version");
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *version = (uint64_t)json_integer_value(v);
        return 0;
    }
    size_t n = json_is_string(v) ? json_string_length(v) : 0;
    if (n > 0 && n < 20 && strspn(json_string_value(v), "0123456789") == n) {
        *version = strtoull(json_string_value(v), NULL, 10);
        return 0;
    }
    return -1;
}

/* SGLang's POST /update_weights_from_disk {"model_path": DIR, "version": N}:
 * loads a folder rlp_policy_save() wrote (or a PEFT adapter folder) while
 * generation goes on. With `adapter` it is /load_lora_adapter
 * {"lora_name": NAME, "lora_path": DIR, "version": N} (SGLang's and vLLM's
 * fields): the folder must be a PEFT adapter folder, applied to the
 * server's base; the one adapter set replaces the last (lora_name is only
 * echoed: requests do not pick adapters by name). Same token, same
 * --weights-dir root, same versioning. */
static enum MHD_Result handle_update(serve_server *srv, struct MHD_Connection *c, conn_ctx *ctx, bool adapter)
{
    char err[512];
    json_t *o = serve_parse_body(ctx->body, ctx->len, err, sizeof err);
    if (!o)
        return update_failed(c, err);
    const json_t *path = json_object_get(o, adapter ? "lora_path" : "model_path");
    if (!path)
        path = json_object_get(o, "path");
    uint64_t version = 0;
    rlp_rollout_engine_version(&version, srv->engine);
    version++; /* default: the next one */
    char p[4096];
    bool ok = json_is_string(path) && json_string_length(path) > 0 && json_string_length(path) < sizeof p &&
              strlen(json_string_value(path)) == json_string_length(path);
    if (ok)
        snprintf(p, sizeof p, "%s", json_string_value(path));
    int vrc = update_version(o, &version);
    json_decref(o);
    const char *key = adapter ? "lora_path" : "model_path";
    char why[160];
    if (!ok) {
        snprintf(why, sizeof why, "'%s' must be a non-empty string: the folder %s wrote", key,
                 adapter ? "rlp_policy_save_lora() or PEFT's save_pretrained" : "rlp_policy_save()");
        return update_failed(c, why);
    }
    if (vrc)
        return update_failed(c, "'version' must be a non-negative integer");
    if (srv->follow && !adapter) {
        /* this server follows a parent (--weights-from): the folder named is
         * the trainer's, not ours; the request says which version to hold,
         * and the relay brings it */
        char msg[900];
        if (serve_follow_wait(srv->follow, version, RELAY_UPDATE_WAIT_MS, msg, sizeof msg) != 0)
            return update_failed(c, msg);
        uint64_t have = 0;
        rlp_rollout_engine_version(&have, srv->engine);
        snprintf(msg, sizeof msg, "weight version %llu through the relay", (unsigned long long)have);
        fprintf(stderr, "rlpost serve: update_weights_from_disk: %s\n", msg);
        return send_json(c, MHD_HTTP_OK,
                         json_pack("{s:b, s:s, s:I, s:I}", "success", 1, "message", msg, "version", (json_int_t)have,
                                   "weight_version", (json_int_t)have),
                         NULL);
    }
    char real[PATH_MAX];
    if (!below_root(srv->cfg.weights_root, p, real)) {
        snprintf(why, sizeof why, "'%s' is not a folder below the server's --weights-dir", key);
        update_refused(srv, version, why);
        return update_failed(c, why);
    }
    snprintf(p, sizeof p, "%s", real);
    if (adapter) {
        char cfg[PATH_MAX + 32];
        snprintf(cfg, sizeof cfg, "%s/adapter_config.json", p);
        if (access(cfg, R_OK) != 0)
            return update_failed(c, "'lora_path' is not a PEFT adapter folder (no adapter_config.json)");
    }
    pthread_mutex_lock(&srv->update_mu);
    int rc = rlp_rollout_engine_load_weights(srv->engine, p, version);
    char msg[1024];
    if (rc == RLP_OK) {
        snprintf(msg, sizeof msg, "loaded %.900s as weight version %llu", p, (unsigned long long)version);
        srv->refused_version = 0;
    } else {
        snprintf(msg, sizeof msg, "%s", rlp_error_last());
        update_refused_locked(srv, version, msg);
    }
    pthread_mutex_unlock(&srv->update_mu);
    fprintf(stderr, "rlpost serve: %s: %s\n", adapter ? "load_lora_adapter" : "update_weights_from_disk", msg);
    if (rc != RLP_OK)
        return update_failed(c, msg);
    return send_json(c, MHD_HTTP_OK,
                     json_pack("{s:b, s:o?, s:I, s:I}", "success", 1, "message", serve_json_text(msg, strlen(msg)),
                               "version", (json_int_t)version, "weight_version", (json_int_t)version),
                     NULL);
}

/* GET /v1/rlpost/weights/<latest.json | v<N>/<file>>: a file of the
 * weights folder, whole (200) or the Range asked for (206 with
 * Content-Range; 416 outside the file), sent from the descriptor
 * (sendfile). A relay resumes a cut transfer this way. */
typedef struct grow_reader {
    int fd;
    uint64_t first;
    const char *root;  /* the server's weights_root */
    uint64_t version;  /* of the file */
} grow_reader;

static ssize_t grow_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    grow_reader *g = cls;
    ssize_t n = serve_weights_read(g->root, g->version, g->fd, g->first + pos, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

static void grow_free(void *cls)
{
    grow_reader *g = cls;
    close(g->fd);
    free(g);
}

static enum MHD_Result handle_weights(serve_server *srv, struct MHD_Connection *c, const char *url)
{
    int fd;
    uint64_t size, first = 0, last = 0;
    bool manifest, growing;
    const char *rel = url + strlen(SERVE_WEIGHTS_ROUTE);
    if (serve_weights_open(srv->cfg.weights_root, rel, &fd, &size, &manifest, &growing) != 200) {
        char msg[160];
        snprintf(msg, sizeof msg, "no such file in the weights folder: %.100s", rel);
        return send_error(c, MHD_HTTP_NOT_FOUND, "not_found_error", msg, NULL);
    }
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
    int r = serve_range_parse(range, size, &first, &last);
    char cr[96];
    if (r < 0) {
        close(fd);
        snprintf(cr, sizeof cr, "bytes */%" PRIu64, size);
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (r == 0) {
        first = 0;
        last = size ? size - 1 : 0;
    }
    uint64_t len = size ? last - first + 1 : 0;
    struct MHD_Response *resp = NULL;
    if (growing) { /* the version this server is still fetching: sent as it arrives */
        grow_reader *g = malloc(sizeof *g);
        if (g) {
            /* "v<N>/<file>": serve_weights_open() checked the form */
            *g = (grow_reader){fd, first, srv->cfg.weights_root, strtoull(rel + 1, NULL, 10)};
            resp = MHD_create_response_from_callback(len, 1u << 16, grow_read, g, grow_free);
            if (!resp)
                free(g);
        }
    } else { /* takes the descriptor (closed with the response) */
        resp = MHD_create_response_from_fd_at_offset64(len, fd, first);
    }
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            manifest ? "application/json" : "application/octet-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (manifest) /* replaced at every version */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (r > 0) {
        snprintf(cr, sizeof cr, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last, size);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    }
    enum MHD_Result ret = MHD_queue_response(c, r > 0 ? MHD_HTTP_PARTIAL_CONTENT : MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result handle_health(serve_server *srv, struct MHD_Connection *c)
{
    uint64_t version = 0;
    if (!srv->engine) { /* weights only: the complete version the folder's manifest names */
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/latest.json", srv->cfg.weights_root);
        json_t *m = json_load_file(path, 0, NULL);
        json_t *v = json_object_get(m, "version");
        json_int_t ver = json_is_integer(v) ? json_integer_value(v) : 0;
        json_decref(m);
        return send_json(c, MHD_HTTP_OK,
                         json_pack("{s:s, s:I, s:I, s:s, s:b}", "status", "ok", "version", ver, "weight_version", ver,
                                   "library_version", rlp_version_string(), "weights_only", 1),
                         NULL);
    }
    rlp_rollout_stats st = {.version = 1};
    rlp_rollout_engine_version(&version, srv->engine);
    rlp_rollout_engine_stats(&st, srv->engine);
    pthread_mutex_lock(&srv->mu);
    json_t *j = json_pack("{s:s, s:I, s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "status", "ok", "version",
                          (json_int_t)version, "weight_version", (json_int_t)version, "library_version",
                          rlp_version_string(), "model", srv->cfg.model_name, "queued", (json_int_t)srv->n_queued,
                          "running", (json_int_t)srv->n_running, "requests_done", (json_int_t)srv->n_jobs_done,
                          "generate_calls", (json_int_t)srv->n_calls, "max_requests_per_call",
                          (json_int_t)srv->max_jobs_per_call);
    pthread_mutex_unlock(&srv->mu);
    json_t *g = json_pack("{s:I, s:I, s:I, s:I, s:I}", "connections",
                          (json_int_t)__atomic_load_n(&srv->n_conns, __ATOMIC_RELAXED), "admitted",
                          (json_int_t)__atomic_load_n(&srv->n_admitted, __ATOMIC_RELAXED), "busy_rejected",
                          (json_int_t)__atomic_load_n(&srv->n_busy, __ATOMIC_RELAXED), "timed_out",
                          (json_int_t)__atomic_load_n(&srv->n_timed_out, __ATOMIC_RELAXED), "refused_per_address",
                          (json_int_t)__atomic_load_n(&srv->n_refused_ip, __ATOMIC_RELAXED));
    if (j && g)
        json_object_set_new(j, "http", g);
    else
        json_decref(g);
    json_t *s = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "prompts", (json_int_t)st.prompts,
                          "completions", (json_int_t)st.completions, "prefill_tokens", (json_int_t)st.prefill_tokens,
                          "decode_tokens", (json_int_t)st.decode_tokens, "decode_steps", (json_int_t)st.decode_steps,
                          "interrupts", (json_int_t)st.interrupts, "prefill_seconds", st.prefill_seconds,
                          "decode_seconds", st.decode_seconds, "decode_tokens_per_s",
                          st.decode_seconds > 0 ? (double)st.decode_tokens / st.decode_seconds : 0.0);
    if (j && s)
        json_object_set_new(j, "stats", s);
    else
        json_decref(s);
    return send_json(c, MHD_HTTP_OK, j, NULL);
}

static enum MHD_Result handle_models(serve_server *srv, struct MHD_Connection *c)
{
    uint64_t version = 0;
    rlp_rollout_engine_version(&version, srv->engine);
    json_t *j = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I, s:I}]}", "object", "list", "data", "id",
                          srv->cfg.model_name, "object", "model", "created", (json_int_t)0, "owned_by", "rlpost",
                          "max_model_len", (json_int_t)srv->cfg.max_seq_len, "weight_version", (json_int_t)version);
    return send_json(c, MHD_HTTP_OK, j, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    serve_http *h = cls;
    serve_server *srv = h->srv;
    conn_ctx *ctx = *con_cls;
    if (!ctx) { /* headers are in; the body (if any) follows */
        if (!(ctx = calloc(1, sizeof *ctx)))
            return MHD_NO;
        *con_cls = ctx;
        decide(srv, c, url, method, ctx);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        /* the body's deadline: its declared size (else the limit) at the slowest rate accepted */
        unsigned long long body_bytes = cl ? declared : srv->cfg.max_body_bytes;
        if (body_bytes > srv->cfg.max_body_bytes + (unsigned long long)DRAIN_SLACK_BYTES)
            body_bytes = srv->cfg.max_body_bytes + (unsigned long long)DRAIN_SLACK_BYTES;
        set_phase(h, c, PH_BODY, srv->cfg.header_timeout_ms + body_bytes * 1000u / MIN_BODY_BYTES_PER_S);
        if (!ctx->err_status && (ctx->route == R_COMPLETIONS || ctx->route == R_CHAT)) {
            /* admission: beyond --max-pending requests, or with the connections
             * close to the limit, a generation request is told to come back;
             * /health and weight updates are never turned away here */
            size_t adm = __atomic_add_fetch(&srv->n_admitted, 1, __ATOMIC_SEQ_CST);
            size_t conns = __atomic_load_n(&srv->n_conns, __ATOMIC_RELAXED);
            if (adm > srv->cfg.max_pending || conns > h->limit / 4 * 3) {
                __atomic_sub_fetch(&srv->n_admitted, 1, __ATOMIC_SEQ_CST);
                __atomic_add_fetch(&srv->n_busy, 1, __ATOMIC_RELAXED);
                ctx->err_status = MHD_HTTP_SERVICE_UNAVAILABLE;
                ctx->err_type = "server_error";
                snprintf(ctx->err_msg, sizeof ctx->err_msg,
                         "the server is busy (%zu generation requests pending, %zu connections): retry later",
                         adm - 1, conns);
            } else {
                ctx->admitted = true;
            }
        }
        if (declared > srv->cfg.max_body_bytes && declared - srv->cfg.max_body_bytes > DRAIN_SLACK_BYTES) {
            char msg[160];
            snprintf(msg, sizeof msg, "the request body (%llu bytes) is larger than the limit of %zu bytes", declared,
                     srv->cfg.max_body_bytes);
            return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", msg, NULL);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        bool ok = append_body(ctx, upload_data, *upload_data_size, srv->cfg.max_body_bytes);
        *upload_data_size = 0;
        return ok ? MHD_YES : MHD_NO;
    }
    set_phase(h, c, PH_HANDLING, 0); /* the whole request is in: no deadline while it is served */
    if (ctx->err_status)
        return send_error(c, ctx->err_status, ctx->err_type, ctx->err_msg, ctx->allow);
    if (ctx->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %zu bytes (--max-body-bytes)",
                 srv->cfg.max_body_bytes);
        return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", msg, NULL);
    }
    switch (ctx->route) {
    case R_COMPLETIONS: return handle_generate(srv, c, ctx, false);
    case R_CHAT: return handle_generate(srv, c, ctx, true);
    case R_UPDATE: return handle_update(srv, c, ctx, false);
    case R_LORA: return handle_update(srv, c, ctx, true);
    case R_HEALTH: return handle_health(srv, c);
    case R_MODELS: return handle_models(srv, c);
    case R_WEIGHTS: return handle_weights(srv, c, url);
    default: return MHD_NO;
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    serve_http *h = cls;
    conn_ctx *ctx = *con_cls;
    if (ctx) {
        if (ctx->admitted)
            __atomic_sub_fetch(&h->srv->n_admitted, 1, __ATOMIC_SEQ_CST);
        free(ctx->body);
        free(ctx);
    }
    *con_cls = NULL;
    /* a kept-alive connection: the next request's headers are due from now */
    set_phase(h, c, PH_HEADERS, h->srv->cfg.header_timeout_ms);
}

/* The connection limit: MAX_CONNECTIONS, or less when the descriptor
 * limit (raised to its hard limit first) leaves less room: a connection
 * refused by accept() for want of descriptors is a reset. */
static unsigned connection_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 256;
    if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < MAX_CONNECTIONS + 256) {
        rlim_t want = rl.rlim_max < MAX_CONNECTIONS + 256 ? rl.rlim_max : MAX_CONNECTIONS + 256;
        struct rlimit nr = {want, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &nr) == 0)
            rl.rlim_cur = want;
    }
    /* the model, the engine's threads, stdio and libcurl keep some */
    rlim_t room = rl.rlim_cur > 128 ? rl.rlim_cur - 128 : 16;
    return room < MAX_CONNECTIONS ? (unsigned)room : MAX_CONNECTIONS;
}

serve_http *serve_http_start(serve_server *srv, const void *sockaddr, int ipv6)
{
    serve_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->srv = srv;
    h->limit = connection_limit();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
        flags |= MHD_USE_POLL;
    if (ipv6)
        flags |= MHD_USE_IPv6;
    /* the logger first, so that the other options' complaints go through it */
    h->d = MHD_start_daemon(flags, 0, on_accept, h, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, sockaddr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_CONNECTION_LIMIT, h->limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_THREAD_STACK_SIZE,
                            (size_t)CONN_STACK_BYTES, MHD_OPTION_END);
    if (h->d && pthread_create(&h->thread, NULL, guard_main, h) == 0)
        h->started = true;
    if (!h->started) {
        serve_http_stop(h);
        return NULL;
    }
    return h;
}

unsigned serve_http_port(serve_http *h)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : 0;
}

void serve_http_stop(serve_http *h)
{
    if (!h)
        return;
    if (h->started) {
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->thread, NULL);
    }
    if (h->d)
        MHD_stop_daemon(h->d); /* its NOTIFY_CLOSED calls empty the list */
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}
