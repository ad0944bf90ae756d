/* The server's scheduler: HTTP handlers queue jobs; ONE generation thread
 * takes every pending job, puts all their prompts (each with its own
 * sampling options through rlp_prompt::sampling) into ONE
 * rlp_rollout_generate() call, and hands each job its trajectories (or
 * streams them while they are made). It never parses HTTP or JSON. */
#include "serve.h"

#include <errno.h>
#include <stdbool.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a waiting connection thread checks that its client is still there. */
#define HANGUP_POLL_MS 500

/* The prompts of one generate call and whose they are. */
typedef struct call_ctx {
    serve_server *srv;
    serve_job **job_of;   /* (n_prompts) */
    size_t *k_of;         /* (n_prompts) index of the prompt within its job */
} call_ctx;

static void job_done(serve_job *job, int status, const char *error)
{
    job->status = status;
    if (error && !job->error)
        job->error = strdup(error);
    job->state = JOB_DONE;
    pthread_cond_broadcast(&job->cv);
}

void serve_job_unref(serve_job *job)
{
    if (!job)
        return;
    serve_server *srv = job->srv;
    pthread_mutex_lock(&srv->mu);
    int left = --job->refs;
    pthread_mutex_unlock(&srv->mu);
    if (left == 0)
        serve_job_free(job);
}

void serve_job_cancel(serve_job *job)
{
    __atomic_store_n(&job->cancelled, 1, __ATOMIC_SEQ_CST);
}

static int on_event(const rlp_stream_event *ev, void *payload)
{
    call_ctx *c = payload;
    serve_job *job = c->job_of[ev->prompt_index];
    bool gone = __atomic_load_n(&job->cancelled, __ATOMIC_SEQ_CST);
    if (job->stream && !gone)
        serve_stream_event(c->srv, job, c->k_of[ev->prompt_index], ev);
    /* non-zero ends the sequence (RLP_FINISH_ABORT): nobody waits for it,
     * or the server is going down (its final event still reaches the stream) */
    return gone || __atomic_load_n(&c->srv->stopping, __ATOMIC_SEQ_CST);
}

/* Copies a job's trajectories [first, first + count) out of the call's batch. */
static int take_result(serve_job *job, const rlp_batch *all, size_t first, size_t count)
{
    int rc = rlp_batch_create(&job->result);
    for (size_t i = 0; rc == RLP_OK && i < count; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rc = rlp_batch_get(&t, all, first + i);
        if (rc == RLP_OK)
            rc = rlp_batch_append(job->result, &t);
    }
    return rc;
}

/* One generate call over `n` jobs. Returns the call's status; on success
 * each job has its result. */
static int generate(serve_server *srv, serve_job **jobs, size_t n, char *err, size_t errlen)
{
    size_t n_prompts = 0;
    for (size_t i = 0; i < n; i++)
        n_prompts += jobs[i]->n_prompts;
    rlp_prompt *prompts = calloc(n_prompts, sizeof *prompts);
    call_ctx c = {srv, calloc(n_prompts, sizeof *c.job_of), calloc(n_prompts, sizeof *c.k_of)};
    int rc = prompts && c.job_of && c.k_of ? RLP_OK : RLP_E_NOMEM;
    size_t p = 0;
    for (size_t i = 0; rc == RLP_OK && i < n; i++) {
        for (size_t k = 0; k < jobs[i]->n_prompts; k++, p++) {
            /* group k+1: a seeded request draws the same samples whatever
             * else shares the batch (the engine's stream is (seed, group, j)) */
            prompts[p] = (rlp_prompt){.tokens = jobs[i]->prompts[k], .n_tokens = jobs[i]->prompt_lens[k],
                                      .group_id = k + 1, .sampling = &jobs[i]->sampling};
            c.job_of[p] = jobs[i];
            c.k_of[p] = k;
        }
    }
    rlp_batch *batch = NULL;
    if (rc == RLP_OK) {
        rc = rlp_rollout_generate(&batch, srv->engine, prompts, n_prompts, NULL, on_event, &c);
        if (rc != RLP_OK)
            snprintf(err, errlen, "%s", rlp_error_last());
    } else {
        snprintf(err, errlen, "out of memory");
    }
    size_t first = 0;
    for (size_t i = 0; rc == RLP_OK && i < n; i++) {
        size_t count = jobs[i]->n_prompts * jobs[i]->sampling.n;
        rc = take_result(jobs[i], batch, first, count);
        if (rc != RLP_OK)
            snprintf(err, errlen, "%s", rlp_error_last());
        first += count;
    }
    rlp_batch_free(batch);
    free(prompts);
    free(c.job_of);
    free(c.k_of);
    return rc;
}

static void finish_jobs(serve_server *srv, serve_job **jobs, size_t n, int rc, const char *err)
{
    pthread_mutex_lock(&srv->mu);
    for (size_t i = 0; i < n; i++) {
        serve_job *job = jobs[i];
        if (job->stream && !job->sse_done)
            serve_stream_fail(job, rc == RLP_OK ? "the stream ended early" : err);
        job_done(job, rc, rc == RLP_OK ? NULL : err);
    }
    srv->n_running -= n;
    srv->n_jobs_done += n;
    pthread_mutex_unlock(&srv->mu);
}

/* Runs the jobs of one round: all together; when the call is refused as
 * invalid (which happens before any token), each alone, so one bad request
 * cannot fail the others. */
static void run_round(serve_server *srv, serve_job **jobs, size_t n)
{
    char err[512] = "";
    int rc = generate(srv, jobs, n, err, sizeof err);
    bool streamed = false; /* a retry must not send a chunk twice */
    for (size_t i = 0; i < n; i++)
        streamed |= jobs[i]->sse_len > 0;
    if (rc == RLP_E_INVALID_ARG && n > 1 && !streamed) {
        for (size_t i = 0; i < n; i++) {
            rlp_batch_free(jobs[i]->result);
            jobs[i]->result = NULL;
            rc = generate(srv, &jobs[i], 1, err, sizeof err);
            finish_jobs(srv, &jobs[i], 1, rc, err);
        }
        return;
    }
    finish_jobs(srv, jobs, n, rc, err);
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void *gen_main(void *arg)
{
    serve_server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        while (!srv->head && !srv->stopping)
            pthread_cond_wait(&srv->queue_cv, &srv->mu);
        if (srv->stopping)
            break;
        if (srv->cfg.batch_wait_ms) {
            /* requests sent together arrive a little apart: gather them */
            pthread_mutex_unlock(&srv->mu);
            sleep_ms(srv->cfg.batch_wait_ms);
            pthread_mutex_lock(&srv->mu);
            if (srv->stopping)
                break;
        }
        size_t n = 0;
        for (serve_job *j = srv->head; j; j = j->next)
            n++;
        serve_job **jobs = calloc(n ? n : 1, sizeof *jobs);
        if (!jobs) { /* try again after the next arrival or shutdown */
            pthread_mutex_unlock(&srv->mu);
            sleep_ms(10);
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        size_t taken = 0;
        for (serve_job *j = srv->head, *next; j; j = next) {
            next = j->next;
            j->next = NULL;
            if (__atomic_load_n(&j->cancelled, __ATOMIC_SEQ_CST)) {
                job_done(j, RLP_E_CLOSED, "the client went away");
                srv->n_queued--;
                pthread_mutex_unlock(&srv->mu);
                serve_job_unref(j);
                pthread_mutex_lock(&srv->mu);
                continue;
            }
            j->state = JOB_RUNNING;
            jobs[taken++] = j;
        }
        srv->head = srv->tail = NULL;
        srv->n_queued -= taken;
        srv->n_running += taken;
        srv->n_calls += taken > 0;
        if (taken > srv->max_jobs_per_call)
            srv->max_jobs_per_call = taken;
        pthread_mutex_unlock(&srv->mu);
        if (taken)
            run_round(srv, jobs, taken);
        for (size_t i = 0; i < taken; i++)
            serve_job_unref(jobs[i]);
        free(jobs);
        pthread_mutex_lock(&srv->mu);
    }
    /* shutting down: whoever still waits gets an answer */
    for (serve_job *j = srv->head, *next; j; j = next) {
        next = j->next;
        if (j->stream && !j->sse_done)
            serve_stream_fail(j, "the server is shutting down");
        job_done(j, RLP_E_CLOSED, "the server is shutting down");
        srv->n_queued--;
        pthread_mutex_unlock(&srv->mu);
        serve_job_unref(j);
        pthread_mutex_lock(&srv->mu);
    }
    srv->head = srv->tail = NULL;
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

int serve_sched_start(serve_server *srv)
{
    if (pthread_create(&srv->gen_thread, NULL, gen_main, srv) != 0)
        return RLP_E_NOMEM;
    srv->gen_started = 1;
    return RLP_OK;
}

void serve_sched_stop(serve_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    __atomic_store_n(&srv->stopping, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&srv->queue_cv);
    pthread_mutex_unlock(&srv->mu);
    rlp_rollout_engine_abort(srv->engine);
    if (srv->gen_started)
        pthread_join(srv->gen_thread, NULL);
    srv->gen_started = 0;
}

int serve_submit(serve_server *srv, serve_job *job)
{
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        return RLP_E_CLOSED;
    }
    job->refs++;
    job->state = JOB_QUEUED;
    job->next = NULL;
    if (srv->tail)
        srv->tail->next = job;
    else
        srv->head = job;
    srv->tail = job;
    srv->n_queued++;
    pthread_cond_signal(&srv->queue_cv);
    pthread_mutex_unlock(&srv->mu);
    return RLP_OK;
}

static int client_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* An absolute deadline `ms` from now for pthread_cond_timedwait. */
static struct timespec deadline_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

int serve_wait(serve_server *srv, serve_job *job, int fd)
{
    pthread_mutex_lock(&srv->mu);
    while (job->state != JOB_DONE) {
        struct timespec ts = deadline_ms(HANGUP_POLL_MS);
        if (pthread_cond_timedwait(&job->cv, &srv->mu, &ts) == ETIMEDOUT && job->state != JOB_DONE &&
            client_gone(fd)) {
            serve_job_cancel(job);
            pthread_mutex_unlock(&srv->mu);
            return -1;
        }
    }
    pthread_mutex_unlock(&srv->mu);
    return 0;
}

ssize_t serve_stream_read(serve_job *job, char *buf, size_t max, int fd)
{
    serve_server *srv = job->srv;
    pthread_mutex_lock(&srv->mu);
    while (job->sse_pos == job->sse_len && !job->sse_done) {
        struct timespec ts = deadline_ms(HANGUP_POLL_MS);
        if (pthread_cond_timedwait(&job->cv, &srv->mu, &ts) == ETIMEDOUT && job->sse_pos == job->sse_len &&
            !job->sse_done && client_gone(fd)) {
            serve_job_cancel(job);
            pthread_mutex_unlock(&srv->mu);
            return -2;
        }
    }
    size_t n = job->sse_len - job->sse_pos;
    if (n > max)
        n = max;
    if (n)
        memcpy(buf, job->sse + job->sse_pos, n);
    job->sse_pos += n;
    pthread_mutex_unlock(&srv->mu);
    return n ? (ssize_t)n : -1;
}
