/* What the files of `rlpost train` share: the state of one run
 * (cmd_train.c: configuration, the trainer handle, evaluation, files),
 * several ranks (train_dist.c) and the check of rollout.urls
 * (train_urls.c). All use the public API only (rlpost.h). */
#ifndef RLPOST_TRAIN_H
#define RLPOST_TRAIN_H

#include "rlpost.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define ERR_CAP 1024

/* evaluation intervals: the 95 % normal quantile, bootstrap resamples */
#define EVAL_Z95 1.959963984540054
#define EVAL_BOOTSTRAP 2000

typedef struct run {
    json_t *cfg;
    char err[ERR_CAP];
    rlp_context *ctx;
    rlp_policy *policy, *ref;
    rlp_trainer *trainer;        /* the run loop (lib/train): engines, synchronizer, buffer, rollout thread */
    rlp_tokenizer *ext_tok;      /* a tokenizer file for a model without one (token-level models) */
    const rlp_tokenizer *tok;    /* what the task renders with: the policy's, or NULL with ext_tok */
    rlp_task *task;              /* async: the rollout thread's while it runs */
    rlp_reward_fn *reward, *format_fn, *acc_fn;
    rlp_reward_fn *parse_fn;     /* 1 when the accuracy verifier finds an answer of the task's type, else 0 */
    rlp_reward_fn *terms[8];     /* a combined reward's terms, scored alone for samples.jsonl (n_terms > 1) */
    char term_names[8][64];
    size_t n_terms;
    long long overlap, overlap_checked; /* held-out prompts among the run's training prompts; -1 = not counted yet */
    double acc_threshold;
    void *reward_lib;
    rlp_sampling_options sampling;
    const char *stops[16];       /* sampling.stop, borrowed from cfg */
    rlp_env *env;                /* a multi-turn run's environment (env.name / env.url), or NULL */
    rlp_rl_options rl;
    uint32_t max_gen_batches;    /* DAPO over-sampling for the trainer: 0 off (async, several ranks, no filter) */
    rlp_optimizer_options opt;
    int pull, async, remote, dtype;
    int swarm;                   /* swarm.listen set: workers join through the coordinator (train_swarm.c) */
    struct train_swarm *coord;   /* the coordinator while it runs, or NULL */
    char swarm_token[260];       /* its bearer token (swarm.token_file or RLPOST_SERVE_TOKEN): the workers' too */
    int gguf_type;               /* checkpoint.gguf: rlp_gguf_type of the final model.gguf, or -1 = none */
    int threads_train, threads_rollout; /* async, local engine: the two contexts' shares of `threads` */
    char weights[PATH_MAX];      /* what the policy was loaded from (the model, or the resumed checkpoint) */
    char out[PATH_MAX];
    int no_trainer;              /* `rlpost rollout-worker`: train_setup() makes no trainer */
    int rank, world;             /* data parallelism: this process's rank of `world` (0 of 1 alone) */
    rlp_comm *comm;              /* world > 1: the ranks' process group (train_dist.c) */
    int shared_gpu;              /* backend cuda: some ranks share a GPU (the group then uses SHM, not NCCL) */
} run;

/* snprintf that callers may let truncate (paths and messages are cut, never
 * overflowed); a function so that -Wformat-truncation judges the callers'
 * sizes by the checks they do, not by worst-case argument lengths. */
__attribute__((format(printf, 3, 4))) static inline int fmt(char *buf, size_t cap, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(buf, cap, f, ap);
    va_end(ap);
    return n;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A JSON number, or null for NaN and ±Inf (JSON has neither). */
static inline json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* splitmix64: the sampling seed of a step is a pure function of (seed, step). */
static inline uint64_t mix_seed(uint64_t seed, uint64_t step)
{
    uint64_t z = seed * UINT64_C(0x9e3779b97f4a7c15) + step + 1;
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------ */
/* train_setup.c: configuration → handles                                   */
/* ------------------------------------------------------------------------ */

/* Parses CONFIG.json [--set k=v]... [--resume DIR | --checkpoint DIR] into
 * r->cfg (defaults filled in); *dir: the flag's folder or NULL. 0, or the
 * exit status (usage printed). */
/* What train_parse_args returns after printing --help: the caller exits 0. */
#define TRAIN_ARGS_HELP (-1)
int train_parse_args(int argc, char **argv, const char *cmd, const char *dir_flag, run *r, const char **dir);

/* Checks the configuration: ranges, names, modes, files (the launcher of
 * several ranks checks it once before forking them). 0, or -1 with one
 * line in r->err. */
int train_check_config(run *r);

/* Checks the configuration and creates everything a run needs, before
 * anything is written: task, reward, metric scorers, context, policy
 * (from @p weights), reference, optimizer, ranks, and the trainer
 * (need_train 0: a sync trainer over the frozen policy, for `rlpost eval`).
 * 0, or the exit status with one line in r->err. */
int train_setup(run *r, const char *weights, int need_train);

/* Frees what train_setup() made (and the configuration). */
void train_teardown(run *r);

/* The first setting a resumed or restarted run must keep that differs
 * between a saved configuration and @p cfg, or NULL when none does. */
const char *train_changed_setting(json_t *saved, const json_t *cfg);

/* Whether @p path names a readable regular file. */
int train_readable_file(const char *path);

/* The training task (@p eval 0) or the held-out one (1) of the
 * configuration. 0, or -1 with one line in r->err. */
int train_make_task(run *r, int eval, rlp_task **out);

/* ------------------------------------------------------------------------ */
/* train_eval.c: evaluations and samples                                    */
/* ------------------------------------------------------------------------ */

/* Greedy and/or sampled completions (eval.greedy, eval.samples) on the
 * first eval.n prompts of the held-out task, with 95 % intervals: the
 * eval.jsonl record (NULL on failure, reported on stderr). Every
 * completion goes to OUT/samples.jsonl when @p out is set, and to *keep
 * (a new array) when @p keep is. */
json_t *train_evaluate(run *r, long long step, const char *out, json_t **keep);

/* The change from the first evaluation to the last, prompt by prompt, with
 * paired bootstrap 95 % intervals, or NULL. */
json_t *train_eval_change(const json_t *first, const json_t *last);

/* The trainer's on_batch (payload: the run): rank 0 writes samples.per_step
 * of each step's completions to samples.jsonl. */
int train_on_batch(const rlp_batch *batch, uint64_t step, void *payload);

/* ------------------------------------------------------------------------ */
/* train_files.c: files, checkpoints, plot                                  */
/* ------------------------------------------------------------------------ */

/* Writes text to path through path.tmp, fsync and rename. 0 or -1 (errno). */
int train_write_atomic(const char *path, const char *text);

/* mkdir -p. 0 or -1 (errno). */
int train_mkdir_p(const char *path);

/* OUTPUT/checkpoints/step_K (written as .tmp-step_K, renamed, named by
 * "latest"; older ones pruned to checkpoint.keep). 0, or -1 (reported). */
int train_checkpoint(run *r, long long step);

/* The checkpoint folder --resume DIR names: DIR itself (holding
 * state.json), or the one DIR/checkpoints/latest or DIR/latest names. 0 or
 * -1 when there is none. */
int train_find_checkpoint(const char *dir, char *out, size_t cap);

/* Keeps the records of a JSONL file whose "step" is ≤ step. -1 when the
 * file could not be rewritten (it is then left as it was). */
int train_truncate_jsonl(const char *path, long long step);

/* Appends the records of @p arr (or one record) to OUT/FILE, reals with
 * @p digits significant digits (17: exact). */
void train_append_jsonl_all(const char *out, const char *file, json_t *arr, int digits);
void train_append_jsonl(const char *out, const char *file, json_t *rec);

/* OUT/reward.png from metrics.jsonl with gnuplot (the path), or NULL when
 * gnuplot is missing or failed (said on stderr). */
const char *train_plot(const char *out);

/* ------------------------------------------------------------------------ */
/* train_dist.c: several ranks (data parallelism)                           */
/* ------------------------------------------------------------------------ */

/* Decides this process's part: alone (rank 0 of 1); a rank started by a
 * launcher (RLPOST_RANK or RANK in the environment, with the world size
 * and rendezvous beside it); or the launcher (distributed.world_size > 1
 * and no rank in the environment). Sets r->rank and r->world (the
 * launcher's: the world size, rank 0). 0: go on as this rank; 1: launch;
 * -1: bad setting (one line in r->err). */
int train_dist_resolve(run *r);

/* The launcher, torchrun-style: forks one process per rank (each returns
 * 0 here, as that rank), waits for them, forwards an interrupt sent to it,
 * and stops the other ranks when one fails. Returns 1 in the launcher
 * after its ranks ended (*exit_code: the first failure's status, or 0).
 * Call it before any thread exists. */
int train_dist_launch(run *r, int *exit_code);

/* After the context exists: joins the process group (world > 1). 0, or
 * -1 with one line in r->err. */
int train_dist_join(run *r);

/* After the policy is loaded: checks that every rank runs the same
 * configuration (a digest per top-level key; threads, device and
 * distributed may differ) and gives every rank rank 0's weights. 0, or -1
 * with one line in r->err naming the key. */
int train_dist_agree(run *r);

/* ------------------------------------------------------------------------ */
/* train_urls.c                                                             */
/* ------------------------------------------------------------------------ */

/* Checks rollout.urls before anything is written: each an http(s) base
 * URL, no repeats, and (http) answering GET /health. One line in r->err
 * naming the key on failure. */
int train_check_urls(run *r);

/* The multi-turn options of the run (env NULL: single-turn). */
void train_multiturn(const run *r, rlp_multiturn_options *mt);
/* Splits an http(s) base URL into host, port and path; -1 when malformed. */
int train_parse_url(const char *url, int *https, char *host, size_t hcap, char *port, size_t pcap, char *path,
                    size_t cap);
/* GET {path}/health of http://host:port over plain HTTP, 5 s at most per
 * step (connect, answer): 0 when the server answers 200, else -1 with the
 * reason in @p why. */
int train_probe_health(const char *host, const char *port, const char *path, char *why, size_t cap);

/* ------------------------------------------------------------------------ */
/* train_swarm.c: the swarm's coordinator (swarm.listen)                    */
/* ------------------------------------------------------------------------ */

typedef struct train_swarm train_swarm;
/* Checks the swarm.* keys (train_check_config): 0, or -1 with one line in
 * r->err naming the key. Sets r->swarm. */
int train_swarm_check(run *r);
/* Starts the coordinator of a trainer with remote workers (after
 * train_setup): the token (swarm.token_file, else RLPOST_SERVE_TOKEN), the
 * routes on swarm.listen, the thread that marks silent workers suspect and
 * dead; rollout.urls stay in the dispatch set as static members. 0 with
 * r->coord, or -1 with one line in r->err. */
int train_swarm_start(run *r);
/* Waits until swarm.min_workers workers are in the dispatch set, up to
 * swarm.join_timeout_s (and while *stop is 0). 0, or -1 with one line in
 * r->err. */
int train_swarm_wait(run *r, volatile sig_atomic_t *stop);
/* The trainer's version after a step (what register and heartbeat answer). */
void train_swarm_set_version(train_swarm *s, uint64_t version);
/* The summary's "swarm" object: settings, the ledger with each worker's
 * counters from rlp_trainer_server_stats() (new reference). */
json_t *train_swarm_summary(run *r);
/* Stops the routes and the thread (before the trainer is freed). NULL is a no-op. */
void train_swarm_stop(train_swarm *s);

#endif
