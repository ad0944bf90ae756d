/* The rollout side of `rlpost train` beyond the co-located engine: the
 * remote engine over rollout.urls (`rlpost serve` workers), the
 * synchronizer that carries each published version to them or to the
 * rollout thread's own engine, the replay buffer, and the rollout thread of
 * sync.mode "async" (Echo push-pull, AReaL staleness gate). Public API
 * only; the trainer's loop stays in cmd_train.c.
 *
 * The rollout thread serves batch j = the prompts_per_step prompts of step
 * j + 1: it admits them through the gate (one slot per group), brings its
 * engine to the latest version, generates with step j + 1's sampling seed,
 * scores and pushes them whole. The reward is computed here, on the rollout
 * side: the buffer accepts scored trajectories only (its spill records
 * carry the reward), and scoring here overlaps with training instead of
 * adding to the trainer's step; the trainer measures format and accuracy on
 * its copy of what it consumes. */
#define _GNU_SOURCE 1
#include "train.h"
#include "train_config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_URLS = 64, PROBE_MS = 5000 };

/* One rollout batch: the prompts of one step, in the FIFO order of their
 * push (the buffer hands groups out oldest accepted first). */
typedef struct batch_rec {
    struct batch_rec *next;
    uint64_t *group_ids;     /* (n) in prompt order */
    size_t n, n_consumed;
    json_t *prompt_ids;      /* (n) record indices */
    uint64_t epoch, seed;
    char cursor_before[512]; /* the task cursor before and after its prompts */
    char cursor_after[512];
} batch_rec;

struct train_rollout {
    run *r;
    long long start_step;
    size_t groups;                  /* G = prompts_per_step */
    char *urls[MAX_URLS];
    size_t n_urls;
    char weights_dir[PATH_MAX];
    rlp_context *ctx;               /* async, local engine: the rollout thread's own */
    rlp_rollout_engine *engine;     /* remote, or the rollout thread's local copy */
    rlp_synchronizer *sync;
    rlp_replay_buffer *buf;         /* async */
    pthread_t th;
    int started;
    atomic_int stopping, done, failed, at_gate;
    char thread_err[ERR_CAP];       /* written once before failed is set */
    pthread_mutex_t mu;             /* the FIFO and the counters below */
    batch_rec *head, *tail;
    double gen_s, reward_s, idle_s; /* totals of the rollout thread */
    uint64_t tokens;
    double seen_gen_s, seen_reward_s, seen_idle_s; /* what the last step record already counted */
    uint64_t seen_tokens, seen_dropped;
    uint64_t reward_failed[4], seen_reward_failed[4]; /* errors, timeouts, non-finite, crashed (reward stats) */
    unsigned pull_warnings;
};

/* ------------------------------------------------------------------------ */
/* rollout.urls                                                             */
/* ------------------------------------------------------------------------ */

/* Splits an http(s) base URL into host, port and path; -1 when malformed. */
static int parse_url(const char *url, int *https, char *host, size_t hcap, char *port, size_t pcap, char *path,
                     size_t cap)
{
    const char *p;
    if (!strncmp(url, "http://", 7)) {
        *https = 0;
        p = url + 7;
    } else if (!strncmp(url, "https://", 8)) {
        *https = 1;
        p = url + 8;
    } else {
        return -1;
    }
    for (const char *q = url; *q; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f)
            return -1;
    const char *end = p + strcspn(p, "/?#");
    if (*end == '?' || *end == '#')
        return -1;
    const char *colon;
    if (*p == '[') { /* [v6]:port */
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (!rb || rb == p + 1)
            return -1;
        fmt(host, hcap, "%.*s", (int)(rb - p - 1), p + 1);
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        if (rb + 1 < end && !colon)
            return -1;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        size_t hl = (size_t)((colon ? colon : end) - p);
        if (hl == 0)
            return -1;
        fmt(host, hcap, "%.*s", (int)hl, p);
    }
    if (colon) {
        size_t pl = (size_t)(end - colon - 1);
        if (pl == 0 || pl > 5 || strspn(colon + 1, "0123456789") < pl)
            return -1;
        fmt(port, pcap, "%.*s", (int)pl, colon + 1);
        if (atoi(port) < 1 || atoi(port) > 65535)
            return -1;
    } else {
        fmt(port, pcap, "%s", *https ? "443" : "80");
    }
    fmt(path, cap, "%s", end);
    size_t l = strlen(path);
    while (l > 0 && path[l - 1] == '/')
        path[--l] = 0;
    return 0;
}

/* GET {path}/health over plain HTTP with a deadline: 0 when the server
 * answers 200, else -1 with the reason in @p why. */
static int probe_health(const char *host, const char *port, const char *path, char *why, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai) {
        fmt(why, cap, "cannot resolve '%s': %s", host, gai_strerror(gai));
        return -1;
    }
    int ok = -1;
    fmt(why, cap, "no address");
    for (struct addrinfo *a = ai; a && ok; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            fmt(why, cap, "socket: %s", strerror(errno));
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof err;
        if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
            fmt(why, cap, "%s", strerror(errno));
        } else if (poll(&pf, 1, PROBE_MS) != 1) {
            fmt(why, cap, "no connection within %d s", PROBE_MS / 1000);
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
            fmt(why, cap, "%s", strerror(err ? err : errno));
        } else {
            char req[1024], resp[64] = {0};
            int len = fmt(req, sizeof req, "GET %s/health HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n", path,
                          host);
            size_t got = 0;
            if (len > 0 && len < (int)sizeof req && send(fd, req, (size_t)len, MSG_NOSIGNAL) == len) {
                pf.events = POLLIN;
                while (got < sizeof resp - 1 && poll(&pf, 1, PROBE_MS) == 1) {
                    ssize_t k = recv(fd, resp + got, sizeof resp - 1 - got, 0);
                    if (k <= 0)
                        break;
                    got += (size_t)k;
                }
            }
            resp[got] = 0;
            resp[strcspn(resp, "\r\n")] = 0;
            if (!strncmp(resp, "HTTP/1.", 7) && !strncmp(resp + 8, " 200", 4))
                ok = 0;
            else
                fmt(why, cap, "%s", got ? resp : "no answer");
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return ok;
}

int train_rollout_check_urls(run *r)
{
    json_t *urls = cfg_get(r->cfg, "rollout.urls");
    size_t n = json_array_size(urls);
    if (n > MAX_URLS) {
        fmt(r->err, ERR_CAP, "rollout.urls: %zu URLs, at most %d", n, MAX_URLS);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(urls, i);
        if (!json_is_string(v)) {
            fmt(r->err, ERR_CAP, "rollout.urls[%zu]: must be a string (an http:// or https:// base URL)", i);
            return -1;
        }
        const char *u = json_string_value(v);
        char host[256], port[8], path[512];
        int https;
        if (parse_url(u, &https, host, sizeof host, port, sizeof port, path, sizeof path)) {
            fmt(r->err, ERR_CAP, "rollout.urls[%zu]: \"%s\" is not an http:// or https:// base URL "
                "(e.g. \"http://127.0.0.1:8000\")", i, u);
            return -1;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(u, json_string_value(json_array_get(urls, j)))) {
                fmt(r->err, ERR_CAP, "rollout.urls[%zu]: repeats rollout.urls[%zu] (\"%s\")", i, j, u);
                return -1;
            }
    }
    /* then whether they answer (https is left to the remote client) */
    for (size_t i = 0; i < n; i++) {
        const char *u = json_string_value(json_array_get(urls, i));
        char host[256], port[8], path[512], why[256];
        int https;
        parse_url(u, &https, host, sizeof host, port, sizeof port, path, sizeof path);
        if (!https && probe_health(host, port, path, why, sizeof why)) {
            fmt(r->err, ERR_CAP, "rollout.urls[%zu]: %s does not answer GET /health (%s); start the workers "
                "first (docs/swarm.md)", i, u, why);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The rollout thread                                                       */
/* ------------------------------------------------------------------------ */

static void thread_fail(train_rollout *ro, const char *what, const char *msg)
{
    if (atomic_load(&ro->failed))
        return;
    fmt(ro->thread_err, ERR_CAP, "rollout: %s: %s", what, msg);
    atomic_store(&ro->failed, 1);
}

static void rec_free(batch_rec *b)
{
    if (!b)
        return;
    free(b->group_ids);
    json_decref(b->prompt_ids);
    free(b);
}

/* A failed pull of a remote run: some worker did not load the version
 * (dead or refusing); the others did, and the next pull retries it. The
 * groups it serves meanwhile carry its older version and the buffer drops
 * them past η. */
static void pull_warning(train_rollout *ro, int rc)
{
    if (ro->pull_warnings++ % 20 == 0)
        fprintf(stderr, "rlpost train: warning: not every worker loaded the latest weights (%s: %s); "
                "generation goes on, the next pull retries%s\n", rlp_status_str(rc), rlp_error_last(),
                ro->pull_warnings > 1 ? " (repeated warnings are shown every 20th time)" : "");
}

static void *rollout_main(void *arg)
{
    train_rollout *ro = arg;
    run *r = ro->r;
    const size_t G = ro->groups;
    const uint64_t seed0 = (uint64_t)cfg_int(r->cfg, "seed");
    rlp_sampling_options s = r->sampling;
    for (long long j = ro->start_step; !atomic_load(&ro->stopping); j++) {
        /* the gate: one slot per group of the batch */
        double t = now_s();
        size_t admitted = 0;
        int rc = RLP_OK;
        atomic_store(&ro->at_gate, 1);
        while (admitted < G && (rc = rlp_synchronizer_acquire(ro->sync, RLP_WAIT_FOREVER)) == RLP_OK)
            admitted++;
        atomic_store(&ro->at_gate, 0);
        pthread_mutex_lock(&ro->mu);
        ro->idle_s += now_s() - t;
        pthread_mutex_unlock(&ro->mu);
        if (admitted < G) {
            for (size_t i = 0; i < admitted; i++)
                rlp_synchronizer_release(ro->sync, 0);
            if (rc != RLP_E_CLOSED)
                thread_fail(ro, "staleness gate", rlp_error_last());
            break;
        }

        /* the prompts of step j + 1 */
        batch_rec *rec = calloc(1, sizeof *rec);
        rlp_prompt_set *set = NULL;
        size_t clen;
        if (!rec || !(rec->group_ids = calloc(G, sizeof *rec->group_ids))) {
            thread_fail(ro, "batch", "out of memory");
            rc = RLP_E_NOMEM;
        } else {
            rlp_task_cursor_save(r->task, rec->cursor_before, sizeof rec->cursor_before, &clen);
            if ((rc = rlp_task_next_batch(&set, r->task, G, r->tok)) != RLP_OK)
                thread_fail(ro, "prompts", rlp_error_last());
        }
        if (rc) {
            rec_free(rec);
            for (size_t i = 0; i < G; i++)
                rlp_synchronizer_release(ro->sync, 0);
            break;
        }
        rec->n = G;
        rec->prompt_ids = train_prompt_ids(set, &rec->epoch);
        rlp_task_cursor_save(r->task, rec->cursor_after, sizeof rec->cursor_after, &clen);
        rec->seed = mix_seed(seed0, (uint64_t)j + 1);

        /* the latest weights, then generate */
        t = now_s();
        rc = rlp_synchronizer_pull(ro->sync, ro->engine);
        if (rc == RLP_E_NETWORK && r->remote) {
            pull_warning(ro, rc);
            rc = RLP_OK;
        } else if (rc) {
            thread_fail(ro, "weights", rlp_error_last());
        }
        rlp_batch *b = NULL;
        char err[ERR_CAP];
        s.seed = r->remote ? rec->seed >> 1 : rec->seed; /* servers take a signed 64-bit seed */
        if (!rc && (rc = train_generate(r, ro->engine, set, &s, &b, err)) != RLP_OK && !atomic_load(&ro->stopping))
            thread_fail(ro, "generate", err);
        rlp_prompt_set_free(set);
        uint64_t tokens = 0;
        size_t n = 0;
        if (!rc)
            rlp_batch_size(&n, b);
        for (size_t i = 0; i < n; i++) {
            rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION};
            if (!rlp_batch_get(&tr, b, i)) {
                tokens += tr.n_completion_tokens;
                if (i % (n / G) == 0)
                    rec->group_ids[i / (n / G)] = tr.group_id;
            }
        }
        pthread_mutex_lock(&ro->mu);
        ro->gen_s += now_s() - t;
        ro->tokens += tokens;
        pthread_mutex_unlock(&ro->mu);

        /* the reward (see the header comment for why here) */
        if (!rc && !atomic_load(&ro->stopping)) {
            t = now_s();
            rlp_reward_stats st = {.version = RLP_REWARD_STATS_VERSION};
            if ((rc = rlp_reward_fn_score(r->reward, b, &st)) != RLP_OK)
                thread_fail(ro, "reward", rlp_error_last());
            pthread_mutex_lock(&ro->mu);
            ro->reward_s += now_s() - t;
            ro->reward_failed[0] += st.errors;
            ro->reward_failed[1] += st.timeouts;
            ro->reward_failed[2] += st.nonfinite;
            ro->reward_failed[3] += st.crashed;
            pthread_mutex_unlock(&ro->mu);
        }
        /* stopping: the generate call may have been aborted; nothing
         * half-done is pushed */
        if (rc || atomic_load(&ro->stopping)) {
            rlp_batch_free(b);
            rec_free(rec);
            for (size_t i = 0; i < G; i++)
                rlp_synchronizer_release(ro->sync, 0);
            break;
        }

        /* the record goes first: the trainer may pull the groups at once */
        pthread_mutex_lock(&ro->mu);
        if (ro->tail)
            ro->tail->next = rec;
        else
            ro->head = rec;
        ro->tail = rec;
        pthread_mutex_unlock(&ro->mu);
        t = now_s();
        rc = rlp_replay_buffer_push(ro->buf, b);
        rlp_batch_free(b);
        for (size_t i = 0; i < G; i++)
            rlp_synchronizer_release(ro->sync, rc == RLP_OK);
        pthread_mutex_lock(&ro->mu);
        ro->idle_s += now_s() - t;
        pthread_mutex_unlock(&ro->mu);
        if (rc) {
            if (rc != RLP_E_CLOSED)
                thread_fail(ro, "replay buffer", rlp_error_last());
            break;
        }
    }
    atomic_store(&ro->done, 1);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Setup and the trainer's side                                             */
/* ------------------------------------------------------------------------ */

int train_rollout_create(run *r, long long start_step, train_rollout **out)
{
    train_rollout *ro = calloc(1, sizeof *ro);
    if (!ro) {
        fmt(r->err, ERR_CAP, "out of memory");
        return -1;
    }
    *out = ro; /* freed by the caller's teardown, also on failure */
    ro->r = r;
    ro->start_step = start_step;
    ro->groups = (size_t)cfg_int(r->cfg, "prompts_per_step");
    pthread_mutex_init(&ro->mu, NULL);
    const char *token = getenv("RLPOST_SERVE_TOKEN");
    json_t *urls = cfg_get(r->cfg, "rollout.urls");
    for (size_t i = 0; i < json_array_size(urls) && i < MAX_URLS; i++) {
        if (!(ro->urls[i] = strdup(json_string_value(json_array_get(urls, i))))) {
            fmt(r->err, ERR_CAP, "out of memory");
            return -1;
        }
        ro->n_urls++;
    }
    uint64_t version = 0;
    rlp_policy_version(&version, r->policy);
    uint32_t eta = (uint32_t)cfg_int(r->cfg, "sync.staleness");
    int rc;

    /* the engine: remote over the URLs, or (async) a copy of the policy on
     * a context of its own */
    if (r->remote) {
        rlp_remote_options rem = RLP_REMOTE_OPTIONS_INIT;
        rem.urls = (const char *const *)ro->urls;
        rem.n_urls = ro->n_urls;
        rem.api_key = token;
        rem.timeout_ms = 300000;
        rem.max_retries = 3;
        const rlp_tokenizer *tok = r->ext_tok ? r->ext_tok : rlp_policy_tokenizer(r->policy);
        if ((rc = rlp_rollout_engine_create_remote(&ro->engine, tok, &rem))) {
            fmt(r->err, ERR_CAP, "rollout.urls: %s", rlp_error_last());
            return -1;
        }
    } else {
        rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
        co.n_threads = r->threads_rollout;
        co.seed = (uint64_t)cfg_int(r->cfg, "seed");
        rlp_policy *copy = NULL;
        rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
        po.trainable = 0;
        rlp_rollout_options eo = RLP_ROLLOUT_OPTIONS_INIT;
        long long mb = cfg_int(r->cfg, "prompts_per_step") * cfg_int(r->cfg, "group_size");
        eo.max_batch = (uint32_t)(mb < 256 ? mb : 256);
        eo.max_seq_len = (uint32_t)cfg_int(r->cfg, "rollout.max_seq_len");
        eo.share_weights = 0;
        if ((rc = rlp_context_create(&ro->ctx, &co)) || (rc = rlp_policy_load(&copy, ro->ctx, r->weights, &po)) ||
            (rc = rlp_rollout_engine_create(&ro->engine, copy, &eo))) {
            fmt(r->err, ERR_CAP, "rollout: %s", rlp_error_last());
            rlp_policy_free(copy);
            return -1;
        }
        rlp_policy_free(copy); /* the engine keeps a copy of its own */
    }

    /* the synchronizer: in-process to the rollout thread's engine, or the
     * HTTP transport (files in sync.weights_dir, then each worker is told
     * to load them) */
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = r->async ? RLP_SYNC_ASYNC : RLP_SYNC_SEQUENTIAL_PULL;
    so.transport = r->remote ? RLP_TRANSPORT_HTTP : RLP_TRANSPORT_IN_PROCESS;
    so.max_staleness = eta;
    so.batch_groups = (uint32_t)ro->groups; /* versions count RL steps: a step trains on G groups */
    so.initial_version = version;
    if (r->remote) {
        const char *wd = cfg_str(r->cfg, "sync.weights_dir");
        if (wd)
            fmt(ro->weights_dir, sizeof ro->weights_dir, "%s", wd);
        else
            fmt(ro->weights_dir, sizeof ro->weights_dir, "%s/weights", r->out);
        so.dir = ro->weights_dir;
        so.urls = (const char *const *)ro->urls;
        so.n_urls = ro->n_urls;
        so.api_key = token;
    }
    if ((rc = rlp_synchronizer_create(&ro->sync, &so))) {
        fmt(r->err, ERR_CAP, "%s: %s", r->remote ? "sync.weights_dir" : "sync", rlp_error_last());
        return -1;
    }
    if (r->async) {
        rlp_buffer_options bo = RLP_BUFFER_OPTIONS_INIT;
        bo.sync = ro->sync; /* η from the gate */
        if ((rc = rlp_replay_buffer_create(&ro->buf, &bo))) {
            fmt(r->err, ERR_CAP, "replay buffer: %s", rlp_error_last());
            return -1;
        }
    }
    /* the version the run starts from: what the workers (re)start with */
    if ((rc = rlp_synchronizer_publish(ro->sync, r->policy))) {
        fmt(r->err, ERR_CAP, "publishing version %llu: %s", (unsigned long long)version, rlp_error_last());
        return -1;
    }
    if (r->remote)
        fprintf(stderr, "rollout: %zu worker%s, weights in %s\n", ro->n_urls, ro->n_urls == 1 ? "" : "s",
                ro->weights_dir);
    return 0;
}

int train_rollout_start(train_rollout *ro)
{
    if (pthread_create(&ro->th, NULL, rollout_main, ro)) {
        fmt(ro->r->err, ERR_CAP, "cannot start the rollout thread: %s", strerror(errno));
        return -1;
    }
    ro->started = 1;
    return 0;
}

int train_rollout_generate(train_rollout *ro, const rlp_prompt_set *set, const rlp_sampling_options *s,
                           rlp_batch **out)
{
    int rc = rlp_synchronizer_pull(ro->sync, ro->engine);
    if (rc == RLP_E_NETWORK)
        pull_warning(ro, rc);
    else if (rc) {
        fmt(ro->r->err, ERR_CAP, "weights: %s", rlp_error_last());
        return rc;
    }
    rlp_sampling_options so = *s;
    so.seed >>= 1; /* servers take a signed 64-bit seed */
    return train_generate(ro->r, ro->engine, set, &so, out, ro->r->err);
}

int train_rollout_publish(train_rollout *ro)
{
    int rc = rlp_synchronizer_publish(ro->sync, ro->r->policy);
    if (rc) {
        uint64_t v = 0;
        rlp_policy_version(&v, ro->r->policy);
        fmt(ro->r->err, ERR_CAP, "publishing version %llu: %s", (unsigned long long)v, rlp_error_last());
        return -1;
    }
    return 0;
}

/* The records of the groups in @p b (consumed in order), retiring the
 * records before them (consumed, or dropped as stale). mu held. */
static int take_records(train_rollout *ro, const rlp_batch *b, train_step_input *in)
{
    size_t n;
    rlp_batch_size(&n, b);
    in->prompt_ids = json_array();
    uint64_t last = 0;
    int first = 1;
    batch_rec *cur = NULL;
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&t, b, i) || (!first && t.group_id == last))
            continue; /* each group is contiguous */
        last = t.group_id;
        /* find its record: every record before it is done with */
        size_t pos = SIZE_MAX;
        while (ro->head) {
            for (size_t g = 0; g < ro->head->n && pos == SIZE_MAX; g++)
                if (ro->head->group_ids[g] == t.group_id)
                    pos = g;
            if (pos != SIZE_MAX)
                break;
            batch_rec *done = ro->head;
            ro->head = done->next;
            if (!ro->head)
                ro->tail = NULL;
            if (done == cur)
                cur = NULL;
            rec_free(done);
        }
        if (pos == SIZE_MAX) {
            fmt(ro->r->err, ERR_CAP, "internal error: group %llu of the replay buffer has no rollout record",
                (unsigned long long)t.group_id);
            return -1;
        }
        cur = ro->head;
        if (first) {
            in->epoch = cur->epoch;
            in->seed = cur->seed;
            first = 0;
        }
        cur->n_consumed++;
        json_array_append(in->prompt_ids, json_array_get(cur->prompt_ids, pos));
    }
    if (!cur)
        return 0;
    /* a record consumed whole: the task cursor after it; one split across
     * two steps (a group dropped as stale in between): the cursor before
     * it, so that a resume repeats its prompts rather than skip some */
    if (cur->n_consumed == cur->n) {
        fmt(in->cursor, sizeof in->cursor, "%s", cur->cursor_after);
        ro->head = cur->next;
        if (!ro->head)
            ro->tail = NULL;
        rec_free(cur);
    } else {
        fmt(in->cursor, sizeof in->cursor, "%s", cur->cursor_before);
    }
    return 0;
}

int train_rollout_next(train_rollout *ro, volatile sig_atomic_t *stop, train_step_input *in)
{
    run *r = ro->r;
    uint64_t v = 0;
    rlp_policy_version(&v, r->policy);
    double t0 = now_s();
    int stalled = 0;
    rlp_batch *b = NULL;
    for (;;) {
        int rc = rlp_replay_buffer_pull(&b, ro->buf, ro->groups, v, 200);
        if (rc == RLP_OK)
            break;
        if (rc != RLP_E_TIMEOUT) {
            fmt(r->err, ERR_CAP, "replay buffer: %s", rlp_error_last());
            return -1;
        }
        if (*stop)
            return 1;
        if (atomic_load(&ro->failed)) {
            fmt(r->err, ERR_CAP, "%s", ro->thread_err);
            return -1;
        }
        if (atomic_load(&ro->done)) {
            fmt(r->err, ERR_CAP, "the rollout thread has stopped");
            return -1;
        }
        /* the rollout thread waits at a closed gate while the buffer
         * cannot make a step: nothing will ever open it (the version grows
         * only when this step trains). A safety net: every step advances
         * the version, but groups the buffer dropped as stale still count
         * as accepted at the gate */
        rlp_buffer_stats bs = {.version = 1};
        rlp_replay_buffer_stats(&bs, ro->buf);
        if (atomic_load(&ro->at_gate) && bs.size < ro->groups) {
            if (++stalled >= 10) {
                rlp_sync_stats ss = {.version = 1};
                rlp_synchronizer_stats(&ss, ro->sync);
                fmt(r->err, ERR_CAP,
                    "the staleness gate admits no more rollouts at version %llu (%llu groups "
                    "accepted, %llu dropped by the buffer as stale) and the buffer holds %llu of the %zu groups "
                    "a step needs; resume from the last checkpoint (the gate restarts at its version)",
                    (unsigned long long)v, (unsigned long long)ss.accepted, (unsigned long long)bs.dropped_stale,
                    (unsigned long long)bs.size, ro->groups);
                return -2;
            }
        } else {
            stalled = 0;
        }
    }
    in->trainer_idle = now_s() - t0;
    in->batch = b;
    pthread_mutex_lock(&ro->mu);
    int rc = take_records(ro, b, in);
    in->rollout_seconds = ro->gen_s - ro->seen_gen_s;
    in->reward_seconds = ro->reward_s - ro->seen_reward_s;
    in->rollout_idle = ro->idle_s - ro->seen_idle_s;
    in->rollout_tokens = ro->tokens - ro->seen_tokens;
    ro->seen_gen_s = ro->gen_s;
    ro->seen_reward_s = ro->reward_s;
    ro->seen_idle_s = ro->idle_s;
    ro->seen_tokens = ro->tokens;
    for (int k = 0; k < 4; k++) {
        in->reward_failed[k] = ro->reward_failed[k] - ro->seen_reward_failed[k];
        ro->seen_reward_failed[k] = ro->reward_failed[k];
    }
    pthread_mutex_unlock(&ro->mu);
    rlp_buffer_stats bs = {.version = 1};
    rlp_replay_buffer_stats(&bs, ro->buf);
    in->buffer_dropped = bs.dropped_stale - ro->seen_dropped;
    in->buffer_dropped_total = bs.dropped_stale;
    in->buffer_size = bs.size;
    ro->seen_dropped = bs.dropped_stale;
    if (rc) {
        rlp_batch_free(b);
        json_decref(in->prompt_ids);
        in->batch = NULL;
        in->prompt_ids = NULL;
        return -1;
    }
    return 0;
}

void train_rollout_free(train_rollout *ro)
{
    if (!ro)
        return;
    if (ro->started) {
        /* close the gate and the buffer (a waiting acquire or push
         * returns), abort a generate call in flight (again until the thread
         * is out: an abort before the call starts is reset by it) */
        atomic_store(&ro->stopping, 1);
        rlp_synchronizer_close(ro->sync);
        rlp_replay_buffer_close(ro->buf);
        while (!atomic_load(&ro->done)) {
            rlp_rollout_engine_abort(ro->engine);
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        pthread_join(ro->th, NULL);
    }
    while (ro->head) {
        batch_rec *next = ro->head->next;
        rec_free(ro->head);
        ro->head = next;
    }
    rlp_replay_buffer_free(ro->buf);
    rlp_synchronizer_free(ro->sync);
    rlp_rollout_engine_free(ro->engine);
    rlp_context_free(ro->ctx);
    for (size_t i = 0; i < ro->n_urls; i++)
        free(ro->urls[i]);
    pthread_mutex_destroy(&ro->mu);
    free(ro);
}
