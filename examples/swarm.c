/* The trainer of an asynchronous push-pull run (Echo / AReaL) with N
 * rollout worker processes on loopback:
 *
 *   swarm MODEL [--rlpost PATH] [--workers N] [--steps S] [--eta η]
 *         [--group G] [--prompts B] [--max-new-tokens T] [--dir DIR]
 *         [--threads t] [--kill-worker-at STEP] [--restart-worker-at STEP]
 *
 * It spawns N `rlpost serve MODEL --port 0 --weights-dir DIR` children
 * (PATH, or `rlpost` next to this program or in examples/rlpost/ beside
 * it), reads the URL each prints, and runs
 *   - a remote rollout engine over all the URLs (a request to a dead worker
 *     is retried on the next URL by the remote client),
 *   - a synchronizer (RLP_SYNC_ASYNC, RLP_TRANSPORT_HTTP: publish writes
 *     DIR/v<version>/ and DIR/latest.json, pull POSTs
 *     /update_weights_from_disk to the workers that lack the version),
 *   - a replay buffer that drops groups older than v − η,
 *   - the library's rollout worker (rlp_rollout_worker, `remote = 1`) on a
 *     thread of its own: acquire B groups through the staleness gate →
 *     pull → draw B prompts from a task ("arith", plain text, encoded with
 *     a llama2.c tokenizer of the model's vocabulary that the swarm writes
 *     into DIR: a llama2.c checkpoint has none) → generate on the remote
 *     engine → score (a C reward callback: the share of even token ids) →
 *     push → release,
 *   - the trainer loop on this thread: pull B groups at version v →
 *     rlp_policy_train_rl → publish.
 * A dead worker: the remote client retries a request on the next URL, and
 * a pull that misses it is a warning (`remote = 1`: the next pull retries
 * it). A group that still came back with a RLP_FINISH_ERROR trajectory
 * (every URL failed) is not dropped, as this example's own rollout thread
 * used to do: the rollout worker generates such a group again, up to
 * `retries` times, so that every group trains whole; if it still fails,
 * the worker stops with RLP_E_NETWORK, releases its gate slots unaccepted
 * and pushes nothing, and the trainer loop stops with the worker's error
 * (the run fails). So nothing half-done is ever trained on, and
 * "error_groups" in the summary counts the groups a failed worker released
 * (0 in a run that passes); "pull_failures" is the synchronizer's count of
 * servers a pull did not update (the worker only logs every 20th).
 *
 * Fault injection: --kill-worker-at K sends SIGKILL to worker 0 before
 * step K; --restart-worker-at R starts it again before step R on the SAME
 * port (the URL in the engine and the synchronizer stays valid; nothing
 * has to be rebuilt). The restarted worker loads DIR's latest version
 * before it listens (`--weights-dir`); after the next publish the trainer
 * pulls and reads the worker's /health to check it holds the trainer's
 * version.
 *
 * stdout: one JSON line per step, then a summary line with the
 * bookkeeping checks (no group lost: pushed = consumed + dropped stale +
 * held; none consumed twice — the group ids are the remote engine's).
 * Exit 0 when every check holds, 1 when one fails, 2 on bad arguments, 77
 * when the model is missing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, readlink */
#endif
#include "rlpost.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum { MAX_WORKERS = 16 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        int rc_ = (call);                                                             \
        if (rc_ != RLP_OK) {                                                          \
            fprintf(stderr, "swarm: %s: %s\n", #call, rlp_error_last());              \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* ---- options ------------------------------------------------------------------ */

typedef struct options {
    const char *model, *rlpost, *dir;
    long workers, steps, eta, group, prompts, max_new, threads, kill_at, restart_at;
} options;

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: swarm MODEL [--rlpost PATH] [--workers N] [--steps S] [--eta η] [--group G]\n"
                    "         [--prompts B] [--max-new-tokens T] [--dir DIR] [--threads t]\n"
                    "         [--kill-worker-at STEP] [--restart-worker-at STEP]\n");
}

/* ---- worker processes ------------------------------------------------------------ */

typedef struct worker {
    pid_t pid;             /* 0: not running */
    unsigned port;
    char url[64];
    uint64_t start_version; /* weight_version of its listening line */
} worker;

static options opt;
static char rlpost_path[PATH_MAX];
static worker workers[MAX_WORKERS];

/* SIGINT/SIGTERM (a test's timeout): take the workers down too */
static void on_signal(int sig)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (workers[i].pid > 0)
            kill(workers[i].pid, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Starts `rlpost serve` on @p port (0 = any) and waits for its listening
 * line. Its stderr goes to DIR/worker<i>.log. */
static int worker_start(worker *w, int index, unsigned port)
{
    int out[2];
    if (pipe(out) != 0)
        return -1;
    char log[PATH_MAX], port_s[16], threads_s[16];
    snprintf(log, sizeof log, "%s/worker%d.log", opt.dir, index);
    snprintf(port_s, sizeof port_s, "%u", port);
    snprintf(threads_s, sizeof threads_s, "%ld", opt.threads);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    char *argv[] = {rlpost_path, "serve", (char *)opt.model, "--port", port_s, "--weights-dir", (char *)opt.dir,
                    "--threads", threads_s, "--max-batch", "32", "--max-seq-len", "256", NULL};
    int rc = posix_spawn(&w->pid, rlpost_path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
        fprintf(stderr, "swarm: cannot start %s: %s\n", rlpost_path, strerror(rc));
        close(out[0]);
        w->pid = 0;
        return -1;
    }
    char line[1024];
    size_t n = 0;
    while (n < sizeof line - 1 && !memchr(line, '\n', n)) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 120000) <= 0)
            break;
        ssize_t k = read(out[0], line + n, sizeof line - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    line[n] = '\0';
    close(out[0]);
    /* {"listening": "http://127.0.0.1:PORT", "model": ..., "weight_version": V, ...} */
    const char *u = strstr(line, "\"listening\": \"http://127.0.0.1:");
    const char *v = strstr(line, "\"weight_version\": ");
    if (!u || !v) {
        fprintf(stderr, "swarm: worker %d gave no listening line (see %s): %s\n", index, log, line);
        kill(w->pid, SIGKILL);
        waitpid(w->pid, NULL, 0);
        w->pid = 0;
        return -1;
    }
    w->port = (unsigned)strtoul(u + strlen("\"listening\": \"http://127.0.0.1:"), NULL, 10);
    w->start_version = strtoull(v + strlen("\"weight_version\": "), NULL, 10);
    snprintf(w->url, sizeof w->url, "http://127.0.0.1:%u", w->port);
    return 0;
}

static void worker_stop(worker *w, int sig)
{
    if (w->pid <= 0)
        return;
    kill(w->pid, sig);
    waitpid(w->pid, NULL, 0);
    w->pid = 0;
}

/* GET /health on loopback with a plain socket: the "version" it reports,
 * or -1. */
static long long health_version(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    long long v = -1;
    char buf[4096];
    size_t n = 0;
    const char req[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, req, sizeof req - 1) == sizeof req - 1) {
        ssize_t k;
        while (n < sizeof buf - 1 && (k = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
            n += (size_t)k;
        buf[n] = '\0';
        const char *p = strstr(buf, "\"version\":");
        if (p)
            v = strtoll(p + strlen("\"version\":"), NULL, 10);
    }
    close(fd);
    return v;
}

/* ---- the rollout side ---------------------------------------------------------- */

/* A llama2.c tokenizer.bin of @p vocab pieces for a checkpoint without one:
 * <unk>, BOS, EOS, the printable ASCII characters, then lower-case letter
 * pairs (int32 max_len, then per piece float32 score, int32 length,
 * bytes). The prompts are text; this turns them into ids the model knows. */
static int write_tokenizer(const char *path, int32_t vocab)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int32_t max_len = 6;
    fwrite(&max_len, 4, 1, f);
    char piece[16];
    for (int32_t i = 0, c = 32, a = 'a', b = 'a'; i < vocab; i++) {
        if (i < 3)
            snprintf(piece, sizeof piece, "%s", i == 0 ? "<unk>" : i == 1 ? "\n<s>\n" : "\n</s>\n");
        else if (c < 127)
            snprintf(piece, sizeof piece, "%c", c++);
        else if (a <= 'z') {
            snprintf(piece, sizeof piece, "%c%c", a, b);
            if (++b > 'z')
                b = 'a', a++;
        } else
            snprintf(piece, sizeof piece, "<%d>", (int)i); /* (a vocabulary past 3 + 95 + 676 pieces) */
        float score = -(float)i;
        int32_t len = (int32_t)strlen(piece);
        fwrite(&score, 4, 1, f);
        fwrite(&len, 4, 1, f);
        fwrite(piece, 1, (size_t)len, f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* the reward: share of even token ids in the completion (learnable, cheap) */
static int even_share(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    size_t even = 0;
    for (size_t k = 0; k < req->n_completion_tokens; k++)
        even += req->completion_tokens[k] % 2 == 0;
    res->score = req->n_completion_tokens ? (double)even / (double)req->n_completion_tokens : 0;
    return 0;
}

/* the rollout worker's warnings (a pull that missed a dead worker) */
static void log_warning(int level, const char *message, void *payload)
{
    (void)level, (void)payload;
    fprintf(stderr, "swarm: %s\n", message);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* ---- main: the trainer ------------------------------------------------------------ */

static int find_rlpost(const char *argv0)
{
    if (opt.rlpost) {
        snprintf(rlpost_path, sizeof rlpost_path, "%s", opt.rlpost);
        return access(rlpost_path, X_OK);
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(self, sizeof self, "%s", argv0);
        n = (ssize_t)strlen(self);
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(self, sizeof self, ".");
    const char *tries[] = {"rlpost", "rlpost/rlpost", "../rlpost"};
    for (size_t i = 0; i < sizeof tries / sizeof *tries; i++) {
        snprintf(rlpost_path, sizeof rlpost_path, "%s/%s", self, tries[i]);
        struct stat st;
        if (stat(rlpost_path, &st) == 0 && S_ISREG(st.st_mode) && access(rlpost_path, X_OK) == 0)
            return 0; /* (build/examples/rlpost is the driver's folder) */
    }
    return -1;
}

int main(int argc, char **argv)
{
    opt = (options){.workers = 2, .steps = 8, .eta = 1, .group = 4, .prompts = 4, .max_new = 32, .threads = 1,
                    .kill_at = -1, .restart_at = -1};
    int bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-') {
            bad = opt.model != NULL;
            opt.model = a;
            continue;
        }
        if (!val)
            bad = 1;
        else if (!strcmp(a, "--rlpost"))
            opt.rlpost = val;
        else if (!strcmp(a, "--dir"))
            opt.dir = val;
        else if (!strcmp(a, "--workers"))
            bad = parse_long(val, 1, MAX_WORKERS, &opt.workers);
        else if (!strcmp(a, "--steps"))
            bad = parse_long(val, 1, 100000, &opt.steps);
        else if (!strcmp(a, "--eta"))
            bad = parse_long(val, 0, 1000, &opt.eta);
        else if (!strcmp(a, "--group"))
            bad = parse_long(val, 2, 128, &opt.group);
        else if (!strcmp(a, "--prompts"))
            bad = parse_long(val, 1, 256, &opt.prompts);
        else if (!strcmp(a, "--max-new-tokens"))
            bad = parse_long(val, 1, 200, &opt.max_new);
        else if (!strcmp(a, "--threads"))
            bad = parse_long(val, 0, 256, &opt.threads);
        else if (!strcmp(a, "--kill-worker-at"))
            bad = parse_long(val, 0, 100000, &opt.kill_at);
        else if (!strcmp(a, "--restart-worker-at"))
            bad = parse_long(val, 0, 100000, &opt.restart_at);
        else
            bad = 1;
        if (bad)
            fprintf(stderr, "swarm: bad argument '%s'%s%s\n", a, val ? " " : "", val ? val : "");
        i++;
    }
    if (bad || !opt.model || (opt.restart_at >= 0 && (opt.kill_at < 0 || opt.restart_at <= opt.kill_at))) {
        if (!bad && opt.model)
            fprintf(stderr, "swarm: --restart-worker-at needs an earlier --kill-worker-at\n");
        usage();
        return 2;
    }
    rlp_model_info info = {.version = RLP_MODEL_INFO_VERSION};
    if (rlp_model_inspect(&info, opt.model) != RLP_OK) {
        fprintf(stderr, "swarm: %s: %s (skipped)\n", opt.model, rlp_error_last());
        return 77;
    }
    if (find_rlpost(argv[0]) != 0) {
        fprintf(stderr, "swarm: no rlpost binary (give --rlpost PATH)\n");
        return 2;
    }
    char dir_buf[] = "/tmp/rlpost-swarm-XXXXXX";
    if (!opt.dir) {
        if (!mkdtemp(dir_buf)) {
            fprintf(stderr, "swarm: mkdtemp: %s\n", strerror(errno));
            return 1;
        }
        opt.dir = dir_buf;
    } else if (mkdir(opt.dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "swarm: %s: %s\n", opt.dir, strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    fprintf(stderr, "swarm: %s, %ld workers (%s), folder %s\n", opt.model, opt.workers, rlpost_path, opt.dir);

    /* the trainer's policy */
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = (int32_t)opt.threads;
    rlp_context *ctx;
    CHECK(rlp_context_create(&ctx, &co));
    rlp_policy *policy;
    CHECK(rlp_policy_load(&policy, ctx, opt.model, NULL));

    /* the workers */
    const char *urls[MAX_WORKERS];
    for (long i = 0; i < opt.workers; i++) {
        if (worker_start(&workers[i], (int)i, 0) != 0) {
            for (long j = 0; j < i; j++)
                worker_stop(&workers[j], SIGTERM);
            return 1;
        }
        urls[i] = workers[i].url;
        fprintf(stderr, "swarm: worker %ld (pid %d) at %s\n", i, (int)workers[i].pid, workers[i].url);
    }

    /* the model's vocabulary as text pieces (see write_tokenizer) */
    char tok_path[PATH_MAX];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", opt.dir);
    rlp_tokenizer *tok = NULL;
    if (write_tokenizer(tok_path, info.vocab_size) != 0) {
        fprintf(stderr, "swarm: cannot write %s: %s\n", tok_path, strerror(errno));
        return 1;
    }
    CHECK(rlp_tokenizer_load(&tok, tok_path));

    rlp_remote_options ro = RLP_REMOTE_OPTIONS_INIT;
    ro.urls = urls;
    ro.n_urls = (size_t)opt.workers;
    ro.timeout_ms = 120000;
    ro.max_retries = 3;
    rlp_rollout_engine *engine;
    CHECK(rlp_rollout_engine_create_remote(&engine, tok, &ro));

    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = RLP_SYNC_ASYNC;
    so.transport = RLP_TRANSPORT_HTTP;
    so.max_staleness = (uint32_t)opt.eta;
    so.batch_groups = (uint32_t)opt.prompts;
    so.dir = opt.dir;
    so.urls = urls;
    so.n_urls = (size_t)opt.workers;
    so.timeout_ms = 60000;
    so.max_retries = 2;
    rlp_synchronizer *sync;
    CHECK(rlp_synchronizer_create(&sync, &so));

    rlp_buffer_options bo = RLP_BUFFER_OPTIONS_INIT;
    bo.sync = sync; /* one η: the gate's */
    rlp_replay_buffer *buf;
    CHECK(rlp_replay_buffer_create(&buf, &bo));

    CHECK(rlp_synchronizer_publish(sync, policy)); /* version 0: what every worker starts from */

    /* the rollout side: prompts, reward, and the library's rollout worker */
    rlp_task *task;
    CHECK(rlp_task_create(&task, "arith", "{\"seed\": 7, \"chat\": false}"));
    rlp_reward_options rwo = RLP_REWARD_OPTIONS_INIT;
    rwo.n_threads = 1;
    rlp_reward_fn *reward;
    CHECK(rlp_reward_fn_create_callback(&reward, even_share, &rwo, NULL));
    rlp_rollout_worker_options wo;
    CHECK(rlp_rollout_worker_options_init(&wo, RLP_ROLLOUT_WORKER_OPTIONS_VERSION));
    wo.prompts_per_batch = (uint32_t)opt.prompts;
    wo.seed = 7;
    wo.sampling.n = (uint32_t)opt.group;
    wo.sampling.max_new_tokens = (uint32_t)opt.max_new;
    wo.sampling.ignore_eos = 1;
    wo.remote = 1; /* a pull that misses a dead worker is a warning; seeds fit the servers */
    wo.log_fn = log_warning;
    rlp_rollout_worker *rollout;
    CHECK(rlp_rollout_worker_create(&rollout, engine, task, reward, sync, buf, &wo));
    CHECK(rlp_rollout_worker_start(rollout));

    size_t n_ids = 0, cap_ids = 1024;
    uint64_t *ids = malloc(cap_ids * sizeof *ids); /* the group ids consumed, in order */
    if (!ids) {
        fprintf(stderr, "swarm: out of memory\n");
        return 1;
    }

    int failed = 0;
    uint64_t trained_traj = 0;
    long long rejoin_start = -1, rejoin_expected = -1, rejoin_health = -1, rejoin_trainer = -1;
    int rejoin_pending = 0;
    double t0 = now(), train_s = 0;
    for (long step = 0; step < opt.steps && !failed; step++) {
        if (step == opt.kill_at && workers[0].pid > 0) {
            fprintf(stderr, "swarm: step %ld: kill -9 worker 0 (pid %d)\n", step, (int)workers[0].pid);
            worker_stop(&workers[0], SIGKILL);
        }
        if (step == opt.restart_at) {
            uint64_t published = 0;
            CHECK(rlp_synchronizer_version(&published, sync));
            unsigned port = workers[0].port;
            if (worker_start(&workers[0], 0, port) != 0) {
                fprintf(stderr, "swarm: step %ld: worker 0 did not restart on port %u\n", step, port);
                failed = 1;
                break;
            }
            rejoin_start = (long long)workers[0].start_version;
            rejoin_expected = (long long)published;
            rejoin_pending = 1;
            fprintf(stderr, "swarm: step %ld: worker 0 restarted (pid %d) at %s, weight version %llu (published %llu)\n",
                    step, (int)workers[0].pid, workers[0].url, (unsigned long long)workers[0].start_version,
                    (unsigned long long)published);
        }
        uint64_t v;
        CHECK(rlp_policy_version(&v, policy));
        /* B groups at most η versions old; while waiting, a rollout worker
         * that failed (a group that failed on every URL `retries` times)
         * ends the run */
        rlp_batch *b = NULL;
        int rc = RLP_E_TIMEOUT;
        const char *why = NULL;
        for (int wait = 0; rc == RLP_E_TIMEOUT && wait < 600; wait++) /* 600 × 0.5 s */
            if ((rc = rlp_replay_buffer_pull(&b, buf, (size_t)opt.prompts, v, 500)) == RLP_E_TIMEOUT &&
                rlp_rollout_worker_error(rollout, &why) != RLP_OK) {
                fprintf(stderr, "swarm: step %ld: the rollout worker failed: %s\n", step, why);
                break;
            }
        if (rc != RLP_OK) {
            if (!why)
                fprintf(stderr, "swarm: step %ld: no batch: %s\n", step, rlp_error_last());
            failed = 1;
            break;
        }
        size_t n;
        CHECK(rlp_batch_size(&n, b));
        uint64_t last = 0;
        for (size_t i = 0; i < n; i++) {
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            CHECK(rlp_batch_get(&t, b, i));
            if (t.group_id == last)
                continue; /* each group is contiguous */
            last = t.group_id;
            if (n_ids == cap_ids) {
                uint64_t *grown = realloc(ids, 2 * cap_ids * sizeof *ids);
                if (!grown) {
                    fprintf(stderr, "swarm: out of memory\n");
                    exit(1);
                }
                ids = grown;
                cap_ids *= 2;
            }
            ids[n_ids++] = t.group_id;
        }
        double a = now();
        rlp_rl_stats st = {.version = 1};
        CHECK(rlp_policy_train_rl(policy, b, NULL, NULL, &st));
        CHECK(rlp_synchronizer_publish(sync, policy));
        train_s += now() - a;
        trained_traj += st.n_seqs;
        rlp_batch_free(b);
        if (rejoin_pending) {
            /* the next pull after the restart: tell the servers (this
             * thread's pull; the rollout worker's is equivalent) and ask
             * the restarted worker which version it holds */
            if (rlp_synchronizer_pull(sync, NULL) != RLP_OK)
                fprintf(stderr, "swarm: pull after restart: %s\n", rlp_error_last());
            rejoin_health = health_version(workers[0].port);
            rejoin_trainer = (long long)st.policy_version;
            rejoin_pending = 0;
        }
        rlp_buffer_stats bs = {.version = 1};
        rlp_rollout_stats rs = {.version = 1};
        rlp_replay_buffer_stats(&bs, buf);
        rlp_rollout_engine_stats(&rs, engine);
        printf("{\"step\": %ld, \"version\": %llu, \"groups\": %llu, \"trajectories\": %llu, \"reward_mean\": %.4f, "
               "\"staleness_mean\": %.3f, \"staleness_max\": %.0f, \"loss\": %.5f, \"accepted\": %llu, "
               "\"consumed\": %llu, \"dropped_stale\": %llu, \"held\": %llu, \"remote_errors\": %llu, "
               "\"workers_alive\": %d, \"seconds\": %.2f}\n",
               step, (unsigned long long)st.policy_version, (unsigned long long)st.n_groups,
               (unsigned long long)st.n_seqs, st.reward_mean, st.staleness_mean, st.staleness_max, st.loss,
               (unsigned long long)bs.accepted, (unsigned long long)bs.consumed,
               (unsigned long long)bs.dropped_stale, (unsigned long long)bs.size,
               (unsigned long long)rs.remote_errors, workers[0].pid > 0 ? (int)opt.workers : (int)opt.workers - 1,
               now() - t0);
        fflush(stdout);
    }
    double wall = now() - t0;

    /* stop the rollout side: the worker closes the gate and the buffer and
     * aborts a generate call in flight; what it held is released
     * unaccepted, nothing half-done is pushed */
    CHECK(rlp_rollout_worker_stop(rollout));
    rlp_rollout_worker_stats ws = {.version = 1};
    CHECK(rlp_rollout_worker_stats_get(&ws, rollout));
    int worker_failed = rlp_rollout_worker_error(rollout, NULL) != RLP_OK;

    rlp_buffer_stats bs = {.version = 1};
    rlp_rollout_stats rs = {.version = 1};
    rlp_sync_stats ss = {.version = 1};
    rlp_replay_buffer_stats(&bs, buf);
    rlp_rollout_engine_stats(&rs, engine);
    rlp_synchronizer_stats(&ss, sync);
    /* every group id consumed once */
    qsort(ids, n_ids, sizeof *ids, cmp_u64);
    uint64_t consumed_ids = 0, duplicates = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (i && ids[i] == ids[i - 1])
            duplicates++;
        else
            consumed_ids++;
    }
    int books = ws.groups_pushed == bs.accepted && bs.accepted == bs.consumed + bs.dropped_stale + bs.size &&
                consumed_ids == bs.consumed && duplicates == 0;
    int rejoined = opt.restart_at < 0 ||
                   (rejoin_start == rejoin_expected && rejoin_health >= 0 && rejoin_health == rejoin_trainer);
    int ok = !failed && books && rejoined;
    printf("{\"summary\": true, \"ok\": %s, \"steps\": %ld, \"workers\": %ld, \"eta\": %ld, \"seconds\": %.2f, "
           "\"trained_trajectories\": %llu, \"trajectories_per_s\": %.2f, \"generated_trajectories\": %llu, "
           "\"trainer_busy_fraction\": %.3f, \"pushed_groups\": %llu, \"accepted\": %llu, \"consumed\": %llu, "
           "\"dropped_stale\": %llu, \"held\": %llu, \"consumed_distinct_ids\": %llu, \"duplicates\": %llu, "
           "\"error_groups\": %llu, \"unpushed_at_close\": %llu, \"remote_errors\": %llu, \"pull_failures\": %llu, "
           "\"http_failures\": %llu, \"weight_loads\": %llu, \"rejoin_start_version\": %lld, "
           "\"rejoin_published_version\": %lld, \"rejoin_health_version\": %lld, \"rejoin_trainer_version\": %lld}\n",
           ok ? "true" : "false", opt.steps, opt.workers, opt.eta, wall, (unsigned long long)trained_traj,
           wall > 0 ? (double)trained_traj / wall : 0.0,
           (unsigned long long)((ws.groups_pushed + ws.groups_released) * (uint64_t)opt.group),
           wall > 0 ? train_s / wall : 0.0, (unsigned long long)ws.groups_pushed, (unsigned long long)bs.accepted,
           (unsigned long long)bs.consumed, (unsigned long long)bs.dropped_stale, (unsigned long long)bs.size,
           (unsigned long long)consumed_ids, (unsigned long long)duplicates,
           (unsigned long long)(worker_failed ? ws.groups_released : 0),
           (unsigned long long)(worker_failed ? 0 : ws.groups_released), (unsigned long long)rs.remote_errors,
           (unsigned long long)ss.http_failures, (unsigned long long)ss.http_failures,
           (unsigned long long)ss.weight_loads, rejoin_start, rejoin_expected, rejoin_health, rejoin_trainer);
    if (!ok)
        fprintf(stderr, "swarm: FAILED:%s%s%s\n", failed ? " the run stopped early;" : "",
                books ? "" : " the group bookkeeping does not add up;",
                rejoined ? "" : " the restarted worker did not rejoin at the current version;");

    for (long i = 0; i < opt.workers; i++)
        worker_stop(&workers[i], SIGTERM);
    if (opt.dir == dir_buf && ok) /* our temporary folder (kept, with the worker logs, on failure) */
        nftw(dir_buf, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(ids);
    rlp_rollout_worker_free(rollout);
    rlp_reward_fn_free(reward);
    rlp_task_free(task);
    rlp_replay_buffer_free(buf);
    rlp_synchronizer_free(sync);
    rlp_rollout_engine_free(engine);
    rlp_tokenizer_free(tok);
    rlp_policy_free(policy);
    rlp_context_free(ctx);
    return ok ? 0 : 1;
}
