/* Worker threads of one reward handle, a supervisor (the scoring thread)
 * that enforces per-call deadlines, and the job that carries copies of the
 * samples. Ownership is what makes abandonment safe: a job (samples,
 * results, buffers) and its scorer are reference-counted, and a worker that
 * learns it was abandoned touches only the job and its own slot, never the
 * executor, which the host may have freed by then. Must not run a scorer
 * on the scoring thread: it could not be timed out. */
#include "reward/executor.h"

#include "core/clock.h"
#include "core/error.h"
#include "reward/metadata.h"
#include "reward/refine.h"

#include <math.h>
#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ST_PENDING = 0, ST_COPYING, ST_RUNNING, ST_DONE, ST_TIMEDOUT, ST_NOWORKER };

/* Longest sleep of the supervisor when no call has a deadline. */
#define IDLE_WAIT_NS 1000000000ull


void rlpi_outcome_clear(rlpi_outcome *o)
{
    if (!o)
        return;
    free(o->token_scores);
    free(o->step_ends);
    memset(o, 0, sizeof *o);
}

/* ---- jobs ------------------------------------------------------------------ */

/* A job is one run: the caller's requests and outcome slots (used only
 * while the caller waits), and the job's own copies that the scorers read,
 * which outlive the caller when a call is abandoned. Each call copies its
 * own samples on its worker before its deadline starts, so the copying
 * runs in parallel and an abandoned call never reads the host's memory. */
typedef struct job {
    atomic_int refs;
    rlpi_scorer *sc;             /* a reference */
    size_t n, chunk, n_calls;
    uint32_t timeout_ms;
    int refine;
    float eta;
    /* the caller's: valid until every call is finished; never touched by
     * an abandoned worker */
    const rlp_reward_request *src; /* (n) */
    rlpi_outcome *out;             /* (n) */
    /* the job's own */
    rlp_reward_request *reqs;    /* (n) copies of src, pointing into call_mem */
    rlp_reward_result *res;      /* (n) */
    uint8_t *fail;               /* (n) */
    char **ref_owned;            /* (n) references read from the metadata */
    void **call_mem;             /* (n_calls) each call's copies and token buffers */
    atomic_int *state;           /* (n_calls) ST_* */
    int *rc;                     /* (n_calls) return of each call */
    /* Calls are claimed in blocks of `block` consecutive ones, so that one
     * worker writes neighbouring samples (no false sharing between
     * workers). The rest of an abandoned worker's block is orphaned: put
     * here (under mu) for the others to take. */
    size_t block;
    atomic_size_t next_call;
    size_t *orph_b, *orph_e;     /* (n_orph) orphaned ranges of calls, capacity n_calls */
    atomic_size_t n_orph;
    atomic_size_t n_done;
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* the last call finished */
} job;

static void job_unref(job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    for (size_t i = 0; j->ref_owned && i < j->n; i++)
        free(j->ref_owned[i]);
    for (size_t c = 0; j->call_mem && c < j->n_calls; c++)
        free(j->call_mem[c]);
    free(j->ref_owned);
    free(j->call_mem);
    free(j->orph_b);
    free(j->orph_e);
    free(j->reqs);
    free(j->res);
    free(j->fail);
    free(j->state);
    free(j->rc);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    rlpi_scorer_unref(j->sc);
    free(j);
}

static job *job_create(rlpi_scorer *sc, const rlp_reward_request *src, size_t n, rlpi_outcome *out)
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
    j->src = src;
    j->out = out;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->reqs = malloc(n * sizeof *j->reqs);
    j->res = malloc(n * sizeof *j->res);
    j->fail = calloc(n, 1);
    j->ref_owned = calloc(n, sizeof *j->ref_owned);
    j->call_mem = calloc(j->n_calls, sizeof *j->call_mem);
    j->state = malloc(j->n_calls * sizeof *j->state);
    j->rc = calloc(j->n_calls, sizeof *j->rc);
    if (!j->reqs || !j->res || !j->fail || !j->ref_owned || !j->call_mem || !j->state || !j->rc) {
        job_unref(j);
        return NULL;
    }
    for (size_t c = 0; c < j->n_calls; c++)
        atomic_init(&j->state[c], ST_PENDING);
    atomic_init(&j->next_call, 0);
    atomic_init(&j->n_orph, 0);
    atomic_init(&j->n_done, 0);
    j->block = 1;
    return j;
}

static char *copy_str(char **at, const char *s, size_t len)
{
    char *d = *at;
    memcpy(d, s, len);
    d[len] = '\0';
    *at += len + 1;
    return d;
}

/* Copies samples [b, e) of the caller's requests into one block owned by
 * call c and initialises their results. Returns 0, or -1 when out of
 * memory (the results then say so). */
static int copy_call(job *j, size_t c, size_t b, size_t e)
{
    size_t bytes = 0, tokens = 0;
    for (size_t i = b; i < e; i++) {
        const rlp_reward_request *r = &j->src[i];
        bytes += r->n_completion_tokens * sizeof(int32_t) + _Alignof(int32_t);
        bytes += (r->prompt_text ? r->prompt_len : 0) + (r->completion_text ? r->completion_len : 0) + 2;
        bytes += r->reference ? strlen(r->reference) + 1 : 0;
        bytes += r->metadata_json ? strlen(r->metadata_json) + 1 : 0;
        tokens += r->n_completion_tokens;
    }
    size_t tok_bytes = j->sc->token_scores ? tokens * (sizeof(float) + 1) : 0;
    /* token scores first: malloc's alignment suits floats */
    char *mem = malloc(tok_bytes + bytes);
    j->call_mem[c] = mem;
    float *tok = (float *)(void *)mem;
    uint8_t *steps = (uint8_t *)(mem + tokens * sizeof(float) * (j->sc->token_scores != 0));
    char *at = mem + tok_bytes;
    for (size_t i = b; i < e; i++) {
        const rlp_reward_request *r = &j->src[i];
        rlp_reward_request *d = &j->reqs[i];
        rlp_reward_result *res = &j->res[i];
        memset(res, 0, sizeof *res);
        res->version = RLP_REWARD_RESULT_VERSION;
        res->score = NAN;
        res->valid = 1;
        if (!mem) {
            rlpi_reason(res, "out of memory copying the sample");
            continue;
        }
        *d = *r;
        d->version = RLP_REWARD_REQUEST_VERSION;
        d->completion_tokens = NULL;
        if (r->n_completion_tokens) {
            at += (size_t)(-(uintptr_t)at & (_Alignof(int32_t) - 1)); /* the strings before end anywhere */
            d->completion_tokens = (const int32_t *)(void *)at;
            memcpy(at, r->completion_tokens, r->n_completion_tokens * sizeof(int32_t));
            at += r->n_completion_tokens * sizeof(int32_t);
        }
        d->prompt_text = copy_str(&at, r->prompt_text ? r->prompt_text : "", r->prompt_text ? r->prompt_len : 0);
        d->prompt_len = r->prompt_text ? r->prompt_len : 0;
        d->completion_text =
            copy_str(&at, r->completion_text ? r->completion_text : "", r->completion_text ? r->completion_len : 0);
        d->completion_len = r->completion_text ? r->completion_len : 0;
        d->reference = r->reference ? copy_str(&at, r->reference, strlen(r->reference)) : NULL;
        d->metadata_json = r->metadata_json ? copy_str(&at, r->metadata_json, strlen(r->metadata_json)) : NULL;
        if (j->sc->token_scores && r->n_completion_tokens) {
            res->token_scores = tok;
            res->step_ends = steps;
            memset(tok, 0, r->n_completion_tokens * sizeof *tok);
            memset(steps, 0, r->n_completion_tokens);
            tok += r->n_completion_tokens;
            steps += r->n_completion_tokens;
        }
    }
    return mem ? 0 : -1;
}

/* Reads the references a scorer needs from the metadata (on the worker:
 * parsing JSON is the costly part of handing out a sample). */
static void read_references(job *j, size_t b, size_t e)
{
    for (size_t i = b; i < e; i++) {
        rlp_reward_request *r = &j->reqs[i];
        if (!r->reference && r->metadata_json && j->sc->needs_reference) {
            int bad = 0;
            j->ref_owned[i] = rlpi_metadata_reference(r->metadata_json, &bad);
            r->reference = j->ref_owned[i];
        }
    }
}

static void fail_outcome(rlpi_outcome *o, int kind, const char *why)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    snprintf(o->reason, sizeof o->reason, "%s", why);
}

/* The outcome of sample i of a finished call that returned rc. */
static void make_outcome(const job *j, size_t i, int rc, rlpi_outcome *o)
{
    const rlp_reward_result *res = &j->res[i];
    memset(o, 0, sizeof *o);
    if (rc != 0) {
        o->kind = RLPI_RW_ERROR;
        if (res->reason[0] && memchr(res->reason, '\0', sizeof res->reason))
            memcpy(o->reason, res->reason, sizeof o->reason);
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
            fail_outcome(o, RLPI_RW_ERROR, "out of memory for token scores");
            return;
        }
        memcpy(o->token_scores, res->token_scores, nt * sizeof *o->token_scores);
        memcpy(o->step_ends, res->step_ends, nt);
        o->n_tokens = nt;
        if (j->refine != RLP_REFINE_NONE)
            rlpi_refine_tokens(o->token_scores, o->step_ends, nt, j->refine, j->eta);
    }
    o->kind = RLPI_RW_OK;
    o->valid = 1;
    o->score = res->score;
    memcpy(o->reason, why, sizeof why);
}

static void call_range(const job *j, size_t c, size_t *b, size_t *e)
{
    *b = c * j->chunk;
    *e = *b + j->chunk < j->n ? *b + j->chunk : j->n;
}

/* A call is finished (by its worker, or by the supervisor): count it and
 * wake the caller after the last one. */
static void call_finished(job *j)
{
    if (atomic_fetch_add(&j->n_done, 1) + 1 == j->n_calls) {
        pthread_mutex_lock(&j->mu);
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
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
    _Atomic size_t blk_end;      /* end of the block of calls it claimed */
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

/* The next block of calls to run: a fresh one, else an orphaned one.
 * Returns 0 when there is none. */
static int claim(job *j, size_t *c, size_t *end)
{
    size_t first = atomic_fetch_add(&j->next_call, j->block);
    if (first < j->n_calls) {
        *c = first;
        *end = first + j->block < j->n_calls ? first + j->block : j->n_calls;
        return 1;
    }
    if (atomic_load(&j->n_orph) == 0)
        return 0;
    int got = 0;
    pthread_mutex_lock(&j->mu);
    size_t k = atomic_load(&j->n_orph);
    if (k > 0) {
        *c = j->orph_b[k - 1];
        *end = j->orph_e[k - 1];
        atomic_store(&j->n_orph, k - 1);
        got = 1;
    }
    pthread_mutex_unlock(&j->mu);
    return got;
}

/* Claims and runs calls of j until none is left. Returns 1 when this
 * worker was abandoned (its call overran), 0 otherwise. */
static int run_job(wslot *w, job *j)
{
    size_t c, end;
    while (claim(j, &c, &end)) {
        atomic_store(&w->blk_end, end);
        for (; c < end; c++) {
            int exp = ST_PENDING;
            if (!atomic_compare_exchange_strong(&j->state[c], &exp, ST_COPYING))
                continue; /* failed by the supervisor already */
            size_t b, e;
            call_range(j, c, &b, &e);
            int copied = copy_call(j, c, b, e) == 0; /* bounded: not under the deadline */
            atomic_store(&w->start_ns, rlpi_now_ns());
            atomic_store(&w->call, (int64_t)c);
            atomic_store(&j->state[c], ST_RUNNING);
            if (copied) {
                read_references(j, b, e);
                j->rc[c] = j->sc->ops->score(j->sc->impl, j->res + b, j->reqs + b, e - b, j->fail + b);
            } else {
                j->rc[c] = RLP_E_NOMEM;
            }
            exp = ST_RUNNING;
            if (!atomic_compare_exchange_strong(&j->state[c], &exp, ST_DONE))
                return 1; /* timed out: the result is discarded, the block's rest orphaned */
            atomic_store(&w->call, -1);
            for (size_t i = b; i < e; i++)
                make_outcome(j, i, j->rc[c], &j->out[i]);
            /* nobody reads this call's copies any more */
            free(j->call_mem[c]);
            j->call_mem[c] = NULL;
            for (size_t i = b; i < e; i++) {
                free(j->ref_owned[i]);
                j->ref_owned[i] = NULL;
            }
            call_finished(j);
        }
    }
    return 0;
}

static void *worker_main(void *arg)
{
    wslot *w = arg;
    rlpi_reward_exec *ex = w->ex;
    pthread_mutex_lock(&ex->mu);
    for (;;) {
        /* a new job, or orphaned calls of the current one */
        while (!ex->quit && (!ex->cur || (ex->gen == w->seen_gen && atomic_load(&ex->cur->n_orph) == 0)))
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
    atomic_init(&w->blk_end, 0);
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

/* Puts calls [b, e) back for other workers (the rest of an abandoned
 * worker's block). Called with j->mu held. */
static void orphan(job *j, size_t b, size_t e)
{
    if (b >= e)
        return;
    if (!j->orph_b) {
        j->orph_b = malloc(j->n_calls * sizeof *j->orph_b);
        j->orph_e = malloc(j->n_calls * sizeof *j->orph_e);
    }
    size_t k = atomic_load(&j->n_orph);
    if (!j->orph_b || !j->orph_e || k >= j->n_calls) {
        for (size_t c = b; c < e; c++) { /* cannot queue them: fail them */
            int exp = ST_PENDING;
            if (atomic_compare_exchange_strong(&j->state[c], &exp, ST_NOWORKER)) {
                size_t sb, se;
                call_range(j, c, &sb, &se);
                for (size_t i = sb; i < se; i++)
                    fail_outcome(&j->out[i], RLPI_RW_ERROR, "out of memory re-queueing the call");
                atomic_fetch_add(&j->n_done, 1);
            }
        }
        return;
    }
    j->orph_b[k] = b;
    j->orph_e[k] = e;
    atomic_store(&j->n_orph, k + 1);
}

/* Times out every call whose deadline has passed; returns the earliest
 * deadline still ahead. Called with j->mu held. */
static uint64_t supervise(rlpi_reward_exec *ex, job *j, uint64_t timeout_ns, uint64_t now)
{
    uint64_t next = now + (timeout_ns ? timeout_ns : IDLE_WAIT_NS);
    if (!timeout_ns)
        return next;
    int orphaned = 0;
    for (int k = 0; k < ex->n_slots;) {
        wslot *w = ex->slots[k];
        int64_t c = atomic_load(&w->call);
        uint64_t start = atomic_load(&w->start_ns);
        if (c < 0 || start + timeout_ns > now) {
            if (c >= 0 && start + timeout_ns < next)
                next = start + timeout_ns;
            k++;
            continue;
        }
        /* read before the CAS: w may be freed once it succeeds */
        pthread_t th = w->thread;
        size_t blk_end = atomic_load(&w->blk_end);
        atomic_fetch_add(&ex->shared->abandoned_running, 1);
        int exp = ST_RUNNING;
        if (!atomic_compare_exchange_strong(&j->state[c], &exp, ST_TIMEDOUT)) {
            atomic_fetch_sub(&ex->shared->abandoned_running, 1); /* it has just finished */
            k++;
            continue;
        }
        size_t b, e;
        call_range(j, (size_t)c, &b, &e);
        char why[RLP_REWARD_REASON_MAX];
        snprintf(why, sizeof why, "timed out after %u ms (call abandoned)", j->timeout_ms);
        for (size_t i = b; i < e; i++)
            fail_outcome(&j->out[i], RLPI_RW_TIMEOUT, why);
        atomic_fetch_add(&j->n_done, 1); /* under j->mu: the caller is this thread */
        orphan(j, (size_t)c + 1, blk_end);
        orphaned = 1;
        pthread_detach(th);
        ex->slots[k] = ex->slots[--ex->n_slots];
        if (may_spawn(ex))
            spawn_worker(ex); /* if it fails the others carry on */
    }
    if (orphaned) { /* idle workers take them */
        pthread_mutex_lock(&ex->mu);
        pthread_cond_broadcast(&ex->work_cv);
        pthread_mutex_unlock(&ex->mu);
    }
    return next;
}

/* No worker is left: fail every call that nobody has claimed. */
static void fail_range(job *j, size_t from, size_t to)
{
    for (size_t c = from; c < to; c++) {
        int exp = ST_PENDING;
        if (atomic_compare_exchange_strong(&j->state[c], &exp, ST_NOWORKER)) {
            size_t b, e;
            call_range(j, c, &b, &e);
            for (size_t i = b; i < e; i++)
                fail_outcome(&j->out[i], RLPI_RW_NOWORKER,
                             "no worker left: every worker is stuck in an abandoned call");
            atomic_fetch_add(&j->n_done, 1);
        }
    }
}

/* No worker is left: fail every call that nobody has claimed. Called with
 * j->mu held. */
static void fail_unclaimed(job *j)
{
    size_t from = atomic_exchange(&j->next_call, j->n_calls);
    fail_range(j, from < j->n_calls ? from : j->n_calls, j->n_calls);
    for (size_t k = atomic_load(&j->n_orph); k > 0; k--)
        fail_range(j, j->orph_b[k - 1], j->orph_e[k - 1]);
    atomic_store(&j->n_orph, 0);
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
    job *j = job_create(sc, reqs, n, out);
    if (!j)
        return rlpi_error_set(RLP_E_NOMEM, "reward: out of memory for %zu samples", n);
    j->timeout_ms = timeout_ms;
    j->refine = refine;
    j->eta = eta;
    /* about 8 blocks per worker: neighbouring samples stay on one worker,
     * the load still balances */
    j->block = j->n_calls / ((size_t)ex->n_threads * 8);
    j->block = j->block < 1 ? 1 : j->block > 64 ? 64 : j->block;

    uint64_t timeout_ns = sc->bounds_own_time ? 0 : (uint64_t)timeout_ms * 1000000u;
    pthread_mutex_lock(&ex->mu);
    ex->cur = j;
    ex->gen++;
    pthread_cond_broadcast(&ex->work_cv);
    pthread_mutex_unlock(&ex->mu);

    pthread_mutex_lock(&j->mu);
    while (atomic_load(&j->n_done) < j->n_calls) {
        uint64_t next = supervise(ex, j, timeout_ns, rlpi_now_ns());
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

    *abandoned_running = (uint64_t)atomic_load(&ex->shared->abandoned_running);
    job_unref(j);
    return RLP_OK;
}
