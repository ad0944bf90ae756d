/* What `rlpost serve` and `rlpost weights-serve` share besides the HTTP
 * side: the --weights-from thread that keeps the mirror --weights-dir at
 * a parent's version through a relay-transport synchronizer (and the
 * engine, if there is one, at the mirror's), and the SIGINT/SIGTERM
 * hand-off to the main thread. Public API of librlpost only. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- --weights-from ---- */

/* What this node holds: its engine's version, or (weights only) its mirror's. */
static uint64_t version_now(serve_follow *f)
{
    uint64_t v = 0;
    if (f->srv->engine)
        rlp_rollout_engine_version(&v, f->srv->engine);
    else if (f->sync)
        rlp_synchronizer_version(&v, f->sync);
    return v;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The thread that keeps the mirror --weights-dir at the parent's version
 * and the engine at the mirror's (one relay-transport synchronizer),
 * polling every poll_ms. Weight loads hold update_mu, as
 * /update_weights_from_disk does. */
static void *follow_main(void *arg)
{
    serve_follow *f = arg;
    bool failing = false;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        f->kick = false; /* this pull serves the waiters so far */
        pthread_mutex_unlock(&f->mu);
        uint64_t before = version_now(f), after;
        double t0 = wall_s();
        /* the download runs under update_mu too: a /load_lora_adapter waits
         * for it (weight updates on a follower never load a path) */
        pthread_mutex_lock(&f->srv->update_mu);
        int rc = rlp_synchronizer_pull(f->sync, f->srv->engine);
        pthread_mutex_unlock(&f->srv->update_mu);
        after = version_now(f);
        pthread_mutex_lock(&f->mu);
        f->pulls_done++;
        snprintf(f->last_error, sizeof f->last_error, "%s", rc == RLP_OK ? "" : rlp_error_last());
        pthread_cond_broadcast(&f->done_cv);
        pthread_mutex_unlock(&f->mu);
        if (rc != RLP_OK && !failing) { /* once per streak of failures */
            fprintf(stderr, "rlpost %s: --weights-from %s: %s (retrying every %u ms)\n", f->cmd, f->from,
                    rlp_error_last(), f->poll_ms);
        } else if (rc == RLP_OK && failing) {
            fprintf(stderr, "rlpost %s: --weights-from %s: reachable again\n", f->cmd, f->from);
        }
        failing = rc != RLP_OK;
        if (after != before) {
            double t1 = wall_s();
            fprintf(stderr, "rlpost %s: --weights-from %s: weight version %llu (mirrored%s in %.3f s; unix %.3f)\n",
                    f->cmd, f->from, (unsigned long long)after, f->srv->engine ? " and loaded" : "", t1 - t0, t1);
        }
        pthread_mutex_lock(&f->mu);
        if (f->stop)
            break;
        if (f->kick) /* a weight update came during the pull: pull again at once */
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += f->poll_ms / 1000;
        ts.tv_nsec += (long)(f->poll_ms % 1000) * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

int serve_follow_start(serve_follow *f, serve_server *srv, const char *dir, const char *const *from, size_t n_from,
                       const char *token, unsigned poll_ms)
{
    memset(f, 0, sizeof *f);
    f->srv = srv;
    f->cmd = srv->engine ? "serve" : "weights-serve";
    f->from = from[0];
    f->poll_ms = poll_ms;
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.transport = RLP_TRANSPORT_RELAY;
    so.dir = dir;
    so.urls = from; /* the parent, then fallbacks */
    so.n_urls = n_from;
    so.api_key = token; /* a tree of servers shares one token */
    so.timeout_ms = 30000;
    so.keep_versions = 2; /* the current one, and the previous for children still fetching it */
    if (rlp_synchronizer_create(&f->sync, &so) != RLP_OK) {
        fprintf(stderr, "rlpost %s: --weights-from %s: %s\n", f->cmd, from[0], rlp_error_last());
        return -1;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, &ca);
    pthread_cond_init(&f->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&f->thread, NULL, follow_main, f) != 0) {
        fprintf(stderr, "rlpost %s: --weights-from: cannot start a thread\n", f->cmd);
        return -1;
    }
    f->started = true;
    return 0;
}

void serve_follow_stop(serve_follow *f)
{
    if (f->started) {
        pthread_mutex_lock(&f->mu);
        f->stop = true;
        pthread_cond_signal(&f->cv);
        pthread_cond_broadcast(&f->done_cv); /* weight updates waiting give up */
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
        f->started = false;
        /* the mutex and conditions stay: an HTTP handler may still be on
         * its way out of serve_follow_wait until the daemon stops */
        pthread_mutex_lock(&f->mu);
        rlp_synchronizer_free(f->sync);
        f->sync = NULL;
        pthread_mutex_unlock(&f->mu);
        return;
    }
    rlp_synchronizer_free(f->sync);
    f->sync = NULL;
}

int serve_follow_wait(serve_follow *f, uint64_t version, unsigned timeout_ms, char *why, size_t n)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&f->mu);
    int rc = 0;
    while (!f->stop && version_now(f) < version) {
        /* not there yet: one more pull after this one, then look again */
        uint64_t seen = f->pulls_done;
        f->kick = true;
        pthread_cond_signal(&f->cv);
        while (f->pulls_done < seen + 1 && !f->stop && rc == 0)
            rc = pthread_cond_timedwait(&f->done_cv, &f->mu, &deadline) ? -1 : 0;
        if (rc || f->stop) {
            rc = -1;
            break;
        }
        if (version_now(f) < version) {
            /* not at the parent yet (or the parent failed, and may be back):
             * ask again shortly, not in a tight loop */
            struct timespec ts = {0, 100000000};
            pthread_mutex_unlock(&f->mu);
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&f->mu);
        }
    }
    if (f->stop && !rc) {
        rc = -1;
        snprintf(why, n, "the server is shutting down");
    } else if (rc)
        snprintf(why, n, "version %llu has not arrived from %s within %u ms (holding %llu)%s%s",
                 (unsigned long long)version, f->from, timeout_ms, (unsigned long long)version_now(f),
                 f->last_error[0] ? ": " : "", f->last_error);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* ---- signals ---- */

/* SIGINT/SIGTERM: a process-wide handler that writes the signal to a
 * pipe the main thread reads. Not sigwait() alone: threads that a library
 * started before main() (OpenBLAS's pool) do not block the signals, and
 * one that reached such a thread before the main thread sat in sigwait()
 * killed the server ("signal 15") instead of shutting it down. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    int e = errno;
    char c = (char)sig;
    if (write(stop_pipe[1], &c, 1) < 0) { /* full: a signal is already waiting */
    }
    errno = e;
}

int serve_signals_block(void)
{
    /* every thread started from here on inherits the mask, so that only
     * the main thread (and threads older than main()) run the handler */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int serve_signals_wait(void)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
    char sig = 0;
    for (;;) {
        struct pollfd pf = {.fd = stop_pipe[0], .events = POLLIN};
        if (poll(&pf, 1, -1) > 0 && read(stop_pipe[0], &sig, 1) == 1)
            return sig;
    }
}
