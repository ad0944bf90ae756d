/* A scorer that runs a reward library in worker processes
 * (rlp_reward_fn_create_isolated()): each executor thread owns one worker
 * for the length of a call, sends it the samples over a socket
 * (isolation_proto.h) and waits for the answer with the deadline, so a
 * library that crashes or hangs costs its samples, never the host. It
 * spawns, kills, reaps and restarts workers (with a backoff and a cap on
 * restarts per minute); it must never fork() without exec (unsafe in a
 * threaded host) nor trust a byte the worker sends. */
#include "reward/isolated.h"

#include "core/clock.h"
#include "core/error.h"
#include "reward/isolation_proto.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define WORKER_NAME "rlpost-reward-worker"
#define START_TIMEOUT_MS 60000u
#define RESTART_WINDOW_NS 60000000000ull
#define BACKOFF_FIRST_MS 10u
#define BACKOFF_MAX_MS 1000u
/* how long a worker that closed its socket may take to exit before it is killed */
#define EXIT_GRACE_MS 2000u

typedef struct wproc {
    pid_t pid;        /* 0: not running */
    int fd;           /* our end of its socket, -1 when not running */
    int busy;         /* taken by an executor thread (under mu) */
    rlpi_iso_buf buf; /* request frames, reused */
} wproc;

typedef struct iso {
    char *lib, *opts, *worker;
    uint32_t timeout_ms, max_restarts;
    pthread_mutex_t mu;
    wproc *w;               /* (n_w) */
    size_t n_w;
    uint64_t *restart_ns;   /* (max_restarts + 1) ring of restart times */
    size_t n_restart, restart_at;
    unsigned deaths_in_row; /* consecutive deaths: the backoff */
    uint64_t last_death_ns;
    char last_death[96];
    int broken;
    char broken_msg[384];
} iso;


static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- finding the worker executable ------------------------------------------------ */

/* an object in this library, whose address dladdr maps back to our file */
static const char anchor;

static int executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The worker: opts, the environment, next to the librlpost that holds
 * this code (the build tree, or a libdir/libexec layout collapsed into
 * one folder), libexec beside that folder, then the install path.
 * A malloc'd path, or NULL with the places tried in why. */
static char *find_worker(const char *given, char *why, size_t why_len)
{
    if (given) {
        if (executable(given))
            return strdup(given);
        snprintf(why, why_len, "worker_path '%s' is not an executable file", given);
        return NULL;
    }
    const char *env = getenv("RLPOST_REWARD_WORKER");
    if (env && *env) {
        if (executable(env))
            return strdup(env);
        snprintf(why, why_len, "RLPOST_REWARD_WORKER='%s' is not an executable file", env);
        return NULL;
    }
    char path[4096];
    Dl_info info;
    if (dladdr(&anchor, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        int dir = slash ? (int)(slash - info.dli_fname) : 0;
        if (slash && (size_t)snprintf(path, sizeof path, "%.*s/%s", dir, info.dli_fname, WORKER_NAME) < sizeof path &&
            executable(path))
            return strdup(path);
        if (slash && (size_t)snprintf(path, sizeof path, "%.*s/../libexec/%s", dir, info.dli_fname, WORKER_NAME) <
                         sizeof path &&
            executable(path))
            return strdup(path);
    }
#ifdef RLPI_REWARD_WORKER_PATH
    if (executable(RLPI_REWARD_WORKER_PATH))
        return strdup(RLPI_REWARD_WORKER_PATH);
#endif
    snprintf(why, why_len,
             "%s not found (set RLPOST_REWARD_WORKER or rlp_isolation_options::worker_path; looked next to "
             "librlpost and in its install path)",
             WORKER_NAME);
    return NULL;
}

/* ---- processes ------------------------------------------------------------------- */

/* "killed by SIGSEGV", "exited with status 3" */
static void describe_status(char *dst, size_t cap, int status, int known)
{
    if (!known) {
        snprintf(dst, cap, "died (status unavailable: SIGCHLD ignored or reaped by the host)");
    } else if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        if (abbrev)
            snprintf(dst, cap, "killed by SIG%s", abbrev);
        else
            snprintf(dst, cap, "killed by signal %d", WTERMSIG(status));
    } else if (WIFEXITED(status)) {
        snprintf(dst, cap, "exited with status %d", WEXITSTATUS(status));
    } else {
        snprintf(dst, cap, "died (status %d)", status);
    }
}

/* Waits for pid to end, killing it after grace_ms (0: at once). Returns
 * 1 with *status when reaped, 0 when the status was not ours to read. */
static int reap(pid_t pid, uint32_t grace_ms, int *status)
{
    if (grace_ms == 0)
        kill(pid, SIGKILL);
    uint64_t until = rlpi_now_ns() + (uint64_t)grace_ms * 1000000u;
    for (;;) {
        pid_t r = waitpid(pid, status, grace_ms ? WNOHANG : 0);
        if (r == pid)
            return 1;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return 0; /* ECHILD */
        if (rlpi_now_ns() >= until) {
            kill(pid, SIGKILL);
            grace_ms = 0;
            continue;
        }
        sleep_ms(1);
    }
}

/* Ends w's worker (closing its socket first, so that a healthy one exits
 * on its own within grace_ms) and describes how it ended into why. */
static void stop_worker(wproc *w, uint32_t grace_ms, char *why, size_t why_len)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    int status = 0;
    int known = w->pid > 0 ? reap(w->pid, grace_ms, &status) : 0;
    if (why)
        describe_status(why, why_len, status, known);
    w->pid = 0;
}

/* Reads one frame before deadline_ns (0 = none), at most max_len bytes of
 * payload (*payload malloc'd). 0 ok, 1 timed out, -1 closed or failed,
 * -2 malformed. */
static int recv_frame(int fd, uint64_t deadline_ns, uint64_t max_len, uint32_t *type, unsigned char **payload,
                      uint64_t *len)
{
    rlpi_iso_frame_header h;
    unsigned char *p = NULL;
    size_t want = sizeof h, got = 0;
    unsigned char *dst = (unsigned char *)&h;
    int in_payload = 0;
    for (;;) {
        if (got == want) {
            if (in_payload)
                break;
            if (h.magic != RLPI_ISO_MAGIC || h.len > max_len)
                return -2;
            p = malloc(h.len ? (size_t)h.len : 1);
            if (!p)
                return -1;
            in_payload = 1;
            dst = p;
            want = (size_t)h.len;
            got = 0;
            continue;
        }
        int wait_ms = -1;
        if (deadline_ns) {
            uint64_t now = rlpi_now_ns();
            if (now >= deadline_ns) {
                free(p);
                return 1;
            }
            uint64_t left = (deadline_ns - now + 999999u) / 1000000u;
            wait_ms = left > 60000 ? 60000 : (int)left;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, wait_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0) {
            free(p);
            return -1;
        }
        if (pr == 0)
            continue; /* the deadline is checked above */
        ssize_t r = recv(fd, dst + got, want - got, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0) {
            free(p);
            return -1;
        }
        got += (size_t)r;
    }
    *type = h.type;
    *payload = p;
    *len = h.len;
    return 0;
}

/* Starts a worker into w and waits for it to load the library. RLP_OK,
 * or an error code with the message in why. */
static int start_worker(iso *s, wproc *w, char *why, size_t why_len)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, why_len, "socketpair: %s", strerror(errno));
        return RLP_E_IO;
    }
    /* dup2(3, 3) in the child would keep close-on-exec on fd 3 */
    if (sv[1] == RLPI_ISO_FD) {
        int moved = fcntl(sv[1], F_DUPFD_CLOEXEC, RLPI_ISO_FD + 1);
        close(sv[1]);
        sv[1] = moved;
    }
    /* posix_spawn (vfork + exec inside glibc) rather than fork: after a
     * fork only async-signal-safe calls are allowed in a threaded host,
     * and a fork of a large host copies its page tables; the worker is an
     * executable of its own that loads the library after exec. */
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 2, 1); /* the host's stdout may carry its results */
    posix_spawn_file_actions_adddup2(&fa, sv[1], RLPI_ISO_FD);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* nor are the host's other descriptors: a pipe end a long-lived
     * worker kept open would hide an end of file from the host */
    posix_spawn_file_actions_addclosefrom_np(&fa, RLPI_ISO_FD + 1);
#endif
    /* the host's signal mask and handlers are not the worker's business:
     * it must die of the signal its library raised */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char ppid[24];
    snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
    char *argv[] = {s->worker, ppid, NULL};
    pid_t pid;
    int err = sv[1] < 0 ? errno : posix_spawn(&pid, s->worker, &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (sv[1] >= 0)
        close(sv[1]);
    if (err) {
        close(sv[0]);
        snprintf(why, why_len, "could not start %s: %s", s->worker, strerror(err));
        return RLP_E_IO;
    }
    w->pid = pid;
    w->fd = sv[0];
    rlpi_iso_buf *b = &w->buf;
    rlpi_iso_begin(b, RLPI_ISO_INIT);
    rlpi_iso_u32(b, RLPI_ISO_PROTOCOL);
    rlpi_iso_str(b, s->lib, strlen(s->lib));
    rlpi_iso_str(b, s->opts, s->opts ? strlen(s->opts) : 0);
    if (rlpi_iso_end(b)) {
        stop_worker(w, 0, NULL, 0);
        snprintf(why, why_len, "out of memory");
        return RLP_E_NOMEM;
    }
    uint32_t type = 0;
    unsigned char *payload = NULL;
    uint64_t len = 0;
    int rc = rlpi_iso_send_all(w->fd, b->p, b->len) ? -1
             : recv_frame(w->fd, rlpi_now_ns() + (uint64_t)START_TIMEOUT_MS * 1000000u, 65536, &type, &payload, &len);
    if (rc == 0 && type != RLPI_ISO_READY)
        rc = -2;
    if (rc) {
        char how[96] = "";
        stop_worker(w, 0, how, sizeof how);
        free(payload);
        if (rc == 1)
            snprintf(why, why_len, "%s did not report ready within %u ms", s->worker, START_TIMEOUT_MS);
        else
            snprintf(why, why_len, "%s %s before it was ready", s->worker, rc == -2 ? "answered badly" : how);
        return rc == 1 ? RLP_E_TIMEOUT : RLP_E_CALLBACK;
    }
    rlpi_iso_rd r = {payload, (size_t)len, 0, 0};
    int32_t status = (int32_t)rlpi_iso_get_u32(&r);
    const char *msg;
    size_t msg_n;
    rlpi_iso_get_str(&r, &msg, &msg_n, 4096);
    if (r.bad || status != 0) {
        snprintf(why, why_len, "%.*s", r.bad || !msg ? 0 : (int)msg_n, r.bad || !msg ? "" : msg);
        if (r.bad || !why[0])
            snprintf(why, why_len, "%s failed to start", s->worker);
        free(payload);
        stop_worker(w, EXIT_GRACE_MS, NULL, 0);
        return RLP_E_CALLBACK;
    }
    free(payload);
    return RLP_OK;
}

/* ---- restarts --------------------------------------------------------------------- */

/* A worker died (cause in how): remember it for the backoff and the message. */
static void note_death(iso *s, const char *how)
{
    pthread_mutex_lock(&s->mu);
    s->deaths_in_row++;
    s->last_death_ns = rlpi_now_ns();
    snprintf(s->last_death, sizeof s->last_death, "%s", how);
    pthread_mutex_unlock(&s->mu);
}

/* Restarts w's worker after the backoff, unless that would pass the cap
 * (then the handle is broken). RLP_OK, or an error with why. */
static int restart(iso *s, wproc *w, char *why, size_t why_len)
{
    pthread_mutex_lock(&s->mu);
    uint64_t now = rlpi_now_ns();
    size_t recent = 0, cap = (size_t)s->max_restarts + 1;
    for (size_t i = 0; i < s->n_restart; i++)
        recent += now - s->restart_ns[i] < RESTART_WINDOW_NS;
    if (!s->broken && recent >= s->max_restarts) {
        s->broken = 1;
        snprintf(s->broken_msg, sizeof s->broken_msg,
                 "reward worker: more than %u restarts within 60 s (max_restarts); the last one %s", s->max_restarts,
                 s->last_death[0] ? s->last_death : "died");
    }
    if (s->broken) {
        snprintf(why, why_len, "%s", s->broken_msg);
        pthread_mutex_unlock(&s->mu);
        return RLP_E_CALLBACK;
    }
    s->restart_ns[s->restart_at] = now;
    s->restart_at = (s->restart_at + 1) % cap;
    s->n_restart += s->n_restart < cap;
    uint64_t wait = 0;
    if (s->deaths_in_row) {
        unsigned shift = s->deaths_in_row - 1 < 16 ? s->deaths_in_row - 1 : 16;
        uint64_t backoff = (uint64_t)BACKOFF_FIRST_MS << shift;
        backoff = backoff > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff;
        uint64_t since = (now - s->last_death_ns) / 1000000u;
        wait = since < backoff ? backoff - since : 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (wait)
        sleep_ms(wait);
    return start_worker(s, w, why, why_len);
}

/* ---- scoring ---------------------------------------------------------------------- */

static void fail_all(rlp_reward_result *res, uint8_t *fail, size_t n, int kind, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        res[i].valid = 0;
        fail[i] = (uint8_t)kind;
        rlpi_reason(&res[i], "%s", why);
    }
}

static void put_request(rlpi_iso_buf *b, const rlp_reward_request *req, size_t n)
{
    rlpi_iso_begin(b, RLPI_ISO_SCORE);
    rlpi_iso_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        const rlp_reward_request *q = &req[i];
        rlpi_iso_u64(b, q->group_id);
        rlpi_iso_u32(b, q->sample_index);
        rlpi_iso_u64(b, q->policy_version);
        rlpi_iso_u64(b, q->batch_index);
        rlpi_iso_str(b, q->prompt_text ? q->prompt_text : "", q->prompt_text ? q->prompt_len : 0);
        rlpi_iso_str(b, q->completion_text ? q->completion_text : "", q->completion_text ? q->completion_len : 0);
        rlpi_iso_u64(b, q->n_completion_tokens);
        if (q->n_completion_tokens)
            rlpi_iso_put(b, q->completion_tokens, q->n_completion_tokens * sizeof(int32_t));
        rlpi_iso_str(b, q->reference, q->reference ? strlen(q->reference) : 0);
        rlpi_iso_str(b, q->metadata_json, q->metadata_json ? strlen(q->metadata_json) : 0);
    }
}

/* Reads a RESULT for req (n) into res/fail. 0, or -1 when it is malformed. */
static int read_results(const unsigned char *p, uint64_t len, const rlp_reward_request *req, size_t n,
                        rlp_reward_result *res, uint8_t *fail)
{
    rlpi_iso_rd r = {p, (size_t)len, 0, 0};
    if (rlpi_iso_get_u32(&r) != n || r.bad)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t valid = rlpi_iso_get_u32(&r), kind = rlpi_iso_get_u32(&r);
        double score = rlpi_iso_get_f64(&r);
        const char *why;
        size_t why_n;
        rlpi_iso_get_str(&r, &why, &why_n, RLP_REWARD_REASON_MAX - 1);
        uint64_t nt = rlpi_iso_get_u64(&r);
        if (r.bad || valid > 1 || (!valid && (kind < RLPI_RW_REJECTED || kind > RLPI_RW_NONFINITE)) ||
            (nt && (nt != req[i].n_completion_tokens || !valid)))
            return -1;
        const void *toks = nt ? rlpi_iso_take(&r, (size_t)nt * sizeof(float)) : NULL;
        if (r.bad)
            return -1;
        rlp_reward_result *o = &res[i];
        o->valid = (int32_t)valid;
        o->score = valid ? score : NAN;
        if (why && why_n)
            memcpy(o->reason, why, why_n);
        o->reason[why && why_n ? why_n : 0] = '\0';
        if (!valid && kind != RLPI_RW_REJECTED)
            fail[i] = (uint8_t)kind;
        if (nt && o->token_scores) {
            memcpy(o->token_scores, toks, (size_t)nt * sizeof(float));
            o->has_token_scores = 1;
        }
    }
    return r.at == r.len ? 0 : -1;
}

/* Sends req to w's worker and reads the answer into res/fail. Returns
 * 0 when answered; otherwise the worker is stopped, the samples are
 * marked and 1 is returned when it died before it could have read the
 * request (the caller may resend). */
static int exchange(iso *s, wproc *w, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    rlpi_iso_buf *b = &w->buf;
    put_request(b, req, n);
    if (rlpi_iso_end(b)) {
        fail_all(res, fail, n, RLPI_RW_ERROR, "out of memory for the request to the reward worker");
        return 0;
    }
    char how[96];
    if (rlpi_iso_send_all(w->fd, b->p, b->len)) {
        stop_worker(w, 0, how, sizeof how);
        note_death(s, how);
        return 1;
    }
    /* the largest answer n samples can have */
    uint64_t max = 4;
    for (size_t i = 0; i < n; i++)
        max += 4 + 4 + 8 + 8 + RLP_REWARD_REASON_MAX + 8 + (uint64_t)req[i].n_completion_tokens * sizeof(float);
    uint64_t deadline = s->timeout_ms ? rlpi_now_ns() + (uint64_t)s->timeout_ms * 1000000u : 0;
    uint32_t type = 0;
    unsigned char *payload = NULL;
    uint64_t len = 0;
    int rc = recv_frame(w->fd, deadline, max, &type, &payload, &len);
    if (rc == 0 && (type != RLPI_ISO_RESULT || read_results(payload, len, req, n, res, fail)))
        rc = -2;
    free(payload);
    if (rc == 0) {
        pthread_mutex_lock(&s->mu);
        s->deaths_in_row = 0;
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    char why[RLP_REWARD_REASON_MAX];
    if (rc == 1) {
        stop_worker(w, 0, how, sizeof how);
        snprintf(why, sizeof why, "timed out after %u ms (reward worker killed)", s->timeout_ms);
        fail_all(res, fail, n, RLPI_RW_TIMEOUT, why);
        note_death(s, "was killed after its deadline");
    } else if (rc == -2) {
        stop_worker(w, 0, how, sizeof how);
        fail_all(res, fail, n, RLPI_RW_ERROR, "reward worker sent a malformed answer (killed)");
        note_death(s, "sent a malformed answer");
    } else {
        stop_worker(w, EXIT_GRACE_MS, how, sizeof how);
        snprintf(why, sizeof why, "reward worker %s", how);
        fail_all(res, fail, n, RLPI_RW_CRASH, why);
        note_death(s, how);
    }
    return 0;
}

static int iso_score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    iso *s = impl;
    wproc *w = NULL;
    pthread_mutex_lock(&s->mu);
    /* one executor thread per worker: one is always free */
    for (size_t i = 0; i < s->n_w && !w; i++)
        if (!s->w[i].busy)
            w = &s->w[i];
    if (w)
        w->busy = 1;
    pthread_mutex_unlock(&s->mu);
    if (!w) {
        fail_all(res, fail, n, RLPI_RW_NOWORKER, "no reward worker free");
        return 0;
    }
    char why[384];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (w->pid == 0 && restart(s, w, why, sizeof why) != RLP_OK) {
            fail_all(res, fail, n, RLPI_RW_ERROR, why);
            break;
        }
        if (exchange(s, w, res, req, n, fail) == 0)
            break;
        if (attempt == 1) /* died twice before reading: say so */
            fail_all(res, fail, n, RLPI_RW_CRASH, "reward worker died before it read the request");
    }
    pthread_mutex_lock(&s->mu);
    w->busy = 0;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void iso_destroy(void *impl)
{
    iso *s = impl;
    /* close every socket first: healthy workers then exit together */
    for (size_t i = 0; i < s->n_w; i++)
        if (s->w[i].fd >= 0) {
            close(s->w[i].fd);
            s->w[i].fd = -1;
        }
    for (size_t i = 0; i < s->n_w; i++) {
        stop_worker(&s->w[i], EXIT_GRACE_MS, NULL, 0);
        free(s->w[i].buf.p);
    }
    free(s->w);
    free(s->restart_ns);
    free(s->lib);
    free(s->opts);
    free(s->worker);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int iso_check(void *impl)
{
    iso *s = impl;
    pthread_mutex_lock(&s->mu);
    int broken = s->broken;
    char msg[sizeof s->broken_msg];
    memcpy(msg, s->broken_msg, sizeof msg);
    pthread_mutex_unlock(&s->mu);
    return broken ? rlpi_error_set(RLP_E_CALLBACK, "%s", msg) : RLP_OK;
}

static const rlpi_scorer_ops iso_ops = {iso_score, iso_destroy};

int rlpi_isolated_scorer(rlpi_scorer **out, const char *library_path, const char *options_json,
                         const rlp_isolation_options *o, uint32_t n_workers)
{
    char why[512] = "";
    iso *s = calloc(1, sizeof *s);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_reward_fn_create_isolated: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->timeout_ms = o->timeout_ms;
    s->max_restarts = o->max_restarts;
    s->lib = strdup(library_path);
    s->opts = options_json ? strdup(options_json) : NULL;
    s->w = calloc(n_workers, sizeof *s->w);
    s->restart_ns = calloc((size_t)o->max_restarts + 1, sizeof *s->restart_ns);
    if (!s->lib || (options_json && !s->opts) || !s->w || !s->restart_ns) {
        iso_destroy(s);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_reward_fn_create_isolated: out of memory");
    }
    s->n_w = n_workers;
    for (size_t i = 0; i < n_workers; i++)
        s->w[i].fd = -1;
    s->worker = find_worker(o->worker_path, why, sizeof why);
    if (!s->worker) {
        iso_destroy(s);
        return rlpi_error_set(RLP_E_NOT_FOUND, "rlp_reward_fn_create_isolated: %s", why);
    }
    for (size_t i = 0; i < n_workers; i++) {
        int rc = start_worker(s, &s->w[i], why, sizeof why);
        if (rc) {
            iso_destroy(s);
            return rlpi_error_set(rc, "rlp_reward_fn_create_isolated: %s: %s", library_path, why);
        }
    }
    int rc = rlpi_scorer_create(out, &iso_ops, s, o->batch_size);
    if (rc == RLP_OK) {
        (*out)->token_scores = 1;
        (*out)->bounds_own_time = 1; /* a worker past its deadline is killed, no thread is abandoned */
        (*out)->needs_reference = 0; /* the worker's handle reads the metadata itself */
        (*out)->check = iso_check;
    }
    return rc;
}
