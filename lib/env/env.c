/* rlp_env: an environment's callbacks run on its own worker threads, one
 * call per worker, each under a deadline. The engine submits a call and
 * goes on decoding; it polls, and abandons a call that overruns: that
 * worker is written off (a replacement starts), finishes alone, and the
 * episode it used is closed after it. The environment itself lives until
 * rlp_env_free() and the last abandoned call have both ended, so a hung
 * callback can neither stall the run nor be freed under its feet.
 * One mutex guards the queue, the calls' states and the counters. */
#include "env/env_internal.h"

#include "core/clock.h"
#include "core/error.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { CALL_QUEUED = 0, CALL_RUNNING = 1, CALL_DONE = 2 };
enum { KIND_CLOSE = 2 };

struct rlpi_env_ep {
    rlp_env *env;
    void *state;        /* the environment's episode state */
    bool reset_ok;      /* reset returned: close is owed */
    int refs;           /* owner + calls (under env->mu) */
};

struct rlpi_env_call {
    rlp_env *env;       /* the episode may be gone before the call is released */
    rlpi_env_ep *ep;    /* unreferenced (and maybe freed) once the call is done */
    int kind;
    char *text;         /* metadata (reset) or action (step), owned */
    size_t len;
    int32_t *ids;
    size_t n;
    rlp_env_reply reply;
    int state;
    bool abandoned;
    int rc;
    char *error;
    double t_start, t_end;
    int refs;           /* submitter + queue/worker */
    struct rlpi_env_call *next;
};

struct rlp_env {
    char *name;
    rlp_env_callbacks cb;
    void *user;
    rlp_env_options opts;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;   /* workers wait for calls */
    pthread_cond_t done_cv;   /* callers wait for completions (CLOCK_MONOTONIC) */
    pthread_mutex_t serial;   /* held around callbacks when opts.serialize */
    rlpi_env_call *head, *tail;
    uint32_t n_workers, n_idle; /* live workers (not written off) */
    uint32_t n_abandoned;       /* written-off workers still inside a callback */
    uint64_t completions;
    bool closing;               /* rlp_env_free() was called: workers drain the queue and exit */
    bool host_gone;             /* rlp_env_free() is done waiting: the last thread out destroys it */
};

/* ---- replies ---- */

void rlpi_env_reply_clear(rlp_env_reply *r)
{
    for (size_t i = 0; i < r->n_pieces; i++) {
        free(r->pieces[i].text);
        free(r->pieces[i].ids);
    }
    free(r->pieces);
    free(r->tool_error);
    free(r->metadata);
    uint64_t max = r->max_bytes;
    memset(r, 0, sizeof *r);
    r->max_bytes = max;
    r->tool_call = -1;
}

bool rlpi_env_reply_is_tool_call(const rlp_env_reply *r)
{
    return r->tool_call >= 0 ? r->tool_call != 0 : !r->done;
}

static int reply_push(rlp_env_reply *r, rlpi_env_piece *p)
{
    if (r->n_pieces == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 4;
        rlpi_env_piece *np = realloc(r->pieces, cap * sizeof *np);
        if (!np)
            return rlpi_error_set(RLP_E_NOMEM, "environment reply: out of memory");
        r->pieces = np;
        r->cap = cap;
    }
    r->pieces[r->n_pieces++] = *p;
    return RLP_OK;
}

int rlp_env_reply_add_text(rlp_env_reply *reply, const char *text, size_t len, uint32_t flags)
{
    RLPI_CHECK_ARG(reply, "reply is NULL");
    RLPI_CHECK_ARG(text || len == 0, "text is NULL");
    RLPI_CHECK_ARG((flags & ~(uint32_t)(RLP_ENCODE_ADD_BOS | RLP_ENCODE_PARSE_SPECIAL)) == 0,
                   "flags must be rlp_encode_flags");
    if (reply->max_bytes && reply->bytes + len > reply->max_bytes) {
        /* cut, backing off to a UTF-8 character boundary */
        size_t keep = reply->bytes >= reply->max_bytes ? 0 : (size_t)(reply->max_bytes - reply->bytes);
        while (keep > 0 && keep < len && ((unsigned char)text[keep] & 0xC0) == 0x80)
            keep--;
        len = keep;
        reply->truncated = true;
    }
    if (len == 0)
        return RLP_OK;
    rlpi_env_piece p = {.is_tokens = false, .flags = flags, .len = len};
    p.text = malloc(len + 1);
    if (!p.text)
        return rlpi_error_set(RLP_E_NOMEM, "environment reply: out of memory");
    memcpy(p.text, text, len);
    p.text[len] = '\0';
    int rc = reply_push(reply, &p);
    if (rc)
        free(p.text);
    else
        reply->bytes += len;
    return rc;
}

int rlp_env_reply_add_tokens(rlp_env_reply *reply, const int32_t *ids, size_t n)
{
    RLPI_CHECK_ARG(reply, "reply is NULL");
    RLPI_CHECK_ARG(ids || n == 0, "ids is NULL");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_env_reply_add_tokens: id %zu is negative (%d)", i, ids[i]);
    if (reply->max_bytes && reply->bytes + 4 * (uint64_t)n > reply->max_bytes) {
        n = reply->bytes >= reply->max_bytes ? 0 : (size_t)((reply->max_bytes - reply->bytes) / 4);
        reply->truncated = true;
    }
    if (n == 0)
        return RLP_OK;
    rlpi_env_piece p = {.is_tokens = true, .n = n};
    p.ids = malloc(n * sizeof *p.ids);
    if (!p.ids)
        return rlpi_error_set(RLP_E_NOMEM, "environment reply: out of memory");
    memcpy(p.ids, ids, n * sizeof *p.ids);
    int rc = reply_push(reply, &p);
    if (rc)
        free(p.ids);
    else
        reply->bytes += 4 * (uint64_t)n;
    return rc;
}

int rlp_env_reply_set_reward(rlp_env_reply *reply, float reward)
{
    RLPI_CHECK_ARG(reply, "reply is NULL");
    RLPI_CHECK_ARG(isfinite(reward), "reward must be finite");
    reply->reward = reward;
    reply->has_reward = true;
    return RLP_OK;
}

int rlp_env_reply_set_done(rlp_env_reply *reply, int done)
{
    RLPI_CHECK_ARG(reply, "reply is NULL");
    reply->done = done != 0;
    return RLP_OK;
}

int rlp_env_reply_set_tool_call(rlp_env_reply *reply, int tool_call)
{
    RLPI_CHECK_ARG(reply, "reply is NULL");
    reply->tool_call = tool_call != 0;
    return RLP_OK;
}

int rlp_env_reply_set_tool_error(rlp_env_reply *reply, const char *message)
{
    RLPI_CHECK_ARG(reply, "reply is NULL");
    RLPI_CHECK_ARG(message, "message is NULL");
    char *m = strdup(message);
    if (!m)
        return rlpi_error_set(RLP_E_NOMEM, "environment reply: out of memory");
    free(reply->tool_error);
    reply->tool_error = m;
    return RLP_OK;
}

int rlp_env_reply_set_metadata(rlp_env_reply *reply, const char *json)
{
    RLPI_CHECK_ARG(reply, "reply is NULL");
    RLPI_CHECK_ARG(json, "json is NULL");
    json_error_t err;
    json_t *v = json_loads(json, JSON_REJECT_DUPLICATES, &err);
    if (!v || !json_is_object(v)) {
        json_decref(v);
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_env_reply_set_metadata: not a JSON object (%s)",
                              v ? "another JSON value" : err.text);
    }
    char *m = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    if (!m)
        return rlpi_error_set(RLP_E_NOMEM, "environment reply: out of memory");
    free(reply->metadata);
    reply->metadata = m;
    return RLP_OK;
}

/* ---- options ---- */

int rlp_env_options_init(rlp_env_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_ENV_OPTIONS_VERSION, "unknown rlp_env_options version");
    rlp_env_options d = RLP_ENV_OPTIONS_INIT;
    d.version = version;
    *opts = d;
    return RLP_OK;
}

int rlp_multiturn_options_init(rlp_multiturn_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_MULTITURN_OPTIONS_VERSION, "unknown rlp_multiturn_options version");
    rlp_multiturn_options d = RLP_MULTITURN_OPTIONS_INIT;
    d.version = version;
    *opts = d;
    return RLP_OK;
}

/* ---- the environment's life ---- */

static void env_destroy(rlp_env *env)
{
    if (env->cb.free_user)
        env->cb.free_user(env->user);
    pthread_mutex_destroy(&env->mu);
    pthread_mutex_destroy(&env->serial);
    pthread_cond_destroy(&env->work_cv);
    pthread_cond_destroy(&env->done_cv);
    free(env->name);
    free(env);
}

int rlp_env_create(rlp_env **out, const char *name, const rlp_env_callbacks *callbacks, void *user,
                   const rlp_env_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    RLPI_CHECK_ARG(callbacks, "callbacks is NULL");
    RLPI_CHECK_ARG(callbacks->version >= 1 && callbacks->version <= RLP_ENV_CALLBACKS_VERSION,
                   "callbacks->version must be RLP_ENV_CALLBACKS_VERSION");
    RLPI_CHECK_ARG(callbacks->reset && callbacks->step, "callbacks need reset and step");
    rlp_env_options o = RLP_ENV_OPTIONS_INIT;
    if (opts) {
        RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_ENV_OPTIONS_VERSION,
                       "opts->version must be RLP_ENV_OPTIONS_VERSION");
        o = *opts;
        o.version = RLP_ENV_OPTIONS_VERSION;
    }
    RLPI_CHECK_ARG(o.max_threads >= 1 && o.max_threads <= 1024, "max_threads must be 1 … 1024");
    RLPI_CHECK_ARG(o.max_observation_bytes >= 1, "max_observation_bytes must be >= 1");
    rlp_env *env = calloc(1, sizeof *env);
    if (!env)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_env_create: out of memory");
    env->name = strdup(name && *name ? name : "callbacks");
    if (!env->name) {
        free(env);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_env_create: out of memory");
    }
    env->cb = *callbacks;
    env->user = user;
    env->opts = o;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&env->mu, NULL);
    pthread_mutex_init(&env->serial, NULL);
    pthread_cond_init(&env->work_cv, NULL);
    pthread_cond_init(&env->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = env;
    return RLP_OK;
}

const char *rlp_env_name(const rlp_env *env)
{
    return env ? env->name : NULL;
}

const rlp_env_options *rlpi_env_options(const rlp_env *env)
{
    return &env->opts;
}

/* Whether nothing keeps a closing environment alive any more (under mu). */
static bool env_finished(const rlp_env *env)
{
    return env->host_gone && env->n_workers == 0 && env->n_abandoned == 0 && !env->head;
}

void rlp_env_free(rlp_env *env)
{
    if (!env)
        return;
    pthread_mutex_lock(&env->mu);
    env->closing = true;
    pthread_cond_broadcast(&env->work_cv);
    /* live workers drain the queue (closes of finished episodes) and exit;
     * past the call deadline the ones still busy are left to end alone:
     * the last thread out destroys the environment */
    struct timespec ts;
    rlpi_deadline_after(&ts, env->opts.timeout_ms ? env->opts.timeout_ms : 30000);
    while ((env->n_workers > 0 || env->head) && pthread_cond_timedwait(&env->done_cv, &env->mu, &ts) == 0) {
    }
    env->host_gone = true;
    bool now = env_finished(env);
    pthread_mutex_unlock(&env->mu);
    if (now)
        env_destroy(env); /* else the last abandoned worker destroys it */
}

/* ---- episodes ---- */

int rlpi_env_ep_create(rlpi_env_ep **out, rlp_env *env)
{
    rlpi_env_ep *ep = calloc(1, sizeof *ep);
    if (!ep)
        return rlpi_error_set(RLP_E_NOMEM, "environment: out of memory");
    ep->env = env;
    ep->refs = 1;
    *out = ep;
    return RLP_OK;
}

static void call_free(rlpi_env_call *c)
{
    rlpi_env_reply_clear(&c->reply);
    free(c->text);
    free(c->ids);
    free(c->error);
    free(c);
}

static void enqueue(rlp_env *env, rlpi_env_call *c);

/* Drops one reference to ep (under mu). At zero a close is owed: queued
 * for a worker, or run here when `on_worker` (an abandoned call ending). */
static void ep_unref_locked(rlpi_env_ep *ep, bool on_worker, bool *close_here)
{
    *close_here = false;
    if (--ep->refs > 0)
        return;
    rlp_env *env = ep->env;
    if (!ep->reset_ok || !env->cb.close) {
        free(ep);
        return;
    }
    if (on_worker || env->closing) {
        *close_here = true;
        return;
    }
    rlpi_env_call *c = calloc(1, sizeof *c);
    if (!c) { /* cannot queue it: close on this thread rather than leak */
        *close_here = true;
        return;
    }
    c->env = env;
    c->ep = ep;
    c->kind = KIND_CLOSE;
    c->refs = 1;
    c->reply.tool_call = -1;
    enqueue(env, c);
}

static void run_close(rlpi_env_ep *ep)
{
    rlp_env *env = ep->env;
    if (env->opts.serialize)
        pthread_mutex_lock(&env->serial);
    env->cb.close(ep->state, env->user);
    if (env->opts.serialize)
        pthread_mutex_unlock(&env->serial);
    free(ep);
}

void rlpi_env_ep_release(rlpi_env_ep *ep)
{
    if (!ep)
        return;
    rlp_env *env = ep->env;
    bool close_here;
    pthread_mutex_lock(&env->mu);
    ep_unref_locked(ep, false, &close_here);
    pthread_mutex_unlock(&env->mu);
    if (close_here)
        run_close(ep);
}

/* ---- workers ---- */

static void *worker_main(void *arg);

static void spawn_worker_locked(rlp_env *env)
{
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, worker_main, env) == 0) {
        env->n_workers++;
        env->n_idle++;
    }
    pthread_attr_destroy(&at);
}

static void enqueue(rlp_env *env, rlpi_env_call *c)
{
    c->next = NULL;
    if (env->tail)
        env->tail->next = c;
    else
        env->head = c;
    env->tail = c;
    if (env->n_idle == 0 && env->n_workers < env->opts.max_threads)
        spawn_worker_locked(env);
    pthread_cond_signal(&env->work_cv);
}

static void run_call(rlp_env *env, rlpi_env_call *c)
{
    rlpi_env_ep *ep = c->ep;
    if (env->opts.serialize)
        pthread_mutex_lock(&env->serial);
    if (c->kind == KIND_CLOSE) {
        env->cb.close(ep->state, env->user);
    } else if (c->kind == RLPI_ENV_RESET) {
        void *state = NULL;
        c->rc = env->cb.reset(&state, &c->reply, c->text, env->user);
        ep->state = state;
        ep->reset_ok = true; /* whatever it returned, it may hold state */
    } else {
        c->rc = env->cb.step(&c->reply, ep->state, c->text ? c->text : "", c->len, c->ids, c->n, env->user);
    }
    if (env->opts.serialize)
        pthread_mutex_unlock(&env->serial);
}

static void *worker_main(void *arg)
{
    rlp_env *env = arg;
    pthread_mutex_lock(&env->mu);
    for (;;) {
        while (!env->head && !env->closing)
            pthread_cond_wait(&env->work_cv, &env->mu);
        if (!env->head)
            break; /* closing and nothing left */
        rlpi_env_call *c = env->head;
        env->head = c->next;
        if (!env->head)
            env->tail = NULL;
        if (c->abandoned) { /* given up before it started */
            bool close_here = false;
            if (c->ep)
                ep_unref_locked(c->ep, true, &close_here);
            rlpi_env_ep *ep = c->ep;
            if (--c->refs == 0)
                call_free(c);
            if (close_here) {
                pthread_mutex_unlock(&env->mu);
                run_close(ep);
                pthread_mutex_lock(&env->mu);
            }
            continue;
        }
        c->state = CALL_RUNNING;
        c->t_start = rlpi_now_s();
        env->n_idle--;
        pthread_mutex_unlock(&env->mu);
        run_call(env, c);
        double t_end = rlpi_now_s();
        pthread_mutex_lock(&env->mu);
        c->t_end = t_end;
        c->state = CALL_DONE;
        env->completions++;
        bool written_off = c->abandoned;
        rlpi_env_ep *ep = c->ep;
        bool close_here = false;
        if (c->kind == KIND_CLOSE) {
            free(ep);
            ep = NULL;
        } else {
            ep_unref_locked(ep, true, &close_here);
        }
        if (--c->refs == 0)
            call_free(c);
        pthread_cond_broadcast(&env->done_cv);
        if (close_here) {
            pthread_mutex_unlock(&env->mu);
            run_close(ep);
            pthread_mutex_lock(&env->mu);
        }
        if (written_off) {
            env->n_abandoned--;
            bool last = env_finished(env);
            pthread_mutex_unlock(&env->mu);
            if (last)
                env_destroy(env);
            return NULL;
        }
        env->n_idle++;
    }
    env->n_workers--;
    env->n_idle--;
    pthread_cond_broadcast(&env->done_cv);
    bool last = env_finished(env);
    pthread_mutex_unlock(&env->mu);
    if (last)
        env_destroy(env);
    return NULL;
}

/* ---- calls ---- */

int rlpi_env_call_submit(rlpi_env_call **out, rlpi_env_ep *ep, int kind, const char *text, size_t len,
                         const int32_t *ids, size_t n)
{
    rlp_env *env = ep->env;
    rlpi_env_call *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "environment: out of memory");
    c->env = env;
    c->ep = ep;
    c->kind = kind;
    c->reply.tool_call = -1;
    c->reply.max_bytes = env->opts.max_observation_bytes;
    if (text) {
        c->text = malloc(len + 1);
        if (!c->text) {
            free(c);
            return rlpi_error_set(RLP_E_NOMEM, "environment: out of memory");
        }
        memcpy(c->text, text, len);
        c->text[len] = '\0';
        c->len = len;
    }
    if (n) {
        c->ids = malloc(n * sizeof *c->ids);
        if (!c->ids) {
            call_free(c);
            return rlpi_error_set(RLP_E_NOMEM, "environment: out of memory");
        }
        memcpy(c->ids, ids, n * sizeof *c->ids);
        c->n = n;
    }
    pthread_mutex_lock(&env->mu);
    if (env->n_abandoned >= env->opts.max_abandoned && env->opts.timeout_ms) {
        /* every spare thread is stuck in a hung call: fail fast */
        c->state = CALL_DONE;
        c->rc = RLP_E_TIMEOUT;
        c->refs = 1;
        pthread_mutex_unlock(&env->mu);
        char msg[160];
        snprintf(msg, sizeof msg, "environment '%s': %u calls abandoned at their deadline still run", env->name,
                 env->opts.max_abandoned);
        c->error = strdup(msg);
        *out = c;
        return RLP_OK;
    }
    ep->refs++;
    c->refs = 2; /* the submitter and the queue/worker */
    enqueue(env, c);
    pthread_mutex_unlock(&env->mu);
    *out = c;
    return RLP_OK;
}

int rlpi_env_call_poll(rlpi_env_call *c, double now)
{
    rlp_env *env = c->env;
    pthread_mutex_lock(&env->mu);
    int st = c->state;
    double start = c->t_start;
    pthread_mutex_unlock(&env->mu);
    if (st == CALL_DONE)
        return RLPI_CALL_DONE;
    if (st == CALL_RUNNING && env->opts.timeout_ms && now > start + 1e-3 * env->opts.timeout_ms)
        return RLPI_CALL_TIMED_OUT;
    return RLPI_CALL_RUNNING;
}

double rlpi_env_call_deadline(const rlpi_env_call *c)
{
    rlp_env *env = c->env;
    pthread_mutex_lock(&env->mu);
    double d = c->state == CALL_RUNNING && env->opts.timeout_ms ? c->t_start + 1e-3 * env->opts.timeout_ms
                                                                  : INFINITY;
    pthread_mutex_unlock(&env->mu);
    return d;
}

int rlpi_env_call_status(const rlpi_env_call *c, const char **error)
{
    /* a done call is no longer written by its worker */
    if (error) {
        if (c->error)
            *error = c->error;
        else if (c->rc != RLP_OK)
            *error = c->reply.tool_error ? c->reply.tool_error : "the environment's callback failed";
        else
            *error = NULL;
    }
    return c->rc == RLP_OK ? RLP_OK : c->rc == RLP_E_TIMEOUT ? RLP_E_TIMEOUT : RLP_E_CALLBACK;
}

rlp_env_reply *rlpi_env_call_reply(rlpi_env_call *c)
{
    return &c->reply;
}

double rlpi_env_call_seconds(const rlpi_env_call *c)
{
    return c->t_end > c->t_start ? c->t_end - c->t_start : 0.0;
}

void rlpi_env_call_release(rlpi_env_call *c)
{
    if (!c)
        return;
    rlp_env *env = c->env;
    pthread_mutex_lock(&env->mu);
    if (c->state == CALL_RUNNING && !c->abandoned) {
        /* write its worker off and start a replacement for the queue */
        c->abandoned = true;
        env->n_abandoned++;
        env->n_workers--;
        if (env->head && env->n_idle == 0 && env->n_workers < env->opts.max_threads)
            spawn_worker_locked(env);
    } else if (c->state == CALL_QUEUED) {
        c->abandoned = true; /* the worker that dequeues it drops it */
    }
    if (--c->refs == 0)
        call_free(c);
    pthread_mutex_unlock(&env->mu);
}

uint64_t rlpi_env_completions(rlp_env *env)
{
    pthread_mutex_lock(&env->mu);
    uint64_t n = env->completions;
    pthread_mutex_unlock(&env->mu);
    return n;
}

void rlpi_env_wait(rlp_env *env, uint64_t seen, double until)
{
    pthread_mutex_lock(&env->mu);
    while (env->completions == seen) {
        double left = until - rlpi_now_s();
        if (!(left > 0))
            break;
        if (left > 3600)
            left = 3600;
        struct timespec ts;
        rlpi_deadline_after(&ts, (uint32_t)(left * 1000.0) + 1);
        if (pthread_cond_timedwait(&env->done_cv, &env->mu, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(&env->mu);
}
