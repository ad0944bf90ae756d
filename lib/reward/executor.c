/* Worker threads of one reward handle, a supervisor (the scoring thread)
 * that enforces per-call deadlines, and the job that carries copies of the
 * samples. Ownership is what makes abandonment safe: a job (samples,
 * results, buffers) and its scorer are reference-counted, and a worker that
 * learns it was abandoned touches only the job and its own slot, never the
 * executor, which the host may have freed by then. Must not run a scorer
 * on the scoring thread: it could not be timed out. */
#include "reward/executor.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "reward/refine.h"

#include <jansson.h>
#include <math.h>
#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ST_PENDING = 0, ST_RUNNING, ST_DONE, ST_TIMEDOUT, ST_NOWORKER };

/* Longest sleep of the supervisor when no call has a deadline. */
#define IDLE_WAIT_NS 1000000000ull

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rlpi_outcome_clear(rlpi_outcome *o)
{
    if (!o)
        return;
    free(o->token_scores);
    free(o->step_ends);
    memset(o, 0, sizeof *o);
}

char *rlpi_metadata_reference(const char *metadata_json, int *bad)
{
    *bad = 0;
    if (!metadata_json)
        return NULL;
    json_t *root = NULL;
    if (rlpi_json_load_guarded(metadata_json, strlen(metadata_json), RLPI_JSON_MAX_DEPTH, "metadata", &root)) {
        *bad = 1;
        return NULL;
    }
    char *ref = NULL;
    json_t *v = json_is_object(root) ? json_object_get(root, "reference") : NULL;
    if (json_is_string(v))
        ref = strdup(json_string_value(v));
    else if (json_is_number(v))
        ref = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    json_decref(root);
    return ref;
}

/* ---- jobs ------------------------------------------------------------------ */

typedef struct job {
    atomic_int refs;
    rlpi_scorer *sc;            /* a reference */
    size_t n, chunk, n_calls;
    rlp_reward_request *reqs;   /* (n) pointing into arena / ref_owned */
    char *arena;                /* copies of every string and token array */
    char **ref_owned;           /* (n) references read from metadata by the workers */
    rlp_reward_result *res;     /* (n) */
    uint8_t *fail;              /* (n) */
    float *tok;                 /* (total tokens) when sc->token_scores */
    uint8_t *steps;             /* (total tokens) */
    size_t *tok_off;            /* (n) offset of sample i's tokens in tok/steps */
    atomic_int *state;          /* (n_calls) ST_* */
    int *rc;                    /* (n_calls) return of each call */
    atomic_size_t next_call;
    atomic_size_t n_done;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* the last call finished */
} job;

static void job_unref(job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    for (size_t i = 0; j->ref_owned && i < j->n; i++)
        free(j->ref_owned[i]);
    free(j->ref_owned);
    free(j->reqs);
    free(j->arena);
    free(j->res);
    free(j->fail);
    free(j->tok);
    free(j->steps);
    free(j->tok_off);
    free(j->state);
    free(j->rc);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    rlpi_scorer_unref(j->sc);
    free(j);
}

static size_t str_bytes(const char *s, size_t len)
{
    return s ? len + 1 : 0;
}

static char *copy_str(char **at, const char *s, size_t len)
{
    if (!s)
        return NULL;
    char *d = *at;
    memcpy(d, s, len);
    d[len] = '\0';
    *at += len + 1;
    return d;
}

static job *job_create(rlpi_scorer *sc, const rlp_reward_request *reqs, size_t n)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    atomic_init(&j->refs, 1);
    j->sc = sc;
    rlpi_scorer_ref(sc);
    j->n = n;
    j->chunk = sc->chunk ? sc->chunk : n;
    j->n_calls = (n + j->chunk - 1) / j->chunk;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);

    /* one arena for every string and token array, aligned for int32 */
    size_t bytes = 0, tokens = 0;
    for (size_t i = 0; i < n; i++) {
        const rlp_reward_request *r = &reqs[i];
        bytes += r->n_completion_tokens * sizeof(int32_t) + 7; /* + padding to align the tokens */
        bytes += str_bytes(r->prompt_text, r->prompt_len) + str_bytes(r->completion_text, r->completion_len);
        bytes += r->reference ? strlen(r->reference) + 1 : 0;
        bytes += r->metadata_json ? strlen(r->metadata_json) + 1 : 0;
        tokens += r->n_completion_tokens;
    }
    j->arena = malloc(bytes ? bytes : 1);
    j->reqs = malloc(n * sizeof *j->reqs);
    j->ref_owned = calloc(n, sizeof *j->ref_owned);
    j->res = malloc(n * sizeof *j->res);
    j->fail = calloc(n, 1);
    j->tok_off = malloc(n * sizeof *j->tok_off);
    j->state = malloc(j->n_calls * sizeof *j->state);
    j->rc = calloc(j->n_calls, sizeof *j->rc);
    if (sc->token_scores && tokens) {
        j->tok = malloc(tokens * sizeof *j->tok);
        j->steps = malloc(tokens);
    }
    if (!j->arena || !j->reqs || !j->ref_owned || !j->res || !j->fail || !j->tok_off || !j->state || !j->rc ||
        (sc->token_scores && tokens && (!j->tok || !j->steps))) {
        job_unref(j);
        return NULL;
    }
    char *at = j->arena;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const rlp_reward_request *r = &reqs[i];
        rlp_reward_request *d = &j->reqs[i];
        *d = *r;
        d->version = RLP_REWARD_REQUEST_VERSION;
        if (r->n_completion_tokens) {
            at += (size_t)(-(uintptr_t)at & (_Alignof(int32_t) - 1)); /* strings before may end anywhere */
            d->completion_tokens = (const int32_t *)(void *)at;
            memcpy(at, r->completion_tokens, r->n_completion_tokens * sizeof(int32_t));
            at += r->n_completion_tokens * sizeof(int32_t);
        } else {
            d->completion_tokens = NULL;
        }
        d->prompt_text = copy_str(&at, r->prompt_text, r->prompt_len);
        d->completion_text = copy_str(&at, r->completion_text, r->completion_len);
        d->reference = r->reference ? copy_str(&at, r->reference, strlen(r->reference)) : NULL;
        d->metadata_json = r->metadata_json ? copy_str(&at, r->metadata_json, strlen(r->metadata_json)) : NULL;
        if (!d->prompt_text) {
            d->prompt_text = "";
            d->prompt_len = 0;
        }
        if (!d->completion_text) {
            d->completion_text = "";
            d->completion_len = 0;
        }
        j->tok_off[i] = off;
        off += r->n_completion_tokens;
    }
    for (size_t c = 0; c < j->n_calls; c++)
        atomic_init(&j->state[c], ST_PENDING);
    atomic_init(&j->next_call, 0);
    atomic_init(&j->n_done, 0);
    return j;
}

/* Everything a call does before and after the scorer itself, on a worker. */
static void run_call(job *j, size_t c)
{
    size_t b = c * j->chunk, e = b + j->chunk < j->n ? b + j->chunk : j->n;
    for (size_t i = b; i < e; i++) {
        rlp_reward_request *r = &j->reqs[i];
        rlp_reward_result *res = &j->res[i];
        if (!r->reference && r->metadata_json && j->sc->needs_reference) {
            int bad = 0;
            j->ref_owned[i] = rlpi_metadata_reference(r->metadata_json, &bad);
            r->reference = j->ref_owned[i];
        }
        memset(res, 0, sizeof *res);
        res->version = RLP_REWARD_RESULT_VERSION;
        res->score = NAN;
        res->valid = 1;
        if (j->tok && r->n_completion_tokens) {
            res->token_scores = j->tok + j->tok_off[i];
            res->step_ends = j->steps + j->tok_off[i];
            memset(res->token_scores, 0, r->n_completion_tokens * sizeof(float));
            memset(res->step_ends, 0, r->n_completion_tokens);
        }
    }
    j->rc[c] = j->sc->ops->score(j->sc->impl, j->res + b, j->reqs + b, e - b, j->fail + b);
}

/* ---- workers ----------------------------------------------------------------- */

/* Shared by the executor and every worker it ever started, abandoned or
 * not, so that the count outlives the executor. */
typedef struct exec_shared {
    atomic_int refs;
    atomic_int abandoned_running;
} exec_shared;

static void shared_unref(exec_shared *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

typedef struct wslot {
    pthread_t thread;
    _Atomic int64_t call;        /* index of the call being run, -1 when idle */
    _Atomic uint64_t start_ns;   /* when that call started */
    uint64_t seen_gen;
    rlpi_reward_exec *ex;        /* not to be touched once abandoned */
    exec_shared *shared;
} wslot;

struct rlpi_reward_exec {
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    int quit;
    uint64_t gen;                /* bumped for every job */
    job *cur;                    /* the running job (under mu) */
    /* touched by the scoring thread only */
    wslot **slots;               /* (n_slots) live workers */
    int n_slots;
    int n_threads;
    uint32_t max_abandoned;
    exec_shared *shared;
};

/* Claims and runs calls of j until none is left. Returns 1 when this
 * worker was abandoned (its call overran), 0 otherwise. */
static int run_job(wslot *w, job *j)
{
    for (;;) {
        size_t c = atomic_fetch_add(&j->next_call, 1);
        if (c >= j->n_calls)
            return 0;
        int exp = ST_PENDING;
        if (!atomic_compare_exchange_strong(&j->state[c], &exp, ST_RUNNING))
            continue; /* failed by the supervisor already */
        atomic_store(&w->start_ns, now_ns());
        atomic_store(&w->call, (int64_t)c);
        run_call(j, c);
        exp = ST_RUNNING;
        if (!atomic_compare_exchange_strong(&j->state[c], &exp, ST_DONE))
            return 1; /* timed out: the result is discarded */
        atomic_store(&w->call, -1);
        if (atomic_fetch_add(&j->n_done, 1) + 1 == j->n_calls) {
            pthread_mutex_lock(&j->mu);
            pthread_cond_signal(&j->cv);
            pthread_mutex_unlock(&j->mu);
        }
    }
}

static void *worker_main(void *arg)
{
    wslot *w = arg;
    rlpi_reward_exec *ex = w->ex;
    pthread_mutex_lock(&ex->mu);
    for (;;) {
        while (!ex->quit && (!ex->cur || ex->gen == w->seen_gen))
            pthread_cond_wait(&ex->work_cv, &ex->mu);
        if (ex->quit)
            break;
        job *j = ex->cur;
        w->seen_gen = ex->gen;
        atomic_fetch_add(&j->refs, 1);
        pthread_mutex_unlock(&ex->mu);
        int abandoned = run_job(w, j);
        job_unref(j);
        if (abandoned) {
            /* the executor has forgotten this slot and detached the thread */
            exec_shared *s = w->shared;
            free(w);
            atomic_fetch_sub(&s->abandoned_running, 1);
            shared_unref(s);
            return NULL;
        }
        pthread_mutex_lock(&ex->mu);
    }
    pthread_mutex_unlock(&ex->mu);
    return NULL;
}

static int spawn_worker(rlpi_reward_exec *ex)
{
    wslot **slots = realloc(ex->slots, ((size_t)ex->n_slots + 1) * sizeof *slots);
    if (!slots)
        return RLP_E_NOMEM;
    ex->slots = slots;
    wslot *w = calloc(1, sizeof *w);
    if (!w)
        return RLP_E_NOMEM;
    atomic_init(&w->call, -1);
    atomic_init(&w->start_ns, 0);
    w->ex = ex;
    w->shared = ex->shared;
    atomic_fetch_add(&ex->shared->refs, 1);
    /* a worker that joins a running job takes it up at once */
    pthread_mutex_lock(&ex->mu);
    w->seen_gen = ex->cur ? ex->gen - 1 : ex->gen;
    pthread_mutex_unlock(&ex->mu);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        atomic_fetch_sub(&ex->shared->refs, 1);
        free(w);
        return RLP_E_BACKEND;
    }
    ex->slots[ex->n_slots++] = w;
    return RLP_OK;
}

/* Whether one more live worker may start: live + abandoned stays within
 * n_threads + max_abandoned. */
static int may_spawn(const rlpi_reward_exec *ex)
{
    int64_t total = (int64_t)ex->n_slots + atomic_load(&ex->shared->abandoned_running);
    return ex->n_slots < ex->n_threads && total < (int64_t)ex->n_threads + ex->max_abandoned;
}

int rlpi_reward_exec_create(rlpi_reward_exec **out, int n_threads, uint32_t max_abandoned)
{
    rlpi_reward_exec *ex = calloc(1, sizeof *ex);
    exec_shared *s = calloc(1, sizeof *s);
    if (!ex || !s) {
        free(ex);
        free(s);
        return rlpi_error_set(RLP_E_NOMEM, "reward: out of memory");
    }
    atomic_init(&s->refs, 1);
    atomic_init(&s->abandoned_running, 0);
    ex->shared = s;
    ex->n_threads = n_threads < 1 ? 1 : n_threads;
    ex->max_abandoned = max_abandoned;
    pthread_mutex_init(&ex->mu, NULL);
    pthread_cond_init(&ex->work_cv, NULL);
    *out = ex;
    return RLP_OK;
}

void rlpi_reward_exec_free(rlpi_reward_exec *ex)
{
    if (!ex)
        return;
    pthread_mutex_lock(&ex->mu);
    ex->quit = 1;
    pthread_cond_broadcast(&ex->work_cv);
    pthread_mutex_unlock(&ex->mu);
    for (int i = 0; i < ex->n_slots; i++) {
        pthread_join(ex->slots[i]->thread, NULL);
        shared_unref(ex->slots[i]->shared);
        free(ex->slots[i]);
    }
    free(ex->slots);
    shared_unref(ex->shared);
    pthread_cond_destroy(&ex->work_cv);
    pthread_mutex_destroy(&ex->mu);
    free(ex);
}

/* Times out every call whose deadline has passed; returns the earliest
 * deadline still ahead. Called with j->mu held. */
static uint64_t supervise(rlpi_reward_exec *ex, job *j, uint64_t timeout_ns, uint64_t now)
{
    uint64_t next = now + (timeout_ns ? timeout_ns : IDLE_WAIT_NS);
    if (!timeout_ns)
        return next;
    for (int i = 0; i < ex->n_slots;) {
        wslot *w = ex->slots[i];
        int64_t c = atomic_load(&w->call);
        uint64_t start = atomic_load(&w->start_ns);
        if (c < 0 || start + timeout_ns > now) {
            if (c >= 0 && start + timeout_ns < next)
                next = start + timeout_ns;
            i++;
            continue;
        }
        pthread_t th = w->thread; /* w may be freed once the CAS below succeeds */
        atomic_fetch_add(&ex->shared->abandoned_running, 1);
        int exp = ST_RUNNING;
        if (!atomic_compare_exchange_strong(&j->state[c], &exp, ST_TIMEDOUT)) {
            atomic_fetch_sub(&ex->shared->abandoned_running, 1); /* it has just finished */
            i++;
            continue;
        }
        atomic_fetch_add(&j->n_done, 1);
        pthread_detach(th);
        ex->slots[i] = ex->slots[--ex->n_slots];
        if (may_spawn(ex))
            spawn_worker(ex); /* if it fails the others carry on */
    }
    return next;
}

/* No worker is left: fail every call that nobody has claimed. */
static void fail_unclaimed(job *j)
{
    size_t from = atomic_exchange(&j->next_call, j->n_calls);
    for (size_t c = from; c < j->n_calls; c++) {
        int exp = ST_PENDING;
        if (atomic_compare_exchange_strong(&j->state[c], &exp, ST_NOWORKER))
            atomic_fetch_add(&j->n_done, 1);
    }
}

static void make_outcome(const job *j, size_t i, int state, int rc, uint32_t timeout_ms, int refine, float eta,
                         rlpi_outcome *o)
{
    const rlp_reward_result *res = &j->res[i];
    o->valid = 0;
    if (state == ST_TIMEDOUT) {
        o->kind = RLPI_RW_TIMEOUT;
        snprintf(o->reason, sizeof o->reason, "timed out after %u ms (call abandoned)", timeout_ms);
        return;
    }
    if (state == ST_NOWORKER) {
        o->kind = RLPI_RW_NOWORKER;
        snprintf(o->reason, sizeof o->reason, "no worker left: every worker is stuck in an abandoned call");
        return;
    }
    if (rc != 0) {
        o->kind = RLPI_RW_ERROR;
        if (res->reason[0] && memchr(res->reason, '\0', sizeof res->reason))
            snprintf(o->reason, sizeof o->reason, "%s", res->reason);
        else
            snprintf(o->reason, sizeof o->reason, "callback returned %d", rc);
        return;
    }
    /* the scorer's own text, NUL-terminated whatever it wrote */
    char why[RLP_REWARD_REASON_MAX];
    memcpy(why, res->reason, sizeof why);
    why[sizeof why - 1] = '\0';
    if (j->fail[i]) {
        o->kind = j->fail[i];
        memcpy(o->reason, why[0] ? why : "failed", why[0] ? sizeof why : 7);
        return;
    }
    if (!res->valid) {
        o->kind = RLPI_RW_REJECTED;
        memcpy(o->reason, why[0] ? why : "marked invalid", why[0] ? sizeof why : 15);
        return;
    }
    if (!isfinite(res->score) || fabs(res->score) > FLT_MAX) {
        o->kind = RLPI_RW_NONFINITE;
        snprintf(o->reason, sizeof o->reason, "score is %g (must be finite and fit in a float)", res->score);
        return;
    }
    size_t nt = j->reqs[i].n_completion_tokens;
    if (res->has_token_scores && res->token_scores && nt) {
        for (size_t t = 0; t < nt; t++)
            if (!isfinite(res->token_scores[t])) {
                o->kind = RLPI_RW_NONFINITE;
                snprintf(o->reason, sizeof o->reason, "token score %zu is %g", t, (double)res->token_scores[t]);
                return;
            }
        o->token_scores = malloc(nt * sizeof *o->token_scores);
        o->step_ends = malloc(nt);
        if (!o->token_scores || !o->step_ends) {
            free(o->token_scores);
            free(o->step_ends);
            o->token_scores = NULL;
            o->step_ends = NULL;
            o->kind = RLPI_RW_ERROR;
            snprintf(o->reason, sizeof o->reason, "out of memory for token scores");
            return;
        }
        memcpy(o->token_scores, res->token_scores, nt * sizeof *o->token_scores);
        memcpy(o->step_ends, res->step_ends, nt);
        o->n_tokens = nt;
        if (refine != RLP_REFINE_NONE)
            rlpi_refine_tokens(o->token_scores, o->step_ends, nt, refine, eta);
    }
    o->kind = RLPI_RW_OK;
    o->valid = 1;
    o->score = res->score;
    memcpy(o->reason, why, sizeof why);
}

int rlpi_reward_exec_run(rlpi_reward_exec *ex, rlpi_scorer *sc, uint32_t timeout_ms, int refine, float eta,
                         const rlp_reward_request *reqs, size_t n, rlpi_outcome *out,
                         uint64_t *abandoned_running)
{
    *abandoned_running = (uint64_t)atomic_load(&ex->shared->abandoned_running);
    if (n == 0)
        return RLP_OK;
    while (may_spawn(ex)) {
        int rc = spawn_worker(ex);
        if (rc == RLP_E_NOMEM)
            return rlpi_error_set(rc, "reward: out of memory starting worker threads");
        if (rc)
            break;
    }
    if (ex->n_slots == 0 && atomic_load(&ex->shared->abandoned_running) == 0)
        return rlpi_error_set(RLP_E_BACKEND, "reward: could not start a worker thread");
    job *j = job_create(sc, reqs, n);
    if (!j)
        return rlpi_error_set(RLP_E_NOMEM, "reward: out of memory copying %zu samples", n);

    uint64_t timeout_ns = sc->bounds_own_time ? 0 : (uint64_t)timeout_ms * 1000000u;
    pthread_mutex_lock(&ex->mu);
    ex->cur = j;
    ex->gen++;
    pthread_cond_broadcast(&ex->work_cv);
    pthread_mutex_unlock(&ex->mu);

    pthread_mutex_lock(&j->mu);
    while (atomic_load(&j->n_done) < j->n_calls) {
        uint64_t next = supervise(ex, j, timeout_ns, now_ns());
        if (ex->n_slots == 0) {
            fail_unclaimed(j);
            if (atomic_load(&j->n_done) >= j->n_calls)
                break;
        }
        struct timespec ts = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    pthread_mutex_unlock(&j->mu);

    pthread_mutex_lock(&ex->mu);
    ex->cur = NULL;
    pthread_mutex_unlock(&ex->mu);

    for (size_t c = 0; c < j->n_calls; c++) {
        int st = atomic_load(&j->state[c]);
        size_t b = c * j->chunk, e = b + j->chunk < n ? b + j->chunk : n;
        for (size_t i = b; i < e; i++)
            make_outcome(j, i, st, st == ST_DONE ? j->rc[c] : 0, timeout_ms, refine, eta, &out[i]);
    }
    *abandoned_running = (uint64_t)atomic_load(&ex->shared->abandoned_running);
    job_unref(j);
    return RLP_OK;
}
