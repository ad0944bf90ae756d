/* `rlpost train`'s swarm coordinator (swarm.listen; docs/scale.md §3):
 * `rlpost serve --join` workers register with the bearer token, heartbeat
 * and leave; a ledger keeps one record per worker id; a worker silent for
 * swarm.suspect_s leaves the dispatch set and is dead at swarm.dead_s, and
 * a heartbeat or a new registration puts it back. The dispatch set
 * (rollout.urls, then the live workers) goes to the trainer through
 * rlp_trainer_set_worker_urls(); the trainer's gate, buffer and staleness
 * accounting do not change. It never calls a worker: the trainer does. */
#define _GNU_SOURCE 1
#include "train.h"
#include "train_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Configuration (every build)                                              */
/* ------------------------------------------------------------------------ */

/* SWARM_MAX_RECORDS: ledger records at most; past it a new id takes the
 * place of the longest-gone dead or departed worker, so that ids that come
 * and go (restarts without an id file) cannot grow the ledger for ever */
enum { SWARM_MAX_URLS = 64, TOKEN_MAX = 256, SWARM_MAX_RECORDS = 1024 };

static int token_ok(const char *t)
{
    size_t n = t ? strlen(t) : 0;
    if (n == 0 || n > TOKEN_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0x21 || t[i] > 0x7e) /* visible ASCII: it travels in a header */
            return 0;
    return 1;
}

/* The first line of @p path, trailing white space off, into out. -1 with r->err. */
static int read_token(run *r, const char *path, char *out, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        fmt(r->err, ERR_CAP, "swarm.token_file: %s: %s", path, fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char buf[TOKEN_MAX + 2];
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[k > 0 ? k : 0] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (!token_ok(buf) || n + 1 > cap) {
        fmt(r->err, ERR_CAP,
            "swarm.token_file: %s: the first line must be the token: 1 to %d visible ASCII "
            "characters",
            path, TOKEN_MAX);
        return -1;
    }
    if (st.st_mode & 077)
        fprintf(stderr, "rlpost train: warning: swarm.token_file %s can be read by other users (chmod 600 it)\n", path);
    memcpy(out, buf, n + 1);
    return 0;
}

/* "HOST:PORT" (HOST a name, an IPv4 address or [IPv6]) into host and port. -1 when malformed. */
static int split_listen(const char *s, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
        strlen(colon + 1) > 5 || atoi(colon + 1) > 65535)
        return -1;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (*h == '[') {
        if (hl < 3 || h[hl - 1] != ']')
            return -1;
        h++;
        hl -= 2;
    } else if (memchr(h, ':', hl)) {
        return -1; /* an IPv6 address needs brackets */
    }
    if (hl + 1 > hcap || strlen(colon + 1) + 1 > pcap)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    fmt(port, pcap, "%s", colon + 1);
    return 0;
}

int train_swarm_check(run *r)
{
    const json_t *c = r->cfg;
    const char *listen = cfg_str(c, "swarm.listen"), *tf = cfg_str(c, "swarm.token_file");
    r->swarm = listen != NULL;
    double hb = cfg_num(c, "swarm.heartbeat_s"), sus = cfg_num(c, "swarm.suspect_s"), dead = cfg_num(c, "swarm.dead_s");
    long long minw = cfg_int(c, "swarm.min_workers");
    double jt = cfg_num(c, "swarm.join_timeout_s");
    if (!(hb >= 0.05 && hb <= 3600)) {
        fmt(r->err, ERR_CAP, "swarm.heartbeat_s: must be in [0.05, 3600] (seconds between a worker's heartbeats)");
        return -1;
    }
    if (!(sus > hb && sus <= 86400)) {
        fmt(r->err, ERR_CAP,
            "swarm.suspect_s: must be more than swarm.heartbeat_s (%g) and at most 86400 (a "
            "worker silent this long leaves the dispatch set)",
            hb);
        return -1;
    }
    if (!(dead >= sus && dead <= 86400)) {
        fmt(r->err, ERR_CAP, "swarm.dead_s: must be at least swarm.suspect_s (%g) and at most 86400", sus);
        return -1;
    }
    long long n_static = (long long)json_array_size(cfg_get(c, "rollout.urls"));
    if (minw < 0 || minw > SWARM_MAX_URLS - n_static) {
        fmt(r->err, ERR_CAP,
            "swarm.min_workers: must be in [0, %lld] (at most %d workers with the %lld of "
            "rollout.urls)",
            SWARM_MAX_URLS - n_static, SWARM_MAX_URLS, n_static);
        return -1;
    }
    if (!(jt >= 0 && jt <= 86400)) {
        fmt(r->err, ERR_CAP, "swarm.join_timeout_s: must be in [0, 86400]");
        return -1;
    }
    if (!listen) {
        if (tf || minw > 0) {
            fmt(r->err, ERR_CAP, "%s: needs swarm.listen (the coordinator's HOST:PORT)",
                tf ? "swarm.token_file" : "swarm.min_workers");
            return -1;
        }
        return 0;
    }
    char host[256], port[8];
    if (split_listen(listen, host, sizeof host, port, sizeof port)) {
        fmt(r->err, ERR_CAP, "swarm.listen: \"%s\" is not HOST:PORT (e.g. \"0.0.0.0:8200\", \"[::]:8200\")", listen);
        return -1;
    }
#ifndef RLPOST_HAVE_MHD
    fmt(r->err, ERR_CAP, "swarm.listen: this rlpost was built without libmicrohttpd (the coordinator's server)");
    return -1;
#endif
    if (tf) {
        if (read_token(r, tf, r->swarm_token, sizeof r->swarm_token))
            return -1;
    } else {
        const char *env = getenv("RLPOST_SERVE_TOKEN");
        if (!env || !*env) {
            fmt(r->err, ERR_CAP,
                "swarm.listen: the coordinator needs a bearer token: swarm.token_file, or "
                "RLPOST_SERVE_TOKEN in the environment (the workers' --token-file holds the same)");
            return -1;
        }
        if (!token_ok(env) || strlen(env) + 1 > sizeof r->swarm_token) {
            fmt(r->err, ERR_CAP, "RLPOST_SERVE_TOKEN: must be 1 to %d visible ASCII characters", TOKEN_MAX);
            return -1;
        }
        fmt(r->swarm_token, sizeof r->swarm_token, "%s", env);
    }
    return 0;
}

#ifndef RLPOST_HAVE_MHD

int train_swarm_start(run *r)
{
    fmt(r->err, ERR_CAP, "swarm.listen: this rlpost was built without libmicrohttpd");
    return -1;
}
int train_swarm_wait(run *r, volatile sig_atomic_t *stop)
{
    (void)r, (void)stop;
    return 0;
}
void train_swarm_set_version(train_swarm *s, uint64_t version)
{
    (void)s, (void)version;
}
json_t *train_swarm_summary(run *r)
{
    (void)r;
    return json_null();
}
void train_swarm_stop(train_swarm *s)
{
    (void)s;
}

#else

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <strings.h>
#include <sys/socket.h>

/* Largest request body: {worker_id, url, weight_version} and some slack. */
#define BODY_MAX 4096
/* A declared body beyond this is refused before it is read. */
#define DRAIN_MAX (1u << 20)
/* How often the sweeper looks at the heartbeats. */
#define SWEEP_S 0.25
#define WORKERS_ROUTE "/v1/rlpost/workers"

enum { W_ALIVE = 0, W_SUSPECT = 1, W_DEAD = 2, W_LEFT = 3 };
static const char *const state_name[] = {"alive", "suspect", "dead", "left"};

typedef struct worker {
    char id[65];
    char url[RLP_SERVER_URL_MAX];
    int state;
    uint64_t joins, heartbeats, suspected;
    double last_seen;         /* now_s() of its last register or heartbeat */
    long long last_seen_unix; /* time() of the same */
    int64_t version;          /* the weight_version it last reported; -1 none */
} worker;

struct train_swarm {
    rlp_trainer *trainer;
    char token[TOKEN_MAX + 1];
    double heartbeat_s, suspect_s, dead_s, join_timeout_s;
    long long min_workers;
    char listen_url[300];
    const char *statics[SWARM_MAX_URLS]; /* rollout.urls, borrowed from the configuration */
    size_t n_static;

    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;  /* the sweeper's tick and stop; the dispatch set changed */
    worker *w;
    size_t n_w, cap_w;
    size_t live;      /* workers in the dispatch set as last applied */
    uint64_t version; /* the trainer's, after its last step */
    bool stop;
    uint64_t n_register, n_heartbeat, n_leave, n_refused, n_updates, n_update_errors;
    char update_error[256];

    pthread_mutex_t apply_mu; /* one dispatch-set update at a time, in order */
    pthread_t sweeper;
    bool sweeper_started;
    struct MHD_Daemon *d;
};

/* ---- the dispatch set --------------------------------------------------- */

/* Gives the trainer rollout.urls and the live workers (mu not held). */
static void apply(train_swarm *s)
{
    pthread_mutex_lock(&s->apply_mu);
    const char *urls[SWARM_MAX_URLS];
    char copies[SWARM_MAX_URLS][RLP_SERVER_URL_MAX];
    size_t n = 0, live = 0;
    for (size_t i = 0; i < s->n_static; i++)
        urls[n++] = s->statics[i];
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_w && n < SWARM_MAX_URLS; i++) {
        if (s->w[i].state != W_ALIVE)
            continue;
        bool dup = false;
        for (size_t k = 0; k < n && !dup; k++)
            dup = !strcmp(urls[k], s->w[i].url);
        live++;
        if (dup)
            continue;
        fmt(copies[n], sizeof copies[n], "%s", s->w[i].url);
        urls[n] = copies[n];
        n++;
    }
    pthread_mutex_unlock(&s->mu);
    int rc = rlp_trainer_set_worker_urls(s->trainer, urls, n);
    pthread_mutex_lock(&s->mu);
    s->n_updates++;
    if (rc) {
        s->n_update_errors++;
        fmt(s->update_error, sizeof s->update_error, "%s", rlp_error_last());
        fprintf(stderr, "swarm: the dispatch set could not be updated: %s\n", s->update_error);
    } else {
        s->live = live;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->apply_mu);
}

/* Marks silent workers suspect (out of the dispatch set) and dead. */
static void *sweeper_main(void *arg)
{
    train_swarm *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(SWEEP_S * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (s->stop)
            break;
        double now = now_s();
        bool changed = false;
        for (size_t i = 0; i < s->n_w; i++) {
            worker *w = &s->w[i];
            double silent = now - w->last_seen;
            if (w->state == W_ALIVE && silent >= s->suspect_s) {
                w->state = W_SUSPECT;
                w->suspected++;
                changed = true;
                fprintf(stderr, "swarm: worker %.12s (%s) suspect: no heartbeat for %.1f s; out of the dispatch set\n",
                        w->id, w->url, silent);
            } else if (w->state == W_SUSPECT && silent >= s->dead_s) {
                w->state = W_DEAD;
                fprintf(stderr, "swarm: worker %.12s (%s) dead: no heartbeat for %.1f s\n", w->id, w->url, silent);
            }
        }
        if (changed) {
            pthread_mutex_unlock(&s->mu);
            apply(s);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the ledger as JSON --------------------------------------------------- */

/* The engine's counters of `url` as fields of o (nothing when it has none). */
static void put_counters(json_t *o, const rlp_server_stats *st, size_t n, const char *url)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(st[i].url, url))
            continue;
        const rlp_server_stats *x = &st[i];
        json_object_set_new(o, "requests_ok", json_integer((json_int_t)x->requests_ok));
        json_object_set_new(o, "requests_failed", json_integer((json_int_t)x->requests_failed));
        json_object_set_new(o, "completions", json_integer((json_int_t)x->completions));
        json_object_set_new(o, "completion_tokens", json_integer((json_int_t)x->completion_tokens));
        json_object_set_new(o, "last_weight_version",
                            x->last_weight_version >= 0 ? json_integer(x->last_weight_version) : json_null());
        json_object_set_new(o, "staleness_max", json_integer((json_int_t)x->staleness_max));
        json_object_set_new(o, "staleness_mean",
                            x->versioned ? json_real((double)x->staleness_sum / (double)x->versioned) : json_null());
        return;
    }
    json_object_set_new(o, "requests_ok", json_integer(0));
    json_object_set_new(o, "requests_failed", json_integer(0));
    json_object_set_new(o, "completions", json_integer(0));
    json_object_set_new(o, "completion_tokens", json_integer(0));
    json_object_set_new(o, "last_weight_version", json_null());
    json_object_set_new(o, "staleness_max", json_integer(0));
    json_object_set_new(o, "staleness_mean", json_null());
}

/* The ledger: settings, counts, one record per worker (static members too). */
static json_t *ledger_json(train_swarm *s)
{
    size_t cap = 2 * SWARM_MAX_URLS + 64, n = 0;
    rlp_server_stats *st = calloc(cap, sizeof *st);
    if (st && rlp_trainer_server_stats(st, cap, &n, s->trainer) != RLP_OK)
        n = 0;
    if (n > cap)
        n = cap;
    json_t *o = json_object(), *ws = json_array(), *stat = json_array();
    pthread_mutex_lock(&s->mu);
    double now = now_s();
    json_object_set_new(o, "listen", json_string(s->listen_url));
    json_object_set_new(o, "version", json_integer((json_int_t)s->version));
    json_object_set_new(o, "heartbeat_s", json_real(s->heartbeat_s));
    json_object_set_new(o, "suspect_s", json_real(s->suspect_s));
    json_object_set_new(o, "dead_s", json_real(s->dead_s));
    json_object_set_new(o, "min_workers", json_integer(s->min_workers));
    json_object_set_new(o, "registered", json_integer((json_int_t)s->n_w));
    json_object_set_new(o, "live", json_integer((json_int_t)s->live));
    json_object_set_new(o, "requests",
                        json_pack("{s:I, s:I, s:I, s:I}", "register", (json_int_t)s->n_register, "heartbeat",
                                  (json_int_t)s->n_heartbeat, "leave", (json_int_t)s->n_leave, "refused",
                                  (json_int_t)s->n_refused));
    json_object_set_new(o, "dispatch_updates", json_integer((json_int_t)s->n_updates));
    json_object_set_new(o, "dispatch_update_errors", json_integer((json_int_t)s->n_update_errors));
    for (size_t i = 0; i < s->n_w; i++) {
        const worker *w = &s->w[i];
        json_t *x = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:I}", "id", w->id, "url", w->url, "state",
                              state_name[w->state], "joins", (json_int_t)w->joins, "heartbeats",
                              (json_int_t)w->heartbeats, "suspected", (json_int_t)w->suspected, "last_seen_s_ago",
                              now - w->last_seen, "last_seen_unix", (json_int_t)w->last_seen_unix);
        json_object_set_new(x, "version", w->version >= 0 ? json_integer(w->version) : json_null());
        put_counters(x, st, n, w->url);
        json_array_append_new(ws, x);
    }
    for (size_t i = 0; i < s->n_static; i++) {
        json_t *x = json_pack("{s:s, s:s}", "url", s->statics[i], "state", "static");
        put_counters(x, st, n, s->statics[i]);
        json_array_append_new(stat, x);
    }
    pthread_mutex_unlock(&s->mu);
    json_object_set_new(o, "workers", ws);
    json_object_set_new(o, "static", stat);
    free(st);
    return o;
}

/* ---- the routes ------------------------------------------------------------ */

typedef struct req {
    char *body;
    size_t len;
    bool too_large;
} req;

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned code, json_t *o)
{
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_error(train_swarm *s, struct MHD_Connection *c, unsigned code, const char *type,
                                   const char *msg)
{
    pthread_mutex_lock(&s->mu);
    s->n_refused++;
    pthread_mutex_unlock(&s->mu);
    return reply_json(c, code,
                      json_pack("{s:{s:s, s:s, s:i}}", "error", "message", msg, "type", type, "code", (int)code));
}

/* The bearer token, compared in constant time (as `rlpost serve` does). */
static bool authorized(const train_swarm *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    size_t hl = strlen(h), wl = strlen(s->token);
    unsigned char diff = hl != wl;
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)((i < hl ? h[i] : 0) ^ s->token[i]);
    return diff == 0;
}

/* A worker id: 1 to 64 of [0-9A-Za-z_-] (`rlpost serve --join` sends 32 hex digits). */
static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    return n >= 1 && n <= 64 && strspn(id, "0123456789abcdefABCDEFghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ_-") == n;
}

static worker *find(train_swarm *s, const char *id)
{
    for (size_t i = 0; i < s->n_w; i++)
        if (!strcmp(s->w[i].id, id))
            return &s->w[i];
    return NULL;
}

/* The body's worker_id (required) and weight_version (optional, -1); NULL with *why. */
static const char *body_fields(json_t *o, int64_t *wv, const char **why)
{
    json_t *id = json_object_get(o, "worker_id"), *v = json_object_get(o, "weight_version");
    *wv = -1;
    if (!json_is_string(id) || !id_ok(json_string_value(id))) {
        *why = "worker_id: required, 1 to 64 characters of [0-9A-Za-z_-]";
        return NULL;
    }
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            *why = "weight_version: must be an integer >= 0";
            return NULL;
        }
        *wv = json_integer_value(v);
    }
    return json_string_value(id);
}

static enum MHD_Result on_register(train_swarm *s, struct MHD_Connection *c, json_t *o)
{
    int64_t wv;
    const char *why = NULL, *id = body_fields(o, &wv, &why);
    json_t *u = json_object_get(o, "url");
    if (!id)
        return reply_error(s, c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", why);
    char host[256], port[8], path[512];
    int https;
    const char *url = json_string_value(u);
    if (!url || strlen(url) >= RLP_SERVER_URL_MAX ||
        train_parse_url(url, &https, host, sizeof host, port, sizeof port, path, sizeof path))
        return reply_error(s, c, MHD_HTTP_BAD_REQUEST, "invalid_request_error",
                           "url: required, the worker's http:// or https:// base URL as the trainer reaches it "
                           "(rlpost serve --advertise)");
    /* the trainer calls the worker: a URL it cannot reach would count
     * toward min_workers and fail every request sent there */
    char why_probe[256], msg[900];
    if (!https && train_probe_health(host, port, path, why_probe, sizeof why_probe)) {
        fmt(msg, sizeof msg, "url: the trainer cannot reach %s/health (%s); --advertise the URL the trainer "
            "reaches this worker at", url, why_probe);
        fprintf(stderr, "swarm: refused worker %.12s: %s\n", id, msg);
        return reply_error(s, c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", msg);
    }
    pthread_mutex_lock(&s->mu);
    /* weights newer than the trainer's come from another run (or from
     * versions a resumed run abandoned): generating with them would be
     * tagged as fresh and trained on. (One version of slack: a step
     * publishes before s->version learns of it.) */
    if (wv >= 0 && (uint64_t)wv > s->version + 1) {
        uint64_t tv = s->version;
        pthread_mutex_unlock(&s->mu);
        fmt(msg, sizeof msg, "weight_version %lld is newer than the trainer's %llu: this worker's weights come from "
            "another run (or from versions a resumed run abandoned); start it with an empty --weights-dir",
            (long long)wv, (unsigned long long)tv);
        fprintf(stderr, "swarm: refused worker %.12s (%s): %s\n", id, url, msg);
        return reply_error(s, c, MHD_HTTP_CONFLICT, "conflict_error", msg);
    }
    worker *w = find(s, id);
    size_t alive = 0;
    for (size_t i = 0; i < s->n_w; i++)
        alive += s->w[i].state == W_ALIVE && &s->w[i] != w;
    if (alive + s->n_static >= SWARM_MAX_URLS) {
        pthread_mutex_unlock(&s->mu);
        return reply_error(s, c, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded_error",
                           "the swarm is full: 64 workers with rollout.urls");
    }
    if (!w && s->n_w >= SWARM_MAX_RECORDS) {
        worker *gone = NULL;
        for (size_t i = 0; i < s->n_w; i++)
            if ((s->w[i].state == W_DEAD || s->w[i].state == W_LEFT) &&
                (!gone || s->w[i].last_seen < gone->last_seen))
                gone = &s->w[i];
        if (!gone) {
            pthread_mutex_unlock(&s->mu);
            return reply_error(s, c, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded_error",
                               "the ledger is full: 1024 workers, none of them gone");
        }
        w = gone;
        memset(w, 0, sizeof *w);
        fmt(w->id, sizeof w->id, "%s", id);
    }
    if (!w) {
        if (s->n_w == s->cap_w) {
            size_t cap = s->cap_w ? 2 * s->cap_w : 16;
            worker *nw = realloc(s->w, cap * sizeof *nw);
            if (!nw) {
                pthread_mutex_unlock(&s->mu);
                return reply_error(s, c, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", "out of memory");
            }
            s->w = nw;
            s->cap_w = cap;
        }
        w = &s->w[s->n_w++];
        memset(w, 0, sizeof *w);
        fmt(w->id, sizeof w->id, "%s", id);
    }
    /* another id on the same URL: a worker restarted without its id file */
    for (size_t i = 0; i < s->n_w; i++)
        if (&s->w[i] != w && s->w[i].state != W_LEFT && !strcmp(s->w[i].url, url)) {
            s->w[i].state = W_LEFT;
            fprintf(stderr, "swarm: worker %.12s (%s) replaced by %.12s on the same URL\n", s->w[i].id, url, id);
        }
    int was = w->joins ? w->state : -1;
    /* a worker restarted before it was missed (still in the set, maybe at another URL): out of
     * the set for a moment, so that the synchronizer forgets the version it held and brings the
     * new process to the current one at its next pull */
    bool cycle = was == W_ALIVE;
    fmt(w->url, sizeof w->url, "%s", url);
    w->state = cycle ? W_LEFT : W_ALIVE;
    w->joins++;
    w->version = wv;
    w->last_seen = now_s();
    w->last_seen_unix = (long long)time(NULL);
    s->n_register++;
    uint64_t joins = w->joins, version = s->version;
    pthread_mutex_unlock(&s->mu);
    fprintf(stderr, "swarm: worker %.12s (%s) %s at weight version %lld (join %llu; trainer at %llu)\n", id, url,
            was < 0 ? "joined" : "rejoined", (long long)wv, (unsigned long long)joins, (unsigned long long)version);
    if (cycle) {
        apply(s);
        pthread_mutex_lock(&s->mu);
        worker *x = find(s, id); /* found again: the ledger may have grown (moved) meanwhile */
        if (x && x->state == W_LEFT)
            x->state = W_ALIVE;
        pthread_mutex_unlock(&s->mu);
    }
    apply(s);
    return reply_json(c, MHD_HTTP_OK,
                      json_pack("{s:s, s:f, s:f, s:f, s:I, s:I}", "worker_id", id, "heartbeat_s", s->heartbeat_s,
                                "suspect_s", s->suspect_s, "dead_s", s->dead_s, "version", (json_int_t)version, "joins",
                                (json_int_t)joins));
}

static enum MHD_Result on_heartbeat(train_swarm *s, struct MHD_Connection *c, json_t *o, bool leave)
{
    int64_t wv;
    const char *why = NULL, *id = body_fields(o, &wv, &why);
    if (!id)
        return reply_error(s, c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", why);
    pthread_mutex_lock(&s->mu);
    worker *w = find(s, id);
    if (!w || w->state == W_LEFT) {
        pthread_mutex_unlock(&s->mu);
        return reply_error(s, c, MHD_HTTP_NOT_FOUND, "not_found_error",
                           leave ? "unknown worker_id"
                                 : "unknown worker_id: register again (POST /v1/rlpost/register)");
    }
    int was = w->state;
    w->last_seen = now_s();
    w->last_seen_unix = (long long)time(NULL);
    if (wv >= 0)
        w->version = wv;
    if (leave) {
        w->state = W_LEFT;
        s->n_leave++;
    } else {
        w->state = W_ALIVE;
        w->heartbeats++;
        s->n_heartbeat++;
    }
    uint64_t version = s->version;
    char url[RLP_SERVER_URL_MAX];
    fmt(url, sizeof url, "%s", w->url);
    pthread_mutex_unlock(&s->mu);
    if (leave)
        fprintf(stderr, "swarm: worker %.12s (%s) left\n", id, url);
    else if (was != W_ALIVE)
        fprintf(stderr, "swarm: worker %.12s (%s) back after being %s\n", id, url, state_name[was]);
    if (leave || was != W_ALIVE)
        apply(s);
    return reply_json(c, MHD_HTTP_OK,
                      json_pack("{s:I, s:s}", "version", (json_int_t)version, "state", leave ? "left" : "alive"));
}

static const struct {
    const char *path, *method;
} routes[] = {{"/v1/rlpost/register", "POST"},
              {"/v1/rlpost/heartbeat", "POST"},
              {"/v1/rlpost/leave", "POST"},
              {WORKERS_ROUTE, "GET"}};

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    train_swarm *s = cls;
    req *x = *con_cls;
    if (!x) {
        if (!(x = calloc(1, sizeof *x)))
            return MHD_NO;
        *con_cls = x;
        /* a declared body far past the limit is refused at once (the connection then closes)
         * instead of being read and thrown away */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > DRAIN_MAX)
            return reply_error(s, c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                               "request body larger than 4096 bytes");
        return MHD_YES;
    }
    if (*upload_size) {
        if (x->too_large || x->len + *upload_size > BODY_MAX) {
            x->too_large = true; /* read and dropped; answered 413 at the end */
        } else {
            char *b = realloc(x->body, x->len + *upload_size + 1);
            if (!b)
                return MHD_NO;
            memcpy(b + x->len, upload, *upload_size);
            x->body = b;
            x->len += *upload_size;
            x->body[x->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    size_t i, n = sizeof routes / sizeof routes[0];
    for (i = 0; i < n && strcmp(url, routes[i].path); i++)
        ;
    if (!authorized(s, c))
        return reply_error(s, c, MHD_HTTP_UNAUTHORIZED, "authentication_error",
                           "missing or wrong bearer token (Authorization: Bearer ...)");
    if (i == n)
        return reply_error(s, c, MHD_HTTP_NOT_FOUND, "not_found_error", "no such endpoint");
    if (strcmp(method, routes[i].method) && !(i == 3 && !strcmp(method, "HEAD")))
        return reply_error(s, c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error",
                           i == 3 ? "this endpoint takes GET" : "this endpoint takes POST");
    if (i == 3)
        return reply_json(c, MHD_HTTP_OK, ledger_json(s));
    if (x->too_large)
        return reply_error(s, c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                           "request body larger than 4096 bytes");
    json_t *o = x->body ? json_loadb(x->body, x->len, 0, NULL) : NULL;
    if (!json_is_object(o)) {
        json_decref(o);
        return reply_error(s, c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", "the body must be a JSON object");
    }
    enum MHD_Result rc = i == 0 ? on_register(s, c, o) : on_heartbeat(s, c, o, i == 2);
    json_decref(o);
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    req *x = *con_cls;
    if (x) {
        free(x->body);
        free(x);
    }
    *con_cls = NULL;
}

/* ---- start, wait, stop -------------------------------------------------------- */

int train_swarm_start(run *r)
{
    train_swarm *s = calloc(1, sizeof *s);
    if (!s) {
        fmt(r->err, ERR_CAP, "swarm: out of memory");
        return -1;
    }
    const json_t *c = r->cfg;
    s->trainer = r->trainer;
    fmt(s->token, sizeof s->token, "%s", r->swarm_token);
    s->heartbeat_s = cfg_num(c, "swarm.heartbeat_s");
    s->suspect_s = cfg_num(c, "swarm.suspect_s");
    s->dead_s = cfg_num(c, "swarm.dead_s");
    s->join_timeout_s = cfg_num(c, "swarm.join_timeout_s");
    s->min_workers = cfg_int(c, "swarm.min_workers");
    json_t *ju = cfg_get(c, "rollout.urls");
    for (size_t i = 0; i < json_array_size(ju) && i < SWARM_MAX_URLS; i++)
        s->statics[s->n_static++] = json_string_value(json_array_get(ju, i));
    uint64_t v = 0;
    rlp_policy_version(&v, r->policy);
    s->version = v;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->apply_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    r->coord = s; /* train_swarm_stop frees it, whatever happens below */

    char host[256], port[8];
    const char *listen = cfg_str(c, "swarm.listen");
    split_listen(listen, host, sizeof host, port, sizeof port); /* checked by train_swarm_check */
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    int gai = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
    if (gai) {
        fmt(r->err, ERR_CAP, "swarm.listen: cannot resolve '%s': %s", host, gai_strerror(gai));
        return -1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)15, MHD_OPTION_CONNECTION_LIMIT, (unsigned)512,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    char addr[128] = "";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
    int v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (!s->d) {
        fmt(r->err, ERR_CAP, "swarm.listen: cannot listen on %s (in use, or not an address of this host)", listen);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    fmt(s->listen_url, sizeof s->listen_url, v6 ? "http://[%s]:%u" : "http://%s:%u", addr,
        di ? (unsigned)di->port : (unsigned)atoi(port));
    if (pthread_create(&s->sweeper, NULL, sweeper_main, s) != 0) {
        fmt(r->err, ERR_CAP, "swarm: cannot start the heartbeat thread");
        return -1;
    }
    s->sweeper_started = true;
    fprintf(stderr, "swarm: coordinator on %s (heartbeat %.3g s, suspect %.3g s, dead %.3g s; %zu static worker%s)\n",
            s->listen_url, s->heartbeat_s, s->suspect_s, s->dead_s, s->n_static, s->n_static == 1 ? "" : "s");
    return 0;
}

int train_swarm_wait(run *r, volatile sig_atomic_t *stop)
{
    train_swarm *s = r->coord;
    if (!s || s->min_workers <= 0)
        return 0;
    double deadline = now_s() + s->join_timeout_s, t0 = now_s();
    fprintf(stderr, "swarm: waiting for %lld worker%s to join (at most %.0f s)\n", s->min_workers,
            s->min_workers == 1 ? "" : "s", s->join_timeout_s);
    pthread_mutex_lock(&s->mu);
    while ((long long)s->live < s->min_workers && !*stop && now_s() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + 200000000L;
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    size_t live = s->live;
    pthread_mutex_unlock(&s->mu);
    if ((long long)live < s->min_workers) {
        fmt(r->err, ERR_CAP, "swarm.min_workers: %zu of %lld workers joined %s", live, s->min_workers,
            *stop ? "before the interrupt" : "within swarm.join_timeout_s");
        return -1;
    }
    fprintf(stderr, "swarm: %zu worker%s in the dispatch set after %.1f s\n", live, live == 1 ? "" : "s", now_s() - t0);
    return 0;
}

void train_swarm_set_version(train_swarm *s, uint64_t version)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->version = version;
    pthread_mutex_unlock(&s->mu);
}

json_t *train_swarm_summary(run *r)
{
    return r->coord ? ledger_json(r->coord) : json_null();
}

void train_swarm_stop(train_swarm *s)
{
    if (!s)
        return;
    if (s->d)
        MHD_stop_daemon(s->d); /* no route runs after this */
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->sweeper_started)
        pthread_join(s->sweeper, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->apply_mu);
    pthread_cond_destroy(&s->cv);
    free(s->w);
    free(s);
}

#endif
